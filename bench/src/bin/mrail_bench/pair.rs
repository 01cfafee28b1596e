//! Running measurements in a rig: the two sides of one measurement as
//! child processes (the server in host B, the client in host A), their
//! reports, iperf3 over the rails, and the clean-up of children and
//! namespaces on Ctrl-C.

use super::rig::{RailRig, RailShape, MAX_RAILS};
use super::side::{Job, ProviderKind};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::Pid;
use psmrail::config::{ADDR_VAR, CONFIG_VAR, MRAIL_RATES_VAR};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The pids of the children alive, killed on Ctrl-C.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn children() -> std::sync::MutexGuard<'static, Vec<u32>> {
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (so in every thread
/// started after it) and starts a thread that waits for them: it kills
/// the children, deletes this process's rig namespaces and exits. Call
/// first thing in `main`.
pub(crate) fn install_cleanup() -> Result<(), String> {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(sig);
    }
    set.thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    std::thread::Builder::new()
        .name("cleanup".into())
        .spawn(move || {
            let Ok(sig) = set.wait() else { return };
            eprintln!("\nmrail_bench: {sig}: stopping both sides and removing the rig");
            // Held to the end: no child starts after this.
            let mut live = children();
            for pid in live.drain(..) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            remove_own_namespaces();
            std::process::exit(128 + sig as i32);
        })
        .map(drop)
        .map_err(|e| format!("starting the clean-up thread: {e}"))
}

/// Deletes the namespaces of this process's rigs (`psmrail-<pid>-...`,
/// as tests/support/rig.rs names them).
fn remove_own_namespaces() {
    let prefix = format!("psmrail-{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for name in entries.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        if name.starts_with(&prefix) {
            let _ = Command::new("ip")
                .args(["netns", "del", &name])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A child process, killed and reaped when dropped.
pub(crate) struct Proc {
    child: Child,
    what: String,
    reaped: bool,
}

impl Proc {
    pub(crate) fn spawn(cmd: &mut Command, what: impl Into<String>) -> Result<Proc, String> {
        let what = what.into();
        // Held across the spawn, so that the clean-up thread sees every
        // child it could miss.
        let mut live = children();
        let child = cmd.spawn().map_err(|e| format!("starting {what}: {e}"))?;
        live.push(child.id());
        Ok(Proc {
            child,
            what,
            reaped: false,
        })
    }

    fn take_stdout(&mut self) -> Result<ChildStdout, String> {
        self.child
            .stdout
            .take()
            .ok_or_else(|| format!("{}: no standard output", self.what))
    }

    /// Waits at most `timeout` for the process to exit, and kills it
    /// after that.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self
                .child
                .try_wait()
                .map_err(|e| format!("waiting for {}: {e}", self.what))?;
            if let Some(status) = status {
                self.forget();
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(format!(
                    "{} did not exit within {} s: killed",
                    self.what,
                    timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process (see [`Proc::wait`]) and returns its whole
    /// standard output, which must fit in a pipe's buffer.
    pub(crate) fn output(mut self, timeout: Duration) -> Result<(ExitStatus, String), String> {
        let mut out = self.take_stdout()?;
        let status = self.wait(timeout)?;
        let mut text = String::new();
        out.read_to_string(&mut text)
            .map_err(|e| format!("reading {}: {e}", self.what))?;
        Ok((status, text))
    }

    /// Removes the pid from the clean-up list (before it can be reused).
    fn forget(&mut self) {
        let pid = self.child.id();
        children().retain(|p| *p != pid);
        self.reaped = true;
    }

    fn stop(&mut self) {
        if !self.reaped {
            self.forget();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A rig of one rail per rate (Mbit/s, shaped with `tc`; 0: unshaped).
pub(crate) fn build_rig(rates: &[u32]) -> Result<RailRig, String> {
    if let Some(reason) = RailRig::skip_reason() {
        return Err(format!("no rig: {reason}"));
    }
    if rates.is_empty() || rates.len() > MAX_RAILS {
        return Err(format!(
            "a rig has 1 to {MAX_RAILS} rails, not {}",
            rates.len()
        ));
    }
    let shapes: Vec<RailShape> = rates
        .iter()
        .map(|&r| match r {
            0 => RailShape::default(),
            r => RailShape::rate(r),
        })
        .collect();
    RailRig::with_shapes(&shapes).map_err(|e| format!("building the rig: {e}"))
}

/// A rig's name in tables and files: `2x1000` for equal rails,
/// `1000+2500` otherwise.
pub(crate) fn rig_label(rates: &[u32]) -> String {
    match rates {
        [first, rest @ ..] if rest.iter().all(|r| r == first) => {
            format!("{}x{first}", rates.len())
        }
        _ => {
            let each: Vec<String> = rates.iter().map(u32::to_string).collect();
            each.join("+")
        }
    }
}

/// A rail's rate in words: `1000 Mbit/s`, or `unshaped` for 0.
pub(crate) fn rate_text(mbit: u32) -> String {
    match mbit {
        0 => "unshaped".to_owned(),
        r => format!("{r} Mbit/s"),
    }
}

/// A rig in words: `2 x 1000 Mbit/s`, `1000 Mbit/s + 2500 Mbit/s`,
/// `2 x unshaped`.
pub(crate) fn rig_title(rates: &[u32]) -> String {
    match rates {
        [first, rest @ ..] if rest.iter().all(|r| r == first) => {
            format!("{} x {}", rates.len(), rate_text(*first))
        }
        _ => rates
            .iter()
            .map(|&r| rate_text(r))
            .collect::<Vec<_>>()
            .join(" + "),
    }
}

/// Takes rail `rail` down or up (its end in host A, so B's end loses its
/// carrier too).
pub(crate) fn set_link(rig: &RailRig, rail: usize, up: bool) -> Result<(), String> {
    let state = if up { "up" } else { "down" };
    let out = Command::new("ip")
        .args(["-n", rig.a(), "link", "set", rig.a_if(rail), state])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip link set: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip link set {} {state}: {}",
            rig.a_if(rail),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// iperf3 over every rail at once, one TCP stream per rail (a server in
/// B, a client in A, for `secs` seconds): each rail's received rate in
/// Mbit/s.
pub(crate) fn iperf(rig: &RailRig, secs: u64) -> Result<Vec<f64>, String> {
    let port = |i: usize| (5201 + i).to_string();
    let mut servers = Vec::new();
    for i in 0..rig.rails() {
        let mut cmd = rig.command_in(rig.b(), "iperf3");
        cmd.args(["-s", "-1", "-B", &rig.b_ip(i).to_string(), "-p", &port(i)])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        servers.push(Proc::spawn(
            &mut cmd,
            format!("iperf3 server on rail {i} (apt-get install iperf3)"),
        )?);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut clients = Vec::new();
    for i in 0..rig.rails() {
        let mut cmd = rig.command_in(rig.a(), "iperf3");
        cmd.args([
            "-c",
            &rig.b_ip(i).to_string(),
            "-B",
            &rig.a_ip(i).to_string(),
        ])
        .args(["-p", &port(i), "-t", &secs.to_string(), "-f", "m"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
        clients.push(Proc::spawn(&mut cmd, format!("iperf3 client on rail {i}"))?);
    }
    let limit = Duration::from_secs(secs + 15);
    let mut rates = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (status, text) = c.output(limit)?;
        // The receiver's summary line: "... <rate> Mbits/sec ... receiver".
        let rate = text
            .lines()
            .filter(|l| l.ends_with("receiver"))
            .find_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let k = w.iter().position(|x| *x == "Mbits/sec")?;
                w.get(k.checked_sub(1)?)?.parse::<f64>().ok()
            })
            .ok_or_else(|| {
                format!("iperf3 on rail {i} ({status}): no receiver rate in {text:?}")
            })?;
        rates.push(rate);
    }
    for mut s in servers {
        let _ = s.wait(Duration::from_secs(5));
    }
    Ok(rates)
}

/// What one measurement's sides run.
#[derive(Clone, Debug)]
pub(crate) struct Variant {
    /// The name in tables and files.
    pub label: String,
    pub provider: ProviderKind,
    /// `FI_OFI_MRAIL_CONFIG` (mrail).
    pub policy: Option<String>,
    /// `PSMRAIL_MRAIL_RATES`, or `None` for learned rates (mrail).
    pub rates: Option<String>,
    pub auto_progress: bool,
}

/// Which side a report came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Who {
    Server,
    Client,
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Who::Server => "server",
            Who::Client => "client",
        })
    }
}

/// One `@@ <kind> <key>=<value> ...` line of a side.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub kind: String,
    /// Everything after the kind.
    pub rest: String,
}

impl Report {
    fn parse(line: &str) -> Report {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        Report {
            kind: kind.to_owned(),
            rest: rest.to_owned(),
        }
    }

    /// Every `<prefix><name>=<number>`: the names and numbers.
    pub(crate) fn prefixed(&self, prefix: &str) -> Vec<(String, f64)> {
        self.rest
            .split_whitespace()
            .filter_map(|kv| {
                let (k, v) = kv.strip_prefix(prefix)?.split_once('=')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect()
    }

    /// The number after `key=`.
    pub(crate) fn num(&self, key: &str) -> Result<f64, String> {
        self.rest
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no number {key}= in \"@@ {} {}\"", self.kind, self.rest))
    }
}

enum Event {
    Line(Who, Report),
    Eof(Who),
}

/// What [`Pair::next_within`] found.
pub(crate) enum Got {
    Report(Who, Report),
    /// Nothing within the time given.
    Quiet,
    /// Both sides have exited successfully.
    Done,
}

/// The two sides of one measurement, running in a rig.
pub(crate) struct Pair {
    server: Proc,
    client: Proc,
    events: Receiver<Event>,
    open: [bool; 2],
}

/// Sends each `@@` line of a side as an event, then its end.
fn forward(out: ChildStdout, who: Who, events: Sender<Event>) {
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            match line.strip_prefix("@@ ") {
                Some(r) => {
                    if events.send(Event::Line(who, Report::parse(r))).is_err() {
                        return;
                    }
                }
                None => eprintln!("{who}: {line}"),
            }
        }
        let _ = events.send(Event::Eof(who));
    });
}

/// The address `who` prints first.
fn first_addr(events: &Receiver<Event>, who: Who, timeout: Duration) -> Result<String, String> {
    match events.recv_timeout(timeout) {
        Ok(Event::Line(w, r)) if w == who && r.kind == "addr" => Ok(r.rest),
        Ok(Event::Line(w, r)) => Err(format!(
            "expected the {who}'s address, got the {w}'s \"@@ {} {}\"",
            r.kind, r.rest
        )),
        Ok(Event::Eof(_)) | Err(RecvTimeoutError::Disconnected) => {
            Err(format!("the {who} exited before printing its address"))
        }
        Err(RecvTimeoutError::Timeout) => Err(format!(
            "the {who} printed no address within {} s",
            timeout.as_secs_f64()
        )),
    }
}

impl Pair {
    /// Starts the server in B and the client in A, running `jobs`, and
    /// exchanges their addresses (each step within `timeout`).
    pub(crate) fn start(
        rig: &RailRig,
        v: &Variant,
        jobs: &[Job],
        timeout: Duration,
    ) -> Result<Pair, String> {
        let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let jobs: Vec<String> = jobs.iter().map(Job::to_string).collect();
        let side = |ns: &str, cpu: &str, addrs: String| {
            let mut cmd = rig.command_in(ns, &exe);
            cmd.args(["side", "--provider", v.provider.name(), "--cpu", cpu])
                .args(["--jobs", &jobs.join(",")])
                .args(["--with-parent", &std::process::id().to_string()])
                .env(ADDR_VAR, addrs)
                .env_remove(CONFIG_VAR)
                .env_remove(MRAIL_RATES_VAR)
                .stdout(Stdio::piped());
            if let Some(p) = &v.policy {
                cmd.args(["--policy", p]);
            }
            if let Some(r) = &v.rates {
                cmd.env(MRAIL_RATES_VAR, r);
            }
            if v.auto_progress {
                cmd.arg("--auto-progress");
            }
            cmd
        };
        let (tx, events) = mpsc::channel();
        let mut cmd = side(rig.b(), "1", rig.mrail_addr_b());
        let mut server = Proc::spawn(cmd.stdin(Stdio::piped()), "the server")?;
        let mut to_server = server.child.stdin.take().ok_or("the server's stdin")?;
        forward(server.take_stdout()?, Who::Server, tx.clone());
        let server_addr = first_addr(&events, Who::Server, timeout)?;
        let mut cmd = side(rig.a(), "0", rig.mrail_addr_a());
        cmd.stdin(Stdio::null()).arg("--").arg(&server_addr);
        let mut client = Proc::spawn(&mut cmd, "the client")?;
        forward(client.take_stdout()?, Who::Client, tx);
        let client_addr = first_addr(&events, Who::Client, timeout)?;
        writeln!(to_server, "{client_addr}")
            .map_err(|e| format!("giving the server the client's address: {e}"))?;
        Ok(Pair {
            server,
            client,
            events,
            open: [true, true],
        })
    }

    /// The next report of either side, waiting at most `wait`. A side
    /// that exits unsuccessfully is an error (the other side is killed
    /// when the pair is dropped).
    pub(crate) fn next_within(&mut self, wait: Duration) -> Result<Got, String> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Line(who, r)) => return Ok(Got::Report(who, r)),
                Ok(Event::Eof(who)) => {
                    let (proc, open) = match who {
                        Who::Server => (&mut self.server, &mut self.open[0]),
                        Who::Client => (&mut self.client, &mut self.open[1]),
                    };
                    *open = false;
                    let status = proc.wait(Duration::from_secs(10))?;
                    if !status.success() {
                        return Err(format!("the {who} failed ({status})"));
                    }
                    if self.open == [false, false] {
                        return Ok(Got::Done);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(Got::Quiet),
                Err(RecvTimeoutError::Disconnected) => return Ok(Got::Done),
            }
        }
    }

    /// The next report, `None` once both sides have exited successfully;
    /// an error when neither reports anything for `timeout`.
    pub(crate) fn next(&mut self, timeout: Duration) -> Result<Option<(Who, Report)>, String> {
        match self.next_within(timeout)? {
            Got::Report(who, r) => Ok(Some((who, r))),
            Got::Quiet => Err(format!(
                "no report for {} s: stopped both sides",
                timeout.as_secs_f64()
            )),
            Got::Done => Ok(None),
        }
    }
}
