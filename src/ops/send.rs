//! [`SendOp`]: the future of `send` and `tsend`.

use super::op_span;
use super::outcome::{count, status_error, OpName, OpOutput, Sent};
use super::pending::PendingOp;
use crate::engine::OpBuffer;
use crate::fabric::CounterKind;
use crate::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A posted send. Resolves to `(Result<Sent>, buffer)` once the buffer may be
/// reused (the engine copied it or the receiver took it).
///
/// The send was handed to the engine when the call that returned this
/// future ran, so messages leave in call order whether or not the futures
/// are polled. Dropping the future does not stop the send (sends cannot be
/// cancelled, as in PSM): the buffer stays with the engine until it is
/// done, then is freed; a bound send counter is not incremented for a send
/// whose future was dropped.
///
/// A send towards a peer that died completes within `FI_PSM_TIMEOUT` with
/// an `FI_EIO` error naming the peer and how its death was seen; where the
/// engine still holds the buffer (PSM cannot cancel a send) an empty buffer
/// comes back and the engine frees the real one when it is done with it,
/// at the latest when the domain closes.
///
/// The future borrows the endpoint it was posted on, as [`RecvOp`] does.
///
/// [`RecvOp`]: crate::ops::RecvOp
#[must_use = "the send completes only when awaited (or its future is dropped and the buffer abandoned)"]
#[derive(Debug)]
pub struct SendOp<'a> {
    state: State<'a>,
}

#[derive(Debug)]
enum State<'a> {
    Posted { op: PendingOp<'a>, name: OpName },
    Failed(Error, OpBuffer),
    Done,
}

impl<'a> SendOp<'a> {
    pub(crate) fn posted(op: PendingOp<'a>, name: OpName) -> Self {
        SendOp {
            state: State::Posted { op, name },
        }
    }

    /// [`posted`](Self::posted) with the op's span opened, if a subscriber
    /// wants it: out of line, so that the plain post stays as it is.
    #[cold]
    #[inline(never)]
    pub(crate) fn traced(mut op: PendingOp<'a>, name: OpName, d: op_span::OpDesc) -> Self {
        op.open_span(d);
        SendOp::posted(op, name)
    }

    pub(crate) fn failed(error: Error, buffer: OpBuffer) -> Self {
        SendOp {
            state: State::Failed(error, buffer),
        }
    }

    /// The posted op, or the post's error and buffer.
    pub(crate) fn into_posted(
        mut self,
    ) -> Result<(PendingOp<'a>, OpName), crate::engine::PostError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Posted { op, name } => Ok((op, name)),
            State::Failed(error, buffer) => Err(crate::engine::PostError { error, buffer }),
            State::Done => unreachable!("a fresh SendOp is never Done"),
        }
    }

    /// Whether the post itself failed (the future resolves at once with the
    /// error).
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed(..))
    }
}

impl Future for SendOp<'_> {
    type Output = OpOutput<Sent>;

    /// # Panics
    /// If polled again after it returned `Ready`.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            State::Posted { op, name } => {
                let done = std::task::ready!(op.poll(cx));
                let error = op
                    .peer_error(&done.status, *name)
                    .or_else(|| status_error(&done.status, *name));
                let result = match error {
                    None => Ok(Sent {
                        len: done.status.nbytes,
                    }),
                    Some(e) => Err(e),
                };
                let ep = op.endpoint();
                count(ep.counter(CounterKind::Send), result.is_ok());
                match &result {
                    Ok(s) => ep.stats().sent(s.len),
                    Err(_) => ep.stats().error(),
                }
                if let Some(span) = op.span() {
                    match &result {
                        Ok(s) => op_span::ok(span, s.len, None),
                        Err(e) => op_span::err(span, e),
                    }
                }
                this.state = State::Done;
                Poll::Ready((result, done.buffer))
            }
            State::Failed(..) => match std::mem::replace(&mut this.state, State::Done) {
                State::Failed(e, b) => Poll::Ready((Err(e), b)),
                _ => unreachable!("matched Failed above"),
            },
            State::Done => panic!("SendOp polled after completion"),
        }
    }
}
