//! Untagged messages over active messages (`FI_PSM_AM_MSG=1`) against the
//! MQ path, on the native engine, in one run.
//!
//! Two phases, each with a fresh pair of processes (this program re-executes
//! itself as the peer, `--serve <phase> --peer <epid> --cpu <n>`; PSM allows
//! one endpoint per process at a time):
//!
//! * **mq**: ping-pong with `isend` / `irecv` on the engine's tag-matching
//!   queue (what the default MQ path of untagged messages does);
//! * **am**: the same exchange through the AM message queue
//!   (`psmrail::hooks::AmMsgHook`, the crate-private `AmMsgQueue`): first chunk,
//!   `Go`, streamed chunks, `Done`.
//!
//! Both sides post the next receive before sending, and wait with
//! [`Reactor::poll_completion`] in manual mode; buffers are moved in and
//! handed back (no allocation per round trip). Both processes spin, each
//! pinned to its own CPU. Printed per size: the median half round trip and
//! the bandwidth `size / half round trip`, for both paths, and am / mq.
//! The phases alternate (`--rounds`, default 3) and each figure is the
//! median over the rounds of the medians of `--reps` repetitions.
//!
//! ```text
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --bin am_msg_pingpong [-- --reps 9 --rounds 3 --no-pin]
//! PSM2_DEVICES=self,shm cargo run --release -p psmrail-bench --bin am_msg_pingpong -- --help
//! ```
//!
//! Options (`--help` lists them): `--reps N` (default 9), `--rounds N`
//! (default 3), `--no-pin` (pin neither process).

use clap::Parser;
use psm_sys::DEFAULT_UUID;
use psmrail::engine::native::{NativeEndpoint, NativeEngine};
use psmrail::engine::{
    EndpointOptions, EngineEndpoint, Epid, MqCompletion, OpBuffer, PeerAddr, SendMode, TagMatch,
};
use psmrail::hooks::AmMsgHook;
use psmrail::reactor::{CompletionTable, OpKey, ProgressMode, Reactor};
use psmrail_bench::harness;
use psmrail_bench::stats::median_or_zero;
use psmrail_bench::units::{parse_count, parse_epid};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// (message size, round trips per repetition)
const SIZES: &[(usize, usize)] = &[(8, 100_000), (1 << 20, 200)];
const TAG_PING: u64 = 0x50;
const TAG_PONG: u64 = 0x51;
const PHASES: [&str; 2] = ["mq", "am"];

/// One of [`PHASES`].
fn parse_phase(v: &str) -> Result<&'static str, String> {
    PHASES
        .iter()
        .copied()
        .find(|p| *p == v)
        .ok_or_else(|| format!("{v:?}: expected mq or am"))
}

/// Untagged ping-pong over active messages (FI_PSM_AM_MSG=1) against the
/// MQ path, on the native engine, between this process and a copy of it,
/// both spinning, pinned to two CPUs. Run with PSM2_DEVICES=self,shm where
/// there is no adapter.
#[derive(Parser, Debug)]
#[command(name = "am_msg_pingpong", args_override_self = true)]
struct Args {
    /// Timed repetitions per size (each figure is their median).
    #[arg(long, value_name = "N", default_value = "9", value_parser = parse_count)]
    reps: usize,
    /// Rounds alternating mq and am (each figure the median over them).
    #[arg(long, value_name = "N", default_value = "3", value_parser = parse_count)]
    rounds: usize,
    /// Pin neither process.
    #[arg(long)]
    no_pin: bool,
    /// Peer mode (run by the benchmark itself): serve this phase.
    #[arg(long, value_name = "PHASE", value_parser = parse_phase, hide = true)]
    serve: Option<&'static str>,
    /// Peer mode: the client's epid (hexadecimal).
    #[arg(long, value_name = "EPID", value_parser = parse_epid, hide = true)]
    peer: Option<u64>,
    /// Peer mode: pin to this CPU.
    #[arg(long, hide = true)]
    cpu: Option<usize>,
}

fn pin_to(cpu: usize) -> bool {
    harness::pin(cpu).is_ok()
}

/// Warms up with `iters / 10 + 1` rounds, then `reps` timed repetitions of
/// `iters` rounds; the median half round trip in seconds.
fn measure(reps: usize, iters: usize, mut round: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 + 1 {
        round();
    }
    median_or_zero(
        (0..reps)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..iters {
                    round();
                }
                start.elapsed().as_secs_f64() / (2 * iters) as f64
            })
            .collect(),
    )
}

/// One process's side: endpoint, reactor, completion table, AM queue.
struct Side {
    ep: Arc<NativeEndpoint>,
    reactor: Reactor,
    table: Arc<CompletionTable<MqCompletion>>,
    queue: AmMsgHook,
    peer: PeerAddr,
    am: bool,
}

impl Side {
    /// Opens the endpoint and registers the AM queue first thing (both
    /// phases register it, so both processes agree on the handler id).
    fn open() -> (Arc<NativeEndpoint>, Reactor, AmMsgHook) {
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
        let (ep, reactor) = engine
            .open_with_reactor(&options, ProgressMode::Manual)
            .expect("open the endpoint");
        let queue = AmMsgHook::register(ep.clone()).expect("register the AM message queue");
        reactor
            .add_source(queue.progress_source())
            .expect("add the queue to the reactor");
        (ep, reactor, queue)
    }

    fn connect(
        (ep, reactor, queue): (Arc<NativeEndpoint>, Reactor, AmMsgHook),
        peer: u64,
        am: bool,
    ) -> Side {
        let peer = ep
            .connect(&[Epid(peer)], Duration::from_secs(30))
            .remove(0)
            .expect("connect");
        let table = ep.completions().clone();
        Side {
            ep,
            reactor,
            table,
            queue,
            peer,
            am,
        }
    }

    fn recv(&self, tag: u64, buf: Vec<u8>) -> OpKey {
        let key = self.table.insert();
        let posted = if self.am {
            self.queue.recv(Some(self.peer), OpBuffer::from(buf), key)
        } else {
            self.ep
                .irecv(TagMatch::exact(tag), OpBuffer::from(buf), key)
        };
        if let Err(e) = posted {
            panic!("receive: {}", e.error);
        }
        key
    }

    fn send(&self, tag: u64, buf: Vec<u8>) -> OpKey {
        let key = self.table.insert();
        let posted = if self.am {
            self.queue.send(self.peer, OpBuffer::from(buf), key)
        } else {
            self.ep
                .isend(self.peer, tag, SendMode::Standard, OpBuffer::from(buf), key)
        };
        if let Err(e) = posted {
            panic!("send: {}", e.error);
        }
        key
    }

    /// Polls `key` to completion (each pending poll runs a progress round).
    fn wait(&self, key: OpKey) -> Vec<u8> {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(c) = self.reactor.poll_completion(&self.table, key, &mut cx) {
                assert_eq!(c.status.error, None, "{:?}", c.status);
                return c.buffer.into_vec().expect("a vector");
            }
        }
    }

    /// Waits for both; (send buffer, receive buffer).
    fn wait_both(&self, send: OpKey, recv: OpKey) -> (Vec<u8>, Vec<u8>) {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut s, mut r) = (None, None);
        while s.is_none() || r.is_none() {
            if s.is_none() {
                if let Poll::Ready(c) = self.reactor.poll_completion(&self.table, send, &mut cx) {
                    assert_eq!(c.status.error, None, "{:?}", c.status);
                    s = Some(c.buffer.into_vec().expect("a vector"));
                }
            }
            if r.is_none() {
                if let Poll::Ready(c) = self.reactor.poll_completion(&self.table, recv, &mut cx) {
                    assert_eq!(c.status.error, None, "{:?}", c.status);
                    r = Some(c.buffer.into_vec().expect("a vector"));
                }
            }
        }
        (s.unwrap_or_default(), r.unwrap_or_default())
    }

    /// A one-byte exchange, so neither side starts timing early.
    fn sync(&self, first: bool) {
        if first {
            let k = self.send(TAG_PING, vec![1]);
            self.wait(k);
            let k = self.recv(TAG_PONG, vec![0]);
            self.wait(k);
        } else {
            let k = self.recv(TAG_PING, vec![0]);
            self.wait(k);
            let k = self.send(TAG_PONG, vec![1]);
            self.wait(k);
        }
    }

    fn close(self) {
        self.ep.close(Duration::from_millis(10)).expect("close");
    }
}

/// Spawns the peer serving `phase`; the child and its epid.
fn spawn_peer(
    phase: &str,
    epid: u64,
    args: &Args,
    cpu: Option<usize>,
) -> (std::process::Child, u64) {
    let exe = std::env::current_exe().expect("own path");
    let mut cmd = Command::new(exe);
    cmd.args(["--serve", phase, "--peer", &format!("{epid:#x}")])
        .args(["--reps", &args.reps.to_string()]);
    match cpu {
        Some(c) => cmd.args(["--cpu", &c.to_string()]),
        None => cmd.arg("--no-pin"),
    };
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn the peer");
    let epid = read_epid(&mut child, phase);
    (child, epid)
}

/// The `EPID=` line of the peer.
fn read_epid(child: &mut std::process::Child, phase: &str) -> u64 {
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

/// The client of one phase: medians per size.
fn client(phase: &str, args: &Args, peer_cpu: Option<usize>) -> Vec<f64> {
    let opened = Side::open();
    let (mut child, peer_epid) = spawn_peer(phase, opened.0.epid().0, args, peer_cpu);
    let side = Side::connect(opened, peer_epid, phase == "am");
    side.sync(true);
    let mut medians = Vec::new();
    for &(size, iters) in SIZES {
        let want: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut out = Some(want.clone());
        let mut inb = Some(vec![0u8; size]);
        let m = measure(args.reps, iters, || {
            let rk = side.recv(TAG_PONG, inb.take().unwrap_or_default());
            let sk = side.send(TAG_PING, out.take().unwrap_or_default());
            let (o, i) = side.wait_both(sk, rk);
            out = Some(o);
            inb = Some(i);
        });
        assert!(
            inb.as_deref() == Some(&want[..]),
            "the pong payload differs at {size} B ({phase})"
        );
        medians.push(m);
    }
    side.sync(true);
    side.close();
    assert!(
        child.wait().expect("wait").success(),
        "the {phase} peer failed"
    );
    medians
}

fn server(phase: &str, args: &Args, client: u64) {
    let opened = Side::open();
    println!("EPID={:#x}", opened.0.epid().0);
    std::io::stdout().flush().expect("stdout");
    let side = Side::connect(opened, client, phase == "am");
    side.sync(false);
    for &(size, iters) in SIZES {
        let rounds = iters / 10 + 1 + iters * args.reps;
        // The next ping's receive is posted before the pong is sent.
        let mut spare = Some(vec![0u8; size]);
        let mut posted = side.recv(TAG_PING, vec![0u8; size]);
        for round in 0..rounds {
            let filled = side.wait(posted);
            if round + 1 < rounds {
                posted = side.recv(TAG_PING, spare.take().unwrap_or_default());
            }
            let sk = side.send(TAG_PONG, filled);
            spare = Some(side.wait(sk));
        }
    }
    side.sync(false);
    side.close();
}

fn main() {
    let args = Args::parse();
    if let Some(phase) = args.serve {
        // Die with the client instead of spinning forever if it is killed.
        let _ = harness::exit_with_parent();
        if let (false, Some(cpu)) = (args.no_pin, args.cpu) {
            pin_to(cpu);
        }
        server(phase, &args, args.peer.expect("--peer"));
        return;
    }
    let cpus: Vec<usize> = psmrail::reactor::CpuTopology::read_now()
        .allowed
        .iter()
        .collect();
    let pinned = !args.no_pin && cpus.len() >= 2 && pin_to(cpus[0]);
    let peer_cpu = pinned.then(|| cpus[1]);
    let mut runs: [Vec<Vec<f64>>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..args.rounds {
        for (p, phase) in PHASES.iter().enumerate() {
            runs[p].push(client(phase, &args, peer_cpu));
        }
    }
    let per_size = |runs: &[Vec<f64>]| -> Vec<f64> {
        (0..SIZES.len())
            .map(|i| median_or_zero(runs.iter().map(|r| r[i]).collect()))
            .collect()
    };
    let (mq, am) = (per_size(&runs[0]), per_size(&runs[1]));
    let lib = psm_sys::PsmLibrary::get().expect("loaded above");
    println!(
        "untagged ping-pong over the native engine, {} build, 2 processes, both spinning, {}; median over {} alternating mq/am rounds of the medians of {} repetitions",
        lib.build(),
        if pinned {
            format!("pinned to CPUs {} and {}", cpus[0], cpus[1])
        } else {
            "not pinned".into()
        },
        args.rounds,
        args.reps
    );
    println!(
        "{:>9} {:>14} {:>14} {:>10} {:>10} {:>8}",
        "size", "mq half-RTT us", "am half-RTT us", "mq GB/s", "am GB/s", "am/mq"
    );
    for (i, &(size, _)) in SIZES.iter().enumerate() {
        let (m, a) = (mq[i], am[i]);
        println!(
            "{:>9} {:>14.3} {:>14.3} {:>10.3} {:>10.3} {:>8.2}",
            size,
            m * 1e6,
            a * 1e6,
            size as f64 / m / 1e9,
            size as f64 / a / 1e9,
            a / m
        );
    }
}
