//! Shared test support: peers in child processes, and a lock that keeps
//! spinning multi-process tests from running at the same time.
#![allow(dead_code)]

pub mod peer;
pub mod spin_lock;
