//! Shared test support: peers in child processes, a lock that keeps
//! spinning multi-process tests from running at the same time, and the
//! multi-rail rig (network namespaces joined by veth pairs).
#![allow(dead_code)]

pub mod hosts;
pub mod mrail_nodes;
pub mod peer;
pub mod rig;
pub mod spin_lock;
