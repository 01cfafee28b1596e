//! [`ByteStream`]: `tokio::io::AsyncRead + AsyncWrite` over a [`Channel`],
//! so protocol code written for a `TcpStream` runs over the fabric
//! unchanged (`tokio_util::codec::Framed`, `tokio::io::copy`, HTTP/1
//! clients and servers, ...). With `tokio_util::compat` it is a
//! `futures::io::AsyncRead + AsyncWrite` too.
//!
//! # Bytes and messages
//! A write posts its bytes as messages of at most
//! [`ChannelConfig::max_message`] bytes (a write larger than that becomes
//! several messages; as many as the send window has room for are posted
//! by one call, and the call reports how many bytes it took). Writes are
//! not coalesced: every `poll_write` sends at once, so many small writes
//! are best wrapped in a `tokio::io::BufWriter`. A read takes bytes from
//! the oldest message received and keeps what does not fit for the next
//! read. Both sides should use the same `max_message`: a message longer
//! than the reader's posted receives is an `FI_ETRUNC` error
//! (`InvalidData`).
//!
//! # End of stream
//! `poll_shutdown` flushes, then sends the channel's end-of-stream marker
//! (a zero-length message with the end-of-stream tag bit, see
//! [`Channel`](super::channel)); the peer's reads see end of file (`Ok(0)`)
//! once they have read every byte sent before it. Writing after shutdown
//! is a `BrokenPipe` error. The reading half keeps going after its own
//! side shut down, as with TCP.
//!
//! # Errors
//! A failed receive breaks the byte stream for good (bytes are missing, so
//! later bytes cannot be trusted): that read returns the error and every
//! later read an `InvalidData` error. A failed send surfaces as the error
//! of the next write, flush or shutdown.
//!
//! # Cancel safety
//! Every poll method keeps its state in the `ByteStream`, so dropping the
//! future of `read`, `write`, `flush` or `shutdown` loses nothing: bytes a
//! write reported taken are posted and will be delivered, and bytes not
//! yet read stay for the next read. Dropping the `ByteStream` is dropping
//! its channel (sends in flight complete; unmatched receives are
//! cancelled; received bytes not read are freed).
//!
//! ```
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
//! use psmrail::compat::{ByteStream, ChannelConfig};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! // One endpoint talking to itself: two streams with crossed tags and
//! // 4-byte messages, so the 11-byte write becomes three messages.
//! let cfg = ChannelConfig::new().max_message(4);
//! let mut a = ByteStream::with_config(&ep, me, 1, cfg.clone().recv_tag(2))?;
//! let mut b = ByteStream::with_config(&ep, me, 2, cfg.recv_tag(1))?;
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     a.write_all(b"hello world").await?;
//!     a.shutdown().await?; // b reads to the end, then sees EOF
//!     let mut two = [0u8; 2];
//!     b.read_exact(&mut two).await?; // less than a message: the rest stays
//!     let mut rest = Vec::new();
//!     b.read_to_end(&mut rest).await?;
//!     assert_eq!(&two, b"he");
//!     assert_eq!(rest, b"llo world");
//!     Ok::<(), std::io::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same stream as a `futures::io` stream, through `tokio_util::compat`:
//!
//! ```
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
//! use futures::io::{AsyncReadExt, AsyncWriteExt};
//! use psmrail::compat::{ByteStream, ChannelConfig};
//! use tokio_util::compat::TokioAsyncReadCompatExt;
//!
//! let a = ByteStream::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
//! let b = ByteStream::with_config(&ep, me, 2, ChannelConfig::new().recv_tag(1))?;
//! let (mut a, mut b) = (a.compat(), b.compat());
//! futures::executor::block_on(async {
//!     a.write_all(b"over futures::io").await?;
//!     a.close().await?;
//!     let mut got = String::new();
//!     b.read_to_string(&mut got).await?;
//!     assert_eq!(got, "over futures::io");
//!     Ok::<(), std::io::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::channel::{Channel, ChannelConfig};
use crate::fabric::FiAddr;
use crate::ops::MessageEndpoint;
use bytes::{Buf, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `AsyncRead + AsyncWrite` over a [`Channel`]: see the [module
/// docs](self) for how bytes become messages, end of stream, errors and
/// cancel safety.
///
/// `tokio_util::codec::Framed` over it, unchanged:
///
/// ```
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
/// use futures::{SinkExt, StreamExt};
/// use psmrail::compat::{ByteStream, ChannelConfig};
/// use tokio_util::codec::{Framed, LinesCodec};
///
/// let a = ByteStream::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
/// let b = ByteStream::with_config(&ep, me, 2, ChannelConfig::new().recv_tag(1))?;
/// let (mut a, mut b) = (Framed::new(a, LinesCodec::new()), Framed::new(b, LinesCodec::new()));
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// rt.block_on(async {
///     a.send("GET /").await?;
///     assert_eq!(b.next().await.transpose()?.as_deref(), Some("GET /"));
///     Ok::<(), tokio_util::codec::LinesCodecError>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ByteStream<'a, E: MessageEndpoint> {
    chan: Channel<'a, E>,
    /// The unread rest of the oldest message received.
    rest: BytesMut,
    /// The peer's end-of-stream marker was taken.
    eof: bool,
    /// A receive failed: the byte sequence has a hole.
    broken: bool,
}

impl<'a, E: MessageEndpoint> ByteStream<'a, E> {
    /// A byte stream to `peer` over `tag`, with the default
    /// [`ChannelConfig`] (256 KiB messages).
    pub fn new(ep: &'a E, peer: FiAddr, tag: u64) -> crate::Result<Self> {
        Ok(Self::from(Channel::new(ep, peer, tag)?))
    }

    /// A byte stream to `peer` over `tag`, configured by `config`.
    pub fn with_config(
        ep: &'a E,
        peer: FiAddr,
        tag: u64,
        config: ChannelConfig,
    ) -> crate::Result<Self> {
        Ok(Self::from(Channel::with_config(ep, peer, tag, config)?))
    }

    /// The channel underneath.
    pub fn channel(&self) -> &Channel<'a, E> {
        &self.chan
    }
}

impl<'a, E: MessageEndpoint> From<Channel<'a, E>> for ByteStream<'a, E> {
    /// A byte stream over `chan`, which should not have handed out messages
    /// yet (those would not be part of the bytes).
    fn from(chan: Channel<'a, E>) -> Self {
        ByteStream {
            chan,
            rest: BytesMut::new(),
            eof: false,
            broken: false,
        }
    }
}

fn broken() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "psmrail byte stream: an earlier receive failed, bytes are missing",
    )
}

impl<E: MessageEndpoint> AsyncRead for ByteStream<'_, E> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.rest.is_empty() {
                let n = this.rest.len().min(buf.remaining());
                buf.put_slice(&this.rest[..n]);
                this.rest.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.broken {
                return Poll::Ready(Err(broken()));
            }
            if this.eof || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.chan.poll_recv(cx)) {
                // Empty messages carry no bytes (the stream sends none).
                Some(Ok(msg)) => this.rest = msg,
                Some(Err(e)) => {
                    this.broken = true;
                    return Poll::Ready(Err(e.into()));
                }
                None => this.eof = true,
            }
        }
    }
}

impl<E: MessageEndpoint> AsyncWrite for ByteStream<'_, E> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.chan.is_send_closed() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "psmrail byte stream: write after shutdown",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(this.chan.poll_send_ready(cx))?;
        let seg = this.chan.max_message();
        let mut taken = 0;
        while taken < buf.len() && this.chan.has_send_room() {
            let n = seg.min(buf.len() - taken);
            this.chan.start_send_msg(buf[taken..taken + n].to_vec())?;
            taken += n;
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(ready!(self.get_mut().chan.poll_send_flush(cx))?))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(ready!(self.get_mut().chan.poll_send_close(cx))?))
    }
}
