//! The handshake: who may talk to whom.
//!
//! The dialer sends Hello; the acceptor checks it and answers HelloAck (its
//! own Hello contents) or Refuse with a reason; the dialer checks the
//! HelloAck the same way and refuses it likewise. Like PSM, which refuses
//! endpoints of another job, a peer with another job UUID, another protocol
//! version or a foreign magic is refused, and **both** sides learn why: the
//! refuser from the Hello it judged, the refused side from the Refuse
//! frame's reason and the refuser's protocol version.
//!
//! The job UUID is the job's only key, so a Refuse never carries it: its
//! UUID field is sent as zeros and ignored on receipt. Otherwise anyone could
//! send a Hello with a made-up UUID, read the real one from the refusal and
//! connect with it. The refuser knows both UUIDs and reports them
//! ([`Refusal::UuidMismatch`]); the refused side knows only its own and that
//! the peer's job differs ([`Refusal::OtherJob`]).

use super::{FrameKind, FrameLimits, MAGIC, PROTOCOL_VERSION};
use crate::engine::Epid;
use std::fmt;

/// A job key (`FI_PSM_UUID`): only endpoints of the same job connect.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct JobUuid(pub [u8; 16]);

impl fmt::Display for JobUuid {
    /// The usual 8-4-4-4-12 hex form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for JobUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobUuid({self})")
    }
}

/// The body of Hello and HelloAck.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// [`MAGIC`] from a psmrail soft engine.
    pub magic: [u8; 8],
    /// The sender's protocol version.
    pub version: u16,
    /// The sender's job.
    pub uuid: JobUuid,
    /// The sender's endpoint id.
    pub epid: Epid,
    /// What the sender accepts.
    pub limits: FrameLimits,
}

impl Hello {
    /// This build's Hello for an endpoint.
    pub fn ours(uuid: JobUuid, epid: Epid, limits: FrameLimits) -> Hello {
        Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            uuid,
            epid,
            limits,
        }
    }

    /// Whether magic and version are this build's.
    pub fn is_our_protocol(&self) -> bool {
        self.magic == MAGIC && self.version == PROTOCOL_VERSION
    }
}

/// Reason code of a Refuse frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RefuseCode {
    /// Not our protocol.
    BadMagic = 1,
    /// Another protocol version.
    VersionMismatch = 2,
    /// Another job.
    UuidMismatch = 3,
    /// The handshake was not followed.
    Protocol = 4,
    /// A resumption named a link the acceptor does not have (any more).
    UnknownLink = 5,
    /// The dialer could not prove it is the endpoint it claims to be.
    Identity = 6,
    /// The job-secret authentication failed (a wrong proof, or only one
    /// side has a secret).
    Auth = 7,
}

impl RefuseCode {
    /// The code for a byte.
    pub fn from_u8(b: u8) -> Option<RefuseCode> {
        Some(match b {
            1 => RefuseCode::BadMagic,
            2 => RefuseCode::VersionMismatch,
            3 => RefuseCode::UuidMismatch,
            4 => RefuseCode::Protocol,
            5 => RefuseCode::UnknownLink,
            6 => RefuseCode::Identity,
            7 => RefuseCode::Auth,
            _ => return None,
        })
    }
}

/// The body of a Refuse frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refuse {
    /// Why.
    pub code: RefuseCode,
    /// The refuser's protocol version.
    pub version: u16,
    /// Where the layout, frozen across versions, has room for a job UUID.
    /// A refuser sends zeros ([`Refusal::to_frame`]): naming its job would
    /// hand the job's key to whoever it refuses. A receiver ignores the
    /// field ([`Refusal::from_frame`]).
    pub uuid: JobUuid,
}

/// Why a connection was refused; both sides report the same one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The peer does not speak this protocol.
    #[error("the peer does not speak the psmrail soft protocol (bad magic)")]
    BadMagic,
    /// Another protocol version.
    #[error("protocol version mismatch: ours is {ours}, the peer's is {theirs}")]
    VersionMismatch {
        /// This side's version.
        ours: u16,
        /// The other side's.
        theirs: u16,
    },
    /// Another job, as the refusing side sees it: the peer's Hello named
    /// `theirs`.
    #[error("the peer belongs to another job: its UUID is {theirs}, ours is {ours}")]
    UuidMismatch {
        /// This side's job.
        ours: JobUuid,
        /// The other side's, from its Hello.
        theirs: JobUuid,
    },
    /// Another job, as the refused side learns it from a Refuse frame,
    /// which does not say which job the peer belongs to.
    #[error(
        "the peer belongs to another job: it refused our job UUID {ours} (a refusal does not \
         name the peer's)"
    )]
    OtherJob {
        /// This side's job.
        ours: JobUuid,
    },
    /// The handshake was not followed (some other frame came first).
    #[error("the handshake was not followed")]
    Protocol,
    /// The peer has no link of that id to resume (it closed it, or it is
    /// another process at the same address).
    #[error("the peer has no such link to resume")]
    UnknownLink,
    /// The dialer could not prove it is the endpoint its Hello names (a
    /// Unix-socket peer that is not the process listening for that epid,
    /// a TCP peer from another address or without the Proof).
    #[error("the dialer could not prove it is the endpoint it claims to be")]
    Identity,
    /// The job-secret authentication failed: a proof did not match, or
    /// only one side has a secret (`PSMRAIL_JOB_SECRET`).
    #[error("job secret authentication failed (a wrong secret, or only one side has one)")]
    Auth,
}

impl Refusal {
    /// The wire code.
    pub fn code(&self) -> RefuseCode {
        match self {
            Refusal::BadMagic => RefuseCode::BadMagic,
            Refusal::VersionMismatch { .. } => RefuseCode::VersionMismatch,
            Refusal::UuidMismatch { .. } | Refusal::OtherJob { .. } => RefuseCode::UuidMismatch,
            Refusal::Protocol => RefuseCode::Protocol,
            Refusal::UnknownLink => RefuseCode::UnknownLink,
            Refusal::Identity => RefuseCode::Identity,
            Refusal::Auth => RefuseCode::Auth,
        }
    }

    /// The Refuse frame that tells the peer, sent by the side whose Hello
    /// is `ours`: the reason and `ours`'s protocol version. Its UUID field
    /// is zeros whatever the reason; neither side's job UUID leaves in a
    /// refusal.
    pub fn to_frame(&self, ours: &Hello) -> Refuse {
        Refuse {
            code: self.code(),
            version: ours.version,
            uuid: JobUuid::default(),
        }
    }

    /// The refusal a Refuse frame reports, seen by the side whose Hello is
    /// `ours`. The frame's UUID field is ignored, so another job reads as
    /// [`Refusal::OtherJob`].
    pub fn from_frame(r: &Refuse, ours: &Hello) -> Refusal {
        match r.code {
            RefuseCode::BadMagic => Refusal::BadMagic,
            RefuseCode::VersionMismatch => Refusal::VersionMismatch {
                ours: ours.version,
                theirs: r.version,
            },
            RefuseCode::UuidMismatch => Refusal::OtherJob { ours: ours.uuid },
            RefuseCode::Protocol => Refusal::Protocol,
            RefuseCode::UnknownLink => Refusal::UnknownLink,
            RefuseCode::Identity => Refusal::Identity,
            RefuseCode::Auth => Refusal::Auth,
        }
    }
}

/// Judges the other side's Hello (or HelloAck) against ours: same magic,
/// same version, same job.
pub fn check_hello(ours: &Hello, theirs: &Hello) -> Result<(), Refusal> {
    if theirs.magic != ours.magic {
        return Err(Refusal::BadMagic);
    }
    if theirs.version != ours.version {
        return Err(Refusal::VersionMismatch {
            ours: ours.version,
            theirs: theirs.version,
        });
    }
    if theirs.uuid != ours.uuid {
        return Err(Refusal::UuidMismatch {
            ours: ours.uuid,
            theirs: theirs.uuid,
        });
    }
    Ok(())
}

/// A handshake that did not complete.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// This side refused the peer.
    #[error("refused the peer: {0}")]
    Refused(Refusal),
    /// The peer refused this side.
    #[error("refused by the peer: {0}")]
    RefusedByPeer(Refusal),
    /// A frame other than the expected handshake frame came first.
    #[error("expected the handshake, got a {got:?} frame")]
    UnexpectedFrame {
        /// What came.
        got: FrameKind,
    },
    /// The dialed address answered with another endpoint's id.
    #[error("dialed {expected} but reached {got}")]
    WrongEpid {
        /// The epid dialed.
        expected: Epid,
        /// The epid that answered.
        got: Epid,
    },
}

impl HandshakeError {
    /// The refusal, on either side.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            HandshakeError::Refused(r) | HandshakeError::RefusedByPeer(r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{encode, Frame};
    use super::*;
    use bytes::BytesMut;

    const OURS: JobUuid = JobUuid([0xa5; 16]);

    fn ours() -> Hello {
        Hello::ours(OURS, Epid(10), FrameLimits::DEFAULT)
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn same_job_is_accepted() {
        let mut theirs = ours();
        theirs.epid = Epid(11);
        theirs.limits.max_eager = 10;
        assert_eq!(check_hello(&ours(), &theirs), Ok(()));
    }

    #[test]
    fn refusals_read_the_same_on_both_sides() {
        let a = ours();
        type Case = (Hello, fn(&Refusal) -> bool);
        let cases: Vec<Case> = vec![
            (
                Hello {
                    uuid: JobUuid([2; 16]),
                    ..ours()
                },
                |r| matches!(r, Refusal::UuidMismatch { .. } | Refusal::OtherJob { .. }),
            ),
            (
                Hello {
                    version: 9,
                    ..ours()
                },
                |r| matches!(r, Refusal::VersionMismatch { .. }),
            ),
            (
                Hello {
                    magic: *b"HTTP/1.1",
                    ..ours()
                },
                |r| *r == Refusal::BadMagic,
            ),
        ];
        for (b, want) in cases {
            // a judges b and refuses; b reads the Refuse frame.
            let at_a = check_hello(&a, &b).unwrap_err();
            assert!(want(&at_a), "{at_a}");
            let at_b = Refusal::from_frame(&at_a.to_frame(&a), &b);
            assert!(want(&at_b), "{at_b}");
            assert_eq!(at_a.code(), at_b.code());
            match (&at_a, &at_b) {
                (
                    Refusal::VersionMismatch { ours, theirs },
                    Refusal::VersionMismatch {
                        ours: o2,
                        theirs: t2,
                    },
                ) => assert_eq!((ours, theirs), (t2, o2)),
                (Refusal::UuidMismatch { ours, theirs }, Refusal::OtherJob { ours: o2 }) => {
                    // The refuser saw both jobs; the refused side knows
                    // only its own.
                    assert_eq!((ours, theirs), (&a.uuid, &b.uuid));
                    assert_eq!(o2, &b.uuid);
                }
                (Refusal::BadMagic, Refusal::BadMagic) => {}
                other => panic!("the two sides disagree: {other:?}"),
            }
        }
    }

    #[test]
    fn refuse_frames_never_carry_a_job_uuid() {
        let refusals = [
            Refusal::BadMagic,
            Refusal::VersionMismatch { ours: 1, theirs: 2 },
            Refusal::UuidMismatch {
                ours: OURS,
                theirs: JobUuid([2; 16]),
            },
            Refusal::OtherJob { ours: OURS },
            Refusal::Protocol,
        ];
        for r in refusals {
            let frame = r.to_frame(&ours());
            assert_eq!(frame.code, r.code());
            assert_eq!(frame.version, PROTOCOL_VERSION);
            assert_eq!(frame.uuid, JobUuid([0; 16]), "{r:?}");
            let mut bytes = BytesMut::new();
            encode(&Frame::Refuse(frame), &mut bytes);
            assert!(!contains(&bytes, &OURS.0), "{r:?}: {bytes:02x?}");
            assert!(!contains(&bytes, &[2; 16]), "{r:?}: {bytes:02x?}");
        }
    }

    #[test]
    fn a_uuid_in_a_received_refuse_is_ignored() {
        // A peer of another build may still fill the field; it is not
        // taken for the peer's job.
        let leaky = Refuse {
            code: RefuseCode::UuidMismatch,
            version: PROTOCOL_VERSION,
            uuid: JobUuid([0x3c; 16]),
        };
        let r = Refusal::from_frame(&leaky, &ours());
        assert_eq!(r, Refusal::OtherJob { ours: OURS });
        assert!(!r.to_string().contains("3c3c"), "{r}");
    }

    #[test]
    fn messages_are_clear() {
        // The refusing side names both jobs.
        let r = Refusal::UuidMismatch {
            ours: JobUuid([0xab; 16]),
            theirs: JobUuid([0; 16]),
        };
        let e = HandshakeError::Refused(r.clone());
        assert_eq!(
            e.to_string(),
            "refused the peer: the peer belongs to another job: its UUID is \
             00000000-0000-0000-0000-000000000000, ours is abababab-abab-abab-abab-abababababab"
        );
        assert_eq!(e.refusal(), Some(&r));
        // The refused side names its own and says the peer's differs.
        let r = Refusal::OtherJob {
            ours: JobUuid([0xab; 16]),
        };
        let e = HandshakeError::RefusedByPeer(r.clone());
        assert_eq!(
            e.to_string(),
            "refused by the peer: the peer belongs to another job: it refused our job UUID \
             abababab-abab-abab-abab-abababababab (a refusal does not name the peer's)"
        );
        assert_eq!(e.refusal(), Some(&r));
        assert_eq!(r.code(), RefuseCode::UuidMismatch);
        let v = Refusal::VersionMismatch { ours: 1, theirs: 2 };
        assert_eq!(
            v.to_string(),
            "protocol version mismatch: ours is 1, the peer's is 2"
        );
        assert_eq!(RefuseCode::from_u8(0), None);
        assert_eq!(RefuseCode::from_u8(3), Some(RefuseCode::UuidMismatch));
    }
}
