//! Tag hooks: small messages of one tag handed over as they arrive.
//!
//! A layer that owns a tag of an endpoint's tag space for its own frames
//! (the mrail driver's control frames) would otherwise keep receives
//! posted for it, take each completion from the table, and post the
//! receive again. An engine that can (the soft engine) instead hands every
//! eager message of a hooked tag to a [`TagHook`] straight from the frame
//! it arrived in, inside its progress: no receive, no completion, no
//! matching. Messages of the tag that come by rendezvous still match
//! receives as any other, so the owner keeps a few posted for them.

use super::PeerAddr;

/// Takes the eager messages of a hooked tag
/// ([`EngineEndpoint::set_tag_hook`](super::EngineEndpoint::set_tag_hook)).
pub trait TagHook: Send + Sync + 'static {
    /// A message from `source` arrived; `payload` is the whole of it, only
    /// valid during the call.
    ///
    /// Called from inside the engine's progress, with the endpoint's
    /// state locked: it must not call into the same endpoint (post,
    /// send, progress), and must not wait for a lock that is held while
    /// calling into it (take such locks with `try_lock` and queue the
    /// message when that fails).
    fn on_message(&self, source: PeerAddr, payload: &[u8]);
}
