//! The deferred operations of one counter (`FI_TRIGGER`), as a pure data
//! structure.
//!
//! A triggered operation waits until its counter reaches a threshold, then
//! fires exactly once. Operations fire in threshold order, and those with equal
//! thresholds in the order they were added, as in the C psm provider's trigger
//! list (`prov/psm/src/psmx_cntr.c`). The list only decides *what* fires; the
//! caller runs the fired operations outside any engine lock (from a progress
//! step), because a counter may change inside the engine's progress.
//!
//! ```
//! use psmrail::ops::TriggerList;
//! let mut list = TriggerList::new();
//! list.add(2, "b");
//! list.add(1, "a");
//! list.add(2, "c");
//! assert_eq!(list.fire(1), vec!["a"]);
//! assert_eq!(list.fire(5), vec!["b", "c"]);
//! assert!(list.is_empty());
//! ```

use std::collections::BTreeMap;

/// Operations waiting for a counter value, in firing order.
#[derive(Debug)]
pub struct TriggerList<T> {
    /// (threshold, insertion number) -> operation: the key orders by
    /// threshold, then FIFO.
    waiting: BTreeMap<(u64, u64), T>,
    next: u64,
}

impl<T> Default for TriggerList<T> {
    fn default() -> Self {
        TriggerList {
            waiting: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<T> TriggerList<T> {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `op`, to fire once the counter reaches `threshold`.
    pub fn add(&mut self, threshold: u64, op: T) {
        self.waiting.insert((threshold, self.next), op);
        self.next += 1;
    }

    /// Removes and returns, in firing order, every operation whose
    /// threshold is at most `value`.
    pub fn fire(&mut self, value: u64) -> Vec<T> {
        let mut fired = Vec::new();
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > value {
                break;
            }
            fired.push(entry.remove());
        }
        fired
    }

    /// The lowest threshold waiting, if any.
    pub fn next_threshold(&self) -> Option<u64> {
        self.waiting.keys().next().map(|k| k.0)
    }

    /// Removes every operation (the endpoint closed: they fail).
    pub fn drain(&mut self) -> Vec<T> {
        std::mem::take(&mut self.waiting).into_values().collect()
    }

    /// Number of waiting operations.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fires_once_in_threshold_then_fifo_order() {
        let mut l = TriggerList::new();
        for (t, v) in [(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e')] {
            l.add(t, v);
        }
        assert_eq!(l.next_threshold(), Some(1));
        assert_eq!(l.fire(0), Vec::<char>::new());
        assert_eq!(l.fire(2), vec!['b', 'e', 'd']);
        assert_eq!(l.fire(2), Vec::<char>::new(), "nothing fires twice");
        assert_eq!(l.len(), 2);
        assert_eq!(l.drain(), vec!['a', 'c']);
        assert!(l.is_empty() && l.next_threshold().is_none());
    }

    #[test]
    fn counter_going_down_fires_nothing_new() {
        let mut l = TriggerList::new();
        l.add(5, 1);
        assert!(l.fire(4).is_empty());
        assert_eq!(l.fire(u64::MAX), vec![1]);
    }

    proptest! {
        /// Against a model: every op fires exactly once, when the value
        /// first reaches its threshold, in (threshold, insertion) order.
        #[test]
        fn matches_model(thresholds in proptest::collection::vec(0u64..20, 0..40),
                         values in proptest::collection::vec(0u64..25, 0..20)) {
            let mut l = TriggerList::new();
            for (i, t) in thresholds.iter().enumerate() {
                l.add(*t, i);
            }
            let mut fired_all = Vec::new();
            let mut fired_set = std::collections::HashSet::new();
            for v in values {
                let got = l.fire(v);
                let mut want: Vec<usize> = (0..thresholds.len())
                    .filter(|i| thresholds[*i] <= v && !fired_set.contains(i))
                    .collect();
                want.sort_by_key(|i| (thresholds[*i], *i));
                prop_assert_eq!(&got, &want);
                fired_set.extend(got.iter().copied());
                fired_all.extend(got);
            }
            let rest = l.drain();
            prop_assert_eq!(fired_all.len() + rest.len(), thresholds.len());
        }
    }
}
