//! The reactor's set of sources and one progress round over them.
//!
//! The list is an immutable snapshot (`Arc<[Arc<Entry>]>`) behind a
//! read-write lock: a round clones the snapshot and releases the lock
//! before calling any source, so sources may add or remove sources from
//! inside `progress` without deadlocking, and adding or removing never
//! waits for a round. Each entry carries a small flag word:
//!
//! * `BUSY`: a thread is inside this source's `progress`. Taken with one
//!   compare-exchange; a round that finds it taken skips the source (the C
//!   provider's try-lock), so one source never runs on two threads at once.
//! * `REMOVED`: set by `remove`; rounds no longer start the source. `remove`
//!   then waits for a running call to end (unless that call is on its own
//!   thread, further up the stack), so after it returns the source is never
//!   called again.
//! * `POISONED`: the source panicked; it is never called again.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicU64, AtomicU8,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use std::sync::{Arc, RwLock};

use crate::source::{Progress, ProgressSource, SourceId};
use crate::stats::{bump, Counters};

const BUSY: u8 = 1;
const REMOVED: u8 = 2;
const POISONED: u8 = 4;

/// A small per-thread number (0 = nobody), to recognise "the running call is
/// further up my own stack" in `remove`.
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: Cell<u64> = const { Cell::new(0) };
    }
    NUMBER.with(|n| {
        if n.get() == 0 {
            n.set(NEXT.fetch_add(1, Relaxed));
        }
        n.get()
    })
}

pub(crate) struct Entry {
    id: SourceId,
    pub(crate) source: Arc<dyn ProgressSource>,
    flags: AtomicU8,
    /// `thread_number()` of the thread inside `progress`, 0 when none.
    owner: AtomicU64,
}

/// Ends a `progress` call: releases BUSY, poisons on panic.
struct Running<'a> {
    entry: &'a Entry,
    counters: &'a Counters,
    /// Whether the thread was already unwinding when the call started (a
    /// `Drop` that drives progress): then the call itself did not panic.
    unwinding_before: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.unwinding_before {
            self.entry.flags.fetch_or(POISONED, AcqRel);
            bump(&self.counters.source_panics);
        }
        self.entry.owner.store(0, Relaxed);
        self.entry.flags.fetch_and(!BUSY, Release);
    }
}

fn call(entry: &Entry, counters: &Counters) -> Progress {
    let _running = Running {
        entry,
        counters,
        unwinding_before: std::thread::panicking(),
    };
    entry.source.progress()
}

/// The sources of one reactor.
pub(crate) struct SourceList {
    next_id: AtomicU64,
    list: RwLock<Arc<[Arc<Entry>]>>,
}

impl SourceList {
    pub(crate) fn new() -> Self {
        SourceList {
            next_id: AtomicU64::new(0),
            list: RwLock::new(Arc::from(Vec::new())),
        }
    }

    /// A fresh id (ids are never reused within a reactor).
    pub(crate) fn next_id(&self) -> SourceId {
        SourceId(self.next_id.fetch_add(1, Relaxed))
    }

    fn snapshot(&self) -> Arc<[Arc<Entry>]> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.list.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Adds `source` under `id`.
    pub(crate) fn insert(&self, id: SourceId, source: Arc<dyn ProgressSource>) {
        let entry = Arc::new(Entry {
            id,
            source,
            flags: AtomicU8::new(0),
            owner: AtomicU64::new(0),
        });
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Arc<Entry>> = list.iter().cloned().collect();
        v.push(entry);
        *list = Arc::from(v);
    }

    /// Removes `id`; returns its source once no call to it is running
    /// (except one further up the calling thread's own stack).
    pub(crate) fn remove(&self, id: SourceId) -> Option<Arc<dyn ProgressSource>> {
        let entry = {
            let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
            let pos = list.iter().position(|e| e.id == id)?;
            let mut v: Vec<Arc<Entry>> = list.iter().cloned().collect();
            let entry = v.remove(pos);
            *list = Arc::from(v);
            entry
        };
        let me = thread_number();
        let mut flags = entry.flags.fetch_or(REMOVED, AcqRel);
        while flags & BUSY != 0 && entry.owner.load(Relaxed) != me {
            crate::sync::spin_wait();
            flags = entry.flags.load(Acquire);
        }
        Some(entry.source.clone())
    }

    /// Removes every source (reactor teardown).
    pub(crate) fn drain(&self) -> Vec<Arc<Entry>> {
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        let v: Vec<Arc<Entry>> = list.iter().cloned().collect();
        *list = Arc::from(Vec::new());
        for entry in &v {
            entry.flags.fetch_or(REMOVED, AcqRel);
        }
        v
    }

    /// Asks every source whether the thread may sleep now
    /// ([`ProgressSource::prepare_sleep`]); `false` as soon as one says
    /// no (the rest are not asked: the thread runs a round instead). A
    /// removed or poisoned source is skipped; a panic in one counts as a
    /// yes.
    pub(crate) fn prepare_sleep(&self) -> bool {
        let snapshot = self.snapshot();
        snapshot.iter().all(|entry| {
            entry.flags.load(Acquire) & (REMOVED | POISONED) != 0
                || catch_unwind(AssertUnwindSafe(|| entry.source.prepare_sleep())).unwrap_or(true)
        })
    }

    /// One progress round: one step of every source that is not running
    /// elsewhere, removed or poisoned. With `catch`, a panicking source is
    /// caught (and poisoned); without, the panic propagates after poisoning.
    pub(crate) fn round(&self, counters: &Counters, catch: bool) -> Progress {
        let snapshot = self.snapshot();
        let me = thread_number();
        let mut made = Progress::Idle;
        for entry in snapshot.iter() {
            if !entry.source.wants_progress() {
                continue;
            }
            if entry
                .flags
                .compare_exchange(0, BUSY, Acquire, Relaxed)
                .is_err()
            {
                continue;
            }
            entry.owner.store(me, Relaxed);
            made |= if catch {
                catch_unwind(AssertUnwindSafe(|| call(entry, counters))).unwrap_or(Progress::Idle)
            } else {
                call(entry, counters)
            };
        }
        bump(&counters.rounds);
        if made.made() {
            bump(&counters.productive_rounds);
        }
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::progress_fn;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    #[test]
    fn round_reports_made_if_any_source_made_progress() {
        let list = SourceList::new();
        let c = Counters::default();
        assert_eq!(list.round(&c, false), Progress::Idle);
        list.insert(list.next_id(), Arc::new(progress_fn(|| Progress::Idle)));
        assert_eq!(list.round(&c, false), Progress::Idle);
        let id = list.next_id();
        list.insert(id, Arc::new(progress_fn(|| Progress::Made)));
        assert_eq!(list.round(&c, false), Progress::Made);
        assert!(list.remove(id).is_some());
        assert!(list.remove(id).is_none());
        assert_eq!(list.round(&c, false), Progress::Idle);
        let s = c.snapshot();
        assert_eq!((s.rounds, s.productive_rounds), (4, 1));
    }

    /// The thread may sleep only if every source agrees; a source that
    /// panics in `prepare_sleep` does not keep it awake.
    #[test]
    fn sleep_needs_every_source_to_agree() {
        struct Armed {
            ready: AtomicBool,
            asked: AtomicUsize,
        }
        impl ProgressSource for Armed {
            fn progress(&self) -> Progress {
                Progress::Idle
            }
            fn prepare_sleep(&self) -> bool {
                self.asked.fetch_add(1, SeqCst);
                !self.ready.load(SeqCst)
            }
        }
        struct Panics;
        impl ProgressSource for Panics {
            fn progress(&self) -> Progress {
                Progress::Idle
            }
            fn prepare_sleep(&self) -> bool {
                panic!("prepare_sleep fails")
            }
        }
        let list = SourceList::new();
        assert!(list.prepare_sleep());
        let armed = Arc::new(Armed {
            ready: AtomicBool::new(false),
            asked: AtomicUsize::new(0),
        });
        list.insert(list.next_id(), armed.clone());
        list.insert(list.next_id(), Arc::new(Panics));
        assert!(list.prepare_sleep());
        armed.ready.store(true, SeqCst);
        assert!(!list.prepare_sleep());
        assert_eq!(armed.asked.load(SeqCst), 2);
    }

    /// A source whose hint says it has nothing to do is not taken (not
    /// called); once the hint turns, the next round takes it.
    #[test]
    fn a_source_that_wants_no_progress_is_skipped() {
        struct Hinted {
            wants: AtomicBool,
            calls: AtomicUsize,
        }
        impl ProgressSource for Hinted {
            fn progress(&self) -> Progress {
                self.calls.fetch_add(1, SeqCst);
                Progress::Made
            }
            fn wants_progress(&self) -> bool {
                self.wants.load(SeqCst)
            }
        }
        let list = SourceList::new();
        let c = Counters::default();
        let s = Arc::new(Hinted {
            wants: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
        });
        list.insert(list.next_id(), s.clone());
        assert_eq!(list.round(&c, false), Progress::Idle);
        assert_eq!(s.calls.load(SeqCst), 0);
        s.wants.store(true, SeqCst);
        assert_eq!(list.round(&c, false), Progress::Made);
        assert_eq!(s.calls.load(SeqCst), 1);
    }

    #[test]
    fn panicking_source_is_poisoned_and_counted() {
        let list = Arc::new(SourceList::new());
        let c = Arc::new(Counters::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let calls2 = calls.clone();
        list.insert(
            list.next_id(),
            Arc::new(progress_fn(move || {
                calls2.fetch_add(1, SeqCst);
                panic!("source bug (expected by the test)");
            })),
        );
        // Caught (auto-thread style).
        assert_eq!(list.round(&c, true), Progress::Idle);
        assert_eq!(c.snapshot().source_panics, 1);
        // Never called again, in either style.
        assert_eq!(list.round(&c, true), Progress::Idle);
        assert_eq!(list.round(&c, false), Progress::Idle);
        assert_eq!(calls.load(SeqCst), 1);

        // Propagated (manual style), still poisoned.
        let list2 = SourceList::new();
        list2.insert(
            list2.next_id(),
            Arc::new(progress_fn(|| panic!("source bug (expected by the test)"))),
        );
        let r = catch_unwind(AssertUnwindSafe(|| list2.round(&c, false)));
        assert!(r.is_err());
        assert_eq!(c.snapshot().source_panics, 2);
        assert_eq!(list2.round(&c, false), Progress::Idle);
    }

    #[test]
    fn busy_source_is_skipped_and_remove_waits_for_it() {
        let list = Arc::new(SourceList::new());
        let c = Arc::new(Counters::default());
        let inside = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let (i2, r2, f2) = (inside.clone(), release.clone(), finished.clone());
        let id = list.next_id();
        list.insert(
            id,
            Arc::new(progress_fn(move || {
                i2.store(true, SeqCst);
                while !r2.load(SeqCst) {
                    std::thread::yield_now();
                }
                f2.store(true, SeqCst);
                Progress::Made
            })),
        );
        let (l2, c2) = (list.clone(), c.clone());
        let runner = std::thread::spawn(move || l2.round(&c2, false));
        while !inside.load(SeqCst) {
            std::thread::yield_now();
        }
        // Running elsewhere: skipped, so this round is idle and returns.
        assert_eq!(list.round(&c, false), Progress::Idle);
        let (l3, f3) = (list.clone(), finished.clone());
        let remover = std::thread::spawn(move || {
            let got = l3.remove(id).is_some();
            // remove() must not return while the call is still running.
            (got, f3.load(SeqCst))
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !remover.is_finished(),
            "remove returned while the source was running"
        );
        release.store(true, SeqCst);
        assert_eq!(remover.join().unwrap(), (true, true));
        assert_eq!(runner.join().unwrap(), Progress::Made);
    }

    #[test]
    fn source_can_remove_itself_from_inside_progress() {
        let list = Arc::new(SourceList::new());
        let c = Counters::default();
        let id = list.next_id();
        let weak = Arc::downgrade(&list);
        let calls = Arc::new(AtomicUsize::new(0));
        let calls2 = calls.clone();
        list.insert(
            id,
            Arc::new(progress_fn(move || {
                calls2.fetch_add(1, SeqCst);
                if let Some(l) = weak.upgrade() {
                    // Would deadlock if remove waited for this very call.
                    assert!(l.remove(id).is_some());
                }
                Progress::Made
            })),
        );
        assert_eq!(list.round(&c, false), Progress::Made);
        assert_eq!(list.round(&c, false), Progress::Idle);
        assert_eq!(calls.load(SeqCst), 1);
        assert_eq!(list.len(), 0);
    }
}
