//! Conformance of the public operations API (`src/ops/`): one process, the
//! soft engine, every test over {manual, auto} progress and, where
//! untagged messages are involved, the {MQ, AM} paths.

mod support;
use support::{fabric, payload};

use fabric::{Cfg, Nodes};
use futures::StreamExt;
use payload::pattern;
use psmrail::fabric::{
    Caps, CompletionFlags, CompletionQueue, CounterAttr, CounterBind, CqAttr, CqBind, CqEntry,
    FiAddr, INJECT_SIZE, MSG_BIT,
};
use psmrail::ops::{MultiRecvBuffer, PeekFlags};
use psmrail::ErrorKind;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [0, 1, 8 << 10, 1 << 20];
const ALL_MSG: Caps = Caps::MSG.union(Caps::TAGGED);

/// Repeats `step` (which should make progress) until `done` holds.
fn until(n: &Nodes, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        n.progress();
        std::thread::sleep(Duration::from_micros(if n.cfg.is_manual() {
            0
        } else {
            200
        }));
        assert!(start.elapsed() < fabric::HANG_LIMIT, "until: hung");
    }
}

#[test]
fn send_recv_sizes_both_orders() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, ALL_MSG, 2);
        for (i, &len) in SIZES.iter().enumerate() {
            let data = pattern(len, i as u64);
            // Receive posted before the send.
            let r = n[1].ep.recv(vec![0u8; len]);
            let s = n[0].ep.send(n.addr(0, 1), data.clone());
            let ((sent, sbuf), (got, rbuf)) = n.drive(async { futures::join!(s, r) });
            assert_eq!(sent.unwrap().len, len, "{cfg:?}");
            assert_eq!(sbuf.as_slice(), &data[..], "send buffer handed back");
            let got = got.unwrap();
            assert_eq!((got.len, got.tag), (len, 0), "{cfg:?} {len}");
            assert_eq!(got.source, n.addr(1, 0), "{cfg:?}: source");
            assert!(rbuf.as_slice() == &data[..], "{cfg:?} {len}: bytes differ");
            // Receive posted after the send.
            let data = pattern(len, 100 + i as u64);
            let s = n[0].ep.send(n.addr(0, 1), data.clone());
            let r = n[1].ep.recv(vec![0u8; len]);
            let ((sent, _), (got, rbuf)) = n.drive(async { futures::join!(s, r) });
            sent.unwrap();
            assert_eq!(got.unwrap().len, len);
            assert!(
                rbuf.as_slice() == &data[..],
                "{cfg:?} {len}: bytes differ (late recv)"
            );
        }
    }
}

#[test]
fn tsend_trecv_sizes_both_orders() {
    for cfg in Cfg::PROGRESS {
        let n = fabric::open(cfg, ALL_MSG, 2);
        for (i, &len) in SIZES.iter().enumerate() {
            let tag = 0x1000 + i as u64;
            let data = pattern(len, i as u64);
            let r = n[1].ep.trecv(vec![0u8; len], tag, 0);
            let s = n[0].ep.tsend(n.addr(0, 1), tag, data.clone());
            let ((sent, _), (got, rbuf)) = n.drive(async { futures::join!(s, r) });
            assert_eq!(sent.unwrap().len, len);
            let got = got.unwrap();
            assert_eq!(
                (got.len, got.tag, got.source),
                (len, tag, n.addr(1, 0)),
                "{cfg:?}"
            );
            assert!(rbuf.as_slice() == &data[..], "{cfg:?} {len}");
            let data = pattern(len, 50 + i as u64);
            let s = n[0].ep.tsend(n.addr(0, 1), tag, data.clone());
            let r = n[1].ep.trecv(vec![0u8; len], tag, 0);
            let ((sent, _), (got, rbuf)) = n.drive(async { futures::join!(s, r) });
            sent.unwrap();
            assert_eq!(got.unwrap().tag, tag);
            assert!(rbuf.as_slice() == &data[..], "{cfg:?} {len} (late trecv)");
        }
    }
}

#[test]
fn tag_and_ignore_wildcards() {
    for cfg in Cfg::PROGRESS {
        let n = fabric::open(cfg, ALL_MSG, 2);
        // Only the low byte matters for the first receive; any tag for the
        // second; an exact tag for the third.
        let r_low = n[1].ep.trecv(vec![0u8; 8], 0x42, !0xff);
        let r_exact = n[1].ep.trecv(vec![0u8; 8], 0x7777, 0);
        let s1 = n[0].ep.tsend(n.addr(0, 1), 0x7777, b"exact".to_vec());
        let s2 = n[0].ep.tsend(n.addr(0, 1), 0xab42, b"low".to_vec());
        let ((a, _), (b, _), (g_low, b_low), (g_exact, b_exact)) =
            n.drive(async { futures::join!(s1, s2, r_low, r_exact) });
        a.unwrap();
        b.unwrap();
        let g_low = g_low.unwrap();
        assert_eq!(g_low.tag, 0xab42, "{cfg:?}: the full tag is reported");
        assert_eq!(&b_low.as_slice()[..g_low.len], b"low");
        assert_eq!(g_exact.unwrap().tag, 0x7777);
        assert_eq!(&b_exact.as_slice()[..5], b"exact");
        // ignore = all bits: matches anything.
        let r_any = n[1].ep.trecv(vec![0u8; 8], 0, u64::MAX);
        let s = n[0].ep.tsend(n.addr(0, 1), 0x1234_5678, b"any".to_vec());
        let ((s, _), (g, _)) = n.drive(async { futures::join!(s, r_any) });
        s.unwrap();
        assert_eq!(g.unwrap().tag, 0x1234_5678);
    }
}

#[test]
fn tagged_and_untagged_never_mix() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, ALL_MSG, 2);
        // A wildcard tagged receive and an untagged receive, both posted;
        // the untagged message is sent first.
        let rt = n[1].ep.trecv(vec![0u8; 16], 0, u64::MAX);
        let ru = n[1].ep.recv(vec![0u8; 16]);
        let su = n[0].ep.send(n.addr(0, 1), b"untagged".to_vec());
        let st = n[0].ep.tsend(n.addr(0, 1), 5, b"tagged".to_vec());
        let ((a, _), (b, _), (gt, bt), (gu, bu)) =
            n.drive(async { futures::join!(su, st, rt, ru) });
        a.unwrap();
        b.unwrap();
        assert_eq!(&bt.as_slice()[..gt.unwrap().len], b"tagged", "{cfg:?}");
        assert_eq!(&bu.as_slice()[..gu.unwrap().len], b"untagged", "{cfg:?}");
    }
}

#[test]
fn recv_from_directed() {
    let caps = Caps::MSG | Caps::DIRECTED_RECV;
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, caps, 3);
        // Node 0 receives from node 2 only; node 1 sends first.
        let r = n[0].ep.recv_from(n.addr(0, 2), vec![0u8; 8]);
        let s1 = n[1].ep.send(n.addr(1, 0), b"from1".to_vec());
        let s1 = n.drive(s1);
        s1.0.unwrap();
        let s2 = n[2].ep.send(n.addr(2, 0), b"from2".to_vec());
        let ((s2, _), (g, b)) = n.drive(async { futures::join!(s2, r) });
        s2.unwrap();
        let g = g.unwrap();
        assert_eq!(g.source, n.addr(0, 2), "{cfg:?}");
        assert_eq!(
            &b.as_slice()[..g.len],
            b"from2",
            "{cfg:?}: directed receive took another sender's message"
        );
        // Node 1's message is still there for an open receive.
        let (g, b) = n.drive(n[0].ep.recv(vec![0u8; 8]));
        let g = g.unwrap();
        assert_eq!(g.source, n.addr(0, 1));
        assert_eq!(&b.as_slice()[..g.len], b"from1");
    }
}

#[test]
fn recv_from_without_directed_recv_is_opnotsupp() {
    for cfg in [Cfg::MANUAL_MQ, Cfg::MANUAL_AM] {
        let n = fabric::open(cfg, ALL_MSG, 2);
        let (r, b) = n.drive(n[0].ep.recv_from(n.addr(0, 1), vec![0u8; 8]));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
        assert_eq!(b.len(), 8, "buffer handed back");
    }
}

#[test]
fn inject_and_tinject() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, ALL_MSG, 2);
        let mut data = pattern(INJECT_SIZE, 3);
        let expect = data.clone();
        n[0].ep.inject(n.addr(0, 1), &data).unwrap();
        data.fill(0xee); // reusable at once
        n[0].ep.tinject(n.addr(0, 1), 9, &expect[..10]).unwrap();
        let (g, b) = n.drive(n[1].ep.recv(vec![0u8; INJECT_SIZE]));
        assert_eq!(g.unwrap().len, INJECT_SIZE);
        assert_eq!(b.as_slice(), &expect[..], "{cfg:?}");
        let (g, b) = n.drive(n[1].ep.trecv(vec![0u8; 16], 9, 0));
        assert_eq!(g.unwrap().len, 10);
        assert_eq!(&b.as_slice()[..10], &expect[..10]);
        let big = vec![1u8; INJECT_SIZE + 1];
        assert_eq!(
            n[0].ep.inject(n.addr(0, 1), &big).unwrap_err().kind(),
            ErrorKind::MsgSize
        );
        assert_eq!(
            n[0].ep.tinject(n.addr(0, 1), 1, &big).unwrap_err().kind(),
            ErrorKind::MsgSize
        );
    }
}

#[test]
fn tpeek() {
    for cfg in Cfg::PROGRESS {
        let n = fabric::open(cfg, ALL_MSG, 2);
        assert_eq!(
            n[1].ep.tpeek(0, u64::MAX).unwrap(),
            None,
            "{cfg:?}: nothing queued"
        );
        let (s, _) = n.drive(n[0].ep.tsend(n.addr(0, 1), 0x55, pattern(300, 1)));
        s.unwrap();
        let mut found = None;
        until(&n, || {
            found = n[1].ep.tpeek(0x55, 0).unwrap();
            found.is_some()
        });
        let p = found.unwrap();
        assert_eq!((p.len, p.tag), (300, 0x55));
        assert_eq!(p.source, n.addr(1, 0));
        // A peek does not take the message; a non-matching peek sees nothing.
        assert_eq!(n[1].ep.tpeek(0x56, 0).unwrap(), None);
        assert!(n[1].ep.tpeek(0x55, 0).unwrap().is_some());
        for f in [PeekFlags::CLAIM, PeekFlags::DISCARD] {
            assert_eq!(
                n[1].ep.tpeek_with(0x55, 0, f).unwrap_err().kind(),
                ErrorKind::OpNotSupp
            );
        }
        let (g, b) = n.drive(n[1].ep.trecv(vec![0u8; 300], 0x55, 0));
        assert_eq!(g.unwrap().len, 300);
        assert!(b.as_slice() == &pattern(300, 1)[..]);
        assert_eq!(n[1].ep.tpeek(0x55, 0).unwrap(), None, "received: gone");
    }
}

#[test]
fn truncation() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, ALL_MSG, 2);
        for tagged in [false, true] {
            let data = pattern(100, 9);
            let (r, s) = if tagged {
                (
                    n[1].ep.trecv(vec![0u8; 40], 1, 0),
                    n[0].ep.tsend(n.addr(0, 1), 1, data.clone()),
                )
            } else {
                (
                    n[1].ep.recv(vec![0u8; 40]),
                    n[0].ep.send(n.addr(0, 1), data.clone()),
                )
            };
            let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
            s.unwrap();
            let e = g.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Trunc, "{cfg:?} tagged={tagged}");
            let t = e.truncation().expect("truncation lengths");
            assert_eq!(
                (t.msg_len, t.received),
                (100, 40),
                "{cfg:?} tagged={tagged}"
            );
            assert_eq!(
                b.as_slice(),
                &data[..40],
                "{cfg:?} tagged={tagged}: first bytes"
            );
        }
    }
}

#[test]
fn bad_input() {
    for cfg in [Cfg::MANUAL_MQ, Cfg::MANUAL_AM] {
        let n = fabric::open(cfg, ALL_MSG, 2);
        let ep = &n[0].ep;
        // Bit 63 is reserved exactly when untagged messages ride the MQ.
        let reserved = n[0].domain.reserved_tag_bits();
        if cfg.am_msg {
            assert_eq!(reserved, 0, "AM messages leave all 64 tag bits to the user");
        } else {
            assert_eq!(reserved, MSG_BIT);
            let (r, b) = n.drive(ep.tsend(n.addr(0, 1), MSG_BIT | 1, b"x".to_vec()));
            assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval, "reserved tag bit");
            assert_eq!(b.as_slice(), b"x");
            let e = ep.tinject(n.addr(0, 1), MSG_BIT, b"x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval);
        }
        let unknown = FiAddr(1000);
        let (r, _) = n.drive(ep.send(unknown, b"x".to_vec()));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval, "unknown address");
        let (r, _) = n.drive(ep.tsend(unknown, 1, b"x".to_vec()));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
        assert_eq!(
            ep.inject(unknown, b"x").unwrap_err().kind(),
            ErrorKind::Inval
        );
        // Read-only bytes cannot receive.
        let ro = bytes::Bytes::from_static(b"read only");
        let (r, b) = n.drive(ep.recv(ro.clone()));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
        assert_eq!(b.as_slice(), b"read only");
        let (r, _) = n.drive(ep.trecv(ro, 0, 0));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
    }
}

#[test]
fn ops_without_caps_are_opnotsupp() {
    for cfg in [Cfg::MANUAL_MQ, Cfg::MANUAL_AM] {
        // Node 0: MSG only; node 1: MSG | TAGGED | SEND (no RECV).
        let n = fabric::open_with(cfg, ALL_MSG, 2, |i, _, b| {
            b.caps(if i == 0 {
                Caps::MSG
            } else {
                ALL_MSG | Caps::SEND
            })
        });
        let (r, _) = n.drive(n[0].ep.tsend(n.addr(0, 1), 1, b"x".to_vec()));
        assert_eq!(
            r.unwrap_err().kind(),
            ErrorKind::OpNotSupp,
            "tsend on a MSG endpoint"
        );
        let (r, _) = n.drive(n[0].ep.trecv(vec![0u8; 1], 1, 0));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
        assert_eq!(
            n[0].ep.tinject(n.addr(0, 1), 1, b"x").unwrap_err().kind(),
            ErrorKind::OpNotSupp
        );
        assert_eq!(
            n[0].ep.tpeek(0, 0).unwrap_err().kind(),
            ErrorKind::OpNotSupp
        );
        let (r, _) = n.drive(n[1].ep.recv(vec![0u8; 1]));
        assert_eq!(
            r.unwrap_err().kind(),
            ErrorKind::OpNotSupp,
            "recv on a SEND endpoint"
        );
        let (r, _) = n.drive(n[1].ep.trecv(vec![0u8; 1], 0, 0));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
        // Sending still works there.
        let r0 = n[0].ep.recv(vec![0u8; 2]);
        let s = n[1].ep.send(n.addr(1, 0), b"ok".to_vec());
        let ((s, _), (g, _)) = n.drive(async { futures::join!(s, r0) });
        s.unwrap();
        assert_eq!(g.unwrap().len, 2);
    }
}

#[test]
fn multi_recv_fills_and_releases() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, Caps::MSG | Caps::MULTI_RECV, 2);
        n[1].ep.setopt_min_multi_recv(1024).unwrap();
        let mut stream = n[1].ep.multi_recv(MultiRecvBuffer::new(4096)).unwrap();
        let msgs: Vec<Vec<u8>> = [1000, 1000, 1000, 100]
            .iter()
            .enumerate()
            .map(|(i, &l)| pattern(l, i as u64))
            .collect();
        for m in &msgs {
            let (s, _) = n.drive(n[0].ep.send(n.addr(0, 1), m.clone()));
            s.unwrap();
        }
        let mut offset = 0;
        for (i, m) in msgs.iter().enumerate() {
            let ev = n.drive(stream.next()).expect("an event").unwrap();
            assert_eq!(
                (ev.offset(), ev.len()),
                (offset, m.len()),
                "{cfg:?} message {i}"
            );
            assert_eq!(ev.data(), &m[..], "{cfg:?} message {i}");
            assert_eq!(ev.source(), n.addr(1, 0));
            // 4096 - 3100 = 996 < 1024 after the fourth.
            assert_eq!(ev.released(), i == 3, "{cfg:?} message {i}");
            offset += m.len();
        }
        assert!(
            n.drive(stream.next()).is_none(),
            "{cfg:?}: the stream ends after release"
        );
        // Messages after the release go to ordinary receives.
        let r = n[1].ep.recv(vec![0u8; 4]);
        let s = n[0].ep.send(n.addr(0, 1), b"next".to_vec());
        let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        assert_eq!(g.unwrap().len, 4);
        assert_eq!(b.as_slice(), b"next");
    }
}

#[test]
fn multi_recv_cancel_and_caps() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, Caps::MSG | Caps::MULTI_RECV, 2);
        let mut stream = n[1].ep.multi_recv(MultiRecvBuffer::new(1024)).unwrap();
        assert!(stream.cancel(), "{cfg:?}: unmatched, cancellable");
        let e = n.drive(stream.next()).expect("the error").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Canceled);
        assert!(n.drive(stream.next()).is_none());
        let n = fabric::open(cfg, ALL_MSG, 2);
        let e = n[1].ep.multi_recv(MultiRecvBuffer::new(1024)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{cfg:?}");
    }
}

#[test]
fn recv_op_cancel() {
    for cfg in Cfg::ALL {
        let n = fabric::open(cfg, ALL_MSG, 2);
        for tagged in [false, true] {
            let r = if tagged {
                n[1].ep.trecv(vec![0u8; 8], 3, 0)
            } else {
                n[1].ep.recv(vec![0u8; 8])
            };
            assert!(r.cancel(), "{cfg:?}");
            let (g, b) = n.drive(r);
            assert_eq!(
                g.unwrap_err().kind(),
                ErrorKind::Canceled,
                "{cfg:?} tagged={tagged}"
            );
            assert_eq!(b.len(), 8);
            // Nothing lost: a message sent now reaches a new receive.
            let r = if tagged {
                n[1].ep.trecv(vec![0u8; 8], 3, 0)
            } else {
                n[1].ep.recv(vec![0u8; 8])
            };
            let s = if tagged {
                n[0].ep.tsend(n.addr(0, 1), 3, b"after".to_vec())
            } else {
                n[0].ep.send(n.addr(0, 1), b"after".to_vec())
            };
            let ((s, _), (g, b)) = n.drive(async { futures::join!(s, r) });
            s.unwrap();
            assert_eq!(&b.as_slice()[..g.unwrap().len], b"after");
        }
    }
}

/// Two nodes with one CQ each, bound for both directions.
fn with_cqs(cfg: Cfg, caps: Caps) -> (Nodes, Vec<CompletionQueue>) {
    let mut cqs = Vec::new();
    let n = fabric::open_with(cfg, caps, 2, |_, d, b| {
        let cq = d.cq(CqAttr::new()).unwrap();
        let b = b.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV);
        cqs.push(cq);
        b
    });
    (n, cqs)
}

/// The next entry of `cq` the way the mode wants it: `read` in a loop in
/// manual mode (progressing the peer too), `sread`/`next` in auto mode.
fn next_entry(n: &Nodes, cq: &CompletionQueue, use_next: bool) -> psmrail::Result<CqEntry> {
    if n.cfg.is_manual() {
        let start = Instant::now();
        loop {
            if let Some(e) = cq.read()? {
                return Ok(e);
            }
            n.progress();
            assert!(start.elapsed() < fabric::HANG_LIMIT);
        }
    } else if use_next {
        futures::executor::block_on(cq.next())
    } else {
        cq.sread(Some(fabric::HANG_LIMIT))
    }
}

#[test]
fn cq_route_entries() {
    for cfg in Cfg::ALL {
        let (n, cqs) = with_cqs(cfg, ALL_MSG);
        n[1].ep.post_trecv(vec![0u8; 8], 0x77, 0, 11).unwrap();
        n[0].ep
            .post_tsend(n.addr(0, 1), 0x77, b"tagged".to_vec(), 22)
            .unwrap();
        let e = next_entry(&n, &cqs[1], false).unwrap();
        assert_eq!(
            (e.context, e.len, e.tag, e.source),
            (11, 6, 0x77, n.addr(1, 0)),
            "{cfg:?}"
        );
        assert_eq!(e.flags, CompletionFlags::RECV | CompletionFlags::TAGGED);
        assert_eq!(&e.buffer.unwrap().as_slice()[..6], b"tagged");
        let e = next_entry(&n, &cqs[0], true).unwrap();
        assert_eq!((e.context, e.len), (22, 6), "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::SEND | CompletionFlags::TAGGED);
        assert_eq!(
            e.buffer.unwrap().as_slice(),
            b"tagged",
            "send buffer handed back"
        );

        n[1].ep.post_recv(vec![0u8; 8], 33).unwrap();
        n[0].ep
            .post_send(n.addr(0, 1), b"plain".to_vec(), 44)
            .unwrap();
        let e = next_entry(&n, &cqs[1], true).unwrap();
        assert_eq!(
            (e.context, e.len, e.tag, e.source),
            (33, 5, 0, n.addr(1, 0)),
            "{cfg:?}"
        );
        assert_eq!(e.flags, CompletionFlags::RECV | CompletionFlags::MSG);
        assert_eq!(&e.buffer.unwrap().as_slice()[..5], b"plain");
        let e = next_entry(&n, &cqs[0], false).unwrap();
        assert_eq!(
            (e.context, e.flags),
            (44, CompletionFlags::SEND | CompletionFlags::MSG)
        );
    }
}

#[test]
fn cq_error_entry_blocks_read_until_readerr() {
    for cfg in Cfg::ALL {
        let (n, cqs) = with_cqs(cfg, ALL_MSG);
        n[1].ep.post_recv(vec![0u8; 4], 1).unwrap();
        n[1].ep.post_recv(vec![0u8; 16], 2).unwrap();
        n[0].ep.post_send(n.addr(0, 1), pattern(10, 1), 3).unwrap();
        n[0].ep.post_send(n.addr(0, 1), b"abc".to_vec(), 4).unwrap();
        until(&n, || cqs[1].len() >= 2);
        for _ in 0..2 {
            assert_eq!(
                cqs[1].read().unwrap_err().kind(),
                ErrorKind::Avail,
                "{cfg:?}"
            );
        }
        let err = cqs[1].readerr().expect("the error entry");
        assert_eq!(err.context, 1);
        assert_eq!(err.error.kind(), ErrorKind::Trunc);
        assert_eq!((err.len, err.olen), (4, 6));
        assert_eq!(err.buffer.unwrap().as_slice(), &pattern(10, 1)[..4]);
        assert!(cqs[1].readerr().is_none(), "the head is a success now");
        let e = cqs[1].read().unwrap().expect("the second receive");
        assert_eq!((e.context, e.len), (2, 3));
        // Both sends succeeded.
        for ctx in [3, 4] {
            assert_eq!(next_entry(&n, &cqs[0], false).unwrap().context, ctx);
        }
    }
}

#[test]
fn cq_cancel() {
    for cfg in Cfg::ALL {
        let (n, cqs) = with_cqs(cfg, ALL_MSG);
        let posted = n[1].ep.post_trecv(vec![0u8; 8], 5, 0, 99).unwrap();
        assert!(n[1].ep.cancel(&posted).unwrap(), "{cfg:?}");
        until(&n, || !cqs[1].is_empty());
        assert_eq!(cqs[1].read().unwrap_err().kind(), ErrorKind::Avail);
        let err = cqs[1].readerr().unwrap();
        assert_eq!(
            (err.context, err.error.kind()),
            (99, ErrorKind::Canceled),
            "{cfg:?}"
        );
        assert_eq!(err.buffer.expect("buffer handed back").len(), 8);
        assert!(!n[1].ep.cancel(&posted).unwrap(), "second cancel: too late");
        let posted = n[1].ep.post_recv(vec![0u8; 8], 98).unwrap();
        assert!(n[1].ep.cancel(&posted).unwrap(), "{cfg:?}: untagged");
        until(&n, || !cqs[1].is_empty());
        assert_eq!(cqs[1].readerr().unwrap().error.kind(), ErrorKind::Canceled);
        let posted = n[0]
            .ep
            .post_tsend(n.addr(0, 1), 5, b"s".to_vec(), 7)
            .unwrap();
        assert_eq!(
            n[0].ep.cancel(&posted).unwrap_err().kind(),
            ErrorKind::OpNotSupp
        );
        assert_eq!(next_entry(&n, &cqs[0], false).unwrap().context, 7);
    }
}

#[test]
fn post_errors_hand_the_buffer_back() {
    let (n, _cqs) = with_cqs(Cfg::MANUAL_MQ, ALL_MSG);
    let e = n[0]
        .ep
        .post_tsend(FiAddr(1000), 1, b"mine".to_vec(), 1)
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Inval);
    assert_eq!(e.buffer.as_slice(), b"mine");
}

#[test]
fn counters_count_and_wait() {
    for cfg in Cfg::ALL {
        let mut counters = Vec::new();
        let n = fabric::open_with(cfg, ALL_MSG, 2, |i, d, b| {
            let c = d.counter(CounterAttr::new()).unwrap();
            let flag = if i == 0 {
                CounterBind::SEND
            } else {
                CounterBind::RECV
            };
            let b = b.bind_counter(&c, flag);
            counters.push(c);
            b
        });
        let (sent, recvd) = (&counters[0], &counters[1]);
        // Futures count as they complete; injects at once.
        let r = n[1].ep.trecv(vec![0u8; 4], 1, 0);
        let s = n[0].ep.tsend(n.addr(0, 1), 1, b"one".to_vec());
        let ((s, _), (g, _)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        g.unwrap();
        n[0].ep.inject(n.addr(0, 1), b"two").unwrap();
        assert_eq!(sent.read(), 2, "{cfg:?}");
        assert_eq!(recvd.read(), 1, "{cfg:?}");
        // Routed receives count on completion; wait makes progress itself
        // in manual mode (the sender's side is done: eager sends).
        n[1].ep.post_recv(vec![0u8; 4], 1).unwrap();
        n[1].ep.post_trecv(vec![0u8; 4], 2, 0, 2).unwrap();
        let (s, _) = n.drive(n[0].ep.tsend(n.addr(0, 1), 2, b"tri".to_vec()));
        s.unwrap();
        assert_eq!(sent.read(), 3);
        recvd.wait(3, Some(fabric::HANG_LIMIT)).unwrap();
        assert_eq!(recvd.read(), 3, "{cfg:?}");
        // A failed receive counts as an error.
        let r = n[1].ep.trecv(vec![0u8; 1], 3, 0);
        let s = n[0].ep.tsend(n.addr(0, 1), 3, b"long".to_vec());
        let ((s, _), (g, _)) = n.drive(async { futures::join!(s, r) });
        s.unwrap();
        assert_eq!(g.unwrap_err().kind(), ErrorKind::Trunc);
        assert_eq!((recvd.read(), recvd.read_err()), (3, 1), "{cfg:?}");
        assert_eq!(sent.read_err(), 0);
    }
}
