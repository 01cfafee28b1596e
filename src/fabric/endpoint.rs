//! The endpoint (`fid_ep`): a view onto its domain's single engine endpoint,
//! with the queues, counters and address vector it was bound to.
//!
//! Endpoints are made by [`EndpointBuilder`](super::EndpointBuilder)
//! (`domain.endpoint(&info)...enable()`), which checks the capability rule
//! of the domain, reserves tag bits and registers the endpoint with the
//! name server. Everything bound is fixed once enabled, so the operations
//! (in `psmrail::ops`) read it without locks: resolving a destination is an
//! index into the address vector's entries.
//!
//! What the psm provider does not support gives `FI_ENOSYS` naming the
//! feature (fi_psm(7), "Unsupported features"): connection management
//! ([`Endpoint::connect`], [`Endpoint::accept`], [`Endpoint::shutdown`])
//! and immediate data on messages ([`Endpoint::senddata`] and friends).

use super::av::AddressVector;
use super::domain::{unsupported, Domain, DomainCore};
use super::name_server::{Registration, Service};
use super::{
    Caps, CompletionQueue, Counter, EndpointStats, EpType, FiAddr, Info, OpCounters, SlotClaim,
};
use crate::engine::{Epid, PeerAddr};
use crate::ops::multi_post::MultiState;
use crate::{Error, ErrorKind, Result};
use bitflags::bitflags;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

bitflags! {
    /// How a completion queue is bound (`fi_ep_bind` flags), libfabric's
    /// values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CqBind: u64 {
        /// `FI_TRANSMIT`: completions of sends, writes, reads, atomics.
        const TRANSMIT = 1 << 11;
        /// `FI_RECV`: completions of receives.
        const RECV = 1 << 10;
        /// `FI_SELECTIVE_COMPLETION`: only operations asking for a
        /// completion write an entry (errors always do).
        const SELECTIVE_COMPLETION = 1 << 59;
    }
}

bitflags! {
    /// Which events a counter is bound to count (`fi_ep_bind` flags),
    /// libfabric's values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CounterBind: u64 {
        /// `FI_SEND`: sends, tagged sends, injects.
        const SEND = 1 << 11;
        /// `FI_RECV`: receives.
        const RECV = 1 << 10;
        /// `FI_READ`: RMA reads, fetching atomics.
        const READ = 1 << 8;
        /// `FI_WRITE`: RMA writes, atomic writes.
        const WRITE = 1 << 9;
        /// `FI_REMOTE_READ`: reads of this endpoint's memory by peers.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: writes into this endpoint's memory by peers.
        const REMOTE_WRITE = 1 << 13;
    }
}

/// A completion-queue direction of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Initiated operations (`FI_TRANSMIT`).
    Transmit,
    /// Receives (`FI_RECV`).
    Recv,
}

/// The counters an endpoint may have bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// `FI_SEND`.
    Send,
    /// `FI_RECV`.
    Recv,
    /// `FI_READ`.
    Read,
    /// `FI_WRITE`.
    Write,
    /// `FI_REMOTE_READ`.
    RemoteRead,
    /// `FI_REMOTE_WRITE`.
    RemoteWrite,
}

impl CounterKind {
    /// All kinds, in the order of the endpoint's counter array.
    pub const ALL: [CounterKind; 6] = [
        CounterKind::Send,
        CounterKind::Recv,
        CounterKind::Read,
        CounterKind::Write,
        CounterKind::RemoteRead,
        CounterKind::RemoteWrite,
    ];

    /// The binding flag for this kind.
    pub const fn bind_flag(self) -> CounterBind {
        match self {
            CounterKind::Send => CounterBind::SEND,
            CounterKind::Recv => CounterBind::RECV,
            CounterKind::Read => CounterBind::READ,
            CounterKind::Write => CounterBind::WRITE,
            CounterKind::RemoteRead => CounterBind::REMOTE_READ,
            CounterKind::RemoteWrite => CounterBind::REMOTE_WRITE,
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// What closing gives back to the domain and the name server.
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) claim: Option<SlotClaim>,
    pub(crate) registration: Option<Registration>,
}

/// The shared state of an [`Endpoint`]: fixed at enable, except the
/// `FI_OPT_MIN_MULTI_RECV` option and the open flag.
pub(crate) struct EndpointCore {
    pub(crate) domain: Arc<DomainCore>,
    pub(crate) info: Info,
    pub(crate) caps: Caps,
    pub(crate) ep_type: EpType,
    pub(crate) av: Option<AddressVector>,
    pub(crate) tx_cq: Option<CompletionQueue>,
    pub(crate) rx_cq: Option<CompletionQueue>,
    #[allow(dead_code)] // read through `selective`
    pub(crate) tx_selective: bool,
    #[allow(dead_code)] // read through `selective`
    pub(crate) rx_selective: bool,
    pub(crate) counters: [Option<Counter>; 6],
    pub(crate) min_multi_recv: AtomicUsize,
    pub(crate) inject_size: usize,
    pub(crate) service: u32,
    pub(crate) closed: AtomicBool,
    pub(crate) held: Mutex<Held>,
    /// What its operations did ([`Endpoint::stats`]).
    pub(crate) stats: OpCounters,
    /// Multi-receives posted with a context, in posting order: the first
    /// one receives, the others wait for it to be released
    /// (`ops/multi_post.rs`).
    pub(crate) multi_recvs: Mutex<VecDeque<Arc<MultiState>>>,
}

impl fmt::Debug for EndpointCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointCore")
            .field("epid", &self.domain.epid())
            .field("caps", &self.caps)
            .field("service", &self.service)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl EndpointCore {
    /// The domain (engine, reactor, tags) behind the endpoint.
    #[inline]
    pub(crate) fn domain(&self) -> &Arc<DomainCore> {
        &self.domain
    }

    /// The endpoint's capabilities.
    #[inline]
    pub(crate) fn caps(&self) -> Caps {
        self.caps
    }

    /// `OpBadState` once the endpoint or its domain was closed.
    #[inline]
    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.closed_error());
        }
        self.domain.ensure_open()
    }

    #[cold]
    #[inline(never)]
    fn closed_error(&self) -> Error {
        Error::new(
            ErrorKind::OpBadState,
            format!(
                "endpoint {} (service {}): already closed",
                self.domain.epid(),
                self.service
            ),
        )
    }

    /// The engine peer `dest` names in the bound address vector: O(1),
    /// no lock. `Inval` for an address the AV did not return (or
    /// `UNSPEC`), `OpBadState` without an AV.
    #[inline]
    pub(crate) fn resolve(&self, dest: FiAddr) -> Result<PeerAddr> {
        match &self.av {
            Some(av) => av.core.resolve(dest),
            None => Err(no_av(dest)),
        }
    }

    /// The address a completion's source has in the bound AV; `UNSPEC`
    /// when unknown (or without an AV).
    #[inline]
    pub(crate) fn source_of(&self, peer: Option<PeerAddr>, epid: Option<Epid>) -> FiAddr {
        match &self.av {
            Some(av) => av.core.source_of(peer, epid),
            None => FiAddr::UNSPEC,
        }
    }

    /// The queue bound for `dir`.
    #[inline]
    pub(crate) fn cq(&self, dir: Direction) -> Option<&CompletionQueue> {
        match dir {
            Direction::Transmit => self.tx_cq.as_ref(),
            Direction::Recv => self.rx_cq.as_ref(),
        }
    }

    /// Whether the queue for `dir` was bound with `FI_SELECTIVE_COMPLETION`.
    #[allow(dead_code)] // for the ops (src/ops/), which are being written
    #[inline]
    pub(crate) fn selective(&self, dir: Direction) -> bool {
        match dir {
            Direction::Transmit => self.tx_selective,
            Direction::Recv => self.rx_selective,
        }
    }

    /// The endpoint's operation counters.
    #[inline(always)]
    pub(crate) fn stats(&self) -> &OpCounters {
        &self.stats
    }

    /// The counter bound for `kind`.
    #[inline]
    pub(crate) fn counter(&self, kind: CounterKind) -> Option<&Counter> {
        self.counters[kind.index()].as_ref()
    }

    /// `FI_OPT_MIN_MULTI_RECV` (0 by default, as C).
    #[inline]
    pub(crate) fn min_multi_recv(&self) -> usize {
        self.min_multi_recv.load(Ordering::Relaxed)
    }

    /// The largest inject (64 bytes, the info's `inject_size`).
    #[inline]
    pub(crate) fn inject_size(&self) -> usize {
        self.inject_size
    }

    /// Releases the slots and the name-server entry; once.
    fn release(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        tracing::info!(
            epid = %self.domain.epid(),
            service = self.service,
            caps = %self.caps,
            "endpoint closed"
        );
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner));
        if let Some(claim) = held.claim {
            self.domain.slots().release(claim);
        }
        match held.registration {
            Some(r) => r.unregister(),
            None => Ok(()),
        }
    }
}

impl EndpointCore {
    /// Whether [`release`](Self::release) may wait: it removes a
    /// name-server entry that another process serves (a round trip).
    fn release_may_wait(&self) -> bool {
        !self.closed.load(Ordering::Acquire)
            && self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .registration
                .as_ref()
                .is_some_and(|r| r.is_remote())
    }
}

impl Drop for EndpointCore {
    fn drop(&mut self) {
        // On an async runtime's thread, a name-server entry that another
        // process serves is removed from a thread of its own.
        if self.release_may_wait() && crate::fabric::offload::in_async_runtime() {
            let registration = self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .registration
                .take();
            if let Some(r) = registration {
                crate::fabric::offload::spawn_or_run("psmrail-close", move || {
                    if let Err(e) = r.unregister() {
                        tracing::warn!("endpoint dropped: {e}");
                    }
                });
            }
        }
        if let Err(e) = self.release() {
            tracing::warn!("endpoint dropped: {e}");
        }
        // Its counts stay in the domain's totals.
        self.domain.retire_stats(&self.stats);
    }
}

#[cold]
fn no_av(dest: FiAddr) -> Error {
    Error::new(
        ErrorKind::OpBadState,
        format!("{dest}: the endpoint has no address vector bound"),
    )
}

/// An endpoint (`fid_ep`): a cheap `Clone` handle; the operations are in
/// [`psmrail::ops`](../ops/index.html).
///
/// ```
/// use psmrail::fabric::{getinfo, Caps, Fabric, Hints};
/// use psmrail::ErrorKind;
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
/// let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable()?;
/// ep.setopt_min_multi_recv(512)?;
/// assert_eq!(ep.min_multi_recv(), 512);
/// // A second tagged receiver in the same domain is refused.
/// let e = domain.endpoint(&info).caps(Caps::TAGGED).enable().unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::Busy);
/// // Closing releases its slot.
/// ep.close()?;
/// domain.endpoint(&info).caps(Caps::TAGGED).enable()?;
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) core: Arc<EndpointCore>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

impl Endpoint {
    /// The endpoint's address (`fi_getname`): its domain's epid, the
    /// 8-byte value peers insert in their address vectors.
    pub fn getname(&self) -> Epid {
        self.core.domain.epid()
    }

    /// The info it was opened with.
    pub fn info(&self) -> &Info {
        &self.core.info
    }

    /// Its capabilities.
    pub fn caps(&self) -> Caps {
        self.core.caps
    }

    /// Its type (`Rdm` or `Dgram`, which behaves as `Rdm`).
    pub fn ep_type(&self) -> EpType {
        self.core.ep_type
    }

    /// Its domain.
    pub fn domain(&self) -> Domain {
        Domain {
            core: self.core.domain.clone(),
        }
    }

    /// Its bound address vector.
    pub fn av(&self) -> Option<&AddressVector> {
        self.core.av.as_ref()
    }

    /// The service it registered with the name server under (0 when no
    /// name server runs or the registration failed).
    pub fn service(&self) -> Service {
        Service::new(self.core.service)
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is released
    /// once less than this many bytes are left in it (default 0, as C).
    ///
    /// # Errors
    /// `OpBadState` after close.
    pub fn setopt_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.core.ensure_open()?;
        self.core.min_multi_recv.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// `FI_OPT_MIN_MULTI_RECV`.
    pub fn min_multi_recv(&self) -> usize {
        self.core.min_multi_recv()
    }

    /// What the endpoint's operations did so far, and its engine's
    /// unexpected queue and dead peers ([`EndpointStats`]). The queue and
    /// the dead peers are the domain's, shared by its endpoints (a domain
    /// is one engine endpoint); the rest is this endpoint's own. Cheap:
    /// relaxed loads, and on the soft engine its lock once for the queue.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().caps(Caps::TAGGED).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints)).unwrap().remove(0);
    /// # let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    /// # let av = domain.av(AvAttr::new()).unwrap();
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    /// # let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    /// let reactor = domain.reactor();
    /// let recv = ep.trecv(vec![0u8; 2], 7, 0);
    /// let (sent, _) = reactor.block_on(ep.tsend(me, 7, b"hello".to_vec()));
    /// sent?;
    /// let (got, _) = reactor.block_on(recv);
    /// assert!(got.is_err()); // truncated: 5 bytes into 2
    /// let s = ep.stats();
    /// assert_eq!((s.msgs_sent, s.bytes_sent, s.msgs_received, s.errors), (1, 5, 0, 1));
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn stats(&self) -> EndpointStats {
        let mut s = self.core.domain.engine_stats();
        self.core.stats.add_to(&mut s);
        s
    }

    /// Whether the endpoint (or its domain) was closed.
    pub fn is_closed(&self) -> bool {
        self.core.ensure_open().is_err()
    }

    /// Whether `other` is a handle of the same endpoint.
    pub fn same(&self, other: &Endpoint) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// Closes the endpoint (`fi_close`), for every handle of it: releases
    /// its receive/target slots in the domain and removes its name-server
    /// entry (C: DEL). Operations then fail with `FI_EOPBADSTATE`; dropping
    /// the last handle does the same silently. A second close is `Ok`.
    ///
    /// # Blocking
    /// Removing the name-server entry is a loopback round trip when
    /// another process of the node serves (normally well under a
    /// millisecond; at most 5 s, the server's update timeout). When this
    /// was the last handle of the domain too (the application dropped the
    /// [`Domain`] and its other objects), the domain closes here as
    /// [`Domain::close`] does, sleeping `FI_PSM_DELAY` (1 s by default)
    /// and waiting for the engine's close. In async code, await
    /// [`close_async`](Self::close_async) instead.
    ///
    /// # Errors
    /// The name server's, when the entry could not be removed (the
    /// endpoint is closed anyway).
    pub fn close(self) -> Result<()> {
        self.core.release()
    }

    /// The async form of [`close`](Self::close): the same, with nothing
    /// waited for on the polling thread. A name-server entry that another
    /// process serves is removed from a thread of its own, and when this
    /// was the domain's last handle, the domain's close runs as
    /// [`Domain::close_async`] runs it (its linger and the engine's close
    /// on a thread of its own); the future resolves when all that is
    /// done, with the result `close` gives.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, Caps, EngineChoice, Fabric, Hints};
    /// let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    ///     .delay(std::time::Duration::from_millis(50)).build().unwrap();
    /// let info = getinfo(Some(&Hints::new().engine(EngineChoice::Soft).config(config)))?.remove(0);
    /// let domain = Fabric::open(&info)?.domain(&info)?;
    /// let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable()?;
    /// drop(domain); // the endpoint holds the domain's last handle now
    /// futures::executor::block_on(ep.close_async())?; // and closes it
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Blocking
    /// Never (only when no thread can be started does the waiting part
    /// run on the polling thread, said at `warn`).
    ///
    /// # Cancel safety
    /// Nothing happens before the first poll: dropping the future then
    /// drops this handle only (as dropping the endpoint does). The first
    /// poll closes the endpoint for every handle; dropping the future
    /// afterwards lets the entry's removal and the domain's close finish
    /// on their threads, losing only the result.
    pub fn close_async(self) -> EndpointClose {
        EndpointClose {
            endpoint: Some(self),
            releasing: None,
            domain: None,
        }
    }

    /// `fi_connect`: not supported (fi_psm(7): no connection management).
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn connect(&self, addr: Epid) -> Result<()> {
        let _ = addr;
        Err(unsupported("connection management (fi_connect)"))
    }

    /// `fi_accept`: not supported.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn accept(&self) -> Result<()> {
        Err(unsupported("connection management (fi_accept)"))
    }

    /// `fi_shutdown`: not supported.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn shutdown(&self) -> Result<()> {
        Err(unsupported("connection management (fi_shutdown)"))
    }

    /// `fi_senddata`: immediate data on messages is not supported.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn senddata(&self, dest: FiAddr, buf: &[u8], data: u64) -> Result<()> {
        let _ = (dest, buf, data);
        Err(unsupported("send with immediate data (fi_senddata)"))
    }

    /// `fi_injectdata`: not supported.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn injectdata(&self, dest: FiAddr, buf: &[u8], data: u64) -> Result<()> {
        let _ = (dest, buf, data);
        Err(unsupported("inject with immediate data (fi_injectdata)"))
    }

    /// `fi_tsenddata`: not supported.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn tsenddata(&self, dest: FiAddr, tag: u64, buf: &[u8], data: u64) -> Result<()> {
        let _ = (dest, tag, buf, data);
        Err(unsupported(
            "tagged send with immediate data (fi_tsenddata)",
        ))
    }

    /// `fi_tinjectdata`: not supported.
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn tinjectdata(&self, dest: FiAddr, tag: u64, buf: &[u8], data: u64) -> Result<()> {
        let _ = (dest, tag, buf, data);
        Err(unsupported(
            "tagged inject with immediate data (fi_tinjectdata)",
        ))
    }
}

/// The future of [`Endpoint::close_async`].
#[must_use = "a future does nothing unless polled"]
#[derive(Debug)]
pub struct EndpointClose {
    endpoint: Option<Endpoint>,
    /// The name-server entry's removal, on a thread of its own.
    releasing: Option<crate::fabric::offload::Offload<Result<()>>>,
    /// The domain's close, when the endpoint held its last handle; with
    /// the release's outcome, reported first.
    domain: Option<(super::domain::DomainClose, Result<()>)>,
}

impl EndpointClose {
    /// The endpoint handle goes; when it held its domain's last handle,
    /// the domain's close starts (the release gave `released`).
    fn drop_endpoint(&mut self, endpoint: Endpoint, released: Result<()>) -> Poll<Result<()>> {
        let domain = endpoint.core.domain.clone();
        drop(endpoint);
        // Only the clone is left: the domain closes now. (When another
        // handle goes concurrently, its drop closes the domain: without
        // waiting on an async runtime's thread.)
        if Arc::strong_count(&domain) == 1 {
            let close = Domain { core: domain }.close_async();
            self.domain = Some((close, released));
            return Poll::Pending;
        }
        Poll::Ready(released)
    }
}

impl std::future::Future for EndpointClose {
    type Output = Result<()>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        loop {
            if let Some((close, released)) = this.domain.as_mut() {
                let closed = std::task::ready!(std::pin::Pin::new(close).poll(cx));
                let released = std::mem::replace(released, Ok(()));
                this.domain = None;
                return Poll::Ready(released.and(closed));
            }
            if let Some(releasing) = this.releasing.as_mut() {
                let released = std::task::ready!(std::pin::Pin::new(releasing).poll(cx))
                    .unwrap_or_else(|| {
                        Err(Error::new(
                            ErrorKind::Other,
                            "closing the endpoint: its close thread ended without a result",
                        ))
                    });
                this.releasing = None;
                let Some(endpoint) = this.endpoint.take() else {
                    return Poll::Ready(released);
                };
                match this.drop_endpoint(endpoint, released) {
                    Poll::Pending => continue,
                    ready => return ready,
                }
            }
            let Some(endpoint) = this.endpoint.take() else {
                return Poll::Ready(Ok(()));
            };
            if endpoint.core.release_may_wait() {
                let core = endpoint.core.clone();
                match crate::fabric::offload::spawn("psmrail-close", move || {
                    let released = core.release();
                    // Before the result is sent: the future then sees
                    // whether the domain's last handle is its own.
                    drop(core);
                    released
                }) {
                    Ok(running) => {
                        this.releasing = Some(running);
                        // The handle goes once the entry is removed.
                        this.endpoint = Some(endpoint);
                        continue;
                    }
                    Err((e, work)) => {
                        tracing::warn!(error = %e, "cannot start the psmrail-close thread: closing here");
                        let released = work();
                        match this.drop_endpoint(endpoint, released) {
                            Poll::Pending => continue,
                            ready => return ready,
                        }
                    }
                }
            }
            let released = endpoint.core.release();
            match this.drop_endpoint(endpoint, released) {
                Poll::Pending => continue,
                ready => return ready,
            }
        }
    }
}
