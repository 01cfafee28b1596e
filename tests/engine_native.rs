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
//! runs commands sent over its stdin ([`Remote`]: post sends and receives,
//! wait for them, echo, active messages, close) so that one scenario body
//! drives both endpoints. Scenario processes that spin hold the
//! machine-wide spin lock.
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

use conformance::{
    assert_bytes, check_recv, open, open_job, options, pattern, progress_until, recv, recv_buf,
    send, send_buf, wait, wait_ok, Adder, CountedRegion, Watchdog, OTHER_UUID, STEP, UUID,
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
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use support::peer::{self, Peer};
use support::spin_lock::spin_lock;

/// The TrueScale build (in-process loopback only on these machines).
const TRUESCALE: &str = "/usr/lib/libpsm1/libpsm_infinipath.so.1.16";

fn make_native() -> NativeEngine {
    NativeEngine::load().unwrap_or_else(|e| panic!("the native engine does not load: {e}"))
}

fn require_native() -> bool {
    std::env::var("PSMRAIL_REQUIRE_NATIVE").is_ok_and(|v| v == "1")
}

/// Whether the default library loads; otherwise prints why the test is
/// skipped (or fails when `PSMRAIL_REQUIRE_NATIVE=1`).
fn available() -> bool {
    match psm_sys::PsmLibrary::load() {
        Ok(_) => true,
        Err(e) => {
            assert!(!require_native(), "PSMRAIL_REQUIRE_NATIVE=1 but {e}");
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}

/// Whether the TrueScale build is installed (same skip rule).
fn truescale_available() -> bool {
    if std::path::Path::new(TRUESCALE).exists() {
        return true;
    }
    assert!(
        !require_native(),
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
    if !available() {
        return false;
    }
    if compat_default() {
        return true;
    }
    let reason = "the default PSM library is not the compat build (libpsm2-2-compat), \
                  which these scenarios need for shared memory";
    assert!(!require_native(), "PSMRAIL_REQUIRE_NATIVE=1 but {reason}");
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

/// [`isolated`], with the remote peer's role dispatched to [`remote_child`].
fn two_process(test: &str, body: impl FnOnce(&str)) {
    match peer::role().as_deref() {
        Some("remote") => remote_child(),
        _ => {
            if peer::role().is_none() && !needs_compat() {
                return;
            }
            isolated(test, &[], || body(test));
        }
    }
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
    if peer::role().is_none() && !available() {
        return;
    }
    isolated("conformance_self_loopback", &[], || {
        conformance::self_loopback(make_native)
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

// ----- the remote peer ----------------------------------------------------------------

/// Variable giving the remote peer's job key (hex), default [`UUID`].
const UUID_VAR: &str = "PSMRAIL_TEST_UUID";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex uuid");
    }
    out
}

/// FNV-1a: the remote reports what it received as a hash.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A payload from its spec: `pat:<len>:<seed>`, `fill:<len>:<byte>`,
/// `str:<text>`.
fn payload(spec: &str) -> Vec<u8> {
    let mut it = spec.splitn(3, ':');
    match (it.next(), it.next(), it.next()) {
        (Some("pat"), Some(n), Some(seed)) => pattern(n.parse().unwrap(), seed.parse().unwrap()),
        (Some("fill"), Some(n), Some(b)) => vec![b.parse().unwrap(); n.parse().unwrap()],
        (Some("str"), Some(text), None) => text.as_bytes().to_vec(),
        _ => panic!("bad payload spec {spec:?}"),
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {line}").expect("stdout");
    out.flush().expect("flush");
}

/// The remote peer: opens an endpoint (job from [`UUID_VAR`]), connects to
/// the parent, says its epid, then runs commands until `close` or the end
/// of its input, progressing between them.
fn remote_child() {
    let _dog = Watchdog::new(Duration::from_secs(120), "remote peer");
    let (tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let uuid = std::env::var(UUID_VAR).map_or(UUID, |v| unhex(&v));
    let parent: Epid = lines.recv().expect("the parent's epid").parse().unwrap();
    let engine = make_native();
    let r = Reactor::manual();
    let ep = open_job(&engine, &r, uuid);
    let to_parent = ep.connect(&[parent], STEP).remove(0);
    say(&ep.epid().to_string());
    let to_parent = match to_parent {
        Ok(p) => p,
        Err(e) => {
            // The scenario checks the refusal; keep answering its handshake.
            say(&format!("refused {:?} {e}", e.kind()));
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                lines.recv_timeout(Duration::from_micros(10))
            {
                r.progress();
            }
            return;
        }
    };
    let adder = Arc::new(Adder::default());
    let mut ops: HashMap<u32, OpKey> = HashMap::new();
    let mut next = 0u32;
    loop {
        let line = match lines.try_recv() {
            Ok(l) => l,
            Err(mpsc::TryRecvError::Empty) => {
                if !r.progress().made() {
                    std::thread::yield_now();
                }
                continue;
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> u64 {
            let s = w[i];
            s.strip_prefix("0x").map_or_else(
                || s.parse().unwrap(),
                |h| u64::from_str_radix(h, 16).unwrap(),
            )
        };
        match w[0] {
            "send" => {
                let mode = if w.get(3) == Some(&"sync") {
                    SendMode::Synchronous
                } else {
                    SendMode::Standard
                };
                let buf = OpBuffer::from(payload(w[2]));
                let k = send_buf(&r, &*ep, to_parent, num(1), buf, mode);
                next += 1;
                ops.insert(next, k);
                say(&format!("posted {next}"));
            }
            "recv" => {
                let k = recv(&r, &*ep, TagMatch::new(num(1), num(2)), num(3) as usize);
                next += 1;
                ops.insert(next, k);
                say(&format!("posted {next}"));
            }
            "wait" => {
                let id: u32 = w[1].parse().unwrap();
                let c = wait(&r, &*ep, ops.remove(&id).expect("a posted op"));
                let s = c.status;
                let data = &c.buffer.as_slice()[..s.nbytes.min(c.buffer.len())];
                say(&format!(
                    "done {:?} {:#x} {} {} {} {:#x}",
                    s.error,
                    s.tag,
                    s.msg_len,
                    s.nbytes,
                    s.source.is_none() || s.source == Some(to_parent),
                    fnv(data)
                ));
            }
            "echo" => {
                let (tag, cap) = (num(1), num(2) as usize);
                let c = wait_ok(&r, &*ep, recv(&r, &*ep, TagMatch::exact(tag), cap), "echo");
                let got = c.buffer.as_slice()[..c.status.nbytes].to_vec();
                wait_ok(&r, &*ep, send(&r, &*ep, to_parent, tag, got), "echo send");
                say(&format!("echoed {}", c.status.nbytes));
            }
            "adder" => {
                let id = ep.am_register(adder.clone()).expect("register");
                say(&format!("handler {}", id.0));
            }
            "am" => {
                let args: Vec<u64> = if w[2] == "-" {
                    Vec::new()
                } else {
                    w[2].split(',').map(|a| a.parse().unwrap()).collect()
                };
                conformance::am_request(
                    &r,
                    &*ep,
                    to_parent,
                    AmHandlerId(num(1) as u16),
                    &args,
                    &payload(w[3]),
                );
                say("ok");
            }
            "amstats" => {
                assert!(progress_until(&r, STEP, || adder
                    .replies
                    .lock()
                    .unwrap()
                    .len()
                    >= num(1) as usize));
                let replies = adder.replies.lock().unwrap();
                let last = replies.last().map_or(String::from("-"), |(src, a, p)| {
                    format!(
                        "{}:{}:{}",
                        *src == to_parent,
                        a.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
                        String::from_utf8_lossy(p)
                    )
                });
                say(&format!(
                    "amstats {} {} {last}",
                    adder.requests.load(Ordering::Acquire),
                    replies.len()
                ));
            }
            "close" => {
                ep.close(Duration::from_secs(2)).expect("remote close");
                say("closed");
                return;
            }
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// The id in a `posted <id>` answer.
fn posted(answer: &str) -> u32 {
    answer
        .strip_prefix("posted ")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("the remote answered {answer:?}"))
}

/// The remote peer as the scenario sees it.
struct Remote {
    child: Peer,
    /// Its epid.
    epid: Epid,
    /// The local endpoint's handle of it.
    addr: PeerAddr,
    reactor: Reactor,
}

impl Remote {
    /// Spawns the remote peer for `test` (job `uuid`) and connects `ep` to it.
    fn start(test: &str, reactor: &Reactor, ep: &NativeEndpoint) -> Remote {
        let mut child = Peer::spawn(test, "remote", &[]);
        child.send_line(&ep.epid().to_string());
        let line = child.recv_line_with(STEP, || {
            reactor.progress();
        });
        let epid: Epid = line.parse().expect("the remote's epid");
        let addr = ep
            .connect(&[epid], STEP)
            .remove(0)
            .expect("connect to the remote");
        assert_eq!(ep.peer_epid(addr), Some(epid));
        Remote {
            child,
            epid,
            addr,
            reactor: reactor.clone(),
        }
    }

    /// Sends a command without waiting for its answer.
    fn post(&mut self, line: &str) {
        self.child.send_line(line);
    }

    /// The next answer, progressing the local reactor meanwhile.
    fn answer(&mut self) -> String {
        let r = self.reactor.clone();
        self.child.recv_line_with(STEP, || {
            if !r.progress().made() {
                std::thread::yield_now();
            }
        })
    }

    /// A command and its answer.
    fn cmd(&mut self, line: &str) -> String {
        self.post(line);
        self.answer()
    }

    /// Posts a send of `spec` with `tag`; its id.
    fn send(&mut self, tag: u64, spec: &str) -> u32 {
        let a = self.cmd(&format!("send {tag:#x} {spec}"));
        posted(&a)
    }

    /// Posts a receive; its id.
    fn recv(&mut self, tags: TagMatch, cap: usize) -> u32 {
        let a = self.cmd(&format!("recv {:#x} {:#x} {cap}", tags.tag, tags.select));
        posted(&a)
    }

    /// Waits for op `id`; asserts it succeeded with `tag` and `want`
    /// (receives; sends report their own tag and length).
    fn wait_ok(&mut self, id: u32, tag: u64, want: &[u8]) {
        let a = self.cmd(&format!("wait {id}"));
        let expect = format!(
            "done None {tag:#x} {} {} true {:#x}",
            want.len(),
            want.len(),
            fnv(want)
        );
        assert_eq!(a, expect, "remote op {id}");
    }

    /// Waits for send `id` to succeed.
    fn sent(&mut self, id: u32) {
        let a = self.cmd(&format!("wait {id}"));
        assert!(a.starts_with("done None "), "remote send {id}: {a}");
    }

    /// Closes the remote and waits for it to exit.
    fn close(mut self) {
        assert_eq!(self.cmd("close"), "closed");
        let status = self.child.wait(STEP);
        assert!(status.success(), "the remote failed: {status}");
    }
}

/// The local endpoint on a manual reactor, and the remote peer connected
/// to it (the caller holds the spin lock).
fn setup(test: &str) -> (Reactor, Arc<NativeEndpoint>, Remote) {
    let reactor = Reactor::manual();
    let ep = open(&make_native(), &reactor);
    let remote = Remote::start(test, &reactor, &ep);
    (reactor, ep, remote)
}

// ----- the suite's in-process scenarios, between two processes ------------------------

/// As `conformance::tag_matching_and_order`, the sender in another process.
#[test]
fn remote_tag_matching_and_order() {
    two_process("remote_tag_matching_and_order", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(90), test);
        let (r, b, mut a) = setup(test);
        let b = &*b;
        let wild = recv(&r, b, TagMatch::new(0x1200, 0xff00), 64);
        let exact = recv(&r, b, TagMatch::exact(0x1234), 64);
        let any = recv(&r, b, TagMatch::ANY, 64);
        let hi = recv(
            &r,
            b,
            TagMatch::new(0xab00_0000_0000_0000, 0xff00_0000_0000_0000),
            64,
        );
        let sends = [
            a.send(0x1234, "str:first"),
            a.send(0x9999, "str:second"),
            a.send(0x1234, "str:third"),
            a.send(0xab12_0000_0000_0001, "str:fourth"),
        ];
        check_recv(&wait(&r, b, wild), 0x1234, b"first", a.addr, "wildcard");
        check_recv(&wait(&r, b, any), 0x9999, b"second", a.addr, "ANY");
        check_recv(&wait(&r, b, exact), 0x1234, b"third", a.addr, "exact");
        check_recv(
            &wait(&r, b, hi),
            0xab12_0000_0000_0001,
            b"fourth",
            a.addr,
            "high bits",
        );
        for id in sends {
            a.sent(id);
        }

        // A receive whose selected bits differ waits for the next one.
        let miss = recv(&r, b, TagMatch::new(0xab00, 0xff00), 8);
        let s = a.send(0xac00, "str:late");
        a.sent(s);
        assert!(progress_until(&r, STEP, || b
            .iprobe(TagMatch::exact(0xac00))
            .unwrap()
            .is_some()));
        let hit = recv(&r, b, TagMatch::new(0xac00, 0xff00), 8);
        check_recv(&wait(&r, b, hit), 0xac00, b"late", a.addr, "second receive");
        assert!(
            b.cancel(miss).unwrap(),
            "the unmatched receive is still posted"
        );
        assert_eq!(wait(&r, b, miss).status.error, Some(ErrorKind::Canceled));

        // Per-peer order, eager and rendezvous mixed, receives first.
        let sizes = [100usize, 200 << 10, 50, 300 << 10, 10, 0, 70 << 10];
        let recvs: Vec<OpKey> = sizes
            .iter()
            .map(|_| recv(&r, b, TagMatch::exact(0x77), 300 << 10))
            .collect();
        let sends: Vec<u32> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| a.send(0x77, &format!("pat:{n}:{}", 700 + i)))
            .collect();
        for (i, k) in recvs.into_iter().enumerate() {
            check_recv(
                &wait(&r, b, k),
                0x77,
                &pattern(sizes[i], 700 + i as u64),
                a.addr,
                &format!("ordered message {i}"),
            );
        }
        for id in sends {
            a.sent(id);
        }

        // Unexpected messages are taken oldest first.
        let sends: Vec<u32> = (0..16u8)
            .map(|i| a.send(0x88, &format!("fill:{}:{i}", 10 + usize::from(i))))
            .collect();
        for id in sends {
            a.sent(id);
        }
        for i in 0..16u8 {
            let k = recv(&r, b, TagMatch::exact(0x88), 64);
            check_recv(
                &wait(&r, b, k),
                0x88,
                &vec![i; 10 + usize::from(i)],
                a.addr,
                &format!("unexpected {i}"),
            );
        }
        a.close();
        b.close(Duration::from_secs(2)).unwrap();
    });
}

/// As `conformance::out_of_order_posting`, the sender in another process.
#[test]
fn remote_out_of_order_posting() {
    two_process("remote_out_of_order_posting", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(90), test);
        let (r, b, mut a) = setup(test);
        let b = &*b;
        let eager = 1000.min(b.limits().eager_threshold);
        let rndv = 4 * b.limits().eager_threshold + 123;
        for (i, n) in [eager, rndv].into_iter().enumerate() {
            let tag = 0x300 + 2 * i as u64;
            let rk = recv(&r, b, TagMatch::exact(tag), n);
            let s = a.send(tag, &format!("pat:{n}:{tag}"));
            check_recv(
                &wait(&r, b, rk),
                tag,
                &pattern(n, tag),
                a.addr,
                &format!("{n} bytes, receive first"),
            );
            a.sent(s);

            let tag = tag + 1;
            let s = a.send(tag, &format!("pat:{n}:{tag}"));
            assert!(
                progress_until(&r, STEP, || b
                    .iprobe(TagMatch::exact(tag))
                    .unwrap()
                    .is_some()),
                "the unexpected {n}-byte message never showed up"
            );
            let rk = recv(&r, b, TagMatch::exact(tag), n);
            check_recv(
                &wait(&r, b, rk),
                tag,
                &pattern(n, tag),
                a.addr,
                &format!("{n} bytes, send first"),
            );
            a.sent(s);
        }
        // And the other way: the remote receives before and after.
        let n = rndv;
        let id = a.recv(TagMatch::exact(0x400), n);
        wait_ok(&r, b, send(&r, b, a.addr, 0x400, pattern(n, 1)), "send");
        a.wait_ok(id, 0x400, &pattern(n, 1));
        let sk = send(&r, b, a.addr, 0x401, pattern(n, 2));
        let id = a.recv(TagMatch::exact(0x401), n);
        a.wait_ok(id, 0x401, &pattern(n, 2));
        wait_ok(&r, b, sk, "send");
        a.close();
        b.close(Duration::from_secs(2)).unwrap();
    });
}

/// As `conformance::am_request_reply`, between two processes, both ways.
#[test]
fn remote_am_request_reply() {
    two_process("remote_am_request_reply", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(90), test);
        let (r, ep, mut remote) = setup(test);
        let ep = &*ep;
        let ha = Arc::new(Adder::default());
        assert_eq!(ep.am_register(ha.clone()).unwrap(), AmHandlerId(0));
        assert_eq!(remote.cmd("adder"), "handler 0");
        let limits = ep.limits();
        let args: Vec<u64> = (1..=limits.max_am_args as u64).collect();
        let big = pattern(limits.max_am_request, 9);
        conformance::am_request(&r, ep, remote.addr, AmHandlerId(0), &args, b"hello");
        conformance::am_request(&r, ep, remote.addr, AmHandlerId(0), &[], &big);
        assert!(progress_until(&r, STEP, || ha
            .replies
            .lock()
            .unwrap()
            .len()
            == 2));
        let got = ha.replies.lock().unwrap().clone();
        let sum = args.iter().sum::<u64>();
        assert_eq!(
            got[0],
            (remote.addr, vec![sum, args.len() as u64], b"olleh".to_vec())
        );
        let mut rev = big.clone();
        rev.reverse();
        assert_eq!(got[1].1, vec![0, 0]);
        assert_bytes(&got[1].2, &rev, "reply payload");
        assert_eq!(remote.cmd("amstats 0"), "amstats 2 0 -");
        // The remote asks, the local handler answers.
        assert_eq!(remote.cmd("am 0 40,2 str:abc"), "ok");
        assert_eq!(remote.cmd("amstats 1"), "amstats 2 1 true:42,2:cba");
        assert_eq!(ha.requests.load(Ordering::Acquire), 1);
        assert_eq!(ep.peer_epid(remote.addr), Some(remote.epid));
        // Beyond the limits: refused at once.
        let e = ep
            .am_request(
                remote.addr,
                AmHandlerId(0),
                &vec![0; limits.max_am_args + 1],
                &[],
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
        let e = ep
            .am_request(
                remote.addr,
                AmHandlerId(0),
                &[],
                &vec![0; limits.max_am_request + 1],
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");
        let e = ep
            .am_request(remote.addr, AmHandlerId(7), &[], &[])
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "unregistered handler: {e}");
        remote.close();
        ep.close(Duration::from_secs(2)).unwrap();
    });
}

/// As `conformance::cancel`, the sender in another process.
#[test]
fn remote_cancel() {
    two_process("remote_cancel", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let (r, b, mut a) = setup(test);
        let b = &*b;
        let k = recv_buf(
            &r,
            b,
            TagMatch::exact(77),
            OpBuffer::from(vec![0xeeu8; 333]),
        );
        assert!(
            b.cancel(k).unwrap(),
            "an unmatched receive can be cancelled"
        );
        let c = wait(&r, b, k);
        assert_eq!(c.status.error, Some(ErrorKind::Canceled));
        assert_eq!(c.status.nbytes, 0);
        assert_eq!(
            c.buffer.as_slice(),
            &[0xee; 333][..],
            "the buffer comes back untouched"
        );
        assert!(
            !b.cancel(k).unwrap(),
            "a finished receive cannot be cancelled"
        );

        // Matched on posting (the rendezvous message was there): too late.
        let n = 4 * b.limits().eager_threshold;
        let s = a.send(78, &format!("pat:{n}:78"));
        assert!(progress_until(&r, STEP, || b
            .iprobe(TagMatch::exact(78))
            .unwrap()
            .is_some()));
        let rk = recv(&r, b, TagMatch::exact(78), n);
        assert!(
            !b.cancel(rk).unwrap(),
            "a matched receive cannot be cancelled"
        );
        check_recv(
            &wait(&r, b, rk),
            78,
            &pattern(n, 78),
            a.addr,
            "matched receive",
        );
        a.sent(s);

        // Sends cannot be cancelled.
        let id = a.recv(TagMatch::exact(79), n);
        let sk = send(&r, b, a.addr, 79, pattern(n, 79));
        assert!(!b.cancel(sk).unwrap(), "sends cannot be cancelled");
        wait_ok(&r, b, sk, "send");
        a.wait_ok(id, 79, &pattern(n, 79));
        a.close();
        b.close(Duration::from_secs(2)).unwrap();
    });
}

/// As `conformance::truncation`, the sender in another process.
#[test]
fn remote_truncation() {
    two_process("remote_truncation", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let (r, b, mut a) = setup(test);
        let b = &*b;
        let cases = [
            (300, 100),
            (3 * b.limits().eager_threshold, 1000),
            (5000, 0),
        ];
        let eager = b.limits().eager_threshold;
        for (i, (len, cap)) in cases.into_iter().enumerate() {
            let tag = 0x600 + i as u64;
            let rk = recv(&r, b, TagMatch::exact(tag), cap);
            let s = a.send(tag, &format!("pat:{len}:{tag}"));
            let c = wait(&r, b, rk);
            assert_eq!(c.status.error, Some(ErrorKind::Trunc), "{len} into {cap}");
            if len > eager {
                // libpsm2 reports a rendezvous message that matched a posted
                // receive with the delivered length ("sender only sends this
                // many"): a lower bound, documented on the engine.
                assert_eq!(c.status.msg_len, cap as u64);
            } else {
                assert_eq!(c.status.msg_len, len as u64);
            }
            assert_eq!(c.status.nbytes, cap);
            assert_eq!(c.status.tag, tag);
            assert_eq!(c.status.source, Some(a.addr));
            assert_bytes(
                c.buffer.as_slice(),
                &pattern(len, tag)[..cap],
                "truncated bytes",
            );
            a.sent(s);
        }
        // The rendezvous message already there when the receive is posted
        // keeps its full length.
        let len = 3 * eager;
        let s = a.send(0x700, &format!("pat:{len}:7"));
        assert!(progress_until(&r, STEP, || b
            .iprobe(TagMatch::exact(0x700))
            .unwrap()
            .is_some()));
        let c = wait(&r, b, recv(&r, b, TagMatch::exact(0x700), 1000));
        assert_eq!(c.status.error, Some(ErrorKind::Trunc));
        assert_eq!((c.status.msg_len, c.status.nbytes), (len as u64, 1000));
        assert_bytes(
            c.buffer.as_slice(),
            &pattern(len, 7)[..1000],
            "truncated bytes",
        );
        a.sent(s);
        a.close();
        b.close(Duration::from_secs(2)).unwrap();
    });
}

/// As `conformance::iprobe`, the sender in another process.
#[test]
fn remote_iprobe() {
    two_process("remote_iprobe", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let (r, b, mut a) = setup(test);
        let b = &*b;
        assert_eq!(b.iprobe(TagMatch::ANY).unwrap(), None);
        let s = a.send(5, "str:abc");
        assert!(progress_until(&r, STEP, || b
            .iprobe(TagMatch::exact(5))
            .unwrap()
            .is_some()));
        for _ in 0..3 {
            let st = b
                .iprobe(TagMatch::new(4, !1))
                .unwrap()
                .expect("still there");
            assert_eq!(
                (st.tag, st.msg_len, st.source, st.error),
                (5, 3, Some(a.addr), None)
            );
            r.progress();
        }
        assert_eq!(b.iprobe(TagMatch::exact(6)).unwrap(), None);
        let c = wait(&r, b, recv(&r, b, TagMatch::exact(5), 8));
        assert_eq!(&c.buffer.as_slice()[..c.status.nbytes], b"abc");
        assert_eq!(b.iprobe(TagMatch::ANY).unwrap(), None, "consumed");
        a.sent(s);
        a.close();
        b.close(Duration::from_secs(2)).unwrap();
    });
}

/// As `conformance::abandon_frees_once`, the peer in another process: a
/// dropped (abandoned) operation's buffer is freed exactly once, after PSM
/// is done with it.
#[test]
fn remote_abandon_frees_once() {
    two_process("remote_abandon_frees_once", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let (r, b, mut a) = setup(test);
        let b = &*b;
        let settle = |r: &Reactor| {
            for _ in 0..200 {
                r.progress();
            }
        };
        // Matched after abandon.
        let (region, matched) = CountedRegion::counted(1024, 0);
        let k = recv_buf(&r, b, TagMatch::exact(90), OpBuffer::from(region));
        assert!(b.completions().abandon(k).is_none(), "not complete yet");
        settle(&r);
        assert_eq!(matched.load(Ordering::Acquire), 0, "kept while posted");
        let s = a.send(90, "str:into-an-abandoned-receive");
        a.sent(s);
        assert!(progress_until(&r, STEP, || matched.load(Ordering::Acquire) == 1));

        // Cancelled after abandon.
        let (region, cancelled) = CountedRegion::counted(64, 0);
        let k = recv_buf(&r, b, TagMatch::exact(91), OpBuffer::from(region));
        assert!(b.completions().abandon(k).is_none());
        assert!(b.cancel(k).unwrap());
        assert!(progress_until(&r, STEP, || cancelled
            .load(Ordering::Acquire)
            == 1));

        // A rendezvous send abandoned before its receive exists: PSM still
        // reads the buffer (the receiver pulls it) afterwards.
        let n = 4 * b.limits().eager_threshold;
        let (region, sent) = CountedRegion::counted(n, 0x5a);
        let sk = send_buf(
            &r,
            b,
            a.addr,
            92,
            OpBuffer::from(region),
            SendMode::Standard,
        );
        assert!(b.completions().abandon(sk).is_none());
        settle(&r);
        assert_eq!(
            sent.load(Ordering::Acquire),
            0,
            "PSM still needs the send buffer"
        );
        let id = a.recv(TagMatch::exact(92), n);
        a.wait_ok(id, 92, &vec![0x5a; n]);
        assert!(progress_until(&r, STEP, || sent.load(Ordering::Acquire) == 1));

        // Ended by close.
        let (region, closed) = CountedRegion::counted(64, 0);
        let k = recv_buf(&r, b, TagMatch::exact(93), OpBuffer::from(region));
        assert!(b.completions().abandon(k).is_none());
        settle(&r);
        assert_eq!(closed.load(Ordering::Acquire), 0);
        b.close(Duration::from_secs(1)).unwrap();
        assert_eq!(
            closed.load(Ordering::Acquire),
            1,
            "close frees abandoned buffers"
        );
        settle(&r);
        for (name, c) in [
            ("matched", &matched),
            ("cancelled", &cancelled),
            ("sent", &sent),
            ("closed", &closed),
        ] {
            assert_eq!(c.load(Ordering::Acquire), 1, "{name}: dropped exactly once");
        }
        a.close();
    });
}

/// As `conformance::auto_progress`: the local endpoint on an auto reactor
/// built after it opened (`open_with_reactor`); `block_on` parks and the
/// progress thread's completions wake it; the remote echoes.
#[test]
fn remote_auto_progress() {
    two_process("remote_auto_progress", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(90), test);
        // The progress thread is created, and pinned, after the endpoint
        // opened (PSM may pin the opening thread itself).
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
        let mut remote = Remote::start(test, &r, &ep);
        let ep = &*ep;
        for i in 0..20u64 {
            let n = if i % 5 == 4 {
                3 * ep.limits().eager_threshold
            } else {
                8 * i as usize
            };
            remote.post(&format!("echo {i} {n}"));
            let ping = pattern(n, i);
            let rk = recv(&r, ep, TagMatch::exact(i), n);
            let sk = send(&r, ep, remote.addr, i, ping.clone());
            wait_ok(&r, ep, sk, "ping");
            check_recv(&wait(&r, ep, rk), i, &ping, remote.addr, "pong");
            assert_eq!(remote.answer(), format!("echoed {n}"));
        }
        remote.close();
        ep.close(Duration::from_secs(2)).unwrap();
    });
}

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

/// Another job (UUID) connects at the PSM level over shared memory, but
/// the engine's handshake refuses it on both sides, naming the UUIDs.
#[test]
fn wrong_uuid_is_refused_both_ways() {
    two_process("wrong_uuid_is_refused_both_ways", |test| {
        let _lock = spin_lock();
        let _dog = Watchdog::new(Duration::from_secs(60), test);
        let reactor = Reactor::manual();
        let a = open(&make_native(), &reactor);
        let other = hex(&OTHER_UUID);
        let mut child = Peer::spawn(test, "remote", &[(UUID_VAR, &other)]);
        child.send_line(&a.epid().to_string());
        let r = reactor.clone();
        let epid: Epid = child
            .recv_line_with(STEP, || {
                r.progress();
            })
            .parse()
            .unwrap();
        let start = Instant::now();
        let e = a
            .connect(&[epid], Duration::from_secs(5))
            .remove(0)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnRefused, "{e}");
        assert!(e.to_string().to_lowercase().contains("uuid"), "{e}");
        assert!(e.to_string().contains(&hex(&OTHER_UUID)), "{e}");
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
    if peer::role().is_none() && !available() {
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
        let (r, ep, remote) = setup(test);
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
    if peer::role().is_none() && !available() {
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
    if peer::role().is_none() && !available() {
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
