//! RMA on endpoints (`fi_write`, `fi_read`, `fi_writemsg`, `fi_readmsg`,
//! `fi_writedata`) as futures, and [`RmaOp`], the future of RMA and atomic
//! calls.
//!
//! Remote addresses are offsets into the target's memory region, named by
//! its key ([`Domain::register`](crate::fabric::Domain::register)). Like
//! sends, an operation is started before the call returns and its future
//! resolves to `(Result<()>, OpBuffer)`, the buffer handed back whatever
//! happened. Dropping the future is safe at any point: the operation runs
//! on, its buffer stays with the transport until the operation has ended,
//! then it is freed. Completion is *delivery complete*: a write's future
//! resolves once the target has every byte; a read's once the bytes are in
//! the buffer.

use super::outcome::{count, OpOutput};
use super::rma::{RemoteIov, RmaKind};
use super::rma_transport::RmaTransport;
use crate::engine::{OpBuffer, PeerAddr};
use crate::fabric::{Caps, CounterKind, Endpoint, EndpointCore, FiAddr};
use crate::reactor::OpKey;
use crate::{Error, ErrorKind, Result};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// One remote range of an RMA message (`struct fi_rma_iov`): `len` bytes
/// at `offset` in the region with `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmaIov {
    /// Offset in the target region.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// The region's key.
    pub key: u64,
}

/// The future of an RMA or atomic call: resolves to the result and the
/// buffer (the local buffer of a read or write, the result buffer of a
/// fetch or compare atomic, the operand of a plain atomic).
#[must_use = "the operation runs anyway; await the future for its result and buffer"]
#[derive(Debug)]
pub struct RmaOp {
    state: State,
}

#[derive(Debug)]
enum State {
    Posted {
        ep: Arc<EndpointCore>,
        rma: Arc<RmaTransport>,
        key: OpKey,
        counter: CounterKind,
    },
    Failed(Error, OpBuffer),
    Done,
}

impl RmaOp {
    pub(crate) fn posted(
        ep: Arc<EndpointCore>,
        rma: Arc<RmaTransport>,
        key: OpKey,
        counter: CounterKind,
    ) -> Self {
        RmaOp {
            state: State::Posted {
                ep,
                rma,
                key,
                counter,
            },
        }
    }

    pub(crate) fn failed(error: Error, buffer: OpBuffer) -> Self {
        RmaOp {
            state: State::Failed(error, buffer),
        }
    }

    /// Whether the call failed before anything was sent.
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed(..))
    }
}

impl Future for RmaOp {
    type Output = OpOutput<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            State::Posted {
                ep,
                rma,
                key,
                counter,
            } => {
                let (result, buffer) =
                    std::task::ready!(ep.domain().reactor().poll_completion(rma.done(), *key, cx));
                count(ep.counter(*counter), result.is_ok());
                this.state = State::Done;
                Poll::Ready((result, buffer))
            }
            State::Failed(..) => match std::mem::replace(&mut this.state, State::Done) {
                State::Failed(e, b) => Poll::Ready((Err(e), b)),
                _ => unreachable!("matched Failed above"),
            },
            State::Done => panic!("RmaOp polled after completion"),
        }
    }
}

impl Drop for RmaOp {
    fn drop(&mut self) {
        if let State::Posted { rma, key, .. } = &self.state {
            // The operation runs on; its value (and buffer) is dropped when
            // it completes.
            drop(rma.done().abandon(*key));
        }
    }
}

/// Checks that `ep` may initiate `what` of class `class` (`FI_RMA` or
/// `FI_ATOMIC`) in direction `dir` (`FI_READ` / `FI_WRITE`, or neither
/// refinement bit), and returns the transport and the peer.
pub(crate) fn prepare(
    ep: &Arc<EndpointCore>,
    class: Caps,
    dir: Caps,
    what: &str,
    dest: FiAddr,
) -> Result<(Arc<RmaTransport>, PeerAddr)> {
    ep.ensure_open()?;
    let caps = ep.caps();
    let dir_ok = caps.contains(dir) || !caps.intersects(Caps::READ | Caps::WRITE);
    if !caps.contains(class) || !caps.initiates_rma() || !dir_ok {
        return Err(Error::new(
            ErrorKind::OpNotSupp,
            format!(
                "{what}: the endpoint was opened with {caps} and needs {class} with {dir} (or no \
                 FI_READ/FI_WRITE/FI_REMOTE_* bits)"
            ),
        ));
    }
    let rma = ep.domain().rma()?.clone();
    let peer = ep.resolve(dest)?;
    Ok((rma, peer))
}

impl Endpoint {
    /// `fi_write`: writes `buf` to `remote_offset` of the region with
    /// `key` at `dest`. Needs `FI_RMA` (with `FI_WRITE` if the endpoint
    /// has direction bits).
    ///
    /// ```no_run
    /// # async fn f(ep: psmrail::fabric::Endpoint, dest: psmrail::fabric::FiAddr) {
    /// let (result, buf) = ep.write(dest, vec![1u8; 64], 0, 1).await;
    /// result.unwrap();
    /// assert_eq!(buf.len(), 64);
    /// # }
    /// ```
    pub fn write(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> RmaOp {
        let buf = buf.into();
        let iov = [RmaIov {
            offset: remote_offset,
            len: buf.len() as u64,
            key,
        }];
        self.rma(RmaKind::Write, dest, buf, &iov, None)
    }

    /// `fi_writedata`: [`write`](Self::write) with remote CQ data: the
    /// target endpoint's receive CQ gets an `FI_REMOTE_WRITE | FI_RMA |
    /// FI_REMOTE_CQ_DATA` entry with `data`.
    pub fn writedata(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        data: u64,
    ) -> RmaOp {
        let buf = buf.into();
        let iov = [RmaIov {
            offset: remote_offset,
            len: buf.len() as u64,
            key,
        }];
        self.rma(RmaKind::Write, dest, buf, &iov, Some(data))
    }

    /// `fi_read`: reads `buf.len()` bytes at `remote_offset` of the region
    /// with `key` at `dest` into `buf` (which must be writable).
    pub fn read(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> RmaOp {
        let buf = buf.into();
        let iov = [RmaIov {
            offset: remote_offset,
            len: buf.len() as u64,
            key,
        }];
        self.rma(RmaKind::Read, dest, buf, &iov, None)
    }

    /// `fi_writemsg`: writes `buf`, in order, to the remote ranges
    /// `remote` (their lengths must add up to `buf.len()`), with optional
    /// remote CQ data.
    pub fn writemsg(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> RmaOp {
        self.rma(RmaKind::Write, dest, buf.into(), remote, data)
    }

    /// `fi_readmsg`: fills `buf`, in order, from the remote ranges
    /// `remote` (their lengths must add up to `buf.len()`).
    pub fn readmsg(&self, dest: FiAddr, buf: impl Into<OpBuffer>, remote: &[RmaIov]) -> RmaOp {
        self.rma(RmaKind::Read, dest, buf.into(), remote, None)
    }

    fn rma(
        &self,
        kind: RmaKind,
        dest: FiAddr,
        buf: OpBuffer,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> RmaOp {
        let (dir, counter, what) = match kind {
            RmaKind::Write => (Caps::WRITE, CounterKind::Write, "RMA write"),
            RmaKind::Read => (Caps::READ, CounterKind::Read, "RMA read"),
        };
        let (rma, peer) = match prepare(&self.core, Caps::RMA, dir, what, dest) {
            Ok(p) => p,
            Err(e) => return RmaOp::failed(e, buf),
        };
        let iovs: Vec<RemoteIov> = remote
            .iter()
            .map(|r| RemoteIov {
                key: r.key,
                offset: r.offset,
                len: r.len,
            })
            .collect();
        match rma.start_rma(kind, peer, buf, &iovs, data) {
            Ok(key) => RmaOp::posted(self.core.clone(), rma, key, counter),
            Err((e, buf)) => RmaOp::failed(e, buf),
        }
    }
}
