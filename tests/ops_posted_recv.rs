//! Receives posted with a context beyond the plain ones, through the
//! public API on the soft engine, in both progress modes: multi-receive
//! blocks (`post_multi_recv`: parts in place, the release flag, blocks in
//! posting order, cancelling a block that waits and one that receives),
//! directed receives (`post_recv_from`) and peeks with claims and
//! discards (`post_tpeek`, `post_trecv_claimed`, `discard_claimed`).

mod support;
use support::fabric::{self, Cfg, Nodes};

use psmrail::fabric::{Caps, CompletionFlags, CompletionQueue, CqAttr, CqBind};
use psmrail::ops::{MultiRecvBuffer, PeekFlags};
use psmrail::ErrorKind;
use std::sync::Arc;

/// `n` nodes with `caps`, each with one CQ for both directions.
fn setup(cfg: Cfg, caps: Caps, n: usize) -> (Nodes, Vec<CompletionQueue>) {
    let mut cqs = Vec::new();
    let nodes = fabric::open_with(cfg, caps, n, |_, domain, b| {
        let cq = domain.cq(CqAttr::new()).expect("cq");
        let b = b.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV);
        cqs.push(cq);
        b
    });
    (nodes, cqs)
}

/// The next receive-side entry of `cq` (send entries are skipped).
fn next_recv(
    nodes: &Nodes,
    cq: &CompletionQueue,
) -> Result<psmrail::fabric::CqEntry, psmrail::fabric::CqErrEntry> {
    loop {
        match nodes.next_entry(cq) {
            Ok(e) if e.flags.contains(CompletionFlags::SEND) => continue,
            other => return other,
        }
    }
}

#[test]
fn multi_receive_blocks_fill_in_posting_order_and_cancel() {
    for cfg in [Cfg::MANUAL_MQ, Cfg::AUTO_MQ] {
        let (nodes, cqs) = setup(cfg, Caps::MSG | Caps::MULTI_RECV, 2);
        let rx = &nodes[1].ep;
        rx.setopt_min_multi_recv(16).unwrap();
        let small = rx.post_multi_recv(Arc::new(MultiRecvBuffer::new(8)), 9);
        assert_eq!(small.unwrap_err().kind(), ErrorKind::Inval, "{cfg:?}");
        let a = Arc::new(MultiRecvBuffer::new(32));
        let b = Arc::new(MultiRecvBuffer::new(32));
        rx.post_multi_recv(a.clone(), 1).unwrap();
        rx.post_multi_recv(b.clone(), 2).unwrap();
        for i in 0..4u8 {
            nodes[0]
                .ep
                .post_send(nodes.addr(0, 1), vec![i; 16], 100)
                .unwrap();
        }
        // A fills first (two parts, released), then B.
        for (i, (ctx, offset)) in [(1, 0), (1, 16), (2, 0), (2, 16)].into_iter().enumerate() {
            let e = next_recv(&nodes, &cqs[1]).expect("a part");
            let buf = e.buffer.expect("the part's window");
            assert_eq!(
                (e.context, buf.offset(), e.len),
                (ctx, offset, 16),
                "{cfg:?}"
            );
            assert_eq!(&buf.as_slice()[..16], &[i as u8; 16]);
            assert_eq!(e.flags.contains(CompletionFlags::MULTI_RECV), offset == 16);
        }
        // A block waiting behind another is cancelled at once; the one
        // receiving, by its receive's cancellation.
        let c = rx
            .post_multi_recv(Arc::new(MultiRecvBuffer::new(32)), 3)
            .unwrap();
        let d = rx
            .post_multi_recv(Arc::new(MultiRecvBuffer::new(32)), 4)
            .unwrap();
        assert!(d.cancel().unwrap());
        for (posted, ctx) in [(None, 4), (Some(&c), 3)] {
            if let Some(p) = posted {
                assert!(p.cancel().unwrap());
            }
            let e = next_recv(&nodes, &cqs[1]).expect_err("the cancellation");
            assert_eq!((e.context, e.error.kind()), (ctx, ErrorKind::Canceled));
            assert!(e.flags.contains(CompletionFlags::MULTI_RECV));
        }
        assert!(!c.cancel().unwrap(), "over already");
    }
}

#[test]
fn a_directed_receive_takes_only_its_sender() {
    for cfg in [Cfg::MANUAL_MQ, Cfg::AUTO_MQ] {
        let (nodes, cqs) = setup(cfg, Caps::MSG | Caps::DIRECTED_RECV, 3);
        let rx = &nodes[2].ep;
        rx.post_recv_from(nodes.addr(2, 0), vec![0u8; 8], 1)
            .unwrap();
        nodes[1]
            .ep
            .post_send(nodes.addr(1, 2), b"one".to_vec(), 7)
            .unwrap();
        // Let "one" arrive (and wait) before "zero" is sent.
        for _ in 0..100 {
            nodes.progress();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        nodes[0]
            .ep
            .post_send(nodes.addr(0, 2), b"zero".to_vec(), 7)
            .unwrap();
        let e = next_recv(&nodes, &cqs[2]).expect("the directed receive");
        assert_eq!((e.context, e.len), (1, 4), "{cfg:?}");
        assert_eq!(&e.buffer.unwrap().as_slice()[..4], b"zero");
        rx.post_recv(vec![0u8; 8], 2).unwrap();
        let e = next_recv(&nodes, &cqs[2]).expect("the other message");
        assert_eq!(&e.buffer.unwrap().as_slice()[..3], b"one");
    }
}

#[test]
fn peeks_report_and_claims_hold_one_message() {
    for cfg in [Cfg::MANUAL_MQ, Cfg::AUTO_MQ] {
        let (nodes, cqs) = setup(cfg, Caps::TAGGED, 2);
        let (rx, cq) = (&nodes[1].ep, &cqs[1]);
        assert!(rx
            .post_tpeek(5, 0, PeekFlags::empty(), 1)
            .unwrap()
            .is_none());
        let e = next_recv(&nodes, cq).expect_err("nothing queued");
        assert_eq!(
            (e.context, e.error.kind()),
            (1, ErrorKind::NoMsg),
            "{cfg:?}"
        );
        let both = PeekFlags::CLAIM | PeekFlags::DISCARD;
        assert_eq!(
            rx.post_tpeek(5, 0, both, 1).unwrap_err().kind(),
            ErrorKind::Inval
        );
        for (tag, data) in [(5, &b"five"[..]), (6, b"six"), (7, b"seven")] {
            nodes[0].ep.tinject(nodes.addr(0, 1), tag, data).unwrap();
        }
        // Peeked until it arrives (the sender progressing meanwhile).
        let start = std::time::Instant::now();
        let peek_until = |tag: u64, flags: PeekFlags| loop {
            let claimed = rx.post_tpeek(tag, 0, flags, 2).unwrap();
            match next_recv(&nodes, cq) {
                Ok(e) => return (e, claimed),
                Err(e) => assert_eq!(e.error.kind(), ErrorKind::NoMsg),
            }
            nodes.progress();
            assert!(start.elapsed() < fabric::HANG_LIMIT, "tag {tag} never came");
        };
        let (e, none) = peek_until(5, PeekFlags::empty());
        assert_eq!((e.len, e.tag, e.context), (4, 5, 2));
        assert!(none.is_none() && e.buffer.is_none());
        let (_, claimed) = peek_until(5, PeekFlags::CLAIM);
        let claimed = claimed.expect("held");
        assert_eq!(claimed.peeked().len, 4);
        assert!(rx.tpeek(5, 0).unwrap().is_none(), "off the queue");
        rx.post_trecv_claimed(claimed, vec![0u8; 2], 3).unwrap();
        let e = next_recv(&nodes, cq).expect_err("a short buffer");
        assert_eq!(
            (e.context, e.error.kind(), e.olen),
            (3, ErrorKind::Trunc, 2)
        );
        // Discarded by the peek, or after a claim.
        peek_until(6, PeekFlags::DISCARD);
        assert!(rx.tpeek(6, 0).unwrap().is_none(), "dropped");
        let (_, claimed) = peek_until(7, PeekFlags::CLAIM);
        rx.discard_claimed(claimed.expect("held"), 4);
        let e = next_recv(&nodes, cq).expect("the discard's entry");
        assert_eq!((e.context, e.len, e.tag), (4, 0, 7));
        assert!(rx.tpeek(7, 0).unwrap().is_none());
    }
}
