//! The in-flight table: every MQ request PSM is working on, with the
//! memory it was given.
//!
//! **Context routing.** A request is posted with the operation's
//! [`OpKey`] as PSM's per-request `void *context`. When `psm_mq_ipeek`
//! reports a finished request, its status carries that context back; the
//! key's slot index locates the entry here and the entry's request handle
//! confirms it (a context that does not name the peeked request is not
//! ours). The entry then goes, with its [`OpBuffer`], into the completion
//! table under the same key.
//!
//! **No allocation per operation.** Entries live in a vector indexed by the
//! key's slot index. Keys come from the endpoint's
//! [`CompletionTable`](crate::reactor::CompletionTable), which recycles its
//! slots, so the vector grows to the largest number of operations ever in
//! flight at once and is reused from then on. A key is only accepted while
//! it is pending in that table, which bounds the index by the table's
//! capacity (a forged key cannot make the vector grow).

use super::raw::Req;
use crate::engine::OpBuffer;
use crate::reactor::OpKey;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A tagged send.
    Send,
    /// A tagged receive.
    Recv,
    /// A tagged receive on which `psm_mq_cancel` succeeded (it completes
    /// without data).
    CancelledRecv,
}

/// One request PSM is working on.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The key its completion goes to (also its PSM context).
    pub key: OpKey,
    /// PSM's handle.
    pub req: Req,
    /// The tag sent (sends) or matched on (receives).
    pub tag: u64,
    /// Send or receive.
    pub kind: OpKind,
    /// The memory PSM reads (sends) or writes (receives).
    pub buffer: OpBuffer,
}

/// The live requests of one endpoint, by the slot index of their key.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    slots: Vec<Option<Entry>>,
    live: usize,
}

impl InFlight {
    /// PSM's context for `key`.
    #[inline]
    pub(super) fn context(key: OpKey) -> usize {
        key.to_u64() as usize
    }

    /// The slot index a context (or key) names.
    #[inline]
    fn index_of(context: usize) -> usize {
        context as u32 as usize
    }

    /// Number of live requests.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Whether nothing is in flight.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Whether `key`'s slot holds an entry (of this or another generation).
    #[inline]
    pub(super) fn slot_taken(&self, key: OpKey) -> bool {
        self.slots
            .get(Self::index_of(Self::context(key)))
            .is_some_and(Option::is_some)
    }

    /// Adds an entry. The caller checked that its key is pending in the
    /// completion table and that its slot is free.
    #[cfg(test)]
    pub(super) fn insert(&mut self, entry: Entry) {
        let slot = self.free_slot(entry.key);
        // The caller checked the slot was free: nothing to drop (and no
        // drop glue on the post path).
        std::mem::forget(slot.replace(entry));
    }

    /// Adds the entry of a post from its parts, written straight into its
    /// slot (the post path builds no entry on the stack to copy). The
    /// caller checked that its key is pending in the completion table and
    /// that its slot is free.
    #[inline(always)]
    pub(super) fn insert_parts(
        &mut self,
        key: OpKey,
        req: Req,
        tag: u64,
        kind: OpKind,
        buffer: OpBuffer,
    ) {
        let slot = self.free_slot(key);
        std::mem::forget(slot.replace(Entry {
            key,
            req,
            tag,
            kind,
            buffer,
        }));
    }

    /// The slot of `key`, grown into if needed and counted as live.
    #[inline(always)]
    fn free_slot(&mut self, key: OpKey) -> &mut Option<Entry> {
        let i = Self::index_of(Self::context(key));
        if i >= self.slots.len() {
            self.grow(i);
        }
        self.live += 1;
        let slot = &mut self.slots[i];
        debug_assert!(slot.is_none(), "in-flight slot {i} is in use");
        slot
    }

    /// Makes room for slot `i` (only while warming up).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) {
        self.slots.resize_with(i + 1, || None);
    }

    /// The entry of `key`, if live.
    #[inline]
    pub(super) fn get_mut(&mut self, key: OpKey) -> Option<&mut Entry> {
        self.slots
            .get_mut(Self::index_of(Self::context(key)))?
            .as_mut()
            .filter(|e| e.key == key)
    }

    /// Removes the entry of `key`, if live (its request finished: the fast
    /// path tested it itself).
    #[inline]
    pub(super) fn take(&mut self, key: OpKey) -> Option<Entry> {
        let slot = self.slots.get_mut(Self::index_of(Self::context(key)))?;
        if slot.as_ref().is_some_and(|e| e.key == key) {
            self.live -= 1;
            slot.take()
        } else {
            None
        }
    }

    /// Removes the entry PSM reports finished: the one whose slot the
    /// context names and whose request handle is `req`.
    #[inline]
    pub(super) fn take_finished(
        &mut self,
        context: usize,
        req: psm_sys::ffi::psm_mq_req_t,
    ) -> Option<Entry> {
        let slot = self.slots.get_mut(Self::index_of(context))?;
        if slot
            .as_ref()
            .is_some_and(|e| e.req.as_raw() == req && Self::context(e.key) == context)
        {
            self.live -= 1;
            slot.take()
        } else {
            None
        }
    }

    /// Removes every entry (the endpoint is closed: PSM is done with them).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.live = 0;
        self.slots.iter_mut().filter_map(Option::take)
    }

    /// The entries still posted, mutably (to cancel receives at close).
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Entry> + '_ {
        self.slots.iter_mut().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::MqCompletion;
    use crate::reactor::CompletionTable;

    fn entry(key: OpKey, req: usize, kind: OpKind) -> Entry {
        Entry {
            key,
            req: Req::fake(req),
            tag: 7,
            kind,
            buffer: OpBuffer::from(vec![0u8; 4]),
        }
    }

    #[test]
    fn contexts_route_to_their_entry_and_nothing_else() {
        let table = CompletionTable::<MqCompletion>::new();
        let mut ops = InFlight::default();
        let (a, b) = (table.insert(), table.insert());
        ops.insert(entry(a, 0x100, OpKind::Send));
        ops.insert(entry(b, 0x200, OpKind::Recv));
        assert_eq!(ops.len(), 2);
        assert!(ops.slot_taken(a) && ops.slot_taken(b));
        // The right slot but another request handle: not ours.
        assert!(ops
            .take_finished(
                InFlight::context(a),
                std::ptr::without_provenance_mut(0x999)
            )
            .is_none());
        // A context naming a slot of another generation: not ours.
        let stale = OpKey::from_u64(a.to_u64() + (1 << 32));
        assert!(ops
            .take_finished(
                InFlight::context(stale),
                std::ptr::without_provenance_mut(0x100)
            )
            .is_none());
        assert!(ops.get_mut(stale).is_none());
        let e = ops
            .take_finished(
                InFlight::context(a),
                std::ptr::without_provenance_mut(0x100),
            )
            .unwrap();
        assert_eq!((e.key, e.kind), (a, OpKind::Send));
        assert!(ops
            .take_finished(
                InFlight::context(a),
                std::ptr::without_provenance_mut(0x100)
            )
            .is_none());
        assert_eq!(ops.len(), 1);
        if let Some(e) = ops.get_mut(b) {
            e.kind = OpKind::CancelledRecv;
        }
        assert_eq!(ops.get_mut(b).unwrap().kind, OpKind::CancelledRecv);
        // Out-of-range contexts are nobody's.
        assert!(ops
            .take_finished(usize::MAX, std::ptr::without_provenance_mut(0x200))
            .is_none());
        // By key: only the live generation.
        assert!(ops.take(stale).is_none());
        assert!(ops.take(OpKey::from_u64(u64::MAX)).is_none());
        let c = table.insert();
        ops.insert(entry(c, 0x300, OpKind::Send));
        assert_eq!(ops.len(), 2);
        assert_eq!(ops.take(c).map(|e| e.key), Some(c));
        assert!(ops.take(c).is_none());
        assert_eq!(ops.len(), 1);
        let left: Vec<Entry> = ops.drain().collect();
        assert_eq!(left.len(), 1);
        assert!(ops.is_empty());
    }

    #[test]
    fn slots_are_reused_without_growing() {
        let table = CompletionTable::<MqCompletion>::new();
        let mut ops = InFlight::default();
        for round in 0..100usize {
            let k = table.insert();
            ops.insert(entry(k, round + 1, OpKind::Send));
            let e = ops
                .take_finished(
                    InFlight::context(k),
                    std::ptr::without_provenance_mut(round + 1),
                )
                .unwrap();
            table
                .complete(
                    e.key,
                    MqCompletion {
                        status: crate::engine::MqStatus {
                            tag: 0,
                            msg_len: 0,
                            nbytes: 0,
                            source: None,
                            error: None,
                        },
                        buffer: e.buffer,
                    },
                )
                .unwrap();
            assert!(table.try_take(k).is_some());
        }
        assert_eq!(ops.slots.len(), 1, "one slot, reused");
    }
}
