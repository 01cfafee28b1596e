//! The soft engine: PSM semantics in pure Rust, over the process itself and TCP.
