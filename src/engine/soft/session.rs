//! [`Session`]: the link a connection carries, which outlives its
//! transport.
//!
//! Every byte a connection sends after its handshake has a position in
//! the link's stream. The sender keeps what it sent until the peer
//! acknowledges it (a [`ResendLog`] of the
//! frames' bytes, with the large send payloads that went on the wire
//! straight from their buffers kept as references), and counts what it
//! consumed of the peer's stream. When the transport breaks, the dialer
//! connects again and the two sides exchange their counts (the Session
//! frames of the handshake); each replays from the other's count, so the
//! stream continues exactly where the peer stands: no frame is lost and
//! none is taken twice.
//!
//! A send whose payload is referenced rather than copied cannot complete
//! while the log may still need its buffer: its completion waits here
//! until the peer acknowledges the bytes (which it does at once for
//! such frames, see [`Session::consumed`]). Sends whose bytes were copied
//! complete as before, when their bytes are in the transmit buffer.
//!
//! Acknowledgements are cumulative byte counts, sent when
//! [`ACK_EVERY`] bytes were consumed since the last one, after a frame
//! whose sender waits for it, and on every transmit that carries frames
//! anyway (they cost 16 bytes).

use super::link_key::{KeyHalf, LinkKey};
use super::protocol::{OpId, PayloadRef, SendPayloads};
use super::wire::Frame;
use crate::engine::MqStatus;
use crate::resend::{AckError, ReceiveCursor, ResendLog};
use bytes::BytesMut;
use std::collections::VecDeque;
use std::ops::Range;

/// Consumed bytes after which an acknowledgement goes out even if the
/// peer waits for nothing.
pub(crate) const ACK_EVERY: u64 = 256 << 10;

/// Bytes consumed that an idle link acknowledges (`Session::ack_soon`).
pub(crate) const IDLE_ACK_MIN: u64 = 4 << 10;

/// Bytes copied into the log past which a connection starts no new
/// message until the peer acknowledges some (a peer that never
/// acknowledges only stalls its own traffic).
pub(crate) const LOG_COPY_LIMIT: u64 = 32 << 20;

/// What the log keeps of one stretch of the stream.
#[derive(Debug)]
pub(crate) enum Retained {
    /// Bytes as they went out (headers, small frames, copied payloads),
    /// kept in the session's copy ring, in order.
    Copied,
    /// Bytes of a send's buffer, which the edge still holds.
    Payload { op: OpId, range: Range<usize> },
}

/// One connection's link state (module docs).
#[derive(Debug)]
pub(crate) struct Session {
    /// The link id, shared by both sides.
    pub link: u64,
    /// This side's half of the link key (sent in its first Session).
    pub my_half: KeyHalf,
    /// The link key, once both halves are known: a resumption proves it
    /// ([`LinkKey`]).
    pub key: Option<LinkKey>,
    /// Dialer: the generation of its latest resumption; acceptor: the
    /// highest generation it took (0 before any resumption).
    pub generation: u64,
    /// The peer endpoint's incarnation, from its first Session.
    pub peer_incarnation: u64,
    /// Whether sent bytes are kept for resending (not for the endpoint's
    /// pipe to itself, which cannot break).
    logging: bool,
    log: ResendLog<Retained>,
    /// The bytes of the log's `Copied` items, oldest first (a ring: in
    /// steady state it allocates nothing).
    copies: VecDeque<u8>,
    /// What was consumed of the peer's stream.
    rx: ReceiveCursor,
    /// The last count acknowledged to the peer.
    acked_to_peer: u64,
    /// The peer waits for an acknowledgement.
    urgent: bool,
    /// Frames other than acknowledgements were consumed since the last
    /// acknowledgement (acknowledging only acknowledgements would make
    /// two idle links answer each other forever).
    owed_data: bool,
    /// After a resumption: replay the log from here before anything new.
    replay_from: Option<u64>,
    /// Sends waiting for the peer to acknowledge up to a position.
    deferred: VecDeque<(u64, OpId, MqStatus)>,
    /// Sends of the batch being composed whose completion is deferred,
    /// with where their last byte ends within the batch.
    unplaced: Vec<(u64, OpId, MqStatus)>,
    /// Where the batch being composed starts: output bytes and
    /// referenced bytes before it.
    batch_mark: (usize, usize),
}

impl Session {
    /// A new link `link`; `logging` keeps what is sent for resending.
    pub(super) fn new(link: u64, my_half: KeyHalf, logging: bool) -> Session {
        Session {
            link,
            my_half,
            key: None,
            generation: 0,
            peer_incarnation: 0,
            logging,
            log: ResendLog::new(),
            copies: VecDeque::new(),
            rx: ReceiveCursor::default(),
            acked_to_peer: 0,
            urgent: false,
            owed_data: false,
            replay_from: None,
            deferred: VecDeque::new(),
            unplaced: Vec::new(),
            batch_mark: (0, 0),
        }
    }

    /// Whether what is sent is kept (the link can be resumed).
    pub(super) fn logging(&self) -> bool {
        self.logging
    }

    /// Bytes of the peer's stream consumed.
    pub(super) fn received(&self) -> u64 {
        self.rx.next()
    }

    /// A whole frame of `n` bytes was consumed; `urgent` when its sender
    /// waits for the acknowledgement (a referenced payload).
    pub(super) fn consumed(&mut self, n: u64, urgent: bool) {
        self.rx.advance(n);
        self.urgent |= urgent;
        self.owed_data = true;
    }

    /// An acknowledgement frame of `n` bytes was consumed: counted, but
    /// it calls for no acknowledgement of its own.
    pub(super) fn consumed_ack(&mut self, n: u64) {
        self.rx.advance(n);
    }

    /// Acknowledges at the next transmit what was consumed, if it is
    /// [`IDLE_ACK_MIN`] or more (an idle link lets its peer's log go; a
    /// smaller tail stays kept, costing the peer less than the
    /// acknowledgement would).
    pub(super) fn ack_soon(&mut self) -> bool {
        let owed = self.rx.next() - self.acked_to_peer;
        self.urgent |= self.owed_data && owed >= IDLE_ACK_MIN;
        self.urgent
    }

    /// Whether an acknowledgement must go out now.
    pub(super) fn wants_ack(&self) -> bool {
        let owed = self.rx.next() - self.acked_to_peer;
        owed > 0 && (self.urgent || owed >= ACK_EVERY)
    }

    /// The acknowledgement to send, if anything was consumed since the
    /// last one.
    pub(super) fn take_ack(&mut self) -> Option<Frame> {
        let received = self.rx.next();
        self.urgent = false;
        self.owed_data = false;
        if received == self.acked_to_peer {
            return None;
        }
        self.acked_to_peer = received;
        Some(Frame::Ack { received })
    }

    /// Bytes sent and not acknowledged (0 when nothing is kept).
    #[cfg_attr(not(feature = "hooks"), allow(dead_code))]
    pub(super) fn unacked(&self) -> u64 {
        self.log.unacked()
    }

    /// Whether new messages must wait for acknowledgements.
    pub(super) fn log_full(&self) -> bool {
        self.copies.len() as u64 >= LOG_COPY_LIMIT
    }

    /// Whether a resumption's replay is due.
    pub(super) fn replay_due(&self) -> bool {
        self.replay_from.is_some()
    }

    /// Whether sends still wait for the peer's acknowledgement.
    pub(super) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty() || !self.unplaced.is_empty()
    }

    /// A batch starts, after `out_len` output bytes and `referenced`
    /// referenced bytes of earlier ones.
    pub(super) fn begin_batch(&mut self, out_len: usize, referenced: usize) {
        self.batch_mark = (out_len, referenced);
    }

    /// Send `op`, whose bytes went into the batch being composed by
    /// reference and end where the batch now holds `out_len` output and
    /// `referenced` referenced bytes, completes once the peer
    /// acknowledges its last byte.
    pub(super) fn defer(&mut self, op: OpId, status: MqStatus, out_len: usize, referenced: usize) {
        let at = (out_len - self.batch_mark.0) + (referenced - self.batch_mark.1);
        self.unplaced.push((at as u64, op, status));
    }

    /// Records the batch just composed: `out` are its bytes from the
    /// position where it started in the output buffer (`base`), `refs`
    /// the payloads referenced in it (their `at` counts from the output
    /// buffer's start). Deferred sends of the batch wait for its end.
    /// Sends that can complete now are pushed to `done`.
    pub(super) fn record(
        &mut self,
        out: &[u8],
        base: usize,
        refs: &[PayloadRef],
        done: &mut Vec<(OpId, MqStatus)>,
    ) {
        if !self.logging {
            done.extend(self.unplaced.drain(..).map(|(_, op, s)| (op, s)));
            return;
        }
        let start = self.log.end();
        let mut pos = 0;
        for r in refs {
            let at = r.at - base;
            if at > pos {
                self.keep_bytes(&out[pos..at]);
                pos = at;
            }
            self.log.push(
                r.range.len() as u64,
                Retained::Payload {
                    op: r.op,
                    range: r.range.clone(),
                },
            );
        }
        if out.len() > pos {
            self.keep_bytes(&out[pos..]);
        }
        self.deferred.extend(
            self.unplaced
                .drain(..)
                .map(|(at, op, s)| (start + at, op, s)),
        );
    }

    fn keep_bytes(&mut self, b: &[u8]) {
        self.copies.extend(b);
        self.log.push(b.len() as u64, Retained::Copied);
    }

    /// The peer consumed `received` bytes of our stream: what the log no
    /// longer needs goes, and the sends waiting for it complete (pushed
    /// to `done`).
    pub(super) fn on_ack(
        &mut self,
        received: u64,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), AckError> {
        if !self.logging {
            return Ok(());
        }
        let mut freed = 0;
        for (len, r) in self.log.ack(received)? {
            // Released items are whole and oldest first: their ring bytes
            // are at its front.
            if matches!(r, Retained::Copied) {
                freed += len as usize;
            }
        }
        self.copies.drain(..freed);
        while let Some(&(end, _, _)) = self.deferred.front() {
            if end > received {
                break;
            }
            let (_, op, status) = self.deferred.pop_front().expect("just seen");
            done.push((op, status));
        }
        Ok(())
    }

    /// A resumption: the peer consumed `received` bytes of our stream;
    /// what it lacks is replayed before anything new.
    pub(super) fn resume_at(
        &mut self,
        received: u64,
        done: &mut Vec<(OpId, MqStatus)>,
    ) -> Result<(), AckError> {
        self.log.replay(received).map(|_| ())?;
        self.on_ack(received, done)?;
        self.replay_from = (received < self.log.end()).then_some(received);
        // The peer learns our count in the handshake.
        self.acked_to_peer = self.rx.next();
        self.urgent = false;
        Ok(())
    }

    /// Appends the replay to `out` (referencing payloads through `refer`
    /// when it gives them a place, copying them from `payloads`
    /// otherwise). `Err(op)` when the edge no longer has op's buffer.
    pub(super) fn replay(
        &mut self,
        out: &mut BytesMut,
        mut refer: impl FnMut(&mut BytesMut, OpId, Range<usize>) -> bool,
        payloads: &dyn SendPayloads,
    ) -> Result<(), OpId> {
        let Some(from) = self.replay_from.take() else {
            return Ok(());
        };
        // Every item held, to find the copied ones' bytes in the ring.
        let mut ring = 0usize;
        for (start, len, item) in self.log.iter() {
            let end = start + len;
            let skip = from.saturating_sub(start).min(len) as usize;
            let len = len as usize;
            match item {
                Retained::Copied => {
                    if end > from {
                        out.extend(self.copies.range(ring + skip..ring + len));
                    }
                    ring += len;
                }
                Retained::Payload { op, range } if end > from => {
                    let r = range.start + skip..range.end;
                    if refer(out, *op, r.clone()) {
                        continue;
                    }
                    match payloads.payload(*op).and_then(|p| p.get(r)) {
                        Some(p) => out.extend_from_slice(p),
                        None => return Err(*op),
                    }
                }
                Retained::Payload { .. } => {}
            }
        }
        Ok(())
    }

    /// Gives back the memory of an idle link that grew for a burst: what
    /// the copy ring and the queues hold beyond what waits in them (a few
    /// KiB stay, so an idle link's next messages allocate nothing).
    pub(super) fn release_memory(&mut self) {
        if self.copies.capacity() > 4 * self.copies.len() + (64 << 10) {
            self.copies.shrink_to_fit();
        }
        if self.deferred.capacity() > 4 * self.deferred.len() + 64 {
            self.deferred.shrink_to_fit();
        }
        self.log.release_memory();
    }

    /// The sends still waiting for acknowledgements (the link is gone:
    /// the caller fails them).
    pub(super) fn take_deferred(&mut self) -> Vec<(OpId, MqStatus)> {
        let mut v: Vec<(OpId, MqStatus)> =
            self.unplaced.drain(..).map(|(_, op, s)| (op, s)).collect();
        v.extend(self.deferred.drain(..).map(|(_, op, s)| (op, s)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn status() -> MqStatus {
        MqStatus {
            tag: 1,
            msg_len: 4,
            nbytes: 4,
            source: None,
            error: None,
        }
    }

    #[test]
    fn referenced_sends_complete_on_the_ack_and_replay_rebuilds_the_stream() {
        let mut s = Session::new(9, [0; 16], true);
        let mut done = Vec::new();
        // A batch: 3 header bytes, 4 payload bytes of op 1, 2 more bytes.
        let out = b"hdrxx";
        let refs = [PayloadRef {
            at: 3,
            op: OpId(1),
            range: 0..4,
        }];
        s.begin_batch(0, 0);
        s.defer(OpId(1), status(), 3, 4);
        s.record(out, 0, &refs, &mut done);
        assert!(done.is_empty() && s.has_deferred());
        // The peer got 5 bytes, then the transport broke.
        s.resume_at(5, &mut done).unwrap();
        assert!(done.is_empty(), "the payload is not all acknowledged");
        assert!(s.has_deferred());
        let payloads: HashMap<OpId, Vec<u8>> = [(OpId(1), b"PAYL".to_vec())].into();
        let mut again = BytesMut::new();
        s.replay(&mut again, |_, _, _| false, &payloads).unwrap();
        assert_eq!(&again[..], b"YLxx");
        s.on_ack(7, &mut done).unwrap();
        assert_eq!(done.len(), 1, "its last byte is acknowledged");
        assert!(!s.has_deferred());
        assert!(s.on_ack(10, &mut done).is_err(), "beyond what was sent");
    }

    #[test]
    fn acks_are_owed_by_size_or_urgency() {
        let mut s = Session::new(9, [0; 16], true);
        s.consumed(100, false);
        assert!(!s.wants_ack());
        s.consumed(ACK_EVERY, false);
        assert!(s.wants_ack());
        assert_eq!(
            s.take_ack(),
            Some(Frame::Ack {
                received: 100 + ACK_EVERY
            })
        );
        assert_eq!(s.take_ack(), None);
        s.consumed(1, true);
        assert!(s.wants_ack());
        s.take_ack();
        // An idle link acknowledges data, never only acknowledgements, and
        // not a small tail.
        s.consumed_ack(IDLE_ACK_MIN);
        assert!(!s.ack_soon());
        s.consumed(8, false);
        assert!(s.ack_soon() && s.wants_ack());
        s.take_ack();
        s.consumed(IDLE_ACK_MIN - 1, false);
        assert!(!s.ack_soon());
    }

    #[test]
    fn an_acknowledged_log_gives_its_memory_back() {
        let mut s = Session::new(9, [0; 16], true);
        let mut done = Vec::new();
        s.begin_batch(0, 0);
        s.record(&[7u8; 1_000_000], 0, &[], &mut done);
        s.on_ack(1_000_000, &mut done).unwrap();
        s.release_memory();
        assert!(s.copies.capacity() < 1_000, "{}", s.copies.capacity());
        // Bytes still unacknowledged stay.
        s.begin_batch(0, 0);
        s.record(&[7u8; 10], 0, &[], &mut done);
        s.release_memory();
        assert_eq!(s.copies.len(), 10);
    }

    #[test]
    fn a_pipe_keeps_nothing() {
        let mut s = Session::new(9, [0; 16], false);
        let mut done = Vec::new();
        s.begin_batch(0, 0);
        s.defer(OpId(1), status(), 3, 0);
        s.record(b"abc", 0, &[], &mut done);
        assert_eq!(done.len(), 1);
        assert!(s.on_ack(1_000, &mut done).is_ok());
    }
}
