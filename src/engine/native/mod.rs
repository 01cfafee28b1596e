//! The native engine: the engine contract over real PSM 1.x (`psm-sys`).
//!
//! [`NativeEngine`] loads `libpsm_infinipath.so.1` (either build: the psm2
//! compat library, which runs over shared memory here and Omni-Path elsewhere,
//! or TrueScale) and opens [`NativeEndpoint`]s: one PSM endpoint, its matched
//! queue and its AM handlers each, driven by the reactor as a
//! [`ProgressSource`]. How the C provider drove PSM
//! (`prov/psm/src/psmx_domain.c`, `psmx_cq.c`, `psmx_am.c`) is kept:
//! completions are harvested with `psm_mq_ipeek` + `psm_mq_test` under a
//! try-lock, AM handlers only reply, and follow-up work is left to the layer
//! above.
//!
//! # Locking
//! Every PSM call on an endpoint happens under that endpoint's one lock (a
//! spin lock released with a plain store, `lock.rs`), so PSM is never
//! entered concurrently for an endpoint and only one thread harvests its
//! MQ at a time (an `ipeek` and its `test` never interleave with another
//! thread's). [`progress`] only *tries* the lock: a
//! caller that finds it held returns at once (as `psmx_cq_poll_mq`'s
//! spin-trylock did) and reports progress, so the auto thread comes back
//! soon instead of sleeping. Posting takes the lock. `connect` holds it
//! during `psm_ep_connect` (PSM polls the endpoint meanwhile), then for one
//! step at a time while the job handshake runs; `close` takes it for one
//! step at a time. Calls back into an endpoint from code
//! running under its lock (AM handlers, wakers, buffer drops) fail with
//! `Inval` instead of deadlocking.
//!
//! # Requests and completions
//! A post moves the operation's [`OpBuffer`](crate::engine::OpBuffer) into
//! the in-flight table, indexed by its [`OpKey`](crate::reactor::OpKey),
//! which is also PSM's per-request `context`. Harvesting finds the entry
//! through the context, completes the request (`psm_mq_test` frees it) and
//! moves the buffer into the completion table: to the waiting future, or
//! dropped there if the future was dropped (principle 3). After warm-up no
//! step allocates. Details in `inflight.rs`.
//!
//! **Receives reach PSM at the endpoint's next call into it.** `irecv`
//! checks and records the receive (in-flight entry, posting order);
//! `psm_mq_irecv` runs at the start of the next call that enters PSM (a
//! progress step, a fast-path test, probe, cancel, AM request, connect,
//! close), or right after the send of an `isend`/`inject`. PSM matches
//! arriving messages only inside its own calls, and all of them but those
//! sends come after the hand-over, so every message still meets the
//! receives posted before it; one PSM takes in during a send waits in its
//! unexpected queue and is matched from there, in arrival order (the same
//! outcome, at the price of a copy). The point: the receive an exchange
//! posts for its reply costs nothing before the request goes out; PSM's
//! `psm_mq_irecv` runs while the message travels. A receive PSM refuses
//! then completes with the error (`unposted_tests.rs` covers order,
//! probe, cancel and close).
//!
//! **Manual-mode fast path.** A future waiting in a manual reactor can ask
//! for its own operation instead
//! ([`EngineEndpoint::poll_op`](crate::engine::EngineEndpoint::poll_op),
//! through [`EngineEndpoint::poll_completion`](crate::engine::EngineEndpoint::poll_completion)):
//! under a try-lock, `psm_mq_test` on that request, and while it is not
//! done a `psm_poll` (followed by another test only when the poll moved
//! something), up to 8 times before the lock is let go (a waiting thread's
//! idle turn is then `psm_mq_wait`'s own: one poll). A finished request
//! leaves the in-flight table and its
//! completion goes straight to the future: no `psm_mq_ipeek`, no trip
//! through the table, no progress round over the reactor's other sources.
//! Its key is recycled at the endpoint's next idle moment rather than on
//! the way from the message's arrival to the reply it triggers: renewed
//! ([`CompletionTable::renew`](crate::reactor::CompletionTable::renew))
//! into a small stock from which the endpoint's next `isend_keyed` /
//! `irecv_keyed` takes its key under the lock, with no atomic operation
//! (`key_recycler.rs`; measured: 8 B fast/raw 1.18-1.20 against 1.25-1.29
//! when every post took a key from the table's free list). It is still one harvester
//! at a time (the test runs under the lock, as `ipeek` + `test` do); other
//! finished requests stay in PSM's queue for the next progress step; an
//! operation a progress step harvested meanwhile is found in the table.
//!
//! Every cycle on this path is on every small message's round trip, so the
//! post and completion paths are written to be inlined whole (the
//! completion is built where the caller's `Poll` lives), errors are built
//! out of line, and the endpoint lock is one compare-exchange that also
//! tells a thread coming back into the endpoint (see `lock.rs`).
//!
//! **Inject.** [`EngineEndpoint::inject`](crate::engine::EngineEndpoint::inject)
//! sends at most 64 bytes with PSM's blocking `psm_mq_send`, as the C
//! provider's inject did: PSM sends such messages eagerly and returns once
//! it has copied them (waiting inside, like an eager `psm_mq_isend`, only
//! when the peer's queue is full), so there is no request, key or
//! completion. Larger messages could wait for the receiver (rendezvous)
//! while holding the endpoint, hence the cap.
//!
//! Statuses: truncation (`PSM_MQ_TRUNCATION`) is `Trunc` with both
//! lengths; a cancelled receive (`psm_mq_cancel` on an unmatched receive)
//! is `Canceled` with no bytes; sends cannot be cancelled. The sender of a
//! message ([`MqStatus::source`](crate::engine::MqStatus::source)): PSM
//! 1.x statuses do not carry it, but the compat build's libpsm2 has status
//! calls that do, so there it is reported; on TrueScale it is `None`,
//! except when the `self` device is the only one enabled (every message
//! then comes from the endpoint itself).
//!
//! # Connecting
//! `psm_ep_connect`, then a job handshake over AM (libpsm2's shared memory
//! connects endpoints of different UUIDs without complaint): see `am.rs`.
//! A [`PeerAddr`](crate::engine::PeerAddr) is the `psm_epaddr_t` pointer
//! value; sends accept only addresses this endpoint connected.
//!
//! # Closing
//! `close` cancels the receives that matched nothing, keeps progressing
//! until the other requests finish or the graceful phase runs out, then
//! closes the PSM endpoint with one `psm_ep_close`: graceful with what is
//! left of the timeout, or forced for a zero timeout (`FI_PSM_TIMEOUT=0`);
//! never both (psm-sys explains why a second call would touch freed
//! memory). Whatever is still in flight then completes with `Canceled`
//! (receives) or `Io` (sends): PSM no longer touches their memory.
//! Dropping the endpoint closes it the same way.
//!
//! How long it takes: `psm_ep_close` itself waits for connected peers to
//! acknowledge the disconnect, in either mode, and they rarely do (a peer
//! still running has not closed; one that has closed no longer answers).
//! libpsm2 bounds that wait by what it is given, but never less than 1 s
//! nor more than 2 s, and a forced close waits the 2 s (its
//! `psm2_ep_close` clamps the time to `PSMI_MIN_EP_CLOSE_TIMEOUT` and
//! `PSMI_MAX_EP_CLOSE_TIMEOUT`, and gives a forced close the maximum; the
//! wait is the shared-memory device's disconnect). So a zero timeout
//! closes gracefully with no time given, which libpsm2 makes its 1 s
//! floor; the graceful phase of a non-zero timeout ends 1 s early,
//! keeping that second for `psm_ep_close`; and on the compat build
//! `close(t)` returns, with connected peers:
//!
//! | timeout `t` | `close` returns within | measured: `self,shm`, one peer, a send stuck in flight |
//! |---|---|---|
//! | 0 | 1 s | 1.003 s, the peer alive or killed (forced, it was 2.004 s) |
//! | under 1 s | 1 s | |
//! | 1 s or more | `t` | 1.003 s for 1 s; a domain with `FI_PSM_DELAY=1`, `FI_PSM_TIMEOUT=2`: 3.003 s (peer alive), 3.004 s (killed) |
//!
//! plus a few milliseconds, unless `PSM2_CLOSE_TIMEOUT` overrides
//! libpsm2's wait (it is still capped at 2 s). Requests still in flight
//! get `t` less that second to finish (none under 1 s; all of `t` when
//! only the `self` device is enabled). Without connected peers
//! `psm_ep_close` returns at once (a whole domain closes in about 1.5 ms).
//! TrueScale's PSM 1.x waits for connected
//! peers up to 60 s whatever it is given (read in its source; here it only
//! has the `self` device, so it never waits), and its whole timeout goes
//! to the graceful phase.
//!
//! # Limits
//! From `psm_am_get_parameters`, capped: AM payloads at
//! [`AM_PAYLOAD_CAP`] (2032 bytes, the C provider's `PSMX_AM_CHUNK_SIZE`,
//! "the maximum that's actually working"; the compat build reports 8128,
//! and `INT_MAX` with the `self` device alone), arguments at
//! [`AM_ARGS_CAP`] (10), handlers at what psm-sys's trampolines allow per
//! endpoint (31: two PSM handlers each, two for the job handshake). Messages
//! carry at most `u32::MAX` bytes. The eager threshold is PSM's rendezvous
//! threshold for the device in use (`PSM_MQ_OPT_RNDV_SHM_SZ`, or
//! `PSM_MQ_OPT_RNDV_IB_SZ` with an adapter).
//!
//! # Endpoints per process and CPU pinning
//! The compat build opens one endpoint per process unless `PSM2_MULTI_EP=1`
//! is set, and even then, without an adapter, every endpoint gets the same
//! epid (psm-sys refuses the duplicate); TrueScale opens one per process
//! lifetime. Where a second endpoint is refused, `open` says why (`Busy`).
//! `psm_ep_open` may pin the calling thread near the adapter; create
//! auto-progress reactors after opening, as [`NativeEngine::open_with_reactor`]
//! does, so the progress thread is pinned after PSM's own pinning.
//!
//! [`progress`]: crate::reactor::ProgressSource::progress

mod am;
mod endpoint;
#[cfg(test)]
mod fast_tests;
mod inflight;
mod key_recycler;
mod lock;
#[cfg(feature = "latency-probe")]
pub mod probe;
mod raw;
#[cfg(test)]
mod unposted_tests;

pub use endpoint::NativeEndpoint;

use crate::engine::{EndpointOptions, Engine, EngineKind};
use crate::reactor::{ProgressMode, ProgressSource, Reactor};
use crate::{Error, ErrorKind, Result};
use psm_sys::{ErrorCode, PsmBuild, PsmLibrary};
use std::sync::Arc;

/// Largest AM payload the engine sends or accepts (requests and replies):
/// the C provider's `PSMX_AM_CHUNK_SIZE`.
pub const AM_PAYLOAD_CAP: usize = 2032;

/// Most AM arguments the engine sends: libpsm2's `PSMI_AM_MAX_ARGS` (its
/// `self` device alone reports `INT_MAX` but carries no more; TrueScale
/// reports 8, which is then the limit).
pub const AM_ARGS_CAP: usize = 10;

/// Opens [`NativeEndpoint`]s on the process's PSM library.
///
/// ```no_run
/// use std::time::Duration;
/// use psmrail::engine::native::NativeEngine;
/// use psmrail::engine::{EndpointOptions, EngineEndpoint};
/// use psmrail::reactor::ProgressMode;
///
/// // Fails (FI_ENODATA, saying what is missing) without the library or a
/// // usable device, e.g. run with PSM2_DEVICES=self,shm here.
/// let engine = NativeEngine::load()?;
/// let options = EndpointOptions {
///     uuid: *b"my-job-uuid-0001",
///     unit: None,
///     port: None,
///     close_timeout: Duration::from_secs(5),
/// };
/// // Open first, then the reactor (its auto thread is pinned after PSM's).
/// let (ep, reactor) = engine.open_with_reactor(&options, ProgressMode::Manual)?;
/// println!("{} on {}", ep.epid(), engine.build());
/// reactor.progress();
/// ep.close(Duration::from_secs(1))?;
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct NativeEngine {
    lib: &'static PsmLibrary,
}

impl std::fmt::Debug for NativeEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeEngine")
            .field("build", &self.lib.build())
            .field("library", &self.lib.resolved_path())
            .finish()
    }
}

impl NativeEngine {
    /// Loads the PSM library (psm-sys's rules: `PSMRAIL_PSM_LIB`, else the
    /// soname, else the Debian paths), checks that a device is usable (the
    /// preflight that keeps PSM from crashing or stalling where there is no
    /// adapter: `PSM2_DEVICES=self,shm` here) and initializes PSM.
    ///
    /// # Errors
    /// `NoData` with psm-sys's full message: every library tried and why,
    /// the packages to install, or which device is missing and what to set.
    /// `Inval` naming the variable when `PSMRAIL_PSM_LIB` or
    /// `PSMRAIL_TRUESCALE_SHM` holds a value it does not take.
    pub fn load() -> Result<NativeEngine> {
        let lib = PsmLibrary::get().map_err(|e| unusable(e, "cannot load PSM"))?;
        psm_sys::DeviceConfig::from_env(lib.build())
            .map_err(|e| unusable(e, "no usable PSM device"))?;
        lib.init()
            .map_err(|e| unusable(e, "PSM did not initialize"))?;
        Ok(NativeEngine { lib })
    }

    /// The loaded library.
    pub fn library(&self) -> &'static PsmLibrary {
        self.lib
    }

    /// Which build of PSM was loaded.
    pub fn build(&self) -> PsmBuild {
        self.lib.build()
    }

    /// Opens an endpoint, then builds a reactor in `mode` and adds the
    /// endpoint to it as a progress source.
    ///
    /// This is the order PSM needs: `psm_ep_open` may set the CPU affinity
    /// of the opening thread itself, so an auto-progress thread is created
    /// (and pinned to its `FI_PSM_PROG_AFFINITY` set) only once the endpoint
    /// is open.
    ///
    /// # Errors
    /// As [`Engine::open`]; building the reactor can fail in auto mode (the
    /// thread cannot be spawned or pinned), and the endpoint is then closed.
    pub fn open_with_reactor(
        &self,
        options: &EndpointOptions,
        mode: ProgressMode,
    ) -> Result<(Arc<NativeEndpoint>, Reactor)> {
        let ep = self.open(options)?;
        let reactor = Reactor::builder().mode(mode).build().map_err(|e| {
            let _ = ep.close_now();
            Error::with_source(
                ErrorKind::Inval,
                "native engine: cannot build the progress reactor",
                e,
            )
        })?;
        let source: Arc<dyn ProgressSource> = ep.clone();
        reactor.add_source(source).map_err(|e| {
            let _ = ep.close_now();
            Error::with_source(
                ErrorKind::Other,
                "native engine: cannot add the endpoint to the reactor",
                e,
            )
        })?;
        Ok((ep, reactor))
    }
}

impl Engine for NativeEngine {
    type Endpoint = NativeEndpoint;

    fn kind(&self) -> EngineKind {
        EngineKind::Native
    }

    /// Opens a PSM endpoint of job `options.uuid` on device `unit`/`port`.
    ///
    /// `psm_ep_open` may pin the calling thread (PSM's default affinity
    /// policy); create auto-mode reactors afterwards, or use
    /// [`NativeEngine::open_with_reactor`]. A change PSM made is recorded
    /// ([`NativeEndpoint::affinity_change`]).
    ///
    /// # Errors
    /// `Busy` when this process cannot have another endpoint (see the module
    /// docs), `NoData` without a device, others as PSM reports them.
    fn open(&self, options: &EndpointOptions) -> Result<Arc<NativeEndpoint>> {
        NativeEndpoint::open(self.lib, options).map(Arc::new)
    }
}

/// Why the native engine cannot be used, with psm-sys's full message:
/// `Inval` for a malformed variable psm-sys reads, else `NoData` (no
/// library, no device).
fn unusable(e: psm_sys::Error, what: &str) -> Error {
    let (kind, what) = match e {
        psm_sys::Error::Env(_) => (ErrorKind::Inval, "malformed configuration"),
        _ => (ErrorKind::NoData, what),
    };
    let message = format!("native engine: {what}: {e}");
    Error::with_source(kind, message, e)
}

/// The error kind for a PSM result code.
pub(crate) fn code_kind(code: ErrorCode) -> ErrorKind {
    use psm_sys::ffi;
    match code.0 {
        ffi::PSM_MQ_TRUNCATION => ErrorKind::Trunc,
        ffi::PSM_TIMEOUT | ffi::PSM_EP_CLOSE_TIMEOUT => ErrorKind::TimedOut,
        ffi::PSM_PARAM_ERR | ffi::PSM_OPT_READONLY | ffi::PSM_AM_INVALID_REPLY => ErrorKind::Inval,
        ffi::PSM_NO_MEMORY | ffi::PSM_EP_NO_RESOURCES => ErrorKind::NoMem,
        ffi::PSM_TOO_MANY_ENDPOINTS => ErrorKind::Busy,
        ffi::PSM_EP_NO_DEVICE
        | ffi::PSM_EP_UNIT_NOT_FOUND
        | ffi::PSM_EP_NO_PORTS_AVAIL
        | ffi::PSM_EP_NO_NETWORK => ErrorKind::NoData,
        ffi::PSM_EPID_UNKNOWN
        | ffi::PSM_EPID_UNREACHABLE
        | ffi::PSM_EPID_INVALID_NODE
        | ffi::PSM_EPID_INVALID_UUID_KEY
        | ffi::PSM_EP_INVALID_UUID_KEY
        | ffi::PSM_EPID_INVALID_VERSION
        | ffi::PSM_EPID_INVALID_CONNECT
        | ffi::PSM_EPID_INVALID_PKEY
        | ffi::PSM_EPID_INVALID_MTU => ErrorKind::ConnRefused,
        ffi::PSM_EPID_NETWORK_ERROR
        | ffi::PSM_EPID_PATH_RESOLUTION
        | ffi::PSM_EP_DEVICE_FAILURE
        | ffi::PSM_SHMEM_SEGMENT_ERR
        | ffi::PSM_EP_WAS_CLOSED
        | ffi::PSM_IS_FINALIZED => ErrorKind::Io,
        _ => ErrorKind::Other,
    }
}

/// A psm-sys error as a crate error: the kind from the PSM code (or the
/// psm-sys error class), the message naming what was being done.
pub(crate) fn map_psm_error(e: psm_sys::Error, what: &str) -> Error {
    let kind = match &e {
        psm_sys::Error::Load(_) | psm_sys::Error::NoDevice(_) => ErrorKind::NoData,
        psm_sys::Error::Psm(p) => code_kind(p.code),
        psm_sys::Error::Unsupported(_) => ErrorKind::NoSys,
        psm_sys::Error::InvalidArgument(_) | psm_sys::Error::Finalized | psm_sys::Error::Env(_) => {
            ErrorKind::Inval
        }
    };
    let message = format!("native engine: {what}: {e}");
    Error::with_source(kind, message, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use psm_sys::ffi;

    #[test]
    fn codes_map_to_libfabric_kinds() {
        let k = |c| code_kind(ErrorCode(c));
        assert_eq!(k(ffi::PSM_MQ_TRUNCATION), ErrorKind::Trunc);
        assert_eq!(k(ffi::PSM_TIMEOUT), ErrorKind::TimedOut);
        assert_eq!(k(ffi::PSM_EPID_INVALID_UUID_KEY), ErrorKind::ConnRefused);
        assert_eq!(k(ffi::PSM_EPID_UNREACHABLE), ErrorKind::ConnRefused);
        assert_eq!(k(ffi::PSM_TOO_MANY_ENDPOINTS), ErrorKind::Busy);
        assert_eq!(k(ffi::PSM_EP_NO_DEVICE), ErrorKind::NoData);
        assert_eq!(k(ffi::PSM_NO_MEMORY), ErrorKind::NoMem);
        assert_eq!(k(ffi::PSM_EPID_NETWORK_ERROR), ErrorKind::Io);
        assert_eq!(k(12345), ErrorKind::Other);
        assert_eq!(k(-1), ErrorKind::Other);
    }

    #[test]
    fn psm_sys_errors_keep_their_message() {
        let e = map_psm_error(
            psm_sys::Error::Unsupported("one endpoint per process".into()),
            "opening",
        );
        assert_eq!(e.kind(), ErrorKind::NoSys);
        assert!(e.to_string().contains("one endpoint per process"), "{e}");
        let e = map_psm_error(psm_sys::Error::InvalidArgument("bad".into()), "x");
        assert_eq!(e.kind(), ErrorKind::Inval);
        let load = psm_sys::LoadError {
            attempts: vec![],
            from_env: true,
            env: None,
        };
        let e = unusable(psm_sys::Error::Load(load), "cannot load PSM");
        assert_eq!(e.kind(), ErrorKind::NoData);
        assert!(e.to_string().contains("PSMRAIL_PSM_LIB"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let env = psm_sys::env::psm_lib(Some(std::ffi::OsStr::new(""))).unwrap_err();
        let e = unusable(psm_sys::Error::Env(env), "cannot load PSM");
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(
            e.to_string().starts_with(
                "FI_EINVAL: native engine: malformed configuration: PSMRAIL_PSM_LIB=\"\": "
            ),
            "{e}"
        );
    }
}
