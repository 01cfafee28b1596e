//! Which launcher started this process, and the key-value exchange
//! [`Job`](super::Job) runs through it: one enum over the clients, so
//! `Job` has a single path for every launcher.
//!
//! Detection, in order:
//! 1. `PMIX_RANK` set: a PMIx server (Open MPI's `mpirun`) —
//!    [`PmixClient`], through the distribution's libpmix;
//! 2. `PMI_FD` set: a PMI process manager (MPICH's hydra `mpiexec`,
//!    Slurm) — [`PmiClient`] (PMI-1), or [`Pmi2Client`] when
//!    `PSMRAIL_PMI_VERSION=2` (no launcher says which wire it wants);
//! 3. neither: `FI_ENODATA`, naming the variables looked for.

use super::{Pmi2Client, PmiClient, PmixClient};
use crate::{Error, ErrorKind, Result};
use std::time::Duration;

/// The environment knob choosing the PMI wire over `PMI_FD`.
pub use super::settings::ENV_PMI_VERSION;

/// The protocol a [`Job`](super::Job) talks to its launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// PMI-1 text lines over `PMI_FD` (hydra, Slurm).
    Pmi1,
    /// PMI-2 length-prefixed commands over `PMI_FD` (hydra, Slurm's
    /// `--mpi=pmi2`).
    Pmi2,
    /// PMIx through libpmix (Open MPI's `mpirun`, PRRTE, Slurm's
    /// `--mpi=pmix`).
    Pmix,
}

/// A connected launcher client.
#[derive(Debug)]
pub(crate) enum Launcher {
    Pmi1(PmiClient),
    Pmi2(Pmi2Client),
    Pmix(PmixClient),
}

/// What the launcher says about this process at the start.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) launcher: Launcher,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) local_rank: usize,
    pub(crate) local_size: usize,
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

/// Rank, size, local rank and local size, checked: `rank < size` and
/// `local_rank < local_size`, else `FI_EINVAL` naming `names`.
#[derive(Clone, Copy, Debug)]
struct Numbers([usize; 4]);

impl Numbers {
    fn checked(n: [usize; 4], names: [&str; 4]) -> Result<Numbers> {
        let [rank, size, local_rank, local_size] = n;
        if size == 0 || rank >= size {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "{}={rank} with {}={size}: the rank must be below the size",
                    names[0], names[1]
                ),
            ));
        }
        if local_rank >= local_size {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "{}={local_rank} with {}={local_size}: the local rank must be below the count",
                    names[2], names[3]
                ),
            ));
        }
        Ok(Numbers(n))
    }

    fn with(self, launcher: Launcher) -> Started {
        let [rank, size, local_rank, local_size] = self.0;
        Started {
            launcher,
            rank,
            size,
            local_rank,
            local_size,
        }
    }
}

impl Launcher {
    /// The launcher that started this process (see the module docs).
    pub(crate) fn detect(timeout: Duration) -> Result<Started> {
        if let Some(pmix) = PmixClient::from_env(timeout) {
            return Self::pmix(pmix?);
        }
        if std::env::var_os("PMI_FD").is_some() {
            return match super::settings::pmi_version(&crate::config::ProcessEnv)? {
                2 => Self::pmi2(timeout),
                _ => Self::pmi1(timeout),
            };
        }
        if std::env::var_os("PMI_RANK").is_some() {
            return Err(Error::new(
                ErrorKind::NoData,
                "bootstrap: PMI_RANK is set but PMI_FD is not: the launcher gave no PMI socket \
                 (a PMI_PORT launcher, e.g. hydra's -pmi-port, is not supported)",
            ));
        }
        Err(Error::new(
            ErrorKind::NoData,
            "bootstrap: no launcher started this process (PMIX_RANK, PMI_RANK and PMI_FD \
             unset; start it under Open MPI's mpirun or MPICH's mpiexec.hydra, or find \
             peers with the name server)",
        ))
    }

    fn pmix(pmix: PmixClient) -> Result<Started> {
        let rank = pmix.rank();
        let size = pmix.job_size()?;
        let local_rank = pmix.local_rank()?.unwrap_or(rank);
        let local_size = pmix.local_size()?.unwrap_or(size);
        let names = [
            "PMIx rank",
            "PMIX_JOB_SIZE",
            "PMIX_LOCAL_RANK",
            "PMIX_LOCAL_SIZE",
        ];
        Ok(
            Numbers::checked([rank, size, local_rank, local_size], names)?
                .with(Launcher::Pmix(pmix)),
        )
    }

    fn pmi1(timeout: Duration) -> Result<Started> {
        let (Some(rank), Some(size)) = (launcher_number("PMI_RANK")?, launcher_number("PMI_SIZE")?)
        else {
            return Err(Error::new(
                ErrorKind::NoData,
                "bootstrap: PMI_FD is set but PMI_RANK or PMI_SIZE is not: the launcher \
                 gave no PMI-1 rank",
            ));
        };
        let local_rank = launcher_number("MPI_LOCALRANKID")?.unwrap_or(rank);
        let local_size = launcher_number("MPI_LOCALNRANKS")?.unwrap_or(size);
        let names = ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"];
        // The numbers are checked before the socket is taken.
        let numbers = Numbers::checked([rank, size, local_rank, local_size], names)?;
        let pmi = PmiClient::from_env(timeout).expect("PMI_FD is set")?;
        Ok(numbers.with(Launcher::Pmi1(pmi)))
    }

    /// Rank and size from `fullinit`; the local rank and count from the
    /// job's `PMI_process_mapping`, else hydra's `MPI_LOCALRANKID` /
    /// `MPI_LOCALNRANKS`, else the whole job as one node.
    fn pmi2(timeout: Duration) -> Result<Started> {
        let mut pmi = Pmi2Client::from_env(timeout).expect("PMI_FD is set")?;
        let (rank, size) = (pmi.rank(), pmi.size());
        let (local_rank, local_size) = match pmi.local_rank_and_size() {
            Some(local) => local,
            None => (
                launcher_number("MPI_LOCALRANKID")?.unwrap_or(rank),
                launcher_number("MPI_LOCALNRANKS")?.unwrap_or(size),
            ),
        };
        let names = ["PMI-2 rank", "PMI-2 size", "local rank", "local size"];
        Ok(
            Numbers::checked([rank, size, local_rank, local_size], names)?
                .with(Launcher::Pmi2(pmi)),
        )
    }

    /// The protocol this client talks.
    pub(crate) fn protocol(&self) -> Protocol {
        match self {
            Launcher::Pmi1(_) => Protocol::Pmi1,
            Launcher::Pmi2(_) => Protocol::Pmi2,
            Launcher::Pmix(_) => Protocol::Pmix,
        }
    }

    /// Publishes `value` under `key`; visible to all after [`fence`](Self::fence).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<()> {
        match self {
            Launcher::Pmi1(c) => c.put(key, value),
            Launcher::Pmi2(c) => c.put(key, value),
            Launcher::Pmix(c) => c.put(key, value),
        }
    }

    /// Waits for every rank and makes every rank's puts readable.
    pub(crate) fn fence(&mut self) -> Result<()> {
        match self {
            Launcher::Pmi1(c) => c.barrier(),
            Launcher::Pmi2(c) => c.fence(),
            Launcher::Pmix(c) => c.commit().and_then(|()| c.fence(true)),
        }
    }

    /// Waits for every rank.
    pub(crate) fn barrier(&mut self) -> Result<()> {
        match self {
            Launcher::Pmi1(c) => c.barrier(),
            Launcher::Pmi2(c) => c.fence(),
            Launcher::Pmix(c) => c.fence(false),
        }
    }

    /// What `rank` put under `key` before the last fence.
    pub(crate) fn get(&mut self, rank: usize, key: &str) -> Result<String> {
        match self {
            Launcher::Pmi1(c) => c.get(key),
            Launcher::Pmi2(c) => c.get(key),
            Launcher::Pmix(c) => c.get(rank, key),
        }
    }
}
