//! What the public operations API costs on top of the engine, measured on
//! an endpoint talking to itself (no peer process, no network): a tagged
//! receive posted, an 8-byte message injected to the endpoint's own
//! address, the receive awaited. Run with the native engine
//! (`PSM2_DEVICES=self,shm`, when libpsm loads) and the soft engine.
//!
//! ```text
//! PSM2_DEVICES=self,shm cargo bench --bench ops
//! ```

use criterion::{criterion_group, criterion_main, Criterion};
use psmrail::config::PsmConfig;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
use std::time::Duration;

fn self_loop(c: &mut Criterion, engine: EngineChoice, name: &str) {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .build()
        .expect("config");
    let hints = Hints::new()
        .caps(Caps::TAGGED | Caps::MSG)
        .engine(engine)
        .config(config);
    let Ok(mut infos) = getinfo(Some(&hints)) else {
        eprintln!("{name}: engine not available, skipped");
        return;
    };
    let info = infos.remove(0);
    let fabric = Fabric::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let av = domain.av(AvAttr::new()).expect("av");
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .expect("endpoint");
    let me = av.insert(&[ep.getname()]).remove(0).expect("self insert");
    let mut buf = Some(OpBuffer::from(vec![0u8; 8]));
    let data = [7u8; 8];
    c.bench_function(&format!("{name}/trecv+tinject+await 8 B to self"), |b| {
        b.iter(|| {
            let r = ep.trecv(buf.take().expect("buffer"), 5, 0);
            ep.tinject(me, 5, &data).expect("tinject");
            let (res, back) = futures::executor::block_on(r);
            res.expect("trecv");
            buf = Some(back);
        })
    });
    c.bench_function(&format!("{name}/trecv posted then cancelled"), |b| {
        b.iter(|| {
            let r = ep.trecv(buf.take().expect("buffer"), 6, 0);
            assert!(r.cancel());
            let (res, back) = futures::executor::block_on(r);
            assert!(res.is_err());
            buf = Some(back);
        })
    });
    drop(ep);
    domain.close().expect("close");
}

fn ops(c: &mut Criterion) {
    self_loop(c, EngineChoice::Native, "native");
    self_loop(c, EngineChoice::Soft, "soft");
}

criterion_group!(benches, ops);
criterion_main!(benches);
