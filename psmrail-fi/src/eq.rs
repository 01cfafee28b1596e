//! `fi_eq_open`: event queues. RDM and DGRAM endpoints raise no connection
//! events, so what arrives here is what the application writes
//! (`fi_eq_write`) and the completions of address-vector inserts made with
//! `FI_EVENT` (`FI_AV_COMPLETE`). Reads never block; `fi_eq_sread` waits
//! up to its timeout. An EQ opened with `FI_WAIT_FD` signals its eventfd
//! when an event is queued (`crate::wait`).

use crate::entry::{guard, Errno, FiResult};
use crate::obj::{self, fi_ops, FiOps, Table};
use crate::sys;
use crate::wait::{WaitFd, WaitSlot};
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// One queued event.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) event: u32,
    pub(crate) data: Vec<u8>,
    /// An error event (`fi_eq_readerr`): fid, context, data, err.
    pub(crate) err: Option<(usize, usize, u64, i32)>,
}

/// A C event queue.
#[repr(C)]
pub(crate) struct EqObj {
    pub(crate) fid: sys::fid_eq,
    fabric: *const crate::fabric::FabricObj,
    q: Mutex<Option<VecDeque<Event>>>,
    cond: Condvar,
    /// Opened with `FI_WAIT_FD` (the cheap check of the read path).
    has_fd: bool,
    wait: WaitSlot,
}

// SAFETY: the fabric pointer is a kept block (never freed), only its
// atomic counter is touched through it.
unsafe impl Send for EqObj {}
// SAFETY: as above; the queue is behind a mutex.
unsafe impl Sync for EqObj {}

impl EqObj {
    /// Queues an event and wakes a waiting reader.
    pub(crate) fn push(&self, ev: Event) {
        if let Some(q) = obj::lock(&self.q).as_mut() {
            q.push_back(ev);
        }
        self.cond.notify_all();
        if self.has_fd {
            if let Some(w) = self.wait.get() {
                w.signal();
            }
        }
    }

    fn pending(&self) -> bool {
        obj::lock(&self.q).as_ref().is_some_and(|q| !q.is_empty())
    }

    /// `fi_trywait` on this EQ: whether it has events; the fd is cleared
    /// when it has none.
    pub(crate) fn trywait(&self) -> FiResult<bool> {
        let w = self.wait.get().ok_or(Errno::INVAL)?;
        Ok(w.reset(|| self.pending()))
    }

    /// After a read found nothing: clears the fd (an FD EQ only).
    fn empty_read(&self) {
        if self.has_fd {
            if let Some(w) = self.wait.get() {
                w.reset(|| self.pending());
            }
        }
    }
}

static EQ_FI_OPS: FiOps = FiOps::new(fi_ops(close, None, Some(control)));
static EQ_OPS: Table<sys::fi_ops_eq> = Table::new(sys::fi_ops_eq {
    size: std::mem::size_of::<sys::fi_ops_eq>(),
    read: Some(read),
    readerr: Some(readerr),
    write: Some(write),
    sread: Some(sread),
    strerror: Some(strerror),
});

pub(crate) unsafe extern "C" fn open(
    fabric: *mut sys::fid_fabric,
    attr: *mut sys::fi_eq_attr,
    eq: *mut *mut sys::fid_eq,
    context: *mut c_void,
) -> c_int {
    guard("fi_eq_open", || {
        // SAFETY: FabricObj is the block type of FI_CLASS_FABRIC.
        let f: &crate::fabric::FabricObj =
            unsafe { obj::cast(fabric.cast(), sys::FI_CLASS_FABRIC)? };
        if eq.is_null() {
            return Err(Errno::INVAL);
        }
        let mut wait = None;
        // SAFETY: null or a valid attribute structure.
        if let Some(a) = unsafe { attr.as_ref() } {
            match a.wait_obj {
                sys::FI_WAIT_NONE | sys::FI_WAIT_UNSPEC | sys::FI_WAIT_MUTEX_COND => {}
                sys::FI_WAIT_FD => wait = Some(WaitFd::new()?),
                // FI_WAIT_SET (no wait sets), FI_WAIT_POLLFD, FI_WAIT_YIELD.
                _ => return Err(Errno::NOSYS),
            }
            if a.flags & !(sys::FI_WRITE as u64) != 0 {
                return Err(Errno::BADFLAGS);
            }
        }
        f.children.add();
        let o = obj::make(
            EqObj {
                fid: sys::fid_eq {
                    fid: obj::fid_header(sys::FI_CLASS_EQ, context, &EQ_FI_OPS),
                    ops: EQ_OPS.ptr(),
                },
                fabric: f,
                q: Mutex::new(Some(VecDeque::new())),
                cond: Condvar::new(),
                has_fd: wait.is_some(),
                wait: WaitSlot::new(wait),
            },
            sys::FI_CLASS_EQ,
        );
        // SAFETY: checked non-null.
        unsafe { *eq = o.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(eq)", || {
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let e: &EqObj = unsafe { obj::cast(fid, sys::FI_CLASS_EQ)? };
        obj::lock(&e.q).take();
        e.wait.close();
        e.cond.notify_all();
        // SAFETY: the fabric block is kept for the process.
        unsafe { (*e.fabric).children.remove() };
        obj::retire(fid as usize);
        Ok(0)
    })
}

/// Takes (or with `FI_PEEK` looks at) the head event into `buf`.
fn take(
    e: &EqObj,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    wait: Option<Duration>,
) -> FiResult<isize> {
    let deadline = wait.map(|d| Instant::now() + d);
    let mut g = obj::lock(&e.q);
    loop {
        let q = g.as_mut().ok_or(Errno::INVAL)?;
        if let Some(head) = q.front() {
            if head.err.is_some() {
                return Err(Errno::AVAIL);
            }
            if head.data.len() > len {
                return Err(Errno::TOOSMALL);
            }
            if !buf.is_null() {
                // SAFETY: `buf` holds `len` >= data.len() bytes (the
                // fi_eq_read contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(head.data.as_ptr(), buf.cast(), head.data.len())
                };
            }
            if !event.is_null() {
                // SAFETY: the contract makes `event` writable.
                unsafe { *event = head.event };
            }
            let n = head.data.len() as isize;
            if flags & sys::FI_PEEK as u64 == 0 {
                q.pop_front();
            }
            return Ok(n);
        }
        let Some(deadline) = deadline else {
            return Err(Errno::AGAIN);
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Errno::AGAIN);
        }
        g = e
            .cond
            .wait_timeout(g, deadline - now)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
}

unsafe extern "C" fn read(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    guard("fi_eq_read", || {
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let e: &EqObj = unsafe { obj::block(eq)? };
        let r = take(e, event, buf, len, flags, None);
        if r == Err(Errno::AGAIN) {
            e.empty_read();
        }
        r
    })
}

unsafe extern "C" fn control(fid: *mut sys::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control(eq)", || {
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let e: &EqObj = unsafe { obj::cast(fid, sys::FI_CLASS_EQ)? };
        match command as u32 {
            // The eventfd of an FI_WAIT_FD EQ; -FI_ENOSYS for the others.
            // SAFETY: FI_GETWAIT's argument is an `int *` for FD objects.
            sys::FI_GETWAIT => unsafe { e.wait.getwait(arg) },
            _ => Err(Errno::NOSYS),
        }
    })
}

unsafe extern "C" fn sread(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    guard("fi_eq_sread", || {
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let e: &EqObj = unsafe { obj::block(eq)? };
        let wait = if timeout < 0 {
            Duration::from_secs(u64::from(u32::MAX))
        } else {
            Duration::from_millis(timeout as u64)
        };
        take(e, event, buf, len, flags, Some(wait))
    })
}

unsafe extern "C" fn readerr(
    eq: *mut sys::fid_eq,
    buf: *mut sys::fi_eq_err_entry,
    flags: u64,
) -> isize {
    guard("fi_eq_readerr", || {
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let e: &EqObj = unsafe { obj::block(eq)? };
        if buf.is_null() {
            return Err(Errno::INVAL);
        }
        let mut g = obj::lock(&e.q);
        let q = g.as_mut().ok_or(Errno::INVAL)?;
        let Some((fid, ctx, data, err)) = q.front().and_then(|h| h.err) else {
            return Err(Errno::AGAIN);
        };
        // SAFETY: checked non-null; the contract makes it writable.
        let out = unsafe { &mut *buf };
        out.fid = fid as *mut sys::fid;
        out.context = ctx as *mut c_void;
        out.data = data;
        out.err = err;
        out.prov_errno = 0;
        out.err_data = std::ptr::null_mut();
        out.err_data_size = 0;
        if flags & sys::FI_PEEK as u64 == 0 {
            q.pop_front();
        }
        Ok(std::mem::size_of::<sys::fi_eq_err_entry>() as isize)
    })
}

unsafe extern "C" fn write(
    eq: *mut sys::fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    guard("fi_eq_write", || {
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let e: &EqObj = unsafe { obj::block(eq)? };
        if buf.is_null() && len > 0 {
            return Err(Errno::INVAL);
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the contract: `buf` holds `len` bytes.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
        };
        e.push(Event {
            event,
            data,
            err: None,
        });
        Ok(len as isize)
    })
}

unsafe extern "C" fn strerror(
    _eq: *mut sys::fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    crate::cq::strerror_into(prov_errno, buf, len)
}
