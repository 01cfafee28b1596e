//! A `tracing` subscriber for tests: records every span (name, parent,
//! fields, whether it was closed) and every event (level, target, fields,
//! the span it happened in), for assertions after the traced code ran.
//!
//! ```ignore
//! let rec = Recorder::new();
//! rec.capture(|| { /* code */ });
//! let spans = rec.spans_named("psm.op");
//! ```
//!
//! One process-wide subscriber (installed on first use) routes to the
//! recorder that is capturing on the current thread, and a span's later
//! doings (entered, recorded, closed, on any thread) to the recorder that
//! made it. A thread-scoped subscriber (`with_default`) would race with
//! tests running beside it: a callsite first reached on another thread
//! while the scoped one is being installed may keep the interest computed
//! without it and never report to it. Here every callsite asks each time.
//! Threads that capture nothing (progress threads, other tests) record
//! nothing. Field values are kept as text (`Debug` of the value; strings
//! without quotes).
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::ThreadId;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// One span as recorded.
#[derive(Clone, Debug)]
pub(crate) struct SpanRec {
    pub id: u64,
    pub name: &'static str,
    pub parent: Option<u64>,
    pub fields: HashMap<String, String>,
    /// Handles still alive (0: closed).
    pub refs: usize,
}

impl SpanRec {
    /// Whether the last handle was dropped.
    pub(crate) fn closed(&self) -> bool {
        self.refs == 0
    }

    /// A field's value as text.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// One event as recorded.
#[derive(Clone, Debug)]
pub(crate) struct EventRec {
    pub level: Level,
    pub target: String,
    /// The span it happened in (explicit parent, else the thread's current).
    pub span: Option<u64>,
    /// Its fields, the message as `message`.
    pub fields: HashMap<String, String>,
}

impl EventRec {
    /// A field's value as text.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// The message.
    pub(crate) fn message(&self) -> &str {
        self.field("message").unwrap_or("")
    }
}

#[derive(Default)]
struct State {
    spans: Vec<SpanRec>,
    events: Vec<EventRec>,
    stacks: HashMap<ThreadId, Vec<u64>>,
}

/// The shared record; [`subscriber`](Self::subscriber) gives a subscriber
/// writing into it.
#[derive(Clone)]
pub(crate) struct Recorder {
    state: Arc<Mutex<State>>,
    /// The most verbose level it records.
    max: LevelFilter,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            state: Arc::default(),
            max: LevelFilter::TRACE,
        }
    }
}

thread_local! {
    /// The recorder capturing on this thread.
    static ACTIVE: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Span ids, unique in the process, and the recorder that owns each span.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static OWNERS: Mutex<Option<HashMap<u64, Recorder>>> = Mutex::new(None);
static INSTALL: Once = Once::new();

fn active() -> Option<Recorder> {
    ACTIVE.with(|a| a.borrow().clone())
}

fn owner(id: &Id) -> Option<Recorder> {
    OWNERS
        .lock()
        .unwrap()
        .as_ref()
        .and_then(|m| m.get(&id.into_u64()).cloned())
}

/// The process-wide subscriber.
struct Router;

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder::default()
    }

    /// Runs `f` with this recorder capturing what this thread traces.
    pub(crate) fn capture<T>(&self, f: impl FnOnce() -> T) -> T {
        INSTALL.call_once(|| {
            tracing::subscriber::set_global_default(Router)
                .expect("no other global subscriber in a test using trace_capture");
        });
        struct Restore(Option<Recorder>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let prev = self.0.take();
                ACTIVE.with(|a| *a.borrow_mut() = prev);
            }
        }
        let prev = ACTIVE.with(|a| a.borrow_mut().replace(self.clone()));
        let _restore = Restore(prev);
        f()
    }

    /// [`capture`](Self::capture), wanting nothing more verbose than
    /// `level` (as a filtering subscriber would).
    pub(crate) fn capture_up_to<T>(&self, level: Level, f: impl FnOnce() -> T) -> T {
        Recorder {
            max: LevelFilter::from_level(level),
            ..self.clone()
        }
        .capture(f)
    }

    /// Every span so far.
    pub(crate) fn spans(&self) -> Vec<SpanRec> {
        self.state.lock().unwrap().spans.clone()
    }

    /// The spans called `name`.
    pub(crate) fn spans_named(&self, name: &str) -> Vec<SpanRec> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    }

    /// The span with `id`.
    pub(crate) fn span(&self, id: u64) -> Option<SpanRec> {
        self.spans().into_iter().find(|s| s.id == id)
    }

    /// Every event so far.
    pub(crate) fn events(&self) -> Vec<EventRec> {
        self.state.lock().unwrap().events.clone()
    }

    /// The events that happened in span `id`.
    pub(crate) fn events_in(&self, id: u64) -> Vec<EventRec> {
        self.events()
            .into_iter()
            .filter(|e| e.span == Some(id))
            .collect()
    }

    /// The events whose message contains `text`.
    pub(crate) fn events_saying(&self, text: &str) -> Vec<EventRec> {
        self.events()
            .into_iter()
            .filter(|e| e.message().contains(text))
            .collect()
    }

    /// The name of span `id`.
    pub(crate) fn name_of(&self, id: u64) -> Option<&'static str> {
        self.span(id).map(|s| s.name)
    }

    /// How many spans called `name` have a parent called `parent`.
    pub(crate) fn count(&self, name: &str, parent: &str) -> usize {
        let spans = self.spans();
        spans
            .iter()
            .filter(|s| {
                s.name == name
                    && s.parent
                        .and_then(|p| spans.iter().find(|x| x.id == p))
                        .is_some_and(|p| p.name == parent)
            })
            .count()
    }

    fn current(state: &State) -> Option<u64> {
        state
            .stacks
            .get(&std::thread::current().id())
            .and_then(|s| s.last().copied())
    }
}

impl Recorder {
    fn on_new_span(&self, id: u64, attrs: &Attributes<'_>) {
        let mut st = self.state.lock().unwrap();
        let parent = match attrs.parent() {
            Some(p) => Some(p.into_u64()),
            None if attrs.is_contextual() => Recorder::current(&st),
            None => None,
        };
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        st.spans.push(SpanRec {
            id,
            name: attrs.metadata().name(),
            parent,
            fields,
            refs: 1,
        });
    }

    fn on_record(&self, span: &Id, values: &Record<'_>) {
        let mut st = self.state.lock().unwrap();
        if let Some(s) = st.spans.iter_mut().find(|s| s.id == span.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>) {
        let mut st = self.state.lock().unwrap();
        let span = match event.parent() {
            Some(p) => Some(p.into_u64()),
            None if event.is_contextual() => Recorder::current(&st),
            None => None,
        };
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        st.events.push(EventRec {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            span,
            fields,
        });
    }

    fn on_enter(&self, span: &Id) {
        let mut st = self.state.lock().unwrap();
        st.stacks
            .entry(std::thread::current().id())
            .or_default()
            .push(span.into_u64());
    }

    fn on_exit(&self, span: &Id) {
        let mut st = self.state.lock().unwrap();
        if let Some(stack) = st.stacks.get_mut(&std::thread::current().id()) {
            if let Some(i) = stack.iter().rposition(|s| *s == span.into_u64()) {
                stack.remove(i);
            }
        }
    }

    /// `+1` or `-1` on a span's handles; whether it is now closed.
    fn on_refs(&self, id: &Id, up: bool) -> bool {
        let mut st = self.state.lock().unwrap();
        match st.spans.iter_mut().find(|s| s.id == id.into_u64()) {
            Some(s) if up => {
                s.refs += 1;
                false
            }
            Some(s) => {
                s.refs = s.refs.saturating_sub(1);
                s.refs == 0
            }
            None => false,
        }
    }
}

impl Subscriber for Router {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }

    fn enabled(&self, m: &Metadata<'_>) -> bool {
        ACTIVE.with(|a| a.borrow().as_ref().is_some_and(|r| *m.level() <= r.max))
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = active() {
            r.on_new_span(id, attrs);
            OWNERS
                .lock()
                .unwrap()
                .get_or_insert_with(HashMap::new)
                .insert(id, r);
        }
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(r) = owner(span) {
            r.on_record(span, values);
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let r = match event.parent() {
            Some(p) => owner(p),
            None => active(),
        };
        if let Some(r) = r {
            r.on_event(event);
        }
    }

    fn enter(&self, span: &Id) {
        if let Some(r) = owner(span) {
            r.on_enter(span);
        }
    }

    fn exit(&self, span: &Id) {
        if let Some(r) = owner(span) {
            r.on_exit(span);
        }
    }

    fn clone_span(&self, id: &Id) -> Id {
        if let Some(r) = owner(id) {
            r.on_refs(id, true);
        }
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        match owner(&id) {
            Some(r) => r.on_refs(&id, false),
            None => false,
        }
    }
}
