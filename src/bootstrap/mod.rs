//! Starting under a launcher: what HPC's process managers (MPICH's hydra
//! `mpiexec`, Slurm, Open MPI's `mpirun`) give each process of a job —
//! its rank, the job's size, a key-value exchange with a barrier.
//!
//! Above `mrail` in the layers: bootstrap publishes an endpoint's name
//! and reads the others'; it uses the fabric, nothing below uses it.
//!
//! * [`pmi_wire`]: the PMI-1 text protocol, sans I/O (requests, the line
//!   decoder, checked replies);
//! * [`pmi_client`]: the blocking client over the socket in `PMI_FD`;
//! * [`job`]: [`Job`], rank and size, barrier, all-gather, and `join`:
//!   every rank's endpoint in an address vector, in rank order.

#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
pub mod job;
pub mod pmi_client;
pub mod pmi_wire;

pub use job::{Job, JobAv};
pub use pmi_client::PmiClient;
