//! [`Job`]: a process of a job its launcher started — rank, size, local
//! rank — and the exchanges a job needs at its start: a barrier, an
//! all-gather of small byte blobs, and [`Job::join`], which fills an
//! address vector with every rank's endpoint in rank order.
//!
//! The launcher's exchange is PMI-1 ([`PmiClient`]); rank and size come
//! from `PMI_RANK` / `PMI_SIZE`, the local rank and the number of ranks on
//! this node from `MPI_LOCALRANKID` / `MPI_LOCALNRANKS`, all set by MPICH's
//! hydra `mpiexec`. Every call is blocking and bounded by the job's
//! timeout; run it before the job's traffic (from async code, where
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
//! // Started as `mpiexec.hydra -n 4 ./program`.
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

use super::PmiClient;
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
    pmi: PmiClient,
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

/// A launcher variable as a number, or an error naming it.
fn launcher_number(var: &str) -> Result<Option<usize>> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => v.trim().parse().map(Some).map_err(|_| {
            Error::new(
                ErrorKind::Inval,
                format!("{var}={v:?}: expected a number, as the launcher sets it"),
            )
        }),
        Err(_) => Err(Error::new(
            ErrorKind::Inval,
            format!("{var}: not UTF-8 text"),
        )),
    }
}

impl Job {
    /// The job this process is part of, from its launcher's environment:
    /// `FI_ENODATA` naming what is missing when no launcher started it,
    /// `FI_EINVAL` naming the variable when one is malformed, and the
    /// PMI start-up's error (within `timeout`) when the exchange fails.
    /// `timeout` bounds every later wait too.
    pub fn from_launcher(timeout: Duration) -> Result<Job> {
        let rank = launcher_number("PMI_RANK")?;
        let size = launcher_number("PMI_SIZE")?;
        let (Some(rank), Some(size)) = (rank, size) else {
            return Err(Error::new(
                ErrorKind::NoData,
                "bootstrap: no launcher started this process (PMI_RANK, PMI_SIZE and PMI_FD unset; \
                 start it under MPICH's mpiexec.hydra, or find peers with the name server)",
            ));
        };
        if size == 0 || rank >= size {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("PMI_RANK={rank} with PMI_SIZE={size}: the rank must be below the size"),
            ));
        }
        let local_rank = launcher_number("MPI_LOCALRANKID")?.unwrap_or(rank);
        let local_size = launcher_number("MPI_LOCALNRANKS")?.unwrap_or(size);
        if local_rank >= local_size {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("MPI_LOCALRANKID={local_rank} with MPI_LOCALNRANKS={local_size}: the local rank must be below the count"),
            ));
        }
        let pmi = PmiClient::from_env(timeout).ok_or_else(|| {
            Error::new(
                ErrorKind::NoData,
                "bootstrap: PMI_RANK is set but PMI_FD is not: the launcher gave no PMI-1 socket",
            )
        })??;
        Ok(Job {
            rank,
            size,
            local_rank,
            local_size,
            pmi,
            round: 0,
        })
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
        self.pmi.barrier()
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
        self.pmi.put(&key(self.rank, self.round), &value)?;
        self.pmi.barrier()?;
        (0..self.size)
            .map(|r| self.pmi.get(&key(r, self.round)))
            .collect()
    }
}
