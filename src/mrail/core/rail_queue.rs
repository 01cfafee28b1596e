//! [`PartQueue`]: the sender's parts waiting for their rails, fed to each
//! rail a few at a time.
//!
//! A rail's engine serves the transfers posted on one connection side by
//! side, in interleaved chunks; were every part of a window of messages
//! posted at once, every one of them would finish near the end of the
//! window, and nothing would say how fast the rail is until then. The
//! sender therefore keeps each rail's parts here, in the order their
//! messages' answers came, and posts the next one when the rail has fewer
//! than [`MIN_IN_FLIGHT`] parts and less than [`IN_FLIGHT_BYTES`] in
//! flight. The rail stays busy (the next part's rendezvous hand-off
//! overlaps the parts still moving), its parts finish one after the
//! other, and each finished part teaches its rate
//! ([`rail_load`](super::rail_load)): from the first megabytes of traffic,
//! not the first whole window. Messages also finish in the order they
//! were answered instead of all together.
//!
//! Entries are only names (a transfer id and a part); the owner says which
//! are still wanted when it takes one ([`PartQueue::next`]), so a transfer
//! that ended or a part sent elsewhere meanwhile costs nothing to forget.
//! No clock, no I/O.

use std::collections::VecDeque;

/// Parts a rail always may have in flight, whatever their size. One: a
/// rail's parts then finish one after the other, each a clean sample of
/// its rate, and the next part's hand-off (its rendezvous request behind
/// the bytes still in the socket buffers, the answer) costs about a round
/// trip, a small share of a part of [`PART_TARGET`](super::stripe::PART_TARGET).
pub const MIN_IN_FLIGHT: u32 = 1;

/// Bytes a rail may have in flight beyond [`MIN_IN_FLIGHT`] parts: smaller
/// parts go several at a time, so that their hand-offs overlap.
pub const IN_FLIGHT_BYTES: u64 = 2 << 20;

/// Parts smaller than this are not queued: their message's parts go at
/// once. Each is too short to teach a rate, and queueing them costs more
/// than they take on the wire (a 64 KiB message over 4 rails is four
/// 16 KiB parts, 34 us each at 1 Gbit/s).
pub const QUEUE_FROM: u64 = 256 << 10;

/// A part waiting for its rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedPart {
    /// The owner's id of the transfer.
    pub xfer: u64,
    /// The part number.
    pub part: u8,
    /// The part's length.
    pub len: u64,
}

/// The parts waiting for each rail, in order.
///
/// ```
/// use psmrail::mrail::core::rail_queue::{PartQueue, QueuedPart};
///
/// let mut q = PartQueue::new(1);
/// for part in 0..4 {
///     q.push(0, QueuedPart { xfer: 7, part, len: 1 << 20 });
/// }
/// // Nothing in flight: the first part may go; with 1 MiB in flight, a
/// // second fits in the byte budget; with 2 MiB, it waits.
/// assert_eq!(q.next(0, (0, 0), |_| true).map(|p| p.part), Some(0));
/// assert_eq!(q.next(0, (1, 1 << 20), |_| true).map(|p| p.part), Some(1));
/// assert_eq!(q.next(0, (2, 2 << 20), |_| true), None);
/// // Parts no longer wanted are dropped on the way.
/// assert_eq!(q.next(0, (0, 0), |p| p.part == 3).map(|p| p.part), Some(3));
/// assert!(q.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct PartQueue {
    rails: Vec<VecDeque<QueuedPart>>,
}

/// Whether a rail with `parts` parts and `bytes` bytes in flight may take
/// a part of `len` bytes.
pub fn may_post(parts: u32, bytes: u64, len: u64) -> bool {
    parts < MIN_IN_FLIGHT || bytes.saturating_add(len) <= IN_FLIGHT_BYTES
}

impl PartQueue {
    /// Empty queues for `rails` rails.
    pub fn new(rails: usize) -> PartQueue {
        PartQueue {
            rails: (0..rails).map(|_| VecDeque::new()).collect(),
        }
    }

    /// Queues `part` behind the others on `rail` (a rail beyond the queues
    /// is ignored).
    pub fn push(&mut self, rail: usize, part: QueuedPart) {
        if let Some(q) = self.rails.get_mut(rail) {
            q.push_back(part);
        }
    }

    /// The next part `rail` should post now that it has `(parts, bytes)`
    /// in flight, taken off its queue: the first one `wanted` says is
    /// still wanted (the others before it are dropped), if the rail has
    /// room for it ([`may_post`]).
    pub fn next(
        &mut self,
        rail: usize,
        (parts, bytes): (u32, u64),
        mut wanted: impl FnMut(&QueuedPart) -> bool,
    ) -> Option<QueuedPart> {
        let q = self.rails.get_mut(rail)?;
        while let Some(p) = q.front() {
            if !wanted(p) {
                q.pop_front();
                continue;
            }
            if !may_post(parts, bytes, p.len) {
                return None;
            }
            return q.pop_front();
        }
        None
    }

    /// A part for `thief`, whose own queue is empty, from the back of
    /// another rail's queue (the part that rail would reach last): the
    /// rail with the most parts queued that `wanted` accepts for `thief`,
    /// and of its parts the last one `wanted` says may go to `thief`. The
    /// rail it came from, and the part, taken off that queue; parts no
    /// longer wanted at all (`wanted` gives `None`) are dropped on the
    /// way.
    ///
    /// `wanted(from, part)`: `None` when the part is no longer wanted,
    /// `Some(false)` when it may not go to `thief`, `Some(true)` when it
    /// may.
    ///
    /// ```
    /// use psmrail::mrail::core::rail_queue::{PartQueue, QueuedPart};
    ///
    /// let mut q = PartQueue::new(3);
    /// for part in 0..3 {
    ///     q.push(1, QueuedPart { xfer: 1, part, len: 10 });
    /// }
    /// q.push(2, QueuedPart { xfer: 2, part: 0, len: 10 });
    /// let (from, p) = q.steal(0, |_, _| Some(true)).unwrap();
    /// assert_eq!((from, p.part), (1, 2));
    /// // Nothing for a rail whose own queue holds a wanted part.
    /// assert!(q.steal(2, |_, _| Some(true)).is_none());
    /// ```
    pub fn steal(
        &mut self,
        thief: usize,
        mut wanted: impl FnMut(usize, &QueuedPart) -> Option<bool>,
    ) -> Option<(usize, QueuedPart)> {
        let own = self.rails.get_mut(thief)?;
        own.retain(|p| wanted(thief, p).is_some());
        if !own.is_empty() {
            return None;
        }
        let mut best: Option<(usize, usize, usize)> = None;
        for (rail, q) in self.rails.iter_mut().enumerate() {
            if rail == thief {
                continue;
            }
            q.retain(|p| wanted(rail, p).is_some());
            let Some(at) = q.iter().rposition(|p| wanted(rail, p) == Some(true)) else {
                continue;
            };
            if best.is_none_or(|(_, _, n)| q.len() > n) {
                best = Some((rail, at, q.len()));
            }
        }
        let (rail, at, _) = best?;
        let part = self.rails[rail].remove(at)?;
        Some((rail, part))
    }

    /// The parts queued on `rail` (wanted or not).
    pub fn queued(&self, rail: usize) -> usize {
        self.rails.get(rail).map_or(0, VecDeque::len)
    }

    /// Whether no rail has a part queued.
    pub fn is_empty(&self) -> bool {
        self.rails.iter().all(VecDeque::is_empty)
    }

    /// The rails with parts queued, as a mask (rails 0 to 63).
    pub fn waiting(&self) -> u64 {
        self.rails
            .iter()
            .enumerate()
            .take(64)
            .filter(|(_, q)| !q.is_empty())
            .fold(0, |m, (r, _)| m | 1 << r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(xfer: u64, part: u8, len: u64) -> QueuedPart {
        QueuedPart { xfer, part, len }
    }

    #[test]
    fn large_parts_go_one_at_a_time_small_ones_by_bytes() {
        assert!(may_post(0, 0, u64::MAX));
        assert!(!may_post(1, 4 << 20, 4 << 20));
        assert!(may_post(1, 1 << 20, 1 << 20));
        assert!(!may_post(1, 1 << 20, (1 << 20) + 1));
        assert!(may_post(31, 0, 64 << 10));
    }

    #[test]
    fn an_idle_rail_takes_the_last_part_of_the_longest_queue() {
        let mut q = PartQueue::new(3);
        for k in 0..4 {
            q.push(1, part(1, k, 10));
        }
        q.push(2, part(2, 0, 10));
        q.push(2, part(2, 1, 10));
        // Parts of transfer 1 may not go to rail 0 from part 3 on.
        let ok = |_: usize, p: &QueuedPart| Some(!(p.xfer == 1 && p.part == 3));
        assert_eq!(q.steal(0, ok), Some((1, part(1, 2, 10))));
        assert_eq!(q.steal(0, ok), Some((1, part(1, 1, 10))));
        // Rail 1 now holds 2 parts, rail 2 too: the first longest wins.
        assert_eq!(q.steal(0, ok), Some((1, part(1, 0, 10))));
        assert_eq!(q.steal(0, ok), Some((2, part(2, 1, 10))));
        // Unwanted parts leave every queue on the way.
        assert_eq!(q.steal(0, |_, p| (p.xfer == 1).then_some(false)), None);
        assert_eq!((q.queued(1), q.queued(2)), (1, 0));
        assert_eq!(q.steal(9, ok), None);
    }

    #[test]
    fn each_rail_keeps_its_order_and_unknown_rails_are_ignored() {
        let mut q = PartQueue::new(2);
        q.push(1, part(1, 0, 10));
        q.push(0, part(1, 1, 10));
        q.push(1, part(2, 0, 10));
        q.push(5, part(3, 0, 10));
        assert_eq!((q.queued(0), q.queued(1), q.queued(5)), (1, 2, 0));
        assert_eq!(q.waiting(), 0b11);
        assert_eq!(q.next(1, (0, 0), |_| true), Some(part(1, 0, 10)));
        assert_eq!(q.next(1, (0, 0), |_| true), Some(part(2, 0, 10)));
        assert_eq!(q.next(1, (0, 0), |_| true), None);
        assert_eq!(q.next(7, (0, 0), |_| true), None);
        assert_eq!(q.waiting(), 0b01);
        // A part that waits for room stays at the head.
        q.push(0, part(4, 0, 8 << 20));
        assert_eq!(q.next(0, (1, 0), |p| p.xfer == 4), None);
        assert_eq!(q.queued(0), 1, "the unwanted part before it went");
        assert_eq!(q.next(0, (0, 0), |_| true), Some(part(4, 0, 8 << 20)));
        assert!(q.is_empty());
    }
}
