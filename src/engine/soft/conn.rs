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
use super::wire::{
    encode, put_data, put_data_header, put_eager, put_eager_header, Frame, FrameLimits,
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
    pub fn status(&self, error: Option<crate::ErrorKind>) -> MqStatus {
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
}

impl Incoming {
    pub fn status(&self, error: Option<crate::ErrorKind>) -> MqStatus {
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
pub enum ConnPhase {
    /// Hello / HelloAck not exchanged yet.
    Handshaking,
    /// Messages flow.
    Established,
    /// Graceful close: no new sends; Bye goes out once everything drained.
    Closing,
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
pub enum Role {
    /// This side dialed and expects to reach `expect`.
    Dialer {
        /// The epid dialed; a HelloAck from another is refused.
        expect: crate::engine::Epid,
    },
    /// The other side dialed.
    Acceptor,
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub role: Role,
    pub phase: ConnPhase,
    pub peer: Option<PeerAddr>,
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
    /// (`SoftCore::take_direct`): its token and the bytes still to come.
    pub direct: Option<(u64, usize)>,
    /// The credit queue it waits in.
    pub credit_wait: CreditWait,
}

/// Why transmitting stopped early.
pub(crate) struct MissingPayload(pub OpId);

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
    pub fn len(&self) -> usize {
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
    pub fn new(role: Role, send_limits: FrameLimits) -> Conn {
        Conn {
            role,
            phase: ConnPhase::Handshaking,
            peer: None,
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
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self.phase, ConnPhase::Established | ConnPhase::Closing)
    }

    /// Nothing in flight either way and nothing of the peer's waiting
    /// here: no rendezvous request unmatched or in transfer, no AM request
    /// unanswered (the peer holds all the credit of both `windows`).
    /// Closing such a connection loses nothing.
    pub fn idle(&self, rts_window: u64, am_window: u64) -> bool {
        self.is_open()
            && self.drained()
            && self.direct.is_none()
            && self.rx.rts >= rts_window
            && self.rx.am >= am_window
    }

    /// Gives back the memory of queues that are empty (an idle
    /// connection keeps none).
    pub fn release_memory(&mut self) {
        if self.control.is_empty() {
            self.control = VecDeque::new();
        }
        if self.queued.is_empty() {
            self.queued = VecDeque::new();
        }
        if self.streaming.is_empty() {
            self.streaming = VecDeque::new();
        }
    }

    /// Nothing in flight either way: a closing connection may say Bye.
    pub fn drained(&self) -> bool {
        self.control.is_empty()
            && self.queued.is_empty()
            && self.awaiting_cts.is_empty()
            && self.streaming.is_empty()
            && self.incoming.is_empty()
    }

    fn eager_charge(&self, s: &SendOp) -> Option<u64> {
        let eager = s.mode == SendMode::Standard && s.len <= u64::from(self.send_limits.max_eager);
        let charge = s.len + ENTRY_OVERHEAD;
        (eager && self.tx.eager >= charge).then_some(charge)
    }

    fn head_can_go(&self) -> bool {
        self.queued
            .front()
            .is_some_and(|s| self.tx.rts > 0 || self.eager_charge(s).is_some())
    }

    pub fn wants_transmit(&self) -> bool {
        match self.phase {
            ConnPhase::Handshaking | ConnPhase::Closed => !self.control.is_empty(),
            ConnPhase::Established | ConnPhase::Closing => {
                !self.control.is_empty()
                    || !self.give.is_zero()
                    || self.head_can_go()
                    || !self.streaming.is_empty()
                    || (self.phase == ConnPhase::Closing && self.drained())
            }
        }
    }

    /// Returns credit to the peer (counted as held by it from now on).
    pub fn grant(&mut self, c: Credit) {
        self.rx.eager += c.eager;
        self.rx.rts += c.rts;
        self.rx.am += c.am;
        self.give.eager += c.eager;
        self.give.rts += c.rts;
        self.give.am += c.am;
    }

    /// Appends frames to the sink while it holds less than `limit` bytes:
    /// control frames (always, they are few), pending credit, then new
    /// messages and Data chunks in turn. Finished sends are pushed to
    /// `done`.
    pub fn transmit(
        &mut self,
        out: &mut Sink<'_>,
        limit: usize,
        payloads: &dyn SendPayloads,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), MissingPayload> {
        while let Some(c) = self.control.pop_front() {
            encode(&c.frame, out.out);
            if c.returns_am_credit && self.is_open() {
                self.grant(Credit {
                    am: 1,
                    ..Credit::default()
                });
            }
        }
        if !self.is_open() {
            return Ok(());
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
            out.eager(s.op, s.tag, p);
            done.push((s.op, s.status(None)));
        } else {
            self.tx.rts -= 1;
            let msg_id = self.next_msg_id;
            self.next_msg_id += 1;
            encode(
                &Frame::Rts {
                    msg_id,
                    tag: s.tag,
                    len: s.len,
                },
                out.out,
            );
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
        out.data(
            o.send.op,
            o.token,
            o.sent,
            &p[start..start + n as usize],
            start,
        );
        o.sent += n;
        if o.sent == o.accept {
            done.push((o.send.op, o.send.status(None)));
        } else {
            self.streaming.push_back(o);
        }
        Ok(())
    }

    /// Every operation of the connection, for failing them; leaves the
    /// pipeline empty.
    pub fn take_ops(&mut self, error: crate::ErrorKind) -> Vec<(OpId, MqStatus)> {
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
        v
    }
}
