//! Frames: the [`Frame`] enum, [`encode`], and the incremental
//! [`FrameDecoder`].
//!
//! Payloads decode as [`Bytes`] split off the input buffer, so an eager
//! message or a data chunk is never copied by the decoder.

use super::handshake::{Hello, Refuse, RefuseCode};
use super::{FrameLimits, WireError, HEADER_LEN, MAX_WIRE_AM_ARGS};
use crate::engine::soft::epid::RESERVED_EPID_BITS;
use crate::engine::Epid;
use bytes::{BufMut, Bytes, BytesMut};
use std::fmt;

/// The kind byte of a frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Opens a connection (dialer to acceptor).
    Hello = 0x01,
    /// Accepts a connection (acceptor to dialer).
    HelloAck = 0x02,
    /// Refuses a connection, with a reason.
    Refuse = 0x03,
    /// Grants credit to the other side.
    Credit = 0x04,
    /// Names the connection's link, new or resumed (handshake).
    Session = 0x05,
    /// Acknowledges the stream bytes consumed.
    Ack = 0x06,
    /// Asks an endpoint to prove it dialed (identity check, on a
    /// connection of its own).
    Challenge = 0x07,
    /// Answers a Challenge on the connection being checked.
    Proof = 0x08,
    /// Asks the dialer to prove it knows the job secret.
    AuthChallenge = 0x09,
    /// Proves knowledge of the job secret (and may ask in turn).
    AuthProof = 0x0a,
    /// Offers shared memory for the rest of the link (dialer to acceptor,
    /// same host; the segment rides with it as a descriptor).
    ShmOffer = 0x0b,
    /// The sender's frames continue through the shared segment.
    ShmSwitch = 0x0c,
    /// The acceptor declines a [`ShmOffer`](FrameKind::ShmOffer).
    ShmDecline = 0x0d,
    /// A whole message, tag and payload.
    Eager = 0x10,
    /// Request to send a large message.
    Rts = 0x11,
    /// Clear to send: the receiver matched an Rts.
    Cts = 0x12,
    /// A chunk of a rendezvous message.
    Data = 0x13,
    /// Request to send a large message whose bytes the receiver may read
    /// straight from the sender's memory (same host, shared memory).
    PullRts = 0x14,
    /// The receiver read a [`PullRts`](FrameKind::PullRts) message itself.
    Pulled = 0x15,
    /// An active-message request.
    AmRequest = 0x20,
    /// An active-message reply.
    AmReply = 0x21,
    /// Graceful close.
    Bye = 0x7f,
}

impl FrameKind {
    /// The kind for a header byte.
    pub fn from_u8(b: u8) -> Option<FrameKind> {
        Some(match b {
            0x01 => FrameKind::Hello,
            0x02 => FrameKind::HelloAck,
            0x03 => FrameKind::Refuse,
            0x04 => FrameKind::Credit,
            0x05 => FrameKind::Session,
            0x06 => FrameKind::Ack,
            0x07 => FrameKind::Challenge,
            0x08 => FrameKind::Proof,
            0x09 => FrameKind::AuthChallenge,
            0x0a => FrameKind::AuthProof,
            0x0b => FrameKind::ShmOffer,
            0x0c => FrameKind::ShmSwitch,
            0x0d => FrameKind::ShmDecline,
            0x10 => FrameKind::Eager,
            0x11 => FrameKind::Rts,
            0x12 => FrameKind::Cts,
            0x13 => FrameKind::Data,
            0x14 => FrameKind::PullRts,
            0x15 => FrameKind::Pulled,
            0x20 => FrameKind::AmRequest,
            0x21 => FrameKind::AmReply,
            0x7f => FrameKind::Bye,
            _ => return None,
        })
    }
}

/// Up to [`MAX_WIRE_AM_ARGS`] AM arguments, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct AmArgs {
    len: u8,
    vals: [u64; MAX_WIRE_AM_ARGS],
}

impl AmArgs {
    /// Copies `args`; `None` if there are more than [`MAX_WIRE_AM_ARGS`].
    pub fn new(args: &[u64]) -> Option<AmArgs> {
        if args.len() > MAX_WIRE_AM_ARGS {
            return None;
        }
        let mut vals = [0; MAX_WIRE_AM_ARGS];
        vals[..args.len()].copy_from_slice(args);
        Some(AmArgs {
            len: args.len() as u8,
            vals,
        })
    }

    /// The arguments.
    pub fn as_slice(&self) -> &[u64] {
        &self.vals[..usize::from(self.len)]
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for AmArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// The body of an AmRequest or AmReply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmFrame {
    /// The handler to run at the receiver.
    pub handler: u16,
    /// The arguments.
    pub args: AmArgs,
    /// The payload.
    pub payload: Bytes,
}

/// One frame of the soft engine's protocol (layouts in [`super`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Opens a connection.
    Hello(Hello),
    /// Accepts a connection.
    HelloAck(Hello),
    /// Refuses a connection.
    Refuse(Refuse),
    /// Names the link a connection carries: after Hello, the dialer's
    /// link id and, for a resumed link, the bytes of the acceptor's stream
    /// it consumed; after HelloAck, the acceptor's answer.
    Session {
        /// The link id (never 0).
        link: u64,
        /// Stream bytes of the other side consumed, or [`NEW_LINK`] for a
        /// new link.
        resume: u64,
        /// The sender endpoint's incarnation: a random number each
        /// endpoint draws when it opens, which tells a process that
        /// restarted at the same address from the one before it.
        incarnation: u64,
        /// 0 for a new link; the number of the resumption otherwise
        /// (each one higher than the last the acceptor took).
        generation: u64,
        /// For a new link, the sender's half of the link key (random); for
        /// a resumption, the proof that the sender holds the link key
        /// (a truncated HMAC-SHA256 over link, counts and generation).
        seal: [u8; SEAL_LEN],
    },
    /// Sent by an acceptor to the listener of the endpoint a dialer
    /// claims to be: if that endpoint is dialing `from` on link `link`,
    /// it proves it by sending [`Frame::Proof`] with `nonce` on that
    /// connection. Any other Challenge is dropped.
    Challenge {
        /// A value only the real endpoint learns.
        nonce: u64,
        /// The acceptor's endpoint id.
        from: Epid,
        /// The link id the dialer's Session named (random, known only to
        /// the dialer and the acceptor).
        link: u64,
    },
    /// The dialer's answer to a [`Frame::Challenge`].
    Proof {
        /// The challenge's value.
        nonce: u64,
    },
    /// The acceptor asks the dialer to prove it knows the job secret
    /// ([`JobSecret`](crate::engine::soft::JobSecret)).
    AuthChallenge {
        /// A fresh random value.
        nonce: [u8; 16],
    },
    /// A proof of the job secret for the other side's challenge, and (from
    /// the dialer) a challenge for the acceptor; zeros where not used.
    AuthProof {
        /// The dialer's challenge to the acceptor.
        nonce: [u8; 16],
        /// HMAC-SHA256 of the challenge answered, both epids and the link.
        mac: [u8; 32],
    },
    /// The dialer offers a shared segment for the rest of the link: the
    /// descriptors (the segment's memfd and two eventfds) ride on the
    /// Unix socket with the bytes that carry this frame (`SCM_RIGHTS`).
    /// Outside the link's numbered stream, like the handshake.
    ShmOffer {
        /// The segment's length in bytes, as the memfd must have it.
        segment_len: u64,
    },
    /// The sender's frames after this one come through the shared
    /// segment, not the socket (which from then on only carries the
    /// connection's end).
    ShmSwitch,
    /// The acceptor declines the offer: the link stays on the socket.
    ShmDecline,
    /// The sender consumed this many bytes of the receiver's stream.
    Ack {
        /// Bytes consumed since the link began.
        received: u64,
    },
    /// Grants credit.
    Credit {
        /// Eager bytes (payload + [`super::ENTRY_OVERHEAD`] per message).
        eager_bytes: u64,
        /// Rendezvous requests.
        rts: u32,
        /// AM requests.
        am: u32,
    },
    /// A whole message.
    Eager {
        /// The tag.
        tag: u64,
        /// The payload.
        payload: Bytes,
    },
    /// Request to send.
    Rts {
        /// The sender's id for the message (echoed in Cts).
        msg_id: u64,
        /// The tag.
        tag: u64,
        /// The message length.
        len: u64,
    },
    /// Request to send whose bytes the receiver may read itself from
    /// the sender's memory (`process_vm_readv`): sent only on a link
    /// between processes of one host on shared memory. The receiver
    /// answers with [`Frame::Pulled`] once it read them, or with a
    /// [`Frame::Cts`] as for an Rts when it cannot (or will not) read.
    PullRts {
        /// The sender's id for the message (echoed in Pulled or Cts).
        msg_id: u64,
        /// The tag.
        tag: u64,
        /// The message length.
        len: u64,
        /// Where the message's bytes start in the sender's address space
        /// (valid until the send completes).
        addr: u64,
    },
    /// The receiver read this many bytes of the message (its accepted
    /// length) itself: the send is done.
    Pulled {
        /// The message, as the PullRts named it.
        msg_id: u64,
        /// Bytes read (at most the message's length).
        len: u64,
    },
    /// Clear to send.
    Cts {
        /// The message, as the Rts named it.
        msg_id: u64,
        /// The receiver's token, carried by every Data frame.
        token: u64,
        /// How many bytes the receiver takes (less than the message when
        /// its buffer is smaller).
        len: u64,
    },
    /// A chunk of a rendezvous message, in order.
    Data {
        /// The receiver's token from the Cts.
        token: u64,
        /// Where the chunk starts in the message.
        offset: u64,
        /// The bytes (never empty).
        payload: Bytes,
    },
    /// An AM request.
    AmRequest(AmFrame),
    /// An AM reply.
    AmReply(AmFrame),
    /// Graceful close.
    Bye,
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello(_) => FrameKind::Hello,
            Frame::HelloAck(_) => FrameKind::HelloAck,
            Frame::Refuse(_) => FrameKind::Refuse,
            Frame::Credit { .. } => FrameKind::Credit,
            Frame::Session { .. } => FrameKind::Session,
            Frame::Ack { .. } => FrameKind::Ack,
            Frame::Challenge { .. } => FrameKind::Challenge,
            Frame::Proof { .. } => FrameKind::Proof,
            Frame::AuthChallenge { .. } => FrameKind::AuthChallenge,
            Frame::AuthProof { .. } => FrameKind::AuthProof,
            Frame::ShmOffer { .. } => FrameKind::ShmOffer,
            Frame::ShmSwitch => FrameKind::ShmSwitch,
            Frame::ShmDecline => FrameKind::ShmDecline,
            Frame::Eager { .. } => FrameKind::Eager,
            Frame::Rts { .. } => FrameKind::Rts,
            Frame::Cts { .. } => FrameKind::Cts,
            Frame::Data { .. } => FrameKind::Data,
            Frame::PullRts { .. } => FrameKind::PullRts,
            Frame::Pulled { .. } => FrameKind::Pulled,
            Frame::AmRequest(_) => FrameKind::AmRequest,
            Frame::AmReply(_) => FrameKind::AmReply,
            Frame::Bye => FrameKind::Bye,
        }
    }

    /// Bytes the frame takes on the wire, header included.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Frame::Hello(_) | Frame::HelloAck(_) => HELLO_BODY,
                Frame::Refuse(_) => REFUSE_BODY,
                Frame::Credit { .. } => CREDIT_BODY,
                Frame::Session { .. } => SESSION_BODY,
                Frame::Ack { .. } => ACK_BODY,
                Frame::Challenge { .. } => CHALLENGE_BODY,
                Frame::Proof { .. } => PROOF_BODY,
                Frame::AuthChallenge { .. } => AUTH_CHALLENGE_BODY,
                Frame::AuthProof { .. } => AUTH_PROOF_BODY,
                Frame::ShmOffer { .. } => SHM_OFFER_BODY,
                Frame::ShmSwitch | Frame::ShmDecline => 0,
                Frame::Eager { payload, .. } => 8 + payload.len(),
                Frame::Rts { .. } | Frame::Cts { .. } => 24,
                Frame::PullRts { .. } => 32,
                Frame::Pulled { .. } => 16,
                Frame::Data { payload, .. } => 16 + payload.len(),
                Frame::AmRequest(am) | Frame::AmReply(am) => {
                    am_body_len(am.args.len(), am.payload.len())
                }
                Frame::Bye => 0,
            }
    }
}

pub(crate) const HELLO_BODY: usize = 58;
const REFUSE_BODY: usize = 19;
const CREDIT_BODY: usize = 16;
const SESSION_BODY: usize = 32 + SEAL_LEN;
const ACK_BODY: usize = 8;
const CHALLENGE_BODY: usize = 24;
const PROOF_BODY: usize = 8;
const AUTH_CHALLENGE_BODY: usize = 16;
const AUTH_PROOF_BODY: usize = 48;
const SHM_OFFER_BODY: usize = 8;

/// The `resume` of a [`Frame::Session`] that starts a new link.
pub const NEW_LINK: u64 = u64::MAX;

/// Bytes of a [`Frame::Session`]'s seal (a key half or a proof).
pub const SEAL_LEN: usize = 16;

fn am_body_len(nargs: usize, payload: usize) -> usize {
    4 + 8 * nargs + payload
}

/// The smallest and largest body a frame of `kind` may declare when the
/// receiver accepts `limits`.
pub(crate) fn body_bounds(kind: FrameKind, limits: &FrameLimits) -> (u32, u32) {
    let fixed = |n: usize| (n as u32, n as u32);
    match kind {
        FrameKind::Hello | FrameKind::HelloAck => fixed(HELLO_BODY),
        FrameKind::Refuse => fixed(REFUSE_BODY),
        FrameKind::Credit => fixed(CREDIT_BODY),
        FrameKind::Session => fixed(SESSION_BODY),
        FrameKind::Ack => fixed(ACK_BODY),
        FrameKind::Challenge => fixed(CHALLENGE_BODY),
        FrameKind::Proof => fixed(PROOF_BODY),
        FrameKind::AuthChallenge => fixed(AUTH_CHALLENGE_BODY),
        FrameKind::AuthProof => fixed(AUTH_PROOF_BODY),
        FrameKind::ShmOffer => fixed(SHM_OFFER_BODY),
        FrameKind::ShmSwitch | FrameKind::ShmDecline => fixed(0),
        FrameKind::Eager => (8, 8 + limits.max_eager),
        FrameKind::Rts | FrameKind::Cts => fixed(24),
        FrameKind::PullRts => fixed(32),
        FrameKind::Pulled => fixed(16),
        FrameKind::Data => (17, 16 + limits.max_chunk),
        FrameKind::AmRequest | FrameKind::AmReply => (
            4,
            4 + 8 * u32::from(limits.max_am_args) + limits.max_am_payload,
        ),
        FrameKind::Bye => fixed(0),
    }
}

fn put_header(out: &mut BytesMut, kind: FrameKind, body: usize) {
    let body = u32::try_from(body).expect("frame bodies are far below 4 GiB");
    out.reserve(HEADER_LEN + body as usize);
    out.put_u8(kind as u8);
    out.put_u8(0);
    out.put_u16_le(0);
    out.put_u32_le(body);
}

fn put_hello(out: &mut BytesMut, kind: FrameKind, h: &Hello) {
    put_header(out, kind, HELLO_BODY);
    out.put_slice(&h.magic);
    out.put_u16_le(h.version);
    out.put_slice(&h.uuid.0);
    out.put_u64_le(h.epid.0);
    out.put_u32_le(h.limits.max_eager);
    out.put_u32_le(h.limits.max_chunk);
    out.put_u32_le(h.limits.max_am_payload);
    out.put_u16_le(h.limits.max_am_args);
    out.put_u16_le(h.limits.max_am_handlers);
    out.put_u64_le(h.limits.max_message);
}

/// Appends an Eager frame whose payload is borrowed.
pub(crate) fn put_eager(out: &mut BytesMut, tag: u64, payload: &[u8]) {
    put_header(out, FrameKind::Eager, 8 + payload.len());
    out.put_u64_le(tag);
    out.put_slice(payload);
}

/// Appends the header and tag of an Eager frame carrying `len` payload
/// bytes; the payload itself must follow on the wire (vectored transmit).
pub(crate) fn put_eager_header(out: &mut BytesMut, tag: u64, len: usize) {
    let body = u32::try_from(8 + len).expect("frame bodies are far below 4 GiB");
    out.reserve(HEADER_LEN + 8);
    out.put_u8(FrameKind::Eager as u8);
    out.put_u8(0);
    out.put_u16_le(0);
    out.put_u32_le(body);
    out.put_u64_le(tag);
}

/// Appends a Data frame whose payload is borrowed.
pub(crate) fn put_data(out: &mut BytesMut, token: u64, offset: u64, payload: &[u8]) {
    put_data_header(out, token, offset, payload.len());
    out.put_slice(payload);
}

/// Appends the first [`DATA_PREFIX`] bytes of a Data frame carrying `len`
/// payload bytes; the payload itself must follow on the wire (vectored
/// transmit, [`SoftCore::poll_transmit_vectored`](crate::engine::soft::SoftCore::poll_transmit_vectored)).
pub(crate) fn put_data_header(out: &mut BytesMut, token: u64, offset: u64, len: usize) {
    let body = u32::try_from(16 + len).expect("frame bodies are far below 4 GiB");
    out.reserve(DATA_PREFIX);
    out.put_u8(FrameKind::Data as u8);
    out.put_u8(0);
    out.put_u16_le(0);
    out.put_u32_le(body);
    out.put_u64_le(token);
    out.put_u64_le(offset);
}

/// Bytes of a Data frame before its payload: header, token, offset.
pub(crate) const DATA_PREFIX: usize = HEADER_LEN + 16;

fn put_am(out: &mut BytesMut, kind: FrameKind, am: &AmFrame) {
    let args = am.args.as_slice();
    put_header(out, kind, am_body_len(args.len(), am.payload.len()));
    out.put_u16_le(am.handler);
    out.put_u8(args.len() as u8);
    out.put_u8(0);
    for a in args {
        out.put_u64_le(*a);
    }
    out.put_slice(&am.payload);
}

/// Appends the encoding of `frame` to `out`.
///
/// Encoding does not check the receiver's limits (the sender's state
/// machine does); it panics only for a body of 4 GiB or more.
pub fn encode(frame: &Frame, out: &mut BytesMut) {
    match frame {
        Frame::Hello(h) => put_hello(out, FrameKind::Hello, h),
        Frame::HelloAck(h) => put_hello(out, FrameKind::HelloAck, h),
        Frame::Refuse(r) => {
            put_header(out, FrameKind::Refuse, REFUSE_BODY);
            out.put_u8(r.code as u8);
            out.put_u16_le(r.version);
            out.put_slice(&r.uuid.0);
        }
        Frame::Credit {
            eager_bytes,
            rts,
            am,
        } => {
            put_header(out, FrameKind::Credit, CREDIT_BODY);
            out.put_u64_le(*eager_bytes);
            out.put_u32_le(*rts);
            out.put_u32_le(*am);
        }
        Frame::Session {
            link,
            resume,
            incarnation,
            generation,
            seal,
        } => {
            put_header(out, FrameKind::Session, SESSION_BODY);
            out.put_u64_le(*link);
            out.put_u64_le(*resume);
            out.put_u64_le(*incarnation);
            out.put_u64_le(*generation);
            out.put_slice(seal);
        }
        Frame::Ack { received } => {
            put_header(out, FrameKind::Ack, ACK_BODY);
            out.put_u64_le(*received);
        }
        Frame::Challenge { nonce, from, link } => {
            put_header(out, FrameKind::Challenge, CHALLENGE_BODY);
            out.put_u64_le(*nonce);
            out.put_u64_le(from.0);
            out.put_u64_le(*link);
        }
        Frame::Proof { nonce } => {
            put_header(out, FrameKind::Proof, PROOF_BODY);
            out.put_u64_le(*nonce);
        }
        Frame::AuthChallenge { nonce } => {
            put_header(out, FrameKind::AuthChallenge, AUTH_CHALLENGE_BODY);
            out.put_slice(nonce);
        }
        Frame::AuthProof { nonce, mac } => {
            put_header(out, FrameKind::AuthProof, AUTH_PROOF_BODY);
            out.put_slice(nonce);
            out.put_slice(mac);
        }
        Frame::ShmOffer { segment_len } => {
            put_header(out, FrameKind::ShmOffer, SHM_OFFER_BODY);
            out.put_u64_le(*segment_len);
        }
        Frame::ShmSwitch => put_header(out, FrameKind::ShmSwitch, 0),
        Frame::ShmDecline => put_header(out, FrameKind::ShmDecline, 0),
        Frame::Eager { tag, payload } => put_eager(out, *tag, payload),
        Frame::Rts { msg_id, tag, len } => {
            put_header(out, FrameKind::Rts, 24);
            out.put_u64_le(*msg_id);
            out.put_u64_le(*tag);
            out.put_u64_le(*len);
        }
        Frame::PullRts {
            msg_id,
            tag,
            len,
            addr,
        } => {
            put_header(out, FrameKind::PullRts, 32);
            out.put_u64_le(*msg_id);
            out.put_u64_le(*tag);
            out.put_u64_le(*len);
            out.put_u64_le(*addr);
        }
        Frame::Pulled { msg_id, len } => {
            put_header(out, FrameKind::Pulled, 16);
            out.put_u64_le(*msg_id);
            out.put_u64_le(*len);
        }
        Frame::Cts { msg_id, token, len } => {
            put_header(out, FrameKind::Cts, 24);
            out.put_u64_le(*msg_id);
            out.put_u64_le(*token);
            out.put_u64_le(*len);
        }
        Frame::Data {
            token,
            offset,
            payload,
        } => put_data(out, *token, *offset, payload),
        Frame::AmRequest(am) => put_am(out, FrameKind::AmRequest, am),
        Frame::AmReply(am) => put_am(out, FrameKind::AmReply, am),
        Frame::Bye => put_header(out, FrameKind::Bye, 0),
    }
}

/// Reads little-endian integers at fixed offsets of a body whose length
/// has already been checked.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn arr<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[at..at + N]);
        a
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.arr(at))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.arr(at))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.arr(at))
    }
}

/// Splits a byte stream into frames, checking every field.
///
/// ```
/// use bytes::BytesMut;
/// use psmrail::engine::soft::wire::{encode, Frame, FrameDecoder, FrameLimits};
///
/// let mut wire = BytesMut::new();
/// encode(&Frame::Rts { msg_id: 1, tag: 7, len: 1 << 20 }, &mut wire);
/// let dec = FrameDecoder::new(FrameLimits::DEFAULT);
/// let mut input = BytesMut::new();
/// input.extend_from_slice(&wire[..5]);
/// assert_eq!(dec.decode(&mut input), Ok(None)); // needs more bytes
/// input.extend_from_slice(&wire[5..]);
/// assert_eq!(dec.decode(&mut input), Ok(Some(Frame::Rts { msg_id: 1, tag: 7, len: 1 << 20 })));
/// assert!(input.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    limits: FrameLimits,
}

impl FrameDecoder {
    /// A decoder accepting frames within `limits`.
    pub fn new(limits: FrameLimits) -> Self {
        FrameDecoder { limits }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &FrameLimits {
        &self.limits
    }

    /// Checks as much of the header as `buf` holds; the kind and declared
    /// body length once all of it is there.
    fn header(&self, buf: &[u8]) -> Result<Option<(FrameKind, u32)>, WireError> {
        let Some(&k) = buf.first() else {
            return Ok(None);
        };
        let kind = FrameKind::from_u8(k).ok_or(WireError::UnknownKind(k))?;
        if let Some(&flags) = buf.get(1) {
            if flags != 0 {
                return Err(WireError::BadFlags { kind, flags });
            }
        }
        if buf[2.min(buf.len())..4.min(buf.len())]
            .iter()
            .any(|&b| b != 0)
        {
            return Err(WireError::Reserved { kind });
        }
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = Body(buf).u32(4);
        let (min, max) = body_bounds(kind, &self.limits);
        if len > max {
            return Err(WireError::TooLong { kind, len, max });
        }
        if len < min {
            return Err(WireError::TooShort { kind, len, min });
        }
        Ok(Some((kind, len)))
    }

    /// If `buf` starts with a Data frame whose header, token and offset
    /// are there (the first [`DATA_PREFIX`] bytes), checked as
    /// [`decode`](Self::decode) would check them: its token, offset and
    /// payload length. `Ok(None)` for another kind or too few bytes.
    pub(crate) fn peek_data(&self, buf: &[u8]) -> Result<Option<(u64, u64, usize)>, WireError> {
        let Some((kind, len)) = self.header(buf)? else {
            return Ok(None);
        };
        if kind != FrameKind::Data || buf.len() < DATA_PREFIX {
            return Ok(None);
        }
        let b = Body(&buf[HEADER_LEN..DATA_PREFIX]);
        let (token, offset) = (b.u64(0), b.u64(8));
        let n = (len - 16) as u64;
        match offset.checked_add(n) {
            Some(end) if end <= self.limits.max_message => {}
            _ => {
                return Err(WireError::MessageTooLong {
                    field: "Data end offset",
                    value: offset.saturating_add(n),
                    max: self.limits.max_message,
                })
            }
        }
        Ok(Some((token, offset, n as usize)))
    }

    /// Takes the next complete frame off the front of `buf`.
    ///
    /// `Ok(None)`: more bytes are needed; the decoder then reserves room
    /// for the rest of the current frame (never more than the kind's cap,
    /// checked from the header alone). `Err`: the stream is invalid and the
    /// connection must be closed; `buf` is left in an unspecified state.
    /// Payloads of the returned frame share `buf`'s memory.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        let Some((kind, len)) = self.header(buf)? else {
            return Ok(None);
        };
        let total = HEADER_LEN + len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(total).freeze();
        let body = frame.split_off(HEADER_LEN);
        self.body(kind, body).map(Some)
    }

    fn body(&self, kind: FrameKind, body: Bytes) -> Result<Frame, WireError> {
        let b = Body(&body);
        let l = &self.limits;
        let too_long = |field, value| WireError::MessageTooLong {
            field,
            value,
            max: l.max_message,
        };
        Ok(match kind {
            FrameKind::Hello | FrameKind::HelloAck => {
                let h = Hello {
                    magic: b.arr(0),
                    version: b.u16(8),
                    uuid: super::JobUuid(b.arr(10)),
                    epid: Epid(b.u64(26)),
                    limits: FrameLimits {
                        max_eager: b.u32(34),
                        max_chunk: b.u32(38),
                        max_am_payload: b.u32(42),
                        max_am_args: b.u16(46),
                        max_am_handlers: b.u16(48),
                        max_message: b.u64(50),
                    },
                };
                // The rest of the layout is only ours to judge when magic
                // and version are; otherwise the handshake refuses it.
                if h.is_our_protocol() {
                    if h.epid.0 & RESERVED_EPID_BITS != 0 {
                        return Err(WireError::ReservedEpidBits(h.epid.0));
                    }
                    h.limits.validate()?;
                }
                if kind == FrameKind::Hello {
                    Frame::Hello(h)
                } else {
                    Frame::HelloAck(h)
                }
            }
            FrameKind::Refuse => {
                let code = RefuseCode::from_u8(body[0]).ok_or(WireError::BadRefuseCode(body[0]))?;
                Frame::Refuse(Refuse {
                    code,
                    version: b.u16(1),
                    uuid: super::JobUuid(b.arr(3)),
                })
            }
            FrameKind::ShmOffer => Frame::ShmOffer {
                segment_len: b.u64(0),
            },
            FrameKind::ShmSwitch => Frame::ShmSwitch,
            FrameKind::ShmDecline => Frame::ShmDecline,
            FrameKind::Credit => Frame::Credit {
                eager_bytes: b.u64(0),
                rts: b.u32(8),
                am: b.u32(12),
            },
            FrameKind::Session => {
                let link = b.u64(0);
                if link == 0 {
                    return Err(WireError::ZeroLink);
                }
                Frame::Session {
                    link,
                    resume: b.u64(8),
                    incarnation: b.u64(16),
                    generation: b.u64(24),
                    seal: b.arr(32),
                }
            }
            FrameKind::Ack => Frame::Ack { received: b.u64(0) },
            FrameKind::Challenge => {
                let from = b.u64(8);
                if from & RESERVED_EPID_BITS != 0 {
                    return Err(WireError::ReservedEpidBits(from));
                }
                Frame::Challenge {
                    nonce: b.u64(0),
                    from: Epid(from),
                    link: b.u64(16),
                }
            }
            FrameKind::Proof => Frame::Proof { nonce: b.u64(0) },
            FrameKind::AuthChallenge => Frame::AuthChallenge { nonce: b.arr(0) },
            FrameKind::AuthProof => Frame::AuthProof {
                nonce: b.arr(0),
                mac: b.arr(16),
            },
            FrameKind::Eager => Frame::Eager {
                tag: b.u64(0),
                payload: body.slice(8..),
            },
            FrameKind::Rts => {
                let len = b.u64(16);
                if len > l.max_message {
                    return Err(too_long("Rts length", len));
                }
                Frame::Rts {
                    msg_id: b.u64(0),
                    tag: b.u64(8),
                    len,
                }
            }
            FrameKind::PullRts => {
                let len = b.u64(16);
                if len > l.max_message {
                    return Err(too_long("PullRts length", len));
                }
                Frame::PullRts {
                    msg_id: b.u64(0),
                    tag: b.u64(8),
                    len,
                    addr: b.u64(24),
                }
            }
            FrameKind::Pulled => {
                let len = b.u64(8);
                if len > l.max_message {
                    return Err(too_long("Pulled length", len));
                }
                Frame::Pulled {
                    msg_id: b.u64(0),
                    len,
                }
            }
            FrameKind::Cts => {
                let len = b.u64(16);
                if len > l.max_message {
                    return Err(too_long("Cts length", len));
                }
                Frame::Cts {
                    msg_id: b.u64(0),
                    token: b.u64(8),
                    len,
                }
            }
            FrameKind::Data => {
                let offset = b.u64(8);
                let n = (body.len() - 16) as u64;
                match offset.checked_add(n) {
                    Some(end) if end <= l.max_message => {}
                    _ => return Err(too_long("Data end offset", offset.saturating_add(n))),
                }
                Frame::Data {
                    token: b.u64(0),
                    offset,
                    payload: body.slice(16..),
                }
            }
            FrameKind::AmRequest | FrameKind::AmReply => {
                let handler = b.u16(0);
                let nargs = body[2];
                if body[3] != 0 {
                    return Err(WireError::Reserved { kind });
                }
                if handler >= l.max_am_handlers {
                    return Err(WireError::BadHandler {
                        handler,
                        max: l.max_am_handlers,
                    });
                }
                let args_end = 4 + 8 * usize::from(nargs);
                if u16::from(nargs) > l.max_am_args || body.len() < args_end {
                    return Err(WireError::BadAmArgs {
                        nargs,
                        max: l.max_am_args,
                    });
                }
                if body.len() - args_end > l.max_am_payload as usize {
                    return Err(WireError::TooLong {
                        kind,
                        len: body.len() as u32,
                        max: (args_end as u32) + l.max_am_payload,
                    });
                }
                let mut vals = [0u64; MAX_WIRE_AM_ARGS];
                for (i, v) in vals.iter_mut().take(usize::from(nargs)).enumerate() {
                    *v = b.u64(4 + 8 * i);
                }
                let am = AmFrame {
                    handler,
                    args: AmArgs { len: nargs, vals },
                    payload: body.slice(args_end..),
                };
                if kind == FrameKind::AmRequest {
                    Frame::AmRequest(am)
                } else {
                    Frame::AmReply(am)
                }
            }
            FrameKind::Bye => Frame::Bye,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{JobUuid, MAGIC, PROTOCOL_VERSION};
    use super::*;
    use proptest::prelude::*;

    fn dec() -> FrameDecoder {
        FrameDecoder::new(FrameLimits::DEFAULT)
    }

    fn hello() -> Hello {
        Hello::ours(JobUuid([7; 16]), Epid(0x1234), FrameLimits::DEFAULT)
    }

    fn bytes_of(f: &Frame) -> BytesMut {
        let mut b = BytesMut::new();
        encode(f, &mut b);
        assert_eq!(b.len(), f.encoded_len(), "{f:?}");
        b
    }

    fn payload(max: usize) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    fn am_frame() -> impl Strategy<Value = AmFrame> {
        (
            0u16..256,
            proptest::collection::vec(any::<u64>(), 0..=10),
            payload(300),
        )
            .prop_map(|(handler, args, payload)| AmFrame {
                handler,
                args: AmArgs::new(&args).unwrap(),
                payload,
            })
    }

    fn frame() -> impl Strategy<Value = Frame> {
        let epid = (0u64..(1 << 62)).prop_map(Epid);
        let hello = (any::<[u8; 16]>(), epid)
            .prop_map(|(u, e)| Hello::ours(JobUuid(u), e, FrameLimits::DEFAULT));
        let refuse = (1u8..=7, any::<u16>(), any::<[u8; 16]>()).prop_map(|(c, v, u)| {
            Frame::Refuse(Refuse {
                code: RefuseCode::from_u8(c).unwrap(),
                version: v,
                uuid: JobUuid(u),
            })
        });
        prop_oneof![
            hello.clone().prop_map(Frame::Hello),
            hello.prop_map(Frame::HelloAck),
            refuse,
            (
                1u64..,
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<[u8; SEAL_LEN]>()
            )
                .prop_map(|(link, resume, incarnation, generation, seal)| {
                    Frame::Session {
                        link,
                        resume,
                        incarnation,
                        generation,
                        seal,
                    }
                }),
            any::<u64>().prop_map(|received| Frame::Ack { received }),
            (any::<u64>(), 0u64..(1 << 62), any::<u64>()).prop_map(|(nonce, e, link)| {
                Frame::Challenge {
                    nonce,
                    from: Epid(e),
                    link,
                }
            }),
            any::<u64>().prop_map(|nonce| Frame::Proof { nonce }),
            any::<[u8; 16]>().prop_map(|nonce| Frame::AuthChallenge { nonce }),
            (any::<[u8; 16]>(), any::<[u8; 32]>())
                .prop_map(|(nonce, mac)| Frame::AuthProof { nonce, mac }),
            (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(eager_bytes, rts, am)| {
                Frame::Credit {
                    eager_bytes,
                    rts,
                    am,
                }
            }),
            (any::<u64>(), payload(600)).prop_map(|(tag, payload)| Frame::Eager { tag, payload }),
            (any::<u64>(), any::<u64>(), 0..=u64::from(u32::MAX))
                .prop_map(|(msg_id, tag, len)| Frame::Rts { msg_id, tag, len }),
            (any::<u64>(), any::<u64>(), 0..=u64::from(u32::MAX))
                .prop_map(|(msg_id, token, len)| Frame::Cts { msg_id, token, len }),
            (
                any::<u64>(),
                0u64..1 << 31,
                payload(600).prop_filter("non-empty", |p| !p.is_empty())
            )
                .prop_map(|(token, offset, payload)| Frame::Data {
                    token,
                    offset,
                    payload
                }),
            am_frame().prop_map(Frame::AmRequest),
            am_frame().prop_map(Frame::AmReply),
            Just(Frame::Bye),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn every_kind_round_trips(f in frame()) {
            let wire = bytes_of(&f);
            let mut input = wire.clone();
            prop_assert_eq!(dec().decode(&mut input).unwrap(), Some(f));
            prop_assert!(input.is_empty());
        }

        #[test]
        fn split_anywhere(fs in proptest::collection::vec(frame(), 1..6), cuts in proptest::collection::vec(1usize..40, 1..50)) {
            let mut wire = BytesMut::new();
            for f in &fs { encode(f, &mut wire); }
            let mut input = BytesMut::new();
            let mut got = Vec::new();
            let (mut pos, mut cut) = (0, cuts.iter().cycle());
            while pos < wire.len() {
                let n = (*cut.next().unwrap()).min(wire.len() - pos);
                input.extend_from_slice(&wire[pos..pos + n]);
                pos += n;
                while let Some(f) = dec().decode(&mut input).unwrap() { got.push(f); }
            }
            prop_assert_eq!(got, fs);
            prop_assert!(input.is_empty());
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let fs = [
            Frame::Hello(hello()),
            Frame::Eager {
                tag: 5,
                payload: Bytes::from_static(b"hello world"),
            },
            Frame::Eager {
                tag: 6,
                payload: Bytes::new(),
            },
            Frame::Data {
                token: 1,
                offset: 0,
                payload: Bytes::from(vec![9u8; 1000]),
            },
            Frame::Bye,
        ];
        let mut wire = BytesMut::new();
        for f in &fs {
            encode(f, &mut wire);
        }
        let mut input = BytesMut::new();
        let mut got = Vec::new();
        for b in wire.iter() {
            input.extend_from_slice(&[*b]);
            if let Some(f) = dec().decode(&mut input).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, fs);
    }

    #[test]
    fn payloads_share_the_input_buffer() {
        let mut input = bytes_of(&Frame::Eager {
            tag: 1,
            payload: Bytes::from(vec![3u8; 4096]),
        });
        let base = input.as_ptr() as usize;
        let Some(Frame::Eager { payload, .. }) = dec().decode(&mut input).unwrap() else {
            panic!("not eager");
        };
        assert_eq!(payload.as_ptr() as usize, base + HEADER_LEN + 8);
    }

    fn header(kind: u8, flags: u8, reserved: u16, len: u32) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u8(kind);
        b.put_u8(flags);
        b.put_u16_le(reserved);
        b.put_u32_le(len);
        b
    }

    #[test]
    fn huge_declared_length_is_rejected_before_reading() {
        for kind in [0x10u8, 0x13, 0x20, 0x01, 0x7f] {
            let mut input = header(kind, 0, 0, u32::MAX);
            let cap = input.capacity();
            let err = dec().decode(&mut input).unwrap_err();
            assert!(
                matches!(err, WireError::TooLong { len: u32::MAX, .. }),
                "{err}"
            );
            assert_eq!(input.capacity(), cap, "nothing reserved");
        }
    }

    #[test]
    fn growth_is_bounded_by_the_frame_cap() {
        let l = FrameLimits::DEFAULT;
        let max = 16 + l.max_chunk;
        let mut input = header(0x13, 0, 0, max);
        assert_eq!(dec().decode(&mut input), Ok(None));
        let cap = input.capacity();
        assert!(cap >= HEADER_LEN + max as usize);
        assert!(cap <= 2 * (HEADER_LEN + l.max_body() as usize), "cap {cap}");
        // One byte more than the cap is refused outright.
        let mut input = header(0x13, 0, 0, max + 1);
        assert!(matches!(
            dec().decode(&mut input),
            Err(WireError::TooLong { .. })
        ));
    }

    #[test]
    fn hostile_inputs_get_specific_errors() {
        let d = dec();
        let check = |bytes: &[u8], want: fn(&WireError) -> bool| {
            let mut b = BytesMut::from(bytes);
            let e = d.decode(&mut b).expect_err("must fail");
            assert!(want(&e), "{bytes:02x?}: {e}");
        };
        // Unknown kind: rejected from its first byte.
        check(&[0x55], |e| *e == WireError::UnknownKind(0x55));
        check(b"GET / HTTP/1.1\r\n", |e| {
            *e == WireError::UnknownKind(b'G')
        });
        // Flags and reserved bits.
        check(&[0x10, 0x80], |e| {
            matches!(e, WireError::BadFlags { flags: 0x80, .. })
        });
        check(&header(0x10, 0, 1, 8), |e| {
            matches!(e, WireError::Reserved { .. })
        });
        // Lengths wrong for the kind.
        check(&header(0x7f, 0, 0, 1), |e| {
            matches!(
                e,
                WireError::TooLong {
                    kind: FrameKind::Bye,
                    ..
                }
            )
        });
        check(&header(0x11, 0, 0, 23), |e| {
            matches!(e, WireError::TooShort { min: 24, .. })
        });
        check(&header(0x01, 0, 0, 57), |e| {
            matches!(e, WireError::TooShort { .. })
        });
        check(&header(0x13, 0, 0, 16), |e| {
            matches!(e, WireError::TooShort { min: 17, .. })
        });
        // Field values.
        let mut rts = header(0x11, 0, 0, 24);
        rts.put_u64_le(1);
        rts.put_u64_le(2);
        rts.put_u64_le(u64::from(u32::MAX) + 1);
        check(&rts, |e| matches!(e, WireError::MessageTooLong { .. }));
        let mut data = header(0x13, 0, 0, 17);
        data.put_u64_le(1);
        data.put_u64_le(u64::MAX);
        data.put_u8(0);
        check(&data, |e| matches!(e, WireError::MessageTooLong { .. }));
        let mut refuse = header(0x03, 0, 0, 19);
        refuse.put_u8(99);
        refuse.put_slice(&[0; 18]);
        check(&refuse, |e| *e == WireError::BadRefuseCode(99));
        let mut am = header(0x20, 0, 0, 4);
        am.put_u16_le(256);
        am.put_u16_le(0);
        check(&am, |e| {
            matches!(e, WireError::BadHandler { handler: 256, .. })
        });
        let mut am = header(0x20, 0, 0, 4 + 8 * 11);
        am.put_u16_le(1);
        am.put_u8(11);
        am.put_u8(0);
        am.put_slice(&[0; 88]);
        check(&am, |e| matches!(e, WireError::BadAmArgs { nargs: 11, .. }));
        let mut am = header(0x21, 0, 0, 4 + 8);
        am.put_u16_le(1);
        am.put_u8(2); // two args declared, room for one
        am.put_u8(0);
        am.put_u64_le(0);
        check(&am, |e| matches!(e, WireError::BadAmArgs { nargs: 2, .. }));
        let mut am = header(0x21, 0, 0, 4 + 8129);
        am.put_u16_le(1);
        am.put_u16_le(0);
        am.put_slice(&[0; 8129]);
        check(&am, |e| matches!(e, WireError::TooLong { .. }));
        let mut am = header(0x20, 0, 0, 4);
        am.put_u16_le(1);
        am.put_u8(0);
        am.put_u8(1);
        check(&am, |e| matches!(e, WireError::Reserved { .. }));
        // Hello with our magic and version is checked field by field.
        let mut h = hello();
        h.epid = Epid(1 << 63);
        check(&bytes_of(&Frame::Hello(h)), |e| {
            matches!(e, WireError::ReservedEpidBits(_))
        });
        let mut h = hello();
        h.limits.max_chunk = 0;
        check(&bytes_of(&Frame::Hello(h)), |e| {
            matches!(
                e,
                WireError::BadLimit {
                    field: "max_chunk",
                    ..
                }
            )
        });
        // ... but another version's Hello decodes, for the handshake to refuse.
        let mut h = hello();
        h.version = PROTOCOL_VERSION + 1;
        h.limits.max_chunk = 0;
        let mut b = bytes_of(&Frame::Hello(h.clone()));
        assert_eq!(d.decode(&mut b), Ok(Some(Frame::Hello(h))));
        let mut h = hello();
        h.magic = *b"NOTPSMRL";
        h.epid = Epid(u64::MAX);
        let mut b = bytes_of(&Frame::HelloAck(h.clone()));
        assert_eq!(d.decode(&mut b), Ok(Some(Frame::HelloAck(h))));
        assert_eq!(MAGIC, *b"PSMRAIL\0");
    }

    #[test]
    fn truncated_frames_wait_for_more() {
        let wire = bytes_of(&Frame::AmRequest(AmFrame {
            handler: 3,
            args: AmArgs::new(&[1, 2, 3]).unwrap(),
            payload: Bytes::from_static(b"xyz"),
        }));
        for n in 0..wire.len() {
            let mut b = BytesMut::from(&wire[..n]);
            assert_eq!(dec().decode(&mut b), Ok(None), "prefix {n}");
            assert_eq!(b.len(), n, "nothing consumed");
        }
    }

    #[test]
    fn smaller_limits_are_enforced() {
        let l = FrameLimits {
            max_eager: 4,
            max_am_args: 2,
            max_am_payload: 30,
            ..FrameLimits::DEFAULT
        };
        let d = FrameDecoder::new(l);
        let mut b = bytes_of(&Frame::Eager {
            tag: 0,
            payload: Bytes::from_static(b"12345"),
        });
        assert!(matches!(
            d.decode(&mut b),
            Err(WireError::TooLong { max: 12, .. })
        ));
        let mut b = bytes_of(&Frame::AmReply(AmFrame {
            handler: 0,
            args: AmArgs::new(&[1, 2, 3]).unwrap(),
            payload: Bytes::new(),
        }));
        assert!(matches!(
            d.decode(&mut b),
            Err(WireError::BadAmArgs { nargs: 3, max: 2 })
        ));
        let mut b = bytes_of(&Frame::AmReply(AmFrame {
            handler: 0,
            args: AmArgs::new(&[]).unwrap(),
            payload: Bytes::from(vec![0u8; 31]),
        }));
        // Within the frame cap (4 + 2 * 8 + 30) but over the payload limit.
        assert!(matches!(
            d.decode(&mut b),
            Err(WireError::TooLong {
                len: 35,
                max: 34,
                ..
            })
        ));
    }

    #[test]
    fn am_args_bounds() {
        assert!(AmArgs::new(&[0; 17]).is_none());
        let a = AmArgs::new(&[1, 2]).unwrap();
        assert_eq!(
            (a.len(), a.as_slice(), a.is_empty()),
            (2, &[1u64, 2][..], false)
        );
        assert_eq!(format!("{a:?}"), "[1, 2]");
    }
}
