//! `Reactor::block_on`: run one future to completion on the calling thread.
//!
//! The waker sets a flag and unparks the blocked thread. Manual mode never
//! parks: between polls it runs progress rounds (that is the only way
//! anything completes), yielding the CPU after a streak of idle rounds.
//! Auto mode parks until woken; the progress thread does the work.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::AcqRel, Ordering::Acquire};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use crate::reactor::Reactor;

/// Idle rounds in a row before a manual `block_on` yields its CPU once.
const IDLE_ROUNDS_BEFORE_YIELD: u32 = 64;

struct ThreadWaker {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Unpark only on the false -> true edge: repeated wakes between two
        // polls (every manual-mode poll wakes itself) cost no system call.
        if !self.woken.swap(true, AcqRel) {
            self.thread.unpark();
        }
    }
}

pub(crate) fn run<F: Future>(reactor: &Reactor, future: F) -> F::Output {
    let mut future = pin!(future);
    let state = Arc::new(ThreadWaker {
        thread: thread::current(),
        woken: AtomicBool::new(true),
    });
    let waker = Waker::from(state.clone());
    let mut cx = Context::from_waker(&waker);
    let manual = reactor.is_manual();
    let mut idle = 0u32;
    loop {
        if state.woken.swap(false, AcqRel) {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            idle = 0;
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
            while !state.woken.load(Acquire) {
                thread::park();
            }
        }
    }
}
