//! The multi-rail provider as a user runs it: two processes on two hosts
//! joined by real rails. Every size under every rail policy, with the
//! traffic checked on each rail's link; larger and smaller receive
//! buffers, tagged/untagged matching and directed receives; send order
//! across rails of different delays; progress made by counters alone;
//! automatic progress; futures dropped mid-transfer; a peer that is not in
//! the address vector; per-rail statistics against the links' counters;
//! every rail lost under a striped stream and back, in several orders and
//! for short and long outages; and a rail down when the peers connect.
//!
//! # How a test runs
//! The test process builds a [`RailRig`] (namespaces A and B joined by one
//! veth pair per rail) and starts one child in each namespace
//! ([`Peer::spawn_in`]). Each child opens its endpoint the way a user
//! does: `getinfo` with `Provider::Mrail` reads `FI_OFI_MRAIL_ADDR` (its
//! host's rail addresses), `FI_OFI_MRAIL_CONFIG` (the policy),
//! `PSMRAIL_ENGINE=soft`, `FI_PSM_NAME_SERVER=0` and `FI_PSM_DELAY=0`
//! from its environment. It prints its address (`name <addr> <fixed rail>
//! <manual|auto>`); the parent hands each child the other's
//! (`peer <addr>`), and both insert at the same time (inserting connects
//! every rail and needs both sides progressing). Then the parent drives
//! the children with one-line commands:
//!
//! * `send <spec>...` posts sends (`t|m:<len>:<tag>:<seed>[:drop]`; `drop`
//!   drops the future right after posting), answers `posted`, then `ok
//!   <µs>` when every kept one completed, or `err <reason>`;
//! * `recv <spec>...` posts receives (`<post>:<room>:<want>`, post `t=<tag>=
//!   <ignore>`, `m` untagged, `f` untagged from the peer, `s` untagged from
//!   its own address; want `<len>=<tag>=<seed>` for the message it must
//!   get, `pending` for none, `drop` to drop it at once), answers `posted`,
//!   then `ok`/`err` after checking every byte (and that the buffer past
//!   the message is untouched, or for a short buffer `FI_ETRUNC` with both
//!   lengths and the prefix placed);
//! * `ctrsend`/`ctrrecv` do the same with `post_*` and contexts, waiting
//!   only on the endpoint's send or receive counter, then read the CQ;
//! * `send-each`/`recv-each` post the same specs and wait for every one,
//!   however it ends, answering each outcome in order (`ok` or the error
//!   kind, with the wall-clock time it ended);
//! * `stream send|recv <len> <count> <window>` streams `count` tagged
//!   messages of `len` bytes (unchecked), `window` in flight, answers
//!   `posted`, then (the sender) `ok <ms> <bytes> <total ms> <rates>`: when
//!   every rail's rate was first known, in ms and in the bytes the rails
//!   had been given by then, the stream's time and the rates (Mbit/s);
//! * `recvdrop <len> <tag> <bytes>` drops a receive once its host's rails
//!   received that many bytes; `inject`, `insert` (again: a fresh insert,
//!   whose address the later sends use), `insert-self`, `stats`, `states`
//!   (the rail states), `events` (the rail events so far, with wall-clock
//!   times), `quit`.
//!
//! `RIG_STEP_LIMIT_MS` lowers a child's limit for one command, so that a
//! hang shows sooner.
//!
//! Payloads differ per message (the first 8 bytes carry the message's
//! seed, so a receiver names the message it got instead). Children spin in
//! manual progress (between commands too, so the peer's operations go on),
//! so each test holds the machine-wide spin lock. Every line read has a
//! timeout, every child bounds each command, and children die with the
//! parent; the rig's drop removes the namespaces.
//!
//! The rig needs root; without it every test prints `skipped: <reason>`
//! and passes.

mod support;

use psmrail::fabric::{
    getinfo, AvAttr, Caps, CompletionFlags, CompletionQueue, Counter, CounterAttr, CounterBind,
    CqAttr, CqBind, FiAddr, Hints, ProgressKind, Provider,
};
use psmrail::mrail::{MrailAv, MrailDomain, MrailEndpoint, MrailFabric};
use psmrail::ops::{OpOutput, Received, Sent};
use psmrail::ErrorKind;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use support::payload::{carried_seed, pattern};
use support::peer::{role, say, stdin_lines, Peer};
use support::rig::{RailRig, RailShape};
use support::spin_lock::{spin_lock, SpinLock};

/// How long the parent waits for any line of a child.
const LINE: Duration = Duration::from_secs(60);
/// How long a child lets one command run before answering `err timeout`
/// (below [`LINE`], so the parent hears why), unless `RIG_STEP_LIMIT_MS`
/// says less ([`step_limit`]).
const STEP_LIMIT: Duration = Duration::from_secs(40);
/// The default policy table.
const DEFAULT_POLICY: &str = "16384:fixed,ULONG_MAX:striping";
/// What receive buffers are filled with before a receive.
const FILL: u8 = 0xee;
const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

// ----- payloads -------------------------------------------------------------

/// Where `got` first differs from `want` (same length).
fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    if got == want {
        return None;
    }
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// The child's limit for one command: [`STEP_LIMIT`], or
/// `RIG_STEP_LIMIT_MS` (a test that must not wait long for a hang).
fn step_limit() -> Duration {
    static LIMIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("RIG_STEP_LIMIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(STEP_LIMIT, Duration::from_millis)
            .min(STEP_LIMIT)
    })
}

// ----- command specs (both sides) ----------------------------------------------

/// A send: `t|m:<len>:<tag>:<seed>[:drop]`.
#[derive(Clone, Copy, Debug)]
struct SendSpec {
    tagged: bool,
    len: usize,
    tag: u64,
    seed: u64,
    drop: bool,
}

impl std::str::FromStr for SendSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<SendSpec, String> {
        let f: Vec<&str> = s.split(':').collect();
        let bad = || format!("bad send spec {s:?}");
        if f.len() < 4 || f.len() > 5 {
            return Err(bad());
        }
        Ok(SendSpec {
            tagged: match f[0] {
                "t" => true,
                "m" => false,
                _ => return Err(bad()),
            },
            len: f[1].parse().map_err(|_| bad())?,
            tag: f[2].parse().map_err(|_| bad())?,
            seed: f[3].parse().map_err(|_| bad())?,
            drop: match f.get(4) {
                None => false,
                Some(&"drop") => true,
                Some(_) => return Err(bad()),
            },
        })
    }
}

/// How a receive is posted.
#[derive(Clone, Copy, Debug)]
enum Post {
    Tagged {
        tag: u64,
        ignore: u64,
    },
    Untagged,
    /// Untagged, directed at the peer.
    FromPeer,
    /// Untagged, directed at the receiver's own address.
    FromSelf,
}

/// What a receive must end with.
#[derive(Clone, Copy, Debug)]
enum Want {
    Msg {
        len: usize,
        tag: u64,
        seed: u64,
    },
    /// Still pending when the others are done (then dropped).
    Pending,
    /// Dropped right after posting.
    Drop,
}

/// A receive: `<post>:<room>:<want>`.
#[derive(Clone, Copy, Debug)]
struct RecvSpec {
    post: Post,
    room: usize,
    want: Want,
}

impl std::str::FromStr for RecvSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<RecvSpec, String> {
        let bad = || format!("bad receive spec {s:?}");
        let f: Vec<&str> = s.split(':').collect();
        let [post, room, want] = f.as_slice() else {
            return Err(bad());
        };
        let post = match *post {
            "m" => Post::Untagged,
            "f" => Post::FromPeer,
            "s" => Post::FromSelf,
            t => match t.split('=').collect::<Vec<_>>().as_slice() {
                ["t", tag, ignore] => Post::Tagged {
                    tag: tag.parse().map_err(|_| bad())?,
                    ignore: ignore.parse().map_err(|_| bad())?,
                },
                _ => return Err(bad()),
            },
        };
        let want = match *want {
            "pending" => Want::Pending,
            "drop" => Want::Drop,
            w => match w.split('=').collect::<Vec<_>>().as_slice() {
                [len, tag, seed] => Want::Msg {
                    len: len.parse().map_err(|_| bad())?,
                    tag: tag.parse().map_err(|_| bad())?,
                    seed: seed.parse().map_err(|_| bad())?,
                },
                _ => return Err(bad()),
            },
        };
        Ok(RecvSpec {
            post,
            room: room.parse().map_err(|_| bad())?,
            want,
        })
    }
}

fn parse_specs<T: std::str::FromStr<Err = String>>(rest: &str) -> Result<Vec<T>, String> {
    rest.split_whitespace().map(str::parse).collect()
}

// ----- the child ----------------------------------------------------------------

/// One host's objects.
struct Side {
    _fabric: MrailFabric,
    domain: MrailDomain,
    av: MrailAv,
    ep: MrailEndpoint,
    cq: CompletionQueue,
    sends: Counter,
    recvs: Counter,
    manual: bool,
    peer_name: Option<String>,
    /// The peer's address from the last insert (sends go there).
    peer: Option<FiAddr>,
    /// Its address from the first insert: what receives name as their
    /// source (an address vector names a peer by its first entry).
    source: Option<FiAddr>,
    me: Option<FiAddr>,
    events: psmrail::mrail::RailEvents,
    /// The region `rmareg` registered, for peers' RMA.
    region: Option<psmrail::mrail::MrailMemoryRegion>,
}

impl Side {
    fn peer(&self) -> Result<FiAddr, String> {
        self.peer
            .ok_or_else(|| "the peer is not inserted".to_owned())
    }

    /// The source address the peer's messages come with.
    fn source(&self) -> Result<FiAddr, String> {
        self.source
            .ok_or_else(|| "the peer is not inserted".to_owned())
    }
}

/// Opens the endpoint from the environment, as a user's program does.
fn open_side() -> psmrail::Result<Side> {
    let manual = std::env::var("RIG_PROGRESS").as_deref() != Ok("auto");
    let progress = if manual {
        ProgressKind::Manual
    } else {
        ProgressKind::Auto
    };
    let hints = Hints::new()
        .provider(Provider::Mrail)
        .caps(Caps::MSG | Caps::TAGGED | Caps::DIRECTED_RECV | Caps::RMA)
        .progress(progress);
    let info = getinfo(Some(&hints))?.remove(0);
    let fabric = MrailFabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let av = domain.av(AvAttr::new().connect_timeout(Duration::from_secs(15)))?;
    let cq = domain.cq(CqAttr::new())?;
    let sends = domain.counter(CounterAttr::new())?;
    let recvs = domain.counter(CounterAttr::new())?;
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
        .bind_counter(&sends, CounterBind::SEND)
        .bind_counter(&recvs, CounterBind::RECV)
        .enable()?;
    let manual = domain.reactor().is_manual();
    let events = domain.rail_events();
    Ok(Side {
        _fabric: fabric,
        domain,
        av,
        ep,
        cq,
        sends,
        recvs,
        manual,
        peer_name: None,
        peer: None,
        source: None,
        me: None,
        events,
        region: None,
    })
}

/// The child's part: opens its endpoint, then runs the parent's commands.
fn child(_role: &str) {
    let mut side = match open_side() {
        Ok(s) => s,
        Err(e) => {
            say(&format!("err opening the endpoint: {e}"));
            return;
        }
    };
    say(&format!(
        "name {} {} {}",
        side.ep.getname(),
        side.ep.fixed_rail(),
        if side.manual { "manual" } else { "auto" }
    ));
    let lines = stdin_lines();
    loop {
        // Between commands the endpoint keeps progressing: the peer's
        // transfers (and its inserts) need this side.
        let line = if side.manual {
            match lines.try_recv() {
                Ok(l) => l,
                Err(mpsc::TryRecvError::Empty) => {
                    side.domain.reactor().progress();
                    std::thread::yield_now();
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        } else {
            match lines.recv() {
                Ok(l) => l,
                Err(_) => return,
            }
        };
        let (cmd, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let answer = match cmd {
            "peer" => cmd_peer(&mut side, rest),
            "insert" => cmd_insert(&mut side),
            "insert-self" => {
                let me = side.ep.getname();
                side.av
                    .insert(&[me])
                    .remove(0)
                    .map(|a| {
                        side.me = Some(a);
                        a.0.to_string()
                    })
                    .map_err(|e| e.to_string())
            }
            "send" => parse_specs(rest).and_then(|s| cmd_send(&side, &s)),
            "recv" => parse_specs(rest).and_then(|s| cmd_recv(&side, &s)),
            "send-each" => parse_specs(rest).and_then(|s| cmd_send_each(&side, &s)),
            "recv-each" => parse_specs(rest).and_then(|s| cmd_recv_each(&side, &s)),
            "states" => Ok(states_line(&side.ep)),
            "ctrsend" => parse_specs(rest).and_then(|s| cmd_ctrsend(&side, &s)),
            "ctrrecv" => parse_specs(rest).and_then(|s| cmd_ctrrecv(&side, &s)),
            "recvdrop" => cmd_recvdrop(&side, rest),
            "inject" => cmd_inject(&side, rest),
            "stats" => Ok(stats_line(&side.ep)),
            "events" => Ok(events_line(&side.events)),
            "rmareg" => cmd_rmareg(&mut side, rest),
            "rma" => cmd_rma(&side, rest),
            "rmacheck" => cmd_rmacheck(&side, rest),
            "stream" => cmd_stream(&side, rest),
            "quit" => {
                let ep = side.ep.clone();
                let r = ep.close().and_then(|()| side.domain.clone().close());
                match r {
                    Ok(()) => say("ok bye"),
                    Err(e) => say(&format!("err closing: {e}")),
                }
                return;
            }
            other => Err(format!("unknown command {other:?}")),
        };
        match answer {
            Ok(s) => say(&format!("ok {s}")),
            Err(e) => say(&format!("err {e}")),
        }
    }
}

/// `peer <addr>`: remembers the peer's address and inserts it, unless
/// `RIG_INSERT_PEER=0` (then `insert` does it later).
fn cmd_peer(side: &mut Side, name: &str) -> Result<String, String> {
    side.peer_name = Some(name.to_owned());
    if std::env::var("RIG_INSERT_PEER").as_deref() == Ok("0") {
        return Ok("deferred".into());
    }
    cmd_insert(side)
}

fn cmd_insert(side: &mut Side) -> Result<String, String> {
    let name = side.peer_name.as_deref().ok_or("no peer address yet")?;
    let a = side.av.insert_str(name).map_err(|e| e.to_string())?;
    side.peer = Some(a);
    side.source.get_or_insert(a);
    Ok(format!("inserted {}", a.0))
}

/// Runs `step` until it is ready, on the domain's reactor (`block_on`:
/// busy in manual progress, parked between wake-ups in auto progress);
/// `None` after `limit`.
fn run_until<T>(
    side: &Side,
    limit: Duration,
    mut step: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    let (stop, stopped) = mpsc::channel::<()>();
    let mut stopped = Some(stopped);
    let mut timer = None;
    let manual = side.manual;
    let out = side.domain.reactor().block_on(std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = step(cx) {
            return Poll::Ready(Some(v));
        }
        if Instant::now() >= deadline {
            return Poll::Ready(None);
        }
        // Auto progress parks until a waker is called: one more wakes
        // it at the deadline.
        if !manual {
            if let Some(stopped) = stopped.take() {
                let waker = cx.waker().clone();
                timer = Some(std::thread::spawn(move || {
                    if stopped.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
                        waker.wake();
                    }
                }));
            }
        }
        Poll::Pending
    }));
    drop(stop);
    if let Some(t) = timer {
        let _ = t.join();
    }
    out
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Polls every future in `futs` that is `Some` and not done yet; ready
/// when all are done.
fn poll_all<T>(
    futs: &mut [Option<Boxed<'_, T>>],
    outs: &mut [Option<T>],
    cx: &mut Context<'_>,
) -> Poll<()> {
    let mut all = true;
    for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
        if o.is_some() {
            continue;
        }
        let Some(f) = f else { continue };
        match f.as_mut().poll(cx) {
            Poll::Ready(v) => *o = Some(v),
            Poll::Pending => all = false,
        }
    }
    if all {
        Poll::Ready(())
    } else {
        Poll::Pending
    }
}

fn cmd_send(side: &Side, specs: &[SendSpec]) -> Result<String, String> {
    let ep = &side.ep;
    let peer = side.peer()?;
    let data: Vec<Vec<u8>> = specs.iter().map(|s| pattern(s.len, s.seed)).collect();
    let start = Instant::now();
    let mut futs: Vec<Option<Boxed<'_, OpOutput<Sent>>>> = Vec::with_capacity(specs.len());
    for (s, d) in specs.iter().zip(data) {
        let f = if s.tagged {
            ep.tsend(peer, s.tag, d)
        } else {
            ep.send(peer, d)
        };
        if s.drop {
            drop(f);
            futs.push(None);
        } else {
            futs.push(Some(Box::pin(f)));
        }
    }
    say("posted");
    let mut outs: Vec<Option<_>> = specs.iter().map(|_| None).collect();
    let done = run_until(side, step_limit(), |cx| poll_all(&mut futs, &mut outs, cx));
    let took = start.elapsed();
    if done.is_none() {
        let left: Vec<usize> = (0..specs.len())
            .filter(|&i| futs[i].is_some() && outs[i].is_none())
            .collect();
        return Err(format!(
            "timeout: sends {left:?} not complete after {:?}",
            step_limit()
        ));
    }
    for (i, (s, o)) in specs.iter().zip(outs).enumerate() {
        let Some((r, buf)) = o else { continue };
        let sent = r.map_err(|e| format!("send {i}: {:?}: {}", e.kind(), e.message()))?;
        if sent.len != s.len || buf.len() != s.len {
            return Err(format!(
                "send {i}: completed with {} bytes and a {}-byte buffer, sent {}",
                sent.len,
                buf.len(),
                s.len
            ));
        }
    }
    Ok(took.as_micros().to_string())
}

/// The tag of `stream`'s messages.
const STREAM_TAG: u64 = 0x5757;

/// `stream send|recv <len> <count> <window>` (module docs).
fn cmd_stream(side: &Side, rest: &str) -> Result<String, String> {
    let w: Vec<&str> = rest.split_whitespace().collect();
    let usage = || "stream send|recv <len> <count> <window>".to_owned();
    let [dir, len, count, window] = w[..] else {
        return Err(usage());
    };
    let num = |v: &str| v.parse::<usize>().map_err(|_| usage());
    let (len, count, window) = (num(len)?, num(count)?, num(window)?.max(1));
    let send = match dir {
        "send" => true,
        "recv" => false,
        _ => return Err(usage()),
    };
    let ep = &side.ep;
    let peer = if send { Some(side.peer()?) } else { None };
    let post = |buf: Vec<u8>| -> Boxed<'_, Result<usize, String>> {
        match peer {
            Some(peer) => Box::pin(async move {
                let (r, _) = ep.tsend(peer, STREAM_TAG, buf).await;
                r.map(|s| s.len).map_err(|e| e.to_string())
            }),
            None => Box::pin(async move {
                let (r, _) = ep.trecv(buf, STREAM_TAG, 0).await;
                r.map(|r| r.len).map_err(|e| e.to_string())
            }),
        }
    };
    let given = || -> u64 { ep.stats().rails.iter().map(|r| r.bytes_sent).sum() };
    let base = given();
    let start = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    let mut flying: Vec<Boxed<'_, Result<usize, String>>> = Vec::new();
    let mut known: Option<(u128, u64)> = None;
    let mut looked = start;
    say("posted");
    let r = run_until(side, step_limit(), |cx| loop {
        while flying.len() < window && posted < count {
            flying.push(post(vec![0u8; len]));
            posted += 1;
        }
        let before = done;
        let mut i = 0;
        while i < flying.len() {
            match flying[i].as_mut().poll(cx) {
                Poll::Ready(Ok(n)) if n == len => {
                    drop(flying.swap_remove(i));
                    done += 1;
                }
                Poll::Ready(Ok(n)) => return Poll::Ready(Err(format!("{n} of {len} bytes"))),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => i += 1,
            }
        }
        if send && known.is_none() && looked.elapsed() >= Duration::from_millis(1) {
            looked = Instant::now();
            let s = ep.stats();
            if s.rails.iter().all(|r| r.rate_mbit.is_some()) {
                known = Some((start.elapsed().as_millis(), given() - base));
            }
        }
        if done == count {
            return Poll::Ready(Ok(()));
        }
        if done == before {
            return Poll::Pending;
        }
    });
    let took = start.elapsed().as_millis();
    match r {
        None => return Err(format!("timeout: {done} of {count} done")),
        Some(Err(e)) => return Err(e),
        Some(Ok(())) => {}
    }
    let rates: Vec<String> = ep
        .stats()
        .rails
        .iter()
        .map(|r| r.rate_mbit.unwrap_or(0).to_string())
        .collect();
    let (ms, bytes) = known.unwrap_or((0, 0));
    Ok(format!("{ms} {bytes} {took} {}", rates.join(",")))
}

/// Checks receive `i`'s output against its spec.
fn check_received(
    i: usize,
    spec: &RecvSpec,
    out: OpOutput<Received>,
    source: FiAddr,
) -> Result<(), String> {
    let Want::Msg { len, tag, seed } = spec.want else {
        return Ok(());
    };
    let (r, buf) = out;
    let got = buf.as_slice();
    let want = pattern(len, seed);
    if got.len() != spec.room {
        return Err(format!(
            "receive {i}: the buffer came back with {} bytes, posted with {}",
            got.len(),
            spec.room
        ));
    }
    let tagged = matches!(spec.post, Post::Tagged { .. });
    if spec.room >= len {
        let r = r.map_err(|e| {
            format!(
                "receive {i} ({len} B, seed {seed}): {:?}: {} (carried seed {})",
                e.kind(),
                e.message(),
                carried_seed(got)
            )
        })?;
        if r.len != len {
            return Err(format!(
                "receive {i}: got {} bytes carrying seed {}, expected {len} with seed {seed}",
                r.len,
                carried_seed(got)
            ));
        }
        let want_tag = if tagged { tag } else { 0 };
        if r.tag != want_tag || r.source != source {
            return Err(format!(
                "receive {i}: tag {:#x} from {:?}, expected {want_tag:#x} from {source:?}",
                r.tag, r.source
            ));
        }
        if let Some(at) = first_difference(&got[..len], &want) {
            return Err(format!(
                "receive {i} ({len} B, seed {seed}, carried {}): byte {at} is {:#04x}, expected {:#04x}",
                carried_seed(got),
                got[at],
                want[at]
            ));
        }
        if let Some(at) = got[len..].iter().position(|&b| b != FILL) {
            return Err(format!(
                "receive {i}: byte {} past the {len}-byte message was written",
                len + at
            ));
        }
    } else {
        let e = match r {
            Ok(r) => {
                return Err(format!(
                    "receive {i}: a {len}-byte message into {} bytes completed with {} bytes, not FI_ETRUNC",
                    spec.room, r.len
                ))
            }
            Err(e) => e,
        };
        if e.kind() != ErrorKind::Trunc {
            return Err(format!("receive {i}: {:?}: {}, not FI_ETRUNC", e.kind(), e));
        }
        let t = e
            .truncation()
            .ok_or_else(|| format!("receive {i}: FI_ETRUNC without lengths: {e}"))?;
        if (t.msg_len, t.received) != (len as u64, spec.room) {
            return Err(format!(
                "receive {i}: truncation says {} of {} bytes, expected {} of {len}",
                t.received, t.msg_len, spec.room
            ));
        }
        if let Some(at) = first_difference(got, &want[..spec.room]) {
            return Err(format!(
                "receive {i}: truncated prefix differs at byte {at} (carried seed {})",
                carried_seed(got)
            ));
        }
    }
    Ok(())
}

fn cmd_recv(side: &Side, specs: &[RecvSpec]) -> Result<String, String> {
    let ep = &side.ep;
    let peer = side.peer()?;
    let mut futs: Vec<Option<Boxed<'_, OpOutput<Received>>>> = Vec::with_capacity(specs.len());
    for s in specs {
        let buf = vec![FILL; s.room];
        let f = match s.post {
            Post::Tagged { tag, ignore } => ep.trecv(buf, tag, ignore),
            Post::Untagged => ep.recv(buf),
            Post::FromPeer => ep.recv_from(peer, buf),
            Post::FromSelf => ep.recv_from(side.me.ok_or("insert-self first")?, buf),
        };
        if matches!(s.want, Want::Drop) {
            drop(f);
            futs.push(None);
        } else {
            futs.push(Some(Box::pin(f)));
        }
    }
    say("posted");
    // Pending ones are left out of the wait, polled once at the end.
    let mut waited: Vec<Option<Boxed<'_, OpOutput<Received>>>> = Vec::new();
    let mut pending = Vec::new();
    for (s, f) in specs.iter().zip(futs) {
        if matches!(s.want, Want::Pending) {
            pending.push(f);
            waited.push(None);
        } else {
            waited.push(f);
        }
    }
    let mut outs: Vec<Option<_>> = specs.iter().map(|_| None).collect();
    let done = run_until(side, step_limit(), |cx| {
        poll_all(&mut waited, &mut outs, cx)
    });
    if done.is_none() {
        let left: Vec<usize> = (0..specs.len())
            .filter(|&i| waited[i].is_some() && outs[i].is_none())
            .collect();
        return Err(format!(
            "timeout: receives {left:?} not complete after {:?}",
            step_limit()
        ));
    }
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for f in pending.iter_mut().flatten() {
        if let Poll::Ready((r, buf)) = f.as_mut().poll(&mut cx) {
            return Err(format!(
                "a receive that no message should match completed: {r:?}, carried seed {}",
                carried_seed(buf.as_slice())
            ));
        }
    }
    drop(pending);
    for (i, (s, o)) in specs.iter().zip(outs).enumerate() {
        if let Some(o) = o {
            check_received(i, s, o, side.source()?)?;
        }
    }
    Ok(specs.len().to_string())
}

/// Wall-clock milliseconds of `at` (comparable across processes).
fn unix_ms_of(at: Instant) -> u128 {
    let ago = Instant::now().saturating_duration_since(at);
    (std::time::SystemTime::now() - ago)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Waits for every future in `futs` whatever its outcome, noting when
/// each finished; `None` after the step limit.
fn each_outcome<T>(side: &Side, futs: &mut [Boxed<'_, T>]) -> Option<Vec<(T, Instant)>> {
    let mut outs: Vec<Option<(T, Instant)>> = futs.iter().map(|_| None).collect();
    run_until(side, step_limit(), |cx| {
        let mut all = true;
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if o.is_some() {
                continue;
            }
            match f.as_mut().poll(cx) {
                Poll::Ready(v) => *o = Some((v, Instant::now())),
                Poll::Pending => all = false,
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })?;
    Some(
        outs.into_iter()
            .map(|o| o.expect("every one is done"))
            .collect(),
    )
}

/// `send-each <spec>...`: posts the sends, answers `posted`, waits for
/// every one to complete or fail, then answers each outcome in order:
/// `ok@<unix ms>` or `<error kind>@<unix ms>`.
fn cmd_send_each(side: &Side, specs: &[SendSpec]) -> Result<String, String> {
    let peer = side.peer()?;
    let mut futs: Vec<Boxed<'_, OpOutput<Sent>>> = specs
        .iter()
        .map(|s| {
            let d = pattern(s.len, s.seed);
            let f: Boxed<'_, OpOutput<Sent>> = if s.tagged {
                Box::pin(side.ep.tsend(peer, s.tag, d))
            } else {
                Box::pin(side.ep.send(peer, d))
            };
            f
        })
        .collect();
    say("posted");
    let outs = each_outcome(side, &mut futs)
        .ok_or_else(|| format!("timeout: sends not all done after {:?}", step_limit()))?;
    let mut line = Vec::with_capacity(specs.len());
    for (i, ((r, buf), at)) in outs.into_iter().enumerate() {
        if buf.len() != specs[i].len {
            return Err(format!("send {i}: a {}-byte buffer came back", buf.len()));
        }
        let what = match r {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("{:?}", e.kind()),
        };
        line.push(format!("{what}@{}", unix_ms_of(at)));
    }
    Ok(line.join(","))
}

/// `recv-each <spec>...`: as `send-each`, for receives; each one that
/// completes is checked as `recv` checks it.
fn cmd_recv_each(side: &Side, specs: &[RecvSpec]) -> Result<String, String> {
    let peer = side.peer()?;
    let mut futs: Vec<Boxed<'_, OpOutput<Received>>> = Vec::with_capacity(specs.len());
    for s in specs {
        let buf = vec![FILL; s.room];
        let f: Boxed<'_, OpOutput<Received>> = match s.post {
            Post::Tagged { tag, ignore } => Box::pin(side.ep.trecv(buf, tag, ignore)),
            Post::Untagged => Box::pin(side.ep.recv(buf)),
            Post::FromPeer => Box::pin(side.ep.recv_from(peer, buf)),
            Post::FromSelf => Box::pin(side.ep.recv_from(side.me.ok_or("insert-self first")?, buf)),
        };
        futs.push(f);
    }
    say("posted");
    let outs = each_outcome(side, &mut futs)
        .ok_or_else(|| format!("timeout: receives not all done after {:?}", step_limit()))?;
    let mut line = Vec::with_capacity(specs.len());
    for (i, (out, at)) in outs.into_iter().enumerate() {
        let what = match &out.0 {
            Ok(_) => {
                check_received(i, &specs[i], out, side.source()?)?;
                "ok".to_owned()
            }
            Err(e) => format!("{:?}", e.kind()),
        };
        line.push(format!("{what}@{}", unix_ms_of(at)));
    }
    Ok(line.join(","))
}

/// The rail states, in rail order: `up,down`, ...
fn states_line(ep: &MrailEndpoint) -> String {
    let states: Vec<String> = ep.rail_states().iter().map(|s| s.to_string()).collect();
    states.join(",")
}

/// Reads `n` CQ entries (they follow the counter closely).
fn read_cq(side: &Side, n: usize) -> Result<Vec<psmrail::fabric::CqEntry>, String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n {
        match side.cq.read() {
            Ok(Some(e)) => got.push(e),
            Ok(None) if Instant::now() < deadline => std::thread::yield_now(),
            Ok(None) => return Err(format!("the CQ has {} entries, expected {n}", got.len())),
            Err(e) => {
                let detail = side.cq.readerr().map(|x| x.error.to_string());
                return Err(format!("CQ read: {e} ({detail:?})"));
            }
        }
    }
    if let Ok(Some(e)) = side.cq.read() {
        return Err(format!("an extra CQ entry: context {}", e.context));
    }
    Ok(got)
}

/// `post_tsend`/`post_send` with contexts 200+i; waits only on the send
/// counter, then reads the CQ.
fn cmd_ctrsend(side: &Side, specs: &[SendSpec]) -> Result<String, String> {
    let ep = &side.ep;
    let peer = side.peer()?;
    let base = side.sends.read();
    for (i, s) in specs.iter().enumerate() {
        let data = pattern(s.len, s.seed);
        let ctx = 200 + i as u64;
        let r = if s.tagged {
            ep.post_tsend(peer, s.tag, data, ctx)
        } else {
            ep.post_send(peer, data, ctx)
        };
        r.map_err(|e| format!("post send {i}: {}", e.error))?;
    }
    say("posted");
    let n = specs.len() as u64;
    side.sends
        .wait(base + n, Some(step_limit()))
        .map_err(|e| format!("send counter at {} of {}: {e}", side.sends.read() - base, n))?;
    let mut seen = vec![false; specs.len()];
    for e in read_cq(side, specs.len())? {
        let i = e
            .context
            .checked_sub(200)
            .map(|i| i as usize)
            .filter(|&i| i < specs.len())
            .ok_or_else(|| format!("a send completion with context {}", e.context))?;
        let s = &specs[i];
        let class = if s.tagged {
            CompletionFlags::TAGGED
        } else {
            CompletionFlags::MSG
        };
        if seen[i] || !e.flags.contains(CompletionFlags::SEND | class) || e.len != s.len {
            return Err(format!(
                "send {i}: entry {:?} len {} (seen before: {})",
                e.flags, e.len, seen[i]
            ));
        }
        let buf = e.buffer.ok_or_else(|| format!("send {i}: no buffer"))?;
        if buf.len() != s.len {
            return Err(format!("send {i}: buffer of {} bytes came back", buf.len()));
        }
        seen[i] = true;
    }
    Ok(n.to_string())
}

/// `post_trecv`/`post_recv` with contexts 100+i; waits only on the receive
/// counter, then reads the CQ and checks every byte.
fn cmd_ctrrecv(side: &Side, specs: &[RecvSpec]) -> Result<String, String> {
    let ep = &side.ep;
    let peer = side.source()?;
    let base = side.recvs.read();
    for (i, s) in specs.iter().enumerate() {
        let buf = vec![FILL; s.room];
        let ctx = 100 + i as u64;
        let r = match s.post {
            Post::Tagged { tag, ignore } => ep.post_trecv(buf, tag, ignore, ctx),
            Post::Untagged => ep.post_recv(buf, ctx),
            other => {
                return Err(format!(
                    "ctrrecv: {other:?} cannot be posted with a context"
                ))
            }
        };
        r.map_err(|e| format!("post receive {i}: {}", e.error))?;
    }
    say("posted");
    let n = specs.len() as u64;
    side.recvs.wait(base + n, Some(step_limit())).map_err(|e| {
        format!(
            "receive counter at {} of {n}: {e}",
            side.recvs.read() - base
        )
    })?;
    let mut seen = vec![false; specs.len()];
    for e in read_cq(side, specs.len())? {
        let i = e
            .context
            .checked_sub(100)
            .map(|i| i as usize)
            .filter(|&i| i < specs.len())
            .ok_or_else(|| format!("a receive completion with context {}", e.context))?;
        let s = &specs[i];
        let Want::Msg { len, tag, seed } = s.want else {
            return Err(format!("ctrrecv: receive {i} must want a message"));
        };
        let (class, want_tag) = match s.post {
            Post::Tagged { .. } => (CompletionFlags::TAGGED, tag),
            _ => (CompletionFlags::MSG, 0),
        };
        if seen[i]
            || !e.flags.contains(CompletionFlags::RECV | class)
            || e.len != len
            || e.tag != want_tag
            || e.source != peer
        {
            return Err(format!(
                "receive {i}: entry {:?} len {} tag {:#x} from {:?}, expected {len} B tag {want_tag:#x} from {peer:?} (seen before: {})",
                e.flags, e.len, e.tag, e.source, seen[i]
            ));
        }
        let buf = e.buffer.ok_or_else(|| format!("receive {i}: no buffer"))?;
        let got = buf.as_slice();
        let want = pattern(len, seed);
        if got.len() != s.room || e.offset != 0 {
            return Err(format!(
                "receive {i}: buffer of {} bytes at offset {}",
                got.len(),
                e.offset
            ));
        }
        if let Some(at) = first_difference(&got[..len], &want) {
            return Err(format!(
                "receive {i} (seed {seed}, carried {}): byte {at} differs",
                carried_seed(got)
            ));
        }
        if got[len..].iter().any(|&b| b != FILL) {
            return Err(format!("receive {i}: bytes past the message were written"));
        }
        seen[i] = true;
    }
    Ok(n.to_string())
}

/// The bytes received on this namespace's rail interfaces
/// (`/proc/net/dev` shows the reading process's namespace).
fn rail_rx_bytes() -> Result<u64, String> {
    let dev =
        std::fs::read_to_string("/proc/net/dev").map_err(|e| format!("/proc/net/dev: {e}"))?;
    let mut total = 0;
    for line in dev.lines() {
        let Some((name, counters)) = line.split_once(':') else {
            continue;
        };
        if name.trim().starts_with("rail") {
            let rx: u64 = counters
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("/proc/net/dev line {line:?}"))?;
            total += rx;
        }
    }
    Ok(total)
}

/// `recvdrop <len> <tag> <bytes>`: posts a tagged receive, drops it once
/// the rails received `bytes` more bytes (its transfer is under way) and
/// before it completes. Manual progress only.
fn cmd_recvdrop(side: &Side, rest: &str) -> Result<String, String> {
    let w: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().map_err(|_| format!("recvdrop {rest:?}")))
        .collect::<Result<_, _>>()?;
    let [len, tag, bytes] = w[..] else {
        return Err(format!("recvdrop {rest:?}"));
    };
    let rx0 = rail_rx_bytes()?;
    let mut fut = Box::pin(side.ep.trecv(vec![0u8; len as usize], tag, 0));
    say("posted");
    let mut looked = Instant::now();
    let r = run_until(side, step_limit(), |cx| {
        if let Poll::Ready((r, _)) = fut.as_mut().poll(cx) {
            return Poll::Ready(Err(format!(
                "the receive completed ({r:?}) before {bytes} bytes were seen"
            )));
        }
        if looked.elapsed() >= Duration::from_micros(500) {
            looked = Instant::now();
            match rail_rx_bytes() {
                Ok(n) if n - rx0 >= bytes => return Poll::Ready(Ok(n - rx0)),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    });
    let arrived = r.ok_or_else(|| format!("timeout: {bytes} bytes never arrived"))??;
    drop(fut);
    Ok(format!("dropped {arrived}"))
}

/// `inject t|m <len> <tag> <seed>`.
fn cmd_inject(side: &Side, rest: &str) -> Result<String, String> {
    let w: Vec<&str> = rest.split_whitespace().collect();
    let [class, len, tag, seed] = w[..] else {
        return Err(format!("inject {rest:?}"));
    };
    let parse = |s: &str| s.parse::<u64>().map_err(|_| format!("inject {rest:?}"));
    let data = pattern(parse(len)? as usize, parse(seed)?);
    let peer = side.peer()?;
    let r = match class {
        "t" => side.ep.tinject(peer, parse(tag)?, &data),
        _ => side.ep.inject(peer, &data),
    };
    r.map(|()| "injected".into())
        .map_err(|e| format!("{:?}: {}", e.kind(), e.message()))
}

/// `rmareg <len>`: registers `len` zero bytes for peers' reads and writes;
/// answers the raw key in hex.
fn cmd_rmareg(side: &mut Side, rest: &str) -> Result<String, String> {
    let len: usize = rest
        .trim()
        .parse()
        .map_err(|_| format!("length {rest:?}"))?;
    let access = psmrail::fabric::MrAccess::REMOTE_READ | psmrail::fabric::MrAccess::REMOTE_WRITE;
    let mr = side
        .domain
        .register(vec![0u8; len], access, None)
        .map_err(|e| e.to_string())?;
    let hex: String = mr
        .raw_key()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    side.region = Some(mr);
    Ok(hex)
}

/// `rma <write|read> <raw key hex> <len> <offset> <seed>`: a write of the
/// pattern, or a read checked against it, at the peer's region; answers
/// the microseconds, or the error's kind and text.
fn cmd_rma(side: &Side, rest: &str) -> Result<String, String> {
    let w: Vec<&str> = rest.split_whitespace().collect();
    let [op, hex, len, offset, seed] = w[..] else {
        return Err(format!("rma: {rest:?}"));
    };
    let raw: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let (len, offset): (usize, u64) = (
        len.parse().map_err(|_| "len")?,
        offset.parse().map_err(|_| "offset")?,
    );
    let seed: u64 = seed.parse().map_err(|_| "seed")?;
    let key = side
        .domain
        .map_raw(&psmrail::fabric::RawKey::from_bytes(&raw))
        .map_err(|e| e.to_string())?;
    let peer = side.peer()?;
    let start = Instant::now();
    let op = match op {
        "write" => side.ep.write(peer, pattern(len, seed), offset, key),
        "read" => side.ep.read(peer, vec![0u8; len], offset, key),
        other => return Err(format!("rma {other}?")),
    };
    let mut op = Box::pin(op);
    let out = run_until(side, step_limit(), |cx| op.as_mut().poll(cx)).ok_or("timeout")?;
    let _ = side.domain.unmap_key(key);
    match out {
        (Ok(()), buf) => {
            if w[0] == "read" && buf.as_slice() != pattern(len, seed).as_slice() {
                return Err(format!(
                    "read: bytes differ from offset {:?}",
                    first_difference(buf.as_slice(), &pattern(len, seed))
                ));
            }
            Ok(start.elapsed().as_micros().to_string())
        }
        (Err(e), _) => Err(format!("{:?}: {}", e.kind(), e.message())),
    }
}

/// `rmacheck <offset> <len> <seed|zero>`: the own region holds the
/// pattern (or zeros) there.
fn cmd_rmacheck(side: &Side, rest: &str) -> Result<String, String> {
    let w: Vec<&str> = rest.split_whitespace().collect();
    let [offset, len, seed] = w[..] else {
        return Err(format!("rmacheck: {rest:?}"));
    };
    let (offset, len): (usize, usize) = (
        offset.parse().map_err(|_| "offset")?,
        len.parse().map_err(|_| "len")?,
    );
    let mr = side.region.as_ref().ok_or("no region")?;
    let mut got = vec![0u8; len];
    mr.read_at(offset, &mut got).map_err(|e| e.to_string())?;
    let want = match seed {
        "zero" => vec![0u8; len],
        s => pattern(len, s.parse().map_err(|_| "seed")?),
    };
    match first_difference(&got, &want) {
        None => Ok("same".into()),
        Some(at) => Err(format!("differs at {at}")),
    }
}

/// The rail events so far: `<rail>/<state>/<unix ms>` each, where the
/// time is the wall clock's (comparable with the parent's).
fn events_line(events: &psmrail::mrail::RailEvents) -> String {
    let mut out = Vec::new();
    while let Some(e) = events.read() {
        let ago = Instant::now().saturating_duration_since(e.at);
        let at = std::time::SystemTime::now() - ago;
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        out.push(format!("{}/{}/{ms}", e.rail, e.state));
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

fn stats_line(ep: &MrailEndpoint) -> String {
    let s = ep.stats();
    let rails: Vec<String> = s
        .rails
        .iter()
        .map(|r| {
            format!(
                "{}/{}/{}/{}/{}/{}/{}/{}",
                r.msgs_sent,
                r.bytes_sent,
                r.msgs_received,
                r.bytes_received,
                r.stripes,
                r.rate_mbit.unwrap_or(0),
                r.errors,
                r.retransmits
            )
        })
        .collect();
    format!(
        "unknown={} malformed={} duplicates={} beyond={} stale={} rails={}",
        s.unknown_peer,
        s.malformed,
        s.duplicates,
        s.beyond_window,
        s.stale,
        rails.join(",")
    )
}

// ----- the parent -----------------------------------------------------------------

/// Seeds, unique in this process (tests run one at a time under the lock).
static SEEDS: AtomicU64 = AtomicU64::new(1);

fn next_seed() -> u64 {
    SEEDS.fetch_add(1, Ordering::Relaxed)
}

/// A message the parent has a child send and the other receive.
#[derive(Clone, Copy, Debug)]
struct Msg {
    tagged: bool,
    len: usize,
    tag: u64,
    seed: u64,
}

fn tagged(len: usize, tag: u64) -> Msg {
    Msg {
        tagged: true,
        len,
        tag,
        seed: next_seed(),
    }
}

fn untagged(len: usize) -> Msg {
    Msg {
        tagged: false,
        len,
        tag: 0,
        seed: next_seed(),
    }
}

impl Msg {
    fn send(&self) -> String {
        let c = if self.tagged { "t" } else { "m" };
        format!("{c}:{}:{}:{}", self.len, self.tag, self.seed)
    }

    fn send_dropped(&self) -> String {
        self.send() + ":drop"
    }

    fn want(&self) -> String {
        format!("{}={}={}", self.len, self.tag, self.seed)
    }

    /// The matching receive (exact tag, or untagged) with `room` bytes.
    fn recv_in(&self, room: usize) -> String {
        if self.tagged {
            format!("t={}=0:{room}:{}", self.tag, self.want())
        } else {
            format!("m:{room}:{}", self.want())
        }
    }

    fn recv(&self) -> String {
        self.recv_in(self.len)
    }

    /// A tagged receive that matches every tag.
    fn recv_any_tag(&self, room: usize) -> String {
        format!("t=0={}:{room}:{}", u64::MAX, self.want())
    }

    /// An untagged receive directed at the peer.
    fn recv_from_peer(&self, room: usize) -> String {
        format!("f:{room}:{}", self.want())
    }
}

/// One child as the parent sees it.
struct Host {
    peer: Peer,
    label: &'static str,
    name: String,
    fixed_rail: usize,
}

fn short(s: &str) -> &str {
    match s.char_indices().nth(100) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl Host {
    fn say(&mut self, line: &str) {
        self.peer.send_line(line);
    }

    fn hear(&mut self) -> String {
        self.peer.recv_line(LINE)
    }

    /// Sends a command that answers `posted` first, and waits for that.
    fn posted(&mut self, cmd: &str) {
        self.say(cmd);
        let l = self.hear();
        assert_eq!(
            l,
            "posted",
            "{}: `{}...` answered {l:?}",
            self.label,
            short(cmd)
        );
    }

    /// The command's final answer: `ok ...` or `err ...`.
    fn done(&mut self) -> Result<String, String> {
        let l = self.hear();
        if let Some(s) = l.strip_prefix("ok") {
            Ok(s.trim_start().to_owned())
        } else if let Some(e) = l.strip_prefix("err ") {
            Err(e.to_owned())
        } else {
            panic!("{}: unexpected line {l:?}", self.label);
        }
    }

    fn ok(&mut self, what: &str) -> String {
        let label = self.label;
        self.done()
            .unwrap_or_else(|e| panic!("{label}: {what} failed: {e}"))
    }

    /// A command with one answer, which must be `ok`.
    fn call(&mut self, cmd: &str) -> String {
        self.say(cmd);
        self.ok(short(cmd))
    }

    fn stats(&mut self) -> Stats {
        Stats::parse(&self.call("stats"))
    }
}

/// A child's `stats` answer.
#[derive(Debug)]
struct Stats {
    fields: HashMap<String, u64>,
    /// Per rail: msgs sent, bytes sent, msgs received, bytes received,
    /// stripes, rate (Mbit/s, 0 unknown), errors (times lost),
    /// retransmits (failover).
    rails: Vec<[u64; 8]>,
}

impl Stats {
    fn parse(line: &str) -> Stats {
        let mut fields = HashMap::new();
        let mut rails = Vec::new();
        for kv in line.split_whitespace() {
            let (k, v) = kv.split_once('=').expect("key=value");
            if k == "rails" {
                for r in v.split(',') {
                    let n: Vec<u64> = r.split('/').map(|x| x.parse().expect("number")).collect();
                    rails.push(n.try_into().expect("8 numbers"));
                }
            } else {
                fields.insert(k.to_owned(), v.parse().expect("number"));
            }
        }
        Stats { fields, rails }
    }

    fn get(&self, k: &str) -> u64 {
        self.fields[k]
    }

    /// Nothing malformed, duplicated, beyond the window or from an
    /// unknown peer.
    fn assert_clean(&self, who: &str) {
        for k in ["unknown", "malformed", "duplicates", "beyond"] {
            assert_eq!(self.get(k), 0, "{who}: {k} in {self:?}");
        }
    }
}

/// How the children of a pair run.
#[derive(Clone, Copy)]
struct Opts {
    policy: &'static str,
    auto: bool,
    /// Whether A inserts B when told B's address.
    a_inserts: bool,
    /// Whether B inserts A when told A's address.
    b_inserts: bool,
    /// More environment for both children.
    env: &'static [(&'static str, &'static str)],
}

impl Opts {
    fn manual(policy: &'static str) -> Opts {
        Opts {
            policy,
            auto: false,
            a_inserts: true,
            b_inserts: true,
            env: &[],
        }
    }
}

/// A child in A and one in B, connected.
struct Pair {
    a: Host,
    b: Host,
}

impl Pair {
    fn start(rig: &RailRig, test: &str, opts: Opts) -> Pair {
        let spawn = |ns: &str, label: &'static str, addr: String, insert: bool| {
            let mut env = vec![
                ("FI_OFI_MRAIL_ADDR", addr.as_str()),
                ("FI_OFI_MRAIL_CONFIG", opts.policy),
                ("PSMRAIL_ENGINE", "soft"),
                ("FI_PSM_NAME_SERVER", "0"),
                ("FI_PSM_DELAY", "0"),
                ("RIG_PROGRESS", if opts.auto { "auto" } else { "manual" }),
                ("RIG_INSERT_PEER", if insert { "1" } else { "0" }),
            ];
            env.extend_from_slice(opts.env);
            let mut peer = Peer::spawn_in(ns, test, label, &env);
            let line = peer.recv_line(LINE);
            let w: Vec<&str> = line.split_whitespace().collect();
            let ["name", name, fixed, progress] = w[..] else {
                panic!("{label}: {line}");
            };
            let want = if opts.auto { "auto" } else { "manual" };
            assert_eq!(progress, want, "{label}: progress");
            Host {
                peer,
                label,
                name: name.to_owned(),
                fixed_rail: fixed.parse().expect("fixed rail"),
            }
        };
        let mut a = spawn(rig.a(), "a", rig.mrail_addr_a(), opts.a_inserts);
        let mut b = spawn(rig.b(), "b", rig.mrail_addr_b(), opts.b_inserts);
        // Both insert at once: each side's insert needs the other's
        // progress.
        let (a_name, b_name) = (a.name.clone(), b.name.clone());
        a.say(&format!("peer {b_name}"));
        b.say(&format!("peer {a_name}"));
        let ra = a.ok("inserting B");
        let rb = b.ok("inserting A");
        let want = |inserts| if inserts { "inserted" } else { "deferred" };
        assert!(ra.starts_with(want(opts.a_inserts)), "a: {ra}");
        assert!(rb.starts_with(want(opts.b_inserts)), "b: {rb}");
        Pair { a, b }
    }

    /// Both children close their endpoints and exit 0.
    fn quit(mut self) {
        self.a.say("quit");
        self.b.say("quit");
        for mut h in [self.a, self.b] {
            let bye = h.ok("closing");
            assert_eq!(bye, "bye");
            let label = h.label;
            assert!(h.peer.wait(LINE).success(), "{label} failed");
        }
    }
}

/// Posts `recvs` at `rx`, then `sends` at `tx`; both must succeed. The
/// sender's time in microseconds.
fn exchange(rx: &mut Host, tx: &mut Host, recvs: &[String], sends: &[String]) -> u64 {
    rx.posted(&format!("recv {}", recvs.join(" ")));
    tx.posted(&format!("send {}", sends.join(" ")));
    let us = tx.ok("send");
    rx.ok("recv");
    us.parse().expect("microseconds")
}

/// Sends `msgs` from `tx` to `rx`, each into a buffer of its own size.
fn carry(rx: &mut Host, tx: &mut Host, msgs: &[Msg]) -> u64 {
    let recvs: Vec<String> = msgs.iter().map(Msg::recv).collect();
    let sends: Vec<String> = msgs.iter().map(Msg::send).collect();
    exchange(rx, tx, &recvs, &sends)
}

/// The lock and the rig, or `None` after printing why the test is skipped.
fn setup(shapes: &[RailShape]) -> Option<(SpinLock, RailRig)> {
    if let Some(reason) = RailRig::skip_reason() {
        println!("skipped: {reason}");
        return None;
    }
    let lock = spin_lock();
    match RailRig::with_shapes(shapes) {
        Ok(rig) => Some((lock, rig)),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

/// A's byte counters on every rail.
fn a_links(rig: &RailRig) -> Vec<support::rig::LinkBytes> {
    (0..rig.rails())
        .map(|r| rig.link_bytes(rig.a(), rig.a_if(r)))
        .collect()
}

/// B's byte counters on every rail.
fn b_links(rig: &RailRig) -> Vec<support::rig::LinkBytes> {
    (0..rig.rails())
        .map(|r| rig.link_bytes(rig.b(), rig.b_if(r)))
        .collect()
}

const SIZES: [usize; 7] = [0, 1, 40, 41, 16384, 16385, MIB];

#[test]
fn every_policy_carries_every_size_over_real_rails() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some((_lock, rig)) = setup(&[RailShape::default(); 2]) else {
        return;
    };
    let test = "every_policy_carries_every_size_over_real_rails";
    for policy in [DEFAULT_POLICY, "-1:fixed", "-1:round-robin", "-1:striping"] {
        let mut p = Pair::start(&rig, test, Opts::manual(policy));
        let Pair { a, b } = &mut p;
        // Every size both ways, tagged and untagged, all in flight at once.
        for (a_to_b, is_tagged) in [(true, true), (false, false), (true, false), (false, true)] {
            let msgs: Vec<Msg> = SIZES
                .iter()
                .enumerate()
                .map(|(k, &len)| {
                    if is_tagged {
                        tagged(len, 0xa000_0000_0000_0000 | k as u64)
                    } else {
                        untagged(len)
                    }
                })
                .collect();
            if a_to_b {
                carry(b, a, &msgs);
            } else {
                carry(a, b, &msgs);
            }
        }
        // One at a time too.
        for &len in &SIZES {
            carry(b, a, &[tagged(len, 77)]);
            carry(a, b, &[untagged(len)]);
        }
        if policy == "-1:fixed" {
            // 1 MiB moves on the fixed rail alone.
            assert_eq!(a.fixed_rail, b.fixed_rail);
            let before = a_links(&rig);
            carry(b, a, &[tagged(MIB, 5)]);
            let after = a_links(&rig);
            for r in 0..rig.rails() {
                let tx = after[r].tx - before[r].tx;
                let rx = after[r].rx - before[r].rx;
                if r == a.fixed_rail {
                    assert!(tx >= MIB as u64, "fixed rail {r} sent only {tx} bytes");
                } else {
                    assert!(
                        tx + rx < 64 * KIB as u64,
                        "rail {r} is not the fixed rail {} and moved {tx} + {rx} bytes",
                        a.fixed_rail
                    );
                }
            }
        }
        if policy == DEFAULT_POLICY {
            // 64 MiB striped: each rail's link carries a good share (rails
            // of one speed get equal parts unless their measured rates
            // differ by a quarter or more).
            let msg = tagged(64 * MIB, 64);
            let (sa, sb) = (a.stats(), b.stats());
            let before = a_links(&rig);
            let b_before = b_links(&rig);
            let start = Instant::now();
            let us = carry(b, a, &[msg]);
            let wall = start.elapsed();
            let after = a_links(&rig);
            let b_after = b_links(&rig);
            let (sa2, sb2) = (a.stats(), b.stats());
            for r in 0..rig.rails() {
                let tx = after[r].tx - before[r].tx;
                let rx = b_after[r].rx - b_before[r].rx;
                assert!(
                    tx.min(rx) >= 16 * MIB as u64,
                    "rail {r} carried only {tx} bytes (A sent) / {rx} (B got) of a striped 64 MiB message"
                );
                // Each side's per-rail bytes are what its link moved (its
                // headers and control frames aside).
                let sent = sa2.rails[r][1] - sa.rails[r][1];
                let got = sb2.rails[r][3] - sb.rails[r][3];
                for (who, counted, link) in [("A sent", sent, tx), ("B received", got, rx)] {
                    let off = (link as f64 - counted as f64).abs() / link as f64;
                    assert!(
                        off <= 0.02,
                        "rail {r}: {who} {counted} bytes by its statistics, {link} by its link ({:.1} % apart)",
                        off * 100.0
                    );
                }
                println!(
                    "rail {r}: A's statistics {sent} bytes sent, its link {tx}; B's {got} received, its link {rx}"
                );
            }
            println!(
                "64 MiB striped over {} rails: {:.1} ms at the sender, {wall:.1?} with the checks",
                rig.rails(),
                us as f64 / 1000.0
            );
        }
        p.a.stats().assert_clean("a");
        p.b.stats().assert_clean("b");
        p.quit();
    }
}

#[test]
fn larger_and_shorter_buffers_matching_and_directed_receives() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some((_lock, rig)) = setup(&[RailShape::default(); 2]) else {
        return;
    };
    let test = "larger_and_shorter_buffers_matching_and_directed_receives";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    for len in [1000usize, 3 * MIB + 5] {
        // A larger buffer: the message, and nothing after it.
        let t = tagged(len, 1);
        let m = untagged(len);
        exchange(
            b,
            a,
            &[t.recv_in(len + 777), m.recv_in(len + 4096)],
            &[t.send(), m.send()],
        );
        // A shorter one: FI_ETRUNC with both lengths, the prefix placed;
        // the sender succeeds.
        let t = tagged(len, 2);
        let m = untagged(len);
        exchange(
            b,
            a,
            &[t.recv_in(len / 2), m.recv_in(len - 1)],
            &[t.send(), m.send()],
        );
        // Untagged messages never match tagged receives and vice versa:
        // receives posted first...
        let m = untagged(len);
        let t = tagged(len, 0x1234);
        exchange(
            b,
            a,
            &[t.recv_any_tag(len), m.recv()],
            &[m.send(), t.send()],
        );
        // ... and messages waiting before the receives come.
        let t = tagged(len, 0x4321);
        let m = untagged(len);
        a.posted(&format!("send {} {}", t.send(), m.send()));
        std::thread::sleep(Duration::from_millis(20));
        b.posted(&format!("recv {} {}", m.recv(), t.recv_any_tag(len)));
        a.ok("sending tagged then untagged");
        b.ok("receiving untagged then tagged");
    }
    // The shortest buffers, eager, RTS on one rail and striped.
    for len in [1000usize, 16385, 3 * MIB + 5] {
        let t = tagged(len, 3);
        let m = untagged(len);
        exchange(b, a, &[t.recv_in(0), m.recv_in(1)], &[t.send(), m.send()]);
    }
    // Directed receives: one directed at B's own address is not taken by
    // A's message, one directed at A is.
    b.call("insert-self");
    for len in [100usize, 2 * MIB] {
        let m = untagged(len);
        exchange(
            b,
            a,
            &["s:64:pending".to_owned(), m.recv_from_peer(len)],
            &[m.send()],
        );
        // The withdrawn one takes nothing later either.
        let m = untagged(len);
        exchange(b, a, &[m.recv_from_peer(len)], &[m.send()]);
    }
    a.stats().assert_clean("a");
    b.stats().assert_clean("b");
    p.quit();
}

#[test]
fn send_order_holds_across_rails_of_different_delays() {
    if let Some(r) = role() {
        return child(&r);
    }
    let shapes = [
        RailShape::default(),
        RailShape {
            delay: Some(Duration::from_millis(5)),
            jitter: Some(Duration::from_millis(3)),
            ..RailShape::default()
        },
        RailShape::default(),
    ];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let test = "send_order_holds_across_rails_of_different_delays";
    let mut p = Pair::start(
        &rig,
        test,
        Opts::manual("4096:round-robin,ULONG_MAX:striping"),
    );
    // Changed while the pair runs: rail 2 slower too, rail 1 steady.
    rig.set_delay(2, Some(Duration::from_millis(2)));
    rig.set_delay(1, Some(Duration::from_millis(5)));
    let Pair { a, b } = &mut p;
    let msgs: Vec<Msg> = (0..300usize)
        .map(|i| {
            let len = match i % 10 {
                3 => 20 * KIB + (i * 7919) % (180 * KIB),
                6 => 4097 + (i * 131) % 12_000,
                _ if i % 50 == 17 => 0,
                _ => 1 + (i * 37) % 4096,
            };
            tagged(len, 9)
        })
        .collect();
    // Every message leaves back to back; the receives come after, all with
    // the same tag, so only the send order decides which gets which.
    let sends: Vec<String> = msgs.iter().map(Msg::send).collect();
    let recvs: Vec<String> = msgs.iter().map(|m| m.recv_in(m.len + 64)).collect();
    a.posted(&format!("send {}", sends.join(" ")));
    std::thread::sleep(Duration::from_millis(50));
    b.posted(&format!("recv {}", recvs.join(" ")));
    a.ok("300 sends");
    b.ok("300 receives in order");
    let s = b.stats();
    s.assert_clean("b");
    assert!(
        s.rails.iter().all(|r| r[2] > 0),
        "every rail carried control frames: {s:?}"
    );
    a.stats().assert_clean("a");
    p.quit();
}

#[test]
fn counters_alone_make_progress_across_processes() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some((_lock, rig)) = setup(&[RailShape::default(); 2]) else {
        return;
    };
    let test = "counters_alone_make_progress_across_processes";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    for round in 0..2 {
        let msgs = [
            tagged(10, 1),
            untagged(40),
            tagged(16385, 2),
            tagged(300_000, 3),
            untagged(2 * MIB),
            tagged(0, 4),
        ];
        let recvs: Vec<String> = msgs.iter().map(|m| m.recv_in(m.len + 100)).collect();
        let sends: Vec<String> = msgs.iter().map(Msg::send).collect();
        let (rx, tx) = if round == 0 {
            (&mut *b, &mut *a)
        } else {
            (&mut *a, &mut *b)
        };
        rx.posted(&format!("ctrrecv {}", recvs.join(" ")));
        tx.posted(&format!("ctrsend {}", sends.join(" ")));
        tx.ok("sends waited on the send counter");
        rx.ok("receives waited on the receive counter");
    }
    a.stats().assert_clean("a");
    b.stats().assert_clean("b");
    p.quit();
}

#[test]
fn auto_progress_carries_eager_and_striped_messages() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some((_lock, rig)) = setup(&[RailShape::default(); 2]) else {
        return;
    };
    let test = "auto_progress_carries_eager_and_striped_messages";
    let opts = Opts {
        auto: true,
        ..Opts::manual(DEFAULT_POLICY)
    };
    let mut p = Pair::start(&rig, test, opts);
    let Pair { a, b } = &mut p;
    let sizes = [0usize, 40, 41, 16384, 16385, MIB, 8 * MIB];
    let msgs: Vec<Msg> = sizes.iter().map(|&l| tagged(l, l as u64)).collect();
    carry(b, a, &msgs);
    let msgs: Vec<Msg> = sizes.iter().map(|&l| untagged(l)).collect();
    carry(a, b, &msgs);
    for &len in &sizes {
        carry(b, a, &[untagged(len)]);
    }
    let s = a.stats();
    s.assert_clean("a");
    assert!(
        s.rails.iter().all(|r| r[4] > 0),
        "striped parts on every rail: {s:?}"
    );
    b.stats().assert_clean("b");
    p.quit();
}

#[test]
fn dropped_futures_lose_nothing_across_processes() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some((_lock, rig)) = setup(&[RailShape::default(); 2]) else {
        return;
    };
    let test = "dropped_futures_lose_nothing_across_processes";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    // A 32 MiB striped receive dropped once 1 MiB of it arrived: the
    // sender's send still completes, and the pair still works.
    let big = tagged(32 * MIB, 32);
    b.posted(&format!("recvdrop {} {} {}", big.len, big.tag, MIB));
    a.posted(&format!("send {}", big.send()));
    let dropped = b.ok("dropping a receive mid-transfer");
    assert!(dropped.starts_with("dropped"), "{dropped}");
    println!("a 32 MiB receive {dropped} bytes in");
    // A new receive with the same tag, posted while the dropped one's
    // parts may still be arriving, gets only its own message.
    let again = tagged(32 * MIB, 32);
    b.posted(&format!("recv {}", again.recv()));
    a.ok("the send whose receive was dropped");
    a.posted(&format!("send {}", again.send()));
    a.ok("the next send with the same tag");
    b.ok("the next receive with the same tag");
    carry(b, a, &[tagged(100, 1), tagged(MIB, 2), untagged(3 * MIB)]);
    carry(a, b, &[tagged(MIB, 3)]);
    // Send futures dropped right after posting: the messages arrive in
    // full, whether the receives were there first or come later.
    for receive_first in [true, false] {
        let msgs = [tagged(100, 4), tagged(4 * MIB, 5), untagged(20_000)];
        let recvs: Vec<String> = msgs.iter().map(Msg::recv).collect();
        let sends: Vec<String> = msgs.iter().map(Msg::send_dropped).collect();
        if receive_first {
            exchange(b, a, &recvs, &sends);
        } else {
            a.posted(&format!("send {}", sends.join(" ")));
            a.ok("dropped sends");
            std::thread::sleep(Duration::from_millis(20));
            b.posted(&format!("recv {}", recvs.join(" ")));
            b.ok("messages of dropped sends");
        }
    }
    // An unmatched receive dropped is withdrawn: its message goes to the
    // next receive.
    for len in [8usize, MIB] {
        let m = tagged(len, 6);
        let withdrawn = format!("t=6=0:{len}:drop");
        exchange(b, a, &[withdrawn, m.recv()], &[m.send()]);
        let m = untagged(len);
        exchange(b, a, &[format!("m:{len}:drop"), m.recv()], &[m.send()]);
    }
    a.stats().assert_clean("a");
    b.stats().assert_clean("b");
    p.quit();
}

#[test]
fn a_peer_missing_from_the_av_is_refused_and_counted() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some((_lock, rig)) = setup(&[RailShape::default(); 2]) else {
        return;
    };
    let test = "a_peer_missing_from_the_av_is_refused_and_counted";
    let opts = Opts {
        b_inserts: false,
        ..Opts::manual(DEFAULT_POLICY)
    };
    let mut p = Pair::start(&rig, test, opts);
    let Pair { a, b } = &mut p;
    // A knows B; B does not know A.
    let small = tagged(8, 1);
    let r = a.call(&format!("inject t 8 {} {}", small.tag, small.seed));
    assert_eq!(r, "injected");
    let big = tagged(MIB, 2);
    let start = Instant::now();
    a.posted(&format!("send {}", big.send()));
    let refused = a
        .done()
        .expect_err("a striped send to a peer that does not know A");
    let took = start.elapsed();
    assert!(
        refused.contains("Io") && refused.contains("refused"),
        "A's striped send: {refused}"
    );
    assert!(took < Duration::from_secs(10), "refused after {took:?}");
    // B counted both frames, and only those.
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = b.stats();
        if s.get("unknown") >= 2 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(s.get("unknown"), 2, "{s:?}");
    assert_eq!(s.get("malformed") + s.get("duplicates"), 0, "{s:?}");
    // Nothing broke: once B inserts A, messages flow both ways.
    let r = b.call("insert");
    assert!(r.starts_with("inserted"), "{r}");
    carry(b, a, &[tagged(8, 3), tagged(MIB, 4), untagged(100)]);
    carry(a, b, &[tagged(MIB, 5), untagged(8)]);
    assert_eq!(b.stats().get("unknown"), 2);
    a.stats().assert_clean("a");
    p.quit();
}

#[test]
fn learned_weights_follow_the_rails_speeds() {
    if let Some(r) = role() {
        return child(&r);
    }
    // Rail 1 three times as fast as rail 0; no rates configured.
    let shapes = [RailShape::rate(40), RailShape::rate(120)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let test = "learned_weights_follow_the_rails_speeds";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    // Striped messages one after the other: the first ones are cut in
    // equal parts, and each teaches the sender how long its parts took.
    let mut shares = Vec::new();
    for _ in 0..12 {
        let before = a.stats();
        carry(b, a, &[tagged(2 * MIB, 5)]);
        let after = a.stats();
        let sent = |r: usize| after.rails[r][1] - before.rails[r][1];
        shares.push(sent(1) as f64 / (sent(0) + sent(1)) as f64);
    }
    // The receiver learns the rates (it sees each part land) and cuts
    // the messages; the sender follows its answer.
    let s = b.stats();
    let (r0, r1) = (s.rails[0][5], s.rails[1][5]);
    println!("learned rates: {r0} and {r1} Mbit/s; rail 1's share per message: {shares:.2?}");
    assert!(r0 > 0 && r1 > 0, "rates learned: {s:?}");
    assert!(
        r1 as f64 > 1.8 * r0 as f64,
        "rail 1 is faster: {r0} vs {r1}"
    );
    assert!(
        (shares[0] - 0.5).abs() < 0.01,
        "the first message is cut in halves: {shares:?}"
    );
    let last = shares[shares.len() - 1];
    assert!(
        (0.68..0.82).contains(&last),
        "the last message is cut about 1:3: {shares:?}"
    );
    p.quit();
}

/// From a cold start over rails of 1 and 2.5 Gbit/s, two 64 MiB messages
/// sent at once (so cut in equal parts) teach the sender both rails'
/// rates within their first 80 MiB (each rail's parts of about 4 MiB
/// finish one after the other; cutting parts per message, it took three
/// whole windows), in the rails' ratio, and the fast rail, done with its
/// own parts, takes the slow rail's last ones, so it carries about its
/// share of both messages, not half; the next message is cut by the
/// rates.
#[test]
fn learned_rates_come_from_the_first_parts_of_a_stream() {
    if let Some(r) = role() {
        return child(&r);
    }
    let shapes = [RailShape::rate(1000), RailShape::rate(2500)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let test = "learned_rates_come_from_the_first_parts_of_a_stream";
    let mut p = Pair::start(&rig, test, Opts::manual("ULONG_MAX:striping"));
    let Pair { a, b } = &mut p;
    let len = 64 * MIB;
    let cold = a.stats();
    b.posted(&format!("stream recv {len} 2 2"));
    a.posted(&format!("stream send {len} 2 2"));
    let sent = a.ok("stream");
    b.ok("stream");
    let w: Vec<&str> = sent.split_whitespace().collect();
    let [ms, bytes, total, rates] = w[..] else {
        panic!("stream: {sent}");
    };
    let (ms, bytes, total): (u64, u64, u64) = (
        ms.parse().unwrap(),
        bytes.parse().unwrap(),
        total.parse().unwrap(),
    );
    let rates: Vec<f64> = rates.split(',').map(|r| r.parse().unwrap()).collect();
    let warm = a.stats();
    let fast_share = |from: &Stats, to: &Stats| {
        let sent = |r: usize| (to.rails[r][1] - from.rails[r][1]) as f64;
        sent(1) / (sent(0) + sent(1))
    };
    let first = fast_share(&cold, &warm);
    println!(
        "rates known after {ms} ms and {} MiB of a {} MiB stream of {total} ms; rates {rates:?} Mbit/s; \
         rail 1 carried {first:.3} of it",
        bytes / MIB as u64,
        2 * len / MIB
    );
    assert!(bytes > 0, "rates never known during the stream: {sent}");
    assert!(
        bytes <= 80 * MIB as u64,
        "rates known only after {} MiB: {sent}",
        bytes / MIB as u64
    );
    let ratio = rates[1] / rates[0];
    assert!(
        (1.9..3.1).contains(&ratio),
        "rail 1 is 2.5 x as fast as rail 0: {rates:?}"
    );
    // Equal parts would give it 0.5, its share of the rates (0.71 on an
    // idle machine) what the rails reached: taking over the slow rail's
    // last parts brings it at least half way there.
    let ideal = rates[1] / (rates[0] + rates[1]);
    assert!(
        first > 0.5 + (ideal - 0.5) / 2.0,
        "rail 1 took over the slow rail's last parts: its share {first}, of the rates {ideal:.3}"
    );
    // The next message is cut about 1:2.5 (weights 6 and 15).
    let us = carry(b, a, &[tagged(len, 5)]);
    let share = fast_share(&warm, &a.stats());
    let mbit = mbit(len, us);
    println!("next message: rail 1's share {share:.3}, {mbit:.0} Mbit/s");
    assert!(
        (0.66..0.77).contains(&share),
        "the message is cut by the learned rates: {share}"
    );
    p.quit();
}

/// A rail's connections are reset (`ss -K` in one host) while a 64 MiB
/// striped message and a train of small messages cross: the rail's links
/// reconnect and send again what the other side had not consumed, so
/// every message arrives once, whole and in order, and nothing fails.
#[test]
fn a_rail_reset_under_striped_and_small_traffic_loses_nothing() {
    if let Some(r) = role() {
        return child(&r);
    }
    if !std::process::Command::new("ss")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("skipped: no ss");
        return;
    }
    let shapes = [RailShape::rate(1000), RailShape::rate(1000)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let test = "a_rail_reset_under_striped_and_small_traffic_loses_nothing";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    // One striped message first, then small ones behind it, one tag: only
    // the send order decides which receive gets which.
    let mut msgs = vec![tagged(64 * MIB, 3)];
    msgs.extend((0..200usize).map(|i| tagged(1 + (i * 37) % 4000, 3)));
    let sends: Vec<String> = msgs.iter().map(Msg::send).collect();
    let recvs: Vec<String> = msgs.iter().map(Msg::recv).collect();
    b.posted(&format!("recv {}", recvs.join(" ")));
    a.posted(&format!("send {}", sends.join(" ")));
    // Mid-transfer (64 MiB over 2 x 1 Gbit/s takes about 280 ms): every
    // TCP connection of rail 1 in host A is destroyed (both ends see a
    // reset).
    std::thread::sleep(Duration::from_millis(100));
    let out = rig
        .command_in(rig.a(), "ss")
        .args(["-K", "-t", "-n", "state", "established", "src"])
        .arg(rig.a_ip(1).to_string())
        .output()
        .expect("ss");
    let killed = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count();
    a.ok("sends across the reset");
    b.ok("receives across the reset, in order");
    assert!(out.status.success(), "ss -K: {out:?}");
    assert!(killed > 0, "no connection of rail 1 to reset");
    println!(
        "{killed} connections of rail 1 reset under a 64 MiB striped message + 200 small ones"
    );
    p.a.stats().assert_clean("a");
    p.b.stats().assert_clean("b");
    p.quit();
}

/// Wall-clock milliseconds (comparable with the children's event times).
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// A child's rail events: (rail, state, unix ms).
fn events(h: &mut Host) -> Vec<(usize, String, u128)> {
    let line = h.call("events");
    if line == "none" {
        return Vec::new();
    }
    line.split(',')
        .map(|e| {
            let f: Vec<&str> = e.split('/').collect();
            (
                f[0].parse().unwrap(),
                f[1].to_owned(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// Mbit/s of `bytes` in `us` microseconds.
fn mbit(bytes: usize, us: u64) -> f64 {
    bytes as f64 * 8.0 / us.max(1) as f64
}

#[test]
fn a_rail_whose_link_goes_down_fails_over_and_rejoins() {
    if let Some(r) = role() {
        return child(&r);
    }
    let shapes = [RailShape::rate(1000), RailShape::rate(1000)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let test = "a_rail_whose_link_goes_down_fails_over_and_rejoins";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    let block = |n: usize| -> Vec<Msg> { (0..n).map(|_| tagged(4 * MIB, 9)).collect() };
    // Before: both rails.
    let before = carry(b, a, &block(16));
    // A 256 MiB striped stream with small fixed-policy messages between
    // its messages, one tag (only the send order decides which receive
    // gets which); rail 1's link goes down under it, and comes back.
    let mut msgs = Vec::new();
    for i in 0..64usize {
        msgs.push(tagged(4 * MIB, 3));
        msgs.extend((0..4usize).map(|j| tagged(1 + (i * 131 + j * 37) % 4000, 3)));
    }
    let sends: Vec<String> = msgs.iter().map(Msg::send).collect();
    let recvs: Vec<String> = msgs.iter().map(Msg::recv).collect();
    b.posted(&format!("recv {}", recvs.join(" ")));
    a.posted(&format!("send {}", sends.join(" ")));
    std::thread::sleep(Duration::from_millis(300));
    let down_at = unix_ms();
    rig.link_down(1);
    std::thread::sleep(Duration::from_millis(1500));
    let up_at = unix_ms();
    rig.link_up(1);
    let stream_us: u64 = a.ok("the stream across the failover").parse().unwrap();
    b.ok("every message once, whole and in order");
    // During: the rail is down.
    rig.link_down(1);
    std::thread::sleep(Duration::from_millis(300));
    let during = carry(b, a, &block(16));
    rig.link_up(1);
    // After: the rail is back once its back-off is over.
    std::thread::sleep(Duration::from_millis(1500));
    let after = carry(b, a, &block(16));
    let (ea, eb) = (events(a), events(b));
    let (sa, sb) = (a.stats(), b.stats());
    let first = |ev: &[(usize, String, u128)], state: &str, since: u128| {
        ev.iter()
            .find(|e| e.0 == 1 && e.1 == state && e.2 >= since)
            .map(|e| e.2 - since)
    };
    let detect_a = first(&ea, "down", down_at).expect("A saw rail 1 go down");
    let detect_b = first(&eb, "down", down_at).expect("B saw rail 1 go down");
    let rejoin_a = first(&ea, "up", up_at).expect("A saw rail 1 rejoin");
    let rejoin_b = first(&eb, "up", up_at).expect("B saw rail 1 rejoin");
    let show = |ev: &[(usize, String, u128)]| -> Vec<String> {
        ev.iter()
            .map(|e| format!("{}:{}@{}", e.0, e.1, e.2 as i128 - down_at as i128))
            .collect()
    };
    println!(
        "events (ms after the link went down): A {:?}, B {:?}",
        show(&ea),
        show(&eb)
    );
    let retransmits: u64 = [&sa, &sb].iter().map(|s| s.rails[0][7]).sum();
    let bytes = 16 * 4 * MIB;
    println!(
        "rail 1 down under a 256 MiB striped stream + 256 small messages: detected in {detect_a} ms \
         (A) / {detect_b} ms (B), back in service {rejoin_a} ms (A) / {rejoin_b} ms (B) after its \
         link came up; the stream took {:.2} s; {retransmits} frames and parts sent again on rail 0",
        stream_us as f64 / 1e6
    );
    println!(
        "64 MiB striped: before {:.0} Mbit/s, rail 1 down {:.0} Mbit/s, after {:.0} Mbit/s",
        mbit(bytes, before),
        mbit(bytes, during),
        mbit(bytes, after)
    );
    assert!(retransmits > 0, "something went again on rail 0");
    assert!(
        sa.rails[1][6] >= 2 && sb.rails[1][6] >= 2,
        "rail 1 errors: {sa:?} {sb:?}"
    );
    for s in [&sa, &sb] {
        for k in ["unknown", "malformed", "beyond"] {
            assert_eq!(s.get(k), 0, "{k}: {s:?}");
        }
    }
    p.quit();
}

#[test]
fn striped_rma_across_processes_over_real_rails() {
    if let Some(r) = role() {
        return child(&r);
    }
    let shapes = [RailShape::rate(1000), RailShape::rate(1000)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let test = "striped_rma_across_processes_over_real_rails";
    let mut p = Pair::start(&rig, test, Opts::manual(DEFAULT_POLICY));
    let Pair { a, b } = &mut p;
    let region = 32 * MIB;
    let key = b.call(&format!("rmareg {region}"));
    assert_eq!(key.len(), 2 * 8 * 2, "8 bytes per rail, in hex: {key}");
    let before = a_links(&rig);
    // Writes of every size class, each then read back by A and checked
    // in place by B.
    let mut at = 0usize;
    for (i, len) in [0usize, 1, 3, 4096, 100_001, 8 * MIB + 5]
        .into_iter()
        .enumerate()
    {
        let seed = 40 + i as u64;
        let us = a.call(&format!("rma write {key} {len} {at} {seed}"));
        a.call(&format!("rma read {key} {len} {at} {seed}"));
        assert_eq!(b.call(&format!("rmacheck {at} {len} {seed}")), "same");
        println!("rma write of {len} B at {at}: {us} us");
        at += len + 7;
    }
    // Both rails carried the large write.
    let after = a_links(&rig);
    for r in 0..2 {
        let sent = after[r].tx - before[r].tx;
        assert!(sent > 3 * MIB as u64, "rail {r} carried {sent} bytes");
    }
    // A write past the region's end is refused and changes nothing.
    let tail = region - 1000;
    a.say(&format!("rma write {key} {} {tail} 99", 2 * MIB));
    let e = a.done().unwrap_err();
    assert!(e.starts_with("Access"), "{e}");
    assert_eq!(b.call(&format!("rmacheck {tail} 1000 zero")), "same");
    p.quit();
}

// ----- every rail lost, and back ---------------------------------------------

/// `FI_PSM_TIMEOUT` of the outage tests, and their children's limit for
/// one command (a hang shows within it).
const OUTAGE_ENV: &[(&str, &str)] = &[("FI_PSM_TIMEOUT", "3"), ("RIG_STEP_LIMIT_MS", "12000")];
/// `FI_PSM_TIMEOUT` there.
const OUTAGE_TIMEOUT_MS: u128 = 3000;
/// The pause between two groups of links going down or coming up.
const GROUP_PAUSE: Duration = Duration::from_millis(300);

/// A `send-each` or `recv-each` answer: per operation, `ok` or the error
/// kind, and when it ended (unix ms).
fn outcomes(line: &str) -> Vec<(String, u128)> {
    line.split(',')
        .map(|o| {
            let (what, at) = o.split_once('@').expect("<outcome>@<ms>");
            (what.to_owned(), at.parse().expect("ms"))
        })
        .collect()
}

/// Waits until `h`'s rail states read `want` (`up,up`); how long after
/// `since` (unix ms) that was seen.
fn wait_states(h: &mut Host, want: &str, since: u128, limit: Duration) -> u128 {
    let deadline = Instant::now() + limit;
    loop {
        let got = h.call("states");
        if got == want {
            return unix_ms().saturating_sub(since);
        }
        assert!(
            Instant::now() < deadline,
            "{}: rail states {got} after {limit:?}, expected {want}",
            h.label
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Takes the rails of each group down (or up) at once, the groups one
/// after the other; when the last group went.
fn set_links(rig: &RailRig, groups: &[&[usize]], up: bool) -> u128 {
    let mut at = 0;
    for (k, group) in groups.iter().enumerate() {
        if k > 0 {
            std::thread::sleep(GROUP_PAUSE);
        }
        at = unix_ms();
        for &r in *group {
            if up {
                rig.link_up(r);
            } else {
                rig.link_down(r);
            }
        }
    }
    at
}

/// One outage of every rail under a striped stream from A to B: the links
/// go down by `down` (groups of rails, one group after the other), stay
/// down `outage`, come back by `up`. What was in flight fails with
/// `FI_EIO` within `FI_PSM_TIMEOUT` of the last link going, a send
/// posted meanwhile fails at once, and once the rails are up again both
/// ways carry striped and small messages to the same addresses within a
/// few seconds, on every rail. Prints the figures; returns the slowest
/// failure (ms after the last link went) and the recovery (ms after the
/// first link came back until both ways carried).
fn outage_round(
    rig: &RailRig,
    p: &mut Pair,
    down: &[&[usize]],
    outage: Duration,
    up: &[&[usize]],
) -> (u128, u128) {
    let Pair { a, b } = p;
    // Six striped sends, receives for the first two: the other requests
    // wait at B, unmatched, when the links go.
    let stream: Vec<Msg> = (0..6).map(|_| tagged(64 * MIB, 3)).collect();
    let recvs: Vec<String> = stream[..2].iter().map(Msg::recv).collect();
    let sends: Vec<String> = stream.iter().map(Msg::send).collect();
    b.posted(&format!("recv-each {}", recvs.join(" ")));
    a.posted(&format!("send-each {}", sends.join(" ")));
    std::thread::sleep(Duration::from_millis(150));
    let gone_at = set_links(rig, down, false);
    let sent = outcomes(&a.ok("the stream's sends"));
    let got = outcomes(&b.ok("the stream's receives"));
    let mut slowest = 0;
    for (who, list) in [("send", &sent), ("receive", &got)] {
        for (i, (what, at)) in list.iter().enumerate() {
            if what == "ok" {
                continue;
            }
            assert_eq!(what, "Io", "{who} {i} failed with {what}: {list:?}");
            let after = at.saturating_sub(gone_at);
            assert!(
                after <= OUTAGE_TIMEOUT_MS,
                "{who} {i} failed {after} ms after the last link went down: {list:?}"
            );
            slowest = slowest.max(after);
        }
        assert!(
            list.iter().any(|(w, _)| w != "ok"),
            "no {who} of the stream failed: {list:?}"
        );
    }
    // Meanwhile a send fails at once.
    let lone = tagged(MIB, 4);
    let start = Instant::now();
    a.posted(&format!("send-each {}", lone.send()));
    let o = outcomes(&a.ok("a send with every rail down"));
    assert_eq!(o[0].0, "Io", "a send with every rail down: {o:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let rest = outage.saturating_sub(Duration::from_millis(
        unix_ms().saturating_sub(gone_at) as u64
    ));
    std::thread::sleep(rest);
    let back_at = unix_ms();
    set_links(rig, up, true);
    let up_a = wait_states(a, "up,up", back_at, Duration::from_secs(8));
    let up_b = wait_states(b, "up,up", back_at, Duration::from_secs(8));
    // The same addresses carry again, both ways (the same tag as the
    // stream: nothing of it is left to match)...
    carry(
        b,
        a,
        &[tagged(64 * MIB, 3), tagged(100, 3), tagged(20_000, 3)],
    );
    let carried = unix_ms() - back_at;
    carry(a, b, &[tagged(8 * MIB, 3), tagged(10, 3)]);
    let both_ways = unix_ms() - back_at;
    // ... and soon on every rail (a rail whose connections were given up
    // meanwhile connects again).
    let deadline = Instant::now() + Duration::from_secs(8);
    let every_rail = loop {
        let before = a_links(rig);
        carry(b, a, &[tagged(64 * MIB, 3)]);
        let after = a_links(rig);
        let shares: Vec<u64> = (0..rig.rails())
            .map(|r| after[r].tx - before[r].tx)
            .collect();
        if shares.iter().all(|&tx| tx >= 16 * MIB as u64) {
            break unix_ms() - back_at;
        }
        assert!(
            Instant::now() < deadline,
            "8 s after the outage a striped 64 MiB message still leaves a rail out: {shares:?}"
        );
    };
    println!(
        "every rail down ({down:?}, {} ms, back {up:?}): {} of 6 sends and {} of 2 receives \
         failed, the last {slowest} ms after the last link went; rails up again {up_a} ms (A) / \
         {up_b} ms (B) after the first link came back; A to B carried {carried} ms after it, both \
         ways {both_ways} ms, on every rail {every_rail} ms",
        outage.as_millis(),
        sent.iter().filter(|(w, _)| w != "ok").count(),
        got.iter().filter(|(w, _)| w != "ok").count(),
    );
    (slowest, both_ways)
}

/// Groups of rails whose links go (or come) together, one group after
/// the other.
type Groups = &'static [&'static [usize]];

/// Rounds of [`outage_round`] on one pair (links down by the first
/// groups, for the duration, back by the second), then a fresh insert of
/// the peer on each side, which carries too.
fn outages(test: &str, rounds: &[(Groups, Duration, Groups)]) {
    let shapes = [RailShape::rate(1000), RailShape::rate(1000)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    let opts = Opts {
        env: OUTAGE_ENV,
        ..Opts::manual(DEFAULT_POLICY)
    };
    let mut p = Pair::start(&rig, test, opts);
    carry(&mut p.b, &mut p.a, &[tagged(4 * MIB, 1)]);
    for &(down, outage, up) in rounds {
        outage_round(&rig, &mut p, down, outage, up);
    }
    let Pair { a, b } = &mut p;
    for h in [&mut *a, &mut *b] {
        let r = h.call("insert");
        assert!(r.starts_with("inserted"), "{}: {r}", h.label);
    }
    carry(b, a, &[tagged(64 * MIB, 9), tagged(100, 9)]);
    carry(a, b, &[tagged(MIB, 10), untagged(50)]);
    for s in [a.stats(), b.stats()] {
        for k in ["unknown", "malformed", "beyond"] {
            assert_eq!(s.get(k), 0, "{k}: {s:?}");
        }
    }
    p.quit();
}

#[test]
fn every_rail_down_at_once_and_back_the_pair_talks_again() {
    if let Some(r) = role() {
        return child(&r);
    }
    outages(
        "every_rail_down_at_once_and_back_the_pair_talks_again",
        &[
            // Back within FI_PSM_TIMEOUT, both at once.
            (&[&[0, 1]], Duration::from_millis(1000), &[&[0, 1]]),
            // Back after it, one then the other.
            (&[&[0, 1]], Duration::from_millis(4000), &[&[1], &[0]]),
        ],
    );
}

#[test]
fn rails_lost_and_back_one_after_the_other_the_pair_talks_again() {
    if let Some(r) = role() {
        return child(&r);
    }
    outages(
        "rails_lost_and_back_one_after_the_other_the_pair_talks_again",
        &[
            (&[&[0], &[1]], Duration::from_millis(1000), &[&[0], &[1]]),
            // Back long after it: the rails' connections were given up.
            (&[&[1], &[0]], Duration::from_millis(15000), &[&[0, 1]]),
        ],
    );
}

// ----- a rail down at connect --------------------------------------------------

/// Rail 1's link is down when the peers insert each other (with
/// `before_open`, already when the endpoints open): the inserts succeed
/// at once on rail 0, and striped and small messages flow there; once the
/// link is up, rail 1 comes into service on both sides and carries its
/// share of the stripes.
fn a_rail_down_at_connect_joins_later(test: &str, before_open: bool) {
    let shapes = [RailShape::rate(1000), RailShape::rate(1000)];
    let Some((_lock, rig)) = setup(&shapes) else {
        return;
    };
    if before_open {
        rig.link_down(1);
    }
    let opts = Opts {
        a_inserts: false,
        b_inserts: false,
        env: OUTAGE_ENV,
        ..Opts::manual(DEFAULT_POLICY)
    };
    let mut p = Pair::start(&rig, test, opts);
    let Pair { a, b } = &mut p;
    let down_at = unix_ms();
    if !before_open {
        rig.link_down(1);
    }
    for h in [&mut *a, &mut *b] {
        wait_states(h, "up,down", down_at, Duration::from_secs(5));
    }
    // Both insert at once (each insert needs the other's progress).
    let start = Instant::now();
    a.say("insert");
    b.say("insert");
    let (ra, rb) = (a.ok("inserting B"), b.ok("inserting A"));
    let inserted = start.elapsed();
    assert!(
        ra.starts_with("inserted") && rb.starts_with("inserted"),
        "{ra} / {rb}"
    );
    assert!(
        inserted < Duration::from_secs(2),
        "the inserts took {inserted:?}"
    );
    // Messages flow on rail 0 at once.
    let start = Instant::now();
    let before = a_links(&rig);
    carry(
        b,
        a,
        &[tagged(16 * MIB, 1), tagged(100, 1), tagged(20_000, 1)],
    );
    carry(a, b, &[tagged(MIB, 2), untagged(8)]);
    let flowed = start.elapsed();
    let after = a_links(&rig);
    assert!(
        after[0].tx - before[0].tx >= 16 * MIB as u64,
        "{before:?} {after:?}"
    );
    assert!(
        after[1].tx - before[1].tx < 64 * KIB as u64,
        "{before:?} {after:?}"
    );
    // The link comes up: rail 1 comes into service, and carries stripes.
    let up_at = unix_ms();
    rig.link_up(1);
    let up_a = wait_states(a, "up,up", up_at, Duration::from_secs(8));
    let up_b = wait_states(b, "up,up", up_at, Duration::from_secs(8));
    let deadline = Instant::now() + Duration::from_secs(8);
    let joined = loop {
        let before = a_links(&rig);
        carry(b, a, &[tagged(64 * MIB, 3)]);
        let after = a_links(&rig);
        if after[1].tx - before[1].tx >= 16 * MIB as u64 {
            break unix_ms() - up_at;
        }
        assert!(
            Instant::now() < deadline,
            "rail 1 carries no share of the stripes 8 s after its link came up: {before:?} {after:?}"
        );
    };
    carry(a, b, &[tagged(64 * MIB, 4), tagged(10, 4)]);
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        sa.rails[1][4] > 0 && sb.rails[1][4] > 0,
        "stripes on rail 1: {sa:?} {sb:?}"
    );
    println!(
        "rail 1 down {}: both inserts took {inserted:?}, messages flowed on rail 0 in {flowed:?}; \
         its link up, rail 1 was up again {up_a} ms (A) / {up_b} ms (B) after, and carried its \
         share of a striped message {joined} ms after",
        if before_open {
            "before the endpoints opened"
        } else {
            "before the inserts"
        }
    );
    for s in [&sa, &sb] {
        for k in ["unknown", "malformed", "beyond"] {
            assert_eq!(s.get(k), 0, "{k}: {s:?}");
        }
    }
    p.quit();
}

#[test]
fn a_rail_down_when_the_peers_connect_joins_when_its_link_comes_up() {
    if let Some(r) = role() {
        return child(&r);
    }
    a_rail_down_at_connect_joins_later(
        "a_rail_down_when_the_peers_connect_joins_when_its_link_comes_up",
        false,
    );
}

#[test]
fn a_rail_down_before_the_endpoints_open_joins_when_its_link_comes_up() {
    if let Some(r) = role() {
        return child(&r);
    }
    a_rail_down_at_connect_joins_later(
        "a_rail_down_before_the_endpoints_open_joins_when_its_link_comes_up",
        true,
    );
}
