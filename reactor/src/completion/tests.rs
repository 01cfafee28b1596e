//! Unit tests of the completion table: the slot state machine, stale and
//! forged keys, abandon before/after completion (values dropped exactly
//! once), waker handling, and slot reuse without growth.

use super::*;
use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Wake;

/// A value that counts its drops.
#[derive(Debug)]
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

/// A waker that counts wakes; `Arc::strong_count` tells how many clones of
/// it are alive (so whether the table holds one).
#[derive(Default)]
struct CountingWaker {
    wakes: AtomicUsize,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
    }
}

fn waker() -> (Arc<CountingWaker>, Waker) {
    let w = Arc::new(CountingWaker::default());
    (w.clone(), Waker::from(w))
}

#[test]
fn free_state_skips_generation_zero() {
    assert_eq!(free_state(1), 2 << 32);
    assert_eq!(free_state(u32::MAX), 1 << 32);
}

#[test]
fn key_round_trips_and_is_never_zero() {
    let t = CompletionTable::<u8>::new();
    for _ in 0..100 {
        let k = t.insert();
        assert_ne!(k.to_u64(), 0);
        assert!(k.generation() >= 1);
        assert_eq!(OpKey::from_u64(k.to_u64()), k);
        assert_eq!(t.complete(k, 1), Ok(()));
        assert_eq!(t.try_take(k), Some(1));
    }
}

#[test]
fn state_machine_pending_complete_taken() {
    let t = CompletionTable::<u32>::new();
    let k = t.insert();
    assert_eq!(t.status(k), OpStatus::Pending);
    assert_eq!((t.len(), t.pending(), t.abandoned()), (1, 1, 0));
    assert_eq!(t.try_take(k), None, "not complete yet");
    assert_eq!(t.complete(k, 5), Ok(()));
    assert_eq!(t.status(k), OpStatus::Complete);
    assert_eq!((t.len(), t.pending()), (1, 0));
    assert_eq!(t.complete(k, 6), Err(6), "second completion refused");
    assert_eq!(t.try_take(k), Some(5));
    assert_eq!(t.status(k), OpStatus::Unknown);
    assert_eq!(t.try_take(k), None);
    assert_eq!(t.abandon(k), None);
    assert!(t.is_empty());
}

#[test]
fn poll_take_registers_and_complete_wakes_once() {
    let t = CompletionTable::<u32>::new();
    let k = t.insert();
    let (w, waker) = waker();
    let mut cx = Context::from_waker(&waker);
    assert!(t.poll_take(k, &mut cx).is_pending());
    assert_eq!(Arc::strong_count(&w), 3, "table holds one clone");
    // Same waker again: not replaced (no new clone, still one stored).
    assert!(t.poll_take(k, &mut cx).is_pending());
    assert_eq!(Arc::strong_count(&w), 3);
    assert_eq!(w.wakes.load(SeqCst), 0);
    assert_eq!(t.complete(k, 9), Ok(()));
    assert_eq!(w.wakes.load(SeqCst), 1);
    assert_eq!(
        Arc::strong_count(&w),
        2,
        "woken by value: the table's clone is gone"
    );
    assert_eq!(t.poll_take(k, &mut cx), Poll::Ready(9));
    assert!(t.is_empty());
}

#[test]
fn poll_take_replaces_a_waker_for_another_task() {
    let t = CompletionTable::<u32>::new();
    let k = t.insert();
    let (w1, waker1) = waker();
    let (w2, waker2) = waker();
    assert!(t
        .poll_take(k, &mut Context::from_waker(&waker1))
        .is_pending());
    assert!(t
        .poll_take(k, &mut Context::from_waker(&waker2))
        .is_pending());
    assert_eq!(Arc::strong_count(&w1), 2, "old waker dropped");
    assert_eq!(Arc::strong_count(&w2), 3, "new waker stored");
    t.complete(k, 1).unwrap();
    assert_eq!(w1.wakes.load(SeqCst), 0);
    assert_eq!(w2.wakes.load(SeqCst), 1);
    assert_eq!(t.try_take(k), Some(1));
}

#[test]
fn ready_value_is_taken_without_storing_a_waker() {
    let t = CompletionTable::<u32>::new();
    let k = t.insert();
    t.complete(k, 3).unwrap();
    let (w, waker) = waker();
    assert_eq!(
        t.poll_take(k, &mut Context::from_waker(&waker)),
        Poll::Ready(3)
    );
    assert_eq!(Arc::strong_count(&w), 2);
    assert_eq!(w.wakes.load(SeqCst), 0);
}

#[test]
#[should_panic(expected = "is not live")]
fn poll_take_after_take_panics() {
    let t = CompletionTable::<u32>::new();
    let k = t.insert();
    t.complete(k, 3).unwrap();
    assert_eq!(t.try_take(k), Some(3));
    let (_w, waker) = waker();
    let _ = t.poll_take(k, &mut Context::from_waker(&waker));
}

#[test]
#[should_panic(expected = "is not live")]
fn poll_take_after_abandon_panics() {
    let t = CompletionTable::<u32>::new();
    let k = t.insert();
    assert_eq!(t.abandon(k), None);
    let (_w, waker) = waker();
    let _ = t.poll_take(k, &mut Context::from_waker(&waker));
}

#[test]
fn stale_key_after_reuse_is_harmless() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = CompletionTable::<Counted>::new();
    let old = t.insert();
    t.complete(old, counted(1, &drops)).unwrap();
    assert_eq!(t.try_take(old).map(|c| c.id), Some(1));
    assert_eq!(drops.load(SeqCst), 1);
    // The slot is reused (LIFO free list) with a new generation.
    let new = t.insert();
    assert_eq!(new.index(), old.index());
    assert_ne!(new.generation(), old.generation());
    // Everything with the old key is refused and leaves the new op alone.
    let back = t.complete(old, counted(2, &drops)).unwrap_err();
    assert_eq!(back.id, 2);
    drop(back);
    assert!(t.try_take(old).is_none());
    assert!(t.abandon(old).is_none());
    assert_eq!(t.status(old), OpStatus::Unknown);
    assert_eq!(t.status(new), OpStatus::Pending);
    t.complete(new, counted(3, &drops)).unwrap();
    assert_eq!(t.try_take(new).map(|c| c.id), Some(3));
    assert_eq!(drops.load(SeqCst), 3);
}

#[test]
fn forged_keys_are_refused() {
    let t = CompletionTable::<u32>::with_capacity(4);
    let live = t.insert();
    for raw in [
        0,
        u64::MAX,
        u64::from(u32::MAX),
        (1 << 32) | 1_000_000,
        live.to_u64() ^ (1 << 40),
        live.to_u64() + 1,
    ] {
        let k = OpKey::from_u64(raw);
        assert_eq!(t.complete(k, 7), Err(7), "{k:?}");
        assert_eq!(t.try_take(k), None);
        assert_eq!(t.abandon(k), None);
        assert_eq!(t.status(k), OpStatus::Unknown);
    }
    assert_eq!(t.status(live), OpStatus::Pending);
}

#[test]
fn abandon_before_complete_drops_value_at_complete_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = CompletionTable::<Counted>::new();
    let k = t.insert();
    let (w, waker) = waker();
    assert!(t
        .poll_take(k, &mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!(Arc::strong_count(&w), 3);
    assert!(t.abandon(k).is_none());
    assert_eq!(Arc::strong_count(&w), 2, "abandon drops the stored waker");
    assert_eq!(t.status(k), OpStatus::Abandoned);
    assert_eq!((t.len(), t.abandoned()), (1, 1), "the table keeps the op");
    assert!(t.abandon(k).is_none(), "second abandon is a no-op");
    assert_eq!(drops.load(SeqCst), 0);
    // The engine finishes: the buffer is dropped here, once.
    assert!(t.complete(k, counted(1, &drops)).is_ok());
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(w.wakes.load(SeqCst), 0, "nobody to wake");
    assert!(t.is_empty());
    // A late duplicate completion is refused, not dropped by the table.
    let back = t.complete(k, counted(2, &drops)).unwrap_err();
    assert_eq!(drops.load(SeqCst), 1);
    drop(back);
    assert_eq!(drops.load(SeqCst), 2);
}

#[test]
fn abandon_after_complete_returns_the_value() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = CompletionTable::<Counted>::new();
    let k = t.insert();
    t.complete(k, counted(4, &drops)).unwrap();
    let v = t.abandon(k).expect("value handed back");
    assert_eq!(v.id, 4);
    assert_eq!(drops.load(SeqCst), 0);
    drop(v);
    assert_eq!(drops.load(SeqCst), 1);
    assert!(t.is_empty());
    assert!(t.abandon(k).is_none());
}

#[test]
fn retire_frees_a_pending_slot_without_a_value() {
    let t = CompletionTable::<u32>::with_capacity(1);
    let cap = t.capacity();
    let k = t.insert();
    let (w, waker) = waker();
    assert!(t
        .poll_take(k, &mut Context::from_waker(&waker))
        .is_pending());
    drop(waker);
    assert_eq!(Arc::strong_count(&w), 2, "waker stored");
    assert_eq!(t.retire(k), None);
    assert_eq!(Arc::strong_count(&w), 1, "stored waker dropped");
    assert_eq!(w.wakes.load(SeqCst), 0, "nobody to wake");
    assert_eq!(t.status(k), OpStatus::Unknown);
    assert!(t.is_empty());
    // Spent: the engine, the future and a second retire are all refused.
    assert_eq!(t.complete(k, 1), Err(1));
    assert_eq!(t.try_take(k), None);
    assert_eq!(t.retire(k), None);
    // The slot is reused under a new generation, without growth.
    let next = t.insert();
    assert_eq!(next.index(), k.index());
    assert_ne!(next, k);
    assert_eq!(t.capacity(), cap);
}

#[test]
fn retire_hands_back_a_value_completed_after_all() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = CompletionTable::<Counted>::new();
    let k = t.insert();
    t.complete(k, counted(3, &drops)).unwrap();
    let v = t.retire(k).expect("the stored value");
    assert_eq!(v.id, 3);
    assert!(t.is_empty());
    drop(v);
    assert_eq!(drops.load(SeqCst), 1);
}

#[test]
fn retire_leaves_abandoned_and_forged_keys_alone() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = CompletionTable::<Counted>::new();
    let k = t.insert();
    assert!(t.abandon(k).is_none());
    assert!(t.retire(k).is_none());
    assert_eq!(
        t.status(k),
        OpStatus::Abandoned,
        "still the engine's to free"
    );
    assert!(t.complete(k, counted(1, &drops)).is_ok());
    assert_eq!(drops.load(SeqCst), 1);
    assert!(t.is_empty());
    assert!(t.retire(OpKey::from_u64(u64::MAX)).is_none());
    assert!(t.retire(OpKey::from_u64(0)).is_none());
}

#[test]
fn dropping_the_table_drops_uncollected_values_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = CompletionTable::<Counted>::new();
    let done = t.insert();
    let pending = t.insert();
    let abandoned = t.insert();
    let taken = t.insert();
    t.complete(done, counted(1, &drops)).unwrap();
    t.complete(taken, counted(2, &drops)).unwrap();
    let v = t.try_take(taken).unwrap();
    assert!(t.abandon(abandoned).is_none());
    let (w, waker) = waker();
    assert!(t
        .poll_take(pending, &mut Context::from_waker(&waker))
        .is_pending());
    drop(t);
    assert_eq!(drops.load(SeqCst), 1, "only the uncollected value");
    assert_eq!(
        Arc::strong_count(&w),
        2,
        "stored waker dropped with the table"
    );
    drop(v);
    assert_eq!(drops.load(SeqCst), 2);
}

#[test]
fn steady_state_reuses_slots_without_growth() {
    let t = CompletionTable::<u64>::with_capacity(64);
    let cap = t.capacity();
    assert!(cap >= 64);
    let mut keys = Vec::with_capacity(64);
    // Fewer rounds under miri, which interprets every access.
    let rounds = if cfg!(miri) { 20 } else { 2_000u64 };
    for round in 0..rounds {
        keys.extend((0..64).map(|_| t.insert()));
        for (i, k) in keys.iter().enumerate() {
            t.complete(*k, round + i as u64).unwrap();
        }
        for (i, k) in keys.drain(..).enumerate() {
            assert_eq!(t.try_take(k), Some(round + i as u64));
        }
    }
    assert_eq!(t.capacity(), cap, "no growth in steady state");
    assert!(t.is_empty());
}

#[test]
fn grows_across_segments_and_keeps_keys_valid() {
    let t = CompletionTable::<u32>::new();
    let keys: Vec<OpKey> = (0..1000).map(|_| t.insert()).collect();
    assert!(t.capacity() >= 1000);
    let mut idx: Vec<u32> = keys.iter().map(|k| k.index()).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(idx.len(), 1000, "distinct slots");
    for (i, k) in keys.iter().enumerate() {
        t.complete(*k, i as u32).unwrap();
    }
    for (i, k) in keys.iter().enumerate().rev() {
        assert_eq!(t.try_take(*k), Some(i as u32));
    }
    assert!(t.is_empty());
}

#[test]
fn threads_complete_while_others_wait() {
    use std::sync::mpsc;
    let t = Arc::new(CompletionTable::<u64>::new());
    let (tx, rx) = mpsc::channel::<OpKey>();
    let engine = {
        let t = t.clone();
        std::thread::spawn(move || {
            for k in rx {
                t.complete(k, k.to_u64()).unwrap();
            }
        })
    };
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let (t, tx) = (t.clone(), tx.clone());
            std::thread::spawn(move || {
                // Fewer under miri, which explores interleavings slowly.
                for _ in 0..if cfg!(miri) { 50 } else { 2_000 } {
                    let k = t.insert();
                    tx.send(k).unwrap();
                    let v =
                        futures::executor::block_on(std::future::poll_fn(|cx| t.poll_take(k, cx)));
                    assert_eq!(v, k.to_u64());
                }
            })
        })
        .collect();
    drop(tx);
    for w in waiters {
        w.join().unwrap();
    }
    engine.join().unwrap();
    assert!(t.is_empty());
    assert!(t.capacity() <= 64, "at most 4 live ops at a time");
}

/// Model-based check: a random sequence of operations against a model of
/// each key's state, counting drops.
#[derive(Clone, Debug)]
enum Op {
    Insert,
    Complete(usize),
    Take(usize),
    Abandon(usize),
    Poll(usize),
    Retire(usize),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Model {
    Pending { registered: bool },
    Complete(u32),
    Abandoned,
    Dead,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Insert),
        3 => (0usize..8).prop_map(Op::Complete),
        2 => (0usize..8).prop_map(Op::Take),
        2 => (0usize..8).prop_map(Op::Abandon),
        2 => (0usize..8).prop_map(Op::Poll),
        1 => (0usize..8).prop_map(Op::Retire),
    ]
}

proptest! {
    #[test]
    fn matches_model(ops in proptest::collection::vec(op_strategy(), 1..120)) {
        let drops = Arc::new(AtomicUsize::new(0));
        let t = CompletionTable::<Counted>::new();
        let (w, waker) = waker();
        let mut keys: Vec<(OpKey, Model)> = Vec::new();
        let mut made = 0usize;
        let mut dropped_by_us = 0usize;
        let mut expected_wakes = 0usize;
        for op in ops {
            match op {
                Op::Insert => keys.push((t.insert(), Model::Pending { registered: false })),
                Op::Complete(i) if i < keys.len() => {
                    let (k, m) = keys[i];
                    made += 1;
                    let r = t.complete(k, counted(made as u32, &drops));
                    match m {
                        Model::Pending { registered } => {
                            prop_assert!(r.is_ok());
                            if registered { expected_wakes += 1; }
                            keys[i].1 = Model::Complete(made as u32);
                        }
                        Model::Abandoned => {
                            prop_assert!(r.is_ok());
                            dropped_by_us += 1; // dropped by the table, counted as gone
                            keys[i].1 = Model::Dead;
                        }
                        Model::Complete(_) | Model::Dead => {
                            prop_assert!(r.is_err());
                            drop(r);
                            dropped_by_us += 1;
                        }
                    }
                }
                Op::Take(i) if i < keys.len() => {
                    let (k, m) = keys[i];
                    let got = t.try_take(k);
                    if let Model::Complete(id) = m {
                        prop_assert_eq!(got.as_ref().map(|c| c.id), Some(id));
                        keys[i].1 = Model::Dead;
                    } else {
                        prop_assert!(got.is_none());
                    }
                    if got.is_some() { dropped_by_us += 1; }
                }
                Op::Abandon(i) if i < keys.len() => {
                    let (k, m) = keys[i];
                    let got = t.abandon(k);
                    match m {
                        Model::Complete(id) => {
                            prop_assert_eq!(got.as_ref().map(|c| c.id), Some(id));
                            dropped_by_us += 1;
                            keys[i].1 = Model::Dead;
                        }
                        Model::Pending { .. } => {
                            prop_assert!(got.is_none());
                            keys[i].1 = Model::Abandoned;
                        }
                        Model::Abandoned | Model::Dead => prop_assert!(got.is_none()),
                    }
                }
                Op::Poll(i) if i < keys.len() => {
                    let (k, m) = keys[i];
                    match m {
                        Model::Pending { .. } => {
                            prop_assert!(t.poll_take(k, &mut Context::from_waker(&waker)).is_pending());
                            keys[i].1 = Model::Pending { registered: true };
                        }
                        Model::Complete(id) => {
                            match t.poll_take(k, &mut Context::from_waker(&waker)) {
                                Poll::Ready(v) => prop_assert_eq!(v.id, id),
                                Poll::Pending => prop_assert!(false, "complete op polled pending"),
                            }
                            dropped_by_us += 1;
                            keys[i].1 = Model::Dead;
                        }
                        Model::Abandoned | Model::Dead => {}
                    }
                }
                Op::Retire(i) if i < keys.len() => {
                    let (k, m) = keys[i];
                    let got = t.retire(k);
                    match m {
                        Model::Pending { .. } => {
                            prop_assert!(got.is_none());
                            keys[i].1 = Model::Dead;
                        }
                        Model::Complete(id) => {
                            prop_assert_eq!(got.as_ref().map(|c| c.id), Some(id));
                            dropped_by_us += 1;
                            keys[i].1 = Model::Dead;
                        }
                        Model::Abandoned | Model::Dead => prop_assert!(got.is_none()),
                    }
                }
                _ => {}
            }
            let live = keys.iter().filter(|(_, m)| *m != Model::Dead).count();
            prop_assert_eq!(t.len(), live);
            prop_assert_eq!(drops.load(SeqCst), dropped_by_us);
            prop_assert_eq!(w.wakes.load(SeqCst), expected_wakes);
        }
        let held = keys.iter().filter(|(_, m)| matches!(m, Model::Complete(_))).count();
        drop(t);
        prop_assert_eq!(drops.load(SeqCst), dropped_by_us + held);
        prop_assert_eq!(drops.load(SeqCst), made, "every value dropped exactly once");
    }
}
