//! [`Source`]: where an effective configuration value came from.

use std::fmt;

/// Where an effective configuration value came from. Shown by the `Display`
/// of [`PsmConfig`](super::PsmConfig) and [`MrailConfig`](super::MrailConfig)
/// and queryable per parameter.
///
/// ```
/// use psmrail::config::{PsmConfig, PsmParam, Source};
///
/// let cfg = PsmConfig::from_vars(&[("FI_PSM_AM_MSG", "1"), ("PMI_RANK", "3")]).unwrap();
/// assert_eq!(cfg.source(PsmParam::AmMsg), Source::Env("FI_PSM_AM_MSG"));
/// assert_eq!(cfg.source(PsmParam::NameServer), Source::MpiDefault("PMI_RANK"));
/// assert_eq!(cfg.source(PsmParam::Delay), Source::Default);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The man-page default.
    Default,
    /// Read from this environment variable.
    Env(&'static str),
    /// The default changed because an MPI launcher was detected through
    /// this environment variable (`FI_PSM_NAME_SERVER` only).
    MpiDefault(&'static str),
    /// Set by the application through a builder.
    Explicit,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Env(var) => write!(f, "env {var}"),
            Source::MpiDefault(var) => write!(f, "MPI default: {var} is set"),
            Source::Explicit => f.write_str("set by the application"),
        }
    }
}
