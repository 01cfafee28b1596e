//! psmrail's main demo: the effective configuration, a round trip through
//! the progress reactor in manual and in auto mode, then a tagged ping-pong
//! between two endpoints of the default (soft) engine.
//!
//! ```sh
//! cargo run --example demo
//! FI_PSM_PROG_AFFINITY=-1 FI_PSM_PROG_INTERVAL=1000 cargo run --example demo
//! ```
//!
//! A stand-in engine (a queue the reactor drains) completes each operation
//! on the reactor's next progress round; the demo awaits a batch of such
//! operations through the completion table and prints the median time from
//! posting an operation to its future returning.

use psmrail::config::{MrailConfig, PsmConfig};
use psmrail::engine::soft::SoftEngine;
use psmrail::engine::{
    EndpointOptions, Engine, EngineEndpoint, MqCompletion, OpBuffer, SendMode, TagMatch,
};
use psmrail::reactor::{CompletionTable, OpKey, Progress, ProgressSource, Reactor};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A stand-in engine: operations posted to it complete on the next round.
struct EchoEngine {
    posted: Mutex<VecDeque<(OpKey, u64)>>,
    table: Arc<CompletionTable<u64>>,
}

impl ProgressSource for EchoEngine {
    fn progress(&self) -> Progress {
        let mut made = Progress::Idle;
        while let Some((key, value)) = self.posted.lock().unwrap().pop_front() {
            // The future may have been dropped; the table then drops the value.
            let _ = self.table.complete(key, value + 1);
            made = Progress::Made;
        }
        made
    }
}

/// An operation's future: posts on creation, resolves with the engine's answer.
struct Echo {
    reactor: Reactor,
    table: Arc<CompletionTable<u64>>,
    key: Option<OpKey>,
}

impl Echo {
    fn post(reactor: &Reactor, engine: &EchoEngine, value: u64) -> Echo {
        let key = engine.table.insert();
        engine.posted.lock().unwrap().push_back((key, value));
        reactor.notify();
        Echo {
            reactor: reactor.clone(),
            table: engine.table.clone(),
            key: Some(key),
        }
    }
}

impl Future for Echo {
    type Output = u64;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        let Some(key) = self.key else {
            panic!("Echo polled after it returned");
        };
        let out = self.reactor.poll_completion(&self.table, key, cx);
        if out.is_ready() {
            self.key = None;
        }
        out
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let _ = self.table.abandon(key);
        }
    }
}

fn round_trips(label: &str, reactor: &Reactor) -> Result<(), String> {
    let engine = Arc::new(EchoEngine {
        posted: Mutex::new(VecDeque::new()),
        table: Arc::new(CompletionTable::with_capacity(64)),
    });
    let id = reactor
        .add_source(engine.clone())
        .map_err(|e| format!("cannot add the engine to the reactor: {e}"))?;
    let mut samples = Vec::with_capacity(2000);
    for i in 0..2000u64 {
        let start = Instant::now();
        let answer = reactor.block_on(Echo::post(reactor, &engine, i));
        samples.push(start.elapsed());
        if answer != i + 1 {
            return Err(format!("operation {i} returned {answer}"));
        }
    }
    reactor.remove_source(id);
    samples.sort();
    let stats = reactor.stats();
    println!(
        "  {label:<28} median {:>9.2?}  p99 {:>9.2?}  ({} rounds, {} productive)",
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
        stats.rounds,
        stats.productive_rounds,
    );
    Ok(())
}

/// Awaits one operation of `ep` through the reactor.
fn wait(reactor: &Reactor, ep: &dyn EngineEndpoint, key: OpKey) -> Result<MqCompletion, String> {
    let done = reactor.block_on(std::future::poll_fn(|cx| {
        reactor.poll_completion(ep.completions(), key, cx)
    }));
    match done.status.error {
        None => Ok(done),
        Some(kind) => Err(format!("operation failed: {kind} ({:?})", done.status)),
    }
}

/// Two soft endpoints in this process, 8-byte tagged ping-pong between them.
fn soft_ping_pong(psm: &PsmConfig) -> Result<(), String> {
    let engine = SoftEngine::default();
    let options = EndpointOptions {
        uuid: *psm.uuid().as_bytes(),
        unit: None,
        port: None,
        close_timeout: psm.timeout(),
    };
    let a = engine.open(&options).map_err(|e| e.to_string())?;
    let b = engine.open(&options).map_err(|e| e.to_string())?;
    let reactor = Reactor::manual();
    for ep in [&a, &b] {
        reactor
            .add_source(ep.clone())
            .map_err(|e| format!("cannot add an endpoint to the reactor: {e}"))?;
    }
    // `connect` drives only its own endpoint, and the other one must answer
    // the handshake: connect both ways at once, as two processes would.
    let connect = |from: &dyn EngineEndpoint, to| {
        from.connect(&[to], Duration::from_secs(5))
            .pop()
            .expect("one result per epid")
            .map_err(|e| e.to_string())
    };
    let (to_b, to_a) = std::thread::scope(|s| {
        let other = s.spawn(|| connect(&*b, a.epid()));
        let mine = connect(&*a, b.epid());
        (mine, other.join().expect("connect thread"))
    });
    let (to_b, to_a) = (to_b?, to_a?);
    println!("soft engine ping-pong: {} <-> {}", a.epid(), b.epid());
    let post_err = |e: psmrail::engine::PostError| e.error.to_string();
    let mut samples = Vec::with_capacity(2000);
    let (mut ping, mut pong) = (vec![0u8; 8], vec![0u8; 8]);
    for i in 0..2000u64 {
        let start = Instant::now();
        // b waits for a ping; a sends it and waits for the pong.
        let (rb, ra) = (b.completions().insert(), a.completions().insert());
        b.irecv(TagMatch::exact(1), OpBuffer::from(pong), rb)
            .map_err(post_err)?;
        a.irecv(TagMatch::exact(2), OpBuffer::from(ping), ra)
            .map_err(post_err)?;
        let sa = a.completions().insert();
        let msg = OpBuffer::from(i.to_le_bytes().to_vec());
        a.isend(to_b, 1, SendMode::Standard, msg, sa)
            .map_err(post_err)?;
        let got = wait(&reactor, &*b, rb)?;
        let sb = b.completions().insert();
        b.isend(to_a, 2, SendMode::Standard, got.buffer, sb)
            .map_err(post_err)?;
        let back = wait(&reactor, &*a, ra)?;
        wait(&reactor, &*a, sa)?;
        pong = wait(&reactor, &*b, sb)?
            .buffer
            .into_vec()
            .unwrap_or_default();
        samples.push(start.elapsed());
        if back.buffer.as_slice() != i.to_le_bytes() {
            return Err(format!(
                "round trip {i} came back as {:?}",
                back.buffer.as_slice()
            ));
        }
        ping = back.buffer.into_vec().unwrap_or_default();
        pong.resize(8, 0);
    }
    samples.sort();
    println!(
        "  8 B round trip, 2000 times, every byte checked: median {:.2?} (one thread drives both ends)",
        samples[samples.len() / 2]
    );
    for ep in [a, b] {
        ep.close(Duration::from_secs(1))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let psm = PsmConfig::from_env().map_err(|e| e.to_string())?;
    let mrail = MrailConfig::from_env().map_err(|e| e.to_string())?;
    println!("{psm}");
    println!("{mrail}");

    println!("reactor round trip (post -> progress -> complete -> future ready), 2000 ops:");
    round_trips("manual progress", &Reactor::manual())?;
    let auto = psm.auto_progress();
    let reactor = Reactor::builder()
        .auto(auto.clone())
        .build()
        .map_err(|e| format!("cannot start the progress thread: {e}"))?;
    if let Some(info) = reactor.auto_thread() {
        println!(
            "  auto thread: tid {}, affinity {:?}, interval {:?}, strategy {:?}",
            info.tid, info.affinity, info.interval, info.strategy
        );
    }
    round_trips(&format!("auto progress ({:?})", auto.interval), &reactor)?;
    let fast = Reactor::builder()
        .auto(auto.interval(Duration::ZERO))
        .build()
        .map_err(|e| format!("cannot start the progress thread: {e}"))?;
    round_trips("auto progress (spinning)", &fast)?;
    println!();
    soft_ping_pong(&psm)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::from(2)
        }
    }
}
