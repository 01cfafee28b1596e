//! Tests of receives recorded by `irecv` and handed to PSM at the
//! endpoint's next call into it (`post_unposted` in `endpoint.rs`): a
//! message that reaches PSM in between (a send to oneself is delivered
//! inside the send) waits in PSM's unexpected queue and still meets the
//! receives posted before it, in posting order; probe, cancel and close
//! see such receives as posted.
//!
//! Each scenario runs in its own process (see `fast_tests::isolated`).

use super::fast_tests::{check_recv, irecv, isend, isolated, open_self, pattern, wait_fast};
use crate::engine::{EngineEndpoint, OpBuffer, TagMatch};
use crate::reactor::ProgressMode;
use crate::ErrorKind;
use std::time::Duration;

/// Receives recorded before sends to oneself get those messages in
/// posting order, at every size (eager, and rendezvous whose
/// request-to-send waits unexpected), whether the send is an inject or an
/// isend.
#[test]
fn recorded_receives_meet_messages_in_posting_order() {
    isolated(
        "engine::native::unposted_tests::recorded_receives_meet_messages_in_posting_order",
        || {
            let (ep, r, me) = open_self(ProgressMode::Manual);
            let source = ep.reports_source().then_some(me);
            let big = 4 * ep.limits().eager_threshold + 3;
            for n in [0usize, 8, 64, 8 << 10, big] {
                // Two receives for the same tag, recorded, then two sends.
                let tag = 0x40 + n as u64;
                let (a, b) = (pattern(n, 1), pattern(n, 2));
                let ra = irecv(&*ep, tag, OpBuffer::from(vec![0u8; n]));
                let rb = irecv(&*ep, tag, OpBuffer::from(vec![0u8; n]));
                let mut sends = Vec::new();
                for data in [&a, &b] {
                    if n <= ep.max_inject() {
                        ep.inject(me, tag, data).expect("inject");
                    } else {
                        sends.push(isend(&*ep, me, tag, data.clone()));
                    }
                }
                check_recv(wait_fast(&*ep, &r, ra), tag, &a, source);
                check_recv(wait_fast(&*ep, &r, rb), tag, &b, source);
                for sk in sends {
                    let s = wait_fast(&*ep, &r, sk);
                    assert_eq!(s.status.error, None, "{:?}", s.status);
                    assert_eq!(s.status.nbytes, n);
                }
            }
            // A receive recorded after a message that arrived unexpected
            // (an earlier inject) and before a later one takes the earlier.
            ep.inject(me, 0x99, b"first").unwrap();
            let rk = irecv(&*ep, 0x99, OpBuffer::from(vec![0u8; 6]));
            ep.inject(me, 0x99, b"second").unwrap();
            let c = wait_fast(&*ep, &r, rk);
            assert_eq!(c.status.nbytes, 5);
            assert_eq!(&c.buffer.as_slice()[..5], b"first");
            let rk = irecv(&*ep, 0x99, OpBuffer::from(vec![0u8; 6]));
            check_recv(wait_fast(&*ep, &r, rk), 0x99, b"second", source);
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

/// A probe after a recorded receive does not report the message that
/// receive takes; it does report one nobody waits for.
#[test]
fn probe_does_not_see_what_a_recorded_receive_takes() {
    isolated(
        "engine::native::unposted_tests::probe_does_not_see_what_a_recorded_receive_takes",
        || {
            let (ep, r, me) = open_self(ProgressMode::Manual);
            let rk = irecv(&*ep, 5, OpBuffer::from(vec![0u8; 4]));
            ep.inject(me, 5, b"mine").unwrap();
            ep.inject(me, 6, b"free").unwrap();
            assert_eq!(ep.iprobe(TagMatch::exact(5)).unwrap(), None);
            let probed = ep.iprobe(TagMatch::exact(6)).unwrap().expect("tag 6 waits");
            assert_eq!(probed.msg_len, 4);
            check_recv(wait_fast(&*ep, &r, rk), 5, b"mine", None);
            let rk = irecv(&*ep, 6, OpBuffer::from(vec![0u8; 4]));
            check_recv(wait_fast(&*ep, &r, rk), 6, b"free", None);
            ep.close(Duration::from_secs(1)).unwrap();
        },
    );
}

/// Cancel and close treat a receive PSM has not been given yet like any
/// unmatched one: it completes with `Canceled` and its buffer.
#[test]
fn cancel_and_close_end_recorded_receives() {
    isolated(
        "engine::native::unposted_tests::cancel_and_close_end_recorded_receives",
        || {
            let (ep, r, _me) = open_self(ProgressMode::Manual);
            let rk = irecv(&*ep, 9, OpBuffer::from(vec![7u8; 8]));
            assert!(ep.cancel(rk).unwrap(), "cancelled before PSM saw it");
            let c = wait_fast(&*ep, &r, rk);
            assert_eq!(c.status.error, Some(ErrorKind::Canceled));
            assert_eq!(c.buffer.into_vec().unwrap(), vec![7u8; 8]);
            let table = ep.completions().clone();
            let left = irecv(&*ep, 10, OpBuffer::from(vec![3u8; 5]));
            assert_eq!(ep.in_flight(), 1);
            ep.close(Duration::from_secs(1)).unwrap();
            let c = table.try_take(left).expect("completed by close");
            assert_eq!(c.status.error, Some(ErrorKind::Canceled));
            assert_eq!(c.buffer.into_vec().unwrap(), vec![3u8; 5]);
            assert!(table.is_empty());
        },
    );
}
