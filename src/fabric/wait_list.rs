//! Who is waiting on one completion queue or counter: async tasks (their
//! wakers) and blocked threads (a count; they sleep on the owner's
//! `Condvar`).
//!
//! A plain data structure kept under its owner's leaf mutex, so a waiter
//! checks its condition and registers in one critical section and a change
//! cannot slip between the two (no lost wake-ups). A change wakes *every*
//! waiter: each one re-checks its own condition (a counter's waiters wait
//! for different thresholds). [`wake_all`] moves the wakers out in small
//! batches and wakes them after the mutex is released, so no executor code
//! ever runs under our lock, and nothing is allocated once the list has
//! grown to the largest number of concurrent waiters.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// Wakers moved out per critical section by [`wake_all`].
const BATCH: usize = 8;

/// The waiters of one object. Keys identify async waiters (one per
/// future, allocated on its first registration).
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    armed: Vec<(u64, Waker)>,
    next_key: u64,
    sleepers: usize,
}

impl WaitList {
    /// A key for a new async waiter.
    pub(crate) fn new_key(&mut self) -> u64 {
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        key
    }

    /// Arms `key` with `waker`, replacing the waker it had (a task can move
    /// between executors' threads).
    pub(crate) fn arm(&mut self, key: u64, waker: &Waker) {
        match self.armed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => old.clone_from(waker),
            None => self.armed.push((key, waker.clone())),
        }
    }

    /// Forgets `key` (a future finished or was dropped); no-op if it is not
    /// armed.
    pub(crate) fn disarm(&mut self, key: u64) {
        if let Some(i) = self.armed.iter().position(|(k, _)| *k == key) {
            self.armed.swap_remove(i);
        }
    }

    /// A thread is about to sleep on the owner's condvar.
    pub(crate) fn add_sleeper(&mut self) {
        self.sleepers += 1;
    }

    /// A thread stopped sleeping.
    pub(crate) fn remove_sleeper(&mut self) {
        self.sleepers = self.sleepers.saturating_sub(1);
    }

    /// Armed wakers plus sleeping threads.
    pub(crate) fn count(&self) -> usize {
        self.armed.len() + self.sleepers
    }

    /// Whether nobody waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Moves up to [`BATCH`] armed wakers into `batch`; true if more remain.
    fn take_batch(&mut self, batch: &mut [Option<Waker>; BATCH]) -> bool {
        for slot in batch.iter_mut() {
            match self.armed.pop() {
                Some((_, waker)) => *slot = Some(waker),
                None => return false,
            }
        }
        !self.armed.is_empty()
    }
}

/// Locks `mutex`, ignoring poisoning: every critical section on our state
/// leaves it consistent (pushes and pops only), so a panic elsewhere while
/// it was held does not make it wrong.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wakes every waiter of the list that `list` finds in the state `guard`
/// holds, consuming the guard: armed wakers are woken outside the lock
/// (relocking for more if there were over [`BATCH`]) and sleeping threads
/// get a `notify_all` on `cond`. `after` sees the list after each change
/// (counters mirror its count in an atomic).
pub(crate) fn wake_all<'a, T>(
    mutex: &'a Mutex<T>,
    mut guard: MutexGuard<'a, T>,
    cond: &Condvar,
    list: impl Fn(&mut T) -> &mut WaitList,
    after: impl Fn(&WaitList),
) {
    let sleepers = list(&mut guard).sleepers > 0;
    let mut batch: [Option<Waker>; BATCH] = Default::default();
    loop {
        let waiters = list(&mut guard);
        let more = waiters.take_batch(&mut batch);
        after(waiters);
        drop(guard);
        for waker in batch.iter_mut().filter_map(Option::take) {
            waker.wake();
        }
        if !more {
            break;
        }
        guard = lock(mutex);
    }
    if sleepers {
        cond.notify_all();
    }
}

/// Paces the changing thread of a wake-up stress test so that its change
/// lands right where the waiting thread checks and registers, the window
/// where a lost wake-up hides. The waiter reports each round whether the
/// change was already visible when it started waiting ([`Dither::early`]);
/// the changer spins ([`Dither::spin`]) a little longer after an early
/// change and a little shorter after a late one, so the spin converges on
/// the boundary and then dithers around it.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Dither(std::sync::atomic::AtomicU64);

#[cfg(test)]
impl Dither {
    const STEP: u64 = 4;

    /// Called by the waiter, before the next round's rendezvous.
    pub(crate) fn early(&self, early: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let spin = self.0.load(Relaxed);
        let next = if early {
            spin.saturating_add(Self::STEP).min(1 << 16)
        } else {
            spin.saturating_sub(Self::STEP)
        };
        self.0.store(next, Relaxed);
    }

    /// Called by the changer after the rendezvous, before its change;
    /// `round` adds a little jitter.
    pub(crate) fn spin(&self, round: u64) {
        let n = self.0.load(std::sync::atomic::Ordering::Relaxed) + round % 3;
        for _ in 0..n {
            std::hint::spin_loop();
        }
    }
}

/// Runs `fut` to completion on this thread, but fails (returns `Err`)
/// if it stays pending and its waker is not called within `limit`: a
/// lost wake-up. (`tokio::time::timeout` would hide one, because it polls
/// the future again when it fires.)
#[cfg(test)]
pub(crate) fn block_on_strict<F: std::future::Future>(
    fut: F,
    limit: std::time::Duration,
) -> Result<F::Output, &'static str> {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake};

    #[derive(Default)]
    struct Flag {
        woken: Mutex<bool>,
        cond: Condvar,
    }
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            *lock(&self.woken) = true;
            self.cond.notify_all();
        }
    }

    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        let woken = lock(&flag.woken);
        let (mut woken, _) = flag
            .cond
            .wait_timeout_while(woken, limit, |w| !*w)
            .unwrap_or_else(PoisonError::into_inner);
        if !*woken {
            return Err("pending future never woken: lost wake-up");
        }
        *woken = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct CountWake(AtomicUsize);
    impl Wake for CountWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<CountWake>, Waker) {
        let c = Arc::new(CountWake(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn arm_replaces_and_disarm_forgets() {
        let mut list = WaitList::default();
        let (a, wa) = counting();
        let (b, wb) = counting();
        let key = list.new_key();
        list.arm(key, &wa);
        list.arm(key, &wb);
        assert_eq!(
            list.count(),
            1,
            "re-arming the same key must not add a waiter"
        );
        let other = list.new_key();
        assert_ne!(key, other);
        list.arm(other, &wa);
        list.disarm(other);
        list.disarm(other);
        assert_eq!(list.count(), 1);

        let mutex = Mutex::new(list);
        let cond = Condvar::new();
        wake_all(&mutex, lock(&mutex), &cond, |l| l, |_| {});
        assert_eq!(
            a.0.load(Ordering::SeqCst),
            0,
            "the replaced waker is not woken"
        );
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        assert!(lock(&mutex).is_empty(), "woken wakers are disarmed");
    }

    #[test]
    fn wake_all_wakes_more_than_one_batch() {
        let mut list = WaitList::default();
        let (c, w) = counting();
        for _ in 0..(3 * BATCH + 1) {
            let key = list.new_key();
            list.arm(key, &w);
        }
        list.add_sleeper();
        let mutex = Mutex::new(list);
        let cond = Condvar::new();
        let seen = AtomicUsize::new(usize::MAX);
        wake_all(
            &mutex,
            lock(&mutex),
            &cond,
            |l| l,
            |l| seen.store(l.count(), Ordering::SeqCst),
        );
        assert_eq!(c.0.load(Ordering::SeqCst), 3 * BATCH + 1);
        // The sleeper stays registered until it wakes and leaves.
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        lock(&mutex).remove_sleeper();
        lock(&mutex).remove_sleeper();
        assert!(lock(&mutex).is_empty(), "remove_sleeper saturates at zero");
    }
}
