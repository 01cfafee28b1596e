//! The check shared by the `name_server_frame` cargo-fuzz target and the
//! corpus replay test (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! [`check_frame`] takes arbitrary bytes and panics if an invariant breaks:
//! * decoding as a request and as a reply never panics, and never both
//!   succeed;
//! * a decoded frame re-encodes to the same bytes, except the fields C
//!   ignores in version 0 (reserved; a request's status); version 1 frames
//!   re-encode exactly;
//! * the bytes, fed in pieces to server sessions (up to [`LANES`] open at
//!   once, frame `k` going to lane `k % LANES`, a new connection opening in
//!   an empty lane), give the commands the one-shot decoder gives, and
//!   every reply is the one a model of the table's rules gives: C's ADD
//!   and DEL refused, queries answered, owning sessions opened by HELLO,
//!   only an entry's owner deleting it, nobody adding over it, a session's
//!   entries gone with its connection, and an entry of the serving process
//!   (service [`SERVER_SERVICE`]) untouchable;
//! * that again with every other connection from another host (their
//!   registrations and sessions refused), and again with a job secret
//!   ([`SECRET`], each connection's nonce `[connection number; 16]`), when
//!   only requests with the right proof for their session and number in it
//!   change anything.

use std::collections::BTreeMap;

use super::access::Origin;
use super::proof::Transcript;
use super::registry::{
    Owner, Refusal, Registry, MAX_ENTRIES, MAX_ENTRIES_PER_SESSION, MAX_SESSIONS,
};
use super::session::{Session, Step, Then};
use super::wire::{
    Change, Reply, Request, WireError, HEADER_LEN, NONCE_LEN, SESSION_VERSION, STATUS_NOT_FOUND,
};
use crate::engine::soft::JobSecret;
use crate::engine::Epid;

/// Sessions open at once.
pub const LANES: usize = 3;
/// The job secret of the secret pass (a seed's proofs are made with it).
pub const SECRET: &[u8] = b"psmrail name server fuzz secret";
/// The service the serving process holds (epid [`SERVER_EPID`]) before
/// any input.
pub const SERVER_SERVICE: u32 = 0x5e;
/// Its epid.
pub const SERVER_EPID: Epid = Epid(0x5e5e);

/// Connection `n`'s nonce (its number, from 1, in every byte).
pub fn nonce(n: u64) -> [u8; NONCE_LEN] {
    [n as u8; NONCE_LEN]
}

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
        if r.version() == SESSION_VERSION {
            assert_eq!(&again[..], data, "{r:?}");
        } else {
            assert_eq!(again[..2], data[..2], "{r:?}");
            assert_eq!(again[HEADER_LEN..], data[HEADER_LEN..], "{r:?}");
        }
        assert_eq!(Request::decode(&again), Ok(r));
    }
    if let Ok(r) = reply {
        assert_eq!(Reply::frame_len(data), Ok(data.len()));
        let again = r.encode();
        if data[0] == SESSION_VERSION {
            assert_eq!(&again[..], data, "{r:?}");
        } else {
            assert_eq!(again[..2], data[..2], "{r:?}");
            assert_eq!(again[4..], data[4..], "{r:?}");
        }
        assert_eq!(Reply::decode(&again), Ok(r));
    }
    let secret = JobSecret::new(SECRET.to_vec()).ok();
    assert!(secret.is_some());
    let _ = check_sessions(data, |_| Origin::Local, None);
    let _ = check_sessions(
        data,
        |conn| {
            if conn % 2 == 0 {
                Origin::Remote
            } else {
                Origin::Local
            }
        },
        None,
    );
    let _ = check_sessions(data, |_| Origin::Local, secret);
    request.is_ok() || reply.is_ok()
}

/// The table's rules, written independently of [`Registry`].
struct Model {
    map: BTreeMap<u32, (Epid, Owner)>,
}

impl Model {
    fn new() -> Model {
        let mut map = BTreeMap::new();
        map.insert(SERVER_SERVICE, (SERVER_EPID, Owner::Server));
        Model { map }
    }

    fn held_by(&self, id: u64) -> usize {
        self.map
            .values()
            .filter(|(_, o)| *o == Owner::Session(id))
            .count()
    }

    fn sessions_holding(&self) -> usize {
        let mut ids: Vec<u64> = self
            .map
            .values()
            .filter_map(|(_, o)| match o {
                Owner::Session(id) => Some(*id),
                Owner::Server => None,
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    fn query(&self, service: u32) -> Reply {
        let hit = if service == 0 {
            self.map.iter().next().map(|(&s, &(e, _))| (s, e))
        } else {
            self.map.get(&service).map(|&(e, _)| (service, e))
        };
        match hit {
            Some((service, epid)) => Reply::Found { service, epid },
            None => Reply::NotFound {
                status: STATUS_NOT_FOUND,
            },
        }
    }

    fn change(&mut self, change: Change, service: u32, epid: Epid, id: u64) -> Result<(), Refusal> {
        if service == 0 {
            return Err(Refusal::Wildcard);
        }
        let me = Owner::Session(id);
        match (change, self.map.get(&service).copied()) {
            (Change::Add, Some((e, _))) => Err(Refusal::Taken(e)),
            (Change::Add, None) => {
                let held = self.held_by(id);
                if self.map.len() >= MAX_ENTRIES {
                    Err(Refusal::Full)
                } else if held >= MAX_ENTRIES_PER_SESSION
                    || (held == 0 && self.sessions_holding() >= MAX_SESSIONS)
                {
                    Err(Refusal::SessionFull)
                } else {
                    self.map.insert(service, (epid, me));
                    Ok(())
                }
            }
            (Change::Del, None) => Err(Refusal::Unknown),
            (Change::Del, Some((_, owner))) if owner != me => Err(Refusal::NotOwner),
            (Change::Del, Some((e, _))) if e != epid => Err(Refusal::OtherEpid(e)),
            (Change::Del, Some(_)) => {
                self.map.remove(&service);
                Ok(())
            }
        }
    }

    fn end(&mut self, id: u64) {
        self.map.retain(|_, (_, o)| *o != Owner::Session(id));
    }
}

/// One open connection of the replay.
struct Lane {
    session: Session,
    origin: Origin,
    /// `None` before HELLO, then the number of the next ADD or DEL.
    seq: Option<u64>,
}

/// The reply the model expects for `request` on `lane`, and whether the
/// connection goes on.
fn expect(
    model: &mut Model,
    lane: &mut Lane,
    request: Request,
    secret: Option<&JobSecret>,
) -> (Reply, Then) {
    let refused = |r: Refusal| Reply::Refused { status: r.status() };
    match request {
        Request::Query { service } => (model.query(service), Then::Close),
        Request::Add { .. } | Request::Del { .. } => {
            let r = match lane.origin {
                Origin::Remote => Refusal::NotLocal,
                Origin::Local => Refusal::NeedsSession,
            };
            (Reply::NotFound { status: r.status() }, Then::Close)
        }
        Request::Hello if lane.origin == Origin::Remote => {
            (refused(Refusal::NotLocal), Then::Close)
        }
        Request::Hello => {
            lane.seq = Some(0);
            let nonce = nonce(lane.session.id());
            (Reply::Challenge { nonce }, Then::Next)
        }
        Request::Session {
            change,
            service,
            epid,
            proof,
        } => {
            let seq = lane.seq.unwrap_or(0);
            lane.seq = Some(seq + 1);
            let authentic = match (secret, proof) {
                (None, _) => Ok(()),
                (Some(_), None) => Err(Refusal::NoProof),
                (Some(s), Some(p)) => {
                    let t = Transcript {
                        nonce: nonce(lane.session.id()),
                        seq,
                        change,
                        service,
                        epid,
                    };
                    if t.prove(s) == p {
                        Ok(())
                    } else {
                        Err(Refusal::BadProof)
                    }
                }
            };
            let outcome =
                authentic.and_then(|()| model.change(change, service, epid, lane.session.id()));
            match outcome {
                Ok(()) => (Reply::Done, Then::Next),
                Err(r) => (refused(r), Then::Next),
            }
        }
    }
}

/// Feeds `data` to sessions as the module docs say; connection `n`
/// (counted from 1) comes from `origin(n)`. Returns the table at the end
/// (the sessions still open keep their entries).
fn check_sessions(
    data: &[u8],
    origin: fn(u64) -> Origin,
    secret: Option<JobSecret>,
) -> BTreeMap<u32, Epid> {
    let piece_len = 1 + usize::from(data.first().copied().unwrap_or(0) % 7);
    let mut table = Registry::new();
    let mut model = Model::new();
    table
        .add(SERVER_SERVICE, SERVER_EPID, Owner::Server)
        .unwrap_or_else(|r| panic!("{r}"));
    let mut lanes: [Option<Lane>; LANES] = [None, None, None];
    let mut next_id = 1u64;
    let mut rest = data;
    let mut frame_no = 0usize;
    while !rest.is_empty() {
        let slot = frame_no % LANES;
        frame_no += 1;
        let lane = lanes[slot].get_or_insert_with(|| {
            let id = next_id;
            next_id += 1;
            Lane {
                session: Session::new(origin(id), id, nonce(id), secret.clone()),
                origin: origin(id),
                seq: None,
            }
        });
        let start = rest;
        let mut consumed = 0;
        let outcome = loop {
            let piece = &rest[..piece_len.min(rest.len())];
            let (taken, step) = lane.session.feed(piece, &mut table);
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
        let close = match outcome {
            // The input ended inside a frame.
            None => {
                assert!(Request::decode(frame).is_err(), "{frame:?} is complete");
                break;
            }
            Some(Ok(Step::Done {
                request,
                reply,
                outcome,
                then,
            })) => {
                assert_eq!(Request::decode(frame), Ok(request));
                let got = Reply::decode(&reply)
                    .unwrap_or_else(|e| panic!("the server encoded a bad reply {reply:?}: {e}"));
                let (want, want_then) = expect(&mut model, lane, request, secret.as_ref());
                assert_eq!(got, want, "{request:?}");
                assert_eq!(then, want_then, "{request:?}");
                let accepted = matches!(request, Request::Query { .. })
                    || matches!(got, Reply::Done | Reply::Challenge { .. });
                assert_eq!(outcome.is_ok(), accepted, "{request:?}: {outcome:?}");
                then == Then::Close
            }
            Some(Ok(Step::More)) => unreachable!("handled in the loop"),
            Some(Err(e)) => {
                match Request::frame_len(frame) {
                    // Refused as soon as the header was in: its bytes, or
                    // its place in the session.
                    Err(f) => assert_eq!((consumed, f), (HEADER_LEN, e)),
                    Ok(len) if consumed == HEADER_LEN && len != HEADER_LEN => {
                        assert!(matches!(e, WireError::UnexpectedOp { .. }), "{e}")
                    }
                    // Or when the whole frame was in.
                    Ok(len) => {
                        assert_eq!(consumed, len, "{e}");
                        if !matches!(e, WireError::UnexpectedOp { .. }) {
                            assert_eq!(Request::decode(frame), Err(e));
                        }
                    }
                }
                true
            }
        };
        if close {
            if let Some(done) = lanes[slot].take() {
                let id = done.session.id();
                table.end_session(id);
                model.end(id);
                assert_eq!(table.held_by(id), 0);
            }
        }
        assert_eq!(table.len(), model.map.len());
        for l in lanes.iter().flatten() {
            let id = l.session.id();
            assert_eq!(table.held_by(id), model.held_by(id), "session {id}");
        }
        assert_eq!(
            table.lookup(SERVER_SERVICE),
            Some((SERVER_SERVICE, SERVER_EPID)),
            "the serving process's entry changed"
        );
    }
    model.map.iter().map(|(&s, &(e, _))| (s, e)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus/name_server_frame")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn table(entries: &[(u32, u64)]) -> BTreeMap<u32, Epid> {
        entries.iter().map(|&(s, e)| (s, Epid(e))).collect()
    }

    fn secret() -> Option<JobSecret> {
        JobSecret::new(SECRET.to_vec()).ok()
    }

    /// The session seeds reach the cases they are for: their proofs are
    /// right where they should be, and their sessions end where they
    /// should.
    #[test]
    fn the_session_seeds_reach_their_cases() {
        let server = (SERVER_SERVICE, SERVER_EPID.0);
        let local = |_| Origin::Local;
        let data = seed("stream-sessions-with-proofs");
        assert!(!check_frame(&data));
        // With the secret only the proven ADD and DEL of sessions 1 and 2
        // count; without it the unproven ADD of 6 does too.
        assert_eq!(
            check_sessions(&data, local, secret()),
            table(&[(5, 0x57), server])
        );
        assert_eq!(
            check_sessions(&data, local, None),
            table(&[(5, 0x57), (6, 0x66), server])
        );
        let data = seed("stream-sessions-own-their-entries");
        assert_eq!(
            check_sessions(&data, local, None),
            table(&[(6, 0x66), server])
        );
        assert_eq!(check_sessions(&data, local, secret()), table(&[server]));
        let data = seed("stream-session-ends-with-its-connection");
        assert_eq!(
            check_sessions(&data, local, None),
            table(&[(9, 0x9b), server])
        );
        // A C ADD registers nothing, from anywhere.
        let data = seed("valid-add");
        assert!(check_frame(&data));
        assert_eq!(check_sessions(&data, local, None), table(&[server]));
    }
}
