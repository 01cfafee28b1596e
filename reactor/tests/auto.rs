//! Auto-mode behaviour: pinning (read back with sched_getaffinity inside the
//! thread and /proc from outside), pin failures reported, the thread joined
//! on drop, notify and socket readiness ending long and sub-millisecond
//! sleeps, the interval
//! honoured, productive rounds run back to back, panics caught,
//! register/deregister calls, block_on parking.
#![cfg(not(loom))]

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{thread_exists, thread_name, threads_named, wait_until, within, Device};
use psmrail_reactor::{
    progress_fn, AutoProgress, CpuSet, CpuTopology, Progress, ProgressSource, Reactor,
    SleepStrategy, MAX_CPUS,
};

const LONG: Duration = Duration::from_secs(10);

fn auto(interval: Duration, name: &str) -> Reactor {
    Reactor::builder()
        .auto(AutoProgress::new().interval(interval))
        .thread_name(name)
        .build()
        .unwrap()
}

/// Reads `Cpus_allowed_list` of thread `tid` from /proc (outside view).
fn proc_allowed_list(tid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn thread_is_pinned_to_the_requested_cpus() {
    let allowed = CpuTopology::read_now().allowed;
    // The last allowed CPU: differs from the default (all allowed) whenever
    // the machine has more than one CPU, so the test cannot pass by luck.
    let cpu = allowed.max().unwrap();
    let want: CpuSet = [cpu].into_iter().collect();
    let reactor = Reactor::builder()
        .auto(AutoProgress::new().affinity(want))
        .thread_name("rx-pin-test")
        .build()
        .unwrap();
    let info = reactor.auto_thread().unwrap();
    assert_eq!(info.affinity, want, "sched_getaffinity inside the thread");
    assert_eq!(proc_allowed_list(info.tid), cpu.to_string(), "/proc view");
    assert_eq!(thread_name(info.tid).as_deref(), Some("rx-pin-test"));
    if allowed.len() > 1 {
        assert_ne!(info.affinity, allowed);
    }
}

#[test]
fn without_affinity_the_thread_keeps_the_inherited_set() {
    let reactor = auto(LONG, "rx-nopin");
    let info = reactor.auto_thread().unwrap();
    assert_eq!(
        info.affinity,
        psmrail_reactor::current_thread_affinity().unwrap()
    );
    assert_eq!(info.strategy, SleepStrategy::Poll);
}

#[test]
fn pin_failure_is_reported_and_leaves_no_thread() {
    let bogus: CpuSet = [MAX_CPUS - 1].into_iter().collect();
    let err = Reactor::builder()
        .auto(AutoProgress::new().affinity(bogus))
        .thread_name("rx-badpin")
        .build()
        .unwrap_err();
    assert!(
        err.to_string().contains("1023"),
        "error names the set: {err}"
    );
    // The failed thread is joined by `build`; the kernel may list it for
    // a moment longer while it is reaped.
    let deadline = Instant::now() + Duration::from_secs(2);
    while threads_named("rx-badpin") != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(threads_named("rx-badpin"), 0);
}

#[test]
fn drop_stops_and_joins_the_thread_promptly() {
    for (interval, name) in [
        (LONG, "rx-drop-poll"),
        (Duration::from_micros(500), "rx-drop-park"),
        (Duration::from_micros(10), "rx-drop-nap"),
        (Duration::ZERO, "rx-drop-spin"),
    ] {
        let reactor = auto(interval, name);
        let clone = reactor.clone();
        let tid = reactor.auto_thread().unwrap().tid;
        assert!(thread_exists(tid));
        assert_eq!(thread_name(tid).as_deref(), Some(name));
        drop(reactor);
        assert!(thread_exists(tid), "a clone keeps the thread");
        // Let a Poll/Park thread fall asleep so drop has to wake it.
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        drop(clone);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(1), "{name}: drop took {took:?}");
        // join() has returned; the kernel reaps the task right after.
        assert!(
            wait_until(Duration::from_secs(1), || !thread_exists(tid)),
            "{name}: thread {tid} still alive"
        );
        assert_eq!(threads_named(name), 0);
    }
}

#[test]
fn last_handle_dropped_on_the_auto_thread_itself() {
    // A source holding the last handle drops it inside progress(): the
    // reactor must not try to join its own thread (deadlock), and the
    // thread must still exit.
    let reactor = auto(Duration::from_millis(1), "rx-selfdrop");
    let tid = reactor.auto_thread().unwrap().tid;
    let holder: Arc<Mutex<Option<Reactor>>> = Arc::new(Mutex::new(None));
    let release = Arc::new(AtomicBool::new(false));
    {
        let (holder, release) = (holder.clone(), release.clone());
        reactor
            .add_source(Arc::new(progress_fn(move || {
                if release.load(SeqCst) {
                    drop(holder.lock().unwrap().take());
                }
                Progress::Idle
            })))
            .unwrap();
    }
    *holder.lock().unwrap() = Some(reactor.clone());
    drop(reactor);
    assert!(thread_exists(tid));
    release.store(true, SeqCst);
    assert!(
        wait_until(Duration::from_secs(2), || !thread_exists(tid)),
        "auto thread did not exit after dropping the last handle itself"
    );
}

/// A source that records when it sees posted work.
struct Flagged {
    work: AtomicBool,
    seen: Mutex<Option<Instant>>,
    calls: AtomicUsize,
}

impl ProgressSource for Flagged {
    fn progress(&self) -> Progress {
        self.calls.fetch_add(1, SeqCst);
        if self.work.swap(false, SeqCst) {
            *self.seen.lock().unwrap() = Some(Instant::now());
            return Progress::Made;
        }
        Progress::Idle
    }
}

fn flagged() -> Arc<Flagged> {
    Arc::new(Flagged {
        work: AtomicBool::new(false),
        seen: Mutex::new(None),
        calls: AtomicUsize::new(0),
    })
}

#[test]
fn notify_ends_a_long_sleep_quickly() {
    let reactor = auto(LONG, "rx-notify");
    let src = flagged();
    reactor.add_source(src.clone()).unwrap();
    assert!(wait_until(Duration::from_secs(2), || reactor
        .stats()
        .sleeping));
    // Really asleep: posting without notify is not noticed.
    let calls = src.calls.load(SeqCst);
    src.work.store(true, SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        src.calls.load(SeqCst),
        calls,
        "thread should be asleep (10 s interval)"
    );
    assert!(src.seen.lock().unwrap().is_none());
    let before = reactor.stats();
    let start = Instant::now();
    reactor.notify();
    assert!(wait_until(Duration::from_secs(2), || src
        .seen
        .lock()
        .unwrap()
        .is_some()));
    let latency = src.seen.lock().unwrap().unwrap() - start;
    assert!(
        latency < Duration::from_millis(500),
        "notify took {latency:?}"
    );
    let after = reactor.stats();
    assert_eq!(after.os_wakes, before.os_wakes + 1);
    assert!(after.notify_wakeups > before.notify_wakeups);
}

#[test]
fn park_strategy_wakes_on_notify() {
    let reactor = auto(Duration::from_micros(900), "rx-park");
    assert_eq!(reactor.auto_thread().unwrap().strategy, SleepStrategy::Park);
    let src = flagged();
    reactor.add_source(src.clone()).unwrap();
    for _ in 0..20 {
        src.work.store(true, SeqCst);
        reactor.notify();
        assert!(wait_until(Duration::from_secs(1), || src
            .seen
            .lock()
            .unwrap()
            .take()
            .is_some()));
    }
    // Every sleep so far may have been ended by a notify; left alone, the
    // parked thread must also wake by itself when its interval runs out.
    assert!(
        wait_until(Duration::from_secs(1), || reactor.stats().timeouts > 0),
        "{:?}",
        reactor.stats()
    );
    assert!(reactor.stats().sleeps > 0);
}

#[test]
fn notify_is_one_atomic_when_the_thread_is_awake() {
    // A source that always has work keeps the thread out of sleep; then no
    // notify may cost a wake-up system call.
    let reactor = auto(LONG, "rx-busy");
    let busy = Arc::new(AtomicBool::new(true));
    let b = busy.clone();
    reactor
        .add_source(Arc::new(progress_fn(move || {
            Progress::from(b.load(SeqCst))
        })))
        .unwrap();
    assert!(wait_until(Duration::from_secs(1), || reactor
        .stats()
        .productive_rounds
        > 100));
    let before = reactor.stats();
    for _ in 0..10_000 {
        reactor.notify();
    }
    let after = reactor.stats();
    assert_eq!(after.os_wakes, before.os_wakes, "notify made system calls");
    assert_eq!(after.sleeps, before.sleeps);
    busy.store(false, SeqCst);
    assert!(wait_until(Duration::from_secs(2), || reactor
        .stats()
        .sleeping));
    reactor.notify();
    assert_eq!(
        reactor.stats().os_wakes,
        after.os_wakes + 1,
        "asleep: one wake-up"
    );
}

/// A source with a registered socket: readiness must end the sleep.
struct SocketSource {
    sock: Mutex<mio::net::UnixStream>,
    got: AtomicUsize,
    registered: AtomicUsize,
    deregistered: AtomicUsize,
}

impl ProgressSource for SocketSource {
    fn progress(&self) -> Progress {
        let mut buf = [0u8; 64];
        let mut sock = self.sock.lock().unwrap();
        let mut made = Progress::Idle;
        while let Ok(n) = sock.read(&mut buf) {
            if n == 0 {
                break;
            }
            self.got.fetch_add(n, SeqCst);
            made = Progress::Made;
        }
        made
    }

    fn register(&self, registry: &mio::Registry, token: mio::Token) -> std::io::Result<()> {
        self.registered.fetch_add(1, SeqCst);
        registry.register(
            &mut *self.sock.lock().unwrap(),
            token,
            mio::Interest::READABLE,
        )
    }

    fn deregister(&self, registry: &mio::Registry) -> std::io::Result<()> {
        self.deregistered.fetch_add(1, SeqCst);
        registry.deregister(&mut *self.sock.lock().unwrap())
    }
}

#[test]
fn socket_readiness_ends_a_long_sleep() {
    let reactor = auto(LONG, "rx-socket");
    let (a, mut b) = mio::net::UnixStream::pair().unwrap();
    let src = Arc::new(SocketSource {
        sock: Mutex::new(a),
        got: AtomicUsize::new(0),
        registered: AtomicUsize::new(0),
        deregistered: AtomicUsize::new(0),
    });
    let id = reactor.add_source(src.clone()).unwrap();
    assert_eq!(src.registered.load(SeqCst), 1);
    for round in 1..=3 {
        assert!(wait_until(Duration::from_secs(2), || reactor
            .stats()
            .sleeping));
        let io_before = reactor.stats().io_wakeups;
        let start = Instant::now();
        b.write_all(b"ping").unwrap();
        assert!(wait_until(Duration::from_secs(2), || src.got.load(SeqCst) == 4 * round));
        assert!(start.elapsed() < Duration::from_millis(500));
        assert!(reactor.stats().io_wakeups > io_before);
    }
    assert!(reactor.remove_source(id).is_some());
    assert_eq!(src.deregistered.load(SeqCst), 1);
    assert!(reactor.remove_source(id).is_none());
}

#[test]
fn register_and_deregister_are_paired() {
    let make = || {
        let (a, _b) = mio::net::UnixStream::pair().unwrap();
        Arc::new(SocketSource {
            sock: Mutex::new(a),
            got: AtomicUsize::new(0),
            registered: AtomicUsize::new(0),
            deregistered: AtomicUsize::new(0),
        })
    };
    // Dropping the reactor deregisters what is still added.
    let reactor = auto(Duration::from_millis(5), "rx-reg");
    let s = make();
    reactor.add_source(s.clone()).unwrap();
    drop(reactor);
    assert_eq!(
        (s.registered.load(SeqCst), s.deregistered.load(SeqCst)),
        (1, 1)
    );
    // Sub-millisecond intervals from 50 µs sleep in epoll too (timed by a
    // timerfd).
    for interval in [Duration::from_micros(50), Duration::from_micros(100)] {
        let reactor = auto(interval, "rx-reg-subms");
        let s = make();
        let id = reactor.add_source(s.clone()).unwrap();
        reactor.remove_source(id);
        assert_eq!(
            (s.registered.load(SeqCst), s.deregistered.load(SeqCst)),
            (1, 1),
            "{interval:?}"
        );
    }
    // Manual mode, interval 0 (spinning) and naps below 50 µs never sleep
    // in epoll: no registration.
    for reactor in [
        Reactor::manual(),
        auto(Duration::ZERO, "rx-reg-spin"),
        auto(Duration::from_micros(20), "rx-reg-nap"),
    ] {
        let s = make();
        let id = reactor.add_source(s.clone()).unwrap();
        reactor.remove_source(id);
        assert_eq!(
            (s.registered.load(SeqCst), s.deregistered.load(SeqCst)),
            (0, 0)
        );
    }
}

#[test]
fn socket_readiness_ends_sub_millisecond_sleeps() {
    // Park (900 µs): a write while the thread sleeps ends the sleep as
    // readiness (counted as an I/O wake-up), not as a timeout. A timer
    // expiry landing in the same instant could win a round now and then,
    // hence "most rounds".
    let reactor = auto(Duration::from_micros(900), "rx-subms-io");
    assert_eq!(reactor.auto_thread().unwrap().strategy, SleepStrategy::Park);
    let (a, mut b) = mio::net::UnixStream::pair().unwrap();
    let src = Arc::new(SocketSource {
        sock: Mutex::new(a),
        got: AtomicUsize::new(0),
        registered: AtomicUsize::new(0),
        deregistered: AtomicUsize::new(0),
    });
    reactor.add_source(src.clone()).unwrap();
    let rounds = 10;
    let mut by_io = 0;
    for round in 1..=rounds {
        assert!(wait_until(Duration::from_secs(2), || reactor
            .stats()
            .sleeping));
        let io_before = reactor.stats().io_wakeups;
        b.write_all(b"ping").unwrap();
        assert!(wait_until(Duration::from_secs(2), || src.got.load(SeqCst) == 4 * round));
        if reactor.stats().io_wakeups > io_before {
            by_io += 1;
        }
    }
    assert!(
        by_io * 2 > rounds,
        "only {by_io} of {rounds} sleeps ended by readiness"
    );
}

#[test]
fn failed_registration_is_reported_and_the_source_not_added() {
    struct Refuses;
    impl ProgressSource for Refuses {
        fn progress(&self) -> Progress {
            Progress::Idle
        }
        fn register(&self, _: &mio::Registry, _: mio::Token) -> std::io::Result<()> {
            Err(std::io::Error::other("no sockets today"))
        }
    }
    let reactor = auto(Duration::from_millis(5), "rx-refuse");
    let err = reactor.add_source(Arc::new(Refuses)).unwrap_err();
    assert_eq!(err.to_string(), "no sockets today");
    assert_eq!(reactor.stats().sources, 0);
}

#[test]
fn idle_rounds_follow_the_interval() {
    for (interval, strategy) in [
        (Duration::from_millis(2), SleepStrategy::Poll),
        (Duration::from_micros(500), SleepStrategy::Park),
    ] {
        let reactor = auto(interval, "rx-interval");
        assert_eq!(reactor.auto_thread().unwrap().strategy, strategy);
        let before = reactor.stats().rounds;
        let window = Duration::from_millis(300);
        std::thread::sleep(window);
        let rounds = reactor.stats().rounds - before;
        let ideal = (window.as_micros() / interval.as_micros()) as u64;
        // Not spinning (far above) and not stuck (far below); loose bounds
        // for a loaded 2-core machine.
        assert!(
            rounds <= ideal + ideal / 2 + 5,
            "{strategy:?}: {rounds} rounds, ideal {ideal}"
        );
        assert!(
            rounds >= ideal / 10,
            "{strategy:?}: {rounds} rounds, ideal {ideal}"
        );
    }
}

#[test]
fn productive_rounds_run_back_to_back() {
    // With a 10 s interval, 1000 productive steps only finish quickly if the
    // thread goes again at once after a round that made progress.
    let reactor = auto(LONG, "rx-burst");
    let left = Arc::new(AtomicUsize::new(1000));
    let l = left.clone();
    reactor
        .add_source(Arc::new(progress_fn(move || {
            Progress::from(l.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok())
        })))
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || left.load(SeqCst) == 0));
}

#[test]
fn source_panic_is_caught_and_the_thread_goes_on() {
    let reactor = auto(Duration::from_millis(1), "rx-panic");
    reactor
        .add_source(Arc::new(progress_fn(|| {
            panic!("source bug (expected by the test)")
        })))
        .unwrap();
    let src = flagged();
    reactor.add_source(src.clone()).unwrap();
    assert!(wait_until(Duration::from_secs(2), || reactor
        .stats()
        .source_panics
        == 1));
    src.work.store(true, SeqCst);
    reactor.notify();
    assert!(wait_until(Duration::from_secs(2), || src
        .seen
        .lock()
        .unwrap()
        .is_some()));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        reactor.stats().source_panics,
        1,
        "poisoned source not called again"
    );
}

#[test]
fn block_on_parks_in_auto_mode() {
    let reactor = auto(LONG, "rx-blockon");
    let (device, source) = Device::start(&reactor);
    reactor.add_source(source).unwrap();
    let r = reactor.clone();
    let d = device.clone();
    within(Duration::from_secs(20), "auto block_on", move || {
        for _ in 0..100 {
            let op = d.post(&r);
            let key = op.key();
            assert_eq!(r.block_on(op).key, key.to_u64());
        }
    });
    // 100 ops with a 10 s interval: every completion came through notify,
    // and the thread only ran rounds when there was something to do.
    let stats = reactor.stats();
    assert!(stats.rounds < 100 * 20, "{stats:?}");
    assert!(stats.notify_wakeups > 0);
    device.stop();
    assert!(device.table.is_empty());
}

#[test]
fn auto_thread_cpu_time_is_reported() {
    let reactor = auto(Duration::ZERO, "rx-cpu");
    std::thread::sleep(Duration::from_millis(50));
    let cpu = reactor.stats().auto_thread_cpu.unwrap();
    assert!(
        cpu > Duration::from_millis(1),
        "a spinning thread uses CPU: {cpu:?}"
    );
    assert_eq!(Reactor::manual().stats().auto_thread_cpu, None);
}
