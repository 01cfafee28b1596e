//! Conformance of the public operations API (`src/ops/`), in one process
//! on the soft engine, over {manual, auto} progress and {MQ, AM} untagged
//! paths.

#[path = "support/fabric.rs"]
mod fabric;

use fabric::Cfg;
use psmrail::fabric::Caps;

#[test]
fn helper_smoke() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, Caps::MSG | Caps::TAGGED, 2);
        let r = n[1].ep.trecv(vec![0u8; 5], 7, 0);
        let s = n[0].ep.tsend(n.addr(0, 1), 7, b"hello".to_vec());
        let ((sent, _), (got, buf)) = n.drive(async { futures::join!(s, r) });
        sent.unwrap();
        assert_eq!(got.unwrap().len, 5);
        assert_eq!(buf.as_slice(), b"hello");
    }
}
