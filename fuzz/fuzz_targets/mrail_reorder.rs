//! Fuzzes the mrail reorder buffer with scripts of accepts and pops around
//! the 2^32 wrap: no panic, items delivered in order and only once, memory
//! bounded by the window, every answer as the reference model says.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::mrail::fuzz_reorder(data);
});
