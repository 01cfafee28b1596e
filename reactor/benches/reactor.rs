//! Reactor benchmarks.
//!
//! * `slot/*`: cost of one operation's slot life cycle on one thread
//!   (insert -> complete -> take), with and without a registered waker, and
//!   a mutex-protected slab as the baseline the design was measured against;
//!   `slot_contended_2_threads/*`: the same with a second thread cycling
//!   slots of the same table (noisy on a shared 2-core machine; a mutex
//!   looks good there when one thread keeps re-taking the lock).
//! * `round/*`: one manual progress round, one busy-poll of a pending op,
//!   and `notify` while the auto thread is awake (one atomic swap).
//! * `wake/*`: latency from `complete()` on one thread to the waiting task
//!   having the value on another (the value carries the completion time),
//!   plus the end-to-end post -> notify -> complete -> ready time, in auto
//!   mode (1 ms interval: sleeping in epoll; interval 0: spinning) and in
//!   manual mode (the waiter busy-polls).
//! * idle CPU of the auto thread at interval 1000 µs (and, for context,
//!   100 µs and 1 µs), measured over 2 s with the thread's CPU clock and
//!   cross-checked with /proc/self/task/<tid>/schedstat, next to the floor
//!   of this machine (a bare thread sleeping `interval` in a loop). Printed,
//!   not a criterion figure. Skipped when a filter that does not match
//!   `idle_cpu` is given.
//!
//! Run: `CARGO_TARGET_DIR=/work/target-reactor cargo bench -p psmrail-reactor --bench reactor`
//! (nothing else heavy running: the machine has 2 cores).

use std::future::poll_fn;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::Criterion;
use psmrail_reactor::{
    progress_fn, AutoProgress, CompletionTable, OpKey, Progress, ProgressSource, Reactor,
};

fn noop_waker() -> Waker {
    futures::task::noop_waker()
}

/// A baseline slot: `None` free, `Some(None)` pending, `Some(Some(v))` done.
type BaselineSlot = Option<Option<u64>>;

/// The baseline: the same life cycle on a `Mutex<Vec<..>>` slab.
#[derive(Default)]
struct MutexSlab {
    inner: Mutex<(Vec<BaselineSlot>, Vec<usize>)>,
}

impl MutexSlab {
    fn insert(&self) -> usize {
        let mut g = self.inner.lock().unwrap();
        match g.1.pop() {
            Some(i) => {
                g.0[i] = Some(None);
                i
            }
            None => {
                g.0.push(Some(None));
                g.0.len() - 1
            }
        }
    }
    fn complete(&self, i: usize, v: u64) {
        let mut g = self.inner.lock().unwrap();
        if let Some(slot @ None) = g.0[i].as_mut() {
            *slot = Some(v);
        }
    }
    fn take(&self, i: usize) -> Option<u64> {
        let mut g = self.inner.lock().unwrap();
        let v = g.0[i].as_mut()?.take()?;
        g.0[i] = None;
        g.1.push(i);
        Some(v)
    }
}

fn slot_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("slot");
    let table = CompletionTable::<u64>::with_capacity(64);
    g.bench_function("insert_complete_take", |b| {
        b.iter(|| {
            let k = table.insert();
            let _ = table.complete(k, black_box(1));
            black_box(table.try_take(k))
        })
    });
    let waker = noop_waker();
    g.bench_function("insert_poll_complete_poll", |b| {
        let mut cx = Context::from_waker(&waker);
        b.iter(|| {
            let k = table.insert();
            let first = table.poll_take(k, &mut cx);
            debug_assert!(first.is_pending());
            let _ = table.complete(k, black_box(1));
            black_box(table.poll_take(k, &mut cx))
        })
    });
    g.bench_function("insert_retire", |b| {
        // The manual fast path: the engine hands the value over itself.
        b.iter(|| {
            let k = table.insert();
            black_box(table.retire(black_box(k)))
        })
    });
    let baseline = MutexSlab::default();
    g.bench_function("baseline_mutex_slab_insert_complete_take", |b| {
        b.iter(|| {
            let k = baseline.insert();
            baseline.complete(k, black_box(1));
            black_box(baseline.take(k))
        })
    });
    g.finish();

    // Two threads cycling slots of one shared table at once (the engine
    // and the futures of one endpoint hit the table from several threads).
    let mut g = c.benchmark_group("slot_contended_2_threads");
    let shared = Arc::new(CompletionTable::<u64>::with_capacity(64));
    g.bench_function("insert_complete_take", |b| {
        b.iter_custom(|iters| {
            contended(iters, &shared, |t: &CompletionTable<u64>| {
                let k = t.insert();
                let _ = t.complete(k, black_box(1));
                black_box(t.try_take(k));
            })
        })
    });
    let shared = Arc::new(MutexSlab::default());
    g.bench_function("baseline_mutex_slab_insert_complete_take", |b| {
        b.iter_custom(|iters| {
            contended(iters, &shared, |t: &MutexSlab| {
                let k = t.insert();
                t.complete(k, black_box(1));
                black_box(t.take(k));
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("round");
    let reactor = Reactor::manual();
    reactor
        .add_source(Arc::new(progress_fn(|| Progress::Idle)))
        .unwrap();
    g.bench_function("manual_progress_one_idle_source", |b| {
        b.iter(|| black_box(reactor.progress()))
    });
    let mut cx = Context::from_waker(&waker);
    g.bench_function("manual_poll_completion_pending", |b| {
        // A pending op in manual mode: one round plus two looks at the slot
        // (the cost of each busy-poll).
        let pending = table.insert();
        b.iter(|| black_box(reactor.poll_completion(&table, pending, &mut cx)))
    });
    g.bench_function("manual_poll_completion_with_pending", |b| {
        // The same pending op through the fast-path helper, whose own step
        // finds nothing: a full round only every FULL_ROUND_EVERY polls.
        let pending = table.insert();
        b.iter(|| {
            black_box(
                reactor.poll_completion_with(&table, pending, &mut cx, || black_box(None::<u64>)),
            )
        })
    });
    g.bench_function("notify_auto_thread_awake", |b| {
        let auto = Reactor::auto(AutoProgress::new().interval(Duration::from_millis(1))).unwrap();
        let busy = Arc::new(AtomicBool::new(true));
        let flag = busy.clone();
        auto.add_source(Arc::new(progress_fn(move || {
            Progress::from(flag.load(Acquire))
        })))
        .unwrap();
        b.iter(|| auto.notify());
        busy.store(false, Release);
    });
    g.finish();
}

/// Runs `op` `iters` times on this thread while a second thread runs it
/// on the same table; returns this thread's time.
fn contended<S: Send + Sync + 'static>(iters: u64, table: &Arc<S>, op: fn(&S)) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let helper = {
        let (table, stop, started) = (table.clone(), stop.clone(), started.clone());
        std::thread::spawn(move || {
            started.store(true, Release);
            while !stop.load(Acquire) {
                for _ in 0..64 {
                    op(&table);
                }
            }
        })
    };
    while !started.load(Acquire) {
        std::hint::spin_loop();
    }
    let start = Instant::now();
    for _ in 0..iters {
        op(table);
    }
    let took = start.elapsed();
    stop.store(true, Release);
    helper.join().unwrap();
    took
}

/// A source that completes the posted key with the current time.
struct Doorbell {
    table: Arc<CompletionTable<Instant>>,
    posted: AtomicU64,
}

impl ProgressSource for Doorbell {
    fn progress(&self) -> Progress {
        let raw = self.posted.swap(0, Acquire);
        if raw == 0 {
            return Progress::Idle;
        }
        let _ = self.table.complete(OpKey::from_u64(raw), Instant::now());
        Progress::Made
    }
}

/// One round trip through an auto reactor: returns (post -> ready,
/// complete -> ready).
fn auto_round_trip(reactor: &Reactor, bell: &Doorbell) -> (Duration, Duration) {
    let key = bell.table.insert();
    let start = Instant::now();
    bell.posted.store(key.to_u64(), Release);
    reactor.notify();
    let done_at = reactor.block_on(poll_fn(|cx| reactor.poll_completion(&bell.table, key, cx)));
    let now = Instant::now();
    (now - start, now - done_at)
}

fn wake_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("wake");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(4));
    for (name, interval) in [
        ("auto_interval_1ms", Duration::from_millis(1)),
        ("auto_interval_0_spin", Duration::ZERO),
    ] {
        let reactor = Reactor::auto(AutoProgress::new().interval(interval)).unwrap();
        let bell = Arc::new(Doorbell {
            table: Arc::new(CompletionTable::with_capacity(4)),
            posted: AtomicU64::new(0),
        });
        reactor.add_source(bell.clone()).unwrap();
        g.bench_function(format!("{name}/complete_to_task"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| auto_round_trip(&reactor, &bell).1).sum())
        });
        g.bench_function(format!("{name}/post_to_ready"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| auto_round_trip(&reactor, &bell).0).sum())
        });
    }

    // Manual mode: a foreign thread completes (stamping the time); the
    // waiter busy-polls through poll_completion inside block_on.
    let reactor = Reactor::manual();
    reactor
        .add_source(Arc::new(progress_fn(|| Progress::Idle)))
        .unwrap();
    let table = Arc::new(CompletionTable::<Instant>::with_capacity(4));
    let posted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let completer = {
        let (table, posted, stop) = (table.clone(), posted.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Acquire) {
                let raw = posted.swap(0, Acquire);
                if raw != 0 {
                    let _ = table.complete(OpKey::from_u64(raw), Instant::now());
                } else {
                    std::hint::spin_loop();
                }
            }
        })
    };
    g.bench_function("manual_busy_poll/complete_to_task", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let key = table.insert();
                    posted.store(key.to_u64(), Release);
                    let done_at =
                        reactor.block_on(poll_fn(|cx| reactor.poll_completion(&table, key, cx)));
                    done_at.elapsed()
                })
                .sum()
        })
    });
    stop.store(true, Release);
    completer.join().unwrap();
    g.finish();
}

/// Thread CPU time from /proc/self/task/<tid>/schedstat (ns on CPU).
fn schedstat_cpu(tid: i32) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The floor: CPU of a bare thread doing nothing but `sleep(interval)` in a
/// loop (timer and scheduler cost of this machine), over the same window.
fn bare_sleep_cpu(interval: Duration, window: Duration) -> f64 {
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let t = std::thread::spawn(move || {
        let me = std::fs::read_link("/proc/thread-self").ok();
        let tid = me.and_then(|p| p.file_name()?.to_str()?.parse::<i32>().ok());
        let _ = tx.send(tid);
        while !flag.load(Acquire) {
            std::thread::sleep(interval);
        }
    });
    let tid = rx.recv().ok().flatten();
    std::thread::sleep(Duration::from_millis(200));
    let c0 = tid.and_then(schedstat_cpu);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let c1 = tid.and_then(schedstat_cpu);
    let elapsed = t0.elapsed();
    stop.store(true, Release);
    let _ = t.join();
    match (c0, c1) {
        (Some(a), Some(b)) => 100.0 * (b - a).as_secs_f64() / elapsed.as_secs_f64(),
        _ => f64::NAN,
    }
}

fn idle_cpu() {
    println!();
    println!("idle CPU of the auto progress thread (one idle source, 2 s window)");
    for interval in [
        Duration::from_micros(1000),
        Duration::from_micros(100),
        Duration::from_micros(1),
    ] {
        let reactor = Reactor::auto(AutoProgress::new().interval(interval)).unwrap();
        reactor
            .add_source(Arc::new(progress_fn(|| Progress::Idle)))
            .unwrap();
        let info = reactor.auto_thread().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let (s0, p0, t0) = (reactor.stats(), schedstat_cpu(info.tid), Instant::now());
        std::thread::sleep(Duration::from_secs(2));
        let (s1, p1, elapsed) = (reactor.stats(), schedstat_cpu(info.tid), t0.elapsed());
        let cpu = s1.auto_thread_cpu.unwrap() - s0.auto_thread_cpu.unwrap();
        let pct = 100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64();
        let proc_pct = match (p0, p1) {
            (Some(a), Some(b)) => format!(
                "{:.2}%",
                100.0 * (b - a).as_secs_f64() / elapsed.as_secs_f64()
            ),
            _ => "n/a".to_owned(),
        };
        let rounds = (s1.rounds - s0.rounds) as f64 / elapsed.as_secs_f64();
        let floor = bare_sleep_cpu(interval, Duration::from_secs(2));
        println!(
            "idle_cpu interval {:>5} µs ({:?}): {pct:.2}% of a core (schedstat {proc_pct}), {rounds:.0} rounds/s; bare sleep loop {floor:.2}%{}",
            interval.as_micros(),
            info.strategy,
            if interval == Duration::from_micros(1000) {
                if pct < 2.0 { "  [goal < 2%: met]" } else { "  [goal < 2%: MISSED]" }
            } else {
                ""
            }
        );
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    slot_benches(&mut c);
    wake_benches(&mut c);
    c.final_summary();
    // Positional (non-flag) arguments are criterion filters.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if filters.is_empty() || filters.iter().any(|f| "idle_cpu".contains(f.as_str())) {
        idle_cpu();
    }
}
