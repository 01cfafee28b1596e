//! [`Channel`]: a conversation with one peer over one tag, as a
//! [`Stream`] of received messages and a [`Sink`] of messages to send.
//!
//! # Tags and the end-of-stream marker
//! Messages go to the peer with the channel's *send tag*; the channel takes
//! the messages that arrive with its *receive tag* (by default the same
//! tag, which suits two endpoints talking to each other; two channels on one
//! endpoint need two tags, crossed). Tag matching does not look at the
//! sender, so the receive tag names the conversation on the receiving
//! endpoint: give each conversation an endpoint holds a tag of its own.
//!
//! One tag bit, the *end-of-stream bit* ([`ChannelConfig::eof_bit`], by
//! default bit 61, the highest bit every psm and mrail endpoint leaves to
//! the application), is the channel's: closing the [`Sink`]
//! ([`SinkExt::close`](futures::SinkExt)) sends one zero-length
//! message with the send tag plus that bit, after every message sent
//! before it, and the peer's [`Stream`] ends (`None`) when it takes it.
//! The channel's receives match both tags (the bit is in their ignore
//! mask), so the marker arrives in order with the data. The channel's tags
//! must leave the bit clear.
//!
//! # Receives posted ahead
//! The channel keeps [`ChannelConfig::recv_depth`] receives of
//! [`ChannelConfig::max_message`] bytes posted at all times, from the moment
//! it is made: messages land in their buffers without waiting for the
//! application, and the [`Stream`] hands them out oldest first, posting a
//! new receive for each one it hands out. A message longer than
//! `max_message` is not silently cut: the stream yields an `FI_ETRUNC`
//! error ([`Error::truncation`] gives both lengths) in its place, and the
//! stream goes on with the next message.
//!
//! Receive buffers are made (and zeroed) once and used again: a message of
//! up to half of `max_message` is copied out into a `BytesMut` of its own
//! length, and its buffer goes straight back to a new receive; a larger
//! one is handed out in its buffer, without a copy, and a new buffer is
//! made for the receive that replaces it. So what the stream yields holds
//! no more memory than the message needs (twice, at the most), and a
//! stream of small messages allocates only their copies.
//!
//! # Back-pressure
//! At most [`ChannelConfig::sends_in_flight`] sends are in flight:
//! `poll_ready` is pending while that many have not completed, and
//! `poll_flush` waits for every one. A failed send surfaces as the error of
//! the next `poll_ready`, `poll_flush` or `poll_close`.
//!
//! # Cancel safety
//! * `StreamExt::next` is cancel safe: the
//!   receives live in the channel, not in the future, so dropping the
//!   future loses nothing; the next call hands out the same message.
//! * `SinkExt::send`: once the item has been
//!   handed to `start_send` the message is posted and is delivered even if
//!   the future (or the whole channel) is dropped; dropping the future
//!   before that drops the item unsent. `flush` and `close` are cancel
//!   safe: they only wait (a dropped `close` that had posted the marker
//!   does not post it twice).
//! * Dropping the channel: sends in flight still complete (the reactor
//!   keeps their buffers until the engine is done); receives that have not
//!   matched a message are cancelled, so later messages go to whoever posts
//!   the next receive for the tag. Messages that already landed in a posted
//!   receive but were not handed out (at most `recv_depth`) are freed with
//!   the channel.
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
//! use psmrail::compat::{Channel, ChannelConfig};
//!
//! // An endpoint talking to itself: two channels with crossed tags.
//! let mut a = Channel::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
//! let mut b = Channel::with_config(&ep, me, 2, ChannelConfig::new().recv_tag(1))?;
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     a.send(b"hello".to_vec().into()).await?;
//!     a.close().await?; // b's stream ends after "hello"
//!     assert_eq!(b.next().await.transpose()?.as_deref(), Some(&b"hello"[..]));
//!     assert!(b.next().await.is_none());
//!     Ok::<(), psmrail::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::ring::Ring;
use crate::engine::{BufferOwner, OpBuffer};
use crate::fabric::FiAddr;
use crate::ops::{MessageEndpoint, OpOutput, Received, Sent};
use crate::{Error, ErrorKind, Result};
use bytes::{Bytes, BytesMut};
use futures::{Sink, Stream};
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// The end-of-stream bit a [`ChannelConfig`] starts with: bit 61.
///
/// ```
/// assert_eq!(psmrail::compat::DEFAULT_EOF_BIT, 1 << 61);
/// ```
pub const DEFAULT_EOF_BIT: u64 = 1 << 61;

/// The largest `max_message`: PSM carries at most 2³²−1 bytes a message.
const MAX_MESSAGE_LIMIT: usize = u32::MAX as usize;

/// How a [`Channel`] posts receives and bounds its sends.
///
/// ```
/// use psmrail::compat::ChannelConfig;
/// let c = ChannelConfig::new().recv_depth(4).max_message(1 << 20).sends_in_flight(16);
/// assert_eq!(c.get_max_message(), 1 << 20);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelConfig {
    recv_depth: usize,
    max_message: usize,
    sends_in_flight: usize,
    recv_tag: Option<u64>,
    eof_bit: u64,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            recv_depth: 8,
            max_message: 256 * 1024,
            sends_in_flight: 8,
            recv_tag: None,
            eof_bit: DEFAULT_EOF_BIT,
        }
    }
}

impl ChannelConfig {
    /// The defaults: 8 receives of 256 KiB posted ahead, 8 sends in flight,
    /// the receive tag equal to the send tag, end-of-stream bit 61.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives kept posted ahead (at least 1).
    pub fn recv_depth(mut self, n: usize) -> Self {
        self.recv_depth = n;
        self
    }

    /// The size of each posted receive: the largest message the channel
    /// takes whole (1 ..= 2³²−1 bytes). A [`ByteStream`](super::ByteStream)
    /// also cuts its writes into messages of this size, so both sides of a
    /// byte stream should agree on it.
    pub fn max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Sends in flight before `poll_ready` waits (at least 1).
    pub fn sends_in_flight(mut self, n: usize) -> Self {
        self.sends_in_flight = n;
        self
    }

    /// Receive messages with this tag instead of the send tag.
    pub fn recv_tag(mut self, tag: u64) -> Self {
        self.recv_tag = Some(tag);
        self
    }

    /// The tag bit of the end-of-stream marker (one bit, left clear by both
    /// tags, within the endpoint's tag space).
    pub fn eof_bit(mut self, bit: u64) -> Self {
        self.eof_bit = bit;
        self
    }

    /// The configured size of each posted receive.
    pub fn get_max_message(&self) -> usize {
        self.max_message
    }

    /// Checks the configuration against the tags; `FI_EINVAL` names the
    /// field at fault.
    fn check(&self, send_tag: u64) -> Result<u64> {
        let inval = |m: &str| Err(Error::new(ErrorKind::Inval, format!("channel: {m}")));
        if self.recv_depth == 0 {
            return inval("recv_depth must be at least 1");
        }
        if self.sends_in_flight == 0 {
            return inval("sends_in_flight must be at least 1");
        }
        if self.max_message == 0 || self.max_message > MAX_MESSAGE_LIMIT {
            return inval("max_message must be 1 ..= 4294967295 bytes");
        }
        if !self.eof_bit.is_power_of_two() {
            return inval("eof_bit must be exactly one bit");
        }
        let recv_tag = self.recv_tag.unwrap_or(send_tag);
        if (send_tag | recv_tag) & self.eof_bit != 0 {
            return inval("the tags must leave eof_bit clear");
        }
        Ok(recv_tag)
    }
}

/// Where the sending half stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendState {
    Open,
    /// The end-of-stream marker is posted (it is the last send in flight).
    Closing,
    Closed,
}

/// A conversation with `peer` over a tag: a [`Stream`] of the messages
/// received (`Result<BytesMut>`) and a [`Sink`] of messages to send
/// ([`Bytes`]; the buffer moves into the operation, nothing is copied). See the [module docs](self) for tags,
/// the end-of-stream marker, back-pressure and cancel safety.
///
/// Generic over [`MessageEndpoint`]: the same code runs over a psm
/// [`Endpoint`](crate::fabric::Endpoint) and an
/// [`MrailEndpoint`](crate::mrail::MrailEndpoint). The channel borrows
/// its endpoint, as the endpoint's own futures do; to use one in a spawned
/// task, move a clone of the endpoint (a cheap handle) into the task and
/// make the channel there.
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
/// use psmrail::compat::{Channel, ChannelConfig};
///
/// let mut a = Channel::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
/// let mut b = Channel::with_config(&ep, me, 2, ChannelConfig::new().recv_tag(1))?;
/// futures::executor::block_on(async {
///     a.send(bytes::Bytes::from_static(b"to b")).await?;
///     b.send(bytes::Bytes::from_static(b"to a")).await?;
///     assert_eq!(&b.next().await.unwrap()?[..], b"to b");
///     assert_eq!(&a.next().await.unwrap()?[..], b"to a");
///     Ok::<(), psmrail::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Channel<'a, E: MessageEndpoint> {
    ep: &'a E,
    peer: FiAddr,
    send_tag: u64,
    recv_tag: u64,
    eof_bit: u64,
    max_message: usize,
    recv_depth: usize,
    recvs: Ring<E::RecvFuture<'a>>,
    /// Receive buffers whose message was copied out, for the next receives
    /// (each `max_message` bytes long).
    spare: Vec<BytesMut>,
    sends: Ring<E::SendFuture<'a>>,
    send_state: SendState,
    recv_ended: bool,
}

impl<E: MessageEndpoint> std::fmt::Debug for Channel<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("peer", &self.peer)
            .field("send_tag", &self.send_tag)
            .field("recv_tag", &self.recv_tag)
            .field("max_message", &self.max_message)
            .field("recvs_posted", &self.recvs.len())
            .field("sends_in_flight", &self.sends.len())
            .field("send_state", &self.send_state)
            .field("recv_ended", &self.recv_ended)
            .finish()
    }
}

impl<'a, E: MessageEndpoint> Channel<'a, E> {
    /// A channel to `peer` sending and receiving with `tag`, with the
    /// default [`ChannelConfig`]; its receives are posted before it returns.
    pub fn new(ep: &'a E, peer: FiAddr, tag: u64) -> Result<Self> {
        Self::with_config(ep, peer, tag, ChannelConfig::default())
    }

    /// A channel to `peer` sending with `tag`, configured by `config`;
    /// `FI_EINVAL` when the configuration does not hold together.
    pub fn with_config(ep: &'a E, peer: FiAddr, tag: u64, config: ChannelConfig) -> Result<Self> {
        let recv_tag = config.check(tag)?;
        let mut ch = Channel {
            ep,
            peer,
            send_tag: tag,
            recv_tag,
            eof_bit: config.eof_bit,
            max_message: config.max_message,
            recv_depth: config.recv_depth,
            recvs: Ring::new(config.recv_depth),
            spare: Vec::new(),
            sends: Ring::new(config.sends_in_flight),
            send_state: SendState::Open,
            recv_ended: false,
        };
        for _ in 0..ch.recv_depth {
            ch.post_recv();
        }
        Ok(ch)
    }

    /// The peer the channel sends to.
    pub fn peer(&self) -> FiAddr {
        self.peer
    }

    /// The size of each posted receive (the largest message taken whole).
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Sends posted and not yet seen complete.
    pub fn sends_in_flight(&self) -> usize {
        self.sends.len()
    }

    /// Whether the peer's end-of-stream marker was taken (the stream ended).
    pub fn is_recv_ended(&self) -> bool {
        self.recv_ended
    }

    fn post_recv(&mut self) {
        let buf = self
            .spare
            .pop()
            .unwrap_or_else(|| BytesMut::zeroed(self.max_message));
        let op = self.ep.trecv(buf, self.recv_tag, self.eof_bit);
        // The ring has `recv_depth` slots and is only topped up to that.
        let _ = self.recvs.push(op);
    }

    /// The next received message, as [`Stream::poll_next`]: `None` once the
    /// peer's end-of-stream marker was taken.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<BytesMut>>> {
        if self.recv_ended {
            return Poll::Ready(None);
        }
        let Some(front) = self.recvs.front() else {
            return Poll::Ready(None);
        };
        let (got, buf): OpOutput<Received> = ready!(front.poll(cx));
        self.recvs.pop_front();
        match got {
            Ok(r) if r.tag & self.eof_bit != 0 => {
                self.recv_ended = true;
                // Nothing follows the marker: give the tag back at once.
                self.recvs.clear();
                Poll::Ready(None)
            }
            Ok(r) => {
                let msg = self.message_bytes(buf, r.len);
                self.post_recv();
                Poll::Ready(Some(Ok(msg)))
            }
            Err(e) => {
                self.give_back(buf.into_owner());
                self.post_recv();
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    /// Waits until at most `until` sends are in flight; the first failed
    /// send's error ends the wait.
    fn poll_sends(&mut self, cx: &mut Context<'_>, until: usize) -> Poll<Result<()>> {
        while self.sends.len() > until {
            let Some(front) = self.sends.front() else {
                break;
            };
            let (sent, _buf): OpOutput<Sent> = ready!(front.poll(cx));
            self.sends.pop_front();
            sent?;
        }
        Poll::Ready(Ok(()))
    }

    /// [`Sink::poll_ready`]: ready when fewer than `sends_in_flight` sends
    /// are in flight.
    pub fn poll_send_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let cap = self.sends.capacity();
        self.poll_sends(cx, cap - 1)
    }

    /// Whether a send can be posted without waiting (no completed send is
    /// reaped to make room).
    pub(crate) fn has_send_room(&self) -> bool {
        !self.sends.is_full()
    }

    /// [`Sink::start_send`]: posts `msg` to the peer. `FI_EAGAIN` when
    /// `poll_send_ready` was not ready; `FI_EOPBADSTATE` after close.
    pub fn start_send_msg(&mut self, msg: impl Into<OpBuffer>) -> Result<()> {
        if self.send_state != SendState::Open {
            return Err(Error::new(
                ErrorKind::OpBadState,
                "channel: send after close",
            ));
        }
        if self.sends.is_full() {
            return Err(Error::new(
                ErrorKind::Again,
                "channel: send without poll_ready (sends_in_flight reached)",
            ));
        }
        let op = self.ep.tsend(self.peer, self.send_tag, msg);
        let _ = self.sends.push(op);
        Ok(())
    }

    /// [`Sink::poll_flush`]: waits until every send posted has completed.
    pub fn poll_send_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_sends(cx, 0)
    }

    /// [`Sink::poll_close`]: flushes, sends the end-of-stream marker once
    /// and waits for it. Closing again after it finished is a no-op.
    pub fn poll_send_close(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if self.send_state == SendState::Open {
            ready!(self.poll_sends(cx, 0))?;
            let op = self
                .ep
                .tsend(self.peer, self.send_tag | self.eof_bit, Vec::new());
            let _ = self.sends.push(op);
            self.send_state = SendState::Closing;
        }
        ready!(self.poll_sends(cx, 0))?;
        self.send_state = SendState::Closed;
        Poll::Ready(Ok(()))
    }

    /// Whether the sending half was closed (the marker is posted).
    pub fn is_send_closed(&self) -> bool {
        self.send_state != SendState::Open
    }
}

impl<E: MessageEndpoint> Channel<'_, E> {
    /// The `len` bytes a receive placed in its buffer, as `BytesMut`: a
    /// copy of its own length when it fills at most half of the buffer
    /// (which goes back to [`spare`](Self::spare)), else the buffer itself
    /// (see the module docs).
    fn message_bytes(&mut self, buf: OpBuffer, len: usize) -> BytesMut {
        let len = len.min(buf.len());
        match buf.into_owner() {
            BufferOwner::BytesMut(mut b) => {
                if 2 * len <= b.len() {
                    let copy = BytesMut::from(&b[..len]);
                    self.give_back(BufferOwner::BytesMut(b));
                    copy
                } else {
                    b.truncate(len);
                    b
                }
            }
            BufferOwner::Vec(v) => BytesMut::from(v.get(..len).unwrap_or_default()),
            BufferOwner::Bytes(b) => BytesMut::from(b.get(..len).unwrap_or_default()),
            BufferOwner::Region(_) => BytesMut::new(),
        }
    }

    /// Keeps a receive buffer that came back whole for the next receive.
    fn give_back(&mut self, buf: BufferOwner) {
        if let BufferOwner::BytesMut(b) = buf {
            if b.len() == self.max_message && self.spare.len() < self.recv_depth {
                self.spare.push(b);
            }
        }
    }
}

impl<E: MessageEndpoint> Stream for Channel<'_, E> {
    type Item = Result<BytesMut>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

/// Messages to send are [`Bytes`] (a `Vec<u8>` or a frozen `BytesMut`
/// converts without a copy); [`Channel::start_send_msg`] takes any other
/// buffer an operation takes.
impl<E: MessageEndpoint> Sink<Bytes> for Channel<'_, E> {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_send_ready(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: Bytes) -> Result<()> {
        self.get_mut().start_send_msg(item)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_send_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_send_close(cx)
    }
}
