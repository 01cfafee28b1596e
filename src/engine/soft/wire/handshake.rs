//! The handshake: who may talk to whom.
//!
//! The dialer sends Hello; the acceptor checks it and answers HelloAck (its
//! own Hello contents) or Refuse with a reason; the dialer checks the
//! HelloAck the same way and refuses it likewise. Like PSM, which refuses
//! endpoints of another job, a peer with another job UUID, another protocol
//! version or a foreign magic is refused, and **both** sides learn the
//! same [`Refusal`]: the refuser from the Hello it judged, the refused side
//! from the Refuse frame, which carries the refuser's version and UUID.

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
}

impl RefuseCode {
    /// The code for a byte.
    pub fn from_u8(b: u8) -> Option<RefuseCode> {
        Some(match b {
            1 => RefuseCode::BadMagic,
            2 => RefuseCode::VersionMismatch,
            3 => RefuseCode::UuidMismatch,
            4 => RefuseCode::Protocol,
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
    /// The refuser's job.
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
    /// Another job.
    #[error("the peer belongs to another job: its UUID is {theirs}, ours is {ours}")]
    UuidMismatch {
        /// This side's job.
        ours: JobUuid,
        /// The other side's.
        theirs: JobUuid,
    },
    /// The handshake was not followed (some other frame came first).
    #[error("the handshake was not followed")]
    Protocol,
}

impl Refusal {
    /// The wire code.
    pub fn code(&self) -> RefuseCode {
        match self {
            Refusal::BadMagic => RefuseCode::BadMagic,
            Refusal::VersionMismatch { .. } => RefuseCode::VersionMismatch,
            Refusal::UuidMismatch { .. } => RefuseCode::UuidMismatch,
            Refusal::Protocol => RefuseCode::Protocol,
        }
    }

    /// The Refuse frame that tells the peer, sent by the side whose Hello
    /// is `ours`.
    pub fn to_frame(&self, ours: &Hello) -> Refuse {
        Refuse {
            code: self.code(),
            version: ours.version,
            uuid: ours.uuid,
        }
    }

    /// The refusal a Refuse frame reports, seen by the side whose Hello is
    /// `ours`.
    pub fn from_frame(r: &Refuse, ours: &Hello) -> Refusal {
        match r.code {
            RefuseCode::BadMagic => Refusal::BadMagic,
            RefuseCode::VersionMismatch => Refusal::VersionMismatch {
                ours: ours.version,
                theirs: r.version,
            },
            RefuseCode::UuidMismatch => Refusal::UuidMismatch {
                ours: ours.uuid,
                theirs: r.uuid,
            },
            RefuseCode::Protocol => Refusal::Protocol,
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
    use super::*;

    fn ours() -> Hello {
        Hello::ours(JobUuid([1; 16]), Epid(10), FrameLimits::DEFAULT)
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
                |r| matches!(r, Refusal::UuidMismatch { .. }),
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
            match (&at_a, &at_b) {
                (
                    Refusal::VersionMismatch { ours, theirs },
                    Refusal::VersionMismatch {
                        ours: o2,
                        theirs: t2,
                    },
                ) => assert_eq!((ours, theirs), (t2, o2)),
                (
                    Refusal::UuidMismatch { ours, theirs },
                    Refusal::UuidMismatch {
                        ours: o2,
                        theirs: t2,
                    },
                ) => assert_eq!((ours, theirs), (t2, o2)),
                _ => {}
            }
        }
    }

    #[test]
    fn messages_are_clear() {
        let r = Refusal::UuidMismatch {
            ours: JobUuid([0xab; 16]),
            theirs: JobUuid([0; 16]),
        };
        let e = HandshakeError::RefusedByPeer(r.clone());
        assert_eq!(
            e.to_string(),
            "refused by the peer: the peer belongs to another job: its UUID is \
             00000000-0000-0000-0000-000000000000, ours is abababab-abab-abab-abab-abababababab"
        );
        assert_eq!(e.refusal(), Some(&r));
        let v = Refusal::VersionMismatch { ours: 1, theirs: 2 };
        assert_eq!(
            v.to_string(),
            "protocol version mismatch: ours is 1, the peer's is 2"
        );
        assert_eq!(RefuseCode::from_u8(0), None);
        assert_eq!(RefuseCode::from_u8(3), Some(RefuseCode::UuidMismatch));
    }
}
