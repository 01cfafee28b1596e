//! How the RMA target endpoint shows peers' RMA to the application: the
//! fabric side of [`RmaTargetEvents`] (the RMA transport, `proto/`, says
//! that an access completed; the endpoint decides what that looks like).
//!
//! * Every remote read or write bumps the endpoint's
//!   `FI_REMOTE_READ` / `FI_REMOTE_WRITE` counter, if it asked for
//!   `FI_RMA_EVENT` and bound one.
//! * A remote write with remote CQ data puts an entry in the endpoint's
//!   receive CQ, if it bound one: flags `FI_REMOTE_WRITE | FI_RMA |
//!   FI_REMOTE_CQ_DATA`, the data, the length, and the writer's address in
//!   the bound AV.

use super::endpoint::EndpointCore;
use super::{Caps, CompletionFlags, CounterKind, CqEntry, Direction};
use crate::engine::PeerAddr;
use crate::proto::rma::RmaKind;
use crate::proto::rma_target_events::RmaTargetEvents;

impl RmaTargetEvents for EndpointCore {
    fn remote_access(&self, kind: RmaKind) {
        if !self.caps().contains(Caps::RMA_EVENT) {
            return;
        }
        let kind = match kind {
            RmaKind::Write => CounterKind::RemoteWrite,
            RmaKind::Read => CounterKind::RemoteRead,
        };
        if let Some(c) = self.counter(kind) {
            c.inc();
        }
    }

    fn remote_write_data(&self, source: PeerAddr, data: u64, len: usize) {
        if let Some(cq) = self.cq(Direction::Recv) {
            let mut entry = CqEntry::new(
                0,
                CompletionFlags::REMOTE_WRITE
                    | CompletionFlags::RMA
                    | CompletionFlags::REMOTE_CQ_DATA,
            );
            entry.data = data;
            entry.len = len;
            entry.source = self.source_of(Some(source), None);
            cq.push(entry);
        }
    }
}
