//! [`PeerBook`]: what the domain knows of its peers' deaths, shared by the
//! operations (which ask it before posting and register with it while they
//! wait), the engine gate, the AM message queue and the watch.
//!
//! The hot path is one relaxed load: while no peer of the domain has died,
//! [`PeerBook::refuse`] and [`PeerBook::death_of`] look at a counter and
//! return; the maps behind the lock are only read once some peer died.
//!
//! A death is for the domain's lifetime, with one exception: the
//! multi-rail provider, whose rail lost a peer that is there again (its
//! rail reconnected after the link came back), revives it
//! ([`PeerBook::revive`]); the watch then watches it afresh.

use super::core::Evidence;
use crate::engine::{Epid, PeerAddr};
use crate::proto::tag_layout::MSG_BIT;
use crate::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// A peer as an operation knows it: sends know the engine's handle,
/// directed MQ receives only the epid they match (with bit 63 clear, as
/// the untagged tag carries it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PeerRef {
    /// A connected peer.
    Peer(PeerAddr),
    /// An epid, `MSG_BIT` cleared.
    Epid(u64),
}

/// The epid form [`PeerRef::Epid`] uses.
pub(crate) fn masked(epid: Epid) -> u64 {
    epid.0 & !MSG_BIT
}

/// A peer declared dead, and why.
#[derive(Debug)]
pub(crate) struct Death {
    /// The engine's handle.
    pub peer: PeerAddr,
    /// Its epid, when known.
    pub epid: Option<Epid>,
    /// What showed it.
    pub evidence: Evidence,
}

impl Death {
    /// Whether this death is `r`'s.
    pub(crate) fn is(&self, r: PeerRef) -> bool {
        match r {
            PeerRef::Peer(p) => p == self.peer,
            PeerRef::Epid(e) => self.epid.is_some_and(|x| masked(x) == e),
        }
    }

    /// Whether it is for good: the peer's endpoint closed or its process
    /// is gone, not a silence or an engine's error, which a peer that is
    /// there again (a link back) can end.
    pub(crate) fn lasting(&self) -> bool {
        matches!(
            self.evidence,
            Evidence::Bye
                | Evidence::Exited { .. }
                | Evidence::Zombie { .. }
                | Evidence::PidReused { .. }
        )
    }

    /// The error an operation `what` towards this peer ends with (`Io`).
    pub(crate) fn error(&self, what: &str) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {self}"))
    }
}

impl fmt::Display for Death {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.epid {
            Some(e) => write!(f, "peer {e} is gone: {}", self.evidence),
            None => write!(f, "peer {:?} is gone: {}", self.peer, self.evidence),
        }
    }
}

/// An operation waiting for a peer, told when the peer dies.
pub(crate) trait Doomed: Send + Sync {
    /// The peer died: end the operation with `death`'s error. `false` when
    /// it cannot be done right now (ask again later).
    fn peer_died(&self, death: &Arc<Death>) -> bool;
}

struct Waiting {
    peer: PeerRef,
    op: Weak<dyn Doomed>,
}

#[derive(Default)]
struct Known {
    /// Dead peers, by handle and by masked epid.
    dead: HashMap<PeerAddr, Arc<Death>>,
    dead_epids: HashMap<u64, Arc<Death>>,
    /// Connected peers (from the gate's connects).
    epids: HashMap<PeerAddr, Epid>,
    peers: HashMap<u64, PeerAddr>,
    /// For the watch: deaths to act on, peers to greet, peers revived.
    fresh_deaths: Vec<Arc<Death>>,
    fresh_peers: Vec<PeerAddr>,
    fresh_revivals: Vec<PeerAddr>,
}

/// What happened since the watch last looked.
#[derive(Default)]
pub(crate) struct News {
    pub deaths: Vec<Arc<Death>>,
    pub peers: Vec<PeerAddr>,
    pub revivals: Vec<PeerAddr>,
}

/// The domain's record of dead peers and of operations waiting for peers.
#[derive(Default)]
pub(crate) struct PeerBook {
    /// Dead peers so far: the hot path's only look.
    dead_count: AtomicUsize,
    /// Set when `fresh_*` or a retry wait for the watch.
    news: AtomicBool,
    known: Mutex<Known>,
    waiting: Mutex<Vec<Waiting>>,
}

impl fmt::Debug for PeerBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerBook")
            .field("dead", &self.dead_count.load(Ordering::Relaxed))
            .finish()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Single-step updates: consistent after a panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PeerBook {
    /// An empty book.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether any peer died (one relaxed load).
    #[inline]
    pub(crate) fn any_dead(&self) -> bool {
        self.dead_count.load(Ordering::Relaxed) != 0
    }

    /// How many peers were declared dead.
    pub(crate) fn dead_count(&self) -> u64 {
        self.dead_count.load(Ordering::Relaxed) as u64
    }

    /// `Io` naming the peer and the evidence when `peer` is dead.
    #[inline]
    pub(crate) fn refuse(&self, peer: PeerAddr, what: &str) -> Result<()> {
        if !self.any_dead() {
            return Ok(());
        }
        self.refuse_slow(PeerRef::Peer(peer), what)
    }

    /// As [`refuse`](Self::refuse), for an epid (masked).
    #[inline]
    pub(crate) fn refuse_epid(&self, epid: u64, what: &str) -> Result<()> {
        if !self.any_dead() {
            return Ok(());
        }
        self.refuse_slow(PeerRef::Epid(epid), what)
    }

    #[cold]
    fn refuse_slow(&self, r: PeerRef, what: &str) -> Result<()> {
        match self.death_of(r) {
            Some(d) => Err(d.error(what)),
            None => Ok(()),
        }
    }

    /// The death of `r`, if it died.
    pub(crate) fn death_of(&self, r: PeerRef) -> Option<Arc<Death>> {
        if !self.any_dead() {
            return None;
        }
        let k = relock(&self.known);
        match r {
            PeerRef::Peer(p) => k.dead.get(&p).cloned(),
            PeerRef::Epid(e) => k.dead_epids.get(&e).cloned(),
        }
    }

    /// Declares `peer` dead (the first evidence wins); its death.
    pub(crate) fn declare(&self, peer: PeerAddr, evidence: Evidence) -> Arc<Death> {
        let mut k = relock(&self.known);
        if let Some(d) = k.dead.get(&peer) {
            return d.clone();
        }
        let death = Arc::new(Death {
            peer,
            epid: k.epids.get(&peer).copied(),
            evidence,
        });
        tracing::info!(
            peer = %death
                .epid
                .map_or_else(|| format!("{:?}", death.peer), |e| e.to_string()),
            evidence = %death.evidence,
            "peer died: {death}"
        );
        k.dead.insert(peer, death.clone());
        if let Some(e) = death.epid {
            k.dead_epids.insert(masked(e), death.clone());
        }
        k.fresh_deaths.push(death.clone());
        self.dead_count.fetch_add(1, Ordering::Release);
        self.news.store(true, Ordering::Release);
        death
    }

    /// `peer` was connected as `epid` (the gate reports every connect).
    pub(crate) fn connected(&self, epid: Epid, peer: PeerAddr) {
        let mut k = relock(&self.known);
        if k.epids.insert(peer, epid).is_none() {
            k.peers.insert(masked(epid), peer);
            k.fresh_peers.push(peer);
            self.news.store(true, Ordering::Release);
        }
    }

    /// Whether the watch has something to act on (one relaxed load).
    #[inline]
    pub(crate) fn has_news(&self) -> bool {
        self.news.load(Ordering::Relaxed)
    }

    /// The deaths and connections since the last call.
    pub(crate) fn take_news(&self) -> News {
        self.news.store(false, Ordering::Relaxed);
        let mut k = relock(&self.known);
        News {
            deaths: std::mem::take(&mut k.fresh_deaths),
            peers: std::mem::take(&mut k.fresh_peers),
            revivals: std::mem::take(&mut k.fresh_revivals),
        }
    }

    /// `peer`, declared dead, is there again (its connection was made
    /// anew): posts towards it are no longer refused, and its death ends
    /// no operation any more. Whether it was dead.
    pub(crate) fn revive(&self, peer: PeerAddr) -> bool {
        if !self.any_dead() {
            return false;
        }
        let mut k = relock(&self.known);
        let Some(death) = k.dead.remove(&peer) else {
            return false;
        };
        if let Some(e) = death.epid {
            if k.dead_epids
                .get(&masked(e))
                .is_some_and(|d| Arc::ptr_eq(d, &death))
            {
                k.dead_epids.remove(&masked(e));
            }
        }
        k.fresh_deaths.retain(|d| !Arc::ptr_eq(d, &death));
        k.fresh_revivals.push(peer);
        self.news.store(true, Ordering::Release);
        tracing::info!(peer = ?peer, "peer is back: {death} no more");
        true
    }

    /// Whether `death` is still in force (its peer was not revived).
    pub(crate) fn in_force(&self, death: &Arc<Death>) -> bool {
        let k = relock(&self.known);
        k.dead
            .get(&death.peer)
            .is_some_and(|d| Arc::ptr_eq(d, death))
    }

    /// Asks for another look at the news (an operation could not be ended
    /// yet).
    pub(crate) fn retry_later(&self) {
        self.news.store(true, Ordering::Release);
    }

    /// Registers `op` as waiting for `peer`; `peer`'s death if it is dead
    /// already (the caller ends the operation itself then; it may also be
    /// told, so ending must be idempotent).
    pub(crate) fn wait_for(&self, peer: PeerRef, op: Weak<dyn Doomed>) -> Option<Arc<Death>> {
        relock(&self.waiting).push(Waiting { peer, op });
        self.death_of(peer)
    }

    /// Ends the waiting operations of `death`'s peer; `false` when some
    /// could not be ended yet (they stay registered: call again).
    pub(crate) fn fail_waiting(&self, death: &Arc<Death>) -> bool {
        let doomed: Vec<(PeerRef, Arc<dyn Doomed>)> = {
            let mut w = relock(&self.waiting);
            let mut out = Vec::new();
            w.retain(|x| {
                if !death.is(x.peer) {
                    return x.op.strong_count() > 0;
                }
                if let Some(op) = x.op.upgrade() {
                    out.push((x.peer, op));
                }
                false
            });
            out
        };
        let mut all = true;
        for (peer, op) in doomed {
            // Outside the lock: ending an operation may push to a CQ or
            // wake a task.
            if !op.peer_died(death) {
                all = false;
                relock(&self.waiting).push(Waiting {
                    peer,
                    op: Arc::downgrade(&op),
                });
            }
        }
        all
    }

    /// Appends the peers that registered operations wait for (forgetting
    /// finished operations); epids are translated to connected peers.
    pub(crate) fn waiting_peers(&self, out: &mut Vec<PeerAddr>) {
        let mut epids = Vec::new();
        {
            let mut w = relock(&self.waiting);
            w.retain(|x| x.op.strong_count() > 0);
            for x in w.iter() {
                match x.peer {
                    PeerRef::Peer(p) => out.push(p),
                    PeerRef::Epid(e) => epids.push(e),
                }
            }
        }
        if !epids.is_empty() {
            let k = relock(&self.known);
            out.extend(epids.iter().filter_map(|e| k.peers.get(e).copied()));
        }
    }

    /// Operations registered and not yet known finished.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        relock(&self.waiting)
            .iter()
            .filter(|x| x.op.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    struct Op {
        told: AtomicU32,
        ready: AtomicBool,
    }

    impl Doomed for Op {
        fn peer_died(&self, _: &Arc<Death>) -> bool {
            if !self.ready.load(Ordering::Relaxed) {
                return false;
            }
            self.told.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    fn op(ready: bool) -> Arc<Op> {
        Arc::new(Op {
            told: AtomicU32::new(0),
            ready: AtomicBool::new(ready),
        })
    }

    fn weak(op: &Arc<Op>) -> Weak<dyn Doomed> {
        let w: Weak<Op> = Arc::downgrade(op);
        w
    }

    const P: PeerAddr = PeerAddr(10);
    const Q: PeerAddr = PeerAddr(11);

    #[test]
    fn nothing_is_refused_until_a_peer_dies() {
        let b = PeerBook::new();
        b.connected(Epid(0x8000_0000_0000_0042), P);
        assert!(b.refuse(P, "send").is_ok());
        assert!(b.death_of(PeerRef::Epid(0x42)).is_none());
        let d = b.declare(P, Evidence::Bye);
        assert_eq!(d.epid, Some(Epid(0x8000_0000_0000_0042)));
        let e = b.refuse(P, "tsend").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(
            e.message()
                .starts_with("tsend: peer fi_addr_psmx://8000000000000042 is gone: its endpoint"),
            "{e}"
        );
        assert!(
            b.refuse_epid(0x42, "recv").is_err(),
            "by epid, bit 63 cleared"
        );
        assert!(b.refuse(Q, "send").is_ok());
        // The first evidence stays.
        let again = b.declare(P, Evidence::Exited { pid: 1 });
        assert!(Arc::ptr_eq(&again, &d));
        let news = b.take_news();
        assert_eq!(news.deaths.len(), 1);
        assert_eq!(news.peers, vec![P]);
        assert!(!b.has_news());
    }

    #[test]
    fn waiting_operations_are_told_once_and_retried() {
        let b = PeerBook::new();
        let (a, c, slow) = (op(true), op(true), op(false));
        assert!(b.wait_for(PeerRef::Peer(P), weak(&a)).is_none());
        assert!(b.wait_for(PeerRef::Peer(Q), weak(&c)).is_none());
        assert!(b.wait_for(PeerRef::Peer(P), weak(&slow)).is_none());
        let mut peers = Vec::new();
        b.waiting_peers(&mut peers);
        peers.sort_unstable_by_key(|p| p.0);
        assert_eq!(peers, vec![P, P, Q]);
        let d = b.declare(P, Evidence::Bye);
        assert!(!b.fail_waiting(&d), "one was not ready");
        assert_eq!(a.told.load(Ordering::Relaxed), 1);
        assert_eq!(c.told.load(Ordering::Relaxed), 0);
        slow.ready.store(true, Ordering::Relaxed);
        assert!(b.fail_waiting(&d));
        assert!(b.fail_waiting(&d), "nothing left");
        assert_eq!(slow.told.load(Ordering::Relaxed), 1);
        assert_eq!(a.told.load(Ordering::Relaxed), 1);
        // Registering after the death: the caller hears at once.
        let late = op(true);
        assert!(b.wait_for(PeerRef::Peer(P), weak(&late)).is_some());
        drop(late);
        drop(c);
        assert_eq!(b.waiting(), 0, "finished operations are forgotten");
    }

    #[test]
    fn a_revived_peer_is_refused_no_more_and_can_die_again() {
        let b = PeerBook::new();
        b.connected(Epid(0x42), P);
        assert!(!b.revive(P), "not dead");
        let d = b.declare(P, Evidence::Bye);
        assert!(b.in_force(&d));
        assert!(b.revive(P));
        assert!(!b.in_force(&d));
        assert!(b.refuse(P, "send").is_ok());
        assert!(b.refuse_epid(0x42, "recv").is_ok());
        let news = b.take_news();
        assert!(news.deaths.is_empty(), "the revived death is not acted on");
        assert_eq!(news.revivals, vec![P]);
        let late = op(true);
        assert!(b.wait_for(PeerRef::Peer(P), weak(&late)).is_none());
        let again = b.declare(P, Evidence::Exited { pid: 1 });
        assert!(!Arc::ptr_eq(&again, &d), "a new death");
        assert!(b.fail_waiting(&again));
        assert_eq!(late.told.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn epid_waiters_are_matched_and_watched_through_the_connect_map() {
        let b = PeerBook::new();
        b.connected(Epid(0x77), Q);
        let a = op(true);
        b.wait_for(PeerRef::Epid(0x77), weak(&a));
        b.wait_for(PeerRef::Epid(0x99), weak(&a));
        let mut peers = Vec::new();
        b.waiting_peers(&mut peers);
        assert_eq!(peers, vec![Q], "an unknown epid names no peer to watch");
        let d = b.declare(Q, Evidence::Bye);
        assert!(b.fail_waiting(&d));
        assert_eq!(a.told.load(Ordering::Relaxed), 1);
    }
}
