//! Blocking work moved off the caller's thread, for the async forms of the
//! calls that wait: an address vector's connect
//! ([`AddressVector::insert_async`](super::AddressVector::insert_async)),
//! a domain's linger and engine close
//! ([`Domain::close_async`](super::Domain::close_async)), and the same
//! linger when the last handle of a domain is dropped on an async
//! runtime's thread.
//!
//! The engines' connect and close are blocking calls (libpsm's
//! `psm_ep_connect` and `psm_ep_close` are, and the soft engine's follow
//! the same contract), so they cannot be polled: each runs on a thread of
//! its own (named `psmrail-connect` or `psmrail-close`), as mrail's
//! reconnects already do, and the future awaits its result through a
//! oneshot channel, woken when the thread is done. No executor thread is
//! parked meanwhile; the waiting thread is one per call, and it ends with
//! the call.

use futures::channel::oneshot;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

/// The result of blocking work running on a thread of its own; `None`
/// when the thread ended without one (it cannot: the work does not
/// panic, but the channel says so if it did).
#[derive(Debug)]
pub(crate) struct Offload<T> {
    rx: oneshot::Receiver<T>,
}

impl<T> Future for Offload<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut self.rx).poll(cx).map(|r| r.ok())
    }
}

/// Runs `work` on a new thread named `name`.
///
/// # Errors
/// When no thread can be started: the error, and `work` back (not run).
pub(crate) fn spawn<T, F>(name: &str, work: F) -> Result<Offload<T>, (std::io::Error, F)>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    // The work comes back from a thread that did not start.
    let slot = Arc::new(Mutex::new(Some(work)));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let work = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(work) = work {
                // The receiver may be gone (the future was dropped).
                let _ = tx.send(work());
            }
        });
    match spawned {
        Ok(_) => Ok(Offload { rx }),
        Err(e) => match slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(work) => Err((e, work)),
            // Unreachable: a thread that did not start took nothing.
            None => Ok(Offload { rx }),
        },
    }
}

/// Runs `work` on a thread of its own when one starts, else here (said at
/// `warn`): for work that must be done whatever happens (a close).
pub(crate) fn spawn_or_run<F>(name: &str, work: F)
where
    F: FnOnce() + Send + 'static,
{
    if let Err((e, work)) = spawn(name, work) {
        tracing::warn!(error = %e, "cannot start the {name} thread: running its work here");
        work();
    }
}

/// Whether the calling thread runs inside an async runtime that must not
/// be blocked: a tokio runtime (feature `tokio`). Without the feature
/// nothing is detected, and dropping a domain's last handle closes it on
/// the dropping thread as before.
#[cfg(feature = "tokio")]
pub(crate) fn in_async_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Without the feature `tokio`: never.
#[cfg(not(feature = "tokio"))]
pub(crate) fn in_async_runtime() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_elsewhere_and_its_result_comes_back() {
        let here = std::thread::current().id();
        let Ok(task) = spawn("psmrail-test", move || std::thread::current().id() != here) else {
            panic!("no thread");
        };
        assert_eq!(futures::executor::block_on(task), Some(true));
    }

    #[test]
    fn a_dropped_future_lets_the_work_finish() {
        let (tx, rx) = std::sync::mpsc::channel();
        let Ok(task) = spawn("psmrail-test", move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let _ = tx.send(7);
        }) else {
            panic!("no thread");
        };
        drop(task);
        assert_eq!(rx.recv().ok(), Some(7));
    }
}
