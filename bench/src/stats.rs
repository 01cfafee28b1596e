//! Statistics of one measurement: every sample (a round trip, or a timed
//! window of a stream) goes into an HDR histogram, read back as median,
//! p90 and p99.

use hdrhistogram::Histogram;
use std::time::Duration;

/// The longest sample a histogram holds (an hour, in nanoseconds); longer
/// ones are clamped to it.
const MAX_NS: u64 = 3_600_000_000_000;

/// Samples of one measurement, in nanoseconds, to 3 significant digits.
pub(crate) struct Recorder {
    hist: Histogram<u64>,
}

/// What a [`Recorder`] holds, read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Summary {
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
    pub(crate) fn new() -> Result<Recorder, String> {
        let hist =
            Histogram::new_with_bounds(1, MAX_NS, 3).map_err(|e| format!("histogram: {e}"))?;
        Ok(Recorder { hist })
    }

    /// Records one sample (below 1 ns counts as 1 ns, above an hour as an
    /// hour).
    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(MAX_NS).max(1);
        self.hist.saturating_record(ns);
    }

    /// The percentiles of what was recorded (zeros when nothing was).
    pub(crate) fn summary(&self) -> Summary {
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
    /// Every percentile scaled by `f` (a round trip halved, say).
    pub(crate) fn scaled(self, f: f64) -> Summary {
        Summary {
            median_ns: self.median_ns * f,
            p90_ns: self.p90_ns * f,
            p99_ns: self.p99_ns * f,
            samples: self.samples,
        }
    }
}

/// Megabytes (10^6 bytes) per second of `bytes` in `ns` nanoseconds
/// (0 when no time passed).
pub(crate) fn mb_per_s(bytes: f64, ns: f64) -> f64 {
    if ns > 0.0 {
        bytes / ns * 1e3
    } else {
        0.0
    }
}

/// Events per second of `count` events in `ns` nanoseconds (0 when no
/// time passed).
pub(crate) fn per_s(count: f64, ns: f64) -> f64 {
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
    fn rates() {
        assert_eq!(mb_per_s(1e6, 1e9), 1.0);
        assert_eq!(mb_per_s(1.0, 0.0), 0.0);
        assert_eq!(per_s(64.0, 1e6), 64_000.0);
        assert_eq!(per_s(1.0, 0.0), 0.0);
    }
}
