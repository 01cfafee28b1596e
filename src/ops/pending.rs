//! One posted operation as its future sees it: the endpoint that posted it
//! and its completion slot. Polling it makes progress (manual mode) or waits
//! for the auto thread; dropping it before completion is always safe.
//!
//! # Dead peers
//! An MQ send or directed receive knows its peer (the posting code names
//! it, `ops/submit.rs`). Once its future has
//! been pending a while — [`REGISTER_AFTER`] polls in manual progress, the
//! first pending poll in auto progress, where the task is about to sleep —
//! it registers with the domain's peer book, which tells it (and wakes its
//! task) when the peer dies. It then ends with the book's `Io` error: a
//! receive is cancelled and comes back with its buffer; a send, which PSM
//! cannot cancel, gives up its slot — the engine keeps the buffer until
//! it is done with it (at the latest when the domain closes) and the
//! future hands back an empty buffer.
//!
//! # Tracing
//! The op's span ([`op_span`]), like its peer-book
//! registration and its peer's death, lives in the op's boxed cold state:
//! an op that nobody traces and whose peer lives carries 8 bytes of `None`
//! for all three.

use super::op_span::{self, OpDesc, Provider};
use super::outcome::OpName;
use crate::engine::{MqCompletion, MqStatus, OpBuffer};
use crate::fabric::EndpointCore;
use crate::proto::peer_watch::{Death, Doomed, PeerRef};
use crate::reactor::{CompletionTable, OpKey};
use crate::{Error, ErrorKind};
use futures::task::AtomicWaker;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};
use tracing::Span;

/// Pending polls (manual progress) before an operation with a peer
/// registers with the peer book: operations that finish quickly never do.
pub(crate) const REGISTER_AFTER: u16 = 64;

/// A registered operation's line from the peer book.
#[derive(Default)]
pub(crate) struct OpToken {
    death: OnceLock<Arc<Death>>,
    waker: AtomicWaker,
}

impl Doomed for OpToken {
    fn peer_died(&self, death: &Arc<Death>) -> bool {
        let _ = self.death.set(death.clone());
        self.waker.wake();
        true
    }
}

/// The completion of an operation whose peer died and whose slot was given
/// up: no bytes, `Io`, an empty buffer (the engine keeps the real one).
pub(crate) fn dead_completion() -> MqCompletion {
    MqCompletion {
        status: MqStatus::failed(0, ErrorKind::Io),
        buffer: OpBuffer::empty(),
    }
}

/// The error of a completion that says its peer is gone, naming the peer
/// and the evidence: `doomed` when the operation ended (or cancelled its
/// receive) because of it; else the book's record of the peer, for an `Io`
/// from the engine or the AM queue. An `Io` the book has not heard of
/// (the soft engine saw a connection close) is recorded as the peer's
/// death, so the rest of its operations end too. `None`: report the status
/// as it is.
pub(crate) fn peer_error(
    ep: &EndpointCore,
    peer: Option<PeerRef>,
    doomed: Option<&Arc<Death>>,
    status: &MqStatus,
    op: OpName,
) -> Option<Error> {
    let kind = status.error?;
    if let Some(d) = doomed {
        if matches!(kind, ErrorKind::Io | ErrorKind::Canceled) {
            return Some(d.error(op.as_str()));
        }
    }
    if !crate::proto::peer_watch::peer_gone(kind) {
        return None;
    }
    let r = peer.or(status.source.map(PeerRef::Peer))?;
    let book = ep.domain().peers();
    if let Some(d) = book.death_of(r) {
        return Some(d.error(op.as_str()));
    }
    let PeerRef::Peer(p) = r else {
        return None;
    };
    if ep.domain().ensure_open().is_err() {
        // The domain's close ended it, not the peer.
        return None;
    }
    let evidence =
        crate::proto::peer_watch::engine_evidence(format!("{} completed with {kind}", op.as_str()));
    Some(book.declare(p, evidence).error(op.as_str()))
}

/// Which queue carries the operation: it decides how a drop cancels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// The engine's tag-matching MQ (tagged messages, and untagged ones by
    /// default).
    Mq,
    /// The AM message queue (`FI_PSM_AM_MSG=1`).
    AmMsg,
}

/// What an op rarely needs, boxed so that its future stays small.
#[derive(Debug, Default)]
struct Cold {
    /// The op's span, while it runs and someone traces it.
    span: Option<Span>,
    /// Registered with the peer book.
    token: Option<Arc<OpToken>>,
    /// The peer's death, once acted on.
    doomed: Option<Arc<Death>>,
}

/// A posted, not yet completed operation.
///
/// The op's buffer lives in the engine (or in the completion slot once the
/// engine is done), never here: that is what makes dropping or forgetting the
/// future safe (`ARCHITECTURE.md`, principle 3). On drop, a receive that has
/// not matched is cancelled, and the slot is abandoned: the table frees the
/// buffer when the engine completes.
#[derive(Debug)]
pub(crate) struct PendingOp<'a> {
    /// Borrowed from the `Endpoint` the op was posted on, not cloned: an
    /// op touches no reference count (a throwaway build without the clone
    /// ran about 5 ns per 8 B message faster on the native engine);
    /// `detach` clones it when the op has to outlive the borrow.
    ep: &'a Arc<EndpointCore>,
    key: OpKey,
    carrier: Carrier,
    receive: bool,
    /// False once the value was taken: the slot is no longer ours.
    live: bool,
    /// The peer of an MQ send or directed receive (module docs).
    peer: Option<PeerRef>,
    /// Pending polls so far, until registered.
    polls: u16,
    /// The span, the peer-book registration, the peer's death.
    cold: Option<Box<Cold>>,
}

impl std::fmt::Debug for OpToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpToken")
            .field("dead", &self.death.get().is_some())
            .finish()
    }
}

impl<'a> PendingOp<'a> {
    /// The op posted under `key`. `peer`: the peer of an MQ send or
    /// directed receive, whose death ends the op (`None` for any-source
    /// receives, and for AM-queue ops, which the queue ends itself).
    pub(crate) fn new(
        ep: &'a Arc<EndpointCore>,
        key: OpKey,
        carrier: Carrier,
        receive: bool,
        peer: Option<PeerRef>,
    ) -> Self {
        PendingOp {
            ep,
            key,
            carrier,
            receive,
            live: true,
            peer,
            polls: 0,
            cold: None,
        }
    }

    /// Opens the op's span if a subscriber wants it ([`op_span`]). The
    /// posting code asks [`op_span::wanted`] first (one relaxed load), and
    /// only a traced op comes here.
    #[cold]
    #[inline(never)]
    pub(crate) fn open_span(&mut self, d: OpDesc) {
        if let Some(span) = op_span::open(Provider::Psm, d) {
            self.cold.get_or_insert_with(Box::default).span = Some(span);
        }
    }

    /// The op's span, if it is traced.
    #[inline(always)]
    pub(crate) fn span(&self) -> Option<&Span> {
        self.cold.as_ref().and_then(|c| c.span.as_ref())
    }

    /// Takes the span out (to end it, or to hand it to a route).
    pub(crate) fn take_span(&mut self) -> Option<Span> {
        self.cold.as_mut().and_then(|c| c.span.take())
    }

    fn doomed(&self) -> Option<&Arc<Death>> {
        self.cold.as_ref().and_then(|c| c.doomed.as_ref())
    }

    /// The endpoint that posted the op.
    pub(crate) fn endpoint(&self) -> &'a Arc<EndpointCore> {
        self.ep
    }

    /// Polls for the completion. After `Ready` the slot is freed and the
    /// op is over; polling again is a caller bug (it panics, as the table
    /// does for a dead key).
    #[inline(always)]
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        if self.cold.is_some() {
            return self.poll_cold(cx);
        }
        self.poll_plain(cx)
    }

    /// [`poll`](Self::poll) of an op with cold state: inside its span, if
    /// it is traced.
    #[inline(never)]
    fn poll_cold(&mut self, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        let Some(span) = self.take_span() else {
            return self.poll_plain(cx);
        };
        let r = span.in_scope(|| self.poll_plain(cx));
        if let Some(c) = self.cold.as_mut() {
            c.span = Some(span);
        }
        r
    }

    #[inline(always)]
    fn poll_plain(&mut self, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        let domain = self.ep.domain();
        let r = match self.carrier {
            // The engine's fast path: in manual mode it tests this one
            // request instead of running a whole progress round.
            Carrier::Mq => domain
                .direct()
                .poll_completion(domain.reactor(), self.key, cx),
            Carrier::AmMsg => domain
                .reactor()
                .poll_completion(domain.table(), self.key, cx),
        };
        if r.is_ready() {
            self.live = false;
            return r;
        }
        if self.peer.is_some() {
            return self.watch_peer(cx);
        }
        Poll::Pending
    }

    /// The pending path of an op with a peer: registers with the peer book
    /// when due, ends the op when the peer died.
    fn watch_peer(&mut self, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        let Some(peer) = self.peer else {
            return Poll::Pending;
        };
        let manual = self.ep.domain().reactor().is_manual();
        let token = self.cold.as_ref().and_then(|c| c.token.as_ref());
        let death = match token {
            Some(t) => {
                if !manual {
                    t.waker.register(cx.waker());
                }
                t.death.get().cloned()
            }
            None => {
                self.polls = self.polls.saturating_add(1);
                if manual && self.polls < REGISTER_AFTER {
                    return Poll::Pending;
                }
                let t = Arc::new(OpToken::default());
                if !manual {
                    t.waker.register(cx.waker());
                }
                let weak: Weak<dyn Doomed> = Arc::downgrade(&t) as Weak<OpToken>;
                let d = self.ep.domain().peers().wait_for(peer, weak);
                self.cold.get_or_insert_with(Box::default).token = Some(t);
                d
            }
        };
        match death {
            Some(d) => self.die(d, cx),
            None => Poll::Pending,
        }
    }

    /// The peer died: cancel a receive (its completion, `Canceled`, comes
    /// back with the buffer), or give up the slot of what cannot be
    /// cancelled.
    #[cold]
    fn die(&mut self, death: Arc<Death>, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        if self.doomed().is_some() {
            // A receive cancelled for it: its completion is on the way.
            return Poll::Pending;
        }
        self.cold.get_or_insert_with(Box::default).doomed = Some(death);
        if self.receive && self.cancel() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let done = self.ep.domain().table().abandon(self.key);
        self.live = false;
        Poll::Ready(done.unwrap_or_else(dead_completion))
    }

    /// The error to report for a completion `status` of this op, if its
    /// peer is gone (see [`peer_error`]).
    #[inline]
    pub(crate) fn peer_error(&self, status: &MqStatus, op: OpName) -> Option<Error> {
        // The common case, a successful completion, stays inline.
        status.error?;
        peer_error(self.ep, self.peer, self.doomed(), status, op)
    }

    /// Gives up the future side of the op without abandoning its slot (a
    /// route takes it over).
    pub(crate) fn detach(mut self) -> Detached {
        self.live = false;
        Detached {
            ep: self.ep.clone(),
            key: self.key,
            carrier: self.carrier,
            receive: self.receive,
            peer: self.peer,
            span: self.take_span(),
        }
    }

    /// Asks the engine to cancel the receive if it has not matched yet;
    /// `true` when it will complete with `Canceled`.
    pub(crate) fn cancel(&self) -> bool {
        if !self.receive || !self.live {
            return false;
        }
        let domain = self.ep.domain();
        let cancelled = match self.carrier {
            Carrier::Mq => domain.engine().cancel(self.key).unwrap_or(false),
            Carrier::AmMsg => domain.am_msg().cancel(self.key),
        };
        if cancelled {
            domain.reactor().notify();
        }
        cancelled
    }
}

impl Drop for PendingOp<'_> {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        if let Some(span) = self.span() {
            op_span::dropped(span);
        }
        self.cancel();
        // The value, if the op already completed, is dropped here; otherwise
        // the table drops it when the engine completes.
        drop(self.ep.domain().table().abandon(self.key));
    }
}

/// What [`PendingOp::detach`] hands to a route.
pub(crate) struct Detached {
    pub ep: Arc<EndpointCore>,
    pub key: OpKey,
    pub carrier: Carrier,
    pub receive: bool,
    pub peer: Option<PeerRef>,
    pub span: Option<Span>,
}

/// Frees a slot that was inserted but whose post failed (the engine will
/// never complete it).
pub(crate) fn release_unposted(table: &CompletionTable<MqCompletion>, key: OpKey) {
    drop(table.retire(key));
}
