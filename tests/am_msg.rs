//! Untagged messages over active messages (`FI_PSM_AM_MSG=1`), end to end
//! through the AM message queue over both engines: the soft engine with
//! endpoints in this process, the native engine (real PSM over shared
//! memory) between two processes.
//!
//! The queue is crate-private; these tests reach it through the hidden
//! `psmrail::hooks::AmMsgHook`. The protocol itself is unit-tested inside the
//! crate (`src/proto/am_msg/`), including a model-based proptest and every
//! kind of hostile packet.
//!
//! Native: without the PSM library the test prints why and passes; with
//! `PSMRAIL_REQUIRE_NATIVE=1` that is a failure. Its processes get
//! `PSM2_DEVICES=self,shm` unless the variable is set.
//!
//! ```text
//! cargo test --test am_msg
//! ```

#[macro_use]
mod conformance;
mod support;

use conformance::{connect_pair, open, progress_until, Watchdog, STEP};
use psmrail::engine::native::NativeEngine;
use psmrail::engine::soft::SoftEngine;
use psmrail::engine::{Engine, EngineEndpoint, Epid, MqCompletion, MqStatus, OpBuffer, PeerAddr};
use psmrail::hooks::AmMsgHook;
use psmrail::reactor::{AutoProgress, OpKey, OpStatus, Reactor};
use psmrail::ErrorKind;
use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;
use support::payload::pattern;
use support::peer::{self, say, Peer};
use support::spin_lock::spin_lock;

/// The protocol's header word for opcode `op` (`src/proto/am_msg/wire.rs`).
const fn header(op: u64) -> u64 {
    0x414d_5f4d_5347_0100 | op
}

/// One endpoint and its AM message queue, both on a reactor.
struct Node<P: EngineEndpoint> {
    ep: Arc<P>,
    q: AmMsgHook,
}

impl<P: EngineEndpoint> Node<P> {
    /// Opens an endpoint of `engine` and registers the queue first thing.
    fn open<E: Engine<Endpoint = P>>(engine: &E, r: &Reactor) -> Node<P> {
        let ep = open(engine, r);
        let q = AmMsgHook::register(ep.clone()).expect("register the AM message queue");
        r.add_source(q.progress_source()).expect("add the queue");
        Node { ep, q }
    }

    fn send(&self, peer: PeerAddr, data: Vec<u8>) -> OpKey {
        let k = self.ep.completions().insert();
        if let Err(e) = self.q.send(peer, OpBuffer::from(data), k) {
            panic!("send: {}", e.error);
        }
        k
    }

    fn recv(&self, from: Option<PeerAddr>, cap: usize) -> OpKey {
        let k = self.ep.completions().insert();
        if let Err(e) = self.q.recv(from, OpBuffer::from(vec![0xee; cap]), k) {
            panic!("recv: {}", e.error);
        }
        k
    }

    /// Progresses `r` until `key` completes (a panic after [`STEP`]).
    fn wait(&self, r: &Reactor, key: OpKey) -> MqCompletion {
        let table = self.ep.completions().clone();
        let mut got = None;
        let done = progress_until(r, STEP, || {
            if got.is_none() {
                got = table.try_take(key);
            }
            got.is_some()
        });
        assert!(done, "{key:?} did not complete within {STEP:?}");
        got.expect("taken above")
    }

    /// Waits for `key` on an auto reactor (the auto thread progresses).
    fn block(&self, r: &Reactor, key: OpKey) -> MqCompletion {
        let table = self.ep.completions().clone();
        r.block_on(poll_fn(|cx| r.poll_completion(&table, key, cx)))
    }
}

/// Checks a completion: no tag, both lengths, source, error and the bytes.
fn check(c: &MqCompletion, msg_len: usize, want: &[u8], source: PeerAddr, what: &str) {
    let error = (msg_len > want.len()).then_some(ErrorKind::Trunc);
    assert_eq!(
        c.status,
        MqStatus {
            tag: 0,
            msg_len: msg_len as u64,
            nbytes: want.len(),
            source: Some(source),
            error,
        },
        "{what}"
    );
    let got = &c.buffer.as_slice()[..want.len()];
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!("{what}: the bytes differ (first at {at:?})");
    }
    assert!(
        c.buffer.as_slice()[want.len()..].iter().all(|b| *b == 0xee),
        "{what}: written past the message"
    );
}

/// A successful send of `len` bytes to `peer`.
fn check_sent(c: &MqCompletion, len: usize, peer: PeerAddr, what: &str) {
    assert_eq!(
        c.status,
        MqStatus {
            tag: 0,
            msg_len: len as u64,
            nbytes: len,
            source: Some(peer),
            error: None
        },
        "{what}"
    );
}

fn sizes(chunk: usize) -> [usize; 6] {
    [0, 1, chunk - 1, chunk, chunk + 1, 1 << 20]
}

/// Two connected soft endpoints with queues on a manual reactor:
/// (reactor, a, b, a's handle of b, b's handle of a).
fn soft_pair() -> (
    Reactor,
    Node<psmrail::engine::soft::SoftEndpoint>,
    Node<psmrail::engine::soft::SoftEndpoint>,
    PeerAddr,
    PeerAddr,
) {
    let engine = SoftEngine::default();
    let r = Reactor::manual();
    let a = Node::open(&engine, &r);
    let b = Node::open(&engine, &r);
    let (ab, ba) = connect_pair(&a.ep, &b.ep);
    (r, a, b, ab, ba)
}

// ----- soft engine, one process ------------------------------------------------------

#[test]
fn soft_every_size_in_both_orders() {
    let _dog = Watchdog::new(Duration::from_secs(60), "soft_every_size_in_both_orders");
    let (r, a, b, ab, ba) = soft_pair();
    let chunk = a.q.chunk();
    assert_eq!(chunk, a.ep.limits().max_am_request);
    for (i, size) in sizes(chunk).into_iter().enumerate() {
        let data = pattern(size, i as u64);
        // Receive posted before the send (directed).
        let rk = b.recv(Some(ba), size);
        let sk = a.send(ab, data.clone());
        check(
            &b.wait(&r, rk),
            size,
            &data,
            ba,
            &format!("{size} B, receive first"),
        );
        check_sent(&a.wait(&r, sk), size, ab, "send");
        // Send before the receive: the message waits unexpected.
        let sk = a.send(ab, data.clone());
        assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
        let rk = b.recv(None, size + 16);
        check(
            &b.wait(&r, rk),
            size,
            &data,
            ba,
            &format!("{size} B, send first"),
        );
        check_sent(&a.wait(&r, sk), size, ab, "send");
    }
    // And back the other way.
    let data = pattern(chunk * 3 + 5, 99);
    let rk = a.recv(None, data.len());
    let sk = b.send(ba, data.clone());
    check(&a.wait(&r, rk), data.len(), &data, ab, "b to a");
    check_sent(&b.wait(&r, sk), data.len(), ba, "b's send");
    for n in [&a, &b] {
        let c = n.q.counts();
        assert_eq!(
            (c.dropped, c.unexpected, c.posted, c.sends, c.receiving),
            (0, 0, 0, 0, 0)
        );
    }
}

#[test]
fn soft_long_unexpected_message_waits_at_the_sender() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_long_unexpected");
    let (r, a, b, ab, ba) = soft_pair();
    let data = pattern(4 * a.q.chunk(), 7);
    let sk = a.send(ab, data.clone());
    assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
    for _ in 0..200 {
        r.progress();
    }
    assert_eq!(
        a.ep.completions().status(sk),
        OpStatus::Pending,
        "the send completes only when the receiver has the data"
    );
    let rk = b.recv(None, data.len());
    check(&b.wait(&r, rk), data.len(), &data, ba, "late receive");
    check_sent(&a.wait(&r, sk), data.len(), ab, "send");
}

#[test]
fn soft_directed_receive_ignores_another_peer() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_directed_receive");
    let engine = SoftEngine::default();
    let r = Reactor::manual();
    let (a, b, c) = (
        Node::open(&engine, &r),
        Node::open(&engine, &r),
        Node::open(&engine, &r),
    );
    let (ab, ba) = connect_pair(&a.ep, &b.ep);
    let (cb, bc) = connect_pair(&c.ep, &b.ep);
    let chunk = a.q.chunk();
    let from_a = pattern(chunk + 1, 1);
    let from_c = pattern(chunk + 2, 2);
    let directed = b.recv(Some(bc), 2 * chunk);
    let sa = a.send(ab, from_a.clone());
    assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
    for _ in 0..200 {
        r.progress();
    }
    assert_eq!(b.ep.completions().status(directed), OpStatus::Pending);
    assert_eq!(a.ep.completions().status(sa), OpStatus::Pending);
    let sc = c.send(cb, from_c.clone());
    check(
        &b.wait(&r, directed),
        from_c.len(),
        &from_c,
        bc,
        "directed to c",
    );
    check_sent(&c.wait(&r, sc), from_c.len(), cb, "c's send");
    assert_eq!(b.q.counts().unexpected, 1, "a's message still waits");
    let any = b.recv(None, 2 * chunk);
    check(&b.wait(&r, any), from_a.len(), &from_a, ba, "a's message");
    check_sent(&a.wait(&r, sa), from_a.len(), ab, "a's send");
}

#[test]
fn soft_truncation() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_truncation");
    let (r, a, b, ab, ba) = soft_pair();
    let data = pattern(1 << 20, 3);
    for (cap, recv_first) in [
        (1000, true),
        (1000, false),
        (3 * a.q.chunk() + 1, true),
        (0, true),
    ] {
        let what = format!("{cap}-byte buffer, receive first: {recv_first}");
        let mut rk = None;
        if recv_first {
            rk = Some(b.recv(None, cap));
        }
        let sk = a.send(ab, data.clone());
        if !recv_first {
            assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
            rk = Some(b.recv(None, cap));
        }
        let c = b.wait(&r, rk.expect("posted"));
        check(&c, data.len(), &data[..cap], ba, &what);
        check_sent(&a.wait(&r, sk), data.len(), ab, &what);
    }
}

#[test]
fn soft_cancel_of_an_unmatched_receive() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_cancel");
    let (r, a, b, ab, ba) = soft_pair();
    let k = b.recv(None, 64);
    assert!(b.q.cancel(k));
    let c = b.wait(&r, k);
    assert_eq!(c.status.error, Some(ErrorKind::Canceled));
    assert_eq!((c.status.msg_len, c.status.nbytes), (0, 0));
    assert_eq!(
        c.buffer.into_vec().expect("the vector back"),
        vec![0xee; 64]
    );
    assert!(!b.q.cancel(k), "already cancelled");
    // The cancelled receive does not take the next message.
    let sk = a.send(ab, b"after cancel".to_vec());
    assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
    let rk = b.recv(Some(ba), 64);
    check(&b.wait(&r, rk), 12, b"after cancel", ba, "next message");
    a.wait(&r, sk);
    // A send cannot be cancelled; a matched receive neither.
    let big = pattern(8 * a.q.chunk(), 5);
    let rk = b.recv(None, big.len());
    let sk = a.send(ab, big.clone());
    assert!(!a.q.cancel(sk));
    assert!(progress_until(&r, STEP, || b.q.counts().posted == 0));
    assert!(!b.q.cancel(rk));
    check(&b.wait(&r, rk), big.len(), &big, ba, "matched");
    a.wait(&r, sk);
}

#[test]
fn soft_abandoned_operations_are_safe() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_abandon");
    let (r, a, b, ab, ba) = soft_pair();
    let chunk = a.q.chunk();
    // A receive abandoned while posted still takes its message; the table
    // drops the buffer then.
    let rk = b.recv(None, 3 * chunk);
    assert!(b.ep.completions().abandon(rk).is_none());
    let sk = a.send(ab, pattern(3 * chunk, 1));
    check_sent(&a.wait(&r, sk), 3 * chunk, ab, "into an abandoned receive");
    assert!(progress_until(&r, STEP, || b.ep.completions().is_empty()));
    // A send abandoned before its receive exists still delivers every byte.
    let data = pattern(5 * chunk + 3, 2);
    let sk = a.send(ab, data.clone());
    assert!(a.ep.completions().abandon(sk).is_none());
    assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
    let rk = b.recv(None, data.len());
    check(
        &b.wait(&r, rk),
        data.len(),
        &data,
        ba,
        "from an abandoned send",
    );
    assert!(progress_until(&r, STEP, || a.ep.completions().is_empty()));
    // An abandoned receive cancelled later.
    let rk = b.recv(None, 8);
    assert!(b.ep.completions().abandon(rk).is_none());
    assert!(b.q.cancel(rk));
    assert!(progress_until(&r, STEP, || b.ep.completions().is_empty()));
    let c = b.q.counts();
    assert_eq!((c.posted, c.receiving, c.unexpected), (0, 0, 0));
}

#[test]
fn soft_message_burst_keeps_order_under_back_pressure() {
    let _dog = Watchdog::new(Duration::from_secs(60), "soft_message_burst");
    let (r, a, b, ab, ba) = soft_pair();
    let chunk = a.q.chunk();
    let n = 200;
    let msgs: Vec<Vec<u8>> = (0..n)
        .map(|i| pattern((i * 977) % (3 * chunk + 7), i as u64))
        .collect();
    // Half the receives before the sends (far more requests than the
    // soft engine's AM credit: `Again` is retried from progress).
    let mut rks: Vec<OpKey> = (0..n / 2).map(|_| b.recv(None, 3 * chunk + 7)).collect();
    let sks: Vec<OpKey> = msgs.iter().map(|m| a.send(ab, m.clone())).collect();
    rks.extend((n / 2..n).map(|_| b.recv(Some(ba), 3 * chunk + 7)));
    for (i, (rk, m)) in rks.into_iter().zip(&msgs).enumerate() {
        check(&b.wait(&r, rk), m.len(), m, ba, &format!("message {i}"));
    }
    for (sk, m) in sks.into_iter().zip(&msgs) {
        check_sent(&a.wait(&r, sk), m.len(), ab, "send");
    }
}

#[test]
fn soft_garbage_active_messages_are_dropped() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_garbage");
    let (r, a, b, ab, ba) = soft_pair();
    let id = a.q.handler_id();
    let garbage: Vec<(Vec<u64>, Vec<u8>)> = vec![
        (vec![1, 2, 3], vec![0; 8]),
        (vec![], vec![]),
        (vec![header(9), 1, 2, 3], vec![]),
        (vec![header(3), 0x1234_0000_0007, 1, 0], vec![0; 16]),
        (vec![header(3), 5, 1, 1 << 40], vec![0; 16]),
        (vec![header(2), 777, 1, 10], vec![]),
        (vec![header(4), 777], vec![]),
        (vec![header(1), 5, 3], vec![0; 4]),
        (vec![header(1), 5, u64::MAX], vec![0; 4]),
    ];
    for (args, payload) in &garbage {
        // `Again` until the peer's AM credit arrives.
        assert!(progress_until(&r, STEP, || {
            match b.ep.am_request(ba, id, args, payload) {
                Ok(()) => true,
                Err(e) if e.kind() == ErrorKind::Again => false,
                Err(e) => panic!("am_request: {e}"),
            }
        }));
    }
    assert!(progress_until(&r, STEP, || a.q.counts().dropped == garbage.len() as u64));
    let c = a.q.counts();
    assert_eq!((c.unexpected, c.posted, c.sends, c.receiving), (0, 0, 0, 0));
    // Traffic goes on.
    let data = pattern(1 << 20, 4);
    let rk = a.recv(None, data.len());
    let sk = b.send(ba, data.clone());
    check(&a.wait(&r, rk), data.len(), &data, ab, "after garbage");
    check_sent(&b.wait(&r, sk), data.len(), ba, "send");
}

#[test]
fn soft_dead_peer_fails_pending_sends() {
    let _dog = Watchdog::new(Duration::from_secs(30), "soft_dead_peer");
    let (r, a, b, ab, _ba) = soft_pair();
    let waiting = a.send(ab, pattern(3 * a.q.chunk(), 1));
    assert!(progress_until(&r, STEP, || b.q.counts().unexpected == 1));
    b.ep.close(Duration::from_secs(2)).expect("close b");
    // Wait until a's engine knows (an MQ post to b then fails at once).
    assert!(progress_until(&r, STEP, || {
        let k = a.ep.completions().insert();
        let down =
            a.ep.isend(ab, 1, Default::default(), OpBuffer::empty(), k)
                .is_err();
        // The probe's completion, if any, is not ours to wait for.
        drop(a.ep.completions().abandon(k));
        down
    }));
    // The next request to b fails, and with it every transfer with b.
    let next = a.send(ab, b"anyone there?".to_vec());
    for (k, what) in [(next, "new send"), (waiting, "waiting send")] {
        let c = a.wait(&r, k);
        assert_eq!(
            c.status.error,
            Some(ErrorKind::Io),
            "{what}: {:?}",
            c.status
        );
    }
    assert_eq!(a.q.counts().sends, 0);
}

#[test]
fn soft_auto_progress_both_directions_at_once() {
    let _dog = Watchdog::new(Duration::from_secs(60), "soft_auto_progress");
    let engine = SoftEngine::default();
    let r = Reactor::auto(AutoProgress::new().interval(Duration::from_micros(50))).expect("auto");
    let a = Arc::new(Node::open(&engine, &r));
    let b = Arc::new(Node::open(&engine, &r));
    let (ab, ba) = connect_pair(&a.ep, &b.ep);
    let chunk = a.q.chunk();
    let run = |me: Arc<Node<_>>, peer: PeerAddr, seed: u64, r: Reactor| {
        std::thread::spawn(move || {
            for i in 0..40u64 {
                let n = ((i as usize) * 1531) % (4 * chunk);
                let rk = me.recv(Some(peer), 4 * chunk);
                let data = pattern(n, seed + i);
                let sk = me.send(peer, data);
                let got = me.block(&r, rk);
                assert_eq!(got.status.error, None, "{:?}", got.status);
                let want = pattern(n, (seed ^ 1000) + i);
                assert_eq!(&got.buffer.as_slice()[..got.status.nbytes], &want[..]);
                assert_eq!(me.block(&r, sk).status.error, None);
            }
        })
    };
    let ta = run(a.clone(), ab, 0, r.clone());
    let tb = run(b.clone(), ba, 1000, r.clone());
    ta.join().expect("a's thread");
    tb.join().expect("b's thread");
}

// ----- native engine, two processes ---------------------------------------------------

/// Whether the compat build of PSM (shared memory) is the default library;
/// otherwise prints why the test is skipped (a failure when
/// `PSMRAIL_REQUIRE_NATIVE=1`).
fn native_available() -> bool {
    let reason = match psm_sys::PsmLibrary::load() {
        Ok(l) if l.build() == psm_sys::PsmBuild::Psm2Compat => return true,
        Ok(_) => "the default PSM library is not the compat build (libpsm2-2-compat), which shared memory needs".to_owned(),
        Err(e) => e.to_string(),
    };
    assert!(
        !support::native::required(),
        "PSMRAIL_REQUIRE_NATIVE=1 but {reason}"
    );
    eprintln!("SKIPPED: {reason}");
    false
}

fn make_native() -> NativeEngine {
    NativeEngine::load().unwrap_or_else(|e| panic!("the native engine does not load: {e}"))
}

/// Every size both ways between two processes over real PSM: the parent
/// sends (the child posts its receive only once the message waits
/// unexpected), the child echoes what it got into a receive the parent
/// posted first; truncation; cancel of an unmatched receive.
#[test]
fn native_two_processes() {
    const TEST: &str = "native_two_processes";
    match peer::role().as_deref() {
        Some("echo") => return native_echo(),
        Some(_) => return native_parent(),
        None => {}
    }
    if !native_available() {
        return;
    }
    let devices = std::env::var("PSM2_DEVICES").unwrap_or_else(|_| "self,shm".into());
    let solo = Peer::spawn(TEST, "solo", &[("PSM2_DEVICES", &devices)]);
    let status = solo.wait(Duration::from_secs(120));
    assert!(status.success(), "{TEST} failed in its process: {status}");
}

fn native_parent() {
    let _dog = Watchdog::new(Duration::from_secs(90), "native parent");
    let _spin = spin_lock();
    let engine = make_native();
    let r = Reactor::manual();
    let me = Node::open(&engine, &r);
    let mut child = Peer::spawn(
        "native_two_processes",
        "echo",
        &[("PSMRAIL_AMMSG_PARENT", &me.ep.epid().to_string())],
    );
    let epid: Epid = child
        .recv_line_with(STEP, || {
            r.progress();
        })
        .parse()
        .expect("the child's epid");
    let peer = me
        .ep
        .connect(&[epid], STEP)
        .remove(0)
        .expect("connect to the child");
    let chunk = me.q.chunk();

    // Cancel of an unmatched receive.
    let k = me.recv(Some(peer), 16);
    assert!(me.q.cancel(k));
    assert_eq!(me.wait(&r, k).status.error, Some(ErrorKind::Canceled));

    let mut cases: Vec<(usize, usize)> = sizes(chunk).iter().map(|&s| (s, s)).collect();
    cases.extend([(1 << 20, 1000), (chunk + 1, chunk)]);
    for (i, &(size, cap)) in cases.iter().enumerate() {
        let what = format!("{size} B into {cap}");
        let data = pattern(size, i as u64);
        let back = size.min(cap);
        let rk = me.recv(Some(peer), back);
        let sk = me.send(peer, data.clone());
        child.send_line(&format!("echo {size} {cap} {i}"));
        check_sent(&me.wait(&r, sk), size, peer, &what);
        check(
            &me.wait(&r, rk),
            back,
            &data[..back],
            peer,
            &format!("echo of {what}"),
        );
        let verdict = child.recv_line_with(STEP, || {
            r.progress();
        });
        assert_eq!(verdict, "ok", "{what}");
    }
    assert_eq!(me.q.counts().dropped, 0);
    child.send_line("quit");
    let status = child.wait(STEP);
    assert!(status.success(), "the echo child failed: {status}");
    // Nothing is pending: a short graceful close is the quickest in libpsm2.
    me.ep.close(Duration::from_millis(10)).expect("close");
}

fn native_echo() {
    let _dog = Watchdog::new(Duration::from_secs(90), "native echo child");
    let parent: Epid = std::env::var("PSMRAIL_AMMSG_PARENT")
        .expect("the parent's epid")
        .parse()
        .expect("an epid");
    let lines = peer::stdin_lines();
    let engine = make_native();
    let r = Reactor::manual();
    let me = Node::open(&engine, &r);
    let to_parent = me
        .ep
        .connect(&[parent], STEP)
        .remove(0)
        .expect("connect to the parent");
    say(&me.ep.epid().to_string());
    loop {
        let mut line = None;
        assert!(progress_until(&r, Duration::from_secs(60), || {
            line = lines.try_recv().ok();
            line.is_some()
        }));
        let line = line.expect("a line");
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[..] {
            ["echo", size, cap, seed] => {
                let (size, cap, seed): (usize, usize, u64) = (
                    size.parse().unwrap(),
                    cap.parse().unwrap(),
                    seed.parse().unwrap(),
                );
                // Send before receive: wait until it is unexpected here.
                assert!(progress_until(&r, STEP, || me.q.counts().unexpected == 1));
                let rk = me.recv(None, cap);
                let c = me.wait(&r, rk);
                let data = pattern(size, seed);
                let n = size.min(cap);
                check(&c, size, &data[..n], to_parent, "the parent's message");
                let sk = me.send(to_parent, data[..n].to_vec());
                check_sent(&me.wait(&r, sk), n, to_parent, "echo");
                say("ok");
            }
            ["quit"] => break,
            _ => panic!("unknown command {line:?}"),
        }
    }
    // Nothing is pending: a short graceful close is the quickest in libpsm2.
    me.ep.close(Duration::from_millis(10)).expect("close");
}
