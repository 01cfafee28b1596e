//! Fuzzes the active-message packets a peer sends: AM messages, RMA,
//! atomics and the peer watch. Arbitrary words never panic a decoder, and
//! every packet that decodes encodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    psmrail::hooks::packets::check_peer_packet(data);
});
