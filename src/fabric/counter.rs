//! Counters (`fi_cntr`): how many operations completed, and how many
//! failed, without a queue entry per operation.
//!
//! Counters count every completion of the operations bound to them,
//! whether the operation reports through its future or through a CQ (the
//! operations, `psmrail::ops`, document which counter each completion
//! increments, as the C psm provider does). This module only keeps the two
//! values, wakes waiters, and calls the trigger listener.
//!
//! Differences from the C psm provider: C never increments the error
//! counter itself (`prov/psm/src/psmx_cntr.c`); psmrail's
//! operations do ([`Counter::read_err`]), and so [`Counter::wait`] gives
//! up with `FI_EAVAIL` when the error count moves while it waits, as
//! libfabric's generic counters do, instead of waiting for a success that
//! may never come.
//!
//! Progress (fi_psm(7), "Progress"; C commit `4970f2408`): with a manual
//! reactor, [`Counter::read`] runs one progress round first, and the
//! waits keep progressing, so an application that only watches counters
//! still moves. `read_err` never progresses.
//!
//! Changing a value is one atomic operation; the mutex is taken only when
//! somebody waits, and the listener is called outside it. Nothing here
//! calls back into the engine, so the progress path may count while it
//! holds an engine lock.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::fabric::cq::{deadline, IdleBackoff};
use crate::fabric::wait_list::{lock, wake_all, WaitList};
use crate::reactor::Reactor;
use crate::{Error, ErrorKind, Result};

/// What a counter counts (`fi_cntr_events`). Only completions exist: the C
/// provider rejects anything else with `-FI_EINVAL`, which this enum makes
/// impossible to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CounterEvents {
    /// `FI_CNTR_EVENTS_COMP`: completed operations.
    #[default]
    Completion,
}

/// Attributes of a counter (`fi_cntr_attr`). Wait objects are not
/// modelled: blocking is [`Counter::wait`], async waiting
/// [`Counter::wait_for`].
///
/// ```
/// use psmrail::fabric::{CounterAttr, CounterEvents};
/// let attr = CounterAttr::new().events(CounterEvents::Completion);
/// assert_eq!(attr.events, CounterEvents::Completion);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CounterAttr {
    /// What is counted (always completions).
    pub events: CounterEvents,
}

impl CounterAttr {
    /// Defaults: counts completions.
    pub fn new() -> Self {
        CounterAttr::default()
    }

    /// Sets what is counted.
    pub fn events(mut self, events: CounterEvents) -> Self {
        self.events = events;
        self
    }
}

type Listener = Arc<dyn Fn(u64) + Send + Sync>;

/// What a layer above keeps in a counter, created at its first use and
/// dropped with the counter: the triggered operations waiting on it
/// (`ops/triggered.rs` implements this for its `Triggers`). The counter
/// only owns it; the layer that installed it gets its own type back
/// through `Any` ([`into_any`](Self::into_any)). Changes reach it through
/// the counter's listener, not through this trait.
pub(crate) trait CounterWatch: Any + Send + Sync + fmt::Debug {
    /// The watch as `Any`, to be downcast to its own type (spelled out
    /// rather than a trait upcast, which needs Rust 1.86).
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

struct Inner {
    value: AtomicU64,
    err: AtomicU64,
    /// `waiters.count()`, readable without the mutex. Written only under
    /// it; SeqCst on both sides (a waiter stores it then loads the values,
    /// a change updates a value then loads it) guarantees that one of
    /// them sees the other.
    waiting: AtomicUsize,
    waiters: Mutex<WaitList>,
    cond: Condvar,
    has_listener: AtomicBool,
    listener: RwLock<Option<Listener>>,
    reactor: Reactor,
    /// The triggered operations waiting on this counter (`ops/triggered.rs`),
    /// created at the first one; dropped with the counter.
    triggers: OnceLock<Arc<dyn CounterWatch>>,
    /// Called after every change of either value (wait objects of a layer
    /// above, [`Counter::set_notify`]).
    notify: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Inner {
    fn mirror(&self, list: &WaitList) {
        self.waiting.store(list.count(), SeqCst);
    }

    fn wake(&self) {
        if self.waiting.load(SeqCst) != 0 {
            let guard = lock(&self.waiters);
            wake_all(&self.waiters, guard, &self.cond, |l| l, |l| self.mirror(l));
        }
        if let Some(notify) = self.notify.get() {
            notify();
        }
    }

    fn value_changed(&self, new: u64) {
        self.wake();
        if self.has_listener.load(SeqCst) {
            let listener = self
                .listener
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(listener) = listener {
                listener(new);
            }
        }
    }

    /// `Some(Ok)` when `value >= threshold`, `Some(Err(Avail))` when the
    /// error count is no longer `err_base` (if one is watched).
    fn check(&self, threshold: u64, err_base: Option<u64>) -> Option<Result<()>> {
        if self.value.load(SeqCst) >= threshold {
            return Some(Ok(()));
        }
        match err_base {
            Some(base) if self.err.load(SeqCst) != base => Some(Err(Error::new(
                ErrorKind::Avail,
                format!(
                    "counter wait for {threshold}: an operation completed in error (read_err() = {})",
                    self.err.load(SeqCst)
                ),
            ))),
            _ => None,
        }
    }
}

/// A completion counter (`fid_cntr`): a success count and an error count.
///
/// Opened through a domain (which hands it the domain's reactor) and bound
/// to endpoints; a cheap `Clone` handle (an `Arc` inside): clones are the
/// same counter ([`same`](Self::same)). Safe to use from any number of
/// threads.
///
/// ```
/// use std::time::Duration;
/// use psmrail::config::PsmConfig;
/// use psmrail::fabric::{getinfo, CounterAttr, EngineChoice, Fabric, Hints};
/// use psmrail::ErrorKind;
///
/// let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
/// let hints = Hints::new().config(config).engine(EngineChoice::Soft);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let domain = Fabric::open(&info)?.domain(&info)?;
/// let c = domain.counter(CounterAttr::new())?;
/// c.add(2);
/// c.wait(2, None)?;
/// domain.reactor().block_on(c.wait_for(1));
/// let e = c.wait(3, Some(Duration::from_millis(1))).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::TimedOut);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Counter {
    inner: Arc<Inner>,
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("value", &self.inner.value.load(SeqCst))
            .field("err", &self.inner.err.load(SeqCst))
            .finish()
    }
}

impl Counter {
    /// A counter progressed by `reactor` (the domain's), both values 0.
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn new(attr: CounterAttr, reactor: Reactor) -> Counter {
        let CounterEvents::Completion = attr.events;
        Counter {
            inner: Arc::new(Inner {
                value: AtomicU64::new(0),
                err: AtomicU64::new(0),
                waiting: AtomicUsize::new(0),
                waiters: Mutex::new(WaitList::default()),
                cond: Condvar::new(),
                has_listener: AtomicBool::new(false),
                listener: RwLock::new(None),
                reactor,
                triggers: OnceLock::new(),
                notify: OnceLock::new(),
            }),
        }
    }

    /// One more successful completion.
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    /// One more failed completion. Wakes waiters (so [`wait`](Self::wait)
    /// can report it); the listener is not called.
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn inc_err(&self) {
        self.add_err(1);
    }

    /// The success count (`fi_cntr_read`). With a manual reactor one
    /// progress round runs first (C commit `4970f2408`), so polling a
    /// counter drives the provider.
    pub fn read(&self) -> u64 {
        if self.inner.reactor.is_manual() {
            self.inner.reactor.progress();
        }
        self.inner.value.load(SeqCst)
    }

    /// The error count (`fi_cntr_readerr`). Never progresses.
    pub fn read_err(&self) -> u64 {
        self.inner.err.load(SeqCst)
    }

    /// Adds `n` to the success count (`fi_cntr_add`; wraps at 2^64).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CounterAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// # let c = domain.counter(CounterAttr::new())?;
    /// c.set(5);
    /// c.add(2);
    /// assert_eq!(c.read(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add(&self, n: u64) {
        let new = self.inner.value.fetch_add(n, SeqCst).wrapping_add(n);
        self.inner.value_changed(new);
    }

    /// Sets the success count (`fi_cntr_set`); may lower it.
    pub fn set(&self, v: u64) {
        self.inner.value.store(v, SeqCst);
        self.inner.value_changed(v);
    }

    /// Adds `n` to the error count (`fi_cntr_adderr`; wraps at 2^64).
    pub fn add_err(&self, n: u64) {
        self.inner.err.fetch_add(n, SeqCst);
        self.inner.wake();
    }

    /// Sets the error count (`fi_cntr_seterr`).
    pub fn set_err(&self, v: u64) {
        self.inner.err.store(v, SeqCst);
        self.inner.wake();
    }

    /// Blocks until the success count is at least `threshold`
    /// (`fi_cntr_wait`); `None` waits forever.
    ///
    /// * Manual reactor: a progress loop (busy; it yields the CPU after 64
    ///   idle rounds in a row).
    /// * Auto reactor: sleeps until the counter changes.
    ///
    /// # Errors
    /// * [`ErrorKind::Avail`]: the error count changed during the wait
    ///   (some operation failed; see the module docs).
    /// * [`ErrorKind::TimedOut`]: the threshold was not reached in time.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CounterAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// # let c = domain.counter(CounterAttr::new())?;
    /// c.add(3);
    /// c.wait(3, Some(std::time::Duration::ZERO))?;
    /// c.add_err(1); // an operation failed: a wait started now sees no change
    /// c.wait(3, None)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        let inner = &*self.inner;
        let err_base = Some(inner.err.load(SeqCst));
        let deadline = deadline(timeout);
        let timed_out = || {
            Error::new(
                ErrorKind::TimedOut,
                format!(
                    "counter wait: the value stayed below {threshold} for the {:?} timeout (value {})",
                    timeout.unwrap_or_default(),
                    inner.value.load(SeqCst)
                ),
            )
        };
        if inner.reactor.is_manual() {
            let mut backoff = IdleBackoff::default();
            loop {
                if let Some(r) = inner.check(threshold, err_base) {
                    return r;
                }
                let progress = inner.reactor.progress();
                if let Some(r) = inner.check(threshold, err_base) {
                    return r;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timed_out());
                }
                backoff.after(progress);
            }
        }
        let mut list = lock(&inner.waiters);
        list.add_sleeper();
        inner.mirror(&list);
        let result = loop {
            if let Some(r) = inner.check(threshold, err_base) {
                break r;
            }
            let wait = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => break Err(timed_out()),
                },
            };
            list = match wait {
                None => inner
                    .cond
                    .wait(list)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(left) => {
                    inner
                        .cond
                        .wait_timeout(list, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        };
        list.remove_sleeper();
        inner.mirror(&list);
        result
    }

    /// A future resolving once the success count is at least `threshold`.
    /// It does not watch the error count (use
    /// [`wait_for_or_error`](Self::wait_for_or_error) for that), so it
    /// waits forever if the operations it waits for fail.
    ///
    /// Manual reactor: each poll progresses once and, if not there yet,
    /// wakes its own task (busy-polling). Auto reactor: registers its
    /// waker; any change of the counter wakes it to re-check. `'static`;
    /// dropping it is always fine.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CounterAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let domain = Fabric::open(&info)?.domain(&info)?;
    /// # let c = domain.counter(CounterAttr::new())?;
    /// let waiter = c.clone();
    /// let t = std::thread::spawn(move || waiter.add(10));
    /// domain.reactor().block_on(async { c.wait_for(10).await });
    /// t.join().unwrap();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_for(&self, threshold: u64) -> CounterWait {
        CounterWait {
            core: WaitCore::new(self.clone(), threshold, None),
        }
    }

    /// As [`wait_for`](Self::wait_for), but resolves with `Err` of kind
    /// [`ErrorKind::Avail`] if the error count changes first (the async
    /// form of [`wait`](Self::wait)).
    pub fn wait_for_or_error(&self, threshold: u64) -> CounterWaitOrError {
        let base = self.inner.err.load(SeqCst);
        CounterWaitOrError {
            core: WaitCore::new(self.clone(), threshold, Some(base)),
        }
    }

    /// Installs `notify`, called after every change of the success or the
    /// error count (the application's and the operations'), on the
    /// changing thread, outside the counter's mutex: for a wait object of
    /// a layer above, such as the C face's file descriptors. It must be
    /// short and must not block. One per counter: returns false (and drops
    /// `notify`) if one is installed already.
    pub fn set_notify(&self, notify: impl Fn() + Send + Sync + 'static) -> bool {
        self.inner.notify.set(Box::new(notify)).is_ok()
    }

    /// Whether `other` is a handle on this same counter.
    pub fn same(&self, other: &Counter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Installs (or replaces) the function called after every change of
    /// the success count ([`add`](Self::add), [`set`](Self::set) and the
    /// operations' increments) with the value right after that change.
    /// Triggered operations use it.
    ///
    /// It is called on the changing thread, outside the counter's mutex,
    /// so it may read or change the counter. Calls from concurrent changes
    /// can run at once and arrive out of order (each reports the value its
    /// own change produced); a listener that acts on "value ≥ threshold"
    /// should compare against the value it is given or re-read. It must
    /// not block on the engine: it may run on the progress path.
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn set_listener(&self, f: Arc<dyn Fn(u64) + Send + Sync>) {
        *self
            .inner
            .listener
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(f);
        self.inner.has_listener.store(true, SeqCst);
    }
}

impl Counter {
    /// The success count without progressing: for code that may run where
    /// a progress round must not start (under a lock the progress path
    /// takes).
    pub(crate) fn value(&self) -> u64 {
        self.inner.value.load(SeqCst)
    }

    /// The reactor that progresses this counter (the domain's).
    pub(crate) fn reactor(&self) -> &Reactor {
        &self.inner.reactor
    }

    /// Where the triggered operations of this counter live
    /// (`ops/triggered.rs` fills it).
    pub(crate) fn triggers(&self) -> &OnceLock<Arc<dyn CounterWatch>> {
        &self.inner.triggers
    }
}

/// What the two counter futures share.
#[derive(Debug)]
struct WaitCore {
    counter: Counter,
    threshold: u64,
    err_base: Option<u64>,
    key: Option<u64>,
}

impl WaitCore {
    fn new(counter: Counter, threshold: u64, err_base: Option<u64>) -> Self {
        WaitCore {
            counter,
            threshold,
            err_base,
            key: None,
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let inner = &*self.counter.inner;
        if let Some(r) = inner.check(self.threshold, self.err_base) {
            self.disarm();
            return Poll::Ready(r);
        }
        if inner.reactor.is_manual() {
            inner.reactor.progress();
            if let Some(r) = inner.check(self.threshold, self.err_base) {
                return Poll::Ready(r);
            }
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut list = lock(&inner.waiters);
        let key = match self.key {
            Some(key) => key,
            None => *self.key.insert(list.new_key()),
        };
        list.arm(key, cx.waker());
        inner.mirror(&list);
        // Registered (and the mirror published) before this re-check: a
        // change after it will see `waiting > 0` and wake us.
        if let Some(r) = inner.check(self.threshold, self.err_base) {
            list.disarm(key);
            inner.mirror(&list);
            self.key = None;
            return Poll::Ready(r);
        }
        Poll::Pending
    }

    fn disarm(&mut self) {
        if let Some(key) = self.key.take() {
            let inner = &*self.counter.inner;
            let mut list = lock(&inner.waiters);
            list.disarm(key);
            inner.mirror(&list);
        }
    }
}

impl Drop for WaitCore {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// The future of [`Counter::wait_for`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct CounterWait {
    core: WaitCore,
}

impl Future for CounterWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Without an error base `check` only ever says Ok.
        self.get_mut().core.poll(cx).map(|_| ())
    }
}

/// The future of [`Counter::wait_for_or_error`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct CounterWaitOrError {
    core: WaitCore,
}

impl Future for CounterWaitOrError {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().core.poll(cx)
    }
}

#[cfg(test)]
mod tests;

impl crate::fabric::MemoryRegion {
    /// `fi_mr_bind` of a counter: `counter` counts peers' completed
    /// accesses of `events` (`MrAccess::REMOTE_WRITE`, `REMOTE_READ`) to
    /// this region, each once; several counters may be bound.
    pub fn bind_counter(&self, counter: &Counter, events: crate::fabric::MrAccess) {
        let c = counter.clone();
        self.watch(events, Arc::new(move || c.inc()));
    }
}
