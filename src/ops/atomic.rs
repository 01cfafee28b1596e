//! Atomics for the psm provider, sans I/O: the operation and datatype
//! enums, the valid-queries, and the execution of one atomic on a byte
//! region at the target (`fi_atomic(3)`; C: `prov/psm/src/psmx_atomic.c`).
//!
//! # How it fits
//! The initiator checks a request with [`check_request`] (op, kind and
//! datatype supported; `1 <= count <=` what [`atomic_valid`] reports for
//! the engine's short payload, since atomics are never chunked) and sends
//! op, datatype, count, operand (and compare) in one active message. The
//! target finds the memory region, takes that region's atomic lock, runs
//! [`apply`] on the addressed bytes, and replies with the old values for
//! fetch and compare calls. This module does none of that I/O.
//!
//! # One table, no silent no-ops
//! [`op_supports_datatype`] holds the op x datatype table; the valid queries
//! and [`apply`] both use it, so an atomic the valid-query accepts is executed
//! and one it rejects is refused with `FI_EOPNOTSUPP` (ARCHITECTURE.md,
//! "Deliberately better") — unlike C, whose target skips an unsupported
//! combination and reports success.
//!
//! ```
//! use psmrail::ops::atomic::{apply, atomic_valid, AtomicDatatype, AtomicKind, AtomicOp};
//! // fi_fetch_atomicvalid(FI_SUM, FI_DOUBLE) with a 64-byte short payload:
//! let count = atomic_valid(AtomicKind::Fetch, AtomicOp::Sum, AtomicDatatype::Double, 64)?;
//! assert_eq!(count, 8);
//! let mut target = 1.5f64.to_ne_bytes();
//! let mut old = [0u8; 8];
//! apply(AtomicKind::Fetch, AtomicOp::Sum, AtomicDatatype::Double,
//!       &mut target, &2.0f64.to_ne_bytes(), &[], &mut old)?;
//! assert_eq!(f64::from_ne_bytes(target), 3.5);
//! assert_eq!(f64::from_ne_bytes(old), 1.5);
//! # Ok::<(), psmrail::Error>(())
//! ```

pub use crate::proto::atomic::{
    apply, atomic_valid, check_op, check_request, op_supports_datatype, AtomicDatatype, AtomicKind,
    AtomicOp, DatatypeClass,
};
