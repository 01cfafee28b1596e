//! Dead peers (`ARCHITECTURE.md`, "Deliberately better"): every operation
//! towards a peer that died completes with an `Io` error (`"peer <epid> is
//! gone: <evidence>"`) within `FI_PSM_TIMEOUT`; nothing waits forever. PSM
//! itself does not tell (libpsm2 over shared memory never notices a killed
//! peer), so each domain watches the peers its operations wait for.
//!
//! # Evidence
//! 1. **Hello and process.** On first contact (every connect) the domain
//!    sends the peer a hello; the peer answers with its identity: pid,
//!    process start time, and a host hash (boot id, host name, pid
//!    namespace). A peer on this host has its process looked at in `/proc`
//!    every 2 ms while operations wait for it, so an exit (or a zombie, or
//!    the pid reused) is seen within milliseconds.
//! 2. **Bye.** A closing domain says bye to every peer it greeted or heard
//!    from, so a peer whose endpoint closed while its process lives is
//!    dead too.
//! 3. **Engine errors.** An active message that fails with `Io`,
//!    `TimedOut` or `ConnRefused` (the soft engine's view of a closed
//!    connection), or an MQ send that completes with `Io`.
//! 4. **Silence**, for peers whose process cannot be looked at (another
//!    host, or an identity not known yet). While operations wait for such
//!    a peer it gets a keepalive hello every `FI_PSM_TIMEOUT / 4` it is not
//!    heard from; when the first unanswered one has waited the rest of
//!    `FI_PSM_TIMEOUT`, the peer is dead — at most `FI_PSM_TIMEOUT` after
//!    its last answer. In manual progress such a peer that does not
//!    progress that long cannot answer, and is indistinguishable from a
//!    dead one; on the soft engine a keepalive queues behind the bulk data
//!    of the same connection, so a transfer that keeps it busy that long
//!    looks the same too. A peer on this host is never judged by silence
//!    (its process says more: one that computes without progressing is
//!    alive). `FI_PSM_TIMEOUT=0` turns this rule off.
//!
//! # What dying does
//! The peer is recorded in the domain's [`PeerBook`]; from then on every
//! post towards it fails at once with the same error (the gate, the AM
//! queue, RMA and atomics ask the book). Operations already waiting end:
//! the AM message queue's (`fail_peer`), RMA and atomics (the initiator's
//! `fail`; a long write's MQ send that can never finish is left to the
//! engine), and MQ operations registered in the book — a send's future
//! completes with the error while its buffer stays with the engine until
//! the domain closes (PSM cannot cancel sends); a directed receive is
//! cancelled and comes back with its buffer; CQ routes get error entries,
//! counters error counts. Receives from any source stay posted. Dead is
//! for the domain's lifetime (`fi_av_remove` is a no-op), except on the
//! rails of a multi-rail endpoint: a rail that reconnects to a peer it
//! lost revives it in the rail's book ([`PeerBook::revive`]).
//!
//! # Cost on a live peer
//! A post through the gate: one relaxed load and a thread-local store. An
//! MQ operation registers in the book only once its future has been
//! pending a while (64 polls in manual progress, the first pending poll in
//! auto progress, where the task is about to sleep anyway) or, for a
//! context post, when it did not finish at once. The watch's progress step
//! is a relaxed load per round while idle.
//!
//! # Pieces
//!
//! The watch sits with the protocols (it fails the AM message queue's and
//! the RMA transport's transfers) and below the fabric: the domain
//! (`fabric/domain.rs`) opens it, and the operations and mrail register
//! with its book and post through its gate.
//!
//! | file | what |
//! |---|---|
//! | `identity.rs` | pid, start time, host hash; `/proc` checks |
//! | `wire.rs` | the hello and bye packets |
//! | `core.rs` | `WatchCore`: the rules as a sans-IO state machine |
//! | `book.rs` | `PeerBook`: deaths, and operations waiting for peers |
//! | `gate.rs` | `PeerGate`: the engine endpoint as operations see it |
//! | `watch.rs` | `PeerWatch`: handler, progress, failing operations |

mod book;
mod core;
mod gate;
pub(crate) mod identity;
mod watch;
pub(crate) mod wire;

pub(crate) use book::{Death, Doomed, PeerBook, PeerRef};
pub(crate) use gate::{directed, peer_gone, PeerGate};
pub(crate) use watch::PeerWatch;

/// The evidence of an engine error that says a peer is gone.
pub(crate) fn engine_evidence(what: String) -> core::Evidence {
    core::Evidence::Engine(what)
}
