//! [`AmMsgQueue`]: the protocol core ([`Core`]) over an engine endpoint.
//!
//! The queue registers one AM handler and feeds it everything that arrives;
//! it sends the core's requests from its progress step and, for latency,
//! right after a post. Its parts and their locks:
//!
//! * `Shared` (an `Arc` held by the handler *and* the queue): the core
//!   behind a mutex, the engine's completion table and the handler id. It
//!   holds no engine, so the engine holding the handler makes no cycle.
//! * The queue: the engine, the shared part, and the *pump* lock, taken
//!   with `try_lock` by whoever sends the core's requests, so one thread at
//!   a time does it and requests leave in the core's order.
//!
//! The core's lock is never held across an engine call. That matters: the
//! engine runs handlers inside its own calls (`am_request` included, on
//! the native engine) with its lock held, and a handler takes the core's
//! lock. So the order is always engine lock, then core lock. Handlers only
//! update the core, reply through [`AmReply`] and complete operations;
//! requests (`Go`, `Done` for a late match, and all `Data`) are sent from
//! progress or from a post, never from a handler. Completions are handed
//! to the table outside the core's lock (a waker may run foreign code).
//!
//! `Again` from `am_request` (the soft engine out of AM credit) stops the
//! pump; the request stays first in line and the next progress step tries
//! again.

use super::protocol::{Core, CoreConfig, CoreStats, Incoming};
use super::wire::NARGS;
use crate::engine::{
    AmHandler, AmHandlerId, AmMessage, AmReply, EngineEndpoint, MqCompletion, OpBuffer, PeerAddr,
    PostError,
};
use crate::proto::peer_watch::PeerBook;
use crate::reactor::{CompletionTable, OpKey, Progress, ProgressSource};
use crate::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};

/// Most requests one progress step sends (a 1 MiB message is 130 of
/// 8128 bytes).
const PROGRESS_BUDGET: usize = 64;
/// Most requests a post sends before returning (the rest go from progress).
const POST_BUDGET: usize = 4;

/// What the handler and the queue share.
struct Shared {
    core: Mutex<Core>,
    completions: Arc<CompletionTable<MqCompletion>>,
    /// Our handler id, known once registration returned.
    id: OnceLock<AmHandlerId>,
    /// Set by every access that may give the pump work (posts, handlers,
    /// cancels); the progress step skips the locks while it is clear, so
    /// a domain that never uses AM messages pays one atomic load per round.
    dirty: AtomicBool,
}

impl Shared {
    /// The core, for a change that may give the pump work.
    fn core(&self) -> MutexGuard<'_, Core> {
        self.dirty.store(true, Ordering::Release);
        self.core_quiet()
    }

    /// The core, for the pump itself.
    fn core_quiet(&self) -> MutexGuard<'_, Core> {
        // The core never panics by design; if a bug made it, its state is
        // still consistent between calls, so go on.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the core's completions to the table; whether there were any.
    fn deliver(&self) -> bool {
        let mut any = false;
        loop {
            let next = self.core_quiet().pop_completion();
            let Some((key, completion)) = next else {
                return any;
            };
            any = true;
            if let Err(c) = self.completions.complete(key, completion) {
                tracing::debug!(?key, status = ?c.status, "AM message: completion for a dead key");
            }
        }
    }
}

/// The registered handler: feeds the core, replies, completes.
struct Handler(Arc<Shared>);

impl AmHandler for Handler {
    fn on_request(&self, msg: AmMessage<'_>, reply: &mut dyn AmReply) {
        let Some(&id) = self.0.id.get() else {
            tracing::warn!(source = ?msg.source, "AM message: request before registration finished");
            return;
        };
        let answer = self
            .0
            .core()
            .handle(Incoming::Request, msg.source, msg.args, msg.payload);
        if let Some(args) = answer {
            if let Err(e) = reply.reply(id, args.as_slice(), &[]) {
                tracing::debug!(source = ?msg.source, "AM message: reply failed ({e}); sending it as a request");
                self.0.core().defer_reply(msg.source, args);
            }
        }
        self.0.deliver();
    }

    fn on_reply(&self, msg: AmMessage<'_>) {
        self.0
            .core()
            .handle(Incoming::Reply, msg.source, msg.args, msg.payload);
        self.0.deliver();
    }
}

/// Untagged messages over active messages (`FI_PSM_AM_MSG=1`), for one
/// domain. See the [module docs](super) for the protocol and its limits.
///
/// Operations complete into the engine's completion table, as MQ operations
/// do, so the layer above waits for both alike: sends with
/// `msg_len = nbytes = length`, receives with the sender's length, the
/// bytes placed and the source; `Trunc` when the message was longer than
/// the buffer (the send still succeeds); `Canceled` for a cancelled
/// receive; `Io` (or the engine's error) when the peer failed.
pub(crate) struct AmMsgQueue {
    engine: Arc<dyn EngineEndpoint>,
    shared: Arc<Shared>,
    id: AmHandlerId,
    /// Held by whoever sends the core's requests.
    pump: Mutex<()>,
    /// The domain's dead peers (none for a queue outside a domain): posts
    /// towards them fail at once.
    book: OnceLock<Arc<PeerBook>>,
}

impl AmMsgQueue {
    /// Registers its AM handler on `engine` (the domain calls this first
    /// thing after open, so every process gets the same handler id).
    /// `NoSys` if the engine carries fewer than 4 AM arguments or no AM
    /// payload.
    pub(crate) fn register(engine: Arc<dyn EngineEndpoint>) -> Result<Arc<AmMsgQueue>> {
        let limits = engine.limits();
        if limits.max_am_args < NARGS || limits.max_am_request == 0 {
            return Err(Error::new(
                ErrorKind::NoSys,
                format!(
                    "AM messages (FI_PSM_AM_MSG) need {NARGS} AM arguments and a payload; the {} engine carries {} arguments and {} bytes",
                    engine.kind(),
                    limits.max_am_args,
                    limits.max_am_request
                ),
            ));
        }
        let config = CoreConfig {
            chunk: limits.max_am_request,
            max_message: limits.max_message,
            salt: crate::engine::random::random_u64() as u32,
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(Core::new(config)),
            completions: engine.completions().clone(),
            id: OnceLock::new(),
            dirty: AtomicBool::new(true),
        });
        let id = engine.am_register(Arc::new(Handler(shared.clone())))?;
        // Set once, here; the handler waits for it.
        let _ = shared.id.set(id);
        Ok(Arc::new(AmMsgQueue {
            engine,
            shared,
            id,
            pump: Mutex::new(()),
            book: OnceLock::new(),
        }))
    }

    /// Makes posts towards peers `book` knows dead fail at once (the
    /// domain calls this once, after registration).
    pub(crate) fn set_book(&self, book: Arc<PeerBook>) {
        let _ = self.book.set(book);
    }

    /// `Io` when `peer` is known dead.
    fn refuse(&self, peer: PeerAddr, what: &str) -> Result<()> {
        match self.book.get() {
            Some(b) => b.refuse(peer, what),
            None => Ok(()),
        }
    }

    /// Appends the peers transfers wait for (sends, receives getting data,
    /// directed posted receives).
    pub(crate) fn outstanding_peers(&self, out: &mut Vec<PeerAddr>) {
        self.shared.core_quiet().outstanding_peers(out);
    }

    /// Sends `buffer` to `peer`; completes into `op` once the receiver has
    /// every byte it accepted. `MsgSize` beyond the engine's largest message.
    pub(crate) fn send(
        &self,
        peer: PeerAddr,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        if let Err(error) = self.refuse(peer, "send") {
            return Err(PostError { error, buffer });
        }
        self.shared.core().post_send(peer, buffer, op)?;
        self.pump(false, POST_BUDGET);
        Ok(())
    }

    /// Receives the next message (from `from` only, if given) into
    /// `buffer`; completes into `op`. `Inval` for a read-only buffer.
    pub(crate) fn recv(
        &self,
        from: Option<PeerAddr>,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        if let Some(Err(error)) = from.map(|p| self.refuse(p, "recv")) {
            return Err(PostError { error, buffer });
        }
        self.shared.core().post_recv(from, buffer, op)?;
        self.pump(false, POST_BUDGET);
        Ok(())
    }

    /// Cancels an unmatched posted receive: it completes with `Canceled`
    /// and its buffer. `false` if it matched already, finished, or `op` is
    /// a send.
    pub(crate) fn cancel(&self, op: OpKey) -> bool {
        let cancelled = self.shared.core().cancel(op);
        if cancelled {
            self.shared.deliver();
        }
        cancelled
    }

    /// Fails every transfer with `peer` with `kind`, directed receives
    /// included (for a layer that learned the peer is gone; requests to it
    /// that fail do this too).
    pub(crate) fn fail_peer(&self, peer: PeerAddr, kind: ErrorKind) {
        self.shared.core().fail_peer(peer, kind);
        self.shared.deliver();
    }

    /// What the core holds.
    pub(crate) fn stats(&self) -> CoreStats {
        self.shared.core().stats()
    }

    /// The id its handler got (the same on every process).
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn handler_id(&self) -> AmHandlerId {
        self.id
    }

    /// Message bytes per packet.
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn chunk(&self) -> usize {
        self.shared.core().chunk()
    }

    /// Sends up to `budget` of the core's requests (first chunks and
    /// receiver requests; stream chunks too if `data`), then delivers
    /// completions. Whether anything moved.
    fn pump(&self, data: bool, budget: usize) -> bool {
        let mut moved = false;
        let guard = match self.pump.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            // Another thread is sending; it sends ours too.
            Err(TryLockError::WouldBlock) => None,
        };
        if guard.is_none() {
            // Whatever the other sender leaves (it may not send stream
            // chunks) is ours next round.
            self.shared.dirty.store(true, Ordering::Release);
        } else {
            for _ in 0..budget {
                let next = self.shared.core_quiet().poll_transmit(data);
                let Some(t) = next else {
                    break;
                };
                let result = self
                    .engine
                    .am_request(t.peer(), self.id, t.args(), t.payload());
                let again = matches!(&result, Err(e) if e.kind() == ErrorKind::Again);
                self.shared.core_quiet().transmitted(t, result);
                if again {
                    // Retry next round.
                    self.shared.dirty.store(true, Ordering::Release);
                    break;
                }
                moved = true;
            }
        }
        drop(guard);
        self.shared.deliver() | moved
    }
}

impl ProgressSource for AmMsgQueue {
    /// Sends queued requests (stream chunks included) within a budget and
    /// delivers completions. Never blocks: a pump running elsewhere is
    /// skipped.
    fn progress(&self) -> Progress {
        if !self.shared.dirty.swap(false, Ordering::AcqRel) {
            return Progress::Idle;
        }
        let moved = self.pump(true, PROGRESS_BUDGET);
        if moved {
            // Something moved: look again next round (the budget may have
            // left work).
            self.shared.dirty.store(true, Ordering::Release);
        }
        moved.into()
    }

    /// Only once a request was queued or a completion came in.
    fn wants_progress(&self) -> bool {
        self.shared.dirty.load(Ordering::Relaxed)
    }
}
