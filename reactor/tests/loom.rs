//! Loom models of the lock-free parts: completion slots (complete vs
//! poll_take vs abandon vs retire, stale keys, double completion, the slab's free list
//! and growth) and the sleep gate (notify vs going to sleep).
//!
//! Run (about a minute in release mode):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/work/target-loom \
//!     cargo test -p psmrail-reactor --release --test loom
//! ```
//!
//! A lost wake-up shows up as a loom deadlock (the waiter waits forever in `block_on` or
//! in the gate's sleep); a double drop or a
//! leak as a failed drop count (and loom's own leak check of the `Arc`s
//! inside each value); a data race on a slot cell as a loom causality error.
#![cfg(loom)]

use std::task::{Context, Poll, Wake, Waker};

use loom::sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use loom::sync::{Arc, Notify};
use loom::thread;
use psmrail_reactor::gate::SleepGate;
use psmrail_reactor::{CompletionTable, OpKey, OpStatus};

/// Explores with a preemption bound (override with LOOM_MAX_PREEMPTIONS).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(5);
    }
    builder.check(f);
}

/// A value that counts its drops (and holds a loom `Arc`, so a value that is
/// never dropped is also reported by loom's leak check).
struct Counted {
    id: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

fn counted(id: u32, drops: &Arc<AtomicUsize>) -> Counted {
    Counted {
        id,
        drops: drops.clone(),
    }
}

/// Waker of [`block_on`]: a loom `Notify` (a park/unpark token; loom's
/// own `thread::park` does not combine reliably with its schedule
/// exploration, so the token is modelled with `Notify`, as loom's own
/// `future::block_on` does).
struct Unparker(Notify);

impl Wake for Unparker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.notify();
    }
}

/// Polls `f` until ready, waiting for a wake between polls. A lost wake-up
/// leaves the thread waiting forever, which loom reports as a deadlock.
fn block_on<T>(mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
    let unparker = std::sync::Arc::new(Unparker(Notify::new()));
    let waker = Waker::from(unparker.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f(&mut cx) {
            return v;
        }
        unparker.0.wait();
    }
}

/// A waker that only counts wakes (for tests that do not block).
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn counting_waker() -> (std::sync::Arc<CountingWaker>, Waker) {
    let w = std::sync::Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
    (w.clone(), Waker::from(w))
}

#[test]
fn complete_vs_poll_take_no_lost_wakeup() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let key = table.insert();
        let engine = {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || assert!(table.complete(key, counted(7, &drops)).is_ok()))
        };
        // Parks until woken; a lost wake-up is a loom deadlock.
        let value = block_on(|cx| table.poll_take(key, cx));
        assert_eq!(value.id, 7);
        engine.join().unwrap();
        drop(value);
        assert_eq!(drops.load(SeqCst), 1);
        assert!(table.is_empty());
    });
}

#[test]
fn complete_vs_abandon_drops_exactly_once() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let key = table.insert();
        let engine = {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || assert!(table.complete(key, counted(1, &drops)).is_ok()))
        };
        let got = table.abandon(key);
        let handed_back = got.is_some();
        drop(got);
        engine.join().unwrap();
        assert_eq!(drops.load(SeqCst), 1, "handed back: {handed_back}");
        assert!(table.is_empty(), "slot freed either way");
        assert_eq!(table.status(key), OpStatus::Unknown);
    });
}

#[test]
fn poll_then_abandon_vs_complete() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let key = table.insert();
        let (w, waker) = counting_waker();
        let engine = {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || assert!(table.complete(key, counted(1, &drops)).is_ok()))
        };
        let mut cx = Context::from_waker(&waker);
        let polled = table.poll_take(key, &mut cx);
        let ready = polled.is_ready();
        drop(polled);
        if !ready {
            drop(table.abandon(key));
        }
        engine.join().unwrap();
        assert_eq!(drops.load(SeqCst), 1);
        assert!(table.is_empty());
        drop(waker);
        // Whatever happened, the table kept no clone of the waker.
        assert_eq!(std::sync::Arc::strong_count(&w), 1);
    });
}

#[test]
fn repoll_races_the_engine_taking_the_waker() {
    // The future registers, then polls again (a spurious wake-up) while the
    // engine completes: covers the "engine holds the waker cell" path where
    // whoever leaves last frees the slot.
    model(|| {
        let table = Arc::new(CompletionTable::<u32>::new());
        let key = table.insert();
        let (w, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(table.poll_take(key, &mut cx).is_pending());
        let engine = {
            let table = table.clone();
            thread::spawn(move || assert!(table.complete(key, 5).is_ok()))
        };
        let early = table.poll_take(key, &mut cx);
        engine.join().unwrap();
        let value = match early {
            Poll::Ready(v) => v,
            Poll::Pending => {
                // Not yet complete at that poll: the engine must have woken us.
                assert!(w.0.load(std::sync::atomic::Ordering::SeqCst) >= 1);
                table.try_take(key).expect("complete after join")
            }
        };
        assert_eq!(value, 5);
        assert!(table.is_empty());
        let next = table.insert();
        assert_eq!(next.index(), key.index(), "freed slot reused");
        assert!(table.complete(key, 6).is_err(), "stale key refused");
    });
}

#[test]
fn one_key_polled_from_two_threads_is_still_safe() {
    // Breaking the contract (one pending key polled from two threads at
    // once) must not race on the waker cell (loom would report it), and
    // the completion must still wake one of them.
    model(|| {
        let table = Arc::new(CompletionTable::<u32>::new());
        let key = table.insert();
        let (w1, waker1) = counting_waker();
        let other = {
            let table = table.clone();
            thread::spawn(move || {
                table
                    .poll_take(key, &mut Context::from_waker(&waker1))
                    .is_pending()
            })
        };
        let (w2, waker2) = counting_waker();
        assert!(table
            .poll_take(key, &mut Context::from_waker(&waker2))
            .is_pending());
        assert!(other.join().unwrap());
        assert!(table.complete(key, 1).is_ok());
        let wakes =
            |w: &std::sync::Arc<CountingWaker>| w.0.load(std::sync::atomic::Ordering::SeqCst);
        assert!(wakes(&w1) + wakes(&w2) >= 1, "nobody woken");
        assert_eq!(table.try_take(key), Some(1));
        assert!(table.is_empty());
    });
}

#[test]
fn two_takers_race_the_engine() {
    // Two future-side takers (misuse) and the engine: the value is handed
    // out at most once, never lost, dropped exactly once.
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let key = table.insert();
        let engine = {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || assert!(table.complete(key, counted(1, &drops)).is_ok()))
        };
        let other = {
            let table = table.clone();
            thread::spawn(move || table.try_take(key))
        };
        let mine = table.try_take(key);
        let theirs = other.join().unwrap();
        engine.join().unwrap();
        assert!(mine.is_none() || theirs.is_none(), "value handed out twice");
        let got = mine.or(theirs).or_else(|| table.try_take(key));
        assert_eq!(got.as_ref().map(|v| v.id), Some(1));
        drop(got);
        assert_eq!(drops.load(SeqCst), 1);
        assert!(table.is_empty());
    });
}

#[test]
fn stale_complete_vs_slot_reuse() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let old = table.insert();
        assert!(table.complete(old, counted(1, &drops)).is_ok());
        let stale = {
            let (table, drops) = (table.clone(), drops.clone());
            // A duplicate completion for the old op, arriving late.
            thread::spawn(move || table.complete(old, counted(2, &drops)).map_err(|v| v.id))
        };
        let first = table.try_take(old).expect("complete");
        assert_eq!(first.id, 1);
        let new = table.insert();
        assert_eq!(new.index(), old.index());
        assert_eq!(table.status(new), OpStatus::Pending);
        assert!(table.complete(new, counted(3, &drops)).is_ok());
        assert_eq!(stale.join().unwrap(), Err(2), "stale key must be refused");
        assert_eq!(table.try_take(new).map(|v| v.id), Some(3));
        drop(first);
        assert_eq!(drops.load(SeqCst), 3);
        assert!(table.is_empty());
    });
}

#[test]
fn retire_vs_a_late_complete_drops_exactly_once() {
    // The fast path retires a key whose completion the engine delivers
    // anyway (a contract breach): the value is neither lost nor handed out
    // twice, and the slot is freed once.
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let key = table.insert();
        let engine = {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || table.complete(key, counted(1, &drops)).is_ok())
        };
        let got = table.retire(key);
        let accepted = engine.join().unwrap();
        // Retire first: the slot is free and the engine's value is refused
        // (and dropped by the engine). Complete first (or while retire
        // waits for its claim): retire hands the stored value back.
        assert_eq!(got.is_some(), accepted, "a stored value must come back");
        drop(got);
        assert_eq!(drops.load(SeqCst), 1);
        assert!(table.is_empty());
        assert_eq!(table.status(key), OpStatus::Unknown);
    });
}

#[test]
fn renew_vs_a_late_complete() {
    // The fast path renews a key (for its endpoint's next post) while the
    // engine delivers a completion for it anyway (a contract breach): the
    // stale completion is refused once the key is renewed, or renew
    // refuses and retire hands the stored value back; the new key works.
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let old = table.insert();
        let engine = {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || table.complete(old, counted(1, &drops)).is_ok())
        };
        let renewed = table.renew(old);
        let accepted = engine.join().unwrap();
        match renewed {
            Some(new) => {
                assert!(!accepted, "a renewed key's stale completion is refused");
                assert_eq!(new.index(), old.index());
                assert_eq!(table.status(old), OpStatus::Unknown);
                assert_eq!(table.status(new), OpStatus::Pending);
                assert!(table.complete(new, counted(2, &drops)).is_ok());
                assert_eq!(table.try_take(new).map(|v| v.id), Some(2));
                assert_eq!(drops.load(SeqCst), 2);
            }
            None => {
                assert!(accepted, "renew refuses only a key the engine claimed");
                assert_eq!(table.retire(old).map(|v| v.id), Some(1));
                assert_eq!(drops.load(SeqCst), 1);
            }
        }
        assert!(table.is_empty());
    });
}

#[test]
fn retire_vs_reuse_of_other_slots() {
    // One side retires its key (with a registered waker) while another
    // takes and frees slots: the free list stays consistent and the waker
    // is dropped, not woken.
    model(|| {
        let table = Arc::new(CompletionTable::<u32>::new());
        let a = table.insert();
        let (w, waker) = counting_waker();
        assert!(table
            .poll_take(a, &mut Context::from_waker(&waker))
            .is_pending());
        drop(waker);
        let other = {
            let table = table.clone();
            thread::spawn(move || {
                let b = table.insert();
                assert!(table.complete(b, 2).is_ok());
                assert_eq!(table.try_take(b), Some(2));
                b
            })
        };
        assert_eq!(table.retire(a), None);
        let b = other.join().unwrap();
        assert_ne!(a, b);
        assert!(table.is_empty());
        assert_eq!(std::sync::Arc::strong_count(&w), 1, "waker dropped");
        assert_eq!(w.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        let (c, d) = (table.insert(), table.insert());
        assert_ne!(c.index(), d.index(), "no slot handed out twice");
    });
}

#[test]
fn double_complete_exactly_one_wins() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(CompletionTable::<Counted>::new());
        let key = table.insert();
        let spawn = |id: u32| {
            let (table, drops) = (table.clone(), drops.clone());
            thread::spawn(move || table.complete(key, counted(id, &drops)).is_ok())
        };
        let (a, b) = (spawn(1), spawn(2));
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(a ^ b, "exactly one completion accepted");
        let v = table.try_take(key).expect("value stored");
        assert_eq!(v.id, if a { 1 } else { 2 });
        drop(v);
        assert_eq!(drops.load(SeqCst), 2);
        assert!(table.is_empty());
    });
}

#[test]
fn concurrent_inserts_grow_without_duplicates() {
    // Under loom the first segment has 2 slots, so 3 inserts must grow.
    model(|| {
        let table = Arc::new(CompletionTable::<u32>::new());
        let other = {
            let table = table.clone();
            thread::spawn(move || vec![table.insert(), table.insert()])
        };
        let mine = table.insert();
        let mut keys: Vec<OpKey> = other.join().unwrap();
        keys.push(mine);
        let mut idx: Vec<u32> = keys.iter().map(|k| k.index()).collect();
        idx.sort_unstable();
        idx.dedup();
        assert_eq!(idx.len(), 3, "distinct slots");
        for (i, k) in keys.iter().enumerate() {
            assert!(table.complete(*k, i as u32).is_ok());
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(table.try_take(*k), Some(i as u32));
        }
        assert!(table.is_empty());
    });
}

#[test]
fn free_list_push_vs_pop() {
    model(|| {
        let table = Arc::new(CompletionTable::<u32>::new());
        let a = table.insert();
        let b = table.insert();
        assert!(table.complete(a, 1).is_ok());
        assert!(table.complete(b, 2).is_ok());
        let taker = {
            let table = table.clone();
            thread::spawn(move || {
                assert_eq!(table.try_take(a), Some(1));
                assert_eq!(table.try_take(b), Some(2));
            })
        };
        let c = table.insert();
        let d = table.insert();
        taker.join().unwrap();
        assert_ne!(c.index(), d.index());
        assert_eq!(table.len(), 2);
        assert!(table.complete(c, 3).is_ok());
        assert!(table.complete(d, 4).is_ok());
        assert_eq!(table.try_take(c), Some(3));
        assert_eq!(table.try_take(d), Some(4));
        assert!(table.is_empty());
    });
}

#[test]
fn free_list_aba() {
    // The classic ABA: one thread pops (reads head A and its next B) while
    // another pops A, pops B and pushes A back. Without the push counter in
    // the head, the first pop would install B as the head although B is in
    // use, and two live ops would share a slot.
    model(|| {
        let table = Arc::new(CompletionTable::<u32>::with_capacity(2));
        let other = {
            let table = table.clone();
            thread::spawn(move || {
                let a = table.insert();
                let b = table.insert();
                assert!(table.complete(a, 1).is_ok());
                assert_eq!(table.try_take(a), Some(1));
                b
            })
        };
        let mine = table.insert();
        let b = other.join().unwrap();
        // A corrupted head would hand out `b`'s slot again here.
        let extra = table.insert();
        let mut idx = [mine.index(), b.index(), extra.index()];
        idx.sort_unstable();
        assert!(
            idx[0] != idx[1] && idx[1] != idx[2],
            "two live ops share a slot"
        );
        assert_eq!(table.len(), 3);
        for (k, v) in [(mine, 2), (b, 3), (extra, 4)] {
            assert!(table.complete(k, v).is_ok());
        }
        for (k, v) in [(mine, 2), (b, 3), (extra, 4)] {
            assert_eq!(table.try_take(k), Some(v));
        }
    });
}

/// The auto thread's loop reduced to the gate: run a "round" (look at the
/// work flag), then sleep unless notified. The notifier posts work (a
/// relaxed store: only the gate orders it) and notifies. `alarm` stands for
/// the OS wake-up (mio `Waker` / `unpark`): a token that survives until the
/// next wait, like an eventfd count or an unpark token.
fn sleeper(gate: Arc<SleepGate>, alarm: Arc<Notify>, work: Arc<AtomicUsize>, want: usize) {
    loop {
        if work.load(Relaxed) >= want {
            return;
        }
        if gate.prepare_sleep() {
            alarm.wait();
            gate.wake_up();
        }
    }
}

fn notify(gate: &SleepGate, alarm: &Notify) {
    if gate.notify() {
        alarm.notify();
    }
}

#[test]
fn gate_notify_vs_going_to_sleep() {
    model(|| {
        let gate = Arc::new(SleepGate::new());
        let alarm = Arc::new(Notify::new());
        let work = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (gate, alarm, work) = (gate.clone(), alarm.clone(), work.clone());
            thread::spawn(move || sleeper(gate, alarm, work, 1))
        };
        work.store(1, Relaxed);
        notify(&gate, &alarm);
        // A lost wake-up would leave the sleeper waiting: loom deadlock.
        thread.join().unwrap();
    });
}

#[test]
fn gate_two_notifiers() {
    model(|| {
        let gate = Arc::new(SleepGate::new());
        let alarm = Arc::new(Notify::new());
        let work = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (gate, alarm, work) = (gate.clone(), alarm.clone(), work.clone());
            thread::spawn(move || sleeper(gate, alarm, work, 2))
        };
        let notifier = {
            let (gate, alarm, work) = (gate.clone(), alarm.clone(), work.clone());
            thread::spawn(move || {
                work.fetch_add(1, Relaxed);
                notify(&gate, &alarm);
            })
        };
        work.fetch_add(1, Relaxed);
        notify(&gate, &alarm);
        notifier.join().unwrap();
        thread.join().unwrap();
    });
}

#[test]
fn gate_notify_while_awake_needs_no_wake() {
    // Not a race: checks that notify asks for an OS wake-up only when the
    // thread committed to sleep, and that a pending notify cancels a sleep.
    model(|| {
        let gate = SleepGate::new();
        assert!(!gate.notify(), "awake: no system call needed");
        assert!(!gate.prepare_sleep(), "notified: run a round instead");
        assert!(gate.prepare_sleep());
        assert!(gate.is_sleeping());
        assert!(gate.notify(), "asleep: caller must wake it");
        assert!(gate.wake_up(), "woken by the notify");
        assert!(!gate.is_sleeping());
    });
}
