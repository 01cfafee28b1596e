//! Posting: the checks every operation makes before it reaches the engine,
//! and the hand-off to the MQ or the AM message queue.

use super::outcome::OpName;
use super::pending::{release_unposted, Carrier, PendingOp};
use crate::engine::{OpBuffer, PeerAddr, SendMode, TagMatch};
use crate::fabric::{Caps, EndpointCore};
use crate::proto::peer_watch::{directed, PeerRef};
use crate::{Error, ErrorKind, Result};
use std::sync::Arc;

/// Direction of an operation, for the capability check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Send,
    Recv,
}

/// Checks that `ep` was opened with `class` (FI_MSG or FI_TAGGED) and the
/// direction (`FI_SEND` / `FI_RECV`, or neither, which allows both: the
/// man page's refinement rule).
#[inline]
pub(crate) fn check_caps(ep: &EndpointCore, class: Caps, dir: Dir, op: OpName) -> Result<()> {
    ep.ensure_open()?;
    let caps = ep.caps();
    let dir_bit = match dir {
        Dir::Send => Caps::SEND,
        Dir::Recv => Caps::RECV,
    };
    let dir_ok = caps.contains(dir_bit) || !caps.intersects(Caps::SEND | Caps::RECV);
    if caps.contains(class) && dir_ok {
        return Ok(());
    }
    Err(caps_error(caps, class, dir_bit, op))
}

#[cold]
#[inline(never)]
fn caps_error(caps: Caps, class: Caps, dir_bit: Caps, op: OpName) -> Error {
    Error::new(
        ErrorKind::OpNotSupp,
        format!(
            "{}: the endpoint was opened with {caps} and needs {class} with {dir_bit} (or no direction bits)",
            op.as_str()
        ),
    )
}

/// Checks a send's length against the engine's message limit.
pub(crate) fn check_send_len(ep: &EndpointCore, len: usize, op: OpName) -> Result<()> {
    let max = ep.domain().limits().max_message;
    if len as u64 > max {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!(
                "{}: {len} bytes exceed the largest message ({max} bytes)",
                op.as_str()
            ),
        ));
    }
    Ok(())
}

/// Checks that a receive buffer can be written.
#[inline]
pub(crate) fn check_writable(buf: &OpBuffer, op: OpName) -> Result<()> {
    if !buf.is_writable() {
        return Err(read_only_error(op));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn read_only_error(op: OpName) -> Error {
    Error::new(
        ErrorKind::Inval,
        format!(
            "{}: the buffer is shared read-only `Bytes`; receive into a Vec, BytesMut or region",
            op.as_str()
        ),
    )
}

/// A post the engine refused: counted (`FI_EAGAIN`) in the endpoint's
/// statistics, its error and buffer handed back.
#[cold]
#[inline(never)]
fn refused(ep: &EndpointCore, e: crate::engine::PostError) -> (Error, OpBuffer) {
    ep.stats().refused(&e.error);
    (e.error, e.buffer)
}

/// Posts an MQ send (refused at once towards a dead peer).
#[inline(always)]
pub(crate) fn mq_send<'a>(
    ep: &'a Arc<EndpointCore>,
    peer: PeerAddr,
    tag: u64,
    buf: OpBuffer,
) -> std::result::Result<PendingOp<'a>, (Error, OpBuffer)> {
    let domain = ep.domain();
    if let Err(e) = domain.peers().refuse(peer, "send") {
        return Err((e, buf));
    }
    match domain
        .direct()
        .isend_keyed(peer, tag, SendMode::Standard, buf)
    {
        Ok(key) => {
            domain.reactor().notify();
            Ok(PendingOp::new(
                ep,
                key,
                Carrier::Mq,
                false,
                Some(PeerRef::Peer(peer)),
            ))
        }
        Err(e) => Err(refused(ep, e)),
    }
}

/// Posts an MQ receive; `from` is the sender epid of a directed one
/// (`directed(&tags)`; `None` for tagged receives, which never are), refused
/// at once when that peer is dead.
#[inline(always)]
pub(crate) fn mq_recv<'a>(
    ep: &'a Arc<EndpointCore>,
    tags: TagMatch,
    from: Option<u64>,
    buf: OpBuffer,
) -> std::result::Result<PendingOp<'a>, (Error, OpBuffer)> {
    let domain = ep.domain();
    debug_assert_eq!(from, directed(&tags), "{tags:?}");
    if let Some(epid) = from {
        if let Err(e) = domain.peers().refuse_epid(epid, "recv") {
            return Err((e, buf));
        }
    }
    match domain.direct().irecv_keyed(tags, buf) {
        Ok(key) => {
            domain.reactor().notify();
            Ok(PendingOp::new(
                ep,
                key,
                Carrier::Mq,
                true,
                from.map(PeerRef::Epid),
            ))
        }
        Err(e) => Err(refused(ep, e)),
    }
}

/// Posts a send on the AM message queue.
pub(crate) fn am_send<'a>(
    ep: &'a Arc<EndpointCore>,
    peer: PeerAddr,
    buf: OpBuffer,
) -> std::result::Result<PendingOp<'a>, (Error, OpBuffer)> {
    let domain = ep.domain();
    let table = domain.table();
    let key = table.insert();
    match domain.am_msg().send(peer, buf, key) {
        Ok(()) => {
            domain.reactor().notify();
            Ok(PendingOp::new(ep, key, Carrier::AmMsg, false, None))
        }
        Err(e) => {
            release_unposted(table, key);
            Err(refused(ep, e))
        }
    }
}

/// Posts a receive on the AM message queue (`from` for a directed one).
pub(crate) fn am_recv<'a>(
    ep: &'a Arc<EndpointCore>,
    from: Option<PeerAddr>,
    buf: OpBuffer,
) -> std::result::Result<PendingOp<'a>, (Error, OpBuffer)> {
    let domain = ep.domain();
    let table = domain.table();
    let key = table.insert();
    match domain.am_msg().recv(from, buf, key) {
        Ok(()) => {
            domain.reactor().notify();
            Ok(PendingOp::new(ep, key, Carrier::AmMsg, true, None))
        }
        Err(e) => {
            release_unposted(table, key);
            Err(refused(ep, e))
        }
    }
}
