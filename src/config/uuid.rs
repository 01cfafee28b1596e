//! [`JobUuid`]: the PSM job key (`FI_PSM_UUID`).

use std::fmt;
use std::str::FromStr;

use super::error::ConfigError;

const VAR: &str = "FI_PSM_UUID";
const EXPECTED: &str =
    "a UUID in the canonical 8-4-4-4-12 hex form, e.g. 0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF";
/// Byte offsets of the dashes in the canonical form.
const DASHES: [usize; 4] = [8, 13, 18, 23];
/// Length of the canonical form.
const LEN: usize = 36;

/// The 16-byte job key every process of a job passes to `psm_ep_open`
/// (`FI_PSM_UUID`). Processes with different keys cannot talk to each other.
///
/// Parsing accepts exactly the canonical `8-4-4-4-12` form with hex digits
/// in either case (like the C provider); `Display` writes it upper-case.
///
/// ```
/// use psmrail::config::JobUuid;
///
/// let u: JobUuid = "0fff0fff-0000-0000-0000-0fff0fff0fff".parse().unwrap();
/// assert_eq!(u, JobUuid::DEFAULT);
/// assert_eq!(u.to_string(), "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF");
/// assert_eq!(u.as_bytes()[..4], [0x0f, 0xff, 0x0f, 0xff]);
///
/// let err = "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFG".parse::<JobUuid>().unwrap_err();
/// assert_eq!((err.item(), err.position()), ("G", 35));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobUuid([u8; 16]);

impl JobUuid {
    /// The default key, `0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF` (fi_psm(7)).
    pub const DEFAULT: JobUuid = JobUuid([
        0x0f, 0xff, 0x0f, 0xff, 0, 0, 0, 0, 0, 0, 0x0f, 0xff, 0x0f, 0xff, 0x0f, 0xff,
    ]);

    /// A key from its 16 bytes, in the order they are written.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        JobUuid(bytes)
    }

    /// The 16 bytes, in the order they are written.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Parses `value` given for `var` (used for `FI_PSM_UUID`).
    pub(crate) fn parse_var(var: &'static str, value: &str) -> Result<Self, ConfigError> {
        let err = |range: std::ops::Range<usize>, problem: String| {
            ConfigError::new(var, value, range, EXPECTED).with_problem(problem)
        };
        let mut bytes = [0u8; 16];
        let mut nibbles = 0usize;
        for (pos, c) in value.char_indices() {
            if pos >= LEN {
                return Err(err(
                    pos..value.len(),
                    format!(
                        "{} characters of trailing text after the 36-character UUID",
                        value[pos..].chars().count()
                    ),
                ));
            }
            let range = pos..pos + c.len_utf8();
            if DASHES.contains(&pos) {
                if c != '-' {
                    return Err(err(
                        range,
                        format!("found {c:?} where a '-' must separate the groups"),
                    ));
                }
                continue;
            }
            let Some(digit) = c.to_digit(16) else {
                let what = if c == '-' {
                    "a '-' inside a group (groups are 8-4-4-4-12 hex digits)".to_owned()
                } else {
                    format!("{c:?} is not a hex digit")
                };
                return Err(err(range, what));
            };
            // `digit < 16`, so the cast is lossless.
            bytes[nibbles / 2] |= (digit as u8) << if nibbles % 2 == 0 { 4 } else { 0 };
            nibbles += 1;
        }
        if value.len() < LEN {
            return Err(err(
                0..value.len(),
                format!("{} characters is too short for a UUID (36)", value.len()),
            ));
        }
        Ok(JobUuid(bytes))
    }
}

impl Default for JobUuid {
    fn default() -> Self {
        JobUuid::DEFAULT
    }
}

impl FromStr for JobUuid {
    type Err = ConfigError;

    /// Parses the canonical form; errors are reported against `FI_PSM_UUID`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobUuid::parse_var(VAR, s)
    }
}

impl fmt::Display for JobUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for JobUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobUuid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_round_trips() {
        assert_eq!(
            JobUuid::DEFAULT.to_string(),
            "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF"
        );
        assert_eq!(
            JobUuid::DEFAULT.to_string().parse::<JobUuid>(),
            Ok(JobUuid::DEFAULT)
        );
    }

    #[test]
    fn multibyte_chars_do_not_panic() {
        for s in [
            "é",
            "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFé",
            "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFFé",
            "ééééééééééééééééééééé",
        ] {
            assert!(s.parse::<JobUuid>().is_err(), "{s}");
        }
    }
}
