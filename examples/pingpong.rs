//! A `fi_pingpong`-like latency and bandwidth tool over the public API.
//!
//! ```text
//! cargo run --release --example pingpong -- --spawn            # both sides, two processes
//! cargo run --release --example pingpong                       # server: prints its address
//! cargo run --release --example pingpong -- fi_addr_psmx://... # client, by address
//! cargo run --release --example pingpong -- 127.0.0.1          # client, by host (name server)
//! cargo run --release --example pingpong -- --help
//! ```
//!
//! Options follow `fi_pingpong` where it has them: `-S` sizes (or `all`),
//! `-I` iterations, `-e rdm|dgram`, `-p` the port (here the name-server
//! service the server registers under, 47592 by default). A client given a
//! host name or IP address instead of an `fi_addr_psmx://` address asks
//! that host's name server for the server's endpoint, as `fi_pingpong`
//! does with the C psm provider (`FI_PSM_NAME_SERVER` on, the default
//! outside MPI launchers). `--spawn` runs the server as a child process,
//! the client pinned to CPU 0 and the server to CPU 1 (when there are two).
//!
//! The client first sends its own address to the server (so the server can
//! insert it in its AV and answer), then for each size runs a warm-up and
//! the timed ping-pong, every message checked byte for byte outside the
//! timed loop. Each side's timed loop is one task (an async loop run by
//! one `block_on`, as an async program runs its exchanges), on the
//! domain's reactor unless `--futures-executor`. Printed columns are
//! `fi_pingpong`'s: bytes, #sent, #ack, total bytes, time, MB/sec,
//! usec/xfer (half a round trip), Mxfers/sec.

use psmrail::engine::{Epid, OpBuffer};
use psmrail::fabric::{
    AddressVector, AvAttr, Caps, Endpoint, EngineChoice, EpType, Fabric, FiAddr, GetInfo, Hints,
    ProgressKind, Service,
};
use psmrail::ops::RecvOp;
use psmrail::reactor::Reactor;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const TAG: u64 = 0x1234;
/// Messages up to this size are injected.
const INJECT: usize = 64;

/// fi_pingpong's default port, here the name-server service the server
/// registers under and the client looks up.
const SERVICE: &str = "47592";

/// Message sizes: a comma-separated list, or `all` (1 B to 4 MiB in powers
/// of two).
fn parse_sizes(v: &str) -> Result<Sizes, String> {
    if v == "all" {
        return Ok(Sizes(
            std::iter::successors(Some(1usize), |s| (*s < 4 << 20).then_some(s * 2)).collect(),
        ));
    }
    v.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a message size in bytes"))
        })
        .collect::<Result<_, _>>()
        .map(Sizes)
}

/// The message sizes of a run.
#[derive(Clone, Debug)]
struct Sizes(Vec<usize>);

fn parse_ep_type(v: &str) -> Result<EpType, String> {
    match v {
        "rdm" => Ok(EpType::Rdm),
        "dgram" => Ok(EpType::Dgram),
        _ => Err(format!("{v:?}: expected rdm or dgram")),
    }
}

fn parse_engine(v: &str) -> Result<EngineChoice, String> {
    match v {
        "auto" => Ok(EngineChoice::Auto),
        "native" => Ok(EngineChoice::Native),
        "soft" => Ok(EngineChoice::Soft),
        _ => Err(format!("{v:?}: expected auto, native or soft")),
    }
}

/// A `fi_pingpong`-like latency and bandwidth tool over psmrail's public
/// API.
#[derive(clap::Parser, Clone, Debug)]
#[command(name = "pingpong")]
struct Args {
    /// Message sizes: comma-separated, or `all` (1 B .. 4 MiB).
    #[arg(short = 'S', long, value_parser = parse_sizes, default_value = "8,1024,65536,1048576")]
    sizes: Sizes,
    /// Iterations per size (default 1000, 100 above 64 KiB).
    #[arg(short = 'I', long, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
    /// Endpoint type: rdm or dgram.
    #[arg(short = 'e', long = "ep-type", value_parser = parse_ep_type, default_value = "rdm")]
    ep_type: EpType,
    /// The name-server service the server registers under and a client
    /// given a host looks up (fi_pingpong's port).
    #[arg(short = 'p', long, default_value = SERVICE)]
    port: Service,
    /// Engine: auto, native or soft (default: `PSMRAIL_ENGINE`, else soft).
    #[arg(long, value_parser = parse_engine)]
    engine: Option<EngineChoice>,
    /// Tagged messages (default untagged, as fi_pingpong).
    #[arg(long)]
    tagged: bool,
    /// The progress thread (default manual progress, busy-polling in the
    /// awaiting task).
    #[arg(long)]
    auto_progress: bool,
    /// Run the server as a child process and the client here (pinned to
    /// CPUs 0 and 1 when there are two, unless --no-pin).
    #[arg(long)]
    spawn: bool,
    /// Pin this process to that CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// With --spawn: pin neither side.
    #[arg(long)]
    no_pin: bool,
    /// Await with `futures::executor::block_on` instead of the domain's
    /// reactor (`Reactor::block_on`).
    #[arg(long)]
    futures_executor: bool,
    /// Client mode: the server's `fi_addr_psmx://` address, or its host
    /// name or IP address (looked up through the server's name server).
    server_addr: Option<String>,
}

/// One side's objects.
struct Side {
    _fabric: Fabric,
    av: AddressVector,
    ep: Endpoint,
    engine: String,
    /// The domain's reactor: runs the futures unless `--futures-executor`.
    reactor: Reactor,
    futures_executor: bool,
}

impl Side {
    /// Runs `f` to completion on the chosen executor.
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        if self.futures_executor {
            futures::executor::block_on(f)
        } else {
            self.reactor.block_on(f)
        }
    }
}

/// What the server registers under (`FI_SOURCE` with its service), or what
/// a client given a host looks up.
enum Lookup<'a> {
    Register,
    Host(&'a str),
    None,
}

fn open(args: &Args, lookup: Lookup<'_>) -> Result<(Side, Option<Epid>), String> {
    let caps = if args.tagged {
        Caps::TAGGED | Caps::MSG
    } else {
        Caps::MSG
    };
    let mut hints = Hints::new().caps(caps).ep_type(args.ep_type);
    // The soft engine unless asked otherwise (--engine or PSMRAIL_ENGINE).
    match args.engine {
        Some(e) => hints = hints.engine(e),
        None if std::env::var_os("PSMRAIL_ENGINE").is_none() => {
            hints = hints.engine(EngineChoice::Soft)
        }
        None => {}
    }
    if args.auto_progress {
        hints = hints.progress(ProgressKind::Auto);
    }
    let request = GetInfo::new().hints(&hints);
    let request = match lookup {
        Lookup::Register => request.service(args.port).source(true),
        Lookup::Host(host) => request.node(host).service(args.port),
        Lookup::None => request,
    };
    let info = request
        .run()
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
    // After the open: PSM may set the affinity itself.
    if let Some(cpu) = args.cpu {
        pin(cpu);
    }
    let side = Side {
        engine: info.engine.to_string(),
        _fabric: fabric,
        av,
        ep,
        reactor: domain.reactor().clone(),
        futures_executor: args.futures_executor,
    };
    Ok((side, info.dest_addr))
}

/// Sends `buf` (the buffer stays in place: injected, or handed to the send
/// and put back when it completes).
fn send(side: &Side, args: &Args, to: FiAddr, buf: &mut OpBuffer) -> Result<(), String> {
    side.block_on(send_in_task(side, args, to, buf))
}

fn recv(side: &Side, args: &Args, buf: OpBuffer) -> Result<(usize, OpBuffer), String> {
    let (r, buf) = side.block_on(post(side, args, buf));
    Ok((r.map_err(|e| format!("recv: {e}"))?.len, buf))
}

/// Posts a receive into `buf`.
fn post<'a>(side: &'a Side, args: &Args, buf: OpBuffer) -> RecvOp<'a> {
    if args.tagged {
        side.ep.trecv(buf, TAG, 0)
    } else {
        side.ep.recv(buf)
    }
}

/// Injects `data` (no completion to wait for), as an HPC code sends its
/// small messages.
fn inject(side: &Side, args: &Args, to: FiAddr, data: &[u8]) -> Result<(), String> {
    let r = if args.tagged {
        side.ep.tinject(to, TAG, data)
    } else {
        side.ep.inject(to, data)
    };
    r.map_err(|e| format!("inject: {e}"))
}

/// Sends `buf` from inside a task: injected up to [`INJECT`] bytes, else
/// sent and awaited, the buffer coming back into `buf`.
async fn send_in_task(
    side: &Side,
    args: &Args,
    to: FiAddr,
    buf: &mut OpBuffer,
) -> Result<(), String> {
    if buf.len() <= INJECT {
        return inject(side, args, to, buf.as_slice());
    }
    let owned = std::mem::replace(buf, OpBuffer::empty());
    let fut = if args.tagged {
        side.ep.tsend(to, TAG, owned)
    } else {
        side.ep.send(to, owned)
    };
    let (r, back) = fut.await;
    *buf = back;
    r.map(drop).map_err(|e| format!("send: {e}"))
}

/// `n` timed exchanges of the client, as one task (an async loop run by
/// one `block_on`, as an async program runs its exchanges): post the
/// receive, send, await the echo. The buffers are used in place, as a loop
/// recycling its buffers would.
async fn client_rounds(
    side: &Side,
    args: &Args,
    peer: FiAddr,
    n: usize,
    out: &mut OpBuffer,
    inn: &mut OpBuffer,
) -> Result<(), String> {
    // Decided once, so the loop does not await a send it injects.
    let injects = out.len() <= INJECT;
    for _ in 0..n {
        let r = post(side, args, std::mem::replace(inn, OpBuffer::empty()));
        if injects {
            inject(side, args, peer, out.as_slice())?;
        } else {
            send_in_task(side, args, peer, out).await?;
        }
        let (res, back) = r.await;
        *inn = back;
        res.map_err(|e| format!("recv: {e}"))?;
    }
    Ok(())
}

/// `n` exchanges of the server, one task as the client's, run as the raw
/// floor of `engine_pingpong` runs them: the receive for the next message
/// is posted before the answer to this one goes out (so no message arrives
/// unexpected), with two buffers taking turns; each answer sends back the
/// buffer just received.
async fn server_rounds(
    side: &Side,
    args: &Args,
    peer: FiAddr,
    n: usize,
    bufs: &mut [OpBuffer; 2],
) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    let injects = bufs[0].len() <= INJECT;
    let first = std::mem::replace(&mut bufs[0], OpBuffer::empty());
    let mut posted = Some(post(side, args, first));
    for i in 0..n {
        let Some(r) = posted.take() else {
            return Err("no receive posted".into());
        };
        let (res, mut filled) = r.await;
        res.map_err(|e| format!("recv: {e}"))?;
        if i + 1 < n {
            let spare = std::mem::replace(&mut bufs[(i + 1) % 2], OpBuffer::empty());
            posted = Some(post(side, args, spare));
        }
        if injects {
            inject(side, args, peer, filled.as_slice())?;
        } else {
            send_in_task(side, args, peer, &mut filled).await?;
        }
        bufs[i % 2] = filled;
    }
    Ok(())
}

fn pattern(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn iterations_for(args: &Args, size: usize) -> usize {
    args.iterations
        .map(|n| n as usize)
        .unwrap_or(if size > 64 * 1024 { 100 } else { 1000 })
}

fn run_sizes(side: &Side, args: &Args, peer: FiAddr, client: bool) -> Result<(), String> {
    if client {
        println!(
            "{:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>11}",
            "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
        );
    }
    for &size in &args.sizes.0 {
        let iters = iterations_for(args, size);
        // Checked exchange first (the server echoes what it got).
        let mine = pattern(size, if client { 1 } else { 2 });
        let (mut out, mut inn) = (
            OpBuffer::from(mine.clone()),
            OpBuffer::from(vec![0u8; size]),
        );
        if client {
            send(side, args, peer, &mut out)?;
            let (n, back) = recv(side, args, inn)?;
            if n != size || back.as_slice() != mine.as_slice() {
                return Err(format!("{size} B: the echo differs from what was sent"));
            }
            inn = back;
        } else {
            let (n, got) = recv(side, args, inn)?;
            if n != size || got.as_slice() != pattern(size, 1).as_slice() {
                return Err(format!(
                    "{size} B: the message differs from the client's pattern"
                ));
            }
            out = got;
            send(side, args, peer, &mut out)?;
            inn = OpBuffer::from(vec![0u8; size]);
        }
        // Warm-up, then the timed loop.
        let mut bufs = [out, inn];
        let mut rounds = |n: usize| -> Result<(), String> {
            if client {
                let [out, inn] = &mut bufs;
                side.block_on(client_rounds(side, args, peer, n, out, inn))
            } else {
                side.block_on(server_rounds(side, args, peer, n, &mut bufs))
            }
        };
        rounds((iters / 10).max(1))?;
        let start = Instant::now();
        rounds(iters)?;
        let elapsed = start.elapsed();
        if client {
            let secs = elapsed.as_secs_f64();
            let xfers = (2 * iters) as f64;
            let total = size as f64 * xfers;
            println!(
                "{:>8} {:>8} {:>8} {:>8} {:>7.2}s {:>10.2} {:>10.2} {:>11.2}",
                size_str(size as f64),
                iters,
                format!("={iters}"),
                size_str(total),
                secs,
                total / secs / 1e6,
                secs * 1e6 / xfers,
                xfers / secs / 1e6
            );
        }
    }
    Ok(())
}

fn size_str(v: f64) -> String {
    const UNITS: [&str; 5] = ["", "k", "m", "g", "t"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v}")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

fn server(args: &Args) -> Result<(), String> {
    let (side, _) = open(args, Lookup::Register)?;
    println!("@@ addr {}", side.ep.getname());
    eprintln!(
        "pingpong server: engine {}, address {}",
        side.engine,
        side.ep.getname()
    );
    std::io::stdout().flush().ok();
    // The client's address comes first (8 bytes), as fi_pingpong exchanges them.
    let (r, hello) = side.block_on(side.ep.recv(vec![0u8; 8]));
    let got = r.map_err(|e| format!("address exchange: {e}"))?;
    let bytes: [u8; 8] = hello.as_slice()[..got.len]
        .try_into()
        .map_err(|_| "address exchange: short message")?;
    let client = side
        .av
        .insert(&[Epid(u64::from_le_bytes(bytes))])
        .remove(0)
        .map_err(|e| format!("av insert: {e}"))?;
    run_sizes(&side, args, client, false)
}

fn client(args: &Args, addr: &str) -> Result<(), String> {
    // An address as the server printed it, or a host whose name server
    // knows the server's endpoint (registered under --port).
    let by_name = !addr.contains("://");
    let lookup = if by_name {
        Lookup::Host(addr)
    } else {
        Lookup::None
    };
    let (side, found) = open(args, lookup)?;
    let server = match (by_name, found) {
        (false, _) => side.av.insert_str(addr),
        (true, Some(epid)) => side.av.insert(&[epid]).remove(0),
        (true, None) => return Err(format!("{addr}: its name server gave no address")),
    }
    .map_err(|e| format!("av insert {addr}: {e}"))?;
    let me = side.ep.getname().0.to_le_bytes().to_vec();
    // Untagged, whatever the mode: the server receives it with `recv`.
    let (r, _) = side.block_on(side.ep.send(server, me));
    r.map_err(|e| format!("address exchange: {e}"))?;
    eprintln!("pingpong client: engine {}, server {addr}", side.engine);
    run_sizes(&side, args, server, true)
}

fn spawn(args: &Args) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child_args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--spawn")
        .collect();
    child_args.retain(|a| Some(a) != args.server_addr.as_ref());
    // The server on the other CPU than the client's.
    if let Some(cpu) = args.cpu.filter(|_| !args.no_pin) {
        let mut kept = Vec::new();
        let mut it = child_args.into_iter();
        while let Some(a) = it.next() {
            if a == "--cpu" {
                it.next();
            } else if !a.starts_with("--cpu=") {
                kept.push(a);
            }
        }
        child_args = kept;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        child_args.push(format!("--cpu={}", (cpu + 1) % cores));
    }
    let mut child = Command::new(exe)
        .args(&child_args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn server: {e}"))?;
    let stdout = child.stdout.take().ok_or("server stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("@@ addr ") => break l["@@ addr ".len()..].to_string(),
            Some(Ok(_)) => continue,
            _ => {
                let _ = child.kill();
                return Err("the server exited before printing its address".into());
            }
        }
    };
    let r = client(args, &addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(status)) => return r.and(Err(format!("server: {status}"))),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                return r.and(Err("server did not exit".into()));
            }
        }
    }
    r
}

fn pin(cpu: usize) {
    let set: psmrail::reactor::CpuSet = [cpu].into_iter().collect();
    if let Err(e) = psmrail::reactor::pin_current_thread(&set) {
        eprintln!("pingpong: cannot pin to CPU {cpu}: {e} (running unpinned)");
    }
}

fn main() -> ExitCode {
    let mut args = <Args as clap::Parser>::parse();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.spawn && !args.no_pin && args.cpu.is_none() && cores >= 2 {
        args.cpu = Some(0);
    }
    let r = if args.spawn {
        spawn(&args)
    } else if let Some(addr) = args.server_addr.clone() {
        client(&args, &addr)
    } else {
        server(&args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
