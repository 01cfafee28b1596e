//! The edge's table of live operations: what the core's [`OpId`]s stand
//! for.
//!
//! The core names operations by [`OpId`] and never holds their memory; the
//! edge keeps each posted operation's [`OpBuffer`] here until the core
//! completes it, then hands it back through the endpoint's
//! [`CompletionTable`](crate::reactor::CompletionTable).
//!
//! **Mapping.** An operation is posted with an [`OpKey`] from the
//! completion table, which is unique among live operations (slot index plus
//! generation), so the edge uses it as the core's id as is:
//! `OpId(key.to_u64())`. Entries live in a vector indexed by the key's slot
//! index, so looking an id up is an index and a compare, and the table
//! never allocates once it has grown to the largest number of operations in
//! flight (the completion table recycles its slots the same way).
//!
//! **Referenced sends.** A vectored transmit leaves large send payloads in
//! their buffers until the socket has taken them
//! ([`PayloadRef`](super::PayloadRef)); the core may already have completed
//! such a send. The entry then stays here, its completion parked, until the
//! last reference is written or dropped.

use super::protocol::{OpId, SendPayloads};
use crate::engine::{MqStatus, OpBuffer};
use crate::reactor::OpKey;

/// What kind of request an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A tagged send.
    Send,
    /// A tagged receive.
    Recv,
}

/// One live operation.
#[derive(Debug)]
pub(crate) struct OpEntry {
    /// The key its completion goes to.
    pub key: OpKey,
    /// Its memory.
    pub buffer: OpBuffer,
    /// Send or receive.
    pub kind: OpKind,
    /// Unwritten transmit references to its buffer.
    pub refs: u32,
    /// The core's completion, parked while `refs > 0`.
    pub parked: Option<MqStatus>,
}

/// Live operations by id (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct OpTable {
    slots: Vec<Option<OpEntry>>,
    live: usize,
}

impl OpTable {
    /// The core's id for an operation key.
    pub(super) fn id(key: OpKey) -> OpId {
        OpId(key.to_u64())
    }

    fn index(id: OpId) -> usize {
        id.0 as u32 as usize
    }

    /// Number of live entries.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Whether `key` has a live entry.
    pub(super) fn contains(&self, key: OpKey) -> bool {
        self.get(Self::id(key)).is_some()
    }

    /// Adds an entry. The caller has checked that `key` is live in the
    /// completion table (so its index is within that table) and not here.
    pub(super) fn insert(&mut self, key: OpKey, buffer: OpBuffer, kind: OpKind) {
        let i = Self::index(Self::id(key));
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        debug_assert!(self.slots[i].is_none(), "slot {i} is in use");
        self.slots[i] = Some(OpEntry {
            key,
            buffer,
            kind,
            refs: 0,
            parked: None,
        });
        self.live += 1;
    }

    /// The entry of `id`, if live.
    pub(super) fn get(&self, id: OpId) -> Option<&OpEntry> {
        self.slots
            .get(Self::index(id))?
            .as_ref()
            .filter(|e| e.key.to_u64() == id.0)
    }

    /// The entry of `id`, mutably, if live.
    pub(super) fn get_mut(&mut self, id: OpId) -> Option<&mut OpEntry> {
        self.slots
            .get_mut(Self::index(id))?
            .as_mut()
            .filter(|e| e.key.to_u64() == id.0)
    }

    /// Removes and returns the entry of `id`.
    pub(super) fn remove(&mut self, id: OpId) -> Option<OpEntry> {
        let slot = self.slots.get_mut(Self::index(id))?;
        if slot.as_ref().is_some_and(|e| e.key.to_u64() == id.0) {
            self.live -= 1;
            slot.take()
        } else {
            None
        }
    }

    /// Ids of every live entry (for closing).
    pub(super) fn ids(&self) -> Vec<OpId> {
        self.slots
            .iter()
            .flatten()
            .map(|e| Self::id(e.key))
            .collect()
    }
}

impl SendPayloads for OpTable {
    fn payload(&self, op: OpId) -> Option<&[u8]> {
        self.get(op)
            .filter(|e| e.kind == OpKind::Send)
            .map(|e| e.buffer.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reactor::CompletionTable;

    #[test]
    fn ids_follow_keys_and_reject_stale_ones() {
        let table = CompletionTable::<()>::new();
        let mut ops = OpTable::default();
        let a = table.insert();
        let b = table.insert();
        ops.insert(a, OpBuffer::from(vec![1, 2, 3]), OpKind::Send);
        ops.insert(b, OpBuffer::from(vec![0; 4]), OpKind::Recv);
        assert_eq!(ops.len(), 2);
        assert_eq!(ops.payload(OpTable::id(a)), Some(&[1u8, 2, 3][..]));
        assert_eq!(ops.payload(OpTable::id(b)), None, "receives lend nothing");
        let e = ops.remove(OpTable::id(a)).unwrap();
        assert_eq!(e.key, a);
        assert!(ops.remove(OpTable::id(a)).is_none());
        // A key of the same slot with another generation is another op.
        table.complete(a, ()).unwrap();
        assert_eq!(table.try_take(a), Some(()));
        let a2 = table.insert();
        assert_eq!(a2.index(), a.index());
        assert!(ops.get(OpTable::id(a2)).is_none());
        ops.insert(a2, OpBuffer::empty(), OpKind::Recv);
        assert!(ops.get(OpTable::id(a)).is_none());
        assert_eq!(ops.ids().len(), 2);
    }
}
