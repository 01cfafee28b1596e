//! The protocols over active messages (`ARCHITECTURE.md`, "Layers":
//! `src/proto/`): what psmrail sends to its peers besides plain MQ
//! messages, below the futures users await.
//!
//! # What is here
//!
//! | module | what |
//! |---|---|
//! | `am_msg` | untagged messages over active messages (`FI_PSM_AM_MSG=1`): the sans-IO core and [`AmMsgQueue`](am_msg::AmMsgQueue), its I/O edge |
//! | `rma` | RMA over active messages: ids, the initiator and target state machines, transfer plans, the wire format |
//! | `atomic` | atomics: the op x datatype table, the valid-queries, execution at the target, and the atomic packets (`atomic/wire.rs`) |
//! | `rma_transport` | [`RmaTransport`](rma_transport::RmaTransport): RMA and atomics for one domain over one AM handler |
//! | `rma_target_events` | [`RmaTargetEvents`](rma_target_events::RmaTargetEvents): what the transport reports to the RMA target endpoint (remote accesses, remote CQ data) |
//! | `target_slots` | [`TargetSlots`](target_slots::TargetSlots): whether the domain has an RMA / atomic target endpoint now |
//! | `peer_watch` | dead peers: the book, the engine gate, the watch's rules, hello/bye packets and its AM handler |
//! | `mr` | memory registration: regions, access rights, the domain's table by key and the target-side check |
//! | `tag_layout` | the reserved high tag bits (`MSG_BIT`, `RMA_BIT`), `mem_tag_format` and the domain's live layout |
//! | `gen_slab` | the generation-checked slab both protocols name their transfers by |
//! | `fuzzing` | checks for the `peer_packets` fuzz target: every packet above decodes safely and round-trips (feature `hooks`) |
//!
//! # How it fits
//! The domain (`fabric/domain.rs`) owns a memory-region table and a tag
//! layout, and opens one [`AmMsgQueue`](am_msg::AmMsgQueue), one
//! [`RmaTransport`](rma_transport::RmaTransport) and one
//! [`PeerWatch`](peer_watch::PeerWatch) right after its engine endpoint;
//! the watch fails their transfers with dead peers. The operations
//! (`psmrail::ops`) post to them and turn their completions into futures.
//!
//! Everything here is written against the engine contract and nothing
//! else: nothing imports from the fabric, the operations or mrail, so the
//! compiler keeps the protocols below them. Where the RMA transport needs
//! the fabric's objects (the endpoint that remote accesses complete to,
//! the domain's target slots) it asks through the two small traits above,
//! which the fabric implements. User-facing types defined here are
//! re-exported at their public paths: the atomic op and datatype enums and
//! queries in `psmrail::ops::atomic`; memory regions, access rights, raw
//! keys and the tag bits and formats in `psmrail::fabric`.

pub(crate) mod am_msg;
pub(crate) mod atomic;
#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
pub(crate) mod gen_slab;
pub(crate) mod mr;
pub(crate) mod peer_watch;
pub(crate) mod rma;
pub(crate) mod rma_target_events;
pub(crate) mod rma_transport;
pub(crate) mod tag_layout;
pub(crate) mod target_slots;
