//! The sleep gate: the hand-off between `Reactor::notify` and the auto
//! progress thread going to sleep.
//!
//! One atomic byte with three states: `AWAKE` (running rounds), `SLEEPING`
//! (committed to sleep), `NOTIFIED` (work was posted since the thread last
//! looked). Every transition is a read-modify-write, so whoever reads a
//! `NOTIFIED` also synchronises with every notifier before it:
//!
//! * notifier: `swap(NOTIFIED)`; only if the old state was `SLEEPING` must it
//!   wake the thread through the OS (mio `Waker` or `unpark`). Otherwise it
//!   is one atomic operation and no system call: the thread is awake and
//!   will look at the gate before it sleeps.
//! * thread, before sleeping: `compare_exchange(AWAKE, SLEEPING)`. If that
//!   fails the state was `NOTIFIED`: it swaps back to `AWAKE` and runs
//!   another round instead of sleeping.
//! * thread, after sleeping (for any reason): `swap(AWAKE)`, then a round.
//!
//! So a notify either lands before the thread commits to sleep (it does
//! not sleep) or after (the notifier sees `SLEEPING` and wakes it); a round
//! always runs after the notify and sees the work posted before it. A late
//! OS wake-up (the thread had already woken by timeout) leaves a pending
//! token, which only costs one extra round later. `tests/loom.rs` checks
//! this with loom's `park`/`unpark` standing in for the OS.
//!
//! The gate is public only under `--cfg loom`, for those tests.

use std::sync::atomic::Ordering::{AcqRel, Acquire};

use crate::sync::AtomicU8;

const AWAKE: u8 = 0;
const SLEEPING: u8 = 1;
const NOTIFIED: u8 = 2;

/// Sleep/notify hand-off state (see the module docs).
#[derive(Debug)]
pub struct SleepGate {
    state: AtomicU8,
}

impl Default for SleepGate {
    fn default() -> Self {
        Self::new()
    }
}

impl SleepGate {
    /// A gate in the awake state.
    pub fn new() -> Self {
        SleepGate {
            state: AtomicU8::new(AWAKE),
        }
    }

    /// Notifier side: records that work was posted. Returns `true` when the
    /// thread is asleep and the caller must wake it through the OS.
    #[inline]
    pub fn notify(&self) -> bool {
        self.state.swap(NOTIFIED, AcqRel) == SLEEPING
    }

    /// Thread side, before sleeping. `true`: committed to sleep (a notify
    /// from now on wakes it). `false`: a notify arrived since the last look;
    /// it is consumed and the thread must run a round instead.
    #[inline]
    pub fn prepare_sleep(&self) -> bool {
        match self
            .state
            .compare_exchange(AWAKE, SLEEPING, AcqRel, Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                // NOTIFIED (the thread is the only one to set SLEEPING or
                // AWAKE). Swap, not store: a store could erase a notify that
                // lands in between without synchronising with it.
                self.state.swap(AWAKE, AcqRel);
                false
            }
        }
    }

    /// Thread side, after the sleep ended. Returns `true` if a notify
    /// arrived while it slept.
    #[inline]
    pub fn wake_up(&self) -> bool {
        self.state.swap(AWAKE, AcqRel) == NOTIFIED
    }

    /// Whether the thread is committed to sleep right now (observability).
    pub fn is_sleeping(&self) -> bool {
        self.state.load(Acquire) == SLEEPING
    }
}
