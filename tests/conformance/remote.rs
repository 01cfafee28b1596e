//! The suite's pair scenarios between two processes, for engines that open
//! only one endpoint per process (the native engine) and, unchanged, for
//! every other engine.
//!
//! The scenario body drives its own endpoint and a *remote* peer: a child
//! process of the test binary (role `remote`, the same test re-executed)
//! that opens an endpoint of the same engine, connects to the parent, says
//! its epid, then runs commands sent over its stdin ([`Remote`]: post sends
//! and receives, wait for them, echo, active messages, close), on the line
//! protocol of `support::peer` ([`peer::serve`] in the child). The child
//! builds its engine with the `make` the scenario was given: it runs the
//! same test function, so the same `make`. (The public API's scenarios
//! have a harness of their own on the same protocol, `support::remote`;
//! these drive an engine endpoint directly.)
//!
//! An engine's test file instantiates every scenario with
//! `remote_conformance_tests!(make_engine);` (run in the test's process)
//! or `remote_conformance_tests!(make_engine, run);` where
//! `run(test: &str, body: impl FnOnce(&str))` decides where the scenario
//! runs (the native engine isolates each in a child process) and calls
//! `body(test)` there, and in the remote peer's process. The scenarios hold
//! the machine-wide spin lock while both processes spin.

use super::{
    assert_bytes, check_recv, open, open_job, options, progress_until, recv, recv_buf, send,
    send_buf, wait, wait_ok, Adder, CountedRegion, Ep, Watchdog, STEP, UUID,
};
use crate::support::payload::{self, fnv, pattern};
use crate::support::peer::{self, say, Peer};
use crate::support::spin_lock::spin_lock;
use psmrail::engine::{
    AmHandlerId, Engine, EngineEndpoint, EngineKind, Epid, OpBuffer, PeerAddr, SendMode, TagMatch,
};
use psmrail::reactor::{AutoProgress, CpuSet, CpuTopology, OpKey, ProgressSource, Reactor};
use psmrail::ErrorKind;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Instantiates every remote scenario as a `#[test]` for the engine built
/// by `$make` (a `fn() -> E`). `$run` (default
/// [`in_this_process`](crate::conformance::remote::in_this_process)) is
/// called with the test's name and the scenario body.
#[macro_export]
macro_rules! remote_conformance_tests {
    (@each $make:path, $run:path; $($test:ident => $scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                $run(
                    &$crate::conformance::test_name(module_path!(), stringify!($test)),
                    |test| $crate::conformance::remote::$scenario($make, test),
                );
            }
        )*
    };
    ($make:path) => {
        $crate::remote_conformance_tests!($make, $crate::conformance::remote::in_this_process);
    };
    ($make:path, $run:path) => {
        $crate::remote_conformance_tests!(@each $make, $run;
            remote_tag_matching_and_order => tag_matching_and_order,
            remote_out_of_order_posting => out_of_order_posting,
            remote_am_request_reply => am_request_reply,
            remote_cancel => cancel,
            remote_truncation => truncation,
            remote_iprobe => iprobe,
            remote_abandon_frees_once => abandon_frees_once,
            remote_auto_progress => auto_progress,
        );
    };
}

/// The default runner: the scenario runs in the test's own process.
pub(crate) fn in_this_process(test: &str, body: impl FnOnce(&str)) {
    body(test);
}

/// In the remote peer's process, plays its part ([`remote_child`]) and says
/// so: the scenario then returns at once.
pub(crate) fn remote_role<E: Engine>(make: fn() -> E) -> bool {
    if peer::role().as_deref() == Some("remote") {
        remote_child(make);
        true
    } else {
        false
    }
}

// ----- the remote peer ----------------------------------------------------------------

/// Variable giving the remote peer's job key (in [`payload::hex`]),
/// default [`UUID`].
pub(crate) const UUID_VAR: &str = "PSMRAIL_TEST_UUID";

/// The remote peer: opens an endpoint (job from [`UUID_VAR`]), connects to
/// the parent, says its epid, then runs commands until `close` or the end
/// of its input, progressing between them.
pub(crate) fn remote_child<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(120), "remote peer");
    let lines = peer::stdin_lines();
    let uuid = std::env::var(UUID_VAR).map_or(UUID, |v| {
        payload::unhex(&v).try_into().expect("a 16-byte job key")
    });
    let parent: Epid = lines.recv().expect("the parent's epid").parse().unwrap();
    let engine = make();
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
    let answer = |w: &[&str]| {
        let num = |i: usize| peer::num(w[i]);
        Some(match w[0] {
            "send" => {
                let mode = if w.get(3) == Some(&"sync") {
                    SendMode::Synchronous
                } else {
                    SendMode::Standard
                };
                let buf = OpBuffer::from(payload::from_spec(w[2]));
                let k = send_buf(&r, &*ep, to_parent, num(1), buf, mode);
                next += 1;
                ops.insert(next, k);
                format!("posted {next}")
            }
            "recv" => {
                let k = recv(&r, &*ep, TagMatch::new(num(1), num(2)), num(3) as usize);
                next += 1;
                ops.insert(next, k);
                format!("posted {next}")
            }
            "wait" => {
                let id: u32 = w[1].parse().unwrap();
                let c = wait(&r, &*ep, ops.remove(&id).expect("a posted op"));
                let s = c.status;
                let data = &c.buffer.as_slice()[..s.nbytes.min(c.buffer.len())];
                format!(
                    "done {:?} {:#x} {} {} {} {:#x}",
                    s.error,
                    s.tag,
                    s.msg_len,
                    s.nbytes,
                    s.source.is_none() || s.source == Some(to_parent),
                    fnv(data)
                )
            }
            "echo" => {
                let (tag, cap) = (num(1), num(2) as usize);
                let c = wait_ok(&r, &*ep, recv(&r, &*ep, TagMatch::exact(tag), cap), "echo");
                let got = c.buffer.as_slice()[..c.status.nbytes].to_vec();
                wait_ok(&r, &*ep, send(&r, &*ep, to_parent, tag, got), "echo send");
                format!("echoed {}", c.status.nbytes)
            }
            "adder" => {
                let id = ep.am_register(adder.clone()).expect("register");
                format!("handler {}", id.0)
            }
            "am" => {
                let args: Vec<u64> = if w[2] == "-" {
                    Vec::new()
                } else {
                    w[2].split(',').map(|a| a.parse().unwrap()).collect()
                };
                super::am_request(
                    &r,
                    &*ep,
                    to_parent,
                    AmHandlerId(num(1) as u16),
                    &args,
                    &payload::from_spec(w[3]),
                );
                "ok".into()
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
                format!(
                    "amstats {} {} {last}",
                    adder.requests.load(Ordering::Acquire),
                    replies.len()
                )
            }
            "freeze" => {
                // No progress at all for the given milliseconds.
                say("frozen");
                std::thread::sleep(Duration::from_millis(num(1)));
                "thawed".into()
            }
            "close" => return None,
            other => panic!("unknown command {other:?}"),
        })
    };
    let stop = peer::serve(&lines, || idle(&r), answer);
    if stop.is_some() {
        ep.close(Duration::from_secs(2)).expect("remote close");
        say("closed");
    }
}

/// One step while waiting for a line: a progress round, and a yield when it
/// made none.
fn idle(r: &Reactor) {
    if !r.progress().made() {
        std::thread::yield_now();
    }
}

/// The id in a `posted <id>` answer.
pub(crate) fn posted(answer: &str) -> u32 {
    answer
        .strip_prefix("posted ")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("the remote answered {answer:?}"))
}

/// The remote peer as the scenario sees it.
pub(crate) struct Remote {
    /// The child process.
    pub child: Peer,
    /// Its epid.
    pub epid: Epid,
    /// The local endpoint's handle of it.
    pub addr: PeerAddr,
    reactor: Reactor,
}

impl Remote {
    /// Spawns the remote peer for `test` (job `uuid`) and connects `ep` to it.
    pub(crate) fn start<P: EngineEndpoint>(test: &str, reactor: &Reactor, ep: &P) -> Remote {
        let mut child = Peer::spawn(test, "remote", &[]);
        let line = child.cmd(&ep.epid().to_string(), STEP, || {
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
    pub(crate) fn post(&mut self, line: &str) {
        self.child.send_line(line);
    }

    /// The next answer, progressing the local reactor meanwhile.
    pub(crate) fn answer(&mut self) -> String {
        let r = &self.reactor;
        self.child.recv_line_with(STEP, || idle(r))
    }

    /// A command and its answer.
    pub(crate) fn cmd(&mut self, line: &str) -> String {
        let r = &self.reactor;
        self.child.cmd(line, STEP, || idle(r))
    }

    /// Posts a send of `spec` with `tag`; its id.
    pub(crate) fn send(&mut self, tag: u64, spec: &str) -> u32 {
        let a = self.cmd(&format!("send {tag:#x} {spec}"));
        posted(&a)
    }

    /// Posts a receive; its id.
    pub(crate) fn recv(&mut self, tags: TagMatch, cap: usize) -> u32 {
        let a = self.cmd(&format!("recv {:#x} {:#x} {cap}", tags.tag, tags.select));
        posted(&a)
    }

    /// Waits for op `id`; asserts it succeeded with `tag` and `want`
    /// (receives; sends report their own tag and length).
    pub(crate) fn wait_ok(&mut self, id: u32, tag: u64, want: &[u8]) {
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
    pub(crate) fn sent(&mut self, id: u32) {
        let a = self.cmd(&format!("wait {id}"));
        assert!(a.starts_with("done None "), "remote send {id}: {a}");
    }

    /// Closes the remote and checks that it exits 0.
    pub(crate) fn close(self) {
        let r = &self.reactor;
        self.child.finish("close", "closed", STEP, || idle(r));
    }
}

/// The local endpoint on a manual reactor, and the remote peer connected
/// to it (the caller holds the spin lock).
pub(crate) fn setup<E: Engine>(make: fn() -> E, test: &str) -> (Reactor, Ep<E>, Remote) {
    let reactor = Reactor::manual();
    let ep = open(&make(), &reactor);
    let remote = Remote::start(test, &reactor, &*ep);
    (reactor, ep, remote)
}

/// As `conformance::tag_matching_and_order`, the sender in another process.
pub(crate) fn tag_matching_and_order<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(90), test);
    let (r, b, mut a) = setup(make, test);
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
}

/// As `conformance::out_of_order_posting`, the sender in another process.
pub(crate) fn out_of_order_posting<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(90), test);
    let (r, b, mut a) = setup(make, test);
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
}

/// As `conformance::am_request_reply`, between two processes, both ways.
pub(crate) fn am_request_reply<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(90), test);
    let (r, ep, mut remote) = setup(make, test);
    let ep = &*ep;
    let ha = Arc::new(Adder::default());
    assert_eq!(ep.am_register(ha.clone()).unwrap(), AmHandlerId(0));
    assert_eq!(remote.cmd("adder"), "handler 0");
    let limits = ep.limits();
    let args: Vec<u64> = (1..=limits.max_am_args as u64).collect();
    let big = pattern(limits.max_am_request, 9);
    super::am_request(&r, ep, remote.addr, AmHandlerId(0), &args, b"hello");
    super::am_request(&r, ep, remote.addr, AmHandlerId(0), &[], &big);
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
    if ep.kind() == EngineKind::Native {
        // PSM handler indices are the job's: the native engine refuses any
        // handler it has not registered itself. (The soft engine checks
        // only the handler slots the peer offers.)
        let e = ep
            .am_request(remote.addr, AmHandlerId(7), &[], &[])
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "unregistered handler: {e}");
    }
    // Beyond the handler slots: refused by every engine.
    let slots = u16::try_from(limits.max_am_handlers).expect("handler slots fit an id");
    let e = ep
        .am_request(remote.addr, AmHandlerId(slots), &[], &[])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval, "handler {slots}: {e}");
    remote.close();
    ep.close(Duration::from_secs(2)).unwrap();
}

/// As `conformance::cancel`, the sender in another process.
pub(crate) fn cancel<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(60), test);
    let (r, b, mut a) = setup(make, test);
    let b = &*b;
    let k = recv_buf(
        &r,
        b,
        TagMatch::exact(77),
        OpBuffer::from(vec![0xeeu8; 333]),
    );
    crate::conformance::assert_cancels_unmatched(&r, b, k);

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
}

/// As `conformance::truncation`, the sender in another process.
pub(crate) fn truncation<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(60), test);
    let (r, b, mut a) = setup(make, test);
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
        if len > eager && b.kind() == EngineKind::Native {
            // libpsm2 reports a rendezvous message that matched a posted
            // receive with the delivered length ("sender only sends this
            // many"): a lower bound, documented on the engine.
            assert_eq!(c.status.msg_len, cap as u64);
        } else {
            // Every other engine reports the sent length.
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
}

/// As `conformance::iprobe`, the sender in another process.
pub(crate) fn iprobe<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(60), test);
    let (r, b, mut a) = setup(make, test);
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
}

/// As `conformance::abandon_frees_once`, the peer in another process: a
/// dropped (abandoned) operation's buffer is freed exactly once, after the
/// engine is done with it.
pub(crate) fn abandon_frees_once<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(60), test);
    let (r, b, mut a) = setup(make, test);
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

    // A rendezvous send abandoned before its receive exists: the engine
    // (PSM: the receiver pulls it) still reads the buffer afterwards.
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
        "the engine still needs the send buffer"
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
}

/// As `conformance::auto_progress`: the local endpoint on an auto reactor
/// built after it opened (as the native `open_with_reactor` does, which
/// `engine_native` checks on its own); `block_on` parks and the progress
/// thread's completions wake it; the remote echoes.
pub(crate) fn auto_progress<E: Engine>(make: fn() -> E, test: &str) {
    if remote_role(make) {
        return;
    }
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
    let ep = make().open(&options(UUID)).expect("open an endpoint");
    let r = Reactor::auto(auto).expect("an auto reactor");
    let source: Arc<dyn ProgressSource> = ep.clone();
    r.add_source(source)
        .expect("add the endpoint to the reactor");
    assert!(!r.is_manual());
    assert_eq!(r.auto_thread().expect("a progress thread").affinity, only);
    assert_eq!(r.stats().sources, 1, "the endpoint is the reactor's source");
    let mut remote = Remote::start(test, &r, &*ep);
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
}
