//! [`JobSecret`]: an optional shared secret that authenticates the soft
//! engine's handshake.
//!
//! `FI_PSM_UUID` is a job *key*: it keeps jobs apart, but anyone who reads
//! it (it travels in every Hello, in clear) can join the job. For links
//! that cross networks one does not trust, every process of a job can be
//! given one secret as well (`PSMRAIL_JOB_SECRET`, the owner-only file
//! `PSMRAIL_JOB_SECRET_FILE` names, or
//! [`SoftConfig::job_secret`](super::SoftConfig::job_secret)). Both sides
//! of every connection then prove they know it before anything else
//! happens: the acceptor sends a random challenge, the dialer answers with
//! an HMAC-SHA256 of it (bound to both epids and the link) and a
//! challenge of its own, which the acceptor answers the same way. A side
//! without the secret, or with another one, is refused
//! ([`Refusal::Auth`](super::wire::Refusal::Auth)), whichever side it is.
//! The same secret authenticates every change to the name server's table
//! (`fabric::name_server`), over a challenge that server issues.
//!
//! What it protects: a stranger on the network cannot connect to the job
//! (nor pass for one of its endpoints), whatever it learned from traffic
//! it saw. What it does not: the traffic itself is neither encrypted nor
//! integrity-protected after the handshake, so someone who can *change*
//! packets on the path can still read and alter messages (use an encrypted
//! network — a VPN, WireGuard, IPsec — for that); and every process given
//! the secret is trusted alike.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::sync::Arc;

/// The environment variable that gives the secret.
pub const JOB_SECRET_VAR: &str = "PSMRAIL_JOB_SECRET";

/// The environment variable that names a file holding the secret, which
/// keeps it out of the process environment (see
/// [`JobSecret::from_vars`]).
pub const JOB_SECRET_FILE_VAR: &str = "PSMRAIL_JOB_SECRET_FILE";

/// Fewest bytes a secret may have.
pub const MIN_SECRET_LEN: usize = 16;

/// Bytes of a handshake challenge.
pub(crate) const NONCE_LEN: usize = 16;

/// Bytes of a proof (HMAC-SHA256).
pub(crate) const MAC_LEN: usize = 32;

/// A job's shared secret (its bytes are never printed).
///
/// ```
/// use psmrail::engine::soft::JobSecret;
///
/// let s = JobSecret::new(b"correct horse battery staple".to_vec()).unwrap();
/// assert_eq!(format!("{s:?}"), "JobSecret(28 bytes)");
/// assert!(JobSecret::new(b"short".to_vec()).is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct JobSecret(Arc<[u8]>);

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobSecret({} bytes)", self.0.len())
    }
}

/// Which side a proof comes from (each side's proof is bound to its role,
/// so one cannot be replayed as the other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProofSide {
    Dialer,
    Acceptor,
}

impl JobSecret {
    /// A secret of at least [`MIN_SECRET_LEN`] bytes; `Inval` otherwise.
    pub fn new(bytes: Vec<u8>) -> crate::Result<JobSecret> {
        if bytes.len() < MIN_SECRET_LEN {
            return Err(crate::Error::new(
                crate::ErrorKind::Inval,
                format!(
                    "a job secret needs at least {MIN_SECRET_LEN} bytes, got {}",
                    bytes.len()
                ),
            ));
        }
        Ok(JobSecret(bytes.into()))
    }

    /// The secret the process environment gives ([`from_vars`](Self::from_vars)).
    pub fn from_env() -> crate::Result<Option<JobSecret>> {
        Self::from_vars(&crate::config::ProcessEnv)
    }

    /// The secret `vars` give: the value of [`JOB_SECRET_VAR`], or the
    /// contents of the file [`JOB_SECRET_FILE_VAR`] names (one trailing
    /// newline dropped); `None` when neither is set.
    ///
    /// # Errors
    /// `Inval` naming the variable (and never showing the secret): both
    /// are set; the value is not UTF-8, is blank, has whitespace at either
    /// end or a control character, or is shorter than [`MIN_SECRET_LEN`];
    /// the file cannot be read, is not a regular file, may be accessed by
    /// group or others (it must be `chmod 600` or `400`), or holds fewer
    /// than [`MIN_SECRET_LEN`] bytes, only whitespace, or more than 4096.
    pub fn from_vars(vars: &dyn crate::config::VarSource) -> crate::Result<Option<JobSecret>> {
        let bytes = crate::config::secret::read_secret(
            vars,
            JOB_SECRET_VAR,
            JOB_SECRET_FILE_VAR,
            MIN_SECRET_LEN,
        )?;
        bytes.map(JobSecret::new).transpose()
    }

    /// The secret's bytes, as an HMAC key (link keys are derived under
    /// it: `link_key`).
    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The proof `side` gives for `challenge` on the link `link` between
    /// `dialer` and `acceptor`.
    pub(crate) fn prove(&self, t: &Transcript) -> [u8; MAC_LEN] {
        self.mac(t).finalize().into_bytes().into()
    }

    /// Whether `proof` is the proof `t` calls for (compared in constant
    /// time).
    pub(crate) fn check(&self, t: &Transcript, proof: &[u8; MAC_LEN]) -> bool {
        self.mac(t).verify_slice(proof).is_ok()
    }

    /// The HMAC-SHA256 of `label` then each of `parts`: a proof for a
    /// protocol other than the handshake, whose fixed-length `label` keeps
    /// its proofs apart from every other use of the secret.
    pub(crate) fn prove_parts(&self, label: &[u8; 32], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        self.mac_parts(label, parts).finalize().into_bytes().into()
    }

    /// Whether `proof` is [`prove_parts`](Self::prove_parts)`(label,
    /// parts)` (compared in constant time).
    pub(crate) fn check_parts(&self, label: &[u8; 32], parts: &[&[u8]], proof: &[u8]) -> bool {
        self.mac_parts(label, parts).verify_slice(proof).is_ok()
    }

    fn mac_parts(&self, label: &[u8; 32], parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m
    }

    fn mac(&self, t: &Transcript) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(match t.side {
            ProofSide::Dialer => b"psmrail soft handshake: dialer  ",
            ProofSide::Acceptor => b"psmrail soft handshake: acceptor",
        });
        m.update(t.challenge);
        m.update(&t.dialer.to_le_bytes());
        m.update(&t.acceptor.to_le_bytes());
        m.update(&t.link.to_le_bytes());
        m
    }
}

/// What a proof binds: who proves, the challenge it answers, both epids
/// and the link.
pub(crate) struct Transcript<'a> {
    pub side: ProofSide,
    pub challenge: &'a [u8; NONCE_LEN],
    pub dialer: u64,
    pub acceptor: u64,
    pub link: u64,
}

/// A fresh random challenge (the operating system's generator).
pub(crate) fn new_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    if getrandom::fill(&mut n).is_err() {
        // No system generator: the standard library's per-process keys
        // still make the value unpredictable to others.
        let a = super::protocol::random_seed().to_le_bytes();
        let b = super::protocol::random_seed().to_le_bytes();
        n[..8].copy_from_slice(&a);
        n[8..].copy_from_slice(&b);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_side_nonce_epids_and_link() {
        let s = JobSecret::new(vec![7; 32]).unwrap();
        let other = JobSecret::new(vec![8; 32]).unwrap();
        let n = [1u8; NONCE_LEN];
        let t = |side, challenge, dialer, acceptor, link| Transcript {
            side,
            challenge,
            dialer,
            acceptor,
            link,
        };
        let p = s.prove(&t(ProofSide::Dialer, &n, 1, 2, 3));
        assert!(s.check(&t(ProofSide::Dialer, &n, 1, 2, 3), &p));
        assert!(!s.check(&t(ProofSide::Acceptor, &n, 1, 2, 3), &p));
        assert!(!s.check(&t(ProofSide::Dialer, &[2u8; NONCE_LEN], 1, 2, 3), &p));
        assert!(!s.check(&t(ProofSide::Dialer, &n, 9, 2, 3), &p));
        assert!(!s.check(&t(ProofSide::Dialer, &n, 1, 9, 3), &p));
        assert!(!s.check(&t(ProofSide::Dialer, &n, 1, 2, 9), &p));
        assert!(!other.check(&t(ProofSide::Dialer, &n, 1, 2, 3), &p));
        assert_ne!(new_nonce(), new_nonce());
    }

    #[test]
    fn proofs_over_parts_bind_label_and_every_part() {
        let s = JobSecret::new(vec![7; 32]).unwrap();
        let other = JobSecret::new(vec![8; 32]).unwrap();
        let label = b"psmrail test label: one.........";
        let p = s.prove_parts(label, &[b"ab", b"c"]);
        assert!(s.check_parts(label, &[b"ab", b"c"], &p));
        assert!(!s.check_parts(b"psmrail test label: two.........", &[b"ab", b"c"], &p));
        assert!(!s.check_parts(label, &[b"ab", b"d"], &p));
        assert!(!s.check_parts(label, &[b"ab", b"c"], &p[..31]));
        assert!(!other.check_parts(label, &[b"ab", b"c"], &p));
        // The handshake's proofs are another domain.
        let n = [1u8; NONCE_LEN];
        let t = Transcript {
            side: ProofSide::Dialer,
            challenge: &n,
            dialer: 1,
            acceptor: 2,
            link: 3,
        };
        assert_ne!(
            s.prove(&t),
            s.prove_parts(
                b"psmrail soft handshake: dialer  ",
                &[&n, &1u64.to_le_bytes()]
            )
        );
    }
}
