//! Auto progress with a pinned progress thread: operations complete while
//! the application's thread sleeps, and the thread sits on the CPUs that
//! `FI_PSM_PROG_AFFINITY` names.
//!
//! ```sh
//! cargo run --example auto_progress                       # the last CPU, every 10 µs
//! FI_PSM_PROG_AFFINITY=0 FI_PSM_PROG_INTERVAL=1000 cargo run --example auto_progress
//! ```
//!
//! The configuration starts from the environment and sets what is unset
//! there: the progress thread on the last CPU (`-1`), a round every 10 µs.
//! Two endpoints of the soft engine exchange messages; the receiving task
//! is awaited by `futures::executor::block_on`, which parks its thread
//! until the progress thread completes the receive and wakes it.

use psmrail::config::{AffinitySpec, PsmConfig};
use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, ProgressKind};
use std::time::{Duration, Instant};

fn main() -> psmrail::Result<()> {
    let from_env = PsmConfig::from_env()?;
    let mut builder = PsmConfig::builder_from_env()?
        .name_server(false)
        .delay(Duration::ZERO);
    if from_env.prog_affinity_spec().is_none() {
        builder = builder.prog_affinity(Some("-1".parse::<AffinitySpec>()?));
    }
    if from_env.prog_interval_setting().is_none() {
        builder = builder.prog_interval(Some(Duration::from_micros(10)));
    }
    let config = builder.build()?;
    println!(
        "progress thread: CPUs {:?} ({:?}), a round every {:?}",
        config.prog_affinity(),
        config.prog_affinity_spec().map(ToString::to_string),
        config.prog_interval()
    );
    let hints = Hints::new()
        .caps(Caps::TAGGED)
        .engine(EngineChoice::Soft)
        .progress(ProgressKind::Auto)
        .config(config);
    let info = getinfo(Some(&hints))?.remove(0);
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    if let Some(t) = domain.reactor().auto_thread() {
        println!(
            "thread {} pinned to {:?}, waiting by {:?}",
            t.tid, t.affinity, t.strategy
        );
    }
    let av = domain.av(AvAttr::new())?;
    let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    let me = av.insert(&[ep.getname()]).remove(0)?;

    // A receive posted now completes on the progress thread while this
    // thread sleeps; awaiting it afterwards finds it done.
    let pending = ep.trecv(vec![0u8; 32], 9, 0);
    ep.tinject(me, 9, b"done while asleep")?;
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    let (got, buf) = futures::executor::block_on(pending);
    let len = got?.len;
    println!(
        "{:?} was waiting, taken in {:?}",
        String::from_utf8_lossy(&buf.as_slice()[..len]),
        start.elapsed()
    );

    // 1000 round trips to itself, each awaited by a parked thread.
    let start = Instant::now();
    for i in 0..1000u32 {
        let recv = ep.trecv(vec![0u8; 4], 1, 0);
        ep.tinject(me, 1, &i.to_le_bytes())?;
        let (got, buf) = futures::executor::block_on(recv);
        got?;
        assert_eq!(buf.as_slice(), i.to_le_bytes());
    }
    println!("1000 messages to itself: {:?} each", start.elapsed() / 1000);
    Ok(())
}
