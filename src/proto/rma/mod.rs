//! RMA (`fi_read`, `fi_write` and their `msg`/`v` forms) over active messages,
//! as the psm provider does it (`prov/psm/src/psmx_rma.c`; ARCHITECTURE.md,
//! "Deliberately better", for where psmrail departs from it): the sans-IO core.
//! The I/O edge (AM handler registration, posting to the engine, futures,
//! counters and CQ events) is wired on top of it.
//!
//! # Pieces
//!
//! | file | what |
//! |---|---|
//! | `wire.rs` | opcodes, the command word and argument layouts; hostile-input checks |
//! | `ids.rs` | request ids with generations, below the long-RMA tag bit |
//! | `plan.rs` | parameters, local/remote pairing into segments, chunking, short vs long |
//! | `initiator.rs` | `Initiator`/`RmaOp`: the initiator's state machine (protocol steps in its docs) |
//! | `target.rs` | `RmaTarget`: checks and copies at the target, long-transfer bookkeeping |
//!
//! Memory regions and the target-side check live in
//! [`crate::proto::mr`] (`proto/mr`).
//!
//! # Guarantees
//! * The target checks key, range and access before touching a byte; a
//!   refused request leaves the region unchanged and the initiator gets
//!   `FI_EACCES` (bad key, range, or missing right), or `FI_EOPNOTSUPP`
//!   when the domain has no RMA target endpoint.
//! * At most `window` chunks of an operation are unacknowledged; every
//!   chunk is acknowledged; an operation completes when its last chunk is
//!   (delivery complete).
//! * Replies with a stale, forged or foreign id, from the wrong peer, for
//!   a chunk not in flight, or duplicated are dropped.
//! * Long transfers use a tag that is unique where it is matched.

// The edge that calls this core is wired separately (proto/rma_transport.rs).
#![allow(dead_code, unused_imports)]

mod ids;
mod initiator;
mod plan;
mod target;
pub(crate) mod wire;

#[cfg(test)]
mod model_tests;

pub(crate) use initiator::{Delivery, Initiator, RmaKind, Step};
pub(crate) use plan::{RemoteIov, RmaParams, DEFAULT_WINDOW};
pub(crate) use target::{Handled, LongDone, RemoteEvent, RmaTarget, TargetPost};
pub(crate) use wire::{
    kind_of, long_rma_tag, refusal_of, status_of, status_of_error, DecodeError, Packet, Reply,
    Request, NARGS,
};
