//! [`PeerWatch`]: the I/O edge of the watch — its AM handler, its progress
//! step, and what it does when a peer dies.
//!
//! * **Handler** (registered by the domain after the AM message queue and
//!   the RMA transport): answers a hello request with a hello reply
//!   carrying this process's identity, records the identity a hello
//!   carries, and declares a peer that says bye dead. A reply the engine
//!   cannot send from the handler is sent as a request from progress.
//! * **Progress**: acts on the book's news at once (a death: fail every
//!   operation towards the peer; a new connection: greet it), and every
//!   millisecond or so runs a *tick*: collects the peers with operations
//!   outstanding (operations registered in the book, the AM message
//!   queue's and the RMA transport's), feeds them to the [`WatchCore`],
//!   and carries out its actions (hellos, `/proc` checks, deaths). The
//!   clock is read every 16th round while nothing is watched, every round
//!   while something is.
//! * **Close**: [`PeerWatch::say_goodbye`] sends a bye to every live
//!   contact before the domain's endpoint closes.
//!
//! Lock order: the engine runs handlers with its own lock held and the
//! handler takes the core's and the book's locks, so neither is held
//! across an engine call here.

use super::book::{Death, PeerBook};
use super::core::{Action, WatchConfig, WatchCore};
use super::gate::peer_gone;
use super::identity::{check_process, Identity, WIRE_LEN};
use super::wire::Packet;
use crate::engine::{AmHandler, AmHandlerId, AmMessage, AmReply, EngineEndpoint, PeerAddr};
use crate::proto::am_msg::AmMsgQueue;
use crate::proto::rma_transport::RmaTransport;
use crate::reactor::{Progress, ProgressSource};
use crate::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Time between ticks.
const TICK: Duration = Duration::from_millis(1);
/// While nothing is watched, the clock is read once per this many rounds.
const IDLE_CLOCK_EVERY: u32 = 16;

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Single-step updates: consistent after a panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the handler and the watch share (no engine: the engine holds the
/// handler).
struct Shared {
    core: Mutex<WatchCore>,
    book: Arc<PeerBook>,
    id: OnceLock<AmHandlerId>,
    me: Option<Identity>,
    /// Hellos owed to peers whose request could not be answered from the
    /// handler.
    owed: Mutex<Vec<PeerAddr>>,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, WatchCore> {
        relock(&self.core)
    }
}

struct Handler(Arc<Shared>);

impl AmHandler for Handler {
    fn on_request(&self, msg: AmMessage<'_>, reply: &mut dyn AmReply) {
        let Some(&id) = self.0.id.get() else {
            return;
        };
        match Packet::decode(msg.args, msg.payload) {
            Ok(Packet::Hello(identity)) => {
                self.0.core().on_hello(msg.source, identity, Instant::now());
                let (word, payload) = Packet::Hello(self.0.me).encode();
                if let Err(e) = reply.reply(id, &[word], &payload) {
                    tracing::debug!(source = ?msg.source, "peer watch: hello reply failed ({e}); sending a request");
                    relock(&self.0.owed).push(msg.source);
                    self.0.book.retry_later();
                }
            }
            Ok(Packet::Bye) => {
                let evidence = self.0.core().on_bye(msg.source);
                if let Some(ev) = evidence {
                    self.0.book.declare(msg.source, ev);
                }
            }
            Err(why) => {
                tracing::debug!(source = ?msg.source, "peer watch: dropped a request: {why}")
            }
        }
    }

    fn on_reply(&self, msg: AmMessage<'_>) {
        match Packet::decode(msg.args, msg.payload) {
            Ok(Packet::Hello(identity)) => {
                self.0.core().on_hello(msg.source, identity, Instant::now());
            }
            Ok(Packet::Bye) => {
                tracing::debug!(source = ?msg.source, "peer watch: a bye as a reply, dropped")
            }
            Err(why) => tracing::debug!(source = ?msg.source, "peer watch: dropped a reply: {why}"),
        }
    }
}

/// Reused buffers of a tick.
#[derive(Default)]
struct TickBufs {
    peers: Vec<PeerAddr>,
    /// The engine's activity count of each of `peers`.
    activity: Vec<u64>,
    actions: Vec<Action>,
}

/// The peer watch of one domain (see the [module docs](self)).
pub(crate) struct PeerWatch {
    /// The engine endpoint itself (not the gate: the watch talks to peers
    /// the gate may refuse).
    engine: Arc<dyn EngineEndpoint>,
    shared: Arc<Shared>,
    am_msg: Arc<AmMsgQueue>,
    rma: Option<Arc<RmaTransport>>,
    /// Deaths whose waiting operations could not all be ended yet.
    retry: Mutex<Vec<Arc<Death>>>,
    base: Instant,
    rounds: AtomicU32,
    /// Nanoseconds after `base` of the next tick.
    next_tick: AtomicU64,
    /// Something is watched: read the clock every round.
    busy: AtomicBool,
    tick: Mutex<TickBufs>,
}

impl std::fmt::Debug for PeerWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerWatch")
            .field("handler", &self.shared.id.get())
            .field("config", &self.shared.core().config())
            .finish()
    }
}

impl PeerWatch {
    /// Registers the watch's AM handler on `engine` (after the AM message
    /// queue's and the RMA transport's) and builds the watch for a domain
    /// with `FI_PSM_TIMEOUT` = `timeout`. An engine that cannot carry the
    /// hello gets no handler: only engine errors then count (no silence
    /// rule, no process checks; nothing is registered after it, so handler
    /// ids still agree across processes).
    pub(crate) fn register(
        engine: Arc<dyn EngineEndpoint>,
        book: Arc<PeerBook>,
        timeout: Duration,
        am_msg: Arc<AmMsgQueue>,
        rma: Option<Arc<RmaTransport>>,
    ) -> Arc<PeerWatch> {
        let limits = engine.limits();
        let fits = limits.max_am_args >= 1
            && limits.max_am_request >= WIRE_LEN
            && limits.max_am_reply >= WIRE_LEN;
        let me = Identity::mine();
        let mut config = WatchConfig::for_timeout(timeout);
        if !fits {
            config.timeout = Duration::ZERO;
        }
        let shared = Arc::new(Shared {
            core: Mutex::new(WatchCore::new(config, me)),
            book,
            id: OnceLock::new(),
            me,
            owed: Mutex::new(Vec::new()),
        });
        if fits {
            match engine.am_register(Arc::new(Handler(shared.clone()))) {
                Ok(id) => {
                    let _ = shared.id.set(id);
                }
                Err(e) => {
                    tracing::warn!("peer watch: no AM handler ({e}); dead peers are only seen through engine errors");
                    shared.core().mark_unanswerable();
                }
            }
        }
        Arc::new(PeerWatch {
            engine,
            shared,
            am_msg,
            rma,
            retry: Mutex::new(Vec::new()),
            base: Instant::now(),
            rounds: AtomicU32::new(0),
            next_tick: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            tick: Mutex::new(TickBufs::default()),
        })
    }

    /// Sends a bye to every live peer this domain greeted or heard from
    /// (the domain is closing; errors are ignored).
    pub(crate) fn say_goodbye(&self) {
        let Some(&id) = self.shared.id.get() else {
            return;
        };
        let contacts = self.shared.core().contacts();
        let (word, _) = Packet::Bye.encode();
        for peer in contacts {
            if self.shared.book.refuse(peer, "bye").is_err() {
                continue;
            }
            if let Err(e) = self.engine.am_request(peer, id, &[word], &[]) {
                tracing::debug!(?peer, "peer watch: bye not sent: {e}");
            }
        }
    }

    /// Sends a hello to `peer`; a failure that means it is gone kills it.
    fn hello(&self, peer: PeerAddr) {
        let Some(&id) = self.shared.id.get() else {
            return;
        };
        if self.shared.book.refuse(peer, "hello").is_err() {
            return;
        }
        let (word, payload) = Packet::Hello(self.shared.me).encode();
        let Err(e) = self.engine.am_request(peer, id, &[word], &payload) else {
            return;
        };
        let mut core = self.shared.core();
        if peer_gone(e.kind()) {
            let evidence = core.on_engine_error(peer, format!("a keepalive failed: {e}"));
            drop(core);
            if let Some(ev) = evidence {
                self.shared.book.declare(peer, ev);
            }
        } else {
            if e.kind() != ErrorKind::Again {
                tracing::debug!(?peer, "peer watch: hello not sent: {e}");
            }
            core.hello_failed(peer);
        }
    }

    fn perform(&self, actions: &mut Vec<Action>) {
        for a in actions.drain(..) {
            match a {
                Action::Hello(peer) => self.hello(peer),
                Action::Check { peer, pid, start } => {
                    let state = check_process(pid, start);
                    let evidence = self.shared.core().on_process(peer, state);
                    if let Some(ev) = evidence {
                        self.shared.book.declare(peer, ev);
                    }
                }
                Action::Dead(peer, ev) => {
                    self.shared.book.declare(peer, ev);
                }
            }
        }
    }

    /// Ends every operation towards `death`'s peer.
    fn fail_ops(&self, death: &Arc<Death>) {
        self.am_msg.fail_peer(death.peer, ErrorKind::Io);
        if let Some(rma) = &self.rma {
            rma.fail_peer(death.peer, death);
        }
        if !self.shared.book.fail_waiting(death) {
            relock(&self.retry).push(death.clone());
            self.shared.book.retry_later();
        }
    }

    /// Deaths, new connections, owed hellos, retries. Whether anything
    /// died.
    fn handle_news(&self) -> bool {
        let news = self.shared.book.take_news();
        let owed = std::mem::take(&mut *relock(&self.shared.owed));
        let retry = std::mem::take(&mut *relock(&self.retry));
        let mut actions = Vec::new();
        {
            let mut core = self.shared.core();
            let now = Instant::now();
            for d in &news.deaths {
                core.mark_dead(d.peer);
            }
            for &p in &news.revivals {
                core.revive(p, now);
            }
            for &p in &news.peers {
                core.greet(p, now, &mut actions);
            }
        }
        if let Some(rma) = &self.rma {
            for &p in &news.revivals {
                rma.revive(p);
            }
        }
        actions.extend(owed.into_iter().map(Action::Hello));
        self.perform(&mut actions);
        for d in &news.deaths {
            self.fail_ops(d);
        }
        for d in &retry {
            if !self.shared.book.in_force(d) {
                // Revived meanwhile: its operations go on.
                continue;
            }
            if !self.shared.book.fail_waiting(d) {
                relock(&self.retry).push(d.clone());
                self.shared.book.retry_later();
            }
        }
        !news.deaths.is_empty()
    }

    /// One tick at `now` (module docs).
    fn run_tick(&self, now: Instant, bufs: &mut TickBufs) {
        let TickBufs {
            peers,
            activity,
            actions,
        } = bufs;
        peers.clear();
        self.shared.book.waiting_peers(peers);
        self.am_msg.outstanding_peers(peers);
        if let Some(rma) = &self.rma {
            rma.outstanding_peers(peers);
        }
        peers.sort_unstable_by_key(|p| p.0);
        peers.dedup();
        // Asked before taking the core's lock (lock order, module docs).
        activity.clear();
        activity.extend(peers.iter().map(|&p| self.engine.peer_activity(p)));
        let watched = {
            let mut core = self.shared.core();
            for (&p, &a) in peers.iter().zip(activity.iter()) {
                core.on_activity(p, a, now);
            }
            core.tick(now, peers, actions);
            core.watched()
        };
        self.busy.store(watched > 0, Ordering::Relaxed);
        self.perform(actions);
    }

    fn nanos(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

impl ProgressSource for PeerWatch {
    /// News at once; a tick every millisecond or so (module docs). Reports
    /// progress only when a peer died.
    fn progress(&self) -> Progress {
        let mut died = false;
        if self.shared.book.has_news() {
            died |= self.handle_news();
        }
        let n = self.rounds.load(Ordering::Relaxed).wrapping_add(1);
        self.rounds.store(n, Ordering::Relaxed);
        if n % IDLE_CLOCK_EVERY != 0 && !self.busy.load(Ordering::Relaxed) {
            return died.into();
        }
        let now = Instant::now();
        let t = self.nanos(now);
        if t < self.next_tick.load(Ordering::Relaxed) {
            return died.into();
        }
        let Ok(mut bufs) = self.tick.try_lock() else {
            return died.into();
        };
        self.next_tick
            .store(t.saturating_add(TICK.as_nanos() as u64), Ordering::Relaxed);
        self.run_tick(now, &mut bufs);
        drop(bufs);
        if self.shared.book.has_news() {
            died |= self.handle_news();
        }
        died.into()
    }
}
