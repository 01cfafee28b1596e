//! The PSM queues: one contract, two engines (`ARCHITECTURE.md`,
//! principle 2).
//!
//! Everything above this module — the libfabric object model, the
//! operations, the mrail layer — is written once against
//! [`EngineEndpoint`]. The contract is shaped after what PSM 1.x offers:
//!
//! * open an endpoint for a job UUID, learn its [`Epid`], connect to peers'
//!   epids with a timeout ([`PeerAddr`] handles come back);
//! * the tag-matching message queue: `isend` / `irecv` with a 64-bit tag
//!   and select mask ([`TagMatch`]), `cancel` of an unmatched receive
//!   (sends cannot be cancelled), `iprobe` of the unexpected queue;
//! * active messages ([`AmHandler`]): register handlers, send requests with
//!   up to `max_am_args` 64-bit arguments and a short payload, reply from
//!   inside the handler;
//! * one non-blocking progress step (the reactor's `ProgressSource`), which
//!   harvests MQ completions and runs AM handlers.
//!
//! **Routing completions.** Every posted request carries an [`OpKey`](crate::reactor::OpKey) taken
//! from the endpoint's completion table ([`EngineEndpoint::completions`]).
//! When the request finishes, the engine stores an [`MqCompletion`] — the
//! status and the [`OpBuffer`] it was given — in that slot and wakes the
//! operation's task; if the operation was dropped, the table drops the
//! buffer then, after the engine is done with it.
//!
//! **What the layers above need and get.** Buffered receive (unexpected
//! messages wait in the engine until a receive matches), the source of every
//! message where the engine can know it ([`MqStatus::source`]), AM with
//! replies for RMA and atomics, and limits ([`EngineLimits`]) to size chunks.
//! Nothing here knows about libfabric capabilities or futures.

mod addr;
mod am;
mod buffer;
mod contract;
mod direct;
mod limits;
mod mq;
pub mod native;
mod queue_stats;
pub(crate) mod random;
pub mod soft;
mod tag_hook;

pub use addr::{Epid, EpidParseError, PeerAddr, EPID_SCHEME};
pub use am::{AmHandler, AmHandlerId, AmMessage, AmReply};
pub use buffer::{BufferOwner, OpBuffer, StableRegion};
pub use contract::{EndpointOptions, Engine, EngineEndpoint, EngineKind, PostError, SendMode};
pub(crate) use direct::DirectEngine;
pub use limits::EngineLimits;
pub use mq::{MqCompletion, MqStatus, TagMatch};
pub use queue_stats::QueueStats;
pub use tag_hook::TagHook;
