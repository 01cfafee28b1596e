//! [`Core`]: the AM message protocol as a pure state machine (no engine, no
//! locks, no clock).
//!
//! One core serves one endpoint, both as sender and as receiver. Inputs:
//! posted sends and receives ([`Core::post_send`], [`Core::post_recv`]),
//! cancels, incoming packets ([`Core::handle`], which may answer with a
//! reply), and the outcome of each packet it asked to send
//! ([`Core::transmitted`]). Outputs: packets to send as AM requests
//! ([`Core::poll_transmit`]), replies (returned by `handle`), copies into the
//! receive buffers it owns, and completions ([`Core::pop_completion`]).
//!
//! # Protocol (packets in `wire.rs`)
//! 1. The sender sends `First`: its id, the total length and the first
//!    `min(total, chunk)` bytes.
//! 2. The receiver matches it against its posted receives (FIFO, first
//!    match wins, a directed receive only matches its peer). Matched, it
//!    copies the first bytes and accepts `min(total, buffer)` bytes. If it
//!    has them all it answers `Done` (the receive completes, `Trunc` if the
//!    message was longer); otherwise it answers `Go` with its own id and the
//!    accepted length. Unmatched, the message is queued *unexpected* with
//!    its first chunk only: a whole message is answered `Done` at once (the
//!    sender's buffer is free), a longer one waits at the sender until a
//!    receive matches, which then sends `Go` (or `Done`, when it takes no
//!    more than the first chunk) as a request.
//! 3. On `Go` the sender streams `Data` packets up to the accepted length,
//!    from progress (never from inside a handler).
//! 4. The receiver checks each `Data` (its id, the peer, the sender's id,
//!    the offset equal to what it has, the end within what it accepted),
//!    copies it, and answers `Done` to the one that completes the receive.
//! 5. `Done` completes the send. Sends complete only when the receiver
//!    holds every byte it accepted; a truncated receive still completes its
//!    send successfully.
//!
//! The two C bugs (`prov/psm/src/psmx_msg2.c`: the first packet and the
//! continuation copied past the receive buffer) cannot happen here: every
//! copy is bounded by the accepted length, itself at most the receive
//! buffer.
//!
//! # Order and memory
//! `First` packets leave in posting order (a refused one, `Again`, goes
//! back to the front), and the engine delivers one peer's requests in
//! order, so a peer's messages match receives in the order they were sent.
//! An unexpected message holds only its first chunk (at most the engine's
//! `max_am_request` bytes); the rest stays in the sender's buffer until a
//! receive matches.
//!
//! # Hostile input
//! A packet that does not decode, names no live request, comes from
//! another peer than the request's, arrives in the wrong state, or carries
//! an offset or length outside what was accepted is dropped with a
//! `tracing` warning and counted ([`CoreStats::dropped`]); nothing else
//! changes.
//!
//! # Buffers lent while sending
//! [`Core::poll_transmit`] lends the send buffer to the caller for the
//! engine call and gets it back in [`Core::transmitted`], so no lock needs
//! to be held across the engine (whose handlers call back into the core).
//! An answer that arrives while the buffer is out (the engine may run
//! handlers inside `am_request`) is applied at once; a completion waits for
//! the buffer to come back.

use super::ids::{id_slab, IdSlab};
use super::wire::{Args, Packet};
use crate::engine::{MqCompletion, MqStatus, OpBuffer, PeerAddr, PostError};
use crate::proto::peer_watch::peer_gone;
use crate::reactor::OpKey;
use crate::{Error, ErrorKind, Result};
use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;

/// Sizes a [`Core`] works with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoreConfig {
    /// Payload bytes per packet (the engine's `max_am_request`); at least 1.
    pub chunk: usize,
    /// Largest message (the engine's `max_message`).
    pub max_message: u64,
    /// Seed for the request ids' generations (random per endpoint).
    pub salt: u32,
}

/// Whether an incoming packet came as an AM request or a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A request (may be answered).
    Request,
    /// A reply (cannot be answered).
    Reply,
}

/// What a core holds, for statistics, tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CoreStats {
    /// Packets dropped as malformed, stale or hostile.
    pub dropped: u64,
    /// Unexpected messages waiting for a receive.
    pub unexpected: usize,
    /// The bytes they hold (each its first chunk).
    pub unexpected_bytes: u64,
    /// Posted receives not matched yet.
    pub posted: usize,
    /// Sends not completed yet.
    pub sends: usize,
    /// Matched receives still getting data.
    pub receiving: usize,
    /// Completions not popped yet.
    pub completions: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendPhase {
    /// `First` not sent yet.
    Queued,
    /// `First` sent; more bytes than it carried: waiting for `Go` (or a
    /// `Done` from a receiver that needs no more).
    AwaitGo,
    /// `Data` for `[next, end)` still to send.
    Streaming { next: usize, end: usize },
    /// Everything the receiver wants is sent: waiting for `Done`.
    AwaitDone,
}

struct SendOp {
    peer: PeerAddr,
    key: OpKey,
    total: usize,
    /// `None` while lent to the caller of `poll_transmit`.
    buffer: Option<OpBuffer>,
    phase: SendPhase,
    /// The receiver's id, from `Go`.
    recv: u64,
    /// The outcome, once known while the buffer was lent.
    finish: Option<Option<ErrorKind>>,
}

struct Posted {
    from: Option<PeerAddr>,
    key: OpKey,
    buffer: OpBuffer,
}

struct RecvOp {
    peer: PeerAddr,
    send: u64,
    key: OpKey,
    buffer: OpBuffer,
    total: u64,
    accept: usize,
    received: usize,
}

struct Unexpected {
    peer: PeerAddr,
    send: u64,
    total: u64,
    data: Vec<u8>,
}

/// A request the receiver side must send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    Go { recv: u64 },
    Done { peer: PeerAddr, send: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    First {
        send: u64,
    },
    Data {
        send: u64,
        offset: usize,
        len: usize,
    },
    Control(Control),
}

/// One AM request to send: give it to the engine, then back to
/// [`Core::transmitted`] with the outcome.
pub(crate) struct Transmit {
    peer: PeerAddr,
    args: Args,
    what: What,
    lent: Option<OpBuffer>,
    range: Range<usize>,
}

impl fmt::Debug for Transmit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transmit")
            .field("peer", &self.peer)
            .field("what", &self.what)
            .field("payload", &self.range.len())
            .finish()
    }
}

impl Transmit {
    /// The destination.
    pub(crate) fn peer(&self) -> PeerAddr {
        self.peer
    }

    /// The request's arguments.
    pub(crate) fn args(&self) -> &[u64] {
        self.args.as_slice()
    }

    /// The request's payload (a window of the lent send buffer).
    pub(crate) fn payload(&self) -> &[u8] {
        self.lent
            .as_ref()
            .and_then(|b| b.as_slice().get(self.range.clone()))
            .unwrap_or(&[])
    }
}

enum Delivered {
    /// The receive completed.
    Complete,
    /// It needs `[received, accept)` from the sender.
    More { recv: u64, accept: usize },
}

/// One endpoint's AM message protocol (module docs).
pub(crate) struct Core {
    chunk: usize,
    max_message: u64,
    sends: IdSlab<SendOp>,
    recvs: IdSlab<RecvOp>,
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Unexpected>,
    control: VecDeque<Control>,
    firsts: VecDeque<u64>,
    streams: VecDeque<u64>,
    done: VecDeque<(OpKey, MqCompletion)>,
    dropped: u64,
    /// A [`Transmit`] is out (one at a time: its buffer is lent).
    outstanding: bool,
}

impl Core {
    /// An idle core.
    pub(crate) fn new(config: CoreConfig) -> Core {
        Core {
            chunk: config.chunk.max(1),
            max_message: config.max_message,
            sends: id_slab(config.salt),
            recvs: id_slab(config.salt.rotate_left(16) ^ 0x5a5a_5a5a),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            control: VecDeque::new(),
            firsts: VecDeque::new(),
            streams: VecDeque::new(),
            done: VecDeque::new(),
            dropped: 0,
            outstanding: false,
        }
    }

    /// Payload bytes per packet.
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn chunk(&self) -> usize {
        self.chunk
    }

    /// What the core holds.
    pub(crate) fn stats(&self) -> CoreStats {
        CoreStats {
            dropped: self.dropped,
            unexpected: self.unexpected.len(),
            unexpected_bytes: self.unexpected.iter().map(|u| u.data.len() as u64).sum(),
            posted: self.posted.len(),
            sends: self.sends.len(),
            receiving: self.recvs.len(),
            completions: self.done.len(),
        }
    }

    // ----- posting -------------------------------------------------------------

    /// Queues a send of `buffer` to `peer`, completing into `key`.
    /// `MsgSize` beyond the largest message.
    pub(crate) fn post_send(
        &mut self,
        peer: PeerAddr,
        buffer: OpBuffer,
        key: OpKey,
    ) -> std::result::Result<(), PostError> {
        let total = buffer.len();
        if total as u64 > self.max_message {
            let error = Error::new(
                ErrorKind::MsgSize,
                format!(
                    "AM message send of {total} bytes: the engine carries at most {}",
                    self.max_message
                ),
            );
            return Err(PostError { error, buffer });
        }
        let id = match self.sends.insert(SendOp {
            peer,
            key,
            total,
            buffer: Some(buffer),
            phase: SendPhase::Queued,
            recv: 0,
            finish: None,
        }) {
            Ok(id) => id,
            Err(op) => {
                let error = Error::new(ErrorKind::Again, "AM message: too many sends in flight");
                let buffer = op.buffer.unwrap_or_else(OpBuffer::empty);
                return Err(PostError { error, buffer });
            }
        };
        self.firsts.push_back(id);
        Ok(())
    }

    /// Posts a receive into `buffer` (from `from` only, if given),
    /// completing into `key`. The oldest matching unexpected message is
    /// taken at once. `Inval` for a read-only buffer.
    pub(crate) fn post_recv(
        &mut self,
        from: Option<PeerAddr>,
        mut buffer: OpBuffer,
        key: OpKey,
    ) -> std::result::Result<(), PostError> {
        if buffer.as_mut_slice().is_none() {
            let error = Error::new(
                ErrorKind::Inval,
                "AM message receive: the buffer is read-only (shared Bytes); give a Vec or BytesMut",
            );
            return Err(PostError { error, buffer });
        }
        let found = self
            .unexpected
            .iter()
            .position(|u| from.is_none_or(|f| f == u.peer));
        let Some(u) = found.and_then(|i| self.unexpected.remove(i)) else {
            self.posted.push_back(Posted { from, key, buffer });
            return Ok(());
        };
        let whole = u.data.len() as u64 == u.total;
        match self.deliver(u.peer, u.send, u.total, &u.data, key, buffer) {
            // A whole message was answered `Done` when it arrived.
            Delivered::Complete if whole => {}
            Delivered::Complete => self.control.push_back(Control::Done {
                peer: u.peer,
                send: u.send,
            }),
            Delivered::More { recv, .. } => self.control.push_back(Control::Go { recv }),
        }
        Ok(())
    }

    /// Cancels the posted receive `key` if it has not matched: it completes
    /// with `Canceled` and its buffer. `false` otherwise (matched, done, a
    /// send, unknown).
    pub(crate) fn cancel(&mut self, key: OpKey) -> bool {
        let Some(p) = self
            .posted
            .iter()
            .position(|p| p.key == key)
            .and_then(|i| self.posted.remove(i))
        else {
            return false;
        };
        self.done.push_back((
            p.key,
            MqCompletion {
                status: MqStatus::failed(0, ErrorKind::Canceled),
                buffer: p.buffer,
            },
        ));
        true
    }

    /// Fails every transfer with `peer` with `kind`: its sends, the
    /// receives getting data from it, the receives posted for it alone
    /// (directed); its unexpected messages are dropped. Receives from any
    /// source stay posted.
    pub(crate) fn fail_peer(&mut self, peer: PeerAddr, kind: ErrorKind) {
        for id in self.sends.ids_where(|op| op.peer == peer) {
            self.finish_send(id, Some(kind));
        }
        for id in self.recvs.ids_where(|op| op.peer == peer) {
            if let Some(op) = self.recvs.remove(id) {
                self.complete_recv(op.key, op.buffer, peer, op.total, op.received, Some(kind));
            }
        }
        let mut i = 0;
        while i < self.posted.len() {
            if self.posted[i].from != Some(peer) {
                i += 1;
                continue;
            }
            if let Some(p) = self.posted.remove(i) {
                self.complete_recv(p.key, p.buffer, peer, 0, 0, Some(kind));
            }
        }
        self.unexpected.retain(|u| u.peer != peer);
        self.control
            .retain(|c| !matches!(c, Control::Done { peer: p, .. } if *p == peer));
    }

    /// Appends the peers this core waits for: those of its sends, of the
    /// receives getting data, and of directed posted receives.
    pub(crate) fn outstanding_peers(&self, out: &mut Vec<PeerAddr>) {
        out.extend(self.sends.values().map(|op| op.peer));
        out.extend(self.recvs.values().map(|op| op.peer));
        out.extend(self.posted.iter().filter_map(|p| p.from));
    }

    /// Queues `reply` (from [`handle`](Self::handle)) to be sent to `peer`
    /// as a request instead, when the engine could not send it as a reply.
    pub(crate) fn defer_reply(&mut self, peer: PeerAddr, reply: Args) {
        match Packet::decode(reply.as_slice()) {
            Ok(Packet::Go { recv, .. }) => self.control.push_back(Control::Go { recv }),
            Ok(Packet::Done { send }) => self.control.push_back(Control::Done { peer, send }),
            _ => {}
        }
    }

    /// The next completion: the key to complete and its value.
    pub(crate) fn pop_completion(&mut self) -> Option<(OpKey, MqCompletion)> {
        self.done.pop_front()
    }

    // ----- sending -------------------------------------------------------------

    /// The next request to send, lending a send buffer if it has a payload:
    /// receiver-side requests first, then first chunks in posting order,
    /// then (if `data`) one chunk of a stream, round robin. One at a time:
    /// `None` until the last one came back through
    /// [`transmitted`](Self::transmitted).
    pub(crate) fn poll_transmit(&mut self, data: bool) -> Option<Transmit> {
        if self.outstanding {
            return None;
        }
        let t = self.next_transmit(data);
        self.outstanding = t.is_some();
        t
    }

    fn next_transmit(&mut self, data: bool) -> Option<Transmit> {
        while let Some(c) = self.control.pop_front() {
            let (peer, packet) = match c {
                Control::Go { recv } => {
                    let Some(op) = self.recvs.get(recv) else {
                        continue;
                    };
                    let go = Packet::Go {
                        send: op.send,
                        recv,
                        accept: op.accept as u64,
                    };
                    (op.peer, go)
                }
                Control::Done { peer, send } => (peer, Packet::Done { send }),
            };
            return Some(Transmit {
                peer,
                args: packet.encode(),
                what: What::Control(c),
                lent: None,
                range: 0..0,
            });
        }
        let chunk = self.chunk;
        while let Some(send) = self.firsts.pop_front() {
            let Some(op) = self.sends.get_mut(send) else {
                continue;
            };
            if op.phase != SendPhase::Queued || op.finish.is_some() {
                continue;
            }
            let Some(buffer) = op.buffer.take() else {
                continue;
            };
            let n = op.total.min(chunk);
            op.phase = if n == op.total {
                SendPhase::AwaitDone
            } else {
                SendPhase::AwaitGo
            };
            let first = Packet::First {
                send,
                total: op.total as u64,
            };
            return Some(Transmit {
                peer: op.peer,
                args: first.encode(),
                what: What::First { send },
                lent: Some(buffer),
                range: 0..n,
            });
        }
        if !data {
            return None;
        }
        while let Some(send) = self.streams.pop_front() {
            let Some(op) = self.sends.get_mut(send) else {
                continue;
            };
            let SendPhase::Streaming { next, end } = op.phase else {
                continue;
            };
            if op.finish.is_some() {
                continue;
            }
            let Some(buffer) = op.buffer.take() else {
                continue;
            };
            let len = (end - next).min(chunk);
            op.phase = if next + len == end {
                SendPhase::AwaitDone
            } else {
                SendPhase::Streaming {
                    next: next + len,
                    end,
                }
            };
            let packet = Packet::Data {
                recv: op.recv,
                send,
                offset: next as u64,
            };
            return Some(Transmit {
                peer: op.peer,
                args: packet.encode(),
                what: What::Data {
                    send,
                    offset: next,
                    len,
                },
                lent: Some(buffer),
                range: next..next + len,
            });
        }
        None
    }

    /// The engine's answer to `t`: `Again` puts it back at the front of its
    /// queue; an error that says the peer is gone fails every transfer with
    /// it; any other error fails the one operation.
    pub(crate) fn transmitted(&mut self, t: Transmit, result: Result<()>) {
        let Transmit {
            peer, what, lent, ..
        } = t;
        self.outstanding = false;
        let again = matches!(&result, Err(e) if e.kind() == ErrorKind::Again);
        match what {
            What::Control(c) => match result {
                Ok(()) => {}
                Err(_) if again => self.control.push_front(c),
                Err(e) => {
                    tracing::warn!(?peer, "AM message: a request to the sender failed: {e}");
                    if peer_gone(e.kind()) {
                        self.fail_peer(peer, e.kind());
                    } else if let Control::Go { recv } = c {
                        if let Some(op) = self.recvs.remove(recv) {
                            let (total, got) = (op.total, op.received);
                            self.complete_recv(op.key, op.buffer, peer, total, got, Some(e.kind()));
                        }
                    }
                }
            },
            What::First { send } | What::Data { send, .. } => {
                let Some(op) = self.sends.get_mut(send) else {
                    // Lent ops are never removed; nothing to give back to.
                    return;
                };
                op.buffer = lent;
                match result {
                    Ok(()) => {
                        let streaming = matches!(op.phase, SendPhase::Streaming { .. });
                        if matches!(what, What::Data { .. }) && streaming && op.finish.is_none() {
                            self.streams.push_back(send);
                        }
                    }
                    Err(_) if again => {
                        if op.finish.is_none() {
                            Self::revert(op, what);
                            match what {
                                What::First { .. } => self.firsts.push_front(send),
                                _ => self.streams.push_front(send),
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(?peer, "AM message: a send request failed: {e}");
                        if peer_gone(e.kind()) {
                            self.fail_peer(peer, e.kind());
                        } else {
                            self.finish_send(send, Some(e.kind()));
                        }
                    }
                }
                if let Some(outcome) = self.sends.get(send).and_then(|op| op.finish) {
                    self.finish_send(send, outcome);
                }
            }
        }
    }

    /// Undoes `poll_transmit`'s phase change for a refused packet.
    fn revert(op: &mut SendOp, what: What) {
        match what {
            What::First { .. } => op.phase = SendPhase::Queued,
            What::Data { offset, len, .. } => {
                let end = match op.phase {
                    SendPhase::Streaming { end, .. } => end,
                    _ => offset + len,
                };
                op.phase = SendPhase::Streaming { next: offset, end };
            }
            What::Control(_) => {}
        }
    }

    // ----- receiving -----------------------------------------------------------

    /// An incoming packet from `source`; the reply to send, if any (only
    /// for requests).
    pub(crate) fn handle(
        &mut self,
        kind: Incoming,
        source: PeerAddr,
        args: &[u64],
        payload: &[u8],
    ) -> Option<Args> {
        let packet = match Packet::decode(args) {
            Ok(p) => p,
            Err(e) => return self.reject(source, e),
        };
        let reply = match packet {
            Packet::First { .. } | Packet::Data { .. } if kind == Incoming::Reply => {
                return self.reject(source, format_args!("{packet:?} as a reply"));
            }
            Packet::Go { .. } | Packet::Done { .. } if !payload.is_empty() => {
                return self.reject(source, format_args!("{packet:?} with a payload"));
            }
            Packet::First { send, total } => self.on_first(source, send, total, payload),
            Packet::Data { recv, send, offset } => {
                self.on_data(source, recv, send, offset, payload)
            }
            Packet::Go { send, recv, accept } => self.on_go(source, send, recv, accept),
            Packet::Done { send } => self.on_done(source, send),
        };
        match kind {
            Incoming::Request => reply,
            Incoming::Reply => None,
        }
    }

    /// Drops a packet: warns and counts it.
    fn reject(&mut self, source: PeerAddr, why: impl fmt::Display) -> Option<Args> {
        self.dropped += 1;
        tracing::warn!(?source, "AM message: dropped a packet: {why}");
        None
    }

    fn on_first(
        &mut self,
        source: PeerAddr,
        send: u64,
        total: u64,
        payload: &[u8],
    ) -> Option<Args> {
        if total > self.max_message {
            return self.reject(source, format_args!("a {total}-byte message"));
        }
        if payload.len() as u64 > total {
            let n = payload.len();
            return self.reject(
                source,
                format_args!("{n} first bytes of a {total}-byte message"),
            );
        }
        let found = self
            .posted
            .iter()
            .position(|p| p.from.is_none_or(|f| f == source));
        let Some(p) = found.and_then(|i| self.posted.remove(i)) else {
            let whole = payload.len() as u64 == total;
            self.unexpected.push_back(Unexpected {
                peer: source,
                send,
                total,
                data: payload.to_vec(),
            });
            return whole.then(|| Packet::Done { send }.encode());
        };
        let packet = match self.deliver(source, send, total, payload, p.key, p.buffer) {
            Delivered::Complete => Packet::Done { send },
            Delivered::More { recv, accept } => Packet::Go {
                send,
                recv,
                accept: accept as u64,
            },
        };
        Some(packet.encode())
    }

    /// A matched message's first bytes into `buffer`.
    fn deliver(
        &mut self,
        peer: PeerAddr,
        send: u64,
        total: u64,
        first: &[u8],
        key: OpKey,
        mut buffer: OpBuffer,
    ) -> Delivered {
        let accept = usize::try_from(total).map_or(buffer.len(), |t| t.min(buffer.len()));
        let n = first.len().min(accept);
        if let Some(dst) = buffer.as_mut_slice().and_then(|b| b.get_mut(..n)) {
            dst.copy_from_slice(&first[..n]);
        }
        if n == accept {
            self.complete_recv(key, buffer, peer, total, accept, None);
            return Delivered::Complete;
        }
        match self.recvs.insert(RecvOp {
            peer,
            send,
            key,
            buffer,
            total,
            accept,
            received: n,
        }) {
            Ok(recv) => Delivered::More { recv, accept },
            Err(op) => {
                // 2^32 transfers in flight: this one ends with what came.
                self.complete_recv(key, op.buffer, peer, total, n, Some(ErrorKind::Again));
                Delivered::Complete
            }
        }
    }

    fn on_data(
        &mut self,
        source: PeerAddr,
        recv: u64,
        send: u64,
        offset: u64,
        payload: &[u8],
    ) -> Option<Args> {
        let Some(op) = self.recvs.get_mut(recv) else {
            return self.reject(source, "Data for an unknown or finished receive");
        };
        if op.peer != source || op.send != send {
            return self.reject(source, "Data from another peer or for another message");
        }
        let (received, accept, len) = (op.received, op.accept, payload.len());
        if offset != received as u64 {
            return self.reject(
                source,
                format_args!("Data at {offset}, expected {received}"),
            );
        }
        let end = received + len;
        if len == 0 || end > accept {
            return self.reject(
                source,
                format_args!("{len} bytes of Data at {offset} of {accept} accepted"),
            );
        }
        match op
            .buffer
            .as_mut_slice()
            .and_then(|b| b.get_mut(received..end))
        {
            Some(dst) => dst.copy_from_slice(payload),
            None => return self.reject(source, "Data outside the receive buffer"),
        }
        op.received = end;
        if end < accept {
            return None;
        }
        let op = self.recvs.remove(recv)?;
        self.complete_recv(op.key, op.buffer, source, op.total, end, None);
        Some(Packet::Done { send }.encode())
    }

    fn on_go(&mut self, source: PeerAddr, send: u64, recv: u64, accept: u64) -> Option<Args> {
        let chunk = self.chunk;
        let Some(op) = self.sends.get_mut(send) else {
            return self.reject(source, "Go for an unknown or finished send");
        };
        if op.peer != source {
            return self.reject(source, "Go from a peer the send is not for");
        }
        if op.phase != SendPhase::AwaitGo || op.finish.is_some() {
            let phase = op.phase;
            return self.reject(source, format_args!("Go for a send in phase {phase:?}"));
        }
        let first = op.total.min(chunk);
        let total = op.total;
        let end = match usize::try_from(accept) {
            Ok(a) if a > first && a <= total => a,
            _ => {
                return self.reject(
                    source,
                    format_args!("Go accepting {accept} of {total} bytes, {first} already sent"),
                )
            }
        };
        op.recv = recv;
        op.phase = SendPhase::Streaming { next: first, end };
        self.streams.push_back(send);
        None
    }

    fn on_done(&mut self, source: PeerAddr, send: u64) -> Option<Args> {
        let Some(op) = self.sends.get(send) else {
            return self.reject(source, "Done for an unknown or finished send");
        };
        if op.peer != source {
            return self.reject(source, "Done from a peer the send is not for");
        }
        let waiting = matches!(op.phase, SendPhase::AwaitGo | SendPhase::AwaitDone);
        if !waiting || op.finish.is_some() {
            let phase = op.phase;
            return self.reject(source, format_args!("Done for a send in phase {phase:?}"));
        }
        self.finish_send(send, None);
        None
    }

    // ----- completions ---------------------------------------------------------

    /// Completes send `id` with `error`, or records the outcome while its
    /// buffer is lent (the first outcome wins).
    fn finish_send(&mut self, id: u64, error: Option<ErrorKind>) {
        let Some(op) = self.sends.get_mut(id) else {
            return;
        };
        if op.buffer.is_none() {
            op.finish.get_or_insert(error);
            return;
        }
        let Some(SendOp {
            peer,
            key,
            total,
            buffer: Some(buffer),
            ..
        }) = self.sends.remove(id)
        else {
            return;
        };
        self.done.push_back((
            key,
            MqCompletion {
                status: MqStatus {
                    tag: 0,
                    msg_len: total as u64,
                    nbytes: if error.is_none() { total } else { 0 },
                    source: Some(peer),
                    error,
                },
                buffer,
            },
        ));
    }

    fn complete_recv(
        &mut self,
        key: OpKey,
        buffer: OpBuffer,
        peer: PeerAddr,
        total: u64,
        nbytes: usize,
        error: Option<ErrorKind>,
    ) {
        let error = error.or((total > nbytes as u64).then_some(ErrorKind::Trunc));
        self.done.push_back((
            key,
            MqCompletion {
                status: MqStatus {
                    tag: 0,
                    msg_len: total,
                    nbytes,
                    source: Some(peer),
                    error,
                },
                buffer,
            },
        ));
    }
}

#[cfg(test)]
mod tests;
