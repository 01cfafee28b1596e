//! psmrail's progress reactor: progress sources, completion slots, and the
//! manual, auto and adaptive progress modes (see `ARCHITECTURE.md`,
//! principle 4).
//!
//! * [`ProgressSource`] (`source`): what an engine endpoint implements: one
//!   non-blocking progress step.
//! * [`Reactor`] (`reactor`): drives the sources, manually (inside the
//!   futures' `poll`, [`Reactor::progress`], [`Reactor::block_on`]) or on an
//!   auto progress thread (`auto_thread`) pinned to `FI_PSM_PROG_AFFINITY`
//!   and woken every `FI_PSM_PROG_INTERVAL`, by [`Reactor::notify`] or by
//!   socket readiness, or adaptively: futures spin for a short window, then
//!   sleep while the auto thread watches (`spin_window`).
//! * [`CompletionTable`] (`completion`, on `slab`): per-operation slots in
//!   which the engine leaves a result and the operation's future finds it,
//!   with no lost wake-ups, no per-operation allocation after warm-up, and
//!   cancellation safety: a dropped future's buffer is kept until the engine
//!   is done with it (principle 3).
//! * [`CpuSet`] (`cpu_set`): the affinity set and thread pinning.
//!
//! The lock-free parts (`completion`, `slab`, `gate`) use the shims in
//! `sync` so that `tests/loom.rs` can model-check them:
//! `RUSTFLAGS="--cfg loom" cargo test -p psmrail-reactor --release --test loom`.
//!
//! A typical operation future:
//!
//! ```
//! use std::future::Future;
//! use std::pin::Pin;
//! use std::sync::Arc;
//! use std::task::{Context, Poll};
//! use psmrail_reactor::{CompletionTable, OpKey, Reactor};
//!
//! struct Op {
//!     reactor: Reactor,
//!     table: Arc<CompletionTable<Vec<u8>>>,
//!     key: Option<OpKey>,
//! }
//!
//! impl Future for Op {
//!     type Output = Vec<u8>;
//!     fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<u8>> {
//!         let key = self.key.expect("polled after completion");
//!         let out = self.reactor.poll_completion(&self.table, key, cx);
//!         if out.is_ready() {
//!             self.key = None;
//!         }
//!         out
//!     }
//! }
//!
//! impl Drop for Op {
//!     fn drop(&mut self) {
//!         if let Some(key) = self.key.take() {
//!             // Not finished: the table keeps (and later drops) the buffer.
//!             drop(self.table.abandon(key));
//!         }
//!     }
//! }
//!
//! let reactor = Reactor::manual();
//! let table = Arc::new(CompletionTable::new());
//! let key = table.insert();
//! table.complete(key, b"done".to_vec()).unwrap();
//! let op = Op { reactor: reactor.clone(), table, key: Some(key) };
//! assert_eq!(reactor.block_on(op), b"done");
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Under loom only the lock-free core is built; the rest is unused there.
#![cfg_attr(loom, allow(dead_code))]

mod completion;
mod cpu_set;
#[cfg(loom)]
#[doc(hidden)]
pub mod gate;
#[cfg(not(loom))]
#[allow(unreachable_pub)] // public to the loom tests, built with `--cfg loom`
mod gate;
mod slab;
mod source;
mod stats;
mod sync;

#[cfg(not(loom))]
mod auto_thread;
#[cfg(not(loom))]
mod block_on;
#[cfg(not(loom))]
mod idle_assist;
#[cfg(not(loom))]
mod reactor;
#[cfg(not(loom))]
mod source_list;
#[cfg(not(loom))]
mod spin_window;

pub use completion::{CompletionTable, OpKey, OpStatus};
pub use cpu_set::{current_thread_affinity, pin_current_thread, CpuSet, CpuTopology, MAX_CPUS};
pub use source::{progress_fn, FnSource, Progress, ProgressSource, SourceId};
pub use stats::ReactorStats;

#[cfg(not(loom))]
pub use auto_thread::{AutoThreadInfo, SleepStrategy};
#[cfg(not(loom))]
pub use reactor::{AdaptiveProgress, AutoProgress, ProgressMode, Reactor, ReactorBuilder};
