//! Tagged messages (`FI_TAGGED`): `tsend`, `trecv`, `tinject`, `tpeek`.
//!
//! Tags travel on the engine's tag-matching MQ as they are, minus the bits
//! the domain reserves for untagged messages and long RMA (bit 63 and 62,
//! `ARCHITECTURE.md`, "Kept as in C"); [`Info`](crate::fabric::Info)'s
//! `mem_tag_format` reports the user tag space. A receive matches a tag `t`
//! when `t & !ignore == tag & !ignore`, and the reserved bits of an incoming
//! tag must be 0, so tagged receives never see other traffic.

use super::op_span::{self, OpDesc};
use super::outcome::OpName;
use super::recv::{source_of, RecvKind, RecvOp};
use super::send::SendOp;
use super::submit::{check_caps, check_send_len, check_writable, mq_recv, mq_send, Dir};
use crate::engine::{OpBuffer, TagMatch};
use crate::fabric::{Caps, Endpoint, EndpointCore, FiAddr};
use crate::{Error, ErrorKind, Result};

bitflags::bitflags! {
    /// Flags of a peek ([`Endpoint::tpeek_with`]), as `fi_trecvmsg` takes them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PeekFlags: u64 {
        /// `FI_CLAIM`: claim the peeked message for a later receive.
        const CLAIM = 1 << 59;
        /// `FI_DISCARD`: drop the peeked message.
        const DISCARD = 1 << 58;
    }
}

/// What a peek found: the first unexpected tagged message that matches,
/// still queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peeked {
    /// The message's length.
    pub len: u64,
    /// Its tag (user bits).
    pub tag: u64,
    /// Its sender, [`FiAddr::UNSPEC`] where the engine cannot tell.
    pub source: FiAddr,
}

/// Rejects tags that use the domain's reserved bits: C cleared them and
/// logged a warning, which silently sends a different tag; psmrail says so.
#[inline]
fn check_tag(ep: &EndpointCore, tag: u64, op: OpName) -> Result<u64> {
    let reserved = ep.domain().tags().reserved();
    if tag & reserved != 0 {
        return Err(reserved_tag_error(tag, reserved, op));
    }
    Ok(tag)
}

#[cold]
#[inline(never)]
fn reserved_tag_error(tag: u64, reserved: u64, op: OpName) -> Error {
    Error::new(
        ErrorKind::Inval,
        format!(
            "{}: tag {tag:#x} uses bits {:#x} reserved by the provider (user tags are {:#x})",
            op.as_str(),
            tag & reserved,
            !reserved
        ),
    )
}

impl Endpoint {
    /// Sends `buf` with `tag` to `dest` (`fi_tsend`). Needs `FI_TAGGED` and
    /// `FI_SEND` (or no direction bits).
    ///
    /// The send is posted before this returns; the future resolves when the
    /// buffer may be reused, handing it back with the result.
    ///
    /// # Cancel safety
    /// Dropping the future does not take the send back: the message may
    /// still be delivered, and its buffer stays inside the reactor until
    /// the engine is done with it (then it is freed). `mem::forget` is
    /// safe too.
    pub fn tsend(&self, dest: FiAddr, tag: u64, buf: impl Into<OpBuffer>) -> SendOp<'_> {
        let buf = buf.into();
        let ep = &self.core;
        let checked = check_caps(ep, Caps::TAGGED, Dir::Send, OpName::TSend)
            .and_then(|()| check_send_len(ep, buf.len(), OpName::TSend))
            .and_then(|()| check_tag(ep, tag, OpName::TSend))
            .and_then(|tag| Ok((tag, ep.resolve(dest)?)));
        let (tag, peer) = match checked {
            Ok(v) => v,
            Err(e) => return SendOp::failed(e, buf),
        };
        let traced = op_span::wanted();
        let len = if traced { buf.len() } else { 0 };
        match mq_send(ep, peer, tag, buf) {
            Ok(op) if traced => {
                let d = OpDesc {
                    kind: "tsend",
                    peer: Some(dest),
                    tag: Some(tag),
                    len,
                };
                SendOp::traced(op, OpName::TSend, d)
            }
            Ok(op) => SendOp::posted(op, OpName::TSend),
            Err((e, buf)) => SendOp::failed(e, buf),
        }
    }

    /// Receives into `buf` the first message whose tag matches `tag` in the
    /// bits not set in `ignore` (`fi_trecv`, any source). Needs `FI_TAGGED`
    /// and `FI_RECV` (or no direction bits).
    ///
    /// The receive is posted before this returns, so it can be posted ahead
    /// of the matching send and awaited later.
    ///
    /// # Cancel safety
    /// Dropping the future before a message matched withdraws the receive
    /// (no message is consumed, the buffer is freed). Once matched, the
    /// message is consumed and the buffer stays inside the reactor until
    /// the engine is done writing it, then it is freed. `mem::forget` is
    /// safe too.
    pub fn trecv(&self, buf: impl Into<OpBuffer>, tag: u64, ignore: u64) -> RecvOp<'_> {
        let buf = buf.into();
        let ep = &self.core;
        let checked = check_caps(ep, Caps::TAGGED, Dir::Recv, OpName::TRecv)
            .and_then(|()| check_writable(&buf, OpName::TRecv));
        if let Err(e) = checked {
            return RecvOp::failed(e, buf);
        }
        let reserved = ep.domain().tags().reserved();
        let tags = TagMatch::new(tag & !reserved, !ignore | reserved);
        // Only a traced receive reads anything more (`op_span`): the plain
        // path stays as it was, without moving the op through a local.
        let traced = op_span::wanted();
        let len = if traced { buf.len() } else { 0 };
        match mq_recv(ep, tags, None, buf) {
            Ok(op) if traced => {
                let d = OpDesc {
                    kind: "trecv",
                    peer: None,
                    tag: Some(tag),
                    len,
                };
                RecvOp::traced(op, OpName::TRecv, RecvKind::Tagged, d)
            }
            Ok(op) => RecvOp::posted(op, OpName::TRecv, RecvKind::Tagged),
            Err((e, buf)) => RecvOp::failed(e, buf),
        }
    }

    /// Sends a small tagged message and returns once `data` may be reused
    /// (`fi_tinject`): at most the endpoint's inject size (64 B by default),
    /// no completion is reported, the send counter counts it at once.
    ///
    /// # Errors
    /// `FI_EMSGSIZE` above the inject size; the checks of [`tsend`](Self::tsend).
    ///
    /// # Cancel safety
    /// Not a future: the data is copied before this returns, and the
    /// message leaves whatever the caller does next.
    #[inline]
    pub fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> Result<()> {
        let ep = &self.core;
        check_caps(ep, Caps::TAGGED, Dir::Send, OpName::TSend)?;
        super::inject::check_inject_len(ep, data.len())?;
        let tag = check_tag(ep, tag, OpName::TSend)?;
        let peer = ep.resolve(dest)?;
        if op_span::wanted() {
            let d = OpDesc {
                kind: "tinject",
                peer: Some(dest),
                tag: Some(tag),
                len: data.len(),
            };
            return super::inject::traced(d, || super::inject::inject_mq(ep, peer, tag, data));
        }
        super::inject::inject_mq(ep, peer, tag, data)
    }

    /// Looks for a queued tagged message matching `tag`/`ignore` without
    /// receiving it (`FI_PEEK`). `Ok(None)` when there is none (libfabric
    /// reports `FI_ENOMSG`). In manual progress mode one progress round runs
    /// first, so messages already on the wire are seen.
    pub fn tpeek(&self, tag: u64, ignore: u64) -> Result<Option<Peeked>> {
        self.tpeek_with(tag, ignore, PeekFlags::empty())
    }

    /// [`tpeek`](Self::tpeek) with `fi_trecvmsg` flags.
    ///
    /// # Errors
    /// `FI_EOPNOTSUPP` for [`PeekFlags::CLAIM`] and [`PeekFlags::DISCARD`]:
    /// PSM's MQ cannot hold a message for later, so claiming receives it
    /// into memory of its own, which [`tclaim`](Self::tclaim) and
    /// [`post_tpeek`](Self::post_tpeek) do.
    pub fn tpeek_with(&self, tag: u64, ignore: u64, flags: PeekFlags) -> Result<Option<Peeked>> {
        let ep = &self.core;
        if !flags.is_empty() {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                format!("tpeek: {flags:?} is not supported (PSM's MQ cannot claim or discard a queued message)"),
            ));
        }
        check_caps(ep, Caps::TAGGED, Dir::Recv, OpName::TRecv)?;
        let domain = ep.domain();
        if domain.reactor().is_manual() {
            domain.reactor().progress();
        }
        let reserved = domain.tags().reserved();
        let tags = TagMatch::new(tag & !reserved, !ignore | reserved);
        Ok(domain.engine().iprobe(tags)?.map(|status| Peeked {
            len: status.msg_len,
            tag: status.tag & !reserved,
            source: source_of(ep, RecvKind::Tagged, &status),
        }))
    }
}
