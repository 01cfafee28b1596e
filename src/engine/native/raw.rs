//! The MQ calls of the hot path, straight through psm-sys's function table.
//!
//! Every operation is a post (`psm_mq_isend` / `psm_mq_irecv`) and a
//! harvest (`psm_mq_ipeek` names the next finished request with its
//! status, `psm_mq_test` frees it), or, on the manual-mode fast path, a
//! `psm_poll` and a `psm_mq_test` of the one request a future waits for;
//! small sends may go out with the blocking `psm_mq_send` (inject). psm-sys's safe [`Mq`](psm_sys::Mq)
//! wrappers are built per call and copy and convert the status on both
//! harvesting calls; here the handle and the functions are resolved once
//! at open, the status is read once (from `ipeek`) and `test` is asked for
//! none (the compat build; TrueScale gets a scratch status). The compat
//! build's libpsm2 `*2` variants are used when present, as psm-sys does,
//! so the sender's address comes with the status. Request handles are
//! [`Req`]s, owned by the in-flight table.

use psm_sys::{ffi, PsmBuild, PsmLibrary};
use std::ptr;

/// A PSM request handle owned by the in-flight table.
#[derive(Debug)]
pub(crate) struct Req(ffi::psm_mq_req_t);

// SAFETY: a request handle is an opaque pointer that only PSM dereferences,
// inside calls the engine makes under the endpoint's lock; moving the
// handle between threads moves no PSM state.
unsafe impl Send for Req {}

impl Req {
    /// The raw handle.
    pub(super) fn as_raw(&self) -> ffi::psm_mq_req_t {
        self.0
    }

    /// The handle of a receive not yet handed to PSM (see `unposted` in
    /// the endpoint): PSM's null request, which it never returns for a
    /// posted one.
    pub(super) fn unposted() -> Req {
        Req(ptr::null_mut())
    }

    /// Whether PSM has the request (it is not [`Req::unposted`]).
    #[inline]
    pub(super) fn is_posted(&self) -> bool {
        !self.0.is_null()
    }

    /// A handle with the value `n`, never handed to PSM (unit tests).
    #[cfg(test)]
    pub(super) fn fake(n: usize) -> Req {
        Req(ptr::without_provenance_mut(n))
    }
}

/// The calls and the MQ handle of one open endpoint.
#[derive(Clone, Copy)]
pub(crate) struct RawMq {
    /// The endpoint handle (valid while the endpoint is open).
    ep: usize,
    /// The MQ handle (valid while the endpoint is open).
    mq: usize,
    irecv: ffi::psm_mq_irecv_fn,
    isend: ffi::psm_mq_isend_fn,
    send: ffi::psm_mq_send_fn,
    cancel: ffi::psm_mq_cancel_fn,
    poll: ffi::psm_poll_fn,
    calls: Calls,
}

#[derive(Clone, Copy)]
enum Calls {
    /// libpsm2's `psm2_mq_ipeek2` / `psm2_mq_test2` (compat build).
    Psm2 {
        ipeek: ffi::psm2_mq_ipeek2_fn,
        test: ffi::psm2_mq_test2_fn,
    },
    /// PSM 1.x `psm_mq_ipeek` / `psm_mq_test`.
    Psm1 {
        ipeek: ffi::psm_mq_ipeek_fn,
        test: ffi::psm_mq_complete_fn,
    },
}

/// A finished request, as `ipeek` reports it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peeked {
    /// Its handle (still to be freed with [`RawMq::test`]).
    pub req: ffi::psm_mq_req_t,
    /// The context it was posted with.
    pub context: usize,
    /// The sender's tag.
    pub tag: u64,
    /// The sender's length.
    pub msg_length: u32,
    /// Bytes delivered.
    pub nbytes: u32,
    /// PSM's completion code.
    pub error: ffi::psm_error_t,
    /// The peer (compat build only).
    pub peer: Option<ffi::psm_epaddr_t>,
}

impl RawMq {
    /// The calls for endpoint `ep` and its `mq` on `lib`.
    pub(super) fn new(lib: &PsmLibrary, ep: ffi::psm_ep_t, mq: ffi::psm_mq_t) -> RawMq {
        let api = lib.api();
        let calls = match (lib.build(), api.psm2_mq_ipeek2, api.psm2_mq_test2) {
            (PsmBuild::Psm2Compat, Some(ipeek), Some(test)) => Calls::Psm2 { ipeek, test },
            _ => Calls::Psm1 {
                ipeek: api.psm_mq_ipeek,
                test: api.psm_mq_test,
            },
        };
        RawMq {
            ep: ep as usize,
            mq: mq as usize,
            irecv: api.psm_mq_irecv,
            isend: api.psm_mq_isend,
            send: api.psm_mq_send,
            cancel: api.psm_mq_cancel,
            poll: api.psm_poll,
            calls,
        }
    }

    /// `psm_mq_irecv` into `len` bytes at `buf`; PSM's code on failure.
    ///
    /// # Safety
    /// As [`RawMq::ipeek`]; `buf` is writable for `len` bytes, and not
    /// otherwise accessed, until the request is harvested or the endpoint
    /// closed.
    #[inline]
    pub(super) unsafe fn irecv(
        &self,
        tag: u64,
        select: u64,
        buf: *mut u8,
        len: u32,
        context: usize,
    ) -> Result<Req, ffi::psm_error_t> {
        let mut req: ffi::psm_mq_req_t = ptr::null_mut();
        // SAFETY: the MQ is open and the buffer valid (caller); `req` is a
        // valid output.
        let rc = unsafe {
            (self.irecv)(
                self.mq as ffi::psm_mq_t,
                tag,
                select,
                0,
                buf.cast(),
                len,
                context as *mut std::ffi::c_void,
                &mut req,
            )
        };
        psm_sys::am::resume_handler_panic();
        posted(rc, req)
    }

    /// `psm_mq_isend` of `len` bytes at `buf` to `dest`; PSM's code on
    /// failure.
    ///
    /// # Safety
    /// As [`RawMq::ipeek`]; `dest` was connected on this endpoint; `buf` is
    /// readable for `len` bytes, and not written, until the request is
    /// harvested or the endpoint closed.
    #[inline]
    pub(super) unsafe fn isend(
        &self,
        dest: ffi::psm_epaddr_t,
        flags: u32,
        tag: u64,
        buf: *const u8,
        len: u32,
        context: usize,
    ) -> Result<Req, ffi::psm_error_t> {
        let mut req: ffi::psm_mq_req_t = ptr::null_mut();
        // SAFETY: the MQ is open, `dest` belongs to it and the buffer is
        // valid (caller); `req` is a valid output.
        let rc = unsafe {
            (self.isend)(
                self.mq as ffi::psm_mq_t,
                dest,
                flags,
                tag,
                buf.cast(),
                len,
                context as *mut std::ffi::c_void,
                &mut req,
            )
        };
        psm_sys::am::resume_handler_panic();
        posted(rc, req)
    }

    /// `psm_mq_send` of `len` bytes at `buf` to `dest`, blocking until the
    /// bytes may be reused (for an eager message: once PSM copied them);
    /// PSM's code on failure.
    ///
    /// # Safety
    /// As [`RawMq::ipeek`]; `dest` was connected on this endpoint; `buf` is
    /// readable for `len` bytes during the call.
    #[inline]
    pub(super) unsafe fn send(
        &self,
        dest: ffi::psm_epaddr_t,
        tag: u64,
        buf: *const u8,
        len: u32,
    ) -> Result<(), ffi::psm_error_t> {
        // SAFETY: the MQ is open, `dest` belongs to it and the buffer is
        // valid for the call (caller).
        let rc = unsafe { (self.send)(self.mq as ffi::psm_mq_t, dest, 0, tag, buf.cast(), len) };
        psm_sys::am::resume_handler_panic();
        match rc {
            ffi::PSM_OK => Ok(()),
            rc => Err(rc),
        }
    }

    /// `psm_poll`: whether PSM moved anything (AM handlers may run inside).
    ///
    /// # Safety
    /// As [`RawMq::ipeek`].
    #[inline]
    pub(super) unsafe fn poll(&self) -> bool {
        // SAFETY: the endpoint is open and calls on it are serialized
        // (caller).
        let rc = unsafe { (self.poll)(self.ep as ffi::psm_ep_t) };
        psm_sys::am::resume_handler_panic();
        rc == ffi::PSM_OK
    }

    /// `psm_mq_test` on one live request: if it finished, frees it and
    /// returns its status (as [`RawMq::ipeek`] reports it); `None` while
    /// it runs. Makes no progress itself.
    ///
    /// # Safety
    /// As [`RawMq::ipeek`]; `req` is a live request of this MQ; once this
    /// returns `Some` the handle is spent.
    #[inline]
    pub(super) unsafe fn test_one(&self, req: &Req) -> Option<Peeked> {
        let mut raw = req.0;
        debug_assert!(!raw.is_null(), "a Req is never PSM's invalid request");
        match self.calls {
            Calls::Psm2 { test, .. } => {
                // Left uninitialized: this runs on every spin of a waiting
                // future, and libpsm2 writes the status only when the
                // request finished.
                let mut st = std::mem::MaybeUninit::<ffi::psm2_mq_status2_t>::uninit();
                // SAFETY: a live request of the open MQ (caller); both
                // outputs are valid for writing.
                let rc = unsafe { test(&mut raw, st.as_mut_ptr()) };
                if rc != ffi::PSM_OK {
                    return None;
                }
                let st = st.as_ptr();
                // SAFETY: `req` is never PSM's invalid (null) request, for
                // which libpsm2 returns PSM_OK without writing the status;
                // for any other, PSM_OK means it wrote every field
                // (`mq_status2_copy`) except padding. Only those fields are
                // read, each through a raw pointer, and of the tag only its
                // two low words (the third is always written, the fourth
                // is C padding).
                unsafe {
                    let peer = std::ptr::addr_of!((*st).msg_peer).read();
                    let tag = std::ptr::addr_of!((*st).msg_tag.tag).cast::<u32>();
                    Some(Peeked {
                        req: req.0,
                        context: std::ptr::addr_of!((*st).context).read() as usize,
                        tag: u64::from(tag.read()) | (u64::from(tag.add(1).read()) << 32),
                        msg_length: std::ptr::addr_of!((*st).msg_length).read(),
                        nbytes: std::ptr::addr_of!((*st).nbytes).read(),
                        error: std::ptr::addr_of!((*st).error_code).read(),
                        peer: (!peer.is_null()).then_some(peer),
                    })
                }
            }
            Calls::Psm1 { test, .. } => {
                let mut st = ffi::psm_mq_status_t::default();
                // SAFETY: as above.
                let rc = unsafe { test(&mut raw, &mut st) };
                (rc == ffi::PSM_OK).then_some(Peeked {
                    req: req.0,
                    context: st.context as usize,
                    tag: st.msg_tag,
                    msg_length: st.msg_length,
                    nbytes: st.nbytes,
                    error: st.error_code,
                    peer: None,
                })
            }
        }
    }

    /// `psm_mq_cancel`: whether the (receive) request was cancelled; it is
    /// then harvested like any finished request.
    ///
    /// # Safety
    /// As [`RawMq::ipeek`]; `req` is a live receive request of this MQ.
    pub(super) unsafe fn cancel(&self, req: &Req) -> Result<bool, ffi::psm_error_t> {
        let mut raw = req.0;
        // SAFETY: a live request of the open MQ (caller).
        match unsafe { (self.cancel)(&mut raw) } {
            ffi::PSM_OK => Ok(true),
            ffi::PSM_MQ_NO_COMPLETIONS => Ok(false),
            rc => Err(rc),
        }
    }

    /// `psm_mq_ipeek`: the next finished request, if any (PSM polls when
    /// there is none).
    ///
    /// # Safety
    /// The endpoint the MQ belongs to is open, and the caller serializes
    /// PSM calls on it.
    #[inline]
    pub(super) unsafe fn ipeek(&self) -> Option<Peeked> {
        let mq = self.mq as ffi::psm_mq_t;
        let mut req: ffi::psm_mq_req_t = ptr::null_mut();
        match self.calls {
            Calls::Psm2 { ipeek, .. } => {
                let mut st = ffi::psm2_mq_status2_t::default();
                // SAFETY: the MQ is open (caller); both outputs are valid.
                let rc = unsafe { ipeek(mq, &mut req, &mut st) };
                (rc == ffi::PSM_OK && !req.is_null()).then(|| Peeked {
                    req,
                    context: st.context as usize,
                    tag: st.msg_tag.to_u64(),
                    msg_length: st.msg_length,
                    nbytes: st.nbytes,
                    error: st.error_code,
                    peer: (!st.msg_peer.is_null()).then_some(st.msg_peer),
                })
            }
            Calls::Psm1 { ipeek, .. } => {
                let mut st = ffi::psm_mq_status_t::default();
                // SAFETY: as above.
                let rc = unsafe { ipeek(mq, &mut req, &mut st) };
                (rc == ffi::PSM_OK && !req.is_null()).then_some(Peeked {
                    req,
                    context: st.context as usize,
                    tag: st.msg_tag,
                    msg_length: st.msg_length,
                    nbytes: st.nbytes,
                    error: st.error_code,
                    peer: None,
                })
            }
        }
    }

    /// `psm_mq_test` on a request `ipeek` reported finished: frees it.
    ///
    /// # Safety
    /// As [`RawMq::ipeek`]; `req` came from it and was not tested since.
    #[inline]
    pub(super) unsafe fn test(&self, req: ffi::psm_mq_req_t) {
        let mut req = req;
        match self.calls {
            Calls::Psm2 { test, .. } => {
                // SAFETY: a finished, untested request of the open MQ; a
                // NULL status is allowed (libpsm2 copies none).
                unsafe { test(&mut req, ptr::null_mut()) };
            }
            Calls::Psm1 { test, .. } => {
                let mut st = ffi::psm_mq_status_t::default();
                // SAFETY: a finished, untested request of the open MQ.
                unsafe { test(&mut req, &mut st) };
            }
        }
    }
}

/// The outcome of a post: the request, or PSM's code (an "OK" without a
/// request counts as an internal error rather than a null handle).
fn posted(rc: ffi::psm_error_t, req: ffi::psm_mq_req_t) -> Result<Req, ffi::psm_error_t> {
    match rc {
        ffi::PSM_OK if !req.is_null() => Ok(Req(req)),
        ffi::PSM_OK => Err(ffi::PSM_INTERNAL_ERR),
        rc => Err(rc),
    }
}
