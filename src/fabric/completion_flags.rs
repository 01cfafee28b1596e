//! The `flags` field of a completion entry (libfabric's `FI_SEND`,
//! `FI_TAGGED`, ...), with libfabric's bit values.

use bitflags::bitflags;

bitflags! {
    /// What kind of operation a completion entry reports (`fi_cq_entry`
    /// `flags`). The bit values are libfabric's (`rdma/fabric.h`), so they
    /// can be handed to C code unchanged.
    ///
    /// ```
    /// use psmrail::fabric::CompletionFlags;
    /// let f = CompletionFlags::RECV | CompletionFlags::TAGGED;
    /// assert_eq!(f.bits(), (1 << 10) | (1 << 3));
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct CompletionFlags: u64 {
        /// `FI_MSG`: an untagged message operation.
        const MSG = 1 << 1;
        /// `FI_RMA`: an RMA operation.
        const RMA = 1 << 2;
        /// `FI_TAGGED`: a tagged message operation.
        const TAGGED = 1 << 3;
        /// `FI_ATOMIC`: an atomic operation.
        const ATOMIC = 1 << 4;
        /// `FI_READ`: an RMA read or fetching atomic initiated here.
        const READ = 1 << 8;
        /// `FI_WRITE`: an RMA write or atomic initiated here.
        const WRITE = 1 << 9;
        /// `FI_RECV`: a receive.
        const RECV = 1 << 10;
        /// `FI_SEND`: a send.
        const SEND = 1 << 11;
        /// `FI_REMOTE_READ`: a peer read this process's memory.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: a peer wrote this process's memory.
        const REMOTE_WRITE = 1 << 13;
        /// `FI_MULTI_RECV`: the multi-receive buffer is released (no more
        /// messages will land in it).
        const MULTI_RECV = 1 << 16;
        /// `FI_REMOTE_CQ_DATA`: the entry's `data` holds the peer's
        /// immediate data.
        const REMOTE_CQ_DATA = 1 << 17;
    }
}
