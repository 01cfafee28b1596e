//! What an engine can carry, as reported after an endpoint opens.

/// Limits of an open engine endpoint.
///
/// The native engine reports what `psm_am_get_parameters` says (on these
/// machines the compat build gives 256 handlers, 10 args, 8128-byte short
/// payloads); the soft engine reports the same values so code above behaves
/// alike on both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineLimits {
    /// Largest message one MQ send can carry (PSM: `u32::MAX` bytes).
    pub max_message: u64,
    /// Messages up to this size are sent eagerly; above it the engine uses
    /// rendezvous (the receiver's buffer is written directly).
    pub eager_threshold: usize,
    /// Number of AM handler slots.
    pub max_am_handlers: usize,
    /// Most 64-bit arguments one AM request or reply carries.
    pub max_am_args: usize,
    /// Largest payload of an AM request.
    pub max_am_request: usize,
    /// Largest payload of an AM reply.
    pub max_am_reply: usize,
}

impl EngineLimits {
    /// The limits the C provider assumed of any PSM: `u32::MAX` per message,
    /// and the AM minimums PSM guarantees (64 handlers, 2 args, 256 B).
    pub const PSM_MINIMUM: EngineLimits = EngineLimits {
        max_message: u32::MAX as u64,
        eager_threshold: 64 * 1024,
        max_am_handlers: 64,
        max_am_args: 2,
        max_am_request: 256,
        max_am_reply: 256,
    };
}
