//! psm_bench's pair of peer processes: the sweep process starts the
//! server (`psm_bench serve ...`), reads its `@@ addr` line, starts the
//! client (`psm_bench client --addr ...`), hands the client's address to
//! the server's standard input, then collects the client's `@@ row` lines
//! (JSON [`Row`]s) until `@@ done`. Both peers die with the sweep process.

use crate::cli::{PeerArgs, Variant};
use crate::jobs::Job;
use crate::report::Row;
use psmrail_bench::harness::{self, PeerProcess, Placement};
use std::time::Duration;

/// What a peer does first: die with the sweep process, if told.
pub(crate) fn peer_setup(args: &PeerArgs) -> Result<(), String> {
    if let Some(pid) = args.with_parent {
        harness::die_with_parent(pid)?;
    }
    Ok(())
}

/// Pins a peer as `--cpu` says.
pub(crate) fn peer_pin(args: &PeerArgs) -> Result<(), String> {
    match args.cpu {
        Some(cpu) => harness::pin(cpu),
        None => Ok(()),
    }
}

/// A peer announces its address.
pub(crate) fn announce_addr(addr: &str) -> Result<(), String> {
    harness::say(&format!("addr {addr}"))
}

/// A client reports one measurement.
pub(crate) fn announce_row(row: &Row) -> Result<(), String> {
    let json = serde_json::to_string(row).map_err(|e| format!("JSON: {e}"))?;
    harness::say(&format!("row {json}"))
}

/// A client reports that every job ran.
pub(crate) fn announce_done() -> Result<(), String> {
    harness::say("done")
}

/// The arguments of a peer of `variant` running `jobs` on `cpu`.
fn peer_args(sub: &str, variant: Variant, jobs: &[Job], cpu: usize) -> Vec<String> {
    let jobs: Vec<String> = jobs.iter().map(Job::to_string).collect();
    vec![
        sub.to_owned(),
        "--variant".to_owned(),
        variant.name().to_owned(),
        "--jobs".to_owned(),
        jobs.join(","),
        "--cpu".to_owned(),
        cpu.to_string(),
        "--with-parent".to_owned(),
        std::process::id().to_string(),
    ]
}

/// Runs `jobs` of `variant` in a new pair of peer processes, handing each
/// row to `on_row` as it arrives; the rows, in job order.
pub(crate) fn run_pair(
    variant: Variant,
    jobs: &[Job],
    at: Placement,
    mut on_row: impl FnMut(&Row),
) -> Result<Vec<Row>, String> {
    let mut server = PeerProcess::start("server", &peer_args("serve", variant, jobs, at.server))?;
    let server_addr = server.addr()?;
    let mut args = peer_args("client", variant, jobs, at.client);
    args.extend(["--addr".to_owned(), server_addr]);
    let mut client = PeerProcess::start("client", &args)?;
    let client_addr = client.addr()?;
    server.tell(&client_addr)?;
    let mut rows = Vec::with_capacity(jobs.len());
    loop {
        let line = client.next_line()?;
        if line == "done" {
            break;
        }
        let json = line
            .strip_prefix("row ")
            .ok_or_else(|| format!("the client said {line:?}, expected a row"))?;
        let row: Row =
            serde_json::from_str(json).map_err(|e| format!("the client's row {json:?}: {e}"))?;
        on_row(&row);
        rows.push(row);
    }
    // The server exits once it has the client's bye; then the client is
    // released (its input closed) and exits too.
    server.finish(Duration::from_secs(10))?;
    client.finish(Duration::from_secs(10))?;
    Ok(rows)
}
