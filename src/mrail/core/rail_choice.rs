//! Which rails a message uses.
//!
//! The size of a message selects a [`RailPolicy`] from the
//! `FI_OFI_MRAIL_CONFIG` table ([`RailPolicyTable`]); [`RailChooser`] turns
//! the policy and the set of rails currently usable for the peer (the
//! *live* mask) into a [`RailChoice`]:
//!
//! * `fixed`: the process's own rail (local rank mod rails, see
//!   [`local_rank`](mod@super::local_rank)), or the next live rail after it
//!   when it is down;
//! * `round-robin`: one live rail per message, each in turn;
//! * `striping`: all live rails (the data is then split by a
//!   [`StripePlan`](super::stripe::StripePlan)).
//!
//! Rail indices are `0..rails`, bit `r` of a mask standing for rail `r`.

use crate::config::{RailPolicy, RailPolicyTable};

/// The rails a message goes out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RailChoice {
    /// The whole message on one rail.
    One(usize),
    /// Striped over the rails in the mask (at least two).
    All(u64),
}

/// A rail count outside `1..=64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} rails: mrail needs between 1 and 64 rails")]
pub struct RailCountError(pub usize);

/// Picks the rails for each message, keeping the round-robin position.
///
/// ```
/// use psmrail::config::RailPolicyTable;
/// use psmrail::mrail::core::rail_choice::{RailChoice, RailChooser};
///
/// // Default table: up to 16 KiB fixed, above that striping.
/// let mut chooser = RailChooser::new(RailPolicyTable::default(), 3, 4).unwrap();
/// assert_eq!(chooser.fixed_rail(), 1);
/// assert_eq!(chooser.choose(100, 0b111), Some(RailChoice::One(1)));
/// assert_eq!(chooser.choose(100, 0b101), Some(RailChoice::One(2)));
/// assert_eq!(chooser.choose(1 << 20, 0b111), Some(RailChoice::All(0b111)));
/// assert_eq!(chooser.choose(1 << 20, 0b100), Some(RailChoice::One(2)));
/// assert_eq!(chooser.choose(100, 0), None);
/// ```
#[derive(Clone, Debug)]
pub struct RailChooser {
    table: RailPolicyTable,
    rails: usize,
    fixed: usize,
    next: usize,
}

impl RailChooser {
    /// A chooser over `rails` rails (1 to 64) for a process of local rank
    /// `local_rank`, whose fixed rail is `local_rank % rails`.
    pub fn new(
        table: RailPolicyTable,
        rails: usize,
        local_rank: u32,
    ) -> Result<Self, RailCountError> {
        if !(1..=64).contains(&rails) {
            return Err(RailCountError(rails));
        }
        let fixed = (local_rank as usize) % rails;
        Ok(RailChooser {
            table,
            rails,
            fixed,
            next: 0,
        })
    }

    /// The rails for a message of `size` bytes when the rails in `live` are
    /// usable; bits at or above the rail count are ignored. `None` when no
    /// rail is live.
    ///
    /// Only round-robin choices advance the rotation.
    pub fn choose(&mut self, size: u64, live: u64) -> Option<RailChoice> {
        let live = live & self.all_rails_mask();
        if live == 0 {
            return None;
        }
        Some(match self.table.policy_for(size) {
            RailPolicy::Fixed => RailChoice::One(first_from(live, self.fixed)),
            RailPolicy::RoundRobin => {
                let rail = first_from(live, self.next);
                self.next = (rail + 1) % self.rails;
                RailChoice::One(rail)
            }
            RailPolicy::Striping if live.is_power_of_two() => {
                RailChoice::One(live.trailing_zeros() as usize)
            }
            RailPolicy::Striping => RailChoice::All(live),
        })
    }

    /// The policy for a message of `size` bytes.
    pub fn policy_for(&self, size: u64) -> RailPolicy {
        self.table.policy_for(size)
    }

    /// The process's own rail, used by the fixed policy.
    pub fn fixed_rail(&self) -> usize {
        self.fixed
    }

    /// The number of rails.
    pub fn rails(&self) -> usize {
        self.rails
    }

    /// The mask with a bit for every rail.
    pub fn all_rails_mask(&self) -> u64 {
        u64::MAX >> (64 - self.rails)
    }

    /// The policy table.
    pub fn table(&self) -> &RailPolicyTable {
        &self.table
    }
}

/// The first rail set in `live` (nonzero) at or cyclically after `start`
/// (below 64).
fn first_from(live: u64, start: usize) -> usize {
    let at_or_after = live & (u64::MAX << start);
    let pick = if at_or_after != 0 { at_or_after } else { live };
    pick.trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MaxSize;
    use proptest::prelude::*;

    fn table(policy: RailPolicy) -> RailPolicyTable {
        RailPolicyTable::new([(MaxSize::UNBOUNDED, policy)]).unwrap()
    }

    #[test]
    fn rail_counts() {
        let t = RailPolicyTable::default();
        assert_eq!(
            RailChooser::new(t.clone(), 0, 0).unwrap_err(),
            RailCountError(0)
        );
        assert!(RailChooser::new(t.clone(), 65, 0).is_err());
        let c = RailChooser::new(t.clone(), 64, 130).unwrap();
        assert_eq!((c.fixed_rail(), c.all_rails_mask()), (2, u64::MAX));
        let c = RailChooser::new(t, 1, 7).unwrap();
        assert_eq!((c.fixed_rail(), c.all_rails_mask()), (0, 1));
        assert_eq!(c.policy_for(1), RailPolicy::Fixed);
    }

    #[test]
    fn fixed_falls_over_cyclically() {
        let mut c = RailChooser::new(table(RailPolicy::Fixed), 4, 3).unwrap();
        assert_eq!(c.choose(0, 0b1111), Some(RailChoice::One(3)));
        assert_eq!(c.choose(0, 0b0111), Some(RailChoice::One(0)));
        assert_eq!(c.choose(0, 0b0110), Some(RailChoice::One(1)));
        // Bits beyond the rail count are not rails.
        assert_eq!(c.choose(0, 0b1_0000), None);
    }

    #[test]
    fn round_robin_rotates_over_live_rails() {
        let mut c = RailChooser::new(table(RailPolicy::RoundRobin), 4, 0).unwrap();
        let picks: Vec<_> = (0..6).map(|_| c.choose(0, 0b1011)).collect();
        let one = |r| Some(RailChoice::One(r));
        assert_eq!(picks, [one(0), one(1), one(3), one(0), one(1), one(3)]);
        assert_eq!(c.choose(0, 0b0100), one(2));
        assert_eq!(c.choose(0, 0b1111), one(3));
    }

    #[test]
    fn striping() {
        let mut c = RailChooser::new(table(RailPolicy::Striping), 3, 0).unwrap();
        assert_eq!(c.choose(9, u64::MAX), Some(RailChoice::All(0b111)));
        assert_eq!(c.choose(9, 0b1010), Some(RailChoice::One(1)));
    }

    /// The reference: scan rails `start, start + 1, ...` cyclically.
    fn model_next(live: u64, rails: usize, start: usize) -> Option<usize> {
        (0..rails)
            .map(|i| (start + i) % rails)
            .find(|&r| live & (1 << r) != 0)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn matches_the_reference(
            rails in 1usize..=64,
            rank in any::<u32>(),
            steps in proptest::collection::vec((0u8..3, any::<u64>()), 1..60),
        ) {
            let t: RailPolicyTable = "10:fixed,20:round-robin,-1:striping".parse().unwrap();
            let mut c = RailChooser::new(t, rails, rank).unwrap();
            let all = c.all_rails_mask();
            let fixed = rank as usize % rails;
            let mut next = 0;
            for (p, live) in steps {
                let size = [5, 15, 25][usize::from(p)];
                let got = c.choose(size, live);
                let live = live & all;
                let want = match p {
                    0 => model_next(live, rails, fixed).map(RailChoice::One),
                    1 => model_next(live, rails, next).map(|r| {
                        next = (r + 1) % rails;
                        RailChoice::One(r)
                    }),
                    _ => match live.count_ones() {
                        0 => None,
                        1 => Some(RailChoice::One(live.trailing_zeros() as usize)),
                        _ => Some(RailChoice::All(live)),
                    },
                };
                prop_assert_eq!(got, want);
                if let Some(RailChoice::One(r)) = got {
                    prop_assert!(live & (1 << r) != 0, "dead rail {} chosen", r);
                }
            }
        }

        #[test]
        fn round_robin_is_fair(rails in 1usize..=64, live in 1u64.., k in 1usize..4) {
            let mut c = RailChooser::new(table(RailPolicy::RoundRobin), rails, 0).unwrap();
            let live = live & c.all_rails_mask();
            prop_assume!(live != 0);
            let mut uses = vec![0usize; rails];
            for _ in 0..k * live.count_ones() as usize {
                match c.choose(0, live) {
                    Some(RailChoice::One(r)) => uses[r] += 1,
                    other => prop_assert!(false, "{:?}", other),
                }
            }
            for (r, &n) in uses.iter().enumerate() {
                prop_assert_eq!(n, if live & (1 << r) != 0 { k } else { 0 });
            }
        }
    }
}
