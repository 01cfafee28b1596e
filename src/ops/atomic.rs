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
//! # Calls on endpoints
//! [`Endpoint::atomic`], [`Endpoint::fetch_atomic`] and
//! [`Endpoint::compare_atomic`] are `fi_atomic`, `fi_fetch_atomic` and
//! `fi_compare_atomic` on bytes: an op, a datatype, the operand (and
//! compare) bytes as `&[u8]`, copied at call time, and for fetch and
//! compare calls a result buffer that the future hands back holding the
//! old values (a plain atomic's future hands back a copy of its operand).
//!
//! # Typed helpers
//! For one of the Rust types the table covers (`i8` ... `u64`, `f32`,
//! `f64`: [`AtomicValue`]), [`Endpoint::atomic_on`] names a remote element
//! once — peer, offset, key — as an [`AtomicTarget`], and its methods
//! take and return `T`: [`fetch_add`](AtomicTarget::fetch_add),
//! [`add`](AtomicTarget::add), [`fetch_min`](AtomicTarget::fetch_min),
//! [`fetch_max`](AtomicTarget::fetch_max), [`write`](AtomicTarget::write)
//! (`FI_ATOMIC_WRITE`), [`read`](AtomicTarget::read) (`FI_ATOMIC_READ`),
//! [`swap`](AtomicTarget::swap), [`compare_swap`](AtomicTarget::compare_swap),
//! any op through [`atomic`](AtomicTarget::atomic),
//! [`fetch_atomic`](AtomicTarget::fetch_atomic) and
//! [`compare_atomic`](AtomicTarget::compare_atomic), and consecutive
//! elements through the `_slice` forms. Each returns a [`TypedAtomicOp`],
//! posted before the method returns, that resolves to a plain
//! `Result<T>` (`Result<()>`, `Result<Vec<T>>`).
//!
//! A handle rather than one method per call on the endpoint: the
//! byte-level calls take seven or eight arguments, four of them integers
//! (offset, key and the values) that typed numbers would make easy to
//! swap unnoticed; the remote element is usually reused (a counter, a lock
//! word); and each operation then reads as what it does,
//! `counter.fetch_add(1)`, with one or two arguments of type `T`. The
//! handle is `Copy`; the futures borrow nothing.
//!
//! The helpers run the byte-level path, so they refuse what it refuses
//! with the same errors (an op x datatype pair outside the table is
//! `FI_EOPNOTSUPP` before anything is sent), and are cancel-safe as it is:
//! dropping a future does not cancel the atomic, which still runs at the
//! target; only its result is lost. The complex datatypes, which have no
//! standard Rust type, stay on the byte-level calls.
//!
//! ```
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
//! # let config = PsmConfig::builder_from_env()?.name_server(false)
//! #     .delay(std::time::Duration::ZERO).build()?;
//! # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
//! # let info = getinfo(Some(&hints))?.remove(0);
//! # let fabric = Fabric::open(&info)?;
//! # let domain = fabric.domain(&info)?;
//! # let av = domain.av(AvAttr::new())?;
//! # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! # let peer = av.insert(&[ep.getname()]).remove(0)?;
//! # let mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(7))?;
//! let counter = ep.atomic_on::<u64>(peer, 0, 7);
//! let lock = ep.atomic_on::<u32>(peer, 8, 7);
//! domain.reactor().block_on(async {
//!     assert_eq!(counter.fetch_add(1).await?, 0);
//!     assert_eq!(lock.compare_swap(0, 42).await?, 0); // taken
//!     assert_eq!(lock.compare_swap(0, 43).await?, 42); // held by 42
//!     lock.write(0).await?; // released
//!     Ok::<_, psmrail::Error>(())
//! })?;
//! # Ok::<(), psmrail::Error>(())
//! ```
//!
//! [`Endpoint::atomic`]: crate::fabric::Endpoint::atomic
//! [`Endpoint::fetch_atomic`]: crate::fabric::Endpoint::fetch_atomic
//! [`Endpoint::compare_atomic`]: crate::fabric::Endpoint::compare_atomic
//! [`Endpoint::atomic_on`]: crate::fabric::Endpoint::atomic_on
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

pub use super::atomic_ops::{AtomicTarget, AtomicValue, TypedAtomicOp};
pub use crate::proto::atomic::{
    apply, atomic_valid, check_op, check_request, op_supports_datatype, AtomicDatatype, AtomicKind,
    AtomicOp, DatatypeClass,
};
