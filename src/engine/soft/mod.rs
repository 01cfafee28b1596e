//! The soft engine: PSM semantics in pure Rust, over the process itself and TCP.
//!
//! # Core and edge
//!
//! The engine is split like quinn (quinn-proto under quinn) and rustls
//! (`design.md`, principle 1):
//!
//! * **The core** (this module) is plain data structures: no sockets,
//!   threads or clocks. [`SoftCore`] is one endpoint's whole protocol: the
//!   [`TagMatcher`] (PSM's posted and unexpected queues), the wire protocol
//!   ([`wire`]: frames, handshake, eager and rendezvous transfers, active
//!   messages), credit-based flow control, and failure handling. It takes
//!   bytes and commands in and gives frames and [`Event`]s out; it never
//!   owns an operation's buffer ([`Event::Place`] says where received bytes
//!   go, [`SendPayloads`] lends send buffers while frames are encoded).
//! * **The edge** (the engine's I/O layer, elsewhere) owns the sockets
//!   (mio), the operations' [`OpBuffer`](crate::engine::OpBuffer)s and the
//!   reactor registration. It opens a connection in the core for every TCP
//!   connection (and a pair of them, piped together, for the process to
//!   reach itself), feeds input, writes output, applies events, and tells
//!   the core when a transport dies. The steps are listed in
//!   [`protocol`]'s docs.
//!
//! # Pieces
//!
//! | module | what |
//! |---|---|
//! | [`epid`] | [`SoftEpid`]: IPv4 address, port and instance packed in an [`Epid`](crate::engine::Epid) |
//! | [`matcher`] | [`TagMatcher`]: posted and unexpected queues, tag + select mask, posting order, byte budget |
//! | [`wire`] | frames ([`wire::Frame`], [`wire::encode`], [`wire::FrameDecoder`]), the handshake and its refusals |
//! | [`config`] | [`ProtocolConfig`]: thresholds, chunk size, AM limits, budget and credit windows |
//! | [`protocol`] | [`SoftCore`]: the state machine, its commands, events and credit scheme |
//!
//! # Guarantees
//!
//! * PSM's matching: oldest matching receive in posting order, oldest
//!   matching unexpected message, per-peer order, truncation reported with
//!   both lengths, cancel of unmatched receives, probe without consuming.
//! * A message above the eager threshold is never buffered whole before its
//!   receive is posted: only its header waits (rendezvous).
//! * Bounded memory whatever a peer does: frame lengths are capped before
//!   any allocation; unexpected bytes plus outstanding credit never exceed
//!   the budget; a sender beyond its credit is held (never dropped); a
//!   malformed frame or a protocol violation closes that connection alone.
//! * A peer that goes away completes every operation pending towards it
//!   with an error.

pub mod config;
mod conn;
pub mod epid;
#[doc(hidden)]
pub mod fuzzing;
pub mod matcher;
pub mod protocol;
pub mod wire;

#[cfg(test)]
mod tests;

pub use config::ProtocolConfig;
pub use conn::{ConnPhase, Role};
pub use epid::{SoftEpid, SoftEpidError, MAX_INSTANCE};
pub use matcher::TagMatcher;
pub use protocol::{
    AmToken, ConnError, ConnId, CoreStats, Event, OpId, SendPayloads, SoftCore, Violation,
};
