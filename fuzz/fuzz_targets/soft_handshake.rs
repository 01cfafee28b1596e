//! Fuzzes the soft engine's handshake: a hostile peer's first bytes never
//! panic, and are either accepted as the same job or refused with a reason.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::soft::fuzz_handshake(data);
});
