//! [`RecvOp`]: the future of `recv`, `recv_from` and `trecv`.

use super::op_span;
use super::outcome::{count, failed_status_error, OpName, OpOutput, Received};
use super::pending::PendingOp;
use crate::engine::{Epid, MqCompletion, MqStatus, OpBuffer};
use crate::fabric::{CounterKind, EndpointCore, FiAddr, MSG_BIT};
use crate::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// How the tag and source of a completed receive are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvKind {
    /// Tagged: report the user bits of the tag.
    Tagged,
    /// Untagged over the MQ: the tag is `MSG_BIT | sender epid`.
    MsgMq,
    /// Untagged over AM: the engine reports the source.
    MsgAm,
}

/// A posted receive. Resolves to `(Result<Received>, buffer)`.
///
/// A message longer than the buffer completes with an `FI_ETRUNC` error
/// whose [`Error::truncation`] gives both lengths; the buffer then holds
/// the message's first `buffer.len()` bytes.
///
/// A directed receive (`recv_from`) from a peer that died completes within
/// `FI_PSM_TIMEOUT` with an `FI_EIO` error naming the peer; receives from
/// any source stay posted.
///
/// Dropping the future before it completes cancels the receive if it has
/// not matched a message yet (no message is lost: a later message goes to
/// another receive); a receive that already matched keeps its buffer in the
/// reactor until the engine has finished writing it, then the buffer is
/// freed and the message is gone with it.
///
/// The future borrows the endpoint it was posted on (as quinn's and tokio's
/// futures borrow their connection or socket): to await a receive in a
/// spawned task, move a clone of the [`Endpoint`](crate::fabric::Endpoint)
/// (a cheap handle) into the task and post it there.
#[must_use = "the receive completes only when awaited; dropping it cancels it"]
#[derive(Debug)]
pub struct RecvOp<'a> {
    state: State<'a>,
}

#[derive(Debug)]
enum State<'a> {
    Posted {
        op: PendingOp<'a>,
        name: OpName,
        kind: RecvKind,
    },
    /// The post failed: boxed, so that the posted state — the one that
    /// matters — sets the future's size.
    Failed(Box<(Error, OpBuffer)>),
    Done,
}

impl<'a> RecvOp<'a> {
    pub(crate) fn posted(op: PendingOp<'a>, name: OpName, kind: RecvKind) -> Self {
        RecvOp {
            state: State::Posted { op, name, kind },
        }
    }

    /// [`posted`](Self::posted) with the op's span opened, if a subscriber
    /// wants it: out of line, so that the plain post stays as it is.
    #[cold]
    #[inline(never)]
    pub(crate) fn traced(
        mut op: PendingOp<'a>,
        name: OpName,
        kind: RecvKind,
        d: op_span::OpDesc,
    ) -> Self {
        op.open_span(d);
        RecvOp::posted(op, name, kind)
    }

    pub(crate) fn failed(error: Error, buffer: OpBuffer) -> Self {
        RecvOp {
            state: State::Failed(Box::new((error, buffer))),
        }
    }

    /// Cancels the receive if it has not matched a message yet
    /// (`fi_cancel`): the future then resolves with an `FI_ECANCELED` error
    /// and the buffer. Returns whether it was cancelled; `false` when it is
    /// too late (matched or finished) — the future then completes normally.
    pub fn cancel(&self) -> bool {
        match &self.state {
            State::Posted { op, .. } => op.cancel(),
            _ => false,
        }
    }

    /// The posted op, or the post's error and buffer.
    pub(crate) fn into_posted(
        mut self,
    ) -> Result<(PendingOp<'a>, OpName, RecvKind), crate::engine::PostError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Posted { op, name, kind } => Ok((op, name, kind)),
            State::Failed(failed) => {
                let (error, buffer) = *failed;
                Err(crate::engine::PostError { error, buffer })
            }
            State::Done => unreachable!("a fresh RecvOp is never Done"),
        }
    }

    /// Whether the post itself failed (the future resolves at once with the
    /// error).
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed(..))
    }

    /// The output of a completion that carries an error (truncation,
    /// cancellation, a dead peer): out of line, so that the success path
    /// stays small.
    #[cold]
    #[inline(never)]
    fn failed_output(&mut self, done: MqCompletion) -> OpOutput<Received> {
        let State::Posted { op, name, .. } = &self.state else {
            unreachable!("only a posted receive completes")
        };
        let error = op
            .peer_error(&done.status, *name)
            .unwrap_or_else(|| failed_status_error(&done.status, *name));
        let ep = op.endpoint();
        count(ep.counter(CounterKind::Recv), false);
        ep.stats().error();
        if let Some(span) = op.span() {
            op_span::err(span, &error);
        }
        self.state = State::Done;
        (Err(error), done.buffer)
    }

    /// The output of a receive whose post failed, or a panic when polled
    /// after completion.
    #[cold]
    #[inline(never)]
    fn unposted_output(&mut self) -> OpOutput<Received> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Failed(failed) => {
                let (error, buffer) = *failed;
                (Err(error), buffer)
            }
            _ => panic!("RecvOp polled after completion"),
        }
    }
}

/// The sender of a completed receive, as an AV address.
#[inline]
pub(crate) fn source_of(ep: &EndpointCore, kind: RecvKind, status: &MqStatus) -> FiAddr {
    match (kind, status.source) {
        (_, Some(peer)) => ep.source_of(Some(peer), None),
        (RecvKind::MsgMq, None) => ep.source_of(None, Some(Epid(status.tag & !MSG_BIT))),
        _ => FiAddr::UNSPEC,
    }
}

impl Future for RecvOp<'_> {
    type Output = OpOutput<Received>;

    /// # Panics
    /// If polled again after it returned `Ready`.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let State::Posted { op, kind, .. } = &mut this.state else {
            return Poll::Ready(this.unposted_output());
        };
        let done = std::task::ready!(op.poll(cx));
        if done.status.error.is_some() {
            return Poll::Ready(this.failed_output(done));
        }
        let ep = op.endpoint();
        let tag = match kind {
            RecvKind::Tagged => done.status.tag & ep.domain().tags().user_mask(),
            _ => 0,
        };
        let received = Received {
            len: done.status.nbytes,
            tag,
            source: source_of(ep, *kind, &done.status),
        };
        count(ep.counter(CounterKind::Recv), true);
        ep.stats().received(received.len);
        if let Some(span) = op.span() {
            op_span::ok(span, received.len, Some((received.tag, received.source)));
        }
        this.state = State::Done;
        Poll::Ready((Ok(received), done.buffer))
    }
}
