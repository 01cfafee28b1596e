//! Raw PSM 1.x ABI: `#[repr(C)]` types, constants and function-pointer types.
//!
//! Names follow the C headers (`psm.h`, `psm_mq.h` and the AM interface) so
//! that C documentation applies directly. Nothing here is linked: the
//! functions are resolved at run time by [`crate::PsmLibrary`].
#![allow(non_camel_case_types)]

pub mod am;
pub mod core;
pub mod mq;

pub use self::am::*;
pub use self::core::*;
pub use self::mq::*;
