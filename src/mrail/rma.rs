//! RMA on an [`MrailEndpoint`]: `read`, `write`, `writedata`, `readmsg`
//! and `writemsg` with the psm endpoint's names, arguments and outputs,
//! striped over the rails, and [`MrailRmaOp`], their future.
//!
//! # How an operation is cut
//!
//! The size policy (`FI_OFI_MRAIL_CONFIG`) picks the rails as for a
//! message of the same length: one rail (fixed or round-robin) or every
//! live rail, each with its share by rate ([`StripePlan`], weighted as
//! messages are). The stripes are laid over the remote ranges
//! ([`rma_plan::cut`]) and each (stripe, range) overlap is one rail RMA
//! operation with its rail's key and a window of the user's buffer
//! (the `SharedBuffer` of `mrail/region.rs`): no copy. The rail futures are joined by the mrail
//! combinator (`StripeJoin`). Any length works, zero and lengths below
//! the rail count included (the plan leaves out empty stripes; a
//! zero-length operation is one empty rail operation per remote range, so
//! the target still checks the key).
//!
//! # A refused write changes nothing
//!
//! A rail's target checks key, range and rights before it touches a byte,
//! but only for the bytes that rail carries. So a write that goes out as
//! more than one rail operation first sends, on every rail it will use,
//! one zero-length write per remote range at that range's end: the target
//! checks the rail's key, the range's end and the write right. Only when
//! every check passed do the stripes go; a bad key, range or right on any
//! rail fails the write with `FI_EACCES` naming the rail and leaves the
//! target's memory as it was. (Reads change nothing at the target and go at
//! once.) A write that fits one rail operation needs no check round.
//!
//! # Completion
//!
//! The operation completes when every stripe has: delivery complete, as
//! for psm writes. Length, counters (`FI_WRITE`, `FI_READ`) and errors are
//! the whole operation's: counted once. `writedata`'s remote CQ data
//! travels in an mrail frame sent after the last stripe landed, so the
//! target's receive CQ reports `FI_REMOTE_WRITE | FI_RMA |
//! FI_REMOTE_CQ_DATA` only once all the bytes are there.
//!
//! # Cancel safety
//!
//! Dropping an [`MrailRmaOp`] at any point is safe. Dropped while its
//! checks are in flight, a write sends no data. Dropped later, its rail
//! operations run on; each holds its window of the buffer, which is freed
//! when the last rail is done with it. No remote CQ data is sent for a
//! dropped `writedata`.

use super::av::PeerEntry;
use super::core::rma_plan::{self, RmaPiece, RmaPlanError};
use super::core::stripe::StripePlan;
use super::endpoint::{MrailEndpoint, MrailEndpointCore};
use super::region::SharedBuffer;
use super::stripe_join::{rail_lost, Joined, PartOutput, StripeJoin};
use crate::engine::OpBuffer;
use crate::fabric::{Caps, FiAddr};
use crate::ops::{OpOutput, RmaIov, RmaOp};
use crate::proto::rma::RmaKind;
use crate::{Error, ErrorKind, Result};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The future of an mrail RMA call: resolves to the result and the local
/// buffer (filled, for a read) once every rail operation is done.
#[must_use = "the operation runs anyway; await the future for its result and buffer"]
pub struct MrailRmaOp {
    state: State,
}

impl std::fmt::Debug for MrailRmaOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Failed(_) => "failed",
            State::Single { .. } => "single",
            State::Checking { .. } => "checking",
            State::Striped { .. } => "striped",
            State::Done => "done",
        };
        f.debug_struct("MrailRmaOp").field("state", &state).finish()
    }
}

type Join = StripeJoin<RailRma>;

/// One remote range's key on every rail, in rail order.
type RailKeys = Arc<[u64]>;

enum State {
    Failed(Box<(Error, OpBuffer)>),
    /// One rail operation carries the whole buffer.
    Single {
        op: RmaOp,
        rail: usize,
        end: End,
        /// What a failover needs to start it again on another rail.
        again: Box<Again>,
    },
    /// A write's checks are in flight; its stripes wait.
    Checking {
        checks: Join,
        stripes: Box<Stripes>,
    },
    /// The stripes are in flight.
    Striped {
        join: Join,
        stripes: Box<Stripes>,
    },
    Done,
}

/// A one-rail operation, to start again on another rail when its own
/// loses the peer.
struct Again {
    kind: RmaKind,
    piece: RmaPiece,
    keys: Vec<RailKeys>,
    peer: Arc<PeerEntry>,
}

/// What finishing needs: the counter, the remote CQ data.
struct End {
    ep: Arc<MrailEndpointCore>,
    write: bool,
    len: u64,
    /// `writedata`: the peer and the data to send once all has landed.
    data: Option<(Arc<PeerEntry>, u64)>,
}

/// The stripes of an operation, ready to go.
struct Stripes {
    kind: RmaKind,
    pieces: Vec<RmaPiece>,
    /// A write's checks, as zero-length pieces.
    checks: Vec<RmaPiece>,
    /// Where the operation's first remote range starts, and its key (what
    /// an error names: a check's own offset and length are not the
    /// user's).
    remote_start: Option<(u64, u64)>,
    /// Per remote range: its rail keys.
    keys: Vec<RailKeys>,
    shared: Arc<SharedBuffer>,
    peer: Arc<PeerEntry>,
    end: End,
    /// The operation's `tracing` span (`mrail.rma`, debug level) and one
    /// child per piece (`mrail.rma_stripe`, trace level); disabled, they
    /// cost a level check each.
    span: tracing::Span,
    _piece_spans: Vec<tracing::Span>,
}

/// One rail RMA operation as a part of the join.
struct RailRma {
    rail: usize,
    len: usize,
    op: RmaOp,
}

impl Future for RailRma {
    type Output = PartOutput;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PartOutput> {
        let this = &mut *self;
        let (result, buffer) = std::task::ready!(Pin::new(&mut this.op).poll(cx));
        drop(buffer);
        Poll::Ready(PartOutput {
            rail: this.rail,
            result: result.map(|()| this.len).map_err(|e| on_rail(this.rail, e)),
        })
    }
}

/// The rail operation of one piece on `rail` (failed at once when the
/// rail is not connected to the peer).
fn rail_rma(
    ep: &MrailEndpointCore,
    rail: usize,
    kind: RmaKind,
    peer: &PeerEntry,
    buf: OpBuffer,
    iov: RmaIov,
) -> RmaOp {
    match peer.on_rail(rail) {
        Ok(p) => ep.rails[rail].rma_to_peer(kind, p, buf, &[iov]),
        Err(e) => RmaOp::failed(e, buf),
    }
}

#[cold]
fn on_rail(rail: usize, e: Error) -> Error {
    Error::with_source(e.kind(), format!("rail {rail}: {}", e.message()), e)
}

impl Stripes {
    /// A write's check failed with `e`: the error names the operation
    /// the user posted (its length, where it starts, its key), then what
    /// the rail's target said.
    #[cold]
    fn refused(&self, e: Error) -> Error {
        let (offset, key) = self.remote_start.unwrap_or_default();
        let message = format!(
            "RMA write of {} bytes at offset {offset:#x} of key {key:#x} refused before any byte moved: {}",
            self.end.len,
            e.message()
        );
        Error::with_source(e.kind(), message, e)
    }

    /// Starts piece `p` on `rail` (a check when `check`).
    fn issue(&self, p: &RmaPiece, rail: usize, check: bool) -> RailRma {
        let (kind, window) = if check {
            (RmaKind::Write, OpBuffer::empty())
        } else {
            let w = self
                .shared
                .window(p.local_offset, p.len)
                .expect("pieces lie inside the buffer");
            self.end
                .ep
                .driver
                .count_rma_part(rail, p.len, self.kind == RmaKind::Write);
            (self.kind, w)
        };
        let iov = RmaIov {
            offset: p.remote_offset,
            len: p.len,
            key: self.keys[p.iov][rail],
        };
        RailRma {
            rail,
            len: p.len as usize,
            op: rail_rma(&self.end.ep, rail, kind, &self.peer, window, iov),
        }
    }

    /// Starts every piece on its rail.
    fn launch(self: Box<Self>) -> State {
        let parts: Vec<RailRma> = self
            .pieces
            .iter()
            .map(|p| self.issue(p, p.rail, false))
            .collect();
        State::Striped {
            join: StripeJoin::with_failover(parts),
            stripes: self,
        }
    }

    /// Failover: each part of `join` whose rail lost the peer goes again
    /// on another rail that reaches it; with none left, the operation
    /// fails with the rail's error.
    fn recover(&self, join: &mut Join, check: bool) {
        let stalled: Vec<(usize, Error)> = join
            .stalled()
            .map(|(k, e)| (k, Error::new(e.kind(), e.message().to_owned())))
            .collect();
        let list = if check { &self.checks } else { &self.pieces };
        for (k, e) in stalled {
            let Some(p) = list.get(k) else { continue };
            let Some(rail) = self.end.ep.driver.rail_lost_for_rma(&self.peer, p.rail) else {
                join.fail_open(&e);
                return;
            };
            let attempt = self.issue(p, rail, check);
            if join.add_attempt(k, attempt).is_ok() {
                self.end.ep.driver.count_retransmit(rail);
            }
        }
    }
}

impl End {
    /// Counts the operation once and, for `writedata`, tells the target.
    fn finish(self, mut result: Result<()>, buffer: OpBuffer) -> OpOutput<()> {
        if result.is_ok() {
            if let Some((peer, data)) = &self.data {
                result = self.ep.driver.send_write_data(peer, *data, self.len);
            }
        }
        if let Some(c) = self.ep.driver.rma_counter(self.write) {
            if result.is_ok() {
                c.inc();
            } else {
                c.inc_err();
            }
        }
        if result.is_err() {
            self.ep.driver.op_stats().error();
        }
        (result, buffer)
    }
}

/// The buffer back from the shared one (every window is gone once the
/// join is done).
fn reclaim(shared: Arc<SharedBuffer>) -> OpBuffer {
    SharedBuffer::reclaim(shared).unwrap_or_else(|_| OpBuffer::empty())
}

fn joined_result(j: Joined) -> Result<()> {
    match j.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Future for MrailRmaOp {
    type Output = OpOutput<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpOutput<()>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Single {
                    op,
                    rail,
                    end,
                    again,
                } => {
                    let (result, buffer) = std::task::ready!(Pin::new(&mut *op).poll(cx));
                    if let Err(e) = &result {
                        // Failover: the same operation on a rail that
                        // still reaches the peer (the buffer is back).
                        let to = rail_lost(e.kind())
                            .then(|| end.ep.driver.rail_lost_for_rma(&again.peer, *rail))
                            .flatten();
                        if let Some(to) = to {
                            let p = again.piece;
                            let iov = RmaIov {
                                offset: p.remote_offset,
                                len: p.len,
                                key: again.keys[p.iov][to],
                            };
                            end.ep.driver.count_retransmit(to);
                            *op = rail_rma(&end.ep, to, again.kind, &again.peer, buffer, iov);
                            *rail = to;
                            continue;
                        }
                    }
                    let rail = *rail;
                    let State::Single { end, .. } = std::mem::replace(&mut this.state, State::Done)
                    else {
                        unreachable!("matched Single above")
                    };
                    return Poll::Ready(end.finish(result.map_err(|e| on_rail(rail, e)), buffer));
                }
                State::Checking { checks, stripes } => {
                    let joined = match checks.poll_join(cx) {
                        Poll::Ready(j) => j,
                        Poll::Pending => {
                            stripes.recover(checks, true);
                            return Poll::Pending;
                        }
                    };
                    let State::Checking { stripes, .. } =
                        std::mem::replace(&mut this.state, State::Done)
                    else {
                        unreachable!("matched Checking above")
                    };
                    match joined_result(joined) {
                        Ok(()) => this.state = stripes.launch(),
                        Err(e) => {
                            let e = stripes.refused(e);
                            let Stripes { shared, end, .. } = *stripes;
                            return Poll::Ready(end.finish(Err(e), reclaim(shared)));
                        }
                    }
                }
                State::Striped { join, stripes } => {
                    let joined = match join.poll_join(cx) {
                        Poll::Ready(j) => j,
                        Poll::Pending => {
                            stripes.recover(join, false);
                            return Poll::Pending;
                        }
                    };
                    let State::Striped { join, stripes } =
                        std::mem::replace(&mut this.state, State::Done)
                    else {
                        unreachable!("matched Striped above")
                    };
                    drop(join);
                    let Stripes {
                        shared, end, span, ..
                    } = *stripes;
                    let result = joined_result(joined);
                    span.in_scope(|| match &result {
                        Ok(()) => tracing::debug!("striped RMA done"),
                        Err(e) => tracing::debug!(error = %e, "striped RMA failed"),
                    });
                    return Poll::Ready(end.finish(result, reclaim(shared)));
                }
                State::Failed(_) => {
                    let State::Failed(f) = std::mem::replace(&mut this.state, State::Done) else {
                        unreachable!("matched Failed above")
                    };
                    let (e, b) = *f;
                    return Poll::Ready((Err(e), b));
                }
                State::Done => {
                    return Poll::Ready((
                        Err(Error::new(
                            ErrorKind::OpBadState,
                            "operation polled after completion",
                        )),
                        OpBuffer::empty(),
                    ))
                }
            }
        }
    }
}

impl MrailRmaOp {
    fn failed(e: Error, buffer: OpBuffer) -> Self {
        MrailRmaOp {
            state: State::Failed(Box::new((e, buffer))),
        }
    }

    /// Whether the call failed before anything was sent.
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed(_))
    }
}

/// Checks what the call itself can get wrong; the peer and the rail keys
/// of each remote range.
fn prepare(
    ep: &MrailEndpoint,
    kind: RmaKind,
    dest: FiAddr,
    buf: &OpBuffer,
    remote: &[RmaIov],
) -> Result<(Arc<PeerEntry>, Vec<RailKeys>)> {
    let core = &ep.core;
    core.ensure_open()?;
    let (dir, what) = match kind {
        RmaKind::Write => (Caps::WRITE, "RMA write"),
        RmaKind::Read => (Caps::READ, "RMA read"),
    };
    let caps = core.caps;
    let dir_ok = caps.contains(dir) || !caps.intersects(Caps::READ | Caps::WRITE);
    if !caps.contains(Caps::RMA) || !dir_ok {
        return Err(Error::new(
            ErrorKind::OpNotSupp,
            format!(
                "{what}: the endpoint was opened with {caps} and needs FI_RMA with {dir} (or no \
                 FI_READ/FI_WRITE bits)"
            ),
        ));
    }
    if kind == RmaKind::Read && !buf.is_writable() {
        return Err(Error::new(
            ErrorKind::Inval,
            format!("{what}: the buffer is shared read-only `Bytes`; read into a Vec, BytesMut or region"),
        ));
    }
    let (_, peer) = core.av.core.peer(dest)?;
    let keys = remote
        .iter()
        .map(|r| core.domain.mapped.rail_keys(r.key))
        .collect::<Result<Vec<_>>>()?;
    Ok((peer, keys))
}

/// The rail operations of an operation of `len` bytes to `remote`.
fn plan(
    ep: &MrailEndpoint,
    peer: &Arc<PeerEntry>,
    len: u64,
    remote: &[RmaIov],
) -> Result<Vec<RmaPiece>> {
    let (mask, weights) = ep
        .core
        .driver
        .rma_rails(peer, len)
        .map_err(|e| Error::new(e.kind(), format!("RMA: {}", e.message())))?;
    let plan = StripePlan::from_weights(len, mask, weights)
        .or_else(|| StripePlan::from_mask(len, mask))
        .ok_or_else(|| Error::new(ErrorKind::Other, "ofi_mrail: RMA: no stripe plan"))?;
    let ranges: Vec<(u64, u64)> = remote.iter().map(|r| (r.offset, r.len)).collect();
    rma_plan::cut(&plan, &ranges, mask.trailing_zeros() as usize).map_err(|e| {
        let kind = match e {
            RmaPlanError::Overflow { .. } => ErrorKind::Access,
            RmaPlanError::LengthMismatch { .. } | RmaPlanError::NoRange => ErrorKind::Inval,
        };
        Error::new(kind, format!("ofi_mrail: RMA: {e}"))
    })
}

impl MrailEndpoint {
    /// `fi_write`: writes `buf` to `remote_offset` of the region with
    /// (mapped) `key` at `dest`, striped over the rails. Needs `FI_RMA`
    /// (with `FI_WRITE` if the endpoint has direction bits). `key` comes
    /// from [`MrailDomain::map_raw`](super::MrailDomain::map_raw).
    ///
    /// ```
    /// use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
    /// use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Hints, MrAccess, Provider};
    /// use psmrail::mrail::MrailFabric;
    ///
    /// let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
    ///     .delay(std::time::Duration::ZERO).build().unwrap();
    /// let rails = MrailConfig::builder()
    ///     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap())
    ///     .build();
    /// let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
    ///     .caps(Caps::MSG | Caps::TAGGED | Caps::RMA).config(psm).mrail_config(rails);
    /// let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = MrailFabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 1 << 20], MrAccess::REMOTE_WRITE, None)?;
    /// let key = domain.map_raw(&mr.raw_key())?;
    /// // 1 MiB over both rails, into the region.
    /// let (done, _) = domain.reactor().block_on(ep.write(me, vec![7u8; 1 << 20], 0, key));
    /// done?;
    /// let mut back = [0u8; 4];
    /// mr.read_at((1 << 20) - 4, &mut back)?;
    /// assert_eq!(back, [7; 4]);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: its stripes run
    /// to completion at the target (the remote region may still change),
    /// and the buffer stays inside the reactor until every rail is done
    /// with it, then it is freed. `mem::forget` is safe too.
    pub fn write(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> MrailRmaOp {
        self.rma_one(RmaKind::Write, dest, buf.into(), remote_offset, key, None)
    }

    /// `fi_writedata`: [`write`](Self::write) with remote CQ data: once
    /// every stripe has landed, the target endpoint's receive CQ gets an
    /// `FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA` entry with `data`
    /// and the write's length.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: its stripes run
    /// to completion at the target (the remote region may still change),
    /// and the buffer stays inside the reactor until every rail is done
    /// with it, then it is freed. `mem::forget` is safe too.
    pub fn writedata(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        data: u64,
    ) -> MrailRmaOp {
        let buf = buf.into();
        self.rma_one(RmaKind::Write, dest, buf, remote_offset, key, Some(data))
    }

    /// `fi_read`: reads `buf.len()` bytes at `remote_offset` of the region
    /// with (mapped) `key` at `dest` into `buf` (which must be writable),
    /// striped over the rails.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: its stripes run
    /// to completion at the target (the remote region may still change),
    /// and the buffer stays inside the reactor until every rail is done
    /// with it, then it is freed. `mem::forget` is safe too.
    pub fn read(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> MrailRmaOp {
        self.rma_one(RmaKind::Read, dest, buf.into(), remote_offset, key, None)
    }

    /// `fi_writemsg`: writes `buf`, in order, to the remote ranges
    /// `remote` (their lengths must add up to `buf.len()`), with optional
    /// remote CQ data.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: its stripes run
    /// to completion at the target (the remote region may still change),
    /// and the buffer stays inside the reactor until every rail is done
    /// with it, then it is freed. `mem::forget` is safe too.
    pub fn writemsg(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> MrailRmaOp {
        self.rma(RmaKind::Write, dest, buf.into(), remote, data)
    }

    /// `fi_readmsg`: fills `buf`, in order, from the remote ranges
    /// `remote` (their lengths must add up to `buf.len()`).
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: its stripes run
    /// to completion at the target (the remote region may still change),
    /// and the buffer stays inside the reactor until every rail is done
    /// with it, then it is freed. `mem::forget` is safe too.
    pub fn readmsg(&self, dest: FiAddr, buf: impl Into<OpBuffer>, remote: &[RmaIov]) -> MrailRmaOp {
        self.rma(RmaKind::Read, dest, buf.into(), remote, None)
    }

    fn rma_one(
        &self,
        kind: RmaKind,
        dest: FiAddr,
        buf: OpBuffer,
        remote_offset: u64,
        key: u64,
        data: Option<u64>,
    ) -> MrailRmaOp {
        let iov = [RmaIov {
            offset: remote_offset,
            len: buf.len() as u64,
            key,
        }];
        self.rma(kind, dest, buf, &iov, data)
    }

    fn rma(
        &self,
        kind: RmaKind,
        dest: FiAddr,
        buf: OpBuffer,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> MrailRmaOp {
        let (peer, keys) = match prepare(self, kind, dest, &buf, remote) {
            Ok(v) => v,
            Err(e) => return MrailRmaOp::failed(e, buf),
        };
        let len = buf.len() as u64;
        let pieces = match plan(self, &peer, len, remote) {
            Ok(p) => p,
            Err(e) => return MrailRmaOp::failed(e, buf),
        };
        let write = kind == RmaKind::Write;
        let end = End {
            ep: self.core.clone(),
            write,
            len,
            data: data.map(|d| (peer.clone(), d)),
        };
        if let [p] = pieces[..] {
            // One rail operation: its target checks the whole range.
            let iov = RmaIov {
                offset: p.remote_offset,
                len: p.len,
                key: keys[p.iov][p.rail],
            };
            self.core.driver.count_rma_part(p.rail, p.len, write);
            let op = rail_rma(&self.core, p.rail, kind, &peer, buf, iov);
            return MrailRmaOp {
                state: State::Single {
                    op,
                    rail: p.rail,
                    end,
                    again: Box::new(Again {
                        kind,
                        piece: p,
                        keys,
                        peer,
                    }),
                },
            };
        }
        let shared = match SharedBuffer::share(buf, !write) {
            Ok(s) => s,
            Err(buf) => {
                let e = Error::new(ErrorKind::Inval, "RMA: the buffer is not writable");
                return MrailRmaOp::failed(e, buf);
            }
        };
        let span = tracing::debug_span!("mrail.rma", write, len, pieces = pieces.len());
        let piece_spans = pieces
            .iter()
            .map(|p| {
                tracing::trace_span!(
                    parent: &span,
                    "mrail.rma_stripe",
                    rail = p.rail,
                    local_offset = p.local_offset,
                    len = p.len,
                    remote_offset = p.remote_offset
                )
            })
            .collect();
        let mut stripes = Box::new(Stripes {
            kind,
            pieces,
            checks: Vec::new(),
            remote_start: remote.first().map(|r| (r.offset, r.key)),
            keys,
            shared,
            peer,
            end,
            span,
            _piece_spans: piece_spans,
        });
        let state = if write {
            stripes.checks = checks(&stripes.pieces, remote);
            let parts: Vec<RailRma> = stripes
                .checks
                .iter()
                .map(|c| stripes.issue(c, c.rail, true))
                .collect();
            State::Checking {
                checks: StripeJoin::with_failover(parts),
                stripes,
            }
        } else {
            stripes.launch()
        };
        MrailRmaOp { state }
    }
}

/// A write's checks: on every rail it uses, one zero-length write per
/// remote range, at the range's end (module docs), as zero-length pieces.
/// (A zero-length rail operation names one range only, so each range is
/// its own.)
fn checks(pieces: &[RmaPiece], remote: &[RmaIov]) -> Vec<RmaPiece> {
    let rails: BTreeSet<usize> = pieces.iter().map(|p| p.rail).collect();
    rails
        .into_iter()
        .flat_map(|rail| {
            remote.iter().enumerate().map(move |(iov, r)| RmaPiece {
                rail,
                local_offset: 0,
                len: 0,
                iov,
                // `cut` refused ranges whose end overflows.
                remote_offset: r.offset + r.len,
            })
        })
        .collect()
}

crate::ops::impl_rma_endpoint!(MrailEndpoint, MrailRmaOp);
