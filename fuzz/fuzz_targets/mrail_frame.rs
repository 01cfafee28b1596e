//! Fuzzes the mrail control frame header decoder: arbitrary bytes never
//! panic, and every decoded frame re-encodes to the header bytes it came
//! from.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = psmrail::hooks::mrail::fuzz_header(data);
});
