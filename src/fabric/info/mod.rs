//! Discovery: libfabric's `fi_getinfo` for the psm provider.
//!
//! [`getinfo`] takes optional [`Hints`] and answers one [`Info`], or an
//! error saying why psm cannot give what was asked. [`GetInfo`] is the full
//! request, with `fi_getinfo`'s node, service and `FI_SOURCE` flag:
//!
//! ```no_run
//! use psmrail::fabric::{Caps, GetInfo, Hints};
//! // Client: find the server's endpoint through the name server on "server1".
//! let hints = Hints::new().caps(Caps::TAGGED);
//! let info = GetInfo::new().node("server1").service(7).hints(&hints).run()?.remove(0);
//! println!("server epid: {:?}", info.dest_addr);
//! // Server: open on device unit 0, port 1, and register as service 7.
//! let info = GetInfo::new().node("x:0:1").service(7).source(true).run()?.remove(0);
//! assert_eq!(info.source.unwrap().unit, Some(0));
//! # Ok::<(), psmrail::Error>(())
//! ```
//!
//! # What discovery decides
//! * The hint checks (`check.rs`, pure): capabilities within one of psm's
//!   two advertised sets, endpoint type, sizes and limits, ordering, names,
//!   threading, and the `FI_CONTEXT` mode. Every refusal is `NoData` with a
//!   message naming the attribute; malformed node/service texts and
//!   configuration are `Inval`.
//! * The tag bits reserved for `FI_MSG` / `FI_RMA` and the resulting
//!   `mem_tag_format` (`fabric/tag_reservation.rs`, `proto/tag_layout.rs`).
//! * The engine (`engine_choice.rs`): the hints' [`EngineChoice`], else the
//!   `PSMRAIL_ENGINE` variable (`auto`, `native` or `soft`; a malformed
//!   value is an `Inval` error naming it), else auto: native when the PSM
//!   library loads and a device passes the preflight, soft otherwise.
//!   Native asked for but unusable is `NoData` carrying the reason.
//! * The configuration: the hints' [`PsmConfig`], else read from the hints'
//!   variables ([`Hints::vars`]) or the process environment.
//! * Addresses: with `FI_SOURCE`, node `anything:unit:port` picks the local
//!   device (`source.rs`); without it, a node is a host whose name server
//!   is asked for `service` and the answer becomes `dest_addr` (failure:
//!   `NoData`).
//!
//! [`EngineChoice`]: super::EngineChoice

mod attr;
mod check;
mod engine_choice;
mod hints;
mod mrail_attr;
pub(crate) mod mrail_discovery;
mod print;
pub(crate) mod source;

use std::time::Duration;

pub use attr::{
    DomainAttr, EpAttr, FabricAttr, Info, MsgOrder, ResourceMgmt, RxAttr, SourceName, TxAttr,
    INJECT_SIZE, MAX_MSG_SIZE, MAX_ORDER_SIZE, PROVIDER_NAME, SHARED_CONTEXT,
};
pub use engine_choice::ENGINE_VAR;
pub use hints::Hints;
pub use mrail_attr::{MrailAttr, Provider, RailAttr};

use crate::config::{ProcessEnv, PsmConfig, VarSource};
use crate::engine::{EngineKind, Epid};
use crate::fabric::caps::ProgressKind;
use crate::fabric::name_server::Service;
use crate::{Error, ErrorKind, Result};

/// The hints with the progress model an async runtime calls for, when the
/// caller left it unset and runs inside one: under tokio (feature `tokio`),
/// auto progress with the default spin window (adaptive progress).
/// `None`: the hints stand as they are.
fn runtime_default_progress(hints: &Hints) -> Option<Hints> {
    if hints.progress != ProgressKind::Unspec || hints.spin.is_some() || !in_tokio_runtime() {
        return None;
    }
    Some(
        hints
            .clone()
            .spin(crate::reactor::AdaptiveProgress::DEFAULT_SPIN),
    )
}

/// Whether the calling thread runs inside a tokio runtime.
fn in_tokio_runtime() -> bool {
    crate::fabric::offload::in_async_runtime()
}

/// How long a name-server lookup may take by default.
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Discovery with hints only (no node, no service): `fi_getinfo(version,
/// NULL, NULL, 0, hints, &info)`.
///
/// ```
/// use psmrail::fabric::{getinfo, Caps, EngineChoice, EpType, Hints, Mode};
/// use psmrail::config::PsmConfig;
/// let hints = Hints::new().engine(EngineChoice::Soft).config(PsmConfig::default());
/// let info = getinfo(Some(&hints))?.remove(0);
/// assert_eq!(info.ep_type, EpType::Rdm);
/// assert!(info.caps.contains(Caps::TAGGED | Caps::MSG | Caps::RMA));
/// assert_eq!(info.mode, Mode::CONTEXT);
/// assert_eq!(info.mem_tag_format, 0x2AAA_AAAA_AAAA_AAAA);
///
/// let err = getinfo(Some(&hints.clone().ep_type(EpType::Msg))).unwrap_err();
/// assert_eq!(err.kind(), psmrail::ErrorKind::NoData);
/// # Ok::<(), psmrail::Error>(())
/// ```
///
/// # Blocking
/// As [`GetInfo::run`]: the first call of the process that considers the
/// native engine loads PSM (about 100 ms here); later calls take
/// microseconds.
///
/// # Errors
/// See [`GetInfo::run`].
pub fn getinfo(hints: Option<&Hints>) -> Result<Vec<Info>> {
    let mut request = GetInfo::new();
    if let Some(h) = hints {
        request = request.hints(h);
    }
    request.run()
}

/// A service as [`GetInfo`] was given it.
#[derive(Clone, Copy, Debug)]
enum ServiceSpec<'a> {
    Number(Service),
    Text(&'a str),
}

/// A full discovery request: `fi_getinfo`'s node, service, `FI_SOURCE` flag
/// and hints, plus the name-server port and lookup timeout.
///
/// ```
/// use psmrail::fabric::{EngineChoice, GetInfo, Hints};
/// let hints = Hints::new().engine(EngineChoice::Soft);
/// let info = GetInfo::new().node("any:-1:1").service(42).source(true).hints(&hints).run()?;
/// let src = info[0].source.as_ref().unwrap();
/// assert_eq!((src.unit, src.port, src.service.get()), (None, Some(1), 42));
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct GetInfo<'a> {
    node: Option<&'a str>,
    service: Option<ServiceSpec<'a>>,
    source: bool,
    hints: Option<&'a Hints>,
    ns_port: Option<u16>,
    timeout: Option<Duration>,
}

impl<'a> GetInfo<'a> {
    /// An empty request (no node, no service, no hints).
    pub fn new() -> Self {
        GetInfo::default()
    }

    /// The node: a host to resolve through its name server, or with
    /// [`source`](Self::source) the local `anything:unit:port`. The lookup
    /// happens whatever `FI_PSM_NAME_SERVER` says (that setting only decides
    /// whether this process serves), as in C.
    pub fn node(mut self, node: &'a str) -> Self {
        self.node = Some(node);
        self
    }

    /// The name-server service (not a TCP port); absent or
    /// [`Service::ANY`] is any.
    pub fn service(mut self, service: impl Into<Service>) -> Self {
        self.service = Some(ServiceSpec::Number(service.into()));
        self
    }

    /// The service as `fi_getinfo`'s text: a decimal number, checked when
    /// the request runs (an error there names the text).
    pub fn service_text(mut self, service: &'a str) -> Self {
        self.service = Some(ServiceSpec::Text(service));
        self
    }

    /// The service number asked for: 0 when none.
    fn service_number(&self) -> Result<u32> {
        match self.service {
            None => Ok(0),
            Some(ServiceSpec::Number(s)) => Ok(s.get()),
            Some(ServiceSpec::Text(t)) => source::parse_service(Some(t)),
        }
    }

    /// `FI_SOURCE`: node and service describe the local side.
    pub fn source(mut self, on: bool) -> Self {
        self.source = on;
        self
    }

    /// The hints.
    pub fn hints(mut self, hints: &'a Hints) -> Self {
        self.hints = Some(hints);
        self
    }

    /// The TCP port of the remote name server; by default the one derived
    /// from the job UUID ([`port_for`](crate::fabric::name_server::port_for)),
    /// as every process of the job uses.
    pub fn name_server_port(mut self, port: u16) -> Self {
        self.ns_port = Some(port);
        self
    }

    /// How long the name-server lookup may take (default
    /// [`DEFAULT_RESOLVE_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs discovery. The answer holds one [`Info`].
    ///
    /// # Blocking
    /// Choosing the engine (`auto` or `native`) probes the PSM library:
    /// the first probe of the process loads it and runs `psm_init` (about
    /// 100 ms here), and its outcome, success or failure, is kept for the
    /// process (`psm_sys::PsmLibrary::get`, `PsmLibrary::init`); every
    /// later probe reads the device variables and `/dev` only, in
    /// microseconds. The soft engine, asked for, probes nothing. In async
    /// code, make the first call before the runtime starts or in
    /// `spawn_blocking`, or ask for the soft engine. A node to resolve is
    /// a name-server query that waits up to the lookup
    /// [`timeout`](Self::timeout) (5 s by default).
    ///
    /// # Errors
    /// * `NoData`: a hint psm cannot satisfy (the message names it), the
    ///   native engine asked for but unusable, or the name server could not
    ///   resolve the node.
    /// * `Inval`: a malformed `PSMRAIL_ENGINE`, `FI_PSM_*` variable, soft
    ///   configuration, `FI_SOURCE` node or service.
    pub fn run(&self) -> Result<Vec<Info>> {
        let empty = Hints::default();
        let hints = self.hints.unwrap_or(&empty);
        let vars: &dyn VarSource = match &hints.vars {
            Some(v) => v.as_ref(),
            None => &ProcessEnv,
        };
        let config = match &hints.config {
            Some(c) => c.clone(),
            None => PsmConfig::from_vars(vars)?,
        };
        let mrail = mrail_discovery::wants_mrail(hints)?;
        let user_hints = hints;
        let rail_hints;
        let hints = if mrail {
            rail_hints = mrail_discovery::rail_hints(hints)?;
            &rail_hints
        } else {
            hints
        };
        let runtime_default;
        let hints = match runtime_default_progress(hints) {
            Some(h) => {
                runtime_default = h;
                &runtime_default
            }
            None => hints,
        };
        let settled = check::check(hints, config.am_msg(), config.tagged_rma())?;
        let source = if self.source {
            Some(source::parse_source(self.node, self.service_number()?)?)
        } else {
            None
        };
        let service = if self.source {
            0
        } else {
            self.service_number()?
        };
        let (choice, from) = engine_choice::resolve(hints.engine, vars)?;
        let engine = engine_choice::decide(choice, from, engine_choice::native_probe)?;
        // The hints' soft configuration decides where it listens; without
        // one, PSMRAIL_SOFT_ADDR may say.
        let mut soft = match &hints.soft {
            Some(soft) => soft.clone(),
            None => {
                let mut soft = crate::engine::soft::SoftConfig::default();
                if let Some(at) = crate::config::listen_addr::soft_addr_from_vars(vars)? {
                    soft.bind = at.ip;
                    soft.port = at.port.unwrap_or(0);
                }
                let shm = crate::config::soft_shm::from_vars(vars)?;
                soft.shared_memory = shm.enabled.unwrap_or(soft.shared_memory);
                soft.shm_ring = shm.ring.unwrap_or(soft.shm_ring);
                soft.shm_single_copy = shm.single_copy.unwrap_or(soft.shm_single_copy);
                soft
            }
        };
        let name_server_listen = crate::config::listen_addr::name_server_from_vars(vars)?
            .unwrap_or_else(|| crate::config::NameServerListen::for_soft_bind(soft.bind));
        if soft.job_secret.is_none() {
            soft.job_secret = crate::engine::soft::JobSecret::from_vars(vars)?;
        }
        if engine == EngineKind::Soft {
            soft.validate()?;
        }
        let dest_addr = match (self.source, self.node) {
            (false, Some(node)) => {
                let port = self
                    .ns_port
                    .unwrap_or_else(|| crate::fabric::name_server::port_for(&config.uuid()));
                let timeout = self.timeout.unwrap_or(DEFAULT_RESOLVE_TIMEOUT);
                Some(resolve_name(node, port, service, timeout)?)
            }
            _ => None,
        };
        let info = build(
            settled,
            engine,
            source,
            dest_addr,
            config,
            soft,
            name_server_listen,
        );
        if mrail {
            return Ok(vec![mrail_discovery::into_mrail(info, user_hints, vars)?]);
        }
        Ok(vec![info])
    }
}

/// Asks the name server on `node:port` for `service` (0: any endpoint).
fn resolve_name(node: &str, port: u16, service: u32, timeout: Duration) -> Result<Epid> {
    crate::fabric::name_server::query(node, port, service, timeout)
        .map(|(_, epid)| epid)
        .map_err(|e| {
            let message = format!(
                "node {node:?} service {service}: the name server at {node}:{port} gave no \
                 endpoint: {e}"
            );
            Error::with_source(ErrorKind::NoData, message, e)
        })
}

fn build(
    s: check::Settled,
    engine: EngineKind,
    source: Option<SourceName>,
    dest_addr: Option<Epid>,
    config: PsmConfig,
    soft: crate::engine::soft::SoftConfig,
    name_server_listen: crate::config::NameServerListen,
) -> Info {
    let comp_order = MsgOrder::empty();
    Info {
        caps: s.caps,
        mode: s.mode,
        ep_type: s.ep_type,
        engine,
        progress: s.progress,
        spin: s.spin,
        idle_assist: s.idle_assist,
        av_type: s.av_type,
        inject_size: INJECT_SIZE,
        max_msg_size: MAX_MSG_SIZE,
        mem_tag_format: crate::fabric::mem_tag_format(s.reserved),
        src_addr: None,
        dest_addr,
        source,
        tx_attr: TxAttr {
            caps: s.caps,
            mode: s.mode,
            msg_order: MsgOrder::PSM,
            comp_order,
            size: usize::MAX,
            iov_limit: 1,
            rma_iov_limit: 1,
        },
        rx_attr: RxAttr {
            caps: s.caps,
            mode: s.mode,
            msg_order: MsgOrder::PSM,
            comp_order,
            total_buffered_recv: usize::MAX,
            size: usize::MAX,
            iov_limit: 1,
        },
        ep_attr: EpAttr {
            protocol: "FI_PROTO_PSMX",
            msg_prefix_size: 0,
            max_order_raw_size: MAX_ORDER_SIZE,
            max_order_war_size: MAX_ORDER_SIZE,
            max_order_waw_size: MAX_ORDER_SIZE,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
        },
        domain_attr: DomainAttr {
            name: PROVIDER_NAME,
            threading: s.threading,
            control_progress: match s.progress {
                ProgressKind::Unspec => ProgressKind::Manual,
                p => p,
            },
            resource_mgmt: ResourceMgmt::Enabled,
            caps: check::DOMAIN_CAPS,
            mr_key_size: 8,
            cq_data_size: 4,
            cq_cnt: attr::OBJECT_COUNT,
            ep_cnt: attr::OBJECT_COUNT,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            max_ep_tx_ctx: attr::OBJECT_COUNT,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: attr::OBJECT_COUNT,
            max_ep_srx_ctx: 0,
            cntr_cnt: attr::OBJECT_COUNT,
            mr_cnt: attr::OBJECT_COUNT,
            mr_iov_limit: attr::OBJECT_COUNT,
        },
        fabric_attr: FabricAttr {
            name: PROVIDER_NAME,
            prov_name: PROVIDER_NAME,
            prov_version: env!("CARGO_PKG_VERSION"),
        },
        config,
        soft,
        name_server_listen,
        mrail: None,
    }
}
