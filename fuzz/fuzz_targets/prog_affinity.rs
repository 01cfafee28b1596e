//! Fuzzes the `FI_PSM_PROG_AFFINITY` parser and its resolution against
//! several CPU topologies: never panics or hangs, errors point at their
//! item, and a value that parses round-trips through `Display`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::config::check_prog_affinity(data);
});
