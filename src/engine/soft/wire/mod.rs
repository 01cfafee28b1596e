//! The soft engine's wire protocol: frames and the handshake.
//!
//! # Framing
//!
//! A connection carries a stream of frames. Every frame starts with a fixed
//! 8-byte header, all integers little-endian:
//!
//! | offset | size | field                                   |
//! |--------|------|-----------------------------------------|
//! | 0      | 1    | kind ([`FrameKind`])                    |
//! | 1      | 1    | flags (none defined in version 1: 0)    |
//! | 2      | 2    | reserved, 0                             |
//! | 4      | 4    | body length in bytes                    |
//!
//! The body length is checked against the kind's bounds (and the
//! receiver's [`FrameLimits`]) **before** any byte of the body is awaited or
//! any memory reserved for it. Unknown kinds, non-zero flags or reserved
//! bits, out-of-range fields and lengths that do not match the kind are
//! errors ([`WireError`]); the connection that sent them is closed and
//! nothing else is touched. Decoding is canonical: a decoded frame encodes
//! back to exactly the bytes it came from.
//!
//! # Frames
//!
//! | kind | name       | body                                                        |
//! |------|------------|-------------------------------------------------------------|
//! | 0x01 | Hello      | magic `PSMRAIL\0`, version u16, job uuid (16 B), epid u64, limits (24 B): 58 B |
//! | 0x02 | HelloAck   | as Hello, from the acceptor                                 |
//! | 0x03 | Refuse     | reason u8, refuser's version u16, 16 B sent as zeros (never a job uuid): 19 B |
//! | 0x04 | Credit     | eager bytes u64, rendezvous entries u32, AM requests u32: 16 B |
//! | 0x05 | Session    | link id u64 (never 0), resume point u64 (`u64::MAX`: a new link), incarnation u64, generation u64, seal (16 B): 48 B |
//! | 0x06 | Ack        | stream bytes consumed u64: 8 B                              |
//! | 0x07 | Challenge  | nonce u64, the asking acceptor's epid u64, link id u64: 24 B |
//! | 0x08 | Proof      | nonce u64: 8 B                                              |
//! | 0x09 | AuthChallenge | nonce (16 B): 16 B                                       |
//! | 0x0a | AuthProof  | nonce (16 B), HMAC-SHA256 (32 B): 48 B                      |
//! | 0x0b | ShmOffer   | segment length u64 (the memfd rides with the socket bytes, `SCM_RIGHTS`): 8 B |
//! | 0x0c | ShmSwitch  | empty: the sender's later frames come through the shared segment |
//! | 0x0d | ShmDecline | empty: the link stays on its socket                         |
//! | 0x10 | Eager      | tag u64, payload (≤ receiver's `max_eager`)                 |
//! | 0x11 | Rts        | msg id u64, tag u64, length u64: 24 B                       |
//! | 0x12 | Cts        | msg id u64, receiver token u64, accepted length u64: 24 B   |
//! | 0x13 | Data       | token u64, offset u64, payload (1 ..= receiver's `max_chunk`) |
//! | 0x14 | PullRts    | msg id u64, tag u64, length u64, the bytes' address in the sender u64: 32 B |
//! | 0x15 | Pulled     | msg id u64, bytes the receiver read itself u64: 16 B        |
//! | 0x20 | AmRequest  | handler u16, nargs u8, 0 u8, nargs × u64, payload           |
//! | 0x21 | AmReply    | as AmRequest                                                |
//! | 0x7f | Bye        | empty                                                       |
//!
//! The limits block of Hello is: `max_eager` u32, `max_chunk` u32,
//! `max_am_payload` u32, `max_am_args` u16, `max_am_handlers` u16,
//! `max_message` u64 — what that side *accepts*; the other side sends
//! within them. The layout of Hello, HelloAck, Refuse and of the header is
//! frozen across protocol versions, so any two versions can refuse each
//! other with a clear reason. A Refuse never names a job: the UUID is the
//! job's key, and a refusal goes to whoever asked (see [`Refusal`]).
//!
//! # Links: acknowledgements and resumption
//!
//! The handshake is Hello + Session from the dialer, HelloAck + Session
//! from the acceptor. The dialer's Session names the connection's *link*
//! (a random id) and says [`NEW_LINK`]; each Session also carries its
//! sender's *incarnation* (a random number an endpoint draws when it
//! opens) and, as its seal, the sender's random half of the link's key.
//! Once both Sessions are exchanged, every byte either side sends is
//! numbered, from 0, and each side acknowledges what it consumed (Ack,
//! cumulative, itself part of the stream). When the transport breaks, the
//! dialer connects again and sends Hello + Session naming the same link,
//! how many of the acceptor's bytes it consumed, a generation one higher
//! than its last resumption's, and as seal its proof of the link key (an
//! HMAC over link, count, generation and both incarnations); the acceptor
//! takes it only with the right proof and a generation it has not taken
//! yet, and answers with its own count and proof (or refuses an unknown
//! link, the same way whatever was wrong), and each side sends again,
//! from the other's count, what it had sent, so the stream continues as
//! if nothing had happened: no frame lost, none taken twice (see
//! [`SoftCore::detach`](super::SoftCore::detach)). A new link naming
//! another incarnation than the peer's earlier links is a new process at
//! that epid: the old one's links end, failing what waited on them.
//!
//! # Identity
//!
//! A Hello claims an epid; the acceptor checks the claim before it
//! answers. Over a Unix socket the dialer's process (`SO_PEERCRED`) must
//! be the one listening at the claimed epid's socket name. Over TCP the
//! connection must come from the epid's address, and the acceptor sends a
//! Challenge (a random nonce, and the link id the dialer's Session named)
//! on a connection of its own to the epid's listener: the real endpoint,
//! which is dialing the acceptor on that link, answers with a Proof
//! carrying the nonce on the connection being checked. A Challenge naming
//! no link the endpoint is dialing is dropped, so forged ones deny no
//! handshake. A dialer that cannot prove its claim is refused (reason 6)
//! and nothing of the real endpoint's is touched. Resuming a link needs
//! no identity check: the link key proves it.
//!
//! # Job secret
//!
//! With a job secret ([`super::JobSecret`]) the acceptor answers the
//! dialer's Hello + Session with an AuthChallenge; the dialer answers with
//! an AuthProof (its HMAC of the challenge, and a challenge of its own);
//! the acceptor's HelloAck comes after its own AuthProof. Either side that
//! lacks the secret, or gets a wrong proof, refuses (reason 7). This holds
//! for resumptions too, and the link key is then derived under the secret,
//! so that even someone who saw the first handshake cannot compute it.
//!
//! # Credit
//!
//! Receivers grant credit (the Credit frame); a sender initiates an Eager
//! message only within its eager-byte credit (charged payload length +
//! [`ENTRY_OVERHEAD`]), an Rts within its rendezvous-entry credit, an
//! AmRequest within its AM credit. A frame beyond the credit is a protocol
//! violation. See [`super::protocol`] for the scheme.

mod frame;
mod handshake;

pub use frame::{encode, AmArgs, AmFrame, Frame, FrameDecoder, FrameKind, NEW_LINK, SEAL_LEN};
pub(crate) use frame::{put_data, put_data_header, put_eager, put_eager_header, DATA_PREFIX};
pub use handshake::{check_hello, HandshakeError, Hello, JobUuid, Refusal, Refuse, RefuseCode};

/// Bytes of the fixed frame header.
pub const HEADER_LEN: usize = 8;
/// First bytes of every Hello and HelloAck body.
pub const MAGIC: [u8; 8] = *b"PSMRAIL\0";
/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 4;
/// Most AM arguments the frame format can carry (a configuration may allow
/// fewer).
pub const MAX_WIRE_AM_ARGS: usize = 16;
/// Largest eager payload any configuration may accept.
pub const HARD_MAX_EAGER: u32 = 16 << 20;
/// Largest Data chunk any configuration may accept.
pub const HARD_MAX_CHUNK: u32 = 16 << 20;
/// Largest AM payload any configuration may accept.
pub const HARD_MAX_AM_PAYLOAD: u32 = 1 << 20;
/// Credit charged per Eager message on top of its payload: what an entry
/// in the unexpected queue costs besides its bytes, so that even empty
/// messages are bounded in number.
pub const ENTRY_OVERHEAD: u64 = 64;

/// What one side accepts on the wire; advertised in its Hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameLimits {
    /// Largest Eager payload.
    pub max_eager: u32,
    /// Largest Data payload.
    pub max_chunk: u32,
    /// Largest AM request or reply payload.
    pub max_am_payload: u32,
    /// Most AM arguments (≤ [`MAX_WIRE_AM_ARGS`]).
    pub max_am_args: u16,
    /// Number of AM handler slots (ids `0..max_am_handlers`).
    pub max_am_handlers: u16,
    /// Largest message length (Rts length, Data end offset).
    pub max_message: u64,
}

impl FrameLimits {
    /// PSM-like defaults: 64 KiB eager, 256 KiB chunks, 8128-byte AM
    /// payloads with 10 arguments and 256 handlers, `u32::MAX` messages.
    pub const DEFAULT: FrameLimits = FrameLimits {
        max_eager: 64 << 10,
        max_chunk: 256 << 10,
        max_am_payload: 8128,
        max_am_args: 10,
        max_am_handlers: 256,
        max_message: u32::MAX as u64,
    };

    /// Checks the limits against the hard caps of the format.
    pub fn validate(&self) -> Result<(), WireError> {
        let bad = |field: &'static str, value: u64| Err(WireError::BadLimit { field, value });
        if self.max_eager > HARD_MAX_EAGER {
            return bad("max_eager", self.max_eager.into());
        }
        if self.max_chunk == 0 || self.max_chunk > HARD_MAX_CHUNK {
            return bad("max_chunk", self.max_chunk.into());
        }
        if self.max_am_payload > HARD_MAX_AM_PAYLOAD {
            return bad("max_am_payload", self.max_am_payload.into());
        }
        if usize::from(self.max_am_args) > MAX_WIRE_AM_ARGS {
            return bad("max_am_args", self.max_am_args.into());
        }
        if self.max_am_handlers == 0 {
            return bad("max_am_handlers", 0);
        }
        Ok(())
    }

    /// The most a side sends to a peer: the smaller of each limit.
    pub fn min(&self, other: &FrameLimits) -> FrameLimits {
        FrameLimits {
            max_eager: self.max_eager.min(other.max_eager),
            max_chunk: self.max_chunk.min(other.max_chunk),
            max_am_payload: self.max_am_payload.min(other.max_am_payload),
            max_am_args: self.max_am_args.min(other.max_am_args),
            max_am_handlers: self.max_am_handlers.min(other.max_am_handlers),
            max_message: self.max_message.min(other.max_message),
        }
    }

    /// Largest body any frame may declare under these limits.
    pub fn max_body(&self) -> u32 {
        [
            frame::body_bounds(FrameKind::Eager, self).1,
            frame::body_bounds(FrameKind::Data, self).1,
            frame::body_bounds(FrameKind::AmRequest, self).1,
            frame::body_bounds(FrameKind::Hello, self).1,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits::DEFAULT
    }
}

/// A byte stream that is not a valid frame sequence. The connection that
/// produced it is closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The header names no known kind.
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    /// Flags set where none are defined.
    #[error("{kind:?} frame with flags {flags:#04x} (none are defined)")]
    BadFlags {
        /// The frame kind.
        kind: FrameKind,
        /// The flags seen.
        flags: u8,
    },
    /// A reserved header or body field is not zero.
    #[error("{kind:?} frame with a non-zero reserved field")]
    Reserved {
        /// The frame kind.
        kind: FrameKind,
    },
    /// The declared body is longer than the kind allows.
    #[error("{kind:?} frame declares {len} body bytes, at most {max} allowed")]
    TooLong {
        /// The frame kind.
        kind: FrameKind,
        /// The declared length.
        len: u32,
        /// The most allowed.
        max: u32,
    },
    /// The declared body is shorter than the kind needs.
    #[error("{kind:?} frame declares {len} body bytes, at least {min} needed")]
    TooShort {
        /// The frame kind.
        kind: FrameKind,
        /// The declared length.
        len: u32,
        /// The least needed.
        min: u32,
    },
    /// An AM frame's argument count disagrees with its length or limit.
    #[error("AM frame with {nargs} arguments: at most {max} allowed and the body must hold them")]
    BadAmArgs {
        /// The declared count.
        nargs: u8,
        /// The most allowed.
        max: u16,
    },
    /// An AM frame names a handler outside the handler table.
    #[error("AM handler {handler} is outside the {max} handler slots")]
    BadHandler {
        /// The handler id.
        handler: u16,
        /// The number of slots.
        max: u16,
    },
    /// A Refuse frame with an unknown reason code.
    #[error("unknown refusal reason {0}")]
    BadRefuseCode(u8),
    /// An epid with bit 62 or 63 set.
    #[error("epid {0:#x} has reserved bits set")]
    ReservedEpidBits(u64),
    /// A limit outside what the format allows.
    #[error("limit {field} = {value} is out of range")]
    BadLimit {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A Data frame without payload.
    #[error("empty Data frame")]
    EmptyData,
    /// A Session frame naming link 0.
    #[error("Session frame with link id 0")]
    ZeroLink,
    /// A message length or offset beyond `max_message`.
    #[error("{field} = {value} exceeds the largest message ({max} bytes)")]
    MessageTooLong {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The largest message.
        max: u64,
    },
}
