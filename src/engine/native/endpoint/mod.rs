//! [`NativeEndpoint`]: one PSM endpoint behind the engine contract.
//!
//! The endpoint owns a psm-sys [`Endpoint`](psm_sys::Endpoint) (with its MQ
//! and AM handlers), the in-flight table (`inflight.rs`), the table of
//! connected peers and the AM bridge (`am.rs`), all behind one lock; the
//! module docs of [`native`](super) describe the locking, the routing of
//! completions, connecting and closing.
//!
//! # The hot path
//! A send is one lock, one check that the key is pending (for
//! `isend_keyed`: a key taken from the recycled ones, `key_recycler.rs`),
//! one lookup of the peer (a binary search over the connected addresses),
//! the PSM call and a store into the in-flight slot of the key. A receive
//! is the lock, the check (or key) and the store; PSM gets it at the
//! endpoint's next call into PSM (`post_unposted`). A progress step is one
//! try-lock and, with requests in flight, `psm_mq_ipeek` (which polls PSM
//! when nothing is completed) and `psm_mq_test` per completion, each
//! completion moved into the completion table; with nothing in flight it is
//! a single `psm_poll` (connections, active messages and unexpected
//! messages still need PSM to run). Nothing allocates once the tables have
//! grown to the largest number of operations in flight.
//!
//! The manual-mode fast path (`poll_op`) is one try-lock, `psm_mq_test` of
//! the waiting operation's request (with a `psm_poll` and a second test
//! while it runs), and, once it finished, the removal of its in-flight
//! entry, its key noted as spent (recycled when the endpoint is next
//! idle); `inject` is one lock, the peer
//! lookup and `psm_mq_send`.
//!
//! # Files
//!
//! This file holds the endpoint and its hot path (posts, progress, the
//! fast path); `peers.rs` the table of verified peers, `connect.rs`
//! connecting and the handshakes, `close.rs` closing, `loopback.rs` the
//! active messages an endpoint sends itself.

use super::am::{self, AmShared, LoopbackAm, LoopbackReply, HELLO_MAGIC};
use super::inflight::{Entry, InFlight, OpKind};
use super::key_recycler::KeyRecycler;
use super::lock::{LockError, SpinGuard, SpinLock};
use super::raw::{Peeked, RawMq, Req};
use super::{code_kind, map_psm_error, AM_ARGS_CAP, AM_PAYLOAD_CAP};
use crate::engine::{
    AmHandler, AmHandlerId, AmMessage, EndpointOptions, EngineEndpoint, EngineKind, EngineLimits,
    Epid, MqCompletion, MqStatus, OpBuffer, PeerAddr, PostError, SendMode, TagMatch,
};
use crate::reactor::{
    current_thread_affinity, CompletionTable, CpuSet, OpKey, Progress, ProgressSource,
};
use crate::{Error, ErrorKind, Result};
use psm_sys::device::Device;
use psm_sys::{ffi, AmFlags, EpAddr, ErrorCode, HandlerIndex, PsmBuild, PsmLibrary};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod close;
mod connect;
mod loopback;
mod peers;

use peers::{addr_value, Peers};

/// Most completions one progress step harvests.
const HARVEST_BUDGET: usize = 64;
/// Most `psm_poll` calls one fast-path test makes while its request is not
/// finished (see `step_for`).
const FAST_POLLS: u32 = 8;
/// How long `connect` and `close` pause after a step that moved nothing.
const IDLE_WAIT: Duration = Duration::from_micros(20);
/// The shortest wait libpsm2's `psm_ep_close` allows itself for connected
/// peers to disconnect (`PSMI_MIN_EP_CLOSE_TIMEOUT`; its longest,
/// `PSMI_MAX_EP_CLOSE_TIMEOUT`, is 2 s and what a forced close gets).
/// `close` keeps this much of a non-zero timeout for that call.
const PSM2_CLOSE_MIN_WAIT: Duration = Duration::from_secs(1);

/// The endpoint's state, behind its lock.
struct Inner {
    /// `None` once closed.
    ep: Option<psm_sys::Endpoint>,
    /// Requests PSM is working on.
    ops: InFlight,
    /// Connected peers and known sources.
    peers: Peers,
    /// Registered handlers, for engine-side loopback AM.
    handlers: Vec<Arc<dyn AmHandler>>,
    /// Loopback AMs waiting for the next progress step (TrueScale).
    loopback: Vec<LoopbackAm>,
    /// Keys of operations the fast path completed, and renewed keys for
    /// the next posts (`key_recycler.rs`).
    keys: KeyRecycler,
    /// Receives in the in-flight table not yet handed to PSM, in posting
    /// order, with their tag-select masks (see `post_unposted`).
    unposted: Vec<(OpKey, u64)>,
    /// `close` has started: no new operations.
    closing: bool,
}

/// The key of a post.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    /// The contract caller's (`isend`, `irecv`): checked.
    Given(OpKey),
    /// `isend_keyed` / `irecv_keyed`: taken under the lock, once the post's
    /// checks passed, from the endpoint's ready keys or the table
    /// ([`KeyRecycler::take`]); pending, and no in-flight entry is under it
    /// (an entry always leaves before its key is spent).
    New,
}

impl Key {
    /// The key the post goes under: the caller's, or a new one.
    #[inline(always)]
    fn take(self, keys: &mut KeyRecycler, table: &CompletionTable<MqCompletion>) -> OpKey {
        match self {
            Key::Given(op) => op,
            Key::New => keys.take(table),
        }
    }
}

/// The endpoint's lock, held (a thread coming back for it is refused:
/// see `lock.rs`).
type Locked<'a> = SpinGuard<'a, Inner>;

fn closed_error() -> Error {
    Error::new(ErrorKind::Inval, "native engine: the endpoint is closed")
}

fn closing_error() -> Error {
    Error::new(ErrorKind::Inval, "native engine: the endpoint is closing")
}

fn reentry_error() -> Error {
    Error::new(
        ErrorKind::Inval,
        "native engine: called back into the endpoint from code it runs under its lock \
         (an AM handler, a waker or a buffer's drop); queue the work and do it after",
    )
}

fn poisoned_error() -> Error {
    Error::new(
        ErrorKind::Other,
        "native engine: the endpoint's lock is poisoned (an AM handler panicked)",
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A PSM endpoint serving the engine contract; see the
/// [module docs](super) for how it works.
pub struct NativeEndpoint {
    inner: SpinLock<Inner>,
    completions: Arc<CompletionTable<MqCompletion>>,
    lib: &'static PsmLibrary,
    epid: Epid,
    uuid: [u8; 16],
    limits: EngineLimits,
    am: Arc<AmShared>,
    hello_request: HandlerIndex,
    /// The harvesting calls (valid while the endpoint is open).
    raw: RawMq,
    /// The build cannot run AM to itself: the engine delivers it.
    loopback_am: bool,
    /// Only the `self` device is enabled: every message is our own.
    self_only: bool,
    /// The statuses carry the sender (compat build).
    reports_source: bool,
    close_timeout: Duration,
    affinity_change: Option<(CpuSet, CpuSet)>,
}

impl std::fmt::Debug for NativeEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeEndpoint")
            .field("epid", &self.epid)
            .field("build", &self.lib.build())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl NativeEndpoint {
    /// Opens the PSM endpoint, its MQ and the handshake handlers.
    pub(super) fn open(lib: &'static PsmLibrary, options: &EndpointOptions) -> Result<Self> {
        let to_i32 = |what: &str, v: Option<u32>| -> Result<Option<i32>> {
            v.map(|v| {
                i32::try_from(v).map_err(|_| {
                    Error::new(
                        ErrorKind::Inval,
                        format!("native engine: device {what} {v} is out of range"),
                    )
                })
            })
            .transpose()
        };
        let open_options = psm_sys::OpenOptions {
            unit: to_i32("unit", options.unit)?,
            port: to_i32("port", options.port)?,
            ..psm_sys::OpenOptions::default()
        };
        let before = current_thread_affinity().ok();
        let mut ep =
            psm_sys::Endpoint::open_with(lib, &options.uuid, &open_options).map_err(open_error)?;
        let after = current_thread_affinity().ok();
        let affinity_change = match (before, after) {
            (Some(b), Some(a)) if a != b => {
                tracing::debug!(
                    "psm_ep_open changed the calling thread's CPU affinity from {b:?} to {a:?}"
                );
                Some((b, a))
            }
            _ => None,
        };
        ep.init_mq(ffi::PSM_MQ_ORDERMASK_ALL)
            .map_err(|e| map_psm_error(e, "psm_mq_init"))?;
        let params = ep
            .am_parameters()
            .map_err(|e| map_psm_error(e, "psm_am_get_parameters"))?;
        let devices = ep.devices().clone();
        let mq = ep.mq().map_err(|e| map_psm_error(e, "the MQ"))?;
        let rendezvous = if devices.has(Device::Hardware) {
            ffi::PSM_MQ_OPT_RNDV_IB_SZ
        } else {
            ffi::PSM_MQ_OPT_RNDV_SHM_SZ
        };
        let eager_threshold = mq
            .get_option_u32(rendezvous)
            .ok()
            .filter(|v| *v > 0)
            .map_or(EngineLimits::PSM_MINIMUM.eager_threshold, |v| v as usize);
        let reports_source = mq.reports_peer();
        let raw = RawMq::new(lib, ep.as_raw(), mq.as_raw());
        let clamp = |v: u32, cap: usize| (v as usize).min(cap);
        let limits = EngineLimits {
            max_message: u64::from(u32::MAX),
            eager_threshold,
            max_am_handlers: clamp(params.max_handlers.saturating_sub(2) / 2, am::MAX_HANDLERS),
            max_am_args: clamp(params.max_nargs, AM_ARGS_CAP),
            max_am_request: clamp(params.max_request_short, AM_PAYLOAD_CAP),
            max_am_reply: clamp(params.max_reply_short, AM_PAYLOAD_CAP),
        };
        let shared = AmShared::new(options.uuid, limits);
        let hello_request = am::register_hello(&mut ep, &shared)?;
        let build = lib.build();
        let epid = Epid(ep.epid().0);
        Ok(NativeEndpoint {
            inner: SpinLock::new(Inner {
                ep: Some(ep),
                ops: InFlight::default(),
                peers: Peers::default(),
                handlers: Vec::new(),
                loopback: Vec::new(),
                keys: KeyRecycler::default(),
                unposted: Vec::new(),
                closing: false,
            }),
            completions: Arc::new(CompletionTable::new()),
            lib,
            epid,
            uuid: options.uuid,
            limits,
            am: shared,
            hello_request,
            raw,
            loopback_am: build == PsmBuild::TrueScale,
            self_only: devices.devices == [Device::SelfLoop],
            reports_source,
            close_timeout: options.close_timeout,
            affinity_change,
        })
    }

    /// The PSM build serving this endpoint.
    pub fn build(&self) -> PsmBuild {
        self.lib.build()
    }

    /// Whether receive completions name their sender
    /// ([`MqStatus::source`]): on the compat build, and with the `self`
    /// device alone.
    pub fn reports_source(&self) -> bool {
        self.reports_source || self.self_only
    }

    /// The CPU affinity of the opening thread before and after
    /// `psm_ep_open`, if PSM changed it.
    pub fn affinity_change(&self) -> Option<(CpuSet, CpuSet)> {
        self.affinity_change
    }

    /// Operations PSM is working on (0 when asked from code the endpoint
    /// runs under its lock). Also gives back the table slots of fast-path
    /// completions and of the keys kept ready for posts
    /// (`key_recycler.rs`), so an idle endpoint's completion table reads
    /// empty afterwards.
    pub fn in_flight(&self) -> usize {
        self.lock_any().map_or(0, |mut g| {
            let g = &mut *g;
            g.keys.release_all(&self.completions);
            g.ops.len()
        })
    }

    /// Whether the endpoint is closed (`false` when asked from code the
    /// endpoint runs under its lock).
    pub fn is_closed(&self) -> bool {
        self.lock_any().is_some_and(|g| g.ep.is_none())
    }

    /// Forces the endpoint closed (what `close(Duration::ZERO)` does): no
    /// graceful phase, though libpsm2 may still wait up to 2 s for
    /// connected peers (module docs, "Closing").
    pub fn close_now(&self) -> Result<()> {
        self.close(Duration::ZERO)
    }

    #[inline(always)]
    fn lock(&self) -> Result<Locked<'_>> {
        self.inner.lock().map_err(|e| match e {
            LockError::Reentry => reentry_error(),
            _ => poisoned_error(),
        })
    }

    /// The lock even if poisoned (to read state, or to close PSM after a
    /// handler panicked); `None` on re-entry.
    fn lock_any(&self) -> Option<Locked<'_>> {
        self.inner.lock_ignoring_poison()
    }

    /// The lock for a post: open, not closing.
    #[inline(always)]
    fn lock_open(&self) -> Result<Locked<'_>> {
        let g = self.lock()?;
        if g.ep.is_none() {
            return Err(closed_error());
        }
        if g.closing {
            return Err(closing_error());
        }
        Ok(g)
    }

    /// `isend` and `isend_keyed`: the post under `key`.
    #[inline(always)]
    fn post_send(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
        key: Key,
    ) -> std::result::Result<OpKey, PostError> {
        let mut g = match self.lock_for_post(key) {
            Ok(g) => g,
            Err(error) => return Err(PostError { error, buffer }),
        };
        let inner = &mut *g;
        let Some(addr) = inner.peers.addr(peer) else {
            return Err(PostError {
                error: not_connected(peer),
                buffer,
            });
        };
        let len = buffer.len();
        if len as u64 > self.limits.max_message {
            return Err(PostError {
                error: too_long_error("a message", "carries", len, self.limits.max_message),
                buffer,
            });
        }
        let flags = match mode {
            SendMode::Standard => 0,
            SendMode::Synchronous => ffi::PSM_MQ_FLAG_SENDSYNC,
        };
        let op = key.take(&mut inner.keys, &self.completions);
        // SAFETY: the endpoint is open (`lock_open`, lock held) and `addr`
        // was connected on it; the buffer goes into the in-flight table
        // right below and stays there, its memory not moving (`OpBuffer`
        // never grows its owner), until PSM reports the request finished or
        // the endpoint is closed.
        let posted = unsafe {
            self.raw.isend(
                addr.as_raw(),
                flags,
                tag,
                buffer.as_ptr(),
                len as u32,
                InFlight::context(op),
            )
        };
        self.post_unposted(inner);
        match posted {
            Ok(req) => {
                inner.ops.insert_parts(op, req, tag, OpKind::Send, buffer);
                Ok(op)
            }
            Err(rc) => {
                if key == Key::New {
                    inner.keys.give_back(op);
                }
                Err(PostError {
                    error: self.psm_error(rc, "psm_mq_isend"),
                    buffer,
                })
            }
        }
    }

    /// `irecv` and `irecv_keyed`, as [`post_send`](Self::post_send).
    #[inline(always)]
    fn post_recv(
        &self,
        tags: TagMatch,
        mut buffer: OpBuffer,
        key: Key,
    ) -> std::result::Result<OpKey, PostError> {
        let mut g = match self.lock_for_post(key) {
            Ok(g) => g,
            Err(error) => return Err(PostError { error, buffer }),
        };
        let inner = &mut *g;
        let len = buffer.len();
        if len as u64 > self.limits.max_message {
            return Err(PostError {
                error: too_long_error("a receive buffer", "takes", len, self.limits.max_message),
                buffer,
            });
        }
        if recv_ptr(&mut buffer).is_none() {
            return Err(PostError {
                error: read_only_error(),
                buffer,
            });
        }
        // PSM gets the receive at this endpoint's next call into PSM (see
        // `post_unposted`); until then it waits in the in-flight table.
        let op = key.take(&mut inner.keys, &self.completions);
        inner
            .ops
            .insert_parts(op, Req::unposted(), tags.tag, OpKind::Recv, buffer);
        inner.unposted.push((op, tags.select));
        Ok(op)
    }

    /// The endpoint, locked and open, for a post under `key` (a caller's
    /// key checked).
    #[inline(always)]
    fn lock_for_post(&self, key: Key) -> Result<Locked<'_>> {
        let g = self.lock_open()?;
        if let Key::Given(op) = key {
            self.check_key(op, &g.ops)?;
        }
        Ok(g)
    }

    /// PSM's code `rc` from `call` as a crate error.
    fn psm_error(&self, rc: ffi::psm_error_t, call: &'static str) -> Error {
        map_psm_error(psm_sys::Error::Psm(self.lib.error(rc, call)), call)
    }

    #[inline]
    fn check_key(&self, key: OpKey, ops: &InFlight) -> Result<()> {
        if !self.completions.is_pending(key) {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "native engine: {key:?} is not a pending key of this endpoint's completion table"
                ),
            ));
        }
        if ops.slot_taken(key) {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("native engine: {key:?} is already posted"),
            ));
        }
        Ok(())
    }

    /// The source to report for a receive PSM gave no sender for.
    #[inline]
    fn implied_source(&self, peers: &Peers) -> Option<PeerAddr> {
        if self.self_only {
            peers.by_epid.get(&self.epid).map(|v| PeerAddr(*v))
        } else {
            None
        }
    }

    /// Harvests up to `budget` completions; how many.
    ///
    /// `psm_mq_ipeek` names the next finished request and its status (with
    /// the sender on the compat build); `psm_mq_test` then frees it. Both go
    /// straight through the function table: this is the hot path, and the
    /// status is copied once.
    fn harvest(&self, inner: &mut Inner, budget: usize) -> usize {
        let Inner { ep, ops, peers, .. } = inner;
        let Some(ep) = ep.as_ref() else {
            return 0;
        };
        let mut done = 0;
        let mut flush = false;
        while done < budget && !ops.is_empty() {
            // SAFETY: the endpoint (and so its MQ) is open: we hold its lock
            // and `ep` is `Some`.
            let Some(peeked) = (unsafe { self.raw.ipeek() }) else {
                break;
            };
            let Some(entry) = ops.take_finished(peeked.context, peeked.req) else {
                // Every request on this MQ is in the table until harvested;
                // stop rather than spin on one that is not.
                debug_assert!(false, "PSM completed a request the engine did not post");
                break;
            };
            // SAFETY: `peeked.req` is a finished request of this open MQ,
            // not tested before (it was still in the table); it is spent
            // after this, and the entry holding it is consumed below.
            unsafe { self.raw.test(peeked.req) };
            done += 1;
            let (status, rendezvous) = self.finish(ep, peers, &entry, &peeked);
            flush |= rendezvous;
            // A refused key means the slot is gone (misuse above us); the
            // buffer is dropped here either way, after PSM is done with it.
            let _ = self.completions.complete(
                entry.key,
                MqCompletion {
                    status,
                    buffer: entry.buffer,
                },
            );
        }
        psm_sys::am::resume_handler_panic();
        if flush {
            // A rendezvous receive that matched inside PSM's handler for the
            // sender's request-to-send completes at once, but libpsm2 defers
            // its go-ahead to the sender (the sender's completion) to the
            // next poll: send it now, not whenever this endpoint is
            // progressed again (measured: a receiver that stops progressing
            // after its receive completes would leave the sender waiting).
            let _ = ep.poll();
        }
        done
    }

    /// The status of a finished request, from its entry and PSM's status.
    /// Also whether it was a rendezvous receive, after which PSM needs one
    /// more poll to send the sender its go-ahead (see `harvest`).
    #[inline(always)]
    fn finish(
        &self,
        ep: &psm_sys::Endpoint,
        peers: &mut Peers,
        entry: &Entry,
        peeked: &Peeked,
    ) -> (MqStatus, bool) {
        let len = entry.buffer.len();
        let error = (peeked.error != ffi::PSM_OK).then(|| code_kind(ErrorCode(peeked.error)));
        let mut rendezvous = false;
        let status = match entry.kind {
            OpKind::Send => MqStatus {
                tag: entry.tag,
                msg_len: len as u64,
                nbytes: len,
                source: None,
                error,
            },
            OpKind::CancelledRecv => MqStatus::failed(entry.tag, ErrorKind::Canceled),
            OpKind::Recv => {
                rendezvous = peeked.msg_length as usize > self.limits.eager_threshold;
                let source = match peeked.peer {
                    Some(p) => {
                        // SAFETY: PSM reported this address for a message
                        // received by this endpoint.
                        let p = unsafe { EpAddr::from_raw(p, ep) };
                        peers.note_source(p);
                        Some(PeerAddr(addr_value(p)))
                    }
                    None => self.implied_source(peers),
                };
                MqStatus {
                    tag: peeked.tag,
                    msg_len: u64::from(peeked.msg_length),
                    nbytes: (peeked.nbytes as usize).min(len),
                    source,
                    error,
                }
            }
        };
        (status, rendezvous)
    }

    /// Hands PSM the receives posted since its last call, in posting order.
    ///
    /// `irecv` only records a receive: PSM gets it here, at the start of
    /// the endpoint's next call into PSM (a progress step, a fast-path
    /// test, a probe, a cancel, an AM request, connect, close), or right
    /// after the send of an `isend`/`inject`. PSM matches arriving
    /// messages only inside its own calls, and every one of them but
    /// those sends comes after this, so a message always meets the
    /// receives posted before it, as if each had been handed over at
    /// once. A message PSM takes in during a send lands in its unexpected
    /// queue and the receive matches it from there, in arrival order: the
    /// outcome is the same, at the price of a copy.
    ///
    /// Why: a receive posted for the reply to the message sent next (every
    /// request/response exchange, every ping-pong) costs its sender
    /// nothing before the send; PSM's `psm_mq_irecv` runs while the
    /// message travels.
    ///
    /// A receive PSM refuses here completes with the error (its buffer
    /// back) instead of failing its `irecv`.
    #[inline]
    fn post_unposted(&self, inner: &mut Inner) {
        if !inner.unposted.is_empty() {
            self.post_unposted_now(inner);
        }
    }

    #[inline(never)]
    fn post_unposted_now(&self, inner: &mut Inner) {
        let Inner {
            ep, ops, unposted, ..
        } = inner;
        if ep.is_none() {
            // Closed: `close` completes what is left of the table.
            unposted.clear();
            return;
        }
        for (key, select) in unposted.drain(..) {
            let Some(entry) = ops.get_mut(key) else {
                continue;
            };
            let len = entry.buffer.len();
            // `irecv` checked that the buffer is writable, and nothing else
            // touches it in the table; a failure still ends the receive
            // rather than leaving it unposted.
            let posted = match recv_ptr(&mut entry.buffer) {
                // SAFETY: the endpoint is open (`ep` is `Some`, lock held);
                // `ptr` is valid for `len` bytes of writing; the buffer stays
                // in the in-flight table, not otherwise accessed and its
                // memory not moving, until PSM reports the request finished
                // or the endpoint is closed.
                Some(ptr) => unsafe {
                    self.raw
                        .irecv(entry.tag, select, ptr, len as u32, InFlight::context(key))
                }
                .map_err(|rc| self.psm_error(rc, "psm_mq_irecv")),
                None => Err(read_only_error()),
            };
            match posted {
                Ok(req) => entry.req = req,
                Err(error) => {
                    tracing::debug!("native engine: posting {key:?}: {error}");
                    if let Some(entry) = ops.take(key) {
                        let _ = self.completions.complete(
                            key,
                            MqCompletion {
                                status: MqStatus::failed(entry.tag, error.kind()),
                                buffer: entry.buffer,
                            },
                        );
                    }
                }
            }
        }
    }

    /// One progress step under the lock.
    fn step(&self, inner: &mut Inner) -> bool {
        self.post_unposted(inner);
        let mut made = false;
        inner.keys.recycle(&self.completions);
        if !inner.loopback.is_empty() {
            made |= self.run_loopback(inner);
        }
        let Some(ep) = inner.ep.as_ref() else {
            return made;
        };
        if inner.ops.is_empty() {
            // Nothing to harvest; PSM still has to run for connections,
            // active messages and unexpected messages.
            return matches!(ep.poll(), Ok(true)) | made;
        }
        if self.harvest(inner, HARVEST_BUDGET) > 0 {
            return true;
        }
        // Nothing completed. Did PSM move anything (a rendezvous chunk, an
        // AM, an unexpected message)? Then harvest what that finished.
        let polled = inner
            .ep
            .as_ref()
            .is_some_and(|ep| matches!(ep.poll(), Ok(true)));
        if polled {
            self.harvest(inner, HARVEST_BUDGET);
        }
        polled | made
    }

    /// The fast path's step under the lock: `op`'s completion if its
    /// request finished, testing it, then polling PSM and testing again up
    /// to [`FAST_POLLS`] times; its key is spent then, and recycled at the
    /// endpoint's next idle moment (`key_recycler.rs`).
    /// `not_here` is cleared if `op` is in flight here (else it was
    /// harvested into the table, or never posted here).
    ///
    /// The loop keeps the lock across its polls: a waiting thread's turn
    /// around it is then one `psm_poll` and one `psm_mq_test`, close to
    /// `psm_mq_wait`'s own loop, rather than a lock, a table lookup and the
    /// caller's executor as well; the time from a message's arrival to its
    /// detection is half a turn on average. The bound keeps other threads'
    /// posts waiting at most a few microseconds.
    #[inline(always)]
    fn step_for(&self, inner: &mut Inner, op: OpKey, not_here: &mut bool) -> Option<MqCompletion> {
        self.post_unposted(inner);
        if !inner.loopback.is_empty() {
            self.run_loopback(inner);
        }
        let Inner {
            ep,
            ops,
            peers,
            keys,
            ..
        } = inner;
        let (Some(ep), Some(entry)) = (ep.as_ref(), ops.get_mut(op)) else {
            return None;
        };
        *not_here = false;
        debug_assert!(entry.req.is_posted(), "{op:?} was not handed to PSM");
        // SAFETY: (this and every test below) the endpoint is open (lock
        // held, `ep` is `Some`) and the request is live (in the in-flight
        // table); once a test reports it finished it is spent, and its
        // entry is removed right below.
        let mut peeked = unsafe { self.raw.test_one(&entry.req) };
        let mut polls = FAST_POLLS;
        while peeked.is_none() && polls > 0 {
            polls -= 1;
            // Only a poll that moved something can have finished the
            // request: an idle turn is one `psm_poll`, as in
            // `psm_mq_wait`'s own loop.
            // SAFETY: the endpoint is open and we hold its lock.
            if unsafe { self.raw.poll() } {
                #[cfg(feature = "latency-probe")]
                let polled = super::probe::now();
                // SAFETY: as above; an AM handler run by the poll cannot
                // have touched the request (handlers cannot reach the
                // endpoint).
                peeked = unsafe { self.raw.test_one(&entry.req) };
                #[cfg(feature = "latency-probe")]
                if peeked.is_some() {
                    super::probe::detected(polled);
                }
            }
        }
        let Some(peeked) = peeked else {
            // Not done: the thread is waiting anyway, so recycle the keys
            // of earlier fast completions now.
            keys.recycle(&self.completions);
            return None;
        };
        let entry = ops.take(op)?;
        Some(self.finish_fast(ep, peers, keys, entry, &peeked))
    }

    /// The completion of a request the fast path found finished (out of
    /// the in-flight table already). Inlined, as the whole fast path is, so
    /// the completion is built where the caller's `Poll` lives instead of
    /// being copied up through each call.
    #[inline(always)]
    fn finish_fast(
        &self,
        ep: &psm_sys::Endpoint,
        peers: &mut Peers,
        keys: &mut KeyRecycler,
        entry: Entry,
        peeked: &Peeked,
    ) -> MqCompletion {
        keys.spend(&self.completions, entry.key);
        let (status, rendezvous) = self.finish(ep, peers, &entry, peeked);
        if rendezvous {
            // As in `harvest`: send the sender its go-ahead now.
            // SAFETY: the endpoint is open and we hold its lock.
            unsafe { self.raw.poll() };
        }
        MqCompletion {
            status,
            buffer: entry.buffer,
        }
    }
}

/// Errors of `psm_ep_open`: another endpoint this process may not have is
/// `Busy`.
fn open_error(e: psm_sys::Error) -> Error {
    match e {
        psm_sys::Error::Unsupported(_) => {
            let message = format!("native engine: cannot open another PSM endpoint: {e}");
            Error::with_source(ErrorKind::Busy, message, e)
        }
        e => map_psm_error(e, "psm_ep_open"),
    }
}

impl ProgressSource for NativeEndpoint {
    fn progress(&self) -> Progress {
        let mut g = match self.inner.try_lock() {
            Ok(g) => g,
            // Someone else is in PSM for this endpoint (posting, harvesting,
            // connecting): come back soon rather than sleep.
            Err(LockError::WouldBlock) => return Progress::Made,
            // Poisoned, or this thread is inside the endpoint already.
            Err(LockError::Poisoned | LockError::Reentry) => return Progress::Idle,
        };
        if g.ep.is_none() {
            return Progress::Idle;
        }
        self.step(&mut g).into()
    }
}

impl EngineEndpoint for NativeEndpoint {
    fn kind(&self) -> EngineKind {
        EngineKind::Native
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

    /// `psm_ep_connect` for the epids not connected yet (one call, which
    /// PSM bounds by `timeout` but at least 2 s), then the job handshake
    /// with each new peer within what is left of `timeout`. The own epid
    /// needs the `self` device and no handshake.
    fn connect(&self, epids: &[Epid], timeout: Duration) -> Vec<Result<PeerAddr>> {
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        let mut known: HashMap<Epid, Result<PeerAddr>> = HashMap::new();
        let mut fresh: Vec<Epid> = Vec::new();
        match self.lock_open() {
            Ok(g) => {
                for epid in epids {
                    if known.contains_key(epid) || fresh.contains(epid) {
                        continue;
                    }
                    if let Some(v) = g.peers.by_epid.get(epid) {
                        known.insert(*epid, Ok(PeerAddr(*v)));
                    } else if let Some((kind, why)) = g.peers.refused.get(epid) {
                        known.insert(*epid, Err(Error::new(*kind, why.clone())));
                    } else {
                        fresh.push(*epid);
                    }
                }
            }
            Err(e) => {
                return epids
                    .iter()
                    .map(|_| Err(Error::new(e.kind(), e.message().to_owned())))
                    .collect();
            }
        }
        let mut failures = HashMap::new();
        if !fresh.is_empty() {
            let pending = self.psm_connect(&fresh, timeout, &mut failures);
            self.await_handshakes(pending, deadline, timeout, &mut failures);
        }
        let g = self.lock();
        epids
            .iter()
            .map(|epid| {
                if let Some(r) = known.get(epid) {
                    return match r {
                        Ok(p) => Ok(*p),
                        Err(e) => Err(Error::new(e.kind(), e.message().to_owned())),
                    };
                }
                if let Some(e) = failures.get(epid) {
                    return Err(Error::new(e.kind(), e.message().to_owned()));
                }
                match &g {
                    Ok(g) => g
                        .peers
                        .by_epid
                        .get(epid)
                        .map(|v| PeerAddr(*v))
                        .ok_or_else(|| {
                            Error::new(
                                ErrorKind::Other,
                                format!("native engine: connecting to {epid}: no outcome"),
                            )
                        }),
                    Err(e) => Err(Error::new(e.kind(), e.message().to_owned())),
                }
            })
            .collect()
    }

    fn peer_epid(&self, peer: PeerAddr) -> Option<Epid> {
        let g = self.lock().ok()?;
        if let Some(epid) = g.peers.epid_of(peer) {
            return Some(epid);
        }
        let ep = g.ep.as_ref()?;
        let addr = g
            .peers
            .seen
            .iter()
            .copied()
            .chain(self.am.source(peer.0))
            .find(|a| addr_value(*a) == peer.0)?;
        ep.epaddr_epid(addr).map(|e| Epid(e.0))
    }

    fn isend(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        self.post_send(peer, tag, mode, buffer, Key::Given(op))
            .map(drop)
    }

    fn irecv(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
        op: OpKey,
    ) -> std::result::Result<(), PostError> {
        self.post_recv(tags, buffer, Key::Given(op)).map(drop)
    }

    /// The key is taken under the lock, once the post's checks passed:
    /// one the fast path recycled (no atomic operation), else a new one
    /// from the table; it needs no check.
    #[inline]
    fn isend_keyed(
        &self,
        peer: PeerAddr,
        tag: u64,
        mode: SendMode,
        buffer: OpBuffer,
    ) -> std::result::Result<OpKey, PostError> {
        self.post_send(peer, tag, mode, buffer, Key::New)
    }

    /// As [`isend_keyed`](Self::isend_keyed).
    #[inline]
    fn irecv_keyed(
        &self,
        tags: TagMatch,
        buffer: OpBuffer,
    ) -> std::result::Result<OpKey, PostError> {
        self.post_recv(tags, buffer, Key::New)
    }

    /// `psm_mq_cancel` on the receive posted as `op` if it matched nothing
    /// yet; it then completes (through the next progress step) with
    /// `Canceled`. Sends cannot be cancelled (`Ok(false)`).
    fn cancel(&self, op: OpKey) -> Result<bool> {
        let mut g = self.lock()?;
        if g.ep.is_none() {
            return Ok(false);
        }
        self.post_unposted(&mut g);
        let Some(entry) = g.ops.get_mut(op) else {
            return Ok(false);
        };
        if entry.kind != OpKind::Recv {
            // A send, or cancelled already.
            return Ok(false);
        }
        debug_assert!(entry.req.is_posted(), "{op:?} was not handed to PSM");
        // SAFETY: the endpoint is open (checked, lock held); the request is
        // live (in the table).
        let done = unsafe { self.raw.cancel(&entry.req) }
            .map_err(|rc| self.psm_error(rc, "psm_mq_cancel"))?;
        if done {
            entry.kind = OpKind::CancelledRecv;
        }
        Ok(done)
    }

    fn iprobe(&self, tags: TagMatch) -> Result<Option<MqStatus>> {
        let mut g = self.lock_open()?;
        let inner = &mut *g;
        self.post_unposted(inner);
        let Some(ep) = inner.ep.as_ref() else {
            return Err(closed_error());
        };
        let mq = ep.mq().map_err(|e| map_psm_error(e, "the MQ"))?;
        let Some(st) = mq
            .iprobe(tags.tag, tags.select)
            .map_err(|e| map_psm_error(e, "psm_mq_iprobe"))?
        else {
            return Ok(None);
        };
        let source = match st.peer {
            Some(p) => {
                inner.peers.note_source(p);
                Some(PeerAddr(addr_value(p)))
            }
            None => self.implied_source(&inner.peers),
        };
        Ok(Some(MqStatus {
            tag: st.tag,
            msg_len: u64::from(st.msg_length),
            nbytes: st.msg_length as usize,
            source,
            error: None,
        }))
    }

    fn am_register(&self, handler: Arc<dyn AmHandler>) -> Result<AmHandlerId> {
        let mut g = self.lock_open()?;
        let inner = &mut *g;
        let Some(ep) = inner.ep.as_mut() else {
            return Err(closed_error());
        };
        let id = am::register(ep, &self.am, handler.clone())?;
        inner.handlers.push(handler);
        Ok(id)
    }

    fn am_request(
        &self,
        peer: PeerAddr,
        handler: AmHandlerId,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        am::check_am(&self.limits, args, payload, self.limits.max_am_request)?;
        let mut g = self.lock_open()?;
        let inner = &mut *g;
        let Some(index) = self.am.table.request_index(handler) else {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("native engine: no AM handler {} is registered", handler.0),
            ));
        };
        let Some(addr) = inner.peers.addr(peer) else {
            return Err(not_connected(peer));
        };
        if self.loopback_am && inner.peers.epid_of(peer) == Some(self.epid) {
            inner.loopback.push(LoopbackAm {
                handler,
                is_reply: false,
                args: args.to_vec(),
                payload: payload.to_vec(),
            });
            return Ok(());
        }
        self.post_unposted(inner);
        let Some(ep) = inner.ep.as_ref() else {
            return Err(closed_error());
        };
        let words = am::am_args(args);
        ep.am_request(
            addr,
            index,
            &words[..args.len()],
            payload,
            AmFlags::default(),
        )
        .map_err(|e| map_psm_error(e, "psm_am_request_short"))
    }

    fn close(&self, timeout: Duration) -> Result<()> {
        self.close_inner(timeout)
    }

    /// 64 bytes (the C provider's `PSMX_INJECT_SIZE`): above that
    /// `psm_mq_send` could wait for the receiver (rendezvous) while holding
    /// the endpoint.
    fn max_inject(&self) -> usize {
        INJECT_CAP
    }

    /// PSM's blocking `psm_mq_send`, as the C provider's inject: for at most
    /// 64 bytes PSM sends eagerly and returns once it has copied them; no
    /// request, key or completion.
    fn inject(&self, peer: PeerAddr, tag: u64, data: &[u8]) -> Result<()> {
        if data.len() > INJECT_CAP {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "native engine: inject of {} bytes; at most {INJECT_CAP} (send larger \
                     messages with isend)",
                    data.len()
                ),
            ));
        }
        let mut g = self.lock_open()?;
        let Some((addr, epid)) = g.peers.lookup(peer) else {
            return Err(not_connected(peer));
        };
        if epid == self.epid {
            // libpsm2's self device never frees the request behind a
            // blocking psm_mq_send: a million injects to oneself exhaust
            // PSM2_MQ_SENDREQS_MAX and abort the process. Send to oneself
            // with a request of our own instead (freed when it completes).
            drop(g);
            let table = self.completions();
            let key = table.insert();
            return match self.isend(
                peer,
                tag,
                SendMode::Standard,
                OpBuffer::from(data.to_vec()),
                key,
            ) {
                Ok(()) => {
                    drop(table.abandon(key));
                    // Harvest finished requests (earlier injects to
                    // oneself among them) so their descriptors go back
                    // to PSM even when only fast-path polls run.
                    self.progress();
                    Ok(())
                }
                Err(e) => {
                    drop(table.retire(key));
                    Err(e.error)
                }
            };
        }
        #[cfg(feature = "latency-probe")]
        super::probe::sending();
        // SAFETY: the endpoint is open (`lock_open`, lock held) and `addr`
        // was connected on it; `data` is borrowed for the whole call, which
        // returns only once PSM no longer reads it.
        let sent = unsafe {
            self.raw
                .send(addr.as_raw(), tag, data.as_ptr(), data.len() as u32)
        };
        self.post_unposted(&mut g);
        sent.map_err(|rc| self.psm_error(rc, "psm_mq_send"))
    }

    /// Tests `op`'s own request (`psm_mq_test`), polls PSM once if it is
    /// not done and tests again; a finished request is handed over here
    /// and its key spent (`key_recycler.rs`), never going through
    /// `psm_mq_ipeek` or the table. If another thread holds the endpoint,
    /// or already harvested `op` into the table, the table is looked at
    /// instead.
    #[inline(always)]
    fn poll_op(&self, op: OpKey) -> Option<MqCompletion> {
        let mut not_here = true;
        if let Ok(mut g) = self.inner.try_lock() {
            let done = self.step_for(&mut g, op, &mut not_here);
            if done.is_some() {
                return done;
            }
        }
        // Someone else is in PSM for this endpoint (it may be harvesting
        // `op` right now), or it did already: the table has it.
        if not_here {
            self.completions.try_take(op)
        } else {
            None
        }
    }
}

/// Where PSM writes a receive into `buffer`: its memory, a dangling
/// pointer for an empty buffer, `None` for read-only memory.
#[inline]
fn recv_ptr(buffer: &mut OpBuffer) -> Option<*mut u8> {
    let empty = buffer.is_empty();
    match buffer.as_mut_ptr() {
        Some(p) => Some(p),
        None if empty => Some(std::ptr::NonNull::<u8>::dangling().as_ptr()),
        None => None,
    }
}

/// Most bytes [`NativeEndpoint`]'s inject sends: the C provider's
/// `PSMX_INJECT_SIZE`.
const INJECT_CAP: usize = 64;

/// `MsgSize` for `what` of `len` bytes, over PSM's largest message `max`.
#[cold]
#[inline(never)]
fn too_long_error(what: &str, verb: &str, len: usize, max: u64) -> Error {
    Error::new(
        ErrorKind::MsgSize,
        format!("native engine: {what} of {len} bytes; PSM {verb} at most {max}"),
    )
}

fn read_only_error() -> Error {
    Error::new(
        ErrorKind::Inval,
        "native engine: a receive buffer must be writable (shared Bytes are read-only)",
    )
}

fn not_connected(peer: PeerAddr) -> Error {
    Error::new(
        ErrorKind::Inval,
        format!("native engine: {peer:?} is not a peer this endpoint connected"),
    )
}

impl Drop for NativeEndpoint {
    /// Closes the endpoint if `close` was not called, within the close
    /// timeout it was opened with.
    fn drop(&mut self) {
        let open = self.inner.get_mut().ep.is_some();
        if open {
            if let Err(e) = self.close_inner(self.close_timeout) {
                tracing::debug!("native engine: closing a dropped endpoint: {e}");
            }
        }
    }
}
