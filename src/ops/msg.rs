//! Untagged messages (`FI_MSG`): `send`, `recv`, `recv_from`, `inject`.
//!
//! By default they travel on the engine's tag-matching MQ with tag
//! `MSG_BIT | sender epid` (`ARCHITECTURE.md`, "Kept as in C"), so a
//! receive knows its source from the tag even where the engine does not
//! report it, and a directed receive (`FI_DIRECTED_RECV`) matches one
//! sender exactly. With `FI_PSM_AM_MSG=1` they travel over active messages
//! instead (the domain's AM message queue); the API is the same.

use super::op_span::{self, OpDesc};
use super::outcome::OpName;
use super::recv::{RecvKind, RecvOp};
use super::send::SendOp;
use super::submit::{
    am_recv, am_send, check_caps, check_send_len, check_writable, mq_recv, mq_send, Dir,
};
use crate::engine::{OpBuffer, TagMatch};
use crate::fabric::{Caps, Endpoint, EndpointCore, FiAddr, MSG_BIT};
use crate::proto::peer_watch::directed;
use crate::{Error, ErrorKind, Result};

/// The MQ tag of an untagged message from `ep`.
fn msg_tag(ep: &EndpointCore) -> u64 {
    MSG_BIT | (ep.domain().epid().0 & !MSG_BIT)
}

impl Endpoint {
    /// Sends `buf` to `dest` (`fi_send`). Needs `FI_MSG` and `FI_SEND` (or
    /// no direction bits).
    ///
    /// The send is posted before this returns; the future resolves when the
    /// buffer may be reused, handing it back with the result.
    ///
    /// # Cancel safety
    /// Dropping the future does not take the send back: the message may
    /// still be delivered, and its buffer stays inside the reactor until
    /// the engine is done with it (then it is freed). `mem::forget` is
    /// safe too.
    pub fn send(&self, dest: FiAddr, buf: impl Into<OpBuffer>) -> SendOp<'_> {
        let buf = buf.into();
        let ep = &self.core;
        let checked = check_caps(ep, Caps::MSG, Dir::Send, OpName::Send)
            .and_then(|()| check_send_len(ep, buf.len(), OpName::Send))
            .and_then(|()| ep.resolve(dest));
        let peer = match checked {
            Ok(p) => p,
            Err(e) => return SendOp::failed(e, buf),
        };
        let traced = op_span::wanted();
        let len = if traced { buf.len() } else { 0 };
        let posted = if ep.domain().config().am_msg() {
            am_send(ep, peer, buf)
        } else {
            mq_send(ep, peer, msg_tag(ep), buf)
        };
        match posted {
            Ok(op) if traced => {
                let d = OpDesc {
                    kind: "send",
                    peer: Some(dest),
                    tag: None,
                    len,
                };
                SendOp::traced(op, OpName::Send, d)
            }
            Ok(op) => SendOp::posted(op, OpName::Send),
            Err((e, buf)) => SendOp::failed(e, buf),
        }
    }

    /// Receives the next untagged message from any source into `buf`
    /// (`fi_recv`). Needs `FI_MSG` and `FI_RECV` (or no direction bits).
    ///
    /// # Cancel safety
    /// Dropping the future before a message matched withdraws the receive
    /// (no message is consumed, the buffer is freed). Once matched, the
    /// message is consumed and the buffer stays inside the reactor until
    /// the engine is done writing it, then it is freed. `mem::forget` is
    /// safe too.
    pub fn recv(&self, buf: impl Into<OpBuffer>) -> RecvOp<'_> {
        self.recv_inner(buf.into(), None)
    }

    /// Receives the next untagged message sent by `src` (`fi_recv` with a
    /// source address: `FI_DIRECTED_RECV`, which the endpoint's caps must
    /// include).
    ///
    /// # Cancel safety
    /// Dropping the future before a message matched withdraws the receive
    /// (no message is consumed, the buffer is freed). Once matched, the
    /// message is consumed and the buffer stays inside the reactor until
    /// the engine is done writing it, then it is freed. `mem::forget` is
    /// safe too.
    pub fn recv_from(&self, src: FiAddr, buf: impl Into<OpBuffer>) -> RecvOp<'_> {
        let buf = buf.into();
        if !self.core.caps().contains(Caps::DIRECTED_RECV) {
            let e = Error::new(
                ErrorKind::OpNotSupp,
                "recv_from: the endpoint was opened without FI_DIRECTED_RECV",
            );
            return RecvOp::failed(e, buf);
        }
        self.recv_inner(buf, Some(src))
    }

    fn recv_inner(&self, buf: OpBuffer, src: Option<FiAddr>) -> RecvOp<'_> {
        let ep = &self.core;
        let checked = check_caps(ep, Caps::MSG, Dir::Recv, OpName::Recv)
            .and_then(|()| check_writable(&buf, OpName::Recv))
            .and_then(|()| src.map(|a| ep.resolve(a)).transpose());
        let from = match checked {
            Ok(from) => from,
            Err(e) => return RecvOp::failed(e, buf),
        };
        let domain = ep.domain();
        let traced = op_span::wanted();
        let len = if traced { buf.len() } else { 0 };
        let (posted, kind) = if domain.config().am_msg() {
            (am_recv(ep, from, buf), RecvKind::MsgAm)
        } else {
            let tags = match from {
                None => TagMatch::new(MSG_BIT, MSG_BIT),
                Some(p) => match domain.engine().peer_epid(p) {
                    Some(epid) => TagMatch::exact(MSG_BIT | (epid.0 & !MSG_BIT)),
                    None => {
                        let e = Error::new(
                            ErrorKind::Inval,
                            "recv_from: the source is not connected to this domain",
                        );
                        return RecvOp::failed(e, buf);
                    }
                },
            };
            (mq_recv(ep, tags, directed(&tags), buf), RecvKind::MsgMq)
        };
        match posted {
            Ok(op) if traced => {
                let d = OpDesc {
                    kind: "recv",
                    peer: src,
                    tag: None,
                    len,
                };
                RecvOp::traced(op, OpName::Recv, kind, d)
            }
            Ok(op) => RecvOp::posted(op, OpName::Recv, kind),
            Err((e, buf)) => RecvOp::failed(e, buf),
        }
    }

    /// Sends a small untagged message and returns once `data` may be reused
    /// (`fi_inject`): at most the endpoint's inject size (64 B by default),
    /// no completion is reported, the send counter counts it at once.
    ///
    /// # Cancel safety
    /// Not a future: the data is copied before this returns, and the
    /// message leaves whatever the caller does next.
    pub fn inject(&self, dest: FiAddr, data: &[u8]) -> Result<()> {
        let ep = &self.core;
        check_caps(ep, Caps::MSG, Dir::Send, OpName::Send)?;
        super::inject::check_inject_len(ep, data.len())?;
        let peer = ep.resolve(dest)?;
        let am = ep.domain().config().am_msg();
        let inject = || match am {
            true => super::inject::inject_am(ep, peer, data),
            false => super::inject::inject_mq(ep, peer, msg_tag(ep), data),
        };
        if op_span::wanted() {
            let d = OpDesc {
                kind: "inject",
                peer: Some(dest),
                tag: None,
                len: data.len(),
            };
            return super::inject::traced(d, inject);
        }
        inject()
    }
}
