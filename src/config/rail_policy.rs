//! `FI_OFI_MRAIL_CONFIG`: which rail policy applies to which message size
//! ([`RailPolicy`], [`RailPolicyTable`]).

use std::fmt;
use std::str::FromStr;

use super::error::ConfigError;
use super::number::{parse_u64, IntProblem};

/// The variable this grammar belongs to.
pub(crate) const VAR: &str = "FI_OFI_MRAIL_CONFIG";
/// The most entries a table may have (C's `MRAIL_MAX_CONFIG`; C silently
/// ignored the rest, psmrail rejects them).
pub const MAX_ENTRIES: usize = 8;
/// `ULONG_MAX`, the "unbounded" size. psmrail targets 64-bit Linux, where
/// C's `unsigned long` is 64 bits wide.
const ULONG_MAX: u64 = u64::MAX;
const _: () = assert!(std::mem::size_of::<std::ffi::c_ulong>() == 8);
const EXPECTED_ITEM: &str = "<max_size>:<policy>";
const EXPECTED_SIZE: &str =
    "<max_size> as a decimal byte count, ULONG_MAX, -1 or 18446744073709551615 (unbounded)";
const EXPECTED_POLICY: &str = "<policy> fixed, round-robin or striping";
const EXPECTED_ORDER: &str = "strictly ascending <max_size> values";

/// How messages of a size class are spread over the rails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RailPolicy {
    /// `fixed`: always the process's own rail (local rank mod rails).
    Fixed,
    /// `round-robin`: one rail per message, in turn.
    RoundRobin,
    /// `striping`: the payload is split over all rails.
    Striping,
}

impl RailPolicy {
    /// The name used in `FI_OFI_MRAIL_CONFIG`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RailPolicy::Fixed => "fixed",
            RailPolicy::RoundRobin => "round-robin",
            RailPolicy::Striping => "striping",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            RailPolicy::Fixed,
            RailPolicy::RoundRobin,
            RailPolicy::Striping,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for RailPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The upper size bound of a policy entry, in bytes, or unbounded.
///
/// ```
/// use psmrail::config::MaxSize;
/// assert_eq!(MaxSize::new(u64::MAX), MaxSize::UNBOUNDED);
/// assert_eq!(MaxSize::UNBOUNDED.to_string(), "ULONG_MAX");
/// assert!(MaxSize::new(16384).covers(16384) && !MaxSize::new(16384).covers(16385));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MaxSize(u64);

impl MaxSize {
    /// No bound (`ULONG_MAX`).
    pub const UNBOUNDED: MaxSize = MaxSize(ULONG_MAX);

    /// A bound of `bytes`; `ULONG_MAX` is [`UNBOUNDED`](Self::UNBOUNDED).
    pub const fn new(bytes: u64) -> Self {
        MaxSize(bytes)
    }

    /// The bound in bytes, `None` when unbounded.
    pub const fn bytes(self) -> Option<u64> {
        if self.0 == ULONG_MAX {
            None
        } else {
            Some(self.0)
        }
    }

    /// Whether this is [`UNBOUNDED`](Self::UNBOUNDED).
    pub const fn is_unbounded(self) -> bool {
        self.0 == ULONG_MAX
    }

    /// Whether a message of `size` bytes is within the bound.
    pub const fn covers(self, size: u64) -> bool {
        size <= self.0
    }
}

impl fmt::Display for MaxSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.bytes() {
            Some(b) => write!(f, "{b}"),
            None => f.write_str("ULONG_MAX"),
        }
    }
}

/// A parsed `FI_OFI_MRAIL_CONFIG`: 1 to [`MAX_ENTRIES`] `(max_size, policy)`
/// entries with strictly ascending sizes.
///
/// ```
/// use psmrail::config::{RailPolicy, RailPolicyTable};
///
/// let table = RailPolicyTable::default();
/// assert_eq!(table.to_string(), "16384:fixed,ULONG_MAX:striping");
/// assert_eq!(table.policy_for(100), RailPolicy::Fixed);
/// assert_eq!(table.policy_for(16385), RailPolicy::Striping);
///
/// let t: RailPolicyTable = "4096:fixed,65536:round-robin,-1:striping".parse().unwrap();
/// assert_eq!(t.policy_for(5000), RailPolicy::RoundRobin);
///
/// let err = "65536:fixed,4096:striping".parse::<RailPolicyTable>().unwrap_err();
/// assert_eq!((err.item(), err.position()), ("4096:striping", 12));
/// ```
///
/// Grammar (fi_mrail(7)): a comma-separated list of `<max_size>:<policy>`
/// pairs in ascending order of `<max_size>`; each pair applies to messages up
/// to `<max_size>` bytes not covered by the previous pairs. `<policy>` is
/// `fixed`, `round-robin` or `striping` (case-insensitive, as in C).
/// `<max_size>` is a decimal byte count, or "unbounded" written `ULONG_MAX`,
/// `-1` or the decimal value of `ULONG_MAX` (`18446744073709551615`).
/// The default is `16384:fixed,ULONG_MAX:striping`.
///
/// Where this deliberately differs from C (ARCHITECTURE.md, "Deliberately
/// better"): sizes must be strictly ascending (an equal size is a "duplicate"
/// error, a smaller one an "unsorted" error); empty items, a missing
/// `:<policy>`, an unknown policy, a non-numeric size other than
/// `ULONG_MAX`/`-1`, hex or octal sizes, and more than [`MAX_ENTRIES`] entries
/// are errors naming the item (C stopped at a bad policy, read any non-number
/// as unbounded, took `0x`/`0` prefixes as hex/octal and silently dropped
/// entries past 8). The string is never modified (C's `strsep` wrote NULs into
/// the environment).
///
/// **Sizes above the last entry.** As in C, the last entry is the catch-all:
/// messages larger than its `<max_size>` also use its policy. A table whose
/// last entry is bounded is accepted (C accepted it) but
/// [`MrailConfig`](super::MrailConfig) records a warning about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RailPolicyTable {
    entries: Vec<(MaxSize, RailPolicy)>,
}

impl Default for RailPolicyTable {
    /// `16384:fixed,ULONG_MAX:striping` (fi_mrail(7)).
    fn default() -> Self {
        RailPolicyTable {
            entries: vec![
                (MaxSize::new(16384), RailPolicy::Fixed),
                (MaxSize::UNBOUNDED, RailPolicy::Striping),
            ],
        }
    }
}

impl RailPolicyTable {
    /// A table from entries, validated exactly as if their `Display` form
    /// had been parsed.
    ///
    /// ```
    /// use psmrail::config::{MaxSize, RailPolicy, RailPolicyTable};
    /// let t = RailPolicyTable::new([(MaxSize::UNBOUNDED, RailPolicy::RoundRobin)]).unwrap();
    /// assert_eq!(t.policy_for(1 << 40), RailPolicy::RoundRobin);
    /// assert!(RailPolicyTable::new([]).is_err());
    /// ```
    pub fn new(
        entries: impl IntoIterator<Item = (MaxSize, RailPolicy)>,
    ) -> Result<Self, ConfigError> {
        let text = entries
            .into_iter()
            .map(|(size, policy)| format!("{size}:{policy}"))
            .collect::<Vec<_>>()
            .join(",");
        RailPolicyTable::parse_var(VAR, &text)
    }

    /// The entries, in ascending size order.
    pub fn entries(&self) -> &[(MaxSize, RailPolicy)] {
        &self.entries
    }

    /// The policy for a message of `size` bytes: the first entry whose
    /// `max_size` covers it, else the last entry (the catch-all, as in C).
    pub fn policy_for(&self, size: u64) -> RailPolicy {
        self.entries
            .iter()
            .find(|(max, _)| max.covers(size))
            .or(self.entries.last())
            .map_or(RailPolicy::Fixed, |&(_, policy)| policy)
    }

    /// Whether the last entry is unbounded (otherwise it also serves the
    /// sizes above it).
    pub fn is_last_unbounded(&self) -> bool {
        self.entries.last().is_some_and(|(m, _)| m.is_unbounded())
    }

    /// Parses `value` given for `var`.
    pub(crate) fn parse_var(var: &'static str, value: &str) -> Result<Self, ConfigError> {
        let mut entries: Vec<(MaxSize, RailPolicy)> = Vec::new();
        let mut offset = 0;
        for (index, item) in value.split(',').enumerate() {
            let span = offset..offset + item.len();
            offset = span.end + 1;
            let err = |expected: &'static str, problem: String| {
                ConfigError::new(var, value, span.clone(), expected).with_problem(problem)
            };
            if index >= MAX_ENTRIES {
                return Err(err(
                    "at most 8 <max_size>:<policy> entries",
                    format!("entry {} is one too many", index + 1),
                ));
            }
            if item.is_empty() {
                return Err(err(EXPECTED_ITEM, "empty item".to_owned()));
            }
            let Some((size_text, policy_text)) = item.split_once(':') else {
                return Err(err(
                    EXPECTED_ITEM,
                    "no ':<policy>' after the size".to_owned(),
                ));
            };
            let size = parse_size(size_text).map_err(|p| err(EXPECTED_SIZE, p))?;
            let policy = RailPolicy::parse(policy_text).ok_or_else(|| {
                let problem = if policy_text.is_empty() {
                    "the policy is missing".to_owned()
                } else {
                    format!("unknown policy {policy_text:?}")
                };
                err(EXPECTED_POLICY, problem)
            })?;
            if let Some(&(prev, _)) = entries.last() {
                if size == prev {
                    return Err(err(EXPECTED_ORDER, format!("duplicate max_size {size}")));
                }
                if size < prev {
                    return Err(err(
                        EXPECTED_ORDER,
                        format!("unsorted: max_size {size} after {prev}"),
                    ));
                }
            }
            entries.push((size, policy));
        }
        Ok(RailPolicyTable { entries })
    }
}

fn parse_size(text: &str) -> Result<MaxSize, String> {
    if text == "ULONG_MAX" || text == "-1" {
        return Ok(MaxSize::UNBOUNDED);
    }
    match parse_u64(text) {
        Ok(n) => Ok(MaxSize::new(n)),
        Err(IntProblem::Empty) => Err("the size is missing".to_owned()),
        Err(IntProblem::Negative(t)) => Err(format!("{t:?} is negative (only -1 means unbounded)")),
        Err(IntProblem::NotDecimal(t)) => Err(format!("{t:?} is not a decimal size")),
        Err(p) => Err(p.to_string()),
    }
}

impl FromStr for RailPolicyTable {
    type Err = ConfigError;

    /// Parses the grammar; errors are reported against `FI_OFI_MRAIL_CONFIG`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RailPolicyTable::parse_var(VAR, s)
    }
}

impl fmt::Display for RailPolicyTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (size, policy)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{size}:{policy}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbounded_spellings() {
        for s in ["ULONG_MAX", "-1", "18446744073709551615"] {
            let t: RailPolicyTable = format!("{s}:fixed").parse().unwrap();
            assert!(t.is_last_unbounded());
            assert_eq!(t.to_string(), "ULONG_MAX:fixed");
        }
    }

    #[test]
    fn bounded_last_entry_is_catch_all() {
        let t: RailPolicyTable = "10:fixed,20:round-robin".parse().unwrap();
        assert!(!t.is_last_unbounded());
        assert_eq!(t.policy_for(0), RailPolicy::Fixed);
        assert_eq!(t.policy_for(10), RailPolicy::Fixed);
        assert_eq!(t.policy_for(11), RailPolicy::RoundRobin);
        assert_eq!(t.policy_for(u64::MAX), RailPolicy::RoundRobin);
    }

    #[test]
    fn policies_are_case_insensitive() {
        let t: RailPolicyTable = "1:FIXED,2:Round-Robin,3:StRiPiNg".parse().unwrap();
        assert_eq!(t.to_string(), "1:fixed,2:round-robin,3:striping");
    }
}
