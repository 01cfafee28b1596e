//! One side of a measurement: an endpoint of either provider, the
//! out-of-band address exchange, and the jobs both sides run in the same
//! order. The client prints what it measured as `@@` lines (`@@ lat ...`,
//! `@@ bw ...`); in a stream job the server prints what it received every
//! [`TICK`] (`@@ tick ...`).
//!
//! The same generic code runs both providers
//! ([`MessageEndpoint`](psmrail::ops::MessageEndpoint)); `--provider psm`
//! opens a plain psm endpoint bound to the first rail's address, the
//! baseline an mrail endpoint is compared with.

use futures::FutureExt;
use psmrail::config::{MrailConfig, PsmConfig};
use psmrail::engine::soft::SoftConfig;
use psmrail::engine::OpBuffer;
use psmrail::fabric::Endpoint;
use psmrail::fabric::{
    getinfo, AvAttr, Caps, EngineChoice, Fabric, FiAddr, Hints, ProgressKind, Provider,
};
use psmrail::mrail::{MrailEndpoint, MrailFabric};
use psmrail::ops::MessageEndpoint;
use psmrail::reactor::Reactor;
use psmrail_bench::harness;
use psmrail_bench::stats::Summary;
use psmrail_bench::units::{parse_size, positive};
use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The tag of measured messages.
const TAG: u64 = 0x1234;
/// The tag of the server's answer to a window.
const ACK_TAG: u64 = 0x4321;
/// The tag of the first message, once both sides know each other.
const HELLO_TAG: u64 = 1;
/// The tag of the client's last message.
const BYE_TAG: u64 = 2;

/// How often the server of a stream job reports what it has received.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The most a side's buffers of one job may take (window times size).
pub(crate) const MAX_WINDOW_BYTES: usize = 1 << 30;

/// Which provider a side opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProviderKind {
    /// An mrail endpoint over every rail of `FI_OFI_MRAIL_ADDR`.
    Mrail,
    /// A plain psm endpoint on the first rail of `FI_OFI_MRAIL_ADDR`.
    Psm,
    /// Both, in one process: a latency job alternates between them in
    /// blocks, so that each mrail block is compared with the psm blocks
    /// around it, which ran in the same processes on the same CPUs.
    Both,
}

impl ProviderKind {
    /// The name `--provider` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ProviderKind::Mrail => "mrail",
            ProviderKind::Psm => "psm",
            ProviderKind::Both => "both",
        }
    }
}

/// `mrail_bench side`: one endpoint, the server, or the client with ADDR.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SideArgs {
    /// The provider.
    #[arg(long, value_enum, default_value_t = ProviderKind::Mrail)]
    pub provider: ProviderKind,
    /// `FI_OFI_MRAIL_CONFIG` for an mrail endpoint (default: the variable,
    /// else 16384:fixed,ULONG_MAX:striping).
    #[arg(long)]
    pub policy: Option<String>,
    /// What to measure, in order (the same list on both sides):
    /// `lat:SIZE:ITERS` (ping-pong, median half round trip),
    /// `bw:SIZE:WINDOW:ROUND_MS:REPS` (REPS streaming rounds of about
    /// ROUND_MS each, after one warm-up round), `stream:SIZE:WINDOW:SECS`
    /// (one round of SECS, the server reporting every 100 ms; with
    /// `:cold`, checked with a 1-byte message instead of one of SIZE, so
    /// that the stream is the endpoints' first striped traffic). Sizes
    /// take k and m suffixes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lat:8:10000,bw:4m:4:300:5"
    )]
    pub jobs: Vec<Job>,
    /// The progress thread instead of manual progress.
    #[arg(long)]
    pub auto_progress: bool,
    /// Pin this process to that CPU once its endpoint is open.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Exit when the process with this pid, this one's parent, does.
    #[arg(long, hide = true)]
    pub with_parent: Option<u32>,
    /// The server's address (client mode).
    pub addr: Option<String>,
}

/// One measurement both sides run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Job {
    /// A ping-pong of `size` bytes: a tenth of `iters` as warm-up, then
    /// `iters` round trips, each timed.
    Lat { size: usize, iters: usize },
    /// Streaming windows of `window` messages: one warm-up round, then
    /// `reps` rounds, each lasting about `round_ms` (the server ends it).
    Bw {
        size: usize,
        window: usize,
        round_ms: u64,
        reps: usize,
    },
    /// One streaming round of `secs` seconds; the server reports the
    /// bytes it has received every [`TICK`]. `cold`: nothing striped
    /// before it (the check is one byte).
    Stream {
        size: usize,
        window: usize,
        secs: f64,
        cold: bool,
    },
}

impl Job {
    fn size(&self) -> usize {
        match *self {
            Job::Lat { size, .. } | Job::Bw { size, .. } | Job::Stream { size, .. } => size,
        }
    }

    /// The size of the message each way that checks the pair first.
    fn check_size(&self) -> usize {
        match *self {
            Job::Stream { cold: true, .. } => 1,
            _ => self.size(),
        }
    }
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Job::Lat { size, iters } => write!(f, "lat:{size}:{iters}"),
            Job::Bw {
                size,
                window,
                round_ms,
                reps,
            } => write!(f, "bw:{size}:{window}:{round_ms}:{reps}"),
            Job::Stream {
                size,
                window,
                secs,
                cold,
            } => {
                write!(f, "stream:{size}:{window}:{secs}")?;
                if cold {
                    write!(f, ":cold")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Job {
    type Err = String;

    fn from_str(s: &str) -> Result<Job, String> {
        let f: Vec<&str> = s.split(':').collect();
        let count = |i: usize| positive(f[i]).map_err(|e| format!("job {s:?}: {e}"));
        let job = match (f[0], f.len()) {
            ("lat", 3) => Job::Lat {
                size: parse_size(f[1])?,
                iters: count(2)?,
            },
            ("bw", 5) => Job::Bw {
                size: parse_size(f[1])?,
                window: count(2)?,
                round_ms: count(3)? as u64,
                reps: count(4)?,
            },
            ("stream", 4 | 5) => Job::Stream {
                size: parse_size(f[1])?,
                window: count(2)?,
                secs: match f[3].parse::<f64>() {
                    Ok(x) if x > 0.0 && x.is_finite() => x,
                    _ => return Err(format!("job {s:?}: {:?} is not a duration", f[3])),
                },
                cold: match f.get(4) {
                    None => false,
                    Some(&"cold") => true,
                    Some(other) => return Err(format!("job {s:?}: {other:?} is not `cold`")),
                },
            },
            _ => {
                return Err(format!(
                    "job {s:?}: expected lat:SIZE:ITERS, bw:SIZE:WINDOW:ROUND_MS:REPS \
                     or stream:SIZE:WINDOW:SECS[:cold]"
                ))
            }
        };
        match job {
            Job::Bw { size: 0, .. } | Job::Stream { size: 0, .. } => Err(format!(
                "job {s:?}: streaming needs messages of 1 byte or more"
            )),
            Job::Bw { size, window, .. } | Job::Stream { size, window, .. }
                if size.saturating_mul(window) > MAX_WINDOW_BYTES =>
            {
                Err(format!(
                    "job {s:?}: a window of {window} x {size} bytes is more than 1 GiB"
                ))
            }
            job => Ok(job),
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// Inserts a peer's address (text form) in a side's address vector.
type Insert = Box<dyn Fn(&str) -> Result<FiAddr, String>>;

/// An opened endpoint of either provider, with what the generic code
/// needs (fields drop in order: the endpoint before its domain).
struct Side<E> {
    ep: E,
    reactor: Reactor,
    name: String,
    insert: Insert,
    _keep: Box<dyn std::any::Any>,
}

fn psm_config() -> Result<PsmConfig, String> {
    PsmConfig::builder_from_vars(&psmrail::config::ProcessEnv)
        .map_err(|e| e.to_string())?
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .map_err(|e| e.to_string())
}

fn progress(args: &SideArgs) -> ProgressKind {
    if args.auto_progress {
        ProgressKind::Auto
    } else {
        ProgressKind::Manual
    }
}

/// The [`Side`] of an endpoint of `domain` (either provider's), bound to
/// a new address vector; `keep` (and the vector) live as long as it.
macro_rules! side_of {
    ($domain:ident, $info:ident, $($keep:ident),+) => {{
        let av = $domain.av(AvAttr::new()).map_err(|e| e.to_string())?;
        let ep = $domain
            .endpoint(&$info)
            .bind_av(&av)
            .enable()
            .map_err(|e| format!("endpoint: {e}"))?;
        let name = ep.getname().to_string();
        let inserts = av.clone();
        Ok(Side {
            ep,
            reactor: $domain.reactor().clone(),
            name,
            insert: Box::new(move |a| inserts.insert_str(a).map_err(|e| e.to_string())),
            _keep: Box::new(($($keep,)+ av)),
        })
    }};
}

fn open_mrail(args: &SideArgs) -> Result<Side<MrailEndpoint>, String> {
    let mut cfg =
        MrailConfig::builder_from_vars(&psmrail::config::ProcessEnv).map_err(|e| e.to_string())?;
    if let Some(p) = &args.policy {
        cfg = cfg.policy_table(p.parse().map_err(|e| format!("--policy: {e}"))?);
    }
    let hints = Hints::new()
        .provider(Provider::Mrail)
        .engine(EngineChoice::Soft)
        .caps(Caps::TAGGED)
        .progress(progress(args))
        .config(psm_config()?)
        .mrail_config(cfg.build());
    let info = getinfo(Some(&hints))
        .map_err(|e| format!("getinfo: {e}"))?
        .remove(0);
    let domain = MrailFabric::open(&info)
        .and_then(|f| f.domain(&info))
        .map_err(|e| format!("domain: {e}"))?;
    side_of!(domain, info, domain)
}

fn open_psm(args: &SideArgs) -> Result<Side<Endpoint>, String> {
    // One plain endpoint, bound to the first rail's address, over TCP.
    let rails = MrailConfig::from_env().map_err(|e| e.to_string())?;
    let first = rails
        .rails()
        .first()
        .ok_or("FI_OFI_MRAIL_ADDR names no rail")?;
    let ip = psmrail::mrail::resolve::resolve_rail(first)
        .map_err(|e| e.to_string())?
        .ip;
    let soft = SoftConfig {
        bind: ip,
        unix_sockets: false,
        dial_from_bind: true,
        ..SoftConfig::default()
    };
    let hints = Hints::new()
        .engine(EngineChoice::Soft)
        .caps(Caps::TAGGED)
        .progress(progress(args))
        .config(psm_config()?)
        .soft_config(soft);
    let info = getinfo(Some(&hints))
        .map_err(|e| format!("getinfo: {e}"))?
        .remove(0);
    let fabric = Fabric::open(&info).map_err(|e| e.to_string())?;
    let domain = fabric.domain(&info).map_err(|e| format!("domain: {e}"))?;
    side_of!(domain, info, fabric, domain)
}

/// Sends `buf` (injected when it fits), handing it back.
async fn send<E: MessageEndpoint>(
    ep: &E,
    to: FiAddr,
    tag: u64,
    buf: OpBuffer,
) -> Result<OpBuffer, String> {
    if buf.len() <= ep.inject_size() {
        ep.tinject(to, tag, buf.as_slice())
            .map_err(|e| format!("inject: {e}"))?;
        return Ok(buf);
    }
    let (r, buf) = ep.tsend(to, tag, buf).await;
    r.map_err(|e| format!("send: {e}"))?;
    Ok(buf)
}

async fn recv<E: MessageEndpoint>(
    ep: &E,
    tag: u64,
    buf: OpBuffer,
) -> Result<(usize, OpBuffer), String> {
    let (r, buf) = ep.trecv(buf, tag, 0).await;
    Ok((r.map_err(|e| format!("recv: {e}"))?.len, buf))
}

/// One message each way, checked byte for byte (outside the timed loops).
async fn check<E: MessageEndpoint>(
    ep: &E,
    peer: FiAddr,
    client: bool,
    size: usize,
) -> Result<(), String> {
    if client {
        send(ep, peer, TAG, pattern(size, 1).into()).await?;
        let (n, back) = recv(ep, TAG, vec![0u8; size].into()).await?;
        if n != size || back.as_slice() != pattern(size, 2).as_slice() {
            return Err(format!(
                "{size} B: the answer differs from the server's pattern"
            ));
        }
    } else {
        let (n, got) = recv(ep, TAG, vec![0u8; size].into()).await?;
        if n != size || got.as_slice() != pattern(size, 1).as_slice() {
            return Err(format!(
                "{size} B: the message differs from the client's pattern"
            ));
        }
        send(ep, peer, TAG, pattern(size, 2).into()).await?;
    }
    Ok(())
}

/// `n` round trips of `size` bytes; the client's time of each.
async fn pingpong<E: MessageEndpoint>(
    ep: &E,
    peer: FiAddr,
    client: bool,
    size: usize,
    n: usize,
) -> Result<Vec<Duration>, String> {
    let mut times = Vec::with_capacity(if client { n } else { 0 });
    let mut out: OpBuffer = vec![0u8; size].into();
    let mut inn: OpBuffer = vec![0u8; size].into();
    for _ in 0..n {
        if client {
            let start = Instant::now();
            let r = ep.trecv(inn, TAG, 0);
            out = send(ep, peer, TAG, out).await?;
            let (got, b) = r.await;
            got.map_err(|e| format!("recv: {e}"))?;
            inn = b;
            times.push(start.elapsed());
        } else {
            let (_, b) = recv(ep, TAG, inn).await?;
            inn = b;
            out = send(ep, peer, TAG, out).await?;
        }
    }
    Ok(times)
}

/// One streaming round: the client sends windows of `bufs.len()`
/// messages; the server answers each window with one byte, 1 for another
/// window, 0 once `length` has passed since the round began. The server
/// adds each message's bytes to `received` as it lands. The bytes sent
/// and the time from the first send to the last answer (the client's).
async fn round<E: MessageEndpoint>(
    ep: &E,
    peer: FiAddr,
    client: bool,
    bufs: &mut Vec<OpBuffer>,
    length: Duration,
    received: Option<&AtomicU64>,
) -> Result<(u64, Duration), String> {
    let start = Instant::now();
    let mut bytes = 0u64;
    loop {
        if client {
            let futs: Vec<_> = bufs.drain(..).map(|b| ep.tsend(peer, TAG, b)).collect();
            for (r, b) in futures::future::join_all(futs).await {
                r.map_err(|e| format!("send: {e}"))?;
                bytes += b.len() as u64;
                bufs.push(b);
            }
            let (_, more) = recv(ep, ACK_TAG, vec![0u8; 1].into()).await?;
            if more.as_slice() == [0u8].as_slice() {
                return Ok((bytes, start.elapsed()));
            }
        } else {
            let futs: Vec<_> = bufs
                .drain(..)
                .map(|b| {
                    ep.trecv(b, TAG, 0).map(|(r, b)| {
                        if let (Ok(got), Some(n)) = (&r, received) {
                            n.fetch_add(got.len as u64, Ordering::Relaxed);
                        }
                        (r, b)
                    })
                })
                .collect();
            for (r, b) in futures::future::join_all(futs).await {
                r.map_err(|e| format!("recv: {e}"))?;
                bufs.push(b);
            }
            let more = start.elapsed() < length;
            send(ep, peer, ACK_TAG, vec![u8::from(more)].into()).await?;
            if !more {
                return Ok((bytes, start.elapsed()));
            }
        }
    }
}

/// Prints `@@ tick ms=<since start> bytes=<received so far>
/// rx.<interface>=<its received bytes> ...` now and every [`TICK`] until
/// dropped (every interface of this host but `lo`: in a rig, the rails).
struct Ticker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(received: Arc<AtomicU64>) -> Ticker {
        let (stop, stopped) = mpsc::channel::<()>();
        let start = Instant::now();
        let thread = std::thread::spawn(move || {
            for k in 0u32.. {
                let at = start + TICK * k;
                let wait = at.saturating_duration_since(Instant::now());
                if k > 0 && stopped.recv_timeout(wait) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return;
                }
                let ms = start.elapsed().as_millis();
                let bytes = received.load(Ordering::Relaxed);
                let rx: String = rx_counters()
                    .iter()
                    .map(|(name, n)| format!(" rx.{name}={n}"))
                    .collect();
                println!("@@ tick ms={ms} bytes={bytes}{rx}");
            }
        });
        Ticker {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// The bytes each network interface but `lo` has received, by name.
fn rx_counters() -> Vec<(String, u64)> {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    let mut all: Vec<(String, u64)> = dir
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let path = format!("/sys/class/net/{name}/statistics/rx_bytes");
            let n = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
            (name != "lo").then_some((name, n))
        })
        .collect();
    all.sort();
    all
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn buffers(window: usize, size: usize) -> Vec<OpBuffer> {
    (0..window).map(|_| vec![0u8; size].into()).collect()
}

async fn run_job<E: MessageEndpoint>(
    ep: &E,
    peer: FiAddr,
    client: bool,
    job: Job,
) -> Result<(), String> {
    check(ep, peer, client, job.check_size()).await?;
    match job {
        Job::Lat { size, iters } => {
            pingpong(ep, peer, client, size, iters / 10 + 1).await?;
            let times = pingpong(ep, peer, client, size, iters).await?;
            if client {
                let rtt = Summary::of(&times)?.median_ns;
                println!(
                    "@@ lat size={size} iters={iters} half_rtt_ns={:.0}",
                    rtt / 2.0
                );
            }
        }
        Job::Bw {
            size,
            window,
            round_ms,
            reps,
        } => {
            let mut bufs = buffers(window, size);
            let length = Duration::from_millis(round_ms);
            round(ep, peer, client, &mut bufs, length, None).await?;
            for _ in 0..reps {
                let (bytes, took) = round(ep, peer, client, &mut bufs, length, None).await?;
                if client {
                    println!(
                        "@@ bw size={size} window={window} bytes={bytes} secs={:.6}",
                        took.as_secs_f64()
                    );
                }
            }
        }
        Job::Stream {
            size, window, secs, ..
        } => {
            let mut bufs = buffers(window, size);
            let received = Arc::new(AtomicU64::new(0));
            let ticker = (!client).then(|| {
                println!("@@ start");
                Ticker::start(Arc::clone(&received))
            });
            let length = Duration::from_secs_f64(secs);
            let (bytes, took) = round(ep, peer, client, &mut bufs, length, Some(&received)).await?;
            drop(ticker);
            if client {
                println!("@@ stream bytes={bytes} secs={:.6}", took.as_secs_f64());
            }
        }
    }
    Ok(())
}

/// Pins this process as `--cpu` asks.
fn pin(args: &SideArgs) -> Result<(), String> {
    args.cpu.map_or(Ok(()), harness::pin)
}

/// Prints this side's address and returns the peer's. Addresses travel
/// out of band (an mrail endpoint drops messages of peers it has not
/// inserted): the client gets the server's on its command line, the
/// server reads the client's from its standard input.
fn exchange(args: &SideArgs, mine: &str) -> Result<String, String> {
    println!("@@ addr {mine}");
    std::io::stdout().flush().ok();
    match &args.addr {
        Some(a) => Ok(a.clone()),
        None => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| format!("reading the client's address: {e}"))?;
            Ok(line.trim().trim_start_matches("@@ addr ").to_owned())
        }
    }
}

fn run<E: MessageEndpoint>(args: &SideArgs, side: Side<E>) -> Result<(), String> {
    let client = args.addr.is_some();
    pin(args)?;
    let peer = (side.insert)(&exchange(args, &side.name)?)?;
    // Both sides are in each other's address vectors once this returns.
    hello(&side, peer, client)?;
    for job in &args.jobs {
        side.reactor
            .block_on(run_job(&side.ep, peer, client, *job))?;
    }
    bye(&side, peer, client)
}

/// Block pairs of an interleaved latency job (`--provider both`).
pub(crate) const BLOCK_PAIRS: usize = 10;

/// The median half round trip of `n` timed round trips (after a tenth as
/// warm-up) on one side's endpoint, ns (0 on the server).
fn lat_block<E: MessageEndpoint>(
    side: &Side<E>,
    peer: FiAddr,
    client: bool,
    size: usize,
    n: usize,
) -> Result<f64, String> {
    side.reactor
        .block_on(pingpong(&side.ep, peer, client, size, n / 10 + 1))?;
    let times = side
        .reactor
        .block_on(pingpong(&side.ep, peer, client, size, n))?;
    Ok(Summary::of(&times)?.median_ns / 2.0)
}

/// `--provider both`: an mrail and a psm endpoint in this process. The
/// address is the two addresses joined by `|`; latency jobs alternate
/// psm and mrail blocks of `iters / 10` round trips, and the client
/// prints one `@@ latpair` line per pair of blocks.
fn run_both(
    args: &SideArgs,
    mrail: Side<MrailEndpoint>,
    psm: Side<Endpoint>,
) -> Result<(), String> {
    let client = args.addr.is_some();
    pin(args)?;
    let text = exchange(args, &format!("{}|{}", mrail.name, psm.name))?;
    let (m, p) = text
        .split_once('|')
        .ok_or_else(|| format!("{text:?}: expected MRAIL_ADDR|PSM_ADDR"))?;
    let (mpeer, ppeer) = ((mrail.insert)(m)?, (psm.insert)(p)?);
    // With manual progress an endpoint moves only while this process waits
    // on it: each one's first exchange is a whole round trip before the
    // other's begins, and each block ends with a message its receiver
    // waited for, so nothing is left queued when the other endpoint's
    // turn comes.
    for job in &args.jobs {
        let Job::Lat { size, iters } = *job else {
            return Err(format!("--provider both runs latency jobs only, not {job}"));
        };
        hello(&mrail, mpeer, client)?;
        mrail
            .reactor
            .block_on(check(&mrail.ep, mpeer, client, size))?;
        hello(&psm, ppeer, client)?;
        psm.reactor.block_on(check(&psm.ep, ppeer, client, size))?;
        let n = (iters / BLOCK_PAIRS).max(1);
        for _ in 0..BLOCK_PAIRS {
            let p = lat_block(&psm, ppeer, client, size, n)?;
            let m = lat_block(&mrail, mpeer, client, size, n)?;
            if client {
                println!("@@ latpair size={size} iters={n} psm_ns={p:.0} mrail_ns={m:.0}");
            }
        }
    }
    bye(&mrail, mpeer, client)?;
    bye(&psm, ppeer, client)
}

/// The first message, once both sides know each other.
fn hello<E: MessageEndpoint>(side: &Side<E>, peer: FiAddr, client: bool) -> Result<(), String> {
    if client {
        side.reactor
            .block_on(send(&side.ep, peer, HELLO_TAG, vec![1u8].into()))?;
    } else {
        side.reactor
            .block_on(recv(&side.ep, HELLO_TAG, vec![0u8; 1].into()))?;
    }
    Ok(())
}

/// The last message: the client says bye once it has every answer, and
/// the server waits for it, since a message sent just before its endpoint
/// closes may never leave (a striped one waits for its receiver's answer
/// first). The bye may be cut off that way itself, so the server takes the
/// receive's failure (the client is gone) as the end too.
fn bye<E: MessageEndpoint>(side: &Side<E>, peer: FiAddr, client: bool) -> Result<(), String> {
    if client {
        side.reactor
            .block_on(send(&side.ep, peer, BYE_TAG, vec![1u8].into()))?;
    } else {
        let _ = side
            .reactor
            .block_on(recv(&side.ep, BYE_TAG, vec![0u8; 1].into()));
    }
    Ok(())
}

/// `mrail_bench side`.
pub(crate) fn main(args: &SideArgs) -> Result<(), String> {
    if let Some(pid) = args.with_parent {
        harness::die_with_parent(pid)?;
    }
    match args.provider {
        ProviderKind::Mrail => run(args, open_mrail(args)?),
        ProviderKind::Psm => run(args, open_psm(args)?),
        ProviderKind::Both => run_both(args, open_mrail(args)?, open_psm(args)?),
    }
}
