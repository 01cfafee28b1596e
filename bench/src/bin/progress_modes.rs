//! The progress modes compared under tokio: manual, auto and adaptive.
//!
//! ```text
//! cargo run --release -p psmrail-bench --bin progress_modes
//! cargo run --release -p psmrail-bench --bin progress_modes -- --rounds 11 --engine native
//! cargo run --release -p psmrail-bench --bin progress_modes -- --help
//! ```
//!
//! Options (`--help` lists them): `--rounds N` (default 5), `--engine`,
//! `--idle-ms`, `--gap-ms`, `--iterations N` (default 20000) and
//! `--wakeups N` (default 25) size the measurements below; `--only
//! idle|pingpong|wakeup` runs one of them, `--spin-us` sets the adaptive
//! mode's spin window and `--idle-modes manual,auto,adaptive` limits the
//! idle measurement to those modes.
//!
//! Three measurements, each taken in rounds that alternate the modes (these
//! VMs are noisy) and printed as medians and as ratios against a baseline
//! of the same run:
//!
//! 1. **idle**: the CPU time of this process (every thread, the progress
//!    thread included) while a task on a current-thread runtime awaits a
//!    receive that never comes, for `--idle-ms` (default 2000), as a
//!    percentage of one core. Soft or native engine (`--engine`).
//! 2. **ping-pong**: an 8 B tagged ping-pong between two endpoints of this
//!    process, each side a task on its own current-thread runtime on its
//!    own thread, as half a round trip in µs; adaptive against manual
//!    (soft engine).
//! 3. **wake-up**: after `--gap-ms` (default 20) of silence, the time from
//!    an 8 B inject to the moment the receiving task runs again; adaptive
//!    against auto progress at the default 1000 µs interval (soft engine).

use clap::Parser;
use psmrail::config::PsmConfig;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
    ProgressKind,
};
use psmrail::reactor::AdaptiveProgress;
use psmrail_bench::stats::median;
use psmrail_bench::units::parse_count;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TAG: u64 = 0x77;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Manual,
    Auto,
    Adaptive,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Manual => "manual",
            Mode::Auto => "auto",
            Mode::Adaptive => "adaptive",
        }
    }
}

/// Milliseconds.
fn parse_ms(v: &str) -> Result<Duration, String> {
    v.parse()
        .map(Duration::from_millis)
        .map_err(|e| format!("{v:?} is not a number of milliseconds: {e}"))
}

/// Microseconds.
fn parse_us(v: &str) -> Result<Duration, String> {
    v.parse()
        .map(Duration::from_micros)
        .map_err(|e| format!("{v:?} is not a number of microseconds: {e}"))
}

/// `auto`, `native` or `soft` (case-insensitive).
fn parse_engine(v: &str) -> Result<EngineChoice, String> {
    v.parse().map_err(|e: psmrail::Error| e.to_string())
}

/// One of the measurements.
fn parse_only(v: &str) -> Result<String, String> {
    match v {
        "idle" | "pingpong" | "wakeup" => Ok(v.to_owned()),
        _ => Err(format!("{v:?}: expected idle, pingpong or wakeup")),
    }
}

/// One progress mode.
fn parse_mode(v: &str) -> Result<Mode, String> {
    [Mode::Manual, Mode::Auto, Mode::Adaptive]
        .into_iter()
        .find(|m| m.name() == v)
        .ok_or_else(|| format!("{v:?}: expected manual, auto or adaptive"))
}

/// The progress modes (manual, auto, adaptive) compared under tokio: idle
/// CPU, ping-pong latency and wake-up latency, in rounds alternating the
/// modes, printed as medians.
#[derive(Parser, Debug)]
#[command(name = "progress_modes", args_override_self = true)]
struct Args {
    /// Rounds of each measurement (the modes alternate within a round).
    #[arg(long, value_name = "N", default_value = "5", value_parser = parse_count)]
    rounds: usize,
    /// Engine of the idle measurement: auto, native or soft (the other
    /// two always run on the soft engine).
    #[arg(long, default_value = "soft", value_parser = parse_engine)]
    engine: EngineChoice,
    /// How long the idle task awaits its receive, in ms.
    #[arg(long = "idle-ms", value_name = "MS", default_value = "2000", value_parser = parse_ms)]
    idle: Duration,
    /// Silence before each wake-up message, in ms.
    #[arg(long = "gap-ms", value_name = "MS", default_value = "20", value_parser = parse_ms)]
    gap: Duration,
    /// Ping-pong round trips per round.
    #[arg(long, value_name = "N", default_value = "20000", value_parser = parse_count)]
    iterations: usize,
    /// Wake-up messages per round.
    #[arg(long, value_name = "N", default_value = "25", value_parser = parse_count)]
    wakeups: usize,
    /// Run only this measurement: idle, pingpong or wakeup.
    #[arg(long, value_name = "MEASUREMENT", value_parser = parse_only)]
    only: Option<String>,
    /// The adaptive mode's spin window, in µs (default: AdaptiveProgress::DEFAULT_SPIN).
    #[arg(long = "spin-us", value_name = "US", value_parser = parse_us)]
    spin: Option<Duration>,
    /// Measure idle CPU only for these modes (comma-separated: manual,
    /// auto, adaptive; the others print NaN).
    #[arg(
        long,
        value_name = "MODES",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        value_parser = parse_mode
    )]
    idle_modes: Option<Vec<Mode>>,
}

impl Args {
    /// The adaptive mode's spin window.
    fn spin(&self) -> Duration {
        self.spin.unwrap_or(AdaptiveProgress::DEFAULT_SPIN)
    }
}

/// One endpoint with its own domain and AV.
struct Node {
    ep: Endpoint,
    av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
}

fn open(mode: Mode, engine: EngineChoice, spin: Duration) -> Result<Node, String> {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .build()
        .map_err(|e| e.to_string())?;
    let hints = Hints::new()
        .caps(Caps::TAGGED)
        .engine(engine)
        .config(config);
    let hints = match mode {
        Mode::Manual => hints.progress(ProgressKind::Manual),
        Mode::Auto => hints.progress(ProgressKind::Auto),
        Mode::Adaptive => hints.spin(spin),
    };
    let info = getinfo(Some(&hints))
        .map_err(|e| format!("getinfo: {e}"))?
        .remove(0);
    let fabric = Fabric::open(&info).map_err(|e| e.to_string())?;
    let domain = fabric.domain(&info).map_err(|e| e.to_string())?;
    let av = domain.av(AvAttr::new()).map_err(|e| e.to_string())?;
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .map_err(|e| e.to_string())?;
    Ok(Node {
        ep,
        av,
        domain,
        _fabric: fabric,
    })
}

/// Two connected nodes: `(a, b, a's address of b, b's address of a)`.
fn pair(mode: Mode, spin: Duration) -> Result<(Node, Node, FiAddr, FiAddr), String> {
    let a = open(mode, EngineChoice::Soft, spin)?;
    let b = open(mode, EngineChoice::Soft, spin)?;
    // Both at once: with manual progress each insert's handshake needs the
    // other side inserting (and so progressing) too.
    let (a_to_b, b_to_a) = std::thread::scope(|s| {
        let ab = s.spawn(|| a.av.insert(&[b.ep.getname()]).remove(0));
        let ba = b.av.insert(&[a.ep.getname()]).remove(0);
        (ab.join().expect("insert thread"), ba)
    });
    let a_to_b = a_to_b.map_err(|e| e.to_string())?;
    let b_to_a = b_to_a.map_err(|e| e.to_string())?;
    Ok((a, b, a_to_b, b_to_a))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// CPU time of the whole process so far.
fn process_cpu() -> Duration {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(us(u.user_time()) + us(u.system_time()))
}

/// Percent of one core the process used while a task awaited a receive
/// that never came, for `idle`.
fn idle_cpu(node: &Node, idle: Duration) -> f64 {
    let rt = runtime();
    let cpu = process_cpu();
    let start = Instant::now();
    let timed_out = rt.block_on(async {
        tokio::time::timeout(idle, node.ep.trecv(OpBuffer::from(vec![0u8; 8]), TAG, 0))
            .await
            .is_err()
    });
    let used = process_cpu() - cpu;
    assert!(timed_out, "nobody sends: the receive must still be pending");
    100.0 * used.as_secs_f64() / start.elapsed().as_secs_f64()
}

/// Half a round trip in µs over `n` 8 B exchanges between `a` (client)
/// and `b` (echo server), each a task on its own thread's runtime.
fn pingpong(a: &Node, b: &Node, a_to_b: FiAddr, b_to_a: FiAddr, n: usize) -> f64 {
    let warm = n / 10 + 1;
    std::thread::scope(|s| {
        s.spawn(|| {
            runtime().block_on(async {
                let mut buf = OpBuffer::from(vec![0u8; 8]);
                for _ in 0..warm + n {
                    let (r, back) = b.ep.trecv(buf, TAG, 0).await;
                    r.expect("server recv");
                    b.ep.tinject(b_to_a, TAG, back.as_slice())
                        .expect("server inject");
                    buf = back;
                }
            })
        });
        runtime().block_on(async {
            let msg = [7u8; 8];
            let mut buf = OpBuffer::from(vec![0u8; 8]);
            let mut start = Instant::now();
            for i in 0..warm + n {
                if i == warm {
                    start = Instant::now();
                }
                let recv = a.ep.trecv(buf, TAG, 0);
                a.ep.tinject(a_to_b, TAG, &msg).expect("client inject");
                let (r, back) = recv.await;
                r.expect("client recv");
                buf = back;
            }
            start.elapsed().as_secs_f64() * 1e6 / n as f64 / 2.0
        })
    })
}

/// Median time in µs from an inject, sent after `gap` of silence, to the
/// receiving task running again, over `k` messages.
fn wakeup(a: &Node, b: &Node, a_to_b: FiAddr, gap: Duration, k: usize) -> f64 {
    let sent: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
    let seen: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            runtime().block_on(async {
                let mut buf = OpBuffer::from(vec![0u8; 8]);
                for _ in 0..k {
                    let (r, back) = b.ep.trecv(buf, TAG, 0).await;
                    seen.lock().unwrap().push(Instant::now());
                    r.expect("wake-up recv");
                    buf = back;
                }
            })
        });
        for _ in 0..k {
            std::thread::sleep(gap);
            sent.lock().unwrap().push(Instant::now());
            a.ep.tinject(a_to_b, TAG, &[1u8; 8])
                .expect("wake-up inject");
            // The sender's own domain must move the message out: one
            // progress round (a manual or adaptive sender would be polling
            // an operation of its own here).
            a.domain.reactor().progress();
        }
    });
    let sent = sent.into_inner().unwrap();
    let seen = seen.into_inner().unwrap();
    let mut d: Vec<f64> = sent
        .iter()
        .zip(&seen)
        .map(|(s, r)| r.saturating_duration_since(*s).as_secs_f64() * 1e6)
        .collect();
    median(&mut d).unwrap_or(0.0)
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let modes = [Mode::Manual, Mode::Auto, Mode::Adaptive];
    let run = |what: &str| args.only.as_deref().is_none_or(|o| o == what);
    if run("idle") {
        idle_figures(&args, &modes)?;
    }
    if run("pingpong") || run("wakeup") {
        let adaptive = pair(Mode::Adaptive, args.spin())?;
        if run("pingpong") {
            pingpong_figures(&args, &adaptive)?;
        }
        if run("wakeup") {
            wakeup_figures(&args, &adaptive)?;
        }
    }
    Ok(())
}

type Pair = (Node, Node, FiAddr, FiAddr);

fn idle_figures(args: &Args, modes: &[Mode]) -> Result<(), String> {
    // 1. Idle CPU: rounds alternating the modes, each with only its own
    // node open (the process's CPU time counts every thread).
    let mut idle: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..args.rounds {
        for (i, &m) in modes.iter().enumerate() {
            if args
                .idle_modes
                .as_ref()
                .is_some_and(|only| !only.contains(&m))
            {
                idle[i].push(f64::NAN);
                continue;
            }
            let node = open(m, args.engine, args.spin())?;
            idle[i].push(idle_cpu(&node, args.idle));
        }
    }
    println!(
        "idle: % of one core while a task awaits a receive for {:?} ({} engine, median of {} rounds)",
        args.idle, args.engine, args.rounds
    );
    for (i, m) in modes.iter().enumerate() {
        println!(
            "  {:9} {:7.2} %",
            m.name(),
            median(&mut idle[i]).unwrap_or(0.0)
        );
    }
    Ok(())
}

fn pingpong_figures(args: &Args, adaptive: &Pair) -> Result<(), String> {
    // 2. Ping-pong: manual against adaptive.
    let manual = pair(Mode::Manual, args.spin())?;
    let (mut pm, mut pa, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let m = pingpong(&manual.0, &manual.1, manual.2, manual.3, args.iterations);
        let a = pingpong(
            &adaptive.0,
            &adaptive.1,
            adaptive.2,
            adaptive.3,
            args.iterations,
        );
        pm.push(m);
        pa.push(a);
        ratio.push(a / m);
    }
    println!(
        "ping-pong: 8 B tagged, half round trip, soft engine, median of {} rounds of {}",
        args.rounds, args.iterations
    );
    println!("  manual    {:7.2} us", median(&mut pm).unwrap_or(0.0));
    println!("  adaptive  {:7.2} us", median(&mut pa).unwrap_or(0.0));
    println!(
        "  adaptive / manual: {:.3}",
        median(&mut ratio).unwrap_or(0.0)
    );
    Ok(())
}

fn wakeup_figures(args: &Args, adaptive: &Pair) -> Result<(), String> {
    // 3. Wake-up after silence: auto (1000 µs interval) against adaptive.
    let auto = pair(Mode::Auto, args.spin())?;
    let (mut wa, mut wd) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        wa.push(wakeup(&auto.0, &auto.1, auto.2, args.gap, args.wakeups));
        wd.push(wakeup(
            &adaptive.0,
            &adaptive.1,
            adaptive.2,
            args.gap,
            args.wakeups,
        ));
    }
    println!(
        "wake-up: inject after {:?} of silence to the receiving task running, soft engine, \
         median of {} rounds (each the median of {})",
        args.gap, args.rounds, args.wakeups
    );
    println!("  auto      {:7.1} us", median(&mut wa).unwrap_or(0.0));
    println!("  adaptive  {:7.1} us", median(&mut wd).unwrap_or(0.0));
    Ok(())
}
