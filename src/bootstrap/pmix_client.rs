//! The PMIx client: what a process started by a PMIx server (Open MPI's
//! `mpirun`, which sets `PMIX_RANK`, `PMIX_NAMESPACE` and
//! `PMIX_SERVER_URI*`) asks of it, through the distribution's
//! `libpmix.so.2` loaded at run time (`pmix_ffi.rs`).
//!
//! PMIx speaks a binary protocol of its own over the server's socket, and
//! only its library speaks it; so, unlike PMI-1 and PMI-2, there is no
//! sans-I/O codec here, only a safe face over the library's calls:
//! `PMIx_Init`, `PMIx_Get` of the job's facts (size, local rank, local
//! size, node), `PMIx_Put` / `PMIx_Commit` / `PMIx_Fence` with data
//! collection for an exchange, `PMIx_Get` of a peer's value, and
//! `PMIx_Finalize` on drop.
//!
//! Every wait is bounded by the client's timeout: the fence and the gets
//! hand it to the server (`PMIX_TIMEOUT`, whole seconds, rounded up);
//! `PMIx_Init`, which takes none, runs on a helper thread the caller
//! stops waiting for at the timeout.
//!
//! ```no_run
//! use psmrail::bootstrap::PmixClient;
//! use std::time::Duration;
//!
//! // Started as `mpirun.openmpi -np 2 ./program`.
//! let mut pmix = PmixClient::from_env(Duration::from_secs(30)).expect("PMIX_RANK set")?;
//! pmix.put("ep", "0a1b")?;
//! pmix.commit()?;
//! pmix.fence(true)?;
//! let peer = (pmix.rank() + 1) % pmix.job_size()?;
//! println!("rank {peer} published {}", pmix.get(peer, "ep")?);
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::pmix_ffi::{self as ffi, pmix_info_t, pmix_proc_t, pmix_value_t, PmixApi};
use crate::{Error, ErrorKind, Result};
use std::ffi::{c_int, CStr, CString};
use std::time::Duration;

/// A process's connection to its PMIx server.
#[derive(Debug)]
pub struct PmixClient {
    api: &'static PmixApi,
    me: pmix_proc_t,
    timeout: Duration,
    finalized: bool,
}

impl PmixClient {
    /// Connects to the PMIx server that started this process: `None`
    /// when `PMIX_RANK` is unset (no PMIx server did); `FI_ENODATA`
    /// when libpmix cannot be loaded, `FI_ETIMEDOUT` when `PMIx_Init`
    /// does not return within `timeout`, `FI_EIO` when it fails.
    pub fn from_env(timeout: Duration) -> Option<Result<PmixClient>> {
        std::env::var_os("PMIX_RANK")?;
        Some(Self::init(timeout))
    }

    /// `PMIx_Init`, waiting at most `timeout`; `timeout` bounds every
    /// later call too.
    pub fn init(timeout: Duration) -> Result<PmixClient> {
        let api = ffi::api()?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("psmrail-pmix-init".into())
            .spawn(move || {
                let mut me = pmix_proc_t {
                    nspace: [0; ffi::PMIX_MAX_NSLEN + 1],
                    rank: 0,
                };
                // SAFETY: `me` is a valid pmix_proc_t the call fills in;
                // no info entries (NULL, 0).
                let rc = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
                let _ = tx.send((rc, me));
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::NoMem,
                    format!("PMIx: no thread for PMIx_Init: {e}"),
                )
            })?;
        let (rc, me) = rx.recv_timeout(timeout).map_err(|_| {
            Error::new(
                ErrorKind::TimedOut,
                format!("PMIx: PMIx_Init did not return within {timeout:?} (is the server in PMIX_SERVER_URI* alive?)"),
            )
        })?;
        status(api, rc, "PMIx_Init")?;
        Ok(PmixClient {
            api,
            me,
            timeout,
            finalized: false,
        })
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> usize {
        self.me.rank as usize
    }

    /// The job's namespace.
    pub fn namespace(&self) -> String {
        ffi::from_c_array(&self.me.nspace)
    }

    /// How many processes the job has (`PMIX_JOB_SIZE`).
    pub fn job_size(&self) -> Result<usize> {
        self.number(ffi::PMIX_RANK_WILDCARD, ffi::PMIX_JOB_SIZE)?
            .ok_or_else(|| not_given(ffi::PMIX_JOB_SIZE))
    }

    /// This process's rank on its node (`PMIX_LOCAL_RANK`), if the server
    /// gives one.
    pub fn local_rank(&self) -> Result<Option<usize>> {
        self.number(self.me.rank, ffi::PMIX_LOCAL_RANK)
    }

    /// How many of the job's processes run on this node
    /// (`PMIX_LOCAL_SIZE`), if the server gives it.
    pub fn local_size(&self) -> Result<Option<usize>> {
        self.number(ffi::PMIX_RANK_WILDCARD, ffi::PMIX_LOCAL_SIZE)
    }

    /// The node this process runs on (`PMIX_NODEID`), if the server gives
    /// it.
    pub fn node_id(&self) -> Result<Option<usize>> {
        self.number(self.me.rank, ffi::PMIX_NODEID)
    }

    /// The name of this process's host (`PMIX_HOSTNAME`), if the server
    /// gives it.
    pub fn hostname(&self) -> Result<Option<String>> {
        self.value(self.me.rank, ffi::PMIX_HOSTNAME, text)
    }

    /// Publishes `value` under `key` for every process of the job
    /// (`PMIX_GLOBAL`); others see it after [`commit`](Self::commit) and
    /// a [`fence`](Self::fence) that collects data. `FI_EINVAL` for a key
    /// longer than PMIx takes or text with a NUL.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        let key = c_key(key)?;
        let text = CString::new(value).map_err(|_| {
            Error::new(ErrorKind::Inval, "PMIx: a value must not contain NUL bytes")
        })?;
        let mut v = pmix_value_t {
            type_: ffi::PMIX_STRING,
            data: ffi::pmix_value_data {
                string: text.as_ptr().cast_mut(),
            },
        };
        // SAFETY: `key` and `text` are NUL-terminated and outlive the
        // call; PMIx_Put copies the value and does not keep the pointers.
        let rc = unsafe { (self.api.put)(ffi::PMIX_GLOBAL, key.as_ptr(), &mut v) };
        status(self.api, rc, "PMIx_Put")
    }

    /// Hands this process's puts to the server.
    pub fn commit(&mut self) -> Result<()> {
        // SAFETY: no arguments; the library is initialised.
        let rc = unsafe { (self.api.commit)() };
        status(self.api, rc, "PMIx_Commit")
    }

    /// Waits until every process of the job entered the fence; with
    /// `collect`, every committed value travels to every process with it.
    /// `FI_ETIMEDOUT` when the job does not meet within the timeout,
    /// `FI_EIO` when the server reports another failure (a process of the
    /// job ended).
    pub fn fence(&mut self, collect: bool) -> Result<()> {
        let info = [
            pmix_info_t::flag(ffi::PMIX_COLLECT_DATA, collect),
            pmix_info_t::int(ffi::PMIX_TIMEOUT, self.timeout_secs()),
        ];
        // SAFETY: no procs (NULL, 0: the whole namespace); `info` is an
        // array of initialised entries that outlives the call.
        let rc = unsafe { (self.api.fence)(std::ptr::null(), 0, info.as_ptr(), info.len()) };
        status(self.api, rc, "PMIx_Fence")
    }

    /// The value process `rank` of this job put under `key` and
    /// committed before the last collecting fence; `FI_ENODATA` when it
    /// put none. Only what that fence brought is searched
    /// (`PMIX_OPTIONAL`): a key nobody put is an answer at once, not a
    /// wait for the server to find it.
    pub fn get(&mut self, rank: usize, key: &str) -> Result<String> {
        let r = u32::try_from(rank)
            .ok()
            .filter(|&r| r < ffi::PMIX_RANK_WILDCARD)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Inval,
                    format!("PMIx: rank {rank} is out of range"),
                )
            })?;
        self.value_with(r, key, &[pmix_info_t::flag(ffi::PMIX_OPTIONAL, true)], text)?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NoData,
                    format!("PMIx: rank {rank} published nothing under {key:?}"),
                )
            })
    }

    /// Tells the server this process is done with it (also on drop).
    pub fn finalize(&mut self) -> Result<()> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // SAFETY: no info entries; the library was initialised by `init`.
        let rc = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        status(self.api, rc, "PMIx_Finalize")
    }

    fn timeout_secs(&self) -> c_int {
        let whole = self.timeout.as_secs() + u64::from(self.timeout.subsec_nanos() > 0);
        c_int::try_from(whole.max(1)).unwrap_or(c_int::MAX)
    }

    /// A number the server holds about `rank` (or the job).
    fn number(&self, rank: u32, key: &str) -> Result<Option<usize>> {
        self.value(rank, key, |v| {
            let n = match v.type_ {
                // SAFETY: the type tag says this member is set.
                ffi::PMIX_UINT16 => u64::from(unsafe { v.data.uint16 }),
                // SAFETY: the type tag says this member is set.
                ffi::PMIX_UINT32 | ffi::PMIX_PROC_RANK => u64::from(unsafe { v.data.uint32 }),
                // SAFETY: the type tag says this member is set.
                ffi::PMIX_SIZE => (unsafe { v.data.size }) as u64,
                // SAFETY: the type tag says this member is set.
                ffi::PMIX_INT => u64::try_from(unsafe { v.data.integer }).unwrap_or(u64::MAX),
                other => {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!("PMIx: {key} came as data type {other}, not a number"),
                    ))
                }
            };
            usize::try_from(n)
                .map_err(|_| Error::new(ErrorKind::Io, format!("PMIx: {key}={n} is out of range")))
        })
    }

    /// `PMIx_Get` of `key` for `rank`, read by `read` and released:
    /// `None` when the server has no such value.
    fn value<T>(
        &self,
        rank: u32,
        key: &str,
        read: impl FnOnce(&pmix_value_t) -> Result<T>,
    ) -> Result<Option<T>> {
        self.value_with(rank, key, &[], read)
    }

    /// [`value`](Self::value) with `extra` directives besides the timeout.
    fn value_with<T>(
        &self,
        rank: u32,
        key: &str,
        extra: &[pmix_info_t],
        read: impl FnOnce(&pmix_value_t) -> Result<T>,
    ) -> Result<Option<T>> {
        let key_c = c_key(key)?;
        let proc_ = pmix_proc_t {
            nspace: self.me.nspace,
            rank,
        };
        let mut info = vec![pmix_info_t::int(ffi::PMIX_TIMEOUT, self.timeout_secs())];
        info.extend_from_slice(extra);
        let mut val: *mut pmix_value_t = std::ptr::null_mut();
        // SAFETY: `proc_`, `key_c` and `info` are valid and outlive the
        // call; on success the library stores a value it allocated in
        // `val`, which is released below.
        let rc =
            unsafe { (self.api.get)(&proc_, key_c.as_ptr(), info.as_ptr(), info.len(), &mut val) };
        if rc == ffi::PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        status(self.api, rc, "PMIx_Get")?;
        if val.is_null() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("PMIx: PMIx_Get of {key} gave no value"),
            ));
        }
        // SAFETY: `val` is the value PMIx_Get allocated, initialised.
        let out = read(unsafe { &*val });
        // SAFETY: how `PMIX_VALUE_RELEASE` frees a value PMIx_Get
        // allocated: destruct its contents, then free the struct (malloc'd
        // by the library); `val` is not used again.
        unsafe {
            (self.api.value_destruct)(val);
            libc::free(val.cast());
        }
        out.map(Some)
    }
}

impl Drop for PmixClient {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}

/// A `PMIX_STRING` value as text.
fn text(v: &pmix_value_t) -> Result<String> {
    let ptr = if v.type_ == ffi::PMIX_STRING {
        // SAFETY: the type tag says the string member is set.
        unsafe { v.data.string }
    } else {
        std::ptr::null_mut()
    };
    if ptr.is_null() {
        return Err(Error::new(
            ErrorKind::Io,
            format!("PMIx: a value of data type {} where text was due", v.type_),
        ));
    }
    // SAFETY: a non-NULL PMIX_STRING is NUL-terminated and lives as long
    // as `v`.
    Ok(unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned())
}

fn c_key(key: &str) -> Result<CString> {
    if key.is_empty() || key.len() > ffi::PMIX_MAX_KEYLEN {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "PMIx: key {key:?} must be 1 to {} bytes",
                ffi::PMIX_MAX_KEYLEN
            ),
        ));
    }
    CString::new(key)
        .map_err(|_| Error::new(ErrorKind::Inval, "PMIx: a key must not contain NUL bytes"))
}

fn not_given(key: &str) -> Error {
    Error::new(
        ErrorKind::NoData,
        format!("PMIx: the server gives no {key}"),
    )
}

/// `rc` as a result, with the library's words for it.
fn status(api: &PmixApi, rc: ffi::pmix_status_t, call: &str) -> Result<()> {
    if rc == ffi::PMIX_SUCCESS {
        return Ok(());
    }
    // SAFETY: PMIx_Error_string takes any status and returns a static
    // string (or NULL, checked).
    let words = unsafe { (api.error_string)(rc) };
    let words = if words.is_null() {
        "unknown status".to_string()
    } else {
        // SAFETY: a NUL-terminated static string of the library.
        unsafe { CStr::from_ptr(words) }
            .to_string_lossy()
            .into_owned()
    };
    let kind = match rc {
        ffi::PMIX_ERR_TIMEOUT => ErrorKind::TimedOut,
        ffi::PMIX_ERR_NOT_FOUND => ErrorKind::NoData,
        _ => ErrorKind::Io,
    };
    Err(Error::new(
        kind,
        format!("PMIx: {call} failed ({rc}: {words})"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_pmix_cannot_take_are_refused() {
        assert_eq!(c_key("").unwrap_err().kind(), ErrorKind::Inval);
        assert_eq!(
            c_key(&"k".repeat(512)).unwrap_err().kind(),
            ErrorKind::Inval
        );
        assert_eq!(c_key("a\0b").unwrap_err().kind(), ErrorKind::Inval);
        assert!(c_key(&"k".repeat(511)).is_ok());
    }

    #[test]
    fn without_a_pmix_server_there_is_no_client() {
        if std::env::var_os("PMIX_RANK").is_none() {
            assert!(PmixClient::from_env(Duration::from_secs(1)).is_none());
        }
    }
}
