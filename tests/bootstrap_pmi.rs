//! Bootstrap under MPICH's real process manager: `mpiexec.hydra`
//! starts this test binary as 2, 4 and 8 ranks. Through the PMI-1 client
//! each rank puts a value, waits at the barrier and reads every other
//! rank's; through `Job`, each joins (every rank's soft-engine endpoint in
//! its address vector, in rank order), sends a tagged message to every
//! rank, itself included, checks what every rank sent it, and all-gathers
//! a blob.
//!
//! Needs `mpiexec.hydra` (Debian: `apt-get install mpich`); without it the
//! test says so and passes, unless `PSMRAIL_REQUIRE_LAUNCHERS=1` (as in
//! CI), which makes a missing launcher a failure.

use psmrail::bootstrap::{Job, PmiClient};
use psmrail::config::PsmConfig;
use psmrail::prelude::*;
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

/// What one rank does in `a_job_joins_and_every_rank_talks_to_every_other`.
fn job_rank_main() {
    let mut job = Job::from_launcher(Duration::from_secs(30)).unwrap();
    let (rank, size) = (job.rank(), job.size());
    assert!(job.local_rank() < job.local_size());
    let config = PsmConfig::builder_from_env()
        .unwrap()
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .unwrap();
    let hints = Hints::new()
        .caps(Caps::TAGGED)
        .engine(EngineChoice::Soft)
        .config(config);
    let info = getinfo(Some(&hints)).unwrap().remove(0);
    let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    let av = domain.av(AvAttr::new()).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    let ranks = job.join(&av, &ep.getname()).unwrap();
    assert_eq!(ranks.len(), size);
    let payload = |from: usize, to: usize| format!("from rank {from} to rank {to}").into_bytes();
    domain
        .reactor()
        .clone()
        .block_on(async {
            let recvs: Vec<_> = (0..size)
                .map(|from| ep.trecv(vec![0u8; 64], 100 + from as u64, 0))
                .collect();
            for (to, &addr) in ranks.iter().enumerate() {
                ep.tsend(addr, 100 + rank as u64, payload(rank, to))
                    .await
                    .into_result()?;
            }
            for (from, recv) in recvs.into_iter().enumerate() {
                let (got, buf) = recv.await;
                let len = got?.len;
                assert_eq!(
                    buf.as_slice()[..len],
                    payload(from, rank)[..],
                    "from rank {from}"
                );
            }
            Ok::<(), psmrail::Error>(())
        })
        .unwrap();
    let blobs = job.allgather(&[rank as u8; 3]).unwrap();
    assert_eq!(
        blobs,
        (0..size).map(|r| vec![r as u8; 3]).collect::<Vec<_>>()
    );
    job.barrier().unwrap();
    println!("rank {rank} of {size}: talked to {size} ranks");
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

/// Runs this binary's test `name` as `n` ranks under hydra; each rank's
/// line `rank R of N: <done>` must be printed.
fn under_hydra(name: &str, n: usize, done: &str) {
    let out = Command::new(HYDRA)
        .args(["-n", &n.to_string(), "-genv", ROLE, "1"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
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
        let line = format!("rank {r} of {n}: {done}");
        assert!(
            stdout.contains(&line),
            "{n} ranks, no {line:?}:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn every_rank_reads_every_value_put_before_the_barrier() {
    if std::env::var(ROLE).is_ok() {
        return rank_main();
    }
    if !hydra_present() {
        return;
    }
    for n in [2, 4] {
        under_hydra(
            "every_rank_reads_every_value_put_before_the_barrier",
            n,
            &format!("read {n} values"),
        );
    }
}

#[test]
fn a_job_joins_and_every_rank_talks_to_every_other() {
    if std::env::var(ROLE).is_ok() {
        return job_rank_main();
    }
    if !hydra_present() {
        return;
    }
    for n in [2, 4, 8] {
        under_hydra(
            "a_job_joins_and_every_rank_talks_to_every_other",
            n,
            &format!("talked to {n} ranks"),
        );
    }
}

#[test]
fn without_a_launcher_there_is_no_job() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let e = Job::from_launcher(Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert!(e.to_string().contains("no launcher"), "{e}");
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
