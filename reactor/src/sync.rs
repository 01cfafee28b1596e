//! Synchronisation shims: `std` types normally, `loom` types under
//! `--cfg loom`.
//!
//! Only the lock-free parts of the crate (the completion table, its slab
//! and the sleep gate) go through this module, so that the loom tests in
//! `tests/loom.rs` model every atomic and every access to a shared cell.
//! [`UnsafeCell`] wraps `std::cell::UnsafeCell` with loom's closure-based
//! API (`with` / `with_mut`), so the same code compiles against both.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` with the closure API of `loom::cell::UnsafeCell`.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One step of a (rare, bounded) wait for another thread to release a
/// per-slot flag. Under loom this is a scheduling point.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
}
