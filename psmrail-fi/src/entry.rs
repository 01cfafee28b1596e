//! The C boundary's guard: every entry point libfabric or an application
//! calls runs its body through [`guard`], so that no panic ever unwinds
//! into C. A panic becomes `-FI_EOTHER` and a warning in libfabric's log
//! (`FI_LOG_LEVEL=warn`), and in `tracing` for Rust hosts.

use crate::provider;
use crate::sys;
use psmrail::{Error, ErrorKind};
use std::ffi::{c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A libfabric error number: the negative value a call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Errno(pub(crate) u32);

impl Errno {
    pub(crate) const AGAIN: Errno = Errno(sys::FI_EAGAIN);
    pub(crate) const INVAL: Errno = Errno(sys::FI_EINVAL);
    pub(crate) const NOSYS: Errno = Errno(sys::FI_ENOSYS);
    pub(crate) const NODATA: Errno = Errno(sys::FI_ENODATA);
    pub(crate) const NOMEM: Errno = Errno(sys::FI_ENOMEM);
    pub(crate) const BUSY: Errno = Errno(sys::FI_EBUSY);
    pub(crate) const BADFLAGS: Errno = Errno(sys::FI_EBADFLAGS);
    pub(crate) const OPBADSTATE: Errno = Errno(sys::FI_EOPBADSTATE);
    pub(crate) const OTHER: Errno = Errno(sys::FI_EOTHER);
    pub(crate) const AVAIL: Errno = Errno(sys::FI_EAVAIL);
    pub(crate) const TOOSMALL: Errno = Errno(sys::FI_ETOOSMALL);
    pub(crate) const NOENT: Errno = Errno(sys::FI_ENOENT);
    pub(crate) const MSGSIZE: Errno = Errno(sys::FI_EMSGSIZE);
    pub(crate) const OPNOTSUPP: Errno = Errno(sys::FI_EOPNOTSUPP);
    pub(crate) const TIMEDOUT: Errno = Errno(sys::FI_ETIMEDOUT);

    /// The value a C call returns: `-errno`.
    pub(crate) fn ret(self) -> c_int {
        -(self.0 as c_int)
    }
}

impl From<&Error> for Errno {
    fn from(e: &Error) -> Errno {
        Errno(e.kind().errno() as u32)
    }
}

impl From<Error> for Errno {
    fn from(e: Error) -> Errno {
        // Errors that reach C lose their message: say it in the log.
        if e.kind() != ErrorKind::Again {
            log_info(&format!("{}: {}", e.kind().fi_name(), e));
        }
        Errno::from(&e)
    }
}

/// What a guarded body answers.
pub(crate) type FiResult<T> = Result<T, Errno>;

/// A C return type a guard can make from an error.
pub(crate) trait CRet: Sized {
    fn from_errno(e: Errno) -> Self;
}

impl CRet for c_int {
    fn from_errno(e: Errno) -> c_int {
        e.ret()
    }
}

impl CRet for isize {
    fn from_errno(e: Errno) -> isize {
        -(e.0 as isize)
    }
}

/// Runs `body`; an error is returned as `-errno`, a panic as `-FI_EOTHER`
/// with a log line naming `what`.
pub(crate) fn guard<R: CRet>(what: &str, body: impl FnOnce() -> FiResult<R>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => R::from_errno(e),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            log_warn(&format!(
                "{what}: internal error ({why}); returning -FI_EOTHER"
            ));
            R::from_errno(Errno::OTHER)
        }
    }
}

/// A guard for entry points that return nothing or a pointer: a panic gives
/// `fallback`.
pub(crate) fn guard_value<R>(what: &str, fallback: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            log_warn(&format!("{what}: internal error (a panic)"));
            fallback
        }
    }
}

fn log_at(level: sys::fi_log_level, text: &str) {
    match level {
        sys::FI_LOG_WARN => tracing::warn!(target: "psmrail_fi", "{text}"),
        _ => tracing::info!(target: "psmrail_fi", "{text}"),
    }
    let prov = provider::current();
    if prov.is_null() {
        return;
    }
    // SAFETY: `prov` is this library's provider structure (leaked, never
    // freed); libfabric's log functions only read it.
    let enabled = unsafe { sys::fi_log_enabled(prov, level, sys::FI_LOG_CORE) };
    if enabled == 0 {
        return;
    }
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    // SAFETY: every pointer is a valid NUL-terminated string for the call;
    // the format takes exactly one string argument.
    unsafe {
        sys::fi_log(
            prov,
            level,
            sys::FI_LOG_CORE,
            c"psmrail".as_ptr(),
            0,
            c"%s\n".as_ptr(),
            text.as_ptr(),
        )
    };
}

/// A warning in libfabric's log and in `tracing`.
pub(crate) fn log_warn(text: &str) {
    log_at(sys::FI_LOG_WARN, text);
}

/// An informational line in libfabric's log and in `tracing`.
pub(crate) fn log_info(text: &str) {
    log_at(sys::FI_LOG_INFO, text);
}

/// Runs `f` with `SIGPIPE` blocked on this thread, and takes away a
/// `SIGPIPE` that `f` raised (a write to a peer that has gone, while
/// closing): in a C program `SIGPIPE` still kills the process by default,
/// where a Rust program ignores it. Used around closes, where the soft
/// engine says goodbye to peers that may have exited first.
pub(crate) fn without_sigpipe<R>(f: impl FnOnce() -> R) -> R {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    let mut old = SigSet::empty();
    let blocked =
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&pipe), Some(&mut old))
            .is_ok();
    let was_pending = sigpipe_pending();
    let r = f();
    if blocked {
        if !was_pending && !old.contains(Signal::SIGPIPE) {
            let pending = sigpipe_pending();
            if pending {
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let set = pipe.as_ref() as *const libc::sigset_t;
                // SAFETY: `set` is a valid signal set and `zero` a valid
                // timeout; the info pointer may be null.
                unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &zero) };
            }
        }
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    r
}

/// Whether a `SIGPIPE` is pending for this thread or the process.
fn sigpipe_pending() -> bool {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending fills the set it is given; it is read only when
    // the call succeeded.
    unsafe {
        libc::sigpending(set.as_mut_ptr()) == 0
            && libc::sigismember(set.as_ptr(), libc::SIGPIPE) == 1
    }
}
