//! Latency probe (feature `latency-probe`): where a small message's time
//! goes between two processes.
//!
//! A half round trip of a ping-pong is the sum of two spans, and the end
//! to end figure cannot tell them apart:
//!
//! * **send → detection**: from a side's call to `psm_mq_send` to the
//!   moment the other side's poll sees the message (PSM's send, the shared
//!   memory transport, and how often the receiver polls);
//! * **detection → send**: from that moment to the receiver's own call to
//!   `psm_mq_send` for its answer (everything the engine, the reactor, the
//!   futures and the program do with the message before answering).
//!
//! With the feature on, the native engine stamps both moments into
//! per-thread vectors: [`detected`] when a fast-path poll
//! (`EngineEndpoint::poll_completion` in manual mode) finds its request
//! finished right after a `psm_poll` that moved something, [`sending`]
//! before each `psm_mq_send` of `inject`. [`take`] hands a thread's stamps
//! over; [`split`] matches one side's stamps with its peer's (a ping-pong
//! alternates strictly, so the message a side detects is the peer's latest
//! send before it, and its answer is its own next send). The stamps are
//! TSC cycles on x86-64 (see [`ticks_per_us`]), nanoseconds elsewhere.
//! `engine_pingpong --probe` (a binary of `bench/`) prints the split for each phase.
//!
//! Stamping costs a few nanoseconds per message and moves nothing else:
//! stamping more points than these two perturbed the path it measured
//! (BENCHMARKING.md, "A buffer one pointer wide").

use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Most stamps of each kind a thread keeps (32 MiB each); later ones are
/// dropped, so a long run cannot exhaust memory.
pub const MAX_STAMPS: usize = 1 << 22;

thread_local! {
    static STAMPS: RefCell<Stamps> = const { RefCell::new(Stamps::new()) };
}

/// One thread's stamps, in the order they were taken.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stamps {
    /// When this thread's polls saw a message.
    pub detections: Vec<u64>,
    /// When this thread called `psm_mq_send`.
    pub sends: Vec<u64>,
}

impl Stamps {
    const fn new() -> Self {
        Stamps {
            detections: Vec::new(),
            sends: Vec::new(),
        }
    }
}

/// The clock of the stamps: the time stamp counter on x86-64, else
/// nanoseconds since the first stamp of the process.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads a counter; it has no preconditions and
        // touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

#[inline(always)]
fn push(v: &mut Vec<u64>, t: u64) {
    if v.len() < MAX_STAMPS {
        v.push(t);
    }
}

/// Records that this thread's poll saw a message at `t` (a [`now`] taken
/// when the poll returned).
#[inline(always)]
pub fn detected(t: u64) {
    STAMPS.with(|s| push(&mut s.borrow_mut().detections, t));
}

/// Records that this thread is about to call `psm_mq_send`.
#[inline(always)]
pub fn sending() {
    let t = now();
    STAMPS.with(|s| push(&mut s.borrow_mut().sends, t));
}

/// This thread's stamps so far; it starts afresh.
pub fn take() -> Stamps {
    STAMPS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// Clock ticks per microsecond, measured once over 50 ms against the
/// system clock (1000 where the clock is nanoseconds).
pub fn ticks_per_us() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let (t0, i0) = (now(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (t1, el) = (now(), i0.elapsed());
        t1.saturating_sub(t0) as f64 / (el.as_nanos() as f64 / 1000.0)
    })
}

/// The two spans of one side of a ping-pong, as means over the messages
/// that matched (module docs), in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// Mean ticks from the peer's send to this side's detection.
    pub send_to_detection: f64,
    /// Mean ticks from this side's detection to its next send.
    pub detection_to_send: f64,
    /// Detections matched with a peer's send before them.
    pub matched: usize,
}

/// Matches one side's stamps with its peer's sends (all from the same
/// clock, each list in time order). A detection counts when the peer's
/// latest send before it and this side's next send after it are both
/// within `window` ticks; others (the first and last messages, a pause)
/// are left out. `None` when nothing matched.
pub fn split(own: &Stamps, peer_sends: &[u64], window: u64) -> Option<Split> {
    let (mut to_det, mut to_send, mut n) = (0u128, 0u128, 0usize);
    for &d in &own.detections {
        // The peer's latest send before `d`, and this side's next send.
        let before = peer_sends.partition_point(|&s| s < d);
        let after = own.sends.partition_point(|&s| s <= d);
        let (Some(&sent), Some(&answered)) = (
            before.checked_sub(1).and_then(|i| peer_sends.get(i)),
            own.sends.get(after),
        ) else {
            continue;
        };
        if d - sent > window || answered - d > window {
            continue;
        }
        to_det += u128::from(d - sent);
        to_send += u128::from(answered - d);
        n += 1;
    }
    (n > 0).then(|| Split {
        send_to_detection: to_det as f64 / n as f64,
        detection_to_send: to_send as f64 / n as f64,
        matched: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_pong_splits_into_its_two_spans() {
        // The client sends at 0, 100, 200; the server detects each 30
        // later and answers 10 after that; the client detects the answers
        // 25 after they left and sends again 35 later.
        let client = Stamps {
            sends: vec![0, 100, 200],
            detections: vec![65, 165, 265],
        };
        let server = Stamps {
            sends: vec![40, 140, 240],
            detections: vec![30, 130, 230],
        };
        let s = split(&server, &client.sends, 1000).unwrap();
        assert_eq!(
            (s.send_to_detection, s.detection_to_send, s.matched),
            (30.0, 10.0, 3)
        );
        // The client's last detection has no send after it.
        let c = split(&client, &server.sends, 1000).unwrap();
        assert_eq!(
            (c.send_to_detection, c.detection_to_send, c.matched),
            (25.0, 35.0, 2)
        );
    }

    #[test]
    fn stamps_outside_the_window_or_unmatched_are_left_out() {
        let own = Stamps {
            sends: vec![10, 5_000],
            detections: vec![5, 4_000],
        };
        // The first detection precedes every peer send; the second is
        // 3,900 after the peer's send, beyond the window.
        assert_eq!(split(&own, &[100], 1000), None);
        assert_eq!(split(&Stamps::default(), &[1, 2], 10), None);
    }

    #[test]
    fn a_thread_takes_its_own_stamps() {
        std::thread::spawn(|| {
            detected(7);
            sending();
            let s = take();
            assert_eq!(s.detections, vec![7]);
            assert_eq!(s.sends.len(), 1);
            assert_eq!(take(), Stamps::default());
        })
        .join()
        .unwrap();
        assert!(ticks_per_us() > 0.0);
    }
}
