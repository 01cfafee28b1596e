//! Statistics of samples: the samples of one measurement (round trips, or
//! timed windows of a stream) go into an HDR histogram, read back as
//! median, p90 and p99; a handful of figures (one per round or run) have
//! their exact median; and rates of bytes or events over a time.

use hdrhistogram::Histogram;
use std::time::Duration;

/// The longest sample a histogram holds (an hour, in nanoseconds); longer
/// ones are clamped to it.
const MAX_NS: u64 = 3_600_000_000_000;

/// Samples of one measurement, in nanoseconds, to 3 significant digits.
#[derive(Debug)]
pub struct Recorder {
    hist: Histogram<u64>,
}

/// What a [`Recorder`] holds, read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The 50th percentile, ns.
    pub median_ns: f64,
    /// The 90th percentile, ns.
    pub p90_ns: f64,
    /// The 99th percentile, ns.
    pub p99_ns: f64,
    /// How many samples were recorded.
    pub samples: u64,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Result<Recorder, String> {
        let hist =
            Histogram::new_with_bounds(1, MAX_NS, 3).map_err(|e| format!("histogram: {e}"))?;
        Ok(Recorder { hist })
    }

    /// Records one sample (below 1 ns counts as 1 ns, above an hour as an
    /// hour).
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(MAX_NS).max(1);
        self.hist.saturating_record(ns);
    }

    /// The percentiles of what was recorded (zeros when nothing was).
    pub fn summary(&self) -> Summary {
        let q = |q: f64| {
            if self.hist.is_empty() {
                0.0
            } else {
                self.hist.value_at_quantile(q) as f64
            }
        };
        Summary {
            median_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            samples: self.hist.len(),
        }
    }
}

impl Summary {
    /// The percentiles of `samples` (see [`Recorder::record`]).
    pub fn of(samples: &[Duration]) -> Result<Summary, String> {
        let mut r = Recorder::new()?;
        for d in samples {
            r.record(*d);
        }
        Ok(r.summary())
    }

    /// Every percentile scaled by `f` (a round trip halved, say).
    pub fn scaled(self, f: f64) -> Summary {
        Summary {
            median_ns: self.median_ns * f,
            p90_ns: self.p90_ns * f,
            p99_ns: self.p99_ns * f,
            samples: self.samples,
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count), or
/// `None` for no values. Sorts `v`.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// The median of `v` as [`median`], 0 for no values.
pub fn median_or_zero(mut v: Vec<f64>) -> f64 {
    median(&mut v).unwrap_or(0.0)
}

/// Megabytes (10^6 bytes) per second of `bytes` in `ns` nanoseconds
/// (0 when no time passed).
pub fn mb_per_s(bytes: f64, ns: f64) -> f64 {
    if ns > 0.0 {
        bytes / ns * 1e3
    } else {
        0.0
    }
}

/// Events per second of `count` events in `ns` nanoseconds (0 when no
/// time passed).
pub fn per_s(count: f64, ns: f64) -> f64 {
    if ns > 0.0 {
        count / ns * 1e9
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_spread() -> Result<(), String> {
        let mut r = Recorder::new()?;
        for us in 1..=100u64 {
            r.record(Duration::from_micros(us));
        }
        let s = r.summary();
        assert_eq!(s.samples, 100);
        // Three significant digits: within 0.1 %.
        let near = |got: f64, want: f64| (got - want).abs() <= want * 1e-3;
        assert!(near(s.median_ns, 50_000.0), "{s:?}");
        assert!(near(s.p90_ns, 90_000.0), "{s:?}");
        assert!(near(s.p99_ns, 99_000.0), "{s:?}");
        let half = s.scaled(0.5);
        assert!(near(half.median_ns, 25_000.0));
        assert_eq!(half.samples, 100);
        Ok(())
    }

    #[test]
    fn empty_and_extreme_samples() -> Result<(), String> {
        let mut r = Recorder::new()?;
        assert_eq!(r.summary().samples, 0);
        assert_eq!(r.summary().median_ns, 0.0);
        r.record(Duration::ZERO);
        r.record(Duration::from_secs(10 * 3600));
        let s = r.summary();
        assert_eq!(s.samples, 2);
        assert!(s.median_ns >= 1.0);
        assert!(s.p99_ns <= MAX_NS as f64 * 1.001);
        Ok(())
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_or_zero(Vec::new()), 0.0);
        assert_eq!(median_or_zero(vec![5.0]), 5.0);
        let s = Summary::of(&[Duration::from_micros(2), Duration::from_micros(4)]);
        assert_eq!(s.map(|s| s.samples), Ok(2));
    }

    #[test]
    fn rates() {
        assert_eq!(mb_per_s(1e6, 1e9), 1.0);
        assert_eq!(mb_per_s(1.0, 0.0), 0.0);
        assert_eq!(per_s(64.0, 1e6), 64_000.0);
        assert_eq!(per_s(1.0, 0.0), 0.0);
    }
}
