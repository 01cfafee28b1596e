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
}

impl PartOutput {
    /// A part's report.
    #[cfg(test)]
    fn shared(rail: usize, result: Result<usize, Error>) -> Self {
        PartOutput { rail, result }
    }
}

/// One finished part of a join: its rail, bytes, when its completion was
/// seen, and whether it had the rail to itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartDone {
    /// The part (its index in the join).
    pub(crate) part: usize,
    /// Which attempt at it finished (0: the first).
    pub(crate) attempt: usize,
    pub(crate) rail: usize,
    pub(crate) bytes: usize,
    pub(crate) at: Instant,
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

    /// Cancels the part, a receive that has not matched yet; the part back
    /// when it cannot be (it matched, or it is a send).
    pub(crate) fn try_cancel(mut self) -> Result<(), RailPart> {
        let Some(key) = self.key else {
            return Ok(());
        };
        if !self.receive || !matches!(self.domain.engine().cancel(key), Ok(true)) {
            return Err(self);
        }
        self.key = None;
        drop(self.domain.table().abandon(key));
        Ok(())
    }

    /// What the completion means for this part.
    fn output(&mut self, done: MqCompletion) -> PartOutput {
        let status = done.status;
        drop(done.buffer);
        let bytes = if status.error.is_none() {
            status.nbytes as u64
        } else {
            0
        };
        if let Some(stint) = self.stint.take() {
            stint.end(Instant::now(), bytes);
        }
        let result = match status.error {
            None => Ok(status.nbytes),
            Some(kind) => Err(part_error(self.rail, self.receive, kind, status.nbytes)),
        };
        PartOutput {
            rail: self.rail,
            result,
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

/// A part future that knows its rail.
pub(crate) trait OnRail {
    /// The rail it travels on.
    fn rail(&self) -> usize;
}

impl OnRail for RailPart {
    fn rail(&self) -> usize {
        self.rail
    }
}

/// What a whole striped transfer reports.
#[derive(Debug)]
pub(crate) struct Joined {
    /// Bytes moved by all parts together.
    pub(crate) bytes: u64,
    /// The first failure in part order, if any part failed.
    pub(crate) error: Option<Error>,
    /// The parts that succeeded, with the moment each was seen done (the
    /// rails' rate samples).
    pub(crate) parts: Vec<PartDone>,
}

/// Whether `kind` says the part's rail lost the peer, or was closed under
/// it (the part may go again on another rail), rather than that the part
/// itself is wrong. (A part is never cancelled on its own: a cancelled
/// part's rail endpoint went away.)
pub(crate) fn rail_lost(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Io | ErrorKind::TimedOut | ErrorKind::ConnRefused | ErrorKind::Canceled
    )
}

/// One part of the transfer: the attempts at it (the first on its planned
/// rail, later ones on other rails after a failover) and how it ended.
struct Slot<F> {
    attempts: Vec<Option<Timed<F>>>,
    outcome: Option<std::result::Result<PartDone, Error>>,
    /// A failover join's part whose every attempt lost its rail: it waits
    /// for a new attempt (or for the transfer to be failed).
    stalled: Option<Error>,
}

/// Joins the futures of a striped transfer's parts (the mrail
/// combinator): ready when every part is, with the total and the first
/// failure (which names its rail).
///
/// A part may have several attempts: a *failover* join
/// ([`with_failover`](Self::with_failover)) does not fail a part whose
/// attempt lost its rail ([`rail_lost`]); the part waits
/// ([`stalled`](Self::stalled)) until its owner adds an attempt on another
/// rail ([`add_attempt`](Self::add_attempt)) or gives up
/// ([`fail_open`](Self::fail_open)). A part is done when any attempt
/// succeeds; attempts still pending then are the owner's to release
/// ([`take_pending`](Self::take_pending)).
pub(crate) struct StripeJoin<F: Future<Output = PartOutput> + Unpin> {
    slots: Vec<Slot<F>>,
    failover: bool,
    /// Parts without an outcome.
    left: usize,
    /// Whether the join has reported its outcome.
    reported: bool,
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

impl<F: Future<Output = PartOutput> + Unpin> StripeJoin<F> {
    /// Joins `parts`, one per part; any failure fails its part.
    pub(crate) fn new(parts: impl IntoIterator<Item = F>) -> Self {
        let slots: Vec<Slot<F>> = parts
            .into_iter()
            .map(|inner| Slot {
                attempts: vec![Some(Timed { inner })],
                outcome: None,
                stalled: None,
            })
            .collect();
        StripeJoin {
            left: slots.len(),
            slots,
            failover: false,
            reported: false,
        }
    }

    /// Joins `parts`, letting a part whose rail was lost wait for another
    /// attempt.
    pub(crate) fn with_failover(parts: impl IntoIterator<Item = F>) -> Self {
        StripeJoin {
            failover: true,
            ..Self::new(parts)
        }
    }

    /// A failover join whose parts that could not even be posted (their
    /// rail was lost: `Err`) start stalled.
    pub(crate) fn with_failover_or_stalled(parts: Vec<std::result::Result<F, Error>>) -> Self {
        let slots: Vec<Slot<F>> = parts
            .into_iter()
            .map(|p| match p {
                Ok(inner) => Slot {
                    attempts: vec![Some(Timed { inner })],
                    outcome: None,
                    stalled: None,
                },
                Err(e) => Slot {
                    attempts: Vec::new(),
                    outcome: None,
                    stalled: Some(e),
                },
            })
            .collect();
        StripeJoin {
            left: slots.len(),
            slots,
            failover: true,
            reported: false,
        }
    }

    /// Adds an attempt at part `part` and returns its index, or hands it
    /// back for a part already done.
    pub(crate) fn add_attempt(&mut self, part: usize, attempt: F) -> std::result::Result<usize, F> {
        match self.slots.get_mut(part) {
            Some(slot) if slot.outcome.is_none() && !self.reported => {
                slot.stalled = None;
                slot.attempts.push(Some(Timed { inner: attempt }));
                Ok(slot.attempts.len() - 1)
            }
            _ => Err(attempt),
        }
    }

    /// Takes out the pending attempts at part `part` (none once it has an
    /// outcome): the part then waits for a new one.
    pub(crate) fn take_attempts(&mut self, part: usize) -> Vec<F> {
        match self.slots.get_mut(part) {
            Some(slot) if slot.outcome.is_none() && !self.reported => slot
                .attempts
                .iter_mut()
                .filter_map(|a| a.take().map(|t| t.inner))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether part `part` has no outcome yet.
    pub(crate) fn is_open(&self, part: usize) -> bool {
        !self.reported && self.slots.get(part).is_some_and(|s| s.outcome.is_none())
    }

    /// Part `part` is known to be done (its receiver says so) although no
    /// attempt here has finished: its pending attempts stay, for
    /// [`take_pending`](Self::take_pending).
    pub(crate) fn mark_done(&mut self, part: usize, rail: usize, bytes: usize) {
        if self.reported {
            return;
        }
        if let Some(slot) = self.slots.get_mut(part) {
            if slot.outcome.is_none() {
                slot.stalled = None;
                slot.outcome = Some(Ok(PartDone {
                    part,
                    attempt: slot.attempts.len(),
                    rail,
                    bytes,
                    at: Instant::now(),
                }));
                self.left -= 1;
            }
        }
    }

    /// The parts waiting for a new attempt, with the error of the last
    /// attempt that lost its rail.
    pub(crate) fn stalled(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.stalled.as_ref()?)))
    }

    /// Fails every part that is not done with `error` (the transfer gives
    /// up: no rail is left for it). Its pending attempts stay, for
    /// [`take_pending`](Self::take_pending).
    pub(crate) fn fail_open(&mut self, error: &Error) {
        for s in self.slots.iter_mut().filter(|s| s.outcome.is_none()) {
            s.stalled = None;
            s.outcome = Some(Err(Error::new(error.kind(), error.message().to_owned())));
            self.left -= 1;
        }
    }

    /// The attempts still pending (of parts another attempt finished, or
    /// of a join given up), taken out.
    pub(crate) fn take_pending(&mut self) -> Vec<F> {
        self.slots
            .iter_mut()
            .flat_map(|s| s.attempts.iter_mut())
            .filter_map(|a| a.take().map(|t| t.inner))
            .collect()
    }

    /// Polls every pending attempt of every open part; ready (once) when
    /// every part has an outcome.
    pub(crate) fn poll_join(&mut self, cx: &mut Context<'_>) -> Poll<Joined> {
        for (part, slot) in self.slots.iter_mut().enumerate() {
            if slot.outcome.is_some() {
                continue;
            }
            for i in 0..slot.attempts.len() {
                let Some(t) = slot.attempts[i].as_mut() else {
                    continue;
                };
                let Poll::Ready((out, at)) = Pin::new(t).poll(cx) else {
                    continue;
                };
                slot.attempts[i] = None;
                match out.result {
                    Ok(n) => {
                        slot.outcome = Some(Ok(PartDone {
                            part,
                            attempt: i,
                            rail: out.rail,
                            bytes: n,
                            at,
                        }));
                        slot.stalled = None;
                        self.left -= 1;
                        break;
                    }
                    Err(e) => {
                        let others = slot.attempts.iter().any(Option::is_some);
                        if self.failover && rail_lost(e.kind()) {
                            if !others {
                                slot.stalled = Some(e);
                            }
                        } else if !others {
                            slot.outcome = Some(Err(e));
                            self.left -= 1;
                        }
                    }
                }
            }
        }
        if self.left > 0 || self.reported {
            return Poll::Pending;
        }
        self.reported = true;
        let mut joined = Joined {
            bytes: 0,
            error: None,
            parts: Vec::with_capacity(self.slots.len()),
        };
        for s in &mut self.slots {
            match s.outcome.take() {
                Some(Ok(done)) => {
                    joined.bytes += done.bytes as u64;
                    joined.parts.push(done);
                }
                Some(Err(e)) if joined.error.is_none() => joined.error = Some(e),
                _ => {}
            }
        }
        Poll::Ready(joined)
    }
}

impl<F: Future<Output = PartOutput> + Unpin + OnRail> StripeJoin<F> {
    /// The open parts with no pending attempt outside the rails in `dead`
    /// (a mask): the parts a failover must send again elsewhere.
    pub(crate) fn open_only_on(&self, dead: u64) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.outcome.is_none() && !self.reported)
            .filter(|(_, s)| {
                s.attempts
                    .iter()
                    .flatten()
                    .all(|t| dead & (1 << t.inner.rail()) != 0)
            })
            .map(|(i, _)| i)
            .collect()
    }
}

impl<F: Future<Output = PartOutput> + Unpin> Future for StripeJoin<F> {
    type Output = Joined;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Joined> {
        self.get_mut().poll_join(cx)
    }
}

/// A transfer's parts while they travel: the join, which the driver keeps
/// in its tables and polls from its progress step.
pub(crate) struct Striped {
    pub(crate) join: StripeJoin<RailPart>,
}

impl Striped {
    /// Joins parts some of which could not be posted (stalled from the
    /// start, waiting for a failover attempt).
    pub(crate) fn with_stalled(parts: Vec<std::result::Result<RailPart, Error>>) -> Self {
        Striped {
            join: StripeJoin::with_failover_or_stalled(parts),
        }
    }

    /// Polls the join.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Joined> {
        self.join.poll_join(cx)
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
