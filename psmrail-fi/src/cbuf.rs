//! The application's own memory as an operation buffer: libfabric hands
//! a provider `(pointer, length)` and promises to leave the memory alone
//! until the operation completes, which is the [`StableRegion`] contract.
//! Sends and receives so move no bytes on the way in or out.

use psmrail::engine::{BufferOwner, OpBuffer, StableRegion};
use std::sync::Arc;

/// `len` bytes of application memory at `ptr`.
#[derive(Debug)]
pub(crate) struct CBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the memory belongs to the application, which hands it to the
// operation (any thread may complete it) under libfabric's contract.
unsafe impl Send for CBuf {}
// SAFETY: as above; the engine is the only writer while the operation runs.
unsafe impl Sync for CBuf {}

// SAFETY: the pointer and length never change; libfabric's contract keeps
// the memory valid and untouched by the application until the operation's
// completion is reported.
unsafe impl StableRegion for CBuf {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// `len` bytes of application memory at `ptr` as a region that stays in
/// place (registered memory peers reach: `fi_mr_reg`).
///
/// # Safety
/// `ptr` is valid for reads and writes of `len` bytes for as long as the
/// region lives (until the memory region is closed and the operations on
/// it are over), as libfabric's registration contract says.
pub(crate) unsafe fn region(ptr: *mut u8, len: usize) -> Arc<dyn StableRegion> {
    let ptr = if ptr.is_null() {
        std::ptr::NonNull::dangling().as_ptr()
    } else {
        ptr
    };
    Arc::new(CBuf { ptr, len })
}

/// An operation buffer over `len` bytes at `ptr` (empty for a zero length).
///
/// # Safety
/// `ptr` is valid for reads and writes of `len` bytes until the operation
/// that takes the buffer completes, and nothing else touches it meanwhile.
pub(crate) unsafe fn op_buffer(ptr: *mut u8, len: usize) -> OpBuffer {
    if len == 0 || ptr.is_null() {
        return OpBuffer::empty();
    }
    OpBuffer::new(BufferOwner::Region(Arc::new(CBuf { ptr, len })))
}

/// `len` bytes of application memory at `ptr` as a region several
/// operations' buffers are windows of (a multi-receive block); `None` for
/// a null pointer or a zero length.
///
/// # Safety
/// As [`op_buffer`], until every operation over the region completed.
pub(crate) unsafe fn block(ptr: *mut u8, len: usize) -> Option<Arc<dyn StableRegion>> {
    if len == 0 || ptr.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    Some(unsafe { region(ptr, len) })
}
