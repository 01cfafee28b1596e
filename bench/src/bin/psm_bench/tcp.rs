//! The baseline: what a Rust user writes by hand with tokio — a
//! current-thread runtime, one `TcpStream` over loopback with
//! `TCP_NODELAY`, `write_all` / `read_exact`. The same jobs as the psm
//! peers: ping-pong, and windows of messages acknowledged by one byte.

use crate::cli::{ClientArgs, PeerArgs};
use crate::jobs::{Job, Part};
use crate::peers;
use crate::psm::row;
use psmrail_bench::harness;
use psmrail_bench::stats::Recorder;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// A byte pattern, different for each `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// One message each way, checked byte for byte.
async fn check(s: &mut TcpStream, client: bool, size: usize) -> Result<(), String> {
    let (mine, theirs) = if client { (1, 2) } else { (2, 1) };
    let mut got = vec![0u8; size];
    if client {
        s.write_all(&pattern(size, mine))
            .await
            .map_err(io("write"))?;
    }
    s.read_exact(&mut got).await.map_err(io("read"))?;
    if got != pattern(size, theirs) {
        return Err(format!("{size} B: the peer's message is not what it sent"));
    }
    if !client {
        s.write_all(&pattern(size, mine))
            .await
            .map_err(io("write"))?;
    }
    Ok(())
}

/// `n` round trips (or windows) of `job`, recorded by the client in `rec`.
async fn exchanges(
    s: &mut TcpStream,
    client: bool,
    job: Job,
    buf: &mut [u8],
    n: usize,
    mut rec: Option<&mut Recorder>,
) -> Result<(), String> {
    let mut ack = [1u8];
    for _ in 0..n {
        let start = Instant::now();
        match (job.part, client) {
            (Part::Lat, true) => {
                s.write_all(buf).await.map_err(io("write"))?;
                s.read_exact(buf).await.map_err(io("read"))?;
            }
            (Part::Lat, false) => {
                s.read_exact(buf).await.map_err(io("read"))?;
                s.write_all(buf).await.map_err(io("write"))?;
            }
            (_, true) => {
                for _ in 0..job.window {
                    s.write_all(buf).await.map_err(io("write"))?;
                }
                s.read_exact(&mut ack).await.map_err(io("read"))?;
            }
            (_, false) => {
                for _ in 0..job.window {
                    s.read_exact(buf).await.map_err(io("read"))?;
                }
                s.write_all(&ack).await.map_err(io("write"))?;
            }
        }
        if let Some(r) = rec.as_deref_mut() {
            r.record(start.elapsed());
        }
    }
    Ok(())
}

async fn run_jobs(s: &mut TcpStream, client: bool, args: &PeerArgs) -> Result<(), String> {
    for &job in &args.jobs {
        check(s, client, job.size).await?;
        let mut buf = vec![0u8; job.size];
        exchanges(s, client, job, &mut buf, job.warmup(), None).await?;
        let mut rec = Recorder::new()?;
        let r = client.then_some(&mut rec);
        exchanges(s, client, job, &mut buf, job.count, r).await?;
        if client {
            peers::announce_row(&row(args.variant.name(), job, &rec))?;
        }
    }
    Ok(())
}

/// `psm_bench serve --variant tokio-tcp`.
pub(crate) fn serve(args: &PeerArgs) -> Result<(), String> {
    peers::peer_pin(args)?;
    runtime()?.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(io("bind"))?;
        let addr = listener.local_addr().map_err(io("local address"))?;
        peers::announce_addr(&addr.to_string())?;
        // The client connects before it announces itself.
        harness::peer_addr().await?;
        let (mut s, _) = listener.accept().await.map_err(io("accept"))?;
        s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
        run_jobs(&mut s, false, args).await?;
        // The client's bye: the end of its stream.
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.map_err(io("read"))?;
        Ok(())
    })
}

/// `psm_bench client --variant tokio-tcp`.
pub(crate) fn client(args: &ClientArgs) -> Result<(), String> {
    peers::peer_pin(&args.peer)?;
    runtime()?.block_on(async {
        let mut s = TcpStream::connect(&args.addr)
            .await
            .map_err(|e| format!("connecting to {}: {e}", args.addr))?;
        s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
        let me = s.local_addr().map_err(io("local address"))?;
        peers::announce_addr(&me.to_string())?;
        run_jobs(&mut s, true, &args.peer).await?;
        s.shutdown().await.map_err(io("shutdown"))?;
        peers::announce_done()?;
        harness::until_released().await
    })
}
