//! [`RailLoad`]: which striped parts are travelling on each rail, so that
//! a part's duration counts as a rate sample only when the part had its
//! rail to itself.
//!
//! A part posted while another part of ours is on the same rail, or
//! joined by one before it lands, shares the rail's bandwidth (and the
//! cores that drive it): its duration says how busy the rail was, not how
//! fast it is. [`RailRates`](super::rail_rates::RailRates) would learn
//! noise from it. Each part holds a [`RailStint`] from posting to
//! completion; the stint tells at its end whether the part was alone.
//!
//! The counters are atomics so that stints end wherever a part completes
//! or is dropped; the answer is a heuristic and needs no stronger
//! ordering than each counter's own.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Parts in flight per rail, and how many have begun on each.
///
/// ```
/// use psmrail::mrail::core::rail_load::RailLoad;
///
/// let load = RailLoad::new(2);
/// let a = RailLoad::begin(&load, 0);
/// let b = RailLoad::begin(&load, 1);
/// assert!(a.end() && b.end(), "each had its rail alone");
///
/// let first = RailLoad::begin(&load, 0);
/// let second = RailLoad::begin(&load, 0);
/// assert!(!first.end(), "joined by a second part");
/// assert!(!second.end(), "began behind the first");
/// ```
#[derive(Debug)]
pub struct RailLoad {
    rails: Vec<RailCounters>,
}

#[derive(Debug, Default)]
struct RailCounters {
    busy: AtomicU32,
    begun: AtomicU64,
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

impl RailLoad {
    /// Counters for `rails` rails, all idle.
    pub fn new(rails: usize) -> Arc<RailLoad> {
        Arc::new(RailLoad {
            rails: (0..rails).map(|_| RailCounters::default()).collect(),
        })
    }

    /// A part begins on `rail` (a rail beyond the counters never counts as
    /// alone).
    pub fn begin(load: &Arc<RailLoad>, rail: usize) -> RailStint {
        let (idle, begun) = match load.rails.get(rail) {
            Some(c) => (
                c.busy.fetch_add(1, Relaxed) == 0,
                c.begun.fetch_add(1, Relaxed) + 1,
            ),
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
        self.rails.get(rail).map_or(0, |c| c.busy.load(Relaxed))
    }
}

impl RailStint {
    /// The part is done: whether it had the rail to itself all along.
    pub fn end(mut self) -> bool {
        self.finish()
    }

    fn finish(&mut self) -> bool {
        if self.ended {
            return false;
        }
        self.ended = true;
        let Some(c) = self.load.rails.get(self.rail) else {
            return false;
        };
        let alone = self.idle && c.begun.load(Relaxed) == self.begun;
        c.busy.fetch_sub(1, Relaxed);
        alone
    }
}

impl Drop for RailStint {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_that_began_behind_another_is_not_alone_even_after_it_ends() {
        let load = RailLoad::new(1);
        let first = RailLoad::begin(&load, 0);
        let second = RailLoad::begin(&load, 0);
        assert_eq!(load.busy(0), 2);
        assert!(!first.end());
        assert!(!second.end());
        assert_eq!(load.busy(0), 0);
        // Sequential parts are each alone.
        assert!(RailLoad::begin(&load, 0).end());
        assert!(RailLoad::begin(&load, 0).end());
    }

    #[test]
    fn dropped_stints_leave_the_rail_and_unknown_rails_never_count() {
        let load = RailLoad::new(2);
        drop(RailLoad::begin(&load, 1));
        assert_eq!(load.busy(1), 0);
        assert!(RailLoad::begin(&load, 1).end());
        assert!(!RailLoad::begin(&load, 7).end());
        assert_eq!(load.busy(7), 0);
    }

    #[test]
    fn parts_on_other_rails_do_not_disturb() {
        let load = RailLoad::new(2);
        let a = RailLoad::begin(&load, 0);
        let b = RailLoad::begin(&load, 1);
        let c = RailLoad::begin(&load, 1);
        assert!(a.end());
        assert!(!b.end());
        assert!(!c.end());
    }
}
