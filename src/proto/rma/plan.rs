//! How an RMA operation is cut up: its parameters, the pairing of local
//! buffers with remote ranges into segments, chunking, and the choice
//! between the short (AM) and long (tagged MQ) protocols.

use crate::engine::EngineLimits;
use crate::{Error, ErrorKind, Result};

/// Chunks of one operation in flight at most, by default.
pub(crate) const DEFAULT_WINDOW: usize = 16;

/// The knobs of the RMA protocol for one domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RmaParams {
    /// Payload of one write chunk: the engine's `max_am_request`.
    pub(crate) write_chunk: usize,
    /// Payload of one read reply: the engine's `max_am_reply`.
    pub(crate) read_chunk: usize,
    /// Most unacknowledged chunks of one operation (at least 1).
    pub(crate) window: usize,
    /// Operations longer than this go long (when `tagged_rma`).
    pub(crate) long_threshold: usize,
    /// `FI_PSM_TAGGED_RMA`.
    pub(crate) tagged_rma: bool,
    /// Largest operation (PSM: `u32::MAX` bytes per message).
    pub(crate) max_message: u64,
}

impl RmaParams {
    /// The parameters for an engine with `limits`: chunks of the engine's short
    /// AM payload (the native engine caps it at the C provider's 2032 bytes,
    /// "the maximum that's actually working" in `prov/psm/src/psmx.h`; the soft
    /// engine carries 8128), the long threshold at the chunk as C chose it, and
    /// [`DEFAULT_WINDOW`].
    pub(crate) fn new(limits: &EngineLimits, tagged_rma: bool) -> Self {
        let write_chunk = limits.max_am_request.max(1);
        RmaParams {
            write_chunk,
            read_chunk: limits.max_am_reply.max(1),
            window: DEFAULT_WINDOW,
            long_threshold: write_chunk,
            tagged_rma,
            // The length field of a packet is 32 bits.
            max_message: limits.max_message.min(u64::from(u32::MAX)),
        }
    }
}

/// One remote range of an operation (`struct fi_rma_iov`, with the
/// address an offset into the region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RemoteIov {
    pub(crate) key: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// A piece of an operation that is contiguous on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Index of the local buffer.
    pub(crate) local: usize,
    /// Offset in that buffer.
    pub(crate) local_off: usize,
    pub(crate) len: usize,
    pub(crate) key: u64,
    pub(crate) remote_off: u64,
    /// Where the segment starts in the operation's bytes.
    pub(crate) op_off: u64,
}

/// Pairs local buffers of `local_lens` bytes with `remote` ranges, in
/// order, splitting wherever either side's boundary falls; empty pieces
/// are skipped. A 0-byte operation is one empty segment at the first
/// remote range (it still travels, as a 0-byte chunk, for its
/// acknowledgement and CQ data).
///
/// # Errors
/// `Inval` when the two sides' totals differ, no remote range is given,
/// or a remote range ends past 2^64; `MsgSize` above `max_message`.
pub(crate) fn pair(
    local_lens: &[usize],
    remote: &[RemoteIov],
    max_message: u64,
) -> Result<Vec<Segment>> {
    let first = remote
        .first()
        .ok_or_else(|| Error::new(ErrorKind::Inval, "RMA: no remote range (rma_iov) given"))?;
    let overflow = || Error::new(ErrorKind::Inval, "RMA: the lengths add up past 2^64");
    let local_total = local_lens
        .iter()
        .try_fold(0u64, |a, &l| a.checked_add(l as u64))
        .ok_or_else(overflow)?;
    let mut remote_total = 0u64;
    for (i, r) in remote.iter().enumerate() {
        if r.offset.checked_add(r.len).is_none() {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "RMA: remote range {i} ({} bytes at offset {:#x}) ends past 2^64",
                    r.len, r.offset
                ),
            ));
        }
        remote_total = remote_total.checked_add(r.len).ok_or_else(overflow)?;
    }
    if local_total != remote_total {
        return Err(Error::new(
            ErrorKind::Inval,
            format!("RMA: local buffers hold {local_total} bytes, remote ranges {remote_total}"),
        ));
    }
    if local_total > max_message {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!("RMA: {local_total} bytes exceed the largest operation ({max_message} bytes)"),
        ));
    }
    if local_total == 0 {
        return Ok(vec![Segment {
            local: 0,
            local_off: 0,
            len: 0,
            key: first.key,
            remote_off: first.offset,
            op_off: 0,
        }]);
    }
    let mut segs = Vec::new();
    let (mut li, mut loff) = (0usize, 0usize);
    let mut op_off = 0u64;
    for r in remote {
        let mut roff = 0u64;
        while roff < r.len {
            // Skip exhausted (or empty) local buffers; totals match, so one remains.
            while loff == local_lens[li] {
                li += 1;
                loff = 0;
            }
            let n = ((local_lens[li] - loff) as u64).min(r.len - roff) as usize;
            segs.push(Segment {
                local: li,
                local_off: loff,
                len: n,
                key: r.key,
                remote_off: r.offset + roff,
                op_off,
            });
            loff += n;
            roff += n as u64;
            op_off += n as u64;
        }
    }
    Ok(segs)
}

/// One chunk: `len` bytes of segment `seg` starting `off` into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) seg: usize,
    pub(crate) off: usize,
    pub(crate) len: usize,
    /// The operation's last chunk.
    pub(crate) last: bool,
}

/// The chunk at cursor `(seg, off)` of at most `chunk` bytes (chunks never
/// cross segments); `None` past the end.
pub(crate) fn chunk_at(segs: &[Segment], seg: usize, off: usize, chunk: usize) -> Option<Chunk> {
    let s = segs.get(seg)?;
    if off > s.len || (off == s.len && s.len != 0) {
        return None;
    }
    let len = (s.len - off).min(chunk.max(1));
    let last = seg + 1 == segs.len() && off + len == s.len;
    Some(Chunk {
        seg,
        off,
        len,
        last,
    })
}

/// The cursor after `c`.
pub(crate) fn advance(segs: &[Segment], c: &Chunk) -> (usize, usize) {
    if c.off + c.len >= segs[c.seg].len {
        (c.seg + 1, 0)
    } else {
        (c.seg, c.off + c.len)
    }
}

/// Chunks an operation of `segs` takes.
pub(crate) fn chunk_count(segs: &[Segment], chunk: usize) -> usize {
    segs.iter()
        .map(|s| s.len.div_ceil(chunk.max(1)).max(usize::from(s.len == 0)))
        .sum()
}

/// Whether the operation goes over the tagged MQ: one segment (so one MQ
/// message with one tag) longer than the threshold, with `tagged_rma` on.
/// Several segments always go short; a layer wanting long transfers for
/// `writev`-style operations splits them into one operation per segment.
pub(crate) fn goes_long(segs: &[Segment], params: &RmaParams) -> bool {
    params.tagged_rma && segs.len() == 1 && segs[0].len > params.long_threshold
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(key: u64, offset: u64, len: u64) -> RemoteIov {
        RemoteIov { key, offset, len }
    }

    fn chunks(segs: &[Segment], chunk: usize) -> Vec<Chunk> {
        let mut out = Vec::new();
        let (mut s, mut o) = (0, 0);
        while let Some(c) = chunk_at(segs, s, o, chunk) {
            out.push(c);
            (s, o) = advance(segs, &c);
        }
        out
    }

    #[test]
    fn chunking_edges() {
        let chunk = 2032;
        for (len, want) in [
            (0, vec![0]),
            (1, vec![1]),
            (chunk - 1, vec![chunk - 1]),
            (chunk, vec![chunk]),
            (chunk + 1, vec![chunk, 1]),
            (5 * chunk + 7, vec![chunk, chunk, chunk, chunk, chunk, 7]),
        ] {
            let segs = pair(&[len], &[r(1, 100, len as u64)], u64::MAX).unwrap();
            let cs = chunks(&segs, chunk);
            assert_eq!(cs.iter().map(|c| c.len).collect::<Vec<_>>(), want, "{len}");
            assert_eq!(cs.len(), chunk_count(&segs, chunk));
            assert_eq!(cs.iter().filter(|c| c.last).count(), 1);
            assert!(cs.last().unwrap().last);
        }
    }

    #[test]
    fn several_iovecs_split_at_both_boundaries() {
        let segs = pair(&[3, 0, 5], &[r(7, 10, 4), r(8, 0, 4)], u64::MAX).unwrap();
        let got: Vec<_> = segs
            .iter()
            .map(|s| (s.local, s.local_off, s.len, s.key, s.remote_off, s.op_off))
            .collect();
        assert_eq!(
            got,
            vec![(0, 0, 3, 7, 10, 0), (2, 0, 1, 7, 13, 3), (2, 1, 4, 8, 0, 4)]
        );
        let cs = chunks(&segs, 2);
        assert_eq!(
            cs.iter().map(|c| (c.seg, c.off, c.len)).collect::<Vec<_>>(),
            vec![(0, 0, 2), (0, 2, 1), (1, 0, 1), (2, 0, 2), (2, 2, 2)]
        );
        assert_eq!(chunk_count(&segs, 2), 5);
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert_eq!(pair(&[1], &[], 10).unwrap_err().kind(), ErrorKind::Inval);
        let e = pair(&[2], &[r(1, 0, 3)], 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(
            e.message().contains("2 bytes") && e.message().contains("3"),
            "{e}"
        );
        assert_eq!(
            pair(&[1], &[r(1, u64::MAX, 1)], 10).unwrap_err().kind(),
            ErrorKind::Inval
        );
        assert_eq!(
            pair(&[11], &[r(1, 0, 11)], 10).unwrap_err().kind(),
            ErrorKind::MsgSize
        );
        assert_eq!(
            pair(&[usize::MAX, 2], &[r(1, 0, 1)], u64::MAX)
                .unwrap_err()
                .kind(),
            ErrorKind::Inval
        );
    }

    #[test]
    fn params_follow_the_engine() {
        let mut l = EngineLimits::PSM_MINIMUM;
        let p = RmaParams::new(&l, true);
        assert_eq!(
            (p.write_chunk, p.read_chunk, p.long_threshold),
            (256, 256, 256)
        );
        // The engine's short payload as it is (the native engine caps it
        // at the C provider's 2032 bytes itself; the soft engine carries
        // 8128).
        l.max_am_request = 2032;
        l.max_am_reply = 0;
        l.max_message = u64::MAX;
        let p = RmaParams::new(&l, false);
        assert_eq!(
            (p.write_chunk, p.read_chunk, p.max_message),
            (2032, 1, u64::from(u32::MAX))
        );
        l.max_am_request = 8128;
        l.max_am_reply = 8128;
        let big = RmaParams::new(&l, true);
        assert_eq!(
            (big.write_chunk, big.read_chunk, big.long_threshold),
            (8128, 8128, 8128)
        );
        let segs = pair(&[3000], &[r(1, 0, 3000)], u64::MAX).unwrap();
        assert!(!goes_long(&segs, &p));
        assert!(goes_long(
            &segs,
            &RmaParams {
                tagged_rma: true,
                ..p
            }
        ));
        assert!(!goes_long(
            &segs,
            &RmaParams {
                tagged_rma: true,
                long_threshold: 3000,
                ..p
            }
        ));
        let two = pair(&[3000, 3000], &[r(1, 0, 6000)], u64::MAX).unwrap();
        assert!(!goes_long(
            &two,
            &RmaParams {
                tagged_rma: true,
                ..p
            }
        ));
    }

    proptest! {
        #[test]
        fn segments_tile_both_sides(
            locals in proptest::collection::vec(0usize..50, 0..6),
            cuts in proptest::collection::vec(0u64..50, 0..6),
            chunk in 1usize..20,
        ) {
            let total: u64 = locals.iter().map(|&l| l as u64).sum();
            // Remote ranges: cut `total` at sorted points.
            let mut points: Vec<u64> = cuts.iter().map(|c| c % (total + 1)).collect();
            points.push(0);
            points.push(total);
            points.sort_unstable();
            let remote: Vec<_> = points.windows(2).enumerate().map(|(i, w)| r(i as u64, 1000 * i as u64, w[1] - w[0])).collect();
            let segs = pair(&locals, &remote, u64::MAX).unwrap();
            let mut op = 0u64;
            for s in &segs {
                prop_assert_eq!(s.op_off, op);
                prop_assert!(s.local_off + s.len <= locals.get(s.local).copied().unwrap_or(0) || total == 0);
                op += s.len as u64;
            }
            prop_assert_eq!(op, total);
            let cs = chunks(&segs, chunk);
            prop_assert_eq!(cs.len(), chunk_count(&segs, chunk));
            prop_assert!(cs.iter().all(|c| c.len <= chunk));
            prop_assert_eq!(cs.iter().map(|c| c.len as u64).sum::<u64>(), total);
            prop_assert_eq!(cs.iter().filter(|c| c.last).count(), 1);
        }
    }
}
