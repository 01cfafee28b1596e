//! Fuzzes the PMI-2 frame decoder with bytes a process manager might
//! send: never panics, decodes alike however reads are cut, and no frame
//! answers two requests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::bootstrap::check_pmi2_reply(data);
});
