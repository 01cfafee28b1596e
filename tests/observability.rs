//! Observability as an application sees it: the `tracing` spans of
//! operations (`psm.op`, `mrail.op`) and the events that end them, and the
//! info events of endpoint lifecycle, peer death and rail state changes.
//!
//! Everything runs on the soft engine in this process.

#[path = "support/fabric.rs"]
mod fabric;
mod support;

use fabric::Cfg;
use psmrail::fabric::{Caps, ProgressKind};
use psmrail::mrail::RailState;
use psmrail::ErrorKind;
use support::mrail_nodes;
use support::trace_capture::{Recorder, SpanRec};
use tracing::Level;

/// The one span called `name` whose `kind` is `kind`.
fn op_span(rec: &Recorder, name: &str, kind: &str) -> SpanRec {
    let found: Vec<SpanRec> = rec
        .spans_named(name)
        .into_iter()
        .filter(|s| s.field("kind") == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "{kind}: {:?}", rec.spans());
    found.into_iter().next().unwrap()
}

/// The fields of the completion event of span `span` (exactly one).
fn done_event(rec: &Recorder, span: &SpanRec) -> support::trace_capture::EventRec {
    let done: Vec<_> = rec
        .events_in(span.id)
        .into_iter()
        .filter(|e| e.message().starts_with("op "))
        .collect();
    assert_eq!(done.len(), 1, "{span:?}: {done:?}");
    assert_eq!(done[0].level, Level::TRACE);
    done.into_iter().next().unwrap()
}

// ----- spans -------------------------------------------------------------------

#[test]
fn a_tagged_pair_traces_kind_peer_tag_and_length_and_ends_with_its_outcome() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED, 2);
    let rec = Recorder::new();
    rec.capture(|| {
        let recv = nodes[1].ep.trecv(vec![0u8; 64], 7, 0);
        let send = nodes[0].ep.tsend(nodes.addr(0, 1), 7, b"hello".to_vec());
        let ((s, _), (r, _)) = nodes.drive(futures::future::join(send, recv));
        s.unwrap();
        assert_eq!(r.unwrap().len, 5);
    });
    assert_eq!(rec.spans_named("psm.op").len(), 2, "{:?}", rec.spans());

    let send = op_span(&rec, "psm.op", "tsend");
    let to = nodes.addr(0, 1).0.to_string();
    assert_eq!(send.field("peer"), Some(to.as_str()));
    assert_eq!(
        (send.field("tag"), send.field("len")),
        (Some("7"), Some("5"))
    );
    assert!(send.closed(), "{send:?}");
    let e = done_event(&rec, &send);
    assert_eq!(
        (e.field("outcome"), e.field("len")),
        (Some("ok"), Some("5"))
    );

    // A receive from any source: its peer is the sender, known at the end.
    let recv = op_span(&rec, "psm.op", "trecv");
    let from = nodes.addr(1, 0).0.to_string();
    assert_eq!(recv.field("peer"), Some(from.as_str()));
    assert_eq!(
        (recv.field("tag"), recv.field("len")),
        (Some("7"), Some("64"))
    );
    assert!(recv.closed(), "{recv:?}");
    let e = done_event(&rec, &recv);
    assert_eq!(
        (e.field("outcome"), e.field("len")),
        (Some("ok"), Some("5"))
    );
    assert_eq!(
        (e.field("tag"), e.field("source")),
        (Some("7"), Some(from.as_str()))
    );
}

#[test]
fn a_dropped_future_closes_its_span_and_a_failed_one_reports_the_error() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED | Caps::MSG, 2);
    let rec = Recorder::new();
    rec.capture(|| {
        // Dropped before any message: cancelled, span closed.
        drop(nodes[1].ep.recv(vec![0u8; 8]));
        // Truncated: 5 bytes into 2.
        let recv = nodes[1].ep.trecv(vec![0u8; 2], 3, 0);
        let send = nodes[0].ep.tsend(nodes.addr(0, 1), 3, b"hello".to_vec());
        let ((s, _), (r, _)) = nodes.drive(futures::future::join(send, recv));
        s.unwrap();
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Trunc);
    });
    let dropped = op_span(&rec, "psm.op", "recv");
    assert!(dropped.closed(), "{dropped:?}");
    assert_eq!(dropped.field("peer"), None);
    assert_eq!(done_event(&rec, &dropped).field("outcome"), Some("dropped"));

    let failed = op_span(&rec, "psm.op", "trecv");
    assert!(failed.closed(), "{failed:?}");
    let e = done_event(&rec, &failed);
    assert_eq!(e.field("outcome"), Some("error"));
    assert_eq!(
        e.field("error_kind"),
        Some(ErrorKind::Trunc.to_string().as_str())
    );
}

#[test]
fn injects_and_untagged_sends_have_spans_too() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED | Caps::MSG, 2);
    let rec = Recorder::new();
    rec.capture(|| {
        let (ep, to) = (&nodes[0].ep, nodes.addr(0, 1));
        ep.tinject(to, 1, b"abc").unwrap();
        ep.inject(to, b"abcd").unwrap();
        let (s, _) = nodes.drive(ep.send(to, vec![1u8; 6]));
        s.unwrap();
    });
    for (kind, len, tag) in [
        ("tinject", "3", Some("1")),
        ("inject", "4", None),
        ("send", "6", None),
    ] {
        let s = op_span(&rec, "psm.op", kind);
        assert_eq!((s.field("len"), s.field("tag")), (Some(len), tag), "{s:?}");
        assert!(s.closed(), "{s:?}");
        assert_eq!(done_event(&rec, &s).field("outcome"), Some("ok"));
    }
}

#[test]
fn nothing_is_traced_when_the_subscriber_wants_no_trace_level() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED, 2);
    let rec = Recorder::new();
    rec.capture_up_to(Level::DEBUG, || {
        let recv = nodes[1].ep.trecv(vec![0u8; 8], 1, 0);
        nodes[0].ep.tinject(nodes.addr(0, 1), 1, b"x").unwrap();
        let (r, _) = nodes.drive(recv);
        r.unwrap();
    });
    assert!(rec.spans_named("psm.op").is_empty(), "{:?}", rec.spans());
}

// ----- lifecycle and peer events -------------------------------------------------

#[test]
fn enabling_and_closing_an_endpoint_are_info_events_with_its_address() {
    let info = fabric::info(Cfg::MANUAL_MQ, Caps::TAGGED);
    let rec = Recorder::new();
    let epid = rec.capture(|| {
        let domain = psmrail::fabric::Fabric::open(&info)
            .unwrap()
            .domain(&info)
            .unwrap();
        let ep = domain.endpoint(&info).enable().unwrap();
        ep.close().unwrap();
        domain.epid()
    });
    for what in ["endpoint enabled", "endpoint closed"] {
        let events = rec.events_saying(what);
        assert_eq!(events.len(), 1, "{what}: {:?}", rec.events());
        assert_eq!(events[0].level, Level::INFO);
        assert_eq!(events[0].field("epid"), Some(epid.to_string().as_str()));
    }
}

#[test]
fn a_dead_peer_is_an_info_event() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED, 2);
    let dead = nodes[1].ep.getname();
    let rec = Recorder::new();
    rec.capture(|| {
        // A send the peer never receives (too large to be buffered).
        let send = nodes[0].ep.tsend(nodes.addr(0, 1), 1, vec![0u8; 4 << 20]);
        nodes[1].domain.clone().close().unwrap();
        let (r, _) = fabric::drive(&[nodes[0].domain.clone()], send);
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Io);
    });
    let died = rec.events_saying("peer died");
    assert_eq!(died.len(), 1, "{:?}", rec.events());
    assert_eq!(died[0].level, Level::INFO);
    assert_eq!(died[0].field("peer"), Some(dead.to_string().as_str()));
}

// ----- mrail ---------------------------------------------------------------------

#[test]
fn mrail_messages_have_op_spans_and_rail_changes_are_info_events() {
    let n = mrail_nodes::open(
        2,
        2,
        "ULONG_MAX:striping",
        Caps::MSG | Caps::TAGGED,
        ProgressKind::Manual,
    );
    let rec = Recorder::new();
    rec.capture(|| {
        let (tx, rx) = (&n.nodes[0].ep, &n.nodes[1].ep);
        let recv = rx.trecv(vec![0u8; 1 << 16], 4, 0);
        let send = tx.tsend(n.addr(0, 1), 4, vec![5u8; 1 << 16]);
        let ((s, _), (r, _)) = n.drive(futures::future::join(send, recv));
        s.unwrap();
        r.unwrap();
        tx.disable_rail(1).unwrap();
    });
    let send = op_span(&rec, "mrail.op", "tsend");
    let to = n.addr(0, 1).0.to_string();
    assert_eq!(send.field("peer"), Some(to.as_str()));
    assert_eq!(
        (send.field("tag"), send.field("len")),
        (Some("4"), Some("65536"))
    );
    assert!(send.closed(), "{send:?}");
    assert_eq!(done_event(&rec, &send).field("outcome"), Some("ok"));
    let recv = op_span(&rec, "mrail.op", "trecv");
    assert!(recv.closed(), "{recv:?}");
    let e = done_event(&rec, &recv);
    assert_eq!(
        (e.field("outcome"), e.field("len")),
        (Some("ok"), Some("65536"))
    );
    // The rail's state change: one info event naming the rail and why.
    let changes = rec.events_saying("mrail: rail 1 is");
    assert_eq!(changes.len(), 1, "{:?}", rec.events());
    let c = &changes[0];
    assert_eq!(c.level, Level::INFO);
    assert_eq!(c.field("rail"), Some("1"));
    assert_eq!(c.field("state"), Some(RailState::Down.to_string().as_str()));
    assert!(c.field("reason").is_some(), "{c:?}");
}
