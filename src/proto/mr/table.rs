//! A domain's registered regions by key, and the target-side check every
//! remote operation passes before touching memory.

use super::memory::{Conflict, RegionMemory, WindowUse};
use super::region::{MemoryRegion, MrShared};
use super::MrAccess;
use super::MrRefusal;
use crate::engine::{OpBuffer, StableRegion};
use crate::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub(super) struct TableInner {
    entries: HashMap<u64, Entry>,
    /// Next provider-assigned key to try.
    next_key: u64,
    next_serial: u64,
}

struct Entry {
    memory: Arc<RegionMemory>,
    access: MrAccess,
    serial: u64,
    watchers: Arc<Watchers>,
}

/// What is told of peers' accesses to a region (`fi_mr_bind` of a
/// counter): each hook with the remote rights whose accesses it counts.
#[derive(Default)]
pub(crate) struct Watchers(Mutex<Vec<(MrAccess, Hook)>>);

/// What a watcher runs per access.
pub(crate) type Hook = Arc<dyn Fn() + Send + Sync>;

impl Watchers {
    /// Adds `hook`, called once per completed peer access of `events`.
    pub(crate) fn add(&self, events: MrAccess, hook: Hook) {
        relock(&self.0).push((events, hook));
    }

    fn tell(&self, access: MrAccess) {
        let hooks: Vec<_> = relock(&self.0)
            .iter()
            .filter(|(events, _)| events.intersects(access))
            .map(|(_, h)| h.clone())
            .collect();
        hooks.iter().for_each(|h| h());
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Single inserts and removes: consistent across a panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Removes `key` if it still names registration `serial`.
pub(super) fn remove(table: &Mutex<TableInner>, key: u64, serial: u64) {
    let mut t = relock(table);
    if t.entries.get(&key).is_some_and(|e| e.serial == serial) {
        t.entries.remove(&key);
    }
}

/// The memory regions of one domain, by key (the C provider's red-black
/// tree). Cheap to clone; the domain keeps one and the RMA target handler
/// checks every request against it.
///
/// Keys: [`register`](Self::register) with no requested key assigns
/// 1, 2, 3, … skipping keys in use (`FI_MR_BASIC`-like, C's provider
/// keys); a requested key is used as is, or refused with `Busy` when taken.
#[derive(Clone)]
pub(crate) struct MrTable {
    inner: Arc<Mutex<TableInner>>,
}

impl std::fmt::Debug for MrTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MrTable").field("len", &self.len()).finish()
    }
}

impl Default for MrTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MrTable {
    /// An empty table.
    pub(crate) fn new() -> Self {
        MrTable {
            inner: Arc::new(Mutex::new(TableInner {
                entries: HashMap::new(),
                next_key: 1,
                next_serial: 1,
            })),
        }
    }

    /// Registered regions.
    pub(crate) fn len(&self) -> usize {
        relock(&self.inner).entries.len()
    }

    /// Registers `bytes` (taken over, not copied) with `access`, under
    /// `requested_key` or a provider-assigned one (`fi_mr_reg`).
    ///
    /// # Errors
    /// `Inval` for access bits outside the four `MrAccess` ones; `Busy`
    /// when the requested key is in use.
    pub(crate) fn register(
        &self,
        bytes: Box<[u8]>,
        access: MrAccess,
        requested_key: Option<u64>,
    ) -> Result<MemoryRegion> {
        self.register_memory(Arc::new(RegionMemory::new(bytes)), access, requested_key)
    }

    /// Registers memory kept in place by its owner ([`RegionMemory::kept`]).
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub(crate) fn register_kept(
        &self,
        region: Arc<dyn StableRegion>,
        access: MrAccess,
        requested_key: Option<u64>,
    ) -> Result<MemoryRegion> {
        self.register_memory(Arc::new(RegionMemory::kept(region)), access, requested_key)
    }

    /// Registers memory another table already registered (the same bytes
    /// reachable through several domains, as the rails of a multi-rail
    /// domain), under `requested_key` or a provider-assigned one.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub(crate) fn register_shared(
        &self,
        region: &MemoryRegion,
        requested_key: Option<u64>,
    ) -> Result<MemoryRegion> {
        self.register_memory(
            region.shared.memory.clone(),
            region.shared.access,
            requested_key,
        )
    }

    fn register_memory(
        &self,
        memory: Arc<RegionMemory>,
        access: MrAccess,
        requested_key: Option<u64>,
    ) -> Result<MemoryRegion> {
        if !MrAccess::all().contains(access) {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("registering memory: unknown access bits in {access}"),
            ));
        }
        let mut t = relock(&self.inner);
        let key = match requested_key {
            Some(k) if t.entries.contains_key(&k) => {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!("registering memory: key {k:#x} is in use"),
                ))
            }
            Some(k) => k,
            None => {
                // At most len + 1 probes find a free key; 0 is never assigned.
                let mut k = t.next_key.max(1);
                while t.entries.contains_key(&k) {
                    k = k.checked_add(1).unwrap_or(1);
                }
                t.next_key = k.checked_add(1).unwrap_or(1);
                k
            }
        };
        let serial = t.next_serial;
        t.next_serial += 1;
        let watchers = Arc::new(Watchers::default());
        t.entries.insert(
            key,
            Entry {
                memory: memory.clone(),
                access,
                serial,
                watchers: watchers.clone(),
            },
        );
        drop(t);
        Ok(MemoryRegion {
            shared: Arc::new(MrShared {
                memory,
                key,
                access,
                serial,
                table: Arc::downgrade(&self.inner),
                watchers,
            }),
        })
    }

    /// A peer's access of `access` to the region with `key` completed:
    /// tells its watchers (a region closed meanwhile has none).
    pub(crate) fn accessed(&self, key: u64, access: MrAccess) {
        let watchers = relock(&self.inner)
            .entries
            .get(&key)
            .map(|e| e.watchers.clone());
        if let Some(w) = watchers {
            w.tell(access);
        }
    }

    /// Checks a peer's request for `len` bytes at `offset` of `key` needing
    /// `needed` rights, before any byte is touched.
    ///
    /// # Errors
    /// `Access` naming the key when no region has it, naming the range when
    /// it passes the region's end (overflow included), naming the missing
    /// right when `needed` is not granted.
    pub(crate) fn check(
        &self,
        key: u64,
        offset: u64,
        len: u64,
        needed: MrAccess,
    ) -> Result<MrTarget> {
        let t = relock(&self.inner);
        let entry = t.entries.get(&key).ok_or_else(|| {
            Error::with_source(
                ErrorKind::Access,
                format!("no memory region has key {key:#x}"),
                MrRefusal::Key,
            )
        })?;
        let region_len = entry.memory.len();
        let in_range = offset
            .checked_add(len)
            .is_some_and(|end| end <= region_len as u64);
        if !in_range {
            return Err(Error::with_source(
                ErrorKind::Access,
                format!(
                    "bytes [{offset}, {offset}+{len}) lie outside memory region {key:#x} of {region_len} bytes"
                ),
                MrRefusal::Range,
            ));
        }
        let missing = needed - entry.access;
        if !missing.is_empty() {
            return Err(Error::with_source(
                ErrorKind::Access,
                format!("memory region {key:#x} was registered without {missing}"),
                MrRefusal::Rights,
            ));
        }
        Ok(MrTarget {
            memory: entry.memory.clone(),
            key,
            // In range of a usize-long region, so both fit.
            offset: offset as usize,
            len: len as usize,
        })
    }
}

/// A checked range of a registered region, for one remote operation. It
/// keeps the region's memory alive (the region may be closed meanwhile).
#[derive(Debug, Clone)]
pub(crate) struct MrTarget {
    memory: Arc<RegionMemory>,
    key: u64,
    offset: usize,
    len: usize,
}

impl MrTarget {
    /// The region's key.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// Offset of the range in the region.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// Length of the range.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn busy(&self, c: Option<Conflict>) -> Error {
        match c {
            Some(c) => Error::new(
                ErrorKind::Busy,
                format!(
                    "memory region {:#x}: bytes [{}, {}) overlap bytes [{}, {}) held by a transfer in flight",
                    self.key,
                    self.offset,
                    self.offset + self.len,
                    c.start,
                    c.end
                ),
            ),
            None => Error::new(
                ErrorKind::Inval,
                format!(
                    "memory region {:#x}: {} bytes do not fit the checked range of {}",
                    self.key, self.len, self.len
                ),
            ),
        }
    }

    /// Writes `src` at the start of the range (at most its length).
    pub(crate) fn write(&self, src: &[u8]) -> Result<()> {
        if src.len() > self.len {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "memory region {:#x}: {} bytes for a checked range of {}",
                    self.key,
                    src.len(),
                    self.len
                ),
            ));
        }
        self.memory
            .copy_in(self.offset, src)
            .map_err(|c| self.busy(c))
    }

    /// Reads the start of the range into `dst` (at most its length).
    pub(crate) fn read(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() > self.len {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "memory region {:#x}: {}-byte buffer for a checked range of {}",
                    self.key,
                    dst.len(),
                    self.len
                ),
            ));
        }
        self.memory
            .copy_out(self.offset, dst)
            .map_err(|c| self.busy(c))
    }

    /// The range as an engine buffer for the long protocol: the engine
    /// writes it (`writes`, an MQ receive) or only reads it (an MQ send).
    /// Held until the buffer drops.
    pub(crate) fn pin(&self, writes: bool) -> Result<OpBuffer> {
        let usage = if writes {
            WindowUse::Exclusive
        } else {
            WindowUse::Shared
        };
        let window = self
            .memory
            .pin(self.offset, self.len, usage)
            .map_err(|c| self.busy(c))?;
        let region: Arc<dyn StableRegion> = Arc::new(window);
        Ok(OpBuffer::from(region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Box<[u8]> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn provider_keys_count_up_and_skip_taken_ones() {
        let t = MrTable::new();
        let a = t.register(bytes(4), MrAccess::all(), None).unwrap();
        let b = t.register(bytes(4), MrAccess::all(), Some(3)).unwrap();
        let c = t.register(bytes(4), MrAccess::all(), None).unwrap();
        let d = t.register(bytes(4), MrAccess::all(), None).unwrap();
        assert_eq!((a.key(), b.key(), c.key(), d.key()), (1, 3, 2, 4));
        let e = t.register(bytes(4), MrAccess::all(), Some(3)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert!(e.message().contains("0x3"), "{e}");
        assert_eq!(t.len(), 4);
        let z = t.register(bytes(1), MrAccess::all(), Some(0)).unwrap();
        assert_eq!(z.key(), 0);
    }

    #[test]
    fn assigned_keys_wrap_without_zero() {
        let t = MrTable::new();
        let _max = t
            .register(bytes(1), MrAccess::all(), Some(u64::MAX))
            .unwrap();
        relock(&t.inner).next_key = u64::MAX;
        let k = t.register(bytes(1), MrAccess::all(), None).unwrap();
        assert_eq!(k.key(), 1);
    }

    #[test]
    fn unknown_access_bits_are_refused() {
        let t = MrTable::new();
        let e = t
            .register(bytes(1), MrAccess::from_bits_retain(1 << 40), None)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
    }

    #[test]
    fn check_names_key_range_and_right() {
        let t = MrTable::new();
        let r = t
            .register(bytes(16), MrAccess::REMOTE_READ, Some(7))
            .unwrap();
        let e = t.check(8, 0, 1, MrAccess::REMOTE_READ).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Access);
        assert!(e.message().contains("key 0x8"), "{e}");
        for (off, len) in [(0, 17), (16, 1), (17, 0), (u64::MAX, 2), (1, u64::MAX)] {
            let e = t.check(7, off, len, MrAccess::REMOTE_READ).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Access, "{off} {len}");
            assert!(e.message().contains("outside"), "{e}");
        }
        let e = t.check(7, 0, 1, MrAccess::REMOTE_WRITE).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Access);
        assert!(e.message().contains("FI_REMOTE_WRITE"), "{e}");
        let ok = t.check(7, 16, 0, MrAccess::REMOTE_READ).unwrap();
        assert_eq!((ok.key(), ok.offset(), ok.len()), (7, 16, 0));
        let whole = t.check(7, 0, 16, MrAccess::REMOTE_READ).unwrap();
        let mut out = vec![0; 16];
        whole.read(&mut out).unwrap();
        assert_eq!(out, bytes(16).to_vec());
        drop(r);
    }

    #[test]
    fn closing_ends_remote_access_but_in_flight_targets_finish() {
        let t = MrTable::new();
        let r = t.register(bytes(8), MrAccess::all(), None).unwrap();
        let other = r.clone();
        let target = t.check(r.key(), 0, 4, MrAccess::REMOTE_WRITE).unwrap();
        let pinned = target.pin(true).unwrap();
        r.close();
        assert_eq!(t.len(), 0);
        assert_eq!(
            t.check(r.key(), 0, 4, MrAccess::REMOTE_WRITE)
                .unwrap_err()
                .kind(),
            ErrorKind::Access
        );
        drop(r);
        drop(other);
        // The memory lives on for the transfer in flight.
        assert_eq!(pinned.as_slice(), &[0, 1, 2, 3]);
        drop(pinned);
        target.write(&[9, 9, 9, 9]).unwrap();
    }

    #[test]
    fn a_reused_key_is_not_removed_by_the_old_registrations_drop() {
        let t = MrTable::new();
        let old = t.register(bytes(1), MrAccess::all(), Some(5)).unwrap();
        old.close();
        let new = t.register(bytes(2), MrAccess::all(), Some(5)).unwrap();
        drop(old); // its drop must not remove key 5 of `new`
        assert_eq!(t.check(5, 0, 2, MrAccess::REMOTE_READ).unwrap().len(), 2);
        drop(new);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn dropping_the_last_handle_deregisters_and_the_table_may_go_first() {
        let t = MrTable::new();
        let r = t.register(bytes(1), MrAccess::all(), None).unwrap();
        let r2 = r.clone();
        drop(r);
        assert_eq!(t.len(), 1);
        drop(r2);
        assert_eq!(t.len(), 0);
        let r = t.register(bytes(3), MrAccess::all(), None).unwrap();
        drop(t);
        r.write_at(0, &[1, 2, 3]).unwrap();
        r.close();
    }

    #[test]
    fn app_access_respects_windows_and_bounds() {
        let t = MrTable::new();
        let r = t.register(bytes(8), MrAccess::all(), None).unwrap();
        let mut b = r.buffer(2, 4).unwrap();
        b.as_mut_slice().unwrap().copy_from_slice(&[7; 4]);
        let mut out = [0u8; 8];
        assert_eq!(r.read_at(0, &mut out).unwrap_err().kind(), ErrorKind::Busy);
        assert_eq!(r.write_at(5, &[0]).unwrap_err().kind(), ErrorKind::Busy);
        let target = t.check(r.key(), 0, 3, MrAccess::REMOTE_WRITE).unwrap();
        assert_eq!(target.write(&[0; 3]).unwrap_err().kind(), ErrorKind::Busy);
        drop(b);
        r.read_at(0, &mut out).unwrap();
        assert_eq!(out, [0, 1, 7, 7, 7, 7, 6, 7]);
        assert_eq!(r.read_at(1, &mut out).unwrap_err().kind(), ErrorKind::Inval);
        assert_eq!(
            r.write_at(usize::MAX, &[1]).unwrap_err().kind(),
            ErrorKind::Inval
        );
        assert_eq!(target.write(&[0; 4]).unwrap_err().kind(), ErrorKind::Inval);
        let mut four = [0u8; 4];
        assert_eq!(target.read(&mut four).unwrap_err().kind(), ErrorKind::Inval);
        target.write(&[5, 5]).unwrap();
        target.read(&mut four[..1]).unwrap();
        assert_eq!(four[0], 5);
    }
}
