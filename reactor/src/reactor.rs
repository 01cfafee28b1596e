//! The reactor handle: its mode, its sources, progress rounds, `notify`,
//! and the helper futures use to wait for a completion slot.
//!
//! The modes and their costs are documented on [`Reactor`].
//!
//! Dropping the last handle of an auto reactor stops and joins its thread.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::auto_thread::{make_poll, AutoThread, AutoThreadInfo, Shared};
use crate::completion::{CompletionTable, OpKey};
use crate::cpu_set::CpuSet;
use crate::gate::SleepGate;
use crate::idle_assist::IdleAssist;
use crate::source::{Progress, ProgressSource, SourceId};
use crate::source_list::SourceList;
use crate::stats::{bump, Counters, ReactorStats};

/// Settings of the auto progress thread.
///
/// ```
/// use std::time::Duration;
/// use psmrail_reactor::{AutoProgress, CpuSet};
///
/// let cfg = AutoProgress::new()
///     .affinity([0].into_iter().collect::<CpuSet>())
///     .interval(Duration::from_micros(500));
/// assert_eq!(cfg.interval, Duration::from_micros(500));
///
/// // FI_PSM_PROG_INTERVAL unset: 1 µs with an affinity, 1000 µs without.
/// assert_eq!(AutoProgress::with_c_defaults(None, None).interval, Duration::from_micros(1000));
/// let pinned = AutoProgress::with_c_defaults(Some([0].into_iter().collect()), None);
/// assert_eq!(pinned.interval, Duration::from_micros(1));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoProgress {
    /// CPUs to pin the thread to (`FI_PSM_PROG_AFFINITY`); `None` leaves
    /// the inherited affinity.
    pub affinity: Option<CpuSet>,
    /// Wait after an idle round (`FI_PSM_PROG_INTERVAL`); 0 spins.
    pub interval: Duration,
}

impl Default for AutoProgress {
    fn default() -> Self {
        AutoProgress::new()
    }
}

impl AutoProgress {
    /// The C default interval without an affinity: 1000 µs.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_micros(1000);
    /// The C default interval when an affinity was applied: 1 µs.
    pub const PINNED_DEFAULT_INTERVAL: Duration = Duration::from_micros(1);

    /// No affinity, [`DEFAULT_INTERVAL`](Self::DEFAULT_INTERVAL).
    pub fn new() -> Self {
        AutoProgress {
            affinity: None,
            interval: Self::DEFAULT_INTERVAL,
        }
    }

    /// The C provider's defaults (ARCHITECTURE.md, "Kept as in C"): an unset
    /// interval is 1 µs if an affinity is applied, else 1000 µs.
    pub fn with_c_defaults(affinity: Option<CpuSet>, interval: Option<Duration>) -> Self {
        let interval = interval.unwrap_or(if affinity.is_some() {
            Self::PINNED_DEFAULT_INTERVAL
        } else {
            Self::DEFAULT_INTERVAL
        });
        AutoProgress { affinity, interval }
    }

    /// Sets the CPU set to pin to.
    pub fn affinity(mut self, set: CpuSet) -> Self {
        self.affinity = Some(set);
        self
    }

    /// Sets the interval.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
}

/// Settings of adaptive progress: futures spin, then sleep while the auto
/// thread watches.
///
/// ```
/// use std::time::Duration;
/// use psmrail_reactor::{AdaptiveProgress, AutoProgress};
///
/// let cfg = AdaptiveProgress::new();
/// assert_eq!(cfg.spin, AdaptiveProgress::DEFAULT_SPIN);
/// assert_eq!(cfg.auto, AutoProgress::new());
/// let short = AdaptiveProgress::new().spin(Duration::from_micros(20));
/// assert_eq!(short.spin, Duration::from_micros(20));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdaptiveProgress {
    /// How long a thread's pending futures keep making progress themselves
    /// after its last completion before they sleep. Zero: they sleep at
    /// once (plain [`ProgressMode::Auto`]).
    pub spin: Duration,
    /// The progress thread that watches while the futures sleep.
    pub auto: AutoProgress,
    /// For engines that signal every arrival through socket readiness
    /// (the soft engine): idle sleeps of the thread double from the
    /// interval up to this, since readiness, not the timer, ends them;
    /// what the timer still serves (retries, timeouts) may run up to this
    /// late. `None` (the default): every idle sleep is the interval, as an
    /// engine whose traffic no socket signals (PSM shared memory) needs.
    pub readiness_sleep: Option<Duration>,
}

impl Default for AdaptiveProgress {
    fn default() -> Self {
        AdaptiveProgress::new()
    }
}

impl AdaptiveProgress {
    /// The default spin window: 500 µs. It must outlast the slow path —
    /// a sleeping peer woken through its progress thread answers in 100 to
    /// 150 µs on the soft engine here — several times over: with a shorter
    /// window one late reply makes each side sleep in turn, and a
    /// ping-pong can stay on the slow path (8 B soft-engine ping-pong,
    /// median against manual progress: 1.24× with 200 µs, 1.04× with
    /// 500 µs and 1 ms). What a window costs is CPU after the last
    /// completion only: 500 µs per burst of traffic, none while idle.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(500);

    /// [`DEFAULT_SPIN`](Self::DEFAULT_SPIN) and a default
    /// [`AutoProgress`] (no affinity, 1000 µs interval).
    pub fn new() -> Self {
        AdaptiveProgress {
            spin: Self::DEFAULT_SPIN,
            auto: AutoProgress::new(),
            readiness_sleep: None,
        }
    }

    /// Sets the longest idle sleep for readiness-driven engines.
    pub fn readiness_sleep(mut self, longest: Duration) -> Self {
        self.readiness_sleep = Some(longest);
        self
    }

    /// Sets the spin window.
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Sets the progress thread's settings.
    pub fn auto(mut self, auto: AutoProgress) -> Self {
        self.auto = auto;
        self
    }
}

/// Who drives progress.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// The application, inside its futures' `poll` (see [`Reactor`] for
    /// the CPU cost: a pending future busy-polls).
    #[default]
    Manual,
    /// A dedicated progress thread.
    Auto(AutoProgress),
    /// Both, in turn: a pending future makes progress itself for a short
    /// window (manual-mode latency), then sleeps until the progress thread
    /// wakes it (auto-mode CPU use). See [`Reactor`].
    Adaptive(AdaptiveProgress),
}

impl ProgressMode {
    /// The progress thread's settings, if the mode has a thread.
    pub fn auto_progress(&self) -> Option<&AutoProgress> {
        match self {
            ProgressMode::Manual => None,
            ProgressMode::Auto(auto) => Some(auto),
            ProgressMode::Adaptive(adaptive) => Some(&adaptive.auto),
        }
    }

    /// The longest idle sleep of adaptive progress
    /// ([`AdaptiveProgress::readiness_sleep`]; `None` in the other modes).
    pub fn readiness_sleep(&self) -> Option<Duration> {
        match self {
            ProgressMode::Adaptive(a) => a.readiness_sleep,
            _ => None,
        }
    }

    /// The spin window of adaptive progress (`None` in the other modes and
    /// for a zero window).
    pub fn spin(&self) -> Option<Duration> {
        match self {
            ProgressMode::Adaptive(a) if !a.spin.is_zero() => Some(a.spin),
            _ => None,
        }
    }
}

/// Builds a [`Reactor`].
///
/// ```
/// use std::time::Duration;
/// use psmrail_reactor::{AutoProgress, Reactor};
///
/// let reactor = Reactor::builder()
///     .auto(AutoProgress::new().interval(Duration::from_millis(5)))
///     .thread_name("my-progress")
///     .build()?;
/// assert!(!reactor.is_manual());
/// assert!(reactor.auto_thread().is_some());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ReactorBuilder {
    mode: ProgressMode,
    thread_name: String,
    idle_assist: Option<Duration>,
}

impl Default for ReactorBuilder {
    fn default() -> Self {
        ReactorBuilder {
            mode: ProgressMode::Manual,
            thread_name: "psmrail-prog".to_owned(),
            idle_assist: None,
        }
    }
}

impl ReactorBuilder {
    /// Manual progress (the default).
    pub fn manual(mut self) -> Self {
        self.mode = ProgressMode::Manual;
        self
    }

    /// Auto progress with these settings.
    pub fn auto(mut self, auto: AutoProgress) -> Self {
        self.mode = ProgressMode::Auto(auto);
        self
    }

    /// Adaptive progress with these settings.
    pub fn adaptive(mut self, adaptive: AdaptiveProgress) -> Self {
        self.mode = ProgressMode::Adaptive(adaptive);
        self
    }

    /// Sets the mode.
    pub fn mode(mut self, mode: ProgressMode) -> Self {
        self.mode = mode;
        self
    }

    /// Manual mode only (the other modes have their thread): a thread that
    /// runs a progress round whenever nobody has run one for `interval`, so
    /// that peers waiting on this process's progress (a connect, a
    /// handshake) are answered while the application is away from the
    /// library. The reactor stays manual; while the application progresses,
    /// the thread only reads a counter once per interval. See
    /// `idle_assist.rs`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::{Duration, Instant};
    /// use psmrail_reactor::{progress_fn, Progress, Reactor};
    ///
    /// let reactor = Reactor::builder()
    ///     .idle_assist(Duration::from_millis(1))
    ///     .build()?;
    /// assert!(reactor.is_manual());
    /// let ran = Arc::new(AtomicBool::new(false));
    /// let r = ran.clone();
    /// reactor.add_source(Arc::new(progress_fn(move || {
    ///     r.store(true, Ordering::Release);
    ///     Progress::Idle
    /// })))?;
    /// // Nobody calls progress: the assist does.
    /// let start = Instant::now();
    /// while !ran.load(Ordering::Acquire) {
    ///     assert!(start.elapsed() < Duration::from_secs(10));
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn idle_assist(mut self, interval: Duration) -> Self {
        self.idle_assist = Some(interval);
        self
    }

    /// Name of the auto thread (default `psmrail-prog`; Linux keeps the
    /// first 15 bytes; the idle assist's is this with `-assist`).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// Builds the reactor; in auto mode starts the thread and waits until it
    /// has pinned itself.
    ///
    /// # Errors
    /// Auto mode only: the thread cannot be spawned, cannot be pinned to
    /// the requested CPUs (for example a CPU outside the machine or outside
    /// the process's allowed set), or the mio `Poll` cannot be created.
    /// Nothing is left running on error.
    pub fn build(self) -> io::Result<Reactor> {
        let (poll, registry, auto) = match self.mode.auto_progress() {
            None => (None, None, None),
            Some(auto) => {
                let strategy = crate::SleepStrategy::for_interval(auto.interval);
                match make_poll(strategy)? {
                    Some((poll, registry)) => (Some(poll), Some(registry), Some(auto.clone())),
                    None => (None, None, Some(auto.clone())),
                }
            }
        };
        let shared = Arc::new(Shared {
            sources: SourceList::new(),
            counters: Counters::default(),
            gate: SleepGate::new(),
            stop: AtomicBool::new(false),
            spinners: crate::spin_window::SpinBeat::new(),
            registry,
        });
        let assist_name = format!("{}-assist", self.thread_name);
        let thread = match auto {
            None => None,
            Some(auto) => Some(AutoThread::spawn(
                shared.clone(),
                poll,
                auto.affinity,
                auto.interval,
                self.mode.spin(),
                self.mode.readiness_sleep(),
                self.thread_name,
            )?),
        };
        let assist = match (self.idle_assist, &thread) {
            (Some(interval), None) => {
                Some(IdleAssist::spawn(shared.clone(), interval, assist_name)?)
            }
            _ => None,
        };
        Ok(Reactor {
            inner: Arc::new(Inner {
                manual: thread.is_none(),
                spin: self.mode.spin(),
                shared,
                mode: self.mode,
                thread,
                assist,
            }),
        })
    }
}

struct Inner {
    shared: Arc<Shared>,
    mode: ProgressMode,
    manual: bool,
    /// Adaptive mode's spin window.
    spin: Option<Duration>,
    thread: Option<AutoThread>,
    /// Manual mode's idle assist, if asked for.
    assist: Option<IdleAssist>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            thread.stop(&self.shared);
        }
        if let Some(assist) = self.assist.take() {
            assist.stop();
        }
        let entries = self.shared.sources.drain();
        if let Some(registry) = &self.shared.registry {
            for entry in entries {
                // Teardown: nobody to report to, and the epoll set goes away
                // with the thread's Poll anyway.
                let _ = entry.source.deregister(registry);
            }
        }
    }
}

/// Drives progress sources and wakes the tasks whose operations completed.
///
/// A cheap `Clone` handle (an `Arc` inside): clones share one reactor.
/// It runs in one of two modes (ARCHITECTURE.md, principle 4):
///
/// * **Manual** ([`ProgressMode::Manual`]): progress happens only when the
///   application drives it: inside an operation future's `poll` (through
///   [`Reactor::poll_completion`], as `fi_cq_read` does in C), through
///   [`Reactor::progress`], and in [`Reactor::block_on`].
///
///   **CPU cost:** a pending future in manual mode keeps its task
///   busy-polling. Each `poll` runs a progress round and, if the value is
///   not there yet, wakes its own task again, so the executor re-polls it
///   at once; a waiting task therefore holds a core (an executor worker) at
///   100 % until its operation completes. This is the price of having no
///   thread: nobody else would make progress to wake it.
/// * **Auto** ([`ProgressMode::Auto`]): one progress thread per reactor
///   (see [`SleepStrategy`](crate::SleepStrategy) for how it waits); futures
///   only register their waker and sleep until the thread completes their
///   operation. Posting new work calls [`Reactor::notify`]. Dropping the
///   last handle stops and joins the thread.
/// * **Adaptive** ([`ProgressMode::Adaptive`]): an auto thread, and
///   futures that spin first. A pending future behaves as in manual mode
///   (it steps the engine and is polled again at once) until its thread
///   has gone [`AdaptiveProgress::spin`] without a completion; then it
///   registers its waker and sleeps, and the auto thread — asleep on the
///   engines' sockets, its interval and [`Reactor::notify`] — completes its
///   operation and wakes it. A reply that comes within the window costs no
///   thread switch (ping-pong latency is that of manual mode); a task that
///   waits longer costs what the thread's sleeps cost: one wake-up per
///   interval, or, with [`AdaptiveProgress::readiness_sleep`], sleeps
///   that grow while nothing happens. While futures spin, the thread
///   stands aside (it parks instead of waking for every socket event and
///   contending for the engines' locks) until one of them goes to sleep.
///   [`Reactor::is_manual`] is false: completion queues, counters and
///   waits that are not operation futures rely on the thread, as in auto
///   mode.
///
/// ```
/// use std::sync::Arc;
/// use std::future::poll_fn;
/// use psmrail_reactor::{progress_fn, CompletionTable, Progress, Reactor};
///
/// let reactor = Reactor::manual();
/// let table = Arc::new(CompletionTable::<u32>::new());
/// let key = table.insert();
///
/// // An "engine" that completes the op on its first progress step.
/// let engine_table = table.clone();
/// reactor.add_source(Arc::new(progress_fn(move || {
///     Progress::from(engine_table.complete(key, 42).is_ok())
/// })))?;
///
/// // An "operation future" waiting for it.
/// let r = reactor.clone();
/// let value = reactor.block_on(poll_fn(|cx| r.poll_completion(&table, key, cx)));
/// assert_eq!(value, 42);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Reactor {
    inner: Arc<Inner>,
}

impl fmt::Debug for Reactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reactor")
            .field("mode", &self.inner.mode)
            .field("sources", &self.inner.shared.sources.len())
            .finish()
    }
}

/// Counts the fast polls of this thread that stayed pending; true every
/// [`Reactor::FULL_ROUND_EVERY`]-th time.
#[inline]
fn full_round_due() -> bool {
    thread_local! {
        static PENDING_FAST_POLLS: Cell<u32> = const { Cell::new(0) };
    }
    PENDING_FAST_POLLS.with(|n| {
        let next = n.get().wrapping_add(1);
        n.set(next);
        next % Reactor::FULL_ROUND_EVERY == 0
    })
}

impl Reactor {
    /// A builder (manual mode unless told otherwise).
    pub fn builder() -> ReactorBuilder {
        ReactorBuilder::default()
    }

    /// A manual-mode reactor (infallible: no thread).
    pub fn manual() -> Reactor {
        Reactor::builder()
            .manual()
            .build()
            .expect("building a manual reactor does no I/O")
    }

    /// An auto-mode reactor with default builder settings.
    ///
    /// # Errors
    /// As [`ReactorBuilder::build`].
    pub fn auto(auto: AutoProgress) -> io::Result<Reactor> {
        Reactor::builder().auto(auto).build()
    }

    /// The mode this reactor was built with.
    pub fn mode(&self) -> &ProgressMode {
        &self.inner.mode
    }

    /// Whether this reactor is in manual mode.
    #[inline]
    pub fn is_manual(&self) -> bool {
        self.inner.manual
    }

    /// Facts about the auto thread, read by the thread itself after
    /// start-up (its effective affinity, kernel tid); `None` in manual mode.
    ///
    /// ```
    /// use psmrail_reactor::{AutoProgress, CpuSet, CpuTopology, Reactor};
    /// let cpu = CpuTopology::read_now().allowed.iter().next().unwrap();
    /// let only: CpuSet = [cpu].into_iter().collect();
    /// let reactor = Reactor::auto(AutoProgress::new().affinity(only))?;
    /// assert_eq!(reactor.auto_thread().unwrap().affinity, only);
    /// assert!(Reactor::manual().auto_thread().is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn auto_thread(&self) -> Option<AutoThreadInfo> {
        self.inner.thread.as_ref().map(|t| t.info)
    }

    /// Adds a source. In auto mode with an interval of 50 µs or more (the
    /// [`Park`](crate::SleepStrategy::Park) and
    /// [`Poll`](crate::SleepStrategy::Poll) strategies, which sleep in a mio
    /// `Poll`) the source's [`register`](ProgressSource::register) is
    /// called first with the thread's registry and `Token(id)`. The thread is notified, so a new
    /// source gets a round promptly.
    ///
    /// # Errors
    /// The source's `register` failed; the source is not added.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use psmrail_reactor::{progress_fn, Progress, Reactor};
    /// let reactor = Reactor::manual();
    /// let id = reactor.add_source(Arc::new(progress_fn(|| Progress::Made)))?;
    /// assert_eq!(reactor.stats().sources, 1);
    /// assert_eq!(reactor.progress(), Progress::Made);
    /// assert!(reactor.remove_source(id).is_some());
    /// assert_eq!(reactor.progress(), Progress::Idle);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn add_source(&self, source: Arc<dyn ProgressSource>) -> io::Result<SourceId> {
        let shared = &self.inner.shared;
        let id = shared.sources.next_id();
        if let Some(registry) = &shared.registry {
            source.register(registry, mio::Token(id.0 as usize))?;
        }
        shared.sources.insert(id, source);
        self.notify();
        Ok(id)
    }

    /// Removes a source and hands it back (`None` if unknown). When this
    /// returns, no call to the source's `progress` is running (except one
    /// further up this thread's own stack, if a source removes itself) and
    /// none will start. In auto mode the source's `deregister` is called;
    /// an error from it is ignored, because the source is out of the
    /// reactor either way (its sockets can at worst end one sleep early).
    pub fn remove_source(&self, id: SourceId) -> Option<Arc<dyn ProgressSource>> {
        let shared = &self.inner.shared;
        let source = shared.sources.remove(id)?;
        if let Some(registry) = &shared.registry {
            let _ = source.deregister(registry);
        }
        Some(source)
    }

    /// One progress round: one step of every source. Works in both modes
    /// and from any number of threads at once (a source already running on
    /// another thread is skipped this round).
    ///
    /// # Panics
    /// If a source panics, the panic propagates (after the source is
    /// poisoned: it will not be called again).
    #[inline]
    pub fn progress(&self) -> Progress {
        self.inner
            .shared
            .sources
            .round(&self.inner.shared.counters, false)
    }

    /// New work was posted: make the auto thread run a round soon.
    ///
    /// Cheap: one atomic swap when the thread is awake; a system call (mio
    /// `Waker` or `unpark`) only if the thread is asleep. No-op in manual
    /// mode and for `Spin`/`Nap` intervals (the thread is never away longer
    /// than the interval there).
    ///
    /// Engines call it after posting work that the thread must progress
    /// (and device-side code when something arrives that no registered
    /// socket signals).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::{Duration, Instant};
    /// use psmrail_reactor::{progress_fn, AutoProgress, Progress, Reactor};
    ///
    /// // A 10 s interval: only notify gets the new work done quickly.
    /// let reactor = Reactor::auto(AutoProgress::new().interval(Duration::from_secs(10)))?;
    /// let work = Arc::new(AtomicBool::new(false));
    /// let w = work.clone();
    /// reactor.add_source(Arc::new(progress_fn(move || {
    ///     Progress::from(w.swap(false, Ordering::AcqRel))
    /// })))?;
    /// let start = Instant::now();
    /// work.store(true, Ordering::Release);
    /// reactor.notify();
    /// while work.load(Ordering::Acquire) {
    ///     std::thread::yield_now();
    /// }
    /// assert!(start.elapsed() < Duration::from_secs(5));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn notify(&self) {
        if let Some(thread) = &self.inner.thread {
            thread.notify(&self.inner.shared);
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ReactorStats {
        let shared = &self.inner.shared;
        let mut stats = shared.counters.snapshot();
        stats.sources = shared.sources.len();
        stats.sleeping = shared.gate.is_sleeping();
        stats.auto_thread_cpu = self.inner.thread.as_ref().and_then(|t| t.cpu_time());
        stats
    }

    /// Polls the completion of `key` in `table`: the building block of
    /// every operation future.
    ///
    /// * Auto mode: [`CompletionTable::poll_take`] (register the waker; the
    ///   thread's completion wakes the task).
    /// * Adaptive mode: as manual mode while the thread's spin window is
    ///   open, then as auto mode (see [`Reactor`]).
    /// * Manual mode: take the value if it is already there; otherwise run
    ///   one progress round, look again, and if still pending wake the task
    ///   at once so the executor polls it again (busy-polling: see
    ///   [`Reactor`] for the CPU cost). No waker is stored.
    ///
    /// # Panics
    /// If `key` is not live (as [`CompletionTable::poll_take`]), or if a
    /// source panics in manual mode.
    pub fn poll_completion<T: Send>(
        &self,
        table: &CompletionTable<T>,
        key: OpKey,
        cx: &mut Context<'_>,
    ) -> Poll<T> {
        if !self.is_manual() {
            return match self.inner.spin {
                None => table.poll_take(key, cx),
                Some(spin) => self.spin_or_sleep(table, key, cx, spin, || {
                    self.progress();
                    table.try_take_live(key)
                }),
            };
        }
        if let Some(value) = table.try_take_live(key) {
            return Poll::Ready(value);
        }
        self.progress();
        if let Some(value) = table.try_take_live(key) {
            return Poll::Ready(value);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Adaptive mode's poll: `step` (a progress step that hands over the
    /// value if it is there) while the thread's spin window is open, then
    /// [`CompletionTable::poll_take`]. Out of line, so that the manual
    /// path stays small enough to inline.
    #[inline(never)]
    fn spin_or_sleep<T: Send>(
        &self,
        table: &CompletionTable<T>,
        key: OpKey,
        cx: &mut Context<'_>,
        spin: Duration,
        step: impl FnOnce() -> Option<T>,
    ) -> Poll<T> {
        use crate::spin_window::{verdict, Verdict};
        let shared = &self.inner.shared;
        let v = verdict(spin);
        if let Verdict::SpinAt(now) = v {
            shared.spinners.beat(now);
        }
        let out = if v == Verdict::Sleep {
            let out = table.poll_take(key, cx);
            if out.is_pending() {
                bump(&shared.counters.spin_handoffs);
                // The thread stood aside for spinners: it watches again.
                shared.spinners.clear();
                if let Some(thread) = &self.inner.thread {
                    thread.unpark();
                }
            }
            out
        } else {
            match step() {
                Some(value) => Poll::Ready(value),
                None => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        };
        if out.is_ready() {
            crate::spin_window::activity();
        }
        out
    }

    /// [`poll_completion`](Self::poll_completion) with a fast path for
    /// manual mode: `own` is the operation's own shortcut (typically: step
    /// only the source the operation belongs to, and hand over its value if
    /// it is done; the value then never passes through `table`, whose key
    /// `own` must have freed, e.g. with [`CompletionTable::retire`]).
    ///
    /// * Auto mode: [`CompletionTable::poll_take`]; `own` is not called.
    /// * Adaptive mode: as manual mode while the thread's spin window is
    ///   open, then as auto mode.
    /// * Manual mode: `own()`; if that is `None`, every
    ///   [`FULL_ROUND_EVERY`](Self::FULL_ROUND_EVERY)-th such poll on this
    ///   thread also runs a full progress round and looks in `table` (so
    ///   the reactor's other sources still move while a task spins on one
    ///   operation, and a key that is not live is still caught), then the
    ///   task is woken at once, as in `poll_completion`.
    ///
    /// # Panics
    /// As [`poll_completion`](Self::poll_completion).
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use psmrail_reactor::{CompletionTable, Reactor};
    ///
    /// let reactor = Reactor::manual();
    /// let table = CompletionTable::<u32>::new();
    /// let key = table.insert();
    /// let mut polls = 0;
    /// let value = reactor.block_on(poll_fn(|cx| {
    ///     reactor.poll_completion_with(&table, key, cx, || {
    ///         // The "engine" finishes the op on the third poll and hands
    ///         // its result over directly.
    ///         polls += 1;
    ///         (polls == 3).then(|| {
    ///             table.retire(key);
    ///             42
    ///         })
    ///     })
    /// }));
    /// assert_eq!(value, 42);
    /// assert!(table.is_empty());
    /// ```
    #[inline]
    pub fn poll_completion_with<T: Send>(
        &self,
        table: &CompletionTable<T>,
        key: OpKey,
        cx: &mut Context<'_>,
        own: impl FnOnce() -> Option<T>,
    ) -> Poll<T> {
        if !self.is_manual() {
            return match self.inner.spin {
                None => table.poll_take(key, cx),
                Some(spin) => self.spin_or_sleep(table, key, cx, spin, || {
                    if full_round_due() {
                        if let Some(value) = self.full_round_take(table, key) {
                            return Some(value);
                        }
                    }
                    own()
                }),
            };
        }
        // Every so many polls, ready or not, a full round: work no future
        // waits for (abandoned sends, AM traffic, other sources) moves even
        // when every operation completes on its first poll.
        if full_round_due() {
            if let Some(value) = self.full_round_take(table, key) {
                return Poll::Ready(value);
            }
        }
        match own() {
            Some(value) => Poll::Ready(value),
            None => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    /// The full round of [`poll_completion_with`](Self::poll_completion_with),
    /// out of line so that the common path stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn full_round_take<T: Send>(&self, table: &CompletionTable<T>, key: OpKey) -> Option<T> {
        self.progress();
        table.try_take_live(key)
    }

    /// How often [`poll_completion_with`](Self::poll_completion_with)
    /// runs a full round in manual mode: once per this many polls, per
    /// thread.
    pub const FULL_ROUND_EVERY: u32 = 64;

    /// Runs `future` to completion on the calling thread.
    ///
    /// * Manual mode: a busy loop that never sleeps. A future that woke
    ///   itself while polled (every manual-mode operation does, after its
    ///   own progress step) is polled again at once; otherwise a progress
    ///   round runs before the next look, and the CPU is yielded to other
    ///   threads after 64 idle rounds in a row.
    /// * Auto mode: parks the thread until the future's waker is called.
    ///
    /// Each thread makes its wakers once and lends them to the futures it
    /// runs: a call allocates nothing.
    ///
    /// ```
    /// let reactor = psmrail_reactor::Reactor::manual();
    /// assert_eq!(reactor.block_on(async { 7 }), 7);
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        crate::block_on::run(self, future)
    }
}
