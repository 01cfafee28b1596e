//! The matched queue of an endpoint: tagged send and receive.
//!
//! A receive posted with `(tag, tagsel)` matches an incoming message whose
//! tag `t` satisfies `t & tagsel == tag & tagsel`. Non-blocking operations
//! are `unsafe`: PSM reads or writes the buffer until the request completes,
//! and only the caller can guarantee the buffer lives that long (the engine
//! owns its buffers, design principle 3). Completion is observed with
//! [`Mq::test`], [`Mq::wait`] or [`Mq::ipeek`] + [`Mq::test`].
//!
//! # The sender's address
//! PSM 1.x statuses do not say who sent a message. libpsm2, behind the
//! compat build, has `*2` variants of `ipeek`, `test` and `iprobe` whose
//! status carries the peer's `psm_epaddr_t` (the compat shim forwards every
//! `psm_*` call to the `psm2_*` function of the same name, so requests,
//! queues and addresses are the same objects). On the compat build
//! [`Mq::ipeek`], [`Mq::test`] and [`Mq::iprobe`] use them and fill
//! [`MqStatus::peer`]; on TrueScale it is `None`. [`Mq::wait`] always uses
//! the plain call (`peer` is `None`).

use std::ffi::c_void;
use std::ptr;

use crate::am;
use crate::endpoint::{Endpoint, EpAddr};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi;
use crate::library::{PsmBuild, PsmLibrary};

/// Completion status of an MQ request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MqStatus {
    /// The sender's tag (receives only).
    pub tag: u64,
    /// The sender's length (receives only).
    pub msg_length: u32,
    /// Bytes delivered into the buffer (receives only).
    pub nbytes: u32,
    /// `PSM_OK`, `PSM_MQ_TRUNCATION` (the buffer was shorter than the
    /// message), or another code.
    pub error: ErrorCode,
    /// The context given when the request was posted.
    pub context: usize,
    /// The peer: the sender of a received message, the destination of a
    /// send. Only the compat build reports it (see the module docs).
    pub peer: Option<EpAddr>,
}

impl MqStatus {
    fn from_raw(raw: &ffi::psm_mq_status_t) -> Self {
        Self {
            tag: raw.msg_tag,
            msg_length: raw.msg_length,
            nbytes: raw.nbytes,
            error: ErrorCode(raw.error_code),
            context: raw.context as usize,
            peer: None,
        }
    }

    fn from_raw2(raw: &ffi::psm2_mq_status2_t, owner: u64) -> Self {
        Self {
            tag: raw.msg_tag.to_u64(),
            msg_length: raw.msg_length,
            nbytes: raw.nbytes,
            error: ErrorCode(raw.error_code),
            context: raw.context as usize,
            peer: (!raw.msg_peer.is_null()).then(|| EpAddr::new(raw.msg_peer, owner)),
        }
    }

    /// Whether the message was longer than the receive buffer.
    pub fn is_truncated(&self) -> bool {
        self.error == ErrorCode::MQ_TRUNCATION
    }
}

/// A pending MQ request, created by [`Mq::isend`] or [`Mq::irecv`]. Once
/// completed by [`Mq::test`]/[`Mq::wait`] it is spent (PSM frees it).
#[derive(Debug)]
pub struct MqRequest {
    raw: ffi::psm_mq_req_t,
    ep: ffi::psm_ep_t,
}

// SAFETY: a request is an opaque handle used only through its endpoint,
// whose calls the owner serializes.
unsafe impl Send for MqRequest {}

impl MqRequest {
    /// The raw handle (NULL once completed); compare with [`Mq::ipeek`] results.
    pub fn as_raw(&self) -> ffi::psm_mq_req_t {
        self.raw
    }

    /// Whether PSM has completed and freed the request.
    pub fn is_spent(&self) -> bool {
        self.raw.is_null()
    }
}

/// The psm2 `*2` MQ calls, present together on the compat build only.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Psm2Calls {
    ipeek2: ffi::psm2_mq_ipeek2_fn,
    test2: ffi::psm2_mq_test2_fn,
    iprobe2: ffi::psm2_mq_iprobe2_fn,
}

impl Psm2Calls {
    pub(crate) fn of(lib: &PsmLibrary) -> Option<Self> {
        if lib.build() != PsmBuild::Psm2Compat {
            return None;
        }
        let api = lib.api();
        Some(Self {
            ipeek2: api.psm2_mq_ipeek2?,
            test2: api.psm2_mq_test2?,
            iprobe2: api.psm2_mq_iprobe2?,
        })
    }
}

/// The matched queue of an open endpoint (borrowed from it).
#[derive(Debug, Clone, Copy)]
pub struct Mq<'ep> {
    lib: &'static PsmLibrary,
    ep: ffi::psm_ep_t,
    mq: ffi::psm_mq_t,
    owner: u64,
    psm2: Option<Psm2Calls>,
    _ep: std::marker::PhantomData<&'ep ()>,
}

fn len32(len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| {
        Error::InvalidArgument(format!(
            "{len} bytes: a PSM message carries at most 2^32-1 bytes"
        ))
    })
}

impl<'ep> Mq<'ep> {
    pub(crate) fn new(
        lib: &'static PsmLibrary,
        ep: ffi::psm_ep_t,
        mq: ffi::psm_mq_t,
        owner: u64,
        psm2: Option<Psm2Calls>,
    ) -> Self {
        Self {
            lib,
            ep,
            mq,
            owner,
            psm2,
            _ep: std::marker::PhantomData,
        }
    }

    /// Whether completions and probes report the peer ([`MqStatus::peer`]):
    /// true on the compat build.
    pub fn reports_peer(&self) -> bool {
        self.psm2.is_some()
    }

    /// The raw MQ handle.
    pub fn as_raw(&self) -> ffi::psm_mq_t {
        self.mq
    }

    /// Posts a send of `len` bytes at `buf` (`psm_mq_isend`).
    ///
    /// # Safety
    /// `buf` must be readable for `len` bytes until the request completes,
    /// and `dest` must have been connected on this endpoint.
    pub unsafe fn isend(
        &self,
        dest: EpAddr,
        flags: u32,
        tag: u64,
        buf: *const u8,
        len: usize,
        context: usize,
    ) -> Result<MqRequest> {
        Endpoint::check_owner(self.owner, dest)?;
        let len = len32(len)?;
        let mut req: ffi::psm_mq_req_t = ptr::null_mut();
        // SAFETY: buffer validity is the caller's contract; `dest` belongs to
        // this endpoint (checked); req is a valid output.
        let rc = unsafe {
            (self.lib.api().psm_mq_isend)(
                self.mq,
                dest.as_raw(),
                flags,
                tag,
                buf as *const c_void,
                len,
                context as *mut c_void,
                &mut req,
            )
        };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_mq_isend")?;
        Ok(MqRequest {
            raw: req,
            ep: self.ep,
        })
    }

    /// Posts a receive into `len` bytes at `buf` (`psm_mq_irecv`).
    ///
    /// # Safety
    /// `buf` must be writable for `len` bytes, and not otherwise accessed,
    /// until the request completes.
    pub unsafe fn irecv(
        &self,
        tag: u64,
        tagsel: u64,
        flags: u32,
        buf: *mut u8,
        len: usize,
        context: usize,
    ) -> Result<MqRequest> {
        let len = len32(len)?;
        let mut req: ffi::psm_mq_req_t = ptr::null_mut();
        // SAFETY: buffer validity is the caller's contract; req is a valid output.
        let rc = unsafe {
            (self.lib.api().psm_mq_irecv)(
                self.mq,
                tag,
                tagsel,
                flags,
                buf as *mut c_void,
                len,
                context as *mut c_void,
                &mut req,
            )
        };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_mq_irecv")?;
        Ok(MqRequest {
            raw: req,
            ep: self.ep,
        })
    }

    /// Blocking send (`psm_mq_send`): returns once `data` may be reused.
    pub fn send(&self, dest: EpAddr, flags: u32, tag: u64, data: &[u8]) -> Result<()> {
        Endpoint::check_owner(self.owner, dest)?;
        let len = len32(data.len())?;
        // SAFETY: `data` is valid for the whole (blocking) call; `dest` is an
        // address PSM gave this endpoint (checked).
        let rc = unsafe {
            (self.lib.api().psm_mq_send)(
                self.mq,
                dest.as_raw(),
                flags,
                tag,
                data.as_ptr() as *const c_void,
                len,
            )
        };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_mq_send")?;
        Ok(())
    }

    /// Blocking receive into `buf` (PSM 1.x has no `psm_mq_recv`: irecv + wait).
    pub fn recv(&self, tag: u64, tagsel: u64, buf: &mut [u8]) -> Result<MqStatus> {
        // SAFETY: `buf` is exclusively borrowed until `wait` below completes
        // the request.
        let mut req = unsafe { self.irecv(tag, tagsel, 0, buf.as_mut_ptr(), buf.len(), 0)? };
        self.wait(&mut req)
    }

    fn check_request(&self, req: &MqRequest) -> Result<()> {
        if req.raw.is_null() {
            return Err(Error::InvalidArgument(
                "the MQ request was already completed".into(),
            ));
        }
        if req.ep != self.ep {
            return Err(Error::InvalidArgument(
                "the MQ request belongs to another endpoint".into(),
            ));
        }
        Ok(())
    }

    /// `psm_mq_test`: `Some(status)` and the request is spent, or `None`.
    pub fn test(&self, req: &mut MqRequest) -> Result<Option<MqStatus>> {
        self.check_request(req)?;
        let (rc, status) = if let Some(psm2) = self.psm2 {
            let mut status = ffi::psm2_mq_status2_t::default();
            // SAFETY: the request is live and belongs to this open endpoint;
            // the compat build's requests are libpsm2 requests.
            let rc = unsafe { (psm2.test2)(&mut req.raw, &mut status) };
            (rc, MqStatus::from_raw2(&status, self.owner))
        } else {
            let mut status = ffi::psm_mq_status_t::default();
            // SAFETY: the request is live and belongs to this open endpoint.
            let rc = unsafe { (self.lib.api().psm_mq_test)(&mut req.raw, &mut status) };
            (rc, MqStatus::from_raw(&status))
        };
        am::resume_handler_panic();
        match rc {
            ffi::PSM_OK => {
                req.raw = ptr::null_mut();
                Ok(Some(status))
            }
            ffi::PSM_MQ_NO_COMPLETIONS => Ok(None),
            rc => Err(self.lib.error(rc, "psm_mq_test").into()),
        }
    }

    /// `psm_mq_wait`: blocks (spinning inside PSM) until the request completes.
    pub fn wait(&self, req: &mut MqRequest) -> Result<MqStatus> {
        self.check_request(req)?;
        let mut status = ffi::psm_mq_status_t::default();
        // SAFETY: the request is live and belongs to this open endpoint.
        let rc = unsafe { (self.lib.api().psm_mq_wait)(&mut req.raw, &mut status) };
        am::resume_handler_panic();
        self.lib.check(rc, "psm_mq_wait")?;
        req.raw = ptr::null_mut();
        Ok(MqStatus::from_raw(&status))
    }

    /// `psm_mq_cancel`: `Ok(true)` if the request was cancelled (only
    /// unmatched receives can be). A cancelled request still has to be
    /// completed with [`Mq::test`]/[`Mq::wait`].
    pub fn cancel(&self, req: &mut MqRequest) -> Result<bool> {
        self.check_request(req)?;
        // SAFETY: the request is live and belongs to this open endpoint.
        let rc = unsafe { (self.lib.api().psm_mq_cancel)(&mut req.raw) };
        match rc {
            ffi::PSM_OK => Ok(true),
            ffi::PSM_MQ_NO_COMPLETIONS => Ok(false),
            rc => Err(self.lib.error(rc, "psm_mq_cancel").into()),
        }
    }

    /// `psm_mq_ipeek`: the next completed request (still to be completed with
    /// [`Mq::test`]; match it by [`MqRequest::as_raw`]) and its status.
    pub fn ipeek(&self) -> Result<Option<(ffi::psm_mq_req_t, MqStatus)>> {
        let mut req: ffi::psm_mq_req_t = ptr::null_mut();
        let (rc, status) = if let Some(psm2) = self.psm2 {
            let mut status = ffi::psm2_mq_status2_t::default();
            // SAFETY: valid outputs; the MQ belongs to an open endpoint.
            let rc = unsafe { (psm2.ipeek2)(self.mq, &mut req, &mut status) };
            (rc, MqStatus::from_raw2(&status, self.owner))
        } else {
            let mut status = ffi::psm_mq_status_t::default();
            // SAFETY: valid outputs; the MQ belongs to an open endpoint.
            let rc = unsafe { (self.lib.api().psm_mq_ipeek)(self.mq, &mut req, &mut status) };
            (rc, MqStatus::from_raw(&status))
        };
        am::resume_handler_panic();
        match rc {
            ffi::PSM_OK => Ok(Some((req, status))),
            ffi::PSM_MQ_NO_COMPLETIONS => Ok(None),
            rc => Err(self.lib.error(rc, "psm_mq_ipeek").into()),
        }
    }

    /// `psm_mq_iprobe`: the status of a matching unexpected message, if one
    /// has arrived (it stays queued).
    pub fn iprobe(&self, tag: u64, tagsel: u64) -> Result<Option<MqStatus>> {
        let (rc, status) = if let Some(psm2) = self.psm2 {
            // As libpsm2's own psm2_mq_iprobe: the third tag word is not
            // selected (64-bit senders leave it zero).
            let mut rtag = ffi::psm2_mq_tag_t::from_u64(tag);
            let mut rtagsel = ffi::psm2_mq_tag_t::from_u64(tagsel);
            let mut status = ffi::psm2_mq_status2_t::default();
            // SAFETY: valid inputs and output; a NULL source is
            // PSM2_MQ_ANY_ADDR; the MQ belongs to an open endpoint.
            let rc = unsafe {
                (psm2.iprobe2)(
                    self.mq,
                    ptr::null_mut(),
                    &mut rtag,
                    &mut rtagsel,
                    &mut status,
                )
            };
            (rc, MqStatus::from_raw2(&status, self.owner))
        } else {
            let mut status = ffi::psm_mq_status_t::default();
            // SAFETY: valid output; the MQ belongs to an open endpoint.
            let rc = unsafe { (self.lib.api().psm_mq_iprobe)(self.mq, tag, tagsel, &mut status) };
            (rc, MqStatus::from_raw(&status))
        };
        am::resume_handler_panic();
        match rc {
            ffi::PSM_OK => Ok(Some(status)),
            ffi::PSM_MQ_NO_COMPLETIONS => Ok(None),
            rc => Err(self.lib.error(rc, "psm_mq_iprobe").into()),
        }
    }

    /// `psm_mq_getopt` for a 32-bit option (`PSM_MQ_OPT_*`).
    pub fn get_option_u32(&self, option: i32) -> Result<u32> {
        let mut value: u32 = 0;
        // SAFETY: every documented MQ option is a uint32_t.
        let rc = unsafe {
            (self.lib.api().psm_mq_getopt)(self.mq, option, &mut value as *mut u32 as *mut c_void)
        };
        self.lib.check(rc, "psm_mq_getopt")?;
        Ok(value)
    }

    /// `psm_mq_setopt` for a 32-bit option (`PSM_MQ_OPT_*`).
    pub fn set_option_u32(&self, option: i32, value: u32) -> Result<()> {
        // SAFETY: every documented MQ option is a uint32_t.
        let rc = unsafe {
            (self.lib.api().psm_mq_setopt)(self.mq, option, &value as *const u32 as *const c_void)
        };
        self.lib.check(rc, "psm_mq_setopt")?;
        Ok(())
    }

    /// `psm_mq_get_stats`, if the library has it.
    pub fn stats(&self) -> Option<ffi::psm_mq_stats_t> {
        let get = self.lib.api().psm_mq_get_stats?;
        let mut stats = ffi::psm_mq_stats_t::default();
        // SAFETY: `stats` is a writable psm_mq_stats_t (identical layout in psm2).
        unsafe { get(self.mq, &mut stats) };
        Some(stats)
    }
}
