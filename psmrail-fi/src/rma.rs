//! The `fi_ops_rma` table: reads and writes of peers' registered memory
//! on psmrail's `readmsg` / `writemsg` (remote CQ data with `writedata`),
//! for both providers. The application's buffer is used in place
//! ([`crate::cbuf`]); `FI_INJECT` and `fi_inject_write` copy it. Remote
//! addresses are offsets into the target region (the infos carry no
//! `FI_MR_VIRT_ADDR`), keys are the region's (psm) or the one
//! `fi_mr_map_raw` gave (ofi_mrail, `FI_MR_RAW`).
//!
//! Completions go to the transmit CQ with the application's context and
//! `FI_RMA | FI_READ` or `FI_RMA | FI_WRITE` (`drive.rs`); injects report
//! none. A key the target does not know, a range past a region's end or a
//! missing access right is an error completion (`FI_EACCES`).
//! `FI_TRIGGER` defers a write or read until a counter's threshold
//! (`trigger.rs`).

use crate::cbuf::op_buffer;
use crate::drive::{OpFuture, Report};
use crate::entry::{guard, Errno, FiResult};
use crate::ep::{EpObj, RustEp};
use crate::msg::{iov_buffer, iov_copy, slice, MSG_FLAGS};
use crate::obj::{self, Table};
use crate::sys;
use crate::trigger;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{CompletionFlags, FiAddr};
use psmrail::ops::RmaIov;
use std::ffi::c_void;

pub(crate) static RMA_OPS: Table<sys::fi_ops_rma> = Table::new(sys::fi_ops_rma {
    size: std::mem::size_of::<sys::fi_ops_rma>(),
    read: Some(read),
    readv: Some(readv),
    readmsg: Some(readmsg),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    writedata: Some(writedata),
    injectdata: Some(injectdata),
});

/// Which way the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Write,
    Read,
}

/// Whether a success is reported.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Want {
    /// The short calls: unless the CQ is selective and the endpoint's
    /// transmit op flags lack `FI_COMPLETION`.
    Default,
    /// The `*msg` calls: as their flags say.
    Flags(u64),
    /// Injects: never.
    Never,
}

impl Want {
    /// Whether `e`'s success is reported, its CQ being `selective` or not.
    pub(crate) fn complete(self, e: &EpObj, selective: bool) -> bool {
        let asked = sys::FI_COMPLETION as u64;
        match self {
            Want::Default => !selective || e.tx_op_flags() & asked != 0,
            Want::Flags(f) => !selective || f & asked != 0,
            Want::Never => false,
        }
    }
}

/// Boxes a started operation with whether it failed before anything was
/// sent.
macro_rules! started {
    ($op:expr) => {{
        let op = $op;
        (op.is_failed(), Box::pin(op) as OpFuture)
    }};
}
pub(crate) use started;

/// One RMA operation of `e`: `buf` to or from the ranges `remote` at
/// `dest`.
#[allow(clippy::too_many_arguments)]
fn post(
    e: &EpObj,
    dir: Dir,
    dest: sys::fi_addr_t,
    buf: OpBuffer,
    remote: &[RmaIov],
    data: Option<u64>,
    context: *mut c_void,
    want: Want,
) -> FiResult<isize> {
    let flags = match want {
        Want::Flags(f) => f,
        Want::Default | Want::Never => e.tx_op_flags(),
    };
    if trigger::asked(flags) {
        return triggered(e, dir, dest, buf, remote, data, context, want);
    }
    let (ep, driver, selective) = e.driven()?;
    let dest = FiAddr(dest);
    let (failed, future) = match (&ep, dir) {
        (RustEp::Psm(p), Dir::Write) => started!(p.writemsg(dest, buf, remote, data)),
        (RustEp::Psm(p), Dir::Read) => started!(p.readmsg(dest, buf, remote)),
        (RustEp::Mrail(p), Dir::Write) => started!(p.writemsg(dest, buf, remote, data)),
        (RustEp::Mrail(p), Dir::Read) => started!(p.readmsg(dest, buf, remote)),
    };
    let flags = CompletionFlags::RMA
        | match dir {
            Dir::Write => CompletionFlags::WRITE,
            Dir::Read => CompletionFlags::READ,
        };
    let report = Report {
        context: context as u64,
        flags,
        complete: want.complete(e, selective),
    };
    driver.post(future, failed, report)?;
    Ok(0)
}

/// [`post`] with `FI_TRIGGER` (`trigger.rs`): one remote range as long as
/// the buffer, no remote CQ data, a context.
#[allow(clippy::too_many_arguments)]
fn triggered(
    e: &EpObj,
    dir: Dir,
    dest: sys::fi_addr_t,
    buf: OpBuffer,
    remote: &[RmaIov],
    data: Option<u64>,
    context: *mut c_void,
    want: Want,
) -> FiResult<isize> {
    if matches!(want, Want::Never) {
        return Err(trigger::unsupported("an RMA inject (it has no context)"));
    }
    if data.is_some() {
        return Err(trigger::unsupported("an RMA write with remote CQ data"));
    }
    let [r] = remote else {
        return Err(trigger::unsupported(
            "an RMA operation on several remote ranges",
        ));
    };
    if r.len != buf.len() as u64 {
        return Err(Errno::INVAL);
    }
    let (dest, offset, key) = (FiAddr(dest), r.offset, r.key);
    // SAFETY: `context` is the call's, which fi_trigger(3) makes a
    // `struct fi_triggered_context` when the call asks for FI_TRIGGER;
    // the buffer is the operation's as for the untriggered call.
    unsafe {
        trigger::defer(e, context, |t, c| match dir {
            Dir::Write => t.post_write(dest, buf, offset, key, c),
            Dir::Read => t.post_read(dest, buf, offset, key, c),
        })
    }
}

/// The one remote range of the short calls: as long as the local buffer.
fn range(addr: u64, len: usize, key: u64) -> [RmaIov; 1] {
    [RmaIov {
        offset: addr,
        len: len as u64,
        key,
    }]
}

/// The application's buffer of a short call (`FI_INJECT` in the
/// endpoint's op flags copies a write's).
///
/// # Safety
/// `buf` is null or valid for `len` bytes until the operation completes.
unsafe fn short_buffer(e: &EpObj, dir: Dir, buf: *mut c_void, len: usize) -> FiResult<OpBuffer> {
    if buf.is_null() && len > 0 {
        return Err(Errno::INVAL);
    }
    if dir == Dir::Write && e.tx_op_flags() & sys::FI_INJECT as u64 != 0 {
        // SAFETY: the caller's promise.
        return Ok(unsafe { slice(buf, len)? }.to_vec().into());
    }
    // SAFETY: the caller's promise: the memory is the operation's until
    // its completion.
    Ok(unsafe { op_buffer(buf.cast(), len) })
}

/// The remote ranges of a message.
///
/// # Safety
/// `iov` is null or holds `count` ranges.
unsafe fn remote_ranges(iov: *const sys::fi_rma_iov, count: usize) -> FiResult<Vec<RmaIov>> {
    if count == 0 || iov.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    Ok(v.iter()
        .map(|r| RmaIov {
            offset: r.addr,
            len: r.len as u64,
            key: r.key,
        })
        .collect())
}

/// The flags `fi_writemsg` accepts (`fi_readmsg`: without `FI_INJECT` and
/// `FI_REMOTE_CQ_DATA`).
const WRITE_FLAGS: u64 = MSG_FLAGS | trigger::FLAG | sys::FI_REMOTE_CQ_DATA as u64;
const READ_FLAGS: u64 = (MSG_FLAGS | trigger::FLAG) & !(sys::FI_INJECT as u64);

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn read(
    ep: *mut sys::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_read", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: the fi_read contract.
        let b = unsafe { short_buffer(e, Dir::Read, buf, len)? };
        let r = range(addr, len, key);
        post(e, Dir::Read, src_addr, b, &r, None, context, Want::Default)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readv(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_readv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: the fi_readv contract.
        let b = unsafe { iov_buffer(iov, count)? };
        let r = range(addr, b.len(), key);
        post(e, Dir::Read, src_addr, b, &r, None, context, Want::Default)
    })
}

unsafe extern "C" fn readmsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_rma,
    flags: u64,
) -> isize {
    guard("fi_readmsg", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: null or a valid message (the contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno::INVAL)?;
        if flags & !READ_FLAGS != 0 {
            return Err(Errno::BADFLAGS);
        }
        // SAFETY: the message's iovecs and ranges (the contract).
        let (b, r) = unsafe {
            (
                iov_buffer(m.msg_iov, m.iov_count)?,
                remote_ranges(m.rma_iov, m.rma_iov_count)?,
            )
        };
        post(
            e,
            Dir::Read,
            m.addr,
            b,
            &r,
            None,
            m.context,
            Want::Flags(flags),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn write(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_write", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: the fi_write contract (the engine only reads the buffer).
        let b = unsafe { short_buffer(e, Dir::Write, buf.cast_mut(), len)? };
        let r = range(addr, len, key);
        post(
            e,
            Dir::Write,
            dest_addr,
            b,
            &r,
            None,
            context,
            Want::Default,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writev(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_writev", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: the fi_writev contract.
        let b = unsafe { iov_buffer(iov, count)? };
        let r = range(addr, b.len(), key);
        post(
            e,
            Dir::Write,
            dest_addr,
            b,
            &r,
            None,
            context,
            Want::Default,
        )
    })
}

unsafe extern "C" fn writemsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_rma,
    flags: u64,
) -> isize {
    guard("fi_writemsg", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: null or a valid message (the contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno::INVAL)?;
        if flags & !WRITE_FLAGS != 0 {
            return Err(Errno::BADFLAGS);
        }
        // SAFETY: the message's iovecs and ranges (the contract).
        let (b, r) = unsafe {
            let b = if flags & sys::FI_INJECT as u64 != 0 {
                iov_copy(m.msg_iov, m.iov_count)?.into()
            } else {
                iov_buffer(m.msg_iov, m.iov_count)?
            };
            (b, remote_ranges(m.rma_iov, m.rma_iov_count)?)
        };
        let data = (flags & sys::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post(
            e,
            Dir::Write,
            m.addr,
            b,
            &r,
            data,
            m.context,
            Want::Flags(flags),
        )
    })
}

/// `fi_inject_write` and `fi_inject_writedata`: a copy of at most the
/// inject size, no completion.
///
/// # Safety
/// `buf` is null or valid for reads of `len` bytes.
unsafe fn inject_write(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    data: Option<u64>,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
) -> FiResult<isize> {
    // SAFETY: EpObj is the block type of FI_CLASS_EP.
    let e: &EpObj = unsafe { obj::block(ep)? };
    if len > e.rust()?.inject_size() {
        return Err(Errno::MSGSIZE);
    }
    // SAFETY: the caller's promise.
    let b: OpBuffer = unsafe { slice(buf, len)? }.to_vec().into();
    let r = range(addr, len, key);
    let none = std::ptr::null_mut();
    post(e, Dir::Write, dest_addr, b, &r, data, none, Want::Never)
}

unsafe extern "C" fn inject(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: the fi_inject_write contract.
    guard("fi_inject_write", || unsafe {
        inject_write(ep, buf, len, None, dest_addr, addr, key)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writedata(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_writedata", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: the fi_writedata contract.
        let b = unsafe { short_buffer(e, Dir::Write, buf.cast_mut(), len)? };
        let r = range(addr, len, key);
        let d = Some(data);
        post(e, Dir::Write, dest_addr, b, &r, d, context, Want::Default)
    })
}

unsafe extern "C" fn injectdata(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: the fi_inject_writedata contract.
    guard("fi_inject_writedata", || unsafe {
        inject_write(ep, buf, len, Some(data), dest_addr, addr, key)
    })
}
