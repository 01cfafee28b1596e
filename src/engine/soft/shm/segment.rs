//! One shared segment: its layout, the check of a layout a peer wrote, and
//! the only ways this process touches the segment's memory.
//!
//! # Layout (layout version 1)
//!
//! All integers are in the host's byte order (both ends run on one host).
//! Offsets are from the start of the segment.
//!
//! | bytes | what |
//! |---|---|
//! | `0..64` | header: see below |
//! | `64..256` | control block of ring [`Direction::FromCreator`] |
//! | `256..448` | control block of ring [`Direction::ToCreator`] |
//! | `data offset..+capacity` | each ring's data area, where its header says |
//!
//! The header:
//!
//! | bytes | field |
//! |---|---|
//! | `0..8` | [`MAGIC`] |
//! | `8..12` | layout version ([`LAYOUT_VERSION`]) |
//! | `12..16` | reserved, zero |
//! | `16..24` | total length of the segment in bytes |
//! | `24..32`, `32..40` | ring `FromCreator`: data offset, capacity |
//! | `40..48`, `48..56` | ring `ToCreator`: data offset, capacity |
//! | `56..64` | reserved, zero |
//!
//! A control block is three 64-byte cache lines, so that the two sides
//! never write the same line on the fast path:
//!
//! | bytes | field | written by |
//! |---|---|---|
//! | `0..8` | `tail: AtomicU64`, bytes ever written (free running) | producer |
//! | `64..72` | `head: AtomicU64`, bytes ever consumed (free running) | consumer |
//! | `128..132` | consumer-sleeping flag, `AtomicU32` | consumer (producer clears it when it wakes the consumer) |
//! | `132..136` | producer-sleeping flag, `AtomicU32` | producer (consumer clears it when it wakes the producer) |
//!
//! Data areas are aligned to 64 bytes, lie after the control blocks, do
//! not overlap, and have capacities that are powers of two in
//! [`MIN_CAPACITY`]`..=`[`MAX_CAPACITY`], so that a free-running index
//! maps to a byte of the area by masking. [`Layout::new`] puts them on
//! page boundaries from [`DATA_START`] on; [`Layout::validate`] accepts any
//! placement that keeps the rules.
//!
//! # Touching shared memory
//!
//! The peer process may write any byte of the segment at any time. So no
//! Rust reference to the segment's plain bytes ever exists in this process
//! (a `&[u8]` promises that nothing changes the bytes while it lives, and
//! the peer makes no such promise). Every access goes through
//! [`SharedRegion`]: atomics for the control words, and copies for
//! everything else, done with relaxed atomic loads and stores of aligned
//! 8-byte words (single bytes at unaligned ends). An atomic access racing
//! with the peer's writes returns some value instead of being undefined
//! behaviour; a value the peer may have changed is checked before use
//! (the header once, by [`Layout::validate`] on a private copy; the ring
//! indices on every load, by the ring).

#[cfg(any(test, feature = "hooks"))]
use std::alloc::Layout as AllocLayout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// The first eight bytes of every segment.
pub(crate) const MAGIC: [u8; 8] = *b"psmrshm\0";

/// The version of the layout this module reads and writes.
pub(crate) const LAYOUT_VERSION: u32 = 1;

/// A cache line, the unit of separation between what the two sides write.
pub(crate) const LINE: usize = 64;

/// Length of the header.
pub(crate) const HEADER_LEN: usize = 64;

/// Length of one control block.
pub(crate) const CONTROL_LEN: usize = 3 * LINE;

/// Where the control blocks end: data areas start at or after this.
pub(crate) const CONTROL_END: usize = HEADER_LEN + 2 * CONTROL_LEN;

/// Alignment of a data area.
pub(crate) const DATA_ALIGN: usize = LINE;

/// Where [`Layout::new`] puts the first data area (a page boundary).
pub(crate) const DATA_START: usize = 4096;

/// The smallest ring capacity.
pub(crate) const MIN_CAPACITY: usize = 64;

/// The largest ring capacity (1 GiB).
pub(crate) const MAX_CAPACITY: usize = 1 << 30;

// Header fields.
const H_VERSION: usize = 8;
const H_RESERVED: usize = 12;
const H_TOTAL_LEN: usize = 16;
const H_RINGS: usize = 24;
const H_RESERVED_END: usize = 56;

// Control block fields, from the start of the block.
const C_TAIL: usize = 0;
const C_HEAD: usize = LINE;
const C_CONSUMER_SLEEPING: usize = 2 * LINE;
const C_PRODUCER_SLEEPING: usize = 2 * LINE + 4;

/// One direction of a segment. The side that creates the segment
/// produces into `FromCreator` and consumes from `ToCreator`; the side
/// that opens it does the opposite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// Bytes the creator sends.
    FromCreator = 0,
    /// Bytes the creator receives.
    ToCreator = 1,
}

impl Direction {
    /// Both directions, in header order.
    pub(crate) const BOTH: [Direction; 2] = [Direction::FromCreator, Direction::ToCreator];

    fn index(self) -> usize {
        self as usize
    }
}

/// Where one ring lives in a segment: its control block and data area.
///
/// Only a [`Layout`] makes one, so its data area is aligned, in bounds and
/// of a power-of-two capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingArea {
    control: usize,
    data: usize,
    capacity: usize,
}

impl RingArea {
    /// Offset of the control block.
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn control_offset(&self) -> usize {
        self.control
    }

    /// Offset of the data area.
    pub(crate) fn data_offset(&self) -> usize {
        self.data
    }

    /// Bytes the data area holds (a power of two).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Offset of the producer index.
    pub(crate) fn tail_offset(&self) -> usize {
        self.control + C_TAIL
    }

    /// Offset of the consumer index.
    pub(crate) fn head_offset(&self) -> usize {
        self.control + C_HEAD
    }

    /// Offset of the consumer-sleeping flag.
    pub(crate) fn consumer_sleeping_offset(&self) -> usize {
        self.control + C_CONSUMER_SLEEPING
    }

    /// Offset of the producer-sleeping flag.
    pub(crate) fn producer_sleeping_offset(&self) -> usize {
        self.control + C_PRODUCER_SLEEPING
    }

    /// One past the last byte the ring uses.
    pub(crate) fn end(&self) -> usize {
        self.data + self.capacity
    }
}

/// What is wrong with a segment's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LayoutError {
    /// Fewer header bytes than a header.
    #[error("shared segment header truncated: {len} bytes, {HEADER_LEN} needed")]
    HeaderTruncated {
        /// Bytes given.
        len: usize,
    },
    /// The first eight bytes are not [`MAGIC`].
    #[error("not a psmrail shared segment: magic {found:02x?}")]
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
    /// A layout version this side does not know.
    #[error("shared segment layout version {found}, only {LAYOUT_VERSION} is known")]
    Version {
        /// The version found.
        found: u32,
    },
    /// A reserved header field is not zero.
    #[error("shared segment header: reserved field at byte {offset} is {value:#x}, not zero")]
    Reserved {
        /// Its offset in the header.
        offset: usize,
        /// Its value.
        value: u64,
    },
    /// The header's total length is not the segment's length.
    #[error("shared segment header says {header} bytes, the segment has {segment}")]
    Length {
        /// The header's total length.
        header: u64,
        /// The segment's actual length.
        segment: usize,
    },
    /// A capacity that is not a power of two in the allowed range.
    #[error(
        "ring {direction:?}: capacity {capacity} is not a power of two in \
         [{MIN_CAPACITY}, {MAX_CAPACITY}]"
    )]
    Capacity {
        /// The ring.
        direction: Direction,
        /// Its capacity.
        capacity: u64,
    },
    /// A data area that is not aligned.
    #[error("ring {direction:?}: data area at byte {offset} is not aligned to {DATA_ALIGN} bytes")]
    Misaligned {
        /// The ring.
        direction: Direction,
        /// Its data offset.
        offset: u64,
    },
    /// A data area that starts inside the header or the control blocks.
    #[error(
        "ring {direction:?}: data area at byte {offset} overlaps the header and control \
         blocks (bytes 0..{CONTROL_END})"
    )]
    OverlapsControl {
        /// The ring.
        direction: Direction,
        /// Its data offset.
        offset: u64,
    },
    /// A data area that ends beyond the segment.
    #[error(
        "ring {direction:?}: data area {offset}..{offset}+{capacity} ends beyond the \
         segment's {len} bytes"
    )]
    OutOfBounds {
        /// The ring.
        direction: Direction,
        /// Its data offset.
        offset: u64,
        /// Its capacity.
        capacity: u64,
        /// The segment's length.
        len: usize,
    },
    /// The two data areas overlap.
    #[error(
        "the rings' data areas overlap: {from_offset}..+{from_capacity} and \
         {to_offset}..+{to_capacity}"
    )]
    Overlap {
        /// `FromCreator`'s data offset.
        from_offset: u64,
        /// Its capacity.
        from_capacity: u64,
        /// `ToCreator`'s data offset.
        to_offset: u64,
        /// Its capacity.
        to_capacity: u64,
    },
}

/// The layout of one segment: its length and where its two rings live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    total_len: usize,
    rings: [RingArea; 2],
}

/// Control block offsets, by direction.
const CONTROL: [usize; 2] = [HEADER_LEN, HEADER_LEN + CONTROL_LEN];

fn capacity_ok(capacity: u64) -> bool {
    capacity.is_power_of_two() && (MIN_CAPACITY as u64..=MAX_CAPACITY as u64).contains(&capacity)
}

impl Layout {
    /// A segment with `capacity` bytes in each direction.
    pub(crate) fn new(capacity: usize) -> Result<Layout, LayoutError> {
        Layout::with_capacities(capacity, capacity)
    }

    /// A segment with `from_creator` bytes in ring
    /// [`Direction::FromCreator`] and `to_creator` in the other. The data
    /// areas follow each other from [`DATA_START`] on.
    pub(crate) fn with_capacities(
        from_creator: usize,
        to_creator: usize,
    ) -> Result<Layout, LayoutError> {
        for (direction, capacity) in Direction::BOTH.into_iter().zip([from_creator, to_creator]) {
            if !capacity_ok(capacity as u64) {
                return Err(LayoutError::Capacity {
                    direction,
                    capacity: capacity as u64,
                });
            }
        }
        // Both at most 2^30: no overflow.
        let to_data = DATA_START + from_creator;
        Ok(Layout {
            total_len: to_data + to_creator,
            rings: [
                RingArea {
                    control: CONTROL[0],
                    data: DATA_START,
                    capacity: from_creator,
                },
                RingArea {
                    control: CONTROL[1],
                    data: to_data,
                    capacity: to_creator,
                },
            ],
        })
    }

    /// The segment's length in bytes.
    pub(crate) fn total_len(&self) -> usize {
        self.total_len
    }

    /// Where the ring of `direction` lives.
    pub(crate) fn ring(&self, direction: Direction) -> RingArea {
        self.rings[direction.index()]
    }

    /// The header that describes this layout.
    pub(crate) fn encode_header(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[H_VERSION..H_VERSION + 4].copy_from_slice(&LAYOUT_VERSION.to_ne_bytes());
        put_u64(&mut h, H_TOTAL_LEN, self.total_len as u64);
        for (i, ring) in self.rings.iter().enumerate() {
            put_u64(&mut h, H_RINGS + 16 * i, ring.data as u64);
            put_u64(&mut h, H_RINGS + 16 * i + 8, ring.capacity as u64);
        }
        h
    }

    /// Checks a header read from a segment of `segment_len` bytes (the
    /// length of the mapping, which the peer cannot change once sealed),
    /// and gives the layout it describes.
    ///
    /// `header` must be a private copy ([`Layout::read`] makes one): once
    /// validated, the layout is this side's own and the header in shared
    /// memory is never looked at again, so a peer that rewrites it later
    /// changes nothing.
    pub(crate) fn validate(header: &[u8], segment_len: usize) -> Result<Layout, LayoutError> {
        let Some(h) = header.get(..HEADER_LEN) else {
            return Err(LayoutError::HeaderTruncated { len: header.len() });
        };
        let mut found = [0u8; 8];
        found.copy_from_slice(&h[..8]);
        if found != MAGIC {
            return Err(LayoutError::BadMagic { found });
        }
        let version = get_u32(h, H_VERSION);
        if version != LAYOUT_VERSION {
            return Err(LayoutError::Version { found: version });
        }
        for (offset, value) in [
            (H_RESERVED, u64::from(get_u32(h, H_RESERVED))),
            (H_RESERVED_END, get_u64(h, H_RESERVED_END)),
        ] {
            if value != 0 {
                return Err(LayoutError::Reserved { offset, value });
            }
        }
        let total = get_u64(h, H_TOTAL_LEN);
        if total != segment_len as u64 {
            return Err(LayoutError::Length {
                header: total,
                segment: segment_len,
            });
        }
        let mut rings = [RingArea {
            control: 0,
            data: 0,
            capacity: 0,
        }; 2];
        for direction in Direction::BOTH {
            let i = direction.index();
            let offset = get_u64(h, H_RINGS + 16 * i);
            let capacity = get_u64(h, H_RINGS + 16 * i + 8);
            if !capacity_ok(capacity) {
                return Err(LayoutError::Capacity {
                    direction,
                    capacity,
                });
            }
            if offset % DATA_ALIGN as u64 != 0 {
                return Err(LayoutError::Misaligned { direction, offset });
            }
            if offset < CONTROL_END as u64 {
                return Err(LayoutError::OverlapsControl { direction, offset });
            }
            // `capacity` is at most 2^30: the sum is exact unless `offset`
            // is absurd, and then it is out of bounds either way.
            if offset.saturating_add(capacity) > segment_len as u64 {
                return Err(LayoutError::OutOfBounds {
                    direction,
                    offset,
                    capacity,
                    len: segment_len,
                });
            }
            // Both fit in the segment's `usize` length.
            rings[i] = RingArea {
                control: CONTROL[i],
                data: offset as usize,
                capacity: capacity as usize,
            };
        }
        let [a, b] = rings;
        if a.data < b.end() && b.data < a.end() {
            return Err(LayoutError::Overlap {
                from_offset: a.data as u64,
                from_capacity: a.capacity as u64,
                to_offset: b.data as u64,
                to_capacity: b.capacity as u64,
            });
        }
        Ok(Layout {
            total_len: segment_len,
            rings,
        })
    }

    /// Copies the header out of `region` and validates it against the
    /// region's length (see [`Layout::validate`]).
    pub(crate) fn read(region: &impl SharedRegion) -> Result<Layout, LayoutError> {
        if region.len() < HEADER_LEN {
            return Err(LayoutError::HeaderTruncated { len: region.len() });
        }
        let mut header = [0u8; HEADER_LEN];
        region.read_into(0, &mut header);
        Layout::validate(&header, region.len())
    }

    /// Prepares a new segment: zeroes both control blocks (indices at zero,
    /// nobody sleeping) and writes the header. Called by the creator before
    /// the peer can see the segment; a region of another length is an
    /// error.
    pub(crate) fn init(&self, region: &impl SharedRegion) -> Result<(), LayoutError> {
        if region.len() != self.total_len {
            return Err(LayoutError::Length {
                header: self.total_len as u64,
                segment: region.len(),
            });
        }
        region.write_from(HEADER_LEN, &[0u8; CONTROL_END - HEADER_LEN]);
        region.write_from(0, &self.encode_header());
        Ok(())
    }
}

fn put_u64(h: &mut [u8], at: usize, v: u64) {
    h[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get_u64(h: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    u64::from_ne_bytes(b)
}

fn get_u32(h: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&h[at..at + 4]);
    u32::from_ne_bytes(b)
}

/// Memory shared with a peer process, reached only through atomics and
/// copies (see the module docs).
///
/// Offsets are from the start of the region. Every method panics when
/// asked for bytes beyond [`len`](SharedRegion::len) or for a misaligned
/// atomic: offsets come from a validated [`Layout`] and the ring's own
/// masked indices, never from the peer, so that is a bug on this side.
pub(crate) trait SharedRegion {
    /// Length of the region in bytes.
    fn len(&self) -> usize;

    /// The 8-byte atomic at `offset` (a multiple of 8).
    fn atomic_u64(&self, offset: usize) -> &AtomicU64;

    /// The 4-byte atomic at `offset` (a multiple of 4).
    fn atomic_u32(&self, offset: usize) -> &AtomicU32;

    /// Copies `dst.len()` bytes from `offset` on into `dst`.
    fn read_into(&self, offset: usize, dst: &mut [u8]);

    /// Copies `src` into the region from `offset` on.
    fn write_from(&self, offset: usize, src: &[u8]);
}

impl<T: SharedRegion + ?Sized> SharedRegion for &T {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        (**self).atomic_u64(offset)
    }
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        (**self).atomic_u32(offset)
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) {
        (**self).read_into(offset, dst)
    }
    fn write_from(&self, offset: usize, src: &[u8]) {
        (**self).write_from(offset, src)
    }
}

impl<T: SharedRegion + ?Sized> SharedRegion for Arc<T> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        (**self).atomic_u64(offset)
    }
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        (**self).atomic_u32(offset)
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) {
        (**self).read_into(offset, dst)
    }
    fn write_from(&self, offset: usize, src: &[u8]) {
        (**self).write_from(offset, src)
    }
}

/// A region at a raw address: the accessors of [`SharedRegion`] over
/// memory someone else owns (a heap block in [`HeapRegion`], a shared
/// mapping in the edge). Bounds are checked on every access.
#[derive(Debug)]
pub(crate) struct RawRegion {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `RawRegion` is an address and a length; every access through
// it is an atomic operation (the copies included), which any thread may
// perform concurrently with any other, or (long copies on x86_64) a
// volatile one of bytes the ring protocol gives one side at a time.
unsafe impl Send for RawRegion {}
// SAFETY: as for `Send`: `&RawRegion` gives only atomic (and volatile) access.
unsafe impl Sync for RawRegion {}

impl RawRegion {
    /// The region of `len` bytes at `base`.
    ///
    /// # Panics
    ///
    /// When `base` is not aligned to [`LINE`].
    ///
    /// # Safety
    ///
    /// `base` is aligned to [`LINE`] and valid for reads and writes of
    /// `len` bytes for as long as the `RawRegion` lives, and no Rust
    /// reference to those bytes (other than to atomics) exists meanwhile.
    pub(crate) unsafe fn new(base: NonNull<u8>, len: usize) -> RawRegion {
        // Checked even in release builds: the atomics' alignment rests on
        // it, and it costs nothing after construction.
        assert_eq!(
            base.as_ptr() as usize % LINE,
            0,
            "a shared region must be aligned to {LINE} bytes"
        );
        RawRegion { base, len }
    }

    /// The address of `offset`, after checking that `len` bytes from
    /// there are in the region.
    #[inline]
    #[track_caller]
    fn at(&self, offset: usize, len: usize) -> *mut u8 {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => out_of_bounds(offset, len, self.len),
        }
        // SAFETY: `offset + len <= self.len`, so the result is within (or
        // one past) the block `new`'s contract makes valid.
        unsafe { self.base.as_ptr().add(offset) }
    }
}

#[cold]
#[track_caller]
fn out_of_bounds(offset: usize, len: usize, region: usize) -> ! {
    panic!("shared region access {offset}..+{len} beyond its {region} bytes")
}

impl SharedRegion for RawRegion {
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert_eq!(offset % 8, 0, "misaligned 8-byte atomic at {offset}");
        let p = self.at(offset, 8);
        // SAFETY: in bounds (`at`), aligned (the base is aligned to LINE,
        // the offset to 8), valid while `self` lives (`new`'s contract);
        // `AtomicU64` has the layout of `u64`, and atomic access is what
        // memory shared with another process may be given.
        unsafe { &*p.cast::<AtomicU64>() }
    }

    #[inline]
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert_eq!(offset % 4, 0, "misaligned 4-byte atomic at {offset}");
        let p = self.at(offset, 4);
        // SAFETY: as in `atomic_u64`, for 4 bytes aligned to 4.
        unsafe { &*p.cast::<AtomicU32>() }
    }

    #[inline]
    fn read_into(&self, offset: usize, dst: &mut [u8]) {
        let p = self.at(offset, dst.len());
        // SAFETY: `dst.len()` bytes from `p` are in the region (`at`).
        unsafe { copy_from_shared(p, dst) }
    }

    #[inline]
    fn write_from(&self, offset: usize, src: &[u8]) {
        let p = self.at(offset, src.len());
        // SAFETY: `src.len()` bytes from `p` are in the region (`at`).
        unsafe { copy_to_shared(src, p) }
    }
}

/// Bytes from `p` to the next 8-byte boundary, at most `len`.
#[inline]
fn lead(p: *const u8, len: usize) -> usize {
    ((p as usize).wrapping_neg() & 7).min(len)
}

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`: relaxed
/// atomic loads of the aligned 8-byte words inside the range, single bytes
/// at its ends (on x86_64, copies of [`WIDE_MIN`] bytes and more move in
/// volatile 16-byte vectors instead: `wide`). Bytes outside the range are
/// never touched (the peer may be writing them).
///
/// # Safety
///
/// `src` is valid for reads of `dst.len()` bytes, which are accessed only
/// atomically or volatilely (or by another process) while this runs.
#[inline]
unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if dst.len() >= WIDE_MIN {
        // SAFETY: the caller's promise, passed on.
        unsafe { wide::copy_from_shared(src, dst) };
        return;
    }
    let lead = lead(src, dst.len());
    let (first, rest) = dst.split_at_mut(lead);
    for (i, b) in first.iter_mut().enumerate() {
        // SAFETY: `i < lead <= dst.len()`: in the range the caller vouches
        // for; any address is aligned for a byte.
        *b = unsafe { (*src.add(i).cast::<AtomicU8>()).load(Ordering::Relaxed) };
    }
    // SAFETY: `lead <= dst.len()`.
    let mut p = unsafe { src.add(lead) };
    let mut words = rest.chunks_exact_mut(8);
    for chunk in &mut words {
        // SAFETY: `p` is 8-aligned (after `lead`) and the 8 bytes from it
        // are in the range (one `chunk` of it).
        let w = unsafe { (*p.cast::<AtomicU64>()).load(Ordering::Relaxed) };
        chunk.copy_from_slice(&w.to_ne_bytes());
        // SAFETY: at most one past the end of the range.
        p = unsafe { p.add(8) };
    }
    for (i, b) in words.into_remainder().iter_mut().enumerate() {
        // SAFETY: the remainder's bytes are the range's last ones.
        *b = unsafe { (*p.add(i).cast::<AtomicU8>()).load(Ordering::Relaxed) };
    }
}

/// Copies `src` into shared memory at `dst`, as [`copy_from_shared`] reads.
///
/// # Safety
///
/// `dst` is valid for writes of `src.len()` bytes, which are accessed only
/// atomically (or by another process) while this runs.
#[inline]
unsafe fn copy_to_shared(src: &[u8], dst: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= WIDE_MIN {
        // SAFETY: the caller's promise, passed on.
        unsafe { wide::copy_to_shared(src, dst) };
        return;
    }
    let lead = lead(dst, src.len());
    let (first, rest) = src.split_at(lead);
    for (i, &b) in first.iter().enumerate() {
        // SAFETY: `i < lead <= src.len()`: in the range the caller vouches
        // for.
        unsafe { (*dst.add(i).cast::<AtomicU8>()).store(b, Ordering::Relaxed) };
    }
    // SAFETY: `lead <= src.len()`.
    let mut p = unsafe { dst.add(lead) };
    let mut words = rest.chunks_exact(8);
    for chunk in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        // SAFETY: `p` is 8-aligned and the 8 bytes from it are in range.
        unsafe { (*p.cast::<AtomicU64>()).store(u64::from_ne_bytes(w), Ordering::Relaxed) };
        // SAFETY: at most one past the end of the range.
        p = unsafe { p.add(8) };
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        // SAFETY: the remainder's bytes are the range's last ones.
        unsafe { (*p.add(i).cast::<AtomicU8>()).store(b, Ordering::Relaxed) };
    }
}

/// Copies at least this long go 16 bytes at a time (x86_64).
#[cfg(target_arch = "x86_64")]
const WIDE_MIN: usize = 64;

/// Long copies to and from shared memory as volatile 16-byte accesses
/// (SSE2, which every x86_64 has): the aligned middle of the range moves
/// in whole vectors, each one load or store the compiler may neither
/// split, merge, repeat nor drop, the ends byte by byte (atomically, as
/// the short copies do). Volatile, not atomic: a peer writing the same
/// bytes meanwhile leaves garbage in the copy, never a torn index (the
/// indices are atomics of their own) nor an access outside the range.
/// About three times the rate of the 8-byte atomic loop.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::__m128i;
    use std::sync::atomic::{AtomicU8, Ordering};

    /// Bytes from `p` to the next 16-byte boundary, at most `len`.
    #[inline]
    fn lead16(p: *const u8, len: usize) -> usize {
        ((p as usize).wrapping_neg() & 15).min(len)
    }

    /// As `super::copy_from_shared`.
    ///
    /// # Safety
    /// As `super::copy_from_shared`.
    #[inline]
    pub(super) unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
        let lead = lead16(src, dst.len());
        let (first, rest) = dst.split_at_mut(lead);
        for (i, b) in first.iter_mut().enumerate() {
            // SAFETY: within the range the caller vouches for.
            *b = unsafe { (*src.add(i).cast::<AtomicU8>()).load(Ordering::Relaxed) };
        }
        // SAFETY: `lead <= dst.len()`.
        let mut p = unsafe { src.add(lead) };
        let mut vectors = rest.chunks_exact_mut(16);
        for chunk in &mut vectors {
            // SAFETY: `p` is 16-aligned (after `lead`) and the 16 bytes
            // from it are in the range; the store goes to our own slice,
            // for which `write_unaligned` needs no alignment.
            unsafe {
                let v = std::ptr::read_volatile(p.cast::<__m128i>());
                std::ptr::write_unaligned(chunk.as_mut_ptr().cast::<__m128i>(), v);
                p = p.add(16);
            }
        }
        for (i, b) in vectors.into_remainder().iter_mut().enumerate() {
            // SAFETY: the remainder's bytes are the range's last ones.
            *b = unsafe { (*p.add(i).cast::<AtomicU8>()).load(Ordering::Relaxed) };
        }
    }

    /// As `super::copy_to_shared`.
    ///
    /// # Safety
    /// As `super::copy_to_shared`.
    #[inline]
    pub(super) unsafe fn copy_to_shared(src: &[u8], dst: *mut u8) {
        let lead = lead16(dst, src.len());
        let (first, rest) = src.split_at(lead);
        for (i, &b) in first.iter().enumerate() {
            // SAFETY: within the range the caller vouches for.
            unsafe { (*dst.add(i).cast::<AtomicU8>()).store(b, Ordering::Relaxed) };
        }
        // SAFETY: `lead <= src.len()`.
        let mut p = unsafe { dst.add(lead) };
        let mut vectors = rest.chunks_exact(16);
        for chunk in &mut vectors {
            // SAFETY: the load reads 16 bytes of our own slice (no
            // alignment needed); `p` is 16-aligned and the 16 bytes from
            // it are in the range.
            unsafe {
                let v = std::ptr::read_unaligned(chunk.as_ptr().cast::<__m128i>());
                std::ptr::write_volatile(p.cast::<__m128i>(), v);
                p = p.add(16);
            }
        }
        for (i, &b) in vectors.remainder().iter().enumerate() {
            // SAFETY: the remainder's bytes are the range's last ones.
            unsafe { (*p.add(i).cast::<AtomicU8>()).store(b, Ordering::Relaxed) };
        }
    }
}

/// A region on this process's heap: zeroed, aligned to [`LINE`]. The
/// model of a shared mapping, for tests and fuzzing (both "processes" are
/// this one).
#[cfg(any(test, feature = "hooks"))]
#[derive(Debug)]
pub(crate) struct HeapRegion {
    raw: RawRegion,
    alloc: AllocLayout,
}

#[cfg(any(test, feature = "hooks"))]
impl HeapRegion {
    /// A zeroed region of `len` bytes.
    pub(crate) fn new(len: usize) -> HeapRegion {
        let alloc = AllocLayout::from_size_align(len.max(1), LINE)
            .expect("a shared region's length fits the address space");
        // SAFETY: `alloc` has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(alloc) };
        let Some(base) = NonNull::new(base) else {
            std::alloc::handle_alloc_error(alloc)
        };
        // SAFETY: a fresh block of at least `len` bytes aligned to LINE,
        // owned by the new value and freed only in its `drop`, after the
        // `RawRegion` is gone; nothing else refers to it.
        let raw = unsafe { RawRegion::new(base, len) };
        HeapRegion { raw, alloc }
    }

    /// A region laid out as `layout` says, initialised ([`Layout::init`]).
    pub(crate) fn with_layout(layout: &Layout) -> HeapRegion {
        let region = HeapRegion::new(layout.total_len());
        layout
            .init(&region)
            .expect("the region has the layout's length");
        region
    }
}

#[cfg(any(test, feature = "hooks"))]
impl Drop for HeapRegion {
    fn drop(&mut self) {
        // SAFETY: the block came from `alloc_zeroed` with `self.alloc` and
        // is freed once; no reference into it outlives `&self`.
        unsafe { std::alloc::dealloc(self.raw.base.as_ptr(), self.alloc) }
    }
}

#[cfg(any(test, feature = "hooks"))]
impl SharedRegion for HeapRegion {
    fn len(&self) -> usize {
        self.raw.len()
    }
    #[inline]
    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        self.raw.atomic_u64(offset)
    }
    #[inline]
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.raw.atomic_u32(offset)
    }
    #[inline]
    fn read_into(&self, offset: usize, dst: &mut [u8]) {
        self.raw.read_into(offset, dst)
    }
    #[inline]
    fn write_from(&self, offset: usize, src: &[u8]) {
        self.raw.write_from(offset, src)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fuzzing::assert_layout_sound as assert_sound;
    use super::*;
    use proptest::prelude::*;

    fn valid_header() -> [u8; HEADER_LEN] {
        Layout::new(4096).unwrap().encode_header()
    }

    fn with_u64(mut h: [u8; HEADER_LEN], at: usize, v: u64) -> [u8; HEADER_LEN] {
        put_u64(&mut h, at, v);
        h
    }

    #[test]
    fn new_layouts_round_trip_through_their_header() {
        for (a, b) in [(64, 64), (4096, 4096), (64, 1 << 20), (MAX_CAPACITY, 64)] {
            let l = Layout::with_capacities(a, b).unwrap();
            assert_eq!(l.total_len(), DATA_START + a + b);
            assert_eq!(l.ring(Direction::FromCreator).data_offset() % 4096, 0);
            assert_sound(&l, l.total_len());
            assert_eq!(Layout::validate(&l.encode_header(), l.total_len()), Ok(l));
        }
    }

    #[test]
    fn new_rejects_bad_capacities() {
        for c in [0, 1, 32, 63, 65, 100, 3 << 10, MAX_CAPACITY * 2] {
            assert_eq!(
                Layout::new(c),
                Err(LayoutError::Capacity {
                    direction: Direction::FromCreator,
                    capacity: c as u64
                })
            );
        }
        assert!(matches!(
            Layout::with_capacities(64, 96),
            Err(LayoutError::Capacity {
                direction: Direction::ToCreator,
                ..
            })
        ));
    }

    #[test]
    fn control_fields_sit_on_their_own_lines() {
        let l = Layout::new(64).unwrap();
        let a = l.ring(Direction::FromCreator);
        let b = l.ring(Direction::ToCreator);
        let lines = |r: RingArea| {
            [
                r.tail_offset() / LINE,
                r.head_offset() / LINE,
                r.consumer_sleeping_offset() / LINE,
            ]
        };
        let mut all: Vec<usize> = lines(a).into_iter().chain(lines(b)).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6);
        assert_eq!(
            a.consumer_sleeping_offset() / LINE,
            a.producer_sleeping_offset() / LINE
        );
        assert_eq!(a.tail_offset() % 8, 0);
        assert_eq!(b.producer_sleeping_offset() % 4, 0);
        assert!(b.producer_sleeping_offset() + 4 <= CONTROL_END);
    }

    #[test]
    fn validate_names_what_is_wrong() {
        let len = Layout::new(4096).unwrap().total_len();
        let h = valid_header();
        let check = |h: &[u8], len: usize, want: LayoutError| {
            assert_eq!(Layout::validate(h, len), Err(want));
            assert!(!want.to_string().is_empty());
        };
        check(&h[..63], len, LayoutError::HeaderTruncated { len: 63 });
        let mut bad = h;
        bad[0] ^= 1;
        let mut found = MAGIC;
        found[0] ^= 1;
        check(&bad, len, LayoutError::BadMagic { found });
        let mut bad = h;
        bad[H_VERSION..H_VERSION + 4].copy_from_slice(&2u32.to_ne_bytes());
        check(&bad, len, LayoutError::Version { found: 2 });
        let mut bad = h;
        bad[H_RESERVED] = 1;
        check(
            &bad,
            len,
            LayoutError::Reserved {
                offset: H_RESERVED,
                value: 1,
            },
        );
        check(
            &with_u64(h, H_RESERVED_END, 7),
            len,
            LayoutError::Reserved {
                offset: H_RESERVED_END,
                value: 7,
            },
        );
        check(
            &h,
            len + 64,
            LayoutError::Length {
                header: len as u64,
                segment: len + 64,
            },
        );
        let from = Direction::FromCreator;
        let to = Direction::ToCreator;
        for cap in [0, 32, 96, 1 << 31, u64::MAX] {
            check(
                &with_u64(h, H_RINGS + 24, cap),
                len,
                LayoutError::Capacity {
                    direction: to,
                    capacity: cap,
                },
            );
        }
        check(
            &with_u64(h, H_RINGS, 4096 + 8),
            len,
            LayoutError::Misaligned {
                direction: from,
                offset: 4104,
            },
        );
        check(
            &with_u64(h, H_RINGS, 384),
            len,
            LayoutError::OverlapsControl {
                direction: from,
                offset: 384,
            },
        );
        for offset in [4096 + 4096 + 64, u64::MAX - 63] {
            check(
                &with_u64(h, H_RINGS + 16, offset),
                len,
                LayoutError::OutOfBounds {
                    direction: to,
                    offset,
                    capacity: 4096,
                    len,
                },
            );
        }
        check(
            &with_u64(h, H_RINGS + 16, 4096 + 2048),
            len,
            LayoutError::Overlap {
                from_offset: 4096,
                from_capacity: 4096,
                to_offset: 6144,
                to_capacity: 4096,
            },
        );
        // The same area for both directions.
        check(
            &with_u64(h, H_RINGS + 16, 4096),
            len,
            LayoutError::Overlap {
                from_offset: 4096,
                from_capacity: 4096,
                to_offset: 4096,
                to_capacity: 4096,
            },
        );
    }

    #[test]
    fn validate_accepts_other_placements() {
        // Rings swapped, small, right after the control blocks, with gaps.
        let mut h = valid_header();
        let len = 8192 + 4096;
        put_u64(&mut h, H_TOTAL_LEN, len as u64);
        put_u64(&mut h, H_RINGS, 8192);
        put_u64(&mut h, H_RINGS + 8, 4096);
        put_u64(&mut h, H_RINGS + 16, 512);
        put_u64(&mut h, H_RINGS + 24, 64);
        let l = Layout::validate(&h, len).unwrap();
        assert_sound(&l, len);
        assert_eq!(l.ring(Direction::ToCreator).data_offset(), 512);
        assert_eq!(l.ring(Direction::ToCreator).capacity(), 64);
        // Adjacent areas do not overlap.
        put_u64(&mut h, H_RINGS + 16, 8192 - 64);
        assert!(Layout::validate(&h, len).is_ok());
    }

    #[test]
    fn init_and_read_round_trip() {
        let l = Layout::new(64).unwrap();
        let r = HeapRegion::new(l.total_len());
        // Dirty control blocks are zeroed by `init`.
        r.write_from(0, &[0xff; CONTROL_END]);
        l.init(&r).unwrap();
        assert_eq!(Layout::read(&r), Ok(l));
        for d in Direction::BOTH {
            let a = l.ring(d);
            assert_eq!(r.atomic_u64(a.tail_offset()).load(Ordering::Relaxed), 0);
            assert_eq!(r.atomic_u64(a.head_offset()).load(Ordering::Relaxed), 0);
            assert_eq!(
                r.atomic_u32(a.consumer_sleeping_offset())
                    .load(Ordering::Relaxed),
                0
            );
        }
        let small = HeapRegion::new(l.total_len() - 64);
        assert!(matches!(l.init(&small), Err(LayoutError::Length { .. })));
        assert_eq!(
            Layout::read(&HeapRegion::new(10)),
            Err(LayoutError::HeaderTruncated { len: 10 })
        );
    }

    #[test]
    fn copies_at_every_alignment_and_length() {
        let r = HeapRegion::new(256);
        let src: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for offset in 0..24 {
            for len in 0..40 {
                r.write_from(0, &[0u8; 256]);
                r.write_from(offset, &src[..len]);
                let mut all = [0u8; 256];
                r.read_into(0, &mut all);
                assert_eq!(&all[offset..offset + len], &src[..len]);
                // Nothing outside the range was touched.
                assert!(all[..offset].iter().all(|&b| b == 0));
                assert!(all[offset + len..].iter().all(|&b| b == 0));
                let mut back = vec![0u8; len];
                r.read_into(offset, &mut back);
                assert_eq!(back, &src[..len]);
            }
        }
    }

    #[test]
    fn atomics_alias_the_copied_bytes() {
        let r = HeapRegion::new(128);
        r.atomic_u64(64)
            .store(0x0102_0304_0506_0708, Ordering::Relaxed);
        let mut b = [0u8; 8];
        r.read_into(64, &mut b);
        assert_eq!(u64::from_ne_bytes(b), 0x0102_0304_0506_0708);
        r.write_from(68, &7u32.to_ne_bytes());
        assert_eq!(r.atomic_u32(68).load(Ordering::Relaxed), 7);
    }

    #[test]
    #[should_panic(expected = "beyond its 128 bytes")]
    fn out_of_bounds_access_panics() {
        HeapRegion::new(128).read_into(120, &mut [0u8; 9]);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn misaligned_atomic_panics() {
        HeapRegion::new(128).atomic_u64(4);
    }

    #[test]
    #[should_panic(expected = "beyond its")]
    fn offset_overflow_panics() {
        HeapRegion::new(128).write_from(usize::MAX, &[1]);
    }

    /// A field to overwrite in a valid header.
    fn field() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0),
            Just(H_VERSION),
            Just(H_TOTAL_LEN),
            Just(H_RINGS),
            Just(H_RINGS + 8),
            Just(H_RINGS + 16),
            Just(H_RINGS + 24),
            Just(H_RESERVED_END),
        ]
    }

    /// A value likely to be near a boundary.
    fn value() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (0u32..40).prop_map(|s| 1u64 << s),
            (0u64..20_000).prop_map(|v| v & !63),
            (0u64..20_000),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any header bytes and segment length: a layout that keeps every
        /// rule, or an error; never a panic.
        #[test]
        fn any_header_is_checked(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
            len in 0usize..1 << 21,
        ) {
            if let Ok(l) = Layout::validate(&bytes, len) {
                assert_sound(&l, len);
            }
        }

        /// Valid headers with fields overwritten: the same.
        #[test]
        fn edited_headers_are_checked(
            cap in 6u32..16,
            edits in proptest::collection::vec((field(), value()), 0..5),
            len_delta in -20_000i64..20_000,
        ) {
            let l = Layout::new(1 << cap).unwrap();
            let mut h = l.encode_header();
            for (at, v) in edits {
                if at == H_VERSION {
                    h[at..at + 4].copy_from_slice(&(v as u32).to_ne_bytes());
                } else {
                    put_u64(&mut h, at, v);
                }
            }
            let len = (l.total_len() as i64 + len_delta).max(0) as usize;
            if let Ok(got) = Layout::validate(&h, len) {
                assert_sound(&got, len);
            }
            // The header's own length is what decides.
            let own = get_u64(&h, H_TOTAL_LEN).min(1 << 24) as usize;
            if let Ok(got) = Layout::validate(&h, own) {
                assert_sound(&got, own);
            }
        }
    }
}
