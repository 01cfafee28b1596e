//! `fi_domain`: the C domain over a psmrail [`Domain`] (psm) or
//! [`MrailDomain`] (ofi_mrail), with its op table (address vectors,
//! completion queues, counters, endpoints) and memory registration.
//! Closing a domain that still has objects open is `-FI_EBUSY`.

use crate::entry::{guard, Errno, FiResult};
use crate::fabric::{FabricObj, RustFabricRef};
use crate::obj::{self, fi_ops, Children, FiOps, Table};
use crate::provider::Which;
use crate::sys;
use psmrail::fabric::{CompletionQueue, Counter, CounterAttr, CqAttr, Domain, Info};
use psmrail::mrail::MrailDomain;
use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// The psmrail domain under a C one.
#[derive(Clone, Debug)]
pub(crate) enum RustDomain {
    Psm(Domain),
    Mrail(MrailDomain),
}

impl RustDomain {
    pub(crate) fn cq(&self, attr: CqAttr) -> FiResult<CompletionQueue> {
        match self {
            RustDomain::Psm(d) => d.cq(attr),
            RustDomain::Mrail(d) => d.cq(attr),
        }
        .map_err(Errno::from)
    }

    /// One progress round if the domain progresses manually (the
    /// application's calls drive it); nothing with a progress thread.
    pub(crate) fn progress_if_manual(&self) {
        let reactor = match self {
            RustDomain::Psm(d) => d.reactor(),
            RustDomain::Mrail(d) => d.reactor(),
        };
        if reactor.is_manual() {
            reactor.progress();
        }
    }

    pub(crate) fn counter(&self) -> FiResult<Counter> {
        match self {
            RustDomain::Psm(d) => d.counter(CounterAttr::new()),
            RustDomain::Mrail(d) => d.counter(CounterAttr::new()),
        }
        .map_err(Errno::from)
    }
}

/// A C domain.
#[repr(C)]
pub(crate) struct DomainObj {
    pub(crate) fid: sys::fid_domain,
    pub(crate) fabric: *const FabricObj,
    pub(crate) which: Which,
    pub(crate) children: Children,
    pub(crate) info: Info,
    pub(crate) rust: Mutex<Option<RustDomain>>,
    /// Keys of this domain's memory regions.
    pub(crate) mr_keys: Mutex<(HashSet<u64>, u64)>,
}

// SAFETY: the fabric pointer is a kept block (never freed); only its
// atomic counter is touched through it. The rest is Send + Sync.
unsafe impl Send for DomainObj {}
// SAFETY: as above.
unsafe impl Sync for DomainObj {}

impl DomainObj {
    /// The psmrail domain, or `-FI_EINVAL` once closed.
    pub(crate) fn rust(&self) -> FiResult<RustDomain> {
        obj::lock(&self.rust).clone().ok_or(Errno::INVAL)
    }
}

static DOMAIN_FI_OPS: FiOps = FiOps::new(fi_ops(close, None, Some(crate::mr::domain_control)));
static DOMAIN_OPS: Table<sys::fi_ops_domain> = Table::new(sys::fi_ops_domain {
    size: std::mem::size_of::<sys::fi_ops_domain>(),
    av_open: Some(crate::av::open),
    cq_open: Some(crate::cq::open),
    endpoint: Some(crate::ep::open),
    scalable_ep: Some(scalable_ep),
    cntr_open: Some(crate::cntr::open),
    poll_open: Some(poll_open),
    stx_ctx: Some(stx_ctx),
    srx_ctx: Some(srx_ctx),
    query_atomic: Some(crate::atomic::query),
    query_collective: Some(query_collective),
    endpoint2: Some(crate::ep::open2),
});

pub(crate) unsafe extern "C" fn open(
    fabric: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
    dom: *mut *mut sys::fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the same contract as fi_domain2 with no flags.
    unsafe { open2(fabric, info, dom, 0, context) }
}

pub(crate) unsafe extern "C" fn open2(
    fabric: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
    dom: *mut *mut sys::fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_domain", || {
        // SAFETY: FabricObj is the block type of FI_CLASS_FABRIC.
        let f: &FabricObj = unsafe { obj::cast(fabric.cast(), sys::FI_CLASS_FABRIC)? };
        if info.is_null() || dom.is_null() {
            return Err(Errno::INVAL);
        }
        if flags != 0 {
            return Err(Errno::BADFLAGS);
        }
        // SAFETY: a valid info (the fi_domain contract).
        let rinfo = unsafe { crate::info::rust_info(f.which, &*info)? };
        let rust = match f.rust_for(&rinfo)? {
            RustFabricRef::Psm(fab) => RustDomain::Psm(fab.domain(&rinfo).map_err(Errno::from)?),
            RustFabricRef::Mrail(fab) => {
                RustDomain::Mrail(fab.domain(&rinfo).map_err(Errno::from)?)
            }
        };
        f.children.add();
        let o = obj::make(
            DomainObj {
                fid: sys::fid_domain {
                    fid: obj::fid_header(sys::FI_CLASS_DOMAIN, context, &DOMAIN_FI_OPS),
                    ops: DOMAIN_OPS.ptr(),
                    mr: crate::mr::MR_OPS.ptr(),
                },
                fabric: f,
                which: f.which,
                children: Children::default(),
                info: rinfo,
                rust: Mutex::new(Some(rust)),
                mr_keys: Mutex::new((HashSet::new(), 1)),
            },
            sys::FI_CLASS_DOMAIN,
        );
        // SAFETY: checked non-null.
        unsafe { *dom = o.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(domain)", || {
        crate::entry::without_sigpipe(|| {
            // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
            let d: &DomainObj = unsafe { obj::cast(fid, sys::FI_CLASS_DOMAIN)? };
            if d.children.any() {
                return Err(Errno::BUSY);
            }
            let rust = obj::lock(&d.rust).take();
            let r = match rust {
                Some(RustDomain::Psm(d)) => d.close(),
                Some(RustDomain::Mrail(d)) => d.close(),
                None => return Err(Errno::INVAL),
            };
            // SAFETY: the fabric block is kept for the process.
            unsafe { (*d.fabric).children.remove() };
            obj::retire(fid as usize);
            r.map_err(Errno::from)?;
            Ok(0)
        })
    })
}

unsafe extern "C" fn scalable_ep(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_info,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn poll_open(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_poll_attr,
    _: *mut *mut sys::fid_poll,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn stx_ctx(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_tx_attr,
    _: *mut *mut sys::fid_stx,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn srx_ctx(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_rx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn query_collective(
    _: *mut sys::fid_domain,
    _: sys::fi_collective_op,
    _: *mut sys::fi_collective_attr,
    _: u64,
) -> c_int {
    Errno::NOSYS.ret()
}
