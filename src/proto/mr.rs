//! Memory registration (`fi_mr_reg`): regions that own the memory they
//! expose to peers' RMA, their keys, and the check a target runs before any
//! remote access.
//!
//! | file | what |
//! |---|---|
//! | `mr/access.rs` | [`MrAccess`]: `FI_READ`, `FI_WRITE`, `FI_REMOTE_READ`, `FI_REMOTE_WRITE` |
//! | `mr/memory.rs` | the region's bytes and the rule that keeps copies and engine transfers from racing |
//! | `mr/region.rs` | [`MemoryRegion`], the application's handle; [`RawKey`] |
//! | `mr/table.rs` | [`MrTable`], a domain's regions by key; [`MrTarget`], a checked range |
//! | `mr/refusal.rs` | [`MrRefusal`]: which check of a peer's request failed |
//!
//! The table sits here, below the fabric, because the RMA and atomic
//! targets (`proto/rma`, `proto/atomic`) check and serve peers' requests
//! against it; the domain (`fabric/domain.rs`) owns one and registers into
//! it. The public types are re-exported at `psmrail::fabric`.
//!
//! Design points (fi_mr(3); C validates in `prov/psm/src/psmx_mr.c`):
//! * A region **owns** its memory (taken over from a `Vec`/`Box`, never
//!   copied), so nothing a peer does can reach freed memory: an operation in
//!   flight holds the memory (`Arc`) past the region's close.
//! * Remote addresses are **offsets** into the region; the target checks
//!   key, then range (overflow included), then rights, each failure an
//!   `FI_EACCES` naming what was wrong, and touches nothing on failure.
//! * Keys: provider-assigned 1, 2, … or the application's requested key
//!   (`FI_EBUSY` when in use). Raw keys are the key's 8 little-endian bytes
//!   so a multi-rail layer can concatenate per-rail keys.

// `MrTable::register` is called by the domain once wired.
#![allow(dead_code)]

mod access;
mod memory;
mod refusal;
mod region;
mod table;

pub use access::MrAccess;
pub(crate) use refusal::MrRefusal;
pub use region::{MemoryRegion, RawKey, RAW_KEY_SIZE};
pub(crate) use table::{MrTable, MrTarget};
