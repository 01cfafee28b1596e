//! Core PSM 1.x types, error codes and constants (the contents of `psm.h`).
//!
//! Written by hand from the PSM 1.x interface as shipped in
//! `libpsm-infinipath1-dev` (`PSM_VERNO` 0x0110). The psm2 compat build
//! (`libpsm2-2-compat`) forwards every `psm_*` call to the `psm2_*` function of
//! the same name, so these structures are handed to libpsm2 unchanged; its
//! `psm2.h` declares byte-identical layouts (checked by `tests/layout.rs`).
//!
//! C enums are declared as `c_int` aliases, never as Rust enums: the library
//! may return a value this crate does not know, and a Rust enum holding an
//! unknown discriminant would be undefined behaviour.

use std::ffi::{c_char, c_int, c_void};
use std::marker::{PhantomData, PhantomPinned};

/// Declares an opaque C struct that is only ever handled through pointers.
macro_rules! opaque {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    };
}

opaque!(
    /// Opaque local endpoint (`struct psm_ep`).
    psm_ep
);
opaque!(
    /// Opaque matched queue (`struct psm_mq`).
    psm_mq
);
opaque!(
    /// Opaque remote endpoint address (`struct psm_epaddr`).
    psm_epaddr
);
opaque!(
    /// Opaque error token handed to error handlers (`struct psm_error_token`).
    psm_error_token
);

/// Local endpoint handle returned by `psm_ep_open`.
pub type psm_ep_t = *mut psm_ep;
/// Matched-queue handle returned by `psm_mq_init`.
pub type psm_mq_t = *mut psm_mq;
/// Remote endpoint address returned by `psm_ep_connect`; valid for one local endpoint.
pub type psm_epaddr_t = *mut psm_epaddr;
/// Error token passed to a user error handler.
pub type psm_error_token_t = *mut psm_error_token;
/// Globally unique endpoint identifier (8 bytes, opaque contents).
pub type psm_epid_t = u64;
/// Job key (DCE-1 style UUID) passed to `psm_ep_open`.
pub type psm_uuid_t = [u8; 16];

/// Version of the PSM 1.x API this crate is written against (`PSM_VERNO`).
pub const PSM_VERNO: u32 = 0x0110;
/// Major API version requested from `psm_init` (`PSM_VERNO_MAJOR`).
pub const PSM_VERNO_MAJOR: c_int = 0x01;
/// Minor API version requested from `psm_init` (`PSM_VERNO_MINOR`).
pub const PSM_VERNO_MINOR: c_int = 0x10;

/// `enum psm_error`, carried as a plain C int.
pub type psm_error_t = c_int;

/// Declares the error codes once: the constants and a lookup table of names.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        $($(#[$doc])* pub const $name: psm_error_t = $value;)*

        /// Every `psm_error_t` value with its C name, in numeric order.
        pub const PSM_ERROR_NAMES: &[(psm_error_t, &str)] = &[$(($value, stringify!($name)),)*];
    };
}

error_codes! {
    /// Success.
    PSM_OK = 0;
    /// Success, but polling made no progress.
    PSM_OK_NO_PROGRESS = 1;
    /// Invalid parameter.
    PSM_PARAM_ERR = 3;
    /// Out of memory.
    PSM_NO_MEMORY = 4;
    /// PSM was not initialized (`psm_init` not called or failed).
    PSM_INIT_NOT_INIT = 5;
    /// The library cannot provide the requested API version.
    PSM_INIT_BAD_API_VERSION = 6;
    /// CPU affinity could not be set.
    PSM_NO_AFFINITY = 7;
    /// Unresolved internal error. The compat build returns it from `psm_init`
    /// when no HFI device exists, although `self`/`shm` endpoints still work.
    PSM_INTERNAL_ERR = 8;
    /// Shared-memory segment error.
    PSM_SHMEM_SEGMENT_ERR = 9;
    /// The option is read-only.
    PSM_OPT_READONLY = 10;
    /// Operation timed out.
    PSM_TIMEOUT = 11;
    /// Too many endpoints (compat build: set `PSM2_MULTI_EP=1`).
    PSM_TOO_MANY_ENDPOINTS = 12;
    /// PSM was finalized.
    PSM_IS_FINALIZED = 13;
    /// The endpoint was closed.
    PSM_EP_WAS_CLOSED = 20;
    /// No device available.
    PSM_EP_NO_DEVICE = 21;
    /// The requested unit was not found.
    PSM_EP_UNIT_NOT_FOUND = 22;
    /// Device failure while opening the endpoint.
    PSM_EP_DEVICE_FAILURE = 23;
    /// Endpoint close timed out.
    PSM_EP_CLOSE_TIMEOUT = 24;
    /// No free port (context) on the device.
    PSM_EP_NO_PORTS_AVAIL = 25;
    /// The network is down.
    PSM_EP_NO_NETWORK = 26;
    /// Invalid UUID key.
    PSM_EP_INVALID_UUID_KEY = 27;
    /// Out of endpoint resources (for example AM handler slots).
    PSM_EP_NO_RESOURCES = 28;
    /// Unknown epid.
    PSM_EPID_UNKNOWN = 40;
    /// The epid is unreachable.
    PSM_EPID_UNREACHABLE = 41;
    /// Invalid node in the epid.
    PSM_EPID_INVALID_NODE = 43;
    /// MTU mismatch with the peer.
    PSM_EPID_INVALID_MTU = 44;
    /// UUID key mismatch with the peer.
    PSM_EPID_INVALID_UUID_KEY = 45;
    /// Protocol version mismatch with the peer.
    PSM_EPID_INVALID_VERSION = 46;
    /// Invalid connect request.
    PSM_EPID_INVALID_CONNECT = 47;
    /// Already connected.
    PSM_EPID_ALREADY_CONNECTED = 48;
    /// Network error while connecting.
    PSM_EPID_NETWORK_ERROR = 49;
    /// Invalid partition key.
    PSM_EPID_INVALID_PKEY = 50;
    /// Path resolution failed.
    PSM_EPID_PATH_RESOLUTION = 51;
    /// No completion available (`PSM_MQ_INCOMPLETE`).
    PSM_MQ_NO_COMPLETIONS = 60;
    /// A received message was truncated.
    PSM_MQ_TRUNCATION = 61;
    /// Invalid AM reply.
    PSM_AM_INVALID_REPLY = 70;
    /// Invalid info query (psm2 only; the compat build may return it).
    PSM_IQ_INVALID_QUERY = 71;
    /// One past the last error code.
    PSM_ERROR_LAST = 80;
}

/// Older name of [`PSM_MQ_NO_COMPLETIONS`].
pub const PSM_MQ_INCOMPLETE: psm_error_t = PSM_MQ_NO_COMPLETIONS;

/// `enum psm_component`, for `psm_setopt`/`psm_getopt`.
pub type psm_component_t = c_int;
/// Core component.
pub const PSM_COMPONENT_CORE: psm_component_t = 0;
/// Matched-queue component.
pub const PSM_COMPONENT_MQ: psm_component_t = 1;
/// Active-message component.
pub const PSM_COMPONENT_AM: psm_component_t = 2;
/// InfiniBand component.
pub const PSM_COMPONENT_IB: psm_component_t = 3;

/// `enum psm_path_res`: path-record resolution type.
pub type psm_path_res_t = c_int;
/// No path-record query (static data).
pub const PSM_PATH_RES_NONE: psm_path_res_t = 0;
/// OFED Plus Plus path-record queries.
pub const PSM_PATH_RES_OPP: psm_path_res_t = 1;
/// Raw libibumad path-record queries.
pub const PSM_PATH_RES_UMAD: psm_path_res_t = 2;

/// Value of the `errhandler` argument of `psm_error_register_handler` that
/// selects PSM's own (possibly aborting) handler (`PSM_ERRHANDLER_PSM_HANDLER`).
pub const PSM_ERRHANDLER_PSM_HANDLER: isize = -1;
/// Value of the `errhandler` argument of `psm_error_register_handler` that
/// returns every error to the caller (`PSM_ERRHANDLER_NO_HANDLER`).
pub const PSM_ERRHANDLER_NO_HANDLER: isize = -2;
/// Longest error string handed to an error handler.
pub const PSM_ERRSTRING_MAXLEN: usize = 512;

/// A user error handler (`psm_ep_errhandler_t`). The two special values above
/// are not valid function pointers, so `psm_error_register_handler` takes the
/// handler as a pointer-sized value (see [`psm_error_register_handler_fn`]).
pub type psm_ep_errhandler_t = unsafe extern "C" fn(
    ep: psm_ep_t,
    error: psm_error_t,
    error_string: *const c_char,
    token: psm_error_token_t,
) -> psm_error_t;

/// Option key/value pair (`struct psm_optkey`), used by `psm_mq_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psm_optkey {
    /// Option key.
    pub key: u32,
    /// Pointer to the option value.
    pub value: *mut c_void,
}

/// Affinity mode: do not set CPU affinity.
pub const PSM_EP_OPEN_AFFINITY_SKIP: c_int = 0;
/// Affinity mode: set CPU affinity unless already set.
pub const PSM_EP_OPEN_AFFINITY_SET: c_int = 1;
/// Affinity mode: set CPU affinity regardless.
pub const PSM_EP_OPEN_AFFINITY_FORCE: c_int = 2;
/// Default network protection key.
pub const PSM_EP_OPEN_PKEY_DEFAULT: u64 = 0xffff_ffff_ffff_ffff;

/// Endpoint open options (`struct psm_ep_open_opts`) as laid out for
/// `PSM_VERNO` 0x0110: `outvl` (only present for 0x0107..=0x010a) is absent;
/// `service_id`, `path_res_type`, `senddesc_num` and `imm_size` are present.
/// Identical to `struct psm2_ep_open_opts`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct psm_ep_open_opts {
    /// Timeout in nanoseconds to open the device.
    pub timeout: i64,
    /// Unit (adapter) id, -1 for any.
    pub unit: c_int,
    /// One of the `PSM_EP_OPEN_AFFINITY_*` modes.
    pub affinity: c_int,
    /// Megabytes of shared memory for intra-node communication.
    pub shm_mbytes: c_int,
    /// Preallocated send buffers.
    pub sendbufs_num: c_int,
    /// Network protection key.
    pub network_pkey: u64,
    /// Port to use (1..N), 0 for any.
    pub port: c_int,
    /// Service level used when sending.
    pub outsl: c_int,
    /// Service id used for path resolution.
    pub service_id: u64,
    /// Path resolution type (`PSM_PATH_RES_*`).
    pub path_res_type: psm_path_res_t,
    /// Preallocated send descriptors.
    pub senddesc_num: c_int,
    /// Immediate data size.
    pub imm_size: c_int,
}

/// Graceful close mode for `psm_ep_close`.
pub const PSM_EP_CLOSE_GRACEFUL: c_int = 0;
/// Forceful close mode for `psm_ep_close`.
pub const PSM_EP_CLOSE_FORCE: c_int = 1;

/// Core option: debug level.
pub const PSM_CORE_OPT_DEBUG: c_int = 0x101;
/// Core option: endpoint-address context.
pub const PSM_CORE_OPT_EP_CTXT: c_int = 0x102;
/// IB option: default service level.
pub const PSM_IB_OPT_DF_SL: c_int = 0x201;
/// IB option: service level towards one endpoint address.
pub const PSM_IB_OPT_EP_SL: c_int = 0x202;
/// MQ option: rendezvous threshold on the device.
pub const PSM_MQ_OPT_RNDV_IB_SZ: c_int = 0x301;
/// Older name of [`PSM_MQ_OPT_RNDV_IB_SZ`].
pub const PSM_MQ_RNDV_IPATH_SZ: c_int = PSM_MQ_OPT_RNDV_IB_SZ;
/// MQ option: rendezvous threshold over shared memory.
pub const PSM_MQ_OPT_RNDV_SHM_SZ: c_int = 0x302;
/// Older name of [`PSM_MQ_OPT_RNDV_SHM_SZ`].
pub const PSM_MQ_RNDV_SHM_SZ: c_int = PSM_MQ_OPT_RNDV_SHM_SZ;
/// MQ option: bytes allowed for unexpected messages.
pub const PSM_MQ_OPT_SYSBUF_MYBYTES: c_int = 0x303;
/// Older name of [`PSM_MQ_OPT_SYSBUF_MYBYTES`].
pub const PSM_MQ_MAX_SYSBUF_MBYTES: c_int = PSM_MQ_OPT_SYSBUF_MYBYTES;
/// AM option: fragment size.
pub const PSM_AM_OPT_FRAG_SZ: c_int = 0x401;

/// End-point information returned by `psm_ep_query` on the TrueScale build
/// (`psm_epinfo_t`, 96 bytes). The compat build writes [`psm2_epinfo_t`]
/// (104 bytes) instead: see [`psm_ep_query_fn`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psm_epinfo_t {
    /// The endpoint.
    pub ep: psm_ep_t,
    /// Its epid.
    pub epid: psm_epid_t,
    /// Its UUID.
    pub uuid: psm_uuid_t,
    /// The UUID as a NUL-terminated string.
    pub uuid_str: [c_char; 64],
}

/// End-point information as the compat build's `psm_ep_query` writes it
/// (`psm2_epinfo_t`, 104 bytes): psm2 inserted `jkey` before `uuid_str`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psm2_epinfo_t {
    /// The endpoint.
    pub ep: psm_ep_t,
    /// Its epid.
    pub epid: psm_epid_t,
    /// Its UUID.
    pub uuid: psm_uuid_t,
    /// Its job key.
    pub jkey: u16,
    /// The UUID as a NUL-terminated string.
    pub uuid_str: [c_char; 64],
}

/// Connection information returned by `psm_ep_epid_lookup` (`psm_epconn_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psm_epconn_t {
    /// The endpoint address of the connection.
    pub addr: psm_epaddr_t,
    /// The local endpoint of the connection.
    pub ep: psm_ep_t,
    /// The matched queue of that endpoint.
    pub mq: psm_mq_t,
}

/// `psm_init(int *api_verno_major, int *api_verno_minor)`.
pub type psm_init_fn = unsafe extern "C" fn(major: *mut c_int, minor: *mut c_int) -> psm_error_t;
/// `psm_finalize(void)`.
pub type psm_finalize_fn = unsafe extern "C" fn() -> psm_error_t;
/// `psm_error_register_handler(psm_ep_t ep, psm_ep_errhandler_t handler)`; the
/// handler is passed as a pointer-sized value so that
/// [`PSM_ERRHANDLER_NO_HANDLER`] can be expressed.
pub type psm_error_register_handler_fn =
    unsafe extern "C" fn(ep: psm_ep_t, errhandler: *const c_void) -> psm_error_t;
/// `psm_error_defer(psm_error_token_t token)`.
pub type psm_error_defer_fn = unsafe extern "C" fn(token: psm_error_token_t) -> psm_error_t;
/// `const char *psm_error_get_string(psm_error_t error)`.
pub type psm_error_get_string_fn = unsafe extern "C" fn(error: psm_error_t) -> *const c_char;
/// `uint64_t psm_epid_nid(psm_epid_t)`, also the shape of `psm_epid_context`
/// and `psm_epid_port`.
pub type psm_epid_field_fn = unsafe extern "C" fn(epid: psm_epid_t) -> u64;
/// `psm_ep_num_devunits(uint32_t *num_units)`.
pub type psm_ep_num_devunits_fn = unsafe extern "C" fn(num_units: *mut u32) -> psm_error_t;
/// `void psm_uuid_generate(psm_uuid_t out)`.
pub type psm_uuid_generate_fn = unsafe extern "C" fn(uuid_out: *mut u8);
/// `psm_ep_open_opts_get_defaults(struct psm_ep_open_opts *opts)`.
pub type psm_ep_open_opts_get_defaults_fn =
    unsafe extern "C" fn(opts: *mut psm_ep_open_opts) -> psm_error_t;
/// `psm_ep_open(const psm_uuid_t key, const struct psm_ep_open_opts *opts,
/// psm_ep_t *ep, psm_epid_t *epid)`.
pub type psm_ep_open_fn = unsafe extern "C" fn(
    unique_job_key: *const u8,
    opts: *const psm_ep_open_opts,
    ep: *mut psm_ep_t,
    epid: *mut psm_epid_t,
) -> psm_error_t;
/// `psm_ep_epid_share_memory(psm_ep_t ep, psm_epid_t epid, int *result)`.
pub type psm_ep_epid_share_memory_fn =
    unsafe extern "C" fn(ep: psm_ep_t, epid: psm_epid_t, result: *mut c_int) -> psm_error_t;
/// `psm_ep_close(psm_ep_t ep, int mode, int64_t timeout)`.
pub type psm_ep_close_fn =
    unsafe extern "C" fn(ep: psm_ep_t, mode: c_int, timeout: i64) -> psm_error_t;
/// `psm_map_nid_hostname(int num, const uint64_t *nids, const char **hostnames)`.
pub type psm_map_nid_hostname_fn = unsafe extern "C" fn(
    num: c_int,
    nids: *const u64,
    hostnames: *const *const c_char,
) -> psm_error_t;
/// `psm_ep_connect(psm_ep_t ep, int num, const psm_epid_t *epids, const int
/// *mask, psm_error_t *errors, psm_epaddr_t *epaddrs, int64_t timeout)`.
pub type psm_ep_connect_fn = unsafe extern "C" fn(
    ep: psm_ep_t,
    num_of_epid: c_int,
    array_of_epid: *const psm_epid_t,
    array_of_epid_mask: *const c_int,
    array_of_errors: *mut psm_error_t,
    array_of_epaddr: *mut psm_epaddr_t,
    timeout: i64,
) -> psm_error_t;
/// `psm_poll(psm_ep_t ep)`.
pub type psm_poll_fn = unsafe extern "C" fn(ep: psm_ep_t) -> psm_error_t;
/// `void psm_epaddr_setlabel(psm_epaddr_t, const char *)`.
pub type psm_epaddr_setlabel_fn = unsafe extern "C" fn(epaddr: psm_epaddr_t, label: *const c_char);
/// `void psm_epaddr_setctxt(psm_epaddr_t, void *)`.
pub type psm_epaddr_setctxt_fn = unsafe extern "C" fn(epaddr: psm_epaddr_t, ctxt: *mut c_void);
/// `void *psm_epaddr_getctxt(psm_epaddr_t)`.
pub type psm_epaddr_getctxt_fn = unsafe extern "C" fn(epaddr: psm_epaddr_t) -> *mut c_void;
/// `psm_setopt(psm_component_t, const void *obj, int optname, const void
/// *optval, uint64_t optlen)`.
pub type psm_setopt_fn = unsafe extern "C" fn(
    component: psm_component_t,
    component_obj: *const c_void,
    optname: c_int,
    optval: *const c_void,
    optlen: u64,
) -> psm_error_t;
/// `psm_getopt(psm_component_t, const void *obj, int optname, void *optval,
/// uint64_t *optlen)`.
pub type psm_getopt_fn = unsafe extern "C" fn(
    component: psm_component_t,
    component_obj: *const c_void,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut u64,
) -> psm_error_t;
/// `psm_ep_query(int *num, psm_epinfo_t *array)`. The element type depends
/// on the build: [`psm_epinfo_t`] (TrueScale) or [`psm2_epinfo_t`] (compat,
/// 8 bytes longer: passing a `psm_epinfo_t` array there overflows it).
pub type psm_ep_query_fn =
    unsafe extern "C" fn(num_of_epinfo: *mut c_int, array_of_epinfo: *mut c_void) -> psm_error_t;
/// `psm_ep_epid_lookup(psm_epid_t epid, psm_epconn_t *epconn)`.
pub type psm_ep_epid_lookup_fn =
    unsafe extern "C" fn(epid: psm_epid_t, epconn: *mut psm_epconn_t) -> psm_error_t;
/// `psm2_epaddr_to_epid(psm2_epaddr_t epaddr, psm2_epid_t *epid)`: libpsm2
/// only (reachable through the compat build).
pub type psm2_epaddr_to_epid_fn =
    unsafe extern "C" fn(epaddr: psm_epaddr_t, epid: *mut psm_epid_t) -> psm_error_t;
