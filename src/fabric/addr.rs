//! `fi_addr_t`: how an application names a peer inserted in an address
//! vector.

use std::fmt;

/// A peer's address in an address vector (libfabric's `fi_addr_t`).
///
/// With a map AV it is an opaque handle; with a table AV it is the index
/// of the insertion. [`FiAddr::UNSPEC`] (all ones, like `FI_ADDR_UNSPEC` and
/// `FI_ADDR_NOTAVAIL`) means "no particular peer" in a receive and "not
/// available" in a completion.
///
/// ```
/// use psmrail::fabric::FiAddr;
/// assert!(FiAddr::UNSPEC.is_unspec());
/// assert_eq!(FiAddr(3).to_string(), "fi_addr 3");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiAddr(pub u64);

impl FiAddr {
    /// `FI_ADDR_UNSPEC` / `FI_ADDR_NOTAVAIL`.
    pub const UNSPEC: FiAddr = FiAddr(u64::MAX);

    /// Whether this is [`FiAddr::UNSPEC`].
    pub const fn is_unspec(self) -> bool {
        self.0 == u64::MAX
    }
}

impl fmt::Debug for FiAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unspec() {
            f.write_str("FiAddr(UNSPEC)")
        } else {
            write!(f, "FiAddr({})", self.0)
        }
    }
}

impl fmt::Display for FiAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unspec() {
            f.write_str("fi_addr UNSPEC")
        } else {
            write!(f, "fi_addr {}", self.0)
        }
    }
}
