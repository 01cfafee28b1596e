//! How one RMA operation of the multi-rail endpoint is cut into rail RMA
//! operations.
//!
//! An RMA read or write moves the local buffer, in order, to or from a list
//! of remote ranges (`fi_rma_iov`). The endpoint first splits the local
//! buffer over its rails with a [`StripePlan`]; [`cut`] then lays the
//! stripes over the remote ranges, giving one [`RmaPiece`] per (stripe,
//! remote range) overlap. Each piece is one rail operation with one remote
//! range, so a large piece travels by the rail's tagged long protocol
//! rather than as a list of small chunks.
//!
//! A zero-length operation has no stripes; it still becomes one
//! zero-length piece per remote range on one rail, so the target checks
//! the key, range and rights as it does for any other length.

use super::stripe::StripePlan;

/// One rail operation of an RMA operation: `len` bytes at `local_offset`
/// of the local buffer to or from `remote_offset` of remote range `iov`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaPiece {
    /// The rail it travels on.
    pub rail: usize,
    /// Where its bytes are in the local buffer.
    pub local_offset: u64,
    /// Its length (zero only in a zero-length operation).
    pub len: u64,
    /// Which remote range (index into the operation's list).
    pub iov: usize,
    /// Where its bytes go in (or come from) the remote region.
    pub remote_offset: u64,
}

/// Why an operation cannot be cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RmaPlanError {
    /// The remote ranges do not add up to the plan's length.
    #[error("the remote ranges hold {remote} bytes, the local buffer {local}")]
    LengthMismatch {
        /// Bytes of the local buffer (the plan's total).
        local: u64,
        /// Bytes of the remote ranges (saturating).
        remote: u64,
    },
    /// A remote range's end does not fit in 64 bits.
    #[error(
        "remote range {iov} ({len} bytes at offset {offset}) passes the end of the address space"
    )]
    Overflow {
        /// The range.
        iov: usize,
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// No remote range at all.
    #[error("no remote range")]
    NoRange,
}

/// Lays `plan`'s stripes over `remote` (`(offset, len)` per remote range,
/// in order); a zero-length operation gets one empty piece per range on
/// `empty_rail`.
///
/// ```
/// use psmrail::mrail::core::rma_plan::{cut, RmaPiece};
/// use psmrail::mrail::core::stripe::StripePlan;
///
/// // 10 bytes over rails 0 and 1, to two remote ranges of 3 and 7 bytes.
/// let plan = StripePlan::equal(10, &[0, 1]).unwrap();
/// let pieces = cut(&plan, &[(100, 3), (200, 7)], 0).unwrap();
/// let got: Vec<(usize, u64, u64, usize, u64)> = pieces
///     .iter()
///     .map(|p| (p.rail, p.local_offset, p.len, p.iov, p.remote_offset))
///     .collect();
/// assert_eq!(got, [(0, 0, 3, 0, 100), (0, 3, 2, 1, 200), (1, 5, 5, 1, 202)]);
/// ```
///
/// # Errors
/// [`RmaPlanError`]: no range, ranges that do not add up to the plan, or
/// a range whose end overflows.
pub fn cut(
    plan: &StripePlan,
    remote: &[(u64, u64)],
    empty_rail: usize,
) -> Result<Vec<RmaPiece>, RmaPlanError> {
    if remote.is_empty() {
        return Err(RmaPlanError::NoRange);
    }
    let mut total: u64 = 0;
    for (iov, &(offset, len)) in remote.iter().enumerate() {
        if offset.checked_add(len).is_none() {
            return Err(RmaPlanError::Overflow { iov, offset, len });
        }
        total = total.saturating_add(len);
    }
    if total != plan.total() {
        return Err(RmaPlanError::LengthMismatch {
            local: plan.total(),
            remote: total,
        });
    }
    if total == 0 {
        return Ok(remote
            .iter()
            .enumerate()
            .map(|(iov, &(offset, _))| RmaPiece {
                rail: empty_rail,
                local_offset: 0,
                len: 0,
                iov,
                remote_offset: offset,
            })
            .collect());
    }
    let mut pieces = Vec::with_capacity(plan.len() + remote.len());
    // The cursor in the remote ranges: range `iov`, `used` bytes into it.
    let (mut iov, mut used) = (0usize, 0u64);
    for stripe in plan {
        let mut at = stripe.offset;
        while at < stripe.end() {
            // Ranges are non-empty here or skipped: total > 0 and the sum
            // matches, so a range with room is ahead.
            while remote[iov].1 == used {
                iov += 1;
                used = 0;
            }
            let (offset, len) = remote[iov];
            let n = (stripe.end() - at).min(len - used);
            pieces.push(RmaPiece {
                rail: stripe.rail,
                local_offset: at,
                len: n,
                iov,
                remote_offset: offset + used,
            });
            at += n;
            used += n;
        }
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refusals() {
        let plan = StripePlan::equal(4, &[0, 1]).unwrap();
        assert_eq!(cut(&plan, &[], 0), Err(RmaPlanError::NoRange));
        assert_eq!(
            cut(&plan, &[(0, 3)], 0),
            Err(RmaPlanError::LengthMismatch {
                local: 4,
                remote: 3
            })
        );
        assert_eq!(
            cut(&plan, &[(u64::MAX, 4)], 0),
            Err(RmaPlanError::Overflow {
                iov: 0,
                offset: u64::MAX,
                len: 4
            })
        );
    }

    #[test]
    fn zero_length_operations_still_name_every_range() {
        let plan = StripePlan::equal(0, &[0, 1]).unwrap();
        let pieces = cut(&plan, &[(8, 0), (16, 0)], 1).unwrap();
        assert_eq!(pieces.len(), 2);
        assert!(pieces.iter().all(|p| p.rail == 1 && p.len == 0));
        assert_eq!(pieces[1].remote_offset, 16);
    }

    #[test]
    fn fewer_bytes_than_rails() {
        let plan = StripePlan::equal(2, &[0, 1, 2, 3]).unwrap();
        let pieces = cut(&plan, &[(40, 2)], 0).unwrap();
        let got: Vec<(usize, u64)> = pieces.iter().map(|p| (p.rail, p.remote_offset)).collect();
        assert_eq!(got, [(0, 40), (1, 41)]);
    }

    fn ranges() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec((0u64..1 << 40, 0u64..5000), 1..6)
    }

    proptest! {
        /// Pieces cover the local buffer and every remote range exactly
        /// once, in order, each inside one stripe and one range.
        #[test]
        fn pieces_tile_both_sides(remote in ranges(), rails in 1usize..6, weights in prop::collection::vec(0u64..16, 6)) {
            let total: u64 = remote.iter().map(|r| r.1).sum();
            let shares: Vec<(usize, u64)> = (0..rails).map(|r| (r, weights[r])).collect();
            let plan = StripePlan::weighted(total, &shares).unwrap();
            let pieces = cut(&plan, &remote, 0).unwrap();
            if total == 0 {
                prop_assert_eq!(pieces.len(), remote.len());
                return Ok(());
            }
            let mut local = 0;
            let mut per_range = vec![0u64; remote.len()];
            for p in &pieces {
                prop_assert!(p.len > 0);
                prop_assert_eq!(p.local_offset, local);
                local += p.len;
                let stripe = plan.iter().find(|s| s.offset <= p.local_offset && p.local_offset < s.end()).unwrap();
                prop_assert_eq!(stripe.rail, p.rail);
                prop_assert!(p.local_offset + p.len <= stripe.end());
                let (offset, len) = remote[p.iov];
                prop_assert_eq!(p.remote_offset, offset + per_range[p.iov]);
                per_range[p.iov] += p.len;
                prop_assert!(per_range[p.iov] <= len);
            }
            prop_assert_eq!(local, total);
            let lens: Vec<u64> = remote.iter().map(|r| r.1).collect();
            prop_assert_eq!(per_range, lens);
        }
    }
}
