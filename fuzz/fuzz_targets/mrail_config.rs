//! Fuzzes the `FI_OFI_MRAIL_CONFIG` parser: never panics, errors point at
//! their item, and a value that parses round-trips through `Display`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::config::check_mrail_config(data);
});
