//! Posting the libfabric way: an operation with a user context whose
//! completion goes to the completion queue bound to the endpoint (and its
//! counters), for code written around `fi_cq_read` rather than `.await`.
//!
//! ```text
//! ep.post_trecv(buf, tag, 0, ctx)?;     // returns at once
//! loop { if let Some(e) = cq.read()? { /* e.context == ctx, e.buffer */ } }
//! ```
//!
//! Each posted operation is followed by a small *route* (one allocation)
//! registered as the waker of its completion slot: when the engine
//! completes the slot — inside whichever progress call ran, the CQ read's
//! own in manual mode — the route takes the completion and pushes a CQ
//! entry carrying the context, the length, tag, source and the buffer
//! handed back (or an error entry, readable with `readerr`), and bumps the
//! counters. A route never calls into the engine when woken, so it is safe
//! to run inside the engine's progress.
//!
//! A route of an MQ send or directed receive that did not finish at once
//! registers with the domain's peer book: when the peer dies (the watch
//! tells it from progress) a receive is cancelled, and what cannot be
//! cancelled gives up its slot; either way the CQ gets an `FI_EIO` error
//! entry naming the peer (an empty buffer where the engine keeps the real
//! one), and the counter an error. A small state word makes sure exactly
//! one of the two paths delivers.
//!
//! The route counts the completion in the endpoint's statistics and ends
//! the operation's span (when traced) with its event.

use super::multi_post::MultiState;
use super::op_span;
use super::outcome::{count, status_error, OpName};
use super::pending::{dead_completion, peer_error, Carrier, Detached};
use super::recv::{source_of, RecvKind};
use crate::engine::{MqCompletion, OpBuffer, PostError};
use crate::fabric::{
    CompletionFlags, CounterKind, CqEntry, CqErrEntry, Direction, Endpoint, EndpointCore, FiAddr,
};
use crate::proto::peer_watch::{Death, Doomed, PeerRef};
use crate::reactor::{OpKey, OpStatus};
use crate::{Error, ErrorKind};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll, Wake, Waker};

/// Route states: waiting, being delivered (by the waker or the peer
/// watch), delivered.
const IDLE: u8 = 0;
const BUSY: u8 = 1;
const DONE: u8 = 2;

/// A handle on an operation posted with a context, for [`Endpoint::cancel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    key: OpKey,
    carrier: Carrier,
    receive: bool,
}

/// What the route needs to build the completion entry.
struct Route {
    ep: Arc<EndpointCore>,
    key: OpKey,
    context: u64,
    name: OpName,
    recv: Option<RecvKind>,
    carrier: Carrier,
    peer: Option<PeerRef>,
    /// `IDLE`, `BUSY` or `DONE`.
    state: AtomicU8,
    /// The peer's death, once the watch told us.
    doomed: OnceLock<Arc<Death>>,
    /// A receive was cancelled (or tried) for it.
    cancel_tried: AtomicBool,
    /// The operation's span, if traced; closed with the route.
    span: Option<tracing::Span>,
    /// The multi-receive this receive fills a part of, if any.
    multi: Option<Arc<MultiState>>,
}

impl Wake for Route {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let table = self.ep.domain().table();
        loop {
            if self
                .state
                .compare_exchange(IDLE, BUSY, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Delivered, or the watch is giving up the slot (it takes
                // whatever completed).
                return;
            }
            if let Some(done) = table.try_take(self.key) {
                self.deliver(done);
                self.state.store(DONE, Ordering::Release);
                return;
            }
            self.state.store(IDLE, Ordering::Release);
            // A completion that arrived while we held the state woke a
            // route that returned at once: look again.
            if table.status(self.key) != OpStatus::Complete {
                return;
            }
        }
    }
}

impl Doomed for Route {
    fn peer_died(&self, death: &Arc<Death>) -> bool {
        if self.state.load(Ordering::Acquire) == DONE {
            return true;
        }
        let _ = self.doomed.set(death.clone());
        let domain = self.ep.domain();
        if self.recv.is_some() && !self.cancel_tried.swap(true, Ordering::AcqRel) {
            let cancelled = match self.carrier {
                Carrier::Mq => domain.engine().cancel(self.key).unwrap_or(false),
                Carrier::AmMsg => domain.am_msg().cancel(self.key),
            };
            if cancelled {
                // Its `Canceled` completion comes through the waker, which
                // reports the death.
                domain.reactor().notify();
                return true;
            }
        }
        match self
            .state
            .compare_exchange(IDLE, BUSY, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                let done = domain
                    .table()
                    .abandon(self.key)
                    .unwrap_or_else(dead_completion);
                self.deliver(done);
                self.state.store(DONE, Ordering::Release);
                true
            }
            Err(DONE) => true,
            // The waker is delivering right now; look again later.
            Err(_) => false,
        }
    }
}

impl Route {
    fn flags(&self) -> CompletionFlags {
        match self.name {
            OpName::Send => CompletionFlags::SEND | CompletionFlags::MSG,
            OpName::Recv | OpName::MultiRecv => CompletionFlags::RECV | CompletionFlags::MSG,
            OpName::TSend => CompletionFlags::SEND | CompletionFlags::TAGGED,
            OpName::TRecv => CompletionFlags::RECV | CompletionFlags::TAGGED,
        }
    }

    fn deliver(&self, done: MqCompletion) {
        let ep = &self.ep;
        let (dir, counter) = match self.recv {
            Some(_) => (Direction::Recv, ep.counter(CounterKind::Recv)),
            None => (Direction::Transmit, ep.counter(CounterKind::Send)),
        };
        let tag = match self.recv {
            Some(RecvKind::Tagged) => done.status.tag & ep.domain().tags().user_mask(),
            _ => 0,
        };
        let error = peer_error(ep, self.peer, self.doomed.get(), &done.status, self.name)
            .or_else(|| status_error(&done.status, self.name));
        let mut flags = self.flags();
        let released = self
            .multi
            .as_ref()
            .is_some_and(|m| m.advance(error.is_none(), done.status.nbytes));
        if released {
            flags |= CompletionFlags::MULTI_RECV;
        }
        if let Some(span) = &self.span {
            let len = done.status.nbytes;
            match (&error, self.recv) {
                (None, Some(k)) => {
                    op_span::ok(span, len, Some((tag, source_of(ep, k, &done.status))))
                }
                (None, None) => op_span::ok(span, len, None),
                (Some(e), _) => op_span::err(span, e),
            }
        }
        match error {
            None => {
                count(counter, true);
                match self.recv {
                    Some(_) => ep.stats().received(done.status.nbytes),
                    None => ep.stats().sent(done.status.nbytes),
                }
                if let Some(cq) = ep.cq(dir) {
                    cq.push(CqEntry {
                        context: self.context,
                        flags,
                        len: done.status.nbytes,
                        buffer: Some(done.buffer),
                        offset: 0,
                        data: 0,
                        tag,
                        source: self
                            .recv
                            .map_or(FiAddr::UNSPEC, |k| source_of(ep, k, &done.status)),
                    });
                }
            }
            Some(error) => {
                count(counter, false);
                ep.stats().error();
                if let Some(cq) = ep.cq(dir) {
                    cq.push_err(CqErrEntry {
                        context: self.context,
                        flags,
                        len: done.status.nbytes,
                        buffer: Some(done.buffer),
                        olen: done
                            .status
                            .msg_len
                            .saturating_sub(done.status.nbytes as u64),
                        tag,
                        data: 0,
                        error,
                        prov_errno: CqErrEntry::PROV_INTERNAL,
                    });
                }
            }
        }
        // After the entry: the next part's entry comes after this one.
        if let Some(m) = &self.multi {
            m.delivered(released);
        }
    }
}

/// Attaches a route to a freshly posted op: from now on its completion goes
/// to the CQ. An op with a peer that did not finish at once registers with
/// the peer book.
fn route(
    op: Detached,
    context: u64,
    name: OpName,
    recv: Option<RecvKind>,
    multi: Option<Arc<MultiState>>,
) {
    let Detached {
        ep,
        key,
        carrier,
        peer,
        span,
        ..
    } = op;
    let route = Arc::new(Route {
        ep,
        key,
        context,
        name,
        recv,
        carrier,
        peer,
        state: AtomicU8::new(BUSY),
        doomed: OnceLock::new(),
        cancel_tried: AtomicBool::new(false),
        span,
        multi,
    });
    let domain = route.ep.domain().clone();
    let waker = Waker::from(route.clone());
    let mut cx = Context::from_waker(&waker);
    // BUSY while the slot is first looked at: a completion arriving now
    // wakes a route that leaves it to the check below.
    if let Poll::Ready(done) = domain.table().poll_take(key, &mut cx) {
        route.deliver(done);
        route.state.store(DONE, Ordering::Release);
        return;
    }
    route.state.store(IDLE, Ordering::Release);
    if domain.table().status(key) == OpStatus::Complete {
        waker.wake_by_ref();
    }
    if let Some(p) = peer {
        let weak: Weak<dyn Doomed> = Arc::downgrade(&route) as Weak<Route>;
        if let Some(death) = domain.peers().wait_for(p, weak) {
            if !route.peer_died(&death) {
                domain.peers().retry_later();
            }
        }
    }
}

impl Endpoint {
    /// Posts an untagged send whose completion goes to the endpoint's
    /// transmit CQ with `context` (`fi_send` with a context).
    ///
    /// # Errors
    /// The checks of [`send`](Self::send); the buffer comes back in the error.
    pub fn post_send(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> Result<Posted, PostError> {
        let (op, name) = self.send(dest, buf).into_posted()?;
        Ok(op.route(context, name, None))
    }

    /// Posts an untagged receive whose completion goes to the endpoint's
    /// receive CQ with `context` (`fi_recv` with a context).
    ///
    /// # Errors
    /// The checks of [`recv`](Self::recv); the buffer comes back in the error.
    pub fn post_recv(&self, buf: impl Into<OpBuffer>, context: u64) -> Result<Posted, PostError> {
        let (op, name, kind) = self.recv(buf).into_posted()?;
        Ok(op.route(context, name, Some(kind)))
    }

    /// Posts an untagged receive from `src` only whose completion goes to
    /// the endpoint's receive CQ with `context` (`fi_recv` with a source
    /// address on an endpoint with `FI_DIRECTED_RECV`).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::*;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().caps(Caps::MSG | Caps::DIRECTED_RECV)
    /// #     .engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints)).unwrap().remove(0);
    /// # let fabric = Fabric::open(&info).unwrap();
    /// # let domain = fabric.domain(&info).unwrap();
    /// # let av = domain.av(AvAttr::new()).unwrap();
    /// # let cq = domain.cq(CqAttr::new()).unwrap();
    /// let ep = domain.endpoint(&info).bind_av(&av)
    ///     .bind_cq(&cq, CqBind::RECV).enable().unwrap();
    /// let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    /// ep.post_recv_from(me, vec![0u8; 8], 4).unwrap();
    /// ep.inject(me, b"mine").unwrap();
    /// let e = cq.sread(None).unwrap();
    /// assert_eq!((e.context, e.len, e.source), (4, 4, me));
    /// ```
    ///
    /// # Errors
    /// The checks of [`recv_from`](Self::recv_from); the buffer comes back
    /// in the error.
    pub fn post_recv_from(
        &self,
        src: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> Result<Posted, PostError> {
        let (op, name, kind) = self.recv_from(src, buf).into_posted()?;
        Ok(op.route(context, name, Some(kind)))
    }

    /// Posts a tagged send whose completion goes to the endpoint's transmit
    /// CQ with `context` (`fi_tsend` with a context).
    ///
    /// # Errors
    /// The checks of [`tsend`](Self::tsend); the buffer comes back in the error.
    pub fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> Result<Posted, PostError> {
        let (op, name) = self.tsend(dest, tag, buf).into_posted()?;
        Ok(op.route(context, name, None))
    }

    /// Posts a tagged receive whose completion goes to the endpoint's
    /// receive CQ with `context` (`fi_trecv` with a context).
    ///
    /// # Errors
    /// The checks of [`trecv`](Self::trecv); the buffer comes back in the error.
    pub fn post_trecv(
        &self,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Result<Posted, PostError> {
        let (op, name, kind) = self.trecv(buf, tag, ignore).into_posted()?;
        Ok(op.route(context, name, Some(kind)))
    }

    /// Cancels a receive posted with a context if it has not matched yet
    /// (`fi_cancel`): its CQ then gets an error entry with `FI_ECANCELED`
    /// and the buffer. `Ok(false)` when it is too late.
    ///
    /// # Errors
    /// `FI_EOPNOTSUPP` for a send (sends cannot be cancelled, as in C).
    pub fn cancel(&self, posted: &Posted) -> crate::Result<bool> {
        if !posted.receive {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "cancel: sends cannot be cancelled (only receives that have not matched)",
            ));
        }
        let domain = self.core.domain();
        let cancelled = match posted.carrier {
            Carrier::Mq => domain.engine().cancel(posted.key)?,
            Carrier::AmMsg => domain.am_msg().cancel(posted.key),
        };
        if cancelled && domain.reactor().is_manual() {
            // Let the cancelled completion reach the CQ now.
            domain.reactor().progress();
        }
        Ok(cancelled)
    }
}

impl super::pending::PendingOp<'_> {
    /// Hands the op to a route delivering to the CQ.
    fn route(self, context: u64, name: OpName, recv: Option<RecvKind>) -> Posted {
        self.route_part(context, name, recv, None)
    }

    /// [`route`](Self::route) for a receive filling part of a multi-receive.
    pub(super) fn route_part(
        self,
        context: u64,
        name: OpName,
        recv: Option<RecvKind>,
        multi: Option<Arc<MultiState>>,
    ) -> Posted {
        let op = self.detach();
        let posted = Posted {
            key: op.key,
            carrier: op.carrier,
            receive: op.receive,
        };
        route(op, context, name, recv, multi);
        posted
    }
}
