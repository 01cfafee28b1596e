//! Triggered operations (`FI_TRIGGER`, `Endpoint::triggered`) on the soft
//! engine in one process, in manual and auto progress: firing exactly once
//! at the threshold, threshold-then-FIFO order, application `set`/`add`
//! and operation completions as triggers, a chain of triggers (also with
//! untagged messages over active messages), failures
//! and cancellation reported through the CQ; RMA writes and reads posted
//! with a context and triggered (a chain ending in a write, a bad key).
//!
//! Message order is observed at the receiver: wildcard tagged receives
//! posted up front match messages of one sender in the order they were
//! posted, so the tags the receives got (by receive context) give the
//! order the sender posted in.

mod support;
use support::{fabric, payload};

use fabric::{Cfg, Nodes};
use psmrail::fabric::{
    Caps, CompletionFlags, CompletionQueue, Counter, CounterAttr, CounterBind, CqAttr, CqBind,
    CqEntry, CqErrEntry, FiAddr, MemoryRegion, MrAccess,
};
use psmrail::ErrorKind;
use std::collections::BTreeMap;

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

fn next_any(nodes: &Nodes, cq: &CompletionQueue) -> Result<CqEntry, CqErrEntry> {
    nodes.next_entry(cq)
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

/// RMA payloads stay under one AM chunk: the long path uses tagged MQ
/// messages, which wildcard tagged receives of these tests could catch.
const SMALL: usize = 1000;

/// [`setup`] with `FI_RMA` too, node 1 exposing a region with key
/// [`KEY`], and write and read counters bound on every node.
struct RmaSetup {
    s: Setup,
    write_counters: Vec<Counter>,
    read_counters: Vec<Counter>,
    region: MemoryRegion,
}

const KEY: u64 = 5;

fn rma_setup(cfg: Cfg) -> RmaSetup {
    let (mut cqs, mut sc, mut rc, mut wc, mut rdc) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let caps = Caps::MSG | Caps::TAGGED | Caps::RMA;
    let nodes = fabric::open_with(cfg, caps, 2, |_, domain, b| {
        let cq = domain.cq(CqAttr::new()).expect("cq");
        let counter = || domain.counter(CounterAttr::new()).expect("counter");
        let (s, r, w, rd) = (counter(), counter(), counter(), counter());
        let b = b
            .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
            .bind_counter(&s, CounterBind::SEND)
            .bind_counter(&r, CounterBind::RECV)
            .bind_counter(&w, CounterBind::WRITE)
            .bind_counter(&rd, CounterBind::READ);
        cqs.push(cq);
        sc.push(s);
        rc.push(r);
        wc.push(w);
        rdc.push(rd);
        b
    });
    let region = nodes[1]
        .domain
        .register(
            vec![0u8; 4096],
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            Some(KEY),
        )
        .expect("register");
    RmaSetup {
        s: Setup {
            nodes,
            cqs,
            send_counters: sc,
            recv_counters: rc,
        },
        write_counters: wc,
        read_counters: rdc,
        region,
    }
}

fn region_bytes(mr: &MemoryRegion, at: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mr.read_at(at, &mut v).expect("read_at");
    v
}

#[test]
fn posted_and_triggered_rma_report_to_the_cq() {
    for cfg in Cfg::PROGRESS {
        let r = rma_setup(cfg);
        let (nodes, cq) = (&r.s.nodes, &r.s.cqs[0]);
        let (ep, to1) = (&nodes[0].ep, nodes.addr(0, 1));
        let data = payload::pattern(SMALL, 1);

        // Posted with a context.
        ep.post_write(to1, data.clone(), 8, KEY, 11).unwrap();
        let e = next_ok(nodes, cq);
        assert_eq!(e.context, 11, "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::WRITE | CompletionFlags::RMA);
        assert_eq!(e.len, SMALL);
        assert!(e.buffer.unwrap().into_vec().unwrap() == data, "buffer back");
        assert!(
            region_bytes(&r.region, 8, SMALL) == data,
            "{cfg:?}: written"
        );
        ep.post_read(to1, vec![0u8; SMALL], 8, KEY, 12).unwrap();
        let e = next_ok(nodes, cq);
        assert_eq!(e.context, 12, "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::READ | CompletionFlags::RMA);
        assert!(e.buffer.unwrap().into_vec().unwrap() == data, "read back");
        assert_eq!(
            (r.write_counters[0].read(), r.read_counters[0].read()),
            (1, 1)
        );

        // Triggered: the read (threshold 2) sees the write (threshold 1).
        let c = nodes[0].domain.counter(CounterAttr::new()).unwrap();
        let other = payload::pattern(SMALL, 2);
        ep.triggered(&c, 2)
            .post_read(to1, vec![0u8; SMALL], 2048, KEY, 14)
            .unwrap();
        ep.triggered(&c, 1)
            .post_write(to1, other.clone(), 2048, KEY, 13)
            .unwrap();
        for _ in 0..20 {
            nodes.progress();
        }
        assert!(cq.read().unwrap().is_none(), "nothing fires before 1");
        assert!(
            region_bytes(&r.region, 2048, SMALL) == vec![0u8; SMALL],
            "not written yet"
        );
        c.add(1);
        let e = next_ok(nodes, cq);
        assert_eq!((e.context, e.len), (13, SMALL), "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::WRITE | CompletionFlags::RMA);
        assert!(
            e.buffer.unwrap().into_vec().unwrap() == other,
            "buffer back"
        );
        assert!(
            region_bytes(&r.region, 2048, SMALL) == other,
            "{cfg:?}: written"
        );
        c.add(1);
        let e = next_ok(nodes, cq);
        assert_eq!(e.context, 14, "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::READ | CompletionFlags::RMA);
        assert!(e.buffer.unwrap().into_vec().unwrap() == other, "read back");
        assert_eq!(
            (r.write_counters[0].read(), r.read_counters[0].read()),
            (2, 2)
        );
        assert_eq!(r.write_counters[0].read_err(), 0);
        assert!(cq.read().unwrap().is_none(), "no extra entries");
    }
}

/// The issue's chain: a receive completes -> its receive counter triggers
/// a tagged send -> whose send counter triggers an RMA write.
#[test]
fn a_receive_triggers_a_send_that_triggers_a_write() {
    for cfg in Cfg::ALL {
        let r = rma_setup(cfg);
        let nodes = &r.s.nodes;
        let (ep0, to1) = (&nodes[0].ep, nodes.addr(0, 1));
        let data = payload::pattern(SMALL, 7);
        ep0.post_recv(vec![0u8; 8], 1).unwrap();
        ep0.triggered(&r.s.recv_counters[0], 1)
            .post_tsend(to1, 0xa, payload(0xa), 2)
            .unwrap();
        ep0.triggered(&r.s.send_counters[0], 1)
            .post_write(to1, data.clone(), 64, KEY, 3)
            .unwrap();
        nodes[1].ep.post_trecv(vec![0u8; 8], 0xa, 0, 11).unwrap();
        nodes[1]
            .ep
            .post_send(nodes.addr(1, 0), b"go".to_vec(), 10)
            .unwrap();

        // Node 0: the receive, the send it triggered, then the write.
        let e = next_ok(nodes, &r.s.cqs[0]);
        assert_eq!((e.context, e.len), (1, 2), "{cfg:?}");
        assert_eq!(&e.buffer.unwrap().into_vec().unwrap()[..2], b"go");
        let e = next_ok(nodes, &r.s.cqs[0]);
        assert_eq!(e.context, 2, "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::SEND | CompletionFlags::TAGGED);
        let e = next_ok(nodes, &r.s.cqs[0]);
        assert_eq!(e.context, 3, "{cfg:?}");
        assert_eq!(e.flags, CompletionFlags::WRITE | CompletionFlags::RMA);
        assert!(
            region_bytes(&r.region, 64, SMALL) == data,
            "{cfg:?}: written"
        );
        // Node 1: its send and the triggered tsend's message.
        let mut got = BTreeMap::new();
        for _ in 0..2 {
            let e = next_ok(nodes, &r.s.cqs[1]);
            got.insert(e.context, e.tag);
        }
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![(10, 0), (11, 0xa)]
        );
        let counts = |i: usize| {
            (
                r.s.recv_counters[i].read(),
                r.s.send_counters[i].read(),
                r.write_counters[i].read(),
            )
        };
        assert_eq!(counts(0), (1, 1, 1), "{cfg:?}");
        assert!(r.s.cqs[0].read().unwrap().is_none(), "no extra entries");
    }
}

#[test]
fn a_triggered_write_to_a_bad_key_gives_an_error_entry() {
    for cfg in Cfg::PROGRESS {
        let r = rma_setup(cfg);
        let nodes = &r.s.nodes;
        let c = nodes[0].domain.counter(CounterAttr::new()).unwrap();
        nodes[0]
            .ep
            .triggered(&c, 1)
            .post_write(nodes.addr(0, 1), b"nowhere".to_vec(), 0, KEY + 1, 77)
            .unwrap();
        // Reads too: the key is the target's to judge, when the op fires.
        nodes[0]
            .ep
            .triggered(&c, 1)
            .post_read(nodes.addr(0, 1), vec![0u8; 4], 0, KEY + 1, 78)
            .unwrap();
        c.add(1);
        let mut got = Vec::new();
        for _ in 0..2 {
            let e = next_err(nodes, &r.s.cqs[0]);
            assert_eq!(e.error.kind(), ErrorKind::Access, "{cfg:?}: {}", e.error);
            assert_eq!(e.err(), ErrorKind::Access.errno());
            let buf = e.buffer.expect("the buffer comes back").into_vec().unwrap();
            got.push((e.context, e.flags, buf));
        }
        got.sort_by_key(|g| g.0);
        let rma = CompletionFlags::RMA;
        assert_eq!(
            got,
            vec![
                (77, CompletionFlags::WRITE | rma, b"nowhere".to_vec()),
                (78, CompletionFlags::READ | rma, vec![0u8; 4]),
            ],
            "{cfg:?}"
        );
        assert_eq!(r.write_counters[0].read_err(), 1, "{cfg:?}");
        assert_eq!(r.read_counters[0].read_err(), 1, "{cfg:?}");
        assert_eq!(region_bytes(&r.region, 0, 8), vec![0u8; 8], "unchanged");
        assert!(r.s.cqs[0].read().unwrap().is_none(), "reported once");
    }
}

#[test]
fn rma_checks_fail_at_once_with_the_buffer() {
    // No FI_RMA: refused at posting, triggered or not.
    let s = setup(Cfg::MANUAL_MQ, 2);
    let c = s.nodes[0].domain.counter(CounterAttr::new()).unwrap();
    let to1 = s.nodes.addr(0, 1);
    let e = s.nodes[0]
        .ep
        .triggered(&c, 0)
        .post_write(to1, b"w".to_vec(), 0, KEY, 1)
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::OpNotSupp, "{}", e.error);
    assert_eq!(e.buffer.into_vec().unwrap(), b"w");
    let e = s.nodes[0]
        .ep
        .post_read(to1, b"r".to_vec(), 0, KEY, 2)
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::OpNotSupp, "{}", e.error);
    assert_eq!(e.buffer.into_vec().unwrap(), b"r");

    // An address the AV never returned.
    let r = rma_setup(Cfg::MANUAL_MQ);
    let c = r.s.nodes[0].domain.counter(CounterAttr::new()).unwrap();
    let t = r.s.nodes[0].ep.triggered(&c, 0);
    let e = t
        .post_read(FiAddr::UNSPEC, b"x".to_vec(), 0, KEY, 3)
        .unwrap_err();
    assert_eq!(e.buffer.into_vec().unwrap(), b"x");
    let e = r.s.nodes[0]
        .ep
        .post_write(FiAddr::UNSPEC, b"y".to_vec(), 0, KEY, 4)
        .unwrap_err();
    assert_eq!(e.buffer.into_vec().unwrap(), b"y");
    for _ in 0..5 {
        r.s.nodes.progress();
    }
    assert!(r.s.cqs[0].read().unwrap().is_none(), "nothing reported");
    assert!(r.s.cqs[0].readerr().is_none(), "nothing reported");
}

/// Closing the initiator's domain ends a posted write still waiting for
/// its (silent) target and cancels a triggered one that never fired: both
/// give error entries with their contexts, flags and buffers.
#[test]
fn closing_the_domain_ends_posted_and_waiting_rma() {
    let r = rma_setup(Cfg::MANUAL_MQ);
    let nodes = &r.s.nodes;
    let c = nodes[0].domain.counter(CounterAttr::new()).unwrap();
    let to1 = nodes.addr(0, 1);
    // Node 1 is not progressed before the close: the write cannot finish.
    nodes[0]
        .ep
        .post_write(to1, b"posted".to_vec(), 0, KEY, 1)
        .unwrap();
    nodes[0]
        .ep
        .triggered(&c, 5)
        .post_read(to1, vec![7u8; 3], 0, KEY, 2)
        .unwrap();
    nodes[0].domain.clone().close().unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let e = next_err(nodes, &r.s.cqs[0]);
        assert_eq!(e.error.kind(), ErrorKind::Canceled, "{}", e.error);
        got.push((e.context, e.flags, e.buffer.unwrap().into_vec().unwrap()));
    }
    got.sort_by_key(|g| g.0);
    let rma = CompletionFlags::RMA;
    assert_eq!(
        got,
        vec![
            (1, CompletionFlags::WRITE | rma, b"posted".to_vec()),
            (2, CompletionFlags::READ | rma, vec![7u8; 3]),
        ]
    );
    assert_eq!(r.write_counters[0].read_err(), 1);
    assert_eq!(r.read_counters[0].read_err(), 1);
}
