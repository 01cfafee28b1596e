//! The spin window of adaptive progress: how long a thread's pending
//! operation futures keep making progress themselves before they sleep.
//!
//! In [`ProgressMode::Adaptive`](crate::ProgressMode::Adaptive) an
//! operation future that finds its value missing first behaves as in manual
//! progress (it steps the engine and asks to be polled again at once), so a
//! reply that arrives within microseconds is seen without any thread
//! switch. Once the thread has spun for the configured time without any of
//! its operations completing, its futures register their wakers and sleep;
//! the auto thread, sleeping on socket readiness (or its interval), wakes
//! them. Any completion a future takes ends the window, so the next wait
//! on this thread spins again.
//!
//! The window is per thread (it is the thread's core that spins), shared by
//! every reactor the thread polls. Reading the clock costs ~25 ns, so it
//! is read once per [`CLOCK_EVERY`] pending polls only.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Pending polls between two looks at the clock.
pub(crate) const CLOCK_EVERY: u32 = 16;

#[derive(Copy, Clone)]
struct Window {
    /// When this thread's current wait began (`None`: not waiting).
    since: Option<Instant>,
    /// Pending polls since the last look at the clock.
    polls: u32,
}

thread_local! {
    static WINDOW: Cell<Window> = const {
        Cell::new(Window { since: None, polls: 0 })
    };
}

/// A future on this thread took its value: the next wait spins again.
#[inline]
pub(crate) fn activity() {
    WINDOW.with(|w| {
        w.set(Window {
            since: None,
            polls: 0,
        })
    });
}

/// What a pending future should do next.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep spinning (the clock was not read).
    Spin,
    /// Keep spinning; the clock was read and said this.
    SpinAt(Instant),
    /// The window is closed: sleep.
    Sleep,
}

/// A future on this thread is still pending: whether it should keep
/// spinning or sleep, with a window of `spin`.
#[inline]
pub(crate) fn verdict(spin: Duration) -> Verdict {
    WINDOW.with(|w| {
        let mut win = w.get();
        let verdict = match win.since {
            None => {
                let now = Instant::now();
                win.since = Some(now);
                win.polls = 0;
                Verdict::SpinAt(now)
            }
            Some(since) => {
                win.polls += 1;
                if win.polls < CLOCK_EVERY {
                    Verdict::Spin
                } else {
                    win.polls = 0;
                    let now = Instant::now();
                    if now.duration_since(since) < spin {
                        Verdict::SpinAt(now)
                    } else {
                        Verdict::Sleep
                    }
                }
            }
        };
        w.set(win);
        verdict
    })
}

/// The reactor-wide trace of spinning futures: when one last read the
/// clock while spinning. The auto thread stands aside while it is fresh
/// (the spinners make progress themselves, and a thread woken by every
/// socket event would only take their cores), and a future that stops
/// spinning to sleep clears it and unparks the thread.
///
/// On a cache line of its own: spinners store to it every
/// [`CLOCK_EVERY`] polls.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct SpinBeat {
    epoch: Instant,
    /// Nanoseconds from `epoch` to the last beat, plus one; 0: none.
    last: AtomicU64,
}

impl SpinBeat {
    pub(crate) fn new() -> SpinBeat {
        SpinBeat {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// A spinning future read the clock: `now`.
    #[inline]
    pub(crate) fn beat(&self, now: Instant) {
        let ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.last.store(ns + 1, Relaxed);
    }

    /// A future stopped spinning to sleep.
    pub(crate) fn clear(&self) {
        self.last.store(0, Relaxed);
    }

    /// Whether some future beat within `spin` before `now`.
    pub(crate) fn active(&self, now: Instant, spin: Duration) -> bool {
        let last = self.last.load(Relaxed);
        if last == 0 {
            return false;
        }
        let now_ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        now_ns.saturating_sub(last - 1) < spin.as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep_spinning(spin: Duration) -> bool {
        verdict(spin) != Verdict::Sleep
    }

    #[test]
    fn a_window_closes_after_its_time_and_activity_reopens_it() {
        activity();
        let spin = Duration::from_millis(5);
        assert!(
            keep_spinning(spin),
            "the first pending poll opens the window"
        );
        for _ in 0..CLOCK_EVERY * 4 {
            assert!(keep_spinning(spin), "still within 5 ms");
        }
        std::thread::sleep(Duration::from_millis(10));
        let closed = (0..CLOCK_EVERY).any(|_| !keep_spinning(spin));
        assert!(closed, "the window must close within one clock period");
        activity();
        assert!(keep_spinning(spin), "a completion reopens the window");
    }

    #[test]
    fn a_beat_is_fresh_for_one_window_and_clear_ends_it() {
        let beat = SpinBeat::new();
        let now = Instant::now();
        let spin = Duration::from_micros(100);
        assert!(!beat.active(now, spin), "no beat yet");
        beat.beat(now);
        assert!(beat.active(now, spin));
        assert!(beat.active(now + Duration::from_micros(99), spin));
        assert!(!beat.active(now + Duration::from_micros(101), spin));
        beat.beat(now);
        beat.clear();
        assert!(!beat.active(now, spin));
    }

    #[test]
    fn a_zero_window_sleeps_after_one_clock_period() {
        activity();
        let verdicts: Vec<bool> = (0..=CLOCK_EVERY)
            .map(|_| keep_spinning(Duration::ZERO))
            .collect();
        assert!(verdicts[..CLOCK_EVERY as usize].iter().all(|&k| k));
        assert!(!verdicts[CLOCK_EVERY as usize]);
    }
}
