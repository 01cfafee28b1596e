//! `fi_mr_reg`, `fi_mr_regv`, `fi_mr_regattr`: memory regions of a C
//! domain. The psm provider needs no registration for messages (its
//! `mr_mode` asks for none), so a region here is its key (the one
//! requested, unique in the domain: psm's keys are chosen by the
//! application) and its descriptor, which message calls accept and ignore.
//! Exposing the memory to peers' RMA is not part of this library yet
//! (the info offers no `FI_RMA`).

use crate::domain::DomainObj;
use crate::entry::{guard, Errno, FiResult};
use crate::obj::{self, fi_ops, FiOps, Table};
use crate::sys;
use std::ffi::{c_int, c_void};

/// A C memory region.
#[repr(C)]
pub(crate) struct MrObj {
    pub(crate) fid: sys::fid_mr,
    domain: *const DomainObj,
}

// SAFETY: the domain pointer is a kept block; only its locked key set
// and atomic counter are touched through it.
unsafe impl Send for MrObj {}
// SAFETY: as above.
unsafe impl Sync for MrObj {}

static MR_FI_OPS: FiOps = FiOps::new(fi_ops(close, None, None));
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

fn make(
    fid: *mut sys::fid,
    access: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> FiResult<c_int> {
    // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
    let d: &DomainObj = unsafe { obj::cast(fid, sys::FI_CLASS_DOMAIN)? };
    d.rust()?;
    if mr.is_null() {
        return Err(Errno::INVAL);
    }
    if access & !ACCESS != 0 {
        return Err(Errno::INVAL);
    }
    if flags & !(sys::FI_RMA_EVENT) != 0 {
        return Err(Errno::BADFLAGS);
    }
    let key = {
        let mut g = obj::lock(&d.mr_keys);
        let (keys, next) = &mut *g;
        let key = if requested_key == sys::FI_KEY_NOTAVAIL {
            while keys.contains(next) {
                *next += 1;
            }
            *next
        } else {
            requested_key
        };
        if !keys.insert(key) {
            return Err(Errno(sys::FI_ENOKEY));
        }
        key
    };
    d.children.add();
    let o = obj::make(
        MrObj {
            fid: sys::fid_mr {
                fid: obj::fid_header(sys::FI_CLASS_MR, context, &MR_FI_OPS),
                mem_desc: std::ptr::null_mut(),
                key,
            },
            domain: d,
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
    _buf: *const c_void,
    _len: usize,
    access: u64,
    _offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard("fi_mr_reg", || {
        make(fid, access, requested_key, flags, mr, context)
    })
}

unsafe extern "C" fn regv(
    fid: *mut sys::fid,
    iov: *const sys::iovec,
    count: usize,
    access: u64,
    _offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard("fi_mr_regv", || {
        if count > 0 && iov.is_null() {
            return Err(Errno::INVAL);
        }
        make(fid, access, requested_key, flags, mr, context)
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
        make(fid, a.access, a.requested_key, flags, mr, a.context)
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(mr)", || {
        // SAFETY: MrObj is the block type of FI_CLASS_MR.
        let m: &MrObj = unsafe { obj::cast(fid, sys::FI_CLASS_MR)? };
        // SAFETY: the domain block is kept for the process.
        let d = unsafe { &*m.domain };
        obj::lock(&d.mr_keys).0.remove(&m.fid.key);
        d.children.remove();
        obj::retire(fid as usize);
        Ok(0)
    })
}
