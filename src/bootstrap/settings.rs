//! The bootstrap's own variables, checked as every psmrail variable is
//! (see docs/configuration.md): `PSMRAIL_PMI_VERSION` (which PMI wire to
//! speak over `PMI_FD`) and `PSMRAIL_PMIX_LIB` (the libpmix to load).

use crate::config::text::read_text_var;
use crate::config::{read_var, ConfigError, VarSource};

/// The PMI wire version over `PMI_FD`: `1` or `2`.
pub const ENV_PMI_VERSION: &str = "PSMRAIL_PMI_VERSION";
/// The PMIx library to load instead of `libpmix.so.2`.
pub const ENV_PMIX_LIB: &str = "PSMRAIL_PMIX_LIB";

/// The longest library path `PSMRAIL_PMIX_LIB` takes (`PATH_MAX` less the
/// terminating zero).
const MAX_PATH_LEN: usize = 4095;

/// `PSMRAIL_PMI_VERSION` from `vars`: 1 when unset.
///
/// # Errors
/// Anything but `1` or `2` (not UTF-8, padded, empty, another number).
pub fn pmi_version<V: VarSource + ?Sized>(vars: &V) -> Result<u8, ConfigError> {
    match read_var(vars, ENV_PMI_VERSION)?.as_deref() {
        None | Some("1") => Ok(1),
        Some("2") => Ok(2),
        Some(other) => Err(ConfigError::new(
            ENV_PMI_VERSION,
            other,
            0..other.len(),
            "1 or 2 (the PMI wire version over PMI_FD)",
        )),
    }
}

/// `PSMRAIL_PMIX_LIB` from `vars`: `None` when unset.
///
/// # Errors
/// A value that is not a clean text value (empty, blank, padded, with a
/// control character, not UTF-8, longer than 4095 bytes).
pub fn pmix_lib<V: VarSource + ?Sized>(vars: &V) -> Result<Option<String>, ConfigError> {
    read_text_var(
        vars,
        ENV_PMIX_LIB,
        MAX_PATH_LEN,
        "a library file name or path (libpmix.so.2)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FnVars;

    fn with(name: &'static str, value: &'static str) -> impl VarSource {
        FnVars(move |n: &str| (n == name).then(|| value.to_owned()))
    }

    #[test]
    fn versions() {
        assert_eq!(pmi_version(&with("X", "3")).unwrap(), 1);
        assert_eq!(pmi_version(&with(ENV_PMI_VERSION, "2")).unwrap(), 2);
        for bad in ["3", " 2", "", "two"] {
            let e = pmi_version(&with(ENV_PMI_VERSION, bad)).unwrap_err();
            assert!(e.to_string().contains(ENV_PMI_VERSION), "{e}");
        }
    }

    #[test]
    fn library_paths() {
        assert_eq!(pmix_lib(&with("X", "")).unwrap(), None);
        assert_eq!(
            pmix_lib(&with(ENV_PMIX_LIB, "libpmix.so.2"))
                .unwrap()
                .as_deref(),
            Some("libpmix.so.2")
        );
        for bad in ["", " ", "a\nb", " libpmix.so.2"] {
            assert!(pmix_lib(&with(ENV_PMIX_LIB, bad)).is_err(), "{bad:?}");
        }
    }
}
