//! The mrail combinator: [`StripeJoin`] joins the per-rail futures of one
//! striped transfer, and [`RailPart`] is one of them — a message part
//! travelling on one rail as that rail's own tagged operation.
//!
//! A striped send or receive is done when every part is done; it fails,
//! naming the rail, when a part fails. The join waits for *every* part
//! even after a failure, because the parts share the user's buffer
//! ([`SharedBuffer`](super::region::SharedBuffer)): the buffer goes back to
//! the user only once no rail holds a window of it.
//!
//! Both futures are plain futures, pollable by any executor; the driver
//! ([`driver`](super::driver)) polls them with a waker that queues the
//! transfer for its next progress step, so a part's completion (which the
//! rail's engine reports inside the reactor's progress) costs one queue
//! push, not a scan of every transfer. Polling never runs progress itself.

use super::core::rail_load::RailStint;
use crate::engine::MqCompletion;
use crate::fabric::DomainCore;
use crate::reactor::OpKey;
use crate::{Error, ErrorKind};
use futures::future::JoinAll;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// What one part reports.
#[derive(Debug)]
pub(crate) struct PartOutput {
    pub(crate) rail: usize,
    /// The bytes moved, or the error.
    pub(crate) result: Result<usize, Error>,
    /// Whether the part had its rail to itself from posting to completion
    /// ([`RailLoad`]): only then is its duration a rate sample.
    pub(crate) alone: bool,
}

impl PartOutput {
    /// A part's report that says nothing about the rail's load.
    #[cfg(test)]
    fn shared(rail: usize, result: Result<usize, Error>) -> Self {
        PartOutput {
            rail,
            result,
            alone: false,
        }
    }
}

/// One finished part of a join: its rail, bytes, when its completion was
/// seen, and whether it had the rail to itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartDone {
    pub(crate) rail: usize,
    pub(crate) bytes: usize,
    pub(crate) at: Instant,
    pub(crate) alone: bool,
}

/// One part of a striped transfer: a rail operation posted under `key` in
/// the rail domain's completion table, holding its stint on the rail (if
/// it is one whose rail load is tracked) until it completes.
///
/// Dropping it before completion cancels a receive that has not matched
/// and abandons the slot: the rail's engine keeps the part's window (and
/// with it the user's buffer) until it is done with it.
pub(crate) struct RailPart {
    domain: Arc<DomainCore>,
    key: Option<OpKey>,
    rail: usize,
    receive: bool,
    stint: Option<RailStint>,
}

impl RailPart {
    /// The part posted on `rail` (whose domain is `domain`) under `key`;
    /// `stint` is its time on the rail, when the rail's load is tracked.
    pub(crate) fn new(
        domain: Arc<DomainCore>,
        key: OpKey,
        rail: usize,
        receive: bool,
        stint: Option<RailStint>,
    ) -> Self {
        RailPart {
            domain,
            key: Some(key),
            rail,
            receive,
            stint,
        }
    }

    /// What the completion means for this part.
    fn output(&mut self, done: MqCompletion) -> PartOutput {
        let status = done.status;
        drop(done.buffer);
        let alone = self.stint.take().is_some_and(RailStint::end);
        let result = match status.error {
            None => Ok(status.nbytes),
            Some(kind) => Err(part_error(self.rail, self.receive, kind, status.nbytes)),
        };
        PartOutput {
            rail: self.rail,
            result,
            alone,
        }
    }
}

/// The error of a failed part, naming its rail.
#[cold]
fn part_error(rail: usize, receive: bool, kind: ErrorKind, moved: usize) -> Error {
    let what = if receive { "receive" } else { "send" };
    let why = match kind {
        ErrorKind::Io => "the peer is gone on that rail".to_owned(),
        ErrorKind::TimedOut => "the peer did not answer in time on that rail".to_owned(),
        ErrorKind::Canceled => "cancelled".to_owned(),
        ErrorKind::Trunc => format!("truncated after {moved} bytes"),
        other => format!("failed ({other})"),
    };
    Error::new(kind, format!("rail {rail}: part {what}: {why}"))
}

impl Future for RailPart {
    type Output = PartOutput;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PartOutput> {
        let Some(key) = self.key else {
            // Polled after completion: a caller bug the join never makes.
            return Poll::Ready(PartOutput {
                rail: self.rail,
                result: Err(Error::new(ErrorKind::Other, "part polled twice")),
                alone: false,
            });
        };
        match self.domain.table().poll_take(key, cx) {
            Poll::Ready(done) => {
                self.key = None;
                Poll::Ready(self.output(done))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for RailPart {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        if self.receive {
            let _ = self.domain.engine().cancel(key);
        }
        drop(self.domain.table().abandon(key));
    }
}

/// What a whole striped transfer reports.
#[derive(Debug)]
pub(crate) struct Joined {
    /// Bytes moved by all parts together.
    pub(crate) bytes: u64,
    /// The first failure in rail order, if any part failed.
    pub(crate) error: Option<Error>,
    /// The parts that succeeded, with the moment each was seen done (the
    /// rails' rate samples).
    pub(crate) parts: Vec<PartDone>,
}

/// Joins the futures of a striped transfer's parts (the mrail
/// combinator): ready when every part is, with the total and the first
/// failure (which names its rail).
#[pin_project]
pub(crate) struct StripeJoin<F: Future<Output = PartOutput>> {
    #[pin]
    parts: JoinAll<Timed<F>>,
}

/// A part future that notes when its output was first seen.
#[pin_project]
pub(crate) struct Timed<F> {
    #[pin]
    inner: F,
}

impl<F: Future<Output = PartOutput>> Future for Timed<F> {
    type Output = (PartOutput, Instant);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .inner
            .poll(cx)
            .map(|out| (out, Instant::now()))
    }
}

impl<F: Future<Output = PartOutput>> StripeJoin<F> {
    /// Joins `parts`.
    pub(crate) fn new(parts: impl IntoIterator<Item = F>) -> Self {
        StripeJoin {
            parts: futures::future::join_all(parts.into_iter().map(|inner| Timed { inner })),
        }
    }
}

impl<F: Future<Output = PartOutput>> Future for StripeJoin<F> {
    type Output = Joined;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Joined> {
        let outputs = futures::ready!(self.project().parts.poll(cx));
        let mut joined = Joined {
            bytes: 0,
            error: None,
            parts: Vec::with_capacity(outputs.len()),
        };
        for (out, at) in outputs {
            match out.result {
                Ok(n) => {
                    joined.bytes += n as u64;
                    joined.parts.push(PartDone {
                        rail: out.rail,
                        bytes: n,
                        at,
                        alone: out.alone,
                    });
                }
                Err(e) if joined.error.is_none() => joined.error = Some(e),
                Err(_) => {}
            }
        }
        Poll::Ready(joined)
    }
}

/// A transfer's parts while they travel: the join, pinned in a box so the
/// driver can keep it in its tables and poll it from its progress step.
pub(crate) struct Striped {
    pub(crate) join: Pin<Box<StripeJoin<RailPart>>>,
}

impl Striped {
    /// Joins `parts`.
    pub(crate) fn new(parts: Vec<RailPart>) -> Self {
        Striped {
            join: Box::pin(StripeJoin::new(parts)),
        }
    }

    /// Polls the join.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Joined> {
        self.join.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::ready;

    #[test]
    fn joins_every_part_and_names_the_first_failure() {
        let parts = vec![
            ready(PartOutput::shared(0, Ok(10))),
            ready(PartOutput::shared(
                1,
                Err(Error::new(ErrorKind::Io, "rail 1: gone")),
            )),
            ready(PartOutput::shared(2, Ok(5))),
            ready(PartOutput::shared(
                3,
                Err(Error::new(ErrorKind::Io, "rail 3: gone")),
            )),
        ];
        let joined = futures::executor::block_on(StripeJoin::new(parts));
        assert_eq!(joined.bytes, 15);
        assert!(joined.error.unwrap().message().contains("rail 1"));
    }

    #[test]
    fn an_empty_join_is_ready_at_once() {
        let parts: Vec<futures::future::Ready<PartOutput>> = Vec::new();
        let joined = futures::executor::block_on(StripeJoin::new(parts));
        assert_eq!(joined.bytes, 0);
        assert!(joined.error.is_none());
    }

    #[test]
    fn waits_for_the_slowest_part() {
        let (tx, rx) = futures::channel::oneshot::channel::<PartOutput>();
        let slow = async move { rx.await.unwrap() };
        let fast = async { PartOutput::shared(0, Ok(1)) };
        let parts: Vec<Pin<Box<dyn Future<Output = PartOutput>>>> =
            vec![Box::pin(fast), Box::pin(slow)];
        let mut join = Box::pin(StripeJoin::new(parts));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(join.as_mut().poll(&mut cx).is_pending());
        tx.send(PartOutput::shared(1, Ok(2))).unwrap();
        match join.as_mut().poll(&mut cx) {
            Poll::Ready(j) => assert_eq!(j.bytes, 3),
            Poll::Pending => panic!("the join should be ready"),
        }
    }
}
