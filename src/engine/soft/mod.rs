//! The soft engine: PSM semantics in pure Rust, over the process itself,
//! Unix-domain sockets (same host) and TCP.
//!
//! Use it through [`SoftEngine`] (an [`Engine`](crate::engine::Engine))
//! and its [`SoftEndpoint`]s; the rest of this module is the machinery
//! underneath.
//!
//! # Core and edge
//!
//! The engine is split like quinn (quinn-proto under quinn) and rustls
//! (`ARCHITECTURE.md`, principle 1):
//!
//! * **The core** (this module) is plain data structures: no sockets,
//!   threads or clocks. `SoftCore` is one endpoint's whole protocol: the
//!   `TagMatcher` (PSM's posted and unexpected queues), the wire protocol
//!   (`wire`: frames, handshake, eager and rendezvous transfers, active
//!   messages), credit-based flow control, and failure handling. It takes
//!   bytes and commands in and gives frames and `Event`s out; it never
//!   owns an operation's buffer (`Event::Place` says where received bytes
//!   go, `SendPayloads` lends send buffers while frames are encoded).
//! * **The edge** ([`SoftEngine`], [`SoftEndpoint`] and the private
//!   modules `endpoint`, `transport`, `loopback`, `optable`) owns the
//!   sockets (mio), the operations' [`OpBuffer`](crate::engine::OpBuffer)s
//!   and the reactor registration. It opens a connection in the core for
//!   every socket connection (and a pair of them, piped together, for the
//!   endpoint to reach itself), feeds input, writes output, applies events,
//!   and tells the core when a transport dies. The steps are listed in
//!   `protocol`'s docs; the edge also uses the core's zero-copy hooks
//!   (`SoftCore::poll_transmit_vectored`, `SoftCore::take_direct`) so
//!   bulk data goes from the send buffer to the socket and from the socket
//!   to the receive buffer without an extra copy.
//!
//! # Pieces
//!
//! | module | what |
//! |---|---|
//! | [`epid`] | [`SoftEpid`]: IPv4 address, port and instance packed in an [`Epid`](crate::engine::Epid) |
//! | `matcher` | `TagMatcher`: posted and unexpected queues, tag + select mask, posting order, byte budget |
//! | `wire` | frames (`wire::Frame`, `wire::encode`, `wire::FrameDecoder`), the handshake and its refusals |
//! | [`config`] | [`ProtocolConfig`]: thresholds, chunk size, AM limits, budget and credit windows |
//! | `protocol` | `SoftCore`: the state machine, its commands, events and credit scheme |
//! | `engine` (edge) | [`SoftEngine`], [`SoftConfig`]: bind address, port, timeouts, buffer sizes |
//! | `endpoint` (edge) | [`SoftEndpoint`]: the contract, locking, progress, connect and close |
//! | `transport` (edge) | listeners, streams (TCP, Unix), non-blocking reads and vectored writes |
//! | `loopback` (edge) | the endpoint reaching itself without a socket |
//! | `linger` (edge) | TCP sockets held open after their link until the peer has our bytes |
//! | `optable` (edge) | live operations' buffers by id, completion routing |
//! | `shm` | the shared-memory path's sans-IO parts: segment layout and checks, the byte ring between two processes |
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
mod endpoint;
mod engine;
pub mod epid;
#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
mod job_secret;
mod linger;
mod link_key;
mod loopback;
// The sans-IO core, its matcher and its wire codec are public only with
// the `hooks` feature, for the crate's own tests, fuzz targets and
// benchmarks (hidden from the documentation even then): they are not part
// of the API and change without notice.
#[cfg(feature = "hooks")]
#[doc(hidden)]
pub mod matcher;
#[cfg(not(feature = "hooks"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
mod matcher;
mod optable;
#[cfg(feature = "hooks")]
#[doc(hidden)]
pub mod protocol;
#[cfg(not(feature = "hooks"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
mod protocol;
mod reconnect;
mod session;
pub(crate) mod shm;
mod table_alloc;
mod transport;
mod verify;
#[cfg(feature = "hooks")]
#[doc(hidden)]
pub mod wire;
#[cfg(not(feature = "hooks"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
mod wire;

#[cfg(test)]
mod close_tests;
#[cfg(test)]
mod direct_tests;
#[cfg(test)]
mod shm_tests;
#[cfg(test)]
mod tests;

pub use config::ProtocolConfig;
pub use endpoint::{SoftEndpoint, SoftStats};
pub use engine::{SoftConfig, SoftEngine, SHM_RING_MAX, SHM_RING_MIN};
pub use epid::{SoftEpid, SoftEpidError, MAX_INSTANCE};
pub(crate) use job_secret::{new_nonce, MAC_LEN, NONCE_LEN};
pub use job_secret::{JobSecret, JOB_SECRET_FILE_VAR, JOB_SECRET_VAR, MIN_SECRET_LEN};
pub use protocol::CoreStats;
pub use wire::ENTRY_OVERHEAD;
// The internals' names (see above).
#[cfg(feature = "hooks")]
#[doc(hidden)]
pub use {
    conn::{ConnPhase, Role},
    matcher::TagMatcher,
    protocol::{
        AmToken, ConnError, ConnId, DirectData, Event, OpId, PayloadRef, SendPayloads, SoftCore,
        Violation,
    },
};
// Without `hooks`, only the names the crate's own code reaches this way.
#[cfg(not(feature = "hooks"))]
pub(crate) use {
    conn::{ConnPhase, Role},
    protocol::{DirectData, SoftCore},
};
