//! Fuzzes the PMI-1 wire decoder with bytes a process manager might send:
//! never panics, decodes alike however reads are cut, and no line answers
//! two requests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::bootstrap::check_pmi_reply(data);
});
