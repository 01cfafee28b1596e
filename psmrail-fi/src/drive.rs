//! Operations whose completions the C face delivers itself: RMA and
//! atomics, which psmrail's Rust API offers as futures ([`RmaOp`],
//! [`MrailRmaOp`]). Each C endpoint that posts one gets a [`Driver`], a
//! progress source on its domain's reactor: every progress round (the
//! application's `fi_cq_read`, `fi_cntr_read`, or the auto-progress
//! thread) polls the operations in flight, and a finished one becomes an
//! entry of the endpoint's transmit CQ with the application's context, or
//! an error entry. The futures count the endpoint's `FI_READ` /
//! `FI_WRITE` counters themselves.
//!
//! A future polled inside a round may run a nested round of its own (manual
//! progress does); the reactor skips a source that is already running, so
//! the driver is never re-entered.
//!
//! [`RmaOp`]: psmrail::ops::RmaOp
//! [`MrailRmaOp`]: psmrail::mrail::MrailRmaOp

use crate::entry::{Errno, FiResult};
use psmrail::fabric::{CompletionFlags, CompletionQueue, CqEntry, CqErrEntry};
use psmrail::ops::OpOutput;
use psmrail::reactor::{Progress, ProgressSource, Reactor, SourceId};
use psmrail::ErrorKind;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// An operation's future, as both providers' RMA and atomic calls give it.
pub(crate) type OpFuture = Pin<Box<dyn Future<Output = OpOutput<()>> + Send>>;

/// What to report when an operation ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Report {
    /// The application's context.
    pub(crate) context: u64,
    /// `FI_RMA | FI_WRITE` and the like.
    pub(crate) flags: CompletionFlags,
    /// Whether a success is reported (errors always are).
    pub(crate) complete: bool,
}

struct Op {
    future: OpFuture,
    report: Report,
}

/// Wakes the reactor's auto thread (a no-op in manual progress, where the
/// next round polls every operation anyway).
struct Notify(Reactor);

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.0.notify();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.notify();
    }
}

/// One endpoint's operations in flight (see the module docs).
pub(crate) struct Driver {
    ops: Mutex<Vec<Op>>,
    cq: Option<CompletionQueue>,
    reactor: Reactor,
    waker: Waker,
}

impl Driver {
    /// A driver reporting to `cq`, registered on `reactor`.
    pub(crate) fn start(
        reactor: &Reactor,
        cq: Option<CompletionQueue>,
    ) -> FiResult<(Arc<Driver>, SourceId)> {
        let d = Arc::new(Driver {
            ops: Mutex::new(Vec::new()),
            cq,
            reactor: reactor.clone(),
            waker: Waker::from(Arc::new(Notify(reactor.clone()))),
        });
        let id = reactor.add_source(d.clone()).map_err(|_| Errno::OTHER)?;
        Ok((d, id))
    }

    /// Takes over a started operation. One that failed before anything
    /// was sent is the call's error instead, except a refused access
    /// (a key that names no region here), which is an error completion as
    /// for a key the target refuses.
    pub(crate) fn post(&self, mut future: OpFuture, failed: bool, report: Report) -> FiResult<()> {
        if failed {
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready((Err(e), _)) = future.as_mut().poll(&mut cx) {
                if e.kind() != ErrorKind::Access {
                    return Err(Errno::from(e));
                }
                self.deliver(report, Err(e), 0);
                return Ok(());
            }
        }
        crate::obj::lock(&self.ops).push(Op { future, report });
        self.reactor.notify();
        Ok(())
    }

    /// Leaves the reactor (the endpoint closes): operations in flight run
    /// on unreported.
    pub(crate) fn stop(&self, id: SourceId) {
        self.reactor.remove_source(id);
        crate::obj::lock(&self.ops).clear();
    }

    fn deliver(&self, r: Report, result: psmrail::Result<()>, len: usize) {
        let Some(cq) = &self.cq else { return };
        match result {
            Ok(()) if r.complete => {
                let mut e = CqEntry::new(r.context, r.flags);
                e.len = len;
                cq.write(Ok(e));
            }
            Ok(()) => {}
            Err(error) => cq.write(Err(CqErrEntry::new(r.context, r.flags, error))),
        }
    }
}

impl ProgressSource for Driver {
    fn progress(&self) -> Progress {
        let mut ops = std::mem::take(&mut *crate::obj::lock(&self.ops));
        if ops.is_empty() {
            return Progress::Idle;
        }
        let mut cx = Context::from_waker(&self.waker);
        let mut made = Progress::Idle;
        ops.retain_mut(|op| match op.future.as_mut().poll(&mut cx) {
            Poll::Ready((result, buffer)) => {
                self.deliver(op.report, result, buffer.len());
                made = Progress::Made;
                false
            }
            Poll::Pending => true,
        });
        // Operations posted meanwhile go after the older ones.
        let mut g = crate::obj::lock(&self.ops);
        ops.append(&mut g);
        *g = ops;
        made
    }
}
