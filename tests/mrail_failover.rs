//! Rail failover of the multi-rail provider, in one process on loopback
//! rails: a rail taken out of service under striped and small traffic
//! (on the sending or the receiving side) loses nothing and delivers
//! nothing twice; the domain reports the rail's events; the rail rejoins;
//! with no rail left, operations fail with `FI_EIO`. Links really going
//! down, in separate processes, are in `mrail_rig_ops.rs`.

mod support;

use futures::StreamExt;
use psmrail::fabric::{Caps, ProgressKind};
use psmrail::mrail::{RailReason, RailState};
use psmrail::ErrorKind;
use support::mrail_nodes::{open, MrailNodes};
use support::payload::pattern;

const MSG_TAGGED: Caps = Caps::MSG.union(Caps::TAGGED);
const MANUAL: ProgressKind = ProgressKind::Manual;
const POLICY: &str = "16384:fixed,ULONG_MAX:striping";

/// Message `i` of a stream: small ones between striped ones.
fn size(i: usize) -> usize {
    if i % 3 == 0 {
        (4 << 20) + i
    } else {
        100 + i
    }
}

/// Streams `count` tagged messages from node 0 to node 1, calling
/// `midway` on the nodes once a third of them are posted, and checks that
/// each arrives once, whole and in order.
fn stream(n: &MrailNodes, count: usize, midway: impl FnOnce(&MrailNodes)) {
    let tx = &n.nodes[0].ep;
    let rx = &n.nodes[1].ep;
    let to = n.addr(0, 1);
    let recvs: Vec<_> = (0..count)
        .map(|i| rx.trecv(vec![0u8; size(i)], 5, 0))
        .collect();
    let mut sends = Vec::new();
    let mut midway = Some(midway);
    for i in 0..count {
        sends.push(tx.tsend(to, 5, pattern(size(i), i as u64)));
        if i == count / 3 {
            // Let the first striped ones get going on every rail.
            for _ in 0..100_000 {
                if rx.stats().rails[1].stripes >= 2 {
                    break;
                }
                for d in n.domains() {
                    d.reactor().progress();
                }
            }
            (midway.take().unwrap())(n);
        }
    }
    let (sent, got) = n.drive(futures::future::join(
        futures::future::join_all(sends),
        futures::future::join_all(recvs),
    ));
    for (i, (r, _)) in sent.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    for (i, (r, buf)) in got.into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("receive {i}: {e}"));
        assert_eq!(r.len, size(i), "message {i}: its own length, in order");
        assert!(
            buf.as_slice() == pattern(size(i), i as u64),
            "message {i}: every byte"
        );
    }
    let dup = rx.stats().duplicates;
    let extra = n.drive(async {
        // Nothing more arrives: one more receive stays pending.
        let mut late = Box::pin(rx.trecv(vec![0u8; 8 << 20], 5, 0));
        for _ in 0..200 {
            if futures::poll!(late.as_mut()).is_ready() {
                return true;
            }
            futures::pending!();
        }
        late.cancel();
        false
    });
    assert!(
        !extra,
        "a message arrived twice (duplicates dropped: {dup})"
    );
}

fn failover_on(side: usize) {
    let n = open(2, 2, POLICY, MSG_TAGGED, MANUAL);
    let mut events = n.nodes[side].domain.rail_events();
    stream(&n, 60, |n| n.nodes[side].ep.disable_rail(1).unwrap());
    let e = events.read().expect("a rail event");
    assert_eq!(
        (e.rail, e.state, e.reason),
        (1, RailState::Down, RailReason::Disabled)
    );
    let st = n.nodes[side].ep.stats();
    assert_eq!(st.rails[1].state, RailState::Down);
    assert_eq!(st.rails[1].errors, 1);
    let again: u64 = n
        .nodes
        .iter()
        .map(|node| node.ep.stats().rails[0].retransmits)
        .sum();
    assert!(
        again > 0,
        "what was in flight on rail 1 went again on rail 0"
    );
    eprintln!(
        "side {side}: {again} frames and parts again on rail 0; receiver {:?}",
        n.nodes[1].ep.stats()
    );
    // The rail rejoins and carries stripes again.
    let before = n.nodes[0].ep.stats().rails[1].stripes;
    n.nodes[side].ep.enable_rail(1).unwrap();
    let e = n.drive(events.next()).unwrap();
    assert_eq!((e.rail, e.state), (1, RailState::Up));
    // The peer hears the rail is back with the next frames.
    stream(&n, 12, |_| {});
    stream(&n, 12, |_| {});
    assert!(
        n.nodes[0].ep.stats().rails[1].stripes > before,
        "rail 1 carries stripes again"
    );
}

#[test]
fn a_rail_disabled_by_the_sender_loses_nothing_and_rejoins() {
    failover_on(0);
}

#[test]
fn a_rail_disabled_by_the_receiver_loses_nothing_and_rejoins() {
    failover_on(1);
}

#[test]
fn with_no_rail_left_operations_fail_with_eio() {
    let n = open(2, 2, POLICY, MSG_TAGGED, MANUAL);
    let ep = &n.nodes[0].ep;
    ep.disable_rail(0).unwrap();
    ep.disable_rail(1).unwrap();
    assert_eq!(ep.rail_states(), [RailState::Down, RailState::Down]);
    for len in [8, 1 << 20] {
        let (r, buf) = n.drive(ep.tsend(n.addr(0, 1), 1, vec![1u8; len]));
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(e.message().contains("no rail"), "{e}");
        assert_eq!(buf.len(), len, "the buffer comes back");
    }
    assert_eq!(ep.disable_rail(7).unwrap_err().kind(), ErrorKind::Inval);
    // Back in service, it works again.
    ep.enable_rail(0).unwrap();
    stream(&n, 6, |_| {});
}

#[test]
fn a_peer_closing_one_of_its_rails_fails_over_to_the_others() {
    let n = open(2, 2, POLICY, MSG_TAGGED, MANUAL);
    stream(&n, 45, |n| {
        // The receiver's rail 1 goes away under the stream (its psm domain
        // closes and says goodbye): the sender's parts there fail.
        let rail = n.nodes[1].domain.rail(1).unwrap().clone();
        rail.close().unwrap();
    });
    let lost: u64 = n.nodes[0].ep.stats().rails[1].errors;
    assert!(
        lost >= 1,
        "the sender counted the lost rail: {:?}",
        n.nodes[0].ep.stats()
    );
    // Later traffic keeps off the closed rail and still arrives.
    stream(&n, 9, |_| {});
}
