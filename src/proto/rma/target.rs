//! The target's side of RMA: a request in, a checked copy, a reply out.
//!
//! [`RmaTarget::handle`] runs inside the AM handler. Before touching any
//! byte it checks the request against the domain's [`MrTable`] (key, then
//! range, then `FI_REMOTE_WRITE` / `FI_REMOTE_READ`); any failure becomes
//! an error reply and leaves the region exactly as it was. MQ work the
//! handler may not do itself (PSM is not re-entrant) comes back as a
//! [`TargetPost`] for the edge to post from its next progress step.

use super::ids::{Ids, Space};
use super::initiator::RmaKind;
use super::wire::{long_rma_tag, status_of, status_of_error, Args, Packet, Reply, Request};
use crate::engine::{OpBuffer, PeerAddr};
use crate::proto::mr::{MrAccess, MrTable, MrTarget};
use crate::{Error, ErrorKind, Result};

/// What a finished remote operation tells the target's counters and CQ
/// (`FI_RMA_EVENT`: `remote_write_cntr` / `remote_read_cntr`; with `data`,
/// a `FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA` completion).
///
/// For a short write the range is the last chunk's (as in C,
/// `prov/psm/src/psmx_rma.c`): the target does not see the operation's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RemoteEvent {
    pub(crate) kind: RmaKind,
    pub(crate) source: PeerAddr,
    pub(crate) key: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) data: Option<u64>,
}

/// MQ work for the edge, posted outside the handler.
#[derive(Debug)]
pub(crate) enum TargetPost {
    /// A long write: post an MQ receive (exact `tag`) into `buffer` (a
    /// pinned window of the region); its completion goes to
    /// [`RmaTarget::on_long_recv_done`] with `tid`.
    Recv {
        tid: u64,
        tag: u64,
        buffer: OpBuffer,
    },
    /// A long read: send `buffer` to `dest` with `tag`; when the send
    /// completes successfully, report `event`.
    Send {
        dest: PeerAddr,
        tag: u64,
        buffer: OpBuffer,
        event: RemoteEvent,
    },
}

/// The outcome of one request.
#[derive(Debug, Default)]
pub(crate) struct Handled {
    /// The AM reply to send from the handler: arguments, and the number of
    /// payload bytes at the start of the scratch buffer.
    pub(crate) reply: Option<(Args, usize)>,
    /// MQ work to post later.
    pub(crate) post: Option<TargetPost>,
    /// A remote event to report now.
    pub(crate) event: Option<RemoteEvent>,
    /// The request (a long write) was refused only because an engine
    /// still holds part of its range: the caller may hold it back and ask
    /// again once that transfer has ended, instead of sending the refusal.
    pub(crate) range_busy: bool,
}

/// The end of a long write: send `args` to `dest` as an AM **request**
/// (the handler that started it is long gone), and report `event`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LongDone {
    pub(crate) dest: PeerAddr,
    pub(crate) args: Args,
    pub(crate) event: Option<RemoteEvent>,
}

#[derive(Debug)]
struct LongWrite {
    source: PeerAddr,
    id: u64,
    target: MrTarget,
    data: Option<u64>,
}

/// The target side of a domain.
#[derive(Debug)]
pub(crate) struct RmaTarget {
    longs: Ids<LongWrite>,
    max_reply: usize,
}

fn reply(packet: Reply, payload: usize) -> Option<(Args, usize)> {
    Some((Packet::Reply(packet).encode(), payload))
}

impl RmaTarget {
    /// A target whose read replies carry at most `max_reply` bytes (the
    /// engine's `max_am_reply`); `salt` seeds the long-write ids.
    pub(crate) fn new(max_reply: usize, salt: u32) -> Self {
        RmaTarget {
            longs: Ids::new(Space::Target, salt),
            max_reply,
        }
    }

    /// Long writes waiting for their bytes.
    pub(crate) fn pending_long_writes(&self) -> usize {
        self.longs.len()
    }

    /// The ids of the long writes `peer` started that wait for their
    /// bytes (to cancel their receives when it dies).
    pub(crate) fn long_writes_from(&self, peer: PeerAddr) -> Vec<u64> {
        self.longs.ids_where(|lw| lw.source == peer)
    }

    /// Handles `req` from `source` with its `payload`. `table` is `None`
    /// when the domain has no RMA target endpoint: every request then gets
    /// an `FI_EOPNOTSUPP` reply. `scratch` holds a read reply's bytes (it
    /// keeps its capacity, so steady state allocates nothing).
    pub(crate) fn handle(
        &mut self,
        table: Option<&MrTable>,
        source: PeerAddr,
        req: &Request,
        payload: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Handled {
        let no_target = || {
            Error::new(
                ErrorKind::OpNotSupp,
                "RMA: this domain has no endpoint that is an RMA target",
            )
        };
        // `len` is what the target checks: a chunk's whole segment rest.
        let check = |key, offset, len: u32, needed| -> Result<MrTarget> {
            table
                .ok_or_else(no_target)?
                .check(key, offset, u64::from(len), needed)
        };
        match *req {
            Request::Write {
                id,
                key,
                offset,
                len,
                op_off,
                data,
            } => {
                let rest = op_off.map_or(len, |(_, rest)| rest);
                let result =
                    check(key, offset, rest, MrAccess::REMOTE_WRITE).and_then(|t| t.write(payload));
                let eom = op_off.is_none();
                let status = result.as_ref().err().map_or(0, status_of_error);
                let event = (eom && status == 0).then_some(RemoteEvent {
                    kind: RmaKind::Write,
                    source,
                    key,
                    offset,
                    len: u64::from(len),
                    data,
                });
                Handled {
                    reply: reply(
                        Reply::Write {
                            id,
                            status,
                            op_off: op_off.map_or(0, |(at, _)| u64::from(at)),
                            eom,
                        },
                        0,
                    ),
                    post: None,
                    event,
                    range_busy: false,
                }
            }
            Request::Read {
                id,
                key,
                offset,
                len,
                op_off,
                eom,
            } => {
                let n = len as usize;
                let result = if n > self.max_reply {
                    Err(Error::new(
                        ErrorKind::Inval,
                        format!(
                            "RMA read chunk of {n} bytes exceeds a reply ({} bytes)",
                            self.max_reply
                        ),
                    ))
                } else {
                    check(key, offset, op_off.1, MrAccess::REMOTE_READ).and_then(|t| {
                        scratch.clear();
                        scratch.resize(n, 0);
                        t.read(&mut scratch[..n])
                    })
                };
                let (status, bytes) = match &result {
                    Ok(()) => (0, n),
                    Err(e) => (status_of_error(e), 0),
                };
                Handled {
                    reply: reply(
                        Reply::Read {
                            id,
                            status,
                            op_off: u64::from(op_off.0),
                            eom,
                        },
                        bytes,
                    ),
                    post: None,
                    event: (eom && status == 0).then_some(RemoteEvent {
                        kind: RmaKind::Read,
                        source,
                        key,
                        offset,
                        len: u64::from(len),
                        data: None,
                    }),
                    range_busy: false,
                }
            }
            Request::WriteLong {
                id,
                key,
                offset,
                len,
                data,
            } => {
                let pinned = check(key, offset, len, MrAccess::REMOTE_WRITE)
                    .and_then(|t| t.pin(true).map(|buffer| (t, buffer)));
                let refused = |e: &Error| Handled {
                    reply: reply(
                        Reply::Write {
                            id,
                            status: status_of_error(e),
                            op_off: 0,
                            eom: true,
                        },
                        0,
                    ),
                    ..Handled::default()
                };
                let (target, buffer) = match pinned {
                    Ok(p) => p,
                    Err(e) => {
                        let mut h = refused(&e);
                        h.range_busy = e.kind() == ErrorKind::Busy;
                        return h;
                    }
                };
                let Some(tid) = self.longs.insert(LongWrite {
                    source,
                    id,
                    target,
                    data,
                }) else {
                    return refused(&Error::new(ErrorKind::Again, "too many long writes"));
                };
                Handled {
                    reply: reply(Reply::WriteGo { id, target: tid }, 0),
                    post: Some(TargetPost::Recv {
                        tid,
                        tag: long_rma_tag(tid),
                        buffer,
                    }),
                    event: None,
                    range_busy: false,
                }
            }
            Request::ReadLong {
                id,
                key,
                offset,
                len,
            } => {
                let pinned =
                    check(key, offset, len, MrAccess::REMOTE_READ).and_then(|t| t.pin(false));
                match pinned {
                    Ok(buffer) => Handled {
                        reply: None,
                        post: Some(TargetPost::Send {
                            dest: source,
                            tag: long_rma_tag(id),
                            buffer,
                            event: RemoteEvent {
                                kind: RmaKind::Read,
                                source,
                                key,
                                offset,
                                len: u64::from(len),
                                data: None,
                            },
                        }),
                        event: None,
                        range_busy: false,
                    },
                    Err(e) => Handled {
                        reply: reply(
                            Reply::Read {
                                id,
                                status: status_of_error(&e),
                                op_off: 0,
                                eom: true,
                            },
                            0,
                        ),
                        ..Handled::default()
                    },
                }
            }
        }
    }

    /// The MQ receive of long write `tid` completed: `from` is the source
    /// the engine reports, `result` the bytes received or the error. The
    /// window it held is released when the edge drops the buffer. `None`
    /// for an id that names no pending long write.
    pub(crate) fn on_long_recv_done(
        &mut self,
        tid: u64,
        from: Option<PeerAddr>,
        result: Result<usize>,
    ) -> Option<LongDone> {
        let lw = self.longs.remove(tid)?;
        let len = lw.target.len();
        let status = match result {
            // Tags are our own ids: another source means a forged send.
            Ok(_) if from.is_some_and(|f| f != lw.source) => status_of(ErrorKind::Io),
            Ok(n) if n == len => 0,
            Ok(_) => status_of(ErrorKind::Trunc),
            Err(e) => status_of_error(&e),
        };
        let event = (status == 0).then_some(RemoteEvent {
            kind: RmaKind::Write,
            source: lw.source,
            key: lw.target.key(),
            offset: lw.target.offset() as u64,
            len: len as u64,
            data: lw.data,
        });
        Some(LongDone {
            dest: lw.source,
            args: Packet::Reply(Reply::Write {
                id: lw.id,
                status,
                op_off: 0,
                eom: true,
            })
            .encode(),
            event,
        })
    }
}
