//! [`SoftCore`]: one soft endpoint's protocol state machine, without I/O.
//!
//! The core is what quinn-proto's `Endpoint` + `Connection` are to quinn:
//! it owns the tag matcher, the connections' protocol state and the credit
//! pool, takes bytes and commands in, and gives frames and [`Event`]s out.
//! It never touches a socket, a thread or a clock, and it never owns the
//! operations' buffers: it tells the edge where received bytes go
//! ([`Event::Place`]) and borrows send buffers only while encoding
//! ([`SendPayloads`]).
//!
//! # Driving it (what the I/O edge does)
//!
//! * **Connections.** After a TCP connect call
//!   [`open_connection`](SoftCore::open_connection)`(Role::Dialer { expect })`
//!   (it queues the Hello); after an accept, `Role::Acceptor`. The process
//!   reaches itself by opening one of each and piping their bytes.
//! * **Input.** Append what the socket gave to that connection's input
//!   `BytesMut` and call [`handle_input`](SoftCore::handle_input); whole
//!   frames are consumed, a partial one stays. An `Err` means the core
//!   closed the connection (the reason is also in the events).
//! * **Output.** Whenever a connection
//!   [`wants_transmit`](SoftCore::wants_transmit) and its socket can take
//!   bytes, call [`poll_transmit`](SoftCore::poll_transmit) and write what
//!   it appended. Call it after every other call that may create output:
//!   `handle_input` (Cts, credit, AM replies), `send`, `recv` (a Cts),
//!   `am_request`, `am_reply`, `am_done`, `close_peer`.
//!   [`transmit_pending`](SoftCore::transmit_pending) lists the candidates;
//!   [`take_transmit_hints`](SoftCore::take_transmit_hints) lists those
//!   that may have gained frames since it was last asked, so an edge with
//!   many idle connections need not look at each.
//! * **Events.** Drain [`poll_event`](SoftCore::poll_event) after every
//!   call. `Place` means "copy these bytes into op's buffer at offset";
//!   `Complete` hands the op's result back; `AmRequest` must be answered
//!   with exactly one [`am_reply`](SoftCore::am_reply) or
//!   [`am_done`](SoftCore::am_done) (the token is not `Clone`);
//!   `ConnectionClosed` means: flush `poll_transmit` once more (a Refuse or
//!   Bye may be left), close the socket, call
//!   [`connection_lost`](SoftCore::connection_lost).
//! * **Failures.** When a socket fails or reaches EOF, call
//!   [`detach`](SoftCore::detach) first: the connection's link waits for a
//!   new transport, with its operations pending (see "Links" below). When
//!   it cannot (or the edge gives up on it), call `connection_lost`: the
//!   connection's peer goes down and every pending operation towards it
//!   completes with an error. Frames on different connections of one peer
//!   are not ordered, so feed the input the peer's other connections
//!   already have first.
//! * **Peers that left.** A peer without connections keeps its unexpected
//!   messages (receivable as before) and its [`PeerAddr`]; the edge bounds
//!   both in time: [`drop_unexpected_from`](SoftCore::drop_unexpected_from)
//!   drops the messages (their bytes become credit for the others),
//!   [`forget_peer`](SoftCore::forget_peer) forgets the peer once nothing
//!   of it is left.
//! * **Graceful close.** [`shutdown`](SoftCore::shutdown),
//!   [`close_peer`](SoftCore::close_peer), or one connection alone
//!   ([`close_connection`](SoftCore::close_connection)): each connection
//!   says Bye once
//!   nothing is in flight on it. A Bye received closes that connection
//!   alone (what of ours is left on it fails); the peer goes down with its
//!   last connection, so messages on its other ones still arrive.
//!
//! # Links
//!
//! A connection's frames after its handshake form a numbered byte stream,
//! its *link* (`session.rs`): each side keeps what it sent
//! until the other acknowledges it (Ack frames) and counts what it
//! consumed. A detached link is resumed on a new transport: the dialer's
//! side opens one (a TCP or Unix connect, then
//! [`resume`](SoftCore::resume), which queues Hello + Session with its
//! count); the acceptor's core ties the new connection's Session to the
//! link by its id (`Event::Resumed`, the new connection's id gives way to
//! the link's) and answers with its own count; each side then sends
//! again what the other had not consumed, and the stream goes on: no
//! frame lost, none taken twice, credit and rendezvous state untouched.
//! Sends posted meanwhile queue on the link. A send whose payload went out
//! by reference completes when the peer acknowledges it (the log needs
//! the buffer until then); the receiver acknowledges such frames at once.
//!
//! # Credit and back-pressure
//!
//! A receiver never holds more unexpected data than its budget, whatever
//! its peers do, and a sender is slowed down, never dropped:
//!
//! * **Eager bytes.** The budget ([`ProtocolConfig::unexpected_budget`]) is
//!   a pool shared by all connections. Each connection is granted up to a
//!   window ([`ProtocolConfig::peer_eager_window`]) out of it. An Eager
//!   message costs its payload + [`ENTRY_OVERHEAD`]
//!   of the sender's credit; the receiver returns the cost to the pool as
//!   soon as the message matches a receive (at once or from the unexpected
//!   queue), and re-grants from the pool to connections whose credit fell
//!   below three quarters of their window: first to those that send
//!   messages, oldest request first; then, from what the pool holds beyond
//!   a reserve of one window, to those that sent nothing since they last
//!   got credit (new connections, mostly). Granted credit is the peer's
//!   until it spends it, so without the reserve a crowd of idle
//!   connections could hold the whole budget while the peers that send got
//!   none. So unexpected bytes + credit outstanding ≤ budget at all times,
//!   and a re-grant costs the grants it makes, however many connections
//!   there are.
//! * **Departed peers.** The unexpected messages of a peer that went down
//!   stay receivable, but leave the shared pool as it goes: the peers
//!   still here are granted credit as if they were not there, so a peer
//!   that flooded the queue and left denies nobody. Departed peers
//!   together hold at most one budget more; past it, the messages of
//!   those that left first are dropped (`CoreStats::departed_dropped`). A
//!   peer that comes back counts against the pool again. So memory for
//!   unexpected messages stays below two budgets.
//! * **Rendezvous entries.** A sender without eager credit sends the
//!   message as Rts instead (header only; the data waits at the sender until
//!   the receive matches). Rts frames have their own per-connection credit
//!   ([`ProtocolConfig::peer_rts_window`]), returned when they match.
//! * **Held sends.** A sender with neither credit keeps the message queued,
//!   in order, and sends it when Credit arrives. `send` answers `Again`
//!   once [`ProtocolConfig::max_queued_sends`] are held.
//! * **AM.** Requests spend AM credit ([`ProtocolConfig::peer_am_window`]);
//!   the receiver returns it once the reply is on the wire (or the request
//!   is done without reply), so unanswered replies cannot pile up.
//!   `am_request` answers `Again` without credit.
//! * A frame beyond the credit granted is a protocol violation: that
//!   connection closes, nothing else is touched.
//!
//! Unexpected eager payloads are copied out of the input buffer into their
//! own allocation, so the memory they pin is what they are charged.

use super::config::ProtocolConfig;
use super::conn::{
    Conn, ConnPhase, Control, Credit, CreditWait, DirectFrame, Incoming, MissingPayload, Outgoing,
    Role, SendOp, Sink, MIN_REFERENCED,
};
use super::job_secret::{new_nonce, JobSecret, ProofSide, Transcript, MAC_LEN, NONCE_LEN};
use super::link_key::{self, KeyHalf, LinkEnds, LinkKey, Resumption, Side};
use super::matcher::{Arrival, TagMatcher};
use super::session::Session;
use super::shm::switch::{ShmNotice, ShmSwitch};
use super::table_alloc::Table;
use super::wire::{
    check_hello, AmArgs, AmFrame, Frame, FrameDecoder, FrameKind, FrameLimits, HandshakeError,
    Hello, JobUuid, Refusal, WireError, ENTRY_OVERHEAD, NEW_LINK,
};
use crate::engine::soft::epid::RESERVED_EPID_BITS;
use crate::engine::{EngineLimits, Epid, MqStatus, PeerAddr, SendMode, TagMatch};
use crate::resend::AckError;
use crate::{Error, ErrorKind, Result};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Names a connection of a [`SoftCore`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// Names an operation; chosen by the edge, unique among live operations.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// A send payload that belongs in a vectored transmit batch
/// ([`SoftCore::poll_transmit_vectored`]) but was not copied into it.
///
/// The batch on the wire is: the output buffer's bytes before `at`, then
/// `range` of send `op`'s buffer, then the output's bytes from `at` on (up
/// to the next reference), and so on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadRef {
    /// Position in the output buffer where the payload goes.
    pub at: usize,
    /// The send whose buffer holds the payload.
    pub op: OpId,
    /// The bytes of that buffer.
    pub range: std::ops::Range<usize>,
}

/// The rest of a Data frame's payload, which the edge reads straight into
/// a receive buffer ([`SoftCore::take_direct`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectData {
    /// The receive.
    pub op: OpId,
    /// Where in its buffer the next byte goes.
    pub offset: usize,
    /// Bytes still to come for this frame.
    pub len: usize,
}

/// The edge's send buffers, borrowed while frames are encoded.
pub trait SendPayloads {
    /// The whole buffer of send `op`, of the length given to
    /// [`SoftCore::send`]; `None` if the edge has no such op.
    fn payload(&self, op: OpId) -> Option<&[u8]>;
}

impl<V: AsRef<[u8]>> SendPayloads for HashMap<OpId, V> {
    fn payload(&self, op: OpId) -> Option<&[u8]> {
        self.get(&op).map(AsRef::as_ref)
    }
}

impl<V: AsRef<[u8]>> SendPayloads for BTreeMap<OpId, V> {
    fn payload(&self, op: OpId) -> Option<&[u8]> {
        self.get(&op).map(AsRef::as_ref)
    }
}

/// An AM request being handled: answer it once with
/// [`SoftCore::am_reply`] or [`SoftCore::am_done`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "answer every AM request with am_reply or am_done, or its credit is lost"]
pub struct AmToken {
    conn: ConnId,
    source: PeerAddr,
}

impl AmToken {
    /// The requester.
    pub fn source(&self) -> PeerAddr {
        self.source
    }
}

/// A protocol rule the peer broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// An Eager frame beyond the eager credit granted.
    #[error("Eager message costing {charge} bytes with only {granted} bytes of credit")]
    EagerCredit {
        /// What the message costs.
        charge: u64,
        /// The credit the peer held.
        granted: u64,
    },
    /// An Rts without rendezvous credit.
    #[error("Rts without rendezvous credit")]
    RtsCredit,
    /// An AM request without AM credit.
    #[error("AM request without AM credit")]
    AmCredit,
    /// Credit beyond any sane amount.
    #[error("credit overflow")]
    CreditOverflow,
    /// A Cts for no Rts.
    #[error("Cts for unknown message {0}")]
    UnknownMsgId(u64),
    /// A Cts accepting more than the message.
    #[error("Cts accepts {accept} bytes of a {len}-byte message")]
    CtsTooLong {
        /// Bytes accepted.
        accept: u64,
        /// The message length.
        len: u64,
    },
    /// Data for no transfer.
    #[error("Data for unknown token {0}")]
    UnknownToken(u64),
    /// Data not continuing where the last chunk ended.
    #[error("Data at offset {got}, expected {expected}")]
    DataOutOfOrder {
        /// The next offset expected.
        expected: u64,
        /// The offset received.
        got: u64,
    },
    /// Data past the accepted length.
    #[error("Data past the {accept} bytes accepted")]
    DataOverrun {
        /// Bytes accepted.
        accept: u64,
    },
    /// A frame that has no place after the handshake.
    #[error("unexpected {0:?} frame after the handshake")]
    UnexpectedFrame(FrameKind),
    /// An acknowledgement of bytes never sent.
    #[error("bad acknowledgement: {0}")]
    Ack(#[from] AckError),
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The peer sent bytes that are not frames.
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
    /// The handshake failed (refusals included).
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The peer broke a protocol rule.
    #[error("protocol violation: {0}")]
    Protocol(#[from] Violation),
    /// The edge lost the transport (EOF, I/O error, timeout).
    #[error("connection lost: {0}")]
    Lost(String),
    /// The peer closed gracefully (Bye).
    #[error("the peer closed the connection")]
    PeerClosed,
    /// This side closed it.
    #[error("closed locally")]
    Closed,
    /// The edge had no buffer (or one of another length) for a send.
    #[error("the send buffer of {0:?} is missing or has changed length")]
    MissingPayload(OpId),
}

impl ConnError {
    /// The error class operations failed by it report: `ConnRefused` for
    /// refusals, `Canceled` after a local close, `Io` otherwise.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ConnError::Handshake(h) if h.refusal().is_some() => ErrorKind::ConnRefused,
            ConnError::Closed => ErrorKind::Canceled,
            _ => ErrorKind::Io,
        }
    }
}

impl From<ConnError> for Error {
    fn from(e: ConnError) -> Error {
        Error::with_source(e.kind(), format!("soft engine: {e}"), e)
    }
}

/// What the core tells the edge.
#[derive(Debug)]
pub enum Event {
    /// A link whose transport broke continues on a new one: the
    /// connection `conn` keeps its id, operations and place in the
    /// stream. On the acceptor's side the new transport came as connection
    /// `replaced`, which is gone now: its transport carries `conn` from
    /// here on, and `conn`'s old transport (if the edge still has one) is
    /// to be dropped unread.
    Resumed {
        /// The connection.
        conn: ConnId,
        /// The connection the new transport was accepted as.
        replaced: Option<ConnId>,
    },
    /// The dialer of accepted connection `conn` claims to be `epid`
    /// ([`require_verification`](SoftCore::require_verification)): check
    /// the claim and answer with [`verified`](SoftCore::verified) (a Unix
    /// socket: is the dialer the process listening at `epid`'s name? TCP:
    /// does it come from `epid`'s address, and does a Challenge sent to
    /// `epid`'s listener come back as a Proof on `conn`
    /// ([`expect_proof`](SoftCore::expect_proof))?). The handshake waits.
    Verify {
        /// The connection.
        conn: ConnId,
        /// The epid its Hello claims.
        epid: Epid,
    },
    /// The handshake completed; `peer` is usable.
    Connected {
        /// The connection.
        conn: ConnId,
        /// The peer it belongs to (several connections may share one).
        peer: PeerAddr,
        /// The peer's endpoint id.
        epid: Epid,
    },
    /// Acceptor: the dialer offers a shared segment of `segment_len`
    /// bytes for the rest of the link (its descriptors came with the
    /// socket bytes that carried the offer). Answer with
    /// [`answer_shm`](SoftCore::answer_shm).
    ShmOffered {
        /// The connection.
        conn: ConnId,
        /// The segment's length, as the offer names it.
        segment_len: u64,
    },
    /// Read `len` bytes at `addr` in the sender's memory (the peer of
    /// `conn`, a process of this host) into the buffer of receive `op`
    /// from its start, then answer with
    /// [`pull_done`](SoftCore::pull_done) and `token`.
    Pull {
        /// The connection.
        conn: ConnId,
        /// The transfer's token.
        token: u64,
        /// The receive.
        op: OpId,
        /// Where the bytes are in the sender.
        addr: u64,
        /// How many to read (the accepted length: at most the buffer's).
        len: usize,
    },
    /// The peer's frames on `conn` now come through the shared segment:
    /// decoding stopped right after its ShmSwitch frame. Whatever input
    /// is left from the socket is a violation; read the segment from now
    /// on and say so with [`shm_reads_moved`](SoftCore::shm_reads_moved).
    ShmPeerMoved {
        /// The connection.
        conn: ConnId,
    },
    /// Dialer: the acceptor declined the segment; the link stays on the
    /// socket.
    ShmDeclined {
        /// The connection.
        conn: ConnId,
    },
    /// A connection ended: flush `poll_transmit` once more, close the
    /// socket, call `connection_lost`.
    ConnectionClosed {
        /// The connection.
        conn: ConnId,
        /// Why; `None` after a graceful close.
        error: Option<ConnError>,
    },
    /// A peer went down; `Complete` events with errors follow for its
    /// pending operations.
    PeerDown {
        /// The peer.
        peer: PeerAddr,
        /// Its endpoint id.
        epid: Epid,
        /// Why.
        error: ConnError,
    },
    /// Copy `bytes` into the buffer of receive `op` at `offset`.
    Place {
        /// The receive.
        op: OpId,
        /// Where in its buffer.
        offset: usize,
        /// The bytes (within the buffer's length).
        bytes: Bytes,
    },
    /// Operation `op` finished; its buffer goes back to its owner.
    ///
    /// Receives report the sender's tag and length, the bytes placed, the
    /// source, and `Trunc` when the message was longer than the buffer.
    /// Sends report their tag and length (`nbytes = msg_len` on success,
    /// 0 on failure) and no source. Failures carry the kind of the
    /// [`ConnError`] that ended the peer; cancelled receives `Canceled`.
    Complete {
        /// The operation.
        op: OpId,
        /// How it ended.
        status: MqStatus,
    },
    /// An eager message with the hooked tag
    /// ([`set_hook_tag`](SoftCore::set_hook_tag)): it matched no receive
    /// and its bytes are the receiver's to take (its credit is back).
    Hooked {
        /// The sender.
        source: PeerAddr,
        /// The whole message.
        payload: Bytes,
    },
    /// An AM request: run handler `handler`, then answer through `token`.
    AmRequest {
        /// The answer channel.
        token: AmToken,
        /// The requester.
        source: PeerAddr,
        /// The handler index.
        handler: u16,
        /// The arguments.
        args: AmArgs,
        /// The payload.
        payload: Bytes,
    },
    /// An AM reply: run handler `handler`'s reply side.
    AmReply {
        /// The replier.
        source: PeerAddr,
        /// The handler index.
        handler: u16,
        /// The arguments.
        args: AmArgs,
        /// The payload.
        payload: Bytes,
    },
}

/// Counters for observability and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CoreStats {
    /// Messages in the unexpected queue.
    pub unexpected_msgs: usize,
    /// Bytes they are charged.
    pub unexpected_bytes: u64,
    /// Messages queued as unexpected since the core started.
    pub unexpected_total: u64,
    /// Eager credit granted to peers and not used yet.
    pub granted_eager: u64,
    /// Receives posted and not matched.
    pub posted_recvs: usize,
    /// Sends held for lack of credit or transmission.
    pub queued_sends: usize,
    /// Open connections.
    pub connections: usize,
    /// Peers known (connected, or down and not forgotten yet).
    pub peers: usize,
    /// Bytes of unexpected messages whose peers went down: they stay
    /// receivable, outside the budget the peers still here share, up to
    /// one budget more (the protocol core's module docs, "Credit").
    pub departed_bytes: u64,
    /// Unexpected messages dropped because departed peers held more than
    /// that, oldest departure first.
    pub departed_dropped: u64,
}

/// A message waiting in the unexpected queue.
#[derive(Debug)]
enum Pending {
    Eager {
        source: PeerAddr,
        payload: Bytes,
    },
    Rts {
        source: PeerAddr,
        conn: ConnId,
        msg_id: u64,
        len: u64,
        /// A PullRts: where the bytes are in the sender.
        addr: Option<u64>,
    },
}

impl Pending {
    fn source(&self) -> PeerAddr {
        match self {
            Pending::Eager { source, .. } | Pending::Rts { source, .. } => *source,
        }
    }
    fn len(&self) -> u64 {
        match self {
            Pending::Eager { payload, .. } => payload.len() as u64,
            Pending::Rts { len, .. } => *len,
        }
    }
}

#[derive(Debug)]
enum OpState {
    Send,
    Posted { cap: usize, tags: TagMatch },
    Receiving,
}

#[derive(Debug)]
struct Peer {
    epid: Epid,
    /// The connection new messages go on, while the peer is up.
    send_conn: Option<ConnId>,
    conns: Vec<ConnId>,
    closing: bool,
    /// Grows with every frame and direct payload read from the peer
    /// ([`SoftCore::peer_activity`]).
    activity: u64,
    /// The incarnation its connections named: another one at the same
    /// epid is a new process, and this one's connections are over.
    incarnation: u64,
}

/// The fields of a [`Frame::Session`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionFields {
    link: u64,
    resume: u64,
    incarnation: u64,
    generation: u64,
    seal: KeyHalf,
}

/// One soft endpoint's protocol core (see the module docs).
#[derive(Debug)]
pub struct SoftCore {
    config: ProtocolConfig,
    hello: Hello,
    decoder: FrameDecoder,
    matcher: TagMatcher<OpId, Pending>,
    conns: BTreeMap<ConnId, Conn>,
    peers: Table<PeerAddr, Peer>,
    by_epid: Table<Epid, PeerAddr>,
    ops: Table<OpId, OpState>,
    events: VecDeque<Event>,
    next_conn: u64,
    next_peer: u64,
    /// Eager credit held by connections (granted, not yet spent).
    granted: u64,
    pool_dirty: bool,
    /// Connections waiting for eager credit that send messages (served
    /// first), and the others, oldest request first
    /// ([`CreditWait`]).
    credit_active: VecDeque<ConnId>,
    credit_new: VecDeque<ConnId>,
    /// Connections that may have frames to transmit since the edge last
    /// asked ([`take_transmit_hints`](Self::take_transmit_hints)); when
    /// too many to list, `hints_overflow` says "any".
    hints: Vec<ConnId>,
    hints_overflow: bool,
    /// Sends finished by a transmit (scratch, kept for its capacity).
    done_scratch: Vec<(OpId, MqStatus)>,
    /// This endpoint's incarnation (random, drawn when it opens): peers
    /// tell a restarted process at the same epid by it.
    incarnation: u64,
    /// Tests and fuzzing only: link ids and key halves come from this
    /// seed instead of the system's generator ([`set_link_seed`](Self::set_link_seed)).
    fixed_seed: Option<u64>,
    /// The job secret both sides of every handshake must prove.
    job_secret: Option<JobSecret>,
    /// A connection whose handshake resumed another one's link: its
    /// input continues under that connection (`input_frames`).
    rebound: Option<(ConnId, ConnId)>,
    /// Eager messages with this tag become [`Event::Hooked`].
    hook_tag: Option<u64>,
    /// Dialer connections still in their handshake, by link id: where a
    /// Challenge naming the link is answered.
    dials: Table<u64, ConnId>,
    /// Peers that went down holding unexpected messages, with the bytes
    /// those hold, and the order they went in.
    departed: Table<PeerAddr, u64>,
    departed_order: VecDeque<PeerAddr>,
    departed_bytes: u64,
    departed_dropped: u64,
}

fn inval(msg: String) -> Error {
    Error::new(ErrorKind::Inval, msg)
}

impl SoftCore {
    /// A core for endpoint `epid` of job `uuid`. Errors for an invalid
    /// configuration or an epid with bit 62 or 63 set.
    pub fn new(config: ProtocolConfig, epid: Epid, uuid: JobUuid) -> Result<SoftCore> {
        config.validate()?;
        if epid.0 & RESERVED_EPID_BITS != 0 {
            return Err(inval(format!("{epid} has bit 62 or 63 set")));
        }
        let limits = config.frame_limits();
        Ok(SoftCore {
            hello: Hello::ours(uuid, epid, limits),
            decoder: FrameDecoder::new(limits),
            matcher: TagMatcher::new(config.unexpected_budget),
            config,
            conns: BTreeMap::new(),
            peers: Table::default(),
            by_epid: Table::default(),
            ops: Table::default(),
            events: VecDeque::new(),
            next_conn: 0,
            next_peer: 1,
            granted: 0,
            pool_dirty: false,
            credit_active: VecDeque::new(),
            credit_new: VecDeque::new(),
            hints: Vec::new(),
            hints_overflow: false,
            done_scratch: Vec::new(),
            incarnation: random_seed(),
            fixed_seed: None,
            job_secret: None,
            rebound: None,
            hook_tag: None,
            dials: Table::default(),
            departed: Table::default(),
            departed_order: VecDeque::new(),
            departed_bytes: 0,
            departed_dropped: 0,
        })
    }

    /// This endpoint's id.
    pub fn epid(&self) -> Epid {
        self.hello.epid
    }

    /// The configuration.
    pub fn config(&self) -> &ProtocolConfig {
        &self.config
    }

    /// The limits to report to the layers above.
    pub fn limits(&self) -> EngineLimits {
        self.config.engine_limits()
    }

    /// Counters.
    pub fn stats(&self) -> CoreStats {
        CoreStats {
            unexpected_msgs: self.matcher.unexpected_len(),
            unexpected_bytes: self.matcher.unexpected_bytes(),
            unexpected_total: self.matcher.unexpected_total(),
            granted_eager: self.granted,
            posted_recvs: self.matcher.posted_len(),
            queued_sends: self.conns.values().map(|c| c.queued.len()).sum(),
            connections: self.conns.len(),
            peers: self.peers.len(),
            departed_bytes: self.departed_bytes,
            departed_dropped: self.departed_dropped,
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ----- connections -------------------------------------------------

    /// Starts the protocol on a new transport connection. A dialer's Hello
    /// (and Session, naming a new link) is queued at once. What the
    /// connection sends is kept until the peer acknowledges it, so that
    /// the link survives a broken transport ([`detach`](Self::detach)).
    pub fn open_connection(&mut self, role: Role) -> ConnId {
        self.open(role, true)
    }

    /// As [`open_connection`](Self::open_connection), for a transport that
    /// cannot break (the endpoint's pipe to itself): nothing is kept for
    /// resending.
    pub fn open_pipe_connection(&mut self, role: Role) -> ConnId {
        self.open(role, false)
    }

    fn open(&mut self, role: Role, logging: bool) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        let link = match role {
            Role::Dialer { .. } => self.new_link_id(id),
            // The dialer names the link.
            Role::Acceptor => 0,
        };
        let half = self.new_key_half(id);
        let mut conn = Conn::new(
            role,
            self.config.frame_limits(),
            Session::new(link, half, logging),
        );
        if let Role::Dialer { .. } = role {
            self.dials.insert(link, id);
            conn.hs.push_back(Frame::Hello(self.hello.clone()));
            conn.hs.push_back(Frame::Session {
                link,
                resume: NEW_LINK,
                incarnation: self.incarnation,
                generation: 0,
                seal: half,
            });
        }
        self.conns.insert(id, conn);
        id
    }

    /// A link id for connection `id`: a fresh draw of the system's
    /// generator (unpredictable to anyone who sees other ids), never 0.
    fn new_link_id(&self, id: ConnId) -> u64 {
        match self.fixed_seed {
            Some(seed) => link_id(seed, id),
            None => link_key::new_link_id(),
        }
    }

    /// This side's half of the link key of connection `id` (random).
    fn new_key_half(&self, id: ConnId) -> KeyHalf {
        match self.fixed_seed {
            Some(seed) => {
                let x = link_id(seed ^ 0x6b65_795f_6861_6c66, id).to_le_bytes();
                let y = link_id(seed ^ 0x6861_6c66_5f6b_6579, id).to_le_bytes();
                let mut h = [0u8; 16];
                h[..8].copy_from_slice(&x);
                h[8..].copy_from_slice(&y);
                h
            }
            None => link_key::new_half(),
        }
    }

    /// This endpoint's incarnation (what its Session frames name).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Sets the job secret every handshake must prove, both ways
    /// ([`JobSecret`]); `None` (the default) requires none.
    pub fn set_job_secret(&mut self, secret: Option<JobSecret>) {
        self.job_secret = secret;
    }

    /// For tests and fuzzing only: link ids, link-key halves and the
    /// incarnation come from `seed` ([`link_id`]) instead of the system's
    /// generator, so that an input can name a dialer's link and prove
    /// its key. Never for an endpoint that talks to anyone else: whoever
    /// knows the seed can take its links over.
    pub fn set_link_seed(&mut self, seed: u64) {
        self.fixed_seed = Some(seed);
        self.incarnation = link_id(seed ^ 0x696e_6361_726e_6174, ConnId(0));
    }

    /// The transport of `conn` broke, but its link can go on: the
    /// connection keeps its operations and state (new operations queue
    /// on it) and waits for a new transport. The dialer's side connects
    /// again and calls [`resume`](Self::resume); the acceptor's side waits
    /// for the dialer's Hello. `false` (and nothing done) when the link
    /// cannot be resumed (still in its handshake, closed, or the endpoint's
    /// pipe): then call [`connection_lost`](Self::connection_lost). A
    /// resuming connection whose new transport broke goes back to waiting.
    ///
    /// The input of the broken transport that was not fed to
    /// `handle_input` is dropped: the peer sends it again. A Data payload
    /// the edge was placing itself ([`take_direct`](Self::take_direct))
    /// comes again whole.
    pub fn detach(&mut self, conn: ConnId) -> bool {
        let Some(c) = self.conns.get_mut(&conn) else {
            return false;
        };
        if c.phase == ConnPhase::Resuming {
            // The new transport broke too: wait for another.
            c.phase = ConnPhase::Detached;
            c.hs.clear();
            c.their_hello = None;
            c.shm = ShmSwitch::default();
            c.pull = false;
            return true;
        }
        if !c.has_transport() || c.peer.is_none() || !c.session.logging() || c.session.key.is_none()
        {
            return false;
        }
        c.roll_back_direct();
        c.resume_to = c.phase;
        c.phase = ConnPhase::Detached;
        c.hs.clear();
        c.shm = ShmSwitch::default();
        c.pull = false;
        true
    }

    /// The dialer's side of a detached link has a new transport: the
    /// Hello and Session that resume the link are queued. `Inval` for a
    /// connection that is not a detached dialer.
    pub fn resume(&mut self, conn: ConnId) -> Result<()> {
        let hello = self.hello.clone();
        let c = self
            .conns
            .get_mut(&conn)
            .filter(|c| c.phase == ConnPhase::Detached && matches!(c.role, Role::Dialer { .. }))
            .ok_or_else(|| inval(format!("{conn:?} is not a detached dialer connection")))?;
        let Some(key) = c.session.key.clone() else {
            return Err(inval(format!("{conn:?} has no link key to resume with")));
        };
        c.phase = ConnPhase::Resuming;
        c.their_hello = None;
        c.authed = false;
        c.auth_sent = None;
        c.pending_session = None;
        c.session.generation += 1;
        let r = Resumption {
            link: c.session.link,
            resume: c.session.received(),
            generation: c.session.generation,
            dialer_incarnation: self.incarnation,
            acceptor_incarnation: c.session.peer_incarnation,
        };
        c.hs.push_back(Frame::Hello(hello));
        c.hs.push_back(Frame::Session {
            link: r.link,
            resume: r.resume,
            incarnation: r.dialer_incarnation,
            generation: r.generation,
            seal: key.seal(Side::Dialer, &r),
        });
        Ok(())
    }

    /// The acceptor's side of `conn` checks the dialer's identity before
    /// it answers a new link's handshake (`Event::Verify`). Call it right
    /// after [`open_connection`](Self::open_connection).
    pub fn require_verification(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.verify = c.role == Role::Acceptor;
        }
    }

    /// The identity check of `conn` sent a Challenge with `nonce`: a
    /// Proof with it on `conn` passes the check, any other fails it.
    pub fn expect_proof(&mut self, conn: ConnId, nonce: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.proof = Some(nonce);
        }
    }

    /// The identity check of `conn` ended: the handshake completes, or the
    /// dialer is refused (`Err`, why; logged).
    pub fn verified(&mut self, conn: ConnId, result: std::result::Result<(), String>) {
        let Some(c) = self
            .conns
            .get_mut(&conn)
            .filter(|c| c.phase == ConnPhase::Verifying)
        else {
            return;
        };
        let theirs = c
            .their_hello
            .take()
            .expect("a verifying connection has a Hello");
        let epid = theirs.epid;
        let outcome = match result {
            Ok(()) => self.link_peer(conn, theirs, true),
            Err(why) => {
                tracing::warn!(?conn, %epid, %why, "soft engine: refused a dialer claiming an epid it could not prove");
                self.push_refuse(conn, &Refusal::Identity);
                Err(HandshakeError::Refused(Refusal::Identity).into())
            }
        };
        match outcome {
            Ok(()) => self.established(conn),
            Err(e) => self.close_conn(conn, e),
        }
        self.regrant();
    }

    /// The id of the link a connection carries (for a dialer, from its
    /// opening; for an acceptor, once the dialer's Session came).
    pub fn connection_link(&self, conn: ConnId) -> Option<u64> {
        self.conns.get(&conn).map(|c| c.session.link)
    }

    /// The role a connection was opened with.
    pub fn connection_role(&self, conn: ConnId) -> Option<Role> {
        self.conns.get(&conn).map(|c| c.role)
    }

    /// The phase of a connection (`None` once forgotten).
    pub fn connection_phase(&self, conn: ConnId) -> Option<ConnPhase> {
        self.conns.get(&conn).map(|c| c.phase)
    }

    /// The peer a connection belongs to, after its handshake.
    pub fn connection_peer(&self, conn: ConnId) -> Option<PeerAddr> {
        self.conns.get(&conn).and_then(|c| c.peer)
    }

    /// The peer known for an epid (connected now or before).
    pub fn peer_of(&self, epid: Epid) -> Option<PeerAddr> {
        self.by_epid.get(&epid).copied()
    }

    /// A peer's epid.
    pub fn peer_epid(&self, peer: PeerAddr) -> Option<Epid> {
        self.peers.get(&peer).map(|p| p.epid)
    }

    /// A count that grows with every frame and direct payload read from
    /// `peer` (0 for an unknown peer): proof of life while a long transfer
    /// keeps its connections busy.
    pub fn peer_activity(&self, peer: PeerAddr) -> u64 {
        self.peers.get(&peer).map_or(0, |p| p.activity)
    }

    /// Whether a peer is connected and not closing.
    pub fn is_peer_up(&self, peer: PeerAddr) -> bool {
        self.peers
            .get(&peer)
            .is_some_and(|p| p.send_conn.is_some() && !p.closing)
    }

    /// Consumes the whole frames at the front of `input`.
    ///
    /// `Err` means the connection is now closed (a `ConnectionClosed`
    /// event says so too); input on a closed connection is discarded.
    pub fn handle_input(&mut self, conn: ConnId, input: &mut BytesMut) -> Result<(), ConnError> {
        let result = self.input_frames(conn, input);
        self.regrant();
        result
    }

    fn input_frames(&mut self, mut conn: ConnId, input: &mut BytesMut) -> Result<(), ConnError> {
        loop {
            match self
                .conns
                .get(&conn)
                .map(|c| (c.phase, c.direct.is_some() || c.shm.input_paused))
            {
                None => return Err(ConnError::Lost(format!("unknown connection {conn:?}"))),
                Some((ConnPhase::Closed, _)) => {
                    input.clear();
                    return Ok(());
                }
                // The stream continues with a payload the edge places
                // itself (`take_direct`), or in a shared segment the edge
                // does not read yet: nothing to decode until it has.
                Some((_, true)) => return Ok(()),
                Some(_) => {}
            }
            let before = input.len();
            let frame = match self.decoder.decode(input) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let e = ConnError::Wire(e);
                    self.close_conn(conn, e.clone());
                    return Err(e);
                }
            };
            let size = (before - input.len()) as u64;
            let handshaking = self
                .conns
                .get(&conn)
                .is_some_and(|c| matches!(c.phase, ConnPhase::Handshaking | ConnPhase::Verifying));
            let result = self.on_frame(conn, frame, size);
            if let Some((from, to)) = self.rebound.take() {
                // The handshake resumed another connection's link: the
                // rest of this transport's input is that link's.
                if from == conn {
                    conn = to;
                }
            }
            let now_open = self
                .conns
                .get(&conn)
                .is_some_and(|c| c.phase == ConnPhase::Established);
            match result {
                Ok(()) if handshaking && now_open => self.established(conn),
                Ok(()) => {}
                Err(ConnError::PeerClosed) => {
                    // Nothing follows a Bye on this connection.
                    input.clear();
                    self.on_bye(conn);
                    return Err(ConnError::PeerClosed);
                }
                Err(e) => {
                    self.close_conn(conn, e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) has something to
    /// write on `conn`.
    pub fn wants_transmit(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(Conn::wants_transmit)
    }

    /// The connections that want to transmit.
    pub fn transmit_pending(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns
            .iter()
            .filter(|(_, c)| c.wants_transmit())
            .map(|(id, _)| *id)
    }

    /// Appends frames for `conn` to `out` until it holds at least `limit`
    /// bytes or nothing is left to send; returns the bytes appended.
    /// Sends whose bytes are now in `out` complete (`Complete` events).
    ///
    /// A graceful close ends here: once drained, Bye is appended and the
    /// connection closes.
    pub fn poll_transmit(
        &mut self,
        conn: ConnId,
        out: &mut BytesMut,
        limit: usize,
        payloads: &dyn SendPayloads,
    ) -> usize {
        let mut sink = Sink {
            out,
            refs: None,
            referenced: 0,
        };
        self.transmit_into(conn, &mut sink, limit, payloads)
    }

    /// As [`poll_transmit`](Self::poll_transmit), but large send payloads
    /// (Data chunks and Eager messages of 4 KiB and more) are not copied
    /// into `out`: each is pushed to `refs` ([`PayloadRef`]) and belongs on
    /// the wire between the bytes of `out` (`writev`). `limit` and the
    /// result count referred bytes too.
    ///
    /// Sends complete as with `poll_transmit`, once their last bytes are
    /// in the batch: the edge must keep a referred buffer until the batch
    /// is written.
    pub fn poll_transmit_vectored(
        &mut self,
        conn: ConnId,
        out: &mut BytesMut,
        refs: &mut Vec<PayloadRef>,
        limit: usize,
        payloads: &dyn SendPayloads,
    ) -> usize {
        let mut sink = Sink {
            out,
            refs: Some(refs),
            referenced: 0,
        };
        self.transmit_into(conn, &mut sink, limit, payloads)
    }

    fn transmit_into(
        &mut self,
        conn: ConnId,
        out: &mut Sink<'_>,
        limit: usize,
        payloads: &dyn SendPayloads,
    ) -> usize {
        let start = out.len();
        let Some(c) = self.conns.get_mut(&conn) else {
            return 0;
        };
        // Reused across calls: no allocation per transmit.
        let mut done = std::mem::take(&mut self.done_scratch);
        let result = c.transmit(out, limit, payloads, &mut done);
        let bye = c.phase == ConnPhase::Closing && c.drained() && !c.shm.output_paused;
        for (op, status) in done.drain(..) {
            self.complete(op, status);
        }
        self.done_scratch = done;
        if let Err(MissingPayload(op)) = result {
            self.close_conn(conn, ConnError::MissingPayload(op));
        } else if bye {
            super::wire::encode(&Frame::Bye, out.out);
            self.finish_graceful(conn);
        }
        self.regrant();
        out.len() - start
    }

    /// After [`handle_input`](Self::handle_input): when what is left in
    /// `input` is the start of a Data frame (at least its first 24 bytes)
    /// continuing a transfer of this connection, the core hands the rest
    /// of its payload to the edge to read straight into the receive
    /// buffer. The frame's bytes are taken out of `input` (a `Place` event
    /// carries the payload bytes already there) and the rest is described
    /// by the result: the edge writes exactly `len` bytes into op's buffer
    /// from `offset`, reporting them with
    /// [`direct_data`](Self::direct_data), before it feeds this
    /// connection's input again (`handle_input` decodes nothing on it
    /// meanwhile).
    ///
    /// `Ok(None)` when nothing qualifies (the frame then arrives whole
    /// through `handle_input`, which also reports any fault in it). `Err`
    /// only for a malformed header; the connection is then closed.
    pub fn take_direct(
        &mut self,
        conn: ConnId,
        input: &mut BytesMut,
    ) -> Result<Option<DirectData>, ConnError> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(None);
        };
        if !c.has_transport() || c.direct.is_some() {
            return Ok(None);
        }
        let (token, offset, n) = match self.decoder.peek_data(input) {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(None),
            Err(e) => {
                let e = ConnError::Wire(e);
                self.close_conn(conn, e.clone());
                return Err(e);
            }
        };
        let prefix = super::wire::DATA_PREFIX;
        let present = input.len() - prefix;
        if present >= n {
            return Ok(None);
        }
        let Some(inc) = c.incoming.get_mut(&token) else {
            return Ok(None);
        };
        if offset != inc.received || (inc.accept - inc.received) < n as u64 {
            return Ok(None);
        }
        let mut frame = input.split_to(input.len());
        let payload = frame.split_off(prefix).freeze();
        inc.received += present as u64;
        let op = inc.op;
        c.direct = Some(DirectFrame {
            token,
            left: n - present,
            frame_len: (prefix + n) as u64,
            offset,
        });
        if present > 0 {
            self.events.push_back(Event::Place {
                op,
                offset: offset as usize,
                bytes: payload,
            });
        }
        Ok(Some(DirectData {
            op,
            offset: offset as usize + present,
            len: n - present,
        }))
    }

    /// The edge wrote `n` more bytes of the payload announced by
    /// [`take_direct`](Self::take_direct) into the receive buffer. The
    /// receive completes when its last byte is in.
    ///
    /// # Panics
    /// If no direct payload is pending on `conn` or `n` exceeds what is
    /// left of it (a bug in the edge).
    pub fn direct_data(&mut self, conn: ConnId, n: usize) {
        let Some(c) = self.conns.get_mut(&conn).filter(|c| c.has_transport()) else {
            return;
        };
        if let Some(p) = c.peer.and_then(|p| self.peers.get_mut(&p)) {
            p.activity = p.activity.wrapping_add(1);
        }
        let d = c.direct.expect("direct_data without take_direct");
        assert!(
            n <= d.left,
            "direct_data: {n} bytes, only {} announced",
            d.left
        );
        c.direct = (d.left > n).then_some(DirectFrame {
            left: d.left - n,
            ..d
        });
        let token = d.token;
        let inc = c
            .incoming
            .get_mut(&token)
            .expect("a direct payload belongs to a live transfer");
        inc.received += n as u64;
        let finished = inc.received == inc.accept;
        if c.direct.is_none() {
            // The whole frame is in; its sender may wait for the
            // acknowledgement (a referenced payload).
            c.session.consumed(d.frame_len, finished);
        }
        if finished {
            let status = inc.status(trunc(inc));
            let op = inc.op;
            c.incoming.remove(&token);
            self.complete(op, status);
        }
    }

    /// Dialer, peer on the same host: offers the acceptor a shared
    /// segment of `segment_len` bytes for the rest of `conn`'s link (the
    /// exchange is in `shm::switch`). The ShmOffer frame goes out first in
    /// the next transmit; the edge sends the segment's descriptors with
    /// the first socket write after this call (any write from here on
    /// carries bytes at or before the offer). `Inval` unless `conn` is an
    /// established connection this side dialed that offered nothing yet
    /// on this transport.
    pub fn offer_shm(&mut self, conn: ConnId, segment_len: u64) -> Result<()> {
        if self
            .conns
            .get(&conn)
            .is_none_or(|c| c.phase != ConnPhase::Established)
        {
            return Err(inval(format!("{conn:?} is not an established connection")));
        }
        self.queue_shm_frame(conn, "cannot offer shared memory now", |shm, dialer| {
            shm.offer(dialer, segment_len)
        })
    }

    /// Queues the exchange frame `step` makes of `conn`'s state (given
    /// whether this side dialed) ahead of its other frames; `Inval`
    /// saying `refusal` when `step` makes none.
    fn queue_shm_frame(
        &mut self,
        conn: ConnId,
        refusal: &str,
        step: impl FnOnce(&mut ShmSwitch, bool) -> Option<Frame>,
    ) -> Result<()> {
        let c = self
            .conns
            .get_mut(&conn)
            .ok_or_else(|| inval(format!("unknown connection {conn:?}")))?;
        let dialer = matches!(c.role, Role::Dialer { .. });
        let frame =
            step(&mut c.shm, dialer).ok_or_else(|| inval(format!("{conn:?}: {refusal}")))?;
        c.hs.push_back(frame);
        self.hint(conn);
        Ok(())
    }

    /// Acceptor: answers [`Event::ShmOffered`]. With `accept` (the edge
    /// mapped and checked the segment) a ShmSwitch goes out, after which
    /// this side's transmit stops ([`shm_output_paused`](Self::shm_output_paused))
    /// until the edge writes to the segment; without, a ShmDecline, and
    /// the link stays on the socket. `Inval` when no offer waits.
    pub fn answer_shm(&mut self, conn: ConnId, accept: bool) -> Result<()> {
        self.queue_shm_frame(conn, "no shared-memory offer waits", |shm, _| {
            shm.answer(accept)
        })
    }

    /// Dialer: after [`Event::ShmPeerMoved`] and
    /// [`shm_reads_moved`](Self::shm_reads_moved), this side's own
    /// ShmSwitch; transmit then stops as after
    /// [`answer_shm`](Self::answer_shm). `Inval` out of turn.
    pub fn follow_shm(&mut self, conn: ConnId) -> Result<()> {
        self.queue_shm_frame(conn, "no shared-memory move to follow", |shm, _| {
            shm.follow()
        })
    }

    /// Whether this side's ShmSwitch went into `conn`'s output and
    /// transmit waits for the edge to write to the segment: flush what
    /// is for the socket, then call
    /// [`shm_writes_moved`](Self::shm_writes_moved).
    pub fn shm_output_paused(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.shm.output_paused)
    }

    /// The edge writes `conn`'s frames to the shared segment from now on:
    /// transmit resumes.
    pub fn shm_writes_moved(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.shm.writes_moved();
            self.hint(conn);
        }
    }

    /// Single copies on `conn`'s current transport (both sides on one
    /// host, the edge able to read the peer's memory): large sends go as
    /// PullRts carrying their buffer's address, and PullRts that come are
    /// handed to the edge to read ([`Event::Pull`]). Off again when the
    /// transport changes.
    pub fn set_pull(&mut self, conn: ConnId, on: bool) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.pull = on;
        }
    }

    /// The edge's answer to [`Event::Pull`]: `true` once the message's
    /// accepted bytes are in the receive buffer (the receive completes,
    /// and Pulled tells the sender); `false` when it could not read them
    /// (the receive goes on the ordinary way: a Cts, then Data; no more
    /// pulls on this transport).
    pub fn pull_done(&mut self, conn: ConnId, token: u64, ok: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(inc) = c.incoming.get_mut(&token) else {
            return;
        };
        let Some(msg_id) = inc.pulling.take() else {
            return;
        };
        let accept = inc.accept;
        if ok {
            inc.received = accept;
            let status = inc.status(trunc(inc));
            let op = inc.op;
            c.incoming.remove(&token);
            c.control.push_back(Control {
                frame: Frame::Pulled {
                    msg_id,
                    len: accept,
                },
                returns_am_credit: false,
            });
            self.complete(op, status);
        } else {
            c.pull = false;
            c.push_cts(msg_id, token, accept);
        }
        self.hint(conn);
    }

    /// The edge reads `conn`'s input from the shared segment from now on:
    /// decoding resumes.
    pub fn shm_reads_moved(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.shm.reads_moved();
        }
    }

    /// The transport of `conn` is gone (EOF, error, timeout, or closed by
    /// the edge after a `ConnectionClosed`): its peer goes down and every
    /// operation pending towards it fails. The connection is forgotten.
    ///
    /// A detached link that could not be resumed ends here too; if nothing
    /// was in flight on it either way, it ends as a graceful close would
    /// (the peer's other connections stay).
    pub fn connection_lost(&mut self, conn: ConnId, why: impl Into<String>) {
        let idle_detached = self.conns.get(&conn).is_some_and(|c| {
            matches!(c.phase, ConnPhase::Detached | ConnPhase::Resuming)
                && c.drained()
                && c.rx.rts >= u64::from(self.config.peer_rts_window)
                && c.rx.am >= u64::from(self.config.peer_am_window)
        });
        if idle_detached {
            self.finish_graceful(conn);
        } else {
            self.close_conn(conn, ConnError::Lost(why.into()));
        }
        if let Some(c) = self.conns.remove(&conn) {
            if self.dials.get(&c.session.link) == Some(&conn) {
                self.dials.remove(&c.session.link);
            }
        }
        self.regrant();
    }

    /// Closes a peer gracefully: no new sends; each of its connections
    /// says Bye once everything in flight on it is done (drive
    /// `poll_transmit`). A timeout, if wanted, is the edge's:
    /// `connection_lost` forces the close.
    pub fn close_peer(&mut self, peer: PeerAddr) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        p.closing = true;
        for c in p.conns.clone() {
            if let Some(conn) = self.conns.get_mut(&c) {
                if conn.phase == ConnPhase::Established {
                    conn.phase = ConnPhase::Closing;
                }
                if matches!(conn.phase, ConnPhase::Detached | ConnPhase::Resuming) {
                    conn.resume_to = ConnPhase::Closing;
                }
            }
            self.hint(c);
        }
    }

    /// Closes everything: every peer gracefully, connections still in
    /// their handshake at once.
    pub fn shutdown(&mut self) {
        let peers: Vec<PeerAddr> = self.peers.keys().copied().collect();
        for p in peers {
            self.close_peer(p);
        }
        let handshaking: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.phase, ConnPhase::Handshaking | ConnPhase::Verifying))
            .map(|(id, _)| *id)
            .collect();
        for c in handshaking {
            self.close_conn(c, ConnError::Closed);
        }
    }

    // ----- MQ ------------------------------------------------------------

    /// Posts a send of `len` bytes with `tag` to `peer`; its bytes are read
    /// through [`SendPayloads`] when it goes out. `Standard` sends complete
    /// once their bytes are in the transmit buffer; `Synchronous` ones
    /// always use rendezvous and so complete only after the receiver
    /// matched them.
    ///
    /// Errors: `Inval` for an unknown peer or an op id in use, `MsgSize`
    /// above the largest message, `Io` when the peer is down or closing,
    /// `Again` when `max_queued_sends` sends are held on its connection.
    pub fn send(
        &mut self,
        peer: PeerAddr,
        tag: u64,
        len: u64,
        mode: SendMode,
        op: OpId,
    ) -> Result<()> {
        if self.ops.contains_key(&op) {
            return Err(inval(format!("operation id {op:?} is already in use")));
        }
        let conn_id = self.send_conn(peer)?;
        let conn = self
            .conns
            .get_mut(&conn_id)
            .expect("a peer's send connection exists");
        if len > conn.send_limits.max_message {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "a {len}-byte message exceeds the largest message ({} bytes)",
                    conn.send_limits.max_message
                ),
            ));
        }
        if conn.queued.len() >= self.config.max_queued_sends {
            return Err(Error::new(
                ErrorKind::Again,
                format!(
                    "{} sends are already queued to this peer",
                    conn.queued.len()
                ),
            ));
        }
        conn.queued.push_back(SendOp { op, tag, len, mode });
        self.ops.insert(op, OpState::Send);
        self.hint(conn_id);
        Ok(())
    }

    fn send_conn(&self, peer: PeerAddr) -> Result<ConnId> {
        let p = self.peers.get(&peer).ok_or_else(|| {
            inval(format!(
                "{peer:?} is not a peer of this endpoint (never connected, or forgotten \
                     after it went down; connect to its epid again)"
            ))
        })?;
        match p.send_conn {
            Some(c) if !p.closing => Ok(c),
            _ => Err(Error::new(
                ErrorKind::Io,
                format!("peer {} is down or closing", p.epid),
            )),
        }
    }

    /// Posts a receive of up to `cap` bytes for the oldest message matching
    /// `tags`. It may complete at once (events), or wait.
    pub fn recv(&mut self, tags: TagMatch, cap: usize, op: OpId) -> Result<()> {
        if self.ops.contains_key(&op) {
            return Err(inval(format!("operation id {op:?} is already in use")));
        }
        self.ops.insert(op, OpState::Posted { cap, tags });
        match self.matcher.post_recv(tags, op) {
            Ok(None) => {}
            Ok(Some(u)) => {
                self.untrack(&u);
                self.deliver(op, u.tag, u.payload);
                self.regrant();
            }
            Err(_) => {
                self.ops.remove(&op);
                return Err(inval(format!("operation id {op:?} is already posted")));
            }
        }
        Ok(())
    }

    /// Cancels a receive that has not matched: it completes with
    /// `Canceled` and `true` is returned. `false` when it is too late or
    /// `op` is not a waiting receive (sends cannot be cancelled).
    pub fn cancel(&mut self, op: OpId) -> bool {
        let Some(OpState::Posted { tags, .. }) = self.ops.get(&op) else {
            return false;
        };
        let tags = *tags;
        if !self.matcher.cancel(&op) {
            return false;
        }
        self.ops.remove(&op);
        self.events.push_back(Event::Complete {
            op,
            status: MqStatus::failed(tags.tag, ErrorKind::Canceled),
        });
        true
    }

    /// The status of the oldest unexpected message matching `tags`, left
    /// in the queue (PSM's `iprobe`).
    pub fn probe(&self, tags: TagMatch) -> Option<MqStatus> {
        self.matcher.probe(tags).map(|u| MqStatus {
            tag: u.tag,
            msg_len: u.payload.len(),
            nbytes: usize::try_from(u.payload.len()).unwrap_or(usize::MAX),
            source: Some(u.payload.source()),
            error: None,
        })
    }

    // ----- AM ------------------------------------------------------------

    fn check_am(limits: &FrameLimits, handler: u16, args: &[u64], payload: &[u8]) -> Result<()> {
        if handler >= limits.max_am_handlers {
            return Err(inval(format!(
                "AM handler {handler} is outside the {} slots",
                limits.max_am_handlers
            )));
        }
        if args.len() > usize::from(limits.max_am_args) {
            return Err(inval(format!(
                "{} AM arguments, at most {}",
                args.len(),
                limits.max_am_args
            )));
        }
        if payload.len() > limits.max_am_payload as usize {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "{}-byte AM payload, at most {}",
                    payload.len(),
                    limits.max_am_payload
                ),
            ));
        }
        Ok(())
    }

    fn am_frame(handler: u16, args: &[u64], payload: &[u8]) -> AmFrame {
        AmFrame {
            handler,
            args: AmArgs::new(args).expect("checked against max_am_args"),
            payload: Bytes::copy_from_slice(payload),
        }
    }

    /// Sends an AM request (arguments and payload are copied). `Again`
    /// without AM credit; `Inval` / `MsgSize` beyond the limits (the
    /// smaller of both sides'); `Io` when the peer is down.
    pub fn am_request(
        &mut self,
        peer: PeerAddr,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let conn_id = self.send_conn(peer)?;
        let conn = self
            .conns
            .get_mut(&conn_id)
            .expect("a peer's send connection exists");
        Self::check_am(&conn.send_limits, handler, args, payload)?;
        if conn.tx.am == 0 {
            return Err(Error::new(
                ErrorKind::Again,
                "no AM credit: too many requests in flight to this peer",
            ));
        }
        conn.tx.am -= 1;
        conn.control.push_back(Control {
            frame: Frame::AmRequest(Self::am_frame(handler, args, payload)),
            returns_am_credit: false,
        });
        self.hint(conn_id);
        Ok(())
    }

    /// Answers an AM request with a reply to the requester's `handler`.
    /// Beyond the limits the token comes back with the error (answer it
    /// again, or with `am_done`). A reply to a peer that is gone is
    /// dropped.
    pub fn am_reply(
        &mut self,
        token: AmToken,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> std::result::Result<(), (AmToken, Error)> {
        let Some(conn) = self.conns.get_mut(&token.conn).filter(|c| c.is_open()) else {
            return Ok(());
        };
        if let Err(e) = Self::check_am(&conn.send_limits, handler, args, payload) {
            return Err((token, e));
        }
        conn.control.push_back(Control {
            frame: Frame::AmReply(Self::am_frame(handler, args, payload)),
            returns_am_credit: true,
        });
        self.hint(token.conn);
        Ok(())
    }

    /// Finishes an AM request without a reply.
    pub fn am_done(&mut self, token: AmToken) {
        if let Some(conn) = self.conns.get_mut(&token.conn).filter(|c| c.is_open()) {
            conn.grant(Credit {
                am: 1,
                ..Credit::default()
            });
            self.hint(token.conn);
        }
    }

    /// Hooks `tag` (or, with `None`, no tag): eager messages with it no
    /// longer meet posted receives or wait in the unexpected queue, they
    /// come out as [`Event::Hooked`] the moment they arrive. Messages
    /// of the tag that come by rendezvous (above the eager threshold, or
    /// without eager credit) still match receives as any other.
    pub fn set_hook_tag(&mut self, tag: Option<u64>) {
        self.hook_tag = tag;
    }

    // ----- frames --------------------------------------------------------

    fn on_frame(&mut self, id: ConnId, frame: Frame, size: u64) -> Result<(), ConnError> {
        let conn = self.conns.get_mut(&id).expect("checked by the caller");
        if matches!(
            conn.phase,
            ConnPhase::Handshaking | ConnPhase::Verifying | ConnPhase::Resuming
        ) {
            return self.on_handshake(id, frame);
        }
        let source = conn.peer.expect("an open connection has a peer");
        if let Some(p) = self.peers.get_mut(&source) {
            p.activity = p.activity.wrapping_add(1);
        }
        if matches!(
            frame,
            Frame::ShmOffer { .. } | Frame::ShmSwitch | Frame::ShmDecline
        ) {
            // Outside the numbered stream (`shm::switch`).
            let dialer = matches!(conn.role, Role::Dialer { .. });
            let notice = conn
                .shm
                .on_frame(dialer, &frame)
                .map_err(Violation::UnexpectedFrame)?;
            self.events.push_back(match notice {
                ShmNotice::Offered { segment_len } => Event::ShmOffered {
                    conn: id,
                    segment_len,
                },
                ShmNotice::PeerMoved => Event::ShmPeerMoved { conn: id },
                ShmNotice::Declined => Event::ShmDeclined { conn: id },
            });
            return Ok(());
        }
        // Every frame past the handshake is part of the link's stream. Its
        // sender waits for the acknowledgement of a payload it referenced
        // (a large Eager message, the last Data chunk of a transfer).
        let urgent = match &frame {
            Frame::Eager { payload, .. } => payload.len() >= MIN_REFERENCED,
            Frame::Data { token, payload, .. } => conn
                .incoming
                .get(token)
                .is_some_and(|i| i.received + payload.len() as u64 == i.accept),
            _ => false,
        };
        if matches!(frame, Frame::Ack { .. }) {
            conn.session.consumed_ack(size);
        } else {
            conn.session.consumed(size, urgent);
        }
        match frame {
            Frame::Ack { received } => {
                let mut done = std::mem::take(&mut self.done_scratch);
                let acked = conn.session.on_ack(received, &mut done);
                for (op, status) in done.drain(..) {
                    self.complete(op, status);
                }
                self.done_scratch = done;
                acked.map_err(Violation::Ack)?;
                // A closing connection may have waited for this.
                self.hint(id);
            }
            Frame::Credit {
                eager_bytes,
                rts,
                am,
            } => {
                let add = |a: u64, b: u64| a.checked_add(b).ok_or(Violation::CreditOverflow);
                conn.tx.eager = add(conn.tx.eager, eager_bytes)?;
                conn.tx.rts = add(conn.tx.rts, rts.into())?;
                conn.tx.am = add(conn.tx.am, am.into())?;
            }
            Frame::Eager { tag, payload } => {
                let charge = payload.len() as u64 + ENTRY_OVERHEAD;
                if charge > conn.rx.eager {
                    return Err(Violation::EagerCredit {
                        charge,
                        granted: conn.rx.eager,
                    }
                    .into());
                }
                conn.rx.eager -= charge;
                self.granted -= charge;
                if self.hook_tag == Some(tag) {
                    // Taken at once, like a matched message: its credit
                    // goes back with the next grant.
                    self.events.push_back(Event::Hooked { source, payload });
                    self.pool_dirty = true;
                    self.want_credit(id, true);
                    return Ok(());
                }
                let pending = Pending::Eager { source, payload };
                // Unexpected payloads get their own memory (module docs).
                let arrival = self.matcher.arrive_with(tag, charge, pending, |p| match p {
                    Pending::Eager { source, payload } => Pending::Eager {
                        source,
                        payload: Bytes::copy_from_slice(&payload),
                    },
                    other => other,
                });
                if let Arrival::Matched { recv, payload } = arrival {
                    self.deliver(recv, tag, payload);
                }
                self.want_credit(id, true);
            }
            Frame::Rts { .. } | Frame::PullRts { .. } => {
                let (msg_id, tag, len, addr) = match frame {
                    Frame::PullRts {
                        msg_id,
                        tag,
                        len,
                        addr,
                    } => (msg_id, tag, len, Some(addr)),
                    Frame::Rts { msg_id, tag, len } => (msg_id, tag, len, None),
                    _ => unreachable!("matched above"),
                };
                if conn.rx.rts == 0 {
                    return Err(Violation::RtsCredit.into());
                }
                conn.rx.rts -= 1;
                let pending = Pending::Rts {
                    source,
                    conn: id,
                    msg_id,
                    len,
                    addr,
                };
                if let Arrival::Matched { recv, payload } = self.matcher.arrive(tag, 0, pending) {
                    self.deliver(recv, tag, payload);
                }
                self.want_credit(id, true);
            }
            Frame::Pulled { msg_id, len } => {
                // The receiver read the message itself: the send is done.
                let send = conn.answered(msg_id, len)?;
                self.complete(send.op, send.status(None));
            }
            Frame::Cts { msg_id, token, len } => {
                let send = conn.answered(msg_id, len)?;
                if len == 0 {
                    self.complete(send.op, send.status(None));
                } else {
                    conn.streaming.push_back(Outgoing {
                        send,
                        token,
                        accept: len,
                        sent: 0,
                        referenced: false,
                    });
                }
            }
            Frame::Data {
                token,
                offset,
                payload,
            } => {
                let inc = conn
                    .incoming
                    .get_mut(&token)
                    .ok_or(Violation::UnknownToken(token))?;
                if offset != inc.received {
                    return Err(Violation::DataOutOfOrder {
                        expected: inc.received,
                        got: offset,
                    }
                    .into());
                }
                let n = payload.len() as u64;
                if inc.accept - inc.received < n {
                    return Err(Violation::DataOverrun { accept: inc.accept }.into());
                }
                inc.received += n;
                let op = inc.op;
                let finished = (inc.received == inc.accept).then(|| inc.status(trunc(inc)));
                if finished.is_some() {
                    conn.incoming.remove(&token);
                }
                self.events.push_back(Event::Place {
                    op,
                    offset: offset as usize,
                    bytes: payload,
                });
                if let Some(status) = finished {
                    self.complete(op, status);
                }
            }
            Frame::AmRequest(am) => {
                if conn.rx.am == 0 {
                    return Err(Violation::AmCredit.into());
                }
                conn.rx.am -= 1;
                self.events.push_back(Event::AmRequest {
                    token: AmToken { conn: id, source },
                    source,
                    handler: am.handler,
                    args: am.args,
                    payload: am.payload,
                });
            }
            Frame::AmReply(am) => self.events.push_back(Event::AmReply {
                source,
                handler: am.handler,
                args: am.args,
                payload: am.payload,
            }),
            // A graceful close of this connection alone (`on_bye`).
            Frame::Bye => return Err(ConnError::PeerClosed),
            Frame::Hello(_)
            | Frame::HelloAck(_)
            | Frame::Refuse(_)
            | Frame::Session { .. }
            | Frame::Challenge { .. }
            | Frame::Proof { .. }
            | Frame::AuthChallenge { .. }
            | Frame::AuthProof { .. }
            | Frame::ShmOffer { .. }
            | Frame::ShmSwitch
            | Frame::ShmDecline => return Err(Violation::UnexpectedFrame(frame.kind()).into()),
        }
        Ok(())
    }

    fn on_handshake(&mut self, id: ConnId, frame: Frame) -> Result<(), ConnError> {
        let (role, waiting, phase) = {
            let c = &self.conns[&id];
            (c.role, c.their_hello.is_some(), c.phase)
        };
        if phase == ConnPhase::Verifying {
            return match frame {
                Frame::Proof { nonce } if self.conns[&id].proof == Some(nonce) => {
                    let c = self.conns.get_mut(&id).expect("checked");
                    let theirs = c
                        .their_hello
                        .take()
                        .expect("a verifying connection has a Hello");
                    self.link_peer(id, theirs, true)
                }
                other => {
                    tracing::warn!(conn = ?id, got = ?other.kind(), "soft engine: refused a dialer whose identity proof failed");
                    self.push_refuse(id, &Refusal::Identity);
                    Err(HandshakeError::Refused(Refusal::Identity).into())
                }
            };
        }
        if let (Role::Acceptor, Frame::Challenge { nonce, from, link }, false) =
            (role, &frame, waiting)
        {
            self.answer_challenge(*nonce, *from, *link);
            // A challenge connection carries nothing else.
            return Err(ConnError::Closed);
        }
        match (role, &frame, waiting) {
            (Role::Dialer { .. }, Frame::AuthChallenge { nonce }, false) => {
                return self.answer_auth(id, *nonce);
            }
            (Role::Dialer { .. }, Frame::AuthProof { mac, .. }, false) => {
                return self.check_acceptor_proof(id, mac);
            }
            (Role::Acceptor, Frame::AuthProof { nonce, mac }, true) => {
                return self.check_dialer_proof(id, nonce, mac);
            }
            (Role::Dialer { .. }, Frame::HelloAck(_), false)
                if self.job_secret.is_some() && !self.conns[&id].authed =>
            {
                // Answered without proving the secret.
                return self.refuse_auth(id, "the acceptor sent no proof of the job secret");
            }
            _ => {}
        }
        let theirs = match (role, frame, waiting) {
            (Role::Acceptor, Frame::Hello(h), false)
            | (Role::Dialer { .. }, Frame::HelloAck(h), false) => h,
            (
                _,
                Frame::Session {
                    link,
                    resume,
                    incarnation,
                    generation,
                    seal,
                },
                true,
            ) => {
                return self.on_session(
                    id,
                    SessionFields {
                        link,
                        resume,
                        incarnation,
                        generation,
                        seal,
                    },
                );
            }
            (Role::Dialer { .. }, Frame::Refuse(r), _) => {
                let refusal = Refusal::from_frame(&r, &self.hello);
                tracing::info!(
                    conn = ?id,
                    epid = %self.hello.epid,
                    code = ?refusal.code(),
                    "soft engine: the peer refused our handshake"
                );
                return Err(HandshakeError::RefusedByPeer(refusal).into());
            }
            (_, other, _) => {
                self.push_refuse(id, &Refusal::Protocol);
                return Err(HandshakeError::UnexpectedFrame { got: other.kind() }.into());
            }
        };
        if let Err(refusal) = check_hello(&self.hello, &theirs) {
            // Only this log and the error name the UUIDs (ours and the one
            // the peer sent); the Refuse frame carries neither.
            let epid = self.hello.epid;
            match refusal {
                Refusal::BadMagic | Refusal::Protocol => {
                    tracing::debug!(conn = ?id, %epid, "soft engine: refused a connection: {refusal}")
                }
                _ => {
                    tracing::warn!(conn = ?id, %epid, "soft engine: refused a connection: {refusal}")
                }
            }
            self.push_refuse(id, &refusal);
            return Err(HandshakeError::Refused(refusal).into());
        }
        if let Role::Dialer { expect } = role {
            if theirs.epid != expect {
                return Err(HandshakeError::WrongEpid {
                    expected: expect,
                    got: theirs.epid,
                }
                .into());
            }
        }
        // The Session frame follows.
        self.conns.get_mut(&id).expect("checked").their_hello = Some(theirs);
        Ok(())
    }

    /// The Session frame after the other side's Hello (or HelloAck): a new
    /// link, or one to resume.
    fn on_session(&mut self, id: ConnId, f: SessionFields) -> Result<(), ConnError> {
        let ours = self.hello.epid.0;
        let incarnation = self.incarnation;
        let secret = self.job_secret.clone();
        let c = self.conns.get_mut(&id).expect("checked by the caller");
        if c.role == Role::Acceptor && secret.is_some() && !c.authed {
            // The dialer proves the job secret first.
            let nonce = new_nonce();
            c.auth_sent = Some(nonce);
            c.pending_session = Some(f);
            c.hs.push_back(Frame::AuthChallenge { nonce });
            return Ok(());
        }
        let theirs = c.their_hello.take().expect("checked by the caller");
        let unexpected = || -> ConnError {
            HandshakeError::UnexpectedFrame {
                got: FrameKind::Session,
            }
            .into()
        };
        match (c.role, c.phase) {
            (Role::Acceptor, _) if f.resume == NEW_LINK => {
                if f.generation != 0 {
                    self.push_refuse(id, &Refusal::Protocol);
                    return Err(unexpected());
                }
                let c = self.conns.get_mut(&id).expect("checked by the caller");
                c.session = Session::new(f.link, c.session.my_half, c.session.logging());
                c.session.peer_incarnation = f.incarnation;
                c.session.key = Some(LinkKey::derive(
                    secret.as_ref(),
                    &LinkEnds {
                        link: f.link,
                        dialer_epid: theirs.epid.0,
                        acceptor_epid: ours,
                        dialer_half: f.seal,
                        acceptor_half: c.session.my_half,
                    },
                ));
                if c.verify {
                    let epid = theirs.epid;
                    c.their_hello = Some(theirs);
                    c.phase = ConnPhase::Verifying;
                    self.events.push_back(Event::Verify { conn: id, epid });
                    return Ok(());
                }
                self.link_peer(id, theirs, true)
            }
            (Role::Acceptor, _) => self.resume_accepted(id, &theirs, f),
            (Role::Dialer { .. }, ConnPhase::Handshaking) => {
                if f.link != c.session.link || f.resume != NEW_LINK || f.generation != 0 {
                    return Err(unexpected());
                }
                c.session.peer_incarnation = f.incarnation;
                c.session.key = Some(LinkKey::derive(
                    secret.as_ref(),
                    &LinkEnds {
                        link: f.link,
                        dialer_epid: ours,
                        acceptor_epid: theirs.epid.0,
                        dialer_half: c.session.my_half,
                        acceptor_half: f.seal,
                    },
                ));
                self.link_peer(id, theirs, false)
            }
            (Role::Dialer { .. }, _) => {
                // Resuming: the acceptor says how much of our stream it
                // consumed, and proves it holds the link.
                if f.link != c.session.link || f.resume == NEW_LINK {
                    return Err(unexpected());
                }
                let r = Resumption {
                    link: f.link,
                    resume: f.resume,
                    generation: f.generation,
                    dialer_incarnation: incarnation,
                    acceptor_incarnation: f.incarnation,
                };
                let proven = f.generation == c.session.generation
                    && f.incarnation == c.session.peer_incarnation
                    && c.session
                        .key
                        .as_ref()
                        .is_some_and(|k| k.check(Side::Acceptor, &r, &f.seal));
                if !proven {
                    tracing::warn!(conn = ?id, "soft engine: refused a resumption answer that does not prove the link's key");
                    self.push_refuse(id, &Refusal::Identity);
                    return Err(HandshakeError::Refused(Refusal::Identity).into());
                }
                let mut done = Vec::new();
                let resumed = c.session.resume_at(f.resume, &mut done);
                c.phase = c.resume_to;
                for (op, status) in done {
                    self.complete(op, status);
                }
                resumed.map_err(Violation::Ack)?;
                self.hint(id);
                self.events.push_back(Event::Resumed {
                    conn: id,
                    replaced: None,
                });
                Ok(())
            }
        }
    }

    /// The dialer's answer to the acceptor's AuthChallenge: its proof, and
    /// a challenge for the acceptor.
    fn answer_auth(&mut self, id: ConnId, challenge: [u8; NONCE_LEN]) -> Result<(), ConnError> {
        let Some(secret) = self.job_secret.clone() else {
            return self.refuse_auth(
                id,
                "the acceptor asks for a job secret, and this side has none",
            );
        };
        let ours = self.hello.epid.0;
        let c = self.conns.get_mut(&id).expect("checked by the caller");
        let Role::Dialer { expect } = c.role else {
            unreachable!("checked by the caller")
        };
        let nonce = new_nonce();
        c.auth_sent = Some(nonce);
        let mac = secret.prove(&Transcript {
            side: ProofSide::Dialer,
            challenge: &challenge,
            dialer: ours,
            acceptor: expect.0,
            link: c.session.link,
        });
        c.hs.push_back(Frame::AuthProof { nonce, mac });
        self.hint(id);
        Ok(())
    }

    /// The acceptor's proof, answering the dialer's challenge.
    fn check_acceptor_proof(&mut self, id: ConnId, mac: &[u8; MAC_LEN]) -> Result<(), ConnError> {
        let ours = self.hello.epid.0;
        let c = &self.conns[&id];
        let Role::Dialer { expect } = c.role else {
            unreachable!("checked by the caller")
        };
        let good = match (&self.job_secret, c.auth_sent) {
            (Some(secret), Some(challenge)) => secret.check(
                &Transcript {
                    side: ProofSide::Acceptor,
                    challenge: &challenge,
                    dialer: ours,
                    acceptor: expect.0,
                    link: c.session.link,
                },
                mac,
            ),
            _ => false,
        };
        if !good {
            return self.refuse_auth(id, "the acceptor's proof of the job secret is wrong");
        }
        self.conns.get_mut(&id).expect("checked").authed = true;
        Ok(())
    }

    /// The dialer's proof, answering the acceptor's challenge; then the
    /// acceptor proves itself and the handshake goes on.
    fn check_dialer_proof(
        &mut self,
        id: ConnId,
        their_challenge: &[u8; NONCE_LEN],
        mac: &[u8; MAC_LEN],
    ) -> Result<(), ConnError> {
        let ours = self.hello.epid.0;
        let c = &self.conns[&id];
        let (Some(secret), Some(challenge), Some(session), Some(theirs)) = (
            self.job_secret.clone(),
            c.auth_sent,
            c.pending_session,
            c.their_hello.as_ref().map(|h| h.epid.0),
        ) else {
            return self.refuse_auth(id, "an unexpected proof of the job secret");
        };
        let transcript = |side, challenge| Transcript {
            side,
            challenge,
            dialer: theirs,
            acceptor: ours,
            link: session.link,
        };
        if !secret.check(&transcript(ProofSide::Dialer, &challenge), mac) {
            return self.refuse_auth(id, "the dialer's proof of the job secret is wrong");
        }
        let answer = secret.prove(&transcript(ProofSide::Acceptor, their_challenge));
        let c = self.conns.get_mut(&id).expect("checked");
        c.authed = true;
        c.pending_session = None;
        c.hs.push_back(Frame::AuthProof {
            nonce: [0; NONCE_LEN],
            mac: answer,
        });
        self.on_session(id, session)
    }

    /// Refuses the job-secret authentication of `id` (`why` is logged).
    fn refuse_auth(&mut self, id: ConnId, why: &str) -> Result<(), ConnError> {
        tracing::warn!(conn = ?id, %why, "soft engine: job secret authentication failed");
        self.push_refuse(id, &Refusal::Auth);
        Err(HandshakeError::Refused(Refusal::Auth).into())
    }

    /// A Challenge from `from` with `nonce` came on a connection of its
    /// own: if this endpoint is dialing `from` on link `link` and waits
    /// for its answer, the proof goes on that connection. Any other
    /// Challenge (unsolicited, or naming a link this side did not make:
    /// only the two ends know a link's id) is dropped, touching no
    /// handshake.
    fn answer_challenge(&mut self, nonce: u64, from: Epid, link: u64) {
        // The endpoint dialed at `from`'s address, whatever instance it
        // expected there (a stale epid learns from the HelloAck that
        // another endpoint answers).
        let place = |e: Epid| super::SoftEpid::try_from(e).ok().map(|s| s.socket_addr());
        let asking = place(from);
        let Some(&id) = self.dials.get(&link) else {
            tracing::debug!(%from, "soft engine: dropped a Challenge naming no link of ours");
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else {
            self.dials.remove(&link);
            return;
        };
        let waits = matches!(c.role, Role::Dialer { expect } if expect == from || (asking.is_some() && place(expect) == asking))
            && c.phase == ConnPhase::Handshaking
            && c.their_hello.is_none()
            && c.session.link == link
            && !c.proved;
        if !waits {
            tracing::debug!(%from, "soft engine: dropped a Challenge its link does not wait for");
            return;
        }
        c.proved = true;
        c.hs.push_back(Frame::Proof { nonce });
        self.hint(id);
    }

    /// An accepted connection `id` asks to resume link `f.link` of the
    /// peer `theirs` names, whose side consumed `f.resume` bytes of our
    /// stream: if the Session proves the link's key (and its generation is
    /// new), the link's connection takes over this transport, and `id` is
    /// gone. Anything else is refused as an unknown link, touching
    /// nothing of the link's: the refusal does not tell a stranger
    /// whether the id was right.
    fn resume_accepted(
        &mut self,
        id: ConnId,
        theirs: &Hello,
        f: SessionFields,
    ) -> Result<(), ConnError> {
        let incarnation = self.incarnation;
        let peer = self.by_epid.get(&theirs.epid).copied();
        let target = peer.and_then(|p| self.peers.get(&p)).and_then(|p| {
            p.conns.iter().copied().find(|c| {
                self.conns.get(c).is_some_and(|c| {
                    c.is_open()
                        && c.session.logging()
                        && c.session.link == f.link
                        && c.role == Role::Acceptor
                })
            })
        });
        let proven = target.and_then(|t| self.conns.get(&t)).is_some_and(|t| {
            let r = Resumption {
                link: f.link,
                resume: f.resume,
                generation: f.generation,
                dialer_incarnation: f.incarnation,
                acceptor_incarnation: incarnation,
            };
            f.incarnation == t.session.peer_incarnation
                && f.generation > t.session.generation
                && t.session
                    .key
                    .as_ref()
                    .is_some_and(|k| k.check(Side::Dialer, &r, &f.seal))
        });
        let (Some(target), true) = (target, proven) else {
            if target.is_some() {
                tracing::warn!(conn = ?id, epid = %theirs.epid, "soft engine: refused a resumption that does not prove its link's key");
            } else {
                tracing::debug!(conn = ?id, epid = %theirs.epid, "soft engine: refused to resume an unknown link");
            }
            self.push_refuse(id, &Refusal::UnknownLink);
            return Err(HandshakeError::Refused(Refusal::UnknownLink).into());
        };
        // What the handshake of `id` still has to send (the acceptor's
        // proof of the job secret) goes first, on the link's connection.
        let pending: Vec<Frame> = self
            .conns
            .get_mut(&id)
            .map(|c| c.hs.drain(..).collect())
            .unwrap_or_default();
        let hello = self.hello.clone();
        let t = self.conns.get_mut(&target).expect("found above");
        if t.has_transport() {
            // Its old transport broke too, and we did not see it yet.
            t.roll_back_direct();
            t.resume_to = t.phase;
        }
        let mut done = Vec::new();
        if let Err(e) = t.session.resume_at(f.resume, &mut done) {
            if !t.has_transport() {
                t.phase = ConnPhase::Detached;
            }
            self.push_refuse(id, &Refusal::Protocol);
            return Err(ConnError::Protocol(Violation::Ack(e)));
        }
        t.session.generation = f.generation;
        t.phase = t.resume_to;
        t.hs.clear();
        // A new transport: whatever its old one had moved to is gone.
        t.shm = ShmSwitch::default();
        t.pull = false;
        t.hs.extend(pending);
        let r = Resumption {
            link: f.link,
            resume: t.session.received(),
            generation: f.generation,
            dialer_incarnation: f.incarnation,
            acceptor_incarnation: incarnation,
        };
        let seal = t
            .session
            .key
            .as_ref()
            .expect("checked above")
            .seal(Side::Acceptor, &r);
        t.hs.push_back(Frame::HelloAck(hello));
        t.hs.push_back(Frame::Session {
            link: r.link,
            resume: r.resume,
            incarnation,
            generation: r.generation,
            seal,
        });
        for (op, status) in done {
            self.complete(op, status);
        }
        self.conns.remove(&id);
        self.rebound = Some((id, target));
        self.hint(target);
        self.events.push_back(Event::Resumed {
            conn: target,
            replaced: Some(id),
        });
        Ok(())
    }

    /// A new link's handshake completed on `id` with the peer whose Hello
    /// is `theirs`: the connection joins that peer (made, or revived if it
    /// was down); `reply` for the acceptor, which answers.
    fn link_peer(&mut self, id: ConnId, theirs: Hello, reply: bool) -> Result<(), ConnError> {
        let (incarnation, link) = {
            let c = &self.conns[&id];
            (c.session.peer_incarnation, c.session.link)
        };
        if self.dials.get(&link) == Some(&id) {
            self.dials.remove(&link);
        }
        // Link to the peer of that epid (reviving it if it was down).
        let peer = match self.by_epid.get(&theirs.epid) {
            Some(p) => {
                let p = *p;
                self.new_incarnation(p, incarnation);
                p
            }
            None => {
                let p = PeerAddr(self.next_peer);
                self.next_peer += 1;
                self.by_epid.insert(theirs.epid, p);
                self.peers.insert(
                    p,
                    Peer {
                        epid: theirs.epid,
                        send_conn: None,
                        conns: Vec::new(),
                        closing: false,
                        activity: 0,
                        incarnation,
                    },
                );
                p
            }
        };
        self.returned(peer);
        let p = self.peers.get_mut(&peer).expect("just linked");
        p.conns.push(id);
        let closing = p.closing && p.send_conn.is_some();
        if p.send_conn.is_none() {
            p.send_conn = Some(id);
            p.closing = false;
        }
        let hello = self.hello.clone();
        let conn = self.conns.get_mut(&id).expect("checked by the caller");
        conn.peer = Some(peer);
        conn.send_limits = self.hello.limits.min(&theirs.limits);
        conn.phase = if closing {
            ConnPhase::Closing
        } else {
            ConnPhase::Established
        };
        if reply {
            conn.hs.push_back(Frame::HelloAck(hello));
            conn.hs.push_back(Frame::Session {
                link: conn.session.link,
                resume: NEW_LINK,
                incarnation: self.incarnation,
                generation: 0,
                seal: conn.session.my_half,
            });
        }
        conn.grant(Credit {
            eager: 0,
            rts: self.config.peer_rts_window.into(),
            am: self.config.peer_am_window.into(),
        });
        self.pool_dirty = true;
        self.events.push_back(Event::Connected {
            conn: id,
            peer,
            epid: theirs.epid,
        });
        Ok(())
    }

    /// A new link of `peer` names `incarnation`: if its connections so far
    /// named another, they belong to a process that is gone (a new one
    /// took its address), and they close, failing what is pending on
    /// them, before the new link joins the peer.
    fn new_incarnation(&mut self, peer: PeerAddr, incarnation: u64) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.incarnation == incarnation {
            return;
        }
        p.incarnation = incarnation;
        let (epid, old) = (p.epid, p.conns.clone());
        if old.is_empty() {
            return;
        }
        tracing::info!(%epid, "soft engine: a new process answers at a peer's address; the old one's links end");
        let why = format!(
            "{epid} restarted: a new process answers at its address, and what was pending on the \
             old one is lost"
        );
        for c in old {
            self.close_conn(c, ConnError::Lost(why.clone()));
        }
    }

    /// Queues the Refuse that tells the peer why; it names no job
    /// ([`Refusal::to_frame`]).
    fn push_refuse(&mut self, id: ConnId, refusal: &Refusal) {
        // Every refusal passes here; the code names no job.
        tracing::info!(
            conn = ?id,
            epid = %self.hello.epid,
            code = ?refusal.code(),
            "soft engine: refused a handshake"
        );
        if let Some(c) = self.conns.get_mut(&id) {
            c.hs.push_back(Frame::Refuse(refusal.to_frame(&self.hello)));
        }
    }

    // ----- matching results ---------------------------------------------

    /// A posted receive `op` took message `pending`.
    fn deliver(&mut self, op: OpId, tag: u64, pending: Pending) {
        let Some(OpState::Posted { cap, .. }) = self.ops.get(&op) else {
            return;
        };
        let cap = *cap;
        match pending {
            Pending::Eager { source, payload } => {
                let n = cap.min(payload.len());
                if n > 0 {
                    self.events.push_back(Event::Place {
                        op,
                        offset: 0,
                        bytes: payload.slice(..n),
                    });
                }
                let msg_len = payload.len() as u64;
                self.complete(
                    op,
                    MqStatus {
                        tag,
                        msg_len,
                        nbytes: n,
                        source: Some(source),
                        error: (msg_len > n as u64).then_some(ErrorKind::Trunc),
                    },
                );
                self.pool_dirty = true;
            }
            Pending::Rts {
                source,
                conn,
                msg_id,
                len,
                addr,
            } => {
                let Some(c) = self.conns.get_mut(&conn).filter(|c| c.is_open()) else {
                    // Entries of closed connections are removed when they
                    // close; keep the receive failing cleanly regardless.
                    self.complete(
                        op,
                        MqStatus {
                            tag,
                            msg_len: len,
                            nbytes: 0,
                            source: Some(source),
                            error: Some(ErrorKind::Io),
                        },
                    );
                    return;
                };
                let accept = len.min(cap as u64);
                let token = c.next_token;
                c.next_token += 1;
                let pull = addr.filter(|_| c.pull && accept > 0);
                if pull.is_none() {
                    c.push_cts(msg_id, token, accept);
                }
                c.grant(Credit {
                    rts: 1,
                    ..Credit::default()
                });
                let inc = Incoming {
                    op,
                    tag,
                    msg_len: len,
                    accept,
                    received: 0,
                    source,
                    pulling: pull.map(|_| msg_id),
                };
                if let Some(addr) = pull {
                    self.events.push_back(Event::Pull {
                        conn,
                        token,
                        op,
                        addr,
                        len: accept as usize,
                    });
                }
                if accept == 0 {
                    let status = inc.status(trunc(&inc));
                    self.complete(op, status);
                } else {
                    c.incoming.insert(token, inc);
                    self.ops.insert(op, OpState::Receiving);
                }
                self.hint(conn);
            }
        }
    }

    fn complete(&mut self, op: OpId, status: MqStatus) {
        self.ops.remove(&op);
        self.events.push_back(Event::Complete { op, status });
    }

    // ----- closing -------------------------------------------------------

    /// Marks `id` closed and reports it (`ConnectionClosed` with
    /// `error`): its credit goes back to the pool and the operations still
    /// on it fail with `fail`. `None` when it was closed already, else the
    /// peer it carried (if any).
    fn retire(
        &mut self,
        id: ConnId,
        error: Option<ConnError>,
        fail: ErrorKind,
    ) -> Option<Option<PeerAddr>> {
        let conn = self.conns.get_mut(&id)?;
        if conn.phase == ConnPhase::Closed {
            return None;
        }
        conn.phase = ConnPhase::Closed;
        conn.direct = None;
        self.granted -= conn.rx.eager;
        conn.rx = Credit::default();
        conn.give = Credit::default();
        let failed = conn.take_ops(fail);
        let peer = conn.peer;
        self.pool_dirty = true;
        self.events
            .push_back(Event::ConnectionClosed { conn: id, error });
        for (op, status) in failed {
            self.complete(op, status);
        }
        Some(peer)
    }

    /// Closes one connection with `error`, failing its operations; when it
    /// carried a peer, the whole peer goes down.
    fn close_conn(&mut self, id: ConnId, error: ConnError) {
        if let Some(conn) = self.conns.get_mut(&id) {
            // Only a Refuse is worth flushing from a failed connection.
            conn.control.clear();
            conn.hs.retain(|f| matches!(f, Frame::Refuse(_)));
        }
        if let Some(Some(peer)) = self.retire(id, Some(error.clone()), error.kind()) {
            self.peer_down(peer, id, error, true);
        }
    }

    /// After our Bye on `id` (it was drained: nothing of ours is left on
    /// it).
    fn finish_graceful(&mut self, id: ConnId) {
        if let Some(Some(peer)) = self.retire(id, None, ErrorKind::Canceled) {
            self.peer_down(peer, id, ConnError::Closed, false);
        }
    }

    /// The peer said Bye on `id`: everything it sent on this connection
    /// has arrived, and it reads nothing more there. Only this connection
    /// closes: what of ours is still on it fails (the peer will not serve
    /// it), and the peer goes down when this was its last connection.
    /// Frames on different connections are not ordered, so the peer's
    /// other connections may still carry messages (sent before its Bye
    /// here); they are delivered as they arrive, up to their own Bye.
    fn on_bye(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.control.clear();
            conn.hs.clear();
        }
        let error = ConnError::PeerClosed;
        let Some(peer) = self.retire(id, Some(error.clone()), error.kind()) else {
            return;
        };
        // Rendezvous requests that came on it can no longer be served.
        let stale = self
            .remove_unexpected_if(|u| matches!(u.payload, Pending::Rts { conn, .. } if conn == id));
        drop(stale);
        if let Some(peer) = peer {
            self.peer_down(peer, id, error, false);
        }
    }

    /// Connection `gone` of `peer` closed with `error`. A `failure` takes
    /// the whole peer down (its other connections close with the same
    /// error); a graceful close does when it was the last connection.
    fn peer_down(&mut self, peer: PeerAddr, gone: ConnId, error: ConnError, failure: bool) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        p.conns.retain(|c| *c != gone);
        if !failure && !p.conns.is_empty() {
            if p.send_conn == Some(gone) {
                p.send_conn = p.conns.first().copied();
            }
            return;
        }
        let was_up = p.send_conn.take().is_some();
        let siblings = std::mem::take(&mut p.conns);
        let epid = p.epid;
        if was_up {
            self.events.push_back(Event::PeerDown {
                peer,
                epid,
                error: error.clone(),
            });
        }
        for c in siblings {
            self.close_conn(c, error.clone());
        }
        if was_up {
            self.depart(peer);
        }
        // Rendezvous requests from the peer can no longer be served.
        let stale = self.remove_unexpected_if(
            |u| matches!(u.payload, Pending::Rts { source, .. } if source == peer),
        );
        drop(stale);
    }

    // ----- departed peers' messages ----------------------------------------

    /// Removes every unexpected message `pred` selects, keeping the
    /// departed peers' accounts.
    fn remove_unexpected_if(
        &mut self,
        pred: impl FnMut(&super::matcher::Unexpected<Pending>) -> bool,
    ) -> Vec<super::matcher::Unexpected<Pending>> {
        let gone = self.matcher.remove_unexpected_if(pred);
        for u in &gone {
            self.untrack(u);
        }
        gone
    }

    /// Unexpected message `u` left the queue: if its peer is down, the
    /// bytes its departure holds shrink.
    fn untrack(&mut self, u: &super::matcher::Unexpected<Pending>) {
        if self.departed.is_empty() {
            return;
        }
        if let Some(held) = self.departed.get_mut(&u.payload.source()) {
            let n = u.charge.min(*held);
            *held -= n;
            self.departed_bytes -= n;
            if *held == 0 {
                self.departed.remove(&u.payload.source());
            }
            self.pool_dirty = true;
        }
    }

    /// `peer` went down. What it left in the unexpected queue stays
    /// receivable, but no longer counts against the budget the peers
    /// still here share: their credit does not wait for someone to receive
    /// the departed peer's messages. Departed peers together may hold one
    /// budget more; beyond it, the messages of those that left first are
    /// dropped.
    fn depart(&mut self, peer: PeerAddr) {
        let held = self.matcher.unexpected_charge_of(
            |u| matches!(u.payload, Pending::Eager { source, .. } if source == peer),
        );
        if held == 0 || self.departed.contains_key(&peer) {
            return;
        }
        self.departed.insert(peer, held);
        self.departed_order.push_back(peer);
        self.departed_bytes += held;
        self.pool_dirty = true;
        while self.departed_bytes > self.config.unexpected_budget {
            let Some(oldest) = self.departed_order.pop_front() else {
                break;
            };
            if !self.departed.contains_key(&oldest) {
                continue;
            }
            let gone = self.remove_unexpected_if(|u| u.payload.source() == oldest);
            self.departed_dropped += gone.len() as u64;
            tracing::debug!(
                peer = ?oldest,
                messages = gone.len(),
                "soft engine: dropped the unexpected messages of a departed peer (departed peers hold a whole budget)"
            );
            self.departed.remove(&oldest);
        }
        if self.departed_order.len() > 2 * self.departed.len() + 64 {
            let departed = &self.departed;
            self.departed_order.retain(|p| departed.contains_key(p));
        }
    }

    /// `peer` is back: its messages count against the shared budget again.
    fn returned(&mut self, peer: PeerAddr) {
        if let Some(held) = self.departed.remove(&peer) {
            self.departed_bytes -= held;
            self.pool_dirty = true;
        }
    }

    // ----- credit --------------------------------------------------------

    /// The eager credit the pool keeps from connections that have not sent
    /// any message since they last got some: one window (less when the
    /// budget holds fewer than two).
    fn credit_reserve(&self) -> u64 {
        let window = self.config.peer_eager_window;
        window.min(self.config.unexpected_budget.saturating_sub(window))
    }

    /// Queues `id` for eager credit if its credit fell below three
    /// quarters of its window; `active` when it just sent a message
    /// (served first).
    fn want_credit(&mut self, id: ConnId, active: bool) {
        self.pool_dirty = true;
        let window = self.config.peer_eager_window;
        let Some(conn) = self.conns.get_mut(&id).filter(|c| c.is_open()) else {
            return;
        };
        if window.saturating_sub(conn.rx.eager) < (window / 4).max(1) {
            return;
        }
        match (active, conn.credit_wait) {
            (true, CreditWait::No | CreditWait::New) => {
                conn.credit_wait = CreditWait::Active;
                self.credit_active.push_back(id);
            }
            (false, CreditWait::No) => {
                conn.credit_wait = CreditWait::New;
                self.credit_new.push_back(id);
            }
            _ => {}
        }
    }

    /// A connection's handshake completed: it wants its first credit.
    fn established(&mut self, id: ConnId) {
        if self.conns.get(&id).is_some_and(Conn::is_open) {
            self.want_credit(id, false);
            self.hint(id);
        }
    }

    /// Hands the free part of the budget (what neither unexpected
    /// messages nor outstanding credit hold) to connections waiting for
    /// eager credit: first those that send messages, oldest request
    /// first, each up to its window; then those that sent nothing since
    /// they last got credit (new connections, mostly), from what the pool
    /// holds beyond a reserve ([`credit_reserve`](Self::credit_reserve)).
    /// Credit, once granted, is the peer's until it spends it, so without
    /// the reserve a crowd of idle connections could hold the whole
    /// budget while the peers that send get none. The cost is that of
    /// the grants made, whatever the number of connections.
    fn regrant(&mut self) {
        if !self.pool_dirty {
            return;
        }
        self.pool_dirty = false;
        let window = self.config.peer_eager_window;
        if window == 0 {
            return;
        }
        let free = self
            .config
            .unexpected_budget
            .saturating_sub(self.matcher.unexpected_bytes() - self.departed_bytes)
            .saturating_sub(self.granted);
        let left = self.serve_credit(CreditWait::Active, free);
        let reserve = self.credit_reserve();
        if left > reserve {
            self.serve_credit(CreditWait::New, left - reserve);
        }
        self.prune_credit_queues();
    }

    /// Grants up to `avail` bytes to the connections of one queue in
    /// order; what is left of `avail`.
    fn serve_credit(&mut self, which: CreditWait, mut avail: u64) -> u64 {
        let window = self.config.peer_eager_window;
        let threshold = (window / 4).max(1);
        while avail > 0 {
            let queue = match which {
                CreditWait::Active => &mut self.credit_active,
                _ => &mut self.credit_new,
            };
            let Some(id) = queue.pop_front() else {
                break;
            };
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            if conn.credit_wait != which {
                // Moved to the other queue, or served already.
                continue;
            }
            conn.credit_wait = CreditWait::No;
            if !conn.is_open() {
                continue;
            }
            let deficit = window.saturating_sub(conn.rx.eager);
            if deficit < threshold {
                continue;
            }
            let x = deficit.min(avail);
            conn.grant(Credit {
                eager: x,
                ..Credit::default()
            });
            self.granted += x;
            avail -= x;
            if x < deficit {
                // The pool ran dry: first in line for the next bytes.
                conn.credit_wait = which;
                let queue = match which {
                    CreditWait::Active => &mut self.credit_active,
                    _ => &mut self.credit_new,
                };
                queue.push_front(id);
            }
            self.hint(id);
        }
        avail
    }

    /// Drops entries of closed or served connections once they outnumber
    /// the connections (a queue left unserved for long, as the new
    /// connections' queue while the budget is taken, would grow with
    /// every connection that came and went).
    fn prune_credit_queues(&mut self) {
        let bound = 2 * self.conns.len() + 64;
        for which in [CreditWait::Active, CreditWait::New] {
            let conns = &self.conns;
            let queue = match which {
                CreditWait::Active => &mut self.credit_active,
                _ => &mut self.credit_new,
            };
            if queue.len() > bound {
                queue.retain(|id| {
                    conns
                        .get(id)
                        .is_some_and(|c| c.is_open() && c.credit_wait == which)
                });
            }
        }
    }

    // ----- the edge's upkeep ----------------------------------------------

    /// Notes that `conn` may have frames to transmit.
    fn hint(&mut self, conn: ConnId) {
        if self.hints_overflow {
            return;
        }
        if self.hints.len() >= MAX_HINTS {
            self.hints.clear();
            self.hints_overflow = true;
            return;
        }
        self.hints.push(conn);
    }

    /// Moves to `out` the connections that may have gained frames to
    /// transmit since the last call, so an edge with many idle
    /// connections need not ask each one ([`wants_transmit`](Self::wants_transmit))
    /// after every call: those a send, a receive's Cts, an AM request,
    /// reply or completion, a credit grant, a graceful close or a finished
    /// handshake touched. What `handle_input` and `poll_transmit` leave on
    /// their own connection is not listed (the edge is at it already).
    /// A connection may be listed twice, or have nothing after all.
    /// `false` when there were too many to list: any connection may have
    /// frames then.
    pub fn take_transmit_hints(&mut self, out: &mut Vec<ConnId>) -> bool {
        out.append(&mut self.hints);
        !std::mem::take(&mut self.hints_overflow)
    }

    /// The eager credit granted on `conn` and not spent yet (0 for an
    /// unknown connection).
    pub fn connection_credit(&self, conn: ConnId) -> u64 {
        self.conns.get(&conn).map_or(0, |c| c.rx.eager)
    }

    /// Bytes `conn` sent that its peer has not acknowledged (0 for an
    /// unknown connection).
    pub fn connection_unacked(&self, conn: ConnId) -> u64 {
        self.conns.get(&conn).map_or(0, |c| c.session.unacked())
    }

    /// How many connections `peer` has (0 for an unknown peer).
    pub fn peer_connections(&self, peer: PeerAddr) -> usize {
        self.peers.get(&peer).map_or(0, |p| p.conns.len())
    }

    /// Whether closing `conn` would lose nothing: it is open, nothing of
    /// ours is in flight on it, and nothing of the peer's waits on it (no
    /// rendezvous request unmatched or in transfer, no AM request
    /// unanswered).
    pub fn connection_idle(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| {
            c.idle(
                self.config.peer_rts_window.into(),
                self.config.peer_am_window.into(),
            )
        })
    }

    /// Closes one connection gracefully, leaving the peer's others: no
    /// new send goes on it, and it says Bye once nothing is in flight on
    /// it (drive `poll_transmit`). The peer goes down only if this was its
    /// last connection (then as with [`close_peer`](Self::close_peer)).
    /// A connection still in its handshake closes at once.
    pub fn close_connection(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match c.phase {
            ConnPhase::Handshaking | ConnPhase::Verifying => {
                self.close_conn(conn, ConnError::Closed);
                return;
            }
            ConnPhase::Established | ConnPhase::Detached | ConnPhase::Resuming => {}
            ConnPhase::Closing | ConnPhase::Closed => return,
        }
        if c.closing() {
            return;
        }
        let Some(peer) = c.peer else {
            return;
        };
        let others: Vec<ConnId> = self.peers.get(&peer).map_or_else(Vec::new, |p| {
            p.conns.iter().copied().filter(|c| *c != conn).collect()
        });
        let next = others.into_iter().find(|c| {
            self.conns
                .get(c)
                .is_some_and(|c| c.phase == ConnPhase::Established)
        });
        let Some(next) = next else {
            self.close_peer(peer);
            return;
        };
        if let Some(p) = self.peers.get_mut(&peer) {
            if p.send_conn == Some(conn) {
                p.send_conn = Some(next);
            }
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.phase == ConnPhase::Established {
                c.phase = ConnPhase::Closing;
            } else {
                c.resume_to = ConnPhase::Closing;
            }
        }
        self.hint(conn);
    }

    /// Drops the unexpected messages that came from `peer` (a peer gone
    /// for long, whose messages nobody received): their bytes go back to
    /// the budget and become credit for the others. How many went.
    pub fn drop_unexpected_from(&mut self, peer: PeerAddr) -> usize {
        let gone = self.remove_unexpected_if(|u| u.payload.source() == peer);
        if !gone.is_empty() {
            self.pool_dirty = true;
            self.regrant();
        }
        gone.len()
    }

    /// Forgets a peer that is down, with nothing of it in the unexpected
    /// queue: its [`PeerAddr`] is never handed out again (operations
    /// naming it fail with `Inval`, [`peer_epid`](Self::peer_epid)
    /// answers `None`), and a later connection from its epid makes a new
    /// peer. Nothing else refers to a peer with no connection: its
    /// operations were failed when it went down. `false`, and nothing
    /// done, while the peer has a connection or unexpected messages.
    pub fn forget_peer(&mut self, peer: PeerAddr) -> bool {
        let Some(p) = self.peers.get(&peer) else {
            return false;
        };
        if !p.conns.is_empty() || p.send_conn.is_some() {
            return false;
        }
        if self.matcher.any_unexpected(|u| u.payload.source() == peer) {
            return false;
        }
        let epid = p.epid;
        self.peers.remove(&peer);
        if self.by_epid.get(&epid) == Some(&peer) {
            self.by_epid.remove(&epid);
        }
        true
    }

    /// Gives back the memory an idle connection's empty queues hold, and
    /// acknowledges what it consumed, so that its peer lets go of what it
    /// keeps for resending.
    pub fn release_connection_memory(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.release_memory();
            if c.has_transport() && c.session.ack_soon() {
                self.hint(conn);
            }
        }
    }

    /// Gives back memory that maps and queues kept from a past load
    /// (peers forgotten, connections gone, the unexpected queue drained).
    pub fn release_memory(&mut self) {
        shrink_map(&mut self.peers);
        shrink_map(&mut self.by_epid);
        shrink_map(&mut self.ops);
        shrink_map(&mut self.dials);
        shrink_map(&mut self.departed);
        if self.departed_order.len() > self.departed.len() {
            let departed = &self.departed;
            self.departed_order.retain(|p| departed.contains_key(p));
        }
        if self.departed_order.capacity() > 4 * self.departed_order.len() + 64 {
            self.departed_order.shrink_to_fit();
        }
        self.prune_credit_queues();
        for q in [&mut self.credit_active, &mut self.credit_new] {
            if q.capacity() > 4 * q.len() + 64 {
                q.shrink_to_fit();
            }
        }
        if self.hints.capacity() > 4 * self.hints.len() + 64 {
            self.hints.shrink_to_fit();
        }
        self.matcher.release_memory();
    }
}

/// Most connections [`SoftCore::take_transmit_hints`] lists at once.
const MAX_HINTS: usize = 4096;

/// Shrinks a map holding far fewer entries than it has room for.
fn shrink_map<K: std::hash::Hash + Eq, V>(m: &mut Table<K, V>) {
    if m.capacity() > 4 * m.len() + 64 {
        m.shrink_to_fit();
    }
}

/// The link id a core whose link seed is `seed` gives its dialer
/// connection `conn` (never 0).
pub fn link_id(seed: u64, conn: ConnId) -> u64 {
    let mut x = seed ^ conn.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finalizer.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    x.max(1)
}

/// A random seed from the operating system.
pub(crate) fn random_seed() -> u64 {
    crate::engine::random::random_u64()
}

fn trunc(inc: &Incoming) -> Option<ErrorKind> {
    (inc.msg_len > inc.accept).then_some(ErrorKind::Trunc)
}
