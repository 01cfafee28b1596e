//! Scale-out on one machine: four hosts (network namespaces) with two rails
//! each behind one switch per rail ([`HostRig`]), every host running one
//! mrail endpoint, all of them sending striped messages to all the others
//! at once.
//!
//! # What it shows
//! * No deadlock: four endpoints insert each other at the same time and
//!   then move 768 MiB all-to-all (16 messages of 4 MiB from every host
//!   to every other), every receive directed at its sender, every byte
//!   checked; every step is bounded, so a hang fails the test with the
//!   host and the step named.
//! * Aggregate throughput: the bytes moved over the slowest host's time,
//!   next to the line-rate sum (iperf3's rate on one shaped rail, times
//!   the rails, times the hosts: each host's links carry at most that
//!   much out of it). Printed only; speed is the benchmarks' business.
//! * Memory of the mrail layer per peer: `MrailStats::peer_state_bytes`
//!   over `MrailStats::peers` on each host, right after inserting the
//!   peers, at its largest during the transfers (looked at on wake-ups,
//!   at most once a millisecond) and after them. It counts a table slot
//!   of sequence and reorder state per peer, plus the frames a peer has
//!   not acknowledged yet and any frames held out of order; the rails'
//!   own per-peer state (connections, address vector entries) is not in
//!   it. What this test printed when it was written (soft engine, debug
//!   build): nothing right after inserting (0 peers: the state comes with
//!   the first frame to or from a peer, not with the insert), 176 B per
//!   peer once the transfers are over (the slot alone: it grows linearly
//!   with the peers, independent of the traffic), and 0.4 to 1.6 KiB per
//!   peer at the largest seen while 4 MiB messages are in flight (their
//!   control frames kept until acknowledged; the striped payloads are not
//!   copied into it).

//! # How it runs
//! The test process builds the rig, holds the machine-wide spin lock for
//! the whole test (the measurement wants the two cores), measures the
//! line rate with iperf3, and starts one child per host
//! ([`Peer::spawn_in`]). Each child opens its endpoint as a user's program
//! does (`FI_OFI_MRAIL_ADDR` = its rail addresses, `FI_OFI_MRAIL_CONFIG`
//! = eager up to 16 KiB on a fixed rail and striping above,
//! `PSMRAIL_ENGINE=soft`), with automatic progress: four processes on two
//! cores would starve each other spinning, and inserting connects every
//! rail, which needs the peers progressing while their own threads wait.
//! The line protocol (`@@ ` lines on stdout, commands on stdin):
//!
//! 1. child: `name <addr>`;
//! 2. parent: `peers <index> <addr 0> ... <addr 3>`; the child inserts the
//!    other three at once, posts its 48 receives (16 per peer, tag =
//!    sender's index and message number, directed at the sender) and
//!    answers `ready <peers> <peer_state_bytes>`;
//! 3. parent (once every child is ready): `go`; the child posts its 48
//!    sends, waits for all 96 operations, checks every byte and answers
//!    `done <µs> <peers> <peer_state_bytes> <peak bytes>/<peak peers>
//!    <rail stats>`, the time taken from `go` to the last completion;
//! 4. parent: `quit`; the child closes its endpoint and answers `bye`.
//!
//! Any failure is `err <reason>`. Children die with the parent; the rig's
//! drop removes the namespaces. Without root both tests print
//! `skipped: <reason>` and pass.

mod support;

use psmrail::engine::OpBuffer;
use psmrail::fabric::{getinfo, AvAttr, Caps, FiAddr, Hints, ProgressKind, Provider};
use psmrail::mrail::{MrailAddr, MrailAv, MrailDomain, MrailEndpoint, MrailFabric, MrailStats};
use std::future::Future;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use support::hosts::HostRig;
use support::peer::{role, ChildIo, Peer};
use support::spin_lock::{spin_lock, SpinLock};

const MIB: usize = 1024 * 1024;
const HOSTS: usize = 4;
const RAILS: usize = 2;
/// Every veth end's rate.
const MBIT: u32 = 1000;
/// Messages from every host to every other.
const MSGS: usize = 16;
/// Each message's length (striped: far above the 16 KiB eager limit).
const LEN: usize = 4 * MIB;
const POLICY: &str = "16384:fixed,ULONG_MAX:striping";
/// How long the parent waits for any answer of a child.
const ANSWER: Duration = Duration::from_secs(120);
/// How long a child lets its transfers run before answering `err` (below
/// [`ANSWER`], so the parent hears which operations were left).
const TRANSFER_LIMIT: Duration = Duration::from_secs(100);
/// The line rate assumed per rail when iperf3 is missing: the tbf rate
/// less the TCP/IP headers' share (about 95.5%).
const ASSUMED_RAIL_GBIT: f64 = 0.955;

// ----- payloads ---------------------------------------------------------------

/// The tag of message `m` from host `sender`: the sender's index above,
/// the message's number below.
fn tag(sender: usize, m: usize) -> u64 {
    ((sender as u64) << 32) | m as u64
}

/// The seed of message `m` from `sender` to `receiver`.
fn seed(sender: usize, receiver: usize, m: usize) -> u64 {
    0x5ca1_0000_0000_0000 | ((sender as u64) << 24) | ((receiver as u64) << 16) | m as u64
}

/// Word `j` of the pseudo-random block of `seed`.
fn word(seed: u64, j: usize) -> u64 {
    ((j as u64) ^ seed.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The pseudo-random block repeats every this many bytes...
const BLOCK: usize = 64 * 1024;
/// ... and each page of this many bytes starts with the seed and the
/// page's number, so a message from another sender, or a part placed at
/// the wrong offset, shows. (Cheap to make and check in a debug build:
/// copies and one comparison.)
const PAGE: usize = 4096;

/// The `LEN`-byte payload with `seed`.
fn payload(seed: u64) -> Vec<u8> {
    let block: Vec<u8> = (0..BLOCK / 8)
        .flat_map(|j| word(seed, j).to_le_bytes())
        .collect();
    let mut v = Vec::with_capacity(LEN);
    while v.len() < LEN {
        v.extend_from_slice(&block[..BLOCK.min(LEN - v.len())]);
    }
    for (p, page) in v.chunks_mut(PAGE).enumerate() {
        page[..8].copy_from_slice(&seed.to_le_bytes());
        page[8..16].copy_from_slice(&(p as u64).to_le_bytes());
    }
    v
}

/// The first byte of `got` that is not the payload with `seed`, if any.
fn first_bad_byte(got: &[u8], seed: u64) -> Option<usize> {
    let want = payload(seed);
    if got == want {
        return None;
    }
    Some(
        got.iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(LEN)),
    )
}

// ----- the child ----------------------------------------------------------------

/// One host's mrail objects.
struct Node {
    _fabric: MrailFabric,
    domain: MrailDomain,
    av: MrailAv,
    ep: MrailEndpoint,
}

/// Opens the endpoint from the environment, with automatic progress.
fn open_node() -> psmrail::Result<Node> {
    let hints = Hints::new()
        .provider(Provider::Mrail)
        .caps(Caps::MSG | Caps::TAGGED | Caps::DIRECTED_RECV)
        .progress(ProgressKind::Auto);
    let info = getinfo(Some(&hints))?.remove(0);
    let fabric = MrailFabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let av = domain.av(AvAttr::new().connect_timeout(Duration::from_secs(15)))?;
    let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    Ok(Node {
        _fabric: fabric,
        domain,
        av,
        ep,
    })
}

/// The child's part: its answers, or `err <reason>` for whatever failed
/// (a panic included).
fn child() {
    let mut io = ChildIo::new();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| child_steps(&mut io)));
    let failure = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("panicked: {text}")
        }
    };
    io.send_line(&format!("err {failure}"));
}

/// Reads the parent's next line, which must start with `word`; the rest.
fn expect(io: &mut ChildIo, word: &str) -> Result<String, String> {
    let line = io.recv_line();
    match line.split_once(' ').unwrap_or((line.as_str(), "")) {
        (w, rest) if w == word => Ok(rest.to_owned()),
        _ => Err(format!("expected `{word}`, got {line:?}")),
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
/// A finished operation: a receive's sender, message number and buffer,
/// or `None` for a send.
type Finished = Result<Option<(usize, usize, OpBuffer)>, String>;

fn child_steps(io: &mut ChildIo) -> Result<(), String> {
    let node = open_node().map_err(|e| format!("opening the endpoint: {e}"))?;
    let ep = &node.ep;
    io.send_line(&format!("name {}", ep.getname()));

    let rest = expect(io, "peers")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (me, names) = words
        .split_first()
        .ok_or_else(|| format!("bad peers line {rest:?}"))?;
    let me: usize = me.parse().map_err(|_| format!("bad index {me:?}"))?;
    let others: Vec<usize> = (0..names.len()).filter(|&j| j != me).collect();
    let wanted: Vec<MrailAddr> = others
        .iter()
        .map(|&j| {
            names[j]
                .parse()
                .map_err(|e| format!("host {j}'s address: {e}"))
        })
        .collect::<Result<_, _>>()?;
    // All peers at once: every rail connects to all three side by side.
    let mut addr = vec![FiAddr::UNSPEC; names.len()];
    for (&j, r) in others.iter().zip(node.av.insert(&wanted)) {
        addr[j] = r.map_err(|e| format!("inserting host {j}: {e}"))?;
    }

    // The receives, posted before any host sends; the payloads, made
    // before the clock starts.
    let mut ops: Vec<Boxed<'_, Finished>> = Vec::new();
    for &j in &others {
        for m in 0..MSGS {
            let (from, want_tag) = (addr[j], tag(j, m));
            let op = ep.trecv_from(from, vec![0u8; LEN], want_tag, 0);
            ops.push(Box::pin(async move {
                let (r, buf) = op.await;
                let got = r.map_err(|e| format!("receive {m} from host {j}: {e}"))?;
                if got.len != LEN || got.tag != want_tag || got.source != from {
                    return Err(format!(
                        "receive {m} from host {j}: {} bytes, tag {:#x} from {:?}; \
                         expected {LEN} bytes, tag {want_tag:#x} from {from:?}",
                        got.len, got.tag, got.source
                    ));
                }
                Ok(Some((j, m, buf)))
            }));
        }
    }
    let receives = ops.len();
    let mut payloads: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    for m in 0..MSGS {
        for &j in &others {
            payloads.push((j, m, payload(seed(me, j, m))));
        }
    }
    let idle = ep.stats();
    io.send_line(&format!("ready {} {}", idle.peers, idle.peer_state_bytes));

    expect(io, "go")?;
    let start = Instant::now();
    for (j, m, data) in payloads {
        let op = ep.tsend(addr[j], tag(me, m), data);
        ops.push(Box::pin(async move {
            let (r, _) = op.await;
            match r {
                Ok(sent) if sent.len == LEN => Ok(None),
                Ok(sent) => Err(format!("send {m} to host {j}: sent {} bytes", sent.len)),
                Err(e) => Err(format!("send {m} to host {j}: {e}")),
            }
        }));
    }
    // The peer state at its largest while messages are in flight (looked
    // at on wake-ups, at most once a millisecond).
    let mut peak = (0, 0);
    let mut looked = Instant::now();
    let finished = drive_all(&mut ops, TRANSFER_LIMIT, || {
        if looked.elapsed() >= Duration::from_millis(1) {
            looked = Instant::now();
            let s = ep.stats();
            peak = peak.max((s.peer_state_bytes, s.peers as u64));
        }
    })
    .map_err(|left| {
        let (recvs, sends) = left.iter().partition::<Vec<usize>, _>(|&&i| i < receives);
        format!(
            "timeout: after {TRANSFER_LIMIT:?}, receives {recvs:?} and sends {:?} \
             are not complete (of {receives} each)",
            sends.iter().map(|i| i - receives).collect::<Vec<_>>()
        )
    })?;
    let took = start.elapsed();
    drop(ops);
    for f in finished {
        if let Some((j, m, buf)) = f? {
            if let Some(at) = first_bad_byte(buf.as_slice(), seed(j, me, m)) {
                return Err(format!("message {m} from host {j}: byte {at} differs"));
            }
        }
    }
    let stats = ep.stats();
    io.send_line(&format!(
        "done {} {} {} {}/{} {}",
        took.as_micros(),
        stats.peers,
        stats.peer_state_bytes,
        peak.0,
        peak.1,
        rails_field(&stats)
    ));

    expect(io, "quit")?;
    node.ep
        .clone()
        .close()
        .and_then(|()| node.domain.clone().close())
        .map_err(|e| format!("closing: {e}"))?;
    io.send_line("bye");
    Ok(())
}

/// Per rail `<bytes sent>/<stripes>/<errors>/<retransmits>`, and the
/// refusal counters: `rails,...;unknown/malformed/duplicates/beyond/stale`.
fn rails_field(s: &MrailStats) -> String {
    let rails: Vec<String> = s
        .rails
        .iter()
        .map(|r| {
            format!(
                "{}/{}/{}/{}",
                r.bytes_sent, r.stripes, r.errors, r.retransmits
            )
        })
        .collect();
    format!(
        "{};{}/{}/{}/{}/{}",
        rails.join(","),
        s.unknown_peer,
        s.malformed,
        s.duplicates,
        s.beyond_window,
        s.stale
    )
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs every future to its end on this thread, parked between wake-ups
/// (automatic progress moves them), calling `woken` after each round; the
/// indices of those still pending after `limit`.
fn drive_all<T>(
    futs: &mut [Boxed<'_, T>],
    limit: Duration,
    mut woken: impl FnMut(),
) -> Result<Vec<T>, Vec<usize>> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut outs: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    let deadline = Instant::now() + limit;
    loop {
        for (f, out) in futs.iter_mut().zip(outs.iter_mut()) {
            if out.is_none() {
                if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    *out = Some(v);
                }
            }
        }
        woken();
        let left: Vec<usize> = (0..outs.len()).filter(|&i| outs[i].is_none()).collect();
        if left.is_empty() {
            return Ok(outs.into_iter().flatten().collect());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(left);
        }
        std::thread::park_timeout((deadline - now).min(Duration::from_millis(50)));
    }
}

// ----- the parent ------------------------------------------------------------------

/// The lock and the rig, or `None` after printing why the test is skipped.
fn setup() -> Option<(SpinLock, HostRig)> {
    if let Some(reason) = HostRig::skip_reason() {
        println!("skipped: {reason}");
        return None;
    }
    let lock = spin_lock();
    match HostRig::new(HOSTS, RAILS, MBIT) {
        Ok(rig) => Some((lock, rig)),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

/// One child as the parent sees it.
struct Child {
    host: usize,
    peer: Peer,
}

impl Child {
    /// The child's next answer, which must start with `word`; the rest.
    /// Panics naming the host and the step on `err`, on anything else,
    /// and when no answer comes by `deadline`.
    fn hear(&mut self, word: &str, deadline: Instant) -> String {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let peer = &mut self.peer;
        let line = std::panic::catch_unwind(AssertUnwindSafe(|| peer.recv_line(wait)))
            .unwrap_or_else(|_| {
                panic!(
                    "host {}: no `{word}` within {wait:?}: the child hung or died",
                    self.host
                )
            });
        match line.split_once(' ').unwrap_or((line.as_str(), "")) {
            (w, rest) if w == word => rest.to_owned(),
            ("err", e) => panic!("host {}: failed before `{word}`: {e}", self.host),
            _ => panic!("host {}: expected `{word}`, got {line:?}", self.host),
        }
    }
}

/// What a child reported at the end of its transfers.
#[derive(Debug)]
struct Report {
    micros: u64,
    peers: usize,
    peer_state_bytes: u64,
    idle_peers: usize,
    idle_peer_state_bytes: u64,
    /// The largest peer state seen during the transfers, and the peers
    /// then.
    peak_peer_state_bytes: u64,
    peak_peers: usize,
    /// Per rail: bytes sent, stripes, errors, retransmits.
    rails: Vec<[u64; 4]>,
    /// Unknown peer, malformed, duplicates, beyond window, stale.
    refused: [u64; 5],
}

fn numbers<const N: usize>(field: &str, what: &str) -> [u64; N] {
    let v: Vec<u64> = field
        .split('/')
        .map(|x| x.parse().unwrap_or_else(|_| panic!("{what}: {field:?}")))
        .collect();
    v.try_into()
        .unwrap_or_else(|_| panic!("{what}: {field:?} is not {N} numbers"))
}

impl Report {
    fn parse(done: &str, ready: &str) -> Report {
        let w: Vec<&str> = done.split_whitespace().collect();
        let [micros, peers, bytes, peak, rails] = w[..] else {
            panic!("bad done line {done:?}");
        };
        let r: Vec<&str> = ready.split_whitespace().collect();
        let [idle_peers, idle_bytes] = r[..] else {
            panic!("bad ready line {ready:?}");
        };
        let (rails, refused) = rails.split_once(';').expect("rails;refusals");
        let num = |s: &str| s.parse::<u64>().expect("a number");
        let [peak_bytes, peak_peers] = numbers(peak, "peak");
        Report {
            micros: num(micros),
            peers: num(peers) as usize,
            peer_state_bytes: num(bytes),
            idle_peers: num(idle_peers) as usize,
            idle_peer_state_bytes: num(idle_bytes),
            peak_peer_state_bytes: peak_bytes,
            peak_peers: peak_peers as usize,
            rails: rails.split(',').map(|f| numbers(f, "rail")).collect(),
            refused: numbers(refused, "refusals"),
        }
    }
}

/// Runs `cmd`, killing it after `limit`; its output.
fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {cmd:?}: {e}"))?;
    let deadline = Instant::now() + limit;
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{cmd:?} ran over {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().map_err(|e| e.to_string())
}

/// The rate iperf3's receiver reports on its summary line (`-f m`), in
/// Gbit/s.
fn iperf3_receiver_gbit(text: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| l.ends_with("receiver"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let at = w.iter().position(|x| *x == "Mbits/sec")?;
    Some(w.get(at.checked_sub(1)?)?.parse::<f64>().ok()? / 1000.0)
}

/// One rail's line rate in Gbit/s, from host 0 to host 1 on rail 0 for
/// 3 s; `Err` says why there is none.
fn iperf3_rail_gbit(rig: &HostRig) -> Result<f64, String> {
    if Command::new("iperf3").arg("--version").output().is_err() {
        return Err("iperf3 is not installed".into());
    }
    let server_ip = rig.ip(1, 0).to_string();
    let mut server = rig
        .command_in(rig.host_ns(1), "iperf3")
        .args(["-s", "-1", "-B", &server_ip, "-p", "5201"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the iperf3 server: {e}"))?;
    // The server needs a moment to listen: try a few times.
    let started = Instant::now();
    let result = loop {
        let out = output_within(
            rig.command_in(rig.host_ns(0), "iperf3").args([
                "-c",
                &server_ip,
                "-p",
                "5201",
                "-t",
                "3",
                "-f",
                "m",
                "--connect-timeout",
                "1000",
            ]),
            Duration::from_secs(15),
        );
        let text = match &out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(_) => String::new(),
        };
        if let Some(gbit) = iperf3_receiver_gbit(&text) {
            break Ok(gbit);
        }
        if started.elapsed() > Duration::from_secs(5) {
            break Err(format!("iperf3 gave no rate: {out:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = server.kill();
    let _ = server.wait();
    result
}

#[test]
fn four_hosts_all_to_all_striped_traffic() {
    if role().is_some() {
        return child();
    }
    let Some((_lock, rig)) = setup() else {
        return;
    };
    let test = "four_hosts_all_to_all_striped_traffic";
    let mut phases: Vec<(&str, Instant)> = vec![("rig", Instant::now())];

    let (rail_gbit, rate_source) = match iperf3_rail_gbit(&rig) {
        Ok(g) => (g, "iperf3, host 0 to host 1 on rail 0, 3 s".to_owned()),
        Err(why) => {
            println!("{why}: assuming {ASSUMED_RAIL_GBIT} Gbit/s per rail");
            (ASSUMED_RAIL_GBIT, format!("assumed ({why})"))
        }
    };
    let line_rate_sum = rail_gbit * (RAILS * HOSTS) as f64;
    phases.push(("iperf3", Instant::now()));

    let mut children: Vec<Child> = (0..HOSTS)
        .map(|h| {
            let addr = rig.mrail_addr(h);
            let env = [
                ("FI_OFI_MRAIL_ADDR", addr.as_str()),
                ("FI_OFI_MRAIL_CONFIG", POLICY),
                ("PSMRAIL_ENGINE", "soft"),
                ("FI_PSM_NAME_SERVER", "0"),
                ("FI_PSM_DELAY", "0"),
            ];
            let label = format!("host{h}");
            Child {
                host: h,
                peer: Peer::spawn_in(rig.host_ns(h), test, &label, &env),
            }
        })
        .collect();
    let deadline = Instant::now() + ANSWER;
    let names: Vec<String> = children
        .iter_mut()
        .map(|c| c.hear("name", deadline))
        .collect();
    // Every host inserts the others at the same time.
    for c in &mut children {
        let line = format!("peers {} {}", c.host, names.join(" "));
        c.peer.send_line(&line);
    }
    let deadline = Instant::now() + ANSWER;
    let ready: Vec<String> = children
        .iter_mut()
        .map(|c| c.hear("ready", deadline))
        .collect();
    phases.push((
        "start, insert, post receives, make payloads",
        Instant::now(),
    ));
    for c in &mut children {
        c.peer.send_line("go");
    }
    let deadline = Instant::now() + ANSWER;
    let done: Vec<String> = children
        .iter_mut()
        .map(|c| c.hear("done", deadline))
        .collect();
    phases.push(("send, receive, check", Instant::now()));
    let deadline = Instant::now() + ANSWER;
    for c in &mut children {
        c.peer.send_line("quit");
    }
    for mut c in children {
        c.hear("bye", deadline);
        let host = c.host;
        let status = c.peer.wait(ANSWER);
        assert!(status.success(), "host {host}'s child exited with {status}");
    }
    phases.push(("close", Instant::now()));

    let reports: Vec<Report> = done
        .iter()
        .zip(&ready)
        .map(|(d, r)| Report::parse(d, r))
        .collect();
    let per_host = ((HOSTS - 1) * MSGS * LEN) as u64;
    let total = per_host * HOSTS as u64;
    let slowest = reports.iter().map(|r| r.micros).max().expect("hosts");
    let aggregate = total as f64 * 8.0 / slowest as f64 / 1000.0;
    println!(
        "mrail scale: {HOSTS} hosts x {RAILS} rails, every veth end at {MBIT} Mbit/s; \
         all-to-all, {MSGS} x {} MiB from every host to every other ({} MiB in all)",
        LEN / MIB,
        total / MIB as u64
    );
    for (h, r) in reports.iter().enumerate() {
        let per_peer = |bytes: u64, peers: usize| bytes.checked_div(peers as u64).unwrap_or(0);
        let rails: Vec<String> = r
            .rails
            .iter()
            .map(|x| format!("{} MiB in {} stripes", x[0] / MIB as u64, x[1]))
            .collect();
        println!(
            "host {h}: {:.3} s, {:.2} Gbit/s out; mrail peer state: after inserting {} B for {} \
             peers, at the peak of the transfers {} B for {} peers ({} B/peer), after them {} B \
             for {} peers ({} B/peer); rails sent {}; errors {:?}, retransmits {:?}, \
             refused (unknown/malformed/dup/beyond/stale) {:?}",
            r.micros as f64 / 1e6,
            per_host as f64 * 8.0 / r.micros as f64 / 1000.0,
            r.idle_peer_state_bytes,
            r.idle_peers,
            r.peak_peer_state_bytes,
            r.peak_peers,
            per_peer(r.peak_peer_state_bytes, r.peak_peers),
            r.peer_state_bytes,
            r.peers,
            per_peer(r.peer_state_bytes, r.peers),
            rails.join(", "),
            r.rails.iter().map(|x| x[2]).collect::<Vec<_>>(),
            r.rails.iter().map(|x| x[3]).collect::<Vec<_>>(),
            r.refused
        );
    }
    println!(
        "aggregate: {aggregate:.2} Gbit/s ({} MiB over the slowest host's {:.3} s)",
        total / MIB as u64,
        slowest as f64 / 1e6
    );
    println!(
        "line-rate sum: {line_rate_sum:.2} Gbit/s ({rail_gbit:.3} Gbit/s per rail [{rate_source}] \
         x {RAILS} rails x {HOSTS} hosts)"
    );
    println!("ratio: {:.3}", aggregate / line_rate_sum);
    let took: Vec<String> = phases
        .windows(2)
        .map(|w| format!("{} {:.1} s", w[1].0, (w[1].1 - w[0].1).as_secs_f64()))
        .collect();
    println!("phases: {}", took.join(", "));

    // Every byte arrived (each child checked its receives before `done`).
    for (h, r) in reports.iter().enumerate() {
        assert_eq!(r.peers, HOSTS - 1, "host {h}: peers with state: {r:?}");
        let sent: u64 = r.rails.iter().map(|x| x[0]).sum();
        assert!(
            sent >= per_host,
            "host {h}: its rails sent {sent} bytes, less than its {per_host}: {r:?}"
        );
        assert!(
            r.rails.iter().all(|x| x[1] > 0),
            "host {h}: striped parts on every rail: {r:?}"
        );
    }
}

#[test]
fn host_rig_joins_every_host_on_every_rail() {
    let Some((_lock, rig)) = setup() else {
        return;
    };
    // Host 0 reaches every other host on every rail, from its address on
    // that rail (TCP: no ping needed).
    for r in 0..rig.rails() {
        for h in 1..rig.hosts() {
            let to = SocketAddr::from((rig.ip(h, r), 0));
            let listener = rig
                .run_in(rig.host_ns(h), || TcpListener::bind(to))
                .expect("entering the host")
                .expect("listening");
            let at = listener.local_addr().expect("listener address");
            let stream = rig
                .run_in(rig.host_ns(0), || {
                    TcpStream::connect_timeout(&at, Duration::from_secs(2))
                })
                .expect("entering host 0")
                .unwrap_or_else(|e| panic!("host 0 to host {h} on rail {r} ({at}): {e}"));
            let from = stream.local_addr().expect("local address");
            assert_eq!(from.ip(), rig.ip(0, r), "host 0 to host {h} on rail {r}");
        }
    }
    // Shaped on both ends of every veth.
    let tbfs = |ns: &str| {
        let out = Command::new("tc")
            .args(["-n", ns, "qdisc", "show"])
            .output()
            .expect("tc");
        String::from_utf8_lossy(&out.stdout)
            .matches("qdisc tbf")
            .count()
    };
    for h in 0..rig.hosts() {
        assert_eq!(tbfs(rig.host_ns(h)), rig.rails(), "host {h}'s qdiscs");
    }
    assert_eq!(
        tbfs(rig.switch_ns()),
        rig.rails() * rig.hosts(),
        "the switch's qdiscs"
    );
    assert_eq!(rig.mrail_addr(2), "198.19.0.3,198.19.1.3");
}
