//! [`EndpointStats`], what an endpoint has done so far (messages and bytes
//! each way, errors, refused posts) and the state of its engine's
//! unexpected queue.
//!
//! The operation figures come from the endpoint's counters
//! ([`OpCounters`](super::op_counters::OpCounters)), bumped where an
//! operation's completion is observed (its future resolving, its CQ entry
//! being written, an inject being accepted); a snapshot taken while
//! operations run may be a little behind. Both providers report the same
//! figures: [`Endpoint::stats`], [`Domain::stats`] (totals),
//! [`MrailEndpoint::stats`] and [`MrailDomain::stats`].
//!
//! [`Endpoint::stats`]: crate::fabric::Endpoint::stats
//! [`Domain::stats`]: crate::fabric::Domain::stats
//! [`MrailEndpoint::stats`]: crate::mrail::MrailEndpoint::stats
//! [`MrailDomain::stats`]: crate::mrail::MrailDomain::stats

/// An endpoint's figures: what its operations did, and the unexpected
/// queue and dead peers of the engine endpoint beneath it.
///
/// Messages and bytes count operations whose completion was observed: a
/// future that resolved, a completion written to a CQ, an inject the
/// engine took. A send or receive whose future was dropped before it
/// completed is not counted (as with bound counters). RMA and atomic
/// operations count only in [`errors`](Self::errors).
///
/// ```
/// # use psmrail::config::PsmConfig;
/// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
/// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
/// #     .delay(std::time::Duration::ZERO).build().unwrap();
/// # let hints = Hints::new().caps(Caps::TAGGED).engine(EngineChoice::Soft).config(config);
/// # let info = getinfo(Some(&hints)).unwrap().remove(0);
/// # let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
/// # let av = domain.av(AvAttr::new()).unwrap();
/// # let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
/// # let me = av.insert(&[ep.getname()]).remove(0).unwrap();
/// ep.tinject(me, 7, b"early")?; // no receive is posted yet: it waits unexpected
/// domain.reactor().progress();
/// assert_eq!(ep.stats().unexpected_msgs, Some(1));
/// let (got, _) = domain.reactor().block_on(ep.trecv(vec![0u8; 16], 7, 0));
/// assert_eq!(got?.len, 5);
/// let s = ep.stats();
/// assert_eq!((s.msgs_sent, s.bytes_sent), (1, 5));
/// assert_eq!((s.msgs_received, s.bytes_received), (1, 5));
/// assert_eq!((s.unexpected_msgs, s.errors), (Some(0), 0));
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EndpointStats {
    /// Sends (and injects) completed without error.
    pub msgs_sent: u64,
    /// Their bytes.
    pub bytes_sent: u64,
    /// Receives completed without error.
    pub msgs_received: u64,
    /// Their bytes (what was placed in the buffers).
    pub bytes_received: u64,
    /// Operations (messages, RMA, atomics) that completed with an error:
    /// truncation, cancellation, a dead peer, a refusal by the target.
    pub errors: u64,
    /// Posts refused with `FI_EAGAIN`: the engine had no room, and the
    /// caller has to try again after progress.
    pub eagain: u64,
    /// Messages waiting in the unexpected queue now (arrived before a
    /// receive matched them), in the engine endpoint beneath and in the AM
    /// message queue (`FI_PSM_AM_MSG`); for an mrail endpoint, in its own
    /// matcher. `None` where the engine cannot tell: PSM (the native
    /// engine) has no call that reports it.
    pub unexpected_msgs: Option<u64>,
    /// Bytes the engine holds for those messages: their eager payloads
    /// (a large message whose data is still at its sender has none), plus
    /// on the soft engine the fixed bookkeeping it charges each message
    /// (`ENTRY_OVERHEAD`, 64 bytes).
    /// `None` as for [`unexpected_msgs`](Self::unexpected_msgs).
    pub unexpected_bytes: Option<u64>,
    /// Messages that have arrived unexpected since the engine endpoint
    /// opened. `None` where not counted: on the native engine (libpsm2's
    /// `psm_mq_get_stats` leaves its `rx_sys_num` at 0, unexpected
    /// messages counting as received into user buffers once matched) and
    /// on mrail endpoints.
    pub unexpected_total: Option<u64>,
    /// Peers declared dead (psm: by the domain's peer watch; mrail: peers
    /// lost on every rail).
    pub dead_peers: u64,
    /// Links to peers of this host that run over shared memory now: the
    /// soft engine's path for same-host peers (`PSMRAIL_SOFT_SHM`,
    /// `SoftConfig::shared_memory`); links to other hosts, and all links
    /// with the path off, use their sockets. `None` where the engine does
    /// not say (the native engine: PSM picks its devices) and on mrail
    /// endpoints.
    pub shm_links: Option<u64>,
}

impl EndpointStats {
    /// Adds `other`'s operation figures (messages, bytes, errors, refused
    /// posts) to these; the queue and peer figures are left alone.
    ///
    /// ```
    /// use psmrail::fabric::EndpointStats;
    /// let mut a = EndpointStats { msgs_sent: 1, bytes_sent: 8, dead_peers: 2, ..Default::default() };
    /// let b = EndpointStats { msgs_sent: 2, bytes_sent: 16, dead_peers: 2, ..Default::default() };
    /// a.add_ops(&b);
    /// assert_eq!((a.msgs_sent, a.bytes_sent, a.dead_peers), (3, 24, 2));
    /// ```
    pub fn add_ops(&mut self, other: &EndpointStats) {
        self.msgs_sent += other.msgs_sent;
        self.bytes_sent += other.bytes_sent;
        self.msgs_received += other.msgs_received;
        self.bytes_received += other.bytes_received;
        self.errors += other.errors;
        self.eagain += other.eagain;
    }
}
