//! Tests of the manual-mode fast path (`poll_op` / `poll_completion`) and
//! of `inject` on real PSM, plus the contract's default versions of both
//! on the soft engine.
//!
//! PSM allows one endpoint per process here and keeps process-wide state,
//! so each native scenario runs in a child process of this test binary
//! ([`isolated`]), talking to itself over PSM's `self` device. Without the
//! library the tests print why and pass; with `PSMRAIL_REQUIRE_NATIVE=1`
//! that is a failure.

use super::{NativeEndpoint, NativeEngine};
use crate::engine::soft::SoftEngine;
use crate::engine::{
    EndpointOptions, Engine, EngineEndpoint, MqCompletion, OpBuffer, PeerAddr, SendMode,
    StableRegion, TagMatch,
};
use crate::reactor::{AutoProgress, OpKey, OpStatus, ProgressMode, ProgressSource, Reactor};
use crate::ErrorKind;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Set in the child process that runs a scenario.
const CHILD_VAR: &str = "PSMRAIL_NATIVE_FAST_CHILD";
/// How long any one wait may take before the scenario fails.
pub(super) const PATIENCE: Duration = Duration::from_secs(30);

/// Runs `body` in a child process of this test binary (filtered to exactly
/// `test`, which must be this test's full path); in that child, runs it.
pub(super) fn isolated(test: &str, body: impl FnOnce()) {
    if std::env::var_os(CHILD_VAR).is_some() {
        return body();
    }
    if let Err(e) = psm_sys::PsmLibrary::load() {
        let required = std::env::var("PSMRAIL_REQUIRE_NATIVE").is_ok_and(|v| v == "1");
        assert!(!required, "PSMRAIL_REQUIRE_NATIVE=1 but {e}");
        eprintln!("SKIPPED: {e}");
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, "1");
    if std::env::var_os("PSM2_DEVICES").is_none() {
        cmd.env("PSM2_DEVICES", "self,shm");
    }
    // Small enough that a leaked send request per operation shows within
    // a few thousand operations (libpsm2 aborts when they run out).
    cmd.env("PSM2_MQ_SENDREQS_MAX", "1024");
    let status = cmd.status().expect("spawn the scenario process");
    assert!(status.success(), "{test} failed in its process: {status}");
}

fn options() -> EndpointOptions {
    EndpointOptions {
        uuid: *b"psmrail-fastpath",
        unit: None,
        port: None,
        close_timeout: Duration::from_secs(2),
    }
}

/// An endpoint with a reactor in `mode`, connected to itself.
pub(super) fn open_self(mode: ProgressMode) -> (Arc<NativeEndpoint>, Reactor, PeerAddr) {
    let engine = NativeEngine::load().expect("the native engine loads");
    let (ep, reactor) = engine
        .open_with_reactor(&options(), mode)
        .expect("open an endpoint");
    let me = ep
        .connect(&[ep.epid()], PATIENCE)
        .remove(0)
        .expect("connect to self");
    (ep, reactor, me)
}

pub(super) fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n).map(|i| (i as u64 ^ seed) as u8).collect()
}

pub(super) fn irecv<P: EngineEndpoint + ?Sized>(ep: &P, tag: u64, buffer: OpBuffer) -> OpKey {
    let key = ep.completions().insert();
    if let Err(e) = ep.irecv(TagMatch::exact(tag), buffer, key) {
        panic!("irecv: {}", e.error);
    }
    key
}

pub(super) fn isend<P: EngineEndpoint + ?Sized>(
    ep: &P,
    peer: PeerAddr,
    tag: u64,
    data: Vec<u8>,
) -> OpKey {
    let key = ep.completions().insert();
    if let Err(e) = ep.isend(peer, tag, SendMode::Standard, OpBuffer::from(data), key) {
        panic!("isend: {}", e.error);
    }
    key
}

/// Polls `key` through the fast path until it completes (manual mode: a
/// noop waker, each poll its own step).
pub(super) fn wait_fast<P: EngineEndpoint + ?Sized>(
    ep: &P,
    reactor: &Reactor,
    key: OpKey,
) -> MqCompletion {
    let mut cx = Context::from_waker(Waker::noop());
    let start = Instant::now();
    loop {
        if let Poll::Ready(c) = ep.poll_completion(reactor, key, &mut cx) {
            return c;
        }
        assert!(start.elapsed() < PATIENCE, "{key:?} did not complete");
    }
}

/// Checks a receive's completion; its bytes.
pub(super) fn check_recv(
    c: MqCompletion,
    tag: u64,
    want: &[u8],
    source: Option<PeerAddr>,
) -> Vec<u8> {
    assert_eq!(c.status.error, None, "{:?}", c.status);
    assert_eq!(c.status.tag, tag);
    assert_eq!(c.status.msg_len, want.len() as u64);
    assert_eq!(c.status.nbytes, want.len());
    if let Some(s) = source {
        assert_eq!(c.status.source, Some(s));
    }
    let got = c.buffer.into_vec().expect("a vector");
    assert!(got == want, "{} bytes with tag {tag:#x} differ", want.len());
    got
}

/// A stable region whose drop can be watched (through its `Arc` count).
struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn new(len: usize) -> Arc<Region> {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let len = b.len();
        Arc::new(Region {
            ptr: Box::into_raw(b).cast(),
            len,
        })
    }
}

// SAFETY: the memory is a leaked boxed slice, reclaimed only in `drop`;
// the pointer never changes and is valid for `len` bytes meanwhile.
unsafe impl StableRegion for Region {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the region is plain heap memory; PSM writes it only while an
// engine holds the buffer, and the test reads nothing meanwhile.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a boxed slice.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

#[test]
fn fast_path_moves_every_size_to_self() {
    isolated(
        "engine::native::fast_tests::fast_path_moves_every_size_to_self",
        || {
            let (ep, r, me) = open_self(ProgressMode::Manual);
            assert_eq!(ep.max_inject(), 64);
            let source = ep.reports_source().then_some(me);
            let eager = ep.limits().eager_threshold;
            for (i, n) in [0usize, 1, 8, 64, 65, 8 << 10, 4 * eager + 1]
                .into_iter()
                .enumerate()
            {
                let tag = 0x700 + i as u64;
                let data = pattern(n, tag);
                let rk = irecv(&*ep, tag, OpBuffer::from(vec![0u8; n]));
                if n <= ep.max_inject() {
                    ep.inject(me, tag, &data).expect("inject");
                    check_recv(wait_fast(&*ep, &r, rk), tag, &data, source);
                } else {
                    let sk = isend(&*ep, me, tag, data.clone());
                    check_recv(wait_fast(&*ep, &r, rk), tag, &data, source);
                    let s = wait_fast(&*ep, &r, sk);
                    assert_eq!(s.status.error, None, "{:?}", s.status);
                    assert_eq!(s.status.nbytes, n);
                    assert!(s.buffer.into_vec().expect("a vector") == data);
                }
            }
            // Injected before the receive: unexpected, still delivered.
            ep.inject(me, 0x7ff, b"early").unwrap();
            let rk = irecv(&*ep, 0x7ff, OpBuffer::from(vec![0u8; 5]));
            check_recv(wait_fast(&*ep, &r, rk), 0x7ff, b"early", source);
            // An inject to oneself is an isend whose key was abandoned:
            // the next harvest spends it.
            let deadline = Instant::now() + PATIENCE;
            while ep.in_flight() != 0 || !ep.completions().is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "the inject's request was never harvested"
                );
                ep.progress();
            }
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

#[test]
fn fast_path_and_harvest_share_the_work() {
    isolated(
        "engine::native::fast_tests::fast_path_and_harvest_share_the_work",
        || {
            let (ep, r, me) = open_self(ProgressMode::Manual);
            let table = ep.completions().clone();
            // Harvested into the table by a progress round first: the fast
            // path then finds it there.
            let rk = irecv(&*ep, 1, OpBuffer::from(vec![0u8; 4]));
            ep.inject(me, 1, b"one!").unwrap();
            let start = Instant::now();
            while table.status(rk) != OpStatus::Complete {
                r.progress();
                assert!(start.elapsed() < PATIENCE, "not harvested");
            }
            let c = ep.poll_op(rk).expect("taken from the table");
            check_recv(c, 1, b"one!", None);
            // Taken by the fast path first: later rounds find nothing.
            let rk = irecv(&*ep, 2, OpBuffer::from(vec![0u8; 4]));
            ep.inject(me, 2, b"two!").unwrap();
            check_recv(wait_fast(&*ep, &r, rk), 2, b"two!", None);
            for _ in 0..10 {
                r.progress();
            }
            assert!(table.is_empty());
            // A mix: every other op through each path, each completed once.
            let n = 16u64;
            let recvs: Vec<OpKey> = (0..n)
                .map(|t| irecv(&*ep, 0x100 + t, OpBuffer::from(vec![0u8; 32])))
                .collect();
            let sends: Vec<OpKey> = (0..n)
                .map(|t| isend(&*ep, me, 0x100 + t, pattern(32, t)))
                .collect();
            for (t, (rk, sk)) in recvs.into_iter().zip(sends).enumerate() {
                let t = t as u64;
                let (rc, sc) = if t % 2 == 0 {
                    (wait_fast(&*ep, &r, rk), wait_fast(&*ep, &r, sk))
                } else {
                    let start = Instant::now();
                    let mut got = (None, None);
                    while got.0.is_none() || got.1.is_none() {
                        r.progress();
                        got.0 = got.0.or_else(|| table.try_take(rk));
                        got.1 = got.1.or_else(|| table.try_take(sk));
                        assert!(start.elapsed() < PATIENCE, "op {t} not harvested");
                    }
                    (got.0.unwrap(), got.1.unwrap())
                };
                check_recv(rc, 0x100 + t, &pattern(32, t), None);
                assert_eq!(sc.status.error, None);
            }
            for _ in 0..10 {
                r.progress();
            }
            assert_eq!(ep.in_flight(), 0);
            assert!(table.is_empty(), "nothing completed twice or left");
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

#[test]
fn dropped_receive_keeps_its_buffer_until_psm_is_done() {
    isolated(
        "engine::native::fast_tests::dropped_receive_keeps_its_buffer_until_psm_is_done",
        || {
            let (ep, r, me) = open_self(ProgressMode::Manual);
            let table = ep.completions().clone();
            let region = Region::new(16);
            let shared: Arc<dyn StableRegion> = region.clone();
            let dropped = irecv(&*ep, 5, OpBuffer::from(shared));
            assert_eq!(Arc::strong_count(&region), 2, "the engine holds it");
            // Its future goes away before anything arrived.
            assert!(table.abandon(dropped).is_none());
            assert_eq!(table.abandoned(), 1);
            // Another op runs through the fast path meanwhile: the
            // abandoned receive is matched by PSM but not harvested by it.
            let rk = irecv(&*ep, 6, OpBuffer::from(vec![0u8; 3]));
            ep.inject(me, 5, b"for the dropped one").unwrap();
            ep.inject(me, 6, b"six").unwrap();
            check_recv(wait_fast(&*ep, &r, rk), 6, b"six", None);
            // A progress round harvests it; the table drops the buffer then.
            let start = Instant::now();
            while table.abandoned() > 0 {
                r.progress();
                assert!(start.elapsed() < PATIENCE, "never harvested");
            }
            assert_eq!(Arc::strong_count(&region), 1, "dropped after PSM finished");
            assert!(table.is_empty());
            assert_eq!(ep.in_flight(), 0);
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

#[test]
fn cancelled_receive_completes_through_the_fast_path() {
    isolated(
        "engine::native::fast_tests::cancelled_receive_completes_through_the_fast_path",
        || {
            let (ep, r, _me) = open_self(ProgressMode::Manual);
            let rk = irecv(&*ep, 9, OpBuffer::from(vec![7u8; 8]));
            assert!(ep.poll_op(rk).is_none(), "nothing sent yet");
            assert!(ep.cancel(rk).unwrap());
            let c = wait_fast(&*ep, &r, rk);
            assert_eq!(c.status.error, Some(ErrorKind::Canceled));
            assert_eq!(c.status.nbytes, 0);
            assert_eq!(c.buffer.into_vec().unwrap(), vec![7u8; 8], "handed back");
            assert_eq!(ep.in_flight(), 0);
            assert!(ep.completions().is_empty());
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

/// Injects to oneself do not leak PSM send requests (libpsm2's blocking
/// send to the self device does; with 1024 requests allowed, 5000 injects
/// would abort the process).
#[test]
fn injects_to_self_do_not_exhaust_send_requests() {
    isolated(
        "engine::native::fast_tests::injects_to_self_do_not_exhaust_send_requests",
        || {
            let (ep, reactor, me) = open_self(ProgressMode::Manual);
            let mut buf = OpBuffer::from(vec![0u8; 8]);
            for i in 0..5000u64 {
                let key = irecv(&*ep, 9, buf);
                ep.inject(me, 9, &i.to_le_bytes()).expect("inject to self");
                let c = wait_fast(&*ep, &reactor, key);
                assert_eq!(c.status.error, None);
                assert_eq!(c.buffer.as_slice(), &i.to_le_bytes());
                buf = c.buffer;
            }
            ep.close(Duration::from_secs(2)).expect("close");
        },
    );
}

#[test]
fn inject_refuses_what_it_cannot_send() {
    isolated(
        "engine::native::fast_tests::inject_refuses_what_it_cannot_send",
        || {
            let (ep, _r, me) = open_self(ProgressMode::Manual);
            let e = ep.inject(me, 1, &[0u8; 65]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");
            assert!(e.to_string().contains("65 bytes"), "{e}");
            let e = ep.inject(PeerAddr(0x1234), 1, b"x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
            assert!(e.to_string().contains("not a peer"), "{e}");
            ep.close(Duration::from_secs(1)).unwrap();
            let e = ep.inject(me, 1, b"x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
            assert!(e.to_string().contains("closed"), "{e}");
            assert!(ep.completions().is_empty(), "inject takes no keys");
        },
    );
}

#[test]
fn fast_path_races_a_progress_thread_without_losing_completions() {
    isolated(
        "engine::native::fast_tests::fast_path_races_a_progress_thread_without_losing_completions",
        || {
            let (ep, r, me) = open_self(ProgressMode::Manual);
            let stop = Arc::new(AtomicBool::new(false));
            let driver = {
                let (r, stop) = (r.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        r.progress();
                    }
                })
            };
            // The thread harvests some ops into the table (and holds the
            // endpoint when the fast path tries it); the fast path takes
            // the others. Each arrives exactly once, in order, intact.
            for i in 0..2_000u64 {
                let tag = 0x10_0000 + i;
                let data = pattern(8 + (i % 57) as usize, i);
                let rk = irecv(&*ep, tag, OpBuffer::from(vec![0u8; data.len()]));
                if i % 3 == 0 {
                    let sk = isend(&*ep, me, tag, data.clone());
                    check_recv(wait_fast(&*ep, &r, rk), tag, &data, None);
                    assert_eq!(wait_fast(&*ep, &r, sk).status.error, None);
                } else {
                    ep.inject(me, tag, &data).unwrap();
                    check_recv(wait_fast(&*ep, &r, rk), tag, &data, None);
                }
            }
            stop.store(true, Ordering::Relaxed);
            driver.join().unwrap();
            assert_eq!(ep.in_flight(), 0);
            assert!(ep.completions().is_empty());
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

#[test]
fn fast_path_in_auto_mode_waits_in_the_table() {
    isolated(
        "engine::native::fast_tests::fast_path_in_auto_mode_waits_in_the_table",
        || {
            let auto = AutoProgress::new().interval(Duration::from_micros(50));
            let (ep, r, me) = open_self(ProgressMode::Auto(auto));
            for i in 0..20u64 {
                let rk = irecv(&*ep, i, OpBuffer::from(vec![0u8; 8]));
                ep.inject(me, i, &pattern(8, i)).unwrap();
                r.notify();
                let c = r.block_on(std::future::poll_fn(|cx| ep.poll_completion(&r, rk, cx)));
                check_recv(c, i, &pattern(8, i), None);
            }
            assert!(ep.completions().is_empty());
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

/// The contract's default `inject` and `poll_op` (the soft engine keeps
/// them): a message to itself, and the errors.
#[test]
fn contract_defaults_on_the_soft_engine() {
    let engine = SoftEngine::default();
    let r = Reactor::manual();
    let ep = engine.open(&options()).expect("open a soft endpoint");
    r.add_source(ep.clone()).unwrap();
    let me = ep
        .connect(&[ep.epid()], PATIENCE)
        .remove(0)
        .expect("connect to self");
    assert_eq!(ep.max_inject(), 64);
    for (i, n) in [0usize, 8, 64].into_iter().enumerate() {
        let tag = 0x40 + i as u64;
        let data = pattern(n, tag);
        let rk = irecv(&*ep, tag, OpBuffer::from(vec![0u8; n]));
        ep.inject(me, tag, &data).expect("inject");
        check_recv(wait_fast(&*ep, &r, rk), tag, &data, Some(me));
    }
    let e = ep.inject(me, 1, &[0u8; 65]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");
    let e = ep.inject(PeerAddr(0x1234), 1, b"x").unwrap_err();
    assert_ne!(e.kind(), ErrorKind::MsgSize, "{e}");
    // The injected copies are dropped once the engine is done with them;
    // the refused post's key was freed, not left waiting.
    let start = Instant::now();
    while !ep.completions().is_empty() {
        r.progress();
        assert!(start.elapsed() < PATIENCE, "keys left in the table");
    }
    ep.close(Duration::from_secs(1)).unwrap();
}
