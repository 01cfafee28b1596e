//! The application's handle on a registered memory region, and its raw key.

use super::memory::{Conflict, RegionMemory, WindowUse};
use super::table::TableInner;
use super::MrAccess;
use crate::engine::{OpBuffer, StableRegion};
use crate::{Error, ErrorKind, Result};
use std::sync::{Arc, Mutex, Weak};

/// Bytes of a psm raw key ([`MemoryRegion::raw_key`]).
pub const RAW_KEY_SIZE: usize = 8;

/// A memory region key as the byte string applications exchange
/// (`FI_MR_RAW` style: `fi_mr_raw_attr` / `fi_mr_map_raw`).
///
/// For the psm provider a raw key is the region's 64-bit key in
/// little-endian order, [`RAW_KEY_SIZE`] bytes. Remote addresses are
/// offsets into the region (`FI_MR_SCALABLE` style), so no base address is
/// part of it. A multi-rail layer combines per-rail keys by concatenating
/// them in rail order; as every psm raw key has the same size, the combined
/// key splits back with `as_bytes().chunks_exact(RAW_KEY_SIZE)`.
///
/// ```
/// use psmrail::fabric::{RawKey, RAW_KEY_SIZE};
/// let k = RawKey::from_key(0x1234);
/// assert_eq!(k.as_bytes().len(), RAW_KEY_SIZE);
/// assert_eq!(RawKey::from_bytes(k.as_bytes()).key().unwrap(), 0x1234);
/// assert!(RawKey::from_bytes(&[1, 2, 3]).key().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawKey(Vec<u8>);

impl RawKey {
    /// A raw key received from a peer (any length; see [`key`](Self::key)).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        RawKey(bytes.to_vec())
    }

    /// The psm raw key of `key`.
    pub fn from_key(key: u64) -> Self {
        RawKey(key.to_le_bytes().to_vec())
    }

    /// The bytes to send to peers.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The key for psm RMA (`fi_mr_map_raw`).
    ///
    /// # Errors
    /// `Inval` when the string is not [`RAW_KEY_SIZE`] bytes long.
    pub fn key(&self) -> Result<u64> {
        let bytes: [u8; RAW_KEY_SIZE] = self.0.as_slice().try_into().map_err(|_| {
            Error::new(
                ErrorKind::Inval,
                format!(
                    "raw key of {} bytes: a psm raw key has {RAW_KEY_SIZE}",
                    self.0.len()
                ),
            )
        })?;
        Ok(u64::from_le_bytes(bytes))
    }
}

pub(super) struct MrShared {
    pub(super) memory: Arc<RegionMemory>,
    pub(super) key: u64,
    pub(super) access: MrAccess,
    /// Tells this registration from a later one under the same key.
    pub(super) serial: u64,
    pub(super) table: Weak<Mutex<TableInner>>,
    pub(super) watchers: Arc<super::table::Watchers>,
}

impl MrShared {
    fn deregister(&self) {
        if let Some(table) = self.table.upgrade() {
            super::table::remove(&table, self.key, self.serial);
        }
    }
}

impl Drop for MrShared {
    fn drop(&mut self) {
        self.deregister();
    }
}

/// A registered memory region (`fid_mr`): memory the region owns, a key
/// peers name it by, and access rights. A cheap `Clone` handle; the
/// registration ends at [`close`](Self::close) or when the last handle
/// drops.
///
/// # Addressing
/// Remote addresses are **offsets into the region** (`FI_MR_SCALABLE`
/// style): a peer writes `len` bytes at `offset` of key `k`, and the target
/// checks `offset + len <= len()`.
///
/// # Sharing the bytes with peers
/// Peers write and read the region while the application may use
/// [`read_at`](Self::read_at) and [`write_at`](Self::write_at). As with any
/// RDMA memory, the application must not touch a range a peer's operation
/// is writing (or write one it is reading) until something tells it the
/// operation is over (a completion, a counter, a message). Doing so is not
/// undefined behaviour here: each copy is atomic with respect to the
/// others, and a range an engine holds for a long transfer refuses the
/// access with `FI_EBUSY` (and a remote operation that would overlap such
/// a range fails with `FI_EBUSY` at its initiator) — but the bytes read are
/// then whatever mix of old and new the schedule produced.
///
/// # Closing
/// Closing ends the registration: peers' later operations fail with
/// `FI_EACCES`. Transfers already in flight keep the memory alive and
/// finish normally; the memory is freed when the last of them and the last
/// handle are gone.
#[derive(Clone)]
pub struct MemoryRegion {
    pub(super) shared: Arc<MrShared>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("key", &self.shared.key)
            .field("len", &self.len())
            .field("access", &self.shared.access)
            .finish()
    }
}

impl MemoryRegion {
    /// Calls `hook` once per completed peer access of `events`
    /// (`REMOTE_READ`, `REMOTE_WRITE`): what a counter bound to the
    /// region counts.
    pub(crate) fn watch(&self, events: MrAccess, hook: Arc<dyn Fn() + Send + Sync>) {
        self.shared.watchers.add(events, hook);
    }

    /// The key peers name the region by (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.shared.key
    }

    /// The key as a byte string (`fi_mr_raw_attr`).
    pub fn raw_key(&self) -> RawKey {
        RawKey::from_key(self.shared.key)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.shared.memory.len()
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> MrAccess {
        self.shared.access
    }

    /// Whether `other` is a handle of the same registration.
    pub fn same(&self, other: &MemoryRegion) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn busy(&self, what: &str, offset: usize, n: usize, c: Option<Conflict>) -> Error {
        match c {
            Some(c) => Error::new(
                ErrorKind::Busy,
                format!(
                    "memory region {:#x}: {what} of bytes [{offset}, {}) overlaps bytes [{}, {}) held by a transfer in flight",
                    self.shared.key,
                    offset.saturating_add(n),
                    c.start,
                    c.end
                ),
            ),
            None => Error::new(
                ErrorKind::Inval,
                format!(
                    "memory region {:#x}: {what} of {n} bytes at offset {offset} passes its end ({} bytes)",
                    self.shared.key,
                    self.len()
                ),
            ),
        }
    }

    /// Copies the bytes at `offset` into `dst`.
    ///
    /// # Errors
    /// `Inval` past the end; `Busy` if an engine is writing part of the
    /// range (module docs of [`MemoryRegion`]: sharing).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.shared
            .memory
            .copy_out(offset, dst)
            .map_err(|c| self.busy("reading", offset, dst.len(), c))
    }

    /// Copies `src` to `offset`.
    ///
    /// # Errors
    /// `Inval` past the end; `Busy` if an engine holds part of the range.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.shared
            .memory
            .copy_in(offset, src)
            .map_err(|c| self.busy("writing", offset, src.len(), c))
    }

    /// `[offset, offset + len)` as the local buffer of an operation (the
    /// region used as `desc`): the engine may read and write it until the
    /// buffer drops, and the range is held exclusively until then.
    ///
    /// # Errors
    /// `Inval` past the end; `Busy` if a transfer in flight holds part of
    /// the range.
    pub fn buffer(&self, offset: usize, len: usize) -> Result<OpBuffer> {
        let window = self
            .shared
            .memory
            .pin(offset, len, WindowUse::Exclusive)
            .map_err(|c| self.busy("lending", offset, len, c))?;
        let region: Arc<dyn StableRegion> = Arc::new(window);
        Ok(OpBuffer::from(region))
    }

    /// Ends the registration (`fi_close`) for every handle: later remote
    /// operations fail with `FI_EACCES`. The bytes stay readable through
    /// this handle and stay alive for transfers in flight. Idempotent.
    pub fn close(&self) {
        self.shared.deregister();
    }
}
