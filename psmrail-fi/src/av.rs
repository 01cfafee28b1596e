//! `fi_av_open`: address vectors over psmrail's [`AddressVector`] (psm)
//! and [`MrailAv`] (ofi_mrail): insert, insertsvc (the peer's name server),
//! insertsym, remove, lookup and straddr. Addresses are `FI_ADDR_PSMX`
//! bytes (see [`crate::info`]). Inserts with `FI_EVENT` report
//! `FI_AV_COMPLETE` on the bound event queue. Both providers' AVs connect
//! each address at its first use ([`AvAttr::lazy_connect`]; ofi_mrail's
//! rails all at once).

use crate::domain::{DomainObj, RustDomain};
use crate::entry::{guard, Errno, FiResult};
use crate::eq::{EqObj, Event};
use crate::info::{epid_bytes, epids_of};
use crate::obj::{self, fi_ops, Children, FiOps, Table};
use crate::sys;
use psmrail::fabric::{AddressVector, AvAttr, AvType, FiAddr, Service};
use psmrail::mrail::{MrailAddr, MrailAv};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

/// The psmrail address vector under a C one.
#[derive(Clone, Debug)]
pub(crate) enum RustAv {
    Psm(AddressVector),
    Mrail(MrailAv),
}

/// A C address vector.
#[repr(C)]
pub(crate) struct AvObj {
    pub(crate) fid: sys::fid_av,
    domain: *const DomainObj,
    /// Bytes of one address.
    addrlen: usize,
    /// Endpoints bound to it.
    pub(crate) children: Children,
    pub(crate) av: Mutex<Option<RustAv>>,
    eq: Mutex<Option<usize>>,
}

// SAFETY: the domain and EQ pointers are kept blocks (never freed).
unsafe impl Send for AvObj {}
// SAFETY: as above.
unsafe impl Sync for AvObj {}

impl AvObj {
    pub(crate) fn rust(&self) -> FiResult<RustAv> {
        obj::lock(&self.av).clone().ok_or(Errno::INVAL)
    }
}

static AV_FI_OPS: FiOps = FiOps::new(fi_ops(close, Some(bind), None));
static AV_OPS: Table<sys::fi_ops_av> = Table::new(sys::fi_ops_av {
    size: std::mem::size_of::<sys::fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: Some(av_set),
});

pub(crate) unsafe extern "C" fn open(
    domain: *mut sys::fid_domain,
    attr: *mut sys::fi_av_attr,
    av: *mut *mut sys::fid_av,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_open", || {
        // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
        let d: &DomainObj = unsafe { obj::cast(domain.cast(), sys::FI_CLASS_DOMAIN)? };
        if av.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: null or a valid attribute structure.
        let a = unsafe { attr.as_ref() }.copied().unwrap_or_default();
        let mut rattr = AvAttr::new().av_type(match a.type_ {
            sys::FI_AV_UNSPEC => AvType::Unspec,
            sys::FI_AV_MAP => AvType::Map,
            sys::FI_AV_TABLE => AvType::Table,
            _ => return Err(Errno::INVAL),
        });
        if a.count > 0 {
            rattr = rattr.count(a.count);
        }
        if a.rx_ctx_bits != 0 || !a.name.is_null() {
            // Scalable endpoints and named (shared) AVs are not psm's.
            return Err(Errno::NOSYS);
        }
        let known = sys::FI_EVENT as u64 | sys::FI_READ as u64 | sys::FI_SYMMETRIC;
        if a.flags & !known != 0 {
            return Err(Errno::BADFLAGS);
        }
        // Both providers connect each address at its first use: a program
        // that exchanged addresses out of band may insert its peer's while
        // the peer waits on that same exchange, progressing nothing
        // (fabric::av's docs).
        let rattr = rattr.lazy_connect(true);
        let (rust, addrlen) = match d.rust()? {
            RustDomain::Psm(dom) => (RustAv::Psm(dom.av(rattr).map_err(Errno::from)?), 8),
            RustDomain::Mrail(dom) => {
                let n = dom.rails();
                (RustAv::Mrail(dom.av(rattr).map_err(Errno::from)?), 8 * n)
            }
        };
        d.children.add();
        let o = obj::make(
            AvObj {
                fid: sys::fid_av {
                    fid: obj::fid_header(sys::FI_CLASS_AV, context, &AV_FI_OPS),
                    ops: AV_OPS.ptr(),
                },
                domain: d,
                addrlen,
                children: Children::default(),
                av: Mutex::new(Some(rust)),
                eq: Mutex::new(None),
            },
            sys::FI_CLASS_AV,
        );
        // SAFETY: checked non-null.
        unsafe { *av = o.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(av)", || {
        crate::entry::without_sigpipe(|| {
            // SAFETY: AvObj is the block type of FI_CLASS_AV.
            let a: &AvObj = unsafe { obj::cast(fid, sys::FI_CLASS_AV)? };
            if a.children.any() {
                return Err(Errno::BUSY);
            }
            obj::lock(&a.av).take();
            // SAFETY: the domain block is kept for the process.
            unsafe { (*a.domain).children.remove() };
            obj::retire(fid as usize);
            Ok(0)
        })
    })
}

unsafe extern "C" fn bind(fid: *mut sys::fid, bfid: *mut sys::fid, flags: u64) -> c_int {
    guard("fi_av_bind", || {
        // SAFETY: AvObj is the block type of FI_CLASS_AV.
        let a: &AvObj = unsafe { obj::cast(fid, sys::FI_CLASS_AV)? };
        // SAFETY: EqObj is the block type of FI_CLASS_EQ.
        let _eq: &EqObj = unsafe { obj::cast(bfid, sys::FI_CLASS_EQ)? };
        if flags != 0 {
            return Err(Errno::BADFLAGS);
        }
        *obj::lock(&a.eq) = Some(bfid as usize);
        Ok(0)
    })
}

const INSERT_FLAGS: u64 = sys::FI_MORE as u64 | sys::FI_EVENT as u64 | sys::FI_SYNC_ERR;

/// Writes the results of an insert and reports it as C expects.
///
/// # Safety
/// `fi_addr` is null or holds `results.len()` addresses.
unsafe fn finish_insert(
    a: &AvObj,
    results: Vec<psmrail::Result<FiAddr>>,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> FiResult<c_int> {
    let mut ok = 0usize;
    for (i, r) in results.iter().enumerate() {
        let v = match r {
            Ok(f) => {
                ok += 1;
                f.0
            }
            Err(e) => {
                crate::entry::log_warn(&format!("fi_av_insert: address {i}: {e}"));
                sys::FI_ADDR_NOTAVAIL
            }
        };
        if !fi_addr.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *fi_addr.add(i) = v };
        }
    }
    if flags & sys::FI_EVENT as u64 != 0 {
        let eq = (*obj::lock(&a.eq)).ok_or(Errno::NOENT)?;
        let entry = sys::fi_eq_entry {
            fid: (a as *const AvObj).cast_mut().cast(),
            context,
            data: ok as u64,
        };
        // SAFETY: a plain C structure viewed as bytes.
        let data = unsafe {
            std::slice::from_raw_parts(
                (&entry as *const sys::fi_eq_entry).cast::<u8>(),
                std::mem::size_of::<sys::fi_eq_entry>(),
            )
        }
        .to_vec();
        if obj::is_live(eq, sys::FI_CLASS_EQ) {
            // SAFETY: a live EQ block.
            unsafe { &*(eq as *const EqObj) }.push(Event {
                event: sys::FI_AV_COMPLETE,
                data,
                err: None,
            });
        }
        return Ok(0);
    }
    Ok(ok as c_int)
}

unsafe extern "C" fn insert(
    av: *mut sys::fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_insert", || {
        // SAFETY: AvObj is the block type of FI_CLASS_AV.
        let a: &AvObj = unsafe { obj::cast(av.cast(), sys::FI_CLASS_AV)? };
        if flags & !INSERT_FLAGS != 0 {
            return Err(Errno::BADFLAGS);
        }
        if count == 0 {
            return Ok(0);
        }
        if addr.is_null() {
            return Err(Errno::INVAL);
        }
        let total = count.checked_mul(a.addrlen).ok_or(Errno::INVAL)?;
        // SAFETY: the fi_av_insert contract: `count` addresses of this
        // AV's format at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), total) };
        let ids = epids_of(bytes).ok_or(Errno::INVAL)?;
        let results = match a.rust()? {
            RustAv::Psm(av) => av.insert(&ids),
            RustAv::Mrail(av) => {
                let per = a.addrlen / 8;
                let addrs: Vec<MrailAddr> = ids
                    .chunks(per)
                    .map(|c| MrailAddr::new(c.to_vec()))
                    .collect::<psmrail::Result<_>>()
                    .map_err(Errno::from)?;
                av.insert(&addrs)
            }
        };
        // SAFETY: fi_addr is null or holds `count` addresses.
        unsafe { finish_insert(a, results, fi_addr, flags, context) }
    })
}

unsafe extern "C" fn insertsvc(
    av: *mut sys::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the same contract with one node and one service.
    unsafe { insertsym(av, node, 1, service, 1, fi_addr, flags, context) }
}

/// The `i`-th node after `node` (an IPv4 address counts up; a name is
/// only itself).
fn nth_node(node: &str, i: usize) -> Option<String> {
    if i == 0 {
        return Some(node.to_owned());
    }
    let ip: std::net::Ipv4Addr = node.parse().ok()?;
    let n = u32::from(ip).checked_add(u32::try_from(i).ok()?)?;
    Some(std::net::Ipv4Addr::from(n).to_string())
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn insertsym(
    av: *mut sys::fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_insertsym", || {
        // SAFETY: AvObj is the block type of FI_CLASS_AV.
        let a: &AvObj = unsafe { obj::cast(av.cast(), sys::FI_CLASS_AV)? };
        if flags & !INSERT_FLAGS != 0 {
            return Err(Errno::BADFLAGS);
        }
        // SAFETY: strings null or valid (the contract).
        let (node, service) = unsafe {
            (
                crate::provider::opt_str(node)?.ok_or(Errno::INVAL)?,
                crate::provider::opt_str(service)?.ok_or(Errno::INVAL)?,
            )
        };
        let base: u32 = service.parse().map_err(|_| Errno::INVAL)?;
        let RustAv::Psm(rav) = a.rust()? else {
            // ofi_mrail peers have no name server.
            return Err(Errno::NOSYS);
        };
        let mut results = Vec::with_capacity(nodecnt.saturating_mul(svccnt));
        for n in 0..nodecnt {
            let host = nth_node(node, n).ok_or(Errno::INVAL)?;
            for s in 0..svccnt {
                let svc = u32::try_from(s)
                    .ok()
                    .and_then(|s| base.checked_add(s))
                    .ok_or(Errno::INVAL)?;
                results.push(rav.insert_service(&host, Service::new(svc)));
            }
        }
        // SAFETY: fi_addr holds nodecnt * svccnt addresses.
        unsafe { finish_insert(a, results, fi_addr, flags, context) }
    })
}

unsafe extern "C" fn remove(
    av: *mut sys::fid_av,
    fi_addr: *mut sys::fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    guard("fi_av_remove", || {
        // SAFETY: AvObj is the block type of FI_CLASS_AV.
        let a: &AvObj = unsafe { obj::cast(av.cast(), sys::FI_CLASS_AV)? };
        if flags != 0 {
            return Err(Errno::BADFLAGS);
        }
        if count == 0 {
            return Ok(0);
        }
        if fi_addr.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: the contract: `count` addresses.
        let addrs: Vec<FiAddr> = unsafe { std::slice::from_raw_parts(fi_addr, count) }
            .iter()
            .map(|a| FiAddr(*a))
            .collect();
        match a.rust()? {
            RustAv::Psm(av) => av.remove(&addrs),
            RustAv::Mrail(av) => av.remove(&addrs),
        }
        .map_err(Errno::from)?;
        Ok(0)
    })
}

unsafe extern "C" fn lookup(
    av: *mut sys::fid_av,
    fi_addr: sys::fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard("fi_av_lookup", || {
        // SAFETY: AvObj is the block type of FI_CLASS_AV.
        let a: &AvObj = unsafe { obj::cast(av.cast(), sys::FI_CLASS_AV)? };
        if addrlen.is_null() {
            return Err(Errno::INVAL);
        }
        let bytes = match a.rust()? {
            RustAv::Psm(av) => epid_bytes(&[av.lookup(FiAddr(fi_addr)).map_err(Errno::from)?]),
            RustAv::Mrail(av) => {
                epid_bytes(av.lookup(FiAddr(fi_addr)).map_err(Errno::from)?.rails())
            }
        };
        // SAFETY: checked non-null; the contract makes it read-write.
        let room = unsafe { *addrlen };
        if !addr.is_null() {
            // SAFETY: `addr` holds `room` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr.cast(), room.min(bytes.len()))
            };
        }
        // SAFETY: as above.
        unsafe { *addrlen = bytes.len() };
        Ok(0)
    })
}

/// The `FI_ADDR_STR` text of one address of this AV's format.
fn text_of(a: &AvObj, bytes: &[u8]) -> Option<String> {
    let ids = epids_of(bytes)?;
    match ids.as_slice() {
        [one] if a.addrlen == 8 => Some(one.to_string()),
        _ => MrailAddr::new(ids).ok().map(|m| m.to_string()),
    }
}

unsafe extern "C" fn straddr(
    av: *mut sys::fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    crate::entry::guard_value("fi_av_straddr", std::ptr::null(), || {
        // SAFETY: AvObj is the block type of FI_CLASS_AV.
        let Ok(a) = (unsafe { obj::cast::<AvObj>(av.cast(), sys::FI_CLASS_AV) }) else {
            return std::ptr::null();
        };
        if addr.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: the contract: one address of this AV's format.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), a.addrlen) };
        let Some(text) = text_of(a, bytes) else {
            return std::ptr::null();
        };
        // SAFETY: `len` is read-write (the contract).
        let room = unsafe { *len };
        let need = text.len() + 1;
        if !buf.is_null() && room > 0 {
            let n = text.len().min(room - 1);
            // SAFETY: `buf` holds `room` bytes; n < room.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        // SAFETY: as above.
        unsafe { *len = need };
        buf
    })
}

unsafe extern "C" fn av_set(
    _: *mut sys::fid_av,
    _: *mut sys::fi_av_set_attr,
    _: *mut *mut sys::fid_av_set,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}
