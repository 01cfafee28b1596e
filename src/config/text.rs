//! Free-text settings: values that are names, labels or paths rather than
//! numbers or keywords (`PSMRAIL_WATCH_HOST`, `PSMRAIL_JOB_SECRET_FILE`,
//! ...), and the checks every such value passes.
//!
//! A text value must be UTF-8 (checked by [`read_var`]), non-empty, not
//! blank, without whitespace at either end (a stray space or newline from
//! a script is a mistake, and would make two processes that mean the same
//! value disagree), without control characters (C0, DEL, C1: they can
//! only be accidents, and would garble logs), and no longer than the
//! setting allows.

use std::borrow::Cow;

use super::env::{read_var, VarSource};
use super::error::ConfigError;

/// Checks `value` of `var` as a text value of at most `max_len` bytes;
/// `expected` says what the setting takes.
pub(crate) fn check_text(
    var: impl Into<Cow<'static, str>>,
    value: &str,
    max_len: usize,
    expected: impl Into<Cow<'static, str>>,
) -> Result<(), ConfigError> {
    let err = |range: std::ops::Range<usize>, problem: String| {
        ConfigError::new(var, value, range, expected).with_problem(problem)
    };
    if value.is_empty() {
        return Err(err(0..0, "the value is empty".to_owned()));
    }
    if value.chars().all(char::is_whitespace) {
        return Err(err(0..value.len(), "the value is blank".to_owned()));
    }
    if let Some(c) = value.chars().next().filter(|c| c.is_whitespace()) {
        return Err(err(
            0..c.len_utf8(),
            format!("the value starts with whitespace ({c:?})"),
        ));
    }
    if let Some(c) = value.chars().next_back().filter(|c| c.is_whitespace()) {
        let start = value.len() - c.len_utf8();
        return Err(err(
            start..value.len(),
            format!("the value ends with whitespace ({c:?})"),
        ));
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return Err(err(
            at..at + c.len_utf8(),
            format!("control character {c:?} at byte {at}"),
        ));
    }
    if value.len() > max_len {
        return Err(err(
            0..value.len(),
            format!(
                "{} bytes is longer than the maximum, {max_len}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// Reads `name` from `vars` as a text value ([`check_text`]): `None` when
/// it is unset.
pub(crate) fn read_text_var<V: VarSource + ?Sized>(
    vars: &V,
    name: &'static str,
    max_len: usize,
    expected: &'static str,
) -> Result<Option<String>, ConfigError> {
    let Some(value) = read_var(vars, name)? else {
        return Ok(None);
    };
    check_text(name, &value, max_len, expected)?;
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    fn problem(value: &str) -> (String, String) {
        let e = check_text("V", value, 8, "a label").unwrap_err();
        assert_eq!(e.var(), "V");
        assert_eq!(e.value(), value);
        assert!(e.to_string().ends_with("expected a label"), "{e}");
        (e.item().to_owned(), e.problem().unwrap().to_owned())
    }

    #[test]
    fn good_text_passes() {
        for v in ["a", "node-7", "x y", "élan", "12345678"] {
            check_text("V", v, 8, "a label").unwrap();
        }
    }

    #[test]
    fn each_kind_of_bad_text_has_its_message() {
        assert_eq!(problem(""), ("".into(), "the value is empty".into()));
        assert_eq!(problem(" \t"), (" \t".into(), "the value is blank".into()));
        assert_eq!(
            problem("\u{a0}"),
            ("\u{a0}".into(), "the value is blank".into())
        );
        assert_eq!(
            problem(" a"),
            (" ".into(), "the value starts with whitespace (' ')".into())
        );
        assert_eq!(
            problem("a\n"),
            ("\n".into(), "the value ends with whitespace ('\\n')".into())
        );
        assert_eq!(
            problem("a\u{1b}b"),
            (
                "\u{1b}".into(),
                "control character '\\u{1b}' at byte 1".into()
            )
        );
        assert_eq!(
            problem("a\u{85}b").1,
            "control character '\\u{85}' at byte 1"
        );
        assert_eq!(
            problem("123456789").1,
            "9 bytes is longer than the maximum, 8"
        );
    }

    #[test]
    fn variables_are_read_and_checked() {
        let vars = [("V", OsString::from("ok")), ("W", OsString::from(""))];
        assert_eq!(read_text_var(&vars, "V", 8, "x"), Ok(Some("ok".into())));
        assert_eq!(read_text_var(&vars, "U", 8, "x"), Ok(None));
        assert!(read_text_var(&vars, "W", 8, "x").is_err());
        let raw = [("V", OsString::from_vec(b"a\xff".to_vec()))];
        let e = read_text_var(&raw, "V", 8, "x").unwrap_err();
        assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    }
}
