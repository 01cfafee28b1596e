//! The libfabric ABI: structures, function-pointer tables and constants,
//! generated at build time by bindgen from the distribution's headers
//! (`wrapper.h`; bindgen also emits a compile-time layout check of every
//! structure against what libclang computed from those headers), plus the
//! few values the headers spell as casts bindgen cannot evaluate.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unreachable_pub,
    missing_docs,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
include!(concat!(env!("OUT_DIR"), "/libfabric.rs"));

/// `FI_ADDR_NOTAVAIL` / `FI_ADDR_UNSPEC`: `((uint64_t) -1)`.
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;
/// `FI_KEY_NOTAVAIL`: `((uint64_t) -1)`.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;

/// `FI_VERSION(major, minor)`.
pub const fn fi_version_of(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// `FI_MAJOR(version)`.
pub const fn fi_major(version: u32) -> u32 {
    version >> 16
}

/// `FI_MINOR(version)`.
pub const fn fi_minor(version: u32) -> u32 {
    version & 0xffff
}
