//! Active-message (AM) types for both PSM builds.
//!
//! Debian ships no `psm_am.h`; these declarations follow the PSM 1.x AM
//! interface (as used by libfabric's `prov/psm`) and psm2's `psm2_am.h`.
//!
//! The builds agree on everything except the handler signature:
//!
//! | | TrueScale (`libpsm-infinipath1`) | psm2 compat (`libpsm2-2-compat`) |
//! | --- | --- | --- |
//! | handler | [`psm_am_handler_fn_t`]: `(token, epaddr, args, nargs, src, len)` | [`psm2_am_handler_fn_t`]: `(token, args, nargs, src, len)` |
//! | source of a request | the `epaddr` argument | `psm2_am_get_source(token, &epaddr)` |
//!
//! The compat library's `psm_am_register_handlers` forwards the handler
//! pointers to `psm2_am_register_handlers` untouched, so libpsm2 calls them
//! with its own five-argument signature. Registering a PSM1-style handler
//! there shifts every argument by one (`args` arrives in `epaddr`, ...).
//! [`crate::am`] hides this behind trampolines.

use std::ffi::{c_int, c_void};

use super::core::{psm_ep_t, psm_epaddr_t, psm_error_t};

/// Index of a registered AM handler.
pub type psm_handler_t = u32;
/// Token identifying the AM request being handled; needed to reply.
pub type psm_am_token_t = *mut c_void;

/// AM flag: none.
pub const PSM_AM_FLAG_NONE: c_int = 0;
/// AM flag: PSM need not copy the payload (it must stay valid until the
/// request completes locally).
pub const PSM_AM_FLAG_ASYNC: c_int = 1;
/// AM flag: the handler of this request will not reply.
pub const PSM_AM_FLAG_NOREPLY: c_int = 2;

/// Minimum values PSM promises for [`psm_am_parameters`]: handlers.
pub const PSM_AM_MIN_HANDLERS: u32 = 64;
/// Minimum values PSM promises for [`psm_am_parameters`]: arguments.
pub const PSM_AM_MIN_NARGS: u32 = 2;
/// Minimum values PSM promises for [`psm_am_parameters`]: short payload bytes.
pub const PSM_AM_MIN_SHORT: u32 = 256;

/// One 64-bit AM argument (`psm_amarg_t`).
///
/// In C this is a union of one `u64`, two `u32` (`u32w1` at offset 0, `u32w0`
/// at offset 4) and four `u16` (`u16w3` at offset 0 ... `u16w0` at offset 6).
/// Rust keeps the `u64` and offers accessors that read and write the same
/// bytes as the C members, so values agree with C code on any byte order.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct psm_amarg_t {
    /// The whole argument (`u64` / `u64w0` in C).
    pub u64w0: u64,
}

impl psm_amarg_t {
    /// An argument holding `value`.
    pub const fn from_u64(value: u64) -> Self {
        Self { u64w0: value }
    }

    /// An argument whose C members `u32w0` and `u32w1` are `w0` and `w1`.
    pub fn from_u32(w0: u32, w1: u32) -> Self {
        let mut bytes = [0u8; 8];
        bytes[0..4].copy_from_slice(&w1.to_ne_bytes());
        bytes[4..8].copy_from_slice(&w0.to_ne_bytes());
        Self {
            u64w0: u64::from_ne_bytes(bytes),
        }
    }

    /// An argument whose C members `u16w0`..`u16w3` are `w[0]`..`w[3]`.
    pub fn from_u16(w: [u16; 4]) -> Self {
        let mut bytes = [0u8; 8];
        for (i, word) in w.iter().enumerate() {
            // u16w{i} lives at byte offset 6 - 2*i.
            let at = 6 - 2 * i;
            bytes[at..at + 2].copy_from_slice(&word.to_ne_bytes());
        }
        Self {
            u64w0: u64::from_ne_bytes(bytes),
        }
    }

    /// The whole argument.
    pub const fn u64(self) -> u64 {
        self.u64w0
    }

    /// The C member `u32w0` (bytes 4..8).
    pub fn u32w0(self) -> u32 {
        let b = self.u64w0.to_ne_bytes();
        u32::from_ne_bytes([b[4], b[5], b[6], b[7]])
    }

    /// The C member `u32w1` (bytes 0..4).
    pub fn u32w1(self) -> u32 {
        let b = self.u64w0.to_ne_bytes();
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The C member `u16w{index}` (`index` in 0..4; bytes `6-2*index`..).
    ///
    /// # Panics
    /// If `index >= 4`.
    pub fn u16w(self, index: usize) -> u16 {
        assert!(index < 4, "psm_amarg_t has u16w0..u16w3");
        let b = self.u64w0.to_ne_bytes();
        let at = 6 - 2 * index;
        u16::from_ne_bytes([b[at], b[at + 1]])
    }
}

impl std::fmt::Debug for psm_amarg_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AmArg({:#x})", self.u64w0)
    }
}

/// AM handler as the TrueScale PSM 1.x build calls it
/// (`psm_am_handler_fn_t`). Handlers should return 0.
pub type psm_am_handler_fn_t = unsafe extern "C" fn(
    token: psm_am_token_t,
    epaddr: psm_epaddr_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: u32,
) -> c_int;

/// AM handler as the psm2 compat build calls it (`psm2_am_handler_fn_t`):
/// there is no `epaddr` argument. Handlers should return 0.
pub type psm2_am_handler_fn_t = unsafe extern "C" fn(
    token: psm_am_token_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: u32,
) -> c_int;

/// A handler pointer as stored in the array given to
/// `psm_am_register_handlers`: a [`psm_am_handler_fn_t`] on the TrueScale
/// build, a [`psm2_am_handler_fn_t`] on the compat build.
pub type psm_am_handler_ptr = *const c_void;

/// Local completion callback of an AM request or reply.
pub type psm_am_completion_fn_t = Option<unsafe extern "C" fn(context: *mut c_void)>;

/// AM limits returned by `psm_am_get_parameters` (`struct psm_am_parameters`,
/// identical to `struct psm2_am_parameters`, 16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct psm_am_parameters {
    /// Maximum number of handlers that can be registered.
    pub max_handlers: u32,
    /// Maximum number of arguments to an AM handler.
    pub max_nargs: u32,
    /// Maximum bytes in a request payload.
    pub max_request_short: u32,
    /// Maximum bytes in a reply payload.
    pub max_reply_short: u32,
}

/// `psm_am_register_handlers(psm_ep_t ep, const psm_am_handler_fn_t
/// *handlers, int num_handlers, int *handlers_idx)`.
pub type psm_am_register_handlers_fn = unsafe extern "C" fn(
    ep: psm_ep_t,
    handlers: *const psm_am_handler_ptr,
    num_handlers: c_int,
    handlers_idx: *mut c_int,
) -> psm_error_t;
/// `psm_am_request_short(psm_epaddr_t epaddr, psm_handler_t handler,
/// psm_amarg_t *args, int nargs, void *src, size_t len, int flags,
/// psm_am_completion_fn_t completion_fn, void *completion_ctxt)`.
pub type psm_am_request_short_fn = unsafe extern "C" fn(
    epaddr: psm_epaddr_t,
    handler: psm_handler_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: usize,
    flags: c_int,
    completion_fn: psm_am_completion_fn_t,
    completion_ctxt: *mut c_void,
) -> psm_error_t;
/// `psm_am_reply_short(psm_am_token_t token, psm_handler_t handler,
/// psm_amarg_t *args, int nargs, void *src, size_t len, int flags,
/// psm_am_completion_fn_t completion_fn, void *completion_ctxt)`.
pub type psm_am_reply_short_fn = unsafe extern "C" fn(
    token: psm_am_token_t,
    handler: psm_handler_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: usize,
    flags: c_int,
    completion_fn: psm_am_completion_fn_t,
    completion_ctxt: *mut c_void,
) -> psm_error_t;
/// `psm_am_get_parameters(psm_ep_t ep, struct psm_am_parameters *params,
/// size_t sizeof_parameters_in, size_t *sizeof_parameters_out)`.
pub type psm_am_get_parameters_fn = unsafe extern "C" fn(
    ep: psm_ep_t,
    parameters: *mut psm_am_parameters,
    sizeof_parameters_in: usize,
    sizeof_parameters_out: *mut usize,
) -> psm_error_t;
/// `psm2_am_get_source(psm2_am_token_t token, psm2_epaddr_t *epaddr_out)`:
/// reachable only through the compat build (it lives in libpsm2.so.2).
pub type psm2_am_get_source_fn =
    unsafe extern "C" fn(token: psm_am_token_t, epaddr_out: *mut psm_epaddr_t) -> psm_error_t;
/// `psm2_init(int *major, int *minor)`: looked up only to detect the compat build.
pub type psm2_init_fn = unsafe extern "C" fn(major: *mut c_int, minor: *mut c_int) -> psm_error_t;
