//! The soft engine's shared-memory path through the public API: endpoints
//! of one host report their links on it in `Endpoint::stats`, and the
//! soft configuration's switch keeps them on their sockets. (The engine's
//! own tests cover the exchange, hostile segments and sleeping peers:
//! `src/engine/soft/shm_tests.rs`, `tests/engine_soft.rs`.)

mod support;

use psmrail::engine::soft::SoftConfig;
use psmrail::fabric::Caps;
use support::fabric::{hints, open_info, Cfg};

fn exchange(shared_memory: bool) -> (Option<u64>, Option<u64>) {
    let mut h = hints(Cfg::MANUAL_MQ, Caps::TAGGED);
    if !shared_memory {
        h = h.soft_config(SoftConfig {
            shared_memory: false,
            ..SoftConfig::default()
        });
    }
    let info = psmrail::fabric::getinfo(Some(&h)).unwrap().remove(0);
    let nodes = open_info(Cfg::MANUAL_MQ, info, 2, |_, _, b| b);
    for size in [8usize, 70_000, 3 << 20] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
        let recv = nodes[1].ep.trecv(vec![0u8; size], 5, 0);
        let send = nodes[0].ep.tsend(nodes.addr(0, 1), 5, data.clone());
        let ((got, buf), (sent, _)) = nodes.drive(futures::future::join(recv, send));
        assert_eq!(got.unwrap().len, size);
        assert!(buf.as_slice() == &data[..], "{size} B: bytes differ");
        sent.unwrap();
    }
    (nodes[0].ep.stats().shm_links, nodes[1].ep.stats().shm_links)
}

#[test]
fn endpoints_of_one_host_report_their_shared_memory_links() {
    let (a, b) = exchange(true);
    assert!(a >= Some(1) && b >= Some(1), "{a:?} {b:?}");
}

#[test]
fn the_switch_keeps_links_on_their_sockets() {
    assert_eq!(exchange(false), (Some(0), Some(0)));
}
