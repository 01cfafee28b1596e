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
use super::endpoint::MrailEndpointBuilder;
use super::fabric::{rail_info, MrailFabric};
use crate::fabric::{
    mrail_unsupported, AvAttr, CompletionQueue, Counter, CounterAttr, CqAttr, Domain, Info,
    MrailAttr,
};
use crate::reactor::Reactor;
use crate::{Error, Result};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The shared state of an [`MrailDomain`].
pub(crate) struct MrailDomainCore {
    pub(crate) info: Info,
    pub(crate) rails: Vec<Domain>,
    pub(crate) reactor: Reactor,
    made: Mutex<Made>,
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
                made: Mutex::new(Made::default()),
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

    /// Whether `other` is a handle of the same domain.
    pub fn same(&self, other: &MrailDomain) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}
