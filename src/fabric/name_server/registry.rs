//! The name server's table, service → epid, with the C server's rules and
//! no I/O: the server thread and local registrations share one behind a
//! mutex.
//!
//! Kept from C (`util_ns.c` as used by psm): a second ADD for a registered
//! service is refused (the first stays); DEL removes an entry only when the
//! epid matches; QUERY for service 0 is a wildcard answered with some
//! registered entry and its real service (here: the lowest service, so the
//! answer is deterministic).
//!
//! Deliberately different: service 0 cannot be added or deleted. It is the
//! wildcard, and in C an entry under 0 compares equal to every service and
//! so blocks every later ADD on the node. The table is also bounded
//! ([`MAX_ENTRIES`]) so that a hostile client cannot grow it without limit.

use std::collections::BTreeMap;
use std::fmt;

use super::wire::{Reply, Request, STATUS_NOT_FOUND};
use crate::engine::Epid;

/// Most entries one server holds.
pub(crate) const MAX_ENTRIES: usize = 1 << 16;

/// Why an ADD or DEL was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It came from another host; only the node's own processes register
    /// (`access.rs`). Decided by the session, before the table.
    NotLocal,
    /// Service 0 is the query wildcard, not a name.
    Wildcard,
    /// ADD: the service is registered already, to this epid.
    Taken(Epid),
    /// ADD: the table holds [`MAX_ENTRIES`].
    Full,
    /// DEL: the service is not registered.
    Unknown,
    /// DEL: the service is registered to another epid (this one).
    OtherEpid(Epid),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotLocal => f.write_str(
                "the name server accepts registrations only from its own host (loopback or \
                 one of the host's addresses)",
            ),
            Refusal::Wildcard => {
                f.write_str("service 0 is the query wildcard and names no endpoint")
            }
            Refusal::Taken(e) => write!(f, "the service is already registered to {e}"),
            Refusal::Full => write!(f, "the name server holds {MAX_ENTRIES} entries already"),
            Refusal::Unknown => f.write_str("the service is not registered"),
            Refusal::OtherEpid(e) => write!(f, "the service is registered to {e}"),
        }
    }
}

/// The service → epid table.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    map: BTreeMap<u32, Epid>,
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

    /// Registers `service` → `epid` unless the service is taken.
    pub(crate) fn add(&mut self, service: u32, epid: Epid) -> Result<(), Refusal> {
        if service == 0 {
            return Err(Refusal::Wildcard);
        }
        if let Some(&e) = self.map.get(&service) {
            return Err(Refusal::Taken(e));
        }
        if self.map.len() >= MAX_ENTRIES {
            return Err(Refusal::Full);
        }
        self.map.insert(service, epid);
        Ok(())
    }

    /// Removes `service` if it maps to `epid`.
    pub(crate) fn del(&mut self, service: u32, epid: Epid) -> Result<(), Refusal> {
        if service == 0 {
            return Err(Refusal::Wildcard);
        }
        match self.map.get(&service) {
            None => Err(Refusal::Unknown),
            Some(&e) if e != epid => Err(Refusal::OtherEpid(e)),
            Some(_) => {
                self.map.remove(&service);
                Ok(())
            }
        }
    }

    /// The entry for `service`, or for 0 the lowest registered one; with its
    /// real service.
    pub(crate) fn lookup(&self, service: u32) -> Option<(u32, Epid)> {
        if service == 0 {
            self.map.first_key_value().map(|(&s, &e)| (s, e))
        } else {
            self.map.get(&service).map(|&e| (service, e))
        }
    }

    /// Carries out a request as the server does: ADD and DEL change the
    /// table and get no reply (refusals are silent on the wire, as in C,
    /// and returned for logging); QUERY gets its reply.
    pub(crate) fn apply(&mut self, request: &Request) -> (Option<Reply>, Result<(), Refusal>) {
        match *request {
            Request::Add { service, epid } => (None, self.add(service, epid)),
            Request::Del { service, epid } => (None, self.del(service, epid)),
            Request::Query { service } => {
                let reply = match self.lookup(service) {
                    Some((service, epid)) => Reply::Found { service, epid },
                    None => Reply::NotFound {
                        status: STATUS_NOT_FOUND,
                    },
                };
                (Some(reply), Ok(()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_add_is_refused_and_first_stays() {
        let mut r = Registry::new();
        assert_eq!(r.add(5, Epid(1)), Ok(()));
        assert_eq!(r.add(5, Epid(2)), Err(Refusal::Taken(Epid(1))));
        assert_eq!(r.add(5, Epid(1)), Err(Refusal::Taken(Epid(1))));
        assert_eq!(r.lookup(5), Some((5, Epid(1))));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn del_needs_matching_epid() {
        let mut r = Registry::new();
        r.add(5, Epid(1)).unwrap();
        assert_eq!(r.del(5, Epid(2)), Err(Refusal::OtherEpid(Epid(1))));
        assert_eq!(r.lookup(5), Some((5, Epid(1))));
        assert_eq!(r.del(6, Epid(1)), Err(Refusal::Unknown));
        assert_eq!(r.del(5, Epid(1)), Ok(()));
        assert_eq!(r.lookup(5), None);
        assert_eq!(r.del(5, Epid(1)), Err(Refusal::Unknown));
    }

    #[test]
    fn zero_is_a_wildcard_for_query_only() {
        let mut r = Registry::new();
        assert_eq!(r.lookup(0), None);
        assert_eq!(r.add(0, Epid(1)), Err(Refusal::Wildcard));
        assert_eq!(r.del(0, Epid(1)), Err(Refusal::Wildcard));
        r.add(9, Epid(90)).unwrap();
        r.add(3, Epid(30)).unwrap();
        assert_eq!(r.lookup(0), Some((3, Epid(30))));
        assert_eq!(r.lookup(9), Some((9, Epid(90))));
        assert_eq!(r.lookup(4), None);
    }

    #[test]
    fn bounded() {
        let mut r = Registry::new();
        for s in 1..=MAX_ENTRIES as u32 {
            r.add(s, Epid(u64::from(s))).unwrap();
        }
        assert_eq!(r.add(u32::MAX, Epid(0)), Err(Refusal::Full));
        // A duplicate still reports the duplicate, not fullness.
        assert_eq!(r.add(1, Epid(0)), Err(Refusal::Taken(Epid(1))));
        r.del(1, Epid(1)).unwrap();
        assert_eq!(r.add(u32::MAX, Epid(0)), Ok(()));
    }

    #[test]
    fn apply_replies_to_queries_only() {
        let mut r = Registry::new();
        let (reply, res) = r.apply(&Request::Add {
            service: 1,
            epid: Epid(7),
        });
        assert_eq!((reply, res), (None, Ok(())));
        let (reply, _) = r.apply(&Request::Query { service: 1 });
        assert_eq!(
            reply,
            Some(Reply::Found {
                service: 1,
                epid: Epid(7)
            })
        );
        let (reply, _) = r.apply(&Request::Query { service: 2 });
        assert_eq!(
            reply,
            Some(Reply::NotFound {
                status: STATUS_NOT_FOUND
            })
        );
        let (reply, res) = r.apply(&Request::Del {
            service: 1,
            epid: Epid(8),
        });
        assert_eq!((reply, res), (None, Err(Refusal::OtherEpid(Epid(7)))));
    }
}
