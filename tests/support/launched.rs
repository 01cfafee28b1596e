//! Tests under real launchers (MPICH's `mpiexec.hydra`, Open MPI's
//! `mpirun.openmpi`): finding the launcher (a missing one skips the test
//! with a printed reason, or fails it under
//! `PSMRAIL_REQUIRE_LAUNCHERS=1`), starting this test binary as N ranks
//! of one of its tests, and the rank bodies the launcher tests share.

use psmrail::bootstrap::{Job, Protocol};
use psmrail::config::PsmConfig;
use psmrail::prelude::*;
use std::ops::Range;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Set in the ranks' environment: this process is a rank, not the test.
pub(crate) const ROLE: &str = "PSMRAIL_TEST_PMI_RANK";

/// Whether this process runs as a rank under a launcher.
pub(crate) fn is_rank() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// Whether `launcher` runs (`<launcher> --version`); when it does not,
/// says so, or fails under `PSMRAIL_REQUIRE_LAUNCHERS=1`.
pub(crate) fn present(launcher: &str, install: &str) -> bool {
    let found = Command::new(launcher)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("PSMRAIL_REQUIRE_LAUNCHERS").as_deref() != Ok("1"),
            "{launcher} is missing and PSMRAIL_REQUIRE_LAUNCHERS=1 ({install})"
        );
        eprintln!("skipped: {launcher} is not installed ({install})");
    }
    found
}

/// `mpiexec.hydra -n <n>`, with `env` for every rank.
pub(crate) fn hydra(n: usize, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new("mpiexec.hydra");
    c.args(["-n", &n.to_string()]);
    for (k, v) in env {
        c.args(["-genv", k, v]);
    }
    c
}

/// `mpirun.openmpi -np <n>` on this one machine, with `env` for every
/// rank (ranks may outnumber cores; CI runs as root).
pub(crate) fn open_mpi(n: usize, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new("mpirun.openmpi");
    c.args([
        "-np",
        &n.to_string(),
        "--oversubscribe",
        "--allow-run-as-root",
    ]);
    for (k, v) in env {
        c.env(k, v).args(["-x", k]);
    }
    c
}

/// Runs this binary's test `name` as the ranks `launcher` starts; the
/// launcher's output, and how long it ran.
pub(crate) fn run_ranks(mut launcher: Command, name: &str) -> (Output, Duration) {
    let start = Instant::now();
    let out = launcher
        .env(ROLE, "1")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env_remove("PMI_FD")
        .env_remove("PMIX_RANK")
        .output()
        .unwrap();
    (out, start.elapsed())
}

/// Set in a child started by [`run_child`]: it plays a process some
/// launcher started, with the environment the test gave it.
pub(crate) const CHILD: &str = "PSMRAIL_TEST_LAUNCHER_CHILD";

/// Whether this process is such a child.
pub(crate) fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs this binary's test `name` as one process with `env` and
/// [`CHILD`] set, no launcher around it; asserts that it passed.
pub(crate) fn run_child(name: &str, env: &[(&str, &str)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(CHILD, "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts that the job of `n` ranks succeeded and each rank in `which`
/// printed `rank R of N: <done>`; the output, for figures.
pub(crate) fn assert_ranks(out: &Output, n: usize, which: Range<usize>, done: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{n} ranks: {}\n{stdout}\n{stderr}",
        out.status
    );
    for r in which {
        let line = format!("rank {r} of {n}: {done}");
        assert!(
            stdout.contains(&line),
            "{n} ranks, no {line:?}:\n{stdout}\n{stderr}"
        );
    }
    stdout.into_owned()
}

/// A soft-engine endpoint with tagged and untagged messages and auto
/// progress (ranks may outnumber cores), and its job joined.
pub(crate) struct Joined {
    pub(crate) job: Job,
    pub(crate) domain: Domain,
    pub(crate) ep: Endpoint,
    pub(crate) ranks: Vec<FiAddr>,
    pub(crate) join_time: Duration,
}

pub(crate) fn join(expect: Protocol, timeout: Duration) -> Joined {
    let start = Instant::now();
    let mut job = Job::from_launcher(timeout).unwrap();
    assert_eq!(job.protocol(), expect);
    assert!(job.local_rank() < job.local_size());
    // What the launchers also say in the environment (hydra, Open MPI).
    for (lrank, lsize) in [
        ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ] {
        if let (Ok(r), Ok(n)) = (std::env::var(lrank), std::env::var(lsize)) {
            assert_eq!(
                (job.local_rank(), job.local_size()),
                (r.parse().unwrap(), n.parse().unwrap()),
                "{lrank}, {lsize}"
            );
        }
    }
    let config = PsmConfig::builder_from_env()
        .unwrap()
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .unwrap();
    let hints = Hints::new()
        .caps(Caps::TAGGED | Caps::MSG)
        .engine(EngineChoice::Soft)
        .progress(ProgressKind::Auto)
        .config(config);
    let info = getinfo(Some(&hints)).unwrap().remove(0);
    let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    let av = domain.av(AvAttr::new().lazy_connect(true)).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    let ranks = job.join(&av, &ep.getname()).unwrap();
    assert_eq!(ranks.len(), job.size());
    Joined {
        job,
        domain,
        ep,
        ranks,
        join_time: start.elapsed(),
    }
}

fn payload(kind: &str, from: usize, to: usize) -> Vec<u8> {
    format!("{kind} from rank {from} to rank {to}").into_bytes()
}

/// One rank of the all-to-all: every rank sends every rank (itself
/// included) a tagged and an untagged message, checks each byte of what
/// it got, all-gathers a blob and meets the others at a barrier.
pub(crate) fn all_to_all_rank(expect: Protocol) {
    let Joined {
        mut job,
        ep,
        ranks,
        join_time,
        ..
    } = join(expect, Duration::from_secs(60));
    let (rank, size) = (job.rank(), job.size());
    futures::executor::block_on(async {
        let trecvs: Vec<_> = (0..size)
            .map(|from| ep.trecv(vec![0u8; 64], 100 + from as u64, 0))
            .collect();
        let recvs: Vec<_> = (0..size).map(|_| ep.recv(vec![0u8; 64])).collect();
        let mut sends = Vec::new();
        for (to, &addr) in ranks.iter().enumerate() {
            sends.push(ep.tsend(addr, 100 + rank as u64, payload("tagged", rank, to)));
            sends.push(ep.send(addr, payload("untagged", rank, to)));
        }
        for (sent, _) in futures::future::join_all(sends).await {
            sent?;
        }
        for (from, (got, buf)) in futures::future::join_all(trecvs)
            .await
            .into_iter()
            .enumerate()
        {
            let len = got?.len;
            assert_eq!(
                buf.as_slice()[..len],
                payload("tagged", from, rank)[..],
                "from rank {from}"
            );
        }
        let mut untagged = Vec::new();
        for (got, buf) in futures::future::join_all(recvs).await {
            let len = got?.len;
            untagged.push(buf.as_slice()[..len].to_vec());
        }
        untagged.sort();
        let mut want: Vec<_> = (0..size)
            .map(|from| payload("untagged", from, rank))
            .collect();
        want.sort();
        assert_eq!(untagged, want, "untagged messages at rank {rank}");
        Ok::<(), psmrail::Error>(())
    })
    .unwrap();
    let blobs = job.allgather(&[rank as u8; 3]).unwrap();
    assert_eq!(
        blobs,
        (0..size).map(|r| vec![r as u8; 3]).collect::<Vec<_>>()
    );
    job.barrier().unwrap();
    println!(
        "rank {rank} of {size}: talked to {size} ranks (joined in {} ms)",
        join_time.as_millis()
    );
}

/// How long the lost-rank job's launcher waits may last.
pub(crate) const LOST_JOB_TIMEOUT: Duration = Duration::from_secs(3);

/// One rank of the lost-rank job: the last rank leaves right after the
/// join (finalizing with the launcher, status 0); the others wait until
/// its process is gone, then send to it, and must see an error within
/// `FI_PSM_TIMEOUT` (plus a second of slack) instead of a hang; a
/// barrier after that ends within the job's timeout, as an error or (when
/// the launcher no longer counts the rank that left) a success.
pub(crate) fn lost_rank(expect: Protocol) {
    let Joined {
        mut job, ep, ranks, ..
    } = join(expect, LOST_JOB_TIMEOUT);
    let (rank, size) = (job.rank(), job.size());
    let pids = job.allgather(&std::process::id().to_le_bytes()).unwrap();
    let lost = size - 1;
    if rank == lost {
        println!("rank {rank} of {size}: leaving after the join");
        drop(ep);
        drop(job);
        std::process::exit(0);
    }
    let pid = u32::from_le_bytes(pids[lost][..4].try_into().unwrap());
    let gone_by = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(
            Instant::now() < gone_by,
            "rank {lost} (pid {pid}) did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let limit = PsmConfig::builder_from_env()
        .unwrap()
        .build()
        .unwrap()
        .timeout()
        + Duration::from_secs(1);
    let start = Instant::now();
    let (sent, _) =
        futures::executor::block_on(ep.tsend(ranks[lost], 7, payload("tagged", rank, lost)));
    let took = start.elapsed();
    let e = sent.expect_err("sending to a rank that left succeeded");
    assert!(
        took <= limit,
        "the error took {took:?}, more than {limit:?}: {e}"
    );
    let start = Instant::now();
    let barrier = job.barrier();
    let barrier_took = start.elapsed();
    assert!(
        barrier_took <= LOST_JOB_TIMEOUT + Duration::from_secs(2),
        "the barrier took {barrier_took:?}: {barrier:?}"
    );
    println!(
        "rank {rank} of {size}: the lost rank failed in {} ms ({e}); the barrier after it: {barrier:?} in {} ms",
        took.as_millis(),
        barrier_took.as_millis()
    );
}
