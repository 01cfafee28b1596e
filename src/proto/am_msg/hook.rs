//! `AmMsgHook`: the AM message queue for tests and benchmarks.
//!
//! [`AmMsgQueue`] is crate-private: applications reach it through the msg
//! operations of a domain opened with `FI_PSM_AM_MSG=1`. The integration
//! tests (`tests/am_msg.rs`) and `am_msg_pingpong` (a binary of `bench/`) drive it
//! directly over an engine endpoint through this thin wrapper, which is
//! hidden from the docs and not part of the API.

use super::AmMsgQueue;
use crate::engine::{AmHandlerId, EngineEndpoint, OpBuffer, PeerAddr, PostError};
use crate::reactor::{OpKey, ProgressSource};
use crate::{ErrorKind, Result};
use std::sync::Arc;

/// An `AmMsgQueue` for tests and benchmarks (not API).
///
/// ```no_run
/// # fn demo(ep: std::sync::Arc<psmrail::engine::soft::SoftEndpoint>, peer: psmrail::engine::PeerAddr) {
/// use psmrail::engine::{EngineEndpoint, OpBuffer};
/// let q = psmrail::hooks::AmMsgHook::register(ep.clone()).unwrap();
/// let key = ep.completions().insert();
/// q.send(peer, OpBuffer::from(b"hi".to_vec()), key).unwrap();
/// // Add `q.progress_source()` to the endpoint's reactor and wait for `key`.
/// # }
/// ```
#[derive(Clone)]
pub struct AmMsgHook(Arc<AmMsgQueue>);

impl std::fmt::Debug for AmMsgHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmMsgHook").finish_non_exhaustive()
    }
}

/// What the queue holds right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmMsgCounts {
    /// Packets dropped as malformed, stale or hostile.
    pub dropped: u64,
    /// Unexpected messages waiting for a receive.
    pub unexpected: usize,
    /// Posted receives not matched yet.
    pub posted: usize,
    /// Sends not completed yet.
    pub sends: usize,
    /// Matched receives still getting data.
    pub receiving: usize,
}

impl AmMsgHook {
    /// `AmMsgQueue::register`: registers the handler on `engine`.
    pub fn register(engine: Arc<dyn EngineEndpoint>) -> Result<AmMsgHook> {
        AmMsgQueue::register(engine).map(AmMsgHook)
    }

    /// The queue as a progress source (add it to the endpoint's reactor).
    pub fn progress_source(&self) -> Arc<dyn ProgressSource> {
        self.0.clone()
    }

    /// `AmMsgQueue::send`.
    pub fn send(
        &self,
        peer: PeerAddr,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        self.0.send(peer, buffer, op)
    }

    /// `AmMsgQueue::recv`.
    pub fn recv(
        &self,
        from: Option<PeerAddr>,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        self.0.recv(from, buffer, op)
    }

    /// `AmMsgQueue::cancel`.
    pub fn cancel(&self, op: OpKey) -> bool {
        self.0.cancel(op)
    }

    /// `AmMsgQueue::fail_peer`.
    pub fn fail_peer(&self, peer: PeerAddr, kind: ErrorKind) {
        self.0.fail_peer(peer, kind)
    }

    /// The AM handler id the queue registered.
    pub fn handler_id(&self) -> AmHandlerId {
        self.0.handler_id()
    }

    /// Message bytes per packet.
    pub fn chunk(&self) -> usize {
        self.0.chunk()
    }

    /// What the queue holds.
    pub fn counts(&self) -> AmMsgCounts {
        let s = self.0.stats();
        AmMsgCounts {
            dropped: s.dropped,
            unexpected: s.unexpected,
            posted: s.posted,
            sends: s.sends,
            receiving: s.receiving,
        }
    }
}
