//! Atomics end to end on the soft engine, in one process: op x datatype
//! pairs against the local `apply` reference, concurrent fetch-adds from
//! two initiator domains, and the refusals (unsupported pair, too many
//! elements, bad key, no atomic target).

mod support;
use support::{atomic_values, fabric};

use atomic_values::Case;

use fabric::{Cfg, Nodes};
use psmrail::config::PsmConfig;
use psmrail::fabric::{getinfo, Caps, EngineChoice, Hints, MemoryRegion, MrAccess, ProgressKind};
use psmrail::ops::atomic::{apply, AtomicDatatype as Dt, AtomicKind, AtomicOp as Op};
use psmrail::ErrorKind;
use std::collections::HashSet;
use std::time::Duration;

const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

fn nodes(caps: Caps, n: usize) -> Nodes {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .build()
        .expect("config");
    let hints = Hints::new()
        .caps(caps)
        .engine(EngineChoice::Soft)
        .progress(ProgressKind::Manual)
        .config(config);
    let info = getinfo(Some(&hints)).expect("getinfo").remove(0);
    fabric::open_info(Cfg::MANUAL_MQ, info, n, |_, _, b| b)
}

fn snapshot(mr: &MemoryRegion) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read_at(0, &mut v).unwrap();
    v
}

fn bytes_of<const N: usize>(vals: &[[u8; N]]) -> Vec<u8> {
    vals.concat()
}

#[test]
fn pairs_match_the_local_reference() {
    let n = nodes(Caps::ATOMIC, 2);
    let dest = n.addr(0, 1);
    let mr = n[1].domain.register(vec![0u8; 256], RW, Some(5)).unwrap();
    let init = bytes_of(&[3u64.to_ne_bytes(), 10u64.to_ne_bytes(), 7u64.to_ne_bytes()]);
    type Case = (AtomicKind, Op, Dt, Vec<u8>, Vec<u8>);
    let cases: Vec<Case> = vec![
        (
            AtomicKind::Fetch,
            Op::Sum,
            Dt::Uint64,
            bytes_of(&[5u64.to_ne_bytes(), 1u64.to_ne_bytes()]),
            vec![],
        ),
        (
            AtomicKind::Write,
            Op::Min,
            Dt::Int32,
            bytes_of(&[(-4i32).to_ne_bytes(), 100i32.to_ne_bytes()]),
            vec![],
        ),
        (
            AtomicKind::Compare,
            Op::Cswap,
            Dt::Int64,
            bytes_of(&[42i64.to_ne_bytes(), 43i64.to_ne_bytes()]),
            // Element 0 compares equal only if the target holds 3.
            bytes_of(&[3i64.to_ne_bytes(), 999i64.to_ne_bytes()]),
        ),
        (
            AtomicKind::Write,
            Op::Bxor,
            Dt::Uint8,
            vec![0xff, 0x0f, 0xf0],
            vec![],
        ),
        (
            AtomicKind::Fetch,
            Op::Prod,
            Dt::Double,
            bytes_of(&[1.5f64.to_ne_bytes()]),
            vec![],
        ),
        (
            AtomicKind::Fetch,
            Op::AtomicRead,
            Dt::Uint32,
            vec![],
            vec![],
        ),
        (
            AtomicKind::Write,
            Op::AtomicWrite,
            Dt::FloatComplex,
            bytes_of(&[1.0f32.to_ne_bytes(), 2.0f32.to_ne_bytes()]),
            vec![],
        ),
    ];
    for (kind, op, dt, operand, compare) in cases {
        mr.write_at(8, &init).unwrap();
        let len = if operand.is_empty() { 8 } else { operand.len() };
        // The reference on a copy of the same bytes.
        let mut want = snapshot(&mr);
        let mut want_old = vec![0u8; if kind.fetches() { len } else { 0 }];
        apply(
            kind,
            op,
            dt,
            &mut want[8..8 + len],
            &operand,
            &compare,
            &mut want_old,
        )
        .unwrap();
        let ep = &n[0].ep;
        let fut = match kind {
            AtomicKind::Write => ep.atomic(dest, op, dt, &operand, 8, 5),
            AtomicKind::Fetch => ep.fetch_atomic(dest, op, dt, &operand, vec![0u8; len], 8, 5),
            AtomicKind::Compare => {
                ep.compare_atomic(dest, op, dt, &operand, &compare, vec![0u8; len], 8, 5)
            }
        };
        let (r, buf) = n.drive(fut);
        r.unwrap_or_else(|e| panic!("{kind} {op} {dt}: {e}"));
        assert_eq!(snapshot(&mr), want, "{kind} {op} {dt}: target");
        if kind.fetches() {
            assert_eq!(
                buf.as_slice(),
                &want_old[..],
                "{kind} {op} {dt}: old values"
            );
        } else {
            assert_eq!(buf.as_slice(), &operand[..], "the operand comes back");
        }
    }
}

#[test]
fn concurrent_fetch_adds_are_exact() {
    const PER_THREAD: u64 = 1000;
    let n = nodes(Caps::ATOMIC, 3);
    let mr = n[0].domain.register(vec![0u8; 8], RW, Some(1)).unwrap();
    let fetched: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = [1usize, 2]
            .into_iter()
            .map(|i| {
                let n = &n;
                s.spawn(move || {
                    let doms = [n[i].domain.clone(), n[0].domain.clone()];
                    let dest = n.addr(i, 0);
                    (0..PER_THREAD)
                        .map(|_| {
                            let f = n[i].ep.fetch_atomic(
                                dest,
                                Op::Sum,
                                Dt::Uint64,
                                &1u64.to_ne_bytes(),
                                vec![0u8; 8],
                                0,
                                1,
                            );
                            let (r, buf) = fabric::drive(&doms, f);
                            r.expect("fetch-add");
                            u64::from_ne_bytes(buf.as_slice().try_into().unwrap())
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = [0u8; 8];
    mr.read_at(0, &mut total).unwrap();
    assert_eq!(u64::from_ne_bytes(total), 2 * PER_THREAD);
    let all: HashSet<u64> = fetched.iter().flatten().copied().collect();
    assert_eq!(
        all.len() as u64,
        2 * PER_THREAD,
        "every fetched value distinct"
    );
    assert!(all.iter().all(|&v| v < 2 * PER_THREAD));
}

#[test]
fn refusals() {
    let n = nodes(Caps::ATOMIC, 2);
    let dest = n.addr(0, 1);
    let mr = n[1].domain.register(vec![1u8; 64], RW, Some(3)).unwrap();
    let ro = n[1]
        .domain
        .register(vec![1u8; 64], MrAccess::REMOTE_READ, Some(4))
        .unwrap();
    let ep = &n[0].ep;
    // Unsupported pair: refused before sending.
    assert_eq!(
        ep.atomic_valid(Op::Band, Dt::Double).unwrap_err().kind(),
        ErrorKind::OpNotSupp
    );
    let op = ep.atomic(dest, Op::Band, Dt::Double, &[0u8; 8], 0, 3);
    assert!(op.is_failed());
    assert_eq!(n.drive(op).0.unwrap_err().kind(), ErrorKind::OpNotSupp);
    // Too many elements.
    let max = ep.fetch_atomic_valid(Op::Sum, Dt::Uint64).unwrap();
    assert!(max >= 1);
    assert_eq!(
        ep.compare_atomic_valid(Op::Cswap, Dt::Uint64).unwrap(),
        max / 2
    );
    let big = (max + 1) * 8;
    let (r, _) = n.drive(ep.fetch_atomic(
        dest,
        Op::Sum,
        Dt::Uint64,
        &vec![0u8; big],
        vec![0u8; big],
        0,
        3,
    ));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::MsgSize);
    // Not a whole number of elements.
    let (r, _) = n.drive(ep.atomic(dest, Op::Sum, Dt::Uint32, &[0u8; 6], 0, 3));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
    // Target-side: bad key, out of range, fetch without FI_REMOTE_WRITE.
    let before = (snapshot(&mr), snapshot(&ro));
    let one = 1u64.to_ne_bytes();
    let (r, _) = n.drive(ep.atomic(dest, Op::Sum, Dt::Uint64, &one, 0, 99));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Access);
    let (r, _) = n.drive(ep.atomic(dest, Op::Sum, Dt::Uint64, &one, 60, 3));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Access);
    let (r, _) =
        n.drive(ep.fetch_atomic(dest, Op::AtomicRead, Dt::Uint64, &[], vec![0u8; 8], 0, 4));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Access);
    assert_eq!((snapshot(&mr), snapshot(&ro)), before);
}

#[test]
fn without_an_atomic_target_the_peer_says_opnotsupp() {
    let n = nodes(Caps::ATOMIC | Caps::READ | Caps::WRITE, 2);
    let dest = n.addr(0, 1);
    let mr = n[1].domain.register(vec![0u8; 8], RW, Some(1)).unwrap();
    let (r, _) = n.drive(
        n[0].ep
            .atomic(dest, Op::Sum, Dt::Uint64, &1u64.to_ne_bytes(), 0, 1),
    );
    assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
    assert_eq!(snapshot(&mr), vec![0u8; 8]);
}

#[test]
fn dropped_atomic_futures_still_apply() {
    let n = nodes(Caps::ATOMIC, 2);
    let dest = n.addr(0, 1);
    let mr = n[1].domain.register(vec![0u8; 8], RW, Some(1)).unwrap();
    for _ in 0..10 {
        drop(n[0].ep.fetch_atomic(
            dest,
            Op::Sum,
            Dt::Uint64,
            &1u64.to_ne_bytes(),
            vec![0u8; 8],
            0,
            1,
        ));
    }
    // A last one, awaited; the target runs them in order of arrival.
    let (r, buf) = n.drive(n[0].ep.fetch_atomic(
        dest,
        Op::Sum,
        Dt::Uint64,
        &1u64.to_ne_bytes(),
        vec![0u8; 8],
        0,
        1,
    ));
    r.unwrap();
    assert_eq!(u64::from_ne_bytes(buf.as_slice().try_into().unwrap()), 10);
    assert_eq!(snapshot(&mr), 11u64.to_ne_bytes());
}

/// Every op x datatype x kind, end to end, against the local reference:
/// supported pairs change the target and fetch exactly what `apply` says;
/// every other pair is refused with `FI_EOPNOTSUPP` and leaves the target
/// as it was (never a silent no-op reported as success).
#[test]
fn every_op_and_datatype_end_to_end() {
    let n = nodes(Caps::ATOMIC, 2);
    let dest = n.addr(0, 1);
    let mr = n[1].domain.register(vec![0u8; 64], RW, Some(9)).unwrap();
    let (mut supported, mut refused) = (0, 0);
    for case in Case::all() {
        let what = case.name();
        mr.write_at(16, &case.init).unwrap();
        let before = snapshot(&mr);
        let (r, buf) = n.drive(case.post(&n[0].ep, dest, 16, 9));
        if !case.supported() {
            let e = r.expect_err("an unsupported pair is refused");
            assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{what}: {e}");
            assert_eq!(snapshot(&mr), before, "{what}: target untouched");
            refused += 1;
            continue;
        }
        r.unwrap_or_else(|e| panic!("{what}: {e}"));
        let (want, want_old) = case.expected(&before, 16);
        assert_eq!(snapshot(&mr), want, "{what}: target");
        if case.kind.fetches() {
            assert_eq!(buf.as_slice(), &want_old[..], "{what}: old values");
        }
        supported += 1;
    }
    // Write takes 11 ops, fetch 12, compare 7: 30 x 12 datatypes, of which
    // the C provider's op x datatype table supports 292.
    assert_eq!((supported, refused), (292, 68));
}
