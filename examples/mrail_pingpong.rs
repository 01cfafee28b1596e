//! Latency and bandwidth of an mrail endpoint (or of a plain psm endpoint
//! on one rail, for comparison), between two processes, printing
//! `fi_pingpong`'s columns.
//!
//! ```text
//! # As root: builds two network namespaces joined by 2 veth rails shaped
//! # at 1 Gbit/s, runs the server in one and the client in the other.
//! cargo run --release --example mrail_pingpong -- --rig 2 --rate 1000 --bw -S 4m
//! cargo run --release --example mrail_pingpong -- --rig 2 -S 8            # latency
//! cargo run --release --example mrail_pingpong -- --rig 2 -S 8 --provider psm
//!
//! # On your own hosts: FI_OFI_MRAIL_ADDR names this host's rails.
//! FI_OFI_MRAIL_ADDR=eth1,eth2 cargo run --release --example mrail_pingpong            # server
//! FI_OFI_MRAIL_ADDR=eth1,eth2 cargo run --release --example mrail_pingpong -- ADDR    # client
//! ```
//!
//! The full multi-rail benchmark (every policy, 1 to 4 rails, iperf3 as
//! the line-rate reference, failover timelines) is `mrail_bench` in the
//! `bench/` workspace member.
//!
//! The ping-pong sends one message and waits for it to come back (`usec/xfer`
//! is half a round trip); messages up to the inject size are injected. With
//! `--bw` the client streams windows of `--window` messages and the server
//! answers each window with one small message (as `fi_rdm_tagged_bw`), so
//! `MB/sec` is the streaming bandwidth. Every message is checked byte for
//! byte once per size, outside the timed loops.
//!
//! The same generic code runs both providers
//! ([`MessageEndpoint`](psmrail::ops::MessageEndpoint)); `--provider psm`
//! opens a psm endpoint bound to the first rail's address, the baseline an
//! mrail endpoint's fixed policy is compared with.

#[path = "../tests/support/rig.rs"]
#[allow(dead_code)]
mod rig;

use clap::Parser;
use psmrail::config::{MrailConfig, PsmConfig};
use psmrail::engine::soft::SoftConfig;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{
    getinfo, AvAttr, Caps, EngineChoice, Fabric, FiAddr, Hints, ProgressKind, Provider,
};
use psmrail::mrail::MrailFabric;
use psmrail::ops::MessageEndpoint;
use psmrail::reactor::Reactor;
use std::io::{BufRead, BufReader, Write};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

const TAG: u64 = 0x1234;
const ACK_TAG: u64 = 0x4321;

#[derive(Parser, Clone, Debug)]
#[command(about = "mrail ping-pong and bandwidth, fi_pingpong's columns")]
struct Args {
    /// Message sizes (comma-separated; k/m suffixes; `all` = 1 B .. 4 MiB).
    #[arg(short = 'S', long, default_value = "8,1k,64k,1m,4m")]
    sizes: String,
    /// Iterations per size (default 1000 up to 64 KiB, 100 above, 20 with --bw).
    #[arg(short = 'I', long)]
    iterations: Option<usize>,
    /// Stream windows of messages instead of a ping-pong.
    #[arg(long)]
    bw: bool,
    /// Messages per window with --bw.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// `mrail`, or `psm` for one plain endpoint on the first rail.
    #[arg(long, default_value = "mrail")]
    provider: String,
    /// `FI_OFI_MRAIL_CONFIG` (default: the variable, else
    /// 16384:fixed,ULONG_MAX:striping).
    #[arg(long)]
    policy: Option<String>,
    /// The progress thread instead of manual progress.
    #[arg(long)]
    auto_progress: bool,
    /// Build a rig of this many rails (root) and run both sides in it.
    #[arg(long)]
    rig: Option<usize>,
    /// With --rig: shape every rail to this rate (Mbit/s).
    #[arg(long)]
    rate: Option<u32>,
    /// With --rig: shape each rail to its own rate (comma-separated Mbit/s).
    #[arg(long)]
    rates: Option<String>,
    /// Pin this process to that CPU once its endpoint is open (--rig pins
    /// the client to CPU 0 and the server to CPU 1).
    #[arg(long)]
    cpu: Option<usize>,
    /// The server's address (client mode).
    addr: Option<String>,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .map(|n| n * mul)
        .map_err(|_| format!("size {s:?}: not a number"))
}

fn sizes(args: &Args) -> Result<Vec<usize>, String> {
    if args.sizes == "all" {
        return Ok((0..=22).map(|p| 1usize << p).collect());
    }
    args.sizes.split(',').map(parse_size).collect()
}

fn iterations(args: &Args, size: usize) -> usize {
    args.iterations.unwrap_or(match (args.bw, size > 64 << 10) {
        (true, _) => 20,
        (false, true) => 100,
        (false, false) => 1000,
    })
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// Inserts a peer's address (text form) in a side's address vector.
type Insert = Box<dyn Fn(&str) -> Result<FiAddr, String>>;

/// An opened endpoint of either provider, with what the generic code needs.
struct Side<E> {
    ep: E,
    reactor: Reactor,
    name: String,
    insert: Insert,
    keep: Box<dyn std::any::Any>,
}

fn psm_config() -> Result<PsmConfig, String> {
    PsmConfig::builder_from_vars(&psmrail::config::ProcessEnv)
        .map_err(|e| e.to_string())?
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .map_err(|e| e.to_string())
}

fn progress(args: &Args) -> ProgressKind {
    if args.auto_progress {
        ProgressKind::Auto
    } else {
        ProgressKind::Manual
    }
}

fn open_mrail(args: &Args) -> Result<Side<psmrail::mrail::MrailEndpoint>, String> {
    let mut cfg =
        MrailConfig::builder_from_vars(&psmrail::config::ProcessEnv).map_err(|e| e.to_string())?;
    if let Some(p) = &args.policy {
        cfg = cfg.policy_table(p.parse().map_err(|e| format!("--policy: {e}"))?);
    }
    let hints = Hints::new()
        .provider(Provider::Mrail)
        .engine(EngineChoice::Soft)
        .caps(Caps::TAGGED)
        .progress(progress(args))
        .config(psm_config()?)
        .mrail_config(cfg.build());
    let info = getinfo(Some(&hints))
        .map_err(|e| format!("getinfo: {e}"))?
        .remove(0);
    let domain = MrailFabric::open(&info)
        .and_then(|f| f.domain(&info))
        .map_err(|e| format!("domain: {e}"))?;
    let av = domain.av(AvAttr::new()).map_err(|e| e.to_string())?;
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .map_err(|e| format!("endpoint: {e}"))?;
    let name = ep.getname().to_string();
    let av2 = av.clone();
    Ok(Side {
        ep,
        reactor: domain.reactor().clone(),
        name,
        insert: Box::new(move |a| av2.insert_str(a).map_err(|e| e.to_string())),
        keep: Box::new((domain, av)),
    })
}

fn open_psm(args: &Args) -> Result<Side<psmrail::fabric::Endpoint>, String> {
    // One plain endpoint, bound to the first rail's address, over TCP.
    let rails = MrailConfig::from_env().map_err(|e| e.to_string())?;
    let first = rails
        .rails()
        .first()
        .ok_or("FI_OFI_MRAIL_ADDR names no rail")?;
    let ip = psmrail::mrail::resolve::resolve_rail(first)
        .map_err(|e| e.to_string())?
        .ip;
    let soft = SoftConfig {
        bind: ip,
        unix_sockets: false,
        dial_from_bind: true,
        ..SoftConfig::default()
    };
    let hints = Hints::new()
        .engine(EngineChoice::Soft)
        .caps(Caps::TAGGED)
        .progress(progress(args))
        .config(psm_config()?)
        .soft_config(soft);
    let info = getinfo(Some(&hints))
        .map_err(|e| format!("getinfo: {e}"))?
        .remove(0);
    let fabric = Fabric::open(&info).map_err(|e| e.to_string())?;
    let domain = fabric.domain(&info).map_err(|e| format!("domain: {e}"))?;
    let av = domain.av(AvAttr::new()).map_err(|e| e.to_string())?;
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .map_err(|e| format!("endpoint: {e}"))?;
    let name = ep.getname().to_string();
    let av2 = av.clone();
    Ok(Side {
        ep,
        reactor: domain.reactor().clone(),
        name,
        insert: Box::new(move |a| av2.insert_str(a).map_err(|e| e.to_string())),
        keep: Box::new((fabric, domain, av)),
    })
}

/// Sends `buf` (injected when it fits), handing it back.
async fn send<E: MessageEndpoint>(
    ep: &E,
    to: FiAddr,
    tag: u64,
    buf: OpBuffer,
) -> Result<OpBuffer, String> {
    if buf.len() <= ep.inject_size() {
        ep.tinject(to, tag, buf.as_slice())
            .map_err(|e| format!("inject: {e}"))?;
        return Ok(buf);
    }
    let (r, buf) = ep.tsend(to, tag, buf).await;
    r.map_err(|e| format!("send: {e}"))?;
    Ok(buf)
}

async fn recv<E: MessageEndpoint>(
    ep: &E,
    tag: u64,
    buf: OpBuffer,
) -> Result<(usize, OpBuffer), String> {
    let (r, buf) = ep.trecv(buf, tag, 0).await;
    Ok((r.map_err(|e| format!("recv: {e}"))?.len, buf))
}

/// One size: the checked exchange, a warm-up, the timed loop; the
/// client's elapsed time.
async fn one_size<E: MessageEndpoint>(
    ep: &E,
    peer: FiAddr,
    client: bool,
    size: usize,
    iters: usize,
    bw: bool,
    window: usize,
) -> Result<Duration, String> {
    // Checked exchange.
    if client {
        send(ep, peer, TAG, pattern(size, 1).into()).await?;
        let (n, back) = recv(ep, TAG, vec![0u8; size].into()).await?;
        if n != size || back.as_slice() != pattern(size, 2).as_slice() {
            return Err(format!(
                "{size} B: the answer differs from the server's pattern"
            ));
        }
    } else {
        let (n, got) = recv(ep, TAG, vec![0u8; size].into()).await?;
        if n != size || got.as_slice() != pattern(size, 1).as_slice() {
            return Err(format!(
                "{size} B: the message differs from the client's pattern"
            ));
        }
        send(ep, peer, TAG, pattern(size, 2).into()).await?;
    }
    let mut elapsed = Duration::ZERO;
    for (round, n) in [(0, (iters / 10).max(1)), (1, iters)] {
        let start = Instant::now();
        if bw {
            let mut bufs: Vec<OpBuffer> = (0..window).map(|_| vec![0u8; size].into()).collect();
            for _ in 0..n {
                if client {
                    let futs: Vec<_> = bufs.drain(..).map(|b| ep.tsend(peer, TAG, b)).collect();
                    for (r, b) in futures::future::join_all(futs).await {
                        r.map_err(|e| format!("send: {e}"))?;
                        bufs.push(b);
                    }
                    recv(ep, ACK_TAG, vec![0u8; 1].into()).await?;
                } else {
                    let futs: Vec<_> = bufs.drain(..).map(|b| ep.trecv(b, TAG, 0)).collect();
                    for (r, b) in futures::future::join_all(futs).await {
                        r.map_err(|e| format!("recv: {e}"))?;
                        bufs.push(b);
                    }
                    send(ep, peer, ACK_TAG, vec![1u8].into()).await?;
                }
            }
        } else {
            let mut out: OpBuffer = vec![0u8; size].into();
            let mut inn: OpBuffer = vec![0u8; size].into();
            for _ in 0..n {
                if client {
                    let r = ep.trecv(inn, TAG, 0);
                    out = send(ep, peer, TAG, out).await?;
                    let (got, b) = r.await;
                    got.map_err(|e| format!("recv: {e}"))?;
                    inn = b;
                } else {
                    let (_, b) = recv(ep, TAG, inn).await?;
                    inn = b;
                    out = send(ep, peer, TAG, out).await?;
                }
            }
        }
        if round == 1 {
            elapsed = start.elapsed();
        }
    }
    Ok(elapsed)
}

fn size_str(v: f64) -> String {
    const UNITS: [&str; 5] = ["", "k", "m", "g", "t"];
    let (mut v, mut u) = (v, 0);
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

fn run<E: MessageEndpoint>(args: &Args, side: Side<E>) -> Result<(), String> {
    let client = args.addr.is_some();
    if let Some(cpu) = args.cpu {
        let set: psmrail::reactor::CpuSet = [cpu].into_iter().collect();
        psmrail::reactor::pin_current_thread(&set).map_err(|e| format!("--cpu {cpu}: {e}"))?;
    }
    // Addresses travel out of band (an mrail endpoint drops messages of
    // peers it has not inserted): each side prints its own; the client
    // gets the server's on its command line, the server reads the
    // client's from its standard input.
    println!("@@ addr {}", side.name);
    std::io::stdout().flush().ok();
    let peer = match &args.addr {
        Some(a) => (side.insert)(a)?,
        None => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| format!("reading the client's address: {e}"))?;
            let text = line.trim().trim_start_matches("@@ addr ").to_owned();
            (side.insert)(&text)?
        }
    };
    // Both sides are in each other's address vectors once this returns.
    if client {
        side.reactor
            .block_on(send(&side.ep, peer, 1, vec![1u8].into()))?;
    } else {
        side.reactor
            .block_on(recv(&side.ep, 1, vec![0u8; 1].into()))?;
    }
    if client {
        println!(
            "{:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>11}",
            "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
        );
    }
    for size in sizes(args)? {
        let iters = iterations(args, size);
        let elapsed = side.reactor.block_on(one_size(
            &side.ep,
            peer,
            client,
            size,
            iters,
            args.bw,
            args.window,
        ))?;
        if client {
            let secs = elapsed.as_secs_f64();
            let xfers = if args.bw {
                iters * args.window
            } else {
                2 * iters
            } as f64;
            let total = size as f64 * xfers;
            println!(
                "{:>8} {:>8} {:>8} {:>8} {:>7.3}s {:>10.2} {:>10.2} {:>11.4}",
                size_str(size as f64),
                xfers as usize,
                format!("={}", xfers as usize),
                size_str(total),
                secs,
                total / secs / 1e6,
                secs * 1e6 / xfers,
                xfers / secs / 1e6
            );
        }
    }
    drop(side.keep);
    Ok(())
}

fn side(args: &Args) -> Result<(), String> {
    match args.provider.as_str() {
        "mrail" => run(args, open_mrail(args)?),
        "psm" => run(args, open_psm(args)?),
        other => Err(format!("--provider {other:?}: expected mrail or psm")),
    }
}

/// A child's remaining output lines.
type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Reads lines until `@@ addr <addr>`; the address and the rest.
fn first_addr(out: std::process::ChildStdout) -> Result<(String, Lines), String> {
    let mut lines = BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("@@ addr ") => {
                return Ok((l["@@ addr ".len()..].to_owned(), lines))
            }
            Some(Ok(_)) => {}
            _ => return Err("a side exited before printing its address".into()),
        }
    }
}

/// Builds the rig, then runs the server in host B and the client in A.
fn with_rig(args: &Args, rails: usize) -> Result<(), String> {
    if let Some(reason) = rig::RailRig::skip_reason() {
        return Err(format!("--rig: {reason}"));
    }
    let rates: Vec<Option<u32>> = match (&args.rates, args.rate) {
        (Some(list), _) => list
            .split(',')
            .map(|r| r.parse().map(Some).map_err(|_| format!("--rates: {r:?}")))
            .collect::<Result<_, _>>()?,
        (None, r) => vec![r; rails],
    };
    if rates.len() != rails {
        return Err(format!(
            "--rates names {} rails, --rig {rails}",
            rates.len()
        ));
    }
    let shapes: Vec<rig::RailShape> = rates
        .iter()
        .map(|r| rig::RailShape {
            rate_mbit: *r,
            ..Default::default()
        })
        .collect();
    let rig = rig::RailRig::with_shapes(&shapes)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let own: Vec<String> = std::env::args().skip(1).collect();
    let mut child_args = Vec::new();
    let mut skip = false;
    for a in own {
        if skip {
            skip = false;
            continue;
        }
        if matches!(a.as_str(), "--rig" | "--rate" | "--rates") {
            skip = true;
            continue;
        }
        if a.starts_with("--rig=") || a.starts_with("--rate=") || a.starts_with("--rates=") {
            continue;
        }
        child_args.push(a);
    }
    let mut server = rig
        .command_in(rig.b(), &exe)
        .args(&child_args)
        .args(["--cpu", "1"])
        .env("FI_OFI_MRAIL_ADDR", rig.mrail_addr_b())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("server: {e}"))?;
    let server_addr = first_addr(server.stdout.take().ok_or("server stdout")?)?;
    let mut client = rig
        .command_in(rig.a(), &exe)
        .args(&child_args)
        .arg(&server_addr.0)
        .args(["--cpu", "0"])
        .env("FI_OFI_MRAIL_ADDR", rig.mrail_addr_a())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("client: {e}"))?;
    let (client_addr, rest) = first_addr(client.stdout.take().ok_or("client stdout")?)?;
    let mut stdin = server.stdin.take().ok_or("server stdin")?;
    writeln!(stdin, "{client_addr}").map_err(|e| e.to_string())?;
    for line in rest.map_while(Result::ok) {
        println!("{line}");
    }
    let status = client.wait().map_err(|e| e.to_string())?;
    let server_status = server.wait().map_err(|e| e.to_string())?;
    if !status.success() || !server_status.success() {
        return Err(format!("client {status}, server {server_status}"));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match args.rig {
        Some(n) => with_rig(&args, n),
        None => side(&args),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mrail_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
