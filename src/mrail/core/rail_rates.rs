//! [`RailRates`]: how fast each rail carries data, from configuration or
//! learned from the rail's measured throughput, and the stripe weights
//! that follow (bandwidth-weighted striping: rails of different speed get
//! parts in proportion to their rates, as UCX splits rendezvous fragments
//! by lane bandwidth).
//!
//! Learning: each striped part a *receiver* completes is a sample, its
//! bytes over the time from posting its receive (when the answer to the
//! request leaves) to the last byte landing — the rail's own pace, which
//! the sender cannot see (its sends complete as soon as the socket buffers
//! take them). Only parts that had their rail to themselves count (see
//! [`rail_load`](super::rail_load)), and only parts big and slow enough
//! that a scheduler's time slice does not dominate them
//! ([`MIN_SAMPLE_BYTES`], [`MIN_SAMPLE_TIME`]). A rail's rate is the median
//! of its last [`SAMPLE_WINDOW`] samples, known once it has
//! [`MIN_SAMPLES`]: one stalled part does not move it. Parts that land
//! early on a fast rail give it a higher estimate, so it gets a larger
//! share next time; the shares settle where every part takes as long as
//! the others, which is when they are in proportion to the rails' rates.
//! Until every rail of a plan has a rate, plans are equal. A rail that
//! goes out of service is measured afresh when it is back
//! ([`RailRates::forget`]). Configured rates are used as they are and
//! never replaced by samples.
//!
//! The receiver cuts its receives by these weights and sends them back in
//! its answer, 4 bits per rail ([`Frame::Cts`](super::header::Frame::Cts)),
//! so the sender cuts its parts the same way. No clock is read here:
//! samples come with their duration.

use std::collections::VecDeque;
use std::time::Duration;

/// Parts smaller than this tell too little about a rail's rate.
pub const MIN_SAMPLE_BYTES: u64 = 256 << 10;

/// Parts that took less than this tell too little about a rail's rate
/// (a time slice or a wake-up is a large share of them).
pub const MIN_SAMPLE_TIME: Duration = Duration::from_millis(2);

/// Samples kept per rail; the rate is their median.
pub const SAMPLE_WINDOW: usize = 5;

/// Samples a rail needs before its rate counts as known.
pub const MIN_SAMPLES: usize = 3;

/// Learned rates this close (fastest over slowest) count as equal: rails
/// of one speed keep equal parts whatever the measurement noise.
pub const EQUAL_WITHIN: f64 = 1.25;

/// Rates of up to 16 rails, in bytes per second.
///
/// ```
/// use psmrail::mrail::core::rail_rates::RailRates;
/// use std::time::Duration;
///
/// // Configured: 1 and 2.5 Gbit/s.
/// let r = RailRates::configured(&[1000, 2500]);
/// assert_eq!(r.weights(0b11), 0xf6); // rail 0: 6, rail 1: 15
///
/// // Learned: equal until both rails have three samples.
/// let mut r = RailRates::learning(2);
/// for _ in 0..3 {
///     r.sample(0, 1 << 20, Duration::from_millis(8));
/// }
/// assert_eq!(r.weights(0b11), 0);
/// for _ in 0..3 {
///     r.sample(1, 1 << 20, Duration::from_millis(4));
/// }
/// assert_eq!(r.weights(0b11), 0xf8); // rail 1 is twice as fast
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RailRates {
    rates: Vec<Option<f64>>,
    /// The last samples of each rail, in bytes per second (learning only).
    samples: Vec<VecDeque<f64>>,
    fixed: bool,
}

impl RailRates {
    /// Rates learned from samples, for `rails` rails (none known yet).
    pub fn learning(rails: usize) -> RailRates {
        RailRates {
            rates: vec![None; rails.min(16)],
            samples: vec![VecDeque::with_capacity(SAMPLE_WINDOW); rails.min(16)],
            fixed: false,
        }
    }

    /// Rates given in Mbit/s, one per rail (a 0 counts as unknown).
    pub fn configured(mbit: &[u64]) -> RailRates {
        RailRates {
            rates: mbit
                .iter()
                .take(16)
                .map(|&m| (m > 0).then(|| m as f64 * 1e6 / 8.0))
                .collect(),
            samples: Vec::new(),
            fixed: true,
        }
    }

    /// Whether the rates came from configuration.
    pub fn is_configured(&self) -> bool {
        self.fixed
    }

    /// Folds in a part of `bytes` that took `took` on `rail` (having the
    /// rail to itself). Ignored for configured rates and for parts below
    /// [`MIN_SAMPLE_BYTES`] or [`MIN_SAMPLE_TIME`].
    pub fn sample(&mut self, rail: usize, bytes: u64, took: Duration) {
        if self.fixed || bytes < MIN_SAMPLE_BYTES || took < MIN_SAMPLE_TIME {
            return;
        }
        let (Some(slot), Some(window)) = (self.rates.get_mut(rail), self.samples.get_mut(rail))
        else {
            return;
        };
        if window.len() == SAMPLE_WINDOW {
            window.pop_front();
        }
        window.push_back(bytes as f64 / took.as_secs_f64());
        *slot = (window.len() >= MIN_SAMPLES).then(|| median(window));
    }

    /// Forgets `rail`'s learned rate and samples (it went out of service:
    /// it is measured afresh). Configured rates stay.
    ///
    /// ```
    /// use psmrail::mrail::core::rail_rates::RailRates;
    /// use std::time::Duration;
    ///
    /// let mut r = RailRates::learning(1);
    /// for _ in 0..3 {
    ///     r.sample(0, 1 << 20, Duration::from_millis(8));
    /// }
    /// assert!(r.rate(0).is_some());
    /// r.forget(0);
    /// assert_eq!(r.rate(0), None);
    /// ```
    pub fn forget(&mut self, rail: usize) {
        if self.fixed {
            return;
        }
        if let (Some(slot), Some(window)) = (self.rates.get_mut(rail), self.samples.get_mut(rail)) {
            *slot = None;
            window.clear();
        }
    }

    /// The rate of `rail` in bytes per second, if known.
    pub fn rate(&self, rail: usize) -> Option<f64> {
        self.rates.get(rail).copied().flatten()
    }

    /// The stripe weights for the rails in `mask` (4 bits per rail, the
    /// fastest 15, the others in proportion, at least 1), or 0 (equal
    /// shares) while a rail of the mask has no rate, when learned rates
    /// are within [`EQUAL_WITHIN`] of each other, or when `mask` names a
    /// rail beyond the 16 that weights can describe.
    pub fn weights(&self, mask: u64) -> u64 {
        if mask == 0 || mask >> self.rates.len().min(16) != 0 {
            return 0;
        }
        let members = || (0..self.rates.len()).filter(move |&r| mask & (1 << r) != 0);
        let (mut max, mut min) = (0.0f64, f64::INFINITY);
        for r in members() {
            match self.rates[r] {
                Some(rate) if rate > 0.0 => {
                    max = max.max(rate);
                    min = min.min(rate);
                }
                _ => return 0,
            }
        }
        if !self.fixed && max < EQUAL_WITHIN * min {
            return 0;
        }
        members().fold(0, |w, r| {
            let share = self.rates[r].unwrap_or(0.0) / max;
            let nibble = (share * 15.0).round().clamp(1.0, 15.0) as u64;
            w | (nibble << (4 * r))
        })
    }
}

/// The median of a non-empty window (the mean of the middle two when
/// even).
fn median(window: &VecDeque<f64>) -> f64 {
    let mut sorted: Vec<f64> = window.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mrail::core::header::weights_fit;
    use proptest::prelude::*;

    #[test]
    fn the_rate_is_the_median_of_recent_samples() {
        let mut r = RailRates::learning(2);
        r.sample(0, 1 << 20, Duration::from_millis(10));
        r.sample(0, 1 << 20, Duration::from_millis(10));
        assert_eq!(r.rate(0), None, "two samples are not enough");
        // One stalled part does not move the estimate.
        r.sample(0, 1 << 20, Duration::from_millis(70));
        let first = r.rate(0).unwrap();
        assert_eq!(first, (1 << 20) as f64 / 0.010);
        // A lasting change does, once it is most of the window.
        for _ in 0..3 {
            r.sample(0, 1 << 20, Duration::from_millis(20));
        }
        assert_eq!(r.rate(0).unwrap(), (1 << 20) as f64 / 0.020);
        // Small or quick parts and configured rates ignore samples.
        for _ in 0..3 {
            r.sample(1, 1000, Duration::from_millis(10));
            r.sample(1, 1 << 20, Duration::from_micros(500));
        }
        assert_eq!(r.rate(1), None);
        let mut c = RailRates::configured(&[1000, 1000]);
        c.sample(0, 1 << 30, Duration::from_millis(1));
        assert_eq!(c.rate(0), Some(125e6));
        assert!(c.is_configured());
    }

    #[test]
    fn learned_rates_close_together_keep_equal_parts() {
        let mut r = RailRates::learning(2);
        for _ in 0..3 {
            r.sample(0, 1 << 20, Duration::from_millis(10));
            r.sample(1, 1 << 20, Duration::from_millis(9));
        }
        assert_eq!(r.weights(0b11), 0);
        // Configured rates are taken as they are.
        assert_eq!(RailRates::configured(&[1000, 1100]).weights(0b11), 0xfe);
    }

    #[test]
    fn weights_need_every_rail_of_the_mask() {
        let r = RailRates::configured(&[1000, 0, 2000]);
        assert_eq!(r.weights(0b101), 0xf08);
        assert_eq!(r.weights(0b111), 0);
        assert_eq!(r.weights(0b1000), 0);
        assert_eq!(r.weights(0), 0);
        // A very slow rail still gets weight 1.
        let r = RailRates::configured(&[1, 100_000]);
        assert_eq!(r.weights(0b11), 0xf1);
    }

    proptest! {
        #[test]
        fn weights_always_fit_their_mask(
            mbit in proptest::collection::vec(0u64..100_000, 1..=16),
            mask in 1u64..(1 << 16),
        ) {
            let r = RailRates::configured(&mbit);
            let w = r.weights(mask);
            prop_assert!(weights_fit(mask, w), "{mask:#x} {w:#x}");
        }
    }
}
