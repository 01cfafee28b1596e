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
//! The entries live in [`AvEntries`](super::av_entries), an append-only
//! array read without locks; the reverse maps (peer or epid to `fi_addr`,
//! for completion sources) are hash maps behind a read-write lock.

use super::av_entries::{AvEntries, Entry, MAX_ENTRIES};
use super::domain::DomainCore;
use super::name_server::Service;
use super::{AvType, FiAddr};
use crate::engine::{Epid, PeerAddr};
use crate::{Error, ErrorKind, Result};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
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
    pub fn insert(&self, epids: &[Epid]) -> Vec<Result<FiAddr>> {
        let core = &*self.core;
        if let Err(e) = core.domain.ensure_open() {
            return epids.iter().map(|_| Err(copy_error(&e))).collect();
        }
        // One insert at a time: indices are handed out in call order and
        // a map never connects the same epid twice concurrently.
        let _guard = core.insert.lock().unwrap_or_else(|p| p.into_inner());
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
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::new(ErrorKind::Other, "address vector: no result")))
            })
            .collect()
    }

    /// Inserts one address in its text form, `fi_addr_psmx://<hex>` (a
    /// bare hex number is accepted too).
    ///
    /// # Errors
    /// `Inval` naming the text when it is not an address; otherwise as
    /// [`insert`](Self::insert).
    pub fn insert_str(&self, addr: &str) -> Result<FiAddr> {
        let epid: Epid = addr.parse().map_err(|e| {
            Error::with_source(
                ErrorKind::Inval,
                format!("address vector: cannot insert {addr:?}: not an fi_addr_psmx address"),
                e,
            )
        })?;
        self.insert_one(epid)
    }

    /// Asks the name server on `node` for the endpoint registered under
    /// `service` (0: any endpoint there) and inserts it.
    ///
    /// The name server is found at the port derived from the job UUID (or
    /// the one the fabric was opened with). The query waits at most the
    /// AV's connect timeout. This goes beyond C, whose `fi_av_insertsvc`
    /// is `FI_ENOSYS` (it resolved names in `fi_getinfo` only).
    ///
    /// # Errors
    /// Those of the query (`NoData` when nothing is registered there, `Io`
    /// or `TimedOut` when the server cannot be reached), then as
    /// [`insert`](Self::insert).
    pub fn insert_service(&self, node: &str, service: impl Into<Service>) -> Result<FiAddr> {
        let port = self.core.domain.fabric().name_server_port();
        let (_, epid) = super::name_server::query(node, port, service, self.core.connect_timeout)?;
        self.insert_one(epid)
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

fn full() -> Error {
    Error::new(
        ErrorKind::NoMem,
        format!("address vector: full ({MAX_ENTRIES} entries)"),
    )
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
