//! Owned memory handed to an engine for the whole life of an operation.
//!
//! PSM (and the soft engine) read a send buffer and write a receive buffer
//! *after* the call that posted them returns. To make that safe without an
//! `unsafe` API, an operation moves its memory into an [`OpBuffer`]; the
//! engine keeps the `OpBuffer` in its in-flight table until the request is
//! finished and hands it back inside the completion. If the operation's
//! future is dropped first, the completion (and with it the memory) lands in
//! the reactor's completion table and is freed there, after the engine is
//! done (`design.md`, principle 3).
//!
//! Heap memory does not move when its owner moves: the data pointer of a
//! `Vec<u8>`, `Bytes` or `BytesMut` stays valid as long as the value is not
//! grown or dropped, which `OpBuffer` guarantees by never exposing `&mut` to
//! the owner while the engine holds it.

use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// Memory with a fixed address for as long as the `Arc` holding it lives:
/// registered memory regions and multi-receive buffers implement it.
///
/// # Safety
/// `as_ptr()` must return the same pointer for the life of the value, valid
/// for reads and writes of `len()` bytes, and the memory must not be accessed
/// through other paths while an engine writes into it except as the
/// implementor documents (RMA targets synchronise through the engine).
pub unsafe trait StableRegion: Send + Sync + 'static {
    /// Start of the memory.
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Who owns the bytes of an [`OpBuffer`].
pub enum BufferOwner {
    /// A vector: `len()` bytes are the payload (sends) or the space (receives).
    Vec(Vec<u8>),
    /// Immutable shared bytes (sends only).
    Bytes(Bytes),
    /// Mutable bytes.
    BytesMut(BytesMut),
    /// A window of a stable region (memory regions, multi-receive buffers).
    Region(Arc<dyn StableRegion>),
}

impl std::fmt::Debug for BufferOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BufferOwner::Vec(v) => write!(f, "Vec({} B)", v.len()),
            BufferOwner::Bytes(b) => write!(f, "Bytes({} B)", b.len()),
            BufferOwner::BytesMut(b) => write!(f, "BytesMut({} B)", b.len()),
            BufferOwner::Region(r) => write!(f, "Region({} B)", r.len()),
        }
    }
}

/// An operation's memory, owned by the operation or by the engine while the
/// engine may touch it: a window `[offset, offset + len)` of its owner.
///
/// ```
/// use psmrail::engine::OpBuffer;
/// let buf = OpBuffer::from(vec![7u8; 16]).window(4, 8).unwrap();
/// assert_eq!(buf.len(), 8);
/// assert_eq!(buf.as_slice(), &[7u8; 8]);
/// let v: Vec<u8> = buf.into_vec().unwrap();
/// assert_eq!(v.len(), 16); // the whole vector comes back
/// ```
#[derive(Debug)]
pub struct OpBuffer {
    owner: BufferOwner,
    offset: usize,
    len: usize,
}

impl OpBuffer {
    /// The whole of `owner`.
    #[inline]
    pub fn new(owner: BufferOwner) -> Self {
        let len = match &owner {
            BufferOwner::Vec(v) => v.len(),
            BufferOwner::Bytes(b) => b.len(),
            BufferOwner::BytesMut(b) => b.len(),
            BufferOwner::Region(r) => r.len(),
        };
        OpBuffer {
            owner,
            offset: 0,
            len,
        }
    }

    /// An empty buffer (zero-length sends and receives).
    #[inline]
    pub fn empty() -> Self {
        OpBuffer::new(BufferOwner::Vec(Vec::new()))
    }

    /// Narrows the buffer to `[offset, offset + len)` of its current window;
    /// `None` if that does not fit.
    pub fn window(mut self, offset: usize, len: usize) -> Option<Self> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        self.offset += offset;
        self.len = len;
        Some(self)
    }

    /// Length of the window in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the window in its owner.
    pub fn offset(&self) -> usize {
        self.offset
    }

    #[inline]
    fn base_ptr(&self) -> *const u8 {
        match &self.owner {
            BufferOwner::Vec(v) => v.as_ptr(),
            BufferOwner::Bytes(b) => b.as_ptr(),
            BufferOwner::BytesMut(b) => b.as_ptr(),
            BufferOwner::Region(r) => r.as_ptr(),
        }
    }

    /// Pointer to the window, for engines handing it to PSM or a socket.
    /// Valid for `len()` bytes for as long as this `OpBuffer` lives.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.base_ptr().wrapping_add(self.offset)
    }

    /// Whether the window may be written (receives): every owner but
    /// shared immutable `Bytes`, whose [`as_mut_ptr`](Self::as_mut_ptr) is
    /// `None`.
    #[inline]
    pub fn is_writable(&self) -> bool {
        !matches!(self.owner, BufferOwner::Bytes(_))
    }

    /// Mutable pointer to the window, for receives. `None` for shared
    /// immutable `Bytes`, which cannot be written.
    #[inline]
    pub fn as_mut_ptr(&mut self) -> Option<*mut u8> {
        let base = match &mut self.owner {
            BufferOwner::Vec(v) => v.as_mut_ptr(),
            BufferOwner::Bytes(_) => return None,
            BufferOwner::BytesMut(b) => b.as_mut_ptr(),
            BufferOwner::Region(r) => r.as_ptr(),
        };
        Some(base.wrapping_add(self.offset))
    }

    /// The window's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the window lies inside the owner's memory (checked by
        // `window`), the owner is alive for the borrow of `self`, and no
        // `&mut` to the owner exists while `self` is borrowed.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// The window's bytes, mutably (`None` for shared `Bytes`).
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        let len = self.len;
        let ptr = self.as_mut_ptr()?;
        if len == 0 {
            return Some(&mut []);
        }
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only
        // access path; regions promise exclusive use while posted.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }

    /// The owner, whole (the window is forgotten).
    pub fn into_owner(self) -> BufferOwner {
        self.owner
    }

    /// The vector back, if the owner was one.
    #[inline]
    pub fn into_vec(self) -> Option<Vec<u8>> {
        match self.owner {
            BufferOwner::Vec(v) => Some(v),
            _ => None,
        }
    }
}

/// The empty buffer, so a buffer can be moved out of a `&mut` with
/// [`std::mem::take`] to be handed to an operation.
///
/// ```
/// use psmrail::engine::OpBuffer;
/// let mut slot = OpBuffer::from(vec![1, 2, 3]);
/// let taken = std::mem::take(&mut slot);
/// assert_eq!(taken.as_slice(), &[1, 2, 3]);
/// assert!(slot.is_empty());
/// ```
impl Default for OpBuffer {
    #[inline]
    fn default() -> Self {
        OpBuffer::empty()
    }
}

impl From<Vec<u8>> for OpBuffer {
    #[inline]
    fn from(v: Vec<u8>) -> Self {
        OpBuffer::new(BufferOwner::Vec(v))
    }
}

impl From<Bytes> for OpBuffer {
    fn from(b: Bytes) -> Self {
        OpBuffer::new(BufferOwner::Bytes(b))
    }
}

impl From<BytesMut> for OpBuffer {
    fn from(b: BytesMut) -> Self {
        OpBuffer::new(BufferOwner::BytesMut(b))
    }
}

impl From<Arc<dyn StableRegion>> for OpBuffer {
    fn from(r: Arc<dyn StableRegion>) -> Self {
        OpBuffer::new(BufferOwner::Region(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_nest_and_reject_overflow() {
        let b = OpBuffer::from((0u8..32).collect::<Vec<_>>());
        let w = b.window(8, 16).unwrap().window(4, 4).unwrap();
        assert_eq!(w.as_slice(), &[12, 13, 14, 15]);
        assert_eq!(w.offset(), 12);
        assert!(w.window(1, 4).is_none());
        let b = OpBuffer::from(vec![0u8; 4]);
        assert!(b.window(usize::MAX, 2).is_none());
    }

    #[test]
    fn bytes_are_read_only() {
        let mut b = OpBuffer::from(Bytes::from_static(b"abc"));
        assert!(b.as_mut_ptr().is_none());
        assert!(b.as_mut_slice().is_none());
        assert_eq!(b.as_slice(), b"abc");
    }

    #[test]
    fn pointer_is_stable_across_moves() {
        let b = OpBuffer::from(vec![1u8; 1024]);
        let p = b.as_ptr();
        let moved = Box::new(b);
        assert_eq!(moved.as_ptr(), p);
    }

    #[test]
    fn empty_buffers() {
        let mut e = OpBuffer::empty();
        assert!(e.is_empty());
        assert_eq!(e.as_slice(), &[] as &[u8]);
        assert_eq!(e.as_mut_slice().unwrap().len(), 0);
    }
}
