//! [`KeyRecycler`]: the keys of operations the manual-mode fast path
//! completed, on their way back to the endpoint's next posts.
//!
//! The fast path hands a finished request's completion straight to its
//! future, so the key's slot in the completion table never receives a
//! value: the endpoint itself must give the slot up. Freeing it
//! ([`CompletionTable::retire`]) and taking a slot for the next post
//! ([`CompletionTable::insert`]) each cost atomic read-modify-writes on the
//! table's free list, and the insert sits on the path from a message's
//! arrival to the reply it triggers (the reply's receive is posted first).
//!
//! So a spent key waits here until the endpoint is idle, and is then
//! *renewed* ([`CompletionTable::renew`]: the same slot under its next
//! generation, one compare-exchange, the free list untouched) into a small
//! stock of ready keys. The endpoint's next `isend_keyed` / `irecv_keyed`
//! takes its key from that stock under the endpoint lock it holds anyway:
//! no atomic operation at all. Keys beyond the stock, and keys `renew`
//! refuses (a waker registered on them, or a contract breach), are retired
//! as before.
//!
//! A ready key is pending in the table with no operation behind it, so an
//! idle endpoint's table holds up to [`READY_MAX`] pending keys; the
//! endpoint gives them all back ([`KeyRecycler::release_all`]) when it
//! closes and when asked how much is in flight.

use crate::reactor::{CompletionTable, OpKey};

/// Most spent keys that wait for the endpoint's next idle moment: the
/// batch is recycled at once when it is full.
pub(crate) const SPENT_MAX: usize = 32;
/// Most renewed keys kept ready for posts.
pub(crate) const READY_MAX: usize = 32;

/// Spent and ready keys of one endpoint (module docs). Not synchronized:
/// it lives under the endpoint's lock.
#[derive(Debug)]
pub(crate) struct KeyRecycler {
    /// Keys of fast-path completions: pending in the table (nobody can
    /// complete or reuse them), their operations over.
    spent: Vec<OpKey>,
    /// Renewed keys: pending in the table, no operation, not known to
    /// anyone but this endpoint.
    ready: Vec<OpKey>,
}

impl Default for KeyRecycler {
    fn default() -> Self {
        KeyRecycler {
            spent: Vec::with_capacity(SPENT_MAX),
            ready: Vec::with_capacity(READY_MAX),
        }
    }
}

impl KeyRecycler {
    /// Notes `op`, whose operation the fast path completed (it left the
    /// endpoint's books, so no harvest can complete it any more). Recycles
    /// the batch first if it is full.
    #[inline(always)]
    pub(super) fn spend<T: Send>(&mut self, table: &CompletionTable<T>, op: OpKey) {
        if self.spent.len() == SPENT_MAX {
            self.recycle_now(table);
        }
        self.spent.push(op);
    }

    /// Whether spent keys wait to be recycled.
    #[inline(always)]
    fn has_spent(&self) -> bool {
        !self.spent.is_empty()
    }

    /// Renews the spent keys into the ready stock while it has room, and
    /// retires the others. The endpoint calls this when it is idle; with
    /// nothing spent it is one length test (the work is out of line).
    #[inline(always)]
    pub(super) fn recycle<T: Send>(&mut self, table: &CompletionTable<T>) {
        if self.has_spent() {
            self.recycle_now(table);
        }
    }

    #[inline(never)]
    fn recycle_now<T: Send>(&mut self, table: &CompletionTable<T>) {
        for op in self.spent.drain(..) {
            if self.ready.len() < READY_MAX {
                if let Some(new) = table.renew(op) {
                    self.ready.push(new);
                    continue;
                }
            }
            retire(table, op);
        }
    }

    /// A key for a new post: a ready one, else a fresh one from `table`.
    /// Pending, and no operation of this endpoint is under it.
    #[inline(always)]
    pub(super) fn take<T: Send>(&mut self, table: &CompletionTable<T>) -> OpKey {
        match self.ready.pop() {
            Some(op) => op,
            None => table.insert(),
        }
    }

    /// Takes back a key from [`take`](Self::take) whose post failed (the
    /// engine never saw it): ready again.
    #[inline]
    pub(super) fn give_back(&mut self, op: OpKey) {
        self.ready.push(op);
    }

    /// Gives every spent and ready key's slot back to `table`, so that an
    /// endpoint with nothing in flight leaves its table empty.
    pub(super) fn release_all<T: Send>(&mut self, table: &CompletionTable<T>) {
        for op in self.spent.drain(..).chain(self.ready.drain(..)) {
            retire(table, op);
        }
    }
}

/// Frees `op`'s slot. No value can be there: a spent key's operation left
/// the endpoint's books before it was spent, and a ready key has none.
fn retire<T: Send>(table: &CompletionTable<T>, op: OpKey) {
    if let Some(stray) = table.retire(op) {
        debug_assert!(false, "{op:?} completed twice");
        drop(stray);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reactor::OpStatus;

    #[test]
    fn a_spent_key_comes_back_renewed_and_the_old_one_is_dead() {
        let table = CompletionTable::<u32>::new();
        let mut keys = KeyRecycler::default();
        let a = keys.take(&table);
        assert_eq!(table.status(a), OpStatus::Pending);
        keys.spend(&table, a);
        assert!(keys.has_spent());
        // Until recycled, the spent key reads pending: nobody reuses it.
        assert_eq!(table.status(a), OpStatus::Pending);
        keys.recycle(&table);
        assert!(!keys.has_spent());
        let b = keys.take(&table);
        assert_eq!(b.index(), a.index(), "the same slot");
        assert_ne!(b, a, "under a new generation");
        assert_eq!(table.status(a), OpStatus::Unknown);
        assert!(table.complete(a, 1).is_err(), "the old key is refused");
        table.complete(b, 2).unwrap();
        assert_eq!(table.try_take(b), Some(2));
        assert!(table.is_empty());
    }

    #[test]
    fn take_falls_back_to_the_table_and_give_back_keeps_a_key_ready() {
        let table = CompletionTable::<u32>::new();
        let mut keys = KeyRecycler::default();
        let a = keys.take(&table);
        let b = keys.take(&table);
        assert_ne!(a.index(), b.index());
        keys.give_back(b);
        assert_eq!(keys.take(&table), b, "the failed post's key is reused");
        keys.give_back(a);
        keys.give_back(b);
        assert_eq!(table.len(), 2);
        keys.release_all(&table);
        assert!(table.is_empty());
        assert_eq!(table.status(a), OpStatus::Unknown);
    }

    #[test]
    fn a_full_batch_recycles_and_the_stock_is_bounded() {
        let table = CompletionTable::<u32>::new();
        let mut keys = KeyRecycler::default();
        let taken: Vec<OpKey> = (0..3 * SPENT_MAX).map(|_| keys.take(&table)).collect();
        for &op in &taken {
            keys.spend(&table, op);
        }
        assert!(keys.spent.len() <= SPENT_MAX);
        keys.recycle(&table);
        assert_eq!(keys.ready.len(), READY_MAX);
        // The keys beyond the stock were retired; the stock stays pending.
        assert_eq!(table.len(), READY_MAX);
        assert_eq!(table.pending(), READY_MAX);
        for op in taken {
            assert_eq!(table.status(op), OpStatus::Unknown, "{op:?} is spent");
        }
        keys.release_all(&table);
        assert!(table.is_empty());
    }

    #[test]
    fn a_key_with_a_registered_waker_is_retired_not_renewed() {
        let table = CompletionTable::<u32>::new();
        let mut keys = KeyRecycler::default();
        let a = keys.take(&table);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(table.poll_take(a, &mut cx).is_pending());
        keys.spend(&table, a);
        keys.recycle(&table);
        assert!(
            keys.ready.is_empty(),
            "renew refuses a slot holding a waker"
        );
        assert!(table.is_empty(), "the slot was freed instead");
    }
}
