//! One posted operation as its future sees it: the endpoint that posted it
//! and its completion slot. Polling it makes progress (manual mode) or waits
//! for the auto thread; dropping it before completion is always safe.

use crate::engine::MqCompletion;
use crate::fabric::EndpointCore;
use crate::reactor::{CompletionTable, OpKey};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Which queue carries the operation: it decides how a drop cancels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// The engine's tag-matching MQ (tagged messages, and untagged ones by
    /// default).
    Mq,
    /// The AM message queue (`FI_PSM_AM_MSG=1`).
    AmMsg,
}

/// A posted, not yet completed operation.
///
/// The op's buffer lives in the engine (or in the completion slot once the
/// engine is done), never here: that is what makes dropping or forgetting
/// the future safe (`design.md`, principle 3). On drop, a receive that has
/// not matched is cancelled, and the slot is abandoned: the table frees the
/// buffer when the engine completes.
#[derive(Debug)]
pub(crate) struct PendingOp {
    ep: Arc<EndpointCore>,
    key: OpKey,
    carrier: Carrier,
    receive: bool,
    /// False once the value was taken: the slot is no longer ours.
    live: bool,
}

impl PendingOp {
    pub(crate) fn new(ep: Arc<EndpointCore>, key: OpKey, carrier: Carrier, receive: bool) -> Self {
        PendingOp {
            ep,
            key,
            carrier,
            receive,
            live: true,
        }
    }

    /// The endpoint that posted the op.
    pub(crate) fn endpoint(&self) -> &Arc<EndpointCore> {
        &self.ep
    }

    /// Polls for the completion. After `Ready` the slot is freed and the
    /// op is over; polling again is a caller bug (it panics, as the table
    /// does for a dead key).
    #[inline]
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        let domain = self.ep.domain();
        let r = match self.carrier {
            // The engine's fast path: in manual mode it tests this one
            // request instead of running a whole progress round.
            Carrier::Mq => domain
                .engine()
                .poll_completion(domain.reactor(), self.key, cx),
            Carrier::AmMsg => domain
                .reactor()
                .poll_completion(domain.table(), self.key, cx),
        };
        if r.is_ready() {
            self.live = false;
        }
        r
    }

    /// Gives up the future side of the op without abandoning its slot (a
    /// route takes it over).
    pub(crate) fn detach(mut self) -> (Arc<EndpointCore>, OpKey, Carrier, bool) {
        self.live = false;
        (self.ep.clone(), self.key, self.carrier, self.receive)
    }

    /// Asks the engine to cancel the receive if it has not matched yet;
    /// `true` when it will complete with `Canceled`.
    pub(crate) fn cancel(&self) -> bool {
        if !self.receive || !self.live {
            return false;
        }
        let domain = self.ep.domain();
        let cancelled = match self.carrier {
            Carrier::Mq => domain.engine().cancel(self.key).unwrap_or(false),
            Carrier::AmMsg => domain.am_msg().cancel(self.key),
        };
        if cancelled {
            domain.reactor().notify();
        }
        cancelled
    }
}

impl Drop for PendingOp {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        self.cancel();
        // The value, if the op already completed, is dropped here; otherwise
        // the table drops it when the engine completes.
        drop(self.ep.domain().table().abandon(self.key));
    }
}

/// Frees a slot that was inserted but whose post failed (the engine will
/// never complete it).
pub(crate) fn release_unposted(table: &CompletionTable<MqCompletion>, key: OpKey) {
    drop(table.retire(key));
}
