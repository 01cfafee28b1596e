//! Adaptive-mode behaviour: a completion that comes within the spin window
//! is found by the waiting future's own progress step (no hand-off to the
//! thread); a longer wait hands off, sleeps without burning the core, and
//! is woken by the auto thread; a completion reopens the window; the
//! device's many operations all complete under `block_on` and a
//! futures executor; a future dropped while spinning or sleeping leaks
//! nothing.
#![cfg(not(loom))]

mod common;

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

use common::{within, Device};
use psmrail_reactor::{
    AdaptiveProgress, AutoProgress, CompletionTable, OpKey, Progress, ProgressMode, ProgressSource,
    Reactor,
};

const LONG: Duration = Duration::from_secs(10);

fn adaptive(spin: Duration, interval: Duration) -> Reactor {
    Reactor::builder()
        .adaptive(
            AdaptiveProgress::new()
                .spin(spin)
                .auto(AutoProgress::new().interval(interval)),
        )
        .thread_name("rx-adaptive")
        .build()
        .unwrap()
}

/// A source that completes `key` with 7 once `release` is set, recording
/// which thread's progress step did it.
struct Gate {
    table: Arc<CompletionTable<u32>>,
    key: Mutex<Option<OpKey>>,
    release: AtomicBool,
    completed_on: Mutex<Option<ThreadId>>,
    calls: AtomicUsize,
}

impl ProgressSource for Gate {
    fn progress(&self) -> Progress {
        self.calls.fetch_add(1, SeqCst);
        if !self.release.load(SeqCst) {
            return Progress::Idle;
        }
        match self.key.lock().unwrap().take() {
            Some(key) => {
                self.table.complete(key, 7).unwrap();
                *self.completed_on.lock().unwrap() = Some(thread::current().id());
                Progress::Made
            }
            None => Progress::Idle,
        }
    }
}

fn gate(reactor: &Reactor) -> (Arc<Gate>, OpKey) {
    let table = Arc::new(CompletionTable::new());
    let key = table.insert();
    let g = Arc::new(Gate {
        table,
        key: Mutex::new(Some(key)),
        release: AtomicBool::new(false),
        completed_on: Mutex::new(None),
        calls: AtomicUsize::new(0),
    });
    reactor.add_source(g.clone()).unwrap();
    (g, key)
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .expect("getrusage");
    let t = usage.user_time();
    let s = usage.system_time();
    Duration::from_micros((t.tv_sec() * 1_000_000 + t.tv_usec()) as u64)
        + Duration::from_micros((s.tv_sec() * 1_000_000 + s.tv_usec()) as u64)
}

#[test]
fn the_mode_reports_a_thread_and_its_window() {
    let r = adaptive(Duration::from_micros(70), LONG);
    assert!(!r.is_manual(), "adaptive mode has a progress thread");
    assert!(r.auto_thread().is_some());
    assert_eq!(r.mode().spin(), Some(Duration::from_micros(70)));
    assert_eq!(
        ProgressMode::Adaptive(AdaptiveProgress::new().spin(Duration::ZERO)).spin(),
        None
    );
    assert_eq!(ProgressMode::Manual.auto_progress(), None);
}

#[test]
fn a_completion_within_the_window_is_found_by_the_waiting_thread() {
    // A 10 s window and a 10 s interval: the thread sleeps, so only the
    // future's own progress steps can complete the operation.
    let reactor = adaptive(LONG, LONG);
    let (g, key) = gate(&reactor);
    let r = reactor.clone();
    let g2 = g.clone();
    let (value, me) = within(Duration::from_secs(20), "spin completion", move || {
        let g3 = g2.clone();
        let mut polls = 0u32;
        let value = r.block_on(poll_fn(|cx| {
            polls += 1;
            if polls == 50 {
                g3.release.store(true, SeqCst);
            }
            r.poll_completion(&g3.table, key, cx)
        }));
        (value, thread::current().id())
    });
    assert_eq!(value, 7);
    assert_eq!(
        *g.completed_on.lock().unwrap(),
        Some(me),
        "the waiting thread's own step"
    );
    assert_eq!(
        reactor.stats().spin_handoffs,
        0,
        "no sleep within the window"
    );
    assert!(g.table.is_empty());
}

#[test]
fn a_long_wait_sleeps_and_the_thread_wakes_it() {
    // A 200 µs window; the reply comes after 300 ms and only a notify
    // tells the thread (10 s interval).
    let reactor = adaptive(Duration::from_micros(200), LONG);
    let (g, key) = gate(&reactor);
    let (r, g2) = (reactor.clone(), g.clone());
    let waiter = thread::spawn(move || {
        let before = thread_cpu();
        let value = r.block_on(poll_fn(|cx| r.poll_completion(&g2.table, key, cx)));
        (value, thread_cpu() - before, thread::current().id())
    });
    thread::sleep(Duration::from_millis(300));
    g.release.store(true, SeqCst);
    reactor.notify();
    let (value, cpu, waiter_id) = waiter.join().unwrap();
    assert_eq!(value, 7);
    let stats = reactor.stats();
    assert!(
        stats.spin_handoffs >= 1,
        "the future went to sleep: {stats:?}"
    );
    assert_ne!(
        *g.completed_on.lock().unwrap(),
        Some(waiter_id),
        "the auto thread completed it"
    );
    // A manual-mode wait would have used the whole 300 ms.
    assert!(
        cpu < Duration::from_millis(100),
        "a sleeping wait does not burn its core: {cpu:?} of CPU in 300 ms"
    );
}

#[test]
fn a_completion_reopens_the_window() {
    // After a hand-off, the next wait on the same thread spins again: a
    // reply within the window is once more found without the thread.
    let reactor = adaptive(Duration::from_millis(20), LONG);
    let (slow, slow_key) = gate(&reactor);
    let (fast, fast_key) = gate(&reactor);
    let r = reactor.clone();
    let (s2, f2) = (slow.clone(), fast.clone());
    let releaser = {
        let s3 = slow.clone();
        let r3 = reactor.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            s3.release.store(true, SeqCst);
            r3.notify();
        })
    };
    let me = within(Duration::from_secs(20), "reopen", move || {
        assert_eq!(
            r.block_on(poll_fn(|cx| r.poll_completion(&s2.table, slow_key, cx))),
            7
        );
        let handoffs = r.stats().spin_handoffs;
        assert!(handoffs >= 1);
        let mut polls = 0u32;
        let f3 = f2.clone();
        let v = r.block_on(poll_fn(|cx| {
            polls += 1;
            if polls == 20 {
                f3.release.store(true, SeqCst);
            }
            r.poll_completion(&f3.table, fast_key, cx)
        }));
        assert_eq!(v, 7);
        assert_eq!(
            r.stats().spin_handoffs,
            handoffs,
            "the second wait did not sleep"
        );
        thread::current().id()
    });
    releaser.join().unwrap();
    assert_eq!(*fast.completed_on.lock().unwrap(), Some(me));
}

#[test]
fn every_device_operation_completes_under_block_on_and_an_executor() {
    let reactor = adaptive(Duration::from_micros(50), Duration::from_millis(1));
    let (device, source) = Device::start(&reactor);
    reactor.add_source(source).unwrap();
    let (r, d) = (reactor.clone(), device.clone());
    within(Duration::from_secs(60), "adaptive device ops", move || {
        for _ in 0..500 {
            let op = d.post(&r);
            let key = op.key().to_u64();
            assert_eq!(r.block_on(op).key, key);
        }
        let ops: Vec<_> = (0..200).map(|_| d.post(&r)).collect();
        let keys: Vec<u64> = ops.iter().map(|o| o.key().to_u64()).collect();
        let done = futures::executor::block_on(futures::future::join_all(ops));
        assert_eq!(done.iter().map(|c| c.key).collect::<Vec<_>>(), keys);
    });
    device.stop();
    assert!(device.table.is_empty());
    assert_eq!(
        device.drops.load(SeqCst),
        700,
        "every value delivered and dropped once"
    );
}

#[test]
fn a_future_dropped_while_spinning_or_sleeping_leaks_nothing() {
    let reactor = adaptive(Duration::from_millis(5), Duration::from_millis(1));
    let (g, key) = gate(&reactor);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    // Spinning: pending polls within the window.
    for _ in 0..3 {
        assert!(reactor.poll_completion(&g.table, key, &mut cx).is_pending());
    }
    // Sleeping: the window closes, the waker is registered.
    thread::sleep(Duration::from_millis(10));
    let slept = (0..64).any(|_| {
        let _ = reactor.poll_completion(&g.table, key, &mut cx);
        reactor.stats().spin_handoffs > 0
    });
    assert!(slept);
    // The future goes away; its completion comes later and is dropped by
    // the table.
    assert_eq!(g.table.abandon(key), None);
    g.release.store(true, SeqCst);
    reactor.notify();
    common::wait_until(Duration::from_secs(5), || g.table.is_empty());
    assert!(
        g.table.is_empty(),
        "the abandoned slot was freed on completion"
    );
}

#[test]
fn the_thread_stands_aside_while_a_future_spins() {
    // A 1 s window: the future spins for the whole test; the thread,
    // interval 1 ms, finds it spinning and parks instead of watching.
    let reactor = adaptive(Duration::from_secs(1), Duration::from_millis(1));
    let (g, key) = gate(&reactor);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    reopen_window(&reactor);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        assert!(reactor.poll_completion(&g.table, key, &mut cx).is_pending());
    }
    let stats = reactor.stats();
    assert!(stats.stand_asides >= 1, "{stats:?}");
    assert_eq!(stats.spin_handoffs, 0, "{stats:?}");
    // Standing aside, the thread did not sleep on its sockets once per
    // interval (100 sleeps in 100 ms).
    assert!(stats.sleeps < 50, "{stats:?}");
    g.release.store(true, SeqCst);
    let v = within(Duration::from_secs(10), "spin to completion", move || {
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            if let std::task::Poll::Ready(v) = reactor.poll_completion(&g.table, key, &mut cx) {
                return v;
            }
        }
    });
    assert_eq!(v, 7);
}

/// Opens this thread's spin window afresh (a completion on this thread
/// ends the previous one): completes and takes a throwaway operation.
fn reopen_window(reactor: &Reactor) {
    let table = CompletionTable::<u8>::new();
    let k = table.insert();
    table.complete(k, 1).unwrap();
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(reactor.poll_completion(&table, k, &mut cx).is_ready());
}

#[test]
fn idle_sleeps_grow_up_to_the_readiness_sleep() {
    let grow = Reactor::builder()
        .adaptive(
            AdaptiveProgress::new()
                .auto(AutoProgress::new().interval(Duration::from_millis(1)))
                .readiness_sleep(Duration::from_millis(50)),
        )
        .build()
        .unwrap();
    let fixed = adaptive(AdaptiveProgress::DEFAULT_SPIN, Duration::from_millis(1));
    thread::sleep(Duration::from_millis(400));
    let (g, f) = (grow.stats(), fixed.stats());
    // 1 ms sleeps: hundreds in 400 ms. Doubling to 50 ms: about 15.
    assert!(f.timeouts > 100, "{f:?}");
    assert!(g.timeouts < 40, "{g:?}");
    // A notify still ends a long sleep at once.
    let (gate_src, key) = gate(&grow);
    gate_src.release.store(true, SeqCst);
    grow.notify();
    assert!(common::wait_until(Duration::from_secs(5), || gate_src
        .table
        .status(key)
        != psmrail_reactor::OpStatus::Pending));
}
