//! `fi_mr_reg`, `fi_mr_regv`, `fi_mr_regattr`: memory regions of a C
//! domain. Local buffers need no registration (`mr_mode` asks for none),
//! so a region is always a key and a descriptor, which the data calls
//! accept and ignore. A region with `FI_REMOTE_READ` or `FI_REMOTE_WRITE`
//! is also registered with the psmrail domain, in place
//! ([`crate::cbuf::region`]), so peers' RMA and atomics reach it:
//!
//! * psm: under its key, the one requested (psm's keys are chosen by the
//!   application, unique in the domain) or the next free one;
//! * ofi_mrail: on every rail's domain, each rail picking its key; the
//!   region's key is raw (`FI_MR_RAW`, fi_mrail(7)): the rail keys in rail
//!   order, read with `fi_mr_raw_attr`; a peer turns it into the key of its
//!   RMA calls with `fi_mr_map_raw` and forgets it with `fi_mr_unmap_key`
//!   (`fi_mr_key` is `FI_KEY_NOTAVAIL`).
//!
//! Remote addresses are offsets into the region, so a remote-access region
//! must start at offset 0 (`-FI_EINVAL` otherwise) and be one contiguous
//! buffer (iovecs that follow each other in memory; others are
//! `-FI_EOPNOTSUPP`). A counter bound to a region (`fi_mr_bind` with
//! `FI_REMOTE_WRITE` / `FI_REMOTE_READ`) counts peers' accesses to it, as
//! the endpoint's counters bound with those flags count every access to
//! the domain's regions (`FI_RMA_EVENT`). An ofi_mrail write striped over
//! the rails counts once per rail operation.

use crate::cntr::CntrObj;
use crate::domain::{DomainObj, RustDomain};
use crate::entry::{guard, Errno, FiResult};
use crate::obj::{self, fi_ops, FiOps, Table};
use crate::sys;
use psmrail::fabric::{MemoryRegion, MrAccess, RawKey};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// A region's registration with the psmrail domain (peers reach it).
enum Remote {
    Psm(MemoryRegion),
    /// One registration per rail, and the raw key.
    Mrail(Vec<MemoryRegion>, Vec<u8>),
}

impl Remote {
    fn close(&self) {
        match self {
            Remote::Psm(r) => r.close(),
            Remote::Mrail(rails, _) => rails.iter().for_each(MemoryRegion::close),
        }
    }
}

/// A C memory region.
#[repr(C)]
pub(crate) struct MrObj {
    pub(crate) fid: sys::fid_mr,
    domain: *const DomainObj,
    /// The key in the domain's key set (`fid.key` is `FI_KEY_NOTAVAIL`
    /// for raw keys).
    key: u64,
    remote: Mutex<Option<Remote>>,
}

// SAFETY: the domain pointer is a kept block; only its locked key set
// and atomic counter are touched through it.
unsafe impl Send for MrObj {}
// SAFETY: as above.
unsafe impl Sync for MrObj {}

static MR_FI_OPS: FiOps = FiOps::new(fi_ops(close, Some(bind), Some(control)));
pub(crate) static MR_OPS: Table<sys::fi_ops_mr> = Table::new(sys::fi_ops_mr {
    size: std::mem::size_of::<sys::fi_ops_mr>(),
    reg: Some(reg),
    regv: Some(regv),
    regattr: Some(regattr),
});

const ACCESS: u64 = (sys::FI_SEND
    | sys::FI_RECV
    | sys::FI_READ
    | sys::FI_WRITE
    | sys::FI_REMOTE_READ
    | sys::FI_REMOTE_WRITE) as u64;

/// The memory of a registration: a pointer and a length.
type Memory = (*mut u8, usize);

/// The memory of an iovec list: one contiguous buffer (iovecs that follow
/// each other in memory are one; a remote-access region is contiguous, as
/// remote addresses are offsets into it).
///
/// # Safety
/// `iov` is null or holds `count` iovecs.
unsafe fn iov_memory(iov: *const sys::iovec, count: usize) -> FiResult<Memory> {
    if count == 0 {
        return Ok((std::ptr::null_mut(), 0));
    }
    if iov.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    let start = v[0].iov_base.cast::<u8>();
    let mut len = 0usize;
    for x in v {
        if x.iov_len > 0 && x.iov_base.cast::<u8>() != start.wrapping_add(len) {
            return Err(Errno::OPNOTSUPP);
        }
        len = len.checked_add(x.iov_len).ok_or(Errno::INVAL)?;
    }
    Ok((start, len))
}

/// Registers `mem` with the psmrail domain for peers (module docs).
///
/// # Safety
/// `mem` stays valid until the region is closed (the registration
/// contract).
unsafe fn expose(d: &DomainObj, mem: Memory, access: u64, key: u64) -> FiResult<(Remote, u64)> {
    let (ptr, len) = mem;
    if ptr.is_null() && len > 0 {
        return Err(Errno::INVAL);
    }
    let access = MrAccess::from_bits_truncate(access);
    // SAFETY: the caller's promise.
    let region = unsafe { crate::cbuf::region(ptr, len) };
    match d.rust()? {
        RustDomain::Psm(dom) => {
            let r = dom.register_region(region, access, Some(key))?;
            Ok((Remote::Psm(r), key))
        }
        RustDomain::Mrail(dom) => {
            let first = dom.rail(0).ok_or(Errno::INVAL)?;
            let mut rails = vec![first.register_region(region, access, None)?];
            for i in 1..dom.rails() {
                let rail = dom.rail(i).ok_or(Errno::INVAL)?;
                match rail.register_shared(&rails[0], None) {
                    Ok(r) => rails.push(r),
                    Err(e) => {
                        rails.iter().for_each(MemoryRegion::close);
                        return Err(Errno::from(e));
                    }
                }
            }
            let raw = rails
                .iter()
                .flat_map(|r| RawKey::from_key(r.key()).as_bytes().to_vec())
                .collect();
            Ok((Remote::Mrail(rails, raw), sys::FI_KEY_NOTAVAIL))
        }
    }
}

/// What `fi_mr_reg` and its kin share.
struct Reg {
    mem: FiResult<Memory>,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    context: *mut c_void,
}

/// # Safety
/// `r.mem` stays valid until the region is closed (the registration
/// contract).
unsafe fn make(fid: *mut sys::fid, r: Reg, mr: *mut *mut sys::fid_mr) -> FiResult<c_int> {
    // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
    let d: &DomainObj = unsafe { obj::cast(fid, sys::FI_CLASS_DOMAIN)? };
    d.rust()?;
    if mr.is_null() {
        return Err(Errno::INVAL);
    }
    if r.access & !ACCESS != 0 {
        return Err(Errno::INVAL);
    }
    if r.flags & !(sys::FI_RMA_EVENT) != 0 {
        return Err(Errno::BADFLAGS);
    }
    let remote_access = r.access & (sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE) as u64 != 0;
    if remote_access && r.offset != 0 {
        crate::entry::log_info(
            "fi_mr_reg: remote addresses are offsets into the region; its offset must be 0",
        );
        return Err(Errno::INVAL);
    }
    let key = {
        let mut g = obj::lock(&d.mr_keys);
        let (keys, next) = &mut *g;
        let key = if r.requested_key == sys::FI_KEY_NOTAVAIL {
            while keys.contains(next) {
                *next += 1;
            }
            *next
        } else {
            r.requested_key
        };
        if !keys.insert(key) {
            return Err(Errno(sys::FI_ENOKEY));
        }
        key
    };
    let (remote, fid_key) = if remote_access {
        // SAFETY: the caller's promise.
        let exposed = r
            .mem
            .and_then(|mem| unsafe { expose(d, mem, r.access, key) });
        match exposed {
            Ok((remote, k)) => (Some(remote), k),
            Err(e) => {
                obj::lock(&d.mr_keys).0.remove(&key);
                return Err(e);
            }
        }
    } else {
        (None, key)
    };
    d.children.add();
    let o = obj::make(
        MrObj {
            fid: sys::fid_mr {
                fid: obj::fid_header(sys::FI_CLASS_MR, r.context, &MR_FI_OPS),
                mem_desc: std::ptr::null_mut(),
                key: fid_key,
            },
            domain: d,
            key,
            remote: Mutex::new(remote),
        },
        sys::FI_CLASS_MR,
    );
    // SAFETY: `o` was just made; its descriptor is its own address.
    unsafe { (*o).fid.mem_desc = o.cast() };
    // SAFETY: checked non-null.
    unsafe { *mr = o.cast() };
    Ok(0)
}

unsafe extern "C" fn reg(
    fid: *mut sys::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard("fi_mr_reg", || {
        let r = Reg {
            mem: Ok((buf.cast_mut().cast(), len)),
            access,
            offset,
            requested_key,
            flags,
            context,
        };
        // SAFETY: the fi_mr_reg contract: the memory stays until close.
        unsafe { make(fid, r, mr) }
    })
}

unsafe extern "C" fn regv(
    fid: *mut sys::fid,
    iov: *const sys::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard("fi_mr_regv", || {
        if count > 0 && iov.is_null() {
            return Err(Errno::INVAL);
        }
        let r = Reg {
            // SAFETY: the fi_mr_regv contract for the iovecs.
            mem: unsafe { iov_memory(iov, count) },
            access,
            offset,
            requested_key,
            flags,
            context,
        };
        // SAFETY: the fi_mr_regv contract: the memory stays until close.
        unsafe { make(fid, r, mr) }
    })
}

unsafe extern "C" fn regattr(
    fid: *mut sys::fid,
    attr: *const sys::fi_mr_attr,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
) -> c_int {
    guard("fi_mr_regattr", || {
        // SAFETY: null or a valid attribute structure.
        let a = unsafe { attr.as_ref() }.ok_or(Errno::INVAL)?;
        if a.iov_count > 0 && a.mr_iov.is_null() {
            return Err(Errno::INVAL);
        }
        let r = Reg {
            // SAFETY: the attribute's iovecs (the contract).
            mem: unsafe { iov_memory(a.mr_iov, a.iov_count) },
            access: a.access,
            offset: a.offset,
            requested_key: a.requested_key,
            flags,
            context: a.context,
        };
        // SAFETY: the fi_mr_regattr contract: the memory stays until close.
        unsafe { make(fid, r, mr) }
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(mr)", || {
        // SAFETY: MrObj is the block type of FI_CLASS_MR.
        let m: &MrObj = unsafe { obj::cast(fid, sys::FI_CLASS_MR)? };
        if let Some(r) = obj::lock(&m.remote).take() {
            r.close();
        }
        // SAFETY: the domain block is kept for the process.
        let d = unsafe { &*m.domain };
        obj::lock(&d.mr_keys).0.remove(&m.key);
        d.children.remove();
        obj::retire(fid as usize);
        Ok(0)
    })
}

/// `fi_mr_bind`: a counter (`FI_REMOTE_WRITE`, `FI_REMOTE_READ`) counts
/// peers' accesses to the region (`FI_RMA_EVENT`); an endpoint
/// (`FI_MR_ENDPOINT`, which the infos do not ask for) changes nothing.
unsafe extern "C" fn bind(fid: *mut sys::fid, bfid: *mut sys::fid, flags: u64) -> c_int {
    guard("fi_mr_bind", || {
        // SAFETY: MrObj is the block type of FI_CLASS_MR.
        let m: &MrObj = unsafe { obj::cast(fid, sys::FI_CLASS_MR)? };
        match obj::class_of(bfid as usize) {
            Some(sys::FI_CLASS_EP) => Ok(0),
            Some(sys::FI_CLASS_CNTR) => {
                let events = (sys::FI_REMOTE_WRITE | sys::FI_REMOTE_READ) as u64;
                if flags & !events != 0 {
                    return Err(Errno::BADFLAGS);
                }
                // SAFETY: CntrObj is the block type of FI_CLASS_CNTR.
                let c: &CntrObj = unsafe { obj::cast(bfid, sys::FI_CLASS_CNTR)? };
                let counter = c.rust()?;
                let events = MrAccess::from_bits_truncate(flags);
                match &*obj::lock(&m.remote) {
                    Some(Remote::Psm(r)) => r.bind_counter(&counter, events),
                    Some(Remote::Mrail(rails, _)) => {
                        rails.iter().for_each(|r| r.bind_counter(&counter, events))
                    }
                    None => {}
                }
                Ok(0)
            }
            _ => Err(Errno::INVAL),
        }
    })
}

/// Copies `bytes` to `out` (of `*size` bytes), setting `*size`;
/// `-FI_ETOOSMALL` when they do not fit.
///
/// # Safety
/// `size` is valid; `out` is null or holds `*size` bytes.
unsafe fn give_bytes(bytes: &[u8], out: *mut u8, size: *mut usize) -> FiResult<c_int> {
    if size.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise.
    let room = unsafe { *size };
    // SAFETY: as above.
    unsafe { *size = bytes.len() };
    if room < bytes.len() || out.is_null() {
        return Err(Errno::TOOSMALL);
    }
    // SAFETY: `out` holds `room` >= bytes.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
    Ok(0)
}

/// `fi_mr_enable` (a region is enabled when registered) and
/// `fi_mr_raw_attr` (ofi_mrail's raw key; psm's is its key's 8 bytes).
unsafe extern "C" fn control(fid: *mut sys::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control(mr)", || {
        // SAFETY: MrObj is the block type of FI_CLASS_MR.
        let m: &MrObj = unsafe { obj::cast(fid, sys::FI_CLASS_MR)? };
        match command as u32 {
            sys::FI_ENABLE => Ok(0),
            sys::FI_GET_RAW_MR => {
                // SAFETY: FI_GET_RAW_MR takes a struct fi_mr_raw_attr.
                let a =
                    unsafe { arg.cast::<sys::fi_mr_raw_attr>().as_ref() }.ok_or(Errno::INVAL)?;
                let raw = match &*obj::lock(&m.remote) {
                    Some(Remote::Mrail(_, raw)) => raw.clone(),
                    _ => RawKey::from_key(m.key).as_bytes().to_vec(),
                };
                if !a.base_addr.is_null() {
                    // SAFETY: a valid out pointer (the contract). Remote
                    // addresses are offsets: the base is 0.
                    unsafe { *a.base_addr = 0 };
                }
                // SAFETY: the raw key buffer holds *key_size bytes.
                unsafe { give_bytes(&raw, a.raw_key, a.key_size) }
            }
            _ => Err(Errno::NOSYS),
        }
    })
}

/// The domain's `fi_control` for keys: `fi_mr_map_raw` and
/// `fi_mr_unmap_key` (ofi_mrail's peers' raw keys; for psm a raw key is
/// the key itself).
pub(crate) unsafe extern "C" fn domain_control(
    fid: *mut sys::fid,
    command: c_int,
    arg: *mut c_void,
) -> c_int {
    guard("fi_control(domain)", || {
        // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
        let d: &DomainObj = unsafe { obj::cast(fid, sys::FI_CLASS_DOMAIN)? };
        match command as u32 {
            sys::FI_MAP_RAW_MR => {
                // SAFETY: FI_MAP_RAW_MR takes a struct fi_mr_map_raw.
                let a = unsafe { arg.cast::<sys::fi_mr_map_raw>().as_ref() }.ok_or(Errno::INVAL)?;
                if a.key.is_null() || (a.raw_key.is_null() && a.key_size > 0) {
                    return Err(Errno::INVAL);
                }
                // SAFETY: the raw key holds key_size bytes (the contract).
                let bytes = unsafe { crate::msg::slice(a.raw_key.cast(), a.key_size)? };
                let raw = RawKey::from_bytes(bytes);
                let key = match d.rust()? {
                    RustDomain::Psm(dom) => dom.map_raw(&raw)?,
                    RustDomain::Mrail(dom) => dom.map_raw(&raw)?,
                };
                // SAFETY: checked non-null; an out parameter.
                unsafe { *a.key = key };
                Ok(0)
            }
            sys::FI_UNMAP_KEY => {
                // SAFETY: FI_UNMAP_KEY takes a u64 key.
                let key = unsafe { arg.cast::<u64>().as_ref() }.ok_or(Errno::INVAL)?;
                match d.rust()? {
                    RustDomain::Psm(dom) => dom.unmap_key(*key)?,
                    RustDomain::Mrail(dom) => dom.unmap_key(*key)?,
                }
                Ok(0)
            }
            _ => Err(Errno::NOSYS),
        }
    })
}
