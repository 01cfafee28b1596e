//! Triggered operations (`FI_TRIGGER`, fi_trigger(3)) in the C face, psm
//! only: a send, receive (untagged or tagged), RMA write or RMA read whose
//! flags hold `FI_TRIGGER` (the `*msg` calls' `flags`, the other calls'
//! op flags, as an `fi_ep_alias` made with `FI_TRANSMIT | FI_TRIGGER`
//! sets them) takes a `struct fi_triggered_context` as its context, with
//! event type `FI_TRIGGER_THRESHOLD`: a counter of the endpoint's domain
//! and a threshold. The call returns at once; the operation is posted
//! exactly once, when the counter's success count first reaches the
//! threshold (at once if it is there), by psmrail's
//! [`Endpoint::triggered`] machinery, during a progress round of the
//! domain. Its completion then carries the `fi_triggered_context` pointer
//! as its context, as every completion carries the context it was posted
//! with. Operations fire in threshold order, equal thresholds in posting
//! order.
//!
//! What reaches the completion queue differs from the untriggered call in
//! two ways: a triggered RMA operation is reported even to a queue bound
//! with `FI_SELECTIVE_COMPLETION` (as the C face's sends are), and a fired
//! operation that fails (a key the target does not know: `FI_EACCES`)
//! or one still waiting when its endpoint closes (`FI_ECANCELED`) is an
//! error entry with the context. `fi_close` of the endpoint runs one
//! progress round, which cancels the operations still waiting, so that a
//! counter that never reaches their threshold holds nothing afterwards.
//! A waiting triggered receive is not in `fi_cancel`'s reach (it is not
//! posted yet).
//!
//! Refused at the call (nothing is deferred): a null context or one whose
//! event type is not `FI_TRIGGER_THRESHOLD`, a null, closed or foreign
//! counter, a counter of another domain, an endpoint opened without
//! `FI_TRIGGER` (all `-FI_EINVAL`; an `FI_TRIGGER_XPU` context is
//! `-FI_ENOSYS`), and what cannot be triggered here (`-FI_EOPNOTSUPP`):
//! injects (they have no context), remote CQ data, several remote
//! ranges, multi-receive buffers, peeks, directed receives, atomics, and
//! anything on ofi_mrail (whose Rust endpoint has no triggered
//! operations; its infos never offer `FI_TRIGGER`).
//!
//! [`Endpoint::triggered`]: psmrail::fabric::Endpoint::triggered

use crate::cntr::CntrObj;
use crate::domain::RustDomain;
use crate::entry::{log_info, Errno, FiResult};
use crate::ep::{EpObj, RustEp};
use crate::obj;
use crate::sys;
use psmrail::engine::PostError;
use psmrail::fabric::{Caps, Counter};
use psmrail::ops::Triggered;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// `FI_TRIGGER` as an operation flag.
pub(crate) const FLAG: u64 = sys::FI_TRIGGER as u64;

/// Whether `flags` ask for a triggered operation.
pub(crate) fn asked(flags: u64) -> bool {
    flags & FLAG != 0
}

/// `errno`, with `why` in libfabric's log.
fn refuse(errno: Errno, why: &str) -> Errno {
    log_info(&format!("FI_TRIGGER: {why}"));
    errno
}

/// `-FI_EOPNOTSUPP` for an operation (`what`) that cannot be triggered.
pub(crate) fn unsupported(what: &str) -> Errno {
    refuse(Errno::OPNOTSUPP, &format!("{what} cannot be triggered"))
}

/// The counter and threshold of the triggered context at `context`,
/// checked against `e`.
///
/// # Safety
/// `context` is null or points to a `struct fi_triggered_context` (the
/// fi_trigger(3) contract of a call with `FI_TRIGGER`).
unsafe fn condition(e: &EpObj, context: *mut c_void) -> FiResult<(Counter, u64)> {
    let ctx = context.cast::<sys::fi_triggered_context>();
    // SAFETY: the caller's promise.
    let Some(t) = (unsafe { ctx.as_ref() }) else {
        return Err(refuse(
            Errno::INVAL,
            "the context must be a struct fi_triggered_context, not null",
        ));
    };
    match t.event_type {
        sys::FI_TRIGGER_THRESHOLD => {}
        sys::FI_TRIGGER_XPU => {
            return Err(refuse(
                Errno::NOSYS,
                "FI_TRIGGER_XPU needs FI_XPU, which psm does not have",
            ))
        }
        other => {
            return Err(refuse(
                Errno::INVAL,
                &format!("unknown trigger event type {other}"),
            ))
        }
    }
    // SAFETY: the event type says the union holds a threshold; its fields
    // are a pointer and a size, any bit pattern of which is valid.
    let th = unsafe { t.trigger.threshold };
    // SAFETY: CntrObj is the block type of FI_CLASS_CNTR (the live check
    // refuses a null, closed or foreign fid).
    let c: &CntrObj = unsafe { obj::cast(th.cntr.cast(), sys::FI_CLASS_CNTR) }.map_err(|_| {
        refuse(
            Errno::INVAL,
            "the threshold's counter is not an open counter of this provider",
        )
    })?;
    if c.domain_addr() != e.domain_addr() {
        return Err(refuse(
            Errno::INVAL,
            "the threshold's counter belongs to another domain",
        ));
    }
    Ok((c.rust()?, th.threshold as u64))
}

/// Defers an operation of `e` until the condition of the triggered context
/// at `context` holds (module docs): `post` makes it, a post of psmrail's
/// [`Triggered`] given the context to report, and its completion carries
/// `context`.
///
/// # Safety
/// As [`condition`] for `context`; the buffer `post` hands over is the
/// operation's until its completion, as for the untriggered call.
pub(crate) unsafe fn defer(
    e: &EpObj,
    context: *mut c_void,
    post: impl FnOnce(&Triggered<'_>, u64) -> Result<(), PostError>,
) -> FiResult<isize> {
    let rep = e.rust()?;
    if !e.caps().contains(Caps::TRIGGER) {
        return Err(refuse(
            Errno::INVAL,
            "the endpoint was opened without the FI_TRIGGER capability",
        ));
    }
    let RustEp::Psm(ep) = rep else {
        return Err(unsupported("an ofi_mrail operation"));
    };
    // SAFETY: the caller's promise.
    let (counter, threshold) = unsafe { condition(e, context)? };
    let r = post(&ep.triggered(&counter, threshold), context as u64);
    r.map_err(|p| Errno::from(p.error))?;
    e.base().triggered.store(true, Ordering::Release);
    Ok(0)
}

/// After the psmrail endpoint under `e` closed: one progress round of its
/// domain, in which the triggered operations still waiting on its
/// counters are cancelled (an `FI_ECANCELED` error entry each) and let go
/// of the endpoint.
pub(crate) fn cancel_waiting(e: &EpObj) {
    if let Ok(RustDomain::Psm(d)) = e.domain_rust() {
        d.reactor().progress();
    }
}
