//! Where the soft endpoint's per-peer tables live.
//!
//! A crowd of strangers makes the endpoint remember each of them for a
//! while (its peer record, its epid, when it went down), so the maps
//! that hold those records grow with the crowd and shrink again once the
//! strangers are forgotten. Allocated from the C heap, a large table that
//! shrinks leaves its address space behind: glibc hands the pages of a
//! thread's arena back with `madvise` only, so the mapping stays, and the
//! main heap returns memory only from its top. `TableAlloc` gives every
//! table of [`MAPPED`] bytes or more its own anonymous mapping, which goes
//! back to the system whole when the table is freed or shrunk; smaller
//! tables come from the global allocator as usual.
//!
//! [`Table`] and [`TableSet`] are the endpoint's maps and sets with that
//! allocator.

use allocator_api2::alloc::{AllocError, Allocator, Global, Layout};
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::hash::RandomState;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// Tables of this many bytes or more get a mapping of their own.
pub(crate) const MAPPED: usize = 64 << 10;

/// The alignment an anonymous mapping always has (a page).
const PAGE: usize = 4096;

/// The allocator of the soft endpoint's per-peer tables (see the module
/// docs).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TableAlloc;

/// A hash map of per-peer records.
pub(crate) type Table<K, V> = hashbrown::HashMap<K, V, RandomState, TableAlloc>;

/// A hash set of per-peer records.
pub(crate) type TableSet<K> = hashbrown::HashSet<K, RandomState, TableAlloc>;

/// Whether a block of `layout` is a mapping of its own.
fn mapped(layout: Layout) -> bool {
    layout.size() >= MAPPED && layout.align() <= PAGE
}

// SAFETY: a block is either a fresh anonymous mapping of at least
// `layout.size()` bytes, page aligned (so aligned for any layout `mapped`
// accepts), valid until `deallocate` unmaps it, or a block of the global
// allocator. Which of the two depends on the layout alone, and callers
// hand back the layout they allocated with (the `Allocator` contract), so
// each block goes back to where it came from. Copies of `TableAlloc` share
// no state, so a block allocated by one may be freed by another.
unsafe impl Allocator for TableAlloc {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !mapped(layout) {
            return Global.allocate(layout);
        }
        let len = NonZeroUsize::new(layout.size()).ok_or(AllocError)?;
        // SAFETY: a new private anonymous mapping at an address the
        // kernel picks touches no memory of this process.
        let at = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|_| AllocError)?;
        Ok(NonNull::slice_from_raw_parts(at.cast(), layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if !mapped(layout) {
            // SAFETY: the block came from `Global` with this layout (see
            // the impl's SAFETY note).
            unsafe { Global.deallocate(ptr, layout) };
            return;
        }
        // SAFETY: the block is the whole mapping `allocate` made for this
        // layout, and the caller no longer uses it.
        if let Err(e) = unsafe { munmap(ptr.cast(), layout.size()) } {
            tracing::warn!(error = %e, "soft engine: cannot unmap a table");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapped regions of this process whose start is `at`.
    fn mapping_at(at: usize) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines()
            .find(|l| {
                l.split('-')
                    .next()
                    .and_then(|a| usize::from_str_radix(a, 16).ok())
                    == Some(at)
            })
            .map(str::to_string)
    }

    #[test]
    fn a_large_block_is_a_mapping_of_its_own_until_freed() {
        let layout = Layout::from_size_align(MAPPED, 8).unwrap();
        let block = TableAlloc.allocate(layout).unwrap().cast::<u8>();
        let at = block.as_ptr() as usize;
        assert_eq!(at % PAGE, 0);
        assert!(mapping_at(at).is_some(), "no mapping starts at {at:#x}");
        // SAFETY: the block is MAPPED bytes long and ours alone.
        unsafe { block.as_ptr().write_bytes(0xa5, MAPPED) };
        // SAFETY: allocated just above with this layout.
        unsafe { TableAlloc.deallocate(block, layout) };
        assert!(mapping_at(at).is_none(), "the mapping at {at:#x} stayed");
    }

    #[test]
    fn a_table_grows_into_a_mapping_and_shrinks_out_of_it() {
        let mut t: Table<u64, [u64; 4]> = Table::default();
        for i in 0..100_000u64 {
            t.insert(i, [i; 4]);
        }
        assert_eq!(t.get(&77), Some(&[77; 4]));
        assert!(t.allocation_size() >= MAPPED);
        t.retain(|k, _| *k < 10);
        t.shrink_to_fit();
        assert_eq!(t.len(), 10);
        assert_eq!(t.get(&3), Some(&[3; 4]));
        assert!(t.allocation_size() < MAPPED);
    }

    #[test]
    fn small_and_over_aligned_blocks_come_from_the_global_allocator() {
        let small = Layout::from_size_align(MAPPED - 1, 8).unwrap();
        let odd = Layout::from_size_align(MAPPED, 2 * PAGE).unwrap();
        for layout in [small, odd] {
            let b = TableAlloc.allocate(layout).unwrap();
            assert_eq!(b.cast::<u8>().as_ptr() as usize % layout.align(), 0);
            // SAFETY: allocated just above with this layout.
            unsafe { TableAlloc.deallocate(b.cast(), layout) };
        }
        let set: TableSet<u32> = (0..10).collect();
        assert!(set.contains(&9));
    }
}
