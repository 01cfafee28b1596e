//! Triggered operations (`FI_TRIGGER`): an operation deferred until a
//! counter reaches a threshold, then posted exactly once, as if the
//! application had posted it with a context at that moment.
//!
//! ```text
//! ep.triggered(&counter, 2).post_tsend(dest, tag, buf, ctx)?; // returns at once
//! counter.add(2);                          // fires: posted at the next progress round
//! cq.sread(None)?;                         // the tsend's entry, with ctx
//! ```
//!
//! Sends, receives (untagged and tagged) and RMA writes and reads can be
//! triggered; the RMA ones post through [`Endpoint::post_write`] and
//! [`Endpoint::post_read`], which report to the transmit CQ like the
//! others.
//!
//! # How it fits
//! Each counter with triggered operations owns one [`Triggers`] (created at the
//! first one, kept in the counter). It holds a
//! [`TriggerList`] (threshold order, FIFO for equal
//! thresholds) and a *ready* queue. The counter's listener runs after every
//! change of the success count — the application's `add`/`set` as well as the
//! operations' increments — and moves every operation whose threshold is
//! reached to the ready queue. It never posts: a counter may change inside an
//! engine's progress with the engine lock held (C, `prov/psm/src/psmx_cntr.c`,
//! defers to the next progress call for the same reason). A progress source of
//! the counter's reactor posts the ready queue, in order, through the ordinary
//! context posts ([`Endpoint::post_tsend`] and friends), so completions go to
//! the CQ and counters bound to the endpoint.
//!
//! # Failures are reported (C lost them)
//! C ignores the return value of a fired operation
//! (`prov/psm/src/psmx_cntr.c`). Here a fired post that fails gives an error CQ
//! entry with the operation's context and buffer, and counts an error on the
//! endpoint's counter; an engine that is full (`FI_EAGAIN`) is retried at the
//! next round instead. Operations still waiting when their endpoint closes
//! (noticed at the next progress round of the counter's reactor) or when the
//! counter is dropped are cancelled the same way, with `FI_ECANCELED`.
//!
//! A waiting operation holds its endpoint (and so its domain) alive until it
//! fires or is cancelled: close the endpoint to cancel.
//!
//! # Adding operation kinds
//! A kind is one [`Kind`] variant (its arguments besides the buffer) plus
//! its arms in `Kind::post` and `Kind::report`.

use super::outcome::{count, OpName};
use super::rma_ops::prepare;
use super::submit::{check_caps, Dir};
use super::trigger_list::TriggerList;
use crate::engine::{OpBuffer, PostError};
use crate::fabric::{
    Caps, CompletionFlags, Counter, CounterKind, CounterWatch, CqErrEntry, Direction, Endpoint,
    EndpointCore, FiAddr,
};
use crate::reactor::{Progress, ProgressSource, Reactor, SourceId};
use crate::{Error, ErrorKind};
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// What a triggered operation posts when it fires, besides its buffer.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Send { dest: FiAddr },
    Recv,
    TSend { dest: FiAddr, tag: u64 },
    TRecv { tag: u64, ignore: u64 },
    Write { dest: FiAddr, offset: u64, key: u64 },
    Read { dest: FiAddr, offset: u64, key: u64 },
}

/// Where a triggered operation's error entry goes.
struct Report {
    dir: Direction,
    counter: CounterKind,
    flags: CompletionFlags,
    tag: u64,
    name: &'static str,
}

impl Kind {
    fn post(self, ep: &Endpoint, buf: OpBuffer, context: u64) -> Result<(), PostError> {
        match self {
            Kind::Send { dest } => ep.post_send(dest, buf, context).map(drop),
            Kind::Recv => ep.post_recv(buf, context).map(drop),
            Kind::TSend { dest, tag } => ep.post_tsend(dest, tag, buf, context).map(drop),
            Kind::TRecv { tag, ignore } => ep.post_trecv(buf, tag, ignore, context).map(drop),
            Kind::Write { dest, offset, key } => ep.post_write(dest, buf, offset, key, context),
            Kind::Read { dest, offset, key } => ep.post_read(dest, buf, offset, key, context),
        }
    }

    fn report(self) -> Report {
        let (dir, counter, flags, tag, name) = match self {
            Kind::Send { .. } => (
                Direction::Transmit,
                CounterKind::Send,
                CompletionFlags::SEND | CompletionFlags::MSG,
                0,
                OpName::Send.as_str(),
            ),
            Kind::Recv => (
                Direction::Recv,
                CounterKind::Recv,
                CompletionFlags::RECV | CompletionFlags::MSG,
                0,
                OpName::Recv.as_str(),
            ),
            Kind::TSend { tag, .. } => (
                Direction::Transmit,
                CounterKind::Send,
                CompletionFlags::SEND | CompletionFlags::TAGGED,
                tag,
                OpName::TSend.as_str(),
            ),
            Kind::TRecv { tag, .. } => (
                Direction::Recv,
                CounterKind::Recv,
                CompletionFlags::RECV | CompletionFlags::TAGGED,
                tag,
                OpName::TRecv.as_str(),
            ),
            Kind::Write { .. } => (
                Direction::Transmit,
                CounterKind::Write,
                CompletionFlags::WRITE | CompletionFlags::RMA,
                0,
                "RMA write",
            ),
            Kind::Read { .. } => (
                Direction::Transmit,
                CounterKind::Read,
                CompletionFlags::READ | CompletionFlags::RMA,
                0,
                "RMA read",
            ),
        };
        Report {
            dir,
            counter,
            flags,
            tag,
            name,
        }
    }
}

/// One deferred operation with everything needed to post or fail it.
struct TriggeredOp {
    ep: Endpoint,
    context: u64,
    threshold: u64,
    buf: OpBuffer,
    kind: Kind,
}

impl TriggeredOp {
    /// Reports the operation as failed: an error entry on the endpoint's CQ
    /// (with the context and the buffer) and an error on its counter.
    fn fail(self, error: Error) {
        let report = self.kind.report();
        let core = &self.ep.core;
        count(core.counter(report.counter), false);
        match core.cq(report.dir) {
            Some(cq) => cq.push_err(CqErrEntry {
                context: self.context,
                flags: report.flags,
                len: 0,
                buffer: Some(self.buf),
                olen: 0,
                tag: report.tag,
                data: 0,
                error,
                prov_errno: CqErrEntry::PROV_INTERNAL,
            }),
            None => tracing::warn!(
                "triggered {} (context {:#x}) failed with no CQ bound to report it: {error}",
                report.name,
                self.context
            ),
        }
    }

    fn cancel(self, why: &str) {
        let error = Error::new(
            ErrorKind::Canceled,
            format!(
                "triggered {} (threshold {}): cancelled, {why}",
                self.kind.report().name,
                self.threshold
            ),
        );
        self.fail(error);
    }

    /// Posts the operation; hands it back if the engine is full.
    fn fire(self) -> Result<(), TriggeredOp> {
        if self.ep.core.ensure_open().is_err() {
            self.cancel("its endpoint was closed before it fired");
            return Ok(());
        }
        let TriggeredOp {
            ep,
            context,
            threshold,
            buf,
            kind,
        } = self;
        match kind.post(&ep, buf, context) {
            Ok(()) => Ok(()),
            Err(PostError { error, buffer }) if error.kind() == ErrorKind::Again => {
                Err(TriggeredOp {
                    ep,
                    context,
                    threshold,
                    buf: buffer,
                    kind,
                })
            }
            Err(PostError { error, buffer }) => {
                TriggeredOp {
                    ep,
                    context,
                    threshold,
                    buf: buffer,
                    kind,
                }
                .fail(error);
                Ok(())
            }
        }
    }
}

/// The mutable part of [`Triggers`].
#[derive(Default)]
struct State {
    waiting: TriggerList<TriggeredOp>,
    /// Fired, to be posted by the progress source, in firing order.
    ready: VecDeque<TriggeredOp>,
    /// The distinct endpoints of `waiting`, with how many ops each has
    /// there: the progress source checks these for a close.
    endpoints: Vec<(Arc<EndpointCore>, usize)>,
}

impl State {
    fn track(&mut self, ep: &Arc<EndpointCore>) {
        match self.endpoints.iter_mut().find(|(e, _)| Arc::ptr_eq(e, ep)) {
            Some((_, n)) => *n += 1,
            None => self.endpoints.push((ep.clone(), 1)),
        }
    }

    fn untrack(&mut self, ep: &Arc<EndpointCore>) {
        if let Some(i) = self.endpoints.iter().position(|(e, _)| Arc::ptr_eq(e, ep)) {
            self.endpoints[i].1 -= 1;
            if self.endpoints[i].1 == 0 {
                self.endpoints.swap_remove(i);
            }
        }
    }

    /// Moves every op whose threshold `value` reaches to `ready`.
    fn fire(&mut self, value: u64) {
        for op in self.waiting.fire(value) {
            self.untrack(&op.ep.core);
            self.ready.push_back(op);
        }
    }

    /// Removes the waiting ops of closed endpoints, keeping the others'
    /// order.
    fn take_closed(&mut self) -> Vec<TriggeredOp> {
        if self.endpoints.iter().all(|(e, _)| e.ensure_open().is_ok()) {
            return Vec::new();
        }
        self.endpoints.retain(|(e, _)| e.ensure_open().is_ok());
        let mut closed = Vec::new();
        // Drained in firing order and re-added in that order: relative
        // FIFO order among equal thresholds is kept.
        for op in self.waiting.drain() {
            if op.ep.core.ensure_open().is_ok() {
                self.waiting.add(op.threshold, op);
            } else {
                closed.push(op);
            }
        }
        closed
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.ready.is_empty()
    }
}

/// The triggered operations of one counter: its trigger list, the fired
/// operations waiting to be posted, and the progress source posting them.
pub(crate) struct Triggers {
    state: Mutex<State>,
    /// The lowest waiting threshold (`u64::MAX` when none), so that most
    /// counter changes skip the mutex. Stored under the mutex.
    lowest: AtomicU64,
    /// Something waits or is ready: the progress source has work.
    active: AtomicBool,
    reactor: Reactor,
    source: Result<SourceId, String>,
}

impl CounterWatch for Triggers {
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

impl fmt::Debug for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Triggers")
            .field("waiting", &state.waiting.len())
            .field("ready", &state.ready.len())
            .finish()
    }
}

/// The progress source posting a counter's fired operations. Holds the
/// [`Triggers`] weakly: the counter owns them.
struct TriggerSource(Weak<Triggers>);

impl ProgressSource for TriggerSource {
    fn progress(&self) -> Progress {
        match self.0.upgrade() {
            Some(t) => t.run(),
            None => Progress::Idle,
        }
    }
}

impl Triggers {
    /// The triggers of `counter`, installing them (listener and progress
    /// source) at the first call.
    fn of(counter: &Counter) -> crate::Result<Arc<Triggers>> {
        let watch = counter.triggers().get_or_init(|| {
            let reactor = counter.reactor().clone();
            let t = Arc::new_cyclic(|weak: &Weak<Triggers>| {
                let source = reactor
                    .add_source(Arc::new(TriggerSource(weak.clone())))
                    .map_err(|e| e.to_string());
                Triggers {
                    state: Mutex::new(State::default()),
                    lowest: AtomicU64::new(u64::MAX),
                    active: AtomicBool::new(false),
                    reactor,
                    source,
                }
            });
            let weak = Arc::downgrade(&t);
            counter.set_listener(Arc::new(move |value| {
                if let Some(t) = weak.upgrade() {
                    t.counter_changed(value);
                }
            }));
            t as Arc<dyn CounterWatch>
        });
        // Only this module installs a counter's watch, so it is `Triggers`.
        let any = watch.clone().into_any();
        let t = any.downcast::<Triggers>().map_err(|_| {
            Error::new(
                ErrorKind::Other,
                "triggered operation: the counter watches something else",
            )
        })?;
        match &t.source {
            Ok(_) => Ok(t),
            Err(e) => Err(Error::new(
                ErrorKind::Other,
                format!(
                    "triggered operation: the counter's progress source could not be added: {e}"
                ),
            )),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `lowest` and `active` from `state` (under the mutex).
    fn publish(&self, state: &State) {
        self.lowest
            .store(state.waiting.next_threshold().unwrap_or(u64::MAX), SeqCst);
        self.active.store(!state.is_idle(), SeqCst);
    }

    /// Adds `op`; fires it at once if the counter is already there.
    fn add(&self, counter: &Counter, op: TriggeredOp) {
        let mut state = self.lock();
        state.track(&op.ep.core);
        state.waiting.add(op.threshold, op);
        self.publish(&state);
        // Read after publishing `lowest` (both SeqCst): a change that
        // completed before this read is seen here, a later one sees the
        // new `lowest` in `counter_changed`.
        state.fire(counter.value());
        self.publish(&state);
        drop(state);
        // Even when nothing is ready yet: the source is active now (it
        // watches the endpoint for a close).
        self.reactor.notify();
    }

    /// The counter's listener: may run inside an engine's progress, so it
    /// only moves operations to the ready queue.
    fn counter_changed(&self, value: u64) {
        if value < self.lowest.load(SeqCst) {
            return;
        }
        let mut state = self.lock();
        state.fire(value);
        self.publish(&state);
        let ready = !state.ready.is_empty();
        drop(state);
        if ready {
            self.reactor.notify();
        }
    }

    /// One progress step: cancels the waiting ops of closed endpoints and
    /// posts the ready ones, in order.
    fn run(&self) -> Progress {
        if !self.active.load(SeqCst) {
            return Progress::Idle;
        }
        let (closed, mut batch) = {
            let mut state = self.lock();
            let closed = state.take_closed();
            let batch = std::mem::take(&mut state.ready);
            self.publish(&state);
            (closed, batch)
        };
        let made = !closed.is_empty() || !batch.is_empty();
        for op in closed {
            op.cancel("its endpoint was closed");
        }
        while let Some(op) = batch.pop_front() {
            if let Err(op) = op.fire() {
                // The engine is full: retry the rest, in order, next round.
                batch.push_front(op);
                let mut state = self.lock();
                while let Some(op) = batch.pop_back() {
                    state.ready.push_front(op);
                }
                self.publish(&state);
                break;
            }
        }
        Progress::from(made)
    }
}

impl Drop for Triggers {
    /// The counter is gone: nothing can fire any more, so every waiting or
    /// unposted operation is cancelled.
    fn drop(&mut self) {
        if let Ok(id) = self.source {
            self.reactor.remove_source(id);
        }
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let ready = std::mem::take(&mut state.ready);
        let waiting = state.waiting.drain();
        state.endpoints.clear();
        for op in ready.into_iter().chain(waiting) {
            op.cancel("its counter was dropped");
        }
    }
}

/// Operations deferred until a counter reaches a threshold
/// (`FI_TRIGGER`), from [`Endpoint::triggered`].
///
/// Each method checks what posting-time code can get wrong — the endpoint
/// is open, has the operation's caps (and, for RMA, the domain an RMA
/// transport), and knows `dest` — holds the buffer
/// and returns at once (the operation's own argument checks, such as
/// reserved tag bits or the message size, run when it fires); the operation is posted exactly once, when the
/// counter's success count first reaches the threshold (at once if it is
/// there already), during a progress round of the counter's domain, and
/// reports to the endpoint's CQ with `context` like
/// [`Endpoint::post_send`] and friends. Operations fire in threshold order,
/// equal thresholds in posting order. A fired operation that fails, and a
/// waiting one whose endpoint closes or whose counter is dropped, gives an
/// error CQ entry with its context and buffer (`FI_ECANCELED` for the
/// latter two).
///
/// ```
/// use psmrail::fabric::{getinfo, Caps, CounterAttr, CqAttr, CqBind, EngineChoice, Fabric, Hints};
/// # use psmrail::config::PsmConfig;
/// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).delay(std::time::Duration::ZERO).build()?;
/// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let domain = Fabric::open(&info)?.domain(&info)?;
/// let cq = domain.cq(CqAttr::new())?;
/// let ep = domain.endpoint(&info).caps(Caps::MSG).bind_cq(&cq, CqBind::RECV).enable()?;
/// let counter = domain.counter(CounterAttr::new())?;
/// ep.triggered(&counter, 1).post_recv(vec![0u8; 8], 42).map_err(|e| e.error)?;
/// counter.add(1); // the receive is posted at the next progress round
/// ep.close()?;    // it never matches; closing cancels it
/// let e = loop {
///     if let Some(e) = cq.readerr() { break e; }
///     let _ = cq.read(); // progresses (manual mode)
/// };
/// assert_eq!((e.context, e.error.kind()), (42, psmrail::ErrorKind::Canceled));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a Triggered does nothing until one of its post methods is called"]
pub struct Triggered<'a> {
    ep: &'a Endpoint,
    counter: &'a Counter,
    threshold: u64,
}

impl Triggered<'_> {
    fn defer(&self, kind: Kind, buf: OpBuffer, context: u64) -> Result<(), PostError> {
        let core = &self.ep.core;
        let checked = (|| {
            match kind {
                Kind::Send { dest } => {
                    check_caps(core, Caps::MSG, Dir::Send, OpName::Send)?;
                    core.resolve(dest)?;
                }
                Kind::TSend { dest, .. } => {
                    check_caps(core, Caps::TAGGED, Dir::Send, OpName::TSend)?;
                    core.resolve(dest)?;
                }
                Kind::Recv => check_caps(core, Caps::MSG, Dir::Recv, OpName::Recv)?,
                Kind::TRecv { .. } => check_caps(core, Caps::TAGGED, Dir::Recv, OpName::TRecv)?,
                // Open, caps, an RMA transport and `dest`, as the RMA call
                // itself checks them; the key is the target's to judge.
                Kind::Write { dest, .. } => {
                    prepare(core, Caps::RMA, Caps::WRITE, "triggered RMA write", dest).map(drop)?
                }
                Kind::Read { dest, .. } => {
                    prepare(core, Caps::RMA, Caps::READ, "triggered RMA read", dest).map(drop)?
                }
            }
            Triggers::of(self.counter)
        })();
        let triggers = match checked {
            Ok(t) => t,
            Err(error) => return Err(PostError { error, buffer: buf }),
        };
        triggers.add(
            self.counter,
            TriggeredOp {
                ep: self.ep.clone(),
                context,
                threshold: self.threshold,
                buf,
                kind,
            },
        );
        Ok(())
    }

    /// A triggered [`Endpoint::post_send`].
    ///
    /// # Errors
    /// Now: a closed endpoint, missing `FI_MSG`/`FI_SEND` caps, a `dest`
    /// the AV did not return; the buffer comes back. Later failures go to
    /// the CQ.
    pub fn post_send(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> Result<(), PostError> {
        self.defer(Kind::Send { dest }, buf.into(), context)
    }

    /// A triggered [`Endpoint::post_recv`].
    ///
    /// # Errors
    /// Now: a closed endpoint, missing `FI_MSG`/`FI_RECV` caps; the buffer
    /// comes back. Later failures go to the CQ.
    pub fn post_recv(&self, buf: impl Into<OpBuffer>, context: u64) -> Result<(), PostError> {
        self.defer(Kind::Recv, buf.into(), context)
    }

    /// A triggered [`Endpoint::post_tsend`].
    ///
    /// # Errors
    /// As [`post_send`](Self::post_send), with `FI_TAGGED`.
    pub fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> Result<(), PostError> {
        self.defer(Kind::TSend { dest, tag }, buf.into(), context)
    }

    /// A triggered [`Endpoint::post_trecv`].
    ///
    /// # Errors
    /// As [`post_recv`](Self::post_recv), with `FI_TAGGED`.
    pub fn post_trecv(
        &self,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Result<(), PostError> {
        self.defer(Kind::TRecv { tag, ignore }, buf.into(), context)
    }

    /// A triggered [`Endpoint::post_write`]: when it fires, writes `buf` to
    /// `remote_offset` of the region with `key` at `dest`; the completion
    /// (`FI_WRITE | FI_RMA`) goes to the transmit CQ with `context`.
    ///
    /// # Errors
    /// Now: a closed endpoint, missing `FI_RMA` (with `FI_WRITE` if the
    /// endpoint has direction bits), a `dest` the AV did not return; the
    /// buffer comes back. Later failures, such as a key the target does not
    /// know (`FI_EACCES`), go to the CQ.
    pub fn post_write(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        context: u64,
    ) -> Result<(), PostError> {
        let kind = Kind::Write {
            dest,
            offset: remote_offset,
            key,
        };
        self.defer(kind, buf.into(), context)
    }

    /// A triggered [`Endpoint::post_read`]: when it fires, reads
    /// `buf.len()` bytes at `remote_offset` of the region with `key` at
    /// `dest` into `buf`; the completion (`FI_READ | FI_RMA`) goes to the
    /// transmit CQ with `context` and the filled buffer.
    ///
    /// # Errors
    /// As [`post_write`](Self::post_write), with `FI_READ`.
    pub fn post_read(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        context: u64,
    ) -> Result<(), PostError> {
        let kind = Kind::Read {
            dest,
            offset: remote_offset,
            key,
        };
        self.defer(kind, buf.into(), context)
    }
}

impl Endpoint {
    /// Operations on this endpoint deferred until `counter`'s success count
    /// reaches `threshold` (`FI_TRIGGER` with a threshold context); see
    /// [`Triggered`].
    pub fn triggered<'a>(&'a self, counter: &'a Counter, threshold: u64) -> Triggered<'a> {
        Triggered {
            ep: self,
            counter,
            threshold,
        }
    }
}
