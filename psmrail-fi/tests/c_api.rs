//! The C face called as a C program calls it: through the provider
//! structure `fi_prov_ini` hands out and the op tables of the objects it
//! opens (in this process, soft engine). Bad input gets libfabric error
//! codes; objects close in libfabric's order; a tagged message to
//! ourselves comes back through the completion queue with its context
//! untouched and its data in place.
// Built without libfabric (see build.rs), the crate has no C face to test.
#![cfg(libfabric)]

#[path = "support/c_face.rs"]
mod c_face;
use c_face::*;

use psmrail_fi::sys;
use psmrail_fi::{provider, Which, PROVIDER_VERSION};
use std::ffi::{c_int, c_void, CStr};
use std::ptr::{null, null_mut};

fn setup() -> &'static sys::fi_provider {
    // The same values in every test: tests share the process environment.
    std::env::set_var("PSMRAIL_ENGINE", "soft");
    std::env::set_var("FI_PSM_NAME_SERVER", "no");
    // SAFETY: the provider structure lives for the process.
    unsafe { &*provider(Which::Psm) }
}

#[test]
fn the_provider_announces_itself() {
    let p = setup();
    // SAFETY: the name is a static C string.
    let name = unsafe { CStr::from_ptr(p.name) };
    assert_eq!(name.to_str().unwrap(), "psm");
    assert_eq!(p.version, PROVIDER_VERSION);
    assert!(
        sys::fi_major(p.version) > 117,
        "above libfabric 1.17's built-in 117.0"
    );
    assert_eq!(p.fi_version, sys::fi_version_of(1, 17));
}

#[test]
fn getinfo_refuses_bad_input() {
    let p = setup();
    // SAFETY: a null output pointer, which the provider must refuse.
    let rc = unsafe {
        p.getinfo.unwrap()(
            psmrail_fi::API_VERSION,
            null(),
            null(),
            0,
            null(),
            null_mut(),
        )
    };
    assert_eq!(rc, neg(sys::FI_EINVAL));
    let mut info = null_mut();
    // SAFETY: a version from the future.
    let rc = unsafe {
        p.getinfo.unwrap()(
            sys::fi_version_of(2, 0),
            null(),
            null(),
            0,
            null(),
            &mut info,
        )
    };
    assert_eq!(rc, neg(sys::FI_ENODATA));
    assert!(info.is_null());
    // Capabilities the C face does not carry, and a foreign address format.
    let h = tagged_hints();
    // SAFETY: our hints.
    unsafe { (*h).caps |= sys::FI_MULTICAST as u64 };
    assert_eq!(getinfo(p, h).unwrap_err(), neg(sys::FI_ENODATA));
    // SAFETY: our hints.
    unsafe {
        (*h).caps = sys::FI_TAGGED as u64;
        (*h).addr_format = sys::FI_SOCKADDR_IN;
    }
    assert_eq!(getinfo(p, h).unwrap_err(), neg(sys::FI_ENODATA));
    // SAFETY: our hints, freed once.
    unsafe { sys::fi_freeinfo(h) };
}

#[test]
fn getinfo_answers_what_was_asked_and_frees_with_fi_freeinfo() {
    let p = setup();
    let h = tagged_hints();
    let info = getinfo(p, h).expect("a tagged RDM info");
    // SAFETY: an info we answered: every attribute is there.
    unsafe {
        let i = &*info;
        assert_ne!(i.caps & sys::FI_TAGGED as u64, 0);
        assert_eq!(i.caps & sys::FI_ATOMIC as u64, 0);
        assert_eq!(i.mode & sys::FI_CONTEXT, sys::FI_CONTEXT);
        assert_eq!((*i.ep_attr).type_, sys::FI_EP_RDM);
        assert_eq!(i.addr_format, sys::FI_ADDR_PSMX);
        assert!(i.src_addrlen > 0 && !i.src_addr.is_null());
        assert!(
            (*i.fabric_attr).prov_name.is_null(),
            "the core names the provider"
        );
        assert_eq!((*i.fabric_attr).prov_version, PROVIDER_VERSION);
        // The core duplicates infos: ours must survive fi_dupinfo.
        let dup = sys::fi_dupinfo(info);
        assert!(!dup.is_null());
        assert_eq!((*dup).caps, i.caps);
        sys::fi_freeinfo(dup);
        sys::fi_freeinfo(info);
        sys::fi_freeinfo(h);
    }
}

#[test]
fn a_tagged_message_to_ourselves_keeps_its_context() {
    let p = setup();
    let o = open_all(p);
    let cq_fid = o.cq.cast::<sys::fid>();
    let av_fid = o.av.cast::<sys::fid>();
    // A send before enable is a state error, not a crash.
    let byte = [0u8; 1];
    // SAFETY: our endpoint's tagged table.
    let rc = unsafe {
        (*(*o.ep).tagged).send.unwrap()(o.ep, byte.as_ptr().cast(), 1, null_mut(), 0, 1, null_mut())
    };
    assert_eq!(rc, -(sys::FI_EOPBADSTATE as isize));
    // Unknown bind flags, then the real bindings.
    assert_eq!(ep_bind(o.ep, cq_fid, 1 << 40), neg(sys::FI_EBADFLAGS));
    assert_eq!(ep_bind(o.ep, null_mut(), 0), neg(sys::FI_EINVAL));
    assert_eq!(ep_bind(o.ep, av_fid, 0), 0);
    assert_eq!(
        ep_bind(o.ep, cq_fid, (sys::FI_TRANSMIT | sys::FI_RECV) as u64),
        0
    );
    assert_eq!(enable(o.ep), 0);
    // Our own address into the AV.
    let mut name = [0u8; 64];
    let mut len = name.len();
    // SAFETY: our endpoint's cm table; a buffer of `len` bytes.
    let rc = unsafe {
        (*(*o.ep).cm).getname.unwrap()(&mut (*o.ep).fid, name.as_mut_ptr().cast(), &mut len)
    };
    assert_eq!((rc, len), (0, 8));
    let mut small = 4usize;
    // SAFETY: as above, with a buffer too small.
    let rc = unsafe {
        (*(*o.ep).cm).getname.unwrap()(&mut (*o.ep).fid, name.as_mut_ptr().cast(), &mut small)
    };
    assert_eq!((rc, small), (neg(sys::FI_ETOOSMALL), 8));
    let mut me: sys::fi_addr_t = 0;
    // SAFETY: our AV's table; one 8-byte address.
    let n = unsafe {
        (*(*o.av).ops).insert.unwrap()(o.av, name.as_ptr().cast(), 1, &mut me, 0, null_mut())
    };
    assert_eq!(n, 1);
    // A receive and a send, each with its own FI_CONTEXT.
    let mut rx_ctx = sys::fi_context::default();
    let mut tx_ctx = sys::fi_context::default();
    let mut rbuf = [0u8; 32];
    let msg = *b"psmrail through C";
    // SAFETY: the buffers and contexts outlive the operations (we read
    // both completions below before they go out of scope).
    unsafe {
        let t = &*(*o.ep).tagged;
        let rc = t.recv.unwrap()(
            o.ep,
            rbuf.as_mut_ptr().cast(),
            rbuf.len(),
            null_mut(),
            sys::FI_ADDR_NOTAVAIL,
            0x77,
            0,
            (&mut rx_ctx as *mut sys::fi_context).cast(),
        );
        assert_eq!(rc, 0);
        let rc = t.send.unwrap()(
            o.ep,
            msg.as_ptr().cast(),
            msg.len(),
            null_mut(),
            me,
            0x77,
            (&mut tx_ctx as *mut sys::fi_context).cast(),
        );
        assert_eq!(rc, 0);
    }
    // A read with no room is refused; then both completions arrive.
    // SAFETY: our CQ's table; a null buffer with a count.
    let rc = unsafe { (*(*o.cq).ops).read.unwrap()(o.cq, null_mut(), 1) };
    assert_eq!(rc, -(sys::FI_EINVAL as isize));
    let mut got = Vec::new();
    for _ in 0..100_000 {
        let mut e = [sys::fi_cq_tagged_entry::default(); 2];
        // SAFETY: room for two tagged entries.
        let n = unsafe { (*(*o.cq).ops).read.unwrap()(o.cq, e.as_mut_ptr().cast(), 2) };
        if n > 0 {
            got.extend_from_slice(&e[..n as usize]);
        } else {
            assert_eq!(n, -(sys::FI_EAGAIN as isize));
        }
        if got.len() == 2 {
            break;
        }
    }
    assert_eq!(got.len(), 2, "both completions");
    let rx = got
        .iter()
        .find(|e| e.flags & sys::FI_RECV as u64 != 0)
        .expect("a receive completion");
    assert_eq!(
        rx.op_context,
        (&mut rx_ctx as *mut sys::fi_context).cast::<c_void>()
    );
    assert_eq!((rx.len, rx.tag), (msg.len(), 0x77));
    assert_eq!(rx.buf, rbuf.as_mut_ptr().cast::<c_void>());
    assert_eq!(&rbuf[..msg.len()], &msg);
    let tx = got
        .iter()
        .find(|e| e.flags & sys::FI_SEND as u64 != 0)
        .expect("a send completion");
    assert_eq!(
        tx.op_context,
        (&mut tx_ctx as *mut sys::fi_context).cast::<c_void>()
    );
    // The contexts are the application's: untouched.
    assert_eq!(rx_ctx.internal, [null_mut(); 4]);
    assert_eq!(tx_ctx.internal, [null_mut(); 4]);

    // Closing order: the domain and the CQ are busy while the endpoint is
    // open; a second close of the endpoint is an error, not a crash.
    assert_eq!(close(o.domain.cast()), neg(sys::FI_EBUSY));
    assert_eq!(close(cq_fid), neg(sys::FI_EBUSY));
    assert_eq!(close(o.ep.cast()), 0);
    assert_eq!(close(o.ep.cast()), neg(sys::FI_EINVAL));
    assert_eq!(close(o.fabric.cast()), neg(sys::FI_EBUSY));
    assert_eq!(close(av_fid), 0);
    assert_eq!(close(cq_fid), 0);
    assert_eq!(close(o.domain.cast()), 0);
    assert_eq!(close(o.fabric.cast()), 0);
    assert_eq!(close(o.fabric.cast()), neg(sys::FI_EINVAL));
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

#[test]
fn memory_region_keys_are_unique_in_a_domain() {
    let p = setup();
    let o = open_all(p);
    let buf = [0u8; 64];
    let mut mr1 = null_mut();
    let mut mr2 = null_mut();
    // SAFETY: our domain's MR table with valid arguments.
    unsafe {
        let m = &*(*o.domain).mr;
        let d = &mut (*o.domain).fid as *mut sys::fid;
        assert_eq!(
            m.reg.unwrap()(
                d,
                buf.as_ptr().cast(),
                64,
                sys::FI_SEND as u64,
                0,
                5,
                0,
                &mut mr1,
                null_mut()
            ),
            0
        );
        assert_eq!((*mr1).key, 5);
        assert_eq!(
            m.reg.unwrap()(
                d,
                buf.as_ptr().cast(),
                64,
                sys::FI_SEND as u64,
                0,
                5,
                0,
                &mut mr2,
                null_mut()
            ),
            neg(sys::FI_ENOKEY)
        );
        assert_eq!(
            m.reg.unwrap()(
                d,
                buf.as_ptr().cast(),
                64,
                1 << 40,
                0,
                6,
                0,
                &mut mr2,
                null_mut()
            ),
            neg(sys::FI_EINVAL)
        );
    }
    assert_eq!(close(o.domain.cast()), neg(sys::FI_EBUSY));
    assert_eq!(close(mr1.cast()), 0);
    assert_eq!(close(o.ep.cast()), 0);
    assert_eq!(close(o.av.cast()), 0);
    assert_eq!(close(o.cq.cast()), 0);
    assert_eq!(close(o.domain.cast()), 0);
    assert_eq!(close(o.fabric.cast()), 0);
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

/// Binds `o`'s AV and CQ, enables the endpoint and inserts its own
/// address: our `fi_addr` back.
fn ready(o: &Objects) -> sys::fi_addr_t {
    assert_eq!(ep_bind(o.ep, o.av.cast(), 0), 0);
    let both = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
    assert_eq!(ep_bind(o.ep, o.cq.cast(), both), 0);
    assert_eq!(enable(o.ep), 0);
    insert(o, &name(o))
}

/// The endpoint's address.
fn name(o: &Objects) -> Vec<u8> {
    let mut name = vec![0u8; 64];
    let mut len = name.len();
    // SAFETY: our endpoint's cm table; a buffer of `len` bytes.
    let rc = unsafe {
        (*(*o.ep).cm).getname.unwrap()(&mut (*o.ep).fid, name.as_mut_ptr().cast(), &mut len)
    };
    assert_eq!(rc, 0);
    name.truncate(len);
    name
}

/// `addr` into `o`'s AV.
fn insert(o: &Objects, addr: &[u8]) -> sys::fi_addr_t {
    let mut fi: sys::fi_addr_t = 0;
    // SAFETY: our AV's table; one address.
    let n = unsafe {
        (*(*o.av).ops).insert.unwrap()(o.av, addr.as_ptr().cast(), 1, &mut fi, 0, null_mut())
    };
    assert_eq!(n, 1);
    fi
}

/// The next completion of `o`'s CQ: an entry, or the error entry.
fn next(o: &Objects) -> Result<sys::fi_cq_tagged_entry, sys::fi_cq_err_entry> {
    for _ in 0..1_000_000 {
        let mut e = sys::fi_cq_tagged_entry::default();
        // SAFETY: room for one tagged entry.
        let n = unsafe {
            (*(*o.cq).ops).read.unwrap()(o.cq, (&mut e as *mut sys::fi_cq_tagged_entry).cast(), 1)
        };
        if n == 1 {
            return Ok(e);
        }
        if n == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: room for one error entry.
            let n = unsafe { (*(*o.cq).ops).readerr.unwrap()(o.cq, &mut err, 0) };
            assert_eq!(n, 1);
            return Err(err);
        }
        assert_eq!(n, -(sys::FI_EAGAIN as isize));
    }
    panic!("no completion came");
}

/// The next receive completion (send completions are skipped).
fn next_recv(o: &Objects) -> Result<sys::fi_cq_tagged_entry, sys::fi_cq_err_entry> {
    loop {
        match next(o) {
            Ok(e) if e.flags & sys::FI_SEND as u64 != 0 => continue,
            other => return other,
        }
    }
}

fn ctx_of(c: &mut sys::fi_context) -> *mut c_void {
    (c as *mut sys::fi_context).cast()
}

fn close_all(o: Objects) {
    for fid in [
        o.ep.cast(),
        o.av.cast(),
        o.cq.cast(),
        o.domain.cast(),
        o.fabric.cast(),
    ] {
        assert_eq!(close(fid), 0);
    }
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

/// `fi_inject` of `data` to `dest`.
fn inject(o: &Objects, data: &[u8], dest: sys::fi_addr_t) {
    // SAFETY: our endpoint's msg table; `data` is read before the return.
    let rc =
        unsafe { (*(*o.ep).msg).inject.unwrap()(o.ep, data.as_ptr().cast(), data.len(), dest) };
    assert_eq!(rc, 0);
}

/// `fi_recvmsg` of one buffer with `flags`.
fn recvmsg(
    o: &Objects,
    buf: &mut [u8],
    src: sys::fi_addr_t,
    ctx: *mut c_void,
    flags: u64,
) -> isize {
    let iov = sys::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let msg = sys::fi_msg {
        msg_iov: &iov,
        iov_count: 1,
        addr: src,
        context: ctx,
        ..Default::default()
    };
    // SAFETY: our endpoint's msg table; the buffer and context outlive the
    // operation (the callers read its completions first).
    unsafe { (*(*o.ep).msg).recvmsg.unwrap()(o.ep, &msg, flags) }
}

#[test]
fn a_multi_receive_buffer_takes_several_messages_and_is_released() {
    let p = setup();
    let o = open_caps(p, (sys::FI_MSG | sys::FI_MULTI_RECV) as u64, |_| {});
    // SAFETY: an info we answered.
    assert_ne!(unsafe { (*o.info).caps } & sys::FI_MULTI_RECV as u64, 0);
    let me = ready(&o);
    let min: usize = 16;
    // SAFETY: our endpoint; a size_t option.
    let rc = unsafe {
        (*(*o.ep).ops).setopt.unwrap()(
            &mut (*o.ep).fid,
            sys::FI_OPT_ENDPOINT as c_int,
            sys::FI_OPT_MIN_MULTI_RECV as c_int,
            (&min as *const usize).cast(),
            std::mem::size_of::<usize>(),
        )
    };
    assert_eq!(rc, 0);
    let multi = sys::FI_MULTI_RECV as u64;
    // Refused: a block under the minimum, a null buffer, unknown flags.
    let mut ctx = sys::fi_context::default();
    let mut small = [0u8; 8];
    assert_eq!(
        recvmsg(&o, &mut small, 0, ctx_of(&mut ctx), multi),
        -(sys::FI_EINVAL as isize)
    );
    assert_eq!(
        recvmsg(&o, &mut [], 0, ctx_of(&mut ctx), multi),
        -(sys::FI_EINVAL as isize)
    );
    assert_eq!(
        recvmsg(&o, &mut small, 0, ctx_of(&mut ctx), 1 << 40),
        -(sys::FI_EBADFLAGS as isize)
    );
    // SAFETY: a null message, which the provider must refuse.
    let rc = unsafe { (*(*o.ep).msg).recvmsg.unwrap()(o.ep, null(), multi) };
    assert_eq!(rc, -(sys::FI_EINVAL as isize));

    // 64 bytes, four 16-byte messages: the fourth leaves 0 < 16 free.
    let mut block = [0u8; 64];
    assert_eq!(recvmsg(&o, &mut block, 0, ctx_of(&mut ctx), multi), 0);
    for i in 0..4u8 {
        inject(&o, &[i; 16], me);
    }
    let base = block.as_mut_ptr();
    for i in 0..4usize {
        let e = next_recv(&o).unwrap_or_else(|e| panic!("message {i}: error {}", e.err));
        assert_eq!(e.op_context, ctx_of(&mut ctx));
        assert_eq!(e.len, 16);
        assert_eq!(
            e.buf,
            base.wrapping_add(16 * i).cast::<c_void>(),
            "message {i} at its place"
        );
        assert_ne!(e.flags & (sys::FI_RECV | sys::FI_MSG) as u64, 0);
        assert_eq!(
            e.flags & multi != 0,
            i == 3,
            "released after the fourth only"
        );
    }
    for (i, part) in block.chunks(16).enumerate() {
        assert_eq!(part, &[i as u8; 16]);
    }

    // A second block, cancelled before anything came: one error entry.
    let mut other = [0u8; 32];
    let mut ctx2 = sys::fi_context::default();
    assert_eq!(recvmsg(&o, &mut other, 0, ctx_of(&mut ctx2), multi), 0);
    // SAFETY: our endpoint's ops table.
    let rc = unsafe { (*(*o.ep).ops).cancel.unwrap()(&mut (*o.ep).fid, ctx_of(&mut ctx2)) };
    assert_eq!(rc, 0);
    let err = next_recv(&o).expect_err("the cancellation");
    assert_eq!(
        (err.err, err.op_context),
        (sys::FI_ECANCELED as c_int, ctx_of(&mut ctx2))
    );
    assert_ne!(err.flags & multi, 0);
    close_all(o);
}

/// `fi_trecvmsg` for `tag` with `flags`, into `buf` (none: no iovec).
fn trecvmsg(o: &Objects, buf: Option<&mut [u8]>, tag: u64, ctx: *mut c_void, flags: u64) -> isize {
    let mut iov = sys::iovec::default();
    let count = match buf {
        Some(b) => {
            iov.iov_base = b.as_mut_ptr().cast();
            iov.iov_len = b.len();
            1
        }
        None => 0,
    };
    let msg = sys::fi_msg_tagged {
        msg_iov: &iov,
        iov_count: count,
        addr: sys::FI_ADDR_NOTAVAIL,
        tag,
        context: ctx,
        ..Default::default()
    };
    // SAFETY: our endpoint's tagged table; the buffer and context outlive
    // the operation (completions are read right after).
    unsafe { (*(*o.ep).tagged).recvmsg.unwrap()(o.ep, &msg, flags) }
}

/// A peek with `flags` for `tag`, repeated until a message is found.
fn peek_found(o: &Objects, tag: u64, ctx: *mut c_void, flags: u64) -> sys::fi_cq_tagged_entry {
    loop {
        assert_eq!(trecvmsg(o, None, tag, ctx, flags), 0);
        match next_recv(o) {
            Ok(e) => return e,
            Err(e) => assert_eq!(e.err, sys::FI_ENOMSG as c_int),
        }
    }
}

#[test]
fn peek_claim_and_discard_as_fi_tagged_defines_them() {
    let p = setup();
    let o = open_all(p);
    let me = ready(&o);
    let peek = sys::FI_PEEK as u64;
    let (claim, discard) = (sys::FI_CLAIM, sys::FI_DISCARD);
    let mut ctx = sys::fi_context::default();
    let c = ctx_of(&mut ctx);
    // Nothing queued: an FI_ENOMSG error entry, with or without a claim.
    for flags in [peek, peek | claim] {
        assert_eq!(trecvmsg(&o, None, 5, c, flags), 0);
        let e = next_recv(&o).expect_err("nothing to peek");
        assert_eq!((e.err, e.op_context), (sys::FI_ENOMSG as c_int, c));
    }
    let tinject = |data: &[u8], tag: u64| {
        // SAFETY: our endpoint's tagged table; `data` is read at once.
        let rc = unsafe {
            (*(*o.ep).tagged).inject.unwrap()(o.ep, data.as_ptr().cast(), data.len(), me, tag)
        };
        assert_eq!(rc, 0);
    };
    tinject(b"first", 5);
    tinject(b"second", 6);
    tinject(b"third", 7);
    // A peek finds the message and leaves it; a claim takes it.
    let e = peek_found(&o, 5, c, peek);
    assert_eq!((e.len, e.tag, e.op_context), (5, 5, c));
    assert_ne!(e.flags & (sys::FI_RECV | sys::FI_TAGGED) as u64, 0);
    let e = peek_found(&o, 5, c, peek | claim);
    assert_eq!((e.len, e.tag), (5, 5));
    assert_eq!(trecvmsg(&o, None, 5, c, peek), 0);
    assert_eq!(
        next_recv(&o).expect_err("claimed").err,
        sys::FI_ENOMSG as c_int
    );
    // FI_CLAIM with another context holds nothing; with ours, the message.
    let mut other = sys::fi_context::default();
    let mut buf = [0u8; 16];
    assert_eq!(
        trecvmsg(&o, Some(&mut buf), 5, ctx_of(&mut other), claim),
        -(sys::FI_EINVAL as isize)
    );
    assert_eq!(trecvmsg(&o, Some(&mut buf), 5, c, claim), 0);
    let e = next_recv(&o).expect("the claimed message");
    assert_eq!((e.len, e.tag, e.op_context), (5, 5, c));
    assert_eq!(&buf[..5], b"first");
    // Peek and discard: a completion, and the message is gone.
    let e = peek_found(&o, 6, c, peek | discard);
    assert_eq!(e.tag, 6);
    assert_eq!(trecvmsg(&o, None, 6, c, peek), 0);
    assert_eq!(
        next_recv(&o).expect_err("discarded").err,
        sys::FI_ENOMSG as c_int
    );
    // Claim, then discard the claimed message: a completion without data.
    peek_found(&o, 7, c, peek | claim);
    assert_eq!(trecvmsg(&o, None, 7, c, claim | discard), 0);
    let e = next_recv(&o).expect("the discard");
    assert_eq!((e.len, e.op_context, e.buf), (0, c, null_mut()));
    // Refused: FI_DISCARD alone, a null message, unknown flags.
    assert_eq!(
        trecvmsg(&o, None, 7, c, discard),
        -(sys::FI_EINVAL as isize)
    );
    assert_eq!(
        trecvmsg(&o, None, 7, c, 1 << 40),
        -(sys::FI_EBADFLAGS as isize)
    );
    // SAFETY: a null message, which the provider must refuse.
    let rc = unsafe { (*(*o.ep).tagged).recvmsg.unwrap()(o.ep, null(), peek) };
    assert_eq!(rc, -(sys::FI_EINVAL as isize));
    close_all(o);
}

#[test]
fn a_directed_receive_takes_only_its_sender() {
    let p = setup();
    let caps = sys::FI_MSG as u64 | sys::FI_DIRECTED_RECV;
    // Both progress on their own: each one's first use of the other's
    // address connects while this thread is inside that call.
    let auto = |h: &mut sys::fi_info| {
        // SAFETY: hints with every attribute.
        unsafe { (*h.domain_attr).data_progress = sys::FI_PROGRESS_AUTO };
    };
    let r = open_caps(p, caps, auto);
    // SAFETY: an info we answered.
    assert_ne!(unsafe { (*r.info).caps } & sys::FI_DIRECTED_RECV, 0);
    let s = open_caps(p, sys::FI_MSG as u64, auto);
    let r_self = ready(&r);
    ready(&s);
    let r_from_s = insert(&r, &name(&s));
    let s_to_r = insert(&s, &name(&r));
    let mut ctx = sys::fi_context::default();
    let mut buf = [0u8; 16];
    // From `s` only: our own message, sent first, waits for the next.
    assert_eq!(recvmsg(&r, &mut buf, r_from_s, ctx_of(&mut ctx), 0), 0);
    inject(&r, b"from r", r_self);
    // Queued at `r` before the other one is sent.
    std::thread::sleep(std::time::Duration::from_millis(200));
    inject(&s, b"from s", s_to_r);
    let e = next_recv(&r).expect("the directed receive");
    assert_eq!((e.len, e.op_context), (6, ctx_of(&mut ctx)));
    assert_eq!(&buf[..6], b"from s");
    let mut buf2 = [0u8; 16];
    // SAFETY: our endpoint's msg table; the buffer outlives the receive.
    let rc = unsafe {
        (*(*r.ep).msg).recv.unwrap()(
            r.ep,
            buf2.as_mut_ptr().cast(),
            16,
            null_mut(),
            r_self,
            ctx_of(&mut ctx),
        )
    };
    assert_eq!(rc, 0);
    let e = next_recv(&r).expect("our own message");
    assert_eq!(e.len, 6);
    assert_eq!(&buf2[..6], b"from r");
    close_all(s);
    close_all(r);
}

/// Manual progress on both sides, and nobody drives the receiver: the
/// sender's first message connects anyway (the domain's idle assist
/// answers for the receiver, as it must for a libfabric program blocked on
/// its control socket), in far less than the connect timeout; the message
/// waits there until the receiver looks.
#[test]
fn a_first_message_connects_to_a_peer_that_is_not_progressing() {
    let p = setup();
    let manual = |h: &mut sys::fi_info| {
        // SAFETY: hints with every attribute.
        unsafe { (*h.domain_attr).data_progress = sys::FI_PROGRESS_MANUAL };
    };
    let r = open_caps(p, sys::FI_MSG as u64, manual);
    let s = open_caps(p, sys::FI_MSG as u64, manual);
    ready(&r);
    ready(&s);
    let s_to_r = insert(&s, &name(&r));
    let start = std::time::Instant::now();
    inject(&s, b"hello r", s_to_r);
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(10),
        "the first message took {took:?} to connect"
    );
    let mut ctx = sys::fi_context::default();
    let mut buf = [0u8; 16];
    assert_eq!(
        recvmsg(&r, &mut buf, sys::FI_ADDR_NOTAVAIL, ctx_of(&mut ctx), 0),
        0
    );
    let e = next_recv(&r).expect("the message");
    assert_eq!(e.len, 7);
    assert_eq!(&buf[..7], b"hello r");
    close_all(s);
    close_all(r);
}

#[test]
fn rma_to_ourselves_writes_reads_and_carries_cq_data() {
    let p = setup();
    let o = open_with(p, (sys::FI_TAGGED | sys::FI_RMA) as u64);
    // SAFETY: the info we opened with.
    unsafe {
        let i = &*o.info;
        assert_ne!(i.caps & sys::FI_RMA as u64, 0);
        assert_eq!(
            (*i.domain_attr).cq_data_size,
            4,
            "fi_psm(7)'s remote CQ data size"
        );
    }
    let me = enable_to_self(&o);
    let mut target = vec![0u8; 64];
    let mr = mr_reg(&o, target.as_mut_ptr(), 64, REMOTE, 0, 9).expect("a region peers reach");
    // SAFETY: a region we registered.
    assert_eq!(unsafe { (*mr).key }, 9);
    let rma = o.ep;
    let mut wctx = sys::fi_context::default();
    let data = *b"written in place";
    // SAFETY: our RMA table; the buffer and context outlive the operation.
    let rc = unsafe {
        (*(*rma).rma).write.unwrap()(
            rma,
            data.as_ptr().cast(),
            data.len(),
            null_mut(),
            me,
            8,
            9,
            ctx_ptr(&mut wctx),
        )
    };
    assert_eq!(rc, 0);
    let c = completions(o.cq, 1).expect("a write completion");
    assert_eq!(c[0].op_context, ctx_ptr(&mut wctx));
    assert_eq!(c[0].flags, (sys::FI_RMA | sys::FI_WRITE) as u64);
    assert_eq!(&target[8..8 + data.len()], &data);

    let mut back = [0u8; 16];
    let mut rctx = sys::fi_context::default();
    // SAFETY: as above, into `back`.
    let rc = unsafe {
        (*(*rma).rma).read.unwrap()(
            rma,
            back.as_mut_ptr().cast(),
            16,
            null_mut(),
            me,
            8,
            9,
            ctx_ptr(&mut rctx),
        )
    };
    assert_eq!(rc, 0);
    let c = completions(o.cq, 1).expect("a read completion");
    assert_eq!(
        (c[0].op_context, c[0].flags),
        (ctx_ptr(&mut rctx), (sys::FI_RMA | sys::FI_READ) as u64)
    );
    assert_eq!(back, data);

    // fi_writedata: the transmit completion and the target's remote CQ data
    // (one CQ for both directions here).
    let mut dctx = sys::fi_context::default();
    // SAFETY: as above.
    let rc = unsafe {
        (*(*rma).rma).writedata.unwrap()(
            rma,
            data.as_ptr().cast(),
            4,
            null_mut(),
            0xabcd,
            me,
            0,
            9,
            ctx_ptr(&mut dctx),
        )
    };
    assert_eq!(rc, 0);
    let c = completions(o.cq, 2).expect("two completions");
    let remote = c
        .iter()
        .find(|e| e.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0)
        .expect("the target's remote CQ data");
    assert_eq!(remote.data, 0xabcd);
    assert_eq!(
        remote.flags,
        (sys::FI_RMA | sys::FI_REMOTE_WRITE) as u64 | sys::FI_REMOTE_CQ_DATA as u64
    );
    assert_eq!(remote.len, 4);
    assert!(c.iter().any(|e| e.op_context == ctx_ptr(&mut dctx)));
    assert_eq!(&target[..4], b"writ");

    // A key no region has: an error completion with the context, no crash.
    for read in [false, true] {
        let mut bctx = sys::fi_context::default();
        // SAFETY: as above.
        let rc = unsafe {
            let t = &*(*rma).rma;
            if read {
                t.read.unwrap()(
                    rma,
                    back.as_mut_ptr().cast(),
                    16,
                    null_mut(),
                    me,
                    0,
                    77,
                    ctx_ptr(&mut bctx),
                )
            } else {
                t.write.unwrap()(
                    rma,
                    data.as_ptr().cast(),
                    16,
                    null_mut(),
                    me,
                    0,
                    77,
                    ctx_ptr(&mut bctx),
                )
            }
        };
        assert_eq!(rc, 0);
        let err = completions(o.cq, 1).expect_err("an error completion");
        assert_eq!(err.op_context, ctx_ptr(&mut bctx));
        assert_eq!(err.err, sys::FI_EACCES as c_int);
    }
    // A range past the region's end.
    let mut ectx = sys::fi_context::default();
    // SAFETY: as above.
    let rc = unsafe {
        (*(*rma).rma).write.unwrap()(
            rma,
            data.as_ptr().cast(),
            16,
            null_mut(),
            me,
            56,
            9,
            ctx_ptr(&mut ectx),
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(
        completions(o.cq, 1).expect_err("out of range").err,
        sys::FI_EACCES as c_int
    );
    close_objects(o, &[mr]);
}

#[test]
fn rma_refuses_bad_input() {
    let p = setup();
    let o = open_with(p, (sys::FI_TAGGED | sys::FI_RMA) as u64);
    let mut buf = vec![0u8; 256];
    // Before enable: a state error.
    // SAFETY: our RMA table.
    let rc = unsafe {
        (*(*o.ep).rma).write.unwrap()(
            o.ep,
            buf.as_ptr().cast(),
            8,
            null_mut(),
            0,
            0,
            1,
            null_mut(),
        )
    };
    assert_eq!(rc, -(sys::FI_EOPBADSTATE as isize));
    let me = enable_to_self(&o);
    let mr = mr_reg(&o, buf.as_mut_ptr(), 64, REMOTE, 0, 3).unwrap();
    // Remote access needs offset 0 and one buffer; keys stay unique.
    assert_eq!(
        mr_reg(&o, buf.as_mut_ptr(), 64, REMOTE, 4096, 4).unwrap_err(),
        neg(sys::FI_EINVAL)
    );
    assert_eq!(
        mr_reg(&o, buf.as_mut_ptr(), 64, REMOTE, 0, 3).unwrap_err(),
        neg(sys::FI_ENOKEY)
    );
    assert_eq!(
        mr_reg(&o, null_mut(), 64, REMOTE, 0, 5).unwrap_err(),
        neg(sys::FI_EINVAL)
    );
    let iov = [
        sys::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: 8,
        },
        sys::iovec {
            iov_base: buf[128..].as_mut_ptr().cast(),
            iov_len: 8,
        },
    ];
    let mut mr2 = null_mut();
    // SAFETY: our MR table, two iovecs.
    let rc = unsafe {
        (*(*o.domain).mr).regv.unwrap()(
            &mut (*o.domain).fid,
            iov.as_ptr(),
            2,
            REMOTE,
            0,
            6,
            0,
            &mut mr2,
            null_mut(),
        )
    };
    assert_eq!(rc, neg(sys::FI_EOPNOTSUPP));
    // A raw key into too small a buffer.
    let mut key = [0u8; 2];
    let mut size = key.len();
    let mut raw = sys::fi_mr_raw_attr {
        flags: 0,
        base_addr: null_mut(),
        raw_key: key.as_mut_ptr(),
        key_size: &mut size,
    };
    // SAFETY: our region's control with a raw-attribute structure.
    let rc = unsafe {
        (*(*mr).fid.ops).control.unwrap()(
            &mut (*mr).fid,
            sys::FI_GET_RAW_MR as c_int,
            (&mut raw as *mut sys::fi_mr_raw_attr).cast(),
        )
    };
    assert_eq!((rc, size), (neg(sys::FI_ETOOSMALL), 8));
    // SAFETY: every call below is through our endpoint's RMA table with
    // null or small arguments the provider must refuse.
    unsafe {
        let t = &*(*o.ep).rma;
        let inval = -(sys::FI_EINVAL as isize);
        assert_eq!(
            t.write.unwrap()(o.ep, null(), 8, null_mut(), me, 0, 3, null_mut()),
            inval
        );
        assert_eq!(
            t.read.unwrap()(o.ep, null_mut(), 8, null_mut(), me, 0, 3, null_mut()),
            inval
        );
        assert_eq!(t.writemsg.unwrap()(o.ep, null(), 0), inval);
        assert_eq!(t.readmsg.unwrap()(o.ep, null(), 0), inval);
        let mut v = sys::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: 8,
        };
        let r = sys::fi_rma_iov {
            addr: 0,
            len: 8,
            key: 3,
        };
        let mut m = sys::fi_msg_rma {
            msg_iov: &mut v,
            desc: null_mut(),
            iov_count: 1,
            addr: me,
            rma_iov: &r,
            rma_iov_count: 0,
            context: null_mut(),
            data: 0,
        };
        assert_eq!(t.writemsg.unwrap()(o.ep, &m, 0), inval, "no remote range");
        m.rma_iov_count = 1;
        assert_eq!(
            t.writemsg.unwrap()(o.ep, &m, 1 << 40),
            -(sys::FI_EBADFLAGS as isize)
        );
        assert_eq!(
            t.readmsg.unwrap()(o.ep, &m, sys::FI_INJECT as u64),
            -(sys::FI_EBADFLAGS as isize)
        );
        assert_eq!(
            t.readmsg.unwrap()(o.ep, &m, sys::FI_REMOTE_CQ_DATA as u64),
            -(sys::FI_EBADFLAGS as isize)
        );
        m.iov_count = 2;
        assert_eq!(t.writemsg.unwrap()(o.ep, &m, 0), inval, "one local buffer");
        let big = vec![0u8; 4096];
        assert_eq!(
            t.inject.unwrap()(o.ep, big.as_ptr().cast(), big.len(), me, 0, 3),
            -(sys::FI_EMSGSIZE as isize)
        );
        // An unknown destination.
        assert!(
            t.write.unwrap()(
                o.ep,
                buf.as_ptr().cast(),
                8,
                null_mut(),
                1 << 50,
                0,
                3,
                null_mut()
            ) < 0
        );
        // A closed endpoint's kept block: an error, not a crash.
    }
    close_objects(o, &[mr]);
}

#[test]
fn atomics_fetch_in_place_and_refuse_what_psm_does_not_carry() {
    let p = setup();
    let o = open_with(p, (sys::FI_TAGGED | sys::FI_ATOMIC) as u64);
    let me = enable_to_self(&o);
    let mut target = 40u64.to_ne_bytes();
    let mr = mr_reg(&o, target.as_mut_ptr(), 8, REMOTE, 0, 11).unwrap();
    let operand = 2u64.to_ne_bytes();
    let mut old = [0u8; 8];
    let mut ctx = sys::fi_context::default();
    // SAFETY: our atomic table; the buffers and context outlive the operation.
    unsafe {
        let a = &*(*o.ep).atomic;
        let mut count = 0usize;
        assert_eq!(
            a.readwritevalid.unwrap()(o.ep, sys::FI_UINT64, sys::FI_SUM, &mut count),
            0
        );
        assert!(count >= 1);
        assert_eq!(
            a.writevalid.unwrap()(o.ep, sys::FI_INT128, sys::FI_SUM, &mut count),
            neg(sys::FI_EOPNOTSUPP)
        );
        assert_eq!(
            a.writevalid.unwrap()(o.ep, sys::FI_DOUBLE, sys::FI_BAND, &mut count),
            neg(sys::FI_EOPNOTSUPP)
        );
        assert_eq!(
            a.writevalid.unwrap()(o.ep, sys::FI_UINT64, sys::FI_SUM, null_mut()),
            neg(sys::FI_EINVAL)
        );
        let mut attr = sys::fi_atomic_attr::default();
        let rc = (*(*o.domain).ops).query_atomic.unwrap()(
            o.domain,
            sys::FI_UINT64,
            sys::FI_SUM,
            &mut attr,
            sys::FI_FETCH_ATOMIC,
        );
        assert_eq!((rc, attr.size), (0, 8));
        let rc = a.readwrite.unwrap()(
            o.ep,
            operand.as_ptr().cast(),
            1,
            null_mut(),
            old.as_mut_ptr().cast(),
            null_mut(),
            me,
            0,
            11,
            sys::FI_UINT64,
            sys::FI_SUM,
            ctx_ptr(&mut ctx),
        );
        assert_eq!(rc, 0);
        // Too many elements (refused before a byte is read), and a null
        // operand.
        let rc = a.write.unwrap()(
            o.ep,
            operand.as_ptr().cast(),
            1 << 20,
            null_mut(),
            me,
            0,
            11,
            sys::FI_UINT64,
            sys::FI_SUM,
            null_mut(),
        );
        assert_eq!(rc, -(sys::FI_EMSGSIZE as isize));
        let rc = a.write.unwrap()(
            o.ep,
            null(),
            1,
            null_mut(),
            me,
            0,
            11,
            sys::FI_UINT64,
            sys::FI_SUM,
            null_mut(),
        );
        assert_eq!(rc, -(sys::FI_EINVAL as isize));
    }
    let c = completions(o.cq, 1).expect("a fetch completion");
    assert_eq!(
        (c[0].op_context, c[0].flags),
        (ctx_ptr(&mut ctx), (sys::FI_ATOMIC | sys::FI_READ) as u64)
    );
    assert_eq!(u64::from_ne_bytes(old), 40);
    assert_eq!(u64::from_ne_bytes(target), 42);
    close_objects(o, &[mr]);
}

/// A counter of `o`'s domain.
fn cntr_open(o: &Objects) -> *mut sys::fid_cntr {
    let mut c = null_mut();
    let mut attr = sys::fi_cntr_attr::default();
    // SAFETY: our domain's table with a valid attribute structure.
    let rc =
        unsafe { (*(*o.domain).ops).cntr_open.unwrap()(o.domain, &mut attr, &mut c, null_mut()) };
    assert_eq!(rc, 0);
    c
}

fn cntr_add(c: *mut sys::fid_cntr, v: u64) {
    // SAFETY: an open counter of ours.
    assert_eq!(unsafe { (*(*c).ops).add.unwrap()(c, v) }, 0);
}

fn cntr_read(c: *mut sys::fid_cntr) -> u64 {
    // SAFETY: an open counter of ours.
    unsafe { (*(*c).ops).read.unwrap()(c) }
}

/// A triggered context: `threshold` of `cntr`.
fn trig(cntr: *mut sys::fid_cntr, threshold: usize) -> Box<sys::fi_triggered_context> {
    // SAFETY: a plain C structure, for which zero bytes are valid.
    let mut t: Box<sys::fi_triggered_context> = Box::new(unsafe { std::mem::zeroed() });
    t.event_type = sys::FI_TRIGGER_THRESHOLD;
    t.trigger.threshold = sys::fi_trigger_threshold { cntr, threshold };
    t
}

fn trig_ptr(t: &mut sys::fi_triggered_context) -> *mut c_void {
    (t as *mut sys::fi_triggered_context).cast()
}

/// `fi_tsendmsg` of `data` to `dest` with `tag`, `ctx` and `flags`.
fn tsendmsg(
    ep: *mut sys::fid_ep,
    data: &[u8],
    dest: sys::fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
    flags: u64,
) -> isize {
    let iov = sys::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let msg = sys::fi_msg_tagged {
        msg_iov: &iov,
        iov_count: 1,
        addr: dest,
        tag,
        context: ctx,
        ..Default::default()
    };
    // SAFETY: our endpoint's tagged table; the data and context outlive
    // the operation (the callers read its completion first).
    unsafe { (*(*ep).tagged).sendmsg.unwrap()(ep, &msg, flags) }
}

/// `fi_trecv` of `buf` for exactly `tag`.
fn trecv(ep: *mut sys::fid_ep, buf: &mut [u8], tag: u64, ctx: *mut c_void) -> isize {
    // SAFETY: our endpoint's tagged table; the buffer and context outlive
    // the operation.
    unsafe {
        (*(*ep).tagged).recv.unwrap()(
            ep,
            buf.as_mut_ptr().cast(),
            buf.len(),
            null_mut(),
            sys::FI_ADDR_NOTAVAIL,
            tag,
            0,
            ctx,
        )
    }
}

/// `fi_write` of `data` to offset `addr` of the region `key` at `dest`.
fn write(
    ep: *mut sys::fid_ep,
    data: &[u8],
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: our endpoint's RMA table; the data and context outlive the
    // operation.
    unsafe {
        (*(*ep).rma).write.unwrap()(
            ep,
            data.as_ptr().cast(),
            data.len(),
            null_mut(),
            dest,
            addr,
            key,
            ctx,
        )
    }
}

/// `fi_ep_alias` of `ep` with `flags`.
fn ep_alias(ep: *mut sys::fid_ep, flags: u64) -> Result<*mut sys::fid_ep, c_int> {
    let mut alias: *mut sys::fid_ep = null_mut();
    let mut a = sys::fi_alias {
        fid: (&mut alias as *mut *mut sys::fid_ep).cast(),
        flags,
    };
    // SAFETY: our endpoint's control with a valid fi_alias.
    let rc = unsafe {
        (*(*ep).fid.ops).control.unwrap()(
            &mut (*ep).fid,
            sys::FI_ALIAS as c_int,
            (&mut a as *mut sys::fi_alias).cast(),
        )
    };
    if rc == 0 {
        Ok(alias)
    } else {
        Err(rc)
    }
}

/// Many reads of `o`'s CQ (each a progress round) find nothing.
fn quiet(o: &Objects) {
    for _ in 0..2000 {
        let mut e = sys::fi_cq_tagged_entry::default();
        // SAFETY: room for one tagged entry.
        let n = unsafe {
            (*(*o.cq).ops).read.unwrap()(o.cq, (&mut e as *mut sys::fi_cq_tagged_entry).cast(), 1)
        };
        assert_eq!(n, -(sys::FI_EAGAIN as isize), "a completion came: {e:?}");
    }
}

const TRIGGER: u64 = sys::FI_TRIGGER as u64;

#[test]
fn trigger_fires_a_send_and_a_write_once_at_the_threshold() {
    let p = setup();
    let o = open_with(p, (sys::FI_TAGGED | sys::FI_RMA | sys::FI_TRIGGER) as u64);
    // SAFETY: the info we opened with.
    let caps = unsafe { (*o.info).caps };
    assert_ne!(caps & TRIGGER, 0, "psm offers FI_TRIGGER");
    let writes = cntr_open(&o);
    assert_eq!(ep_bind(o.ep, writes.cast(), sys::FI_WRITE as u64), 0);
    let me = enable_to_self(&o);
    let gate = cntr_open(&o);

    // A triggered tagged send at 2 of `gate`: nothing moves before.
    let data = *b"triggered";
    let mut tctx = trig(gate, 2);
    assert_eq!(
        tsendmsg(o.ep, &data, me, 5, trig_ptr(&mut tctx), TRIGGER),
        0
    );
    let mut got = [0u8; 16];
    let mut rctx = sys::fi_context::default();
    assert_eq!(trecv(o.ep, &mut got, 5, ctx_ptr(&mut rctx)), 0);
    quiet(&o);
    cntr_add(gate, 1);
    quiet(&o);
    cntr_add(gate, 1);
    let c = completions(o.cq, 2).expect("the send and its receive");
    let send = c
        .iter()
        .find(|e| e.flags & sys::FI_SEND as u64 != 0)
        .expect("the send's completion");
    assert_eq!(
        send.op_context,
        trig_ptr(&mut tctx),
        "the triggered context"
    );
    assert_eq!(send.flags, (sys::FI_SEND | sys::FI_TAGGED) as u64);
    let recv = c
        .iter()
        .find(|e| e.op_context == ctx_ptr(&mut rctx))
        .expect("the receive's completion");
    assert_eq!((recv.len, recv.tag), (data.len(), 5));
    assert_eq!(&got[..data.len()], &data);

    // Once: the counter moving on posts nothing more.
    let mut again = [0u8; 16];
    let mut actx = sys::fi_context::default();
    assert_eq!(trecv(o.ep, &mut again, 5, ctx_ptr(&mut actx)), 0);
    cntr_add(gate, 3);
    quiet(&o);
    // SAFETY: our endpoint's table; a receive posted with this context.
    let rc = unsafe { (*(*o.ep).ops).cancel.unwrap()(&mut (*o.ep).fid, ctx_ptr(&mut actx)) };
    assert_eq!(rc, 0);
    let err = completions(o.cq, 1).expect_err("the cancelled receive");
    assert_eq!(
        (err.err, err.op_context),
        (sys::FI_ECANCELED as c_int, ctx_ptr(&mut actx))
    );

    // A threshold the counter has passed fires at once.
    let mut late = trig(gate, 4);
    assert_eq!(trecv(o.ep, &mut got, 6, ctx_ptr(&mut rctx)), 0);
    assert_eq!(
        tsendmsg(o.ep, b"late", me, 6, trig_ptr(&mut late), TRIGGER),
        0
    );
    let c = completions(o.cq, 2).expect("the late send and its receive");
    assert!(c.iter().any(|e| e.op_context == trig_ptr(&mut late)));
    assert_eq!(&got[..4], b"late");

    // An RMA write through an alias with FI_TRIGGER in its op flags (as
    // fabtests' fi_rdm_rma_trigger): it waits for the write counter, which
    // the plain write moves.
    let mut target = vec![0u8; 32];
    let mr = mr_reg(&o, target.as_mut_ptr(), 32, REMOTE, 0, 3).unwrap();
    let alias = ep_alias(o.ep, sys::FI_TRANSMIT as u64 | TRIGGER).expect("an alias");
    let mut wt = trig(writes, 1);
    let second = *b"second";
    assert_eq!(write(alias, &second, me, 0, 3, trig_ptr(&mut wt)), 0);
    quiet(&o);
    assert_eq!(&target[..6], &[0; 6]);
    assert_eq!(cntr_read(writes), 0);
    let first = *b"first!";
    let mut wctx = sys::fi_context::default();
    assert_eq!(write(o.ep, &first, me, 0, 3, ctx_ptr(&mut wctx)), 0);
    let c = completions(o.cq, 2).expect("both writes");
    let rma_write = (sys::FI_RMA | sys::FI_WRITE) as u64;
    assert!(c
        .iter()
        .any(|e| e.op_context == ctx_ptr(&mut wctx) && e.flags == rma_write));
    let triggered = c
        .iter()
        .find(|e| e.op_context == trig_ptr(&mut wt))
        .expect("the triggered write's completion");
    assert_eq!((triggered.flags, triggered.len), (rma_write, 6));
    assert_eq!(&target[..6], b"second", "written after the plain write");
    assert_eq!(cntr_read(writes), 2);
    quiet(&o);

    assert_eq!(close(o.ep.cast()), neg(sys::FI_EBUSY), "an alias is open");
    assert_eq!(close(alias.cast()), 0);
    assert_eq!(close(alias.cast()), neg(sys::FI_EINVAL));
    for fid in [
        mr.cast(),
        o.ep.cast(),
        writes.cast(),
        gate.cast(),
        o.av.cast(),
        o.cq.cast(),
        o.domain.cast(),
        o.fabric.cast(),
    ] {
        assert_eq!(close(fid), 0);
    }
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

#[test]
fn trigger_that_never_fires_is_cancelled_when_its_endpoint_closes() {
    let p = setup();
    let o = open_with(p, (sys::FI_TAGGED | sys::FI_TRIGGER) as u64);
    let me = enable_to_self(&o);
    let gate = cntr_open(&o);
    let data = [7u8; 8];
    let mut tctx = trig(gate, 1000);
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut tctx), TRIGGER),
        0
    );
    let mut buf = [0u8; 8];
    let mut rctx = trig(gate, 1000);
    assert_eq!(trecv_triggered(&o, &mut buf, trig_ptr(&mut rctx)), 0);
    quiet(&o);
    assert_eq!(close(o.ep.cast()), 0);
    // Both come back cancelled, with their contexts, and nothing else.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let err = completions(o.cq, 1).expect_err("a cancelled operation");
        assert_eq!(err.err, sys::FI_ECANCELED as c_int);
        seen.push(err.op_context);
    }
    assert!(seen.contains(&trig_ptr(&mut tctx)) && seen.contains(&trig_ptr(&mut rctx)));
    cntr_add(gate, 2000);
    quiet(&o);
    for fid in [
        gate.cast(),
        o.av.cast(),
        o.cq.cast(),
        o.domain.cast(),
        o.fabric.cast(),
    ] {
        assert_eq!(close(fid), 0);
    }
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

/// A triggered `fi_trecvmsg` of `buf` for tag 1.
fn trecv_triggered(o: &Objects, buf: &mut [u8], ctx: *mut c_void) -> isize {
    let iov = sys::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let msg = sys::fi_msg_tagged {
        msg_iov: &iov,
        iov_count: 1,
        addr: sys::FI_ADDR_NOTAVAIL,
        tag: 1,
        context: ctx,
        ..Default::default()
    };
    // SAFETY: our endpoint's tagged table; the buffer and context outlive
    // the operation.
    unsafe { (*(*o.ep).tagged).recvmsg.unwrap()(o.ep, &msg, TRIGGER) }
}

#[test]
fn trigger_refuses_bad_arguments() {
    let p = setup();
    let o = open_with(
        p,
        (sys::FI_TAGGED | sys::FI_RMA | sys::FI_ATOMIC | sys::FI_TRIGGER) as u64,
    );
    let me = enable_to_self(&o);
    let gate = cntr_open(&o);
    let data = [1u8; 4];
    let inval = -(sys::FI_EINVAL as isize);
    let notsupp = -(sys::FI_EOPNOTSUPP as isize);
    // The context: null, an unknown event type, an XPU trigger.
    assert_eq!(tsendmsg(o.ep, &data, me, 1, null_mut(), TRIGGER), inval);
    let mut t = trig(gate, 1);
    t.event_type = 99;
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );
    t.event_type = sys::FI_TRIGGER_XPU;
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        -(sys::FI_ENOSYS as isize)
    );
    // The counter: null, not a counter, closed, of another domain.
    let mut t = trig(null_mut(), 1);
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );
    let mut t = trig(o.cq.cast(), 1);
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );
    let dead = cntr_open(&o);
    assert_eq!(close(dead.cast()), 0);
    let mut t = trig(dead, 1);
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );
    let other = open_with(p, (sys::FI_TAGGED | sys::FI_TRIGGER) as u64);
    let foreign = cntr_open(&other);
    let mut t = trig(foreign, 1);
    assert_eq!(
        tsendmsg(o.ep, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );
    // What cannot be triggered, through an alias with FI_TRIGGER.
    let alias = ep_alias(o.ep, sys::FI_TRANSMIT as u64 | TRIGGER).unwrap();
    let mut t = trig(gate, 1);
    // SAFETY: our alias's tables with valid buffers (nothing is posted).
    unsafe {
        let rc = (*(*alias).msg).inject.unwrap()(alias, data.as_ptr().cast(), 4, me);
        assert_eq!(rc, notsupp);
        let rc = (*(*alias).tagged).inject.unwrap()(alias, data.as_ptr().cast(), 4, me, 1);
        assert_eq!(rc, notsupp);
        let rma = &*(*alias).rma;
        let rc = rma.inject.unwrap()(alias, data.as_ptr().cast(), 4, me, 0, 3);
        assert_eq!(rc, notsupp);
        let rc = rma.writedata.unwrap()(
            alias,
            data.as_ptr().cast(),
            4,
            null_mut(),
            9,
            me,
            0,
            3,
            trig_ptr(&mut t),
        );
        assert_eq!(rc, notsupp);
        let rc = (*(*alias).atomic).write.unwrap()(
            alias,
            data.as_ptr().cast(),
            1,
            null_mut(),
            me,
            0,
            3,
            sys::FI_UINT32,
            sys::FI_SUM,
            trig_ptr(&mut t),
        );
        assert_eq!(rc, notsupp);
    }
    // A peek cannot be triggered either.
    let iov = sys::iovec::default();
    let msg = sys::fi_msg_tagged {
        msg_iov: &iov,
        iov_count: 0,
        addr: sys::FI_ADDR_NOTAVAIL,
        tag: 1,
        context: trig_ptr(&mut t),
        ..Default::default()
    };
    // SAFETY: our endpoint's tagged table with a valid message.
    let rc =
        unsafe { (*(*o.ep).tagged).recvmsg.unwrap()(o.ep, &msg, TRIGGER | sys::FI_PEEK as u64) };
    assert_eq!(rc, notsupp);
    // An alias takes one direction.
    let both = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
    assert_eq!(
        ep_alias(o.ep, both | TRIGGER).unwrap_err(),
        neg(sys::FI_EINVAL)
    );
    assert_eq!(ep_alias(o.ep, TRIGGER).unwrap_err(), neg(sys::FI_EINVAL));
    // An alias binds nothing.
    assert_eq!(
        ep_bind(alias, gate.cast(), sys::FI_SEND as u64),
        neg(sys::FI_EINVAL)
    );
    // Nothing was deferred.
    cntr_add(gate, 10);
    quiet(&o);
    assert_eq!(close(alias.cast()), 0);
    // A closed alias posts nothing.
    assert_eq!(
        tsendmsg(alias, &data, me, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );

    // An endpoint opened without FI_TRIGGER refuses it.
    let plain = open_with(p, sys::FI_TAGGED as u64);
    // SAFETY: the info we opened with.
    let caps = unsafe { (*plain.info).caps };
    assert_eq!(caps & TRIGGER, 0, "not asked for");
    let me2 = enable_to_self(&plain);
    let pgate = cntr_open(&plain);
    let mut t = trig(pgate, 1);
    assert_eq!(
        tsendmsg(plain.ep, &data, me2, 1, trig_ptr(&mut t), TRIGGER),
        inval
    );
    assert_eq!(close(pgate.cast()), 0);
    close_all(plain);
    assert_eq!(close(foreign.cast()), 0);
    close_all(other);
    assert_eq!(close(gate.cast()), 0);
    close_all(o);
}
