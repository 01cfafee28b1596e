//! Fuzzes the name server's wire format and server sessions: arbitrary
//! bytes decoded as a request and as a reply never panic, decoded frames
//! re-encode to their bytes, and sessions fed the bytes in pieces agree with
//! the decoder and with a model of C's table rules.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::name_server::check_frame(data);
});
