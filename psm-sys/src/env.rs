//! The variables psm-sys reads for itself, and the values they take:
//! `PSMRAIL_PSM_LIB` (which library to load) and `PSMRAIL_TRUESCALE_SHM`
//! (open TrueScale endpoints with the `shm` device anyway). A malformed
//! value is an [`EnvError`] naming the variable, never a silent default.
//!
//! The device lists (`PSM2_DEVICES`, `PSM_DEVICES`) are PSM's own
//! variables: psm-sys reads them as PSM does ([`crate::device`]).

use std::ffi::OsStr;
use std::fmt;

use crate::device::PSMRAIL_TRUESCALE_SHM;
use crate::library::ENV_PSM_LIB;

/// Longest `PSMRAIL_PSM_LIB` (`PATH_MAX` - 1).
const MAX_PATH_LEN: usize = 4095;

const EXPECTED_LIB: &str = "the path or soname of a PSM 1.x library (libpsm_infinipath.so.1): \
     1 to 4095 bytes of UTF-8 text without control characters or whitespace at either end";
const EXPECTED_SHM: &str = "1 (open the shm device anyway) or 0";

/// A variable psm-sys reads holds a value it does not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// The variable.
    pub variable: &'static str,
    /// Its value (lossily decoded if it was not UTF-8).
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// What the variable takes.
    pub expected: &'static str,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?}: {}; expected {}",
            self.variable, self.value, self.problem, self.expected
        )
    }
}

impl std::error::Error for EnvError {}

/// The library `PSMRAIL_PSM_LIB` names (`value` is the variable's value,
/// `None` when unset).
///
/// ```
/// use std::ffi::OsStr;
/// use psm_sys::env::psm_lib;
///
/// assert_eq!(psm_lib(None), Ok(None));
/// assert_eq!(psm_lib(Some(OsStr::new("/opt/psm/libpsm_infinipath.so.1"))).unwrap().unwrap(),
///            "/opt/psm/libpsm_infinipath.so.1");
/// let e = psm_lib(Some(OsStr::new(""))).unwrap_err();
/// assert_eq!(e.to_string(), "PSMRAIL_PSM_LIB=\"\": the value is empty; expected the path or \
///     soname of a PSM 1.x library (libpsm_infinipath.so.1): 1 to 4095 bytes of UTF-8 text \
///     without control characters or whitespace at either end");
/// ```
///
/// # Errors
/// An empty or blank value, whitespace at either end, a control
/// character, a value that is not UTF-8 or longer than 4095 bytes (a path
/// that is not UTF-8 cannot be named here).
pub fn psm_lib(value: Option<&OsStr>) -> Result<Option<String>, EnvError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let refuse = |problem: String| EnvError {
        variable: ENV_PSM_LIB,
        value: value.to_string_lossy().into_owned(),
        problem,
        expected: EXPECTED_LIB,
    };
    let Some(text) = value.to_str() else {
        return Err(refuse("the value is not valid UTF-8".to_owned()));
    };
    let problem = if text.is_empty() {
        Some("the value is empty".to_owned())
    } else if text.chars().all(char::is_whitespace) {
        Some("the value is blank".to_owned())
    } else if text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
        Some("the value starts or ends with whitespace".to_owned())
    } else if let Some((at, c)) = text.char_indices().find(|(_, c)| c.is_control()) {
        Some(format!("control character {c:?} at byte {at}"))
    } else if text.len() > MAX_PATH_LEN {
        Some(format!(
            "{} bytes is longer than the maximum, {MAX_PATH_LEN}",
            text.len()
        ))
    } else {
        None
    };
    match problem {
        Some(p) => Err(refuse(p)),
        None => Ok(Some(text.to_owned())),
    }
}

/// Whether `PSMRAIL_TRUESCALE_SHM` allows the `shm` device on TrueScale
/// (`value` is the variable's value, `None` when unset: no).
///
/// ```
/// use std::ffi::OsStr;
/// use psm_sys::env::truescale_shm;
///
/// assert_eq!(truescale_shm(None), Ok(false));
/// assert_eq!(truescale_shm(Some(OsStr::new("1"))), Ok(true));
/// assert_eq!(truescale_shm(Some(OsStr::new("0"))), Ok(false));
/// assert!(truescale_shm(Some(OsStr::new(" 1"))).is_err());
/// ```
///
/// # Errors
/// Any value other than `1` and `0`.
pub fn truescale_shm(value: Option<&OsStr>) -> Result<bool, EnvError> {
    match value.map(|v| v.as_encoded_bytes()) {
        None | Some(b"0") => Ok(false),
        Some(b"1") => Ok(true),
        Some(_) => {
            let value = value.map(|v| v.to_string_lossy().into_owned());
            let value = value.unwrap_or_default();
            Err(EnvError {
                variable: PSMRAIL_TRUESCALE_SHM,
                problem: format!("{value:?} is neither 1 nor 0"),
                value,
                expected: EXPECTED_SHM,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    fn lib(v: &str) -> Result<Option<String>, EnvError> {
        psm_lib(Some(OsStr::new(v)))
    }

    #[test]
    fn library_names() {
        assert_eq!(
            lib("libpsm_infinipath.so.1").unwrap().unwrap(),
            "libpsm_infinipath.so.1"
        );
        assert_eq!(lib("/a dir/lib.so").unwrap().unwrap(), "/a dir/lib.so");
        for (bad, problem) in [
            ("", "the value is empty"),
            ("  ", "the value is blank"),
            (" lib.so", "the value starts or ends with whitespace"),
            ("lib.so\n", "the value starts or ends with whitespace"),
            ("lib\u{1b}.so", "control character '\\u{1b}' at byte 3"),
        ] {
            let e = lib(bad).unwrap_err();
            assert_eq!((e.variable, e.value.as_str()), (ENV_PSM_LIB, bad));
            assert_eq!(e.problem, problem);
        }
        let long = "l".repeat(4096);
        assert!(lib(&long)
            .unwrap_err()
            .problem
            .contains("longer than the maximum"));
        let raw = OsString::from_vec(b"lib\xff.so".to_vec());
        let e = psm_lib(Some(&raw)).unwrap_err();
        assert_eq!(e.problem, "the value is not valid UTF-8");
        assert_eq!(e.value, "lib\u{fffd}.so");
    }

    #[test]
    fn truescale_shm_is_1_or_0() {
        for bad in ["", " 1", "1 ", "yes", "true", "2", "-1", "01", "on"] {
            let e = truescale_shm(Some(OsStr::new(bad))).unwrap_err();
            assert_eq!(e.variable, PSMRAIL_TRUESCALE_SHM);
            assert!(e.to_string().starts_with("PSMRAIL_TRUESCALE_SHM="), "{e}");
            assert!(e
                .to_string()
                .ends_with("expected 1 (open the shm device anyway) or 0"));
        }
        let raw = OsString::from_vec(b"1\xff".to_vec());
        assert!(truescale_shm(Some(&raw)).is_err());
    }
}
