//! Op tables whose every entry answers `-FI_ENOSYS`: RMA and atomics,
//! which this library does not offer yet (its infos carry neither `FI_RMA`
//! nor `FI_ATOMIC`), so that a call through them is an error, not a jump
//! through a null pointer. Generated from the bindings' field lists.

use crate::obj::Table;
use crate::sys;
use std::ffi::{c_int, c_void};

unsafe extern "C" fn rma_read(
    _: *mut sys::fid_ep,
    _: *mut c_void,
    _: usize,
    _: *mut c_void,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_readv(
    _: *mut sys::fid_ep,
    _: *const sys::iovec,
    _: *mut *mut c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_readmsg(_: *mut sys::fid_ep, _: *const sys::fi_msg_rma, _: u64) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_write(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_writev(
    _: *mut sys::fid_ep,
    _: *const sys::iovec,
    _: *mut *mut c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_writemsg(_: *mut sys::fid_ep, _: *const sys::fi_msg_rma, _: u64) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_inject(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_writedata(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: u64,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn rma_injectdata(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: u64,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

pub(crate) static RMA_OPS: Table<sys::fi_ops_rma> = Table::new(sys::fi_ops_rma {
    size: std::mem::size_of::<sys::fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
});

unsafe extern "C" fn atomic_write(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_writev(
    _: *mut sys::fid_ep,
    _: *const sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_writemsg(
    _: *mut sys::fid_ep,
    _: *const sys::fi_msg_atomic,
    _: u64,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_inject(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_readwrite(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_readwritev(
    _: *mut sys::fid_ep,
    _: *const sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *mut sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_readwritemsg(
    _: *mut sys::fid_ep,
    _: *const sys::fi_msg_atomic,
    _: *mut sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: u64,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_compwrite(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *const c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_compwritev(
    _: *mut sys::fid_ep,
    _: *const sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *const sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *mut sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: sys::fi_addr_t,
    _: u64,
    _: u64,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut c_void,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_compwritemsg(
    _: *mut sys::fid_ep,
    _: *const sys::fi_msg_atomic,
    _: *const sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *mut sys::fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: u64,
) -> isize {
    -(sys::FI_ENOSYS as isize)
}

unsafe extern "C" fn atomic_writevalid(
    _: *mut sys::fid_ep,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut usize,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn atomic_readwritevalid(
    _: *mut sys::fid_ep,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut usize,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn atomic_compwritevalid(
    _: *mut sys::fid_ep,
    _: sys::fi_datatype,
    _: sys::fi_op,
    _: *mut usize,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

pub(crate) static ATOMIC_OPS: Table<sys::fi_ops_atomic> = Table::new(sys::fi_ops_atomic {
    size: std::mem::size_of::<sys::fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
});
