//! What the program tests of the C face share: the provider libraries
//! cargo built, the distribution's programs, the engine a run uses, and
//! children waited for with a bound.
//!
//! A missing library or program skips a test with a line saying why,
//! unless the test's requirement variable is `1` (set in CI), which makes
//! it a failure.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

// The same lock as psmrail's own spinning tests, so none of them run at once.
#[path = "../../../tests/support/spin_lock.rs"]
mod spin_lock;
pub(crate) use spin_lock::spin_lock;

/// Whether the native engine must run (`PSMRAIL_REQUIRE_NATIVE=1`, as for
/// the other native tests).
pub(crate) fn require_native() -> bool {
    std::env::var("PSMRAIL_REQUIRE_NATIVE").is_ok_and(|v| v == "1")
}

/// The variable that turns a missing part into a failure.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Required(pub(crate) &'static str);

/// Fabtests and the distribution's libfabric programs.
pub(crate) const FABTESTS: Required = Required("PSMRAIL_REQUIRE_FABTESTS");
/// Open MPI's compiler wrapper and launcher.
pub(crate) const MPI: Required = Required("PSMRAIL_REQUIRE_MPI");

impl Required {
    fn on(self) -> bool {
        std::env::var(self.0).is_ok_and(|v| v == "1")
    }

    /// Skips (returns `None`) or, when required, fails.
    pub(crate) fn missing(self, what: &str) -> Option<()> {
        if self.on() {
            panic!("{what} ({}=1)", self.0);
        }
        eprintln!("skipped: {what}");
        None
    }

    /// The folder holding libpsmrail_psm_fi.so and libpsmrail_mrail_fi.so:
    /// the target profile folder this test binary was built into.
    pub(crate) fn provider_dir(self) -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let dir = exe.parent()?.parent()?.to_path_buf();
        let ok = ["libpsmrail_psm_fi.so", "libpsmrail_mrail_fi.so"]
            .iter()
            .all(|f| dir.join(f).is_file());
        if ok {
            Some(dir)
        } else {
            self.missing(&format!(
                "the provider libraries are not in {} (cargo build -p psmrail-fi-psm -p psmrail-fi-mrail)",
                dir.display()
            ))?;
            None
        }
    }

    /// A program of the distribution on PATH, from the Debian `package`.
    pub(crate) fn tool(self, name: &str, package: &str) -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        for d in std::env::split_paths(&path) {
            let p = d.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
        self.missing(&format!(
            "{name} is not installed (apt-get install {package})"
        ))?;
        None
    }
}

/// The engine settings of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    Soft,
    Native,
}

/// `cmd` with the provider path and the engine set.
pub(crate) fn with_env(mut cmd: Command, dir: &Path, engine: Engine) -> Command {
    cmd.env("FI_PROVIDER_PATH", dir)
        .env(
            "PSMRAIL_ENGINE",
            match engine {
                Engine::Soft => "soft",
                Engine::Native => "native",
            },
        )
        .env("PSM2_DEVICES", "self,shm")
        .env_remove("FI_PROVIDER")
        // Its own process group, so that a kill reaches what it started
        // (mpirun's ranks) too.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Kills `child` and the process group it leads (see [`with_env`]).
fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) of the group our own child leads; nothing else is
    // in it.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.kill();
}

/// A child that is killed, with its process group, if the test lets go
/// of it (a test that panics leaves no process behind).
pub(crate) struct Reaped(Option<Child>);

impl Reaped {
    pub(crate) fn new(child: Child) -> Reaped {
        Reaped(Some(child))
    }

    pub(crate) fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child, for [`wait_bounded`].
    pub(crate) fn take(mut self) -> Child {
        self.0.take().expect("a Reaped holds its child until taken")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            kill_group(&mut c);
            let _ = c.wait();
        }
    }
}

/// Waits for `child` at most `limit`; kills it (and its process group)
/// after that.
pub(crate) fn wait_bounded(mut child: Child, limit: Duration, who: &str) -> Output {
    let deadline = Instant::now() + limit;
    // Read the pipes on threads so a chatty child cannot block on them.
    let mut out = child.stdout.take().expect("stdout is piped");
    let mut err = child.stderr.take().expect("stderr is piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        match child.try_wait().expect("try_wait") {
            Some(s) => break s,
            None if Instant::now() >= deadline => {
                kill_group(&mut child);
                let s = child.wait().expect("wait after kill");
                let stdout = t_out.join().unwrap_or_default();
                let stderr = t_err.join().unwrap_or_default();
                panic!(
                    "{who} did not finish within {limit:?}; it was killed ({s}).\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

pub(crate) fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `program args` as a server, then as a client of 127.0.0.1 with
/// `client_args` added; both must exit 0. Returns the client's output.
pub(crate) fn pair(
    program: &Path,
    args: &[&str],
    server_args: &[&str],
    client_args: &[&str],
    dir: &Path,
    engine: Engine,
    extra_env: &[(&str, &str)],
) -> (Output, Output) {
    let start = Duration::from_millis(800);
    pair_after(
        start,
        program,
        args,
        server_args,
        client_args,
        dir,
        engine,
        extra_env,
    )
}

/// [`pair`] whose client starts `start` after the server (a server under
/// valgrind takes seconds to listen).
#[allow(clippy::too_many_arguments)]
pub(crate) fn pair_after(
    start: Duration,
    program: &Path,
    args: &[&str],
    server_args: &[&str],
    client_args: &[&str],
    dir: &Path,
    engine: Engine,
    extra_env: &[(&str, &str)],
) -> (Output, Output) {
    let mk = |_: Side, more: &[&str]| {
        let mut c = with_env(Command::new(program), dir, engine);
        c.args(args).args(more);
        for (k, v) in extra_env {
            c.env(k, v);
        }
        c
    };
    run_pair(start, mk, server_args, client_args)
}

/// Which process of a pair a command is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Server,
    Client,
}

/// A server made by `mk(Side::Server, server_args)`, then, `start` later,
/// its client (`mk(Side::Client, client_args)`), tried again while it
/// ends at once; both waited for with a bound, under the spin lock.
pub(crate) fn run_pair(
    start: Duration,
    mk: impl Fn(Side, &[&str]) -> Command,
    server_args: &[&str],
    client_args: &[&str],
) -> (Output, Output) {
    let _lock = spin_lock();
    let limit = Duration::from_secs(90);
    let server = Reaped::new(
        mk(Side::Server, server_args)
            .spawn()
            .expect("spawn the server"),
    );
    let server_pid = server.id();
    // The server opens its listening socket (or registers with its name
    // server) first; a client that comes too early finds nobody and ends
    // at once, so it is tried again while the server waits.
    std::thread::sleep(start);
    let mut tries = 0;
    let client = loop {
        tries += 1;
        let started = Instant::now();
        let c = mk(Side::Client, client_args)
            .spawn()
            .expect("spawn the client");
        let out = wait_bounded(c, limit, "the client");
        let quick = started.elapsed() < Duration::from_secs(3);
        if out.status.success() || !quick || tries == 5 {
            break out;
        }
        std::thread::sleep(Duration::from_millis(700));
    };
    let server = {
        // SAFETY: kill(2) of a child we spawned; 0 only probes it.
        let alive = unsafe { libc::kill(server_pid as i32, 0) } == 0;
        if !client.status.success() && alive {
            // SAFETY: as above: the server waits for a client that failed.
            unsafe { libc::kill(server_pid as i32, libc::SIGKILL) };
        }
        wait_bounded(server.take(), limit, "the server")
    };
    (server, client)
}

pub(crate) fn assert_pair(what: &str, (server, client): (Output, Output)) -> String {
    assert!(
        server.status.success() && client.status.success(),
        "{what}: server and client must both succeed\n--- server {}\n--- client {}",
        text(&server),
        text(&client)
    );
    String::from_utf8_lossy(&client.stdout).into_owned()
}
