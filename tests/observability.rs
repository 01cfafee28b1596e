//! Observability as an application sees it: the `tracing` spans of
//! operations (`psm.op`, `mrail.op`) and the events that end them, the
//! info events of endpoint lifecycle, peer death and rail state changes,
//! and the figures of `Endpoint::stats`, `Domain::stats`,
//! `MrailEndpoint::stats` and `MrailDomain::stats`, counted exactly.
//!
//! Everything runs on the soft engine in this process, except the native
//! engine's figures, which run in a child process (PSM allows one
//! endpoint per process; `PSM2_DEVICES=self,shm`, skipped without the
//! library unless `PSMRAIL_REQUIRE_NATIVE=1`).

mod support;
use support::fabric;

use fabric::{Cfg, Nodes};
use psmrail::engine::soft::wire::ENTRY_OVERHEAD;
use psmrail::fabric::{Caps, EndpointStats, ProgressKind};
use psmrail::mrail::RailState;
use psmrail::ops::MessageEndpoint;
use psmrail::ErrorKind;
use std::time::Duration;
use support::mrail_nodes;
use support::peer::{self, Peer};
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

/// Progresses every node until `cond` holds (no time limit of its own:
/// the test harness's is the bound).
fn progress_until(nodes: &Nodes, mut cond: impl FnMut() -> bool) {
    while !cond() {
        nodes.progress();
        std::thread::yield_now();
    }
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
fn a_dead_peer_is_an_info_event_and_counted() {
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
    let s = nodes[0].ep.stats();
    assert_eq!((s.dead_peers, s.errors, s.msgs_sent), (1, 1, 0), "{s:?}");
    assert_eq!(nodes[0].domain.stats(), s);
}

// ----- figures -------------------------------------------------------------------

const SIZES: [usize; 6] = [0, 1, 8, 100, 4096, 70_000];

#[test]
fn messages_and_bytes_are_counted_exactly_on_both_sides() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED | Caps::MSG, 2);
    let (a, b) = (&nodes[0].ep, &nodes[1].ep);
    let total: usize = SIZES.iter().sum();
    for (i, &n) in SIZES.iter().enumerate() {
        let recv = b.trecv(vec![0u8; n], i as u64, 0);
        let send = a.tsend(nodes.addr(0, 1), i as u64, vec![9u8; n]);
        let ((s, _), (r, _)) = nodes.drive(futures::future::join(send, recv));
        s.unwrap();
        assert_eq!(r.unwrap().len, n);
        // Untagged, the other way.
        let recv = a.recv(vec![0u8; n]);
        let send = b.send(nodes.addr(1, 0), vec![7u8; n]);
        let ((s, _), (r, _)) = nodes.drive(futures::future::join(send, recv));
        s.unwrap();
        assert_eq!(r.unwrap().len, n);
    }
    let k = SIZES.len() as u64;
    for ep in [a, b] {
        let s = ep.stats();
        assert_eq!((s.msgs_sent, s.bytes_sent), (k, total as u64), "{s:?}");
        assert_eq!(
            (s.msgs_received, s.bytes_received),
            (k, total as u64),
            "{s:?}"
        );
        assert_eq!((s.errors, s.eagain, s.dead_peers), (0, 0, 0), "{s:?}");
        assert_eq!((s.unexpected_msgs, s.unexpected_bytes), (Some(0), Some(0)));
    }
    // One endpoint per domain here: the domain's totals are its figures.
    assert_eq!(nodes[0].domain.stats(), a.stats());
}

#[test]
fn completions_to_a_cq_and_injects_count_too() {
    use psmrail::fabric::{CqAttr, CqBind};
    let nodes = fabric::open_with(Cfg::MANUAL_MQ, Caps::TAGGED, 2, |_, d, b| {
        let cq = d.cq(CqAttr::new()).unwrap();
        b.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
    });
    let (a, b) = (&nodes[0].ep, &nodes[1].ep);
    b.post_trecv(vec![0u8; 16], 1, 0, 11).unwrap();
    b.post_trecv(vec![0u8; 2], 2, 0, 12).unwrap();
    a.post_tsend(nodes.addr(0, 1), 1, vec![1u8; 10], 13)
        .unwrap();
    a.tinject(nodes.addr(0, 1), 2, b"abc").unwrap();
    progress_until(&nodes, || {
        let (sa, sb) = (a.stats(), b.stats());
        sa.msgs_sent == 2 && sb.msgs_received + sb.errors == 2
    });
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.msgs_sent, sa.bytes_sent, sa.errors),
        (2, 13, 0),
        "{sa:?}"
    );
    // The second receive was truncated (3 bytes into 2).
    assert_eq!(
        (sb.msgs_received, sb.bytes_received, sb.errors),
        (1, 10, 1),
        "{sb:?}"
    );
}

#[test]
fn the_unexpected_queue_fills_while_messages_wait_and_empties_again() {
    let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED, 2);
    let (a, b) = (&nodes[0].ep, &nodes[1].ep);
    let before = b.stats().unexpected_total.expect("the soft engine counts");
    for (tag, n) in [(1u64, 10usize), (2, 20), (3, 30)] {
        a.tinject(nodes.addr(0, 1), tag, &vec![0u8; n]).unwrap();
    }
    progress_until(&nodes, || b.stats().unexpected_msgs == Some(3));
    let s = b.stats();
    // The payloads, and the engine's bookkeeping for each.
    assert_eq!(s.unexpected_bytes, Some(60 + 3 * ENTRY_OVERHEAD), "{s:?}");
    assert_eq!(s.unexpected_total, Some(before + 3), "{s:?}");
    assert_eq!(s.msgs_received, 0);
    for (tag, n) in [(3u64, 30usize), (1, 10), (2, 20)] {
        let (r, _) = nodes.drive(b.trecv(vec![0u8; 64], tag, 0));
        assert_eq!(r.unwrap().len, n);
    }
    let s = b.stats();
    assert_eq!(
        (s.unexpected_msgs, s.unexpected_bytes),
        (Some(0), Some(0)),
        "{s:?}"
    );
    assert_eq!(
        (s.unexpected_total, s.msgs_received, s.bytes_received),
        (Some(before + 3), 3, 60)
    );
}

#[test]
fn a_domain_totals_its_endpoints_gone_ones_included() {
    let info = fabric::info(Cfg::MANUAL_MQ, Caps::TAGGED | Caps::MSG);
    let domain = psmrail::fabric::Fabric::open(&info)
        .unwrap()
        .domain(&info)
        .unwrap();
    let av = domain.av(psmrail::fabric::AvAttr::new()).unwrap();
    let me = av.insert(&[domain.epid()]).remove(0).unwrap();
    let tagged = domain
        .endpoint(&info)
        .caps(Caps::TAGGED)
        .bind_av(&av)
        .enable()
        .unwrap();
    let msg = domain
        .endpoint(&info)
        .caps(Caps::MSG)
        .bind_av(&av)
        .enable()
        .unwrap();
    let reactor = domain.reactor();
    let recv = tagged.trecv(vec![0u8; 8], 5, 0);
    tagged.tinject(me, 5, &[1u8; 8]).unwrap();
    let (r, _) = reactor.block_on(recv);
    r.unwrap();
    let recv = msg.recv(vec![0u8; 8]);
    msg.inject(me, &[1u8; 3]).unwrap();
    let (r, _) = reactor.block_on(recv);
    r.unwrap();
    let (t, m) = (tagged.stats(), msg.stats());
    assert_eq!((t.msgs_sent, t.bytes_sent, t.msgs_received), (1, 8, 1));
    assert_eq!((m.msgs_sent, m.bytes_sent, m.msgs_received), (1, 3, 1));
    let mut sum = t;
    sum.add_ops(&m);
    assert_eq!(domain.stats(), sum);
    msg.close().unwrap();
    drop(tagged);
    assert_eq!(domain.stats(), sum);
}

// ----- mrail ---------------------------------------------------------------------

/// Sends from node 0 to node 1 `SIZES` tagged messages over 2 rails.
fn mrail_exchange(n: &mrail_nodes::MrailNodes) {
    let (tx, rx) = (&n.nodes[0].ep, &n.nodes[1].ep);
    for (i, &len) in SIZES.iter().enumerate() {
        let recv = rx.trecv(vec![0u8; len], i as u64, 0);
        let send = tx.tsend(n.addr(0, 1), i as u64, vec![3u8; len]);
        let ((s, _), (r, _)) = n.drive(futures::future::join(send, recv));
        s.unwrap();
        assert_eq!(r.unwrap().len, len);
    }
}

#[test]
fn mrail_figures_match_the_psm_endpoints_and_total_per_domain() {
    let n = mrail_nodes::open(
        2,
        2,
        "64:fixed,ULONG_MAX:striping",
        Caps::MSG | Caps::TAGGED,
        ProgressKind::Manual,
    );
    mrail_exchange(&n);
    let total: u64 = SIZES.iter().sum::<usize>() as u64;
    let k = SIZES.len() as u64;
    let (tx, rx) = (&n.nodes[0].ep, &n.nodes[1].ep);
    let (st, sr) = (tx.stats().endpoint, rx.stats().endpoint);
    assert_eq!(
        (st.msgs_sent, st.bytes_sent, st.msgs_received),
        (k, total, 0),
        "{st:?}"
    );
    assert_eq!(
        (sr.msgs_received, sr.bytes_received, sr.msgs_sent),
        (k, total, 0),
        "{sr:?}"
    );
    assert_eq!(
        (sr.errors, sr.unexpected_msgs, sr.unexpected_bytes),
        (0, Some(0), Some(0))
    );
    // The trait gives the same figures for either provider.
    fn figures<E: MessageEndpoint>(ep: &E) -> EndpointStats {
        ep.stats()
    }
    assert_eq!(figures(tx), st);
    assert_eq!(n.nodes[0].domain.stats(), st);
    // A message waiting unexpected, then an error completion.
    tx.tinject(n.addr(0, 1), 50, b"early").unwrap();
    while rx.stats().endpoint.unexpected_msgs != Some(1) {
        for d in n.domains() {
            d.reactor().progress();
        }
    }
    assert_eq!(rx.stats().endpoint.unexpected_bytes, Some(5));
    let (r, _) = n.drive(rx.trecv(vec![0u8; 2], 50, 0));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Trunc);
    let sr = rx.stats().endpoint;
    assert_eq!(
        (sr.unexpected_msgs, sr.errors, sr.msgs_received),
        (Some(0), 1, k)
    );
    assert_eq!(figures(&n.nodes[0].ep).msgs_sent, k + 1);
}

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

// ----- native ----------------------------------------------------------------------

/// The figures on real PSM, in a child process: an endpoint talking to
/// itself through PSM's self device counts every message and byte once
/// each way, messages that waited unexpected included; PSM reports
/// nothing about its unexpected queue.
#[test]
fn native_figures_are_exact() {
    let test = "native_figures_are_exact";
    if peer::role().is_none() {
        if !support::native::available() {
            return;
        }
        let mut env = vec![];
        if std::env::var_os("PSM2_DEVICES").is_none() {
            env.push(("PSM2_DEVICES", "self,shm"));
        }
        let child = Peer::spawn(test, "solo", &env);
        assert!(
            child.wait(Duration::from_secs(120)).success(),
            "{test} failed in its process"
        );
        return;
    }
    let mut hints = fabric::hints(Cfg::MANUAL_MQ, Caps::TAGGED | Caps::MSG);
    hints = hints.engine(psmrail::fabric::EngineChoice::Native);
    let info = match psmrail::fabric::getinfo(Some(&hints)) {
        Ok(mut v) => v.remove(0),
        Err(e) => {
            assert!(
                !support::native::required(),
                "PSMRAIL_REQUIRE_NATIVE=1 but {e}"
            );
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let domain = psmrail::fabric::Fabric::open(&info)
        .unwrap()
        .domain(&info)
        .unwrap();
    let av = domain.av(psmrail::fabric::AvAttr::new()).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    let reactor = domain.reactor();
    let total: usize = SIZES.iter().sum();
    for (i, &n) in SIZES.iter().enumerate() {
        let recv = ep.trecv(vec![0u8; n], i as u64, 0);
        let (s, _) = reactor.block_on(ep.tsend(me, i as u64, vec![1u8; n]));
        s.unwrap();
        let (r, _) = reactor.block_on(recv);
        assert_eq!(r.unwrap().len, n);
        let recv = ep.recv(vec![0u8; n]);
        let (s, _) = reactor.block_on(ep.send(me, vec![2u8; n]));
        s.unwrap();
        let (r, _) = reactor.block_on(recv);
        assert_eq!(r.unwrap().len, n);
    }
    let k = 2 * SIZES.len() as u64;
    let s = ep.stats();
    assert_eq!((s.msgs_sent, s.bytes_sent), (k, 2 * total as u64), "{s:?}");
    assert_eq!(
        (s.msgs_received, s.bytes_received),
        (k, 2 * total as u64),
        "{s:?}"
    );
    assert_eq!((s.errors, s.dead_peers), (0, 0), "{s:?}");
    let queue = (s.unexpected_msgs, s.unexpected_bytes, s.unexpected_total);
    assert_eq!(queue, (None, None, None), "{s:?}");
    // Messages injected before their receives arrive unexpected.
    for tag in 0..3u64 {
        ep.tinject(me, 100 + tag, b"early").unwrap();
    }
    for tag in 0..3u64 {
        let (r, _) = reactor.block_on(ep.trecv(vec![0u8; 8], 100 + tag, 0));
        assert_eq!(r.unwrap().len, 5);
    }
    // A truncated receive is an error completion.
    let recv = ep.trecv(vec![0u8; 2], 200, 0);
    ep.tinject(me, 200, b"hello").unwrap();
    let (r, _) = reactor.block_on(recv);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Trunc);
    let s = ep.stats();
    assert_eq!(
        (s.errors, s.msgs_received, s.msgs_sent),
        (1, k + 3, k + 4),
        "{s:?}"
    );
    assert_eq!(domain.stats(), s);
    ep.close().unwrap();
    domain.close().unwrap();
}
