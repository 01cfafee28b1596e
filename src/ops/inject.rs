//! Inject: small sends that return once the caller's bytes may be reused
//! and report no completion (`fi_inject`, `fi_tinject`).
//!
//! The bytes (at most the endpoint's inject size, 64 B by default) are
//! copied; the send then runs in the background and its slot is abandoned,
//! so the reactor frees the copy when the engine is done. The send counter
//! counts the inject at once, as in C, and so do the endpoint's
//! statistics; its span (when traced) covers the call.

use super::op_span::{self, OpDesc, Provider};
use super::pending::{release_unposted, Carrier, PendingOp};
use crate::engine::{OpBuffer, PeerAddr};
use crate::fabric::{CounterKind, EndpointCore};
use crate::{Error, ErrorKind, Result};
use std::sync::Arc;

/// Checks `len` against the endpoint's inject size.
#[inline]
pub(crate) fn check_inject_len(ep: &EndpointCore, len: usize) -> Result<()> {
    let max = ep.inject_size();
    if len > max {
        return Err(inject_len_error(len, max));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn inject_len_error(len: usize, max: usize) -> Error {
    Error::new(
        ErrorKind::MsgSize,
        format!("inject: {len} bytes exceed the inject size ({max} bytes); use a send"),
    )
}

#[inline]
fn counted(ep: &EndpointCore, len: usize) {
    super::outcome::count(ep.counter(CounterKind::Send), true);
    ep.stats().sent(len);
}

/// Runs `inject` inside the span of the operation `d` describes: for
/// callers that found [`op_span::wanted`].
#[cold]
#[inline(never)]
pub(crate) fn traced(d: OpDesc, inject: impl FnOnce() -> Result<()>) -> Result<()> {
    let len = d.len;
    let Some(span) = op_span::open(Provider::Psm, d) else {
        return inject();
    };
    let result = span.in_scope(inject);
    match &result {
        Ok(()) => op_span::ok(&span, len, None),
        Err(e) => op_span::err(&span, e),
    }
    result
}

/// Injects over the MQ with `tag`: the engine's own inject (native: PSM's
/// blocking `psm_mq_send`, no slot; soft: the contract's default, a copy
/// sent under an abandoned key).
#[inline(always)]
pub(crate) fn inject_mq(
    ep: &Arc<EndpointCore>,
    peer: PeerAddr,
    tag: u64,
    data: &[u8],
) -> Result<()> {
    let domain = ep.domain();
    domain.peers().refuse(peer, "inject")?;
    if let Err(e) = domain.direct().inject(peer, tag, data) {
        ep.stats().refused(&e);
        return Err(e);
    }
    domain.reactor().notify();
    counted(ep, data.len());
    Ok(())
}

/// Injects an untagged message over the AM message queue.
pub(crate) fn inject_am(ep: &Arc<EndpointCore>, peer: PeerAddr, data: &[u8]) -> Result<()> {
    let domain = ep.domain();
    let table = domain.table();
    let key = table.insert();
    let buf = OpBuffer::from(data.to_vec());
    match domain.am_msg().send(peer, buf, key) {
        Ok(()) => {
            domain.reactor().notify();
            drop(PendingOp::new(ep, key, Carrier::AmMsg, false, None));
            counted(ep, data.len());
            Ok(())
        }
        Err(e) => {
            release_unposted(table, key);
            ep.stats().refused(&e.error);
            Err(e.error)
        }
    }
}
