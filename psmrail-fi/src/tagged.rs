//! The `fi_ops_tagged` table: tagged sends and receives of an enabled
//! endpoint on psmrail's `post_tsend` / `post_trecv` (see `msg.rs` for the
//! buffers and flags). Peeking (`FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`) is
//! `peek.rs`'s; remote CQ data is `-FI_ENOSYS`. Tagged receives take any
//! source: psm cannot direct them (`FI_DIRECTED_RECV` comes without
//! `FI_TAGGED`, fi_psm(7)). `FI_TRIGGER` defers an operation until a
//! counter's threshold (`trigger.rs`).

use crate::cbuf::op_buffer;
use crate::entry::{guard, Errno, FiResult};
use crate::ep::{AnyPosted, EpObj, RustEp};
use crate::msg::{iov_buffer, iov_copy, slice, MSG_FLAGS};
use crate::obj::{self, Table};
use crate::sys;
use crate::trigger;
use psmrail::engine::OpBuffer;
use psmrail::fabric::FiAddr;
use std::ffi::c_void;

pub(crate) static TAGGED_OPS: Table<sys::fi_ops_tagged> = Table::new(sys::fi_ops_tagged {
    size: std::mem::size_of::<sys::fi_ops_tagged>(),
    recv: Some(trecv),
    recvv: Some(trecvv),
    recvmsg: Some(trecvmsg),
    send: Some(tsend),
    sendv: Some(tsendv),
    sendmsg: Some(tsendmsg),
    inject: Some(tinject),
    senddata: Some(tsenddata),
    injectdata: Some(tinjectdata),
});

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecv(
    ep: *mut sys::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src_addr: sys::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_trecv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        if buf.is_null() && len > 0 {
            return Err(Errno::INVAL);
        }
        // SAFETY: the fi_trecv contract.
        let b = unsafe { op_buffer(buf.cast(), len) };
        if trigger::asked(e.rx_op_flags()) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, context, |t, c| t.post_trecv(b, tag, ignore, c)) };
        }
        let p = post_trecv(e, &rep, src_addr, b, tag, ignore, context as u64)?;
        e.remember(context as u64, p);
        Ok(0)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecvv(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src_addr: sys::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_trecvv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: the fi_trecvv contract.
        let b = unsafe { iov_buffer(iov, count)? };
        if trigger::asked(e.rx_op_flags()) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, context, |t, c| t.post_trecv(b, tag, ignore, c)) };
        }
        let p = post_trecv(e, &rep, src_addr, b, tag, ignore, context as u64)?;
        e.remember(context as u64, p);
        Ok(0)
    })
}

/// A tagged receive, from `src` only where the endpoint has
/// `FI_DIRECTED_RECV` and `src` names a peer.
fn post_trecv(
    e: &EpObj,
    rep: &RustEp,
    src: sys::fi_addr_t,
    b: OpBuffer,
    tag: u64,
    ignore: u64,
    ctx: u64,
) -> FiResult<AnyPosted> {
    match crate::msg::directed(e, src) {
        Some(src) => rep.post_trecv_from(src, b, tag, ignore, ctx),
        None => rep.post_trecv(b, tag, ignore, ctx),
    }
}

unsafe extern "C" fn trecvmsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_tagged,
    flags: u64,
) -> isize {
    guard("fi_trecvmsg", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: null or a valid message (the contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno::INVAL)?;
        if flags & !(MSG_FLAGS | trigger::FLAG | crate::peek::PEEK_FLAGS) != 0 {
            return Err(Errno::BADFLAGS);
        }
        let peek = flags & crate::peek::PEEK_FLAGS != 0;
        if trigger::asked(flags) {
            if peek {
                return Err(trigger::unsupported("a peek or a claimed receive"));
            }
            // SAFETY: the message's iovecs (the contract).
            let b = unsafe { iov_buffer(m.msg_iov, m.iov_count)? };
            let (tag, ignore) = (m.tag, m.ignore);
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, m.context, |t, c| t.post_trecv(b, tag, ignore, c)) };
        }
        if peek {
            // SAFETY: a valid message (the contract).
            return unsafe { crate::peek::trecvmsg(e, m, flags) };
        }
        // SAFETY: the message's iovecs (the contract).
        let b = unsafe { iov_buffer(m.msg_iov, m.iov_count)? };
        let ctx = m.context as u64;
        let p = post_trecv(e, &rep, m.addr, b, m.tag, m.ignore, ctx)?;
        e.remember(ctx, p);
        Ok(0)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsend(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest_addr: sys::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_tsend", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: the fi_tsend contract.
        let b = unsafe { crate::msg::send_buffer(e, buf, len)? };
        let dest = FiAddr(dest_addr);
        if trigger::asked(e.tx_op_flags()) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, context, |t, c| t.post_tsend(dest, tag, b, c)) };
        }
        rep.post_tsend(dest, tag, b, context as u64)?;
        Ok(0)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsendv(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest_addr: sys::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    guard("fi_tsendv", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        // SAFETY: the fi_tsendv contract.
        let b = unsafe { iov_buffer(iov, count)? };
        let dest = FiAddr(dest_addr);
        if trigger::asked(e.tx_op_flags()) {
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, context, |t, c| t.post_tsend(dest, tag, b, c)) };
        }
        rep.post_tsend(dest, tag, b, context as u64)?;
        Ok(0)
    })
}

unsafe extern "C" fn tsendmsg(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_tagged,
    flags: u64,
) -> isize {
    guard("fi_tsendmsg", || {
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
            let tag = m.tag;
            // SAFETY: the fi_trigger(3) contract for the context.
            return unsafe { trigger::defer(e, m.context, |t, c| t.post_tsend(dest, tag, b, c)) };
        }
        rep.post_tsend(dest, m.tag, b, m.context as u64)?;
        Ok(0)
    })
}

unsafe extern "C" fn tinject(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: sys::fi_addr_t,
    tag: u64,
) -> isize {
    guard("fi_tinject", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block(ep)? };
        let rep = e.rust()?;
        if trigger::asked(e.tx_op_flags()) {
            return Err(trigger::unsupported("an inject (it has no context)"));
        }
        if len > rep.inject_size() {
            return Err(Errno::MSGSIZE);
        }
        // SAFETY: the fi_tinject contract.
        let data = unsafe { slice(buf, len)? };
        rep.tinject(FiAddr(dest_addr), tag, data)?;
        Ok(0)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsenddata(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: u64,
    _: sys::fi_addr_t,
    _: u64,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn tinjectdata(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: u64,
    _: sys::fi_addr_t,
    _: u64,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}
