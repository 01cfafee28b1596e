//! Behaviour of `Counter`, including its crate-internal side (`inc`,
//! `inc_err`, `set_listener`).

use super::*;
use crate::fabric::wait_list::{block_on_strict, Dither};
use crate::reactor::{progress_fn, AutoProgress, Progress};
use std::sync::Barrier;
use std::task::{Wake, Waker};

fn manual() -> Counter {
    Counter::new(CounterAttr::new(), Reactor::manual())
}

fn auto() -> Counter {
    let reactor = Reactor::auto(AutoProgress::new()).expect("auto reactor");
    Counter::new(CounterAttr::new(), reactor)
}

fn waiters(c: &Counter) -> usize {
    let n = lock(&c.inner.waiters).count();
    assert_eq!(n, c.inner.waiting.load(SeqCst), "mirror out of date");
    n
}

struct NoopWake;
impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// A manual reactor whose source runs `step(round)` each round; the
/// counter is handed to `step`.
fn manual_with_source(
    step: impl Fn(&Counter, usize) -> bool + Send + Sync + 'static,
) -> (Counter, Arc<AtomicUsize>) {
    let reactor = Reactor::manual();
    let c = Counter::new(CounterAttr::new(), reactor.clone());
    let rounds = Arc::new(AtomicUsize::new(0));
    let (r, cc) = (rounds.clone(), c.clone());
    reactor
        .add_source(Arc::new(progress_fn(move || {
            let n = r.fetch_add(1, SeqCst);
            Progress::from(step(&cc, n))
        })))
        .unwrap();
    (c, rounds)
}

#[test]
fn add_set_and_error_values() {
    for c in [manual(), auto()] {
        assert_eq!((c.read(), c.read_err()), (0, 0));
        c.inc();
        c.add(5);
        assert_eq!(c.read(), 6);
        c.set(2);
        assert_eq!(c.read(), 2, "set may lower the value");
        c.inc_err();
        c.add_err(3);
        assert_eq!(c.read_err(), 4);
        c.set_err(1);
        assert_eq!(c.read_err(), 1);
        assert_eq!(c.read(), 2, "errors never touch the success count");
        c.set(u64::MAX);
        c.add(2);
        assert_eq!(c.read(), 1, "add wraps");
    }
}

#[test]
fn manual_read_progresses_and_read_err_does_not() {
    let (c, rounds) = manual_with_source(|c, _| {
        c.inc();
        true
    });
    assert_eq!(c.read_err(), 0);
    assert_eq!(rounds.load(SeqCst), 0, "read_err never progresses");
    assert_eq!(c.read(), 1);
    assert_eq!(c.read(), 2);
    assert_eq!(rounds.load(SeqCst), 2);
}

#[test]
fn wait_thresholds_and_timeouts_in_both_modes() {
    for c in [manual(), auto()] {
        c.wait(0, Some(Duration::ZERO)).unwrap();
        c.add(5);
        c.wait(5, Some(Duration::ZERO)).unwrap();
        c.wait(3, None).unwrap();
        for timeout in [Duration::ZERO, Duration::from_millis(20)] {
            let e = c.wait(6, Some(timeout)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
            assert!(e.message().contains("below 6"), "{e}");
        }
        assert_eq!(waiters(&c), 0, "a timed-out wait leaves no sleeper");
    }
}

#[test]
fn wait_is_woken_by_another_thread() {
    for c in [manual(), auto()] {
        let other = c.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(5));
                other.inc();
            }
        });
        c.wait(3, None).unwrap();
        assert!(c.read() >= 3);
        t.join().unwrap();
        assert_eq!(waiters(&c), 0);
    }
}

#[test]
fn wait_reports_avail_when_an_error_is_counted() {
    for c in [manual(), auto()] {
        c.add_err(2); // earlier errors do not matter
        let other = c.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.inc_err();
        });
        let e = c.wait(10, Some(Duration::from_secs(30))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Avail, "{e}");
        assert!(e.message().contains("read_err() = 3"), "{e}");
        t.join().unwrap();
    }
}

#[test]
fn manual_wait_progresses() {
    let (c, rounds) = manual_with_source(|c, n| {
        if n % 2 == 1 {
            c.inc();
        }
        n % 2 == 1
    });
    c.wait(3, None).unwrap();
    assert_eq!(c.inner.value.load(SeqCst), 3);
    assert_eq!(rounds.load(SeqCst), 6);
    assert_eq!(futures::executor::block_on(c.wait_for(4)), ());
    c.inner.reactor.clone().block_on(c.wait_for(5));
    assert!(c.inner.value.load(SeqCst) >= 5);
}

#[test]
fn manual_wait_for_or_error_sees_an_error_made_by_progress() {
    let (c, _) = manual_with_source(|c, n| {
        if n == 3 {
            c.inc_err();
        }
        n == 3
    });
    let e = futures::executor::block_on(c.wait_for_or_error(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Avail);
}

#[test]
fn wait_for_is_woken_in_auto_mode() {
    let c = auto();
    let other = c.clone();
    let t = std::thread::spawn(move || {
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(5));
            other.inc();
        }
    });
    futures::executor::block_on(c.wait_for(4));
    t.join().unwrap();
    assert_eq!(c.read(), 4);
    assert_eq!(waiters(&c), 0);
}

#[test]
fn wait_for_on_tokio_and_wait_for_or_error() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let c = auto();
    let (a, b) = (c.clone(), c.clone());
    let ok = rt.spawn(async move { a.wait_for(2).await });
    let failing = rt.spawn(async move { b.wait_for_or_error(100).await });
    let t = {
        let c = c.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            c.add(2);
            std::thread::sleep(Duration::from_millis(10));
            c.inc_err();
        })
    };
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), ok)
            .await
            .expect("wait_for never woken")
            .unwrap();
        let e = tokio::time::timeout(Duration::from_secs(30), failing)
            .await
            .expect("wait_for_or_error never woken")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Avail);
    });
    t.join().unwrap();
}

#[test]
fn dropped_wait_for_leaves_no_waiter() {
    let c = auto();
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut a = c.wait_for(1);
    let mut b = c.wait_for_or_error(1);
    assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut b).poll(&mut cx).is_pending());
    assert_eq!(waiters(&c), 2, "re-polling re-arms the same key");
    drop(a);
    assert_eq!(waiters(&c), 1);
    c.inc();
    assert_eq!(waiters(&c), 0, "woken wakers leave the list");
    assert!(Pin::new(&mut b).poll(&mut cx).is_ready());
    drop(b);
    assert_eq!(waiters(&c), 0);
}

#[test]
fn listener_sees_every_change_of_the_success_value() {
    let c = manual();
    c.inc(); // before the listener: not reported
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s, reader) = (seen.clone(), c.clone());
    c.set_listener(Arc::new(move |v| {
        // Outside the counter's lock: reading it from here cannot deadlock.
        assert_eq!(reader.read_err(), 0);
        s.lock().unwrap().push(v);
    }));
    c.inc();
    c.add(3);
    c.set(10);
    c.set(10);
    c.add(0);
    c.inc_err();
    c.add_err(2);
    c.set_err(0);
    assert_eq!(*seen.lock().unwrap(), vec![2, 5, 10, 10, 10]);

    let replaced = Arc::new(AtomicUsize::new(0));
    let r = replaced.clone();
    c.set_listener(Arc::new(move |v| r.store(v as usize, SeqCst)));
    c.inc();
    assert_eq!(replaced.load(SeqCst), 11);
    assert_eq!(seen.lock().unwrap().len(), 5, "the old listener is gone");
}

#[test]
fn listener_may_change_the_counter() {
    let c = manual();
    let inner = c.clone();
    c.set_listener(Arc::new(move |v| {
        if v == 1 {
            inner.add(9);
        }
    }));
    c.inc();
    assert_eq!(c.read(), 10);
}

#[test]
fn concurrent_increments_are_exact() {
    const THREADS: u64 = 4;
    const EACH: u64 = 25_000;
    let c = auto();
    let seen = Arc::new(Mutex::new(Vec::with_capacity((THREADS * EACH) as usize)));
    let s = seen.clone();
    c.set_listener(Arc::new(move |v| s.lock().unwrap().push(v)));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..EACH {
                    if i % 2 == 0 {
                        c.inc();
                    } else {
                        c.add(1);
                    }
                    c.inc_err();
                }
            })
        })
        .collect();
    // A waiter in the middle of it all must see the final value.
    c.wait(THREADS * EACH, Some(Duration::from_secs(60)))
        .or_else(|e| {
            // Errors are counted concurrently: Avail is expected; wait again
            // on the success count alone.
            assert_eq!(e.kind(), ErrorKind::Avail);
            futures::executor::block_on(c.wait_for(THREADS * EACH));
            Ok::<(), Error>(())
        })
        .unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(c.read(), THREADS * EACH);
    assert_eq!(c.read_err(), THREADS * EACH);
    let mut values = seen.lock().unwrap().clone();
    values.sort_unstable();
    assert_eq!(values, (1..=THREADS * EACH).collect::<Vec<_>>());
}

#[test]
fn no_lost_wakeups_between_a_waiter_and_an_incrementer() {
    const ROUNDS: u64 = 50_000;
    const LIMIT: Duration = Duration::from_secs(30);
    let c = auto();
    let barrier = Arc::new(Barrier::new(2));
    let dither = Arc::new(Dither::default());
    let (other, b, d) = (c.clone(), barrier.clone(), dither.clone());
    let t = std::thread::spawn(move || {
        for i in 0..ROUNDS {
            b.wait();
            d.spin(i);
            other.inc();
        }
    });
    let mut early = 0;
    for i in 1..=ROUNDS {
        barrier.wait();
        let was_early = c.inner.value.load(SeqCst) >= i;
        early += u64::from(was_early);
        dither.early(was_early);
        match i % 3 {
            0 => block_on_strict(c.wait_for(i), LIMIT)
                .unwrap_or_else(|e| panic!("round {i}: wait_for: {e}")),
            1 => block_on_strict(c.wait_for_or_error(i), LIMIT)
                .unwrap_or_else(|e| panic!("round {i}: wait_for_or_error: {e}"))
                .unwrap(),
            // A lost notify shows as TimedOut.
            _ => c
                .wait(i, Some(LIMIT))
                .unwrap_or_else(|e| panic!("round {i}: wait: {e}")),
        }
    }
    t.join().unwrap();
    assert_eq!(c.read(), ROUNDS);
    assert_eq!(waiters(&c), 0);
    // The dither kept the change near the waiter's check, on both sides.
    assert!(early > 0 && early < ROUNDS, "early {early} of {ROUNDS}");
}

#[test]
fn identity_and_debug() {
    let a = manual();
    let b = manual();
    assert!(a.same(&a.clone()));
    assert!(!a.same(&b));
    a.add(3);
    assert!(format!("{a:?}").contains("value: 3"));
}
