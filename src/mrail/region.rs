//! [`SharedBuffer`]: one operation's buffer shared by the rail operations
//! that each carry a window of it (the parts of a striped message).
//!
//! A striped send or receive hands each rail an [`OpBuffer`] that is a
//! window of the user's buffer, so every part is read from, or lands
//! directly in, its place: no copy, no reassembly. The user's buffer is
//! moved into a `SharedBuffer` behind an `Arc`; every part's window holds a
//! clone of the `Arc` (as a [`StableRegion`]), so the memory lives as long
//! as any rail may still touch it — a part whose future was dropped keeps
//! it alive inside the reactor until its engine is done — and the user's
//! buffer comes back, untouched by anyone else, once the last window is
//! gone ([`SharedBuffer::reclaim`]).

use crate::engine::{OpBuffer, StableRegion};
use std::sync::Arc;

/// The user's buffer while the rails hold windows of it.
pub(crate) struct SharedBuffer {
    buffer: OpBuffer,
    ptr: *mut u8,
}

// SAFETY: the buffer is owned (a Vec, Bytes, BytesMut or region, all Send
// and Sync as `OpBuffer` is), and `ptr` points into it; the rails' windows
// are disjoint, and a send's windows are only read.
unsafe impl Send for SharedBuffer {}
// SAFETY: as above: shared access goes through disjoint windows only.
unsafe impl Sync for SharedBuffer {}

// SAFETY: `ptr` is the buffer's data pointer, fixed while the buffer is not
// touched (it is never exposed or grown while shared), valid for `len()`
// bytes. Writes happen only for receives, whose buffer is writable
// (`share` checks), through the disjoint part windows the engines fill; a
// send's windows are only read by the engines.
unsafe impl StableRegion for SharedBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.buffer.len()
    }
}

impl SharedBuffer {
    /// Shares `buffer`; for a receive it must be writable (`None`
    /// otherwise, with the buffer back).
    pub(crate) fn share(mut buffer: OpBuffer, receive: bool) -> Result<Arc<Self>, OpBuffer> {
        let ptr = if receive {
            match buffer.as_mut_ptr() {
                Some(p) => p,
                None => return Err(buffer),
            }
        } else {
            buffer.as_ptr().cast_mut()
        };
        Ok(Arc::new(SharedBuffer { buffer, ptr }))
    }

    /// A window `[offset, offset + len)` for one rail operation.
    pub(crate) fn window(self: &Arc<Self>, offset: u64, len: u64) -> Option<OpBuffer> {
        let region: Arc<dyn StableRegion> = self.clone();
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(len).ok()?;
        OpBuffer::from(region).window(offset, len)
    }

    /// A copy of the buffer's bytes, with each `(offset, bytes)` of
    /// `instead` taken from `bytes` rather than from the buffer: what a
    /// transfer hands back when a rail it gave up on still holds a window
    /// (after a failover).
    ///
    /// The caller makes sure that no rail writes the bytes read here: the
    /// ranges of `instead` cover every window a rail may still write (a
    /// send's windows are only read).
    pub(crate) fn copy_out(&self, instead: &[(u64, &[u8])]) -> Vec<u8> {
        let len = self.buffer.len();
        let mut out = vec![0u8; len];
        let mut covered: Vec<(usize, usize)> = instead
            .iter()
            .filter_map(|&(at, b)| {
                let at = usize::try_from(at).ok()?;
                let end = at.checked_add(b.len()).filter(|&e| e <= len)?;
                out[at..end].copy_from_slice(b);
                Some((at, end))
            })
            .collect();
        covered.sort_unstable();
        let mut at = 0;
        for (start, end) in covered.into_iter().chain(std::iter::once((len, len))) {
            if start > at {
                // SAFETY: `ptr` is valid for `len` bytes (see the
                // StableRegion impl) and `[at, start)` lies inside them; no
                // rail writes these bytes (the caller's guarantee above),
                // and `out` is a separate allocation.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.ptr.add(at),
                        out[at..start].as_mut_ptr(),
                        start - at,
                    );
                }
            }
            at = at.max(end);
        }
        out
    }

    /// The user's buffer back, once no window is left; otherwise the
    /// shared buffer itself (someone still holds a window).
    pub(crate) fn reclaim(this: Arc<Self>) -> Result<OpBuffer, Arc<Self>> {
        Arc::try_unwrap(this).map(|s| s.buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_write_in_place_and_the_buffer_comes_back() {
        let shared = SharedBuffer::share(OpBuffer::from(vec![0u8; 10]), true).unwrap();
        let mut a = shared.window(0, 4).unwrap();
        let mut b = shared.window(4, 6).unwrap();
        a.as_mut_slice().unwrap().copy_from_slice(b"abcd");
        b.as_mut_slice().unwrap().copy_from_slice(b"efghij");
        let shared = SharedBuffer::reclaim(shared).unwrap_err();
        drop((a, b));
        let back = SharedBuffer::reclaim(shared).ok().unwrap();
        assert_eq!(back.as_slice(), b"abcdefghij");
        assert_eq!(back.into_vec().unwrap().len(), 10);
    }

    #[test]
    fn copies_take_replaced_ranges_from_elsewhere() {
        let shared = SharedBuffer::share(OpBuffer::from(b"abcdefghij".to_vec()), false).unwrap();
        let held = shared.window(3, 4).unwrap();
        assert_eq!(shared.copy_out(&[]), b"abcdefghij");
        assert_eq!(shared.copy_out(&[(3, b"DEFG"), (9, b"J")]), b"abcDEFGhiJ");
        assert_eq!(shared.copy_out(&[(8, b"far too long")]), b"abcdefghij");
        drop(held);
    }

    #[test]
    fn out_of_range_windows_and_read_only_receives_are_refused() {
        let shared = SharedBuffer::share(OpBuffer::from(vec![0u8; 4]), true).unwrap();
        assert!(shared.window(2, 3).is_none());
        assert!(shared.window(u64::MAX, 1).is_none());
        let ro = OpBuffer::from(bytes::Bytes::from_static(b"ro"));
        assert!(SharedBuffer::share(ro, true).is_err());
        let ro = OpBuffer::from(bytes::Bytes::from_static(b"ro"));
        let s = SharedBuffer::share(ro, false).unwrap();
        assert_eq!(s.window(0, 2).unwrap().as_slice(), b"ro");
    }
}
