//! Matched-queue types and constants (the contents of `psm_mq.h`).
//!
//! PSM 1.x tags are 64 bits; a receive matches when
//! `(incoming_tag & rtagsel) == (rtag & rtagsel)`. The compat build forwards
//! these calls to the 64-bit `psm2_mq_*` functions (not the 96-bit `*2`
//! variants), whose status structure is byte-identical.

use std::ffi::{c_int, c_void};
use std::marker::{PhantomData, PhantomPinned};

use super::core::{psm_ep_t, psm_epaddr_t, psm_error_t, psm_mq_t, psm_optkey};

/// Opaque MQ request (`struct psm_mq_req`).
#[repr(C)]
#[derive(Debug)]
pub struct psm_mq_req {
    _data: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// MQ request handle; [`PSM_MQ_REQINVALID`] (NULL) once completed.
pub type psm_mq_req_t = *mut psm_mq_req;

/// The value a request handle takes once `psm_mq_test`/`psm_mq_wait` has
/// completed it (`PSM_MQ_REQINVALID`).
pub const PSM_MQ_REQINVALID: psm_mq_req_t = std::ptr::null_mut();

/// Order mask disabling every ordering guarantee.
pub const PSM_MQ_ORDERMASK_NONE: u64 = 0;
/// Order mask keeping all messages ordered (what the C provider used).
pub const PSM_MQ_ORDERMASK_ALL: u64 = 0xffff_ffff_ffff_ffff;
/// Send flag: synchronous send (completes once matched by the receiver).
pub const PSM_MQ_FLAG_SENDSYNC: u32 = 0x01;
/// Number of counters in use in [`psm_mq_stats_t`].
pub const PSM_MQ_NUM_STATS: usize = 13;

/// Completion status of an MQ request (`psm_mq_status_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psm_mq_status_t {
    /// Sender's tag (receive requests only).
    pub msg_tag: u64,
    /// Sender's message length (receive requests only).
    pub msg_length: u32,
    /// Bytes actually transferred (receive requests only).
    pub nbytes: u32,
    /// Completion code (`PSM_OK`, `PSM_MQ_TRUNCATION`, ...).
    pub error_code: psm_error_t,
    /// User context given when the request was posted.
    pub context: *mut c_void,
}

impl Default for psm_mq_status_t {
    fn default() -> Self {
        Self {
            msg_tag: 0,
            msg_length: 0,
            nbytes: 0,
            error_code: 0,
            context: std::ptr::null_mut(),
        }
    }
}

/// MQ statistics (`psm_mq_stats_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct psm_mq_stats_t {
    /// Bytes received into a matched user buffer.
    pub rx_user_bytes: u64,
    /// Messages received into a matched user buffer.
    pub rx_user_num: u64,
    /// Bytes received into an unmatched system buffer.
    pub rx_sys_bytes: u64,
    /// Messages received into an unmatched system buffer.
    pub rx_sys_num: u64,
    /// Messages transmitted.
    pub tx_num: u64,
    /// Messages transmitted eagerly.
    pub tx_eager_num: u64,
    /// Bytes transmitted eagerly.
    pub tx_eager_bytes: u64,
    /// Messages transmitted with rendezvous.
    pub tx_rndv_num: u64,
    /// Bytes transmitted with rendezvous.
    pub tx_rndv_bytes: u64,
    /// Messages transmitted over shared memory.
    pub tx_shm_num: u64,
    /// Messages received over shared memory.
    pub rx_shm_num: u64,
    /// System buffers allocated.
    pub rx_sysbuf_num: u64,
    /// Bytes allocated for system buffers.
    pub rx_sysbuf_bytes: u64,
    /// Reserved by PSM.
    pub _reserved: [u64; 16],
}

/// `psm_mq_init(psm_ep_t ep, uint64_t tag_order_mask, const struct psm_optkey
/// *opts, int numopts, psm_mq_t *mq)`.
pub type psm_mq_init_fn = unsafe extern "C" fn(
    ep: psm_ep_t,
    tag_order_mask: u64,
    opts: *const psm_optkey,
    numopts: c_int,
    mq: *mut psm_mq_t,
) -> psm_error_t;
/// `psm_mq_finalize(psm_mq_t mq)`.
pub type psm_mq_finalize_fn = unsafe extern "C" fn(mq: psm_mq_t) -> psm_error_t;
/// `psm_mq_getopt(psm_mq_t mq, int option, void *value)`.
pub type psm_mq_getopt_fn =
    unsafe extern "C" fn(mq: psm_mq_t, option: c_int, value: *mut c_void) -> psm_error_t;
/// `psm_mq_setopt(psm_mq_t mq, int option, const void *value)`.
pub type psm_mq_setopt_fn =
    unsafe extern "C" fn(mq: psm_mq_t, option: c_int, value: *const c_void) -> psm_error_t;
/// `psm_mq_irecv(psm_mq_t mq, uint64_t rtag, uint64_t rtagsel, uint32_t flags,
/// void *buf, uint32_t len, void *context, psm_mq_req_t *req)`.
pub type psm_mq_irecv_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    rtag: u64,
    rtagsel: u64,
    flags: u32,
    buf: *mut c_void,
    len: u32,
    context: *mut c_void,
    req: *mut psm_mq_req_t,
) -> psm_error_t;
/// `psm_mq_send(psm_mq_t mq, psm_epaddr_t dest, uint32_t flags, uint64_t stag,
/// const void *buf, uint32_t len)`.
pub type psm_mq_send_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    dest: psm_epaddr_t,
    flags: u32,
    stag: u64,
    buf: *const c_void,
    len: u32,
) -> psm_error_t;
/// `psm_mq_isend(psm_mq_t mq, psm_epaddr_t dest, uint32_t flags, uint64_t
/// stag, const void *buf, uint32_t len, void *context, psm_mq_req_t *req)`.
pub type psm_mq_isend_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    dest: psm_epaddr_t,
    flags: u32,
    stag: u64,
    buf: *const c_void,
    len: u32,
    context: *mut c_void,
    req: *mut psm_mq_req_t,
) -> psm_error_t;
/// `psm_mq_iprobe(psm_mq_t mq, uint64_t rtag, uint64_t rtagsel,
/// psm_mq_status_t *status)`.
pub type psm_mq_iprobe_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    rtag: u64,
    rtagsel: u64,
    status: *mut psm_mq_status_t,
) -> psm_error_t;
/// `psm_mq_ipeek(psm_mq_t mq, psm_mq_req_t *req, psm_mq_status_t *status)`.
pub type psm_mq_ipeek_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    req: *mut psm_mq_req_t,
    status: *mut psm_mq_status_t,
) -> psm_error_t;
/// `psm_mq_wait(psm_mq_req_t *req, psm_mq_status_t *status)`, also the shape
/// of `psm_mq_test`.
pub type psm_mq_complete_fn =
    unsafe extern "C" fn(req: *mut psm_mq_req_t, status: *mut psm_mq_status_t) -> psm_error_t;
/// `psm_mq_cancel(psm_mq_req_t *req)`.
pub type psm_mq_cancel_fn = unsafe extern "C" fn(req: *mut psm_mq_req_t) -> psm_error_t;
/// `void psm_mq_get_stats(psm_mq_t mq, psm_mq_stats_t *stats)`.
pub type psm_mq_get_stats_fn = unsafe extern "C" fn(mq: psm_mq_t, stats: *mut psm_mq_stats_t);

/// The 96-bit psm2 message tag (`psm2_mq_tag_t`): three 32-bit words plus
/// one of padding. A PSM 1.x 64-bit tag `t` is `tag[0] = t as u32`,
/// `tag[1] = (t >> 32) as u32`, `tag[2] = 0` (little-endian word order, as
/// libpsm2 converts it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct psm2_mq_tag_t {
    /// `tag0`, `tag1`, `tag2` and the padding element.
    pub tag: [u32; 4],
}

impl psm2_mq_tag_t {
    /// The 96-bit form of a 64-bit tag (upper word zero).
    pub fn from_u64(tag: u64) -> Self {
        Self {
            tag: [tag as u32, (tag >> 32) as u32, 0, 0],
        }
    }

    /// The low 64 bits (what a PSM 1.x caller sees).
    pub fn to_u64(self) -> u64 {
        u64::from(self.tag[0]) | (u64::from(self.tag[1]) << 32)
    }
}

/// Completion status with the sender's address (`psm2_mq_status2_t`),
/// filled by the psm2 `*2` MQ calls that the compat build's library
/// (libpsm2) also exports. `msg_tag` is 16-byte aligned in C, hence the
/// padding after `msg_peer` and the alignment of the whole structure.
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy)]
pub struct psm2_mq_status2_t {
    /// The remote peer's address (the sender of a receive, the destination
    /// of a send); the same `psm_epaddr_t` `psm_ep_connect` returned.
    pub msg_peer: psm_epaddr_t,
    /// Padding before the aligned tag.
    pub _pad: u64,
    /// The sender's tag.
    pub msg_tag: psm2_mq_tag_t,
    /// The sender's message length.
    pub msg_length: u32,
    /// Bytes actually transferred (receives).
    pub nbytes: u32,
    /// Completion code.
    pub error_code: psm_error_t,
    /// User context given when the request was posted.
    pub context: *mut c_void,
}

impl Default for psm2_mq_status2_t {
    fn default() -> Self {
        Self {
            msg_peer: std::ptr::null_mut(),
            _pad: 0,
            msg_tag: psm2_mq_tag_t::default(),
            msg_length: 0,
            nbytes: 0,
            error_code: 0,
            context: std::ptr::null_mut(),
        }
    }
}

/// `psm2_mq_ipeek2(psm2_mq_t mq, psm2_mq_req_t *req, psm2_mq_status2_t
/// *status)`: libpsm2 only (reachable through the compat build).
pub type psm2_mq_ipeek2_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    req: *mut psm_mq_req_t,
    status: *mut psm2_mq_status2_t,
) -> psm_error_t;
/// `psm2_mq_test2(psm2_mq_req_t *req, psm2_mq_status2_t *status)`: libpsm2
/// only.
pub type psm2_mq_test2_fn =
    unsafe extern "C" fn(req: *mut psm_mq_req_t, status: *mut psm2_mq_status2_t) -> psm_error_t;
/// `psm2_mq_iprobe2(psm2_mq_t mq, psm2_epaddr_t src, psm2_mq_tag_t *rtag,
/// psm2_mq_tag_t *rtagsel, psm2_mq_status2_t *status)`: libpsm2 only.
pub type psm2_mq_iprobe2_fn = unsafe extern "C" fn(
    mq: psm_mq_t,
    src: psm_epaddr_t,
    rtag: *mut psm2_mq_tag_t,
    rtagsel: *mut psm2_mq_tag_t,
    status: *mut psm2_mq_status2_t,
) -> psm_error_t;
