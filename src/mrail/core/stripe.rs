//! The stripe plan: how a large message's bytes are split over rails.
//!
//! A message sent with the striping policy is cut into contiguous parts,
//! at most one per rail, each sent on its rail as a data part tagged with
//! [`data_tag`](super::header::data_tag). Sender and receiver compute the
//! same [`StripePlan`] from the accepted length and the rail mask of the
//! request to send ([`StripePlan::from_mask`]), so the plan itself never
//! travels on the wire.
//!
//! Parts cover `[0, len)` in ascending, contiguous ranges, are numbered
//! from 0 without gaps, and are never empty.
//!
//! A message's plan ([`StripePlan::for_message`]) cuts each rail's share
//! further into parts of about [`PART_TARGET`] bytes (at most
//! [`MAX_PARTS`] in all), which the sender feeds to each rail a few at a
//! time ([`rail_queue`](super::rail_queue)): the rail then finishes its
//! parts one after the other, so each finished part says how fast the
//! rail is from the first megabytes of a message on.

use super::header::MAX_PARTS;

/// The size a message's plan cuts each rail's share into
/// ([`StripePlan::for_message`]): 3-35 ms of a 1-10 Gbit/s rail, a
/// hundred times its round trip and a rendezvous hand-off.
pub const PART_TARGET: u64 = 4 << 20;

/// One part of a striped message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stripe {
    /// The part number (0 for the first part), used in the data tag.
    pub part: u8,
    /// The rail index the part travels on.
    pub rail: usize,
    /// Offset of the part in the message.
    pub offset: u64,
    /// Length of the part in bytes; never zero.
    pub len: u64,
}

impl Stripe {
    /// The offset just past the part.
    pub const fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// The parts of a message, in ascending offset order.
///
/// ```
/// use psmrail::mrail::core::stripe::StripePlan;
///
/// let plan = StripePlan::equal(10, &[2, 0, 1]).unwrap();
/// let parts: Vec<(usize, u64, u64)> = plan.iter().map(|s| (s.rail, s.offset, s.len)).collect();
/// assert_eq!(parts, [(2, 0, 4), (0, 4, 3), (1, 7, 3)]);
/// assert_eq!(plan.total(), 10);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StripePlan {
    stripes: Vec<Stripe>,
}

impl StripePlan {
    /// Splits `len` bytes evenly over `rails`, one part per rail in the
    /// given order: each part gets `len / n` bytes and the first `len % n`
    /// parts one more. Parts that would be empty are left out, so `len`
    /// below `n` gives `len` one-byte parts on the first `len` rails.
    ///
    /// `None` when there are more than [`MAX_PARTS`] rails, or no rails for
    /// a nonzero length.
    ///
    /// ```
    /// use psmrail::mrail::core::stripe::StripePlan;
    ///
    /// assert_eq!(StripePlan::equal(2, &[0, 1, 2]).unwrap().len(), 2);
    /// assert!(StripePlan::equal(0, &[]).unwrap().is_empty());
    /// assert_eq!(StripePlan::equal(1, &[]), None);
    /// ```
    pub fn equal(len: u64, rails: &[usize]) -> Option<StripePlan> {
        if rails.len() > MAX_PARTS || (rails.is_empty() && len > 0) {
            return None;
        }
        let n = rails.len() as u64;
        let shares = rails.iter().enumerate().map(|(i, &rail)| {
            let extra = u64::from((i as u64) < len % n);
            (rail, len / n + extra)
        });
        Some(StripePlan::from_shares(shares))
    }

    /// Splits `len` bytes over `rails` in proportion to their weights, by
    /// the largest-remainder method: each rail first gets the integer part
    /// of its exact share `len * weight / total`, and the bytes left over
    /// go one each to the rails with the largest fractional remainders
    /// (the earlier rail first on a tie). Every part is thus within one byte
    /// of its exact share. Rails of weight zero get nothing; when every
    /// weight is zero the split is [`equal`](Self::equal).
    ///
    /// `None` when there are more than [`MAX_PARTS`] rails, or no rails for
    /// a nonzero length.
    ///
    /// ```
    /// use psmrail::mrail::core::stripe::StripePlan;
    ///
    /// let plan = StripePlan::weighted(10, &[(0, 1), (1, 0), (2, 2)]).unwrap();
    /// let parts: Vec<(u8, usize, u64)> = plan.iter().map(|s| (s.part, s.rail, s.len)).collect();
    /// assert_eq!(parts, [(0, 0, 3), (1, 2, 7)]);
    /// ```
    pub fn weighted(len: u64, rails: &[(usize, u64)]) -> Option<StripePlan> {
        if rails.len() > MAX_PARTS || (rails.is_empty() && len > 0) {
            return None;
        }
        let total: u128 = rails.iter().map(|&(_, w)| u128::from(w)).sum();
        if total == 0 {
            let order: Vec<usize> = rails.iter().map(|&(rail, _)| rail).collect();
            return StripePlan::equal(len, &order);
        }
        // Integer parts and remainders of len * w / total (exact in u128:
        // both factors are below 2^64, and each quotient is at most len).
        let mut shares: Vec<(usize, u64, u128)> = rails
            .iter()
            .map(|&(rail, w)| {
                let product = u128::from(len) * u128::from(w);
                (rail, (product / total) as u64, product % total)
            })
            .collect();
        let given: u64 = shares.iter().map(|&(_, q, _)| q).sum();
        let leftover = len - given;
        // Fewer bytes are left over than there are rails with a nonzero
        // remainder; hand them out by decreasing remainder.
        let mut order: Vec<usize> = (0..shares.len()).collect();
        order.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2).then(a.cmp(&b)));
        for &i in order.iter().take(leftover as usize) {
            shares[i].1 += 1;
        }
        Some(StripePlan::from_shares(
            shares.into_iter().map(|(rail, q, _)| (rail, q)),
        ))
    }

    /// [`equal`](Self::equal) over the rails whose bits are set in `mask`,
    /// in ascending order: the plan both sides derive from a request to
    /// send. `None` when `mask` is zero and `len` is not.
    ///
    /// ```
    /// use psmrail::mrail::core::stripe::StripePlan;
    ///
    /// let plan = StripePlan::from_mask(5, 0b1010).unwrap();
    /// let rails: Vec<usize> = plan.iter().map(|s| s.rail).collect();
    /// assert_eq!(rails, [1, 3]);
    /// ```
    pub fn from_mask(len: u64, mask: u64) -> Option<StripePlan> {
        let rails: Vec<usize> = (0..64).filter(|&r| mask & (1 << r) != 0).collect();
        StripePlan::equal(len, &rails)
    }

    /// The plan of a striped message with `weights` (4 bits per rail, as
    /// [`Frame::Cts`](super::header::Frame::Cts) carries them): shares in
    /// proportion to the weights of the rails in `mask`, or
    /// [`from_mask`](Self::from_mask)'s equal shares when `weights` is 0.
    /// `None` when the weights do not fit the mask
    /// ([`weights_fit`](super::header::weights_fit)).
    ///
    /// ```
    /// use psmrail::mrail::core::stripe::StripePlan;
    ///
    /// // Rail 0 weighs 2, rail 1 weighs 5: 2/7 and 5/7 of the bytes.
    /// let plan = StripePlan::from_weights(7000, 0b11, 0x52).unwrap();
    /// let lens: Vec<u64> = plan.iter().map(|s| s.len).collect();
    /// assert_eq!(lens, [2000, 5000]);
    /// assert!(StripePlan::from_weights(10, 0b01, 0x20).is_none());
    /// ```
    pub fn from_weights(len: u64, mask: u64, weights: u64) -> Option<StripePlan> {
        if weights == 0 {
            return StripePlan::from_mask(len, mask);
        }
        if !super::header::weights_fit(mask, weights) {
            return None;
        }
        let rails: Vec<(usize, u64)> = (0..16)
            .filter(|&r| mask & (1 << r) != 0)
            .map(|r| (r, (weights >> (4 * r)) & 0xf))
            .collect();
        StripePlan::weighted(len, &rails)
    }

    /// The plan of a striped message: [`from_weights`](Self::from_weights)'s
    /// share for each rail, cut into parts of equal length (to a byte) of
    /// at most [`PART_TARGET`] bytes, or more where [`MAX_PARTS`] parts
    /// would not cover the message. A rail's parts are contiguous and in
    /// order; every rail gets exactly the bytes `from_weights` gives it.
    /// Sender and receiver both derive it from the request and its answer.
    /// A message over one rail is one part.
    ///
    /// ```
    /// use psmrail::mrail::core::stripe::StripePlan;
    ///
    /// // 24 MiB over rails 0 and 1 weighing 1 and 2: 2 and 4 parts of 4 MiB.
    /// let plan = StripePlan::for_message(24 << 20, 0b11, 0x21).unwrap();
    /// let rails: Vec<usize> = plan.iter().map(|s| s.rail).collect();
    /// assert_eq!(rails, [0, 0, 1, 1, 1, 1]);
    /// assert!(plan.iter().all(|s| s.len == 4 << 20));
    /// ```
    pub fn for_message(len: u64, mask: u64, weights: u64) -> Option<StripePlan> {
        let shares = StripePlan::from_weights(len, mask, weights)?;
        if shares.len() < 2 {
            return Some(shares);
        }
        // Parts of `chunk` bytes: at most len / chunk + 1 per rail's share
        // rounding up, so this many fit in MAX_PARTS.
        let rails = shares.len() as u64;
        let room = MAX_PARTS as u64 - rails;
        if room == 0 {
            return Some(shares);
        }
        let chunk = PART_TARGET.max(len.div_ceil(room));
        if shares.iter().all(|s| s.len <= chunk) {
            return Some(shares);
        }
        let mut cut = Vec::with_capacity(MAX_PARTS);
        for s in shares.iter() {
            let n = s.len.div_ceil(chunk);
            for i in 0..n {
                let extra = u64::from(i < s.len % n);
                cut.push((s.rail, s.len / n + extra));
            }
        }
        Some(StripePlan::from_shares(cut.into_iter()))
    }

    /// Gives part `part` to `rail` (the sender sent it there instead:
    /// [`Frame::Moved`](super::header::Frame::Moved)); whether the plan
    /// has that part.
    ///
    /// ```
    /// use psmrail::mrail::core::stripe::StripePlan;
    ///
    /// let mut plan = StripePlan::from_mask(10, 0b11).unwrap();
    /// assert!(plan.move_part(1, 0));
    /// assert_eq!(plan.part(1).unwrap().rail, 0);
    /// assert!(!plan.move_part(2, 0));
    /// ```
    pub fn move_part(&mut self, part: u8, rail: usize) -> bool {
        match self.stripes.get_mut(usize::from(part)) {
            Some(s) => {
                s.rail = rail;
                true
            }
            None => false,
        }
    }

    /// The parts on `rail`, in order.
    pub fn on_rail(&self, rail: usize) -> impl Iterator<Item = &Stripe> + '_ {
        self.stripes.iter().filter(move |s| s.rail == rail)
    }

    /// Lays out `(rail, length)` shares in order, leaving out empty ones.
    fn from_shares(shares: impl Iterator<Item = (usize, u64)>) -> StripePlan {
        let mut offset = 0;
        let mut stripes = Vec::new();
        for (rail, len) in shares.filter(|&(_, len)| len > 0) {
            stripes.push(Stripe {
                // At most MAX_PARTS (64) shares reach this point.
                part: stripes.len() as u8,
                rail,
                offset,
                len,
            });
            offset += len;
        }
        StripePlan { stripes }
    }

    /// The parts, in ascending offset order.
    pub fn stripes(&self) -> &[Stripe] {
        &self.stripes
    }

    /// Iterates over the parts.
    pub fn iter(&self) -> std::slice::Iter<'_, Stripe> {
        self.stripes.iter()
    }

    /// The number of parts.
    pub fn len(&self) -> usize {
        self.stripes.len()
    }

    /// Whether there are no parts (the message is empty).
    pub fn is_empty(&self) -> bool {
        self.stripes.is_empty()
    }

    /// The bytes covered by all parts: the message length.
    pub fn total(&self) -> u64 {
        self.stripes.last().map_or(0, Stripe::end)
    }

    /// The part with number `part`.
    pub fn part(&self, part: u8) -> Option<&Stripe> {
        self.stripes.get(usize::from(part))
    }
}

impl<'a> IntoIterator for &'a StripePlan {
    type Item = &'a Stripe;
    type IntoIter = std::slice::Iter<'a, Stripe>;

    fn into_iter(self) -> Self::IntoIter {
        self.stripes.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Parts numbered 0.., contiguous from 0, nonempty, summing to `len`.
    fn check_layout(plan: &StripePlan, len: u64) {
        let mut offset = 0;
        for (i, s) in plan.iter().enumerate() {
            assert_eq!(usize::from(s.part), i);
            assert_eq!(s.offset, offset);
            assert!(s.len > 0);
            offset = s.end();
        }
        assert_eq!(offset, len);
        assert_eq!(plan.total(), len);
        assert!(plan.len() <= MAX_PARTS);
    }

    fn lens(plan: &StripePlan) -> Vec<u64> {
        plan.iter().map(|s| s.len).collect()
    }

    #[test]
    fn equal_splits() {
        assert_eq!(lens(&StripePlan::equal(10, &[0, 1, 2]).unwrap()), [4, 3, 3]);
        assert_eq!(lens(&StripePlan::equal(9, &[0, 1, 2]).unwrap()), [3, 3, 3]);
        let small = StripePlan::equal(2, &[5, 6, 7]).unwrap();
        assert_eq!(lens(&small), [1, 1]);
        assert_eq!(small.stripes()[1].rail, 6);
        assert!(StripePlan::equal(0, &[0, 1]).unwrap().is_empty());
        assert_eq!(StripePlan::equal(0, &[]), Some(StripePlan::default()));
        assert_eq!(StripePlan::equal(3, &[]), None);
        let many: Vec<usize> = (0..65).collect();
        assert_eq!(StripePlan::equal(100, &many), None);
        let max = StripePlan::equal(u64::MAX, &many[..64]).unwrap();
        check_layout(&max, u64::MAX);
        assert_eq!(max.part(63).unwrap().rail, 63);
        assert!(max.part(64).is_none());
    }

    #[test]
    fn weighted_splits() {
        let plan = StripePlan::weighted(100, &[(0, 1), (1, 1), (2, 1)]).unwrap();
        assert_eq!(lens(&plan), [34, 33, 33]);
        let plan = StripePlan::weighted(10, &[(0, 0), (1, 0)]).unwrap();
        assert_eq!(lens(&plan), [5, 5]);
        // Remainders 2/3 for rail 1 beat 1/3 for rail 0.
        let plan = StripePlan::weighted(2, &[(0, 1), (1, 2)]).unwrap();
        assert_eq!(lens(&plan), [1, 1]);
        let plan = StripePlan::weighted(1, &[(0, 1), (1, 2)]).unwrap();
        assert_eq!((plan.len(), plan.stripes()[0].rail), (1, 1));
        let plan = StripePlan::weighted(u64::MAX, &[(0, u64::MAX), (1, u64::MAX)]).unwrap();
        check_layout(&plan, u64::MAX);
        assert_eq!(StripePlan::weighted(1, &[]), None);
        assert_eq!(StripePlan::weighted(0, &[]), Some(StripePlan::default()));
    }

    #[test]
    fn from_mask_uses_set_bits_in_order() {
        let plan = StripePlan::from_mask(u64::MAX, u64::MAX).unwrap();
        check_layout(&plan, u64::MAX);
        assert_eq!(plan.len(), 64);
        assert_eq!(StripePlan::from_mask(1, 0), None);
        let rails: Vec<usize> = StripePlan::from_mask(3, 1 << 63 | 1)
            .unwrap()
            .iter()
            .map(|s| s.rail)
            .collect();
        assert_eq!(rails, [0, 63]);
    }

    #[test]
    fn weights_from_a_request() {
        let plan = StripePlan::from_weights(3500, 0b11, 0xa4).unwrap();
        let lens: Vec<u64> = plan.iter().map(|s| s.len).collect();
        assert_eq!(lens, [1000, 2500]);
        assert_eq!(
            StripePlan::from_weights(9, 0b111, 0),
            StripePlan::from_mask(9, 0b111)
        );
        assert!(StripePlan::from_weights(9, 0b11, 0x100).is_none());
        assert!(StripePlan::from_weights(9, 1 << 20, 1).is_none());
    }

    #[test]
    fn a_message_plan_cuts_each_share_into_parts() {
        // 64 MiB over 4 equal rails: 16 MiB each, in parts of 4 MiB.
        let plan = StripePlan::for_message(64 << 20, 0b1111, 0).unwrap();
        check_layout(&plan, 64 << 20);
        assert_eq!(plan.len(), 16);
        for rail in 0..4 {
            let lens: Vec<u64> = plan.on_rail(rail).map(|s| s.len).collect();
            assert_eq!(lens, [4 << 20; 4]);
        }
        // 1 GiB over 4: 60 parts of 17 MiB and a bit, no more than fit.
        let plan = StripePlan::for_message(1 << 30, 0b1111, 0).unwrap();
        check_layout(&plan, 1 << 30);
        assert!(plan.len() <= MAX_PARTS);
        assert!(plan.iter().all(|s| s.len > 17 << 20 && s.len < 18 << 20));
        // Small messages keep one part per rail; one rail, one part.
        assert_eq!(
            StripePlan::for_message(8 << 20, 0b11, 0),
            StripePlan::from_mask(8 << 20, 0b11)
        );
        assert_eq!(StripePlan::for_message(9 << 20, 0b100, 0).unwrap().len(), 1);
        assert!(StripePlan::for_message(0, 0b11, 0).unwrap().is_empty());
        assert_eq!(StripePlan::for_message(1, 0, 0), None);
        // The largest messages still fit in MAX_PARTS.
        let max = StripePlan::for_message(u64::MAX, u64::MAX, 0).unwrap();
        check_layout(&max, u64::MAX);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn message_plans_give_each_rail_its_weighted_share(
            len in prop_oneof![0u64..(64 << 20), any::<u64>()],
            ws in proptest::collection::vec(1u64..16, 1..=16),
        ) {
            let mask = (1u64 << ws.len()) - 1;
            let weights = ws.iter().enumerate().fold(0u64, |acc, (i, w)| acc | (w << (4 * i)));
            let plan = StripePlan::for_message(len, mask, weights).unwrap();
            check_layout(&plan, len);
            let shares = StripePlan::from_weights(len, mask, weights).unwrap();
            for s in shares.iter() {
                let parts: Vec<&Stripe> = plan.on_rail(s.rail).collect();
                prop_assert_eq!(parts.iter().map(|p| p.len).sum::<u64>(), s.len);
                // Contiguous, and of equal lengths to a byte.
                prop_assert_eq!(parts[0].offset, s.offset);
                let (lo, hi) = parts.iter().fold((u64::MAX, 0), |(lo, hi), p| (lo.min(p.len), hi.max(p.len)));
                prop_assert!(hi - lo <= 1);
                if parts.len() > 1 {
                    prop_assert!(lo >= PART_TARGET / 2, "{:?}", parts);
                }
            }
        }

        #[test]
        fn weighted_request_plans_follow_their_weights(
            len in prop_oneof![0u64..1000, any::<u64>()],
            ws in proptest::collection::vec(1u64..16, 1..=16),
        ) {
            let mask = (1u64 << ws.len()) - 1;
            let weights = ws.iter().enumerate().fold(0u64, |acc, (i, w)| acc | (w << (4 * i)));
            let plan = StripePlan::from_weights(len, mask, weights).unwrap();
            check_layout(&plan, len);
            let total: u128 = ws.iter().map(|&w| u128::from(w)).sum();
            for s in plan.iter() {
                let exact = u128::from(len) * u128::from(ws[s.rail]) / total;
                prop_assert!(u128::from(s.len).abs_diff(exact) <= 1, "{s:?} vs {exact}");
            }
        }

        #[test]
        fn equal_plan_invariants(
            len in prop_oneof![0u64..200, any::<u64>()],
            rails in proptest::collection::vec(0usize..64, 1..=64),
        ) {
            let plan = StripePlan::equal(len, &rails).unwrap();
            check_layout(&plan, len);
            let n = rails.len() as u64;
            prop_assert_eq!(plan.len() as u64, n.min(len));
            for (s, &rail) in plan.iter().zip(&rails) {
                prop_assert_eq!(s.rail, rail);
                prop_assert!(s.len == len / n || s.len == len / n + 1);
            }
        }

        #[test]
        fn weighted_plan_follows_the_weights(
            len in prop_oneof![0u64..500, any::<u64>()],
            weights in proptest::collection::vec(
                prop_oneof![Just(0u64), 1u64..10, any::<u64>()], 1..=64),
        ) {
            let rails: Vec<(usize, u64)> = weights.iter().copied().enumerate().collect();
            let plan = StripePlan::weighted(len, &rails).unwrap();
            check_layout(&plan, len);
            let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
            let mut got = vec![0u64; rails.len()];
            for s in &plan {
                got[s.rail] = s.len;
            }
            let n = rails.len() as u64;
            for (rail, &w) in weights.iter().enumerate() {
                let share = u128::from(got[rail]);
                if let Some(total) = std::num::NonZeroU128::new(total) {
                    // |share - len * w / total| < 1, in exact arithmetic:
                    // the floor of the exact share, or one more when the
                    // exact share is not an integer.
                    let exact = u128::from(len) * u128::from(w);
                    let (floor, rem) = (exact / total, exact % total);
                    prop_assert!(
                        share == floor || (share == floor + 1 && rem != 0),
                        "rail {} got {} of exact {}/{}", rail, share, exact, total
                    );
                    if w == 0 {
                        prop_assert_eq!(share, 0);
                    }
                } else {
                    prop_assert!(got[rail] == len / n || got[rail] == len / n + 1);
                }
            }
        }
    }
}
