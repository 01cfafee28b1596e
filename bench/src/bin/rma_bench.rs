//! RMA and atomic throughput between two processes through the public API,
//! with the AM-chunk path (`FI_PSM_TAGGED_RMA` off) and the tagged-MQ path
//! (on) side by side.
//!
//! ```text
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --bin rma_bench -- --spawn --engine native
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --bin rma_bench -- --spawn --engine soft
//! ```
//!
//! Each phase (`am`, `tagged`) runs in a fresh pair of processes (the
//! native engine allows one PSM endpoint per process): this program opens
//! an endpoint with `FI_RMA | FI_ATOMIC` (the initiator), re-executes itself
//! as the target (`--serve am|tagged --peer <addr>`), which registers a
//! region, inserts the initiator and then only progresses (manual mode: a
//! loop of progress rounds) until told on stdin to exit. Both processes
//! pin themselves to their own CPU after the open (PSM may set the
//! affinity during it).
//!
//! Measured per phase, each figure the median of `--reps` repetitions (the
//! median over `--rounds` alternating rounds of those, if more than one):
//!
//! * write and read bandwidth at 64 KiB, 1 MiB and 16 MiB, with a sliding
//!   window of `--window` operations in flight (each to its own slot of the
//!   target region), GB/s;
//! * 8-byte write and read latency, one operation at a time, µs;
//! * u64 `FI_SUM` `fetch_atomic` rate with one outstanding (latency bound)
//!   and with `--window` outstanding, Mops/s.
//!
//! Every size is checked once outside the timed loops (write a pattern,
//! read it back), and the one-at-a-time fetch-adds must fetch consecutive
//! values.
//!
//! Options (`--help` lists them): `--engine native|soft` (default soft),
//! `--reps N` (default 5), `--rounds N` (default 1), `--window N` (default
//! 8), `--scale F` (multiplies the operations per repetition, default 1),
//! `--phases am,tagged` (which and in what order), `--no-pin`. `--spawn`
//! is accepted (and implied) for symmetry with `pingpong`.

use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use psmrail::config::PsmConfig;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
    MemoryRegion, MrAccess,
};
use psmrail::ops::atomic::{AtomicDatatype, AtomicOp};
use psmrail::ops::RmaOp;
use psmrail_bench::harness;
use psmrail_bench::stats::median_or_zero;
use psmrail_bench::units::parse_count;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The target's data region key.
const DATA_KEY: u64 = 1;
/// The target's fetch-add counter (8 bytes) key.
const ATOMIC_KEY: u64 = 2;
const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// (size, operations per repetition) for the bandwidth cells.
const BW_SIZES: [(usize, usize); 3] = [(64 * KIB, 2048), (MIB, 256), (16 * MIB, 16)];
/// Operations per repetition for the latency and atomic cells.
const SMALL_OPS: usize = 5000;
/// How long the initiator waits for one line from the target.
const STEP: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    Native,
    Soft,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Native => "native",
            Engine::Soft => "soft",
        }
    }
}

/// Which RMA path a phase runs: `FI_PSM_TAGGED_RMA` off or on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Am,
    Tagged,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Am => "am",
            Phase::Tagged => "tagged",
        }
    }

    fn tagged_rma(self) -> bool {
        self == Phase::Tagged
    }
}

/// `native` or `soft`.
fn parse_engine(v: &str) -> Result<Engine, String> {
    match v {
        "native" => Ok(Engine::Native),
        "soft" => Ok(Engine::Soft),
        _ => Err(format!("{v:?}: expected native or soft")),
    }
}

/// `am` or `tagged`.
fn parse_phase(v: &str) -> Result<Phase, String> {
    match v {
        "am" => Ok(Phase::Am),
        "tagged" => Ok(Phase::Tagged),
        _ => Err(format!("{v:?}: expected am or tagged")),
    }
}

/// A positive factor.
fn parse_scale(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        Ok(_) => Err(format!("{v:?}: must be a positive number")),
        Err(e) => Err(format!("{v:?}: {e}")),
    }
}

/// RMA write/read bandwidth (64 KiB, 1 MiB, 16 MiB), 8 B latency and u64
/// fetch-add rate between two processes, FI_PSM_TAGGED_RMA off (am) and on
/// (tagged), each phase in a fresh process pair. Run with
/// PSM2_DEVICES=self,shm where there is no adapter.
#[derive(Parser, Debug)]
#[command(name = "rma_bench", args_override_self = true)]
struct Args {
    /// Accepted for symmetry with pingpong: the target is always spawned.
    #[arg(long = "spawn")]
    _spawn: bool,
    /// Engine: native or soft.
    #[arg(long, default_value = "soft", value_parser = parse_engine)]
    engine: Engine,
    /// Repetitions per figure (the figure is their median).
    #[arg(long, value_name = "N", default_value = "5", value_parser = parse_count)]
    reps: usize,
    /// Rounds alternating the phases (each figure the median over them).
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count)]
    rounds: usize,
    /// Operations in flight in the bandwidth and windowed atomic cells.
    #[arg(long, value_name = "N", default_value = "8", value_parser = parse_count)]
    window: usize,
    /// Multiplies the operations per repetition.
    #[arg(
        long,
        value_name = "F",
        default_value = "1",
        value_parser = parse_scale,
        allow_negative_numbers = true
    )]
    scale: f64,
    /// The phases to run, in this order: am, tagged (comma-separated).
    #[arg(
        long,
        value_name = "PHASES",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "am,tagged",
        value_parser = parse_phase
    )]
    phases: Vec<Phase>,
    /// Pin neither process.
    #[arg(long)]
    no_pin: bool,
    /// Target mode (run by the benchmark itself): serve this phase.
    #[arg(long, value_name = "PHASE", value_parser = parse_phase, hide = true)]
    serve: Option<Phase>,
    /// Target mode: the initiator's address.
    #[arg(long, hide = true)]
    peer: Option<String>,
    /// Target mode: pin to this CPU.
    #[arg(long, hide = true)]
    cpu: Option<usize>,
}

// ----- one side's objects ---------------------------------------------------------

struct Side {
    _fabric: Fabric,
    domain: Domain,
    av: AddressVector,
    ep: Endpoint,
}

fn open(engine: Engine, phase: Phase) -> Result<Side, String> {
    let config = PsmConfig::builder()
        .tagged_rma(phase.tagged_rma())
        .build()
        .map_err(|e| format!("config: {e}"))?;
    let hints = Hints::new()
        .caps(Caps::RMA | Caps::ATOMIC)
        .config(config)
        .engine(match engine {
            Engine::Native => EngineChoice::Native,
            Engine::Soft => EngineChoice::Soft,
        });
    let info = getinfo(Some(&hints))
        .map_err(|e| format!("getinfo: {e}"))?
        .into_iter()
        .next()
        .ok_or("getinfo: nothing offered")?;
    let fabric = Fabric::open(&info).map_err(|e| format!("fabric: {e}"))?;
    let domain = fabric.domain(&info).map_err(|e| format!("domain: {e}"))?;
    let av = domain.av(AvAttr::new()).map_err(|e| format!("av: {e}"))?;
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .map_err(|e| format!("endpoint: {e}"))?;
    if domain.info().config().tagged_rma() != phase.tagged_rma() {
        return Err(format!(
            "FI_PSM_TAGGED_RMA is set in the environment and overrides the {} phase",
            phase.name()
        ));
    }
    Ok(Side {
        _fabric: fabric,
        domain,
        av,
        ep,
    })
}

impl Side {
    fn progress(&self) {
        self.domain.reactor().progress();
    }

    fn close(self) -> Result<(), String> {
        self.ep
            .close()
            .map_err(|e| format!("endpoint close: {e}"))?;
        self.domain
            .close()
            .map_err(|e| format!("domain close: {e}"))
    }
}

fn pin(cpu: usize) {
    if let Err(e) = harness::pin(cpu) {
        eprintln!("rma_bench: {e} (running unpinned)");
    }
}

/// Sends one line to the initiator.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@ {line}");
    let _ = out.flush();
}

// ----- the target -----------------------------------------------------------------

/// The target's process: says its address, inserts the initiator,
/// registers the regions, says `ready`, then progresses until `exit` (or
/// until the initiator is gone).
fn target(args: &Args, phase: Phase) -> Result<(), String> {
    let side = open(args.engine, phase)?;
    if let Some(cpu) = args.cpu {
        pin(cpu);
    }
    say(&format!("addr {}", side.ep.getname()));
    let peer = args.peer.as_deref().ok_or("--serve needs --peer")?;
    side.av
        .insert_str(peer)
        .map_err(|e| format!("insert the initiator {peer}: {e}"))?;
    let rw = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let data_len = args.window * BW_SIZES[BW_SIZES.len() - 1].0;
    let regions: Vec<MemoryRegion> = [(DATA_KEY, data_len), (ATOMIC_KEY, 8)]
        .into_iter()
        .map(|(key, len)| {
            side.domain
                .register(vec![0u8; len], rw, Some(key))
                .map_err(|e| format!("register key {key}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let (tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    say("ready");
    loop {
        match lines.try_recv() {
            Ok(l) if l == "exit" => break,
            Ok(l) => return Err(format!("target: unknown command {l:?}")),
            Err(mpsc::TryRecvError::Empty) => side.progress(),
            // The initiator is gone: nothing more to serve.
            Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
        }
    }
    for mr in &regions {
        mr.close();
    }
    side.close()?;
    say("bye");
    Ok(())
}

// ----- the initiator ----------------------------------------------------------------

/// The initiator's handle on the target process.
struct Target {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    fi: FiAddr,
}

impl Target {
    fn spawn(args: &Args, side: &Side, phase: Phase, cpu: Option<usize>) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["--serve", phase.name(), "--engine", args.engine.name()])
            .args(["--peer", &side.ep.getname().to_string()])
            .args(["--window", &args.window.to_string()]);
        if let Some(c) = cpu {
            cmd.args(["--cpu", &c.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn the target: {e}"))?;
        let stdin = child.stdin.take().ok_or("target stdin")?;
        let stdout = child.stdout.take().ok_or("target stdout")?;
        let (tx, lines) = mpsc::channel();
        // A reader thread: the initiator keeps progressing while it waits
        // (the target's connection to it may need that).
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(l) = line.strip_prefix("@@ ") {
                    if tx.send(l.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let mut t = Target {
            child,
            stdin,
            lines,
            fi: FiAddr(0),
        };
        let line = t.line(side)?;
        let addr = line
            .strip_prefix("addr ")
            .ok_or_else(|| format!("the target said {line:?}, not its address"))?;
        t.fi = side
            .av
            .insert_str(addr)
            .map_err(|e| format!("insert the target {addr}: {e}"))?;
        match t.line(side)?.as_str() {
            "ready" => Ok(t),
            other => Err(format!("the target said {other:?}, not ready")),
        }
    }

    /// The target's next line, progressing meanwhile.
    fn line(&mut self, side: &Side) -> Result<String, String> {
        let deadline = Instant::now() + STEP;
        loop {
            match self.lines.try_recv() {
                Ok(l) => return Ok(l),
                Err(mpsc::TryRecvError::Empty) if Instant::now() < deadline => side.progress(),
                Err(mpsc::TryRecvError::Empty) => return Err("the target is silent".into()),
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(format!("the target exited: {:?}", self.child.wait()))
                }
            }
        }
    }

    fn exit(mut self, side: &Side) -> Result<(), String> {
        writeln!(self.stdin, "exit").map_err(|e| format!("tell the target: {e}"))?;
        let bye = self.line(side)?;
        if bye != "bye" {
            return Err(format!("the target said {bye:?}, not bye"));
        }
        let status = self.child.wait().map_err(|e| format!("wait: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the target failed: {status}"))
        }
    }
}

/// One phase's figures, in [`Row`] order.
type Figures = Vec<f64>;

/// What a table row shows.
#[derive(Clone, Copy)]
enum Row {
    Write(usize),
    Read(usize),
    WriteLat,
    ReadLat,
    Fadd1,
    FaddN,
}

fn rows() -> Vec<Row> {
    let mut r: Vec<Row> = BW_SIZES.iter().map(|s| Row::Write(s.0)).collect();
    r.extend(BW_SIZES.iter().map(|s| Row::Read(s.0)));
    r.extend([Row::WriteLat, Row::ReadLat, Row::Fadd1, Row::FaddN]);
    r
}

impl Row {
    fn label(self, window: usize) -> String {
        let size = |s: usize| {
            if s >= MIB {
                format!("{} MiB", s / MIB)
            } else {
                format!("{} KiB", s / KIB)
            }
        };
        match self {
            Row::Write(s) => format!("write {} GB/s", size(s)),
            Row::Read(s) => format!("read {} GB/s", size(s)),
            Row::WriteLat => "write 8 B us".into(),
            Row::ReadLat => "read 8 B us".into(),
            Row::Fadd1 => "fadd u64 x1 Mops/s".into(),
            Row::FaddN => format!("fadd u64 x{window} Mops/s"),
        }
    }
}

fn scaled(args: &Args, ops: usize) -> usize {
    ((ops as f64 * args.scale) as usize).max(1)
}

/// Runs `ops` operations made by `make(buffer, index)` with up to `window`
/// in flight (a new one as each completes), the buffers recycled; the
/// elapsed seconds.
fn stream(
    bufs: &mut Vec<OpBuffer>,
    ops: usize,
    make: impl Fn(OpBuffer, usize) -> RmaOp,
) -> Result<f64, String> {
    let start = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut issued = 0;
    while issued < ops {
        let Some(buf) = bufs.pop() else { break };
        inflight.push(make(buf, issued));
        issued += 1;
    }
    futures::executor::block_on(async {
        while let Some((r, buf)) = inflight.next().await {
            r.map_err(|e| format!("operation: {e}"))?;
            if issued < ops {
                inflight.push(make(buf, issued));
                issued += 1;
            } else {
                bufs.push(buf);
            }
        }
        Ok::<(), String>(())
    })?;
    Ok(start.elapsed().as_secs_f64())
}

/// A warm-up of a tenth of `ops` (at least one), then `reps` timed runs of
/// `ops`; the median seconds per run.
fn measure(
    reps: usize,
    ops: usize,
    mut run: impl FnMut(usize) -> Result<f64, String>,
) -> Result<f64, String> {
    run((ops / 10).max(1))?;
    let times = (0..reps).map(|_| run(ops)).collect::<Result<Vec<_>, _>>()?;
    Ok(median_or_zero(times))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

/// Writes a pattern of `size` bytes and reads it back: the paths carry the
/// right bytes before they are timed.
fn check(side: &Side, to: FiAddr, size: usize, offset: u64) -> Result<(), String> {
    let want = pattern(size, size as u8 ^ 0x5a);
    let (r, _) = futures::executor::block_on(side.ep.write(to, want.clone(), offset, DATA_KEY));
    r.map_err(|e| format!("check write {size} B: {e}"))?;
    let (r, got) = futures::executor::block_on(side.ep.read(to, vec![0u8; size], offset, DATA_KEY));
    r.map_err(|e| format!("check read {size} B: {e}"))?;
    match got.as_slice().iter().zip(&want).position(|(a, b)| a != b) {
        None if got.len() == size => Ok(()),
        None => Err(format!("check {size} B: read back {} bytes", got.len())),
        Some(at) => Err(format!(
            "check {size} B: byte {at} differs after write + read"
        )),
    }
}

/// One phase in a fresh process pair: every row's figure.
fn phase(args: &Args, phase: Phase, cpus: Option<(usize, usize)>) -> Result<Figures, String> {
    let side = open(args.engine, phase)?;
    if let Some((mine, _)) = cpus {
        pin(mine);
    }
    let target = Target::spawn(args, &side, phase, cpus.map(|c| c.1))?;
    let to = target.fi;
    let ep = &side.ep;
    let w = args.window;
    let mut figures = Figures::new();
    let slot = |size: usize, i: usize| ((i % w) * size) as u64;
    for &(size, _) in &BW_SIZES {
        check(&side, to, size, slot(size, 1))?;
    }
    check(&side, to, 8, 0)?;
    let bandwidth = |read: bool| -> Result<Vec<f64>, String> {
        BW_SIZES
            .iter()
            .map(|&(size, ops)| {
                let ops = scaled(args, ops);
                let mut bufs: Vec<OpBuffer> =
                    (0..w).map(|_| OpBuffer::from(pattern(size, 7))).collect();
                let secs = measure(args.reps, ops, |n| {
                    stream(&mut bufs, n, |buf, i| {
                        if read {
                            ep.read(to, buf, slot(size, i), DATA_KEY)
                        } else {
                            ep.write(to, buf, slot(size, i), DATA_KEY)
                        }
                    })
                })?;
                Ok((size * ops) as f64 / secs / 1e9)
            })
            .collect()
    };
    figures.extend(bandwidth(false)?);
    figures.extend(bandwidth(true)?);
    let small = scaled(args, SMALL_OPS);
    for read in [false, true] {
        let mut buf = Some(OpBuffer::from(vec![1u8; 8]));
        let secs = measure(args.reps, small, |n| {
            let start = Instant::now();
            for _ in 0..n {
                let b = buf.take().unwrap_or_else(|| OpBuffer::from(vec![0u8; 8]));
                let op = if read {
                    ep.read(to, b, 0, DATA_KEY)
                } else {
                    ep.write(to, b, 0, DATA_KEY)
                };
                let (r, b) = futures::executor::block_on(op);
                r.map_err(|e| format!("8 B {}: {e}", if read { "read" } else { "write" }))?;
                buf = Some(b);
            }
            Ok(start.elapsed().as_secs_f64())
        })?;
        figures.push(secs / small as f64 * 1e6);
    }
    // Fetch-adds of 1, one at a time: each fetches the value before it.
    let one = 1u64.to_ne_bytes();
    let fadd = |buf: OpBuffer| {
        ep.fetch_atomic(
            to,
            AtomicOp::Sum,
            AtomicDatatype::Uint64,
            &one,
            buf,
            0,
            ATOMIC_KEY,
        )
    };
    let mut total = 0u64;
    let mut buf = Some(OpBuffer::from(vec![0u8; 8]));
    let secs = measure(args.reps, small, |n| {
        let start = Instant::now();
        for _ in 0..n {
            let b = buf.take().unwrap_or_else(|| OpBuffer::from(vec![0u8; 8]));
            let (r, b) = futures::executor::block_on(fadd(b));
            r.map_err(|e| format!("fetch-add: {e}"))?;
            let got = u64::from_ne_bytes(
                b.as_slice()
                    .try_into()
                    .map_err(|_| "fetch-add: short result")?,
            );
            if got != total {
                return Err(format!("fetch-add {total} fetched {got}"));
            }
            total += 1;
            buf = Some(b);
        }
        Ok(start.elapsed().as_secs_f64())
    })?;
    figures.push(small as f64 / secs / 1e6);
    let mut bufs: Vec<OpBuffer> = (0..w).map(|_| OpBuffer::from(vec![0u8; 8])).collect();
    let secs = measure(args.reps, small, |n| stream(&mut bufs, n, |b, _| fadd(b)))?;
    figures.push(small as f64 / secs / 1e6);
    target.exit(&side)?;
    side.close()?;
    Ok(figures)
}

fn initiator(args: &Args) -> Result<(), String> {
    let cpus: Vec<usize> = psmrail::reactor::CpuTopology::read_now()
        .allowed
        .iter()
        .collect();
    let cpus = (!args.no_pin && cpus.len() >= 2).then(|| (cpus[0], cpus[1]));
    // Per phase, one list of figures per round; the phases alternate.
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); args.phases.len()];
    for _ in 0..args.rounds {
        for (&p, out) in args.phases.iter().zip(runs.iter_mut()) {
            out.push(phase(args, p, cpus).map_err(|e| format!("{} phase: {e}", p.name()))?);
        }
    }
    let rows = rows();
    let figures: Vec<Figures> = runs
        .iter()
        .map(|rounds| {
            (0..rows.len())
                .map(|i| median_or_zero(rounds.iter().map(|r| r[i]).collect()))
                .collect()
        })
        .collect();
    println!(
        "RMA, {} engine, 2 processes (target progressing in manual mode), {}; window {}; \
         median of {} repetitions{}",
        args.engine.name(),
        match cpus {
            Some((a, b)) => format!("pinned to CPUs {a} and {b}"),
            None => "not pinned".into(),
        },
        args.window,
        args.reps,
        if args.rounds > 1 {
            format!(", median over {} alternating rounds", args.rounds)
        } else {
            String::new()
        }
    );
    let mut header = format!("{:<22}", "");
    for p in &args.phases {
        header += &format!(" {:>10}", p.name());
    }
    let ratio = args.phases == [Phase::Am, Phase::Tagged];
    if ratio {
        header += &format!(" {:>10}", "tagged/am");
    }
    println!("{header}");
    for (i, row) in rows.iter().enumerate() {
        let mut line = format!("{:<22}", row.label(args.window));
        for f in &figures {
            line += &format!(" {:>10.3}", f[i]);
        }
        if ratio {
            line += &format!(" {:>10.2}", figures[1][i] / figures[0][i]);
        }
        println!("{line}");
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let r = match args.serve {
        Some(p) => {
            // Die with the initiator instead of spinning on if it is killed.
            let _ = harness::exit_with_parent();
            target(&args, p)
        }
        None => initiator(&args),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rma_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
