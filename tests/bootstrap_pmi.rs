//! The PMI-1 client under MPICH's real process manager: `mpiexec.hydra`
//! starts this test binary as 2 and 4 ranks, each of which puts a value,
//! waits at the barrier and reads every other rank's value.
//!
//! Needs `mpiexec.hydra` (Debian: `apt-get install mpich`); without it the
//! test says so and passes, unless `PSMRAIL_REQUIRE_LAUNCHERS=1` (as in
//! CI), which makes a missing launcher a failure.

use psmrail::bootstrap::PmiClient;
use psmrail::ErrorKind;
use std::process::Command;
use std::time::Duration;

const HYDRA: &str = "mpiexec.hydra";
const ROLE: &str = "PSMRAIL_TEST_PMI_RANK";

/// What one rank does under the launcher: publish, barrier, read all.
fn rank_main() {
    let rank: usize = std::env::var("PMI_RANK").unwrap().parse().unwrap();
    let size: usize = std::env::var("PMI_SIZE").unwrap().parse().unwrap();
    let mut pmi = PmiClient::from_env(Duration::from_secs(30))
        .expect("PMI_FD set by the launcher")
        .expect("PMI-1 start-up");
    let value = |r: usize| format!("{:016x}", 0x5eed_0000_0000_u64 + r as u64 * 7919);
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

fn hydra_present() -> bool {
    let found = Command::new(HYDRA)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("PSMRAIL_REQUIRE_LAUNCHERS").as_deref() != Ok("1"),
            "{HYDRA} is missing and PSMRAIL_REQUIRE_LAUNCHERS=1 (apt-get install mpich)"
        );
        eprintln!("skipped: {HYDRA} is not installed (apt-get install mpich)");
    }
    found
}

#[test]
fn every_rank_reads_every_value_put_before_the_barrier() {
    if std::env::var(ROLE).is_ok() {
        return rank_main();
    }
    if !hydra_present() {
        return;
    }
    let me = std::env::current_exe().unwrap();
    for n in [2usize, 4] {
        let out = Command::new(HYDRA)
            .args(["-n", &n.to_string(), "-genv", ROLE, "1"])
            .arg(&me)
            .args([
                "--exact",
                "every_rank_reads_every_value_put_before_the_barrier",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_remove("PMI_FD")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{n} ranks: {}\n{stdout}\n{stderr}",
            out.status
        );
        for r in 0..n {
            let line = format!("rank {r} of {n}: read {n} values");
            assert!(
                stdout.contains(&line),
                "{n} ranks, no {line:?}:\n{stdout}\n{stderr}"
            );
        }
    }
}

#[test]
fn without_a_launcher_there_is_no_pmi_client() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    // Test processes are not started by a process manager.
    assert!(std::env::var("PMI_FD").is_err());
    assert!(PmiClient::from_env(Duration::from_secs(1)).is_none());
}
