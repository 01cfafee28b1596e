//! The 64-bit tag space: which high bits psm keeps for itself, and the
//! `mem_tag_format` that tells the application what is left (as in the
//! C psm provider; ARCHITECTURE.md, "Kept as in C").
//!
//! * [`MSG_BIT`] (bit 63) marks untagged messages carried on the tagged
//!   queue (the sender's epid sits in the low bits); it is reserved when
//!   untagged messages use the MQ (`FI_PSM_AM_MSG=0`, the default).
//! * [`RMA_BIT`] (bit 62) marks long-RMA transfers; it is reserved when
//!   `FI_PSM_TAGGED_RMA=1` (the default).
//!
//! Reservations are kept contiguous from the top (the C provider's
//! `reserved |= reserved << 1`): reserving bit 62 also takes bit 63, so the
//! user tag space is always the low bits below the lowest reserved one.
//!
//! [`TagLayout`] is the domain's live set, grown as endpoints enable and
//! never shrunk. Which capabilities reserve which bit (at discovery and at
//! endpoint enable) is the fabric's business (`fabric/tag_reservation.rs`);
//! the bits and the arithmetic are here, below the code that reads them in
//! tags (long RMA, the peer watch's view of untagged receives).
//!
//! The public items are re-exported at `psmrail::fabric`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Tag bit marking untagged messages carried over the tagged queue.
pub const MSG_BIT: u64 = 1 << 63;
/// Tag bit marking long-RMA transfers.
pub const RMA_BIT: u64 = 1 << 62;

/// libfabric's `FI_TAG_GENERIC`: alternating bits, one "field" per bit pair.
const TAG_GENERIC: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// `bits` widened to a run from its lowest set bit up to bit 63: the
/// contiguity rule above (`0` stays `0`).
pub(crate) const fn contiguous(bits: u64) -> u64 {
    if bits == 0 {
        0
    } else {
        u64::MAX << bits.trailing_zeros()
    }
}

/// The reserved tag bits of a domain. They only grow: once an endpoint
/// reserved a bit, traffic may use it until the domain closes.
///
/// The hot path reads [`user_mask`](Self::user_mask) (one relaxed-enough
/// atomic load); [`reserve`](Self::reserve) runs at endpoint enable.
#[derive(Debug, Default)]
pub(crate) struct TagLayout {
    reserved: AtomicU64,
}

#[allow(dead_code)] // the domain and the ops (other files) use these
impl TagLayout {
    /// No bits reserved.
    pub(crate) fn new() -> Self {
        TagLayout {
            reserved: AtomicU64::new(0),
        }
    }

    /// Adds `bits` (widened to stay contiguous from the top).
    pub(crate) fn reserve(&self, bits: u64) {
        self.reserved.fetch_or(contiguous(bits), Ordering::AcqRel);
    }

    /// The reserved bits: empty, or a run ending at bit 63.
    #[inline]
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// The bits a user tag may use (`!reserved`).
    #[inline]
    pub(crate) fn user_mask(&self) -> u64 {
        !self.reserved()
    }

    /// The `mem_tag_format` matching the current reservation.
    pub(crate) fn mem_tag_format(&self) -> u64 {
        mem_tag_format(self.reserved())
    }
}

/// The `mem_tag_format` reported when `reserved` bits are taken: libfabric's
/// `ofi_tag_format` applied to the largest user tag, i.e. `FI_TAG_GENERIC`
/// shifted right by the number of bits lost at the top.
///
/// ```
/// use psmrail::fabric::{mem_tag_format, MSG_BIT, RMA_BIT};
/// assert_eq!(mem_tag_format(MSG_BIT | RMA_BIT), 0x2AAA_AAAA_AAAA_AAAA); // 62-bit tags
/// assert_eq!(mem_tag_format(RMA_BIT), 0x2AAA_AAAA_AAAA_AAAA);           // RMA takes 63 too
/// assert_eq!(mem_tag_format(MSG_BIT), 0x5555_5555_5555_5555);           // 63-bit tags
/// assert_eq!(mem_tag_format(0), 0xAAAA_AAAA_AAAA_AAAA);                 // 64-bit tags
/// ```
pub fn mem_tag_format(reserved: u64) -> u64 {
    let user_bits = contiguous(reserved).trailing_zeros().min(64);
    if user_bits == 0 {
        return 0;
    }
    TAG_GENERIC >> (64 - user_bits)
}

/// The largest tag a `mem_tag_format` allows: every bit up to its highest
/// set bit (libfabric's `ofi_max_tag`); `0` for a zero format.
///
/// ```
/// use psmrail::fabric::max_tag;
/// assert_eq!(max_tag(0x5555_5555_5555_5555), u64::MAX >> 1);
/// assert_eq!(max_tag(0xFFFF), 0xFFFF);
/// assert_eq!(max_tag(0), 0);
/// ```
pub fn max_tag(mem_tag_format: u64) -> u64 {
    if mem_tag_format == 0 {
        0
    } else {
        u64::MAX >> mem_tag_format.leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_per_reservation() {
        assert_eq!(mem_tag_format(MSG_BIT | RMA_BIT), 0x2AAA_AAAA_AAAA_AAAA);
        assert_eq!(mem_tag_format(RMA_BIT), 0x2AAA_AAAA_AAAA_AAAA);
        assert_eq!(mem_tag_format(MSG_BIT), 0x5555_5555_5555_5555);
        assert_eq!(mem_tag_format(0), 0xAAAA_AAAA_AAAA_AAAA);
        assert_eq!(mem_tag_format(u64::MAX), 0);
        assert_eq!(mem_tag_format(1 << 4), 0xA);
        // The format's max tag is exactly the user range.
        for r in [0, MSG_BIT, MSG_BIT | RMA_BIT] {
            assert_eq!(max_tag(mem_tag_format(r)), !contiguous(r), "{r:#x}");
        }
    }

    #[test]
    fn layout_only_grows_and_stays_contiguous() {
        let t = TagLayout::new();
        assert_eq!(t.reserved(), 0);
        assert_eq!(t.user_mask(), u64::MAX);
        t.reserve(MSG_BIT);
        assert_eq!(t.reserved(), MSG_BIT);
        t.reserve(0);
        assert_eq!(t.reserved(), MSG_BIT);
        t.reserve(RMA_BIT);
        assert_eq!(t.reserved(), MSG_BIT | RMA_BIT);
        t.reserve(MSG_BIT);
        assert_eq!(t.user_mask(), u64::MAX >> 2);
        assert_eq!(t.mem_tag_format(), 0x2AAA_AAAA_AAAA_AAAA);
        let u = TagLayout::default();
        u.reserve(RMA_BIT);
        assert_eq!(u.reserved(), MSG_BIT | RMA_BIT, "bit 62 takes 63 too");
    }

    #[test]
    fn contiguous_widens_upwards() {
        assert_eq!(contiguous(0), 0);
        assert_eq!(contiguous(MSG_BIT), MSG_BIT);
        assert_eq!(contiguous(RMA_BIT), MSG_BIT | RMA_BIT);
        assert_eq!(contiguous(1), u64::MAX);
        assert_eq!(contiguous(0b1010_0000), u64::MAX << 5);
    }
}
