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
//! counters. A route never calls into the engine, so it is safe to run
//! inside the engine's progress.

use super::outcome::{count, status_error, OpName};
use super::pending::Carrier;
use super::recv::{source_of, RecvKind};
use crate::engine::{MqCompletion, OpBuffer, PostError};
use crate::fabric::{
    CompletionFlags, CounterKind, CqEntry, CqErrEntry, Direction, Endpoint, EndpointCore, FiAddr,
};
use crate::reactor::OpKey;
use crate::{Error, ErrorKind};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

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
}

impl Wake for Route {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(done) = self.ep.domain().table().try_take(self.key) {
            self.deliver(done);
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
        match status_error(&done.status, self.name) {
            None => {
                count(counter, true);
                if let Some(cq) = ep.cq(dir) {
                    cq.push(CqEntry {
                        context: self.context,
                        flags: self.flags(),
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
                if let Some(cq) = ep.cq(dir) {
                    cq.push_err(CqErrEntry {
                        context: self.context,
                        flags: self.flags(),
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
    }
}

/// Attaches a route to a freshly posted op: from now on its completion goes
/// to the CQ.
fn route(ep: &Arc<EndpointCore>, key: OpKey, context: u64, name: OpName, recv: Option<RecvKind>) {
    let route = Arc::new(Route {
        ep: ep.clone(),
        key,
        context,
        name,
        recv,
    });
    let waker = Waker::from(route.clone());
    let mut cx = Context::from_waker(&waker);
    if let Poll::Ready(done) = ep.domain().table().poll_take(key, &mut cx) {
        route.deliver(done);
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

impl super::pending::PendingOp {
    /// Hands the op to a route delivering to the CQ.
    fn route(self, context: u64, name: OpName, recv: Option<RecvKind>) -> Posted {
        let (ep, key, carrier, receive) = self.detach();
        route(&ep, key, context, name, recv);
        Posted {
            key,
            carrier,
            receive,
        }
    }
}
