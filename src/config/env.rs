//! [`VarSource`]: where variable values are looked up.
//!
//! `from_env()` is `from_vars(&ProcessEnv)`. Everything else (tests, a
//! launcher that passes its own settings, a config file) can supply the
//! values through any other `VarSource` without touching the process
//! environment. Reading never modifies the environment.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::hash::BuildHasher;

use super::error::ConfigError;

/// A read-only lookup of variables by name.
///
/// Implemented for the process environment ([`ProcessEnv`]), for maps, for
/// slices, arrays and vectors of `(name, value)` pairs (the last pair with a
/// given name wins, as with repeated `export`s), for references to any of
/// these, and for closures wrapped in [`FnVars`].
///
/// ```
/// use psmrail::config::{PsmConfig, VarSource};
///
/// let vars = [("FI_PSM_DELAY", "0"), ("FI_PSM_DELAY", "2")];
/// assert_eq!(vars.var_os("FI_PSM_DELAY").unwrap(), "2");
/// let cfg = PsmConfig::from_vars(&vars).unwrap();
/// assert_eq!(cfg.delay().as_secs(), 2);
/// ```
pub trait VarSource {
    /// The value of `name`, or `None` when it is unset.
    fn var_os(&self, name: &str) -> Option<OsString>;
}

/// The process environment (`std::env::var_os`), read at the time of each
/// lookup and never modified.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl VarSource for ProcessEnv {
    fn var_os(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}

/// A closure `Fn(&str) -> Option<String>` used as a [`VarSource`].
///
/// ```
/// use psmrail::config::{FnVars, MrailConfig};
///
/// let vars = FnVars(|name: &str| (name == "FI_OFI_MRAIL_ADDR").then(|| "eth0,eth1".to_string()));
/// assert_eq!(MrailConfig::from_vars(&vars).unwrap().rails().len(), 2);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct FnVars<F>(pub F);

impl<F: Fn(&str) -> Option<String>> VarSource for FnVars<F> {
    fn var_os(&self, name: &str) -> Option<OsString> {
        (self.0)(name).map(OsString::from)
    }
}

impl<T: VarSource + ?Sized> VarSource for &T {
    fn var_os(&self, name: &str) -> Option<OsString> {
        (**self).var_os(name)
    }
}

impl<V: AsRef<OsStr>, S: BuildHasher> VarSource for HashMap<String, V, S> {
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.get(name).map(|v| v.as_ref().to_owned())
    }
}

impl<V: AsRef<OsStr>> VarSource for BTreeMap<String, V> {
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.get(name).map(|v| v.as_ref().to_owned())
    }
}

impl<K: AsRef<str>, V: AsRef<OsStr>> VarSource for [(K, V)] {
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.iter()
            .rev()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| v.as_ref().to_owned())
    }
}

impl<K: AsRef<str>, V: AsRef<OsStr>, const N: usize> VarSource for [(K, V); N] {
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.as_slice().var_os(name)
    }
}

impl<K: AsRef<str>, V: AsRef<OsStr>> VarSource for Vec<(K, V)> {
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.as_slice().var_os(name)
    }
}

/// Reads `name` as UTF-8 text. A value that is not UTF-8 is an error
/// pointing at the first invalid byte.
pub(crate) fn read_var<V: VarSource + ?Sized>(
    vars: &V,
    name: &'static str,
) -> Result<Option<String>, ConfigError> {
    let Some(raw) = vars.var_os(name) else {
        return Ok(None);
    };
    match raw.into_string() {
        Ok(text) => Ok(Some(text)),
        Err(raw) => Err(not_utf8(name, &raw)),
    }
}

/// Whether `name` is set at all (to any value, even empty or not UTF-8).
pub(crate) fn is_set<V: VarSource + ?Sized>(vars: &V, name: &str) -> bool {
    vars.var_os(name).is_some()
}

fn not_utf8(name: &'static str, raw: &OsStr) -> ConfigError {
    use std::os::unix::ffi::OsStrExt;
    let bytes = raw.as_bytes();
    let valid = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) => e.valid_up_to(),
    };
    let lossy = String::from_utf8_lossy(bytes).into_owned();
    // `valid` bytes are unchanged by the lossy decoding, and the first
    // replacement character starts right there.
    let end = lossy[valid..]
        .chars()
        .next()
        .map_or(valid, |c| valid + c.len_utf8());
    ConfigError::new(name, &lossy, valid..end, "UTF-8 text")
        .with_problem("the value is not valid UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn slices_last_wins_and_maps_work() {
        let v = vec![("A", "1"), ("B", "2"), ("A", "3")];
        assert_eq!(v.var_os("A").unwrap(), "3");
        assert_eq!(v.var_os("C"), None);
        let m: HashMap<String, String> = [("A".to_string(), "x".to_string())].into();
        assert_eq!(m.var_os("A").unwrap(), "x");
        let b: BTreeMap<String, &str> = [("A".to_string(), "y")].into();
        assert_eq!(VarSource::var_os(&&b, "A").unwrap(), "y");
    }

    #[test]
    fn non_utf8_points_at_the_bad_byte() {
        let raw = OsString::from_vec(b"ab\xffc".to_vec());
        let vars = [("V", raw)];
        let err = read_var(&vars, "V").unwrap_err();
        assert_eq!(err.position(), 2);
        assert_eq!(err.item(), "\u{fffd}");
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
        assert!(is_set(&vars, "V"));
    }
}
