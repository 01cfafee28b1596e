//! The domain (`fi_domain`): one engine endpoint, its progress reactor and
//! its active-message handlers, shared by every endpoint opened on it.
//!
//! As in the C provider (`prov/psm/src/psmx_domain.c`), a domain owns
//! exactly one engine endpoint (PSM's `psm_ep_t` with its matched queue);
//! libfabric endpoints are views onto it, which is why endpoints may not
//! overlap in their receive and target capabilities ([`DomainSlots`]).
//!
//! Opening, in order:
//! 1. open the engine endpoint (native or soft, as the info says) with the
//!    job UUID, device unit/port and `FI_PSM_TIMEOUT` as close timeout;
//! 2. build the reactor — only now, because `psm_ep_open` may pin the
//!    calling thread, and an auto-progress thread must be pinned after it
//!    (auto when the info asks for `FI_PROGRESS_AUTO` and
//!    `FI_PSM_PROG_THREAD` allows a thread, else manual);
//! 3. add the engine endpoint to the reactor as a progress source;
//! 4. register the AM handlers, always in the same order so their ids agree
//!    across processes: the AM message queue first, then the one handler of
//!    RMA and atomics (when the engine carries 5 AM arguments), then the
//!    peer watch's (`proto/peer_watch/`: dead peers).
//!
//! Operations reach the engine endpoint through a [`PeerGate`], which
//! refuses posts towards peers the domain's [`PeerBook`] knows dead; the
//! message operations' MQ posts and polls, on every small message's path,
//! skip that layer ([`DomainCore::direct`]) and ask the book themselves.
//! The reactor progresses the endpoint itself.
//!
//! Closing ([`Domain::close`], or dropping the last handle), in order (§9):
//! say bye to the peers the watch knows (so they fail what waits for this
//! domain at once), take the domain's sources out of the reactor (no
//! progress call runs on them afterwards), sleep `FI_PSM_DELAY`, then close
//! the engine endpoint
//! within `FI_PSM_TIMEOUT` (graceful, then forced; zero forces at once).
//! Endpoints, address vectors and queues hold the domain (`Arc`), so the
//! order in which an application drops them cannot crash anything; after
//! an explicit close they report `FI_EOPBADSTATE`.
//!
//! How long a close takes: the steps before the sleep do not wait (a
//! goodbye is one AM request per peer, with no answer awaited), so a close
//! returns within `FI_PSM_DELAY + FI_PSM_TIMEOUT` (at most 60 s + 1 hour,
//! the configuration's maxima) plus milliseconds, with one exception on the
//! native engine: libpsm2's `psm_ep_close` waits for connected peers at
//! least 1 s, and a forced one up to 2 s, so there a close with a zero
//! `FI_PSM_TIMEOUT` can take `FI_PSM_DELAY + 2 s`, and one with a timeout
//! under a second `FI_PSM_DELAY + 1 s` (see [the native engine](crate::engine::native),
//! "Closing"; TrueScale's PSM 1.x may wait up to 60 s more).
//!
//! Where a close waits: [`Domain::close`] waits on the calling thread.
//! [`Domain::close_async`] (and [`Endpoint::close_async`] when it drops
//! the domain's last handle) runs the steps that do not wait on the
//! polling thread, then the sleep and the engine's close on a thread of
//! its own (`psmrail-close`: the engines' close is a blocking call), which
//! the future awaits. Dropping the last handle waits on the dropping
//! thread, except on a tokio runtime's thread (feature `tokio`,
//! `tokio::runtime::Handle::try_current`): there the same thread of its own
//! takes the sleep and the engine's close, and the drop returns at once.
//! The order and the delay stay as above either way; what changes is only
//! which thread sleeps. A process that exits right after such a drop does
//! not wait for that thread (the peers then see it go without the delay):
//! await `close_async` before exiting to give them the delay.

use super::av::{AddressVector, AvAttr};
use super::endpoint::Endpoint;
use super::endpoint::EndpointCore;
use super::endpoint_builder::EndpointBuilder;
use super::fabric::FabricCore;
use super::{
    CompletionQueue, Counter, CounterAttr, CqAttr, DomainSlots, EndpointStats, Info, MemoryRegion,
    MrAccess, OpCounters, ProgressKind, RawKey,
};
use crate::config::PsmConfig;
use crate::engine::native::NativeEngine;
use crate::engine::soft::SoftEngine;
use crate::engine::DirectEngine;
use crate::engine::{
    EndpointOptions, Engine, EngineEndpoint, EngineKind, EngineLimits, Epid, MqCompletion,
    StableRegion,
};
use crate::ops::deferred::Deferred;
use crate::proto::am_msg::AmMsgQueue;
use crate::proto::mr::MrTable;
use crate::proto::peer_watch::{PeerBook, PeerGate, PeerWatch};
use crate::proto::rma_transport::RmaTransport;
use crate::proto::tag_layout::TagLayout;
use crate::reactor::{
    AdaptiveProgress, CompletionTable, ProgressMode, ProgressSource, Reactor, ReactorBuilder,
    SourceId,
};
use crate::{Error, ErrorKind, Result};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

/// The shared state of a [`Domain`]; what the operations reach through
/// their endpoint.
pub(crate) struct DomainCore {
    fabric: Arc<FabricCore>,
    info: Info,
    engine: Arc<dyn EngineEndpoint>,
    /// The same endpoint without the gate, for the message operations'
    /// posts and polls, which ask the peer book themselves (one layer less
    /// on every small message); called statically when it is the native
    /// engine ([`DirectEngine`]).
    direct: DirectEngine,
    /// The engine's completion table (`engine.completions()`, kept here so
    /// a post reaches it without two dynamic calls).
    table: Arc<CompletionTable<MqCompletion>>,
    reactor: Reactor,
    am_msg: Arc<AmMsgQueue>,
    /// RMA and atomics; `None` when the engine cannot carry them (fewer
    /// than 5 AM arguments), and every RMA call then fails with `NoSys`.
    rma: std::result::Result<Arc<RmaTransport>, Error>,
    /// Dead peers, and operations waiting for peers.
    peers: Arc<PeerBook>,
    /// Watches the peers operations wait for.
    watch: Arc<PeerWatch>,
    /// The registered memory regions (`fi_mr_reg`), by key.
    mr: MrTable,
    /// Our sources in the reactor, removed at close (AM queue last added).
    sources: Mutex<Vec<SourceId>>,
    tags: TagLayout,
    /// Shared with the RMA handler, which serves the memory table only
    /// while an endpoint holds the RMA (atomic) target slot.
    slots: Arc<Mutex<DomainSlots>>,
    epid: Epid,
    limits: EngineLimits,
    closed: AtomicBool,
    /// Queues and counters made here, to refuse binding another domain's.
    made: Mutex<Made>,
    /// The endpoints enabled here, for [`Domain::stats`].
    endpoints: Mutex<Vec<Weak<EndpointCore>>>,
    /// The counts of endpoints that are gone.
    retired: OpCounters,
    /// Work for the next progress round, made at its first use
    /// ([`deferred`](Self::deferred)).
    deferred: OnceLock<Option<Arc<Deferred>>>,
}

#[derive(Default)]
struct Made {
    cqs: Vec<CompletionQueue>,
    counters: Vec<Counter>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every guarded value stays consistent across a panic (single updates).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for DomainCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DomainCore")
            .field("engine", &self.engine.kind())
            .field("epid", &self.epid)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl DomainCore {
    /// The engine endpoint every operation goes through.
    pub(crate) fn engine(&self) -> &Arc<dyn EngineEndpoint> {
        &self.engine
    }

    /// The engine endpoint without the [`PeerGate`]: for the MQ posts and
    /// polls of `ops/`, which ask [`peers`](Self::peers) before posting
    /// towards a peer.
    #[inline]
    pub(crate) fn direct(&self) -> &DirectEngine {
        &self.direct
    }

    /// The reactor that progresses it.
    pub(crate) fn reactor(&self) -> &Reactor {
        &self.reactor
    }

    /// The queue of work for the next progress round (`ops/deferred.rs`),
    /// added to the reactor at the first call. Call it outside engine
    /// locks (it may add a source); `OpBadState` once the domain closed.
    pub(crate) fn deferred(&self) -> Result<&Arc<Deferred>> {
        self.ensure_open()?;
        let d = self.deferred.get_or_init(|| {
            let d = Arc::new(Deferred::default());
            let source: Arc<dyn ProgressSource> = d.clone();
            let id = self.reactor.add_source(source).ok()?;
            relock(&self.sources).push(id);
            Some(d)
        });
        d.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Other,
                "the domain's deferred-work source could not be added to its reactor",
            )
        })
    }

    /// The engine's MQ completion table (post with keys from it).
    #[inline]
    pub(crate) fn table(&self) -> &Arc<CompletionTable<MqCompletion>> {
        &self.table
    }

    /// The domain's reserved tag bits.
    pub(crate) fn tags(&self) -> &TagLayout {
        &self.tags
    }

    /// The configuration the domain was opened with.
    pub(crate) fn config(&self) -> &PsmConfig {
        self.info.config()
    }

    /// The AM message queue (`FI_PSM_AM_MSG=1`).
    pub(crate) fn am_msg(&self) -> &Arc<AmMsgQueue> {
        &self.am_msg
    }

    /// The RMA and atomic transport.
    ///
    /// # Errors
    /// `NoSys` when the engine cannot carry RMA (fewer than 5 AM
    /// arguments).
    pub(crate) fn rma(&self) -> Result<&Arc<RmaTransport>> {
        self.rma
            .as_ref()
            .map_err(|e| Error::new(e.kind(), e.message()))
    }

    /// Makes `ep` the endpoint that receives remote RMA events (its
    /// `FI_RMA_EVENT` counters and remote CQ data). The endpoint builder
    /// calls this for the endpoint that claims the RMA target slot.
    pub(crate) fn set_rma_target(&self, ep: &Arc<EndpointCore>) {
        if let Ok(rma) = &self.rma {
            rma.set_target_endpoint(ep);
        }
    }

    /// The domain's record of dead peers (operations ask it before
    /// posting and register with it while they wait).
    pub(crate) fn peers(&self) -> &Arc<PeerBook> {
        &self.peers
    }

    /// The engine endpoint's id.
    pub(crate) fn epid(&self) -> Epid {
        self.epid
    }

    /// What the engine can carry.
    pub(crate) fn limits(&self) -> EngineLimits {
        self.limits
    }

    /// The info the domain was opened with.
    pub(crate) fn info(&self) -> &Info {
        &self.info
    }

    /// The fabric it belongs to.
    pub(crate) fn fabric(&self) -> &Arc<FabricCore> {
        &self.fabric
    }

    /// The capability slots.
    pub(crate) fn slots(&self) -> MutexGuard<'_, DomainSlots> {
        relock(&self.slots)
    }

    /// `OpBadState` once the domain was closed.
    #[inline]
    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.closed_error());
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn closed_error(&self) -> Error {
        Error::new(
            ErrorKind::OpBadState,
            format!("domain {}: already closed", self.epid),
        )
    }

    /// Counts `ep` in the domain's totals from now on.
    pub(crate) fn adopt(&self, ep: &Arc<EndpointCore>) {
        let mut eps = relock(&self.endpoints);
        eps.retain(|e| e.strong_count() > 0);
        eps.push(Arc::downgrade(ep));
    }

    /// Keeps the counts of an endpoint that is going away.
    pub(crate) fn retire_stats(&self, counts: &OpCounters) {
        self.retired.absorb(counts);
    }

    /// The figures of the engine endpoint beneath every endpoint here: its
    /// unexpected queue (and the AM message queue's) and the dead peers;
    /// no operation counts.
    pub(crate) fn engine_stats(&self) -> EndpointStats {
        let q = self.engine.queue_stats();
        let am = self.am_msg.stats();
        EndpointStats {
            unexpected_msgs: q.unexpected_msgs.map(|n| n + am.unexpected as u64),
            unexpected_bytes: q.unexpected_bytes.map(|n| n + am.unexpected_bytes),
            unexpected_total: q.unexpected_total,
            shm_links: q.shm_links,
            dead_peers: self.peers.dead_count(),
            ..EndpointStats::default()
        }
    }

    /// Whether `cq` was made by this domain.
    pub(crate) fn made_cq(&self, cq: &CompletionQueue) -> bool {
        relock(&self.made).cqs.iter().any(|c| c.same(cq))
    }

    /// Whether `counter` was made by this domain.
    pub(crate) fn made_counter(&self, counter: &Counter) -> bool {
        relock(&self.made).counters.iter().any(|c| c.same(counter))
    }

    /// The close sequence (module docs), on the calling thread; runs
    /// once, later calls return `Ok` at once. Only steps 2 and 3 wait:
    /// `FI_PSM_DELAY`, then the engine's close within `FI_PSM_TIMEOUT`
    /// (both bounded by the configuration's maxima).
    fn shutdown(&self) -> Result<()> {
        match self.begin_shutdown() {
            Some(linger) => linger.run(),
            None => Ok(()),
        }
    }

    /// The steps of the close sequence that do not wait (0 and 1: the
    /// goodbyes, the sources out of the reactor), and what is left to do
    /// ([`Linger`]); `None` when the domain was closed already.
    fn begin_shutdown(&self) -> Option<Linger> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return None;
        }
        // 0. Peers waiting for us learn at once that we are gone (and get
        // no answer to RMA from here any more: they learn it that way).
        if let Ok(rma) = &self.rma {
            rma.stop_serving();
        }
        self.watch.say_goodbye();
        // 1. No progress call runs on our sources after this.
        for id in relock(&self.sources).drain(..).rev() {
            self.reactor.remove_source(id);
        }
        let config = self.info.config();
        Some(Linger {
            engine: self.engine.clone(),
            rma: self.rma.as_ref().ok().cloned(),
            delay: config.delay(),
            timeout: config.timeout(),
            epid: self.epid,
            made: std::mem::take(&mut *relock(&self.made)),
        })
    }
}

/// The waiting part of a domain's close (steps 2 to 4 of the sequence in
/// the module docs), which holds what it needs: it runs on the closing
/// thread ([`Domain::close`]), or on a thread of its own
/// ([`Domain::close_async`], and the last handle dropped on an async
/// runtime's thread).
struct Linger {
    engine: Arc<dyn EngineEndpoint>,
    rma: Option<Arc<RmaTransport>>,
    delay: Duration,
    timeout: Duration,
    epid: Epid,
    /// The domain's queues and counters, dropped once the engine closed.
    made: Made,
}

impl Linger {
    fn run(self) -> Result<()> {
        // 2. The C provider's workaround for a PSM assertion at close.
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        // 3. Graceful within FI_PSM_TIMEOUT, forced after (or at once for 0);
        // the native engine's own psm_ep_close included (module docs).
        let result = self.engine.close(self.timeout);
        // 4. RMA and atomics still waiting for their peers end now (their
        // MQ transfers were just completed by the engine's close).
        if let Some(rma) = &self.rma {
            rma.fail_all("the domain closed");
        }
        // Queues and counters of this domain may now be dropped by the
        // application alone.
        drop(self.made);
        let epid = self.epid;
        result.map_err(|e| {
            let message = format!("closing domain {epid}: {}", e.message());
            Error::with_source(e.kind(), message, e)
        })
    }

    /// Runs on a thread of its own (here when none starts), reporting a
    /// failure at `warn` as a dropped domain does.
    fn run_elsewhere(self) {
        LINGERING.fetch_add(1, Ordering::AcqRel);
        crate::fabric::offload::spawn_or_run("psmrail-close", move || {
            if let Err(e) = self.run() {
                tracing::warn!("domain dropped: {e}");
            }
            LINGERING.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Domains whose last handle was dropped on an async runtime's thread and
/// whose close still runs on a thread of its own.
static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// How many domains dropped on an async runtime's thread are still closing
/// (the integration tests' view, `psmrail::hooks`).
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(crate) fn lingering() -> usize {
    LINGERING.load(Ordering::Acquire)
}

impl Drop for DomainCore {
    fn drop(&mut self) {
        // On an async runtime's thread, the waiting part runs on a thread
        // of its own: the worker goes on at once (module docs, "Closing").
        if crate::fabric::offload::in_async_runtime() {
            if let Some(linger) = self.begin_shutdown() {
                linger.run_elsewhere();
            }
            return;
        }
        if let Err(e) = self.shutdown() {
            tracing::warn!("domain dropped: {e}");
        }
    }
}

/// What [`open_engine`] opened: the gated endpoint (for the operations),
/// the endpoint itself (for the watch), the reactor and the endpoint's
/// source id.
type Opened = (Arc<dyn EngineEndpoint>, DirectEngine, Reactor, SourceId);

/// Opens `engine`'s endpoint, then the reactor, then adds the endpoint to
/// it: the order PSM needs (see the module docs). The operations get the
/// endpoint behind a [`PeerGate`] with `book`.
fn open_engine<E: Engine>(
    engine: &E,
    options: &EndpointOptions,
    reactor: ReactorBuilder,
    shared: Option<&Reactor>,
    book: &Arc<PeerBook>,
) -> Result<Opened> {
    let ep = engine.open(options)?;
    let fail = |ep: &Arc<E::Endpoint>, kind, what: &str, e: std::io::Error| {
        let _ = ep.close(Duration::ZERO);
        Error::with_source(kind, format!("opening the domain: {what}"), e)
    };
    let reactor = match shared {
        Some(r) => r.clone(),
        None => reactor.build().map_err(|e| {
            fail(
                &ep,
                ErrorKind::Inval,
                "cannot build the progress reactor",
                e,
            )
        })?,
    };
    let source: Arc<dyn ProgressSource> = ep.clone();
    let id = reactor.add_source(source).map_err(|e| {
        fail(
            &ep,
            ErrorKind::Other,
            "cannot add the engine endpoint to the reactor",
            e,
        )
    })?;
    let gate: Arc<dyn EngineEndpoint> = Arc::new(PeerGate::new(ep.clone(), book.clone()));
    Ok((gate, DirectEngine::new(ep), reactor, id))
}

/// Device unit and port for the engine: from the info's `FI_SOURCE` name
/// (`node = "x:unit:port"`), else any.
fn device(info: &Info) -> (Option<u32>, Option<u32>) {
    match &info.source {
        Some(s) => (s.unit, s.port),
        None => (None, None),
    }
}

/// A domain (`fid_domain`): a cheap `Clone` handle.
///
/// ```
/// use psmrail::fabric::{getinfo, CqAttr, Fabric, Hints};
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
/// let fabric = Fabric::open(&info)?;
/// let domain = fabric.domain(&info)?;
/// let cq = domain.cq(CqAttr::new())?;
/// let ep = domain.endpoint(&info).bind_cq(&cq, psmrail::fabric::CqBind::TRANSMIT | psmrail::fabric::CqBind::RECV).enable()?;
/// assert_eq!(ep.getname(), domain.epid());
/// ep.close()?;
/// domain.close()?;
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone)]
pub struct Domain {
    pub(crate) core: Arc<DomainCore>,
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

/// Adaptive progress on the soft engine: the longest idle sleep of the
/// progress thread (socket readiness ends it for every arrival; the soft
/// engine's own timers — dial and handshake timeouts, reconnect back-off,
/// linger — and the peer watch may run this late).
const SOFT_READINESS_SLEEP: Duration = Duration::from_millis(20);

impl Domain {
    pub(crate) fn open(fabric: Arc<FabricCore>, info: &Info) -> Result<Domain> {
        Domain::open_on(fabric, info, None)
    }

    /// Opens a domain progressed by `shared` instead of a reactor of its
    /// own (the rails of an mrail domain share one reactor); `None` builds
    /// one as [`open`](Self::open) does.
    pub(crate) fn open_on(
        fabric: Arc<FabricCore>,
        info: &Info,
        shared: Option<&Reactor>,
    ) -> Result<Domain> {
        // The peer watch's host label, checked before anything opens.
        crate::proto::peer_watch::identity::host_label(&crate::config::ProcessEnv)?;
        let config = info.config();
        let (unit, port) = device(info);
        let options = EndpointOptions {
            uuid: *config.uuid().as_bytes(),
            unit,
            port,
            close_timeout: config.timeout(),
        };
        // FI_PSM_PROG_THREAD only permits the thread; the domain must ask
        // for automatic progress to get one (C: PR #1471).
        // A spin window makes it adaptive progress. The soft engine's
        // sockets wake the thread for every arrival, so its idle sleeps may
        // grow; PSM's shared memory signals nothing, so the native engine
        // is polled every interval.
        let mode = if info.progress == ProgressKind::Auto && config.prog_thread() {
            if info.spin.is_zero() {
                ProgressMode::Auto(config.auto_progress())
            } else {
                ProgressMode::Adaptive(AdaptiveProgress {
                    spin: info.spin,
                    auto: config.auto_progress(),
                    readiness_sleep: match info.engine {
                        EngineKind::Soft => Some(SOFT_READINESS_SLEEP),
                        EngineKind::Native => None,
                    },
                })
            }
        } else {
            ProgressMode::Manual
        };
        let mut reactor = Reactor::builder().mode(mode);
        if let Some(every) = info.idle_assist {
            // Manual progress only: the other modes have their thread.
            reactor = reactor.idle_assist(every);
        }
        let peers = Arc::new(PeerBook::new());
        let (engine, raw_engine, reactor, engine_source) = match info.engine {
            EngineKind::Native => {
                open_engine(&NativeEngine::load()?, &options, reactor, shared, &peers)?
            }
            EngineKind::Soft => open_engine(
                &SoftEngine::new(info.soft_config().clone())?,
                &options,
                reactor,
                shared,
                &peers,
            )?,
        };
        let mut sources = vec![engine_source];
        // AM handlers, in a fixed order (ids must agree across processes):
        // the AM message queue first.
        let am_msg = match AmMsgQueue::register(engine.clone()) {
            Ok(q) => q,
            Err(e) => {
                let _ = engine.close(Duration::ZERO);
                return Err(e);
            }
        };
        // Then one handler for RMA and atomics (proto/rma_transport.rs).
        // Engines with too few AM arguments get no handler and NoSys on
        // every RMA call (no handler follows, so ids still agree).
        let mr = MrTable::new();
        let slots = Arc::new(Mutex::new(DomainSlots::new()));
        let rma = RmaTransport::register(
            engine.clone(),
            mr.clone(),
            slots.clone(),
            config.tagged_rma(),
        );
        // Then the peer watch's handler (last: it may be missing).
        am_msg.set_book(peers.clone());
        let watch = PeerWatch::register(
            raw_engine.as_dyn(),
            peers.clone(),
            config.timeout(),
            am_msg.clone(),
            rma.as_ref().ok().cloned(),
        );
        let am_source: Arc<dyn ProgressSource> = am_msg.clone();
        match reactor.add_source(am_source) {
            Ok(id) => sources.push(id),
            Err(e) => {
                let _ = engine.close(Duration::ZERO);
                return Err(Error::with_source(
                    ErrorKind::Other,
                    "opening the domain: cannot add the AM message queue to the reactor",
                    e,
                ));
            }
        }
        if let Ok(rma) = &rma {
            let rma_source: Arc<dyn ProgressSource> = rma.clone();
            match reactor.add_source(rma_source) {
                Ok(id) => sources.push(id),
                Err(e) => {
                    let _ = engine.close(Duration::ZERO);
                    return Err(Error::with_source(
                        ErrorKind::Other,
                        "opening the domain: cannot add the RMA transport to the reactor",
                        e,
                    ));
                }
            }
        }
        let watch_source: Arc<dyn ProgressSource> = watch.clone();
        match reactor.add_source(watch_source) {
            Ok(id) => sources.push(id),
            Err(e) => {
                let _ = engine.close(Duration::ZERO);
                return Err(Error::with_source(
                    ErrorKind::Other,
                    "opening the domain: cannot add the peer watch to the reactor",
                    e,
                ));
            }
        }
        let epid = engine.epid();
        let limits = engine.limits();
        tracing::debug!("domain {epid} opened on the {} engine", engine.kind());
        Ok(Domain {
            core: Arc::new(DomainCore {
                fabric,
                info: info.clone(),
                table: engine.completions().clone(),
                engine,
                direct: raw_engine,
                reactor,
                am_msg,
                rma,
                peers,
                watch,
                mr,
                sources: Mutex::new(sources),
                tags: TagLayout::new(),
                slots,
                epid,
                limits,
                closed: AtomicBool::new(false),
                made: Mutex::new(Made::default()),
                endpoints: Mutex::new(Vec::new()),
                retired: OpCounters::default(),
                deferred: OnceLock::new(),
            }),
        })
    }

    /// A completion queue progressed by this domain's reactor (`fi_cq_open`).
    pub fn cq(&self, attr: CqAttr) -> Result<CompletionQueue> {
        self.core.ensure_open()?;
        let cq = CompletionQueue::new(attr, self.core.reactor.clone());
        relock(&self.core.made).cqs.push(cq.clone());
        Ok(cq)
    }

    /// A counter progressed by this domain's reactor (`fi_cntr_open`).
    pub fn counter(&self, attr: CounterAttr) -> Result<Counter> {
        self.core.ensure_open()?;
        let c = Counter::new(attr, self.core.reactor.clone());
        relock(&self.core.made).counters.push(c.clone());
        Ok(c)
    }

    /// Registers memory for remote access (`fi_mr_reg`): the region takes
    /// `bytes` over (no copy) and exposes them to peers' RMA and atomics
    /// with `access`, under `key` (`None`: the provider picks 1, 2, ...).
    /// Remote addresses are offsets into the region. Peers reach it only
    /// while an endpoint of this domain is an RMA (atomic) target.
    ///
    /// ```
    /// # use psmrail::fabric::{getinfo, EngineChoice, Fabric, Hints, MrAccess};
    /// # use psmrail::config::PsmConfig;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let info = getinfo(Some(&Hints::new().engine(EngineChoice::Soft).config(config)))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// let mr = domain.register(vec![0u8; 4096], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(7))?;
    /// assert_eq!((mr.key(), mr.len()), (7, 4096));
    /// let busy = domain.register(vec![0u8; 16], MrAccess::REMOTE_READ, Some(7));
    /// assert_eq!(busy.unwrap_err().kind(), psmrail::ErrorKind::Busy);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Busy` when `key` is in use; `Inval` for unknown access bits;
    /// `OpBadState` after close.
    pub fn register(
        &self,
        bytes: impl Into<Box<[u8]>>,
        access: MrAccess,
        key: Option<u64>,
    ) -> Result<MemoryRegion> {
        self.core.ensure_open()?;
        self.core.mr.register(bytes.into(), access, key)
    }

    /// Registers memory that stays where it is (`fi_mr_reg` of a C
    /// application's buffer): `region` promises a fixed address, valid for
    /// its whole life ([`StableRegion`]); peers' RMA and atomics reach its
    /// bytes in place, with `access`, under `key` (`None`: the provider
    /// picks). The region is otherwise as [`register`](Self::register)'s.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub fn register_region(
        &self,
        region: Arc<dyn StableRegion>,
        access: MrAccess,
        key: Option<u64>,
    ) -> Result<MemoryRegion> {
        self.core.ensure_open()?;
        self.core.mr.register_kept(region, access, key)
    }

    /// Registers `region`'s memory (of another domain) here too, under
    /// `key` or a provider-assigned one: the multi-rail domain's regions
    /// are one memory registered on every rail, and a multi-rail C face
    /// registers an application's buffer on every rail's domain this way.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub fn register_shared(&self, region: &MemoryRegion, key: Option<u64>) -> Result<MemoryRegion> {
        self.core.ensure_open()?;
        self.core.mr.register_shared(region, key)
    }

    /// `fi_mr_map_raw`: the key a peer's raw key (its region's
    /// [`raw_key`](MemoryRegion::raw_key)) stands for in RMA calls on this
    /// domain's endpoints. For the psm provider that is the key itself
    /// ([`RawKey::key`]); nothing is allocated, so
    /// [`unmap_key`](Self::unmap_key) has nothing to free.
    ///
    /// ```
    /// # use psmrail::fabric::{getinfo, EngineChoice, Fabric, Hints, MrAccess};
    /// # use psmrail::config::PsmConfig;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let info = getinfo(Some(&Hints::new().engine(EngineChoice::Soft).config(config)))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// let mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_WRITE, None)?;
    /// assert_eq!(domain.map_raw(&mr.raw_key())?, mr.key());
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Inval` when the raw key is not [`RAW_KEY_SIZE`](crate::fabric::RAW_KEY_SIZE) bytes.
    pub fn map_raw(&self, raw: &RawKey) -> Result<u64> {
        raw.key()
    }

    /// `fi_mr_unmap_key`: forgets a key [`map_raw`](Self::map_raw) gave
    /// (a no-op for the psm provider, whose mapped keys hold nothing).
    pub fn unmap_key(&self, key: u64) -> Result<()> {
        let _ = key;
        Ok(())
    }

    /// `fi_query_atomic`: the most elements of `dt` one `kind` call with
    /// `op` takes on this domain's endpoints (as the endpoints' own
    /// `atomic_valid` queries answer).
    ///
    /// # Errors
    /// `OpNotSupp` for an op x datatype pair psm does not carry; `NoSys`
    /// when the engine carries no RMA.
    pub fn atomic_valid(
        &self,
        kind: crate::ops::atomic::AtomicKind,
        op: crate::ops::atomic::AtomicOp,
        dt: crate::ops::atomic::AtomicDatatype,
    ) -> Result<usize> {
        self.core.ensure_open()?;
        let max = self.core.rma()?.max_atomic();
        crate::ops::atomic::atomic_valid(kind, op, dt, max)
    }

    /// `fi_mr_reg`: the same as [`register`](Self::register).
    pub fn mr_reg(
        &self,
        bytes: impl Into<Box<[u8]>>,
        access: MrAccess,
        key: Option<u64>,
    ) -> Result<MemoryRegion> {
        self.register(bytes, access, key)
    }

    /// An address vector (`fi_av_open`).
    pub fn av(&self, attr: AvAttr) -> Result<AddressVector> {
        AddressVector::open(self.core.clone(), attr)
    }

    /// Starts an endpoint (`fi_endpoint`): bind queues, counters and an
    /// address vector on the builder, then `enable` it.
    pub fn endpoint(&self, info: &Info) -> EndpointBuilder {
        EndpointBuilder::new(self.core.clone(), info)
    }

    /// `fi_scalable_ep`: not supported by the psm provider.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn scalable_endpoint(&self, info: &Info) -> Result<Endpoint> {
        let _ = info;
        Err(unsupported("scalable endpoints (fi_scalable_ep)"))
    }

    /// `fi_srx_context`: not supported by the psm provider.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn srx_context(&self, info: &Info) -> Result<Endpoint> {
        let _ = info;
        Err(unsupported("shared receive contexts (fi_srx_context)"))
    }

    /// The engine endpoint's id: what every endpoint of this domain
    /// reports from `getname`.
    pub fn epid(&self) -> Epid {
        self.core.epid
    }

    /// Which engine serves the domain.
    pub fn engine_kind(&self) -> EngineKind {
        self.core.engine.kind()
    }

    /// The reactor driving this domain (run futures with its `block_on`,
    /// or call `progress` in manual mode).
    pub fn reactor(&self) -> &Reactor {
        &self.core.reactor
    }

    /// The info the domain was opened with.
    pub fn info(&self) -> &Info {
        &self.core.info
    }

    /// The domain's current reserved tag bits (they only grow, as
    /// endpoints are enabled).
    pub fn reserved_tag_bits(&self) -> u64 {
        self.core.tags.reserved()
    }

    /// Totals over the domain's endpoints ([`EndpointStats`]): the
    /// messages, bytes, errors and refused posts of every endpoint enabled
    /// here, closed and dropped ones included, and the engine endpoint's
    /// unexpected queue and dead peers (the same figures each endpoint
    /// reports).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().caps(Caps::TAGGED | Caps::MSG).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints)).unwrap().remove(0);
    /// # let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    /// # let av = domain.av(AvAttr::new()).unwrap();
    /// let tagged = domain.endpoint(&info).caps(Caps::TAGGED).bind_av(&av).enable()?;
    /// let msg = domain.endpoint(&info).caps(Caps::MSG).bind_av(&av).enable()?;
    /// let me = av.insert(&[domain.epid()]).remove(0)?;
    /// tagged.tinject(me, 1, b"abc")?;
    /// msg.inject(me, b"defgh")?;
    /// drop(msg); // its counts stay in the totals
    /// let s = domain.stats();
    /// assert_eq!((s.msgs_sent, s.bytes_sent), (2, 8));
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn stats(&self) -> EndpointStats {
        let core = &self.core;
        let mut s = core.engine_stats();
        core.retired.add_to(&mut s);
        for ep in relock(&core.endpoints).iter().filter_map(Weak::upgrade) {
            ep.stats.add_to(&mut s);
        }
        s
    }

    /// Whether `other` is a handle of the same domain.
    pub fn same(&self, other: &Domain) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// Closes the domain now (`fi_close`): stops its progress, sleeps
    /// `FI_PSM_DELAY`, then closes the engine endpoint within
    /// `FI_PSM_TIMEOUT` (forced at once when it is zero). Other handles
    /// (endpoints, AVs) then report `FI_EOPBADSTATE`. Dropping the last
    /// handle does the same, ignoring errors (on a tokio runtime's thread,
    /// with the sleep and the engine's close on a thread of its own: see
    /// the module docs, "Where a close waits").
    ///
    /// Returns within `FI_PSM_DELAY + FI_PSM_TIMEOUT`, except on the native
    /// engine with connected peers and a timeout under a second, where
    /// libpsm2's own close adds up to 1 s (2 s for a zero, forced, timeout);
    /// see [the native engine](crate::engine::native), "Closing".
    ///
    /// # Blocking
    /// The calling thread sleeps `FI_PSM_DELAY` (1 s by default) and waits
    /// for the engine's close, as said above. In async code, await
    /// [`close_async`](Self::close_async) instead.
    ///
    /// # Errors
    /// The engine's close error (the endpoint is closed anyway).
    pub fn close(self) -> Result<()> {
        self.core.shutdown()
    }

    /// The async form of [`close`](Self::close): the same sequence, whose
    /// waiting part (`FI_PSM_DELAY`, then the engine's close within
    /// `FI_PSM_TIMEOUT`) runs on a thread of its own (`psmrail-close`: the
    /// engines' close is a blocking call) while the future waits for it,
    /// parking no executor thread. It resolves when the engine endpoint is
    /// closed, as `close` returns, with the same result.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, EngineChoice, Fabric, Hints};
    /// let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    ///     .delay(std::time::Duration::from_millis(50)).build().unwrap();
    /// let info = getinfo(Some(&Hints::new().engine(EngineChoice::Soft).config(config)))?.remove(0);
    /// let domain = Fabric::open(&info)?.domain(&info)?;
    /// let other = domain.clone();
    /// futures::executor::block_on(domain.close_async())?;
    /// assert!(other.av(Default::default()).is_err()); // FI_EOPBADSTATE
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Blocking
    /// Never: the first poll runs the steps that do not wait (the peers'
    /// goodbyes, the domain's sources out of its reactor) and starts the
    /// thread; only when no thread can be started does the close run
    /// there, on the polling thread (said at `warn`).
    ///
    /// # Cancel safety
    /// Nothing happens before the first poll: dropping the future then
    /// only drops this handle. Once polled, the domain is closed for every
    /// handle, and dropping the future lets the close finish on its thread
    /// (the engine endpoint is closed, nothing is leaked); only its result
    /// is lost (an error is logged at `warn`, as for a dropped domain).
    /// A domain already closed (or closing) resolves to `Ok` at once.
    pub fn close_async(self) -> DomainClose {
        DomainClose {
            domain: Some(self),
            running: None,
        }
    }
}

/// The future of [`Domain::close_async`]: the domain's close, its waiting
/// part on a thread of its own.
#[must_use = "a future does nothing unless polled"]
#[derive(Debug)]
pub struct DomainClose {
    domain: Option<Domain>,
    running: Option<crate::fabric::offload::Offload<Result<()>>>,
}

impl std::future::Future for DomainClose {
    type Output = Result<()>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        let this = &mut *self;
        if let Some(domain) = this.domain.take() {
            let Some(linger) = domain.core.begin_shutdown() else {
                return std::task::Poll::Ready(Ok(()));
            };
            match crate::fabric::offload::spawn("psmrail-close", move || linger.run()) {
                Ok(running) => this.running = Some(running),
                Err((e, work)) => {
                    tracing::warn!(error = %e, "cannot start the psmrail-close thread: closing here");
                    return std::task::Poll::Ready(work());
                }
            }
        }
        let Some(running) = this.running.as_mut() else {
            return std::task::Poll::Ready(Ok(()));
        };
        std::pin::Pin::new(running).poll(cx).map(|r| {
            this.running = None;
            r.unwrap_or_else(|| {
                Err(Error::new(
                    ErrorKind::Other,
                    "closing the domain: its close thread ended without a result",
                ))
            })
        })
    }
}

/// An `FI_ENOSYS` error naming the unsupported feature (fi_psm(7),
/// "Unsupported features").
pub(crate) fn unsupported(feature: &str) -> Error {
    Error::new(
        ErrorKind::NoSys,
        format!("the psm provider does not support {feature}"),
    )
}
