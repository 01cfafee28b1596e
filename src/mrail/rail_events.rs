//! The rail events of a multi-rail domain: each time a rail of one of its
//! endpoints goes down, starts rejoining or is back in service, the
//! domain's queue gets a [`RailEvent`], read like an event queue
//! ([`RailEvents::read`]) or awaited as a [`futures::Stream`].
//!
//! The queue keeps the latest [`CAPACITY`] (1024) events; older ones are dropped
//! (and counted, [`RailEvents::dropped`]) so that an application that
//! never reads them costs nothing.

use super::core::rail_health::RailEvent;
use crate::reactor::Reactor;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Most events kept unread.
pub(crate) const CAPACITY: usize = 1024;

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<RailEvent>,
    dropped: u64,
    waker: Option<Waker>,
}

/// The domain's queue (shared by its endpoint's driver).
#[derive(Debug, Default)]
pub(crate) struct RailEventQueue {
    inner: Mutex<Queue>,
}

impl RailEventQueue {
    /// Adds `event`, waking a reader.
    pub(crate) fn push(&self, event: RailEvent) {
        let waker = {
            let mut q = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if q.events.len() == CAPACITY {
                q.events.pop_front();
                q.dropped += 1;
            }
            q.events.push_back(event);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A reader of a domain's rail events
/// ([`MrailDomain::rail_events`](super::MrailDomain::rail_events)): a cheap
/// `Clone` handle on the one queue, so events go to whichever handle reads
/// first.
///
/// Reading makes progress in manual mode (a rail's failure is noticed by
/// the endpoint's progress), so a loop that only waits for rail events
/// still sees them.
#[derive(Clone, Debug)]
pub struct RailEvents {
    queue: Arc<RailEventQueue>,
    reactor: Reactor,
}

impl RailEvents {
    pub(crate) fn new(queue: Arc<RailEventQueue>, reactor: Reactor) -> Self {
        RailEvents { queue, reactor }
    }

    /// The oldest unread event, if any (`fi_eq_read`), after a round of
    /// progress in manual mode.
    pub fn read(&self) -> Option<RailEvent> {
        if let Some(e) = self.take() {
            return Some(e);
        }
        if self.reactor.is_manual() {
            self.reactor.progress();
        }
        self.take()
    }

    /// Events dropped because 1024 were unread (the oldest go first).
    pub fn dropped(&self) -> u64 {
        let q = self
            .queue
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        q.dropped
    }

    fn take(&self) -> Option<RailEvent> {
        let mut q = self
            .queue
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        q.events.pop_front()
    }
}

impl futures::Stream for RailEvents {
    type Item = RailEvent;

    /// The next event; never ends. In manual mode every poll makes a round
    /// of progress and asks to be polled again, as the operations'
    /// futures do.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RailEvent>> {
        if let Some(e) = self.read() {
            return Poll::Ready(Some(e));
        }
        {
            let mut q = self
                .queue
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(e) = q.events.pop_front() {
                return Poll::Ready(Some(e));
            }
            q.waker = Some(cx.waker().clone());
        }
        if self.reactor.is_manual() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}
