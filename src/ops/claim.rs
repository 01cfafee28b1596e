//! Peeking posted the libfabric way (`fi_trecvmsg` with `FI_PEEK`,
//! `FI_CLAIM`, `FI_DISCARD`, fi_tagged(3)), reported to the receive CQ.
//!
//! * `FI_PEEK`: an entry (`FI_RECV | FI_TAGGED`, the message's length, tag
//!   and source, no buffer) when a queued message matches, an `FI_ENOMSG`
//!   error entry when none does; the message stays queued.
//! * `FI_PEEK | FI_CLAIM`: the same, and the message is taken off the
//!   queue and held in a [`Claimed`] for a later receive with `FI_CLAIM`
//!   ([`Endpoint::post_trecv_claimed`]) or a discard
//!   ([`Endpoint::discard_claimed`]).
//! * `FI_PEEK | FI_DISCARD`: the same, and the message is dropped.
//!
//! PSM's MQ (and so the engines) can only probe: a message cannot be
//! matched now and received later (the C provider answers
//! `-FI_EOPNOTSUPP` to claim and discard). Claiming therefore *receives*
//! the message at once, with an exact-tag receive into memory of its own
//! (the first queued message with the peeked tag is the peeked one), and
//! the receive with `FI_CLAIM` copies it into the application's buffer.
//! A message sent by rendezvous is transferred during the claim: the call
//! then waits for the transfer (progressing in manual mode). Claimed
//! messages cost their length in memory until received or discarded.

use super::outcome::OpName;
use super::submit::{check_caps, Dir};
use super::tagged::{PeekFlags, Peeked};
use crate::engine::{OpBuffer, PostError};
use crate::fabric::{
    Caps, CompletionFlags, CompletionQueue, CounterKind, CqEntry, CqErrEntry, Direction, Endpoint,
};
use crate::{Error, ErrorKind, Result};

/// A tagged message claimed by a peek (`FI_PEEK | FI_CLAIM`): off the
/// engine's queues, held for one later receive or discard.
#[derive(Debug)]
pub struct Claimed {
    peeked: Peeked,
    data: Vec<u8>,
}

impl Claimed {
    /// What the peek found (length, tag, source).
    pub fn peeked(&self) -> Peeked {
        self.peeked
    }
}

const PEEK_FLAGS: CompletionFlags = CompletionFlags::RECV.union(CompletionFlags::TAGGED);

/// Refuses a peek with both `FI_CLAIM` and `FI_DISCARD` (both providers).
pub(crate) fn check_peek_flags(flags: PeekFlags) -> Result<()> {
    if flags.contains(PeekFlags::CLAIM | PeekFlags::DISCARD) {
        return Err(Error::new(
            ErrorKind::Inval,
            "peek: FI_CLAIM and FI_DISCARD together need a claimed message (no FI_PEEK)",
        ));
    }
    Ok(())
}

/// A peek's answer on the receive CQ (both providers): the message's
/// length, tag and source, or an `FI_ENOMSG` error entry for `tag`.
pub(crate) fn report_peek(
    cq: Option<&CompletionQueue>,
    context: u64,
    tag: u64,
    found: Option<Peeked>,
) {
    let Some(cq) = cq else { return };
    match found {
        Some(p) => cq.push(CqEntry {
            len: usize::try_from(p.len).unwrap_or(usize::MAX),
            tag: p.tag,
            source: p.source,
            ..CqEntry::new(context, PEEK_FLAGS)
        }),
        None => cq.push_err(CqErrEntry {
            tag,
            ..CqErrEntry::new(
                context,
                PEEK_FLAGS,
                Error::new(ErrorKind::NoMsg, "peek: no queued message matches"),
            )
        }),
    }
}

/// A discarded claim's entry on the receive CQ (both providers): no data.
pub(crate) fn report_discard(cq: Option<&CompletionQueue>, context: u64, peeked: Peeked) {
    if let Some(cq) = cq {
        cq.push(CqEntry {
            tag: peeked.tag,
            source: peeked.source,
            ..CqEntry::new(context, PEEK_FLAGS)
        });
    }
}

impl Endpoint {
    /// Claims the first queued tagged message matching `tag`/`ignore`
    /// (`FI_PEEK | FI_CLAIM` without a CQ): `Ok(None)` when none matches.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::*;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().caps(Caps::TAGGED).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints)).unwrap().remove(0);
    /// # let fabric = Fabric::open(&info).unwrap();
    /// # let domain = fabric.domain(&info).unwrap();
    /// # let av = domain.av(AvAttr::new()).unwrap();
    /// # let cq = domain.cq(CqAttr::new()).unwrap();
    /// let ep = domain.endpoint(&info).bind_av(&av)
    ///     .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).enable().unwrap();
    /// let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    /// assert!(ep.tclaim(5, 0).unwrap().is_none());
    /// ep.tinject(me, 5, b"held").unwrap();
    /// let claimed = loop {
    ///     if let Some(c) = ep.tclaim(5, 0).unwrap() { break c; }
    /// };
    /// assert_eq!(claimed.peeked().len, 4);
    /// // Off the queue: another peek does not see it.
    /// assert!(ep.tpeek(5, 0).unwrap().is_none());
    /// ep.post_trecv_claimed(claimed, vec![0u8; 8], 3).unwrap();
    /// let e = cq.sread(None).unwrap();
    /// assert_eq!((e.context, e.len, e.tag), (3, 4, 5));
    /// assert_eq!(&e.buffer.unwrap().as_slice()[..4], b"held");
    /// ```
    ///
    /// # Errors
    /// Those of [`tpeek`](Self::tpeek) and of receiving the message
    /// (truncation cannot happen: the memory is the message's length).
    ///
    /// # Cancel safety
    /// Not a future; it returns once the message is in its own memory.
    pub fn tclaim(&self, tag: u64, ignore: u64) -> Result<Option<Claimed>> {
        let Some(peeked) = self.tpeek(tag, ignore)? else {
            return Ok(None);
        };
        let len = usize::try_from(peeked.len)
            .map_err(|_| Error::new(ErrorKind::MsgSize, "claim: the message is too long"))?;
        // Exact tag: the first queued message with it is the peeked one.
        let op = self.trecv(vec![0u8; len], peeked.tag, 0);
        let (got, buf) = self.core.domain().reactor().block_on(op);
        let got = got?;
        let mut data = buf.into_vec().unwrap_or_default();
        data.truncate(got.len);
        Ok(Some(Claimed { peeked, data }))
    }

    /// A peek posted with `context` (`fi_trecvmsg` with `FI_PEEK`, and
    /// `FI_CLAIM` or `FI_DISCARD` in `flags`): reports to the receive CQ as
    /// the module docs of `claim.rs` say; with [`PeekFlags::CLAIM`] the
    /// claimed message comes back for the receive with `FI_CLAIM`.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::*;
    /// # use psmrail::ops::PeekFlags;
    /// # use psmrail::ErrorKind;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().caps(Caps::TAGGED).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints)).unwrap().remove(0);
    /// # let fabric = Fabric::open(&info).unwrap();
    /// # let domain = fabric.domain(&info).unwrap();
    /// # let av = domain.av(AvAttr::new()).unwrap();
    /// # let cq = domain.cq(CqAttr::new()).unwrap();
    /// let ep = domain.endpoint(&info).bind_av(&av)
    ///     .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).enable().unwrap();
    /// let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    /// // Nothing queued: an FI_ENOMSG error entry.
    /// assert!(ep.post_tpeek(9, 0, PeekFlags::empty(), 1).unwrap().is_none());
    /// assert!(cq.read().is_err());
    /// assert_eq!(cq.readerr().unwrap().error.kind(), ErrorKind::NoMsg);
    /// ep.tinject(me, 9, b"gone").unwrap();
    /// let entry = loop {
    ///     ep.post_tpeek(9, 0, PeekFlags::DISCARD, 2).unwrap();
    ///     match cq.read() {
    ///         Ok(Some(e)) => break e,
    ///         _ => { cq.readerr(); }
    ///     }
    /// };
    /// assert_eq!((entry.context, entry.len, entry.tag), (2, 4, 9));
    /// assert!(ep.tpeek(9, 0).unwrap().is_none(), "discarded");
    /// ```
    ///
    /// # Errors
    /// Those of [`tpeek`](Self::tpeek) (nothing is reported then);
    /// `FI_EINVAL` for both flags.
    ///
    /// # Cancel safety
    /// Not a future, as [`tclaim`](Self::tclaim).
    pub fn post_tpeek(
        &self,
        tag: u64,
        ignore: u64,
        flags: PeekFlags,
        context: u64,
    ) -> Result<Option<Claimed>> {
        check_peek_flags(flags)?;
        let found = if flags.is_empty() {
            self.tpeek(tag, ignore)?.map(|p| (p, None))
        } else {
            self.tclaim(tag, ignore)?.map(|c| (c.peeked, Some(c)))
        };
        let cq = self.core.cq(Direction::Recv);
        report_peek(cq, context, tag, found.as_ref().map(|(p, _)| *p));
        // FI_DISCARD: the claimed message is dropped here.
        Ok(found
            .and_then(|(_, c)| c)
            .filter(|_| flags.contains(PeekFlags::CLAIM)))
    }

    /// Receives a claimed message into `buf` (`fi_trecvmsg` with
    /// `FI_CLAIM`): its entry goes to the receive CQ with `context` at once
    /// (an `FI_ETRUNC` error entry when `buf` is shorter), and the receive
    /// counter counts it.
    ///
    /// # Errors
    /// `FI_EINVAL` for a buffer that cannot be written; the buffer comes
    /// back in the error (the claimed message is then dropped).
    ///
    /// # Cancel safety
    /// Not a future: the copy is made before this returns.
    pub fn post_trecv_claimed(
        &self,
        claimed: Claimed,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<(), PostError> {
        let mut buf = buf.into();
        let checked = check_caps(&self.core, Caps::TAGGED, Dir::Recv, OpName::TRecv)
            .and_then(|()| super::submit::check_writable(&buf, OpName::TRecv));
        if let Err(error) = checked {
            return Err(PostError { error, buffer: buf });
        }
        let n = claimed.data.len().min(buf.len());
        if let Some(dst) = buf.as_mut_slice() {
            dst[..n].copy_from_slice(&claimed.data[..n]);
        }
        let peeked = claimed.peeked;
        let truncated = claimed.data.len() > n;
        let counter = self.core.counter(CounterKind::Recv);
        super::outcome::count(counter, !truncated);
        let Some(cq) = self.core.cq(Direction::Recv) else {
            return Ok(());
        };
        if truncated {
            cq.push_err(CqErrEntry {
                context,
                flags: PEEK_FLAGS,
                len: n,
                buffer: Some(buf),
                olen: (claimed.data.len() - n) as u64,
                tag: peeked.tag,
                data: 0,
                error: Error::new(
                    ErrorKind::Trunc,
                    format!(
                        "trecv (claimed): a {}-byte message into a {n}-byte buffer",
                        claimed.data.len()
                    ),
                ),
                prov_errno: CqErrEntry::PROV_INTERNAL,
            });
        } else {
            cq.push(CqEntry {
                len: n,
                buffer: Some(buf),
                tag: peeked.tag,
                source: peeked.source,
                ..CqEntry::new(context, PEEK_FLAGS)
            });
        }
        Ok(())
    }

    /// Drops a claimed message (`fi_trecvmsg` with `FI_CLAIM | FI_DISCARD`):
    /// an entry without data goes to the receive CQ with `context`.
    ///
    /// # Cancel safety
    /// Not a future.
    pub fn discard_claimed(&self, claimed: Claimed, context: u64) {
        report_discard(self.core.cq(Direction::Recv), context, claimed.peeked);
    }
}
