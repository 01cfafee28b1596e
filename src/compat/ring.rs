//! A fixed number of pinned future slots used as a FIFO queue: the
//! operations a channel keeps in flight, polled oldest first.
//!
//! The slots are pinned once, when the ring is made, and futures are set
//! into them in place, so a future need not be `Unpin` and keeping an
//! operation in flight allocates nothing.

use std::future::Future;
use std::pin::Pin;

/// Up to `capacity` futures in FIFO order, in slots pinned once.
pub(crate) struct Ring<F> {
    slots: Vec<Pin<Box<Option<F>>>>,
    head: usize,
    len: usize,
}

impl<F: Future> Ring<F> {
    /// An empty ring of `capacity` slots (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Ring {
            slots: (0..capacity).map(|_| Box::pin(None)).collect(),
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Puts `fut` at the back; hands it back when the ring is full.
    pub(crate) fn push(&mut self, fut: F) -> Result<(), F> {
        if self.is_full() {
            return Err(fut);
        }
        let i = (self.head + self.len) % self.slots.len();
        self.slots[i].as_mut().set(Some(fut));
        self.len += 1;
        Ok(())
    }

    /// The oldest future, pinned.
    pub(crate) fn front(&mut self) -> Option<Pin<&mut F>> {
        if self.len == 0 {
            return None;
        }
        self.slots[self.head].as_mut().as_pin_mut()
    }

    /// Drops the oldest future.
    pub(crate) fn pop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.slots[self.head].as_mut().set(None);
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
    }

    /// Drops every future, oldest first.
    pub(crate) fn clear(&mut self) {
        while self.len > 0 {
            self.pop_front();
        }
    }
}

impl<F> std::fmt::Debug for Ring<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.slots.len())
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::{ready, Ready};
    use std::task::{Context, Poll, Waker};

    #[test]
    fn fifo_order_and_capacity() {
        let mut r: Ring<Ready<u32>> = Ring::new(2);
        assert!(r.push(ready(1)).is_ok());
        assert!(r.push(ready(2)).is_ok());
        assert!(r.push(ready(3)).is_err());
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(r.front().map(|f| f.poll(&mut cx)), Some(Poll::Ready(1)));
        r.pop_front();
        assert!(r.push(ready(3)).is_ok());
        assert_eq!(r.front().map(|f| f.poll(&mut cx)), Some(Poll::Ready(2)));
        r.pop_front();
        assert_eq!(r.front().map(|f| f.poll(&mut cx)), Some(Poll::Ready(3)));
        r.clear();
        assert_eq!(r.len(), 0);
        assert!(r.front().is_none());
        r.pop_front();
        assert_eq!(r.len(), 0);
    }
}
