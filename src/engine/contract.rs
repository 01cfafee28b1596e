//! The engine contract itself: [`Engine`] opens endpoints, [`EngineEndpoint`]
//! is what every layer above is written against.

use super::{
    AmHandler, AmHandlerId, EngineLimits, Epid, MqCompletion, MqStatus, OpBuffer, PeerAddr,
    TagMatch,
};
use crate::reactor::{CompletionTable, OpKey, ProgressSource};
use crate::{Error, Result};
use std::sync::Arc;
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

/// A post that failed at once. The buffer comes back so nothing is lost.
#[derive(Debug)]
pub struct PostError {
    /// Why the post failed (`Again` when the engine is full: retry after
    /// progress).
    pub error: Error,
    /// The buffer the post was given.
    pub buffer: OpBuffer,
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
    fn irecv(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError>;

    /// Cancels the receive posted as `op` if it has not matched yet: it then
    /// completes with `Canceled` and its buffer. `Ok(false)` when it is too
    /// late (matched, finished) or `op` is a send, which cannot be cancelled.
    fn cancel(&self, op: OpKey) -> Result<bool>;

    /// The status of the first unexpected message matching `tags`, without
    /// receiving it.
    fn iprobe(&self, tags: TagMatch) -> Result<Option<MqStatus>>;

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
}
