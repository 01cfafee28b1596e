//! Fuzzes the name server's wire format and server sessions: arbitrary
//! bytes decoded as a request and as a reply never panic, decoded frames
//! (C's version 0 and the owning sessions' version 1) re-encode to their
//! bytes, and several sessions fed the bytes in pieces, interleaved, with
//! and without a job secret, agree with the decoder and with a model of
//! the table's rules (C's ADD and DEL refused, only an entry's owner
//! deleting it, a session's entries gone with it, proofs checked).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::name_server::check_frame(data);
});
