//! The tag matcher: PSM's posted-receive queue and unexpected-message queue.
//!
//! # Semantics (PSM 1.x MQ)
//!
//! * A receive is posted with a [`TagMatch`] (tag and select mask). It takes
//!   the **oldest** unexpected message whose tag matches, if any; otherwise
//!   it waits in the posted queue.
//! * A message arrives with an exact 64-bit tag. It goes to the **oldest
//!   posted** receive that matches, counting wildcard and exact receives in
//!   one posting order; otherwise it waits in the unexpected queue.
//! * Arrivals are processed in the order the caller presents them, so a
//!   caller that presents each peer's messages in send order gets PSM's
//!   per-peer ordering (no overtaking between messages one receive could
//!   take).
//! * A queued receive can be cancelled; [`probe`](TagMatcher::probe) looks at
//!   the oldest matching unexpected message without taking it.
//!
//! # Cost
//!
//! Every entry gets a global sequence number. Receives with an exact mask
//! (`select == u64::MAX`, the common case) live in per-tag buckets ordered by
//! sequence; others live in one ordered wildcard list. An arrival looks at
//! the front of its tag's bucket (O(log n)) and scans only the wildcards
//! posted *before* that front, so thousands of exact receives cost nothing
//! to an arrival. Unexpected messages are indexed by tag the same way, so
//! exact receives find theirs in O(log n); wildcard receives and probes scan
//! the unexpected queue in order.
//!
//! # Byte accounting
//!
//! Each unexpected message is charged a caller-chosen number of bytes. The
//! matcher sums them against a budget and reports when the sum exceeds it;
//! what to do about it (the soft engine's credit scheme) is the caller's
//! business.

use crate::engine::TagMatch;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::Hash;

/// A message waiting in the unexpected queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexpected<U> {
    /// Its tag.
    pub tag: u64,
    /// Bytes charged against the budget while it waits.
    pub charge: u64,
    /// The caller's data (payload or rendezvous header, source, ...).
    pub payload: U,
}

/// What [`TagMatcher::arrive`] did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<R, U> {
    /// The oldest matching posted receive `recv` takes it; it is no longer
    /// queued.
    Matched {
        /// The receive.
        recv: R,
        /// The message, handed back.
        payload: U,
    },
    /// No receive matched: the message waits in the unexpected queue.
    Queued {
        /// Whether the unexpected bytes now exceed the budget.
        over_budget: bool,
    },
}

/// A receive id posted twice while the first is still queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the receive id is already posted")]
pub struct DuplicateRecv;

/// PSM's two MQ queues. `R` names a posted receive; `U` is the caller's
/// data for an unexpected message.
pub struct TagMatcher<R, U> {
    next_seq: u64,
    /// Exact receives: tag -> (sequence -> id).
    posted_exact: HashMap<u64, BTreeMap<u64, R>>,
    /// Receives with any other mask, in posting order.
    posted_wild: BTreeMap<u64, (TagMatch, R)>,
    /// id -> (sequence, Some(tag) for exact receives).
    posted_index: HashMap<R, (u64, Option<u64>)>,
    /// Unexpected messages in arrival order.
    unexpected: BTreeMap<u64, Unexpected<U>>,
    /// tag -> sequences of its unexpected messages.
    unexpected_by_tag: HashMap<u64, BTreeSet<u64>>,
    unexpected_bytes: u64,
    /// Messages ever queued as unexpected.
    unexpected_total: u64,
    budget: u64,
}

impl<R, U> fmt::Debug for TagMatcher<R, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagMatcher")
            .field("posted", &self.posted_index.len())
            .field("unexpected", &self.unexpected.len())
            .field("unexpected_bytes", &self.unexpected_bytes)
            .field("budget", &self.budget)
            .finish()
    }
}

impl<R: Copy + Eq + Hash, U> TagMatcher<R, U> {
    /// Empty queues; unexpected messages may hold up to `budget` bytes.
    pub fn new(budget: u64) -> Self {
        TagMatcher {
            next_seq: 0,
            posted_exact: HashMap::new(),
            posted_wild: BTreeMap::new(),
            posted_index: HashMap::new(),
            unexpected: BTreeMap::new(),
            unexpected_by_tag: HashMap::new(),
            unexpected_bytes: 0,
            unexpected_total: 0,
            budget,
        }
    }

    fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Posts a receive: returns the oldest matching unexpected message (the
    /// receive is then done, not queued), or `None` after queueing it.
    pub fn post_recv(
        &mut self,
        tags: TagMatch,
        id: R,
    ) -> Result<Option<Unexpected<U>>, DuplicateRecv> {
        if self.posted_index.contains_key(&id) {
            return Err(DuplicateRecv);
        }
        let found = if tags.select == u64::MAX {
            self.unexpected_by_tag
                .get(&tags.tag)
                .and_then(|s| s.first().copied())
        } else {
            self.unexpected
                .iter()
                .find(|(_, u)| tags.matches(u.tag))
                .map(|(s, _)| *s)
        };
        if let Some(seq) = found {
            return Ok(Some(self.take_unexpected(seq)));
        }
        let seq = self.seq();
        if tags.select == u64::MAX {
            self.posted_exact
                .entry(tags.tag)
                .or_default()
                .insert(seq, id);
            self.posted_index.insert(id, (seq, Some(tags.tag)));
        } else {
            self.posted_wild.insert(seq, (tags, id));
            self.posted_index.insert(id, (seq, None));
        }
        Ok(None)
    }

    /// A message with `tag` arrives: the oldest matching posted receive takes
    /// it, or it is queued as unexpected, charged `charge` bytes.
    pub fn arrive(&mut self, tag: u64, charge: u64, payload: U) -> Arrival<R, U> {
        self.arrive_with(tag, charge, payload, |p| p)
    }

    /// As [`arrive`](Self::arrive), passing the payload through `on_queue`
    /// when it is queued (to compact it, for instance); a matched payload
    /// is handed back untouched.
    pub fn arrive_with(
        &mut self,
        tag: u64,
        charge: u64,
        payload: U,
        on_queue: impl FnOnce(U) -> U,
    ) -> Arrival<R, U> {
        let exact = self
            .posted_exact
            .get(&tag)
            .and_then(|b| b.first_key_value())
            .map(|(s, _)| *s);
        // Only wildcards posted before the exact candidate can win.
        let wild = self
            .posted_wild
            .range(..exact.unwrap_or(u64::MAX))
            .find(|(_, (m, _))| m.matches(tag))
            .map(|(s, _)| *s);
        let recv = match (wild, exact) {
            (Some(seq), _) => self.posted_wild.remove(&seq).map(|(_, id)| id),
            (None, Some(seq)) => self.remove_exact(tag, seq),
            (None, None) => None,
        };
        if let Some(recv) = recv {
            self.posted_index.remove(&recv);
            return Arrival::Matched { recv, payload };
        }
        let seq = self.seq();
        self.unexpected.insert(
            seq,
            Unexpected {
                tag,
                charge,
                payload: on_queue(payload),
            },
        );
        self.unexpected_by_tag.entry(tag).or_default().insert(seq);
        self.unexpected_bytes = self.unexpected_bytes.saturating_add(charge);
        self.unexpected_total += 1;
        Arrival::Queued {
            over_budget: self.over_budget(),
        }
    }

    fn remove_exact(&mut self, tag: u64, seq: u64) -> Option<R> {
        let bucket = self.posted_exact.get_mut(&tag)?;
        let id = bucket.remove(&seq);
        if bucket.is_empty() {
            self.posted_exact.remove(&tag);
        }
        id
    }

    fn take_unexpected(&mut self, seq: u64) -> Unexpected<U> {
        let u = self
            .unexpected
            .remove(&seq)
            .expect("the tag index and the queue agree");
        if let Some(set) = self.unexpected_by_tag.get_mut(&u.tag) {
            set.remove(&seq);
            if set.is_empty() {
                self.unexpected_by_tag.remove(&u.tag);
            }
        }
        self.unexpected_bytes -= u.charge;
        u
    }

    /// Removes a queued receive; `false` if it is not queued (never posted,
    /// already matched or cancelled).
    pub fn cancel(&mut self, id: &R) -> bool {
        match self.posted_index.remove(id) {
            Some((seq, Some(tag))) => self.remove_exact(tag, seq).is_some(),
            Some((seq, None)) => self.posted_wild.remove(&seq).is_some(),
            None => false,
        }
    }

    /// Whether `id` is queued.
    pub fn is_posted(&self, id: &R) -> bool {
        self.posted_index.contains_key(id)
    }

    /// The oldest unexpected message matching `tags`, left in the queue.
    pub fn probe(&self, tags: TagMatch) -> Option<&Unexpected<U>> {
        if tags.select == u64::MAX {
            let seq = self.unexpected_by_tag.get(&tags.tag)?.first()?;
            self.unexpected.get(seq)
        } else {
            self.unexpected.values().find(|u| tags.matches(u.tag))
        }
    }

    /// Removes every unexpected message `pred` selects (in arrival order),
    /// releasing their charge.
    pub fn remove_unexpected_if(
        &mut self,
        mut pred: impl FnMut(&Unexpected<U>) -> bool,
    ) -> Vec<Unexpected<U>> {
        let seqs: Vec<u64> = self
            .unexpected
            .iter()
            .filter(|(_, u)| pred(u))
            .map(|(s, _)| *s)
            .collect();
        seqs.into_iter().map(|s| self.take_unexpected(s)).collect()
    }

    /// The bytes charged for the unexpected messages `pred` selects.
    pub fn unexpected_charge_of(&self, mut pred: impl FnMut(&Unexpected<U>) -> bool) -> u64 {
        self.unexpected
            .values()
            .filter(|u| pred(u))
            .map(|u| u.charge)
            .sum()
    }

    /// Whether any unexpected message satisfies `pred`.
    pub fn any_unexpected(&self, pred: impl FnMut(&Unexpected<U>) -> bool) -> bool {
        self.unexpected.values().any(pred)
    }

    /// Gives back the memory of index maps far larger than what they
    /// hold now (after a burst of distinct tags).
    pub fn release_memory(&mut self) {
        for cap_len in [
            (self.posted_exact.capacity(), self.posted_exact.len()),
            (
                self.unexpected_by_tag.capacity(),
                self.unexpected_by_tag.len(),
            ),
            (self.posted_index.capacity(), self.posted_index.len()),
        ] {
            if cap_len.0 > 4 * cap_len.1 + 64 {
                self.posted_exact.shrink_to_fit();
                self.unexpected_by_tag.shrink_to_fit();
                self.posted_index.shrink_to_fit();
                return;
            }
        }
    }

    /// Number of queued receives.
    pub fn posted_len(&self) -> usize {
        self.posted_index.len()
    }

    /// Number of unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Bytes charged by the unexpected messages.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unexpected_bytes
    }

    /// Messages queued as unexpected since the matcher was made (those
    /// matched, cancelled or dropped since included).
    ///
    /// ```
    /// use psmrail::engine::soft::TagMatcher;
    /// use psmrail::engine::TagMatch;
    ///
    /// let mut m: TagMatcher<u32, &str> = TagMatcher::new(1 << 20);
    /// m.arrive(5, 70, "early");
    /// assert_eq!((m.unexpected_len(), m.unexpected_bytes(), m.unexpected_total()), (1, 70, 1));
    /// assert!(m.post_recv(TagMatch::exact(5), 1).unwrap().is_some());
    /// assert_eq!((m.unexpected_len(), m.unexpected_bytes(), m.unexpected_total()), (0, 0, 1));
    /// ```
    pub fn unexpected_total(&self) -> u64 {
        self.unexpected_total
    }

    /// The budget given at creation.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Whether the unexpected messages hold more than the budget.
    pub fn over_budget(&self) -> bool {
        self.unexpected_bytes > self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    type M = TagMatcher<u32, &'static str>;

    fn matched(a: Arrival<u32, &'static str>) -> Option<u32> {
        match a {
            Arrival::Matched { recv, .. } => Some(recv),
            Arrival::Queued { .. } => None,
        }
    }

    #[test]
    fn posting_order_spans_wildcard_and_exact() {
        let mut m = M::new(1 << 20);
        m.post_recv(TagMatch::exact(5), 1).unwrap();
        m.post_recv(TagMatch::ANY, 2).unwrap();
        m.post_recv(TagMatch::exact(5), 3).unwrap();
        m.post_recv(TagMatch::new(0x100, 0xf00), 4).unwrap();
        // 5: exact #1 is older than the wildcard #2.
        assert_eq!(matched(m.arrive(5, 0, "a")), Some(1));
        // 5 again: the wildcard #2 is older than exact #3.
        assert_eq!(matched(m.arrive(5, 0, "b")), Some(2));
        // 0x1ff: only the masked receive #4 matches.
        assert_eq!(matched(m.arrive(0x1ff, 0, "c")), Some(4));
        assert_eq!(matched(m.arrive(5, 0, "d")), Some(3));
        assert_eq!(m.posted_len(), 0);
        assert_eq!(m.arrive(5, 0, "e"), Arrival::Queued { over_budget: false });
    }

    #[test]
    fn unexpected_messages_are_taken_oldest_first() {
        let mut m = M::new(1 << 20);
        for (tag, p) in [(1, "x1"), (2, "y1"), (1, "x2"), (2, "y2")] {
            assert!(matches!(m.arrive(tag, 1, p), Arrival::Queued { .. }));
        }
        let take = |m: &mut M, t: TagMatch, id| m.post_recv(t, id).unwrap().unwrap().payload;
        assert_eq!(take(&mut m, TagMatch::exact(2), 10), "y1");
        assert_eq!(take(&mut m, TagMatch::ANY, 11), "x1");
        assert_eq!(take(&mut m, TagMatch::exact(1), 12), "x2");
        assert_eq!(take(&mut m, TagMatch::ANY, 13), "y2");
        assert_eq!(m.post_recv(TagMatch::ANY, 14).unwrap(), None);
        assert!(m.is_posted(&14));
    }

    #[test]
    fn cancel_removes_only_queued_receives() {
        let mut m = M::new(1 << 20);
        m.post_recv(TagMatch::exact(9), 1).unwrap();
        m.post_recv(TagMatch::ANY, 2).unwrap();
        assert!(m.cancel(&1));
        assert!(!m.cancel(&1));
        assert_eq!(matched(m.arrive(9, 0, "m")), Some(2));
        assert!(!m.cancel(&2), "a matched receive cannot be cancelled");
        assert!(!m.cancel(&77));
        assert_eq!(m.posted_len(), 0);
        // A cancelled id may be posted again.
        m.post_recv(TagMatch::exact(9), 1).unwrap();
        assert_eq!(m.post_recv(TagMatch::ANY, 1), Err(DuplicateRecv));
    }

    #[test]
    fn probe_does_not_consume() {
        let mut m = M::new(1 << 20);
        assert!(m.probe(TagMatch::ANY).is_none());
        m.arrive(3, 10, "first");
        m.arrive(3, 10, "second");
        for _ in 0..3 {
            assert_eq!(m.probe(TagMatch::exact(3)).unwrap().payload, "first");
            assert_eq!(m.probe(TagMatch::new(0, 0)).unwrap().payload, "first");
        }
        assert!(m.probe(TagMatch::exact(4)).is_none());
        assert_eq!(m.unexpected_len(), 2);
        assert_eq!(
            m.post_recv(TagMatch::ANY, 1).unwrap().unwrap().payload,
            "first"
        );
        assert_eq!(m.probe(TagMatch::ANY).unwrap().payload, "second");
    }

    #[test]
    fn budget_accounting_goes_up_and_down() {
        let mut m = M::new(100);
        assert_eq!(m.arrive(1, 60, "a"), Arrival::Queued { over_budget: false });
        assert_eq!(m.unexpected_bytes(), 60);
        assert_eq!(m.arrive(2, 40, "b"), Arrival::Queued { over_budget: false });
        assert_eq!(m.unexpected_bytes(), 100);
        assert_eq!(m.arrive(3, 1, "c"), Arrival::Queued { over_budget: true });
        assert!(m.over_budget());
        m.post_recv(TagMatch::exact(1), 7).unwrap().unwrap();
        assert_eq!(m.unexpected_bytes(), 41);
        assert!(!m.over_budget());
        let gone = m.remove_unexpected_if(|u| u.tag == 3);
        assert_eq!(gone.len(), 1);
        assert_eq!(m.unexpected_bytes(), 40);
        // A matched arrival is never charged.
        m.post_recv(TagMatch::ANY, 8).unwrap().unwrap();
        m.post_recv(TagMatch::ANY, 9).unwrap();
        assert!(matches!(
            m.arrive(5, 1000, "d"),
            Arrival::Matched { recv: 9, .. }
        ));
        assert_eq!((m.unexpected_bytes(), m.unexpected_len()), (0, 0));
    }

    #[test]
    fn exact_receives_do_not_slow_arrivals() {
        // 20k exact receives on distinct tags (500 under miri, which
        // interprets every access); arrivals of other tags queue.
        let n = if cfg!(miri) { 500 } else { 20_000u32 };
        let mut m: TagMatcher<u32, u32> = TagMatcher::new(u64::MAX);
        for i in 0..n {
            m.post_recv(TagMatch::exact(u64::from(i) + 1_000_000), i)
                .unwrap();
        }
        for i in 0..n {
            assert!(matches!(
                m.arrive(u64::from(i), 0, i),
                Arrival::Queued { .. }
            ));
        }
        for i in (0..n).rev() {
            let got = m.arrive(u64::from(i) + 1_000_000, 0, i);
            assert_eq!(
                got,
                Arrival::Matched {
                    recv: i,
                    payload: i
                }
            );
        }
    }

    /// The naive reference: two lists scanned front to back.
    #[derive(Default)]
    struct Model {
        posted: VecDeque<(TagMatch, u32)>,
        unexpected: VecDeque<(u64, u64, u32)>,
    }

    impl Model {
        fn post(&mut self, t: TagMatch, id: u32) -> Option<u32> {
            if let Some(i) = self.unexpected.iter().position(|u| t.matches(u.0)) {
                return self.unexpected.remove(i).map(|u| u.2);
            }
            self.posted.push_back((t, id));
            None
        }
        fn arrive(&mut self, tag: u64, charge: u64, p: u32) -> Option<u32> {
            if let Some(i) = self.posted.iter().position(|r| r.0.matches(tag)) {
                return self.posted.remove(i).map(|r| r.1);
            }
            self.unexpected.push_back((tag, charge, p));
            None
        }
        fn cancel(&mut self, id: u32) -> bool {
            match self.posted.iter().position(|r| r.1 == id) {
                Some(i) => self.posted.remove(i).is_some(),
                None => false,
            }
        }
        fn probe(&self, t: TagMatch) -> Option<u32> {
            self.unexpected.iter().find(|u| t.matches(u.0)).map(|u| u.2)
        }
        fn bytes(&self) -> u64 {
            self.unexpected.iter().map(|u| u.1).sum()
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Post(TagMatch),
        Arrive(u64, u64),
        Cancel(u32),
        Probe(TagMatch),
    }

    fn tag_match() -> impl Strategy<Value = TagMatch> {
        // A few tags and masks so that matches are frequent and overlap.
        let tag = 0u64..6;
        prop_oneof![
            3 => tag.clone().prop_map(TagMatch::exact),
            1 => Just(TagMatch::ANY),
            1 => (tag, prop_oneof![Just(0b110u64), Just(0b001u64), Just(!1u64)])
                .prop_map(|(t, s)| TagMatch::new(t, s)),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => tag_match().prop_map(Op::Post),
            3 => (0u64..6, 0u64..50).prop_map(|(t, c)| Op::Arrive(t, c)),
            1 => (0u32..40).prop_map(Op::Cancel),
            1 => tag_match().prop_map(Op::Probe),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn matches_like_the_reference(ops in proptest::collection::vec(op(), 1..120)) {
            let mut m: TagMatcher<u32, u32> = TagMatcher::new(500);
            let mut r = Model::default();
            let (mut next_id, mut next_msg) = (0u32, 0u32);
            for op in ops {
                match op {
                    Op::Post(t) => {
                        let id = next_id;
                        next_id += 1;
                        let got = m.post_recv(t, id).unwrap().map(|u| u.payload);
                        prop_assert_eq!(got, r.post(t, id));
                    }
                    Op::Arrive(tag, charge) => {
                        let p = next_msg;
                        next_msg += 1;
                        let got = match m.arrive(tag, charge, p) {
                            Arrival::Matched { recv, payload } => {
                                prop_assert_eq!(payload, p);
                                Some(recv)
                            }
                            Arrival::Queued { over_budget } => {
                                prop_assert_eq!(over_budget, r.bytes() + charge > 500);
                                None
                            }
                        };
                        prop_assert_eq!(got, r.arrive(tag, charge, p));
                    }
                    Op::Cancel(id) => prop_assert_eq!(m.cancel(&id), r.cancel(id)),
                    Op::Probe(t) => prop_assert_eq!(m.probe(t).map(|u| u.payload), r.probe(t)),
                }
                prop_assert_eq!(m.posted_len(), r.posted.len());
                prop_assert_eq!(m.unexpected_len(), r.unexpected.len());
                prop_assert_eq!(m.unexpected_bytes(), r.bytes());
            }
        }
    }
}
