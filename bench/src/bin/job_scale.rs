//! Jobs of 2 to 64 ranks on one host: what joining costs and what each
//! peer costs, against the number of ranks.
//!
//! ```sh
//! cargo build --release -p psmrail-bench --bin job_scale
//! target/release/job_scale --ranks 2,4,8,16,32,64                    # psm endpoints, hydra (PMI-1)
//! target/release/job_scale --ranks 2,8,32 --provider mrail           # mrail endpoints over two loopback rails
//! target/release/job_scale --ranks 2,8 --launcher mpirun             # Open MPI's mpirun (PMIx)
//! ```
//!
//! Without `--rank`, the program is the driver: for each size it starts
//! `mpiexec.hydra -n N` (or `mpirun.openmpi --oversubscribe -np N`) on
//! itself with `--rank`, and reads one `@@` line per rank. Each rank, with
//! auto progress (ranks outnumber cores; a waiting rank sleeps):
//!
//! 1. `Job::from_launcher`, then opens a fabric, domain, lazy-connecting
//!    address vector and endpoint (soft engine);
//! 2. `Job::join` (publish, fence, read and insert every rank's address),
//!    then a barrier: the **join** time is from before `from_launcher` to
//!    after that barrier, and the resident set size (RSS) is read there;
//! 3. sends one 8 B tagged message to every other rank and receives one
//!    from each (connecting every pair), then a barrier: the **all-to-all**
//!    time, and the RSS again. `(RSS after - RSS after join) / (N - 1)` is
//!    what one connected peer costs that process.
//!
//! The driver prints, per size, the median and largest join time over the
//! ranks, the median all-to-all time, the median RSS after the join and
//! after the all-to-all, and the median cost per peer; `--csv` writes the
//! same rows. `JOB_SCALE_TRACE=1` gives every rank a debug log on its
//! standard error (psmrail's `tracing` events), which the driver shows
//! when a job fails.

use clap::{Parser, ValueEnum};
use psmrail::bootstrap::Job;
use psmrail::config::{MrailConfig, ProcessEnv};
use psmrail::fabric::{
    AvAttr, AvType, Caps, EngineChoice, Fabric, FiAddr, Hints, ProgressKind, Provider,
};
use psmrail::mrail::MrailFabric;
use psmrail::ops::MessageEndpoint;
use psmrail::reactor::Reactor;
use psmrail_bench::stats::median_or_zero;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    Psm,
    Mrail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Launcher {
    /// MPICH's `mpiexec.hydra` (PMI-1).
    Hydra,
    /// Open MPI's `mpirun.openmpi` (PMIx).
    Mpirun,
}

/// Jobs of many ranks on one host: join time and memory per process and
/// per peer, against the number of ranks.
#[derive(Parser, Debug)]
struct Args {
    /// Job sizes to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
    ranks: Vec<usize>,
    /// The endpoints the ranks open.
    #[arg(long, value_enum, default_value = "psm")]
    provider: Which,
    /// The launcher that starts the ranks.
    #[arg(long, value_enum, default_value = "hydra")]
    launcher: Launcher,
    /// Write one row per job size here as CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<String>,
    /// One job's bound, launch to last rank's exit.
    #[arg(long, default_value = "300")]
    timeout_s: u64,
    /// Play one rank of a job (set by the driver).
    #[arg(long, hide = true)]
    rank: bool,
}

/// This process's resident set size, in KiB (`/proc/self/statm`).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page / 1024
}

/// Sends 8 B to every other rank and receives one message from each,
/// checking who sent it.
async fn all_to_all<E: MessageEndpoint>(
    ep: &E,
    ranks: &[FiAddr],
    rank: usize,
) -> Result<(), String> {
    const TAG: u64 = 0x5ca1e;
    let mut recvs = Vec::new();
    for _ in 1..ranks.len() {
        recvs.push(ep.trecv(vec![0u8; 8], TAG, 0));
    }
    let mut sends = Vec::new();
    for (to, addr) in ranks.iter().enumerate() {
        if to != rank {
            sends.push(ep.tsend(*addr, TAG, (rank as u64).to_le_bytes().to_vec()));
        }
    }
    for (r, _) in futures::future::join_all(sends).await {
        r.map_err(|e| format!("send: {e}"))?;
    }
    let mut heard = vec![false; ranks.len()];
    for (r, buf) in futures::future::join_all(recvs).await {
        let got = r.map_err(|e| format!("recv: {e}"))?;
        let from = u64::from_le_bytes(
            buf.as_slice()[..got.len]
                .try_into()
                .map_err(|_| "a message of 8 bytes".to_string())?,
        ) as usize;
        if from >= heard.len() || from == rank || std::mem::replace(&mut heard[from], true) {
            return Err(format!("a message from rank {from} that should not come"));
        }
    }
    Ok(())
}

/// What one rank measured.
struct Measured {
    join: Duration,
    all_to_all: Duration,
    rss_join: u64,
    rss_all: u64,
}

fn measure<E: MessageEndpoint>(
    job: &mut Job,
    started: Instant,
    reactor: &Reactor,
    ep: &E,
    ranks: &[FiAddr],
) -> Result<Measured, String> {
    let err = |e: psmrail::Error| e.to_string();
    job.barrier().map_err(err)?;
    let join = started.elapsed();
    let rss_join = rss_kib();
    let t = Instant::now();
    reactor.block_on(all_to_all(ep, ranks, job.rank()))?;
    job.barrier().map_err(err)?;
    Ok(Measured {
        join,
        all_to_all: t.elapsed(),
        rss_join,
        rss_all: rss_kib(),
    })
}

fn hints() -> Hints {
    Hints::new()
        .caps(Caps::TAGGED)
        .engine(EngineChoice::Soft)
        .progress(ProgressKind::Auto)
}

fn lazy_av() -> AvAttr {
    AvAttr::new().av_type(AvType::Table).lazy_connect(true)
}

fn rank_main(which: Which) -> Result<(), String> {
    let err = |e: psmrail::Error| e.to_string();
    let started = Instant::now();
    let mut job = Job::from_launcher(Duration::from_secs(120)).map_err(err)?;
    let m = match which {
        Which::Psm => {
            let info = psmrail::fabric::getinfo(Some(&hints()))
                .map_err(err)?
                .remove(0);
            let fabric = Fabric::open(&info).map_err(err)?;
            let domain = fabric.domain(&info).map_err(err)?;
            let av = domain.av(lazy_av()).map_err(err)?;
            let ep = domain.endpoint(&info).bind_av(&av).enable().map_err(err)?;
            let ranks = job.join(&av, &ep.getname()).map_err(err)?;
            measure(&mut job, started, domain.reactor(), &ep, &ranks)?
        }
        Which::Mrail => {
            let cfg = MrailConfig::builder_from_vars(&ProcessEnv)
                .map_err(|e| e.to_string())?
                .build();
            let hints = hints().provider(Provider::Mrail).mrail_config(cfg);
            let info = psmrail::fabric::getinfo(Some(&hints))
                .map_err(err)?
                .remove(0);
            let domain = MrailFabric::open(&info)
                .and_then(|f| f.domain(&info))
                .map_err(err)?;
            let av = domain.av(lazy_av()).map_err(err)?;
            let ep = domain.endpoint(&info).bind_av(&av).enable().map_err(err)?;
            let ranks = job.join(&av, &ep.getname()).map_err(err)?;
            measure(&mut job, started, domain.reactor(), &ep, &ranks)?
        }
    };
    println!(
        "@@ rank {} of {}: join_us {} alltoall_us {} rss_join_kib {} rss_all_kib {}",
        job.rank(),
        job.size(),
        m.join.as_micros(),
        m.all_to_all.as_micros(),
        m.rss_join,
        m.rss_all
    );
    Ok(())
}

/// One job's rows, parsed from its ranks' lines.
struct JobResult {
    ranks: usize,
    join_ms: Vec<f64>,
    all_ms: Vec<f64>,
    rss_join_mib: Vec<f64>,
    rss_all_mib: Vec<f64>,
    per_peer_kib: Vec<f64>,
    elapsed: Duration,
}

fn run_job(args: &Args, n: usize) -> Result<JobResult, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = match args.launcher {
        Launcher::Hydra => {
            let mut c = Command::new("mpiexec.hydra");
            c.args(["-n", &n.to_string()]);
            c
        }
        Launcher::Mpirun => {
            let mut c = Command::new("mpirun.openmpi");
            c.args(["--oversubscribe", "-np", &n.to_string()]);
            c
        }
    };
    cmd.arg(&me).arg("--rank");
    if args.provider == Which::Mrail {
        cmd.arg("--provider").arg("mrail");
        if std::env::var_os("FI_OFI_MRAIL_ADDR").is_none() {
            cmd.env("FI_OFI_MRAIL_ADDR", "127.0.0.1,127.0.0.1");
        }
    }
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the launcher: {e}"))?;
    // Drain both pipes while the ranks run, so that no rank blocks on a
    // full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let limit = Duration::from_secs(args.timeout_s);
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{n} ranks: not done after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{n} ranks: {status}\n{stdout}\n{stderr}"));
    }
    let mut r = JobResult {
        ranks: n,
        join_ms: Vec::new(),
        all_ms: Vec::new(),
        rss_join_mib: Vec::new(),
        rss_all_mib: Vec::new(),
        per_peer_kib: Vec::new(),
        elapsed: start.elapsed(),
    };
    for line in stdout.lines().filter_map(|l| l.strip_prefix("@@ rank ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| -> Result<f64, String> {
            let at = words
                .iter()
                .position(|w| *w == name)
                .ok_or_else(|| format!("no {name} in {line:?}"))?;
            words
                .get(at + 1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("bad {name} in {line:?}"))
        };
        let (join, all) = (field("join_us")?, field("alltoall_us")?);
        let (rj, ra) = (field("rss_join_kib")?, field("rss_all_kib")?);
        r.join_ms.push(join / 1e3);
        r.all_ms.push(all / 1e3);
        r.rss_join_mib.push(rj / 1024.0);
        r.rss_all_mib.push(ra / 1024.0);
        r.per_peer_kib.push((ra - rj) / (n.max(2) - 1) as f64);
    }
    if r.join_ms.len() != n {
        return Err(format!("{n} ranks: {} reported\n{stdout}", r.join_ms.len()));
    }
    Ok(r)
}

fn driver(args: &Args) -> Result<(), String> {
    println!(
        "job_scale: {:?} endpoints, {:?}, auto progress, soft engine, one host",
        args.provider, args.launcher
    );
    println!(
        "{:>6} {:>12} {:>12} {:>14} {:>14} {:>14} {:>13} {:>10}",
        "ranks",
        "join p50 ms",
        "join max ms",
        "all-to-all ms",
        "RSS join MiB",
        "RSS after MiB",
        "per peer KiB",
        "job s"
    );
    let mut csv = String::from(
        "provider,ranks,join_ms_median,join_ms_max,alltoall_ms_median,rss_join_mib,rss_all_mib,per_peer_kib,job_s\n",
    );
    for &n in &args.ranks {
        let r = run_job(args, n)?;
        let max = r.join_ms.iter().copied().fold(0.0, f64::max);
        let row = [
            median_or_zero(r.join_ms.clone()),
            max,
            median_or_zero(r.all_ms.clone()),
            median_or_zero(r.rss_join_mib.clone()),
            median_or_zero(r.rss_all_mib.clone()),
            median_or_zero(r.per_peer_kib.clone()),
            r.elapsed.as_secs_f64(),
        ];
        println!(
            "{:>6} {:>12.1} {:>12.1} {:>14.1} {:>14.1} {:>14.1} {:>13.1} {:>10.1}",
            r.ranks, row[0], row[1], row[2], row[3], row[4], row[5], row[6]
        );
        csv.push_str(&format!(
            "{:?},{},{:.3},{:.3},{:.3},{:.2},{:.2},{:.2},{:.2}\n",
            args.provider, r.ranks, row[0], row[1], row[2], row[3], row[4], row[5], row[6]
        ));
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, csv).map_err(|e| format!("{path}: {e}"))?;
        println!("wrote {path}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = if args.rank {
        if std::env::var_os("JOB_SCALE_TRACE").is_some() {
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_max_level(tracing::Level::DEBUG)
                .init();
        }
        rank_main(args.provider)
    } else {
        driver(&args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("job_scale: {e}");
            ExitCode::FAILURE
        }
    }
}
