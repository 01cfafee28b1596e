//! The engine conformance suite: what every engine behind the
//! [`EngineEndpoint`] contract must do, written once, generic over
//! [`Engine`].
//!
//! An engine's test file instantiates it with
//! `conformance_tests!(make_engine);` where `make_engine: fn() -> E` builds
//! the engine (the two-process scenarios call it again in the child). Each
//! scenario is a plain `pub fn` so an engine may also call them one by one.
//!
//! Scenarios that name "two processes" re-execute the test binary as the
//! peer (`support::peer`) and hold the machine-wide spin lock
//! (`support::spin_lock`) while both processes spin. Everything else runs
//! two or more endpoints of one process on one reactor (manual unless said
//! otherwise). Every wait is bounded by a watchdog that fails the test
//! binary instead of hanging it.
//!
//! The pair scenarios also run between two processes, for engines that open
//! one endpoint per process: [`remote`] (`remote_conformance_tests!`).
#![allow(dead_code)]

#[macro_use]
pub(crate) mod remote;

use crate::support::payload::pattern;
use crate::support::peer::{self, ChildIo, Peer};
use crate::support::spin_lock::spin_lock;
use psmrail::engine::{
    AmHandler, AmHandlerId, AmMessage, AmReply, EndpointOptions, Engine, EngineEndpoint, Epid,
    MqCompletion, OpBuffer, PeerAddr, SendMode, StableRegion, TagMatch,
};
use psmrail::reactor::{AutoProgress, OpKey, ProgressSource, Reactor};
use psmrail::ErrorKind;
use std::cell::UnsafeCell;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The job of every endpoint in the suite.
pub(crate) const UUID: [u8; 16] = *b"psmrail-conform!";
/// Another job.
pub(crate) const OTHER_UUID: [u8; 16] = *b"another-job-uuid";
/// Upper bound for one connect or line exchange.
pub(crate) const STEP: Duration = Duration::from_secs(20);
/// Message sizes of the two-process exchange.
pub(crate) const SIZES: [usize; 5] = [0, 1, 8 << 10, 1 << 20, 16 << 20];

/// Instantiates every scenario as a `#[test]` for the engine built by
/// `$make` (a `fn() -> E`).
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        #[test]
        fn conformance_tagged_sizes_two_processes() {
            $crate::conformance::tagged_sizes_two_processes(
                $make,
                &$crate::conformance::test_name(
                    module_path!(),
                    "conformance_tagged_sizes_two_processes",
                ),
            );
        }
        #[test]
        fn conformance_tag_matching_and_order() {
            $crate::conformance::tag_matching_and_order($make);
        }
        #[test]
        fn conformance_out_of_order_posting() {
            $crate::conformance::out_of_order_posting($make);
        }
        #[test]
        fn conformance_am_request_reply() {
            $crate::conformance::am_request_reply($make);
        }
        #[test]
        fn conformance_cancel() {
            $crate::conformance::cancel($make);
        }
        #[test]
        fn conformance_truncation() {
            $crate::conformance::truncation($make);
        }
        #[test]
        fn conformance_iprobe() {
            $crate::conformance::iprobe($make);
        }
        #[test]
        fn conformance_connect_dead_epid() {
            $crate::conformance::connect_dead_epid($make);
        }
        #[test]
        fn conformance_wrong_uuid() {
            $crate::conformance::wrong_uuid($make);
        }
        #[test]
        fn conformance_abandon_frees_once() {
            $crate::conformance::abandon_frees_once($make);
        }
        #[test]
        fn conformance_auto_progress() {
            $crate::conformance::auto_progress($make, ::std::time::Duration::from_millis(1));
        }
        #[test]
        fn conformance_self_loopback() {
            $crate::conformance::self_loopback($make);
        }
        #[test]
        fn conformance_keyed_posts() {
            $crate::conformance::keyed_posts($make);
        }
        #[test]
        fn conformance_message_burst() {
            $crate::conformance::message_burst($make);
        }
        #[test]
        fn conformance_all_to_all() {
            $crate::conformance::all_to_all($make, 8);
        }
    };
}

// ----- harness ---------------------------------------------------------------

/// The name the test harness knows a test by: its path inside the test
/// crate (`module_path!()` without the crate name) and its function name.
pub(crate) fn test_name(module: &str, function: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{function}"),
        None => function.to_owned(),
    }
}

/// Fails the whole test binary (exit 101) if not dropped within `limit`:
/// a hung engine must not hang CI.
pub(crate) struct Watchdog {
    done: Arc<AtomicBool>,
}

impl Watchdog {
    /// Arms it.
    pub(crate) fn new(limit: Duration, what: &str) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let what = what.to_owned();
        std::thread::spawn(move || {
            let end = Instant::now() + limit;
            while Instant::now() < end {
                if flag.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("watchdog: {what} did not finish within {limit:?}");
            std::process::exit(101);
        });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

/// Endpoint options of job `uuid`.
pub(crate) fn options(uuid: [u8; 16]) -> EndpointOptions {
    EndpointOptions {
        uuid,
        unit: None,
        port: None,
        close_timeout: Duration::from_secs(2),
    }
}

/// An open endpoint of engine `E`.
pub(crate) type Ep<E> = Arc<<E as Engine>::Endpoint>;

/// Opens an endpoint of job [`UUID`] and adds it to `reactor`.
pub(crate) fn open<E: Engine>(engine: &E, reactor: &Reactor) -> Ep<E> {
    open_job(engine, reactor, UUID)
}

/// Opens an endpoint of job `uuid` and adds it to `reactor`.
pub(crate) fn open_job<E: Engine>(engine: &E, reactor: &Reactor, uuid: [u8; 16]) -> Ep<E> {
    let ep = engine.open(&options(uuid)).expect("open an endpoint");
    let source: Arc<dyn ProgressSource> = ep.clone();
    reactor
        .add_source(source)
        .expect("add the endpoint to the reactor");
    ep
}

/// Connects `a` and `b` to each other, each from its own thread (each
/// `connect` drives only its own endpoint). Returns (a's handle of b, b's
/// handle of a).
pub(crate) fn connect_pair<P: EngineEndpoint>(a: &Arc<P>, b: &Arc<P>) -> (PeerAddr, PeerAddr) {
    std::thread::scope(|s| {
        let other = s.spawn(|| b.connect(&[a.epid()], STEP).remove(0));
        let mine = a.connect(&[b.epid()], STEP).remove(0);
        let theirs = other.join().expect("connect thread");
        (
            mine.expect("a connects to b"),
            theirs.expect("b connects to a"),
        )
    })
}

/// Two connected endpoints on a manual reactor.
pub(crate) struct Pair<E: Engine> {
    /// The engine.
    pub engine: E,
    /// The reactor both are on.
    pub reactor: Reactor,
    /// First endpoint.
    pub a: Ep<E>,
    /// Second endpoint.
    pub b: Ep<E>,
    /// `a`'s handle of `b`.
    pub ab: PeerAddr,
    /// `b`'s handle of `a`.
    pub ba: PeerAddr,
}

impl<E: Engine> Pair<E> {
    /// Opens and connects two endpoints on `reactor`.
    pub(crate) fn new(make: fn() -> E, reactor: Reactor) -> Pair<E> {
        let engine = make();
        let a = open(&engine, &reactor);
        let b = open(&engine, &reactor);
        let (ab, ba) = connect_pair(&a, &b);
        Pair {
            engine,
            reactor,
            a,
            b,
            ab,
            ba,
        }
    }

    /// Closes both.
    pub(crate) fn close(self) {
        self.a.close(Duration::from_secs(2)).expect("close a");
        self.b.close(Duration::from_secs(2)).expect("close b");
    }
}

/// Asserts two byte strings are equal, naming the first difference.
pub(crate) fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if got != want {
        let at = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
        panic!(
            "{what}: byte {at} differs: got {:#04x}, want {:#04x}",
            got[at], want[at]
        );
    }
}

/// Posts a standard send of `data`.
pub(crate) fn send<P: EngineEndpoint>(
    reactor: &Reactor,
    ep: &P,
    peer: PeerAddr,
    tag: u64,
    data: Vec<u8>,
) -> OpKey {
    send_buf(
        reactor,
        ep,
        peer,
        tag,
        OpBuffer::from(data),
        SendMode::Standard,
    )
}

/// Posts a send of `buffer` in `mode`.
pub(crate) fn send_buf<P: EngineEndpoint>(
    reactor: &Reactor,
    ep: &P,
    peer: PeerAddr,
    tag: u64,
    buffer: OpBuffer,
    mode: SendMode,
) -> OpKey {
    let key = ep.completions().insert();
    if let Err(e) = ep.isend(peer, tag, mode, buffer, key) {
        panic!("isend tag {tag:#x}: {}", e.error);
    }
    reactor.notify();
    key
}

/// Posts a receive of up to `cap` bytes.
pub(crate) fn recv<P: EngineEndpoint>(
    reactor: &Reactor,
    ep: &P,
    tags: TagMatch,
    cap: usize,
) -> OpKey {
    recv_buf(reactor, ep, tags, OpBuffer::from(vec![0u8; cap]))
}

/// Posts a receive into `buffer`.
pub(crate) fn recv_buf<P: EngineEndpoint>(
    reactor: &Reactor,
    ep: &P,
    tags: TagMatch,
    buffer: OpBuffer,
) -> OpKey {
    let key = ep.completions().insert();
    if let Err(e) = ep.irecv(tags, buffer, key) {
        panic!("irecv {tags:?}: {}", e.error);
    }
    reactor.notify();
    key
}

/// Sends an AM request, progressing while the engine answers `Again` (no
/// credit yet, as right after connecting, or too many in flight).
pub(crate) fn am_request<P: EngineEndpoint>(
    reactor: &Reactor,
    ep: &P,
    peer: PeerAddr,
    handler: AmHandlerId,
    args: &[u64],
    payload: &[u8],
) {
    let end = Instant::now() + STEP;
    loop {
        match ep.am_request(peer, handler, args, payload) {
            Ok(()) => {
                reactor.notify();
                return;
            }
            Err(e) if e.kind() == ErrorKind::Again && Instant::now() < end => {
                reactor.progress();
            }
            Err(e) => panic!("am_request: {e}"),
        }
    }
}

/// Waits for `key` with `block_on` (spinning in manual mode, parked in
/// auto mode).
pub(crate) fn wait<P: EngineEndpoint>(reactor: &Reactor, ep: &P, key: OpKey) -> MqCompletion {
    let table = ep.completions().clone();
    reactor.block_on(poll_fn(|cx| reactor.poll_completion(&table, key, cx)))
}

/// Waits for a successful completion.
pub(crate) fn wait_ok<P: EngineEndpoint>(
    reactor: &Reactor,
    ep: &P,
    key: OpKey,
    what: &str,
) -> MqCompletion {
    let c = wait(reactor, ep, key);
    assert_eq!(c.status.error, None, "{what}: {:?}", c.status);
    c
}

/// Checks a receive's completion: tag, lengths, source, bytes.
pub(crate) fn check_recv(c: &MqCompletion, tag: u64, want: &[u8], source: PeerAddr, what: &str) {
    assert_eq!(c.status.error, None, "{what}: {:?}", c.status);
    assert_eq!(c.status.tag, tag, "{what}: tag");
    assert_eq!(c.status.msg_len, want.len() as u64, "{what}: msg_len");
    assert_eq!(c.status.nbytes, want.len(), "{what}: nbytes");
    assert_eq!(c.status.source, Some(source), "{what}: source");
    assert_bytes(&c.buffer.as_slice()[..want.len()], want, what);
}

/// Runs `reactor` until `done()` or `limit`; whether it happened.
pub(crate) fn progress_until(
    reactor: &Reactor,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        if !reactor.progress().made() {
            std::thread::yield_now();
        }
    }
    done()
}

// ----- two processes -----------------------------------------------------------

const BASE_TAG: u64 = 0x5100;
const ECHO_TAG: u64 = 0x5200;

/// Tagged messages of 0 B, 1 B, 8 KiB, 1 MiB and 16 MiB to a child
/// process and back (new bytes), every byte checked on both sides; tag,
/// lengths and source checked; the child closes gracefully and exits 0.
pub(crate) fn tagged_sizes_two_processes<E: Engine>(make: fn() -> E, test: &str) {
    if peer::role().as_deref() == Some("child") {
        return tagged_sizes_child(make);
    }
    let _lock = spin_lock();
    let _dog = Watchdog::new(Duration::from_secs(90), test);
    let engine = make();
    let reactor = Reactor::manual();
    let ep = open(&engine, &reactor);
    let mut child = Peer::spawn(test, "child", &[]);
    child.send_line(&ep.epid().to_string());
    let line = child.recv_line_with(STEP, || {
        reactor.progress();
    });
    let child_epid: Epid = line.parse().expect("the child's epid");
    let peer = ep
        .connect(&[child_epid], STEP)
        .remove(0)
        .expect("connect to the child");
    assert_eq!(ep.peer_epid(peer), Some(child_epid));
    let echoes: Vec<OpKey> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| recv(&reactor, &*ep, TagMatch::exact(ECHO_TAG + i as u64), n))
        .collect();
    let sends: Vec<OpKey> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            send(
                &reactor,
                &*ep,
                peer,
                BASE_TAG + i as u64,
                pattern(n, i as u64),
            )
        })
        .collect();
    for (i, k) in sends.into_iter().enumerate() {
        let c = wait_ok(&reactor, &*ep, k, &format!("send of {} bytes", SIZES[i]));
        assert_eq!(c.status.msg_len, SIZES[i] as u64);
        assert_eq!(c.buffer.len(), SIZES[i], "the send buffer comes back whole");
    }
    for (i, k) in echoes.into_iter().enumerate() {
        let c = wait(&reactor, &*ep, k);
        let want = pattern(SIZES[i], 100 + i as u64);
        check_recv(
            &c,
            ECHO_TAG + i as u64,
            &want,
            peer,
            &format!("echo of {} bytes", SIZES[i]),
        );
    }
    let status = child.wait(STEP);
    assert!(status.success(), "the child failed: {status}");
    ep.close(Duration::from_secs(2)).expect("close");
}

fn tagged_sizes_child<E: Engine>(make: fn() -> E) {
    let mut io = ChildIo::new();
    let parent: Epid = io.recv_line().parse().expect("the parent's epid");
    let engine = make();
    let reactor = Reactor::manual();
    let ep = open(&engine, &reactor);
    let peer = ep
        .connect(&[parent], STEP)
        .remove(0)
        .expect("connect to the parent");
    io.send_line(&ep.epid().to_string());
    let recvs: Vec<OpKey> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| recv(&reactor, &*ep, TagMatch::exact(BASE_TAG + i as u64), n))
        .collect();
    for (i, k) in recvs.into_iter().enumerate() {
        let c = wait(&reactor, &*ep, k);
        let want = pattern(SIZES[i], i as u64);
        check_recv(
            &c,
            BASE_TAG + i as u64,
            &want,
            peer,
            &format!("child: {} bytes", SIZES[i]),
        );
    }
    let sends: Vec<OpKey> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            send(
                &reactor,
                &*ep,
                peer,
                ECHO_TAG + i as u64,
                pattern(n, 100 + i as u64),
            )
        })
        .collect();
    for k in sends {
        wait_ok(&reactor, &*ep, k, "child: echo send");
    }
    ep.close(Duration::from_secs(10)).expect("child: close");
}

// ----- matching ----------------------------------------------------------------

/// Tag and select matching with wildcards, posting order of receives, and
/// per-peer message order (eager and rendezvous mixed).
pub(crate) fn tag_matching_and_order<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "tag_matching_and_order");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);

    // The low byte is a wildcard; the first matching receive in posting
    // order wins, whatever its kind.
    let wild = recv(r, b, TagMatch::new(0x1200, 0xff00), 64);
    let exact = recv(r, b, TagMatch::exact(0x1234), 64);
    let any = recv(r, b, TagMatch::ANY, 64);
    let select_hi = recv(
        r,
        b,
        TagMatch::new(0xab00_0000_0000_0000, 0xff00_0000_0000_0000),
        64,
    );
    let s = [
        send(r, a, p.ab, 0x1234, b"first".to_vec()),
        send(r, a, p.ab, 0x9999, b"second".to_vec()),
        send(r, a, p.ab, 0x1234, b"third".to_vec()),
        send(r, a, p.ab, 0xab12_0000_0000_0001, b"fourth".to_vec()),
    ];
    check_recv(
        &wait(r, b, wild),
        0x1234,
        b"first",
        p.ba,
        "wildcard receive",
    );
    check_recv(&wait(r, b, any), 0x9999, b"second", p.ba, "ANY receive");
    check_recv(&wait(r, b, exact), 0x1234, b"third", p.ba, "exact receive");
    check_recv(
        &wait(r, b, select_hi),
        0xab12_0000_0000_0001,
        b"fourth",
        p.ba,
        "high-bit select",
    );
    for k in s {
        wait_ok(r, a, k, "send");
    }

    // A receive whose selected bits differ does not match: the message
    // waits for the next one.
    let miss = recv(r, b, TagMatch::new(0xab00, 0xff00), 8);
    let s = send(r, a, p.ab, 0xac00, b"late".to_vec());
    wait_ok(r, a, s, "send");
    assert!(progress_until(r, STEP, || b
        .iprobe(TagMatch::exact(0xac00))
        .unwrap()
        .is_some()));
    let hit = recv(r, b, TagMatch::new(0xac00, 0xff00), 8);
    check_recv(&wait(r, b, hit), 0xac00, b"late", p.ba, "second receive");
    assert!(
        b.cancel(miss).unwrap(),
        "the unmatched receive is still posted"
    );
    assert_eq!(wait(r, b, miss).status.error, Some(ErrorKind::Canceled));

    // Per-peer order, eager and rendezvous mixed, receives posted first.
    let sizes = [100, 200 << 10, 50, 300 << 10, 10, 0, 70 << 10];
    let recvs: Vec<OpKey> = sizes
        .iter()
        .map(|_| recv(r, b, TagMatch::exact(0x77), 300 << 10))
        .collect();
    let sends: Vec<OpKey> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| send(r, a, p.ab, 0x77, pattern(n, 700 + i as u64)))
        .collect();
    for (i, k) in recvs.into_iter().enumerate() {
        check_recv(
            &wait(r, b, k),
            0x77,
            &pattern(sizes[i], 700 + i as u64),
            p.ba,
            &format!("ordered message {i}"),
        );
    }
    for k in sends {
        wait_ok(r, a, k, "send");
    }

    // Unexpected messages are taken oldest first.
    let sends: Vec<OpKey> = (0..16u8)
        .map(|i| send(r, a, p.ab, 0x88, vec![i; 10 + usize::from(i)]))
        .collect();
    for k in sends {
        wait_ok(r, a, k, "send");
    }
    for i in 0..16u8 {
        let k = recv(r, b, TagMatch::exact(0x88), 64);
        check_recv(
            &wait(r, b, k),
            0x88,
            &vec![i; 10 + usize::from(i)],
            p.ba,
            &format!("unexpected {i}"),
        );
    }
    p.close();
}

/// Receives posted before and after their send, at eager and rendezvous
/// sizes.
pub(crate) fn out_of_order_posting<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "out_of_order_posting");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);
    let eager = 1000.min(a.limits().eager_threshold);
    let rndv = 4 * a.limits().eager_threshold + 123;
    for (i, n) in [eager, rndv].into_iter().enumerate() {
        let tag = 0x300 + 2 * i as u64;
        let data = pattern(n, tag);
        let rk = recv(r, b, TagMatch::exact(tag), n);
        let sk = send(r, a, p.ab, tag, data.clone());
        check_recv(
            &wait(r, b, rk),
            tag,
            &data,
            p.ba,
            &format!("{n} bytes, receive first"),
        );
        wait_ok(r, a, sk, "send");

        let tag = tag + 1;
        let data = pattern(n, tag);
        let sk = send(r, a, p.ab, tag, data.clone());
        assert!(
            progress_until(r, STEP, || b
                .iprobe(TagMatch::exact(tag))
                .unwrap()
                .is_some()),
            "the unexpected {n}-byte message never showed up"
        );
        let rk = recv(r, b, TagMatch::exact(tag), n);
        check_recv(
            &wait(r, b, rk),
            tag,
            &data,
            p.ba,
            &format!("{n} bytes, send first"),
        );
        wait_ok(r, a, sk, "send");
    }
    p.close();
}

// ----- active messages -----------------------------------------------------------

/// An AM as a handler saw it: source, arguments, payload.
pub(crate) type SeenAm = (PeerAddr, Vec<u64>, Vec<u8>);

/// Replies with the sum of the arguments and the payload reversed; records
/// the replies it gets.
#[derive(Default)]
pub(crate) struct Adder {
    /// Replies received, in order.
    pub replies: Mutex<Vec<SeenAm>>,
    /// Requests handled.
    pub requests: AtomicUsize,
}

impl AmHandler for Adder {
    fn on_request(&self, msg: AmMessage<'_>, reply: &mut dyn AmReply) {
        self.requests.fetch_add(1, Ordering::AcqRel);
        let sum: u64 = msg.args.iter().sum();
        let mut p = msg.payload.to_vec();
        p.reverse();
        reply
            .reply(AmHandlerId(0), &[sum, msg.args.len() as u64], &p)
            .expect("reply");
        assert!(
            reply.reply(AmHandlerId(0), &[], &[]).is_err(),
            "a second reply must be refused"
        );
    }

    fn on_reply(&self, msg: AmMessage<'_>) {
        self.replies
            .lock()
            .unwrap()
            .push((msg.source, msg.args.to_vec(), msg.payload.to_vec()));
    }
}

/// An AM request whose reply carries a value computed by the handler.
pub(crate) fn am_request_reply<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "am_request_reply");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);
    let ha = Arc::new(Adder::default());
    let hb = Arc::new(Adder::default());
    assert_eq!(a.am_register(ha.clone()).unwrap(), AmHandlerId(0));
    assert_eq!(b.am_register(hb.clone()).unwrap(), AmHandlerId(0));
    let limits = a.limits();
    let args: Vec<u64> = (1..=limits.max_am_args as u64).collect();
    let big = pattern(limits.max_am_request, 9);
    am_request(r, a, p.ab, AmHandlerId(0), &args, b"hello");
    am_request(r, a, p.ab, AmHandlerId(0), &[], &big);
    assert!(
        progress_until(r, STEP, || ha.replies.lock().unwrap().len() == 2),
        "replies"
    );
    let got = ha.replies.lock().unwrap().clone();
    let want_sum = args.iter().sum::<u64>();
    assert_eq!(
        got[0],
        (p.ab, vec![want_sum, args.len() as u64], b"olleh".to_vec())
    );
    let mut rev = big.clone();
    rev.reverse();
    assert_eq!(got[1].1, vec![0, 0]);
    assert_bytes(&got[1].2, &rev, "reply payload");
    assert_eq!(hb.requests.load(Ordering::Relaxed), 2);
    assert!(hb.replies.lock().unwrap().is_empty());
    // Beyond the limits: refused at once.
    let too_many: Vec<u64> = vec![0; limits.max_am_args + 1];
    let e = a
        .am_request(p.ab, AmHandlerId(0), &too_many, &[])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
    let too_long = vec![0; limits.max_am_request + 1];
    let e = a
        .am_request(p.ab, AmHandlerId(0), &[], &too_long)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize, "{e}");
    p.close();
}

// ----- cancel, truncation, probe -------------------------------------------------

/// Cancels `k`, an unmatched receive posted with a 333-byte buffer of
/// `0xee`: it completes `Canceled` with nothing written, and a second
/// cancel answers `false`.
pub(crate) fn assert_cancels_unmatched<P: EngineEndpoint>(r: &Reactor, b: &P, k: OpKey) {
    assert!(
        b.cancel(k).unwrap(),
        "an unmatched receive can be cancelled"
    );
    let c = wait(r, b, k);
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
}

/// Cancel of an unmatched receive completes it `Canceled` with its buffer;
/// cancel after a match (or of a send, or twice) answers `false`.
pub(crate) fn cancel<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "cancel");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);

    let k = recv_buf(r, b, TagMatch::exact(77), OpBuffer::from(vec![0xeeu8; 333]));
    assert_cancels_unmatched(r, b, k);

    // Matched on posting (the rendezvous message was already there): too
    // late to cancel; the data still arrives.
    let n = 4 * b.limits().eager_threshold;
    let data = pattern(n, 78);
    let sk = send(r, a, p.ab, 78, data.clone());
    assert!(progress_until(r, STEP, || b
        .iprobe(TagMatch::exact(78))
        .unwrap()
        .is_some()));
    let rk = recv(r, b, TagMatch::exact(78), n);
    assert!(
        !b.cancel(rk).unwrap(),
        "a matched receive cannot be cancelled"
    );
    check_recv(&wait(r, b, rk), 78, &data, p.ba, "matched receive");
    assert!(!a.cancel(sk).unwrap(), "sends cannot be cancelled");
    wait_ok(r, a, sk, "send");
    p.close();
}

/// A message longer than the receive buffer: `Trunc`, both lengths, the
/// first bytes delivered (eager and rendezvous).
pub(crate) fn truncation<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "truncation");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);
    let cases = [
        (300, 100),
        (3 * b.limits().eager_threshold, 1000),
        (5000, 0),
    ];
    for (i, (len, cap)) in cases.into_iter().enumerate() {
        let tag = 0x600 + i as u64;
        let data = pattern(len, tag);
        let rk = recv(r, b, TagMatch::exact(tag), cap);
        let sk = send(r, a, p.ab, tag, data.clone());
        let c = wait(r, b, rk);
        assert_eq!(c.status.error, Some(ErrorKind::Trunc), "{len} into {cap}");
        assert_eq!(c.status.msg_len, len as u64);
        assert_eq!(c.status.nbytes, cap);
        assert_eq!(c.status.tag, tag);
        assert_eq!(c.status.source, Some(p.ba));
        assert_bytes(c.buffer.as_slice(), &data[..cap], "truncated bytes");
        wait_ok(r, a, sk, "the sender of a truncated message succeeds");
    }
    p.close();
}

/// iprobe sees an unexpected message without consuming it.
pub(crate) fn iprobe<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "iprobe");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);
    assert_eq!(b.iprobe(TagMatch::ANY).unwrap(), None);
    let sk = send(r, a, p.ab, 5, b"abc".to_vec());
    assert!(progress_until(r, STEP, || b
        .iprobe(TagMatch::exact(5))
        .unwrap()
        .is_some()));
    for _ in 0..3 {
        let s = b
            .iprobe(TagMatch::new(4, !1))
            .unwrap()
            .expect("still there");
        assert_eq!(
            (s.tag, s.msg_len, s.source, s.error),
            (5, 3, Some(p.ba), None)
        );
        r.progress();
    }
    assert_eq!(b.iprobe(TagMatch::exact(6)).unwrap(), None);
    let rk = recv(r, b, TagMatch::exact(5), 8);
    let c = wait(r, b, rk);
    assert_eq!(&c.buffer.as_slice()[..c.status.nbytes], b"abc");
    assert_eq!(
        b.iprobe(TagMatch::ANY).unwrap(),
        None,
        "consumed by the receive"
    );
    wait_ok(r, a, sk, "send");
    p.close();
}

// ----- connecting ----------------------------------------------------------------

/// Connecting to the epid of a closed endpoint fails within the timeout,
/// `TimedOut` or `ConnRefused`, naming the epid.
pub(crate) fn connect_dead_epid<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "connect_dead_epid");
    let engine = make();
    let reactor = Reactor::manual();
    let a = open(&engine, &reactor);
    let dead = {
        let gone = engine.open(&options(UUID)).expect("open");
        let epid = gone.epid();
        gone.close(Duration::ZERO).expect("close");
        epid
    };
    let timeout = Duration::from_millis(500);
    let start = Instant::now();
    let e = a
        .connect(&[dead], timeout)
        .remove(0)
        .expect_err("connecting to a closed endpoint must fail");
    let took = start.elapsed();
    assert!(
        matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::ConnRefused),
        "unexpected kind: {e}"
    );
    assert!(
        took < timeout + Duration::from_millis(1500),
        "took {took:?}: {e}"
    );
    assert!(
        e.to_string().contains(&dead.to_string()),
        "the error names the epid: {e}"
    );
    a.close(Duration::from_secs(1)).unwrap();
}

/// Endpoints of different jobs cannot connect: `ConnRefused` on both
/// sides, naming the UUIDs.
pub(crate) fn wrong_uuid<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "wrong_uuid");
    let engine = make();
    let reactor = Reactor::manual();
    let a = open_job(&engine, &reactor, UUID);
    let b = open_job(&engine, &reactor, OTHER_UUID);
    let start = Instant::now();
    // Both dial; both keep progressing (as two live processes would), so
    // each refuses the other's Hello too.
    let stop = AtomicBool::new(false);
    let (ra, rb) = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                if !reactor.progress().made() {
                    std::thread::yield_now();
                }
            }
        });
        let other = s.spawn(|| b.connect(&[a.epid()], Duration::from_secs(5)).remove(0));
        let mine = a.connect(&[b.epid()], Duration::from_secs(5)).remove(0);
        let theirs = other.join().unwrap();
        stop.store(true, Ordering::Release);
        (mine, theirs)
    });
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "refusals are prompt"
    );
    for (side, r) in [("a", ra), ("b", rb)] {
        let e = r.expect_err("another job must be refused");
        assert_eq!(e.kind(), ErrorKind::ConnRefused, "{side}: {e}");
        assert!(e.to_string().to_lowercase().contains("uuid"), "{side}: {e}");
    }
    a.close(Duration::from_secs(1)).unwrap();
    b.close(Duration::from_secs(1)).unwrap();
}

// ----- cancellation safety -----------------------------------------------------------

/// A region that counts its drops.
pub(crate) struct CountedRegion {
    mem: Box<[UnsafeCell<u8>]>,
    drops: Arc<AtomicUsize>,
}

impl CountedRegion {
    /// `len` bytes of `fill`, as a region; its drop counter.
    pub(crate) fn counted(len: usize, fill: u8) -> (Arc<dyn StableRegion>, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let region = CountedRegion {
            mem: (0..len).map(|_| UnsafeCell::new(fill)).collect(),
            drops: drops.clone(),
        };
        (Arc::new(region), drops)
    }
}

// SAFETY: the bytes are only written through `as_ptr` by the engine while
// it owns the region (the test does not touch them meanwhile); the rest of
// the struct is immutable or atomic.
unsafe impl Sync for CountedRegion {}

// SAFETY: the boxed slice never moves or changes length while the region
// lives, so the pointer is stable and valid for `len` bytes.
unsafe impl StableRegion for CountedRegion {
    fn as_ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.mem.as_ptr())
    }
    fn len(&self) -> usize {
        self.mem.len()
    }
}

impl Drop for CountedRegion {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::AcqRel);
    }
}

/// An operation whose future is dropped (its key abandoned) keeps its
/// buffer until the engine is done, then frees it exactly once: a receive
/// later matched, one later cancelled, one ended by close, and a
/// rendezvous send whose receive is posted afterwards.
pub(crate) fn abandon_frees_once<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "abandon_frees_once");
    let p = Pair::new(make, Reactor::manual());
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);
    let settle = |r: &Reactor| {
        for _ in 0..200 {
            r.progress();
        }
    };

    // Matched after abandon.
    let (region, matched) = CountedRegion::counted(1024, 0);
    let k = recv_buf(r, b, TagMatch::exact(90), OpBuffer::from(region));
    assert!(b.completions().abandon(k).is_none(), "not complete yet");
    settle(r);
    assert_eq!(matched.load(Ordering::Acquire), 0, "kept while posted");
    let sk = send(r, a, p.ab, 90, b"into an abandoned receive".to_vec());
    wait_ok(r, a, sk, "send");
    assert!(progress_until(r, STEP, || matched.load(Ordering::Acquire) == 1));

    // Cancelled after abandon.
    let (region, cancelled) = CountedRegion::counted(64, 0);
    let k = recv_buf(r, b, TagMatch::exact(91), OpBuffer::from(region));
    assert!(b.completions().abandon(k).is_none());
    assert_eq!(cancelled.load(Ordering::Acquire), 0);
    assert!(b.cancel(k).unwrap());
    assert!(progress_until(r, STEP, || cancelled
        .load(Ordering::Acquire)
        == 1));

    // A rendezvous send abandoned before its receive exists: the engine
    // still reads the buffer afterwards.
    let n = 4 * a.limits().eager_threshold;
    let (region, sent) = CountedRegion::counted(n, 0x5a);
    let sk = send_buf(r, a, p.ab, 92, OpBuffer::from(region), SendMode::Standard);
    assert!(a.completions().abandon(sk).is_none());
    settle(r);
    assert_eq!(
        sent.load(Ordering::Acquire),
        0,
        "the engine still needs the send buffer"
    );
    let rk = recv(r, b, TagMatch::exact(92), n);
    let c = wait(r, b, rk);
    check_recv(&c, 92, &vec![0x5a; n], p.ba, "abandoned send");
    assert!(progress_until(r, STEP, || sent.load(Ordering::Acquire) == 1));

    // Ended by close.
    let (region, closed) = CountedRegion::counted(64, 0);
    let k = recv_buf(r, b, TagMatch::exact(93), OpBuffer::from(region));
    assert!(b.completions().abandon(k).is_none());
    settle(r);
    assert_eq!(closed.load(Ordering::Acquire), 0);
    b.close(Duration::from_secs(1)).unwrap();
    assert_eq!(
        closed.load(Ordering::Acquire),
        1,
        "close frees abandoned buffers"
    );

    settle(r);
    for (name, c) in [
        ("matched", &matched),
        ("cancelled", &cancelled),
        ("sent", &sent),
        ("closed", &closed),
    ] {
        assert_eq!(c.load(Ordering::Acquire), 1, "{name}: dropped exactly once");
    }
    a.close(Duration::from_secs(1)).unwrap();
    drop(p);
    for c in [&matched, &cancelled, &sent, &closed] {
        assert_eq!(c.load(Ordering::Acquire), 1);
    }
}

// ----- progress modes ----------------------------------------------------------------

/// The basic exchange with the reactor's auto thread doing all progress:
/// `block_on` parks, completions wake it.
pub(crate) fn auto_progress<E: Engine>(make: fn() -> E, interval: Duration) -> Duration {
    let _dog = Watchdog::new(Duration::from_secs(40), "auto_progress");
    let reactor = Reactor::auto(AutoProgress::new().interval(interval)).expect("auto reactor");
    let p = Pair::new(make, reactor);
    let (r, a, b) = (&p.reactor, &*p.a, &*p.b);
    let start = Instant::now();
    for i in 0..20u64 {
        let n = if i % 5 == 4 {
            3 * a.limits().eager_threshold
        } else {
            8 * i as usize
        };
        let ping = pattern(n, i);
        let rk = recv(r, b, TagMatch::exact(i), n);
        let sk = send(r, a, p.ab, i, ping.clone());
        check_recv(&wait(r, b, rk), i, &ping, p.ba, "ping");
        wait_ok(r, a, sk, "ping send");
        let rk = recv(r, a, TagMatch::exact(i), n);
        let sk = send(r, b, p.ba, i, ping.clone());
        check_recv(&wait(r, a, rk), i, &ping, p.ab, "pong");
        wait_ok(r, b, sk, "pong send");
    }
    let took = start.elapsed();
    p.close();
    took
}

/// Hundreds of messages of mixed sizes posted at once in both directions
/// (half of the receives before, half after the sends): every one arrives
/// intact and in order.
pub(crate) fn message_burst<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "message_burst");
    let p = Pair::new(make, Reactor::manual());
    let r = &p.reactor;
    let sizes = |i: usize| [5000, 100, 70 << 10, 4096, 0, 9000][i % 6];
    const N: usize = 300;
    let mut work = Vec::new();
    for (from, to, fp, tp) in [(&*p.a, &*p.b, p.ab, p.ba), (&*p.b, &*p.a, p.ba, p.ab)] {
        let early: Vec<OpKey> = (0..N / 2)
            .map(|_| recv(r, to, TagMatch::new(0xb0_0000, !0xffff), 70 << 10))
            .collect();
        let sends: Vec<OpKey> = (0..N)
            .map(|i| {
                send(
                    r,
                    from,
                    fp,
                    0xb0_0000 | i as u64,
                    pattern(sizes(i), i as u64),
                )
            })
            .collect();
        let late: Vec<OpKey> = (N / 2..N)
            .map(|_| recv(r, to, TagMatch::new(0xb0_0000, !0xffff), 70 << 10))
            .collect();
        work.push((
            from,
            to,
            tp,
            sends,
            early.into_iter().chain(late).collect::<Vec<_>>(),
        ));
    }
    for (from, to, tp, sends, recvs) in work {
        for (i, k) in recvs.into_iter().enumerate() {
            let c = wait(r, to, k);
            let want = pattern(sizes(i), i as u64);
            check_recv(
                &c,
                0xb0_0000 | i as u64,
                &want,
                tp,
                &format!("burst message {i}"),
            );
        }
        for k in sends {
            wait_ok(r, from, k, "burst send");
        }
    }
    p.close();
}

// ----- topologies --------------------------------------------------------------------

/// An endpoint on `reactor`, connected to its own epid; that peer address.
pub(crate) fn open_connected_to_self<E: Engine>(
    engine: &E,
    reactor: &Reactor,
) -> (Ep<E>, PeerAddr) {
    let a = open(engine, reactor);
    let me = a
        .connect(&[a.epid()], STEP)
        .remove(0)
        .expect("connect to self");
    (a, me)
}

/// An endpoint connects to its own epid and exchanges messages (eager and
/// rendezvous) and an AM with itself.
pub(crate) fn self_loopback<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "self_loopback");
    let engine = make();
    let r = &Reactor::manual();
    let (a, me) = open_connected_to_self(&engine, r);
    assert_eq!(a.peer_epid(me), Some(a.epid()));
    let again = a.connect(&[a.epid(), a.epid()], STEP);
    assert_eq!(
        again.into_iter().map(|x| x.unwrap()).collect::<Vec<_>>(),
        vec![me, me]
    );
    for (i, n) in [0usize, 17, 8 << 10, 4 * a.limits().eager_threshold + 1]
        .into_iter()
        .enumerate()
    {
        let tag = 0x900 + i as u64;
        let data = pattern(n, tag);
        let rk = recv(r, &*a, TagMatch::exact(tag), n);
        let sk = send(r, &*a, me, tag, data.clone());
        check_recv(
            &wait(r, &*a, rk),
            tag,
            &data,
            me,
            &format!("{n} bytes to self"),
        );
        wait_ok(r, &*a, sk, "send to self");
    }
    let h = Arc::new(Adder::default());
    a.am_register(h.clone()).unwrap();
    am_request(r, &*a, me, AmHandlerId(0), &[20, 22], b"ab");
    assert!(progress_until(r, STEP, || h.replies.lock().unwrap().len() == 1));
    assert_eq!(
        h.replies.lock().unwrap()[0],
        (me, vec![42, 2], b"ba".to_vec())
    );
    a.close(Duration::from_secs(1)).unwrap();
}

/// `isend_keyed` / `irecv_keyed` post under keys of their own, which
/// complete like any other; a post they refuse leaves no key behind.
pub(crate) fn keyed_posts<E: Engine>(make: fn() -> E) {
    let _dog = Watchdog::new(Duration::from_secs(30), "keyed_posts");
    let engine = make();
    let r = &Reactor::manual();
    let (a, me) = open_connected_to_self(&engine, r);
    let table = a.completions().clone();
    let before = table.len();
    for (i, n) in [0usize, 8, 4 * a.limits().eager_threshold + 1]
        .into_iter()
        .enumerate()
    {
        let tag = 0xa00 + i as u64;
        let data = pattern(n, tag);
        let rk = a
            .irecv_keyed(TagMatch::exact(tag), OpBuffer::from(vec![0u8; n]))
            .unwrap_or_else(|e| panic!("irecv_keyed: {}", e.error));
        let sk = a
            .isend_keyed(me, tag, SendMode::Standard, OpBuffer::from(data.clone()))
            .unwrap_or_else(|e| panic!("isend_keyed: {}", e.error));
        assert_ne!(rk, sk, "two posts share a key");
        assert_eq!(table.len(), before + 2, "each keyed post holds one slot");
        r.notify();
        check_recv(
            &wait(r, &*a, rk),
            tag,
            &data,
            me,
            &format!("{n} bytes, keyed"),
        );
        wait_ok(r, &*a, sk, "keyed send");
        assert!(
            progress_until(r, STEP, || table.len() == before),
            "the keyed posts' slots are freed once taken"
        );
    }
    // Refused posts: the buffer comes back and no slot stays taken.
    let shared = OpBuffer::from(bytes::Bytes::from_static(b"read-only"));
    let e = a
        .irecv_keyed(TagMatch::exact(1), shared)
        .expect_err("a read-only receive buffer");
    assert_eq!(e.error.kind(), ErrorKind::Inval, "{}", e.error);
    assert_eq!(e.buffer.as_slice(), b"read-only");
    let e = a
        .isend_keyed(
            PeerAddr(u64::MAX - 7),
            1,
            SendMode::Standard,
            OpBuffer::from(b"to nobody".to_vec()),
        )
        .expect_err("a send to a peer never connected");
    assert_eq!(e.buffer.as_slice(), b"to nobody");
    assert_eq!(table.len(), before, "a refused post left a slot taken");
    a.close(Duration::from_secs(1)).unwrap();
    let e = a
        .irecv_keyed(TagMatch::exact(1), OpBuffer::from(vec![0u8; 4]))
        .expect_err("a post on a closed endpoint");
    assert_eq!(e.buffer.len(), 4);
    assert_eq!(
        table.len(),
        before,
        "a post refused after close left a slot"
    );
}

/// `n` endpoints of one process connect all-to-all and each sends one
/// message (eager or rendezvous) to every other; every message arrives
/// with the right source, tag and bytes.
pub(crate) fn all_to_all<E: Engine>(make: fn() -> E, n: usize) {
    let _dog = Watchdog::new(Duration::from_secs(60), "all_to_all");
    let engine = make();
    let r = &Reactor::manual();
    let eps: Vec<Ep<E>> = (0..n).map(|_| open(&engine, r)).collect();
    let epids: Vec<Epid> = eps.iter().map(|e| e.epid()).collect();
    let peers: Vec<Vec<PeerAddr>> = std::thread::scope(|s| {
        let handles: Vec<_> = eps
            .iter()
            .map(|ep| {
                let epids = &epids;
                s.spawn(move || {
                    ep.connect(epids, STEP)
                        .into_iter()
                        .map(|x| x.expect("all-to-all connect"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let eager = 1024;
    let rndv = 2 * eps[0].limits().eager_threshold;
    let size = |i: usize, j: usize| if (i + j) % 2 == 0 { eager } else { rndv };
    let tag = |i: usize, j: usize| ((i as u64) << 8) | j as u64;
    let mut recvs = Vec::new();
    for (j, ep) in eps.iter().enumerate() {
        for i in (0..n).filter(|&i| i != j) {
            let k = recv(r, &**ep, TagMatch::exact(tag(i, j)), size(i, j));
            recvs.push((i, j, k));
        }
    }
    let mut sends = Vec::new();
    for (i, (ep, to)) in eps.iter().zip(&peers).enumerate() {
        for j in (0..n).filter(|&j| j != i) {
            let data = pattern(size(i, j), tag(i, j));
            sends.push((i, send(r, &**ep, to[j], tag(i, j), data)));
        }
    }
    for (i, j, k) in recvs {
        let c = wait(r, &*eps[j], k);
        let from = c.status.source.expect("source");
        assert_eq!(eps[j].peer_epid(from), Some(epids[i]), "source of {i}->{j}");
        check_recv(
            &c,
            tag(i, j),
            &pattern(size(i, j), tag(i, j)),
            from,
            &format!("{i}->{j}"),
        );
    }
    for (i, k) in sends {
        wait_ok(r, &*eps[i], k, "send");
    }
    for ep in eps {
        ep.close(Duration::from_secs(2)).unwrap();
    }
}
