//! [`RmaTargetEvents`]: what the RMA transport asks of the endpoint that is
//! the target of peers' RMA — somewhere to report that a peer's read or
//! write against this domain's memory completed.
//!
//! The transport only knows that an access happened and what it carried;
//! how that shows to the application (the endpoint's `FI_RMA_EVENT`
//! counters, an entry in its receive CQ for remote CQ data) is the
//! endpoint's business, implemented in the fabric
//! (`fabric/rma_target_events.rs`). The transport holds the endpoint
//! weakly, so a closed endpoint just stops getting events.

use crate::engine::PeerAddr;
use crate::proto::rma::RmaKind;

/// The RMA target endpoint as the RMA transport sees it.
///
/// Called from the transport's pump (its progress step, or right after a
/// post), never from an engine handler, with none of the transport's
/// locks held; one completed access is
/// reported as [`remote_access`](Self::remote_access), then, for a write
/// with remote CQ data, [`remote_write_data`](Self::remote_write_data).
pub(crate) trait RmaTargetEvents: Send + Sync {
    /// A peer's RMA of `kind` against this domain's memory completed.
    fn remote_access(&self, kind: RmaKind);

    /// A peer's write of `len` bytes from `source` completed carrying
    /// remote CQ data `data` (`FI_REMOTE_CQ_DATA`).
    fn remote_write_data(&self, source: PeerAddr, data: u64, len: usize);
}
