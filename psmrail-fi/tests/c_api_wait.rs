//! Wait objects of the psm C face called as a C program calls them (in
//! this process, soft engine): `FI_WAIT_FD` completion queues, counters and
//! event queues (`fi_control(FI_GETWAIT)`, `poll(2)`, `fi_trywait`),
//! `fi_cq_signal`, and the fds closing with their objects. A test binary of
//! its own, its tests one at a time, so that counting the process's open
//! fds sees only what the test opened.
// Built without libfabric (see build.rs), the crate has no C face to test.
#![cfg(libfabric)]

#[path = "support/c_face.rs"]
mod c_face;
use c_face::*;

use psmrail_fi::sys;
use psmrail_fi::{provider, Which};
use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn setup() -> (&'static sys::fi_provider, MutexGuard<'static, ()>) {
    let serial = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    std::env::set_var("PSMRAIL_ENGINE", "soft");
    std::env::set_var("FI_PSM_NAME_SERVER", "no");
    // SAFETY: the provider structure lives for the process.
    (unsafe { &*provider(Which::Psm) }, serial)
}

/// The objects of a tagged endpoint, its domain progressing as `progress`
/// says.
fn open_progress(p: &sys::fi_provider, progress: sys::fi_progress) -> Objects {
    // SAFETY: the hints open_caps hands over have every attribute.
    open_caps(p, sys::FI_TAGGED as u64, |h| unsafe {
        (*h.domain_attr).data_progress = progress;
    })
}

const AGAIN: c_int = -(sys::FI_EAGAIN as c_int);

/// Closes the endpoint, the extra CQ and the rest.
fn close_with(o: Objects, cq: *mut sys::fid_cq) {
    assert_eq!(close(o.ep.cast()), 0);
    assert_eq!(close(cq.cast()), 0);
    assert_eq!(close(o.av.cast()), 0);
    assert_eq!(close(o.cq.cast()), 0);
    assert_eq!(close(o.domain.cast()), 0);
    assert_eq!(close(o.fabric.cast()), 0);
    // SAFETY: our info, freed once.
    unsafe { sys::fi_freeinfo(o.info) };
}

/// Reads `cq` until it is empty; how many entries it had.
fn drain(cq: *mut sys::fid_cq) -> usize {
    let mut n = 0;
    loop {
        match cq_read1(cq) {
            1 => n += 1,
            r => {
                assert_eq!(r, AGAIN as isize);
                return n;
            }
        }
    }
}

#[test]
fn cq_fd_is_readable_when_a_message_completed_with_auto_progress() {
    let (p, _serial) = setup();
    let o = open_progress(p, sys::FI_PROGRESS_AUTO);
    let cq = cq_open_wait(&o, sys::FI_WAIT_FD).expect("an FI_WAIT_FD CQ");
    let me = enable_to_self_on(&o, cq);
    let fd = getwait(cq.cast()).expect("the CQ's fd");
    assert!(fd >= 0);
    assert_eq!(trywait(&o, &[cq.cast()]), 0, "an empty CQ: safe to block");
    assert_eq!(poll_in(fd, 0), 0, "nothing to read yet");
    tagged_to_self(&o, me, b"wait for me");
    // The progress thread completes both and signals the fd: nobody calls
    // the provider while poll blocks.
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < 2 {
        assert!(Instant::now() < deadline, "{got} of 2 completions");
        if trywait(&o, &[cq.cast()]) == 0 {
            assert_eq!(poll_in(fd, 10_000), 1, "the fd woke the poll");
        }
        got += drain(cq);
    }
    assert_eq!(trywait(&o, &[cq.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0, "trywait cleared the fd");
    // An entry written by hand (fi_cq_signal makes it readable too).
    // SAFETY: our CQ's table.
    assert_eq!(unsafe { (*(*cq).ops).signal.unwrap()(cq) }, 0);
    assert_eq!(poll_in(fd, 0), 1, "fi_cq_signal signals the fd");
    assert_eq!(trywait(&o, &[cq.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0);
    close_with(o, cq);
}

#[test]
fn cq_fd_with_manual_progress_moves_through_trywait_and_reads() {
    let (p, _serial) = setup();
    let o = open_progress(p, sys::FI_PROGRESS_MANUAL);
    let cq = cq_open_wait(&o, sys::FI_WAIT_FD).expect("an FI_WAIT_FD CQ");
    let me = enable_to_self_on(&o, cq);
    let fd = getwait(cq.cast()).unwrap();
    tagged_to_self(&o, me, b"manual");
    // Manual progress: the application comes back (poll with a timeout,
    // then fi_trywait, which progresses once) until the fd is readable.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "never readable");
        if trywait(&o, &[cq.cast()]) == AGAIN {
            break;
        }
        poll_in(fd, 1);
    }
    assert_eq!(poll_in(fd, 0), 1, "entries queued: the fd is readable");
    let mut got = drain(cq);
    while got < 2 {
        assert!(Instant::now() < deadline, "{got} of 2 completions");
        got += drain(cq);
    }
    // A read that found the queue empty cleared the fd.
    assert_eq!(poll_in(fd, 0), 0);
    assert_eq!(trywait(&o, &[cq.cast()]), 0);
    // sread still works on an FD queue (here: times out with -FI_EAGAIN).
    let mut e = sys::fi_cq_tagged_entry::default();
    // SAFETY: our CQ's table; room for one entry.
    let r = unsafe {
        (*(*cq).ops).sread.unwrap()(
            cq,
            (&mut e as *mut sys::fi_cq_tagged_entry).cast(),
            1,
            null_mut(),
            10,
        )
    };
    assert_eq!(r, AGAIN as isize);
    close_with(o, cq);
}

/// `fi_cq_sread` on `cq` in another thread, with no timeout; how long it
/// took and what it answered.
fn sread_in_thread(cq: *mut sys::fid_cq) -> std::thread::JoinHandle<(isize, Duration)> {
    let cq = cq as usize;
    std::thread::spawn(move || {
        let cq = cq as *mut sys::fid_cq;
        let mut e = sys::fi_cq_tagged_entry::default();
        let t = Instant::now();
        // SAFETY: our CQ, open until the main thread joins this one.
        let r = unsafe {
            (*(*cq).ops).sread.unwrap()(
                cq,
                (&mut e as *mut sys::fi_cq_tagged_entry).cast(),
                1,
                null_mut(),
                -1,
            )
        };
        (r, t.elapsed())
    })
}

#[test]
fn cq_signal_wakes_a_blocked_sread() {
    let (p, _serial) = setup();
    for progress in [sys::FI_PROGRESS_MANUAL, sys::FI_PROGRESS_AUTO] {
        let o = open_progress(p, progress);
        let cq = cq_open_wait(&o, sys::FI_WAIT_UNSPEC).unwrap();
        // SAFETY: our CQ's table.
        let signal = || unsafe { (*(*cq).ops).signal.unwrap()(cq) };
        // Signalled before the sread: it returns at once (fabtests' cq_signal).
        assert_eq!(signal(), 0);
        let (r, took) = sread_in_thread(cq).join().unwrap();
        assert_eq!(r, AGAIN as isize);
        assert!(took < Duration::from_millis(500), "{took:?}");
        // Signalled while it blocks (no timeout): it returns.
        let t = sread_in_thread(cq);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(signal(), 0);
        let start = Instant::now();
        while !t.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "fi_cq_signal did not wake the sread (progress {progress})"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (r, took) = t.join().unwrap();
        assert_eq!(r, AGAIN as isize);
        assert!(took >= Duration::from_millis(150), "it did block: {took:?}");
        // The signal was used up: a timed sread waits its time.
        let mut e = sys::fi_cq_tagged_entry::default();
        let t0 = Instant::now();
        // SAFETY: our CQ's table; room for one entry.
        let r = unsafe {
            (*(*cq).ops).sread.unwrap()(
                cq,
                (&mut e as *mut sys::fi_cq_tagged_entry).cast(),
                1,
                null_mut(),
                50,
            )
        };
        assert_eq!(r, AGAIN as isize);
        assert!(t0.elapsed() >= Duration::from_millis(40));
        assert_eq!(close(cq.cast()), 0);
        // A closed CQ is refused.
        assert_eq!(signal(), neg(sys::FI_EINVAL));
        close_objects(o, &[]);
    }
}

#[test]
fn counter_fd_is_readable_after_a_change() {
    let (p, _serial) = setup();
    let o = open_all(p);
    let c = cntr_open_wait(&o, sys::FI_WAIT_FD).expect("an FI_WAIT_FD counter");
    let fd = getwait(c.cast()).unwrap();
    assert_eq!(trywait(&o, &[c.cast()]), 0, "unchanged: safe to block");
    assert_eq!(poll_in(fd, 0), 0);
    // SAFETY: our counter's table.
    unsafe {
        assert_eq!((*(*c).ops).add.unwrap()(c, 2), 0);
    }
    assert_eq!(poll_in(fd, 0), 1, "a change signals the fd");
    assert_eq!(
        trywait(&o, &[c.cast()]),
        AGAIN,
        "changed since the last trywait"
    );
    assert_eq!(trywait(&o, &[c.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0);
    // The error count signals too; fi_cntr_wait works on an FD counter.
    // SAFETY: our counter's table.
    unsafe {
        assert_eq!((*(*c).ops).adderr.unwrap()(c, 1), 0);
        assert_eq!(poll_in(fd, 0), 1);
        assert_eq!((*(*c).ops).wait.unwrap()(c, 2, 100), 0);
        assert_eq!((*(*c).ops).read.unwrap()(c), 2);
    }
    assert_eq!(trywait(&o, &[c.cast()]), AGAIN);
    assert_eq!(trywait(&o, &[c.cast()]), 0);
    // A change from another thread wakes a poll blocked on the fd.
    let cc = c as usize;
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let c = cc as *mut sys::fid_cntr;
        // SAFETY: our counter, open until the join below.
        unsafe { (*(*c).ops).add.unwrap()(c, 1) }
    });
    assert_eq!(poll_in(fd, 10_000), 1);
    assert_eq!(t.join().unwrap(), 0);
    assert_eq!(close(c.cast()), 0);
    close_objects(o, &[]);
}

#[test]
fn eq_fd_is_readable_with_an_event() {
    let (p, _serial) = setup();
    let o = open_all(p);
    let eq = eq_open_wait(&o, sys::FI_WAIT_FD).expect("an FI_WAIT_FD EQ");
    let fd = getwait(eq.cast()).unwrap();
    assert_eq!(trywait(&o, &[eq.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0);
    let entry = sys::fi_eq_entry {
        fid: eq.cast(),
        ..Default::default()
    };
    let size = std::mem::size_of::<sys::fi_eq_entry>();
    // SAFETY: our EQ's table with an entry of `size` bytes.
    let n = unsafe {
        (*(*eq).ops).write.unwrap()(
            eq,
            sys::FI_NOTIFY,
            (&entry as *const sys::fi_eq_entry).cast(),
            size,
            0,
        )
    };
    assert_eq!(n, size as isize);
    assert_eq!(poll_in(fd, 0), 1, "an event signals the fd");
    assert_eq!(trywait(&o, &[eq.cast()]), AGAIN);
    let mut event = 0u32;
    let mut got = sys::fi_eq_entry::default();
    // SAFETY: our EQ's table; room for one entry.
    let n = unsafe {
        (*(*eq).ops).sread.unwrap()(
            eq,
            &mut event,
            (&mut got as *mut sys::fi_eq_entry).cast(),
            size,
            100,
            0,
        )
    };
    assert_eq!((n, event), (size as isize, sys::FI_NOTIFY));
    assert_eq!(trywait(&o, &[eq.cast()]), 0);
    assert_eq!(poll_in(fd, 0), 0, "empty again: cleared");
    assert_eq!(close(eq.cast()), 0);
    close_objects(o, &[]);
}

#[test]
fn wait_objects_the_c_face_lacks_are_refused_and_trywait_checks_its_fids() {
    let (p, _serial) = setup();
    let o = open_all(p);
    // No wait sets (nor pollfd wait objects).
    assert_eq!(
        cq_open_wait(&o, sys::FI_WAIT_SET).unwrap_err(),
        neg(sys::FI_ENOSYS)
    );
    assert_eq!(
        cntr_open_wait(&o, sys::FI_WAIT_SET).unwrap_err(),
        neg(sys::FI_ENOSYS)
    );
    assert_eq!(
        eq_open_wait(&o, sys::FI_WAIT_SET).unwrap_err(),
        neg(sys::FI_ENOSYS)
    );
    assert_eq!(
        cq_open_wait(&o, sys::FI_WAIT_POLLFD).unwrap_err(),
        neg(sys::FI_ENOSYS)
    );
    // Objects without an fd have none to hand out, and trywait refuses them.
    assert_eq!(getwait(o.cq.cast()).unwrap_err(), neg(sys::FI_ENOSYS));
    assert_eq!(trywait(&o, &[o.cq.cast()]), neg(sys::FI_EINVAL));
    assert_eq!(trywait(&o, &[o.av.cast()]), neg(sys::FI_EINVAL));
    assert_eq!(trywait(&o, &[null_mut()]), neg(sys::FI_EINVAL));
    assert_eq!(trywait(&o, &[]), 0);
    // A closed FD object is refused.
    let cq = cq_open_wait(&o, sys::FI_WAIT_FD).unwrap();
    assert_eq!(close(cq.cast()), 0);
    assert_eq!(trywait(&o, &[cq.cast()]), neg(sys::FI_EINVAL));
    assert_eq!(getwait(cq.cast()).unwrap_err(), neg(sys::FI_EINVAL));
    close_objects(o, &[]);
}

/// The process's open file descriptors.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn wait_fds_close_with_their_objects() {
    let (p, _serial) = setup();
    let o = open_all(p);
    let before = open_fds();
    let cq = cq_open_wait(&o, sys::FI_WAIT_FD).unwrap();
    let c = cntr_open_wait(&o, sys::FI_WAIT_FD).unwrap();
    let eq = eq_open_wait(&o, sys::FI_WAIT_FD).unwrap();
    assert_eq!(open_fds(), before + 3, "one eventfd each");
    let fds = [
        getwait(cq.cast()).unwrap(),
        getwait(c.cast()).unwrap(),
        getwait(eq.cast()).unwrap(),
    ];
    assert!(fds[0] != fds[1] && fds[1] != fds[2] && fds[0] != fds[2]);
    assert_eq!(close(cq.cast()), 0);
    assert_eq!(close(c.cast()), 0);
    assert_eq!(close(eq.cast()), 0);
    assert_eq!(open_fds(), before, "the eventfds closed with their objects");
    close_objects(o, &[]);
}
