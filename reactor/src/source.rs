//! Progress sources: the things a reactor drives.
//!
//! An engine endpoint (a PSM endpoint, a soft-engine socket set, an mrail
//! endpoint driving its rails) implements [`ProgressSource`]: one
//! non-blocking step that moves pending operations forward (polls the MQ,
//! runs the AM queues, completes slots in a
//! [`CompletionTable`](crate::CompletionTable)) and says whether it did
//! anything.

use std::fmt;
use std::io;
use std::ops::{BitOr, BitOrAssign};

/// Result of one progress step or round.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Progress {
    /// Nothing happened.
    #[default]
    Idle,
    /// Something moved: an operation completed, a packet was handled, a
    /// queue was drained. The auto thread runs another round at once.
    Made,
}

impl Progress {
    /// Whether progress was made.
    pub fn made(self) -> bool {
        self == Progress::Made
    }
}

impl From<bool> for Progress {
    fn from(made: bool) -> Self {
        if made {
            Progress::Made
        } else {
            Progress::Idle
        }
    }
}

impl BitOr for Progress {
    type Output = Progress;
    /// `Made` if either side is.
    ///
    /// ```
    /// use psmrail_reactor::Progress;
    /// assert_eq!(Progress::Idle | Progress::Made, Progress::Made);
    /// assert_eq!(Progress::Idle | Progress::Idle, Progress::Idle);
    /// ```
    fn bitor(self, rhs: Progress) -> Progress {
        Progress::from(self.made() || rhs.made())
    }
}

impl BitOrAssign for Progress {
    fn bitor_assign(&mut self, rhs: Progress) {
        *self = *self | rhs;
    }
}

/// Something a [`Reactor`](crate::Reactor) drives.
///
/// # Contract
/// * [`progress`](Self::progress) does one bounded, **non-blocking** step
///   and never waits (no blocking lock, no sleep, no blocking I/O). It is
///   called from the auto thread and, in manual mode, from inside futures'
///   `poll`, `Reactor::progress` and `block_on`, on any thread.
/// * The reactor never runs one source's `progress` on two threads at once
///   (a caller that finds it running skips it, like the C provider's
///   try-lock), but a source added to two reactors can be; sources that are
///   not thread safe (PSM) serialise inside anyway.
/// * A panic in `progress` poisons the source: the reactor never calls it
///   again and counts it in
///   [`ReactorStats::source_panics`](crate::ReactorStats::source_panics). On the auto thread the panic is
///   caught; in manual mode it propagates to the caller after poisoning.
/// * Sources may register sockets (in auto mode only) so that readiness
///   ends the auto thread's sleep early: `register` is called once when the
///   source is added to an auto reactor, `deregister` when it is removed or
///   the reactor is dropped. mio readiness is edge-triggered, and the
///   reactor does not dispatch events: the next round calls `progress` on
///   every source, which must drain what it can.
/// * A source should not own a [`Reactor`](crate::Reactor) handle: the
///   reactor owns its sources, so that is a cycle and the reactor (and its
///   thread) would never be dropped.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use psmrail_reactor::{Progress, ProgressSource};
///
/// /// Completes one queued "operation" per step.
/// struct Countdown(AtomicU32);
///
/// impl ProgressSource for Countdown {
///     fn progress(&self) -> Progress {
///         let left = self.0.load(Ordering::Acquire);
///         if left == 0 {
///             return Progress::Idle;
///         }
///         self.0.store(left - 1, Ordering::Release);
///         Progress::Made
///     }
/// }
///
/// let c = Countdown(AtomicU32::new(1));
/// assert_eq!(c.progress(), Progress::Made);
/// assert_eq!(c.progress(), Progress::Idle);
/// ```
pub trait ProgressSource: Send + Sync + 'static {
    /// One non-blocking progress step; reports whether anything moved.
    fn progress(&self) -> Progress;

    /// Whether a [`progress`](Self::progress) step could find work now: a
    /// cheap hint (an atomic load, say) that a round reads before it takes
    /// the source, skipping it on `false` as if it had been idle. Taking a
    /// source costs two atomic read-modify-writes, and a program polling a
    /// completion queue runs millions of rounds in which queues of work
    /// are empty. A source that learns of its work only inside `progress`
    /// (polling a device or a socket) keeps the default, `true`; one that
    /// returns `false` must make it `true` again (from any thread) when
    /// work arrives, and the next round takes it.
    fn wants_progress(&self) -> bool {
        true
    }

    /// Called by the auto thread just before it sleeps in its `Poll`
    /// (after a round that found nothing to do): a source whose work
    /// arrives by a path the `Poll` does not watch on its own (a ring in
    /// shared memory, whose producer signals an eventfd only when asked
    /// to) asks for that signal here, and answers `false` if work came
    /// meanwhile, so the thread runs another round instead of sleeping.
    /// Called without the source being taken by a round: it must be
    /// cheap and must not block. Default: `true`, nothing to arm.
    fn prepare_sleep(&self) -> bool {
        true
    }

    /// Registers this source's sockets with the auto thread's `Poll` under
    /// `token`, so readiness ends its sleep early. Default: nothing.
    fn register(&self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        let _ = (registry, token);
        Ok(())
    }

    /// Undoes [`register`](Self::register). Default: nothing.
    fn deregister(&self, registry: &mio::Registry) -> io::Result<()> {
        let _ = registry;
        Ok(())
    }
}

/// Identifies a source added to a reactor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(pub(crate) u64);

impl SourceId {
    /// The id as a number (unique within its reactor).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// A [`ProgressSource`] made from a closure (see [`progress_fn`]).
pub struct FnSource<F>(F);

impl<F> fmt::Debug for FnSource<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnSource")
    }
}

impl<F> ProgressSource for FnSource<F>
where
    F: Fn() -> Progress + Send + Sync + 'static,
{
    fn progress(&self) -> Progress {
        (self.0)()
    }
}

/// Wraps a closure as a [`ProgressSource`] (no sockets).
///
/// ```
/// use std::sync::Arc;
/// use psmrail_reactor::{progress_fn, Progress, Reactor};
/// let reactor = Reactor::manual();
/// reactor.add_source(Arc::new(progress_fn(|| Progress::Made))).unwrap();
/// assert_eq!(reactor.progress(), Progress::Made);
/// ```
pub fn progress_fn<F>(f: F) -> FnSource<F>
where
    F: Fn() -> Progress + Send + Sync + 'static,
{
    FnSource(f)
}
