//! [`SoftEndpoint`]: one soft endpoint, the edge around one
//! [`SoftCore`].
//!
//! The core is the protocol (matching, frames, credit); this module is
//! everything else an endpoint needs: it owns the sockets
//! (`transport.rs`), the operations' buffers (`optable.rs`), the AM handler
//! table and the reactor registration, and drives the core the way its
//! docs prescribe ([`protocol`](super::protocol)):
//!
//! * a TCP or Unix-socket connect opens a dialer connection in the core, an
//!   accepted one an acceptor connection, and reaching the endpoint's own
//!   epid opens a piped pair (`loopback.rs`);
//! * socket bytes go to `handle_input`; a Data frame whose payload is still
//!   on its way is handed to the edge (`take_direct`) and read straight
//!   into the receive buffer;
//! * output comes from `poll_transmit_vectored` and leaves in one `writev`,
//!   large send payloads straight from their buffers;
//! * events are applied at once: `Place` copies into the receive buffer,
//!   `Complete` hands the buffer back through the completion table (a send
//!   whose payload is still referred to by unwritten output completes once
//!   it is written), `AmRequest` runs the handler and answers exactly once,
//!   `ConnectionClosed` flushes the last frames and lets the socket drain;
//! * EOF or a socket error detaches the connection's link, which gets a
//!   new transport (`reconnect.rs`): the dialer's side connects again, and
//!   what either side had not consumed is sent again, so a reset under
//!   live traffic loses nothing. Only when that fails (nothing listens at
//!   the peer's address any more, the peer no longer has the link, or no
//!   new transport came within `FI_PSM_TIMEOUT`) is it
//!   `connection_lost`: every operation pending towards that peer fails,
//!   the other peers are untouched. First, though, everything the kernel
//!   still holds from that peer is read, on that socket after a failed
//!   write and on the peer's other sockets (`salvage`): the kernel returns
//!   the bytes that arrived before an EOF or a reset, and a message the
//!   peer completed must not be failed because one of its connections
//!   ended first.
//!
//! # Closing
//!
//! A send reported complete is never lost because its sender closed
//! gracefully afterwards. A closed connection's link writes its last
//! frames (the Bye after everything else), shuts its write half down so
//! the peer reads them and then EOF, and drops what the peer still sends;
//! the socket is closed only once that cannot lose anything: the peer
//! closed its side, or (TCP) it acknowledged every byte. A socket still
//! unsafe at the link's deadline, or when `close` runs out of time
//! (frames of completed sends may still wait in the output buffer then),
//! goes to the lingerer (`linger.rs`) with what is left to write, instead
//! of being closed under bytes the peer has yet to read. Since the
//! receiving side cannot progress while a single-threaded caller blocks in
//! the sender's `close`, this is what keeps manual progress lossless.
//!
//! # Locking
//!
//! All state is behind one mutex per endpoint. [`progress`] only
//! `try_lock`s (a caller that finds the endpoint busy reports `Made` and
//! moves on, so the auto thread comes back at once instead of sleeping on
//! bytes it has not read); posting locks. `connect` and `close` lock for
//! one progress step at a time, so the auto thread and other callers
//! interleave with them. AM handlers run inside progress with the lock held;
//! calls back into the same endpoint from a handler are refused with
//! `Inval` instead of deadlocking (PSM is not re-entrant either).
//!
//! # Progress
//!
//! One [`progress`] call runs one step, and up to three more while a step
//! leaves work behind (a read or write budget ran out, loopback bytes
//! wait, connections wait to be accepted); after an ordinary step the
//! sockets are known drained, and one more `read` would only delay a
//! caller waiting to answer what arrived.
//!
//! A step costs what moves, not what is connected: thousands of idle
//! connections add nothing to it.
//!
//! * **Reading.** The sockets of connections past their handshake, and of
//!   dials, are in a level-triggered epoll set: one `epoll_wait` says which
//!   have bytes, EOF or an error (and whether a connection waits on the
//!   listeners), and only those are read, each until the socket is empty
//!   or the link's read budget is spent, feeding the core, applying events
//!   and writing back after each read. With fewer than two such sockets
//!   the step reads them directly (one `read` costs what one `epoll_wait`
//!   does), and the listeners get a `poll(2)` of their own on the steps
//!   that look for connections: every step while the auto thread sleeps on
//!   socket readiness, every sixteenth otherwise. Accepted connections
//!   still in their handshake are in an epoll set of their own, looked at
//!   on those same steps only, so however many there are, the other steps
//!   do not see them.
//! * **Writing.** The core lists the connections that may have frames
//!   ([`SoftCore::take_transmit_hints`]); those are written while the core
//!   has output and the socket takes it (within the write budget).
//! * **Watching.** Links that need a look whatever their socket says (a
//!   connect or a dial's handshake in progress, a closed connection
//!   draining, output the socket did not take, a failed write) are listed
//!   and looked at every step until they no longer need it.
//! * **Upkeep.** Every 100 ms a step also goes over every link: the
//!   timeouts and buffers of "Resources" below, and the watch list made
//!   afresh, so that no link waits on a missed hint for longer.
//!
//! # Timeouts
//!
//! `connect` gives each dial its timeout as a deadline (TCP connect plus
//! handshake); accepted connections get
//! [`SoftConfig::handshake_timeout`]; a connection holding part of a frame
//! that completes no frame for [`SoftConfig::frame_timeout`] is closed
//! (its peer goes down, as for a transport failure); closed connections get
//! [`SoftConfig::linger`] to flush (and the lingerer as much again);
//! `close` waits at most its timeout for
//! every peer's graceful close and forces the rest (dropping an endpoint
//! that was not closed does the same within the options' `close_timeout`).
//! A connection whose transport fails waits up to the endpoint's close
//! timeout (`FI_PSM_TIMEOUT`, 5 s by default; 0 disables reconnection)
//! for a new one. Dead peers are still found at once: reconnecting to a
//! process or endpoint that is gone finds nothing listening. A host that
//! vanished is found by `TCP_USER_TIMEOUT` ([`SoftConfig::peer_timeout`])
//! and then by the close timeout.
//!
//! # Resources
//!
//! What peers can make an endpoint hold is bounded, and let go of when
//! they leave:
//!
//! * **Connections.** At most [`SoftConfig::max_connections`]; its docs
//!   say which connection makes room for a newcomer when all are taken
//!   (one still in its handshake, else the one idle longest of a peer the
//!   layers above never named, closed gracefully). At most
//!   [`SoftConfig::max_handshaking`] in their handshake (the oldest makes
//!   room) and [`SoftConfig::max_connections_per_peer`] per epid.
//! * **Buffers.** A connection's input holds at most one partial frame,
//!   closed after [`SoftConfig::frame_timeout`] without progress. A link
//!   with no traffic for an upkeep period (100 to 200 ms) gives back its
//!   buffers and its connection's empty queues, a partial frame keeping
//!   only its bytes; an idle socket is then looked at through a small
//!   buffer on the stack, so it allocates nothing until bytes come.
//! * **Unexpected messages.** At most the budget, all peers together;
//!   those of a peer that went down are dropped after
//!   [`SoftConfig::dead_peer_messages`], their bytes becoming credit for
//!   the peers still here.
//! * **Peers.** A peer that went down is forgotten after
//!   [`SoftConfig::forget_peer_after`], unless a `connect` returned it (the
//!   layers above may name it at any time: the address vector keeps the
//!   handles `connect` gives for as long as it lives). The handle of a
//!   forgotten peer is never reused: operations naming it fail with
//!   `Inval`, `peer_epid` answers `None`.
//!
//! Memory, in user space (the kernel's socket buffers come on top), on a
//! 64-bit target:
//!
//! | what | bytes |
//! |---|---|
//! | a connection past its handshake, idle, with its peer | about 1,700: its link (384), its protocol state (320), the peer's state and its entries in the maps (epid, handle, link and connection indices) |
//! | a connection in its handshake | about 1,500 |
//! | a peer down, not forgotten yet | about 380: its state, its entries, its two timers |
//! | a forgotten peer | nothing |
//! | a partial frame | its bytes |
//!
//! Maps and queues that grew for a crowd shrink once it is gone, and once
//! the endpoint holds half of what it held at most (links, peers and
//! unexpected messages counted together), the allocator is asked to hand
//! its free memory back to the system (`malloc_trim`, with glibc), and
//! again each second until the crowd's messages and records are dropped
//! too. Measured after 4,096 idle connections or a 61 MiB unexpected
//! flood leave: the live heap is back within 0.1 MiB of its baseline,
//! the RSS within about 0.6 MiB (allocator fragmentation).
//!
//! [`progress`]: crate::reactor::ProgressSource::progress

use super::optable::{OpKind, OpTable};
use super::protocol::{AmToken, ConnError, ConnId, CoreStats, Event, OpId};
use super::transport::{
    dial_epid, ConnectState, Link, LinkId, LinkPhase, Listeners, Pipe, Polled, Poller, Stream,
    FIRST_READ, MIN_READ,
};
use super::wire::{HandshakeError, JobUuid};
use super::{linger, Role, SoftConfig, SoftCore, SoftEpid};
use crate::engine::{
    AmHandler, AmHandlerId, AmMessage, AmReply, EndpointOptions, EngineEndpoint, EngineKind,
    EngineLimits, Epid, MqCompletion, MqStatus, OpBuffer, PeerAddr, PostError, QueueStats,
    SendMode, TagMatch,
};
use crate::reactor::{CompletionTable, OpKey, Progress, ProgressSource};
use crate::{Error, ErrorKind, Result};
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, IoSlice};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::time::{Duration, Instant};

/// Steps one `progress` call runs at most.
const STEPS_PER_PROGRESS: usize = 4;
/// Without a reactor poll to say so, look for new connections, and at the
/// connections still in their handshake, every this many steps.
const ACCEPT_EVERY: u32 = 16;
/// Most connections accepted in one step (more wait for the next).
const MAX_ACCEPTS: usize = 64;
/// Most ready sockets one look at a poller reports.
const POLL_BATCH: usize = 256;
/// The poller token of the listening sockets.
const LISTENER: u64 = u64::MAX;
/// How often a step also does the upkeep (`Inner::sweep`).
const SWEEP_EVERY: Duration = Duration::from_millis(100);
/// Most slices one `writev` gathers.
const MAX_IOV: usize = 64;
/// How long `connect` and `close` sleep after a step that did nothing.
const IDLE_WAIT: Duration = Duration::from_micros(50);
/// Most bytes read from one link when its peer's transport failed
/// (`Inner::salvage`): everything the kernel can hold, bounded.
const SALVAGE_LIMIT: usize = 64 << 20;

static NEXT_ENDPOINT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The endpoint whose AM handler runs on this thread (0: none).
    static IN_HANDLER: Cell<u64> = const { Cell::new(0) };
}

/// Marks the thread as inside an AM handler of one endpoint.
struct HandlerScope(u64);

impl HandlerScope {
    fn enter(endpoint: u64) -> HandlerScope {
        HandlerScope(IN_HANDLER.with(|c| c.replace(endpoint)))
    }
}

impl Drop for HandlerScope {
    fn drop(&mut self) {
        IN_HANDLER.with(|c| c.set(self.0));
    }
}

/// Counters and buffer sizes of an endpoint, for observability and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftStats {
    /// The core's counters (unexpected queue, credit, connections).
    pub core: CoreStats,
    /// Transport connections, loopback halves and closing ones included.
    pub links: usize,
    /// Bytes of memory held by the links' input buffers.
    pub input_buffers: usize,
    /// Bytes of memory held by the links' output buffers.
    pub output_buffers: usize,
    /// Bytes read from sockets.
    pub bytes_read: u64,
    /// Bytes written to sockets.
    pub bytes_written: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Incoming connections closed at once (too many connections, none
    /// of which could make room).
    pub rejected: u64,
    /// Connections closed to make room (`SoftConfig::max_connections`,
    /// `max_handshaking`, `max_connections_per_peer`).
    pub evicted: u64,
    /// Connections closed because a frame did not complete in time
    /// (`SoftConfig::frame_timeout`).
    pub stalled: u64,
    /// Unexpected messages dropped because their peer stayed down
    /// (`SoftConfig::dead_peer_messages`).
    pub dropped_unexpected: u64,
    /// Peers forgotten (`SoftConfig::forget_peer_after`).
    pub forgotten_peers: u64,
    /// Connections whose transport failed and whose link waited for a
    /// new one.
    pub detached: u64,
    /// Links resumed on a new transport.
    pub resumed: u64,
    /// Detached links given up (the peer gone, refused, or no new
    /// transport within the close timeout).
    pub abandoned: u64,
    /// Operations posted and not yet handed back.
    pub live_ops: usize,
}

/// The edge's state; all of it is behind the endpoint's mutex.
pub(crate) struct Inner {
    /// The endpoint's id for the AM re-entrancy check.
    pub id: u64,
    pub cfg: Arc<SoftConfig>,
    pub core: SoftCore,
    pub ops: OpTable,
    pub links: Vec<Link>,
    pub listeners: Option<Listeners>,
    pub handlers: Vec<Arc<dyn AmHandler>>,
    pub completions: Arc<CompletionTable<MqCompletion>>,
    pub registry: Option<(mio::Registry, mio::Token)>,
    pub next_link: u64,
    pub steps: u32,
    pub closed: bool,
    /// Outcomes of failed dials a `connect` call waits for.
    pub dial_errors: Vec<(LinkId, Error)>,
    /// The endpoint's own loopback pair, once made.
    pub loopback: Option<(LinkId, LinkId)>,
    /// Ops whose last transmit reference was just written (scratch).
    pub released: Vec<OpId>,
    /// How long closing on drop may take (`EndpointOptions::close_timeout`).
    pub close_timeout: Duration,
    /// Every peer ever connected and its epid (shared with the endpoint,
    /// which answers `peer_epid` from it without taking this state's
    /// lock).
    pub peer_epids: Arc<RwLock<HashMap<PeerAddr, Epid>>>,
    /// The current step left work for the next (a budget ran out).
    pub more: bool,
    /// A `salvage` runs: links that end meanwhile are lost after it.
    pub salvaging: bool,
    /// Connections whose link waits for a new transport
    /// (`reconnect.rs`).
    pub detached: HashMap<ConnId, super::reconnect::Detached>,
    /// Sockets of open connections and of dials (and the listeners).
    pub hot: Poller,
    /// Sockets of accepted connections still in their handshake.
    pub cold: Poller,
    /// The links in `hot` (a step with fewer than two reads them
    /// directly).
    pub hot_links: HashSet<LinkId>,
    /// How many links `cold` holds.
    pub cold_links: usize,
    /// Accepted links in their handshake, oldest first (with entries of
    /// links that since finished or went: skipped when met).
    pub handshakes: VecDeque<LinkId>,
    /// Where each link is in `links` (checked on use; a miss searches).
    pub slots: HashMap<LinkId, usize>,
    /// The link of each connection (checked on use; a miss searches).
    pub by_conn: HashMap<ConnId, LinkId>,
    /// Links to look at every step whatever their socket says
    /// (`Inner::needs_watch`).
    pub watch: Vec<LinkId>,
    /// Links that died this step, to reap.
    pub dead: Vec<LinkId>,
    /// The links a step services (scratch): ids, and whether to read.
    pub todo: Vec<(LinkId, bool)>,
    /// Connections with frames to send (scratch for the core's hints).
    pub hints: Vec<ConnId>,
    /// The current round of write budgets (`begin_round`).
    pub round: u64,
    /// Peers `connect` returned: the layers above may name them at any
    /// time, so they are never forgotten and their connections never
    /// closed to make room.
    pub named: HashSet<PeerAddr>,
    /// Peers down, and since when.
    pub down: HashMap<PeerAddr, Instant>,
    /// The same, in the order their unexpected messages are due to be
    /// dropped (`SoftConfig::dead_peer_messages`).
    pub down_messages: VecDeque<(Instant, PeerAddr)>,
    /// The same, in the order they are due to be forgotten
    /// (`SoftConfig::forget_peer_after`).
    pub down_forget: VecDeque<(Instant, PeerAddr)>,
    /// When the next upkeep is due.
    pub next_sweep: Instant,
    /// When the last one ran.
    pub last_sweep: Instant,
    /// Upkeeps so far (plus one): the period links' `active` counts in.
    pub epoch: u64,
    /// The most the endpoint held since memory was last handed back to
    /// the system (`Inner::release_memory`).
    pub load_high: usize,
    /// Until when memory is handed back again each second: what a crowd
    /// that left holds is freed over time (its peers' messages and
    /// records go after `dead_peer_messages` and `forget_peer_after`).
    pub trim_until: Option<Instant>,
    /// When memory was last handed back.
    pub last_trim: Instant,
    pub stats: SoftStats,
}

/// One soft endpoint (see the module docs): an [`EngineEndpoint`] and a
/// [`ProgressSource`].
pub struct SoftEndpoint {
    id: u64,
    epid: Epid,
    limits: EngineLimits,
    completions: Arc<CompletionTable<MqCompletion>>,
    peer_epids: Arc<RwLock<HashMap<PeerAddr, Epid>>>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for SoftEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftEndpoint")
            .field("epid", &self.epid)
            .finish_non_exhaustive()
    }
}

fn io_error(kind: ErrorKind, what: String, e: io::Error) -> Error {
    Error::with_source(kind, format!("{what}: {e}"), e)
}

fn closed_error() -> Error {
    Error::new(ErrorKind::Inval, "soft engine: the endpoint is closed")
}

fn reentry_error() -> Error {
    Error::new(
        ErrorKind::Inval,
        "soft engine: an AM handler called back into its own endpoint; \
         handlers may only reply (queue other work for later)",
    )
}

fn poisoned_error() -> Error {
    Error::new(
        ErrorKind::Other,
        "soft engine: the endpoint's state was poisoned by a panic",
    )
}

impl SoftEndpoint {
    /// Opens an endpoint: binds the listener(s) and makes the core.
    pub(crate) fn open(cfg: &Arc<SoftConfig>, options: &EndpointOptions) -> Result<SoftEndpoint> {
        cfg.validate()?;
        let want = SocketAddrV4::new(cfg.bind, cfg.port);
        let (mut listeners, local) = Listeners::bind(want).map_err(|e| {
            let kind = match e.kind() {
                io::ErrorKind::AddrInUse => ErrorKind::Busy,
                io::ErrorKind::AddrNotAvailable => ErrorKind::Inval,
                _ => ErrorKind::Io,
            };
            io_error(kind, format!("soft engine: cannot listen on {want}"), e)
        })?;
        let epid = SoftEpid::new(*local.ip(), local.port(), 0)
            .map_err(|e| Error::new(ErrorKind::Inval, format!("soft engine: {e}")))?
            .to_epid();
        if cfg.unix_sockets {
            if let Err(e) = listeners.bind_unix(epid) {
                tracing::warn!(%epid, error = %e, "soft engine: no unix-socket listener; same-host peers use TCP");
            }
        }
        let mut core = SoftCore::new(cfg.protocol.clone(), epid, JobUuid(options.uuid))?;
        core.set_job_secret(cfg.job_secret.clone());
        let poller = || {
            Poller::new(POLL_BATCH)
                .map_err(|e| io_error(ErrorKind::Io, "soft engine: epoll_create".to_owned(), e))
        };
        let (hot, cold) = (poller()?, poller()?);
        let mut watched = Ok(());
        listeners.fds(|_, fd| {
            if watched.is_ok() {
                watched = hot.add(fd, LISTENER);
            }
        });
        watched.map_err(|e| io_error(ErrorKind::Io, "soft engine: epoll_ctl".to_owned(), e))?;
        let now = Instant::now();
        let limits = core.limits();
        let completions = Arc::new(CompletionTable::new());
        let id = NEXT_ENDPOINT.fetch_add(1, Ordering::Relaxed);
        let peer_epids = Arc::new(RwLock::new(HashMap::new()));
        Ok(SoftEndpoint {
            id,
            epid,
            limits,
            peer_epids: peer_epids.clone(),
            completions: completions.clone(),
            inner: Mutex::new(Inner {
                id,
                cfg: cfg.clone(),
                core,
                ops: OpTable::default(),
                links: Vec::new(),
                listeners: Some(listeners),
                handlers: Vec::new(),
                completions,
                registry: None,
                next_link: 1,
                steps: 0,
                closed: false,
                dial_errors: Vec::new(),
                loopback: None,
                released: Vec::new(),
                close_timeout: options.close_timeout,
                peer_epids: peer_epids.clone(),
                more: false,
                salvaging: false,
                detached: HashMap::new(),
                hot,
                cold,
                hot_links: HashSet::new(),
                cold_links: 0,
                handshakes: VecDeque::new(),
                slots: HashMap::new(),
                by_conn: HashMap::new(),
                watch: Vec::new(),
                dead: Vec::new(),
                todo: Vec::new(),
                hints: Vec::new(),
                round: 0,
                named: HashSet::new(),
                down: HashMap::new(),
                down_messages: VecDeque::new(),
                down_forget: VecDeque::new(),
                next_sweep: now + SWEEP_EVERY,
                last_sweep: now,
                epoch: 1,
                load_high: 0,
                trim_until: None,
                last_trim: now,
                stats: SoftStats::default(),
            }),
        })
    }

    /// Locks the state of an open endpoint.
    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        let g = self.lock_any()?;
        if g.closed {
            return Err(closed_error());
        }
        Ok(g)
    }

    /// Bytes this endpoint's links have yet to write (tests).
    #[cfg(test)]
    pub(crate) fn unwritten(&self) -> usize {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.links
            .iter()
            .map(|l| l.output.len() + l.refs.iter().map(|r| r.range.len()).sum::<usize>())
            .sum()
    }

    /// Bytes written to this endpoint's TCP sockets that their peers have
    /// not acknowledged yet (tests: the lingerer's precondition).
    #[cfg(test)]
    pub(crate) fn unacked(&self) -> usize {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.links
            .iter()
            .filter_map(|l| l.stream())
            .map(super::transport::Stream::unacked)
            .sum()
    }

    /// Counters and buffer sizes (see [`SoftStats`]).
    ///
    /// From inside one of this endpoint's AM handlers (where the endpoint
    /// is busy) the counters are not available: all zero.
    pub fn stats(&self) -> SoftStats {
        if self.in_own_handler() {
            return SoftStats::default();
        }
        match self.inner.lock() {
            Ok(g) => g.snapshot(),
            Err(p) => p.into_inner().snapshot(),
        }
    }

    /// Whether the endpoint listens on a Unix-domain socket for same-host
    /// peers as well as on TCP.
    pub fn has_unix_listener(&self) -> bool {
        !self.in_own_handler()
            && match self.inner.lock() {
                Ok(g) => g.listeners.as_ref().is_some_and(Listeners::has_unix),
                Err(_) => false,
            }
    }

    fn in_own_handler(&self) -> bool {
        IN_HANDLER.with(|c| c.get()) == self.id
    }

    /// Locks the state, open or closed (not from inside a handler).
    fn lock_any(&self) -> Result<MutexGuard<'_, Inner>> {
        if self.in_own_handler() {
            return Err(reentry_error());
        }
        self.inner.lock().map_err(|_| poisoned_error())
    }

    fn check_key(&self, key: OpKey, inner: &Inner) -> Result<()> {
        if !self.completions.is_pending(key) {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "soft engine: {key:?} is not a pending key of this endpoint's completion table"
                ),
            ));
        }
        if inner.ops.contains(key) {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("soft engine: {key:?} is already posted"),
            ));
        }
        Ok(())
    }
}

impl Inner {
    fn snapshot(&self) -> SoftStats {
        let mut s = self.stats;
        s.core = self.core.stats();
        s.links = self.links.len();
        s.input_buffers = self.links.iter().map(|l| l.buffer_capacity().0).sum();
        s.output_buffers = self.links.iter().map(|l| l.buffer_capacity().1).sum();
        s.live_ops = self.ops.len();
        s
    }

    pub(crate) fn new_link_id(&mut self) -> LinkId {
        let id = LinkId(self.next_link);
        self.next_link += 1;
        id
    }

    /// Where link `id` is in `links`.
    pub(crate) fn link_index(&self, id: LinkId) -> Option<usize> {
        match self.slots.get(&id) {
            Some(&i) if self.links.get(i).is_some_and(|l| l.id == id) => Some(i),
            _ => self.links.iter().position(|l| l.id == id),
        }
    }

    /// As [`link_index`](Self::link_index), in constant time: every link
    /// is in the map but the loopback halves (made elsewhere), which are
    /// searched once and then remembered. A link that is gone costs no
    /// search.
    fn slot(&mut self, id: LinkId) -> Option<usize> {
        if let Some(&i) = self.slots.get(&id) {
            if self.links.get(i).is_some_and(|l| l.id == id) {
                return Some(i);
            }
        }
        if self.loopback.is_none_or(|(a, b)| id != a && id != b) {
            return None;
        }
        let i = self.links.iter().position(|l| l.id == id)?;
        self.slots.insert(id, i);
        Some(i)
    }

    /// The link carrying connection `conn`.
    pub(crate) fn conn_index(&mut self, conn: ConnId) -> Option<usize> {
        if let Some(&id) = self.by_conn.get(&conn) {
            if let Some(i) = self.slot(id) {
                if self.links[i].conn == Some(conn) {
                    return Some(i);
                }
            }
        }
        // A connection the core has forgotten has no link: no search.
        self.core.connection_phase(conn)?;
        let i = self.links.iter().position(|l| l.conn == Some(conn))?;
        self.by_conn.insert(conn, self.links[i].id);
        Some(i)
    }

    /// Adds a link; its index.
    pub(crate) fn push_link(&mut self, mut link: Link) -> usize {
        link.active = self.epoch;
        let i = self.links.len();
        self.slots.insert(link.id, i);
        if let Some(c) = link.conn {
            self.by_conn.insert(c, link.id);
        }
        self.links.push(link);
        i
    }

    /// Marks link `i` dead: it is dropped at the end of the step.
    pub(crate) fn kill(&mut self, i: usize) {
        self.set_polled(i, Polled::No);
        let link = &mut self.links[i];
        if link.phase != LinkPhase::Dead {
            link.phase = LinkPhase::Dead;
            self.dead.push(link.id);
        }
    }

    /// Moves link `i`'s socket to poller set `to`. A socket that no set
    /// can take is lost (nothing would ever read it).
    pub(crate) fn set_polled(&mut self, i: usize, to: Polled) {
        let link = &mut self.links[i];
        let from = link.polled;
        if from == to {
            return;
        }
        let Some(fd) = link.stream().map(Stream::fd) else {
            return;
        };
        let id = link.id;
        link.polled = to;
        match from {
            Polled::Hot => {
                self.hot.delete(fd);
                self.hot_links.remove(&id);
            }
            Polled::Cold => {
                self.cold.delete(fd);
                self.cold_links -= 1;
            }
            Polled::No => {}
        }
        let added = match to {
            Polled::Hot => self.hot.add(fd, id.0).map(|()| {
                self.hot_links.insert(id);
            }),
            Polled::Cold => self.cold.add(fd, id.0).map(|()| self.cold_links += 1),
            Polled::No => Ok(()),
        };
        if let Err(e) = added {
            self.links[i].polled = Polled::No;
            self.lose(i, ErrorKind::Io, format!("cannot poll the socket: {e}"));
        }
    }

    /// Lists link `i` for a look every step.
    pub(crate) fn watch(&mut self, i: usize) {
        let link = &mut self.links[i];
        if !link.watched {
            link.watched = true;
            self.watch.push(link.id);
        }
    }

    /// Whether link `i` needs a look next step whatever its socket says:
    /// a connect or a drain in progress, a dial's handshake (its
    /// deadline), output the socket has not taken, a failed transport not
    /// dealt with yet, or frames the core still has for it (a write
    /// budget ran out). Loopback halves are looked at every step anyway.
    fn needs_watch(&self, i: usize) -> bool {
        let l = &self.links[i];
        if !matches!(l.pipe, Pipe::Stream(_)) {
            // A loopback half is looked at every step while the pair
            // stands; one left alone must find out.
            return l.is_live() && l.peer_gone;
        }
        match l.phase {
            LinkPhase::Connecting | LinkPhase::Draining => true,
            LinkPhase::Dead => false,
            LinkPhase::Handshaking if l.expect.is_some() => true,
            LinkPhase::Handshaking | LinkPhase::Open => {
                l.broken.is_some()
                    || l.ended.is_some()
                    || l.has_output()
                    || l.conn.is_some_and(|c| self.core.wants_transmit(c))
            }
        }
    }

    /// The peer of `epid` if it is connected and not closing.
    fn up_peer(&self, epid: Epid) -> Option<PeerAddr> {
        self.core.peer_of(epid).filter(|p| self.core.is_peer_up(*p))
    }

    pub(crate) fn register_link(&mut self, i: usize) {
        let Some((registry, token)) = &self.registry else {
            return;
        };
        let link = &mut self.links[i];
        if let Pipe::Stream(s) = &mut link.pipe {
            match s.register(registry, *token) {
                Ok(()) => link.registered = true,
                Err(e) => {
                    tracing::warn!(error = %e, "soft engine: cannot register a socket with the reactor")
                }
            }
        }
    }

    // ----- progress ------------------------------------------------------

    /// One step (see the module docs); whether anything moved.
    pub(crate) fn step(&mut self, accept: bool) -> bool {
        let mut made = false;
        self.begin_round();
        self.more = false;
        self.steps = self.steps.wrapping_add(1);
        let look = accept || self.registry.is_some() || self.steps % ACCEPT_EVERY == 0;
        let mut todo = std::mem::take(&mut self.todo);
        todo.clear();
        if self.readiness(look, &mut todo) {
            made |= self.accept_all();
        }
        if look && self.cold_links > 0 {
            self.cold_ready(&mut todo);
        }
        // The listed links come after the ready ones (which are read).
        let mut watch = std::mem::take(&mut self.watch);
        for &id in &watch {
            todo.push((id, false));
            if let Some(i) = self.slot(id) {
                self.links[i].watched = false;
            }
        }
        watch.clear();
        self.watch = watch;
        if let Some((a, b)) = self.loopback {
            todo.push((a, true));
            todo.push((b, true));
        }
        let stamp = self.steps;
        let mut now = None;
        for &(id, readable) in &todo {
            let Some(i) = self.slot(id) else {
                continue;
            };
            let link = &mut self.links[i];
            if link.stamp == stamp {
                continue;
            }
            link.stamp = stamp;
            link.readable = readable;
            made |= self.service(i);
            self.links[i].readable = false;
            self.check_deadline(i, &mut now);
            if self.needs_watch(i) {
                self.watch(i);
            }
        }
        self.todo = todo;
        made |= self.reconnect_due();
        made |= self.transmit_all();
        self.maybe_sweep(now);
        made |= self.reap();
        if let Some((a, b)) = self.loopback {
            let waiting = [a, b].into_iter().any(|id| {
                self.link_index(id)
                    .is_some_and(|i| !self.links[i].input.is_empty())
            });
            if waiting {
                self.more = true;
            }
        }
        made
    }

    /// Lists the links whose sockets have something to read (bytes, EOF
    /// or an error), and says whether a connection waits on the
    /// listeners (asked only when `listeners`).
    ///
    /// With two or more sockets in the hot set this is one look at its
    /// poller (level-triggered epoll), which reports the listeners too at
    /// no extra cost: idle connections cost nothing, however many. With
    /// fewer, reading directly is cheaper, and the listeners get a
    /// `poll(2)` of their own when asked.
    fn readiness(&mut self, listeners: bool, todo: &mut Vec<(LinkId, bool)>) -> bool {
        if self.hot_links.len() < 2 {
            todo.extend(self.hot_links.iter().map(|id| (*id, true)));
            return listeners && self.listeners.as_ref().is_some_and(Listeners::pending);
        }
        let mut listener = false;
        let looked = self.hot.ready(|token| {
            if token == LISTENER {
                listener = true;
            } else {
                todo.push((LinkId(token), true));
            }
        });
        if looked.is_err() {
            todo.extend(self.hot_links.iter().map(|id| (*id, true)));
            listener = true;
        }
        listener
    }

    /// Lists the accepted connections in their handshake that have
    /// something to read.
    fn cold_ready(&mut self, todo: &mut Vec<(LinkId, bool)>) {
        if self
            .cold
            .ready(|token| todo.push((LinkId(token), true)))
            .is_err()
        {
            todo.extend(self.handshakes.iter().map(|id| (*id, true)));
        }
    }

    /// Accepts waiting connections (the caller saw one waiting), at most
    /// [`MAX_ACCEPTS`] per step, making room for each
    /// ([`make_room`](Self::make_room)).
    fn accept_all(&mut self) -> bool {
        let mut made = false;
        let mut settled = false;
        for _ in 0..MAX_ACCEPTS {
            let Some(listeners) = &self.listeners else {
                return made;
            };
            let (stream, remote) = match listeners.accept() {
                Ok(Some(s)) => s,
                Ok(None) => return made,
                Err(e) => {
                    // Out of descriptors and the like: try again next step.
                    tracing::debug!(error = %e, "soft engine: accept failed");
                    return made;
                }
            };
            made = true;
            if !self.make_room(&mut settled) {
                self.stats.rejected += 1;
                continue;
            }
            if let Err(e) = stream.tune(&self.cfg) {
                tracing::debug!(error = %e, "soft engine: cannot set socket options");
            }
            self.stats.accepted += 1;
            let id = self.new_link_id();
            let mut link = Link::new(id, Pipe::Stream(stream), remote, LinkPhase::Handshaking);
            let conn = self.core.open_connection(Role::Acceptor);
            if self.cfg.verify_peers {
                self.core.require_verification(conn);
            }
            link.conn = Some(conn);
            // A Hello is small: no room for more before it is in.
            link.read_size = MIN_READ;
            link.timeout = self.cfg.handshake_timeout;
            link.deadline = Instant::now().checked_add(link.timeout);
            let i = self.push_link(link);
            self.handshakes.push_back(id);
            self.set_polled(i, Polled::Cold);
            self.register_link(i);
        }
        // More may wait: the next step takes them.
        self.more = true;
        made
    }

    /// Makes room for one more accepted connection; whether there is
    /// (`SoftConfig::max_handshaking`, `max_connections`). `settled`: the
    /// connections in their handshake were given their chance to finish
    /// already in this round of accepts.
    fn make_room(&mut self, settled: &mut bool) -> bool {
        if self.cold_links >= self.cfg.max_handshaking {
            if !*settled {
                *settled = true;
                self.settle_handshakes();
            }
            if self.cold_links >= self.cfg.max_handshaking {
                self.evict_handshake();
            }
        }
        if self.links.len() < self.cfg.max_connections {
            return true;
        }
        let live = self.links.iter().filter(|l| l.is_live()).count();
        live < self.cfg.max_connections || self.evict_handshake() || self.evict_idle()
    }

    /// Reads what the connections in their handshake have: those whose
    /// Hello is in complete their handshake and leave the set.
    fn settle_handshakes(&mut self) {
        let mut ready = Vec::new();
        self.cold_ready(&mut ready);
        for (id, _) in ready {
            let Some(i) = self.slot(id) else {
                continue;
            };
            self.links[i].readable = true;
            self.service(i);
            self.links[i].readable = false;
            if self.needs_watch(i) {
                self.watch(i);
            }
        }
    }

    /// Closes the oldest accepted connection still in its handshake;
    /// whether there was one.
    fn evict_handshake(&mut self) -> bool {
        while let Some(id) = self.handshakes.pop_front() {
            let Some(i) = self.slot(id) else {
                continue;
            };
            if self.links[i].polled != Polled::Cold {
                // Finished its handshake, or gone.
                continue;
            }
            self.stats.evicted += 1;
            self.lose(
                i,
                ErrorKind::Io,
                "closed to make room: too many connections in their handshake".to_owned(),
            );
            return true;
        }
        false
    }

    /// Closes gracefully (Bye) the connection idle longest among those
    /// with nothing in flight whose peer nobody named; whether there was
    /// one. Idle: no bytes either way since the last upkeep began.
    fn evict_idle(&mut self) -> bool {
        let mut best: Option<(u64, usize)> = None;
        for (i, l) in self.links.iter().enumerate() {
            if l.phase != LinkPhase::Open
                || !matches!(l.pipe, Pipe::Stream(_))
                || l.active >= self.epoch
            {
                continue;
            }
            let Some(c) = l.conn else {
                continue;
            };
            if !self.core.connection_idle(c) {
                continue;
            }
            // Connections of peers the layers above named stay.
            match self.core.connection_peer(c) {
                Some(p) if !self.named.contains(&p) => {}
                _ => continue,
            }
            if best.is_none_or(|(a, _)| l.active < a) {
                best = Some((l.active, i));
            }
        }
        let Some((_, i)) = best else {
            return false;
        };
        let Some(c) = self.links[i].conn else {
            return false;
        };
        self.stats.evicted += 1;
        self.core.close_connection(c);
        self.transmit(i);
        if self.needs_watch(i) {
            self.watch(i);
        }
        true
    }

    /// Services link `i`: connect, read, write, drain.
    fn service(&mut self, i: usize) -> bool {
        let loopback = matches!(self.links[i].pipe, Pipe::Loopback { .. });
        match self.links[i].phase {
            LinkPhase::Dead => false,
            LinkPhase::Connecting => self.check_connect(i),
            LinkPhase::Draining => self.drain_link(i),
            LinkPhase::Handshaking | LinkPhase::Open if loopback => {
                self.loopback_input(i) | self.loopback_transmit(i)
            }
            LinkPhase::Handshaking | LinkPhase::Open => {
                if self.links[i].broken.is_some() {
                    // A write failed: read what the peer sent before
                    // (and its other links), then the link is lost.
                    self.salvage(i);
                    return true;
                }
                let read = self.links[i].readable && self.read_link(i, self.cfg.read_budget);
                read | self.transmit(i)
            }
        }
    }

    fn check_connect(&mut self, i: usize) -> bool {
        let Some(stream) = self.links[i].stream() else {
            return false;
        };
        match stream.connect_state() {
            ConnectState::Pending => false,
            ConnectState::Failed(e) => {
                let kind = if e.kind() == io::ErrorKind::ConnectionRefused {
                    ErrorKind::ConnRefused
                } else {
                    ErrorKind::Io
                };
                let why = if kind == ErrorKind::ConnRefused {
                    format!("nothing listens there ({e})")
                } else {
                    format!("TCP connect failed: {e}")
                };
                self.lose(i, kind, why);
                true
            }
            ConnectState::Ready => {
                let link = &mut self.links[i];
                if let Some(s) = link.stream() {
                    if let Err(e) = s.tune(&self.cfg) {
                        tracing::debug!(error = %e, "soft engine: cannot set socket options");
                    }
                }
                if link.challenge.is_some() {
                    self.challenge_connected(i);
                    return true;
                }
                if let Some(conn) = link.resumes {
                    self.reconnected(i, conn);
                    return true;
                }
                let expect = link.expect.expect("dialed links know their epid");
                let conn = self.core.open_connection(Role::Dialer { expect });
                link.conn = Some(conn);
                link.phase = LinkPhase::Handshaking;
                self.by_conn.insert(conn, link.id);
                self.set_polled(i, Polled::Hot);
                self.transmit(i);
                true
            }
        }
    }

    /// Reads what link `i`'s socket has, up to about `budget` bytes.
    fn read_link(&mut self, i: usize, mut budget: usize) -> bool {
        let mut made = false;
        loop {
            let link = &mut self.links[i];
            let Some(conn) = link.conn.filter(|_| link.is_live() && link.ended.is_none()) else {
                return made;
            };
            let Pipe::Stream(stream) = &link.pipe else {
                return made;
            };
            if let Some(d) = link.direct {
                // The rest of a Data payload: straight into the receive
                // buffer.
                let dst = self
                    .ops
                    .get_mut(d.op)
                    .and_then(|e| e.buffer.as_mut_slice())
                    .and_then(|b| b.get_mut(d.offset..d.offset + d.len));
                let Some(dst) = dst else {
                    self.lose(
                        i,
                        ErrorKind::Io,
                        format!("the receive buffer of {:?} is gone", d.op),
                    );
                    return true;
                };
                match stream.read_slice(dst) {
                    Ok(0) => {
                        self.end_link(i, None);
                        return true;
                    }
                    Ok(n) => {
                        made = true;
                        self.stats.bytes_read += n as u64;
                        link.active = self.epoch;
                        link.direct = (n < d.len).then(|| super::DirectData {
                            offset: d.offset + n,
                            len: d.len - n,
                            ..d
                        });
                        if link.direct.is_none() {
                            link.frames += 1;
                        }
                        self.core.direct_data(conn, n);
                        self.drain_events();
                        self.interleave(i);
                        budget = budget.saturating_sub(n);
                        if budget == 0 {
                            self.more = true;
                            return made;
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return made,
                    Err(e) => {
                        self.end_link(i, Some(e));
                        return true;
                    }
                }
            }
            let want = link.read_size.min(self.cfg.max_read).max(MIN_READ);
            let before = link.input.len();
            match stream.read_buf(&mut link.input, want) {
                Ok(0) => {
                    self.end_link(i, None);
                    return true;
                }
                Ok(n) => {
                    made = true;
                    self.stats.bytes_read += n as u64;
                    link.active = self.epoch;
                    if n == want {
                        link.read_size = (want * 2).min(self.cfg.max_read);
                    }
                    let ok = self.core.handle_input(conn, &mut link.input).is_ok();
                    if link.input.len() < before + n {
                        // At least one frame went whole to the core.
                        link.frames += 1;
                    }
                    if ok && !link.input.is_empty() {
                        if let Ok(Some(d)) = self.core.take_direct(conn, &mut link.input) {
                            link.direct = Some(d);
                            // Bulk data flows directly: keep the reads
                            // into the input buffer (which copy) small.
                            link.read_size = MIN_READ;
                        }
                    }
                    self.drain_events();
                    self.interleave(i);
                    budget = budget.saturating_sub(n);
                    if budget == 0 {
                        self.more = true;
                    }
                    if !ok || budget == 0 || (n < want && self.links[i].direct.is_none()) {
                        return made;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return made,
                Err(e) => {
                    self.end_link(i, Some(e));
                    return true;
                }
            }
        }
    }

    /// Between two reads of link `i`: write what it has, so a connection
    /// busy in both directions alternates instead of reading its whole
    /// budget while its own output waits (and its peer, symmetrically,
    /// writes while nobody reads).
    fn interleave(&mut self, i: usize) {
        let link = &self.links[i];
        if link.is_live()
            && link.broken.is_none()
            && (link.has_output() || link.conn.is_some_and(|c| self.core.wants_transmit(c)))
        {
            self.transmit(i);
        }
    }

    /// Writes link `i`'s pending output; `Ok(true)` once all of it is out.
    fn flush(&mut self, i: usize) -> io::Result<bool> {
        loop {
            let link = &self.links[i];
            if !link.has_output() {
                return Ok(true);
            }
            let Pipe::Stream(stream) = &link.pipe else {
                return Ok(true);
            };
            // Output bytes and referred payloads in wire order, as many as
            // one writev takes; the rest goes in the next round.
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            let mut pos = 0;
            let mut all_refs = true;
            for r in &link.refs {
                if n_iov + 2 > MAX_IOV {
                    all_refs = false;
                    break;
                }
                if r.at > pos {
                    iov[n_iov] = IoSlice::new(&link.output[pos..r.at]);
                    n_iov += 1;
                    pos = r.at;
                }
                let Some(payload) = self
                    .ops
                    .get(r.op)
                    .and_then(|e| e.buffer.as_slice().get(r.range.clone()))
                else {
                    return Err(io::Error::other(format!(
                        "the send buffer of {:?} is gone",
                        r.op
                    )));
                };
                iov[n_iov] = IoSlice::new(payload);
                n_iov += 1;
            }
            // The bytes after the last reference, unless references were
            // left out (they come first).
            if all_refs && n_iov < MAX_IOV && pos < link.output.len() {
                iov[n_iov] = IoSlice::new(&link.output[pos..]);
                n_iov += 1;
            }
            let total: usize = iov[..n_iov].iter().map(|s| s.len()).sum();
            let n = match stream.write_vectored(&iov[..n_iov]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            };
            self.stats.bytes_written += n as u64;
            self.links[i].active = self.epoch;
            let mut released = std::mem::take(&mut self.released);
            self.links[i].consume(n, &mut released);
            for op in released.drain(..) {
                self.release_ref(op, None);
            }
            self.released = released;
            if n < total {
                return Ok(false);
            }
        }
    }

    /// One transmit reference to `op`'s buffer is gone; a parked
    /// completion goes out with the last one. `failed` marks a reference
    /// dropped unwritten: the send then fails.
    fn release_ref(&mut self, op: OpId, failed: Option<ErrorKind>) {
        let Some(e) = self.ops.get_mut(op) else {
            return;
        };
        e.refs = e.refs.saturating_sub(1);
        if let (Some(kind), Some(status)) = (failed, e.parked.as_mut()) {
            status.error = Some(kind);
            status.nbytes = 0;
        }
        if e.refs == 0 {
            if let Some(status) = e.parked.take() {
                self.finish(op, status);
            }
        }
    }

    /// Writes what the core has for link `i` while the socket takes it.
    pub(crate) fn transmit(&mut self, i: usize) -> bool {
        let mut made = false;
        if self.links[i].broken.is_some() {
            return false;
        }
        loop {
            match self.flush(i) {
                Ok(true) => {}
                Ok(false) => {
                    // The socket is full: try again next step.
                    self.watch(i);
                    return true;
                }
                Err(e) => {
                    let link = &mut self.links[i];
                    if link.conn.is_some() && link.is_live() {
                        // The peer may be gone with its last frames
                        // still unread here (a write to a closed Unix
                        // socket fails at once; TCP answers with a
                        // reset): nothing more is written, and the link is
                        // lost only after they were read (`salvage`, at
                        // its next service).
                        link.broken = Some(format!("write failed: {e}"));
                        self.more = true;
                        self.watch(i);
                    } else {
                        self.lose(i, ErrorKind::Io, format!("write failed: {e}"));
                    }
                    return true;
                }
            }
            let link = &mut self.links[i];
            let Some(conn) = link.conn.filter(|_| link.is_live()) else {
                return made;
            };
            if !self.core.wants_transmit(conn) {
                return made;
            }
            if link.round != self.round {
                link.round = self.round;
                link.round_out = 0;
            }
            if link.round_out >= self.cfg.write_budget {
                // More to send, but this link had its share of the round.
                self.more = true;
                self.watch(i);
                return true;
            }
            let before = link.refs.len();
            let n = self.core.poll_transmit_vectored(
                conn,
                &mut link.output,
                &mut link.refs,
                self.cfg.transmit_batch,
                &self.ops,
            );
            link.round_out += n;
            for r in &link.refs[before..] {
                if let Some(e) = self.ops.get_mut(r.op) {
                    e.refs += 1;
                }
            }
            self.drain_events();
            if n == 0 {
                return made;
            }
            made = true;
        }
    }

    /// Starts a round (a progress step, or a post's flush): every link
    /// may compose `write_budget` bytes again.
    pub(crate) fn begin_round(&mut self) {
        self.round = self.round.wrapping_add(1);
    }

    /// Transmits on every connection that may have frames: those the
    /// core lists ([`SoftCore::take_transmit_hints`]), or every one when
    /// it lost count.
    pub(crate) fn transmit_all(&mut self) -> bool {
        let mut made = false;
        let mut hints = std::mem::take(&mut self.hints);
        // Transmitting grants credit, which may list more: a few rounds.
        for _ in 0..4 {
            hints.clear();
            if !self.core.take_transmit_hints(&mut hints) {
                made |= self.transmit_every();
                continue;
            }
            if hints.is_empty() {
                break;
            }
            for &conn in &hints {
                let Some(i) = self.conn_index(conn) else {
                    continue;
                };
                let link = &self.links[i];
                if !link.is_live() {
                    continue;
                }
                made |= match link.pipe {
                    Pipe::Stream(_) => self.transmit(i),
                    Pipe::Loopback { .. } => self.loopback_transmit(i),
                };
            }
        }
        hints.clear();
        self.hints = hints;
        made
    }

    /// Transmits on every link whose connection has output.
    fn transmit_every(&mut self) -> bool {
        let mut made = false;
        for i in 0..self.links.len() {
            let link = &self.links[i];
            if !link.is_live() {
                continue;
            }
            let wants = link.conn.is_some_and(|c| self.core.wants_transmit(c));
            if wants || link.has_output() {
                made |= match link.pipe {
                    Pipe::Stream(_) => self.transmit(i),
                    Pipe::Loopback { .. } => self.loopback_transmit(i),
                };
            }
        }
        made
    }

    /// A closed link: flush, shut down the write half (the peer reads
    /// our last frames, then EOF), then drop what the peer still sends
    /// until closing is safe: the peer closed its side, or (TCP) it
    /// acknowledged everything. Bounded by the linger deadline; a socket
    /// still unsafe then goes to the lingerer (`reap`).
    fn drain_link(&mut self, i: usize) -> bool {
        let mut made = false;
        match self.flush(i) {
            Ok(true) => {
                let link = &mut self.links[i];
                if !link.shut {
                    if let Some(s) = link.stream() {
                        s.shutdown_write();
                    }
                    link.shut = true;
                    made = true;
                }
            }
            Ok(false) => {}
            Err(_) => {
                self.kill(i);
                return true;
            }
        }
        let link = &mut self.links[i];
        if !link.shut {
            return made;
        }
        if let Pipe::Stream(s) = &link.pipe {
            // The input buffer is free (the connection is gone): scratch.
            if linger::safe_to_close(s, &mut link.input) {
                self.kill(i);
                made = true;
            }
        }
        made
    }

    /// Enforces link `i`'s deadline (`now`: the time, once read).
    fn check_deadline(&mut self, i: usize, now: &mut Option<Instant>) {
        let link = &self.links[i];
        let Some(deadline) = link.deadline else {
            return;
        };
        if deadline > *now.get_or_insert_with(Instant::now) {
            return;
        }
        let t = link.timeout;
        match link.phase {
            LinkPhase::Connecting => self.lose(
                i,
                ErrorKind::TimedOut,
                format!("no TCP connection within {t:?}"),
            ),
            LinkPhase::Handshaking => self.lose(
                i,
                ErrorKind::TimedOut,
                format!("no answer to the handshake within {t:?}"),
            ),
            LinkPhase::Draining => self.kill(i),
            LinkPhase::Open | LinkPhase::Dead => self.links[i].deadline = None,
        }
    }

    /// Drops the links that died; whether any went.
    fn reap(&mut self) -> bool {
        let mut made = false;
        // Reaping may kill more (a loopback partner): they go too.
        while let Some(id) = self.dead.pop() {
            let Some(i) = self.slot(id) else {
                continue;
            };
            if self.links[i].phase != LinkPhase::Dead {
                continue;
            }
            made = true;
            self.set_polled(i, Polled::No);
            let mut link = self.links.swap_remove(i);
            self.slots.remove(&id);
            if let Some(moved) = self.links.get(i) {
                self.slots.insert(moved.id, i);
            }
            if let Some(c) = link.conn {
                self.by_conn.remove(&c);
            }
            if link.registered {
                if let (Some((registry, _)), Pipe::Stream(s)) = (&self.registry, &mut link.pipe) {
                    let _ = s.deregister(registry);
                }
            }
            // What is left to write goes with the socket to the lingerer,
            // unless the transport failed (nothing more reaches the peer)
            // or the link went on without it.
            let failed =
                link.ended.is_some() || link.broken.is_some() || link.peer_gone || link.superseded;
            let output = match &link.pipe {
                Pipe::Stream(_) if !failed && link.has_output() => self.pending_output(&link),
                _ => Vec::new(),
            };
            let handed = !output.is_empty();
            let refs = std::mem::take(&mut link.refs);
            let mut partner = None;
            let mut written = false;
            match link.pipe {
                Pipe::Stream(s) => {
                    // Our last bytes, then EOF; the socket closes once the
                    // peer has them (at once unless some wait to be
                    // written, or TCP has them unacknowledged).
                    let deadline = Instant::now() + self.cfg.linger;
                    written =
                        linger::close_when_safe(s, output, link.shut, deadline, &mut link.input);
                }
                Pipe::Loopback { partner: p } => partner = Some(p),
            }
            // Sends whose payload went to the lingerer count as written;
            // those of a link that went on are its log's to send again.
            let unsent = (!(link.superseded || (handed && written))).then_some(ErrorKind::Io);
            for r in refs {
                self.release_ref(r.op, unsent);
            }
            if let Some(conn) = link.conn.take() {
                self.core.connection_lost(conn, "the transport was closed");
                self.drain_events();
            }
            if let Some(partner) = partner {
                if let Some(j) = self.slot(partner) {
                    self.links[j].peer_gone = true;
                    self.watch(j);
                }
                self.loopback = None;
            }
        }
        made
    }

    // ----- upkeep ----------------------------------------------------------

    /// Runs the upkeep when it is due (`now`: the time, if the step read
    /// it already).
    fn maybe_sweep(&mut self, now: Option<Instant>) {
        let now = now.unwrap_or_else(Instant::now);
        if now >= self.next_sweep {
            self.sweep(now);
        }
    }

    /// The upkeep, every [`SWEEP_EVERY`] while steps run (module docs,
    /// "Resources"): closes connections stalled mid-frame and accepted
    /// ones past their handshake timeout, trims the buffers of idle links,
    /// lists every link that needs a look (so nothing waits on a missed
    /// hint for longer than this), drops the unexpected messages of peers
    /// down for long and forgets such peers, and gives back memory.
    fn sweep(&mut self, now: Instant) {
        // A long gap means nobody drove the endpoint: nothing could
        // arrive meanwhile, so stall clocks start afresh.
        let gap = now.duration_since(self.last_sweep) > 10 * SWEEP_EVERY;
        self.last_sweep = now;
        self.next_sweep = now + SWEEP_EVERY;
        let mut stalled = Vec::new();
        let mut expired = Vec::new();
        for i in 0..self.links.len() {
            let watch = self.needs_watch(i);
            let epoch = self.epoch;
            let link = &mut self.links[i];
            let stream = link.stream().is_some();
            match link.phase {
                LinkPhase::Open if stream && link.mid_frame() => match link.stall {
                    Some((since, frames)) if frames == link.frames && !gap => {
                        if now.duration_since(since) >= self.cfg.frame_timeout {
                            stalled.push(link.id);
                        }
                    }
                    _ => link.stall = Some((now, link.frames)),
                },
                LinkPhase::Open => link.stall = None,
                LinkPhase::Handshaking
                    if link.polled == Polled::Cold && link.deadline.is_some_and(|d| d <= now) =>
                {
                    expired.push(link.id);
                }
                _ => {}
            }
            // Idle for a whole period: its buffers go.
            if stream && link.is_live() && link.active + 1 < epoch {
                link.trim_buffers();
                if let Some(c) = link.conn {
                    self.core.release_connection_memory(c);
                }
            }
            if watch {
                self.watch(i);
            }
        }
        let t = self.cfg.frame_timeout;
        for id in stalled {
            if let Some(i) = self.slot(id) {
                self.stats.stalled += 1;
                self.lose(
                    i,
                    ErrorKind::TimedOut,
                    format!("no complete frame within {t:?}"),
                );
            }
        }
        for id in expired {
            if let Some(i) = self.slot(id) {
                self.check_deadline(i, &mut Some(now));
            }
        }
        self.epoch += 1;
        self.expire_peers(now);
        self.release_memory();
    }

    /// Drops the unexpected messages of peers down for
    /// `SoftConfig::dead_peer_messages`, and forgets peers down for
    /// `forget_peer_after`.
    fn expire_peers(&mut self, now: Instant) {
        let (messages, forget) = (self.cfg.dead_peer_messages, self.cfg.forget_peer_after);
        while let Some(&(since, peer)) = self.down_messages.front() {
            if since.checked_add(messages).is_none_or(|due| due > now) {
                break;
            }
            self.down_messages.pop_front();
            if self.down.get(&peer) != Some(&since) {
                // It came back since (and may have gone down again).
                continue;
            }
            let n = self.core.drop_unexpected_from(peer);
            if n > 0 {
                self.stats.dropped_unexpected += n as u64;
                tracing::debug!(
                    ?peer,
                    messages = n,
                    "soft engine: dropped the unexpected messages of a peer down for {messages:?}"
                );
            }
            self.settle_down(peer, since, now);
        }
        while let Some(&(since, peer)) = self.down_forget.front() {
            if since.checked_add(forget).is_none_or(|due| due > now) {
                break;
            }
            self.down_forget.pop_front();
            if self.down.get(&peer) == Some(&since) {
                self.settle_down(peer, since, now);
            }
        }
    }

    /// A peer down since `since` whose time came: forgotten when it may
    /// be; its record goes once nothing more is due for it.
    fn settle_down(&mut self, peer: PeerAddr, since: Instant, now: Instant) {
        let due = |t: Duration| since.checked_add(t).map(|d| d <= now);
        let forget = due(self.cfg.forget_peer_after);
        if forget == Some(true) && !self.named.contains(&peer) && self.core.forget_peer(peer) {
            if let Ok(mut map) = self.peer_epids.write() {
                map.remove(&peer);
            }
            self.down.remove(&peer);
            self.stats.forgotten_peers += 1;
            return;
        }
        // `None`: never due.
        let waiting = |d: Option<bool>| d == Some(false);
        if !waiting(forget) && !waiting(due(self.cfg.dead_peer_messages)) {
            self.down.remove(&peer);
        }
    }

    /// Gives back memory that maps, queues and buffers kept from a past
    /// load (an attack's connections, forgotten peers).
    fn release_memory(&mut self) {
        fn roomy(cap: usize, len: usize) -> bool {
            cap > 4 * len + 64
        }
        self.core.release_memory();
        if roomy(self.handshakes.len(), 2 * self.cold_links) {
            let keep: VecDeque<LinkId> = self
                .handshakes
                .iter()
                .copied()
                .filter(|id| {
                    self.link_index(*id)
                        .is_some_and(|i| self.links[i].polled == Polled::Cold)
                })
                .collect();
            self.handshakes = keep;
        }
        if roomy(self.by_conn.len(), self.links.len()) {
            let links = &self.links;
            let slots = &self.slots;
            self.by_conn.retain(|c, id| {
                slots
                    .get(id)
                    .and_then(|&i| links.get(i))
                    .is_some_and(|l| l.conn == Some(*c))
            });
        }
        macro_rules! shrink {
            ($($x:expr),*) => {$(
                if roomy($x.capacity(), $x.len()) {
                    $x.shrink_to_fit();
                }
            )*};
        }
        shrink!(
            self.slots,
            self.by_conn,
            self.hot_links,
            self.down,
            self.handshakes,
            self.down_messages,
            self.down_forget,
            self.links,
            self.watch,
            self.dead,
            self.todo,
            self.hints
        );
        let roomy_epids = self
            .peer_epids
            .read()
            .is_ok_and(|m| roomy(m.capacity(), m.len()));
        if roomy_epids {
            if let Ok(mut map) = self.peer_epids.write() {
                map.shrink_to_fit();
            }
        }
        // Freed memory stays with the allocator, scattered among what is
        // still in use, unless it is handed back: after the endpoint let
        // go of at least half of what it held (links, peers, unexpected
        // messages, counted alike), it is, and again each second while
        // what the crowd left behind is dropped.
        let core = self.core.stats();
        let load = self.links.len()
            + core.peers
            + self.down.len()
            + (core.unexpected_bytes >> 16) as usize;
        self.load_high = self.load_high.max(load);
        let now = Instant::now();
        if self.load_high >= 64 && 2 * load <= self.load_high {
            self.load_high = load;
            let settle = self.cfg.dead_peer_messages.max(self.cfg.forget_peer_after);
            self.trim_until = now.checked_add(settle + Duration::from_secs(1));
            self.trim(now);
        } else if self.trim_until.is_some_and(|t| now <= t)
            && now.duration_since(self.last_trim) >= Duration::from_secs(1)
        {
            self.trim(now);
        }
    }

    fn trim(&mut self, now: Instant) {
        self.last_trim = now;
        give_back_memory();
    }

    /// The bytes link `link` has yet to write, in wire order (the output
    /// with the referred payloads in place).
    fn pending_output(&self, link: &super::transport::Link) -> Vec<u8> {
        let total = link.output.len() + link.refs.iter().map(|r| r.range.len()).sum::<usize>();
        let mut out = Vec::with_capacity(total);
        let mut pos = 0;
        for r in &link.refs {
            out.extend_from_slice(&link.output[pos..r.at]);
            pos = r.at;
            match self
                .ops
                .get(r.op)
                .and_then(|e| e.buffer.as_slice().get(r.range.clone()))
            {
                Some(p) => out.extend_from_slice(p),
                // Cannot happen (a referred buffer stays until written);
                // the stream would be garbage after this point.
                None => return out,
            }
        }
        out.extend_from_slice(&link.output[pos..]);
        out
    }

    /// Reading link `i` ended: EOF (`None`) or a read error. The link is
    /// lost after the peer's other links were read (`salvage`).
    fn end_link(&mut self, i: usize, error: Option<io::Error>) {
        let why = match (&error, self.links[i].phase) {
            (Some(e), _) => format!("read failed: {e}"),
            (None, LinkPhase::Handshaking) => {
                "the peer closed the connection during the handshake".to_owned()
            }
            (None, _) => "the peer closed the connection".to_owned(),
        };
        self.links[i].ended = Some((ErrorKind::Io, why));
        if !self.salvaging {
            self.salvage(i);
        }
    }

    /// Link `i`'s transport failed (its reading ended, or a write broke).
    /// Before its peer goes down (which fails everything pending towards
    /// it), every byte the kernel still holds from that peer is taken in:
    /// the rest of this link's input after a broken write (the kernel
    /// returns what arrived before the EOF or reset), and the input of the
    /// peer's other links. Frames on different connections are not
    /// ordered, so a message that arrived whole on one of them must not be
    /// lost because another ended first. Then every link found ended or
    /// broken meanwhile is lost.
    fn salvage(&mut self, i: usize) {
        self.salvaging = true;
        let peer = self.links[i]
            .conn
            .and_then(|c| self.core.connection_peer(c));
        self.read_rest(i);
        if let Some(peer) = peer {
            for j in 0..self.links.len() {
                let same = self.links[j]
                    .conn
                    .is_some_and(|c| self.core.connection_peer(c) == Some(peer));
                if j != i && same {
                    self.read_rest(j);
                }
            }
        }
        self.salvaging = false;
        for j in 0..self.links.len() {
            let link = &mut self.links[j];
            if !link.is_live() {
                continue;
            }
            let failed = link
                .ended
                .clone()
                .or_else(|| link.broken.clone().map(|why| (ErrorKind::Io, why)));
            if let Some((kind, why)) = failed {
                self.lose(j, kind, why);
            }
        }
    }

    /// Reads everything link `j`'s socket holds (bounded, against a peer
    /// that never stops sending), until it would block or ends.
    fn read_rest(&mut self, j: usize) {
        let link = &self.links[j];
        if !link.is_live() || link.ended.is_some() || link.stream().is_none() {
            return;
        }
        let mut left = SALVAGE_LIMIT;
        while left > 0 {
            let before = self.stats.bytes_read;
            if !self.read_link(j, left) {
                return;
            }
            let n = (self.stats.bytes_read - before) as usize;
            left = left.saturating_sub(n.max(1));
        }
    }

    /// Link `i`'s transport failed: the core fails everything pending
    /// towards its peer; a dial a `connect` waits for records the error.
    pub(crate) fn lose(&mut self, i: usize, kind: ErrorKind, why: String) {
        let link = &self.links[i];
        let dialing = matches!(link.phase, LinkPhase::Connecting | LinkPhase::Handshaking);
        let record = dialing && link.awaited;
        let attempt = link.resumes;
        let challenged = link.challenge;
        self.kill(i);
        let link = &mut self.links[i];
        link.direct = None;
        let remote = link.remote;
        let expect = link.expect;
        let id = link.id;
        let conn = link.conn.take();
        if let Some(conn) = conn {
            self.by_conn.remove(&conn);
            if self.try_detach(i, conn) {
                if attempt.is_some() {
                    self.attempt_failed(conn, kind, format!("{remote}: {why}"));
                }
                return;
            }
            self.core.connection_lost(conn, format!("{remote}: {why}"));
            self.drain_events();
        } else if let Some(conn) = attempt {
            self.attempt_failed(conn, kind, format!("{remote}: {why}"));
        } else if let Some(conn) = challenged {
            self.core.verified(
                conn,
                Err(format!("the challenge to {remote} failed: {why}")),
            );
            self.drain_events();
        }
        if record {
            let target = expect.map_or_else(|| "?".to_owned(), |e| e.to_string());
            self.dial_errors.push((
                id,
                Error::new(
                    kind,
                    format!("soft engine: connecting to {target} at {remote}: {why}"),
                ),
            ));
        }
    }

    // ----- events --------------------------------------------------------

    /// Applies every event the core has queued.
    pub(crate) fn drain_events(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::Place { op, offset, bytes } => {
                    let dst = self
                        .ops
                        .get_mut(op)
                        .and_then(|e| e.buffer.as_mut_slice())
                        .and_then(|b| b.get_mut(offset..offset + bytes.len()));
                    match dst {
                        Some(d) => d.copy_from_slice(&bytes),
                        None => tracing::error!(
                            ?op,
                            offset,
                            len = bytes.len(),
                            "soft engine: Place outside its receive buffer"
                        ),
                    }
                }
                Event::Complete { op, status } => match self.ops.get_mut(op) {
                    Some(e) if e.refs > 0 => e.parked = Some(status),
                    _ => self.finish(op, status),
                },
                Event::Connected { conn, peer, epid } => self.on_connected(conn, peer, epid),
                Event::Resumed { conn, replaced } => self.on_resumed(conn, replaced),
                Event::Verify { conn, epid } => self.on_verify(conn, epid),
                Event::ConnectionClosed { conn, error } => self.on_closed(conn, error),
                Event::PeerDown { peer, epid, error } => {
                    tracing::debug!(?peer, %epid, %error, "soft engine: peer down");
                    self.on_peer_down(peer);
                }
                Event::AmRequest {
                    token,
                    source,
                    handler,
                    args,
                    payload,
                } => {
                    let Some(h) = self.handlers.get(usize::from(handler)).cloned() else {
                        tracing::warn!(
                            handler,
                            "soft engine: AM request for an unregistered handler"
                        );
                        self.core.am_done(token);
                        continue;
                    };
                    let mut reply = Replier {
                        core: &mut self.core,
                        token: Some(token),
                    };
                    {
                        let _scope = HandlerScope::enter(self.id);
                        h.on_request(
                            AmMessage {
                                source,
                                args: args.as_slice(),
                                payload: &payload,
                            },
                            &mut reply,
                        );
                    }
                    if let Some(token) = reply.token.take() {
                        self.core.am_done(token);
                    }
                }
                Event::AmReply {
                    source,
                    handler,
                    args,
                    payload,
                } => {
                    let Some(h) = self.handlers.get(usize::from(handler)).cloned() else {
                        tracing::warn!(
                            handler,
                            "soft engine: AM reply for an unregistered handler"
                        );
                        continue;
                    };
                    let _scope = HandlerScope::enter(self.id);
                    h.on_reply(AmMessage {
                        source,
                        args: args.as_slice(),
                        payload: &payload,
                    });
                }
            }
        }
    }

    /// Hands op's buffer back with its status.
    pub(crate) fn finish(&mut self, op: OpId, status: MqStatus) {
        if let Some(e) = self.ops.remove(op) {
            // A refused key means the slot is gone (a bug above us); the
            // buffer is dropped here either way.
            let _ = self.completions.complete(
                e.key,
                MqCompletion {
                    status,
                    buffer: e.buffer,
                },
            );
        }
    }

    /// A connection completed its handshake: it joins the connections
    /// every step looks at, unless its peer has all the connections it
    /// may hold (`SoftConfig::max_connections_per_peer`).
    fn on_connected(&mut self, conn: ConnId, peer: PeerAddr, epid: Epid) {
        if let Ok(mut map) = self.peer_epids.write() {
            map.insert(peer, epid);
        }
        self.down.remove(&peer);
        let Some(i) = self.conn_index(conn) else {
            return;
        };
        let link = &mut self.links[i];
        link.phase = LinkPhase::Open;
        link.deadline = None;
        if link.polled == Polled::Cold {
            link.read_size = FIRST_READ;
        }
        if link.stream().is_some() {
            self.set_polled(i, Polled::Hot);
        }
        if self.core.peer_connections(peer) > self.cfg.max_connections_per_peer {
            tracing::debug!(?peer, %epid, "soft engine: too many connections from one peer; closing the newest");
            self.stats.evicted += 1;
            self.core.close_connection(conn);
        }
    }

    /// A peer went down: its unexpected messages and then itself are due
    /// to go (`SoftConfig::dead_peer_messages`, `forget_peer_after`).
    fn on_peer_down(&mut self, peer: PeerAddr) {
        let now = Instant::now();
        self.down.insert(peer, now);
        if now.checked_add(self.cfg.dead_peer_messages).is_some() {
            self.down_messages.push_back((now, peer));
        }
        if now.checked_add(self.cfg.forget_peer_after).is_some() {
            self.down_forget.push_back((now, peer));
        }
    }

    /// The core closed `conn`: flush its last frames, forget it, let the
    /// transport drain.
    fn on_closed(&mut self, conn: ConnId, error: Option<ConnError>) {
        let Some(i) = self.conn_index(conn) else {
            self.core.connection_lost(conn, "no transport");
            return;
        };
        match self.links[i].pipe {
            Pipe::Stream(_) => {
                let link = &mut self.links[i];
                let before = link.refs.len();
                self.core.poll_transmit_vectored(
                    conn,
                    &mut link.output,
                    &mut link.refs,
                    self.cfg.transmit_batch,
                    &self.ops,
                );
                for r in &link.refs[before..] {
                    if let Some(e) = self.ops.get_mut(r.op) {
                        e.refs += 1;
                    }
                }
            }
            Pipe::Loopback { partner } => {
                if let Some(j) = self.link_index(partner) {
                    let mut input = std::mem::take(&mut self.links[j].input);
                    let limit = input.len() + self.cfg.transmit_batch;
                    self.core.poll_transmit(conn, &mut input, limit, &self.ops);
                    self.links[j].input = input;
                }
            }
        }
        self.core.connection_lost(conn, "closed by the protocol");
        self.by_conn.remove(&conn);
        let link = &mut self.links[i];
        let dialing = link.phase == LinkPhase::Handshaking;
        link.conn = None;
        link.direct = None;
        if dialing && link.awaited {
            let target = link
                .expect
                .map_or_else(|| "?".to_owned(), |e| e.to_string());
            let remote = link.remote;
            let e = match error {
                Some(ConnError::Handshake(HandshakeError::WrongEpid { expected, got })) => {
                    Error::new(
                        ErrorKind::ConnRefused,
                        format!(
                            "soft engine: connecting to {expected} at {remote}: another endpoint ({got}) \
                             answers there now; {expected} is gone"
                        ),
                    )
                }
                Some(e) => Error::with_source(
                    e.kind(),
                    format!("soft engine: connecting to {target} at {remote}: {e}"),
                    e,
                ),
                None => Error::new(
                    ErrorKind::Io,
                    format!("soft engine: connecting to {target} at {remote}: closed during the handshake"),
                ),
            };
            self.dial_errors.push((link.id, e));
        }
        match link.pipe {
            Pipe::Stream(_) => {
                link.phase = LinkPhase::Draining;
                link.timeout = self.cfg.linger;
                link.deadline = Instant::now().checked_add(self.cfg.linger);
                self.set_polled(i, Polled::No);
                self.watch(i);
            }
            Pipe::Loopback { .. } => self.kill(i),
        }
    }

    // ----- connecting ------------------------------------------------------

    /// Starts dialing `epid`; the link's deadline is `deadline`.
    fn dial(&mut self, epid: Epid, deadline: Instant, timeout: Duration) -> Result<LinkId> {
        let (stream, remote, phase) = dial_epid(epid, &self.cfg)
            .map_err(|(kind, why)| Error::new(kind, format!("soft engine: {why}")))?;
        let id = self.new_link_id();
        let mut link = Link::new(id, Pipe::Stream(stream), remote, phase);
        link.expect = Some(epid);
        link.awaited = true;
        link.deadline = Some(deadline);
        link.timeout = timeout;
        if phase == LinkPhase::Handshaking {
            link.conn = Some(self.core.open_connection(Role::Dialer { expect: epid }));
        }
        self.add_dial_link(link);
        Ok(id)
    }

    /// Adds a link that dials: watched until it is up, and, once its
    /// socket is connected (a Unix one at once), polled and sending its
    /// handshake.
    pub(crate) fn add_dial_link(&mut self, link: Link) -> usize {
        let connected = link.phase == LinkPhase::Handshaking;
        let i = self.push_link(link);
        if connected {
            self.set_polled(i, Polled::Hot);
        }
        self.watch(i);
        self.register_link(i);
        if connected {
            self.transmit(i);
        }
        i
    }

    fn take_dial_error(&mut self, id: LinkId) -> Option<Error> {
        let k = self.dial_errors.iter().position(|(l, _)| *l == id)?;
        Some(self.dial_errors.swap_remove(k).1)
    }

    // ----- closing -------------------------------------------------------

    /// Whether a graceful close has nothing left to wait for.
    fn quiesced(&self) -> bool {
        self.core.stats().connections == 0 && self.links.iter().all(|l| l.phase == LinkPhase::Dead)
    }

    /// Ends everything at once: transports closed, pending operations
    /// failed (`Io` towards peers, `Canceled` for the rest), buffers handed
    /// back.
    pub(crate) fn force_close(&mut self) {
        // From here on no link waits for a new transport.
        self.closed = true;
        self.abandon_all("the endpoint closed");
        for i in 0..self.links.len() {
            if self.links[i].conn.is_some() {
                self.lose(i, ErrorKind::Io, "the endpoint closed".to_owned());
            }
            self.kill(i);
        }
        self.reap();
        for id in self.ops.ids() {
            if self.core.cancel(id) {
                continue;
            }
            self.finish(id, MqStatus::failed(0, ErrorKind::Canceled));
        }
        self.drain_events();
        if let Some(mut l) = self.listeners.take() {
            if let Some((registry, _)) = &self.registry {
                l.deregister(registry);
            }
        }
        self.dial_errors.clear();
        self.closed = true;
    }
}

/// Hands the allocator's free memory back to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it
    // takes no pointer and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_memory() {}

/// The reply channel handed to an AM handler.
struct Replier<'a> {
    core: &'a mut SoftCore,
    token: Option<AmToken>,
}

impl AmReply for Replier<'_> {
    fn reply(&mut self, handler: AmHandlerId, args: &[u64], payload: &[u8]) -> Result<()> {
        let Some(token) = self.token.take() else {
            return Err(Error::new(
                ErrorKind::Inval,
                "soft engine: an AM request is answered at most once",
            ));
        };
        match self.core.am_reply(token, handler.0, args, payload) {
            Ok(()) => Ok(()),
            Err((token, e)) => {
                self.token = Some(token);
                Err(e)
            }
        }
    }
}

impl ProgressSource for SoftEndpoint {
    fn progress(&self) -> Progress {
        let mut g = match self.inner.try_lock() {
            Ok(g) => g,
            // Someone is posting or stepping: come back soon rather than
            // sleep on bytes nobody read.
            Err(TryLockError::WouldBlock) => return Progress::Made,
            Err(TryLockError::Poisoned(_)) => return Progress::Idle,
        };
        if g.closed {
            return Progress::Idle;
        }
        // Another step only while one left work behind (a budget ran
        // out, loopback bytes wait): after an ordinary step the socket is
        // known empty, and one more read would only delay the caller, who
        // may be waiting to answer what just arrived.
        let mut made = false;
        for _ in 0..STEPS_PER_PROGRESS {
            made |= g.step(false);
            if !g.more {
                break;
            }
        }
        made.into()
    }

    fn register(&self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| io::Error::other("endpoint poisoned"))?;
        if g.registry.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a soft endpoint can be registered with one reactor only",
            ));
        }
        let registry = registry.try_clone()?;
        if let Some(l) = &mut g.listeners {
            l.register(&registry, token)?;
        }
        g.registry = Some((registry, token));
        for i in 0..g.links.len() {
            g.register_link(i);
        }
        Ok(())
    }

    fn deregister(&self, registry: &mio::Registry) -> io::Result<()> {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(l) = &mut g.listeners {
            l.deregister(registry);
        }
        for link in &mut g.links {
            if let (true, Pipe::Stream(s)) = (link.registered, &mut link.pipe) {
                let _ = s.deregister(registry);
                link.registered = false;
            }
        }
        g.registry = None;
        Ok(())
    }
}

impl EngineEndpoint for SoftEndpoint {
    fn kind(&self) -> EngineKind {
        EngineKind::Soft
    }

    fn epid(&self) -> Epid {
        self.epid
    }

    fn limits(&self) -> EngineLimits {
        self.limits
    }

    fn completions(&self) -> &Arc<CompletionTable<MqCompletion>> {
        &self.completions
    }

    fn connect(&self, epids: &[Epid], timeout: Duration) -> Vec<Result<PeerAddr>> {
        let start = Instant::now();
        let deadline = start
            .checked_add(timeout)
            .unwrap_or(start + Duration::from_secs(86_400 * 365));
        let n = epids.len();
        let mut results: Vec<Option<Result<PeerAddr>>> = (0..n).map(|_| None).collect();
        let mut dials: Vec<Option<LinkId>> = vec![None; n];
        let fail_all = |e: &Error| -> Vec<Result<PeerAddr>> {
            (0..n)
                .map(|_| Err(Error::new(e.kind(), e.message().to_owned())))
                .collect()
        };
        {
            let mut g = match self.lock() {
                Ok(g) => g,
                Err(e) => return fail_all(&e),
            };
            for (i, &epid) in epids.iter().enumerate() {
                if let Some(p) = g.up_peer(epid) {
                    results[i] = Some(Ok(p));
                } else if let Some(j) = epids[..i].iter().position(|e| *e == epid) {
                    dials[i] = dials[j];
                } else if epid == self.epid {
                    g.ensure_loopback();
                } else {
                    match g.dial(epid, deadline, timeout) {
                        Ok(id) => dials[i] = Some(id),
                        Err(e) => results[i] = Some(Err(e)),
                    }
                }
            }
        }
        loop {
            let mut g = match self.lock() {
                Ok(g) => g,
                Err(e) => {
                    for r in results.iter_mut().filter(|r| r.is_none()) {
                        *r = Some(Err(Error::new(e.kind(), e.message().to_owned())));
                    }
                    break;
                }
            };
            let made = g.step(true);
            let mut pending = false;
            for i in 0..n {
                if results[i].is_some() {
                    continue;
                }
                if let Some(p) = g.up_peer(epids[i]) {
                    results[i] = Some(Ok(p));
                } else if let Some(e) = dials[i].and_then(|d| g.take_dial_error(d)) {
                    results[i] = Some(Err(e));
                } else if let Some(j) =
                    (0..i).find(|&j| epids[j] == epids[i] && results[j].is_some())
                {
                    results[i] = match &results[j] {
                        Some(Ok(p)) => Some(Ok(*p)),
                        Some(Err(e)) => Some(Err(Error::new(e.kind(), e.message().to_owned()))),
                        None => None,
                    };
                } else {
                    pending = true;
                }
            }
            if pending && Instant::now() >= deadline {
                for i in 0..n {
                    if results[i].is_some() {
                        continue;
                    }
                    let epid = epids[i];
                    if let Some(k) = dials[i].and_then(|d| g.link_index(d)) {
                        let remote = g.links[k].remote;
                        g.links[k].awaited = false;
                        g.lose(k, ErrorKind::TimedOut, "timed out".to_owned());
                        results[i] = Some(Err(Error::new(
                            ErrorKind::TimedOut,
                            format!(
                                "soft engine: connecting to {epid} at {remote}: no answer within {timeout:?}"
                            ),
                        )));
                    } else {
                        results[i] = Some(Err(Error::new(
                            ErrorKind::TimedOut,
                            format!("soft engine: connecting to {epid}: not connected within {timeout:?}"),
                        )));
                    }
                }
                g.reap();
                pending = false;
            }
            if !pending {
                // The caller names these peers from now on.
                for r in results.iter().flatten().flatten() {
                    g.named.insert(*r);
                }
                for d in dials.iter().flatten() {
                    if let Some(k) = g.link_index(*d) {
                        g.links[k].awaited = false;
                    }
                    g.take_dial_error(*d);
                }
                break;
            }
            drop(g);
            if !made {
                std::thread::sleep(IDLE_WAIT);
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every epid has a result"))
            .collect()
    }

    /// Lock-free with respect to the endpoint's state, so AM handlers may
    /// ask who sent what they handle.
    fn peer_epid(&self, peer: PeerAddr) -> Option<Epid> {
        self.peer_epids.read().ok()?.get(&peer).copied()
    }

    fn peer_activity(&self, peer: PeerAddr) -> u64 {
        self.lock_any().map_or(0, |g| g.core.peer_activity(peer))
    }

    fn isend(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        let mut g = match self.lock() {
            Ok(g) => g,
            Err(error) => return Err(PostError { error, buffer }),
        };
        if let Err(error) = self.check_key(op, &g) {
            return Err(PostError { error, buffer });
        }
        let id = OpTable::id(op);
        if let Err(error) = g.core.send(peer, tag, buffer.len() as u64, mode, id) {
            return Err(PostError { error, buffer });
        }
        g.ops.insert(op, buffer, OpKind::Send);
        g.drain_events();
        g.begin_round();
        g.transmit_all();
        Ok(())
    }

    fn irecv(
        &self,
        tags: TagMatch,
        mut buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        let mut g = match self.lock() {
            Ok(g) => g,
            Err(error) => return Err(PostError { error, buffer }),
        };
        if let Err(error) = self.check_key(op, &g) {
            return Err(PostError { error, buffer });
        }
        if !buffer.is_empty() && buffer.as_mut_ptr().is_none() {
            return Err(PostError {
                error: Error::new(
                    ErrorKind::Inval,
                    "soft engine: a receive buffer must be writable (shared Bytes are read-only)",
                ),
                buffer,
            });
        }
        let id = OpTable::id(op);
        let cap = buffer.len();
        g.ops.insert(op, buffer, OpKind::Recv);
        if let Err(error) = g.core.recv(tags, cap, id) {
            let buffer = g.ops.remove(id).expect("just inserted").buffer;
            return Err(PostError { error, buffer });
        }
        g.drain_events();
        g.begin_round();
        g.transmit_all();
        Ok(())
    }

    fn cancel(&self, op: OpKey) -> Result<bool> {
        let mut g = self.lock()?;
        let done = g.core.cancel(OpTable::id(op));
        g.drain_events();
        Ok(done)
    }

    fn iprobe(&self, tags: TagMatch) -> Result<Option<MqStatus>> {
        let g = self.lock()?;
        Ok(g.core.probe(tags))
    }

    fn queue_stats(&self) -> QueueStats {
        let core = self.stats().core;
        QueueStats {
            unexpected_msgs: Some(core.unexpected_msgs as u64),
            unexpected_bytes: Some(core.unexpected_bytes),
            unexpected_total: Some(core.unexpected_total),
        }
    }

    fn am_register(&self, handler: Arc<dyn AmHandler>) -> Result<AmHandlerId> {
        let mut g = self.lock()?;
        if g.handlers.len() >= self.limits.max_am_handlers {
            return Err(Error::new(
                ErrorKind::NoMem,
                format!(
                    "soft engine: all {} AM handler slots are taken",
                    self.limits.max_am_handlers
                ),
            ));
        }
        g.handlers.push(handler);
        Ok(AmHandlerId((g.handlers.len() - 1) as u16))
    }

    fn am_request(
        &self,
        peer: PeerAddr,
        handler: AmHandlerId,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let mut g = self.lock()?;
        g.core.am_request(peer, handler.0, args, payload)?;
        g.begin_round();
        g.transmit_all();
        Ok(())
    }

    fn close(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        {
            let mut g = self.lock_any()?;
            if g.closed {
                return Ok(());
            }
            g.begin_close();
        }
        loop {
            let mut g = self.inner.lock().map_err(|_| poisoned_error())?;
            if g.closed {
                return Ok(());
            }
            if !g.close_step(start, timeout) {
                drop(g);
                std::thread::sleep(IDLE_WAIT);
            }
        }
    }
}

impl Inner {
    /// Starts a graceful close: every peer says Bye once its traffic is
    /// done, connections still in their handshake end, receives that
    /// matched nothing complete `Canceled`.
    fn begin_close(&mut self) {
        self.core.shutdown();
        for id in self.ops.ids() {
            if self.ops.get(id).is_some_and(|e| e.kind == OpKind::Recv) {
                self.core.cancel(id);
            }
        }
        self.drain_events();
        self.begin_round();
        self.transmit_all();
    }

    /// One step of a graceful close begun at `start`; forces the rest once
    /// everything is said or `timeout` passed. Whether the step did
    /// anything (or finished).
    fn close_step(&mut self, start: Instant, timeout: Duration) -> bool {
        let made = self.step(false);
        if self.quiesced() || start.elapsed() >= timeout {
            self.force_close();
            return true;
        }
        made
    }
}

/// Dropping an endpoint that was not closed closes it gracefully within
/// the `close_timeout` it was opened with (driving its own progress, as
/// `close` does), then forces what is left.
impl Drop for SoftEndpoint {
    fn drop(&mut self) {
        let g = match self.inner.get_mut() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.closed {
            return;
        }
        let start = Instant::now();
        g.begin_close();
        while !g.closed {
            if !g.close_step(start, g.close_timeout) {
                std::thread::sleep(IDLE_WAIT);
            }
        }
    }
}
