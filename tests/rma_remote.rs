//! RMA and atomics through the public API between two processes, on both
//! engines.
//!
//! The native engine (real PSM over shared memory) opens one endpoint per
//! process, so every scenario pairs two processes; the soft engine runs the
//! same scenarios across processes too. Each RMA scenario runs with
//! `tagged_rma` off (every byte in AM chunks) and on (above the chunk, the
//! bytes go over the tagged MQ).
//!
//! # How a test runs
//! On the two-process harness (`support::remote`), as `ops_remote.rs`:
//! the scenario process is the initiator, the remote the target, and the
//! scenario drives it with one-line commands ([`commands`]): register a
//! region, fill it, report an FNV hash or the bytes of a range, wait for
//! its remote-access counters, run fetch-adds on its own region (and the
//! harness's freeze, close, exit). Both processes spin in manual mode:
//! each test holds the machine-wide spin lock.
//!
//! # Sizes
//! 1 B, around the AM chunk (the engine's short AM payload: 2032 bytes on
//! the native engine, 8128 on the soft one), 1 MiB, 16 MiB and 64 MiB; the
//! soft engine's AM-chunk path stops at 16 MiB (64 MiB there took 4-5 s
//! each way in a debug build, in 2032-byte chunks).
//!
//! # The fetch-add race
//! Two processes suffice: the remote runs its fetch-adds on its own region
//! through its own endpoint, addressed through its own AV (it inserts its
//! own address: a self connection, which both engines serve; on the native
//! engine PSM's `self` device), while the scenario runs as many on the same
//! bytes from the other process. Every fetched value must be distinct and
//! the final value the sum.
//!
//! ```text
//! PSM2_DEVICES=self,shm PSMRAIL_REQUIRE_NATIVE=1 cargo test --test rma_remote
//! ```

mod support;
use support::{atomic_values, payload, remote};

use payload::{check_bytes, fnv, hex, pattern, unhex};
use remote::{remote_tests, Commands, Mode, Remote, Side, STEP};

use atomic_values::Case;

use psmrail::engine::EngineKind;
use psmrail::engine::OpBuffer;
use psmrail::fabric::{CompletionFlags, MemoryRegion, MrAccess};
use psmrail::ops::atomic::{AtomicDatatype as Dt, AtomicOp as Op};
use psmrail::{Error, ErrorKind};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long a whole scenario process may run.
const SCENARIO: Duration = Duration::from_secs(120);
const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

// ----- the remote (the target) -----------------------------------------------------------

fn err_line(e: &Error) -> String {
    format!("err {:?}", e.kind())
}

/// Runs `n` fetch-adds of 1 (u64) on the remote's own region through its
/// own endpoint (a self connection); the fetched values, or the error.
fn self_adds(side: &Side, key: u64, offset: u64, n: usize) -> Result<Vec<u64>, Error> {
    let me = side.av.insert(&[side.ep.getname()]).remove(0)?;
    let one = 1u64.to_ne_bytes();
    let mut got = Vec::with_capacity(n);
    for _ in 0..n {
        let op = side
            .ep
            .fetch_atomic(me, Op::Sum, Dt::Uint64, &one, vec![0u8; 8], offset, key);
        let (r, buf) = side.block_on(op);
        r?;
        got.push(u64::from_ne_bytes(
            buf.as_slice().try_into().expect("8 bytes"),
        ));
        // On the native engine a self request completes inside the call
        // (PSM's `self` device runs the handlers there), so awaiting it
        // never polls shared memory: without this progress call the
        // scenario's requests wait until all of these are done, and the two
        // runs never overlap.
        side.idle();
    }
    Ok(got)
}

/// The remote's commands: regions are named by their keys.
fn commands(side: &Side) -> Commands<'_> {
    let mut regions: HashMap<u64, MemoryRegion> = HashMap::new();
    Box::new(move |w: &[&str]| {
        let num = |i: usize| support::peer::num(w[i]);
        let region = |key: u64| regions.get(&key).expect("no such region");
        match w[0] {
            // reg <key> <len> <r|w|rw>: a zeroed region.
            "reg" => {
                let access = match w[3] {
                    "r" => MrAccess::REMOTE_READ,
                    "w" => MrAccess::REMOTE_WRITE,
                    _ => RW,
                };
                match side
                    .domain
                    .register(vec![0u8; num(2) as usize], access, Some(num(1)))
                {
                    Ok(mr) => {
                        regions.insert(num(1), mr);
                        "ok".into()
                    }
                    Err(e) => err_line(&e),
                }
            }
            // fill <key> <seed>: the whole region with a pattern.
            "fill" => {
                let mr = region(num(1));
                mr.write_at(0, &pattern(mr.len(), num(2)))
                    .expect("write_at");
                "ok".into()
            }
            // hash <key> <offset> <len>
            "hash" => {
                let mut v = vec![0u8; num(3) as usize];
                match region(num(1)).read_at(num(2) as usize, &mut v) {
                    Ok(()) => format!("hash {:#x}", fnv(&v)),
                    Err(e) => err_line(&e),
                }
            }
            // get <key> <offset> <len>: the bytes in hex.
            "get" => {
                let mut v = vec![0u8; num(3) as usize];
                region(num(1))
                    .read_at(num(2) as usize, &mut v)
                    .expect("read_at");
                format!("bytes {}", hex(&v))
            }
            // set <key> <offset> <hex>
            "set" => {
                region(num(1))
                    .write_at(num(2) as usize, &unhex(w[3]))
                    .expect("write_at");
                "ok".into()
            }
            // adds <key> <offset> <n>: `vals v,v,...` or the error.
            "adds" => match self_adds(side, num(1), num(2), num(3) as usize) {
                Ok(v) => {
                    let v: Vec<String> = v.iter().map(u64::to_string).collect();
                    format!("vals {}", v.join(","))
                }
                Err(e) => format!("err {:?} {e}", e.kind()),
            },
            // cqdata: waits (bounded) for a receive-CQ entry; `cq <flags>
            // <data> <len> <source>`.
            "cqdata" => {
                let deadline = Instant::now() + STEP;
                loop {
                    match side.cq.read() {
                        Ok(Some(e)) => {
                            break format!(
                                "cq {:#x} {:#x} {} {}",
                                e.flags.bits(),
                                e.data,
                                e.len,
                                e.source.0
                            )
                        }
                        Ok(None) if Instant::now() < deadline => side.idle(),
                        Ok(None) => break "nocq".into(),
                        Err(e) => break err_line(&e),
                    }
                }
            }
            // counters <writes> <reads>: waits (bounded) until the remote
            // access counters reach these, then says what they are.
            "counters" => {
                let deadline = Instant::now() + STEP;
                while (side.remote_writes.read() < num(1) || side.remote_reads.read() < num(2))
                    && Instant::now() < deadline
                {
                    side.idle();
                }
                format!(
                    "cnt {} {}",
                    side.remote_writes.read(),
                    side.remote_reads.read()
                )
            }
            other => panic!("remote: unknown command {other:?}"),
        }
    })
}

/// The scenario's side of [`commands`].
impl Remote {
    /// A command whose reply must be `ok`.
    fn ok(&mut self, side: &Side, line: &str) {
        self.expect(side, line, "ok");
    }

    /// The FNV hash of a range of a remote region.
    fn hash(&mut self, side: &Side, key: u64, offset: usize, len: usize) -> u64 {
        let reply = self.cmd(side, &format!("hash {key} {offset} {len}"));
        let h = reply
            .strip_prefix("hash 0x")
            .unwrap_or_else(|| panic!("hash: {reply}"));
        u64::from_str_radix(h, 16).expect("hash")
    }

    /// The bytes of a range of a remote region.
    fn get(&mut self, side: &Side, key: u64, offset: usize, len: usize) -> Vec<u8> {
        let reply = self.cmd(side, &format!("get {key} {offset} {len}"));
        unhex(reply.strip_prefix("bytes ").expect("bytes"))
    }

    /// Waits for the remote's access counters to reach `(writes, reads)`;
    /// what they are then.
    fn counters(&mut self, side: &Side, writes: u64, reads: u64) -> (u64, u64) {
        let reply = self.cmd(side, &format!("counters {writes} {reads}"));
        let w: Vec<u64> = reply
            .strip_prefix("cnt ")
            .expect("counters")
            .split(' ')
            .map(|s| s.parse().unwrap())
            .collect();
        (w[0], w[1])
    }
}

// ----- scenarios ------------------------------------------------------------------------------

const MIB: usize = 1 << 20;

/// The AM chunk of the RMA protocol (`src/proto/rma`): the engine's short
/// AM payload, which `atomic_valid` on bytes reports too.
fn chunk(side: &Side) -> usize {
    side.ep
        .atomic_valid(Op::Sum, Dt::Uint8)
        .expect("atomic_valid")
}

/// Write-then-read sizes: around the AM chunk, and large.
fn sizes_around(chunk: usize) -> [usize; 7] {
    [1, chunk - 1, chunk, chunk + 1, MIB, 16 * MIB, 64 * MIB]
}

/// The largest size on the soft engine's AM-chunk path: 64 MiB took 4-5 s
/// each way there in a debug build (in 2032-byte chunks; the native
/// engine under 1 s), which would double this file's run time, so the soft
/// engine stops at 16 MiB on that path (see [`sizes`]).
const SOFT_AM_MAX: usize = 16 * MIB;

/// Writes then reads back every size at an odd offset; the remote hashes
/// what landed, the read-back is checked byte for byte; the remote's
/// access counters (`FI_RMA_EVENT`) count every operation.
fn sizes(test: &str, side: &Side, remote: &mut Remote) {
    const AT: usize = 3;
    let tagged = side.domain.info().config().tagged_rma();
    let native = side.domain.engine_kind() == EngineKind::Native;
    let sizes: Vec<usize> = sizes_around(chunk(side))
        .into_iter()
        .filter(|&l| tagged || native || l <= SOFT_AM_MAX)
        .collect();
    let max = *sizes.last().unwrap();
    remote.ok(side, &format!("reg 1 {} rw", max + AT + 5));
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, 20 + i as u64);
        let t = Instant::now();
        let (r, buf) = side.block_on(side.ep.write(remote.fi, data.clone(), AT as u64, 1));
        r.unwrap_or_else(|e| panic!("write of {len} B: {e}"));
        let tw = t.elapsed();
        assert_eq!(buf.len(), len, "the write's buffer comes back");
        assert_eq!(
            remote.hash(side, 1, AT, len),
            fnv(&data),
            "write of {len} B: the remote region differs"
        );
        let t = Instant::now();
        let (r, back) = side.block_on(side.ep.read(remote.fi, vec![0u8; len], AT as u64, 1));
        r.unwrap_or_else(|e| panic!("read of {len} B: {e}"));
        let tr = t.elapsed();
        check_bytes(back.as_slice(), &data, &format!("read of {len} B"));
        if len >= MIB {
            eprintln!("{test}: {len} B write {tw:?}, read {tr:?}");
        }
    }
    // The bytes around the written ranges were never touched.
    assert_eq!(
        remote.get(side, 1, 0, AT),
        vec![0u8; AT],
        "before the range"
    );
    let n = sizes.len() as u64;
    assert_eq!(
        remote.counters(side, n, n),
        (n, n),
        "remote access counters"
    );
}

/// A program that waited for its read and then writes the same range:
/// the write must succeed, however soon after the read it comes (the
/// target's own send of the read's data may still be finishing), and the
/// region ends with every write's bytes. Looped, 4 MiB (the long,
/// tagged-MQ path when tagged RMA is on) and a size around the AM chunk.
fn read_then_write(_test: &str, side: &Side, remote: &mut Remote) {
    const LEN: usize = 4 * MIB;
    remote.ok(side, &format!("reg 1 {LEN} rw"));
    let small = chunk(side) + 1;
    for round in 0..12u64 {
        for len in [LEN, small] {
            let (r, back) = side.block_on(side.ep.read(remote.fi, vec![0u8; len], 0, 1));
            r.unwrap_or_else(|e| panic!("round {round}: read of {len} B: {e}"));
            assert_eq!(back.len(), len);
            let data = pattern(len, 200 + round);
            let (r, _) = side.block_on(side.ep.write(remote.fi, data.clone(), 0, 1));
            r.unwrap_or_else(|e| panic!("round {round}: write of {len} B right after a read: {e}"));
            assert_eq!(
                remote.hash(side, 1, 0, len),
                fnv(&data),
                "round {round}: the write of {len} B landed"
            );
        }
    }
}

/// Refused writes and reads (bad key, out of range, missing access) fail
/// with `FI_EACCES` at the initiator and leave the remote's regions
/// unchanged; a permitted read still works afterwards.
fn refusals(_test: &str, side: &Side, remote: &mut Remote) {
    const LEN: usize = 64 << 10;
    remote.ok(side, &format!("reg 1 {LEN} rw"));
    remote.ok(side, &format!("reg 2 {LEN} r"));
    remote.ok(side, &format!("reg 3 {LEN} w"));
    remote.ok(side, "fill 1 3");
    remote.ok(side, "fill 2 4");
    remote.ok(side, "fill 3 5");
    let before: Vec<u64> = (1..=3).map(|k| remote.hash(side, k, 0, LEN)).collect();
    let dest = remote.fi;
    // Below the chunk, just above it, and long (the tagged path when on).
    for len in [100, chunk(side) + 1, 32 << 10] {
        let cases = [
            (99, 0u64, "bad key"),
            (1, (LEN - len) as u64 + 1, "one past the end"),
            (1, 1 << 40, "far past the end"),
            (2, 0, "no FI_REMOTE_WRITE"),
        ];
        for (key, at, what) in cases {
            let (r, buf) = side.block_on(side.ep.write(dest, vec![0xeeu8; len], at, key));
            let e = r.expect_err(what);
            assert_eq!(e.kind(), ErrorKind::Access, "write, {what} ({len} B): {e}");
            assert_eq!(buf.len(), len, "the buffer comes back");
        }
        let cases = [
            (99, 0u64, "bad key"),
            (1, (LEN - len) as u64 + 1, "one past the end"),
            (3, 0, "no FI_REMOTE_READ"),
        ];
        for (key, at, what) in cases {
            let (r, _) = side.block_on(side.ep.read(dest, vec![0u8; len], at, key));
            let e = r.expect_err(what);
            assert_eq!(e.kind(), ErrorKind::Access, "read, {what} ({len} B): {e}");
        }
    }
    // Atomics are checked the same way.
    let one = 1u64.to_ne_bytes();
    for (key, at, what) in [
        (99, 0u64, "bad key"),
        (1, LEN as u64 - 4, "past the end"),
        (2, 0, "no FI_REMOTE_WRITE"),
    ] {
        let op = side
            .ep
            .fetch_atomic(dest, Op::Sum, Dt::Uint64, &one, vec![0u8; 8], at, key);
        let (r, _) = side.block_on(op);
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Access, "fetch-add, {what}: {e}");
    }
    let after: Vec<u64> = (1..=3).map(|k| remote.hash(side, k, 0, LEN)).collect();
    assert_eq!(
        after, before,
        "refused operations changed the remote regions"
    );
    // A permitted read still works.
    let (r, back) = side.block_on(side.ep.read(dest, vec![0u8; 5000], 7, 2));
    r.expect("read of the read-only region");
    check_bytes(back.as_slice(), &pattern(LEN, 4)[7..5007], "permitted read");
}

/// How many fetch-adds each process runs in [`fetch_add_race`].
const ADDS: usize = 10_000;

/// The remote fetch-adds on its own region (self connection) while this
/// process fetch-adds on the same u64 from the other process: the final
/// value is the total and all fetched values are distinct.
fn fetch_add_race(test: &str, side: &Side, remote: &mut Remote) {
    remote.ok(side, "reg 5 64 rw");
    const AT: u64 = 24;
    // The connection is up before the race (the value starts at 0).
    let op = side.ep.fetch_atomic(
        remote.fi,
        Op::AtomicRead,
        Dt::Uint64,
        &[],
        vec![0u8; 8],
        AT,
        5,
    );
    let (r, buf) = side.block_on(op);
    r.expect("atomic read");
    assert_eq!(buf.as_slice(), 0u64.to_ne_bytes(), "the initial value");
    // Both run at once: the remote's reply comes when it has done its part.
    remote.send(&format!("adds 5 {AT} {ADDS}"));
    let one = 1u64.to_ne_bytes();
    let t = Instant::now();
    let mut mine = Vec::with_capacity(ADDS);
    for k in 0..ADDS {
        let op = side
            .ep
            .fetch_atomic(remote.fi, Op::Sum, Dt::Uint64, &one, vec![0u8; 8], AT, 5);
        let (r, buf) = side.block_on(op);
        r.unwrap_or_else(|e| panic!("fetch-add {k}: {e}"));
        mine.push(u64::from_ne_bytes(buf.as_slice().try_into().unwrap()));
    }
    eprintln!("{test}: {ADDS} fetch-adds here took {:?}", t.elapsed());
    let reply = remote.reply(side);
    let theirs: Vec<u64> = reply
        .strip_prefix("vals ")
        .unwrap_or_else(|| panic!("the remote's fetch-adds: {reply}"))
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), ADDS, "the remote's fetched values");
    // How much the two runs overlapped (for the log: scheduling decides,
    // so it is not asserted): the times one process's value follows the
    // other's in the global order.
    let mut order: Vec<(u64, bool)> = mine.iter().map(|&v| (v, true)).collect();
    order.extend(theirs.iter().map(|&v| (v, false)));
    order.sort_unstable();
    let switches = order.windows(2).filter(|w| w[0].1 != w[1].1).count();
    eprintln!(
        "{test}: the two processes alternated {switches} times (values here {}..={}, there {}..={})",
        mine[0],
        mine[ADDS - 1],
        theirs[0],
        theirs[ADDS - 1]
    );
    // Each process sees its own values increase.
    assert!(mine.windows(2).all(|w| w[0] < w[1]), "fetched values here");
    assert!(
        theirs.windows(2).all(|w| w[0] < w[1]),
        "the remote's values"
    );
    let all: HashSet<u64> = mine.iter().chain(&theirs).copied().collect();
    assert_eq!(all.len(), 2 * ADDS, "fetched values are not all distinct");
    assert!(
        all.iter().all(|&v| v < 2 * ADDS as u64),
        "a value out of range"
    );
    let total = (2 * ADDS) as u64;
    assert_eq!(
        remote.get(side, 5, AT as usize, 8),
        total.to_ne_bytes(),
        "the final value"
    );
    // The neighbours are untouched.
    assert_eq!(remote.get(side, 5, 0, AT as usize), vec![0u8; AT as usize]);
    // And an atomic read from here agrees.
    let op = side.ep.fetch_atomic(
        remote.fi,
        Op::AtomicRead,
        Dt::Uint64,
        &[],
        vec![0u8; 8],
        AT,
        5,
    );
    let (r, buf) = side.block_on(op);
    r.expect("atomic read");
    assert_eq!(buf.as_slice(), total.to_ne_bytes());
}

/// Compare-swap and min on i32 and f64 across processes, with the old
/// values fetched and the target checked after each.
fn cswap_min(_test: &str, side: &Side, remote: &mut Remote) {
    remote.ok(side, "reg 6 64 rw");
    let dest = remote.fi;
    let cswap = |dt: Dt, at: u64, operand: &[u8], compare: &[u8]| -> Vec<u8> {
        let op = side.ep.compare_atomic(
            dest,
            Op::Cswap,
            dt,
            operand,
            compare,
            vec![0u8; operand.len()],
            at,
            6,
        );
        let (r, old) = side.block_on(op);
        r.unwrap_or_else(|e| panic!("cswap on {dt}: {e}"));
        old.as_slice().to_vec()
    };
    let min = |dt: Dt, at: u64, operand: &[u8]| -> Vec<u8> {
        let op = side
            .ep
            .fetch_atomic(dest, Op::Min, dt, operand, vec![0u8; operand.len()], at, 6);
        let (r, old) = side.block_on(op);
        r.unwrap_or_else(|e| panic!("min on {dt}: {e}"));
        old.as_slice().to_vec()
    };

    // i32 at 8: 7 -> cswap(7 -> 42) -> cswap(7 -> 99) misses -> min(-10).
    remote.ok(side, &format!("set 6 8 {}", hex(&7i32.to_ne_bytes())));
    let i = |v: i32| v.to_ne_bytes().to_vec();
    assert_eq!(cswap(Dt::Int32, 8, &i(42), &i(7)), i(7), "i32 cswap: old");
    assert_eq!(remote.get(side, 6, 8, 4), i(42), "i32 cswap: swapped");
    assert_eq!(cswap(Dt::Int32, 8, &i(99), &i(7)), i(42), "i32 cswap miss");
    assert_eq!(remote.get(side, 6, 8, 4), i(42), "i32 cswap miss: kept");
    assert_eq!(min(Dt::Int32, 8, &i(-10)), i(42), "i32 min: old");
    assert_eq!(remote.get(side, 6, 8, 4), i(-10), "i32 min: taken");
    assert_eq!(min(Dt::Int32, 8, &i(5)), i(-10), "i32 min: old");
    assert_eq!(remote.get(side, 6, 8, 4), i(-10), "i32 min: kept");

    // f64 at 16: 1.5 -> cswap(1.5 -> 2.25) -> cswap(1.5 -> 9) misses ->
    // min(-0.5) -> min(3.0) keeps.
    let f = |v: f64| v.to_ne_bytes().to_vec();
    remote.ok(side, &format!("set 6 16 {}", hex(&f(1.5))));
    assert_eq!(
        cswap(Dt::Double, 16, &f(2.25), &f(1.5)),
        f(1.5),
        "f64 cswap"
    );
    assert_eq!(remote.get(side, 6, 16, 8), f(2.25), "f64 cswap: swapped");
    assert_eq!(cswap(Dt::Double, 16, &f(9.0), &f(1.5)), f(2.25), "f64 miss");
    assert_eq!(remote.get(side, 6, 16, 8), f(2.25), "f64 cswap miss: kept");
    assert_eq!(min(Dt::Double, 16, &f(-0.5)), f(2.25), "f64 min: old");
    assert_eq!(remote.get(side, 6, 16, 8), f(-0.5), "f64 min: taken");
    assert_eq!(min(Dt::Double, 16, &f(3.0)), f(-0.5), "f64 min: old");
    assert_eq!(remote.get(side, 6, 16, 8), f(-0.5), "f64 min: kept");

    // Nothing else in the region moved.
    let all = remote.get(side, 6, 0, 64);
    assert!(all[..8].iter().chain(&all[24..]).all(|&b| b == 0));
}

/// Every atomic kind x op x datatype against the other process's memory,
/// checked against the result computed here with the same `apply` the target
/// uses: the whole 64-byte region after each operation, and the fetched old
/// values. Pairs outside the op x datatype table are refused with
/// `FI_EOPNOTSUPP`, the target untouched.
fn every_atomic_pair(test: &str, side: &Side, remote: &mut Remote) {
    remote.ok(side, "reg 7 64 rw");
    let (mut supported, mut refused) = (0, 0);
    for case in Case::all() {
        let what = case.name();
        remote.ok(side, &format!("set 7 16 {}", hex(&case.init)));
        let before = remote.get(side, 7, 0, 64);
        let (r, old) = side.block_on(case.post(&side.ep, remote.fi, 16, 7));
        if !case.supported() {
            let e = r.expect_err(&what);
            assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{what}: {e}");
            assert_eq!(remote.get(side, 7, 0, 64), before, "{what}: untouched");
            refused += 1;
            continue;
        }
        r.unwrap_or_else(|e| panic!("{what}: {e}"));
        let (want, want_old) = case.expected(&before, 16);
        assert_eq!(remote.get(side, 7, 0, 64), want, "{what}: target memory");
        if case.kind.fetches() {
            assert_eq!(old.as_slice(), &want_old[..], "{what}: old values");
        }
        supported += 1;
    }
    eprintln!("{test}: {supported} pairs executed, {refused} refused");
    assert_eq!((supported, refused), (292, 68));
}

/// `writedata` below the AM chunk and above it (the tagged path when on): the
/// remote's receive CQ gets one `FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA`
/// entry with the data, the length and this side as source, after the bytes
/// landed. The length is the operation's on the tagged path, the last chunk's
/// on the AM path (as in C, `prov/psm/src/psmx_rma.c`: the target only sees the
/// last chunk then), which shows the chunk size.
fn writedata(_test: &str, side: &Side, remote: &mut Remote) {
    let chunk = chunk(side);
    let tagged = side.domain.info().config().tagged_rma();
    remote.ok(side, "reg 1 70000 rw");
    for (k, len) in [100usize, chunk + 1, 64 << 10].into_iter().enumerate() {
        let data = 0xd00d_0000_0000_0000 | k as u64;
        let bytes = pattern(len, 40 + k as u64);
        let (r, buf) = side.block_on(side.ep.writedata(remote.fi, bytes.clone(), 5, 1, data));
        r.unwrap_or_else(|e| panic!("writedata of {len} B: {e}"));
        assert_eq!(buf.len(), len, "the buffer comes back");
        let reply = remote.cmd(side, "cqdata");
        let want =
            CompletionFlags::REMOTE_WRITE | CompletionFlags::RMA | CompletionFlags::REMOTE_CQ_DATA;
        let reported = if tagged && len > chunk {
            len
        } else {
            (len - 1) % chunk + 1
        };
        assert_eq!(
            reply,
            format!("cq {:#x} {data:#x} {reported} {}", want.bits(), remote.me.0),
            "the remote's CQ entry for writedata of {len} B"
        );
        assert_eq!(
            remote.hash(side, 1, 5, len),
            fnv(&bytes),
            "writedata of {len} B"
        );
    }
}

/// How long operations towards a dead peer may take to fail: ten times
/// the scenarios' `FI_PSM_TIMEOUT` (1 s). Not a timing test: a bound that
/// catches "never".
const DEAD_BOUND: Duration = Duration::from_secs(10);

/// An error saying the peer is gone (`FI_EIO`, naming it).
fn expect_gone<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.kind(), ErrorKind::Io, "{what}: {e}");
    assert!(e.message().contains("is gone"), "{what}: {e}");
    eprintln!("{what}: {e}");
}

/// A write and a read of 1 MiB and a fetch-add are in flight towards the
/// remote, which does not progress, when it dies (`close`: its domain
/// closes and its process lives on; else it is killed): each fails with
/// `FI_EIO` naming the peer within [`DEAD_BOUND`], its buffer handed back
/// whole (none was lent to the engine: the remote never answered), and
/// later operations towards it fail at once.
fn dead_target_with(test: &str, side: &Side, remote: &mut Remote, close: bool) {
    const LEN: usize = MIB;
    remote.ok(side, &format!("reg 1 {LEN} rw"));
    remote.ok(side, "reg 5 64 rw");
    assert_eq!(remote.cmd(side, "freeze"), "frozen");
    let one = 1u64.to_ne_bytes();
    let mut ops = [
        (
            "write",
            side.ep.write(remote.fi, pattern(LEN, 1), 0, 1),
            LEN,
        ),
        ("read", side.ep.read(remote.fi, vec![0u8; LEN], 0, 1), LEN),
        (
            "fetch-add",
            side.ep
                .fetch_atomic(remote.fi, Op::Sum, Dt::Uint64, &one, vec![0u8; 8], 0, 5),
            8,
        ),
    ];
    // And a write posted the libfabric way: its completion goes to the CQ.
    side.ep
        .post_write(remote.fi, pattern(LEN, 2), 0, 1, 0xbeef)
        .map_err(|e| e.error)
        .expect("post_write");
    let errors_before = side.writes.read_err();
    for _ in 0..100 {
        side.idle();
    }
    if close {
        assert_eq!(remote.cmd(side, "close"), "closed");
    } else {
        remote.kill();
    }
    let t = Instant::now();
    for (what, op, len) in &mut ops {
        let (r, buf) = side
            .poll_for(op, DEAD_BOUND)
            .unwrap_or_else(|| panic!("{what}: still pending {DEAD_BOUND:?} after the peer died"));
        expect_gone(r, what);
        assert_eq!(buf.len(), *len, "{what}: the buffer comes back");
    }
    let entry = side.cq_error_within(DEAD_BOUND, "a posted write");
    assert_eq!(entry.context, 0xbeef);
    assert_eq!(
        entry.buffer.map(|b| b.len()),
        Some(LEN),
        "the posted write's buffer"
    );
    expect_gone::<()>(Err(entry.error), "a posted write");
    eprintln!("{test}: failed after {:?}", t.elapsed());
    // The write future and the posted write counted as errors.
    assert_eq!(
        side.writes.read_err() - errors_before,
        2,
        "write counter errors"
    );
    let later = side.ep.write(remote.fi, vec![1u8; 16], 0, 1);
    assert!(later.is_failed(), "a later write was started");
    let (r, buf): (Result<(), Error>, OpBuffer) = side.block_on(later);
    expect_gone(r, "a later write");
    assert_eq!(buf.len(), 16);
    let later = side
        .ep
        .fetch_atomic(remote.fi, Op::Sum, Dt::Uint64, &one, vec![0u8; 8], 0, 5);
    assert!(later.is_failed(), "a later fetch-add was started");
    expect_gone(side.block_on(later).0, "a later fetch-add");
    if close {
        remote.exit(side);
    }
}

/// [`dead_target_with`], the remote killed.
fn dead_target(test: &str, side: &Side, remote: &mut Remote) {
    dead_target_with(test, side, remote, false);
}

/// [`dead_target_with`], the remote's domain closed, its process alive.
fn closed_target(test: &str, side: &Side, remote: &mut Remote) {
    dead_target_with(test, side, remote, true);
}

// ----- tests ----------------------------------------------------------------------------------

use remote::Eng::{Native, Soft};

remote_tests! {
    limit: SCENARIO, commands: commands;

    native_sizes_am: Mode::rma(Native) => sizes;
    native_sizes_tagged: Mode::rma(Native).tagged_rma() => sizes;
    native_read_then_write_am: Mode::rma(Native) => read_then_write;
    native_read_then_write_tagged: Mode::rma(Native).tagged_rma() => read_then_write;
    native_refusals_am: Mode::rma(Native) => refusals;
    native_refusals_tagged: Mode::rma(Native).tagged_rma() => refusals;
    native_fetch_add_race: Mode::rma(Native) => fetch_add_race;
    native_cswap_min: Mode::rma(Native) => cswap_min;
    native_every_atomic_pair: Mode::rma(Native) => every_atomic_pair;
    native_writedata_am: Mode::rma(Native) => writedata;
    native_writedata_tagged: Mode::rma(Native).tagged_rma() => writedata;
    native_dead_target_am: Mode::rma(Native) => dead_target;
    native_dead_target_tagged: Mode::rma(Native).tagged_rma() => dead_target;
    native_closed_target_am: Mode::rma(Native) => closed_target;
    native_closed_target_tagged: Mode::rma(Native).tagged_rma() => closed_target;

    soft_sizes_am: Mode::rma(Soft) => sizes;
    soft_sizes_tagged: Mode::rma(Soft).tagged_rma() => sizes;
    soft_read_then_write_am: Mode::rma(Soft) => read_then_write;
    soft_read_then_write_tagged: Mode::rma(Soft).tagged_rma() => read_then_write;
    soft_refusals_am: Mode::rma(Soft) => refusals;
    soft_refusals_tagged: Mode::rma(Soft).tagged_rma() => refusals;
    soft_fetch_add_race: Mode::rma(Soft) => fetch_add_race;
    soft_cswap_min: Mode::rma(Soft) => cswap_min;
    soft_every_atomic_pair: Mode::rma(Soft) => every_atomic_pair;
    soft_writedata_am: Mode::rma(Soft) => writedata;
    soft_writedata_tagged: Mode::rma(Soft).tagged_rma() => writedata;
    soft_dead_target_am: Mode::rma(Soft) => dead_target;
    soft_dead_target_tagged: Mode::rma(Soft).tagged_rma() => dead_target;
    soft_closed_target_am: Mode::rma(Soft) => closed_target;
    soft_closed_target_tagged: Mode::rma(Soft).tagged_rma() => closed_target;
}
