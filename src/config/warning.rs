//! [`ConfigWarning`]: a value that was accepted but deserves attention.

use std::fmt;

/// Something accepted while reading the configuration that the user should
/// know about (a deprecated variable, a variable that is ignored, a policy
/// table whose last entry is bounded, ...).
///
/// Warnings are kept in the configuration (`warnings()`) so that programs
/// and tests can inspect them, and are also emitted with `tracing::warn!`
/// when the configuration is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    var: &'static str,
    message: String,
}

impl ConfigWarning {
    pub(crate) fn new(var: &'static str, message: impl Into<String>) -> Self {
        ConfigWarning {
            var,
            message: message.into(),
        }
    }

    /// The variable the warning is about.
    pub fn var(&self) -> &'static str {
        self.var
    }

    /// What the user should know, without the variable name.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Emits the warning through `tracing`.
    pub(crate) fn emit(&self) {
        tracing::warn!(target: "psmrail::config", var = self.var, "{}", self.message);
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.var, self.message)
    }
}
