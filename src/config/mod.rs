//! Typed configuration and the parsers for the `FI_PSM_*` and `FI_OFI_MRAIL_*`
//! environment variables.
//!
//! Two configurations, each a typed struct with a builder:
//! * [`PsmConfig`] — the psm provider (fi_psm(7)): job key, name server,
//!   protocol switches, close timing and the progress thread (interval and
//!   CPU affinity);
//! * [`MrailConfig`] — the mrail provider (fi_mrail(7)): the rails'
//!   addresses and the size-to-policy table.
//!
//! Two lookups turn configuration into facts about this machine, for
//! `getinfo` and the mrail provider above it: [`rail_resolve`] (each
//! `FI_OFI_MRAIL_ADDR` item to the IPv4 address its rail binds to) and
//! [`local_rank`](mod@local_rank) (the process's rank on its node, from
//! the launcher's variables); [`listen_addr`] resolves where the soft
//! engine and the name server listen (`PSMRAIL_SOFT_ADDR`,
//! `PSMRAIL_NAME_SERVER_ADDR`), in the same address forms.
//!
//! The environment is one way to fill them, not the only one: `from_env()`
//! is `from_vars(&ProcessEnv)`, and [`from_vars`](PsmConfig::from_vars)
//! takes any [`VarSource`] (a map, a slice of pairs, a closure), so nothing
//! — tests included — needs to modify the process environment. Builders
//! start from the man-page defaults or from variables, and setters override
//! single values. Every effective value remembers its [`Source`], and the
//! `Display` of a configuration is a readable summary of all of them:
//!
//! ```
//! use psmrail::config::{MrailConfig, PsmConfig};
//!
//! let psm = PsmConfig::from_vars(&[("FI_PSM_TIMEOUT", "0")])?;
//! let summary = psm.to_string();
//! assert!(summary.contains("FI_PSM_TIMEOUT"));
//! assert!(summary.contains("[env FI_PSM_TIMEOUT]"));
//! assert!(summary.contains("[default]"));
//!
//! let mrail = MrailConfig::from_vars(&[("FI_OFI_MRAIL_ADDR", "eth0,eth1")])?;
//! assert!(mrail.to_string().contains("rail 1: eth1"));
//! # Ok::<(), psmrail::config::ConfigError>(())
//! ```
//!
//! # Errors
//!
//! A malformed value is never clamped, skipped or replaced by its default
//! (the C providers did all three). It is a [`ConfigError`] naming the
//! variable, the whole value, the offending item and its byte offset, and
//! what was expected:
//!
//! ```text
//! FI_PSM_PROG_AFFINITY="0:3,x": item "x" at byte 4: start: "x" is not a decimal integer; expected <start>[:<end>[:<stride>]] with integer core ids
//! ```
//!
//! It converts into [`crate::Error`] with kind `FI_EINVAL`. A value that is
//! not UTF-8 is an error too. Parsing never panics (checked by property
//! tests and by the fuzz targets in `fuzz/`).
//!
//! # Syntax shared by all variables
//!
//! * **Booleans**: `1`/`0`, `yes`/`no`, `true`/`false`, `on`/`off`,
//!   case-insensitive ([`parse_bool`]).
//! * **Numbers**: decimal ASCII digits; a leading `-` only where negative
//!   values mean something (affinity core ids, the `-1` size of
//!   `FI_OFI_MRAIL_CONFIG`). No `+`, no `0x`, no leading zeros
//!   (C's `strtol(.., 0)` read `010` as octal 8, so it is refused rather than
//!   silently read as 10), no whitespace, no trailing junk (C read `"2c"` as
//!   2); a value that does not fit is an overflow error, never a wrap.
//!   Numeric fields inside `FI_ADDR_STR` addresses follow their format (hex
//!   for the `psmx`/`opx`/`ib_ud` formats, `0x` hex or decimal for
//!   `fi_sockaddr_ib`).
//! * **Lists** are split on `,` without trimming; an empty value or an empty
//!   item (`a,,b`, a trailing comma) is an error.
//! * **Text** (a label or a path: `PSMRAIL_WATCH_HOST`,
//!   `PSMRAIL_JOB_SECRET_FILE`): not empty, not blank, no whitespace at
//!   either end, no control characters, and within the setting's length.
//! * **Rail addresses**: an IPv4 address is a dotted quad of decimal octets;
//!   a word that reads as a number (`0x10`, `010`, `127.1`, `1.5`) is
//!   neither an address nor a name ([`RailAddr`]).
//! * **Secrets** (`PSMRAIL_JOB_SECRET`, or a private file named by
//!   `PSMRAIL_JOB_SECRET_FILE`) are never shown in an error.
//! * The environment is only read, never written.
//!
//! # Where psmrail differs from C on purpose
//!
//! See `ARCHITECTURE.md`, "Deliberately better": the affinity list applies
//! every item and rejects bad ones ([`AffinitySpec`]); the mrail table must be
//! strictly ascending and rejects unknown or empty entries
//! ([`RailPolicyTable`]); a malformed UUID is an error instead of leaving
//! uninitialised bytes ([`JobUuid`]).

mod affinity;
mod boolean;
mod env;
mod error;
#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
pub mod listen_addr;
pub mod local_rank;
mod mrail;
mod number;
mod psm;
mod rail_addr;
mod rail_policy;
pub mod rail_resolve;
pub(crate) mod secret;
pub mod soft_shm;
mod source;
pub(crate) mod text;
mod uuid;
mod warning;

pub use affinity::{AffinityItem, AffinitySpec, MAX_CORE_ID, MIN_CORE_ID};
pub use boolean::parse_bool;
pub(crate) use env::read_var;
pub use env::{FnVars, ProcessEnv, VarSource};
pub use error::ConfigError;
pub use listen_addr::NameServerListen;
pub use mrail::{
    MrailConfig, MrailConfigBuilder, MrailParam, ADDR_STRC_VAR, ADDR_VAR, CONFIG_VAR,
    MAX_RAIL_RATE, RATES_VAR as MRAIL_RATES_VAR,
};
pub use psm::{
    PsmConfig, PsmConfigBuilder, PsmParam, DEFAULT_DELAY, DEFAULT_PROG_INTERVAL,
    DEFAULT_PROG_INTERVAL_PINNED, DEFAULT_TIMEOUT, MPI_LAUNCHER_VARS,
};
pub use rail_addr::{AddrStr, RailAddr};
pub use rail_policy::{MaxSize, RailPolicy, RailPolicyTable, MAX_ENTRIES};
pub use source::Source;
pub use uuid::JobUuid;
pub use warning::ConfigWarning;
