//! Which capabilities reserve which tag bits (as in the C psm provider;
//! ARCHITECTURE.md, "Kept as in C"). The bits themselves, their contiguity
//! rule and the domain's live [`TagLayout`](crate::proto::tag_layout::TagLayout)
//! are in `proto/tag_layout.rs`.
//!
//! Two places decide reservations. [`reserve_for_getinfo`] (pure) decides at
//! discovery what the info promises, dropping or refusing `FI_MSG`/`FI_RMA`
//! when the application wants a tag space too wide to leave the bit free.
//! At endpoint enable, [`endpoint_bits`] says what the endpoint adds to its
//! domain's layout.

use super::caps::Caps;
use crate::proto::tag_layout::{contiguous, MSG_BIT, RMA_BIT};
use crate::{Error, ErrorKind, Result};

/// The bits an endpoint with `caps` reserves in its domain when it is enabled,
/// as C's `psmx_domain_enable_ep` does: [`MSG_BIT`] for `FI_MSG` without
/// `am_msg`, [`RMA_BIT`] for `FI_RMA` with `tagged_rma`.
///
/// ```
/// use psmrail::fabric::{endpoint_bits, Caps, MSG_BIT, RMA_BIT};
/// assert_eq!(endpoint_bits(Caps::MSG | Caps::RMA, false, true), MSG_BIT | RMA_BIT);
/// assert_eq!(endpoint_bits(Caps::MSG | Caps::TAGGED, true, true), 0);
/// ```
pub fn endpoint_bits(caps: Caps, am_msg: bool, tagged_rma: bool) -> u64 {
    let mut bits = 0;
    if caps.contains(Caps::MSG) && !am_msg {
        bits |= MSG_BIT;
    }
    if caps.contains(Caps::RMA) && tagged_rma {
        bits |= RMA_BIT;
    }
    bits
}

/// What discovery settled on: the caps the info reports and the tag bits
/// it promises to keep out of the user's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// The capabilities, possibly without `FI_MSG` / `FI_RMA` (see
    /// [`reserve_for_getinfo`]).
    pub(crate) caps: Caps,
    /// Reserved bits (contiguous from bit 63).
    pub(crate) reserved: u64,
}

/// Discovery's tag reservation (C: `psmx_reserve_tag_bits` in
/// `prov/psm/src/psmx_init.c`).
///
/// `asked` is the hint's capabilities (`None` or empty: none asked), and
/// `default_caps` what is reported then; `max_tag` the hint's largest tag
/// ([`max_tag`](super::max_tag) of its `mem_tag_format`, `0` without one). For `FI_MSG`
/// without `am_msg`, and then for `FI_RMA` with `tagged_rma`, the bit is
/// reserved only when `max_tag` lies below it. Otherwise discovery fails if
/// the application asked for that capability, and drops it if it did not.
///
/// # Errors
/// `NoData`, naming the capability, the tag width asked and the ways out.
pub(crate) fn reserve_for_getinfo(
    asked: Option<Caps>,
    default_caps: Caps,
    max_tag: u64,
    am_msg: bool,
    tagged_rma: bool,
) -> Result<Reservation> {
    let explicit = asked.filter(|c| !c.is_empty());
    let mut caps = explicit.unwrap_or(default_caps);
    let mut reserved = 0;
    let rules = [
        (Caps::MSG, !am_msg, MSG_BIT, "FI_MSG", "FI_PSM_AM_MSG=1"),
        (
            Caps::RMA,
            tagged_rma,
            RMA_BIT,
            "FI_RMA",
            "FI_PSM_TAGGED_RMA=0",
        ),
    ];
    for (cap, needs_bit, bit, name, env) in rules {
        if !caps.contains(cap) || !needs_bit {
            continue;
        }
        if max_tag < bit {
            reserved |= bit;
        } else if explicit.is_some() {
            return Err(Error::new(
                ErrorKind::NoData,
                format!(
                    "{name} needs tag bit {} but the hints ask for tags up to {max_tag:#x}: \
                     ask for a narrower mem_tag_format, drop {name}, or set {env}",
                    bit.trailing_zeros()
                ),
            ));
        } else {
            caps.remove(cap);
        }
    }
    Ok(Reservation {
        caps,
        reserved: contiguous(reserved),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tag_layout::mem_tag_format;

    const ALL: Caps = Caps::MSG.union(Caps::TAGGED).union(Caps::RMA);
    const NARROW: u64 = (1 << 60) - 1;

    #[test]
    fn endpoint_bits_follow_config() {
        assert_eq!(endpoint_bits(Caps::MSG, false, false), MSG_BIT);
        assert_eq!(endpoint_bits(Caps::MSG, true, false), 0);
        assert_eq!(endpoint_bits(Caps::RMA, false, true), RMA_BIT);
        assert_eq!(endpoint_bits(Caps::RMA, false, false), 0);
        assert_eq!(endpoint_bits(Caps::TAGGED | Caps::ATOMIC, false, true), 0);
    }

    #[test]
    fn getinfo_defaults_reserve_both() {
        let r = reserve_for_getinfo(None, ALL, 0, false, true).unwrap();
        assert_eq!(r.caps, ALL);
        assert_eq!(r.reserved, MSG_BIT | RMA_BIT);
        assert_eq!(mem_tag_format(r.reserved), 0x2AAA_AAAA_AAAA_AAAA);
        // Empty caps count as none asked.
        let e = reserve_for_getinfo(Some(Caps::empty()), ALL, 0, false, true).unwrap();
        assert_eq!(e, r);
    }

    #[test]
    fn am_msg_frees_the_msg_bit() {
        let r = reserve_for_getinfo(None, ALL, 0, true, false).unwrap();
        assert_eq!((r.caps, r.reserved), (ALL, 0));
        assert_eq!(mem_tag_format(r.reserved), 0xAAAA_AAAA_AAAA_AAAA);
        let r = reserve_for_getinfo(None, ALL, 0, false, false).unwrap();
        assert_eq!(r.reserved, MSG_BIT);
        let r = reserve_for_getinfo(None, ALL, 0, true, true).unwrap();
        assert_eq!(r.reserved, MSG_BIT | RMA_BIT, "RMA alone still takes 63");
    }

    #[test]
    fn caps_without_msg_or_rma_reserve_nothing() {
        let r = reserve_for_getinfo(Some(Caps::TAGGED), ALL, u64::MAX, false, true).unwrap();
        assert_eq!((r.caps, r.reserved), (Caps::TAGGED, 0));
    }

    #[test]
    fn narrow_hint_reserves() {
        let asked = Some(Caps::MSG | Caps::RMA);
        let r = reserve_for_getinfo(asked, ALL, NARROW, false, true).unwrap();
        assert_eq!(r.caps, Caps::MSG | Caps::RMA);
        assert_eq!(r.reserved, MSG_BIT | RMA_BIT);
        // Exactly below each bit is still fine.
        let r = reserve_for_getinfo(asked, ALL, RMA_BIT - 1, false, true).unwrap();
        assert_eq!(r.reserved, MSG_BIT | RMA_BIT);
        let r = reserve_for_getinfo(Some(Caps::MSG), ALL, MSG_BIT - 1, false, true).unwrap();
        assert_eq!(r.reserved, MSG_BIT);
    }

    #[test]
    fn wide_hint_with_explicit_msg_fails() {
        let e = reserve_for_getinfo(Some(Caps::MSG), ALL, u64::MAX, false, true).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
        let text = e.to_string();
        assert!(text.contains("FI_MSG") && text.contains("bit 63"), "{text}");
        assert!(text.contains("FI_PSM_AM_MSG=1"), "{text}");
        // With am_msg the bit is not needed.
        let r = reserve_for_getinfo(Some(Caps::MSG), ALL, u64::MAX, true, false).unwrap();
        assert_eq!((r.caps, r.reserved), (Caps::MSG, 0));
    }

    #[test]
    fn wide_hint_with_explicit_rma_fails() {
        let e = reserve_for_getinfo(Some(Caps::RMA), ALL, RMA_BIT, false, true).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
        assert!(e.to_string().contains("FI_PSM_TAGGED_RMA=0"), "{e}");
        // MSG fits (below bit 63) but RMA does not: still an error.
        let e = reserve_for_getinfo(Some(Caps::MSG | Caps::RMA), ALL, RMA_BIT, false, true)
            .unwrap_err();
        assert!(e.to_string().contains("FI_RMA"), "{e}");
        let r = reserve_for_getinfo(Some(Caps::RMA), ALL, u64::MAX, false, false).unwrap();
        assert_eq!((r.caps, r.reserved), (Caps::RMA, 0));
    }

    #[test]
    fn wide_hint_without_caps_drops_them() {
        let r = reserve_for_getinfo(None, ALL, u64::MAX, false, true).unwrap();
        assert_eq!((r.caps, r.reserved), (Caps::TAGGED, 0));
        // Only bit 62 is in the way: MSG stays, RMA goes.
        let r = reserve_for_getinfo(None, ALL, RMA_BIT, false, true).unwrap();
        assert_eq!((r.caps, r.reserved), (Caps::MSG | Caps::TAGGED, MSG_BIT));
        assert_eq!(mem_tag_format(r.reserved), 0x5555_5555_5555_5555);
    }
}
