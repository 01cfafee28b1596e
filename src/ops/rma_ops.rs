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
//!
//! [`Endpoint::post_write`] and [`Endpoint::post_read`] are the libfabric
//! way instead (used by triggered operations): the completion goes to the
//! endpoint's transmit CQ with a context, through a small route registered
//! as the waker of the operation's slot in the transport's `done` table
//! (as `post.rs` does for messages).

use super::op_span::{OpDesc, OpSpan, Provider};
use super::outcome::{count, OpOutput};
use crate::engine::{OpBuffer, PeerAddr, PostError};
use crate::fabric::{
    Caps, CompletionFlags, CounterKind, CqEntry, CqErrEntry, Direction, Endpoint, EndpointCore,
    FiAddr,
};
use crate::proto::rma::{RemoteIov, RmaKind};
use crate::proto::rma_transport::{Done, RmaTransport};
use crate::reactor::OpKey;
use crate::{Error, ErrorKind, Result};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

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
        span: OpSpan,
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
                span: OpSpan::default(),
            },
        }
    }

    /// Opens the operation's span, if someone traces it.
    pub(crate) fn traced(mut self, d: impl FnOnce() -> OpDesc) -> Self {
        if let State::Posted { span, .. } = &mut self.state {
            *span = OpSpan::new(Provider::Psm, d);
        }
        self
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

    /// Hands the started operation to a route delivering its completion to
    /// the transmit CQ with `context`; a call that failed at once gives its
    /// error and buffer back instead.
    fn route(mut self, context: u64, flags: CompletionFlags) -> std::result::Result<(), PostError> {
        // Taken out of `self` so that its `Drop` does not abandon the key.
        match std::mem::replace(&mut self.state, State::Done) {
            State::Posted {
                ep,
                rma,
                key,
                counter,
                span,
            } => {
                let route = Arc::new(RmaRoute {
                    ep,
                    rma,
                    key,
                    counter,
                    context,
                    flags,
                    span: std::sync::Mutex::new(span),
                });
                let waker = Waker::from(route.clone());
                let mut cx = Context::from_waker(&waker);
                if let Poll::Ready(done) = route.rma.done().poll_take(key, &mut cx) {
                    route.deliver(done);
                }
                Ok(())
            }
            State::Failed(error, buffer) => Err(PostError { error, buffer }),
            State::Done => unreachable!("a fresh RmaOp is never Done"),
        }
    }
}

/// The waker of a posted RMA operation's slot: turns its completion into a
/// CQ entry and a counter bump. Never calls into the transport or the
/// engine, so it may run inside their progress.
struct RmaRoute {
    ep: Arc<EndpointCore>,
    rma: Arc<RmaTransport>,
    key: OpKey,
    counter: CounterKind,
    context: u64,
    flags: CompletionFlags,
    /// The operation's span, ended at delivery.
    span: std::sync::Mutex<OpSpan>,
}

impl Wake for RmaRoute {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(done) = self.rma.done().try_take(self.key) {
            self.deliver(done);
        }
    }
}

impl RmaRoute {
    fn deliver(&self, (result, buffer): Done) {
        count(self.ep.counter(self.counter), result.is_ok());
        if result.is_err() {
            self.ep.stats().error();
        }
        let len = buffer.len();
        self.span
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .done(&result, |_| len);
        let Some(cq) = self.ep.cq(Direction::Transmit) else {
            return;
        };
        match result {
            Ok(()) => cq.push(CqEntry {
                context: self.context,
                flags: self.flags,
                len: buffer.len(),
                buffer: Some(buffer),
                offset: 0,
                data: 0,
                tag: 0,
                source: FiAddr::UNSPEC,
            }),
            Err(error) => cq.push_err(CqErrEntry {
                context: self.context,
                flags: self.flags,
                len: 0,
                buffer: Some(buffer),
                olen: 0,
                tag: 0,
                data: 0,
                error,
                prov_errno: CqErrEntry::PROV_INTERNAL,
            }),
        }
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
                span,
            } => {
                let polled = {
                    let _entered = span.enter();
                    ep.domain().reactor().poll_completion(rma.done(), *key, cx)
                };
                let (result, buffer) = std::task::ready!(polled);
                count(ep.counter(*counter), result.is_ok());
                if result.is_err() {
                    ep.stats().error();
                }
                let len = buffer.len();
                span.done(&result, |_| len);
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
    let rma = transport(ep, class, dir, what)?;
    let peer = ep.resolve(dest)?;
    ep.domain().peers().refuse(peer, what)?;
    Ok((rma, peer))
}

/// [`prepare`] without the address: the capability checks and the
/// domain's RMA transport.
fn transport(
    ep: &Arc<EndpointCore>,
    class: Caps,
    dir: Caps,
    what: &str,
) -> Result<Arc<RmaTransport>> {
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
    Ok(ep.domain().rma()?.clone())
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
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    pub fn write(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> RmaOp {
        self.rma_one(RmaKind::Write, dest, buf.into(), remote_offset, key, None)
    }

    /// `fi_writedata`: [`write`](Self::write) with remote CQ data: the
    /// target endpoint's receive CQ gets an `FI_REMOTE_WRITE | FI_RMA |
    /// FI_REMOTE_CQ_DATA` entry with `data`.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    pub fn writedata(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        data: u64,
    ) -> RmaOp {
        self.rma_one(
            RmaKind::Write,
            dest,
            buf.into(),
            remote_offset,
            key,
            Some(data),
        )
    }

    /// `fi_read`: reads `buf.len()` bytes at `remote_offset` of the region
    /// with `key` at `dest` into `buf` (which must be writable).
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    pub fn read(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> RmaOp {
        self.rma_one(RmaKind::Read, dest, buf.into(), remote_offset, key, None)
    }

    /// One contiguous remote range the size of `buf` (`write`, `writedata`,
    /// `read`).
    fn rma_one(
        &self,
        kind: RmaKind,
        dest: FiAddr,
        buf: OpBuffer,
        remote_offset: u64,
        key: u64,
        data: Option<u64>,
    ) -> RmaOp {
        let iov = [RmaIov {
            offset: remote_offset,
            len: buf.len() as u64,
            key,
        }];
        self.rma(kind, dest, buf, &iov, data)
    }

    /// `fi_writemsg`: writes `buf`, in order, to the remote ranges
    /// `remote` (their lengths must add up to `buf.len()`), with optional
    /// remote CQ data.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
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
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    pub fn readmsg(&self, dest: FiAddr, buf: impl Into<OpBuffer>, remote: &[RmaIov]) -> RmaOp {
        self.rma(RmaKind::Read, dest, buf.into(), remote, None)
    }

    /// `fi_write` with a context: [`write`](Self::write) whose completion
    /// goes to the endpoint's transmit CQ (`FI_WRITE | FI_RMA`, with
    /// `context` and the buffer) and its write counter, like
    /// [`post_send`](Self::post_send).
    ///
    /// ```no_run
    /// # fn f(ep: psmrail::fabric::Endpoint, cq: psmrail::fabric::CompletionQueue,
    /// #      dest: psmrail::fabric::FiAddr) -> Result<(), Box<dyn std::error::Error>> {
    /// ep.post_write(dest, vec![1u8; 64], 0, 1, 42).map_err(|e| e.error)?;
    /// let e = loop {
    ///     if let Some(e) = cq.read()? { break e; }
    /// };
    /// assert_eq!((e.context, e.len), (42, 64));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// What [`write`](Self::write) refuses before sending (a closed
    /// endpoint, missing caps, an unknown `dest`); the buffer comes back.
    /// Later failures (such as a bad key, `FI_EACCES`) are error entries.
    pub fn post_write(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        context: u64,
    ) -> std::result::Result<(), PostError> {
        self.write(dest, buf, remote_offset, key)
            .route(context, CompletionFlags::WRITE | CompletionFlags::RMA)
    }

    /// `fi_read` with a context: [`read`](Self::read) whose completion goes
    /// to the endpoint's transmit CQ (`FI_READ | FI_RMA`, with `context` and
    /// the filled buffer) and its read counter.
    ///
    /// # Errors
    /// As [`post_write`](Self::post_write).
    pub fn post_read(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        context: u64,
    ) -> std::result::Result<(), PostError> {
        self.read(dest, buf, remote_offset, key)
            .route(context, CompletionFlags::READ | CompletionFlags::RMA)
    }

    fn rma(
        &self,
        kind: RmaKind,
        dest: FiAddr,
        buf: OpBuffer,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> RmaOp {
        let (dir, what) = match kind {
            RmaKind::Write => (Caps::WRITE, "RMA write"),
            RmaKind::Read => (Caps::READ, "RMA read"),
        };
        let (rma, peer) = match prepare(&self.core, Caps::RMA, dir, what, dest) {
            Ok(p) => p,
            Err(e) => return RmaOp::failed(e, buf),
        };
        let len = buf.len();
        self.start_rma(&rma, kind, peer, buf, remote, data)
            .traced(|| OpDesc {
                kind: match (kind, data) {
                    (RmaKind::Write, None) => "write",
                    (RmaKind::Write, Some(_)) => "writedata",
                    (RmaKind::Read, _) => "read",
                },
                peer: Some(dest),
                tag: None,
                len,
            })
    }

    /// RMA to an engine peer (the multi-rail layer's stripes, whose peers
    /// are its address vector's per-rail entries).
    pub(crate) fn rma_to_peer(
        &self,
        kind: RmaKind,
        peer: PeerAddr,
        buf: OpBuffer,
        remote: &[RmaIov],
    ) -> RmaOp {
        let (dir, what) = match kind {
            RmaKind::Write => (Caps::WRITE, "RMA write"),
            RmaKind::Read => (Caps::READ, "RMA read"),
        };
        let checked = transport(&self.core, Caps::RMA, dir, what)
            .and_then(|rma| self.core.domain().peers().refuse(peer, what).map(|()| rma));
        match checked {
            Ok(rma) => self.start_rma(&rma, kind, peer, buf, remote, None),
            Err(e) => RmaOp::failed(e, buf),
        }
    }

    fn start_rma(
        &self,
        rma: &Arc<RmaTransport>,
        kind: RmaKind,
        peer: PeerAddr,
        buf: OpBuffer,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> RmaOp {
        let counter = match kind {
            RmaKind::Write => CounterKind::Write,
            RmaKind::Read => CounterKind::Read,
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
            Ok(key) => RmaOp::posted(self.core.clone(), rma.clone(), key, counter),
            Err((e, buf)) => RmaOp::failed(e, buf),
        }
    }
}
