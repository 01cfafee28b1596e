//! Payloads of the two-process tests (`ops_remote.rs`, `rma_remote.rs`):
//! patterns that show a misplaced chunk, the hash the remote reports, hex
//! for the command lines, and a byte-for-byte check.
#![allow(dead_code)]

/// `len` bytes that differ at every offset modulo any small period, so a
/// misplaced chunk shows.
pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i ^ (seed << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect()
}

/// FNV-1a of every byte: how the remote reports what it holds.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex byte"))
        .collect()
}

/// Asserts `got == want`, naming the first byte that differs.
pub(crate) fn check_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {at} is {:#04x}, expected {:#04x}",
            got[at], want[at]
        );
    }
}
