//! The mrail endpoint's protocol engine: the [`Driver`], a progress source
//! of the domain's reactor that turns rail completions into mrail
//! completions.
//!
//! # Wire protocol
//!
//! Every message of an mrail endpoint travels on its rails as tagged psm
//! messages; the rails' tag space belongs to the provider (the user's tag
//! travels in the mrail header, so the user has all 64 tag bits):
//!
//! * **Control frames** carry [`CTRL_TAG`]: a small header
//!   ([`header`]) and, for an eager message, the
//!   payload behind it. A rail whose engine offers a
//!   [`TagHook`] (the soft engine) hands them over as they arrive; each
//!   rail also keeps a pool of receives posted for them (32, or 4 where
//!   the hook takes the eager ones), for engines without hooks (native
//!   PSM) and for frames that come by the rail's rendezvous.
//! * **Eager messages** — at most [`EAGER_MAX`] bytes, on the one rail the
//!   size policy picks (fixed or round-robin) — are one control frame.
//!   Up to the rails' inject size they leave with an inject, otherwise as
//!   one rail send.
//! * **Large messages** and every message the policy stripes start with
//!   an RTS frame (sequence number, tag, length, the rails to stripe over)
//!   on one rail. The receiver matches it like any message; once matched it
//!   posts one rail receive per part, straight into that part's window of
//!   the user's buffer ([`SharedBuffer`]), each with the data tag of its
//!   receive id and part number, and answers CTS (receive id, bytes
//!   accepted). The sender then sends each part on its rail with that data
//!   tag, each rail's parts a few at a time ([`PartQueue`]); a rail with
//!   nothing left takes a busier rail's last waiting part and says so
//!   ([`Frame::Moved`]), and the receiver moves that part's receive to it.
//!   Parts are tagged rail messages, so the rail's own eager or
//!   rendezvous protocol carries them, and nothing of a large message is
//!   sent before its receive is there: no part is ever buffered whole, and
//!   nothing is copied. Both sides join their parts with the mrail
//!   combinator ([`StripeJoin`](super::stripe_join::StripeJoin)).
//!
//! # Ordering
//!
//! Every eager frame and RTS carries a sequence number per (endpoint,
//! peer). The receiver delivers them to matching in sequence order,
//! whatever rail they came on ([`Reorder`]), so receives match messages in
//! the order they were sent — tagged and untagged, with `FI_DIRECTED_RECV`
//! source matching — as on one rail. Reordering state is bounded per peer
//! ([`REORDER_WINDOW`] frames, [`REORDER_BYTES`] bytes); a frame beyond it,
//! a duplicate, a malformed frame or a frame from a peer that is not in the
//! address vector is counted ([`DriverStats`]) and logged, never a crash.
//!
//! # Failover
//!
//! A rail is lost when its link goes down (its interface stops running:
//! [`LinkWatch`], looked at every 50 ms), when the application disables
//! it, or — for one peer — when the rail's peer book declares that peer
//! dead there (its rail endpoint closed, or it stopped answering for
//! `FI_PSM_TIMEOUT`). Lost rails leave [`RailHealth`]'s mask (for every
//! peer) or join the peer's `dead` mask; the peers hear of our own losses
//! by a [`RailNotice`](Frame::RailNotice), so both sides avoid the rail.
//! Then what was in flight on it goes again on the rails left:
//!
//! * every Eager and RTS frame stays in the peer's resend log
//!   ([`ResendLog`], one position per sequence number) until the peer
//!   acknowledges it ([`Frame::Ack`], after [`ACK_EVERY`] frames or
//!   [`ACK_DELAY`]); the unacknowledged frames that went on the lost rail
//!   are sent again on another, and the receiver's reorder buffer drops
//!   the copies it already had, so each message is matched once;
//! * the receiver of a striped message asks for each part still open on
//!   the lost rail again on another rail ([`Frame::Reroute`], after the
//!   CTS again if that went on the lost rail). The new attempt lands in a
//!   buffer of its own, because the old one may still write the user's
//!   window if the link comes back; the join ([`StripeJoin`]) takes
//!   whichever attempt finishes first. The message is handed back in the
//!   user's buffer when no rail holds it any more, or else as a copy
//!   assembled from the parts that landed (sends too: a copy of the bytes
//!   when a lost rail still reads the buffer);
//! * RMA stripes that fail because their rail lost the peer start again
//!   on another rail (`rma`);
//! * a sequenced frame not acknowledged [`RESEND_AFTER`] after it went
//!   goes again, on another rail if one serves: a rail's connection may
//!   have been given up with what it held, and made anew, without any
//!   post failing.
//!
//! A post that fails because its rail lost the peer (the rail's
//! connection to it ended) takes the rail out for that peer and goes on
//! another. A rail whose link comes back rejoins after a back-off
//! ([`RailHealth`]); the rail events go to the domain's queue. With no
//! rail left for a peer its transfers fail with `FI_EIO` naming the rails.
//! A peer lost on a rail for good (its endpoint closed or its process is
//! gone, as the rail's peer book says) is not tried there again; a rail
//! that lost a peer otherwise connects to it again ("Reconnecting" below).
//! An attempt given up on a rail that comes back later
//! completes against nothing: a send waits in its engine until the
//! endpoint closes, a receive is cancelled.
//!
//! # Every rail lost
//!
//! With no rail left to a peer (every link down, every rail disabled, or
//! the peer lost on each), its transfers fail with `FI_EIO` at once, and
//! both sides keep what they need to go on, with the same addresses, once
//! a rail serves again:
//!
//! * the sender withdraws the requests to send it gave up
//!   ([`Frame::Withdraw`]): a receiver that holds one drops it (and fails
//!   a receive that matched it meanwhile), one that never got it fills its
//!   sequence number with the withdrawal, so no receive takes a message
//!   nobody sends;
//! * the receiver drops the requests that waited unmatched, and refuses
//!   them ([`Frame::Nack`]) with those whose receives failed, so that a
//!   sender that kept a rail does not wait for them;
//! * every frame not acknowledged yet goes again (a rail's connection may
//!   have been given up with what it held); the receiver drops the copies
//!   it has;
//! * each side holds the peer's sequenced frames, neither delivered nor
//!   acknowledged, until the peer's [`Frame::Resync`] says it has sent
//!   again everything before it (on the rail the Resync comes on, before
//!   it). The Resync asks for the other side's in turn; it is asked for
//!   again every [`RESYNC_AGAIN`] while a rail serves and none came. So a
//!   request sent before the loss, which its sender may have given up,
//!   cannot match a receive before its withdrawal is in.
//!
//! Rail notices are numbered, so one that waited on a stalled connection
//! cannot undo a later one, and a rail that comes back is announced on
//! itself too (the peer may know no other rail of ours to be up).
//!
//! # Reconnecting
//!
//! A rail that did not connect to a peer when the peer was inserted (its
//! link was down, or its connect failed while another rail's worked:
//! [`MrailAv`](super::MrailAv) inserts the peer with the rails that did),
//! and a rail that lost a peer otherwise than for good (its connection
//! there ended, as a failed post or the rail's peer book says), is
//! connected to the peer again while the rail is in service: at once when
//! the rail comes up, else after a back-off from [`RECONNECT_MIN`]
//! doubling to [`RECONNECT_MAX`]. A connect waits for its handshakes, so
//! each rail's run on a thread of their own, whose results the next
//! housekeeping takes in. A rail that connects serves the peer again: its
//! peer book forgets the peer's death, the peer hears the rail is up, and
//! what waited for a rail to it goes (a resync first if none was left).
//!
//! [`StripeJoin`]: super::stripe_join::StripeJoin
//!
//! # Progress
//!
//! The driver is a small executor: each pending rail operation it owns (a
//! pool receive, a transfer's join, an eager send) is polled with a waker
//! that queues its id, so a rail completion — reported inside the rail
//! engine's progress — costs one push, and the driver's progress step
//! (the reactor's last source) polls only what completed. Every
//! [`HOUSEKEEPING_EVERY`] steps it also looks at the clock: owed
//! acknowledgements, the links, back-offs that ended. A step with nothing
//! queued and no housekeeping due takes no lock.
//!
//! Control frames a rail's hook hands over arrive inside that rail's
//! progress, with the rail's engine locked, where no rail operation may
//! be started. The common case of a small message — an eager frame, next
//! in its peer's sequence, with its receive posted — is delivered there
//! and then, if the driver's state is free (`try_lock`: a thread posting
//! holds it while it calls into a rail, so waiting could deadlock); an
//! acknowledgement it makes due waits for a quiet moment. Every other
//! frame, and every frame while earlier ones wait, goes to an inbox that
//! the next step empties in arrival order. A small message thus reaches
//! its future in the same engine step that read it, as on a plain psm
//! endpoint.
//!
//! What waits for a quiet moment — pool receives to post again, owed
//! acknowledgements — is done at the start of a future's next spin (its
//! own message is not there yet, so nothing waits for it), or in a step
//! with nothing else to do, or once [`REPOST_BATCH`] receives wait: so a
//! small message's turnaround — its frame in, the answer out — does not
//! pay for it; a frame that arrives meanwhile waits in the rail's
//! unexpected queue.

use super::av::{MrailAvCore, PeerEntry};
use super::core::header::{
    self, data_tag, Frame, MsgClass, NackReason, CTRL_TAG, EAGER_HEADER_LEN,
};
use super::core::matcher::{ArrivalSpec, Matcher, RecvSpec};
use super::core::rail_choice::{RailChoice, RailChooser};
use super::core::rail_health::{RailEvent, RailHealth, RailState};
use super::core::rail_load::RailLoad;
use super::core::rail_queue::{PartQueue, QueuedPart, QUEUE_FROM};
use super::core::rail_rates::RailRates;
use super::core::send_wait::{says_gone, SendWait};
use super::core::sequence::{Reorder, ReorderError, TxSequence};
use super::core::stripe::StripePlan;
use super::link_watch::LinkWatch;
use super::rail_events::RailEventQueue;
use super::region::SharedBuffer;
use super::stripe_join::{rail_lost, Joined, PartOutput, RailPart, Striped};
use crate::engine::{Epid, MqCompletion, OpBuffer, PeerAddr, SendMode, TagHook, TagMatch};
use crate::fabric::{
    CompletionFlags, CompletionQueue, Counter, CqEntry, CqErrEntry, DomainCore, EndpointCore,
    FiAddr, OpCounters,
};
use crate::proto::gen_slab::GenSlab;
use crate::proto::peer_watch::{Death, Doomed, PeerRef};
use crate::reactor::{CompletionTable, OpKey, Progress, ProgressSource};
use crate::resend::ResendLog;
use crate::{Error, ErrorKind, Result, Truncation};
use rustc_hash::FxHashMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Largest eager message payload: larger ones go by RTS/CTS. Part of the
/// protocol (a peer's pool buffers are this size plus the header).
pub(crate) const EAGER_MAX: usize = 16 << 10;

/// The futures' fast path visits rails that carried no message lately on
/// every this-many-th poll.
const COLD_RAIL_EVERY: usize = 4;

/// ... and forgets which rails carried messages (all but the last one's)
/// every this-many polls.
const WARM_SPAN: usize = 1024;

/// Receives each rail keeps posted for control frames.
const POOL_SLOTS: usize = 32;

/// ... on a rail whose engine hands them over as they arrive
/// ([`TagHook`]): only frames that come by the rail's rendezvous (a small
/// eager threshold, no eager credit) need them.
const HOOKED_POOL_SLOTS: usize = 4;

/// Handled pool receives that are posted again at once, not only in a
/// step with nothing else to do.
const REPOST_BATCH: usize = 8;

/// Most frames a peer may have held out of order.
pub(crate) const REORDER_WINDOW: u32 = 1 << 16;

/// Most peers outside the address vector whose sequence state is kept.
const MAX_UNKNOWN_PEERS: usize = 1024;

/// Most eager payload bytes a peer may have held out of order.
pub(crate) const REORDER_BYTES: usize = 64 << 20;

/// A receiver acknowledges a peer's sequenced frames after this many.
const ACK_EVERY: u32 = 32;

/// ... or at most this long after the last one it has not acknowledged.
const ACK_DELAY: Duration = Duration::from_millis(1);

/// The driver looks at the time (acknowledgements due, links, back-offs)
/// every this-many progress steps.
const HOUSEKEEPING_EVERY: usize = 16;

/// Spare frame buffers kept for the resend logs.
const FRAME_POOL: usize = 256;

/// Generation bits of transfer ids: ids stay below 2^45, which the data
/// tags carry.
const ID_GEN_BITS: u32 = 13;

/// The rails' inject size (the psm endpoints' `inject_size`).
const RAIL_INJECT: usize = crate::fabric::INJECT_SIZE;

/// What an mrail operation delivers to its future.
#[derive(Debug)]
pub(crate) struct MrailCompletion {
    pub(crate) result: Result<Done>,
    pub(crate) buffer: OpBuffer,
}

/// A successful operation: bytes, and for receives the tag and source.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Done {
    pub(crate) len: usize,
    pub(crate) tag: u64,
    pub(crate) source: FiAddr,
}

/// Where an operation's completion goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sink {
    /// Its future, through the driver's completion table.
    Future(OpKey),
    /// The endpoint's CQ, with the user's context; `id` names the
    /// operation for `cancel`.
    Cq { context: u64, id: u64 },
}

impl Sink {
    /// The completion-table key of a future's sink.
    pub(crate) fn key(&self) -> Option<OpKey> {
        match self {
            Sink::Future(key) => Some(*key),
            Sink::Cq { .. } => None,
        }
    }
}

/// Counters of what the driver refused or could not place.
#[derive(Debug, Default)]
pub(crate) struct DriverStats {
    /// What the endpoint's operations did (`EndpointStats`).
    pub(crate) ops: OpCounters,
    /// Peers lost on every rail.
    pub(crate) dead_peers: AtomicU64,
    pub(crate) unknown_peer: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) beyond_window: AtomicU64,
    pub(crate) stale: AtomicU64,
    pub(crate) rails: Vec<RailStats>,
}

/// Per-rail traffic counters.
#[derive(Debug, Default)]
pub(crate) struct RailStats {
    pub(crate) msgs_sent: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) msgs_received: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) stripes: AtomicU64,
    /// Frames sent again and parts asked for again on another rail
    /// because this rail was lost.
    pub(crate) retransmits: AtomicU64,
    /// Times the rail was lost for a peer (its link, or the peer on it).
    pub(crate) errors: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A posted mrail receive waiting in the matcher.
#[derive(Debug)]
struct PostedRecv {
    sink: Sink,
    buf: OpBuffer,
}

/// A message delivered in sequence order, waiting for (or given to) a
/// receive.
#[derive(Debug)]
enum Arrival {
    /// A whole eager message's payload.
    Eager(Vec<u8>),
    /// A large message announced by its RTS.
    Rts {
        send_id: u64,
        len: u64,
        rails: u64,
        /// The sender's stripe weights (0: none).
        weights: u64,
        /// The rail the RTS came on (the CTS goes back on it).
        via: usize,
    },
}

impl Arrival {
    fn held_bytes(&self) -> usize {
        match self {
            Arrival::Eager(v) => v.len(),
            Arrival::Rts { .. } => 0,
        }
    }

    /// The message's length.
    fn len(&self) -> u64 {
        match self {
            Arrival::Eager(v) => v.len() as u64,
            Arrival::Rts { len, .. } => *len,
        }
    }
}

/// A message a claim took off the unexpected queue (`FI_PEEK |
/// FI_CLAIM`), held for one later receive ([`Driver::recv_claimed`]). A
/// large one is still at its sender: the receive pulls it as a matched
/// receive would.
#[derive(Debug)]
pub(crate) struct ClaimedArrival {
    spec: ArrivalSpec,
    arrival: Arrival,
}

impl ClaimedArrival {
    /// Its class, tag and sender.
    pub(crate) fn spec(&self) -> ArrivalSpec {
        self.spec
    }

    /// Its length.
    pub(crate) fn len(&self) -> u64 {
        self.arrival.len()
    }

    /// Whether its payload is still at the sender (sent by rendezvous).
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.arrival, Arrival::Rts { .. })
    }
}

/// A peer's sequence state.
struct PeerState {
    tx: TxSequence,
    /// `None` for a frame of a peer that is not in the address vector: it
    /// keeps the sender's sequence in step (the sender counted it as
    /// sent) and is discarded when its turn comes.
    rx: Reorder<Option<(ArrivalSpec, Arrival)>>,
    held_bytes: usize,
    /// The sequenced frames (eager messages and requests to send) sent to
    /// the peer and not acknowledged yet, at positions equal to their
    /// sequence numbers (modulo 2^32): sent again on another rail when
    /// theirs is lost.
    log: ResendLog<Logged>,
    /// Frames of the peer delivered since our last acknowledgement.
    rx_unacked: u32,
    /// Whether the peer is in [`State::ack_pending`].
    ack_queued: bool,
    /// Rails on which the peer is gone for good (its rail endpoint closed
    /// or stopped answering): the rails' peer books say so.
    dead: u64,
    /// Rails the peer told us are out of service ([`Frame::RailNotice`]).
    peer_down: u64,
    /// The number of the last notice taken from the peer, per rail (0:
    /// none yet).
    notices: Vec<u32>,
    /// The peer's address vector entry, once it is known.
    entry: Option<Arc<PeerEntry>>,
    /// Every rail to the peer was lost (its transfers failed): its
    /// sequenced frames are held, not delivered, until its
    /// [`Resync`](Frame::Resync) says it sent again what we had not
    /// acknowledged (module docs, "Every rail lost").
    hold: bool,
    /// When we last asked for the peer's Resync (while holding).
    asked: Option<Instant>,
    /// The peer asked for our Resync and has not had it yet.
    answer_owed: bool,
    /// The requests to send of the peer's messages whose receives failed
    /// when every rail was lost: refused ([`Frame::Nack`]) with the
    /// Resync, so that a sender that kept its rails does not wait for
    /// them.
    owed_nacks: Vec<u64>,
    /// Our requests to send (sequence number, send id) whose sends failed
    /// when every rail was lost: withdrawn ([`Frame::Withdraw`]) with the
    /// Resync, acknowledged or not (the peer may hold them unmatched).
    withdraws: Vec<(u32, u64)>,
    /// Since when no rail serves the peer while one is coming (a rail of
    /// ours rejoining, or connecting to it again): its transfers wait, up
    /// to `FI_PSM_TIMEOUT`, instead of failing.
    stranded: Option<Instant>,
    /// Rails whose peer book declared the peer dead (it waited
    /// `FI_PSM_TIMEOUT` already, or has proof): a reconnect there is no
    /// reason to wait longer.
    judged: u64,
}

/// A sequenced frame kept for resending: its bytes and the rail it last
/// went on ([`NO_RAIL`]: none that still serves, so it goes again on the
/// next rail that does).
struct Logged {
    rail: std::cell::Cell<usize>,
    /// When it last went.
    sent: std::cell::Cell<Instant>,
    frame: Vec<u8>,
    /// A request to send's send id.
    send_id: Option<u64>,
    /// Its send failed: a [`Frame::Withdraw`] goes in its place.
    withdrawn: std::cell::Cell<bool>,
}

/// [`Logged::rail`] of a frame whose rail was lost with every other.
const NO_RAIL: usize = usize::MAX;

/// How often a peer whose Resync we wait for is asked again.
const RESYNC_AGAIN: Duration = Duration::from_millis(500);

/// A rail event asks again sooner, but not within this of the last ask.
const RESYNC_SOON: Duration = Duration::from_millis(50);

/// A sequenced frame not acknowledged this long after it went goes again
/// (on another rail if one serves): a rail's connection may have been
/// given up with it, and come back, without a post failing.
const RESEND_AFTER: Duration = Duration::from_secs(1);

/// How often the resend logs are looked at for such frames.
const RESEND_CHECK: Duration = Duration::from_millis(100);

impl PeerState {
    fn new() -> Self {
        PeerState {
            tx: TxSequence::new(),
            rx: Reorder::new(REORDER_WINDOW),
            held_bytes: 0,
            log: ResendLog::new(),
            rx_unacked: 0,
            ack_queued: false,
            dead: 0,
            peer_down: 0,
            notices: Vec::new(),
            entry: None,
            hold: false,
            asked: None,
            answer_owed: false,
            owed_nacks: Vec::new(),
            withdraws: Vec::new(),
            stranded: None,
            judged: 0,
        }
    }

    /// The rails usable towards the peer among `live` (connected to it,
    /// not lost for it, not out of service at its end).
    fn rails(&self, live: u64) -> u64 {
        let connected = self.entry.as_ref().map_or(u64::MAX, |e| e.connected());
        live & connected & !(self.dead | self.peer_down)
    }

    /// Whether notice `number` about `rail` is newer than the last one
    /// taken (then it is recorded as taken). Number 0 is always taken.
    fn take_notice(&mut self, rail: usize, number: u32) -> bool {
        if number == 0 {
            return true;
        }
        if self.notices.len() <= rail {
            self.notices.resize(rail + 1, 0);
        }
        let last = self.notices[rail];
        let ahead = number.wrapping_sub(last);
        if last != 0 && (ahead == 0 || ahead >= 1 << 31) {
            return false;
        }
        self.notices[rail] = number;
        true
    }
}

/// A send that found no rail to its peer while one was coming (a rail of
/// ours rejoining, or connecting to the peer again): it waits, behind the
/// peer's earlier ones, for `FI_PSM_TIMEOUT` at most; for a peer no rail
/// has reached yet, as long as its first connects are under way, up to
/// the address vector's connect timeout.
struct WaitingSend {
    entry: Arc<PeerEntry>,
    class: MsgClass,
    tag: u64,
    buf: OpBuffer,
    sink: Sink,
    /// How long it may wait.
    wait: SendWait,
}

/// A large send: waiting for its CTS, then its parts.
struct SendXfer {
    /// Tells the send when its peer dies on a rail.
    watch: Vec<Arc<PeerDeath>>,
    entry: Arc<PeerEntry>,
    /// The request's sequence number.
    seq: u32,
    class: MsgClass,
    len: u64,
    rails: u64,
    /// The transfer's tracing span and its stripes' (module docs).
    spans: Spans,
    shared: Arc<SharedBuffer>,
    sink: Sink,
    striped: Option<Striped>,
    /// Once the CTS came: the receiver's id and the plan of the parts.
    accepted: Option<(u64, StripePlan)>,
    /// The parts waiting in their rails' queues (a bit per part), not
    /// posted yet ([`Driver::pump`]).
    queued: u64,
    waker: Waker,
}

/// A large receive whose parts are landing.
struct RecvXfer {
    /// Tells the receive when its sender dies on a rail.
    watch: Vec<Arc<PeerDeath>>,
    entry: Arc<PeerEntry>,
    send_id: u64,
    /// The rail the RTS came on (and the CTS went back on).
    via: usize,
    /// The CTS (sent again when its rail is lost).
    cts: Frame,
    plan: StripePlan,
    /// Parts asked for again on another rail: (part, attempt, the
    /// separate buffer that attempt lands in).
    rerouted: Vec<(usize, usize, Arc<SharedBuffer>)>,
    spans: Spans,
    class: MsgClass,
    tag: u64,
    source: u32,
    msg_len: u64,
    accepted: u64,
    shared: Arc<SharedBuffer>,
    sink: Sink,
    striped: Option<Striped>,
    waker: Waker,
}

/// A transfer's line from the rails' peer books: when the peer dies on one
/// of the transfer's rails (its connection ended, or it stopped answering
/// keepalives for `FI_PSM_TIMEOUT`), the transfer is queued with the error
/// and its next poll ends it (a sender no longer waits for an answer, a
/// receiver no longer waits for parts).
struct PeerDeath {
    task: u64,
    rail: usize,
    queue: Arc<ReadyQueue>,
    death: OnceLock<Arc<Death>>,
}

impl Doomed for PeerDeath {
    fn peer_died(&self, death: &Arc<Death>) -> bool {
        let _ = self.death.set(death.clone());
        self.queue.push(self.task);
        true
    }
}

impl PeerDeath {
    /// The rails (a mask) on which the peer died, as far as `in_force`
    /// says a rail's book still holds the death (a rail that reconnected
    /// revived the peer).
    fn deaths(watch: &[Arc<PeerDeath>], in_force: impl Fn(usize, &Arc<Death>) -> bool) -> u64 {
        watch
            .iter()
            .filter(|w| w.death.get().is_some_and(|d| in_force(w.rail, d)))
            .fold(0, |m, w| m | rail_bit(w.rail))
    }
}

/// A striped transfer's `tracing` spans: one for the operation
/// (`mrail.striped`, debug level) and a child per stripe (`mrail.stripe`,
/// trace level), closed when the transfer ends. With no subscriber
/// interested they are disabled and cost a level check each.
#[derive(Default)]
struct Spans {
    op: Option<tracing::Span>,
    stripes: Vec<tracing::Span>,
    started: Option<Instant>,
}

impl Spans {
    fn new(dir: &'static str, plan: &StripePlan) -> Spans {
        let op = tracing::debug_span!("mrail.striped", dir, len = plan.total(), parts = plan.len());
        let stripes = plan
            .iter()
            .map(|s| {
                tracing::trace_span!(
                    parent: &op,
                    "mrail.stripe",
                    rail = s.rail,
                    part = s.part,
                    offset = s.offset,
                    len = s.len
                )
            })
            .collect();
        let started = (!op.is_disabled()).then(Instant::now);
        Spans {
            op: Some(op),
            stripes,
            started,
        }
    }

    /// Records how the transfer ended, in its span, and when each part
    /// finished (on which rail, after how long) in the part's span.
    fn end(&self, joined: &super::stripe_join::Joined) {
        let Some(op) = &self.op else {
            return;
        };
        op.in_scope(|| match &joined.error {
            None => tracing::debug!(bytes = joined.bytes, "striped transfer done"),
            Some(e) => tracing::debug!(error = %e, "striped transfer failed"),
        });
        let Some(started) = self.started else {
            return;
        };
        for p in &joined.parts {
            if let Some(span) = self.stripes.get(p.part) {
                span.in_scope(|| {
                    tracing::trace!(
                        rail = p.rail,
                        attempt = p.attempt,
                        bytes = p.bytes,
                        after_us = p.at.saturating_duration_since(started).as_micros() as u64,
                        "part done"
                    )
                });
            }
        }
    }
}

/// Polls a transfer's parts (if they are posted yet) with its waker.
fn poll_parts(striped: &mut Option<Striped>, waker: &Waker) -> Option<super::stripe_join::Joined> {
    match striped.as_mut()?.poll(&mut Context::from_waker(waker)) {
        Poll::Ready(joined) => Some(joined),
        Poll::Pending => None,
    }
}

impl SendXfer {
    fn poll(&mut self) -> Option<super::stripe_join::Joined> {
        poll_parts(&mut self.striped, &self.waker)
    }
}

impl RecvXfer {
    fn poll(&mut self) -> Option<super::stripe_join::Joined> {
        poll_parts(&mut self.striped, &self.waker)
    }
}

/// An eager message sent as a rail send (above the inject size).
struct EagerSend {
    /// The peer's identity token.
    token: u64,
    /// Its sequence number.
    seq: u32,
    class: MsgClass,
    len: usize,
    buf: OpBuffer,
    sink: Sink,
    part: Option<RailPart>,
    waker: Waker,
}

/// One pool receive for control frames.
struct PoolSlot {
    key: Option<OpKey>,
    waker: Waker,
    /// The buffer of a completed receive that waits to be posted again
    /// (see [`State::reposts`]).
    spare: Option<OpBuffer>,
}

/// Task ids in the ready queue: a kind in the top two bits.
const KIND_SHIFT: u32 = 62;
const POOL: u64 = 0;
const SEND: u64 = 1;
const RECV: u64 = 2;
const EAGER: u64 = 3;

fn task(kind: u64, id: u64) -> u64 {
    (kind << KIND_SHIFT) | id
}

fn pool_task(rail: usize, slot: usize) -> u64 {
    task(POOL, ((rail as u64) << 16) | slot as u64)
}

/// Ids of tasks whose operations moved.
#[derive(Default)]
struct ReadyQueue {
    ids: Mutex<Vec<u64>>,
    any: AtomicBool,
}

impl ReadyQueue {
    fn push(&self, id: u64) {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(id);
        self.any.store(true, Ordering::Release);
    }

    fn drain_into(&self, out: &mut Vec<u64>) {
        if !self.any.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        out.append(&mut ids);
    }
}

/// A task's waker: queues its id.
struct TaskWake {
    id: u64,
    queue: Arc<ReadyQueue>,
}

impl Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        self.queue.push(self.id);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.queue.push(self.id);
    }
}

/// A control frame a rail's [`TagHook`] handed over that the hook could
/// not handle on the spot (module docs, "Progress").
struct Inbound {
    rail: usize,
    source: PeerAddr,
    bytes: Vec<u8>,
}

/// Frames the rails' hooks queued for the next progress step.
#[derive(Default)]
struct Inbox {
    frames: Mutex<Vec<Inbound>>,
    /// Spare buffers of frames already handled.
    spare: Mutex<Vec<Vec<u8>>>,
    any: AtomicBool,
}

/// Most spare buffers the inbox keeps, and the largest it keeps (an
/// eager payload's buffer goes back to the allocator).
const INBOX_SPARE: usize = 32;
const INBOX_SPARE_BYTES: usize = 256;

impl Inbox {
    fn push(&self, rail: usize, source: PeerAddr, payload: &[u8]) {
        let mut bytes = relock(&self.spare).pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(payload);
        relock(&self.frames).push(Inbound {
            rail,
            source,
            bytes,
        });
        self.any.store(true, Ordering::Release);
    }

    fn drain_into(&self, out: &mut Vec<Inbound>) {
        if !self.any.swap(false, Ordering::AcqRel) {
            return;
        }
        out.append(&mut relock(&self.frames));
    }

    fn recycle(&self, frames: &mut Vec<Inbound>) {
        let mut spare = relock(&self.spare);
        for f in frames.drain(..) {
            if spare.len() < INBOX_SPARE && f.bytes.capacity() <= INBOX_SPARE_BYTES {
                spare.push(f.bytes);
            }
        }
    }
}

/// A rail's tag hook: control frames straight from the rail's engine.
struct RailHook {
    driver: Weak<Driver>,
    rail: usize,
}

impl TagHook for RailHook {
    fn on_message(&self, source: PeerAddr, payload: &[u8]) {
        if let Some(d) = self.driver.upgrade() {
            d.on_hooked(self.rail, source, payload);
        }
    }
}

/// Everything the driver changes, under one lock.
struct State {
    chooser: RailChooser,
    rates: RailRates,
    live: u64,
    /// Sequence state by the peer's identity token, so that it survives
    /// the peer's removal from the address vector and a new insert.
    peers: FxHashMap<u64, PeerState>,
    /// How many of `peers` belong to tokens not in the address vector.
    unknown_peers: usize,
    matcher: Matcher<PostedRecv, Arrival>,
    sends: GenSlab<SendXfer>,
    recvs: GenSlab<RecvXfer>,
    eagers: GenSlab<EagerSend>,
    pool: Vec<Vec<PoolSlot>>,
    /// Pool slots (rail, slot) whose frame was handled and whose receive
    /// is not posted again yet: that waits for a step with nothing else
    /// to do, so a frame's turnaround (its receive completed, the answer
    /// sent) does not pay for it, or until [`REPOST_BATCH`] are waiting.
    reposts: Vec<(usize, usize)>,
    scratch: Vec<u64>,
    /// The striped sends' parts waiting for their rails.
    queue: PartQueue,
    /// Whether [`Driver::pump`] runs (it does not run inside itself).
    pumping: bool,
    next_cq_id: u64,
    closed: bool,
    /// Which rails are in service, and why not.
    health: RailHealth,
    links: LinkWatch,
    /// Spare buffers for the resend logs.
    frame_pool: Vec<Vec<u8>>,
    /// Peers owed an acknowledgement (by token).
    ack_pending: Vec<u64>,
    /// When the owed acknowledgements go out at the latest.
    ack_due: Option<Instant>,
    /// Whether some of them are owed now (after [`ACK_EVERY`] frames that
    /// were delivered where no frame may be sent: in a rail's hook).
    ack_now: bool,
    /// Frames taken from the inbox (scratch, kept for its capacity).
    inbound: Vec<Inbound>,
    /// Turns among rails for failover choices.
    next_failover: usize,
    /// The number of the last rail notice sent (they are numbered, all
    /// rails and peers together).
    notices: u32,
    /// Peers whose frames are held until their Resync (some may have been
    /// released since).
    holding: Vec<u64>,
    /// Rails to connect to peers.
    reconnects: Vec<Reconnect>,
    /// Sends waiting for a rail to their peer, oldest first.
    waiting: std::collections::VecDeque<WaitingSend>,
    /// Peers whose transfers wait for a rail (some may be served again
    /// since).
    stranded: Vec<u64>,
    /// When the resend logs are looked at next ([`RESEND_CHECK`]).
    next_resend_check: Instant,
}

impl State {
    /// The sequence state of the peer with `token`. A peer that is not in
    /// the address vector gets one too (its dropped frames must keep the
    /// sequence), up to [`MAX_UNKNOWN_PEERS`] of them.
    fn peer(&mut self, token: u64, known: bool) -> Option<&mut PeerState> {
        if !self.peers.contains_key(&token) {
            if !known {
                if self.unknown_peers >= MAX_UNKNOWN_PEERS {
                    return None;
                }
                self.unknown_peers += 1;
            }
            self.peers.insert(token, PeerState::new());
        }
        self.peers.get_mut(&token)
    }
}

/// The queues and counters an mrail endpoint was bound to.
#[derive(Clone, Default)]
pub(crate) struct Bindings {
    pub(crate) tx_cq: Option<CompletionQueue>,
    pub(crate) rx_cq: Option<CompletionQueue>,
    pub(crate) send_counter: Option<Counter>,
    pub(crate) recv_counter: Option<Counter>,
    pub(crate) write_counter: Option<Counter>,
    pub(crate) read_counter: Option<Counter>,
}

/// The first wait before a rail is tried again towards a peer it did not
/// connect to, or lost; it doubles up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(200);
/// The longest wait between two tries.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// A rail to connect to a peer: it did not connect when the peer was
/// inserted, or it lost the peer (the connection there ended). Tried while
/// the rail is in service, again after a back-off (module docs,
/// "Reconnecting").
struct Reconnect {
    token: u64,
    entry: Arc<PeerEntry>,
    rail: usize,
    /// When it may be tried; `None` while a try is under way.
    due: Option<Instant>,
    backoff: Duration,
    /// A try found nothing listening at the peer's address
    /// (`FI_ECONNREFUSED`): the peer may be gone. A try that failed
    /// otherwise (a handshake cut short, a reset: what a host busy with a
    /// job's first all-to-all gives) does not set it.
    refused: bool,
}

/// Connects made on threads of their own (each waits for its handshakes):
/// what they gave, (token, rail, the peer's handle there), and the rails
/// whose thread runs.
struct Connects {
    done: Mutex<Vec<(u64, usize, Result<PeerAddr>)>>,
    running: Vec<AtomicBool>,
}

/// What failover needs from the endpoint: the rails' IPv4 addresses (to
/// watch their links) and the domain's rail event queue.
pub(crate) struct Failover {
    pub(crate) rail_ips: Vec<Option<Ipv4Addr>>,
    pub(crate) events: Arc<RailEventQueue>,
}

/// The mrail endpoint's protocol engine (module docs).
pub(crate) struct Driver {
    state: Mutex<State>,
    ready: Arc<ReadyQueue>,
    table: Arc<CompletionTable<MrailCompletion>>,
    rails: Vec<Arc<EndpointCore>>,
    /// The rails' engine endpoints, for the futures' fast path.
    engines: Vec<Arc<dyn crate::engine::EngineEndpoint>>,
    av: Arc<MrailAvCore>,
    token: u64,
    bindings: Bindings,
    stats: DriverStats,
    /// The rail the last message (eager frame, RTS or CTS) came on.
    hot_rail: AtomicUsize,
    /// The rails messages came on since the fast path last forgot them
    /// (a bit per rail).
    warm_rails: AtomicU64,
    /// Fast-path polls so far (which ones visit the other rails).
    fast_polls: AtomicUsize,
    /// The striped parts on each rail (which parts teach rates).
    load: Arc<RailLoad>,
    /// The striped sends' parts on each rail, apart from the receives'
    /// (their parts in flight decide when the next one goes).
    send_load: Arc<RailLoad>,
    /// The domain's rail events.
    events: Arc<RailEventQueue>,
    /// Progress steps so far (housekeeping every [`HOUSEKEEPING_EVERY`]).
    steps: AtomicUsize,
    /// Whether [`State::reposts`] holds pool receives to post again, or
    /// acknowledgements are owed now ([`State::ack_now`]).
    chores_due: AtomicBool,
    /// Control frames the rails' hooks could not handle on the spot.
    inbox: Inbox,
    /// Rails connecting to peers, and what they gave.
    connects: Arc<Connects>,
    /// (peer token, rail) of control frames that failed because the rail
    /// lost the peer ([`note_lost`](Self::note_lost)).
    lost: Mutex<Vec<(u64, usize)>>,
    lost_any: AtomicBool,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Driver {
    /// A driver over `rails` (the rail endpoints, in rail order) for the
    /// peers of `av`; `token` is this endpoint's identity (its first
    /// rail's epid). Posts every rail's pool of control receives.
    pub(crate) fn new(
        rails: Vec<Arc<EndpointCore>>,
        av: Arc<MrailAvCore>,
        chooser: RailChooser,
        rates: RailRates,
        token: u64,
        bindings: Bindings,
        failover: Failover,
    ) -> Result<Arc<Driver>> {
        let n = rails.len();
        let salt = token as u32 ^ (token >> 32) as u32;
        let ready = Arc::new(ReadyQueue::default());
        let pool = (0..n)
            .map(|r| {
                (0..POOL_SLOTS)
                    .map(|s| PoolSlot {
                        key: None,
                        waker: Waker::from(Arc::new(TaskWake {
                            id: pool_task(r, s),
                            queue: ready.clone(),
                        })),
                        spare: None,
                    })
                    .collect()
            })
            .collect();
        let live = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
        let driver = Arc::new(Driver {
            state: Mutex::new(State {
                chooser,
                rates,
                live,
                peers: FxHashMap::default(),
                unknown_peers: 0,
                matcher: Matcher::new(),
                sends: GenSlab::new(ID_GEN_BITS, 0, salt),
                recvs: GenSlab::new(ID_GEN_BITS, 0, salt.rotate_left(7)),
                eagers: GenSlab::new(ID_GEN_BITS, 0, salt.rotate_left(13)),
                pool,
                reposts: Vec::new(),
                scratch: Vec::new(),
                queue: PartQueue::new(n),
                pumping: false,
                next_cq_id: 1,
                closed: false,
                health: RailHealth::new(n),
                links: LinkWatch::new(&failover.rail_ips),
                frame_pool: Vec::new(),
                ack_pending: Vec::new(),
                ack_due: None,
                ack_now: false,
                inbound: Vec::new(),
                next_failover: 0,
                notices: 0,
                holding: Vec::new(),
                reconnects: Vec::new(),
                waiting: std::collections::VecDeque::new(),
                stranded: Vec::new(),
                next_resend_check: Instant::now(),
            }),
            ready,
            table: Arc::new(CompletionTable::new()),
            stats: DriverStats {
                rails: (0..n).map(|_| RailStats::default()).collect(),
                ..DriverStats::default()
            },
            engines: rails.iter().map(|r| r.domain().direct().as_dyn()).collect(),
            rails,
            av,
            token,
            bindings,
            hot_rail: AtomicUsize::new(0),
            warm_rails: AtomicU64::new(1),
            fast_polls: AtomicUsize::new(0),
            load: RailLoad::new(n),
            send_load: RailLoad::new(n),
            events: failover.events,
            steps: AtomicUsize::new(0),
            chores_due: AtomicBool::new(false),
            inbox: Inbox::default(),
            connects: Arc::new(Connects {
                done: Mutex::new(Vec::new()),
                running: (0..n).map(|_| AtomicBool::new(false)).collect(),
            }),
            lost: Mutex::new(Vec::new()),
            lost_any: AtomicBool::new(false),
        });
        // Control frames come straight from the engines that can hand them
        // over; the others (and rendezvous-borne frames) fill the pools.
        let hooked: Vec<bool> = driver
            .engines
            .iter()
            .enumerate()
            .map(|(rail, e)| {
                let hook = RailHook {
                    driver: Arc::downgrade(&driver),
                    rail,
                };
                e.set_tag_hook(CTRL_TAG, Some(Arc::new(hook)))
            })
            .collect();
        {
            let mut st = relock(&driver.state);
            for (r, &hooked) in hooked.iter().enumerate() {
                let slots = if hooked {
                    HOOKED_POOL_SLOTS
                } else {
                    POOL_SLOTS
                };
                for s in 0..slots {
                    driver.post_pool(&mut st, r, s, pool_buffer())?;
                }
            }
        }
        Ok(driver)
    }

    /// The endpoint's operation counters.
    pub(crate) fn op_stats(&self) -> &OpCounters {
        &self.stats.ops
    }

    /// The unexpected queue of the endpoint's matcher: messages waiting
    /// and the bytes their eager payloads hold.
    pub(crate) fn unexpected(&self) -> (u64, u64) {
        let st = relock(&self.state);
        let bytes = st
            .matcher
            .unexpected()
            .map(|(_, a)| a.held_bytes() as u64)
            .sum();
        (st.matcher.unexpected_len() as u64, bytes)
    }

    /// The completion table the endpoint's futures wait on.
    pub(crate) fn table(&self) -> &Arc<CompletionTable<MrailCompletion>> {
        &self.table
    }

    /// The futures' fast path in manual progress: steps the rails' engines
    /// and the driver only (not the rails' other sources, which the
    /// reactor's occasional full rounds still run), then takes `key`'s
    /// value if it is there.
    pub(crate) fn poll_fast(&self, key: OpKey) -> Option<MrailCompletion> {
        if let Some(v) = self.table.try_take(key) {
            return Some(v);
        }
        // The rails that carried messages lately every time (one under the
        // fixed policy, each in turn under round-robin), the others every
        // [`COLD_RAIL_EVERY`]-th time: a poll(2) per idle rail would
        // lengthen every turn of the spin; the reactor's full rounds still
        // visit them all.
        let n = self.fast_polls.fetch_add(1, Ordering::Relaxed);
        if n % WARM_SPAN == 0 {
            let hot = self.hot_rail.load(Ordering::Relaxed);
            self.warm_rails.store(rail_bit(hot), Ordering::Relaxed);
        }
        let warm = self.warm_rails.load(Ordering::Relaxed);
        // What waits for a quiet moment goes first: this future's message
        // is not here yet (or it would have been taken above), so nothing
        // waits for it, while after the rails' turn the message may be.
        if self.chores_due.load(Ordering::Relaxed) {
            if let Ok(mut st) = self.state.try_lock() {
                self.chores(&mut st);
            }
        }
        for (i, e) in self.engines.iter().enumerate() {
            if warm & rail_bit(i) != 0 || n % COLD_RAIL_EVERY == 0 {
                e.progress();
            }
        }
        self.step_now(false);
        self.table.try_take(key)
    }

    /// A message came on `rail`: the fast path visits it on every poll.
    fn heat(&self, rail: usize) {
        self.hot_rail.store(rail, Ordering::Relaxed);
        let bit = rail_bit(rail);
        if self.warm_rails.load(Ordering::Relaxed) & bit == 0 {
            self.warm_rails.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// A control frame from rail `rail`'s hook, inside that rail's
    /// progress: the common eager message is delivered at once when the
    /// driver's state is free; anything else waits in the inbox for the
    /// next step (which may use the rails).
    fn on_hooked(&self, rail: usize, source: PeerAddr, bytes: &[u8]) {
        // Frames queued before this one go first.
        if !self.inbox.any.load(Ordering::Acquire) {
            if let Ok(mut st) = self.state.try_lock() {
                if st.closed || self.eager_inline(&mut st, rail, bytes) {
                    return;
                }
            }
        }
        self.inbox.push(rail, source, bytes);
    }

    /// An eager frame delivered where no rail may be used (see
    /// [`on_hooked`](Self::on_hooked)): `true` if `bytes` is one that
    /// [`deliver_in_place`](Self::deliver_in_place) takes, else nothing
    /// changed.
    fn eager_inline(&self, st: &mut State, rail: usize, bytes: &[u8]) -> bool {
        let Ok((
            Frame::Eager {
                class,
                seq,
                source,
                tag,
            },
            hl,
        )) = header::decode(bytes)
        else {
            return false;
        };
        // Not `known`: a stranger's frame is counted once, by `on_frame`.
        let Some(p) = self.av.index_of_token(source) else {
            return false;
        };
        let spec = ArrivalSpec {
            class,
            tag,
            source: p,
        };
        let payload = &bytes[hl..];
        if !self.deliver_in_place(st, source, seq, spec, payload, false) {
            return false;
        }
        let rs = &self.stats.rails[rail];
        bump(&rs.msgs_received, 1);
        bump(&rs.bytes_received, payload.len() as u64);
        self.heat(rail);
        true
    }

    /// Each rail's rate in bytes per second as the driver knows it
    /// (configured, or learned from striped parts), in rail order.
    pub(crate) fn rates(&self) -> Vec<Option<f64>> {
        let st = relock(&self.state);
        (0..self.rails.len()).map(|r| st.rates.rate(r)).collect()
    }

    /// The peers with protocol state here, and the bytes that state
    /// takes: sequence and reorder state, unacknowledged frames kept for
    /// resending (their buffers' capacity), and the table slot.
    pub(crate) fn peer_state(&self) -> (usize, u64) {
        let st = relock(&self.state);
        let slot = std::mem::size_of::<(u64, PeerState)>() as u64;
        let bytes = st
            .peers
            .values()
            .map(|ps| {
                let log: u64 = ps
                    .log
                    .iter()
                    .map(|(_, _, l)| (l.frame.capacity() + std::mem::size_of::<Logged>()) as u64)
                    .sum();
                slot + log + ps.held_bytes as u64 + ps.rx.held() as u64 * 64
            })
            .sum();
        (st.peers.len(), bytes)
    }

    /// The refusal counters.
    pub(crate) fn stats(&self) -> &DriverStats {
        &self.stats
    }

    fn rail_domain(&self, rail: usize) -> &Arc<DomainCore> {
        self.rails[rail].domain()
    }

    /// Tells the reactor that new work was posted.
    fn notify(&self) {
        self.rail_domain(0).reactor().notify();
    }

    // ----- posting ---------------------------------------------------------

    /// A fresh completion key for a future.
    pub(crate) fn future_sink(&self) -> Sink {
        Sink::Future(self.table.insert())
    }

    /// A sink for an operation posted with `context`.
    pub(crate) fn cq_sink(&self, context: u64) -> Sink {
        let mut st = relock(&self.state);
        let id = st.next_cq_id;
        st.next_cq_id += 1;
        Sink::Cq { context, id }
    }

    /// Sends `buf` to the peer at `dest` (`class` and `tag` as the user
    /// gave them). The completion goes to `sink`; on an error before
    /// anything was posted, the buffer comes back with it.
    pub(crate) fn send(
        &self,
        dest: FiAddr,
        class: MsgClass,
        tag: u64,
        buf: OpBuffer,
        sink: Sink,
    ) -> std::result::Result<(), (Error, OpBuffer)> {
        let (_, entry) = match self.av.peer(dest) {
            Ok(v) => v,
            Err(e) => return Err((e, buf)),
        };
        let mut st = relock(&self.state);
        if st.closed {
            return Err((closed_error(), buf));
        }
        let token = entry.addr.token();
        // Behind the peer's sends that wait for a rail; or waiting itself
        // when no rail serves the peer now but one is coming.
        let usable = self.peer_rails(&mut st, token, &entry).unwrap_or(0);
        let queued = st.waiting.iter().any(|w| w.entry.addr.token() == token);
        if queued || (usable == 0 && self.rail_coming(&st, token)) {
            // A peer no rail has reached yet waits for its first connects
            // while they are under way, as long as the address vector lets
            // a connect take (a job's first all-to-all, every rank dialing
            // every other at once, takes seconds on a loaded host, and a
            // connect may fail there and be tried again); a peer that lost
            // its rails, or where nothing listened at a first connect,
            // waits `FI_PSM_TIMEOUT` for one.
            let wait = SendWait::new(
                Instant::now(),
                self.rail_domain(0).config().timeout(),
                self.av.connect_timeout(),
                entry.connected() != 0,
            );
            st.waiting.push_back(WaitingSend {
                entry,
                class,
                tag,
                buf,
                sink,
                wait,
            });
            drop(st);
            self.notify();
            return Ok(());
        }
        let result = self.send_now(&mut st, &entry, class, tag, buf, sink);
        drop(st);
        self.notify();
        result
    }

    /// Sends `buf` to `entry`'s peer now, on the rails that serve it (a
    /// rail that turns out to have lost the peer is left for another).
    fn send_now(
        &self,
        st: &mut State,
        entry: &Arc<PeerEntry>,
        class: MsgClass,
        tag: u64,
        buf: OpBuffer,
        sink: Sink,
    ) -> std::result::Result<(), (Error, OpBuffer)> {
        let len = buf.len();
        let token = entry.addr.token();
        let mut buf = buf;
        let mut tries = 0;
        loop {
            let live = match self.peer_rails(st, token, entry) {
                Some(l) => l,
                None => return Err((no_rail_error(), buf)),
            };
            let Some(choice) = st.chooser.choose(len as u64, live) else {
                return Err((no_rail_error(), buf));
            };
            let seq = match st.peer(token, true) {
                Some(ps) => ps.tx.next(),
                None => return Err((no_rail_error(), buf)),
            };
            let (rail, result) = match choice {
                RailChoice::One(r) if len <= EAGER_MAX => {
                    (r, self.send_eager(st, entry, r, seq, class, tag, buf, sink))
                }
                RailChoice::One(r) => (
                    r,
                    self.send_rts(st, entry.clone(), r, 1 << r, seq, class, tag, buf, sink),
                ),
                RailChoice::All(mask) => {
                    let fixed = st.chooser.fixed_rail();
                    let via = if mask & (1 << fixed) != 0 {
                        fixed
                    } else {
                        mask.trailing_zeros() as usize
                    };
                    (
                        via,
                        self.send_rts(st, entry.clone(), via, mask, seq, class, tag, buf, sink),
                    )
                }
            };
            let Err((e, back)) = result else {
                return Ok(());
            };
            // Nothing left: the peer must not wait for this number.
            if let Some(ps) = st.peer(token, true) {
                ps.tx = TxSequence::with_start(seq);
            }
            if !rail_lost(e.kind()) || tries >= self.rails.len() {
                return Err((e, back));
            }
            // The rail lost the peer (its connection there ended): another
            // may still reach it.
            tries += 1;
            buf = back;
            self.peer_lost_rails(st, token, rail_bit(rail));
        }
    }

    /// When the waiting send `w` fails ([`SendWait`]).
    fn send_deadline(&self, st: &State, w: &WaitingSend) -> Instant {
        let token = w.entry.addr.token();
        let refused = st.reconnects.iter().any(|r| r.token == token && r.refused);
        w.wait.deadline(refused)
    }

    /// Whether a rail may soon serve the peer `token`: one of ours is
    /// rejoining, or one in service is connecting to the peer again after
    /// its connection there ended (not after its peer book judged it
    /// dead: that took `FI_PSM_TIMEOUT` already).
    fn rail_coming(&self, st: &State, token: u64) -> bool {
        let judged = st.peers.get(&token).map_or(0, |ps| ps.judged);
        (0..self.rails.len()).any(|r| match st.health.state(r) {
            RailState::Rejoining => true,
            RailState::Up => {
                judged & rail_bit(r) == 0
                    && st
                        .reconnects
                        .iter()
                        .any(|x| x.token == token && x.rail == r)
            }
            RailState::Down => false,
        })
    }

    /// The sends that wait for a rail ([`WaitingSend`]), in order per
    /// peer: sent once a rail serves their peer, failed with `FI_EIO` once
    /// none is coming any more or `FI_PSM_TIMEOUT` has passed.
    fn send_waiting(&self, st: &mut State, now: Instant) -> bool {
        if st.waiting.is_empty() {
            return false;
        }
        let mut waiting = std::mem::take(&mut st.waiting);
        let mut blocked: Vec<u64> = Vec::new();
        let mut moved = false;
        while let Some(w) = waiting.pop_front() {
            let token = w.entry.addr.token();
            if blocked.contains(&token) {
                st.waiting.push_back(w);
                continue;
            }
            let usable = self.peer_rails(st, token, &w.entry).unwrap_or(0);
            if usable != 0 {
                moved = true;
                if let Err((e, buf)) = self.send_now(st, &w.entry, w.class, w.tag, w.buf, w.sink) {
                    self.finish(w.sink, Dir::Send, w.class, Err(e), buf);
                }
            } else if now >= self.send_deadline(st, &w) || !self.rail_coming(st, token) {
                moved = true;
                self.finish(w.sink, Dir::Send, w.class, Err(no_rail_error()), w.buf);
            } else {
                blocked.push(token);
                st.waiting.push_back(w);
            }
        }
        moved
    }

    /// An inject (`data` at most the rails' inject size less the header)
    /// that leaves at once as one rail inject, without a buffer of its own
    /// or a completion, counted on the send counter. It always goes on one
    /// rail: where the size policy stripes, on the fixed rail (or the first
    /// live one), since a few bytes gain nothing from striping and an
    /// inject must be on its way when the call returns.
    pub(crate) fn inject(
        &self,
        dest: FiAddr,
        class: MsgClass,
        tag: u64,
        data: &[u8],
    ) -> Result<()> {
        let (_, entry) = self.av.peer(dest)?;
        let mut st = relock(&self.state);
        if st.closed {
            return Err(closed_error());
        }
        let token = entry.addr.token();
        let mut tries = 0;
        let (rail, frame) = loop {
            let Some(live) = self.peer_rails(&mut st, token, &entry) else {
                return Err(no_rail_error());
            };
            // Not past sends that wait for a rail, nor before one serves.
            if live == 0 || st.waiting.iter().any(|w| w.entry.addr.token() == token) {
                return Err(self.no_rail_now(&st, token));
            }
            let rail = match st.chooser.choose(data.len() as u64, live) {
                Some(RailChoice::One(r)) => r,
                Some(RailChoice::All(mask)) => {
                    let fixed = st.chooser.fixed_rail();
                    if mask & (1 << fixed) != 0 {
                        fixed
                    } else {
                        mask.trailing_zeros() as usize
                    }
                }
                None => return Err(no_rail_error()),
            };
            let Some(ps) = st.peer(token, true) else {
                return Err(no_rail_error());
            };
            let seq = ps.tx.next();
            let frame = Frame::Eager {
                class,
                seq,
                source: self.token,
                tag,
            };
            let mut wire = [0u8; RAIL_INJECT];
            let sent = frame
                .write_to(&mut wire)
                .map_err(header_error)
                .and_then(|hl| {
                    let end = hl + data.len();
                    let room = wire.get_mut(hl..end).ok_or_else(|| {
                        Error::new(ErrorKind::MsgSize, "inject: larger than a rail inject")
                    })?;
                    room.copy_from_slice(data);
                    let peer = entry.on_rail(rail)?;
                    self.rail_domain(rail)
                        .direct()
                        .inject(peer, CTRL_TAG, &wire[..end])
                        .map_err(|e| rail_error(rail, "inject", e))
                });
            let Err(e) = sent else {
                break (rail, frame);
            };
            // Nothing left: the peer must not wait for this number.
            if let Some(ps) = st.peer(token, true) {
                ps.tx = TxSequence::with_start(seq);
            }
            if !rail_lost(e.kind()) || tries >= self.rails.len() {
                return Err(e);
            }
            // The rail lost the peer: another may still reach it.
            tries += 1;
            self.peer_lost_rails(&mut st, token, rail_bit(rail));
        };
        log_frame(&mut st, token, rail, &frame, data);
        drop(st);
        let rs = &self.stats.rails[rail];
        bump(&rs.msgs_sent, 1);
        bump(&rs.bytes_sent, data.len() as u64);
        if let Some(c) = &self.bindings.send_counter {
            c.inc();
        }
        self.notify();
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn send_eager(
        &self,
        st: &mut State,
        entry: &PeerEntry,
        rail: usize,
        seq: u32,
        class: MsgClass,
        tag: u64,
        buf: OpBuffer,
        sink: Sink,
    ) -> std::result::Result<(), (Error, OpBuffer)> {
        let frame = Frame::Eager {
            class,
            seq,
            source: self.token,
            tag,
        };
        let len = buf.len();
        let peer = match entry.on_rail(rail) {
            Ok(p) => p,
            Err(e) => return Err((e, buf)),
        };
        let direct = self.rail_domain(rail).direct();
        let rs = &self.stats.rails[rail];
        if EAGER_HEADER_LEN + len <= RAIL_INJECT {
            let mut wire = [0u8; RAIL_INJECT];
            let hl = match frame.write_to(&mut wire) {
                Ok(n) => n,
                Err(e) => return Err((header_error(e), buf)),
            };
            wire[hl..hl + len].copy_from_slice(buf.as_slice());
            if let Err(e) = direct.inject(peer, CTRL_TAG, &wire[..hl + len]) {
                return Err((rail_error(rail, "send", e), buf));
            }
            log_frame(st, entry.addr.token(), rail, &frame, buf.as_slice());
            bump(&rs.msgs_sent, 1);
            bump(&rs.bytes_sent, len as u64);
            self.finish(
                sink,
                Dir::Send,
                class,
                Ok(Done {
                    len,
                    tag,
                    source: FiAddr::UNSPEC,
                }),
                buf,
            );
            return Ok(());
        }
        let mut wire = Vec::with_capacity(EAGER_HEADER_LEN + len);
        if let Err(e) = frame.append_to(&mut wire) {
            return Err((header_error(e), buf));
        }
        wire.extend_from_slice(buf.as_slice());
        let key = match direct.isend_keyed(peer, CTRL_TAG, SendMode::Standard, wire.into()) {
            Ok(k) => k,
            Err(e) => return Err((rail_error(rail, "send", e.error), buf)),
        };
        log_frame(st, entry.addr.token(), rail, &frame, buf.as_slice());
        bump(&rs.msgs_sent, 1);
        bump(&rs.bytes_sent, len as u64);
        let part = RailPart::new(self.rail_domain(rail).clone(), key, rail, false, None);
        let placeholder = EagerSend {
            token: entry.addr.token(),
            seq,
            class,
            len,
            buf,
            sink,
            part: None,
            waker: futures::task::noop_waker(),
        };
        let id = match st.eagers.insert(placeholder) {
            Ok(id) => id,
            Err(e) => return Err((full_error(), e.buf)),
        };
        let waker = self.waker(task(EAGER, id));
        if let Some(x) = st.eagers.get_mut(id) {
            x.part = Some(part);
            x.waker = waker;
        }
        self.poll_eager(st, id);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rts(
        &self,
        st: &mut State,
        entry: Arc<PeerEntry>,
        via: usize,
        rails: u64,
        seq: u32,
        class: MsgClass,
        tag: u64,
        buf: OpBuffer,
        sink: Sink,
    ) -> std::result::Result<(), (Error, OpBuffer)> {
        let len = buf.len() as u64;
        let peer = match entry.on_rail(via) {
            Ok(p) => p,
            Err(e) => return Err((e, buf)),
        };
        let shared = match SharedBuffer::share(buf, false) {
            Ok(s) => s,
            Err(buf) => return Err((Error::new(ErrorKind::Inval, "send: buffer"), buf)),
        };
        let xfer = SendXfer {
            watch: Vec::new(),
            entry,
            seq,
            class,
            len,
            rails,
            spans: Spans::default(),
            shared,
            sink,
            striped: None,
            accepted: None,
            queued: 0,
            waker: futures::task::noop_waker(),
        };
        let send_id = match st.sends.insert(xfer) {
            Ok(id) => id,
            Err(x) => return Err((full_error(), reclaim_or_empty(x.shared))),
        };
        let waker = self.waker(task(SEND, send_id));
        let watch = self.watch_peer(
            task(SEND, send_id),
            &st.sends.get(send_id).expect("just inserted").entry,
            rails,
        );
        if let Some(x) = st.sends.get_mut(send_id) {
            x.waker = waker;
            x.watch = watch;
        }
        // The sender's rates go along: it measures its parts' rails best
        // (a receiver's parts are posted before their data comes).
        let weights = if rails.count_ones() > 1 {
            st.rates.weights(rails)
        } else {
            0
        };
        let frame = Frame::Rts {
            class,
            seq,
            source: self.token,
            tag,
            len,
            send_id,
            rails,
            weights,
        };
        if let Err(e) = self.send_control(via, peer, &frame) {
            let x = st.sends.remove(send_id).expect("just inserted");
            return Err((e, reclaim_or_empty(x.shared)));
        }
        let token = st.sends.get(send_id).map(|x| x.entry.addr.token());
        if let Some(token) = token {
            log_frame(st, token, via, &frame, &[]);
        }
        Ok(())
    }

    /// Sends a control frame to `entry`'s peer on `rail` (`Io` when the
    /// rail is not connected to it).
    /// A failure that says the rail lost the peer is noted, so that the
    /// rail leaves the peer's service ([`take_lost`](Self::take_lost)).
    fn ctrl(&self, rail: usize, entry: &PeerEntry, frame: &Frame) -> Result<()> {
        let r = self.send_control(rail, entry.on_rail(rail)?, frame);
        if let Err(e) = &r {
            self.note_lost(entry.addr.token(), rail, e);
        }
        r
    }

    /// A post to the peer `token` on `rail` failed with `e`: if that says
    /// the rail lost the peer (its connection there ended), the rail is
    /// taken out for it at the end of the step.
    fn note_lost(&self, token: u64, rail: usize, e: &Error) {
        if rail_lost(e.kind()) {
            relock(&self.lost).push((token, rail));
            self.lost_any.store(true, Ordering::Release);
        }
    }

    /// The rails noted as having lost their peers leave those peers'
    /// service (and reconnect).
    fn take_lost(&self, st: &mut State) -> bool {
        if !self.lost_any.swap(false, Ordering::AcqRel) {
            return false;
        }
        let lost = std::mem::take(&mut *relock(&self.lost));
        for &(token, rail) in &lost {
            self.peer_lost_rails(st, token, rail_bit(rail));
        }
        !lost.is_empty()
    }

    /// Sends a control frame (no payload) on `rail` with an inject.
    fn send_control(&self, rail: usize, peer: PeerAddr, frame: &Frame) -> Result<()> {
        let mut wire = [0u8; header::MAX_HEADER_LEN];
        let n = frame.write_to(&mut wire).map_err(header_error)?;
        self.rail_domain(rail)
            .direct()
            .inject(peer, CTRL_TAG, &wire[..n])
            .map_err(|e| rail_error(rail, "control frame", e))?;
        bump(&self.stats.rails[rail].msgs_sent, 1);
        Ok(())
    }

    /// Posts a receive for the next message matching `spec`; the
    /// completion goes to `sink`.
    pub(crate) fn recv(
        &self,
        spec: RecvSpec,
        buf: OpBuffer,
        sink: Sink,
    ) -> std::result::Result<(), (Error, OpBuffer)> {
        let mut st = relock(&self.state);
        if st.closed {
            return Err((closed_error(), buf));
        }
        let posted = PostedRecv { sink, buf };
        if let Some((recv, aspec, arrival)) = st.matcher.post(spec, posted) {
            self.matched(&mut st, recv, aspec, arrival);
        }
        drop(st);
        self.notify();
        Ok(())
    }

    /// The oldest unexpected message `spec` would take: its class, tag,
    /// sender and length (it stays queued).
    pub(crate) fn peek(&self, spec: &RecvSpec) -> Option<(ArrivalSpec, u64)> {
        let st = relock(&self.state);
        st.matcher
            .peek(spec)
            .map(|(a, arrival)| (*a, arrival.len()))
    }

    /// Takes the message [`peek`](Self::peek) would show off the queue.
    pub(crate) fn claim(&self, spec: &RecvSpec) -> Option<ClaimedArrival> {
        let mut st = relock(&self.state);
        if st.closed {
            return None;
        }
        st.matcher
            .claim(spec)
            .map(|(spec, arrival)| ClaimedArrival { spec, arrival })
    }

    /// Receives a claimed message into `buf`, as if `buf` had been posted
    /// when it arrived; the completion goes to `sink`.
    pub(crate) fn recv_claimed(
        &self,
        claimed: ClaimedArrival,
        buf: OpBuffer,
        sink: Sink,
    ) -> std::result::Result<(), (Error, OpBuffer)> {
        let mut st = relock(&self.state);
        if st.closed {
            return Err((closed_error(), buf));
        }
        let ClaimedArrival { spec, arrival } = claimed;
        self.matched(&mut st, PostedRecv { sink, buf }, spec, arrival);
        drop(st);
        self.notify();
        Ok(())
    }

    /// The receive CQ, if one is bound.
    pub(crate) fn rx_cq(&self) -> Option<&CompletionQueue> {
        self.bindings.rx_cq.as_ref()
    }

    /// Cancels a receive that has not matched (`true`), completing it with
    /// `FI_ECANCELED` through its sink.
    pub(crate) fn cancel(&self, sink: Sink) -> bool {
        let mut st = relock(&self.state);
        let Some((spec, recv)) = st.matcher.cancel(|r| r.sink == sink) else {
            return false;
        };
        drop(st);
        let class = spec.class;
        self.finish(
            sink,
            Dir::Recv,
            class,
            Err(Error::new(
                ErrorKind::Canceled,
                recv_name(class).to_owned() + ": cancelled",
            )),
            recv.buf,
        );
        true
    }

    /// A future was dropped: an unmatched receive is removed (its buffer
    /// freed), and whatever completes later under `key` is dropped.
    pub(crate) fn forget(&self, key: OpKey) {
        let removed = {
            let mut st = relock(&self.state);
            st.matcher.cancel(|r| r.sink == Sink::Future(key))
        };
        drop(removed);
        drop(self.table.abandon(key));
    }

    /// Registers task `task` with the peer books of `rails` (a mask) for
    /// `entry`'s peer there.
    fn watch_peer(&self, task: u64, entry: &PeerEntry, rails: u64) -> Vec<Arc<PeerDeath>> {
        let mut watch = Vec::with_capacity(rails.count_ones() as usize);
        for r in 0..self.rails.len() {
            let Some(peer) = entry.rail(r).filter(|_| rails & rail_bit(r) != 0) else {
                continue;
            };
            let token = Arc::new(PeerDeath {
                task,
                rail: r,
                queue: self.ready.clone(),
                death: OnceLock::new(),
            });
            let weak: Weak<dyn Doomed> = Arc::downgrade(&token) as Weak<PeerDeath>;
            if let Some(death) = self
                .rail_domain(r)
                .peers()
                .wait_for(PeerRef::Peer(peer), weak)
            {
                token.peer_died(&death);
            }
            watch.push(token);
        }
        watch
    }

    fn waker(&self, id: u64) -> Waker {
        Waker::from(Arc::new(TaskWake {
            id,
            queue: self.ready.clone(),
        }))
    }

    // ----- completing ------------------------------------------------------

    /// Delivers an operation's completion to its sink and counts it.
    fn finish(
        &self,
        sink: Sink,
        dir: Dir,
        class: MsgClass,
        result: Result<Done>,
        buffer: OpBuffer,
    ) {
        let ok = result.is_ok();
        match (&result, dir) {
            (Ok(d), Dir::Send) => self.stats.ops.sent(d.len),
            (Ok(d), Dir::Recv) => self.stats.ops.received(d.len),
            (Err(_), _) => self.stats.ops.error(),
        }
        let counter = match dir {
            Dir::Send => self.bindings.send_counter.as_ref(),
            Dir::Recv => self.bindings.recv_counter.as_ref(),
        };
        if let Some(c) = counter {
            if ok {
                c.inc();
            } else {
                c.inc_err();
            }
        }
        match sink {
            Sink::Future(key) => {
                drop(self.table.complete(key, MrailCompletion { result, buffer }));
            }
            Sink::Cq { context, .. } => {
                let cq = match dir {
                    Dir::Send => self.bindings.tx_cq.as_ref(),
                    Dir::Recv => self.bindings.rx_cq.as_ref(),
                };
                let Some(cq) = cq else {
                    return;
                };
                let flags = flags_of(dir, class);
                match result {
                    Ok(d) => {
                        let mut e = CqEntry::new(context, flags);
                        e.len = d.len;
                        e.buffer = Some(buffer);
                        if dir == Dir::Recv {
                            e.tag = if class == MsgClass::Tagged { d.tag } else { 0 };
                            e.source = d.source;
                        }
                        cq.push(e);
                    }
                    Err(error) => {
                        let mut e = CqErrEntry::new(context, flags, error);
                        if let Some(t) = e.error.truncation() {
                            e.len = t.received;
                            e.olen = t.msg_len.saturating_sub(t.received as u64);
                        }
                        e.buffer = Some(buffer);
                        cq.push_err(e);
                    }
                }
            }
        }
    }

    /// A receive met its message.
    fn matched(&self, st: &mut State, recv: PostedRecv, spec: ArrivalSpec, arrival: Arrival) {
        match arrival {
            Arrival::Eager(payload) => self.complete_eager(recv, spec, &payload),
            Arrival::Rts {
                send_id,
                len,
                rails,
                weights,
                via,
            } => self.start_recv(st, recv, spec, send_id, len, (rails, weights), via),
        }
    }

    /// A matched RTS: posts the parts into the user's buffer and answers
    /// CTS.
    #[allow(clippy::too_many_arguments)]
    fn start_recv(
        &self,
        st: &mut State,
        recv: PostedRecv,
        spec: ArrivalSpec,
        send_id: u64,
        len: u64,
        (rails, sender_weights): (u64, u64),
        via: usize,
    ) {
        let PostedRecv { sink, buf } = recv;
        let Some(entry) = self.av.entry(spec.source) else {
            let e = Error::new(ErrorKind::Io, "recv: the sender left the address vector");
            self.finish(sink, Dir::Recv, spec.class, Err(e), buf);
            return;
        };
        let accepted = len.min(buf.len() as u64);
        let all = st.chooser.all_rails_mask();
        let token = entry.addr.token();
        let usable = self.peer_rails(st, token, &entry).unwrap_or(0) & rails;
        // The receiver cuts the message by the sender's weights when it
        // sent some, else by its own rates (configured, or learned from the
        // parts it moved), and tells the sender how; rails out of service
        // get nothing.
        let only_usable = |w: u64| {
            (0..16)
                .filter(|&r| usable & (1 << r) != 0)
                .fold(0, |acc, r| acc | (w & (0xf << (4 * r))))
        };
        let theirs = if header::weights_fit(rails, sender_weights) {
            only_usable(sender_weights)
        } else {
            0
        };
        let weights = if rails & !all != 0 || usable == 0 {
            0
        } else if theirs != 0 {
            theirs
        } else if usable == rails {
            if rails.count_ones() > 1 {
                st.rates.weights(rails)
            } else {
                0
            }
        } else {
            let w = st.rates.weights(usable);
            if w != 0 {
                w
            } else {
                only_usable(0x1111_1111_1111_1111)
            }
        };
        let plan = if rails & !all == 0 {
            StripePlan::for_message(accepted, rails, weights)
        } else {
            None
        };
        let Some(plan) = plan else {
            self.malformed("an RTS names rails this endpoint does not have");
            let _ = self.ctrl(
                via,
                &entry,
                &Frame::Nack {
                    source: self.token,
                    send_id,
                    reason: NackReason::TooManyParts,
                },
            );
            let e = Error::new(
                ErrorKind::Io,
                format!(
                    "{}: the sender asked for rails {rails:#x}, which this endpoint does not have",
                    recv_name(spec.class)
                ),
            );
            self.finish(sink, Dir::Recv, spec.class, Err(e), buf);
            return;
        };
        let shared = match SharedBuffer::share(buf, true) {
            Ok(s) => s,
            Err(buf) => {
                let e = Error::new(ErrorKind::Inval, "recv: the buffer is read-only");
                self.finish(sink, Dir::Recv, spec.class, Err(e), buf);
                return;
            }
        };
        // The CTS goes back on the request's rail, or another when that
        // one is out of service.
        let reply = if usable & (1 << via) != 0 || usable == 0 {
            via
        } else {
            usable.trailing_zeros() as usize
        };
        let xfer = RecvXfer {
            watch: Vec::new(),
            entry: entry.clone(),
            send_id,
            via: reply,
            cts: Frame::Ack {
                source: self.token,
                seq: 0,
            },
            plan: plan.clone(),
            rerouted: Vec::new(),
            spans: Spans::new("recv", &plan),
            class: spec.class,
            tag: spec.tag,
            source: spec.source,
            msg_len: len,
            accepted,
            shared: shared.clone(),
            sink,
            striped: None,
            waker: futures::task::noop_waker(),
        };
        let recv_id = match st.recvs.insert(xfer) {
            Ok(id) => id,
            Err(x) => {
                drop(shared);
                self.finish(
                    sink,
                    Dir::Recv,
                    x.class,
                    Err(full_error()),
                    reclaim_or_empty(x.shared),
                );
                return;
            }
        };
        let mut broken = 0u64;
        let mut parts = Vec::with_capacity(plan.len());
        let mut failed = None;
        for s in plan.iter() {
            let Some(window) = shared.window(s.offset, s.len) else {
                failed = Some(Error::new(
                    ErrorKind::Other,
                    "recv: a part outside the buffer",
                ));
                break;
            };
            let tags = TagMatch::exact(data_tag(recv_id, s.part));
            let stint = RailLoad::begin_sized(&self.load, s.rail, Instant::now(), s.len);
            match self.rail_domain(s.rail).direct().irecv_keyed(tags, window) {
                Ok(key) => parts.push(Ok(RailPart::new(
                    self.rail_domain(s.rail).clone(),
                    key,
                    s.rail,
                    true,
                    Some(stint),
                ))),
                Err(e) if usable & !(1 << s.rail) != 0 => {
                    // This rail of ours is broken (closed under us): the
                    // part waits for another rail, and the rail leaves
                    // service.
                    broken |= 1 << s.rail;
                    parts.push(Err(rail_error(s.rail, "part receive", e.error)));
                }
                Err(e) => {
                    failed = Some(rail_error(s.rail, "part receive", e.error));
                    break;
                }
            }
        }
        drop(shared);
        if let Some(e) = failed {
            drop(parts);
            let _ = self.ctrl(
                reply,
                &entry,
                &Frame::Nack {
                    source: self.token,
                    send_id,
                    reason: NackReason::Cancelled,
                },
            );
            let x = st.recvs.remove(recv_id).expect("just inserted");
            self.finish(
                x.sink,
                Dir::Recv,
                x.class,
                Err(e),
                reclaim_or_empty(x.shared),
            );
            return;
        }
        let cts = Frame::Cts {
            source: self.token,
            send_id,
            recv_id,
            accepted,
            weights,
        };
        // On another usable rail if the reply's lost the peer.
        let others = (0..self.rails.len()).filter(|&r| r != reply && usable & rail_bit(r) != 0);
        let mut answered = Err(None);
        for r in std::iter::once(reply).chain(others) {
            match self.ctrl(r, &entry, &cts) {
                Ok(()) => {
                    answered = Ok(r);
                    break;
                }
                Err(e) => {
                    let lost = rail_lost(e.kind());
                    answered = Err(Some(e));
                    if !lost {
                        break;
                    }
                }
            }
        }
        let reply = match answered {
            Ok(r) => r,
            Err(e) => {
                drop(parts);
                let x = st.recvs.remove(recv_id).expect("just inserted");
                let e = e.unwrap_or_else(no_rail_error);
                self.finish(
                    x.sink,
                    Dir::Recv,
                    x.class,
                    Err(e),
                    reclaim_or_empty(x.shared),
                );
                return;
            }
        };
        for s in plan.iter() {
            bump(&self.stats.rails[s.rail].stripes, 1);
        }
        let waker = self.waker(task(RECV, recv_id));
        let watch = self.watch_peer(task(RECV, recv_id), &entry, rails);
        if let Some(x) = st.recvs.get_mut(recv_id) {
            x.striped = Some(Striped::with_stalled(parts));
            x.waker = waker;
            x.watch = watch;
            x.cts = cts;
            x.via = reply;
        }
        for r in (0..self.rails.len()).filter(|r| broken & (1 << r) != 0) {
            self.rail_broken(st, r);
        }
        self.poll_recv(st, recv_id);
    }

    // ----- progress --------------------------------------------------------

    /// A progress step, unless nothing moved, nothing waits for a quiet
    /// moment (with `chores`) and no housekeeping is due: the common turn
    /// of a spin takes no lock.
    fn step_now(&self, chores: bool) -> Progress {
        let house = self.steps.fetch_add(1, Ordering::Relaxed) % HOUSEKEEPING_EVERY == 0;
        let moved =
            || self.ready.any.load(Ordering::Acquire) || self.inbox.any.load(Ordering::Acquire);
        let chores_due = chores && self.chores_due.load(Ordering::Relaxed);
        if !(house || chores_due || moved()) {
            return Progress::Idle;
        }
        let Ok(mut st) = self.state.try_lock() else {
            // Someone is posting; what moved stays queued for the next
            // round, which must come soon.
            return Progress::from(moved());
        };
        Progress::from(self.step(&mut st, house, chores))
    }

    /// What waits for a quiet moment: pool receives to post again, owed
    /// acknowledgements.
    fn chores(&self, st: &mut State) {
        self.chores_due.store(false, Ordering::Relaxed);
        if !st.reposts.is_empty() {
            self.repost_pool(st);
        }
        if std::mem::take(&mut st.ack_now) {
            self.send_owed_acks(st, false);
        }
    }

    fn step(&self, st: &mut State, house: bool, chores: bool) -> bool {
        let mut inbound = std::mem::take(&mut st.inbound);
        self.inbox.drain_into(&mut inbound);
        for f in &inbound {
            if !st.closed {
                self.on_frame(st, f.rail, &f.bytes, Some(f.source));
            }
        }
        let mut made = !inbound.is_empty();
        self.inbox.recycle(&mut inbound);
        st.inbound = inbound;
        let mut ids = std::mem::take(&mut st.scratch);
        self.ready.drain_into(&mut ids);
        made |= !ids.is_empty();
        if chores && !made && self.chores_due.load(Ordering::Relaxed) {
            self.chores(st);
        }
        for &id in &ids {
            let kind = id >> KIND_SHIFT;
            let rest = id & ((1 << KIND_SHIFT) - 1);
            match kind {
                POOL => self.poll_pool(st, (rest >> 16) as usize, (rest & 0xffff) as usize),
                SEND => self.poll_send(st, rest),
                RECV => self.poll_recv(st, rest),
                _ => self.poll_eager(st, rest),
            }
        }
        ids.clear();
        st.scratch = ids;
        if st.reposts.len() >= REPOST_BATCH {
            self.repost_pool(st);
        }
        made |= self.take_lost(st);
        if house && self.housekeeping(st, Instant::now()) {
            return true;
        }
        made
    }

    fn poll_pool(&self, st: &mut State, rail: usize, slot: usize) {
        let Some(s) = st.pool.get_mut(rail).and_then(|r| r.get_mut(slot)) else {
            return;
        };
        let Some(key) = s.key else {
            return;
        };
        let mut cx = Context::from_waker(&s.waker);
        let Poll::Ready(done) = self.rail_domain(rail).table().poll_take(key, &mut cx) else {
            return;
        };
        s.key = None;
        let MqCompletion { status, buffer } = done;
        if status.error == Some(ErrorKind::Canceled) || st.closed {
            return;
        }
        if status.error.is_none() {
            self.on_frame(st, rail, &buffer.as_slice()[..status.nbytes], status.source);
        } else {
            self.malformed("a control frame larger than the pool buffers");
        }
        st.pool[rail][slot].spare = Some(buffer);
        st.reposts.push((rail, slot));
        self.chores_due.store(true, Ordering::Relaxed);
    }

    /// Posts the receives of [`State::reposts`] again.
    fn repost_pool(&self, st: &mut State) {
        let reposts = std::mem::take(&mut st.reposts);
        for &(rail, slot) in &reposts {
            let Some(buffer) = st.pool[rail][slot].spare.take() else {
                continue;
            };
            if let Err(e) = self.post_pool(st, rail, slot, buffer) {
                tracing::warn!("mrail: rail {rail}: cannot post a control receive: {e}");
            }
        }
        let mut reposts = reposts;
        reposts.clear();
        if st.reposts.is_empty() {
            st.reposts = reposts;
        }
    }

    fn post_pool(&self, st: &mut State, rail: usize, slot: usize, buffer: OpBuffer) -> Result<()> {
        let buffer = if buffer.len() == POOL_BUFFER {
            buffer
        } else {
            pool_buffer()
        };
        let domain = self.rail_domain(rail);
        let key = domain
            .direct()
            .irecv_keyed(TagMatch::exact(CTRL_TAG), buffer)
            .map_err(|e| e.error)?;
        let s = &mut st.pool[rail][slot];
        s.key = Some(key);
        // Register the slot's waker (or handle an at-once completion).
        let waker = s.waker.clone();
        let mut cx = Context::from_waker(&waker);
        if domain.table().status(key) == crate::reactor::OpStatus::Complete {
            waker.wake_by_ref();
        } else if let Poll::Ready(done) = domain.table().poll_take(key, &mut cx) {
            // Completed between the two looks: put it back through the
            // queue by handling it now.
            st.pool[rail][slot].key = None;
            let MqCompletion { status, buffer } = done;
            if status.error.is_none() {
                self.on_frame(st, rail, &buffer.as_slice()[..status.nbytes], status.source);
            }
            return self.post_pool(st, rail, slot, buffer);
        }
        Ok(())
    }

    fn on_frame(&self, st: &mut State, rail: usize, bytes: &[u8], rail_source: Option<PeerAddr>) {
        let (frame, hl) = match header::decode(bytes) {
            Ok(v) => v,
            Err(e) => {
                self.malformed(&format!("rail {rail}: {e}"));
                return;
            }
        };
        let rs = &self.stats.rails[rail];
        bump(&rs.msgs_received, 1);
        if matches!(
            frame,
            Frame::Eager { .. } | Frame::Rts { .. } | Frame::Cts { .. }
        ) {
            // Where the next message or answer is likely to come from
            // (acknowledgements and other control frames go on any rail).
            self.heat(rail);
        }
        match frame {
            Frame::Eager {
                class,
                seq,
                source,
                tag,
            } => {
                let payload = &bytes[hl..];
                bump(&rs.bytes_received, payload.len() as u64);
                let p = self.known(source);
                let spec = ArrivalSpec {
                    class,
                    tag,
                    source: p.unwrap_or(u32::MAX),
                };
                if p.is_some() && self.deliver_in_place(st, source, seq, spec, payload, true) {
                    return;
                }
                let arrival = p.map(|_| Arrival::Eager(payload.to_vec()));
                self.sequenced(st, source, seq, spec, arrival);
            }
            Frame::Rts {
                class,
                seq,
                source,
                tag,
                len,
                send_id,
                rails,
                weights,
            } => {
                let p = self.known(source);
                let spec = ArrivalSpec {
                    class,
                    tag,
                    source: p.unwrap_or(u32::MAX),
                };
                let arrival = match p {
                    Some(_) => Some(Arrival::Rts {
                        send_id,
                        len,
                        rails,
                        weights,
                        via: rail,
                    }),
                    None => {
                        // The sender waits for an answer: refuse at once,
                        // on the connection the request came on.
                        if let Some(peer) = rail_source {
                            let _ = self.send_control(
                                rail,
                                peer,
                                &Frame::Nack {
                                    source: self.token,
                                    send_id,
                                    reason: NackReason::UnknownPeer,
                                },
                            );
                        }
                        None
                    }
                };
                self.sequenced(st, source, seq, spec, arrival);
            }
            Frame::Cts {
                source,
                send_id,
                recv_id,
                accepted,
                weights,
            } => self.on_cts(st, source, send_id, (recv_id, accepted, weights)),
            Frame::Nack {
                source,
                send_id,
                reason,
            } => self.on_nack(st, source, send_id, reason),
            Frame::Ack { source, seq } => self.on_ack(st, source, seq),
            Frame::WriteData { source, data, len } => self.on_write_data(source, data, len),
            Frame::Reroute {
                source,
                send_id,
                recv_id,
                part,
                rail,
            } => self.on_reroute(st, source, send_id, recv_id, part, rail),
            Frame::RailNotice {
                source,
                rail,
                up,
                number,
            } => self.on_rail_notice(st, source, rail, up, number),
            Frame::Withdraw {
                seq,
                source,
                send_id,
            } => self.on_withdraw(st, source, seq, send_id),
            Frame::Resync { source, upto, ask } => self.on_resync(st, source, upto, ask),
            Frame::PartQuery {
                source,
                send_id,
                recv_id,
                part,
            } => self.on_part_query(st, source, send_id, recv_id, part),
            Frame::Moved {
                source,
                send_id,
                recv_id,
                part,
                rail,
            } => self.on_moved(st, source, send_id, recv_id, part, rail),
        }
    }

    /// The sender sends part `part` of receive `recv_id` on `rail`, not on
    /// the planned one (that one had more to do): the part's receive moves
    /// there. The planned rail's receive is cancelled first; it cannot
    /// have matched, as the sender never sent the part there, but if it
    /// did (or the part was asked for again after a failover), it stays,
    /// and the new receive lands in a buffer of its own, as a rerouted
    /// part's does.
    fn on_moved(
        &self,
        st: &mut State,
        source: u64,
        send_id: u64,
        recv_id: u64,
        part: u8,
        rail: u8,
    ) {
        let rail = usize::from(rail);
        let Some(x) = st.recvs.get_mut(recv_id) else {
            bump(&self.stats.stale, 1);
            return;
        };
        if x.entry.addr.token() != source || x.send_id != send_id || rail >= self.rails.len() {
            self.malformed("a Moved that does not fit its receive");
            return;
        }
        let Some(stripe) = x.plan.part(part).copied() else {
            self.malformed("a Moved of a part the receive does not have");
            return;
        };
        let k = usize::from(part);
        let Some(striped) = x.striped.as_mut() else {
            return;
        };
        if !striped.join.is_open(k) || stripe.rail == rail {
            bump(&self.stats.stale, 1);
            return;
        }
        let rerouted = x.rerouted.iter().any(|&(p, _, _)| p == k);
        let mut kept = Vec::new();
        if !rerouted {
            for attempt in striped.join.take_attempts(k) {
                if let Err(live) = attempt.try_cancel() {
                    kept.push(live);
                }
            }
        }
        let in_place = !rerouted && kept.is_empty();
        for live in kept {
            let _ = striped.join.add_attempt(k, live);
        }
        let (window, temp) = if in_place {
            (x.shared.window(stripe.offset, stripe.len), None)
        } else {
            match SharedBuffer::share(OpBuffer::from(vec![0u8; stripe.len as usize]), true) {
                Ok(temp) => (temp.window(0, stripe.len), Some(temp)),
                Err(_) => (None, None),
            }
        };
        let Some(window) = window else {
            return;
        };
        let stint = RailLoad::begin_sized(&self.load, rail, Instant::now(), stripe.len);
        let tags = TagMatch::exact(data_tag(recv_id, part));
        let domain = self.rail_domain(rail);
        match domain.direct().irecv_keyed(tags, window) {
            Ok(key) => {
                let p = RailPart::new(domain.clone(), key, rail, true, Some(stint));
                if let Ok(attempt) = striped.join.add_attempt(k, p) {
                    if let Some(temp) = temp {
                        x.rerouted.push((k, attempt, temp));
                    }
                }
                if in_place {
                    x.plan.move_part(part, rail);
                }
            }
            Err(e) => {
                // The part waits; a failover asks for it again elsewhere.
                tracing::warn!("mrail: part {part} moved to rail {rail}: {}", e.error);
            }
        }
        self.poll_recv(st, recv_id);
    }

    /// A peer's striped write with remote CQ data has landed whole: one
    /// `FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA` entry on the receive
    /// CQ.
    fn on_write_data(&self, source: u64, data: u64, len: u64) {
        let Some(p) = self.known(source) else {
            return;
        };
        let Some(cq) = self.bindings.rx_cq.as_ref() else {
            return;
        };
        let mut e = CqEntry::new(
            0,
            CompletionFlags::REMOTE_WRITE | CompletionFlags::RMA | CompletionFlags::REMOTE_CQ_DATA,
        );
        e.data = data;
        e.len = usize::try_from(len).unwrap_or(usize::MAX);
        e.source = FiAddr(u64::from(p));
        cq.push(e);
    }

    /// Tells `peer` that a write of `len` bytes with remote CQ `data` has
    /// landed whole (after its every stripe completed), on the fixed rail
    /// if it is live, else the first live rail.
    pub(crate) fn send_write_data(&self, peer: &Arc<PeerEntry>, data: u64, len: u64) -> Result<()> {
        let rail = {
            let mut st = relock(&self.state);
            let live = self
                .peer_rails(&mut st, peer.addr.token(), peer)
                .unwrap_or(0);
            let fixed = st.chooser.fixed_rail();
            if live & (1 << fixed) != 0 {
                fixed
            } else if live != 0 {
                live.trailing_zeros() as usize
            } else {
                return Err(self.no_rail_now(&st, peer.addr.token()));
            }
        };
        let frame = Frame::WriteData {
            source: self.token,
            data,
            len,
        };
        self.ctrl(rail, peer, &frame)?;
        self.notify();
        Ok(())
    }

    /// The rails an RMA operation of `len` bytes uses: the size policy's
    /// choice among the live rails, and for striping each rail's weight
    /// ([`RailRates::weights`]); `Again` while the peer's rails connect,
    /// `Io` when no rail is left.
    pub(crate) fn rma_rails(&self, peer: &Arc<PeerEntry>, len: u64) -> Result<(u64, u64)> {
        let mut st = relock(&self.state);
        let token = peer.addr.token();
        let live = self.peer_rails(&mut st, token, peer).unwrap_or(0);
        match st.chooser.choose(len, live) {
            Some(RailChoice::One(r)) => Ok((1 << r, 0)),
            Some(RailChoice::All(mask)) => Ok((mask, st.rates.weights(mask))),
            None => Err(self.no_rail_now(&st, token)),
        }
    }

    /// Counts one rail operation of an RMA operation: `len` bytes sent
    /// (write) or fetched (read) on `rail`.
    pub(crate) fn count_rma_part(&self, rail: usize, len: u64, write: bool) {
        let rs = &self.stats.rails[rail];
        bump(&rs.stripes, 1);
        bump(
            if write {
                &rs.bytes_sent
            } else {
                &rs.bytes_received
            },
            len,
        );
    }

    /// Counts a stripe sent again on `rail` after a failover.
    pub(crate) fn count_retransmit(&self, rail: usize) {
        bump(&self.stats.rails[rail].retransmits, 1);
    }

    /// The counter an initiator's RMA completion counts on.
    pub(crate) fn rma_counter(&self, write: bool) -> Option<&Counter> {
        if write {
            self.bindings.write_counter.as_ref()
        } else {
            self.bindings.read_counter.as_ref()
        }
    }

    /// The peer index of `token`, or counted as unknown.
    fn known(&self, token: u64) -> Option<u32> {
        let p = self.av.index_of_token(token);
        if p.is_none() {
            let n = self.stats.unknown_peer.fetch_add(1, Ordering::Relaxed);
            if n < 8 || n.is_power_of_two() {
                tracing::warn!(
                    "mrail: a message from {token:#x}, which is not in the address vector, was dropped ({} so far)",
                    n + 1
                );
            }
        }
        p
    }

    fn malformed(&self, why: &str) {
        let n = self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        if n < 8 || n.is_power_of_two() {
            tracing::warn!("mrail: dropped a malformed frame: {why} ({} so far)", n + 1);
        }
    }

    /// The common case of an eager message, without a copy into a message
    /// of its own: it is the next in its peer's sequence, nothing waits
    /// behind it, and a receive is posted for it. Then the payload goes
    /// straight from the rail's buffer into the receive's (`true`).
    fn deliver_in_place(
        &self,
        st: &mut State,
        token: u64,
        seq: u32,
        spec: ArrivalSpec,
        payload: &[u8],
        may_send: bool,
    ) -> bool {
        let in_order = st
            .peer(token, true)
            .is_some_and(|ps| ps.rx.expected() == seq && ps.rx.held() == 0 && !ps.hold);
        if !in_order {
            return false;
        }
        let Some((recv, _)) = st.matcher.take_posted(&spec) else {
            return false;
        };
        if let Some(ps) = st.peers.get_mut(&token) {
            // Advance the sequence past this frame.
            if ps.rx.accept(seq, None).is_ok() {
                let _ = ps.rx.pop_ready();
            }
        }
        self.complete_eager(recv, spec, payload);
        self.delivered(st, token, 1, may_send);
        true
    }

    /// Copies an eager payload into its receive and completes it
    /// (`FI_ETRUNC` with both lengths when it does not fit).
    fn complete_eager(&self, recv: PostedRecv, spec: ArrivalSpec, payload: &[u8]) {
        let PostedRecv { sink, mut buf } = recv;
        let room = buf.len();
        let n = payload.len().min(room);
        if let Some(dst) = buf.as_mut_slice() {
            dst[..n].copy_from_slice(&payload[..n]);
        }
        let result = if payload.len() > room {
            Err(Error::truncated(
                Truncation {
                    msg_len: payload.len() as u64,
                    received: room,
                },
                recv_name(spec.class),
            ))
        } else {
            Ok(Done {
                len: n,
                tag: spec.tag,
                source: FiAddr(u64::from(spec.source)),
            })
        };
        self.finish(sink, Dir::Recv, spec.class, result, buf);
    }

    /// Takes frame `seq` of peer `p` into its reorder buffer and delivers
    /// every frame now in order (none while the peer is held).
    fn sequenced(
        &self,
        st: &mut State,
        token: u64,
        seq: u32,
        spec: ArrivalSpec,
        arrival: Option<Arrival>,
    ) {
        let bytes = arrival.as_ref().map_or(0, Arrival::held_bytes);
        let known = arrival.is_some();
        let Some(ps) = st.peer(token, known) else {
            return;
        };
        // Its bytes count as held unless it is delivered at once.
        let held = ps.hold || ps.rx.expected() != seq;
        if held {
            if ps.held_bytes + bytes > REORDER_BYTES {
                bump(&self.stats.beyond_window, 1);
                tracing::warn!("mrail: peer {token:#x}: more than {REORDER_BYTES} bytes out of order; frame {seq} dropped");
                return;
            }
            ps.held_bytes += bytes;
        }
        match ps.rx.accept(seq, arrival.map(|a| (spec, a))) {
            Ok(()) => {}
            Err(ReorderError::Duplicate(_)) => {
                if held {
                    ps.held_bytes -= bytes;
                }
                bump(&self.stats.duplicates, 1);
                // Sent again after a failover: the sender waits to hear.
                if known {
                    self.delivered(st, token, 1, true);
                }
                return;
            }
            Err(ReorderError::TooFar(_)) => {
                ps.held_bytes -= bytes;
                bump(&self.stats.beyond_window, 1);
                tracing::warn!(
                    "mrail: peer {token:#x}: frame {seq} is beyond the reorder window; dropped"
                );
                return;
            }
        }
        if ps.hold {
            return;
        }
        self.drain_ready(st, token, (!held).then_some(seq), known);
    }

    /// Delivers the peer's frames that are in order now; `uncounted` is
    /// one whose bytes were not counted as held. Acknowledges them if the
    /// peer is known.
    fn drain_ready(&self, st: &mut State, token: u64, uncounted: Option<u32>, known: bool) {
        let mut n = 0u32;
        while let Some((s, item)) = st.peers.get_mut(&token).and_then(|ps| ps.rx.pop_ready()) {
            n += 1;
            let Some((spec, arrival)) = item else {
                continue;
            };
            if Some(s) != uncounted {
                if let Some(ps) = st.peers.get_mut(&token) {
                    ps.held_bytes -= arrival.held_bytes();
                }
            }
            if let Some((recv, _, arrival)) = st.matcher.arrive(spec, arrival) {
                self.matched(st, recv, spec, arrival);
            }
        }
        if n > 0 && known {
            self.delivered(st, token, n, true);
        }
    }

    fn on_cts(
        &self,
        st: &mut State,
        source: u64,
        send_id: u64,
        (recv_id, accepted, weights): (u64, u64, u64),
    ) {
        let Some(x) = st.sends.get_mut(send_id) else {
            bump(&self.stats.stale, 1);
            return;
        };
        if x.entry.addr.token() != source || accepted > x.len {
            self.malformed("a CTS that does not fit its send");
            return;
        }
        if let Some((id, _)) = &x.accepted {
            // A CTS sent again after a failover: the first one came.
            if *id != recv_id {
                self.malformed("a second CTS with another receive id");
            } else {
                bump(&self.stats.stale, 1);
            }
            return;
        }
        let Some(plan) = StripePlan::for_message(accepted, x.rails, weights) else {
            self.malformed("a CTS whose weights do not fit its send's rails");
            return;
        };
        x.spans = Spans::new("send", &plan);
        let usable = st.peers.get(&source).map_or(0, |ps| ps.rails(st.live));
        let Some(x) = st.sends.get_mut(send_id) else {
            return;
        };
        if plan.total() > x.len {
            let class = x.class;
            let x = st.sends.remove(send_id).expect("present");
            let e = Error::new(ErrorKind::Other, "send: a part outside the buffer");
            let buf = give_back(x.striped, x.shared);
            self.finish(x.sink, Dir::Send, class, Err(e), buf);
            return;
        }
        // Every part of a message striped over several rails waits in its
        // rail's queue; the pump posts each rail's next ones as its parts
        // in flight leave room. A message on one rail, or of small parts
        // only, goes at once.
        let single = x.rails.count_ones() == 1 || plan.iter().all(|s| s.len < QUEUE_FROM);
        let mut parts = Vec::with_capacity(plan.len());
        let mut queued = 0u64;
        let mut lost = 0u64;
        for s in plan.iter() {
            if usable & (1 << s.rail) == 0 {
                // Out of service since the receiver planned: the part
                // waits for it to ask again on another rail.
                parts.push(Err(Error::new(
                    ErrorKind::Io,
                    format!("rail {}: out of service", s.rail),
                )));
                continue;
            }
            if single {
                // Posted now.
                let window = x.shared.window(s.offset, s.len);
                let tag = data_tag(recv_id, s.part);
                match window.map(|w| self.post_part_send(&x.entry, s.rail, tag, w, true)) {
                    Some(Ok(part)) => parts.push(Ok(part)),
                    Some(Err(e)) if rail_lost(e.kind()) => {
                        // Its rail lost the peer: the part waits for the
                        // receiver to ask for it on another rail.
                        lost |= 1 << s.rail;
                        parts.push(Err(e));
                    }
                    Some(Err(e)) => {
                        let class = x.class;
                        let x = st.sends.remove(send_id).expect("present");
                        drop(parts);
                        let buf = give_back(x.striped, x.shared);
                        self.finish(x.sink, Dir::Send, class, Err(e), buf);
                        return;
                    }
                    None => parts.push(Err(Error::new(
                        ErrorKind::Other,
                        "send: a part outside the buffer",
                    ))),
                }
                continue;
            }
            // Waiting for its turn on the rail: no attempt yet.
            parts.push(Err(Error::new(
                ErrorKind::Io,
                format!("rail {}: part waiting for its turn", s.rail),
            )));
            queued |= 1 << s.part;
            st.queue.push(
                s.rail,
                QueuedPart {
                    xfer: send_id,
                    part: s.part,
                    len: s.len,
                },
            );
        }
        x.striped = Some(Striped::with_stalled(parts));
        x.accepted = Some((recv_id, plan));
        x.queued = queued;
        if lost != 0 {
            self.peer_lost_rails(st, source, lost);
        }
        self.poll_send(st, send_id);
    }

    /// Posts one part of a striped send on `rail`.
    fn post_part_send(
        &self,
        entry: &PeerEntry,
        rail: usize,
        tag: u64,
        window: OpBuffer,
        timed: bool,
    ) -> Result<RailPart> {
        let len = window.len() as u64;
        let domain = self.rail_domain(rail);
        let stint =
            timed.then(|| RailLoad::begin_sized(&self.send_load, rail, Instant::now(), len));
        let key = domain
            .direct()
            .isend_keyed(entry.on_rail(rail)?, tag, SendMode::Standard, window)
            .map_err(|e| rail_error(rail, "part send", e.error))?;
        let rs = &self.stats.rails[rail];
        bump(&rs.stripes, 1);
        bump(&rs.bytes_sent, len);
        Ok(RailPart::new(domain.clone(), key, rail, false, stint))
    }

    /// The receiver refused a request to send: before its answer, or,
    /// after it lost every rail to us, once its parts were under way.
    fn on_nack(&self, st: &mut State, source: u64, send_id: u64, reason: NackReason) {
        let fits = st
            .sends
            .get(send_id)
            .is_some_and(|x| x.entry.addr.token() == source);
        if !fits {
            bump(&self.stats.stale, 1);
            return;
        }
        let x = st.sends.remove(send_id).expect("present");
        let e = Error::new(
            ErrorKind::Io,
            format!(
                "{}: the receiver refused the message ({reason})",
                send_name(x.class)
            ),
        );
        let buf = give_back(x.striped, x.shared);
        self.finish(x.sink, Dir::Send, x.class, Err(e), buf);
    }

    /// The receiver asks for part `part` again on `rail` (failover).
    fn on_reroute(
        &self,
        st: &mut State,
        source: u64,
        send_id: u64,
        recv_id: u64,
        part: u8,
        rail: u8,
    ) {
        let landed = rail == header::LANDED;
        let rail = usize::from(rail);
        let Some(x) = st.sends.get_mut(send_id) else {
            bump(&self.stats.stale, 1);
            return;
        };
        let fits = x.entry.addr.token() == source && (landed || rail < self.rails.len());
        let Some((id, plan)) = x.accepted.as_ref().filter(|_| fits) else {
            self.malformed("a Reroute that does not fit its send");
            return;
        };
        if *id != recv_id {
            self.malformed("a Reroute with another receive id");
            return;
        }
        let Some(stripe) = plan.part(part).copied() else {
            self.malformed("a Reroute of a part the send does not have");
            return;
        };
        // Sent now (or landed), not from its rail's queue.
        x.queued &= !(1u64 << part);
        if landed {
            // The receiver has the part: its send on a lost rail may
            // never complete, and need not.
            if let Some(striped) = x.striped.as_mut() {
                striped
                    .join
                    .mark_done(usize::from(part), stripe.rail, stripe.len as usize);
            }
            self.poll_send(st, send_id);
            return;
        }
        let Some(window) = x.shared.window(stripe.offset, stripe.len) else {
            return;
        };
        let posted = self.post_part_send(&x.entry, rail, data_tag(recv_id, part), window, false);
        let Some(striped) = x.striped.as_mut() else {
            return;
        };
        match posted {
            Ok(p) => {
                if striped.join.add_attempt(usize::from(part), p).is_ok() {
                    bump(&self.stats.rails[rail].retransmits, 1);
                }
            }
            Err(e) if rail_lost(e.kind()) => {
                self.peer_lost_rails(st, source, 1 << rail);
            }
            Err(e) => {
                tracing::warn!("mrail: part {part} of send {send_id:#x} again on rail {rail}: {e}");
            }
        }
        self.poll_send(st, send_id);
    }

    /// The rails on which a transfer's peer died since it last looked
    /// (its peer books): they are lost for that peer.
    fn note_deaths(&self, st: &mut State, token: u64, watch: &[Arc<PeerDeath>]) {
        let mask = PeerDeath::deaths(watch, |r, d| self.rail_domain(r).peers().in_force(d));
        let known = st.peers.get(&token).map_or(0, |ps| ps.dead);
        if mask & !known != 0 {
            if let Some(ps) = st.peers.get_mut(&token) {
                ps.judged |= mask;
            }
            self.peer_lost_rails(st, token, mask & !known);
        }
    }

    /// Polls send `id`'s parts, then posts the parts its rails now have
    /// room for ([`pump`](Self::pump)).
    fn poll_send(&self, st: &mut State, id: u64) {
        self.poll_send_parts(st, id);
        self.pump(st);
    }

    /// Folds the rate samples of the parts that finished into the rates.
    fn learn(&self, st: &mut State) {
        for load in [&self.load, &self.send_load] {
            for (rail, bytes, took) in load.take_samples() {
                st.rates.sample(rail, bytes, took);
            }
        }
    }

    /// Posts the queued parts of striped sends that their rails have room
    /// for ([`PartQueue`]): each rail's next parts, in order, while its
    /// parts in flight leave room; then polls the sends that got parts
    /// (which registers their wakers, and may finish them, leaving room
    /// for more). A part whose rail no longer serves its peer is left to
    /// the receiver, which asks for it on another rail.
    fn pump(&self, st: &mut State) {
        if st.pumping {
            return;
        }
        st.pumping = true;
        let mut posted: Vec<u64> = Vec::new();
        let mut lost: Vec<(u64, u64)> = Vec::new();
        loop {
            if st.queue.is_empty() {
                break;
            }
            for rail in 0..self.rails.len() {
                while self.pump_one(st, rail, &mut posted, &mut lost) {}
            }
            if posted.is_empty() {
                break;
            }
            posted.sort_unstable();
            posted.dedup();
            for id in std::mem::take(&mut posted) {
                self.poll_send_parts(st, id);
            }
        }
        st.pumping = false;
        for (token, mask) in lost {
            self.peer_lost_rails(st, token, mask);
        }
    }

    /// Posts the next queued part on `rail` if it has room; whether it did
    /// (or dropped a part that can no longer go there).
    fn pump_one(
        &self,
        st: &mut State,
        rail: usize,
        posted: &mut Vec<u64>,
        lost: &mut Vec<(u64, u64)>,
    ) -> bool {
        let in_flight = self.send_load.in_flight(rail);
        let sends = &st.sends;
        let next = st.queue.next(rail, in_flight, |p| {
            sends
                .get(p.xfer)
                .is_some_and(|x| x.queued & (1 << p.part) != 0)
        });
        match next {
            Some(p) => self.post_queued(st, rail, p, posted, lost),
            None if in_flight.0 == 0 => self.steal_for(st, rail, posted, lost),
            None => false,
        }
    }

    /// `thief` has nothing in flight and nothing queued: it takes the part
    /// another rail of the same peer would reach last
    /// ([`PartQueue::steal`]), unless their rates say that rail would
    /// still finish it first, tells the receiver
    /// ([`Frame::Moved`]) and sends it. Whether it did.
    fn steal_for(
        &self,
        st: &mut State,
        thief: usize,
        posted: &mut Vec<u64>,
        lost: &mut Vec<(u64, u64)>,
    ) -> bool {
        let live = st.live;
        let (sends, peers) = (&st.sends, &st.peers);
        let stolen = st.queue.steal(thief, |from, p| {
            let x = sends.get(p.xfer)?;
            if x.queued & (1 << p.part) == 0 {
                return None;
            }
            let usable = peers
                .get(&x.entry.addr.token())
                .map_or(0, |ps| ps.rails(live));
            let both = rail_bit(thief) | rail_bit(from);
            Some(x.rails & rail_bit(thief) != 0 && usable & both == both && x.accepted.is_some())
        });
        let Some((from, p)) = stolen else {
            return false;
        };
        // The other rail reaches the part after what it has in flight and
        // queued; the thief at once.
        if let (Some(mine), Some(theirs)) = (st.rates.rate(thief), st.rates.rate(from)) {
            let backlog =
                self.send_load.in_flight(from).1 + st.queue.queued(from) as u64 * p.len + p.len;
            if p.len as f64 / mine >= backlog as f64 / theirs {
                st.queue.push(from, p);
                return false;
            }
        }
        let Some(x) = st.sends.get_mut(p.xfer) else {
            return false;
        };
        let Some((recv_id, plan)) = x.accepted.as_mut() else {
            return false;
        };
        plan.move_part(p.part, thief);
        let frame = Frame::Moved {
            source: self.token,
            send_id: p.xfer,
            recv_id: *recv_id,
            part: p.part,
            // An endpoint has at most 64 rails.
            rail: thief as u8,
        };
        if let Err(e) = self.ctrl(thief, &x.entry, &frame) {
            tracing::debug!("mrail: moving part {} to rail {thief}: {e}", p.part);
            plan.move_part(p.part, from);
            st.queue.push(from, p);
            return false;
        }
        self.post_queued(st, thief, p, posted, lost)
    }

    /// Posts queued part `p` on `rail`; whether it was still wanted.
    fn post_queued(
        &self,
        st: &mut State,
        rail: usize,
        p: QueuedPart,
        posted: &mut Vec<u64>,
        lost: &mut Vec<(u64, u64)>,
    ) -> bool {
        let Some(x) = st.sends.get_mut(p.xfer) else {
            return true;
        };
        x.queued &= !(1 << p.part);
        let token = x.entry.addr.token();
        let usable = st.peers.get(&token).map_or(0, |ps| ps.rails(st.live));
        let Some(x) = st.sends.get_mut(p.xfer) else {
            return true;
        };
        let target = x
            .accepted
            .as_ref()
            .and_then(|(recv_id, plan)| Some((*recv_id, *plan.part(p.part)?)));
        let Some((recv_id, stripe)) = target else {
            return true;
        };
        if usable & rail_bit(rail) == 0 || stripe.rail != rail {
            // Its rail lost the peer meanwhile: the receiver asks for the
            // part elsewhere.
            return true;
        }
        let Some(window) = x.shared.window(stripe.offset, stripe.len) else {
            return true;
        };
        let sent = self.post_part_send(&x.entry, rail, data_tag(recv_id, p.part), window, true);
        let Some(striped) = x.striped.as_mut() else {
            return true;
        };
        match sent {
            Ok(part) => {
                // A part already done (the receiver said it landed) hands
                // its attempt back: it is dropped, its send abandoned.
                drop(striped.join.add_attempt(usize::from(p.part), part));
            }
            Err(e) if rail_lost(e.kind()) => lost.push((token, rail_bit(rail))),
            Err(e) => {
                // The send fails once its posted parts are done.
                striped.join.fail_open(&e);
                x.queued = 0;
            }
        }
        posted.push(p.xfer);
        true
    }

    fn poll_send_parts(&self, st: &mut State, id: u64) {
        let Some((token, watch)) = st
            .sends
            .get(id)
            .map(|x| (x.entry.addr.token(), x.watch.clone()))
        else {
            return;
        };
        self.note_deaths(st, token, &watch);
        let joined = st.sends.get_mut(id).and_then(|x| x.poll());
        // Parts that finished taught their rails' rates.
        self.learn(st);
        let Some(joined) = joined else {
            return;
        };
        let mut x = st.sends.remove(id).expect("present");
        x.spans.end(&joined);
        let result = match joined.error {
            None => Ok(Done {
                len: x.len as usize,
                tag: 0,
                source: FiAddr::UNSPEC,
            }),
            Some(e) => Err(e),
        };
        // Attempts on rails given up on stay with their engines; the
        // buffer comes back as a copy if one still reads it.
        if let Some(s) = x.striped.as_mut() {
            drop(s.join.take_pending());
        }
        drop(x.striped);
        let buf = match SharedBuffer::reclaim(x.shared) {
            Ok(buf) => buf,
            Err(shared) => OpBuffer::from(shared.copy_out(&[])),
        };
        self.finish(x.sink, Dir::Send, x.class, result, buf);
    }

    fn poll_recv(&self, st: &mut State, id: u64) {
        let Some((token, watch)) = st
            .recvs
            .get(id)
            .map(|x| (x.entry.addr.token(), x.watch.clone()))
        else {
            return;
        };
        self.note_deaths(st, token, &watch);
        let joined = st.recvs.get_mut(id).and_then(|x| x.poll());
        self.learn(st);
        let Some(joined) = joined else {
            return;
        };
        let mut x = st.recvs.remove(id).expect("present");
        x.spans.end(&joined);
        for p in &joined.parts {
            if let Some(rs) = self.stats.rails.get(p.rail) {
                bump(&rs.bytes_received, p.bytes as u64);
            }
        }
        let result = match &joined.error {
            Some(e) => Err(Error::new(e.kind(), e.message().to_owned())),
            None if x.accepted < x.msg_len => Err(Error::truncated(
                Truncation {
                    msg_len: x.msg_len,
                    received: x.accepted as usize,
                },
                recv_name(x.class),
            )),
            None => Ok(Done {
                len: x.accepted as usize,
                tag: x.tag,
                source: FiAddr(u64::from(x.source)),
            }),
        };
        if let Some(s) = x.striped.as_mut() {
            drop(s.join.take_pending());
        }
        drop(x.striped);
        let buf = received_buffer(x.shared, &x.plan, x.rerouted, &joined);
        self.finish(x.sink, Dir::Recv, x.class, result, buf);
    }

    fn poll_eager(&self, st: &mut State, id: u64) {
        let Some(x) = st.eagers.get_mut(id) else {
            return;
        };
        let Some(part) = x.part.as_mut() else {
            return;
        };
        let waker = x.waker.clone();
        let Poll::Ready(PartOutput { rail, result }) =
            std::pin::Pin::new(part).poll(&mut Context::from_waker(&waker))
        else {
            return;
        };
        let x = st.eagers.remove(id).expect("present");
        let result = match result {
            Err(e) if rail_lost(e.kind()) => {
                self.peer_lost_rails(st, x.token, rail_bit(rail));
                // The frame is in the resend log: it goes again on another
                // rail that serves the peer, or that comes back to it.
                let served = st
                    .peers
                    .get(&x.token)
                    .is_some_and(|ps| ps.rails(st.live) != 0 || ps.stranded.is_some());
                if served {
                    Ok(0)
                } else {
                    // It failed: it must not arrive once a rail is back.
                    if let Some(ps) = st.peers.get(&x.token) {
                        for (pos, _, logged) in ps.log.iter() {
                            if pos as u32 == x.seq {
                                logged.withdrawn.set(true);
                            }
                        }
                    }
                    Err(e)
                }
            }
            r => r,
        };
        let result = result.map(|_| Done {
            len: x.len,
            tag: 0,
            source: FiAddr::UNSPEC,
        });
        self.finish(x.sink, Dir::Send, x.class, result, x.buf);
    }

    // ----- failover --------------------------------------------------------

    /// The rails usable towards the peer `token` (in service here, not
    /// lost for that peer), remembering its entry; `None` when the peer
    /// cannot have sequence state.
    fn peer_rails(&self, st: &mut State, token: u64, entry: &Arc<PeerEntry>) -> Option<u64> {
        let live = st.live;
        let ps = st.peer(token, true)?;
        if ps.entry.is_some() {
            return Some(ps.rails(live));
        }
        ps.entry = Some(entry.clone());
        self.first_use(st, entry);
        st.peers.get(&token).map(|ps| ps.rails(live))
    }

    /// The driver meets `entry`'s peer for the first time: a peer of a
    /// lazy address vector gets its rails connected now (`reconnect`
    /// starts them at the next housekeeping).
    fn first_use(&self, st: &mut State, entry: &Arc<PeerEntry>) {
        if !entry.take_first_use() {
            return;
        }
        let now = Instant::now();
        for r in 0..self.rails.len() {
            if entry.rail(r).is_none() {
                self.want_connect(st, entry, r, now);
            }
        }
        self.notify();
    }

    /// Why nothing can go to `entry`'s peer now: `Again` while one of its
    /// rails is connecting or sends wait for one (the call is to be made
    /// again after progress), else no rail is left.
    fn no_rail_now(&self, st: &State, token: u64) -> Error {
        let queued = st.waiting.iter().any(|w| w.entry.addr.token() == token);
        if queued || self.rail_coming(st, token) {
            return Error::new(
                ErrorKind::Again,
                format!("ofi_mrail: no rail serves peer {token:#x} yet (connecting)"),
            );
        }
        no_rail_error()
    }

    /// The next rail of `usable` for a failover choice, in turn.
    fn pick(st: &mut State, usable: u64) -> Option<usize> {
        if usable == 0 {
            return None;
        }
        let n = usable.count_ones() as usize;
        let k = st.next_failover % n;
        st.next_failover = st.next_failover.wrapping_add(1);
        (0..64).filter(|&r| usable & (1 << r) != 0).nth(k)
    }

    /// Rails in `lost` can no longer reach the peer `token` (its rail
    /// endpoint died or closed there, as a rail's peer book or a failed
    /// post says): they stay out for that peer, the peer is told, and
    /// what was in flight on them goes again elsewhere.
    fn peer_lost_rails(&self, st: &mut State, token: u64, lost: u64) {
        let Some(ps) = st.peers.get_mut(&token) else {
            return;
        };
        let new = lost & !ps.dead;
        if new == 0 {
            return;
        }
        let all = st.chooser.all_rails_mask();
        let was_reachable = ps.dead & all != all;
        ps.dead |= new;
        for r in (0..self.rails.len()).filter(|r| new & (1 << r) != 0) {
            bump(&self.stats.rails[r].errors, 1);
            tracing::warn!("mrail: peer {token:#x} is gone on rail {r}; failing over");
        }
        if was_reachable && ps.dead & all == all {
            bump(&self.stats.dead_peers, 1);
            tracing::info!(peer = %format_args!("{token:#x}"), "mrail: peer is gone on every rail");
        }
        for r in (0..self.rails.len()).filter(|r| new & (1 << r) != 0) {
            self.notice(st, token, r, false);
        }
        if let Some(entry) = st.peers.get(&token).and_then(|ps| ps.entry.clone()) {
            // At once on a rail in service (the next housekeeping), else
            // when it comes back.
            let now = Instant::now();
            for r in (0..self.rails.len()).filter(|r| new & rail_bit(*r) != 0) {
                self.want_connect(st, &entry, r, now);
            }
        }
        self.fail_over(st, token);
    }

    /// Sends what is in flight towards `token` on rails it can no longer
    /// use again on the ones it can: its unacknowledged frames, and the
    /// parts of the messages it is sending us. With no rail left, its
    /// transfers fail; once a rail serves again after that, the two sides
    /// resynchronise ([`resync`](Self::resync)).
    fn fail_over(&self, st: &mut State, token: u64) {
        let Some(ps) = st.peers.get(&token) else {
            return;
        };
        let Some(entry) = ps.entry.clone() else {
            return;
        };
        let usable = ps.rails(st.live);
        if usable == 0 {
            let lost = (ps.dead | ps.peer_down | !st.live) & st.chooser.all_rails_mask();
            let since = ps.stranded;
            let now = Instant::now();
            let patience = self.rail_domain(0).config().timeout();
            let waited = since.is_some_and(|t| now.saturating_duration_since(t) >= patience);
            if self.rail_coming(st, token) && !waited {
                // A rail may serve it again soon: what is in flight waits.
                if since.is_none() {
                    if let Some(ps) = st.peers.get_mut(&token) {
                        ps.stranded = Some(now);
                    }
                    st.stranded.push(token);
                }
                return;
            }
            if let Some(ps) = st.peers.get_mut(&token) {
                ps.stranded = None;
            }
            self.fail_peer(st, token, lost);
            return;
        }
        if let Some(ps) = st.peers.get_mut(&token) {
            ps.stranded = None;
        }
        let Some(ps) = st.peers.get(&token) else {
            return;
        };
        // Asked lately: the answer is on its way (a storm of asks would
        // only repeat it).
        let asked_lately = ps.asked.is_some_and(|t| t.elapsed() < RESYNC_SOON);
        if ps.answer_owed || (ps.hold && !asked_lately) {
            self.resync(st, token, &entry, usable);
        } else if !ps.hold {
            self.resend_log(st, token, &entry, usable);
        }
        for id in st.recvs.ids_where(|x| x.entry.addr.token() == token) {
            self.reroute_recv(st, id, usable);
        }
        for id in st.sends.ids_where(|x| x.entry.addr.token() == token) {
            self.query_parts(st, id, usable);
        }
    }

    /// Asks the receiver of send `id` what became of each part whose only
    /// attempts are on rails outside `usable`: it may have arrived (the
    /// send's completion lost with its rail) or need sending again.
    fn query_parts(&self, st: &mut State, id: u64, usable: u64) {
        let all = st.chooser.all_rails_mask();
        let Some(x) = st.sends.get(id) else {
            return;
        };
        let (Some((recv_id, _)), Some(striped)) = (x.accepted.as_ref(), x.striped.as_ref()) else {
            return;
        };
        let parts = striped.join.open_only_on(all & !usable);
        if parts.is_empty() {
            return;
        }
        let (recv_id, entry) = (*recv_id, x.entry.clone());
        let Some(to) = Self::pick(st, usable) else {
            return;
        };
        for k in parts {
            let q = Frame::PartQuery {
                source: self.token,
                send_id: id,
                recv_id,
                part: k as u8,
            };
            if let Err(e) = self.ctrl(to, &entry, &q) {
                tracing::warn!("mrail: asking after part {k} of send {id:#x}: {e}");
            }
        }
    }

    /// The sender asks after part `part` of its message (failover): if it
    /// arrived, or the receive is over, the answer is that it landed; if it
    /// is still open on lost rails only, it is asked for again elsewhere;
    /// if an attempt on a usable rail is pending, nothing (that one was
    /// asked for already).
    fn on_part_query(&self, st: &mut State, source: u64, send_id: u64, recv_id: u64, part: u8) {
        let Some(p) = self.known(source) else {
            return;
        };
        let open = match st.recvs.get(recv_id) {
            Some(x) if x.entry.addr.token() == source && x.send_id == send_id => x
                .striped
                .as_ref()
                .is_some_and(|s| s.join.is_open(usize::from(part))),
            Some(_) => {
                self.malformed("a PartQuery that does not fit its receive");
                return;
            }
            None => false,
        };
        if open {
            let usable = st.peers.get(&source).map_or(0, |ps| ps.rails(st.live));
            self.reroute_recv(st, recv_id, usable);
            return;
        }
        let Some(entry) = self.av.entry(p) else {
            return;
        };
        let usable = self.peer_rails(st, source, &entry).unwrap_or(0);
        let Some(to) = Self::pick(st, usable) else {
            return;
        };
        let answer = Frame::Reroute {
            source: self.token,
            send_id,
            recv_id,
            part,
            rail: header::LANDED,
        };
        let _ = self.ctrl(to, &entry, &answer);
    }

    /// Sends the peer's unacknowledged frames that went on a rail outside
    /// `usable` again, on a rail of `usable`. The receiver drops what it
    /// already had (by sequence number).
    fn resend_log(&self, st: &mut State, token: u64, entry: &PeerEntry, usable: u64) {
        let Some(to) = Self::pick(st, usable) else {
            return;
        };
        let Some(ps) = st.peers.get(&token) else {
            return;
        };
        let mut n = 0u64;
        for (pos, _, logged) in ps.log.iter() {
            if usable & rail_bit(logged.rail.get()) != 0 {
                continue;
            }
            let sent = entry
                .on_rail(to)
                .and_then(|peer| self.send_logged(to, peer, pos, logged));
            if let Err(e) = sent {
                self.note_lost(token, to, &e);
                tracing::warn!("mrail: resending a frame on rail {to}: {e}");
                break;
            }
            logged.rail.set(to);
            logged.sent.set(Instant::now());
            n += 1;
        }
        if n > 0 {
            bump(&self.stats.rails[to].retransmits, n);
            tracing::debug!("mrail: {n} frames to peer {token:#x} sent again on rail {to}");
        }
    }

    /// Sends the logged frame at position `pos` again on `rail`: its bytes,
    /// or the [`Frame::Withdraw`] of a request whose send gave up.
    fn send_logged(&self, rail: usize, peer: PeerAddr, pos: u64, logged: &Logged) -> Result<()> {
        if !logged.withdrawn.get() {
            return self.send_raw(rail, peer, &logged.frame);
        }
        // Send ids are never 0 (their generations start at 1): 0 names an
        // eager message.
        let frame = Frame::Withdraw {
            seq: pos as u32,
            source: self.token,
            send_id: logged.send_id.unwrap_or(0),
        };
        self.send_control(rail, peer, &frame)
    }

    /// Sends `frame` (a whole control frame) on `rail`: an inject when it
    /// fits, else a send whose completion nobody waits for.
    fn send_raw(&self, rail: usize, peer: PeerAddr, frame: &[u8]) -> Result<()> {
        let direct = self.rail_domain(rail).direct();
        if frame.len() <= RAIL_INJECT {
            return direct
                .inject(peer, CTRL_TAG, frame)
                .map_err(|e| rail_error(rail, "resend", e));
        }
        let key = direct
            .isend_keyed(peer, CTRL_TAG, SendMode::Standard, frame.to_vec().into())
            .map_err(|e| rail_error(rail, "resend", e.error))?;
        drop(self.rail_domain(rail).table().abandon(key));
        Ok(())
    }

    /// Asks again, on rails of `usable`, for the parts of receive `id`
    /// whose every attempt is on a rail outside it; first sends the CTS
    /// again if its rail is outside it.
    fn reroute_recv(&self, st: &mut State, id: u64, usable: u64) {
        let all = st.chooser.all_rails_mask();
        let (parts, cts_lost) = match st.recvs.get(id) {
            Some(x) => match x.striped.as_ref() {
                Some(s) => (
                    s.join.open_only_on(all & !usable),
                    usable & (1 << x.via) == 0,
                ),
                None => return,
            },
            None => return,
        };
        if parts.is_empty() && !cts_lost {
            return;
        }
        let mut rails = Vec::with_capacity(parts.len() + 1);
        for _ in 0..=parts.len() {
            rails.push(Self::pick(st, usable).expect("usable is not empty"));
        }
        let Some(x) = st.recvs.get_mut(id) else {
            return;
        };
        let entry = x.entry.clone();
        if cts_lost {
            let to = rails[parts.len()];
            if self.ctrl(to, &entry, &x.cts).is_ok() {
                x.via = to;
                bump(&self.stats.rails[to].retransmits, 1);
            }
        }
        for (k, &to) in parts.iter().zip(&rails) {
            let Some(stripe) = x.plan.part(*k as u8).copied() else {
                continue;
            };
            // The new attempt lands in a buffer of its own: the old one
            // may still write the user's window when its rail comes back.
            let Ok(temp) =
                SharedBuffer::share(OpBuffer::from(vec![0u8; stripe.len as usize]), true)
            else {
                continue;
            };
            let Some(window) = temp.window(0, stripe.len) else {
                continue;
            };
            let tags = TagMatch::exact(data_tag(id, stripe.part));
            let domain = self.rail_domain(to);
            let key = match domain.direct().irecv_keyed(tags, window) {
                Ok(k) => k,
                Err(e) => {
                    tracing::warn!("mrail: part {k} again on rail {to}: {}", e.error);
                    continue;
                }
            };
            let part = RailPart::new(domain.clone(), key, to, true, None);
            let Some(striped) = x.striped.as_mut() else {
                return;
            };
            let Ok(attempt) = striped.join.add_attempt(*k, part) else {
                continue;
            };
            x.rerouted.push((*k, attempt, temp));
            let frame = Frame::Reroute {
                source: self.token,
                send_id: x.send_id,
                recv_id: id,
                part: stripe.part,
                rail: to as u8,
            };
            if let Err(e) = self.ctrl(to, &entry, &frame) {
                tracing::warn!("mrail: asking for part {k} on rail {to}: {e}");
            }
            bump(&self.stats.rails[to].retransmits, 1);
        }
        // Parts that could not be asked for stay stalled until another
        // rail serves (or the transfer fails with the peer). The new
        // attempts' wakers are registered by polling the transfer.
        self.poll_recv(st, id);
    }

    /// No rail reaches the peer `token` any more: its transfers fail with
    /// `FI_EIO` naming the rails.
    fn fail_peer(&self, st: &mut State, token: u64, lost: u64) {
        let rails: Vec<String> = (0..self.rails.len())
            .filter(|r| lost & (1 << r) != 0)
            .map(|r| r.to_string())
            .collect();
        let error = || {
            Error::new(
                ErrorKind::Io,
                format!(
                    "ofi_mrail: no rail is left to peer {token:#x} (rails {} lost)",
                    rails.join(", ")
                ),
            )
        };
        let mut gave_up = Vec::new();
        for id in st.sends.ids_where(|x| x.entry.addr.token() == token) {
            if let Some(x) = st.sends.remove(id) {
                gave_up.push((x.seq, id));
                let buf = give_back(x.striped, x.shared);
                self.finish(x.sink, Dir::Send, x.class, Err(error()), buf);
            }
        }
        let mut refused = Vec::new();
        for id in st.recvs.ids_where(|x| x.entry.addr.token() == token) {
            if let Some(x) = st.recvs.remove(id) {
                refused.push(x.send_id);
                let buf = give_back(x.striped, x.shared);
                self.finish(x.sink, Dir::Recv, x.class, Err(error()), buf);
            }
        }
        // Its requests to send that wait unmatched go too: its sends of
        // them failed as well (or hear the refusal), so no receive posted
        // later may take them.
        if let Some(p) = self.av.index_of_token(token) {
            let waiting = st
                .matcher
                .take_unexpected(|spec, a| spec.source == p && matches!(a, Arrival::Rts { .. }));
            refused.extend(waiting.into_iter().filter_map(|(_, a)| match a {
                Arrival::Rts { send_id, .. } => Some(send_id),
                Arrival::Eager(_) => None,
            }));
        }
        // When a rail is back, the peer hears what we gave up and gets
        // again what it may have lost; until then its frames wait.
        let Some(ps) = st.peers.get_mut(&token) else {
            return;
        };
        if !ps.hold {
            tracing::info!(
                peer = %format_args!("{token:#x}"),
                "mrail: no rail is left to the peer; its transfers failed, the rest waits for a rail"
            );
            st.holding.push(token);
        }
        let Some(ps) = st.peers.get_mut(&token) else {
            return;
        };
        ps.hold = true;
        ps.asked = None;
        ps.owed_nacks.extend(refused);
        for (_, _, logged) in ps.log.iter() {
            logged.rail.set(NO_RAIL);
            if logged
                .send_id
                .is_some_and(|id| gave_up.iter().any(|g| g.1 == id))
            {
                logged.withdrawn.set(true);
            }
        }
        ps.withdraws.extend(gave_up);
    }

    /// Every rail to the peer `token` was lost and `usable` serves it
    /// again (or it asked): sends again, on one rail of `usable`, every
    /// frame it has not acknowledged (a [`Frame::Withdraw`] for each
    /// request whose send gave up), the refusals owed, then our
    /// [`Frame::Resync`] (asking for the peer's while we hold its frames).
    /// On the same rail, so the peer has all of it before the Resync.
    fn resync(&self, st: &mut State, token: u64, entry: &PeerEntry, usable: u64) {
        let Some(to) = Self::pick(st, usable) else {
            return;
        };
        let Ok(peer) = entry.on_rail(to) else {
            return;
        };
        let Some(ps) = st.peers.get_mut(&token) else {
            return;
        };
        if ps.hold {
            // Asked again only after a while, whatever happens now.
            ps.asked = Some(Instant::now());
        }
        let mut n = 0u64;
        let mut failed = None;
        for (pos, _, logged) in ps.log.iter() {
            if let Err(e) = self.send_logged(to, peer, pos, logged) {
                failed = Some(e);
                break;
            }
            logged.rail.set(to);
            logged.sent.set(Instant::now());
            n += 1;
        }
        if let Some(e) = failed {
            self.resync_failed(st, token, to, e);
            return;
        }
        for &(seq, send_id) in &ps.withdraws {
            let w = Frame::Withdraw {
                seq,
                source: self.token,
                send_id,
            };
            let _ = self.send_control(to, peer, &w);
        }
        if !ps.hold {
            // An answer: the peer's Resync came, it has these by now.
            ps.withdraws.clear();
        }
        for send_id in std::mem::take(&mut ps.owed_nacks) {
            let nack = Frame::Nack {
                source: self.token,
                send_id,
                reason: NackReason::Cancelled,
            };
            let _ = self.send_control(to, peer, &nack);
        }
        let frame = Frame::Resync {
            source: self.token,
            upto: ps.tx.peek(),
            ask: ps.hold,
        };
        if let Err(e) = self.send_control(to, peer, &frame) {
            self.resync_failed(st, token, to, e);
            return;
        }
        ps.answer_owed = false;
        if n > 0 {
            bump(&self.stats.rails[to].retransmits, n);
        }
        tracing::debug!(
            "mrail: {n} frames to peer {token:#x} sent again on rail {to}, then a resync"
        );
        // What it heard of our rails meanwhile may be stale.
        self.announce(st, token);
    }

    /// A resync with the peer `token` failed on `rail` with `e`: a rail
    /// that lost the peer is out for it (another is tried, and the rail
    /// reconnects); anything else waits for the next ask.
    fn resync_failed(&self, st: &mut State, token: u64, rail: usize, e: Error) {
        tracing::debug!("mrail: resynchronising with peer {token:#x} on rail {rail}: {e}");
        if rail_lost(e.kind()) {
            self.peer_lost_rails(st, token, rail_bit(rail));
        }
    }

    /// The peer's Resync: it sent again what we had not acknowledged, so
    /// its frames we held are delivered (if nothing is missing before
    /// `upto`); it asks for ours with `ask`.
    fn on_resync(&self, st: &mut State, source: u64, upto: u32, ask: bool) {
        let Some(entry) = self.entry_of(st, source) else {
            return;
        };
        let live = st.live;
        let Some(ps) = st.peers.get_mut(&source) else {
            return;
        };
        if ask {
            ps.answer_owed = true;
        }
        if ps.hold {
            if ps.rx.ready_to(upto) {
                ps.hold = false;
                if ps.asked.take().is_some() {
                    // Our withdrawals went before our ask, which it heard.
                    ps.withdraws.clear();
                }
                tracing::info!(
                    peer = %format_args!("{source:#x}"),
                    "mrail: resynchronised with the peer"
                );
                self.drain_ready(st, source, None, true);
            } else {
                // Something it sent again is not here yet: ask again soon.
                ps.asked = None;
            }
        }
        let Some(ps) = st.peers.get(&source) else {
            return;
        };
        if ps.answer_owed {
            let usable = ps.rails(live);
            self.resync(st, source, &entry, usable);
        }
    }

    /// The peer gave up its message `seq` (its request to send `send_id`,
    /// or an eager message: `send_id` 0): the withdrawal takes the
    /// message's place, or, if the message came already, a request that
    /// waits is dropped and a receive that matched it fails.
    fn on_withdraw(&self, st: &mut State, source: u64, seq: u32, send_id: u64) {
        let Some(p) = self.known(source) else {
            return;
        };
        let Some(ps) = st.peer(source, true) else {
            return;
        };
        match ps.rx.accept(seq, None) {
            Ok(()) => {
                if !ps.hold {
                    self.drain_ready(st, source, None, true);
                }
                return;
            }
            Err(ReorderError::TooFar(_)) => {
                bump(&self.stats.beyond_window, 1);
                return;
            }
            Err(ReorderError::Duplicate(_)) => {}
        }
        let is_it = |a: &Arrival| matches!(a, Arrival::Rts { send_id: id, .. } if *id == send_id);
        // Held, not delivered yet: it becomes a gap filled (its sequence
        // number is the message's own).
        let held = match ps.rx.get_mut(seq) {
            Some(item) => {
                if let Some((_, a)) = item.take() {
                    ps.held_bytes -= a.held_bytes();
                }
                true
            }
            None => false,
        };
        if !held
            && send_id != 0
            && st
                .matcher
                .take_unexpected(|spec, a| spec.source == p && is_it(a))
                .is_empty()
        {
            let matched = st
                .recvs
                .ids_where(|x| x.entry.addr.token() == source && x.send_id == send_id);
            for id in matched {
                if let Some(x) = st.recvs.remove(id) {
                    let e = Error::new(
                        ErrorKind::Io,
                        format!(
                            "{}: the sender gave up the message (no rail was left to it)",
                            recv_name(x.class)
                        ),
                    );
                    let buf = give_back(x.striped, x.shared);
                    self.finish(x.sink, Dir::Recv, x.class, Err(e), buf);
                }
            }
        }
        // Sent again: the sender waits to hear.
        self.delivered(st, source, 1, true);
    }

    /// The peer `token`'s state with its address vector entry (made, and
    /// the entry looked up, if need be); `None` for a peer that is not in
    /// the address vector.
    fn entry_of(&self, st: &mut State, token: u64) -> Option<Arc<PeerEntry>> {
        if let Some(e) = st.peers.get(&token).and_then(|ps| ps.entry.clone()) {
            return Some(e);
        }
        let entry = self
            .av
            .index_of_token(token)
            .and_then(|i| self.av.entry(i))?;
        let ps = st.peer(token, true)?;
        ps.entry = Some(entry.clone());
        self.first_use(st, &entry);
        Some(entry)
    }

    /// Tells the peer `token` that our rail `rail` is out of service (on a
    /// rail it can use) or back (on that rail itself, and on another it
    /// can use: the peer may have had no other news of us). Notices are
    /// numbered, so one that waited on a stalled rail cannot undo a later
    /// one.
    fn notice(&self, st: &mut State, token: u64, rail: usize, up: bool) {
        let Some(ps) = st.peers.get(&token) else {
            return;
        };
        let Some(entry) = ps.entry.clone() else {
            return;
        };
        let usable = ps.rails(st.live);
        let itself = up
            && ps.dead & rail_bit(rail) == 0
            && st.live & rail_bit(rail) != 0
            && entry.rail(rail).is_some();
        let other = Self::pick(st, usable & !rail_bit(rail));
        st.notices = st.notices.wrapping_add(1).max(1);
        let frame = Frame::RailNotice {
            source: self.token,
            rail: rail as u8,
            up,
            number: st.notices,
        };
        let to = match (itself, other) {
            (true, Some(other)) => {
                let _ = self.ctrl(rail, &entry, &frame);
                other
            }
            (true, None) => rail,
            (false, Some(other)) => other,
            (false, None) => match Self::pick(st, usable) {
                Some(r) => r,
                None => return,
            },
        };
        let _ = self.ctrl(to, &entry, &frame);
    }

    /// The peer says its rail `rail` is out of service (or back), in its
    /// notice `number`.
    fn on_rail_notice(&self, st: &mut State, source: u64, rail: u8, up: bool, number: u32) {
        let rail = usize::from(rail);
        if rail >= self.rails.len() || self.known(source).is_none() {
            return;
        }
        if self.entry_of(st, source).is_none() {
            return;
        }
        let Some(ps) = st.peers.get_mut(&source) else {
            return;
        };
        if !ps.take_notice(rail, number) {
            // Older than one already taken (it waited on a rail).
            return;
        }
        let bit = rail_bit(rail);
        if up {
            if ps.peer_down & bit != 0 {
                ps.peer_down &= !bit;
                // What waits for a rail to the peer goes now.
                self.fail_over(st, source);
            }
            return;
        }
        if ps.peer_down & bit != 0 {
            return;
        }
        ps.peer_down |= bit;
        self.fail_over(st, source);
    }

    /// A rail of this endpoint changed state: the domain hears of it, the
    /// peers too, and what was in flight on a lost rail goes elsewhere.
    fn apply(&self, st: &mut State, event: RailEvent) {
        st.live = st.health.live_mask();
        tracing::info!(
            rail = event.rail,
            state = %event.state,
            reason = %event.reason,
            "mrail: rail {} is {} ({})",
            event.rail,
            event.state,
            event.reason
        );
        self.events.push(event);
        if event.state != RailState::Rejoining {
            // What the rail was measured at says nothing of it now.
            st.rates.forget(event.rail);
            self.load.forget(event.rail);
            self.send_load.forget(event.rail);
        }
        let tokens: Vec<u64> = st
            .peers
            .iter()
            .filter(|(_, ps)| ps.entry.is_some())
            .map(|(t, _)| *t)
            .collect();
        match event.state {
            RailState::Down => {
                bump(&self.stats.rails[event.rail].errors, 1);
                for &t in &tokens {
                    self.notice(st, t, event.rail, false);
                    self.fail_over(st, t);
                }
                if st.live == 0 {
                    // No rail at all: every transfer fails.
                    let lost = st.chooser.all_rails_mask();
                    for &t in &tokens {
                        self.fail_peer(st, t, lost);
                    }
                }
            }
            RailState::Up => {
                // Rails to connect to peers on it: now.
                for r in st.reconnects.iter_mut().filter(|r| r.rail == event.rail) {
                    if r.due.is_some() {
                        r.due = Some(event.at);
                        r.backoff = RECONNECT_MIN;
                    }
                }
                for &t in &tokens {
                    self.notice(st, t, event.rail, true);
                    // Frames left on rails that were all lost go now.
                    self.fail_over(st, t);
                }
            }
            RailState::Rejoining => {}
        }
    }

    /// Rail `rail` of this endpoint refused an operation as only a closed
    /// rail does: it leaves service for good.
    fn rail_broken(&self, st: &mut State, rail: usize) {
        if let Some(event) = st.health.close(rail, Instant::now()) {
            self.apply(st, event);
        }
    }

    /// Takes rail `rail` out of service (`true`) or puts it back.
    pub(crate) fn set_rail_disabled(&self, rail: usize, disabled: bool) -> Result<()> {
        if rail >= self.rails.len() {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "ofi_mrail: no rail {rail} (the endpoint has {})",
                    self.rails.len()
                ),
            ));
        }
        let mut st = relock(&self.state);
        if let Some(event) = st.health.set_disabled(rail, disabled, Instant::now()) {
            self.apply(&mut st, event);
        }
        drop(st);
        self.notify();
        Ok(())
    }

    /// An RMA stripe to `peer` failed on `rail` because the rail lost the
    /// peer: the rail is lost for that peer (as a transfer's would be),
    /// and another rail that can reach it is picked for the stripe.
    pub(crate) fn rail_lost_for_rma(&self, peer: &Arc<PeerEntry>, rail: usize) -> Option<usize> {
        let token = peer.addr.token();
        let mut st = relock(&self.state);
        let usable = self.peer_rails(&mut st, token, peer)?;
        if usable & (1 << rail) != 0 {
            self.peer_lost_rails(&mut st, token, 1 << rail);
        }
        let usable = self.peer_rails(&mut st, token, peer)?;
        Self::pick(&mut st, usable)
    }

    /// Each rail's state.
    pub(crate) fn rail_states(&self) -> Vec<RailState> {
        let st = relock(&self.state);
        (0..self.rails.len()).map(|r| st.health.state(r)).collect()
    }

    /// Acknowledges the frames of `token` delivered so far.
    fn send_ack(&self, st: &mut State, token: u64) {
        let live = st.live;
        let Some(ps) = st.peers.get_mut(&token) else {
            return;
        };
        ps.rx_unacked = 0;
        let (Some(entry), seq) = (ps.entry.clone(), ps.rx.expected()) else {
            return;
        };
        let usable = ps.rails(live);
        // On the fixed rail while it serves this peer, so that the rail a
        // ping-pong spins on stays the one the receiver polls first.
        let fixed = st.chooser.fixed_rail();
        let to = if usable & (1 << fixed) != 0 {
            fixed
        } else {
            match Self::pick(st, usable) {
                Some(r) => r,
                None => return,
            }
        };
        let _ = self.ctrl(
            to,
            &entry,
            &Frame::Ack {
                source: self.token,
                seq,
            },
        );
    }

    /// Sends the acknowledgements owed: all of them (`all`, their delay
    /// is over), or those owed for [`ACK_EVERY`] frames.
    fn send_owed_acks(&self, st: &mut State, all: bool) {
        let mut tokens = std::mem::take(&mut st.ack_pending);
        tokens.retain(|&t| {
            let Some(ps) = st.peers.get_mut(&t) else {
                return false;
            };
            if !all && ps.rx_unacked < ACK_EVERY {
                return true;
            }
            ps.ack_queued = false;
            if ps.rx_unacked > 0 {
                self.send_ack(st, t);
            }
            false
        });
        tokens.append(&mut st.ack_pending);
        st.ack_pending = tokens;
        if st.ack_pending.is_empty() {
            st.ack_due = None;
        }
    }

    /// `n` frames of `token` were delivered (or arrived twice): an
    /// acknowledgement goes after [`ACK_EVERY`] (at once where rails may
    /// be used, `may_send`, else at the next quiet moment), or within
    /// [`ACK_DELAY`].
    fn delivered(&self, st: &mut State, token: u64, n: u32, may_send: bool) {
        let needs_entry = st.peers.get(&token).is_some_and(|ps| ps.entry.is_none());
        if needs_entry {
            let entry = self.av.index_of_token(token).and_then(|i| self.av.entry(i));
            if let Some(ps) = st.peers.get_mut(&token) {
                ps.entry = entry;
            }
        }
        let Some(ps) = st.peers.get_mut(&token) else {
            return;
        };
        if ps.entry.is_none() {
            return;
        }
        ps.rx_unacked = ps.rx_unacked.saturating_add(n);
        if ps.rx_unacked >= ACK_EVERY && may_send {
            self.send_ack(st, token);
        } else if ps.rx_unacked >= ACK_EVERY {
            if !ps.ack_queued {
                ps.ack_queued = true;
                st.ack_pending.push(token);
            }
            st.ack_now = true;
            self.chores_due.store(true, Ordering::Relaxed);
        } else if !ps.ack_queued {
            ps.ack_queued = true;
            st.ack_pending.push(token);
            if st.ack_due.is_none() {
                st.ack_due = Some(Instant::now() + ACK_DELAY);
            }
        }
    }

    /// The peer acknowledged our frames before `seq`: they leave its log.
    fn on_ack(&self, st: &mut State, source: u64, seq: u32) {
        let Some(ps) = st.peers.get_mut(&source) else {
            return;
        };
        let acked = ps.log.acked();
        let ahead = u64::from(seq.wrapping_sub(acked as u32));
        if ahead > ps.log.unacked() {
            // An older acknowledgement overtaken on another rail, or one
            // that is not ours to believe: nothing to release.
            return;
        }
        let Ok(released) = ps.log.ack(acked + ahead) else {
            return;
        };
        for (_, logged) in released {
            if st.frame_pool.len() < FRAME_POOL {
                st.frame_pool.push(logged.frame);
            }
        }
    }

    /// What is due by `now`: owed acknowledgements, a look at the links,
    /// rails whose back-off is over.
    fn housekeeping(&self, st: &mut State, now: Instant) -> bool {
        let mut moved = false;
        if st.ack_due.is_some_and(|t| t <= now) {
            st.ack_due = None;
            self.send_owed_acks(st, true);
            moved = true;
        }
        let mut events = Vec::new();
        if st.links.due(now) {
            for (r, up) in st.links.sample(now).into_iter().enumerate() {
                if let Some(e) = up.and_then(|up| st.health.observe_link(r, up, now)) {
                    events.push(e);
                }
            }
        }
        st.health.tick(now, &mut events);
        for e in events {
            self.apply(st, e);
            moved = true;
        }
        if !st.holding.is_empty() {
            moved |= self.ask_again(st, now);
        }
        moved |= self.reconnect(st, now);
        if !st.stranded.is_empty() {
            // Served again, still waiting, or waited long enough.
            for t in std::mem::take(&mut st.stranded) {
                if st.peers.get(&t).is_some_and(|ps| ps.stranded.is_some()) {
                    self.fail_over(st, t);
                }
                if st.peers.get(&t).is_some_and(|ps| ps.stranded.is_some())
                    && !st.stranded.contains(&t)
                {
                    st.stranded.push(t);
                }
            }
        }
        moved |= self.send_waiting(st, now);
        if now >= st.next_resend_check {
            st.next_resend_check = now + RESEND_CHECK;
            moved |= self.resend_overdue(st, now);
        }
        moved
    }

    /// Sends again the frames not acknowledged [`RESEND_AFTER`] after they
    /// went, on another rail of their peer's if one serves (module docs,
    /// "Failover"); the receiver drops the copies it has.
    fn resend_overdue(&self, st: &mut State, now: Instant) -> bool {
        let overdue = |l: &Logged| now.saturating_duration_since(l.sent.get()) >= RESEND_AFTER;
        let late: Vec<u64> = st
            .peers
            .iter()
            .filter(|(_, ps)| {
                ps.entry.is_some() && ps.log.iter().next().is_some_and(|(_, _, l)| overdue(l))
            })
            .map(|(t, _)| *t)
            .collect();
        let mut moved = false;
        for token in late {
            let Some(ps) = st.peers.get(&token) else {
                continue;
            };
            let (Some(entry), usable) = (ps.entry.clone(), ps.rails(st.live)) else {
                continue;
            };
            let first = ps
                .log
                .iter()
                .next()
                .map_or(NO_RAIL, |(_, _, l)| l.rail.get());
            let Some(to) =
                Self::pick(st, usable & !rail_bit(first)).or_else(|| Self::pick(st, usable))
            else {
                continue;
            };
            let Ok(peer) = entry.on_rail(to) else {
                continue;
            };
            let Some(ps) = st.peers.get(&token) else {
                continue;
            };
            let mut n = 0u64;
            for (pos, _, logged) in ps.log.iter() {
                if !overdue(logged) {
                    continue;
                }
                if let Err(e) = self.send_logged(to, peer, pos, logged) {
                    self.note_lost(token, to, &e);
                    break;
                }
                logged.rail.set(to);
                logged.sent.set(now);
                n += 1;
            }
            if n > 0 {
                moved = true;
                bump(&self.stats.rails[to].retransmits, n);
                tracing::debug!(
                    "mrail: {n} frames to peer {token:#x} not acknowledged after {RESEND_AFTER:?}; sent again on rail {to}"
                );
            }
        }
        moved
    }

    /// Rail `rail` is to be connected to `entry`'s peer, tried from `due`
    /// on (sooner if it was already to be). Not for a peer whose death on
    /// the rail is for good (its endpoint closed, its process is gone).
    fn want_connect(&self, st: &mut State, entry: &Arc<PeerEntry>, rail: usize, due: Instant) {
        let token = entry.addr.token();
        if let Some(r) = st
            .reconnects
            .iter_mut()
            .find(|r| r.token == token && r.rail == rail)
        {
            if let Some(d) = r.due.as_mut() {
                *d = (*d).min(due);
            }
            return;
        }
        let lasting = entry.rail(rail).is_some_and(|p| {
            self.rail_domain(rail)
                .peers()
                .death_of(PeerRef::Peer(p))
                .is_some_and(|d| d.lasting())
        });
        if lasting {
            return;
        }
        st.reconnects.push(Reconnect {
            token,
            entry: entry.clone(),
            rail,
            due: Some(due),
            backoff: RECONNECT_MIN,
            refused: false,
        });
    }

    /// Rails to connect to peers (module docs, "Reconnecting"): takes the
    /// address vector's entries with rails that did not connect, what the
    /// connects under way gave, and starts those due on rails in service.
    fn reconnect(&self, st: &mut State, now: Instant) -> bool {
        for entry in self.av.take_incomplete() {
            for r in 0..self.rails.len() {
                if entry.rail(r).is_none() {
                    self.want_connect(st, &entry, r, now);
                }
            }
        }
        let done = std::mem::take(&mut *relock(&self.connects.done));
        let moved = !done.is_empty();
        for (token, rail, result) in done {
            self.connected(st, token, rail, result, now);
        }
        if st.reconnects.is_empty() {
            return moved;
        }
        let av = &self.av;
        st.reconnects
            .retain(|r| av.index_of_token(r.token).is_some());
        for rail in 0..self.rails.len() {
            if st.health.state(rail) != RailState::Up
                || self.connects.running[rail].load(Ordering::Acquire)
            {
                continue;
            }
            let mut job = Vec::new();
            for r in st.reconnects.iter_mut() {
                if r.rail == rail && r.due.is_some_and(|d| d <= now) {
                    r.due = None;
                    job.push((r.token, r.entry.addr.rails()[rail]));
                }
            }
            if !job.is_empty() {
                self.spawn_connect(st, rail, job, now);
            }
        }
        moved
    }

    /// Connects rail `rail` to the peers of `job` (token, epid) on a
    /// thread of its own, whose results the next housekeeping takes in.
    fn spawn_connect(&self, st: &mut State, rail: usize, job: Vec<(u64, Epid)>, now: Instant) {
        let engine = self.rail_domain(rail).engine().clone();
        let timeout = self.av.connect_timeout();
        let connects = self.connects.clone();
        let reactor = self.rail_domain(rail).reactor().clone();
        connects.running[rail].store(true, Ordering::Release);
        let tokens: Vec<u64> = job.iter().map(|j| j.0).collect();
        let spawned = std::thread::Builder::new()
            .name(format!("mrail-connect-{rail}"))
            .spawn(move || {
                let epids: Vec<Epid> = job.iter().map(|j| j.1).collect();
                let out = engine.connect(&epids, timeout);
                let results = job.iter().zip(out).map(|(j, r)| (j.0, rail, r));
                relock(&connects.done).extend(results);
                connects.running[rail].store(false, Ordering::Release);
                reactor.notify();
            });
        if let Err(e) = spawned {
            self.connects.running[rail].store(false, Ordering::Release);
            tracing::warn!("mrail: rail {rail}: cannot start connecting to peers: {e}");
            for t in tokens {
                let error = Error::new(ErrorKind::Again, format!("no thread to connect: {e}"));
                self.connected(st, t, rail, Err(error), now);
            }
        }
    }

    /// Rail `rail`'s connect to the peer `token` gave `result`: connected,
    /// the rail serves the peer (again), the peer hears it, and what waits
    /// for a rail to it goes; else it is tried again after its back-off.
    fn connected(
        &self,
        st: &mut State,
        token: u64,
        rail: usize,
        result: Result<PeerAddr>,
        now: Instant,
    ) {
        let Some(i) = st
            .reconnects
            .iter()
            .position(|r| r.token == token && r.rail == rail)
        else {
            return;
        };
        let peer = match result {
            Ok(p) => p,
            Err(e) => {
                let r = &mut st.reconnects[i];
                tracing::debug!(
                    "mrail: rail {rail} did not connect to peer {token:#x}: {e}; again in {:?}",
                    r.backoff
                );
                r.due = Some(now + r.backoff);
                r.backoff = (r.backoff * 2).min(RECONNECT_MAX);
                r.refused |= says_gone(e.kind());
                return;
            }
        };
        let r = st.reconnects.swap_remove(i);
        r.entry.set_rail(rail, peer);
        self.rail_domain(rail).peers().revive(peer);
        if let Some(ps) = st.peers.get_mut(&token) {
            ps.dead &= !rail_bit(rail);
            ps.judged &= !rail_bit(rail);
        }
        tracing::info!(
            rail,
            peer = %format_args!("{token:#x}"),
            "mrail: rail {rail} connected to peer {token:#x}"
        );
        if self.entry_of(st, token).is_some() {
            self.announce(st, token);
            self.fail_over(st, token);
        }
    }

    /// Tells the peer `token` every rail's state (a rail of ours serves it
    /// again: notices sent meanwhile may not have reached it).
    fn announce(&self, st: &mut State, token: u64) {
        for r in 0..self.rails.len() {
            let up = st.health.state(r) == RailState::Up;
            self.notice(st, token, r, up);
        }
    }

    /// Asks again the peers whose Resync we wait for and have not asked
    /// lately (an ask, or the frames before it, may wait on a rail that
    /// has just come back); forgets those no longer held.
    fn ask_again(&self, st: &mut State, now: Instant) -> bool {
        let mut holding = std::mem::take(&mut st.holding);
        holding.retain(|t| st.peers.get(t).is_some_and(|ps| ps.hold));
        let live = st.live;
        let mut asked = false;
        for &t in &holding {
            let Some(ps) = st.peers.get(&t) else {
                continue;
            };
            let due = ps
                .asked
                .is_none_or(|at| now.saturating_duration_since(at) >= RESYNC_AGAIN);
            let usable = ps.rails(live);
            let Some(entry) = ps.entry.clone().filter(|_| due && usable != 0) else {
                continue;
            };
            self.resync(st, t, &entry, usable);
            asked = true;
        }
        holding.append(&mut st.holding);
        st.holding = holding;
        asked
    }

    // ----- closing ---------------------------------------------------------

    /// Ends everything: pool receives cancelled, pending receives and sends
    /// completed with `FI_ECANCELED` (their buffers handed back where the
    /// rails no longer hold them). Later posts fail with `FI_EOPBADSTATE`.
    pub(crate) fn close(&self) {
        for e in &self.engines {
            e.set_tag_hook(CTRL_TAG, None);
        }
        let mut st = relock(&self.state);
        if st.closed {
            return;
        }
        st.closed = true;
        for (rail, slots) in st.pool.iter_mut().enumerate() {
            let domain = self.rails[rail].domain();
            for s in slots.iter_mut() {
                if let Some(key) = s.key.take() {
                    let _ = domain.engine().cancel(key);
                    drop(domain.table().abandon(key));
                }
            }
        }
        let mut pending = Vec::new();
        while let Some((spec, recv)) = st.matcher.cancel(|_| true) {
            pending.push((spec.class, recv));
        }
        let sends: Vec<u64> = st.sends.ids_where(|_| true);
        let recvs: Vec<u64> = st.recvs.ids_where(|_| true);
        let eagers: Vec<u64> = st.eagers.ids_where(|_| true);
        let waiting = std::mem::take(&mut st.waiting);
        let closing = || Error::new(ErrorKind::Canceled, "the mrail endpoint closed");
        for id in sends {
            if let Some(x) = st.sends.remove(id) {
                let buf = drain_parts(x.striped, x.shared);
                self.finish(x.sink, Dir::Send, x.class, Err(closing()), buf);
            }
        }
        for id in recvs {
            if let Some(x) = st.recvs.remove(id) {
                let buf = drain_parts(x.striped, x.shared);
                self.finish(x.sink, Dir::Recv, x.class, Err(closing()), buf);
            }
        }
        for id in eagers {
            if let Some(x) = st.eagers.remove(id) {
                self.finish(x.sink, Dir::Send, x.class, Err(closing()), x.buf);
            }
        }
        for w in waiting {
            self.finish(w.sink, Dir::Send, w.class, Err(closing()), w.buf);
        }
        drop(st);
        for (class, recv) in pending {
            self.finish(recv.sink, Dir::Recv, class, Err(closing()), recv.buf);
        }
    }
}

impl ProgressSource for Driver {
    fn progress(&self) -> Progress {
        self.step_now(true)
    }
}

/// Direction of an operation, for its counter and CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Send,
    Recv,
}

fn flags_of(dir: Dir, class: MsgClass) -> CompletionFlags {
    let c = match class {
        MsgClass::Msg => CompletionFlags::MSG,
        MsgClass::Tagged => CompletionFlags::TAGGED,
    };
    c | match dir {
        Dir::Send => CompletionFlags::SEND,
        Dir::Recv => CompletionFlags::RECV,
    }
}

fn recv_name(class: MsgClass) -> &'static str {
    match class {
        MsgClass::Msg => "recv",
        MsgClass::Tagged => "trecv",
    }
}

fn send_name(class: MsgClass) -> &'static str {
    match class {
        MsgClass::Msg => "send",
        MsgClass::Tagged => "tsend",
    }
}

/// Size of a pool buffer: the largest eager frame.
const POOL_BUFFER: usize = EAGER_HEADER_LEN + EAGER_MAX;

/// Rail `rail`'s bit in a mask of rails (none beyond 64 rails).
fn rail_bit(rail: usize) -> u64 {
    u32::try_from(rail)
        .ok()
        .and_then(|r| 1u64.checked_shl(r))
        .unwrap_or(0)
}

fn pool_buffer() -> OpBuffer {
    OpBuffer::from(vec![0u8; POOL_BUFFER])
}

/// Drops a transfer's parts (cancelling and abandoning what is still
/// posted) and takes the user's buffer back if no rail holds it any more
/// (otherwise an empty buffer: the rails' engines free it when done).
fn drain_parts(striped: Option<Striped>, shared: Arc<SharedBuffer>) -> OpBuffer {
    drop(striped);
    reclaim_or_empty(shared)
}

fn reclaim_or_empty(shared: Arc<SharedBuffer>) -> OpBuffer {
    SharedBuffer::reclaim(shared).unwrap_or_else(|_| OpBuffer::empty())
}

#[cold]
fn closed_error() -> Error {
    Error::new(ErrorKind::OpBadState, "the mrail endpoint is closed")
}

#[cold]
fn no_rail_error() -> Error {
    Error::new(ErrorKind::Io, "ofi_mrail: no rail is left to send on")
}

#[cold]
fn full_error() -> Error {
    Error::new(ErrorKind::Again, "ofi_mrail: too many transfers in flight")
}

#[cold]
fn header_error(e: header::HeaderError) -> Error {
    Error::new(
        ErrorKind::Other,
        format!("ofi_mrail: cannot encode a header: {e}"),
    )
}

#[cold]
fn rail_error(rail: usize, what: &str, e: Error) -> Error {
    Error::with_source(e.kind(), format!("rail {rail}: {what}: {}", e.message()), e)
}

/// Keeps a sequenced frame (its header and payload) in the peer's resend
/// log, in a buffer from the pool.
fn log_frame(st: &mut State, token: u64, rail: usize, frame: &Frame, payload: &[u8]) {
    let Some(ps) = st.peers.get_mut(&token) else {
        return;
    };
    let mut bytes = st.frame_pool.pop().unwrap_or_default();
    bytes.clear();
    if frame.append_to(&mut bytes).is_err() {
        return;
    }
    bytes.extend_from_slice(payload);
    let send_id = match *frame {
        Frame::Rts { send_id, .. } => Some(send_id),
        _ => None,
    };
    ps.log.push(
        1,
        Logged {
            rail: std::cell::Cell::new(rail),
            sent: std::cell::Cell::new(Instant::now()),
            frame: bytes,
            send_id,
            withdrawn: std::cell::Cell::new(false),
        },
    );
}

/// Drops a transfer's parts and hands its buffer back: the user's own, or
/// a copy when a rail it gave up on still holds a window (a send's
/// windows are only read, so its bytes are the user's).
fn give_back(striped: Option<Striped>, shared: Arc<SharedBuffer>) -> OpBuffer {
    drop(striped);
    match SharedBuffer::reclaim(shared) {
        Ok(buf) => buf,
        Err(shared) => OpBuffer::from(shared.copy_out(&[])),
    }
}

/// The buffer a striped receive hands back: the user's, with the parts
/// that landed in buffers of their own (after a failover) copied in; or,
/// when a rail given up on still holds a window of it, a copy of the
/// message assembled from the parts that landed.
fn received_buffer(
    shared: Arc<SharedBuffer>,
    plan: &StripePlan,
    rerouted: Vec<(usize, usize, Arc<SharedBuffer>)>,
    joined: &Joined,
) -> OpBuffer {
    let mut landed: Vec<(u64, OpBuffer)> = Vec::new();
    for (part, attempt, temp) in rerouted {
        let won = joined
            .parts
            .iter()
            .any(|p| p.part == part && p.attempt == attempt);
        let offset = plan.part(part as u8).map(|s| s.offset);
        if let (true, Some(offset), Ok(buf)) = (won, offset, SharedBuffer::reclaim(temp)) {
            landed.push((offset, buf));
        }
    }
    match SharedBuffer::reclaim(shared) {
        Ok(mut buf) => {
            if let Some(out) = buf.as_mut_slice() {
                for (offset, part) in &landed {
                    let at = *offset as usize;
                    if let Some(dst) = out.get_mut(at..at + part.len()) {
                        dst.copy_from_slice(part.as_slice());
                    }
                }
            }
            buf
        }
        Err(shared) => {
            let instead: Vec<(u64, &[u8])> =
                landed.iter().map(|(o, b)| (*o, b.as_slice())).collect();
            OpBuffer::from(shared.copy_out(&instead))
        }
    }
}
