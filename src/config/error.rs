//! [`ConfigError`]: what was wrong with a configuration value, and where.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

/// A configuration value that could not be accepted.
///
/// It names the variable, carries the whole value, the offending item and
/// its byte offset in the value, an optional description of the problem,
/// and what was expected instead. `Display` renders all of it on one line:
///
/// ```
/// use psmrail::config::AffinitySpec;
///
/// let err = "0:3,x".parse::<AffinitySpec>().unwrap_err();
/// assert_eq!(err.var(), "FI_PSM_PROG_AFFINITY");
/// assert_eq!(err.item(), "x");
/// assert_eq!(err.position(), 4);
/// assert!(err.to_string().starts_with(
///     r#"FI_PSM_PROG_AFFINITY="0:3,x": item "x" at byte 4: "#
/// ));
///
/// // It converts into the crate error with kind FI_EINVAL.
/// let e: psmrail::Error = err.into();
/// assert_eq!(e.kind(), psmrail::ErrorKind::Inval);
/// ```
///
/// The value and the item are shown with Rust string escaping, so control
/// characters and quotes in a hostile environment cannot forge the message.
/// The value of a secret (`PSMRAIL_JOB_SECRET`) is never kept or shown:
/// such an error reads `PSMRAIL_JOB_SECRET (value withheld): <problem>;
/// expected ...`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(Box<Details>);

/// The fields of a [`ConfigError`], boxed to keep `Result`s small.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Details {
    var: Cow<'static, str>,
    value: String,
    item: String,
    position: usize,
    problem: Option<String>,
    expected: Cow<'static, str>,
    /// The value is a secret: it is not kept, and `Display` says so.
    withheld: bool,
}

impl fmt::Display for Details {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problem = ProblemPrefix(self.problem.as_deref());
        if self.withheld {
            write!(f, "{} (value withheld): {problem}", self.var)?;
        } else {
            write!(
                f,
                "{}={:?}: item {:?} at byte {}: {problem}",
                self.var, self.value, self.item, self.position
            )?;
        }
        write!(f, "expected {}", self.expected)
    }
}

impl ConfigError {
    /// An error about `value[item]` of `var`; `expected` says what would
    /// have been accepted. `item` must lie within `value` on character
    /// boundaries; if it does not it is clamped (never a panic).
    pub(crate) fn new(
        var: impl Into<Cow<'static, str>>,
        value: &str,
        item: Range<usize>,
        expected: impl Into<Cow<'static, str>>,
    ) -> Self {
        let start = floor_char_boundary(value, item.start.min(value.len()));
        let end = floor_char_boundary(value, item.end.clamp(start, value.len()));
        ConfigError(Box::new(Details {
            var: var.into(),
            value: value.to_owned(),
            item: value[start..end].to_owned(),
            position: start,
            problem: None,
            expected: expected.into(),
            withheld: false,
        }))
    }

    /// An error about a secret value of `var`: neither the value nor any
    /// part of it is kept or shown, so `problem` must not quote it either.
    /// [`value`](Self::value) and [`item`](Self::item) are empty.
    pub(crate) fn withheld(
        var: impl Into<Cow<'static, str>>,
        problem: impl Into<String>,
        expected: impl Into<Cow<'static, str>>,
    ) -> Self {
        ConfigError(Box::new(Details {
            var: var.into(),
            value: String::new(),
            item: String::new(),
            position: 0,
            problem: Some(problem.into()),
            expected: expected.into(),
            withheld: true,
        }))
    }

    /// Adds a description of what is wrong with the item.
    pub(crate) fn with_problem(mut self, problem: impl Into<String>) -> Self {
        self.0.problem = Some(problem.into());
        self
    }

    /// The same error with the item moved `offset` bytes to the right, for
    /// an item parsed out of a larger value (`whole`).
    pub(crate) fn shifted(mut self, whole: &str, offset: usize) -> Self {
        self.0.position += offset;
        self.0.value = whole.to_owned();
        self
    }

    /// The variable (or setting) the value was given for.
    pub fn var(&self) -> &str {
        &self.0.var
    }

    /// The whole value, as given (lossily decoded if it was not UTF-8);
    /// empty for a secret, which is never kept.
    pub fn value(&self) -> &str {
        &self.0.value
    }

    /// The offending part of the value.
    pub fn item(&self) -> &str {
        &self.0.item
    }

    /// Byte offset of [`item`](Self::item) in [`value`](Self::value).
    pub fn position(&self) -> usize {
        self.0.position
    }

    /// What is wrong with the item, when more can be said than "not what was
    /// expected" (e.g. `stride 0 is not allowed`).
    pub fn problem(&self) -> Option<&str> {
        self.0.problem.as_deref()
    }

    /// What would have been accepted.
    pub fn expected(&self) -> &str {
        &self.0.expected
    }
}

/// Renders `"<problem>; "` when there is a problem, nothing otherwise.
struct ProblemPrefix<'a>(Option<&'a str>);

impl fmt::Display for ProblemPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(problem) => write!(f, "{problem}; "),
            None => Ok(()),
        }
    }
}

impl From<ConfigError> for crate::Error {
    /// A configuration error is an invalid argument (`FI_EINVAL`); the
    /// [`ConfigError`] stays reachable as the source.
    fn from(err: ConfigError) -> Self {
        crate::Error::with_source(crate::ErrorKind::Inval, err.to_string(), err)
    }
}

/// The largest char boundary of `s` that is `<= index` (`index <= s.len()`).
fn floor_char_boundary(s: &str, mut index: usize) -> usize {
    while index > 0 && !s.is_char_boundary(index) {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_the_documented_shape() {
        let e = ConfigError::new(
            "FI_PSM_PROG_AFFINITY",
            "0:3,x",
            4..5,
            "<start>[:<end>[:<stride>]] with integer core ids",
        );
        assert_eq!(
            e.to_string(),
            "FI_PSM_PROG_AFFINITY=\"0:3,x\": item \"x\" at byte 4: expected \
             <start>[:<end>[:<stride>]] with integer core ids"
        );
        let e = e.with_problem("\"x\" is not a decimal integer");
        assert!(e
            .to_string()
            .contains(": \"x\" is not a decimal integer; expected <start>"));
    }

    #[test]
    #[allow(clippy::reversed_empty_ranges)]
    fn bad_ranges_are_clamped_not_panicking() {
        let e = ConfigError::new("V", "é", 1..9, "x");
        assert_eq!((e.position(), e.item()), (0, "é"));
        let e = ConfigError::new("V", "ab", 5..1, "x");
        assert_eq!((e.position(), e.item()), (2, ""));
    }

    #[test]
    fn a_withheld_value_is_not_shown() {
        let e = ConfigError::withheld("S", "5 bytes is too short", "at least 16 bytes");
        assert_eq!(
            e.to_string(),
            "S (value withheld): 5 bytes is too short; expected at least 16 bytes"
        );
        assert_eq!((e.value(), e.item(), e.position()), ("", "", 0));
    }

    #[test]
    fn converts_to_inval() {
        let e: crate::Error = ConfigError::new("V", "x", 0..1, "y").into();
        assert_eq!(e.kind(), crate::ErrorKind::Inval);
        assert!(std::error::Error::source(&e).is_some());
        assert!(e.message().starts_with("V=\"x\""));
    }
}
