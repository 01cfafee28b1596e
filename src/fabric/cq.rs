//! Completion queues (`fi_cq`): the libfabric way of learning that an
//! operation finished.
//!
//! # Futures, CQs and counters
//!
//! Every psmrail operation is a future that delivers its own result. A CQ
//! entry is produced only for operations posted the libfabric way, with a
//! user context (a `u64` that comes back in [`CqEntry::context`]); the
//! operations (`psmrail::ops`) document which calls do that and which
//! completions they suppress. Counters ([`Counter`](super::Counter)) count
//! both kinds. This module only stores and hands out entries; the
//! operations push them from the progress path.
//!
//! # Behaviour (fi_cq(3); C: `prov/psm/src/psmx_cq.c`)
//!
//! * Entries come out in the order they were pushed (completion order).
//! * An error entry at the head makes [`read`](CompletionQueue::read),
//!   [`read_many`](CompletionQueue::read_many), [`sread`](CompletionQueue::sread)
//!   and [`next`](CompletionQueue::next) fail with [`ErrorKind::Avail`]
//!   (`FI_EAVAIL`) until [`readerr`](CompletionQueue::readerr) takes it;
//!   entries behind it wait.
//! * Progress (fi_psm(7), "Progress": the application is expected to call
//!   `fi_cq_read` or `fi_cntr_read` from time to time). With a manual
//!   reactor, `read` and `read_many` run one progress round when the queue
//!   is empty; `sread` and `next` keep progressing while they wait.
//!   With an auto reactor they never progress: the progress thread pushes
//!   and wakes them. [`len`](CompletionQueue::len) and
//!   [`is_empty`](CompletionQueue::is_empty) never progress.
//! * The queue is unbounded, as in C (`attr.size` is only a hint for the
//!   initial allocation): an operation can never fail because its CQ is
//!   full. Flow control is the endpoint's business.
//!
//! Pushing takes one short leaf mutex, never calls back into the engine or
//! the reactor, and wakes waiters after releasing the mutex, so the
//! progress path may push while it holds an engine lock.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::OpBuffer;
use crate::fabric::wait_list::{lock, wake_all, WaitList};
use crate::fabric::{CompletionFlags, FiAddr};
use crate::reactor::{Progress, Reactor};
use crate::{Error, ErrorKind, Result};

/// Idle progress rounds in a row after which a manual-mode busy wait
/// yields its CPU once (as `Reactor::block_on` does).
pub(crate) const IDLE_ROUNDS_BEFORE_YIELD: u32 = 64;

/// Which entry fields an application may rely on (`fi_cq_format`).
///
/// psmrail entries always carry every field ([`CqEntry`]); the format only
/// documents which ones are meaningful to a program written against that
/// libfabric format. The others hold what the operation knew (often their
/// defaults: 0, `None`, [`FiAddr::UNSPEC`]).
///
/// ```
/// use psmrail::fabric::CqFormat;
/// assert_eq!(CqFormat::Unspec.resolved(), CqFormat::Tagged);
/// assert_eq!(CqFormat::Msg.resolved(), CqFormat::Msg);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CqFormat {
    /// `FI_CQ_FORMAT_UNSPEC`: the provider chooses; the psm provider
    /// chooses [`Tagged`](Self::Tagged).
    #[default]
    Unspec,
    /// `FI_CQ_FORMAT_CONTEXT`: `context` only.
    Context,
    /// `FI_CQ_FORMAT_MSG`: `context`, `flags`, `len`.
    Msg,
    /// `FI_CQ_FORMAT_DATA`: as `Msg`, plus `buffer`/`offset` and `data`.
    Data,
    /// `FI_CQ_FORMAT_TAGGED`: as `Data`, plus `tag`.
    Tagged,
}

impl CqFormat {
    /// The format a CQ opened with this one uses: `Unspec` becomes
    /// `Tagged`, as in the C provider (`prov/psm/src/psmx_cq.c`); fi_cq(3)
    /// leaves the default format to the provider.
    pub fn resolved(self) -> CqFormat {
        match self {
            CqFormat::Unspec => CqFormat::Tagged,
            other => other,
        }
    }
}

/// Attributes of a completion queue (`fi_cq_attr`).
///
/// Wait objects (`wait_obj`, `wait_cond`, `wait_set`) are not modelled:
/// blocking is [`CompletionQueue::sread`] and async waiting is
/// [`CompletionQueue::next`].
///
/// ```
/// use psmrail::fabric::{CqAttr, CqFormat};
/// let attr = CqAttr::new().format(CqFormat::Data).size(128);
/// assert_eq!(attr.format, CqFormat::Data);
/// assert_eq!(attr.size, 128);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CqAttr {
    /// Entry format (default `Unspec`, which becomes `Tagged`).
    pub format: CqFormat,
    /// Expected number of entries: a hint that sizes the first allocation
    /// (clamped to 64..=1024; 0 = 64, C's pre-allocation). The queue
    /// itself is unbounded, as the C provider's list is.
    pub size: usize,
}

impl CqAttr {
    /// Defaults: format `Unspec`, size 0.
    pub fn new() -> Self {
        CqAttr::default()
    }

    /// Sets the entry format.
    pub fn format(mut self, format: CqFormat) -> Self {
        self.format = format;
        self
    }

    /// Sets the size hint.
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    fn initial_capacity(&self) -> usize {
        self.size.clamp(64, 1024)
    }
}

/// A successful completion (`fi_cq_tagged_entry` plus the source address
/// `fi_cq_readfrom` reports, plus the operation's buffer).
///
/// ```
/// use psmrail::fabric::{CompletionFlags, CqEntry, FiAddr};
/// let e = CqEntry::new(7, CompletionFlags::SEND | CompletionFlags::TAGGED);
/// assert_eq!((e.context, e.len, e.source), (7, 0, FiAddr::UNSPEC));
/// assert!(e.buffer.is_none());
/// ```
#[derive(Debug)]
pub struct CqEntry {
    /// The context the operation was posted with (`op_context`).
    pub context: u64,
    /// What completed.
    pub flags: CompletionFlags,
    /// Bytes sent, received, read or written (a peek: the message length).
    pub len: usize,
    /// The operation's buffer handed back to its owner; `None` when the
    /// operation had none to return (peek, inject, target-side events).
    pub buffer: Option<OpBuffer>,
    /// Where in `buffer` the data starts (a multi-receive buffer holds
    /// several messages); 0 otherwise.
    pub offset: usize,
    /// Immediate data (with [`CompletionFlags::REMOTE_CQ_DATA`]), else 0.
    pub data: u64,
    /// The message tag for tagged receives, else 0.
    pub tag: u64,
    /// The sender, for receives whose source is known; otherwise
    /// [`FiAddr::UNSPEC`] (libfabric's `FI_ADDR_NOTAVAIL`).
    pub source: FiAddr,
}

impl CqEntry {
    /// An entry for `context` with `flags` and every other field at its
    /// default (0, `None`, [`FiAddr::UNSPEC`]).
    pub fn new(context: u64, flags: CompletionFlags) -> Self {
        CqEntry {
            context,
            flags,
            len: 0,
            buffer: None,
            offset: 0,
            data: 0,
            tag: 0,
            source: FiAddr::UNSPEC,
        }
    }
}

/// A failed completion (`fi_cq_err_entry`).
///
/// ```
/// use psmrail::{Error, ErrorKind, Truncation};
/// use psmrail::fabric::{CompletionFlags, CqErrEntry};
/// let t = Truncation { msg_len: 100, received: 64 };
/// let e = CqErrEntry::new(3, CompletionFlags::RECV, Error::truncated(t, "recv"));
/// assert_eq!(e.olen, 36);
/// assert_eq!(e.err(), 265); // FI_ETRUNC
/// ```
#[derive(Debug)]
pub struct CqErrEntry {
    /// The context the operation was posted with (0 for operations posted
    /// without completion, which still report errors, as in the C provider).
    pub context: u64,
    /// What failed.
    pub flags: CompletionFlags,
    /// Bytes transferred before the failure.
    pub len: usize,
    /// The operation's buffer handed back, if it had one.
    pub buffer: Option<OpBuffer>,
    /// Bytes that did not fit (truncation), else 0.
    pub olen: u64,
    /// The message tag, if known.
    pub tag: u64,
    /// Immediate data, if any.
    pub data: u64,
    /// What went wrong; [`err`](Self::err) is its positive errno.
    pub error: Error,
    /// The engine's own error code (PSM's `psm_error_t`);
    /// [`PROV_INTERNAL`](Self::PROV_INTERNAL) for errors psmrail made.
    pub prov_errno: i32,
}

impl CqErrEntry {
    /// `prov_errno` of errors the provider made itself (PSM's
    /// `PSM_INTERNAL_ERR`, as C uses it).
    pub const PROV_INTERNAL: i32 = 8;

    /// An error entry for `context` with `flags` and `error`; `olen` comes
    /// from the error's truncation lengths, `prov_errno` is
    /// [`PROV_INTERNAL`](Self::PROV_INTERNAL), the rest is 0 / `None`.
    pub fn new(context: u64, flags: CompletionFlags, error: Error) -> Self {
        CqErrEntry {
            context,
            flags,
            len: 0,
            buffer: None,
            olen: error.truncation().map_or(0, |t| t.overflow()),
            tag: 0,
            data: 0,
            error,
            prov_errno: Self::PROV_INTERNAL,
        }
    }

    /// The positive libfabric error number (`fi_cq_err_entry.err`).
    pub fn err(&self) -> i32 {
        self.error.kind().errno()
    }
}

enum Slot {
    Ok(CqEntry),
    // Boxed: errors are rare, and this keeps every queue slot small.
    Err(Box<CqErrEntry>),
}

struct State {
    queue: VecDeque<Slot>,
    /// The queue's length, as readers look at it without the lock
    /// ([`Inner::queued`]): stored after every change of `queue`.
    queued: Arc<AtomicUsize>,
    waiters: WaitList,
    /// Threads inside [`CompletionQueue::sread`].
    sreaders: usize,
    /// Bumped by [`CompletionQueue::signal`] while some thread is in
    /// `sread`: each of them returns.
    signals: u64,
    /// A signal given while no thread was in `sread`: the next one
    /// returns at once.
    signal_pending: bool,
}

impl State {
    /// The head entry if it is a success; `Err(Avail)` if it is an error;
    /// `None` if the queue is empty.
    #[inline]
    fn take_head(&mut self) -> Option<Result<CqEntry>> {
        match self.queue.front()? {
            Slot::Err(_) => Some(Err(avail())),
            Slot::Ok(_) => match self.queue.pop_front() {
                Some(Slot::Ok(e)) => {
                    self.queued.store(self.queue.len(), Release);
                    Some(Ok(e))
                }
                // Not reached: the front was just seen to be a success.
                _ => None,
            },
        }
    }
}

fn signalled() -> Error {
    Error::new(
        ErrorKind::Again,
        "completion queue: sread was woken by signal() before an entry arrived",
    )
}

fn avail() -> Error {
    Error::new(
        ErrorKind::Avail,
        "completion queue: an error entry is at the head; take it with readerr()",
    )
}

fn timed_out(what: &str, timeout: Option<Duration>) -> Error {
    Error::new(
        ErrorKind::TimedOut,
        format!(
            "{what}: nothing arrived within the {:?} timeout",
            timeout.unwrap_or_default()
        ),
    )
}

/// `Some(deadline)`, or `None` for "forever" (no timeout, or one so large
/// that it overflows `Instant`).
pub(crate) fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// Counts idle manual progress rounds and yields the CPU now and then.
#[derive(Default)]
pub(crate) struct IdleBackoff(u32);

impl IdleBackoff {
    pub(crate) fn after(&mut self, progress: Progress) {
        if progress == Progress::Made {
            self.0 = 0;
        } else {
            self.0 += 1;
            if self.0 >= IDLE_ROUNDS_BEFORE_YIELD {
                self.0 = 0;
                std::thread::yield_now();
            }
        }
    }
}

/// What [`CompletionQueue::set_notify`] installs.
type Notify = Box<dyn Fn() + Send + Sync>;

struct Inner {
    state: Mutex<State>,
    /// How many entries the queue holds (a copy of `State::queued`): a
    /// read finds an empty queue without taking its mutex, which a
    /// program polling `fi_cq_read` does far more often than it finds an
    /// entry.
    queued: Arc<AtomicUsize>,
    cond: Condvar,
    reactor: Reactor,
    format: CqFormat,
    /// Called after every push (wait objects of a layer above).
    notify: OnceLock<Notify>,
}

impl Inner {
    /// Whether the queue is empty, without its mutex (a push racing with
    /// this is seen by the next look).
    #[inline]
    fn looks_empty(&self) -> bool {
        self.queued.load(Acquire) == 0
    }

    fn take_head(&self) -> Option<Result<CqEntry>> {
        if self.looks_empty() {
            return None;
        }
        lock(&self.state).take_head()
    }

    fn push_slot(&self, slot: Slot) {
        let mut st = lock(&self.state);
        st.queue.push_back(slot);
        st.queued.store(st.queue.len(), Release);
        if st.waiters.is_empty() {
            drop(st);
        } else {
            wake_all(&self.state, st, &self.cond, |s| &mut s.waiters, |_| {});
        }
        if let Some(notify) = self.notify.get() {
            notify();
        }
    }
}

/// Counts a thread out of `sread` on every way out.
struct SreadGuard<'a>(&'a Inner);

impl Drop for SreadGuard<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.sreaders = st.sreaders.saturating_sub(1);
    }
}

/// A completion queue (`fid_cq`): entries of operations posted with a
/// context, in completion order.
///
/// Opened through a domain (which hands it the domain's reactor) and bound
/// to endpoints; a cheap `Clone` handle (an `Arc` inside): clones are the
/// same queue ([`same`](Self::same)). Safe to use from any number of
/// threads.
///
/// Entries come out in completion order. An error entry at the head makes
/// [`read`](Self::read), [`read_many`](Self::read_many),
/// [`sread`](Self::sread) and [`next`](Self::next) fail with
/// [`ErrorKind::Avail`] (`FI_EAVAIL`) until
/// [`readerr`](Self::readerr) takes it. With a manual reactor, `read` and
/// `read_many` run one progress round when the queue is empty and `sread`
/// and `next` keep progressing while they wait (fi_psm(7): reading a CQ
/// makes progress); with an auto reactor the progress thread pushes and
/// wakes them. The queue is unbounded, as in C.
///
/// ```
/// use psmrail::config::PsmConfig;
/// use psmrail::fabric::{getinfo, CqAttr, CqFormat, EngineChoice, Fabric, Hints};
///
/// let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
/// let hints = Hints::new().config(config).engine(EngineChoice::Soft);
/// let info = getinfo(Some(&hints))?.remove(0);
/// let domain = Fabric::open(&info)?.domain(&info)?;
/// let cq = domain.cq(CqAttr::new().format(CqFormat::Data))?;
/// assert!(cq.read()?.is_none()); // nothing posted, nothing completed
/// assert!(cq.same(&cq.clone()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CompletionQueue {
    inner: Arc<Inner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("format", &self.inner.format)
            .field("len", &self.len())
            .finish()
    }
}

impl CompletionQueue {
    /// A queue progressed by `reactor` (the domain's).
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn new(attr: CqAttr, reactor: Reactor) -> CompletionQueue {
        let queued = Arc::new(AtomicUsize::new(0));
        CompletionQueue {
            inner: Arc::new(Inner {
                queued: queued.clone(),
                state: Mutex::new(State {
                    queue: VecDeque::with_capacity(attr.initial_capacity()),
                    queued,
                    waiters: WaitList::default(),
                    sreaders: 0,
                    signals: 0,
                    signal_pending: false,
                }),
                cond: Condvar::new(),
                reactor,
                format: attr.format.resolved(),
                notify: OnceLock::new(),
            }),
        }
    }

    /// Appends a successful completion and wakes waiters. Never blocks on
    /// anything but the queue's own short mutex, never calls the engine;
    /// allocates only when the queue outgrows its largest size so far.
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn push(&self, e: CqEntry) {
        self.inner.push_slot(Slot::Ok(e));
    }

    /// Appends an error completion and wakes waiters (as [`push`](Self::push);
    /// the entry itself is boxed).
    #[allow(dead_code)] // used by the domain and the ops
    pub(crate) fn push_err(&self, e: CqErrEntry) {
        self.inner.push_slot(Slot::Err(Box::new(e)));
    }

    /// Appends a completion the caller made (wakes waiters, as the
    /// provider's own): for a layer that drives operations itself and
    /// reports them through this queue, such as the C face's multi-rail
    /// RMA, whose futures it polls. An entry with an error goes to
    /// [`readerr`](Self::readerr)'s side of the queue.
    pub fn write(&self, e: std::result::Result<CqEntry, CqErrEntry>) {
        match e {
            Ok(e) => self.push(e),
            Err(e) => self.push_err(e),
        }
    }

    /// Takes the oldest entry (`fi_cq_read` with count 1): `Ok(None)` if
    /// there is none (C's `-FI_EAGAIN`).
    ///
    /// With a manual reactor an empty queue first gets one progress round.
    ///
    /// # Errors
    /// [`ErrorKind::Avail`] if the oldest entry is an error entry: take it
    /// with [`readerr`](Self::readerr).
    pub fn read(&self) -> Result<Option<CqEntry>> {
        if let Some(r) = self.inner.take_head() {
            return r.map(Some);
        }
        if !self.inner.reactor.is_manual() {
            return Ok(None);
        }
        self.inner.reactor.progress();
        self.inner.take_head().transpose()
    }

    /// Moves up to `max` of the oldest entries into `out`, stopping before
    /// an error entry, and returns how many it moved (`fi_cq_read`).
    ///
    /// With a manual reactor an empty queue first gets one progress round.
    /// `max == 0` moves nothing and does not progress.
    ///
    /// # Errors
    /// [`ErrorKind::Avail`] if the oldest entry is an error entry (so
    /// nothing could be moved).
    pub fn read_many(&self, out: &mut Vec<CqEntry>, max: usize) -> Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let n = self.drain_into(out, max)?;
        if n > 0 || !self.inner.reactor.is_manual() {
            return Ok(n);
        }
        self.inner.reactor.progress();
        self.drain_into(out, max)
    }

    fn drain_into(&self, out: &mut Vec<CqEntry>, max: usize) -> Result<usize> {
        if self.inner.looks_empty() {
            return Ok(0);
        }
        let mut st = lock(&self.inner.state);
        let mut n = 0;
        while n < max {
            match st.take_head() {
                Some(Ok(e)) => out.push(e),
                Some(Err(e)) if n == 0 => return Err(e),
                Some(Err(_)) | None => break,
            }
            n += 1;
        }
        Ok(n)
    }

    /// Takes the error entry at the head of the queue (`fi_cq_readerr`):
    /// the one that made `read` fail with `Avail`. `None` if the head is a
    /// success or the queue is empty (errors are not taken out of order).
    /// Never progresses.
    pub fn readerr(&self) -> Option<CqErrEntry> {
        let mut st = lock(&self.inner.state);
        if !matches!(st.queue.front(), Some(Slot::Err(_))) {
            return None;
        }
        let head = st.queue.pop_front();
        st.queued.store(st.queue.len(), Release);
        match head {
            Some(Slot::Err(e)) => Some(*e),
            _ => None,
        }
    }

    /// Waits for the oldest entry and takes it (`fi_cq_sread`); `None`
    /// waits forever.
    ///
    /// * Manual reactor: a progress loop (busy; it yields the CPU after 64
    ///   idle rounds in a row), as C's busy poll.
    /// * Auto reactor: sleeps until a push wakes it.
    ///
    /// # Errors
    /// * [`ErrorKind::Avail`]: the oldest entry is an error entry.
    /// * [`ErrorKind::TimedOut`]: nothing arrived in time. C's provider
    ///   returned `-FI_EAGAIN` here, only because its sread fell through to
    ///   a read after the wait. psmrail says `FI_ETIMEDOUT`: a blocking
    ///   call with a deadline should say that the deadline passed, as
    ///   `fi_cntr_wait` (and [`Counter::wait`](super::Counter::wait)) do,
    ///   while "nothing yet" is `Ok(None)` from [`read`](Self::read), not
    ///   an error. A C shim maps it back to `-FI_EAGAIN`.
    /// * [`ErrorKind::Again`]: [`signal`](Self::signal) woke it (or was
    ///   given before it started) and no entry was there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail::ErrorKind;
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CqAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let cq = Fabric::open(&info)?.domain(&info)?.cq(CqAttr::new())?;
    /// match cq.sread(Some(Duration::from_millis(10))) {
    ///     Ok(entry) => println!("context {} done", entry.context),
    ///     Err(e) if e.kind() == ErrorKind::TimedOut => println!("nothing yet"),
    ///     Err(e) if e.kind() == ErrorKind::Avail => println!("failed: {:?}", cq.readerr()),
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sread(&self, timeout: Option<Duration>) -> Result<CqEntry> {
        let deadline = deadline(timeout);
        let base = {
            let mut st = lock(&self.inner.state);
            if let Some(r) = st.take_head() {
                return r;
            }
            if std::mem::take(&mut st.signal_pending) {
                return Err(signalled());
            }
            st.sreaders += 1;
            st.signals
        };
        let _inside = SreadGuard(&self.inner);
        if self.inner.reactor.is_manual() {
            let mut backoff = IdleBackoff::default();
            loop {
                let progress = self.inner.reactor.progress();
                {
                    let mut st = lock(&self.inner.state);
                    if let Some(r) = st.take_head() {
                        return r;
                    }
                    if st.signals != base {
                        return Err(signalled());
                    }
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timed_out("sread", timeout));
                }
                backoff.after(progress);
            }
        }
        let mut st = lock(&self.inner.state);
        loop {
            if let Some(r) = st.take_head() {
                return r;
            }
            if st.signals != base {
                return Err(signalled());
            }
            let wait = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(timed_out("sread", timeout)),
                },
            };
            st.waiters.add_sleeper();
            st = match wait {
                None => self
                    .inner
                    .cond
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Some(left) => {
                    self.inner
                        .cond
                        .wait_timeout(st, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
            st.waiters.remove_sleeper();
        }
    }

    /// Wakes every thread blocked in [`sread`](Self::sread) on this queue
    /// (`fi_cq_signal`): each returns [`ErrorKind::Again`] unless an entry
    /// is there for it. Given while no thread is in `sread`, it is kept for
    /// the next `sread`, which returns at once (so a signal cannot be lost
    /// to a thread that was about to block). Futures of
    /// [`next`](Self::next) are not affected.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CqAttr, EngineChoice, Fabric, Hints};
    /// # use psmrail::ErrorKind;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let cq = Fabric::open(&info)?.domain(&info)?.cq(CqAttr::new())?;
    /// cq.signal();
    /// let e = cq.sread(None).unwrap_err(); // returns at once
    /// assert_eq!(e.kind(), ErrorKind::Again);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn signal(&self) {
        {
            let mut st = lock(&self.inner.state);
            if st.sreaders == 0 {
                st.signal_pending = true;
            } else {
                st.signals = st.signals.wrapping_add(1);
            }
        }
        self.inner.cond.notify_all();
    }

    /// Installs `notify`, called after every entry is queued (successes
    /// and errors, from the progress path or [`write`](Self::write)), on
    /// the pushing thread, after the queue's mutex is released: for a wait
    /// object of a layer above, such as the C face's file descriptors. It
    /// must be short and must not block. One per queue: returns false (and
    /// drops `notify`) if one is installed already.
    pub fn set_notify(&self, notify: impl Fn() + Send + Sync + 'static) -> bool {
        self.inner.notify.set(Box::new(notify)).is_ok()
    }

    /// A future resolving with the oldest entry, taking it.
    ///
    /// * Manual reactor: each poll runs a progress round if the queue is
    ///   empty and, if still nothing, wakes its own task (busy-polling, as
    ///   every manual-mode future; see `Reactor`).
    /// * Auto reactor: registers its waker and sleeps until a push.
    ///
    /// It owns a handle on the queue (`'static`, can be spawned). Dropping
    /// it takes nothing. It resolves with `Err` of kind
    /// [`ErrorKind::Avail`] if the oldest entry is (or becomes) an error
    /// entry.
    ///
    /// ```
    /// use futures::FutureExt;
    /// use psmrail::fabric::CompletionQueue;
    ///
    /// async fn on_completion(cq: &CompletionQueue) -> psmrail::Result<()> {
    ///     let entry = cq.next().await?;
    ///     println!("{} bytes for context {}", entry.len, entry.context);
    ///     Ok(())
    /// }
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CqAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let cq = Fabric::open(&info)?.domain(&info)?.cq(CqAttr::new())?;
    /// // Nothing was posted: one poll finds nothing.
    /// assert!(on_completion(&cq).now_or_never().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next(&self) -> CqNext {
        CqNext {
            cq: self.clone(),
            key: None,
        }
    }

    /// Entries queued, errors included. Never progresses.
    pub fn len(&self) -> usize {
        self.inner.queued.load(Acquire)
    }

    /// Whether no entry is queued. Never progresses.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One progress round of the queue's reactor when its progress is
    /// manual, as a [`read`](Self::read) that finds nothing runs (a no-op
    /// under auto progress, whose thread progresses); whether anything
    /// moved. For a poll loop that looks at [`is_empty`](Self::is_empty)
    /// before it reads.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, CqAttr, EngineChoice, Fabric, Hints};
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false).build()?;
    /// # let info = getinfo(Some(&Hints::new().config(config).engine(EngineChoice::Soft)))?.remove(0);
    /// # let cq = Fabric::open(&info)?.domain(&info)?.cq(CqAttr::new())?;
    /// if cq.is_empty() {
    ///     cq.progress();
    /// }
    /// assert!(cq.read()?.is_none()); // nothing was posted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn progress(&self) -> bool {
        self.inner.reactor.is_manual() && self.inner.reactor.progress().made()
    }

    /// The queue's format (never `Unspec`: that became `Tagged`).
    pub fn format(&self) -> CqFormat {
        self.inner.format
    }

    /// Whether `other` is a handle on this same queue.
    pub fn same(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The future of [`CompletionQueue::next`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct CqNext {
    cq: CompletionQueue,
    key: Option<u64>,
}

impl Future for CqNext {
    type Output = Result<CqEntry>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<CqEntry>> {
        let this = self.get_mut();
        let inner = &this.cq.inner;
        if inner.reactor.is_manual() {
            if let Some(r) = inner.take_head() {
                return Poll::Ready(r);
            }
            inner.reactor.progress();
            if let Some(r) = inner.take_head() {
                return Poll::Ready(r);
            }
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        // Check and register in one critical section: a push cannot fall
        // between them.
        let mut st = lock(&inner.state);
        if let Some(r) = st.take_head() {
            if let Some(key) = this.key.take() {
                st.waiters.disarm(key);
            }
            return Poll::Ready(r);
        }
        let key = match this.key {
            Some(key) => key,
            None => *this.key.insert(st.waiters.new_key()),
        };
        st.waiters.arm(key, cx.waker());
        Poll::Pending
    }
}

impl Drop for CqNext {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.cq.inner.state).waiters.disarm(key);
        }
    }
}

#[cfg(test)]
mod tests;
