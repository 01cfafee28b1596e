//! Completion queues and counters through the public API only.
//!
//! Queues and counters are opened by a domain and filled by the
//! operations, both crate-internal paths; their behaviour (ordering, error
//! entries, progress, waits, wake-ups, listener) is tested in-crate
//! (`src/fabric/cq/tests.rs`, `src/fabric/counter/tests.rs`). This file
//! pins what an application sees without them: the libfabric bit values,
//! the attributes and the entry constructors.

use psmrail::fabric::{
    CompletionFlags, CounterAttr, CounterEvents, CqAttr, CqEntry, CqErrEntry, CqFormat, FiAddr,
};
use psmrail::{Error, ErrorKind, Truncation};

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
    assert_eq!(CompletionFlags::all().bits(), all, "no flag outside the list");
    assert_eq!(CompletionFlags::from_bits(1 << 20), None, "FI_TRIGGER is not a completion flag");
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
    for f in [CqFormat::Context, CqFormat::Msg, CqFormat::Data, CqFormat::Tagged] {
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

    let peek_miss = CqErrEntry::new(3, CompletionFlags::RECV, Error::new(ErrorKind::NoMsg, "peek"));
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
