//! Request ids that fit under the long-RMA tag bit and that a peer cannot
//! confuse: a slab whose ids carry a generation.
//!
//! An id is `space << 61 | generation << 32 | index`, with a 29-bit
//! generation that is never 0 and changes each time a slot is reused. So
//! ids are never 0, always below 2^62 (they fit under
//! [`RMA_BIT`](crate::proto::tag_layout::RMA_BIT) in a long-RMA tag), and a stale id
//! (its operation ended), one from an earlier process or a made-up one
//! names no live entry. Bit 61 tells the two id spaces of one process
//! apart: ids of operations it initiates and ids of long writes it is the
//! target of. Both become MQ receive tags here (long reads receive under
//! the initiator's id, long writes under the target's), so they must not
//! collide.

use crate::proto::gen_slab::GenSlab;

/// Which kind of entry an id names (bit 61).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    /// Operations this process initiates.
    Initiator,
    /// Long writes this process is the target of.
    Target,
}

const SPACE_BIT: u64 = 1 << 61;
const GEN_BITS: u32 = 29;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;

impl Space {
    /// The space an id claims to be from; `None` for bits 62–63 set or a
    /// zero generation (never issued).
    pub(crate) fn of(id: u64) -> Option<Space> {
        if id >> 62 != 0 || ((id >> 32) as u32 & GEN_MASK) == 0 {
            return None;
        }
        Some(if id & SPACE_BIT == 0 {
            Space::Initiator
        } else {
            Space::Target
        })
    }
}

/// Entries of type `T` under ids of one [`Space`]: a
/// [`GenSlab`] with 29 bits of generation
/// and the space's bit 61.
#[derive(Debug)]
pub(crate) struct Ids<T> {
    slab: GenSlab<T>,
}

impl<T> Ids<T> {
    /// An empty slab whose generations start at `salt` (masked; 0 skipped),
    /// so ids differ between runs when the salt does.
    pub(crate) fn new(space: Space, salt: u32) -> Self {
        let prefix = match space {
            Space::Initiator => 0,
            Space::Target => SPACE_BIT,
        };
        Ids {
            slab: GenSlab::new(GEN_BITS, prefix, salt),
        }
    }

    /// Stores `value`; its id. `None` when 2^32 entries are live.
    pub(crate) fn insert(&mut self, value: T) -> Option<u64> {
        self.slab.insert(value).ok()
    }

    /// The live entry `id` names.
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        self.slab.get(id)
    }

    /// The live entry `id` names, mutably.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.slab.get_mut(id)
    }

    /// Removes the entry; `id` is dead from now on.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        self.slab.remove(id)
    }

    /// Ids of the live entries for which `pred` holds.
    pub(crate) fn ids_where(&self, pred: impl FnMut(&T) -> bool) -> Vec<u64> {
        self.slab.ids_where(pred)
    }

    /// Live entries.
    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no entry is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_forged_and_foreign_ids_name_nothing() {
        let mut s = Ids::new(Space::Initiator, 7);
        let a = s.insert("a").unwrap();
        assert_eq!(Space::of(a), Some(Space::Initiator));
        assert!(a < 1 << 61 && a != 0);
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None);
        let b = s.insert("b").unwrap();
        assert_eq!(b as u32, a as u32, "slot reused");
        assert_ne!(b, a);
        for forged in [
            0,
            1,
            u64::MAX,
            b | SPACE_BIT,
            b | 1 << 62,
            b ^ (1 << 32),
            b + 1,
        ] {
            assert_eq!(s.get(forged), None, "{forged:#x}");
        }
        assert_eq!(s.get_mut(b), Some(&mut "b"));
        let mut t = Ids::new(Space::Target, 7);
        let x = t.insert(1).unwrap();
        assert_eq!(Space::of(x), Some(Space::Target));
        assert!(x < 1 << 62);
        assert_eq!(t.get(x & !SPACE_BIT), None);
        assert_eq!((s.len(), t.len()), (1, 1));
    }

    #[test]
    fn generations_wrap_and_skip_zero() {
        let mut s = Ids::new(Space::Initiator, GEN_MASK);
        let a = s.insert(()).unwrap();
        assert_eq!((a >> 32) as u32, GEN_MASK);
        s.remove(a);
        let b = s.insert(()).unwrap();
        assert_eq!((b >> 32) as u32, 1);
        let mut z = Ids::new(Space::Target, 0);
        let id = z.insert(()).unwrap();
        assert_eq!(((id >> 32) as u32) & GEN_MASK, 1);
        assert_eq!(Space::of(SPACE_BIT), None, "generation 0 never issued");
    }
}
