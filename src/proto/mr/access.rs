//! Access rights of a memory region (`fi_mr_reg`'s `access` argument).

use bitflags::bitflags;
use std::fmt;

bitflags! {
    /// What a memory region may be used for, with libfabric's values (the
    /// same bits as the matching capabilities, `Caps::READ` and so on).
    ///
    /// Local rights (`READ`, `WRITE`) describe the region as the local
    /// buffer of this process's operations; remote rights (`REMOTE_READ`,
    /// `REMOTE_WRITE`) are what a peer's RMA against the region's key needs.
    ///
    /// ```
    /// use psmrail::fabric::{Caps, MrAccess};
    /// let a = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    /// assert_eq!(a.bits(), (Caps::REMOTE_READ | Caps::REMOTE_WRITE).bits());
    /// assert_eq!(a.to_string(), "FI_REMOTE_READ | FI_REMOTE_WRITE");
    /// assert_eq!(MrAccess::all().bits(), 0x3300);
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct MrAccess: u64 {
        /// `FI_READ`: local buffer of reads (the engine writes into it).
        const READ = 1 << 8;
        /// `FI_WRITE`: local buffer of writes (the engine reads from it).
        const WRITE = 1 << 9;
        /// `FI_REMOTE_READ`: peers may read it.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: peers may write it.
        const REMOTE_WRITE = 1 << 13;
    }
}

const NAMES: [(MrAccess, &str); 4] = [
    (MrAccess::READ, "FI_READ"),
    (MrAccess::WRITE, "FI_WRITE"),
    (MrAccess::REMOTE_READ, "FI_REMOTE_READ"),
    (MrAccess::REMOTE_WRITE, "FI_REMOTE_WRITE"),
];

impl fmt::Display for MrAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (bit, name) in NAMES {
            if self.contains(bit) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        let unknown = self.bits() & !MrAccess::all().bits();
        if unknown != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{unknown:#x}")?;
            first = false;
        }
        if first {
            f.write_str("0")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_libfabrics() {
        assert_eq!(MrAccess::READ.bits(), 1 << 8);
        assert_eq!(MrAccess::WRITE.bits(), 1 << 9);
        assert_eq!(MrAccess::REMOTE_READ.bits(), 1 << 12);
        assert_eq!(MrAccess::REMOTE_WRITE.bits(), 1 << 13);
    }

    #[test]
    fn display_names_every_bit() {
        assert_eq!(MrAccess::empty().to_string(), "0");
        assert_eq!(
            MrAccess::all().to_string(),
            "FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE"
        );
        assert_eq!(
            MrAccess::from_bits_retain(1 << 20 | 1 << 8).to_string(),
            "FI_READ | 0x100000"
        );
    }
}
