//! The `fi_ops_atomic` table: base, fetch and compare atomics on peers'
//! registered memory over psmrail's `atomic` / `fetch_atomic` /
//! `compare_atomic`, and the `*valid` queries over its `*_valid` ones
//! (`fi_query_atomic` is the domain's, in [`query`]). psm only: ofi_mrail
//! has no atomics (fi_mrail(7)), its calls answer `-FI_ENOSYS`.
//!
//! One call is one element vector (one `fi_ioc` each for the operand,
//! compare and result, one remote `fi_rma_ioc`; another count is
//! `-FI_EINVAL`), at most the valid count long (`-FI_EMSGSIZE`, checked
//! before any byte is read). The
//! operand and compare values are copied at the call; the result lands in
//! the application's buffer in place. Completions go to the transmit CQ
//! (`drive.rs`) with `FI_ATOMIC | FI_WRITE` (base) or `FI_ATOMIC | FI_READ`
//! (fetch, compare); injects report none.

use crate::cbuf::op_buffer;
use crate::domain::{DomainObj, RustDomain};
use crate::drive::{OpFuture, Report};
use crate::entry::{guard, Errno, FiResult};
use crate::ep::{EpObj, RustEp};
use crate::msg::{slice, MSG_FLAGS};
use crate::obj::{self, Table};
use crate::rma::{started, Want};
use crate::sys;
use psmrail::fabric::{CompletionFlags, FiAddr};
use psmrail::ops::atomic::{AtomicDatatype, AtomicKind, AtomicOp};
use std::ffi::{c_int, c_void};

pub(crate) static ATOMIC_OPS: Table<sys::fi_ops_atomic> = Table::new(sys::fi_ops_atomic {
    size: std::mem::size_of::<sys::fi_ops_atomic>(),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    readwrite: Some(readwrite),
    readwritev: Some(readwritev),
    readwritemsg: Some(readwritemsg),
    compwrite: Some(compwrite),
    compwritev: Some(compwritev),
    compwritemsg: Some(compwritemsg),
    writevalid: Some(writevalid),
    readwritevalid: Some(readwritevalid),
    compwritevalid: Some(compwritevalid),
});

/// An element vector: where and how many elements.
type Ioc = (*const c_void, usize);

/// One atomic call after the API shape.
struct Call {
    kind: AtomicKind,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    operand: Ioc,
    compare: Ioc,
    result: Ioc,
    context: *mut c_void,
    want: Want,
}

/// The psmrail datatype of a C one: a libfabric datatype psmrail does not
/// carry (long double, 128-bit integers) is `-FI_EOPNOTSUPP`, as the
/// `*valid` queries answer for unsupported pairs; an unknown one
/// `-FI_EINVAL`.
fn dt_of(dt: sys::fi_datatype) -> FiResult<AtomicDatatype> {
    AtomicDatatype::try_from(dt).map_err(|e| {
        if dt <= sys::FI_UINT128 {
            Errno::OPNOTSUPP
        } else {
            Errno::from(e)
        }
    })
}

/// The bytes of `count` elements of `size` bytes.
fn bytes(count: usize, size: usize) -> FiResult<usize> {
    count.checked_mul(size).ok_or(Errno::MSGSIZE)
}

/// Starts `c` on `e` (module docs).
///
/// # Safety
/// The call's vectors are null or valid for their element counts; the
/// result's memory is the operation's until its completion.
unsafe fn post(e: &EpObj, c: Call) -> FiResult<isize> {
    // The `*msg` calls refuse FI_TRIGGER among their flags; the others
    // follow the op flags.
    if !matches!(c.want, Want::Flags(_)) && crate::trigger::asked(e.tx_op_flags()) {
        return Err(crate::trigger::unsupported("an atomic operation"));
    }
    let (ep, driver, selective) = e.driven()?;
    let RustEp::Psm(p) = &ep else {
        return Err(Errno::NOSYS);
    };
    let op = AtomicOp::try_from(c.op)?;
    let dt = dt_of(c.datatype)?;
    // Counts are checked before any byte is read.
    let max = match c.kind {
        AtomicKind::Write => p.atomic_valid(op, dt),
        AtomicKind::Fetch => p.fetch_atomic_valid(op, dt),
        AtomicKind::Compare => p.compare_atomic_valid(op, dt),
    }?;
    if [c.operand.1, c.compare.1, c.result.1]
        .iter()
        .any(|n| *n > max)
    {
        return Err(Errno::MSGSIZE);
    }
    let size = dt.size();
    // `FI_ATOMIC_READ` reads no operand (it may be null).
    let zeros;
    // SAFETY: the caller's promise for the operand and compare values,
    // whose counts are at most the valid count.
    let (operand, compare) = unsafe {
        let operand = if c.operand.0.is_null() && op == AtomicOp::AtomicRead {
            zeros = vec![0u8; bytes(c.operand.1, size)?];
            &zeros[..]
        } else {
            slice(c.operand.0, bytes(c.operand.1, size)?)?
        };
        (operand, slice(c.compare.0, bytes(c.compare.1, size)?)?)
    };
    let len = bytes(c.result.1, size)?;
    if c.result.0.is_null() && len > 0 {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise for the result buffer.
    let result = unsafe { op_buffer(c.result.0.cast_mut().cast(), len) };
    let dest = FiAddr(c.dest);
    let (failed, future) = match c.kind {
        AtomicKind::Write => started!(p.atomic(dest, op, dt, operand, c.addr, c.key)),
        AtomicKind::Fetch => {
            started!(p.fetch_atomic(dest, op, dt, operand, result, c.addr, c.key))
        }
        AtomicKind::Compare => {
            started!(p.compare_atomic(dest, op, dt, operand, compare, result, c.addr, c.key))
        }
    };
    let flags = CompletionFlags::ATOMIC
        | match c.kind {
            AtomicKind::Write => CompletionFlags::WRITE,
            AtomicKind::Fetch | AtomicKind::Compare => CompletionFlags::READ,
        };
    let report = Report {
        context: c.context as u64,
        flags,
        complete: c.want.complete(e, selective),
    };
    driver.post(future, failed, report)?;
    Ok(0)
}

/// The one vector of a list (`-FI_EINVAL` for another count).
///
/// # Safety
/// `v` is null or holds `count` vectors.
unsafe fn one(v: *const sys::fi_ioc, count: usize) -> FiResult<Ioc> {
    if count != 1 || v.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise.
    let v = unsafe { &*v };
    Ok((v.addr.cast_const(), v.count))
}

/// The remote vector and destination of a message, checked for its flags.
///
/// # Safety
/// `msg` is null or a valid message.
unsafe fn message<'a>(
    msg: *const sys::fi_msg_atomic,
    flags: u64,
) -> FiResult<(&'a sys::fi_msg_atomic, sys::fi_rma_ioc)> {
    // SAFETY: the caller's promise.
    let m = unsafe { msg.as_ref() }.ok_or(Errno::INVAL)?;
    if flags & !MSG_FLAGS != 0 {
        return Err(Errno::BADFLAGS);
    }
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: checked: one remote vector.
    Ok((m, unsafe { *m.rma_iov }))
}

/// An empty vector (no compare or result values).
const NONE: Ioc = (std::ptr::null(), 0);

/// The endpoint of a call.
///
/// # Safety
/// `ep` is an endpoint of this library.
unsafe fn endpoint<'a>(ep: *mut sys::fid_ep) -> FiResult<&'a EpObj> {
    // SAFETY: EpObj is the block type of FI_CLASS_EP.
    unsafe { obj::block(ep) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn write(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    guard("fi_atomic", || {
        let c = Call {
            kind: AtomicKind::Write,
            dest: dest_addr,
            addr,
            key,
            datatype,
            op,
            operand: (buf, count),
            compare: NONE,
            result: NONE,
            context,
            want: Want::Default,
        };
        // SAFETY: the fi_atomic contract.
        unsafe { post(endpoint(ep)?, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writev(
    ep: *mut sys::fid_ep,
    iov: *const sys::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    guard("fi_atomicv", || {
        // SAFETY: the fi_atomicv contract.
        unsafe {
            let c = Call {
                kind: AtomicKind::Write,
                dest: dest_addr,
                addr,
                key,
                datatype,
                op,
                operand: one(iov, count)?,
                compare: NONE,
                result: NONE,
                context,
                want: Want::Default,
            };
            post(endpoint(ep)?, c)
        }
    })
}

unsafe extern "C" fn writemsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_atomic,
    flags: u64,
) -> isize {
    guard("fi_atomicmsg", || {
        // SAFETY: the fi_atomicmsg contract.
        unsafe {
            let (m, r) = message(msg, flags)?;
            let c = Call {
                kind: AtomicKind::Write,
                dest: m.addr,
                addr: r.addr,
                key: r.key,
                datatype: m.datatype,
                op: m.op,
                operand: one(m.msg_iov, m.iov_count)?,
                compare: NONE,
                result: NONE,
                context: m.context,
                want: Want::Flags(flags),
            };
            post(endpoint(ep)?, c)
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn inject(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
) -> isize {
    guard("fi_inject_atomic", || {
        let c = Call {
            kind: AtomicKind::Write,
            dest: dest_addr,
            addr,
            key,
            datatype,
            op,
            operand: (buf, count),
            compare: NONE,
            result: NONE,
            context: std::ptr::null_mut(),
            want: Want::Never,
        };
        // SAFETY: the fi_inject_atomic contract (the operand is copied).
        unsafe { post(endpoint(ep)?, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readwrite(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    guard("fi_fetch_atomic", || {
        let c = Call {
            kind: AtomicKind::Fetch,
            dest: dest_addr,
            addr,
            key,
            datatype,
            op,
            operand: (buf, count),
            compare: NONE,
            result: (result.cast_const(), count),
            context,
            want: Want::Default,
        };
        // SAFETY: the fi_fetch_atomic contract.
        unsafe { post(endpoint(ep)?, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readwritev(
    ep: *mut sys::fid_ep,
    iov: *const sys::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    guard("fi_fetch_atomicv", || {
        // SAFETY: the fi_fetch_atomicv contract.
        unsafe {
            let c = Call {
                kind: AtomicKind::Fetch,
                dest: dest_addr,
                addr,
                key,
                datatype,
                op,
                operand: one(iov, count)?,
                compare: NONE,
                result: one(resultv, result_count)?,
                context,
                want: Want::Default,
            };
            post(endpoint(ep)?, c)
        }
    })
}

unsafe extern "C" fn readwritemsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_atomic,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    guard("fi_fetch_atomicmsg", || {
        // SAFETY: the fi_fetch_atomicmsg contract.
        unsafe {
            let (m, r) = message(msg, flags)?;
            let c = Call {
                kind: AtomicKind::Fetch,
                dest: m.addr,
                addr: r.addr,
                key: r.key,
                datatype: m.datatype,
                op: m.op,
                operand: one(m.msg_iov, m.iov_count)?,
                compare: NONE,
                result: one(resultv, result_count)?,
                context: m.context,
                want: Want::Flags(flags),
            };
            post(endpoint(ep)?, c)
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwrite(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    guard("fi_compare_atomic", || {
        let c = Call {
            kind: AtomicKind::Compare,
            dest: dest_addr,
            addr,
            key,
            datatype,
            op,
            operand: (buf, count),
            compare: (compare, count),
            result: (result.cast_const(), count),
            context,
            want: Want::Default,
        };
        // SAFETY: the fi_compare_atomic contract.
        unsafe { post(endpoint(ep)?, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritev(
    ep: *mut sys::fid_ep,
    iov: *const sys::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const sys::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest_addr: sys::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    guard("fi_compare_atomicv", || {
        // SAFETY: the fi_compare_atomicv contract.
        unsafe {
            let c = Call {
                kind: AtomicKind::Compare,
                dest: dest_addr,
                addr,
                key,
                datatype,
                op,
                operand: one(iov, count)?,
                compare: one(comparev, compare_count)?,
                result: one(resultv, result_count)?,
                context,
                want: Want::Default,
            };
            post(endpoint(ep)?, c)
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritemsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_atomic,
    comparev: *const sys::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    guard("fi_compare_atomicmsg", || {
        // SAFETY: the fi_compare_atomicmsg contract.
        unsafe {
            let (m, r) = message(msg, flags)?;
            let c = Call {
                kind: AtomicKind::Compare,
                dest: m.addr,
                addr: r.addr,
                key: r.key,
                datatype: m.datatype,
                op: m.op,
                operand: one(m.msg_iov, m.iov_count)?,
                compare: one(comparev, compare_count)?,
                result: one(resultv, result_count)?,
                context: m.context,
                want: Want::Flags(flags),
            };
            post(endpoint(ep)?, c)
        }
    })
}

/// A `*valid` query of `kind` on `ep`: the element count in `*count`.
///
/// # Safety
/// `ep` is an endpoint of this library; `count` is null or writable.
unsafe fn valid(
    what: &str,
    ep: *mut sys::fid_ep,
    kind: AtomicKind,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    guard(what, || {
        // SAFETY: the caller's promise.
        let e = unsafe { endpoint(ep)? };
        if count.is_null() {
            return Err(Errno::INVAL);
        }
        let RustEp::Psm(p) = e.rust()? else {
            return Err(Errno::NOSYS);
        };
        let (op, dt) = (AtomicOp::try_from(op)?, dt_of(datatype)?);
        let n = match kind {
            AtomicKind::Write => p.atomic_valid(op, dt),
            AtomicKind::Fetch => p.fetch_atomic_valid(op, dt),
            AtomicKind::Compare => p.compare_atomic_valid(op, dt),
        }?;
        // SAFETY: checked non-null; an out parameter.
        unsafe { *count = n };
        Ok(0)
    })
}

unsafe extern "C" fn writevalid(
    ep: *mut sys::fid_ep,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: the fi_atomicvalid contract.
    unsafe { valid("fi_atomicvalid", ep, AtomicKind::Write, datatype, op, count) }
}

unsafe extern "C" fn readwritevalid(
    ep: *mut sys::fid_ep,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: the fi_fetch_atomicvalid contract.
    unsafe {
        valid(
            "fi_fetch_atomicvalid",
            ep,
            AtomicKind::Fetch,
            datatype,
            op,
            count,
        )
    }
}

unsafe extern "C" fn compwritevalid(
    ep: *mut sys::fid_ep,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: the fi_compare_atomicvalid contract.
    unsafe {
        valid(
            "fi_compare_atomicvalid",
            ep,
            AtomicKind::Compare,
            datatype,
            op,
            count,
        )
    }
}

/// `fi_query_atomic`: whether the domain's endpoints take `op` on
/// `datatype` (flags `FI_FETCH_ATOMIC`, `FI_COMPARE_ATOMIC` or neither),
/// with the element size and the most elements one call takes.
pub(crate) unsafe extern "C" fn query(
    domain: *mut sys::fid_domain,
    datatype: sys::fi_datatype,
    op: sys::fi_op,
    attr: *mut sys::fi_atomic_attr,
    flags: u64,
) -> c_int {
    guard("fi_query_atomic", || {
        // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
        let d: &DomainObj = unsafe { obj::cast(domain.cast(), sys::FI_CLASS_DOMAIN)? };
        // SAFETY: null or writable (the contract).
        let a = unsafe { attr.as_mut() }.ok_or(Errno::INVAL)?;
        let kind = match flags {
            0 => AtomicKind::Write,
            sys::FI_FETCH_ATOMIC => AtomicKind::Fetch,
            sys::FI_COMPARE_ATOMIC => AtomicKind::Compare,
            _ => return Err(Errno::BADFLAGS),
        };
        let RustDomain::Psm(dom) = d.rust()? else {
            return Err(Errno::NOSYS);
        };
        let (op, dt) = (AtomicOp::try_from(op)?, dt_of(datatype)?);
        a.count = dom.atomic_valid(kind, op, dt)?;
        a.size = dt.size();
        Ok(0)
    })
}
