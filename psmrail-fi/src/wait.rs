//! File-descriptor wait objects (`FI_WAIT_FD`) of completion queues,
//! counters and event queues, and `fi_trywait`.
//!
//! Each such object owns an eventfd (non-blocking, close-on-exec) that
//! `fi_control(FI_GETWAIT)` hands out. The object signals it when it gets
//! something to read: a queued entry (CQ, EQ) or a changed value (counter).
//! A flag remembers that the fd was written, so a burst of entries costs one
//! write, and an object without an fd pays one empty check per entry.
//!
//! The fd is level-triggered, so it must be cleared once the object is
//! empty: `fi_trywait` clears it and then looks again (answering
//! `-FI_EAGAIN`, with the fd readable again, when something is there), and
//! a read of an empty CQ or EQ clears it too. What is pushed while it is
//! being cleared either sees the flag down and writes, or is seen by the
//! second look.
//!
//! Progress: with `FI_PROGRESS_AUTO` the domain's progress thread queues
//! the completions and so signals the fd by itself. With manual progress
//! nothing moves while the application sleeps in `poll`; `fi_trywait` runs
//! one progress round of the domain before it looks (as a read does), and
//! the application must come back (a `poll` timeout, then `fi_trywait` or
//! a read) for operations to advance.

use crate::entry::{guard, log_info, Errno, FiResult};
use crate::obj;
use crate::sys;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Weak};

/// An eventfd and whether it has been written since it was last cleared.
#[derive(Debug)]
pub(crate) struct WaitFd {
    fd: EventFd,
    signalled: AtomicBool,
}

impl WaitFd {
    /// A new, unsignalled wait object.
    pub(crate) fn new() -> FiResult<Arc<WaitFd>> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| {
            log_info(&format!("FI_WAIT_FD: eventfd: {e}"));
            Errno(e as i32 as u32)
        })?;
        Ok(Arc::new(WaitFd {
            fd,
            signalled: AtomicBool::new(false),
        }))
    }

    /// The descriptor `FI_GETWAIT` hands out.
    pub(crate) fn raw(&self) -> c_int {
        self.fd.as_raw_fd()
    }

    /// Makes the fd readable (one write until it is cleared).
    pub(crate) fn signal(&self) {
        if !self.signalled.swap(true, SeqCst) {
            // It cannot fail short of the counter's 2^64 - 1 limit, which
            // one write per clearing never reaches.
            let _ = self.fd.write(1);
        }
    }

    /// Clears the fd, then asks `pending` whether the object has something;
    /// if so the fd is signalled again. Returns `pending`'s answer.
    pub(crate) fn reset(&self, pending: impl FnOnce() -> bool) -> bool {
        if self.signalled.load(SeqCst) {
            // Non-blocking: an empty eventfd answers EAGAIN, which is fine.
            let _ = self.fd.read();
            self.signalled.store(false, SeqCst);
        }
        let p = pending();
        if p {
            self.signal();
        }
        p
    }
}

/// The notifier a psmrail queue or counter calls after each change: it
/// signals the fd while the C object is open (the psmrail object may
/// outlive the C one in clones; the fd closes with the C object).
pub(crate) fn notifier(w: &Arc<WaitFd>) -> impl Fn() + Send + Sync + 'static {
    let weak: Weak<WaitFd> = Arc::downgrade(w);
    move || {
        if let Some(w) = weak.upgrade() {
            w.signal();
        }
    }
}

/// Where a C object keeps its wait object: `None` unless it was opened with
/// `FI_WAIT_FD`, and again `None` once it is closed (the fd closes then).
#[derive(Debug, Default)]
pub(crate) struct WaitSlot(Mutex<Option<Arc<WaitFd>>>);

impl WaitSlot {
    pub(crate) fn new(w: Option<Arc<WaitFd>>) -> WaitSlot {
        WaitSlot(Mutex::new(w))
    }

    /// The wait object, if the C object has one and is open.
    pub(crate) fn get(&self) -> Option<Arc<WaitFd>> {
        obj::lock(&self.0).clone()
    }

    /// Closes the fd (with the object).
    pub(crate) fn close(&self) {
        obj::lock(&self.0).take();
    }

    /// `fi_control(FI_GETWAIT)`: writes the fd to `arg` (an `int *`).
    ///
    /// # Safety
    /// `arg` is null or points to a writable `int`.
    pub(crate) unsafe fn getwait(&self, arg: *mut std::ffi::c_void) -> FiResult<c_int> {
        let w = self.get().ok_or(Errno::NOSYS)?;
        if arg.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: the caller's promise (FI_GETWAIT takes an `int *` for
        // FI_WAIT_FD objects).
        unsafe { arg.cast::<c_int>().write_unaligned(w.raw()) };
        Ok(0)
    }
}

/// `fi_trywait` (the fabric's `trywait`): 0 when every object is empty and
/// its fd cleared, `-FI_EAGAIN` when one has something to read. Every fid
/// must be an open CQ, counter or EQ with an `FI_WAIT_FD` wait object
/// (`-FI_EINVAL` otherwise).
pub(crate) unsafe extern "C" fn trywait(
    _fabric: *mut sys::fid_fabric,
    fids: *mut *mut sys::fid,
    count: c_int,
) -> c_int {
    guard("fi_trywait", || {
        if count < 0 || (count > 0 && fids.is_null()) {
            return Err(Errno::INVAL);
        }
        for i in 0..count as usize {
            // SAFETY: `fids` holds `count` fid pointers (the contract).
            let fid = unsafe { *fids.add(i) };
            let busy = match obj::class_of(fid as usize) {
                Some(sys::FI_CLASS_CQ) => {
                    // SAFETY: CqObj is the block type of FI_CLASS_CQ.
                    let c: &crate::cq::CqObj = unsafe { obj::cast(fid, sys::FI_CLASS_CQ)? };
                    c.trywait()?
                }
                Some(sys::FI_CLASS_CNTR) => {
                    // SAFETY: CntrObj is the block type of FI_CLASS_CNTR.
                    let c: &crate::cntr::CntrObj = unsafe { obj::cast(fid, sys::FI_CLASS_CNTR)? };
                    c.trywait()?
                }
                Some(sys::FI_CLASS_EQ) => {
                    // SAFETY: EqObj is the block type of FI_CLASS_EQ.
                    let e: &crate::eq::EqObj = unsafe { obj::cast(fid, sys::FI_CLASS_EQ)? };
                    e.trywait()?
                }
                _ => return Err(Errno::INVAL),
            };
            if busy {
                return Err(Errno::AGAIN);
            }
        }
        Ok(0)
    })
}
