//! Quick end-to-end checks of the public API on the soft engine, in one
//! process (the full suite lives in tests/ops_*.rs).

use psmrail::engine::OpBuffer;
use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};

#[test]
fn tagged_round_trip_soft() {
    let hints = Hints::new()
        .caps(Caps::TAGGED | Caps::MSG)
        .engine(EngineChoice::Soft);
    let info = getinfo(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::open(&info).unwrap();
    let da = fabric.domain(&info).unwrap();
    let db = fabric.domain(&info).unwrap();
    let ava = da.av(AvAttr::new()).unwrap();
    let avb = db.av(AvAttr::new()).unwrap();
    let a = da.endpoint(&info).bind_av(&ava).enable().unwrap();
    let b = db.endpoint(&info).bind_av(&avb).enable().unwrap();
    let (pb, _pa) = std::thread::scope(|s| {
        let t = s.spawn(|| avb.insert(&[a.getname()]).remove(0).unwrap());
        let pb = ava.insert(&[b.getname()]).remove(0).unwrap();
        (pb, t.join().unwrap())
    });
    let r = b.trecv(vec![0u8; 16], 0x1234, 0);
    let s = a.tsend(pb, 0x1234, b"hello".to_vec());
    let reactor = da.reactor().clone();
    let (sent, _) = std::thread::scope(|sc| {
        let rb = db.reactor().clone();
        let t = sc.spawn(move || rb.block_on(r));
        let sent = reactor.block_on(s);
        (sent, t.join().unwrap())
    });
    assert!(sent.0.is_ok());
    let _ = OpBuffer::empty();
}
