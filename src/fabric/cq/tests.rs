//! Behaviour of `CompletionQueue` through its crate-internal producer side
//! (`push`, `push_err`) and its public consumer side.

use super::*;
use crate::fabric::wait_list::{block_on_strict, Dither};
use crate::reactor::{progress_fn, AutoProgress, Progress};
use crate::Truncation;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::task::{Wake, Waker};

fn manual_cq() -> CompletionQueue {
    CompletionQueue::new(CqAttr::new(), Reactor::manual())
}

fn auto_cq() -> CompletionQueue {
    let reactor = Reactor::auto(AutoProgress::new()).expect("auto reactor");
    CompletionQueue::new(CqAttr::new(), reactor)
}

fn entry(context: u64) -> CqEntry {
    CqEntry::new(context, CompletionFlags::RECV | CompletionFlags::TAGGED)
}

fn err_entry(context: u64) -> CqErrEntry {
    CqErrEntry::new(
        context,
        CompletionFlags::RECV,
        Error::truncated(
            Truncation {
                msg_len: 10,
                received: 4,
            },
            "recv",
        ),
    )
}

fn waiters(cq: &CompletionQueue) -> usize {
    lock(&cq.inner.state).waiters.count()
}

struct NoopWake;
impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn entries_come_out_in_push_order() {
    for cq in [manual_cq(), auto_cq()] {
        assert!(cq.read().unwrap().is_none(), "empty queue reads None");
        for i in 0..100 {
            cq.push(entry(i));
        }
        assert_eq!(cq.len(), 100);
        for i in 0..100 {
            assert_eq!(cq.read().unwrap().unwrap().context, i);
        }
        assert!(cq.is_empty());
        assert!(cq.read().unwrap().is_none());
    }
}

#[test]
fn entry_fields_and_buffer_come_back_intact() {
    let cq = manual_cq();
    let mut e = entry(1);
    e.len = 5;
    e.buffer = OpBuffer::from(vec![9u8; 16]).window(2, 5);
    e.offset = 2;
    e.data = 0xdead;
    e.tag = 0xbeef;
    e.source = FiAddr(4);
    cq.push(e);
    let got = cq.read().unwrap().unwrap();
    assert_eq!(
        (got.len, got.offset, got.data, got.tag, got.source),
        (5, 2, 0xdead, 0xbeef, FiAddr(4))
    );
    assert_eq!(got.buffer.unwrap().into_vec().unwrap(), vec![9u8; 16]);
}

#[test]
fn error_at_head_blocks_reads_until_readerr() {
    let cq = manual_cq();
    cq.push(entry(1));
    cq.push_err(err_entry(2));
    cq.push(entry(3));
    assert!(
        cq.readerr().is_none(),
        "the head is a success: readerr takes nothing"
    );
    assert_eq!(cq.read().unwrap().unwrap().context, 1);

    assert_eq!(cq.read().unwrap_err().kind(), ErrorKind::Avail);
    let mut out = Vec::new();
    assert_eq!(
        cq.read_many(&mut out, 8).unwrap_err().kind(),
        ErrorKind::Avail
    );
    assert!(out.is_empty());
    assert_eq!(
        cq.sread(Some(Duration::ZERO)).unwrap_err().kind(),
        ErrorKind::Avail
    );
    assert_eq!(
        futures::executor::block_on(cq.next()).unwrap_err().kind(),
        ErrorKind::Avail
    );
    assert_eq!(cq.len(), 2, "Avail takes nothing");

    let e = cq.readerr().expect("error entry at the head");
    assert_eq!((e.context, e.olen, e.err()), (2, 6, 265));
    assert_eq!(e.error.kind(), ErrorKind::Trunc);
    assert_eq!(e.prov_errno, CqErrEntry::PROV_INTERNAL);
    assert!(cq.readerr().is_none(), "taken once");
    assert_eq!(cq.read().unwrap().unwrap().context, 3);
    assert!(cq.readerr().is_none(), "empty queue");
}

#[test]
fn read_many_respects_max_and_stops_before_an_error() {
    let cq = manual_cq();
    for i in 0..10 {
        cq.push(entry(i));
    }
    let mut out = Vec::new();
    assert_eq!(cq.read_many(&mut out, 0).unwrap(), 0);
    assert_eq!(cq.read_many(&mut out, 4).unwrap(), 4);
    assert_eq!(cq.read_many(&mut out, 100).unwrap(), 6);
    assert_eq!(cq.read_many(&mut out, 100).unwrap(), 0);
    let contexts: Vec<u64> = out.iter().map(|e| e.context).collect();
    assert_eq!(contexts, (0..10).collect::<Vec<_>>());

    out.clear();
    for i in 0..3 {
        cq.push(entry(i));
    }
    cq.push_err(err_entry(99));
    cq.push(entry(7));
    assert_eq!(
        cq.read_many(&mut out, 10).unwrap(),
        3,
        "stops before the error"
    );
    assert_eq!(
        cq.read_many(&mut out, 10).unwrap_err().kind(),
        ErrorKind::Avail
    );
    assert_eq!(cq.readerr().unwrap().context, 99);
    assert_eq!(cq.read_many(&mut out, 10).unwrap(), 1);
    assert_eq!(out.last().unwrap().context, 7);
}

#[test]
fn sread_times_out_in_both_modes() {
    for cq in [manual_cq(), auto_cq()] {
        for timeout in [Duration::ZERO, Duration::from_millis(20)] {
            let e = cq.sread(Some(timeout)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
            assert!(e.message().contains("sread"), "{e}");
        }
        assert_eq!(waiters(&cq), 0, "a timed-out sread leaves no sleeper");
    }
}

#[test]
fn sread_with_an_enormous_timeout_still_returns_an_entry() {
    let cq = auto_cq();
    cq.push(entry(5));
    assert_eq!(cq.sread(Some(Duration::MAX)).unwrap().context, 5);
}

#[test]
fn sread_wakes_for_a_push_from_another_thread() {
    for cq in [manual_cq(), auto_cq()] {
        let pusher = cq.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            pusher.push(entry(42));
        });
        assert_eq!(cq.sread(None).unwrap().context, 42);
        t.join().unwrap();
    }
}

#[test]
fn sread_wakes_with_avail_for_an_error_push() {
    let cq = auto_cq();
    let pusher = cq.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        pusher.push_err(err_entry(1));
    });
    assert_eq!(cq.sread(None).unwrap_err().kind(), ErrorKind::Avail);
    t.join().unwrap();
}

/// A manual reactor whose one source pushes `entry(n)` on the n-th round
/// (counting from 0) while `limit` allows, and counts its rounds.
fn manual_with_pushing_source(limit: usize) -> (CompletionQueue, Arc<AtomicUsize>) {
    let reactor = Reactor::manual();
    let cq = CompletionQueue::new(CqAttr::new(), reactor.clone());
    let rounds = Arc::new(AtomicUsize::new(0));
    let (r, q) = (rounds.clone(), cq.clone());
    reactor
        .add_source(Arc::new(progress_fn(move || {
            let n = r.fetch_add(1, Ordering::SeqCst);
            if n < limit {
                q.push(entry(n as u64));
            }
            Progress::from(n < limit)
        })))
        .unwrap();
    (cq, rounds)
}

#[test]
fn manual_read_progresses_only_when_empty() {
    let (cq, rounds) = manual_with_pushing_source(2);
    assert!(cq.is_empty());
    assert_eq!(cq.len(), 0);
    assert_eq!(
        rounds.load(Ordering::SeqCst),
        0,
        "len/is_empty never progress"
    );

    assert_eq!(
        cq.read().unwrap().unwrap().context,
        0,
        "read progressed once"
    );
    assert_eq!(rounds.load(Ordering::SeqCst), 1);

    cq.push(entry(100));
    assert_eq!(cq.read().unwrap().unwrap().context, 100);
    assert_eq!(rounds.load(Ordering::SeqCst), 1, "non-empty: no progress");

    let mut out = Vec::new();
    assert_eq!(cq.read_many(&mut out, 4).unwrap(), 1);
    assert_eq!(out[0].context, 1);
    assert_eq!(rounds.load(Ordering::SeqCst), 2);

    assert!(cq.readerr().is_none());
    assert_eq!(rounds.load(Ordering::SeqCst), 2, "readerr never progresses");
    assert!(cq.read().unwrap().is_none(), "source exhausted");
    assert_eq!(rounds.load(Ordering::SeqCst), 3);
}

#[test]
fn auto_read_never_progresses_itself() {
    let reactor = Reactor::auto(AutoProgress::new().interval(Duration::from_secs(3600))).unwrap();
    let cq = CompletionQueue::new(CqAttr::new(), reactor);
    assert!(cq.read().unwrap().is_none());
    let mut out = Vec::new();
    assert_eq!(cq.read_many(&mut out, 3).unwrap(), 0);
}

#[test]
fn manual_sread_and_next_progress_until_an_entry_appears() {
    // The source pushes on its first round only after two idle rounds.
    let reactor = Reactor::manual();
    let cq = CompletionQueue::new(CqAttr::new(), reactor.clone());
    let rounds = Arc::new(AtomicUsize::new(0));
    let (r, q) = (rounds.clone(), cq.clone());
    reactor
        .add_source(Arc::new(progress_fn(move || {
            let n = r.fetch_add(1, Ordering::SeqCst);
            if n % 3 == 2 {
                q.push(entry(n as u64));
            }
            Progress::from(n % 3 == 2)
        })))
        .unwrap();
    assert_eq!(cq.sread(None).unwrap().context, 2);
    assert_eq!(futures::executor::block_on(cq.next()).unwrap().context, 5);
    assert_eq!(reactor.block_on(cq.next()).unwrap().context, 8);
}

#[test]
fn next_in_auto_mode_is_woken_by_a_push_from_another_thread() {
    let cq = auto_cq();
    let pusher = cq.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        pusher.push(entry(11));
    });
    assert_eq!(futures::executor::block_on(cq.next()).unwrap().context, 11);
    t.join().unwrap();
    assert_eq!(waiters(&cq), 0);
}

#[test]
fn next_in_auto_mode_on_tokio() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let cq = auto_cq();
    let waiter = cq.clone();
    let task = rt.spawn(async move {
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(waiter.next().await.unwrap().context);
        }
        got
    });
    let t = std::thread::spawn(move || {
        for i in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            cq.push(entry(i));
        }
    });
    let got = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), task).await })
        .expect("next() was never woken")
        .unwrap();
    assert_eq!(got, vec![0, 1, 2]);
    t.join().unwrap();
}

#[test]
fn dropped_next_leaves_no_waiter_and_takes_nothing() {
    let cq = auto_cq();
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut fut = cq.next();
    assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
    assert_eq!(waiters(&cq), 1, "re-polling re-arms the same key");
    drop(fut);
    assert_eq!(waiters(&cq), 0);

    // A future woken by a push but dropped before it ran takes nothing.
    let mut fut = cq.next();
    assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
    cq.push(entry(3));
    drop(fut);
    assert_eq!(waiters(&cq), 0);
    assert_eq!(cq.read().unwrap().unwrap().context, 3);
}

#[test]
fn every_waiting_future_is_woken() {
    let cq = auto_cq();
    let wakes = Arc::new(AtomicUsize::new(0));
    struct CountWake(Arc<AtomicUsize>);
    impl Wake for CountWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let waker = Waker::from(Arc::new(CountWake(wakes.clone())));
    let mut cx = Context::from_waker(&waker);
    let mut futs: Vec<CqNext> = (0..20).map(|_| cq.next()).collect();
    for f in &mut futs {
        assert!(Pin::new(f).poll(&mut cx).is_pending());
    }
    cq.push(entry(1));
    assert_eq!(wakes.load(Ordering::SeqCst), 20);
    let mut ready = 0;
    for f in &mut futs {
        if Pin::new(f).poll(&mut cx).is_ready() {
            ready += 1;
        }
    }
    assert_eq!(ready, 1, "one entry, one winner; the others re-arm");
    drop(futs);
    assert_eq!(waiters(&cq), 0);
}

#[test]
fn format_and_identity() {
    let r = Reactor::manual();
    let a = CompletionQueue::new(CqAttr::new(), r.clone());
    let b = CompletionQueue::new(CqAttr::new().format(CqFormat::Context).size(1 << 20), r);
    assert_eq!(a.format(), CqFormat::Tagged, "Unspec becomes Tagged");
    assert_eq!(b.format(), CqFormat::Context);
    assert!(a.same(&a.clone()));
    assert!(!a.same(&b));
    assert!(format!("{a:?}").contains("Tagged"));
}

#[test]
fn no_lost_wakeups_between_a_waiter_and_a_pusher() {
    const ROUNDS: u64 = 20_000;
    const LIMIT: Duration = Duration::from_secs(30);
    let cq = auto_cq();
    let barrier = Arc::new(Barrier::new(2));
    let dither = Arc::new(Dither::default());
    let (pusher, b, d) = (cq.clone(), barrier.clone(), dither.clone());
    let t = std::thread::spawn(move || {
        for i in 0..ROUNDS {
            b.wait();
            d.spin(i);
            pusher.push(entry(i));
        }
    });
    let mut early = 0;
    for i in 0..ROUNDS {
        barrier.wait();
        let was_early = !cq.is_empty();
        early += u64::from(was_early);
        dither.early(was_early);
        // Alternate the async and the blocking waits; both race the push.
        let got = if i % 2 == 0 {
            block_on_strict(cq.next(), LIMIT)
                .unwrap_or_else(|e| panic!("round {i}: next(): {e}"))
                .unwrap()
        } else {
            // A lost notify shows as TimedOut.
            cq.sread(Some(LIMIT))
                .unwrap_or_else(|e| panic!("round {i}: sread: {e}"))
        };
        assert_eq!(got.context, i);
    }
    t.join().unwrap();
    assert_eq!(waiters(&cq), 0);
    // The dither kept the push near the waiter's check, on both sides.
    assert!(early > 0 && early < ROUNDS, "early {early} of {ROUNDS}");
}

#[test]
fn concurrent_pushers_keep_each_pushers_order() {
    let cq = auto_cq();
    let threads: Vec<_> = (0..4u64)
        .map(|p| {
            let cq = cq.clone();
            std::thread::spawn(move || {
                for i in 0..1000u64 {
                    cq.push(entry(p << 32 | i));
                }
            })
        })
        .collect();
    let mut next = [0u64; 4];
    let mut out = Vec::new();
    let mut total = 0;
    while total < 4000 {
        let e = cq.sread(Some(Duration::from_secs(30))).unwrap();
        out.push(e);
        total += 1 + cq.read_many(&mut out, 64).unwrap();
    }
    for e in out {
        let (p, i) = ((e.context >> 32) as usize, e.context & 0xffff_ffff);
        assert_eq!(i, next[p], "pusher {p} out of order");
        next[p] += 1;
    }
    assert_eq!(next, [1000; 4]);
    for t in threads {
        t.join().unwrap();
    }
}
