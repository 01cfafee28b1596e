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
//! On ofi_mrail the same on [`MrailEndpoint::post_tpeek`], which also
//! honours the message's source with `FI_DIRECTED_RECV`; a claim there
//! leaves a large message at its sender until the claimed receive pulls
//! it (`src/mrail/claim.rs`).
//!
//! [`MrailEndpoint::post_tpeek`]: psmrail::mrail::MrailEndpoint::post_tpeek
//! [`Endpoint::post_tpeek`]: psmrail::fabric::Endpoint::post_tpeek
//! [`Endpoint::post_trecv_claimed`]: psmrail::fabric::Endpoint::post_trecv_claimed
//! [`Endpoint::discard_claimed`]: psmrail::fabric::Endpoint::discard_claimed

use crate::cbuf::op_buffer;
use crate::entry::{Errno, FiResult};
use crate::ep::{EpObj, RustEp};
use crate::msg::iov_parts;
use crate::obj;
use crate::sys;
use psmrail::mrail::MrailClaimed;
use psmrail::ops::{Claimed, PeekFlags};

/// A message a peek claimed, held by the endpoint under the operation's
/// context until a receive or discard with `FI_CLAIM`.
#[derive(Debug)]
pub(crate) enum AnyClaimed {
    Psm(Claimed),
    Mrail(MrailClaimed),
}

/// The flags that make `fi_trecvmsg` a peek or a claimed receive.
pub(crate) const PEEK_FLAGS: u64 = sys::FI_PEEK as u64 | sys::FI_CLAIM | sys::FI_DISCARD;

/// `fi_trecvmsg` with some of [`PEEK_FLAGS`] in `flags`.
///
/// # Safety
/// `m` is a valid message whose iovecs obey the `fi_trecvmsg` contract.
pub(crate) unsafe fn trecvmsg(e: &EpObj, m: &sys::fi_msg_tagged, flags: u64) -> FiResult<isize> {
    let rep = e.rust()?;
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
        let claimed = match &rep {
            RustEp::Psm(ep) => ep
                .post_tpeek(m.tag, m.ignore, peek, ctx)?
                .map(AnyClaimed::Psm),
            RustEp::Mrail(ep) => {
                let src = crate::msg::directed(e, m.addr);
                ep.post_tpeek(src, m.tag, m.ignore, peek, ctx)?
                    .map(AnyClaimed::Mrail)
            }
        };
        if let Some(c) = claimed {
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
    match (&rep, claimed) {
        (RustEp::Psm(ep), AnyClaimed::Psm(c)) if discard => ep.discard_claimed(c, ctx),
        (RustEp::Mrail(ep), AnyClaimed::Mrail(c)) if discard => ep.discard_claimed(c, ctx),
        (RustEp::Psm(ep), AnyClaimed::Psm(c)) => {
            // SAFETY: the fi_trecvmsg contract: the buffer is the
            // operation's until its completion (reported before this
            // returns: psm's claim holds the whole message).
            let b = unsafe { op_buffer(ptr, len) };
            ep.post_trecv_claimed(c, b, ctx)
                .map_err(|e| Errno::from(e.error))?;
        }
        (RustEp::Mrail(ep), AnyClaimed::Mrail(c)) => {
            // SAFETY: the fi_trecvmsg contract: the buffer is the
            // operation's until its completion.
            let b = unsafe { op_buffer(ptr, len) };
            ep.post_trecv_claimed(c, b, ctx)
                .map_err(|e| Errno::from(e.error))?;
        }
        // A context's claim is always its own endpoint's kind.
        _ => return Err(Errno::INVAL),
    }
    Ok(0)
}
