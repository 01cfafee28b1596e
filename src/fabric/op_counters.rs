//! [`OpCounters`]: the counters behind an endpoint's
//! [`EndpointStats`], cheap enough for the 8-byte message path.
//!
//! A relaxed `fetch_add` is a locked instruction on x86, a full barrier
//! that waits for the store buffer to drain, and the message path would
//! pay four of them per round trip (messages and bytes, each way). So the
//! counters have an *owner*: the first thread that counts on an endpoint.
//! The owner adds to its own cells with a plain load and store (it is
//! their only writer, so nothing is lost); any other thread adds to a
//! second set of cells with `fetch_add`. A snapshot sums both. An
//! application that drives an endpoint from one thread pays no locked
//! instruction; one that moves between threads pays what atomics cost,
//! and every count stays exact either way.
//!
//! A thread is known by the address of a thread-local byte: unique among
//! live threads (a thread that starts after the owner exited may get the
//! same address, and then is the only writer of the owner's cells, as the
//! owner was).

use super::EndpointStats;
use crate::{Error, ErrorKind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One set of counts.
#[derive(Debug, Default)]
struct Cells {
    msgs_sent: AtomicU64,
    bytes_sent: AtomicU64,
    msgs_received: AtomicU64,
    bytes_received: AtomicU64,
    errors: AtomicU64,
    eagain: AtomicU64,
}

impl Cells {
    fn add_to(&self, out: &mut EndpointStats) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.msgs_sent += get(&self.msgs_sent);
        out.bytes_sent += get(&self.bytes_sent);
        out.msgs_received += get(&self.msgs_received);
        out.bytes_received += get(&self.bytes_received);
        out.errors += get(&self.errors);
        out.eagain += get(&self.eagain);
    }
}

/// The live counters of one endpoint (or of a domain's closed ones).
#[derive(Debug, Default)]
pub(crate) struct OpCounters {
    /// The owner thread's key ([`thread_key`]); 0 until a thread counts.
    owner: AtomicUsize,
    /// Written by the owner only, with plain loads and stores.
    mine: Cells,
    /// Written by every other thread, with `fetch_add`.
    shared: Cells,
}

thread_local! {
    /// A byte whose address names the thread.
    static KEY: u8 = const { 0 };
}

/// This thread's key: never 0.
#[inline(always)]
fn thread_key() -> usize {
    KEY.with(|k| k as *const u8 as usize)
}

/// Adds `n` to a cell only this thread writes.
#[inline(always)]
fn add_owned(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[inline(always)]
fn add_shared(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Which cell of a set a count goes to.
type Pick = fn(&Cells) -> &AtomicU64;

impl OpCounters {
    /// Adds `a` to cell `ca` and `b` to cell `cb`: owned when this thread
    /// is (or now becomes) the owner, else shared.
    #[inline(always)]
    fn add2(&self, ca: Pick, a: u64, cb: Pick, b: u64) {
        if self.owner.load(Ordering::Relaxed) == thread_key() {
            add_owned(ca(&self.mine), a);
            add_owned(cb(&self.mine), b);
        } else {
            self.add2_other(ca, a, cb, b);
        }
    }

    /// [`add2`](Self::add2) from a thread that was not the owner.
    #[cold]
    #[inline(never)]
    fn add2_other(&self, ca: Pick, a: u64, cb: Pick, b: u64) {
        let me = thread_key();
        let claimed = self
            .owner
            .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if claimed {
            add_owned(ca(&self.mine), a);
            add_owned(cb(&self.mine), b);
        } else {
            add_shared(ca(&self.shared), a);
            add_shared(cb(&self.shared), b);
        }
    }

    /// A send of `len` bytes completed.
    #[inline(always)]
    pub(crate) fn sent(&self, len: usize) {
        self.add2(|c| &c.msgs_sent, 1, |c| &c.bytes_sent, len as u64);
    }

    /// A receive of `len` bytes completed.
    #[inline(always)]
    pub(crate) fn received(&self, len: usize) {
        self.add2(|c| &c.msgs_received, 1, |c| &c.bytes_received, len as u64);
    }

    /// An operation completed with an error.
    #[cold]
    pub(crate) fn error(&self) {
        add_shared(&self.shared.errors, 1);
    }

    /// A post was refused with `error`: counted when it is `FI_EAGAIN`.
    #[cold]
    pub(crate) fn refused(&self, error: &Error) {
        if error.kind() == ErrorKind::Again {
            add_shared(&self.shared.eagain, 1);
        }
    }

    /// Adds these counts to `out`'s operation figures.
    pub(crate) fn add_to(&self, out: &mut EndpointStats) {
        self.mine.add_to(out);
        self.shared.add_to(out);
    }

    /// Moves `other`'s counts into these (an endpoint leaving its domain).
    pub(crate) fn absorb(&self, other: &OpCounters) {
        let mut s = EndpointStats::default();
        other.add_to(&mut s);
        let c = &self.shared;
        add_shared(&c.msgs_sent, s.msgs_sent);
        add_shared(&c.bytes_sent, s.bytes_sent);
        add_shared(&c.msgs_received, s.msgs_received);
        add_shared(&c.bytes_received, s.bytes_received);
        add_shared(&c.errors, s.errors);
        add_shared(&c.eagain, s.eagain);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn snapshot(c: &OpCounters) -> EndpointStats {
        let mut s = EndpointStats::default();
        c.add_to(&mut s);
        s
    }

    #[test]
    fn counts_add_up_and_only_eagain_counts_as_refused() {
        let c = OpCounters::default();
        c.sent(8);
        c.sent(0);
        c.received(5);
        c.error();
        c.refused(&Error::new(ErrorKind::Again, "full"));
        c.refused(&Error::new(ErrorKind::Inval, "bad"));
        let s = snapshot(&c);
        assert_eq!((s.msgs_sent, s.bytes_sent), (2, 8));
        assert_eq!((s.msgs_received, s.bytes_received), (1, 5));
        assert_eq!((s.errors, s.eagain), (1, 1));
        let total = OpCounters::default();
        total.absorb(&c);
        total.absorb(&c);
        let t = snapshot(&total);
        assert_eq!((t.msgs_sent, t.bytes_received, t.eagain), (4, 10, 2));
    }

    #[test]
    fn the_first_thread_owns_the_counters_and_others_lose_nothing() {
        let c = Arc::new(OpCounters::default());
        c.sent(1);
        assert_eq!(c.owner.load(Ordering::Relaxed), thread_key());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        c.sent(2);
                        c.received(3);
                    }
                })
            })
            .collect();
        for _ in 0..10_000 {
            c.received(1);
        }
        for t in threads {
            t.join().unwrap();
        }
        let s = snapshot(&c);
        assert_eq!((s.msgs_sent, s.bytes_sent), (40_001, 80_001));
        assert_eq!((s.msgs_received, s.bytes_received), (50_000, 130_000));
        // The owner's counts went to its own cells, the others' to the
        // shared ones.
        assert_eq!(c.mine.msgs_received.load(Ordering::Relaxed), 10_000);
        assert_eq!(c.shared.msgs_sent.load(Ordering::Relaxed), 40_000);
    }
}
