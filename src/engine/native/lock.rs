//! The endpoint lock: a test-and-test-and-set spin lock with poisoning.
//!
//! Every post and every progress step takes the endpoint's lock, so its
//! cost is on the path of every message. An uncontended `std::sync::Mutex`
//! costs two atomic read-modify-writes (the unlock must swap to learn
//! whether to wake a sleeper); this lock releases with a plain store, one
//! read-modify-write per lock/unlock pair. Holders are short (one PSM call
//! plus bookkeeping, or one bounded progress step), so waiters spin, then
//! yield the CPU; nobody sleeps in the kernel. A holder that panics (an AM
//! handler's panic re-raised after the PSM call that ran it) poisons the
//! lock, as `std::sync::Mutex` would: the state may be inconsistent.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// Spins before each yield while the lock is held.
const SPINS: u32 = 64;

/// A spin lock around `T`.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    poisoned: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard
// exists at a time (the `locked` flag, taken with Acquire and released with
// Release, orders every access); `T: Send` suffices to hand it between
// threads, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; `T: Send`.
unsafe impl<T: Send> Send for SpinLock<T> {}

/// Why the lock could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LockError {
    /// Another holder has it (`try_lock` only).
    WouldBlock,
    /// A holder panicked.
    Poisoned,
}

impl<T> SpinLock<T> {
    /// An unlocked lock around `value`.
    pub fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Result<SpinGuard<'_, T>, LockError> {
        if self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(LockError::WouldBlock);
        }
        self.guard()
    }

    /// Takes the lock, spinning (and yielding) while it is held.
    #[inline]
    pub fn lock(&self) -> Result<SpinGuard<'_, T>, LockError> {
        loop {
            match self.try_lock() {
                Err(LockError::WouldBlock) => self.wait(),
                other => return other,
            }
        }
    }

    #[cold]
    fn wait(&self) {
        let mut spins = 0;
        while self.locked.load(Ordering::Relaxed) {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                spins = 0;
                std::thread::yield_now();
            }
        }
    }

    #[inline]
    fn guard(&self) -> Result<SpinGuard<'_, T>, LockError> {
        let guard = SpinGuard {
            lock: self,
            panicking: std::thread::panicking(),
        };
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(LockError::Poisoned);
        }
        Ok(guard)
    }

    /// The value, without locking: `&mut self` proves no guard exists.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Whether a holder panicked.
    #[cfg(test)]
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }
}

/// The lock, held; released when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// Whether the thread was already unwinding when it took the lock.
    panicking: bool,
}

impl<T> SpinGuard<'_, T> {
    /// The value even though the lock is poisoned (closing must still
    /// release PSM's resources).
    pub fn ignore_poison(lock: &SpinLock<T>) -> SpinGuard<'_, T> {
        loop {
            if lock
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard {
                    lock,
                    panicking: std::thread::panicking(),
                };
            }
            lock.wait();
        }
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock: no other reference to the value
        // exists while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if !self.panicking && std::thread::panicking() {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_and_counts() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), 40_000);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let lock = SpinLock::new(1);
        let g = lock.try_lock().unwrap();
        assert!(matches!(lock.try_lock(), Err(LockError::WouldBlock)));
        drop(g);
        assert_eq!(*lock.try_lock().unwrap(), 1);
    }

    #[test]
    fn a_panicking_holder_poisons() {
        let lock = Arc::new(SpinLock::new(5));
        let l = lock.clone();
        let r = std::thread::spawn(move || {
            let _g = l.lock().unwrap();
            panic!("holder panics (expected by the test)");
        })
        .join();
        assert!(r.is_err());
        assert!(lock.is_poisoned());
        assert!(matches!(lock.lock(), Err(LockError::Poisoned)));
        assert!(matches!(lock.try_lock(), Err(LockError::Poisoned)));
        // Still usable for cleanup.
        assert_eq!(*SpinGuard::ignore_poison(&lock), 5);
        assert!(!lock.locked.load(Ordering::Relaxed), "released");
    }
}
