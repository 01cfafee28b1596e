//! The one integer syntax used by every numeric setting.
//!
//! Numbers are **decimal**: ASCII digits, with a leading `-` only where the
//! setting gives negative values a meaning. Rejected, each with its own
//! message:
//! * a leading `+`, surrounding whitespace, a `0x` prefix, or any trailing
//!   junk (C's `strtol` took the numeric prefix of `"2c"` and ignored the rest);
//! * leading zeros such as `010` (C's `strtol(s, NULL, 0)` read that as octal
//!   8, so accepting it as decimal 10 would silently change its meaning);
//!   `0` itself is fine, `-0` is not;
//! * values that do not fit (an error, never a wrap or a clamp).

use std::fmt;

/// Why a piece of text is not an acceptable integer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IntProblem {
    /// Nothing where a number was expected.
    Empty,
    /// Not made of decimal digits (with an optional leading `-`).
    NotDecimal(String),
    /// A leading zero (C would have read octal).
    LeadingZero(String),
    /// A negative number where only non-negative ones are meaningful.
    Negative(String),
    /// Too large (or too small) for the target type.
    Overflow(String),
}

impl fmt::Display for IntProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntProblem::Empty => f.write_str("a number is missing"),
            IntProblem::NotDecimal(t) => write!(f, "{t:?} is not a decimal integer"),
            IntProblem::LeadingZero(t) => write!(
                f,
                "{t:?} has a leading zero (C would have read it as octal)"
            ),
            IntProblem::Negative(t) => write!(f, "{t:?} is negative"),
            IntProblem::Overflow(t) => write!(f, "{t:?} overflows a 64-bit integer"),
        }
    }
}

/// Checks the shape of `digits` (no sign): non-empty, ASCII digits, no
/// leading zero unless it is exactly `0`.
fn check_digits(text: &str, digits: &str) -> Result<(), IntProblem> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(if text.is_empty() {
            IntProblem::Empty
        } else {
            IntProblem::NotDecimal(text.to_owned())
        });
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(IntProblem::LeadingZero(text.to_owned()));
    }
    Ok(())
}

/// Parses a non-negative decimal integer. A leading `-` followed by digits
/// is reported as [`IntProblem::Negative`] (or overflow if it does not even
/// fit an `i64`), so callers can say "negative" rather than "not a number".
pub(crate) fn parse_u64(text: &str) -> Result<u64, IntProblem> {
    if let Some(rest) = text.strip_prefix('-') {
        // Classify the negative number for a precise message.
        check_digits(text, rest)?;
        return Err(match text.parse::<i64>() {
            Ok(0) => IntProblem::NotDecimal(text.to_owned()),
            Ok(_) => IntProblem::Negative(text.to_owned()),
            Err(_) => IntProblem::Overflow(text.to_owned()),
        });
    }
    check_digits(text, text)?;
    text.parse::<u64>()
        .map_err(|_| IntProblem::Overflow(text.to_owned()))
}

/// Parses a decimal integer that may be negative. `-0` is rejected.
pub(crate) fn parse_i64(text: &str) -> Result<i64, IntProblem> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    check_digits(text, digits)?;
    if text == "-0" {
        return Err(IntProblem::NotDecimal(text.to_owned()));
    }
    text.parse::<i64>()
        .map_err(|_| IntProblem::Overflow(text.to_owned()))
}

/// Parses an unsigned integer in the C style used inside `FI_ADDR_STR`
/// addresses: `0x`/`0X` followed by hex digits, or decimal (no leading zero).
pub(crate) fn parse_c_uint(text: &str) -> Result<u64, IntProblem> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => parse_hex(hex).map_err(|p| match p {
            IntProblem::Overflow(_) => IntProblem::Overflow(text.to_owned()),
            _ => IntProblem::NotDecimal(text.to_owned()),
        }),
        None => parse_u64(text),
    }
}

/// Parses hex digits (an optional `0x`/`0X` prefix allowed, as `%x` does).
pub(crate) fn parse_hex(text: &str) -> Result<u64, IntProblem> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(if text.is_empty() {
            IntProblem::Empty
        } else {
            IntProblem::NotDecimal(text.to_owned())
        });
    }
    u64::from_str_radix(digits, 16).map_err(|_| IntProblem::Overflow(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned() {
        assert_eq!(parse_u64("0"), Ok(0));
        assert_eq!(parse_u64("18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(
            parse_u64("18446744073709551616"),
            Err(IntProblem::Overflow(_))
        ));
        assert!(matches!(parse_u64("010"), Err(IntProblem::LeadingZero(_))));
        assert!(matches!(parse_u64("-3"), Err(IntProblem::Negative(_))));
        assert!(matches!(
            parse_u64("-99999999999999999999"),
            Err(IntProblem::Overflow(_))
        ));
        for junk in ["+1", " 1", "1 ", "0x10", "2c", "-", "--1", "1.0", "١"] {
            assert!(
                matches!(parse_u64(junk), Err(IntProblem::NotDecimal(_))),
                "{junk}"
            );
        }
        assert_eq!(parse_u64(""), Err(IntProblem::Empty));
    }

    #[test]
    fn signed() {
        assert_eq!(parse_i64("-1"), Ok(-1));
        assert_eq!(parse_i64("-9223372036854775808"), Ok(i64::MIN));
        assert!(matches!(
            parse_i64("9223372036854775808"),
            Err(IntProblem::Overflow(_))
        ));
        assert!(matches!(parse_i64("-0"), Err(IntProblem::NotDecimal(_))));
        assert!(matches!(parse_i64("-01"), Err(IntProblem::LeadingZero(_))));
    }

    #[test]
    fn c_style() {
        assert_eq!(parse_c_uint("0xffff"), Ok(0xffff));
        assert_eq!(parse_c_uint("12"), Ok(12));
        assert!(parse_c_uint("0x").is_err());
        assert_eq!(parse_hex("DEADbeef"), Ok(0xdead_beef));
        assert_eq!(parse_hex("0x1f"), Ok(0x1f));
        assert!(matches!(
            parse_hex("1ffffffffffffffff"),
            Err(IntProblem::Overflow(_))
        ));
    }
}
