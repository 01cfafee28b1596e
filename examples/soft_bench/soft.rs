//! The soft engine through the engine contract and the reactor: post
//! `irecv` / `isend` with keys from the endpoint's completion table, then
//! await the completions (busy-polling in manual mode; parked and woken by
//! the progress thread in auto mode).

use super::{Measure, Shape, IN_FLIGHT};
use bytes::Bytes;
use psmrail::engine::soft::{SoftConfig, SoftEndpoint, SoftEngine};
use psmrail::engine::{
    EndpointOptions, Engine, EngineEndpoint, Epid, MqCompletion, OpBuffer, PeerAddr, SendMode,
    TagMatch,
};
use psmrail::reactor::{AutoProgress, OpKey, Reactor};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

const CMD: u64 = 1;
const DATA: u64 = 2;
const ACK: u64 = 3;

/// Same-host peers use loopback TCP here (like the tokio baseline) unless
/// `PSMRAIL_BENCH_UNIX=1` asks for the engine's Unix-socket shortcut.
fn open(auto: bool) -> (Arc<SoftEndpoint>, Reactor) {
    let config = SoftConfig {
        unix_sockets: std::env::var("PSMRAIL_BENCH_UNIX").as_deref() == Ok("1"),
        ..SoftConfig::default()
    };
    let engine = SoftEngine::new(config).expect("soft engine");
    let options = EndpointOptions {
        uuid: *psmrail::config::JobUuid::DEFAULT.as_bytes(),
        unit: None,
        port: None,
        close_timeout: Duration::from_secs(1),
    };
    let ep = engine.open(&options).expect("open endpoint");
    let reactor = if auto {
        let interval = std::env::var("FI_PSM_PROG_INTERVAL")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(AutoProgress::DEFAULT_INTERVAL);
        Reactor::builder()
            .auto(AutoProgress::new().interval(interval))
            .build()
            .expect("auto reactor")
    } else {
        Reactor::manual()
    };
    reactor.add_source(ep.clone()).expect("add source");
    (ep, reactor)
}

fn recv(ep: &SoftEndpoint, tag: u64, buf: Vec<u8>) -> OpKey {
    let key = ep.completions().insert();
    ep.irecv(TagMatch::exact(tag), OpBuffer::from(buf), key)
        .map_err(|e| e.error)
        .expect("irecv");
    key
}

fn send(ep: &SoftEndpoint, peer: PeerAddr, tag: u64, buf: OpBuffer) -> OpKey {
    let key = ep.completions().insert();
    ep.isend(peer, tag, SendMode::Standard, buf, key)
        .map_err(|e| e.error)
        .expect("isend");
    key
}

/// Awaits every key, in any order.
fn wait_all(reactor: &Reactor, ep: &SoftEndpoint, keys: &[OpKey]) -> Vec<MqCompletion> {
    reactor.notify();
    let mut done: Vec<Option<MqCompletion>> = keys.iter().map(|_| None).collect();
    reactor.block_on(poll_fn(|cx| {
        let mut pending = false;
        for (k, slot) in keys.iter().zip(done.iter_mut()) {
            if slot.is_none() {
                match reactor.poll_completion(ep.completions(), *k, cx) {
                    Poll::Ready(c) => *slot = Some(c),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }));
    done.into_iter()
        .map(|c| {
            let c = c.expect("completion");
            assert!(c.status.error.is_none(), "operation failed: {:?}", c.status);
            c
        })
        .collect()
}

fn wait(reactor: &Reactor, ep: &SoftEndpoint, key: OpKey) -> MqCompletion {
    wait_all(reactor, ep, &[key]).pop().unwrap()
}

pub(crate) fn serve(auto: bool, announce: impl FnOnce(String)) {
    let (ep, reactor) = open(auto);
    announce(ep.epid().to_string());
    let mut bufs: Vec<Vec<u8>> = (0..IN_FLIGHT).map(|_| vec![0u8; 4 << 20]).collect();
    loop {
        let cmd = wait(&reactor, &ep, recv(&ep, CMD, vec![0u8; 9]));
        let Some(peer) = cmd.status.source else {
            panic!("soft engine reported no source");
        };
        let head = cmd.buffer.into_vec().unwrap();
        let size = u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize;
        let count = u32::from_le_bytes(head[5..9].try_into().unwrap()) as usize;
        match head[0] {
            b'p' => {
                let mut buf = bufs.pop().unwrap();
                buf.resize(size, 0);
                for _ in 0..count {
                    let got = wait(&reactor, &ep, recv(&ep, DATA, buf));
                    let back = send(&ep, peer, DATA, got.buffer);
                    buf = wait(&reactor, &ep, back).buffer.into_vec().unwrap();
                }
                bufs.push(buf);
            }
            b's' => {
                for _ in 0..count {
                    let keys: Vec<OpKey> = bufs
                        .drain(..)
                        .map(|mut b| {
                            b.resize(size, 0);
                            recv(&ep, DATA, b)
                        })
                        .collect();
                    for c in wait_all(&reactor, &ep, &keys) {
                        bufs.push(c.buffer.into_vec().unwrap());
                    }
                    wait(
                        &reactor,
                        &ep,
                        send(&ep, peer, ACK, OpBuffer::from(vec![1u8])),
                    );
                }
            }
            _ => break,
        }
    }
    let _ = ep.close(Duration::from_secs(1));
}

pub(crate) fn client(auto: bool, addr: &str, shapes: &[Shape]) -> Vec<Measure> {
    let (ep, reactor) = open(auto);
    let epid: Epid = addr.parse().expect("server epid");
    let peer = ep
        .connect(&[epid], Duration::from_secs(10))
        .pop()
        .unwrap()
        .expect("connect to server");
    let payload = Bytes::from(vec![0xa5u8; 4 << 20]);
    let mut out = Vec::new();
    for shape in shapes {
        let (kind, size, iters) = match *shape {
            Shape::PingPong { size, iters } => (b'p', size, iters),
            Shape::Stream { size, batches } => (b's', size, batches),
        };
        let mut head = vec![kind, 0, 0, 0, 0, 0, 0, 0, 0];
        head[1..5].copy_from_slice(&(size as u32).to_le_bytes());
        head[5..9].copy_from_slice(&(iters as u32).to_le_bytes());
        wait(&reactor, &ep, send(&ep, peer, CMD, OpBuffer::from(head)));
        let mut samples = Vec::with_capacity(iters);
        let mut rbuf = vec![0u8; size];
        for _ in 0..iters {
            let t = Instant::now();
            if kind == b'p' {
                let r = recv(&ep, DATA, rbuf);
                let s = send(&ep, peer, DATA, OpBuffer::from(payload.slice(..size)));
                let mut done = wait_all(&reactor, &ep, &[r, s]);
                rbuf = done.swap_remove(0).buffer.into_vec().unwrap();
            } else {
                let ack = recv(&ep, ACK, vec![0u8; 1]);
                let mut keys: Vec<OpKey> = (0..IN_FLIGHT)
                    .map(|_| send(&ep, peer, DATA, OpBuffer::from(payload.slice(..size))))
                    .collect();
                keys.push(ack);
                wait_all(&reactor, &ep, &keys);
            }
            samples.push(t.elapsed());
        }
        out.push(Measure::new(*shape, samples));
    }
    wait(
        &reactor,
        &ep,
        send(&ep, peer, CMD, OpBuffer::from(vec![b'q'; 9])),
    );
    let _ = ep.close(Duration::from_secs(1));
    out
}
