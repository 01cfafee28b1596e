//! The shared harness: where each peer runs (CPU placement and pinning),
//! starting the two peer processes of a variant and talking to them over
//! their standard input and output, and the peers' side of that talk.
//!
//! The sweep process starts the server (`psm_bench serve ...`), reads its
//! `@@ addr` line, starts the client (`psm_bench client --addr ...`),
//! hands the client's `@@ addr` line to the server's standard input, then
//! collects the client's `@@ row` lines (JSON [`Row`]s) until `@@ done`.
//! Both peers die with the sweep process (`PR_SET_PDEATHSIG`).

use crate::cli::{PeerArgs, Variant};
use crate::jobs::Job;
use crate::report::Row;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a peer may stay silent (between two rows) before the sweep
/// gives up on it.
const SILENCE: Duration = Duration::from_secs(300);

/// The CPUs of the two peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The client's CPU.
    pub client: usize,
    /// The server's CPU.
    pub server: usize,
}

impl Placement {
    /// Client on the first CPU this process may use, server on the second;
    /// both on the one CPU when there is only one.
    pub(crate) fn of_this_machine() -> Placement {
        let cpus = allowed_cpus();
        Placement::from_cpus(&cpus)
    }

    /// The placement over these CPUs.
    pub(crate) fn from_cpus(cpus: &[usize]) -> Placement {
        let client = cpus.first().copied().unwrap_or(0);
        let server = cpus.get(1).copied().unwrap_or(client);
        Placement { client, server }
    }

    /// How the peers are placed, for the output.
    pub(crate) fn describe(&self) -> String {
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
pub(crate) fn pin(cpu: usize) -> Result<(), String> {
    let set: psmrail::reactor::CpuSet = [cpu].into_iter().collect();
    psmrail::reactor::pin_current_thread(&set).map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

/// Makes the kernel kill this process when its parent dies, and checks
/// that the parent is still `pid`.
pub(crate) fn die_with_parent(pid: u32) -> Result<(), String> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and touches no
    // memory of this process.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if rc != 0 {
        return Err(format!(
            "prctl(PR_SET_PDEATHSIG): {}",
            std::io::Error::last_os_error()
        ));
    }
    if std::os::unix::process::parent_id() != pid {
        return Err(format!("the process that started this one ({pid}) is gone"));
    }
    Ok(())
}

/// What a peer does first: die with the sweep process, if told.
pub(crate) fn peer_setup(args: &PeerArgs) -> Result<(), String> {
    if let Some(pid) = args.with_parent {
        die_with_parent(pid)?;
    }
    Ok(())
}

/// Pins a peer as `--cpu` says.
pub(crate) fn peer_pin(args: &PeerArgs) -> Result<(), String> {
    match args.cpu {
        Some(cpu) => pin(cpu),
        None => Ok(()),
    }
}

/// A peer announces its address.
pub(crate) fn announce_addr(addr: &str) -> Result<(), String> {
    say(&format!("addr {addr}"))
}

/// A client reports one measurement.
pub(crate) fn announce_row(row: &Row) -> Result<(), String> {
    let json = serde_json::to_string(row).map_err(|e| format!("JSON: {e}"))?;
    say(&format!("row {json}"))
}

/// A client reports that every job ran.
pub(crate) fn announce_done() -> Result<(), String> {
    say("done")
}

fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the sweep process: {e}"))
}

/// The server reads the client's address from its standard input (a
/// line). A future, on a thread of its own: a server with manual progress
/// awaits it on its reactor, so that its endpoint answers the client's
/// connection meanwhile.
pub(crate) fn peer_addr() -> impl std::future::Future<Output = Result<String, String>> {
    let (tx, rx) = futures::channel::oneshot::channel::<Result<String, String>>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let got = match std::io::stdin().read_line(&mut line) {
            Ok(0) => Err("the sweep process closed the address channel".to_owned()),
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

/// Resolves once the sweep process closes this peer's standard input:
/// a client keeps its endpoint open (and, awaiting this, moving) until
/// the server has received everything, then exits.
pub(crate) fn until_released() -> impl std::future::Future<Output = Result<(), String>> {
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
struct Peer {
    role: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    fn start(role: &'static str, args: &[String]) -> Result<Peer, String> {
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
        Ok(Peer {
            role,
            child,
            stdin,
            lines,
        })
    }

    /// The next `@@` line, without the prefix.
    fn next(&mut self) -> Result<String, String> {
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

    fn addr(&mut self) -> Result<String, String> {
        let line = self.next()?;
        line.strip_prefix("addr ")
            .map(str::to_owned)
            .ok_or_else(|| format!("the {} said {line:?}, expected its address", self.role))
    }

    fn tell(&mut self, line: &str) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("the {}'s input is closed", self.role))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to the {}: {e}", self.role))
    }

    /// Waits up to `patience` for the process to exit successfully.
    fn finish(mut self, patience: Duration) -> Result<(), String> {
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

impl Drop for Peer {
    fn drop(&mut self) {
        // Ends this peer (only this child, by its pid) if it is still
        // running: after an error, or when `finish` gave up.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The arguments of a peer of `variant` running `jobs` on `cpu`.
fn peer_args(sub: &str, variant: Variant, jobs: &[Job], cpu: usize) -> Vec<String> {
    let jobs: Vec<String> = jobs.iter().map(Job::to_string).collect();
    vec![
        sub.to_owned(),
        "--variant".to_owned(),
        variant.name().to_owned(),
        "--jobs".to_owned(),
        jobs.join(","),
        "--cpu".to_owned(),
        cpu.to_string(),
        "--with-parent".to_owned(),
        std::process::id().to_string(),
    ]
}

/// Runs `jobs` of `variant` in a new pair of peer processes, handing each
/// row to `on_row` as it arrives; the rows, in job order.
pub(crate) fn run_pair(
    variant: Variant,
    jobs: &[Job],
    at: Placement,
    mut on_row: impl FnMut(&Row),
) -> Result<Vec<Row>, String> {
    let mut server = Peer::start("server", &peer_args("serve", variant, jobs, at.server))?;
    let server_addr = server.addr()?;
    let mut args = peer_args("client", variant, jobs, at.client);
    args.extend(["--addr".to_owned(), server_addr]);
    let mut client = Peer::start("client", &args)?;
    let client_addr = client.addr()?;
    server.tell(&client_addr)?;
    let mut rows = Vec::with_capacity(jobs.len());
    loop {
        let line = client.next()?;
        if line == "done" {
            break;
        }
        let json = line
            .strip_prefix("row ")
            .ok_or_else(|| format!("the client said {line:?}, expected a row"))?;
        let row: Row =
            serde_json::from_str(json).map_err(|e| format!("the client's row {json:?}: {e}"))?;
        on_row(&row);
        rows.push(row);
    }
    // The server exits once it has the client's bye; then the client is
    // released (its input closed) and exits too.
    server.finish(Duration::from_secs(10))?;
    client.finish(Duration::from_secs(10))?;
    Ok(rows)
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
