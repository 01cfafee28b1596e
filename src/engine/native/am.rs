//! Active messages over PSM: our [`AmHandler`]s behind psm-sys handlers, the
//! job handshake, and engine-side loopback for the TrueScale build.
//!
//! # Mapping
//! PSM calls a handler without saying whether it carries a request or a
//! reply, while an [`AmHandler`] has `on_request` and `on_reply`. Each
//! registered handler therefore takes **two** PSM handler indices, one
//! whose trampoline calls `on_request` (with an [`AmReply`] that answers
//! through the PSM token) and one that calls `on_reply`. Requests go to the
//! peer's request index, replies to its reply index. The user's arguments
//! and payload travel untouched: no argument is spent on a flag, so
//! `max_am_args` is PSM's own limit (capped at
//! [`AM_ARGS_CAP`](super::AM_ARGS_CAP)). PSM hands out indices in registration
//! order (libpsm2 takes the first free slots), and every endpoint first
//! registers the handshake pair below, so the same registration order on
//! every process gives the same indices, which is what
//! [`AmHandlerId`]s promise.
//!
//! # Rules (PSM's)
//! Handlers run inside a PSM call made by the endpoint (progress, connect,
//! a post) on the thread making it, with the endpoint's lock held. They
//! must not call back into the endpoint (such calls fail with `Inval`
//! instead of deadlocking); they may reply once through the [`AmReply`].
//! The payload is only valid during the call.
//!
//! # The job handshake
//! libpsm2's shared-memory device connects endpoints of different jobs
//! (UUIDs) without complaint (measured here), so after `psm_ep_connect`
//! the engine asks the peer to prove its job key with an AM request to the
//! handshake handler (registered first, at open, on every endpoint):
//! arguments `[HELLO_MAGIC, cookie]`, no payload; the reply carries the
//! peer's magic, the cookie and an HMAC-SHA256 of the cookie keyed with
//! its UUID ([`hello_proof`]). The UUID itself never travels: a process of
//! another job learns nothing it could join with. A proof that is not the
//! one our UUID gives refuses the connection (`ConnRefused`); a different
//! magic is another protocol version (also refused); no answer within the
//! connect timeout is `TimedOut`. Hardware connections check the UUID in
//! PSM itself as well.
//!
//! # TrueScale loopback
//! The TrueScale build's `self` device has no AM (an AM to the own
//! endpoint jumps to a NULL pointer; psm-sys refuses it). The engine
//! delivers AM to its own address itself: the request is queued and its
//! handler runs at the next progress step, as PSM would run it; the reply
//! is queued the same way.

use super::map_psm_error;
use crate::engine::{AmHandler, AmHandlerId, AmMessage, AmReply, EngineLimits, PeerAddr};
use crate::{Error, ErrorKind, Result};
use psm_sys::{AmArg, AmToken, EpAddr, HandlerIndex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// First argument of a handshake request and reply: "psmrail" and the
/// handshake version (1).
pub(crate) const HELLO_MAGIC: u64 = u64::from_be_bytes(*b"psmrl\0\0\x01");

/// Most handlers one endpoint can register: psm-sys has this many
/// trampolines for the whole process; two go to the handshake, and each
/// handler takes two.
pub(crate) const MAX_HANDLERS: usize = (psm_sys::am::MAX_HANDLERS - 2) / 2;

const UNSET: u32 = u32::MAX;

/// The PSM indices of the registered handlers, readable from inside
/// handlers without the endpoint's lock.
pub(crate) struct HandlerTable {
    request: [AtomicU32; MAX_HANDLERS],
    reply: [AtomicU32; MAX_HANDLERS],
    count: AtomicUsize,
}

impl HandlerTable {
    fn new() -> Self {
        HandlerTable {
            request: [const { AtomicU32::new(UNSET) }; MAX_HANDLERS],
            reply: [const { AtomicU32::new(UNSET) }; MAX_HANDLERS],
            count: AtomicUsize::new(0),
        }
    }

    /// Number of registered handlers.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// The PSM request index of handler `id`.
    pub(super) fn request_index(&self, id: AmHandlerId) -> Option<HandlerIndex> {
        self.index(&self.request, id)
    }

    /// The PSM reply index of handler `id`.
    pub(super) fn reply_index(&self, id: AmHandlerId) -> Option<HandlerIndex> {
        self.index(&self.reply, id)
    }

    fn index(&self, table: &[AtomicU32; MAX_HANDLERS], id: AmHandlerId) -> Option<HandlerIndex> {
        let i = usize::from(id.0);
        if i >= self.len() {
            return None;
        }
        let v = table[i].load(Ordering::Acquire);
        (v != UNSET).then_some(HandlerIndex(v))
    }

    /// Records handler `id`'s indices and publishes it.
    fn publish(&self, id: usize, request: HandlerIndex, reply: HandlerIndex) {
        self.request[id].store(request.0, Ordering::Release);
        self.reply[id].store(reply.0, Ordering::Release);
        self.count.store(id + 1, Ordering::Release);
    }
}

/// Handshake answers by cookie: `None` while awaited, then the peer's UUID
/// and magic.
type HelloAnswers = HashMap<u64, Option<([u8; HELLO_PROOF_LEN], u64)>>;

/// Bytes of a job handshake proof.
pub(crate) const HELLO_PROOF_LEN: usize = 32;

/// The proof of job key `uuid` for handshake `cookie`: HMAC-SHA256 keyed
/// with the UUID over a label and the cookie.
pub(crate) fn hello_proof(uuid: &[u8; 16], cookie: u64) -> [u8; HELLO_PROOF_LEN] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(uuid).expect("any key length");
    m.update(b"psmrail native job handshake");
    m.update(&cookie.to_le_bytes());
    m.finalize().into_bytes().into()
}

/// State shared by the endpoint and its handler trampolines.
pub(crate) struct AmShared {
    /// Our job key.
    pub uuid: [u8; 16],
    /// Limits checked on replies.
    pub limits: EngineLimits,
    /// Registered handler indices.
    pub table: HandlerTable,
    /// The handshake's reply index (set once at open).
    pub hello_reply: AtomicU32,
    /// Handshake answers by cookie.
    hello: Mutex<HelloAnswers>,
    next_cookie: AtomicU64,
    /// Addresses AM sources came from (so `peer_epid` may resolve them).
    sources: Mutex<Vec<EpAddr>>,
    last_source: AtomicU64,
}

impl AmShared {
    /// Shared state for an endpoint of job `uuid`.
    pub(super) fn new(uuid: [u8; 16], limits: EngineLimits) -> Arc<AmShared> {
        Arc::new(AmShared {
            uuid,
            limits,
            table: HandlerTable::new(),
            hello_reply: AtomicU32::new(UNSET),
            hello: Mutex::new(HashMap::new()),
            next_cookie: AtomicU64::new(1),
            sources: Mutex::new(Vec::new()),
            last_source: AtomicU64::new(0),
        })
    }

    /// A fresh handshake cookie.
    pub(super) fn cookie(&self) -> u64 {
        self.next_cookie.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers `cookie` as awaited (its answer is kept when it comes).
    pub(super) fn await_answer(&self, cookie: u64) {
        lock(&self.hello).insert(cookie, None);
    }

    /// The answer to `cookie` (the peer's proof of its job key, and its
    /// magic), once it came.
    pub(super) fn answer(&self, cookie: u64) -> Option<([u8; HELLO_PROOF_LEN], u64)> {
        lock(&self.hello).get(&cookie).copied().flatten()
    }

    /// Forgets `cookie` (answered, or its connect gave up).
    pub(super) fn forget(&self, cookie: u64) {
        lock(&self.hello).remove(&cookie);
    }

    /// Records the address an AM came from.
    fn note_source(&self, source: Option<EpAddr>) {
        let Some(addr) = source else {
            return;
        };
        let value = addr.as_raw() as usize as u64;
        if self.last_source.swap(value, Ordering::AcqRel) == value {
            return;
        }
        let mut seen = lock(&self.sources);
        if !seen.contains(&addr) {
            seen.push(addr);
        }
    }

    /// The address an AM came from whose value is `value`, if any did.
    pub(super) fn source(&self, value: u64) -> Option<EpAddr> {
        lock(&self.sources)
            .iter()
            .copied()
            .find(|a| a.as_raw() as usize as u64 == value)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Copies PSM's arguments into 64-bit words.
fn words(args: &[AmArg], out: &mut [u64; psm_sys::am::MAX_ARGS]) -> usize {
    let n = args.len().min(out.len());
    for (o, a) in out.iter_mut().zip(&args[..n]) {
        *o = a.u64();
    }
    n
}

/// The source of an AM and its [`PeerAddr`] (0 if PSM cannot say).
fn source_of(token: &AmToken<'_>) -> (Option<EpAddr>, PeerAddr) {
    let addr = token.source();
    (
        addr,
        addr.map_or(PeerAddr(0), |a| PeerAddr(a.as_raw() as usize as u64)),
    )
}

/// Checks a reply or request against the limits.
pub(crate) fn check_am(
    limits: &EngineLimits,
    args: &[u64],
    payload: &[u8],
    max_payload: usize,
) -> Result<()> {
    if args.len() > limits.max_am_args {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "native engine: {} AM arguments, at most {} allowed",
                args.len(),
                limits.max_am_args
            ),
        ));
    }
    if payload.len() > max_payload {
        return Err(Error::new(
            ErrorKind::MsgSize,
            format!(
                "native engine: AM payload of {} bytes, at most {max_payload} allowed",
                payload.len()
            ),
        ));
    }
    Ok(())
}

/// The arguments as PSM arguments (at most psm-sys's maximum, checked
/// before against the limits).
pub(crate) fn am_args(args: &[u64]) -> [AmArg; psm_sys::am::MAX_ARGS] {
    let mut out = [AmArg::default(); psm_sys::am::MAX_ARGS];
    for (o, a) in out.iter_mut().zip(args) {
        *o = AmArg::from_u64(*a);
    }
    out
}

/// Answers a request through its PSM token.
struct TokenReply<'t, 'a> {
    token: &'t AmToken<'a>,
    shared: &'t AmShared,
    replied: bool,
}

impl AmReply for TokenReply<'_, '_> {
    fn reply(&mut self, handler: AmHandlerId, args: &[u64], payload: &[u8]) -> Result<()> {
        if self.replied {
            return Err(Error::new(
                ErrorKind::Inval,
                "native engine: an AM request is answered at most once",
            ));
        }
        check_am(
            &self.shared.limits,
            args,
            payload,
            self.shared.limits.max_am_reply,
        )?;
        let index = self.shared.table.reply_index(handler).ok_or_else(|| {
            Error::new(
                ErrorKind::Inval,
                format!("native engine: no AM handler {} is registered", handler.0),
            )
        })?;
        let words = am_args(args);
        self.token
            .reply(index, &words[..args.len()], payload)
            .map_err(|e| map_psm_error(e, "AM reply"))?;
        self.replied = true;
        Ok(())
    }
}

/// The psm-sys handlers for one of our handlers: (request, reply).
pub(crate) fn trampolines(
    handler: Arc<dyn AmHandler>,
    shared: &Arc<AmShared>,
) -> (psm_sys::AmHandler, psm_sys::AmHandler) {
    let (h, s) = (handler.clone(), shared.clone());
    let request: psm_sys::AmHandler = Box::new(move |token, args, payload| {
        let mut buf = [0u64; psm_sys::am::MAX_ARGS];
        let n = words(args, &mut buf);
        let (addr, source) = source_of(token);
        s.note_source(addr);
        let mut reply = TokenReply {
            token,
            shared: &s,
            replied: false,
        };
        h.on_request(
            AmMessage {
                source,
                args: &buf[..n],
                payload,
            },
            &mut reply,
        );
    });
    let s = shared.clone();
    let reply: psm_sys::AmHandler = Box::new(move |token, args, payload| {
        let mut buf = [0u64; psm_sys::am::MAX_ARGS];
        let n = words(args, &mut buf);
        let (addr, source) = source_of(token);
        s.note_source(addr);
        handler.on_reply(AmMessage {
            source,
            args: &buf[..n],
            payload,
        });
    });
    (request, reply)
}

/// The psm-sys handlers of the job handshake: (request, reply).
pub(crate) fn hello_trampolines(
    shared: &Arc<AmShared>,
) -> (psm_sys::AmHandler, psm_sys::AmHandler) {
    let s = shared.clone();
    let request: psm_sys::AmHandler = Box::new(move |token, args, _payload| {
        let cookie = args.get(1).map_or(0, |a| a.u64());
        let index = s.hello_reply.load(Ordering::Acquire);
        if index == UNSET {
            return;
        }
        let answer = [AmArg::from_u64(HELLO_MAGIC), AmArg::from_u64(cookie)];
        let proof = hello_proof(&s.uuid, cookie);
        // The requester times out if the reply cannot be sent.
        let _ = token.reply(HandlerIndex(index), &answer, &proof);
    });
    let s = shared.clone();
    let reply: psm_sys::AmHandler = Box::new(move |_token, args, payload| {
        let (Some(magic), Some(cookie)) = (args.first(), args.get(1)) else {
            return;
        };
        let mut proof = [0u8; HELLO_PROOF_LEN];
        if payload.len() == HELLO_PROOF_LEN {
            proof.copy_from_slice(payload);
        }
        let mut answers = lock(&s.hello);
        // Only answers someone waits for (bounded by the connects running).
        if let Some(slot) = answers.get_mut(&cookie.u64()) {
            *slot = Some((proof, magic.u64()));
        }
    });
    (request, reply)
}

/// Registers our handler `handler` with PSM as handler number `id`.
pub(crate) fn register(
    ep: &mut psm_sys::Endpoint,
    shared: &Arc<AmShared>,
    handler: Arc<dyn AmHandler>,
) -> Result<AmHandlerId> {
    let id = shared.table.len();
    if id >= shared.limits.max_am_handlers {
        return Err(Error::new(
            ErrorKind::NoMem,
            format!(
                "native engine: all {} AM handler slots of this endpoint are taken",
                shared.limits.max_am_handlers
            ),
        ));
    }
    let (request, reply) = trampolines(handler, shared);
    let indices = ep
        .register_am_handlers(vec![request, reply])
        .map_err(|e| match e {
            // psm-sys's trampolines are shared by the process's endpoints.
            psm_sys::Error::Unsupported(_) => Error::with_source(
                ErrorKind::NoMem,
                format!("native engine: registering an AM handler: {e}"),
                e,
            ),
            e => map_psm_error(e, "registering an AM handler"),
        })?;
    let [request, reply] = indices[..] else {
        return Err(Error::new(
            ErrorKind::Other,
            "native engine: PSM returned the wrong number of AM handler indices",
        ));
    };
    shared.table.publish(id, request, reply);
    Ok(AmHandlerId(id as u16))
}

/// Registers the handshake pair (first, at open).
pub(crate) fn register_hello(
    ep: &mut psm_sys::Endpoint,
    shared: &Arc<AmShared>,
) -> Result<HandlerIndex> {
    let (request, reply) = hello_trampolines(shared);
    let indices = ep
        .register_am_handlers(vec![request, reply])
        .map_err(|e| map_psm_error(e, "registering the handshake AM handlers"))?;
    let [request, reply] = indices[..] else {
        return Err(Error::new(
            ErrorKind::Other,
            "native engine: PSM returned the wrong number of AM handler indices",
        ));
    };
    shared.hello_reply.store(reply.0, Ordering::Release);
    Ok(request)
}

/// One AM delivered by the engine itself (TrueScale loopback).
#[derive(Debug)]
pub(crate) struct LoopbackAm {
    /// The handler it is for.
    pub handler: AmHandlerId,
    /// Request or reply.
    pub is_reply: bool,
    /// Its arguments.
    pub args: Vec<u64>,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Answers a loopback request by queueing the reply.
pub(crate) struct LoopbackReply<'q> {
    pub queue: &'q mut Vec<LoopbackAm>,
    pub limits: EngineLimits,
    pub registered: usize,
    pub replied: bool,
}

impl AmReply for LoopbackReply<'_> {
    fn reply(&mut self, handler: AmHandlerId, args: &[u64], payload: &[u8]) -> Result<()> {
        if self.replied {
            return Err(Error::new(
                ErrorKind::Inval,
                "native engine: an AM request is answered at most once",
            ));
        }
        check_am(&self.limits, args, payload, self.limits.max_am_reply)?;
        if usize::from(handler.0) >= self.registered {
            return Err(Error::new(
                ErrorKind::Inval,
                format!("native engine: no AM handler {} is registered", handler.0),
            ));
        }
        self.queue.push(LoopbackAm {
            handler,
            is_reply: true,
            args: args.to_vec(),
            payload: payload.to_vec(),
        });
        self.replied = true;
        Ok(())
    }
}

#[cfg(test)]
mod hello_tests {
    use super::*;

    #[test]
    fn the_handshake_proof_hides_the_job_key() {
        let uuid = *b"job key of a job";
        let p = hello_proof(&uuid, 7);
        assert!(!p.windows(16).any(|w| w == uuid), "the UUID travels");
        assert!(!p.windows(8).any(|w| w == &uuid[..8]));
        assert_eq!(p, hello_proof(&uuid, 7));
        assert_ne!(p, hello_proof(&uuid, 8), "bound to the cookie");
        assert_ne!(p, hello_proof(b"another job key!", 7));
    }
}
