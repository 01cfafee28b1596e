//! The name server's wire format, byte for byte as libfabric's `util_ns`
//! speaks it (`prov/util/src/util_ns.c`), as pure functions over byte slices.
//!
//! Every connection carries one command. A frame is an 8-byte header
//! followed by a body:
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 1    | version, always [`VERSION`] (0)                    |
//! | 1      | 1    | op ([`Op`]: ADD 0, DEL 1, QUERY 2, ACK 3)           |
//! | 2      | 2    | reserved (sent as 0, ignored on receipt, as C does) |
//! | 4      | 4    | status, **big-endian** (C's `htonl`), signed        |
//!
//! | frame                | body                                          | total |
//! |----------------------|-----------------------------------------------|-------|
//! | ADD / DEL request    | service u32 + name (the epid) u64             | 20 B  |
//! | QUERY request        | service u32                                   | 12 B  |
//! | ACK, status 0        | service u32 + name u64 (the real service)     | 20 B  |
//! | ACK, status ≠ 0      | none (C sends `-FI_ENOENT`, [`STATUS_NOT_FOUND`]) | 8 B |
//!
//! C's server answers nothing to ADD and DEL. psmrail's answers one that
//! came from another host, which it refuses, with an ACK of status
//! `-FI_EACCES` ([`STATUS_NOT_LOCAL`]) before closing, so that the sender
//! learns why; a C client, which closes right after sending, never reads
//! it.
//!
//! The body is in the C provider's *host* byte order; psmrail fixes it to
//! little-endian so that it meets the C provider on x86 byte for byte.
//! Only the status is byte-swapped, despite C's comment claiming network
//! order throughout. The status of a request is ignored, as in C.
//!
//! Decoding takes exactly one frame: a wrong version, an unknown op, a
//! frame shorter or longer than its op calls for, or an ACK where a
//! request is expected (and the reverse) are [`WireError`]s, never panics.

use std::fmt;
use std::num::NonZeroI32;
use std::ops::Deref;

use crate::engine::Epid;

/// The only protocol version (`OFI_NS_VERSION`).
pub const VERSION: u8 = 0;
/// Bytes in the header.
pub const HEADER_LEN: usize = 8;
/// Bytes in a service number (a C `int`).
pub const SERVICE_LEN: usize = 4;
/// Bytes in a name (a PSM epid).
pub const NAME_LEN: usize = 8;
/// Bytes in a QUERY request.
pub const QUERY_LEN: usize = HEADER_LEN + SERVICE_LEN;
/// Bytes in an ADD or DEL request, and in an ACK that found an entry.
pub const ENTRY_FRAME_LEN: usize = HEADER_LEN + SERVICE_LEN + NAME_LEN;
/// The longest frame.
pub const MAX_FRAME_LEN: usize = ENTRY_FRAME_LEN;
/// The status C's server puts in an ACK when nothing matched
/// (`-FI_ENOENT`).
pub const STATUS_NOT_FOUND: NonZeroI32 = match NonZeroI32::new(-2) {
    Some(s) => s,
    None => unreachable!(),
};
/// The status of the ACK that refuses an ADD or DEL from another host
/// (`-FI_EACCES`): only the server's own host may register.
pub const STATUS_NOT_LOCAL: NonZeroI32 = match NonZeroI32::new(-13) {
    Some(s) => s,
    None => unreachable!(),
};

/// The operation a frame carries.
///
/// ```
/// use psmrail::fabric::name_server::wire::Op;
/// assert_eq!(Op::from_byte(2), Some(Op::Query));
/// assert_eq!(Op::Ack as u8, 3);
/// assert_eq!(Op::from_byte(4), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Register a service → epid mapping (no reply).
    Add = 0,
    /// Remove a mapping; the epid must match (no reply).
    Del = 1,
    /// Look a service up; answered by an ACK.
    Query = 2,
    /// The answer to a QUERY.
    Ack = 3,
}

impl Op {
    /// The op with this code, if there is one.
    pub const fn from_byte(b: u8) -> Option<Op> {
        match b {
            0 => Some(Op::Add),
            1 => Some(Op::Del),
            2 => Some(Op::Query),
            3 => Some(Op::Ack),
            _ => None,
        }
    }

    /// Its C name.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Add => "ADD",
            Op::Del => "DEL",
            Op::Query => "QUERY",
            Op::Ack => "ACK",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bytes that are not a valid frame of the kind expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header.
    #[error("{got} bytes is too short for the {HEADER_LEN}-byte header")]
    ShortHeader {
        /// Bytes available.
        got: usize,
    },
    /// A version other than [`VERSION`].
    #[error("version {0} (only version {VERSION} is known)")]
    Version(u8),
    /// An op code outside 0..=3.
    #[error("unknown op {0} (ADD 0, DEL 1, QUERY 2, ACK 3)")]
    UnknownOp(u8),
    /// A known op where the other direction's op is expected.
    #[error("{got} where {expected} was expected")]
    UnexpectedOp {
        /// The op found.
        got: Op,
        /// What was expected ("a request" or "an ACK").
        expected: &'static str,
    },
    /// The frame is shorter than its header calls for.
    #[error("{op} frame of {got} bytes, {needed} needed")]
    Short {
        /// The frame's op.
        op: Op,
        /// Bytes available.
        got: usize,
        /// Bytes the op calls for.
        needed: usize,
    },
    /// Bytes after the end of the frame.
    #[error("{op} frame of {got} bytes, {needed} expected (trailing bytes)")]
    Trailing {
        /// The frame's op.
        op: Op,
        /// Bytes available.
        got: usize,
        /// Bytes the op calls for.
        needed: usize,
    },
}

/// An encoded frame: at most [`MAX_FRAME_LEN`] bytes on the stack.
///
/// Dereferences to its bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    bytes: [u8; MAX_FRAME_LEN],
    len: usize,
}

impl Frame {
    fn new(op: Op, status: i32) -> Frame {
        let mut bytes = [0u8; MAX_FRAME_LEN];
        bytes[0] = VERSION;
        bytes[1] = op as u8;
        bytes[4..8].copy_from_slice(&status.to_be_bytes());
        Frame {
            bytes,
            len: HEADER_LEN,
        }
    }

    fn push(&mut self, b: &[u8]) {
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn with_entry(mut self, service: u32, epid: Epid) -> Frame {
        self.push(&service.to_le_bytes());
        self.push(&epid.0.to_le_bytes());
        self
    }

    /// The bytes to send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Deref for Frame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frame({:02x?})", self.as_bytes())
    }
}

/// The header's fields after the version and op checks.
struct Header {
    op: Op,
    status: i32,
}

/// Checks the version and op of the header at the start of `bytes`.
fn header(bytes: &[u8]) -> Result<Header, WireError> {
    let Some(h) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(WireError::ShortHeader { got: bytes.len() });
    };
    if h[0] != VERSION {
        return Err(WireError::Version(h[0]));
    }
    let op = Op::from_byte(h[1]).ok_or(WireError::UnknownOp(h[1]))?;
    let status = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    Ok(Header { op, status })
}

/// Checks that `bytes` is exactly `needed` long.
fn exact(op: Op, bytes: &[u8], needed: usize) -> Result<(), WireError> {
    let got = bytes.len();
    match got.cmp(&needed) {
        std::cmp::Ordering::Less => Err(WireError::Short { op, got, needed }),
        std::cmp::Ordering::Greater => Err(WireError::Trailing { op, got, needed }),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

/// Service and epid from an entry body at `bytes[HEADER_LEN..]` (already
/// length-checked).
fn entry(bytes: &[u8]) -> (u32, Epid) {
    let mut service = [0u8; SERVICE_LEN];
    let mut name = [0u8; NAME_LEN];
    service.copy_from_slice(&bytes[HEADER_LEN..HEADER_LEN + SERVICE_LEN]);
    name.copy_from_slice(&bytes[HEADER_LEN + SERVICE_LEN..ENTRY_FRAME_LEN]);
    (u32::from_le_bytes(service), Epid(u64::from_le_bytes(name)))
}

/// A command from a client to the server.
///
/// ```
/// use psmrail::engine::Epid;
/// use psmrail::fabric::name_server::wire::Request;
///
/// let add = Request::Add { service: 7, epid: Epid(0x1122_3344_5566_7788) };
/// let frame = add.encode();
/// assert_eq!(
///     &frame[..],
///     &[0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
/// );
/// assert_eq!(Request::decode(&frame), Ok(add));
/// assert!(Request::decode(&frame[..19]).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// Register `service` → `epid`.
    Add {
        /// The service number.
        service: u32,
        /// The endpoint's id.
        epid: Epid,
    },
    /// Remove `service` if it maps to `epid`.
    Del {
        /// The service number.
        service: u32,
        /// The endpoint's id it must map to.
        epid: Epid,
    },
    /// Ask for the epid of `service` (0: any registered service).
    Query {
        /// The service number, 0 for any.
        service: u32,
    },
}

impl Request {
    /// Its op.
    pub const fn op(&self) -> Op {
        match self {
            Request::Add { .. } => Op::Add,
            Request::Del { .. } => Op::Del,
            Request::Query { .. } => Op::Query,
        }
    }

    /// The frame, as C's client sends it (reserved and status 0).
    pub fn encode(&self) -> Frame {
        match *self {
            Request::Add { service, epid } => Frame::new(Op::Add, 0).with_entry(service, epid),
            Request::Del { service, epid } => Frame::new(Op::Del, 0).with_entry(service, epid),
            Request::Query { service } => {
                let mut f = Frame::new(Op::Query, 0);
                f.push(&service.to_le_bytes());
                f
            }
        }
    }

    /// The length of the whole request whose header starts `header`
    /// (at least [`HEADER_LEN`] bytes; anything after them is ignored).
    /// Lets a reader know how much to wait for before it has the body.
    ///
    /// ```
    /// use psmrail::fabric::name_server::wire::Request;
    /// assert_eq!(Request::frame_len(&[0, 2, 0, 0, 0, 0, 0, 0]), Ok(12));
    /// assert_eq!(Request::frame_len(&[0, 0, 0, 0, 0, 0, 0, 0]), Ok(20));
    /// assert!(Request::frame_len(&[0, 3, 0, 0, 0, 0, 0, 0]).is_err()); // ACK
    /// assert!(Request::frame_len(&[1, 2, 0, 0, 0, 0, 0, 0]).is_err()); // version 1
    /// ```
    pub fn frame_len(header_bytes: &[u8]) -> Result<usize, WireError> {
        match header(header_bytes)?.op {
            Op::Add | Op::Del => Ok(ENTRY_FRAME_LEN),
            Op::Query => Ok(QUERY_LEN),
            Op::Ack => Err(WireError::UnexpectedOp {
                got: Op::Ack,
                expected: "a request",
            }),
        }
    }

    /// Decodes exactly one request frame.
    pub fn decode(bytes: &[u8]) -> Result<Request, WireError> {
        let needed = Request::frame_len(bytes)?;
        let op = header(bytes)?.op;
        exact(op, bytes, needed)?;
        Ok(match op {
            Op::Query => {
                let mut service = [0u8; SERVICE_LEN];
                service.copy_from_slice(&bytes[HEADER_LEN..QUERY_LEN]);
                Request::Query {
                    service: u32::from_le_bytes(service),
                }
            }
            Op::Add => {
                let (service, epid) = entry(bytes);
                Request::Add { service, epid }
            }
            // `frame_len` refused ACK, so this is DEL.
            Op::Del | Op::Ack => {
                let (service, epid) = entry(bytes);
                Request::Del { service, epid }
            }
        })
    }
}

/// The server's answer to a QUERY (an ACK frame).
///
/// ```
/// use psmrail::engine::Epid;
/// use psmrail::fabric::name_server::wire::{Reply, STATUS_NOT_FOUND};
///
/// let miss = Reply::NotFound { status: STATUS_NOT_FOUND };
/// // The status is big-endian: htonl(-2).
/// assert_eq!(&miss.encode()[..], &[0, 3, 0, 0, 0xff, 0xff, 0xff, 0xfe]);
///
/// let hit = Reply::Found { service: 9, epid: Epid(5) };
/// assert_eq!(Reply::decode(&hit.encode()), Ok(hit));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Status 0: the entry, with its real service (which matters when the
    /// query asked for service 0).
    Found {
        /// The registered service.
        service: u32,
        /// Its endpoint's id.
        epid: Epid,
    },
    /// A non-zero status and no body: nothing matched, or (status
    /// [`STATUS_NOT_LOCAL`], after an ADD or DEL) the request was refused.
    NotFound {
        /// The status (C sends [`STATUS_NOT_FOUND`]; any non-zero value
        /// means failure to its client).
        status: NonZeroI32,
    },
}

impl Reply {
    /// The frame, as C's server sends it (reserved 0).
    pub fn encode(&self) -> Frame {
        match *self {
            Reply::Found { service, epid } => Frame::new(Op::Ack, 0).with_entry(service, epid),
            Reply::NotFound { status } => Frame::new(Op::Ack, status.get()),
        }
    }

    /// The length of the whole reply whose header starts `header`
    /// (at least [`HEADER_LEN`] bytes).
    ///
    /// ```
    /// use psmrail::fabric::name_server::wire::Reply;
    /// assert_eq!(Reply::frame_len(&[0, 3, 0, 0, 0, 0, 0, 0]), Ok(20));
    /// assert_eq!(Reply::frame_len(&[0, 3, 0, 0, 0, 0, 0, 1]), Ok(8));
    /// assert!(Reply::frame_len(&[0, 2, 0, 0, 0, 0, 0, 0]).is_err()); // QUERY
    /// ```
    pub fn frame_len(header_bytes: &[u8]) -> Result<usize, WireError> {
        let h = header(header_bytes)?;
        match h.op {
            Op::Ack if h.status == 0 => Ok(ENTRY_FRAME_LEN),
            Op::Ack => Ok(HEADER_LEN),
            got => Err(WireError::UnexpectedOp {
                got,
                expected: "an ACK",
            }),
        }
    }

    /// Decodes exactly one reply frame.
    pub fn decode(bytes: &[u8]) -> Result<Reply, WireError> {
        let needed = Reply::frame_len(bytes)?;
        exact(Op::Ack, bytes, needed)?;
        let h = header(bytes)?;
        Ok(match NonZeroI32::new(h.status) {
            Some(status) => Reply::NotFound { status },
            None => {
                let (service, epid) = entry(bytes);
                Reply::Found { service, epid }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn query_bytes() {
        let q = Request::Query {
            service: 0x0102_0304,
        };
        assert_eq!(&q.encode()[..], &[0, 2, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1]);
        assert_eq!(Request::decode(&q.encode()), Ok(q));
    }

    #[test]
    fn del_bytes() {
        let d = Request::Del {
            service: 1,
            epid: Epid(2),
        };
        assert_eq!(
            &d.encode()[..],
            &[0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn found_bytes() {
        let r = Reply::Found {
            service: 0xdead_beef,
            epid: Epid(0x0102_0304_0506_0708),
        };
        assert_eq!(
            &r.encode()[..],
            &[0, 3, 0, 0, 0, 0, 0, 0, 0xef, 0xbe, 0xad, 0xde, 8, 7, 6, 5, 4, 3, 2, 1]
        );
    }

    #[test]
    fn reserved_and_request_status_are_ignored() {
        // C copies the request header into its reply and never reads these.
        let bytes = [0, 2, 0xab, 0xcd, 1, 2, 3, 4, 9, 0, 0, 0];
        assert_eq!(Request::decode(&bytes), Ok(Request::Query { service: 9 }));
        let reply = [
            0, 3, 0xab, 0xcd, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(
            Reply::decode(&reply),
            Ok(Reply::Found {
                service: 1,
                epid: Epid(2)
            })
        );
    }

    #[test]
    fn hostile_requests() {
        let cases: [(&[u8], WireError); 8] = [
            (&[], WireError::ShortHeader { got: 0 }),
            (&[0, 2, 0, 0, 0, 0, 0], WireError::ShortHeader { got: 7 }),
            (&[1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], WireError::Version(1)),
            (
                &[0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp(9),
            ),
            (
                &[0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                WireError::UnexpectedOp {
                    got: Op::Ack,
                    expected: "a request",
                },
            ),
            (
                &[0, 2, 0, 0, 0, 0, 0, 0, 1],
                WireError::Short {
                    op: Op::Query,
                    got: 9,
                    needed: 12,
                },
            ),
            (
                &[0, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
                WireError::Trailing {
                    op: Op::Query,
                    got: 13,
                    needed: 12,
                },
            ),
            (
                &[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0],
                WireError::Short {
                    op: Op::Add,
                    got: 12,
                    needed: 20,
                },
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(Request::decode(bytes), Err(want), "{bytes:?}");
            assert!(!want.to_string().is_empty());
        }
        assert_eq!(
            WireError::Trailing {
                op: Op::Query,
                got: 13,
                needed: 12
            }
            .to_string(),
            "QUERY frame of 13 bytes, 12 expected (trailing bytes)"
        );
    }

    #[test]
    fn hostile_replies() {
        assert_eq!(
            Reply::decode(&[0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(WireError::UnexpectedOp {
                got: Op::Query,
                expected: "an ACK"
            })
        );
        // A miss carries no body.
        assert_eq!(
            Reply::decode(&[0, 3, 0, 0, 0xff, 0xff, 0xff, 0xfe, 0]),
            Err(WireError::Trailing {
                op: Op::Ack,
                got: 9,
                needed: 8
            })
        );
        // A hit must carry one.
        assert_eq!(
            Reply::decode(&[0, 3, 0, 0, 0, 0, 0, 0]),
            Err(WireError::Short {
                op: Op::Ack,
                got: 8,
                needed: 20
            })
        );
        assert_eq!(
            Reply::decode(&[7, 3, 0, 0, 0, 0, 0, 0]),
            Err(WireError::Version(7))
        );
    }

    #[test]
    fn not_found_status_round_trips() {
        let r = Reply::decode(&[0, 3, 0, 0, 0, 0, 0, 1]).unwrap();
        assert_eq!(
            r,
            Reply::NotFound {
                status: NonZeroI32::new(1).unwrap()
            }
        );
        assert_eq!(&r.encode()[..], &[0, 3, 0, 0, 0, 0, 0, 1]);
    }

    fn any_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (any::<u32>(), any::<u64>()).prop_map(|(service, e)| Request::Add {
                service,
                epid: Epid(e)
            }),
            (any::<u32>(), any::<u64>()).prop_map(|(service, e)| Request::Del {
                service,
                epid: Epid(e)
            }),
            any::<u32>().prop_map(|service| Request::Query { service }),
        ]
    }

    fn any_reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            (any::<u32>(), any::<u64>()).prop_map(|(service, e)| Reply::Found {
                service,
                epid: Epid(e)
            }),
            any::<NonZeroI32>().prop_map(|status| Reply::NotFound { status }),
        ]
    }

    proptest! {
        #[test]
        fn request_round_trips(r in any_request()) {
            let f = r.encode();
            prop_assert_eq!(Request::frame_len(&f), Ok(f.len()));
            prop_assert_eq!(Request::decode(&f), Ok(r));
            prop_assert!(Reply::decode(&f).is_err());
            for cut in 0..f.len() {
                prop_assert!(Request::decode(&f[..cut]).is_err());
            }
        }

        #[test]
        fn reply_round_trips(r in any_reply()) {
            let f = r.encode();
            prop_assert_eq!(Reply::frame_len(&f), Ok(f.len()));
            prop_assert_eq!(Reply::decode(&f), Ok(r));
            prop_assert!(Request::decode(&f).is_err());
            let mut longer = f.as_bytes().to_vec();
            longer.push(0);
            prop_assert!(Reply::decode(&longer).is_err());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Request::decode(&bytes);
            let _ = Reply::decode(&bytes);
            let _ = Request::frame_len(&bytes);
            let _ = Reply::frame_len(&bytes);
        }
    }
}
