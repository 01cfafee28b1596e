//! The typed atomic helpers (`Endpoint::atomic_on`, `AtomicTarget`)
//! against the byte-level calls they stand for: each helper, on every
//! `AtomicValue` type, must leave the target region exactly as the
//! byte-level call does and return the same old values decoded, or fail
//! with the same error. Then the refusals (wrong key, unsupported pair,
//! too many elements, mismatched slices), concurrent fetch-adds from
//! several tasks on several threads summing exactly, and dropped futures
//! that still apply.
//!
//! The soft engine runs in this process (an initiator and a target
//! domain). The native engine runs the same checks in a child process
//! (PSM allows one endpoint per process: it targets its own region through
//! a self connection); without the PSM library that test prints why and
//! passes, unless `PSMRAIL_REQUIRE_NATIVE=1`:
//!
//! ```text
//! PSM2_DEVICES=self,shm PSMRAIL_REQUIRE_NATIVE=1 cargo test --test atomic_typed
//! ```

mod support;
use support::{fabric, peer, remote};

use fabric::{Cfg, Nodes};
use psmrail::config::PsmConfig;
use psmrail::engine::EngineKind;
use psmrail::fabric::{
    getinfo, AvAttr, Caps, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints, MemoryRegion,
    MrAccess, ProgressKind,
};
use psmrail::ops::atomic::{AtomicKind, AtomicOp as Op, AtomicTarget, AtomicValue};
use psmrail::{Error, ErrorKind, Result};
use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
/// The read-write region's key and length.
const KEY: u64 = 5;
const LEN: usize = 64;
/// A region the target allows remote reads only (fetches need writes).
const RO_KEY: u64 = 6;
/// Where the cases sit in the region: neighbours on both sides.
const AT: u64 = 16;

/// An initiator endpoint, the target's region and the domains to drive.
struct Rig<'a> {
    ep: &'a Endpoint,
    dest: FiAddr,
    mr: &'a MemoryRegion,
    domains: Vec<Domain>,
}

impl Rig<'_> {
    fn drive<F: Future>(&self, f: F) -> F::Output {
        fabric::drive(&self.domains, f)
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.mr.len()];
        self.mr.read_at(0, &mut v).expect("read_at");
        v
    }

    /// Fills the region with a pattern, then `init` at [`AT`].
    fn reset(&self, init: &[u8]) {
        let pattern: Vec<u8> = (0..LEN as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        self.mr.write_at(0, &pattern).expect("write_at");
        self.mr.write_at(AT as usize, init).expect("write_at");
    }

    fn target<T: AtomicValue>(&self, key: u64) -> AtomicTarget<'_, T> {
        self.ep.atomic_on::<T>(self.dest, AT, key)
    }
}

// ----- the helpers and the byte-level calls they stand for ------------------------

/// One helper call on a `T` target.
#[derive(Clone, Debug)]
enum Helper<T> {
    Add(T),
    FetchAdd(T),
    FetchMin(T),
    FetchMax(T),
    Write(T),
    Read,
    Swap(T),
    CompareSwap(T, T),
    Atomic(Op, T),
    FetchAtomic(Op, T),
    CompareAtomic(Op, T, T),
    AtomicSlice(Op, Vec<T>),
    FetchAtomicSlice(Op, Vec<T>),
    CompareAtomicSlice(Op, Vec<T>, Vec<T>),
    ReadSlice(usize),
}

/// A byte-level call: kind, op, operand, compare, and the element count
/// of its result buffer (fetch and compare calls).
struct Bytes {
    kind: AtomicKind,
    op: Op,
    operand: Vec<u8>,
    compare: Vec<u8>,
    count: usize,
}

fn ne<T: AtomicValue>(values: &[T]) -> Vec<u8> {
    T::slice_to_ne_bytes(values)
}

impl<T: AtomicValue> Helper<T> {
    /// Runs the helper; its result re-encoded as bytes (empty for `()`).
    fn run(&self, rig: &Rig<'_>, key: u64) -> Result<Vec<u8>> {
        let t = rig.target::<T>(key);
        let one = |v: Result<T>| v.map(|v| ne(&[v]));
        let many = |v: Result<Vec<T>>| v.map(|v| ne(&v));
        let unit = |v: Result<()>| v.map(|()| Vec::new());
        match self.clone() {
            Helper::Add(v) => unit(rig.drive(t.add(v))),
            Helper::FetchAdd(v) => one(rig.drive(t.fetch_add(v))),
            Helper::FetchMin(v) => one(rig.drive(t.fetch_min(v))),
            Helper::FetchMax(v) => one(rig.drive(t.fetch_max(v))),
            Helper::Write(v) => unit(rig.drive(t.write(v))),
            Helper::Read => one(rig.drive(t.read())),
            Helper::Swap(v) => one(rig.drive(t.swap(v))),
            Helper::CompareSwap(c, v) => one(rig.drive(t.compare_swap(c, v))),
            Helper::Atomic(op, v) => unit(rig.drive(t.atomic(op, v))),
            Helper::FetchAtomic(op, v) => one(rig.drive(t.fetch_atomic(op, v))),
            Helper::CompareAtomic(op, c, v) => one(rig.drive(t.compare_atomic(op, c, v))),
            Helper::AtomicSlice(op, v) => unit(rig.drive(t.atomic_slice(op, &v))),
            Helper::FetchAtomicSlice(op, v) => many(rig.drive(t.fetch_atomic_slice(op, &v))),
            Helper::CompareAtomicSlice(op, c, v) => {
                many(rig.drive(t.compare_atomic_slice(op, &c, &v)))
            }
            Helper::ReadSlice(n) => many(rig.drive(t.read_slice(n))),
        }
    }

    /// The byte-level call this helper stands for.
    fn bytes(&self) -> Bytes {
        use AtomicKind::{Compare, Fetch, Write};
        let b = |kind, op, operand: Vec<u8>, compare: Vec<u8>, count| Bytes {
            kind,
            op,
            operand,
            compare,
            count,
        };
        match self.clone() {
            Helper::Add(v) => b(Write, Op::Sum, ne(&[v]), vec![], 1),
            Helper::FetchAdd(v) => b(Fetch, Op::Sum, ne(&[v]), vec![], 1),
            Helper::FetchMin(v) => b(Fetch, Op::Min, ne(&[v]), vec![], 1),
            Helper::FetchMax(v) => b(Fetch, Op::Max, ne(&[v]), vec![], 1),
            Helper::Write(v) => b(Write, Op::AtomicWrite, ne(&[v]), vec![], 1),
            Helper::Read => b(Fetch, Op::AtomicRead, vec![], vec![], 1),
            Helper::Swap(v) => b(Fetch, Op::AtomicWrite, ne(&[v]), vec![], 1),
            Helper::CompareSwap(c, v) => b(Compare, Op::Cswap, ne(&[v]), ne(&[c]), 1),
            Helper::Atomic(op, v) => b(Write, op, ne(&[v]), vec![], 1),
            Helper::FetchAtomic(op, v) => b(Fetch, op, ne(&[v]), vec![], 1),
            Helper::CompareAtomic(op, c, v) => b(Compare, op, ne(&[v]), ne(&[c]), 1),
            Helper::AtomicSlice(op, v) => b(Write, op, ne(&v), vec![], v.len()),
            Helper::FetchAtomicSlice(op, v) => b(Fetch, op, ne(&v), vec![], v.len()),
            Helper::CompareAtomicSlice(op, c, v) => b(Compare, op, ne(&v), ne(&c), v.len()),
            Helper::ReadSlice(n) => b(Fetch, Op::AtomicRead, vec![], vec![], n),
        }
    }
}

impl Bytes {
    /// Runs the byte-level call; the old values (empty for a plain atomic,
    /// whose future must hand back its operand bytes).
    fn run<T: AtomicValue>(&self, rig: &Rig<'_>, key: u64) -> Result<Vec<u8>> {
        let (ep, dest, dt) = (rig.ep, rig.dest, T::DATATYPE);
        let result = || vec![0u8; self.count * dt.size()];
        let op = match self.kind {
            AtomicKind::Write => ep.atomic(dest, self.op, dt, &self.operand, AT, key),
            AtomicKind::Fetch => {
                ep.fetch_atomic(dest, self.op, dt, &self.operand, result(), AT, key)
            }
            AtomicKind::Compare => ep.compare_atomic(
                dest,
                self.op,
                dt,
                &self.operand,
                &self.compare,
                result(),
                AT,
                key,
            ),
        };
        let (r, buf) = rig.drive(op);
        r?;
        if self.kind == AtomicKind::Write {
            assert_eq!(buf.as_slice(), &self.operand[..], "the operand comes back");
            Ok(Vec::new())
        } else {
            Ok(buf.as_slice().to_vec())
        }
    }
}

/// Runs `helper` and its byte-level call from the same `init`, on region
/// `key`: the same result (or error kind and message) and the same region
/// afterwards. Returns the helper's result.
fn same_as_bytes<T: AtomicValue>(
    rig: &Rig<'_>,
    helper: &Helper<T>,
    init: &[u8],
    key: u64,
) -> Result<Vec<u8>> {
    let what = format!("{helper:?} on {}", T::DATATYPE);
    rig.reset(init);
    let typed = helper.run(rig, key);
    let after_typed = rig.snapshot();
    rig.reset(init);
    let bytes = helper.bytes().run::<T>(rig, key);
    let after_bytes = rig.snapshot();
    assert_eq!(after_typed, after_bytes, "{what}: the target region");
    match (&typed, &bytes) {
        (Ok(t), Ok(b)) => assert_eq!(t, b, "{what}: the old values"),
        (Err(t), Err(b)) => {
            assert_eq!(t.kind(), b.kind(), "{what}: {t} / {b}");
            assert_eq!(t.message(), b.message(), "{what}");
        }
        (t, b) => panic!("{what}: the helper gave {t:?}, the byte-level call {b:?}"),
    }
    typed
}

/// Small values exact in every type (negative ones wrap for unsigned).
trait Sample: AtomicValue {
    fn of(v: i8) -> Self;
}

macro_rules! sample {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn of(v: i8) -> Self {
                v as $t
            }
        }
    )*};
}

sample!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

/// How many of [`helpers_on`]'s calls are the named helpers (and slices).
const NAMED: usize = 14;

/// Every helper on `T`, the generic ones with every op of every kind, each
/// against its byte-level call. Returns (succeeded, refused).
fn helpers_on<T: Sample>(rig: &Rig<'_>) -> (usize, usize) {
    let (a, b, c) = (T::of(6), T::of(-3), T::of(9));
    let init = ne(&[a, c]);
    let mut helpers = vec![
        Helper::Add(b),
        Helper::FetchAdd(b),
        Helper::FetchMin(b),
        Helper::FetchMax(c),
        Helper::Write(b),
        Helper::Read,
        Helper::Swap(c),
        Helper::CompareSwap(a, b),
        Helper::CompareSwap(c, b),
        Helper::AtomicSlice(Op::Sum, vec![b, c]),
        Helper::FetchAtomicSlice(Op::Max, vec![b, a]),
        Helper::FetchAtomicSlice(Op::AtomicRead, vec![b, b]),
        Helper::CompareAtomicSlice(Op::Cswap, vec![a, a], vec![b, b]),
        Helper::ReadSlice(2),
    ];
    assert_eq!(helpers.len(), NAMED);
    for op in Op::ALL {
        helpers.push(Helper::Atomic(op, b));
        helpers.push(Helper::FetchAtomic(op, b));
        // Element 0 holds `a`: the compare ops take their swap branch on
        // the first call and their other branch on the second.
        helpers.push(Helper::CompareAtomic(op, a, b));
        helpers.push(Helper::CompareAtomic(op, c, b));
    }
    let (mut ok, mut refused) = (0, 0);
    for (i, h) in helpers.iter().enumerate() {
        match same_as_bytes(rig, h, &init, KEY) {
            Ok(_) => ok += 1,
            Err(e) => {
                // The named helpers are defined on every type.
                assert!(i >= NAMED, "{h:?} on {}: {e}", T::DATATYPE);
                assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{h:?}: {e}");
                refused += 1;
            }
        }
    }
    (ok, refused)
}

/// Every helper on every type against the byte-level calls.
fn every_helper_matches_the_bytes(rig: &Rig<'_>) {
    let counts = [
        helpers_on::<i8>(rig),
        helpers_on::<u8>(rig),
        helpers_on::<i16>(rig),
        helpers_on::<u16>(rig),
        helpers_on::<i32>(rig),
        helpers_on::<u32>(rig),
        helpers_on::<i64>(rig),
        helpers_on::<u64>(rig),
        helpers_on::<f32>(rig),
        helpers_on::<f64>(rig),
    ];
    // Integers: 14 named calls, then per op 4 generic calls of which the
    // kind accepts 11 (atomic) + 12 (fetch) + 2 x 7 (compare) = 37 of 76.
    for (i, c) in counts[..8].iter().enumerate() {
        assert_eq!(*c, (NAMED + 37, 76 - 37), "integer type {i}");
    }
    // Floats lose the six logical and bitwise ops in atomic and fetch
    // calls and MSWAP in compare calls: 37 - 6 - 6 - 2 = 23.
    for c in &counts[8..] {
        assert_eq!(*c, (NAMED + 23, 76 - 23), "float type");
    }
}

/// The helpers' values, spelled out (so that a helper and its byte-level
/// call cannot agree on a wrong answer unnoticed).
fn values_are_what_they_say(rig: &Rig<'_>) {
    rig.reset(&ne(&[10u64, 20]));
    let t = rig.target::<u64>(KEY);
    assert_eq!(rig.drive(t.fetch_add(5)).unwrap(), 10);
    rig.drive(t.add(u64::MAX)).unwrap(); // wraps: 15 - 1
    assert_eq!(rig.drive(t.read()).unwrap(), 14);
    assert_eq!(rig.drive(t.fetch_min(3)).unwrap(), 14);
    assert_eq!(rig.drive(t.fetch_max(8)).unwrap(), 3);
    assert_eq!(rig.drive(t.swap(100)).unwrap(), 8);
    assert_eq!(rig.drive(t.compare_swap(99, 1)).unwrap(), 100, "a miss");
    assert_eq!(rig.drive(t.compare_swap(100, 1)).unwrap(), 100, "a hit");
    rig.drive(t.write(7)).unwrap();
    assert_eq!(rig.drive(t.read_slice(2)).unwrap(), [7, 20]);
    let fetched = rig.drive(t.fetch_atomic_slice(Op::Sum, &[1, 2])).unwrap();
    assert_eq!(fetched, [7, 20]);
    assert_eq!(
        rig.snapshot()[AT as usize..AT as usize + 16],
        ne(&[8u64, 22])
    );

    rig.reset(&ne(&[1.5f64]));
    let f = rig.target::<f64>(KEY);
    assert_eq!(rig.drive(f.fetch_add(-4.0)).unwrap(), 1.5);
    assert_eq!(rig.drive(f.compare_swap(-2.5, 0.25)).unwrap(), -2.5);
    assert_eq!(rig.drive(f.read()).unwrap(), 0.25);
    rig.drive(f.write(f64::NAN)).unwrap();
    assert!(rig.drive(f.read()).unwrap().is_nan());
    // NaN equals nothing, itself included: no swap.
    assert!(rig.drive(f.compare_swap(f64::NAN, 1.0)).unwrap().is_nan());
    assert!(rig.drive(f.read()).unwrap().is_nan());

    rig.reset(&ne(&[-7i8]));
    let i = rig.target::<i8>(KEY);
    assert_eq!(rig.drive(i.fetch_atomic(Op::Prod, -2)).unwrap(), -7);
    assert_eq!(rig.drive(i.read()).unwrap(), 14);
    // Only the addressed byte changed.
    let after = rig.snapshot();
    rig.reset(&ne(&[14i8]));
    assert_eq!(after, rig.snapshot());
}

/// Refusals, each the byte-level call's: a wrong key and a region without
/// remote writes at the target (`Access`, the region untouched), pairs
/// outside the table (`OpNotSupp` before anything is sent), too many
/// elements (`MsgSize`), no elements and mismatched compare slices
/// (`Inval`).
fn refusals(rig: &Rig<'_>) {
    let init = ne(&[1u64, 2]);
    for key in [99, RO_KEY] {
        for h in [
            Helper::FetchAdd(1u64),
            Helper::Add(1),
            Helper::Read,
            Helper::CompareSwap(1, 2),
            Helper::ReadSlice(2),
        ] {
            let e = same_as_bytes(rig, &h, &init, key).expect_err("refused at the target");
            assert_eq!(e.kind(), ErrorKind::Access, "{h:?} with key {key}: {e}");
        }
    }
    let t = rig.target::<u64>(99);
    let e = rig.drive(t.fetch_add(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Access, "{e}");

    let finit = ne(&[1.0f64]);
    for h in [
        Helper::FetchAtomic(Op::Bor, 1.0f64),
        Helper::Atomic(Op::Land, 1.0),
        Helper::CompareAtomic(Op::Mswap, 1.0, 2.0),
        // Ops of the wrong call kind.
        Helper::FetchAtomic(Op::Cswap, 1.0),
        Helper::Atomic(Op::AtomicRead, 1.0),
        Helper::CompareAtomic(Op::Sum, 1.0, 2.0),
    ] {
        let e = same_as_bytes(rig, &h, &finit, KEY).expect_err("unsupported");
        assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{h:?}: {e}");
    }
    let op = rig.target::<f32>(KEY).fetch_atomic(Op::Bxor, 1.0);
    assert!(op.is_failed(), "refused before anything is sent");
    assert_eq!(rig.drive(op).unwrap_err().kind(), ErrorKind::OpNotSupp);

    let max = rig.ep.fetch_atomic_valid(Op::Sum, u32::DATATYPE).unwrap();
    let big = vec![1u32; max + 1];
    let e = same_as_bytes(rig, &Helper::FetchAtomicSlice(Op::Sum, big), &init, KEY).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");
    let cmax = rig
        .ep
        .compare_atomic_valid(Op::Cswap, u32::DATATYPE)
        .unwrap();
    let h = Helper::CompareAtomicSlice(Op::Cswap, vec![0u32; cmax + 1], vec![1; cmax + 1]);
    let e = same_as_bytes(rig, &h, &init, KEY).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");

    for h in [
        Helper::ReadSlice(0),
        Helper::AtomicSlice(Op::Sum, vec![]),
        Helper::FetchAtomicSlice(Op::Sum, vec![]),
        Helper::CompareAtomicSlice(Op::Cswap, vec![1u32], vec![1, 2]),
    ] {
        let e = same_as_bytes(rig, &h, &init, KEY).expect_err("malformed");
        assert_eq!(e.kind(), ErrorKind::Inval, "{h:?}: {e}");
    }
}

/// `THREADS` threads, each running `TASKS` tasks at once on one executor,
/// each task `ADDS` fetch-adds of 1 on one `u64`: the final value is the
/// total and every fetched value is distinct.
fn concurrent_fetch_adds(rig: &Rig<'_>) {
    const THREADS: usize = 2;
    const TASKS: usize = 4;
    const ADDS: usize = 250;
    const TOTAL: usize = THREADS * TASKS * ADDS;
    rig.reset(&[0u8; 8]);
    let counter = rig.target::<u64>(KEY);
    let fetched: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(move || -> Result<Vec<u64>> {
                    let tasks = (0..TASKS).map(|_| async move {
                        let mut got = Vec::with_capacity(ADDS);
                        for _ in 0..ADDS {
                            got.push(counter.fetch_add(1).await?);
                        }
                        Ok::<_, Error>(got)
                    });
                    let all = rig.drive(futures::future::join_all(tasks));
                    let mut out = Vec::new();
                    for task in all {
                        let got = task?;
                        assert!(got.windows(2).all(|w| w[0] < w[1]), "a task's values rise");
                        out.extend(got);
                    }
                    Ok(out)
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("thread").expect("fetch-adds"))
            .collect()
    });
    assert_eq!(rig.drive(counter.read()).unwrap(), TOTAL as u64);
    assert_eq!(fetched.len(), TOTAL);
    let distinct: HashSet<u64> = fetched.iter().copied().collect();
    assert_eq!(distinct.len(), TOTAL, "every fetched value distinct");
    assert!(distinct.iter().all(|&v| v < TOTAL as u64));
}

/// Dropped typed futures still apply (the byte-level calls' cancel
/// safety): ten dropped fetch-adds, then an awaited one sees them all.
fn dropped_futures_still_apply(rig: &Rig<'_>) {
    rig.reset(&[0u8; 8]);
    let counter = rig.target::<u64>(KEY);
    for _ in 0..10 {
        drop(counter.fetch_add(1));
    }
    drop(counter.add(1));
    // The target runs them in order of arrival.
    assert_eq!(rig.drive(counter.fetch_add(1)).unwrap(), 11);
    assert_eq!(rig.drive(counter.read()).unwrap(), 12);
}

// ----- soft engine, in this process ------------------------------------------------

fn soft_nodes() -> Nodes {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .build()
        .expect("config");
    let hints = Hints::new()
        .caps(Caps::ATOMIC)
        .engine(EngineChoice::Soft)
        .progress(ProgressKind::Manual)
        .config(config);
    let info = getinfo(Some(&hints)).expect("getinfo").remove(0);
    fabric::open_info(Cfg::MANUAL_MQ, info, 2, |_, _, b| b)
}

/// One of the checks above.
type Check = fn(&Rig<'_>);

/// Node 0 initiates, node 1 holds the regions.
fn on_soft(check: Check) {
    let n = soft_nodes();
    let mr = n[1].domain.register(vec![0u8; LEN], RW, Some(KEY)).unwrap();
    let _ro = n[1]
        .domain
        .register(vec![0u8; LEN], MrAccess::REMOTE_READ, Some(RO_KEY))
        .unwrap();
    let rig = Rig {
        ep: &n[0].ep,
        dest: n.addr(0, 1),
        mr: &mr,
        domains: n.domains(),
    };
    check(&rig);
}

#[test]
fn soft_every_helper_matches_the_bytes() {
    on_soft(every_helper_matches_the_bytes);
}

#[test]
fn soft_values_are_what_they_say() {
    on_soft(values_are_what_they_say);
}

#[test]
fn soft_refusals() {
    on_soft(refusals);
}

#[test]
fn soft_concurrent_fetch_adds() {
    on_soft(concurrent_fetch_adds);
}

#[test]
fn soft_dropped_futures_still_apply() {
    on_soft(dropped_futures_still_apply);
}

// ----- native engine, in a child process ---------------------------------------------

/// Every check above over real PSM, in a child process: one endpoint
/// targeting its own regions through a self connection.
#[test]
fn native_typed_atomics() {
    let test = "native_typed_atomics";
    if peer::role().is_none() {
        remote::launch_solo(test, true, Duration::from_secs(300), &[]);
        return;
    }
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::from_secs(1))
        .build()
        .expect("config");
    let hints = Hints::new()
        .caps(Caps::ATOMIC)
        .engine(EngineChoice::Native)
        .progress(ProgressKind::Manual)
        .config(config);
    let info = getinfo(Some(&hints)).expect("getinfo").remove(0);
    let fabric = Fabric::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    assert_eq!(domain.engine_kind(), EngineKind::Native);
    let av = domain.av(AvAttr::new()).expect("av");
    let ep = domain.endpoint(&info).bind_av(&av).enable().expect("ep");
    let me = av.insert(&[ep.getname()]).remove(0).expect("self insert");
    let mr = domain.register(vec![0u8; LEN], RW, Some(KEY)).unwrap();
    let ro = domain
        .register(vec![0u8; LEN], MrAccess::REMOTE_READ, Some(RO_KEY))
        .unwrap();
    let rig = Rig {
        ep: &ep,
        dest: me,
        mr: &mr,
        domains: vec![domain.clone()],
    };
    let checks: [(&str, Check); 5] = [
        ("every helper", every_helper_matches_the_bytes),
        ("values", values_are_what_they_say),
        ("refusals", refusals),
        ("concurrent fetch-adds", concurrent_fetch_adds),
        ("dropped futures", dropped_futures_still_apply),
    ];
    for (what, check) in checks {
        check(&rig);
        eprintln!("{test}: {what}: ok");
    }
    drop(rig);
    mr.close();
    ro.close();
    ep.close().expect("endpoint close");
    domain.close().expect("domain close");
}
