//! A job of several processes started by a launcher: each process learns
//! its rank and the job's size from the launcher, the ranks exchange their
//! endpoint addresses through the launcher's key-value space
//! ([`Job::join`]), then a token goes round the ring of ranks, and every
//! rank sends one message to every other.
//!
//! ```sh
//! cargo build --example job
//! mpiexec.hydra -n 4 target/debug/examples/job                       # PMI-1
//! PSMRAIL_PMI_VERSION=2 mpiexec.hydra -n 4 target/debug/examples/job # PMI-2
//! mpirun.openmpi --oversubscribe -np 4 target/debug/examples/job     # PMIx
//! ```
//!
//! Every rank inserts every other rank, but its address vector connects
//! an address at its first use ([`AvAttr::lazy_connect`]): the ring
//! connects each rank to its successor only (N connections, not N²); the
//! all-to-all then connects every pair. Rank 0 prints the timings; every
//! rank checks each token it passes on and whom it heard from. Without a launcher the program says so
//! and exits with status 2.

use psmrail::bootstrap::Job;
use psmrail::prelude::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const LAPS: u64 = 200;
const TAG: u64 = 0x70b;

fn run() -> Result<(), String> {
    let err = |e: psmrail::Error| e.to_string();
    let mut job = Job::from_launcher(Duration::from_secs(60)).map_err(err)?;
    let (rank, size) = (job.rank(), job.size());
    // Auto progress: ranks may outnumber cores, and a rank that waits
    // sleeps instead of spinning.
    let hints = Hints::new().caps(Caps::TAGGED).progress(ProgressKind::Auto);
    let info = getinfo(Some(&hints)).map_err(err)?.remove(0);
    let fabric = Fabric::open(&info).map_err(err)?;
    let domain = fabric.domain(&info).map_err(err)?;
    let av = domain
        .av(AvAttr::new()
            .av_type(psmrail::fabric::AvType::Table)
            .lazy_connect(true))
        .map_err(err)?;
    let ep = domain.endpoint(&info).bind_av(&av).enable().map_err(err)?;
    let ranks = job.join(&av, &ep.getname()).map_err(err)?;
    let next = ranks[(rank + 1) % size];
    let mut laps = Vec::with_capacity(LAPS as usize);
    for lap in 0..LAPS {
        let start = Instant::now();
        // Rank 0 starts the token at the lap number; every rank adds one.
        let passed = futures::executor::block_on(async {
            let token = if rank == 0 {
                lap
            } else {
                let (got, buf) = ep.trecv(vec![0u8; 8], TAG, 0).await;
                got?;
                let t = u64::from_le_bytes(buf.as_slice().try_into().unwrap_or([0; 8]));
                t.checked_sub(rank as u64 - 1)
                    .filter(|&l| l == lap)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::Other,
                            format!("lap {lap}: rank {rank} got the token {t}"),
                        )
                    })?;
                t + 1
            };
            let (sent, _) = ep.tsend(next, TAG, token.to_le_bytes().to_vec()).await;
            sent?;
            if rank == 0 {
                let (got, buf) = ep.trecv(vec![0u8; 8], TAG, 0).await;
                got?;
                let t = u64::from_le_bytes(buf.as_slice().try_into().unwrap_or([0; 8]));
                if t != lap + size as u64 - 1 {
                    return Err(Error::new(
                        ErrorKind::Other,
                        format!("lap {lap}: the token came back as {t}"),
                    ));
                }
            }
            Ok(())
        });
        passed.map_err(err)?;
        laps.push(start.elapsed());
    }
    // All to all: every rank sends its rank to every other, and takes one
    // message from each (this connects every pair).
    let start = Instant::now();
    let heard = futures::executor::block_on(async {
        let recvs: Vec<_> = (1..size)
            .map(|_| ep.trecv(vec![0u8; 8], TAG + 1, 0))
            .collect();
        let sends: Vec<_> = (0..size)
            .filter(|&r| r != rank)
            .map(|r| ep.tsend(ranks[r], TAG + 1, (rank as u64).to_le_bytes().to_vec()))
            .collect();
        for (sent, _) in futures::future::join_all(sends).await {
            sent?;
        }
        let mut heard = Vec::with_capacity(size);
        for (got, buf) in futures::future::join_all(recvs).await {
            got?;
            heard.push(u64::from_le_bytes(
                buf.as_slice().try_into().unwrap_or([0; 8]),
            ));
        }
        Ok::<_, Error>(heard)
    });
    let mut heard = heard.map_err(err)?;
    let all_to_all = start.elapsed();
    heard.sort_unstable();
    let want: Vec<u64> = (0..size as u64).filter(|&r| r != rank as u64).collect();
    if heard != want {
        return Err(format!("all to all: rank {rank} heard from {heard:?}"));
    }
    job.barrier().map_err(err)?;
    if rank == 0 {
        laps.sort();
        let median = laps[laps.len() / 2];
        println!(
            "ring of {size} ranks: {LAPS} laps, every token checked: median lap {median:.2?}, \
             {:.2?} a hop",
            median / size as u32,
        );
        println!(
            "all to all of {size} ranks: {} messages of 8 B each, every sender checked, in \
             {all_to_all:.2?} (rank 0, connecting included)",
            size * (size - 1),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("job: {e}");
            ExitCode::from(2)
        }
    }
}
