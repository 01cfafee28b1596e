//! The ofi_mrail C face called as a C program calls it (in this process,
//! soft engine, two loopback rails): RMA with raw keys (`FI_MR_RAW`, which
//! fi_mrail(7) asks of applications). A library carries one provider, so
//! this is a test binary of its own.
// Built without libfabric (see build.rs), the crate has no C face to test.
#![cfg(libfabric)]

#[path = "support/c_face.rs"]
mod c_face;
use c_face::*;

use psmrail_fi::sys;
use psmrail_fi::{provider, Which};
use std::ffi::c_int;
use std::ptr::null_mut;

#[test]
fn mrail_rma_needs_raw_keys_and_maps_them() {
    std::env::set_var("PSMRAIL_ENGINE", "soft");
    std::env::set_var("FI_OFI_MRAIL_ADDR", "127.0.0.1,127.0.0.1");
    // SAFETY: the provider structure lives for the process.
    let p = unsafe { &*provider(Which::Mrail) };
    let rma = (sys::FI_TAGGED | sys::FI_RMA) as u64;
    // fi_mrail(7): FI_RMA needs an application supporting FI_MR_RAW.
    let h = tagged_hints();
    // SAFETY: our hints, freed once.
    unsafe {
        (*h).caps = rma;
        (*(*h).domain_attr).mr_mode = sys::FI_MR_LOCAL as c_int;
        assert_eq!(getinfo(p, h).unwrap_err(), neg(sys::FI_ENODATA));
        // No triggered operations in mrail's Rust API: never offered.
        (*h).caps = (sys::FI_TAGGED | sys::FI_TRIGGER) as u64;
        (*(*h).domain_attr).mr_mode = sys::FI_MR_RAW as c_int;
        assert_eq!(getinfo(p, h).unwrap_err(), neg(sys::FI_ENODATA));
        sys::fi_freeinfo(h);
    }
    let o = open_mr_mode(p, rma, sys::FI_MR_RAW);
    // SAFETY: the info we opened with.
    unsafe {
        let d = &*(*o.info).domain_attr;
        assert_eq!(d.mr_mode as u32 & sys::FI_MR_RAW, sys::FI_MR_RAW);
        assert_eq!(d.mr_key_size, 16, "one 8-byte key per rail");
        assert_eq!(d.cq_data_size, 8);
    }
    let me = enable_to_self(&o);
    let mut target = vec![0u8; 1 << 16];
    let mr = mr_reg(&o, target.as_mut_ptr(), target.len(), REMOTE, 0, 0).unwrap();
    // SAFETY: a region we registered.
    assert_eq!(unsafe { (*mr).key }, sys::FI_KEY_NOTAVAIL);
    let mut raw = [0u8; 16];
    let mut size = raw.len();
    let mut base = 1u64;
    let mut attr = sys::fi_mr_raw_attr {
        flags: 0,
        base_addr: &mut base,
        raw_key: raw.as_mut_ptr(),
        key_size: &mut size,
    };
    let mut key = 0u64;
    // SAFETY: our region's and domain's controls with valid structures.
    unsafe {
        let rc = (*(*mr).fid.ops).control.unwrap()(
            &mut (*mr).fid,
            sys::FI_GET_RAW_MR as c_int,
            (&mut attr as *mut sys::fi_mr_raw_attr).cast(),
        );
        assert_eq!((rc, size, base), (0, 16, 0));
        let mut map = sys::fi_mr_map_raw {
            flags: 0,
            base_addr: 0,
            raw_key: raw.as_mut_ptr(),
            key_size: 16,
            key: &mut key,
        };
        let dom = &mut (*o.domain).fid;
        let ctl = (*dom.ops).control.unwrap();
        let rc = ctl(
            dom,
            sys::FI_MAP_RAW_MR as c_int,
            (&mut map as *mut sys::fi_mr_map_raw).cast(),
        );
        assert_eq!(rc, 0);
        map.key_size = 5;
        let rc = ctl(
            dom,
            sys::FI_MAP_RAW_MR as c_int,
            (&mut map as *mut sys::fi_mr_map_raw).cast(),
        );
        assert_eq!(rc, neg(sys::FI_EINVAL), "a raw key of another size");
    }
    // 48 KiB over both rails, and back.
    let data: Vec<u8> = (0..48 * 1024).map(|i| (i % 251) as u8).collect();
    let mut wctx = sys::fi_context::default();
    // The first use of an address connects its rails: until one serves,
    // RMA calls answer -FI_EAGAIN.
    let wctx_ptr = ctx_ptr(&mut wctx);
    // SAFETY: our RMA table; the buffer and context outlive the operation.
    let rc = post_again(o.cq, || unsafe {
        (*(*o.ep).rma).write.unwrap()(
            o.ep,
            data.as_ptr().cast(),
            data.len(),
            null_mut(),
            me,
            1024,
            key,
            wctx_ptr,
        )
    });
    assert_eq!(rc, 0);
    let c = completions(o.cq, 1).expect("a write completion");
    assert_eq!(
        (c[0].op_context, c[0].flags),
        (ctx_ptr(&mut wctx), (sys::FI_RMA | sys::FI_WRITE) as u64)
    );
    assert_eq!(&target[1024..1024 + data.len()], &data[..]);
    let mut back = vec![0u8; data.len()];
    let mut rctx = sys::fi_context::default();
    // SAFETY: as above, into `back`.
    let rc = unsafe {
        (*(*o.ep).rma).read.unwrap()(
            o.ep,
            back.as_mut_ptr().cast(),
            back.len(),
            null_mut(),
            me,
            1024,
            key,
            ctx_ptr(&mut rctx),
        )
    };
    assert_eq!(rc, 0);
    let c = completions(o.cq, 1).expect("a read completion");
    assert_eq!(c[0].op_context, ctx_ptr(&mut rctx));
    assert_eq!(back, data);
    // A key never mapped: an error completion.
    let mut bctx = sys::fi_context::default();
    // SAFETY: as above.
    let rc = unsafe {
        (*(*o.ep).rma).write.unwrap()(
            o.ep,
            data.as_ptr().cast(),
            64,
            null_mut(),
            me,
            0,
            key + 1000,
            ctx_ptr(&mut bctx),
        )
    };
    assert_eq!(rc, 0);
    let err = completions(o.cq, 1).expect_err("an error completion");
    assert_eq!(
        (err.op_context, err.err),
        (ctx_ptr(&mut bctx), sys::FI_EACCES as c_int)
    );
    // No atomics on ofi_mrail (fi_mrail(7)).
    let mut count = 0usize;
    // SAFETY: our atomic table.
    let rc = unsafe {
        (*(*o.ep).atomic).writevalid.unwrap()(o.ep, sys::FI_UINT64, sys::FI_SUM, &mut count)
    };
    assert_eq!(rc, neg(sys::FI_ENOSYS));
    // SAFETY: the domain's control: forget the mapped key.
    unsafe {
        let dom = &mut (*o.domain).fid;
        let rc = (*dom.ops).control.unwrap()(
            dom,
            sys::FI_UNMAP_KEY as c_int,
            (&mut key as *mut u64).cast(),
        );
        assert_eq!(rc, 0);
    }
    close_objects(o, &[mr]);
}

#[test]
fn mrail_wait_fds_signal_completions_and_counter_changes() {
    std::env::set_var("PSMRAIL_ENGINE", "soft");
    std::env::set_var("FI_OFI_MRAIL_ADDR", "127.0.0.1,127.0.0.1");
    // SAFETY: the provider structure lives for the process.
    let p = unsafe { &*provider(Which::Mrail) };
    let o = open_all(p);
    let cq = cq_open_wait(&o, sys::FI_WAIT_FD).expect("an FI_WAIT_FD CQ");
    let me = enable_to_self_on(&o, cq);
    let fd = getwait(cq.cast()).unwrap();
    assert_eq!(trywait(&o, &[cq.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0);
    tagged_to_self(&o, me, b"over the rails");
    // Manual progress: fi_trywait progresses once each time.
    let again = -(sys::FI_EAGAIN as c_int);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut got = 0;
    while got < 2 {
        assert!(std::time::Instant::now() < deadline, "{got} of 2");
        if trywait(&o, &[cq.cast()]) == again {
            assert_eq!(poll_in(fd, 0), 1, "entries queued: readable");
        } else {
            poll_in(fd, 1);
        }
        while cq_read1(cq) == 1 {
            got += 1;
        }
    }
    assert_eq!(trywait(&o, &[cq.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0);
    let c = cntr_open_wait(&o, sys::FI_WAIT_FD).expect("an FI_WAIT_FD counter");
    let cfd = getwait(c.cast()).unwrap();
    assert_eq!(trywait(&o, &[c.cast()]), 0);
    // SAFETY: our counter's table.
    assert_eq!(unsafe { (*(*c).ops).add.unwrap()(c, 1) }, 0);
    assert_eq!(poll_in(cfd, 0), 1);
    assert_eq!(trywait(&o, &[c.cast(), cq.cast()]), again);
    assert_eq!(trywait(&o, &[c.cast(), cq.cast()]), 0);
    assert_eq!(close(c.cast()), 0);
    assert_eq!(close(o.ep.cast()), 0);
    assert_eq!(close(cq.cast()), 0);
    close_objects_but_ep(o);
}
