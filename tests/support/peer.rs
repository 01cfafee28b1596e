//! Running one side of a test in a child process.
//!
//! The test binary re-executes itself, filtered to the same test, with
//! `PSMRAIL_TEST_ROLE` set; the test function checks [`role`] first and
//! plays the child's part when it is set. The two sides talk over the
//! child's stdin/stdout, one line at a time ([`Peer::send_line`],
//! [`Peer::recv_line`] in the parent; [`say`], [`stdin_lines`] or
//! [`ChildIo`] in the child), which is enough to exchange endpoint ids and
//! verdicts. A child that takes commands answers them with [`serve`]; the
//! parent sends each with [`Peer::cmd`] and ends the exchange with
//! [`Peer::finish`], which checks the child's exit. [`Peer::spawn_in`]
//! starts the child inside a network namespace, such as a host of the
//! multi-rail rig ([`super::rig`]).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROLE_VAR: &str = "PSMRAIL_TEST_ROLE";

/// The role this process plays, if it is a child started by [`Peer::spawn`].
/// A child dies with the thread that spawned it, so a failed test leaves no
/// spinning process behind (a remote blocked on a receive from any source,
/// which a dead peer does not end, would otherwise spin forever).
pub(crate) fn role() -> Option<String> {
    let role = std::env::var(ROLE_VAR).ok()?;
    die_with_parent();
    Some(role)
}

/// Asks the kernel to kill this process when its parent goes.
fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process;
    // getppid has no preconditions.
    let orphaned = unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::getppid() == 1
    };
    if orphaned {
        // The parent was gone before the flag was set.
        std::process::exit(1);
    }
}

/// The parent's lines, read on a thread of their own: for a child that
/// must keep progressing while it waits for the next command
/// (`try_recv`); disconnected once the parent is gone.
pub(crate) fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// Sends one line to the parent (the child's side; the parent reads it
/// with [`Peer::recv_line`]).
pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {line}").expect("stdout");
    out.flush().expect("flush");
}

/// A number in a command: decimal, or hex after `0x`.
pub(crate) fn num(word: &str) -> u64 {
    match word.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("a hex number"),
        None => word.parse().expect("a number"),
    }
}

/// The child's command loop: answers the parent's lines one by one,
/// calling `idle` (a progress step) while none is waiting. `answer` gets a
/// command's words and returns the line to [`say`], or `None` for a
/// command that ends the loop: that line is returned for the caller to
/// finish. `None` once the parent is gone.
pub(crate) fn serve(
    lines: &mpsc::Receiver<String>,
    mut idle: impl FnMut(),
    mut answer: impl FnMut(&[&str]) -> Option<String>,
) -> Option<String> {
    loop {
        let line = match lines.try_recv() {
            Ok(l) => l,
            Err(mpsc::TryRecvError::Empty) => {
                idle();
                continue;
            }
            Err(mpsc::TryRecvError::Disconnected) => return None,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        match answer(&words) {
            Some(reply) => say(&reply),
            None => return Some(line),
        }
    }
}

/// A child process running `test` in `role`.
pub(crate) struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    /// Starts the current test binary filtered to exactly `test` (ignored
    /// tests included, so `#[ignore]`d benchmarks work too), with the role
    /// and extra environment set.
    pub(crate) fn spawn(test: &str, role: &str, env: &[(&str, &str)]) -> Peer {
        let exe = std::env::current_exe().expect("current_exe");
        Peer::start(Command::new(exe), test, role, env)
    }

    /// Like [`Peer::spawn`], with the child inside network namespace
    /// `netns` (`ip netns exec <netns> <exe> ...`, which needs root).
    /// `ip netns exec` replaces itself with the test binary, so the child
    /// is still this process's child: it dies with the spawning thread and
    /// its id is the test binary's.
    pub(crate) fn spawn_in(netns: &str, test: &str, role: &str, env: &[(&str, &str)]) -> Peer {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns]).arg(exe);
        Peer::start(cmd, test, role, env)
    }

    /// Starts `cmd` (the test binary, possibly behind a wrapper) as the
    /// child playing `role` in `test`.
    fn start(mut cmd: Command, test: &str, role: &str, env: &[(&str, &str)]) -> Peer {
        cmd.args([
            test,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_VAR, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn peer");
        let stdin = child.stdin.take().expect("stdin");
        let stdout: ChildStdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness prints its own lines; ours carry a
                // prefix. It may follow the harness's unterminated
                // "test <name> ... " on the same line.
                if let Some(at) = line.find("@@ ") {
                    if tx.send(line[at + 3..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        Peer {
            child,
            stdin,
            lines,
        }
    }

    /// Sends one line to the child.
    pub(crate) fn send_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to peer");
        self.stdin.flush().expect("flush to peer");
    }

    /// The child's next line, or a panic naming what was awaited after
    /// `timeout`.
    pub(crate) fn recv_line(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => l,
            Err(_) => {
                let _ = self.child.kill();
                panic!("peer sent no line within {timeout:?}");
            }
        }
    }

    /// The child's next line, calling `idle` between looks (to keep an
    /// endpoint progressing while the child connects to it); a panic naming
    /// what was awaited after `timeout`.
    pub(crate) fn recv_line_with(&mut self, timeout: Duration, mut idle: impl FnMut()) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self.lines.try_recv() {
                Ok(l) => return l,
                Err(mpsc::TryRecvError::Disconnected) => {
                    let _ = self.child.kill();
                    panic!("peer closed its output before sending a line");
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("peer sent no line within {timeout:?}");
            }
            idle();
        }
    }

    /// Sends a command and returns the child's answer, calling `idle`
    /// while waiting; a panic after `timeout`.
    pub(crate) fn cmd(&mut self, line: &str, timeout: Duration, idle: impl FnMut()) -> String {
        self.send_line(line);
        self.recv_line_with(timeout, idle)
    }

    /// Ends the exchange and takes the child's verdict: sends `line`,
    /// asserts the answer is `reply` (calling `idle` while waiting), then
    /// waits for the child to exit and asserts it succeeded. Each wait is
    /// bounded by `timeout`.
    pub(crate) fn finish(mut self, line: &str, reply: &str, timeout: Duration, idle: impl FnMut()) {
        let mut idle = idle;
        assert_eq!(self.cmd(line, timeout, &mut idle), reply, "{line}");
        let status = self.wait_with(timeout, idle);
        assert!(status.success(), "the remote failed: {status}");
    }

    /// The child's process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child to exit, killing it after `timeout`.
    pub(crate) fn wait(self, timeout: Duration) -> ExitStatus {
        self.wait_with(timeout, || std::thread::sleep(Duration::from_millis(5)))
    }

    /// [`wait`](Self::wait), calling `idle` while the child runs (a
    /// manual-progress side progresses there: the child may be closing a
    /// link that needs this side's answer).
    pub(crate) fn wait_with(mut self, timeout: Duration, mut idle: impl FnMut()) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("peer did not exit within {timeout:?}");
            }
            idle();
        }
    }

    /// Kills the child now (to test a dead peer).
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side of the line channel.
pub(crate) struct ChildIo {
    stdin: std::io::StdinLock<'static>,
}

impl ChildIo {
    /// The channel to the parent.
    pub(crate) fn new() -> ChildIo {
        ChildIo {
            stdin: std::io::stdin().lock(),
        }
    }

    /// Sends one line to the parent ([`say`]).
    pub(crate) fn send_line(&mut self, line: &str) {
        say(line);
    }

    /// The parent's next line (blocks; the parent's timeouts bound it).
    pub(crate) fn recv_line(&mut self) -> String {
        let mut line = String::new();
        self.stdin.read_line(&mut line).expect("stdin");
        line.trim_end().to_owned()
    }
}
