//! Manual-mode behaviour: no thread, progress only when driven (by
//! `progress`, by futures through `poll_completion`, by `block_on`),
//! busy-polling wakes, concurrent `progress` callers, source add/remove.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{within, Device};
use psmrail_reactor::{progress_fn, CompletionTable, Progress, ProgressMode, Reactor};

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn manual_reactor_has_no_thread_and_progresses_only_when_driven() {
    let reactor = Reactor::manual();
    assert!(reactor.is_manual());
    assert_eq!(reactor.mode(), &ProgressMode::Manual);
    assert!(reactor.auto_thread().is_none());
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    reactor
        .add_source(Arc::new(progress_fn(move || {
            c.fetch_add(1, SeqCst);
            Progress::Idle
        })))
        .unwrap();
    reactor.notify(); // no-op
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(calls.load(SeqCst), 0, "nothing runs by itself");
    assert_eq!(reactor.progress(), Progress::Idle);
    assert_eq!(calls.load(SeqCst), 1);
    let stats = reactor.stats();
    assert_eq!((stats.rounds, stats.sources, stats.sleeps), (1, 1, 0));
}

#[test]
fn poll_completion_drives_progress_and_busy_polls() {
    let reactor = Reactor::manual();
    let table = Arc::new(CompletionTable::<u32>::new());
    let key = table.insert();
    // The engine completes on its third step.
    let steps = Arc::new(AtomicUsize::new(0));
    {
        let (table, steps) = (table.clone(), steps.clone());
        reactor
            .add_source(Arc::new(progress_fn(move || {
                if steps.fetch_add(1, SeqCst) == 2 {
                    table.complete(key, 99).unwrap();
                    return Progress::Made;
                }
                Progress::Idle
            })))
            .unwrap();
    }
    let w = Arc::new(CountingWaker::default());
    let waker = Waker::from(w.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(reactor.poll_completion(&table, key, &mut cx).is_pending());
    assert_eq!(
        w.0.load(SeqCst),
        1,
        "pending in manual mode: task woken again at once"
    );
    assert_eq!(steps.load(SeqCst), 1, "each poll runs one round");
    assert!(reactor.poll_completion(&table, key, &mut cx).is_pending());
    assert_eq!(w.0.load(SeqCst), 2);
    assert_eq!(
        reactor.poll_completion(&table, key, &mut cx),
        Poll::Ready(99)
    );
    assert_eq!(w.0.load(SeqCst), 2, "no wake when ready");
    assert_eq!(steps.load(SeqCst), 3);
    assert!(table.is_empty());
}

#[test]
fn poll_completion_skips_progress_when_value_is_there() {
    let reactor = Reactor::manual();
    let table = CompletionTable::<u32>::new();
    let key = table.insert();
    table.complete(key, 1).unwrap();
    let w = Arc::new(CountingWaker::default());
    let waker = Waker::from(w.clone());
    assert_eq!(
        reactor.poll_completion(&table, key, &mut Context::from_waker(&waker)),
        Poll::Ready(1)
    );
    assert_eq!(reactor.stats().rounds, 0);
}

#[test]
#[should_panic(expected = "is not live")]
fn poll_completion_on_a_dead_key_panics_instead_of_spinning() {
    let reactor = Reactor::manual();
    let table = CompletionTable::<u32>::new();
    let key = table.insert();
    table.complete(key, 1).unwrap();
    assert_eq!(table.try_take(key), Some(1));
    let w = Arc::new(CountingWaker::default());
    let waker = Waker::from(w);
    let _ = reactor.poll_completion(&table, key, &mut Context::from_waker(&waker));
}

#[test]
fn block_on_runs_progress_between_polls() {
    let reactor = Reactor::manual();
    let (device, source) = Device::start(&reactor);
    reactor.add_source(source).unwrap();
    let r = reactor.clone();
    let d = device.clone();
    within(Duration::from_secs(20), "manual block_on", move || {
        for _ in 0..200 {
            let op = d.post(&r);
            let key = op.key();
            assert_eq!(r.block_on(op).key, key.to_u64());
        }
    });
    assert!(reactor.stats().productive_rounds >= 200);
    device.stop();
    assert!(device.table.is_empty());
    assert_eq!(device.drops.load(SeqCst), 200);
}

#[test]
fn block_on_drives_foreign_futures_too() {
    // A future that is not one of ours: waits until a source has run 100
    // times; it never wakes itself, so block_on must keep progressing.
    let reactor = Reactor::manual();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    reactor
        .add_source(Arc::new(progress_fn(move || {
            c.fetch_add(1, SeqCst);
            Progress::Idle
        })))
        .unwrap();
    let waker_slot: Arc<std::sync::Mutex<Option<Waker>>> = Default::default();
    let c2 = count.clone();
    let ws = waker_slot.clone();
    reactor
        .add_source(Arc::new(progress_fn(move || {
            if c2.load(SeqCst) >= 100 {
                if let Some(w) = ws.lock().unwrap().take() {
                    w.wake();
                    return Progress::Made;
                }
            }
            Progress::Idle
        })))
        .unwrap();
    let c3 = count.clone();
    let out = reactor.block_on(std::future::poll_fn(move |cx| {
        if c3.load(SeqCst) >= 100 {
            Poll::Ready("done")
        } else {
            *waker_slot.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }));
    assert_eq!(out, "done");
    assert!(count.load(SeqCst) >= 100);
}

#[test]
fn concurrent_progress_callers_never_run_one_source_twice_at_once() {
    let reactor = Reactor::manual();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    {
        let (inside, max_inside, calls) = (inside.clone(), max_inside.clone(), calls.clone());
        reactor
            .add_source(Arc::new(progress_fn(move || {
                let n = inside.fetch_add(1, SeqCst) + 1;
                max_inside.fetch_max(n, SeqCst);
                calls.fetch_add(1, SeqCst);
                std::hint::spin_loop();
                std::thread::yield_now();
                inside.fetch_sub(1, SeqCst);
                Progress::Made
            })))
            .unwrap();
    }
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let r = reactor.clone();
            std::thread::spawn(move || {
                for _ in 0..5_000 {
                    r.progress();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(max_inside.load(SeqCst), 1);
    assert!(calls.load(SeqCst) > 0);
    assert_eq!(reactor.stats().rounds, 20_000);
}

#[test]
fn removed_source_is_not_called_again() {
    let reactor = Reactor::manual();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let id = reactor
        .add_source(Arc::new(progress_fn(move || {
            c.fetch_add(1, SeqCst);
            Progress::Made
        })))
        .unwrap();
    assert_eq!(reactor.progress(), Progress::Made);
    assert!(reactor.remove_source(id).is_some());
    assert_eq!(reactor.progress(), Progress::Idle);
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(reactor.stats().sources, 0);
}
