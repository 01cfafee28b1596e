//! The endpoint lock: a test-and-test-and-set spin lock that knows its
//! holder, with poisoning.
//!
//! Every post and every progress step takes the endpoint's lock, so its
//! cost is on the path of every message. An uncontended `std::sync::Mutex`
//! costs two atomic read-modify-writes (the unlock must swap to learn
//! whether to wake a sleeper); this lock releases with a plain store, one
//! read-modify-write per lock/unlock pair. Holders are short (one PSM call
//! plus bookkeeping, or one bounded progress step), so waiters spin, then
//! yield the CPU; nobody sleeps in the kernel.
//!
//! The lock word holds the holder's thread token (the address of a
//! thread-local), so a thread that comes back for a lock it already holds
//! (an AM handler, a waker or a buffer's drop calling into the endpoint
//! from inside a PSM call) gets [`LockError::Reentry`] instead of spinning
//! on itself forever; no per-thread bookkeeping is needed to know it. A
//! holder that panics (an AM handler's panic re-raised after the PSM call
//! that ran it) poisons the lock, as `std::sync::Mutex` would: the state
//! may be inconsistent.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Spins before each yield while the lock is held.
const SPINS: u32 = 64;

thread_local! {
    /// Its address is the calling thread's token (never 0, distinct per
    /// live thread).
    static TOKEN: u8 = const { 0 };
}

/// The calling thread's token.
#[inline(always)]
fn token() -> usize {
    TOKEN.with(|t| t as *const u8 as usize)
}

/// A spin lock around `T`.
pub(crate) struct SpinLock<T> {
    /// 0 when free, else the holder's thread token.
    holder: AtomicUsize,
    poisoned: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard
// exists at a time (the `holder` word, taken with Acquire and released with
// Release, orders every access); `T: Send` suffices to hand it between
// threads, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; `T: Send`.
unsafe impl<T: Send> Send for SpinLock<T> {}

/// Why the lock could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LockError {
    /// Another thread holds it (`try_lock` only).
    WouldBlock,
    /// The calling thread holds it already.
    Reentry,
    /// A holder panicked.
    Poisoned,
}

impl<T> SpinLock<T> {
    /// An unlocked lock around `value`.
    pub(super) fn new(value: T) -> Self {
        SpinLock {
            holder: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if it is free; `me` is the calling thread's token.
    #[inline(always)]
    fn acquire(&self, me: usize) -> Result<(), LockError> {
        match self
            .holder
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(h) if h == me => Err(LockError::Reentry),
            Err(_) => Err(LockError::WouldBlock),
        }
    }

    /// Takes the lock if no other thread holds it.
    #[inline(always)]
    pub(super) fn try_lock(&self) -> Result<SpinGuard<'_, T>, LockError> {
        self.acquire(token())?;
        self.guard()
    }

    /// Takes the lock, spinning (and yielding) while another thread holds
    /// it; `Reentry` if this thread does.
    #[inline(always)]
    pub(super) fn lock(&self) -> Result<SpinGuard<'_, T>, LockError> {
        let me = token();
        loop {
            match self.acquire(me) {
                Ok(()) => return self.guard(),
                Err(LockError::WouldBlock) => self.wait(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes the lock even if it is poisoned (closing must still release
    /// PSM's resources); `None` if this thread holds it already.
    pub(super) fn lock_ignoring_poison(&self) -> Option<SpinGuard<'_, T>> {
        let me = token();
        loop {
            match self.acquire(me) {
                Ok(()) => {
                    return Some(SpinGuard {
                        lock: self,
                        panicking: std::thread::panicking(),
                    })
                }
                Err(LockError::WouldBlock) => self.wait(),
                Err(_) => return None,
            }
        }
    }

    #[cold]
    fn wait(&self) {
        let mut spins = 0;
        while self.holder.load(Ordering::Relaxed) != 0 {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                spins = 0;
                std::thread::yield_now();
            }
        }
    }

    #[inline(always)]
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
    pub(super) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Whether a holder panicked.
    #[cfg(test)]
    pub(super) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }
}

/// The lock, held; released when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// Whether the thread was already unwinding when it took the lock.
    panicking: bool,
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
    #[inline(always)]
    fn drop(&mut self) {
        if !self.panicking && std::thread::panicking() {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        self.lock.holder.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_and_counts() {
        // Fewer under miri, which explores interleavings slowly.
        let n: u64 = if cfg!(miri) { 200 } else { 10_000 };
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..n {
                        *lock.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), 4 * n);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let lock = SpinLock::new(1);
        let g = lock.try_lock().unwrap();
        // The holder itself is told it holds the lock.
        assert!(matches!(lock.try_lock(), Err(LockError::Reentry)));
        assert!(matches!(lock.lock(), Err(LockError::Reentry)));
        assert!(lock.lock_ignoring_poison().is_none());
        // Another thread is told to wait.
        std::thread::scope(|s| {
            s.spawn(|| assert!(matches!(lock.try_lock(), Err(LockError::WouldBlock))));
        });
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
        assert_eq!(*lock.lock_ignoring_poison().unwrap(), 5);
        assert_eq!(lock.holder.load(Ordering::Relaxed), 0, "released");
    }
}
