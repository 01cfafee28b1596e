//! A rig of several hosts behind one switch per rail, for scale-out tests.
//!
//! A [`HostRig`] stands for N hosts, each a network namespace, and one
//! "switch" namespace holding one Linux bridge per rail (`br<r>`). Host
//! `h` has one veth per rail (`r<r>` in the host, `h<h>r<r>` in the
//! switch, a port of `br<r>`), with address `198.19.r.(h+1)/24`
//! (198.18.0.0/15 is reserved for benchmarking; the two-host
//! [`RailRig`](super::rig::RailRig) uses 198.18.x.x). So every host
//! reaches every other on each rail, and the rails are separate networks.
//!
//! Shaping: a token bucket of the given rate on both ends of every veth,
//! the host's egress and the switch's egress toward the host, so each
//! host's link on each rail carries at most the rate each way, however
//! many peers share it (`tbf rate <r>mbit burst <5 ms worth, at least 16
//! KiB> latency 50ms`, as the two-host rig shapes its rails).
//!
//! Names: `psmrail-<pid>-hosts<n>-h<h>` and `...-sw`, unique per process
//! and rig. The prefix and the pid come first as in the two-host rig, so
//! either rig deletes the namespaces of the other's dead processes.
//! IPv6 is off in every namespace, so the rails carry only what a test
//! sends (and ARP). Dropping the rig (also while a test panics) deletes
//! every namespace, which removes the veths and the bridges.
//!
//! Building needs what the two-host rig needs (root, `ip`, `tc`) and
//! bridge support in the kernel: [`HostRig::skip_reason`] says cheaply
//! why not, and [`HostRig::new`] returns `Err(reason)` for the rest.

use std::ffi::OsStr;
use std::fs::File;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use nix::sched::{setns, CloneFlags};

use super::rig::{RailRig, MAX_RAILS};

/// Shared with the two-host rig's namespaces (see the module doc).
const PREFIX: &str = "psmrail-";
const NETNS_DIR: &str = "/run/netns";

/// Host rigs created by this process (part of the namespaces' names).
static RIGS: AtomicUsize = AtomicUsize::new(0);
/// Serializes `ip netns add` in this process (the first one mounts the
/// namespace directory).
static NETNS_ADD: Mutex<()> = Mutex::new(());

/// N host namespaces and a switch namespace with one bridge per rail;
/// removed on drop.
pub(crate) struct HostRig {
    hosts: Vec<String>,
    switch: String,
    rails: usize,
}

impl HostRig {
    /// Why no rig can be built here, if that can be told cheaply (the
    /// two-host rig's reasons: not root, no `ip`).
    pub(crate) fn skip_reason() -> Option<String> {
        RailRig::skip_reason()
    }

    /// `hosts` hosts (at most 253) with `rails` rails each, every veth
    /// end limited to `mbit` Mbit/s.
    pub(crate) fn new(hosts: usize, rails: usize, mbit: u32) -> Result<HostRig, String> {
        if let Some(reason) = HostRig::skip_reason() {
            return Err(reason);
        }
        if !(1..=253).contains(&hosts) || !(1..=MAX_RAILS).contains(&rails) || mbit == 0 {
            return Err(format!(
                "a host rig has 1 to 253 hosts, 1 to {MAX_RAILS} rails and a rate: \
                 not {hosts} hosts, {rails} rails, {mbit} Mbit/s"
            ));
        }
        remove_stale_namespaces();
        let n = RIGS.fetch_add(1, Ordering::Relaxed);
        let base = format!("{PREFIX}{}-hosts{n}", std::process::id());
        let rig = HostRig {
            hosts: (0..hosts).map(|h| format!("{base}-h{h}")).collect(),
            switch: format!("{base}-sw"),
            rails,
        };
        {
            let _one_at_a_time = NETNS_ADD.lock().unwrap_or_else(|e| e.into_inner());
            // From here on, dropping `rig` deletes whatever was created.
            let adds: Vec<String> = rig
                .namespaces()
                .map(|ns| format!("netns add {ns}"))
                .collect();
            run_each("ip", None, &adds)?;
        }
        for ns in rig.namespaces() {
            // Before the links exist, so that `default` applies to them.
            in_ns(ns, disable_ipv6)??;
        }
        let tbf = tbf(mbit);
        let mut switch_links = vec!["link set lo up".to_owned()];
        let mut switch_ports = Vec::new();
        let mut switch_tc = Vec::new();
        for r in 0..rails {
            switch_links.push(format!("link add br{r} type bridge"));
            switch_links.push(format!("link set br{r} up"));
        }
        run_each("ip", Some(&rig.switch), &switch_links)?;
        for h in 0..hosts {
            let mut links = vec!["link set lo up".to_owned()];
            let mut tc = Vec::new();
            for r in 0..rails {
                let port = port_if(h, r);
                links.push(format!(
                    "link add r{r} type veth peer name {port} netns {}",
                    rig.switch
                ));
                links.push(format!("addr add {}/24 dev r{r}", rig.ip(h, r)));
                links.push(format!("link set r{r} up"));
                tc.push(format!("qdisc replace dev r{r} root {tbf}"));
                switch_ports.push(format!("link set {port} master br{r}"));
                switch_ports.push(format!("link set {port} up"));
                switch_tc.push(format!("qdisc replace dev {port} root {tbf}"));
            }
            run_each("ip", Some(&rig.hosts[h]), &links)?;
            run_each("tc", Some(&rig.hosts[h]), &tc)?;
        }
        run_each("ip", Some(&rig.switch), &switch_ports)?;
        run_each("tc", Some(&rig.switch), &switch_tc)?;
        Ok(rig)
    }

    /// The number of hosts.
    pub(crate) fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// The number of rails.
    pub(crate) fn rails(&self) -> usize {
        self.rails
    }

    /// Host `h`'s namespace.
    pub(crate) fn host_ns(&self, h: usize) -> &str {
        &self.hosts[h]
    }

    /// The switch's namespace (the bridges and the hosts' ports).
    pub(crate) fn switch_ns(&self) -> &str {
        &self.switch
    }

    /// Every host's interface on rail `r` (in its own namespace).
    pub(crate) fn host_if(&self, r: usize) -> String {
        assert!(r < self.rails, "rail {r} of {}", self.rails);
        format!("r{r}")
    }

    /// Host `h`'s address on rail `r`: 198.19.r.(h+1).
    pub(crate) fn ip(&self, h: usize, r: usize) -> Ipv4Addr {
        assert!(h < self.hosts(), "host {h} of {}", self.hosts());
        assert!(r < self.rails, "rail {r} of {}", self.rails);
        Ipv4Addr::new(198, 19, r as u8, h as u8 + 1)
    }

    /// `FI_OFI_MRAIL_ADDR` for host `h`: its rail addresses, in rail
    /// order.
    pub(crate) fn mrail_addr(&self, h: usize) -> String {
        let ips: Vec<String> = (0..self.rails).map(|r| self.ip(h, r).to_string()).collect();
        ips.join(",")
    }

    /// `program` run inside namespace `ns` (`ip netns exec <ns> program`).
    pub(crate) fn command_in(&self, ns: &str, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(program);
        cmd
    }

    /// Runs `f` on a thread inside namespace `ns` (sockets it opens stay
    /// in that namespace).
    pub(crate) fn run_in<T: Send>(
        &self,
        ns: &str,
        f: impl FnOnce() -> T + Send,
    ) -> Result<T, String> {
        in_ns(ns, f)
    }

    fn namespaces(&self) -> impl Iterator<Item = &String> {
        self.hosts.iter().chain(std::iter::once(&self.switch))
    }
}

impl Drop for HostRig {
    fn drop(&mut self) {
        let names: Vec<&String> = self.namespaces().collect();
        delete_namespaces(&names);
    }
}

/// Host `h`'s port on rail `r`'s bridge (in the switch namespace).
fn port_if(h: usize, r: usize) -> String {
    format!("h{h}r{r}")
}

/// The `tbf` qdisc for `mbit` Mbit/s: a burst of 5 ms at the rate (at
/// least 16 KiB), a queue of 50 ms.
fn tbf(mbit: u32) -> String {
    let burst = (u64::from(mbit) * 1_000_000 / 8 / 200).max(16 * 1024);
    format!("tbf rate {mbit}mbit burst {burst} latency 50ms")
}

/// Turns IPv6 off in the calling thread's namespace (nothing to do on a
/// kernel without it).
fn disable_ipv6() -> Result<(), String> {
    if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(());
    }
    for conf in ["all", "default"] {
        let path = format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6");
        std::fs::write(&path, "1").map_err(|e| format!("writing {path}: {e}"))?;
    }
    Ok(())
}

/// Runs `f` on a thread that entered namespace `ns`.
fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    let path = format!("{NETNS_DIR}/{ns}");
    std::thread::scope(|s| {
        let entered = s.spawn(move || {
            let file = File::open(&path).map_err(|e| format!("opening {path}: {e}"))?;
            setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns {path}: {e}"))?;
            Ok(f())
        });
        entered
            .join()
            .unwrap_or_else(|_| Err(format!("a thread in {ns} panicked")))
    })
}

/// Runs each of `lines` as `<tool> -n <ns> <line>` (in the root
/// namespace for `None`), stopping at the first failure.
fn run_each(tool: &str, ns: Option<&str>, lines: &[String]) -> Result<(), String> {
    let opts = match ns {
        Some(ns) => vec!["-n", ns],
        None => vec![],
    };
    for line in lines {
        let out = Command::new(tool)
            .args(&opts)
            .args(line.split_whitespace())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {tool}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`{tool} {} {line}` failed ({}): {}",
                opts.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// Deletes namespaces, ignoring errors.
fn delete_namespaces<S: AsRef<str>>(names: &[S]) {
    for name in names {
        let _ = Command::new("ip")
            .args(["netns", "del", name.as_ref()])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Deletes `psmrail-<pid>-...` namespaces (either rig's) whose process is
/// gone: a test killed before its rig dropped leaves them behind.
fn remove_stale_namespaces() {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    let mut stale = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if owner_gone(&name) {
            stale.push(name);
        }
    }
    delete_namespaces(&stale);
}

/// Whether `name` is a rig namespace of a process that no longer exists.
fn owner_gone(name: &str) -> bool {
    let Some((pid, _)) = name.strip_prefix(PREFIX).and_then(|r| r.split_once('-')) else {
        return false;
    };
    pid.parse::<u32>()
        .is_ok_and(|pid| std::fs::metadata(format!("/proc/{pid}")).is_err())
}
