//! Triggered operations (`FI_TRIGGER`, `Endpoint::triggered`) on the soft
//! engine in one process, in manual and auto progress: firing exactly once
//! at the threshold, threshold-then-FIFO order, application `set`/`add`
//! and operation completions as triggers, a chain of triggers (also with
//! untagged messages over active messages), failures
//! and cancellation reported through the CQ.
//!
//! Message order is observed at the receiver: wildcard tagged receives
//! posted up front match messages of one sender in the order they were
//! posted, so the tags the receives got (by receive context) give the
//! order the sender posted in.

#[path = "support/fabric.rs"]
mod fabric;

use fabric::{Cfg, Nodes};
use psmrail::fabric::{
    Caps, CompletionQueue, Counter, CounterAttr, CounterBind, CqAttr, CqBind, CqEntry, CqErrEntry,
    FiAddr,
};
use psmrail::ErrorKind;
use std::collections::BTreeMap;
use std::time::Instant;

/// Connected nodes, each with one CQ (transmit and receive) and a send and
/// a receive counter bound.
struct Setup {
    nodes: Nodes,
    cqs: Vec<CompletionQueue>,
    send_counters: Vec<Counter>,
    recv_counters: Vec<Counter>,
}

fn setup(cfg: Cfg, n: usize) -> Setup {
    let (mut cqs, mut sc, mut rc) = (Vec::new(), Vec::new(), Vec::new());
    let nodes = fabric::open_with(cfg, Caps::MSG | Caps::TAGGED, n, |_, domain, b| {
        let cq = domain.cq(CqAttr::new()).expect("cq");
        let s = domain.counter(CounterAttr::new()).expect("send counter");
        let r = domain.counter(CounterAttr::new()).expect("recv counter");
        let b = b
            .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
            .bind_counter(&s, CounterBind::SEND)
            .bind_counter(&r, CounterBind::RECV);
        cqs.push(cq);
        sc.push(s);
        rc.push(r);
        b
    });
    Setup {
        nodes,
        cqs,
        send_counters: sc,
        recv_counters: rc,
    }
}

/// The next entry of `cq` (success or error), progressing every manual
/// domain meanwhile; panics after the hang limit.
fn next_any(nodes: &Nodes, cq: &CompletionQueue) -> Result<CqEntry, CqErrEntry> {
    let start = Instant::now();
    loop {
        if let Some(e) = cq.readerr() {
            return Err(e);
        }
        match cq.read() {
            Ok(Some(e)) => return Ok(e),
            Ok(None) => {}
            Err(e) => assert_eq!(e.kind(), ErrorKind::Avail, "cq read: {e}"),
        }
        nodes.progress();
        std::thread::yield_now();
        assert!(start.elapsed() < fabric::HANG_LIMIT, "no CQ entry came");
    }
}

fn next_ok(nodes: &Nodes, cq: &CompletionQueue) -> CqEntry {
    match next_any(nodes, cq) {
        Ok(e) => e,
        Err(e) => panic!("unexpected error entry: context {} {}", e.context, e.error),
    }
}

fn next_err(nodes: &Nodes, cq: &CompletionQueue) -> CqErrEntry {
    match next_any(nodes, cq) {
        Err(e) => e,
        Ok(e) => panic!("unexpected success entry: context {}", e.context),
    }
}

/// Reads `n` entries and returns their contexts, sorted.
fn contexts(nodes: &Nodes, cq: &CompletionQueue, n: usize) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).map(|_| next_ok(nodes, cq).context).collect();
    v.sort_unstable();
    v
}

/// Posts `n` wildcard tagged receives on node `i`, contexts `base..`.
fn wildcard_recvs(s: &Setup, i: usize, base: u64, n: u64) {
    for k in 0..n {
        s.nodes[i]
            .ep
            .post_trecv(vec![0u8; 8], 0, !0, base + k)
            .expect("trecv");
    }
}

/// Reads `n` receive entries from node `i` and returns the tags in the
/// order of their receives' contexts (= the order the messages were sent).
fn tags_in_order(s: &Setup, i: usize, n: usize) -> Vec<u64> {
    let mut by_ctx = BTreeMap::new();
    for _ in 0..n {
        let e = next_ok(&s.nodes, &s.cqs[i]);
        let buf = e.buffer.expect("receive buffer back").into_vec().unwrap();
        assert_eq!(&buf[..e.len], &e.tag.to_le_bytes()[..e.len], "payload");
        by_ctx.insert(e.context, e.tag);
    }
    by_ctx.into_values().collect()
}

fn payload(tag: u64) -> Vec<u8> {
    tag.to_le_bytes().to_vec()
}

#[test]
fn fires_once_in_threshold_then_fifo_order() {
    for cfg in Cfg::PROGRESS {
        let s = setup(cfg, 2);
        let (ep, to1) = (&s.nodes[0].ep, s.nodes.addr(0, 1));
        let c = s.nodes[0].domain.counter(CounterAttr::new()).unwrap();
        wildcard_recvs(&s, 1, 1000, 8);
        for (threshold, tag) in [(3, 1), (1, 2), (3, 3), (2, 4), (1, 5), (10, 6)] {
            ep.triggered(&c, threshold)
                .post_tsend(to1, tag, payload(tag), tag)
                .unwrap();
        }
        // Value 1 (application `set`): 2 and 5 fire, nothing else.
        c.set(1);
        assert_eq!(contexts(&s.nodes, &s.cqs[0], 2), vec![2, 5], "{cfg:?}");
        ep.post_tsend(to1, 99, payload(99), 99).unwrap();
        assert_eq!(next_ok(&s.nodes, &s.cqs[0]).context, 99);
        // Value 3 (application `add`): 4, then 1 and 3 in posting order.
        c.add(2);
        assert_eq!(contexts(&s.nodes, &s.cqs[0], 3), vec![1, 3, 4], "{cfg:?}");
        // Going down and up again fires nothing twice.
        c.set(0);
        c.set(3);
        c.add(1);
        ep.post_tsend(to1, 98, payload(98), 98).unwrap();
        assert_eq!(next_ok(&s.nodes, &s.cqs[0]).context, 98, "{cfg:?}");
        assert_eq!(
            tags_in_order(&s, 1, 7),
            vec![2, 5, 99, 4, 1, 3, 98],
            "{cfg:?}"
        );
        // The last one waits for 10.
        c.set(10);
        assert_eq!(next_ok(&s.nodes, &s.cqs[0]).context, 6, "{cfg:?}");
        assert_eq!(tags_in_order(&s, 1, 1), vec![6]);
        assert_eq!(s.send_counters[0].read(), 8);
        assert_eq!(s.send_counters[0].read_err(), 0);
        assert!(s.cqs[0].read().unwrap().is_none(), "no extra entries");
    }
}

#[test]
fn fires_at_once_when_the_counter_is_already_there() {
    for cfg in Cfg::PROGRESS {
        let s = setup(cfg, 2);
        let c = s.nodes[0].domain.counter(CounterAttr::new()).unwrap();
        c.add(5);
        wildcard_recvs(&s, 1, 1000, 2);
        let ep = &s.nodes[0].ep;
        ep.triggered(&c, 5)
            .post_tsend(s.nodes.addr(0, 1), 7, payload(7), 1)
            .unwrap();
        ep.triggered(&c, 0)
            .post_tsend(s.nodes.addr(0, 1), 8, payload(8), 2)
            .unwrap();
        assert_eq!(contexts(&s.nodes, &s.cqs[0], 2), vec![1, 2], "{cfg:?}");
        assert_eq!(tags_in_order(&s, 1, 2), vec![7, 8], "{cfg:?}");
    }
}

/// A receive completes -> its receive counter triggers a send -> whose
/// send counter triggers another send.
#[test]
fn completions_trigger_a_chain() {
    for cfg in Cfg::ALL {
        let s = setup(cfg, 2);
        let (ep1, to0) = (&s.nodes[1].ep, s.nodes.addr(1, 0));
        ep1.post_recv(vec![0u8; 8], 1).unwrap();
        ep1.triggered(&s.recv_counters[1], 1)
            .post_tsend(to0, 0xa, payload(0xa), 2)
            .unwrap();
        ep1.triggered(&s.send_counters[1], 1)
            .post_tsend(to0, 0xb, payload(0xb), 3)
            .unwrap();
        // A triggered receive on node 0, fired by node 0's own send.
        wildcard_recvs(&s, 0, 1000, 1);
        s.nodes[0]
            .ep
            .triggered(&s.send_counters[0], 1)
            .post_trecv(vec![0u8; 8], 0, !0, 1001)
            .unwrap();
        s.nodes[0]
            .ep
            .post_send(s.nodes.addr(0, 1), b"go".to_vec(), 10)
            .unwrap();
        // Node 0's CQ: its send and both receives, in any order; the
        // receives by context give the order node 1 sent in.
        let mut tags = BTreeMap::new();
        for _ in 0..3 {
            let e = next_ok(&s.nodes, &s.cqs[0]);
            if e.context != 10 {
                tags.insert(e.context, e.tag);
            }
        }
        assert_eq!(
            tags.into_iter().collect::<Vec<_>>(),
            vec![(1000, 0xa), (1001, 0xb)],
            "{cfg:?}"
        );
        assert_eq!(contexts(&s.nodes, &s.cqs[1], 3), vec![1, 2, 3], "{cfg:?}");
        assert_eq!(s.send_counters[1].read(), 2);
        assert_eq!(s.recv_counters[1].read(), 1);
    }
}

#[test]
fn a_failed_fired_post_gives_an_error_entry() {
    for cfg in Cfg::PROGRESS {
        let s = setup(cfg, 2);
        let node = &s.nodes[0];
        let c = node.domain.counter(CounterAttr::new()).unwrap();
        // A tag using the provider's reserved bits: checked by the tsend
        // itself, so it fails when the op fires.
        node.ep
            .triggered(&c, 1)
            .post_tsend(s.nodes.addr(0, 1), u64::MAX, b"lost?".to_vec(), 77)
            .unwrap();
        c.add(1);
        let e = next_err(&s.nodes, &s.cqs[0]);
        assert_eq!(e.context, 77, "{cfg:?}");
        assert_eq!(e.error.kind(), ErrorKind::Inval, "{}", e.error);
        assert_eq!(e.tag, u64::MAX);
        let buf = e.buffer.expect("the buffer comes back").into_vec().unwrap();
        assert_eq!(buf, b"lost?");
        assert_eq!(s.send_counters[0].read_err(), 1, "{cfg:?}");
        assert!(s.cqs[0].read().unwrap().is_none(), "reported once");
    }
}

#[test]
fn closing_the_endpoint_cancels_waiting_ops() {
    for cfg in Cfg::PROGRESS {
        let s = setup(cfg, 2);
        let node = &s.nodes[0];
        let c = node.domain.counter(CounterAttr::new()).unwrap();
        let ep = node.ep.clone();
        ep.triggered(&c, 5)
            .post_tsend(s.nodes.addr(0, 1), 1, b"one".to_vec(), 1)
            .unwrap();
        ep.triggered(&c, 5)
            .post_trecv(b"two".to_vec(), 0, 0, 2)
            .unwrap();
        ep.triggered(&c, 6).post_recv(b"three".to_vec(), 3).unwrap();
        c.add(1);
        node.ep.clone().close().unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            let e = next_err(&s.nodes, &s.cqs[0]);
            assert_eq!(e.error.kind(), ErrorKind::Canceled, "{}", e.error);
            assert_eq!(e.err(), ErrorKind::Canceled.errno());
            let buf = e.buffer.expect("the buffer comes back").into_vec().unwrap();
            got.push((e.context, buf));
        }
        got.sort();
        assert_eq!(
            got,
            vec![
                (1, b"one".to_vec()),
                (2, b"two".to_vec()),
                (3, b"three".to_vec())
            ],
            "{cfg:?}"
        );
        c.add(10);
        assert!(s.cqs[0].read().unwrap().is_none(), "nothing fires later");
        // Posting on the closed endpoint fails at once, buffer back.
        let e = ep.triggered(&c, 1).post_recv(b"x".to_vec(), 4).unwrap_err();
        assert_eq!(e.error.kind(), ErrorKind::OpBadState);
        assert_eq!(e.buffer.into_vec().unwrap(), b"x");
    }
}

#[test]
fn closing_the_domain_cancels_waiting_ops() {
    for cfg in Cfg::PROGRESS {
        let s = setup(cfg, 2);
        let c = s.nodes[0].domain.counter(CounterAttr::new()).unwrap();
        s.nodes[0]
            .ep
            .triggered(&c, 1)
            .post_recv(vec![1u8; 4], 9)
            .unwrap();
        s.nodes[0].domain.clone().close().unwrap();
        let e = next_err(&s.nodes, &s.cqs[0]);
        assert_eq!((e.context, e.error.kind()), (9, ErrorKind::Canceled));
        assert_eq!(e.buffer.unwrap().into_vec().unwrap(), vec![1u8; 4]);
        assert_eq!(s.recv_counters[0].read_err(), 1);
    }
}

#[test]
fn bad_arguments_fail_at_once_with_the_buffer() {
    let s = setup(Cfg::MANUAL_MQ, 2);
    let c = s.nodes[0].domain.counter(CounterAttr::new()).unwrap();
    let t = s.nodes[0].ep.triggered(&c, 0);
    let e = t.post_send(FiAddr::UNSPEC, b"a".to_vec(), 1).unwrap_err();
    assert_eq!(e.buffer.into_vec().unwrap(), b"a");
    assert_ne!(e.error.kind(), ErrorKind::Canceled);

    let msg_only = fabric::open(Cfg::MANUAL_MQ, Caps::MSG, 1);
    let c = msg_only[0].domain.counter(CounterAttr::new()).unwrap();
    let e = msg_only[0]
        .ep
        .triggered(&c, 0)
        .post_trecv(b"b".to_vec(), 0, 0, 2)
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::OpNotSupp);
    assert_eq!(e.buffer.into_vec().unwrap(), b"b");
}
