//! Atomics for the psm provider, sans I/O (`fi_atomic(3)`; C:
//! `prov/psm/src/psmx_atomic.c`): the operation and datatype enums, the
//! valid-queries, the execution of one atomic on a byte region at the
//! target, and the atomic packets (`wire.rs`).
//!
//! The user-facing items are re-exported, with their documentation and an
//! example, at `psmrail::ops::atomic`; the futures that send atomics are in
//! `ops/atomic_ops`, the I/O edge that carries them in
//! [`RmaTransport`](super::rma_transport::RmaTransport).
//!
//! # One table, no silent no-ops
//! [`op_supports_datatype`] holds the op x datatype table; the valid queries
//! and [`apply()`] both use it, so an atomic the valid-query accepts is executed
//! and one it rejects is refused with `FI_EOPNOTSUPP` (ARCHITECTURE.md,
//! "Deliberately better") — unlike C, whose target skips an unsupported
//! combination and reports success.

mod apply;
mod datatype;
mod op;
mod valid;
pub(crate) mod wire;

#[cfg(test)]
mod tests;

pub use apply::apply;
pub use datatype::{AtomicDatatype, DatatypeClass};
pub use op::{AtomicKind, AtomicOp};
pub use valid::{atomic_valid, check_op, check_request, op_supports_datatype};
