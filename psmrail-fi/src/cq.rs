//! `fi_cq_open`: completion queues over psmrail's [`CompletionQueue`],
//! in every libfabric entry format (context, msg, data, tagged). Reading
//! an empty queue makes one progress round in manual progress, as the
//! psmrail queue does; `fi_cq_sread` waits up to its timeout. The
//! `FI_CONTEXT` contexts come back untouched: a context is only carried.
//! A queue opened with `FI_WAIT_FD` has an eventfd (`crate::wait`);
//! `fi_cq_signal` wakes the threads in `fi_cq_sread`.

use crate::domain::DomainObj;
use crate::entry::{guard, Errno, FiResult};
use crate::obj::{self, fi_ops, Children, FiOps, Table};
use crate::sys;
use crate::wait::{WaitFd, WaitSlot};
use psmrail::fabric::{CompletionQueue, CqAttr, CqEntry, CqErrEntry, CqFormat, FiAddr};
use psmrail::ErrorKind;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::time::Duration;

/// A C completion queue.
#[repr(C)]
pub(crate) struct CqObj {
    pub(crate) fid: sys::fid_cq,
    domain: *const DomainObj,
    format: sys::fi_cq_format,
    /// Endpoints bound to it.
    pub(crate) children: Children,
    pub(crate) cq: Mutex<Option<CompletionQueue>>,
    /// Opened with `FI_WAIT_FD` (the cheap check of the read path).
    has_fd: bool,
    wait: WaitSlot,
}

// SAFETY: the domain pointer is a kept block; only its atomic counter is
// touched through it.
unsafe impl Send for CqObj {}
// SAFETY: as above.
unsafe impl Sync for CqObj {}

impl CqObj {
    pub(crate) fn rust(&self) -> FiResult<CompletionQueue> {
        obj::lock(&self.cq).clone().ok_or(Errno::INVAL)
    }

    /// `fi_trywait` on this queue: whether it has entries (errors
    /// included), after one progress round in manual progress; the fd is
    /// cleared when it has none.
    pub(crate) fn trywait(&self) -> FiResult<bool> {
        let w = self.wait.get().ok_or(Errno::INVAL)?;
        let cq = self.rust()?;
        // SAFETY: the domain block is kept for the process.
        if let Ok(d) = unsafe { &*self.domain }.rust() {
            d.progress_if_manual();
        }
        Ok(w.reset(|| !cq.is_empty()))
    }

    /// After a read found nothing: clears the fd (an FD queue only).
    fn empty_read(&self) {
        if !self.has_fd {
            return;
        }
        if let (Some(w), Ok(cq)) = (self.wait.get(), self.rust()) {
            w.reset(|| !cq.is_empty());
        }
    }
}

static CQ_FI_OPS: FiOps = FiOps::new(fi_ops(close, None, Some(control)));
static CQ_OPS: Table<sys::fi_ops_cq> = Table::new(sys::fi_ops_cq {
    size: std::mem::size_of::<sys::fi_ops_cq>(),
    read: Some(read),
    readfrom: Some(readfrom),
    readerr: Some(readerr),
    sread: Some(sread),
    sreadfrom: Some(sreadfrom),
    signal: Some(signal),
    strerror: Some(strerror),
});

pub(crate) unsafe extern "C" fn open(
    domain: *mut sys::fid_domain,
    attr: *mut sys::fi_cq_attr,
    cq: *mut *mut sys::fid_cq,
    context: *mut c_void,
) -> c_int {
    guard("fi_cq_open", || {
        // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
        let d: &DomainObj = unsafe { obj::cast(domain.cast(), sys::FI_CLASS_DOMAIN)? };
        if cq.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: null or a valid attribute structure.
        let a = unsafe { attr.as_ref() }.copied().unwrap_or_default();
        let (format, rust_format) = match a.format {
            sys::FI_CQ_FORMAT_UNSPEC | sys::FI_CQ_FORMAT_TAGGED => {
                (sys::FI_CQ_FORMAT_TAGGED, CqFormat::Tagged)
            }
            sys::FI_CQ_FORMAT_CONTEXT => (sys::FI_CQ_FORMAT_CONTEXT, CqFormat::Context),
            sys::FI_CQ_FORMAT_MSG => (sys::FI_CQ_FORMAT_MSG, CqFormat::Msg),
            sys::FI_CQ_FORMAT_DATA => (sys::FI_CQ_FORMAT_DATA, CqFormat::Data),
            _ => return Err(Errno::INVAL),
        };
        match a.wait_obj {
            sys::FI_WAIT_NONE
            | sys::FI_WAIT_UNSPEC
            | sys::FI_WAIT_MUTEX_COND
            | sys::FI_WAIT_YIELD
            | sys::FI_WAIT_FD => {}
            // FI_WAIT_SET (no wait sets) and FI_WAIT_POLLFD.
            _ => return Err(Errno::NOSYS),
        }
        if a.wait_cond != sys::FI_CQ_COND_NONE && a.wait_cond != sys::FI_CQ_COND_THRESHOLD {
            return Err(Errno::INVAL);
        }
        let mut rattr = CqAttr::new().format(rust_format);
        if a.size > 0 {
            rattr = rattr.size(a.size);
        }
        let wait = if a.wait_obj == sys::FI_WAIT_FD {
            Some(WaitFd::new()?)
        } else {
            None
        };
        let rust = d.rust()?.cq(rattr)?;
        if let Some(w) = &wait {
            rust.set_notify(crate::wait::notifier(w));
        }
        d.children.add();
        let o = obj::make(
            CqObj {
                fid: sys::fid_cq {
                    fid: obj::fid_header(sys::FI_CLASS_CQ, context, &CQ_FI_OPS),
                    ops: CQ_OPS.ptr(),
                },
                domain: d,
                format,
                children: Children::default(),
                cq: Mutex::new(Some(rust)),
                has_fd: wait.is_some(),
                wait: WaitSlot::new(wait),
            },
            sys::FI_CLASS_CQ,
        );
        // SAFETY: checked non-null.
        unsafe { *cq = o.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(cq)", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::cast(fid, sys::FI_CLASS_CQ)? };
        if c.children.any() {
            return Err(Errno::BUSY);
        }
        obj::lock(&c.cq).take();
        c.wait.close();
        // SAFETY: the domain block is kept for the process.
        unsafe { (*c.domain).children.remove() };
        obj::retire(fid as usize);
        Ok(0)
    })
}

unsafe extern "C" fn control(fid: *mut sys::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control(cq)", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::cast(fid, sys::FI_CLASS_CQ)? };
        match command as u32 {
            // The eventfd of an FI_WAIT_FD queue; -FI_ENOSYS for the others.
            // SAFETY: FI_GETWAIT's argument is an `int *` for FD objects.
            sys::FI_GETWAIT => unsafe { c.wait.getwait(arg) },
            _ => Err(Errno::NOSYS),
        }
    })
}

/// Where a received message's data starts, or null.
fn data_ptr(e: &CqEntry) -> *mut c_void {
    match &e.buffer {
        Some(b) if !b.is_empty() || e.offset > 0 => {
            b.as_ptr().wrapping_add(e.offset) as *mut c_void
        }
        _ => std::ptr::null_mut(),
    }
}

/// Writes `e` as entry `i` of `buf` in `format`.
///
/// # Safety
/// `buf` holds at least `i + 1` entries of `format`.
unsafe fn write_entry(format: sys::fi_cq_format, buf: *mut c_void, i: usize, e: &CqEntry) {
    let ctx = e.context as *mut c_void;
    // SAFETY: the caller's promise (room for entry `i`); the entry types
    // are plain C structures written whole with write_unaligned.
    unsafe {
        match format {
            sys::FI_CQ_FORMAT_CONTEXT => buf
                .cast::<sys::fi_cq_entry>()
                .add(i)
                .write_unaligned(sys::fi_cq_entry { op_context: ctx }),
            sys::FI_CQ_FORMAT_MSG => {
                buf.cast::<sys::fi_cq_msg_entry>()
                    .add(i)
                    .write_unaligned(sys::fi_cq_msg_entry {
                        op_context: ctx,
                        flags: e.flags.bits(),
                        len: e.len,
                    })
            }
            sys::FI_CQ_FORMAT_DATA => {
                buf.cast::<sys::fi_cq_data_entry>()
                    .add(i)
                    .write_unaligned(sys::fi_cq_data_entry {
                        op_context: ctx,
                        flags: e.flags.bits(),
                        len: e.len,
                        buf: data_ptr(e),
                        data: e.data,
                    })
            }
            _ => buf
                .cast::<sys::fi_cq_tagged_entry>()
                .add(i)
                .write_unaligned(sys::fi_cq_tagged_entry {
                    op_context: ctx,
                    flags: e.flags.bits(),
                    len: e.len,
                    buf: data_ptr(e),
                    data: e.data,
                    tag: e.tag,
                }),
        }
    }
}

fn fi_addr(a: FiAddr) -> u64 {
    if a.is_unspec() {
        sys::FI_ADDR_NOTAVAIL
    } else {
        a.0
    }
}

thread_local! {
    static BATCH: RefCell<Vec<CqEntry>> = const { RefCell::new(Vec::new()) };
}

/// Copies up to `count` entries out of the queue (`first` first).
///
/// # Safety
/// `buf` holds `count` entries of the queue's format; `src` is null or
/// holds `count` addresses.
unsafe fn read_into(
    c: &CqObj,
    first: Option<CqEntry>,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
) -> FiResult<isize> {
    if count == 0 {
        return Ok(0);
    }
    if buf.is_null() {
        return Err(Errno::INVAL);
    }
    let cq = c.rust()?;
    // A poll that finds nothing (most of them, in a busy loop) progresses
    // once and leaves, before the batch's thread-local (a call into the
    // dynamic linker's TLS lookup, for a library libfabric loaded).
    if first.is_none() && cq.is_empty() && (!cq.progress() || cq.is_empty()) {
        return Err(Errno::AGAIN);
    }
    BATCH.with(|b| {
        let mut batch = b.borrow_mut();
        batch.clear();
        let mut max = count;
        if let Some(f) = first {
            batch.push(f);
            max -= 1;
        }
        if max > 0 {
            match cq.read_many(&mut batch, max) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Avail && !batch.is_empty() => {}
                Err(e) if e.kind() == ErrorKind::Avail => return Err(Errno::AVAIL),
                Err(e) => return Err(Errno::from(e)),
            }
        }
        if batch.is_empty() {
            return Err(Errno::AGAIN);
        }
        let n = batch.len();
        // The entries (and the buffers they hand back, which only wrap the
        // application's memory) are dropped as they are copied out.
        for (i, e) in batch.drain(..).enumerate() {
            // SAFETY: i < n <= count (the caller's buffer sizes).
            unsafe {
                write_entry(c.format, buf, i, &e);
                if !src.is_null() {
                    *src.add(i) = fi_addr(e.source);
                }
            }
        }
        Ok(n as isize)
    })
}

unsafe extern "C" fn read(cq: *mut sys::fid_cq, buf: *mut c_void, count: usize) -> isize {
    guard("fi_cq_read", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::block(cq)? };
        // SAFETY: the fi_cq_read contract for buf.
        let r = unsafe { read_into(c, None, buf, count, std::ptr::null_mut()) };
        if r == Err(Errno::AGAIN) {
            c.empty_read();
        }
        r
    })
}

unsafe extern "C" fn readfrom(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut sys::fi_addr_t,
) -> isize {
    guard("fi_cq_readfrom", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::block(cq)? };
        // SAFETY: the fi_cq_readfrom contract for buf and src_addr.
        let r = unsafe { read_into(c, None, buf, count, src_addr) };
        if r == Err(Errno::AGAIN) {
            c.empty_read();
        }
        r
    })
}

/// `fi_cq_sread(from)`: waits up to `timeout` ms (negative: for ever) for
/// the first entry.
///
/// # Safety
/// As [`read_into`].
unsafe fn sread_into(
    c: &CqObj,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    timeout: c_int,
) -> FiResult<isize> {
    if count == 0 {
        return Ok(0);
    }
    let cq = c.rust()?;
    let wait = (timeout >= 0).then(|| Duration::from_millis(timeout as u64));
    let first = match cq.sread(wait) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::TimedOut => return Err(Errno::AGAIN),
        // Woken by fi_cq_signal.
        Err(e) if e.kind() == ErrorKind::Again => return Err(Errno::AGAIN),
        Err(e) if e.kind() == ErrorKind::Avail => return Err(Errno::AVAIL),
        Err(e) => return Err(Errno::from(e)),
    };
    // SAFETY: the caller's promise.
    unsafe { read_into(c, Some(first), buf, count, src) }
}

unsafe extern "C" fn sread(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    guard("fi_cq_sread", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::block(cq)? };
        // SAFETY: the fi_cq_sread contract for buf.
        unsafe { sread_into(c, buf, count, std::ptr::null_mut(), timeout) }
    })
}

unsafe extern "C" fn sreadfrom(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut sys::fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    guard("fi_cq_sreadfrom", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::block(cq)? };
        // SAFETY: the fi_cq_sreadfrom contract for buf and src_addr.
        unsafe { sread_into(c, buf, count, src_addr, timeout) }
    })
}

fn fill_err(out: &mut sys::fi_cq_err_entry, e: &CqErrEntry) {
    out.op_context = e.context as *mut c_void;
    out.flags = e.flags.bits();
    out.len = e.len;
    out.buf = match &e.buffer {
        Some(b) if !b.is_empty() => b.as_ptr() as *mut c_void,
        _ => std::ptr::null_mut(),
    };
    out.data = e.data;
    out.tag = e.tag;
    out.olen = e.olen as usize;
    out.err = e.err();
    out.prov_errno = e.prov_errno;
    out.err_data = std::ptr::null_mut();
    out.err_data_size = 0;
}

unsafe extern "C" fn readerr(
    cq: *mut sys::fid_cq,
    buf: *mut sys::fi_cq_err_entry,
    _flags: u64,
) -> isize {
    guard("fi_cq_readerr", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::block(cq)? };
        if buf.is_null() {
            return Err(Errno::INVAL);
        }
        let Some(e) = c.rust()?.readerr() else {
            return Err(Errno::AGAIN);
        };
        // SAFETY: checked non-null; the contract makes it writable.
        fill_err(unsafe { &mut *buf }, &e);
        Ok(1)
    })
}

/// `fi_cq_signal`: every thread in `fi_cq_sread` on the queue returns
/// `-FI_EAGAIN`; with nobody there, the next `fi_cq_sread` does at once.
/// An FD queue's fd becomes readable too.
unsafe extern "C" fn signal(cq: *mut sys::fid_cq) -> c_int {
    guard("fi_cq_signal", || {
        // SAFETY: CqObj is the block type of FI_CLASS_CQ.
        let c: &CqObj = unsafe { obj::cast(cq.cast(), sys::FI_CLASS_CQ)? };
        c.rust()?.signal();
        if let Some(w) = c.wait.get() {
            w.signal();
        }
        Ok(0)
    })
}

/// The text of a provider error number (`prov_errno` of error entries).
fn prov_text(prov_errno: c_int) -> &'static std::ffi::CStr {
    match prov_errno {
        0 => c"success",
        x if x == CqErrEntry::PROV_INTERNAL => c"psmrail: internal error (see err)",
        _ => c"psm: error (see err)",
    }
}

/// `fi_cq_strerror` / `fi_eq_strerror`: the text, copied into `buf` when
/// one is given.
pub(crate) fn strerror_into(prov_errno: c_int, buf: *mut c_char, len: usize) -> *const c_char {
    let text = prov_text(prov_errno);
    if buf.is_null() || len == 0 {
        return text.as_ptr();
    }
    let bytes = text.to_bytes();
    let n = bytes.len().min(len - 1);
    // SAFETY: `buf` holds `len` bytes (the strerror contract); n < len.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    buf
}

unsafe extern "C" fn strerror(
    _cq: *mut sys::fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    strerror_into(prov_errno, buf, len)
}
