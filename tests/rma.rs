//! RMA end to end on the soft engine, in one process: `write`/`read` of
//! every interesting size on both paths (AM chunks only, and tagged MQ for
//! long operations), target-side refusals leaving memory unchanged, no
//! RMA target, and regions closed or futures dropped mid-flight.

mod support;
use support::{fabric, payload};

use fabric::{Cfg, Nodes};
use payload::pattern;
use psmrail::config::PsmConfig;
use psmrail::fabric::{getinfo, Caps, EngineChoice, Hints, MemoryRegion, MrAccess, ProgressKind};
use psmrail::ops::RmaIov;
use psmrail::ErrorKind;
use std::time::Duration;

/// The RMA protocol's AM chunk: the engine's short AM payload, 8128 bytes
/// on the soft engine (`atomic_valid` on bytes reports it too).
const CHUNK: usize = 8128;
const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

fn nodes_with(tagged_rma: bool, caps: Caps) -> Nodes {
    nodes_in(ProgressKind::Manual, tagged_rma, caps)
}

fn nodes_in(progress: ProgressKind, tagged_rma: bool, caps: Caps) -> Nodes {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .tagged_rma(tagged_rma)
        .build()
        .expect("config");
    let hints = Hints::new()
        .caps(caps)
        .engine(EngineChoice::Soft)
        .progress(progress)
        .config(config);
    let info = getinfo(Some(&hints)).expect("getinfo").remove(0);
    let cfg = match progress {
        ProgressKind::Auto => Cfg::AUTO_MQ,
        _ => Cfg::MANUAL_MQ,
    };
    fabric::open_info(cfg, info, 2, |_, _, b| b)
}

fn nodes(tagged_rma: bool) -> Nodes {
    nodes_with(tagged_rma, Caps::RMA | Caps::ATOMIC)
}

fn region(n: &Nodes, len: usize, access: MrAccess, key: u64) -> MemoryRegion {
    n[1].domain
        .register(vec![0u8; len], access, Some(key))
        .expect("register")
}

fn snapshot(mr: &MemoryRegion) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read_at(0, &mut v).expect("read_at");
    v
}

fn write_then_read(n: &Nodes, mr: &MemoryRegion, len: usize, at: u64, seed: u64) {
    let dest = n.addr(0, 1);
    let data = pattern(len, seed);
    let (r, buf) = n.drive(n[0].ep.write(dest, data.clone(), at, mr.key()));
    r.unwrap_or_else(|e| panic!("write of {len}: {e}"));
    assert_eq!(buf.len(), len, "the buffer comes back");
    let mut there = vec![0u8; len];
    mr.read_at(at as usize, &mut there).unwrap();
    assert!(there == data, "write of {len} bytes landed wrong");
    let (r, back) = n.drive(n[0].ep.read(dest, vec![0u8; len], at, mr.key()));
    r.unwrap_or_else(|e| panic!("read of {len}: {e}"));
    assert!(
        back.as_slice() == &data[..],
        "read of {len} bytes came back wrong"
    );
}

#[test]
fn every_size_round_trips_on_both_paths() {
    const BIG: usize = 16 << 20;
    for tagged in [false, true] {
        let n = nodes(tagged);
        let mr = region(&n, BIG + 8, RW, 1);
        for (i, len) in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 1 << 20, BIG]
            .into_iter()
            .enumerate()
        {
            // The 16 MiB one only on the long path (the AM path takes it
            // chunk by chunk; sizes around the chunk cover that path).
            if len == BIG && !tagged {
                continue;
            }
            write_then_read(&n, &mr, len, 3, i as u64 + 1);
        }
    }
}

#[test]
fn sixteen_mib_over_am_chunks() {
    let n = nodes(false);
    let mr = region(&n, (16 << 20) + 1, RW, 1);
    write_then_read(&n, &mr, 16 << 20, 1, 9);
}

#[test]
fn msg_forms_scatter_over_remote_ranges() {
    for tagged in [false, true] {
        let n = nodes(tagged);
        let mr = region(&n, 3 * CHUNK, RW, 4);
        let data = pattern(CHUNK + 10, 5);
        let iov = [
            RmaIov {
                offset: 2 * CHUNK as u64,
                len: 10,
                key: 4,
            },
            RmaIov {
                offset: 0,
                len: CHUNK as u64,
                key: 4,
            },
        ];
        let dest = n.addr(0, 1);
        let (r, _) = n.drive(n[0].ep.writemsg(dest, data.clone(), &iov, None));
        r.unwrap();
        let mem = snapshot(&mr);
        assert_eq!(&mem[2 * CHUNK..2 * CHUNK + 10], &data[..10]);
        assert_eq!(&mem[..CHUNK], &data[10..]);
        let (r, back) = n.drive(n[0].ep.readmsg(dest, vec![0u8; CHUNK + 10], &iov));
        r.unwrap();
        assert_eq!(back.as_slice(), &data[..]);
        let short = [RmaIov { len: 3, ..iov[0] }];
        let (r, _) = n.drive(n[0].ep.writemsg(dest, data, &short, None));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval, "lengths differ");
    }
}

#[test]
fn refusals_leave_the_target_unchanged() {
    for tagged in [false, true] {
        let n = nodes(tagged);
        let rw = region(&n, 64 << 10, RW, 1);
        let ro = region(&n, 64 << 10, MrAccess::REMOTE_READ, 2);
        rw.write_at(0, &pattern(64 << 10, 3)).unwrap();
        ro.write_at(0, &pattern(64 << 10, 4)).unwrap();
        let (before_rw, before_ro) = (snapshot(&rw), snapshot(&ro));
        let dest = n.addr(0, 1);
        for len in [100, 32 << 10] {
            let cases = [
                (99, 0u64, "bad key"),
                (1, (64 << 10) - len as u64 + 1, "past the end"),
                (1, 1 << 40, "far past the end"),
                (2, 0, "no FI_REMOTE_WRITE"),
            ];
            for (key, at, what) in cases {
                let (r, buf) = n.drive(n[0].ep.write(dest, vec![0xeeu8; len], at, key));
                let e = r.expect_err(what);
                assert_eq!(e.kind(), ErrorKind::Access, "{what} ({len} bytes): {e}");
                assert_eq!(buf.len(), len);
            }
            let (r, _) = n.drive(n[0].ep.read(dest, vec![0u8; len], 1 << 20, 1));
            assert_eq!(
                r.unwrap_err().kind(),
                ErrorKind::Access,
                "read past the end"
            );
        }
        assert!(snapshot(&rw) == before_rw, "refused writes changed memory");
        assert!(snapshot(&ro) == before_ro, "refused writes changed memory");
        // Reading the read-only region is fine.
        let (r, back) = n.drive(n[0].ep.read(dest, vec![0u8; 5000], 7, 2));
        r.unwrap();
        assert_eq!(back.as_slice(), &before_ro[7..5007]);
    }
}

#[test]
fn without_an_rma_target_the_peer_says_opnotsupp() {
    for tagged in [false, true] {
        let n = nodes_with(tagged, Caps::RMA | Caps::READ | Caps::WRITE);
        let mr = region(&n, 1 << 16, RW, 1);
        let dest = n.addr(0, 1);
        for len in [8, 1 << 15] {
            let (r, _) = n.drive(n[0].ep.write(dest, vec![1u8; len], 0, 1));
            assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp, "{len}");
            let (r, _) = n.drive(n[0].ep.read(dest, vec![1u8; len], 0, 1));
            assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp, "{len}");
        }
        assert!(snapshot(&mr).iter().all(|&b| b == 0));
    }
}

#[test]
fn caps_are_checked_before_anything_is_sent() {
    let n = nodes_with(true, Caps::RMA | Caps::READ);
    let dest = n.addr(0, 1);
    let op = n[0].ep.write(dest, vec![1u8; 4], 0, 1);
    assert!(op.is_failed());
    let (r, buf) = n.drive(op);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
    assert_eq!(buf.as_slice(), &[1, 1, 1, 1]);
    let n = nodes_with(true, Caps::MSG);
    let (r, _) = n.drive(n[0].ep.read(n.addr(0, 1), vec![0u8; 4], 0, 1));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
}

#[test]
fn closing_a_region_or_dropping_futures_mid_flight_is_safe() {
    for tagged in [false, true] {
        let n = nodes(tagged);
        let dest = n.addr(0, 1);
        let mr = region(&n, 1 << 20, RW, 1);
        // Start, progress a little, close the region, finish.
        let w = n[0].ep.write(dest, vec![7u8; 1 << 20], 0, 1);
        let r = n[0].ep.read(dest, vec![0u8; 1 << 20], 0, 1);
        n.progress();
        mr.close();
        let ((wr, _), (rr, _)) = n.drive(async { futures::join!(w, r) });
        for res in [wr, rr] {
            // Access once closed; Busy when the write and the read (long
            // path) hold the same bytes at once.
            if let Err(e) = res {
                assert!(
                    matches!(e.kind(), ErrorKind::Access | ErrorKind::Busy),
                    "{e}"
                );
            }
        }
        // After close the key names nothing.
        let (r, _) = n.drive(n[0].ep.write(dest, vec![1u8; 10], 0, 1));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Access);
        // Dropped futures: the operations run on; later ones still work.
        let mr = region(&n, 1 << 20, RW, 2);
        for _ in 0..3 {
            drop(n[0].ep.write(dest, vec![9u8; 1 << 19], 0, 2));
            drop(n[0].ep.read(dest, vec![0u8; 1 << 19], 1 << 19, 2));
        }
        for _ in 0..50 {
            n.progress();
        }
        write_then_read(&n, &mr, 3 * CHUNK, 5, 1);
    }
}

#[test]
fn registration_keys() {
    let n = nodes(true);
    let a = n[1].domain.register(vec![0u8; 8], RW, None).unwrap();
    let b = n[1].domain.mr_reg(vec![0u8; 8], RW, None).unwrap();
    assert_ne!(a.key(), b.key());
    let e = n[1]
        .domain
        .register(vec![0u8; 8], RW, Some(a.key()))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy);
}

#[test]
fn auto_progress_completes_both_paths() {
    for tagged in [false, true] {
        let n = nodes_in(ProgressKind::Auto, tagged, Caps::RMA | Caps::ATOMIC);
        let mr = region(&n, 1 << 20, RW, 1);
        for len in [1, CHUNK + 1, 1 << 20] {
            write_then_read(&n, &mr, len, 0, 3);
        }
    }
}

/// `FI_RMA_EVENT`: the target endpoint's remote-write and remote-read
/// counters count the operations peers ran on its memory.
#[test]
fn remote_counters_count_at_the_target() {
    use psmrail::fabric::{CounterAttr, CounterBind};
    for tagged in [false, true] {
        let config = PsmConfig::builder()
            .name_server(false)
            .delay(Duration::ZERO)
            .timeout(Duration::ZERO)
            .tagged_rma(tagged)
            .build()
            .expect("config");
        let caps = Caps::RMA | Caps::ATOMIC | Caps::RMA_EVENT;
        let hints = Hints::new()
            .caps(caps)
            .engine(EngineChoice::Soft)
            .config(config);
        let info = getinfo(Some(&hints)).expect("getinfo").remove(0);
        let mut counters = Vec::new();
        let n = fabric::open_info(Cfg::MANUAL_MQ, info, 2, |i, domain, b| {
            if i != 1 {
                return b;
            }
            let (w, r) = (
                domain.counter(CounterAttr::new()).expect("counter"),
                domain.counter(CounterAttr::new()).expect("counter"),
            );
            counters.push((w.clone(), r.clone()));
            b.bind_counter(&w, CounterBind::REMOTE_WRITE)
                .bind_counter(&r, CounterBind::REMOTE_READ)
        });
        let (writes, reads) = counters.pop().expect("the target's counters");
        let mr = region(&n, 64 << 10, RW, 7);
        for (k, len) in [1usize, CHUNK + 1, 64 << 10].into_iter().enumerate() {
            write_then_read(&n, &mr, len, 0, k as u64);
            // The target counts when it has applied the operation; its
            // domain progresses while we drive.
            n.drive(async {
                writes.wait_for(k as u64 + 1).await;
                reads.wait_for(k as u64 + 1).await;
            });
        }
        assert_eq!((writes.read(), reads.read()), (3, 3), "tagged_rma={tagged}");
    }
}

/// Runs `fut` on a thread; its output, or `None` if it did not finish in
/// `limit` (the thread is then left spinning: the test fails anyway).
fn finishes_within<F>(fut: F, limit: Duration) -> Option<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(futures::executor::block_on(fut));
    });
    rx.recv_timeout(limit).ok()
}

/// Closing the initiator's domain ends its RMA and atomics that still wait
/// for the (silent) target with `FI_ECANCELED`, buffers handed back;
/// nothing waits forever.
#[test]
fn closing_the_domain_ends_waiting_rma_and_atomics() {
    use psmrail::ops::atomic::{AtomicDatatype, AtomicOp};
    for tagged in [false, true] {
        let n = nodes(tagged);
        let mr = region(&n, 1 << 20, RW, 3);
        let dest = n.addr(0, 1);
        // The target never progresses (manual mode, nobody drives it), so
        // none of these can finish.
        let w = n[0].ep.write(dest, pattern(1 << 20, 1), 0, mr.key());
        let r = n[0].ep.read(dest, vec![0u8; 4096], 0, mr.key());
        let a = n[0].ep.fetch_atomic(
            dest,
            AtomicOp::Sum,
            AtomicDatatype::Uint64,
            &1u64.to_ne_bytes(),
            vec![0u8; 8],
            0,
            mr.key(),
        );
        n[0].domain.clone().close().expect("close");
        for (what, op, len) in [
            ("write", w, 1 << 20),
            ("read", r, 4096),
            ("fetch_atomic", a, 8),
        ] {
            let (res, buf) = finishes_within(op, Duration::from_secs(20)).unwrap_or_else(|| {
                panic!("{what} still waits after its domain closed (tagged_rma={tagged})")
            });
            let e = res.expect_err(what);
            assert_eq!(e.kind(), ErrorKind::Canceled, "{what}: {e}");
            assert_eq!(buf.len(), len, "{what}: the buffer comes back");
        }
    }
}
