//! Memory registration on the multi-rail domain: one memory registered on
//! every rail ([`MrailMemoryRegion`]), its raw key, and the table of
//! peers' raw keys mapped for RMA calls ([`MappedKeys`]).
//!
//! Registering takes the bytes over once (the rail 0 region owns them) and
//! registers the same memory in every other rail's domain, so a stripe
//! landing on any rail writes the one buffer. The key is raw
//! (`FI_MR_RAW`): each rail's 8-byte key in rail order
//! ([`MrailMemoryRegion::raw_key`]). A peer turns it into a `u64` for its
//! RMA calls with [`MrailDomain::map_raw`](super::MrailDomain::map_raw),
//! which keeps the rail keys in the domain's table until
//! [`unmap_key`](super::MrailDomain::unmap_key).

use crate::engine::OpBuffer;
use crate::fabric::{MemoryRegion, MrAccess, RawKey, RAW_KEY_SIZE};
use crate::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A memory region of a multi-rail domain (`fid_mr`): registered on every
/// rail, one memory. A cheap `Clone` handle; the registration ends at
/// [`close`](Self::close) or when the last handle drops, and transfers in
/// flight keep the memory alive as for psm regions.
///
/// ```
/// use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
/// use psmrail::fabric::{getinfo, EngineChoice, Hints, MrAccess, Provider, RAW_KEY_SIZE};
/// use psmrail::mrail::MrailFabric;
///
/// let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
///     .delay(std::time::Duration::ZERO).build().unwrap();
/// let rails = MrailConfig::builder()
///     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap()).build();
/// let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
///     .config(psm).mrail_config(rails);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let domain = MrailFabric::open(&info)?.domain(&info)?;
/// let mr = domain.register(vec![0u8; 4096], MrAccess::REMOTE_WRITE, None)?;
/// assert_eq!(mr.raw_key().as_bytes().len(), 2 * RAW_KEY_SIZE);
/// assert_eq!(mr.raw_key().as_bytes().len(), info.domain_attr.mr_key_size);
/// let key = domain.map_raw(&mr.raw_key())?; // what a peer passes to `write`
/// domain.unmap_key(key)?;
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MrailMemoryRegion {
    rails: Arc<[MemoryRegion]>,
}

impl MrailMemoryRegion {
    pub(crate) fn new(rails: Vec<MemoryRegion>) -> Self {
        MrailMemoryRegion {
            rails: rails.into(),
        }
    }

    fn first(&self) -> &MemoryRegion {
        &self.rails[0]
    }

    /// The key as a byte string (`fi_mr_raw_attr`): every rail's raw key
    /// in rail order, [`key_size`](Self::key_size) bytes.
    pub fn raw_key(&self) -> RawKey {
        let bytes: Vec<u8> = self
            .rails
            .iter()
            .flat_map(|r| r.key().to_le_bytes())
            .collect();
        RawKey::from_bytes(&bytes)
    }

    /// Bytes of the raw key: [`RAW_KEY_SIZE`] per rail.
    pub fn key_size(&self) -> usize {
        self.rails.len() * RAW_KEY_SIZE
    }

    /// Rail `i`'s registration of the memory (for inspection).
    pub fn rail(&self, i: usize) -> Option<&MemoryRegion> {
        self.rails.get(i)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.first().len()
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> MrAccess {
        self.first().access()
    }

    /// Copies the bytes at `offset` into `dst` (as
    /// [`MemoryRegion::read_at`]).
    ///
    /// # Errors
    /// `Inval` past the end; `Busy` if a transfer in flight writes part of
    /// the range.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.first().read_at(offset, dst)
    }

    /// Copies `src` to `offset` (as [`MemoryRegion::write_at`]).
    ///
    /// # Errors
    /// `Inval` past the end; `Busy` if a transfer in flight holds part of
    /// the range.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.first().write_at(offset, src)
    }

    /// `[offset, offset + len)` as the local buffer of an operation (as
    /// [`MemoryRegion::buffer`]).
    ///
    /// # Errors
    /// `Inval` past the end; `Busy` if a transfer in flight holds part of
    /// the range.
    pub fn buffer(&self, offset: usize, len: usize) -> Result<OpBuffer> {
        self.first().buffer(offset, len)
    }

    /// Ends the registration on every rail (`fi_close`): peers' later
    /// operations fail with `FI_EACCES`. Idempotent.
    pub fn close(&self) {
        for r in self.rails.iter() {
            r.close();
        }
    }

    /// Whether `other` is a handle of the same registration.
    pub fn same(&self, other: &MrailMemoryRegion) -> bool {
        Arc::ptr_eq(&self.rails, &other.rails)
    }
}

/// Peers' raw keys mapped by a multi-rail domain: the `u64` an RMA call
/// names, standing for one key per rail.
#[derive(Debug, Default)]
pub(crate) struct MappedKeys {
    inner: Mutex<Mapped>,
}

#[derive(Debug, Default)]
struct Mapped {
    next: u64,
    keys: HashMap<u64, Arc<[u64]>>,
}

impl MappedKeys {
    /// Maps `raw` (`rails` rail keys) to a fresh key.
    pub(crate) fn map(&self, raw: &RawKey, rails: usize) -> Result<u64> {
        let bytes = raw.as_bytes();
        if bytes.len() != rails * RAW_KEY_SIZE {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "ofi_mrail: a raw key of {} bytes; this domain's have {} ({rails} rails of {RAW_KEY_SIZE})",
                    bytes.len(),
                    rails * RAW_KEY_SIZE
                ),
            ));
        }
        let keys: Arc<[u64]> = bytes
            .chunks_exact(RAW_KEY_SIZE)
            .map(|c| RawKey::from_bytes(c).key())
            .collect::<Result<Vec<u64>>>()?
            .into();
        let mut m = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Keys start at 1 and are not reused while the domain lives.
        m.next += 1;
        let key = m.next;
        m.keys.insert(key, keys);
        Ok(key)
    }

    /// Forgets `key`.
    pub(crate) fn unmap(&self, key: u64) -> Result<()> {
        let mut m = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match m.keys.remove(&key) {
            Some(_) => Ok(()),
            None => Err(not_mapped(key)),
        }
    }

    /// The rail keys `key` stands for; `FI_EACCES` when it was never
    /// mapped (or was unmapped).
    pub(crate) fn rail_keys(&self, key: u64) -> Result<Arc<[u64]>> {
        let m = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        m.keys.get(&key).cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::Access,
                format!("ofi_mrail: key {key:#x} was not mapped on this domain (map_raw a peer's raw key)"),
            )
        })
    }
}

#[cold]
fn not_mapped(key: u64) -> Error {
    Error::new(
        ErrorKind::Inval,
        format!("ofi_mrail: key {key:#x} is not mapped on this domain"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_keys_map_and_unmap() {
        let m = MappedKeys::default();
        let raw: Vec<u8> = [5u64, 9].iter().flat_map(|k| k.to_le_bytes()).collect();
        let k = m.map(&RawKey::from_bytes(&raw), 2).unwrap();
        assert_eq!(&*m.rail_keys(k).unwrap(), &[5, 9]);
        let k2 = m.map(&RawKey::from_bytes(&raw), 2).unwrap();
        assert_ne!(k, k2);
        m.unmap(k).unwrap();
        assert_eq!(m.rail_keys(k).unwrap_err().kind(), ErrorKind::Access);
        assert_eq!(m.unmap(k).unwrap_err().kind(), ErrorKind::Inval);
        let short = m.map(&RawKey::from_bytes(&raw[..8]), 2).unwrap_err();
        assert_eq!(short.kind(), ErrorKind::Inval);
    }
}
