//! [`MrRefusal`]: which check of a peer's RMA or atomic request a memory
//! region refused, carried to the initiator so that its `FI_EACCES` says
//! what the target found wrong.

use std::fmt;

/// Why a region refused a peer's request (the typed cause of the target's
/// `FI_EACCES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MrRefusal {
    /// No region has the key.
    Key,
    /// The bytes lie outside the region.
    Range,
    /// The region was registered without the right the request needs.
    Rights,
}

impl MrRefusal {
    /// The code that travels in a status word (never 0).
    pub(crate) fn code(self) -> u32 {
        match self {
            MrRefusal::Key => 1,
            MrRefusal::Range => 2,
            MrRefusal::Rights => 3,
        }
    }

    /// The refusal a code names (`None` for 0 and unknown codes).
    pub(crate) fn from_code(code: u32) -> Option<MrRefusal> {
        match code {
            1 => Some(MrRefusal::Key),
            2 => Some(MrRefusal::Range),
            3 => Some(MrRefusal::Rights),
            _ => None,
        }
    }

    /// The refusal carried as the source of `e`, if any.
    pub(crate) fn of(e: &crate::Error) -> Option<MrRefusal> {
        std::error::Error::source(e)?
            .downcast_ref::<MrRefusal>()
            .copied()
    }
}

impl fmt::Display for MrRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MrRefusal::Key => "no memory region there has the key",
            MrRefusal::Range => "the bytes lie outside the memory region",
            MrRefusal::Rights => "the memory region lacks the access right",
        })
    }
}

impl std::error::Error for MrRefusal {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_ride_as_an_error_source() {
        for r in [MrRefusal::Key, MrRefusal::Range, MrRefusal::Rights] {
            assert_eq!(MrRefusal::from_code(r.code()), Some(r));
            let e = crate::Error::with_source(crate::ErrorKind::Access, "refused", r);
            assert_eq!(MrRefusal::of(&e), Some(r));
        }
        assert_eq!(MrRefusal::from_code(0), None);
        assert_eq!(MrRefusal::from_code(99), None);
        assert_eq!(
            MrRefusal::of(&crate::Error::new(crate::ErrorKind::Access, "x")),
            None
        );
    }
}
