//! One server-side connection as a pure state machine: bytes in, the
//! request carried out on the [`Registry`], the reply frame out.
//!
//! The caller reads into [`Session::unfilled`] (never more than the frame
//! still needs, so bytes after a command stay unread, as in C) and reports
//! what arrived with [`Session::filled`]. A bad header is refused as soon
//! as its 8 bytes are in, before any body is awaited.
//!
//! A connection is one of two kinds, decided by its first frame:
//!
//! * **A C command** (version 0): one frame, one reply, then the
//!   connection closes. QUERY is answered from anywhere. ADD and DEL are
//!   carried out never: they name no owner, so anyone could delete or
//!   replace anyone's entry with them. They are answered with an ACK of
//!   status [`STATUS_NEEDS_SESSION`](super::wire::STATUS_NEEDS_SESSION)
//!   (or [`STATUS_NOT_LOCAL`](super::wire::STATUS_NOT_LOCAL) from another
//!   host) and change nothing.
//! * **An owning session** (version 1): HELLO, answered by a CHALLENGE
//!   with the session's nonce (given to [`Session::new`], fresh for every
//!   connection), then any number of ADD and DEL, each answered by an ACK.
//!   Entries the session adds are owned by its id ([`Owner::Session`]);
//!   only it deletes them, and the caller removes them all when the
//!   connection ends ([`Registry::end_session`]). With a job secret each
//!   ADD and DEL must carry the proof for the nonce its connection was
//!   given and the request's number in it (`proof.rs`), checked before the table is
//!   looked at. A HELLO from another host is refused. Anything but ADD or
//!   DEL after the HELLO, or a session's ADD or DEL without one, is a
//!   protocol error: the caller closes the connection.

use super::access::Origin;
use super::proof::Transcript;
use super::registry::{Owner, Refusal, Registry};
use super::wire::{
    Change, Frame, Op, Reply, Request, WireError, HEADER_LEN, MAX_FRAME_LEN, NONCE_LEN, PROOF_LEN,
    SESSION_VERSION, STATUS_NOT_FOUND,
};
use crate::engine::soft::JobSecret;
use crate::engine::Epid;

/// What the connection does after a command's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Then {
    /// Close it (a C command, or a refused HELLO).
    Close,
    /// Read the next command (an owning session).
    Next,
}

/// What a session needs next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// More bytes: read into [`Session::unfilled`].
    More,
    /// The command is complete and carried out (or refused): send `reply`,
    /// then do `then`.
    Done {
        /// The command.
        request: Request,
        /// What to send back.
        reply: Frame,
        /// Whether it was carried out.
        outcome: Result<(), Refusal>,
        /// Close, or go on reading.
        then: Then,
    },
}

/// The reading side of one connection.
#[derive(Debug)]
pub(crate) struct Session {
    buf: [u8; MAX_FRAME_LEN],
    have: usize,
    need: usize,
    /// Whether `need` is the whole frame's length (the header is in).
    sized: bool,
    origin: Origin,
    id: u64,
    nonce: [u8; NONCE_LEN],
    secret: Option<JobSecret>,
    /// `None` until HELLO; then the number of the next ADD or DEL.
    seq: Option<u64>,
}

impl Session {
    /// A connection from a peer of `origin`, waiting for its first header;
    /// its entries, if it opens a session, are owned as `id`, its
    /// challenge is `nonce`, and with `secret` its requests must prove it.
    pub(crate) fn new(
        origin: Origin,
        id: u64,
        nonce: [u8; NONCE_LEN],
        secret: Option<JobSecret>,
    ) -> Self {
        Session {
            buf: [0; MAX_FRAME_LEN],
            have: 0,
            need: HEADER_LEN,
            sized: false,
            origin,
            id,
            nonce,
            secret,
            seq: None,
        }
    }

    /// The owner id of this connection's entries.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether the connection opened an owning session.
    pub(crate) fn is_open(&self) -> bool {
        self.seq.is_some()
    }

    /// Where the next bytes go: exactly what the frame still lacks (empty
    /// once a command is complete and before [`filled`](Self::filled)
    /// reported it).
    pub(crate) fn unfilled(&mut self) -> &mut [u8] {
        &mut self.buf[self.have..self.need]
    }

    /// Bytes of the current frame received so far.
    pub(crate) fn received(&self) -> usize {
        self.have
    }

    /// Records that `n` bytes were written into [`unfilled`](Self::unfilled)
    /// and, once the frame is complete, carries it out on `registry`.
    pub(crate) fn filled(&mut self, n: usize, registry: &mut Registry) -> Result<Step, WireError> {
        self.have = (self.have + n).min(self.need);
        if self.have < self.need {
            return Ok(Step::More);
        }
        if !self.sized {
            // The header is in: learn the body length, or refuse now.
            self.need = Request::frame_len(&self.buf[..HEADER_LEN])?;
            self.sized = true;
            self.check_order()?;
            if self.have < self.need {
                return Ok(Step::More);
            }
        }
        let request = Request::decode(&self.buf[..self.need])?;
        let (reply, outcome, then) = self.carry_out(request, registry);
        if then == Then::Next {
            self.have = 0;
            self.need = HEADER_LEN;
            self.sized = false;
        }
        Ok(Step::Done {
            request,
            reply: reply.encode(),
            outcome,
            then,
        })
    }

    /// A session's ADD and DEL come after its HELLO, and nothing else does.
    fn check_order(&self) -> Result<(), WireError> {
        let version = self.buf[0];
        let Some(op) = Op::from_byte(self.buf[1]) else {
            return Err(WireError::UnknownOp {
                version,
                op: self.buf[1],
            });
        };
        let session_change = version == SESSION_VERSION && matches!(op, Op::Add | Op::Del);
        match (self.is_open(), session_change) {
            (true, false) => Err(WireError::UnexpectedOp {
                got: op,
                expected: "a session's ADD or DEL",
            }),
            (false, true) => Err(WireError::UnexpectedOp {
                got: op,
                expected: "HELLO before a session's ADD or DEL",
            }),
            _ => Ok(()),
        }
    }

    fn carry_out(
        &mut self,
        request: Request,
        registry: &mut Registry,
    ) -> (Reply, Result<(), Refusal>, Then) {
        match request {
            Request::Query { service } => {
                let reply = match registry.lookup(service) {
                    Some((service, epid)) => Reply::Found { service, epid },
                    None => Reply::NotFound {
                        status: STATUS_NOT_FOUND,
                    },
                };
                (reply, Ok(()), Then::Close)
            }
            Request::Add { .. } | Request::Del { .. } => {
                let r = match self.origin {
                    Origin::Remote => Refusal::NotLocal,
                    Origin::Local => Refusal::NeedsSession,
                };
                (Reply::NotFound { status: r.status() }, Err(r), Then::Close)
            }
            Request::Hello if self.origin == Origin::Remote => {
                let r = Refusal::NotLocal;
                (Reply::Refused { status: r.status() }, Err(r), Then::Close)
            }
            Request::Hello => {
                self.seq = Some(0);
                let reply = Reply::Challenge { nonce: self.nonce };
                (reply, Ok(()), Then::Next)
            }
            Request::Session {
                change,
                service,
                epid,
                proof,
            } => {
                // `check_order` let it through only after HELLO.
                let seq = self.seq.unwrap_or(0);
                self.seq = Some(seq.wrapping_add(1));
                let outcome = self
                    .authenticate(seq, change, service, epid, proof)
                    .and_then(|()| registry.change(change, service, epid, Owner::Session(self.id)));
                let reply = match outcome {
                    Ok(()) => Reply::Done,
                    Err(r) => Reply::Refused { status: r.status() },
                };
                (reply, outcome, Then::Next)
            }
        }
    }

    /// With a secret: whether `proof` is the one request `seq` of this
    /// session calls for.
    fn authenticate(
        &self,
        seq: u64,
        change: Change,
        service: u32,
        epid: Epid,
        proof: Option<[u8; PROOF_LEN]>,
    ) -> Result<(), Refusal> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        let Some(proof) = proof else {
            return Err(Refusal::NoProof);
        };
        let t = Transcript {
            nonce: self.nonce,
            seq,
            change,
            service,
            epid,
        };
        if t.check(secret, &proof) {
            Ok(())
        } else {
            Err(Refusal::BadProof)
        }
    }

    /// Feeds `data` until a command completes, fails, or `data` runs out.
    /// Returns the bytes taken and the last step (`More` if `data` ran
    /// out first).
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        registry: &mut Registry,
    ) -> (usize, Result<Step, WireError>) {
        let mut taken = 0;
        loop {
            let space = self.unfilled();
            let n = space.len().min(data.len());
            if n == 0 {
                return (taken, Ok(Step::More));
            }
            space[..n].copy_from_slice(&data[..n]);
            data = &data[n..];
            taken += n;
            match self.filled(n, registry) {
                Ok(Step::More) => {}
                other => return (taken, other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::name_server::access::LocalHost;
    use crate::fabric::name_server::wire::{
        STATUS_BAD_PROOF, STATUS_NEEDS_SESSION, STATUS_NOT_LOCAL, STATUS_NOT_OWNER,
        STATUS_NO_PROOF, STATUS_TAKEN,
    };

    const NONCE: [u8; NONCE_LEN] = [0x42; NONCE_LEN];

    fn local(id: u64) -> Session {
        Session::new(Origin::Local, id, NONCE, None)
    }

    /// Feeds one whole frame, which must complete a command.
    fn command(
        s: &mut Session,
        frame: &[u8],
        reg: &mut Registry,
    ) -> (Reply, Result<(), Refusal>, Then) {
        let (taken, step) = s.feed(frame, reg);
        assert_eq!(taken, frame.len(), "{frame:?}");
        match step {
            Ok(Step::Done {
                reply,
                outcome,
                then,
                ..
            }) => (Reply::decode(&reply).unwrap(), outcome, then),
            other => panic!("{frame:?}: {other:?}"),
        }
    }

    fn change(change: Change, service: u32, epid: u64, proof: Option<[u8; PROOF_LEN]>) -> Frame {
        Request::Session {
            change,
            service,
            epid: Epid(epid),
            proof,
        }
        .encode()
    }

    /// A session opened with HELLO.
    fn open(s: &mut Session, reg: &mut Registry) {
        let (reply, outcome, then) = command(s, &Request::Hello.encode(), reg);
        assert_eq!(reply, Reply::Challenge { nonce: s.nonce });
        assert_eq!((outcome, then), (Ok(()), Then::Next));
        assert!(s.is_open());
    }

    #[test]
    fn byte_by_byte_session_add_then_query() {
        let mut reg = Registry::new();
        let mut s = local(1);
        for (i, b) in Request::Hello.encode().iter().enumerate() {
            let (taken, step) = s.feed(std::slice::from_ref(b), &mut reg);
            assert_eq!(taken, 1);
            assert_eq!(matches!(step, Ok(Step::Done { .. })), i == HEADER_LEN - 1);
        }
        let add = change(Change::Add, 4, 44, None);
        for (i, b) in add.iter().enumerate() {
            let (taken, step) = s.feed(std::slice::from_ref(b), &mut reg);
            assert_eq!(taken, 1);
            if i + 1 < add.len() {
                assert_eq!(step, Ok(Step::More));
            } else {
                assert_eq!(
                    step,
                    Ok(Step::Done {
                        request: Request::decode(&add).unwrap(),
                        reply: Reply::Done.encode(),
                        outcome: Ok(()),
                        then: Then::Next,
                    })
                );
            }
        }
        assert_eq!(reg.held_by(1), 1);
        let mut q = local(2);
        let (reply, _, then) = command(&mut q, &Request::Query { service: 0 }.encode(), &mut reg);
        assert_eq!(
            reply,
            Reply::Found {
                service: 4,
                epid: Epid(44)
            }
        );
        assert_eq!(then, Then::Close);
    }

    #[test]
    fn bad_header_is_refused_before_the_body() {
        let mut reg = Registry::new();
        let mut s = local(1);
        let (taken, step) = s.feed(&[0, 3, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4], &mut reg);
        assert_eq!(taken, 8);
        assert_eq!(
            step,
            Err(WireError::UnexpectedOp {
                got: Op::Ack,
                expected: "a request"
            })
        );
        let mut s = local(1);
        assert_eq!(s.feed(&[5; 8], &mut reg).1, Err(WireError::Version(5)));
    }

    #[test]
    fn bytes_after_the_command_are_left_unread() {
        let mut reg = Registry::new();
        let mut data = Request::Query { service: 1 }.encode().to_vec();
        data.extend_from_slice(&[0xee; 5]);
        let mut s = local(1);
        let (taken, step) = s.feed(&data, &mut reg);
        assert_eq!(taken, 12);
        assert!(matches!(
            step,
            Ok(Step::Done {
                then: Then::Close,
                ..
            })
        ));
        assert!(s.unfilled().is_empty());
        assert_eq!(s.received(), 12);
    }

    #[test]
    fn c_add_and_del_are_refused_and_change_nothing() {
        let mut reg = Registry::new();
        reg.add(5, Epid(0x55), Owner::Server).unwrap();
        let host = LocalHost::new(["198.18.0.1".parse().unwrap()]);
        for (peer, status) in [
            ("127.0.0.1", STATUS_NEEDS_SESSION),
            ("198.18.0.1", STATUS_NEEDS_SESSION),
            ("198.18.0.2", STATUS_NOT_LOCAL),
            ("fd00::9", STATUS_NOT_LOCAL),
        ] {
            for request in [
                Request::Del {
                    service: 5,
                    epid: Epid(0x55),
                },
                Request::Add {
                    service: 5,
                    epid: Epid(0xbad),
                },
                Request::Add {
                    service: 6,
                    epid: Epid(0xbad),
                },
            ] {
                let mut s = Session::new(host.origin(peer.parse().unwrap()), 1, NONCE, None);
                let (reply, outcome, then) = command(&mut s, &request.encode(), &mut reg);
                assert_eq!(reply, Reply::NotFound { status }, "{peer}: {request:?}");
                assert!(outcome.is_err());
                assert_eq!(then, Then::Close);
            }
        }
        assert_eq!(reg.len(), 1);
        assert_eq!(reg.lookup(5), Some((5, Epid(0x55))));
    }

    #[test]
    fn sessions_from_another_host_are_refused_queries_answered() {
        let mut reg = Registry::new();
        reg.add(5, Epid(0x55), Owner::Server).unwrap();
        let host = LocalHost::new(["198.18.0.1".parse().unwrap()]);
        for stranger in ["198.18.0.2", "::ffff:198.18.0.3", "fd00::9"] {
            let origin = host.origin(stranger.parse().unwrap());
            let mut s = Session::new(origin, 1, NONCE, None);
            let (reply, outcome, then) = command(&mut s, &Request::Hello.encode(), &mut reg);
            assert_eq!(
                reply,
                Reply::Refused {
                    status: STATUS_NOT_LOCAL
                },
                "{stranger}"
            );
            assert_eq!((outcome, then), (Err(Refusal::NotLocal), Then::Close));
            assert!(!s.is_open());
            let mut q = Session::new(origin, 2, NONCE, None);
            let (reply, ..) = command(&mut q, &Request::Query { service: 5 }.encode(), &mut reg);
            assert_eq!(
                reply,
                Reply::Found {
                    service: 5,
                    epid: Epid(0x55)
                }
            );
        }
    }

    #[test]
    fn only_the_owning_session_deletes_and_nobody_adds_over_it() {
        let mut reg = Registry::new();
        let (mut a, mut b) = (local(1), local(2));
        open(&mut a, &mut reg);
        open(&mut b, &mut reg);
        let ok = (Reply::Done, Ok(()), Then::Next);
        assert_eq!(
            command(&mut a, &change(Change::Add, 5, 0x55, None), &mut reg),
            ok
        );
        assert_eq!(
            command(&mut b, &change(Change::Del, 5, 0x55, None), &mut reg),
            (
                Reply::Refused {
                    status: STATUS_NOT_OWNER
                },
                Err(Refusal::NotOwner),
                Then::Next
            )
        );
        assert_eq!(
            command(&mut b, &change(Change::Add, 5, 0xbad, None), &mut reg),
            (
                Reply::Refused {
                    status: STATUS_TAKEN
                },
                Err(Refusal::Taken(Epid(0x55))),
                Then::Next
            )
        );
        assert_eq!(reg.lookup(5), Some((5, Epid(0x55))));
        // b registers a name of its own.
        assert_eq!(
            command(&mut b, &change(Change::Add, 6, 0x66, None), &mut reg),
            ok
        );
        assert_eq!(
            command(&mut a, &change(Change::Del, 5, 0x55, None), &mut reg),
            ok
        );
        assert_eq!(
            command(&mut a, &change(Change::Add, 5, 0x57, None), &mut reg),
            ok
        );
        assert_eq!((reg.held_by(a.id()), reg.held_by(b.id())), (1, 1));
    }

    #[test]
    fn frames_out_of_order_are_protocol_errors() {
        let mut reg = Registry::new();
        // A session's ADD without HELLO.
        let mut s = local(1);
        let (_, step) = s.feed(&change(Change::Add, 5, 5, None), &mut reg);
        assert_eq!(
            step,
            Err(WireError::UnexpectedOp {
                got: Op::Add,
                expected: "HELLO before a session's ADD or DEL"
            })
        );
        // Anything but ADD or DEL after HELLO.
        for late in [
            Request::Hello.encode(),
            Request::Query { service: 5 }.encode(),
            Request::Add {
                service: 5,
                epid: Epid(5),
            }
            .encode(),
        ] {
            let mut s = local(1);
            open(&mut s, &mut reg);
            let (taken, step) = s.feed(&late, &mut reg);
            assert_eq!(taken, HEADER_LEN);
            assert!(
                matches!(
                    step,
                    Err(WireError::UnexpectedOp {
                        expected: "a session's ADD or DEL",
                        ..
                    })
                ),
                "{late:?}: {step:?}"
            );
        }
        assert_eq!(reg.len(), 0);
    }

    #[test]
    fn with_a_secret_only_fresh_proofs_are_accepted() {
        let secret = JobSecret::new(b"the job's name server secret".to_vec()).unwrap();
        let stranger = JobSecret::new(b"some other job's secret!".to_vec()).unwrap();
        let mut reg = Registry::new();
        let mut s = Session::new(Origin::Local, 1, NONCE, Some(secret.clone()));
        open(&mut s, &mut reg);
        let proof = |secret: &JobSecret, nonce, seq, change, service, epid| {
            Transcript {
                nonce,
                seq,
                change,
                service,
                epid: Epid(epid),
            }
            .prove(secret)
        };
        let refused = |status, r| (Reply::Refused { status }, Err(r), Then::Next);
        // Request 0: no proof. 1: another secret's. 2: a proof for
        // request 1. Then 3 with its proof.
        assert_eq!(
            command(&mut s, &change(Change::Add, 5, 0x55, None), &mut reg),
            refused(STATUS_NO_PROOF, Refusal::NoProof)
        );
        let p = proof(&stranger, NONCE, 1, Change::Add, 5, 0x55);
        assert_eq!(
            command(&mut s, &change(Change::Add, 5, 0x55, Some(p)), &mut reg),
            refused(STATUS_BAD_PROOF, Refusal::BadProof)
        );
        let p = proof(&secret, NONCE, 1, Change::Add, 5, 0x55);
        assert_eq!(
            command(&mut s, &change(Change::Add, 5, 0x55, Some(p)), &mut reg),
            refused(STATUS_BAD_PROOF, Refusal::BadProof)
        );
        assert_eq!(reg.len(), 0);
        let good = change(
            Change::Add,
            5,
            0x55,
            Some(proof(&secret, NONCE, 3, Change::Add, 5, 0x55)),
        );
        assert_eq!(
            command(&mut s, &good, &mut reg),
            (Reply::Done, Ok(()), Then::Next)
        );
        assert_eq!(reg.lookup(5), Some((5, Epid(0x55))));
        // The same frame again: on its own connection its number is
        // past, on another the nonce differs.
        reg.del(5, Epid(0x55), Owner::Session(1)).unwrap();
        assert_eq!(
            command(&mut s, &good, &mut reg),
            refused(STATUS_BAD_PROOF, Refusal::BadProof)
        );
        let mut other = Session::new(Origin::Local, 2, [0x43; NONCE_LEN], Some(secret));
        open(&mut other, &mut reg);
        // Even when its number matches.
        for _ in 0..3 {
            assert_eq!(
                command(&mut other, &change(Change::Del, 9, 9, None), &mut reg),
                refused(STATUS_NO_PROOF, Refusal::NoProof)
            );
        }
        assert_eq!(
            command(&mut other, &good, &mut reg),
            refused(STATUS_BAD_PROOF, Refusal::BadProof)
        );
        assert_eq!(reg.len(), 0);
    }

    #[test]
    fn partial_frame_waits() {
        let mut reg = Registry::new();
        let mut s = local(1);
        assert_eq!(s.feed(&[1, 4, 0], &mut reg), (3, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 5);
        let mut s = local(1);
        assert_eq!(s.feed(&[0, 0, 0], &mut reg), (3, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 5);
        assert_eq!(s.feed(&[0; 5], &mut reg), (5, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 12);
        assert_eq!(reg.len(), 0);
    }
}
