//! The initiator's side of RMA as a pure state machine: one [`RmaOp`] per
//! read or write, kept by an [`Initiator`] under request ids.
//!
//! The I/O edge drives it with four calls and never decides anything:
//! [`Initiator::peek`] says what the operation wants next (an AM request,
//! an MQ send or receive, a cancel), [`Initiator::commit`] records that the
//! edge did it (handing over the buffer for MQ posts; a request refused
//! with `Again` is simply not committed and peeked again later), and
//! [`Initiator::on_reply`] / [`Initiator::on_mq_done`] feed in what came
//! back. [`Initiator::take_finished`] hands out the result and the buffers.
//!
//! # Short protocol (AM chunks)
//! Chunks of at most `write_chunk` bytes (writes) or `read_chunk` (reads)
//! leave back to back while fewer than `window` are unacknowledged; the
//! target acknowledges **every** chunk (a read's acknowledgement is its
//! data), naming it by its offset in the operation. The last chunk (`EOM`)
//! leaves only once every other chunk is acknowledged, so when the target
//! sees `EOM` the whole operation has landed whatever the engine's
//! ordering, and its remote event (counter, CQ data) is exact. The
//! operation completes, delivery-complete, when the last chunk is
//! acknowledged. A target error completes it at once with that error and
//! nothing more is sent; replies still in flight are then dropped (the id
//! is dead), so the buffers can go back at once: the engine never writes
//! them, this core copies read data in.
//!
//! # Long protocol (tagged MQ)
//! *Write*: `REQ_WRITE_LONG`; the target checks, pins the range, posts an
//! MQ receive under `long_rma_tag(target id)` and answers `REP_WRITE_GO`
//! with that id; the initiator then sends the bytes with that tag. When
//! the receive completes the target sends `REP_WRITE | EOM` with the
//! status; the operation completes when both that reply and the local send
//! are in. An error before `GO` completes at once; no byte is sent.
//! *Read*: the initiator posts an MQ receive under `long_rma_tag(own id)`,
//! then sends `REQ_READ_LONG`; the target sends the bytes with that tag.
//! The receive's completion completes the operation; a target error
//! (`REP_READ | EOM`) cancels the receive and completes with the error.
//! Both tags are ids of the *receiving* side, so they are unique where the
//! MQ matches them (the C provider's tag, the initiator's epid, was not;
//! and MQ receives cannot filter on the source).

use super::ids::{Ids, Space};
use super::plan::{advance, chunk_at, goes_long, pair, RemoteIov, RmaParams, Segment};
use super::wire::{kind_of, long_rma_tag, refusal_of, Args, Packet, Reply, Request};
use crate::engine::{OpBuffer, PeerAddr};
use crate::{Error, ErrorKind, Result};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RmaKind {
    /// Local bytes to the remote region.
    Write,
    /// Remote region's bytes to local buffers.
    Read,
}

impl std::fmt::Display for RmaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RmaKind::Write => "write",
            RmaKind::Read => "read",
        })
    }
}

/// What an operation wants the edge to do next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// Send this AM request to the operation's peer.
    Request { args: Args, payload: &'a [u8] },
    /// Post an MQ send of the buffer `commit` returns, with `tag`.
    PostSend { tag: u64 },
    /// Post an MQ receive (exact `tag`) into the buffer `commit` returns.
    PostRecv { tag: u64 },
    /// Cancel the MQ receive posted for this operation.
    CancelRecv,
}

/// What became of a reply or an MQ completion.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Taken by operation `id` (peek it, it may be finished).
    Accepted(u64),
    /// Ignored: stale, forged, duplicate or out of place.
    Dropped(&'static str),
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    op_off: u64,
    seg: usize,
    off: usize,
    len: usize,
    last: bool,
}

#[derive(Debug)]
enum State {
    Short {
        seg: usize,
        off: usize,
        inflight: Vec<InFlight>,
        last_sent: bool,
    },
    LongWrite {
        requested: bool,
        go: Option<u64>,
        sent: bool,
        reply: Option<u32>,
        mq: Option<Result<()>>,
    },
    LongRead {
        posted: bool,
        requested: bool,
        cancel: bool,
        cancelled: bool,
    },
}

/// One RMA operation at the initiator.
#[derive(Debug)]
pub(crate) struct RmaOp {
    id: u64,
    kind: RmaKind,
    peer: PeerAddr,
    /// `None` while the engine holds it (long protocol).
    locals: Vec<Option<OpBuffer>>,
    segs: Vec<Segment>,
    total: u64,
    data: Option<u64>,
    chunk: usize,
    window: usize,
    state: State,
    result: Option<Result<()>>,
}

impl RmaOp {
    fn fail(&mut self, e: Error) {
        if self.result.is_none() {
            self.result = Some(Err(e));
        }
    }

    fn finished(&self) -> bool {
        self.result.is_some() && self.locals.iter().all(Option::is_some)
    }

    fn what(&self) -> String {
        let s = &self.segs[0];
        format!(
            "RMA {} of {} bytes at offset {:#x} of key {:#x}",
            self.kind, self.total, s.remote_off, s.key
        )
    }

    fn target_error(&self, status: u32, at: Option<&Segment>) -> Error {
        let kind = kind_of(status);
        let s = at.unwrap_or(&self.segs[0]);
        let why = refusal_of(status).map_or(String::new(), |r| format!(": {r}"));
        // A zero-length operation is a check of a key and an offset (mrail
        // checks a striped write's ranges so); its length says nothing.
        let what = if self.total == 0 {
            format!("RMA {} check", self.kind)
        } else {
            format!("RMA {} of {} bytes", self.kind, self.total)
        };
        Error::new(
            kind,
            format!(
                "{what}: the target refused bytes at offset {:#x} of key {:#x} ({kind}{why})",
                s.remote_off, s.key
            ),
        )
    }

    fn local_slice(&self, seg: usize, off: usize, len: usize) -> &[u8] {
        let s = &self.segs[seg];
        match self.locals.get(s.local).and_then(Option::as_ref) {
            Some(b) => &b.as_slice()[s.local_off + off..][..len],
            None => &[],
        }
    }

    fn peek(&self) -> Option<Step<'_>> {
        if self.result.is_some() {
            return match self.state {
                State::LongRead {
                    posted: true,
                    cancel: true,
                    cancelled: false,
                    ..
                } if self.locals.iter().any(Option::is_none) => Some(Step::CancelRecv),
                _ => None,
            };
        }
        let s0 = &self.segs[0];
        match &self.state {
            State::Short {
                seg,
                off,
                inflight,
                last_sent,
            } => {
                if *last_sent || inflight.len() >= self.window {
                    return None;
                }
                let c = chunk_at(&self.segs, *seg, *off, self.chunk)?;
                if c.last && !inflight.is_empty() {
                    return None;
                }
                let s = &self.segs[c.seg];
                // Operations are at most u32::MAX bytes (`start`).
                let op_off = (s.op_off + c.off as u64) as u32;
                let rest = (s.len - c.off) as u32;
                let offset = s.remote_off + c.off as u64;
                let len = c.len as u32;
                let (packet, payload) = match self.kind {
                    RmaKind::Write => (
                        Request::Write {
                            id: self.id,
                            key: s.key,
                            offset,
                            len,
                            op_off: (!c.last).then_some((op_off, rest)),
                            data: if c.last { self.data } else { None },
                        },
                        self.local_slice(c.seg, c.off, c.len),
                    ),
                    RmaKind::Read => (
                        Request::Read {
                            id: self.id,
                            key: s.key,
                            offset,
                            len,
                            op_off: (op_off, rest),
                            eom: c.last,
                        },
                        &[][..],
                    ),
                };
                Some(Step::Request {
                    args: Packet::Request(packet).encode(),
                    payload,
                })
            }
            State::LongWrite {
                requested,
                go,
                sent,
                ..
            } => {
                if !requested {
                    let req = Request::WriteLong {
                        id: self.id,
                        key: s0.key,
                        offset: s0.remote_off,
                        len: s0.len as u32,
                        data: self.data,
                    };
                    return Some(Step::Request {
                        args: Packet::Request(req).encode(),
                        payload: &[],
                    });
                }
                match (go, sent) {
                    (Some(tid), false) => Some(Step::PostSend {
                        tag: long_rma_tag(*tid),
                    }),
                    _ => None,
                }
            }
            State::LongRead {
                posted, requested, ..
            } => {
                if !posted {
                    Some(Step::PostRecv {
                        tag: long_rma_tag(self.id),
                    })
                } else if !requested {
                    let req = Request::ReadLong {
                        id: self.id,
                        key: s0.key,
                        offset: s0.remote_off,
                        len: s0.len as u32,
                    };
                    Some(Step::Request {
                        args: Packet::Request(req).encode(),
                        payload: &[],
                    })
                } else {
                    None
                }
            }
        }
    }

    fn commit(&mut self) -> Option<OpBuffer> {
        let local = self.segs[0].local;
        let peeked_cancel = matches!(self.peek(), Some(Step::CancelRecv));
        if self.result.is_some() {
            if peeked_cancel {
                if let State::LongRead { cancelled, .. } = &mut self.state {
                    *cancelled = true;
                }
            }
            return None;
        }
        let (segs, chunk, window) = (&self.segs, self.chunk, self.window);
        match &mut self.state {
            State::Short {
                seg,
                off,
                inflight,
                last_sent,
            } => {
                if *last_sent || inflight.len() >= window {
                    return None;
                }
                let c = chunk_at(segs, *seg, *off, chunk)?;
                if c.last && !inflight.is_empty() {
                    return None;
                }
                inflight.push(InFlight {
                    op_off: segs[c.seg].op_off + c.off as u64,
                    seg: c.seg,
                    off: c.off,
                    len: c.len,
                    last: c.last,
                });
                *last_sent = c.last;
                (*seg, *off) = advance(segs, &c);
                None
            }
            State::LongWrite {
                requested,
                go,
                sent,
                ..
            } => {
                if !*requested {
                    *requested = true;
                    None
                } else if go.is_some() && !*sent {
                    *sent = true;
                    self.locals.get_mut(local)?.take()
                } else {
                    None
                }
            }
            State::LongRead {
                posted, requested, ..
            } => {
                if !*posted {
                    *posted = true;
                    self.locals.get_mut(local)?.take()
                } else {
                    *requested = true;
                    None
                }
            }
        }
    }

    fn on_reply(&mut self, reply: &Reply, payload: &[u8]) -> Delivery {
        if self.result.is_some() {
            return Delivery::Dropped("the operation already ended");
        }
        let id = self.id;
        match (&mut self.state, *reply) {
            (
                State::Short { inflight, .. },
                Reply::Write {
                    status,
                    op_off,
                    eom,
                    ..
                },
            ) if self.kind == RmaKind::Write => {
                let Some(i) = inflight
                    .iter()
                    .position(|f| f.last == eom && (eom || f.op_off == op_off))
                else {
                    return Delivery::Dropped("no such chunk in flight");
                };
                let f = inflight.swap_remove(i);
                if status != 0 {
                    let e = self.target_error(status, Some(&self.segs[f.seg]));
                    self.fail(e);
                } else if f.last {
                    self.result = Some(Ok(()));
                }
                Delivery::Accepted(id)
            }
            (
                State::Short { inflight, .. },
                Reply::Read {
                    status,
                    op_off,
                    eom,
                    ..
                },
            ) if self.kind == RmaKind::Read => {
                let Some(i) = inflight
                    .iter()
                    .position(|f| f.last == eom && f.op_off == op_off)
                else {
                    return Delivery::Dropped("no such chunk in flight");
                };
                let f = inflight.swap_remove(i);
                if status != 0 {
                    let e = self.target_error(status, Some(&self.segs[f.seg]));
                    self.fail(e);
                    return Delivery::Accepted(id);
                }
                if payload.len() != f.len {
                    let e = Error::new(
                        ErrorKind::Io,
                        format!(
                            "{}: the target sent {} bytes for a {}-byte chunk",
                            self.what(),
                            payload.len(),
                            f.len
                        ),
                    );
                    self.fail(e);
                    return Delivery::Accepted(id);
                }
                let s = self.segs[f.seg];
                if let Some(dst) = self
                    .locals
                    .get_mut(s.local)
                    .and_then(Option::as_mut)
                    .and_then(OpBuffer::as_mut_slice)
                {
                    dst[s.local_off + f.off..][..f.len].copy_from_slice(payload);
                }
                if f.last {
                    self.result = Some(Ok(()));
                }
                Delivery::Accepted(id)
            }
            (
                State::LongWrite {
                    requested: true,
                    go: go @ None,
                    ..
                },
                Reply::WriteGo { target, .. },
            ) => {
                *go = Some(target);
                Delivery::Accepted(id)
            }
            (
                State::LongWrite {
                    requested: true,
                    go,
                    reply: reply @ None,
                    mq,
                    ..
                },
                Reply::Write {
                    status, eom: true, ..
                },
            ) => {
                if go.is_none() && status == 0 {
                    return Delivery::Dropped("a long write acknowledged before it was accepted");
                }
                *reply = Some(status);
                let outcome = match (go.is_none(), status, mq.take()) {
                    // Refused before GO: nothing was sent, done.
                    (true, s, _) => Some(Err(s)),
                    (false, _, Some(Err(e))) => Some(Ok(Err(e))),
                    (false, 0, Some(Ok(()))) => Some(Ok(Ok(()))),
                    (false, s, Some(Ok(()))) => Some(Err(s)),
                    (false, _, None) => None,
                };
                self.settle(outcome);
                Delivery::Accepted(id)
            }
            (
                State::LongRead {
                    requested: true,
                    cancel: cancel @ false,
                    ..
                },
                Reply::Read {
                    status, eom: true, ..
                },
            ) if status != 0 => {
                *cancel = true;
                let e = self.target_error(status, None);
                self.fail(e);
                Delivery::Accepted(id)
            }
            _ => Delivery::Dropped("a reply of the wrong kind for this operation"),
        }
    }

    /// `Ok(result)` as is; `Err(status)` a target status to report.
    fn settle(&mut self, outcome: Option<std::result::Result<Result<()>, u32>>) {
        match outcome {
            Some(Ok(r)) if self.result.is_none() => self.result = Some(r),
            Some(Err(0)) => self.result = Some(Ok(())),
            Some(Err(s)) => {
                let e = self.target_error(s, None);
                self.fail(e);
            }
            _ => {}
        }
    }

    fn on_mq_done(&mut self, result: Result<usize>, buffer: OpBuffer) -> Delivery {
        let local = self.segs[0].local;
        match self.locals.get_mut(local) {
            Some(slot @ None) => *slot = Some(buffer),
            _ => return Delivery::Dropped("no MQ transfer of this operation is posted"),
        }
        let len = self.segs[0].len;
        match &mut self.state {
            State::LongWrite { reply, mq, .. } => {
                let mq_result = result.map(|_| ());
                match (*reply, mq_result) {
                    (_, Err(e)) => self.fail(e),
                    (Some(0), Ok(())) => self.settle(Some(Err(0))),
                    (Some(s), Ok(())) => self.settle(Some(Err(s))),
                    (None, Ok(())) => *mq = Some(Ok(())),
                }
            }
            State::LongRead { .. } => match result {
                // A target error was recorded first; the cancel's own
                // `Canceled` says nothing more.
                _ if self.result.is_some() => {}
                Ok(n) if n == len => self.result = Some(Ok(())),
                Ok(n) => {
                    let e = Error::new(
                        ErrorKind::Io,
                        format!("{}: the target sent {n} bytes", self.what()),
                    );
                    self.fail(e);
                }
                Err(e) => self.fail(e),
            },
            State::Short { .. } => {}
        }
        Delivery::Accepted(self.id)
    }
}

/// Every RMA operation a domain initiates, by request id.
#[derive(Debug)]
pub(crate) struct Initiator {
    ops: Ids<RmaOp>,
    params: RmaParams,
}

impl Initiator {
    /// An initiator with `params`; `salt` seeds the id generations (use a
    /// random value so ids differ between runs).
    pub(crate) fn new(params: RmaParams, salt: u32) -> Self {
        Initiator {
            ops: Ids::new(Space::Initiator, salt),
            params,
        }
    }

    /// The parameters.
    pub(crate) fn params(&self) -> &RmaParams {
        &self.params
    }

    /// Operations not yet taken out.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Starts an operation: `locals` are the local buffers (read into /
    /// written from, in order), `remote` the remote ranges, `data` the
    /// remote CQ data of a write. Returns its id; nothing is sent until the
    /// edge peeks and commits.
    ///
    /// # Errors
    /// The shape errors of the pairing (`Inval`, `MsgSize`), `Inval` for a
    /// read into read-only `Bytes` or CQ data on a read, `Again` when 2^32
    /// operations are in flight; the buffers come back with the error.
    pub(crate) fn start(
        &mut self,
        kind: RmaKind,
        peer: PeerAddr,
        locals: Vec<OpBuffer>,
        remote: &[RemoteIov],
        data: Option<u64>,
    ) -> std::result::Result<u64, (Error, Vec<OpBuffer>)> {
        let lens: Vec<usize> = locals.iter().map(OpBuffer::len).collect();
        // Op offsets travel in 32 bits.
        let max = self.params.max_message.min(u64::from(u32::MAX));
        let segs = match pair(&lens, remote, max) {
            Ok(s) => s,
            Err(e) => return Err((e, locals)),
        };
        if kind == RmaKind::Read {
            if data.is_some() {
                let e = Error::new(
                    ErrorKind::Inval,
                    "RMA read: remote CQ data only goes with writes",
                );
                return Err((e, locals));
            }
            let mut locals = locals;
            if locals.iter_mut().any(|b| b.as_mut_ptr().is_none()) {
                let e = Error::new(
                    ErrorKind::Inval,
                    "RMA read: a local buffer is read-only (Bytes)",
                );
                return Err((e, locals));
            }
            return self.insert(kind, peer, locals, segs, data);
        }
        self.insert(kind, peer, locals, segs, data)
    }

    fn insert(
        &mut self,
        kind: RmaKind,
        peer: PeerAddr,
        locals: Vec<OpBuffer>,
        segs: Vec<Segment>,
        data: Option<u64>,
    ) -> std::result::Result<u64, (Error, Vec<OpBuffer>)> {
        let p = &self.params;
        let state = match (goes_long(&segs, p), kind) {
            (false, _) => State::Short {
                seg: 0,
                off: 0,
                inflight: Vec::with_capacity(p.window.max(1)),
                last_sent: false,
            },
            (true, RmaKind::Write) => State::LongWrite {
                requested: false,
                go: None,
                sent: false,
                reply: None,
                mq: None,
            },
            (true, RmaKind::Read) => State::LongRead {
                posted: false,
                requested: false,
                cancel: false,
                cancelled: false,
            },
        };
        let total = segs.iter().map(|s| s.len as u64).sum();
        let op = RmaOp {
            id: 0,
            kind,
            peer,
            locals: locals.into_iter().map(Some).collect(),
            segs,
            total,
            data,
            chunk: match kind {
                RmaKind::Write => p.write_chunk,
                RmaKind::Read => p.read_chunk,
            },
            window: p.window.max(1),
            state,
            result: None,
        };
        match self.ops.insert(op) {
            Some(id) => {
                if let Some(op) = self.ops.get_mut(id) {
                    op.id = id;
                }
                Ok(id)
            }
            None => Err((
                Error::new(ErrorKind::Again, "RMA: too many operations in flight"),
                Vec::new(),
            )),
        }
    }

    /// The peer of operation `id`.
    pub(crate) fn peer(&self, id: u64) -> Option<PeerAddr> {
        self.ops.get(id).map(|op| op.peer)
    }

    /// What operation `id` wants done next (`None`: nothing now).
    pub(crate) fn peek(&self, id: u64) -> Option<Step<'_>> {
        self.ops.get(id)?.peek()
    }

    /// Records that the edge did what `peek` said; for MQ posts, the
    /// buffer to post (hand it back with [`on_mq_done`](Self::on_mq_done)).
    pub(crate) fn commit(&mut self, id: u64) -> Option<OpBuffer> {
        self.ops.get_mut(id)?.commit()
    }

    /// A reply from `source` (decoded by [`Packet::decode`]).
    pub(crate) fn on_reply(&mut self, source: PeerAddr, reply: &Reply, payload: &[u8]) -> Delivery {
        let id = match *reply {
            Reply::Write { id, .. } | Reply::Read { id, .. } | Reply::WriteGo { id, .. } => id,
        };
        let Some(op) = self.ops.get_mut(id) else {
            return Delivery::Dropped("stale or unknown request id");
        };
        if op.peer != source {
            return Delivery::Dropped("a reply from another peer");
        }
        op.on_reply(reply, payload)
    }

    /// The MQ transfer of operation `id` completed: `Ok(bytes)` or its
    /// error, with the buffer posted. A stray completion gives the buffer
    /// back in `Err`.
    pub(crate) fn on_mq_done(
        &mut self,
        id: u64,
        result: Result<usize>,
        buffer: OpBuffer,
    ) -> std::result::Result<Delivery, OpBuffer> {
        match self.ops.get_mut(id) {
            Some(op) if op.locals.iter().any(Option::is_none) => Ok(op.on_mq_done(result, buffer)),
            _ => Err(buffer),
        }
    }

    /// Fails operation `id` (its peer died, the domain closes): it ends
    /// with `error` once the engine has given back any buffer it holds (a
    /// posted long-read receive is cancelled: peek says so).
    pub(crate) fn fail(&mut self, id: u64, error: Error) {
        if let Some(op) = self.ops.get_mut(id) {
            if let State::LongRead { cancel, .. } = &mut op.state {
                *cancel = true;
            }
            op.fail(error);
        }
    }

    /// Chunks of operation `id` sent and not yet acknowledged.
    pub(crate) fn in_flight(&self, id: u64) -> usize {
        match self.ops.get(id).map(|op| &op.state) {
            Some(State::Short { inflight, .. }) => inflight.len(),
            _ => 0,
        }
    }

    /// Whether operation `id` has ended (result known, buffers home).
    pub(crate) fn is_finished(&self, id: u64) -> bool {
        self.ops.get(id).is_some_and(RmaOp::finished)
    }

    /// The result and buffers of a finished operation; its id is dead from
    /// now on.
    pub(crate) fn take_finished(&mut self, id: u64) -> Option<(Result<()>, Vec<OpBuffer>)> {
        if !self.is_finished(id) {
            return None;
        }
        let op = self.ops.remove(id)?;
        let result = op.result.unwrap_or(Ok(()));
        Some((result, op.locals.into_iter().flatten().collect()))
    }
}
