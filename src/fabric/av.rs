//! The address vector (`fi_av`): epids in, `fi_addr` handles out, and the
//! O(1) translation every operation makes from `fi_addr` to the engine's
//! connected-peer handle.
//!
//! Semantics follow the psm provider (fi_av(3); C: `prov/psm/src/psmx_av.c`):
//!
//! * **Insert** connects every epid through the engine (`psm_ep_connect`),
//!   waiting at most [`AvAttr::connect_timeout`] (30 s by default, as C).
//!   Already-connected peers, duplicates in one batch and the endpoint
//!   itself succeed. Each address gets its own result.
//! * **Connecting at first use** ([`AvAttr::lazy_connect`], what libfabric's
//!   psm2 provider calls lazy connection): insert only records the epid and
//!   hands out its `fi_addr`; the first operation that names the address
//!   connects (in its post, waiting at most the connect timeout), and an
//!   address that cannot be reached fails that operation with the error an
//!   insert would have given (the next use tries again). Connecting needs
//!   the peer to make progress (PSM's connect and the job handshake are
//!   both answered from the peer's progress), and an insert that connects
//!   waits for a peer that may be busy elsewhere: a libfabric program that
//!   exchanged addresses out of band inserts its peer's while the peer,
//!   done with its own insert, blocks on the same control socket. Deferred
//!   to the first message, the connect meets a peer that is waiting for
//!   that message, so progressing. The C provider libraries connect at
//!   first use; the Rust API at insert unless asked.
//! * **Map** ([`AvType::Map`], the default): `fi_addr` values are opaque
//!   handles. Inserting an epid that is already in the map gives the same
//!   handle back; a failed insertion uses no handle. The handles carry a
//!   per-AV salt, so a value from another AV, an index or `0` is rejected
//!   (`FI_EINVAL`) instead of reaching the engine (C's map `fi_addr` is a
//!   PSM pointer that PSM would dereference).
//! * **Table** ([`AvType::Table`]): `fi_addr` is the insertion index.
//!   Every insertion takes the next index, duplicates included; a failed
//!   one leaves a hole (as C: the index advances), which resolves to
//!   `FI_EINVAL`.
//! * **Remove** is a no-op returning `Ok`, as in C: entries stay valid
//!   until the AV is dropped, so an `fi_addr` held by an in-flight
//!   operation never dangles.
//!
//! * **Async inserts** ([`AddressVector::insert_async`],
//!   [`insert_str_async`](AddressVector::insert_str_async),
//!   [`insert_service_async`](AddressVector::insert_service_async)): the
//!   engines' connect is a blocking call (`psm_ep_connect`; the soft
//!   engine follows the same contract), so it runs on a thread of its own
//!   (`psmrail-connect`, one per insert, as mrail's reconnects run), and
//!   the future awaits it: the results are the blocking form's, and no
//!   executor thread waits. A dropped future records nothing unless its
//!   connect had ended (its docs, "Cancel safety").
//!
//! The entries live in [`AvEntries`](super::av_entries), an append-only
//! array read without locks; the reverse maps (peer or epid to `fi_addr`,
//! for completion sources) are hash maps behind a read-write lock.

use super::av_entries::{AvEntries, Entry, MAX_ENTRIES};
use super::domain::DomainCore;
use super::name_server::Service;
use super::offload::{self, Offload};
use super::{AvType, FiAddr};
use crate::engine::{Epid, PeerAddr};
use crate::{Error, ErrorKind, Result};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long an insert waits for its peers by default: the C provider's
/// `psm_ep_connect` timeout (30 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The initial table size when none is given (`attr.count`, 64 in C).
pub const DEFAULT_AV_COUNT: usize = 64;

/// Attributes of an address vector (`struct fi_av_attr`).
///
/// ```
/// use std::time::Duration;
/// use psmrail::fabric::{AvAttr, AvType};
/// let attr = AvAttr::new().av_type(AvType::Table).count(16).connect_timeout(Duration::from_secs(2));
/// assert_eq!(attr.av_type, AvType::Table);
/// assert_eq!(AvAttr::default().connect_timeout, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvAttr {
    /// Map or table; `Unspec` is a map (the C default).
    pub av_type: AvType,
    /// Expected number of addresses: storage for that many is made at once
    /// (more are accepted).
    pub count: usize,
    /// How long one insert (or the name-server query of
    /// [`AddressVector::insert_service`]) may wait for its peers; with
    /// [`lazy_connect`](Self::lazy_connect), how long the first use of an
    /// address may wait for its peer.
    pub connect_timeout: Duration,
    /// Connect at an address's first use instead of at insert (see the
    /// module docs); off by default. An mrail address vector
    /// ([`MrailDomain::av`](crate::mrail::MrailDomain::av)) connects all
    /// rails of a peer at its first use then (`mrail::av`'s docs).
    pub lazy_connect: bool,
}

impl Default for AvAttr {
    fn default() -> Self {
        AvAttr {
            av_type: AvType::Unspec,
            count: DEFAULT_AV_COUNT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            lazy_connect: false,
        }
    }
}

impl AvAttr {
    /// The defaults: map, 64 entries, 30 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the type.
    pub fn av_type(mut self, av_type: AvType) -> Self {
        self.av_type = av_type;
        self
    }

    /// Sets the expected number of addresses.
    pub fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connects each address at its first use instead of at insert.
    ///
    /// ```
    /// use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
    /// # use psmrail::config::PsmConfig;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
    /// let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = Fabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new().lazy_connect(true))?;
    /// // Nothing is dialled: an address nobody listens on goes in, and
    /// // fails the first operation that uses it instead.
    /// let nobody = psmrail::engine::Epid(0x7f00_0001_ffff);
    /// let addr = av.insert(&[nobody]).remove(0)?;
    /// assert_eq!(av.lookup(addr)?, nobody);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn lazy_connect(mut self, on: bool) -> Self {
        self.lazy_connect = on;
        self
    }
}

/// Salts of map AVs: distinct per AV (until 2^31 AVs were opened), never 0.
static NEXT_SALT: AtomicU32 = AtomicU32::new(1);

fn next_salt() -> u32 {
    loop {
        let s = NEXT_SALT.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff;
        if s != 0 {
            return s;
        }
    }
}

/// The shared state of an [`AddressVector`].
pub(crate) struct AvCore {
    domain: Arc<DomainCore>,
    /// `Some(salt)` for a map, `None` for a table.
    salt: Option<u32>,
    connect_timeout: Duration,
    lazy_connect: bool,
    entries: AvEntries,
    /// Serializes inserts (readers never take it).
    insert: Mutex<()>,
    reverse: RwLock<Reverse>,
    /// Distinct per AV in this process (never 0): the key of the
    /// per-thread source cache (see `source_of`).
    id: u64,
}

/// Ids of AVs (see `AvCore::id`).
static NEXT_AV_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The last source `source_of` found by engine peer handle on this
    /// thread: (AV id, peer, address). A steady sender's completions then
    /// skip the reverse map and its lock.
    static LAST_SOURCE: Cell<(u64, PeerAddr, FiAddr)> =
        const { Cell::new((0, PeerAddr(0), FiAddr(0))) };
}

#[derive(Default)]
struct Reverse {
    by_epid: HashMap<Epid, u64, WordHash>,
    by_peer: HashMap<PeerAddr, u64, WordHash>,
}

/// The reverse maps' keys are single 64-bit words that this process's
/// engine handed out (not attacker-chosen), so they hash with FxHash (one
/// multiply) instead of SipHash: every receive looks its source up here.
type WordHash = rustc_hash::FxBuildHasher;

impl fmt::Debug for AvCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AvCore")
            .field("type", &self.av_type())
            .field("count", &self.entries.len())
            .finish()
    }
}

impl AvCore {
    fn av_type(&self) -> AvType {
        if self.salt.is_some() {
            AvType::Map
        } else {
            AvType::Table
        }
    }

    pub(crate) fn domain(&self) -> &Arc<DomainCore> {
        &self.domain
    }

    /// The `fi_addr` of entry `idx`.
    #[inline]
    fn addr_of(&self, idx: u64) -> FiAddr {
        match self.salt {
            Some(salt) => FiAddr((u64::from(salt) << 32) | idx),
            None => FiAddr(idx),
        }
    }

    /// The entry index `addr` names, if it is a well-formed value of this
    /// AV (a map's salt matches). Bounds are checked by the entries.
    #[inline]
    fn index_of(&self, addr: FiAddr) -> Option<u64> {
        let idx = match self.salt {
            Some(salt) if addr.0 >> 32 == u64::from(salt) => addr.0 & 0xffff_ffff,
            Some(_) => return None,
            None => addr.0,
        };
        Some(idx)
    }

    /// The peer `addr` names: the hot path of every operation. The first
    /// use of an address inserted without connecting connects it here.
    #[inline]
    pub(crate) fn resolve(&self, addr: FiAddr) -> Result<PeerAddr> {
        match self.index_of(addr).and_then(|i| self.entries.peer(i)) {
            Some(p) => Ok(p),
            None => self.resolve_slow(addr),
        }
    }

    #[cold]
    fn resolve_slow(&self, addr: FiAddr) -> Result<PeerAddr> {
        match self
            .index_of(addr)
            .and_then(|i| Some((i, self.entries.get(i)?)))
        {
            Some((idx, Entry::Pending(epid))) => self.connect_pending(idx, epid),
            Some((_, Entry::Peer(_, peer))) => Ok(peer),
            _ => Err(self.bad_addr(addr)),
        }
    }

    /// Connects the pending entry `idx` (first use of its address): one
    /// connect at a time per AV (inserts included), so concurrent first
    /// uses of an address connect it once. A failure leaves the entry
    /// pending for the next use.
    fn connect_pending(&self, idx: u64, epid: Epid) -> Result<PeerAddr> {
        let _guard = self.insert.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Entry::Peer(_, peer)) = self.entries.get(idx) {
            return Ok(peer);
        }
        self.domain.ensure_open()?;
        let outcome = self
            .domain
            .engine()
            .connect(&[epid], self.connect_timeout)
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Other, "address vector: no result")));
        match outcome {
            Ok(peer) => {
                let mut rev = self.reverse.write().unwrap_or_else(|p| p.into_inner());
                self.entries.connected(idx, peer);
                rev.by_peer.entry(peer).or_insert(idx);
                Ok(peer)
            }
            Err(e) => {
                let message = format!(
                    "address vector: cannot connect to {epid} at its first use: {}",
                    e.message()
                );
                Err(Error::with_source(e.kind(), message, e))
            }
        }
    }

    /// [`AddressVector::insert`]; with `cancel`, nothing is done when it
    /// is set before the connect starts, and nothing recorded when it is
    /// set before the connect ends (`None` then).
    fn insert_with(
        &self,
        epids: &[Epid],
        cancel: Option<&AtomicBool>,
    ) -> Option<Vec<Result<FiAddr>>> {
        if let Err(e) = self.domain.ensure_open() {
            return Some(closed_results(epids.len(), &e));
        }
        // One insert at a time: indices are handed out in call order and
        // a map never connects the same epid twice concurrently.
        let guard = self.insert.lock().unwrap_or_else(|p| p.into_inner());
        self.insert_locked(epids, cancel, &guard)
    }

    /// [`insert_with`](Self::insert_with) with the insert lock held.
    fn insert_locked(
        &self,
        epids: &[Epid],
        cancel: Option<&AtomicBool>,
        _guard: &MutexGuard<'_, ()>,
    ) -> Option<Vec<Result<FiAddr>>> {
        let core = self;
        let cancelled = || cancel.is_some_and(|c| c.load(Ordering::Acquire));
        if cancelled() {
            return None;
        }
        if let Err(e) = core.domain.ensure_open() {
            return Some(closed_results(epids.len(), &e));
        }
        let mut results: Vec<Option<Result<FiAddr>>> = (0..epids.len()).map(|_| None).collect();
        // A map reuses what it holds already.
        let mut todo: Vec<usize> = Vec::with_capacity(epids.len());
        {
            let rev = core.reverse.read().unwrap_or_else(|p| p.into_inner());
            for (i, e) in epids.iter().enumerate() {
                match (core.salt, rev.by_epid.get(e)) {
                    (Some(_), Some(&idx)) => results[i] = Some(Ok(core.addr_of(idx))),
                    _ => todo.push(i),
                }
            }
        }
        // Lazily, nothing is dialled: every epid goes in pending.
        let wanted: Vec<Epid> = todo.iter().map(|&i| epids[i]).collect();
        let connected: Vec<Result<Option<PeerAddr>>> = if core.lazy_connect {
            wanted.iter().map(|_| Ok(None)).collect()
        } else if wanted.is_empty() {
            Vec::new()
        } else {
            core.domain
                .engine()
                .connect(&wanted, core.connect_timeout)
                .into_iter()
                .map(|r| r.map(Some))
                .collect()
        };
        if cancelled() {
            return None;
        }
        let mut rev = core.reverse.write().unwrap_or_else(|p| p.into_inner());
        for (&i, outcome) in todo.iter().zip(connected) {
            let epid = epids[i];
            // A duplicate within this batch of a map: same address.
            let duplicate = core.salt.and(rev.by_epid.get(&epid).copied());
            let result = match (outcome, duplicate) {
                (Ok(_), Some(idx)) => Ok(core.addr_of(idx)),
                (Ok(peer), None) => {
                    let entry = peer.map_or(Entry::Pending(epid), |p| Entry::Peer(epid, p));
                    match core.entries.push(entry) {
                        Some(idx) => {
                            rev.by_epid.entry(epid).or_insert(idx);
                            if let Some(p) = peer {
                                rev.by_peer.entry(p).or_insert(idx);
                            }
                            Ok(core.addr_of(idx))
                        }
                        None => Err(full()),
                    }
                }
                (Err(e), _) => {
                    if core.salt.is_none() && core.entries.push(Entry::Hole(epid)).is_none() {
                        Err(full())
                    } else {
                        Err(insert_error(epid, e))
                    }
                }
            };
            results[i] = Some(result);
        }
        Some(
            results
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|| {
                        Err(Error::new(ErrorKind::Other, "address vector: no result"))
                    })
                })
                .collect(),
        )
    }

    /// The epid the name server on `node` has under `service`, waiting at
    /// most the connect timeout.
    fn query_service(&self, node: &str, service: Service) -> Result<Epid> {
        let port = self.domain.fabric().name_server_port();
        super::name_server::query(node, port, service, self.connect_timeout).map(|(_, e)| e)
    }

    #[cold]
    fn bad_addr(&self, addr: FiAddr) -> Error {
        if addr.is_unspec() {
            return Error::new(
                ErrorKind::Inval,
                "address vector: FI_ADDR_UNSPEC names no peer",
            );
        }
        match self.index_of(addr).and_then(|i| self.entries.get(i)) {
            Some(Entry::Hole(epid)) => Error::new(
                ErrorKind::Inval,
                format!("address vector: {addr} is the failed insertion of {epid}"),
            ),
            _ => Error::new(
                ErrorKind::Inval,
                format!(
                    "address vector: {addr} was not returned by this {} AV ({} entries)",
                    if self.salt.is_some() { "map" } else { "table" },
                    self.entries.len()
                ),
            ),
        }
    }

    /// The `fi_addr` a completion source maps to: by engine peer handle
    /// first, else by epid; `UNSPEC` when this AV does not know it.
    ///
    /// A peer's mapping never changes once made (entries are only added;
    /// `remove` keeps them), so the last one found by peer handle is
    /// remembered per thread and reused without the lock.
    #[inline]
    pub(crate) fn source_of(&self, peer: Option<PeerAddr>, epid: Option<Epid>) -> FiAddr {
        if let Some(p) = peer {
            let (id, last, addr) = LAST_SOURCE.get();
            if id == self.id && last == p {
                return addr;
            }
        }
        self.source_of_slow(peer, epid)
    }

    #[inline(never)]
    fn source_of_slow(&self, peer: Option<PeerAddr>, epid: Option<Epid>) -> FiAddr {
        let Ok(rev) = self.reverse.read() else {
            return FiAddr::UNSPEC;
        };
        if let Some(p) = peer {
            if let Some(&i) = rev.by_peer.get(&p) {
                let addr = self.addr_of(i);
                LAST_SOURCE.set((self.id, p, addr));
                return addr;
            }
        }
        // A peer that reached us before we used its address (inserted,
        // not yet connected): known by epid, which the engine tells.
        let epid = epid.or_else(|| {
            peer.filter(|_| self.lazy_connect)
                .and_then(|p| self.domain.engine().peer_epid(p))
        });
        epid.and_then(|e| rev.by_epid.get(&e))
            .map_or(FiAddr::UNSPEC, |&i| self.addr_of(i))
    }
}

/// An address vector (`fid_av`): a cheap `Clone` handle.
///
/// ```
/// use psmrail::fabric::{getinfo, AvAttr, AvType, Fabric, Hints};
/// # use psmrail::config::PsmConfig;
/// # use psmrail::fabric::EngineChoice;
/// // The soft engine; no name server, no close delay (FI_PSM_DELAY=0).
/// let config = PsmConfig::builder_from_env().unwrap()
///     .name_server(false)
///     .delay(std::time::Duration::ZERO)
///     .build()
///     .unwrap();
/// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let domain = Fabric::open(&info)?.domain(&info)?;
/// let av = domain.av(AvAttr::new().av_type(AvType::Table))?;
/// // The domain's own address: an endpoint can reach itself.
/// let me = domain.epid();
/// let addrs = av.insert(&[me, me]);
/// assert_eq!(addrs[0].as_ref().unwrap().0, 0);
/// assert_eq!(addrs[1].as_ref().unwrap().0, 1);
/// assert_eq!(av.lookup(psmrail::fabric::FiAddr(1))?, me);
/// assert_eq!(av.count(), 2);
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone)]
pub struct AddressVector {
    pub(crate) core: Arc<AvCore>,
}

impl fmt::Debug for AddressVector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

impl AddressVector {
    pub(crate) fn open(domain: Arc<DomainCore>, attr: AvAttr) -> Result<AddressVector> {
        domain.ensure_open()?;
        let salt = match attr.av_type {
            AvType::Unspec | AvType::Map => Some(next_salt()),
            AvType::Table => None,
        };
        Ok(AddressVector {
            core: Arc::new(AvCore {
                domain,
                salt,
                connect_timeout: attr.connect_timeout,
                lazy_connect: attr.lazy_connect,
                entries: AvEntries::with_capacity(attr.count),
                insert: Mutex::new(()),
                reverse: RwLock::new(Reverse::default()),
                id: NEXT_AV_ID.fetch_add(1, Ordering::Relaxed),
            }),
        })
    }

    /// Map or table (`Unspec` at open became `Map`).
    pub fn av_type(&self) -> AvType {
        self.core.av_type()
    }

    /// Connects to each epid and gives its `fi_addr` (`fi_av_insert`); one
    /// result per epid, in order. Waits at most the AV's connect timeout
    /// in all. An AV that connects at first use ([`AvAttr::lazy_connect`])
    /// only records the epids: it never waits, and connect errors come
    /// from the operations that use the addresses.
    ///
    /// A map gives an epid already present its existing address. A table
    /// gives every epid the next index; a failure leaves a hole there.
    ///
    /// Errors per address: `TimedOut` (no answer in time), `ConnRefused`
    /// (another job or version; nothing listening), `NoMem` when the AV is
    /// full (2^32 entries), `OpBadState` after the domain closed.
    ///
    /// # Blocking
    /// The calling thread waits for the connects: up to the AV's connect
    /// timeout (30 s by default; on the native engine `psm_ep_connect`
    /// takes at least 2 s when a peer does not answer), plus the time
    /// another insert of the same AV holds it. An AV that connects at
    /// first use waits only for such an insert. In async code, await
    /// [`insert_async`](Self::insert_async) instead.
    pub fn insert(&self, epids: &[Epid]) -> Vec<Result<FiAddr>> {
        self.core.insert_with(epids, None).unwrap_or_default()
    }

    /// The async form of [`insert`](Self::insert) (`fi_av_insert` with
    /// `FI_EVENT`, as a future): the same results, in the same order, with
    /// the connect run on a thread of its own (`psmrail-connect`: the
    /// engines' connect is a blocking call) while the future waits for it,
    /// parking no executor thread. An AV that connects at first use
    /// ([`AvAttr::lazy_connect`]) dials nothing and resolves at once (from
    /// the thread too when another insert holds the AV).
    ///
    /// ```
    /// use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
    /// # use psmrail::config::PsmConfig;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// let hints = Hints::new().engine(EngineChoice::Soft).config(config);
    /// let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = Fabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let me = domain.epid();
    /// let addrs = futures::executor::block_on(av.insert_async(&[me]));
    /// // The same address the blocking form gives.
    /// assert_eq!(addrs[0].as_ref().ok(), av.insert(&[me])[0].as_ref().ok());
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// Inserts of one AV still run one at a time, in the order their
    /// connects start (a future's at its first poll).
    ///
    /// # Blocking
    /// Never: the first poll starts the thread; when none can be started,
    /// every address fails with `Again` (nothing is inserted).
    ///
    /// # Cancel safety
    /// Nothing happens before the first poll. Dropped later, before its
    /// connect has ended, the insert records nothing: no entry, no table
    /// index, no hole; the connect itself runs to its end on its thread
    /// (at most the connect timeout), and the connections it made stay
    /// with the engine, so inserting those epids again is immediate.
    /// Dropped in the short window after its connect ended, the entries
    /// are recorded as [`insert`](Self::insert) records them and only the
    /// results are lost (a map's are found again with
    /// [`addr_of_epid`](Self::addr_of_epid)).
    pub fn insert_async(&self, epids: &[Epid]) -> AvInsert {
        AvInsert::new(self.core.clone(), Work::Insert(epids.to_vec()))
    }

    /// Inserts one address in its text form, `fi_addr_psmx://<hex>` (a
    /// bare hex number is accepted too).
    ///
    /// # Blocking
    /// As [`insert`](Self::insert); the async form is
    /// [`insert_str_async`](Self::insert_str_async).
    ///
    /// # Errors
    /// `Inval` naming the text when it is not an address; otherwise as
    /// [`insert`](Self::insert).
    pub fn insert_str(&self, addr: &str) -> Result<FiAddr> {
        self.insert_one(parse_addr(addr)?)
    }

    /// The async form of [`insert_str`](Self::insert_str): as
    /// [`insert_async`](Self::insert_async) with one address (the same
    /// blocking and cancel safety); text that is not an address resolves
    /// to the `Inval` error at once.
    ///
    /// ```
    /// # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
    /// # use psmrail::config::PsmConfig;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let info = getinfo(Some(&Hints::new().engine(EngineChoice::Soft).config(config)))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let text = domain.epid().to_string();
    /// let addr = futures::executor::block_on(av.insert_str_async(&text))?;
    /// assert_eq!(av.lookup(addr)?, domain.epid());
    /// let bad = futures::executor::block_on(av.insert_str_async("nonsense"));
    /// assert_eq!(bad.unwrap_err().kind(), psmrail::ErrorKind::Inval);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn insert_str_async(&self, addr: &str) -> AvInsertOne {
        AvInsertOne(match parse_addr(addr) {
            Ok(epid) => AvInsert::new(self.core.clone(), Work::Insert(vec![epid])),
            Err(e) => AvInsert::ready(vec![Err(e)]),
        })
    }

    /// Asks the name server on `node` for the endpoint registered under
    /// `service` (0: any endpoint there) and inserts it.
    ///
    /// The name server is found at the port derived from the job UUID (or
    /// the one the fabric was opened with). The query waits at most the
    /// AV's connect timeout. This goes beyond C, whose `fi_av_insertsvc`
    /// is `FI_ENOSYS` (it resolved names in `fi_getinfo` only).
    ///
    /// # Blocking
    /// The query waits up to the connect timeout, then the insert as
    /// [`insert`](Self::insert) does: up to twice the connect timeout in
    /// all. The async form is
    /// [`insert_service_async`](Self::insert_service_async).
    ///
    /// # Errors
    /// Those of the query (`NoData` when nothing is registered there, `Io`
    /// or `TimedOut` when the server cannot be reached), then as
    /// [`insert`](Self::insert).
    pub fn insert_service(&self, node: &str, service: impl Into<Service>) -> Result<FiAddr> {
        let epid = self.core.query_service(node, service.into())?;
        self.insert_one(epid)
    }

    /// The async form of [`insert_service`](Self::insert_service): the
    /// query and the insert run on a thread of its own while the future
    /// waits, as [`insert_async`](Self::insert_async) runs its connect.
    ///
    /// ```no_run
    /// # use psmrail::fabric::{getinfo, AvAttr, Fabric, Hints};
    /// # async fn demo() -> psmrail::Result<()> {
    /// # let info = getinfo(Some(&Hints::new()))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// // The endpoint registered under service 7 on node "n2".
    /// let peer = av.insert_service_async("n2", 7u32).await?;
    /// # let _ = peer;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Blocking
    /// Never (when no thread can be started it resolves to `Again`).
    ///
    /// # Cancel safety
    /// As [`insert_async`](Self::insert_async)'s: dropped before the
    /// query and the connect have ended, nothing is recorded; the query
    /// and the connect run to their ends on the thread.
    pub fn insert_service_async(&self, node: &str, service: impl Into<Service>) -> AvInsertOne {
        AvInsertOne(AvInsert::new(
            self.core.clone(),
            Work::Service(node.to_owned(), service.into()),
        ))
    }

    fn insert_one(&self, epid: Epid) -> Result<FiAddr> {
        self.insert(&[epid])
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Other, "address vector: no result")))
    }

    /// The epid stored at `addr` (`fi_av_lookup`).
    ///
    /// # Errors
    /// `Inval` for an address this AV did not return, or a table hole.
    pub fn lookup(&self, addr: FiAddr) -> Result<Epid> {
        match self
            .core
            .index_of(addr)
            .and_then(|i| self.core.entries.get(i))
        {
            Some(Entry::Peer(epid, _) | Entry::Pending(epid)) => Ok(epid),
            _ => Err(self.core.bad_addr(addr)),
        }
    }

    /// The text form of the epid at `addr` (`fi_av_straddr`).
    pub fn straddr(&self, addr: FiAddr) -> Result<String> {
        self.lookup(addr).map(|e| e.to_string())
    }

    /// `fi_av_remove`: a no-op that succeeds, as in the C provider. The
    /// entries stay valid (and keep their addresses) until the AV is
    /// dropped, so operations still holding them never see a reused value.
    pub fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        let _ = addrs;
        Ok(())
    }

    /// Whether inserts leave connecting to each address's first use
    /// ([`AvAttr::lazy_connect`]).
    pub fn lazy_connect(&self) -> bool {
        self.core.lazy_connect
    }

    /// Number of entries (a table's holes included).
    pub fn count(&self) -> usize {
        self.core.entries.len() as usize
    }

    /// The `fi_addr` a peer's epid has in this AV, if inserted.
    pub fn addr_of_epid(&self, epid: Epid) -> Option<FiAddr> {
        let a = self.core.source_of(None, Some(epid));
        (!a.is_unspec()).then_some(a)
    }

    /// Whether `other` is a handle of the same AV.
    pub fn same(&self, other: &AddressVector) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}

/// What an [`AvInsert`] runs on its thread.
#[derive(Debug)]
enum Work {
    Insert(Vec<Epid>),
    /// Query the name server on the node for the service, then insert.
    Service(String, Service),
}

impl Work {
    fn len(&self) -> usize {
        match self {
            Work::Insert(epids) => epids.len(),
            Work::Service(..) => 1,
        }
    }

    /// Runs on the thread; `None` when cancelled in time (nothing
    /// recorded).
    fn run(self, core: &AvCore, cancel: &AtomicBool) -> Option<Vec<Result<FiAddr>>> {
        match self {
            Work::Insert(epids) => core.insert_with(&epids, Some(cancel)),
            Work::Service(node, service) => match core.query_service(&node, service) {
                Ok(epid) => core.insert_with(&[epid], Some(cancel)),
                Err(e) => Some(vec![Err(e)]),
            },
        }
    }
}

/// The future of [`AddressVector::insert_async`]: one result per epid, in
/// order, as [`AddressVector::insert`] gives them.
#[must_use = "a future does nothing unless polled"]
#[derive(Debug)]
pub struct AvInsert {
    state: InsertState,
}

#[derive(Debug)]
enum InsertState {
    /// Not polled yet.
    Start(Arc<AvCore>, Work),
    Running {
        task: Offload<Option<Vec<Result<FiAddr>>>>,
        /// Set when the future is dropped: the thread then records nothing
        /// if its connect has not ended.
        cancel: Arc<AtomicBool>,
        len: usize,
    },
    Ready(Vec<Result<FiAddr>>),
    Done,
}

impl AvInsert {
    fn new(core: Arc<AvCore>, work: Work) -> Self {
        AvInsert {
            state: InsertState::Start(core, work),
        }
    }

    fn ready(results: Vec<Result<FiAddr>>) -> Self {
        AvInsert {
            state: InsertState::Ready(results),
        }
    }

    /// Starts the work: at once when it cannot wait (a lazy AV nobody
    /// else holds), else on a thread of its own.
    fn start(core: Arc<AvCore>, work: Work) -> InsertState {
        if let Work::Insert(epids) = &work {
            if let Err(e) = core.domain.ensure_open() {
                return InsertState::Ready(closed_results(epids.len(), &e));
            }
            // Nothing waits here: the AV dials nothing, and nobody else
            // holds it.
            if core.lazy_connect {
                if let Ok(guard) = core.insert.try_lock() {
                    let results = core.insert_locked(epids, None, &guard);
                    return InsertState::Ready(results.unwrap_or_default());
                }
            }
        }
        let len = work.len();
        let cancel = Arc::new(AtomicBool::new(false));
        let theirs = cancel.clone();
        match offload::spawn("psmrail-connect", move || work.run(&core, &theirs)) {
            Ok(task) => InsertState::Running { task, cancel, len },
            Err((e, _)) => InsertState::Ready(
                (0..len)
                    .map(|_| {
                        Err(Error::new(
                            ErrorKind::Again,
                            format!("address vector: no thread to connect: {e}"),
                        ))
                    })
                    .collect(),
            ),
        }
    }
}

impl Future for AvInsert {
    type Output = Vec<Result<FiAddr>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let InsertState::Start(..) = this.state {
            if let InsertState::Start(core, work) =
                std::mem::replace(&mut this.state, InsertState::Done)
            {
                this.state = AvInsert::start(core, work);
            }
        }
        match &mut this.state {
            InsertState::Running { task, len, .. } => {
                let out = std::task::ready!(Pin::new(task).poll(cx));
                let len = *len;
                this.state = InsertState::Done;
                Poll::Ready(out.flatten().unwrap_or_else(|| {
                    (0..len)
                        .map(|_| {
                            Err(Error::new(
                                ErrorKind::Other,
                                "address vector: the connect thread ended without a result",
                            ))
                        })
                        .collect()
                }))
            }
            InsertState::Ready(_) => match std::mem::replace(&mut this.state, InsertState::Done) {
                InsertState::Ready(results) => Poll::Ready(results),
                _ => Poll::Ready(Vec::new()),
            },
            // Polled after it gave its results.
            InsertState::Start(..) | InsertState::Done => Poll::Ready(Vec::new()),
        }
    }
}

impl Drop for AvInsert {
    fn drop(&mut self) {
        if let InsertState::Running { cancel, .. } = &self.state {
            cancel.store(true, Ordering::Release);
        }
    }
}

/// The future of [`AddressVector::insert_str_async`] and
/// [`AddressVector::insert_service_async`]: one address's result.
#[must_use = "a future does nothing unless polled"]
#[derive(Debug)]
pub struct AvInsertOne(AvInsert);

impl Future for AvInsertOne {
    type Output = Result<FiAddr>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<FiAddr>> {
        Pin::new(&mut self.0).poll(cx).map(|mut v| {
            v.pop()
                .unwrap_or_else(|| Err(Error::new(ErrorKind::Other, "address vector: no result")))
        })
    }
}

fn parse_addr(addr: &str) -> Result<Epid> {
    addr.parse().map_err(|e| {
        Error::with_source(
            ErrorKind::Inval,
            format!("address vector: cannot insert {addr:?}: not an fi_addr_psmx address"),
            e,
        )
    })
}

fn full() -> Error {
    Error::new(
        ErrorKind::NoMem,
        format!("address vector: full ({MAX_ENTRIES} entries)"),
    )
}

/// Every address's result when the domain is closed: its error.
fn closed_results(n: usize, e: &Error) -> Vec<Result<FiAddr>> {
    (0..n).map(|_| Err(copy_error(e))).collect()
}

fn copy_error(e: &Error) -> Error {
    Error::new(e.kind(), e.message().to_owned())
}

/// The engine's connect error, saying which epid could not be inserted
/// (and, for epid 0, the likely cause, as C's log did).
fn insert_error(epid: Epid, e: Error) -> Error {
    let hint = if epid.0 == 0 {
        " (epid 0: the name server probably did not resolve the peer)"
    } else {
        ""
    };
    let message = format!(
        "address vector: cannot insert {epid}{hint}: {}",
        e.message()
    );
    Error::with_source(e.kind(), message, e)
}
