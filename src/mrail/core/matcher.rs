//! Message matching at the mrail level.
//!
//! The rails only carry mrail's control frames and data parts, each with a
//! fixed rail tag, so matching the application's receives against arriving
//! messages happens here, after the [`Reorder`](super::sequence::Reorder)
//! buffer has put each peer's messages back in order:
//!
//! * a receive ([`RecvSpec`]) takes the **oldest** unexpected message that
//!   matches it; otherwise it is queued, in posting order;
//! * an arriving message ([`ArrivalSpec`]) goes to the **oldest** posted
//!   receive that matches it; otherwise it is queued as unexpected, in
//!   arrival order.
//!
//! A receive matches a message of the same [`MsgClass`] from its source
//! (or any source); tagged receives also compare the tag bits not set in
//! `ignore`.
//!
//! Receives and messages of the two classes never match each other, so each
//! class has its own queues. The common case (a receive posted, a message
//! arriving for it, or the reverse) looks at the front of one queue:
//! constant time and, once the queues have grown to their working size, no
//! allocation.

use std::collections::VecDeque;

use super::header::MsgClass;

/// What a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvSpec {
    /// `FI_MSG` or `FI_TAGGED`.
    pub class: MsgClass,
    /// The tag (tagged receives only).
    pub tag: u64,
    /// Tag bits that do not have to match (tagged receives only).
    pub ignore: u64,
    /// The peer's index in the address vector, or `None` for any source.
    pub source: Option<u32>,
}

/// What an arriving message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArrivalSpec {
    /// `FI_MSG` or `FI_TAGGED`.
    pub class: MsgClass,
    /// The tag (meaningless for [`MsgClass::Msg`]).
    pub tag: u64,
    /// The sender's index in the address vector.
    pub source: u32,
}

impl RecvSpec {
    /// A receive for untagged messages.
    pub const fn msg(source: Option<u32>) -> Self {
        RecvSpec {
            class: MsgClass::Msg,
            tag: 0,
            ignore: 0,
            source,
        }
    }

    /// A receive for tagged messages.
    pub const fn tagged(tag: u64, ignore: u64, source: Option<u32>) -> Self {
        RecvSpec {
            class: MsgClass::Tagged,
            tag,
            ignore,
            source,
        }
    }

    /// Whether this receive takes the message `arrival`.
    ///
    /// ```
    /// use psmrail::mrail::core::matcher::{ArrivalSpec, RecvSpec};
    /// use psmrail::mrail::core::header::MsgClass;
    ///
    /// let msg = ArrivalSpec { class: MsgClass::Tagged, tag: 0x1234, source: 2 };
    /// assert!(RecvSpec::tagged(0x1200, 0xff, None).matches(&msg));
    /// assert!(!RecvSpec::tagged(0x1200, 0x0f, None).matches(&msg));
    /// assert!(!RecvSpec::tagged(0x1234, 0, Some(3)).matches(&msg));
    /// assert!(!RecvSpec::msg(None).matches(&msg));
    /// ```
    pub fn matches(&self, arrival: &ArrivalSpec) -> bool {
        self.class == arrival.class
            && (self.class == MsgClass::Msg || (self.tag ^ arrival.tag) & !self.ignore == 0)
            && self.source.is_none_or(|s| s == arrival.source)
    }
}

impl ArrivalSpec {
    /// An untagged message from `source`.
    pub const fn msg(source: u32) -> Self {
        ArrivalSpec {
            class: MsgClass::Msg,
            tag: 0,
            source,
        }
    }

    /// A tagged message from `source`.
    pub const fn tagged(tag: u64, source: u32) -> Self {
        ArrivalSpec {
            class: MsgClass::Tagged,
            tag,
            source,
        }
    }
}

/// The posted-receive and unexpected-message queues. `R` is the caller's
/// receive token, `A` the caller's data for a message (payload, or the
/// request to send of a large one).
///
/// ```
/// use psmrail::mrail::core::matcher::{ArrivalSpec, Matcher, RecvSpec};
///
/// let mut m: Matcher<&str, &str> = Matcher::new();
/// assert!(m.arrive(ArrivalSpec::tagged(5, 1), "early").is_none());
/// assert!(m.post(RecvSpec::tagged(7, 0, None), "r7").is_none());
/// let (recv, arrival, payload) = m.post(RecvSpec::tagged(0, !0, Some(1)), "any").unwrap();
/// assert_eq!((recv, arrival.tag, payload), ("any", 5, "early"));
/// let (recv, _, payload) = m.arrive(ArrivalSpec::tagged(7, 0), "late").unwrap();
/// assert_eq!((recv, payload), ("r7", "late"));
/// assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
/// ```
#[derive(Clone, Debug)]
pub struct Matcher<R, A> {
    /// Stamps entries so that queues of both classes can be merged in
    /// posting or arrival order.
    stamp: u64,
    posted: [VecDeque<Posted<R>>; 2],
    unexpected: [VecDeque<Unexpected<A>>; 2],
}

#[derive(Clone, Debug)]
struct Posted<R> {
    stamp: u64,
    spec: RecvSpec,
    recv: R,
}

#[derive(Clone, Debug)]
struct Unexpected<A> {
    stamp: u64,
    spec: ArrivalSpec,
    payload: A,
}

impl<R, A> Default for Matcher<R, A> {
    fn default() -> Self {
        Matcher::new()
    }
}

const fn queue(class: MsgClass) -> usize {
    match class {
        MsgClass::Msg => 0,
        MsgClass::Tagged => 1,
    }
}

impl<R, A> Matcher<R, A> {
    /// Empty queues.
    pub fn new() -> Self {
        Matcher {
            stamp: 0,
            posted: [VecDeque::new(), VecDeque::new()],
            unexpected: [VecDeque::new(), VecDeque::new()],
        }
    }

    fn next_stamp(&mut self) -> u64 {
        let s = self.stamp;
        self.stamp = s.wrapping_add(1);
        s
    }

    /// Posts a receive. If an unexpected message matches, the oldest one
    /// is removed and returned with the receive; otherwise the receive is
    /// queued and `None` returned.
    pub fn post(&mut self, spec: RecvSpec, recv: R) -> Option<(R, ArrivalSpec, A)> {
        let q = &mut self.unexpected[queue(spec.class)];
        if let Some(i) = q.iter().position(|u| spec.matches(&u.spec)) {
            return q.remove(i).map(|u| (recv, u.spec, u.payload));
        }
        let stamp = self.next_stamp();
        self.posted[queue(spec.class)].push_back(Posted { stamp, spec, recv });
        None
    }

    /// A message arrives. If a posted receive matches, the oldest one is
    /// removed and returned with the payload; otherwise the message is
    /// queued as unexpected and `None` returned.
    pub fn arrive(&mut self, spec: ArrivalSpec, payload: A) -> Option<(R, RecvSpec, A)> {
        let q = &mut self.posted[queue(spec.class)];
        if let Some(i) = q.iter().position(|p| p.spec.matches(&spec)) {
            return q.remove(i).map(|p| (p.recv, p.spec, payload));
        }
        let stamp = self.next_stamp();
        self.unexpected[queue(spec.class)].push_back(Unexpected {
            stamp,
            spec,
            payload,
        });
        None
    }

    /// The receive a message with `spec` would match, if one is posted: the
    /// oldest matching one is removed and returned, as
    /// [`arrive`](Self::arrive) would; otherwise nothing changes (the
    /// caller keeps the message, e.g. to queue it with `arrive` later).
    ///
    /// ```
    /// use psmrail::mrail::core::matcher::{ArrivalSpec, Matcher, RecvSpec};
    ///
    /// let mut m: Matcher<u32, ()> = Matcher::new();
    /// assert!(m.take_posted(&ArrivalSpec::tagged(5, 0)).is_none());
    /// assert_eq!(m.unexpected_len(), 0);
    /// m.post(RecvSpec::tagged(5, 0, None), 10);
    /// assert_eq!(m.take_posted(&ArrivalSpec::tagged(5, 0)).map(|(r, _)| r), Some(10));
    /// assert_eq!(m.posted_len(), 0);
    /// ```
    pub fn take_posted(&mut self, spec: &ArrivalSpec) -> Option<(R, RecvSpec)> {
        let q = &mut self.posted[queue(spec.class)];
        let i = q.iter().position(|p| p.spec.matches(spec))?;
        q.remove(i).map(|p| (p.recv, p.spec))
    }

    /// Removes the first posted receive (in posting order, both classes)
    /// for which `pred` holds.
    ///
    /// ```
    /// use psmrail::mrail::core::matcher::{Matcher, RecvSpec};
    ///
    /// let mut m: Matcher<u32, ()> = Matcher::new();
    /// m.post(RecvSpec::tagged(1, 0, None), 10);
    /// m.post(RecvSpec::msg(None), 11);
    /// assert_eq!(m.cancel(|&r| r > 9).map(|(_, r)| r), Some(10));
    /// assert_eq!(m.cancel(|&r| r == 10), None);
    /// ```
    pub fn cancel(&mut self, mut pred: impl FnMut(&R) -> bool) -> Option<(RecvSpec, R)> {
        let mut best: Option<(usize, usize, u64)> = None;
        for (qi, q) in self.posted.iter().enumerate() {
            if let Some(i) = q.iter().position(|p| pred(&p.recv)) {
                let stamp = q[i].stamp;
                if best.is_none_or(|(_, _, s)| stamp < s) {
                    best = Some((qi, i, stamp));
                }
            }
        }
        let (qi, i, _) = best?;
        self.posted[qi].remove(i).map(|p| (p.spec, p.recv))
    }

    /// The oldest unexpected message `spec` would take, left in place.
    pub fn peek(&self, spec: &RecvSpec) -> Option<(&ArrivalSpec, &A)> {
        self.unexpected[queue(spec.class)]
            .iter()
            .find(|u| spec.matches(&u.spec))
            .map(|u| (&u.spec, &u.payload))
    }

    /// Takes the oldest unexpected message `spec` would take (the one
    /// [`peek`](Self::peek) shows) off its queue, as a receive would,
    /// without posting one: a claim (`FI_PEEK | FI_CLAIM`).
    ///
    /// ```
    /// use psmrail::mrail::core::matcher::{ArrivalSpec, Matcher, RecvSpec};
    ///
    /// let mut m: Matcher<(), u8> = Matcher::new();
    /// m.arrive(ArrivalSpec::tagged(7, 1), 10);
    /// m.arrive(ArrivalSpec::tagged(7, 2), 20);
    /// let from_2 = RecvSpec::tagged(7, 0, Some(2));
    /// assert_eq!(m.claim(&from_2).map(|(_, p)| p), Some(20));
    /// assert!(m.claim(&from_2).is_none());
    /// assert_eq!(m.unexpected_len(), 1);
    /// ```
    pub fn claim(&mut self, spec: &RecvSpec) -> Option<(ArrivalSpec, A)> {
        let q = &mut self.unexpected[queue(spec.class)];
        let i = q.iter().position(|u| spec.matches(&u.spec))?;
        q.remove(i).map(|u| (u.spec, u.payload))
    }

    /// Removes every unexpected message for which `pred` holds (e.g. a
    /// departed peer's) and returns them in arrival order.
    ///
    /// ```
    /// use psmrail::mrail::core::matcher::{ArrivalSpec, Matcher};
    ///
    /// let mut m: Matcher<(), u8> = Matcher::new();
    /// m.arrive(ArrivalSpec::msg(1), 0);
    /// m.arrive(ArrivalSpec::tagged(9, 2), 1);
    /// m.arrive(ArrivalSpec::tagged(9, 1), 2);
    /// let gone: Vec<u8> = m.take_unexpected(|a, _| a.source == 1).into_iter().map(|(_, p)| p).collect();
    /// assert_eq!((gone, m.unexpected_len()), (vec![0, 2], 1));
    /// ```
    pub fn take_unexpected(
        &mut self,
        mut pred: impl FnMut(&ArrivalSpec, &A) -> bool,
    ) -> Vec<(ArrivalSpec, A)> {
        let mut taken: Vec<Unexpected<A>> = Vec::new();
        for q in &mut self.unexpected {
            // Rotate the queue once, keeping its capacity.
            for _ in 0..q.len() {
                let Some(u) = q.pop_front() else { break };
                if pred(&u.spec, &u.payload) {
                    taken.push(u);
                } else {
                    q.push_back(u);
                }
            }
        }
        taken.sort_by_key(|u| u.stamp);
        taken.into_iter().map(|u| (u.spec, u.payload)).collect()
    }

    /// The number of posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted.iter().map(VecDeque::len).sum()
    }

    /// The number of unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.iter().map(VecDeque::len).sum()
    }

    /// The unexpected messages, untagged ones first, each class in
    /// arrival order.
    ///
    /// ```
    /// use psmrail::mrail::core::matcher::{ArrivalSpec, Matcher};
    ///
    /// let mut m: Matcher<(), usize> = Matcher::new();
    /// m.arrive(ArrivalSpec::tagged(1, 0), 10);
    /// m.arrive(ArrivalSpec::msg(0), 20);
    /// let sizes: Vec<usize> = m.unexpected().map(|(_, p)| *p).collect();
    /// assert_eq!(sizes, [20, 10]);
    /// ```
    pub fn unexpected(&self) -> impl Iterator<Item = (&ArrivalSpec, &A)> {
        self.unexpected
            .iter()
            .flat_map(|q| q.iter().map(|u| (&u.spec, &u.payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn msg_ignores_tags_and_classes_do_not_mix() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        assert!(m.arrive(ArrivalSpec::tagged(1, 0), 100).is_none());
        let mut any_msg = RecvSpec::msg(None);
        any_msg.tag = 55;
        assert!(m.post(any_msg, 1).is_none());
        let got = m.arrive(
            ArrivalSpec {
                class: MsgClass::Msg,
                tag: 77,
                source: 4,
            },
            200,
        );
        assert_eq!(got.map(|(r, _, a)| (r, a)), Some((1, 200)));
        assert_eq!(
            m.peek(&RecvSpec::tagged(1, 0, Some(0)))
                .map(|(s, &a)| (s.tag, a)),
            Some((1, 100))
        );
        assert!(m.peek(&RecvSpec::tagged(1, 0, Some(1))).is_none());
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn oldest_first() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        m.post(RecvSpec::tagged(0, u64::MAX, None), 1);
        m.post(RecvSpec::tagged(5, 0, None), 2);
        let (r, _, _) = m.arrive(ArrivalSpec::tagged(5, 0), 0).unwrap();
        assert_eq!(r, 1);
        m.arrive(ArrivalSpec::tagged(6, 0), 10);
        m.arrive(ArrivalSpec::tagged(6, 1), 11);
        let (_, a, p) = m.post(RecvSpec::tagged(6, 0, None), 3).unwrap();
        assert_eq!((a.source, p), (0, 10));
        assert_eq!(m.cancel(|_| true), Some((RecvSpec::tagged(5, 0, None), 2)));
        assert_eq!(m.posted_len(), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Post(RecvSpec),
        Arrive(ArrivalSpec),
        Cancel(u32),
        Peek(RecvSpec),
        TakeFrom(u32),
    }

    fn class() -> impl Strategy<Value = MsgClass> {
        prop_oneof![Just(MsgClass::Msg), Just(MsgClass::Tagged)]
    }

    fn recv() -> impl Strategy<Value = RecvSpec> {
        (
            class(),
            0u64..4,
            prop_oneof![Just(0u64), Just(1), Just(u64::MAX)],
            proptest::option::of(0u32..3),
        )
            .prop_map(|(class, tag, ignore, source)| RecvSpec {
                class,
                tag,
                ignore,
                source,
            })
    }

    fn op() -> impl Strategy<Value = Op> {
        let arrival = (class(), 0u64..4, 0u32..3).prop_map(|(class, tag, source)| ArrivalSpec {
            class,
            tag,
            source,
        });
        prop_oneof![
            3 => recv().prop_map(Op::Post),
            3 => arrival.prop_map(Op::Arrive),
            1 => (0u32..8).prop_map(Op::Cancel),
            1 => recv().prop_map(Op::Peek),
            1 => (0u32..3).prop_map(Op::TakeFrom),
        ]
    }

    /// The reference: two vectors scanned front to back.
    #[derive(Default)]
    struct Model {
        posted: Vec<(RecvSpec, u32)>,
        unexpected: Vec<(ArrivalSpec, u32)>,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn matches_the_reference(ops in proptest::collection::vec(op(), 0..80)) {
            let mut m: Matcher<u32, u32> = Matcher::new();
            let mut model = Model::default();
            for (id, op) in (0u32..).zip(ops) {
                match op {
                    Op::Post(spec) => {
                        let got = m.post(spec, id);
                        let want = model
                            .unexpected
                            .iter()
                            .position(|(a, _)| spec.matches(a))
                            .map(|i| {
                                let (a, p) = model.unexpected.remove(i);
                                (id, a, p)
                            });
                        if want.is_none() {
                            model.posted.push((spec, id));
                        }
                        prop_assert_eq!(got, want);
                    }
                    Op::Arrive(spec) => {
                        let got = m.arrive(spec, id);
                        let want = model
                            .posted
                            .iter()
                            .position(|(r, _)| r.matches(&spec))
                            .map(|i| {
                                let (r, recv) = model.posted.remove(i);
                                (recv, r, id)
                            });
                        if want.is_none() {
                            model.unexpected.push((spec, id));
                        }
                        prop_assert_eq!(got, want);
                    }
                    Op::Cancel(k) => {
                        let got = m.cancel(|&r| r % 8 == k);
                        let want = model
                            .posted
                            .iter()
                            .position(|&(_, r)| r % 8 == k)
                            .map(|i| model.posted.remove(i));
                        prop_assert_eq!(got, want);
                    }
                    Op::Peek(spec) => {
                        let got = m.peek(&spec).map(|(a, &p)| (*a, p));
                        let want = model
                            .unexpected
                            .iter()
                            .find(|(a, _)| spec.matches(a))
                            .copied();
                        prop_assert_eq!(got, want);
                    }
                    Op::TakeFrom(source) => {
                        let got = m.take_unexpected(|a, _| a.source == source);
                        let (want, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut model.unexpected)
                            .into_iter()
                            .partition(|(a, _)| a.source == source);
                        model.unexpected = kept;
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(m.posted_len(), model.posted.len());
                prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
            }
        }
    }
}
