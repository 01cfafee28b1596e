//! [`LinkKey`]: the secret two endpoints share for one link, which a
//! resumption must prove.
//!
//! A link outlives its transport: when a connection breaks, the dialer
//! connects again and asks the acceptor to resume the link by its id. The
//! id alone must not be enough, or anyone who learns or guesses it could
//! take the link over (and the messages sent to its peer). So every link
//! has a key, made at its first handshake from two random halves, one
//! from each side (the Session frames' seals), and every resumption
//! carries a proof of it: an HMAC-SHA256, truncated to
//! [`SEAL_LEN`] bytes, over the link id, the resume count, the
//! resumption's generation and both incarnations, each side's proof bound
//! to its role. A generation is taken once: an acceptor takes only a
//! generation higher than the last it took, so a resumption seen on the
//! wire cannot be played again.
//!
//! Without a job secret, the halves cross the network in clear: the key
//! keeps out whoever did not see the link's first handshake (a stranger
//! who guesses ids, or who sees this endpoint's other links), not someone
//! who reads all of its traffic. With a job secret the key is an HMAC of
//! the halves under the secret, unknown to whoever lacks the secret
//! even when they saw every byte.
//!
//! Link ids, key halves and incarnations all come from the operating
//! system's generator ([`random_bytes`]), one draw each: seeing any number
//! of them tells nothing about the others.

use super::job_secret::JobSecret;
use super::wire::SEAL_LEN;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

/// One half of a link key, as a Session frame carries it.
pub(crate) type KeyHalf = [u8; SEAL_LEN];

/// A link's key (its bytes are never printed).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LinkKey([u8; 32]);

impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// Which side of a link a resumption proof comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Dialer,
    Acceptor,
}

/// What a resumption proof binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resumption {
    pub link: u64,
    /// The resume count the proving side sends.
    pub resume: u64,
    pub generation: u64,
    pub dialer_incarnation: u64,
    pub acceptor_incarnation: u64,
}

/// Who the link is between, for [`LinkKey::derive`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkEnds {
    pub link: u64,
    pub dialer_epid: u64,
    pub acceptor_epid: u64,
    pub dialer_half: KeyHalf,
    pub acceptor_half: KeyHalf,
}

/// The key HMAC takes when there is no job secret (the halves are the
/// secret then).
const NO_SECRET: &[u8] = b"psmrail soft link key, no job secret";

impl LinkKey {
    /// The key of the link `ends` describes; with `secret`, an HMAC under
    /// it, so that only the job's processes can compute it.
    pub(crate) fn derive(secret: Option<&JobSecret>, ends: &LinkEnds) -> LinkKey {
        let key = secret.map_or(NO_SECRET, |s| s.bytes());
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
        m.update(b"psmrail soft link key v3");
        m.update(&ends.link.to_le_bytes());
        m.update(&ends.dialer_epid.to_le_bytes());
        m.update(&ends.acceptor_epid.to_le_bytes());
        m.update(&ends.dialer_half);
        m.update(&ends.acceptor_half);
        LinkKey(m.finalize().into_bytes().into())
    }

    fn mac(&self, side: Side, r: &Resumption) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(match side {
            Side::Dialer => b"psmrail soft resumption: dialer  ",
            Side::Acceptor => b"psmrail soft resumption: acceptor",
        });
        for v in [
            r.link,
            r.resume,
            r.generation,
            r.dialer_incarnation,
            r.acceptor_incarnation,
        ] {
            m.update(&v.to_le_bytes());
        }
        m
    }

    /// The seal `side` sends with resumption `r`.
    pub(crate) fn seal(&self, side: Side, r: &Resumption) -> [u8; SEAL_LEN] {
        let full: [u8; 32] = self.mac(side, r).finalize().into_bytes().into();
        let mut s = [0u8; SEAL_LEN];
        s.copy_from_slice(&full[..SEAL_LEN]);
        s
    }

    /// Whether `seal` is `side`'s seal of `r` (compared in constant time).
    pub(crate) fn check(&self, side: Side, r: &Resumption, seal: &[u8; SEAL_LEN]) -> bool {
        self.mac(side, r).verify_truncated_left(seal).is_ok()
    }
}

/// Fills `buf` from the operating system's generator. If it fails (it
/// does not on Linux once booted), the standard library's per-process
/// hasher keys stand in, drawn afresh for every 8 bytes.
pub(crate) fn random_bytes(buf: &mut [u8]) {
    if getrandom::fill(buf).is_ok() {
        return;
    }
    for chunk in buf.chunks_mut(8) {
        let v = crate::engine::random::random_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A fresh key half.
pub(crate) fn new_half() -> KeyHalf {
    let mut h = [0u8; SEAL_LEN];
    random_bytes(&mut h);
    h
}

/// A fresh random link id (never 0: 0 is not a link).
pub(crate) fn new_link_id() -> u64 {
    loop {
        let id = crate::engine::random::random_u64();
        if id != 0 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> LinkEnds {
        LinkEnds {
            link: 9,
            dialer_epid: 1,
            acceptor_epid: 2,
            dialer_half: [3; SEAL_LEN],
            acceptor_half: [4; SEAL_LEN],
        }
    }

    fn resumption() -> Resumption {
        Resumption {
            link: 9,
            resume: 100,
            generation: 1,
            dialer_incarnation: 5,
            acceptor_incarnation: 6,
        }
    }

    #[test]
    fn seals_bind_side_link_counts_generation_and_incarnations() {
        let k = LinkKey::derive(None, &ends());
        let r = resumption();
        let s = k.seal(Side::Dialer, &r);
        assert!(k.check(Side::Dialer, &r, &s));
        assert!(!k.check(Side::Acceptor, &r, &s));
        let changed = [
            Resumption { link: 8, ..r },
            Resumption { resume: 101, ..r },
            Resumption { generation: 2, ..r },
            Resumption {
                dialer_incarnation: 7,
                ..r
            },
            Resumption {
                acceptor_incarnation: 7,
                ..r
            },
        ];
        for other in changed {
            assert!(!k.check(Side::Dialer, &other, &s), "{other:?}");
        }
        let mut flipped = s;
        flipped[SEAL_LEN - 1] ^= 1;
        assert!(!k.check(Side::Dialer, &r, &flipped));
    }

    #[test]
    fn the_key_depends_on_both_halves_the_ends_and_the_secret() {
        let base = LinkKey::derive(None, &ends());
        let variants = [
            LinkEnds {
                dialer_half: [0; SEAL_LEN],
                ..ends()
            },
            LinkEnds {
                acceptor_half: [0; SEAL_LEN],
                ..ends()
            },
            LinkEnds { link: 10, ..ends() },
            LinkEnds {
                dialer_epid: 3,
                ..ends()
            },
            LinkEnds {
                acceptor_epid: 3,
                ..ends()
            },
        ];
        for v in variants {
            assert_ne!(LinkKey::derive(None, &v), base, "{v:?}");
        }
        let secret = JobSecret::new(vec![1; 16]).unwrap();
        let other = JobSecret::new(vec![2; 16]).unwrap();
        let with = LinkKey::derive(Some(&secret), &ends());
        assert_ne!(with, base);
        assert_ne!(with, LinkKey::derive(Some(&other), &ends()));
        assert_eq!(with, LinkKey::derive(Some(&secret), &ends()));
        assert_eq!(format!("{with:?}"), "LinkKey(..)");
    }

    #[test]
    fn ids_and_halves_are_independent_draws() {
        let ids: std::collections::HashSet<u64> = (0..256).map(|_| new_link_id()).collect();
        assert_eq!(ids.len(), 256);
        assert!(!ids.contains(&0));
        // Consecutive ids share no simple relation (what a seeded
        // sequence would show): their differences are all distinct too.
        let v: Vec<u64> = (0..64).map(|_| new_link_id()).collect();
        let diffs: std::collections::HashSet<u64> =
            v.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert_eq!(diffs.len(), 63);
        assert_ne!(new_half(), new_half());
    }
}
