//! [`ReceiveCursor`]: how far a receiver has consumed a numbered stream,
//! so that what a sender sends again is taken once.

/// What a receiver does with a range that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accept {
    /// New from its start after skipping `skip` positions it already has.
    Fresh {
        /// Positions at the start of the range that arrived before.
        skip: u64,
    },
    /// Every position of it arrived before: drop it.
    Duplicate,
    /// It starts beyond what was consumed: something before it is
    /// missing.
    Gap {
        /// The first position missing.
        expected: u64,
    },
}

/// The position up to which a stream was consumed.
///
/// ```
/// use psmrail::resend::{Accept, ReceiveCursor};
///
/// let mut rx = ReceiveCursor::default();
/// assert_eq!(rx.accept(0, 10), Accept::Fresh { skip: 0 });
/// // Sent again after a path broke: the first 10 positions are known.
/// assert_eq!(rx.accept(0, 10), Accept::Duplicate);
/// assert_eq!(rx.accept(5, 10), Accept::Fresh { skip: 5 });
/// assert_eq!(rx.next(), 15);
/// assert_eq!(rx.accept(20, 1), Accept::Gap { expected: 15 });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveCursor {
    next: u64,
}

impl ReceiveCursor {
    /// A cursor at position `next`.
    pub fn at(next: u64) -> Self {
        ReceiveCursor { next }
    }

    /// The first position not consumed yet (what to acknowledge).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Takes the range of `len` positions starting at `start`: advances
    /// over what is new, and says what to keep of it.
    pub fn accept(&mut self, start: u64, len: u64) -> Accept {
        if start > self.next {
            return Accept::Gap {
                expected: self.next,
            };
        }
        let end = start.saturating_add(len);
        if end <= self.next && len > 0 {
            return Accept::Duplicate;
        }
        let skip = self.next - start;
        self.next = end.max(self.next);
        Accept::Fresh { skip }
    }

    /// Consumes `len` positions in order (a stream that cannot repeat).
    pub fn advance(&mut self, len: u64) {
        self.next = self.next.saturating_add(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_taken_once_in_order() {
        let mut rx = ReceiveCursor::at(7);
        assert_eq!(rx.accept(6, 1), Accept::Duplicate);
        assert_eq!(rx.accept(7, 1), Accept::Fresh { skip: 0 });
        assert_eq!(rx.accept(9, 1), Accept::Gap { expected: 8 });
        rx.advance(2);
        assert_eq!(rx.next(), 10);
        assert_eq!(rx.accept(u64::MAX, 1), Accept::Gap { expected: 10 });
    }
}
