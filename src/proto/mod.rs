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
//! | `gen_slab` | the generation-checked slab both protocols name their transfers by |
//!
//! # How it fits
//! The domain (`fabric/domain.rs`) opens one [`AmMsgQueue`](am_msg::AmMsgQueue)
//! and one [`RmaTransport`](rma_transport::RmaTransport) right after its
//! engine endpoint, and the peer watch (`fabric/peer_watch`) fails their
//! transfers with dead peers. The operations (`psmrail::ops`) post to them
//! and turn their completions into futures. Nothing here knows about
//! futures, and nothing here imports from the operations: the compiler
//! keeps the protocols below the futures layer. User-facing types defined
//! here (the atomic op and datatype enums and queries) are re-exported at
//! their public paths in `psmrail::ops::atomic`.
//!
//! The protocols still use the fabric's object types where they act on
//! them: the memory-region table and its refusals, the peer watch's
//! book of dead peers, and (in the RMA transport) the endpoint cores,
//! CQ entries and counters that remote operations complete to.

pub(crate) mod am_msg;
pub(crate) mod atomic;
pub(crate) mod gen_slab;
pub(crate) mod mr;
pub(crate) mod peer_watch;
pub(crate) mod rma;
pub(crate) mod rma_transport;
pub(crate) mod tag_layout;
