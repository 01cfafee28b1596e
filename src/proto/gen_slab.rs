//! A slab whose `u64` ids carry the slot's generation: what the AM message
//! protocol and RMA give peers to name their transfers by.
//!
//! A peer refers to our state by the id we gave it (the C provider sent raw
//! pointers and trusted what came back). An id is
//! `prefix | generation << 32 | index`, with a generation of `gen_bits`
//! bits that is never 0 and changes each time a slot is reused, and a fixed
//! `prefix` above it. So a stale id (its operation ended and the slot was
//! reused), an id from an earlier process (generations start at a salt), an
//! id with another prefix, or a made-up one names no live entry. The users
//! give the layout a meaning: `am_msg/ids.rs` (the whole upper word is the
//! generation), `rma/ids.rs` (29 bits, and bit 61 tells two id spaces
//! apart, so the ids fit under the long-RMA tag bit).

/// Entries of type `T` under generation-checked ids (module docs).
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Generation of slots created from now on.
    first_generation: u32,
    /// Mask of the generation field (its low `gen_bits` bits).
    gen_mask: u32,
    /// Bits above the generation field, the same in every id.
    prefix: u64,
    len: usize,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

impl<T> GenSlab<T> {
    /// An empty slab with `gen_bits` (1 to 32) of generation, starting at
    /// `salt` (masked; 0 is skipped), and `prefix` (bits at or above
    /// `32 + gen_bits` only) in every id.
    ///
    /// # Panics
    /// On a `gen_bits` or `prefix` outside those ranges (a programming
    /// error of the user module, fixed at compile time in practice).
    pub(crate) fn new(gen_bits: u32, prefix: u64, salt: u32) -> Self {
        assert!((1..=32).contains(&gen_bits), "gen_bits {gen_bits}");
        let gen_mask = if gen_bits == 32 {
            u32::MAX
        } else {
            (1 << gen_bits) - 1
        };
        assert_eq!(
            prefix & ((u64::from(gen_mask) << 32) | u64::from(u32::MAX)),
            0,
            "the prefix {prefix:#x} overlaps the generation or the index"
        );
        GenSlab {
            slots: Vec::new(),
            free: Vec::new(),
            first_generation: next_generation(salt.wrapping_sub(1), gen_mask),
            gen_mask,
            prefix,
            len: 0,
        }
    }

    fn id(&self, index: u32, generation: u32) -> u64 {
        self.prefix | (u64::from(generation) << 32) | u64::from(index)
    }

    /// Stores `value`; its id. `value` comes back when 2^32 entries are
    /// live.
    pub(crate) fn insert(&mut self, value: T) -> Result<u64, T> {
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            self.len += 1;
            let generation = slot.generation;
            return Ok(self.id(index, generation));
        }
        let Ok(index) = u32::try_from(self.slots.len()) else {
            return Err(value);
        };
        let generation = self.first_generation;
        self.first_generation = next_generation(generation, self.gen_mask);
        self.slots.push(Slot {
            generation,
            value: Some(value),
        });
        self.len += 1;
        Ok(self.id(index, generation))
    }

    /// The slot `id` names, if it holds the live entry of that generation.
    fn slot_index(&self, id: u64) -> Option<usize> {
        let generation = (id >> 32) as u32 & self.gen_mask;
        if id & !((u64::from(self.gen_mask) << 32) | u64::from(u32::MAX)) != self.prefix {
            return None;
        }
        let index = (id as u32) as usize;
        let slot = self.slots.get(index)?;
        (slot.generation == generation && slot.value.is_some()).then_some(index)
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
        slot.generation = next_generation(slot.generation, self.gen_mask);
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
                pred(v).then(|| self.id(i as u32, s.generation))
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

    /// Whether no entry is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The generation after `g` within `mask`, skipping 0.
fn next_generation(g: u32, mask: u32) -> u32 {
    match g.wrapping_add(1) & mask {
        0 => 1,
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_forged_and_foreign_ids_name_nothing() {
        let mut s = GenSlab::new(32, 0, 7);
        let a = s.insert("a").ok().unwrap();
        assert_ne!(a, 0);
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None, "stale");
        let b = s.insert("b").ok().unwrap();
        assert_eq!(b as u32, a as u32, "slot reused");
        assert_ne!(b, a, "under a new generation");
        for forged in [0, 1, u64::MAX, b ^ (1 << 32), b + 1] {
            assert_eq!(s.get(forged), None, "{forged:#x}");
        }
        assert_eq!(s.get_mut(b), Some(&mut "b"));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn the_prefix_is_checked() {
        let mut s = GenSlab::new(29, 1 << 61, 3);
        let a = s.insert(()).unwrap();
        assert_eq!(a >> 61, 1);
        assert_eq!(s.get(a & !(1 << 61)), None, "no prefix");
        assert_eq!(s.get(a | 1 << 62), None, "a bit above the prefix");
        assert_eq!(s.get(a), Some(&()));
    }

    #[test]
    fn generations_wrap_within_their_bits_and_skip_zero() {
        let mask = (1 << 29) - 1;
        let mut s = GenSlab::new(29, 0, mask);
        let a = s.insert(()).unwrap();
        assert_eq!((a >> 32) as u32, mask);
        s.remove(a);
        let b = s.insert(()).unwrap();
        assert_eq!((b >> 32) as u32, 1, "wrapped, skipping 0");
        let mut z = GenSlab::new(32, 0, 0);
        assert_eq!(
            (z.insert(()).unwrap() >> 32) as u32,
            1,
            "salt 0 starts at 1"
        );
        let mut w = GenSlab::new(32, 0, u32::MAX);
        let x = w.insert(()).unwrap();
        w.remove(x);
        assert_eq!((w.insert(()).unwrap() >> 32) as u32, 1);
    }

    #[test]
    fn ids_where_names_live_entries() {
        let mut s = GenSlab::new(32, 0, 1);
        let ids: Vec<u64> = (0..5).map(|v| s.insert(v).unwrap()).collect();
        s.remove(ids[1]);
        let odd = s.ids_where(|v| v % 2 == 1);
        assert_eq!(odd, vec![ids[3]]);
        assert!(!s.is_empty());
    }
}
