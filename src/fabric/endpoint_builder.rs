//! [`EndpointBuilder`]: `fi_endpoint` + `fi_ep_bind` + `fi_enable` as one
//! builder.
//!
//! Binding errors are kept until [`enable`](EndpointBuilder::enable), which
//! reports the first one, so the calls chain. Enable applies the psm
//! provider's rules (fi_psm(7), fi_endpoint(3); C: `prov/psm/src/psmx_ep.c`,
//! `psmx_domain.c`):
//!
//! * bound queues, counters and the AV must come from this domain
//!   (`FI_EINVAL`); an event queue cannot be bound (`FI_ENOSYS`);
//! * the endpoint type is RDM or DGRAM (DGRAM behaves as RDM, as in C);
//!   `FI_EP_MSG` needs connection management (`FI_ENOSYS`);
//! * the caps must be within the domain's (`FI_EOPNOTSUPP`) and may not
//!   take a receive or target role another endpoint of the domain holds
//!   (`FI_EBUSY`);
//! * the domain's tag layout grows: the MSG bit when untagged messages ride
//!   the MQ (`FI_MSG` without `FI_PSM_AM_MSG`), the RMA bit for tagged RMA
//!   (`FI_RMA` with `FI_PSM_TAGGED_RMA`);
//! * the endpoint registers with the name server under its service: the
//!   one given (or in the info), else `((pid & 0x7fff) << 16) + n` as C
//!   (with a per-process counter `n` where C used the object's address).

use super::av::AddressVector;
use super::domain::{unsupported, DomainCore};
use super::endpoint::{CounterBind, CounterKind, CqBind, Endpoint, EndpointCore, Held};
use super::name_server::Service;
use super::{endpoint_bits, Caps, CompletionQueue, Counter, EpType, Info, OpCounters};
use crate::{Error, ErrorKind, Result};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Builds an [`Endpoint`]; made by [`Domain::endpoint`](super::Domain::endpoint).
///
/// ```
/// use psmrail::fabric::{getinfo, Caps, CounterAttr, CounterBind, CqAttr, CqBind, Fabric, Hints};
/// # use psmrail::config::PsmConfig;
/// # use psmrail::fabric::EngineChoice;
/// // The soft engine; no name server, no close delay (FI_PSM_DELAY=0).
/// let config = PsmConfig::builder_from_env().unwrap()
///     .name_server(false)
///     .delay(std::time::Duration::ZERO)
///     .build()
///     .unwrap();
/// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let domain = Fabric::open(&info)?.domain(&info)?;
/// let cq = domain.cq(CqAttr::new())?;
/// let sent = domain.counter(CounterAttr::new())?;
/// let av = domain.av(Default::default())?;
/// let ep = domain
///     .endpoint(&info)
///     .caps(Caps::TAGGED | Caps::SEND | Caps::RECV)
///     .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV | CqBind::SELECTIVE_COMPLETION)
///     .bind_counter(&sent, CounterBind::SEND)
///     .bind_av(&av)
///     .enable()?;
/// assert_eq!(ep.caps(), Caps::TAGGED | Caps::SEND | Caps::RECV);
/// # Ok::<(), psmrail::Error>(())
/// ```
#[must_use = "an endpoint exists only once `enable` is called"]
pub struct EndpointBuilder {
    domain: Arc<DomainCore>,
    info: Info,
    caps: Caps,
    ep_type: EpType,
    service: Option<u32>,
    av: Option<AddressVector>,
    tx_cq: Option<(CompletionQueue, bool)>,
    rx_cq: Option<(CompletionQueue, bool)>,
    counters: [Option<Counter>; 6],
    error: Option<Error>,
}

impl fmt::Debug for EndpointBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointBuilder")
            .field("caps", &self.caps)
            .field("ep_type", &self.ep_type)
            .field("error", &self.error)
            .finish()
    }
}

/// Per-process part of generated services (C used the endpoint's address).
static NEXT_SERVICE: AtomicU32 = AtomicU32::new(1);

/// `((pid & 0x7fff) << 16) + n`, never 0 (the query wildcard).
fn generated_service() -> u32 {
    let pid = std::process::id() & 0x7fff;
    loop {
        let n = NEXT_SERVICE.fetch_add(1, Ordering::Relaxed) & 0xffff;
        let service = (pid << 16) + n;
        if service != 0 {
            return service;
        }
    }
}

impl EndpointBuilder {
    pub(crate) fn new(domain: Arc<DomainCore>, info: &Info) -> Self {
        EndpointBuilder {
            domain,
            caps: info.caps,
            ep_type: info.ep_type,
            info: info.clone(),
            service: None,
            av: None,
            tx_cq: None,
            rx_cq: None,
            counters: Default::default(),
            error: None,
        }
    }

    fn fail(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// The endpoint's capabilities (default: the info's).
    pub fn caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// The endpoint type (default: the info's; `Unspec` is RDM).
    pub fn ep_type(mut self, ep_type: EpType) -> Self {
        self.ep_type = ep_type;
        self
    }

    /// The name-server service to register under ([`Service::ANY`]:
    /// generate one as C).
    pub fn service(mut self, service: impl Into<Service>) -> Self {
        self.service = Some(service.into().get());
        self
    }

    /// Binds `cq` for the directions in `flags` (`FI_TRANSMIT`, `FI_RECV`,
    /// optionally `FI_SELECTIVE_COMPLETION`).
    ///
    /// Errors at enable: `Inval` for no direction, a direction bound twice,
    /// or a queue of another domain.
    pub fn bind_cq(mut self, cq: &CompletionQueue, flags: CqBind) -> Self {
        if !flags.intersects(CqBind::TRANSMIT | CqBind::RECV) {
            self.fail(Error::new(
                ErrorKind::Inval,
                format!(
                    "binding a completion queue with {flags:?}: name FI_TRANSMIT and/or FI_RECV"
                ),
            ));
            return self;
        }
        if !self.domain.made_cq(cq) {
            self.fail(Error::new(
                ErrorKind::Inval,
                "binding a completion queue of another domain",
            ));
            return self;
        }
        let selective = flags.contains(CqBind::SELECTIVE_COMPLETION);
        let tx = flags.contains(CqBind::TRANSMIT);
        let rx = flags.contains(CqBind::RECV);
        let taken = match (tx && self.tx_cq.is_some(), rx && self.rx_cq.is_some()) {
            (true, _) => Some("FI_TRANSMIT"),
            (_, true) => Some("FI_RECV"),
            _ => None,
        };
        if let Some(name) = taken {
            self.fail(Error::new(
                ErrorKind::Inval,
                format!("binding a completion queue: {name} already has one"),
            ));
            return self;
        }
        if tx {
            self.tx_cq = Some((cq.clone(), selective));
        }
        if rx {
            self.rx_cq = Some((cq.clone(), selective));
        }
        self
    }

    /// Binds `counter` for the events in `flags`.
    ///
    /// Errors at enable: `Inval` for no event, an event bound twice, or a
    /// counter of another domain.
    pub fn bind_counter(mut self, counter: &Counter, flags: CounterBind) -> Self {
        if flags.is_empty() {
            self.fail(Error::new(
                ErrorKind::Inval,
                "binding a counter without events (FI_SEND, FI_RECV, FI_READ, ...)",
            ));
            return self;
        }
        if !self.domain.made_counter(counter) {
            self.fail(Error::new(
                ErrorKind::Inval,
                "binding a counter of another domain",
            ));
            return self;
        }
        let wanted = || {
            CounterKind::ALL
                .into_iter()
                .filter(|k| flags.contains(k.bind_flag()))
        };
        if let Some(kind) = wanted().find(|&k| self.counters[k as usize].is_some()) {
            self.fail(Error::new(
                ErrorKind::Inval,
                format!("binding a counter: {kind:?} already has one"),
            ));
            return self;
        }
        for kind in wanted() {
            self.counters[kind as usize] = Some(counter.clone());
        }
        self
    }

    /// Binds the address vector destinations are resolved in.
    ///
    /// Errors at enable: `Inval` for a second AV or one of another domain.
    pub fn bind_av(mut self, av: &AddressVector) -> Self {
        if !Arc::ptr_eq(av.core.domain(), &self.domain) {
            self.fail(Error::new(
                ErrorKind::Inval,
                "binding an address vector of another domain",
            ));
        } else if self.av.is_some() {
            self.fail(Error::new(
                ErrorKind::Inval,
                "binding an address vector: one is bound already",
            ));
        } else {
            self.av = Some(av.clone());
        }
        self
    }

    /// Binding an event queue: the psm provider has none for endpoints
    /// (`FI_ENOSYS` at enable).
    pub fn bind_eq(mut self) -> Self {
        self.fail(unsupported(
            "event queues on endpoints (fi_ep_bind of an EQ)",
        ));
        self
    }

    /// Creates and enables the endpoint.
    ///
    /// # Errors
    /// `OpBadState` if the domain was closed; the first binding error;
    /// `NoSys` for `FI_EP_MSG`; `OpNotSupp` for caps outside the domain's;
    /// `Busy` for a receive or target role already taken in the domain.
    pub fn enable(self) -> Result<Endpoint> {
        // A closed domain explains every other failure (its queues no
        // longer count as its own), so it is reported first.
        self.domain.ensure_open()?;
        if let Some(e) = self.error {
            return Err(e);
        }
        let domain = self.domain;
        let ep_type = match self.ep_type {
            EpType::Unspec => EpType::Rdm,
            EpType::Rdm => EpType::Rdm,
            EpType::Dgram => EpType::Dgram,
            EpType::Msg => {
                return Err(unsupported(
                    "connection-oriented endpoints (FI_EP_MSG; use FI_EP_RDM or FI_EP_DGRAM)",
                ))
            }
        };
        let caps = self.caps;
        let claim = domain.slots().claim(caps, domain.info().caps)?;
        // The layout only grows; operations read it at post time.
        let config = domain.config();
        let bits = endpoint_bits(caps, config.am_msg(), config.tagged_rma());
        if bits != 0 {
            domain.tags().reserve(bits);
        }
        let wanted = self
            .service
            .or_else(|| self.info.source.as_ref().map(|s| s.service.get()));
        let (service, registration) = register(&domain, wanted);
        let (tx_cq, tx_selective) = split(self.tx_cq);
        let (rx_cq, rx_selective) = split(self.rx_cq);
        let inject_size = self.info.inject_size;
        let core = Arc::new(EndpointCore {
            domain,
            info: self.info,
            caps,
            ep_type,
            av: self.av,
            tx_cq,
            rx_cq,
            tx_selective,
            rx_selective,
            counters: self.counters,
            min_multi_recv: AtomicUsize::new(0),
            inject_size,
            service,
            closed: AtomicBool::new(false),
            held: Mutex::new(Held {
                claim: Some(claim),
                registration,
            }),
            stats: OpCounters::default(),
            multi_recvs: Default::default(),
        });
        core.domain().adopt(&core);
        tracing::info!(
            epid = %core.domain().epid(),
            service,
            caps = %caps,
            "endpoint enabled"
        );
        // Remote RMA and atomic events (counters, remote CQ data) reach the
        // endpoint holding the target slot.
        if caps.rma_target() || caps.atomic_target() {
            core.domain().set_rma_target(&core);
        }
        Ok(Endpoint { core })
    }
}

fn split(bound: Option<(CompletionQueue, bool)>) -> (Option<CompletionQueue>, bool) {
    match bound {
        Some((cq, selective)) => (Some(cq), selective),
        None => (None, false),
    }
}

/// Registers the domain's epid under the service with the fabric's name
/// server, if one runs. A failure is a warning, as in C (the endpoint works;
/// only resolution by service does not): the service is then 0.
fn register(
    domain: &DomainCore,
    service: Option<u32>,
) -> (u32, Option<super::name_server::Registration>) {
    let Some(ns) = domain.fabric().name_server() else {
        return (0, None);
    };
    let service = match service {
        Some(s) if s != 0 => s,
        _ => generated_service(),
    };
    match ns.register(service, domain.epid()) {
        Ok(r) => (service, Some(r)),
        Err(e) => {
            tracing::warn!(
                "endpoint {}: not registered with the name server as service {service}: {e}",
                domain.epid()
            );
            (0, None)
        }
    }
}
