//! The `struct fi_provider` libfabric gets from `fi_prov_ini`, and its two
//! entry points: `getinfo` (discovery, [`crate::info`]) and `fabric`
//! (`fi_fabric`, [`crate::fabric`]).
//!
//! Each provider library builds one structure on its first `fi_prov_ini`
//! and keeps it for the life of the process (libfabric writes its own
//! bookkeeping into `context`, so it must be writable memory).

use crate::entry::{guard, Errno, FiResult};
use crate::sys;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// Which of psmrail's providers a library carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// `psm` (fi_psm(7)).
    Psm,
    /// `ofi_mrail` (fi_mrail(7)).
    Mrail,
}

impl Which {
    /// The provider's name, as `fi_info -l` prints it.
    pub fn name(self) -> &'static CStr {
        match self {
            Which::Psm => c"psm",
            Which::Mrail => c"ofi_mrail",
        }
    }
}

/// The provider version both libraries announce: 1000.1, above every
/// built-in provider of libfabric releases so far (a release's built-ins
/// carry its own number: 117.0 for 1.17, 200.0 for 2.0), so that libfabric
/// keeps psmrail's and hides its own of the same name.
pub const PROVIDER_VERSION: u32 = sys::fi_version_of(1000, 1);

/// The libfabric API version the providers implement: 1.17, the headers
/// they are built against.
pub const API_VERSION: u32 = sys::fi_version_of(sys::FI_MAJOR_VERSION, sys::FI_MINOR_VERSION);

/// A pointer the process keeps (the leaked provider structure).
struct Leaked(*mut sys::fi_provider);
// SAFETY: the structure is only read by us after it is built; libfabric
// writes its own `context` under its own lock.
unsafe impl Send for Leaked {}
// SAFETY: as above.
unsafe impl Sync for Leaked {}

static PROVIDER: OnceLock<(Which, Leaked)> = OnceLock::new();
static CURRENT: AtomicPtr<sys::fi_provider> = AtomicPtr::new(std::ptr::null_mut());

/// The provider structure for `which` (built once per process; a library
/// carries one provider, so a second `which` gets the first structure).
pub fn provider(which: Which) -> *mut sys::fi_provider {
    let (_, p) = PROVIDER.get_or_init(|| {
        let (getinfo, fabric): (GetinfoFn, FabricFn) = match which {
            Which::Psm => (getinfo_psm, fabric_psm),
            Which::Mrail => (getinfo_mrail, fabric_mrail),
        };
        let prov = Box::new(sys::fi_provider {
            version: PROVIDER_VERSION,
            fi_version: API_VERSION,
            context: sys::fi_context::default(),
            name: which.name().as_ptr(),
            getinfo: Some(getinfo),
            fabric: Some(fabric),
            cleanup: Some(cleanup),
        });
        (which, Leaked(Box::into_raw(prov)))
    });
    CURRENT.store(p.0, Ordering::Release);
    p.0
}

/// This library's provider structure, or null before `fi_prov_ini`.
pub(crate) fn current() -> *const sys::fi_provider {
    CURRENT.load(Ordering::Acquire)
}

type GetinfoFn = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const sys::fi_info,
    *mut *mut sys::fi_info,
) -> c_int;
type FabricFn =
    unsafe extern "C" fn(*mut sys::fi_fabric_attr, *mut *mut sys::fid_fabric, *mut c_void) -> c_int;

/// A C string argument, `None` for null.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
pub(crate) unsafe fn opt_str<'a>(p: *const c_char) -> FiResult<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's promise.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| Errno::INVAL)
}

unsafe extern "C" fn getinfo_psm(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const sys::fi_info,
    info: *mut *mut sys::fi_info,
) -> c_int {
    // SAFETY: libfabric's fi_getinfo contract: strings null or valid,
    // hints null or a valid info, `info` writable.
    unsafe { getinfo(Which::Psm, version, node, service, flags, hints, info) }
}

unsafe extern "C" fn getinfo_mrail(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const sys::fi_info,
    info: *mut *mut sys::fi_info,
) -> c_int {
    // SAFETY: as in `getinfo_psm`.
    unsafe { getinfo(Which::Mrail, version, node, service, flags, hints, info) }
}

/// # Safety
/// libfabric's `getinfo` contract (see the callers).
unsafe fn getinfo(
    which: Which,
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const sys::fi_info,
    info: *mut *mut sys::fi_info,
) -> c_int {
    guard("fi_getinfo", || {
        if info.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: checked non-null; the contract makes it writable.
        unsafe { *info = std::ptr::null_mut() };
        if sys::fi_major(version) != 1 || version > API_VERSION {
            return Err(Errno::NODATA);
        }
        // SAFETY: the fi_getinfo contract for strings.
        let node = unsafe { opt_str(node)? };
        // SAFETY: as above.
        let service = unsafe { opt_str(service)? };
        // SAFETY: hints is null or a valid fi_info.
        let hints = unsafe { hints.as_ref() };
        // SAFETY: as above, for the attribute pointers inside.
        let list = unsafe { crate::info::getinfo(which, version, node, service, flags, hints)? };
        // SAFETY: checked non-null above.
        unsafe { *info = list };
        Ok(0)
    })
}

unsafe extern "C" fn fabric_psm(
    attr: *mut sys::fi_fabric_attr,
    fabric: *mut *mut sys::fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard("fi_fabric", || {
        // SAFETY: libfabric's fi_fabric contract.
        unsafe { crate::fabric::open(Which::Psm, attr, fabric, context) }
    })
}

unsafe extern "C" fn fabric_mrail(
    attr: *mut sys::fi_fabric_attr,
    fabric: *mut *mut sys::fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard("fi_fabric", || {
        // SAFETY: libfabric's fi_fabric contract.
        unsafe { crate::fabric::open(Which::Mrail, attr, fabric, context) }
    })
}

unsafe extern "C" fn cleanup() {}
