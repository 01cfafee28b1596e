//! The same small exchange (tsend/trecv and send/recv) under every
//! executor the ops are meant for, in manual and auto progress: the
//! futures depend on no particular runtime.

mod support;
use support::{fabric, payload};

use fabric::{Cfg, Nodes};
use payload::pattern;
use psmrail::fabric::Caps;

const CAPS: Caps = Caps::MSG.union(Caps::TAGGED);

/// The exchange as one future: both sides' operations are polled by the
/// same task, which in manual mode makes progress on both domains.
async fn exchange(n: &Nodes, round: u8) {
    let big = pattern(256 << 10, u64::from(round));
    let rt = n[1].ep.trecv(vec![0u8; big.len()], 0x10 + round as u64, 0);
    let st = n[0]
        .ep
        .tsend(n.addr(0, 1), 0x10 + round as u64, big.clone());
    let ru = n[0].ep.recv(vec![0u8; 5]);
    let su = n[1].ep.send(n.addr(1, 0), b"hello".to_vec());
    let ((st, _), (rt, bt), (su, _), (ru, bu)) = futures::join!(st, rt, su, ru);
    st.unwrap();
    su.unwrap();
    let rt = rt.unwrap();
    assert_eq!(
        (rt.len, rt.tag, rt.source),
        (big.len(), 0x10 + round as u64, n.addr(1, 0))
    );
    assert!(
        bt.as_slice() == &big[..],
        "{:?}: tagged bytes differ",
        n.cfg
    );
    assert_eq!(ru.unwrap().source, n.addr(0, 1));
    assert_eq!(bu.as_slice(), b"hello");
}

#[test]
fn futures_executor() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        for round in 0..3 {
            futures::executor::block_on(exchange(&n, round));
        }
    }
}

#[test]
fn tokio_current_thread() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for round in 0..3 {
            rt.block_on(exchange(&n, round));
        }
    }
}

#[test]
fn tokio_multi_thread_spawned_sides() {
    for cfg in Cfg::ALL {
        let n = std::sync::Arc::new(fabric::open(cfg, CAPS, 2));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            for round in 0..3u8 {
                // The receiver and the sender run as separate tasks.
                let tag = 0x40 + round as u64;
                let data = pattern(64 << 10, u64::from(round));
                let nr = n.clone();
                let recv = tokio::spawn(async move {
                    let (g, b) = nr[1].ep.trecv(vec![0u8; 64 << 10], tag, 0).await;
                    (g.unwrap(), b.into_vec().unwrap())
                });
                let ns = n.clone();
                let d = data.clone();
                let send = tokio::spawn(async move {
                    let (s, _) = ns[0].ep.tsend(ns.addr(0, 1), tag, d).await;
                    s.unwrap()
                });
                let (g, b) = recv.await.unwrap();
                send.await.unwrap();
                assert_eq!(g.tag, tag);
                assert!(b == data, "{cfg:?}: bytes differ");
                exchange(&n, round).await;
            }
        });
    }
}

#[test]
fn reactor_block_on() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        let reactor = n[0].domain.reactor().clone();
        for round in 0..3 {
            reactor.block_on(exchange(&n, round));
        }
    }
}
