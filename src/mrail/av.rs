//! [`MrailAv`]: the multi-rail address vector (`fi_av` of `ofi_mrail`).
//!
//! Inserting an mrail address inserts (connects) rail `i`'s endpoint id in
//! rail `i`'s psm address vector, every rail side by side, and gives the
//! peer one mrail `fi_addr`: its index in this table. The entry keeps the
//! peer's engine handle on every rail (what the rails' operations take)
//! and its identity token, by which the endpoint recognises the peer's
//! messages whatever rail they come on. C asserted that every rail's AV
//! gave the same index; here the rails' indices never matter.
//!
//! A rail whose link is down is not tried (unless every rail's is), and
//! a rail that does not connect does not fail the insert while another
//! does: the peer is inserted with the rails that connected, and the
//! endpoint connects the others once their links serve (the rail's
//! connect, by the endpoint's driver, fills the entry in). The insert
//! fails only when no rail connects.
//!
//! An address vector opened with [`AvAttr::lazy_connect`] connects
//! nothing at insert: an entry starts with no rail connected, and the
//! endpoint connects its rails (each on a thread of its own, as it
//! connects a rail that came back) when an operation first names the peer
//! or a frame first comes from it. Sends posted meanwhile wait for the
//! first rail, within `FI_PSM_TIMEOUT`; injects and RMA calls that cannot
//! wait answer `Again` until one serves. Programs that exchange addresses
//! out of band insert them lazily: a peer that blocks on the exchange
//! progresses nothing, and a connect made then would wait for it.
//!
//! Removing an entry (`fi_av_remove`) forgets the peer: its later messages
//! count as coming from an unknown peer, and operations naming its address
//! fail with `FI_EINVAL`. Indices are never reused.

use super::addr::MrailAddr;
use super::domain::MrailDomainCore;
use super::link_watch::LinkWatch;
use crate::engine::PeerAddr;
use crate::fabric::{AddressVector, AvAttr, AvType, FiAddr};
use crate::{Error, ErrorKind, Result};
use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

/// [`PeerEntry`]'s mark of a rail not connected yet.
const UNCONNECTED: u64 = u64::MAX;

/// One peer of the table.
pub(crate) struct PeerEntry {
    pub(crate) addr: MrailAddr,
    /// The peer's engine handle on each rail, in rail order
    /// ([`UNCONNECTED`] until the rail connects).
    rails: Vec<AtomicU64>,
    /// Inserted into a lazy address vector and not used yet: the
    /// endpoint connects its rails when it first meets the peer.
    unused: AtomicBool,
}

impl fmt::Debug for PeerEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerEntry")
            .field("addr", &self.addr.to_string())
            .field("connected", &format_args!("{:#x}", self.connected()))
            .finish()
    }
}

impl PeerEntry {
    /// An entry with the rails of `rails` that are `Some` connected.
    pub(crate) fn new(addr: MrailAddr, rails: &[Option<PeerAddr>]) -> Self {
        PeerEntry {
            addr,
            rails: rails
                .iter()
                .map(|p| AtomicU64::new(p.map_or(UNCONNECTED, |p| p.0)))
                .collect(),
            unused: AtomicBool::new(false),
        }
    }

    /// An entry of a lazy address vector: no rail connected, every one
    /// to be connected at the peer's first use.
    fn unused(addr: MrailAddr) -> Self {
        let n = addr.len();
        let entry = PeerEntry::new(addr, &vec![None; n]);
        entry.unused.store(true, Ordering::Relaxed);
        entry
    }

    /// Whether this is the peer's first use (true once, for an entry of a
    /// lazy address vector that no operation or frame has named yet).
    pub(crate) fn take_first_use(&self) -> bool {
        self.unused.load(Ordering::Relaxed) && self.unused.swap(false, Ordering::AcqRel)
    }

    /// The peer on rail `rail`, once connected there.
    pub(crate) fn rail(&self, rail: usize) -> Option<PeerAddr> {
        let p = self.rails.get(rail)?.load(Ordering::Acquire);
        (p != UNCONNECTED).then_some(PeerAddr(p))
    }

    /// The peer on rail `rail`, or `Io` naming the rail when it is not
    /// connected there (yet).
    pub(crate) fn on_rail(&self, rail: usize) -> Result<PeerAddr> {
        self.rail(rail).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("rail {rail}: not connected to peer {} (yet)", self.addr),
            )
        })
    }

    /// The rails connected, as a mask.
    pub(crate) fn connected(&self) -> u64 {
        (0..self.rails.len().min(64))
            .filter(|&r| self.rail(r).is_some())
            .fold(0, |m, r| m | 1 << r)
    }

    /// Rail `rail` connected to the peer as `peer`.
    pub(crate) fn set_rail(&self, rail: usize, peer: PeerAddr) {
        if let Some(slot) = self.rails.get(rail) {
            slot.store(peer.0, Ordering::Release);
        }
    }
}

#[derive(Default)]
struct Table {
    /// `None` for a failed insert (a hole, as a psm table keeps) or a
    /// removed entry.
    entries: Vec<Option<Arc<PeerEntry>>>,
    by_token: FxHashMap<u64, u32>,
}

impl Table {
    /// The entry of `addr` inserted before, if any: a peer inserted again
    /// shares its entry, so that every index of the peer sees each rail
    /// connect.
    fn earlier(&self, addr: &MrailAddr) -> Option<Arc<PeerEntry>> {
        self.by_token
            .get(&addr.token())
            .and_then(|&i| self.entries.get(i as usize).cloned().flatten())
            .filter(|e| e.addr == *addr)
    }

    /// Appends `entry` for `addr`: its `fi_addr`.
    fn push(&mut self, addr: &MrailAddr, entry: Arc<PeerEntry>) -> Result<FiAddr> {
        let index = self.entries.len();
        let index32 = u32::try_from(index)
            .map_err(|_| Error::new(ErrorKind::NoMem, "mrail address vector: full"))?;
        self.by_token.entry(addr.token()).or_insert(index32);
        self.entries.push(Some(entry));
        Ok(FiAddr(index as u64))
    }
}

/// `Inval` when `addr` has another number of rails than the domain's `n`.
fn check_rails(addr: &MrailAddr, n: usize) -> Result<()> {
    if addr.len() == n {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Inval,
        format!(
            "mrail address vector: {addr} has {} rails, this domain has {n}",
            addr.len()
        ),
    ))
}

/// The shared state of an [`MrailAv`].
pub(crate) struct MrailAvCore {
    pub(crate) domain: Arc<MrailDomainCore>,
    rails: Vec<AddressVector>,
    table: RwLock<Table>,
    insert: Mutex<()>,
    connect_timeout: Duration,
    /// Rails connect at the peer's first use, not at insert
    /// ([`AvAttr::lazy_connect`]).
    lazy: bool,
    /// Entries inserted with rails not connected, for the endpoint to
    /// connect later ([`take_incomplete`](MrailAvCore::take_incomplete)).
    incomplete: Mutex<Vec<Arc<PeerEntry>>>,
    any_incomplete: AtomicBool,
}

impl fmt::Debug for MrailAvCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.table.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("MrailAv")
            .field("rails", &self.rails.len())
            .field("entries", &t.entries.len())
            .finish()
    }
}

impl MrailAvCore {
    /// The peer at `addr`.
    pub(crate) fn peer(&self, addr: FiAddr) -> Result<(u32, Arc<PeerEntry>)> {
        let t = self.table.read().unwrap_or_else(PoisonError::into_inner);
        let found = u32::try_from(addr.0)
            .ok()
            .and_then(|i| Some((i, t.entries.get(i as usize)?.clone()?)));
        found.ok_or_else(|| bad_addr(addr))
    }

    /// The index of the peer whose identity token is `token`.
    pub(crate) fn index_of_token(&self, token: u64) -> Option<u32> {
        let t = self.table.read().unwrap_or_else(PoisonError::into_inner);
        t.by_token.get(&token).copied()
    }

    /// The peer at index `i`, if present.
    pub(crate) fn entry(&self, i: u32) -> Option<Arc<PeerEntry>> {
        let t = self.table.read().unwrap_or_else(PoisonError::into_inner);
        t.entries.get(i as usize)?.clone()
    }

    /// The entries inserted since the last call with a rail that did not
    /// connect (one relaxed load when there are none).
    pub(crate) fn take_incomplete(&self) -> Vec<Arc<PeerEntry>> {
        if !self.any_incomplete.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(
            &mut *self
                .incomplete
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// How long a rail's connect waits for the peer.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
}

#[cold]
fn bad_addr(addr: FiAddr) -> Error {
    if addr.is_unspec() {
        return Error::new(
            ErrorKind::Inval,
            "mrail address vector: FI_ADDR_UNSPEC names no peer",
        );
    }
    Error::new(
        ErrorKind::Inval,
        format!("mrail address vector: {addr} names no peer (never inserted, failed or removed)"),
    )
}

/// A multi-rail address vector: a cheap `Clone` handle.
#[derive(Clone, Debug)]
pub struct MrailAv {
    pub(crate) core: Arc<MrailAvCore>,
}

impl MrailAv {
    pub(crate) fn open(domain: Arc<MrailDomainCore>, attr: AvAttr) -> Result<MrailAv> {
        let connect_timeout = attr.connect_timeout;
        let lazy = attr.lazy_connect;
        // The rails' own tables are never used to connect lazily: this
        // table connects its peers' rails (at insert, or through the
        // endpoint at first use).
        let rail_attr = AvAttr {
            av_type: AvType::Table,
            lazy_connect: false,
            ..attr
        };
        let rails = domain
            .rails
            .iter()
            .map(|d| d.av(rail_attr.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(MrailAv {
            core: Arc::new(MrailAvCore {
                domain,
                rails,
                table: RwLock::new(Table::default()),
                insert: Mutex::new(()),
                connect_timeout,
                lazy,
                incomplete: Mutex::new(Vec::new()),
                any_incomplete: AtomicBool::new(false),
            }),
        })
    }

    /// Always a table (`FI_AV_TABLE`): addresses are indices in insertion
    /// order.
    pub fn av_type(&self) -> AvType {
        AvType::Table
    }

    /// Inserts peers (`fi_av_insert`): connects every rail of each, all
    /// rails side by side, and gives one result per address, in order.
    /// Rails whose links are down are not tried (unless every rail's is);
    /// a peer is inserted with the rails that connected, the endpoint
    /// connecting the others once their links serve (module docs).
    ///
    /// # Errors (per address)
    /// `Inval` when the address has another number of rails than this
    /// domain; when no rail connects, the first failing rail's insert
    /// error, naming the rail (`TimedOut`, `ConnRefused`, ...). A failed
    /// insert leaves a hole at its index, as a psm table does.
    pub fn insert(&self, addrs: &[MrailAddr]) -> Vec<Result<FiAddr>> {
        let core = &*self.core;
        let _guard = core.insert.lock().unwrap_or_else(PoisonError::into_inner);
        let n = core.rails.len();
        if core.lazy {
            let mut table = core.table.write().unwrap_or_else(PoisonError::into_inner);
            return addrs
                .iter()
                .map(|addr| {
                    check_rails(addr, n)?;
                    let earlier = table.earlier(addr);
                    let entry =
                        earlier.unwrap_or_else(|| Arc::new(PeerEntry::unused(addr.clone())));
                    table.push(addr, entry)
                })
                .collect();
        }
        let valid: Vec<bool> = addrs.iter().map(|a| a.len() == n).collect();
        let wanted: Vec<&MrailAddr> = addrs
            .iter()
            .zip(&valid)
            .filter(|(_, v)| **v)
            .map(|(a, _)| a)
            .collect();
        // Rails whose links are down now: tried only if every rail's is.
        let ips: Vec<_> = core.domain.attr().rails.iter().map(|r| r.ip).collect();
        let links = LinkWatch::new(&ips).sample(std::time::Instant::now());
        let down: Vec<bool> = (0..n)
            .map(|i| links.get(i).copied().flatten() == Some(false))
            .collect();
        let skip = |i: usize| down[i] && !down.iter().all(|d| *d);
        // Every rail's inserts run on a thread of their own: each waits for
        // its handshakes, and the rails are independent.
        let per_rail: Vec<Vec<Result<FiAddr>>> = std::thread::scope(|s| {
            let handles: Vec<_> = core
                .rails
                .iter()
                .enumerate()
                .map(|(i, av)| {
                    let epids: Vec<_> = wanted.iter().map(|a| a.rails()[i]).collect();
                    s.spawn(move || {
                        if skip(i) {
                            return epids.iter().map(|_| Err(link_down(i))).collect();
                        }
                        av.insert(&epids)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        wanted
                            .iter()
                            .map(|_| Err(Error::new(ErrorKind::Other, "a rail's insert panicked")))
                            .collect()
                    })
                })
                .collect()
        });
        let mut table = core.table.write().unwrap_or_else(PoisonError::into_inner);
        let mut k = 0;
        let mut out = Vec::with_capacity(addrs.len());
        for addr in addrs {
            if let Err(e) = check_rails(addr, n) {
                out.push(Err(e));
                continue;
            }
            let mut rails = Vec::with_capacity(n);
            let mut failed = None;
            for (i, results) in per_rail.iter().enumerate() {
                let peer = results[k]
                    .as_ref()
                    .map_err(|e| rail_error(i, addr, e))
                    .and_then(|fi| {
                        core.rails[i]
                            .core
                            .resolve(*fi)
                            .map_err(|e| rail_error(i, addr, &e))
                    });
                match peer {
                    Ok(p) => rails.push(Some(p)),
                    Err(e) => {
                        // The error told is a rail's that was tried.
                        if !skip(i) {
                            tracing::warn!("{e}; the endpoint connects it later");
                            if failed.as_ref().is_some_and(|(tried, _)| !tried) {
                                failed = None;
                            }
                        }
                        failed.get_or_insert((!skip(i), e));
                        rails.push(None);
                    }
                }
            }
            k += 1;
            match failed {
                Some((_, e)) if rails.iter().all(Option::is_none) => {
                    table.entries.push(None);
                    out.push(Err(e));
                }
                _ => {
                    let entry = match table.earlier(addr) {
                        Some(e) => {
                            for (r, p) in rails.iter().enumerate() {
                                if let Some(p) = p {
                                    e.set_rail(r, *p);
                                }
                            }
                            e
                        }
                        None => Arc::new(PeerEntry::new(addr.clone(), &rails)),
                    };
                    if (0..n).any(|r| entry.rail(r).is_none()) {
                        core.incomplete
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(entry.clone());
                        core.any_incomplete.store(true, Ordering::Release);
                    }
                    out.push(table.push(addr, entry));
                }
            }
        }
        out
    }

    /// Inserts one address in its text form (`fi_addr_mrail://...`).
    ///
    /// # Errors
    /// `Inval` naming the text when it is not an mrail address; otherwise
    /// as [`insert`](Self::insert).
    pub fn insert_str(&self, addr: &str) -> Result<FiAddr> {
        let a: MrailAddr = addr.parse()?;
        self.insert(&[a]).remove(0)
    }

    /// The address at `addr` (`fi_av_lookup`).
    ///
    /// # Errors
    /// `Inval` for an address that names no peer.
    pub fn lookup(&self, addr: FiAddr) -> Result<MrailAddr> {
        self.core.peer(addr).map(|(_, e)| e.addr.clone())
    }

    /// The text form of the address at `addr` (`fi_av_straddr`).
    ///
    /// # Errors
    /// As [`lookup`](Self::lookup).
    pub fn straddr(&self, addr: FiAddr) -> Result<String> {
        self.lookup(addr).map(|a| a.to_string())
    }

    /// `fi_av_remove`: forgets the peers (module docs).
    ///
    /// # Errors
    /// `Inval` for an address that names no peer (nothing is removed then).
    pub fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        let mut table = self
            .core
            .table
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for a in addrs {
            let ok = usize::try_from(a.0)
                .ok()
                .is_some_and(|i| table.entries.get(i).is_some_and(Option::is_some));
            if !ok {
                return Err(bad_addr(*a));
            }
        }
        for a in addrs {
            let i = a.0 as usize;
            if let Some(e) = table.entries[i].take() {
                if table.by_token.get(&e.addr.token()) == Some(&(i as u32)) {
                    table.by_token.remove(&e.addr.token());
                }
            }
        }
        Ok(())
    }

    /// Number of entries (holes and removed entries included).
    pub fn count(&self) -> usize {
        let t = self
            .core
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        t.entries.len()
    }

    /// Rail `i`'s psm address vector.
    pub fn rail(&self, i: usize) -> Option<&AddressVector> {
        self.core.rails.get(i)
    }

    /// Whether `other` is a handle of the same AV.
    pub fn same(&self, other: &MrailAv) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}

/// Why a rail was not tried.
fn link_down(rail: usize) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("rail {rail}'s link is down (it connects once the link is up)"),
    )
}

fn rail_error(rail: usize, addr: &MrailAddr, e: &Error) -> Error {
    Error::new(
        e.kind(),
        format!(
            "mrail address vector: cannot insert {addr}: rail {rail}: {}",
            e.message()
        ),
    )
}
