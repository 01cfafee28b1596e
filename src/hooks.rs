//! Entry points into psmrail's internals for the fuzz targets (`fuzz/`)
//! and the integration tests that drive a protocol directly: feature
//! `hooks`, which `fuzz/Cargo.toml` and the crate's own dev-dependency
//! turn on. Not part of the API: nothing here is stable, and an
//! application never needs it.

/// The configuration parsers (`FI_PSM_PROG_AFFINITY`,
/// `FI_OFI_MRAIL_CONFIG`): run them on arbitrary input; the check of
/// `PSMRAIL_WATCH_HOST`, which only the process environment gives a
/// domain.
pub mod config {
    pub use crate::config::fuzzing::*;

    /// The check of `PSMRAIL_WATCH_HOST` (the peer watch's host label),
    /// on any variables: the label, `None` when unset.
    pub fn watch_host(
        vars: &dyn crate::config::VarSource,
    ) -> Result<Option<String>, crate::config::ConfigError> {
        crate::proto::peer_watch::identity::host_label(vars)
    }
}

/// The soft engine's frame decoder and handshake.
pub mod soft {
    pub use crate::engine::soft::fuzzing::*;
}

/// The soft engine's shared-memory ring, against a hostile peer.
pub mod shm {
    pub use crate::engine::soft::shm::fuzzing::*;
}

/// The name server's frames.
pub mod name_server {
    pub use crate::fabric::name_server::fuzzing::*;
}

/// The packets of the protocols over active messages (AM messages, RMA,
/// atomics, the peer watch).
pub mod packets {
    pub use crate::proto::fuzzing::*;
}

/// The PMI wire protocol's fuzz entry point.
pub mod bootstrap {
    pub use crate::bootstrap::fuzzing::*;
}

/// The mrail header and reorder buffer.
pub mod mrail {
    pub use crate::mrail::fuzzing::*;
}

pub use crate::proto::am_msg::{AmMsgCounts, AmMsgHook};

/// How many domains whose last handle was dropped on an async runtime's
/// thread are still closing (their `FI_PSM_DELAY` and engine close run on
/// a thread of their own).
pub fn lingering_domains() -> usize {
    crate::fabric::lingering_domains()
}
