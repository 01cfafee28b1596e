//! The name server's wire format: libfabric's `util_ns` frames byte for
//! byte (`prov/util/src/util_ns.c`, version 0), and psmrail's owning
//! sessions (version 1), as pure functions over byte slices.
//!
//! A frame is an 8-byte header followed by a body:
//!
//! | offset | size | field                                              |
//! |--------|------|----------------------------------------------------|
//! | 0      | 1    | version: [`VERSION`] (0, C's) or [`SESSION_VERSION`] (1) |
//! | 1      | 1    | op ([`Op`]: ADD 0, DEL 1, QUERY 2, ACK 3, HELLO 4, CHALLENGE 5) |
//! | 2      | 1    | version 0: reserved; version 1: flags ([`FLAG_PROOF`]) |
//! | 3      | 1    | reserved                                           |
//! | 4      | 4    | status, **big-endian** (C's `htonl`), signed        |
//!
//! # Version 0: C's frames
//!
//! Every connection carries one command.
//!
//! | frame                | body                                          | total |
//! |----------------------|-----------------------------------------------|-------|
//! | ADD / DEL request    | service u32 + name (the epid) u64             | 20 B  |
//! | QUERY request        | service u32                                   | 12 B  |
//! | ACK, status 0        | service u32 + name u64 (the real service)     | 20 B  |
//! | ACK, status ≠ 0      | none (C sends `-FI_ENOENT`, [`STATUS_NOT_FOUND`]) | 8 B |
//!
//! The reserved bytes are sent as 0 and ignored on receipt, as C does, and
//! so is the status of a request. C's server answers nothing to ADD and
//! DEL. psmrail's carries out neither (they name no owner, so any process
//! could delete or replace any entry with them): it answers an ACK of
//! status [`STATUS_NEEDS_SESSION`], or [`STATUS_NOT_LOCAL`] when the
//! command came from another host, before closing. A C client, which
//! closes right after sending, never reads it. QUERY is C's, both ways.
//!
//! # Version 1: owning sessions
//!
//! A process registers over one connection that it keeps open, its
//! *session*: the entries it adds belong to that session, only that
//! session deletes them, and they go when the connection closes (the
//! process exited or was killed). The client opens with HELLO; the server
//! answers CHALLENGE with a fresh random nonce; then each ADD or DEL is
//! answered by an ACK whose status says whether it was carried out.
//!
//! | frame          | flags          | body                                          | total |
//! |----------------|----------------|-----------------------------------------------|-------|
//! | HELLO          | 0              | none                                          | 8 B   |
//! | CHALLENGE      | 0              | nonce, [`NONCE_LEN`] bytes                    | 24 B  |
//! | ADD / DEL      | [`FLAG_PROOF`] or 0 | service u32 + epid u64 + proof, [`PROOF_LEN`] bytes (zero without the flag) | 52 B |
//! | ACK            | 0              | none; status 0: done, else a `STATUS_*` refusal | 8 B |
//!
//! The proof is the job secret's HMAC-SHA256 over the session's nonce, the
//! request's number in the session (0 for the first ADD or DEL after the
//! challenge) and the request (`proof.rs`); a server with a job secret
//! refuses a request without it ([`STATUS_NO_PROOF`]) or with a wrong one
//! ([`STATUS_BAD_PROOF`], which is what a replayed request gets). In
//! version 1 every reserved bit, undefined flag and request status must be
//! zero.
//!
//! # Byte order
//!
//! The body is in the C provider's *host* byte order; psmrail fixes it to
//! little-endian so that it meets the C provider on x86 byte for byte.
//! Only the status is byte-swapped, despite C's comment claiming network
//! order throughout.
//!
//! Decoding takes exactly one frame: an unknown version, an op its version
//! does not have, a frame shorter or longer than its op calls for, set
//! reserved bits in version 1, or a reply where a request is expected (and
//! the reverse) are [`WireError`]s, never panics.

use std::fmt;
use std::num::NonZeroI32;
use std::ops::Deref;

use crate::engine::Epid;

/// C's protocol version (`OFI_NS_VERSION`): QUERY and its ACK, and the
/// ADD and DEL psmrail refuses.
pub const VERSION: u8 = 0;
/// The version of owning sessions: HELLO, CHALLENGE, and ADD, DEL and ACK
/// within a session.
pub const SESSION_VERSION: u8 = 1;
/// Bytes in the header.
pub const HEADER_LEN: usize = 8;
/// Bytes in a service number (a C `int`).
pub const SERVICE_LEN: usize = 4;
/// Bytes in a name (a PSM epid).
pub const NAME_LEN: usize = 8;
/// Bytes in a server's challenge.
pub const NONCE_LEN: usize = 16;
/// Bytes in a request's proof of the job secret (HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// Bytes in a QUERY request.
pub const QUERY_LEN: usize = HEADER_LEN + SERVICE_LEN;
/// Bytes in a version-0 ADD or DEL request, and in an ACK that found an
/// entry.
pub const ENTRY_FRAME_LEN: usize = HEADER_LEN + SERVICE_LEN + NAME_LEN;
/// Bytes in a CHALLENGE.
pub const CHALLENGE_LEN: usize = HEADER_LEN + NONCE_LEN;
/// Bytes in a session's ADD or DEL.
pub const SESSION_ENTRY_LEN: usize = ENTRY_FRAME_LEN + PROOF_LEN;
/// The longest frame.
pub const MAX_FRAME_LEN: usize = SESSION_ENTRY_LEN;
/// The version-1 flag that says a session's ADD or DEL carries a proof.
pub const FLAG_PROOF: u8 = 1;

const fn status(code: i32) -> NonZeroI32 {
    match NonZeroI32::new(code) {
        Some(s) => s,
        None => panic!("a status is non-zero"),
    }
}

/// `-FI_ENOENT`: nothing matched (C's only refusal, in an ACK to QUERY);
/// in a session, DEL of a service that is not registered or registered to
/// another epid.
pub const STATUS_NOT_FOUND: NonZeroI32 = status(-2);
/// `-FI_EACCES`: an ADD, DEL or HELLO from another host; only the server's
/// own host registers.
pub const STATUS_NOT_LOCAL: NonZeroI32 = status(-13);
/// `-FI_EPERM`: DEL of an entry that another session (or the serving
/// process) holds.
pub const STATUS_NOT_OWNER: NonZeroI32 = status(-1);
/// `-FI_EBUSY`: ADD of a service that is registered already.
pub const STATUS_TAKEN: NonZeroI32 = status(-16);
/// `-FI_EINVAL`: ADD or DEL of service 0, the query wildcard.
pub const STATUS_WILDCARD: NonZeroI32 = status(-22);
/// `-FI_ENOMEM`: the table is full.
pub const STATUS_FULL: NonZeroI32 = status(-12);
/// `-FI_ENOSPC`: the session holds its share of entries already, or the
/// server holds as many sessions with entries as it keeps.
pub const STATUS_SESSION_FULL: NonZeroI32 = status(-28);
/// `-FI_ENOKEY`: the server has a job secret and the request carries no
/// proof of it.
pub const STATUS_NO_PROOF: NonZeroI32 = status(-126);
/// `-FI_EKEYREJECTED`: the request's proof is not the one the server's
/// job secret, the session's nonce and the request call for (another
/// secret, or a request captured from another session and replayed).
pub const STATUS_BAD_PROOF: NonZeroI32 = status(-129);
/// `-FI_EOPNOTSUPP`: a version-0 ADD or DEL; registrations need an owning
/// session.
pub const STATUS_NEEDS_SESSION: NonZeroI32 = status(-95);

/// The operation a frame carries.
///
/// ```
/// use psmrail::fabric::name_server::wire::Op;
/// assert_eq!(Op::from_byte(2), Some(Op::Query));
/// assert_eq!(Op::Ack as u8, 3);
/// assert_eq!(Op::from_byte(5), Some(Op::Challenge));
/// assert_eq!(Op::from_byte(6), None);
/// assert!(!Op::Hello.in_version(0) && Op::Hello.in_version(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Register a service → epid mapping.
    Add = 0,
    /// Remove a mapping; the epid must match.
    Del = 1,
    /// Look a service up; answered by an ACK (version 0 only).
    Query = 2,
    /// The answer to a QUERY, or (version 1) to an ADD or DEL.
    Ack = 3,
    /// Open an owning session (version 1 only).
    Hello = 4,
    /// The server's nonce for a session (version 1 only).
    Challenge = 5,
}

impl Op {
    /// The op with this code, if there is one (in some version).
    pub const fn from_byte(b: u8) -> Option<Op> {
        match b {
            0 => Some(Op::Add),
            1 => Some(Op::Del),
            2 => Some(Op::Query),
            3 => Some(Op::Ack),
            4 => Some(Op::Hello),
            5 => Some(Op::Challenge),
            _ => None,
        }
    }

    /// Whether protocol `version` has this op.
    pub const fn in_version(self, version: u8) -> bool {
        match version {
            VERSION => matches!(self, Op::Add | Op::Del | Op::Query | Op::Ack),
            SESSION_VERSION => !matches!(self, Op::Query),
            _ => false,
        }
    }

    /// Its name (C's for the version-0 ops).
    pub const fn name(self) -> &'static str {
        match self {
            Op::Add => "ADD",
            Op::Del => "DEL",
            Op::Query => "QUERY",
            Op::Ack => "ACK",
            Op::Hello => "HELLO",
            Op::Challenge => "CHALLENGE",
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
    /// A version other than [`VERSION`] and [`SESSION_VERSION`].
    #[error("version {0} (versions {VERSION} and {SESSION_VERSION} are known)")]
    Version(u8),
    /// An op code the frame's version does not have.
    #[error(
        "unknown op {op} in version {version} (version 0: ADD 0, DEL 1, QUERY 2, ACK 3; \
         version 1: ADD 0, DEL 1, ACK 3, HELLO 4, CHALLENGE 5)"
    )]
    UnknownOp {
        /// The frame's version.
        version: u8,
        /// The op byte.
        op: u8,
    },
    /// A known op where another is expected (a reply where a request is
    /// expected, or the reverse, or a frame out of a session's order).
    #[error("{got} where {expected} was expected")]
    UnexpectedOp {
        /// The op found.
        got: Op,
        /// What was expected ("a request", "an ACK", ...).
        expected: &'static str,
    },
    /// A version-1 frame with a reserved bit, an undefined flag, a
    /// request status or (without [`FLAG_PROOF`]) proof bytes set.
    #[error("version 1 {op} frame with reserved bits set ({what})")]
    Reserved {
        /// The frame's op.
        op: Op,
        /// Which field.
        what: &'static str,
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
    fn new(version: u8, op: Op, flags: u8, status: i32) -> Frame {
        let mut bytes = [0u8; MAX_FRAME_LEN];
        bytes[0] = version;
        bytes[1] = op as u8;
        bytes[2] = flags;
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
    version: u8,
    op: Op,
    flags: u8,
    reserved: u8,
    status: i32,
}

/// Checks the version and op of the header at the start of `bytes`.
fn header(bytes: &[u8]) -> Result<Header, WireError> {
    let Some(h) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(WireError::ShortHeader { got: bytes.len() });
    };
    let version = h[0];
    if version != VERSION && version != SESSION_VERSION {
        return Err(WireError::Version(version));
    }
    let op = Op::from_byte(h[1])
        .filter(|op| op.in_version(version))
        .ok_or(WireError::UnknownOp { version, op: h[1] })?;
    Ok(Header {
        version,
        op,
        flags: h[2],
        reserved: h[3],
        status: i32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    })
}

/// Version 1 only: every reserved bit zero, no flag outside `flags`, and
/// (unless `status_allowed`) a zero status.
fn strict(h: &Header, flags: u8, status_allowed: bool) -> Result<(), WireError> {
    if h.version != SESSION_VERSION {
        return Ok(());
    }
    let what = if h.reserved != 0 {
        "byte 3"
    } else if h.flags & !flags != 0 {
        "flags"
    } else if h.status != 0 && !status_allowed {
        "status"
    } else {
        return Ok(());
    };
    Err(WireError::Reserved { op: h.op, what })
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

/// The proof of a session's ADD or DEL (already length-checked): `None`
/// without [`FLAG_PROOF`], when its bytes must be zero.
fn proof(h: &Header, bytes: &[u8]) -> Result<Option<[u8; PROOF_LEN]>, WireError> {
    let mut p = [0u8; PROOF_LEN];
    p.copy_from_slice(&bytes[ENTRY_FRAME_LEN..SESSION_ENTRY_LEN]);
    if h.flags & FLAG_PROOF != 0 {
        Ok(Some(p))
    } else if p.iter().any(|&b| b != 0) {
        Err(WireError::Reserved {
            op: h.op,
            what: "proof bytes without the proof flag",
        })
    } else {
        Ok(None)
    }
}

/// What a session's ADD or DEL does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// Register the service.
    Add,
    /// Remove it.
    Del,
}

impl Change {
    /// Its op.
    pub const fn op(self) -> Op {
        match self {
            Change::Add => Op::Add,
            Change::Del => Op::Del,
        }
    }
}

/// A command from a client to the server.
///
/// ```
/// use psmrail::engine::Epid;
/// use psmrail::fabric::name_server::wire::{Change, Request};
///
/// let add = Request::Add { service: 7, epid: Epid(0x1122_3344_5566_7788) };
/// let frame = add.encode();
/// assert_eq!(
///     &frame[..],
///     &[0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
/// );
/// assert_eq!(Request::decode(&frame), Ok(add));
/// assert!(Request::decode(&frame[..19]).is_err());
///
/// let hello = Request::Hello.encode();
/// assert_eq!(&hello[..], &[1, 4, 0, 0, 0, 0, 0, 0]);
/// let del = Request::Session { change: Change::Del, service: 7, epid: Epid(9), proof: Some([3; 32]) };
/// let frame = del.encode();
/// assert_eq!(frame.len(), 52);
/// assert_eq!(&frame[..4], &[1, 1, 1, 0]); // version 1, DEL, proof flag
/// assert_eq!(Request::decode(&frame), Ok(del));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// Version 0: register `service` → `epid` (refused by psmrail's server).
    Add {
        /// The service number.
        service: u32,
        /// The endpoint's id.
        epid: Epid,
    },
    /// Version 0: remove `service` if it maps to `epid` (refused by
    /// psmrail's server).
    Del {
        /// The service number.
        service: u32,
        /// The endpoint's id it must map to.
        epid: Epid,
    },
    /// Version 0: ask for the epid of `service` (0: any registered
    /// service).
    Query {
        /// The service number, 0 for any.
        service: u32,
    },
    /// Version 1: open an owning session.
    Hello,
    /// Version 1: an ADD or DEL within a session.
    Session {
        /// ADD or DEL.
        change: Change,
        /// The service number.
        service: u32,
        /// The endpoint's id (DEL: the one it must map to).
        epid: Epid,
        /// The proof of the job secret, if the client has one.
        proof: Option<[u8; PROOF_LEN]>,
    },
}

impl Request {
    /// Its op.
    pub const fn op(&self) -> Op {
        match self {
            Request::Add { .. } => Op::Add,
            Request::Del { .. } => Op::Del,
            Request::Query { .. } => Op::Query,
            Request::Hello => Op::Hello,
            Request::Session { change, .. } => change.op(),
        }
    }

    /// Its protocol version.
    pub const fn version(&self) -> u8 {
        match self {
            Request::Add { .. } | Request::Del { .. } | Request::Query { .. } => VERSION,
            Request::Hello | Request::Session { .. } => SESSION_VERSION,
        }
    }

    /// The frame (version 0 as C's client sends it: reserved and status 0).
    pub fn encode(&self) -> Frame {
        match *self {
            Request::Add { service, epid } => {
                Frame::new(VERSION, Op::Add, 0, 0).with_entry(service, epid)
            }
            Request::Del { service, epid } => {
                Frame::new(VERSION, Op::Del, 0, 0).with_entry(service, epid)
            }
            Request::Query { service } => {
                let mut f = Frame::new(VERSION, Op::Query, 0, 0);
                f.push(&service.to_le_bytes());
                f
            }
            Request::Hello => Frame::new(SESSION_VERSION, Op::Hello, 0, 0),
            Request::Session {
                change,
                service,
                epid,
                proof,
            } => {
                let flags = if proof.is_some() { FLAG_PROOF } else { 0 };
                let mut f =
                    Frame::new(SESSION_VERSION, change.op(), flags, 0).with_entry(service, epid);
                f.push(&proof.unwrap_or([0; PROOF_LEN]));
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
    /// assert_eq!(Request::frame_len(&[1, 4, 0, 0, 0, 0, 0, 0]), Ok(8)); // HELLO
    /// assert_eq!(Request::frame_len(&[1, 0, 1, 0, 0, 0, 0, 0]), Ok(52)); // session ADD
    /// assert!(Request::frame_len(&[0, 3, 0, 0, 0, 0, 0, 0]).is_err()); // ACK
    /// assert!(Request::frame_len(&[1, 2, 0, 0, 0, 0, 0, 0]).is_err()); // version 1 QUERY
    /// assert!(Request::frame_len(&[2, 2, 0, 0, 0, 0, 0, 0]).is_err()); // version 2
    /// ```
    pub fn frame_len(header_bytes: &[u8]) -> Result<usize, WireError> {
        let h = header(header_bytes)?;
        let reply = |got| WireError::UnexpectedOp {
            got,
            expected: "a request",
        };
        match (h.version, h.op) {
            (_, op @ (Op::Ack | Op::Challenge)) => Err(reply(op)),
            (VERSION, Op::Add | Op::Del) => Ok(ENTRY_FRAME_LEN),
            (VERSION, _) => Ok(QUERY_LEN),
            (_, Op::Hello) => strict(&h, 0, false).map(|()| HEADER_LEN),
            // Version 1 has no QUERY (`header` refused it): ADD or DEL.
            _ => strict(&h, FLAG_PROOF, false).map(|()| SESSION_ENTRY_LEN),
        }
    }

    /// Decodes exactly one request frame.
    pub fn decode(bytes: &[u8]) -> Result<Request, WireError> {
        let needed = Request::frame_len(bytes)?;
        let h = header(bytes)?;
        exact(h.op, bytes, needed)?;
        Ok(match (h.version, h.op) {
            (VERSION, Op::Query) => {
                let mut service = [0u8; SERVICE_LEN];
                service.copy_from_slice(&bytes[HEADER_LEN..QUERY_LEN]);
                Request::Query {
                    service: u32::from_le_bytes(service),
                }
            }
            (VERSION, Op::Add) => {
                let (service, epid) = entry(bytes);
                Request::Add { service, epid }
            }
            // `frame_len` refused the replies, so this is DEL.
            (VERSION, _) => {
                let (service, epid) = entry(bytes);
                Request::Del { service, epid }
            }
            (_, Op::Hello) => Request::Hello,
            // Version 1, and not HELLO: ADD or DEL.
            (_, op) => {
                let (service, epid) = entry(bytes);
                Request::Session {
                    change: if op == Op::Add {
                        Change::Add
                    } else {
                        Change::Del
                    },
                    service,
                    epid,
                    proof: proof(&h, bytes)?,
                }
            }
        })
    }
}

/// The server's answer: to a QUERY (a version-0 ACK), to a HELLO (a
/// CHALLENGE) or to a session's ADD or DEL (a version-1 ACK).
///
/// ```
/// use psmrail::engine::Epid;
/// use psmrail::fabric::name_server::wire::{Reply, STATUS_NOT_FOUND, STATUS_TAKEN};
///
/// let miss = Reply::NotFound { status: STATUS_NOT_FOUND };
/// // The status is big-endian: htonl(-2).
/// assert_eq!(&miss.encode()[..], &[0, 3, 0, 0, 0xff, 0xff, 0xff, 0xfe]);
///
/// let hit = Reply::Found { service: 9, epid: Epid(5) };
/// assert_eq!(Reply::decode(&hit.encode()), Ok(hit));
///
/// let busy = Reply::Refused { status: STATUS_TAKEN };
/// assert_eq!(&busy.encode()[..], &[1, 3, 0, 0, 0xff, 0xff, 0xff, 0xf0]);
/// assert_eq!(&Reply::Done.encode()[..], &[1, 3, 0, 0, 0, 0, 0, 0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Version 0, status 0: the entry, with its real service (which
    /// matters when the query asked for service 0).
    Found {
        /// The registered service.
        service: u32,
        /// Its endpoint's id.
        epid: Epid,
    },
    /// Version 0, a non-zero status and no body: nothing matched, or
    /// (after a version-0 ADD or DEL) the command was refused
    /// ([`STATUS_NEEDS_SESSION`], [`STATUS_NOT_LOCAL`]).
    NotFound {
        /// The status (C sends [`STATUS_NOT_FOUND`]; any non-zero value
        /// means failure to its client).
        status: NonZeroI32,
    },
    /// Version 1: the session's nonce, the answer to HELLO.
    Challenge {
        /// Fresh random bytes, never sent to another session.
        nonce: [u8; NONCE_LEN],
    },
    /// Version 1, status 0: the session's ADD or DEL was carried out.
    Done,
    /// Version 1, a non-zero status: the session's ADD or DEL (or, with
    /// [`STATUS_NOT_LOCAL`], its HELLO) was refused and changed nothing.
    Refused {
        /// Why (a `STATUS_*` constant).
        status: NonZeroI32,
    },
}

impl Reply {
    /// The frame (version 0 as C's server sends it: reserved 0).
    pub fn encode(&self) -> Frame {
        match *self {
            Reply::Found { service, epid } => {
                Frame::new(VERSION, Op::Ack, 0, 0).with_entry(service, epid)
            }
            Reply::NotFound { status } => Frame::new(VERSION, Op::Ack, 0, status.get()),
            Reply::Challenge { nonce } => {
                let mut f = Frame::new(SESSION_VERSION, Op::Challenge, 0, 0);
                f.push(&nonce);
                f
            }
            Reply::Done => Frame::new(SESSION_VERSION, Op::Ack, 0, 0),
            Reply::Refused { status } => Frame::new(SESSION_VERSION, Op::Ack, 0, status.get()),
        }
    }

    /// The length of the whole reply whose header starts `header`
    /// (at least [`HEADER_LEN`] bytes).
    ///
    /// ```
    /// use psmrail::fabric::name_server::wire::Reply;
    /// assert_eq!(Reply::frame_len(&[0, 3, 0, 0, 0, 0, 0, 0]), Ok(20));
    /// assert_eq!(Reply::frame_len(&[0, 3, 0, 0, 0, 0, 0, 1]), Ok(8));
    /// assert_eq!(Reply::frame_len(&[1, 5, 0, 0, 0, 0, 0, 0]), Ok(24)); // CHALLENGE
    /// assert_eq!(Reply::frame_len(&[1, 3, 0, 0, 0, 0, 0, 0]), Ok(8)); // session ACK
    /// assert!(Reply::frame_len(&[0, 2, 0, 0, 0, 0, 0, 0]).is_err()); // QUERY
    /// assert!(Reply::frame_len(&[1, 3, 1, 0, 0, 0, 0, 0]).is_err()); // a flag
    /// ```
    pub fn frame_len(header_bytes: &[u8]) -> Result<usize, WireError> {
        let h = header(header_bytes)?;
        match (h.version, h.op) {
            (VERSION, Op::Ack) if h.status == 0 => Ok(ENTRY_FRAME_LEN),
            (VERSION, Op::Ack) => Ok(HEADER_LEN),
            (SESSION_VERSION, Op::Ack) => strict(&h, 0, true).map(|()| HEADER_LEN),
            (SESSION_VERSION, Op::Challenge) => strict(&h, 0, false).map(|()| CHALLENGE_LEN),
            (_, got) => Err(WireError::UnexpectedOp {
                got,
                expected: "an ACK or a CHALLENGE",
            }),
        }
    }

    /// Decodes exactly one reply frame.
    pub fn decode(bytes: &[u8]) -> Result<Reply, WireError> {
        let needed = Reply::frame_len(bytes)?;
        let h = header(bytes)?;
        exact(h.op, bytes, needed)?;
        Ok(match (h.version, h.op, NonZeroI32::new(h.status)) {
            (VERSION, _, Some(status)) => Reply::NotFound { status },
            (VERSION, _, None) => {
                let (service, epid) = entry(bytes);
                Reply::Found { service, epid }
            }
            (_, Op::Challenge, _) => {
                let mut nonce = [0u8; NONCE_LEN];
                nonce.copy_from_slice(&bytes[HEADER_LEN..CHALLENGE_LEN]);
                Reply::Challenge { nonce }
            }
            (_, _, Some(status)) => Reply::Refused { status },
            (_, _, None) => Reply::Done,
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
        let cases: [(&[u8], WireError); 9] = [
            (&[], WireError::ShortHeader { got: 0 }),
            (&[0, 2, 0, 0, 0, 0, 0], WireError::ShortHeader { got: 7 }),
            (&[2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], WireError::Version(2)),
            (
                &[1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp { version: 1, op: 2 },
            ),
            (
                &[0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp { version: 0, op: 9 },
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
                expected: "an ACK or a CHALLENGE"
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

    #[test]
    fn session_bytes() {
        let add = Request::Session {
            change: Change::Add,
            service: 0x0102_0304,
            epid: Epid(0x1122_3344_5566_7788),
            proof: None,
        };
        let mut want = vec![1, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1];
        want.extend_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        want.extend_from_slice(&[0; PROOF_LEN]);
        assert_eq!(&add.encode()[..], &want[..]);
        assert_eq!(Request::decode(&want), Ok(add));
        let mut nonce = [0u8; NONCE_LEN];
        nonce[0] = 0xaa;
        let c = Reply::Challenge { nonce };
        let mut want = vec![1, 5, 0, 0, 0, 0, 0, 0, 0xaa];
        want.extend_from_slice(&[0; NONCE_LEN - 1]);
        assert_eq!(&c.encode()[..], &want[..]);
        let refused = Reply::Refused {
            status: STATUS_BAD_PROOF,
        };
        assert_eq!(&refused.encode()[..], &[1, 3, 0, 0, 0xff, 0xff, 0xff, 0x7f]);
        // A version-0 ACK of the same status is a different reply.
        assert_eq!(
            Reply::decode(&[0, 3, 0, 0, 0xff, 0xff, 0xff, 0x7f]),
            Ok(Reply::NotFound {
                status: STATUS_BAD_PROOF
            })
        );
    }

    #[test]
    fn version_1_is_strict() {
        let mut del = Request::Session {
            change: Change::Del,
            service: 1,
            epid: Epid(2),
            proof: None,
        }
        .encode()
        .to_vec();
        let cases: [(usize, u8, &str); 4] = [
            (3, 1, "byte 3"),
            (2, 2, "flags"),
            (7, 1, "status"),
            (51, 1, "proof bytes without the proof flag"),
        ];
        for (at, value, what) in cases {
            let old = del[at];
            del[at] = value;
            assert_eq!(
                Request::decode(&del),
                Err(WireError::Reserved { op: Op::Del, what }),
                "{what}"
            );
            del[at] = old;
        }
        assert!(Request::decode(&del).is_ok());
        // HELLO takes no flag; a session ACK no flag, but any status.
        assert_eq!(
            Request::frame_len(&[1, 4, 1, 0, 0, 0, 0, 0]),
            Err(WireError::Reserved {
                op: Op::Hello,
                what: "flags"
            })
        );
        assert_eq!(Reply::frame_len(&[1, 3, 0, 0, 0xff, 0, 0, 0]), Ok(8));
        assert!(Reply::frame_len(&[1, 5, 0, 0, 0, 0, 0, 1]).is_err());
        // Version 0 keeps ignoring what C ignores.
        assert!(Request::decode(&[0, 2, 0xff, 0xff, 1, 2, 3, 4, 9, 0, 0, 0]).is_ok());
    }

    #[test]
    fn ops_belong_to_their_versions() {
        for (bytes, want) in [
            (
                [0, 4, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp { version: 0, op: 4 },
            ),
            (
                [0, 5, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp { version: 0, op: 5 },
            ),
            (
                [1, 2, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp { version: 1, op: 2 },
            ),
            (
                [1, 6, 0, 0, 0, 0, 0, 0],
                WireError::UnknownOp { version: 1, op: 6 },
            ),
        ] {
            assert_eq!(Request::frame_len(&bytes), Err(want));
            assert_eq!(Reply::frame_len(&bytes), Err(want));
        }
        assert_eq!(
            Request::frame_len(&[1, 5, 0, 0, 0, 0, 0, 0]),
            Err(WireError::UnexpectedOp {
                got: Op::Challenge,
                expected: "a request"
            })
        );
        assert_eq!(
            Reply::frame_len(&[1, 4, 0, 0, 0, 0, 0, 0]),
            Err(WireError::UnexpectedOp {
                got: Op::Hello,
                expected: "an ACK or a CHALLENGE"
            })
        );
    }

    fn any_proof() -> impl Strategy<Value = Option<[u8; PROOF_LEN]>> {
        proptest::option::of(any::<[u8; PROOF_LEN]>())
    }

    fn any_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(Request::Hello),
            (any::<bool>(), any::<u32>(), any::<u64>(), any_proof()).prop_map(
                |(add, service, e, proof)| Request::Session {
                    change: if add { Change::Add } else { Change::Del },
                    service,
                    epid: Epid(e),
                    proof,
                }
            ),
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
            any::<[u8; NONCE_LEN]>().prop_map(|nonce| Reply::Challenge { nonce }),
            Just(Reply::Done),
            any::<NonZeroI32>().prop_map(|status| Reply::Refused { status }),
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
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Request::decode(&bytes);
            let _ = Reply::decode(&bytes);
            let _ = Request::frame_len(&bytes);
            let _ = Reply::frame_len(&bytes);
        }
    }
}
