//! `Reactor::block_on`: run one future to completion on the calling thread.
//!
//! The waker sets a flag and, in auto mode, unparks the blocked thread;
//! each thread makes its wakers once and lends them (a `block_on` costs no
//! allocation and no reference counting). Manual
//! mode never parks: a future that woke itself (every manual-mode
//! operation does, after its own progress step) is polled again at once;
//! otherwise a progress round runs before the next look (that is the only
//! way anything completes), and the CPU is yielded after a streak of idle
//! rounds. Auto mode parks until woken; the progress thread does the work.

use std::cell::Cell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::{self, Thread};

use futures::task::{waker_ref, ArcWake};

use crate::reactor::Reactor;

/// Idle rounds in a row before a manual `block_on` yields its CPU once.
const IDLE_ROUNDS_BEFORE_YIELD: u32 = 64;

/// The waker of one thread's `block_on`.
struct ThreadWaker {
    /// The thread to unpark (auto mode); `None` for a manual-mode waker,
    /// whose `block_on` never parks, so waking it is one store.
    thread: Option<Thread>,
    woken: AtomicBool,
}

impl ThreadWaker {
    fn new(manual: bool) -> Self {
        ThreadWaker {
            thread: (!manual).then(thread::current),
            woken: AtomicBool::new(false),
        }
    }
}

impl ArcWake for ThreadWaker {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        match &arc_self.thread {
            // Setting the flag is idempotent, and the loop clears it with
            // a swap that reads this store: no read-modify-write needed.
            None => arc_self.woken.store(true, Ordering::Release),
            // Unpark only on the false -> true edge: repeated wakes between
            // two polls cost no system call.
            Some(thread) => {
                if !arc_self.woken.swap(true, Ordering::AcqRel) {
                    thread.unpark();
                }
            }
        }
    }
}

/// This thread's wakers for [`run`], one per mode (a mode's waker never
/// changes kind, so a clone held by an old operation stays right), made
/// once; and whether a `run` on this thread is using them (a nested `run`
/// makes its own).
struct Wakers {
    manual: Arc<ThreadWaker>,
    auto: Arc<ThreadWaker>,
    busy: Cell<bool>,
}

thread_local! {
    static WAKERS: Wakers = Wakers {
        manual: Arc::new(ThreadWaker::new(true)),
        auto: Arc::new(ThreadWaker::new(false)),
        busy: Cell::new(false),
    };
}

/// Marks the thread's wakers free again when `run` returns or unwinds.
struct Release<'a>(&'a Cell<bool>);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

pub(crate) fn run<F: Future>(reactor: &Reactor, future: F) -> F::Output {
    let mut future = pin!(future);
    let manual = reactor.is_manual();
    WAKERS.with(|w| {
        if w.busy.replace(true) {
            // Nested in another `run` on this thread: a waker of its own,
            // so neither consumes the other's wake-ups.
            let own = Arc::new(ThreadWaker::new(manual));
            return drive(reactor, future.as_mut(), &own, manual);
        }
        let _release = Release(&w.busy);
        let state = if manual { &w.manual } else { &w.auto };
        drive(reactor, future.as_mut(), state, manual)
    })
}

fn drive<F: Future>(
    reactor: &Reactor,
    mut future: Pin<&mut F>,
    state: &Arc<ThreadWaker>,
    manual: bool,
) -> F::Output {
    // Lent, not cloned: no reference counting per call.
    let waker = waker_ref(state);
    let mut cx = Context::from_waker(&waker);
    let mut idle = 0u32;
    // The first poll needs no wake-up.
    state.woken.store(true, Ordering::Release);
    loop {
        if state.woken.swap(false, Ordering::AcqRel) {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            idle = 0;
            if manual && state.woken.load(Ordering::Acquire) {
                // The future woke itself: it made its own progress step
                // (every manual-mode operation does) and wants polling
                // again at once; the reactor's other sources get their
                // turn through the operations' periodic full rounds.
                continue;
            }
        }
        if manual {
            if reactor.progress().made() {
                idle = 0;
            } else {
                idle += 1;
                if idle >= IDLE_ROUNDS_BEFORE_YIELD {
                    idle = 0;
                    thread::yield_now();
                }
            }
        } else {
            // Park until the waker fires (park may return spuriously: the
            // flag decides). A stale unpark token only costs one loop.
            while !state.woken.load(Ordering::Acquire) {
                thread::park();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Reactor;
    use std::future::{poll_fn, Future};
    use std::sync::{Arc, Mutex};
    use std::task::{Poll, Waker};
    use std::time::Duration;

    /// A future ready after it was polled `n` more times, waking itself on
    /// every `Pending` (as manual-mode operations do).
    fn self_waking(n: usize) -> impl Future<Output = usize> {
        let mut polls = 0;
        poll_fn(move |cx| {
            polls += 1;
            if polls > n {
                Poll::Ready(polls)
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
    }

    #[test]
    fn manual_block_on_repolls_a_self_waking_future() {
        let reactor = Reactor::manual();
        assert_eq!(reactor.block_on(self_waking(1000)), 1001);
        // The thread's waker is reused by the next call.
        assert_eq!(reactor.block_on(self_waking(3)), 4);
    }

    #[test]
    fn nested_block_on_gets_its_own_waker() {
        let reactor = Reactor::manual();
        let inner = reactor.clone();
        let out = reactor.block_on(async move {
            let a = inner.block_on(self_waking(10));
            let b = self_waking(5).await;
            a + b
        });
        assert_eq!(out, 11 + 6);
        // The outer call released the cached waker: a later call works.
        assert_eq!(reactor.block_on(self_waking(2)), 3);
    }

    /// A future woken from another thread, in manual mode (no self-wake:
    /// the loop runs progress rounds until the wake-up comes).
    #[test]
    fn manual_block_on_sees_a_wake_from_another_thread() {
        let reactor = Reactor::manual();
        let slot: Arc<Mutex<(bool, Option<Waker>)>> = Arc::default();
        let setter = slot.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let mut s = setter.lock().unwrap();
            s.0 = true;
            if let Some(w) = s.1.take() {
                w.wake();
            }
        });
        let done = reactor.block_on(poll_fn(|cx| {
            let mut s = slot.lock().unwrap();
            if s.0 {
                Poll::Ready(true)
            } else {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }));
        assert!(done);
        t.join().unwrap();
    }
}
