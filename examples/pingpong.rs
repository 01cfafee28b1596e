//! A `fi_pingpong`-like latency and bandwidth tool over the public API.
//!
//! ```text
//! cargo run --release --example pingpong -- --spawn            # both sides, two processes
//! cargo run --release --example pingpong                       # server: prints its address
//! cargo run --release --example pingpong -- fi_addr_psmx://... # client
//! ```
//!
//! Options (as `fi_pingpong` where it has them):
//! `-S <sizes>` comma-separated message sizes or `all` (1 B .. 4 MiB, powers
//! of two), default `8,1024,65536,1048576`; `-I <n>` iterations per size,
//! default 1000 (100 above 64 KiB); `-e rdm|dgram`; `--engine
//! auto|native|soft` (default: the `PSMRAIL_ENGINE` variable, else soft,
//! which runs anywhere); `--tagged` for tagged messages
//! (default untagged, as `fi_pingpong`); `--auto-progress` for the progress
//! thread (default manual progress, busy-polling in the awaiting task);
//! `--spawn` runs the server as a child process and the client here.
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
    getinfo, AddressVector, AvAttr, Caps, Endpoint, EngineChoice, EpType, Fabric, FiAddr, Hints,
    ProgressKind,
};
use psmrail::ops::RecvOp;
use psmrail::reactor::Reactor;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const TAG: u64 = 0x1234;
/// Messages up to this size are injected.
const INJECT: usize = 64;

#[derive(Clone, Debug)]
struct Args {
    sizes: Vec<usize>,
    iterations: Option<usize>,
    ep_type: EpType,
    engine: Option<EngineChoice>,
    tagged: bool,
    auto_progress: bool,
    spawn: bool,
    server_addr: Option<String>,
    /// Pin this process to that CPU (`--spawn` pins the client to 0 and
    /// the server to 1 unless `--no-pin`).
    cpu: Option<usize>,
    no_pin: bool,
    /// Await with `futures::executor::block_on` instead of the domain's
    /// reactor (`Reactor::block_on`).
    futures_executor: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: pingpong [-S sizes|all] [-I iterations] [-e rdm|dgram] [--engine auto|native|soft] \
         [--tagged] [--auto-progress] [--futures-executor] [--cpu N] [--no-pin] [--spawn | SERVER_ADDR]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        sizes: vec![8, 1024, 64 * 1024, 1024 * 1024],
        iterations: None,
        ep_type: EpType::Rdm,
        engine: None,
        tagged: false,
        auto_progress: false,
        spawn: false,
        server_addr: None,
        cpu: None,
        no_pin: false,
        futures_executor: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "-S" => {
                let v = value();
                a.sizes = if v == "all" {
                    std::iter::successors(Some(1usize), |s| (*s < 4 << 20).then_some(s * 2))
                        .collect()
                } else {
                    v.split(',')
                        .map(|s| s.trim().parse().unwrap_or_else(|_| usage()))
                        .collect()
                };
            }
            "-I" => {
                a.iterations = Some(
                    value()
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .unwrap_or_else(|| usage()),
                )
            }
            "-e" => {
                a.ep_type = match value().as_str() {
                    "rdm" => EpType::Rdm,
                    "dgram" => EpType::Dgram,
                    _ => usage(),
                }
            }
            "--engine" => {
                a.engine = Some(match value().as_str() {
                    "auto" => EngineChoice::Auto,
                    "native" => EngineChoice::Native,
                    "soft" => EngineChoice::Soft,
                    _ => usage(),
                })
            }
            "--tagged" => a.tagged = true,
            "--auto-progress" => a.auto_progress = true,
            "--spawn" => a.spawn = true,
            "--cpu" => a.cpu = Some(value().parse().unwrap_or_else(|_| usage())),
            "--no-pin" => a.no_pin = true,
            "--futures-executor" => a.futures_executor = true,
            "-h" | "--help" => usage(),
            s if !s.starts_with('-') && a.server_addr.is_none() => {
                a.server_addr = Some(s.to_string())
            }
            _ => usage(),
        }
    }
    a
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

fn open(args: &Args) -> Result<Side, String> {
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
    // After the open: PSM may set the affinity itself.
    if let Some(cpu) = args.cpu {
        pin(cpu);
    }
    Ok(Side {
        engine: info.engine.to_string(),
        _fabric: fabric,
        av,
        ep,
        reactor: domain.reactor().clone(),
        futures_executor: args.futures_executor,
    })
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
        .unwrap_or(if size > 64 * 1024 { 100 } else { 1000 })
}

fn run_sizes(side: &Side, args: &Args, peer: FiAddr, client: bool) -> Result<(), String> {
    if client {
        println!(
            "{:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>11}",
            "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
        );
    }
    for &size in &args.sizes {
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
    let side = open(args)?;
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
    let side = open(args)?;
    let server = side
        .av
        .insert_str(addr)
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
    child_args.retain(|a| !a.starts_with("fi_addr"));
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
    let mut args = parse_args();
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
