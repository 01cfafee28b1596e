//! Peeking in the C face: `fi_trecvmsg` with `FI_PEEK`, `FI_CLAIM` and
//! `FI_DISCARD` (fi_tagged(3)) on psmrail's [`Endpoint::post_tpeek`],
//! [`Endpoint::post_trecv_claimed`] and [`Endpoint::discard_claimed`]
//! (`src/ops/claim.rs` says how a claim is made over PSM's probe-only MQ).
//!
//! * `FI_PEEK`: a completion (`FI_RECV | FI_TAGGED`, `len`, `tag`, no
//!   `buf`) when a queued message matches, an `-FI_ENOMSG` error entry
//!   otherwise; the message stays queued.
//! * `FI_PEEK | FI_CLAIM`: the same, and a found message is held for the
//!   operation's `fi_context`; a later `fi_trecvmsg` with `FI_CLAIM` and
//!   the same context receives exactly it, with `FI_CLAIM | FI_DISCARD`
//!   drops it (a completion without data). `FI_CLAIM` with a context that
//!   holds nothing is `-FI_EINVAL`.
//! * `FI_PEEK | FI_DISCARD`: the same as a peek, and the message is dropped.
//!
//! psm only: ofi_mrail's Rust endpoint cannot peek (`-FI_ENOSYS`).
//!
//! [`Endpoint::post_tpeek`]: psmrail::fabric::Endpoint::post_tpeek
//! [`Endpoint::post_trecv_claimed`]: psmrail::fabric::Endpoint::post_trecv_claimed
//! [`Endpoint::discard_claimed`]: psmrail::fabric::Endpoint::discard_claimed

use crate::cbuf::op_buffer;
use crate::entry::{Errno, FiResult};
use crate::ep::{EpObj, RustEp};
use crate::msg::iov_parts;
use crate::obj;
use crate::sys;
use psmrail::ops::PeekFlags;

/// The flags that make `fi_trecvmsg` a peek or a claimed receive.
pub(crate) const PEEK_FLAGS: u64 = sys::FI_PEEK as u64 | sys::FI_CLAIM | sys::FI_DISCARD;

/// `fi_trecvmsg` with some of [`PEEK_FLAGS`] in `flags`.
///
/// # Safety
/// `m` is a valid message whose iovecs obey the `fi_trecvmsg` contract.
pub(crate) unsafe fn trecvmsg(e: &EpObj, m: &sys::fi_msg_tagged, flags: u64) -> FiResult<isize> {
    let RustEp::Psm(ep) = e.rust()? else {
        return Err(Errno::NOSYS);
    };
    let ctx = m.context as u64;
    let claim = flags & sys::FI_CLAIM != 0;
    let discard = flags & sys::FI_DISCARD != 0;
    if flags & sys::FI_PEEK as u64 != 0 {
        let mut peek = PeekFlags::empty();
        peek.set(PeekFlags::CLAIM, claim);
        peek.set(PeekFlags::DISCARD, discard);
        if claim && ctx == 0 {
            // The claimed message is found again by its context.
            return Err(Errno::INVAL);
        }
        if let Some(c) = ep.post_tpeek(m.tag, m.ignore, peek, ctx)? {
            obj::lock(&e.base().claimed).insert(ctx, c);
        }
        return Ok(0);
    }
    if !claim {
        // FI_DISCARD alone.
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise.
    let (ptr, len) = unsafe { iov_parts(m.msg_iov, m.iov_count)? };
    let claimed = obj::lock(&e.base().claimed)
        .remove(&ctx)
        .ok_or(Errno::INVAL)?;
    if discard {
        ep.discard_claimed(claimed, ctx);
        return Ok(0);
    }
    // SAFETY: the fi_trecvmsg contract: the buffer is the operation's
    // until its completion (which is reported before this returns).
    let b = unsafe { op_buffer(ptr, len) };
    ep.post_trecv_claimed(claimed, b, ctx)
        .map_err(|e| Errno::from(e.error))?;
    Ok(0)
}
