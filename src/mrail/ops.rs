//! The message operations of an [`MrailEndpoint`]: `send`, `recv`,
//! `recv_from`, `tsend`, `trecv`, `inject`, `tinject` and their `post_*`
//! forms, with the psm endpoint's names, argument order and outputs.
//!
//! Each method posts before it returns (a receive can be posted ahead of
//! its message; sends leave in call order) and returns a future resolving
//! to `(Result, buffer)`: [`MrailSendOp`] or [`MrailRecvOp`].
//!
//! # Cancel safety
//! Dropping a future at any point is safe and loses no memory that a
//! rail may still touch: an unmatched receive is withdrawn (its buffer is
//! freed); a matched or striped one, and every send, go on inside the
//! reactor — the parts already posted keep their windows of the buffer
//! until their rails are done — and the completion is dropped when it
//! comes. `mem::forget` of a future is safe too.
//!
//! # Tracing
//! Each posted operation has an `mrail.op` span at TRACE level with the
//! psm endpoint's fields (kind, peer, tag, length), entered while its
//! future is polled and ended by its completion event (see
//! `ops/op_span.rs`); striped transfers add their `mrail.striped` spans
//! beneath the driver.

use super::core::header::MsgClass;
use super::core::matcher::RecvSpec;
use super::driver::{Driver, MrailCompletion, Sink};
use super::endpoint::MrailEndpoint;
use crate::engine::{OpBuffer, PostError};
use crate::fabric::{Caps, FiAddr, MAX_MSG_SIZE};
use crate::ops::op_span::{OpDesc, OpSpan, Provider};
use crate::ops::{MessageEndpoint, OpOutput, Received, Sent};
use crate::reactor::OpKey;
use crate::{Error, ErrorKind, Result};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A posted operation's future state.
#[derive(Debug)]
enum State {
    Posted(OpKey),
    Failed(Box<(Error, OpBuffer)>),
    Done,
}

impl State {
    /// The state of a future whose post gave `r`.
    fn of(r: std::result::Result<Sink, PostError>) -> State {
        match r {
            Ok(Sink::Future(key)) => State::Posted(key),
            Ok(Sink::Cq { .. }) => State::Done,
            Err(e) => State::Failed(Box::new((e.error, e.buffer))),
        }
    }
}

/// The future of an mrail send: resolves when the buffer may be reused,
/// handing it back with the result.
#[must_use = "the send completes only when awaited"]
#[derive(Debug)]
pub struct MrailSendOp<'a> {
    ep: &'a MrailEndpoint,
    state: State,
    span: OpSpan,
}

/// The future of an mrail receive: resolves with the message's length, tag
/// and source, and the buffer.
#[must_use = "the receive completes only when awaited; dropping it cancels it"]
#[derive(Debug)]
pub struct MrailRecvOp<'a> {
    ep: &'a MrailEndpoint,
    state: State,
    span: OpSpan,
}

/// The handle of an operation posted with a context, for
/// [`MrailEndpoint::cancel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrailPosted {
    sink: Sink,
    receive: bool,
}

fn poll_state(
    ep: &MrailEndpoint,
    state: &mut State,
    cx: &mut Context<'_>,
) -> Poll<(Result<super::driver::Done>, OpBuffer)> {
    match std::mem::replace(state, State::Done) {
        State::Posted(key) => {
            let driver = &ep.core.driver;
            let reactor = &ep.core.domain.reactor;
            match reactor.poll_completion_with(driver.table(), key, cx, || driver.poll_fast(key)) {
                Poll::Ready(MrailCompletion { result, buffer }) => Poll::Ready((result, buffer)),
                Poll::Pending => {
                    *state = State::Posted(key);
                    Poll::Pending
                }
            }
        }
        State::Failed(f) => {
            let (e, b) = *f;
            Poll::Ready((Err(e), b))
        }
        State::Done => Poll::Ready((
            Err(Error::new(
                ErrorKind::OpBadState,
                "operation polled after completion",
            )),
            OpBuffer::empty(),
        )),
    }
}

fn forget(ep: &MrailEndpoint, state: &State) {
    if let State::Posted(key) = state {
        ep.core.driver.forget(*key);
    }
}

impl Future for MrailSendOp<'_> {
    type Output = OpOutput<Sent>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpOutput<Sent>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.span.enter();
            poll_state(this.ep, &mut this.state, cx)
        };
        let (r, b) = std::task::ready!(polled);
        let r = r.map(|d| Sent { len: d.len });
        this.span.done(&r, |s| s.len);
        Poll::Ready((r, b))
    }
}

impl Drop for MrailSendOp<'_> {
    fn drop(&mut self) {
        forget(self.ep, &self.state);
    }
}

impl Future for MrailRecvOp<'_> {
    type Output = OpOutput<Received>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpOutput<Received>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.span.enter();
            poll_state(this.ep, &mut this.state, cx)
        };
        let (r, b) = std::task::ready!(polled);
        let r = r.map(|d| Received {
            len: d.len,
            tag: d.tag,
            source: d.source,
        });
        this.span.received(&r);
        Poll::Ready((r, b))
    }
}

impl Drop for MrailRecvOp<'_> {
    fn drop(&mut self) {
        forget(self.ep, &self.state);
    }
}

impl MrailRecvOp<'_> {
    /// Cancels the receive if it has not matched yet (`fi_cancel`): it
    /// then completes with `FI_ECANCELED` and its buffer. `false` when it
    /// is too late (or already over).
    pub fn cancel(&self) -> bool {
        match self.state {
            State::Posted(key) => self.ep.core.driver.cancel(Sink::Future(key)),
            _ => false,
        }
    }
}

/// What an operation's span says at its start.
fn desc(kind: &'static str, peer: Option<FiAddr>, tag: Option<u64>, len: usize) -> OpDesc {
    OpDesc {
        kind,
        peer,
        tag,
        len,
    }
}

/// The span of an operation in `state` (none for one that failed at once).
#[inline]
fn traced(state: &State, d: OpDesc) -> OpSpan {
    match state {
        State::Posted(_) => OpSpan::new(Provider::Mrail, || d),
        _ => OpSpan::default(),
    }
}

/// The checks every operation makes.
/// The checks of a receive of `class` (peeks and claimed receives too).
pub(super) fn check_recv(ep: &MrailEndpoint, class: Caps, name: &str) -> Result<()> {
    check(ep, class, false, name)
}

fn check(ep: &MrailEndpoint, class: Caps, send: bool, name: &str) -> Result<()> {
    ep.core.ensure_open()?;
    let caps = ep.core.caps;
    let dir = if send { Caps::SEND } else { Caps::RECV };
    let dir_ok = caps.contains(dir) || !caps.intersects(Caps::SEND | Caps::RECV);
    if caps.contains(class) && dir_ok {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::OpNotSupp,
        format!("{name}: the endpoint was opened with {caps} and needs {class} with {dir} (or no direction bits)"),
    ))
}

fn check_len(len: usize, name: &str) -> Result<()> {
    if len as u64 > MAX_MSG_SIZE {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!("{name}: {len} bytes exceed the largest message ({MAX_MSG_SIZE} bytes)"),
        ));
    }
    Ok(())
}

pub(super) fn check_writable(buf: &OpBuffer, name: &str) -> Result<()> {
    if buf.is_writable() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Inval,
        format!("{name}: the buffer is shared read-only `Bytes`; receive into a Vec, BytesMut or region"),
    ))
}

impl MrailEndpoint {
    fn driver(&self) -> &Driver {
        &self.core.driver
    }

    fn do_send(
        &self,
        dest: FiAddr,
        class: MsgClass,
        tag: u64,
        buf: OpBuffer,
        sink: impl FnOnce(&Driver) -> Sink,
    ) -> std::result::Result<Sink, PostError> {
        let (caps, name) = match class {
            MsgClass::Msg => (Caps::MSG, "send"),
            MsgClass::Tagged => (Caps::TAGGED, "tsend"),
        };
        if let Err(error) = check(self, caps, true, name).and_then(|()| check_len(buf.len(), name))
        {
            return Err(PostError { error, buffer: buf });
        }
        let sink = sink(self.driver());
        match self.driver().send(dest, class, tag, buf, sink) {
            Ok(()) => Ok(sink),
            Err((error, buffer)) => {
                if let Sink::Future(key) = sink {
                    drop(self.driver().table().retire(key));
                }
                self.driver().op_stats().refused(&error);
                Err(PostError { error, buffer })
            }
        }
    }

    fn do_recv(
        &self,
        spec: RecvSpec,
        buf: OpBuffer,
        sink: impl FnOnce(&Driver) -> Sink,
    ) -> std::result::Result<Sink, PostError> {
        let (caps, name) = match spec.class {
            MsgClass::Msg => (Caps::MSG, "recv"),
            MsgClass::Tagged => (Caps::TAGGED, "trecv"),
        };
        if let Err(error) = check(self, caps, false, name).and_then(|()| check_writable(&buf, name))
        {
            return Err(PostError { error, buffer: buf });
        }
        let sink = sink(self.driver());
        match self.driver().recv(spec, buf, sink) {
            Ok(()) => Ok(sink),
            Err((error, buffer)) => {
                if let Sink::Future(key) = sink {
                    drop(self.driver().table().retire(key));
                }
                self.driver().op_stats().refused(&error);
                Err(PostError { error, buffer })
            }
        }
    }

    fn send_op(&self, r: std::result::Result<Sink, PostError>, d: OpDesc) -> MrailSendOp<'_> {
        let state = State::of(r);
        let span = traced(&state, d);
        MrailSendOp {
            ep: self,
            state,
            span,
        }
    }

    fn recv_op(&self, r: std::result::Result<Sink, PostError>, d: OpDesc) -> MrailRecvOp<'_> {
        let state = State::of(r);
        let span = traced(&state, d);
        MrailRecvOp {
            ep: self,
            state,
            span,
        }
    }

    /// The peer index a directed receive names.
    fn source_index(&self, src: FiAddr) -> Result<u32> {
        self.core.av.core.peer(src).map(|(i, _)| i)
    }

    /// Sends `buf` to `dest` (`fi_send`). Needs `FI_MSG` (and `FI_SEND` or
    /// no direction bits). Untagged messages match only untagged receives
    /// (C's mrail sent every message as tagged).
    ///
    /// # Cancel safety
    /// Dropping the future does not take the send back: the message (or
    /// its parts) may still be delivered, and the buffer stays inside the
    /// reactor until no rail touches it, then it is freed. `mem::forget`
    /// is safe too.
    pub fn send(&self, dest: FiAddr, buf: impl Into<OpBuffer>) -> MrailSendOp<'_> {
        let buf = buf.into();
        let d = desc("send", Some(dest), None, buf.len());
        let r = self.do_send(dest, MsgClass::Msg, 0, buf, Driver::future_sink);
        self.send_op(r, d)
    }

    /// Sends `buf` with `tag` to `dest` (`fi_tsend`). Every one of the 64
    /// tag bits is the user's.
    ///
    /// # Cancel safety
    /// Dropping the future does not take the send back: the message (or
    /// its parts) may still be delivered, and the buffer stays inside the
    /// reactor until no rail touches it, then it is freed. `mem::forget`
    /// is safe too.
    pub fn tsend(&self, dest: FiAddr, tag: u64, buf: impl Into<OpBuffer>) -> MrailSendOp<'_> {
        let buf = buf.into();
        let d = desc("tsend", Some(dest), Some(tag), buf.len());
        let r = self.do_send(dest, MsgClass::Tagged, tag, buf, Driver::future_sink);
        self.send_op(r, d)
    }

    /// Receives the next untagged message from any source (`fi_recv`).
    /// A message longer than `buf` fills it and fails with `FI_ETRUNC`
    /// (both lengths in the error); a longer buffer is fine.
    ///
    /// # Cancel safety
    /// Dropping the future before a message matched withdraws the receive
    /// (no message is consumed, the buffer is freed). Once matched, the
    /// message is consumed, and the buffer stays inside the reactor until
    /// every rail writing a part into it is done, then it is freed.
    /// `mem::forget` is safe too.
    pub fn recv(&self, buf: impl Into<OpBuffer>) -> MrailRecvOp<'_> {
        let buf = buf.into();
        let d = desc("recv", None, None, buf.len());
        let r = self.do_recv(RecvSpec::msg(None), buf, Driver::future_sink);
        self.recv_op(r, d)
    }

    /// Receives the next untagged message sent by `src` (`FI_DIRECTED_RECV`,
    /// which the endpoint's caps must include).
    ///
    /// # Cancel safety
    /// Dropping the future before a message matched withdraws the receive
    /// (no message is consumed, the buffer is freed). Once matched, the
    /// message is consumed, and the buffer stays inside the reactor until
    /// every rail writing a part into it is done, then it is freed.
    /// `mem::forget` is safe too.
    pub fn recv_from(&self, src: FiAddr, buf: impl Into<OpBuffer>) -> MrailRecvOp<'_> {
        let buf = buf.into();
        let d = desc("recv", Some(src), None, buf.len());
        let spec = match self.directed(src) {
            Ok(i) => RecvSpec::msg(Some(i)),
            Err(e) => {
                return self.recv_op(
                    Err(PostError {
                        error: e,
                        buffer: buf,
                    }),
                    d,
                )
            }
        };
        let r = self.do_recv(spec, buf, Driver::future_sink);
        self.recv_op(r, d)
    }

    /// Receives the first message whose tag matches `tag` in the bits not
    /// set in `ignore` (`fi_trecv`, any source).
    ///
    /// # Cancel safety
    /// Dropping the future before a message matched withdraws the receive
    /// (no message is consumed, the buffer is freed). Once matched, the
    /// message is consumed, and the buffer stays inside the reactor until
    /// every rail writing a part into it is done, then it is freed.
    /// `mem::forget` is safe too.
    pub fn trecv(&self, buf: impl Into<OpBuffer>, tag: u64, ignore: u64) -> MrailRecvOp<'_> {
        let buf = buf.into();
        let d = desc("trecv", None, Some(tag), buf.len());
        let r = self.do_recv(
            RecvSpec::tagged(tag, ignore, None),
            buf,
            Driver::future_sink,
        );
        self.recv_op(r, d)
    }

    /// [`trecv`](Self::trecv) from one source (`FI_DIRECTED_RECV`).
    pub fn trecv_from(
        &self,
        src: FiAddr,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
    ) -> MrailRecvOp<'_> {
        let buf = buf.into();
        let d = desc("trecv", Some(src), Some(tag), buf.len());
        let spec = match self.directed(src) {
            Ok(i) => RecvSpec::tagged(tag, ignore, Some(i)),
            Err(e) => {
                return self.recv_op(
                    Err(PostError {
                        error: e,
                        buffer: buf,
                    }),
                    d,
                )
            }
        };
        let r = self.do_recv(spec, buf, Driver::future_sink);
        self.recv_op(r, d)
    }

    fn directed(&self, src: FiAddr) -> Result<u32> {
        if !self.core.caps.contains(Caps::DIRECTED_RECV) {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "recv_from: the endpoint was opened without FI_DIRECTED_RECV",
            ));
        }
        self.source_index(src)
    }

    fn inject_class(&self, dest: FiAddr, class: MsgClass, tag: u64, data: &[u8]) -> Result<()> {
        let max = self.core.inject_size;
        if data.len() > max {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "inject: {} bytes exceed the inject size ({max} bytes); use a send",
                    data.len()
                ),
            ));
        }
        check(
            self,
            match class {
                MsgClass::Msg => Caps::MSG,
                MsgClass::Tagged => Caps::TAGGED,
            },
            true,
            "inject",
        )?;
        // One rail inject, straight from `data`.
        let kind = match class {
            MsgClass::Msg => "inject",
            MsgClass::Tagged => "tinject",
        };
        let tag = (class == MsgClass::Tagged).then_some(tag);
        let mut span = OpSpan::new(Provider::Mrail, || desc(kind, Some(dest), tag, data.len()));
        let result = {
            let _entered = span.enter();
            self.driver().inject(dest, class, tag.unwrap_or(0), data)
        };
        match &result {
            Ok(()) => self.driver().op_stats().sent(data.len()),
            Err(e) => self.driver().op_stats().refused(e),
        }
        span.done(&result, |_| data.len());
        result
    }

    /// Sends a small untagged message; `data` may be reused at once
    /// (`fi_inject`): at most [`inject_size`](Self::inject_size) bytes.
    /// The send counter counts it at once; no CQ entry is written.
    ///
    /// # Cancel safety
    /// Not a future: the data is copied before this returns, and the
    /// message leaves whatever the caller does next.
    pub fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()> {
        self.inject_class(dest, MsgClass::Msg, 0, data)
    }

    /// Sends a small tagged message; `data` may be reused at once
    /// (`fi_tinject`).
    ///
    /// # Cancel safety
    /// Not a future: the data is copied before this returns, and the
    /// message leaves whatever the caller does next.
    pub fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()> {
        self.inject_class(dest, MsgClass::Tagged, tag, data)
    }

    fn posted(
        &self,
        r: std::result::Result<Sink, PostError>,
        receive: bool,
    ) -> std::result::Result<MrailPosted, PostError> {
        r.map(|sink| MrailPosted { sink, receive })
    }

    /// Posts an untagged send whose completion goes to the transmit CQ with
    /// `context`.
    ///
    /// # Errors
    /// The checks of [`send`](Self::send); the buffer comes back in the error.
    pub fn post_send(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        let r = self.do_send(dest, MsgClass::Msg, 0, buf.into(), |d| d.cq_sink(context));
        self.posted(r, false)
    }

    /// Posts a tagged send whose completion goes to the transmit CQ.
    ///
    /// # Errors
    /// The checks of [`tsend`](Self::tsend).
    pub fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        let r = self.do_send(dest, MsgClass::Tagged, tag, buf.into(), |d| {
            d.cq_sink(context)
        });
        self.posted(r, false)
    }

    /// Posts an untagged receive whose completion goes to the receive CQ.
    ///
    /// # Errors
    /// The checks of [`recv`](Self::recv).
    pub fn post_recv(
        &self,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        let r = self.do_recv(RecvSpec::msg(None), buf.into(), |d| d.cq_sink(context));
        self.posted(r, true)
    }

    /// Posts a tagged receive whose completion goes to the receive CQ.
    ///
    /// # Errors
    /// The checks of [`trecv`](Self::trecv).
    pub fn post_trecv(
        &self,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        let spec = RecvSpec::tagged(tag, ignore, None);
        let r = self.do_recv(spec, buf.into(), |d| d.cq_sink(context));
        self.posted(r, true)
    }

    /// [`post_recv`](Self::post_recv) from one source (`FI_DIRECTED_RECV`).
    ///
    /// # Errors
    /// The checks of [`recv_from`](Self::recv_from).
    pub fn post_recv_from(
        &self,
        src: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        let buf = buf.into();
        let r = match self.directed(src) {
            Ok(i) => self.do_recv(RecvSpec::msg(Some(i)), buf, |d| d.cq_sink(context)),
            Err(error) => Err(PostError { error, buffer: buf }),
        };
        self.posted(r, true)
    }

    /// [`post_trecv`](Self::post_trecv) from one source
    /// (`FI_DIRECTED_RECV`).
    ///
    /// # Errors
    /// The checks of [`trecv_from`](Self::trecv_from).
    pub fn post_trecv_from(
        &self,
        src: FiAddr,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        let buf = buf.into();
        let r = match self.directed(src) {
            Ok(i) => self.do_recv(RecvSpec::tagged(tag, ignore, Some(i)), buf, |d| {
                d.cq_sink(context)
            }),
            Err(error) => Err(PostError { error, buffer: buf }),
        };
        self.posted(r, true)
    }

    /// Cancels a receive posted with a context if it has not matched yet
    /// (`fi_cancel`): its CQ gets an `FI_ECANCELED` error entry with the
    /// buffer. `Ok(false)` when it is too late.
    ///
    /// # Errors
    /// `FI_EOPNOTSUPP` for a send.
    pub fn cancel(&self, posted: &MrailPosted) -> Result<bool> {
        if !posted.receive {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                "cancel: sends cannot be cancelled (only receives that have not matched)",
            ));
        }
        Ok(self.driver().cancel(posted.sink))
    }
}

impl MessageEndpoint for MrailEndpoint {
    type SendFuture<'a> = MrailSendOp<'a>;
    type RecvFuture<'a> = MrailRecvOp<'a>;
    type Posted = MrailPosted;

    fn caps(&self) -> Caps {
        MrailEndpoint::caps(self)
    }

    fn inject_size(&self) -> usize {
        MrailEndpoint::inject_size(self)
    }

    fn send(&self, dest: FiAddr, buf: impl Into<OpBuffer>) -> MrailSendOp<'_> {
        MrailEndpoint::send(self, dest, buf)
    }

    fn recv(&self, buf: impl Into<OpBuffer>) -> MrailRecvOp<'_> {
        MrailEndpoint::recv(self, buf)
    }

    fn recv_from(&self, src: FiAddr, buf: impl Into<OpBuffer>) -> MrailRecvOp<'_> {
        MrailEndpoint::recv_from(self, src, buf)
    }

    fn tsend(&self, dest: FiAddr, tag: u64, buf: impl Into<OpBuffer>) -> MrailSendOp<'_> {
        MrailEndpoint::tsend(self, dest, tag, buf)
    }

    fn trecv(&self, buf: impl Into<OpBuffer>, tag: u64, ignore: u64) -> MrailRecvOp<'_> {
        MrailEndpoint::trecv(self, buf, tag, ignore)
    }

    fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()> {
        MrailEndpoint::inject(self, dest, data)
    }

    fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()> {
        MrailEndpoint::tinject(self, dest, tag, data)
    }

    fn post_send(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        MrailEndpoint::post_send(self, dest, buf, context)
    }

    fn post_recv(
        &self,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        MrailEndpoint::post_recv(self, buf, context)
    }

    fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        MrailEndpoint::post_tsend(self, dest, tag, buf, context)
    }

    fn post_trecv(
        &self,
        buf: impl Into<OpBuffer>,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> std::result::Result<MrailPosted, PostError> {
        MrailEndpoint::post_trecv(self, buf, tag, ignore, context)
    }

    fn cancel(&self, posted: &MrailPosted) -> Result<bool> {
        MrailEndpoint::cancel(self, posted)
    }

    fn stats(&self) -> crate::fabric::EndpointStats {
        self.core.endpoint_stats()
    }
}
