//! Payloads of every test: the one byte pattern messages and regions are
//! filled with, the seed a received pattern carries, the hash a remote
//! process reports, hex for command lines, payloads named on a command
//! line, and a byte-for-byte check.
#![allow(dead_code)]

/// `len` bytes that differ with `seed` and at every 8-byte word, so a
/// misplaced or stale chunk shows. The first word is the seed itself
/// (little-endian, cut short below 8 bytes): a receiver can name the
/// message it got ([`carried_seed`]), and short payloads of different
/// seeds differ.
pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for (j, chunk) in v.chunks_mut(8).enumerate() {
        let w = if j == 0 {
            seed
        } else {
            ((j as u64) ^ seed.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        };
        chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
    }
    v
}

/// The seed a received [`pattern`] carries, when it is long enough.
pub(crate) fn carried_seed(bytes: &[u8]) -> String {
    match bytes.get(..8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")).to_string(),
        None => "?".into(),
    }
}

/// A payload named on a command line: `pat:<len>:<seed>` ([`pattern`]),
/// `fill:<len>:<byte>`, `str:<text>`.
pub(crate) fn from_spec(spec: &str) -> Vec<u8> {
    let mut it = spec.splitn(3, ':');
    match (it.next(), it.next(), it.next()) {
        (Some("pat"), Some(n), Some(seed)) => pattern(n.parse().unwrap(), seed.parse().unwrap()),
        (Some("fill"), Some(n), Some(b)) => vec![b.parse().unwrap(); n.parse().unwrap()],
        (Some("str"), Some(text), None) => text.as_bytes().to_vec(),
        _ => panic!("bad payload spec {spec:?}"),
    }
}

/// FNV-1a of every byte: how a remote process reports what it holds.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `bytes` in lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a [`hex`] string.
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
