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
//! Removing an entry (`fi_av_remove`) forgets the peer: its later messages
//! count as coming from an unknown peer, and operations naming its address
//! fail with `FI_EINVAL`. Indices are never reused.

use super::addr::MrailAddr;
use super::domain::MrailDomainCore;
use crate::engine::PeerAddr;
use crate::fabric::{AddressVector, AvAttr, AvType, FiAddr};
use crate::{Error, ErrorKind, Result};
use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// One peer of the table.
#[derive(Clone, Debug)]
pub(crate) struct PeerEntry {
    pub(crate) addr: MrailAddr,
    /// The peer on each rail, in rail order.
    pub(crate) rails: Vec<PeerAddr>,
}

#[derive(Default)]
struct Table {
    /// `None` for a failed insert (a hole, as a psm table keeps) or a
    /// removed entry.
    entries: Vec<Option<Arc<PeerEntry>>>,
    by_token: FxHashMap<u64, u32>,
}

/// The shared state of an [`MrailAv`].
pub(crate) struct MrailAvCore {
    pub(crate) domain: Arc<MrailDomainCore>,
    rails: Vec<AddressVector>,
    table: RwLock<Table>,
    insert: Mutex<()>,
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
        let rail_attr = AvAttr {
            av_type: AvType::Table,
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
    ///
    /// # Errors (per address)
    /// `Inval` when the address has another number of rails than this
    /// domain; otherwise the first failing rail's insert error, naming
    /// the rail (`TimedOut`, `ConnRefused`, ...). A failed insert leaves a
    /// hole at its index, as a psm table does.
    pub fn insert(&self, addrs: &[MrailAddr]) -> Vec<Result<FiAddr>> {
        let core = &*self.core;
        let _guard = core.insert.lock().unwrap_or_else(PoisonError::into_inner);
        let n = core.rails.len();
        let valid: Vec<bool> = addrs.iter().map(|a| a.len() == n).collect();
        let wanted: Vec<&MrailAddr> = addrs
            .iter()
            .zip(&valid)
            .filter(|(_, v)| **v)
            .map(|(a, _)| a)
            .collect();
        // Every rail's inserts run on a thread of their own: each waits for
        // its handshakes, and the rails are independent.
        let per_rail: Vec<Vec<Result<FiAddr>>> = std::thread::scope(|s| {
            let handles: Vec<_> = core
                .rails
                .iter()
                .enumerate()
                .map(|(i, av)| {
                    let epids: Vec<_> = wanted.iter().map(|a| a.rails()[i]).collect();
                    s.spawn(move || av.insert(&epids))
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
        for (addr, ok) in addrs.iter().zip(valid) {
            if !ok {
                out.push(Err(Error::new(
                    ErrorKind::Inval,
                    format!(
                        "mrail address vector: {addr} has {} rails, this domain has {n}",
                        addr.len()
                    ),
                )));
                continue;
            }
            let mut rails = Vec::with_capacity(n);
            let mut failed = None;
            for (i, results) in per_rail.iter().enumerate() {
                match &results[k] {
                    Ok(fi) => match core.rails[i].core.resolve(*fi) {
                        Ok(p) => rails.push(p),
                        Err(e) => {
                            failed.get_or_insert_with(|| rail_error(i, addr, &e));
                        }
                    },
                    Err(e) => {
                        failed.get_or_insert_with(|| rail_error(i, addr, e));
                    }
                }
            }
            k += 1;
            let index = table.entries.len();
            let Ok(index32) = u32::try_from(index) else {
                out.push(Err(Error::new(
                    ErrorKind::NoMem,
                    "mrail address vector: full",
                )));
                continue;
            };
            match failed {
                Some(e) => {
                    table.entries.push(None);
                    out.push(Err(e));
                }
                None => {
                    table.by_token.entry(addr.token()).or_insert(index32);
                    table.entries.push(Some(Arc::new(PeerEntry {
                        addr: addr.clone(),
                        rails,
                    })));
                    out.push(Ok(FiAddr(index as u64)));
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

fn rail_error(rail: usize, addr: &MrailAddr, e: &Error) -> Error {
    Error::new(
        e.kind(),
        format!(
            "mrail address vector: cannot insert {addr}: rail {rail}: {}",
            e.message()
        ),
    )
}
