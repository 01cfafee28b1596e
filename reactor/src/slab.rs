//! Segmented, stable-address storage with a lock-free free list.
//!
//! This is the memory behind [`CompletionTable`](crate::CompletionTable).
//! Entries live in segments that are allocated once and never moved or freed
//! while the slab lives, so a `&S` handed out for an index stays valid for
//! the slab's whole life. Segment `k` holds `BASE << k` entries, so the index
//! space `0..2^32 - BASE` is covered by at most `32 - SHIFT` segments and an
//! index maps to its segment with one `leading_zeros`.
//!
//! Free indices form a Treiber stack threaded through each entry's
//! `next_free`. The head packs a push counter with the index, so a pop that
//! raced with "pop A, pop B, push A" fails its compare-exchange instead of
//! installing a stale next pointer (the ABA problem). Growing takes a mutex,
//! but only when the free list is empty; steady state never allocates and
//! never locks.

use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex};

/// log2 of the first segment's length.
#[cfg(not(loom))]
const SHIFT: u32 = 5;
/// Tiny segments under loom, so the models exercise growth cheaply.
#[cfg(loom)]
const SHIFT: u32 = 1;

/// Length of the first segment.
const BASE: u64 = 1 << SHIFT;

/// Number of segments: their total length, `BASE * (2^MAX_SEGMENTS - 1)`,
/// stays below `u32::MAX`, so every index (and index + 1) fits in a `u32`.
const MAX_SEGMENTS: usize = (32 - SHIFT) as usize;

/// Mask of the index part (stored as index + 1; 0 = empty) of the head.
const INDEX_MASK: u64 = 0xFFFF_FFFF;

/// One stored entry: the caller's value plus the free-list link.
pub(crate) struct Entry<S> {
    /// Next free index + 1 (0 = end of list); meaningful only while free.
    next_free: AtomicU32,
    pub(crate) slot: S,
}

/// Stable-address storage for `S`, indexed by `u32`.
pub(crate) struct Slab<S> {
    segments: [AtomicPtr<Entry<S>>; MAX_SEGMENTS],
    /// Segments allocated so far; written only under `grow`.
    in_use: AtomicUsize,
    /// Free-list head: `push counter << 32 | (index + 1)`.
    head: AtomicU64,
    grow: Mutex<()>,
}

// SAFETY: the slab owns its entries (dropped in `Drop`, on whichever thread
// drops the slab: `S: Send`) and hands out `&S` to any thread (`S: Sync`).
// The raw segment pointers are only dereferenced while the slab is alive.
unsafe impl<S: Send + Sync> Send for Slab<S> {}
// SAFETY: as above; all shared mutation goes through atomics or the mutex.
unsafe impl<S: Send + Sync> Sync for Slab<S> {}

/// Segment number and offset of `index`.
#[inline]
fn locate(index: u32) -> (usize, usize) {
    let x = u64::from(index) + BASE;
    let k = (63 - x.leading_zeros()) - SHIFT;
    (k as usize, (x - (BASE << k)) as usize)
}

/// First index of segment `k`.
#[inline]
fn segment_start(k: usize) -> u64 {
    (BASE << k) - BASE
}

/// Length of segment `k`.
#[inline]
fn segment_len(k: usize) -> usize {
    (BASE as usize) << k
}

impl<S> Slab<S> {
    /// An empty slab; allocates nothing.
    pub(crate) fn new() -> Self {
        Slab {
            segments: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            in_use: AtomicUsize::new(0),
            head: AtomicU64::new(0),
            grow: Mutex::new(()),
        }
    }

    /// Number of entries allocated (free or not).
    pub(crate) fn capacity(&self) -> usize {
        let n = self.in_use.load(Acquire);
        segment_start(n) as usize
    }

    /// The entry at `index`, or `None` when no segment holds it (a forged or
    /// out-of-range index).
    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&S> {
        self.entry(index).map(|e| &e.slot)
    }

    #[inline]
    fn entry(&self, index: u32) -> Option<&Entry<S>> {
        let (k, off) = locate(index);
        let seg = self.segments.get(k)?.load(Acquire);
        if seg.is_null() {
            return None;
        }
        // SAFETY: a non-null segment pointer was published (Release) after
        // the segment was fully initialised with `segment_len(k)` entries,
        // `off < segment_len(k)` by construction of `locate`, and segments
        // are freed only in `Drop` (which has `&mut self`).
        Some(unsafe { &*seg.add(off) })
    }

    /// Takes a free index, growing when the free list is empty. `init`
    /// builds the entries of a new segment.
    ///
    /// # Panics
    /// When all `2^32 - BASE` indices are in use (memory runs out first).
    pub(crate) fn alloc(&self, init: impl Fn() -> S) -> u32 {
        match self.pop_free() {
            Some((index, _)) => index,
            None => self.grow(init),
        }
    }

    /// [`alloc`](Self::alloc), with the entry: a reused index's entry comes
    /// from the pop itself, not a second lookup.
    #[inline]
    pub(crate) fn alloc_get(&self, init: impl Fn() -> S) -> (u32, &S) {
        if let Some((index, entry)) = self.pop_free() {
            return (index, &entry.slot);
        }
        let index = self.grow(init);
        let slot = self
            .get(index)
            .expect("a grown slab has a published segment for the index it hands out");
        (index, slot)
    }

    /// Pops a free index, with its entry.
    #[inline]
    fn pop_free(&self) -> Option<(u32, &Entry<S>)> {
        let mut head = self.head.load(Acquire);
        loop {
            let enc = (head & INDEX_MASK) as u32;
            if enc == 0 {
                return None;
            }
            let index = enc - 1;
            // Every index on the list belongs to a published segment.
            let entry = self.entry(index)?;
            let next = entry.next_free.load(Relaxed);
            let new = (head & !INDEX_MASK) | u64::from(next);
            match self.head.compare_exchange_weak(head, new, Acquire, Acquire) {
                Ok(_) => return Some((index, entry)),
                Err(actual) => head = actual,
            }
        }
    }

    /// Returns `index` to the free list. The caller must own the entry
    /// (nobody else may use it until `alloc` hands it out again).
    pub(crate) fn push_free(&self, index: u32) {
        self.push_chain(index, index);
    }

    /// Pushes the already linked chain `first ..= last` (each entry's
    /// `next_free` leads to the next one) in one step.
    fn push_chain(&self, first: u32, last: u32) {
        let Some(last_entry) = self.entry(last) else {
            return;
        };
        let mut head = self.head.load(Relaxed);
        loop {
            last_entry
                .next_free
                .store((head & INDEX_MASK) as u32, Relaxed);
            let tag = (head >> 32).wrapping_add(1) << 32;
            let new = tag | u64::from(first + 1);
            match self.head.compare_exchange_weak(head, new, Release, Relaxed) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    #[cold]
    fn grow(&self, init: impl Fn() -> S) -> u32 {
        let _guard = self.grow.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have grown (or freed) while we waited.
        if let Some((index, _)) = self.pop_free() {
            return index;
        }
        let k = self.in_use.load(Relaxed);
        assert!(k < MAX_SEGMENTS, "completion table is full");
        let len = segment_len(k);
        let segment: Box<[Entry<S>]> = (0..len)
            .map(|_| Entry {
                next_free: AtomicU32::new(0),
                slot: init(),
            })
            .collect();
        let raw = Box::into_raw(segment) as *mut Entry<S>;
        self.segments[k].store(raw, Release);
        self.in_use.store(k + 1, Release);

        let first = segment_start(k) as u32;
        if len > 1 {
            // Link first+1 -> first+2 -> ... -> first+len-1 and push them all.
            let last = first + (len as u32 - 1);
            for index in first + 1..last {
                if let Some(e) = self.entry(index) {
                    e.next_free.store(index + 2, Relaxed);
                }
            }
            self.push_chain(first + 1, last);
        }
        first
    }

    /// Every allocated entry, in index order (free ones included).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &S> + '_ {
        let n = self.in_use.load(Acquire);
        (0..n).flat_map(move |k| {
            let seg = self.segments[k].load(Acquire);
            // SAFETY: segments below `in_use` are published and hold
            // `segment_len(k)` initialised entries until `Drop`.
            let entries: &[Entry<S>] = unsafe { std::slice::from_raw_parts(seg, segment_len(k)) };
            entries.iter().map(|e| &e.slot)
        })
    }
}

impl<S> Drop for Slab<S> {
    fn drop(&mut self) {
        let n = self.in_use.load(Acquire);
        for k in 0..n {
            let seg = self.segments[k].swap(ptr::null_mut(), AcqRel);
            if seg.is_null() {
                continue;
            }
            // SAFETY: `seg` came from `Box::into_raw` of a boxed slice of
            // exactly `segment_len(k)` entries and is reclaimed only here,
            // once (the pointer is nulled above).
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(seg, segment_len(k))) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_segments_contiguously() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(BASE as u32 - 1), (0, BASE as usize - 1));
        assert_eq!(locate(BASE as u32), (1, 0));
        let mut expect = 0u64;
        for k in 0..6 {
            assert_eq!(segment_start(k), expect);
            assert_eq!(locate(expect as u32), (k, 0));
            expect += segment_len(k) as u64;
            assert_eq!(locate(expect as u32 - 1), (k, segment_len(k) - 1));
        }
        // The largest u32 index is outside every segment.
        assert!(locate(u32::MAX).0 >= MAX_SEGMENTS);
        assert!(segment_start(MAX_SEGMENTS) < u64::from(u32::MAX));
    }

    #[test]
    fn alloc_reuses_freed_indices_lifo() {
        let slab: Slab<u8> = Slab::new();
        assert_eq!(slab.capacity(), 0);
        let a = slab.alloc(|| 0);
        let b = slab.alloc(|| 0);
        assert_ne!(a, b);
        assert_eq!(slab.capacity(), BASE as usize);
        slab.push_free(a);
        assert_eq!(slab.alloc(|| 0), a);
        // Exhaust the first segment: the next alloc grows.
        let taken: Vec<u32> = (0..BASE as usize - 2).map(|_| slab.alloc(|| 0)).collect();
        let mut all: Vec<u32> = taken.iter().copied().chain([a, b]).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), BASE as usize, "indices must be distinct");
        let next = slab.alloc(|| 0);
        assert_eq!(next, BASE as u32);
        assert_eq!(slab.capacity(), 3 * BASE as usize);
        assert!(slab.get(next).is_some());
        assert!(slab.get(3 * BASE as u32).is_none());
        assert!(slab.get(u32::MAX).is_none());
    }
}
