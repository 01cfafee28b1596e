//! The check shared by the `name_server_frame` cargo-fuzz target and the
//! corpus replay test (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! [`check_frame`] takes arbitrary bytes and panics if an invariant breaks:
//! * decoding as a request and as a reply never panics, and never both
//!   succeed;
//! * a decoded frame re-encodes to the same bytes, except the fields C
//!   ignores (reserved; a request's status);
//! * the bytes fed in pieces to server sessions, one connection after
//!   another, give the commands the one-shot decoder gives, and the table
//!   they build answers queries as a simple model of C's rules does;
//! * fed again with every other connection from another host, those
//!   connections' ADD and DEL are refused with the refusal ACK and change
//!   nothing, and their queries are answered as the model says.

use std::collections::BTreeMap;

use super::access::Origin;
use super::registry::{Refusal, Registry, MAX_ENTRIES};
use super::session::{Session, Step};
use super::wire::{Reply, Request, HEADER_LEN, STATUS_NOT_LOCAL};
use crate::engine::Epid;

/// Runs every check on `data`. Returns whether it is one valid frame
/// (request or reply).
pub fn check_frame(data: &[u8]) -> bool {
    let request = Request::decode(data);
    let reply = Reply::decode(data);
    assert!(
        !(request.is_ok() && reply.is_ok()),
        "{data:?} decodes as both a request and a reply"
    );
    if let Ok(r) = request {
        assert_eq!(Request::frame_len(data), Ok(data.len()));
        let again = r.encode();
        assert_eq!(again[..2], data[..2], "{r:?}");
        assert_eq!(again[HEADER_LEN..], data[HEADER_LEN..], "{r:?}");
        assert_eq!(Request::decode(&again), Ok(r));
    }
    if let Ok(r) = reply {
        assert_eq!(Reply::frame_len(data), Ok(data.len()));
        let again = r.encode();
        assert_eq!(again[..2], data[..2], "{r:?}");
        assert_eq!(again[4..], data[4..], "{r:?}");
        assert_eq!(Reply::decode(&again), Ok(r));
    }
    check_sessions(data, |_| Origin::Local);
    check_sessions(data, |conn| {
        if conn % 2 == 1 {
            Origin::Remote
        } else {
            Origin::Local
        }
    });
    request.is_ok() || reply.is_ok()
}

/// C's table rules, written independently of [`Registry`].
#[derive(Default)]
struct Model(BTreeMap<u32, Epid>);

impl Model {
    fn apply(&mut self, r: &Request) -> Option<(u32, Epid)> {
        match *r {
            Request::Add { service, epid } => {
                if service != 0 && !self.0.contains_key(&service) && self.0.len() < MAX_ENTRIES {
                    self.0.insert(service, epid);
                }
                None
            }
            Request::Del { service, epid } => {
                if service != 0 && self.0.get(&service) == Some(&epid) {
                    self.0.remove(&service);
                }
                None
            }
            Request::Query { service: 0 } => self.0.iter().next().map(|(&s, &e)| (s, e)),
            Request::Query { service } => self.0.get(&service).map(|&e| (service, e)),
        }
    }
}

/// Feeds `data` to sessions, one connection after another; connection `i`
/// comes from `origin(i)`.
fn check_sessions(data: &[u8], origin: fn(usize) -> Origin) {
    let piece_len = 1 + usize::from(data.first().copied().unwrap_or(0) % 7);
    let mut table = Registry::new();
    let mut model = Model::default();
    let mut rest = data;
    let mut conn = 0;
    while !rest.is_empty() {
        let start = rest;
        let from = origin(conn);
        conn += 1;
        let mut session = Session::new(from);
        let mut consumed = 0;
        let outcome = loop {
            let piece = &rest[..piece_len.min(rest.len())];
            let (taken, step) = session.feed(piece, &mut table);
            assert!(taken <= piece.len());
            consumed += taken;
            rest = &rest[taken..];
            match step {
                Ok(Step::More) => {
                    assert_eq!(taken, piece.len(), "More before the piece ran out");
                    if rest.is_empty() {
                        break None;
                    }
                }
                other => break Some(other),
            }
        };
        let frame = &start[..consumed];
        match outcome {
            // The input ended inside a frame.
            None => {
                assert!(Request::decode(frame).is_err(), "{frame:?} is complete");
                return;
            }
            Some(Ok(Step::Done {
                request,
                reply,
                outcome,
            })) if from == Origin::Remote && !matches!(request, Request::Query { .. }) => {
                assert_eq!(Request::decode(frame), Ok(request));
                assert_eq!(outcome, Err(Refusal::NotLocal), "{request:?}");
                let answer = reply.map(|f| Reply::decode(&f));
                let refusal = Reply::NotFound {
                    status: STATUS_NOT_LOCAL,
                };
                assert_eq!(answer, Some(Ok(refusal)), "{request:?}");
                assert_eq!(table.len(), model.0.len());
            }
            Some(Ok(Step::Done { request, reply, .. })) => {
                assert_eq!(Request::decode(frame), Ok(request));
                let expected = model.apply(&request);
                match reply {
                    None => assert!(!matches!(request, Request::Query { .. })),
                    Some(f) => {
                        let got = match Reply::decode(&f) {
                            Ok(Reply::Found { service, epid }) => Some((service, epid)),
                            Ok(Reply::NotFound { .. }) => None,
                            Err(e) => panic!("the server encoded a bad reply {f:?}: {e}"),
                        };
                        assert_eq!(got, expected, "{request:?}");
                    }
                }
                assert_eq!(table.len(), model.0.len());
            }
            Some(Ok(Step::More)) => unreachable!("handled in the loop"),
            // Refused as soon as the header was in.
            Some(Err(e)) => {
                assert_eq!(consumed, HEADER_LEN, "{e}");
                assert_eq!(Request::frame_len(frame), Err(e));
            }
        }
    }
}
