//! The auto progress thread (ARCHITECTURE.md, principle 4), in place of the
//! C psm provider's progress thread (`prov/psm/src/psmx_domain.c`).
//!
//! One thread per auto-mode reactor. It pins itself to the configured CPU
//! set (`FI_PSM_PROG_AFFINITY`) and then loops: run a round over every
//! source; if the round made progress, run another at once; otherwise wait
//! `interval` (`FI_PSM_PROG_INTERVAL`) and go again. The C provider always
//! sleeps after a round; going again at once after a productive round is
//! psmrail's improvement (a burst of completions drains without sleeps).
//!
//! How it waits depends on the interval: see [`SleepStrategy`]. Sleeps of
//! 50 µs and more happen in the thread's mio `Poll`, so sockets that
//! sources registered end them: epoll's own timeout counts whole
//! milliseconds, so sleeps shorter than 1 ms are timed by a `timerfd`
//! ([`SubMsTimer`]) registered in the same `Poll`. Shorter naps stay plain
//! `nanosleep`s (measured faster there, see [`SleepStrategy`]).
//!
//! Stopping: dropping the last `Reactor` handle sets the stop flag, wakes
//! the thread unconditionally and joins it. Source panics are caught per
//! call (the source is poisoned and counted), so the thread never dies
//! silently.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use mio::{Events, Poll, Token};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use crate::cpu_set::{current_thread_affinity, pin_current_thread, CpuSet};
use crate::gate::SleepGate;
use crate::source_list::SourceList;
use crate::spin_window::SpinBeat;
use crate::stats::{bump, Counters};

/// Token of the thread's mio `Waker`; sources get `Token(id)` (ids start at
/// 0 and never reach this).
pub(crate) const WAKER_TOKEN: Token = Token(usize::MAX);
/// Token of the sub-millisecond timer ([`SubMsTimer`]).
const TIMER_TOKEN: Token = Token(usize::MAX - 1);

/// Below this an idle thread naps without the sleep gate.
pub(crate) const NAP_LIMIT: Duration = Duration::from_micros(50);
/// From this up an idle thread sleeps in `mio::Poll::poll`.
pub(crate) const POLL_MIN: Duration = Duration::from_millis(1);

/// How the auto thread waits between idle rounds.
///
/// Chosen from the interval:
///
/// | interval        | strategy | sleeps in                        | ended early by |
/// |-----------------|----------|----------------------------------|----------------|
/// | 0               | `Spin`   | (never; `yield_now` between idle rounds) | |
/// | below 50 µs     | `Nap`    | `nanosleep`                      | nothing: a notify or a socket is seen after the nap, at most `interval` late |
/// | 50 µs to 1 ms   | `Park`   | the `Poll`, timed by a `timerfd` | `notify` (mio `Waker`) and readiness of sockets that sources registered |
/// | 1 ms and more   | `Poll`   | the `Poll`, epoll's own timeout  | `notify` (mio `Waker`) and socket readiness |
///
/// epoll timeouts are whole milliseconds (mio rounds shorter ones up to
/// 1 ms), hence the timer for `Park`; it fires on time (`timerfd` ignores
/// timer slack). So from 50 µs up a soft-engine socket wakes the thread at
/// once whatever the interval, and a shorter interval only adds idle
/// rounds (soft engine, 8 B ping-pong here: 36 µs at 100 µs, as at
/// 1000 µs; 94 µs before the timer). `Nap` and `Park` lower the thread's
/// timer slack to 1 ns (`PR_SET_TIMERSLACK`) so short sleeps are not
/// stretched by the default 50 µs slack. `Nap` keeps `nanosleep`: at 10 µs
/// the same ping-pong took 26 µs with it and 32 µs sleeping in the `Poll`
/// (one more system call per nap to arm the timer), and a nap is short
/// anyway. `Nap` does not take part in the sleep gate either, so `notify`
/// costs nothing there.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SleepStrategy {
    /// Interval 0: `yield_now` between idle rounds.
    Spin,
    /// Interval below 50 µs: `nanosleep` with 1 ns timer slack.
    Nap,
    /// 50 µs up to 1 ms: a sleep in the `Poll` timed by a `timerfd`, ended
    /// early by `notify` and by socket readiness.
    Park,
    /// 1 ms and more: `mio::Poll::poll(interval)`, ended early by `notify`
    /// and by socket readiness.
    Poll,
}

impl SleepStrategy {
    /// The strategy the auto thread uses for `interval`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use psmrail_reactor::SleepStrategy;
    /// assert_eq!(SleepStrategy::for_interval(Duration::ZERO), SleepStrategy::Spin);
    /// assert_eq!(SleepStrategy::for_interval(Duration::from_micros(1)), SleepStrategy::Nap);
    /// assert_eq!(SleepStrategy::for_interval(Duration::from_micros(200)), SleepStrategy::Park);
    /// assert_eq!(SleepStrategy::for_interval(Duration::from_millis(1)), SleepStrategy::Poll);
    /// ```
    pub fn for_interval(interval: Duration) -> SleepStrategy {
        if interval.is_zero() {
            SleepStrategy::Spin
        } else if interval < NAP_LIMIT {
            SleepStrategy::Nap
        } else if interval < POLL_MIN {
            SleepStrategy::Park
        } else {
            SleepStrategy::Poll
        }
    }

    /// Whether the thread sleeps through the gate (so `notify` may wake it).
    pub(crate) fn uses_gate(self) -> bool {
        matches!(self, SleepStrategy::Park | SleepStrategy::Poll)
    }

    /// Whether the thread sleeps in a mio `Poll` (so sources may register
    /// sockets).
    pub(crate) fn uses_poll(self) -> bool {
        matches!(self, SleepStrategy::Park | SleepStrategy::Poll)
    }

    /// Whether sleeps are timed by the sub-millisecond timer.
    fn uses_timer(self) -> bool {
        self == SleepStrategy::Park
    }
}

/// A one-shot `timerfd` in the thread's `Poll`: it times sleeps shorter
/// than epoll's 1 ms resolution, so that such sleeps still end on socket
/// readiness (a plain `nanosleep` or futex wait would not).
///
/// Each sleep re-arms it (`timerfd_settime`), which also resets its
/// expiration count: an expiry left over from a sleep that readiness ended
/// early is then no longer readable, so it never cuts the next sleep short
/// (epoll re-checks readiness before reporting an edge). Nothing is ever
/// read from it.
pub(crate) struct SubMsTimer {
    timer: TimerFd,
}

impl SubMsTimer {
    /// A disarmed timer registered in `registry` under `TIMER_TOKEN`.
    fn new(registry: &mio::Registry) -> io::Result<SubMsTimer> {
        use std::os::fd::{AsFd, AsRawFd};
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        registry.register(
            &mut mio::unix::SourceFd(&timer.as_fd().as_raw_fd()),
            TIMER_TOKEN,
            mio::Interest::READABLE,
        )?;
        Ok(SubMsTimer { timer })
    }

    /// Arms the timer to fire once, `after` from now (a zero time is made
    /// 1 ns: zero would disarm it).
    fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        self.timer.set(
            Expiration::OneShot(TimeSpec::from_duration(after)),
            TimerSetTimeFlags::empty(),
        )?;
        Ok(())
    }
}

/// What the auto thread found about itself once started.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AutoThreadInfo {
    /// Kernel thread id (`gettid`): `/proc/self/task/<tid>`.
    pub tid: i32,
    /// The thread's affinity read back with `sched_getaffinity` from inside
    /// the thread after pinning (the inherited set when none was asked for).
    pub affinity: CpuSet,
    /// How it waits between idle rounds.
    pub strategy: SleepStrategy,
    /// The configured interval.
    pub interval: Duration,
}

/// State shared by the reactor handles and the auto thread.
pub(crate) struct Shared {
    pub(crate) sources: SourceList,
    pub(crate) counters: Counters,
    pub(crate) gate: SleepGate,
    pub(crate) stop: AtomicBool,
    /// Adaptive mode: when futures last spun.
    pub(crate) spinners: SpinBeat,
    /// Registry of the thread's `Poll` (strategy `Poll` only).
    pub(crate) registry: Option<mio::Registry>,
}

/// How to end the thread's sleep from outside.
enum Alarm {
    Waker(mio::Waker),
    Unpark,
    None,
}

/// The running thread, owned by the reactor's inner state.
pub(crate) struct AutoThread {
    handle: Option<JoinHandle<()>>,
    thread: thread::Thread,
    alarm: Alarm,
    strategy: SleepStrategy,
    pub(crate) info: AutoThreadInfo,
}

/// Makes the `Poll` and its registry for every strategy that sleeps.
pub(crate) fn make_poll(strategy: SleepStrategy) -> io::Result<Option<(Poll, mio::Registry)>> {
    if !strategy.uses_poll() {
        return Ok(None);
    }
    let poll = Poll::new()?;
    let registry = poll.registry().try_clone()?;
    Ok(Some((poll, registry)))
}

impl AutoThread {
    /// Starts the thread and waits until it has pinned itself. Pinning (or
    /// any other set-up) failure is returned, and the thread is gone.
    pub(crate) fn spawn(
        shared: Arc<Shared>,
        poll: Option<Poll>,
        affinity: Option<CpuSet>,
        interval: Duration,
        spin: Option<Duration>,
        readiness_sleep: Option<Duration>,
        name: String,
    ) -> io::Result<AutoThread> {
        let strategy = SleepStrategy::for_interval(interval);
        let alarm = match &poll {
            Some(poll) if strategy.uses_gate() => {
                Alarm::Waker(mio::Waker::new(poll.registry(), WAKER_TOKEN)?)
            }
            // No `Poll` (it could not be made): the thread naps instead.
            None if strategy.uses_gate() => Alarm::Unpark,
            _ => Alarm::None,
        };
        let timer = match &poll {
            Some(poll) if strategy.uses_timer() => Some(SubMsTimer::new(poll.registry())?),
            _ => None,
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let handle = thread::Builder::new().name(name).spawn(move || {
            let setup = set_up(affinity, strategy, interval);
            let ok = setup.is_ok();
            // The receiver waits for this message; if it is gone we stop.
            if tx.send(setup).is_err() || !ok {
                return;
            }
            let waits = Waits {
                interval,
                spin,
                readiness_sleep,
            };
            run(&shared, poll, timer, strategy, waits);
        })?;
        let info = match rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(e);
            }
            Err(_) => {
                let _ = handle.join();
                return Err(io::Error::other("auto progress thread died during set-up"));
            }
        };
        Ok(AutoThread {
            thread: handle.thread().clone(),
            handle: Some(handle),
            alarm,
            strategy,
            info,
        })
    }

    /// `Reactor::notify`: cheap unless the thread is asleep.
    #[inline]
    pub(crate) fn notify(&self, shared: &Shared) {
        if self.strategy.uses_gate() && shared.gate.notify() {
            bump(&shared.counters.os_wakes);
            self.alarm();
        }
    }

    /// Ends a stand-aside (see [`run`]) early: a spinning future went to
    /// sleep and the thread must watch again.
    pub(crate) fn unpark(&self) {
        self.thread.unpark();
    }

    fn alarm(&self) {
        match &self.alarm {
            // A failed eventfd write means the counter is saturated, i.e. a
            // wake-up is already pending.
            Alarm::Waker(w) => {
                let _ = w.wake();
            }
            Alarm::Unpark => self.thread.unpark(),
            Alarm::None => {}
        }
    }

    /// CPU time used by the thread so far.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        use std::os::unix::thread::JoinHandleExt;
        let handle = self.handle.as_ref()?;
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the pthread_t is valid: the thread has not been joined
        // (we still hold its JoinHandle); `clock` is a valid out pointer.
        let rc = unsafe { libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock) };
        if rc != 0 {
            return None;
        }
        let ts = nix::time::clock_gettime(nix::time::ClockId::from_raw(clock)).ok()?;
        Some(Duration::from(ts))
    }

    /// Stops and joins the thread. From the thread itself (the last handle
    /// dropped inside a source), it only asks it to stop and detaches.
    pub(crate) fn stop(mut self, shared: &Shared) {
        shared.stop.store(true, Release);
        self.alarm();
        if let Some(handle) = self.handle.take() {
            if thread::current().id() != handle.thread().id() {
                // A panic outside the per-source catch would be a bug in this
                // module; there is nobody to report it to in a drop.
                let _ = handle.join();
            }
        }
    }
}

fn set_up(
    affinity: Option<CpuSet>,
    strategy: SleepStrategy,
    interval: Duration,
) -> io::Result<AutoThreadInfo> {
    if let Some(set) = &affinity {
        pin_current_thread(set).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot pin the auto progress thread to CPUs {set}: {e}"),
            )
        })?;
    }
    if matches!(strategy, SleepStrategy::Nap | SleepStrategy::Park) {
        nix::sys::prctl::set_timerslack(1)?;
    }
    Ok(AutoThreadInfo {
        tid: nix::unistd::gettid().as_raw(),
        affinity: current_thread_affinity()?,
        strategy,
        interval,
    })
}

/// How long the thread waits, and on what.
#[derive(Copy, Clone, Debug)]
struct Waits {
    /// Sleep after an idle round.
    interval: Duration,
    /// Adaptive mode: the futures' spin window.
    spin: Option<Duration>,
    /// Adaptive mode, readiness-driven engines: the longest idle sleep.
    readiness_sleep: Option<Duration>,
}

/// The thread's loop (see the module docs).
///
/// In adaptive mode (`spin` set) the thread stands aside while futures
/// spin: it parks instead of sleeping on the sockets, looks again every
/// `interval`, and is unparked by the first future that stops spinning to
/// sleep; then it runs a round and watches as usual. With a
/// `readiness_sleep`, sleeps that run their whole length double, up to
/// it; any other wake-up or a productive round brings them back to the
/// interval.
fn run(
    shared: &Shared,
    mut poll: Option<Poll>,
    timer: Option<SubMsTimer>,
    strategy: SleepStrategy,
    waits: Waits,
) {
    let Waits {
        interval,
        spin,
        readiness_sleep,
    } = waits;
    let mut events = Events::with_capacity(64);
    let mut sleep_for = interval;
    while !shared.stop.load(Acquire) {
        // Before the round: a round now would contend with the spinners
        // for the engines' locks (and a thread preempted while holding one
        // stalls them all).
        if let Some(spin) = spin {
            if shared.spinners.active(std::time::Instant::now(), spin) {
                bump(&shared.counters.stand_asides);
                stand_aside(shared, spin, interval);
                continue;
            }
        }
        if shared.sources.round(&shared.counters, true).made() {
            sleep_for = interval;
            continue;
        }
        match strategy {
            SleepStrategy::Spin => thread::yield_now(),
            SleepStrategy::Nap => thread::sleep(interval),
            SleepStrategy::Park | SleepStrategy::Poll => {
                if !shared.sources.prepare_sleep() || !shared.gate.prepare_sleep() {
                    continue;
                }
                bump(&shared.counters.sleeps);
                let io = sleep(shared, &mut poll, timer.as_ref(), &mut events, sleep_for);
                if shared.gate.wake_up() {
                    bump(&shared.counters.notify_wakeups);
                    sleep_for = interval;
                } else if io {
                    bump(&shared.counters.io_wakeups);
                    sleep_for = interval;
                } else {
                    bump(&shared.counters.timeouts);
                    if let Some(longest) = readiness_sleep {
                        sleep_for = (sleep_for * 2).min(longest).max(interval);
                    }
                }
            }
        }
    }
}

/// Parks while futures spin (their beat is fresher than `spin`), looking
/// every `interval` (at least `spin`); a hand-off unparks it.
fn stand_aside(shared: &Shared, spin: Duration, interval: Duration) {
    let look = interval.max(spin);
    while !shared.stop.load(Acquire) && shared.spinners.active(std::time::Instant::now(), spin) {
        thread::park_timeout(look);
    }
}

/// One sleep of `interval` in the `Poll` (timed by `timer` when there is
/// one); whether socket readiness ended it. Without a `Poll`, or when it
/// fails, `nanosleep` (or `park_timeout`, for `notify`) instead.
fn sleep(
    shared: &Shared,
    poll: &mut Option<Poll>,
    timer: Option<&SubMsTimer>,
    events: &mut Events,
    interval: Duration,
) -> bool {
    let Some(p) = poll.as_mut() else {
        thread::park_timeout(interval);
        return false;
    };
    if let Some(timer) = timer {
        if timer.arm(interval).is_err() {
            bump(&shared.counters.poll_errors);
            thread::sleep(interval);
            return false;
        }
    }
    // With the timer, epoll's own timeout (rounded up to 1 ms by mio) is
    // only a backstop.
    match p.poll(events, Some(interval)) {
        Ok(()) => events
            .iter()
            .any(|e| e.token() != WAKER_TOKEN && e.token() != TIMER_TOKEN),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
        Err(_) => {
            bump(&shared.counters.poll_errors);
            thread::sleep(interval);
            false
        }
    }
}
