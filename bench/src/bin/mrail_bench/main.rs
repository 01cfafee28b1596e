//! The multi-rail benchmark: bandwidth, latency and throughput over time
//! of mrail endpoints between two processes, each in its own network
//! namespace, joined by veth rails shaped with `tc` (run as root; the
//! rails use 198.18.0.0/15, see tests/support/rig.rs).
//!
//! ```text
//! # Everything in one run: rigs of 1, 2 and 4 rails at 1 Gbit/s, bandwidth
//! # from 4 KiB to 64 MiB per policy, 8 B latency against a psm endpoint,
//! # 1000 + 2500 Mbit/s rails with equal and weighted parts, iperf3 on each.
//! cargo run --release -p psmrail-bench --bin mrail_bench -- sweep --csv mrail.csv --svg mrail.svg
//! cargo run --release -p psmrail-bench --bin mrail_bench -- sweep --quick          # smoke test, < 2 min
//! cargo run --release -p psmrail-bench --bin mrail_bench -- sweep --parts lat --rails 2 --lat-rounds 11
//! cargo run --release -p psmrail-bench --bin mrail_bench -- sweep --parts unequal --sizes 4m,16m
//! cargo run --release -p psmrail-bench --bin mrail_bench -- sweep --parts bw --rails 2 --policies striping --sizes 1m,4m
//!
//! # A striped stream over 2 rails for 10 s, its throughput per 100 ms,
//! # rail 1 down from 3 s to 6 s:
//! cargo run --release -p psmrail-bench --bin mrail_bench -- timeline --secs 10 \
//!     --down-at 3 --up-at 6 --down-rail 1 --csv timeline.csv --svg timeline.svg
//!
//! # One side on each of your own hosts (FI_OFI_MRAIL_ADDR names the
//! # host's rails); the client prints `@@` lines of what it measured:
//! FI_OFI_MRAIL_ADDR=eth1,eth2 cargo run --release -p psmrail-bench --bin mrail_bench -- side             # server
//! FI_OFI_MRAIL_ADDR=eth1,eth2 cargo run --release -p psmrail-bench --bin mrail_bench -- side SERVER_ADDR # client
//! ```
//!
//! Each measurement starts a server in host B and a client in host A
//! (pinned to CPUs 1 and 0), both this program's `side`, running the same
//! list of jobs; their addresses are exchanged through this process.
//!
//! - Bandwidth: the client streams windows of messages (16 MiB worth, 4 to
//!   64 messages); the server answers each window once all of it has
//!   landed, and ends a round once it has lasted `--round-ms`. After a
//!   warm-up round, the Mbit/s of `--reps` rounds (bytes over the time to
//!   the last answer); the table shows their median and its fraction of
//!   iperf3's sum over the same rails, with `!` where striping should
//!   reach line rate (1 MiB and more) and has less than 0.9 of it.
//! - Latency: a ping-pong, each round trip timed; a run's figure is the
//!   median half round trip. Each round runs a psm endpoint on rail 0 and
//!   then every policy, each in new processes, and the ratio to psm is
//!   the median of the rounds' ratios. Then each policy against psm in
//!   one pair of processes (`side --provider both`), in alternating
//!   blocks; that ratio is the median of the block pairs' ratios.
//! - Unequal rails: striping with equal parts (`PSMRAIL_MRAIL_RATES` all
//!   the same), weighted by the configured rates, and weighted by learned
//!   rates (the default).
//! - iperf3: one TCP stream per rail, all at once, on every rig first.
//! - Timeline: the server reports what it has received every 100 ms; the
//!   rail changes run from this process at their times. A stream that has
//!   not finished `--timeout` seconds after its planned end is reported as
//!   stalled, both sides are stopped, and the exit status is 3.
//!
//! Every policy is `ULONG_MAX:<policy>` (all sizes), given to both sides
//! explicitly, as are the rates: the environment's `FI_OFI_MRAIL_CONFIG`
//! and `PSMRAIL_MRAIL_RATES` do not reach them. On Ctrl-C (or SIGTERM)
//! the sides are killed and the namespaces removed; the sides die with
//! this process whatever kills it.
//!
//! Medians, CSV files, charts, sizes, pinning and dying with the parent
//! come from this crate's library (`psmrail_bench`), as in psm_bench.

#[path = "../../../../tests/support/rig.rs"]
#[allow(dead_code)]
mod rig;

mod pair;
mod side;
mod sweep;
mod timeline;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(about = "Multi-rail benchmark: bandwidth, latency and timelines in a veth rig")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Bandwidth per policy on 1, 2 and 4 rails, 8 B latency against psm,
    /// unequal rails, iperf3 references: one run, one table.
    Sweep(sweep::SweepArgs),
    /// Throughput per 100 ms of a striped stream, optionally taking a rail
    /// down and up on the way.
    Timeline(timeline::TimelineArgs),
    /// One endpoint: the server, or the client with the server's address
    /// (what the rig runs in each namespace).
    Side(side::SideArgs),
}

/// What `sweep` and `timeline` share.
#[derive(clap::Args, Clone, Debug)]
struct Common {
    /// Writes the figures as CSV (timeline: time_s, the end of each
    /// 100 ms interval since the stream started, and mbit_s received).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Writes the charts as SVG.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Both sides use the progress thread instead of manual progress.
    #[arg(long)]
    auto_progress: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Side(a) => side::main(a).map(|()| ExitCode::SUCCESS),
        Cmd::Sweep(a) => pair::install_cleanup().and_then(|()| sweep::main(a)),
        Cmd::Timeline(a) => pair::install_cleanup().and_then(|()| timeline::main(a)),
    };
    r.unwrap_or_else(|e| {
        eprintln!("mrail_bench: {e}");
        ExitCode::FAILURE
    })
}
