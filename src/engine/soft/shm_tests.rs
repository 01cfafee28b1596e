//! The shared-memory path between endpoints of one process over real
//! memfds and Unix sockets: links move onto it, a peer that scribbles
//! over the segment loses its link with an error and nothing else, and
//! the environment switch keeps links on their sockets.

use super::close_tests::{drive, open, pair_on, pattern, post_recv, post_send, LIMIT};
use super::shm::segment::{Direction, SharedRegion};
use super::{SoftConfig, SoftEndpoint, SoftEngine};
use crate::engine::{EngineEndpoint, PeerAddr};
use crate::reactor::ProgressSource;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn engine(shared_memory: bool) -> SoftEngine {
    engine_with(shared_memory, true)
}

fn engine_with(shared_memory: bool, shm_single_copy: bool) -> SoftEngine {
    SoftEngine::new(SoftConfig {
        shared_memory,
        shm_single_copy,
        ..SoftConfig::default()
    })
    .unwrap()
}

/// `a` and `b` connect to each other at once (each `connect` waits for
/// the other side's progress, hence the thread): their names for each
/// other.
fn dial_each_other(a: &SoftEndpoint, b: &SoftEndpoint) -> (PeerAddr, PeerAddr) {
    std::thread::scope(|s| {
        let t = s.spawn(|| b.connect(&[a.epid()], LIMIT).remove(0));
        let ab = a.connect(&[b.epid()], LIMIT).remove(0).unwrap();
        (ab, t.join().unwrap().unwrap())
    })
}

fn settle(eps: &[&Arc<SoftEndpoint>]) {
    for _ in 0..100 {
        for e in eps {
            e.progress();
        }
    }
}

#[test]
fn same_host_links_move_and_carry_every_size() {
    for single_copy in [true, false] {
        carry_every_size(single_copy);
    }
}

fn carry_every_size(single_copy: bool) {
    let (a, b, ab, ba) = pair_on(&engine_with(true, single_copy));
    settle(&[&a, &b]);
    let (sa, sb) = (a.stats(), b.stats());
    assert!(sa.shm_links >= 1 && sb.shm_links >= 1, "{sa:?}\n{sb:?}");
    for (i, n) in [0usize, 1, 4095, 4096, 65_536, 1 << 20, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let tag = 10 + i as u64;
        for (from, to, peer) in [(&a, &b, ab), (&b, &a, ba)] {
            let data = pattern(n, i as u8);
            let r = post_recv(to, tag, n);
            let s = post_send(from, peer, tag, data.clone());
            let c = drive(&[&a, &b], to, r, "receive");
            assert_eq!(c.status.error, None, "{n} B: {:?}", c.status);
            assert!(c.buffer.as_slice()[..n] == data[..], "{n} B: bytes differ");
            drive(&[&a, &b], from, s, "send");
        }
    }
    let (sa, sb) = (a.stats(), b.stats());
    let pulled = sa.shm_pull_bytes + sb.shm_pull_bytes;
    if single_copy {
        // The 1 and 5 MiB messages each way were read from their
        // senders' memory; the rest crossed the rings.
        assert!(sa.shm_pulls >= 2 && sb.shm_pulls >= 2, "{sa:?}\n{sb:?}");
        assert!(pulled >= 2 * (6 << 20), "{sa:?}\n{sb:?}");
        assert_eq!(sa.shm_pull_fallbacks + sb.shm_pull_fallbacks, 0);
        assert!(sa.shm_bytes_written < 1 << 20, "{sa:?}");
    } else {
        assert_eq!(pulled, 0);
        assert!(
            sa.shm_bytes_written > 6 << 20 && sa.shm_bytes_read > 6 << 20,
            "{sa:?}"
        );
    }
}

#[test]
fn shared_memory_off_keeps_the_sockets() {
    let (a, b, _, _) = pair_on(&engine(false));
    settle(&[&a, &b]);
    let s = a.stats();
    assert_eq!(
        (s.shm_links, s.shm_moves, s.shm_bytes_read),
        (0, 0, 0),
        "{s:?}"
    );
    assert!(s.bytes_read > 0);
}

/// A peer that writes nonsense into the indices of the segment: the link
/// over it ends with an error (its connection resumes on a new transport,
/// a socket, as after a reset), nothing sent on it is lost, and another
/// peer of the same endpoint goes on as before.
#[test]
fn a_scribbling_peer_loses_its_link_and_nothing_else() {
    let e = engine(true);
    let (a, b, ab, _) = pair_on(&e);
    let c = open(&e);
    let (ac, ca) = dial_each_other(&a, &c);
    settle(&[&a, &b, &c]);
    let before = a.stats();
    // b scribbles: every index of every ring it shares with a.
    let n = b.with_shm_segments(|seg, layout| {
        for d in [Direction::FromCreator, Direction::ToCreator] {
            let area = layout.ring(d);
            seg.atomic_u64(area.tail_offset())
                .store(u64::MAX / 3, Ordering::Release);
            seg.atomic_u64(area.head_offset())
                .store(u64::MAX / 5, Ordering::Release);
        }
    });
    assert!(n >= 1, "b has shared-memory links");
    // Messages to and from the scribbler arrive whole all the same.
    for (i, size) in [8usize, 1 << 20].into_iter().enumerate() {
        let data = pattern(size, i as u8);
        let r = post_recv(&b, 7, size);
        let s = post_send(&a, ab, 7, data.clone());
        let got = drive(&[&a, &b, &c], &b, r, "receive at the scribbler");
        assert_eq!(got.status.error, None, "{:?}", got.status);
        assert!(got.buffer.as_slice() == &data[..]);
        let sent = drive(&[&a, &b, &c], &a, s, "send to the scribbler");
        assert_eq!(sent.status.error, None);
    }
    let after = a.stats();
    assert!(
        after.detached > before.detached && b.stats().shm_links == 0,
        "the scribbled links ended:\n{before:?}\n{after:?}"
    );
    // c is untouched: a message each way, still over shared memory.
    for (from, to, peer) in [(&a, &c, ac), (&c, &a, ca)] {
        let data = pattern(100_000, 9);
        let r = post_recv(to, 8, data.len());
        let s = post_send(from, peer, 8, data.clone());
        let got = drive(&[&a, &c], to, r, "receive after the scribble");
        assert_eq!(got.status.error, None);
        assert!(got.buffer.as_slice() == &data[..]);
        drive(&[&a, &c], from, s, "send after the scribble");
    }
    assert!(c.stats().shm_links >= 1);
}

/// One side with the path off: the dialer's offer is declined (or never
/// made) and the link stays on its socket, both ways, whichever side
/// dials.
#[test]
fn a_peer_without_shared_memory_declines_and_both_stay_on_the_socket() {
    let (on, off) = (engine(true), engine(false));
    let (a, b) = (open(&on), open(&off));
    let (ab, ba) = dial_each_other(&a, &b);
    settle(&[&a, &b]);
    for (from, to, peer) in [(&a, &b, ab), (&b, &a, ba)] {
        let data = pattern(300_000, 4);
        let r = post_recv(to, 5, data.len());
        let s = post_send(from, peer, 5, data.clone());
        let got = drive(&[&a, &b], to, r, "receive");
        assert_eq!(got.status.error, None);
        assert!(got.buffer.as_slice() == &data[..]);
        drive(&[&a, &b], from, s, "send");
    }
    for s in [a.stats(), b.stats()] {
        assert_eq!((s.shm_links, s.shm_bytes_read), (0, 0), "{s:?}");
    }
}

/// A kernel that refuses to let one process read another's memory (as
/// under `kernel.yama.ptrace_scope` 2, or a container's filter): the
/// first large message falls back to the ring, the link pulls no more,
/// and every message arrives whole.
#[test]
fn refused_single_copies_fall_back_to_the_ring() {
    super::shm::peer_read::REFUSE.with(|r| r.set(true));
    let (a, b, ab, ba) = pair_on(&engine(true));
    settle(&[&a, &b]);
    for (i, n) in [1usize << 20, 3 << 20, 1 << 20].into_iter().enumerate() {
        for (from, to, peer) in [(&a, &b, ab), (&b, &a, ba)] {
            let data = pattern(n, 40 + i as u8);
            let r = post_recv(to, 60 + i as u64, n);
            let s = post_send(from, peer, 60 + i as u64, data.clone());
            let c = drive(&[&a, &b], to, r, "receive");
            assert_eq!(c.status.error, None, "{:?}", c.status);
            assert!(c.buffer.as_slice() == &data[..], "{n} B: bytes differ");
            drive(&[&a, &b], from, s, "send");
        }
    }
    super::shm::peer_read::REFUSE.with(|r| r.set(false));
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.shm_pulls + sb.shm_pulls, 0, "{sa:?}");
    let fallbacks = sa.shm_pull_fallbacks + sb.shm_pull_fallbacks;
    // One per link that was asked (each side's links pull no more after).
    assert!((1..=4).contains(&fallbacks), "{sa:?}\n{sb:?}");
    assert!(sa.shm_bytes_written > 4 << 20, "{sa:?}");
}

/// A sender whose large send fails (its endpoint closes before the
/// receiver matched the message) takes its buffer back and may reuse it:
/// the receiver, matching the message only afterwards, must not read that
/// memory as the message. Its receive fails; it never completes with
/// bytes the sender wrote after taking the buffer back.
#[test]
fn a_receive_never_reads_a_buffer_its_sender_took_back() {
    let (a, b, ab, _) = pair_on(&engine(true));
    settle(&[&a, &b]);
    let n = 1 << 20;
    let s = post_send(&a, ab, 90, pattern(n, 3));
    // b holds the PullRts unexpected (no receive posted yet).
    settle(&[&a, &b]);
    a.close(std::time::Duration::from_millis(50)).unwrap();
    let mut back = a
        .completions()
        .try_take(s)
        .expect("the send was handed back");
    assert!(back.status.error.is_some(), "{:?}", back.status);
    // Reused: what a read of that memory would now find.
    back.buffer.as_mut_slice().unwrap().fill(0xee);
    let r = post_recv(&b, 90, n);
    let got = drive(
        &[&b],
        &b,
        r,
        "the receive of a message its sender took back",
    );
    assert!(
        got.status.error.is_some(),
        "the receive completed from reused memory: {:?}",
        got.status
    );
    drop(back);
}
