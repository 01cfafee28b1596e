//! Which atomics psmrail executes, and how many elements one carries: the
//! `fi_atomicvalid` / `fi_fetch_atomicvalid` / `fi_compare_atomicvalid`
//! answers and the matching checks on a request.
//!
//! The C provider's valid queries accept every op for every datatype while its
//! target silently skips the combinations it cannot run and reports success
//! (`prov/psm/src/psmx_atomic.c`). Here one table decides both: what
//! [`atomic_valid`] accepts, [`apply`](fn@super::apply) executes; what it
//! rejects is refused with `FI_EOPNOTSUPP` (ARCHITECTURE.md, "Deliberately
//! better").

use super::datatype::{AtomicDatatype, DatatypeClass};
use super::op::{AtomicKind, AtomicOp};
use crate::{Error, ErrorKind, Result};

/// Whether `op` is defined on `dt`, whatever the call kind — the table
/// the C provider executes (`prov/psm/src/psmx_atomic.c`), without long
/// double:
///
/// | operations | datatypes |
/// |---|---|
/// | `MIN`, `MAX`, `CSWAP_LE`/`LT`/`GE`/`GT` | integer, float |
/// | `SUM`, `PROD`, `ATOMIC_READ`, `ATOMIC_WRITE`, `CSWAP`, `CSWAP_NE` | integer, float, complex |
/// | `LOR`, `LAND`, `BOR`, `BAND`, `LXOR`, `BXOR`, `MSWAP` | integer |
///
/// ```
/// use psmrail::ops::atomic::{op_supports_datatype, AtomicDatatype, AtomicOp};
/// assert!(op_supports_datatype(AtomicOp::Sum, AtomicDatatype::DoubleComplex));
/// assert!(!op_supports_datatype(AtomicOp::Min, AtomicDatatype::FloatComplex));
/// assert!(!op_supports_datatype(AtomicOp::Bxor, AtomicDatatype::Double));
/// ```
pub const fn op_supports_datatype(op: AtomicOp, dt: AtomicDatatype) -> bool {
    use AtomicOp::*;
    match op {
        Min | Max | CswapLe | CswapLt | CswapGe | CswapGt => {
            !matches!(dt.class(), DatatypeClass::Complex)
        }
        Sum | Prod | AtomicRead | AtomicWrite | Cswap | CswapNe => true,
        Lor | Land | Bor | Band | Lxor | Bxor | Mswap => {
            matches!(dt.class(), DatatypeClass::Integer)
        }
    }
}

/// Whether a call of `kind` with `op` on `dt` is executed: `Ok(())`, or
/// `FI_EOPNOTSUPP` naming the call, the op and the datatype.
///
/// ```
/// use psmrail::ops::atomic::{check_op, AtomicDatatype, AtomicKind, AtomicOp};
/// use psmrail::ErrorKind;
/// assert!(check_op(AtomicKind::Compare, AtomicOp::CswapGt, AtomicDatatype::Float).is_ok());
/// let e = check_op(AtomicKind::Write, AtomicOp::Lor, AtomicDatatype::Float).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::OpNotSupp);
/// assert!(e.message().contains("FI_LOR") && e.message().contains("FI_FLOAT"));
/// ```
pub fn check_op(kind: AtomicKind, op: AtomicOp, dt: AtomicDatatype) -> Result<()> {
    if !kind.accepts(op) {
        return Err(Error::new(
            ErrorKind::OpNotSupp,
            format!(
                "{op} is not an operation of {kind} (see fi_atomic(3): {})",
                match kind {
                    AtomicKind::Write => "MIN..BXOR and ATOMIC_WRITE",
                    AtomicKind::Fetch => "MIN..BXOR, ATOMIC_READ and ATOMIC_WRITE",
                    AtomicKind::Compare => "CSWAP..MSWAP",
                }
            ),
        ));
    }
    if !op_supports_datatype(op, dt) {
        return Err(Error::new(
            ErrorKind::OpNotSupp,
            format!(
                "{kind} {op} is not supported on {dt} ({})",
                match dt.class() {
                    DatatypeClass::Integer => "unreachable: integers take every op",
                    DatatypeClass::Float => "logical and bitwise ops and MSWAP take integers only",
                    DatatypeClass::Complex =>
                        "complex takes SUM, PROD, ATOMIC_READ/WRITE, CSWAP, CSWAP_NE only",
                }
            ),
        ));
    }
    Ok(())
}

/// Payload bytes one element takes: the operand, plus the compare value
/// for compare calls (they travel together, never chunked).
const fn bytes_per_element(kind: AtomicKind, dt: AtomicDatatype) -> usize {
    match kind {
        AtomicKind::Compare => 2 * dt.size(),
        AtomicKind::Write | AtomicKind::Fetch => dt.size(),
    }
}

/// The `*_atomicvalid` answer: the largest element count one call of
/// `kind` with `op` on `dt` may carry, given the engine's short (single
/// message) payload of `max_payload` bytes. Atomics are never chunked, so
/// that is `max_payload / size` for write and fetch calls and
/// `max_payload / (2 * size)` for compare calls, as the C provider's valid
/// queries report (`prov/psm/src/psmx_atomic.c`).
///
/// Errors: `FI_EOPNOTSUPP` for a combination psmrail does not execute
/// (see [`check_op`]); `FI_EMSGSIZE` if `max_payload` cannot carry even
/// one element.
///
/// ```
/// use psmrail::ops::atomic::{atomic_valid, AtomicDatatype, AtomicKind, AtomicOp};
/// use psmrail::ErrorKind;
/// let dt = AtomicDatatype::Uint64;
/// assert_eq!(atomic_valid(AtomicKind::Write, AtomicOp::Sum, dt, 4096).unwrap(), 512);
/// assert_eq!(atomic_valid(AtomicKind::Compare, AtomicOp::Cswap, dt, 4096).unwrap(), 256);
/// let e = atomic_valid(AtomicKind::Fetch, AtomicOp::Band, AtomicDatatype::Double, 4096);
/// assert_eq!(e.unwrap_err().kind(), ErrorKind::OpNotSupp);
/// ```
pub fn atomic_valid(
    kind: AtomicKind,
    op: AtomicOp,
    dt: AtomicDatatype,
    max_payload: usize,
) -> Result<usize> {
    check_op(kind, op, dt)?;
    let count = max_payload / bytes_per_element(kind, dt);
    if count == 0 {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!(
                "{kind} {op} on {dt}: the {max_payload}-byte short payload cannot carry one element of {} bytes",
                bytes_per_element(kind, dt)
            ),
        ));
    }
    Ok(count)
}

/// Checks one request of `count` elements and returns its length in
/// bytes: the size of the target region, and of each of the operand,
/// compare and result buffers the kind uses.
///
/// Errors: `FI_EOPNOTSUPP` as [`check_op`]; `FI_EINVAL` for a zero count
/// (`fi_atomic(3)`: between 1 and the valid count); `FI_EMSGSIZE` for
/// more elements than [`atomic_valid`] reports — atomics are never
/// chunked.
///
/// ```
/// use psmrail::ops::atomic::{check_request, AtomicDatatype, AtomicKind, AtomicOp};
/// use psmrail::ErrorKind;
/// let (k, op, dt) = (AtomicKind::Compare, AtomicOp::Cswap, AtomicDatatype::Int32);
/// assert_eq!(check_request(k, op, dt, 8, 64).unwrap(), 32);
/// assert_eq!(check_request(k, op, dt, 9, 64).unwrap_err().kind(), ErrorKind::MsgSize);
/// assert_eq!(check_request(k, op, dt, 0, 64).unwrap_err().kind(), ErrorKind::Inval);
/// ```
pub fn check_request(
    kind: AtomicKind,
    op: AtomicOp,
    dt: AtomicDatatype,
    count: usize,
    max_payload: usize,
) -> Result<usize> {
    check_op(kind, op, dt)?;
    if count == 0 {
        return Err(Error::new(
            ErrorKind::Inval,
            format!("{kind} {op} on {dt}: count is 0 (at least one element)"),
        ));
    }
    let max = atomic_valid(kind, op, dt, max_payload)?;
    if count > max {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!(
                "{kind} {op} on {dt}: {count} elements exceed the {max} one atomic carries \
                 ({max_payload}-byte short payload; atomics are never chunked)"
            ),
        ));
    }
    // count <= max_payload / size, so this cannot overflow.
    Ok(count * dt.size())
}
