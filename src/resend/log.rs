//! [`ResendLog`]: the items a sender sent and its peer has not
//! acknowledged yet, by position.

use std::collections::VecDeque;

/// Why an acknowledgement or a resume point was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// The peer acknowledged more than was sent.
    #[error("acknowledged up to {got}, but only {sent} was sent")]
    Ahead {
        /// The position acknowledged.
        got: u64,
        /// The end of what was sent.
        sent: u64,
    },
    /// The peer asked for what it had acknowledged already (and the log
    /// no longer holds).
    #[error("position {got} was acknowledged already (the log starts at {acked})")]
    Behind {
        /// The position asked for.
        got: u64,
        /// Where the log starts.
        acked: u64,
    },
}

/// Items sent and not yet acknowledged, each covering `len` positions of
/// a stream (bytes, or messages with a length of 1), from the oldest.
///
/// Acknowledgements are cumulative: `ack(p)` says the peer has everything
/// before position `p`. Items wholly before it are released; an item `p`
/// falls inside stays, and [`replay`](Self::replay) starts within it.
///
/// ```
/// use psmrail::resend::ResendLog;
///
/// let mut log = ResendLog::new();
/// log.push(10, "first ten bytes");
/// log.push(5, "five more");
/// assert_eq!(log.end(), 15);
///
/// // The peer has 12 bytes: the first item goes, the second stays.
/// let released: Vec<_> = log.ack(12).unwrap().collect();
/// assert_eq!(released, [(10, "first ten bytes")]);
///
/// // A new path resumes where the peer stands, 13: three bytes into the
/// // second item, whose last two go again.
/// let again: Vec<_> = log.replay(13).unwrap().collect();
/// assert_eq!(again, [(3, 2, &"five more")]);
/// ```
#[derive(Debug)]
pub struct ResendLog<T> {
    /// Items with the position each starts at.
    items: VecDeque<(u64, u64, T)>,
    /// Everything before this position is acknowledged.
    acked: u64,
    /// The position after the last item.
    end: u64,
}

impl<T> Default for ResendLog<T> {
    fn default() -> Self {
        ResendLog::new()
    }
}

impl<T> ResendLog<T> {
    /// An empty log at position 0.
    pub fn new() -> Self {
        ResendLog {
            items: VecDeque::new(),
            acked: 0,
            end: 0,
        }
    }

    /// Appends an item covering `len` positions; the position it starts
    /// at. Items of length 0 take no position and are released with the
    /// first acknowledgement that reaches them.
    pub fn push(&mut self, len: u64, item: T) -> u64 {
        let start = self.end;
        self.end += len;
        self.items.push_back((start, len, item));
        start
    }

    /// The position after the last item sent.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Everything before this is acknowledged.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Positions sent and not acknowledged.
    pub fn unacked(&self) -> u64 {
        self.end - self.acked
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Gives back what the log holds beyond 4 times its items (and a
    /// few dozen).
    pub fn release_memory(&mut self) {
        if self.items.capacity() > 4 * self.items.len() + 64 {
            self.items.shrink_to_fit();
        }
    }

    /// The items held, oldest first, each with the position it starts
    /// at and its length.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &T)> {
        self.items.iter().map(|(start, len, t)| (*start, *len, t))
    }

    /// The peer has everything before `upto`: releases the items wholly
    /// before it (returned with their lengths, oldest first). An acknowledgement older than
    /// the last one releases nothing; one beyond what was sent is an
    /// error and changes nothing.
    pub fn ack(&mut self, upto: u64) -> Result<impl Iterator<Item = (u64, T)> + '_, AckError> {
        if upto > self.end {
            return Err(AckError::Ahead {
                got: upto,
                sent: self.end,
            });
        }
        self.acked = self.acked.max(upto);
        let acked = self.acked;
        let done = self
            .items
            .iter()
            .take_while(|(start, len, _)| start + len <= acked && (*len > 0 || *start < acked))
            .count();
        Ok(self.items.drain(..done).map(|(_, len, t)| (len, t)))
    }

    /// What to send again for a peer that has everything before `from`:
    /// for each item from there on, how many of its positions to skip,
    /// how many to send, and the item. `from` must lie between the last
    /// acknowledgement and the end.
    pub fn replay(&self, from: u64) -> Result<impl Iterator<Item = (u64, u64, &T)>, AckError> {
        if from > self.end {
            return Err(AckError::Ahead {
                got: from,
                sent: self.end,
            });
        }
        if from < self.acked {
            return Err(AckError::Behind {
                got: from,
                acked: self.acked,
            });
        }
        Ok(self
            .items
            .iter()
            .filter(move |(start, len, _)| start + len > from)
            .map(move |(start, len, t)| {
                let skip = from.saturating_sub(*start);
                (skip, len - skip, t)
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn acks_release_whole_items_and_refuse_the_future() {
        let mut log = ResendLog::new();
        assert_eq!(log.push(4, 'a'), 0);
        assert_eq!(log.push(4, 'b'), 4);
        assert_eq!(log.push(4, 'c'), 8);
        assert_eq!(
            log.ack(13).err(),
            Some(AckError::Ahead { got: 13, sent: 12 })
        );
        assert_eq!(log.len(), 3, "a refused ack changes nothing");
        assert_eq!(log.ack(5).unwrap().collect::<Vec<_>>(), [(4, 'a')]);
        // An older ack is no error and releases nothing.
        assert_eq!(log.ack(2).unwrap().count(), 0);
        assert_eq!(log.acked(), 5);
        assert_eq!(log.unacked(), 7);
        assert_eq!(
            log.ack(12).unwrap().collect::<Vec<_>>(),
            [(4, 'b'), (4, 'c')]
        );
        assert!(log.is_empty());
    }

    #[test]
    fn replay_starts_inside_an_item_and_refuses_the_past() {
        let mut log = ResendLog::new();
        log.push(10, 'a');
        log.push(10, 'b');
        let _ = log.ack(4).unwrap().count();
        assert_eq!(
            log.replay(3).err(),
            Some(AckError::Behind { got: 3, acked: 4 })
        );
        assert_eq!(
            log.replay(7).unwrap().collect::<Vec<_>>(),
            [(7, 3, &'a'), (0, 10, &'b')]
        );
        assert_eq!(log.replay(20).unwrap().count(), 0);
        assert!(log.replay(21).is_err());
    }

    #[test]
    fn messages_are_items_of_length_one() {
        let mut log = ResendLog::new();
        for m in ["m0", "m1", "m2"] {
            log.push(1, m);
        }
        assert_eq!(log.ack(1).unwrap().collect::<Vec<_>>(), [(1, "m0")]);
        let again: Vec<_> = log.replay(1).unwrap().map(|(_, _, m)| *m).collect();
        assert_eq!(again, ["m1", "m2"]);
    }

    proptest! {
        /// Whatever the acknowledgements, replaying from any valid point
        /// gives back exactly the positions from there to the end.
        #[test]
        fn replay_covers_the_rest_exactly(
            lens in proptest::collection::vec(0u64..50, 0..20),
            acks in proptest::collection::vec(0u64..1200, 0..6),
            from_frac in 0.0f64..=1.0,
        ) {
            let mut log = ResendLog::new();
            for (i, len) in lens.iter().enumerate() {
                log.push(*len, i);
            }
            for a in acks {
                let _ = log.ack(a).map(|it| it.count());
            }
            let from = log.acked() + ((log.end() - log.acked()) as f64 * from_frac) as u64;
            let total: u64 = log.replay(from).unwrap().map(|(_, n, _)| n).sum();
            prop_assert_eq!(total, log.end() - from);
        }
    }
}
