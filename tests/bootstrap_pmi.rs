//! Bootstrap under MPICH's real process manager: `mpiexec.hydra`
//! starts this test binary as 2, 4 and 8 ranks. Through the PMI-1 and
//! PMI-2 clients each rank puts a value, waits at the barrier (fence) and
//! reads every other rank's; through `Job`, over PMI-1 and over PMI-2
//! (`PSMRAIL_PMI_VERSION=2`), each joins, sends every rank, itself
//! included, a tagged and an untagged message on the soft engine with
//! auto progress, checks what every rank sent it, and all-gathers a blob.
//! A PMI-2 job whose last rank leaves right after the join fails the
//! others' sends to it at once, and ends: hydra no longer counts a rank
//! that finalized, so the barrier after it passes.
//!
//! Needs `mpiexec.hydra` (Debian: `apt-get install mpich`); without it the
//! test says so and passes, unless `PSMRAIL_REQUIRE_LAUNCHERS=1` (as in
//! CI), which makes a missing launcher a failure.

mod support;

use psmrail::bootstrap::{Job, Pmi2Client, PmiClient, Protocol};
use psmrail::prelude::*;
use std::time::Duration;
use support::launched::{self, assert_ranks, hydra, is_rank, run_ranks};
use support::spin_lock::spin_lock;

const HYDRA: &str = "mpiexec.hydra";
const INSTALL: &str = "apt-get install mpich";
const PMI2: (&str, &str) = ("PSMRAIL_PMI_VERSION", "2");

/// The value rank `r` puts.
fn value(r: usize) -> String {
    format!("{:016x}", 0x5eed_0000_0000_u64 + r as u64 * 7919)
}

/// What one rank does under the launcher: publish, barrier, read all.
fn rank_main() {
    let rank: usize = std::env::var("PMI_RANK").unwrap().parse().unwrap();
    let size: usize = std::env::var("PMI_SIZE").unwrap().parse().unwrap();
    let mut pmi = PmiClient::from_env(Duration::from_secs(30))
        .expect("PMI_FD set by the launcher")
        .expect("PMI-1 start-up");
    pmi.put(&format!("ep-{rank}"), &value(rank)).unwrap();
    pmi.barrier().unwrap();
    for r in 0..size {
        assert_eq!(
            pmi.get(&format!("ep-{r}")).unwrap(),
            value(r),
            "rank {r}'s value"
        );
    }
    let e = pmi.get("nobody-put-this").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
    pmi.barrier().unwrap();
    pmi.finalize().unwrap();
    println!("rank {rank} of {size}: read {size} values");
}

/// What one rank does over PMI-2: publish, fence, read all, and the
/// job's process mapping agrees with hydra's local rank variables.
fn pmi2_rank_main() {
    let mut pmi = Pmi2Client::from_env(Duration::from_secs(30))
        .expect("PMI_FD set by the launcher")
        .expect("PMI-2 start-up");
    let (rank, size) = (pmi.rank(), pmi.size());
    assert_eq!(rank.to_string(), std::env::var("PMI_RANK").unwrap());
    assert_eq!(size.to_string(), std::env::var("PMI_SIZE").unwrap());
    assert!(!pmi.jobid().is_empty());
    pmi.put(&format!("ep-{rank}"), &value(rank)).unwrap();
    pmi.fence().unwrap();
    for r in 0..size {
        assert_eq!(
            pmi.get(&format!("ep-{r}")).unwrap(),
            value(r),
            "rank {r}'s value"
        );
    }
    let e = pmi.get("nobody-put-this").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
    let local: Vec<usize> = ["MPI_LOCALRANKID", "MPI_LOCALNRANKS"]
        .iter()
        .map(|v| std::env::var(v).unwrap().parse().unwrap())
        .collect();
    assert_eq!(pmi.local_rank_and_size(), Some((local[0], local[1])));
    pmi.fence().unwrap();
    pmi.finalize().unwrap();
    println!("rank {rank} of {size}: read {size} values over PMI-2");
}

/// Runs this binary's test `name` under hydra as 2 and 4 ranks (or 2, 4
/// and 8), each rank printing `rank R of N: <done(N)>`.
fn under_hydra(name: &str, sizes: &[usize], env: &[(&str, &str)], done: impl Fn(usize) -> String) {
    if !launched::present(HYDRA, INSTALL) {
        return;
    }
    let _spin = spin_lock();
    for &n in sizes {
        let (out, took) = run_ranks(hydra(n, env), name);
        let lines = assert_ranks(&out, n, 0..n, &done(n));
        let joined: Vec<_> = lines.lines().filter(|l| l.contains("joined in")).collect();
        eprintln!("{n} ranks under {HYDRA} {env:?}: {took:?} in all; {joined:?}");
    }
}

#[test]
fn every_rank_reads_every_value_put_before_the_barrier() {
    if is_rank() {
        return rank_main();
    }
    under_hydra(
        "every_rank_reads_every_value_put_before_the_barrier",
        &[2, 4],
        &[],
        |n| format!("read {n} values"),
    );
}

#[test]
fn every_rank_reads_every_value_put_before_the_fence_over_pmi2() {
    if is_rank() {
        return pmi2_rank_main();
    }
    under_hydra(
        "every_rank_reads_every_value_put_before_the_fence_over_pmi2",
        &[2, 4],
        &[],
        |n| format!("read {n} values over PMI-2"),
    );
}

#[test]
fn a_job_joins_and_every_rank_talks_to_every_other() {
    if is_rank() {
        return launched::all_to_all_rank(Protocol::Pmi1);
    }
    under_hydra(
        "a_job_joins_and_every_rank_talks_to_every_other",
        &[2, 4, 8],
        &[],
        |n| format!("talked to {n} ranks"),
    );
}

#[test]
fn a_pmi2_job_joins_and_every_rank_talks_to_every_other() {
    if is_rank() {
        return launched::all_to_all_rank(Protocol::Pmi2);
    }
    under_hydra(
        "a_pmi2_job_joins_and_every_rank_talks_to_every_other",
        &[2, 4, 8],
        &[PMI2],
        |n| format!("talked to {n} ranks"),
    );
}

#[test]
fn a_rank_that_leaves_after_a_pmi2_join_fails_the_others_in_bounded_time() {
    if is_rank() {
        return launched::lost_rank(Protocol::Pmi2);
    }
    if !launched::present(HYDRA, INSTALL) {
        return;
    }
    let _spin = spin_lock();
    let (out, took) = run_ranks(
        hydra(3, &[PMI2, ("FI_PSM_TIMEOUT", "2")]),
        "a_rank_that_leaves_after_a_pmi2_join_fails_the_others_in_bounded_time",
    );
    assert!(took < Duration::from_secs(60), "the job took {took:?}");
    let stdout = assert_ranks(&out, 3, 0..2, "the lost rank failed in");
    assert!(
        stdout.contains("rank 2 of 3: leaving after the join"),
        "{stdout}"
    );
    eprintln!("{HYDRA} with a lost rank, in {took:?}:\n{stdout}");
}

#[test]
fn a_pmi_rank_without_a_socket_or_with_an_unknown_version_is_told_so() {
    if is_rank() {
        return;
    }
    let name = "a_pmi_rank_without_a_socket_or_with_an_unknown_version_is_told_so";
    if !launched::is_child() {
        launched::run_child(name, &[("PMI_RANK", "0"), ("PMI_SIZE", "1")]);
        return launched::run_child(name, &[("PMI_FD", "0"), (PMI2.0, "3")]);
    }
    let e = Job::from_launcher(Duration::from_secs(5)).unwrap_err();
    if std::env::var_os("PMI_FD").is_some() {
        assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
        assert!(e.to_string().contains("PSMRAIL_PMI_VERSION=\"3\""), "{e}");
    } else {
        assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
        assert!(e.to_string().contains("PMI_FD is not"), "{e}");
    }
}

#[test]
fn without_a_launcher_there_is_no_job() {
    if is_rank() || launched::is_child() {
        return;
    }
    let e = Job::from_launcher(Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert!(e.to_string().contains("no launcher"), "{e}");
}

#[test]
fn without_a_launcher_there_is_no_pmi_client() {
    if is_rank() || launched::is_child() {
        return;
    }
    // Test processes are not started by a process manager.
    assert!(std::env::var("PMI_FD").is_err());
    assert!(PmiClient::from_env(Duration::from_secs(1)).is_none());
    assert!(Pmi2Client::from_env(Duration::from_secs(1)).is_none());
}
