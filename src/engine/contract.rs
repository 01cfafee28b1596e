//! The engine contract itself: [`Engine`] opens endpoints, [`EngineEndpoint`]
//! is what every layer above is written against.

use super::{
    AmHandler, AmHandlerId, EngineLimits, Epid, MqCompletion, MqStatus, OpBuffer, PeerAddr,
    QueueStats, TagMatch,
};
use crate::reactor::{CompletionTable, OpKey, ProgressSource, Reactor};
use crate::{Error, ErrorKind, Result};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Which engine serves an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Real PSM through `psm-sys` (`libpsm_infinipath.so.1`).
    Native,
    /// psmrail's pure-Rust engine (the process itself and TCP).
    Soft,
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Native => "native",
            EngineKind::Soft => "soft",
        })
    }
}

/// What an endpoint is opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointOptions {
    /// The job key (`FI_PSM_UUID`): only endpoints of the same job connect.
    pub uuid: [u8; 16],
    /// Device unit, `None` for any (PSM's `unit = -1`).
    pub unit: Option<u32>,
    /// Device port, `None` for any (PSM's `port = 0`).
    pub port: Option<u32>,
    /// How long a graceful close may take (`FI_PSM_TIMEOUT`) before it is
    /// forced; zero forces at once.
    pub close_timeout: Duration,
}

/// How a send completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SendMode {
    /// Complete when the buffer may be reused (PSM's default).
    #[default]
    Standard,
    /// Complete only once the receiver matched the message
    /// (`PSM_MQ_FLAG_SENDSYNC`).
    Synchronous,
}

/// An error that hands the operation's buffer back: a post that failed
/// at once, or an operation that completed with an error (see
/// [`OpOutputExt::into_result`](../ops/trait.OpOutputExt.html#tymethod.into_result)).
/// Nothing is lost: take the buffer back out, or let `?` turn it into an
/// [`Error`] (the buffer is then dropped).
///
/// ```
/// use psmrail::engine::{OpBuffer, PostError};
/// use psmrail::{Error, ErrorKind};
///
/// fn post() -> Result<(), PostError> {
///     Err(PostError {
///         error: Error::new(ErrorKind::Again, "the engine is full"),
///         buffer: OpBuffer::from(vec![7u8; 3]),
///     })
/// }
/// fn caller() -> psmrail::Result<()> {
///     post()?; // PostError -> Error
///     Ok(())
/// }
/// let e = post().unwrap_err();
/// assert_eq!(e.to_string(), "FI_EAGAIN: the engine is full");
/// assert_eq!(e.buffer.as_slice(), &[7, 7, 7]);
/// assert_eq!(caller().unwrap_err().kind(), ErrorKind::Again);
/// ```
#[derive(Debug)]
pub struct PostError {
    /// Why the post failed (`Again` when the engine is full: retry after
    /// progress).
    pub error: Error,
    /// The buffer the post was given.
    pub buffer: OpBuffer,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        e.error
    }
}

/// Runs `post` under a new key of `table`: the key back, or the post's
/// error with the key's slot freed again (the engine never saw the key).
#[inline(always)]
pub(crate) fn with_new_key(
    table: &CompletionTable<MqCompletion>,
    post: impl FnOnce(OpKey) -> std::result::Result<(), PostError>,
) -> std::result::Result<OpKey, PostError> {
    let op = table.insert();
    match post(op) {
        Ok(()) => Ok(op),
        Err(e) => {
            drop(table.retire(op));
            Err(e)
        }
    }
}

/// Opens endpoints of one engine.
pub trait Engine: Send + Sync + 'static {
    /// The endpoint type.
    type Endpoint: EngineEndpoint;

    /// Which engine this is.
    fn kind(&self) -> EngineKind;

    /// Opens an endpoint. Register it with a reactor (it is a
    /// [`ProgressSource`]) to make it progress.
    fn open(&self, options: &EndpointOptions) -> Result<Arc<Self::Endpoint>>;
}

/// One open endpoint: PSM's `psm_ep_t` with its MQ and AM handlers.
///
/// Every method is non-blocking except [`connect`](Self::connect) and
/// [`close`](Self::close), which wait at most the timeout they are given.
/// Implementations serialize their calls into the engine internally, so the
/// endpoint may be shared between threads.
pub trait EngineEndpoint: ProgressSource {
    /// Which engine serves it.
    fn kind(&self) -> EngineKind;

    /// Its own endpoint id.
    fn epid(&self) -> Epid;

    /// What it can carry.
    fn limits(&self) -> EngineLimits;

    /// The table MQ completions are routed to; post with keys from it.
    fn completions(&self) -> &Arc<CompletionTable<MqCompletion>>;

    /// Connects to each epid (itself included), waiting at most `timeout`
    /// in all; one result per epid, in order. Already-connected peers
    /// succeed at once. Errors: `TimedOut` for a peer that did not answer,
    /// `ConnRefused` for another job (UUID) or protocol version.
    fn connect(&self, epids: &[Epid], timeout: Duration) -> Vec<Result<PeerAddr>>;

    /// The epid of a connected peer.
    fn peer_epid(&self, peer: PeerAddr) -> Option<Epid>;

    /// A count that grows whenever anything arrives from `peer`; 0 when
    /// the engine does not count (the default). The peer watch takes a
    /// change as proof of life, so a peer whose keepalive answers queue
    /// behind a long transfer is not declared dead.
    fn peer_activity(&self, peer: PeerAddr) -> u64 {
        let _ = peer;
        0
    }

    /// Posts a send of `buffer` with `tag` to `peer`; completes into `op`.
    fn isend(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError>;

    /// Posts a receive into `buffer` for the first message matching `tags`
    /// (in posting order); completes into `op`.
    ///
    /// Every message that arrives after this returns meets the receive, in
    /// posting order with the others; an engine may still hand it to its
    /// transport later, before it next lets the transport match anything
    /// (the native engine does so at its next call into PSM, so a send
    /// right after the receive goes out first).
    fn irecv(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError>;

    /// [`isend`](Self::isend) under a key of its own from
    /// [`completions`](Self::completions); the key back. When the post
    /// fails, no key is left behind.
    ///
    /// Default: [`CompletionTable::insert`], then `isend` (the slot is
    /// retired again if that fails). The native engine does the same
    /// without checking the key it has just taken.
    fn isend_keyed(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
    ) -> std::result::Result<OpKey, PostError> {
        with_new_key(self.completions(), |op| {
            self.isend(peer, tag, mode, buffer, op)
        })
    }

    /// [`irecv`](Self::irecv) under a key of its own, as
    /// [`isend_keyed`](Self::isend_keyed).
    fn irecv_keyed(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
    ) -> std::result::Result<OpKey, PostError> {
        with_new_key(self.completions(), |op| self.irecv(tags, buffer, op))
    }

    /// Cancels the receive posted as `op` if it has not matched yet: it then
    /// completes with `Canceled` and its buffer. `Ok(false)` when it is too
    /// late (matched, finished) or `op` is a send, which cannot be cancelled.
    fn cancel(&self, op: OpKey) -> Result<bool>;

    /// The status of the first unexpected message matching `tags`, without
    /// receiving it.
    fn iprobe(&self, tags: TagMatch) -> Result<Option<MqStatus>>;

    /// The unexpected queue's depth and history, as far as the engine can
    /// tell (for statistics; it may take the endpoint's lock). Default:
    /// nothing known.
    fn queue_stats(&self) -> QueueStats {
        QueueStats::default()
    }

    /// Hands every eager message with `tag` to `hook` as it arrives,
    /// instead of matching it with receives (`None`: back to matching).
    /// `false` when the engine has no hooks (the default; the native
    /// engine, whose PSM matches every message): then the caller keeps
    /// receives posted for the tag. Messages of the tag that come by
    /// rendezvous always match receives. See [`TagHook`](super::TagHook).
    fn set_tag_hook(&self, tag: u64, hook: Option<Arc<dyn super::TagHook>>) -> bool {
        let _ = (tag, hook);
        false
    }

    /// Registers an AM handler; ids are given in registration order.
    fn am_register(&self, handler: Arc<dyn AmHandler>) -> Result<AmHandlerId>;

    /// Sends an AM request (arguments and payload are copied). `Again` when
    /// the engine cannot take it now.
    fn am_request(
        &self,
        peer: PeerAddr,
        handler: AmHandlerId,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()>;

    /// Closes the endpoint: gracefully within `timeout`, forced after.
    /// Pending operations complete with `Canceled` or `Io`.
    fn close(&self, timeout: Duration) -> Result<()>;

    /// The largest `data` [`inject`](Self::inject) accepts. Default: 64
    /// bytes, the C provider's `inject_size` (`PSMX_INJECT_SIZE`).
    fn max_inject(&self) -> usize {
        64
    }

    /// Sends a copy of `data` with `tag` to `peer` and reports no
    /// completion (`fi_inject`): `data` may be reused as soon as this
    /// returns. For small messages (at most [`max_inject`](Self::max_inject)
    /// bytes, else `MsgSize`); ordered with the endpoint's other sends.
    /// `Again` when the engine cannot take it now.
    ///
    /// Errors are those of posting: a failure after the message left (the
    /// peer died) is not reported, as with the C provider's inject.
    ///
    /// Default: the copy is posted with [`isend`](Self::isend) under a key
    /// that is abandoned at once, so the table drops the copy when the
    /// engine completes the send (one allocation per call). The native
    /// engine instead sends with PSM's blocking `psm_mq_send`, which for
    /// such sizes returns once PSM has copied the bytes: no request, key
    /// or completion at all.
    fn inject(&self, peer: PeerAddr, tag: u64, data: &[u8]) -> Result<()> {
        let max = self.max_inject();
        if data.len() > max {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "inject of {} bytes: at most {max} (send larger messages with isend)",
                    data.len()
                ),
            ));
        }
        let table = self.completions();
        let op = table.insert();
        let posted = self.isend(
            peer,
            tag,
            SendMode::Standard,
            OpBuffer::from(data.to_vec()),
            op,
        );
        match posted {
            Ok(()) => {
                // Done already (dropped here) or dropped by the table when
                // the engine completes it.
                drop(table.abandon(op));
                Ok(())
            }
            Err(e) => {
                // Never posted: free the slot (abandoning would keep it for
                // a completion that never comes).
                drop(table.retire(op));
                Err(e.error)
            }
        }
    }

    /// The manual-mode fast path of `op`'s own future: one progress step
    /// aimed at `op`, then its completion if it finished (the key is then
    /// spent, as after [`CompletionTable::try_take`]); `None` while it runs.
    ///
    /// Call it only from the future that owns `op` (nobody else may take
    /// its completion), and only with a manual reactor: in auto mode the
    /// progress thread harvests and the future waits in the table.
    /// [`poll_completion`](Self::poll_completion) makes that choice.
    ///
    /// Default: one [`progress`](ProgressSource::progress) step of this
    /// endpoint, then [`CompletionTable::try_take`]. The native engine
    /// tests `op`'s own PSM request (`psm_mq_test`, with a `psm_poll` when
    /// it is not done) and hands its result over directly, without routing
    /// it through `psm_mq_ipeek` and the table; other finished requests
    /// wait for the next progress step.
    fn poll_op(&self, op: OpKey) -> Option<MqCompletion> {
        self.progress();
        self.completions().try_take(op)
    }

    /// Polls the completion of `op` (posted on this endpoint) for its
    /// future, the fastest way `reactor`'s mode allows: in manual mode
    /// [`poll_op`](Self::poll_op), with a full progress round of `reactor`
    /// every so often (so its other sources still move while this future
    /// spins); in auto mode [`CompletionTable::poll_take`]. Built on
    /// [`Reactor::poll_completion_with`].
    ///
    /// Only for operations this endpoint completes (its `isend`/`irecv`):
    /// a key of the same table that another source completes (an AM-based
    /// queue, say) would only be seen on those occasional full rounds; wait
    /// for such keys with [`Reactor::poll_completion`].
    ///
    /// # Panics
    /// As [`Reactor::poll_completion`] (a key that is not live).
    #[inline]
    fn poll_completion(
        &self,
        reactor: &Reactor,
        op: OpKey,
        cx: &mut Context<'_>,
    ) -> Poll<MqCompletion> {
        reactor.poll_completion_with(self.completions(), op, cx, || self.poll_op(op))
    }
}
