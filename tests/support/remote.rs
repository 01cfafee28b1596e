//! The two-process harness of the public API's scenarios (`ops_remote.rs`,
//! `rma_remote.rs`): the engine and mode matrix, one side's objects, the
//! remote peer process and the runner of each test.
//!
//! # How a test runs
//! The test process only spawns a *scenario* process (role `solo`) under
//! the machine-wide spin lock and checks that it exits 0 within a deadline,
//! so a hang anywhere is bounded and PSM's process-global state never
//! meets another test's ([`launch_solo`]). The scenario process opens its
//! [`Side`] in the test's [`Mode`] (`getinfo` → `Fabric::open` → domain →
//! AV → endpoint), spawns the *remote* (role `peer`, the same test
//! re-executed, so the same mode), both insert each other, and the scenario
//! drives the remote with one-line commands ([`Remote`]). The remote
//! answers the commands of its test file ([`Commands`]) and, for every
//! file, these:
//!
//! * `insert <address>`: `fi <fi_addr>` (how the two connect);
//! * `freeze`: stops progressing (`frozen`), then takes `thaw` (`thawed`,
//!   progressing again), `close` or `exit`;
//! * `close`: closes the remote's domain (peers get a bye; `closed`) while
//!   its process lives on until `exit`;
//! * `exit`: closes what is open and ends (`bye`).
//!
//! Each test is one line of a [`remote_tests!`] table: name, mode,
//! scenario. Native tests need the PSM library: without it they print why
//! and pass, unless `PSMRAIL_REQUIRE_NATIVE=1`. Children get
//! `PSM2_DEVICES=self,shm` unless the variable is set.

use super::peer::{self, say, Peer};
use super::spin_lock;
use psmrail::config::PsmConfig;
use psmrail::engine::soft::SoftConfig;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, CompletionQueue, Counter, CounterAttr, CounterBind,
    CqAttr, CqBind, CqErrEntry, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
    ProgressKind,
};
use psmrail::reactor::Reactor;
use std::future::Future;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one command may take (a 16 MiB transfer or a 64 MiB hash in a
/// debug build included).
pub(crate) const STEP: Duration = Duration::from_secs(30);

// ----- modes -------------------------------------------------------------------

/// The engine a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Eng {
    /// Real PSM over shared memory.
    Native,
    /// Unix sockets between processes of one host (the default).
    Soft,
    /// The soft engine over TCP only.
    SoftTcp,
}

/// What the endpoint is for: its caps, and what its CQ and counters are
/// bound to (counters a kind does not bind stay at zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EpKind {
    /// `FI_TAGGED | FI_MSG | FI_MULTI_RECV`; the CQ takes transmit
    /// completions (of posts with a context), `sends` counts sends.
    Msg,
    /// `FI_MSG | FI_DIRECTED_RECV` (which excludes `FI_TAGGED`), bound as
    /// [`EpKind::Msg`].
    Directed,
    /// `FI_RMA | FI_ATOMIC | FI_RMA_EVENT`; the CQ takes transmit and
    /// receive completions (remote CQ data lands there), `writes` counts
    /// this side's writes and plain atomics, `remote_writes` and
    /// `remote_reads` the peer's accesses.
    Rma,
}

/// What a test runs on: engine, endpoint kind, progress mode and the
/// provider's settings.
///
/// * `am_msg`: untagged messages over active messages (`FI_PSM_AM_MSG`).
/// * `tagged_rma`: `FI_PSM_TAGGED_RMA` (the provider's default when
///   unset): off, every RMA byte goes in AM chunks; on, above the chunk
///   the bytes go over the tagged MQ.
/// * `auto`: auto progress (the progress thread); else manual.
/// * `elsewhere`: the remote looks like a process on another host to the
///   peer watch (`PSMRAIL_WATCH_HOST`): its process cannot be looked at,
///   only keepalives tell whether it lives.
/// * `fragments`: both processes run with `PSM2_KASSIST_MODE=none`:
///   libpsm2 then moves large messages over shared memory in fragments, one
///   per progress step, instead of pulling them whole with one cross-memory
///   copy when they match, so a receive can be matched and still being
///   written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mode {
    pub(crate) engine: Eng,
    pub(crate) kind: EpKind,
    pub(crate) am_msg: bool,
    pub(crate) tagged_rma: Option<bool>,
    pub(crate) auto: bool,
    pub(crate) elsewhere: bool,
    pub(crate) fragments: bool,
    pub(crate) lazy: bool,
}

impl Mode {
    const fn new(engine: Eng, kind: EpKind) -> Mode {
        Mode {
            engine,
            kind,
            am_msg: false,
            tagged_rma: None,
            auto: false,
            elsewhere: false,
            fragments: false,
            lazy: false,
        }
    }

    /// Messages ([`EpKind::Msg`]), manual progress.
    pub(crate) const fn msg(engine: Eng) -> Mode {
        Mode::new(engine, EpKind::Msg)
    }

    /// RMA and atomics ([`EpKind::Rma`]), every RMA byte in AM chunks,
    /// manual progress.
    pub(crate) const fn rma(engine: Eng) -> Mode {
        let mut m = Mode::new(engine, EpKind::Rma);
        m.tagged_rma = Some(false);
        m
    }

    /// Untagged messages only, with directed receives ([`EpKind::Directed`]).
    pub(crate) const fn directed(mut self) -> Mode {
        self.kind = EpKind::Directed;
        self
    }

    /// Untagged messages over active messages.
    pub(crate) const fn am_msg(mut self) -> Mode {
        self.am_msg = true;
        self
    }

    /// RMA above the AM chunk over the tagged MQ.
    pub(crate) const fn tagged_rma(mut self) -> Mode {
        self.tagged_rma = Some(true);
        self
    }

    /// Auto progress.
    pub(crate) const fn auto(mut self) -> Mode {
        self.auto = true;
        self
    }

    /// The remote on "another host" for the peer watch.
    pub(crate) const fn elsewhere(mut self) -> Mode {
        self.elsewhere = true;
        self
    }

    /// Large messages in shared-memory fragments.
    pub(crate) const fn fragments(mut self) -> Mode {
        self.fragments = true;
        self
    }

    /// Both sides' AVs connect at first use ([`AvAttr::lazy_connect`]).
    pub(crate) const fn lazy(mut self) -> Mode {
        self.lazy = true;
        self
    }
}

// ----- one side's objects ------------------------------------------------------------

/// An opened endpoint with what it needs (see [`EpKind`] for what the CQ
/// and the counters are bound to).
pub(crate) struct Side {
    _fabric: Fabric,
    pub(crate) domain: Domain,
    pub(crate) av: AddressVector,
    pub(crate) ep: Endpoint,
    pub(crate) reactor: Reactor,
    pub(crate) cq: CompletionQueue,
    /// Sends ([`EpKind::Msg`], [`EpKind::Directed`]).
    pub(crate) sends: Counter,
    /// This side's writes and plain atomics ([`EpKind::Rma`]).
    pub(crate) writes: Counter,
    /// The peer's writes into this side's regions ([`EpKind::Rma`]).
    pub(crate) remote_writes: Counter,
    /// The peer's reads of this side's regions ([`EpKind::Rma`]).
    pub(crate) remote_reads: Counter,
}

impl Side {
    /// Opens fabric, domain, AV, CQ, counters and endpoint for `mode`, and
    /// checks the domain took the mode's progress and settings.
    pub(crate) fn open(mode: Mode) -> Side {
        let mut config = PsmConfig::builder()
            .delay(Duration::ZERO)
            .timeout(Duration::from_secs(1))
            .am_msg(mode.am_msg)
            .prog_thread(mode.auto);
        if let Some(on) = mode.tagged_rma {
            config = config.tagged_rma(on);
        }
        let config = config.build().expect("config");
        let caps = match mode.kind {
            EpKind::Msg => Caps::TAGGED | Caps::MSG | Caps::MULTI_RECV,
            EpKind::Directed => Caps::MSG | Caps::DIRECTED_RECV,
            EpKind::Rma => Caps::RMA | Caps::ATOMIC | Caps::RMA_EVENT,
        };
        let mut hints = Hints::new()
            .caps(caps)
            .config(config)
            .engine(match mode.engine {
                Eng::Native => EngineChoice::Native,
                Eng::Soft | Eng::SoftTcp => EngineChoice::Soft,
            });
        if mode.engine == Eng::SoftTcp {
            hints = hints.soft_config(SoftConfig {
                unix_sockets: false,
                ..SoftConfig::default()
            });
        }
        if mode.auto {
            hints = hints.progress(ProgressKind::Auto);
        }
        let info = getinfo(Some(&hints))
            .expect("getinfo")
            .into_iter()
            .next()
            .expect("getinfo offered nothing");
        let fabric = Fabric::open(&info).expect("fabric");
        let domain = fabric.domain(&info).expect("domain");
        let av = domain
            .av(AvAttr::new().lazy_connect(mode.lazy))
            .expect("av");
        let cq = domain.cq(CqAttr::new()).expect("cq");
        let counter = || domain.counter(CounterAttr::new()).expect("counter");
        let (sends, writes, remote_writes, remote_reads) =
            (counter(), counter(), counter(), counter());
        let builder = domain.endpoint(&info).bind_av(&av);
        let builder = match mode.kind {
            EpKind::Msg | EpKind::Directed => builder
                .bind_cq(&cq, CqBind::TRANSMIT)
                .bind_counter(&sends, CounterBind::SEND),
            EpKind::Rma => builder
                .bind_cq(&cq, CqBind::RECV | CqBind::TRANSMIT)
                .bind_counter(&writes, CounterBind::WRITE)
                .bind_counter(&remote_writes, CounterBind::REMOTE_WRITE)
                .bind_counter(&remote_reads, CounterBind::REMOTE_READ),
        };
        let ep = builder.enable().expect("endpoint");
        let reactor = domain.reactor().clone();
        assert_eq!(reactor.is_manual(), !mode.auto, "progress mode");
        let taken = domain.info().config();
        assert_eq!(taken.am_msg(), mode.am_msg, "am_msg");
        if let Some(on) = mode.tagged_rma {
            assert_eq!(taken.tagged_rma(), on, "tagged_rma");
        }
        Side {
            _fabric: fabric,
            domain,
            av,
            ep,
            reactor,
            cq,
            sends,
            writes,
            remote_writes,
            remote_reads,
        }
    }

    /// One idle step: a progress round in manual mode, a short nap in auto
    /// mode (the progress thread works).
    pub(crate) fn idle(&self) {
        if self.reactor.is_manual() {
            self.reactor.progress();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.reactor.block_on(f)
    }

    /// Polls `f` (idling between polls) until it resolves or `within`
    /// passes.
    pub(crate) fn poll_for<F: Future + Unpin>(
        &self,
        f: &mut F,
        within: Duration,
    ) -> Option<F::Output> {
        let deadline = Instant::now() + within;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(&mut *f).poll(&mut cx) {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            self.idle();
        }
    }

    /// The next error entry of the CQ within `within` (idling between
    /// reads); panics naming `what` if a success entry comes instead or
    /// nothing comes in time.
    pub(crate) fn cq_error_within(&self, within: Duration, what: &str) -> CqErrEntry {
        let deadline = Instant::now() + within;
        loop {
            if let Some(e) = self.cq.readerr() {
                return e;
            }
            assert!(
                self.cq.read().expect("cq").is_none(),
                "{what} towards a dead peer completed successfully"
            );
            assert!(
                Instant::now() < deadline,
                "no CQ entry for {what} {within:?} after the peer died"
            );
            self.idle();
        }
    }

    pub(crate) fn close(self) {
        let Side {
            _fabric,
            domain,
            ep,
            ..
        } = self;
        ep.close().expect("endpoint close");
        domain.close().expect("domain close");
    }
}

// ----- the remote --------------------------------------------------------------------

/// A test file's remote commands: given a command's words, the reply line.
/// Made for the remote's [`Side`] when it opens (it may keep operations
/// that borrow it) and dropped before the side closes.
pub(crate) type Commands<'a> = Box<dyn FnMut(&[&str]) -> String + 'a>;

/// Builds a test file's [`Commands`] for the remote's side.
pub(crate) type MakeCommands = for<'a> fn(&'a Side) -> Commands<'a>;

/// How the remote's command loop ended.
enum Stop {
    /// `exit`: close what is open and end.
    Exit,
    /// `close`: close the side, then wait for `exit`.
    Close,
    /// The scenario process is gone: nothing more to do.
    Gone,
}

/// The remote's process: opens its side, says its address, then answers
/// commands until `exit`, progressing between them.
fn remote_main(mode: Mode, make: MakeCommands) {
    let side = Side::open(mode);
    let lines = peer::stdin_lines();
    say(&format!("addr {}", side.ep.getname()));
    match answer(&side, &lines, make) {
        Stop::Gone => {}
        Stop::Exit => {
            side.close();
            say("bye");
        }
        Stop::Close => {
            side.close();
            say("closed");
            match lines.recv().as_deref().map(str::trim) {
                Ok("exit") | Err(_) => say("bye"),
                Ok(other) => panic!("remote: {other:?} after close"),
            }
        }
    }
}

/// Answers commands (the harness's own, then the test file's) until one
/// ends the loop; the file's commands, and whatever they hold, are dropped
/// on return.
fn answer(side: &Side, lines: &mpsc::Receiver<String>, make: MakeCommands) -> Stop {
    let mut commands = make(side);
    loop {
        let stop = peer::serve(
            lines,
            || side.idle(),
            |w| match w[0] {
                "insert" => Some(match side.av.insert_str(w[1]) {
                    Ok(a) => format!("fi {}", a.0),
                    Err(e) => format!("err {:?} {e}", e.kind()),
                }),
                "exit" | "close" | "freeze" => None,
                _ => Some(commands(w)),
            },
        );
        let Some(stop) = stop else {
            return Stop::Gone;
        };
        match stop.trim() {
            "exit" => return Stop::Exit,
            "close" => return Stop::Close,
            "freeze" => {
                // No progress (the process lives) until the next line.
                say("frozen");
                match lines.recv().as_deref().map(str::trim) {
                    Ok("thaw") => say("thawed"),
                    Ok("close") => return Stop::Close,
                    Ok("exit") | Err(_) => return Stop::Exit,
                    Ok(other) => panic!("remote: {other:?} while frozen"),
                }
            }
            other => unreachable!("{other:?} does not end the command loop"),
        }
    }
}

/// The scenario's handle on the remote process. A test file adds the
/// helpers of its own commands (`impl Remote` beside its [`Commands`]).
pub(crate) struct Remote {
    peer: Option<Peer>,
    /// The remote, in the scenario's AV.
    pub(crate) fi: FiAddr,
    /// The scenario's endpoint, in the remote's AV.
    pub(crate) me: FiAddr,
}

impl Remote {
    /// Spawns the remote (with `env`) and connects both ways.
    fn spawn(test: &str, side: &Side, env: &[(&str, &str)]) -> Remote {
        let mut peer = Peer::spawn(test, "peer", env);
        let line = peer.recv_line_with(STEP, || side.idle());
        let addr = line.strip_prefix("addr ").expect("the remote's address");
        let fi = side.av.insert_str(addr).expect("insert the remote");
        let mut r = Remote {
            peer: Some(peer),
            fi,
            me: FiAddr::UNSPEC,
        };
        let reply = r.cmd(side, &format!("insert {}", side.ep.getname()));
        let me = reply
            .strip_prefix("fi ")
            .unwrap_or_else(|| panic!("the remote could not insert us: {reply}"));
        r.me = FiAddr(me.parse().expect("an fi_addr"));
        r
    }

    fn peer(&mut self) -> &mut Peer {
        self.peer.as_mut().expect("the remote is gone")
    }

    /// Sends a command and returns the reply, progressing meanwhile.
    pub(crate) fn cmd(&mut self, side: &Side, line: &str) -> String {
        self.peer().cmd(line, STEP, || side.idle())
    }

    /// A command whose reply must be `want`.
    pub(crate) fn expect(&mut self, side: &Side, line: &str, want: &str) {
        let reply = self.cmd(side, line);
        assert_eq!(reply, want, "{line}");
    }

    /// Sends a command without waiting for its reply (see
    /// [`reply`](Self::reply)).
    pub(crate) fn send(&mut self, line: &str) {
        self.peer().send_line(line);
    }

    /// The remote's next line, progressing meanwhile.
    pub(crate) fn reply(&mut self, side: &Side) -> String {
        self.peer().recv_line_with(STEP, || side.idle())
    }

    /// Closes the remote's endpoint and checks that it exits 0.
    pub(crate) fn exit(&mut self, side: &Side) {
        if let Some(peer) = self.peer.take() {
            peer.finish("exit", "bye", STEP, || side.idle());
        }
    }

    /// Kills the remote now.
    pub(crate) fn kill(&mut self) {
        if let Some(peer) = self.peer.take() {
            peer.kill();
        }
    }
}

// ----- running a test -------------------------------------------------------------------

/// A scenario: the test's name, this side, the remote.
pub(crate) type Scenario = fn(&str, &Side, &mut Remote);

/// Runs `scenario` for `test` in `mode`: in the test process, launches the
/// scenario process and checks it succeeded within `limit`; in the
/// scenario process, opens the side, spawns the remote, runs the scenario
/// and lets the remote exit; in the remote's process, answers the
/// harness's commands and those `make` builds.
pub(crate) fn run(test: &str, mode: Mode, limit: Duration, make: MakeCommands, scenario: Scenario) {
    match peer::role().as_deref() {
        Some("peer") => remote_main(mode, make),
        Some("solo") => {
            let side = Side::open(mode);
            let env: &[(&str, &str)] = if mode.elsewhere {
                &[("PSMRAIL_WATCH_HOST", "elsewhere")]
            } else {
                &[]
            };
            let mut remote = Remote::spawn(test, &side, env);
            scenario(test, &side, &mut remote);
            remote.exit(&side);
            side.close();
        }
        Some(other) => panic!("unknown role {other}"),
        None => {
            let env: &[(&str, &str)] = if mode.fragments {
                &[("PSM2_KASSIST_MODE", "none")]
            } else {
                &[]
            };
            launch_solo(test, mode.engine == Eng::Native, limit, env)
        }
    }
}

/// One `#[test]` per line: `name: mode => scenario;`, run by [`run`] with
/// the file's scenario time limit and remote commands, given first:
///
/// ```ignore
/// remote_tests! {
///     limit: SCENARIO, commands: commands;
///     native_sizes_am: Mode::rma(Native) => sizes;
/// }
/// ```
#[allow(unused_macros)]
macro_rules! remote_tests {
    (limit: $limit:expr, commands: $make:path; $($name:ident: $mode:expr => $scenario:path;)*) => {
        $(
            #[test]
            fn $name() {
                $crate::support::remote::run(
                    stringify!($name),
                    $mode,
                    $limit,
                    $make,
                    $scenario,
                );
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use remote_tests;

fn require_native() -> bool {
    std::env::var("PSMRAIL_REQUIRE_NATIVE").is_ok_and(|v| v == "1")
}

/// Whether the native engine can run here; otherwise prints why (a failure
/// with `PSMRAIL_REQUIRE_NATIVE=1`).
pub(crate) fn native_available() -> bool {
    let reason = match psm_sys::PsmLibrary::load() {
        Ok(l) if l.build() == psm_sys::PsmBuild::Psm2Compat => return true,
        Ok(_) => "the default PSM library is not the compat build (libpsm2-2-compat), \
                  which two-process scenarios need for shared memory"
            .to_owned(),
        Err(e) => e.to_string(),
    };
    assert!(!require_native(), "PSMRAIL_REQUIRE_NATIVE=1 but {reason}");
    eprintln!("SKIPPED: {reason}");
    false
}

/// In the test process: runs `test` as a scenario child (role `solo`)
/// under the spin lock and checks it succeeded within `limit`. Skips (or
/// fails, when required) a native scenario where the library cannot run.
/// `extra` variables go into the scenario's environment (its remote
/// inherits them).
pub(crate) fn launch_solo(test: &str, native: bool, limit: Duration, extra: &[(&str, &str)]) {
    if native && !native_available() {
        return;
    }
    let _lock = spin_lock::spin_lock();
    let mut env = extra.to_vec();
    if std::env::var_os("PSM2_DEVICES").is_none() {
        env.push(("PSM2_DEVICES", "self,shm"));
    }
    let status = Peer::spawn(test, "solo", &env).wait(limit);
    assert!(status.success(), "{test}: the scenario failed: {status}");
}
