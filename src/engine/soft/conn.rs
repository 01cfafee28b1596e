//! One connection's state: its handshake phase, credit in both directions,
//! the send pipeline and the rendezvous transfers it receives.
//!
//! The send pipeline of a connection is, in order:
//!
//! 1. `queued`: sends not yet on the wire, in posting order. Only the head
//!    may go next, so messages leave in the order they were posted (PSM's
//!    per-peer order). The head leaves as an Eager frame (standard mode,
//!    small enough, and eager credit for it), else as an Rts (rendezvous
//!    credit), else it waits for credit: that is the back-pressure.
//! 2. `awaiting_cts`: Rts sent, waiting for the receiver to match it.
//! 3. `streaming`: Cts received; Data chunks go out round-robin with new
//!    messages, so one large transfer does not block small ones.
//!
//! The connection never owns payload bytes of sends: it borrows them from
//! the edge ([`SendPayloads`]) while encoding a frame.

use super::protocol::{OpId, PayloadRef, SendPayloads};
use super::session::Session;
use super::shm::switch::ShmSwitch;
use super::wire::{
    encode, put_data, put_data_header, put_eager, put_eager_header, Frame, FrameLimits, Hello,
    ENTRY_OVERHEAD,
};
use crate::engine::{MqStatus, PeerAddr, SendMode};
use bytes::BytesMut;
use std::collections::{BTreeMap, VecDeque};

/// A send not yet finished.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendOp {
    pub op: OpId,
    pub tag: u64,
    pub len: u64,
    pub mode: SendMode,
}

impl SendOp {
    /// A send's success status turned into a failure of kind `error`.
    pub(super) fn failed_status(mut s: MqStatus, error: crate::ErrorKind) -> MqStatus {
        s.error = Some(error);
        s.nbytes = 0;
        s
    }

    pub(super) fn status(&self, error: Option<crate::ErrorKind>) -> MqStatus {
        let len = if error.is_some() { 0 } else { self.len };
        MqStatus {
            tag: self.tag,
            msg_len: self.len,
            nbytes: usize::try_from(len).unwrap_or(usize::MAX),
            source: None,
            error,
        }
    }
}

/// A rendezvous send whose Cts came: Data goes out from `sent`.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub send: SendOp,
    pub token: u64,
    pub accept: u64,
    pub sent: u64,
    /// A chunk went on the wire by reference: the send completes when
    /// the peer acknowledges it ([`Session`]).
    pub referenced: bool,
}

/// A rendezvous receive: the receive matched an Rts and sent a Cts.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub op: OpId,
    pub tag: u64,
    pub msg_len: u64,
    pub accept: u64,
    pub received: u64,
    pub source: PeerAddr,
    /// The message came as a PullRts and the edge is reading it from the
    /// sender's memory: the sender's id for it (`SoftCore::pull_done`).
    pub pulling: Option<u64>,
}

impl Incoming {
    pub(super) fn status(&self, error: Option<crate::ErrorKind>) -> MqStatus {
        MqStatus {
            tag: self.tag,
            msg_len: self.msg_len,
            nbytes: self.received as usize,
            source: Some(self.source),
            error,
        }
    }
}

/// A frame waiting to go out ahead of the send pipeline.
#[derive(Debug)]
pub(crate) struct Control {
    pub frame: Frame,
    /// An AM reply: its request's credit goes back once it is on the wire.
    pub returns_am_credit: bool,
}

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "hooks"), allow(unreachable_pub))]
pub enum ConnPhase {
    /// Hello / HelloAck not exchanged yet.
    Handshaking,
    /// Acceptor: the dialer's Hello and Session came; its claim to its
    /// epid is being checked before the HelloAck.
    Verifying,
    /// Messages flow.
    Established,
    /// Graceful close: no new sends; Bye goes out once everything drained.
    Closing,
    /// The transport broke; the link waits for a new one (its state and
    /// operations are kept, new ones queue).
    Detached,
    /// The dialer reconnected and asked to resume the link; waiting for
    /// the acceptor's answer.
    Resuming,
    /// Done: only a last Refuse may remain to transmit.
    Closed,
}

/// Credit counters: eager bytes, rendezvous entries, AM requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Credit {
    pub eager: u64,
    pub rts: u64,
    pub am: u64,
}

impl Credit {
    fn is_zero(&self) -> bool {
        *self == Credit::default()
    }
}

/// Which of the core's queues a connection waits in for eager credit
/// (its credit fell below three quarters of its window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CreditWait {
    /// Not waiting.
    No,
    /// Waiting, and it sent no message since it was last served: served
    /// only from what the pool holds beyond a reserve.
    New,
    /// Waiting, and it sends messages: served first.
    Active,
}

/// How a dialer or acceptor starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "hooks"), allow(unreachable_pub))]
pub enum Role {
    /// This side dialed and expects to reach `expect`.
    Dialer {
        /// The epid dialed; a HelloAck from another is refused.
        expect: crate::engine::Epid,
    },
    /// The other side dialed.
    Acceptor,
}

/// A Data frame whose payload the edge is placing itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectFrame {
    pub token: u64,
    /// Payload bytes still to come.
    pub left: usize,
    /// The whole frame's length on the wire.
    pub frame_len: u64,
    /// Where its payload starts in the message (the transfer's progress
    /// before it, to roll back to if the transport breaks mid-frame).
    pub offset: u64,
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub role: Role,
    pub phase: ConnPhase,
    /// The phase a detached or resuming connection returns to.
    pub resume_to: ConnPhase,
    pub peer: Option<PeerAddr>,
    /// Handshake frames (Hello, Session, HelloAck, Refuse): first out,
    /// outside the link's numbered stream.
    pub hs: VecDeque<Frame>,
    /// The other side's Hello or HelloAck, until its Session follows (and
    /// while its identity is checked).
    pub their_hello: Option<Hello>,
    /// Acceptor: the dialer must prove its epid before the HelloAck.
    pub verify: bool,
    /// The nonce a Proof must carry (TCP identity check).
    pub proof: Option<u64>,
    /// Dialer: the Proof answering the acceptor's Challenge is queued
    /// (one per connection).
    pub proved: bool,
    /// The job-secret challenge this side sent (its proof is awaited).
    pub auth_sent: Option<[u8; 16]>,
    /// The other side proved the job secret.
    pub authed: bool,
    /// Acceptor: the dialer's Session, held until it proves the secret.
    pub pending_session: Option<super::protocol::SessionFields>,
    /// The link: positions, acknowledgements, what to send again.
    pub session: Session,
    pub control: VecDeque<Control>,
    /// What we may send to the peer (its limits and ours, whichever is
    /// smaller); set by the handshake.
    pub send_limits: FrameLimits,
    /// Credit the peer gave us to spend.
    pub tx: Credit,
    /// Credit we gave the peer that it has not spent.
    pub rx: Credit,
    /// Credit given but not yet transmitted (part of `rx` already).
    pub give: Credit,
    pub next_msg_id: u64,
    pub queued: VecDeque<SendOp>,
    pub awaiting_cts: BTreeMap<u64, SendOp>,
    pub streaming: VecDeque<Outgoing>,
    pub next_token: u64,
    pub incoming: BTreeMap<u64, Incoming>,
    /// A Data frame whose payload the edge is placing itself
    /// (`SoftCore::take_direct`).
    pub direct: Option<DirectFrame>,
    /// The credit queue it waits in.
    pub credit_wait: CreditWait,
    /// Moving the link onto shared memory (`shm::switch`); fresh for
    /// each transport.
    pub shm: ShmSwitch,
    /// Single copy over this transport (`SoftCore::set_pull`): large sends
    /// go as PullRts with their buffer's address, and a PullRts that comes
    /// is read from the sender's memory. Off for each new transport.
    pub pull: bool,
}

/// Why transmitting stopped early.
pub(crate) struct MissingPayload(pub OpId);

/// Rendezvous messages at least this long go as PullRts where the
/// transport allows single copies (`Conn::pull`).
pub(crate) const PULL_MIN: u64 = 32 << 10;

/// Payloads at least this long are referred to, not copied, by a
/// vectored transmit.
pub(crate) const MIN_REFERENCED: usize = 4096;

/// Where `transmit` puts frames: the output buffer and, for a vectored
/// transmit, the list of send payloads that belong between its bytes.
pub(crate) struct Sink<'a> {
    pub out: &'a mut BytesMut,
    pub refs: Option<&'a mut Vec<PayloadRef>>,
    /// Payload bytes referred to by `refs` entries pushed so far.
    pub referenced: usize,
}

impl Sink<'_> {
    /// Bytes of the batch: encoded plus referred to.
    pub(super) fn len(&self) -> usize {
        self.out.len() + self.referenced
    }

    /// Whether a payload this long goes by reference.
    fn refers(&self, len: usize) -> bool {
        self.refs.is_some() && len >= MIN_REFERENCED
    }

    /// Records that `range` of send `op`'s buffer goes here on the wire.
    fn refer(&mut self, op: OpId, range: std::ops::Range<usize>) {
        if let Some(refs) = self.refs.as_deref_mut() {
            self.referenced += range.len();
            refs.push(PayloadRef {
                at: self.out.len(),
                op,
                range,
            });
        }
    }

    fn eager(&mut self, op: OpId, tag: u64, payload: &[u8]) {
        if self.refers(payload.len()) {
            put_eager_header(self.out, tag, payload.len());
            self.refer(op, 0..payload.len());
        } else {
            put_eager(self.out, tag, payload);
        }
    }

    fn data(&mut self, op: OpId, token: u64, offset: u64, payload: &[u8], start: usize) {
        if self.refers(payload.len()) {
            put_data_header(self.out, token, offset, payload.len());
            self.refer(op, start..start + payload.len());
        } else {
            put_data(self.out, token, offset, payload);
        }
    }
}

impl Conn {
    pub(super) fn new(role: Role, send_limits: FrameLimits, session: Session) -> Conn {
        Conn {
            role,
            phase: ConnPhase::Handshaking,
            resume_to: ConnPhase::Established,
            peer: None,
            hs: VecDeque::new(),
            their_hello: None,
            verify: false,
            proof: None,
            proved: false,
            auth_sent: None,
            authed: false,
            pending_session: None,
            session,
            control: VecDeque::new(),
            send_limits,
            tx: Credit::default(),
            rx: Credit::default(),
            give: Credit::default(),
            next_msg_id: 0,
            queued: VecDeque::new(),
            awaiting_cts: BTreeMap::new(),
            streaming: VecDeque::new(),
            next_token: 0,
            incoming: BTreeMap::new(),
            direct: None,
            credit_wait: CreditWait::No,
            shm: ShmSwitch::default(),
            pull: false,
        }
    }

    /// Past the handshake and not closed: the link stands (with or
    /// without a transport right now).
    pub(super) fn is_open(&self) -> bool {
        matches!(
            self.phase,
            ConnPhase::Established | ConnPhase::Closing | ConnPhase::Detached | ConnPhase::Resuming
        )
    }

    /// The link stands and has a transport: frames flow.
    pub(super) fn has_transport(&self) -> bool {
        matches!(self.phase, ConnPhase::Established | ConnPhase::Closing)
    }

    /// Whether the connection is closing (or will be, once resumed).
    pub(super) fn closing(&self) -> bool {
        self.phase == ConnPhase::Closing
            || (matches!(self.phase, ConnPhase::Detached | ConnPhase::Resuming)
                && self.resume_to == ConnPhase::Closing)
    }

    /// The transport broke mid-frame: a Data payload being placed is
    /// rolled back to its frame's start (it comes again whole).
    pub(super) fn roll_back_direct(&mut self) {
        if let Some(d) = self.direct.take() {
            if let Some(inc) = self.incoming.get_mut(&d.token) {
                inc.received = d.offset;
            }
        }
    }

    /// Nothing in flight either way and nothing of the peer's waiting
    /// here: no rendezvous request unmatched or in transfer, no AM request
    /// unanswered (the peer holds all the credit of both `windows`).
    /// Closing such a connection loses nothing.
    pub(super) fn idle(&self, rts_window: u64, am_window: u64) -> bool {
        self.is_open()
            && self.drained()
            && self.direct.is_none()
            && self.rx.rts >= rts_window
            && self.rx.am >= am_window
    }

    /// Gives back the memory of queues that are empty (an idle
    /// connection keeps none).
    pub(super) fn release_memory(&mut self) {
        if self.control.is_empty() {
            self.control = VecDeque::new();
        }
        if self.queued.is_empty() {
            self.queued = VecDeque::new();
        }
        if self.streaming.is_empty() {
            self.streaming = VecDeque::new();
        }
        self.session.release_memory();
    }

    /// Nothing in flight either way: a closing connection may say Bye.
    pub(super) fn drained(&self) -> bool {
        self.control.is_empty()
            && self.queued.is_empty()
            && self.awaiting_cts.is_empty()
            && self.streaming.is_empty()
            && self.incoming.is_empty()
            && !self.session.has_deferred()
    }

    fn eager_charge(&self, s: &SendOp) -> Option<u64> {
        let eager = s.mode == SendMode::Standard && s.len <= u64::from(self.send_limits.max_eager);
        let charge = s.len + ENTRY_OVERHEAD;
        (eager && self.tx.eager >= charge).then_some(charge)
    }

    fn head_can_go(&self) -> bool {
        !self.session.log_full()
            && self
                .queued
                .front()
                .is_some_and(|s| self.tx.rts > 0 || self.eager_charge(s).is_some())
    }

    pub(super) fn wants_transmit(&self) -> bool {
        match self.phase {
            ConnPhase::Handshaking
            | ConnPhase::Verifying
            | ConnPhase::Closed
            | ConnPhase::Detached
            | ConnPhase::Resuming => !self.hs.is_empty(),
            ConnPhase::Established | ConnPhase::Closing if self.shm.output_paused => false,
            ConnPhase::Established | ConnPhase::Closing => {
                !self.hs.is_empty()
                    || !self.control.is_empty()
                    || !self.give.is_zero()
                    || self.head_can_go()
                    || !self.streaming.is_empty()
                    || self.session.wants_ack()
                    || self.session.replay_due()
                    || (self.phase == ConnPhase::Closing && self.drained())
            }
        }
    }

    /// Returns credit to the peer (counted as held by it from now on).
    pub(super) fn grant(&mut self, c: Credit) {
        self.rx.eager += c.eager;
        self.rx.rts += c.rts;
        self.rx.am += c.am;
        self.give.eager += c.eager;
        self.give.rts += c.rts;
        self.give.am += c.am;
    }

    /// Appends frames to the sink while it holds less than `limit` bytes:
    /// handshake frames, then (with a transport) the replay of a resumed
    /// link, control frames (always, they are few), pending credit, new
    /// messages and Data chunks in turn, and an acknowledgement of what
    /// was consumed. What enters the link's stream is recorded in its
    /// log. Finished sends are pushed to `done`.
    pub(super) fn transmit(
        &mut self,
        out: &mut Sink<'_>,
        limit: usize,
        payloads: &dyn SendPayloads,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), MissingPayload> {
        if self.shm.output_paused {
            // Our ShmSwitch is the last thing for the socket; the rest
            // waits for the edge to write to the segment.
            return Ok(());
        }
        while let Some(f) = self.hs.pop_front() {
            encode(&f, out.out);
            if f == Frame::ShmSwitch {
                self.shm.switch_sent();
                return Ok(());
            }
        }
        if !self.has_transport() {
            return Ok(());
        }
        if self.session.replay_due() {
            let referring = out.refs.is_some();
            let mut refs = out.refs.as_deref_mut();
            let mut added = 0;
            let replayed = self.session.replay(
                out.out,
                |o, op, range| match refs.as_deref_mut() {
                    Some(r) if referring && range.len() >= MIN_REFERENCED => {
                        added += range.len();
                        r.push(PayloadRef {
                            at: o.len(),
                            op,
                            range,
                        });
                        true
                    }
                    _ => false,
                },
                payloads,
            );
            out.referenced += added;
            replayed.map_err(MissingPayload)?;
        }
        let mark = (out.out.len(), out.refs.as_ref().map_or(0, |r| r.len()));
        self.session.begin_batch(mark.0, out.referenced);
        let result = self.transmit_stream(out, limit, payloads, done);
        if out.out.len() > mark.0 || self.session.wants_ack() {
            if let Some(ack) = self.session.take_ack() {
                encode(&ack, out.out);
            }
        }
        let refs = out.refs.as_deref().map_or(&[][..], |r| &r[mark.1..]);
        self.session.record(&out.out[mark.0..], mark.0, refs, done);
        result
    }

    /// The numbered part of a transmit (see [`transmit`](Self::transmit)).
    fn transmit_stream(
        &mut self,
        out: &mut Sink<'_>,
        limit: usize,
        payloads: &dyn SendPayloads,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), MissingPayload> {
        while let Some(c) = self.control.pop_front() {
            encode(&c.frame, out.out);
            if c.returns_am_credit {
                self.grant(Credit {
                    am: 1,
                    ..Credit::default()
                });
            }
        }
        while !self.give.is_zero() {
            let rts = self.give.rts.min(u64::from(u32::MAX));
            let am = self.give.am.min(u64::from(u32::MAX));
            encode(
                &Frame::Credit {
                    eager_bytes: self.give.eager,
                    rts: rts as u32,
                    am: am as u32,
                },
                out.out,
            );
            self.give = Credit {
                eager: 0,
                rts: self.give.rts - rts,
                am: self.give.am - am,
            };
        }
        while out.len() < limit {
            let mut progressed = false;
            if self.head_can_go() {
                self.initiate(out, payloads, done)?;
                progressed = true;
            }
            if out.len() < limit {
                if let Some(o) = self.streaming.pop_front() {
                    self.chunk(o, out, payloads, done)?;
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        Ok(())
    }

    fn payload<'p>(s: &SendOp, payloads: &'p dyn SendPayloads) -> Result<&'p [u8], MissingPayload> {
        match payloads.payload(s.op) {
            Some(p) if p.len() as u64 == s.len => Ok(p),
            _ => Err(MissingPayload(s.op)),
        }
    }

    fn initiate(
        &mut self,
        out: &mut Sink<'_>,
        payloads: &dyn SendPayloads,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), MissingPayload> {
        let Some(s) = self.queued.front().copied() else {
            return Ok(());
        };
        let p = Self::payload(&s, payloads)?;
        self.queued.pop_front();
        if let Some(charge) = self.eager_charge(&s) {
            self.tx.eager -= charge;
            let referenced = out.refers(p.len());
            out.eager(s.op, s.tag, p);
            if referenced {
                self.session
                    .defer(s.op, s.status(None), out.out.len(), out.referenced);
            } else {
                done.push((s.op, s.status(None)));
            }
        } else {
            self.tx.rts -= 1;
            let msg_id = self.next_msg_id;
            self.next_msg_id += 1;
            let frame = if self.pull && s.len >= PULL_MIN {
                // The buffer stays where it is until the send completes,
                // which only the peer's Pulled (or its Cts and the Data
                // that follow) can bring about.
                Frame::PullRts {
                    msg_id,
                    tag: s.tag,
                    len: s.len,
                    addr: p.as_ptr() as u64,
                }
            } else {
                Frame::Rts {
                    msg_id,
                    tag: s.tag,
                    len: s.len,
                }
            };
            encode(&frame, out.out);
            self.awaiting_cts.insert(msg_id, s);
        }
        Ok(())
    }

    fn chunk(
        &mut self,
        mut o: Outgoing,
        out: &mut Sink<'_>,
        payloads: &dyn SendPayloads,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), MissingPayload> {
        let p = match Self::payload(&o.send, payloads) {
            Ok(p) => p,
            Err(e) => {
                self.streaming.push_front(o);
                return Err(e);
            }
        };
        let n = (o.accept - o.sent).min(u64::from(self.send_limits.max_chunk));
        let start = o.sent as usize;
        o.referenced |= out.refers(n as usize);
        out.data(
            o.send.op,
            o.token,
            o.sent,
            &p[start..start + n as usize],
            start,
        );
        o.sent += n;
        if o.sent == o.accept {
            if o.referenced {
                self.session.defer(
                    o.send.op,
                    o.send.status(None),
                    out.out.len(),
                    out.referenced,
                );
            } else {
                done.push((o.send.op, o.send.status(None)));
            }
        } else {
            self.streaming.push_back(o);
        }
        Ok(())
    }

    /// Queues the Cts that lets the peer send `len` bytes of message
    /// `msg_id` as transfer `token`.
    pub(super) fn push_cts(&mut self, msg_id: u64, token: u64, len: u64) {
        self.control.push_back(Control {
            frame: Frame::Cts { msg_id, token, len },
            returns_am_credit: false,
        });
    }

    /// The send a Cts or Pulled answers (`msg_id`, taking `len` bytes of
    /// it), out of the ones awaiting an answer.
    pub(super) fn answered(
        &mut self,
        msg_id: u64,
        len: u64,
    ) -> Result<SendOp, super::protocol::Violation> {
        use super::protocol::Violation;
        let send = self
            .awaiting_cts
            .remove(&msg_id)
            .ok_or(Violation::UnknownMsgId(msg_id))?;
        if len > send.len {
            return Err(Violation::CtsTooLong {
                accept: len,
                len: send.len,
            });
        }
        Ok(send)
    }

    /// Every operation of the connection, for failing them; leaves the
    /// pipeline empty.
    pub(super) fn take_ops(&mut self, error: crate::ErrorKind) -> Vec<(OpId, MqStatus)> {
        let mut v: Vec<(OpId, MqStatus)> = Vec::new();
        v.extend(self.queued.drain(..).map(|s| (s.op, s.status(Some(error)))));
        let awaiting = std::mem::take(&mut self.awaiting_cts);
        v.extend(
            awaiting
                .into_values()
                .map(|s| (s.op, s.status(Some(error)))),
        );
        v.extend(
            self.streaming
                .drain(..)
                .map(|o| (o.send.op, o.send.status(Some(error)))),
        );
        let incoming = std::mem::take(&mut self.incoming);
        v.extend(
            incoming
                .into_values()
                .map(|i| (i.op, i.status(Some(error)))),
        );
        // Sent, but never acknowledged: the peer may not have them.
        v.extend(
            self.session
                .take_deferred()
                .into_iter()
                .map(|(op, s)| (op, SendOp::failed_status(s, error))),
        );
        v
    }
}
