//! The atomic operations (`fi_op`) and the three kinds of atomic call
//! (base, fetch, compare) that each accept a subset of them.

use std::fmt;

use crate::{Error, ErrorKind, Result};

/// An atomic operation, numbered as libfabric's `enum fi_op`
/// (`FI_MIN` = 0 ... `FI_MSWAP` = 18), so the value travels on the wire
/// unchanged.
///
/// Semantics, with `d` the target element, `s` the operand, `c` the compare
/// value (`fi_atomic(3)`; the compare value is on the **left** of the ordered
/// comparisons):
///
/// | op | effect |
/// |---|---|
/// | `Min` / `Max` | if `d > s` / `d < s` then `d = s` |
/// | `Sum` / `Prod` | `d = d + s` / `d = d * s` (integers wrap) |
/// | `Lor` / `Land` / `Lxor` | logical or / and / xor of the truth values, stored as 1 or 0 |
/// | `Bor` / `Band` / `Bxor` | bitwise |
/// | `AtomicRead` / `AtomicWrite` | result = `d` / `d = s` |
/// | `Cswap`, `CswapNe`, `CswapLe`, `CswapLt`, `CswapGe`, `CswapGt` | if `c == d`, `c != d`, `c <= d`, `c < d`, `c >= d`, `c > d` then `d = s` |
/// | `Mswap` | `d = (s & c) \| (d & !c)` |
///
/// ```
/// use psmrail::ops::atomic::AtomicOp;
/// assert_eq!(AtomicOp::try_from(13).unwrap(), AtomicOp::CswapNe);
/// assert_eq!(AtomicOp::Mswap as u32, 18);
/// assert_eq!(AtomicOp::Sum.to_string(), "FI_SUM");
/// assert!(AtomicOp::try_from(19).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AtomicOp {
    /// `FI_MIN`: if `d > s` then `d = s`.
    Min = 0,
    /// `FI_MAX`: if `d < s` then `d = s`.
    Max = 1,
    /// `FI_SUM`: `d = d + s` (wrapping for integers).
    Sum = 2,
    /// `FI_PROD`: `d = d * s` (wrapping for integers).
    Prod = 3,
    /// `FI_LOR`: `d = (d != 0 || s != 0)` as 1 or 0.
    Lor = 4,
    /// `FI_LAND`: `d = (d != 0 && s != 0)` as 1 or 0.
    Land = 5,
    /// `FI_BOR`: `d = d | s`.
    Bor = 6,
    /// `FI_BAND`: `d = d & s`.
    Band = 7,
    /// `FI_LXOR`: `d = (d != 0) != (s != 0)` as 1 or 0.
    Lxor = 8,
    /// `FI_BXOR`: `d = d ^ s`.
    Bxor = 9,
    /// `FI_ATOMIC_READ`: the result is `d`; `d` is unchanged (fetch only).
    AtomicRead = 10,
    /// `FI_ATOMIC_WRITE`: `d = s`.
    AtomicWrite = 11,
    /// `FI_CSWAP`: if `c == d` then `d = s`.
    Cswap = 12,
    /// `FI_CSWAP_NE`: if `c != d` then `d = s`.
    CswapNe = 13,
    /// `FI_CSWAP_LE`: if `c <= d` then `d = s`.
    CswapLe = 14,
    /// `FI_CSWAP_LT`: if `c < d` then `d = s`.
    CswapLt = 15,
    /// `FI_CSWAP_GE`: if `c >= d` then `d = s`.
    CswapGe = 16,
    /// `FI_CSWAP_GT`: if `c > d` then `d = s`.
    CswapGt = 17,
    /// `FI_MSWAP`: `d = (s & c) | (d & !c)`.
    Mswap = 18,
}

impl AtomicOp {
    /// Every operation, in `fi_op` order (index = wire value).
    pub const ALL: [AtomicOp; 19] = [
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Sum,
        AtomicOp::Prod,
        AtomicOp::Lor,
        AtomicOp::Land,
        AtomicOp::Bor,
        AtomicOp::Band,
        AtomicOp::Lxor,
        AtomicOp::Bxor,
        AtomicOp::AtomicRead,
        AtomicOp::AtomicWrite,
        AtomicOp::Cswap,
        AtomicOp::CswapNe,
        AtomicOp::CswapLe,
        AtomicOp::CswapLt,
        AtomicOp::CswapGe,
        AtomicOp::CswapGt,
        AtomicOp::Mswap,
    ];

    /// The libfabric constant name (`"FI_MIN"`, ...).
    pub const fn fi_name(self) -> &'static str {
        match self {
            AtomicOp::Min => "FI_MIN",
            AtomicOp::Max => "FI_MAX",
            AtomicOp::Sum => "FI_SUM",
            AtomicOp::Prod => "FI_PROD",
            AtomicOp::Lor => "FI_LOR",
            AtomicOp::Land => "FI_LAND",
            AtomicOp::Bor => "FI_BOR",
            AtomicOp::Band => "FI_BAND",
            AtomicOp::Lxor => "FI_LXOR",
            AtomicOp::Bxor => "FI_BXOR",
            AtomicOp::AtomicRead => "FI_ATOMIC_READ",
            AtomicOp::AtomicWrite => "FI_ATOMIC_WRITE",
            AtomicOp::Cswap => "FI_CSWAP",
            AtomicOp::CswapNe => "FI_CSWAP_NE",
            AtomicOp::CswapLe => "FI_CSWAP_LE",
            AtomicOp::CswapLt => "FI_CSWAP_LT",
            AtomicOp::CswapGe => "FI_CSWAP_GE",
            AtomicOp::CswapGt => "FI_CSWAP_GT",
            AtomicOp::Mswap => "FI_MSWAP",
        }
    }

    /// Whether this is one of the compare operations (`FI_CSWAP` ...
    /// `FI_MSWAP`), the only ones a compare call accepts.
    pub const fn is_compare(self) -> bool {
        self as u32 >= AtomicOp::Cswap as u32
    }
}

impl fmt::Display for AtomicOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.fi_name())
    }
}

impl TryFrom<u32> for AtomicOp {
    type Error = Error;

    /// The operation with `fi_op` value `v`; `FI_EINVAL` for values at or
    /// above `FI_ATOMIC_OP_LAST` (19), as the C provider's initiator check.
    fn try_from(v: u32) -> Result<Self> {
        usize::try_from(v)
            .ok()
            .and_then(|i| AtomicOp::ALL.get(i).copied())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Inval,
                    format!("atomic op {v} is not an fi_op value (0..=18)"),
                )
            })
    }
}

/// The three kinds of atomic call; each accepts its own set of operations
/// (`fi_atomic(3)`):
///
/// * [`Write`](Self::Write) (`fi_atomic`, `fi_atomicvalid`): `MIN` ...
///   `BXOR` and `ATOMIC_WRITE`;
/// * [`Fetch`](Self::Fetch) (`fi_fetch_atomic`, `fi_fetch_atomicvalid`):
///   those plus `ATOMIC_READ`; the old values come back;
/// * [`Compare`](Self::Compare) (`fi_compare_atomic`,
///   `fi_compare_atomicvalid`): `CSWAP` ... `MSWAP`; the old values come
///   back.
///
/// ```
/// use psmrail::ops::atomic::{AtomicKind, AtomicOp};
/// assert!(AtomicKind::Fetch.accepts(AtomicOp::AtomicRead));
/// assert!(!AtomicKind::Write.accepts(AtomicOp::AtomicRead));
/// assert!(AtomicKind::Compare.accepts(AtomicOp::Mswap));
/// assert!(!AtomicKind::Compare.accepts(AtomicOp::Sum));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicKind {
    /// A base atomic: the target is updated, nothing comes back.
    Write,
    /// A fetch atomic: the target is updated and its old values come back.
    Fetch,
    /// A compare atomic: operand and compare values go out, the old
    /// values come back.
    Compare,
}

impl AtomicKind {
    /// Every kind.
    pub const ALL: [AtomicKind; 3] = [AtomicKind::Write, AtomicKind::Fetch, AtomicKind::Compare];

    /// Whether a call of this kind accepts `op` (`fi_atomic(3)`), whatever
    /// the datatype.
    pub const fn accepts(self, op: AtomicOp) -> bool {
        match self {
            AtomicKind::Write => !op.is_compare() && !matches!(op, AtomicOp::AtomicRead),
            AtomicKind::Fetch => !op.is_compare(),
            AtomicKind::Compare => op.is_compare(),
        }
    }

    /// Whether the old target values come back to the initiator.
    pub const fn fetches(self) -> bool {
        !matches!(self, AtomicKind::Write)
    }

    /// The libfabric call family, for messages (`"fi_atomic"`, ...).
    pub const fn call_name(self) -> &'static str {
        match self {
            AtomicKind::Write => "fi_atomic",
            AtomicKind::Fetch => "fi_fetch_atomic",
            AtomicKind::Compare => "fi_compare_atomic",
        }
    }
}

impl fmt::Display for AtomicKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.call_name())
    }
}
