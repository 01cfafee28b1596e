//! Untagged messages over active messages: the psm provider's
//! `FI_PSM_AM_MSG=1` path (`fi_psm.7`: "the non-tagged message queue can be
//! implemented over Active Message"; C: `prov/psm/src/psmx_msg2.c`).
//!
//! By default untagged messages ride on the tag-matching MQ (one reserved
//! tag bit). With `FI_PSM_AM_MSG=1` the domain creates one [`AmMsgQueue`]
//! instead, right after opening its engine endpoint, and the msg
//! operations post to it. Its completions go to the same table as MQ
//! operations, so the futures above do not care which path carried them.
//!
//! # Pieces
//!
//! | file | what |
//! |---|---|
//! | `wire.rs` | the four packets (`First`, `Go`, `Data`, `Done`) in AM arguments |
//! | `ids.rs` | request ids with generations: a stale or made-up id names nothing |
//! | `protocol.rs` | `Core`: the protocol as a pure state machine (the sans-IO core) |
//! | `queue.rs` | [`AmMsgQueue`]: the core over an [`EngineEndpoint`](crate::engine::EngineEndpoint), its handler, progress |
//! | `hook.rs` | `AmMsgHook`: access for tests and the benchmark, not API |
//!
//! # Semantics
//! * A message is sent as a first chunk; the rest streams once the receiver
//!   matched it and said how much it takes (`protocol.rs` has the steps).
//!   A send completes when the receiver holds every byte it accepted.
//! * Matching: posted receives in posting order, first match wins; a
//!   directed receive (`from`) only matches its peer; unexpected messages
//!   match in arrival order. A peer's messages match in the order it sent
//!   them (the engines deliver one peer's AM requests in order).
//! * Truncation: the receive completes with `Trunc`, the sender's length
//!   and the bytes placed; the sender completes successfully and never
//!   sends the bytes past the receive buffer. Both C bugs (`psmx_msg2.c`: the
//!   first packet and the continuation copied past the buffer) are
//!   impossible by construction.
//! * No `FI_MULTI_RECV` on this path (C's AM path ignores it too), no tags,
//!   one iov.
//!
//! # Limits
//! * **Memory.** An unexpected message holds only its first chunk (at most
//!   the engine's `max_am_request` bytes, 8128 here); the rest waits in the
//!   sender's buffer until a receive matches. The number of unexpected
//!   messages is not bounded here (as for the MQ path, each costs one
//!   chunk).
//! * **Both sides connected.** A receiver that matches a long message late
//!   sends `Go` as a request, so it must have connected to the sender
//!   (the address vector connects every inserted address, as the C
//!   provider's `fi_av_insert` did).
//! * **Dead peers.** When a request to a peer fails with `Io`, `TimedOut`
//!   or `ConnRefused`, every transfer with that peer fails with that error
//!   (its sends, the receives getting data from it, the receives posted
//!   for it alone) and its unexpected messages are dropped;
//!   [`AmMsgQueue::fail_peer`] does the same for the domain's peer watch
//!   (`proto/peer_watch`), which also sees peers die silently, and the
//!   queue refuses posts towards peers its book knows dead.
//! * **Engine.** At least 4 AM arguments (both engines carry 10; PSM
//!   guarantees 2, so a minimal PSM gets `NoSys` at registration).

#[cfg(any(test, feature = "hooks"))]
mod hook;
mod ids;
mod protocol;
mod queue;
pub(crate) mod wire;

#[cfg(test)]
mod model_tests;

#[doc(hidden)]
#[cfg(any(test, feature = "hooks"))]
pub use hook::{AmMsgCounts, AmMsgHook};
pub(crate) use queue::AmMsgQueue;
