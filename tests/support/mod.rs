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

pub mod atomic_values;
pub mod fabric;
pub mod hosts;
pub mod mrail_nodes;
pub mod payload;
pub mod peer;
pub mod rig;
pub mod scenario;
pub mod soft_raw;
pub mod spin_lock;
pub mod trace_capture;
