//! [`MessageEndpoint`]: the message operations (`FI_MSG`, `FI_TAGGED`)
//! every endpoint of psmrail offers, as one trait, so that code can be
//! written once for a psm [`Endpoint`] and an mrail
//! [`MrailEndpoint`](crate::mrail::MrailEndpoint).
//!
//! The methods keep the names, argument order and `(Result, buffer)`
//! outputs of the endpoints' own methods (which they call); only the
//! futures' and posted handles' types differ, as associated types.
//!
//! ```
//! use psmrail::engine::OpBuffer;
//! use psmrail::fabric::FiAddr;
//! use psmrail::ops::MessageEndpoint;
//!
//! /// One tagged round trip, on any endpoint.
//! async fn ping<E: MessageEndpoint>(ep: &E, peer: FiAddr, msg: Vec<u8>) -> psmrail::Result<Vec<u8>> {
//!     let len = msg.len();
//!     let reply = ep.trecv(vec![0u8; len], 2, 0);
//!     let (sent, _) = ep.tsend(peer, 1, msg).await;
//!     sent?;
//!     let (got, buf) = reply.await;
//!     got?;
//!     Ok(buf.into_vec().unwrap())
//! }
//!
//! /// The other side: answers one ping.
//! async fn pong<E: MessageEndpoint>(ep: &E, peer: FiAddr, len: usize) -> psmrail::Result<()> {
//!     let (got, buf) = ep.trecv(vec![0u8; len], 1, 0).await;
//!     got?;
//!     let (sent, _) = ep.tsend(peer, 2, buf).await;
//!     sent.map(|_| ())
//! }
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
//! # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
//! #     .delay(std::time::Duration::ZERO).build().unwrap();
//! # let hints = Hints::new().engine(EngineChoice::Soft).config(config);
//! # let info = getinfo(Some(&hints))?.remove(0);
//! # let domain = Fabric::open(&info)?.domain(&info)?;
//! # let av = domain.av(AvAttr::new())?;
//! # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! # let me = av.insert(&[ep.getname()]).remove(0)?;
//! // A psm endpoint talking to itself; an mrail endpoint works the same.
//! let (echo, back) = futures::executor::block_on(futures::future::join(
//!     pong(&ep, me, 4),
//!     ping(&ep, me, b"ping".to_vec()),
//! ));
//! echo?;
//! assert_eq!(back?, b"ping");
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::{OpOutput, Posted, Received, RecvOp, SendOp, Sent};
use crate::engine::{OpBuffer, PostError};
use crate::fabric::{Caps, Endpoint, EndpointStats, FiAddr};
use crate::Result;
use std::future::Future;

/// The message operations of an endpoint: sends, receives and injects,
/// tagged and untagged, awaited as futures or posted with a context for a
/// completion queue. See the module docs for an example generic over the
/// two providers.
pub trait MessageEndpoint {
    /// What a send returns: resolves to the result and the buffer.
    type SendFuture<'a>: Future<Output = OpOutput<Sent>> + 'a
    where
        Self: 'a;
    /// What a receive returns: resolves to the result and the buffer.
    type RecvFuture<'a>: Future<Output = OpOutput<Received>> + 'a
    where
        Self: 'a;
    /// The handle of an operation posted with a context.
    type Posted;

    /// The endpoint's capabilities.
    fn caps(&self) -> Caps;

    /// The largest inject (`inject_size`).
    fn inject_size(&self) -> usize;

    /// `fi_send`: sends `buf` to `dest`.
    fn send(&self, dest: FiAddr, buf: impl Into<OpBuffer>) -> Self::SendFuture<'_>;

    /// `fi_recv`: receives the next untagged message from any source.
    fn recv(&self, buf: impl Into<OpBuffer>) -> Self::RecvFuture<'_>;

    /// `fi_recv` with a source (`FI_DIRECTED_RECV`).
    fn recv_from(&self, src: FiAddr, buf: impl Into<OpBuffer>) -> Self::RecvFuture<'_>;

    /// `fi_tsend`: sends `buf` with `tag` to `dest`.
    fn tsend(&self, dest: FiAddr, tag: u64, buf: impl Into<OpBuffer>) -> Self::SendFuture<'_>;

    /// `fi_trecv`: receives the first message whose tag matches `tag` in the
    /// bits not set in `ignore`.
    fn trecv(&self, buf: impl Into<OpBuffer>, tag: u64, ignore: u64) -> Self::RecvFuture<'_>;

    /// `fi_inject`: sends a small message; `data` may be reused at once.
    fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()>;

    /// `fi_tinject`: a small tagged message; `data` may be reused at once.
    fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()>;

    /// `fi_send` with a context: the completion goes to the transmit CQ.
    fn post_send(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<Self::Posted, PostError>;

    /// `fi_recv` with a context: the completion goes to the receive CQ.
    fn post_recv(
        &self,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<Self::Posted, PostError>;

    /// `fi_tsend` with a context.
    fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<Self::Posted, PostError>;

    /// `fi_trecv` with a context.
    fn post_trecv(
        &self,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> std::result::Result<Self::Posted, PostError>;

    /// `fi_cancel` of a receive posted with a context; `Ok(false)` when it
    /// is too late.
    fn cancel(&self, posted: &Self::Posted) -> Result<bool>;

    /// What the endpoint's operations did so far, and its unexpected queue
    /// ([`Endpoint::stats`], or [`MrailStats::endpoint`](crate::mrail::MrailStats::endpoint)).
    ///
    /// ```
    /// use psmrail::ops::MessageEndpoint;
    ///
    /// /// Bytes sent per message, on any endpoint.
    /// fn mean_sent<E: MessageEndpoint>(ep: &E) -> Option<u64> {
    ///     let s = ep.stats();
    ///     s.bytes_sent.checked_div(s.msgs_sent)
    /// }
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// assert_eq!(mean_sent(&ep), None);
    /// ep.tinject(me, 1, &[0u8; 8])?;
    /// ep.tinject(me, 1, &[0u8; 24])?;
    /// assert_eq!(mean_sent(&ep), Some(16));
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    fn stats(&self) -> EndpointStats;
}

impl MessageEndpoint for Endpoint {
    type SendFuture<'a> = SendOp<'a>;
    type RecvFuture<'a> = RecvOp<'a>;
    type Posted = Posted;

    fn caps(&self) -> Caps {
        Endpoint::caps(self)
    }

    fn inject_size(&self) -> usize {
        self.core.inject_size()
    }

    fn send(&self, dest: FiAddr, buf: impl Into<OpBuffer>) -> SendOp<'_> {
        Endpoint::send(self, dest, buf)
    }

    fn recv(&self, buf: impl Into<OpBuffer>) -> RecvOp<'_> {
        Endpoint::recv(self, buf)
    }

    fn recv_from(&self, src: FiAddr, buf: impl Into<OpBuffer>) -> RecvOp<'_> {
        Endpoint::recv_from(self, src, buf)
    }

    fn tsend(&self, dest: FiAddr, tag: u64, buf: impl Into<OpBuffer>) -> SendOp<'_> {
        Endpoint::tsend(self, dest, tag, buf)
    }

    fn trecv(&self, buf: impl Into<OpBuffer>, tag: u64, ignore: u64) -> RecvOp<'_> {
        Endpoint::trecv(self, buf, tag, ignore)
    }

    fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()> {
        Endpoint::inject(self, dest, data)
    }

    fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()> {
        Endpoint::tinject(self, dest, tag, data)
    }

    fn post_send(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<Posted, PostError> {
        Endpoint::post_send(self, dest, buf, context)
    }

    fn post_recv(
        &self,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<Posted, PostError> {
        Endpoint::post_recv(self, buf, context)
    }

    fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<Posted, PostError> {
        Endpoint::post_tsend(self, dest, tag, buf, context)
    }

    fn post_trecv(
        &self,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> std::result::Result<Posted, PostError> {
        Endpoint::post_trecv(self, buf, tag, ignore, context)
    }

    fn cancel(&self, posted: &Posted) -> Result<bool> {
        Endpoint::cancel(self, posted)
    }

    fn stats(&self) -> EndpointStats {
        Endpoint::stats(self)
    }
}
