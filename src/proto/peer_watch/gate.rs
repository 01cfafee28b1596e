//! [`PeerGate`]: the domain's engine endpoint as the operations see it —
//! the real one, with the [`PeerBook`] at the door.
//!
//! Every call is forwarded (statically: the gate is generic over the
//! engine, so it adds no indirection) except that
//! * posts towards a dead peer (`isend`, `inject`, `am_request`, and
//!   directed untagged MQ receives, recognised by their exact `MSG_BIT`
//!   tag) fail at once with the book's `Io` error, the buffer handed back;
//! * `am_request` errors that mean the peer is gone (`Io`, `TimedOut`,
//!   `ConnRefused`) declare it dead;
//! * `connect` results teach the book the peer handles' epids.
//!
//! The cost on a live peer: one relaxed load per post. The message
//! operations (`ops/submit.rs`, `ops/inject.rs`) make the same check
//! themselves and post on the endpoint directly, one call layer less on
//! the small-message path; they also give each pending MQ operation its
//! peer ([`directed`] names a directed receive's).

use super::book::PeerBook;
use super::core::Evidence;
use crate::engine::{
    AmHandler, AmHandlerId, EngineEndpoint, EngineKind, EngineLimits, Epid, MqCompletion, MqStatus,
    OpBuffer, PeerAddr, PostError, QueueStats, SendMode, TagMatch,
};
use crate::proto::tag_layout::MSG_BIT;
use crate::reactor::{CompletionTable, OpKey, Progress, ProgressSource, Reactor};
use crate::{ErrorKind, Result};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The sender epid a receive matches, if it is a directed untagged MQ
/// receive (`TagMatch::exact(MSG_BIT | epid)`; tagged receives never carry
/// the reserved bit 63).
#[inline]
pub(crate) fn directed(tags: &TagMatch) -> Option<u64> {
    (tags.select == u64::MAX && tags.tag & MSG_BIT != 0).then_some(tags.tag & !MSG_BIT)
}

/// Error kinds of an AM request that mean the peer is gone.
pub(crate) fn peer_gone(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Io | ErrorKind::TimedOut | ErrorKind::ConnRefused
    )
}

/// An engine endpoint with the domain's [`PeerBook`] at the door (module
/// docs).
pub(crate) struct PeerGate<E> {
    inner: Arc<E>,
    book: Arc<PeerBook>,
}

impl<E: EngineEndpoint> PeerGate<E> {
    /// Gates `inner` with `book`.
    pub(crate) fn new(inner: Arc<E>, book: Arc<PeerBook>) -> Self {
        PeerGate { inner, book }
    }
}

impl<E: EngineEndpoint> ProgressSource for PeerGate<E> {
    fn progress(&self) -> Progress {
        self.inner.progress()
    }

    fn register(&self, registry: &mio::Registry, token: mio::Token) -> std::io::Result<()> {
        self.inner.register(registry, token)
    }

    fn deregister(&self, registry: &mio::Registry) -> std::io::Result<()> {
        self.inner.deregister(registry)
    }
}

impl<E: EngineEndpoint> EngineEndpoint for PeerGate<E> {
    fn kind(&self) -> EngineKind {
        self.inner.kind()
    }

    fn epid(&self) -> Epid {
        self.inner.epid()
    }

    fn limits(&self) -> EngineLimits {
        self.inner.limits()
    }

    fn completions(&self) -> &Arc<CompletionTable<MqCompletion>> {
        self.inner.completions()
    }

    fn connect(&self, epids: &[Epid], timeout: Duration) -> Vec<Result<PeerAddr>> {
        let results = self.inner.connect(epids, timeout);
        for (epid, r) in epids.iter().zip(&results) {
            if let Ok(peer) = r {
                self.book.connected(*epid, *peer);
            }
        }
        results
    }

    fn peer_epid(&self, peer: PeerAddr) -> Option<Epid> {
        self.inner.peer_epid(peer)
    }

    fn peer_activity(&self, peer: PeerAddr) -> u64 {
        self.inner.peer_activity(peer)
    }

    #[inline]
    fn isend(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        if let Err(error) = self.book.refuse(peer, "send") {
            return Err(PostError { error, buffer });
        }
        self.inner.isend(peer, tag, mode, buffer, op)
    }

    #[inline]
    fn irecv(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        if let Some(epid) = directed(&tags) {
            if let Err(error) = self.book.refuse_epid(epid, "recv") {
                return Err(PostError { error, buffer });
            }
        }
        self.inner.irecv(tags, buffer, op)
    }

    fn cancel(&self, op: OpKey) -> Result<bool> {
        self.inner.cancel(op)
    }

    fn iprobe(&self, tags: TagMatch) -> Result<Option<MqStatus>> {
        self.inner.iprobe(tags)
    }

    fn queue_stats(&self) -> QueueStats {
        self.inner.queue_stats()
    }

    fn am_register(&self, handler: Arc<dyn AmHandler>) -> Result<AmHandlerId> {
        self.inner.am_register(handler)
    }

    fn am_request(
        &self,
        peer: PeerAddr,
        handler: AmHandlerId,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        self.book.refuse(peer, "active message")?;
        let r = self.inner.am_request(peer, handler, args, payload);
        if let Err(e) = &r {
            if peer_gone(e.kind()) {
                self.book.declare(
                    peer,
                    Evidence::Engine(format!("an active message failed: {e}")),
                );
            }
        }
        r
    }

    fn close(&self, timeout: Duration) -> Result<()> {
        self.inner.close(timeout)
    }

    fn max_inject(&self) -> usize {
        self.inner.max_inject()
    }

    #[inline]
    fn inject(&self, peer: PeerAddr, tag: u64, data: &[u8]) -> Result<()> {
        self.book.refuse(peer, "inject")?;
        self.inner.inject(peer, tag, data)
    }

    #[inline]
    fn poll_op(&self, op: OpKey) -> Option<MqCompletion> {
        self.inner.poll_op(op)
    }

    #[inline]
    fn poll_completion(
        &self,
        reactor: &Reactor,
        op: OpKey,
        cx: &mut Context<'_>,
    ) -> Poll<MqCompletion> {
        self.inner.poll_completion(reactor, op, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_msg_tags_are_directed() {
        assert_eq!(directed(&TagMatch::exact(MSG_BIT | 0x42)), Some(0x42));
        assert_eq!(
            directed(&TagMatch::new(MSG_BIT, MSG_BIT)),
            None,
            "any source"
        );
        assert_eq!(directed(&TagMatch::exact(0x42)), None, "tagged");
        assert_eq!(directed(&TagMatch::ANY), None);
    }
}
