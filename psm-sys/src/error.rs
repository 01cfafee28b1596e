//! Errors: PSM result codes, library load failures, device preflight
//! failures, and misuse caught before it reaches PSM.

use std::fmt;

use crate::env::EnvError;
use crate::ffi;
use crate::library::PsmBuild;

/// A PSM result code (`psm_error_t`), possibly one this crate has no name for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// `PSM_OK`.
    pub const OK: Self = Self(ffi::PSM_OK);
    /// `PSM_OK_NO_PROGRESS`.
    pub const OK_NO_PROGRESS: Self = Self(ffi::PSM_OK_NO_PROGRESS);
    /// `PSM_PARAM_ERR`.
    pub const PARAM_ERR: Self = Self(ffi::PSM_PARAM_ERR);
    /// `PSM_INTERNAL_ERR`.
    pub const INTERNAL_ERR: Self = Self(ffi::PSM_INTERNAL_ERR);
    /// `PSM_TIMEOUT`.
    pub const TIMEOUT: Self = Self(ffi::PSM_TIMEOUT);
    /// `PSM_TOO_MANY_ENDPOINTS`.
    pub const TOO_MANY_ENDPOINTS: Self = Self(ffi::PSM_TOO_MANY_ENDPOINTS);
    /// `PSM_EP_NO_DEVICE`.
    pub const EP_NO_DEVICE: Self = Self(ffi::PSM_EP_NO_DEVICE);
    /// `PSM_EPID_UNREACHABLE`.
    pub const EPID_UNREACHABLE: Self = Self(ffi::PSM_EPID_UNREACHABLE);
    /// `PSM_EPID_ALREADY_CONNECTED`.
    pub const EPID_ALREADY_CONNECTED: Self = Self(ffi::PSM_EPID_ALREADY_CONNECTED);
    /// `PSM_MQ_NO_COMPLETIONS`.
    pub const MQ_NO_COMPLETIONS: Self = Self(ffi::PSM_MQ_NO_COMPLETIONS);
    /// `PSM_MQ_TRUNCATION`.
    pub const MQ_TRUNCATION: Self = Self(ffi::PSM_MQ_TRUNCATION);

    /// The C name of the code (`"PSM_EP_NO_DEVICE"`), if it is a known one.
    pub fn name(self) -> Option<&'static str> {
        ffi::PSM_ERROR_NAMES
            .iter()
            .find(|(code, _)| *code == self.0)
            .map(|(_, name)| *name)
    }

    /// Whether the code is `PSM_OK` or `PSM_OK_NO_PROGRESS`.
    pub fn is_ok(self) -> bool {
        self.0 == ffi::PSM_OK || self.0 == ffi::PSM_OK_NO_PROGRESS
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "unknown PSM error ({})", self.0),
        }
    }
}

/// A failed PSM call: the code, its name, the library's own message and,
/// where this crate knows why it happens here, a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsmError {
    /// The code the call returned.
    pub code: ErrorCode,
    /// The PSM function that returned it (`"psm_ep_open"`).
    pub call: &'static str,
    /// `psm_error_get_string(code)` from the loaded library (empty if unavailable).
    pub message: String,
    /// What to do about it, when known (for example `PSM2_MULTI_EP=1`).
    pub hint: Option<String>,
}

impl PsmError {
    /// The C name of the code, or `"PSM_UNKNOWN_ERROR"`.
    pub fn name(&self) -> &'static str {
        self.code.name().unwrap_or("PSM_UNKNOWN_ERROR")
    }
}

impl fmt::Display for PsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name(), self.code.0)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PsmError {}

/// One library the loader tried, and why it was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadAttempt {
    /// The name or path handed to `dlopen`.
    pub path: String,
    /// The `dlopen` error, or the list of missing symbols.
    pub error: String,
}

/// The PSM library could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// Every candidate, in the order tried.
    pub attempts: Vec<LoadAttempt>,
    /// Whether the candidates came from `PSMRAIL_PSM_LIB`.
    pub from_env: bool,
    /// `PSMRAIL_PSM_LIB` holds a value it does not take, so nothing was
    /// tried.
    pub env: Option<EnvError>,
}

/// The Debian packages that provide `libpsm_infinipath.so.1`.
pub const PACKAGE_HINT: &str = "install libpsm2-2-compat (PSM 1.x API over libpsm2: Omni-Path \
     or shared memory) or libpsm-infinipath1 (TrueScale), e.g. `apt-get install -y \
     libpsm2-2 libpsm2-2-compat`, or point PSMRAIL_PSM_LIB at the library";

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(env) = &self.env {
            return write!(f, "could not load the PSM 1.x library: {env}");
        }
        write!(
            f,
            "could not load the PSM 1.x library (libpsm_infinipath.so.1)"
        )?;
        if self.from_env {
            write!(f, " named by PSMRAIL_PSM_LIB")?;
        }
        write!(f, "; tried:")?;
        for attempt in &self.attempts {
            write!(f, " [{}: {}]", attempt.path, attempt.error)?;
        }
        write!(f, "; {PACKAGE_HINT}")
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.env.as_ref().map(|e| e as _)
    }
}

/// Why no endpoint may be opened: the device preflight found no usable
/// device, so calling `psm_ep_open` would crash or stall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoDeviceError {
    /// The build whose rules were applied.
    pub build: PsmBuild,
    /// The environment variable holding the device list for that build.
    pub variable: &'static str,
    /// Its value, if set.
    pub value: Option<String>,
    /// What is missing or wrong, in words.
    pub reason: String,
}

impl fmt::Display for NoDeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no PSM device ({} build, ", self.build)?;
        match &self.value {
            Some(v) => write!(f, "{}={v:?}", self.variable)?,
            None => write!(f, "{} unset", self.variable)?,
        }
        write!(f, "): {}", self.reason)
    }
}

impl std::error::Error for NoDeviceError {}

/// Every error this crate returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The library could not be loaded.
    Load(LoadError),
    /// A PSM call failed.
    Psm(PsmError),
    /// The device preflight refused to open an endpoint.
    NoDevice(NoDeviceError),
    /// A variable psm-sys reads (`PSMRAIL_PSM_LIB`,
    /// `PSMRAIL_TRUESCALE_SHM`) holds a value it does not take.
    Env(EnvError),
    /// The loaded build cannot do this without crashing (for example an AM
    /// request to the own endpoint over the TrueScale `self` device).
    Unsupported(String),
    /// An argument PSM cannot represent or that would misuse it.
    InvalidArgument(String),
    /// `psm_finalize` was already called; PSM cannot be used again in this process.
    Finalized,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Load(e) => e.fmt(f),
            Error::Psm(e) => e.fmt(f),
            Error::NoDevice(e) => e.fmt(f),
            Error::Env(e) => e.fmt(f),
            Error::Unsupported(what) => write!(f, "not supported by the loaded PSM build: {what}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Finalized => write!(
                f,
                "PSM was finalized in this process and cannot be used again"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Load(e) => Some(e),
            Error::Psm(e) => Some(e),
            Error::NoDevice(e) => Some(e),
            Error::Env(e) => Some(e),
            _ => None,
        }
    }
}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Self {
        Error::Load(e)
    }
}

impl From<PsmError> for Error {
    fn from(e: PsmError) -> Self {
        Error::Psm(e)
    }
}

impl From<EnvError> for Error {
    fn from(e: EnvError) -> Self {
        Error::Env(e)
    }
}

impl From<NoDeviceError> for Error {
    fn from(e: NoDeviceError) -> Self {
        Error::NoDevice(e)
    }
}

impl Error {
    /// The PSM code, if this is a failed PSM call.
    pub fn psm_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Psm(e) => Some(e.code),
            _ => None,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_unique_name() {
        let mut seen = std::collections::HashSet::new();
        for (code, name) in ffi::PSM_ERROR_NAMES {
            assert!(seen.insert(*code), "duplicate code {code}");
            assert_eq!(ErrorCode(*code).name(), Some(*name));
            assert!(name.starts_with("PSM_"));
        }
        assert_eq!(ErrorCode(2).name(), None);
        assert_eq!(ErrorCode(12).to_string(), "PSM_TOO_MANY_ENDPOINTS (12)");
    }

    #[test]
    fn psm_error_display_has_everything() {
        let e = PsmError {
            code: ErrorCode::TOO_MANY_ENDPOINTS,
            call: "psm_ep_open",
            message: "Exceeded supported amount of endpoints".into(),
            hint: Some("set PSM2_MULTI_EP=1".into()),
        };
        let s = e.to_string();
        assert!(s.contains("psm_ep_open"));
        assert!(s.contains("PSM_TOO_MANY_ENDPOINTS (12)"));
        assert!(s.contains("Exceeded"));
        assert!(s.contains("PSM2_MULTI_EP=1"));
    }

    #[test]
    fn load_error_names_packages_and_paths() {
        let e = LoadError {
            attempts: vec![LoadAttempt {
                path: "/x/libpsm.so".into(),
                error: "nope".into(),
            }],
            from_env: true,
            env: None,
        };
        let s = e.to_string();
        assert!(s.contains("/x/libpsm.so: nope"));
        assert!(s.contains("libpsm2-2-compat"));
        assert!(s.contains("libpsm-infinipath1"));
        assert!(s.contains("PSMRAIL_PSM_LIB"));
    }
}
