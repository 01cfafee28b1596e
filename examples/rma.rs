//! RMA and atomics through the public API: a region registered for remote
//! access, written, read back and counted into with an atomic sum.
//!
//! ```sh
//! cargo run --example rma
//! PSM2_DEVICES=self,shm cargo run --example rma -- native
//! ```
//!
//! The endpoint targets its own domain's region, which keeps the example
//! to one process; between processes the initiator inserts the target's
//! address and learns its key (`mr.key()`) out of band, nothing else
//! changes.

use psmrail::config::PsmConfig;
use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
use psmrail::ops::atomic::{AtomicDatatype, AtomicOp};
use std::time::Duration;

fn main() -> psmrail::Result<()> {
    let engine = match std::env::args().nth(1).as_deref() {
        Some("native") => EngineChoice::Native,
        _ => EngineChoice::Soft,
    };
    let config = PsmConfig::builder_from_env()?
        .name_server(false)
        .delay(Duration::ZERO)
        .build()?;
    let hints = Hints::new()
        .caps(Caps::RMA | Caps::ATOMIC)
        .engine(engine)
        .config(config);
    let info = getinfo(Some(&hints))?.remove(0);
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let av = domain.av(AvAttr::new())?;
    let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    let target = av.insert(&[ep.getname()]).remove(0)?;

    // 4 KiB exposed to peers for reads, writes and atomics.
    let access = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mr = domain.register(vec![0u8; 4096], access, None)?;
    let key = mr.key();

    domain.reactor().block_on(async {
        // fi_write, then fi_read of the same bytes.
        let (written, _) = ep.write(target, b"hello, region".to_vec(), 100, key).await;
        written?;
        let (read, back) = ep.read(target, vec![0u8; 13], 100, key).await;
        read?;
        println!("read back: {:?}", String::from_utf8_lossy(back.as_slice()));

        // fi_fetch_atomic: add 5 to the u64 at offset 0, ten times; each
        // call returns the value before its sum.
        for _ in 0..10 {
            let five = 5u64.to_ne_bytes();
            let (done, old) = ep
                .fetch_atomic(
                    target,
                    AtomicOp::Sum,
                    AtomicDatatype::Uint64,
                    &five,
                    vec![0u8; 8],
                    0,
                    key,
                )
                .await;
            done?;
            let old = u64::from_ne_bytes(old.as_slice().try_into().expect("one u64"));
            print!("{old} ");
        }
        println!();
        Ok::<_, psmrail::Error>(())
    })?;

    // The target sees it in its own memory.
    let mut sum = [0u8; 8];
    mr.read_at(0, &mut sum)?;
    println!("the region's counter: {}", u64::from_ne_bytes(sum));
    assert_eq!(u64::from_ne_bytes(sum), 50);
    Ok(())
}
