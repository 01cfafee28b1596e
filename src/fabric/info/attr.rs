//! What one discovery answer says: [`Info`] and its attribute groups, with
//! the psm provider's values (fi_getinfo(3); C: `prov/psm/src/psmx_init.c`).

use bitflags::bitflags;
use std::time::Duration;

use super::mrail_attr::{MrailAttr, Provider};
use crate::config::{NameServerListen, PsmConfig};
use crate::engine::soft::SoftConfig;
use crate::engine::{EngineKind, Epid};
use crate::fabric::caps::{AvType, Caps, EpType, Mode, ProgressKind, Threading};
use crate::fabric::name_server::Service;

/// Provider, fabric and domain name.
pub const PROVIDER_NAME: &str = "psm";
/// Largest message (`max_msg_size`): PSM carries at most 2³²−1 bytes.
pub const MAX_MSG_SIZE: u64 = u32::MAX as u64;
/// Largest inject (`inject_size`).
pub const INJECT_SIZE: usize = 64;
/// Largest ordered RMA / atomic (`max_order_{raw,war,waw}_size`): one AM chunk.
pub const MAX_ORDER_SIZE: usize = 2032;
/// `FI_SHARED_CONTEXT`: a `tx_ctx_cnt` hint asking for a shared context.
pub const SHARED_CONTEXT: usize = usize::MAX;
/// The object counts psm advertises (`cq_cnt`, `ep_cnt`, `cntr_cnt`, ...).
pub(super) const OBJECT_COUNT: usize = 65535;

bitflags! {
    /// Ordering bits (`msg_order`, `comp_order`), with libfabric's values.
    /// An empty set is `FI_ORDER_NONE`.
    ///
    /// ```
    /// use psmrail::fabric::MsgOrder;
    /// assert_eq!(MsgOrder::SAS.bits(), 1 << 8);
    /// assert_eq!(MsgOrder::empty().to_string(), "FI_ORDER_NONE");
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct MsgOrder: u64 {
        /// `FI_ORDER_RAR`: read after read.
        const RAR = 1 << 0;
        /// `FI_ORDER_RAW`: read after write.
        const RAW = 1 << 1;
        /// `FI_ORDER_RAS`: read after send.
        const RAS = 1 << 2;
        /// `FI_ORDER_WAR`: write after read.
        const WAR = 1 << 3;
        /// `FI_ORDER_WAW`: write after write.
        const WAW = 1 << 4;
        /// `FI_ORDER_WAS`: write after send.
        const WAS = 1 << 5;
        /// `FI_ORDER_SAR`: send after read.
        const SAR = 1 << 6;
        /// `FI_ORDER_SAW`: send after write.
        const SAW = 1 << 7;
        /// `FI_ORDER_SAS`: send after send.
        const SAS = 1 << 8;
        /// `FI_ORDER_DATA`: data placement order (comp_order).
        const DATA = 1 << 16;
        /// `FI_ORDER_RMA_RAR`.
        const RMA_RAR = 1 << 32;
        /// `FI_ORDER_RMA_RAW`.
        const RMA_RAW = 1 << 33;
        /// `FI_ORDER_RMA_WAR`.
        const RMA_WAR = 1 << 34;
        /// `FI_ORDER_RMA_WAW`.
        const RMA_WAW = 1 << 35;
        /// `FI_ORDER_ATOMIC_RAR`.
        const ATOMIC_RAR = 1 << 36;
        /// `FI_ORDER_ATOMIC_RAW`.
        const ATOMIC_RAW = 1 << 37;
        /// `FI_ORDER_ATOMIC_WAR`.
        const ATOMIC_WAR = 1 << 38;
        /// `FI_ORDER_ATOMIC_WAW`.
        const ATOMIC_WAW = 1 << 39;
    }
}

impl MsgOrder {
    /// What psm guarantees (`msg_order`): send after send, and the four
    /// RMA/atomic orders, in their generic and specific forms.
    pub const PSM: MsgOrder = MsgOrder::SAS
        .union(MsgOrder::RAR)
        .union(MsgOrder::RAW)
        .union(MsgOrder::WAR)
        .union(MsgOrder::WAW)
        .union(MsgOrder::RMA_RAR)
        .union(MsgOrder::RMA_RAW)
        .union(MsgOrder::RMA_WAR)
        .union(MsgOrder::RMA_WAW)
        .union(MsgOrder::ATOMIC_RAR)
        .union(MsgOrder::ATOMIC_RAW)
        .union(MsgOrder::ATOMIC_WAR)
        .union(MsgOrder::ATOMIC_WAW);
}

impl std::fmt::Display for MsgOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("FI_ORDER_NONE");
        }
        let mut first = true;
        for (name, _) in self.iter_names() {
            if !first {
                f.write_str(" | ")?;
            }
            first = false;
            write!(f, "FI_ORDER_{name}")?;
        }
        let unnamed = self.bits() & !MsgOrder::all().bits();
        if unnamed != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{unnamed:#x}")?;
        }
        Ok(())
    }
}

/// Resource management (`fi_domain_attr::resource_mgmt`): psm always
/// enables it (queues never overrun silently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceMgmt {
    /// `FI_RM_ENABLED`.
    Enabled,
}

/// Transmit attributes (`fi_tx_attr`; the inject size is [`Info::inject_size`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxAttr {
    /// Capabilities of the transmit side (the info's).
    pub caps: Caps,
    /// Mode bits (the info's).
    pub mode: Mode,
    /// Ordering of sends, RMA and atomics.
    pub msg_order: MsgOrder,
    /// Completion ordering (`FI_ORDER_NONE`).
    pub comp_order: MsgOrder,
    /// Queue depth: unbounded as far as the application can tell
    /// (`UINT64_MAX`); sends back-press with `Again` when the engine is full.
    pub size: usize,
    /// Entries per send iov: 1.
    pub iov_limit: usize,
    /// Entries per RMA iov: 1.
    pub rma_iov_limit: usize,
}

/// Receive attributes (`fi_rx_attr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxAttr {
    /// Capabilities of the receive side (the info's).
    pub caps: Caps,
    /// Mode bits (the info's).
    pub mode: Mode,
    /// Ordering of receives.
    pub msg_order: MsgOrder,
    /// Completion ordering (`FI_ORDER_NONE`).
    pub comp_order: MsgOrder,
    /// Buffered unexpected data: unbounded (`~0`, as PSM reports it).
    pub total_buffered_recv: usize,
    /// Queue depth (`UINT64_MAX`).
    pub size: usize,
    /// Entries per receive iov: 1.
    pub iov_limit: usize,
}

/// Endpoint attributes (`fi_ep_attr`; the type, largest message and tag
/// format are [`Info::ep_type`], [`Info::max_msg_size`] and
/// [`Info::mem_tag_format`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpAttr {
    /// Wire protocol name (`FI_PROTO_PSMX`).
    pub protocol: &'static str,
    /// Prefix bytes a message needs: 0.
    pub msg_prefix_size: usize,
    /// Largest ordered read-after-write: 2032.
    pub max_order_raw_size: usize,
    /// Largest ordered write-after-read: 2032.
    pub max_order_war_size: usize,
    /// Largest ordered write-after-write: 2032.
    pub max_order_waw_size: usize,
    /// Transmit contexts: 1.
    pub tx_ctx_cnt: usize,
    /// Receive contexts: 1.
    pub rx_ctx_cnt: usize,
}

/// Domain attributes (`fi_domain_attr`; the AV type and progress are
/// [`Info::av_type`] and [`Info::progress`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainAttr {
    /// Domain name: `psm`.
    pub name: &'static str,
    /// Threading model (default `FI_THREAD_COMPLETION`).
    pub threading: Threading,
    /// Control progress (the same as [`Info::progress`]).
    pub control_progress: ProgressKind,
    /// Resource management: enabled.
    pub resource_mgmt: ResourceMgmt,
    /// Domain capabilities: `FI_LOCAL_COMM | FI_REMOTE_COMM`.
    pub caps: Caps,
    /// Memory-region key size: 8 bytes.
    pub mr_key_size: usize,
    /// Immediate data carried with RMA: 4 bytes.
    pub cq_data_size: usize,
    /// Completion queues: 65535.
    pub cq_cnt: usize,
    /// Endpoints: 65535.
    pub ep_cnt: usize,
    /// Transmit contexts: 1.
    pub tx_ctx_cnt: usize,
    /// Receive contexts: 1.
    pub rx_ctx_cnt: usize,
    /// Transmit contexts per endpoint: 65535.
    pub max_ep_tx_ctx: usize,
    /// Receive contexts per endpoint: 1.
    pub max_ep_rx_ctx: usize,
    /// Shared transmit contexts per endpoint: 65535.
    pub max_ep_stx_ctx: usize,
    /// Shared receive contexts per endpoint: 0 (unsupported).
    pub max_ep_srx_ctx: usize,
    /// Counters: 65535.
    pub cntr_cnt: usize,
    /// Memory regions: 65535.
    pub mr_cnt: usize,
    /// Entries per memory-region iov: 65535.
    pub mr_iov_limit: usize,
}

/// Fabric attributes (`fi_fabric_attr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricAttr {
    /// Fabric name: `psm`.
    pub name: &'static str,
    /// Provider name: `psm`.
    pub prov_name: &'static str,
    /// Provider version: psmrail's.
    pub prov_version: &'static str,
}

/// The local address asked for with `FI_SOURCE` (the C provider's
/// `psmx_src_name`): node text, device unit and port, and name-server
/// service, passed on to the endpoint open and its name-server entry.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SourceName {
    /// The node text as given (`anything:unit:port`; may be empty).
    pub node: String,
    /// Device unit; `None` for any (C's `-1`).
    pub unit: Option<u32>,
    /// Device port; `None` for any (C's `0`).
    pub port: Option<u32>,
    /// Name-server service; `0` lets the endpoint pick one.
    pub service: Service,
}

/// One answer of discovery: what a fabric, domain and endpoints opened
/// from it will be. Produced by [`getinfo`](crate::fabric::getinfo) and
/// [`GetInfo`](crate::fabric::GetInfo).
///
/// The plain fields are libfabric's; [`engine`](Self::engine) and
/// [`config`](Self::config) are psmrail's (which engine carries the queues,
/// and the `FI_PSM_*` settings in force). `Display` prints it as `fi_info`
/// does; the alternate form (`{:#}`) prints every attribute.
#[derive(Clone, Debug)]
pub struct Info {
    /// Capabilities (what was asked, or everything psm offers).
    pub caps: Caps,
    /// Mode bits the application must honour (`FI_CONTEXT` or none).
    pub mode: Mode,
    /// Endpoint type: `Dgram` if asked, else `Rdm`.
    pub ep_type: EpType,
    /// The engine the objects will use.
    pub engine: EngineKind,
    /// Data progress (never `Unspec`: manual unless auto was asked, or
    /// `getinfo` ran inside a tokio runtime; see
    /// [`Hints::progress`](crate::fabric::Hints::progress)).
    pub progress: ProgressKind,
    /// Adaptive progress's spin window (zero: futures sleep at once under
    /// auto progress; see [`Hints::spin`](crate::fabric::Hints::spin)).
    pub spin: Duration,
    /// Manual progress's idle assist: the interval after which a thread
    /// runs a progress round nobody else ran (see
    /// [`Hints::idle_assist`](crate::fabric::Hints::idle_assist); `None`:
    /// no such thread).
    pub idle_assist: Option<Duration>,
    /// Address vector type, as asked (`Unspec` opens a MAP).
    pub av_type: AvType,
    /// Largest inject (`tx_attr.inject_size` in C): 64 bytes.
    pub inject_size: usize,
    /// Largest message (`ep_attr.max_msg_size` in C): 2³²−1 bytes, checked
    /// per operation.
    pub max_msg_size: u64,
    /// The tag format left to the application (`ep_attr.mem_tag_format`
    /// in C; see [`mem_tag_format`](crate::fabric::mem_tag_format)).
    pub mem_tag_format: u64,
    /// Local address, when known (never at discovery: an epid exists only
    /// once the domain opens).
    pub src_addr: Option<Epid>,
    /// Peer resolved through the name server (a node without `FI_SOURCE`).
    pub dest_addr: Option<Epid>,
    /// The unit/port/service asked for with `FI_SOURCE`.
    pub source: Option<SourceName>,
    /// Transmit attributes.
    pub tx_attr: TxAttr,
    /// Receive attributes.
    pub rx_attr: RxAttr,
    /// Endpoint attributes.
    pub ep_attr: EpAttr,
    /// Domain attributes.
    pub domain_attr: DomainAttr,
    /// Fabric attributes.
    pub fabric_attr: FabricAttr,
    pub(super) config: PsmConfig,
    pub(super) soft: SoftConfig,
    pub(super) name_server_listen: NameServerListen,
    pub(super) mrail: Option<MrailAttr>,
}

impl Info {
    /// The `FI_PSM_*` configuration the objects opened from this info use
    /// (the hints' own, or the environment's at discovery).
    pub fn config(&self) -> &PsmConfig {
        &self.config
    }

    /// The soft-engine configuration (used when [`engine`](Self::engine) is
    /// soft).
    pub fn soft_config(&self) -> &SoftConfig {
        &self.soft
    }

    /// Where the name server a fabric opened from this info starts (when
    /// `FI_PSM_NAME_SERVER` is on) listens: `PSMRAIL_NAME_SERVER_ADDR`,
    /// else loopback plus the soft engine's address when that is not a
    /// loopback one ([`NameServerListen::for_soft_bind`]).
    pub fn name_server_listen(&self) -> &NameServerListen {
        &self.name_server_listen
    }

    /// The provider this info describes: [`Provider::Mrail`] when it came
    /// from hints asking for `ofi_mrail`.
    pub fn provider(&self) -> Provider {
        match self.mrail {
            Some(_) => Provider::Mrail,
            None => Provider::Psm,
        }
    }

    /// The rails and policies of a multi-rail info (`None` for psm).
    pub fn mrail(&self) -> Option<&MrailAttr> {
        self.mrail.as_ref()
    }

    /// Threading model: `domain_attr.threading`.
    pub fn threading(&self) -> Threading {
        self.domain_attr.threading
    }
}
