//! [`Hints`]: what the application asks discovery for (libfabric's `hints`
//! `fi_info`), as a builder. Everything left unset means "no preference".

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::attr::MsgOrder;
use super::mrail_attr::Provider;
use crate::config::{MrailConfig, PsmConfig, VarSource};
use crate::engine::soft::SoftConfig;
use crate::fabric::caps::{AvType, Caps, EngineChoice, EpType, Mode, ProgressKind, Threading};

/// A shared, thread-safe variable source (see [`Hints::vars`]).
pub(crate) type SharedVars = Arc<dyn VarSource + Send + Sync>;

/// What the application asks [`getinfo`](crate::fabric::getinfo) for.
///
/// Each setter mirrors a field of libfabric's hints; unset fields mean "no
/// preference", like zeroes in C. Two psmrail additions choose the engine
/// ([`engine`](Self::engine)) and the configuration
/// ([`config`](Self::config), [`soft_config`](Self::soft_config),
/// [`vars`](Self::vars)) instead of reading the process environment.
///
/// ```
/// use psmrail::fabric::{getinfo, Caps, EngineChoice, EpType, Hints, Mode};
/// use psmrail::config::PsmConfig;
///
/// let hints = Hints::new()
///     .caps(Caps::TAGGED | Caps::MSG)
///     .mode(Mode::CONTEXT)
///     .ep_type(EpType::Rdm)
///     .engine(EngineChoice::Soft)
///     .config(PsmConfig::default());
/// let info = getinfo(Some(&hints))?.remove(0);
/// assert_eq!(info.caps, Caps::TAGGED | Caps::MSG);
/// assert_eq!(info.mode, Mode::CONTEXT);
/// assert_eq!(info.inject_size, 64);
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Hints {
    pub(crate) caps: Caps,
    pub(crate) mode: Option<Mode>,
    pub(crate) ep_type: EpType,
    pub(crate) progress: ProgressKind,
    pub(crate) spin: Option<Duration>,
    pub(crate) idle_assist: Option<Duration>,
    pub(crate) av_type: AvType,
    pub(crate) threading: Threading,
    pub(crate) engine: Option<EngineChoice>,
    pub(crate) mem_tag_format: u64,
    pub(crate) inject_size: Option<usize>,
    pub(crate) tx_iov_limit: Option<usize>,
    pub(crate) rx_iov_limit: Option<usize>,
    pub(crate) rma_iov_limit: Option<usize>,
    pub(crate) max_msg_size: Option<u64>,
    pub(crate) msg_order: MsgOrder,
    pub(crate) comp_order: MsgOrder,
    pub(crate) tx_ctx_cnt: Option<usize>,
    pub(crate) rx_ctx_cnt: Option<usize>,
    pub(crate) fabric_name: Option<String>,
    pub(crate) domain_name: Option<String>,
    pub(crate) config: Option<PsmConfig>,
    pub(crate) soft: Option<SoftConfig>,
    pub(crate) vars: Option<SharedVars>,
    pub(crate) provider: Option<Provider>,
    pub(crate) prov_name: Option<String>,
    pub(crate) mrail: Option<MrailConfig>,
}

impl fmt::Debug for Hints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hints")
            .field("caps", &self.caps)
            .field("mode", &self.mode)
            .field("ep_type", &self.ep_type)
            .field("progress", &self.progress)
            .field("spin", &self.spin)
            .field("idle_assist", &self.idle_assist)
            .field("av_type", &self.av_type)
            .field("threading", &self.threading)
            .field("engine", &self.engine)
            .field(
                "mem_tag_format",
                &format_args!("{:#x}", self.mem_tag_format),
            )
            .field("inject_size", &self.inject_size)
            .field("tx_iov_limit", &self.tx_iov_limit)
            .field("rx_iov_limit", &self.rx_iov_limit)
            .field("rma_iov_limit", &self.rma_iov_limit)
            .field("max_msg_size", &self.max_msg_size)
            .field("msg_order", &self.msg_order)
            .field("comp_order", &self.comp_order)
            .field("tx_ctx_cnt", &self.tx_ctx_cnt)
            .field("rx_ctx_cnt", &self.rx_ctx_cnt)
            .field("fabric_name", &self.fabric_name)
            .field("domain_name", &self.domain_name)
            .field("config", &self.config.is_some())
            .field("soft", &self.soft.is_some())
            .field("vars", &self.vars.is_some())
            .field("provider", &self.provider)
            .field("prov_name", &self.prov_name)
            .field("mrail", &self.mrail.is_some())
            .finish()
    }
}

impl Hints {
    /// No preferences.
    pub fn new() -> Self {
        Hints::default()
    }

    /// Capabilities wanted. Empty means none asked: the answer then offers
    /// everything psm has (minus what the tag format leaves no room for).
    pub fn caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// Mode bits the application supports. Unset means it supports them
    /// all; set without [`Mode::CONTEXT`], discovery fails when the caps
    /// need it (`FI_TAGGED`, or `FI_MSG` without `FI_PSM_AM_MSG`).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Endpoint type: `Unspec` (the default) or `Rdm` answer `Rdm`, `Dgram`
    /// answers `Dgram`, `Msg` is refused.
    pub fn ep_type(mut self, ep_type: EpType) -> Self {
        self.ep_type = ep_type;
        self
    }

    /// Progress model for data and control. Left unset it is manual, as
    /// in C, except when `getinfo` runs inside a tokio runtime (feature
    /// `tokio`): there it is auto with a spin window of
    /// [`AdaptiveProgress::DEFAULT_SPIN`](crate::reactor::AdaptiveProgress::DEFAULT_SPIN)
    /// (see [`spin`](Self::spin)), so that an awaited receive neither holds
    /// an executor worker at 100 % nor pays a thread switch per message.
    pub fn progress(mut self, progress: ProgressKind) -> Self {
        self.progress = progress;
        self
    }

    /// Adaptive progress: with auto progress, a pending operation future
    /// makes progress itself for up to `spin` after its thread's last
    /// completion (the latency of manual progress), then sleeps until the
    /// progress thread wakes it (the CPU use of auto progress). Implies
    /// [`ProgressKind::Auto`] when the progress model is left unset; zero
    /// turns spinning off. Refused (`NoData`) with manual progress.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail::fabric::{getinfo, EngineChoice, Hints, ProgressKind};
    /// let hints = Hints::new().engine(EngineChoice::Soft).spin(Duration::from_micros(50));
    /// let info = getinfo(Some(&hints))?.remove(0);
    /// assert_eq!(info.progress, ProgressKind::Auto);
    /// assert_eq!(info.spin, Duration::from_micros(50));
    ///
    /// let manual = hints.progress(ProgressKind::Manual);
    /// assert!(getinfo(Some(&manual)).is_err());
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = Some(spin);
        self
    }

    /// Manual progress with a floor: a thread that runs one progress round
    /// whenever nobody has run one for `interval`, so that a peer's connect
    /// or handshake is answered while the application is away from the
    /// library (blocked on a control socket, say). Progress stays manual:
    /// operations make their own, and while the application progresses
    /// the thread only reads a counter once per interval. Ignored with auto
    /// progress (its thread does this and more). The C provider libraries
    /// ask for it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail::fabric::{getinfo, EngineChoice, Hints, ProgressKind};
    /// let hints = Hints::new()
    ///     .engine(EngineChoice::Soft)
    ///     .progress(ProgressKind::Manual)
    ///     .idle_assist(Duration::from_millis(2));
    /// let info = getinfo(Some(&hints))?.remove(0);
    /// assert_eq!(info.progress, ProgressKind::Manual);
    /// assert_eq!(info.idle_assist, Some(Duration::from_millis(2)));
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn idle_assist(mut self, interval: Duration) -> Self {
        self.idle_assist = Some(interval);
        self
    }

    /// Address vector type.
    pub fn av_type(mut self, av_type: AvType) -> Self {
        self.av_type = av_type;
        self
    }

    /// Threading model (default `Completion`; `Safe` is refused).
    pub fn threading(mut self, threading: Threading) -> Self {
        self.threading = threading;
        self
    }

    /// Which engine to use, overriding `PSMRAIL_ENGINE`.
    pub fn engine(mut self, engine: EngineChoice) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The tag format the application wants (`ep_attr.mem_tag_format`);
    /// 0 (the default) means none. Its width decides whether the `FI_MSG`
    /// and `FI_RMA` tag bits can be reserved ([`max_tag`](crate::fabric::max_tag)).
    pub fn mem_tag_format(mut self, format: u64) -> Self {
        self.mem_tag_format = format;
        self
    }

    /// Inject size wanted (at most 64).
    pub fn inject_size(mut self, size: usize) -> Self {
        self.inject_size = Some(size);
        self
    }

    /// Send and receive iov entries wanted (at most 1).
    pub fn iov_limit(mut self, limit: usize) -> Self {
        self.tx_iov_limit = Some(limit);
        self.rx_iov_limit = Some(limit);
        self
    }

    /// Send iov entries wanted (at most 1).
    pub fn tx_iov_limit(mut self, limit: usize) -> Self {
        self.tx_iov_limit = Some(limit);
        self
    }

    /// Receive iov entries wanted (at most 1).
    pub fn rx_iov_limit(mut self, limit: usize) -> Self {
        self.rx_iov_limit = Some(limit);
        self
    }

    /// RMA iov entries wanted (at most 1).
    pub fn rma_iov_limit(mut self, limit: usize) -> Self {
        self.rma_iov_limit = Some(limit);
        self
    }

    /// Largest message wanted (at most 2³²−1).
    pub fn max_msg_size(mut self, size: u64) -> Self {
        self.max_msg_size = Some(size);
        self
    }

    /// Message ordering wanted (within [`MsgOrder::PSM`]).
    pub fn msg_order(mut self, order: MsgOrder) -> Self {
        self.msg_order = order;
        self
    }

    /// Completion ordering wanted (psm offers only `FI_ORDER_NONE`).
    pub fn comp_order(mut self, order: MsgOrder) -> Self {
        self.comp_order = order;
        self
    }

    /// Transmit contexts wanted: 0, 1 or [`SHARED_CONTEXT`](super::SHARED_CONTEXT).
    pub fn tx_ctx_cnt(mut self, count: usize) -> Self {
        self.tx_ctx_cnt = Some(count);
        self
    }

    /// Receive contexts wanted: 0 or 1.
    pub fn rx_ctx_cnt(mut self, count: usize) -> Self {
        self.rx_ctx_cnt = Some(count);
        self
    }

    /// Fabric name wanted (`psm`).
    pub fn fabric_name(mut self, name: impl Into<String>) -> Self {
        self.fabric_name = Some(name.into());
        self
    }

    /// Domain name wanted (`psm`).
    pub fn domain_name(mut self, name: impl Into<String>) -> Self {
        self.domain_name = Some(name.into());
        self
    }

    /// Asks for a provider by libfabric's name (`fabric_attr.prov_name`):
    /// `"psm"` or `"ofi_mrail"`. An unknown name makes discovery answer
    /// `FI_ENODATA`. [`provider`](Self::provider) is the typed form and
    /// wins when both are given.
    pub fn prov_name(mut self, name: impl Into<String>) -> Self {
        self.prov_name = Some(name.into());
        self
    }

    /// Asks for a provider: [`Provider::Psm`] (the default) or
    /// [`Provider::Mrail`], one endpoint over the rails of
    /// `FI_OFI_MRAIL_ADDR` (or of [`mrail_config`](Self::mrail_config)).
    pub fn provider(mut self, provider: Provider) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The multi-rail configuration (rails and size policies) to use
    /// instead of the `FI_OFI_MRAIL_*` variables.
    pub fn mrail_config(mut self, config: MrailConfig) -> Self {
        self.mrail = Some(config);
        self
    }

    /// The `FI_PSM_*` configuration to use **instead of reading the
    /// environment**: with it, discovery and every object opened from its
    /// info ignore the `FI_PSM_*` variables. Build it with
    /// [`PsmConfig::builder_from_env`] to keep the environment's settings
    /// and override some, or with [`PsmConfig::builder`] to fix every
    /// setting whatever the environment says. Without this call, discovery
    /// reads the environment.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail::config::PsmConfig;
    /// use psmrail::fabric::{getinfo, EngineChoice, Hints};
    ///
    /// // The environment, then this program's overrides.
    /// let config = PsmConfig::builder_from_env()?.delay(Duration::ZERO).build()?;
    /// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
    /// assert_eq!(getinfo(Some(&hints))?[0].config().delay(), Duration::ZERO);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn config(mut self, config: PsmConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// The soft engine's configuration (default [`SoftConfig::default`]).
    pub fn soft_config(mut self, soft: SoftConfig) -> Self {
        self.soft = Some(soft);
        self
    }

    /// Where to read `PSMRAIL_ENGINE` and, without [`config`](Self::config),
    /// the `FI_PSM_*` variables, instead of the process environment.
    ///
    /// ```
    /// use psmrail::fabric::{getinfo, Hints};
    /// use psmrail::engine::EngineKind;
    /// let hints = Hints::new().vars(vec![("PSMRAIL_ENGINE", "soft"), ("FI_PSM_AM_MSG", "1")]);
    /// let info = getinfo(Some(&hints))?.remove(0);
    /// assert_eq!(info.engine, EngineKind::Soft);
    /// assert!(info.config().am_msg());
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn vars(mut self, vars: impl VarSource + Send + Sync + 'static) -> Self {
        self.vars = Some(Arc::new(vars));
        self
    }
}
