//! One server-side connection as a pure state machine: bytes in, the
//! request carried out on the [`Registry`], the reply frame (if any) out.
//!
//! C's server reads the 8-byte header, then exactly the body its op calls
//! for, processes the command and closes. A [`Session`] does the same
//! without I/O: the caller reads into [`Session::unfilled`] (never more than
//! the frame still needs, so bytes after one command stay unread, as in C)
//! and reports what arrived with [`Session::filled`]. A bad header is
//! refused as soon as its 8 bytes are in, before any body is awaited.
//!
//! A session knows its peer's [`Origin`]: an ADD or DEL from another host
//! is refused without touching the table and answered with an ACK of
//! status [`STATUS_NOT_LOCAL`]; a QUERY is answered from anywhere.

use super::access::Origin;
use super::registry::{Refusal, Registry};
use super::wire::{Frame, Reply, Request, WireError, HEADER_LEN, MAX_FRAME_LEN, STATUS_NOT_LOCAL};

/// What a session needs next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// More bytes: read into [`Session::unfilled`].
    More,
    /// The command is complete and carried out: send `reply` (QUERY, or
    /// a refused ADD or DEL from another host) or nothing (ADD, DEL), then
    /// close.
    Done {
        /// The command.
        request: Request,
        /// What to send back.
        reply: Option<Frame>,
        /// Whether the table accepted it (for the log; C is silent).
        outcome: Result<(), Refusal>,
    },
}

/// The reading side of one connection.
#[derive(Debug)]
pub(crate) struct Session {
    buf: [u8; MAX_FRAME_LEN],
    have: usize,
    need: usize,
    origin: Origin,
}

impl Session {
    /// A session with a peer of `origin`, waiting for a header.
    pub(crate) fn new(origin: Origin) -> Self {
        Session {
            buf: [0; MAX_FRAME_LEN],
            have: 0,
            need: HEADER_LEN,
            origin,
        }
    }

    /// Where the next bytes go: exactly what the frame still lacks (empty
    /// once the command is complete).
    pub(crate) fn unfilled(&mut self) -> &mut [u8] {
        &mut self.buf[self.have..self.need]
    }

    /// Bytes received so far.
    pub(crate) fn received(&self) -> usize {
        self.have
    }

    /// Records that `n` bytes were written into [`unfilled`](Self::unfilled)
    /// and, once the frame is complete, carries it out on `registry` (an
    /// ADD or DEL only when the peer is local).
    pub(crate) fn filled(&mut self, n: usize, registry: &mut Registry) -> Result<Step, WireError> {
        self.have = (self.have + n).min(self.need);
        if self.have < self.need {
            return Ok(Step::More);
        }
        if self.need == HEADER_LEN {
            // The header is in: learn the body length, or refuse now.
            self.need = Request::frame_len(&self.buf[..HEADER_LEN])?;
            return Ok(Step::More);
        }
        let request = Request::decode(&self.buf[..self.need])?;
        if self.origin == Origin::Remote && !matches!(request, Request::Query { .. }) {
            return Ok(Step::Done {
                request,
                reply: Some(
                    Reply::NotFound {
                        status: STATUS_NOT_LOCAL,
                    }
                    .encode(),
                ),
                outcome: Err(Refusal::NotLocal),
            });
        }
        let (reply, outcome) = registry.apply(&request);
        Ok(Step::Done {
            request,
            reply: reply.map(|r| r.encode()),
            outcome,
        })
    }

    /// Feeds `data` until the command completes, fails, or `data` runs out.
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
    use crate::engine::Epid;
    use crate::fabric::name_server::access::LocalHost;
    use crate::fabric::name_server::wire::Op;

    #[test]
    fn byte_by_byte_add_then_query() {
        let mut reg = Registry::new();
        let add = Request::Add {
            service: 4,
            epid: Epid(44),
        }
        .encode();
        let mut s = Session::new(Origin::Local);
        for (i, b) in add.iter().enumerate() {
            let (taken, step) = s.feed(std::slice::from_ref(b), &mut reg);
            assert_eq!(taken, 1);
            if i + 1 < add.len() {
                assert_eq!(step, Ok(Step::More));
            } else {
                assert_eq!(
                    step,
                    Ok(Step::Done {
                        request: Request::Add {
                            service: 4,
                            epid: Epid(44)
                        },
                        reply: None,
                        outcome: Ok(())
                    })
                );
            }
        }
        let mut s = Session::new(Origin::Local);
        let (taken, step) = s.feed(&Request::Query { service: 0 }.encode(), &mut reg);
        assert_eq!(taken, 12);
        let Ok(Step::Done {
            reply: Some(frame), ..
        }) = step
        else {
            panic!("{step:?}");
        };
        assert_eq!(
            Reply::decode(&frame),
            Ok(Reply::Found {
                service: 4,
                epid: Epid(44)
            })
        );
    }

    #[test]
    fn bad_header_is_refused_before_the_body() {
        let mut reg = Registry::new();
        let mut s = Session::new(Origin::Local);
        let (taken, step) = s.feed(&[0, 3, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4], &mut reg);
        assert_eq!(taken, 8);
        assert_eq!(
            step,
            Err(WireError::UnexpectedOp {
                got: Op::Ack,
                expected: "a request"
            })
        );
        let mut s = Session::new(Origin::Local);
        assert_eq!(s.feed(&[5; 8], &mut reg).1, Err(WireError::Version(5)));
    }

    #[test]
    fn bytes_after_the_command_are_left_unread() {
        let mut reg = Registry::new();
        let mut data = Request::Query { service: 1 }.encode().to_vec();
        data.extend_from_slice(&[0xee; 5]);
        let mut s = Session::new(Origin::Local);
        let (taken, step) = s.feed(&data, &mut reg);
        assert_eq!(taken, 12);
        assert!(matches!(step, Ok(Step::Done { .. })));
        assert!(s.unfilled().is_empty());
        assert_eq!(s.received(), 12);
    }

    /// Feeds one whole request from a peer at `peer` to a server whose host
    /// has the address 198.18.0.1.
    fn from(peer: &str, request: Request, reg: &mut Registry) -> Step {
        let host = LocalHost::new(["198.18.0.1".parse().unwrap()]);
        let mut s = Session::new(host.origin(peer.parse().unwrap()));
        let frame = request.encode();
        let (taken, step) = s.feed(&frame, reg);
        assert_eq!(taken, frame.len());
        step.unwrap()
    }

    #[test]
    fn registrations_from_another_host_are_refused_and_change_nothing() {
        let mut reg = Registry::new();
        let mine = Request::Add {
            service: 5,
            epid: Epid(0x55),
        };
        assert!(matches!(
            from("198.18.0.1", mine, &mut reg),
            Step::Done {
                reply: None,
                outcome: Ok(()),
                ..
            }
        ));
        // A stranger's DEL then ADD would redirect the service.
        let refusal = Reply::NotFound {
            status: STATUS_NOT_LOCAL,
        };
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
            for stranger in ["198.18.0.2", "::ffff:198.18.0.3", "fd00::9"] {
                let Step::Done {
                    request: got,
                    reply: Some(frame),
                    outcome,
                } = from(stranger, request, &mut reg)
                else {
                    panic!("{stranger}: {request:?} was not answered");
                };
                assert_eq!(got, request);
                assert_eq!(outcome, Err(Refusal::NotLocal));
                assert_eq!(Reply::decode(&frame), Ok(refusal), "{stranger}");
            }
        }
        assert_eq!(reg.len(), 1);
        assert_eq!(reg.lookup(5), Some((5, Epid(0x55))));
        assert_eq!(reg.lookup(6), None);
        // Queries are answered wherever they come from.
        let Step::Done {
            reply: Some(frame), ..
        } = from("198.18.0.2", Request::Query { service: 5 }, &mut reg)
        else {
            panic!("the query was not answered");
        };
        assert_eq!(
            Reply::decode(&frame),
            Ok(Reply::Found {
                service: 5,
                epid: Epid(0x55)
            })
        );
        // And loopback peers register like the host's own addresses.
        assert!(matches!(
            from(
                "127.0.0.1",
                Request::Del {
                    service: 5,
                    epid: Epid(0x55)
                },
                &mut reg
            ),
            Step::Done {
                outcome: Ok(()),
                ..
            }
        ));
        assert_eq!(reg.len(), 0);
    }

    #[test]
    fn partial_frame_waits() {
        let mut reg = Registry::new();
        let mut s = Session::new(Origin::Local);
        assert_eq!(s.feed(&[0, 0, 0], &mut reg), (3, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 5);
        assert_eq!(s.feed(&[0; 5], &mut reg), (5, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 12);
        assert_eq!(reg.len(), 0);
    }
}
