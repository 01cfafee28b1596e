//! The name server's table, service → epid and who owns each entry, with
//! no I/O: the server thread and the serving process's own registrations
//! share one behind a mutex.
//!
//! Every entry has an [`Owner`]: the serving process itself, or one owning
//! session (one connection of another process, `session.rs`). Only its
//! owner deletes an entry, and nobody registers over it while it exists;
//! a session's entries all go when the session ends
//! ([`Registry::end_session`]), which is how an owner that exits or is
//! killed frees its services.
//!
//! Kept from C (`util_ns.c` as used by psm): a second ADD for a registered
//! service is refused (the first stays); DEL removes an entry only when the
//! epid matches; QUERY for service 0 is a wildcard answered with some
//! registered entry and its real service (here: the lowest service, so the
//! answer is deterministic).
//!
//! Deliberately different: service 0 cannot be added or deleted. It is the
//! wildcard, and in C an entry under 0 compares equal to every service and
//! so blocks every later ADD on the node. The table is also bounded: at
//! most [`MAX_ENTRIES`] entries, at most [`MAX_ENTRIES_PER_SESSION`] per
//! session and at most [`MAX_SESSIONS`] sessions holding entries, so that a
//! hostile client can neither grow it without limit nor take all of it
//! through one connection.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::num::NonZeroI32;

use super::wire::{self, Change};
use crate::engine::Epid;

/// Most entries one server holds.
pub(crate) const MAX_ENTRIES: usize = 1 << 16;
/// Most entries one owning session holds.
pub const MAX_ENTRIES_PER_SESSION: usize = 256;
/// Most owning sessions that hold entries at once.
pub const MAX_SESSIONS: usize = 256;

/// Who holds an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    /// The serving process (`NameServer::register` on the serving handle).
    Server,
    /// One owning session, by the number the server gave its connection.
    Session(u64),
}

/// Why an ADD, DEL or HELLO was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It came from another host; only the node's own processes register
    /// (`access.rs`). Decided by the session, before the table.
    NotLocal,
    /// A version-0 (C) ADD or DEL: it names no owner, so psmrail's server
    /// carries out none.
    NeedsSession,
    /// The server has a job secret and the request carries no proof.
    NoProof,
    /// The request's proof is wrong (another secret, or a replay).
    BadProof,
    /// Service 0 is the query wildcard, not a name.
    Wildcard,
    /// ADD: the service is registered already, to this epid.
    Taken(Epid),
    /// ADD: the table holds [`MAX_ENTRIES`].
    Full,
    /// ADD: the session holds [`MAX_ENTRIES_PER_SESSION`], or it holds none
    /// and [`MAX_SESSIONS`] other sessions hold entries.
    SessionFull,
    /// DEL: the service is not registered.
    Unknown,
    /// DEL: the service is registered to another epid (this one).
    OtherEpid(Epid),
    /// DEL: the entry belongs to another owner.
    NotOwner,
}

impl Refusal {
    /// The status that says it on the wire.
    pub(crate) fn status(self) -> NonZeroI32 {
        match self {
            Refusal::NotLocal => wire::STATUS_NOT_LOCAL,
            Refusal::NeedsSession => wire::STATUS_NEEDS_SESSION,
            Refusal::NoProof => wire::STATUS_NO_PROOF,
            Refusal::BadProof => wire::STATUS_BAD_PROOF,
            Refusal::Wildcard => wire::STATUS_WILDCARD,
            Refusal::Taken(_) => wire::STATUS_TAKEN,
            Refusal::Full => wire::STATUS_FULL,
            Refusal::SessionFull => wire::STATUS_SESSION_FULL,
            // As C: a DEL that matches nothing is -FI_ENOENT either way.
            Refusal::Unknown | Refusal::OtherEpid(_) => wire::STATUS_NOT_FOUND,
            Refusal::NotOwner => wire::STATUS_NOT_OWNER,
        }
    }

    /// Whether a stranger may be behind it (worth an info line, not
    /// only a debug one).
    pub(crate) fn is_suspicious(self) -> bool {
        matches!(
            self,
            Refusal::NotLocal | Refusal::NoProof | Refusal::BadProof | Refusal::NotOwner
        )
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotLocal => f.write_str(
                "the name server accepts registrations only from its own host (loopback or \
                 one of the host's addresses)",
            ),
            Refusal::NeedsSession => f.write_str(
                "a version-0 (C) ADD or DEL names no owner; registrations need an owning \
                 session",
            ),
            Refusal::NoProof => f.write_str(
                "the name server has a job secret and the request carries no proof of it",
            ),
            Refusal::BadProof => f.write_str(
                "the request's proof of the job secret is wrong (another secret, or a request \
                 replayed from another session)",
            ),
            Refusal::Wildcard => {
                f.write_str("service 0 is the query wildcard and names no endpoint")
            }
            Refusal::Taken(e) => write!(f, "the service is already registered to {e}"),
            Refusal::Full => write!(f, "the name server holds {MAX_ENTRIES} entries already"),
            Refusal::SessionFull => write!(
                f,
                "the session holds {MAX_ENTRIES_PER_SESSION} entries already, or \
                 {MAX_SESSIONS} sessions hold entries"
            ),
            Refusal::Unknown => f.write_str("the service is not registered"),
            Refusal::OtherEpid(e) => write!(f, "the service is registered to {e}"),
            Refusal::NotOwner => {
                f.write_str("the entry belongs to another process; only its owner removes it")
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    epid: Epid,
    owner: Owner,
}

/// The service → epid table.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    map: BTreeMap<u32, Entry>,
    /// The services each session holds (sessions holding none are absent).
    sessions: BTreeMap<u64, BTreeSet<u32>>,
}

impl Registry {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Registry::default()
    }

    /// Number of entries.
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Number of entries session `id` holds.
    pub(crate) fn held_by(&self, id: u64) -> usize {
        self.sessions.get(&id).map_or(0, BTreeSet::len)
    }

    /// Registers `service` → `epid` for `owner` unless the service is
    /// taken (by anyone, `owner` included) or a bound is reached.
    pub(crate) fn add(&mut self, service: u32, epid: Epid, owner: Owner) -> Result<(), Refusal> {
        if service == 0 {
            return Err(Refusal::Wildcard);
        }
        if let Some(e) = self.map.get(&service) {
            return Err(Refusal::Taken(e.epid));
        }
        if self.map.len() >= MAX_ENTRIES {
            return Err(Refusal::Full);
        }
        if let Owner::Session(id) = owner {
            let held = self.held_by(id);
            if held >= MAX_ENTRIES_PER_SESSION || (held == 0 && self.sessions.len() >= MAX_SESSIONS)
            {
                return Err(Refusal::SessionFull);
            }
            self.sessions.entry(id).or_default().insert(service);
        }
        self.map.insert(service, Entry { epid, owner });
        Ok(())
    }

    /// Removes `service` if `owner` holds it and it maps to `epid`.
    pub(crate) fn del(&mut self, service: u32, epid: Epid, owner: Owner) -> Result<(), Refusal> {
        if service == 0 {
            return Err(Refusal::Wildcard);
        }
        match self.map.get(&service) {
            None => Err(Refusal::Unknown),
            Some(e) if e.owner != owner => Err(Refusal::NotOwner),
            Some(e) if e.epid != epid => Err(Refusal::OtherEpid(e.epid)),
            Some(_) => {
                self.map.remove(&service);
                if let Owner::Session(id) = owner {
                    if let Some(held) = self.sessions.get_mut(&id) {
                        held.remove(&service);
                        if held.is_empty() {
                            self.sessions.remove(&id);
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// An ADD or DEL for `owner`.
    pub(crate) fn change(
        &mut self,
        change: Change,
        service: u32,
        epid: Epid,
        owner: Owner,
    ) -> Result<(), Refusal> {
        match change {
            Change::Add => self.add(service, epid, owner),
            Change::Del => self.del(service, epid, owner),
        }
    }

    /// Removes every entry session `id` holds (its connection closed);
    /// returns how many.
    pub(crate) fn end_session(&mut self, id: u64) -> usize {
        let Some(held) = self.sessions.remove(&id) else {
            return 0;
        };
        for service in &held {
            self.map.remove(service);
        }
        held.len()
    }

    /// The entry for `service`, or for 0 the lowest registered one; with its
    /// real service.
    pub(crate) fn lookup(&self, service: u32) -> Option<(u32, Epid)> {
        if service == 0 {
            self.map.first_key_value().map(|(&s, e)| (s, e.epid))
        } else {
            self.map.get(&service).map(|e| (service, e.epid))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Owner = Owner::Session(1);
    const B: Owner = Owner::Session(2);

    #[test]
    fn duplicate_add_is_refused_and_first_stays() {
        let mut r = Registry::new();
        assert_eq!(r.add(5, Epid(1), A), Ok(()));
        assert_eq!(r.add(5, Epid(2), B), Err(Refusal::Taken(Epid(1))));
        assert_eq!(r.add(5, Epid(1), A), Err(Refusal::Taken(Epid(1))));
        assert_eq!(
            r.add(5, Epid(2), Owner::Server),
            Err(Refusal::Taken(Epid(1)))
        );
        assert_eq!(r.lookup(5), Some((5, Epid(1))));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn del_needs_the_owner_and_the_matching_epid() {
        let mut r = Registry::new();
        r.add(5, Epid(1), A).unwrap();
        assert_eq!(r.del(5, Epid(1), B), Err(Refusal::NotOwner));
        assert_eq!(r.del(5, Epid(1), Owner::Server), Err(Refusal::NotOwner));
        assert_eq!(r.del(5, Epid(2), A), Err(Refusal::OtherEpid(Epid(1))));
        assert_eq!(r.lookup(5), Some((5, Epid(1))));
        assert_eq!(r.del(6, Epid(1), A), Err(Refusal::Unknown));
        assert_eq!(r.del(5, Epid(1), A), Ok(()));
        assert_eq!(r.lookup(5), None);
        assert_eq!(r.del(5, Epid(1), A), Err(Refusal::Unknown));
        assert_eq!(r.held_by(1), 0);
        // The serving process's entries are its own too.
        r.add(7, Epid(7), Owner::Server).unwrap();
        assert_eq!(r.del(7, Epid(7), A), Err(Refusal::NotOwner));
        assert_eq!(r.end_session(1), 0);
        assert_eq!(r.lookup(7), Some((7, Epid(7))));
        assert_eq!(r.del(7, Epid(7), Owner::Server), Ok(()));
    }

    #[test]
    fn a_session_s_entries_go_with_it() {
        let mut r = Registry::new();
        r.add(1, Epid(1), A).unwrap();
        r.add(2, Epid(2), A).unwrap();
        r.add(3, Epid(3), B).unwrap();
        r.add(4, Epid(4), Owner::Server).unwrap();
        assert_eq!((r.held_by(1), r.held_by(2)), (2, 1));
        assert_eq!(r.end_session(1), 2);
        assert_eq!(r.end_session(1), 0);
        assert_eq!((r.lookup(1), r.lookup(2)), (None, None));
        assert_eq!(r.lookup(3), Some((3, Epid(3))));
        assert_eq!(r.lookup(4), Some((4, Epid(4))));
        // The service is free for the next owner.
        assert_eq!(r.add(1, Epid(10), B), Ok(()));
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn zero_is_a_wildcard_for_query_only() {
        let mut r = Registry::new();
        assert_eq!(r.lookup(0), None);
        assert_eq!(r.add(0, Epid(1), A), Err(Refusal::Wildcard));
        assert_eq!(r.del(0, Epid(1), A), Err(Refusal::Wildcard));
        r.add(9, Epid(90), A).unwrap();
        r.add(3, Epid(30), Owner::Server).unwrap();
        assert_eq!(r.lookup(0), Some((3, Epid(30))));
        assert_eq!(r.lookup(9), Some((9, Epid(90))));
        assert_eq!(r.lookup(4), None);
    }

    #[test]
    fn bounded() {
        let mut r = Registry::new();
        // The serving process's entries count against the table only.
        for s in 1..=MAX_ENTRIES as u32 {
            r.add(s, Epid(u64::from(s)), Owner::Server).unwrap();
        }
        assert_eq!(r.add(u32::MAX, Epid(0), A), Err(Refusal::Full));
        // A duplicate still reports the duplicate, not fullness.
        assert_eq!(r.add(1, Epid(0), A), Err(Refusal::Taken(Epid(1))));
        r.del(1, Epid(1), Owner::Server).unwrap();
        assert_eq!(r.add(u32::MAX, Epid(0), A), Ok(()));
    }

    #[test]
    fn bounded_per_session_and_in_sessions() {
        let mut r = Registry::new();
        let per = MAX_ENTRIES_PER_SESSION as u32;
        for s in 1..=per {
            r.add(s, Epid(1), A).unwrap();
        }
        assert_eq!(r.add(per + 1, Epid(1), A), Err(Refusal::SessionFull));
        r.add(per + 1, Epid(1), B).unwrap();
        // MAX_SESSIONS sessions hold entries: a new one may not start.
        let base = 1_000_000u32;
        for id in 3..=MAX_SESSIONS as u64 {
            r.add(base + id as u32, Epid(1), Owner::Session(id))
                .unwrap();
        }
        let late = Owner::Session(MAX_SESSIONS as u64 + 1);
        assert_eq!(r.add(1, Epid(1), late), Err(Refusal::Taken(Epid(1))));
        assert_eq!(r.add(base - 1, Epid(1), late), Err(Refusal::SessionFull));
        // But those holding entries may add more, and one ending frees a
        // place.
        r.add(base - 2, Epid(1), B).unwrap();
        assert_eq!(r.end_session(2), 2);
        assert_eq!(r.add(base - 1, Epid(1), late), Ok(()));
    }
}
