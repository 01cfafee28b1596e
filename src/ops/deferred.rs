//! Work deferred to the domain's next progress round.
//!
//! Completions are delivered inside an engine's progress, with the engine's
//! lock held, so what runs there must not call into the engine (a route
//! pushes a CQ entry and returns, `post.rs`). Work that has to post again
//! at a completion — the next part of a multi-receive posted with a context
//! — is queued here instead and runs from a progress source of the
//! domain's reactor, outside every engine lock, at the next round (which
//! the queueing asks the auto thread for).
//!
//! The queue is made, and added to the reactor, at the first use of a
//! domain ([`DomainCore::deferred`](crate::fabric::Domain)), and taken out
//! of the reactor with the domain's other sources when the domain closes;
//! work queued after that never runs (its endpoint is gone).

use crate::reactor::{Progress, ProgressSource};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// One piece of deferred work.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The queue of deferred work, a progress source.
#[derive(Default)]
pub(crate) struct Deferred {
    jobs: Mutex<Vec<Job>>,
    /// Jobs are queued (set after a push, cleared before a take).
    pending: AtomicBool,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl Deferred {
    /// Queues `job` for the next progress round.
    pub(crate) fn push(&self, job: Job) {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job);
        self.pending.store(true, Ordering::Release);
    }
}

impl ProgressSource for Deferred {
    fn progress(&self) -> Progress {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return Progress::Idle;
        }
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(PoisonError::into_inner));
        let made = !jobs.is_empty();
        for job in jobs {
            job();
        }
        Progress::from(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn jobs_run_once_at_the_next_round_in_order() {
        let d = Deferred::default();
        assert_eq!(d.progress(), Progress::Idle);
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let s = seen.clone();
            d.push(Box::new(move || s.lock().unwrap().push(i)));
        }
        assert_eq!(d.progress(), Progress::Made);
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(d.progress(), Progress::Idle);
    }

    #[test]
    fn a_job_may_queue_another_for_the_round_after() {
        let d = Arc::new(Deferred::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let (d2, r2) = (d.clone(), runs.clone());
        d.push(Box::new(move || {
            r2.fetch_add(1, Ordering::SeqCst);
            let r3 = r2.clone();
            d2.push(Box::new(move || {
                r3.fetch_add(1, Ordering::SeqCst);
            }));
        }));
        d.progress();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        d.progress();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
