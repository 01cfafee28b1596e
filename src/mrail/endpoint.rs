//! [`MrailEndpoint`] and its builder: the multi-rail endpoint (`fi_endpoint`
//! of `ofi_mrail`), one psm endpoint per rail underneath, and the
//! [`Driver`] that runs the mrail protocol over them.
//!
//! Enabling the endpoint opens a tagged psm endpoint on every rail (bound
//! to that rail's address vector), posts the rails' control receives and
//! adds the driver to the domain's reactor after the rails, so every
//! progress round runs the rails first and then the mrail protocol.
//! Closing (or dropping the last handle) fails what is still pending with
//! `FI_ECANCELED`, takes the driver out of the reactor and closes the rail
//! endpoints; the rails' domains stay open until the domain closes.
//!
//! As in C, one mrail endpoint per domain (its rails' tagged receive slots
//! are taken), counters bind at the mrail level only, and a CQ or counter
//! must come from the same domain.

use super::addr::MrailAddr;
use super::av::MrailAv;
use super::core::rail_choice::RailChooser;
use super::core::rail_health::RailState;
use super::core::rail_rates::RailRates;
use super::domain::MrailDomainCore;
use super::driver::{Bindings, Driver, DriverStats, Failover};
use super::fabric::rail_info;
use crate::fabric::{
    mrail_unsupported, Caps, CompletionQueue, Counter, CounterBind, CqBind, Endpoint,
    EndpointStats, Info, MRAIL_CAPS, MRAIL_RMA_CAPS,
};
use crate::reactor::{ProgressSource, SourceId};
use crate::{Error, ErrorKind, Result};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The shared state of an [`MrailEndpoint`].
pub(crate) struct MrailEndpointCore {
    pub(crate) domain: Arc<MrailDomainCore>,
    pub(crate) info: Info,
    pub(crate) caps: Caps,
    pub(crate) av: MrailAv,
    pub(crate) rails: Vec<Endpoint>,
    pub(crate) driver: Arc<Driver>,
    pub(crate) name: MrailAddr,
    pub(crate) inject_size: usize,
    source: Mutex<Option<SourceId>>,
    closed: AtomicBool,
}

impl MrailEndpointCore {
    /// `OpBadState` once closed.
    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::OpBadState,
                format!("mrail endpoint {}: already closed", self.name),
            ));
        }
        Ok(())
    }

    /// The endpoint's figures in the psm endpoint's terms.
    pub(crate) fn endpoint_stats(&self) -> EndpointStats {
        let s = self.driver.stats();
        let (msgs, bytes) = self.driver.unexpected();
        let mut out = EndpointStats {
            unexpected_msgs: Some(msgs),
            unexpected_bytes: Some(bytes),
            dead_peers: s.dead_peers.load(Ordering::Relaxed),
            ..EndpointStats::default()
        };
        s.ops.add_to(&mut out);
        out
    }

    fn release(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::info!(name = %self.name, "mrail endpoint closed");
        self.driver.close();
        let id = self
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(id) = id {
            self.domain.reactor.remove_source(id);
        }
        for rail in &self.rails {
            if let Err(e) = rail.clone().close() {
                tracing::warn!("mrail endpoint: closing a rail endpoint: {e}");
            }
        }
    }
}

impl Drop for MrailEndpointCore {
    fn drop(&mut self) {
        self.release();
        let s = self.driver.stats();
        self.domain
            .retire_stats(&s.ops, s.dead_peers.load(Ordering::Relaxed));
    }
}

impl fmt::Debug for MrailEndpointCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrailEndpoint")
            .field("name", &self.name.to_string())
            .field("caps", &self.caps)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// A multi-rail endpoint: a cheap `Clone` handle. Its operations
/// ([`tsend`](Self::tsend), [`trecv`](Self::trecv), ...) read like the psm
/// endpoint's and both implement
/// [`MessageEndpoint`](crate::ops::MessageEndpoint).
#[derive(Clone, Debug)]
pub struct MrailEndpoint {
    pub(crate) core: Arc<MrailEndpointCore>,
}

/// Counters of what an mrail endpoint did and refused, and of each rail's
/// traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MrailStats {
    /// The endpoint's figures in the psm endpoint's terms (messages and
    /// bytes of its operations, errors, refused posts, its matcher's
    /// unexpected queue, peers lost on every rail): the same numbers
    /// [`Endpoint::stats`](crate::fabric::Endpoint::stats) gives for a psm
    /// endpoint, and [`MessageEndpoint::stats`](crate::ops::MessageEndpoint::stats)
    /// for either.
    pub endpoint: EndpointStats,
    /// Frames from peers that are not in the address vector (dropped).
    pub unknown_peer: u64,
    /// Frames that did not decode or did not fit the protocol (dropped).
    pub malformed: u64,
    /// Frames whose sequence number was already delivered (dropped).
    pub duplicates: u64,
    /// Frames beyond a peer's reorder window or byte bound (dropped).
    pub beyond_window: u64,
    /// Answers for transfers that no longer exist (ignored).
    pub stale: u64,
    /// Per rail, in rail order.
    pub rails: Vec<RailTraffic>,
    /// Peers this endpoint keeps protocol state for (sent to or heard
    /// from).
    pub peers: usize,
    /// Bytes of that state, all peers together: per peer a table slot of
    /// sequence and reorder state, the frames it has not acknowledged yet
    /// (kept for failover), and any frames held out of order. The rails'
    /// own per-peer state (connections, address vector entries) is not
    /// included.
    pub peer_state_bytes: u64,
}

/// One rail's traffic and state as the mrail endpoint counted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailTraffic {
    /// Eager messages and control frames sent.
    pub msgs_sent: u64,
    /// Payload bytes sent (eager payloads, striped parts, RMA writes).
    pub bytes_sent: u64,
    /// Control frames received (eager messages among them), from known
    /// peers or not.
    pub msgs_received: u64,
    /// Payload bytes that arrived: eager payloads, the parts of striped
    /// messages that landed on this rail (counted when their message
    /// completes), and bytes RMA reads fetched.
    pub bytes_received: u64,
    /// Parts of striped messages sent or received, and rail operations
    /// of RMA operations.
    pub stripes: u64,
    /// The rail's rate in Mbit/s as weighted striping uses it (configured,
    /// or learned from the parts this endpoint sent); `None` until known.
    pub rate_mbit: Option<u64>,
    /// Whether the rail is in service ([`MrailEndpoint::rail_states`]).
    pub state: RailState,
    /// Times the rail was lost: its link went down, the application
    /// disabled it, or a peer was lost on it.
    pub errors: u64,
    /// Frames sent again and striped parts asked for again on this rail
    /// because another rail was lost (failover).
    pub retransmits: u64,
}

impl MrailEndpoint {
    /// The endpoint's address (`fi_getname`): its rails' ids in rail
    /// order. Peers insert it in their mrail address vectors.
    pub fn getname(&self) -> MrailAddr {
        self.core.name.clone()
    }

    /// The info it was opened with.
    pub fn info(&self) -> &Info {
        &self.core.info
    }

    /// Its capabilities.
    pub fn caps(&self) -> Caps {
        self.core.caps
    }

    /// Its address vector.
    pub fn av(&self) -> &MrailAv {
        &self.core.av
    }

    /// How many rails.
    pub fn rails(&self) -> usize {
        self.core.rails.len()
    }

    /// Rail `i`'s psm endpoint (for inspection).
    pub fn rail(&self, i: usize) -> Option<&Endpoint> {
        self.core.rails.get(i)
    }

    /// The rail the fixed policy uses for this process.
    pub fn fixed_rail(&self) -> usize {
        self.core.domain.attr().fixed_rail
    }

    /// The largest inject: the rails' less the mrail header.
    pub fn inject_size(&self) -> usize {
        self.core.inject_size
    }

    /// What the endpoint did and refused, and each rail's traffic.
    /// [`MrailStats::endpoint`] holds the figures a psm endpoint reports
    /// ([`EndpointStats`]).
    ///
    /// ```
    /// # use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
    /// # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Hints, Provider};
    /// # use psmrail::mrail::MrailFabric;
    /// # let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let rails = MrailConfig::builder()
    /// #     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap()).build();
    /// # let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
    /// #     .config(psm).mrail_config(rails);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = MrailFabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let recv = ep.trecv(vec![0u8; 64], 9, 0);
    /// let (sent, _) = domain.reactor().block_on(ep.tsend(me, 9, vec![7u8; 40]));
    /// sent?;
    /// let (got, _) = domain.reactor().block_on(recv);
    /// assert_eq!(got?.len, 40);
    /// let s = ep.stats();
    /// assert_eq!((s.endpoint.msgs_sent, s.endpoint.bytes_sent), (1, 40));
    /// assert_eq!((s.endpoint.msgs_received, s.endpoint.bytes_received), (1, 40));
    /// assert_eq!(s.rails.len(), 2);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn stats(&self) -> MrailStats {
        let s: &DriverStats = self.core.driver.stats();
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let rates = self.core.driver.rates();
        let states = self.core.driver.rail_states();
        let (peers, peer_state_bytes) = self.core.driver.peer_state();
        MrailStats {
            endpoint: self.core.endpoint_stats(),
            peers,
            peer_state_bytes,
            unknown_peer: get(&s.unknown_peer),
            malformed: get(&s.malformed),
            duplicates: get(&s.duplicates),
            beyond_window: get(&s.beyond_window),
            stale: get(&s.stale),
            rails: s
                .rails
                .iter()
                .zip(rates)
                .zip(states)
                .map(|((r, rate), state)| RailTraffic {
                    msgs_sent: get(&r.msgs_sent),
                    bytes_sent: get(&r.bytes_sent),
                    msgs_received: get(&r.msgs_received),
                    bytes_received: get(&r.bytes_received),
                    stripes: get(&r.stripes),
                    rate_mbit: rate.map(|b| (b * 8.0 / 1e6).round() as u64),
                    state,
                    errors: get(&r.errors),
                    retransmits: get(&r.retransmits),
                })
                .collect(),
        }
    }

    /// Each rail's state, in rail order: [`RailState::Up`] in service;
    /// [`RailState::Down`] out of service (its link is down, or it was
    /// disabled), new traffic avoiding it and what was in flight on it
    /// sent again on the others; [`RailState::Rejoining`] its link is back
    /// and it rejoins after a back-off. The domain's
    /// [`rail_events`](super::MrailDomain::rail_events) report each change.
    pub fn rail_states(&self) -> Vec<RailState> {
        self.core.driver.rail_states()
    }

    /// Takes rail `rail` out of service, as if its link went down: new
    /// traffic avoids it and what is in flight on it goes again on the
    /// other rails (and peers are told, so their traffic to this endpoint
    /// avoids it too). For maintenance, or to test an application's
    /// failover. With no rail left, transfers fail with `FI_EIO`.
    ///
    /// # Errors
    /// `Inval` for a rail the endpoint does not have.
    pub fn disable_rail(&self, rail: usize) -> Result<()> {
        self.core.driver.set_rail_disabled(rail, true)
    }

    /// Puts rail `rail` back in service (at once if its link is up, else
    /// when it comes back).
    ///
    /// # Errors
    /// `Inval` for a rail the endpoint does not have.
    pub fn enable_rail(&self, rail: usize) -> Result<()> {
        self.core.driver.set_rail_disabled(rail, false)
    }

    /// Whether the endpoint was closed.
    pub fn is_closed(&self) -> bool {
        self.core.ensure_open().is_err()
    }

    /// Whether `other` is a handle of the same endpoint.
    pub fn same(&self, other: &MrailEndpoint) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// Closes the endpoint (`fi_close`) for every handle: pending
    /// operations complete with `FI_ECANCELED`, the rail endpoints close.
    /// A second close is `Ok`.
    ///
    /// # Errors
    /// None today; the `Result` mirrors the psm endpoint's.
    pub fn close(self) -> Result<()> {
        self.core.release();
        Ok(())
    }
}

/// Builds an [`MrailEndpoint`]: `domain.endpoint(&info)`, then bindings,
/// then [`enable`](Self::enable).
#[derive(Debug)]
pub struct MrailEndpointBuilder {
    domain: Arc<MrailDomainCore>,
    info: Info,
    caps: Caps,
    av: Option<MrailAv>,
    bindings: BindingsBuilder,
    error: Option<Error>,
}

#[derive(Debug, Default)]
struct BindingsBuilder {
    tx_cq: Option<CompletionQueue>,
    rx_cq: Option<CompletionQueue>,
    send: Option<Counter>,
    recv: Option<Counter>,
    write: Option<Counter>,
    read: Option<Counter>,
}

impl MrailEndpointBuilder {
    pub(crate) fn new(domain: Arc<MrailDomainCore>, info: &Info) -> Self {
        MrailEndpointBuilder {
            domain,
            caps: info.caps,
            info: info.clone(),
            av: None,
            bindings: BindingsBuilder::default(),
            error: None,
        }
    }

    fn fail(mut self, e: Error) -> Self {
        self.error.get_or_insert(e);
        self
    }

    /// The endpoint's capabilities (default: the info's).
    pub fn caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// Binds a completion queue for `FI_TRANSMIT` and/or `FI_RECV`
    /// completions of operations posted with a context.
    pub fn bind_cq(mut self, cq: &CompletionQueue, flags: CqBind) -> Self {
        if !self.domain.made_cq(cq) {
            return self.fail(Error::new(
                ErrorKind::Inval,
                "bind_cq: the completion queue belongs to another domain",
            ));
        }
        if flags.contains(CqBind::TRANSMIT) {
            self.bindings.tx_cq = Some(cq.clone());
        }
        if flags.contains(CqBind::RECV) {
            self.bindings.rx_cq = Some(cq.clone());
        }
        self
    }

    /// Binds a counter for `FI_SEND`, `FI_RECV`, `FI_WRITE` and/or
    /// `FI_READ` completions: an RMA operation counts once, when all its
    /// stripes are done. Remote counters (`FI_REMOTE_READ`,
    /// `FI_REMOTE_WRITE`) need `FI_RMA_EVENT`, which ofi_mrail does not
    /// offer: `NoSys`.
    pub fn bind_counter(mut self, counter: &Counter, flags: CounterBind) -> Self {
        if !self.domain.made_counter(counter) {
            return self.fail(Error::new(
                ErrorKind::Inval,
                "bind_counter: the counter belongs to another domain",
            ));
        }
        if flags.intersects(CounterBind::REMOTE_READ | CounterBind::REMOTE_WRITE) {
            return self.fail(mrail_unsupported(
                "remote RMA counters (FI_REMOTE_READ, FI_REMOTE_WRITE need FI_RMA_EVENT)",
            ));
        }
        if flags.contains(CounterBind::WRITE) {
            self.bindings.write = Some(counter.clone());
        }
        if flags.contains(CounterBind::READ) {
            self.bindings.read = Some(counter.clone());
        }
        if flags.contains(CounterBind::SEND) {
            self.bindings.send = Some(counter.clone());
        }
        if flags.contains(CounterBind::RECV) {
            self.bindings.recv = Some(counter.clone());
        }
        self
    }

    /// Binds the address vector (required).
    pub fn bind_av(mut self, av: &MrailAv) -> Self {
        if !Arc::ptr_eq(&av.core.domain, &self.domain) {
            return self.fail(Error::new(
                ErrorKind::Inval,
                "bind_av: the address vector belongs to another domain",
            ));
        }
        self.av = Some(av.clone());
        self
    }

    /// `fi_ep_bind` of an event queue: not supported (as in C).
    pub fn bind_eq(self) -> Self {
        self.fail(mrail_unsupported(
            "event queues on endpoints (fi_ep_bind of an EQ)",
        ))
    }

    /// Opens the rail endpoints and starts the protocol.
    ///
    /// # Errors
    /// The first binding error; `NoSys` for capabilities ofi_mrail does not
    /// offer; `Inval` without an address vector (C's `FI_ENOAV`); `Busy`
    /// when the domain already has an mrail endpoint; a rail's error,
    /// naming the rail.
    pub fn enable(self) -> Result<MrailEndpoint> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let extra = self.caps.difference(MRAIL_CAPS);
        if !extra.is_empty() {
            return Err(mrail_unsupported(&format!("the capabilities {extra}")));
        }
        let Some(av) = self.av else {
            return Err(Error::new(
                ErrorKind::Inval,
                "enable: an mrail endpoint needs an address vector (bind_av; C's FI_ENOAV)",
            ));
        };
        let domain = self.domain;
        let n = domain.rails.len();
        let mut rails = Vec::with_capacity(n);
        for (i, d) in domain.rails.iter().enumerate() {
            let ri = rail_info(&domain.info, i)?;
            let rail_av = av.rail(i).expect("one rail AV per rail");
            let ep = d
                .endpoint(&ri)
                .caps(Caps::TAGGED | self.caps.intersection(MRAIL_RMA_CAPS))
                .bind_av(rail_av)
                .enable()
                .map_err(|e| {
                    Error::with_source(e.kind(), format!("ofi_mrail: rail {i}: {}", e.message()), e)
                })?;
            rails.push(ep);
        }
        let name = MrailAddr::new(rails.iter().map(Endpoint::getname).collect())?;
        let attr = domain.attr();
        let chooser = RailChooser::new(attr.policy_table().clone(), n, attr.local_rank)
            .map_err(|e| Error::new(ErrorKind::Inval, format!("ofi_mrail: {e}")))?;
        let b = self.bindings;
        let bindings = Bindings {
            tx_cq: b.tx_cq,
            rx_cq: b.rx_cq,
            send_counter: b.send,
            recv_counter: b.recv,
            write_counter: b.write,
            read_counter: b.read,
        };
        let rail_cores = rails.iter().map(|e| e.core.clone()).collect();
        let rates = match attr.config().rail_rates() {
            Some(mbit) => RailRates::configured(mbit),
            None => RailRates::learning(n),
        };
        let driver = Driver::new(
            rail_cores,
            av.core.clone(),
            chooser,
            rates,
            name.token(),
            bindings,
            Failover {
                rail_ips: attr.rails.iter().map(|r| r.ip).collect(),
                events: domain.rail_events.clone(),
            },
        )?;
        let source: Arc<dyn ProgressSource> = driver.clone();
        let id = domain.reactor.add_source(source).map_err(|e| {
            driver.close();
            Error::with_source(
                ErrorKind::Other,
                "ofi_mrail: cannot add the endpoint to the reactor",
                e,
            )
        })?;
        let inject_size = self.info.inject_size;
        let core = Arc::new(MrailEndpointCore {
            domain,
            info: self.info,
            caps: self.caps,
            av,
            rails,
            driver,
            name,
            inject_size,
            source: Mutex::new(Some(id)),
            closed: AtomicBool::new(false),
        });
        core.domain.adopt(&core);
        tracing::info!(name = %core.name, rails = n, "mrail endpoint enabled");
        Ok(MrailEndpoint { core })
    }
}
