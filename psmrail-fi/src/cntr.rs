//! `fi_cntr_open`: counters over psmrail's [`Counter`] (read, readerr,
//! add, set, adderr, seterr, wait). Reading a counter makes one progress
//! round in manual progress; `fi_cntr_wait` waits up to its timeout
//! (`-FI_ETIMEDOUT`) and answers `-FI_EAVAIL` when the error count moves.
//! A counter opened with `FI_WAIT_FD` signals its eventfd at every change
//! of either count (`crate::wait`); `fi_trywait` answers `-FI_EAGAIN` when
//! a count changed since the last `fi_trywait` on it.

use crate::domain::DomainObj;
use crate::entry::{guard, guard_value, Errno};
use crate::obj::{self, fi_ops, Children, FiOps, Table};
use crate::sys;
use crate::wait::{WaitFd, WaitSlot};
use psmrail::fabric::Counter;
use psmrail::ErrorKind;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::time::Duration;

/// A C counter.
#[repr(C)]
pub(crate) struct CntrObj {
    pub(crate) fid: sys::fid_cntr,
    domain: *const DomainObj,
    /// Endpoints bound to it.
    pub(crate) children: Children,
    pub(crate) counter: Mutex<Option<Counter>>,
    wait: WaitSlot,
    /// The success and error counts the last `fi_trywait` saw.
    seen: Mutex<(u64, u64)>,
}

// SAFETY: the domain pointer is a kept block; only its atomic counter is
// touched through it.
unsafe impl Send for CntrObj {}
// SAFETY: as above.
unsafe impl Sync for CntrObj {}

impl CntrObj {
    /// The address of the counter's domain block.
    pub(crate) fn domain_addr(&self) -> usize {
        self.domain as usize
    }

    pub(crate) fn rust(&self) -> crate::entry::FiResult<Counter> {
        obj::lock(&self.counter).clone().ok_or(Errno::INVAL)
    }

    /// `fi_trywait` on this counter: whether a count changed since the
    /// last `fi_trywait` (reading the success count progresses once in
    /// manual progress); the fd is cleared when none did.
    pub(crate) fn trywait(&self) -> crate::entry::FiResult<bool> {
        let w = self.wait.get().ok_or(Errno::INVAL)?;
        let c = self.rust()?;
        Ok(w.reset(|| {
            let now = (c.read(), c.read_err());
            let mut seen = obj::lock(&self.seen);
            let changed = *seen != now;
            *seen = now;
            changed
        }))
    }
}

static CNTR_FI_OPS: FiOps = FiOps::new(fi_ops(close, None, Some(control)));
static CNTR_OPS: Table<sys::fi_ops_cntr> = Table::new(sys::fi_ops_cntr {
    size: std::mem::size_of::<sys::fi_ops_cntr>(),
    read: Some(read),
    readerr: Some(readerr),
    add: Some(add),
    set: Some(set),
    wait: Some(wait),
    adderr: Some(adderr),
    seterr: Some(seterr),
});

pub(crate) unsafe extern "C" fn open(
    domain: *mut sys::fid_domain,
    attr: *mut sys::fi_cntr_attr,
    cntr: *mut *mut sys::fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard("fi_cntr_open", || {
        // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
        let d: &DomainObj = unsafe { obj::cast(domain.cast(), sys::FI_CLASS_DOMAIN)? };
        if cntr.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: null or a valid attribute structure.
        if let Some(a) = unsafe { attr.as_ref() } {
            if a.events != sys::FI_CNTR_EVENTS_COMP {
                return Err(Errno::NOSYS);
            }
            match a.wait_obj {
                sys::FI_WAIT_NONE
                | sys::FI_WAIT_UNSPEC
                | sys::FI_WAIT_MUTEX_COND
                | sys::FI_WAIT_YIELD
                | sys::FI_WAIT_FD => {}
                // FI_WAIT_SET (no wait sets) and FI_WAIT_POLLFD.
                _ => return Err(Errno::NOSYS),
            }
            if a.flags != 0 {
                return Err(Errno::BADFLAGS);
            }
        }
        // SAFETY: as above.
        let wants_fd = unsafe { attr.as_ref() }.is_some_and(|a| a.wait_obj == sys::FI_WAIT_FD);
        let wait = if wants_fd { Some(WaitFd::new()?) } else { None };
        let rust = d.rust()?.counter()?;
        if let Some(w) = &wait {
            rust.set_notify(crate::wait::notifier(w));
        }
        d.children.add();
        let o = obj::make(
            CntrObj {
                fid: sys::fid_cntr {
                    fid: obj::fid_header(sys::FI_CLASS_CNTR, context, &CNTR_FI_OPS),
                    ops: CNTR_OPS.ptr(),
                },
                domain: d,
                children: Children::default(),
                counter: Mutex::new(Some(rust)),
                wait: WaitSlot::new(wait),
                seen: Mutex::new((0, 0)),
            },
            sys::FI_CLASS_CNTR,
        );
        // SAFETY: checked non-null.
        unsafe { *cntr = o.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(cntr)", || {
        // SAFETY: CntrObj is the block type of FI_CLASS_CNTR.
        let c: &CntrObj = unsafe { obj::cast(fid, sys::FI_CLASS_CNTR)? };
        if c.children.any() {
            return Err(Errno::BUSY);
        }
        obj::lock(&c.counter).take();
        c.wait.close();
        // SAFETY: the domain block is kept for the process.
        unsafe { (*c.domain).children.remove() };
        obj::retire(fid as usize);
        Ok(0)
    })
}

unsafe extern "C" fn control(fid: *mut sys::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control(cntr)", || {
        // SAFETY: CntrObj is the block type of FI_CLASS_CNTR.
        let c: &CntrObj = unsafe { obj::cast(fid, sys::FI_CLASS_CNTR)? };
        match command as u32 {
            // The eventfd of an FI_WAIT_FD counter; -FI_ENOSYS for the others.
            // SAFETY: FI_GETWAIT's argument is an `int *` for FD objects.
            sys::FI_GETWAIT => unsafe { c.wait.getwait(arg) },
            _ => Err(Errno::NOSYS),
        }
    })
}

/// The counter behind `cntr`, if it is open.
///
/// # Safety
/// `cntr` is a counter of this library (libfabric's wrappers read it).
unsafe fn counter(cntr: *mut sys::fid_cntr) -> Option<Counter> {
    // SAFETY: the caller's promise.
    let c: &CntrObj = unsafe { obj::block(cntr).ok()? };
    c.rust().ok()
}

unsafe extern "C" fn read(cntr: *mut sys::fid_cntr) -> u64 {
    guard_value("fi_cntr_read", 0, || {
        // SAFETY: a counter of this library (libfabric's wrapper read it).
        unsafe { counter(cntr) }.map_or(0, |c| c.read())
    })
}

unsafe extern "C" fn readerr(cntr: *mut sys::fid_cntr) -> u64 {
    guard_value("fi_cntr_readerr", 0, || {
        // SAFETY: a counter of this library (libfabric's wrapper read it).
        unsafe { counter(cntr) }.map_or(0, |c| c.read_err())
    })
}

/// Applies `f` to the counter, `-FI_EINVAL` when closed.
///
/// # Safety
/// As [`counter`].
unsafe fn apply(what: &str, cntr: *mut sys::fid_cntr, f: impl FnOnce(&Counter)) -> c_int {
    guard(what, || {
        // SAFETY: the caller's promise.
        let c = unsafe { counter(cntr) }.ok_or(Errno::INVAL)?;
        f(&c);
        Ok(0)
    })
}

unsafe extern "C" fn add(cntr: *mut sys::fid_cntr, value: u64) -> c_int {
    // SAFETY: a counter of this library.
    unsafe { apply("fi_cntr_add", cntr, |c| c.add(value)) }
}

unsafe extern "C" fn set(cntr: *mut sys::fid_cntr, value: u64) -> c_int {
    // SAFETY: a counter of this library.
    unsafe { apply("fi_cntr_set", cntr, |c| c.set(value)) }
}

unsafe extern "C" fn adderr(cntr: *mut sys::fid_cntr, value: u64) -> c_int {
    // SAFETY: a counter of this library.
    unsafe { apply("fi_cntr_adderr", cntr, |c| c.add_err(value)) }
}

unsafe extern "C" fn seterr(cntr: *mut sys::fid_cntr, value: u64) -> c_int {
    // SAFETY: a counter of this library.
    unsafe { apply("fi_cntr_seterr", cntr, |c| c.set_err(value)) }
}

unsafe extern "C" fn wait(cntr: *mut sys::fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard("fi_cntr_wait", || {
        // SAFETY: a counter of this library.
        let c = unsafe { counter(cntr) }.ok_or(Errno::INVAL)?;
        let t = (timeout >= 0).then(|| Duration::from_millis(timeout as u64));
        match c.wait(threshold, t) {
            Ok(()) => Ok(0),
            Err(e) if e.kind() == ErrorKind::TimedOut => Err(Errno::TIMEDOUT),
            Err(e) if e.kind() == ErrorKind::Avail => Err(Errno::AVAIL),
            Err(e) => Err(Errno::from(e)),
        }
    })
}
