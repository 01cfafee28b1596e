//! psmrail: libfabric's `psm` and `mrail` providers as async Rust.
//!
//! See `design.md` for the layers. This crate holds the typed configuration
//! ([`config`]) and the error type; the engines, the libfabric object model
//! and the operations arrive layer by layer on top of the progress reactor
//! ([`reactor`], re-exported from `psmrail-reactor`).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "tokio")]
pub mod compat;
pub mod config;
pub mod engine;
mod error;
pub mod fabric;
pub mod mrail;
pub mod ops;
pub mod resend;

#[cfg(feature = "hooks")]
#[doc(hidden)]
pub mod hooks;

pub use error::{Error, ErrorKind, Result, Truncation};
pub use psmrail_reactor as reactor;
