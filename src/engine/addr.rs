//! Endpoint ids and connected-peer handles.
//!
//! An [`Epid`] names an endpoint anywhere (PSM's 64-bit `psm_epid_t`; the
//! soft engine packs an IPv4 address, port and instance into the same 64
//! bits). A [`PeerAddr`] is what connecting to an epid gives: a cheap handle
//! the engine resolves without a lookup (PSM's `psm_epaddr_t`).

use std::fmt;
use std::str::FromStr;

/// A 64-bit endpoint id: what `fi_getname` returns and `fi_av_insert` takes.
///
/// Text form: `fi_addr_psmx://<hex>`, as the C provider prints it (a bare
/// hex number with or without `0x` is accepted on input).
///
/// ```
/// use psmrail::engine::Epid;
/// let e: Epid = "fi_addr_psmx://2a0103".parse().unwrap();
/// assert_eq!(e, Epid(0x2a0103));
/// assert_eq!(e.to_string(), "fi_addr_psmx://2a0103");
/// assert!("fi_addr_psmx://xyz".parse::<Epid>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Epid(pub u64);

/// Scheme of the text form of an [`Epid`].
pub const EPID_SCHEME: &str = "fi_addr_psmx://";

impl fmt::Display for Epid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{EPID_SCHEME}{:x}", self.0)
    }
}

impl fmt::Debug for Epid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Epid({:#x})", self.0)
    }
}

/// Why a text is not an [`Epid`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an endpoint id: expected {EPID_SCHEME}<hex> with 1 to 16 hex digits")]
pub struct EpidParseError {
    /// The text that did not parse.
    pub text: String,
}

impl FromStr for Epid {
    type Err = EpidParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || EpidParseError { text: s.to_owned() };
        let hex = if s.len() >= EPID_SCHEME.len()
            && s.is_char_boundary(EPID_SCHEME.len())
            && s[..EPID_SCHEME.len()].eq_ignore_ascii_case(EPID_SCHEME)
        {
            &s[EPID_SCHEME.len()..]
        } else {
            s.strip_prefix("0x")
                .or_else(|| s.strip_prefix("0X"))
                .unwrap_or(s)
        };
        if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err());
        }
        u64::from_str_radix(hex, 16).map(Epid).map_err(|_| err())
    }
}

/// A connected peer, as the engine that connected it knows it.
///
/// Only meaningful to the endpoint that returned it from `connect`; the
/// value is opaque above the engine (the native engine stores PSM's epaddr).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PeerAddr(pub u64);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_forms() {
        assert_eq!("0x10".parse::<Epid>().unwrap(), Epid(16));
        assert_eq!("ffffffffffffffff".parse::<Epid>().unwrap(), Epid(u64::MAX));
        assert_eq!("FI_ADDR_PSMX://A".parse::<Epid>().unwrap(), Epid(10));
        for bad in [
            "",
            "0x",
            "fi_addr_psmx://",
            "1ffffffffffffffff",
            "-1",
            "+1",
            "1 ",
        ] {
            let e = bad.parse::<Epid>().unwrap_err();
            assert!(e.to_string().contains("not an endpoint id"), "{bad}: {e}");
        }
    }

    proptest! {
        #[test]
        fn display_round_trips(v: u64) {
            let e = Epid(v);
            prop_assert_eq!(e.to_string().parse::<Epid>().unwrap(), e);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = s.parse::<Epid>();
        }
    }
}
