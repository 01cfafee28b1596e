//! [`TargetSlots`]: whether the domain has an endpoint that is the target
//! of peers' RMA or atomics right now.
//!
//! The RMA transport serves peers' requests from the domain's memory
//! regions only while such an endpoint exists (else the peer gets
//! `FI_EOPNOTSUPP`). Which endpoint holds which role, and the rule that a
//! domain has at most one per role, are the fabric's (`fabric/slots.rs`,
//! which implements this trait for the domain's slots).

/// A target role of a domain, as the RMA transport asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TargetRole {
    /// Target of peers' RMA.
    Rma,
    /// Target of peers' atomics.
    Atomic,
}

/// The domain's target roles, asked once per incoming request.
pub(crate) trait TargetSlots: Send + Sync {
    /// Whether an endpoint of the domain holds `role`.
    fn is_taken(&self, role: TargetRole) -> bool;
}
