//! A PSM endpoint: open (after the device preflight), connect, poll, AM, close.
//!
//! [`Endpoint`] is `Send` but not `Sync`: PSM is not thread safe per
//! endpoint, so calls must be serialized by the owner (the native engine
//! serializes every call per endpoint).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::am::{self, AmArg, AmFlags, AmHandler, HandlerIndex, SlotSet};
use crate::device::{Device, DeviceConfig, PSM2_MULTI_EP};
use crate::error::{Error, ErrorCode, PsmError, Result};
use crate::ffi;
use crate::library::{PsmBuild, PsmLibrary};
use crate::mq::{Mq, Psm2Calls};

/// A PSM endpoint id: the globally unique 64-bit name of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Epid(pub u64);

impl fmt::Display for Epid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// A connected remote endpoint address (`psm_epaddr_t`), valid on the local
/// endpoint that connected it, until that endpoint is closed. It remembers
/// its endpoint, and the safe wrappers refuse it anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpAddr {
    raw: ffi::psm_epaddr_t,
    owner: u64,
}

// SAFETY: an EpAddr is an opaque handle value; it is only dereferenced by PSM
// inside calls on its endpoint, which the owner serializes.
unsafe impl Send for EpAddr {}
// SAFETY: as above; sharing the handle value reads nothing.
unsafe impl Sync for EpAddr {}

impl EpAddr {
    /// Wraps a raw address obtained from PSM for `endpoint` (for example from
    /// a raw `psm_ep_connect`).
    ///
    /// # Safety
    /// `raw` must be an address PSM returned for `endpoint`.
    pub unsafe fn from_raw(raw: ffi::psm_epaddr_t, endpoint: &Endpoint) -> Self {
        Self {
            raw,
            owner: endpoint.id,
        }
    }

    pub(crate) fn new(raw: ffi::psm_epaddr_t, owner: u64) -> Self {
        Self { raw, owner }
    }

    /// The raw address.
    pub fn as_raw(self) -> ffi::psm_epaddr_t {
        self.raw
    }

    pub(crate) fn owner(self) -> u64 {
        self.owner
    }
}

static NEXT_ENDPOINT_ID: AtomicU64 = AtomicU64::new(1);

/// CPU affinity handling at open (`PSM_EP_OPEN_AFFINITY_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// Leave the calling thread's affinity alone.
    Skip,
    /// Set it unless already restricted (PSM's default).
    Set,
    /// Set it regardless.
    Force,
}

/// Options for [`Endpoint::open`]; unset fields keep PSM's defaults
/// (`psm_ep_open_opts_get_defaults`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Time allowed to open the device.
    pub timeout: Option<Duration>,
    /// Unit (adapter) number.
    pub unit: Option<i32>,
    /// CPU affinity handling.
    pub affinity: Option<Affinity>,
    /// Shared memory megabytes.
    pub shm_mbytes: Option<i32>,
    /// Preallocated send buffers.
    pub sendbufs_num: Option<i32>,
    /// Network protection key.
    pub network_pkey: Option<u64>,
    /// Port (1..N).
    pub port: Option<i32>,
    /// Outgoing service level.
    pub outsl: Option<i32>,
    /// Service id for path resolution.
    pub service_id: Option<u64>,
    /// Path resolution type (`PSM_PATH_RES_*`).
    pub path_res_type: Option<ffi::psm_path_res_t>,
    /// Preallocated send descriptors.
    pub senddesc_num: Option<i32>,
    /// Immediate data size.
    pub imm_size: Option<i32>,
}

impl OpenOptions {
    /// Writes the set fields over `opts`.
    pub fn apply(&self, opts: &mut ffi::psm_ep_open_opts) {
        if let Some(t) = self.timeout {
            opts.timeout = i64::try_from(t.as_nanos()).unwrap_or(i64::MAX);
        }
        if let Some(v) = self.unit {
            opts.unit = v;
        }
        if let Some(a) = self.affinity {
            opts.affinity = match a {
                Affinity::Skip => ffi::PSM_EP_OPEN_AFFINITY_SKIP,
                Affinity::Set => ffi::PSM_EP_OPEN_AFFINITY_SET,
                Affinity::Force => ffi::PSM_EP_OPEN_AFFINITY_FORCE,
            };
        }
        if let Some(v) = self.shm_mbytes {
            opts.shm_mbytes = v;
        }
        if let Some(v) = self.sendbufs_num {
            opts.sendbufs_num = v;
        }
        if let Some(v) = self.network_pkey {
            opts.network_pkey = v;
        }
        if let Some(v) = self.port {
            opts.port = v;
        }
        if let Some(v) = self.outsl {
            opts.outsl = v;
        }
        if let Some(v) = self.service_id {
            opts.service_id = v;
        }
        if let Some(v) = self.path_res_type {
            opts.path_res_type = v;
        }
        if let Some(v) = self.senddesc_num {
            opts.senddesc_num = v;
        }
        if let Some(v) = self.imm_size {
            opts.imm_size = v;
        }
    }
}

/// The job key used by the C provider by default
/// (`0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF`).
pub const DEFAULT_UUID: ffi::psm_uuid_t = [
    0x0f, 0xff, 0x0f, 0xff, 0, 0, 0, 0, 0, 0, 0x0f, 0xff, 0x0f, 0xff, 0x0f, 0xff,
];

/// AM limits of an endpoint (`psm_am_get_parameters`).
pub type AmParameters = ffi::psm_am_parameters;

/// An open PSM endpoint, with its optional MQ and its AM handlers.
pub struct Endpoint {
    lib: &'static PsmLibrary,
    id: u64,
    ep: ffi::psm_ep_t,
    epid: Epid,
    devices: DeviceConfig,
    mq: ffi::psm_mq_t,
    peers: RefCell<HashMap<Epid, EpAddr>>,
    am_params: Cell<Option<AmParameters>>,
    /// Handler-table entries the close guard holds (compat build).
    guarded: u32,
    slots: SlotSet,
    psm2_mq: Option<Psm2Calls>,
    open: bool,
}

// SAFETY: a PSM endpoint is not bound to the thread that opened it (PSM keeps
// process-global state under its own lock). Endpoint is !Sync (RefCell), so
// calls on one endpoint are never concurrent.
unsafe impl Send for Endpoint {}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("epid", &self.epid)
            .field("build", &self.lib.build())
            .field("devices", &self.devices.devices)
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Opens an endpoint on the process-wide library ([`PsmLibrary::get`]).
    pub fn open(uuid: &ffi::psm_uuid_t, options: &OpenOptions) -> Result<Endpoint> {
        Self::open_with(PsmLibrary::get()?, uuid, options)
    }

    /// Opens an endpoint on `lib`: device preflight (refuses with
    /// [`Error::NoDevice`] where PSM would crash or stall), `psm_init` once,
    /// default options, the given overrides, `psm_ep_open`.
    pub fn open_with(
        lib: &'static PsmLibrary,
        uuid: &ffi::psm_uuid_t,
        options: &OpenOptions,
    ) -> Result<Endpoint> {
        let devices = DeviceConfig::from_env(lib.build())?;
        lib.init()?;
        lib.reserve_endpoint()?;
        let (ep, epid) = match Self::open_reserved(lib, uuid, options) {
            Ok(opened) => opened,
            Err(e) => {
                lib.release_endpoint(None);
                return Err(e);
            }
        };
        if !lib.register_epid(epid.0) {
            // SAFETY: the endpoint was just opened and is not used afterwards.
            unsafe { (lib.api().psm_ep_close)(ep, ffi::PSM_EP_CLOSE_FORCE, 0) };
            lib.release_endpoint(None);
            return Err(Error::Unsupported(format!(
                "PSM gave the new endpoint the epid {epid} of an endpoint already open in this \
                 process (without an HFI device, psm2 derives shm epids from the pid), so peers \
                 could not tell them apart and its sends to that epid would loop back to itself"
            )));
        }
        let mut endpoint = Endpoint {
            lib,
            id: NEXT_ENDPOINT_ID.fetch_add(1, Ordering::Relaxed),
            ep,
            epid,
            devices,
            mq: ptr::null_mut(),
            peers: RefCell::new(HashMap::new()),
            am_params: Cell::new(None),
            guarded: 0,
            slots: SlotSet::default(),
            psm2_mq: Psm2Calls::of(lib),
            open: true,
        };
        if lib.build() == PsmBuild::Psm2Compat {
            // Dropping the endpoint on failure closes it.
            endpoint.fill_close_guard()?;
        }
        Ok(endpoint)
    }

    /// Registers the compat build's close guard (see [`am::close_guard`]):
    /// no-op handlers in the first half of the AM handler table, so that
    /// every handler registered later sits where libpsm2's close does not
    /// overwrite it. [`Endpoint::am_parameters`] counts only what is left.
    fn fill_close_guard(&mut self) -> Result<()> {
        let max = self.raw_am_parameters()?.max_handlers;
        let guard = am::close_guard(max);
        if guard.is_empty() {
            return Ok(());
        }
        let mut indices: Vec<c_int> = vec![-1; guard.len()];
        // SAFETY: `guard` holds `guard.len()` no-op functions of the compat
        // signature; `indices` has room for as many results.
        let rc = unsafe {
            (self.lib.api().psm_am_register_handlers)(
                self.ep,
                guard.as_ptr(),
                guard.len() as c_int,
                indices.as_mut_ptr(),
            )
        };
        self.lib
            .check(rc, "psm_am_register_handlers (close guard)")?;
        self.guarded = guard.len() as u32;
        Ok(())
    }

    fn open_reserved(
        lib: &'static PsmLibrary,
        uuid: &ffi::psm_uuid_t,
        options: &OpenOptions,
    ) -> Result<(ffi::psm_ep_t, Epid)> {
        let api = lib.api();
        let mut opts = ffi::psm_ep_open_opts {
            timeout: -1,
            unit: -1,
            affinity: -1,
            shm_mbytes: -1,
            sendbufs_num: -1,
            network_pkey: ffi::PSM_EP_OPEN_PKEY_DEFAULT,
            port: 0,
            outsl: 0,
            service_id: 0,
            path_res_type: ffi::PSM_PATH_RES_NONE,
            senddesc_num: -1,
            imm_size: -1,
        };
        // SAFETY: `opts` is a valid, writable psm_ep_open_opts.
        let rc = unsafe { (api.psm_ep_open_opts_get_defaults)(&mut opts) };
        lib.check(rc, "psm_ep_open_opts_get_defaults")?;
        options.apply(&mut opts);
        let mut ep: ffi::psm_ep_t = ptr::null_mut();
        let mut epid: ffi::psm_epid_t = 0;
        // SAFETY: the device preflight passed, PSM is initialized, and all
        // pointers are valid for the call (uuid is 16 bytes).
        let rc = unsafe { (api.psm_ep_open)(uuid.as_ptr(), &opts, &mut ep, &mut epid) };
        if let Err(mut e) = lib.check(rc, "psm_ep_open") {
            e.hint = open_hint(lib.build(), e.code);
            return Err(e.into());
        }
        Ok((ep, Epid(epid)))
    }

    /// The library this endpoint belongs to.
    pub fn library(&self) -> &'static PsmLibrary {
        self.lib
    }

    /// The raw endpoint handle.
    pub fn as_raw(&self) -> ffi::psm_ep_t {
        self.ep
    }

    /// This endpoint's id.
    pub fn epid(&self) -> Epid {
        self.epid
    }

    /// The device configuration it was opened with.
    pub fn devices(&self) -> &DeviceConfig {
        &self.devices
    }

    /// `psm_epid_nid` of an epid.
    pub fn epid_nid(&self, epid: Epid) -> u64 {
        // SAFETY: a pure decoding function of the epid value.
        unsafe { (self.lib.api().psm_epid_nid)(epid.0) }
    }

    /// `psm_epid_context` of an epid.
    pub fn epid_context(&self, epid: Epid) -> u64 {
        // SAFETY: a pure decoding function of the epid value.
        unsafe { (self.lib.api().psm_epid_context)(epid.0) }
    }

    /// Connects to `epids`; one result per epid, in order. Already connected
    /// epids (and duplicates) return their known address without asking PSM
    /// again. `timeout` `None` waits until every peer answers or fails.
    ///
    /// On the compat build, an epid whose address-format version (low 3
    /// bits) is newer than the own epid's fails with
    /// `PSM_EPID_INVALID_VERSION` (libpsm2 would abort the process), and an
    /// epid PSM would reach over shared memory whose segment (`/dev/shm/psm2_shm.<uid><epid>N`) does not exist
    /// fails with `PSM_EPID_UNREACHABLE` without calling PSM: libpsm2
    /// cannot open the segment and then segfaults inside `psm_ep_connect`
    /// (measured here: connecting to the epid of an endpoint that was
    /// closed or whose process exited kills the caller). A peer that exits
    /// between this check and PSM's own look is not covered.
    ///
    /// PSM raises connect timeouts below 2 s to 2 s
    /// (`PSMI_MIN_EP_CONNECT_TIMEOUT` in libpsm2).
    pub fn connect(
        &self,
        epids: &[Epid],
        timeout: Option<Duration>,
    ) -> Result<Vec<Result<EpAddr, PsmError>>> {
        let mut failed: HashMap<Epid, PsmError> = HashMap::new();
        let pending: Vec<Epid> = {
            let peers = self.peers.borrow();
            let mut seen = std::collections::HashSet::new();
            epids
                .iter()
                .copied()
                .filter(|e| !peers.contains_key(e) && seen.insert(*e))
                .filter(|e| match self.connect_preflight(*e) {
                    None => true,
                    Some(error) => {
                        failed.insert(*e, error);
                        false
                    }
                })
                .collect()
        };
        if !pending.is_empty() {
            let count = c_int::try_from(pending.len())
                .map_err(|_| Error::InvalidArgument("too many epids in one connect".into()))?;
            let raw_epids: Vec<ffi::psm_epid_t> = pending.iter().map(|e| e.0).collect();
            let mut errors: Vec<ffi::psm_error_t> = vec![ffi::PSM_OK; pending.len()];
            let mut addrs: Vec<ffi::psm_epaddr_t> = vec![ptr::null_mut(); pending.len()];
            let timeout_ns = timeout.map_or(0, |t| {
                i64::try_from(t.as_nanos()).unwrap_or(i64::MAX).max(1)
            });
            // SAFETY: every array holds `count` elements; a NULL mask connects all.
            let rc = unsafe {
                (self.lib.api().psm_ep_connect)(
                    self.ep,
                    count,
                    raw_epids.as_ptr(),
                    ptr::null(),
                    errors.as_mut_ptr(),
                    addrs.as_mut_ptr(),
                    timeout_ns,
                )
            };
            am::resume_handler_panic();
            let mut peers = self.peers.borrow_mut();
            for (i, epid) in pending.iter().enumerate() {
                let code = if rc == ffi::PSM_OK {
                    ffi::PSM_OK
                } else {
                    errors[i]
                };
                let ok = code == ffi::PSM_OK || code == ffi::PSM_EPID_ALREADY_CONNECTED;
                if ok && !addrs[i].is_null() {
                    peers.insert(*epid, EpAddr::new(addrs[i], self.id));
                } else if ok {
                    match self.lookup(*epid) {
                        Some(addr) => {
                            peers.insert(*epid, addr);
                        }
                        None => {
                            let code = if code == ffi::PSM_OK {
                                ffi::PSM_EPID_UNKNOWN
                            } else {
                                code
                            };
                            failed.insert(*epid, self.lib.error(code, "psm_ep_connect"));
                        }
                    }
                } else {
                    let code = if code == ffi::PSM_OK { rc } else { code };
                    let mut error = self.lib.error(code, "psm_ep_connect");
                    if *epid == self.epid && !self.devices.has(Device::SelfLoop) {
                        error.hint = Some(format!(
                            "connecting to the own endpoint needs the self device; {} lacks it",
                            self.devices.variable
                        ));
                    }
                    failed.insert(*epid, error);
                }
            }
        }
        let peers = self.peers.borrow();
        Ok(epids
            .iter()
            .map(|e| match peers.get(e) {
                Some(addr) => Ok(*addr),
                None => Err(failed
                    .get(e)
                    .cloned()
                    .unwrap_or_else(|| self.lib.error(ffi::PSM_EPID_UNKNOWN, "psm_ep_connect"))),
            })
            .collect())
    }

    /// Why `psm_ep_connect` must not see `epid` (it would crash or abort
    /// the process), as the error to report instead.
    fn connect_preflight(&self, epid: Epid) -> Option<PsmError> {
        if let Some(version) = self.unknown_epid_version(epid) {
            let mut error = self
                .lib
                .error(ffi::PSM_EPID_INVALID_VERSION, "psm_ep_connect");
            error.hint = Some(format!(
                "epid {epid} has address format version {version}, newer than this \
                 endpoint's (not called: libpsm2 aborts the process on it)"
            ));
            return Some(error);
        }
        let segment = self.missing_shm_segment(epid)?;
        let mut error = self.lib.error(ffi::PSM_EPID_UNREACHABLE, "psm_ep_connect");
        error.hint = Some(format!(
            "no endpoint with epid {epid} is open on this node: its shared-memory segment \
             {segment} does not exist (not called: libpsm2 crashes connecting to it)"
        ));
        Some(error)
    }

    /// The address-format version of `epid` (its low 3 bits) if it is newer
    /// than the own epid's, on the compat build: `psm2_ep_connect` aborts the
    /// process ("Unknown version of EPID") on such an epid.
    fn unknown_epid_version(&self, epid: Epid) -> Option<u64> {
        let version = epid.0 & 0x7;
        (self.lib.build() == PsmBuild::Psm2Compat && version > self.epid.0 & 0x7).then_some(version)
    }

    /// The shared-memory segment PSM would open to reach `epid`, if that is
    /// how the compat build reaches it and no such segment exists.
    fn missing_shm_segment(&self, epid: Epid) -> Option<String> {
        if self.lib.build() != PsmBuild::Psm2Compat
            || epid == self.epid
            || !self.devices.has(Device::Shm)
        {
            return None;
        }
        if let Some(share) = self.lib.api().psm_ep_epid_share_memory {
            let mut result: c_int = 1;
            // SAFETY: the endpoint is open; `result` is a valid output.
            let rc = unsafe { share(self.ep, epid.0, &mut result) };
            if rc == ffi::PSM_OK && result == 0 {
                return None; // another node: reached through the adapter
            }
        }
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let prefix = format!("psm2_shm.{uid}{:016x}", epid.0);
        let found = std::fs::read_dir("/dev/shm").ok().is_some_and(|dir| {
            dir.filter_map(|e| e.ok()).any(|entry| {
                use std::os::unix::fs::MetadataExt;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    return false;
                };
                name.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
                }) && entry.metadata().is_ok_and(|m| m.uid() == uid)
            })
        });
        (!found).then(|| format!("/dev/shm/{prefix}0"))
    }

    /// The epid of a peer address: from the connect table, else (compat
    /// build) `psm2_epaddr_to_epid`, which also knows peers that connected
    /// to this endpoint without being connected back.
    pub fn epaddr_epid(&self, addr: EpAddr) -> Option<Epid> {
        if addr.owner() != self.id {
            return None;
        }
        if let Some((epid, _)) = self.peers.borrow().iter().find(|(_, a)| **a == addr) {
            return Some(*epid);
        }
        if self.lib.build() != PsmBuild::Psm2Compat {
            return None;
        }
        let to_epid = self.lib.api().psm2_epaddr_to_epid?;
        let mut epid: ffi::psm_epid_t = 0;
        // SAFETY: `addr` is an address PSM handed to this open endpoint
        // (checked by owner); `epid` is a valid output.
        let rc = unsafe { to_epid(addr.as_raw(), &mut epid) };
        (rc == ffi::PSM_OK && epid != 0).then_some(Epid(epid))
    }

    fn lookup(&self, epid: Epid) -> Option<EpAddr> {
        let lookup = self.lib.api().psm_ep_epid_lookup?;
        let mut conn = ffi::psm_epconn_t {
            addr: ptr::null_mut(),
            ep: ptr::null_mut(),
            mq: ptr::null_mut(),
        };
        // SAFETY: `conn` is a valid output location.
        let rc = unsafe { lookup(epid.0, &mut conn) };
        (rc == ffi::PSM_OK && !conn.addr.is_null() && conn.ep == self.ep)
            .then_some(EpAddr::new(conn.addr, self.id))
    }

    /// The address of a peer connected earlier.
    pub fn peer(&self, epid: Epid) -> Option<EpAddr> {
        self.peers.borrow().get(&epid).copied()
    }

    /// `psm_poll`: `Ok(true)` if something progressed, `Ok(false)` if not.
    /// AM handlers may run inside.
    pub fn poll(&self) -> Result<bool> {
        // SAFETY: the endpoint is open.
        let rc = unsafe { (self.lib.api().psm_poll)(self.ep) };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_poll")?;
        Ok(rc == ffi::PSM_OK)
    }

    /// Creates the endpoint's matched queue (`psm_mq_init`), once.
    /// [`ffi::PSM_MQ_ORDERMASK_ALL`] is what the C provider used.
    pub fn init_mq(&mut self, tag_order_mask: u64) -> Result<()> {
        if !self.mq.is_null() {
            return Err(Error::InvalidArgument(
                "the MQ of this endpoint is already initialized".into(),
            ));
        }
        let mut mq: ffi::psm_mq_t = ptr::null_mut();
        // SAFETY: the endpoint is open; no options are passed.
        let rc = unsafe {
            (self.lib.api().psm_mq_init)(self.ep, tag_order_mask, ptr::null(), 0, &mut mq)
        };
        self.lib.check(rc, "psm_mq_init")?;
        self.mq = mq;
        Ok(())
    }

    /// The matched queue, once [`Endpoint::init_mq`] succeeded.
    pub fn mq(&self) -> Result<Mq<'_>> {
        if self.mq.is_null() {
            return Err(Error::InvalidArgument("call init_mq first".into()));
        }
        Ok(Mq::new(self.lib, self.ep, self.mq, self.id, self.psm2_mq))
    }

    /// AM limits (`psm_am_get_parameters`); cached after the first call.
    /// The handler count is what is left for this crate's callers: on the
    /// compat build, PSM's less the close guard's entries.
    pub fn am_parameters(&self) -> Result<AmParameters> {
        if let Some(p) = self.am_params.get() {
            return Ok(p);
        }
        let mut params = self.raw_am_parameters()?;
        params.max_handlers = params.max_handlers.saturating_sub(self.guarded);
        self.am_params.set(Some(params));
        Ok(params)
    }

    fn raw_am_parameters(&self) -> Result<AmParameters> {
        let mut params = AmParameters::default();
        let mut out_size: usize = 0;
        // SAFETY: `params` is writable for its size; out_size is a valid output.
        let rc = unsafe {
            (self.lib.api().psm_am_get_parameters)(
                self.ep,
                &mut params,
                std::mem::size_of::<AmParameters>(),
                &mut out_size,
            )
        };
        self.lib.check(rc, "psm_am_get_parameters")?;
        Ok(params)
    }

    /// Registers Rust AM handlers; returns their indices, in order. The
    /// trampolines matching the loaded build are what PSM sees. See
    /// [`crate::am`] for what handlers may do.
    pub fn register_am_handlers(&mut self, handlers: Vec<AmHandler>) -> Result<Vec<HandlerIndex>> {
        let count = handlers.len();
        if count == 0 {
            return Ok(Vec::new());
        }
        let max = self.am_parameters()?.max_handlers as usize;
        if count > max {
            return Err(Error::InvalidArgument(format!(
                "{count} AM handlers, PSM allows {max}"
            )));
        }
        let pointers = self.slots.claim(self.lib, self.id, handlers)?;
        let mut indices: Vec<c_int> = vec![-1; count];
        // SAFETY: `pointers` holds `count` trampolines of the signature the
        // loaded build calls; `indices` has room for `count` results.
        let rc = unsafe {
            (self.lib.api().psm_am_register_handlers)(
                self.ep,
                pointers.as_ptr(),
                count as c_int,
                indices.as_mut_ptr(),
            )
        };
        if let Err(e) = self.lib.check(rc, "psm_am_register_handlers") {
            self.slots.release_last(count);
            return Err(e.into());
        }
        Ok(indices
            .into_iter()
            .map(|i| HandlerIndex(i as u32))
            .collect())
    }

    /// Sends an AM request with `args` and a copy of `payload` to `dest`
    /// (`psm_am_request_short`, no completion callback). Refused where the
    /// build would crash: to the own endpoint on TrueScale (its `self` device
    /// has no AM) or without the `self` device.
    pub fn am_request(
        &self,
        dest: EpAddr,
        handler: HandlerIndex,
        args: &[AmArg],
        payload: &[u8],
        flags: AmFlags,
    ) -> Result<()> {
        let params = self.am_parameters()?;
        if args.len() > params.max_nargs as usize {
            return Err(Error::InvalidArgument(format!(
                "{} AM arguments, PSM allows {}",
                args.len(),
                params.max_nargs
            )));
        }
        if payload.len() > params.max_request_short as usize {
            return Err(Error::InvalidArgument(format!(
                "AM payload of {} bytes, PSM allows {}",
                payload.len(),
                params.max_request_short
            )));
        }
        self.check_am_dest(dest)?;
        let mut local = am::copy_args(args)?;
        // SAFETY: `dest` was connected on this open endpoint; args copied to
        // a local array; without PSM_AM_FLAG_ASYNC PSM copies the payload
        // before returning; no completion callback.
        let rc = unsafe {
            (self.lib.api().psm_am_request_short)(
                dest.as_raw(),
                handler.0,
                local.as_mut_ptr(),
                args.len() as c_int,
                payload.as_ptr() as *mut c_void,
                payload.len(),
                flags.bits(),
                None,
                ptr::null_mut(),
            )
        };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_am_request_short")?;
        Ok(())
    }

    /// `psm_am_request_short` with every C option (async payload, completion
    /// callback), after the same crash guards as [`Endpoint::am_request`].
    ///
    /// # Safety
    /// As the C function: `dest` was connected on this endpoint; `args` holds
    /// `nargs` arguments; `src` holds `len` bytes, and with
    /// `PSM_AM_FLAG_ASYNC` stays valid until local completion; the completion
    /// callback is sound to call with `completion_ctxt`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn am_request_raw(
        &self,
        dest: EpAddr,
        handler: HandlerIndex,
        args: *mut AmArg,
        nargs: c_int,
        src: *mut c_void,
        len: usize,
        flags: c_int,
        completion_fn: ffi::psm_am_completion_fn_t,
        completion_ctxt: *mut c_void,
    ) -> Result<()> {
        self.check_am_dest(dest)?;
        // SAFETY: forwarded under the caller's contract.
        let rc = unsafe {
            (self.lib.api().psm_am_request_short)(
                dest.as_raw(),
                handler.0,
                args,
                nargs,
                src,
                len,
                flags,
                completion_fn,
                completion_ctxt,
            )
        };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_am_request_short")?;
        Ok(())
    }

    pub(crate) fn check_owner(owner: u64, dest: EpAddr) -> Result<()> {
        if dest.owner() != owner {
            return Err(Error::InvalidArgument(
                "the EpAddr was connected on another endpoint".into(),
            ));
        }
        Ok(())
    }

    fn check_am_dest(&self, dest: EpAddr) -> Result<()> {
        Self::check_owner(self.id, dest)?;
        let to_self = self.peers.borrow().get(&self.epid) == Some(&dest);
        if to_self && self.lib.build() == PsmBuild::TrueScale {
            return Err(Error::Unsupported(
                "AM to the own endpoint: the TrueScale build's self device has no AM \
                 (the call would jump to a NULL function pointer); handle loopback in the caller"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Closes the endpoint with one `psm_ep_close`: graceful within
    /// `graceful` (if given and non-zero), else forced (`None` or zero, as
    /// `FI_PSM_TIMEOUT=0`). The MQ and AM handlers go with it.
    ///
    /// The endpoint is closed whatever the call returns, and it is never
    /// closed twice: libpsm2 frees the endpoint on every path past its own
    /// validity checks, a graceful close that timed out included, so the
    /// "graceful, then forced if that failed" sequence of the C provider
    /// would hand freed memory to the second call (read in libpsm2's
    /// `psm2_ep_close`). Both modes wait for connected peers to disconnect:
    /// libpsm2 bounds that wait to between 1 s and 2 s
    /// (`PSMI_MIN_EP_CLOSE_TIMEOUT`, `PSMI_MAX_EP_CLOSE_TIMEOUT`; a forced
    /// close waits up to the maximum).
    pub fn close(mut self, graceful: Option<Duration>) -> Result<()> {
        self.close_inner(graceful)
    }

    fn close_inner(&mut self, graceful: Option<Duration>) -> Result<()> {
        if !self.open {
            return Ok(());
        }
        let api = self.lib.api();
        let (mode, ns) = match graceful.filter(|t| !t.is_zero()) {
            Some(t) => (
                ffi::PSM_EP_CLOSE_GRACEFUL,
                i64::try_from(t.as_nanos()).unwrap_or(i64::MAX),
            ),
            None => (ffi::PSM_EP_CLOSE_FORCE, 0),
        };
        // SAFETY: the endpoint is open and is not used after this call,
        // whatever it returns (see above).
        let rc = unsafe { (api.psm_ep_close)(self.ep, mode, ns) };
        let result = self.lib.check(rc, "psm_ep_close").map_err(Error::from);
        self.open = false;
        self.mq = ptr::null_mut();
        self.peers.borrow_mut().clear();
        self.slots = SlotSet::default();
        self.lib.release_endpoint(Some(self.epid.0));
        result
    }
}

impl Drop for Endpoint {
    /// Forces the endpoint closed if [`Endpoint::close`] was not called.
    fn drop(&mut self) {
        let _ = self.close_inner(None);
    }
}

fn open_hint(build: PsmBuild, code: ErrorCode) -> Option<String> {
    match (build, code) {
        (PsmBuild::Psm2Compat, ErrorCode::TOO_MANY_ENDPOINTS) => {
            let set = std::env::var(PSM2_MULTI_EP).ok();
            Some(match set {
                Some(v) => format!(
                    "{PSM2_MULTI_EP}={v:?} is set but PSM still refused another endpoint in this process"
                ),
                None => format!(
                    "the compat build opens one endpoint per process unless {PSM2_MULTI_EP}=1 is set \
                     (set it before the first psm_ep_open)"
                ),
            })
        }
        (_, ErrorCode::EP_NO_DEVICE) => {
            Some("no PSM device; check the device list variable".into())
        }
        _ => None,
    }
}
