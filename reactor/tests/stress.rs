//! Stress: many tasks and threads posting operations to a simulated device
//! whose completions are reaped by a progress source, in manual and auto
//! mode, under a `futures` thread pool and under plain threads. One in eight
//! operations is abandoned after its first poll. Checks: every op gets its
//! own value, nothing hangs (a lost wake-up would, with a 10 s auto
//! interval), every value is dropped exactly once, every slot is freed, and
//! the table stops growing.
#![cfg(not(loom))]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{wait_until, within, Device, OpFuture};
use futures::executor::ThreadPool;
use futures::task::SpawnExt;
use psmrail_reactor::{AutoProgress, Reactor};

const TASKS: usize = 64;
const OPS: usize = 1000;
const THREADS: usize = 8;
const ABANDON_EVERY: usize = 8;

fn manual() -> Reactor {
    Reactor::manual()
}

fn auto() -> Reactor {
    // A 10 s interval: every completion must arrive through notify.
    Reactor::auto(AutoProgress::new().interval(Duration::from_secs(10))).unwrap()
}

/// Polls the op once, then drops it (abandons it while in flight or after
/// completion, whichever it is).
struct PollOnceThenDrop(Option<OpFuture>);

impl Future for PollOnceThenDrop {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(mut op) = self.0.take() {
            let _ = Pin::new(&mut op).poll(cx);
        }
        Poll::Ready(())
    }
}

async fn client(reactor: Reactor, device: Arc<Device>, ops: usize) -> usize {
    let mut done = 0;
    for i in 0..ops {
        let op = device.post(&reactor);
        if i % ABANDON_EVERY == ABANDON_EVERY - 1 {
            PollOnceThenDrop(Some(op)).await;
            continue;
        }
        let key = op.key();
        let value = op.await;
        assert_eq!(value.key, key.to_u64(), "got another op's value");
        done += 1;
    }
    done
}

/// After the clients: let the abandoned ops complete (driving progress in
/// manual mode), then check drops and slots.
fn settle(reactor: &Reactor, device: &Arc<Device>, total: usize) {
    device.stop();
    assert!(
        wait_until(Duration::from_secs(20), || {
            if reactor.is_manual() {
                reactor.progress();
            }
            device.idle() && device.table.is_empty()
        }),
        "abandoned ops never completed: {} slots in use",
        device.table.len()
    );
    assert_eq!(device.made.load(SeqCst), total, "every op completed once");
    assert_eq!(
        device.drops.load(SeqCst),
        total,
        "every value dropped exactly once"
    );
    // No growth beyond what was in flight at once (plus segment rounding).
    assert!(
        device.table.capacity() <= 4 * TASKS.max(THREADS) + 32,
        "capacity {}",
        device.table.capacity()
    );
}

fn pool_run(reactor: Reactor) {
    let (device, source) = Device::start(&reactor);
    reactor.add_source(source).unwrap();
    let (r, d) = (reactor.clone(), device.clone());
    let done = within(Duration::from_secs(60), "thread-pool stress", move || {
        let pool = ThreadPool::builder().pool_size(2).create().unwrap();
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                pool.spawn_with_handle(client(r.clone(), d.clone(), OPS))
                    .unwrap()
            })
            .collect();
        futures::executor::block_on(futures::future::join_all(handles))
            .into_iter()
            .sum::<usize>()
    });
    assert_eq!(done, TASKS * (OPS - OPS / ABANDON_EVERY));
    settle(&reactor, &device, TASKS * OPS);
}

fn threads_run(reactor: Reactor) {
    let (device, source) = Device::start(&reactor);
    reactor.add_source(source).unwrap();
    let (r, d) = (reactor.clone(), device.clone());
    let done = within(Duration::from_secs(60), "plain-thread stress", move || {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (r, d) = (r.clone(), d.clone());
                std::thread::spawn(move || r.block_on(client(r.clone(), d, OPS)))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum::<usize>()
    });
    assert_eq!(done, THREADS * (OPS - OPS / ABANDON_EVERY));
    settle(&reactor, &device, THREADS * OPS);
}

#[test]
fn thread_pool_manual() {
    pool_run(manual());
}

#[test]
fn thread_pool_auto() {
    let reactor = auto();
    pool_run(reactor.clone());
    assert!(reactor.stats().notify_wakeups > 0);
}

#[test]
fn plain_threads_manual() {
    threads_run(manual());
}

#[test]
fn plain_threads_auto() {
    threads_run(auto());
}
