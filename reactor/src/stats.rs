//! Reactor statistics: cheap counters kept while running, and the snapshot
//! [`ReactorStats`] that [`Reactor::stats`](crate::Reactor::stats) returns.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A snapshot of a reactor's counters (all since the reactor was built).
///
/// ```
/// use psmrail_reactor::Reactor;
/// let reactor = Reactor::manual();
/// reactor.progress();
/// let stats = reactor.stats();
/// assert_eq!(stats.rounds, 1);
/// assert_eq!(stats.productive_rounds, 0);
/// assert_eq!(stats.auto_thread_cpu, None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReactorStats {
    /// Progress rounds run (by the auto thread and every caller of
    /// `progress`, `block_on` and the manual-mode futures).
    pub rounds: u64,
    /// Rounds in which some source made progress.
    pub productive_rounds: u64,
    /// Times the auto thread went to sleep (gate-based strategies: park and
    /// poll; naps and spins are not counted).
    pub sleeps: u64,
    /// Sleeps ended because `notify` was called.
    pub notify_wakeups: u64,
    /// Sleeps ended by readiness of a registered socket.
    pub io_wakeups: u64,
    /// Sleeps that ran their whole interval.
    pub timeouts: u64,
    /// `notify` calls that found the thread asleep and had to wake it with
    /// a system call (all other calls cost one atomic operation).
    pub os_wakes: u64,
    /// Panics caught in (or propagated from) sources; each poisons its source.
    pub source_panics: u64,
    /// Errors from the auto thread's `mio::Poll::poll` other than EINTR
    /// (the thread then sleeps with `nanosleep` for that round).
    pub poll_errors: u64,
    /// Adaptive mode: times a future's spin window closed and it went to
    /// sleep waiting for the auto thread.
    pub spin_handoffs: u64,
    /// Adaptive mode: times the auto thread found futures spinning and
    /// stood aside (parked instead of watching the sockets) until they
    /// stopped.
    pub stand_asides: u64,
    /// Sources currently added.
    pub sources: usize,
    /// Whether the auto thread is committed to sleep right now.
    pub sleeping: bool,
    /// CPU time used so far by the auto thread (`None` in manual mode).
    pub auto_thread_cpu: Option<Duration>,
}

/// The live counters (relaxed atomics; one cache line of their own so the
/// round counter does not false-share with the sources or the gate).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Counters {
    pub(crate) rounds: AtomicU64,
    pub(crate) productive_rounds: AtomicU64,
    pub(crate) sleeps: AtomicU64,
    pub(crate) notify_wakeups: AtomicU64,
    pub(crate) io_wakeups: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) os_wakes: AtomicU64,
    pub(crate) source_panics: AtomicU64,
    pub(crate) poll_errors: AtomicU64,
    pub(crate) spin_handoffs: AtomicU64,
    pub(crate) stand_asides: AtomicU64,
}

/// Adds one to a counter.
#[inline]
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl Counters {
    /// The counters as a [`ReactorStats`] (fields the counters do not hold
    /// are left at their defaults for the caller to fill in).
    pub(crate) fn snapshot(&self) -> ReactorStats {
        ReactorStats {
            rounds: self.rounds.load(Relaxed),
            productive_rounds: self.productive_rounds.load(Relaxed),
            sleeps: self.sleeps.load(Relaxed),
            notify_wakeups: self.notify_wakeups.load(Relaxed),
            io_wakeups: self.io_wakeups.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            os_wakes: self.os_wakes.load(Relaxed),
            source_panics: self.source_panics.load(Relaxed),
            poll_errors: self.poll_errors.load(Relaxed),
            spin_handoffs: self.spin_handoffs.load(Relaxed),
            stand_asides: self.stand_asides.load(Relaxed),
            ..ReactorStats::default()
        }
    }
}
