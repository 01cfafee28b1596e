//! [`RailLoad`]: the striped parts travelling on each rail, and the rate
//! samples their completions give.
//!
//! A part that was posted at `a` and completed at `d`, when the part
//! before it on the rail completed at `d'`, counts from `max(a, d')` to
//! `d`: its **service time**. Summed over a rail's **busy period** (from a
//! part posted on an idle rail to the rail idle again) the service times
//! are exactly the busy period, and the bytes of its parts are exactly what
//! the rail moved in it, however the rail shares itself among the parts in
//! flight: one after the other, as a queue with one server, or all at once
//! in interleaved chunks, as the soft engine's rendezvous does, where every
//! part of a window completes near its end. A part's duration alone would
//! mislead in both cases (behind others, it says how long the queue was),
//! and so would a sample cut in the middle of an interleaved busy period:
//! it would hold the long wait of the first part to complete and few of
//! the bytes moved meanwhile.
//!
//! Each rail adds its parts' bytes and service times up, and makes them one
//! sample, bytes over time ([`RailLoad::take_samples`]), when the rail goes
//! idle after at least [`SHORT_SPAN`] and [`MIN_SAMPLE_BYTES`], or, on a
//! rail that never goes idle, once they span [`BUSY_SPAN`]. A sample spans
//! many parts or a long time because single parts mislead: completions are
//! seen in bursts (one progress step takes several), which moves time
//! between neighbouring parts but not out of the sum, and a part's
//! completion can come early when its bytes fit in a socket buffer.
//!
//! The counters are per rail under a small lock; stints end wherever a
//! part completes or is dropped. A rail that goes out of service is
//! measured afresh ([`RailLoad::forget`]): parts still in flight on it
//! then teach nothing, as a part held up by a lost link says nothing of
//! its pace. Times are passed in (no clock is read here).

use super::rail_rates::MIN_SAMPLE_BYTES;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The least service time a sample spans (it closes when its rail goes
/// idle).
pub const SHORT_SPAN: Duration = Duration::from_millis(20);

/// The service time after which a rail that never goes idle gives a
/// sample all the same (the parts still in flight then are a small share
/// of what it moved). The sender feeds each rail its parts one at a time
/// ([`rail_queue`](super::rail_queue)), so its rails go idle, and give a
/// sample, at the end of each part of [`SHORT_SPAN`] or more.
pub const BUSY_SPAN: Duration = Duration::from_secs(1);

/// Parts in flight per rail, and the samples their completions gave.
///
/// ```
/// use psmrail::mrail::core::rail_load::RailLoad;
/// use std::time::{Duration, Instant};
///
/// let t = Instant::now();
/// let ms = Duration::from_millis;
/// let load = RailLoad::new(1);
/// // Eight parts of 1 MiB posted together: each is served after the one
/// // before, 10 ms each (100 MiB/s), not 10, 20, 30 ... ms.
/// let parts: Vec<_> = (0..8).map(|_| RailLoad::begin(&load, 0, t)).collect();
/// for (k, p) in parts.into_iter().enumerate() {
///     p.end(t + ms(10 * (k as u64 + 1)), 1 << 20);
/// }
/// assert_eq!(load.take_samples(), [(0, 8 << 20, ms(80))]);
/// ```
#[derive(Debug)]
pub struct RailLoad {
    rails: Vec<Mutex<RailCounters>>,
    samples: Mutex<Vec<(usize, u64, Duration)>>,
    /// Whether `samples` may hold any (looked at without the lock).
    sampled: AtomicBool,
}

#[derive(Debug, Default)]
struct RailCounters {
    busy: u32,
    /// The bytes of the parts in flight (as given to `begin_sized`).
    busy_bytes: u64,
    /// Bumped by [`RailLoad::forget`]: stints begun before count nothing.
    epoch: u64,
    /// When the last part completed.
    last_done: Option<Instant>,
    /// Bytes and service time gathered towards the next sample.
    bytes: u64,
    time: Duration,
}

/// One part's time on its rail; [`end`](RailStint::end) (or dropping it)
/// takes it off the rail.
#[derive(Debug)]
pub struct RailStint {
    load: Arc<RailLoad>,
    rail: usize,
    bytes: u64,
    posted: Instant,
    epoch: u64,
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
            sampled: AtomicBool::new(false),
        })
    }

    /// A part is posted on `rail` at `now` (a rail beyond the counters
    /// never counts).
    pub fn begin(load: &Arc<RailLoad>, rail: usize, now: Instant) -> RailStint {
        RailLoad::begin_sized(load, rail, now, 0)
    }

    /// [`begin`](Self::begin) for a part of `bytes` bytes, which count in
    /// [`in_flight`](Self::in_flight) until it ends.
    pub fn begin_sized(load: &Arc<RailLoad>, rail: usize, now: Instant, bytes: u64) -> RailStint {
        let mut epoch = 0;
        if let Some(c) = load.rails.get(rail) {
            let mut c = relock(c);
            c.busy += 1;
            c.busy_bytes = c.busy_bytes.saturating_add(bytes);
            epoch = c.epoch;
        }
        RailStint {
            load: Arc::clone(load),
            rail,
            bytes,
            posted: now,
            epoch,
            ended: false,
        }
    }

    /// Forgets what `rail`'s parts taught so far, and what the parts now
    /// in flight on it will (the rail went out of service or came back).
    ///
    /// ```
    /// use psmrail::mrail::core::rail_load::RailLoad;
    /// use std::time::{Duration, Instant};
    ///
    /// let t = Instant::now();
    /// let load = RailLoad::new(1);
    /// let stalled = RailLoad::begin(&load, 0, t);
    /// load.forget(0);
    /// stalled.end(t + Duration::from_secs(3), 8 << 20);
    /// assert!(load.take_samples().is_empty());
    /// assert_eq!(load.busy(0), 0);
    /// ```
    pub fn forget(&self, rail: usize) {
        if let Some(c) = self.rails.get(rail) {
            let mut c = relock(c);
            c.epoch += 1;
            c.last_done = None;
            c.bytes = 0;
            c.time = Duration::ZERO;
        }
    }

    /// Parts in flight on `rail` now.
    pub fn busy(&self, rail: usize) -> u32 {
        self.rails.get(rail).map_or(0, |c| relock(c).busy)
    }

    /// Parts in flight on `rail` now, and their bytes (those given to
    /// [`begin_sized`](Self::begin_sized)).
    ///
    /// ```
    /// use psmrail::mrail::core::rail_load::RailLoad;
    /// use std::time::Instant;
    ///
    /// let load = RailLoad::new(1);
    /// let a = RailLoad::begin_sized(&load, 0, Instant::now(), 1000);
    /// let b = RailLoad::begin(&load, 0, Instant::now());
    /// assert_eq!(load.in_flight(0), (2, 1000));
    /// drop(a);
    /// assert_eq!(load.in_flight(0), (1, 0));
    /// drop(b);
    /// assert_eq!(load.in_flight(0), (0, 0));
    /// ```
    pub fn in_flight(&self, rail: usize) -> (u32, u64) {
        self.rails.get(rail).map_or((0, 0), |c| {
            let c = relock(c);
            (c.busy, c.busy_bytes)
        })
    }

    /// The samples gathered since the last call: `(rail, bytes, time)`.
    pub fn take_samples(&self) -> Vec<(usize, u64, Duration)> {
        if !self.sampled.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *relock(&self.samples))
    }
}

impl RailStint {
    /// The part completed at `now`, having moved `bytes`.
    pub fn end(mut self, now: Instant, bytes: u64) {
        self.finish(Some((now, bytes)));
    }

    fn finish(&mut self, done: Option<(Instant, u64)>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let Some(c) = self.load.rails.get(self.rail) else {
            return;
        };
        let mut c = relock(c);
        c.busy -= 1;
        c.busy_bytes = c.busy_bytes.saturating_sub(self.bytes);
        let Some((now, bytes)) = done.filter(|_| self.epoch == c.epoch) else {
            // Dropped, or from before the rail was forgotten: nothing to
            // learn from it.
            return;
        };
        let from = c.last_done.map_or(self.posted, |d| d.max(self.posted));
        c.time += now.saturating_duration_since(from);
        c.bytes += bytes;
        c.last_done = Some(c.last_done.map_or(now, |d| d.max(now)));
        let long_enough = if c.busy == 0 {
            c.time >= SHORT_SPAN
        } else {
            c.time >= BUSY_SPAN
        };
        if c.bytes >= MIN_SAMPLE_BYTES && long_enough {
            let sample = (self.rail, c.bytes, c.time);
            c.bytes = 0;
            c.time = Duration::ZERO;
            drop(c);
            relock(&self.load.samples).push(sample);
            self.load.sampled.store(true, Ordering::Release);
        }
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
    fn dropped_stints_leave_the_rail_and_unknown_rails_never_count() {
        let t = Instant::now();
        let load = RailLoad::new(2);
        drop(RailLoad::begin(&load, 1, t));
        assert_eq!(load.busy(1), 0);
        RailLoad::begin(&load, 7, t).end(t + ms(50), 1 << 30);
        assert_eq!(load.busy(7), 0);
        assert!(load.take_samples().is_empty());
    }

    /// A stream keeps both rails busy with many parts posted at once; the
    /// fast rail serves a part every 1 ms, the slow one every 2 ms: their
    /// samples show it, whatever the queue.
    #[test]
    fn a_backlogged_stream_gives_each_rail_its_own_rate() {
        let t0 = Instant::now();
        let load = RailLoad::new(2);
        let part = 256 << 10;
        for (rail, every) in [(0usize, 1u64), (1, 2)] {
            let mut stints: std::collections::VecDeque<RailStint> =
                (0..8).map(|_| RailLoad::begin(&load, rail, t0)).collect();
            for k in 1..=100u64 {
                stints.push_back(RailLoad::begin(&load, rail, t0 + ms(k * every)));
                stints.pop_front().unwrap().end(t0 + ms(k * every), part);
            }
            // The stream ends: the rail drains its queue.
            for k in 101..=108u64 {
                stints.pop_front().unwrap().end(t0 + ms(k * every), part);
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
    }

    /// One part at a time with gaps between: each is served from its
    /// posting, so the gaps do not count.
    #[test]
    fn idle_gaps_do_not_count() {
        let t0 = Instant::now();
        let load = RailLoad::new(1);
        for k in 0..10u64 {
            let s = RailLoad::begin(&load, 0, t0 + ms(100 * k));
            s.end(t0 + ms(100 * k + 5), 1 << 20);
        }
        let samples = load.take_samples();
        assert!(!samples.is_empty());
        for (_, bytes, time) in samples {
            assert_eq!(bytes / (1 << 20), time.as_millis() as u64 / 5);
        }
    }

    /// Completions seen in bursts move time between parts but not out of
    /// the sum.
    #[test]
    fn bursts_keep_the_total() {
        let t0 = Instant::now();
        let load = RailLoad::new(1);
        let stints: Vec<RailStint> = (0..20).map(|_| RailLoad::begin(&load, 0, t0)).collect();
        for (k, s) in stints.into_iter().enumerate() {
            // Really one every 2 ms, seen in bursts of five.
            let seen = t0 + ms(10 * (k as u64 / 5 + 1));
            s.end(seen, 1 << 20);
        }
        let total: (u64, Duration) = load
            .take_samples()
            .iter()
            .fold((0, Duration::ZERO), |a, s| (a.0 + s.1, a.1 + s.2));
        // One sample when the rail goes idle: every part, 40 ms of
        // service. Its rate is the true one.
        assert_eq!(total, (20 << 20, ms(40)));
    }

    /// Sixteen parts posted together and served in interleaved chunks (a
    /// window of rendezvous transfers): the first completes only near the
    /// end, the others right after it. The busy period gives the true rate.
    #[test]
    fn interleaved_parts_give_the_rate_of_the_whole_window() {
        let t0 = Instant::now();
        let load = RailLoad::new(1);
        let part: u64 = 2 << 20;
        for window in 0..3u64 {
            let start = t0 + ms(300 * window);
            let stints: Vec<RailStint> = (0..16)
                .map(|_| RailLoad::begin_sized(&load, 0, start, part))
                .collect();
            // 32 MiB at 128 MiB/s: 250 ms; completions over its last 15 ms.
            for (k, s) in stints.into_iter().enumerate() {
                s.end(start + ms(235 + k as u64), part);
            }
        }
        let samples = load.take_samples();
        assert_eq!(samples.len(), 3);
        for (_, bytes, time) in samples {
            let rate = bytes as f64 / time.as_secs_f64() / f64::from(1u32 << 20);
            assert!((rate - 128.0).abs() < 0.5, "{rate} MiB/s");
        }
    }

    /// A rail that never goes idle still gives samples, each spanning
    /// [`BUSY_SPAN`].
    #[test]
    fn a_rail_that_never_idles_gives_a_sample_per_busy_span() {
        let t0 = Instant::now();
        let load = RailLoad::new(1);
        let mut stints: std::collections::VecDeque<RailStint> =
            (0..4).map(|_| RailLoad::begin(&load, 0, t0)).collect();
        for k in 1..=2500u64 {
            stints.push_back(RailLoad::begin(&load, 0, t0 + ms(k)));
            stints.pop_front().unwrap().end(t0 + ms(k), 1 << 20);
        }
        let samples = load.take_samples();
        assert_eq!(samples.len(), 2);
        for (_, bytes, time) in samples {
            assert_eq!(time, BUSY_SPAN);
            assert_eq!(bytes, 1000 << 20);
        }
    }
}
