//! Request ids that a peer can name but not confuse.
//!
//! A peer refers to our send or receive state by the id we gave it (the C
//! provider sent raw pointers and trusted what came back). Here an id is
//! `generation << 32 | index` in a [`GenSlab`]: a stale id, an id from an
//! earlier process or a made-up one names no live entry and is refused.
//! Generations start at a per-slab salt and skip 0, so ids are never 0 and
//! differ between runs. The core also checks that the packet came from the
//! peer the entry belongs to, so a peer can only ever touch its own
//! transfers.

use crate::proto::gen_slab::GenSlab;

/// Entries of type `T` under unforgeable-enough `u64` ids.
pub(crate) type IdSlab<T> = GenSlab<T>;

/// An empty slab whose generations (the whole upper word) start at `salt`.
pub(crate) fn id_slab<T>(salt: u32) -> IdSlab<T> {
    GenSlab::new(32, 0, salt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_generation_and_index() {
        let mut s = id_slab(7);
        let a = s.insert("a").ok().unwrap();
        assert_eq!((a >> 32, a as u32), (7, 0));
        let b = s.insert("b").ok().unwrap();
        assert_eq!((b >> 32, b as u32), (8, 1));
    }
}
