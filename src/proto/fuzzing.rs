//! Checks for the `peer_packets` fuzz target (and its corpus replay in
//! `tests/fuzz_corpus.rs`): the active-message packets a peer sends us —
//! AM messages, RMA, atomics and the peer watch — decoded from arbitrary
//! words never panic, and every packet that decodes encodes back to
//! itself.

use crate::proto::am_msg::wire as am;
use crate::proto::atomic::wire as atomic;
use crate::proto::peer_watch::{identity::Identity, wire as watch};
use crate::proto::rma::wire as rma;

/// Decodes `data` as one peer packet: byte 0 picks the protocol, the next
/// bytes are up to 10 argument words (little-endian), the rest the payload.
/// Whether it decoded. Panics (the fuzzer's finding) if a decoded packet
/// does not survive an encode / decode round trip.
pub fn check_peer_packet(data: &[u8]) -> bool {
    let Some((&which, rest)) = data.split_first() else {
        return false;
    };
    let nargs = usize::from(which >> 4).min(10).min(rest.len() / 8);
    let (words, payload) = rest.split_at(nargs * 8);
    let args: Vec<u64> = words
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
        .collect();
    match which & 0x3 {
        0 => match am::Packet::decode(&args) {
            Ok(p) => {
                assert_eq!(am::Packet::decode(p.encode().as_slice()), Ok(p));
                true
            }
            Err(_) => false,
        },
        1 => match rma::Packet::decode(&args, payload.len()) {
            Ok(p) => {
                assert_eq!(
                    rma::Packet::decode(p.encode().as_slice(), payload.len()),
                    Ok(p)
                );
                true
            }
            Err(_) => false,
        },
        2 => match atomic::decode(&args) {
            Ok(atomic::AtomicPacket::Request(r)) => {
                let again = atomic::decode(&r.encode()).ok();
                assert_eq!(again, Some(atomic::AtomicPacket::Request(r)));
                true
            }
            Ok(atomic::AtomicPacket::Reply { id, status }) => {
                let again = atomic::decode(&atomic::encode_reply(id, status)).ok();
                assert_eq!(again, Some(atomic::AtomicPacket::Reply { id, status }));
                true
            }
            Err(_) => false,
        },
        _ => match watch::Packet::decode(&args, payload) {
            Ok(p) => {
                let (word, bytes) = p.encode();
                assert_eq!(watch::Packet::decode(&[word], &bytes), Ok(p));
                if let watch::Packet::Hello(Some(id)) = p {
                    assert_eq!(Identity::decode(&id.encode()), Some(id));
                }
                true
            }
            Err(_) => false,
        },
    }
}
