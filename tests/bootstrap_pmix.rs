//! Bootstrap under Open MPI's real launcher: `mpirun.openmpi` (named
//! explicitly: MPICH installs an `mpirun` too) starts this test binary
//! as 2, 4 and 8 ranks with a PMIx server. Through `Job` (PMIx, via the
//! distribution's libpmix) each rank joins, sends every rank a tagged and
//! an untagged message on the soft engine with auto progress, checks the
//! bytes of each it got, all-gathers a blob and meets the others at a
//! barrier; through `PmixClient` itself, each reads every rank's
//! committed value, and a key nobody put is `FI_ENODATA` at once. A job
//! whose last rank leaves right after the join ends in bounded time: the
//! others' sends to it fail at once (nothing listens at its address), and
//! their barrier after it ends with `FI_ETIMEDOUT` at the job's timeout
//! (Open MPI's server still waits for the rank that left; it does not end
//! the job when a rank finalizes and exits with status 0).
//!
//! Needs `mpirun.openmpi` and libpmix2 (Debian: `apt-get install
//! openmpi-bin`); without them the test says so and passes, unless
//! `PSMRAIL_REQUIRE_LAUNCHERS=1` (as in CI). Runs as root only with
//! Open MPI's consent (`OMPI_ALLOW_RUN_AS_ROOT=1
//! OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`, which `--allow-run-as-root` gives).

mod support;

use psmrail::bootstrap::{Job, PmixClient, Protocol};
use std::time::Duration;
use support::launched::{self, assert_ranks, is_rank, open_mpi, run_ranks};
use support::spin_lock::spin_lock;

const MPIRUN: &str = "mpirun.openmpi";
const INSTALL: &str = "apt-get install openmpi-bin";

#[test]
fn a_job_joins_under_open_mpi_and_every_rank_talks_to_every_other() {
    if is_rank() {
        return launched::all_to_all_rank(Protocol::Pmix);
    }
    if !launched::present(MPIRUN, INSTALL) {
        return;
    }
    let _spin = spin_lock();
    for n in [2, 4, 8] {
        let (out, took) = run_ranks(
            open_mpi(n, &[]),
            "a_job_joins_under_open_mpi_and_every_rank_talks_to_every_other",
        );
        let lines = assert_ranks(&out, n, 0..n, &format!("talked to {n} ranks"));
        let joined = lines
            .lines()
            .filter(|l| l.contains("joined in"))
            .collect::<Vec<_>>();
        eprintln!("{n} ranks under {MPIRUN}: {took:?} in all; {joined:?}");
    }
}

/// What one rank does through the PMIx client itself: the job's facts,
/// put, commit, a collecting fence, every rank's value, and a key nobody
/// put, which is `FI_ENODATA` at once rather than a wait.
fn pmix_rank_main() {
    let mut pmix = PmixClient::from_env(Duration::from_secs(30))
        .expect("PMIX_RANK set by the launcher")
        .expect("PMIx_Init");
    let (rank, size) = (pmix.rank(), pmix.job_size().unwrap());
    assert_eq!(
        rank.to_string(),
        std::env::var("OMPI_COMM_WORLD_RANK").unwrap()
    );
    assert_eq!(
        size.to_string(),
        std::env::var("OMPI_COMM_WORLD_SIZE").unwrap()
    );
    assert_eq!(pmix.namespace(), std::env::var("PMIX_NAMESPACE").unwrap());
    assert!(pmix.local_rank().unwrap().is_some_and(|l| l < size));
    let value = |r: usize| format!("{:016x}", 0xfeed_0000_u64 + r as u64 * 7919);
    pmix.put("ep", &value(rank)).unwrap();
    pmix.commit().unwrap();
    pmix.fence(true).unwrap();
    for r in 0..size {
        assert_eq!(pmix.get(r, "ep").unwrap(), value(r), "rank {r}'s value");
    }
    let start = std::time::Instant::now();
    let e = pmix.get((rank + 1) % size, "nobody-put-this").unwrap_err();
    assert_eq!(e.kind(), psmrail::ErrorKind::NoData, "{e}");
    let missing = start.elapsed();
    pmix.fence(false).unwrap();
    println!(
        "rank {rank} of {size}: read {size} values (node {:?}, host {:?}, a missing key in {missing:?})",
        pmix.node_id().unwrap(),
        pmix.hostname().unwrap()
    );
    pmix.finalize().unwrap();
}

#[test]
fn every_rank_reads_every_value_committed_before_the_fence() {
    if is_rank() {
        return pmix_rank_main();
    }
    if !launched::present(MPIRUN, INSTALL) {
        return;
    }
    for n in [2, 4] {
        let (out, _) = run_ranks(
            open_mpi(n, &[]),
            "every_rank_reads_every_value_committed_before_the_fence",
        );
        let lines = assert_ranks(&out, n, 0..n, &format!("read {n} values"));
        eprintln!("{lines}");
    }
}

#[test]
fn a_rank_that_leaves_after_the_join_fails_the_others_in_bounded_time() {
    if is_rank() {
        return launched::lost_rank(Protocol::Pmix);
    }
    if !launched::present(MPIRUN, INSTALL) {
        return;
    }
    let _spin = spin_lock();
    let (out, took) = run_ranks(
        open_mpi(3, &[("FI_PSM_TIMEOUT", "2")]),
        "a_rank_that_leaves_after_the_join_fails_the_others_in_bounded_time",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "{MPIRUN} with a lost rank: {} in {took:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(took < Duration::from_secs(60), "the job took {took:?}");
    assert!(
        stdout.contains("rank 2 of 3: leaving after the join"),
        "{stdout}\n{stderr}"
    );
    assert_ranks(&out, 3, 0..2, "the lost rank failed in");
}

#[test]
fn a_pmix_rank_without_libpmix_is_told_what_is_missing() {
    if is_rank() {
        return;
    }
    if !launched::is_child() {
        return launched::run_child(
            "a_pmix_rank_without_libpmix_is_told_what_is_missing",
            &[
                ("PMIX_RANK", "0"),
                ("PSMRAIL_PMIX_LIB", "/nonexistent/libpmix.so.2"),
            ],
        );
    }
    let e = Job::from_launcher(Duration::from_secs(5)).unwrap_err();
    assert_eq!(e.kind(), psmrail::ErrorKind::NoData, "{e}");
    for named in ["libpmix2", "PSMRAIL_PMIX_LIB", "/nonexistent/libpmix.so.2"] {
        assert!(e.to_string().contains(named), "{e}");
    }
}

#[test]
fn without_a_pmix_server_there_is_no_pmix_job() {
    if is_rank() || launched::is_child() {
        return;
    }
    // Test processes are not started by a PMIx server.
    assert!(std::env::var_os("PMIX_RANK").is_none());
    assert!(PmixClient::from_env(Duration::from_secs(1)).is_none());
    let e = Job::from_launcher(Duration::from_secs(1)).unwrap_err();
    assert!(e.to_string().contains("PMIX_RANK"), "{e}");
}
