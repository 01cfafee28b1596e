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
//! * **Unexpected messages.** At most the budget, all peers here
//!   together; those of peers that went down leave the budget (the peers
//!   still here get their credit at once) and are held apart, at most one
//!   budget more, the oldest departure dropped first, and dropped after
//!   [`SoftConfig::dead_peer_messages`] in any case.
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
//! Maps and queues that grew for a crowd shrink once it is gone, and the
//! allocator is asked to hand its free memory back to the system
//! (`give_back.rs`: with glibc, `malloc_trim`, and on the progressing
//! thread a scrub of its arena's free top and a flush of its cache of
//! freed small chunks, which would each pin a page):
//!
//! * once the endpoint holds half of what it held at most (links, peers
//!   and unexpected messages counted together), then each second while
//!   what the crowd left keeps shrinking, and for two seconds after;
//! * when links (idle, or gone) gave back 64 KiB of buffers or more, at
//!   most once a second.
//!
//! A give-back takes the progressing thread 0.2 to 4 ms (15 ms after a
//! 60 MiB flood), after its step, outside the endpoint's lock;
//! [`SoftStats::memory_trims`] counts them. The flush leaves about 230 KiB
//! of fresh small chunks in the thread's cache. Measured (`attack_figures`
//! in `tests/soft_resources.rs`, four runs): the live heap comes back to
//! its baseline, the RSS to within 4 % of it (0.6-2.8 % after stalled and
//! pre-handshake connections, 1.8-3.4 % after 4,096 handshaken ones,
//! 3.0-3.3 % after a 61 MiB flood, 2.2-3.6 % after 140,000 identities).
//!
//! # Files
//!
//! This file holds the endpoint, its state and the engine interface; the
//! state's work is split by concern: `step.rs` (one progress step),
//! `intake.rs` (accepting, making room), `link_io.rs` (reads and writes),
//! `events.rs` (applying the core's events), `link_end.rs` (a link's end),
//! `dial.rs`, `upkeep.rs` (timers, sweeps, when to give memory back),
//! `give_back.rs` (giving it back), `close.rs`, and
//! `links.rs` (the link table).
//!
//! [`progress`]: crate::reactor::ProgressSource::progress

use super::optable::{OpKind, OpTable};
use super::protocol::{AmToken, ConnError, ConnId, CoreStats, Event, OpId};
use super::table_alloc::{Table, TableSet};
use super::transport::{
    dial_epid, ConnectState, Drained, Link, LinkId, LinkPhase, Listeners, Pipe, Polled, Poller,
    Remote, Stream, FIRST_READ, MIN_READ,
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
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::time::{Duration, Instant};

mod close;
mod dial;
mod events;
mod give_back;
mod intake;
mod link_end;
mod link_io;
mod links;
mod shm_link;
mod step;
mod upkeep;

/// Steps one `progress` call runs at most.
const STEPS_PER_PROGRESS: usize = 4;
/// Without a reactor poll to say so, look for new connections, and at the
/// connections still in their handshake, every this many steps.
const ACCEPT_EVERY: u32 = 16;
/// Steps between two looks at the clock for the upkeep while nothing
/// else reads it (`Inner::maybe_sweep`).
const SWEEP_LOOK_EVERY: u32 = 8;
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
    /// Times the endpoint handed the allocator's free memory back to the
    /// system (module docs, "Resources").
    pub memory_trims: u64,
    /// Links whose two directions run over shared memory now
    /// ([`SoftConfig::shared_memory`]); the others use their socket.
    pub shm_links: usize,
    /// Links moved onto shared memory so far.
    pub shm_moves: u64,
    /// Bytes written to shared-memory rings.
    pub shm_bytes_written: u64,
    /// Bytes read from shared-memory rings.
    pub shm_bytes_read: u64,
    /// Wake-ups sent to a peer sleeping on a shared-memory link.
    pub shm_wakes: u64,
    /// Large messages read straight from the sender's memory
    /// ([`SoftConfig::shm_single_copy`]).
    pub shm_pulls: u64,
    /// Their bytes.
    pub shm_pull_bytes: u64,
    /// Such reads that failed (the message then came through the ring).
    pub shm_pull_fallbacks: u64,
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
    /// Takes the eager messages of the hooked tag
    /// ([`EngineEndpoint::set_tag_hook`]).
    pub tag_hook: Option<Arc<dyn crate::engine::TagHook>>,
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
    pub peer_epids: Arc<RwLock<Table<PeerAddr, Epid>>>,
    /// The current step left work for the next (a budget ran out).
    pub more: bool,
    /// A `salvage` runs: links that end meanwhile are lost after it.
    pub salvaging: bool,
    /// Connections whose link waits for a new transport
    /// (`reconnect.rs`).
    pub detached: Table<ConnId, super::reconnect::Detached>,
    /// Sockets of open connections and of dials (and the listeners).
    pub hot: Poller,
    /// Sockets of accepted connections still in their handshake.
    pub cold: Poller,
    /// The links in `hot` (a step with fewer than two reads them
    /// directly).
    pub hot_links: TableSet<LinkId>,
    /// How many links `cold` holds.
    pub cold_links: usize,
    /// Sockets of links whose input comes through shared memory.
    pub lifeline: Poller,
    /// How many links `lifeline` holds.
    pub lifeline_links: usize,
    /// Links whose input comes through shared memory: looked at every
    /// step (gone ones are pruned when met).
    pub shm_links: Vec<LinkId>,
    /// Accepted links in their handshake, oldest first (with entries of
    /// links that since finished or went: skipped when met).
    pub handshakes: VecDeque<LinkId>,
    /// Where each link is in `links` (checked on use; a miss searches).
    pub slots: Table<LinkId, usize>,
    /// The link of each connection (checked on use; a miss searches).
    pub by_conn: Table<ConnId, LinkId>,
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
    pub named: TableSet<PeerAddr>,
    /// Peers down, and since when.
    pub down: Table<PeerAddr, Instant>,
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
    /// The load at the last trim: while it keeps falling, trimming goes on.
    pub trim_load: usize,
    /// Buffer bytes links gave back (idle, or gone) since memory was last
    /// handed back to the system.
    pub freed_buffers: usize,
    /// Memory is to be handed back to the system once the state's lock is
    /// released (`give_back.rs`): posting threads need not wait for it.
    pub give_back_due: bool,
    pub stats: SoftStats,
}

/// One soft endpoint (see the module docs): an [`EngineEndpoint`] and a
/// [`ProgressSource`].
pub struct SoftEndpoint {
    id: u64,
    epid: Epid,
    limits: EngineLimits,
    completions: Arc<CompletionTable<MqCompletion>>,
    peer_epids: Arc<RwLock<Table<PeerAddr, Epid>>>,
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
        let (hot, cold, lifeline) = (poller()?, poller()?, poller()?);
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
        let peer_epids = Arc::new(RwLock::new(Table::default()));
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
                tag_hook: None,
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
                detached: Table::default(),
                hot,
                cold,
                hot_links: TableSet::default(),
                cold_links: 0,
                lifeline,
                lifeline_links: 0,
                shm_links: Vec::new(),
                handshakes: VecDeque::new(),
                slots: Table::default(),
                by_conn: Table::default(),
                watch: Vec::new(),
                dead: Vec::new(),
                todo: Vec::new(),
                hints: Vec::new(),
                round: 0,
                named: TableSet::default(),
                down: Table::default(),
                down_messages: VecDeque::new(),
                down_forget: VecDeque::new(),
                next_sweep: now + SWEEP_EVERY,
                last_sweep: now,
                epoch: 1,
                load_high: 0,
                trim_until: None,
                last_trim: now,
                trim_load: 0,
                freed_buffers: 0,
                give_back_due: false,
                stats: SoftStats::default(),
            }),
        })
    }

    /// Calls `f` with the segment and layout of each of its links on
    /// shared memory: tests play a peer that scribbles over it.
    #[cfg(test)]
    pub(crate) fn with_shm_segments(
        &self,
        mut f: impl FnMut(
            &crate::engine::soft::shm::mapping::MappedSegment,
            &crate::engine::soft::shm::segment::Layout,
        ),
    ) -> usize {
        let g = self.lock_any().expect("a live endpoint");
        let mut n = 0;
        for link in &g.links {
            if let Some(p) = &link.shm {
                let (seg, layout) = p.segment();
                f(seg, layout);
                n += 1;
            }
        }
        n
    }

    /// Starts dialing `epid` without waiting for the handshake (tests: a
    /// dial its peer never answers); the link's name.
    #[cfg(test)]
    pub(crate) fn start_dial(&self, epid: Epid) -> LinkId {
        let mut g = self.lock().expect("an open endpoint");
        let timeout = Duration::from_secs(60);
        g.dial(epid, Instant::now() + timeout, timeout)
            .expect("the dial starts")
    }

    /// The links whose handshake completed (tests).
    #[cfg(test)]
    pub(crate) fn open_links(&self) -> Vec<LinkId> {
        let g = self.lock().expect("an open endpoint");
        g.links
            .iter()
            .filter(|l| l.is_live() && l.phase == LinkPhase::Open)
            .map(|l| l.id)
            .collect()
    }

    /// Services link `id` as a step does when its socket is readable
    /// (tests decide the order of the links within one step); after it,
    /// whether the link's write broke and whether its reading ended.
    #[cfg(test)]
    pub(crate) fn service_readable(&self, id: LinkId) -> (bool, bool) {
        let mut g = self.lock().expect("an open endpoint");
        let Some(i) = g.link_index(id) else {
            return (false, true);
        };
        g.links[i].readable = true;
        g.service(i);
        match g.link_index(id) {
            Some(i) => {
                g.links[i].readable = false;
                let link = &g.links[i];
                (
                    link.broken.is_some(),
                    link.ended.is_some() || !link.is_live(),
                )
            }
            None => (false, true),
        }
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
        s.shm_links = self
            .links
            .iter()
            .filter(|l| l.is_live() && l.shm.as_ref().is_some_and(|p| p.reads && p.writes))
            .count();
        s
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
        let give_back = std::mem::take(&mut g.give_back_due);
        drop(g);
        if give_back {
            give_back::give_back_memory();
        }
        made.into()
    }

    fn prepare_sleep(&self) -> bool {
        match self.inner.try_lock() {
            Ok(mut g) => g.closed || g.prepare_sleep(),
            // Someone is posting or stepping: look again rather than sleep.
            Err(TryLockError::WouldBlock) => false,
            Err(TryLockError::Poisoned(_)) => true,
        }
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
        let s = self.stats();
        QueueStats {
            unexpected_msgs: Some(s.core.unexpected_msgs as u64),
            unexpected_bytes: Some(s.core.unexpected_bytes),
            unexpected_total: Some(s.core.unexpected_total),
            shm_links: Some(s.shm_links as u64),
        }
    }

    fn set_tag_hook(&self, tag: u64, hook: Option<Arc<dyn crate::engine::TagHook>>) -> bool {
        let Ok(mut g) = self.lock() else {
            return false;
        };
        g.core.set_hook_tag(hook.is_some().then_some(tag));
        g.tag_hook = hook;
        true
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
