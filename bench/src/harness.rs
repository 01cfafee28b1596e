//! The peer processes of a measurement: where each runs (CPU placement
//! and pinning), starting a program again as a peer and talking to it
//! over its standard input and output, and the peer's side of that talk.
//!
//! A peer prints what the starting process must read as lines beginning
//! `@@ ` (its address, its results); every other line of its standard
//! output is passed on to the starting process's standard error. A peer
//! started with [`PeerProcess::start`] can die with its parent
//! ([`die_with_parent`]).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a peer may stay silent (between two `@@` lines) before the
/// starting process gives up on it.
const SILENCE: Duration = Duration::from_secs(300);

/// The CPUs of the two peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The client's CPU.
    pub client: usize,
    /// The server's CPU.
    pub server: usize,
}

impl Placement {
    /// Client on the first CPU this process may use, server on the second;
    /// both on the one CPU when there is only one.
    pub fn of_this_machine() -> Placement {
        let cpus = allowed_cpus();
        Placement::from_cpus(&cpus)
    }

    /// The placement over these CPUs.
    pub fn from_cpus(cpus: &[usize]) -> Placement {
        let client = cpus.first().copied().unwrap_or(0);
        let server = cpus.get(1).copied().unwrap_or(client);
        Placement { client, server }
    }

    /// How the peers are placed, for the output.
    pub fn describe(&self) -> String {
        if self.client == self.server {
            format!(
                "only one CPU: client and server both pinned to CPU {} (latency includes their sharing it)",
                self.client
            )
        } else {
            format!(
                "client pinned to CPU {}, server to CPU {}",
                self.client, self.server
            )
        }
    }
}

/// The CPUs this process may run on, in order (from
/// `/proc/self/status`; CPUs 0 .. the available parallelism when that
/// cannot be read).
fn allowed_cpus() -> Vec<usize> {
    let listed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| parse_cpu_list(l.trim()))
        })
        .filter(|v| !v.is_empty());
    listed.unwrap_or_else(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        (0..n).collect()
    })
}

/// A kernel CPU list such as `0-3,6,8-9`.
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> Result<(), String> {
    let set: psmrail::reactor::CpuSet = [cpu].into_iter().collect();
    psmrail::reactor::pin_current_thread(&set).map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

/// Makes the kernel kill this process when its parent dies.
pub fn exit_with_parent() -> Result<(), String> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and touches no
    // memory of this process.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if rc != 0 {
        return Err(format!(
            "prctl(PR_SET_PDEATHSIG): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Makes the kernel kill this process when its parent dies, and checks
/// that the parent is still `pid`.
pub fn die_with_parent(pid: u32) -> Result<(), String> {
    exit_with_parent()?;
    if std::os::unix::process::parent_id() != pid {
        return Err(format!("the process that started this one ({pid}) is gone"));
    }
    Ok(())
}

/// A peer tells the starting process `line` (printed after `@@ `).
pub fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the starting process: {e}"))
}

/// The server reads the client's address from its standard input (a
/// line). A future, on a thread of its own: a server with manual progress
/// awaits it on its reactor, so that its endpoint answers the client's
/// connection meanwhile.
pub fn peer_addr() -> impl std::future::Future<Output = Result<String, String>> {
    let (tx, rx) = futures::channel::oneshot::channel::<Result<String, String>>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let got = match std::io::stdin().read_line(&mut line) {
            Ok(0) => Err("the starting process closed the address channel".to_owned()),
            Ok(_) => Ok(line.trim().to_owned()),
            Err(e) => Err(format!("reading the client's address: {e}")),
        };
        let _ = tx.send(got);
    });
    async move {
        rx.await
            .unwrap_or_else(|_| Err("the address reader ended".to_owned()))
    }
}

/// Resolves once the starting process closes this peer's standard input:
/// a client keeps its endpoint open (and, awaiting this, moving) until
/// the server has received everything, then exits.
pub fn until_released() -> impl std::future::Future<Output = Result<(), String>> {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    async move {
        // A dropped sender means the same: the input is gone.
        let _ = rx.await;
        Ok(())
    }
}

/// A running peer process: its `@@` lines arrive on a channel (other
/// lines of its standard output go to this process's standard error).
#[derive(Debug)]
pub struct PeerProcess {
    role: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl PeerProcess {
    /// Starts this program again with `args`, as the peer named `role`
    /// in messages.
    pub fn start(role: &'static str, args: &[String]) -> Result<PeerProcess, String> {
        let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the {role}: {e}"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| format!("the {role} has no standard output"))?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                match line.strip_prefix("@@ ") {
                    Some(l) => {
                        if tx.send(l.to_owned()).is_err() {
                            return;
                        }
                    }
                    None => eprintln!("{role}: {line}"),
                }
            }
        });
        Ok(PeerProcess {
            role,
            child,
            stdin,
            lines,
        })
    }

    /// The next `@@` line, without the prefix.
    pub fn next_line(&mut self) -> Result<String, String> {
        match self.lines.recv_timeout(SILENCE) {
            Ok(line) => Ok(line),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "the {} said nothing for {} s",
                self.role,
                SILENCE.as_secs()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map_err(|e| e.to_string())?;
                Err(format!("the {} ended early ({status})", self.role))
            }
        }
    }

    /// The peer's address: its next `@@` line, `addr ADDRESS`.
    pub fn addr(&mut self) -> Result<String, String> {
        let line = self.next_line()?;
        line.strip_prefix("addr ")
            .map(str::to_owned)
            .ok_or_else(|| format!("the {} said {line:?}, expected its address", self.role))
    }

    /// Writes `line` to the peer's standard input.
    pub fn tell(&mut self, line: &str) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("the {}'s input is closed", self.role))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to the {}: {e}", self.role))
    }

    /// Waits up to `patience` for the process to exit successfully.
    pub fn finish(mut self, patience: Duration) -> Result<(), String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + patience;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => return Err(format!("the {} failed ({s})", self.role)),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    return Err(format!(
                        "the {} did not exit within {} s",
                        self.role,
                        patience.as_secs()
                    ))
                }
                Err(e) => return Err(format!("waiting for the {}: {e}", self.role)),
            }
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        // Ends this peer (only this child, by its pid) if it is still
        // running: after an error, or when `finish` gave up.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements() {
        assert_eq!(
            Placement::from_cpus(&[0, 1]),
            Placement {
                client: 0,
                server: 1
            }
        );
        let one = Placement::from_cpus(&[3]);
        assert_eq!(one.client, 3);
        assert_eq!(one.server, 3);
        assert!(one.describe().contains("only one CPU"));
        assert_eq!(Placement::from_cpus(&[]).client, 0);
        assert!(!allowed_cpus().is_empty());
        assert_eq!(parse_cpu_list("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
