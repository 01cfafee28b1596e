//! [`MrailDomain`]: the multi-rail domain (`fi_domain` of `ofi_mrail`):
//! one psm domain per rail, all progressed by one reactor, plus the
//! completion queues, counters and address vectors of the mrail level.
//!
//! The first rail's domain builds the reactor (on the native engine the
//! auto-progress thread must start after the PSM endpoint opens); every
//! other rail joins it. So one `progress()` call — a future's poll in
//! manual mode, a CQ or counter read, or a round of the auto thread —
//! drives every rail, and then the mrail endpoint's own protocol step
//! (the endpoint adds it as the reactor's last source).

use super::av::MrailAv;
use super::endpoint::{MrailEndpointBuilder, MrailEndpointCore};
use super::fabric::{rail_info, MrailFabric};
use super::memory_region::{MappedKeys, MrailMemoryRegion};
use super::rail_events::{RailEventQueue, RailEvents};
use crate::fabric::{
    mrail_unsupported, AvAttr, CompletionQueue, Counter, CounterAttr, CqAttr, Domain,
    EndpointStats, Info, MrAccess, MrailAttr, OpCounters, RawKey,
};
use crate::reactor::Reactor;
use crate::{Error, Result};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The shared state of an [`MrailDomain`].
pub(crate) struct MrailDomainCore {
    pub(crate) info: Info,
    pub(crate) rails: Vec<Domain>,
    pub(crate) reactor: Reactor,
    pub(crate) mapped: MappedKeys,
    pub(crate) rail_events: Arc<RailEventQueue>,
    made: Mutex<Made>,
    /// The endpoints enabled here, for [`MrailDomain::stats`].
    endpoints: Mutex<Vec<Weak<MrailEndpointCore>>>,
    /// The operation counts of endpoints that are gone.
    retired: OpCounters,
    /// The dead peers they counted.
    retired_dead: AtomicU64,
}

#[derive(Default)]
struct Made {
    cqs: Vec<CompletionQueue>,
    counters: Vec<Counter>,
}

impl MrailDomainCore {
    /// The multi-rail attributes of the info.
    pub(crate) fn attr(&self) -> &MrailAttr {
        self.info
            .mrail()
            .expect("an mrail domain is opened from an mrail info")
    }

    /// Counts `ep` in the domain's totals from now on.
    pub(crate) fn adopt(&self, ep: &Arc<MrailEndpointCore>) {
        let mut eps = self
            .endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        eps.retain(|e| e.strong_count() > 0);
        eps.push(Arc::downgrade(ep));
    }

    /// Keeps the counts of an endpoint that is going away.
    pub(crate) fn retire_stats(&self, ops: &OpCounters, dead_peers: u64) {
        self.retired.absorb(ops);
        self.retired_dead.fetch_add(dead_peers, Ordering::Relaxed);
    }

    /// Whether `cq` was made by this domain.
    pub(crate) fn made_cq(&self, cq: &CompletionQueue) -> bool {
        let made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.cqs.iter().any(|c| c.same(cq))
    }

    /// Whether `counter` was made by this domain.
    pub(crate) fn made_counter(&self, counter: &Counter) -> bool {
        let made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.counters.iter().any(|c| c.same(counter))
    }
}

impl fmt::Debug for MrailDomainCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrailDomain")
            .field("rails", &self.rails)
            .finish()
    }
}

/// A multi-rail domain: a cheap `Clone` handle. Its objects read like the
/// psm domain's: [`cq`](Self::cq), [`counter`](Self::counter),
/// [`av`](Self::av), [`endpoint`](Self::endpoint).
#[derive(Clone, Debug)]
pub struct MrailDomain {
    pub(crate) core: Arc<MrailDomainCore>,
}

impl MrailDomain {
    pub(crate) fn open(fabric: &MrailFabric, info: &Info) -> Result<MrailDomain> {
        let n = fabric.rail_fabrics().len();
        let mut rails: Vec<Domain> = Vec::with_capacity(n);
        let mut reactor: Option<Reactor> = None;
        for (i, rail_fabric) in fabric.rail_fabrics().iter().enumerate() {
            let ri = rail_info(info, i)?;
            let domain = rail_fabric.domain_on(&ri, reactor.as_ref()).map_err(|e| {
                let name = &info
                    .mrail()
                    .map(|m| m.rails[i].to_string())
                    .unwrap_or_default();
                Error::with_source(
                    e.kind(),
                    format!("ofi_mrail: opening rail {i} ({name}): {}", e.message()),
                    e,
                )
            })?;
            if reactor.is_none() {
                reactor = Some(domain.reactor().clone());
            }
            rails.push(domain);
        }
        let reactor = match reactor {
            Some(r) => r,
            None => {
                return Err(Error::new(
                    crate::ErrorKind::NoData,
                    "ofi_mrail: the info has no rails",
                ))
            }
        };
        tracing::debug!(rails = n, "mrail domain opened");
        Ok(MrailDomain {
            core: Arc::new(MrailDomainCore {
                info: info.clone(),
                rails,
                reactor,
                mapped: MappedKeys::default(),
                rail_events: Arc::new(RailEventQueue::default()),
                made: Mutex::new(Made::default()),
                endpoints: Mutex::new(Vec::new()),
                retired: OpCounters::default(),
                retired_dead: AtomicU64::new(0),
            }),
        })
    }

    /// How many rails.
    pub fn rails(&self) -> usize {
        self.core.rails.len()
    }

    /// Rail `i`'s psm domain (for inspection: its engine, epid, reactor).
    pub fn rail(&self, i: usize) -> Option<&Domain> {
        self.core.rails.get(i)
    }

    /// The reactor driving every rail and the mrail endpoints (run futures
    /// with its `block_on`, or call `progress` in manual mode).
    pub fn reactor(&self) -> &Reactor {
        &self.core.reactor
    }

    /// The info the domain was opened with.
    pub fn info(&self) -> &Info {
        &self.core.info
    }

    /// A completion queue progressed by the domain's reactor (`fi_cq_open`):
    /// reading it drives every rail in manual progress.
    pub fn cq(&self, attr: CqAttr) -> Result<CompletionQueue> {
        let cq = CompletionQueue::new(attr, self.core.reactor.clone());
        let mut made = self
            .core
            .made
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        made.cqs.push(cq.clone());
        Ok(cq)
    }

    /// A counter progressed by the domain's reactor (`fi_cntr_open`):
    /// reading or waiting on it drives every rail in manual progress (C's
    /// mrail counters never polled the rails).
    pub fn counter(&self, attr: CounterAttr) -> Result<Counter> {
        let c = Counter::new(attr, self.core.reactor.clone());
        let mut made = self
            .core
            .made
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        made.counters.push(c.clone());
        Ok(c)
    }

    /// Registers memory for remote access (`fi_mr_reg`) on every rail:
    /// the region takes `bytes` over (no copy) and every rail's domain
    /// exposes the same memory with `access`, under `key` on each rail
    /// (`None`: each rail picks). Peers use its
    /// [`raw_key`](MrailMemoryRegion::raw_key) through
    /// [`map_raw`](Self::map_raw). Example: [`MrailMemoryRegion`].
    ///
    /// # Errors
    /// As [`Domain::register`] on any rail (`Busy` when a requested key is
    /// taken on one), naming the rail; nothing stays registered then.
    pub fn register(
        &self,
        bytes: impl Into<Box<[u8]>>,
        access: MrAccess,
        key: Option<u64>,
    ) -> Result<MrailMemoryRegion> {
        let rail_error = |i: usize, e: Error| {
            Error::with_source(
                e.kind(),
                format!("ofi_mrail: registering on rail {i}: {}", e.message()),
                e,
            )
        };
        let first = self.core.rails[0]
            .register(bytes, access, key)
            .map_err(|e| rail_error(0, e))?;
        let mut regions = Vec::with_capacity(self.core.rails.len());
        regions.push(first);
        for (i, rail) in self.core.rails.iter().enumerate().skip(1) {
            match rail.register_shared(&regions[0], key) {
                Ok(r) => regions.push(r),
                Err(e) => {
                    for r in &regions {
                        r.close();
                    }
                    return Err(rail_error(i, e));
                }
            }
        }
        Ok(MrailMemoryRegion::new(regions))
    }

    /// `fi_mr_reg`: the same as [`register`](Self::register).
    pub fn mr_reg(
        &self,
        bytes: impl Into<Box<[u8]>>,
        access: MrAccess,
        key: Option<u64>,
    ) -> Result<MrailMemoryRegion> {
        self.register(bytes, access, key)
    }

    /// `fi_mr_map_raw`: the key that stands for a peer's raw key (its
    /// region's [`raw_key`](MrailMemoryRegion::raw_key)) in this domain's
    /// RMA calls. The domain keeps the rail keys until
    /// [`unmap_key`](Self::unmap_key).
    ///
    /// # Errors
    /// `Inval` when the raw key is not 8 bytes per rail of this domain.
    pub fn map_raw(&self, raw: &RawKey) -> Result<u64> {
        self.core.mapped.map(raw, self.core.rails.len())
    }

    /// `fi_mr_unmap_key`: forgets a key [`map_raw`](Self::map_raw) gave;
    /// later RMA calls naming it fail with `FI_EACCES`.
    ///
    /// # Errors
    /// `Inval` for a key that is not mapped.
    pub fn unmap_key(&self, key: u64) -> Result<()> {
        self.core.mapped.unmap(key)
    }

    /// The rail events of the domain's endpoint (a rail going down,
    /// rejoining, back in service), as an event queue or a
    /// [`futures::Stream`].
    ///
    /// ```
    /// # use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
    /// # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Hints, Provider};
    /// # use psmrail::mrail::{MrailFabric, RailReason, RailState};
    /// # let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let rails = MrailConfig::builder()
    /// #     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap()).build();
    /// # let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
    /// #     .config(psm).mrail_config(rails);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = MrailFabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// let events = domain.rail_events();
    /// ep.disable_rail(1)?;
    /// let e = events.read().expect("an event");
    /// assert_eq!((e.rail, e.state, e.reason), (1, RailState::Down, RailReason::Disabled));
    /// assert_eq!(ep.rail_states(), [RailState::Up, RailState::Down]);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn rail_events(&self) -> RailEvents {
        RailEvents::new(self.core.rail_events.clone(), self.core.reactor.clone())
    }

    /// An address vector (`fi_av_open`): one rail address vector per rail
    /// underneath; always a table (as C's rails).
    pub fn av(&self, attr: AvAttr) -> Result<MrailAv> {
        MrailAv::open(self.core.clone(), attr)
    }

    /// Starts an endpoint (`fi_endpoint`): bind queues, counters and an
    /// address vector on the builder, then `enable` it.
    pub fn endpoint(&self, info: &Info) -> MrailEndpointBuilder {
        MrailEndpointBuilder::new(self.core.clone(), info)
    }

    /// `fi_scalable_ep`: not supported by ofi_mrail (fi_mrail(7)).
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn scalable_endpoint(&self, info: &Info) -> Result<()> {
        let _ = info;
        Err(mrail_unsupported("scalable endpoints (fi_scalable_ep)"))
    }

    /// `fi_srx_context`: shared contexts are not supported (fi_mrail(7)).
    ///
    /// # Errors
    /// Always `NoSys`.
    pub fn srx_context(&self, info: &Info) -> Result<()> {
        let _ = info;
        Err(mrail_unsupported("shared contexts (fi_srx_context)"))
    }

    /// Closes every rail's domain (`fi_close`), the rails side by side so
    /// the close takes one `FI_PSM_DELAY` + `FI_PSM_TIMEOUT`, not one per
    /// rail. Endpoints and address vectors then report `FI_EOPBADSTATE`.
    ///
    /// # Errors
    /// The first rail's close error (every rail is closed anyway).
    pub fn close(self) -> Result<()> {
        let rails = self.core.rails.clone();
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = rails
                .into_iter()
                .map(|d| s.spawn(move || d.close()))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::new(
                            crate::ErrorKind::Other,
                            "a rail's close panicked",
                        ))
                    })
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// Totals over the domain's endpoints, in the psm domain's terms
    /// ([`EndpointStats`], as [`Domain::stats`]): messages, bytes, errors,
    /// refused posts and dead peers of every mrail endpoint enabled here
    /// (gone ones included), and the unexpected messages waiting in the
    /// live ones. Each rail's own psm domain has its figures too
    /// ([`rail`](Self::rail)`(i).stats()`): the rails' traffic, control
    /// frames included.
    ///
    /// ```
    /// # use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
    /// # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Hints, Provider};
    /// # use psmrail::mrail::MrailFabric;
    /// # let psm = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let rails = MrailConfig::builder()
    /// #     .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap()).build();
    /// # let hints = Hints::new().provider(Provider::Mrail).engine(EngineChoice::Soft)
    /// #     .config(psm).mrail_config(rails);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// let domain = MrailFabric::open(&info)?.domain(&info)?;
    /// let av = domain.av(AvAttr::new())?;
    /// let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// let me = av.insert(&[ep.getname()]).remove(0)?;
    /// ep.tinject(me, 3, b"hello")?;
    /// drop(ep); // its counts stay in the totals
    /// let s = domain.stats();
    /// assert_eq!((s.msgs_sent, s.bytes_sent), (1, 5));
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// [`Domain::stats`]: crate::fabric::Domain::stats
    pub fn stats(&self) -> EndpointStats {
        let core = &self.core;
        let mut s = EndpointStats {
            unexpected_msgs: Some(0),
            unexpected_bytes: Some(0),
            dead_peers: core.retired_dead.load(Ordering::Relaxed),
            ..EndpointStats::default()
        };
        core.retired.add_to(&mut s);
        let eps = core
            .endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for ep in eps.iter().filter_map(Weak::upgrade) {
            let e = ep.endpoint_stats();
            s.add_ops(&e);
            s.dead_peers += e.dead_peers;
            s.unexpected_msgs = s.unexpected_msgs.zip(e.unexpected_msgs).map(|(a, b)| a + b);
            s.unexpected_bytes = s
                .unexpected_bytes
                .zip(e.unexpected_bytes)
                .map(|(a, b)| a + b);
        }
        s
    }

    /// Whether `other` is a handle of the same domain.
    pub fn same(&self, other: &MrailDomain) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}
