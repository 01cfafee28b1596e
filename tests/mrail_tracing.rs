//! The `tracing` spans of striped operations: one span per striped message
//! or RMA operation with one child per stripe, and the per-part events, as
//! a subscriber sees them.

mod support;

use psmrail::fabric::{Caps, MrAccess, ProgressKind};
use support::mrail_nodes::open;
use support::payload::pattern;
use support::trace_capture::Recorder;

#[test]
fn striped_messages_and_rma_have_a_span_with_one_child_per_stripe() {
    let n = open(
        2,
        2,
        "ULONG_MAX:striping",
        Caps::MSG | Caps::TAGGED | Caps::RMA,
        ProgressKind::Manual,
    );
    let rec = Recorder::new();
    rec.capture(|| {
        let (tx, rx) = (&n.nodes[0].ep, &n.nodes[1].ep);
        let recv = rx.trecv(vec![0u8; 1 << 20], 1, 0);
        let send = tx.tsend(n.addr(0, 1), 1, pattern(1 << 20, 1));
        let ((s, _), (r, buf)) = n.drive(futures::future::join(send, recv));
        s.unwrap();
        r.unwrap();
        assert!(buf.as_slice() == pattern(1 << 20, 1));
        let mr = n.nodes[1]
            .domain
            .register(vec![0u8; 1 << 20], MrAccess::REMOTE_WRITE, None)
            .unwrap();
        let key = n.nodes[0].domain.map_raw(&mr.raw_key()).unwrap();
        let (w, _) = n.drive(tx.write(n.addr(0, 1), pattern(1 << 20, 2), 0, key));
        w.unwrap();
    });
    // The send and the receive each: an operation span, a stripe per rail.
    assert_eq!(rec.count("mrail.striped", "mrail.striped"), 0);
    let ops = rec.spans_named("mrail.striped").len();
    assert_eq!(ops, 2, "{:?}", rec.spans());
    assert_eq!(rec.count("mrail.stripe", "mrail.striped"), 4);
    assert_eq!(rec.count("mrail.rma_stripe", "mrail.rma"), 2);
    // Each part's completion is an event in its stripe's span.
    let events = rec.events();
    let in_span = |name: &str| {
        events
            .iter()
            .filter(|e| e.span.and_then(|s| rec.name_of(s)) == Some(name))
            .count()
    };
    assert_eq!(in_span("mrail.stripe"), 4, "{events:?}");
    assert!(in_span("mrail.rma") > 0, "{events:?}");
}
