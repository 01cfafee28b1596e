//! Per-peer sequence numbers and the receive-side reorder buffer.
//!
//! A message to a peer may take any rail, and rails do not keep order
//! between each other, so each endpoint numbers the messages it sends to
//! each peer ([`TxSequence`]) and the receiver puts them back in order
//! ([`Reorder`]) before matching them. Sequence numbers are 32 bits and
//! wrap; distances are taken modulo 2^32, a distance of 2^31 or more
//! meaning "behind".
//!
//! The reorder buffer holds at most `window` messages ahead of the next
//! expected one. It takes hostile input: anything already delivered,
//! already held or too far ahead is refused and handed back, never
//! stored, and nothing panics.

use std::collections::{BTreeMap, VecDeque};

/// Half the sequence space: distances at or above it are behind.
const HALF: u32 = 1 << 31;

/// The sequence numbers an endpoint gives the messages it sends to one peer.
///
/// ```
/// use psmrail::mrail::core::sequence::TxSequence;
///
/// let mut tx = TxSequence::with_start(u32::MAX);
/// assert_eq!(tx.next(), u32::MAX);
/// assert_eq!(tx.next(), 0);
/// assert_eq!(tx.peek(), 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxSequence {
    next: u32,
}

impl TxSequence {
    /// Numbering from 0.
    pub const fn new() -> Self {
        TxSequence { next: 0 }
    }

    /// Numbering from `start`.
    pub const fn with_start(start: u32) -> Self {
        TxSequence { next: start }
    }

    /// The number for the next message, wrapping after `u32::MAX`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u32 {
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        seq
    }

    /// The number [`next`](Self::next) will return.
    pub const fn peek(&self) -> u32 {
        self.next
    }
}

/// A sequence number [`Reorder::accept`] refused; the item is handed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReorderError<T> {
    /// Already delivered, or already held.
    #[error("sequence number already delivered or already held")]
    Duplicate(T),
    /// Beyond the window.
    #[error("sequence number beyond the reorder window")]
    TooFar(T),
}

impl<T> ReorderError<T> {
    /// The refused item.
    pub fn into_item(self) -> T {
        match self {
            ReorderError::Duplicate(item) | ReorderError::TooFar(item) => item,
        }
    }
}

/// Puts one peer's messages back in sequence order.
///
/// Items whose sequence number is within `window` of the next expected one
/// are held; [`pop_ready`](Self::pop_ready) hands them out in order as long
/// as the next expected one is there. Memory is proportional to the items
/// held, which is at most `window`.
///
/// ```
/// use psmrail::mrail::core::sequence::{Reorder, ReorderError};
///
/// let mut r = Reorder::with_start(u32::MAX, 8);
/// r.accept(0, "b").unwrap();
/// assert_eq!(r.pop_ready(), None);
/// r.accept(u32::MAX, "a").unwrap();
/// assert_eq!(r.pop_ready(), Some((u32::MAX, "a")));
/// assert_eq!(r.pop_ready(), Some((0, "b")));
/// assert_eq!(r.expected(), 1);
/// assert_eq!(r.accept(0, "again"), Err(ReorderError::Duplicate("again")));
/// assert_eq!(r.accept(9, "far"), Err(ReorderError::TooFar("far")));
/// ```
#[derive(Clone, Debug)]
pub struct Reorder<T> {
    /// The next sequence number to hand out.
    expected: u32,
    /// `expected` counted without wrapping, so that held items have a
    /// total order.
    base: u64,
    window: u32,
    /// Items for `expected`, `expected + 1`, ... without gaps.
    ready: VecDeque<T>,
    /// Items past the first gap, by unwrapped sequence number.
    ahead: BTreeMap<u64, T>,
}

impl<T> Reorder<T> {
    /// A buffer expecting sequence number 0 first.
    ///
    /// `window` is clamped to `1..=2^31`: beyond half the sequence space
    /// "ahead" and "behind" could not be told apart.
    pub fn new(window: u32) -> Self {
        Reorder::with_start(0, window)
    }

    /// A buffer expecting `expected` first (`window` as for
    /// [`new`](Self::new)).
    pub fn with_start(expected: u32, window: u32) -> Self {
        Reorder {
            expected,
            base: 0,
            window: window.clamp(1, HALF),
            ready: VecDeque::new(),
            ahead: BTreeMap::new(),
        }
    }

    /// Takes the item with sequence number `seq`.
    ///
    /// With `d = seq - expected` (mod 2^32): `d` of 2^31 or more is behind,
    /// thus already delivered, and a `seq` already held is a duplicate
    /// (both [`ReorderError::Duplicate`]); `d` of `window` or more (below
    /// 2^31) is [`ReorderError::TooFar`]. Otherwise the item is held until
    /// its turn.
    pub fn accept(&mut self, seq: u32, item: T) -> Result<(), ReorderError<T>> {
        let d = seq.wrapping_sub(self.expected);
        if d >= HALF {
            return Err(ReorderError::Duplicate(item));
        }
        if d >= self.window {
            return Err(ReorderError::TooFar(item));
        }
        let d = u64::from(d);
        let run = self.ready.len() as u64;
        if d < run {
            return Err(ReorderError::Duplicate(item));
        }
        if d > run {
            return match self.ahead.entry(self.base + d) {
                std::collections::btree_map::Entry::Occupied(_) => {
                    Err(ReorderError::Duplicate(item))
                }
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(item);
                    Ok(())
                }
            };
        }
        self.ready.push_back(item);
        // The gap is filled: move what follows it into the run.
        while let Some(next) = self.ahead.first_entry() {
            if *next.key() != self.base + self.ready.len() as u64 {
                break;
            }
            self.ready.push_back(next.remove());
        }
        Ok(())
    }

    /// The next item in sequence order, if it has arrived, with its
    /// sequence number; advances [`expected`](Self::expected).
    pub fn pop_ready(&mut self) -> Option<(u32, T)> {
        let item = self.ready.pop_front()?;
        let seq = self.expected;
        self.expected = seq.wrapping_add(1);
        self.base += 1;
        Some((seq, item))
    }

    /// Whether [`pop_ready`](Self::pop_ready) would return an item.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next sequence number to be handed out.
    pub fn expected(&self) -> u32 {
        self.expected
    }

    /// How many items are held (ready or waiting for a gap to fill).
    pub fn held(&self) -> usize {
        self.ready.len() + self.ahead.len()
    }

    /// The window (after clamping).
    pub fn window(&self) -> u32 {
        self.window
    }

    /// The item held for `seq`, if one is (ready, or waiting for a gap to
    /// fill): to change it before its turn.
    ///
    /// ```
    /// use psmrail::mrail::core::sequence::Reorder;
    ///
    /// let mut r = Reorder::new(8);
    /// r.accept(2, "c").unwrap();
    /// *r.get_mut(2).unwrap() = "C";
    /// assert!(r.get_mut(1).is_none());
    /// r.accept(0, "a").unwrap();
    /// r.accept(1, "b").unwrap();
    /// let out: Vec<_> = std::iter::from_fn(|| r.pop_ready()).map(|(_, x)| x).collect();
    /// assert_eq!(out, ["a", "b", "C"]);
    /// assert!(r.get_mut(2).is_none(), "handed out");
    /// ```
    pub fn get_mut(&mut self, seq: u32) -> Option<&mut T> {
        let d = seq.wrapping_sub(self.expected);
        if d >= HALF {
            return None;
        }
        let d = u64::from(d);
        match usize::try_from(d) {
            Ok(i) if i < self.ready.len() => self.ready.get_mut(i),
            _ => self.ahead.get_mut(&(self.base + d)),
        }
    }

    /// Whether every sequence number before `upto` was handed out or is
    /// ready to be (no gap below it). A `upto` behind
    /// [`expected`](Self::expected) is.
    ///
    /// ```
    /// use psmrail::mrail::core::sequence::Reorder;
    ///
    /// let mut r = Reorder::new(8);
    /// r.accept(0, ()).unwrap();
    /// r.accept(2, ()).unwrap();
    /// assert!(r.ready_to(1) && !r.ready_to(2) && !r.ready_to(3));
    /// r.accept(1, ()).unwrap();
    /// assert!(r.ready_to(3) && !r.ready_to(4));
    /// assert!(r.ready_to(u32::MAX), "behind");
    /// ```
    pub fn ready_to(&self, upto: u32) -> bool {
        let d = upto.wrapping_sub(self.expected);
        d >= HALF || u64::from(d) <= self.ready.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn tx_wraps() {
        let mut tx = TxSequence::new();
        assert_eq!((tx.next(), tx.next(), tx.peek()), (0, 1, 2));
        let mut tx = TxSequence::with_start(u32::MAX - 1);
        let v: Vec<u32> = (0..4).map(|_| tx.next()).collect();
        assert_eq!(v, [u32::MAX - 1, u32::MAX, 0, 1]);
    }

    #[test]
    fn in_order_is_immediately_ready() {
        let mut r = Reorder::new(4);
        for s in 0..10u32 {
            r.accept(s, s * 10).unwrap();
            assert!(r.has_ready());
            assert_eq!(r.pop_ready(), Some((s, s * 10)));
            assert_eq!(r.held(), 0);
        }
        assert_eq!(r.expected(), 10);
    }

    #[test]
    fn classification() {
        let mut r = Reorder::with_start(100, 4);
        assert_eq!(r.accept(99, ()), Err(ReorderError::Duplicate(())));
        assert_eq!(r.accept(104, ()), Err(ReorderError::TooFar(())));
        assert_eq!(r.accept(100 + HALF - 1, ()), Err(ReorderError::TooFar(())));
        assert_eq!(r.accept(100 + HALF, ()), Err(ReorderError::Duplicate(())));
        r.accept(103, ()).unwrap();
        assert_eq!(r.accept(103, ()), Err(ReorderError::Duplicate(())));
        r.accept(100, ()).unwrap();
        assert_eq!(r.accept(100, ()), Err(ReorderError::Duplicate(())));
        assert_eq!((r.held(), r.has_ready()), (2, true));
        assert_eq!(ReorderError::TooFar(7).into_item(), 7);
        assert!(ReorderError::Duplicate(()).to_string().contains("already"));
    }

    #[test]
    fn window_is_clamped() {
        assert_eq!(Reorder::<()>::new(0).window(), 1);
        assert_eq!(Reorder::<()>::new(u32::MAX).window(), HALF);
        let mut r = Reorder::new(u32::MAX);
        r.accept(HALF - 1, 1).unwrap();
        assert_eq!(r.accept(HALF, 2), Err(ReorderError::Duplicate(2)));
    }

    #[test]
    fn wraps_around_u32() {
        let start = u32::MAX - 5;
        let seqs: Vec<u32> = (0..20).map(|i| start.wrapping_add(i)).collect();
        // A fixed shuffle.
        let order = [
            7, 19, 0, 3, 12, 1, 18, 5, 2, 9, 4, 15, 6, 11, 8, 17, 10, 14, 13, 16,
        ];
        let mut r = Reorder::with_start(start, 32);
        let mut out = Vec::new();
        for &i in &order {
            r.accept(seqs[i], i).unwrap();
            while let Some((seq, i)) = r.pop_ready() {
                assert_eq!(seq, seqs[i]);
                out.push(seq);
            }
        }
        assert_eq!(out, seqs);
        assert_eq!(r.expected(), 14);
        assert_eq!(r.held(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn reorders_a_shuffled_run_with_duplicates(
            start in prop_oneof![any::<u32>(), (u32::MAX - 40)..=u32::MAX],
            n in 0usize..40,
            keys in proptest::collection::vec(any::<u32>(), 40),
            dups in proptest::collection::vec((0usize..40, 0usize..80), 0..20),
            pops in proptest::collection::vec(any::<bool>(), 80),
        ) {
            // Shuffle the run 0..n by sorting on random keys, then inject
            // duplicates at random positions.
            let mut script: Vec<usize> = (0..n).collect();
            script.sort_by_key(|&i| keys[i]);
            if n > 0 {
                for &(i, at) in &dups {
                    script.insert(at.min(script.len()), i % n);
                }
            }
            let mut r = Reorder::with_start(start, 64);
            let mut seen = BTreeSet::new();
            let mut out = Vec::new();
            for (step, &i) in script.iter().enumerate() {
                let seq = start.wrapping_add(i as u32);
                let res = r.accept(seq, i);
                if seen.insert(i) {
                    prop_assert!(res.is_ok());
                } else {
                    prop_assert_eq!(res, Err(ReorderError::Duplicate(i)));
                }
                prop_assert!(r.held() <= 64);
                if pops[step % pops.len()] {
                    if let Some((seq, i)) = r.pop_ready() {
                        out.push((seq, i));
                    }
                }
            }
            while let Some(x) = r.pop_ready() {
                out.push(x);
            }
            let want: Vec<(u32, usize)> =
                (0..n).map(|i| (start.wrapping_add(i as u32), i)).collect();
            prop_assert_eq!(out, want);
            prop_assert_eq!(r.held(), 0);
            prop_assert_eq!(r.expected(), start.wrapping_add(n as u32));
        }

        /// Random scripts through the fuzz check, which compares the
        /// buffer with its own reference model.
        #[test]
        fn random_scripts_match_the_fuzz_model(
            script in proptest::collection::vec(
                prop_oneof![any::<u8>(), 0x80u8..0x90, Just(0xfe), Just(0xff)], 0..300),
        ) {
            crate::mrail::fuzzing::fuzz_reorder(&script);
        }
    }
}
