//! Peeking on an [`MrailEndpoint`] the libfabric way (`fi_trecvmsg` with
//! `FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`, fi_tagged(3)), reported to the
//! receive CQ, with the psm endpoint's names and outputs
//! (`ops/claim.rs`).
//!
//! * `FI_PEEK`: an entry (`FI_RECV | FI_TAGGED`, the message's length, tag
//!   and source, no buffer) when a queued message matches, an `FI_ENOMSG`
//!   error entry when none does; the message stays queued.
//! * `FI_PEEK | FI_CLAIM`: the same, and the message is taken off the
//!   unexpected queue and held in an [`MrailClaimed`] for a later receive
//!   ([`MrailEndpoint::post_trecv_claimed`]) or a discard
//!   ([`MrailEndpoint::discard_claimed`]).
//! * `FI_PEEK | FI_DISCARD`: the same, and the message is dropped.
//!
//! mrail matches above its rails, so unlike psm's probe-only MQ a claim
//! costs nothing: an eager message's payload is already in the queue, and a
//! large one stays at its sender until the claimed receive pulls it over
//! the rails, striped, straight into the application's buffer (as a receive
//! posted before it arrived would). A discarded large message is still
//! pulled (into memory of its own, then freed), so that its sender
//! completes.
//!
//! Peeks look at messages already in order: one still on its way, or held
//! behind an earlier one that is, is not seen yet (`FI_ENOMSG`; peek
//! again).

use super::core::matcher::{ArrivalSpec, RecvSpec};
use super::driver::ClaimedArrival;
use super::endpoint::MrailEndpoint;
use crate::engine::{OpBuffer, PostError};
use crate::fabric::{Caps, FiAddr};
use crate::ops::claim::{check_peek_flags, report_discard, report_peek};
use crate::ops::{PeekFlags, Peeked};
use crate::Result;

/// A tagged message claimed by a peek (`FI_PEEK | FI_CLAIM`): off the
/// endpoint's unexpected queue, held for one later receive or discard.
#[derive(Debug)]
pub struct MrailClaimed {
    peeked: Peeked,
    arrival: ClaimedArrival,
}

impl MrailClaimed {
    /// What the peek found (length, tag, source).
    pub fn peeked(&self) -> Peeked {
        self.peeked
    }
}

/// What a peek reports of a queued message of `len` bytes.
fn peeked(spec: ArrivalSpec, len: u64) -> Peeked {
    Peeked {
        len,
        tag: spec.tag,
        source: FiAddr(u64::from(spec.source)),
    }
}

impl MrailEndpoint {
    /// The spec of a tagged peek from `src` (any source for `None`).
    fn peek_spec(&self, src: Option<FiAddr>, tag: u64, ignore: u64) -> Result<RecvSpec> {
        super::ops::check_recv(self, Caps::TAGGED, "peek")?;
        let source = match src {
            Some(a) if a != FiAddr::UNSPEC => Some(self.core.av.core.peer(a)?.0),
            _ => None,
        };
        Ok(RecvSpec::tagged(tag, ignore, source))
    }

    /// The first queued tagged message matching `tag`/`ignore` (from `src`
    /// if given), left queued (`FI_PEEK` without a CQ): `Ok(None)` when
    /// none matches.
    ///
    /// # Errors
    /// `FI_EOPNOTSUPP` without `FI_TAGGED` receives; `FI_EINVAL` for a
    /// source not in the AV; a closed endpoint's error.
    ///
    /// # Cancel safety
    /// Not a future.
    pub fn tpeek_from(&self, src: Option<FiAddr>, tag: u64, ignore: u64) -> Result<Option<Peeked>> {
        let spec = self.peek_spec(src, tag, ignore)?;
        Ok(self.core.driver.peek(&spec).map(|(a, len)| peeked(a, len)))
    }

    /// Claims the first queued tagged message matching `tag`/`ignore`
    /// (from `src` if given; `FI_PEEK | FI_CLAIM` without a CQ):
    /// `Ok(None)` when none matches.
    ///
    /// # Errors
    /// Those of [`tpeek_from`](Self::tpeek_from).
    ///
    /// # Cancel safety
    /// Not a future.
    pub fn tclaim_from(
        &self,
        src: Option<FiAddr>,
        tag: u64,
        ignore: u64,
    ) -> Result<Option<MrailClaimed>> {
        let spec = self.peek_spec(src, tag, ignore)?;
        Ok(self.core.driver.claim(&spec).map(|arrival| MrailClaimed {
            peeked: peeked(arrival.spec(), arrival.len()),
            arrival,
        }))
    }

    /// A peek posted with `context` (`fi_trecvmsg` with `FI_PEEK`, and
    /// `FI_CLAIM` or `FI_DISCARD` in `flags`), from `src` if given: its
    /// answer goes to the receive CQ (see the module docs); a claimed
    /// message comes back for [`post_trecv_claimed`](Self::post_trecv_claimed)
    /// or [`discard_claimed`](Self::discard_claimed).
    ///
    /// ```
    /// # use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
    /// # use psmrail::fabric::*;
    /// # use psmrail::mrail::MrailFabric;
    /// # use psmrail::ops::PeekFlags;
    /// # use psmrail::ErrorKind;
    /// # let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let rails = MrailConfig::builder()
    /// #     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap()).build();
    /// # let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
    /// #     .config(psm).mrail_config(rails);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = MrailFabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let cq = domain.cq(CqAttr::new())?;
    /// let ep = domain.endpoint(&info).bind_av(&av)
    ///     .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).enable()?;
    /// let me = av.insert(&[ep.getname()]).remove(0)?;
    /// // Nothing queued: an FI_ENOMSG error entry.
    /// assert!(ep.post_tpeek(None, 9, 0, PeekFlags::empty(), 1)?.is_none());
    /// assert_eq!(cq.readerr().unwrap().error.kind(), ErrorKind::NoMsg);
    /// ep.tinject(me, 9, b"held").unwrap();
    /// let claimed = loop {
    ///     if let Some(c) = ep.post_tpeek(None, 9, 0, PeekFlags::CLAIM, 2)? {
    ///         break c;
    ///     }
    ///     let _ = cq.readerr(); // not there yet: FI_ENOMSG
    ///     cq.progress();
    /// };
    /// // The inject's own completion, then the peek's.
    /// let e = loop {
    ///     match cq.read()? {
    ///         Some(e) if e.context == 2 => break e,
    ///         _ => {}
    ///     }
    /// };
    /// assert_eq!((e.len, e.tag), (4, 9));
    /// ep.post_trecv_claimed(claimed, vec![0u8; 8], 3).map_err(|e| e.error)?;
    /// let e = loop {
    ///     match cq.read()? {
    ///         Some(e) if e.context == 3 => break e,
    ///         _ => {}
    ///     }
    /// };
    /// assert_eq!((e.context, e.len), (3, 4));
    /// assert_eq!(&e.buffer.unwrap().as_slice()[..4], b"held");
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Errors
    /// Those of [`tpeek_from`](Self::tpeek_from) (nothing is reported
    /// then); `FI_EINVAL` for both flags.
    ///
    /// # Cancel safety
    /// Not a future.
    pub fn post_tpeek(
        &self,
        src: Option<FiAddr>,
        tag: u64,
        ignore: u64,
        flags: PeekFlags,
        context: u64,
    ) -> Result<Option<MrailClaimed>> {
        check_peek_flags(flags)?;
        let found = if flags.is_empty() {
            self.tpeek_from(src, tag, ignore)?.map(|p| (p, None))
        } else {
            self.tclaim_from(src, tag, ignore)?
                .map(|c| (c.peeked, Some(c)))
        };
        report_peek(
            self.core.driver.rx_cq(),
            context,
            tag,
            found.as_ref().map(|(p, _)| *p),
        );
        match found.and_then(|(_, c)| c) {
            Some(c) if flags.contains(PeekFlags::DISCARD) => {
                self.drop_claimed(c.arrival);
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// Receives a claimed message into `buf` (`fi_trecvmsg` with
    /// `FI_CLAIM`): its entry goes to the receive CQ with `context` (an
    /// `FI_ETRUNC` error entry when `buf` is shorter), and the receive
    /// counter counts it. An eager message is copied before this returns;
    /// a large one comes over the rails as a posted receive's would.
    ///
    /// # Errors
    /// `FI_EINVAL` for a buffer that cannot be written, a closed
    /// endpoint's error; the buffer comes back in the error (the claimed
    /// message is then dropped).
    ///
    /// # Cancel safety
    /// Not a future: the receive is posted before this returns.
    pub fn post_trecv_claimed(
        &self,
        claimed: MrailClaimed,
        buf: impl Into<OpBuffer>,
        context: u64,
    ) -> std::result::Result<(), PostError> {
        let buffer = buf.into();
        if let Err(error) = super::ops::check_recv(self, Caps::TAGGED, "trecv (claimed)")
            .and_then(|()| super::ops::check_writable(&buffer, "trecv (claimed)"))
        {
            self.drop_claimed(claimed.arrival);
            return Err(PostError { error, buffer });
        }
        let driver = &self.core.driver;
        let sink = driver.cq_sink(context);
        driver
            .recv_claimed(claimed.arrival, buffer, sink)
            .map_err(|(error, buffer)| PostError { error, buffer })
    }

    /// Drops a claimed message (`fi_trecvmsg` with `FI_CLAIM | FI_DISCARD`):
    /// an entry without data goes to the receive CQ with `context`.
    ///
    /// # Cancel safety
    /// Not a future.
    pub fn discard_claimed(&self, claimed: MrailClaimed, context: u64) {
        report_discard(self.core.driver.rx_cq(), context, claimed.peeked);
        self.drop_claimed(claimed.arrival);
    }

    /// Lets go of a claimed message: a large one is still pulled (its
    /// sender waits for that), into scratch memory whose completion
    /// nobody reads.
    fn drop_claimed(&self, arrival: ClaimedArrival) {
        if !arrival.is_remote() {
            return;
        }
        let driver = &self.core.driver;
        let len = usize::try_from(arrival.len()).unwrap_or(0);
        let sink = driver.future_sink();
        let key = sink.key();
        let _ = driver.recv_claimed(arrival, OpBuffer::from(vec![0u8; len]), sink);
        if let Some(key) = key {
            driver.forget(key);
        }
    }
}
