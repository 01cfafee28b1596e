//! psm_bench: an OSU-style benchmark of the psm provider beside its peers.
//!
//! ```sh
//! cargo run --release -p psmrail-bench --bin psm_bench -- --csv psm.csv --svg psm.svg
//! cargo run --release -p psmrail-bench --bin psm_bench -- --quick --variants soft-manual,tokio-tcp
//! ```
//!
//! Each variant (psm over the soft or native engine, manual or auto
//! progress; a hand-written tokio TCP ping-pong; fi_pingpong and
//! ucx_perftest when installed) runs the same jobs in a pair of processes
//! of its own — this program started again as `serve` and `client`,
//! pinned to two CPUs — and the client reports one row per job: latency
//! (half round trip, median / p90 / p99 from an HDR histogram), bandwidth
//! (windows of messages acknowledged by one byte, MB/s of the median
//! window) and message rate (the same with 8-byte messages). This process
//! prints the tables and writes the CSV, JSON and SVG files. The peer
//! processes, statistics, CSV writing and chart drawing are this crate's
//! library (`psmrail_bench`), shared with the other benchmark programs.

mod chart;
mod cli;
mod external;
mod jobs;
mod peers;
mod psm;
mod report;
mod tcp;

use clap::Parser;
use cli::{Cli, Command, RunArgs, Variant};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobs::{Counts, Job, Part};
use psmrail_bench::{csv, harness};
use report::Row;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::Serve(args)) => serve(args),
        Some(Command::Client(args)) => client(args),
        None => sweep(&cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("psm_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `psm_bench serve`: one variant's server.
fn serve(args: &cli::PeerArgs) -> Result<(), String> {
    peers::peer_setup(args)?;
    match args.variant {
        Variant::TokioTcp => tcp::serve(args),
        v if v.is_psm() => psm::serve(args),
        v => Err(format!("{} runs as a command of its own", v.name())),
    }
}

/// `psm_bench client`: one variant's client.
fn client(args: &cli::ClientArgs) -> Result<(), String> {
    peers::peer_setup(&args.peer)?;
    match args.peer.variant {
        Variant::TokioTcp => tcp::client(args),
        v if v.is_psm() => psm::client(args),
        v => Err(format!("{} runs as a command of its own", v.name())),
    }
}

/// How a variant runs in this sweep, or why it does not.
enum Plan {
    /// This program's own peers.
    Peers,
    /// An external command, found here.
    External(PathBuf),
    /// Not run, for this reason.
    Skipped(String),
}

fn plan_variant(v: Variant) -> Plan {
    if v.is_native() {
        return match psm::info(v) {
            Ok(_) => Plan::Peers,
            Err(e) => Plan::Skipped(format!("native engine not usable: {e}")),
        };
    }
    match external::command(v) {
        Some((cmd, package)) => match external::find(cmd) {
            Some(path) => Plan::External(path),
            None => Plan::Skipped(format!("{cmd} not installed (Debian package {package})")),
        },
        None => Plan::Peers,
    }
}

/// The rows a variant is expected to report.
fn expected_rows(v: Variant, jobs: &[Job]) -> u64 {
    match v {
        Variant::FiPingpong => jobs.iter().filter(|j| j.part == Part::Lat).count() as u64,
        _ => jobs.len() as u64,
    }
}

fn progress_bar(total: u64) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The default command: every variant's jobs, the tables, the files.
fn sweep(args: &RunArgs) -> Result<(), String> {
    let mut variants = args.variants.clone();
    variants.dedup();
    let counts = Counts::new(args.quick, args.iters.map(|n| n as usize));
    let jobs = jobs::plan(&args.parts, args.sizes.as_deref(), counts);
    if jobs.is_empty() {
        return Err("nothing to measure (--parts is empty)".to_owned());
    }
    let at = harness::Placement::of_this_machine();
    println!(
        "psm_bench: {} job(s) per variant{}; {}",
        jobs.len(),
        if args.quick { " (--quick)" } else { "" },
        at.describe()
    );
    if variants.iter().any(|v| !v.is_native() && v.is_psm()) {
        println!("psm soft: {}", psm::SOFT_TRANSPORT);
    }
    let plans: Vec<(Variant, Plan)> = variants.iter().map(|&v| (v, plan_variant(v))).collect();
    for (v, plan) in &plans {
        if let Plan::Skipped(why) = plan {
            println!("skipped: {}: {why}", v.name());
        }
    }
    let total = plans
        .iter()
        .filter(|(_, p)| !matches!(p, Plan::Skipped(_)))
        .map(|(v, _)| expected_rows(*v, &jobs))
        .sum();
    let bar = progress_bar(total);
    let mut rows: Vec<Row> = Vec::new();
    let mut failures = Vec::new();
    for (v, plan) in &plans {
        bar.set_message(v.name());
        let tick = |r: &Row| {
            bar.inc(1);
            bar.set_message(format!("{} {} {} B", r.variant, r.part, r.size_bytes));
        };
        let got = match plan {
            Plan::Skipped(_) => continue,
            Plan::Peers => peers::run_pair(*v, &jobs, at, tick),
            Plan::External(path) => external::run(*v, path, &jobs, at, tick),
        };
        match got {
            Ok(r) => rows.extend(r),
            Err(e) => {
                bar.suspend(|| eprintln!("psm_bench: {}: {e}", v.name()));
                failures.push(format!("{}: {e}", v.name()));
            }
        }
    }
    bar.finish_and_clear();
    let names: Vec<&str> = variants.iter().map(|v| v.name()).collect();
    print!("{}", report::tables(&rows, &names));
    if let Some(path) = &args.csv {
        csv::write(path, &report::csv(&rows))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.json {
        csv::write(path, &report::json(&rows)?)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        chart::write_svg(path, &rows, &names)?;
        println!("wrote {}", path.display());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} variant(s) failed: {}",
            failures.len(),
            failures.join("; ")
        ))
    }
}
