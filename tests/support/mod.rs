//! Shared test support, one module tree for every test crate (`mod
//! support;`): fabric objects on the soft engine (`fabric`), peers in
//! child processes and their scenarios (`peer`, `scenario`), a lock that
//! keeps spinning multi-process tests from running at the same time
//! (`spin_lock`), payload patterns (`payload`), atomic test values
//! (`atomic_values`), a raw soft-engine client for hostile-peer tests
//! (`soft_raw`), the multi-rail rig (network namespaces joined by veth
//! pairs: `rig`, `hosts`, `mrail_nodes`) and a `tracing` subscriber that
//! records what it sees (`trace_capture`).
#![allow(dead_code)]

pub(crate) mod atomic_values;
pub(crate) mod fabric;
pub(crate) mod hosts;
pub(crate) mod mrail_nodes;
pub(crate) mod payload;
pub(crate) mod peer;
pub(crate) mod rig;
pub(crate) mod scenario;
pub(crate) mod soft_raw;
pub(crate) mod spin_lock;
pub(crate) mod trace_capture;
