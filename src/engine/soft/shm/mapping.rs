//! The edge that makes a segment real: a sealed memfd mapped into both
//! processes ([`MappedSegment`]).
//!
//! The creator makes an anonymous memfd (nothing named in `/dev/shm`,
//! nothing another process can open), sizes it, seals it against
//! shrinking and growing (so the peer can never make an access fault by
//! truncating it under this side) and against further sealing (so it can
//! never be made read-only under a writable mapping), maps it and writes
//! the layout ([`Layout::init`]). The descriptor then goes to the peer
//! over the Unix socket that carried the handshake (`SCM_RIGHTS`). The
//! opener trusts none of it: [`MappedSegment::open`] checks the seals and
//! the length before it maps, and the header through [`Layout::read`]
//! (a private copy, validated) before any ring is built over it.

use super::segment::{Layout, RawRegion, SharedRegion, MAX_CAPACITY};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::fmt;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The seals a segment must carry before this side maps it.
const REQUIRED_SEALS: SealFlag = SealFlag::F_SEAL_SHRINK
    .union(SealFlag::F_SEAL_GROW)
    .union(SealFlag::F_SEAL_SEAL);

/// The longest segment an offer may name: two rings of the largest
/// capacity and their header page.
pub(crate) const MAX_SEGMENT: u64 = 2 * MAX_CAPACITY as u64 + (1 << 20);

/// A segment mapped into this process (shared, read-write), unmapped on
/// drop. Every access goes through [`SharedRegion`].
pub(crate) struct MappedSegment {
    region: RawRegion,
    base: NonNull<std::ffi::c_void>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory reached only through the
// atomic accessors of `RawRegion` (itself Send + Sync); `base` and `len`
// are only used again by `drop`.
unsafe impl Send for MappedSegment {}
// SAFETY: as for `Send`: `&MappedSegment` gives only atomic access.
unsafe impl Sync for MappedSegment {}

impl fmt::Debug for MappedSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedSegment")
            .field("len", &self.len)
            .finish()
    }
}

impl MappedSegment {
    /// A new segment for `layout`: sealed memfd, mapped and initialised.
    /// The descriptor is for the peer.
    pub(crate) fn create(layout: &Layout) -> io::Result<(MappedSegment, OwnedFd)> {
        let fd = memfd_create(
            c"psmrail-soft-shm",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )?;
        let len = layout.total_len();
        nix::unistd::ftruncate(&fd, len as i64)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(REQUIRED_SEALS))?;
        let segment = MappedSegment::map(&fd, len)?;
        layout
            .init(&segment)
            .map_err(|e| io::Error::other(format!("cannot initialise the segment: {e}")))?;
        Ok((segment, fd))
    }

    /// Maps a segment a peer offered as `fd`, of `expect_len` bytes as its
    /// offer said; the layout its header describes. `Err` says why it is
    /// refused (not a sealed memfd, another length, a bad header).
    pub(crate) fn open(fd: &OwnedFd, expect_len: u64) -> Result<(MappedSegment, Layout), String> {
        if expect_len > MAX_SEGMENT {
            return Err(format!(
                "the offer names {expect_len} bytes, more than {MAX_SEGMENT}"
            ));
        }
        let seals = fcntl(fd, FcntlArg::F_GET_SEALS)
            .map_err(|e| format!("the descriptor is not a sealed memfd ({e})"))?;
        let seals = SealFlag::from_bits_truncate(seals);
        if !seals.contains(REQUIRED_SEALS) {
            return Err(format!(
                "the memfd lacks seals: it has {seals:?}, needs {REQUIRED_SEALS:?}"
            ));
        }
        let st = nix::sys::stat::fstat(fd).map_err(|e| format!("fstat: {e}"))?;
        if u64::try_from(st.st_size).ok() != Some(expect_len) {
            return Err(format!(
                "the memfd holds {} bytes, the offer names {expect_len}",
                st.st_size
            ));
        }
        let segment =
            MappedSegment::map(fd, expect_len as usize).map_err(|e| format!("mmap: {e}"))?;
        let layout = Layout::read(&segment).map_err(|e| format!("its header: {e}"))?;
        Ok((segment, layout))
    }

    fn map(fd: &OwnedFd, len: usize) -> io::Result<MappedSegment> {
        let size = NonZeroUsize::new(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an empty segment"))?;
        // SAFETY: a fresh shared mapping of a memfd chosen by the kernel's
        // placement (no fixed address, so nothing of ours is replaced).
        // Its length is sealed (neither side can shrink the file), so
        // every page of the mapping stays backed while it lives.
        let base = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )
        }?;
        // SAFETY: the mapping is page aligned (so aligned to LINE), valid
        // for `len` bytes until `drop` unmaps it (after the region, the
        // only user, is gone), and no Rust reference to its bytes exists:
        // `RawRegion` reaches them through atomics only.
        let region = unsafe { RawRegion::new(base.cast(), len) };
        Ok(MappedSegment { region, base, len })
    }
}

impl Drop for MappedSegment {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping `map` made; nothing reaches
        // it after this (the region is dropped with `self`, and the rings
        // hold the segment through an `Arc`).
        if let Err(e) = unsafe { munmap(self.base, self.len) } {
            tracing::warn!(error = %e, "soft engine: cannot unmap a shared segment");
        }
    }
}

impl SharedRegion for MappedSegment {
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        self.region.atomic_u64(offset)
    }
    #[inline]
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.region.atomic_u32(offset)
    }
    #[inline]
    fn read_into(&self, offset: usize, dst: &mut [u8]) {
        self.region.read_into(offset, dst)
    }
    #[inline]
    fn write_from(&self, offset: usize, src: &[u8]) {
        self.region.write_from(offset, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::soft::shm::ring::{RingConsumer, RingProducer};
    use crate::engine::soft::shm::segment::Direction;
    use std::sync::Arc;

    #[test]
    fn a_created_segment_opens_and_carries_bytes() {
        let layout = Layout::new(1 << 16).unwrap();
        let (mine, fd) = MappedSegment::create(&layout).unwrap();
        let (theirs, seen) = MappedSegment::open(&fd, layout.total_len() as u64).unwrap();
        assert_eq!(seen, layout);
        let mine = Arc::new(mine);
        let theirs = Arc::new(theirs);
        let mut p = RingProducer::new(mine.clone(), layout.ring(Direction::FromCreator));
        let mut c = RingConsumer::new(theirs.clone(), seen.ring(Direction::FromCreator));
        assert_eq!(p.write(b"hello over a memfd").unwrap(), 18);
        let mut out = [0u8; 18];
        assert_eq!(c.read(&mut out).unwrap(), 18);
        assert_eq!(&out, b"hello over a memfd");
    }

    #[test]
    fn an_offer_is_checked_before_it_is_mapped() {
        let layout = Layout::new(1 << 16).unwrap();
        let (_mine, fd) = MappedSegment::create(&layout).unwrap();
        let len = layout.total_len() as u64;
        let e = MappedSegment::open(&fd, len + 4096).unwrap_err();
        assert!(e.contains("holds"), "{e}");
        let e = MappedSegment::open(&fd, MAX_SEGMENT + 1).unwrap_err();
        assert!(e.contains("more than"), "{e}");
        // Not sealed.
        let bare = memfd_create(c"t", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
        nix::unistd::ftruncate(&bare, len as i64).unwrap();
        let e = MappedSegment::open(&bare, len).unwrap_err();
        assert!(e.contains("lacks seals"), "{e}");
        // Not a memfd at all.
        let file: OwnedFd = std::fs::File::open("/proc/self/stat").unwrap().into();
        let e = MappedSegment::open(&file, len).unwrap_err();
        assert!(e.contains("not a sealed memfd"), "{e}");
        // Sealed, right length, garbage header.
        let junk = memfd_create(c"j", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
        nix::unistd::ftruncate(&junk, len as i64).unwrap();
        nix::unistd::write(&junk, &[0xa5; 64]).unwrap();
        fcntl(&junk, FcntlArg::F_ADD_SEALS(REQUIRED_SEALS)).unwrap();
        let e = MappedSegment::open(&junk, len).unwrap_err();
        assert!(e.contains("header"), "{e}");
    }
}
