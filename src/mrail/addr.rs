//! [`MrailAddr`]: the address of an mrail endpoint — its rails' addresses
//! in rail order (fi_mrail(7): "an mrail address is the concatenation of
//! the rail addresses").
//!
//! As text (`FI_ADDR_STR`) it is `fi_addr_mrail://` followed by the rails'
//! endpoint ids in hex, separated by `:`, e.g.
//! `fi_addr_mrail://5e0cc61200c6:5e0cc61201c6`.

use crate::engine::Epid;
use crate::{Error, ErrorKind, Result};
use std::fmt;
use std::str::FromStr;

/// The `FI_ADDR_STR` scheme of an mrail address.
pub const MRAIL_SCHEME: &str = "fi_addr_mrail://";

/// An mrail endpoint's address: one endpoint id per rail, in rail order.
///
/// ```
/// use psmrail::engine::Epid;
/// use psmrail::mrail::MrailAddr;
///
/// let a = MrailAddr::new(vec![Epid(0x1234), Epid(0xabcd)])?;
/// assert_eq!(a.to_string(), "fi_addr_mrail://1234:abcd");
/// assert_eq!(a.to_string().parse::<MrailAddr>()?, a);
/// assert_eq!(a.rail(1), Some(Epid(0xabcd)));
/// assert!("fi_addr_mrail://".parse::<MrailAddr>().is_err());
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MrailAddr {
    rails: Vec<Epid>,
}

impl MrailAddr {
    /// The address of an endpoint whose rails have these ids.
    ///
    /// # Errors
    /// `Inval` for an empty list.
    pub fn new(rails: Vec<Epid>) -> Result<MrailAddr> {
        if rails.is_empty() {
            return Err(Error::new(
                ErrorKind::Inval,
                "an mrail address needs at least one rail",
            ));
        }
        Ok(MrailAddr { rails })
    }

    /// The rails' endpoint ids, in rail order.
    pub fn rails(&self) -> &[Epid] {
        &self.rails
    }

    /// Rail `i`'s endpoint id.
    pub fn rail(&self, i: usize) -> Option<Epid> {
        self.rails.get(i).copied()
    }

    /// How many rails.
    pub fn len(&self) -> usize {
        self.rails.len()
    }

    /// Never true (an address has at least one rail); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.rails.is_empty()
    }

    /// The identity an endpoint gives itself in every mrail header: its
    /// first rail's id (unique, since that rail's endpoint is).
    pub(crate) fn token(&self) -> u64 {
        self.rails[0].0
    }
}

impl fmt::Display for MrailAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MRAIL_SCHEME)?;
        for (i, e) in self.rails.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:x}", e.0)?;
        }
        Ok(())
    }
}

impl FromStr for MrailAddr {
    type Err = Error;

    /// Parses `fi_addr_mrail://<hex>[:<hex>...]` (the scheme compared
    /// case-insensitively; 1 to 16 hex digits per rail).
    fn from_str(s: &str) -> Result<MrailAddr> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Inval,
                format!("{s:?} is not an mrail address ({why}): expected {MRAIL_SCHEME}<hex>[:<hex>...]"),
            )
        };
        let n = MRAIL_SCHEME.len();
        if s.len() < n || !s.is_char_boundary(n) || !s[..n].eq_ignore_ascii_case(MRAIL_SCHEME) {
            return Err(bad("wrong scheme"));
        }
        let rails = s[n..]
            .split(':')
            .map(|h| {
                if h.is_empty() || h.len() > 16 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("a rail is not 1 to 16 hex digits"));
                }
                u64::from_str_radix(h, 16)
                    .map(Epid)
                    .map_err(|_| bad("a rail is not a number"))
            })
            .collect::<Result<Vec<_>>>()?;
        MrailAddr::new(rails)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_texts_are_refused() {
        for bad in [
            "",
            "fi_addr_mrail:/1",
            "fi_addr_psmx://12",
            "fi_addr_mrail://",
            "fi_addr_mrail://1::2",
            "fi_addr_mrail://12345678901234567",
            "fi_addr_mrail://xyz",
            "fi_addr_mrail://+1",
        ] {
            assert!(bad.parse::<MrailAddr>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "FI_ADDR_MRAIL://A".parse::<MrailAddr>().unwrap().rails(),
            &[Epid(10)]
        );
    }

    proptest! {
        #[test]
        fn text_round_trips(ids in proptest::collection::vec(any::<u64>(), 1..17)) {
            let a = MrailAddr::new(ids.into_iter().map(Epid).collect()).unwrap();
            prop_assert_eq!(a.to_string().parse::<MrailAddr>().unwrap(), a);
        }
    }
}
