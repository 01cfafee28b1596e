//! Completion queues and counters through the public API: opened by a
//! soft-engine domain (manual and auto progress), and filled by operations
//! posted with a context.
//!
//! Entries are pushed by crate-internal paths, so the fine-grained
//! behaviour (ordering, error entries at the head, progress only when
//! empty, wake-ups under stress, the trigger listener) is tested in-crate
//! (`src/fabric/cq/tests.rs`, `src/fabric/counter/tests.rs`). This file
//! pins what an application sees: the libfabric bit values, attributes,
//! entry constructors, empty-queue and timeout behaviour, counters, and
//! one send/receive pair reported through CQs and counters.

use psmrail::config::PsmConfig;
use psmrail::fabric::{
    getinfo, AvAttr, Caps, CompletionFlags, CounterAttr, CounterBind, CounterEvents, CqAttr,
    CqBind, CqEntry, CqErrEntry, CqFormat, Domain, EngineChoice, Fabric, FiAddr, Hints, Info,
    ProgressKind,
};
use psmrail::{Error, ErrorKind, Truncation};
use std::time::Duration;

/// Generous bound for "it returns at all" (not a speed check).
const HANG: Duration = Duration::from_secs(60);

#[test]
fn completion_flags_have_libfabric_bit_values() {
    // rdma/fabric.h
    let expected: [(CompletionFlags, u64); 12] = [
        (CompletionFlags::MSG, 1 << 1),
        (CompletionFlags::RMA, 1 << 2),
        (CompletionFlags::TAGGED, 1 << 3),
        (CompletionFlags::ATOMIC, 1 << 4),
        (CompletionFlags::READ, 1 << 8),
        (CompletionFlags::WRITE, 1 << 9),
        (CompletionFlags::RECV, 1 << 10),
        (CompletionFlags::SEND, 1 << 11),
        (CompletionFlags::REMOTE_READ, 1 << 12),
        (CompletionFlags::REMOTE_WRITE, 1 << 13),
        (CompletionFlags::MULTI_RECV, 1 << 16),
        (CompletionFlags::REMOTE_CQ_DATA, 1 << 17),
    ];
    let mut all = 0;
    for (flag, bits) in expected {
        assert_eq!(flag.bits(), bits, "{flag:?}");
        all |= bits;
    }
    assert_eq!(
        CompletionFlags::all().bits(),
        all,
        "no flag outside the list"
    );
    assert_eq!(
        CompletionFlags::from_bits(1 << 20),
        None,
        "FI_TRIGGER is not a completion flag"
    );
    assert_eq!(
        CompletionFlags::from_bits_truncate((1 << 10) | (1 << 3) | (1 << 20)),
        CompletionFlags::RECV | CompletionFlags::TAGGED
    );
}

#[test]
fn cq_attr_builder_and_format_resolution() {
    let attr = CqAttr::new();
    assert_eq!((attr.format, attr.size), (CqFormat::Unspec, 0));
    let attr = attr.format(CqFormat::Msg).size(4096);
    assert_eq!((attr.format, attr.size), (CqFormat::Msg, 4096));
    assert_eq!(CqFormat::default(), CqFormat::Unspec);
    assert_eq!(CqFormat::Unspec.resolved(), CqFormat::Tagged);
    for f in [
        CqFormat::Context,
        CqFormat::Msg,
        CqFormat::Data,
        CqFormat::Tagged,
    ] {
        assert_eq!(f.resolved(), f);
    }
}

#[test]
fn entry_constructors_fill_defaults() {
    let e = CqEntry::new(9, CompletionFlags::SEND | CompletionFlags::MSG);
    assert_eq!(e.context, 9);
    assert_eq!(e.flags, CompletionFlags::SEND | CompletionFlags::MSG);
    assert_eq!((e.len, e.offset, e.data, e.tag), (0, 0, 0, 0));
    assert_eq!(e.source, FiAddr::UNSPEC);
    assert!(e.buffer.is_none());

    let plain = CqErrEntry::new(
        1,
        CompletionFlags::SEND,
        Error::new(ErrorKind::Io, "peer died"),
    );
    assert_eq!((plain.olen, plain.err()), (0, 5));
    assert_eq!(plain.prov_errno, CqErrEntry::PROV_INTERNAL);

    let t = Truncation {
        msg_len: 4096,
        received: 1024,
    };
    let trunc = CqErrEntry::new(2, CompletionFlags::RECV, Error::truncated(t, "trecv"));
    assert_eq!(trunc.olen, 3072, "olen comes from the truncation lengths");
    assert_eq!(trunc.err(), ErrorKind::Trunc.errno());

    let peek_miss = CqErrEntry::new(
        3,
        CompletionFlags::RECV,
        Error::new(ErrorKind::NoMsg, "peek"),
    );
    assert_eq!(peek_miss.err(), 42, "FI_ENOMSG");
}

#[test]
fn counter_attr_counts_completions() {
    let attr = CounterAttr::new();
    assert_eq!(attr.events, CounterEvents::Completion);
    assert_eq!(attr, CounterAttr::new().events(CounterEvents::Completion));
}

#[test]
fn handles_and_futures_cross_threads() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<psmrail::fabric::CompletionQueue>();
    send_sync_static::<psmrail::fabric::Counter>();
    send_sync_static::<psmrail::fabric::CqNext>();
    send_sync_static::<psmrail::fabric::CounterWait>();
    send_sync_static::<psmrail::fabric::CounterWaitOrError>();
    send_sync_static::<CqEntry>();
    send_sync_static::<CqErrEntry>();
}

fn info(progress: ProgressKind) -> Info {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let hints = Hints::new()
        .config(config)
        .caps(Caps::TAGGED | Caps::MSG)
        .progress(progress)
        .engine(EngineChoice::Soft);
    getinfo(Some(&hints)).unwrap().remove(0)
}

fn domain(progress: ProgressKind) -> (Info, Domain) {
    let info = info(progress);
    let d = Fabric::open(&info).unwrap().domain(&info).unwrap();
    (info, d)
}

fn both_modes() -> [Domain; 2] {
    [domain(ProgressKind::Manual).1, domain(ProgressKind::Auto).1]
}

#[test]
fn empty_queue_reads_nothing_and_sread_times_out() {
    for d in both_modes() {
        let cq = d.cq(CqAttr::new()).unwrap();
        assert_eq!(cq.format(), CqFormat::Tagged, "Unspec becomes Tagged");
        assert!(cq.read().unwrap().is_none());
        let mut out = Vec::new();
        assert_eq!(cq.read_many(&mut out, 16).unwrap(), 0);
        assert!(cq.readerr().is_none());
        assert!(cq.is_empty());
        assert_eq!(cq.len(), 0);
        for timeout in [Duration::ZERO, Duration::from_millis(20)] {
            let e = cq.sread(Some(timeout)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        }
        let other = d.cq(CqAttr::new().format(CqFormat::Context)).unwrap();
        assert_eq!(other.format(), CqFormat::Context);
        assert!(cq.same(&cq.clone()) && !cq.same(&other));
    }
}

#[test]
fn counter_values_waits_and_timeouts() {
    for d in both_modes() {
        let c = d.counter(CounterAttr::new()).unwrap();
        assert_eq!((c.read(), c.read_err()), (0, 0));
        c.add(4);
        c.set(3);
        c.add_err(2);
        c.set_err(1);
        assert_eq!((c.read(), c.read_err()), (3, 1));
        c.wait(3, Some(Duration::ZERO)).unwrap();
        let e = c.wait(4, Some(Duration::from_millis(20))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");

        // Woken by a change from another thread, blocking and async.
        let other = c.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            other.add(1);
            std::thread::sleep(Duration::from_millis(10));
            other.add(1);
        });
        c.wait(4, Some(HANG)).unwrap();
        futures::executor::block_on(c.wait_for(5));
        t.join().unwrap();
        assert_eq!(c.read(), 5);

        // A failure while waiting ends the wait with FI_EAVAIL.
        let other = c.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            other.add_err(1);
        });
        let e = c.wait(100, Some(HANG)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Avail, "{e}");
        t.join().unwrap();
        assert!(!c.same(&d.counter(CounterAttr::new()).unwrap()));
    }
}

#[test]
fn counter_wait_for_on_tokio() {
    let (_, d) = domain(ProgressKind::Auto);
    let c = d.counter(CounterAttr::new()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let waiter = c.clone();
    let task = rt.spawn(async move {
        waiter.wait_for(2).await;
        waiter.wait_for_or_error(3).await
    });
    std::thread::sleep(Duration::from_millis(10));
    c.add(2);
    std::thread::sleep(Duration::from_millis(10));
    c.add_err(1);
    let r = rt
        .block_on(async { tokio::time::timeout(HANG, task).await })
        .expect("never woken")
        .unwrap();
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Avail);
}

/// A tagged message posted with contexts: the sender's transmit CQ and
/// send counter, and the receiver's receive CQ and receive counter, see
/// it; a cancelled receive comes back as an error entry.
#[test]
fn context_operations_report_through_cqs_and_counters() {
    // The sender progresses manually (inside sread/read); the receiver has
    // its own thread, so it answers the connection while the sender
    // blocks in `insert`.
    let (info_a, da) = domain(ProgressKind::Manual);
    let (info_b, db) = domain(ProgressKind::Auto);
    let (cq_a, cnt_a) = (
        da.cq(CqAttr::new()).unwrap(),
        da.counter(CounterAttr::new()).unwrap(),
    );
    let (cq_b, cnt_b) = (
        db.cq(CqAttr::new()).unwrap(),
        db.counter(CounterAttr::new()).unwrap(),
    );
    let (ava, avb) = (da.av(AvAttr::new()).unwrap(), db.av(AvAttr::new()).unwrap());
    let a = da
        .endpoint(&info_a)
        .bind_av(&ava)
        .bind_cq(&cq_a, CqBind::TRANSMIT | CqBind::RECV)
        .bind_counter(&cnt_a, CounterBind::SEND)
        .enable()
        .unwrap();
    let b = db
        .endpoint(&info_b)
        .bind_av(&avb)
        .bind_cq(&cq_b, CqBind::TRANSMIT | CqBind::RECV)
        .bind_counter(&cnt_b, CounterBind::RECV)
        .enable()
        .unwrap();
    let to_b = ava.insert(&[b.getname()]).remove(0).unwrap();

    b.post_trecv(vec![0u8; 16], 0x77, 0, 7).unwrap();
    a.post_tsend(to_b, 0x77, b"hello".to_vec(), 8).unwrap();

    let sent = cq_a.sread(Some(HANG)).unwrap();
    assert_eq!(sent.context, 8);
    assert_eq!(sent.flags, CompletionFlags::SEND | CompletionFlags::TAGGED);
    assert_eq!(sent.len, 5);
    assert_eq!(cnt_a.read(), 1);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let got = rt
        .block_on(async { tokio::time::timeout(HANG, cq_b.next()).await })
        .expect("receive entry never arrived")
        .unwrap();
    assert_eq!(got.context, 7);
    assert_eq!(got.flags, CompletionFlags::RECV | CompletionFlags::TAGGED);
    assert_eq!((got.len, got.tag, got.offset), (5, 0x77, 0));
    let buf = got.buffer.expect("the receive buffer comes back");
    assert_eq!(&buf.into_vec().unwrap()[..5], b"hello");
    cnt_b.wait(1, Some(HANG)).unwrap();
    assert_eq!(cnt_b.read_err(), 0);

    // A receive that never matches, cancelled: an error entry that blocks
    // reads until readerr takes it.
    let posted = b.post_trecv(vec![0u8; 8], 0x99, 0, 9).unwrap();
    assert!(b.cancel(&posted).unwrap());
    assert_eq!(cq_b.read().unwrap_err().kind(), ErrorKind::Avail);
    let e = cq_b.readerr().expect("the cancelled receive's error entry");
    assert_eq!((e.context, e.error.kind()), (9, ErrorKind::Canceled));
    assert_eq!(e.err(), ErrorKind::Canceled.errno());
    assert!(
        e.buffer.is_some(),
        "the cancelled receive's buffer comes back"
    );
    assert!(cq_b.read().unwrap().is_none());
}
