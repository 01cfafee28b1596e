//! [`Job`]: a process of a job its launcher started — rank, size, local
//! rank — and the exchanges a job needs at its start: a barrier, an
//! all-gather of small byte blobs, and [`Job::join`], which fills an
//! address vector with every rank's endpoint in rank order.
//!
//! The launcher is found from the environment (the order is in
//! [`launcher`](super::launcher)): PMIx under Open MPI's `mpirun`
//! ([`PmixClient`](super::PmixClient)), PMI-1 under MPICH's hydra
//! `mpiexec` ([`PmiClient`](super::PmiClient)), or PMI-2 there (and under
//! Slurm's `--mpi=pmi2`) with `PSMRAIL_PMI_VERSION=2`
//! ([`Pmi2Client`](super::Pmi2Client)); [`Job::protocol`] says which.
//! Every call is blocking and bounded by the job's timeout; run it
//! before the job's traffic (from async code, where
//! blocking is allowed). `join` inserts; whether that dials every rank is
//! the address vector's choice: one made with
//! [`AvAttr::lazy_connect`](crate::fabric::AvAttr::lazy_connect) connects
//! each rank at its first use (`examples/job.rs`).
//!
//! ```no_run
//! use psmrail::bootstrap::Job;
//! use psmrail::prelude::*;
//! use std::time::Duration;
//!
//! // Started as `mpiexec.hydra -n 4 ./program` or `mpirun.openmpi -np 4 ./program`.
//! let mut job = Job::from_launcher(Duration::from_secs(60))?;
//! let hints = Hints::new().caps(Caps::TAGGED);
//! let info = getinfo(Some(&hints))?.remove(0);
//! let domain = Fabric::open(&info)?.domain(&info)?;
//! // Connect each rank at its first use only: a rank never talked to is
//! // never dialled.
//! let av = domain.av(AvAttr::new().lazy_connect(true))?;
//! let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! let ranks = job.join(&av, &ep.getname())?; // ranks[r] is rank r
//! let next = ranks[(job.rank() + 1) % job.size()];
//! ep.tinject(next, 7, b"hello")?;
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::launcher::{Launcher, Protocol};
use crate::engine::Epid;
use crate::fabric::{AddressVector, FiAddr};
use crate::mrail::{MrailAddr, MrailAv};
use crate::{Error, ErrorKind, Result};
use std::time::Duration;

/// One process of a launched job (see the module docs).
#[derive(Debug)]
pub struct Job {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    launcher: Launcher,
    /// Exchanges so far: each one's keys are its own.
    round: u64,
}

/// An address vector [`Job::join`] can fill: how its addresses travel as
/// PMI values, and how a list of them is inserted.
pub trait JobAv {
    /// One endpoint's address.
    type Addr;
    /// The address as printable text without spaces or `=`.
    fn encode(addr: &Self::Addr) -> String;
    /// The address back from [`encode`](Self::encode)'s text.
    fn decode(text: &str) -> Result<Self::Addr>;
    /// Inserts `addrs` in order.
    fn insert_all(&self, addrs: &[Self::Addr]) -> Vec<Result<FiAddr>>;
}

fn epid_text(e: Epid) -> String {
    format!("{:016x}", e.0)
}

fn epid_from(text: &str) -> Result<Epid> {
    u64::from_str_radix(text, 16).map(Epid).map_err(|_| {
        Error::new(
            ErrorKind::Io,
            format!("bootstrap: {text:?}, published as an endpoint address, is none"),
        )
    })
}

impl JobAv for AddressVector {
    type Addr = Epid;
    fn encode(addr: &Epid) -> String {
        epid_text(*addr)
    }
    fn decode(text: &str) -> Result<Epid> {
        epid_from(text)
    }
    fn insert_all(&self, addrs: &[Epid]) -> Vec<Result<FiAddr>> {
        self.insert(addrs)
    }
}

/// Every rail of a peer in one value, so one exchange serves any number
/// of rails.
impl JobAv for MrailAv {
    type Addr = MrailAddr;
    fn encode(addr: &MrailAddr) -> String {
        addr.rails()
            .iter()
            .map(|e| epid_text(*e))
            .collect::<Vec<_>>()
            .join("-")
    }
    fn decode(text: &str) -> Result<MrailAddr> {
        MrailAddr::new(text.split('-').map(epid_from).collect::<Result<_>>()?)
    }
    fn insert_all(&self, addrs: &[MrailAddr]) -> Vec<Result<FiAddr>> {
        self.insert(addrs)
    }
}

impl Job {
    /// The job this process is part of, from its launcher's environment:
    /// `FI_ENODATA` naming what is missing when no launcher started it
    /// (or when PMIx is asked for and libpmix cannot be loaded),
    /// `FI_EINVAL` naming the variable when one is malformed, and the
    /// start-up's error (within `timeout`) when the exchange fails.
    /// `timeout` bounds every later wait too.
    pub fn from_launcher(timeout: Duration) -> Result<Job> {
        let started = Launcher::detect(timeout)?;
        Ok(Job {
            rank: started.rank,
            size: started.size,
            local_rank: started.local_rank,
            local_size: started.local_size,
            launcher: started.launcher,
            round: 0,
        })
    }

    /// The protocol this process talks to its launcher.
    pub fn protocol(&self) -> Protocol {
        self.launcher.protocol()
    }

    /// This process's rank, `0 .. size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many processes the job has.
    pub fn size(&self) -> usize {
        self.size
    }

    /// This process's rank among those on its node.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// How many of the job's processes run on this node.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// Waits until every rank reached the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        self.launcher.barrier()
    }

    /// Every rank's `blob`, in rank order (each rank calls it with its
    /// own; at most half the launcher's value length, as hex).
    pub fn allgather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        let texts = self.exchange(hex::encode(blob))?;
        texts
            .iter()
            .map(|t| {
                hex::decode(t).map_err(|_| {
                    Error::new(ErrorKind::Io, format!("bootstrap: {t:?} is no hex blob"))
                })
            })
            .collect()
    }

    /// Publishes `me` (this rank's endpoint address), waits for every
    /// rank to do the same and inserts all of them into `av` in rank
    /// order: the returned `FiAddr`s are indexed by rank (into a fresh
    /// address vector, `fi_addr == rank`). The first address that cannot
    /// be inserted fails the call, naming its rank.
    pub fn join<A: JobAv>(&mut self, av: &A, me: &A::Addr) -> Result<Vec<FiAddr>> {
        let texts = self.exchange(A::encode(me))?;
        let addrs = texts
            .iter()
            .map(|t| A::decode(t))
            .collect::<Result<Vec<_>>>()?;
        av.insert_all(&addrs)
            .into_iter()
            .enumerate()
            .map(|(r, got)| {
                got.map_err(|e| Error::new(e.kind(), format!("bootstrap: rank {r}'s address: {e}")))
            })
            .collect()
    }

    /// Puts `value` under this rank's key of a new round, waits at the
    /// barrier, and reads every rank's.
    fn exchange(&mut self, value: String) -> Result<Vec<String>> {
        self.round += 1;
        let key = |r: usize, round: u64| format!("psmrail-{round}-{r}");
        self.launcher.put(&key(self.rank, self.round), &value)?;
        self.launcher.fence()?;
        (0..self.size)
            .map(|r| self.launcher.get(r, &key(r, self.round)))
            .collect()
    }
}
