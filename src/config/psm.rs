//! [`PsmConfig`]: the `FI_PSM_*` settings of the psm provider (fi_psm(7)).

use std::fmt;
use std::time::Duration;

use psmrail_reactor::{CpuSet, CpuTopology};

use super::affinity::{self, AffinitySpec};
use super::boolean::{on_off, parse_bool_var};
use super::env::{is_set, read_var, ProcessEnv, VarSource};
use super::error::ConfigError;
use super::number::{parse_u64, IntProblem};
use super::source::Source;
use super::uuid::JobUuid;
use super::warning::ConfigWarning;

/// Environment variables whose presence means "launched by an MPI job
/// launcher" (Open MPI's `mpirun`, MPICH/Hydra or any PMI/PMIx launcher).
/// When any of them is set (to any value), `FI_PSM_NAME_SERVER` defaults to
/// off (ARCHITECTURE.md, "Kept as in C"); an explicit `FI_PSM_NAME_SERVER`
/// still wins. Checked in this order; the first one found is reported.
pub const MPI_LAUNCHER_VARS: [&str; 3] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"];

/// Default of `FI_PSM_DELAY` (fi_psm(7): "The default setting is 1").
pub const DEFAULT_DELAY: Duration = Duration::from_secs(1);
/// Default of `FI_PSM_TIMEOUT` (fi_psm(7): "The default setting is 5").
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Progress interval when an affinity is set and no interval is given
/// (fi_psm(7): "1 if affinity is set").
pub const DEFAULT_PROG_INTERVAL_PINNED: Duration = Duration::from_micros(1);
/// Progress interval when no affinity is set and no interval is given
/// (fi_psm(7): "or 1000 if not").
pub const DEFAULT_PROG_INTERVAL: Duration = Duration::from_micros(1000);

const EXPECTED_DELAY: &str = "a non-negative decimal number of seconds, at most 60";
const EXPECTED_TIMEOUT: &str = "a non-negative decimal number of seconds, at most 3600";
const EXPECTED_MICROS: &str = "a non-negative decimal number of microseconds, at most 1000000 \
     (unset: 1 with an affinity, else 1000)";

/// One `FI_PSM_*` parameter, for [`PsmConfig::source`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PsmParam {
    /// `FI_PSM_UUID`.
    Uuid,
    /// `FI_PSM_NAME_SERVER`.
    NameServer,
    /// `FI_PSM_TAGGED_RMA`.
    TaggedRma,
    /// `FI_PSM_AM_MSG`.
    AmMsg,
    /// `FI_PSM_DELAY`.
    Delay,
    /// `FI_PSM_TIMEOUT`.
    Timeout,
    /// `FI_PSM_PROG_THREAD`.
    ProgThread,
    /// `FI_PSM_PROG_INTERVAL`.
    ProgInterval,
    /// `FI_PSM_PROG_AFFINITY`.
    ProgAffinity,
}

impl PsmParam {
    /// Every parameter, in the order the summary shows them.
    pub const ALL: [PsmParam; 9] = [
        PsmParam::Uuid,
        PsmParam::NameServer,
        PsmParam::TaggedRma,
        PsmParam::AmMsg,
        PsmParam::Delay,
        PsmParam::Timeout,
        PsmParam::ProgThread,
        PsmParam::ProgInterval,
        PsmParam::ProgAffinity,
    ];

    /// The environment variable that sets this parameter.
    pub const fn env_name(self) -> &'static str {
        match self {
            PsmParam::Uuid => "FI_PSM_UUID",
            PsmParam::NameServer => "FI_PSM_NAME_SERVER",
            PsmParam::TaggedRma => "FI_PSM_TAGGED_RMA",
            PsmParam::AmMsg => "FI_PSM_AM_MSG",
            PsmParam::Delay => "FI_PSM_DELAY",
            PsmParam::Timeout => "FI_PSM_TIMEOUT",
            PsmParam::ProgThread => "FI_PSM_PROG_THREAD",
            PsmParam::ProgInterval => "FI_PSM_PROG_INTERVAL",
            PsmParam::ProgAffinity => affinity::VAR,
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Setting<T> {
    value: T,
    source: Source,
}

impl<T> Setting<T> {
    const fn default(value: T) -> Self {
        Setting {
            value,
            source: Source::Default,
        }
    }

    fn explicit(value: T) -> Self {
        Setting {
            value,
            source: Source::Explicit,
        }
    }

    fn env(value: T, var: &'static str) -> Self {
        Setting {
            value,
            source: Source::Env(var),
        }
    }
}

/// The psm provider's configuration (fi_psm(7), "Runtime Parameters").
///
/// | Variable | Type | Default | Accessor |
/// |---|---|---|---|
/// | `FI_PSM_UUID` | [`JobUuid`] | `0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF` | [`uuid`](Self::uuid) |
/// | `FI_PSM_NAME_SERVER` | bool | on; **off** when an MPI launcher is detected ([`MPI_LAUNCHER_VARS`]) | [`name_server`](Self::name_server) |
/// | `FI_PSM_TAGGED_RMA` | bool | on | [`tagged_rma`](Self::tagged_rma) |
/// | `FI_PSM_AM_MSG` | bool | off | [`am_msg`](Self::am_msg) |
/// | `FI_PSM_DELAY` | seconds, at most 60 ([`MAX_DELAY`](Self::MAX_DELAY)) | 1 | [`delay`](Self::delay) |
/// | `FI_PSM_TIMEOUT` | seconds, at most 3600 ([`MAX_TIMEOUT`](Self::MAX_TIMEOUT)) | 5; 0 skips the graceful close | [`timeout`](Self::timeout) |
/// | `FI_PSM_PROG_THREAD` | bool | on | [`prog_thread`](Self::prog_thread) |
/// | `FI_PSM_PROG_INTERVAL` | µs, 0 to 1000000 ([`MAX_PROG_INTERVAL`](Self::MAX_PROG_INTERVAL)) | 1 with an affinity, else 1000 | [`prog_interval`](Self::prog_interval) |
/// | `FI_PSM_PROG_AFFINITY` | CPU list | unset | [`prog_affinity`](Self::prog_affinity) |
///
/// Closing a domain waits `FI_PSM_DELAY`, then closes its endpoint within
/// `FI_PSM_TIMEOUT`, so it returns within their sum (at most 60 s + 1 hour).
/// On the native engine libpsm2's `psm_ep_close` waits at least 1 s for
/// connected peers (the engine keeps that second of a non-zero timeout for
/// it), and a forced one up to 2 s: with connected peers, a timeout of 0
/// gives `FI_PSM_DELAY` + 2 s and one under a second `FI_PSM_DELAY` + 1 s
/// (measured: 2.006 s for 0 and 1.003 s for 1, with no delay).
///
/// `FI_PSM_PROG_THREAD` is not in the man page; it comes from the C source
/// (`psmx_init.c`, PR #1471): whether the provider may start a progress
/// thread at all. The thread only runs for domains asking for automatic
/// progress.
///
/// Booleans take 1/0, yes/no, true/false, on/off (case-insensitive);
/// numbers are decimal (see [`config`](super), "Numbers"). Any malformed
/// value is an error ([`ConfigError`]); unlike C nothing falls back to a
/// default silently. A duration above its maximum is an error too, whether
/// it comes from a variable or from the builder, so no setting can make
/// `close` sleep for good. Reading never modifies the environment.
///
/// ```
/// use std::time::Duration;
/// use psmrail::config::{PsmConfig, PsmParam, Source};
/// use psmrail::reactor::CpuTopology;
///
/// // Defaults (no variables set).
/// let cfg = PsmConfig::from_vars(&[] as &[(&str, &str)]).unwrap();
/// assert!(cfg.name_server() && cfg.tagged_rma() && !cfg.am_msg());
/// assert_eq!(cfg.prog_interval(), Duration::from_micros(1000));
///
/// // From variables, resolved against a given topology.
/// let topo = CpuTopology { online: 8, allowed: (0..8).collect() };
/// let cfg = PsmConfig::builder_from_vars(&[
///     ("FI_PSM_PROG_AFFINITY", "0:1,-1"),
///     ("OMPI_COMM_WORLD_RANK", "0"),
/// ])
/// .unwrap()
/// .topology(topo)
/// .build()
/// .unwrap();
/// assert_eq!(cfg.prog_affinity().unwrap().to_string(), "0:1,7");
/// assert_eq!(cfg.prog_interval(), Duration::from_micros(1));
/// assert!(!cfg.name_server());
/// assert_eq!(cfg.source(PsmParam::NameServer), Source::MpiDefault("OMPI_COMM_WORLD_RANK"));
///
/// // Or entirely in code, whatever the environment says.
/// let cfg = PsmConfig::builder().am_msg(true).timeout(Duration::ZERO).build().unwrap();
/// assert!(cfg.am_msg() && !cfg.graceful_close());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PsmConfig {
    uuid: Setting<JobUuid>,
    name_server: Setting<bool>,
    tagged_rma: Setting<bool>,
    am_msg: Setting<bool>,
    delay: Setting<Duration>,
    timeout: Setting<Duration>,
    prog_thread: Setting<bool>,
    prog_interval: Setting<Option<Duration>>,
    prog_affinity: Setting<Option<(AffinitySpec, CpuSet)>>,
    mpi_launcher: Option<&'static str>,
    warnings: Vec<ConfigWarning>,
}

impl Default for PsmConfig {
    /// The man-page defaults, without looking at the environment.
    fn default() -> Self {
        PsmConfigBuilder::default().build_unpinned()
    }
}

impl PsmConfig {
    /// Largest `FI_PSM_DELAY`: 60 s. The delay is a workaround slept once
    /// per domain close; a minute covers any use of it and keeps a typo
    /// (or `u64::MAX`) from hanging `close` for good.
    pub const MAX_DELAY: Duration = Duration::from_secs(60);

    /// Largest `FI_PSM_TIMEOUT`: 1 hour. It bounds the graceful part of a
    /// close and is the silence after which the peer watch declares a peer
    /// dead; longer than an hour is no longer a timeout.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

    /// Largest `FI_PSM_PROG_INTERVAL` (1 000 000 µs): the progress thread
    /// sleeps at most a second between progress calls, so automatic
    /// progress stays automatic.
    pub const MAX_PROG_INTERVAL: Duration = Duration::from_secs(1);

    /// A builder starting from the man-page defaults. **The environment is
    /// not read** (no `FI_PSM_*` variable, no MPI detection): for settings
    /// a test or a program fixes whatever the environment says. To start
    /// from the environment and override some settings — what a program
    /// usually wants — use [`builder_from_env`](Self::builder_from_env).
    pub fn builder() -> PsmConfigBuilder {
        PsmConfigBuilder::default()
    }

    /// A builder filled from the process environment (every `FI_PSM_*`
    /// variable that is set, and the MPI launcher detection), for the
    /// overrides a program makes on top: the environment, then the code.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail::config::{PsmConfig, PsmParam, Source};
    ///
    /// let config = PsmConfig::builder_from_env()?
    ///     .delay(Duration::ZERO) // this program never waits at close
    ///     .build()?;
    /// assert_eq!(config.delay(), Duration::ZERO);
    /// assert_eq!(config.source(PsmParam::Delay), Source::Explicit);
    /// # Ok::<(), psmrail::config::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// The first malformed `FI_PSM_*` variable.
    pub fn builder_from_env() -> Result<PsmConfigBuilder, ConfigError> {
        PsmConfigBuilder::from_env()
    }

    /// A builder pre-filled from `vars` (see [`PsmConfigBuilder::from_vars`]).
    pub fn builder_from_vars<V: VarSource + ?Sized>(
        vars: &V,
    ) -> Result<PsmConfigBuilder, ConfigError> {
        PsmConfigBuilder::from_vars(vars)
    }

    /// Reads the configuration from the process environment, resolving the
    /// affinity against [`CpuTopology::captured`].
    pub fn from_env() -> Result<Self, ConfigError> {
        PsmConfig::from_vars(&ProcessEnv)
    }

    /// Reads the configuration from `vars`, resolving the affinity against
    /// [`CpuTopology::captured`].
    pub fn from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Self, ConfigError> {
        PsmConfigBuilder::from_vars(vars)?.build()
    }

    /// The job key (`FI_PSM_UUID`).
    pub fn uuid(&self) -> JobUuid {
        self.uuid.value
    }

    /// Whether the built-in name server runs (`FI_PSM_NAME_SERVER`).
    pub fn name_server(&self) -> bool {
        self.name_server.value
    }

    /// Whether large RMA uses the tagged-MQ "long" protocol (`FI_PSM_TAGGED_RMA`).
    /// Must be the same in every process of the job.
    pub fn tagged_rma(&self) -> bool {
        self.tagged_rma.value
    }

    /// Whether untagged messages run over Active Messages (`FI_PSM_AM_MSG`).
    /// Must be the same in every process of the job.
    pub fn am_msg(&self) -> bool {
        self.am_msg.value
    }

    /// Sleep before closing the PSM endpoint (`FI_PSM_DELAY`). At most
    /// [`MAX_DELAY`](Self::MAX_DELAY).
    pub fn delay(&self) -> Duration {
        self.delay.value
    }

    /// Time allowed for the graceful endpoint close before a forced one
    /// (`FI_PSM_TIMEOUT`). Zero means: skip the graceful close and force it
    /// at once (C fix `5fc2e6eac`; ARCHITECTURE.md, "Kept as in C"). At most
    /// [`MAX_TIMEOUT`](Self::MAX_TIMEOUT).
    pub fn timeout(&self) -> Duration {
        self.timeout.value
    }

    /// Whether a graceful close is attempted (`timeout() > 0`).
    pub fn graceful_close(&self) -> bool {
        !self.timeout.value.is_zero()
    }

    /// Whether a progress thread may be started for auto-progress domains
    /// (`FI_PSM_PROG_THREAD`, from the C source; not in the man page).
    pub fn prog_thread(&self) -> bool {
        self.prog_thread.value
    }

    /// The effective sleep between progress calls of the progress thread:
    /// `FI_PSM_PROG_INTERVAL` when it is set, else 1 µs
    /// when an affinity is set and 1000 µs when not (fi_psm(7)). Zero is
    /// allowed and means a busy loop; at most
    /// [`MAX_PROG_INTERVAL`](Self::MAX_PROG_INTERVAL).
    pub fn prog_interval(&self) -> Duration {
        match self.prog_interval.value {
            Some(d) => d,
            None if self.prog_affinity.value.is_some() => DEFAULT_PROG_INTERVAL_PINNED,
            None => DEFAULT_PROG_INTERVAL,
        }
    }

    /// The interval as configured: `None` when unset (the default rule of
    /// [`prog_interval`](Self::prog_interval) applies).
    pub fn prog_interval_setting(&self) -> Option<Duration> {
        self.prog_interval.value
    }

    /// The CPUs the progress thread is pinned to, resolved against the
    /// topology at build time; `None` when no affinity is set.
    pub fn prog_affinity(&self) -> Option<&CpuSet> {
        self.prog_affinity.value.as_ref().map(|(_, set)| set)
    }

    /// The affinity as written, when set.
    pub fn prog_affinity_spec(&self) -> Option<&AffinitySpec> {
        self.prog_affinity.value.as_ref().map(|(spec, _)| spec)
    }

    /// The auto-progress settings these values give the reactor: the
    /// resolved `FI_PSM_PROG_AFFINITY` set and the effective
    /// `FI_PSM_PROG_INTERVAL`.
    ///
    /// ```
    /// use psmrail::config::PsmConfig;
    /// use std::time::Duration;
    /// let auto = PsmConfig::default().auto_progress();
    /// assert_eq!(auto.affinity, None);
    /// assert_eq!(auto.interval, Duration::from_micros(1000));
    /// ```
    pub fn auto_progress(&self) -> crate::reactor::AutoProgress {
        crate::reactor::AutoProgress {
            affinity: self.prog_affinity().copied(),
            interval: self.prog_interval(),
        }
    }

    /// Where the effective value of `param` came from.
    pub fn source(&self, param: PsmParam) -> Source {
        match param {
            PsmParam::Uuid => self.uuid.source,
            PsmParam::NameServer => self.name_server.source,
            PsmParam::TaggedRma => self.tagged_rma.source,
            PsmParam::AmMsg => self.am_msg.source,
            PsmParam::Delay => self.delay.source,
            PsmParam::Timeout => self.timeout.source,
            PsmParam::ProgThread => self.prog_thread.source,
            PsmParam::ProgInterval => self.prog_interval.source,
            PsmParam::ProgAffinity => self.prog_affinity.source,
        }
    }

    /// The MPI launcher variable found when reading the environment (the
    /// first of [`MPI_LAUNCHER_VARS`] that is set), even when an explicit
    /// `FI_PSM_NAME_SERVER` overrode the resulting default.
    pub fn mpi_launcher(&self) -> Option<&'static str> {
        self.mpi_launcher
    }

    /// Warnings raised while building the configuration (also emitted with
    /// `tracing::warn!`).
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    fn value_text(&self, param: PsmParam) -> String {
        let secs = |d: Duration| format!("{} s", d.as_secs());
        match param {
            PsmParam::Uuid => self.uuid().to_string(),
            PsmParam::NameServer => on_off(self.name_server()).to_owned(),
            PsmParam::TaggedRma => on_off(self.tagged_rma()).to_owned(),
            PsmParam::AmMsg => on_off(self.am_msg()).to_owned(),
            PsmParam::Delay => secs(self.delay()),
            PsmParam::Timeout if self.graceful_close() => secs(self.timeout()),
            PsmParam::Timeout => "0 s (graceful close skipped)".to_owned(),
            PsmParam::ProgThread => on_off(self.prog_thread()).to_owned(),
            PsmParam::ProgInterval => {
                let us = self.prog_interval().as_micros();
                match (self.prog_interval.value, self.prog_affinity.value.is_some()) {
                    (Some(_), _) => format!("{us} us"),
                    (None, true) => format!("{us} us (affinity set)"),
                    (None, false) => format!("{us} us (no affinity)"),
                }
            }
            PsmParam::ProgAffinity => match &self.prog_affinity.value {
                Some((spec, set)) => format!("{spec} -> CPUs {set}"),
                None => "unset".to_owned(),
            },
        }
    }
}

impl fmt::Display for PsmConfig {
    /// A multi-line summary: every effective value and its [`Source`], then
    /// any warnings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "psm configuration:")?;
        let rows: Vec<(&str, String, String)> = PsmParam::ALL
            .iter()
            .map(|&p| (p.env_name(), self.value_text(p), self.source(p).to_string()))
            .collect();
        write_rows(f, &rows)?;
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}

/// Writes `name  value  [source]` rows with aligned columns.
pub(crate) fn write_rows(
    f: &mut fmt::Formatter<'_>,
    rows: &[(&str, String, String)],
) -> fmt::Result {
    let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let value_w = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
    for (name, value, source) in rows {
        writeln!(f, "  {name:name_w$}  {value:value_w$}  [{source}]")?;
    }
    Ok(())
}

/// Builds a [`PsmConfig`]: start from the man-page defaults
/// ([`PsmConfig::builder`]) or from variables ([`PsmConfigBuilder::from_vars`]),
/// override any parameter in code, then [`build`](Self::build).
///
/// Setters mark the parameter's source as [`Source::Explicit`]; a setter
/// called after `from_vars` overrides the variable.
#[derive(Clone, Debug)]
pub struct PsmConfigBuilder {
    uuid: Setting<JobUuid>,
    name_server: Setting<bool>,
    tagged_rma: Setting<bool>,
    am_msg: Setting<bool>,
    delay: Setting<Duration>,
    timeout: Setting<Duration>,
    prog_thread: Setting<bool>,
    prog_interval: Setting<Option<Duration>>,
    prog_affinity: Setting<Option<AffinitySpec>>,
    topology: Option<CpuTopology>,
    mpi_launcher: Option<&'static str>,
}

impl Default for PsmConfigBuilder {
    fn default() -> Self {
        PsmConfigBuilder {
            uuid: Setting::default(JobUuid::DEFAULT),
            name_server: Setting::default(true),
            tagged_rma: Setting::default(true),
            am_msg: Setting::default(false),
            delay: Setting::default(DEFAULT_DELAY),
            timeout: Setting::default(DEFAULT_TIMEOUT),
            prog_thread: Setting::default(true),
            prog_interval: Setting::default(None),
            prog_affinity: Setting::default(None),
            topology: None,
            mpi_launcher: None,
        }
    }
}

impl PsmConfigBuilder {
    /// A builder filled from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        PsmConfigBuilder::from_vars(&ProcessEnv)
    }

    /// A builder filled from `vars`: every `FI_PSM_*` variable that is set
    /// is parsed (the first malformed one is the error), and the MPI
    /// launcher variables ([`MPI_LAUNCHER_VARS`]) switch the name server's
    /// default off. The affinity is parsed here and resolved in
    /// [`build`](Self::build).
    pub fn from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Self, ConfigError> {
        let mut b = PsmConfigBuilder::default();

        if let Some(v) = read_var(vars, PsmParam::Uuid.env_name())? {
            b.uuid = Setting::env(
                JobUuid::parse_var(PsmParam::Uuid.env_name(), &v)?,
                PsmParam::Uuid.env_name(),
            );
        }

        b.mpi_launcher = MPI_LAUNCHER_VARS.into_iter().find(|v| is_set(vars, v));
        if let Some(launcher) = b.mpi_launcher {
            b.name_server = Setting {
                value: false,
                source: Source::MpiDefault(launcher),
            };
        }

        for (param, slot) in [
            (PsmParam::NameServer, &mut b.name_server),
            (PsmParam::TaggedRma, &mut b.tagged_rma),
            (PsmParam::AmMsg, &mut b.am_msg),
            (PsmParam::ProgThread, &mut b.prog_thread),
        ] {
            let var = param.env_name();
            if let Some(v) = read_var(vars, var)? {
                *slot = Setting::env(parse_bool_var(var, &v)?, var);
            }
        }

        for (param, slot, max, expected) in [
            (
                PsmParam::Delay,
                &mut b.delay,
                PsmConfig::MAX_DELAY,
                EXPECTED_DELAY,
            ),
            (
                PsmParam::Timeout,
                &mut b.timeout,
                PsmConfig::MAX_TIMEOUT,
                EXPECTED_TIMEOUT,
            ),
        ] {
            let var = param.env_name();
            if let Some(v) = read_var(vars, var)? {
                let secs = parse_u64(&v).map_err(|p| int_error(var, &v, &p, expected))?;
                if secs > max.as_secs() {
                    let problem = format!("{secs} s is more than the maximum, {} s", max.as_secs());
                    return Err(whole_value_error(var, &v, problem, expected));
                }
                *slot = Setting::env(Duration::from_secs(secs), var);
            }
        }

        let var = PsmParam::ProgInterval.env_name();
        if let Some(v) = read_var(vars, var)? {
            // C read a negative interval as "the default"; here the default
            // is what an unset variable gives, and a sign is an error.
            let us = parse_u64(&v).map_err(|p| {
                let mut e = int_error(var, &v, &p, EXPECTED_MICROS);
                if let IntProblem::Negative(_) = p {
                    e = e.with_problem(format!("{p}; leave {var} unset for the default interval"));
                }
                e
            })?;
            let max = PsmConfig::MAX_PROG_INTERVAL;
            if Duration::from_micros(us) > max {
                let problem = format!(
                    "{us} us is more than the maximum, {} us ({max:?})",
                    max.as_micros()
                );
                return Err(whole_value_error(var, &v, problem, EXPECTED_MICROS));
            }
            b.prog_interval = Setting::env(Some(Duration::from_micros(us)), var);
        }

        let var = PsmParam::ProgAffinity.env_name();
        if let Some(v) = read_var(vars, var)? {
            b.prog_affinity = Setting::env(Some(AffinitySpec::parse_var(affinity::VAR, &v)?), var);
        }

        Ok(b)
    }

    /// Sets the job key (`FI_PSM_UUID`).
    pub fn uuid(mut self, uuid: JobUuid) -> Self {
        self.uuid = Setting::explicit(uuid);
        self
    }

    /// Turns the name server on or off (`FI_PSM_NAME_SERVER`), whatever an
    /// MPI launcher suggests.
    pub fn name_server(mut self, on: bool) -> Self {
        self.name_server = Setting::explicit(on);
        self
    }

    /// Sets `FI_PSM_TAGGED_RMA`.
    pub fn tagged_rma(mut self, on: bool) -> Self {
        self.tagged_rma = Setting::explicit(on);
        self
    }

    /// Sets `FI_PSM_AM_MSG`.
    pub fn am_msg(mut self, on: bool) -> Self {
        self.am_msg = Setting::explicit(on);
        self
    }

    /// Sets the pre-close sleep (`FI_PSM_DELAY`). More than
    /// [`PsmConfig::MAX_DELAY`] makes [`build`](Self::build) fail.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Setting::explicit(delay);
        self
    }

    /// Sets the graceful-close timeout (`FI_PSM_TIMEOUT`); zero skips the
    /// graceful close. More than [`PsmConfig::MAX_TIMEOUT`] makes
    /// [`build`](Self::build) fail.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Setting::explicit(timeout);
        self
    }

    /// Sets `FI_PSM_PROG_THREAD`.
    pub fn prog_thread(mut self, on: bool) -> Self {
        self.prog_thread = Setting::explicit(on);
        self
    }

    /// Sets the progress interval; `None` applies the default rule (1 µs
    /// with an affinity, else 1000 µs). More than
    /// [`PsmConfig::MAX_PROG_INTERVAL`] makes [`build`](Self::build) fail.
    pub fn prog_interval(mut self, interval: Option<Duration>) -> Self {
        self.prog_interval = Setting::explicit(interval);
        self
    }

    /// Sets (or with `None` clears) the progress-thread affinity. Use
    /// [`AffinitySpec::from_cpu_set`] to pass a [`CpuSet`].
    pub fn prog_affinity(mut self, spec: Option<AffinitySpec>) -> Self {
        self.prog_affinity = Setting::explicit(spec);
        self
    }

    /// The topology to resolve the affinity against (default:
    /// [`CpuTopology::captured`], read on first use).
    pub fn topology(mut self, topology: CpuTopology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Checks the durations against their maxima, resolves the affinity
    /// and returns the configuration; warnings are stored in it and emitted
    /// with `tracing::warn!`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the variable when a duration set in code is
    /// above its maximum ([`PsmConfig::MAX_DELAY`],
    /// [`PsmConfig::MAX_TIMEOUT`], [`PsmConfig::MAX_PROG_INTERVAL`]; values
    /// read from variables were checked already), or when the affinity
    /// names CPUs the topology lacks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail::config::PsmConfig;
    ///
    /// let e = PsmConfig::builder_from_env().unwrap().delay(Duration::from_secs(61)).build().unwrap_err();
    /// assert_eq!(e.var(), "FI_PSM_DELAY");
    /// assert_eq!(e.value(), "61s");
    /// assert_eq!(e.problem(), Some("61s (set in code) is more than the maximum, 60s"));
    /// ```
    pub fn build(self) -> Result<PsmConfig, ConfigError> {
        self.check_maxima()?;
        let resolved = match &self.prog_affinity.value {
            Some(spec) => {
                let topology = match &self.topology {
                    Some(t) => *t,
                    None => *CpuTopology::captured(),
                };
                Some((spec.clone(), spec.resolve(&topology)?))
            }
            None => None,
        };
        let cfg = self.finish(resolved);
        for w in &cfg.warnings {
            w.emit();
        }
        Ok(cfg)
    }

    /// Refuses durations above their maxima.
    fn check_maxima(&self) -> Result<(), ConfigError> {
        let interval = self.prog_interval.value.unwrap_or(Duration::ZERO);
        for (param, value, max, expected) in [
            (
                PsmParam::Delay,
                self.delay.value,
                PsmConfig::MAX_DELAY,
                "a delay of at most 60 s",
            ),
            (
                PsmParam::Timeout,
                self.timeout.value,
                PsmConfig::MAX_TIMEOUT,
                "a timeout of at most 3600 s (1 hour)",
            ),
            (
                PsmParam::ProgInterval,
                interval,
                PsmConfig::MAX_PROG_INTERVAL,
                "an interval of at most 1 s, or None for the default",
            ),
        ] {
            if value > max {
                let text = format!("{value:?}");
                let problem = format!("{text} (set in code) is more than the maximum, {max:?}");
                return Err(whole_value_error(
                    param.env_name(),
                    &text,
                    problem,
                    expected,
                ));
            }
        }
        Ok(())
    }

    /// Build without an affinity (cannot fail).
    fn build_unpinned(mut self) -> PsmConfig {
        self.prog_affinity = Setting::default(None);
        self.finish(None)
    }

    fn finish(self, affinity: Option<(AffinitySpec, CpuSet)>) -> PsmConfig {
        let mut warnings = Vec::new();
        if !self.prog_thread.value {
            for (param, set) in [
                (PsmParam::ProgAffinity, affinity.is_some()),
                (
                    PsmParam::ProgInterval,
                    self.prog_interval.source != Source::Default,
                ),
            ] {
                if set {
                    warnings.push(ConfigWarning::new(
                        param.env_name(),
                        "has no effect: FI_PSM_PROG_THREAD is off, so no progress thread runs",
                    ));
                }
            }
        }
        PsmConfig {
            uuid: self.uuid,
            name_server: self.name_server,
            tagged_rma: self.tagged_rma,
            am_msg: self.am_msg,
            delay: self.delay,
            timeout: self.timeout,
            prog_thread: self.prog_thread,
            prog_interval: self.prog_interval,
            prog_affinity: Setting {
                value: affinity,
                source: self.prog_affinity.source,
            },
            mpi_launcher: self.mpi_launcher,
            warnings,
        }
    }
}

/// An error about the whole of `value`.
fn whole_value_error(
    var: &'static str,
    value: &str,
    problem: String,
    expected: &'static str,
) -> ConfigError {
    ConfigError::new(var, value, 0..value.len(), expected).with_problem(problem)
}

fn int_error(
    var: &'static str,
    value: &str,
    problem: &IntProblem,
    expected: &'static str,
) -> ConfigError {
    ConfigError::new(var, value, 0..value.len(), expected).with_problem(problem.to_string())
}
