//! Active messages: handlers the engine calls from inside its progress.
//!
//! PSM delivers an AM request by calling the handler registered at its
//! index, from inside a PSM call made during progress. The handler may send
//! one reply (through the [`AmReply`] it is given) but must not post new
//! requests or MQ operations: PSM is not re-entrant. Work that needs them is
//! queued and done by the layer above on its next progress step, as the C
//! provider did with its RMA and send queues.

use super::PeerAddr;
use crate::Result;

/// Index of a registered handler; the same registration order on every
/// process gives the same ids, which is how peers agree on them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AmHandlerId(pub u16);

/// One delivered active message.
#[derive(Debug)]
pub struct AmMessage<'a> {
    /// The sending peer.
    pub source: PeerAddr,
    /// The arguments (at most the engine's `max_am_args`).
    pub args: &'a [u64],
    /// The payload (at most `max_am_request` / `max_am_reply` bytes); only
    /// valid during the call: copy what must outlive it.
    pub payload: &'a [u8],
}

/// The reply channel of a request being handled.
pub trait AmReply {
    /// Sends the reply to the requester's handler `handler`. At most one
    /// reply per request; payload and args within the engine's limits.
    fn reply(&mut self, handler: AmHandlerId, args: &[u64], payload: &[u8]) -> Result<()>;
}

/// A registered active-message handler.
pub trait AmHandler: Send + Sync + 'static {
    /// A request arrived; `reply` answers it.
    fn on_request(&self, msg: AmMessage<'_>, reply: &mut dyn AmReply);
    /// A reply arrived (replies cannot be answered).
    fn on_reply(&self, msg: AmMessage<'_>);
}
