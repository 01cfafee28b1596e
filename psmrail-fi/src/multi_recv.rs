//! `FI_MULTI_RECV` in the C face: `fi_recv`, `fi_recvv` and `fi_recvmsg`
//! with the flag (in `rx_attr.op_flags` for the first two) post the
//! application's buffer as one multi-receive block on psmrail's
//! [`Endpoint::post_multi_recv`](psmrail::fabric::Endpoint::post_multi_recv):
//! each message's completion carries the block's context, its own `buf`
//! (where in the block it starts) and `len`; the completion after which
//! less than `FI_OPT_MIN_MULTI_RECV` stays free carries `FI_MULTI_RECV`
//! (the block is released). `fi_cancel` with the context ends it. psm
//! only (fi_psm(7): untagged messages); ofi_mrail's Rust endpoint has no
//! multi-receive, so its infos never offer the capability and the flag is
//! `-FI_EOPNOTSUPP` there.

use crate::cbuf::block;
use crate::entry::{Errno, FiResult};
use crate::ep::{AnyPosted, EpObj, RustEp};

/// Posts `len` bytes at `ptr` as a multi-receive block with `ctx`.
///
/// # Safety
/// The `fi_recv` contract: the memory is the operation's until its
/// completion flagged `FI_MULTI_RECV` (or its cancellation).
pub(crate) unsafe fn post(
    e: &EpObj,
    ep: &RustEp,
    ptr: *mut u8,
    len: usize,
    ctx: u64,
) -> FiResult<isize> {
    let RustEp::Psm(ep) = ep else {
        return Err(Errno::OPNOTSUPP);
    };
    // SAFETY: the caller's promise.
    let block = unsafe { block(ptr, len) }.ok_or(Errno::INVAL)?;
    let p = ep.post_multi_recv(block, ctx)?;
    e.remember(ctx, AnyPosted::Multi(p));
    Ok(0)
}
