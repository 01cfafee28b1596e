//! psmrail: libfabric's `psm` and `mrail` providers as async Rust.
//!
//! Two providers, one object model:
//!
//! * **psm** (fi_psm(7)): tagged and untagged messages, RMA, atomics and
//!   triggered operations over the PSM 1.x interface, on RDM and DGRAM
//!   endpoints. It runs on the **native engine** (the real
//!   `libpsm_infinipath.so.1`, loaded at run time) or on the **soft
//!   engine** (the same semantics in pure Rust, in one process or over
//!   TCP), which needs nothing installed.
//! * **mrail** (fi_mrail(7), `ofi_mrail`): one endpoint over several psm
//!   rails, with per-size policies (fixed, round-robin, striping),
//!   ordering across rails, RMA striped over the rails, bandwidth-weighted
//!   stripes and failover off a dead rail.
//!
//! Every operation is a future that any executor can await; psmrail's own
//! reactor makes the progress.
//!
//! # The objects
//!
//! As in libfabric, from discovery down to the endpoint:
//!
//! | libfabric | psm provider | mrail provider |
//! | --- | --- | --- |
//! | `fi_getinfo` | [`fabric::getinfo`] with [`fabric::Hints`] → [`fabric::Info`] | the same, with [`fabric::Provider::Mrail`] |
//! | `fi_fabric` | [`fabric::Fabric`] | [`mrail::MrailFabric`] |
//! | `fi_domain` | [`fabric::Domain`] (an engine and its reactor) | [`mrail::MrailDomain`] (one psm domain per rail) |
//! | `fi_av_open` | [`fabric::AddressVector`] | [`mrail::MrailAv`] |
//! | `fi_cq_open`, `fi_cntr_open` | [`fabric::CompletionQueue`], [`fabric::Counter`] | the same types |
//! | `fi_mr_reg` | [`fabric::MemoryRegion`] | [`mrail::MrailMemoryRegion`] |
//! | `fi_endpoint` | [`fabric::Endpoint`] | [`mrail::MrailEndpoint`] |
//!
//! Operations are methods of the endpoints with libfabric's names and
//! argument order (`send`, `recv`, `tsend`, `trecv`, `inject`, `read`,
//! `write`, `atomic`, ...). Code can be generic over both providers
//! through [`ops::MessageEndpoint`] and [`ops::RmaEndpoint`], or choose
//! one at run time through [`ops::DynEndpoint`].
//!
//! # A complete program
//!
//! An endpoint on the soft engine sends a tagged message to itself. With
//! two processes, each inserts the other's address (its
//! [`getname`](fabric::Endpoint::getname), as text) instead:
//!
//! ```
//! use psmrail::config::PsmConfig;
//! use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
//!
//! // FI_PSM_* from the environment, then what this program insists on.
//! let config = PsmConfig::builder_from_env()?
//!     .name_server(false)
//!     .build()?;
//! let hints = Hints::new()
//!     .caps(Caps::TAGGED | Caps::MSG)
//!     .engine(EngineChoice::Soft)
//!     .config(config);
//! let info = getinfo(Some(&hints))?.remove(0);
//! let fabric = Fabric::open(&info)?;
//! let domain = fabric.domain(&info)?;
//! let av = domain.av(AvAttr::new())?;
//! let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! let me = av.insert(&[ep.getname()]).remove(0)?;
//!
//! let reactor = domain.reactor().clone();
//! let (len, buf) = reactor.block_on(async {
//!     // Posted at once: the receive waits before its message is sent.
//!     let recv = ep.trecv(vec![0u8; 64], 7, 0);
//!     let (sent, _msg) = ep.tsend(me, 7, b"hello".to_vec()).await;
//!     sent?;
//!     // Every operation hands its buffer back, whatever happened.
//!     let (got, buf) = recv.await;
//!     Ok::<_, psmrail::Error>((got?.len, buf))
//! })?;
//! assert_eq!(&buf.as_slice()[..len], b"hello");
//! # Ok::<(), psmrail::Error>(())
//! ```
//!
//! # Progress
//!
//! A domain's [`reactor::Reactor`] runs in one of three modes, chosen by
//! the hints' progress model ([`fabric::ProgressKind`], `FI_PSM_PROG_*`):
//!
//! * **manual** (`FI_PROGRESS_MANUAL`): futures make progress while they
//!   are polled and re-wake themselves, so an awaiting task spins on its
//!   core, the lowest latency;
//! * **auto** (`FI_PROGRESS_AUTO`): a thread per domain, pinned to
//!   `FI_PSM_PROG_AFFINITY`, makes progress every `FI_PSM_PROG_INTERVAL`
//!   and wakes the tasks whose operations completed;
//! * **adaptive** ([`fabric::Hints::spin`]): a pending future spins for a
//!   window after its thread's last completion, then sleeps while the
//!   thread watches. `getinfo` picks it inside a tokio runtime when the
//!   hints leave the model unset.
//!
//! # Cancellation
//!
//! Dropping any operation's future at any point is safe: a receive not yet
//! matched is cancelled, and an operation the engine may still touch keeps
//! its buffer inside the reactor until the engine is done, so nothing ever
//! writes into freed memory and nothing leaks. What a dropped operation
//! did or did not do is said per operation (see [`ops`] and
//! [`mrail::ops`]).
//!
//! # Where to go next
//!
//! * [`prelude`]: the names most programs use, in one import;
//! * [`fabric`]: discovery, capability rules, the objects;
//! * [`ops`]: the operations, their outputs, posting with a context and
//!   completion queues, RMA and atomics;
//! * [`mrail`]: rails, policies, ordering, failover, what a peer costs;
//! * [`config`]: every `FI_PSM_*` and `FI_OFI_MRAIL_*` variable, typed;
//! * [`engine`]: the engine contract and the two engines;
//! * [`bootstrap`]: starting under a launcher (PMI);
//! * `compat` (feature `tokio`): `Stream`/`Sink` channels, codec frames
//!   and `AsyncRead`/`AsyncWrite` over an endpoint;
//! * the repository's `ARCHITECTURE.md` (layers and principles), `docs/`
//!   (each provider and engine, configuration, observability) and
//!   `BENCHMARKING.md` (how it was measured, and the figures).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod bootstrap;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod compat;
pub mod config;
pub mod engine;
mod error;
pub mod fabric;
pub mod mrail;
pub mod ops;
pub mod prelude;
pub(crate) mod proto;
pub mod resend;

#[cfg(feature = "hooks")]
#[doc(hidden)]
pub mod hooks;

pub use error::{Error, ErrorKind, Result, Truncation};
pub use psmrail_reactor as reactor;

/// The README's code, compiled as doctests so that its quick start keeps
/// building.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
