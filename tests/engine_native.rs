//! The native engine against real PSM (no mocks): the generic conformance
//! suite where it applies, the same scenarios between two processes where
//! the suite would need two endpoints in one process, and what is
//! particular to PSM (builds, devices, endpoints per process, closing,
//! re-entry, limits).
//!
//! # How the tests run
//! PSM allows one endpoint per process here (the compat build without an
//! adapter; TrueScale always), and its state is process-global, so every
//! test runs its scenario in a child process of this test binary
//! ([`isolated`]): the test itself only spawns the child and checks its exit
//! status. Scenarios with a second process spawn a grandchild: either the
//! suite's own peer (`tagged_sizes_two_processes`), or a *remote* peer that
//! runs commands sent over its stdin (`conformance::remote::Remote`: post
//! sends and receives, wait for them, echo, active messages, close) so that
//! one scenario body drives both endpoints. The suite's pair scenarios run
//! that way (`remote_conformance_tests!`, shared with the soft engine).
//! Scenario processes that spin hold the machine-wide spin lock.
//!
//! Without the library the tests print why and pass; with
//! `PSMRAIL_REQUIRE_NATIVE=1` (CI) that is a failure. Children get
//! `PSM2_DEVICES=self,shm` unless the variable is set.
//!
//! ```text
//! PSM2_DEVICES=self,shm cargo test --test engine_native
//! ```

#[macro_use]
mod conformance;
mod support;

use conformance::remote;
use conformance::{
    check_recv, open, options, progress_until, recv, send, send_buf, wait, wait_ok, Watchdog,
    OTHER_UUID, STEP, UUID,
};
use psmrail::engine::native::{NativeEndpoint, NativeEngine, AM_ARGS_CAP, AM_PAYLOAD_CAP};
use psmrail::engine::{
    AmHandler, AmHandlerId, AmMessage, AmReply, Engine, EngineEndpoint, Epid, OpBuffer, PeerAddr,
    SendMode, TagMatch,
};
use psmrail::reactor::{
    AutoProgress, CpuSet, CpuTopology, OpKey, Progress, ProgressMode, ProgressSource, Reactor,
};
use psmrail::ErrorKind;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use support::payload::{hex, pattern};
use support::peer::{self, say, Peer};
use support::spin_lock::spin_lock;

/// The TrueScale build (in-process loopback only on these machines).
const TRUESCALE: &str = "/usr/lib/libpsm1/libpsm_infinipath.so.1.16";

fn make_native() -> NativeEngine {
    NativeEngine::load().unwrap_or_else(|e| panic!("the native engine does not load: {e}"))
}

/// Whether the TrueScale build is installed (same skip rule).
fn truescale_available() -> bool {
    if std::path::Path::new(TRUESCALE).exists() {
        return true;
    }
    assert!(
        !support::native::required(),
        "PSMRAIL_REQUIRE_NATIVE=1 but {TRUESCALE} is missing (install libpsm-infinipath1)"
    );
    eprintln!("SKIPPED: {TRUESCALE} not found (install libpsm-infinipath1)");
    false
}

/// The compat build is the default library (its scenarios need shm).
fn compat_default() -> bool {
    psm_sys::PsmLibrary::load().is_ok_and(|l| l.build() == psm_sys::PsmBuild::Psm2Compat)
}

/// Whether the default library is the compat build; otherwise prints why
/// the test is skipped (or fails when `PSMRAIL_REQUIRE_NATIVE=1`).
fn needs_compat() -> bool {
    if !support::native::available() {
        return false;
    }
    if compat_default() {
        return true;
    }
    let reason = "the default PSM library is not the compat build (libpsm2-2-compat), \
                  which these scenarios need for shared memory";
    assert!(
        !support::native::required(),
        "PSMRAIL_REQUIRE_NATIVE=1 but {reason}"
    );
    eprintln!("SKIPPED: {reason}");
    false
}

/// Runs `body` in a child process of this test binary (role `solo`): the
/// test process only spawns it and checks that it exits 0. Inside any child
/// (`solo`, or a peer spawned by the scenario) `body` runs directly.
fn isolated(test: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    if peer::role().is_some() {
        return body();
    }
    let mut env: Vec<(&str, &str)> = env.to_vec();
    if std::env::var_os("PSM2_DEVICES").is_none() && !env.iter().any(|(k, _)| *k == "PSM2_DEVICES")
    {
        env.push(("PSM2_DEVICES", "self,shm"));
    }
    let child = Peer::spawn(test, "solo", &env);
    let status = child.wait(Duration::from_secs(240));
    assert!(status.success(), "{test} failed in its process: {status}");
}

/// [`isolated`], with the remote peer's role dispatched to
/// [`remote::remote_child`]: the runner of the remote scenarios.
fn two_process(test: &str, body: impl FnOnce(&str)) {
    match peer::role().as_deref() {
        Some("remote") => remote::remote_child(make_native),
        _ => {
            if peer::role().is_none() && !needs_compat() {
                return;
            }
            isolated(test, &[], || body(test));
        }
    }
}

/// Spawns the remote peer of `test` (with `env`), gives it our epid `me`
/// and takes its own; it connects to us first, so we progress meanwhile.
fn spawn_remote(test: &str, reactor: &Reactor, me: Epid, env: &[(&str, &str)]) -> (Peer, Epid) {
    let mut child = Peer::spawn(test, "remote", env);
    child.send_line(&me.to_string());
    let line = child.recv_line_with(STEP, || {
        reactor.progress();
    });
    let epid = line
        .parse()
        .unwrap_or_else(|_| panic!("the remote's epid, not {line:?}"));
    (child, epid)
}

// ----- the generic suite ------------------------------------------------------------

#[test]
fn conformance_tagged_sizes_two_processes() {
    let name = "conformance_tagged_sizes_two_processes";
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated(name, &[], || {
        conformance::tagged_sizes_two_processes(make_native, name)
    });
}

#[test]
fn conformance_self_loopback() {
    if peer::role().is_none() && !support::native::available() {
        return;
    }
    isolated("conformance_self_loopback", &[], || {
        conformance::self_loopback(make_native)
    });
}

#[test]
fn conformance_keyed_posts() {
    if peer::role().is_none() && !support::native::available() {
        return;
    }
    isolated("conformance_keyed_posts", &[], || {
        conformance::keyed_posts(make_native)
    });
}

#[test]
fn conformance_self_loopback_truescale() {
    if peer::role().is_none() && !truescale_available() {
        return;
    }
    isolated(
        "conformance_self_loopback_truescale",
        &[("PSMRAIL_PSM_LIB", TRUESCALE), ("PSM_DEVICES", "self")],
        || {
            assert_eq!(make_native().build(), psm_sys::PsmBuild::TrueScale);
            conformance::self_loopback(make_native)
        },
    );
}

// ----- the suite's pair scenarios, between two processes ------------------------------

remote_conformance_tests!(make_native, two_process);

// ----- connecting -------------------------------------------------------------------------

/// The epid of an endpoint whose process has exited: refused at once
/// (libpsm2 would crash trying to map its segment), naming the epid.
#[test]
fn connect_dead_epid() {
    let test = "connect_dead_epid";
    if peer::role().as_deref() == Some("dead") {
        let ep = make_native().open(&options(UUID)).unwrap();
        say(&ep.epid().to_string());
        ep.close(Duration::ZERO).unwrap();
        return;
    }
    two_process(test, |test| {
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let reactor = Reactor::manual();
        let a = open(&make_native(), &reactor);
        let mut child = Peer::spawn(test, "dead", &[]);
        let dead: Epid = child.recv_line(STEP).parse().unwrap();
        assert!(child.wait(STEP).success());
        let timeout = Duration::from_millis(500);
        let start = Instant::now();
        let e = a.connect(&[dead], timeout).remove(0).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::ConnRefused),
            "{e}"
        );
        assert!(
            start.elapsed() < timeout + Duration::from_millis(1500),
            "{e}"
        );
        assert!(
            e.to_string().contains(&dead.to_string()),
            "names the epid: {e}"
        );
        // Garbage epids: errors, never a crash.
        for bad in [Epid(0), Epid(u64::MAX), Epid(0x1234_5678_9abc_def0)] {
            let e = a.connect(&[bad], timeout).remove(0).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnRefused, "{bad}: {e}");
        }
        a.close(Duration::from_secs(1)).unwrap();
    });
}

/// Connecting needs the peer's progress, even back to a peer that has
/// connected to us: PSM's connect is answered from the peer's PSM calls.
/// A peer that progresses nothing (as a libfabric program blocked on its
/// own control socket) times the connect out, naming it; once the peer
/// progresses again the connect succeeds and the link carries messages
/// both ways. (The reason address vectors can connect at first use.)
#[test]
fn connecting_needs_the_peer_to_progress() {
    two_process("connecting_needs_the_peer_to_progress", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let reactor = Reactor::manual();
        let a = open(&make_native(), &reactor);
        let (mut child, epid) = spawn_remote(test, &reactor, a.epid(), &[]);
        let r = reactor.clone();
        child.send_line("freeze 5000");
        assert_eq!(child.recv_line(STEP), "frozen");
        let e = a
            .connect(&[epid], Duration::from_secs(1))
            .remove(0)
            .expect_err("connecting to a peer that progresses nothing");
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains(&epid.to_string()), "{e}");
        let thawed = child.recv_line_with(STEP, || {
            r.progress();
        });
        assert_eq!(thawed, "thawed");
        let to_child = a
            .connect(&[epid], STEP)
            .remove(0)
            .expect("connecting once the peer progresses");
        let echo = recv(&reactor, &*a, TagMatch::exact(7), 64);
        child.send_line("echo 7 64");
        wait_ok(
            &reactor,
            &*a,
            send(&reactor, &*a, to_child, 7, b"both ways".to_vec()),
            "send",
        );
        let c = wait_ok(&reactor, &*a, echo, "echo");
        assert_eq!(&c.buffer.as_slice()[..c.status.nbytes], b"both ways");
        assert_eq!(
            child.recv_line_with(STEP, || {
                r.progress();
            }),
            "echoed 9"
        );
        child.send_line("close");
        assert_eq!(
            child.recv_line_with(STEP, || {
                r.progress();
            }),
            "closed"
        );
        assert!(child.wait(STEP).success());
        a.close(Duration::from_secs(1)).unwrap();
    });
}

/// Another job (UUID) connects at the PSM level over shared memory, but
/// the engine's handshake refuses it on both sides; each side names its
/// own UUID, and neither learns the other's.
#[test]
fn wrong_uuid_is_refused_both_ways() {
    two_process("wrong_uuid_is_refused_both_ways", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let reactor = Reactor::manual();
        let a = open(&make_native(), &reactor);
        let other = hex(&OTHER_UUID);
        let (mut child, epid) =
            spawn_remote(test, &reactor, a.epid(), &[(remote::UUID_VAR, &other)]);
        let r = reactor.clone();
        let start = Instant::now();
        let e = a
            .connect(&[epid], Duration::from_secs(5))
            .remove(0)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
        assert!(e.to_string().to_lowercase().contains("uuid"), "{e}");
        assert!(!e.to_string().contains(&hex(&OTHER_UUID)), "{e}");
        assert!(start.elapsed() < Duration::from_secs(4), "refused promptly");
        let theirs = child.recv_line_with(STEP, || {
            r.progress();
        });
        assert!(theirs.starts_with("refused ConnRefused"), "{theirs}");
        assert!(theirs.to_lowercase().contains("uuid"), "{theirs}");
        // Refusals are remembered: no second handshake.
        let again = a
            .connect(&[epid], Duration::from_secs(5))
            .remove(0)
            .unwrap_err();
        assert_eq!(again.kind(), ErrorKind::ConnRefused);
        child.send_line("bye");
        assert!(child.wait(STEP).success());
        a.close(Duration::from_secs(1)).unwrap();
    });
}

// ----- endpoints, devices, builds -------------------------------------------------------

/// Without `PSM2_MULTI_EP=1` the compat build opens one endpoint per
/// process: the second is `Busy` and says what to set; after closing the
/// first, a new one opens.
#[test]
fn second_endpoint_is_busy() {
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated("second_endpoint_is_busy", &[], || {
        let engine = make_native();
        let first = engine.open(&options(UUID)).unwrap();
        let e = engine.open(&options(UUID)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
        assert!(e.to_string().contains("PSM2_MULTI_EP=1"), "{e}");
        first.close(Duration::ZERO).unwrap();
        let again = engine
            .open(&options(UUID))
            .expect("a new endpoint after close");
        drop(again);
        engine
            .open(&options(UUID))
            .expect("a new endpoint after drop");
    });
}

/// With `PSM2_MULTI_EP=1` but no adapter, psm2 gives every endpoint of a
/// process the same epid: the engine refuses the duplicate (`Busy`) rather
/// than open an endpoint whose traffic would loop back.
#[test]
fn multi_ep_without_adapter_is_busy() {
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated(
        "multi_ep_without_adapter_is_busy",
        &[("PSM2_MULTI_EP", "1")],
        || {
            let engine = make_native();
            let first = engine.open(&options(UUID)).unwrap();
            match engine.open(&options(UUID)) {
                // With an adapter, endpoints get their own epids.
                Ok(second) => assert_ne!(second.epid(), first.epid()),
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
                    assert!(e.to_string().contains("epid"), "{e}");
                }
            }
        },
    );
}

/// TrueScale: one endpoint per process lifetime, refused clearly.
#[test]
fn truescale_second_endpoint_is_busy() {
    if peer::role().is_none() && !truescale_available() {
        return;
    }
    isolated(
        "truescale_second_endpoint_is_busy",
        &[("PSMRAIL_PSM_LIB", TRUESCALE), ("PSM_DEVICES", "self")],
        || {
            let engine = make_native();
            let first = engine.open(&options(UUID)).unwrap();
            let e = engine.open(&options(UUID)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
            assert!(e.to_string().contains("TrueScale"), "{e}");
            first.close(Duration::ZERO).unwrap();
            let e = engine.open(&options(UUID)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
        },
    );
}

/// A library that cannot be loaded: `NoData` with the whole story (what
/// was tried, what to install).
#[test]
fn load_error_is_no_data() {
    if peer::role().is_none() && !support::native::available() {
        return;
    }
    isolated(
        "load_error_is_no_data",
        &[("PSMRAIL_PSM_LIB", "/nonexistent/libpsm_infinipath.so.1")],
        || {
            let e = NativeEngine::load().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
            let text = e.to_string();
            assert!(
                text.contains("/nonexistent/libpsm_infinipath.so.1"),
                "{text}"
            );
            assert!(text.contains("libpsm2-2-compat"), "{text}");
        },
    );
}

/// No usable device (the compat build without an adapter and without
/// `PSM2_DEVICES`, where `psm_ep_open` would segfault): `NoData` saying
/// what to set.
#[test]
fn no_device_is_no_data() {
    if peer::role().is_none() {
        if !needs_compat() {
            return;
        }
        if !psm_sys::device::hardware_nodes(psm_sys::PsmBuild::Psm2Compat).is_empty() {
            eprintln!("SKIPPED: an HFI device is present, so PSM2_DEVICES may stay unset");
            return;
        }
    }
    isolated("no_device_is_no_data", &[("PSM2_DEVICES", "")], || {
        let e = NativeEngine::load().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
        assert!(e.to_string().contains("PSM2_DEVICES=self,shm"), "{e}");
    });
}

/// What the endpoint reports: AM payloads capped at 2032 bytes (PSM says
/// 8128 with shm, `INT_MAX` with `self` alone), 10 arguments on the compat
/// build, 31 handlers, messages up to `u32::MAX`.
fn check_limits() {
    let ep = make_native().open(&options(UUID)).unwrap();
    let l = ep.limits();
    assert_eq!(l.max_message, u64::from(u32::MAX));
    assert_eq!(
        (l.max_am_request, l.max_am_reply),
        (AM_PAYLOAD_CAP, AM_PAYLOAD_CAP)
    );
    assert_eq!(l.max_am_args, AM_ARGS_CAP);
    assert_eq!(l.max_am_handlers, 31);
    assert!(l.eager_threshold >= 1024, "{l:?}");
    assert!(ep.reports_source());
    ep.close(Duration::ZERO).unwrap();
}

#[test]
fn limits_are_capped_with_shm() {
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated(
        "limits_are_capped_with_shm",
        &[("PSM2_DEVICES", "self,shm")],
        check_limits,
    );
}

#[test]
fn limits_are_capped_with_self_alone() {
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated(
        "limits_are_capped_with_self_alone",
        &[("PSM2_DEVICES", "self")],
        check_limits,
    );
}

// ----- closing, misuse, re-entry ------------------------------------------------------------

/// Close never hangs: unmatched receives end `Canceled`, a rendezvous send
/// nobody receives ends `Io` once the timeout has passed, posts after close
/// are refused, progress is idle, a second close is fine.
#[test]
fn close_ends_everything_in_flight() {
    two_process("close_ends_everything_in_flight", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let (r, ep, remote) = remote::setup(make_native, test);
        let n = 4 * ep.limits().eager_threshold;
        let rk = recv(&r, &*ep, TagMatch::exact(1), 64);
        let sk = send(&r, &*ep, remote.addr, 2, pattern(n, 2));
        for _ in 0..100 {
            r.progress();
        }
        assert_eq!(ep.in_flight(), 2);
        let start = Instant::now();
        ep.close(Duration::from_millis(300)).unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        // Plus libpsm2's own wait for the peer's disconnect (1 s to 2 s).
        assert!(
            took < Duration::from_millis(2800),
            "ended after the timeout: {took:?}"
        );
        let table = ep.completions();
        let c = table.try_take(rk).expect("the receive ended");
        assert_eq!(c.status.error, Some(ErrorKind::Canceled));
        let c = table.try_take(sk).expect("the send ended");
        assert_eq!(c.status.error, Some(ErrorKind::Io));
        assert_eq!(c.buffer.len(), n, "its buffer comes back");
        assert!(ep.is_closed());
        assert_eq!(ep.progress(), Progress::Idle);
        let k = table.insert();
        let e = ep
            .irecv(TagMatch::ANY, OpBuffer::from(vec![0; 8]), k)
            .unwrap_err();
        assert_eq!(e.error.kind(), ErrorKind::Inval);
        assert!(e.error.to_string().contains("closed"), "{}", e.error);
        assert_eq!(e.buffer.len(), 8, "the buffer comes back");
        assert!(ep.connect(&[remote.epid], STEP).remove(0).is_err());
        ep.close(Duration::from_secs(1))
            .expect("a second close is fine");
        remote.close();
    });
}

/// Misuse is an error, never a crash: a peer address this endpoint did not
/// connect, keys that are not pending or already posted, a read-only
/// receive buffer, unknown keys to cancel.
#[test]
fn bad_arguments_are_errors() {
    if peer::role().is_none() && !support::native::available() {
        return;
    }
    isolated("bad_arguments_are_errors", &[], || {
        let r = Reactor::manual();
        let ep = open(&make_native(), &r);
        let me = ep.connect(&[ep.epid()], STEP).remove(0).unwrap();
        let table = ep.completions().clone();
        let k = table.insert();
        for forged in [PeerAddr(0), PeerAddr(1), PeerAddr(me.0 ^ 0x40)] {
            let e = ep
                .isend(forged, 1, SendMode::Standard, OpBuffer::from(vec![1]), k)
                .unwrap_err();
            assert_eq!(e.error.kind(), ErrorKind::Inval, "{}", e.error);
            assert!(ep.am_request(forged, AmHandlerId(0), &[], &[]).is_err());
        }
        let e = ep
            .irecv(
                TagMatch::ANY,
                OpBuffer::from(bytes::Bytes::from_static(b"ro")),
                k,
            )
            .unwrap_err();
        assert_eq!(e.error.kind(), ErrorKind::Inval, "{}", e.error);
        ep.irecv(TagMatch::exact(9), OpBuffer::from(vec![0; 4]), k)
            .unwrap();
        let e = ep
            .irecv(TagMatch::exact(9), OpBuffer::from(vec![0; 4]), k)
            .unwrap_err();
        assert!(
            e.error.to_string().contains("already posted"),
            "{}",
            e.error
        );
        let stale = OpKey::from_u64(k.to_u64() + (1 << 32));
        let e = ep
            .isend(me, 1, SendMode::Standard, OpBuffer::from(vec![1]), stale)
            .unwrap_err();
        assert!(
            e.error.to_string().contains("not a pending key"),
            "{}",
            e.error
        );
        assert!(!ep.cancel(stale).unwrap());
        assert!(!ep.cancel(OpKey::from_u64(u64::MAX)).unwrap());
        assert!(ep.cancel(k).unwrap());
        assert_eq!(wait(&r, &*ep, k).status.error, Some(ErrorKind::Canceled));
        // A synchronous send to self completes once matched.
        let rk = recv(&r, &*ep, TagMatch::exact(3), 8);
        let sk = send_buf(
            &r,
            &*ep,
            me,
            3,
            OpBuffer::from(b"sync".to_vec()),
            SendMode::Synchronous,
        );
        check_recv(&wait(&r, &*ep, rk), 3, b"sync", me, "synchronous");
        wait_ok(&r, &*ep, sk, "synchronous send");
        ep.close(Duration::from_secs(1)).unwrap();
    });
}

/// Sends an `isend` on its own endpoint from inside its handler (which
/// runs under the endpoint's lock): must fail with `Inval`, not deadlock.
struct Reenter {
    ep: Mutex<Weak<NativeEndpoint>>,
    peer: Mutex<Option<PeerAddr>>,
    outcome: Mutex<Option<String>>,
}

impl AmHandler for Reenter {
    fn on_request(&self, _msg: AmMessage<'_>, reply: &mut dyn AmReply) {
        let ep = self.ep.lock().unwrap().upgrade().expect("the endpoint");
        let peer = self.peer.lock().unwrap().expect("the peer");
        let key = ep.completions().insert();
        let e = ep
            .isend(peer, 1, SendMode::Standard, OpBuffer::empty(), key)
            .unwrap_err();
        drop(ep.completions().abandon(key));
        *self.outcome.lock().unwrap() = Some(format!("{:?} {}", e.error.kind(), e.error));
        reply.reply(AmHandlerId(0), &[1], &[]).unwrap();
    }

    fn on_reply(&self, _msg: AmMessage<'_>) {}
}

#[test]
fn reentry_from_a_handler_is_refused() {
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated("reentry_from_a_handler_is_refused", &[], || {
        let _dog = Watchdog::new(Duration::from_secs(30), "reentry");
        let r = Reactor::manual();
        let ep = open(&make_native(), &r);
        let me = ep.connect(&[ep.epid()], STEP).remove(0).unwrap();
        let h = Arc::new(Reenter {
            ep: Mutex::new(Arc::downgrade(&ep)),
            peer: Mutex::new(Some(me)),
            outcome: Mutex::new(None),
        });
        ep.am_register(h.clone()).unwrap();
        conformance::am_request(&r, &*ep, me, AmHandlerId(0), &[], &[]);
        assert!(progress_until(&r, STEP, || h
            .outcome
            .lock()
            .unwrap()
            .is_some()));
        let outcome = h.outcome.lock().unwrap().clone().unwrap();
        assert!(outcome.starts_with("Inval"), "{outcome}");
        assert!(outcome.contains("called back"), "{outcome}");
        ep.close(Duration::from_secs(1)).unwrap();
    });
}

/// `open_with_reactor` in manual mode: the endpoint is the reactor's
/// source, and futures progress it through `block_on`.
#[test]
fn open_with_a_manual_reactor() {
    if peer::role().is_none() && !support::native::available() {
        return;
    }
    isolated("open_with_a_manual_reactor", &[], || {
        let _dog = Watchdog::new(Duration::from_secs(30), "manual reactor");
        let (ep, r) = make_native()
            .open_with_reactor(&options(UUID), ProgressMode::Manual)
            .unwrap();
        assert!(r.is_manual());
        assert_eq!(r.stats().sources, 1);
        let me = ep.connect(&[ep.epid()], STEP).remove(0).unwrap();
        let rk = recv(&r, &*ep, TagMatch::exact(4), 1 << 20);
        let sk = send(&r, &*ep, me, 4, pattern(1 << 20, 4));
        check_recv(
            &wait(&r, &*ep, rk),
            4,
            &pattern(1 << 20, 4),
            me,
            "1 MiB to self",
        );
        wait_ok(&r, &*ep, sk, "send");
        assert_eq!(ep.in_flight(), 0);
        ep.close(Duration::from_secs(1)).unwrap();
    });
}

/// `open_with_reactor` in auto mode: the progress thread is created, and
/// pinned, only after the endpoint opened (PSM may pin the opening thread
/// itself); the endpoint is its source. (The remote scenarios build their
/// auto reactor the same way, generically.)
#[test]
fn open_with_an_auto_reactor() {
    if peer::role().is_none() && !support::native::available() {
        return;
    }
    isolated("open_with_an_auto_reactor", &[], || {
        let _dog = Watchdog::new(Duration::from_secs(30), "auto reactor");
        let cpu = CpuTopology::read_now()
            .allowed
            .iter()
            .last()
            .expect("an allowed CPU");
        let only: CpuSet = [cpu].into_iter().collect();
        let auto = AutoProgress::new()
            .affinity(only)
            .interval(Duration::from_millis(1));
        let (ep, r) = make_native()
            .open_with_reactor(&options(UUID), ProgressMode::Auto(auto))
            .expect("open with an auto reactor");
        assert!(!r.is_manual());
        assert_eq!(r.auto_thread().expect("a progress thread").affinity, only);
        assert_eq!(r.stats().sources, 1, "the endpoint is the reactor's source");
        let me = ep.connect(&[ep.epid()], STEP).remove(0).unwrap();
        let rk = recv(&r, &*ep, TagMatch::exact(5), 64 << 10);
        let sk = send(&r, &*ep, me, 5, pattern(64 << 10, 5));
        check_recv(
            &wait(&r, &*ep, rk),
            5,
            &pattern(64 << 10, 5),
            me,
            "64 KiB to self",
        );
        wait_ok(&r, &*ep, sk, "send");
        ep.close(Duration::from_secs(1)).unwrap();
    });
}

/// Several threads post and wait on one endpoint while the auto thread
/// progresses it: every message arrives intact, nothing deadlocks.
#[test]
fn concurrent_posts_and_progress() {
    if peer::role().is_none() && !needs_compat() {
        return;
    }
    isolated("concurrent_posts_and_progress", &[], || {
        let _dog = Watchdog::new(Duration::from_secs(120), "concurrent posts");
        let auto = AutoProgress::new().interval(Duration::ZERO);
        let (ep, r) = make_native()
            .open_with_reactor(&options(UUID), ProgressMode::Auto(auto))
            .unwrap();
        let me = ep.connect(&[ep.epid()], STEP).remove(0).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (ep, r) = (&ep, &r);
                s.spawn(move || {
                    for i in 0..300u64 {
                        let tag = (t << 32) | i;
                        let n = if i % 50 == 7 {
                            100_000
                        } else {
                            (i as usize * 13) % 4000
                        };
                        let data = pattern(n, tag);
                        let rk = recv(r, &**ep, TagMatch::exact(tag), n);
                        let sk = send(r, &**ep, me, tag, data.clone());
                        if i % 3 == 0 {
                            r.progress(); // manual rounds alongside the thread
                        }
                        check_recv(&wait(r, &**ep, rk), tag, &data, me, "concurrent");
                        wait_ok(r, &**ep, sk, "concurrent send");
                    }
                });
            }
        });
        assert_eq!(ep.in_flight(), 0);
        ep.close(Duration::from_secs(1)).unwrap();
    });
}
