//! Request ids that a peer can name but not confuse: a slab whose ids carry
//! the slot's generation.
//!
//! A peer refers to our send or receive state by the id we gave it (the C
//! provider sent raw pointers and trusted what came back). Here an id is
//! `generation << 32 | index`: a stale id (the operation finished and its
//! slot was reused), an id from an earlier process, or a made-up one names
//! no live entry and is refused. Generations start at a per-slab random
//! value and skip 0, so ids are never 0 and differ between runs. The core
//! also checks that the packet came from the peer the entry belongs to, so
//! a peer can only ever touch its own transfers.

/// Entries of type `T` under unforgeable-enough `u64` ids.
#[derive(Debug)]
pub(crate) struct IdSlab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Generation of slots created from now on.
    first_generation: u32,
    len: usize,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

impl<T> IdSlab<T> {
    /// An empty slab whose generations start at `salt` (0 is skipped).
    pub(crate) fn new(salt: u32) -> Self {
        IdSlab {
            slots: Vec::new(),
            free: Vec::new(),
            first_generation: salt.max(1),
            len: 0,
        }
    }

    fn id(index: u32, generation: u32) -> u64 {
        (u64::from(generation) << 32) | u64::from(index)
    }

    /// Stores `value`; its id (never 0).
    pub(crate) fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            return Self::id(index, slot.generation);
        }
        let index = self.slots.len() as u32;
        let generation = self.first_generation;
        self.first_generation = next_generation(generation);
        self.slots.push(Slot {
            generation,
            value: Some(value),
        });
        Self::id(index, generation)
    }

    fn slot_index(&self, id: u64) -> Option<usize> {
        let index = (id as u32) as usize;
        let slot = self.slots.get(index)?;
        (slot.generation == (id >> 32) as u32 && slot.value.is_some()).then_some(index)
    }

    /// The live entry `id` names.
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        let i = self.slot_index(id)?;
        self.slots[i].value.as_ref()
    }

    /// The live entry `id` names, mutably.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = self.slot_index(id)?;
        self.slots[i].value.as_mut()
    }

    /// Removes the entry `id` names; its id is dead from now on.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let i = self.slot_index(id)?;
        let slot = &mut self.slots[i];
        let value = slot.value.take();
        slot.generation = next_generation(slot.generation);
        self.free.push(i as u32);
        self.len -= 1;
        value
    }

    /// Ids of the live entries for which `pred` holds.
    pub(crate) fn ids_where(&self, mut pred: impl FnMut(&T) -> bool) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let v = s.value.as_ref()?;
                pred(v).then(|| Self::id(i as u32, s.generation))
            })
            .collect()
    }

    /// The live entries.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots.iter().filter_map(|s| s.value.as_ref())
    }

    /// Live entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_forged_ids_name_nothing() {
        let mut s = IdSlab::new(7);
        let a = s.insert("a");
        assert_ne!(a, 0);
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        // The slot is reused under another id; the old one stays dead.
        let b = s.insert("b");
        assert_eq!(b as u32, a as u32);
        assert_ne!(b, a);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get_mut(b), Some(&mut "b"));
        for forged in [0, 1, u64::MAX, b ^ (1 << 32), b + 1] {
            assert_eq!(s.get(forged), None, "{forged:#x}");
        }
        assert_eq!(s.len(), 1);
        assert_eq!(s.ids_where(|v| *v == "b"), vec![b]);
    }

    #[test]
    fn generations_skip_zero() {
        let mut s = IdSlab::new(u32::MAX);
        let a = s.insert(1);
        s.remove(a);
        let b = s.insert(2);
        assert_eq!((b >> 32) as u32, 1);
        let mut z = IdSlab::new(0);
        assert_ne!(z.insert(()) >> 32, 0);
    }
}
