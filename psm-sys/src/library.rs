//! Loading `libpsm_infinipath.so.1` at run time, detecting which build it is,
//! initializing PSM and finalizing it safely.
//!
//! # Which library
//! [`PsmLibrary::load`] tries, in order: the path in `PSMRAIL_PSM_LIB` (and
//! nothing else, if that variable is set; a malformed value, such as an
//! empty one, is an error, see [`crate::env::psm_lib`]), then the soname
//! `libpsm_infinipath.so.1` (Debian alternatives choose between the builds;
//! with both installed the compat build wins), then the two Debian locations
//! directly. The library is never unloaded: PSM registers `atexit` handlers
//! (the compat build unlinks its `/dev/shm/psm2_shm.*` segment in one), and
//! those must still be mapped when the process exits.
//!
//! # Which build
//! The compat build (`/usr/lib/libpsm2-2/libpsm_infinipath.so.1`) is an 18 KB
//! shim whose `psm_*` functions call the `psm2_*` functions of libpsm2.so.2,
//! a dependency of the shim. `dlsym(handle, "psm2_init")` searches the
//! handle's dependencies, so it finds `psm2_init` exactly when the shim was
//! loaded; the TrueScale build (`/usr/lib/libpsm1/libpsm_infinipath.so.1.16`)
//! has no psm2 symbols. Both builds report API version 1.16 from `psm_init`,
//! so the version cannot tell them apart (measured here).
//!
//! # Initialization
//! [`PsmLibrary::init`] registers `PSM_ERRHANDLER_NO_HANDLER` (errors are
//! returned instead of aborting the process) and calls `psm_init` once. On the
//! compat build without an HFI device `psm_init` returns 8
//! (`PSM_INTERNAL_ERR`), yet `self`/`shm` endpoints open and work; this is
//! accepted and recorded as [`InitStatus::device_missing`].
//!
//! # Shutdown policy (measured on this machine, see `tests/native.rs`)
//! * Process exit without `psm_finalize`, with or without endpoints still
//!   open: exit status 0 on both builds, and the compat build removes its
//!   shared-memory file.
//! * Compat build after `psm_init` returned 8: `psm_finalize` segfaults
//!   (inside libpsm2), whether or not an endpoint was ever opened, closed or
//!   used. [`PsmLibrary::finalize`] therefore skips it.
//! * TrueScale build (`psm_init` returned 0): `psm_finalize` returns 0 after
//!   endpoints were opened, used and closed, and also with an endpoint still
//!   open. [`PsmLibrary::finalize`] calls it once no endpoint of this crate is
//!   open.
//! * Endpoints are closed with one `psm_ep_close` (graceful with a timeout,
//!   or forced; never both: see [`crate::Endpoint::close`]);
//!   `psm_mq_finalize` is not needed (the endpoint close frees the MQ), as
//!   in the C provider. The compat build opens a new endpoint after
//!   a close; the TrueScale build does too, but connecting the new one to
//!   itself aborts the process, so this crate allows one TrueScale endpoint
//!   per process lifetime.

use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::env::EnvError;
use crate::error::{Error, ErrorCode, LoadAttempt, LoadError, PsmError, Result};
use crate::ffi;

/// Environment variable naming the PSM library to load instead of the defaults.
pub const ENV_PSM_LIB: &str = "PSMRAIL_PSM_LIB";
/// The soname of the PSM 1.x library.
pub const PSM_SONAME: &str = "libpsm_infinipath.so.1";
/// Where `libpsm2-2-compat` installs the compat build on Debian.
pub const COMPAT_LIBRARY_PATH: &str = "/usr/lib/libpsm2-2/libpsm_infinipath.so.1";
/// Where `libpsm-infinipath1` installs the TrueScale build on Debian.
pub const TRUESCALE_LIBRARY_PATH: &str = "/usr/lib/libpsm1/libpsm_infinipath.so.1.16";

/// Which implementation of the PSM 1.x API was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PsmBuild {
    /// The original QLogic/Intel TrueScale PSM (`libpsm-infinipath1`).
    TrueScale,
    /// The PSM 1.x API implemented over libpsm2 (`libpsm2-2-compat`).
    Psm2Compat,
}

impl fmt::Display for PsmBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PsmBuild::TrueScale => "TrueScale",
            PsmBuild::Psm2Compat => "psm2-compat",
        })
    }
}

/// Declares the function table: required functions (the load fails without
/// them) and optional ones.
macro_rules! psm_api {
    (
        required { $($(#[$rdoc:meta])* $rname:ident: $rty:ty,)* }
        optional { $($(#[$odoc:meta])* $oname:ident: $oty:ty,)* }
    ) => {
        /// The resolved PSM functions. Raw access: every call is `unsafe` and
        /// follows the C contract of the function of the same name.
        #[derive(Clone, Copy, Debug)]
        pub struct PsmApi {
            $($(#[$rdoc])* pub $rname: $rty,)*
            $($(#[$odoc])* pub $oname: Option<$oty>,)*
        }

        impl PsmApi {
            /// Resolves every symbol; on failure returns the missing required names.
            ///
            /// # Safety
            /// `lib` must be a PSM 1.x library whose symbols have the declared types.
            unsafe fn resolve(lib: &Library) -> std::result::Result<Self, Vec<&'static str>> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the caller guarantees the symbol has this type.
                    let $rname = unsafe { symbol::<$rty>(lib, stringify!($rname)) };
                    if $rname.is_none() {
                        missing.push(stringify!($rname));
                    }
                )*
                $(
                    // SAFETY: the caller guarantees the symbol has this type.
                    let $oname = unsafe { symbol::<$oty>(lib, stringify!($oname)) };
                )*
                let build = || Some(Self { $($rname: $rname?,)* $($oname,)* });
                build().ok_or(missing)
            }
        }
    };
}

psm_api! {
    required {
        /// `psm_init`.
        psm_init: ffi::psm_init_fn,
        /// `psm_finalize`.
        psm_finalize: ffi::psm_finalize_fn,
        /// `psm_error_register_handler`.
        psm_error_register_handler: ffi::psm_error_register_handler_fn,
        /// `psm_error_get_string`.
        psm_error_get_string: ffi::psm_error_get_string_fn,
        /// `psm_ep_open_opts_get_defaults`.
        psm_ep_open_opts_get_defaults: ffi::psm_ep_open_opts_get_defaults_fn,
        /// `psm_ep_open`.
        psm_ep_open: ffi::psm_ep_open_fn,
        /// `psm_ep_close`.
        psm_ep_close: ffi::psm_ep_close_fn,
        /// `psm_ep_connect`.
        psm_ep_connect: ffi::psm_ep_connect_fn,
        /// `psm_poll`.
        psm_poll: ffi::psm_poll_fn,
        /// `psm_epid_nid`.
        psm_epid_nid: ffi::psm_epid_field_fn,
        /// `psm_epid_context`.
        psm_epid_context: ffi::psm_epid_field_fn,
        /// `psm_mq_init`.
        psm_mq_init: ffi::psm_mq_init_fn,
        /// `psm_mq_finalize`.
        psm_mq_finalize: ffi::psm_mq_finalize_fn,
        /// `psm_mq_isend`.
        psm_mq_isend: ffi::psm_mq_isend_fn,
        /// `psm_mq_send`.
        psm_mq_send: ffi::psm_mq_send_fn,
        /// `psm_mq_irecv` (PSM 1.x has no blocking `psm_mq_recv`: use irecv + wait).
        psm_mq_irecv: ffi::psm_mq_irecv_fn,
        /// `psm_mq_ipeek`.
        psm_mq_ipeek: ffi::psm_mq_ipeek_fn,
        /// `psm_mq_test`.
        psm_mq_test: ffi::psm_mq_complete_fn,
        /// `psm_mq_wait`.
        psm_mq_wait: ffi::psm_mq_complete_fn,
        /// `psm_mq_cancel`.
        psm_mq_cancel: ffi::psm_mq_cancel_fn,
        /// `psm_mq_iprobe`.
        psm_mq_iprobe: ffi::psm_mq_iprobe_fn,
        /// `psm_mq_getopt`.
        psm_mq_getopt: ffi::psm_mq_getopt_fn,
        /// `psm_mq_setopt`.
        psm_mq_setopt: ffi::psm_mq_setopt_fn,
        /// `psm_am_register_handlers` (handler type depends on the build).
        psm_am_register_handlers: ffi::psm_am_register_handlers_fn,
        /// `psm_am_request_short`.
        psm_am_request_short: ffi::psm_am_request_short_fn,
        /// `psm_am_reply_short`.
        psm_am_reply_short: ffi::psm_am_reply_short_fn,
        /// `psm_am_get_parameters`.
        psm_am_get_parameters: ffi::psm_am_get_parameters_fn,
    }
    optional {
        /// `psm_epid_port` (deprecated alias of `psm_epid_context`).
        psm_epid_port: ffi::psm_epid_field_fn,
        /// `psm_error_defer`.
        psm_error_defer: ffi::psm_error_defer_fn,
        /// `psm_ep_num_devunits` (crashes on the compat build without a device).
        psm_ep_num_devunits: ffi::psm_ep_num_devunits_fn,
        /// `psm_uuid_generate`.
        psm_uuid_generate: ffi::psm_uuid_generate_fn,
        /// `psm_ep_epid_share_memory`.
        psm_ep_epid_share_memory: ffi::psm_ep_epid_share_memory_fn,
        /// `psm_map_nid_hostname`.
        psm_map_nid_hostname: ffi::psm_map_nid_hostname_fn,
        /// `psm_epaddr_setlabel`.
        psm_epaddr_setlabel: ffi::psm_epaddr_setlabel_fn,
        /// `psm_epaddr_setctxt`.
        psm_epaddr_setctxt: ffi::psm_epaddr_setctxt_fn,
        /// `psm_epaddr_getctxt`.
        psm_epaddr_getctxt: ffi::psm_epaddr_getctxt_fn,
        /// `psm_setopt`.
        psm_setopt: ffi::psm_setopt_fn,
        /// `psm_getopt`.
        psm_getopt: ffi::psm_getopt_fn,
        /// `psm_ep_query`.
        psm_ep_query: ffi::psm_ep_query_fn,
        /// `psm_ep_epid_lookup`.
        psm_ep_epid_lookup: ffi::psm_ep_epid_lookup_fn,
        /// `psm_mq_get_stats`.
        psm_mq_get_stats: ffi::psm_mq_get_stats_fn,
        /// `psm2_init`, resolvable only through the compat build (detection hook).
        psm2_init: ffi::psm2_init_fn,
        /// `psm2_am_get_source`, resolvable only through the compat build: the
        /// source address of an AM request, which psm2 handlers do not receive.
        psm2_am_get_source: ffi::psm2_am_get_source_fn,
        /// `psm2_mq_ipeek2`, resolvable only through the compat build: like
        /// `psm_mq_ipeek`, plus the peer's address in the status.
        psm2_mq_ipeek2: ffi::psm2_mq_ipeek2_fn,
        /// `psm2_mq_test2`, resolvable only through the compat build: like
        /// `psm_mq_test`, plus the peer's address in the status.
        psm2_mq_test2: ffi::psm2_mq_test2_fn,
        /// `psm2_mq_iprobe2`, resolvable only through the compat build: like
        /// `psm_mq_iprobe`, plus the sender's address in the status.
        psm2_mq_iprobe2: ffi::psm2_mq_iprobe2_fn,
        /// `psm2_epaddr_to_epid`, resolvable only through the compat build.
        psm2_epaddr_to_epid: ffi::psm2_epaddr_to_epid_fn,
    }
}

/// Looks up `name` in `lib`.
///
/// # Safety
/// The symbol, if present, must have type `T`.
unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller guarantees the type; the value is copied out and the
    // library is never unloaded, so it stays valid.
    unsafe { lib.get::<T>(name.as_bytes()).ok().map(|s| *s) }
}

/// How the build was recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The build.
    pub build: PsmBuild,
    /// The facts that decided it, in words.
    pub evidence: String,
}

/// Outcome of `psm_init`, as accepted by [`PsmLibrary::init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitStatus {
    /// What `psm_init` returned.
    pub code: ErrorCode,
    /// API version reported back by the library (major, minor).
    pub version: (i32, i32),
    /// The compat build returned `PSM_INTERNAL_ERR` because no HFI device
    /// exists; `self`/`shm` endpoints still work, `psm_finalize` would crash.
    pub device_missing: bool,
}

/// What [`PsmLibrary::finalize`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizeOutcome {
    /// `psm_finalize` was called and returned `PSM_OK`.
    Finalized,
    /// `psm_finalize` was not called, for the given reason; exiting the
    /// process without it is clean.
    Skipped(String),
}

#[derive(Debug, Default)]
struct State {
    open_endpoints: usize,
    /// Whether an endpoint was ever opened (TrueScale cannot reopen).
    ever_opened: bool,
    /// Epids of the open endpoints (registered after `psm_ep_open`).
    epids: Vec<u64>,
    finalized: bool,
}

/// A loaded PSM 1.x library: its function table, its build, and the
/// process-wide PSM state (initialization, open endpoints, finalization).
///
/// PSM is a process-global library: use [`PsmLibrary::get`] unless a test
/// needs a particular file. Instances are leaked on purpose (never unloaded).
pub struct PsmLibrary {
    api: PsmApi,
    detection: Detection,
    requested: String,
    resolved: Option<PathBuf>,
    init: OnceLock<std::result::Result<InitStatus, PsmError>>,
    state: Mutex<State>,
    _library: Library,
}

impl fmt::Debug for PsmLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PsmLibrary")
            .field("build", &self.detection.build)
            .field("requested", &self.requested)
            .field("resolved", &self.resolved)
            .finish_non_exhaustive()
    }
}

static GLOBAL: OnceLock<std::result::Result<&'static PsmLibrary, LoadError>> = OnceLock::new();

impl PsmLibrary {
    /// The process-wide library, loaded on first use with [`PsmLibrary::load`]
    /// (the outcome, success or failure, is cached). A malformed
    /// `PSMRAIL_PSM_LIB` is [`Error::Env`].
    pub fn get() -> Result<&'static PsmLibrary> {
        GLOBAL
            .get_or_init(Self::load)
            .clone()
            .map_err(|e| match e.env {
                Some(env) => Error::Env(env),
                None => Error::Load(e),
            })
    }

    /// The candidates [`PsmLibrary::load`] tries, and whether they come from
    /// `PSMRAIL_PSM_LIB`.
    ///
    /// # Errors
    /// `PSMRAIL_PSM_LIB` is set to a value it does not take
    /// ([`crate::env::psm_lib`]).
    pub fn candidates() -> std::result::Result<(Vec<String>, bool), EnvError> {
        match crate::env::psm_lib(std::env::var_os(ENV_PSM_LIB).as_deref())? {
            Some(path) => Ok((vec![path], true)),
            None => {
                let mut list = vec![PSM_SONAME.to_string(), COMPAT_LIBRARY_PATH.to_string()];
                let mut truescale: Vec<String> = std::fs::read_dir("/usr/lib/libpsm1")
                    .map(|dir| {
                        dir.filter_map(|e| e.ok())
                            .map(|e| e.path())
                            .filter(|p| {
                                p.file_name()
                                    .and_then(|n| n.to_str())
                                    .is_some_and(|n| n.starts_with("libpsm_infinipath.so.1"))
                            })
                            .map(|p| p.to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                truescale.sort();
                if truescale.is_empty() {
                    truescale.push(TRUESCALE_LIBRARY_PATH.to_string());
                }
                list.extend(truescale);
                Ok((list, false))
            }
        }
    }

    /// Loads a new (uncached) instance from the first loadable candidate.
    /// Prefer [`PsmLibrary::get`]: PSM is process-global.
    pub fn load() -> std::result::Result<&'static PsmLibrary, LoadError> {
        let (candidates, from_env) = Self::candidates().map_err(|env| LoadError {
            attempts: Vec::new(),
            from_env: true,
            env: Some(env),
        })?;
        let mut attempts = Vec::new();
        for path in candidates {
            match Self::open(&path) {
                Ok(lib) => return Ok(lib),
                Err(attempt) => attempts.push(attempt),
            }
        }
        Err(LoadError {
            attempts,
            from_env,
            env: None,
        })
    }

    /// Loads the library at `path` (or a soname searched by the dynamic loader).
    pub fn load_from(
        path: impl AsRef<Path>,
    ) -> std::result::Result<&'static PsmLibrary, LoadError> {
        let path = path.as_ref().to_string_lossy().into_owned();
        Self::open(&path).map_err(|attempt| LoadError {
            attempts: vec![attempt],
            from_env: false,
            env: None,
        })
    }

    fn open(path: &str) -> std::result::Result<&'static PsmLibrary, LoadAttempt> {
        let fail = |error: String| LoadAttempt {
            path: path.to_string(),
            error,
        };
        // SAFETY: loading a PSM library runs its initializers, which only set
        // up PSM's own globals. RTLD_LOCAL keeps its symbols out of the global
        // namespace.
        let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
            .map_err(|e| fail(e.to_string()))?;
        // SAFETY: the declared types are the PSM 1.x prototypes.
        let api = unsafe { PsmApi::resolve(&library) }.map_err(|missing| {
            fail(format!(
                "not a PSM 1.x library, missing {}",
                missing.join(", ")
            ))
        })?;
        let resolved = resolved_path(api.psm_init as *const c_void);
        let detection = detect(&api, resolved.as_deref());
        let lib = PsmLibrary {
            api,
            detection,
            requested: path.to_string(),
            resolved,
            init: OnceLock::new(),
            state: Mutex::new(State::default()),
            _library: library,
        };
        Ok(Box::leak(Box::new(lib)))
    }

    /// The raw function table.
    pub fn api(&self) -> &PsmApi {
        &self.api
    }

    /// The build that was loaded.
    pub fn build(&self) -> PsmBuild {
        self.detection.build
    }

    /// The build and the evidence for it.
    pub fn detection(&self) -> &Detection {
        &self.detection
    }

    /// The name or path handed to `dlopen`.
    pub fn requested_path(&self) -> &str {
        &self.requested
    }

    /// The file actually mapped (symlinks and alternatives resolved), if known.
    pub fn resolved_path(&self) -> Option<&Path> {
        self.resolved.as_deref()
    }

    /// `psm_error_get_string(code)`, or a fixed text for codes outside the
    /// PSM range (the library is only asked about `0..PSM_ERROR_LAST`).
    pub fn error_string(&self, code: ErrorCode) -> String {
        if !(0..=ffi::PSM_ERROR_LAST).contains(&code.0) {
            return format!("unknown PSM error {}", code.0);
        }
        // SAFETY: psm_error_get_string accepts any code in the PSM range and
        // returns NULL or a pointer to a static NUL-terminated string.
        let ptr = unsafe { (self.api.psm_error_get_string)(code.0) };
        if ptr.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated, static (see above).
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned()
    }

    /// A [`PsmError`] for `code` returned by `call`, with the library's message.
    pub fn error(&self, code: ffi::psm_error_t, call: &'static str) -> PsmError {
        let code = ErrorCode(code);
        PsmError {
            code,
            call,
            message: self.error_string(code),
            hint: None,
        }
    }

    /// `Ok` for `PSM_OK` and `PSM_OK_NO_PROGRESS`, the [`PsmError`] otherwise.
    pub fn check(
        &self,
        code: ffi::psm_error_t,
        call: &'static str,
    ) -> std::result::Result<(), PsmError> {
        if ErrorCode(code).is_ok() {
            Ok(())
        } else {
            Err(self.error(code, call))
        }
    }

    /// Initializes PSM once for the process (later calls return the first
    /// outcome): errors are routed back to the caller
    /// (`PSM_ERRHANDLER_NO_HANDLER`), then `psm_init(1, 0x10)`.
    pub fn init(&self) -> Result<InitStatus> {
        if self.lock_state().finalized {
            return Err(Error::Finalized);
        }
        self.init
            .get_or_init(|| self.do_init())
            .clone()
            .map_err(Error::Psm)
    }

    /// The outcome of [`PsmLibrary::init`], if it ran.
    pub fn init_status(&self) -> Option<std::result::Result<InitStatus, PsmError>> {
        self.init.get().cloned()
    }

    fn do_init(&self) -> std::result::Result<InitStatus, PsmError> {
        let no_handler = ffi::PSM_ERRHANDLER_NO_HANDLER as *const c_void;
        // SAFETY: a NULL endpoint selects the global handler, the only call
        // allowed before psm_init; the special value is what psm.h defines.
        let rc = unsafe { (self.api.psm_error_register_handler)(std::ptr::null_mut(), no_handler) };
        self.check(rc, "psm_error_register_handler")?;
        let mut major: c_int = ffi::PSM_VERNO_MAJOR;
        let mut minor: c_int = ffi::PSM_VERNO_MINOR;
        // SAFETY: both pointers are valid for the call.
        let rc = unsafe { (self.api.psm_init)(&mut major, &mut minor) };
        let code = ErrorCode(rc);
        let device_missing = self.build() == PsmBuild::Psm2Compat && rc == ffi::PSM_INTERNAL_ERR;
        if code.is_ok() || device_missing {
            Ok(InitStatus {
                code,
                version: (major, minor),
                device_missing,
            })
        } else {
            Err(self.error(rc, "psm_init"))
        }
    }

    /// Calls `psm_finalize` when that is safe (see the module docs), else
    /// skips it and says why. After `Finalized`, PSM cannot be used again in
    /// this process.
    pub fn finalize(&self) -> Result<FinalizeOutcome> {
        let mut state = self.lock_state();
        if state.finalized {
            return Ok(FinalizeOutcome::Skipped("already finalized".into()));
        }
        if state.open_endpoints > 0 {
            return Ok(FinalizeOutcome::Skipped(format!(
                "{} endpoint(s) still open; close them first",
                state.open_endpoints
            )));
        }
        match self.init.get() {
            None => Ok(FinalizeOutcome::Skipped("psm_init was never called".into())),
            Some(Err(_)) => Ok(FinalizeOutcome::Skipped("psm_init failed".into())),
            Some(Ok(status)) if status.device_missing => Ok(FinalizeOutcome::Skipped(
                "compat build initialized without an HFI device (psm_init returned 8): \
                 psm_finalize segfaults inside libpsm2 in that state"
                    .into(),
            )),
            Some(Ok(_)) => {
                // SAFETY: PSM was initialized and no endpoint of ours is open;
                // `finalized` stops every later PSM call made through this crate.
                let rc = unsafe { (self.api.psm_finalize)() };
                state.finalized = true;
                self.check(rc, "psm_finalize")?;
                Ok(FinalizeOutcome::Finalized)
            }
        }
    }

    /// `psm_ep_query`: the (endpoint, epid) pairs PSM reports, using the
    /// element layout of the loaded build (`psm_epinfo_t` is 96 bytes on
    /// TrueScale, `psm2_epinfo_t` 104 bytes on the compat build).
    pub fn ep_query(&self, max: usize) -> Result<Vec<(ffi::psm_ep_t, u64)>> {
        let query = self
            .api
            .psm_ep_query
            .ok_or_else(|| Error::Unsupported("psm_ep_query is not exported".into()))?;
        let mut count = c_int::try_from(max.max(1)).unwrap_or(c_int::MAX);
        let entries: Vec<(ffi::psm_ep_t, u64)> = match self.build() {
            PsmBuild::TrueScale => {
                // SAFETY: psm_epinfo_t is plain data; zero is a valid value.
                let mut buf =
                    vec![unsafe { std::mem::zeroed::<ffi::psm_epinfo_t>() }; count as usize];
                // SAFETY: `buf` holds `count` elements of the layout this build writes.
                let rc = unsafe { query(&mut count, buf.as_mut_ptr() as *mut c_void) };
                self.check(rc, "psm_ep_query")?;
                buf.iter()
                    .take(count.max(0) as usize)
                    .map(|e| (e.ep, e.epid))
                    .collect()
            }
            PsmBuild::Psm2Compat => {
                // SAFETY: psm2_epinfo_t is plain data; zero is a valid value.
                let mut buf =
                    vec![unsafe { std::mem::zeroed::<ffi::psm2_epinfo_t>() }; count as usize];
                // SAFETY: `buf` holds `count` elements of the layout this build writes.
                let rc = unsafe { query(&mut count, buf.as_mut_ptr() as *mut c_void) };
                self.check(rc, "psm_ep_query")?;
                buf.iter()
                    .take(count.max(0) as usize)
                    .map(|e| (e.ep, e.epid))
                    .collect()
            }
        };
        Ok(entries)
    }

    /// Whether [`PsmLibrary::finalize`] called `psm_finalize`.
    pub fn is_finalized(&self) -> bool {
        self.lock_state().finalized
    }

    /// Number of endpoints of this crate currently open on this library.
    pub fn open_endpoints(&self) -> usize {
        self.lock_state().open_endpoints
    }

    /// Reserves an endpoint: refuses after finalize and, on the TrueScale
    /// build, any endpoint after the first. PSM 1.x supports one endpoint per
    /// process; this build "opens" a second one with the same epid, and after
    /// the first is closed a new one opens but `psm_ep_connect` to itself
    /// aborts the process (assertion `epaddr == NULL` in ptl.c: the old self
    /// address was never removed). Both measured here.
    pub(crate) fn reserve_endpoint(&self) -> Result<()> {
        let mut state = self.lock_state();
        if state.finalized {
            return Err(Error::Finalized);
        }
        if self.build() == PsmBuild::TrueScale && state.ever_opened {
            return Err(Error::Unsupported(if state.open_endpoints > 0 {
                "the TrueScale PSM 1.x build supports one endpoint per process".into()
            } else {
                "the TrueScale PSM 1.x build cannot open a second endpoint in a process, even \
                 after closing the first (connecting it to itself aborts in PSM)"
                    .into()
            }));
        }
        state.open_endpoints += 1;
        state.ever_opened = true;
        Ok(())
    }

    /// Records the epid of a newly opened endpoint; `false` if another open
    /// endpoint already has it (psm2 shm-only epids derive from the pid, so
    /// with `PSM2_MULTI_EP=1` and no HFI every endpoint gets the same one).
    pub(crate) fn register_epid(&self, epid: u64) -> bool {
        let mut state = self.lock_state();
        if state.epids.contains(&epid) {
            return false;
        }
        state.epids.push(epid);
        true
    }

    /// Releases a reservation made by [`PsmLibrary::reserve_endpoint`] (and
    /// the epid, if it was registered).
    pub(crate) fn release_endpoint(&self, epid: Option<u64>) {
        let mut state = self.lock_state();
        state.open_endpoints = state.open_endpoints.saturating_sub(1);
        if let Some(epid) = epid {
            if let Some(i) = state.epids.iter().position(|e| *e == epid) {
                state.epids.swap_remove(i);
            }
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The canonical path of the file containing `addr`, via `dladdr`.
fn resolved_path(addr: *const c_void) -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; all-zero is a valid initial value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` is a function inside a loaded library; dladdr only reads it.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let path = PathBuf::from(name);
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

fn detect(api: &PsmApi, resolved: Option<&Path>) -> Detection {
    let file = resolved
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "unknown file".into());
    if api.psm2_init.is_some() {
        let source = if api.psm2_am_get_source.is_some() {
            "psm2_am_get_source is available"
        } else {
            "psm2_am_get_source is NOT available (AM sources will be unknown)"
        };
        Detection {
            build: PsmBuild::Psm2Compat,
            evidence: format!(
                "psm2_init resolves through the library's dependencies (libpsm2.so.2) in {file}; \
                 {source}"
            ),
        }
    } else {
        Detection {
            build: PsmBuild::TrueScale,
            evidence: format!("no psm2_* symbol reachable from {file}: native PSM 1.x"),
        }
    }
}
