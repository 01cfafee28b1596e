//! Safe active-message (AM) handlers over both PSM builds.
//!
//! PSM handlers are plain C function pointers without user data, and the two
//! builds call them with different signatures (see [`crate::ffi::am`]). This
//! module keeps a process-wide table of [`MAX_HANDLERS`] slots. Each slot has
//! two `extern "C"` trampolines, one per signature; registering a Rust closure
//! claims a free slot and hands PSM the trampoline matching the loaded build.
//! The trampoline finds the closure in the slot and calls it with an
//! [`AmToken`], the arguments and the payload, so the engine never sees the
//! ABI difference.
//!
//! # Rules for handlers (PSM's)
//! * Handlers run **inside** PSM calls (`psm_poll`, MQ test/wait, AM requests
//!   ...), on the thread making that call, while PSM holds its own locks.
//! * A handler must **not** issue AM requests or any other PSM call on the
//!   endpoint; it may reply once, through [`AmToken::reply`], and only to a
//!   request (not from a reply handler, and not when the request was sent
//!   with `PSM_AM_FLAG_NOREPLY`). Queue follow-up work and do it after the
//!   PSM call returns, as the C provider did.
//! * The payload and argument slices are only valid during the call.
//! * A panic in a handler is caught at the C boundary (unwinding through C
//!   is undefined) and re-raised when the PSM call that ran the handler
//!   returns through this crate's wrappers (callers of the raw API call
//!   [`resume_handler_panic`]). Only the first pending panic is kept.

use std::any::Any;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

use crate::endpoint::EpAddr;
use crate::error::{Error, Result};
use crate::ffi::{self, psm_am_token_t, psm_amarg_t, psm_epaddr_t};
use crate::library::{PsmBuild, PsmLibrary};

/// One 64-bit AM argument (the C `psm_amarg_t`).
pub type AmArg = psm_amarg_t;

/// Number of handler slots shared by all endpoints of the process.
pub const MAX_HANDLERS: usize = 64;

/// Most arguments this crate passes in one request or reply (PSM allows 8 on
/// TrueScale and 10 on the compat build; the endpoint checks the real limit).
pub const MAX_ARGS: usize = 16;

/// A Rust AM handler: called with the token (to reply), the arguments and
/// the payload.
pub type AmHandler = Box<dyn Fn(&AmToken<'_>, &[AmArg], &[u8]) + Send + Sync + 'static>;

/// Index of a registered handler on one endpoint, as returned by PSM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerIndex(pub u32);

/// Options for an AM request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AmFlags {
    /// The target handler will not reply (`PSM_AM_FLAG_NOREPLY`).
    pub no_reply: bool,
}

impl AmFlags {
    pub(crate) fn bits(self) -> c_int {
        if self.no_reply {
            ffi::PSM_AM_FLAG_NOREPLY
        } else {
            ffi::PSM_AM_FLAG_NONE
        }
    }
}

/// The request being handled, handed to an [`AmHandler`]. Valid only during
/// the handler call.
#[derive(Debug)]
pub struct AmToken<'a> {
    raw: psm_am_token_t,
    epaddr: psm_epaddr_t,
    lib: &'static PsmLibrary,
    owner: u64,
    replied: Cell<bool>,
    _call: PhantomData<&'a mut ()>,
}

impl AmToken<'_> {
    /// The raw PSM token.
    pub fn raw(&self) -> psm_am_token_t {
        self.raw
    }

    /// Address of the endpoint that sent the request or reply: the `epaddr`
    /// argument on TrueScale, `psm2_am_get_source` on the compat build.
    pub fn source(&self) -> Option<EpAddr> {
        if !self.epaddr.is_null() {
            return Some(EpAddr::new(self.epaddr, self.owner));
        }
        let get_source = self.lib.api().psm2_am_get_source?;
        let mut out: psm_epaddr_t = ptr::null_mut();
        // SAFETY: the token is live for the duration of the handler call and
        // `out` is a valid output location.
        let rc = unsafe { get_source(self.raw, &mut out) };
        (rc == ffi::PSM_OK && !out.is_null()).then(|| EpAddr::new(out, self.owner))
    }

    /// Replies to the request with `args` and a copy of `payload`
    /// (`psm_am_reply_short`, no completion callback). At most once per
    /// request; never from a reply handler.
    pub fn reply(&self, handler: HandlerIndex, args: &[AmArg], payload: &[u8]) -> Result<()> {
        if self.replied.get() {
            return Err(Error::InvalidArgument(
                "an AM request may be replied to only once".into(),
            ));
        }
        let mut local = copy_args(args)?;
        // SAFETY: token live during the handler; args copied to a local array
        // PSM may read; without PSM_AM_FLAG_ASYNC PSM copies the payload
        // before returning; no completion callback.
        let rc = unsafe {
            (self.lib.api().psm_am_reply_short)(
                self.raw,
                handler.0,
                local.as_mut_ptr(),
                args.len() as c_int,
                payload.as_ptr() as *mut c_void,
                payload.len(),
                ffi::PSM_AM_FLAG_NONE,
                None,
                ptr::null_mut(),
            )
        };
        self.lib.check(rc, "psm_am_reply_short")?;
        self.replied.set(true);
        Ok(())
    }
}

/// Copies `args` into a fixed array PSM can take a `*mut` to.
pub(crate) fn copy_args(args: &[AmArg]) -> Result<[AmArg; MAX_ARGS]> {
    if args.len() > MAX_ARGS {
        return Err(Error::InvalidArgument(format!(
            "{} AM arguments, at most {MAX_ARGS} supported",
            args.len()
        )));
    }
    let mut local = [AmArg::default(); MAX_ARGS];
    local[..args.len()].copy_from_slice(args);
    Ok(local)
}

struct SlotData {
    handler: AmHandler,
    lib: &'static PsmLibrary,
    owner: u64,
}

static SLOTS: [AtomicPtr<SlotData>; MAX_HANDLERS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_HANDLERS];

static PANICKED: AtomicBool = AtomicBool::new(false);
static PANIC_PAYLOAD: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);

/// Re-raises a panic caught in a handler, if any. Called by this crate's
/// wrappers after PSM calls that may run handlers; callers of the raw API
/// may call it themselves.
#[inline]
pub fn resume_handler_panic() {
    if PANICKED.load(Ordering::Acquire) {
        let payload = PANIC_PAYLOAD
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        PANICKED.store(false, Ordering::Release);
        if let Some(payload) = payload {
            resume_unwind(payload);
        }
    }
}

/// Common body of all trampolines.
///
/// # Safety
/// Called by PSM with the arguments of an AM handler call.
unsafe fn dispatch(
    slot: usize,
    token: psm_am_token_t,
    epaddr: psm_epaddr_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: u32,
) -> c_int {
    let data = SLOTS[slot].load(Ordering::Acquire);
    if data.is_null() {
        return 0;
    }
    // SAFETY: a non-null slot points to a SlotData that stays alive until the
    // endpoint owning the slot is closed, after which PSM no longer calls it.
    let data = unsafe { &*data };
    let args: &[AmArg] = if args.is_null() || nargs <= 0 {
        &[]
    } else {
        // SAFETY: PSM passes `nargs` arguments at `args`, valid for the call.
        unsafe { std::slice::from_raw_parts(args, nargs as usize) }
    };
    let payload: &[u8] = if src.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: PSM passes `len` payload bytes at `src`, valid for the call.
        unsafe { std::slice::from_raw_parts(src as *const u8, len as usize) }
    };
    let am_token = AmToken {
        raw: token,
        epaddr,
        lib: data.lib,
        owner: data.owner,
        replied: Cell::new(false),
        _call: PhantomData,
    };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| {
        (data.handler)(&am_token, args, payload)
    })) {
        let mut stored = PANIC_PAYLOAD.lock().unwrap_or_else(|p| p.into_inner());
        if stored.is_none() {
            *stored = Some(payload);
        }
        PANICKED.store(true, Ordering::Release);
    }
    0
}

/// Trampoline with the TrueScale signature for slot `I`.
unsafe extern "C" fn trampoline_psm1<const I: usize>(
    token: psm_am_token_t,
    epaddr: psm_epaddr_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: u32,
) -> c_int {
    // SAFETY: forwarded unchanged from PSM.
    unsafe { dispatch(I, token, epaddr, args, nargs, src, len) }
}

/// Trampoline with the psm2 (compat) signature for slot `I`.
unsafe extern "C" fn trampoline_psm2<const I: usize>(
    token: psm_am_token_t,
    args: *mut psm_amarg_t,
    nargs: c_int,
    src: *mut c_void,
    len: u32,
) -> c_int {
    // SAFETY: forwarded unchanged from PSM; this signature has no epaddr.
    unsafe { dispatch(I, token, ptr::null_mut(), args, nargs, src, len) }
}

macro_rules! trampolines {
    ($($i:literal)*) => {
        static PSM1_TRAMPOLINES: [ffi::psm_am_handler_fn_t; MAX_HANDLERS] =
            [$(trampoline_psm1::<$i>,)*];
        static PSM2_TRAMPOLINES: [ffi::psm2_am_handler_fn_t; MAX_HANDLERS] =
            [$(trampoline_psm2::<$i>,)*];
    };
}

trampolines!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
);

/// Entries of a compat endpoint's handler table that [`close_guard`] fills
/// before any real handler is registered.
pub(crate) const CLOSE_GUARD_ENTRIES: usize = 128;

/// What a guard entry runs if a message ever names one: nothing.
unsafe extern "C" fn guard_psm2(
    _token: psm_am_token_t,
    _args: *mut psm_amarg_t,
    _nargs: c_int,
    _src: *mut c_void,
    _len: u32,
) -> c_int {
    0
}

/// The guard handlers for a compat endpoint whose PSM allows
/// `max_handlers`: how many entries to fill, and the pointers to register.
///
/// libpsm2 (11.2) frees an endpoint's AM handler table at the start of
/// `psm2_ep_close` and then, disconnecting from its peers, keeps polling
/// shared memory: an AM request a peer sends during the close is
/// dispatched through the freed table. glibc writes its free-list links
/// over the first entries of a freed block, and the small allocations
/// the close makes next are carved from its start, so the entries the
/// first registrations get (0, 1, ...) hold garbage by then and the
/// process jumps to it. Filling the first half of the table with no-op
/// handlers puts every real handler in the second half, which the close
/// leaves as it was: a late AM then runs its real handler (whose data
/// lives until the close returns). Peers agree on indices because every
/// endpoint registers the same guard first.
pub(crate) fn close_guard(max_handlers: u32) -> Vec<ffi::psm_am_handler_ptr> {
    let entries = CLOSE_GUARD_ENTRIES.min(max_handlers as usize / 2);
    vec![guard_psm2 as ffi::psm_am_handler_ptr; entries]
}

/// Handler slots claimed by one endpoint; released when dropped (after the
/// endpoint is closed).
#[derive(Default)]
pub(crate) struct SlotSet {
    slots: Vec<usize>,
}

impl SlotSet {
    /// Claims one slot per handler and returns the C pointers to register
    /// for `lib`'s build. On failure nothing stays claimed.
    pub(crate) fn claim(
        &mut self,
        lib: &'static PsmLibrary,
        owner: u64,
        handlers: Vec<AmHandler>,
    ) -> Result<Vec<ffi::psm_am_handler_ptr>> {
        let mut claimed = Vec::with_capacity(handlers.len());
        for handler in handlers {
            let data = Box::into_raw(Box::new(SlotData {
                handler,
                lib,
                owner,
            }));
            let slot = SLOTS.iter().position(|s| {
                s.compare_exchange(ptr::null_mut(), data, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            });
            match slot {
                Some(slot) => claimed.push(slot),
                None => {
                    // SAFETY: `data` was never published; we still own it.
                    drop(unsafe { Box::from_raw(data) });
                    for slot in claimed {
                        release(slot);
                    }
                    return Err(Error::Unsupported(format!(
                        "all {MAX_HANDLERS} AM handler slots of this process are in use"
                    )));
                }
            }
        }
        let pointers = claimed
            .iter()
            .map(|&slot| match lib.build() {
                PsmBuild::TrueScale => PSM1_TRAMPOLINES[slot] as ffi::psm_am_handler_ptr,
                PsmBuild::Psm2Compat => PSM2_TRAMPOLINES[slot] as ffi::psm_am_handler_ptr,
            })
            .collect();
        self.slots.extend(claimed);
        Ok(pointers)
    }

    /// Releases the last `count` claimed slots (registration failed).
    pub(crate) fn release_last(&mut self, count: usize) {
        let keep = self.slots.len().saturating_sub(count);
        for slot in self.slots.drain(keep..) {
            release(slot);
        }
    }
}

impl Drop for SlotSet {
    fn drop(&mut self) {
        for slot in self.slots.drain(..) {
            release(slot);
        }
    }
}

fn release(slot: usize) {
    let data = SLOTS[slot].swap(ptr::null_mut(), Ordering::AcqRel);
    if !data.is_null() {
        // SAFETY: the pointer came from Box::into_raw in `claim`, and the
        // slot's endpoint is closed (or never registered it), so no
        // trampoline can be using it.
        drop(unsafe { Box::from_raw(data) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amarg_accessors_match_c_layout() {
        let a = AmArg::from_u32(0x1111_2222, 0x3333_4444);
        assert_eq!(a.u32w0(), 0x1111_2222);
        assert_eq!(a.u32w1(), 0x3333_4444);
        let b = AmArg::from_u16([1, 2, 3, 4]);
        assert_eq!([b.u16w(0), b.u16w(1), b.u16w(2), b.u16w(3)], [1, 2, 3, 4]);
        #[cfg(target_endian = "little")]
        {
            assert_eq!(a.u64(), 0x1111_2222_3333_4444);
            assert_eq!(b.u64(), 0x0001_0002_0003_0004);
        }
    }

    #[test]
    fn trampoline_tables_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..MAX_HANDLERS {
            assert!(seen.insert(PSM1_TRAMPOLINES[i] as usize));
            assert!(seen.insert(PSM2_TRAMPOLINES[i] as usize));
        }
    }

    /// Calls both trampolines of a slot directly, as PSM would, and checks
    /// what the closure receives (the library is only needed as a reference;
    /// nothing is called in it).
    #[test]
    fn trampolines_forward_both_signatures() {
        let lib = match PsmLibrary::load() {
            Ok(lib) => lib,
            Err(e) => {
                eprintln!("SKIPPED: {e}");
                return;
            }
        };
        type Seen = Vec<(Vec<u64>, Vec<u8>, Option<usize>)>;
        let seen: std::sync::Arc<Mutex<Seen>> = Default::default();
        let sink = seen.clone();
        let handler: AmHandler = Box::new(move |token, args, payload| {
            let source = (!token.epaddr.is_null()).then_some(token.epaddr as usize);
            sink.lock().unwrap().push((
                args.iter().map(|a| a.u64()).collect(),
                payload.to_vec(),
                source,
            ));
        });
        let mut set = SlotSet::default();
        set.claim(lib, 7, vec![handler]).unwrap();
        let slot = set.slots[0];
        let mut args = [AmArg::from_u64(1), AmArg::from_u64(2)];
        let mut payload = *b"xyz";
        let fake_epaddr = 0x1000usize as psm_epaddr_t;
        // SAFETY: the trampolines only read `nargs` args and `len` bytes and
        // hand the token and epaddr through without dereferencing them.
        unsafe {
            PSM1_TRAMPOLINES[slot](
                ptr::null_mut(),
                fake_epaddr,
                args.as_mut_ptr(),
                2,
                payload.as_mut_ptr() as *mut c_void,
                3,
            );
            PSM2_TRAMPOLINES[slot](ptr::null_mut(), args.as_mut_ptr(), 1, ptr::null_mut(), 0);
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen[0], (vec![1, 2], b"xyz".to_vec(), Some(0x1000)));
        assert_eq!(seen[1], (vec![1], vec![], None));
        drop(set);
        assert!(
            SLOTS[slot].load(Ordering::Acquire).is_null(),
            "the slot is released"
        );
    }

    #[test]
    fn too_many_args_is_an_error() {
        assert!(copy_args(&[AmArg::default(); MAX_ARGS + 1]).is_err());
        assert!(copy_args(&[AmArg::from_u64(7); 3]).is_ok());
    }
}
