//! [`DirectEngine`]: the engine endpoint as the message operations call it.
//!
//! Everything else in the crate holds an endpoint as
//! `Arc<dyn EngineEndpoint>`. The posts and polls of small messages
//! (`ops/submit.rs`, `ops/inject.rs`, `ops/pending.rs`) are the one place
//! where that indirection shows: a dynamic call cannot be inlined, so each
//! post moved its [`OpBuffer`] and result through memory. This handle
//! names the native engine's type, so its hot path compiles into the
//! operations; any other engine is still called through the contract.
//!
//! It is not measurably faster on its own (the API's 8 B ping-pong stayed
//! within the ±5 % that code layout moves it); with the keyed posts it
//! lets the native engine skip the check of a key it has just taken.
//!
//! Its methods, and the posting helpers that call them (`mq_send`,
//! `mq_recv`, `inject_mq`), are `#[inline(always)]`; `SendOp::poll` and
//! `tinject` are `#[inline]`, and the receive's `RecvOp::poll` and
//! `PendingOp::poll` `#[inline(always)]` (their error paths out of line),
//! so that they inline into the caller's crate and the awaiting task:
//! each layer left as a call moved the [`OpBuffer`] (56 bytes then) and
//! the post's result through memory once more. Under callgrind that cut
//! the API's 8 B ping-pong by 77 instructions per message (2,020 to
//! 1,943, the engine's fast path taking 1,532), and inlining the receive
//! future into the task 81 more (1,948 to 1,867), worth about
//! 10 ns per side in time (BENCHMARKING.md, "The API"). Making the `OpBuffer` one
//! pointer wide removed most of what was left of that cost.

use super::native::NativeEndpoint;
use super::{EngineEndpoint, MqCompletion, OpBuffer, PeerAddr, PostError, SendMode, TagMatch};
use crate::reactor::{OpKey, Reactor};
use crate::Result;
use std::any::Any;
use std::sync::Arc;
use std::task::{Context, Poll};

/// An engine endpoint, called statically when it is the native engine.
#[derive(Clone)]
pub(crate) enum DirectEngine {
    /// The native engine (real PSM).
    Native(Arc<NativeEndpoint>),
    /// Any other engine, through the contract.
    Other(Arc<dyn EngineEndpoint>),
}

impl std::fmt::Debug for DirectEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DirectEngine::Native(_) => "DirectEngine::Native",
            DirectEngine::Other(_) => "DirectEngine::Other",
        })
    }
}

impl DirectEngine {
    /// The handle of `ep`: native when it is a [`NativeEndpoint`].
    pub(crate) fn new<E: EngineEndpoint>(ep: Arc<E>) -> Self {
        let any: Arc<dyn Any + Send + Sync> = ep.clone();
        match any.downcast::<NativeEndpoint>() {
            Ok(native) => DirectEngine::Native(native),
            Err(_) => DirectEngine::Other(ep),
        }
    }

    /// The endpoint through the contract.
    pub(crate) fn as_dyn(&self) -> Arc<dyn EngineEndpoint> {
        match self {
            DirectEngine::Native(ep) => ep.clone(),
            DirectEngine::Other(ep) => ep.clone(),
        }
    }

    /// [`EngineEndpoint::isend_keyed`].
    #[inline(always)]
    pub(crate) fn isend_keyed(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
    ) -> std::result::Result<OpKey, PostError> {
        match self {
            DirectEngine::Native(ep) => ep.isend_keyed(peer, tag, mode, buffer),
            DirectEngine::Other(ep) => ep.isend_keyed(peer, tag, mode, buffer),
        }
    }

    /// [`EngineEndpoint::irecv_keyed`].
    #[inline(always)]
    pub(crate) fn irecv_keyed(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
    ) -> std::result::Result<OpKey, PostError> {
        match self {
            DirectEngine::Native(ep) => ep.irecv_keyed(tags, buffer),
            DirectEngine::Other(ep) => ep.irecv_keyed(tags, buffer),
        }
    }

    /// [`EngineEndpoint::inject`].
    #[inline(always)]
    pub(crate) fn inject(&self, peer: PeerAddr, tag: u64, data: &[u8]) -> Result<()> {
        match self {
            DirectEngine::Native(ep) => ep.inject(peer, tag, data),
            DirectEngine::Other(ep) => ep.inject(peer, tag, data),
        }
    }

    /// [`EngineEndpoint::poll_completion`].
    #[inline(always)]
    pub(crate) fn poll_completion(
        &self,
        reactor: &Reactor,
        op: OpKey,
        cx: &mut Context<'_>,
    ) -> Poll<MqCompletion> {
        match self {
            DirectEngine::Native(ep) => {
                reactor.poll_completion_with(ep.completions(), op, cx, || ep.poll_op(op))
            }
            DirectEngine::Other(ep) => ep.poll_completion(reactor, op, cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::soft::SoftEngine;
    use crate::engine::{EndpointOptions, Engine};
    use std::time::Duration;

    #[test]
    fn a_soft_endpoint_goes_through_the_contract() {
        let engine = SoftEngine::new(Default::default()).expect("soft engine");
        let ep = engine
            .open(&EndpointOptions {
                uuid: [7; 16],
                unit: None,
                port: None,
                close_timeout: Duration::ZERO,
            })
            .expect("open");
        let direct = DirectEngine::new(ep.clone());
        assert!(matches!(direct, DirectEngine::Other(_)));
        assert_eq!(direct.as_dyn().epid(), ep.epid());
        ep.close(Duration::ZERO).expect("close");
    }
}
