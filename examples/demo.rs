//! A tour of psmrail through its public API: the effective configuration,
//! then two endpoints of the soft engine in this process exchanging tagged
//! messages, once with manual progress and once with the auto progress
//! thread.
//!
//! ```sh
//! cargo run --example demo
//! FI_PSM_PROG_AFFINITY=-1 FI_PSM_PROG_INTERVAL=0 cargo run --example demo
//! ```
//!
//! Each endpoint has its own domain (an engine endpoint and its reactor),
//! as two processes would; they find each other by inserting each other's
//! name in their address vectors. A round trip is timed from posting the
//! receive of the answer to taking it, every byte checked.

use psmrail::config::{MrailConfig, PsmConfig};
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
    ProgressKind,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const ROUND_TRIPS: u64 = 2000;

/// One side: its domain, address vector and endpoint (fields drop in order:
/// the endpoint before its domain).
struct Side {
    ep: Endpoint,
    av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
}

fn open(config: &PsmConfig, progress: ProgressKind) -> psmrail::Result<Side> {
    let hints = Hints::new()
        .caps(Caps::TAGGED)
        .engine(EngineChoice::Soft)
        .progress(progress)
        .config(config.clone());
    let info = getinfo(Some(&hints))?.remove(0);
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let av = domain.av(AvAttr::new())?;
    let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    Ok(Side {
        ep,
        av,
        domain,
        _fabric: fabric,
    })
}

/// Tagged ping-pong of 8 bytes between `a` and `b`; the median round trip.
fn ping_pong(a: &Side, b: &Side) -> Result<Duration, String> {
    let err = |e: psmrail::Error| e.to_string();
    // An insert connects, and with manual progress the other side must be
    // making progress to answer: insert both ways at once, as two
    // processes would.
    let (to_b, to_a) = std::thread::scope(|s| {
        let other = s.spawn(|| b.av.insert(&[a.ep.getname()]).remove(0));
        let mine = a.av.insert(&[b.ep.getname()]).remove(0);
        (mine, other.join())
    });
    let to_b: FiAddr = to_b.map_err(err)?;
    let to_a: FiAddr = to_a
        .map_err(|_| "the insert thread panicked".to_string())?
        .map_err(err)?;
    // Both ends live in this thread: one task drives both, as `join` polls
    // each side in turn (each side's reactor makes its own progress).
    let mut samples = Vec::with_capacity(ROUND_TRIPS as usize);
    for i in 0..ROUND_TRIPS {
        let start = Instant::now();
        let echo = async {
            let (got, buf) = b.ep.trecv(vec![0u8; 8], 1, 0).await;
            got?;
            let (sent, _) = b.ep.tsend(to_a, 2, buf).await;
            sent.map(|_| ())
        };
        let ask = async {
            let answer = a.ep.trecv(vec![0u8; 8], 2, 0);
            let (sent, _) = a.ep.tsend(to_b, 1, i.to_le_bytes().to_vec()).await;
            sent?;
            let (got, buf) = answer.await;
            got.map(|_| buf)
        };
        let (echoed, asked) = futures::executor::block_on(futures::future::join(echo, ask));
        echoed.map_err(err)?;
        let back = asked.map_err(err)?;
        samples.push(start.elapsed());
        if back.as_slice() != i.to_le_bytes() {
            return Err(format!("round trip {i} came back as {:?}", back.as_slice()));
        }
    }
    samples.sort();
    Ok(samples[samples.len() / 2])
}

fn run() -> Result<(), String> {
    let psm = PsmConfig::builder_from_env()
        .and_then(|b| b.name_server(false).delay(Duration::ZERO).build())
        .map_err(|e| e.to_string())?;
    let mrail = MrailConfig::from_env().map_err(|e| e.to_string())?;
    println!("{psm}");
    println!("{mrail}");
    for (label, progress) in [
        ("manual progress", ProgressKind::Manual),
        ("auto progress", ProgressKind::Auto),
    ] {
        let a = open(&psm, progress).map_err(|e| format!("{label}: {e}"))?;
        let b = open(&psm, progress).map_err(|e| format!("{label}: {e}"))?;
        let median = ping_pong(&a, &b).map_err(|e| format!("{label}: {e}"))?;
        let stats = a.domain.stats();
        println!(
            "{label:<16} {} <-> {}: 8 B round trip, {ROUND_TRIPS} times, every byte checked: \
             median {median:.2?} ({} messages sent by one side)",
            a.ep.getname(),
            b.ep.getname(),
            stats.msgs_sent,
        );
    }
    Ok(())
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
