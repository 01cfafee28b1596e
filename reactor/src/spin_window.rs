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

/// A future on this thread is still pending: whether it should keep
/// spinning (`true`) or sleep (`false`) with a window of `spin`.
#[inline]
pub(crate) fn keep_spinning(spin: Duration) -> bool {
    WINDOW.with(|w| {
        let mut win = w.get();
        let keep = match win.since {
            None => {
                win.since = Some(Instant::now());
                win.polls = 0;
                true
            }
            Some(since) => {
                win.polls += 1;
                if win.polls < CLOCK_EVERY {
                    true
                } else {
                    win.polls = 0;
                    since.elapsed() < spin
                }
            }
        };
        w.set(win);
        keep
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_zero_window_sleeps_after_one_clock_period() {
        activity();
        let verdicts: Vec<bool> = (0..=CLOCK_EVERY)
            .map(|_| keep_spinning(Duration::ZERO))
            .collect();
        assert!(verdicts[..CLOCK_EVERY as usize].iter().all(|&k| k));
        assert!(!verdicts[CLOCK_EVERY as usize]);
    }
}
