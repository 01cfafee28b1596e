//! The libfabric object model (`design.md`, `src/fabric/`): discovery
//! (`getinfo`), fabric, domain, address vector, completion queues,
//! counters and endpoints, with the psm provider's capability rules and its
//! name server.
//!
//! Everything here is written against the engine contract
//! ([`crate::engine::EngineEndpoint`]); the operations on endpoints live in
//! [`crate::ops`].

mod addr;

pub use addr::FiAddr;
