//! The bytes of a memory region, and the rule that makes sharing them with
//! engines and peers sound.
//!
//! A region is written by peers (remote writes), read by peers (remote
//! reads), and read and written by the application, possibly all from
//! different threads. The bytes live in [`UnsafeCell`]s and every access
//! follows one of two paths:
//!
//! * **Copies** ([`RegionMemory::copy_in`], [`RegionMemory::copy_out`]):
//!   the application's `read_at`/`write_at` and the short (AM) RMA path.
//!   They run under the region's lock, so two copies never overlap in time.
//! * **Engine windows** ([`RegionMemory::pin`]): a range handed to an engine
//!   (long RMA over the MQ, a region used as an operation's local buffer),
//!   which reads or writes it *outside* the lock for as long as the
//!   [`Window`] lives. A window is a mark in the region's lock-protected
//!   list: `Exclusive` (the engine may write it, or the holder has `&mut`
//!   access through an [`OpBuffer`](crate::engine::OpBuffer)) or `Shared`
//!   (the engine only reads it; crate-internal windows that nobody writes).
//!
//! Conflicts are refused with [`Conflict`] instead of racing: a copy in, or
//! an exclusive window, may not overlap any window; a copy out, or a shared
//! window, may not overlap an exclusive one. So a data race on the bytes is
//! impossible whatever the application or a peer does; a misbehaving
//! program gets `FI_EBUSY` where C would have given it torn bytes.

use crate::engine::StableRegion;
use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How an engine window uses its range (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowUse {
    /// The engine only reads it, and nobody holds `&mut` to it.
    Shared,
    /// The engine writes it, or its holder may.
    Exclusive,
}

/// A range refused because an operation in flight holds an overlapping one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// Start of the range that holds it.
    pub(crate) start: usize,
    /// End (exclusive).
    pub(crate) end: usize,
}

#[derive(Debug)]
struct Mark {
    token: u64,
    start: usize,
    end: usize,
    exclusive: bool,
}

#[derive(Debug, Default)]
struct Marks {
    next_token: u64,
    list: Vec<Mark>,
}

impl Marks {
    /// The first mark overlapping `[start, end)` that conflicts with an
    /// access that is exclusive (`any`) or only needs no exclusive mark.
    fn conflict(&self, start: usize, end: usize, any: bool) -> Option<Conflict> {
        self.list
            .iter()
            .find(|m| (any || m.exclusive) && m.start < end && start < m.end)
            .map(|m| Conflict {
                start: m.start,
                end: m.end,
            })
    }
}

/// Where a region's bytes live.
enum Storage {
    /// Taken over from the application (`Domain::register`).
    Owned(Box<[UnsafeCell<u8>]>),
    /// Kept in place by their owner (`Domain::register_region`: for example
    /// a C application's buffer), which promises them stable and valid.
    Kept(Arc<dyn StableRegion>),
}

/// The bytes of one memory region (module docs: the access rule).
pub(crate) struct RegionMemory {
    bytes: Storage,
    marks: Mutex<Marks>,
}

// SAFETY: the bytes are only reached through `copy_in`/`copy_out` (under
// `marks`' lock, so never two at once) and through `Window`s, whose ranges
// the lock-protected marks keep from overlapping any write (copy or
// exclusive window) for as long as they live. No two threads therefore
// access one byte at the same time unless both only read.
unsafe impl Sync for RegionMemory {}

impl std::fmt::Debug for RegionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionMemory")
            .field("len", &self.len())
            .finish()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The marks stay consistent across a panic (single pushes and removes).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RegionMemory {
    /// Takes `bytes` over without copying them.
    pub(crate) fn new(bytes: Box<[u8]>) -> Self {
        let len = bytes.len();
        let raw = Box::into_raw(bytes) as *mut UnsafeCell<u8>;
        // SAFETY: `UnsafeCell<u8>` is `repr(transparent)` over `u8`, so the
        // allocation has the same layout; the pointer and length are the
        // box's own and the box was consumed.
        let bytes = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, len)) };
        RegionMemory {
            bytes: Storage::Owned(bytes),
            marks: Mutex::new(Marks::default()),
        }
    }

    /// The memory of `region`, used where it is (no copy). Its accesses
    /// follow the same rule as owned bytes; what the owner does with the
    /// memory meanwhile is the owner's promise ([`StableRegion`]).
    pub(crate) fn kept(region: Arc<dyn StableRegion>) -> Self {
        RegionMemory {
            bytes: Storage::Kept(region),
            marks: Mutex::new(Marks::default()),
        }
    }

    /// The conflict that refuses an access to `[start, end)` (see
    /// [`Marks::conflict`]). Kept memory refuses none: its owner accessed
    /// it under its own rules (a C program's overlapping RMA leaves
    /// whatever bytes the schedule produced, as libfabric says), and the
    /// accesses that overlap are the engines' and the kernel's own writes
    /// through the owner's pointer, never two copies of this module (those
    /// run under the lock).
    fn refused(&self, marks: &Marks, start: usize, end: usize, any: bool) -> Option<Conflict> {
        match self.bytes {
            Storage::Owned(_) => marks.conflict(start, end, any),
            Storage::Kept(_) => None,
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match &self.bytes {
            Storage::Owned(b) => b.len(),
            Storage::Kept(r) => r.len(),
        }
    }

    fn base(&self) -> *mut u8 {
        match &self.bytes {
            Storage::Owned(b) => UnsafeCell::raw_get(b.as_ptr()),
            Storage::Kept(r) => r.as_ptr(),
        }
    }

    /// `[offset, offset + n)` if it lies inside the region.
    fn range(&self, offset: usize, n: usize) -> Option<(usize, usize)> {
        let end = offset.checked_add(n)?;
        (end <= self.len()).then_some((offset, end))
    }

    /// Copies `src` to `offset`. `Err(None)` if that is out of bounds,
    /// `Err(Some(conflict))` if an engine window overlaps it.
    pub(crate) fn copy_in(&self, offset: usize, src: &[u8]) -> Result<(), Option<Conflict>> {
        let (start, end) = self.range(offset, src.len()).ok_or(None)?;
        let marks = relock(&self.marks);
        if let Some(c) = self.refused(&marks, start, end, true) {
            return Err(Some(c));
        }
        if !src.is_empty() {
            // SAFETY: the range is inside the allocation (checked above);
            // `src` is a separate borrow so the ranges cannot overlap; the
            // lock is held and no window overlaps, so nothing else touches
            // these bytes now (module docs).
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), self.base().add(start), src.len())
            };
        }
        drop(marks);
        Ok(())
    }

    /// Copies the bytes at `offset` into `dst`. Errors as [`copy_in`](Self::copy_in),
    /// but only exclusive windows conflict.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Result<(), Option<Conflict>> {
        let (start, end) = self.range(offset, dst.len()).ok_or(None)?;
        let marks = relock(&self.marks);
        if let Some(c) = self.refused(&marks, start, end, false) {
            return Err(Some(c));
        }
        if !dst.is_empty() {
            // SAFETY: in bounds (checked); `dst` is exclusively borrowed and
            // separate; under the lock with no exclusive window overlapping,
            // nobody writes these bytes now (shared windows only read).
            unsafe {
                std::ptr::copy_nonoverlapping(self.base().add(start), dst.as_mut_ptr(), dst.len())
            };
        }
        drop(marks);
        Ok(())
    }

    /// Hands `[offset, offset + len)` to an engine until the returned
    /// window drops. Errors as [`copy_in`](Self::copy_in).
    pub(crate) fn pin(
        self: &Arc<Self>,
        offset: usize,
        len: usize,
        usage: WindowUse,
    ) -> Result<Window, Option<Conflict>> {
        let (start, end) = self.range(offset, len).ok_or(None)?;
        let exclusive = usage == WindowUse::Exclusive;
        let mut marks = relock(&self.marks);
        if let Some(c) = self.refused(&marks, start, end, exclusive) {
            return Err(Some(c));
        }
        marks.next_token += 1;
        let token = marks.next_token;
        // Empty windows touch nothing and need no mark.
        if start < end {
            marks.list.push(Mark {
                token,
                start,
                end,
                exclusive,
            });
        }
        drop(marks);
        Ok(Window {
            memory: self.clone(),
            offset: start,
            len,
            token,
        })
    }

    /// Number of live engine windows (tests).
    #[cfg(test)]
    pub(crate) fn windows(&self) -> usize {
        relock(&self.marks).list.len()
    }
}

/// A range of a region handed to an engine; it keeps the region's memory
/// alive (even after the region is closed) and its mark set until dropped.
/// Turn it into an [`OpBuffer`](crate::engine::OpBuffer) with
/// `OpBuffer::from(Arc::new(window) as Arc<dyn StableRegion>)`.
#[derive(Debug)]
pub(crate) struct Window {
    memory: Arc<RegionMemory>,
    offset: usize,
    len: usize,
    token: u64,
}

impl Drop for Window {
    fn drop(&mut self) {
        let mut marks = relock(&self.memory.marks);
        if let Some(i) = marks.list.iter().position(|m| m.token == self.token) {
            marks.list.swap_remove(i);
        }
    }
}

// SAFETY: the pointer is inside the region's boxed slice or kept region,
// which never moves and lives as long as this window's `Arc`; `len` bytes from it are in
// bounds (checked by `pin`); the window's mark keeps copies and conflicting
// windows off the range while the engine uses it (module docs).
unsafe impl StableRegion for Window {
    fn as_ptr(&self) -> *mut u8 {
        self.memory.base().wrapping_add(self.offset)
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::OpBuffer;

    fn mem(n: usize) -> Arc<RegionMemory> {
        Arc::new(RegionMemory::new((0..n).map(|i| i as u8).collect()))
    }

    #[test]
    fn copies_in_and_out_with_bounds() {
        let m = mem(16);
        m.copy_in(4, &[9, 9]).unwrap();
        let mut out = [0u8; 4];
        m.copy_out(3, &mut out).unwrap();
        assert_eq!(out, [3, 9, 9, 6]);
        assert_eq!(m.copy_in(15, &[1, 2]), Err(None));
        assert_eq!(m.copy_out(usize::MAX, &mut out), Err(None));
        m.copy_in(16, &[]).unwrap();
        assert_eq!(m.copy_in(17, &[]), Err(None));
    }

    #[test]
    fn windows_refuse_conflicting_access_until_dropped() {
        let m = mem(32);
        let w = m.pin(8, 8, WindowUse::Exclusive).unwrap();
        let mut out = [0u8; 1];
        assert_eq!(
            m.copy_out(15, &mut out),
            Err(Some(Conflict { start: 8, end: 16 }))
        );
        assert!(m.copy_in(7, &[0, 0]).is_err());
        assert!(m.pin(0, 9, WindowUse::Shared).is_err());
        // Disjoint ranges are free.
        m.copy_in(16, &[1]).unwrap();
        m.copy_out(7, &mut out).unwrap();
        drop(w);
        assert_eq!(m.windows(), 0);
        m.copy_in(8, &[5; 8]).unwrap();

        let s1 = m.pin(0, 16, WindowUse::Shared).unwrap();
        let s2 = m.pin(4, 4, WindowUse::Shared).unwrap();
        m.copy_out(0, &mut [0u8; 16]).unwrap(); // reads may share
        assert!(m.copy_in(0, &[1]).is_err());
        assert!(m.pin(15, 1, WindowUse::Exclusive).is_err());
        drop(s1);
        assert!(m.pin(0, 4, WindowUse::Exclusive).is_ok());
        assert!(m.pin(4, 1, WindowUse::Exclusive).is_err());
        drop(s2);
        assert_eq!(m.windows(), 0);
    }

    #[test]
    fn a_window_keeps_the_memory_alive_and_points_into_it() {
        let m = mem(8);
        let w = m.pin(2, 3, WindowUse::Exclusive).unwrap();
        drop(m);
        let region: Arc<dyn StableRegion> = Arc::new(w);
        let mut buf = OpBuffer::from(region);
        assert_eq!(buf.as_slice(), &[2, 3, 4]);
        buf.as_mut_slice().unwrap()[0] = 7;
        assert_eq!(buf.as_slice(), &[7, 3, 4]);
    }

    #[test]
    fn empty_windows_hold_nothing() {
        let m = mem(4);
        let _w = m.pin(4, 0, WindowUse::Exclusive).unwrap();
        assert_eq!(m.windows(), 0);
        m.copy_in(0, &[1; 4]).unwrap();
        assert!(m.pin(5, 0, WindowUse::Shared).is_err());
    }
}
