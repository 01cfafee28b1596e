//! Fuzzes the soft engine's shared-memory ring against a hostile peer:
//! any header, any values in the control block and the data area between
//! the honest sides' calls never panic, never reach outside the ring, and
//! give either the bytes written or `Corrupt`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::shm::fuzz_shm_ring(data);
});
