//! [`FramedChannel`]: typed frames over a [`Channel`] with any
//! `tokio_util::codec` [`Encoder`] / [`Decoder`], one fabric message per
//! frame.
//!
//! Unlike `tokio_util::codec::Framed` over a byte stream (which also works:
//! see [`ByteStream`](super::ByteStream)), nothing is reassembled: each
//! item sent is encoded into one message, and each message received is
//! decoded on its own. The codec's framing bytes (a length prefix, a
//! newline) are still sent, so the same codec works for both. A message is
//! decoded with `decode` until it returns `None`, then `decode_eof` takes
//! what is left (a message may carry several frames; an empty message
//! yields whatever `decode_eof` makes of no bytes, usually nothing). Bytes
//! that do not form a frame are the codec's error (tokio-util's
//! "bytes remaining on stream" for codecs with the default `decode_eof`),
//! and decoding goes on with the next message, with the codec in the state
//! the error left it in: a codec that keeps state between calls (such as
//! `LengthDelimitedCodec`, which remembers a header it read) can be
//! started afresh through [`FramedChannel::codec_mut`].
//!
//! Errors of the channel reach the codec's error type through
//! `From<std::io::Error>` (see [`io_error`](super::io_error)).
//!
//! # Cancel safety
//! As for [`Channel`]: `next` is cancel safe (the message being decoded
//! and the posted receives live in the `FramedChannel`); an item handed to
//! `start_send` is encoded and posted at once, so dropping a `send` future
//! or the `FramedChannel` after that still delivers the whole frame; a
//! frame is never delivered in part.
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
//! use futures::{SinkExt, StreamExt};
//! use psmrail::compat::{Channel, ChannelConfig, FramedChannel};
//! use tokio_util::codec::LinesCodec;
//!
//! let a = Channel::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
//! let b = Channel::with_config(&ep, me, 2, ChannelConfig::new().recv_tag(1))?;
//! let mut a = FramedChannel::new(a, LinesCodec::new());
//! let mut b = FramedChannel::new(b, LinesCodec::new());
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     a.send("one line").await?;
//!     a.send("another").await?;
//!     assert_eq!(b.next().await.transpose()?.as_deref(), Some("one line"));
//!     assert_eq!(b.next().await.transpose()?.as_deref(), Some("another"));
//!     Ok::<(), tokio_util::codec::LinesCodecError>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::channel::Channel;
use crate::ops::MessageEndpoint;
use bytes::BytesMut;
use futures::{Sink, Stream};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio_util::codec::{Decoder, Encoder};

/// Frames over a [`Channel`], one message each, with codec `C`: a
/// [`Stream`] of decoded items and a [`Sink`] of items to encode. See the
/// [module docs](self).
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
/// use psmrail::compat::{Channel, ChannelConfig, FramedChannel};
/// use tokio_util::codec::LengthDelimitedCodec;
///
/// let a = Channel::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
/// let b = Channel::with_config(&ep, me, 2, ChannelConfig::new().recv_tag(1))?;
/// let mut a = FramedChannel::new(a, LengthDelimitedCodec::new());
/// let mut b = FramedChannel::new(b, LengthDelimitedCodec::new());
/// futures::executor::block_on(async {
///     a.send(bytes::Bytes::from_static(b"a frame")).await?;
///     assert_eq!(&b.next().await.unwrap()?[..], b"a frame");
///     Ok::<(), std::io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FramedChannel<'a, E: MessageEndpoint, C> {
    chan: Channel<'a, E>,
    codec: C,
    /// The message being decoded (what is left of it).
    rx: BytesMut,
    /// How far decoding `rx` has come.
    rx_state: RxState,
    /// Where items are encoded; split off as one message per item.
    tx: BytesMut,
}

/// Where decoding the current message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxState {
    /// No message: receive one.
    Idle,
    /// `decode` until it gives `None`.
    Decode,
    /// `decode_eof` until it gives `None`.
    DecodeEof,
}

impl<'a, E: MessageEndpoint, C> FramedChannel<'a, E, C> {
    /// Frames over `chan` with `codec`.
    pub fn new(chan: Channel<'a, E>, codec: C) -> Self {
        FramedChannel {
            chan,
            codec,
            rx: BytesMut::new(),
            rx_state: RxState::Idle,
            tx: BytesMut::new(),
        }
    }

    /// The channel underneath.
    pub fn channel(&self) -> &Channel<'a, E> {
        &self.chan
    }

    /// The codec.
    pub fn codec(&self) -> &C {
        &self.codec
    }

    /// The codec, to change its settings.
    pub fn codec_mut(&mut self) -> &mut C {
        &mut self.codec
    }

    /// The channel and the codec; a message being decoded is dropped.
    pub fn into_parts(self) -> (Channel<'a, E>, C) {
        (self.chan, self.codec)
    }
}

impl<E: MessageEndpoint, C: Decoder + Unpin> Stream for FramedChannel<'_, E, C> {
    type Item = Result<C::Item, C::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let got = match this.rx_state {
                RxState::Idle => None,
                RxState::Decode => Some(this.codec.decode(&mut this.rx)),
                RxState::DecodeEof => Some(this.codec.decode_eof(&mut this.rx)),
            };
            match got {
                Some(Ok(Some(frame))) => return Poll::Ready(Some(Ok(frame))),
                Some(Ok(None)) if this.rx_state == RxState::Decode => {
                    this.rx_state = RxState::DecodeEof;
                    continue;
                }
                Some(Ok(None)) => {
                    // The message is done.
                    this.rx_state = RxState::Idle;
                    this.rx.clear();
                }
                Some(Err(e)) => {
                    this.rx_state = RxState::Idle;
                    this.rx.clear();
                    return Poll::Ready(Some(Err(e)));
                }
                None => {}
            }
            match ready!(this.chan.poll_recv(cx)) {
                Some(Ok(msg)) => {
                    this.rx = msg;
                    this.rx_state = RxState::Decode;
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(io::Error::from(e).into()))),
                None => return Poll::Ready(None),
            }
        }
    }
}

impl<E: MessageEndpoint, C: Encoder<I> + Unpin, I> Sink<I> for FramedChannel<'_, E, C> {
    type Error = C::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        let r = ready!(self.get_mut().chan.poll_send_ready(cx));
        Poll::Ready(r.map_err(|e| io::Error::from(e).into()))
    }

    fn start_send(self: Pin<&mut Self>, item: I) -> Result<(), C::Error> {
        let this = self.get_mut();
        this.tx.clear();
        this.codec.encode(item, &mut this.tx)?;
        let frame = this.tx.split();
        this.chan
            .start_send_msg(frame)
            .map_err(|e| io::Error::from(e).into())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        let r = ready!(self.get_mut().chan.poll_send_flush(cx));
        Poll::Ready(r.map_err(|e| io::Error::from(e).into()))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        let r = ready!(self.get_mut().chan.poll_send_close(cx));
        Poll::Ready(r.map_err(|e| io::Error::from(e).into()))
    }
}
