//! How C objects are laid out and kept: each is one heap block whose first
//! field is the libfabric `fid_*` structure, so the `fid` pointer C holds
//! is the block's address. A process-wide table of live objects checks
//! every fid that arrives as an *argument* (bind, open, close) for its
//! class before it is used; a wrong or closed one is `-FI_EINVAL`.
//!
//! Closing frees everything the object holds (its psmrail object, its
//! queues) but keeps the small block itself, so that a second `fi_close`
//! or a call through a closed fid reaches a block that says "closed"
//! (`-FI_EINVAL`) instead of freed memory: libfabric's inline wrappers read
//! the fid's op tables before any provider code runs. The kept blocks stay
//! listed (reachable), a few hundred bytes per object ever opened.

use crate::entry::{Errno, FiResult};
use crate::sys;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

static LIVE: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
static KEPT: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Option<HashMap<usize, usize>>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records a new object of class `fclass` at `addr`.
pub(crate) fn register(addr: usize, fclass: u32) {
    live()
        .get_or_insert_with(HashMap::new)
        .insert(addr, fclass as usize);
}

/// Whether `addr` is a live object of class `fclass`.
pub(crate) fn is_live(addr: usize, fclass: u32) -> bool {
    live()
        .as_ref()
        .and_then(|m| m.get(&addr))
        .is_some_and(|c| *c == fclass as usize)
}

/// The class of the live object at `addr`.
pub(crate) fn class_of(addr: usize) -> Option<u32> {
    live()
        .as_ref()
        .and_then(|m| m.get(&addr))
        .map(|c| *c as u32)
}

/// Marks the object at `addr` closed: it leaves the live table and its
/// block is kept (see the module docs).
pub(crate) fn retire(addr: usize) {
    if let Some(m) = live().as_mut() {
        m.remove(&addr);
    }
    KEPT.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(addr);
}

/// A mutex that shrugs off poisoning (a panic inside an entry point was
/// already turned into `-FI_EOTHER`).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `fid` as a live object of class `fclass`, cast to its block type.
///
/// # Safety
/// `T` must be the block type of `fclass` objects (a `#[repr(C)]` struct
/// whose first field starts with a `fid`).
pub(crate) unsafe fn cast<T>(fid: *const sys::fid, fclass: u32) -> FiResult<&'static T> {
    if fid.is_null() || !is_live(fid as usize, fclass) {
        return Err(Errno::INVAL);
    }
    // SAFETY: live blocks of this class are `T`s that are never freed.
    Ok(unsafe { &*fid.cast::<T>() })
}

/// `p` cast to its block type without the live check, for the data path
/// (libfabric's inline wrappers already read through it). A kept block of
/// a closed object is still a valid `T`.
///
/// # Safety
/// `p` must point to a block of type `T` made by this library.
pub(crate) unsafe fn block<'a, T, P>(p: *mut P) -> FiResult<&'a T> {
    if p.is_null() {
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller's promise; blocks are never freed.
    Ok(unsafe { &*p.cast::<T>() })
}

/// Moves `v` to the heap for good and registers it; returns its address.
pub(crate) fn make<T>(v: T, fclass: u32) -> *mut T {
    let p = Box::into_raw(Box::new(v));
    register(p as usize, fclass);
    p
}

/// A `fid` header.
pub(crate) fn fid_header(
    fclass: u32,
    context: *mut std::ffi::c_void,
    ops: &'static FiOps,
) -> sys::fid {
    sys::fid {
        fclass: fclass as usize,
        context,
        ops: ops.0.get(),
    }
}

/// A `struct fi_ops` table in static memory (C takes it as `*mut`; nobody
/// writes it).
pub(crate) struct FiOps(pub(crate) std::cell::UnsafeCell<sys::fi_ops>);
// SAFETY: the table is never written after it is built (C reads it).
unsafe impl Sync for FiOps {}

/// Any op table in static memory, handed to C as `*mut`.
pub(crate) struct Table<T>(pub(crate) std::cell::UnsafeCell<T>);
// SAFETY: tables are never written after they are built (C reads them).
unsafe impl<T> Sync for Table<T> {}

impl<T> Table<T> {
    pub(crate) const fn new(t: T) -> Self {
        Table(std::cell::UnsafeCell::new(t))
    }
    pub(crate) fn ptr(&'static self) -> *mut T {
        self.0.get()
    }
}

impl FiOps {
    pub(crate) const fn new(t: sys::fi_ops) -> Self {
        FiOps(std::cell::UnsafeCell::new(t))
    }
}

/// Parent bookkeeping: how many children are open (`fi_close` of a parent
/// with children is `-FI_EBUSY`).
#[derive(Debug, Default)]
pub(crate) struct Children(std::sync::atomic::AtomicUsize);

impl Children {
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    pub(crate) fn remove(&self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
    pub(crate) fn any(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) > 0
    }
}

/// The stub answers of op-table slots that do not apply.
pub(crate) mod stub {
    use crate::sys;
    use std::ffi::{c_char, c_int, c_void};

    pub(crate) unsafe extern "C" fn bind(_: *mut sys::fid, _: *mut sys::fid, _: u64) -> c_int {
        -(sys::FI_ENOSYS as c_int)
    }
    pub(crate) unsafe extern "C" fn control(_: *mut sys::fid, _: c_int, _: *mut c_void) -> c_int {
        -(sys::FI_ENOSYS as c_int)
    }
    pub(crate) unsafe extern "C" fn ops_open(
        _: *mut sys::fid,
        _: *const c_char,
        _: u64,
        _: *mut *mut c_void,
        _: *mut c_void,
    ) -> c_int {
        -(sys::FI_ENOSYS as c_int)
    }
    pub(crate) unsafe extern "C" fn tostr(_: *const sys::fid, _: *mut c_char, _: usize) -> c_int {
        -(sys::FI_ENOSYS as c_int)
    }
    pub(crate) unsafe extern "C" fn ops_set(
        _: *mut sys::fid,
        _: *const c_char,
        _: u64,
        _: *mut c_void,
        _: *mut c_void,
    ) -> c_int {
        -(sys::FI_ENOSYS as c_int)
    }
}

/// A `struct fi_ops` with `close` and optionally `bind` / `control`.
pub(crate) const fn fi_ops(
    close: unsafe extern "C" fn(*mut sys::fid) -> std::ffi::c_int,
    bind: Option<unsafe extern "C" fn(*mut sys::fid, *mut sys::fid, u64) -> std::ffi::c_int>,
    control: Option<
        unsafe extern "C" fn(
            *mut sys::fid,
            std::ffi::c_int,
            *mut std::ffi::c_void,
        ) -> std::ffi::c_int,
    >,
) -> sys::fi_ops {
    sys::fi_ops {
        size: std::mem::size_of::<sys::fi_ops>(),
        close: Some(close),
        bind: match bind {
            Some(b) => Some(b),
            None => Some(stub::bind),
        },
        control: match control {
            Some(c) => Some(c),
            None => Some(stub::control),
        },
        ops_open: Some(stub::ops_open),
        tostr: Some(stub::tostr),
        ops_set: Some(stub::ops_set),
    }
}
