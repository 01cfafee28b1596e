//! [`DynEndpoint`]: the awaited message operations of
//! [`MessageEndpoint`] as an object-safe trait, for code that chooses its
//! provider at run time (a command-line flag picking psm or mrail, a
//! table of endpoints of both kinds) rather than at compile time.
//!
//! `MessageEndpoint` names each endpoint's own future types, so it cannot
//! be a trait object; `DynEndpoint` boxes the futures instead, at the cost
//! of one allocation per operation. Every `MessageEndpoint` whose futures
//! are `Send` is a `DynEndpoint`.
//!
//! As with the endpoints' own methods, an operation is posted when the
//! method is called, not when its future is first polled (so receives
//! posted in a row match in that order; an `async fn` in a trait, boxed
//! or not, would post lazily). Cancel safety is the wrapped operation's:
//! dropping the boxed future drops the operation's future, and the
//! endpoint keeps (then frees) its buffer as it does for any dropped
//! operation.
//!
//! ```
//! use psmrail::fabric::FiAddr;
//! use psmrail::ops::DynEndpoint;
//!
//! /// One tagged round trip over whichever provider `ep` is.
//! async fn ping(ep: &dyn DynEndpoint, peer: FiAddr) -> psmrail::Result<Vec<u8>> {
//!     let reply = ep.trecv(vec![0u8; 4].into(), 2, 0);
//!     let (sent, _) = ep.tsend(peer, 2, b"ping".to_vec().into()).await;
//!     sent?;
//!     let (got, buf) = reply.await;
//!     got?;
//!     Ok(buf.into_vec().unwrap())
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
//! // The provider is chosen at run time: a psm endpoint here (talking to
//! // itself); an MrailEndpoint boxes the same way.
//! let endpoints: Vec<Box<dyn DynEndpoint>> = vec![Box::new(ep)];
//! for ep in &endpoints {
//!     assert_eq!(futures::executor::block_on(ping(ep.as_ref(), me))?, b"ping");
//!     assert_eq!(ep.stats().msgs_received, 1);
//! }
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::{MessageEndpoint, OpOutput, Received, Sent};
use crate::engine::OpBuffer;
use crate::fabric::{Caps, EndpointStats, FiAddr};
use crate::Result;
use futures::future::BoxFuture;

/// The awaited message operations of an endpoint, object-safe: the
/// methods, argument order and `(Result, buffer)` outputs of
/// [`MessageEndpoint`], with boxed futures. See the module docs.
pub trait DynEndpoint: Send + Sync {
    /// The endpoint's capabilities.
    fn caps(&self) -> Caps;
    /// The largest inject, in bytes.
    fn inject_size(&self) -> usize;
    /// [`MessageEndpoint::send`].
    fn send(&self, dest: FiAddr, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Sent>>;
    /// [`MessageEndpoint::recv`].
    fn recv(&self, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Received>>;
    /// [`MessageEndpoint::recv_from`].
    fn recv_from(&self, src: FiAddr, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Received>>;
    /// [`MessageEndpoint::tsend`].
    fn tsend(&self, dest: FiAddr, tag: u64, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Sent>>;
    /// [`MessageEndpoint::trecv`].
    fn trecv(&self, buf: OpBuffer, tag: u64, ignore: u64) -> BoxFuture<'_, OpOutput<Received>>;
    /// [`MessageEndpoint::inject`].
    fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()>;
    /// [`MessageEndpoint::tinject`].
    fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()>;
    /// [`MessageEndpoint::stats`].
    fn stats(&self) -> EndpointStats;
}

impl<E> DynEndpoint for E
where
    E: MessageEndpoint + Send + Sync,
    for<'a> E::SendFuture<'a>: Send,
    for<'a> E::RecvFuture<'a>: Send,
{
    fn caps(&self) -> Caps {
        MessageEndpoint::caps(self)
    }

    fn inject_size(&self) -> usize {
        MessageEndpoint::inject_size(self)
    }

    fn send(&self, dest: FiAddr, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Sent>> {
        Box::pin(MessageEndpoint::send(self, dest, buf))
    }

    fn recv(&self, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Received>> {
        Box::pin(MessageEndpoint::recv(self, buf))
    }

    fn recv_from(&self, src: FiAddr, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Received>> {
        Box::pin(MessageEndpoint::recv_from(self, src, buf))
    }

    fn tsend(&self, dest: FiAddr, tag: u64, buf: OpBuffer) -> BoxFuture<'_, OpOutput<Sent>> {
        Box::pin(MessageEndpoint::tsend(self, dest, tag, buf))
    }

    fn trecv(&self, buf: OpBuffer, tag: u64, ignore: u64) -> BoxFuture<'_, OpOutput<Received>> {
        Box::pin(MessageEndpoint::trecv(self, buf, tag, ignore))
    }

    fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()> {
        MessageEndpoint::inject(self, dest, data)
    }

    fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()> {
        MessageEndpoint::tinject(self, dest, tag, data)
    }

    fn stats(&self) -> EndpointStats {
        MessageEndpoint::stats(self)
    }
}
