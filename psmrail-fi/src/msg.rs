//! The `fi_ops_msg` table: untagged sends and receives of an enabled
//! endpoint, posted with the application's context on psmrail's
//! `post_send` / `post_recv`, over the application's own memory
//! ([`crate::cbuf`]). Endpoints carry one iovec per operation
//! (`iov_limit` 1); remote CQ data is not psm's (`-FI_ENOSYS`). Receives
//! honour `FI_MULTI_RECV` (`multi_recv.rs`) and, on endpoints with
//! `FI_DIRECTED_RECV`, their source address. `FI_TRIGGER` defers an
//! operation until a counter's threshold (`trigger.rs`).

use crate::cbuf::op_buffer;
use crate::entry::{guard, Errno, FiResult};
use crate::ep::EpObj;
use crate::obj::{self, Table};
use crate::sys;
use crate::trigger;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{Caps, FiAddr};
use std::ffi::c_void;

pub(crate) static MSG_OPS: Table<sys::fi_ops_msg> = Table::new(sys::fi_ops_msg {
    size: std::mem::size_of::<sys::fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: Some(sendv),
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
});

/// The one buffer of an iovec list (`count` 0 or 1) as pointer and
/// length (null and 0 for none).
///
/// # Safety
/// `iov` is null or holds `count` iovecs.
pub(crate) unsafe fn iov_parts(iov: *const sys::iovec, count: usize) -> FiResult<(*mut u8, usize)> {
    match count {
        0 => Ok((std::ptr::null_mut(), 0)),
        1 if !iov.is_null() => {
            // SAFETY: the caller's promise.
            let v = unsafe { &*iov };
            if v.iov_base.is_null() && v.iov_len > 0 {
                return Err(Errno::INVAL);
            }
            Ok((v.iov_base.cast(), v.iov_len))
        }
        _ => Err(Errno::INVAL),
    }
}

/// The one buffer of an iovec list (`count` 0 or 1).
///
/// # Safety
/// `iov` is null or holds `count` iovecs whose memory obeys the operation
/// contract of [`op_buffer`].
pub(crate) unsafe fn iov_buffer(iov: *const sys::iovec, count: usize) -> FiResult<OpBuffer> {
    // SAFETY: the caller's promise.
    let (ptr, len) = unsafe { iov_parts(iov, count)? };
    // SAFETY: as above.
    Ok(unsafe { op_buffer(ptr, len) })
}

/// A copy of the one buffer of an iovec list, for `FI_INJECT`.
///
/// # Safety
/// As [`iov_buffer`] (the memory is only read, now).
pub(crate) unsafe fn iov_copy(iov: *const sys::iovec, count: usize) -> FiResult<Vec<u8>> {
    match count {
        0 => Ok(Vec::new()),
        1 if !iov.is_null() => {
            // SAFETY: the caller's promise.
            let v = unsafe { &*iov };
            if v.iov_len == 0 {
                return Ok(Vec::new());
            }
            if v.iov_base.is_null() {
                return Err(Errno::INVAL);
            }
            // SAFETY: as above.
            Ok(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) }.to_vec())
        }
        _ => Err(Errno::INVAL),
    }
}

/// The buffer of a short send (`fi_send`, `fi_tsend`): a copy when the
/// endpoint's op flags hold `FI_INJECT`, the application's memory in place
/// otherwise; `-FI_EINVAL` for a null buffer of some length.
///
/// # Safety
/// `buf` is valid for reads of `len` bytes and, without `FI_INJECT`, stays
/// untouched until the operation's completion (the engine only reads it).
pub(crate) unsafe fn send_buffer(e: &EpObj, buf: *const c_void, len: usize) -> FiResult<OpBuffer> {
    if buf.is_null() && len > 0 {
        return Err(Errno::INVAL);
    }
    if e.tx_op_flags() & sys::FI_INJECT as u64 != 0 {
        // SAFETY: the caller's promise.
        return Ok(unsafe { slice(buf, len)? }.to_vec().into());
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { op_buffer(buf.cast_mut().cast(), len) })
}

/// `len` bytes at `buf` as a slice (empty for zero).
///
/// # Safety
/// `buf` is valid for reads of `len` bytes.
pub(crate) unsafe fn slice<'a>(buf: *const c_void, len: usize) -> FiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// Posts an untagged receive of `len` bytes at `ptr` with `flags` (the
/// call's, or `rx_attr.op_flags`): a multi-receive with `FI_MULTI_RECV`
/// (`multi_recv.rs`), one from `src` only when the endpoint has
/// `FI_DIRECTED_RECV` and `src` is an address (fi_msg(3): ignored
/// otherwise).
///
/// # Safety
/// The `fi_recv` contract for the memory.
unsafe fn receive(
    e: &EpObj,
    ptr: *mut u8,
    len: usize,
    src: sys::fi_addr_t,
    flags: u64,
    ctx: u64,
) -> FiResult<isize> {
    let rep = e.rust()?;
    if trigger::asked(flags) {
        if flags & sys::FI_MULTI_RECV as u64 != 0 {
            return Err(trigger::unsupported("a multi-receive buffer"));
        }
        if directed(e, src).is_some() {
            return Err(trigger::unsupported("a directed receive"));
        }
        // SAFETY: the caller's promise: the buffer is the operation's until
        // its completion.
        let b = unsafe { op_buffer(ptr, len) };
        // SAFETY: the fi_trigger(3) contract for the context.
        return unsafe { trigger::defer(e, ctx as *mut c_void, |t, c| t.post_recv(b, c)) };
    }
    if flags & sys::FI_MULTI_RECV as u64 != 0 {
        // SAFETY: the caller's promise.
        return unsafe { crate::multi_recv::post(e, &rep, ptr, len, ctx) };
    }
    // SAFETY: the caller's promise: the buffer is the operation's until
    // its completion.
    let b = unsafe { op_buffer(ptr, len) };
    let p = match directed(e, src) {
        Some(src) => rep.post_recv_from(src, b, ctx)?,
        None => rep.post_recv(b, ctx)?,
    };
    e.remember(ctx, p);
    Ok(0)
}

/// The source a receive is restricted to: `src` when the endpoint has
/// `FI_DIRECTED_RECV` and `src` is not `FI_ADDR_UNSPEC`.
pub(crate) fn directed(e: &EpObj, src: sys::fi_addr_t) -> Option<FiAddr> {
    (e.caps().contains(Caps::DIRECTED_RECV) && src != sys::FI_ADDR_NOTAVAIL).then_some(FiAddr(src))
}

/// The flags `fi_sendmsg` / `fi_recvmsg` (and the tagged ones) accept.
pub(crate) const MSG_FLAGS: u64 = (sys::FI_COMPLETION
    | sys::FI_INJECT
    | sys::FI_INJECT_COMPLETE
    | sys::FI_TRANSMIT_COMPLETE
    | sys::FI_DELIVERY_COMPLETE
    | sys::FI_MORE
    | sys::FI_FENCE) as u64;

unsafe extern "C" fn recv(
    ep: *mut sys::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src_addr: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_recv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        if buf.is_null() && len > 0 {
            return Err(Errno::INVAL);
        }
        // SAFETY: the fi_recv contract.
        unsafe {
            receive(
                e,
                buf.cast(),
                len,
                src_addr,
                e.rx_op_flags(),
                context as u64,
            )
        }
    })
}

unsafe extern "C" fn recvv(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src_addr: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_recvv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: the fi_recvv contract.
        let (ptr, len) = unsafe { iov_parts(iov, count)? };
        // SAFETY: as above.
        unsafe { receive(e, ptr, len, src_addr, e.rx_op_flags(), context as u64) }
    })
}

unsafe extern "C" fn recvmsg(ep: *mut sys::fid_ep, msg: *const sys::fi_msg, flags: u64) -> isize {
    guard("fi_recvmsg", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        // SAFETY: null or a valid message (the contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno::INVAL)?;
        if flags & !(MSG_FLAGS | trigger::FLAG | sys::FI_MULTI_RECV as u64) != 0 {
            return Err(Errno::BADFLAGS);
        }
        // SAFETY: the message's iovecs (the contract).
        let (ptr, len) = unsafe { iov_parts(m.msg_iov, m.iov_count)? };
        // SAFETY: as above.
        unsafe { receive(e, ptr, len, m.addr, flags, m.context as u64) }
    })
}

unsafe extern "C" fn send(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest_addr: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_send", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: the fi_send contract.
        let b = unsafe { send_buffer(e, buf, len)? };
        let dest = FiAddr(dest_addr);
        if trigger::asked(e.tx_op_flags()) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, context, |t, c| t.post_send(dest, b, c)) };
        }
        rep.post_send(dest, b, context as u64)?;
        Ok(0)
    })
}

unsafe extern "C" fn sendv(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest_addr: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard("fi_sendv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: the fi_sendv contract.
        let b = unsafe { iov_buffer(iov, count)? };
        let dest = FiAddr(dest_addr);
        if trigger::asked(e.tx_op_flags()) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, context, |t, c| t.post_send(dest, b, c)) };
        }
        rep.post_send(dest, b, context as u64)?;
        Ok(0)
    })
}

unsafe extern "C" fn sendmsg(ep: *mut sys::fid_ep, msg: *const sys::fi_msg, flags: u64) -> isize {
    guard("fi_sendmsg", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: null or a valid message (the contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno::INVAL)?;
        if flags & sys::FI_REMOTE_CQ_DATA as u64 != 0 {
            return Err(Errno::NOSYS);
        }
        if flags & !(MSG_FLAGS | trigger::FLAG) != 0 {
            return Err(Errno::BADFLAGS);
        }
        let b = if flags & sys::FI_INJECT as u64 != 0 {
            // SAFETY: the message's iovecs (the contract).
            unsafe { iov_copy(m.msg_iov, m.iov_count)? }.into()
        } else {
            // SAFETY: as above.
            unsafe { iov_buffer(m.msg_iov, m.iov_count)? }
        };
        let dest = FiAddr(m.addr);
        if trigger::asked(flags) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, m.context, |t, c| t.post_send(dest, b, c)) };
        }
        rep.post_send(dest, b, m.context as u64)?;
        Ok(0)
    })
}

unsafe extern "C" fn inject(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: sys::fi_addr_t,
) -> isize {
    guard("fi_inject", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        if trigger::asked(e.tx_op_flags()) {
            return Err(trigger::unsupported("an inject (it has no context)"));
        }
        if len > rep.inject_size() {
            return Err(Errno::MSGSIZE);
        }
        // SAFETY: the fi_inject contract.
        let data = unsafe { slice(buf, len)? };
        rep.inject(FiAddr(dest_addr), data)?;
        Ok(0)
    })
}

unsafe extern "C" fn senddata(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: u64,
    _: sys::fi_addr_t,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn injectdata(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: u64,
    _: sys::fi_addr_t,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}
