//! The soft engine's shared-memory path as the environment sets it:
//! `PSMRAIL_SOFT_SHM` (on or off), `PSMRAIL_SOFT_SHM_RING` (each ring's
//! size) and `PSMRAIL_SOFT_SHM_SINGLE_COPY` (large messages read from the
//! sender's memory), read by `getinfo` when the hints carry no soft
//! configuration.
//!
//! ```
//! use psmrail::config::soft_shm;
//! let s = soft_shm::from_vars(&[("PSMRAIL_SOFT_SHM", "off"), ("PSMRAIL_SOFT_SHM_RING", "65536")])?;
//! assert_eq!((s.enabled, s.ring), (Some(false), Some(65536)));
//! let e = soft_shm::from_vars(&[("PSMRAIL_SOFT_SHM_RING", "1000")]).unwrap_err();
//! assert!(e.to_string().contains("power of two"), "{e}");
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::boolean::parse_bool_var;
use super::env::{read_var, VarSource};
use super::error::ConfigError;
use super::number::parse_u64;
use crate::engine::soft::{SHM_RING_MAX, SHM_RING_MIN};
use crate::Result;

/// `PSMRAIL_SOFT_SHM`: same-host links move onto shared memory
/// (a boolean; default on).
pub const SHM_VAR: &str = "PSMRAIL_SOFT_SHM";
/// `PSMRAIL_SOFT_SHM_RING`: bytes of each of a shared-memory link's two
/// rings (a power of two, 4096 to 2^30; default 1 MiB).
pub const SHM_RING_VAR: &str = "PSMRAIL_SOFT_SHM_RING";

/// `PSMRAIL_SOFT_SHM_SINGLE_COPY`: large messages on a shared-memory
/// link are read from the sender's memory (a boolean; default on).
pub const SHM_SINGLE_COPY_VAR: &str = "PSMRAIL_SOFT_SHM_SINGLE_COPY";

/// What the variables say (`None`: unset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftShmVars {
    /// `PSMRAIL_SOFT_SHM`.
    pub enabled: Option<bool>,
    /// `PSMRAIL_SOFT_SHM_RING`.
    pub ring: Option<usize>,
    /// `PSMRAIL_SOFT_SHM_SINGLE_COPY`.
    pub single_copy: Option<bool>,
}

/// Reads the variables from `vars`.
///
/// # Errors
/// `Inval` naming the variable for a value that is not a boolean, not a
/// decimal number, or not a power of two in range.
pub fn from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<SoftShmVars> {
    let mut out = SoftShmVars::default();
    if let Some(v) = read_var(vars, SHM_VAR)? {
        out.enabled = Some(parse_bool_var(SHM_VAR, &v)?);
    }
    if let Some(v) = read_var(vars, SHM_SINGLE_COPY_VAR)? {
        out.single_copy = Some(parse_bool_var(SHM_SINGLE_COPY_VAR, &v)?);
    }
    if let Some(v) = read_var(vars, SHM_RING_VAR)? {
        let expected = "a power of two from 4096 to 1073741824 (bytes)";
        let n = parse_u64(&v).map_err(|p| {
            ConfigError::new(SHM_RING_VAR, &v, 0..v.len(), expected).with_problem(p.to_string())
        })?;
        let ok = usize::try_from(n)
            .ok()
            .filter(|n| n.is_power_of_two() && (SHM_RING_MIN..=SHM_RING_MAX).contains(n));
        out.ring = Some(ok.ok_or_else(|| {
            ConfigError::new(SHM_RING_VAR, &v, 0..v.len(), expected)
                .with_problem(format!("{n} is not a power of two in range"))
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_values_name_the_variable() {
        for (var, bad) in [
            (SHM_VAR, "maybe"),
            (SHM_VAR, ""),
            (SHM_SINGLE_COPY_VAR, "2"),
            (SHM_RING_VAR, "1m"),
            (SHM_RING_VAR, "-4096"),
            (SHM_RING_VAR, "2048"),
            (SHM_RING_VAR, "2147483648"),
            (SHM_RING_VAR, "99999999999999999999999"),
        ] {
            let e = from_vars(&[(var, bad)]).unwrap_err();
            assert!(e.to_string().contains(var), "{var}={bad}: {e}");
        }
        assert_eq!(from_vars(&[("X", "1")]).unwrap(), SoftShmVars::default());
    }
}
