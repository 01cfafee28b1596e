//! Boolean settings: the spellings libfabric accepts.

use std::borrow::Cow;

use super::error::ConfigError;

/// What a boolean setting accepts, for error messages.
pub(crate) const EXPECTED_BOOL: &str =
    "a boolean: 1/0, yes/no, true/false or on/off (case-insensitive)";

/// Parses a boolean the way libfabric does (`fi_param_get` for `FI_PARAM_BOOL`):
/// `1`, `yes`, `true`, `on` are true; `0`, `no`, `false`, `off` are false;
/// the words are case-insensitive. Anything else — including the empty string
/// and surrounding whitespace — is `None`.
///
/// Where libfabric logged a warning and kept the default for any other
/// value, psmrail reports an error ([`ConfigError`]).
///
/// ```
/// use psmrail::config::parse_bool;
/// assert_eq!(parse_bool("YES"), Some(true));
/// assert_eq!(parse_bool("Off"), Some(false));
/// assert_eq!(parse_bool("2"), None);
/// ```
pub fn parse_bool(text: &str) -> Option<bool> {
    const TRUE: [&str; 4] = ["1", "yes", "true", "on"];
    const FALSE: [&str; 4] = ["0", "no", "false", "off"];
    if TRUE.iter().any(|w| w.eq_ignore_ascii_case(text)) {
        Some(true)
    } else if FALSE.iter().any(|w| w.eq_ignore_ascii_case(text)) {
        Some(false)
    } else {
        None
    }
}

/// [`parse_bool`] with an error naming `var` and the value.
pub(crate) fn parse_bool_var(
    var: impl Into<Cow<'static, str>>,
    value: &str,
) -> Result<bool, ConfigError> {
    parse_bool(value).ok_or_else(|| {
        ConfigError::new(var, value, 0..value.len(), EXPECTED_BOOL)
            .with_problem(format!("{value:?} is not a boolean"))
    })
}

/// `on` / `off`, as booleans are shown in the configuration summaries.
pub(crate) fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        for t in ["1", "yes", "YES", "True", "on", "ON"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "no", "No", "FALSE", "off", "oFF"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", " 1", "1 ", "2", "01", "y", "n", "enable", "tru", "onn"] {
            assert_eq!(parse_bool(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn error_names_the_value() {
        let e = parse_bool_var("FI_PSM_AM_MSG", "maybe").unwrap_err();
        assert_eq!(
            e.to_string(),
            "FI_PSM_AM_MSG=\"maybe\": item \"maybe\" at byte 0: \"maybe\" is not a boolean; \
             expected a boolean: 1/0, yes/no, true/false or on/off (case-insensitive)"
        );
    }
}
