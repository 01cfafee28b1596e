//! The storage under an address vector: an append-only array of entries
//! that readers index without a lock.
//!
//! Every operation resolves its destination `fi_addr` to the engine's
//! [`PeerAddr`] (the 8-byte hot path), so reading must cost a few loads:
//! no lock, no hash. Entries are only ever appended (libfabric's
//! `fi_av_remove` is a no-op in the psm provider), which makes that easy:
//! the array grows in segments that never move (segment `k` holds
//! `BASE << k` entries), a writer fills an entry and then publishes the new
//! length with a release store, and a reader that sees an index below the
//! length it loaded (acquire) sees the entry's contents. One change follows
//! publication: an entry inserted without connecting
//! ([`Entry::Pending`]) becomes a connected peer at its first use, its peer
//! stored before its state (release), so a reader sees the pending entry
//! or the whole peer. Writers are serialized by the caller (the address
//! vector's insert lock).
//!
//! This module holds no sockets, clocks or engine: it is the sans-IO part of
//! the address vector, tested on its own (including from several threads).

use crate::engine::{Epid, PeerAddr};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

/// log2 of the first segment's size: 64 entries, the C default `count`.
const BASE_SHIFT: u32 = 6;
/// Number of segments: together they hold just under 2^32 entries.
const SEGMENTS: usize = 26;

/// Most entries an [`AvEntries`] can hold (`64 * (2^26 - 1)`, just under
/// 2^32, so every index fits the low half of a map `fi_addr`).
pub(crate) const MAX_ENTRIES: u64 = (1u64 << BASE_SHIFT) * ((1u64 << SEGMENTS) - 1);

/// What an entry holds once published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Connected: the engine's handle for the peer.
    Peer(Epid, PeerAddr),
    /// The insertion of this epid failed: a hole (table AVs keep them so
    /// indices stay those the caller counted).
    Hole(Epid),
    /// Inserted, not yet connected: the address vector connects at the
    /// entry's first use ([`AvEntries::connected`] then makes it a
    /// [`Peer`](Entry::Peer)).
    Pending(Epid),
}

/// [`Cell::state`] values.
const HOLE: u8 = 0;
const PEER: u8 = 1;
const PENDING: u8 = 2;

#[derive(Default)]
struct Cell {
    epid: AtomicU64,
    peer: AtomicU64,
    state: AtomicU8,
}

/// Append-only entries with lock-free reads (see the module docs).
pub(crate) struct AvEntries {
    segments: [OnceLock<Box<[Cell]>>; SEGMENTS],
    len: AtomicU64,
}

impl std::fmt::Debug for AvEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvEntries")
            .field("len", &self.len())
            .finish()
    }
}

/// Segment and offset of index `idx` (which must be below [`MAX_ENTRIES`]).
#[inline]
fn locate(idx: u64) -> (usize, usize) {
    let i = idx + (1 << BASE_SHIFT);
    let top = 63 - i.leading_zeros();
    let seg = (top - BASE_SHIFT) as usize;
    let off = (i - (1u64 << top)) as usize;
    (seg, off)
}

impl AvEntries {
    /// Empty; segments covering `capacity` entries (the AV's `count`
    /// hint) are allocated at once, the rest on demand.
    pub(crate) fn with_capacity(capacity: usize) -> AvEntries {
        let entries = AvEntries {
            segments: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicU64::new(0),
        };
        let want = (capacity as u64).min(MAX_ENTRIES);
        if want > 0 {
            let (last, _) = locate(want - 1);
            for seg in 0..=last {
                entries.segment(seg);
            }
        }
        entries
    }

    fn segment(&self, seg: usize) -> &[Cell] {
        self.segments[seg].get_or_init(|| {
            (0..(1usize << (BASE_SHIFT as usize + seg)))
                .map(|_| Cell::default())
                .collect()
        })
    }

    /// Number of published entries (holes included).
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// The entry at `idx`, `None` at or beyond the published length.
    #[inline]
    pub(crate) fn get(&self, idx: u64) -> Option<Entry> {
        if idx >= self.len() {
            return None;
        }
        let (seg, off) = locate(idx);
        // Published entries live in initialized segments: the writer
        // initialized it before the release store of `len` we acquired.
        let cell = self.segments[seg].get()?.get(off)?;
        // Acquire: a pending entry made a peer after publication stored
        // its peer before the state (release).
        let state = cell.state.load(Ordering::Acquire);
        let epid = Epid(cell.epid.load(Ordering::Relaxed));
        Some(match state {
            PEER => Entry::Peer(epid, PeerAddr(cell.peer.load(Ordering::Relaxed))),
            PENDING => Entry::Pending(epid),
            _ => Entry::Hole(epid),
        })
    }

    /// The peer at `idx` when that entry is connected: the hot path.
    #[inline]
    pub(crate) fn peer(&self, idx: u64) -> Option<PeerAddr> {
        match self.get(idx) {
            Some(Entry::Peer(_, p)) => Some(p),
            _ => None,
        }
    }

    /// Appends `entry` and returns its index; `None` when full.
    ///
    /// Callers serialize `push` (one writer at a time); readers may run
    /// concurrently.
    pub(crate) fn push(&self, entry: Entry) -> Option<u64> {
        let idx = self.len.load(Ordering::Relaxed);
        if idx >= MAX_ENTRIES {
            return None;
        }
        let (seg, off) = locate(idx);
        let cell = &self.segment(seg)[off];
        let (epid, peer, state) = match entry {
            Entry::Peer(e, p) => (e, p.0, PEER),
            Entry::Hole(e) => (e, 0, HOLE),
            Entry::Pending(e) => (e, 0, PENDING),
        };
        cell.epid.store(epid.0, Ordering::Relaxed);
        cell.peer.store(peer, Ordering::Relaxed);
        cell.state.store(state, Ordering::Relaxed);
        self.len.store(idx + 1, Ordering::Release);
        Some(idx)
    }

    /// Makes the [`Pending`](Entry::Pending) entry at `idx` a connected
    /// [`Peer`](Entry::Peer) with `peer`; whether it was pending (other
    /// entries are left as they are).
    ///
    /// Callers serialize it with [`push`](Self::push); readers may run
    /// concurrently and see either the pending entry or the whole peer.
    pub(crate) fn connected(&self, idx: u64, peer: PeerAddr) -> bool {
        if idx >= self.len() {
            return false;
        }
        let (seg, off) = locate(idx);
        let Some(cell) = self.segments[seg].get().and_then(|s| s.get(off)) else {
            return false;
        };
        if cell.state.load(Ordering::Relaxed) != PENDING {
            return false;
        }
        cell.peer.store(peer.0, Ordering::Relaxed);
        cell.state.store(PEER, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn locate_covers_segments_contiguously() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        assert_eq!(
            locate(MAX_ENTRIES - 1),
            (SEGMENTS - 1, (64 << (SEGMENTS - 1)) - 1)
        );
        // Every index maps into its segment's bounds, in order.
        let mut prev = None;
        for idx in 0..5000u64 {
            let (s, o) = locate(idx);
            assert!(o < 64 << s);
            if let Some((ps, po)) = prev {
                assert!((s == ps && o == po + 1) || (s == ps + 1 && o == 0));
            }
            prev = Some((s, o));
        }
    }

    #[test]
    fn push_get_and_holes() {
        let t = AvEntries::with_capacity(0);
        assert_eq!(t.get(0), None);
        for i in 0..300u64 {
            let e = if i % 3 == 1 {
                Entry::Hole(Epid(i))
            } else {
                Entry::Peer(Epid(i), PeerAddr(1000 + i))
            };
            assert_eq!(t.push(e), Some(i));
        }
        assert_eq!(t.len(), 300);
        assert_eq!(t.get(1), Some(Entry::Hole(Epid(1))));
        assert_eq!(t.peer(1), None);
        assert_eq!(t.peer(299), Some(PeerAddr(1299)));
        assert_eq!(t.get(300), None);
        assert_eq!(t.get(u64::MAX), None);
    }

    #[test]
    fn pending_entries_connect_once() {
        let t = AvEntries::with_capacity(0);
        assert!(!t.connected(0, PeerAddr(1)), "nothing there yet");
        t.push(Entry::Pending(Epid(7))).unwrap();
        t.push(Entry::Hole(Epid(8))).unwrap();
        t.push(Entry::Peer(Epid(9), PeerAddr(90))).unwrap();
        assert_eq!(t.get(0), Some(Entry::Pending(Epid(7))));
        assert_eq!(t.peer(0), None, "a pending entry has no peer yet");
        assert!(t.connected(0, PeerAddr(70)));
        assert_eq!(t.get(0), Some(Entry::Peer(Epid(7), PeerAddr(70))));
        assert_eq!(t.peer(0), Some(PeerAddr(70)));
        // Only pending entries change, and only once.
        assert!(!t.connected(0, PeerAddr(71)));
        assert!(!t.connected(1, PeerAddr(80)));
        assert!(!t.connected(2, PeerAddr(91)));
        assert_eq!(t.get(0), Some(Entry::Peer(Epid(7), PeerAddr(70))));
        assert_eq!(t.get(1), Some(Entry::Hole(Epid(8))));
        assert_eq!(t.get(2), Some(Entry::Peer(Epid(9), PeerAddr(90))));
        assert!(!t.connected(3, PeerAddr(1)));
    }

    #[test]
    fn readers_see_a_pending_entry_or_its_whole_peer() {
        let n = if cfg!(miri) { 200 } else { 5_000u64 };
        let t = Arc::new(AvEntries::with_capacity(0));
        for i in 0..n {
            t.push(Entry::Pending(Epid(i))).unwrap();
        }
        let reader = {
            let t = t.clone();
            std::thread::spawn(move || loop {
                let mut done = 0;
                for i in 0..n {
                    match t.get(i) {
                        Some(Entry::Pending(e)) => assert_eq!(e, Epid(i)),
                        Some(Entry::Peer(e, p)) => {
                            assert_eq!((e, p), (Epid(i), PeerAddr(!i)));
                            done += 1;
                        }
                        other => panic!("entry {i}: {other:?}"),
                    }
                }
                if done == n {
                    break;
                }
            })
        };
        for i in 0..n {
            assert!(t.connected(i, PeerAddr(!i)));
        }
        reader.join().unwrap();
    }

    #[test]
    fn capacity_preallocates() {
        let t = AvEntries::with_capacity(200);
        assert!(t.segments[0].get().is_some() && t.segments[1].get().is_some());
        assert!(t.segments[2].get().is_some());
        assert!(t.segments[3].get().is_none());
        // A huge hint is capped, never an overflow.
        let _ = locate(MAX_ENTRIES - 1);
    }

    #[test]
    fn readers_see_only_whole_entries() {
        let t = Arc::new(AvEntries::with_capacity(0));
        // Fewer under miri, which explores interleavings slowly (still
        // across several segments).
        let n = if cfg!(miri) { 300 } else { 20_000u64 };
        let reader = {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                while seen < n {
                    let len = t.len();
                    for i in seen..len {
                        assert_eq!(t.get(i), Some(Entry::Peer(Epid(i), PeerAddr(!i))));
                    }
                    seen = len;
                }
            })
        };
        for i in 0..n {
            t.push(Entry::Peer(Epid(i), PeerAddr(!i))).unwrap();
        }
        reader.join().unwrap();
    }
}
