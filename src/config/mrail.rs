//! [`MrailConfig`]: the `FI_OFI_MRAIL_*` settings of the mrail provider
//! (fi_mrail(7)).

use std::fmt;

use super::env::{is_set, read_var, ProcessEnv, VarSource};
use super::error::ConfigError;
use super::psm::write_rows;
use super::rail_addr::{self, parse_list_var, RailAddr};
use super::rail_policy::{self, RailPolicy, RailPolicyTable};
use super::source::Source;
use super::warning::ConfigWarning;

/// `FI_OFI_MRAIL_ADDR`: the rails' addresses.
pub const ADDR_VAR: &str = rail_addr::VAR;
/// `FI_OFI_MRAIL_ADDR_STRC`: deprecated spelling of [`ADDR_VAR`], read
/// only when `FI_OFI_MRAIL_ADDR` is unset.
pub const ADDR_STRC_VAR: &str = "FI_OFI_MRAIL_ADDR_STRC";
/// `FI_OFI_MRAIL_CONFIG`: the size-to-policy table.
pub const CONFIG_VAR: &str = rail_policy::VAR;

/// `PSMRAIL_MRAIL_RATES`: each rail's rate in Mbit/s, comma-separated in
/// rail order, for bandwidth-weighted striping (psmrail's own variable;
/// without it the rates are learned from the rails' throughput).
pub const RATES_VAR: &str = "PSMRAIL_MRAIL_RATES";

/// The largest rail rate, in Mbit/s, that `PSMRAIL_MRAIL_RATES` (or
/// [`MrailConfigBuilder::rail_rates`]) may give: 10 Tbit/s, above any link
/// there is; a larger rate is a typo (or `u64::MAX`), not a link.
pub const MAX_RAIL_RATE: u64 = 10_000_000;

/// One `FI_OFI_MRAIL_*` parameter, for [`MrailConfig::source`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MrailParam {
    /// The rail addresses (`FI_OFI_MRAIL_ADDR`, or the deprecated
    /// `FI_OFI_MRAIL_ADDR_STRC`).
    Addr,
    /// The policy table (`FI_OFI_MRAIL_CONFIG`).
    Config,
}

impl MrailParam {
    /// The environment variable that sets this parameter.
    pub const fn env_name(self) -> &'static str {
        match self {
            MrailParam::Addr => ADDR_VAR,
            MrailParam::Config => CONFIG_VAR,
        }
    }
}

/// The mrail provider's configuration (fi_mrail(7), "Runtime Parameters").
///
/// | Variable | Meaning | Default |
/// |---|---|---|
/// | `FI_OFI_MRAIL_ADDR` | comma list of rail addresses ([`RailAddr`]) | unset: no rails |
/// | `FI_OFI_MRAIL_ADDR_STRC` | deprecated; used only when `FI_OFI_MRAIL_ADDR` is unset, with a warning | unset |
/// | `FI_OFI_MRAIL_CONFIG` | `<max_size>:<policy>` table ([`RailPolicyTable`]) | `16384:fixed,ULONG_MAX:striping` |
///
/// With neither address variable set the configuration still reads fine
/// and has no rails; opening the mrail provider then reports `FI_ENODATA`
/// (as C's `fi_getinfo` does). A variable that is set but empty is an
/// "empty item" error. Warnings (deprecated or ignored variables, a bounded
/// last policy entry) are kept in [`warnings`](Self::warnings) and emitted
/// with `tracing::warn!`. The environment is never modified.
///
/// ```
/// use psmrail::config::{MrailConfig, MrailParam, RailPolicy, Source};
///
/// let cfg = MrailConfig::from_vars(&[
///     ("FI_OFI_MRAIL_ADDR_STRC", "ib0,ib1"),
///     ("FI_OFI_MRAIL_CONFIG", "4096:fixed,65536:round-robin,-1:striping"),
/// ])
/// .unwrap();
/// assert_eq!(cfg.rails().len(), 2);
/// assert_eq!(cfg.source(MrailParam::Addr), Source::Env("FI_OFI_MRAIL_ADDR_STRC"));
/// assert_eq!(cfg.warnings()[0].var(), "FI_OFI_MRAIL_ADDR_STRC");
/// assert_eq!(cfg.policy_for(10_000), RailPolicy::RoundRobin);
///
/// // Defaults.
/// let cfg = MrailConfig::from_vars(&[] as &[(&str, &str)]).unwrap();
/// assert!(cfg.rails().is_empty());
/// assert_eq!(cfg.policy_table().to_string(), "16384:fixed,ULONG_MAX:striping");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MrailConfig {
    rails: Vec<RailAddr>,
    rails_source: Source,
    policy: RailPolicyTable,
    policy_source: Source,
    rates: Option<Vec<u64>>,
    warnings: Vec<ConfigWarning>,
}

impl Default for MrailConfig {
    /// No rails and the default policy table.
    fn default() -> Self {
        MrailConfigBuilder::default().build()
    }
}

impl MrailConfig {
    /// A builder starting from the defaults, without the environment.
    pub fn builder() -> MrailConfigBuilder {
        MrailConfigBuilder::default()
    }

    /// A builder pre-filled from `vars` (see [`MrailConfigBuilder::from_vars`]).
    pub fn builder_from_vars<V: VarSource + ?Sized>(
        vars: &V,
    ) -> Result<MrailConfigBuilder, ConfigError> {
        MrailConfigBuilder::from_vars(vars)
    }

    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        MrailConfig::from_vars(&ProcessEnv)
    }

    /// Reads the configuration from `vars`.
    pub fn from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Self, ConfigError> {
        Ok(MrailConfigBuilder::from_vars(vars)?.build())
    }

    /// The rail addresses, in rail order (empty when none were given).
    pub fn rails(&self) -> &[RailAddr] {
        &self.rails
    }

    /// The size-to-policy table.
    pub fn policy_table(&self) -> &RailPolicyTable {
        &self.policy
    }

    /// The rails' rates in Mbit/s (`PSMRAIL_MRAIL_RATES` or
    /// [`MrailConfigBuilder::rail_rates`]), or `None`: learned.
    pub fn rail_rates(&self) -> Option<&[u64]> {
        self.rates.as_deref()
    }

    /// The policy for a message of `size` bytes
    /// ([`RailPolicyTable::policy_for`]).
    pub fn policy_for(&self, size: u64) -> RailPolicy {
        self.policy.policy_for(size)
    }

    /// Where `param`'s value came from. For [`MrailParam::Addr`] read from
    /// the deprecated variable this is `Source::Env("FI_OFI_MRAIL_ADDR_STRC")`.
    pub fn source(&self, param: MrailParam) -> Source {
        match param {
            MrailParam::Addr => self.rails_source,
            MrailParam::Config => self.policy_source,
        }
    }

    /// Warnings raised while reading and building the configuration.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The variable the rails came from, for messages about them:
    /// `FI_OFI_MRAIL_ADDR_STRC` when they were read from the deprecated
    /// variable, else `FI_OFI_MRAIL_ADDR` (also for rails set in code,
    /// which stand in for it).
    ///
    /// ```
    /// use psmrail::config::MrailConfig;
    ///
    /// let cfg = MrailConfig::from_vars(&[("FI_OFI_MRAIL_ADDR_STRC", "eth0")]).unwrap();
    /// assert_eq!(cfg.addr_var(), "FI_OFI_MRAIL_ADDR_STRC");
    /// assert_eq!(MrailConfig::default().addr_var(), "FI_OFI_MRAIL_ADDR");
    /// ```
    pub fn addr_var(&self) -> &'static str {
        match self.rails_source {
            Source::Env(var) => var,
            _ => ADDR_VAR,
        }
    }
}

impl fmt::Display for MrailConfig {
    /// A multi-line summary: every effective value and its [`Source`], one
    /// line per rail, then any warnings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "mrail configuration:")?;
        let rails = if self.rails.is_empty() {
            "unset (no rails)".to_owned()
        } else {
            self.rails
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        write_rows(
            f,
            &[
                (ADDR_VAR, rails, self.rails_source.to_string()),
                (
                    CONFIG_VAR,
                    self.policy.to_string(),
                    self.policy_source.to_string(),
                ),
            ],
        )?;
        for (i, rail) in self.rails.iter().enumerate() {
            let kind = match rail {
                RailAddr::AddrStr(a) => format!("{} address", a.format_name()),
                RailAddr::Ip(_) => "IP address".to_owned(),
                RailAddr::Interface(_) => "interface name".to_owned(),
                RailAddr::Host(_) => "host name".to_owned(),
                RailAddr::InterfaceOrHost(_) => "interface name, else host name".to_owned(),
            };
            writeln!(f, "  rail {i}: {rail} ({kind})")?;
        }
        let mut lower = 0u64;
        for (max, policy) in self.policy.entries() {
            match max.bytes() {
                Some(b) => writeln!(f, "  messages {lower}..={b} bytes: {policy}")?,
                None => writeln!(f, "  messages {lower} bytes and up: {policy}")?,
            }
            lower = max.bytes().map_or(u64::MAX, |b| b.saturating_add(1));
        }
        if !self.policy.is_last_unbounded() {
            if let Some((_, policy)) = self.policy.entries().last() {
                writeln!(f, "  messages {lower} bytes and up: {policy} (last entry)")?;
            }
        }
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}

/// Builds an [`MrailConfig`] from the defaults ([`MrailConfig::builder`])
/// or from variables ([`MrailConfigBuilder::from_vars`]), with overrides in
/// code. Setters mark the parameter [`Source::Explicit`].
#[derive(Clone, Debug)]
pub struct MrailConfigBuilder {
    rails: Vec<RailAddr>,
    rails_source: Source,
    policy: RailPolicyTable,
    policy_source: Source,
    rates: Option<Vec<u64>>,
    warnings: Vec<ConfigWarning>,
}

impl Default for MrailConfigBuilder {
    fn default() -> Self {
        MrailConfigBuilder {
            rails: Vec::new(),
            rails_source: Source::Default,
            policy: RailPolicyTable::default(),
            policy_source: Source::Default,
            rates: None,
            warnings: Vec::new(),
        }
    }
}

impl MrailConfigBuilder {
    /// A builder filled from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        MrailConfigBuilder::from_vars(&ProcessEnv)
    }

    /// A builder filled from `vars`.
    ///
    /// `FI_OFI_MRAIL_ADDR` is used when set (even if empty, which is then an
    /// error), and a set `FI_OFI_MRAIL_ADDR_STRC` is ignored with a warning.
    /// Otherwise `FI_OFI_MRAIL_ADDR_STRC` is used, with a deprecation
    /// warning; errors in it name `FI_OFI_MRAIL_ADDR_STRC`.
    pub fn from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Self, ConfigError> {
        let mut b = MrailConfigBuilder::default();
        if let Some(value) = read_var(vars, ADDR_VAR)? {
            b.rails = parse_list_var(ADDR_VAR, &value)?;
            b.rails_source = Source::Env(ADDR_VAR);
            if is_set(vars, ADDR_STRC_VAR) {
                b.warnings.push(ConfigWarning::new(
                    ADDR_STRC_VAR,
                    "is ignored because FI_OFI_MRAIL_ADDR is set (FI_OFI_MRAIL_ADDR_STRC is deprecated)",
                ));
            }
        } else if let Some(value) = read_var(vars, ADDR_STRC_VAR)? {
            b.rails = parse_list_var(ADDR_STRC_VAR, &value)?;
            b.rails_source = Source::Env(ADDR_STRC_VAR);
            b.warnings.push(ConfigWarning::new(
                ADDR_STRC_VAR,
                "is deprecated; use FI_OFI_MRAIL_ADDR instead",
            ));
        }
        if let Some(value) = read_var(vars, CONFIG_VAR)? {
            b.policy = RailPolicyTable::parse_var(CONFIG_VAR, &value)?;
            b.policy_source = Source::Env(CONFIG_VAR);
        }
        if let Some(value) = read_var(vars, RATES_VAR)? {
            b.rates = Some(parse_rates(&value)?);
        }
        Ok(b)
    }

    /// Sets the rail addresses (dropping any warning about the address
    /// variables, which no longer matter).
    pub fn rails(mut self, rails: impl IntoIterator<Item = RailAddr>) -> Self {
        self.rails = rails.into_iter().collect();
        self.rails_source = Source::Explicit;
        // The address variables no longer matter.
        self.warnings.retain(|w| w.var() != ADDR_STRC_VAR);
        self
    }

    /// Sets each rail's rate in Mbit/s, in rail order, for weighted
    /// striping (checked at discovery: one rate per rail, each from 1 to
    /// [`MAX_RAIL_RATE`]).
    pub fn rail_rates(mut self, mbit: impl IntoIterator<Item = u64>) -> Self {
        self.rates = Some(mbit.into_iter().collect());
        self
    }

    /// Sets the policy table.
    pub fn policy_table(mut self, table: RailPolicyTable) -> Self {
        self.policy = table;
        self.policy_source = Source::Explicit;
        self
    }

    /// The configuration; warnings are stored in it and emitted with
    /// `tracing::warn!`.
    pub fn build(self) -> MrailConfig {
        let mut warnings = self.warnings;
        if !self.policy.is_last_unbounded() {
            if let Some((max, policy)) = self.policy.entries().last() {
                warnings.push(ConfigWarning::new(
                    CONFIG_VAR,
                    format!(
                        "the last entry {max}:{policy} is bounded; messages larger than {max} bytes also use {policy} (write ULONG_MAX to make it explicit)"
                    ),
                ));
            }
        }
        for w in &warnings {
            w.emit();
        }
        MrailConfig {
            rails: self.rails,
            rails_source: self.rails_source,
            policy: self.policy,
            policy_source: self.policy_source,
            rates: self.rates,
            warnings,
        }
    }
}

/// Parses `PSMRAIL_MRAIL_RATES`: decimal Mbit/s from 1 to
/// [`MAX_RAIL_RATE`], comma-separated.
fn parse_rates(value: &str) -> Result<Vec<u64>, ConfigError> {
    const EXPECTED: &str =
        "comma-separated decimal rates in Mbit/s, 1 to 10000000, one per rail (e.g. 1000,2500)";
    let mut out = Vec::new();
    let mut offset = 0;
    for item in value.split(',') {
        let start = offset;
        offset += item.len() + 1;
        let err = |problem: String| {
            ConfigError::new(RATES_VAR, item, 0..item.len(), EXPECTED)
                .with_problem(problem)
                .shifted(value, start)
        };
        let n = super::number::parse_u64(item).map_err(|p| err(p.to_string()))?;
        if n == 0 {
            return Err(err("a rate of 0".to_owned()));
        }
        if n > MAX_RAIL_RATE {
            return Err(err(format!(
                "{n} Mbit/s is more than the maximum, {MAX_RAIL_RATE} Mbit/s (10 Tbit/s)"
            )));
        }
        out.push(n);
    }
    Ok(out)
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn rates_parse_and_bad_items_are_named() {
        let cfg = MrailConfig::from_vars(&[(RATES_VAR, "1000,2500")]).unwrap();
        assert_eq!(cfg.rail_rates(), Some(&[1000u64, 2500][..]));
        assert_eq!(MrailConfig::default().rail_rates(), None);
        for (bad, item) in [
            ("1000,x", "x"),
            ("0", "0"),
            ("1000,,2", ""),
            ("-5", "-5"),
            ("1000,10000001", "10000001"),
            ("18446744073709551615", "18446744073709551615"),
        ] {
            let e = MrailConfig::from_vars(&[(RATES_VAR, bad)]).unwrap_err();
            assert_eq!(e.var(), RATES_VAR, "{bad}");
            assert_eq!(e.item(), item, "{bad}: {e}");
        }
        let e = MrailConfig::from_vars(&[(RATES_VAR, "18446744073709551615")]).unwrap_err();
        assert_eq!(
            e.problem(),
            Some(
                "18446744073709551615 Mbit/s is more than the maximum, 10000000 Mbit/s (10 Tbit/s)"
            )
        );
        let top = MAX_RAIL_RATE.to_string();
        let cfg = MrailConfig::from_vars(&[(RATES_VAR, top.as_str())]).unwrap();
        assert_eq!(cfg.rail_rates(), Some(&[MAX_RAIL_RATE][..]));
        let cfg = MrailConfig::builder().rail_rates([1, 2]).build();
        assert_eq!(cfg.rail_rates(), Some(&[1u64, 2][..]));
    }
}
