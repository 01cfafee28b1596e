//! What the C-face tests share: opening a provider's objects the C way,
//! binding and enabling an endpoint to itself, reading completions, and
//! registering memory. Each test binary uses part of it.
#![allow(dead_code)]

use psmrail_fi::sys;
use std::ffi::{c_int, c_void};
use std::ptr::{null, null_mut};

pub(crate) fn neg(e: u32) -> c_int {
    -(e as c_int)
}

/// `fi_getinfo` through the provider, hints as given.
pub(crate) fn getinfo(
    p: &sys::fi_provider,
    hints: *const sys::fi_info,
) -> Result<*mut sys::fi_info, c_int> {
    let mut info = null_mut();
    // SAFETY: the provider's getinfo with valid (or null) arguments.
    let rc =
        unsafe { p.getinfo.unwrap()(psmrail_fi::API_VERSION, null(), null(), 0, hints, &mut info) };
    if rc == 0 {
        Ok(info)
    } else {
        Err(rc)
    }
}

/// Hints for a tagged RDM endpoint.
pub(crate) fn tagged_hints() -> *mut sys::fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates hints with every attribute.
    let h = unsafe { sys::fi_dupinfo(null()) };
    assert!(!h.is_null());
    // SAFETY: just allocated, attributes present.
    unsafe {
        (*h).caps = sys::FI_TAGGED as u64;
        (*h).mode = sys::FI_CONTEXT;
        (*(*h).ep_attr).type_ = sys::FI_EP_RDM;
    }
    h
}

pub(crate) fn close(fid: *mut sys::fid) -> c_int {
    // SAFETY: `fid` is one of ours (or a kept block of a closed one): its
    // ops table is valid.
    unsafe { (*(*fid).ops).close.unwrap()(fid) }
}

/// Every object of one endpoint, opened the C way.
pub(crate) struct Objects {
    pub(crate) fabric: *mut sys::fid_fabric,
    pub(crate) domain: *mut sys::fid_domain,
    pub(crate) av: *mut sys::fid_av,
    pub(crate) cq: *mut sys::fid_cq,
    pub(crate) ep: *mut sys::fid_ep,
    pub(crate) info: *mut sys::fi_info,
}

pub(crate) fn open_all(p: &sys::fi_provider) -> Objects {
    open_with(p, sys::FI_TAGGED as u64)
}

/// [`open_all`] for an endpoint with `caps`.
pub(crate) fn open_with(p: &sys::fi_provider, caps: u64) -> Objects {
    open_mr_mode(p, caps, 0)
}

/// [`open_with`] for an application supporting `mr_mode`.
pub(crate) fn open_mr_mode(p: &sys::fi_provider, caps: u64, mr_mode: u32) -> Objects {
    // SAFETY: the hints open_caps hands over are ours, with every attribute.
    open_caps(p, caps, |h| unsafe {
        (*h.domain_attr).mr_mode = mr_mode as c_int;
    })
}

/// [`open_with`], the hints edited by `edit` first (the answer carries
/// the hints' op_flags).
pub(crate) fn open_caps(
    p: &sys::fi_provider,
    caps: u64,
    edit: impl FnOnce(&mut sys::fi_info),
) -> Objects {
    let h = tagged_hints();
    // SAFETY: our hints.
    unsafe {
        (*h).caps = caps;
        edit(&mut *h);
    }
    let info = getinfo(p, h).expect("info");
    // SAFETY: hints we own.
    unsafe { sys::fi_freeinfo(h) };
    let mut fabric = null_mut();
    let mut domain = null_mut();
    let mut av = null_mut();
    let mut cq = null_mut();
    let mut ep = null_mut();
    // SAFETY: each call through the tables of objects just opened, with
    // valid arguments.
    unsafe {
        assert_eq!(
            p.fabric.unwrap()((*info).fabric_attr, &mut fabric, null_mut()),
            0
        );
        let fops = &*(*fabric).ops;
        assert_eq!(
            fops.domain.unwrap()(fabric, info, &mut domain, null_mut()),
            0
        );
        let dops = &*(*domain).ops;
        let mut av_attr = sys::fi_av_attr {
            type_: sys::FI_AV_MAP,
            ..Default::default()
        };
        assert_eq!(
            dops.av_open.unwrap()(domain, &mut av_attr, &mut av, null_mut()),
            0
        );
        let mut cq_attr = sys::fi_cq_attr {
            format: sys::FI_CQ_FORMAT_TAGGED,
            ..Default::default()
        };
        assert_eq!(
            dops.cq_open.unwrap()(domain, &mut cq_attr, &mut cq, null_mut()),
            0
        );
        assert_eq!(dops.endpoint.unwrap()(domain, info, &mut ep, null_mut()), 0);
    }
    Objects {
        fabric,
        domain,
        av,
        cq,
        ep,
        info,
    }
}

pub(crate) fn ep_bind(ep: *mut sys::fid_ep, bfid: *mut sys::fid, flags: u64) -> c_int {
    // SAFETY: an endpoint of ours.
    unsafe { (*(*ep).fid.ops).bind.unwrap()(&mut (*ep).fid, bfid, flags) }
}

pub(crate) fn enable(ep: *mut sys::fid_ep) -> c_int {
    // SAFETY: an endpoint of ours.
    unsafe {
        (*(*ep).fid.ops).control.unwrap()(&mut (*ep).fid, sys::FI_ENABLE as c_int, null_mut())
    }
}

/// Binds the AV and the CQ (both directions), enables, and inserts the
/// endpoint's own address: the `fi_addr` of ourselves.
pub(crate) fn enable_to_self(o: &Objects) -> sys::fi_addr_t {
    enable_to_self_on(o, o.cq)
}

/// [`enable_to_self`] with `cq` (of `o`'s domain) for both directions.
pub(crate) fn enable_to_self_on(o: &Objects, cq: *mut sys::fid_cq) -> sys::fi_addr_t {
    assert_eq!(ep_bind(o.ep, o.av.cast(), 0), 0);
    let both = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
    assert_eq!(ep_bind(o.ep, cq.cast(), both), 0);
    assert_eq!(enable(o.ep), 0);
    let mut name = [0u8; 64];
    let mut len = name.len();
    let mut me: sys::fi_addr_t = 0;
    // SAFETY: our endpoint's cm table and AV's table with valid buffers.
    unsafe {
        let rc =
            (*(*o.ep).cm).getname.unwrap()(&mut (*o.ep).fid, name.as_mut_ptr().cast(), &mut len);
        assert_eq!(rc, 0);
        let n =
            (*(*o.av).ops).insert.unwrap()(o.av, name.as_ptr().cast(), 1, &mut me, 0, null_mut());
        assert_eq!(n, 1);
    }
    me
}

/// Posts with `post` until it is not `-FI_EAGAIN` (a peer's first use may
/// answer that while its connection is made), reading `cq` in between to
/// progress, as a libfabric program does; the call's answer.
#[allow(dead_code)]
pub(crate) fn post_again(cq: *mut sys::fid_cq, mut post: impl FnMut() -> isize) -> isize {
    for _ in 0..2_000_000 {
        let rc = post();
        if rc != -(sys::FI_EAGAIN as isize) {
            return rc;
        }
        let mut e = [sys::fi_cq_tagged_entry::default(); 1];
        // SAFETY: room for one tagged entry; an entry read here would be
        // lost, so this is for the first post only (nothing in flight).
        let r = unsafe { (*(*cq).ops).read.unwrap()(cq, e.as_mut_ptr().cast(), 1) };
        assert_eq!(r, -(sys::FI_EAGAIN as isize), "while retrying a post");
    }
    panic!("the post answered -FI_EAGAIN for 2,000,000 tries");
}

/// Reads `n` completions from `cq`, or the first error entry.
pub(crate) fn completions(
    cq: *mut sys::fid_cq,
    n: usize,
) -> Result<Vec<sys::fi_cq_tagged_entry>, sys::fi_cq_err_entry> {
    let mut got = Vec::new();
    for _ in 0..2_000_000 {
        let mut e = [sys::fi_cq_tagged_entry::default(); 4];
        // SAFETY: room for four tagged entries.
        let r = unsafe { (*(*cq).ops).read.unwrap()(cq, e.as_mut_ptr().cast(), 4) };
        if r > 0 {
            got.extend_from_slice(&e[..r as usize]);
        } else if r == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: room for one error entry.
            let r = unsafe { (*(*cq).ops).readerr.unwrap()(cq, &mut err, 0) };
            assert_eq!(r, 1);
            return Err(err);
        } else {
            assert_eq!(r, -(sys::FI_EAGAIN as isize));
        }
        if got.len() >= n {
            return Ok(got);
        }
    }
    panic!("{} of {n} completions", got.len());
}

pub(crate) fn ctx_ptr(c: &mut sys::fi_context) -> *mut c_void {
    (c as *mut sys::fi_context).cast()
}

/// `fi_mr_reg` of `len` bytes at `buf`.
pub(crate) fn mr_reg(
    o: &Objects,
    buf: *mut u8,
    len: usize,
    access: u64,
    offset: u64,
    key: u64,
) -> Result<*mut sys::fid_mr, c_int> {
    let mut mr = null_mut();
    // SAFETY: our domain's MR table; the memory outlives the region.
    let rc = unsafe {
        (*(*o.domain).mr).reg.unwrap()(
            &mut (*o.domain).fid,
            buf.cast(),
            len,
            access,
            offset,
            key,
            0,
            &mut mr,
            null_mut(),
        )
    };
    if rc == 0 {
        Ok(mr)
    } else {
        Err(rc)
    }
}

pub(crate) fn close_objects(o: Objects, mrs: &[*mut sys::fid_mr]) {
    for mr in mrs {
        assert_eq!(close(mr.cast()), 0);
    }
    assert_eq!(close(o.ep.cast()), 0);
    assert_eq!(close(o.av.cast()), 0);
    assert_eq!(close(o.cq.cast()), 0);
    assert_eq!(close(o.domain.cast()), 0);
    assert_eq!(close(o.fabric.cast()), 0);
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

/// [`close_objects`] after the endpoint was closed already.
pub(crate) fn close_objects_but_ep(o: Objects) {
    assert_eq!(close(o.av.cast()), 0);
    assert_eq!(close(o.cq.cast()), 0);
    assert_eq!(close(o.domain.cast()), 0);
    assert_eq!(close(o.fabric.cast()), 0);
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

pub(crate) const REMOTE: u64 = (sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE) as u64;

/// A CQ of `o`'s domain (tagged format) with `wait_obj`.
pub(crate) fn cq_open_wait(
    o: &Objects,
    wait_obj: sys::fi_wait_obj,
) -> Result<*mut sys::fid_cq, c_int> {
    let mut cq = null_mut();
    let mut attr = sys::fi_cq_attr {
        format: sys::FI_CQ_FORMAT_TAGGED,
        wait_obj,
        ..Default::default()
    };
    // SAFETY: our domain's table with a valid attribute structure.
    let rc =
        unsafe { (*(*o.domain).ops).cq_open.unwrap()(o.domain, &mut attr, &mut cq, null_mut()) };
    if rc == 0 {
        Ok(cq)
    } else {
        Err(rc)
    }
}

/// A counter of `o`'s domain with `wait_obj`.
pub(crate) fn cntr_open_wait(
    o: &Objects,
    wait_obj: sys::fi_wait_obj,
) -> Result<*mut sys::fid_cntr, c_int> {
    let mut c = null_mut();
    let mut attr = sys::fi_cntr_attr {
        wait_obj,
        ..Default::default()
    };
    // SAFETY: our domain's table with a valid attribute structure.
    let rc =
        unsafe { (*(*o.domain).ops).cntr_open.unwrap()(o.domain, &mut attr, &mut c, null_mut()) };
    if rc == 0 {
        Ok(c)
    } else {
        Err(rc)
    }
}

/// An EQ of `o`'s fabric with `wait_obj`.
pub(crate) fn eq_open_wait(
    o: &Objects,
    wait_obj: sys::fi_wait_obj,
) -> Result<*mut sys::fid_eq, c_int> {
    let mut eq = null_mut();
    let mut attr = sys::fi_eq_attr {
        size: 32,
        flags: sys::FI_WRITE as u64,
        wait_obj,
        ..Default::default()
    };
    // SAFETY: our fabric's table with a valid attribute structure.
    let rc =
        unsafe { (*(*o.fabric).ops).eq_open.unwrap()(o.fabric, &mut attr, &mut eq, null_mut()) };
    if rc == 0 {
        Ok(eq)
    } else {
        Err(rc)
    }
}

/// `fi_control(fid, FI_GETWAIT)`: the fd, or the error.
pub(crate) fn getwait(fid: *mut sys::fid) -> Result<c_int, c_int> {
    let mut fd: c_int = -1;
    // SAFETY: one of our objects; FI_GETWAIT writes an int for FD objects.
    let rc = unsafe {
        (*(*fid).ops).control.unwrap()(
            fid,
            sys::FI_GETWAIT as c_int,
            (&mut fd as *mut c_int).cast(),
        )
    };
    if rc == 0 {
        Ok(fd)
    } else {
        Err(rc)
    }
}

/// `fi_trywait(fabric, fids, n)`.
pub(crate) fn trywait(o: &Objects, fids: &[*mut sys::fid]) -> c_int {
    let mut fids = fids.to_vec();
    // SAFETY: our fabric's table; `fids` holds `len` fids.
    unsafe { (*(*o.fabric).ops).trywait.unwrap()(o.fabric, fids.as_mut_ptr(), fids.len() as c_int) }
}

/// `poll(2)` of `fd` for input, `ms` milliseconds at most: 1 when it is
/// readable, 0 when not.
pub(crate) fn poll_in(fd: c_int, ms: c_int) -> c_int {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n
}

/// Reads one tagged entry from `cq`: its count (1) or the error.
pub(crate) fn cq_read1(cq: *mut sys::fid_cq) -> isize {
    let mut e = sys::fi_cq_tagged_entry::default();
    // SAFETY: room for one tagged entry.
    unsafe { (*(*cq).ops).read.unwrap()(cq, (&mut e as *mut sys::fi_cq_tagged_entry).cast(), 1) }
}

/// A tagged receive and a tagged send to ourselves (`me`) of `msg`: their
/// completions go to the endpoint's CQ. The buffers are leaked (a test's
/// few bytes), so nothing dangles whenever the completions are read.
pub(crate) fn tagged_to_self(o: &Objects, me: sys::fi_addr_t, msg: &[u8]) {
    let rbuf: &'static mut [u8] = vec![0u8; msg.len()].leak();
    let sbuf: &'static [u8] = msg.to_vec().leak();
    let rctx: &'static mut sys::fi_context = Box::leak(Box::default());
    let sctx: &'static mut sys::fi_context = Box::leak(Box::default());
    // SAFETY: our endpoint's tagged table; buffers and contexts live for
    // the process.
    unsafe {
        let t = &*(*o.ep).tagged;
        let rc = t.recv.unwrap()(
            o.ep,
            rbuf.as_mut_ptr().cast(),
            rbuf.len(),
            null_mut(),
            sys::FI_ADDR_NOTAVAIL,
            0x51,
            0,
            ctx_ptr(rctx),
        );
        assert_eq!(rc, 0);
        let rc = t.send.unwrap()(
            o.ep,
            sbuf.as_ptr().cast(),
            sbuf.len(),
            null_mut(),
            me,
            0x51,
            ctx_ptr(sctx),
        );
        assert_eq!(rc, 0);
    }
}
