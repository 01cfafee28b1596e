//! Ping-pong through the native engine and the reactor, against the raw
//! psm-sys floor, in one run.
//!
//! The phases, each with a fresh pair of processes (this program
//! re-executes itself as the peer, `--serve <phase> --peer <epid> --cpu <n>`;
//! PSM allows one endpoint per process at a time):
//!
//! * **raw**: blocking ping-pong straight through psm-sys, no reactor: the
//!   client posts `psm_mq_irecv`, sends with `psm_mq_send` and spins in
//!   `psm_mq_wait`; the server mirrors it (as psm-sys's `raw_pingpong`).
//! * **poll**: the non-blocking floor, still straight through psm-sys with
//!   no reactor: the same posts and blocking send, but the wait is a loop
//!   of `psm_mq_test` and `psm_poll` (test again once a poll moved
//!   something), as any waiting that must return to its caller between
//!   polls has to be; a future cannot block in `psm_mq_wait`, whose loop
//!   stays inside PSM. The gap between raw and poll is what PSM's
//!   interface charges every non-blocking user.
//! * **engine**: the same exchange through the engine contract: both sides
//!   post `irecv` and `isend` on a [`NativeEndpoint`] with owned buffers
//!   (moved in, handed back by the completion and reused as they are: no
//!   allocation per round trip) and wait with [`Reactor::poll_completion`]
//!   in manual mode until both complete (each poll a progress round:
//!   `psm_mq_ipeek`, the completion table).
//! * **fast**: the engine contract's fast path: messages up to
//!   [`EngineEndpoint::max_inject`] go out with
//!   [`EngineEndpoint::inject`] (PSM's blocking send, no completion),
//!   larger ones with `isend`; receives are waited for with
//!   [`EngineEndpoint::poll_completion`], which in manual mode tests the
//!   operation's own PSM request and hands its result over directly.
//! * **async**: the fast path awaited: the same posts, each side's
//!   exchanges one async task under [`Reactor::block_on`], each receive
//!   awaited as a `poll_fn` over `EngineEndpoint::poll_completion`. Its
//!   gap to fast is what an executor and a future cost by themselves;
//!   its gap to api is what the public API's layers cost.
//! * **api**: the same exchange through the public API on the native
//!   engine in manual progress, as `examples/pingpong.rs --tagged` runs
//!   it: `trecv` futures, `tinject` up to the inject size (else `tsend`
//!   awaited), each side's exchanges one async task under
//!   [`Reactor::block_on`]. Measured here, in rounds alternating with raw,
//!   its ratio to raw is not at the mercy of the VM's state changing
//!   between separate runs.
//!
//! Both processes spin, each pinned to its own CPU (the client picks both
//! and tells the peer its CPU). Printed per size: the median over the
//! repetitions of the half round trip, the bandwidth `size / half round
//! trip`, and each phase / raw. The phases alternate (`--rounds`, default
//! 3) and each figure is the median over the rounds, so a noisy moment on
//! the machine hits every phase alike. `--phases` picks (and orders) the
//! phases and `--sizes` the sizes, e.g. `--phases fast --sizes 8` alone
//! under `perf record`. `--verbose` prints every round: the VM these
//! figures come from switches between a fast and a slow state (about 2x
//! at 8 B and 64 KiB, 3x at 4 MiB) from one process pair to the next, so
//! compare phases within rounds that agree; the last lines do that: the
//! median ratio to raw within rounds where both were in the same state.
//!
//! `--probe` (in a build with the `latency-probe` feature) also prints,
//! per phase and side, where a message's time goes: from the peer's
//! `psm_mq_send` to this side's poll seeing the message, and from there to
//! this side's own send (`psmrail::engine::native::probe`); the raw phase
//! has no detection stamp (it waits inside `psm_mq_wait`), nor does the
//! engine phase (its completions arrive through progress rounds).
//!
//! ```text
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --bin engine_pingpong -- --help
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --features latency-probe --bin engine_pingpong -- --probe --sizes 8 --phases poll,fast,async,api
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --bin engine_pingpong [-- --reps 9 --rounds 3 --phases raw,poll,engine,fast --sizes 8,65536,4194304 --no-pin]
//! ```
//!
//! Options (`--help` lists them): `--reps N` (default 9), `--rounds N`
//! (default 3), `--phases` (default all six, in the order above),
//! `--sizes` (among 8, 65536 and 4194304; default all three), `--no-pin`,
//! `-v/--verbose`, `--probe`.
//!
//! A/B mode (`ab.rs`): `--ab N --ab-builds A,B [--ab-phase api]` runs
//! engine_pingpong builds in turn and prints each build's median
//! PHASE/raw per VM state; `--ab N --ab-pingpong target/release/examples/pingpong`
//! alternates this build's raw floor with the pingpong example's public API
//! ping-pong and prints the median API/raw.

mod ab;

use clap::{CommandFactory, Parser};
use psm_sys::{ffi, Affinity, Endpoint, EpAddr, Mq, OpenOptions, DEFAULT_UUID};
use psmrail::config::PsmConfig;
use psmrail::engine::native::{NativeEndpoint, NativeEngine};
use psmrail::engine::{
    EndpointOptions, EngineEndpoint, Epid, MqCompletion, OpBuffer, PeerAddr, SendMode, TagMatch,
};
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, Domain, Endpoint as ApiEndpoint, EngineChoice, Fabric,
    FiAddr, Hints,
};
use psmrail::reactor::{CompletionTable, OpKey, Reactor};
use psmrail_bench::harness;
use psmrail_bench::stats::median_or_zero;
use psmrail_bench::units::{parse_count, parse_epid};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// (message size, round trips per repetition)
/// The default sizes (`--sizes` picks among them).
const SIZES: &[(usize, usize)] = &[(8, 200_000), (64 * 1024, 5_000), (4 * 1024 * 1024, 100)];
const TAG_PING: u64 = 0x50;
const TAG_PONG: u64 = 0x51;
const TAG_SYNC: u64 = 0x52;

/// One of [`SIZES`]: (message size, round trips per repetition).
fn parse_size(v: &str) -> Result<(usize, usize), String> {
    let n: usize = v
        .parse()
        .map_err(|e| format!("{v:?} is not a message size: {e}"))?;
    SIZES
        .iter()
        .find(|s| s.0 == n)
        .copied()
        .ok_or_else(|| format!("{n}: expected 8, 65536 or 4194304"))
}

/// One of the phases, by name.
fn parse_phase(v: &str) -> Result<Phase, String> {
    Phase::ALL
        .into_iter()
        .find(|p| p.name() == v)
        .ok_or_else(|| format!("{v:?}: expected raw, poll, engine, fast, async or api"))
}

/// What `--help` prints after the options.
const PHASES_HELP: &str = "\
Phases (each round runs them in the order given; figures are medians over rounds):
  raw     psm-sys, blocking calls, no reactor (the floor)
  poll    psm-sys, waiting with psm_mq_test + psm_poll (the non-blocking floor)
  engine  the engine contract, Reactor::poll_completion in manual mode
  fast    the engine contract's fast path: inject and EngineEndpoint::poll_completion
  async   the fast path awaited, one task per side under Reactor::block_on
  api     the public API: trecv futures and tinject
Run with PSM2_DEVICES=self,shm where there is no adapter.";

/// Ping-pong between two processes (this one and a copy of it), both
/// spinning, pinned to two CPUs: half round trip at 8 B, bandwidth at
/// 64 KiB and 4 MiB, through the native engine and the reactor against
/// the raw psm-sys floor.
#[derive(Parser, Debug)]
#[command(name = "engine_pingpong", after_help = PHASES_HELP, args_override_self = true)]
struct Args {
    /// Timed repetitions per size and phase (each figure is their median).
    #[arg(long, value_name = "N", default_value = "9", value_parser = parse_count)]
    reps: usize,
    /// The phases alternate this many times, so all see the same machine
    /// noise; the figure is the median over the rounds.
    #[arg(long, value_name = "N", default_value = "3", value_parser = parse_count)]
    rounds: usize,
    /// The phases to run, in this order in every round (comma-separated).
    #[arg(
        long,
        value_name = "PHASES",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "raw,poll,engine,fast,async,api",
        value_parser = parse_phase
    )]
    phases: Vec<Phase>,
    /// Message sizes, among 8, 65536 and 4194304 (comma-separated).
    #[arg(
        long,
        value_name = "SIZES",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "8,65536,4194304",
        value_parser = parse_size
    )]
    sizes: Vec<(usize, usize)>,
    /// Pin neither process.
    #[arg(long)]
    no_pin: bool,
    /// Print every round's figures, not only the medians.
    #[arg(short, long)]
    verbose: bool,
    /// Per phase and side, send -> detection and detection -> send (needs
    /// a build with --features latency-probe).
    #[arg(long)]
    probe: bool,
    /// A/B mode: alternate separate runs this many times (of the builds in
    /// --ab-builds, or of the raw floor and --ab-pingpong) and print their
    /// 8 B ratios and the medians per VM state.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    ab: Option<usize>,
    /// A/B mode: engine_pingpong builds to alternate (comma-separated
    /// paths), each run with `--sizes 8 --rounds 3 --phases raw,PHASE`.
    #[arg(long, value_name = "PATHS", value_delimiter = ',', requires = "ab")]
    ab_builds: Vec<std::path::PathBuf>,
    /// A/B mode: the phase the builds compare with raw.
    #[arg(long, value_name = "PHASE", default_value = "fast", value_parser = parse_phase)]
    ab_phase: Phase,
    /// A/B mode: alternate this build's raw floor with the public API's
    /// native tagged 8 B ping-pong of the pingpong example at this path.
    #[arg(
        long,
        value_name = "PATH",
        requires = "ab",
        conflicts_with = "ab_builds"
    )]
    ab_pingpong: Option<std::path::PathBuf>,
    /// Peer mode (run by the benchmark itself): serve this phase.
    #[arg(long, value_name = "PHASE", value_parser = parse_phase, hide = true)]
    serve: Option<Phase>,
    /// Peer mode: the client's epid (hexadecimal).
    #[arg(long, value_name = "EPID", value_parser = parse_epid, hide = true)]
    peer: Option<u64>,
    /// Peer mode: pin to this CPU.
    #[arg(long, hide = true)]
    cpu: Option<usize>,
    /// Peer mode: where to write its probe stamps.
    #[arg(long, value_name = "PATH", hide = true)]
    probe_out: Option<std::path::PathBuf>,
}

/// The arguments; `--probe` refused (as a usage error) in a build without
/// the latency probe.
fn parse_args() -> Args {
    let args = Args::parse();
    if args.probe && !cfg!(feature = "latency-probe") {
        Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--probe needs the latency probe: cargo run --release -p psmrail-bench \
                 --features latency-probe --bin engine_pingpong -- --probe",
            )
            .exit();
    }
    args
}

/// One way of running the ping-pong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Blocking psm-sys calls, no reactor: the floor.
    Raw,
    /// As raw, but waiting with `psm_mq_test` + `psm_poll`: the floor of
    /// non-blocking waiting.
    Poll,
    /// `isend`/`irecv` and `Reactor::poll_completion` (every poll a
    /// progress round, completions through ipeek and the table).
    Engine,
    /// `inject` for sends up to `max_inject`, `isend` above;
    /// `EngineEndpoint::poll_completion` (the op's own request tested).
    Fast,
    /// The fast path's posts, each receive awaited (`poll_fn` over
    /// `poll_completion`), one task per side under `Reactor::block_on`.
    Async,
    /// The public API: `trecv` futures, `tinject` (or `tsend`), one task
    /// per side under `Reactor::block_on`.
    Api,
}

impl Phase {
    const ALL: [Phase; 6] = [
        Phase::Raw,
        Phase::Poll,
        Phase::Engine,
        Phase::Fast,
        Phase::Async,
        Phase::Api,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::Raw => "raw",
            Phase::Poll => "poll",
            Phase::Engine => "engine",
            Phase::Fast => "fast",
            Phase::Async => "async",
            Phase::Api => "api",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Phase::Raw => "psm-sys: irecv, blocking psm_mq_send, psm_mq_wait (no reactor)",
            Phase::Poll => {
                "psm-sys: irecv, blocking psm_mq_send, psm_mq_test + psm_poll loop (no reactor)"
            }
            Phase::Engine => {
                "engine contract: isend + irecv, Reactor::poll_completion (manual): \
                 progress rounds, ipeek, completion table"
            }
            Phase::Fast => {
                "engine contract: inject (<= 64 B, else isend) + irecv, \
                 EngineEndpoint::poll_completion (manual): the op's own request tested"
            }
            Phase::Async => {
                "the fast path awaited: inject + irecv, poll_fn over poll_completion, \
                 one task per side under Reactor::block_on (manual)"
            }
            Phase::Api => {
                "public API: trecv future, tinject (<= 64 B, else tsend), \
                 one task per side under Reactor::block_on (manual)"
            }
        }
    }
}

fn pin_to(cpu: usize) -> bool {
    harness::pin(cpu).is_ok()
}

/// Medians (half round trip, seconds) per size.
type Medians = Vec<f64>;

/// Runs `round` `iters / 10 + 1` times to warm up, then `reps` timed
/// repetitions of `iters` rounds; the median half round trip.
fn measure(reps: usize, iters: usize, mut round: impl FnMut()) -> f64 {
    measure_batches(reps, iters, |n| {
        for _ in 0..n {
            round();
        }
    })
}

/// As [`measure`], with `rounds(n)` running `n` rounds in one go (one
/// async task per batch in the api phase).
fn measure_batches(reps: usize, iters: usize, mut rounds: impl FnMut(usize)) -> f64 {
    rounds(iters / 10 + 1);
    median_or_zero(
        (0..reps)
            .map(|_| {
                let start = Instant::now();
                rounds(iters);
                start.elapsed().as_secs_f64() / (2 * iters) as f64
            })
            .collect(),
    )
}

/// Spawns the peer for `phase`, told our epid and its CPU; its epid.
fn spawn_peer(phase: &str, epid: u64, args: &Args, cpu: Option<usize>) -> (Child, u64) {
    let exe = std::env::current_exe().expect("own path");
    let mut cmd = Command::new(exe);
    cmd.args(["--serve", phase, "--peer", &format!("{epid:#x}")])
        .args(["--reps", &args.reps.to_string()]);
    let sizes: Vec<String> = args.sizes.iter().map(|s| s.0.to_string()).collect();
    cmd.args(["--sizes", &sizes.join(",")]);
    match cpu {
        Some(c) => cmd.args(["--cpu", &c.to_string()]),
        None => cmd.arg("--no-pin"),
    };
    if args.probe {
        cmd.arg("--probe-out").arg(probe_path(phase));
    }
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn the peer");
    let epid = read_epid(&mut child, phase);
    (child, epid)
}

/// The `EPID=` line of the peer.
fn read_epid(child: &mut Child, phase: &str) -> u64 {
    let mut lines = BufReader::new(child.stdout.take().expect("peer stdout"));
    loop {
        let mut line = String::new();
        if lines.read_line(&mut line).expect("read the peer") == 0 {
            panic!("the {phase} peer exited before sending its epid");
        }
        if let Some(v) = line.trim().strip_prefix("EPID=") {
            return u64::from_str_radix(v.trim_start_matches("0x"), 16).expect("hex epid");
        }
    }
}

// ----- raw ---------------------------------------------------------------------------

fn raw_open() -> Endpoint {
    // PSM must not re-pin the thread we pinned ourselves.
    let options = OpenOptions {
        affinity: Some(Affinity::Skip),
        ..OpenOptions::default()
    };
    let mut ep = Endpoint::open(&DEFAULT_UUID, &options).unwrap_or_else(|e| {
        eprintln!("cannot open a PSM endpoint: {e}");
        std::process::exit(1);
    });
    ep.init_mq(ffi::PSM_MQ_ORDERMASK_ALL).expect("psm_mq_init");
    ep
}

fn raw_connect(ep: &Endpoint, peer: u64) -> EpAddr {
    let results = ep
        .connect(&[psm_sys::Epid(peer)], Some(Duration::from_secs(30)))
        .expect("psm_ep_connect");
    match &results[0] {
        Ok(addr) => *addr,
        Err(e) => panic!("connect to {peer:#x}: {e}"),
    }
}

/// How the raw phases wait for a request.
#[derive(Clone, Copy)]
enum RawWait {
    /// `psm_mq_wait` (phase raw).
    Block,
    /// `psm_mq_test`, and `psm_poll` until it moves something (phase poll).
    TestPoll,
}

impl RawWait {
    fn phase(self) -> &'static str {
        match self {
            RawWait::Block => "raw",
            RawWait::TestPoll => "poll",
        }
    }

    fn wait(self, ep: &Endpoint, mq: &Mq<'_>, req: &mut psm_sys::MqRequest) {
        match self {
            RawWait::Block => {
                mq.wait(req).expect("wait");
            }
            RawWait::TestPoll => {
                let mut polled = stamp_now();
                while mq.test(req).expect("test").is_none() {
                    // Only a poll that moved something can have finished it.
                    while !ep.poll().expect("poll") {}
                    polled = stamp_now();
                }
                stamp_detected(polled);
            }
        }
    }
}

fn raw_client(args: &Args, peer_cpu: Option<usize>, how: RawWait) -> Medians {
    let ep = raw_open();
    let (mut child, peer_epid) = spawn_peer(how.phase(), ep.epid().0, args, peer_cpu);
    let peer = raw_connect(&ep, peer_epid);
    let mq = ep.mq().unwrap();
    let mut sync = [0u8; 1];
    mq.send(peer, 0, TAG_SYNC, b"s").unwrap();
    mq.recv(TAG_SYNC, !0, &mut sync).unwrap();
    let mut medians = Vec::new();
    for &(size, iters) in &args.sizes {
        let out: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut inb = vec![0u8; size];
        let m = measure(args.reps, iters, || {
            raw_round(&ep, &mq, peer, &out, &mut inb, how)
        });
        assert!(inb == out, "the pong payload differs at {size} B");
        medians.push(m);
    }
    mq.recv(TAG_SYNC, !0, &mut sync).unwrap();
    ep.close(Some(Duration::from_secs(5))).expect("close");
    assert!(
        child.wait().expect("wait").success(),
        "the {} peer failed",
        how.phase()
    );
    medians
}

fn raw_round(ep: &Endpoint, mq: &Mq<'_>, peer: EpAddr, out: &[u8], inb: &mut [u8], how: RawWait) {
    // SAFETY: `inb` is exclusively borrowed until the wait completes the request.
    let mut req =
        unsafe { mq.irecv(TAG_PONG, !0, 0, inb.as_mut_ptr(), inb.len(), 0) }.expect("irecv");
    stamp_send();
    mq.send(peer, 0, TAG_PING, out).expect("send");
    how.wait(ep, mq, &mut req);
}

fn raw_server(args: &Args, client: u64, how: RawWait) {
    let ep = raw_open();
    println!("EPID={:#x}", ep.epid().0);
    std::io::stdout().flush().unwrap();
    let peer = raw_connect(&ep, client);
    let mq = ep.mq().unwrap();
    let mut sync = [0u8; 1];
    mq.recv(TAG_SYNC, !0, &mut sync).unwrap();
    mq.send(peer, 0, TAG_SYNC, b"s").unwrap();
    for &(size, iters) in &args.sizes {
        let mut bufs = [vec![0u8; size], vec![0u8; size]];
        let rounds = iters / 10 + 1 + iters * args.reps;
        // SAFETY: bufs[0] is only touched through the request, completed below.
        let mut req =
            unsafe { mq.irecv(TAG_PING, !0, 0, bufs[0].as_mut_ptr(), size, 0) }.expect("irecv");
        for round in 0..rounds {
            how.wait(&ep, &mq, &mut req);
            let (a, b) = bufs.split_at_mut(1);
            let (filled, spare) = if round % 2 == 0 {
                (&a[0], &mut b[0])
            } else {
                (&b[0], &mut a[0])
            };
            if round + 1 < rounds {
                // SAFETY: `spare` is not used until this request completes.
                req = unsafe { mq.irecv(TAG_PING, !0, 0, spare.as_mut_ptr(), size, 0) }
                    .expect("irecv");
            }
            stamp_send();
            mq.send(peer, 0, TAG_PONG, filled).expect("send");
        }
    }
    mq.send(peer, 0, TAG_SYNC, b"d").unwrap();
    ep.close(Some(Duration::from_secs(5))).expect("close");
}

// ----- engine ------------------------------------------------------------------------

/// The engine side of one process: endpoint, reactor, completion table.
struct Side {
    ep: Arc<NativeEndpoint>,
    reactor: Reactor,
    table: Arc<CompletionTable<MqCompletion>>,
    peer: PeerAddr,
    /// The fast path: wait with `EngineEndpoint::poll_completion` (the
    /// op's own request tested directly) and send small messages with
    /// `inject`.
    fast: bool,
}

impl Side {
    fn open() -> (Arc<NativeEndpoint>, Reactor) {
        let engine = NativeEngine::load().unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1);
        });
        let options = EndpointOptions {
            uuid: DEFAULT_UUID,
            unit: None,
            port: None,
            close_timeout: Duration::from_secs(5),
        };
        engine
            .open_with_reactor(&options, psmrail::reactor::ProgressMode::Manual)
            .expect("open the endpoint")
    }

    fn new(ep: Arc<NativeEndpoint>, reactor: Reactor, peer: u64, fast: bool) -> Side {
        let peer = ep
            .connect(&[Epid(peer)], Duration::from_secs(30))
            .remove(0)
            .expect("connect");
        let table = ep.completions().clone();
        Side {
            ep,
            reactor,
            table,
            peer,
            fast,
        }
    }

    /// Whether a message of `len` bytes is sent with `inject`.
    fn injects(&self, len: usize) -> bool {
        self.fast && len <= self.ep.max_inject()
    }

    fn inject(&self, tag: u64, data: &[u8]) {
        if let Err(e) = self.ep.inject(self.peer, tag, data) {
            panic!("inject: {e}");
        }
    }

    /// One poll of `key`: the fast path or the reactor's.
    fn poll(&self, key: OpKey, cx: &mut Context<'_>) -> Poll<MqCompletion> {
        if self.fast {
            self.ep.poll_completion(&self.reactor, key, cx)
        } else {
            self.reactor.poll_completion(&self.table, key, cx)
        }
    }

    fn irecv(&self, tag: u64, buf: OpBuffer) -> OpKey {
        match self.ep.irecv_keyed(TagMatch::exact(tag), buf) {
            Ok(key) => key,
            Err(e) => panic!("irecv: {}", e.error),
        }
    }

    fn isend(&self, tag: u64, buf: OpBuffer) -> OpKey {
        match self.ep.isend_keyed(self.peer, tag, SendMode::Standard, buf) {
            Ok(key) => key,
            Err(e) => panic!("isend: {}", e.error),
        }
    }

    /// Polls `key` to completion (manual mode: every poll makes progress);
    /// the buffer back (reused as is for the next operation, as a program
    /// recycling its buffers would).
    fn wait(&self, key: OpKey) -> OpBuffer {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(c) = self.poll(key, &mut cx) {
                assert_eq!(c.status.error, None, "{:?}", c.status);
                return c.buffer;
            }
        }
    }

    /// Waits for both; (send buffer, receive buffer).
    fn wait_both(&self, send: OpKey, recv: OpKey) -> (OpBuffer, OpBuffer) {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut s, mut r) = (None, None);
        while s.is_none() || r.is_none() {
            if s.is_none() {
                if let Poll::Ready(c) = self.poll(send, &mut cx) {
                    s = Some(c.buffer);
                }
            }
            if r.is_none() {
                if let Poll::Ready(c) = self.poll(recv, &mut cx) {
                    assert_eq!(c.status.error, None, "{:?}", c.status);
                    r = Some(c.buffer);
                }
            }
        }
        (
            s.unwrap_or_else(OpBuffer::empty),
            r.unwrap_or_else(OpBuffer::empty),
        )
    }

    fn close(self) {
        self.ep.close(Duration::from_secs(5)).expect("close");
    }
}

/// The client's side of an engine phase: the peer spawned, connected and
/// in step with us.
fn client_side(args: &Args, peer_cpu: Option<usize>, phase: &str, fast: bool) -> (Side, Child) {
    let (ep, reactor) = Side::open();
    let (child, peer_epid) = spawn_peer(phase, ep.epid().0, args, peer_cpu);
    let side = Side::new(ep, reactor, peer_epid, fast);
    let k = side.isend(TAG_SYNC, OpBuffer::from(b"s".to_vec()));
    side.wait(k);
    let k = side.irecv(TAG_SYNC, OpBuffer::from(vec![0]));
    side.wait(k);
    (side, child)
}

/// Waits for the peer's last word, closes, and checks the peer's exit.
fn client_done(side: Side, mut child: Child, phase: &str) {
    let k = side.irecv(TAG_SYNC, OpBuffer::from(vec![0]));
    side.wait(k);
    side.close();
    assert!(
        child.wait().expect("wait").success(),
        "the {phase} peer failed"
    );
}

/// The server's side of an engine phase: its epid printed for the client,
/// connected and in step with it.
fn server_side(client: u64, fast: bool) -> Side {
    let (ep, reactor) = Side::open();
    println!("EPID={:#x}", ep.epid().0);
    std::io::stdout().flush().unwrap();
    let side = Side::new(ep, reactor, client, fast);
    let k = side.irecv(TAG_SYNC, OpBuffer::from(vec![0]));
    side.wait(k);
    let k = side.isend(TAG_SYNC, OpBuffer::from(b"s".to_vec()));
    side.wait(k);
    side
}

/// Tells the client we are done, and closes.
fn server_done(side: Side) {
    let k = side.isend(TAG_SYNC, OpBuffer::from(b"d".to_vec()));
    side.wait(k);
    side.close();
}

fn engine_client(args: &Args, peer_cpu: Option<usize>, fast: bool) -> Medians {
    let phase = if fast { "fast" } else { "engine" };
    let (side, child) = client_side(args, peer_cpu, phase, fast);
    let mut medians = Vec::new();
    for &(size, iters) in &args.sizes {
        let want: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut out = Some(OpBuffer::from(want.clone()));
        let mut inb = Some(OpBuffer::from(vec![0u8; size]));
        let inject = side.injects(size);
        let m = measure(args.reps, iters, || {
            let rk = side.irecv(TAG_PONG, inb.take().unwrap_or_else(OpBuffer::empty));
            if inject {
                side.inject(TAG_PING, out.as_ref().map_or(&[], |b| b.as_slice()));
                inb = Some(side.wait(rk));
            } else {
                let sk = side.isend(TAG_PING, out.take().unwrap_or_else(OpBuffer::empty));
                let (o, i) = side.wait_both(sk, rk);
                out = Some(o);
                inb = Some(i);
            }
        });
        assert!(
            inb.as_ref().map(|b| b.as_slice()) == Some(&want[..]),
            "the pong payload differs at {size} B"
        );
        medians.push(m);
    }
    client_done(side, child, phase);
    medians
}

fn engine_server(args: &Args, client: u64, fast: bool) {
    let side = server_side(client, fast);
    for &(size, iters) in &args.sizes {
        let rounds = iters / 10 + 1 + iters * args.reps;
        let inject = side.injects(size);
        // Two buffers: the next ping's receive is posted before the pong is
        // sent, so pings never arrive unexpected.
        let mut spare = Some(OpBuffer::from(vec![0u8; size]));
        let mut posted = side.irecv(TAG_PING, OpBuffer::from(vec![0u8; size]));
        for round in 0..rounds {
            let filled = side.wait(posted);
            if round + 1 < rounds {
                posted = side.irecv(TAG_PING, spare.take().unwrap_or_else(OpBuffer::empty));
            }
            if inject {
                side.inject(TAG_PONG, filled.as_slice());
                spare = Some(filled);
            } else {
                let sk = side.isend(TAG_PONG, filled);
                spare = Some(side.wait(sk));
            }
        }
    }
    server_done(side);
}

// ----- async -----------------------------------------------------------------------

impl Side {
    /// Awaits `key` through the fast path; the buffer back.
    async fn completion(&self, key: OpKey) -> OpBuffer {
        let c = std::future::poll_fn(|cx| self.ep.poll_completion(&self.reactor, key, cx)).await;
        assert_eq!(c.status.error, None, "{:?}", c.status);
        c.buffer
    }

    /// Sends `buf` (injected up to the inject size, else sent and
    /// awaited); the buffer back.
    async fn send_awaited(&self, tag: u64, buf: OpBuffer) -> OpBuffer {
        if self.injects(buf.len()) {
            self.inject(tag, buf.as_slice());
            buf
        } else {
            let key = self.isend(tag, buf);
            self.completion(key).await
        }
    }
}

/// The client's timed loop of a task-based phase, per size: `batch(n,
/// out, inb)` runs `n` round trips sending `out` and receiving into `inb`
/// (each handed back after use); checks the last pong's payload.
fn measure_sizes(
    args: &Args,
    mut batch: impl FnMut(usize, &mut OpBuffer, &mut OpBuffer),
) -> Medians {
    let mut medians = Vec::new();
    for &(size, iters) in &args.sizes {
        let want: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut out = OpBuffer::from(want.clone());
        let mut inb = OpBuffer::from(vec![0u8; size]);
        medians.push(measure_batches(args.reps, iters, |n| {
            batch(n, &mut out, &mut inb)
        }));
        assert!(
            inb.as_slice() == &want[..],
            "the pong payload differs at {size} B"
        );
    }
    medians
}

fn async_client(args: &Args, peer_cpu: Option<usize>) -> Medians {
    let (side, child) = client_side(args, peer_cpu, "async", true);
    let medians = measure_sizes(args, |n, out, inb| {
        side.reactor.block_on(async {
            for _ in 0..n {
                // Posted before the ping goes out, awaited after.
                let rk = side.irecv(TAG_PONG, std::mem::take(inb));
                *out = side.send_awaited(TAG_PING, std::mem::take(out)).await;
                *inb = side.completion(rk).await;
            }
        })
    });
    client_done(side, child, "async");
    medians
}

fn async_server(args: &Args, client: u64) {
    let side = server_side(client, true);
    for &(size, iters) in &args.sizes {
        let rounds = iters / 10 + 1 + iters * args.reps;
        // As the engine server: the next ping's receive is posted before
        // the pong goes out, two buffers taking turns.
        let mut spare = OpBuffer::from(vec![0u8; size]);
        side.reactor.block_on(async {
            let mut posted = side.irecv(TAG_PING, OpBuffer::from(vec![0u8; size]));
            for round in 0..rounds {
                let filled = side.completion(posted).await;
                if round + 1 < rounds {
                    posted = side.irecv(TAG_PING, std::mem::take(&mut spare));
                }
                spare = side.send_awaited(TAG_PONG, filled).await;
            }
        });
    }
    server_done(side);
}

// ----- api ---------------------------------------------------------------------------

/// The public-API side of one process: a tagged RDM endpoint on the native
/// engine, manual progress, with the peer in its AV.
struct ApiSide {
    _fabric: Fabric,
    _domain: Domain,
    av: AddressVector,
    /// Messages up to this size are injected.
    inject: usize,
    ep: ApiEndpoint,
    reactor: Reactor,
}

impl ApiSide {
    fn open() -> ApiSide {
        // No name server and no close delay: neither is part of the figure,
        // and the phases open and close many endpoints.
        let config = PsmConfig::builder()
            .name_server(false)
            .delay(Duration::ZERO)
            .build()
            .expect("config");
        let hints = Hints::new()
            .caps(Caps::TAGGED)
            .engine(EngineChoice::Native)
            .config(config);
        let info = getinfo(Some(&hints))
            .unwrap_or_else(|e| {
                eprintln!("getinfo: {e}");
                std::process::exit(1);
            })
            .remove(0);
        let fabric = Fabric::open(&info).expect("fabric");
        let domain = fabric.domain(&info).expect("domain");
        let av = domain.av(AvAttr::new()).expect("av");
        let ep = domain
            .endpoint(&info)
            .bind_av(&av)
            .enable()
            .expect("endpoint");
        let reactor = domain.reactor().clone();
        ApiSide {
            _fabric: fabric,
            _domain: domain,
            av,
            inject: info.inject_size,
            ep,
            reactor,
        }
    }

    fn epid(&self) -> u64 {
        self.ep.getname().0
    }

    fn insert(&self, peer: u64) -> FiAddr {
        self.av.insert(&[Epid(peer)]).remove(0).expect("av insert")
    }

    /// Sends `buf`: injected up to the inject size, else sent and awaited
    /// (the buffer coming back into `buf`).
    async fn send(&self, peer: FiAddr, tag: u64, buf: &mut OpBuffer) {
        if buf.len() <= self.inject {
            self.inject(peer, tag, buf);
        } else {
            self.send_awaited(peer, tag, buf).await;
        }
    }

    /// Injects `buf` (at most the inject size). Not a future: the timed
    /// loops call it directly, as a latency-bound program would.
    fn inject(&self, peer: FiAddr, tag: u64, buf: &OpBuffer) {
        self.ep.tinject(peer, tag, buf.as_slice()).expect("tinject");
    }

    /// Sends `buf` (above the inject size) and awaits it, the buffer coming
    /// back into `buf`.
    async fn send_awaited(&self, peer: FiAddr, tag: u64, buf: &mut OpBuffer) {
        let (r, back) = self.ep.tsend(peer, tag, std::mem::take(buf)).await;
        r.expect("tsend");
        *buf = back;
    }

    /// Receives one message with `tag` into `buf`.
    async fn recv(&self, tag: u64, buf: &mut OpBuffer) {
        let (r, back) = self.ep.trecv(std::mem::take(buf), tag, 0).await;
        r.expect("trecv");
        *buf = back;
    }

    fn sync(&self, peer: FiAddr, first: bool) {
        let mut token = OpBuffer::from(vec![0u8]);
        self.reactor.block_on(async {
            if first {
                self.send(peer, TAG_SYNC, &mut token).await;
                self.recv(TAG_SYNC, &mut token).await;
            } else {
                self.recv(TAG_SYNC, &mut token).await;
                self.send(peer, TAG_SYNC, &mut token).await;
            }
        });
    }
}

fn api_client(args: &Args, peer_cpu: Option<usize>) -> Medians {
    let side = ApiSide::open();
    let (mut child, peer_epid) = spawn_peer("api", side.epid(), args, peer_cpu);
    let peer = side.insert(peer_epid);
    side.sync(peer, true);
    let medians = measure_sizes(args, |n, out, inb| {
        let injects = out.len() <= side.inject;
        side.reactor.block_on(async {
            for _ in 0..n {
                // Posted before the ping goes out, awaited after.
                let pong = side.ep.trecv(std::mem::take(inb), TAG_PONG, 0);
                if injects {
                    side.inject(peer, TAG_PING, out);
                } else {
                    side.send_awaited(peer, TAG_PING, out).await;
                }
                let (r, back) = pong.await;
                r.expect("trecv");
                *inb = back;
            }
        })
    });
    side.sync(peer, true);
    drop(side);
    assert!(child.wait().expect("wait").success(), "the api peer failed");
    medians
}

fn api_server(args: &Args, client: u64) {
    let side = ApiSide::open();
    println!("EPID={:#x}", side.epid());
    std::io::stdout().flush().unwrap();
    let peer = side.insert(client);
    side.sync(peer, false);
    for &(size, iters) in &args.sizes {
        let rounds = iters / 10 + 1 + iters * args.reps;
        // As the raw server: the next ping's receive is posted before the
        // pong goes out, two buffers taking turns.
        let mut spare = OpBuffer::from(vec![0u8; size]);
        // As a latency-bound program would: the inject decided once per
        // size, the call made directly (no helper future in the loop).
        let injects = size <= side.inject;
        side.reactor.block_on(async {
            let mut posted = Some(side.ep.trecv(vec![0u8; size], TAG_PING, 0));
            for round in 0..rounds {
                let Some(ping) = posted.take() else {
                    unreachable!("a receive is posted for every round")
                };
                let (r, mut filled) = ping.await;
                r.expect("trecv");
                if round + 1 < rounds {
                    posted = Some(side.ep.trecv(std::mem::take(&mut spare), TAG_PING, 0));
                }
                if injects {
                    side.inject(peer, TAG_PONG, &filled);
                } else {
                    side.send_awaited(peer, TAG_PONG, &mut filled).await;
                }
                spare = filled;
            }
        });
    }
    side.sync(peer, false);
}

fn main() {
    let args = parse_args();

    if let Some(n) = args.ab {
        let contenders = match &args.ab_pingpong {
            Some(path) => ab::Contenders::Pingpong(path.clone()),
            None if args.ab_builds.is_empty() => {
                eprintln!("engine_pingpong: --ab needs --ab-builds or --ab-pingpong");
                std::process::exit(2);
            }
            None => ab::Contenders::Builds {
                builds: args.ab_builds.clone(),
                phase: args.ab_phase.name(),
            },
        };
        if let Err(e) = ab::main(n, &contenders) {
            eprintln!("engine_pingpong: {e}");
            std::process::exit(1);
        }
        return;
    }

    if let Some(phase) = args.serve {
        // Die with the client instead of spinning forever if it is killed.
        let _ = harness::exit_with_parent();
        if let (false, Some(cpu)) = (args.no_pin, args.cpu) {
            pin_to(cpu);
        }
        let client = args.peer.expect("--peer");
        match phase {
            Phase::Raw => raw_server(&args, client, RawWait::Block),
            Phase::Poll => raw_server(&args, client, RawWait::TestPoll),
            Phase::Engine => engine_server(&args, client, false),
            Phase::Fast => engine_server(&args, client, true),
            Phase::Async => async_server(&args, client),
            Phase::Api => api_server(&args, client),
        }
        if let Some(path) = &args.probe_out {
            write_probe(path);
        }
        return;
    }
    let cpus: Vec<usize> = psmrail::reactor::CpuTopology::read_now()
        .allowed
        .iter()
        .collect();
    let pinned = !args.no_pin && cpus.len() >= 2 && pin_to(cpus[0]);
    let peer_cpu = pinned.then(|| cpus[1]);
    // One list of per-round medians per phase, phases alternating.
    let mut runs: Vec<Vec<Medians>> = vec![Vec::new(); args.phases.len()];
    // Per phase, the probe's splits of every round (client, server).
    let mut probes: Vec<Vec<ProbeRound>> = vec![Vec::new(); args.phases.len()];
    for _ in 0..args.rounds {
        for (i, phase) in args.phases.iter().enumerate() {
            // Stamps of earlier code (another phase's close) do not count.
            drop_probe();
            runs[i].push(match *phase {
                Phase::Raw => raw_client(&args, peer_cpu, RawWait::Block),
                Phase::Poll => raw_client(&args, peer_cpu, RawWait::TestPoll),
                Phase::Engine => engine_client(&args, peer_cpu, false),
                Phase::Fast => engine_client(&args, peer_cpu, true),
                Phase::Async => async_client(&args, peer_cpu),
                Phase::Api => api_client(&args, peer_cpu),
            });
            if args.probe {
                probes[i].push(probe_round(phase.name()));
            }
        }
    }
    if args.verbose {
        // This VM moves between a fast and a slow state (about 2x at 8 B)
        // from one process pair to the next: compare phases within a round
        // when they agree.
        for round in 0..args.rounds {
            let mut line = format!("round {round}:");
            for (phase, r) in args.phases.iter().zip(&runs) {
                let us: Vec<String> = r[round].iter().map(|m| format!("{:.3}", m * 1e6)).collect();
                line += &format!("  {} {}", phase.name(), us.join("/"));
            }
            println!("{line}  (us per size)");
        }
    }
    let figures: Vec<Medians> = runs
        .iter()
        .map(|rounds| {
            (0..args.sizes.len())
                .map(|i| median_or_zero(rounds.iter().map(|r| r[i]).collect()))
                .collect()
        })
        .collect();
    let lib = psm_sys::PsmLibrary::get().expect("loaded above");
    println!(
        "ping-pong, {} build ({}), 2 processes, both spinning, {}; median over {} alternating rounds of the medians of {} repetitions",
        lib.build(),
        lib.resolved_path()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        if pinned {
            format!("pinned to CPUs {} and {}", cpus[0], cpus[1])
        } else {
            "not pinned".into()
        },
        args.rounds,
        args.reps
    );
    for phase in &args.phases {
        println!("  {:>6}: {}", phase.name(), phase.describe());
    }
    let raw = args.phases.iter().position(|p| *p == Phase::Raw);
    let mut header = format!("{:>9}", "size");
    for phase in &args.phases {
        header += &format!(" {:>11}", format!("{} us", phase.name()));
    }
    for phase in &args.phases {
        header += &format!(" {:>11}", format!("{} GB/s", phase.name()));
    }
    if raw.is_some() {
        for phase in args.phases.iter().filter(|p| **p != Phase::Raw) {
            header += &format!(" {:>11}", format!("{}/raw", phase.name()));
        }
    }
    println!("{header}");
    for (i, &(size, _)) in args.sizes.iter().enumerate() {
        let mut row = format!("{size:>9}");
        for f in &figures {
            row += &format!(" {:>11.3}", f[i] * 1e6);
        }
        for f in &figures {
            row += &format!(" {:>11.2}", size as f64 / f[i] / 1e9);
        }
        if let Some(r) = raw {
            for (phase, f) in args.phases.iter().zip(&figures) {
                if *phase != Phase::Raw {
                    row += &format!(" {:>11.3}", f[i] / figures[r][i]);
                }
            }
        }
        println!("{row}");
    }
    if let Some(r) = raw {
        print_by_state(&args, &runs, r);
    }
    if args.probe {
        print_probes(&args, &probes);
    }
}

/// The ratios to raw within single rounds, split by the VM's state: a
/// phase's round is in the slower state when its first size took over 1.5x
/// the phase's best round in this run (the states differ by about 2x), the
/// faster one otherwise; only rounds where the phase and raw were in the
/// same state count. A run that saw one state only reports it as the
/// faster: the absolute figures tell which it was.
fn print_by_state(args: &Args, runs: &[Vec<Medians>], raw: usize) {
    let slow = |rounds: &[Medians], round: usize| {
        let best = rounds.iter().map(|m| m[0]).fold(f64::INFINITY, f64::min);
        rounds[round][0] > 1.5 * best
    };
    println!(
        "ratios to raw within rounds, by the VM's state in this run (median, rounds counted):"
    );
    for (p, phase) in args.phases.iter().enumerate() {
        if p == raw {
            continue;
        }
        for (state, want_slow) in [("faster state", false), ("slower state", true)] {
            let rounds: Vec<usize> = (0..args.rounds)
                .filter(|&k| slow(&runs[p], k) == want_slow && slow(&runs[raw], k) == want_slow)
                .collect();
            if rounds.is_empty() {
                continue;
            }
            let mut line = format!("  {:>6}/raw, {state}:", phase.name());
            for (i, &(size, _)) in args.sizes.iter().enumerate() {
                let ratio = median_or_zero(
                    rounds
                        .iter()
                        .map(|&k| runs[p][k][i] / runs[raw][k][i])
                        .collect(),
                );
                line += &format!("  {size} B {ratio:.3}");
            }
            line += &format!("  ({} of {} rounds)", rounds.len(), args.rounds);
            println!("{line}");
        }
    }
}

// ----- latency probe -----------------------------------------------------------------

/// The probe's split of one round of a phase: (client, server), `None`
/// where nothing matched (no detection stamps in that phase).
type ProbeRound = (Option<Split>, Option<Split>);

#[cfg(feature = "latency-probe")]
use psmrail::engine::native::probe::{self, Split, Stamps};

/// Stand-in where the probe is not built: `--probe` is refused then.
#[cfg(not(feature = "latency-probe"))]
#[derive(Clone, Copy)]
struct Split;

/// Where the peer of `phase` writes its stamps.
fn probe_path(phase: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("psmrail-probe-{}-{phase}.bin", std::process::id()))
}

#[inline(always)]
fn stamp_now() -> u64 {
    #[cfg(feature = "latency-probe")]
    return probe::now();
    #[cfg(not(feature = "latency-probe"))]
    0
}

#[inline(always)]
fn stamp_detected(_t: u64) {
    #[cfg(feature = "latency-probe")]
    probe::detected(_t);
}

#[inline(always)]
fn stamp_send() {
    #[cfg(feature = "latency-probe")]
    probe::sending();
}

/// Forgets this thread's stamps so far.
fn drop_probe() {
    #[cfg(feature = "latency-probe")]
    drop(probe::take());
}

/// The peer: its stamps into `path` (counts, then the values, little
/// endian).
fn write_probe(_path: &std::path::Path) {
    #[cfg(feature = "latency-probe")]
    {
        let s = probe::take();
        let mut out = Vec::with_capacity(16 + 8 * (s.detections.len() + s.sends.len()));
        for v in [s.detections.len() as u64, s.sends.len() as u64]
            .into_iter()
            .chain(s.detections)
            .chain(s.sends)
        {
            out.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::write(_path, out).expect("write the probe stamps");
    }
}

#[cfg(feature = "latency-probe")]
fn read_probe(path: &std::path::Path) -> Stamps {
    let bytes = std::fs::read(path).expect("the peer's probe stamps");
    let _ = std::fs::remove_file(path);
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let (d, s) = (words[0] as usize, words[1] as usize);
    assert_eq!(words.len(), 2 + d + s, "a torn probe file");
    Stamps {
        detections: words[2..2 + d].to_vec(),
        sends: words[2 + d..].to_vec(),
    }
}

/// The client, after a phase's peer exited: both sides' splits.
fn probe_round(_phase: &str) -> ProbeRound {
    #[cfg(feature = "latency-probe")]
    {
        let own = probe::take();
        let peer = read_probe(&probe_path(_phase));
        // A message takes well under 10 µs; longer gaps are pauses.
        let window = (10.0 * probe::ticks_per_us()) as u64;
        (
            probe::split(&own, &peer.sends, window),
            probe::split(&peer, &own.sends, window),
        )
    }
    #[cfg(not(feature = "latency-probe"))]
    (None, None)
}

/// The probe's table: per phase and side, the median over rounds of the
/// two spans, in ns.
fn print_probes(args: &Args, probes: &[Vec<ProbeRound>]) {
    #[cfg(feature = "latency-probe")]
    {
        let ns = 1000.0 / probe::ticks_per_us();
        println!(
            "latency probe (ns, median over rounds; sides: client / server; {:.0} ticks per us):",
            probe::ticks_per_us()
        );
        println!(
            "  {:>6}  {:>24}  {:>24}  {:>10}",
            "phase", "send -> detection", "detection -> send", "messages"
        );
        for (phase, rounds) in args.phases.iter().zip(probes) {
            // "client / server" medians of one span, "-" without stamps.
            let span = |f: fn(&Split) -> f64| {
                let med = |side: fn(&ProbeRound) -> Option<Split>| {
                    let v: Vec<f64> = rounds.iter().filter_map(side).map(|s| f(&s) * ns).collect();
                    (!v.is_empty()).then(|| median_or_zero(v))
                };
                match (med(|r| r.0), med(|r| r.1)) {
                    (Some(c), Some(s)) => format!("{c:.1} / {s:.1}"),
                    _ => "-".to_string(),
                }
            };
            let to_det = span(|s| s.send_to_detection);
            let to_send = span(|s| s.detection_to_send);
            let n: usize = rounds.iter().filter_map(|r| r.0).map(|s| s.matched).sum();
            println!(
                "  {:>6}  {to_det:>24}  {to_send:>24}  {n:>10}",
                phase.name()
            );
        }
    }
    #[cfg(not(feature = "latency-probe"))]
    let _ = (args, probes);
}
