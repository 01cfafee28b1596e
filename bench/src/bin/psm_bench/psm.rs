//! The psm provider's peers, through the public API only: getinfo →
//! Fabric → Domain → AddressVector → Endpoint, tagged ping-pong with
//! `tsend` / `trecv` (`tinject` for messages up to the inject size), and
//! streaming windows of `tsend`s, each acknowledged by a 1-byte message.
//!
//! The soft engine keeps its defaults: between two processes of one host
//! that is its shared-memory path after a Unix-socket handshake
//! (`SoftConfig::shared_memory`), what a user gets; `soft-unix` stays on
//! the socket, `soft-tcp` uses loopback TCP. The native engine is libpsm_infinipath's (one endpoint per
//! process, which is why every variant runs in processes of its own).

use crate::cli::{ClientArgs, PeerArgs, Variant};
use crate::jobs::{Job, Part};
use crate::peers;
use crate::report::Row;
use futures::future::join_all;
use psmrail::config::PsmConfig;
use psmrail::engine::soft::SoftConfig;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
    Info, ProgressKind,
};
use psmrail::ops::MessageEndpoint;
use psmrail::reactor::Reactor;
use psmrail_bench::harness;
use psmrail_bench::stats::{self, Recorder};
use std::time::{Duration, Instant};

/// The tag of measured messages.
const TAG: u64 = 0x1234;
/// The tag of a window's acknowledgement.
const ACK_TAG: u64 = 0x4321;
/// The client's first message.
const HELLO_TAG: u64 = 1;
/// The client's last message.
const BYE_TAG: u64 = 2;

/// How the soft engine reaches a peer on the same host, for the output.
pub(crate) const SOFT_TRANSPORT: &str =
    "soft engine with its defaults: shared memory after a Unix-socket handshake between processes of one host";

fn psm_config() -> Result<PsmConfig, String> {
    PsmConfig::builder_from_env()
        .map_err(|e| format!("psm configuration: {e}"))?
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .map_err(|e| format!("psm configuration: {e}"))
}

/// The spin window of the adaptive variant (the default under tokio).
const ADAPTIVE_SPIN: std::time::Duration = std::time::Duration::from_micros(500);

/// The provider's first answer for `variant`'s engine and progress model.
pub(crate) fn info(variant: Variant) -> Result<Info, String> {
    let engine = if variant.is_native() {
        EngineChoice::Native
    } else {
        EngineChoice::Soft
    };
    let progress = if variant.is_auto() {
        ProgressKind::Auto
    } else {
        ProgressKind::Manual
    };
    let mut hints = Hints::new()
        .engine(engine)
        .caps(Caps::TAGGED)
        .progress(progress)
        .config(psm_config()?);
    if variant.is_adaptive() {
        hints = hints.spin(ADAPTIVE_SPIN);
    }
    if variant == Variant::SoftTcp {
        hints = hints.soft_config(SoftConfig {
            unix_sockets: false,
            ..SoftConfig::default()
        });
    }
    if variant == Variant::SoftUnix {
        hints = hints.soft_config(SoftConfig {
            shared_memory: false,
            ..SoftConfig::default()
        });
    }
    getinfo(Some(&hints))
        .map_err(|e| format!("getinfo ({} engine): {e}", engine_name(variant)))?
        .into_iter()
        .next()
        .ok_or_else(|| format!("getinfo ({} engine): no provider", engine_name(variant)))
}

fn engine_name(variant: Variant) -> &'static str {
    if variant.is_native() {
        "native"
    } else {
        "soft"
    }
}

/// An open endpoint with what it needs (fields drop in order: the
/// endpoint before its address vector, domain and fabric).
struct Side {
    ep: Endpoint,
    av: AddressVector,
    reactor: Reactor,
    _domain: Domain,
    _fabric: Fabric,
}

impl Side {
    fn open(variant: Variant) -> Result<Side, String> {
        let info = info(variant)?;
        let fabric = Fabric::open(&info).map_err(|e| format!("fabric: {e}"))?;
        let domain = fabric.domain(&info).map_err(|e| format!("domain: {e}"))?;
        let av = domain
            .av(AvAttr::new())
            .map_err(|e| format!("address vector: {e}"))?;
        let ep = domain
            .endpoint(&info)
            .bind_av(&av)
            .enable()
            .map_err(|e| format!("endpoint: {e}"))?;
        Ok(Side {
            ep,
            av,
            reactor: domain.reactor().clone(),
            _domain: domain,
            _fabric: fabric,
        })
    }

    fn insert(&self, addr: &str) -> Result<FiAddr, String> {
        self.av
            .insert_str(addr)
            .map_err(|e| format!("inserting the peer's address {addr:?}: {e}"))
    }
}

/// A byte pattern, different for each `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// Sends `buf`, injected when it fits; hands it back.
async fn send(ep: &Endpoint, to: FiAddr, tag: u64, buf: OpBuffer) -> Result<OpBuffer, String> {
    if buf.len() <= ep.inject_size() {
        ep.tinject(to, tag, buf.as_slice())
            .map_err(|e| format!("tinject: {e}"))?;
        return Ok(buf);
    }
    let (r, buf) = ep.tsend(to, tag, buf).await;
    r.map_err(|e| format!("tsend: {e}"))?;
    Ok(buf)
}

/// Receives one message of `tag`; its length and the buffer.
async fn recv(ep: &Endpoint, tag: u64, buf: OpBuffer) -> Result<(usize, OpBuffer), String> {
    let (r, buf) = ep.trecv(buf, tag, 0).await;
    Ok((r.map_err(|e| format!("trecv: {e}"))?.len, buf))
}

/// One message each way, checked byte for byte (outside the timed loops).
async fn check(ep: &Endpoint, peer: FiAddr, client: bool, size: usize) -> Result<(), String> {
    let (mine, theirs) = if client { (1, 2) } else { (2, 1) };
    if client {
        send(ep, peer, TAG, pattern(size, mine).into()).await?;
    }
    let (n, got) = recv(ep, TAG, vec![0u8; size].into()).await?;
    if n != size || got.as_slice() != pattern(size, theirs).as_slice() {
        return Err(format!("{size} B: the peer's message is not what it sent"));
    }
    if !client {
        send(ep, peer, TAG, pattern(size, mine).into()).await?;
    }
    Ok(())
}

/// `n` round trips of `size` bytes, each recorded (client) in `rec`.
async fn pingpong(
    ep: &Endpoint,
    peer: FiAddr,
    client: bool,
    size: usize,
    n: usize,
    mut rec: Option<&mut Recorder>,
) -> Result<(), String> {
    let mut out: OpBuffer = vec![0u8; size].into();
    let mut inn: OpBuffer = vec![0u8; size].into();
    for _ in 0..n {
        if client {
            let start = Instant::now();
            // The receive is posted before the send, as a ping-pong should.
            let answer = ep.trecv(inn, TAG, 0);
            out = send(ep, peer, TAG, out).await?;
            let (got, b) = answer.await;
            got.map_err(|e| format!("trecv: {e}"))?;
            inn = b;
            if let Some(r) = rec.as_deref_mut() {
                r.record(start.elapsed());
            }
        } else {
            let (_, b) = recv(ep, TAG, inn).await?;
            inn = b;
            out = send(ep, peer, TAG, out).await?;
        }
    }
    Ok(())
}

/// `n` windows of `bufs.len()` messages, each acknowledged by the server;
/// the client records each window's time in `rec`.
async fn stream(
    ep: &Endpoint,
    peer: FiAddr,
    client: bool,
    bufs: &mut Vec<OpBuffer>,
    n: usize,
    mut rec: Option<&mut Recorder>,
) -> Result<(), String> {
    let mut ack: OpBuffer = vec![0u8; 1].into();
    for _ in 0..n {
        if client {
            let start = Instant::now();
            let acked = ep.trecv(ack, ACK_TAG, 0);
            let sends: Vec<_> = bufs.drain(..).map(|b| ep.tsend(peer, TAG, b)).collect();
            for (r, b) in join_all(sends).await {
                r.map_err(|e| format!("tsend: {e}"))?;
                bufs.push(b);
            }
            let (r, b) = acked.await;
            r.map_err(|e| format!("trecv (acknowledgement): {e}"))?;
            ack = b;
            if let Some(r) = rec.as_deref_mut() {
                r.record(start.elapsed());
            }
        } else {
            let recvs: Vec<_> = bufs.drain(..).map(|b| ep.trecv(b, TAG, 0)).collect();
            for (r, b) in join_all(recvs).await {
                r.map_err(|e| format!("trecv: {e}"))?;
                bufs.push(b);
            }
            ack = send(ep, peer, ACK_TAG, ack).await?;
        }
    }
    Ok(())
}

/// Runs one job; the client's row.
async fn run_job(
    ep: &Endpoint,
    peer: FiAddr,
    client: bool,
    job: Job,
    variant: Variant,
) -> Result<Option<Row>, String> {
    check(ep, peer, client, job.size).await?;
    let mut rec = Recorder::new()?;
    match job.part {
        Part::Lat => {
            pingpong(ep, peer, client, job.size, job.warmup(), None).await?;
            let r = client.then_some(&mut rec);
            pingpong(ep, peer, client, job.size, job.count, r).await?;
        }
        Part::Bw | Part::Rate => {
            let mut bufs: Vec<OpBuffer> = (0..job.window)
                .map(|_| vec![0u8; job.size].into())
                .collect();
            stream(ep, peer, client, &mut bufs, job.warmup(), None).await?;
            let r = client.then_some(&mut rec);
            stream(ep, peer, client, &mut bufs, job.count, r).await?;
        }
    }
    Ok(client.then(|| row(variant.name(), job, &rec)))
}

/// The row of a job from its samples: half round trips for `lat`, window
/// times and throughput for `bw` and `rate`.
pub(crate) fn row(variant: &str, job: Job, rec: &Recorder) -> Row {
    let s = rec.summary();
    let us = |ns: f64| Some(ns / 1e3);
    match job.part {
        Part::Lat => {
            let half = s.scaled(0.5);
            Row {
                variant: variant.to_owned(),
                part: job.part.name().to_owned(),
                size_bytes: job.size as u64,
                median_us: us(half.median_ns),
                p90_us: us(half.p90_ns),
                p99_us: us(half.p99_ns),
                mb_s: None,
                msg_s: None,
                samples: s.samples,
            }
        }
        Part::Bw | Part::Rate => Row {
            variant: variant.to_owned(),
            part: job.part.name().to_owned(),
            size_bytes: job.size as u64,
            median_us: us(s.median_ns),
            p90_us: us(s.p90_ns),
            p99_us: us(s.p99_ns),
            mb_s: Some(stats::mb_per_s((job.size * job.window) as f64, s.median_ns)),
            msg_s: Some(stats::per_s(job.window as f64, s.median_ns)),
            samples: s.samples,
        },
    }
}

/// `psm_bench serve` for a psm variant.
pub(crate) fn serve(args: &PeerArgs) -> Result<(), String> {
    let side = Side::open(args.variant)?;
    peers::peer_pin(args)?;
    peers::announce_addr(&side.ep.getname().to_string())?;
    let addr = side.reactor.block_on(harness::peer_addr())?;
    let peer = side.insert(&addr)?;
    let ep = &side.ep;
    side.reactor
        .block_on(recv(ep, HELLO_TAG, vec![0u8; 1].into()))?;
    for job in &args.jobs {
        side.reactor
            .block_on(run_job(ep, peer, false, *job, args.variant))?;
    }
    side.reactor
        .block_on(recv(ep, BYE_TAG, vec![0u8; 1].into()))?;
    Ok(())
}

/// `psm_bench client` for a psm variant.
pub(crate) fn client(args: &ClientArgs) -> Result<(), String> {
    let side = Side::open(args.peer.variant)?;
    peers::peer_pin(&args.peer)?;
    let peer = side.insert(&args.addr)?;
    peers::announce_addr(&side.ep.getname().to_string())?;
    let ep = &side.ep;
    side.reactor
        .block_on(send(ep, peer, HELLO_TAG, vec![1u8].into()))?;
    for job in &args.peer.jobs {
        let row = side
            .reactor
            .block_on(run_job(ep, peer, true, *job, args.peer.variant))?;
        if let Some(row) = row {
            peers::announce_row(&row)?;
        }
    }
    side.reactor
        .block_on(send(ep, peer, BYE_TAG, vec![1u8].into()))?;
    peers::announce_done()?;
    // Keep the endpoint open, and moving, until the server has its bye.
    side.reactor.block_on(harness::until_released())
}
