//! Shared test support: peers in child processes, a lock that keeps
//! spinning multi-process tests from running at the same time, the
//! multi-rail rig (network namespaces joined by veth pairs) and a
//! `tracing` subscriber that records what it sees.
#![allow(dead_code)]

pub mod hosts;
pub mod mrail_nodes;
pub mod peer;
pub mod rig;
pub mod spin_lock;
pub mod trace_capture;
