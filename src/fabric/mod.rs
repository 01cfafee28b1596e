//! The libfabric object model (`ARCHITECTURE.md`, "Layers": `src/fabric/`):
//! discovery (`getinfo`), fabric, domain, address vector, completion queues,
//! counters and endpoints, with the psm provider's capability rules and its
//! name server.
//!
//! Everything here is written against the engine contract
//! ([`crate::engine::EngineEndpoint`]) and the protocols below it
//! (`src/proto/`); the operations on endpoints live in
//! [`psmrail::ops`](../ops/index.html) (the fabric sits below them).
//!
//! Memory regions ([`MemoryRegion`], [`MrAccess`], [`RawKey`]), the tag
//! bits ([`MSG_BIT`], [`RMA_BIT`], [`mem_tag_format`], [`max_tag`]) and the
//! peer watch are defined in `src/proto/`, which acts on them, and the
//! public ones are re-exported here. The fabric keeps what needs its own
//! objects: which capabilities reserve which tag bits
//! (`tag_reservation.rs`), and how the RMA target endpoint shows peers'
//! RMA (`rma_target_events.rs`).

mod addr;
mod caps;
mod completion_flags;
mod counter;
mod cq;
mod info;
pub(crate) use info::mrail_discovery::{mrail_unsupported, MRAIL_CAPS, MRAIL_RMA_CAPS};
mod slots;
mod tag_reservation;
mod wait_list;

pub use crate::proto::tag_layout::{max_tag, mem_tag_format, MSG_BIT, RMA_BIT};
pub use addr::FiAddr;
pub use caps::{AvType, Caps, EngineChoice, EpType, Mode, ProgressKind, Threading};
pub use completion_flags::CompletionFlags;
pub(crate) use counter::CounterWatch;
pub use counter::{Counter, CounterAttr, CounterEvents, CounterWait, CounterWaitOrError};
pub use cq::{CompletionQueue, CqAttr, CqEntry, CqErrEntry, CqFormat, CqNext};
pub use info::{
    getinfo, DomainAttr, EpAttr, FabricAttr, GetInfo, Hints, Info, MrailAttr, MsgOrder, Provider,
    RailAttr, ResourceMgmt, RxAttr, SourceName, TxAttr, DEFAULT_RESOLVE_TIMEOUT, ENGINE_VAR,
    INJECT_SIZE, MAX_MSG_SIZE, MAX_ORDER_SIZE, PROVIDER_NAME, SHARED_CONTEXT,
};
#[allow(unused_imports)] // used by domain.rs/endpoint.rs
pub(crate) use slots::{DomainSlots, Role, SlotClaim};
pub use tag_reservation::endpoint_bits;
mod av;
mod av_entries;
mod domain;
mod endpoint;
mod endpoint_builder;
mod endpoint_stats;
#[allow(clippy::module_inception)]
mod fabric;
pub mod name_server;
pub(crate) mod offload;
mod op_counters;
mod rma_target_events;
pub use crate::proto::mr::{MemoryRegion, MrAccess, RawKey, RAW_KEY_SIZE};
pub use av::{
    AddressVector, AvAttr, AvInsert, AvInsertOne, DEFAULT_AV_COUNT, DEFAULT_CONNECT_TIMEOUT,
};
#[cfg_attr(not(feature = "hooks"), allow(unused_imports))]
pub(crate) use domain::lingering as lingering_domains;
#[allow(unused_imports)]
pub(crate) use domain::DomainCore;
pub use domain::{Domain, DomainClose};
pub(crate) use endpoint::EndpointCore;
pub use endpoint::{CounterBind, CounterKind, CqBind, Direction, Endpoint, EndpointClose};
pub use endpoint_builder::EndpointBuilder;
pub use endpoint_stats::EndpointStats;
pub use fabric::Fabric;
pub use name_server::Service;
pub(crate) use op_counters::OpCounters;
