//! What the benchmark programs of this workspace share: starting and
//! pinning their peer processes ([`harness`]), statistics of samples
//! ([`stats`]), sizes on the command line and in output ([`units`]), CSV
//! files ([`csv`]), SVG line charts ([`chart`]) and alternating A/B runs of
//! separate processes ([`ab`]).
//!
//! The programs are the binaries of this crate: `psm_bench` (the psm
//! provider beside tokio TCP and other transports), `mrail_bench` (the
//! multi-rail provider in a network-namespace rig), `engine_pingpong` (the
//! native engine against the raw psm-sys floor), `am_msg_pingpong`,
//! `rma_bench` and `progress_modes`.

pub mod ab;
pub mod chart;
pub mod csv;
pub mod harness;
pub mod stats;
pub mod units;
