//! Shared test support, one module tree for every test crate (`mod
//! support;`): fabric objects on the soft engine (`fabric`), peers in
//! child processes and their line protocol (`peer`), the two-process
//! harness of the public API's scenarios (`remote`), a lock that keeps
//! spinning multi-process tests from running at the same time
//! (`spin_lock`), payloads and the one byte pattern (`payload`), atomic
//! test values (`atomic_values`), a raw soft-engine client for
//! hostile-peer tests (`soft_raw`), raw name-server clients (`ns_raw`), the multi-rail rig (network namespaces
//! joined by veth pairs: `rig`, `hosts`, `mrail_nodes`) and a `tracing`
//! subscriber that records what it sees (`trace_capture`), jobs under
//! real launchers, hydra and Open MPI (`launched`), and whether the
//! native engine's tests run (`native`).
#![allow(dead_code)]

pub(crate) mod atomic_values;
pub(crate) mod fabric;
pub(crate) mod hosts;
pub(crate) mod launched;
pub(crate) mod mrail_nodes;
pub(crate) mod native;
pub(crate) mod ns_raw;
pub(crate) mod payload;
pub(crate) mod peer;
pub(crate) mod remote;
pub(crate) mod rig;
pub(crate) mod soft_raw;
pub(crate) mod spin_lock;
pub(crate) mod trace_capture;
