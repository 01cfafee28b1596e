//! [`RmaTransport`]: RMA and atomics over active messages for one domain —
//! the I/O edge around the sans-IO cores in [`crate::proto::rma`]
//! (`Initiator`, `RmaTarget`) and the atomic packets of
//! `proto/atomic/wire.rs`.
//!
//! # Handler
//! One AM handler, registered by the domain right after the AM message
//! queue (fixed order, so its id agrees across processes), carries both
//! protocols; the command word's protocol byte tells them apart (`'R'`
//! RMA, `'A'` atomics). Requests go to the target side (the domain's
//! [`MrTable`], offered only while an endpoint holds the RMA / atomic
//! target slot, else the peer gets `FI_EOPNOTSUPP`); replies go to the
//! initiator side. A reply may also arrive as a request (the end of a long
//! write, or a reply the engine could not send from a handler).
//!
//! # Held-back writes
//! A long read's data leaves the target as an MQ send from a pinned window
//! of the region, and the window stays pinned until the engine reports
//! that send done, which can be after the initiator already has every
//! byte (libpsm2 completes a send some progress calls later). A long
//! write to the same bytes that arrives meanwhile — an application that
//! waited for its read and then writes the range — is therefore held back
//! instead of refused: it is served as soon as the range is free, at the
//! latest after [`DEFER_LIMIT`] (then refused with `FI_EBUSY`), and the
//! same peer's later requests wait behind it so they keep their order.
//! Its answer then leaves as an AM request.
//!
//! # Locks and re-entrancy
//! The engine runs handlers inside its own calls with its lock held, and
//! handlers take the state lock; so the state lock is never held across an
//! engine call (order: engine, then state). Handlers only update state,
//! reply through [`AmReply`] and complete futures; every request, MQ post
//! and cancel is made from [`ProgressSource::progress`] (or right after a
//! post), under the *pump* lock so one thread at a time does it.
//!
//! Because the state lock is released while a request is sent, its reply
//! can come back before the initiator core has recorded (`commit`) that it
//! was sent. Replies for the operation being sent are therefore held back
//! and replayed right after the commit.
//!
//! # Progress cost
//! A `dirty` flag is set by everything that may give the pump work; the
//! progress step of an idle domain is one atomic swap. While MQ transfers
//! of long operations are in flight the flag stays set (their completions
//! are looked up in the engine's completion table each round).

use super::atomic::wire::{self as awire, AtomicPacket, AtomicRequest, ATOMIC_PROTO};
use super::rma::{
    kind_of, refusal_of, Initiator, Packet, RemoteEvent, RemoteIov, Reply, Request, RmaKind,
    RmaParams, RmaTarget, Step, TargetPost, NARGS,
};
use crate::engine::{
    AmHandler, AmHandlerId, AmMessage, AmReply, EngineEndpoint, MqCompletion, OpBuffer, PeerAddr,
    SendMode, TagMatch,
};
use crate::proto::mr::MrTable;
use crate::proto::peer_watch::Death;
use crate::proto::rma_target_events::RmaTargetEvents;
use crate::proto::target_slots::{TargetRole, TargetSlots};
use crate::reactor::{CompletionTable, OpKey, Progress, ProgressSource};
use crate::{Error, ErrorKind, Result};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError, Weak};
use std::time::{Duration, Instant};

/// Most engine calls one progress step makes.
const PROGRESS_BUDGET: usize = 64;
/// Most engine calls a post makes before returning (the rest go from
/// progress).
const POST_BUDGET: usize = 4;

/// What an RMA or atomic future receives: the result and its buffer.
pub(crate) type Done = (Result<()>, OpBuffer);

/// An AM request waiting to leave.
#[derive(Debug)]
struct Outgoing {
    dest: PeerAddr,
    args: [u64; NARGS],
    nargs: usize,
    payload: Vec<u8>,
    /// The atomic it carries, to fail if it cannot be sent.
    atomic: Option<u64>,
}

impl Outgoing {
    fn new(dest: PeerAddr, args: &[u64], payload: Vec<u8>, atomic: Option<u64>) -> Self {
        let mut words = [0u64; NARGS];
        let nargs = args.len().min(NARGS);
        words[..nargs].copy_from_slice(&args[..nargs]);
        Outgoing {
            dest,
            args: words,
            nargs,
            payload,
            atomic,
        }
    }
}

/// An MQ transfer this transport posted, by its engine key.
#[derive(Debug)]
enum MqWork {
    /// Of initiator operation `id` (a long write's send, or a long read's
    /// receive).
    Init { id: u64, send: bool },
    /// A long write's receive at the target.
    TargetRecv(u64),
    /// A long read's send at the target.
    TargetSend(RemoteEvent),
}

/// What an initiator operation wants, copied out of the core's `Step`
/// (the request's words and payload go to the pump's buffers).
enum Next {
    Request(usize),
    Post { tag: u64, send: bool },
    Cancel,
}

/// Reused buffers of the pump (no allocation per round once warm).
#[derive(Debug, Default)]
struct PumpBufs {
    /// The payload of the request being sent.
    payload: Vec<u8>,
    /// The initiator's operation ids, walked this round.
    ids: Vec<u64>,
}

/// An atomic this domain initiated.
#[derive(Debug)]
struct PendingAtomic {
    peer: PeerAddr,
    key: OpKey,
    buffer: OpBuffer,
    /// Bytes of old values due back (0 for write calls).
    fetch_len: usize,
}

#[derive(Debug)]
struct State {
    init: Initiator,
    target: RmaTarget,
    /// Live initiator operations: id -> the future's key.
    ops: HashMap<u64, OpKey>,
    /// Their ids, in start order (the pump walks them).
    order: Vec<u64>,
    mq: Vec<(OpKey, MqWork)>,
    posts: VecDeque<TargetPost>,
    out: VecDeque<Outgoing>,
    events: Vec<RemoteEvent>,
    atomics: HashMap<u64, PendingAtomic>,
    next_atomic: u64,
    /// The operation whose request is being sent, and replies for it that
    /// came meanwhile.
    sending: Option<u64>,
    stash: Vec<(PeerAddr, Reply, Vec<u8>)>,
    /// Read data for replies.
    scratch: Vec<u8>,
    /// Futures to complete, outside the lock.
    finished: Vec<(OpKey, Done)>,
    /// Peers the domain's watch declared dead.
    dead: HashSet<PeerAddr>,
    /// Requests held back until the range they need is free (module
    /// docs, "Held-back writes"), in arrival order.
    deferred: VecDeque<Deferred>,
}

/// A request held back at the target.
#[derive(Debug)]
struct Deferred {
    source: PeerAddr,
    req: Request,
    payload: Vec<u8>,
    since: Instant,
}

/// How long a target holds back a long write whose range an outgoing
/// long read still holds, before it refuses it with `FI_EBUSY`.
const DEFER_LIMIT: Duration = Duration::from_secs(5);

/// Buffers of the atomic lock (one per domain: every atomic this domain is
/// the target of runs under it).
#[derive(Debug, Default)]
struct AtomicScratch {
    target: Vec<u8>,
    fetched: Vec<u8>,
}

struct Shared {
    state: Mutex<State>,
    mr: MrTable,
    slots: Arc<dyn TargetSlots>,
    id: OnceLock<AmHandlerId>,
    dirty: AtomicBool,
    done: Arc<CompletionTable<Done>>,
    /// The engine's MQ completions (for long transfers).
    mq_table: Arc<CompletionTable<MqCompletion>>,
    /// The endpoint that gets remote events (none until one claims the
    /// RMA target slot).
    target_ep: Mutex<Option<Weak<dyn RmaTargetEvents>>>,
    atomic_lock: Mutex<AtomicScratch>,
    /// Largest atomic payload (request and reply).
    max_atomic: usize,
    /// The domain is closing: requests from peers are dropped unanswered
    /// (the peers fail them when they get the domain's bye), so nothing
    /// is served from memory the application is about to take back.
    closing: AtomicBool,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is a single step; a panic leaves them
    // consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn reply_id(r: &Reply) -> u64 {
    match *r {
        Reply::Write { id, .. } | Reply::Read { id, .. } | Reply::WriteGo { id, .. } => id,
    }
}

fn mq_result(c: &MqCompletion) -> Result<usize> {
    match c.status.error {
        None => Ok(c.status.nbytes),
        Some(kind) => Err(Error::new(
            kind,
            format!("RMA: the long transfer's MQ operation failed ({kind})"),
        )),
    }
}

impl State {
    /// Whether a long read's send is still in flight here (its window of
    /// a region stays pinned until the engine finishes it).
    fn long_read_in_flight(&self) -> bool {
        self.mq
            .iter()
            .any(|(_, w)| matches!(w, MqWork::TargetSend(_)))
    }

    /// Holds a request back.
    fn defer(&mut self, source: PeerAddr, req: Request, payload: &[u8]) {
        self.deferred.push_back(Deferred {
            source,
            req,
            payload: payload.to_vec(),
            since: Instant::now(),
        });
    }

    /// Serves the held-back requests whose range is free now (or that
    /// waited [`DEFER_LIMIT`]: refused then), in order; a peer's later
    /// requests stay behind its first one that must still wait. Replies
    /// go out as AM requests.
    fn retry_deferred(&mut self, table: Option<&MrTable>) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let mut moved = false;
        let mut waiting: HashSet<PeerAddr> = HashSet::new();
        let mut keep = VecDeque::new();
        let mut scratch = std::mem::take(&mut self.scratch);
        while let Some(d) = self.deferred.pop_front() {
            if waiting.contains(&d.source) {
                keep.push_back(d);
                continue;
            }
            let h = self
                .target
                .handle(table, d.source, &d.req, &d.payload, &mut scratch);
            if h.range_busy && self.long_read_in_flight() && d.since.elapsed() < DEFER_LIMIT {
                waiting.insert(d.source);
                keep.push_back(d);
                continue;
            }
            moved = true;
            if let Some(p) = h.post {
                self.posts.push_back(p);
            }
            if let Some(e) = h.event {
                self.events.push(e);
            }
            if let Some((args, n)) = h.reply {
                let bytes = scratch[..n.min(scratch.len())].to_vec();
                self.out
                    .push_back(Outgoing::new(d.source, args.as_slice(), bytes, None));
            }
        }
        self.deferred = keep;
        self.scratch = scratch;
        moved
    }

    /// Feeds the MQ transfers that finished into the cores (the table is
    /// only looked at, so handlers may call this too).
    fn poll_mq(&mut self, table: &CompletionTable<MqCompletion>) -> bool {
        let st = self;
        let mut moved = false;
        let mut i = 0;
        while i < st.mq.len() {
            let Some(c) = table.try_take(st.mq[i].0) else {
                i += 1;
                continue;
            };
            moved = true;
            let (_, work) = st.mq.swap_remove(i);
            let result = mq_result(&c);
            match work {
                MqWork::Init { id, .. } => {
                    if let Err(b) = st.init.on_mq_done(id, result, c.buffer) {
                        drop(b);
                    }
                    st.reap(id);
                }
                MqWork::TargetRecv(tid) => {
                    let from = c.status.source;
                    drop(c.buffer);
                    if let Some(done) = st.target.on_long_recv_done(tid, from, result) {
                        if let Some(e) = done.event {
                            st.events.push(e);
                        }
                        st.out.push_back(Outgoing::new(
                            done.dest,
                            done.args.as_slice(),
                            Vec::new(),
                            None,
                        ));
                    }
                }
                MqWork::TargetSend(event) => {
                    drop(c.buffer);
                    match result {
                        Ok(_) => st.events.push(event),
                        Err(e) => tracing::debug!("RMA: long read send failed: {e}"),
                    }
                }
            }
        }
        moved
    }

    /// Gives up the MQ transfer `key` of initiator operation `id` (its
    /// peer is dead): if the engine finished it, its result counts;
    /// otherwise the engine keeps the buffer until it is done with it (at
    /// the latest when the domain closes) and the operation ends with
    /// `error` and an empty buffer.
    fn orphan(&mut self, table: &CompletionTable<MqCompletion>, key: OpKey, id: u64, error: Error) {
        self.mq.retain(|(k, _)| *k != key);
        let _ = match table.abandon(key) {
            Some(c) => {
                let result = mq_result(&c);
                self.init.on_mq_done(id, result, c.buffer)
            }
            None => self.init.on_mq_done(id, Err(error), OpBuffer::empty()),
        };
    }

    /// Moves operation `id` out if it finished.
    fn reap(&mut self, id: u64) {
        if let Some((result, mut bufs)) = self.init.take_finished(id) {
            self.order.retain(|&o| o != id);
            if let Some(key) = self.ops.remove(&id) {
                let buffer = if bufs.is_empty() {
                    OpBuffer::empty()
                } else {
                    bufs.swap_remove(0)
                };
                self.finished.push((key, (result, buffer)));
            }
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.dirty.store(true, Ordering::Release);
        relock(&self.state)
    }

    fn deliver(&self) -> bool {
        let done = std::mem::take(&mut relock(&self.state).finished);
        let any = !done.is_empty();
        for (key, value) in done {
            // A dropped future abandoned its key: the value (buffer) is
            // dropped here.
            let _ = self.done.complete(key, value);
        }
        any
    }

    fn table_if(&self, role: TargetRole) -> Option<&MrTable> {
        self.slots.is_taken(role).then_some(&self.mr)
    }

    fn on_rma_reply(&self, source: PeerAddr, reply: &Reply, payload: &[u8]) {
        let id = reply_id(reply);
        let mut st = self.state();
        if st.sending == Some(id) {
            st.stash.push((source, *reply, payload.to_vec()));
            return;
        }
        let d = st.init.on_reply(source, reply, payload);
        tracing::trace!(?d, "RMA reply");
        st.reap(id);
        drop(st);
        self.deliver();
    }

    fn on_atomic_reply(&self, source: PeerAddr, id: u64, status: u32, payload: &[u8]) {
        let mut st = self.state();
        match st.atomics.get(&id) {
            Some(p) if p.peer == source => {}
            _ => {
                tracing::debug!(?source, id, "atomic reply for no atomic of this peer");
                return;
            }
        }
        let Some(mut p) = st.atomics.remove(&id) else {
            return;
        };
        let result = if status != 0 {
            let kind = kind_of(status);
            let why = refusal_of(status).map_or(String::new(), |r| format!(": {r}"));
            Err(Error::new(
                kind,
                format!("atomic: the target refused the operation ({kind}{why})"),
            ))
        } else if payload.len() != p.fetch_len {
            Err(Error::new(
                ErrorKind::Io,
                format!(
                    "atomic: the target sent {} bytes of old values, {} were due",
                    payload.len(),
                    p.fetch_len
                ),
            ))
        } else {
            if let Some(dst) = p.buffer.as_mut_slice() {
                dst[..payload.len()].copy_from_slice(payload);
            }
            Ok(())
        };
        st.finished.push((p.key, (result, p.buffer)));
        drop(st);
        self.deliver();
    }

    fn on_packet(&self, msg: &AmMessage<'_>, reply: Option<&mut dyn AmReply>) {
        let Some(&hid) = self.id.get() else {
            return;
        };
        let closing = self.closing.load(Ordering::Acquire);
        if awire::proto_of(msg.args) == Some(ATOMIC_PROTO) {
            match awire::decode(msg.args) {
                Ok(AtomicPacket::Reply { id, status }) => {
                    self.on_atomic_reply(msg.source, id, status, msg.payload)
                }
                Ok(AtomicPacket::Request(_)) if closing => {
                    tracing::debug!(source = ?msg.source, "atomic: a request while closing, dropped")
                }
                Ok(AtomicPacket::Request(req)) => self.on_atomic_request(msg, &req, hid, reply),
                Err(e) => tracing::debug!(source = ?msg.source, "atomic packet dropped: {e}"),
            }
            return;
        }
        match Packet::decode(msg.args, msg.payload.len()) {
            Ok(Packet::Reply(r)) => self.on_rma_reply(msg.source, &r, msg.payload),
            Ok(Packet::Request(_)) if closing => {
                tracing::debug!(source = ?msg.source, "RMA: a request while closing, dropped")
            }
            Ok(Packet::Request(req)) => {
                let table = self.table_if(TargetRole::Rma);
                let mut st = self.state();
                // A long read's send that ended frees its window before a
                // following write to the same bytes pins them.
                if !st.mq.is_empty() {
                    st.poll_mq(&self.mq_table);
                }
                // Requests of a peer with one held back wait behind it, so
                // they stay in order.
                if st.deferred.iter().any(|d| d.source == msg.source) {
                    st.defer(msg.source, req, msg.payload);
                    drop(st);
                    self.dirty.store(true, Ordering::Release);
                    return;
                }
                let mut scratch = std::mem::take(&mut st.scratch);
                let h = st
                    .target
                    .handle(table, msg.source, &req, msg.payload, &mut scratch);
                if h.range_busy && st.long_read_in_flight() {
                    st.scratch = scratch;
                    st.defer(msg.source, req, msg.payload);
                    drop(st);
                    self.dirty.store(true, Ordering::Release);
                    return;
                }
                if let Some(p) = h.post {
                    st.posts.push_back(p);
                }
                if let Some(e) = h.event {
                    st.events.push(e);
                }
                drop(st);
                if let Some((args, n)) = h.reply {
                    let bytes = &scratch[..n.min(scratch.len())];
                    let sent = match reply {
                        Some(r) => r.reply(hid, args.as_slice(), bytes).is_ok(),
                        None => false,
                    };
                    if !sent {
                        let o = Outgoing::new(msg.source, args.as_slice(), bytes.to_vec(), None);
                        self.state().out.push_back(o);
                    }
                }
                self.state().scratch = scratch;
            }
            Err(e) => tracing::debug!(source = ?msg.source, "RMA packet dropped: {e}"),
        }
    }

    fn on_atomic_request(
        &self,
        msg: &AmMessage<'_>,
        req: &AtomicRequest,
        hid: AmHandlerId,
        reply: Option<&mut dyn AmReply>,
    ) {
        let table = self.table_if(TargetRole::Atomic);
        let mut guard = relock(&self.atomic_lock);
        let s = &mut *guard;
        let status = awire::execute(
            table,
            req,
            msg.payload,
            self.max_atomic,
            &mut s.target,
            &mut s.fetched,
        );
        let args = awire::encode_reply(req.id, status);
        let sent = match reply {
            Some(r) => r.reply(hid, &args, &s.fetched).is_ok(),
            None => false,
        };
        if !sent {
            let o = Outgoing::new(msg.source, &args, s.fetched.clone(), None);
            drop(guard);
            self.state().out.push_back(o);
        }
    }
}

struct Handler(Arc<Shared>);

impl AmHandler for Handler {
    fn on_request(&self, msg: AmMessage<'_>, reply: &mut dyn AmReply) {
        self.0.on_packet(&msg, Some(reply));
    }

    fn on_reply(&self, msg: AmMessage<'_>) {
        self.0.on_packet(&msg, None);
    }
}

/// RMA and atomics of one domain (see the [module docs](self)).
pub(crate) struct RmaTransport {
    engine: Arc<dyn EngineEndpoint>,
    shared: Arc<Shared>,
    id: AmHandlerId,
    /// Held by whoever makes the engine calls; guards the send buffer.
    pump: Mutex<PumpBufs>,
    params: RmaParams,
}

impl std::fmt::Debug for RmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmaTransport")
            .field("handler", &self.id)
            .field("params", &self.params)
            .finish()
    }
}

impl RmaTransport {
    /// Registers the RMA/atomic handler on `engine` (the domain calls this
    /// right after the AM message queue). `NoSys` if the engine carries
    /// fewer than 5 AM arguments.
    pub(crate) fn register(
        engine: Arc<dyn EngineEndpoint>,
        mr: MrTable,
        slots: Arc<dyn TargetSlots>,
        tagged_rma: bool,
    ) -> Result<Arc<RmaTransport>> {
        let limits = engine.limits();
        if limits.max_am_args < NARGS || limits.max_am_request == 0 || limits.max_am_reply == 0 {
            return Err(Error::new(
                ErrorKind::NoSys,
                format!(
                    "RMA and atomics need {NARGS} AM arguments and a payload; the {} engine \
                     carries {} arguments",
                    engine.kind(),
                    limits.max_am_args
                ),
            ));
        }
        let params = RmaParams::new(&limits, tagged_rma);
        // Salt the id generations so ids differ between runs and processes.
        let salt = crate::engine::random::random_u64();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                init: Initiator::new(params, salt as u32),
                target: RmaTarget::new(limits.max_am_reply, (salt >> 32) as u32),
                ops: HashMap::new(),
                order: Vec::new(),
                mq: Vec::new(),
                posts: VecDeque::new(),
                deferred: VecDeque::new(),
                out: VecDeque::new(),
                events: Vec::new(),
                atomics: HashMap::new(),
                next_atomic: salt | 1,
                sending: None,
                stash: Vec::new(),
                scratch: Vec::new(),
                finished: Vec::new(),
                dead: HashSet::new(),
            }),
            mr,
            slots,
            id: OnceLock::new(),
            dirty: AtomicBool::new(false),
            done: Arc::new(CompletionTable::new()),
            mq_table: engine.completions().clone(),
            target_ep: Mutex::new(None),
            atomic_lock: Mutex::new(AtomicScratch::default()),
            max_atomic: limits.max_am_request.min(limits.max_am_reply),
            closing: AtomicBool::new(false),
        });
        let id = engine.am_register(Arc::new(Handler(shared.clone())))?;
        let _ = shared.id.set(id);
        Ok(Arc::new(RmaTransport {
            engine,
            shared,
            id,
            pump: Mutex::new(PumpBufs::default()),
            params,
        }))
    }

    /// Largest payload of one atomic (request or reply).
    pub(crate) fn max_atomic(&self) -> usize {
        self.shared.max_atomic
    }

    /// The table futures wait in.
    pub(crate) fn done(&self) -> &Arc<CompletionTable<Done>> {
        &self.shared.done
    }

    /// Ends every RMA and atomic this domain initiated with `Canceled`
    /// (the domain closed: no progress step will run for them again).
    /// Transfers the engine already finished are accounted first, so
    /// their buffers come back with the error.
    pub(crate) fn fail_all(&self, why: &str) {
        {
            let mut st = relock(&self.shared.state);
            st.poll_mq(self.engine.completions());
            let error = || Error::new(ErrorKind::Canceled, format!("RMA: {why}"));
            for id in st.order.clone() {
                st.init.fail(id, error());
                st.reap(id);
            }
            let atomics: Vec<PendingAtomic> = st.atomics.drain().map(|(_, p)| p).collect();
            for p in atomics {
                st.finished.push((p.key, (Err(error()), p.buffer)));
            }
        }
        self.shared.deliver();
    }

    /// The domain is closing: from now on requests from peers are dropped
    /// unanswered (they learn from the domain's bye).
    pub(crate) fn stop_serving(&self) {
        self.shared.closing.store(true, Ordering::Release);
    }

    /// Appends the peers this domain's RMA and atomics wait for.
    pub(crate) fn outstanding_peers(&self, out: &mut Vec<PeerAddr>) {
        let st = relock(&self.shared.state);
        out.extend(st.order.iter().filter_map(|&id| st.init.peer(id)));
        out.extend(st.atomics.values().map(|p| p.peer));
    }

    /// `peer`, declared dead, is there again ([`PeerBook::revive`](crate::proto::peer_watch::PeerBook::revive)).
    pub(crate) fn revive(&self, peer: PeerAddr) {
        relock(&self.shared.state).dead.remove(&peer);
    }

    /// Ends every RMA and atomic towards `peer` with `death`'s error (the
    /// domain's watch declared it dead): short operations at once; a long
    /// read once its receive is cancelled; a long write whose MQ send is
    /// out at once too, the engine keeping that buffer (an empty one comes
    /// back) until it is done with it. Long writes the peer started here
    /// have their receives cancelled, so their pinned windows come back.
    pub(crate) fn fail_peer(&self, peer: PeerAddr, death: &Death) {
        let table = self.engine.completions();
        let mut cancels = Vec::new();
        {
            let mut st = relock(&self.shared.state);
            st.dead.insert(peer);
            st.poll_mq(table);
            for id in st.order.clone() {
                if st.init.peer(id) != Some(peer) {
                    continue;
                }
                st.init.fail(id, death.error("RMA"));
                let sends: Vec<OpKey> = st
                    .mq
                    .iter()
                    .filter_map(|(k, w)| match w {
                        MqWork::Init { id: i, send: true } if *i == id => Some(*k),
                        _ => None,
                    })
                    .collect();
                for key in sends {
                    st.orphan(table, key, id, death.error("RMA write"));
                }
                st.reap(id);
            }
            let atomics: Vec<u64> = st
                .atomics
                .iter()
                .filter(|(_, p)| p.peer == peer)
                .map(|(id, _)| *id)
                .collect();
            for id in atomics {
                if let Some(p) = st.atomics.remove(&id) {
                    st.finished
                        .push((p.key, (Err(death.error("atomic")), p.buffer)));
                }
            }
            st.out.retain(|o| o.dest != peer);
            for tid in st.target.long_writes_from(peer) {
                cancels.extend(st.mq.iter().find_map(|(k, w)| match w {
                    MqWork::TargetRecv(t) if *t == tid => Some(*k),
                    _ => None,
                }));
            }
        }
        for key in cancels {
            let _ = self.engine.cancel(key);
        }
        // The pump cancels long reads' receives.
        self.shared.dirty.store(true, Ordering::Release);
        self.shared.deliver();
    }

    /// The endpoint that receives remote events (counters, CQ data).
    pub(crate) fn set_target_endpoint<E: RmaTargetEvents + 'static>(&self, ep: &Arc<E>) {
        let ep: Weak<E> = Arc::downgrade(ep);
        let ep: Weak<dyn RmaTargetEvents> = ep;
        *relock(&self.shared.target_ep) = Some(ep);
    }

    /// Starts an RMA operation; its future waits on the returned key.
    pub(crate) fn start_rma(
        &self,
        kind: RmaKind,
        peer: PeerAddr,
        buffer: OpBuffer,
        remote: &[RemoteIov],
        data: Option<u64>,
    ) -> std::result::Result<OpKey, (Error, OpBuffer)> {
        let mut st = self.shared.state();
        let id = match st.init.start(kind, peer, vec![buffer], remote, data) {
            Ok(id) => id,
            Err((e, mut bufs)) => {
                let b = if bufs.is_empty() {
                    OpBuffer::empty()
                } else {
                    bufs.swap_remove(0)
                };
                return Err((e, b));
            }
        };
        let key = self.shared.done.insert();
        st.ops.insert(id, key);
        st.order.push(id);
        drop(st);
        self.pump(POST_BUDGET);
        Ok(key)
    }

    /// Starts an atomic: `payload` (operand, compare) goes to `peer`;
    /// `fetch_len` old-value bytes come back into `buffer`.
    pub(crate) fn start_atomic(
        &self,
        peer: PeerAddr,
        req: AtomicRequest,
        payload: Vec<u8>,
        buffer: OpBuffer,
        fetch_len: usize,
    ) -> OpKey {
        let key = self.shared.done.insert();
        let mut st = self.shared.state();
        let id = st.next_atomic;
        st.next_atomic = st.next_atomic.wrapping_add(2);
        let req = AtomicRequest { id, ..req };
        st.atomics.insert(
            id,
            PendingAtomic {
                peer,
                key,
                buffer,
                fetch_len,
            },
        );
        st.out
            .push_back(Outgoing::new(peer, &req.encode(), payload, Some(id)));
        drop(st);
        self.pump(POST_BUDGET);
        key
    }

    /// Makes up to `budget` engine calls, then delivers completions and
    /// remote events. Whether anything moved.
    fn pump(&self, budget: usize) -> bool {
        let mut guard = match self.pump.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // The other pumper may miss what we just queued.
                self.shared.dirty.store(true, Ordering::Release);
                return false;
            }
        };
        let PumpBufs { payload, ids } = &mut *guard;
        let mut left = budget;
        let mut moved = self.poll_mq();
        moved |= self.retry_deferred();
        moved |= self.send_out(&mut left);
        moved |= self.post_target(&mut left);
        moved |= self.step_initiator(&mut left, payload, ids);
        drop(guard);
        if left == 0 {
            self.shared.dirty.store(true, Ordering::Release);
        }
        moved |= self.deliver_events();
        self.shared.deliver() | moved
    }

    /// Serves held-back requests whose range is free now.
    fn retry_deferred(&self) -> bool {
        let table = self.shared.table_if(TargetRole::Rma);
        let mut st = relock(&self.shared.state);
        if st.deferred.is_empty() {
            return false;
        }
        // Keep looking next round while some wait.
        self.shared.dirty.store(true, Ordering::Release);
        st.retry_deferred(table)
    }

    /// Feeds finished MQ transfers into the cores.
    fn poll_mq(&self) -> bool {
        let mut st = relock(&self.shared.state);
        if st.mq.is_empty() {
            return false;
        }
        // Keep looking next round while transfers are in flight.
        self.shared.dirty.store(true, Ordering::Release);
        st.poll_mq(self.engine.completions())
    }

    /// Sends queued AM requests (atomics, ends of long writes, replies the
    /// engine could not send from a handler).
    fn send_out(&self, left: &mut usize) -> bool {
        let mut moved = false;
        while *left > 0 {
            let Some(o) = relock(&self.shared.state).out.pop_front() else {
                break;
            };
            *left -= 1;
            let r = self
                .engine
                .am_request(o.dest, self.id, &o.args[..o.nargs], &o.payload);
            match r {
                Ok(()) => moved = true,
                Err(e) if e.kind() == ErrorKind::Again => {
                    relock(&self.shared.state).out.push_front(o);
                    self.shared.dirty.store(true, Ordering::Release);
                    *left = 0;
                }
                Err(e) => {
                    moved = true;
                    let mut st = relock(&self.shared.state);
                    if let Some(p) = o.atomic.and_then(|id| st.atomics.remove(&id)) {
                        let e = Error::with_source(
                            e.kind(),
                            format!("atomic: cannot send the request ({})", e.kind()),
                            e,
                        );
                        st.finished.push((p.key, (Err(e), p.buffer)));
                    } else {
                        tracing::debug!("RMA: cannot send a reply: {e}");
                    }
                }
            }
        }
        moved
    }

    /// Posts the MQ transfers of long operations at the target.
    fn post_target(&self, left: &mut usize) -> bool {
        let table = self.engine.completions();
        let mut moved = false;
        while *left > 0 {
            let Some(post) = relock(&self.shared.state).posts.pop_front() else {
                break;
            };
            *left -= 1;
            moved = true;
            let key = table.insert();
            match post {
                TargetPost::Recv { tid, tag, buffer } => {
                    relock(&self.shared.state)
                        .mq
                        .push((key, MqWork::TargetRecv(tid)));
                    if let Err(pe) = self.engine.irecv(TagMatch::exact(tag), buffer, key) {
                        drop(table.retire(key));
                        let mut st = relock(&self.shared.state);
                        st.mq.retain(|(k, _)| *k != key);
                        if let Some(done) = st.target.on_long_recv_done(tid, None, Err(pe.error)) {
                            st.out.push_back(Outgoing::new(
                                done.dest,
                                done.args.as_slice(),
                                Vec::new(),
                                None,
                            ));
                        }
                    }
                }
                TargetPost::Send {
                    dest,
                    tag,
                    buffer,
                    event,
                } => {
                    relock(&self.shared.state)
                        .mq
                        .push((key, MqWork::TargetSend(event)));
                    if let Err(pe) = self
                        .engine
                        .isend(dest, tag, SendMode::Standard, buffer, key)
                    {
                        drop(table.retire(key));
                        relock(&self.shared.state).mq.retain(|(k, _)| *k != key);
                        tracing::debug!("RMA: cannot send a long read: {}", pe.error);
                    }
                }
            }
        }
        moved
    }

    /// Walks the initiator's operations: what each wants next, done.
    fn step_initiator(&self, left: &mut usize, buf: &mut Vec<u8>, ids: &mut Vec<u64>) -> bool {
        let table = self.engine.completions();
        ids.clear();
        ids.extend_from_slice(&relock(&self.shared.state).order);
        let mut moved = false;
        'ops: for &id in ids.iter() {
            while *left > 0 {
                let mut st = relock(&self.shared.state);
                let Some(peer) = st.init.peer(id) else {
                    continue 'ops;
                };
                let mut words = [0u64; NARGS];
                let step = match st.init.peek(id) {
                    None => {
                        st.reap(id);
                        continue 'ops;
                    }
                    Some(Step::Request { args, payload }) => {
                        let a = args.as_slice();
                        words[..a.len()].copy_from_slice(a);
                        buf.clear();
                        buf.extend_from_slice(payload);
                        Next::Request(a.len())
                    }
                    Some(Step::PostSend { tag }) => Next::Post { tag, send: true },
                    Some(Step::PostRecv { tag }) => Next::Post { tag, send: false },
                    Some(Step::CancelRecv) => Next::Cancel,
                };
                *left -= 1;
                moved = true;
                match step {
                    Next::Request(n) => {
                        st.sending = Some(id);
                        drop(st);
                        let r = self.engine.am_request(peer, self.id, &words[..n], buf);
                        let mut st = relock(&self.shared.state);
                        st.sending = None;
                        match r {
                            Ok(()) => {
                                st.init.commit(id);
                            }
                            Err(e) if e.kind() == ErrorKind::Again => {
                                self.shared.dirty.store(true, Ordering::Release);
                                *left = 0;
                            }
                            Err(e) => st.init.fail(id, e),
                        }
                        for (src, reply, payload) in std::mem::take(&mut st.stash) {
                            st.init.on_reply(src, &reply, &payload);
                        }
                        st.reap(id);
                    }
                    Next::Post { tag, send } => {
                        let Some(buffer) = st.init.commit(id) else {
                            continue 'ops;
                        };
                        let key = table.insert();
                        st.mq.push((key, MqWork::Init { id, send }));
                        drop(st);
                        let posted = if send {
                            self.engine
                                .isend(peer, tag, SendMode::Standard, buffer, key)
                        } else {
                            self.engine.irecv(TagMatch::exact(tag), buffer, key)
                        };
                        if let Err(pe) = posted {
                            drop(table.retire(key));
                            let mut st = relock(&self.shared.state);
                            st.mq.retain(|(k, _)| *k != key);
                            let _ = st.init.on_mq_done(id, Err(pe.error), pe.buffer);
                            st.reap(id);
                        }
                    }
                    Next::Cancel => {
                        st.init.commit(id);
                        let key = st.mq.iter().find_map(|(k, w)| match w {
                            MqWork::Init { id: i, .. } if *i == id => Some(*k),
                            _ => None,
                        });
                        let dead = st.dead.contains(&peer);
                        drop(st);
                        if let Some(key) = key {
                            let cancelled = matches!(self.engine.cancel(key), Ok(true));
                            if !cancelled && dead {
                                // Matched already: a dead peer never
                                // sends the rest.
                                let mut st = relock(&self.shared.state);
                                let e = Error::new(
                                    ErrorKind::Io,
                                    "RMA read: the peer died during the transfer",
                                );
                                st.orphan(table, key, id, e);
                                st.reap(id);
                            }
                        }
                    }
                }
            }
            break;
        }
        moved
    }

    /// Remote events to the target endpoint's counters and CQ.
    fn deliver_events(&self) -> bool {
        let events = std::mem::take(&mut relock(&self.shared.state).events);
        if events.is_empty() {
            return false;
        }
        let Some(ep) = relock(&self.shared.target_ep)
            .as_ref()
            .and_then(Weak::upgrade)
        else {
            return true;
        };
        for e in events {
            if let Some(t) = self.shared.table_if(TargetRole::Rma) {
                t.accessed(
                    e.key,
                    match e.kind {
                        RmaKind::Write => crate::proto::mr::MrAccess::REMOTE_WRITE,
                        RmaKind::Read => crate::proto::mr::MrAccess::REMOTE_READ,
                    },
                );
            }
            ep.remote_access(e.kind);
            if let (Some(data), RmaKind::Write) = (e.data, e.kind) {
                ep.remote_write_data(e.source, data, e.len as usize);
            }
        }
        true
    }
}

impl ProgressSource for RmaTransport {
    /// Posts and sends what the cores and handlers queued, within a
    /// budget; completes futures. Never blocks.
    fn progress(&self) -> Progress {
        if !self.shared.dirty.swap(false, Ordering::AcqRel) {
            return Progress::Idle;
        }
        let moved = self.pump(PROGRESS_BUDGET);
        if moved {
            self.shared.dirty.store(true, Ordering::Release);
        }
        moved.into()
    }

    /// Only once an operation, a request or a reply was queued.
    fn wants_progress(&self) -> bool {
        self.shared.dirty.load(Ordering::Relaxed)
    }
}
