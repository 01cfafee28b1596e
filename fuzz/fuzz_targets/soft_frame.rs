//! Fuzzes the soft engine's frame decoder: arbitrary bytes in arbitrary
//! splits never panic or over-allocate, and every decoded frame re-encodes
//! to the bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::soft::fuzz_frame_decoder(data);
});
