//! Raw PSM 1.x ABI for psmrail, loaded at run time from `libpsm_infinipath.so.1`.
//!
//! The declarations arrive with the native-engine work; the crate exists now so
//! the workspace has its final shape.
#![deny(missing_docs)]
