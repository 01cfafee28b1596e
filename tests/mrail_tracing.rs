//! The `tracing` spans of striped operations: one span per striped message
//! or RMA operation with one child per stripe, and the per-part events, as
//! a subscriber sees them.

mod support;

use psmrail::fabric::{Caps, MrAccess, ProgressKind};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use support::mrail_nodes::{open, pattern};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records every span (name, parent name) and every event's target.
#[derive(Default)]
struct Recorder {
    next: AtomicU64,
    names: Mutex<HashMap<u64, &'static str>>,
    spans: Mutex<Vec<(&'static str, Option<&'static str>)>>,
    events: Mutex<Vec<(&'static str, Option<&'static str>)>>,
    current: Mutex<Vec<u64>>,
}

/// The subscriber: a handle on the shared recorder.
struct Shared(Arc<Recorder>);

impl std::ops::Deref for Shared {
    type Target = Recorder;

    fn deref(&self) -> &Recorder {
        &self.0
    }
}

impl Subscriber for Shared {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let names = &mut self.names.lock().unwrap();
        let parent = attrs
            .parent()
            .map(|p| p.into_u64())
            .or_else(|| self.current.lock().unwrap().last().copied())
            .and_then(|p| names.get(&p).copied());
        names.insert(id, attrs.metadata().name());
        self.spans
            .lock()
            .unwrap()
            .push((attrs.metadata().name(), parent));
        Id::from_u64(id)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let span = self.current.lock().unwrap().last().copied();
        let name = span.and_then(|s| self.names.lock().unwrap().get(&s).copied());
        self.events
            .lock()
            .unwrap()
            .push((event.metadata().target(), name));
    }

    fn enter(&self, span: &Id) {
        self.current.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, _: &Id) {
        self.current.lock().unwrap().pop();
    }
}

impl Recorder {
    fn count(&self, name: &str, parent: &str) -> usize {
        let spans = self.spans.lock().unwrap();
        spans
            .iter()
            .filter(|(n, p)| *n == name && *p == Some(parent))
            .count()
    }
}

#[test]
fn striped_messages_and_rma_have_a_span_with_one_child_per_stripe() {
    let n = open(
        2,
        2,
        "ULONG_MAX:striping",
        Caps::MSG | Caps::TAGGED | Caps::RMA,
        ProgressKind::Manual,
    );
    let rec = Arc::new(Recorder::default());
    tracing::subscriber::with_default(Shared(rec.clone()), || {
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
    let ops = rec
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.0 == "mrail.striped")
        .count();
    assert_eq!(ops, 2, "{:?}", rec.spans.lock().unwrap());
    assert_eq!(rec.count("mrail.stripe", "mrail.striped"), 4);
    assert_eq!(rec.count("mrail.rma_stripe", "mrail.rma"), 2);
    // Each part's completion is an event in its stripe's span.
    let events = rec.events.lock().unwrap();
    let parts = events
        .iter()
        .filter(|e| e.1 == Some("mrail.stripe"))
        .count();
    assert_eq!(parts, 4, "{events:?}");
    assert!(events.iter().any(|e| e.1 == Some("mrail.rma")));
}
