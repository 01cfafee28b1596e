//! Dropping (and forgetting) operation futures at every point, in both
//! progress modes and on both untagged paths: no message is lost that the
//! contract keeps, no buffer is freed under the engine, nothing hangs.

mod support;
use support::{fabric, payload};

use fabric::{poll_once, Cfg, Nodes};
use futures::StreamExt;
use payload::pattern;
use psmrail::config::PsmConfig;
use psmrail::fabric::{getinfo, Caps};
use psmrail::ops::MultiRecvBuffer;
use std::time::{Duration, Instant};

const CAPS: Caps = Caps::MSG.union(Caps::TAGGED);

/// Sends `data` with `tag` from node 0 and receives it at node 1 with a new
/// receive, checking every byte.
fn exchange(n: &Nodes, tag: u64, data: &[u8]) {
    let r = n[1].ep.trecv(vec![0u8; data.len()], tag, 0);
    let s = n[0].ep.tsend(n.addr(0, 1), tag, data.to_vec());
    let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
    s.unwrap();
    assert_eq!(g.unwrap().len, data.len());
    assert!(b.as_slice() == data, "{:?}: bytes differ", n.cfg);
}

/// Progress for a while so that what is on the wire arrives.
fn settle(n: &Nodes) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(20) {
        n.progress();
        std::thread::yield_now();
    }
}

#[test]
fn drop_recv_before_any_message_loses_nothing() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        drop(n[1].ep.recv(vec![0u8; 8]));
        drop(n[1].ep.trecv(vec![0u8; 8], 1, 0));
        let s = n[0].ep.send(n.addr(0, 1), b"untagged".to_vec());
        let r = n[1].ep.recv(vec![0u8; 8]);
        let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        assert_eq!(g.unwrap().len, 8, "{cfg:?}");
        assert_eq!(b.as_slice(), b"untagged");
        exchange(&n, 1, b"tagged");
    }
}

#[test]
fn drop_recv_after_arrival_before_polling() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        for len in [16, 1 << 20] {
            let r = n[1].ep.trecv(vec![0u8; len], 7, 0);
            let s = n[0].ep.tsend(n.addr(0, 1), 7, pattern(len, 1));
            // The send completes once the receiver has the message (or the
            // engine copied it); progress both sides, never polling `r`.
            let (s, _) = n.drive(s);
            s.unwrap();
            settle(&n);
            drop(r);
            // The endpoint still works, and a later message is intact.
            exchange(&n, 8, &pattern(len, 2));
        }
        let r = n[1].ep.recv(vec![0u8; 16]);
        let (s, _) = n.drive(n[0].ep.send(n.addr(0, 1), pattern(16, 3)));
        s.unwrap();
        settle(&n);
        drop(r);
        let r = n[1].ep.recv(vec![0u8; 16]);
        let s = n[0].ep.send(n.addr(0, 1), pattern(16, 4));
        let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        g.unwrap();
        // The dropped receive had matched the first message (it was
        // posted first), so the second one is next.
        assert_eq!(b.as_slice(), &pattern(16, 4)[..], "{cfg:?}");
    }
}

#[test]
fn drop_send_immediately_still_delivers() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        for len in [0, 100, 1 << 20] {
            drop(n[0].ep.tsend(n.addr(0, 1), 3, pattern(len, 5)));
            let (g, b) = n.drive(n[1].ep.trecv(vec![0u8; len], 3, 0));
            assert_eq!(g.unwrap().len, len, "{cfg:?}");
            assert!(b.as_slice() == &pattern(len, 5)[..], "{cfg:?} {len}");
            drop(n[0].ep.send(n.addr(0, 1), pattern(len, 6)));
            let (g, b) = n.drive(n[1].ep.recv(vec![0u8; len]));
            assert_eq!(g.unwrap().len, len, "{cfg:?}");
            assert!(b.as_slice() == &pattern(len, 6)[..], "{cfg:?} {len}");
        }
    }
}

#[test]
fn forget_send_and_recv() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        // A forgotten send still arrives intact.
        std::mem::forget(n[0].ep.tsend(n.addr(0, 1), 4, pattern(1 << 20, 7)));
        let (g, b) = n.drive(n[1].ep.trecv(vec![0u8; 1 << 20], 4, 0));
        g.unwrap();
        assert!(b.as_slice() == &pattern(1 << 20, 7)[..], "{cfg:?}");
        // A forgotten receive still takes its message: the sender completes.
        std::mem::forget(n[1].ep.trecv(vec![0u8; 1 << 20], 5, 0));
        let (s, _) = n.drive(n[0].ep.tsend(n.addr(0, 1), 5, pattern(1 << 20, 8)));
        s.unwrap();
        std::mem::forget(n[1].ep.recv(vec![0u8; 64]));
        let (s, _) = n.drive(n[0].ep.send(n.addr(0, 1), pattern(64, 9)));
        s.unwrap();
        exchange(&n, 6, b"still fine");
    }
}

#[test]
fn drop_multi_recv_mid_stream() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, Caps::MSG | Caps::MULTI_RECV, 2);
        let mut stream = n[1].ep.multi_recv(MultiRecvBuffer::new(4096)).unwrap();
        let (s, _) = n.drive(n[0].ep.send(n.addr(0, 1), pattern(100, 1)));
        s.unwrap();
        let ev = n.drive(stream.next()).unwrap().unwrap();
        assert_eq!(ev.data(), &pattern(100, 1)[..]);
        drop(stream);
        // The event keeps the block alive and readable.
        assert_eq!(ev.data(), &pattern(100, 1)[..], "{cfg:?}");
        drop(ev);
        // The receive over the rest was cancelled: a new receive gets the
        // next message.
        let r = n[1].ep.recv(vec![0u8; 50]);
        let s = n[0].ep.send(n.addr(0, 1), pattern(50, 2));
        let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        g.unwrap();
        assert_eq!(b.as_slice(), &pattern(50, 2)[..], "{cfg:?}");
    }
}

#[test]
fn poll_once_then_drop() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, CAPS, 2);
        let mut r = n[1].ep.trecv(vec![0u8; 8], 1, 0);
        assert!(poll_once(&mut r).is_pending(), "{cfg:?}: nothing sent yet");
        drop(r);
        let mut r = n[1].ep.recv(vec![0u8; 8]);
        assert!(poll_once(&mut r).is_pending());
        drop(r);
        let mut s = n[0].ep.tsend(n.addr(0, 1), 1, pattern(1 << 20, 3));
        let _ = poll_once(&mut s);
        drop(s);
        let (g, b) = n.drive(n[1].ep.trecv(vec![0u8; 1 << 20], 1, 0));
        g.unwrap();
        assert!(b.as_slice() == &pattern(1 << 20, 3)[..], "{cfg:?}");
        // With futures::poll! inside an async block too.
        let r = n[1].ep.recv(vec![0u8; 8]);
        n.drive(async {
            let mut r = r;
            assert!(futures::poll!(&mut r).is_pending());
        });
        let r = n[1].ep.recv(vec![0u8; 4]);
        let s = n[0].ep.send(n.addr(0, 1), b"last".to_vec());
        let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        g.unwrap();
        assert_eq!(b.as_slice(), b"last", "{cfg:?}");
    }
}

/// Nodes whose domains close gracefully within 5 s when dropped.
fn graceful(cfg: Cfg) -> Nodes {
    let config = PsmConfig::builder()
        .name_server(false)
        .am_msg(cfg.am_msg)
        .delay(Duration::ZERO)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let info = getinfo(Some(&fabric::hints(cfg, CAPS).config(config)))
        .unwrap()
        .remove(0);
    fabric::open_info(cfg, info, 2, |_, _, b| b)
}

/// An endpoint keeps its domain alive: with every other handle (fabric,
/// domains, AVs) dropped, operations still run. The sender's endpoint is
/// the last handle of its domain and is dropped inside the join, right
/// after its send completes, while the receive may still be pending: the
/// domain then closes (gracefully) under the receive.
fn handles_dropped(cfg: Cfg, len: usize) {
    let n = graceful(cfg);
    let to = n.addr(0, 1);
    let Nodes { nodes, fabric, .. } = n;
    drop(fabric);
    let mut eps = nodes.into_iter().map(|node| node.ep);
    let (Some(sender), Some(receiver)) = (eps.next(), eps.next()) else {
        unreachable!("two nodes were opened")
    };
    let r = receiver.trecv(vec![0u8; len], 2, 0);
    let send = async move {
        let out = sender.tsend(to, 2, pattern(len, 4)).await;
        drop(sender);
        out
    };
    let ((s, _), (g, b)) = futures::executor::block_on(async { futures::join!(send, r) });
    s.unwrap();
    g.unwrap_or_else(|e| panic!("{cfg:?} {len}: {e}"));
    assert!(b.as_slice() == &pattern(len, 4)[..], "{cfg:?}");
}

#[test]
fn handles_dropped_while_ops_pending_auto() {
    for cfg in [Cfg::AUTO_MQ, Cfg::AUTO_AM] {
        for len in [64, 1 << 20] {
            handles_dropped(cfg, len);
        }
    }
}

#[test]
fn handles_dropped_while_ops_pending_manual() {
    for _ in 0..10 {
        for cfg in [Cfg::MANUAL_MQ, Cfg::MANUAL_AM] {
            for len in [64, 1 << 20] {
                handles_dropped(cfg, len);
            }
        }
    }
}

#[test]
fn close_while_ops_pending() {
    for cfg in Cfg::ALL {
        // Explicit close with a pending receive and a pending large send
        // (no receive posted for it): polling afterwards neither hangs
        // nor crashes; dropping the futures is fine.
        let n = fabric::open(cfg, CAPS, 2);
        let mut r = n[1].ep.trecv(vec![0u8; 64], 9, 0);
        let mut s = n[0].ep.tsend(n.addr(0, 1), 10, pattern(1 << 20, 5));
        let mut ru = n[1].ep.recv(vec![0u8; 64]);
        let _ = poll_once(&mut s);
        n[1].ep.clone().close().unwrap();
        for node in &n.nodes {
            node.domain.clone().close().unwrap();
        }
        for _ in 0..3 {
            if poll_once(&mut r).is_ready() {
                break;
            }
        }
        let _ = poll_once(&mut ru);
        let _ = poll_once(&mut s);
        drop((r, s, ru));
        // New operations on a closed endpoint fail at once.
    }
}

#[test]
fn drop_everything_pending() {
    for cfg in Cfg::ALL {
        // Operations borrow their endpoint, so they go before it; every
        // other handle (fabric, domains, AVs) goes first.
        let n = fabric::open(cfg, CAPS, 2);
        let to = n.addr(0, 1);
        let Nodes { nodes, fabric, .. } = n;
        drop(fabric);
        let eps: Vec<_> = nodes.into_iter().map(|node| node.ep).collect();
        let r = eps[1].trecv(vec![0u8; 64], 9, 0);
        let s = eps[0].tsend(to, 10, pattern(1 << 20, 5));
        let m = eps[1].recv(vec![0u8; 64]);
        drop(s);
        drop(r);
        drop(m);
        drop(eps);
    }
}
