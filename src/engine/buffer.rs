//! Owned memory handed to an engine for the whole life of an operation.
//!
//! PSM (and the soft engine) read a send buffer and write a receive buffer
//! *after* the call that posted them returns. To make that safe without an
//! `unsafe` API, an operation moves its memory into an [`OpBuffer`]; the
//! engine keeps the `OpBuffer` in its in-flight table until the request is
//! finished and hands it back inside the completion. If the operation's
//! future is dropped first, the completion (and with it the memory) lands in
//! the reactor's completion table and is freed there, after the engine is
//! done (`ARCHITECTURE.md`, principle 3).
//!
//! Heap memory does not move when its owner moves: the data pointer of a
//! `Vec<u8>`, `Bytes` or `BytesMut` stays valid as long as the value is not
//! grown or dropped, which `OpBuffer` guarantees by never exposing `&mut` to
//! the owner while the engine holds it.

use bytes::{Bytes, BytesMut};
use std::cell::RefCell;
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
///
/// # One pointer wide
///
/// The owner and its window live in a box, and the empty buffer is no box
/// at all: an `OpBuffer` is 8 bytes. An operation moves its buffer many
/// times (into the engine's in-flight table, out through the completion,
/// the future's output and the caller's variables); at 56 bytes each move
/// went through memory, and each read-back of a struct another function had
/// just written stalled the path from a message's arrival to the reply.
/// One pointer travels in a register: the API's 8 B ping-pong went from
/// 1.36x to about 1.2x of raw PSM (BENCHMARKING.md, "The API"). The price is one
/// small box when a buffer is made from a `Vec`, `Bytes`, `BytesMut` or
/// region, taken from a per-thread stock of the boxes of dropped buffers
/// (up to 16), so that steady traffic allocates none: a program may turn
/// its `Vec` into a buffer and back for every message.
///
/// ```
/// use psmrail::engine::OpBuffer;
/// assert_eq!(std::mem::size_of::<OpBuffer>(), std::mem::size_of::<usize>());
/// ```
pub struct OpBuffer(Option<Box<Window>>);

/// What an [`OpBuffer`] holds: the owner and the window of it.
#[derive(Debug)]
struct Window {
    owner: BufferOwner,
    offset: usize,
    len: usize,
}

impl Window {
    #[inline]
    fn base_ptr(&self) -> *const u8 {
        match &self.owner {
            BufferOwner::Vec(v) => v.as_ptr(),
            BufferOwner::Bytes(b) => b.as_ptr(),
            BufferOwner::BytesMut(b) => b.as_ptr(),
            BufferOwner::Region(r) => r.as_ptr(),
        }
    }

    #[inline]
    fn as_ptr(&self) -> *const u8 {
        self.base_ptr().wrapping_add(self.offset)
    }

    #[inline]
    fn as_mut_ptr(&mut self) -> Option<*mut u8> {
        let base = match &mut self.owner {
            BufferOwner::Vec(v) => v.as_mut_ptr(),
            BufferOwner::Bytes(_) => return None,
            BufferOwner::BytesMut(b) => b.as_mut_ptr(),
            BufferOwner::Region(r) => r.as_ptr(),
        };
        Some(base.wrapping_add(self.offset))
    }
}

impl std::fmt::Debug for OpBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("OpBuffer(empty)"),
            Some(w) => f
                .debug_struct("OpBuffer")
                .field("owner", &w.owner)
                .field("offset", &w.offset)
                .field("len", &w.len)
                .finish(),
        }
    }
}

/// Where an empty window points: never read or written (zero bytes).
#[inline]
fn dangling() -> *mut u8 {
    std::ptr::NonNull::<u8>::dangling().as_ptr()
}

/// Boxes of dropped buffers each thread keeps for the next buffers it
/// makes: enough for the buffers a thread has in flight at once in most
/// programs, few enough that the stock is at most a few KiB.
const SPARE_BOXES: usize = 16;

thread_local! {
    /// This thread's stock of spare boxes; each holds an empty `Vec`.
    /// The boxes themselves are the point (their allocations are reused),
    /// hence a vector of boxes.
    #[allow(clippy::vec_box)]
    static SPARE: RefCell<Vec<Box<Window>>> = const { RefCell::new(Vec::new()) };
}

/// `window` in a box: a spare one if this thread has one.
#[inline]
fn boxed(window: Window) -> Box<Window> {
    match SPARE.try_with(|s| s.borrow_mut().pop()) {
        Ok(Some(mut spare)) => {
            // Drops the placeholder, an empty `Vec` (no deallocation).
            *spare = window;
            spare
        }
        _ => Box::new(window),
    }
}

/// The owner out of `b`, and `b` into this thread's stock (or freed when
/// the stock is full or the thread is exiting).
fn unboxed(mut b: Box<Window>) -> BufferOwner {
    let owner = std::mem::replace(&mut b.owner, BufferOwner::Vec(Vec::new()));
    // A closure that is not run (the thread-local is gone) drops `b`.
    let _ = SPARE.try_with(move |s| {
        let mut stock = s.borrow_mut();
        if stock.len() < SPARE_BOXES {
            stock.push(b);
        }
    });
    owner
}

impl Drop for OpBuffer {
    #[inline]
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            // The owner (the memory) is dropped here, after the box went
            // back to the stock: its drop may run any code.
            drop(unboxed(b));
        }
    }
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
        OpBuffer(Some(boxed(Window {
            owner,
            offset: 0,
            len,
        })))
    }

    /// An empty buffer (zero-length sends and receives); it allocates
    /// nothing.
    #[inline]
    pub fn empty() -> Self {
        OpBuffer(None)
    }

    /// Narrows the buffer to `[offset, offset + len)` of its current window;
    /// `None` if that does not fit.
    pub fn window(mut self, offset: usize, len: usize) -> Option<Self> {
        let end = offset.checked_add(len)?;
        match &mut self.0 {
            None => (end == 0).then_some(self),
            Some(w) => {
                if end > w.len {
                    return None;
                }
                w.offset += offset;
                w.len = len;
                Some(self)
            }
        }
    }

    /// Length of the window in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |w| w.len)
    }

    /// Whether the window is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offset of the window in its owner.
    pub fn offset(&self) -> usize {
        self.0.as_ref().map_or(0, |w| w.offset)
    }

    /// Pointer to the window, for engines handing it to PSM or a socket.
    /// Valid for `len()` bytes for as long as this `OpBuffer` lives.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        match &self.0 {
            Some(w) => w.as_ptr(),
            None => dangling(),
        }
    }

    /// Whether the window may be written (receives): every owner but
    /// shared immutable `Bytes`, whose [`as_mut_ptr`](Self::as_mut_ptr) is
    /// `None`.
    #[inline]
    pub fn is_writable(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|w| !matches!(w.owner, BufferOwner::Bytes(_)))
    }

    /// Mutable pointer to the window, for receives. `None` for shared
    /// immutable `Bytes`, which cannot be written.
    #[inline]
    pub fn as_mut_ptr(&mut self) -> Option<*mut u8> {
        match &mut self.0 {
            Some(w) => w.as_mut_ptr(),
            None => Some(dangling()),
        }
    }

    /// The window's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        let Some(w) = &self.0 else {
            return &[];
        };
        if w.len == 0 {
            return &[];
        }
        // SAFETY: the window lies inside the owner's memory (checked by
        // `window`), the owner is alive for the borrow of `self`, and no
        // `&mut` to the owner exists while `self` is borrowed.
        unsafe { std::slice::from_raw_parts(w.as_ptr(), w.len) }
    }

    /// The window's bytes, mutably (`None` for shared `Bytes`).
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        let Some(w) = &mut self.0 else {
            return Some(&mut []);
        };
        let len = w.len;
        let ptr = w.as_mut_ptr()?;
        if len == 0 {
            return Some(&mut []);
        }
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only
        // access path; regions promise exclusive use while posted.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }

    /// The owner, whole (the window is forgotten); an empty `Vec` for the
    /// empty buffer.
    pub fn into_owner(mut self) -> BufferOwner {
        match self.0.take() {
            Some(b) => unboxed(b),
            None => BufferOwner::Vec(Vec::new()),
        }
    }

    /// The vector back, if the owner was one (the empty buffer gives an
    /// empty vector).
    #[inline]
    pub fn into_vec(self) -> Option<Vec<u8>> {
        match self.into_owner() {
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
    fn the_empty_buffer_is_no_allocation_and_behaves_as_an_empty_vec() {
        let e = OpBuffer::default();
        assert!(e.0.is_none());
        assert_eq!(e.len(), 0);
        assert_eq!(e.offset(), 0);
        assert!(e.is_writable());
        assert!(e.window(0, 1).is_none());
        let w = OpBuffer::empty()
            .window(0, 0)
            .expect("an empty window of empty");
        assert!(w.is_empty());
        assert_eq!(OpBuffer::empty().into_vec(), Some(Vec::new()));
        assert!(matches!(OpBuffer::empty().into_owner(), BufferOwner::Vec(v) if v.is_empty()));
        assert_eq!(format!("{:?}", OpBuffer::empty()), "OpBuffer(empty)");
    }

    #[test]
    fn dropped_buffers_lend_their_boxes_to_new_ones() {
        // On a fresh thread, so that other tests' buffers do not count.
        std::thread::spawn(|| {
            let first = OpBuffer::from(vec![1u8; 4]);
            let addr = first.0.as_deref().map(|w| w as *const Window);
            assert_eq!(first.into_vec(), Some(vec![1u8; 4]));
            let second = OpBuffer::from(Bytes::from_static(b"xy"));
            assert_eq!(second.0.as_deref().map(|w| w as *const Window), addr);
            assert_eq!(second.as_slice(), b"xy");
            drop(second);
            // The stock is bounded.
            let many: Vec<OpBuffer> = (0..3 * SPARE_BOXES)
                .map(|_| OpBuffer::from(vec![0u8; 1]))
                .collect();
            drop(many);
            assert_eq!(SPARE.with(|s| s.borrow().len()), SPARE_BOXES);
            // A window that does not fit gives its box back too.
            assert!(OpBuffer::from(vec![0u8; 2]).window(1, 2).is_none());
            assert_eq!(SPARE.with(|s| s.borrow().len()), SPARE_BOXES);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn buffers_dropped_on_another_thread_keep_their_bytes_and_stock() {
        let made: Vec<OpBuffer> = (0..8u8).map(|i| OpBuffer::from(vec![i; 3])).collect();
        let back = std::thread::spawn(move || {
            let sums: Vec<u8> = made.iter().map(|b| b.as_slice().iter().sum()).collect();
            drop(made);
            // This thread's stock took the boxes; a new buffer uses one.
            let stocked = SPARE.with(|s| s.borrow().len());
            let fresh = OpBuffer::from(vec![9u8; 2]);
            assert_eq!(SPARE.with(|s| s.borrow().len()), stocked - 1);
            assert_eq!(fresh.as_slice(), &[9, 9]);
            (sums, stocked)
        })
        .join()
        .unwrap();
        assert_eq!(back.0, (0..8u8).map(|i| 3 * i).collect::<Vec<_>>());
        assert_eq!(back.1, 8);
    }

    #[test]
    fn an_empty_vec_keeps_its_capacity() {
        let b = OpBuffer::from(Vec::with_capacity(64));
        assert!(b.is_empty());
        assert_eq!(b.into_vec().map(|v| v.capacity() >= 64), Some(true));
    }

    #[test]
    fn a_window_narrows_in_place_and_debug_shows_it() {
        let b = OpBuffer::from(vec![5u8; 8]);
        let p = b.as_ptr();
        let w = b.window(2, 3).unwrap();
        assert_eq!(w.as_ptr(), p.wrapping_add(2));
        assert_eq!(
            format!("{w:?}"),
            "OpBuffer { owner: Vec(8 B), offset: 2, len: 3 }"
        );
    }

    #[test]
    fn empty_buffers() {
        let mut e = OpBuffer::empty();
        assert!(e.is_empty());
        assert_eq!(e.as_slice(), &[] as &[u8]);
        assert_eq!(e.as_mut_slice().unwrap().len(), 0);
    }
}
