//! `fi_fabric`: the C fabric object. Its psmrail fabric opens with the
//! first domain, from that domain's info (a C fabric is opened from a
//! `fi_fabric_attr` only, and psmrail's fabric takes a whole info: its
//! configuration and name server come with it). Event queues open on it.

use crate::entry::{guard, Errno, FiResult};
use crate::obj::{self, fi_ops, Children, FiOps, Table};
use crate::provider::Which;
use crate::sys;
use psmrail::fabric::{Fabric, Info};
use psmrail::mrail::MrailFabric;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// The psmrail fabric under a C one.
#[derive(Debug)]
pub(crate) enum RustFabric {
    Psm(Fabric),
    Mrail(Box<MrailFabric>),
}

/// A C fabric.
#[repr(C)]
pub(crate) struct FabricObj {
    pub(crate) fid: sys::fid_fabric,
    pub(crate) which: Which,
    pub(crate) children: Children,
    /// `None` until the first domain; stays `None` after close too
    /// (`closed` tells the two apart).
    pub(crate) rust: Mutex<Option<RustFabric>>,
    pub(crate) closed: std::sync::atomic::AtomicBool,
}

impl FabricObj {
    /// The psmrail fabric, opened from `info` if this is the first domain.
    pub(crate) fn rust_for(&self, info: &Info) -> FiResult<RustFabricRef> {
        let mut g = obj::lock(&self.rust);
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Errno::INVAL);
        }
        if g.is_none() {
            *g = Some(match self.which {
                Which::Psm => RustFabric::Psm(Fabric::open(info).map_err(Errno::from)?),
                Which::Mrail => {
                    RustFabric::Mrail(Box::new(MrailFabric::open(info).map_err(Errno::from)?))
                }
            });
        }
        Ok(match g.as_ref() {
            Some(RustFabric::Psm(f)) => RustFabricRef::Psm(f.clone()),
            Some(RustFabric::Mrail(f)) => RustFabricRef::Mrail(f.clone()),
            None => return Err(Errno::OTHER),
        })
    }
}

/// A handle on the psmrail fabric for opening a domain.
pub(crate) enum RustFabricRef {
    Psm(Fabric),
    Mrail(Box<MrailFabric>),
}

static FABRIC_FI_OPS: FiOps = FiOps::new(fi_ops(close, None, None));
static FABRIC_OPS: Table<sys::fi_ops_fabric> = Table::new(sys::fi_ops_fabric {
    size: std::mem::size_of::<sys::fi_ops_fabric>(),
    domain: Some(crate::domain::open),
    passive_ep: Some(passive_ep),
    eq_open: Some(crate::eq::open),
    wait_open: Some(wait_open),
    trywait: Some(crate::wait::trywait),
    domain2: Some(crate::domain::open2),
});

/// `provider->fabric`.
///
/// # Safety
/// libfabric's `fi_fabric` contract: `attr` valid, `fabric` writable.
pub(crate) unsafe fn open(
    which: Which,
    attr: *mut sys::fi_fabric_attr,
    fabric: *mut *mut sys::fid_fabric,
    context: *mut c_void,
) -> FiResult<c_int> {
    if attr.is_null() || fabric.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: checked non-null; the contract makes it valid.
    let attr = unsafe { &*attr };
    let obj = obj::make(
        FabricObj {
            fid: sys::fid_fabric {
                fid: obj::fid_header(sys::FI_CLASS_FABRIC, context, &FABRIC_FI_OPS),
                ops: FABRIC_OPS.ptr(),
                api_version: attr.api_version,
            },
            which,
            children: Children::default(),
            rust: Mutex::new(None),
            closed: std::sync::atomic::AtomicBool::new(false),
        },
        sys::FI_CLASS_FABRIC,
    );
    // SAFETY: checked non-null above.
    unsafe { *fabric = obj.cast() };
    Ok(0)
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(fabric)", || {
        crate::entry::without_sigpipe(|| {
            // SAFETY: FabricObj is the block type of FI_CLASS_FABRIC.
            let f: &FabricObj = unsafe { obj::cast(fid, sys::FI_CLASS_FABRIC)? };
            if f.children.any() {
                return Err(Errno::BUSY);
            }
            f.closed.store(true, std::sync::atomic::Ordering::Release);
            let rust = obj::lock(&f.rust).take();
            drop(rust);
            obj::retire(fid as usize);
            Ok(0)
        })
    })
}

unsafe extern "C" fn passive_ep(
    _: *mut sys::fid_fabric,
    _: *mut sys::fi_info,
    _: *mut *mut sys::fid_pep,
    _: *mut c_void,
) -> c_int {
    // Connected endpoints are not psm's (FI_EP_MSG).
    Errno::NOSYS.ret()
}

unsafe extern "C" fn wait_open(
    _: *mut sys::fid_fabric,
    _: *mut sys::fi_wait_attr,
    _: *mut *mut sys::fid_wait,
) -> c_int {
    Errno::NOSYS.ret()
}
