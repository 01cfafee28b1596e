//! The idle assist of a manual-progress reactor: a thread that runs a
//! progress round when nobody has run one for a whole interval.
//!
//! Manual progress leaves progress to the application's calls, and some
//! protocol steps need the *peer's* progress: a native-engine connect (PSM's
//! own and the job handshake) and the soft engine's handshake are answered
//! from the progress of the process being connected to. A libfabric program
//! that blocks outside the library — on its out-of-band control socket, as
//! fabtests do between phases — then leaves a peer's connect unanswered
//! until it times out. The assist answers it: every `interval` it looks at
//! the reactor's round counter, and if no round ran since its last look, it
//! runs one (sources busy on another thread are skipped, as in every
//! round). While the application progresses, the assist only reads the
//! counter once per interval; it never spins and never competes for an
//! engine the application is driving.
//!
//! The reactor stays manual ([`Reactor::is_manual`](crate::Reactor::is_manual)):
//! futures still make their own progress, and nothing may rely on the
//! assist for speed — it is a floor (one round per interval), not a
//! progress thread.
//!
//! Stopping: dropping the last `Reactor` handle sets the stop flag, unparks
//! the thread and joins it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::auto_thread::Shared;

/// The running assist thread of one reactor.
pub(crate) struct IdleAssist {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl IdleAssist {
    /// Starts the thread (named `name`) over `shared`'s sources.
    pub(crate) fn spawn(
        shared: Arc<Shared>,
        interval: Duration,
        name: String,
    ) -> io::Result<IdleAssist> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = thread::Builder::new().name(name).spawn(move || {
            let mut seen = shared.counters.rounds.load(Ordering::Relaxed);
            while !flag.load(Ordering::Acquire) {
                thread::park_timeout(interval);
                if flag.load(Ordering::Acquire) {
                    break;
                }
                let now = shared.counters.rounds.load(Ordering::Relaxed);
                if now == seen {
                    // Caught per source (poisoned and counted): the thread
                    // never dies of a source's panic.
                    shared.sources.round(&shared.counters, true);
                }
                seen = shared.counters.rounds.load(Ordering::Relaxed);
            }
        })?;
        Ok(IdleAssist {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops and joins the thread (unless called from it).
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = self.handle.take() {
            handle.thread().unpark();
            if thread::current().id() != handle.thread().id() {
                let _ = handle.join();
            }
        }
    }
}
