//! Helpers shared by the reactor integration tests: a simulated device with
//! a progress source, an operation future, drop-counted values, thread
//! inspection through /proc, and a watchdog.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use psmrail_reactor::{CompletionTable, OpKey, Progress, ProgressSource, Reactor};

/// A completion value that counts its drops.
#[derive(Debug)]
pub(crate) struct Counted {
    pub key: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// A fake NIC: a background thread "executes" posted operations and puts
/// them on a done queue, then notifies the reactor (like an interrupt or
/// socket readiness). The [`DeviceSource`] reaps the done queue when the
/// reactor progresses it, completing slots (like polling a PSM MQ).
pub(crate) struct Device {
    pub table: Arc<CompletionTable<Counted>>,
    post: Mutex<Option<mpsc::Sender<OpKey>>>,
    done: Arc<Mutex<VecDeque<OpKey>>>,
    pub drops: Arc<AtomicUsize>,
    pub made: Arc<AtomicUsize>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
}

/// The progress source of a [`Device`].
pub(crate) struct DeviceSource {
    table: Arc<CompletionTable<Counted>>,
    done: Arc<Mutex<VecDeque<OpKey>>>,
    drops: Arc<AtomicUsize>,
    made: Arc<AtomicUsize>,
}

impl ProgressSource for DeviceSource {
    fn progress(&self) -> Progress {
        let mut batch = [None; 32];
        {
            // try_lock: a source must never block.
            let Ok(mut done) = self.done.try_lock() else {
                return Progress::Idle;
            };
            for slot in batch.iter_mut() {
                *slot = done.pop_front();
                if slot.is_none() {
                    break;
                }
            }
        }
        let mut progress = Progress::Idle;
        for key in batch.into_iter().map_while(|k| k) {
            self.made.fetch_add(1, SeqCst);
            let value = Counted {
                key: key.to_u64(),
                drops: self.drops.clone(),
            };
            self.table
                .complete(key, value)
                .expect("every posted key is completed once");
            progress = Progress::Made;
        }
        progress
    }
}

impl Device {
    /// Starts the device thread; returns the device and its source.
    pub(crate) fn start(reactor: &Reactor) -> (Arc<Device>, Arc<DeviceSource>) {
        let table = Arc::new(CompletionTable::new());
        let done = Arc::new(Mutex::new(VecDeque::new()));
        let drops = Arc::new(AtomicUsize::new(0));
        let made = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<OpKey>();
        let worker = {
            let (done, reactor) = (done.clone(), reactor.clone());
            thread::spawn(move || {
                for key in rx {
                    done.lock().unwrap().push_back(key);
                    reactor.notify();
                }
            })
        };
        let source = Arc::new(DeviceSource {
            table: table.clone(),
            done: done.clone(),
            drops: drops.clone(),
            made: made.clone(),
        });
        let device = Arc::new(Device {
            table,
            post: Mutex::new(Some(tx)),
            done,
            drops,
            made,
            worker: Mutex::new(Some(worker)),
        });
        (device, source)
    }

    /// Posts an operation; the future waits for its completion.
    pub(crate) fn post(&self, reactor: &Reactor) -> OpFuture {
        let key = self.table.insert();
        self.post
            .lock()
            .unwrap()
            .as_ref()
            .expect("device running")
            .send(key)
            .unwrap();
        OpFuture {
            reactor: reactor.clone(),
            table: self.table.clone(),
            key: Some(key),
        }
    }

    /// Stops the device thread (after it has handed over everything posted).
    pub(crate) fn stop(&self) {
        drop(self.post.lock().unwrap().take());
        if let Some(worker) = self.worker.lock().unwrap().take() {
            worker.join().unwrap();
        }
    }

    /// Whether nothing is queued on the device.
    pub(crate) fn idle(&self) -> bool {
        self.done.lock().unwrap().is_empty()
    }
}

/// An operation future built the way psmrail's ops are: poll through
/// `Reactor::poll_completion`, abandon on drop.
pub(crate) struct OpFuture {
    reactor: Reactor,
    table: Arc<CompletionTable<Counted>>,
    key: Option<OpKey>,
}

impl OpFuture {
    pub(crate) fn key(&self) -> OpKey {
        self.key.expect("not finished")
    }
}

impl Future for OpFuture {
    type Output = Counted;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Counted> {
        let key = self.key.expect("polled after completion");
        let out = self.reactor.poll_completion(&self.table, key, cx);
        if out.is_ready() {
            self.key = None;
        }
        out
    }
}

impl Drop for OpFuture {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            drop(self.table.abandon(key));
        }
    }
}

/// Runs `f` on a thread; panics (with `what`) if it does not finish within
/// `limit` (a hang, e.g. a lost wake-up), or re-raises its panic.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(limit) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: did not finish within {limit:?}"),
    }
}

/// Polls `cond` every millisecond until it holds or `limit` passes.
pub(crate) fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// Whether kernel thread `tid` of this process still exists.
pub(crate) fn thread_exists(tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

/// The `comm` (name) of thread `tid`, if it exists.
pub(crate) fn thread_name(tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// Threads of this process whose name is `name`.
pub(crate) fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .map(|c| c.trim_end() == name)
                .unwrap_or(false)
        })
        .count()
}
