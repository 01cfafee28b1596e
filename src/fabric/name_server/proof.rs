//! The proof of the job secret that a session's ADD or DEL carries, pure.
//!
//! HMAC-SHA256 under the job secret ([`JobSecret`]) of a label of this
//! protocol, the session's nonce (the server's CHALLENGE, fresh random
//! bytes for every session), the request's number in the session (0 for
//! the first ADD or DEL after the challenge, counted by both sides) and the
//! request itself (op, service, epid). So a proof is good for one request,
//! once, on one session: replayed on another session (another nonce) or
//! again on the same one (another number) it is wrong, and so is one made
//! with another secret. The server compares in constant time.

use super::wire::{Change, NONCE_LEN, PROOF_LEN};
use crate::engine::soft::JobSecret;
use crate::engine::Epid;

// The secret's nonces and proofs are the wire's.
const _: () = assert!(NONCE_LEN == crate::engine::soft::NONCE_LEN);
const _: () = assert!(PROOF_LEN == crate::engine::soft::MAC_LEN);

/// Keeps these proofs apart from every other use of the secret.
const LABEL: &[u8; 32] = b"psmrail name server: session v1 ";

/// What one proof covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transcript {
    /// The session's nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The request's number in the session.
    pub seq: u64,
    /// ADD or DEL.
    pub change: Change,
    /// The service.
    pub service: u32,
    /// The epid.
    pub epid: Epid,
}

impl Transcript {
    fn parts<R>(&self, with: impl FnOnce(&[&[u8]]) -> R) -> R {
        let op = [self.change.op() as u8];
        with(&[
            &self.nonce,
            &self.seq.to_le_bytes(),
            &op,
            &self.service.to_le_bytes(),
            &self.epid.0.to_le_bytes(),
        ])
    }

    /// The proof the request calls for.
    pub(crate) fn prove(&self, secret: &JobSecret) -> [u8; PROOF_LEN] {
        self.parts(|p| secret.prove_parts(LABEL, p))
    }

    /// Whether `proof` is that proof (constant time).
    pub(crate) fn check(&self, secret: &JobSecret, proof: &[u8; PROOF_LEN]) -> bool {
        self.parts(|p| secret.check_parts(LABEL, p, proof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_good_for_one_request_of_one_session() {
        let s = JobSecret::new(b"a name server test secret".to_vec()).unwrap();
        let t = Transcript {
            nonce: [7; NONCE_LEN],
            seq: 3,
            change: Change::Add,
            service: 5,
            epid: Epid(0x55),
        };
        let p = t.prove(&s);
        assert!(t.check(&s, &p));
        let other = [
            Transcript {
                nonce: [8; NONCE_LEN],
                ..t
            },
            Transcript { seq: 4, ..t },
            Transcript {
                change: Change::Del,
                ..t
            },
            Transcript { service: 6, ..t },
            Transcript {
                epid: Epid(0x56),
                ..t
            },
        ];
        for o in other {
            assert!(!o.check(&s, &p), "{o:?}");
        }
        let stranger = JobSecret::new(b"another secret, same length".to_vec()).unwrap();
        assert!(!t.check(&stranger, &p));
        assert_ne!(t.prove(&stranger), p);
    }
}
