//! One server-side connection as a pure state machine: bytes in, the
//! request carried out on the [`Registry`], the reply frame (if any) out.
//!
//! C's server reads the 8-byte header, then exactly the body its op calls
//! for, processes the command and closes. A [`Session`] does the same
//! without I/O: the caller reads into [`Session::unfilled`] (never more than
//! the frame still needs, so bytes after one command stay unread, as in C)
//! and reports what arrived with [`Session::filled`]. A bad header is
//! refused as soon as its 8 bytes are in, before any body is awaited.

use super::registry::{Refusal, Registry};
use super::wire::{Frame, Request, WireError, HEADER_LEN, MAX_FRAME_LEN};

/// What a session needs next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// More bytes: read into [`Session::unfilled`].
    More,
    /// The command is complete and carried out: send `reply` (QUERY) or
    /// nothing (ADD, DEL), then close.
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
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    /// A session waiting for a header.
    pub(crate) fn new() -> Self {
        Session {
            buf: [0; MAX_FRAME_LEN],
            have: 0,
            need: HEADER_LEN,
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
    /// and, once the frame is complete, carries it out on `registry`.
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
    use crate::fabric::name_server::wire::{Op, Reply};

    #[test]
    fn byte_by_byte_add_then_query() {
        let mut reg = Registry::new();
        let add = Request::Add {
            service: 4,
            epid: Epid(44),
        }
        .encode();
        let mut s = Session::new();
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
        let mut s = Session::new();
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
        let mut s = Session::new();
        let (taken, step) = s.feed(&[0, 3, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4], &mut reg);
        assert_eq!(taken, 8);
        assert_eq!(
            step,
            Err(WireError::UnexpectedOp {
                got: Op::Ack,
                expected: "a request"
            })
        );
        let mut s = Session::new();
        assert_eq!(s.feed(&[5; 8], &mut reg).1, Err(WireError::Version(5)));
    }

    #[test]
    fn bytes_after_the_command_are_left_unread() {
        let mut reg = Registry::new();
        let mut data = Request::Query { service: 1 }.encode().to_vec();
        data.extend_from_slice(&[0xee; 5]);
        let mut s = Session::new();
        let (taken, step) = s.feed(&data, &mut reg);
        assert_eq!(taken, 12);
        assert!(matches!(step, Ok(Step::Done { .. })));
        assert!(s.unfilled().is_empty());
        assert_eq!(s.received(), 12);
    }

    #[test]
    fn partial_frame_waits() {
        let mut reg = Registry::new();
        let mut s = Session::new();
        assert_eq!(s.feed(&[0, 0, 0], &mut reg), (3, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 5);
        assert_eq!(s.feed(&[0; 5], &mut reg), (5, Ok(Step::More)));
        assert_eq!(s.unfilled().len(), 12);
        assert_eq!(reg.len(), 0);
    }
}
