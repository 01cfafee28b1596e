//! The mrail wire header and the rail tag layout.
//!
//! Every rail is a psm endpoint, and mrail talks to its peer's rails with
//! tagged rail messages of two kinds:
//!
//! * **Control frames** travel with the rail tag [`CTRL_TAG`]. Each starts
//!   with a header described by [`Frame`]; an [`Eager`](Frame::Eager) frame
//!   carries its whole payload right after the header, every other frame is
//!   exactly its header.
//! * **Data parts** of a large message travel with a data tag
//!   ([`data_tag`]) naming the receiver's receive id and the part number, so
//!   the receiver can post a rail receive for each part of the
//!   [`StripePlan`](super::stripe::StripePlan) it accepted with a
//!   [`Cts`](Frame::Cts).
//!
//! Bits 62 and 63 of a rail tag are never used: the psm layer reserves them.
//!
//! # Header layout
//!
//! All integers are little-endian. The first 16 bytes are common to every
//! frame:
//!
//! | bytes | field |
//! |-------|-------|
//! | 0 | [`VERSION`] |
//! | 1 | kind: 0 Eager, 1 Rts, 2 Cts, 3 Nack, 4 Ack, 5 WriteData, 6 Reroute, 7 RailNotice, 8 PartQuery, 9 Withdraw, 10 Resync, 11 Moved |
//! | 2 | flags: bit 0 = [`MsgClass::Tagged`] (Eager and Rts only); other bits zero |
//! | 3 | zero |
//! | 4..8 | sequence number (Eager, Rts, Ack and Withdraw), the first sequence number not sent (Resync), the notice's number (RailNotice); zero for the others |
//! | 8..16 | source: the sender's identity token |
//!
//! followed by the kind's fields:
//!
//! | kind | bytes 16.. | length |
//! |------|------------|--------|
//! | Eager | tag | 24, then the payload |
//! | Rts | tag, len, send_id, rails, weights | 56 |
//! | Cts | send_id, recv_id, accepted, weights | 48 |
//! | Nack | send_id, reason (u32), zero (u32) | 32 |
//! | Ack | zero (u64) | 24 |
//! | WriteData | data, len | 32 |
//! | Reroute | send_id, recv_id, part (u8), rail (u8), zero (6 bytes) | 40 |
//! | RailNotice | rail (u8), up (u8: 0 or 1), zero (6 bytes) | 24 |
//! | PartQuery | send_id, recv_id, part (u8), zero (7 bytes) | 40 |
//! | Withdraw | send_id | 24 |
//! | Resync | ask (u8: 0 or 1), zero (7 bytes) | 24 |
//! | Moved | send_id, recv_id, part (u8), rail (u8), zero (6 bytes) | 40 |
//!
//! [`decode`] is strict: a wrong version, an unknown kind, a nonzero
//! reserved field or flag, a short input, and trailing bytes after a frame
//! other than Eager are errors; it never panics, whatever the bytes.

use std::fmt;

/// The header version this implementation speaks: 2, since the
/// [`Moved`](Frame::Moved) frame (kind 11). A peer of another version is
/// refused at its first frame rather than at the first frame it cannot
/// read.
pub const VERSION: u8 = 2;

/// The rail tag every control frame travels with.
pub const CTRL_TAG: u64 = 1 << 60;
/// The bit that marks a rail tag as a data tag ([`data_tag`]).
pub const DATA_BIT: u64 = 1 << 61;
/// The largest receive id a data tag can carry (45 bits).
pub const MAX_RECV_ID: u64 = (1 << 45) - 1;
/// The most parts a message may be striped into (one per rail at most).
pub const MAX_PARTS: usize = 64;

/// Length of an [`Eager`](Frame::Eager) header; its payload follows.
pub const EAGER_HEADER_LEN: usize = 24;
/// Length of the longest header ([`Rts`](Frame::Rts)).
pub const MAX_HEADER_LEN: usize = 56;

const RTS_LEN: usize = 56;
const CTS_LEN: usize = 48;
const NACK_LEN: usize = 32;
const ACK_LEN: usize = 24;
const WRITE_DATA_LEN: usize = 32;
const REROUTE_LEN: usize = 40;
const RAIL_NOTICE_LEN: usize = 24;
const WITHDRAW_LEN: usize = 24;
const RESYNC_LEN: usize = 24;

const KIND_EAGER: u8 = 0;
const KIND_RTS: u8 = 1;
const KIND_CTS: u8 = 2;
const KIND_NACK: u8 = 3;
const KIND_ACK: u8 = 4;
const KIND_WRITE_DATA: u8 = 5;
const KIND_REROUTE: u8 = 6;
const KIND_RAIL_NOTICE: u8 = 7;
const KIND_PART_QUERY: u8 = 8;
const KIND_WITHDRAW: u8 = 9;
const KIND_RESYNC: u8 = 10;
const KIND_MOVED: u8 = 11;

const FLAG_TAGGED: u8 = 0x01;

/// The rail of a [`Frame::Reroute`] that says the part has landed.
pub const LANDED: u8 = u8::MAX;

/// The part number's bits in a data tag.
const PART_MASK: u64 = 0xff;

/// The rail tag of data part `part` of the message the receiver knows as
/// `recv_id`: `DATA_BIT | recv_id << 8 | part`.
///
/// `recv_id` must be at most [`MAX_RECV_ID`] and `part` below
/// [`MAX_PARTS`]; debug builds assert it, release builds keep only the
/// bits that fit, so the result is always a well-formed data tag.
///
/// ```
/// use psmrail::mrail::core::header::{data_tag, split_data_tag, DATA_BIT};
///
/// let tag = data_tag(7, 3);
/// assert_eq!(tag, DATA_BIT | 7 << 8 | 3);
/// assert_eq!(split_data_tag(tag), Some((7, 3)));
/// ```
pub fn data_tag(recv_id: u64, part: u8) -> u64 {
    debug_assert!(recv_id <= MAX_RECV_ID, "receive id {recv_id} too large");
    debug_assert!(usize::from(part) < MAX_PARTS, "part {part} too large");
    DATA_BIT | ((recv_id & MAX_RECV_ID) << 8) | (u64::from(part) % MAX_PARTS as u64)
}

/// The receive id and part number of a data tag, or `None` when `tag` is
/// not one [`data_tag`] can produce: [`DATA_BIT`] clear, any other bit
/// outside the receive id and part set (bits 62 and 63 included), or a part
/// number of [`MAX_PARTS`] or more.
///
/// ```
/// use psmrail::mrail::core::header::{split_data_tag, CTRL_TAG, DATA_BIT};
///
/// assert_eq!(split_data_tag(DATA_BIT | 1 << 8), Some((1, 0)));
/// assert_eq!(split_data_tag(CTRL_TAG), None);
/// assert_eq!(split_data_tag(DATA_BIT | 64), None);
/// assert_eq!(split_data_tag(DATA_BIT | 1 << 63), None);
/// ```
pub fn split_data_tag(tag: u64) -> Option<(u64, u8)> {
    let layout = DATA_BIT | (MAX_RECV_ID << 8) | PART_MASK;
    if tag & DATA_BIT == 0 || tag & !layout != 0 {
        return None;
    }
    let part = (tag & PART_MASK) as u8;
    if usize::from(part) >= MAX_PARTS {
        return None;
    }
    Some(((tag >> 8) & MAX_RECV_ID, part))
}

/// Which libfabric interface a message belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsgClass {
    /// `FI_MSG`: untagged; receives take messages in order.
    Msg,
    /// `FI_TAGGED`: receives select messages by tag.
    Tagged,
}

/// Why a receiver refused a request to send ([`Frame::Nack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NackReason {
    /// The receiver does not know the sender's source token.
    UnknownPeer,
    /// The matching receive was cancelled.
    Cancelled,
    /// The request names more rails than the receiver can take parts on.
    TooManyParts,
}

impl NackReason {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            NackReason::UnknownPeer => 0,
            NackReason::Cancelled => 1,
            NackReason::TooManyParts => 2,
        }
    }

    /// The reason with wire value `value`, if any.
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            0 => Some(NackReason::UnknownPeer),
            1 => Some(NackReason::Cancelled),
            2 => Some(NackReason::TooManyParts),
            _ => None,
        }
    }
}

impl fmt::Display for NackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NackReason::UnknownPeer => "unknown peer",
            NackReason::Cancelled => "cancelled",
            NackReason::TooManyParts => "too many parts",
        })
    }
}

/// The header of an mrail control frame.
///
/// ```
/// use psmrail::mrail::core::header::{decode, Frame, MsgClass, EAGER_HEADER_LEN};
///
/// let frame = Frame::Eager { class: MsgClass::Tagged, seq: 5, source: 0xabc, tag: 42 };
/// let mut buf = [0u8; EAGER_HEADER_LEN + 3];
/// let n = frame.write_to(&mut buf).unwrap();
/// buf[n..].copy_from_slice(b"abc");
/// let (back, header_len) = decode(&buf).unwrap();
/// assert_eq!((back, &buf[header_len..]), (frame, &b"abc"[..]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    /// A whole small message; the payload follows the header.
    Eager {
        /// `FI_MSG` or `FI_TAGGED`.
        class: MsgClass,
        /// The sender's sequence number for this peer.
        seq: u32,
        /// The sender's identity token.
        source: u64,
        /// The message tag (meaningless for [`MsgClass::Msg`]).
        tag: u64,
    },
    /// A request to send a large message, whose data will be striped over
    /// the sender's rails in `rails`.
    Rts {
        /// `FI_MSG` or `FI_TAGGED`.
        class: MsgClass,
        /// The sender's sequence number for this peer.
        seq: u32,
        /// The sender's identity token.
        source: u64,
        /// The message tag (meaningless for [`MsgClass::Msg`]).
        tag: u64,
        /// The message length in bytes.
        len: u64,
        /// The sender's id for this message, echoed by the answer.
        send_id: u64,
        /// Bit mask of the sender's rail indices; never zero.
        rails: u64,
        /// The sender's stripe weights for `rails` (as in
        /// [`Cts`](Frame::Cts): 4 bits per rail, 0 for equal shares), from
        /// the rates it learned or was given; the receiver cuts the
        /// message with them when they fit, else with its own.
        weights: u64,
    },
    /// The receiver accepts `accepted` bytes of a requested message.
    Cts {
        /// The receiver's identity token.
        source: u64,
        /// The sender's id from the request.
        send_id: u64,
        /// The receiver's id for the data tags; at most [`MAX_RECV_ID`].
        recv_id: u64,
        /// How many bytes the receiver takes (at most the request's `len`).
        accepted: u64,
        /// The share of the data each of the request's rails carries, as
        /// the receiver cut its receives: 4 bits per rail (rail `i` in bits
        /// `4i..4i+4`), 0 to 15 for a rail of the request (0: the rail
        /// carries nothing), 0 for the others; all zero means equal shares. Both sides cut the message
        /// with [`StripePlan::from_weights`](super::stripe::StripePlan::from_weights).
        weights: u64,
    },
    /// The receiver refuses a request to send.
    Nack {
        /// The receiver's identity token.
        source: u64,
        /// The sender's id from the request.
        send_id: u64,
        /// Why.
        reason: NackReason,
    },
    /// Cumulative acknowledgement: every sequence number before `seq` has
    /// been delivered.
    Ack {
        /// The receiver's identity token.
        source: u64,
        /// The first sequence number not yet delivered.
        seq: u32,
    },
    /// Every stripe of an RMA write with remote CQ data (`fi_writedata`)
    /// has landed: the target reports `data` for the `len` bytes.
    WriteData {
        /// The writer's identity token.
        source: u64,
        /// The remote CQ data.
        data: u64,
        /// The bytes the write moved.
        len: u64,
    },
    /// Failover: the receiver of a striped message asks for part `part`
    /// again on rail `rail` (its rail before was lost), with the same data
    /// tag; or, with `rail` [`LANDED`], says the part has arrived (the
    /// answer to a [`PartQuery`](Frame::PartQuery) for a part that did).
    Reroute {
        /// The receiver's identity token.
        source: u64,
        /// The sender's id from the request.
        send_id: u64,
        /// The receiver's id (as in the Cts).
        recv_id: u64,
        /// The part.
        part: u8,
        /// The rail to send it on.
        rail: u8,
    },
    /// Failover: the sender of a striped message, whose part `part` went
    /// on a rail that was lost before the part's send completed, asks the
    /// receiver what became of it (answered by a
    /// [`Reroute`](Frame::Reroute)).
    PartQuery {
        /// The sender's identity token.
        source: u64,
        /// The sender's id for the message.
        send_id: u64,
        /// The receiver's id (from the Cts).
        recv_id: u64,
        /// The part.
        part: u8,
    },
    /// Failover: the sender's rail `rail` went out of service (`up`
    /// false) or is back (`up` true).
    RailNotice {
        /// The sender's identity token.
        source: u64,
        /// The rail.
        rail: u8,
        /// Whether it is in service.
        up: bool,
        /// The sender numbers its notices, all rails together (wrapping,
        /// 0 unused): a receiver takes a notice only when it is newer
        /// than the last one it took about that rail, so one that waited
        /// on a rail while the link was down does not undo a later one.
        number: u32,
    },
    /// The sender gave up its message with sequence number `seq` (its
    /// request to send `send_id`, or an eager message: `send_id` 0): no
    /// rail was left to the receiver. It takes the message's place in the
    /// sequence; a receiver that got the request drops it, and fails the
    /// receive that matched it.
    Withdraw {
        /// The sender's sequence number of the message.
        seq: u32,
        /// The sender's identity token.
        source: u64,
        /// The sender's id of the request (0 for an eager message).
        send_id: u64,
    },
    /// After every rail between two endpoints was lost: the sender has
    /// sent again every sequenced frame the receiver has not acknowledged
    /// (given up requests as [`Withdraw`](Frame::Withdraw)s), on the rail
    /// this frame comes on, before it. With `ask`, the sender lost its
    /// rails too and waits for the receiver's own Resync before it takes
    /// the receiver's frames again.
    Resync {
        /// The sender's identity token.
        source: u64,
        /// The first sequence number the sender has not sent.
        upto: u32,
        /// Whether the receiver must answer with a Resync of its own.
        ask: bool,
    },
    /// The sender of a striped message sends part `part`, not yet sent,
    /// on rail `rail` instead of the rail the plan gave it (that rail had
    /// more to do than this one, which had nothing): the receiver posts
    /// the part's receive there. Sent on `rail`, ahead of the part.
    Moved {
        /// The sender's identity token.
        source: u64,
        /// The sender's id for the message.
        send_id: u64,
        /// The receiver's id (from the Cts).
        recv_id: u64,
        /// The part.
        part: u8,
        /// The rail it comes on.
        rail: u8,
    },
}

impl Frame {
    /// The frame kind's name, as used in error messages.
    pub const fn kind_name(&self) -> &'static str {
        kind_name(self.kind())
    }

    const fn kind(&self) -> u8 {
        match self {
            Frame::Eager { .. } => KIND_EAGER,
            Frame::Rts { .. } => KIND_RTS,
            Frame::Cts { .. } => KIND_CTS,
            Frame::Nack { .. } => KIND_NACK,
            Frame::Ack { .. } => KIND_ACK,
            Frame::WriteData { .. } => KIND_WRITE_DATA,
            Frame::Reroute { .. } => KIND_REROUTE,
            Frame::RailNotice { .. } => KIND_RAIL_NOTICE,
            Frame::PartQuery { .. } => KIND_PART_QUERY,
            Frame::Withdraw { .. } => KIND_WITHDRAW,
            Frame::Resync { .. } => KIND_RESYNC,
            Frame::Moved { .. } => KIND_MOVED,
        }
    }

    /// The encoded header length in bytes (for Eager, without the payload).
    pub const fn header_len(&self) -> usize {
        header_len(self.kind())
    }

    /// The sender's identity token.
    pub const fn source(&self) -> u64 {
        match *self {
            Frame::Eager { source, .. }
            | Frame::Rts { source, .. }
            | Frame::Cts { source, .. }
            | Frame::Nack { source, .. }
            | Frame::Ack { source, .. }
            | Frame::WriteData { source, .. }
            | Frame::Reroute { source, .. }
            | Frame::RailNotice { source, .. }
            | Frame::PartQuery { source, .. }
            | Frame::Withdraw { source, .. }
            | Frame::Resync { source, .. }
            | Frame::Moved { source, .. } => source,
        }
    }

    /// Checks the fields [`decode`] would reject: an Rts without rails, a
    /// Cts receive id above [`MAX_RECV_ID`].
    pub fn validate(&self) -> Result<(), HeaderError> {
        match *self {
            Frame::Rts { rails: 0, .. } => Err(HeaderError::NoRails),
            Frame::Cts { recv_id, .. } if recv_id > MAX_RECV_ID => {
                Err(HeaderError::RecvIdTooLarge(recv_id))
            }
            _ => Ok(()),
        }
    }

    /// Writes the header to the front of `out` and returns its length
    /// ([`header_len`](Self::header_len)). Allocation-free.
    ///
    /// Fails when `out` is too short or the frame is not
    /// [valid](Self::validate); `out` is then left untouched.
    ///
    /// ```
    /// use psmrail::mrail::core::header::{Frame, HeaderError, VERSION};
    ///
    /// let ack = Frame::Ack { source: 1, seq: 9 };
    /// let mut buf = [0u8; 24];
    /// assert_eq!(ack.write_to(&mut buf), Ok(24));
    /// assert_eq!(&buf[..4], &[VERSION, 4, 0, 0]);
    /// assert!(matches!(ack.write_to(&mut buf[..10]), Err(HeaderError::BufferTooSmall { .. })));
    /// ```
    pub fn write_to(&self, out: &mut [u8]) -> Result<usize, HeaderError> {
        self.validate()?;
        let len = self.header_len();
        let Some(out) = out.get_mut(..len) else {
            return Err(HeaderError::BufferTooSmall {
                need: len,
                got: out.len(),
            });
        };
        out.fill(0);
        let (flags, seq) = match *self {
            Frame::Eager { class, seq, .. } | Frame::Rts { class, seq, .. } => {
                (class_flags(class), seq)
            }
            Frame::Ack { seq, .. } | Frame::Withdraw { seq, .. } => (0, seq),
            Frame::Resync { upto, .. } => (0, upto),
            Frame::RailNotice { number, .. } => (0, number),
            Frame::Cts { .. }
            | Frame::Nack { .. }
            | Frame::WriteData { .. }
            | Frame::Reroute { .. }
            | Frame::PartQuery { .. }
            | Frame::Moved { .. } => (0, 0),
        };
        out[0] = VERSION;
        out[1] = self.kind();
        out[2] = flags;
        out[4..8].copy_from_slice(&seq.to_le_bytes());
        put_u64(out, 8, self.source());
        match *self {
            Frame::Eager { tag, .. } => put_u64(out, 16, tag),
            Frame::Rts {
                tag,
                len,
                send_id,
                rails,
                weights,
                ..
            } => {
                put_u64(out, 16, tag);
                put_u64(out, 24, len);
                put_u64(out, 32, send_id);
                put_u64(out, 40, rails);
                put_u64(out, 48, weights);
            }
            Frame::Cts {
                send_id,
                recv_id,
                accepted,
                weights,
                ..
            } => {
                put_u64(out, 16, send_id);
                put_u64(out, 24, recv_id);
                put_u64(out, 32, accepted);
                put_u64(out, 40, weights);
            }
            Frame::Nack {
                send_id, reason, ..
            } => {
                put_u64(out, 16, send_id);
                out[24..28].copy_from_slice(&reason.to_u32().to_le_bytes());
            }
            Frame::Ack { .. } => {}
            Frame::WriteData { data, len, .. } => {
                put_u64(out, 16, data);
                put_u64(out, 24, len);
            }
            Frame::Reroute {
                send_id,
                recv_id,
                part,
                rail,
                ..
            } => {
                put_u64(out, 16, send_id);
                put_u64(out, 24, recv_id);
                out[32] = part;
                out[33] = rail;
            }
            Frame::RailNotice { rail, up, .. } => {
                out[16] = rail;
                out[17] = u8::from(up);
            }
            Frame::PartQuery {
                send_id,
                recv_id,
                part,
                ..
            } => {
                put_u64(out, 16, send_id);
                put_u64(out, 24, recv_id);
                out[32] = part;
            }
            Frame::Withdraw { send_id, .. } => put_u64(out, 16, send_id),
            Frame::Resync { ask, .. } => out[16] = u8::from(ask),
            Frame::Moved {
                send_id,
                recv_id,
                part,
                rail,
                ..
            } => {
                put_u64(out, 16, send_id);
                put_u64(out, 24, recv_id);
                out[32] = part;
                out[33] = rail;
            }
        }
        Ok(len)
    }

    /// Appends the header to `buf` (for Eager, the caller appends the
    /// payload next).
    ///
    /// ```
    /// use psmrail::mrail::core::header::{decode, Frame, NackReason};
    ///
    /// let nack = Frame::Nack { source: 3, send_id: 8, reason: NackReason::Cancelled };
    /// let mut buf = Vec::new();
    /// nack.append_to(&mut buf).unwrap();
    /// assert_eq!(decode(&buf), Ok((nack, 32)));
    /// ```
    pub fn append_to(&self, buf: &mut Vec<u8>) -> Result<(), HeaderError> {
        let mut header = [0u8; MAX_HEADER_LEN];
        let n = self.write_to(&mut header)?;
        buf.extend_from_slice(&header[..n]);
        Ok(())
    }
}

/// Decodes the header at the front of `bytes`, returning the frame and the
/// header length. For an [`Eager`](Frame::Eager) frame the bytes after the
/// header are the payload (any length); any other frame must be exactly
/// its header.
///
/// ```
/// use psmrail::mrail::core::header::{decode, Frame, HeaderError};
///
/// let mut buf = Vec::new();
/// Frame::Cts { source: 1, send_id: 2, recv_id: 3, accepted: 4, weights: 0 }
///     .append_to(&mut buf)
///     .unwrap();
/// assert!(decode(&buf).is_ok());
/// buf.push(0);
/// assert_eq!(decode(&buf), Err(HeaderError::Trailing { kind: "Cts", len: 48, extra: 1 }));
/// assert_eq!(decode(&[2]), Err(HeaderError::Short { need: 16, got: 1 }));
/// ```
pub fn decode(bytes: &[u8]) -> Result<(Frame, usize), HeaderError> {
    let Some(common) = bytes.get(..16) else {
        return Err(HeaderError::Short {
            need: 16,
            got: bytes.len(),
        });
    };
    if common[0] != VERSION {
        return Err(HeaderError::Version(common[0]));
    }
    let kind = common[1];
    if kind > KIND_MOVED {
        return Err(HeaderError::UnknownKind(kind));
    }
    let name = kind_name(kind);
    let flags = common[2];
    let allowed = if kind == KIND_EAGER || kind == KIND_RTS {
        FLAG_TAGGED
    } else {
        0
    };
    if flags & !allowed != 0 {
        return Err(HeaderError::Flags { kind: name, flags });
    }
    if common[3] != 0 {
        return Err(HeaderError::Reserved {
            kind: name,
            offset: 3,
        });
    }
    let len = header_len(kind);
    let Some(h) = bytes.get(..len) else {
        return Err(HeaderError::Short {
            need: len,
            got: bytes.len(),
        });
    };
    if kind != KIND_EAGER && bytes.len() != len {
        return Err(HeaderError::Trailing {
            kind: name,
            len,
            extra: bytes.len() - len,
        });
    }
    let class = if flags & FLAG_TAGGED != 0 {
        MsgClass::Tagged
    } else {
        MsgClass::Msg
    };
    let seq = get_u32(h, 4);
    let source = get_u64(h, 8);
    if seq != 0
        && !matches!(
            kind,
            KIND_EAGER | KIND_RTS | KIND_ACK | KIND_WITHDRAW | KIND_RESYNC | KIND_RAIL_NOTICE
        )
    {
        return Err(HeaderError::Reserved {
            kind: name,
            offset: 4,
        });
    }
    let frame = match kind {
        KIND_EAGER => Frame::Eager {
            class,
            seq,
            source,
            tag: get_u64(h, 16),
        },
        KIND_RTS => Frame::Rts {
            class,
            seq,
            source,
            tag: get_u64(h, 16),
            len: get_u64(h, 24),
            send_id: get_u64(h, 32),
            rails: get_u64(h, 40),
            weights: get_u64(h, 48),
        },
        KIND_CTS => Frame::Cts {
            source,
            send_id: get_u64(h, 16),
            recv_id: get_u64(h, 24),
            accepted: get_u64(h, 32),
            weights: get_u64(h, 40),
        },
        KIND_NACK => {
            if get_u32(h, 28) != 0 {
                return Err(HeaderError::Reserved {
                    kind: name,
                    offset: 28,
                });
            }
            let raw = get_u32(h, 24);
            Frame::Nack {
                source,
                send_id: get_u64(h, 16),
                reason: NackReason::from_u32(raw).ok_or(HeaderError::NackReason(raw))?,
            }
        }
        KIND_WRITE_DATA => Frame::WriteData {
            source,
            data: get_u64(h, 16),
            len: get_u64(h, 24),
        },
        KIND_REROUTE | KIND_MOVED => {
            if h[34..40].iter().any(|&b| b != 0) {
                return Err(HeaderError::Reserved {
                    kind: name,
                    offset: 34,
                });
            }
            let (send_id, recv_id, part, rail) = (get_u64(h, 16), get_u64(h, 24), h[32], h[33]);
            if kind == KIND_MOVED {
                Frame::Moved {
                    source,
                    send_id,
                    recv_id,
                    part,
                    rail,
                }
            } else {
                Frame::Reroute {
                    source,
                    send_id,
                    recv_id,
                    part,
                    rail,
                }
            }
        }
        KIND_PART_QUERY => {
            if h[33..40].iter().any(|&b| b != 0) {
                return Err(HeaderError::Reserved {
                    kind: name,
                    offset: 33,
                });
            }
            Frame::PartQuery {
                source,
                send_id: get_u64(h, 16),
                recv_id: get_u64(h, 24),
                part: h[32],
            }
        }
        KIND_RAIL_NOTICE => {
            if h[17] > 1 || h[18..24].iter().any(|&b| b != 0) {
                return Err(HeaderError::Reserved {
                    kind: name,
                    offset: 17,
                });
            }
            Frame::RailNotice {
                source,
                rail: h[16],
                up: h[17] == 1,
                number: seq,
            }
        }
        KIND_WITHDRAW => Frame::Withdraw {
            seq,
            source,
            send_id: get_u64(h, 16),
        },
        KIND_RESYNC => {
            if h[16] > 1 || h[17..24].iter().any(|&b| b != 0) {
                return Err(HeaderError::Reserved {
                    kind: name,
                    offset: 16,
                });
            }
            Frame::Resync {
                source,
                upto: seq,
                ask: h[16] == 1,
            }
        }
        _ => {
            if get_u64(h, 16) != 0 {
                return Err(HeaderError::Reserved {
                    kind: name,
                    offset: 16,
                });
            }
            Frame::Ack { source, seq }
        }
    };
    frame.validate()?;
    Ok((frame, len))
}

/// Why a header could not be decoded or encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The input ends before the header does.
    #[error("{got} bytes are too short for a {need}-byte mrail header")]
    Short {
        /// Bytes the header needs.
        need: usize,
        /// Bytes there were.
        got: usize,
    },
    /// The version byte is not [`VERSION`].
    #[error("mrail header version {0} is not supported (expected {VERSION})")]
    Version(u8),
    /// The kind byte names no frame.
    #[error("unknown mrail frame kind {0}")]
    UnknownKind(u8),
    /// Flag bits that are undefined, or not allowed for this kind.
    #[error("flags {flags:#04x} are not allowed in an mrail {kind} header")]
    Flags {
        /// The frame kind.
        kind: &'static str,
        /// The flags byte.
        flags: u8,
    },
    /// A reserved field is not zero.
    #[error("reserved field at byte {offset} of an mrail {kind} header is not zero")]
    Reserved {
        /// The frame kind.
        kind: &'static str,
        /// Where the field starts.
        offset: usize,
    },
    /// Bytes after a frame that has no payload.
    #[error("an mrail {kind} frame is exactly {len} bytes, {extra} more followed")]
    Trailing {
        /// The frame kind.
        kind: &'static str,
        /// Its length.
        len: usize,
        /// How many bytes followed.
        extra: usize,
    },
    /// An Rts whose rail mask is empty.
    #[error("an mrail Rts names no rails")]
    NoRails,
    /// A Cts receive id that does not fit a data tag.
    #[error("receive id {0} exceeds the data tag's {MAX_RECV_ID}")]
    RecvIdTooLarge(u64),
    /// A Nack reason this implementation does not know.
    #[error("unknown mrail Nack reason {0}")]
    NackReason(u32),
    /// The output buffer cannot hold the header.
    #[error("a {got}-byte buffer cannot hold a {need}-byte mrail header")]
    BufferTooSmall {
        /// Bytes the header needs.
        need: usize,
        /// Bytes the buffer has.
        got: usize,
    },
}

const fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_EAGER => "Eager",
        KIND_RTS => "Rts",
        KIND_CTS => "Cts",
        KIND_NACK => "Nack",
        KIND_ACK => "Ack",
        KIND_WRITE_DATA => "WriteData",
        KIND_REROUTE => "Reroute",
        KIND_RAIL_NOTICE => "RailNotice",
        KIND_PART_QUERY => "PartQuery",
        KIND_WITHDRAW => "Withdraw",
        KIND_RESYNC => "Resync",
        _ => "Moved",
    }
}

const fn header_len(kind: u8) -> usize {
    match kind {
        KIND_EAGER => EAGER_HEADER_LEN,
        KIND_RTS => RTS_LEN,
        KIND_CTS => CTS_LEN,
        KIND_NACK => NACK_LEN,
        KIND_ACK => ACK_LEN,
        KIND_WRITE_DATA => WRITE_DATA_LEN,
        KIND_REROUTE => REROUTE_LEN,
        KIND_RAIL_NOTICE => RAIL_NOTICE_LEN,
        KIND_PART_QUERY => REROUTE_LEN,
        KIND_WITHDRAW => WITHDRAW_LEN,
        KIND_RESYNC => RESYNC_LEN,
        _ => REROUTE_LEN,
    }
}

const fn class_flags(class: MsgClass) -> u8 {
    match class {
        MsgClass::Msg => 0,
        MsgClass::Tagged => FLAG_TAGGED,
    }
}

/// `buf[at..at + 8]` as a little-endian u64; callers have checked the length.
fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// `buf[at..at + 4]` as a little-endian u32; callers have checked the length.
fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Whether `weights` fit `rails` (see [`Frame::Cts`]): zero, or a weight
/// of 0 to 15 for each rail of the mask (all below 16), at least one of
/// them nonzero, and 0 elsewhere. A rail of the mask with weight 0 carries
/// nothing (the receiver left it out: it is out of service).
///
/// ```
/// use psmrail::mrail::core::header::weights_fit;
/// assert!(weights_fit(0b101, 0));
/// assert!(weights_fit(0b101, 0x205));
/// assert!(weights_fit(0b101, 0x005)); // rail 2 left out
/// assert!(!weights_fit(0b001, 0x015)); // rail 1 is not in the mask
/// assert!(!weights_fit(0b101, 0x010));
/// ```
pub fn weights_fit(rails: u64, weights: u64) -> bool {
    if weights == 0 {
        return true;
    }
    if rails >> 16 != 0 {
        return false;
    }
    (0..16).all(|i| rails & (1 << i) != 0 || (weights >> (4 * i)) & 0xf == 0)
}

fn put_u64(buf: &mut [u8], at: usize, value: u64) {
    buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(frame: &Frame) -> Vec<u8> {
        let mut v = Vec::new();
        frame.append_to(&mut v).unwrap();
        v
    }

    fn every_kind() -> Vec<Frame> {
        vec![
            Frame::Eager {
                class: MsgClass::Msg,
                seq: 1,
                source: 2,
                tag: 3,
            },
            Frame::Rts {
                class: MsgClass::Tagged,
                seq: u32::MAX,
                source: u64::MAX,
                tag: u64::MAX,
                len: 0,
                send_id: 7,
                rails: 0b101,
                weights: 0x102,
            },
            Frame::Cts {
                source: 1,
                send_id: 2,
                recv_id: MAX_RECV_ID,
                accepted: 4,
                weights: 0x304,
            },
            Frame::Nack {
                source: 1,
                send_id: 2,
                reason: NackReason::TooManyParts,
            },
            Frame::Ack { source: 9, seq: 10 },
            Frame::WriteData {
                source: 9,
                data: 11,
                len: 12,
            },
            Frame::Reroute {
                source: 9,
                send_id: 1,
                recv_id: 2,
                part: 3,
                rail: 4,
            },
            Frame::RailNotice {
                source: 9,
                rail: 2,
                up: true,
                number: 7,
            },
            Frame::PartQuery {
                source: 9,
                send_id: 5,
                recv_id: 6,
                part: 1,
            },
            Frame::Withdraw {
                seq: u32::MAX,
                source: 9,
                send_id: 3,
            },
            Frame::Resync {
                source: 9,
                upto: 12,
                ask: true,
            },
            Frame::Moved {
                source: 9,
                send_id: 5,
                recv_id: 6,
                part: 7,
                rail: 1,
            },
        ]
    }

    #[test]
    fn lengths_and_common_bytes() {
        let lens: Vec<usize> = every_kind().iter().map(Frame::header_len).collect();
        assert_eq!(lens, [24, 56, 48, 32, 24, 32, 40, 24, 40, 24, 24, 40]);
        for (kind, frame) in every_kind().iter().enumerate() {
            let b = encode(frame);
            assert_eq!(b.len(), frame.header_len());
            assert_eq!((b[0], usize::from(b[1]), b[3]), (VERSION, kind, 0));
            assert_eq!(get_u64(&b, 8), frame.source());
            assert!(b.len() <= MAX_HEADER_LEN);
        }
        let rts = encode(&every_kind()[1]);
        assert_eq!(rts[2], FLAG_TAGGED);
        assert_eq!(&rts[4..8], &[0xff; 4]);
    }

    #[test]
    fn eager_payload_follows_the_header() {
        let mut b = encode(&every_kind()[0]);
        b.extend_from_slice(b"payload");
        let (f, n) = decode(&b).unwrap();
        assert_eq!((f, &b[n..]), (every_kind()[0], &b"payload"[..]));
    }

    #[test]
    fn strictness() {
        let ok = encode(&every_kind()[3]);
        let bad = |at: usize, x: u8| {
            let mut b = ok.clone();
            b[at] = x;
            decode(&b).unwrap_err()
        };
        assert_eq!(bad(0, 1), HeaderError::Version(1));
        assert_eq!(bad(0, 3), HeaderError::Version(3));
        assert_eq!(bad(1, 12), HeaderError::UnknownKind(12));
        assert_eq!(
            bad(2, 1),
            HeaderError::Flags {
                kind: "Nack",
                flags: 1
            }
        );
        assert!(matches!(bad(3, 1), HeaderError::Reserved { offset: 3, .. }));
        assert!(matches!(bad(5, 1), HeaderError::Reserved { offset: 4, .. }));
        assert!(matches!(
            bad(31, 1),
            HeaderError::Reserved { offset: 28, .. }
        ));
        assert_eq!(bad(24, 3), HeaderError::NackReason(3));
        assert_eq!(
            decode(&ok[..31]),
            Err(HeaderError::Short { need: 32, got: 31 })
        );

        let mut eager = encode(&every_kind()[0]);
        eager[2] = 0x02;
        assert!(matches!(decode(&eager), Err(HeaderError::Flags { .. })));
        let mut ack = encode(&every_kind()[4]);
        ack[20] = 1;
        assert!(matches!(
            decode(&ack),
            Err(HeaderError::Reserved { offset: 16, .. })
        ));
        let mut rts = encode(&every_kind()[1]);
        rts[40..48].fill(0);
        assert_eq!(decode(&rts), Err(HeaderError::NoRails));
        let mut resync = encode(&every_kind()[10]);
        resync[16] = 2;
        assert!(matches!(
            decode(&resync),
            Err(HeaderError::Reserved { offset: 16, .. })
        ));
        resync[16] = 0;
        resync[23] = 1;
        assert!(decode(&resync).is_err());
        let mut cts = encode(&every_kind()[2]);
        cts[29] = 0x20;
        assert!(matches!(decode(&cts), Err(HeaderError::RecvIdTooLarge(_))));
        assert_eq!(decode(&[]), Err(HeaderError::Short { need: 16, got: 0 }));
        for e in [bad(0, 1), HeaderError::NoRails] {
            assert!(e.to_string().contains("mrail"));
        }
    }

    #[test]
    fn invalid_frames_are_not_written() {
        let mut buf = [0xaau8; MAX_HEADER_LEN];
        let rts = Frame::Rts {
            class: MsgClass::Msg,
            seq: 0,
            source: 0,
            tag: 0,
            len: 1,
            send_id: 0,
            rails: 0,
            weights: 0,
        };
        assert_eq!(rts.write_to(&mut buf), Err(HeaderError::NoRails));
        let cts = Frame::Cts {
            source: 0,
            send_id: 0,
            recv_id: MAX_RECV_ID + 1,
            accepted: 0,
            weights: 0,
        };
        assert!(cts.write_to(&mut buf).is_err());
        assert_eq!(buf, [0xaa; MAX_HEADER_LEN]);
    }

    #[test]
    fn data_tags() {
        assert_eq!(data_tag(0, 0), DATA_BIT);
        let top = data_tag(MAX_RECV_ID, 63);
        assert_eq!(top & (CTRL_TAG | 3 << 62), 0);
        assert_eq!(split_data_tag(top), Some((MAX_RECV_ID, 63)));
        assert_eq!(split_data_tag(0), None);
        assert_eq!(split_data_tag(DATA_BIT | CTRL_TAG), None);
        assert_eq!(split_data_tag(DATA_BIT | 1 << 62), None);
        assert_eq!(split_data_tag(DATA_BIT | 1 << 53), None);
        assert_eq!(split_data_tag(DATA_BIT | 0xff), None);
    }

    fn class() -> impl Strategy<Value = MsgClass> {
        prop_oneof![Just(MsgClass::Msg), Just(MsgClass::Tagged)]
    }

    fn frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (class(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
                |(class, seq, source, tag)| Frame::Eager {
                    class,
                    seq,
                    source,
                    tag
                }
            ),
            (
                class(),
                any::<u32>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                (1u64.., any::<u64>())
            )
                .prop_map(
                    |(class, seq, source, tag, len, send_id, (rails, weights))| {
                        Frame::Rts {
                            class,
                            seq,
                            source,
                            tag,
                            len,
                            send_id,
                            rails,
                            weights,
                        }
                    }
                ),
            (
                any::<u64>(),
                any::<u64>(),
                0..=MAX_RECV_ID,
                any::<u64>(),
                any::<u64>()
            )
                .prop_map(|(source, send_id, recv_id, accepted, weights)| {
                    Frame::Cts {
                        source,
                        send_id,
                        recv_id,
                        accepted,
                        weights,
                    }
                }),
            (any::<u64>(), any::<u64>(), 0u32..3).prop_map(|(source, send_id, r)| {
                Frame::Nack {
                    source,
                    send_id,
                    reason: NackReason::from_u32(r).unwrap(),
                }
            }),
            (any::<u64>(), any::<u32>()).prop_map(|(source, seq)| Frame::Ack { source, seq }),
            (any::<u64>(), any::<u64>(), any::<u64>())
                .prop_map(|(source, data, len)| Frame::WriteData { source, data, len }),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u8>(),
                any::<u8>()
            )
                .prop_map(|(source, send_id, recv_id, part, rail)| Frame::Reroute {
                    source,
                    send_id,
                    recv_id,
                    part,
                    rail
                }),
            (any::<u64>(), any::<u8>(), any::<bool>(), any::<u32>()).prop_map(
                |(source, rail, up, number)| Frame::RailNotice {
                    source,
                    rail,
                    up,
                    number
                }
            ),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u8>()).prop_map(
                |(source, send_id, recv_id, part)| Frame::PartQuery {
                    source,
                    send_id,
                    recv_id,
                    part
                }
            ),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(seq, source, send_id)| {
                Frame::Withdraw {
                    seq,
                    source,
                    send_id,
                }
            }),
            (any::<u64>(), any::<u32>(), any::<bool>())
                .prop_map(|(source, upto, ask)| Frame::Resync { source, upto, ask }),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u8>(),
                any::<u8>()
            )
                .prop_map(|(source, send_id, recv_id, part, rail)| Frame::Moved {
                    source,
                    send_id,
                    recv_id,
                    part,
                    rail
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn encode_decode_is_identity(f in frame(), payload in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut b = encode(&f);
            prop_assert_eq!(b.len(), f.header_len());
            if matches!(f, Frame::Eager { .. }) {
                b.extend_from_slice(&payload);
            }
            prop_assert_eq!(decode(&b), Ok((f, f.header_len())));
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_reencode(
            kind in 0u8..12,
            flags in prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
            mut bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            // Bias towards plausible headers so that decoding often succeeds.
            if bytes.len() >= 4 {
                bytes[0] = VERSION;
                bytes[1] = kind;
                bytes[2] = flags;
                bytes[3] = 0;
            }
            if let Ok((f, n)) = decode(&bytes) {
                prop_assert_eq!(n, f.header_len());
                prop_assert_eq!(encode(&f), bytes[..n].to_vec());
            }
            // The fuzz check agrees and keeps its own invariants.
            prop_assert_eq!(crate::mrail::fuzzing::fuzz_header(&bytes), decode(&bytes).is_ok());
        }

        #[test]
        fn data_tags_round_trip(recv_id in 0..=MAX_RECV_ID, part in 0u8..64, tag in any::<u64>()) {
            let t = data_tag(recv_id, part);
            prop_assert_eq!(t & (1 << 62 | 1 << 63 | CTRL_TAG), 0);
            prop_assert_eq!(split_data_tag(t), Some((recv_id, part)));
            if let Some((r, p)) = split_data_tag(tag) {
                prop_assert_eq!(data_tag(r, p), tag);
            }
        }
    }
}
