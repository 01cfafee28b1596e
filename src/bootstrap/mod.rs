//! Starting under a launcher: what HPC's process managers (MPICH's hydra
//! `mpiexec`, Slurm, Open MPI's `mpirun`) give each process of a job —
//! its rank, the job's size, a key-value exchange with a barrier.
//!
//! Above `mrail` in the layers: bootstrap publishes an endpoint's name
//! and reads the others'; it uses the fabric, nothing below uses it.
//!
//! * [`job`]: [`Job`], rank and size, barrier, all-gather, and `join`:
//!   every rank's endpoint in an address vector, in rank order, through
//!   whichever launcher started the process;
//! * [`launcher`]: which launcher that is (PMIx first when `PMIX_RANK` is
//!   set, then PMI over `PMI_FD`, PMI-1 unless `PSMRAIL_PMI_VERSION=2`,
//!   else a clear error), and the exchange over each;
//! * [`pmi_wire`]: the PMI-1 text protocol, sans I/O (requests, the line
//!   decoder, checked replies);
//! * [`pmi_client`]: the blocking PMI-1 client over the socket in `PMI_FD`;
//! * [`pmi2_wire`]: the PMI-2 protocol (length-prefixed frames), sans I/O;
//! * [`pmi2_client`]: the blocking PMI-2 client over the same socket, and
//!   [`process_mapping`], the node of each rank as PMI-2 launchers say it;
//! * [`settings`]: `PSMRAIL_PMI_VERSION` and `PSMRAIL_PMIX_LIB`, checked;
//! * [`pmix_client`]: the PMIx client (Open MPI's `mpirun`), over
//!   `pmix_ffi`: the distribution's `libpmix.so.2`, loaded at run time.
//!
//! # Why PMIx is loaded at run time
//! PMIx's wire is the library's own (binary, versioned between client and
//! server), so psmrail calls libpmix rather than speaking it. The library
//! is `dlopen`ed with `libloading`, as psm-sys loads PSM: psmrail builds,
//! and its tests run, on machines without PMIx, and a process only needs
//! libpmix when a PMIx server started it. The crates on crates.io that
//! wrap PMIx (`pmix-sys`, and `pmi` over it) link libpmix at build time
//! through bindgen and a `links = "pmix"` build script that needs the
//! headers and the library where psmrail is built; that would make PMIx
//! a build requirement of every psmrail user. The few structures psmrail
//! passes are mirrored by hand and checked against the installed headers
//! by a unit test.

#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
pub mod job;
pub mod launcher;
pub mod pmi2_client;
pub mod pmi2_wire;
pub mod pmi_client;
mod pmi_socket;
pub mod pmi_wire;
pub mod pmix_client;
mod pmix_ffi;
pub mod process_mapping;
pub mod settings;

pub use job::{Job, JobAv};
pub use launcher::{Protocol, ENV_PMI_VERSION};
pub use pmi2_client::Pmi2Client;
pub use pmi_client::PmiClient;
pub use pmix_client::PmixClient;
