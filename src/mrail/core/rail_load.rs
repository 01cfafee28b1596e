//! [`RailLoad`]: which striped parts are travelling on each rail, and the
//! rate samples their completions give.
//!
//! Two kinds of sample, because a part's duration alone says how busy its
//! rail was as much as how fast it is:
//!
//! * **Alone**: a part that had its rail to itself from posting to
//!   completion ([`RailStint::end`] says so): its bytes over its duration.
//!   This is what one message at a time gives.
//! * **Backlogged**: while a rail stays busy (parts in flight without a
//!   gap), the bytes of each completion after the first, over the time
//!   since the previous completion, add up; once they reach
//!   [`MIN_SAMPLE_BYTES`] over [`MIN_SAMPLE_TIME`] they are a sample
//!   ([`RailLoad::take_samples`]). A rail that carries a stream is always
//!   backlogged, and its completions come at its own pace: a fast rail's
//!   parts land sooner after each other than a slow one's, whatever the
//!   split. This is what a stream of messages gives.
//!
//! The counters are per rail under a small lock; stints end wherever a
//! part completes or is dropped. Times are passed in (no clock is read
//! here).

use super::rail_rates::{MIN_SAMPLE_BYTES, MIN_SAMPLE_TIME};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Parts in flight per rail, and the backlogged samples they gave.
///
/// ```
/// use psmrail::mrail::core::rail_load::RailLoad;
/// use std::time::{Duration, Instant};
///
/// let t = Instant::now();
/// let load = RailLoad::new(2);
/// let a = RailLoad::begin(&load, 0);
/// let b = RailLoad::begin(&load, 1);
/// assert!(a.end(t, 10) && b.end(t, 10), "each had its rail alone");
///
/// let first = RailLoad::begin(&load, 0);
/// let second = RailLoad::begin(&load, 0);
/// assert!(!first.end(t, 10), "joined by a second part");
/// assert!(!second.end(t + Duration::from_millis(1), 10), "began behind the first");
/// ```
#[derive(Debug)]
pub struct RailLoad {
    rails: Vec<Mutex<RailCounters>>,
    samples: Mutex<Vec<(usize, u64, Duration)>>,
}

#[derive(Debug, Default)]
struct RailCounters {
    busy: u32,
    begun: u64,
    /// The last completion of the current busy period.
    last_done: Option<Instant>,
    /// Backlogged bytes and time gathered towards the next sample.
    bytes: u64,
    time: Duration,
}

/// One part's time on its rail; [`end`](RailStint::end) (or dropping it)
/// takes it off the rail.
#[derive(Debug)]
pub struct RailStint {
    load: Arc<RailLoad>,
    rail: usize,
    /// Whether the rail was idle when the part began.
    idle: bool,
    /// The rail's `begun` count just after this part began.
    begun: u64,
    ended: bool,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RailLoad {
    /// Counters for `rails` rails, all idle.
    pub fn new(rails: usize) -> Arc<RailLoad> {
        Arc::new(RailLoad {
            rails: (0..rails).map(|_| Mutex::default()).collect(),
            samples: Mutex::new(Vec::new()),
        })
    }

    /// A part begins on `rail` (a rail beyond the counters never counts).
    pub fn begin(load: &Arc<RailLoad>, rail: usize) -> RailStint {
        let (idle, begun) = match load.rails.get(rail) {
            Some(c) => {
                let mut c = relock(c);
                let idle = c.busy == 0;
                if idle {
                    // A new busy period: intervals across the gap say
                    // nothing.
                    c.last_done = None;
                }
                c.busy += 1;
                c.begun += 1;
                (idle, c.begun)
            }
            None => (false, 0),
        };
        RailStint {
            load: Arc::clone(load),
            rail,
            idle,
            begun,
            ended: false,
        }
    }

    /// Parts in flight on `rail` now.
    pub fn busy(&self, rail: usize) -> u32 {
        self.rails.get(rail).map_or(0, |c| relock(c).busy)
    }

    /// The backlogged samples gathered since the last call: `(rail,
    /// bytes, time)`.
    pub fn take_samples(&self) -> Vec<(usize, u64, Duration)> {
        std::mem::take(&mut *relock(&self.samples))
    }
}

impl RailStint {
    /// The part is done at `now`, having moved `bytes`: whether it had the
    /// rail to itself all along. A completion in a busy period also feeds
    /// the rail's backlogged sample.
    pub fn end(mut self, now: Instant, bytes: u64) -> bool {
        self.finish(Some((now, bytes)))
    }

    fn finish(&mut self, done: Option<(Instant, u64)>) -> bool {
        if self.ended {
            return false;
        }
        self.ended = true;
        let Some(c) = self.load.rails.get(self.rail) else {
            return false;
        };
        let mut c = relock(c);
        let alone = self.idle && c.begun == self.begun;
        c.busy -= 1;
        let Some((now, bytes)) = done else {
            // Dropped: what was gathered may be skewed.
            c.last_done = None;
            c.bytes = 0;
            c.time = Duration::ZERO;
            return false;
        };
        if let Some(prev) = c.last_done {
            c.bytes += bytes;
            c.time += now.saturating_duration_since(prev);
        }
        c.last_done = (c.busy > 0).then_some(now);
        if c.bytes >= MIN_SAMPLE_BYTES && c.time >= MIN_SAMPLE_TIME {
            let sample = (self.rail, c.bytes, c.time);
            c.bytes = 0;
            c.time = Duration::ZERO;
            drop(c);
            relock(&self.load.samples).push(sample);
        }
        alone
    }
}

impl Drop for RailStint {
    fn drop(&mut self) {
        self.finish(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_part_that_began_behind_another_is_not_alone_even_after_it_ends() {
        let t = Instant::now();
        let load = RailLoad::new(1);
        let first = RailLoad::begin(&load, 0);
        let second = RailLoad::begin(&load, 0);
        assert_eq!(load.busy(0), 2);
        assert!(!first.end(t, 1));
        assert!(!second.end(t, 1));
        assert_eq!(load.busy(0), 0);
        // Sequential parts are each alone.
        assert!(RailLoad::begin(&load, 0).end(t, 1));
        assert!(RailLoad::begin(&load, 0).end(t, 1));
    }

    #[test]
    fn dropped_stints_leave_the_rail_and_unknown_rails_never_count() {
        let t = Instant::now();
        let load = RailLoad::new(2);
        drop(RailLoad::begin(&load, 1));
        assert_eq!(load.busy(1), 0);
        assert!(RailLoad::begin(&load, 1).end(t, 1));
        assert!(!RailLoad::begin(&load, 7).end(t, 1));
        assert_eq!(load.busy(7), 0);
    }

    #[test]
    fn parts_on_other_rails_do_not_disturb() {
        let t = Instant::now();
        let load = RailLoad::new(2);
        let a = RailLoad::begin(&load, 0);
        let b = RailLoad::begin(&load, 1);
        let c = RailLoad::begin(&load, 1);
        assert!(a.end(t, 1));
        assert!(!b.end(t, 1));
        assert!(!c.end(t, 1));
    }

    /// A stream keeps both rails busy; the fast rail's parts land every
    /// 1 ms, the slow one's every 2.5 ms: their samples show it.
    #[test]
    fn a_backlogged_stream_gives_each_rail_its_own_rate() {
        let t0 = Instant::now();
        let load = RailLoad::new(2);
        let part = 256 << 10;
        for (rail, every) in [(0usize, 1u64), (1, 2)] {
            let mut stints: std::collections::VecDeque<RailStint> =
                (0..4).map(|_| RailLoad::begin(&load, rail)).collect();
            for k in 1..=40u64 {
                stints.push_back(RailLoad::begin(&load, rail));
                let s = stints.pop_front().unwrap();
                s.end(t0 + ms(k * every), part);
            }
        }
        let samples = load.take_samples();
        assert!(samples.iter().any(|s| s.0 == 0) && samples.iter().any(|s| s.0 == 1));
        for (rail, bytes, time) in samples {
            let rate = bytes as f64 / time.as_secs_f64();
            let want = part as f64 / [0.001, 0.002][rail];
            assert!(
                (rate / want - 1.0).abs() < 0.01,
                "rail {rail}: {rate} vs {want}"
            );
        }
        assert!(load.take_samples().is_empty());
    }

    #[test]
    fn a_gap_starts_a_new_busy_period() {
        let t0 = Instant::now();
        let load = RailLoad::new(1);
        // One part at a time with long gaps: alone samples only.
        for k in 0..20u64 {
            let s = RailLoad::begin(&load, 0);
            assert!(s.end(t0 + ms(100 * k + 1), MIN_SAMPLE_BYTES));
        }
        assert!(load.take_samples().is_empty());
    }
}
