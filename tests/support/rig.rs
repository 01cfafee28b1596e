//! The multi-rail test rig: two network namespaces joined by one veth pair
//! per rail.
//!
//! A [`RailRig`] stands for two hosts, A and B, each a network namespace,
//! and N rails between them, each a veth pair whose ends live in A and B.
//! Rail `i` is `198.18.i.1/24` in A and `198.18.i.2/24` in B (198.18.0.0/15
//! is reserved for benchmarking; the namespaces isolate every rig, so all
//! rigs reuse the same addresses). Multi-rail tests run one peer in each
//! namespace ([`Peer::spawn_in`](super::peer::Peer::spawn_in)) and give it
//! [`RailRig::mrail_addr_a`] or [`RailRig::mrail_addr_b`] as
//! `FI_OFI_MRAIL_ADDR`, so each rail's traffic really travels on its own
//! link, which can be slowed, delayed or cut ([`RailShape`],
//! [`RailRig::set_delay`], [`RailRig::link_down`]).
//!
//! Building a rig needs root and the `ip` command (iproute2); shaping also
//! needs `tc`. [`RailRig::skip_reason`] says cheaply why a rig cannot be
//! built here, and the constructors return `Err(reason)` for anything else
//! (namespaces not permitted, for instance), so tests print
//! `skipped: <reason>` and return.
//!
//! Names: the namespaces are `psmrail-<pid>-<n>-a` and `...-b`, unique per
//! process and rig; the veths are created directly inside them
//! (`rail<i>a` in A, `rail<i>b` in B), so interface names never meet in the
//! root namespace. IPv6 is disabled in both namespaces, so a rail carries
//! only what a test sends on it (and ARP). Dropping the rig (also while a
//! test panics) deletes both namespaces, which removes the veths; a new rig
//! first deletes `psmrail-` namespaces left by processes that no longer
//! exist.
//!
//! Shaping, per rail, on both ends of its veth pair:
//! - a rate is a token bucket on the veth's egress:
//!   `tc qdisc replace dev <if> root tbf rate <r>mbit burst <b> latency 50ms`
//!   with `b` = 5 ms worth of the rate, at least 16 KiB (a TCP stream then
//!   gets about 95% of the rate, all that is left after headers);
//! - a delay is a delay line on the veth's ingress. This kernel has no
//!   `netem` qdisc, so the rig redirects every arriving IPv4 packet to a
//!   TUN device in the same namespace
//!   (`tc qdisc add dev <if> clsact`,
//!   `tc filter add dev <if> ingress protocol ip pref 1 u32 match u32 0 0
//!   action mirred egress redirect dev dl<i>`), and a thread of the test
//!   process holds each packet for the delay (plus a uniform jitter in
//!   `±jitter`, never reordering) before writing it back into that TUN
//!   device, from where the namespace's stack receives it. Both directions
//!   are delayed, so a round trip takes twice the delay, as with netem on
//!   both ends. With a rate too, packets are rate-limited when they leave
//!   and delayed when they arrive, like netem chained under tbf. ARP is not
//!   delayed.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::{setns, CloneFlags};

/// The most rails a rig has (rail `i` uses 198.18.i.0/24).
pub(crate) const MAX_RAILS: usize = 16;

/// Prefix of every rig namespace's name.
const PREFIX: &str = "psmrail-";
/// Where `ip netns` keeps the namespaces' names.
const NETNS_DIR: &str = "/run/netns";
/// The token bucket's queue limit, as time at the rate.
const TBF_LATENCY: &str = "50ms";
/// The token bucket's burst, as time at the rate...
const TBF_BURST: Duration = Duration::from_millis(5);
/// ... and at least this many bytes (several full frames).
const TBF_MIN_BURST: u64 = 16 * 1024;

/// Rigs created by this process (part of the namespaces' names).
static RIGS: AtomicUsize = AtomicUsize::new(0);
/// Serializes `ip netns add` in this process (the first one mounts the
/// namespace directory).
static NETNS_ADD: Mutex<()> = Mutex::new(());

/// How one rail's link behaves; the default is an unshaped veth pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RailShape {
    /// Rate limit in Mbit/s, each direction.
    pub rate_mbit: Option<u32>,
    /// One-way delay, each direction.
    pub delay: Option<Duration>,
    /// Each packet's delay varies uniformly within `±jitter` around
    /// `delay` (packets keep their order); used only with a delay.
    pub jitter: Option<Duration>,
}

impl RailShape {
    /// A rail limited to `mbit` Mbit/s each way.
    pub(crate) fn rate(mbit: u32) -> RailShape {
        RailShape {
            rate_mbit: Some(mbit),
            ..RailShape::default()
        }
    }

    /// A rail delaying each direction by `delay`.
    pub(crate) fn delay(delay: Duration) -> RailShape {
        RailShape {
            delay: Some(delay),
            ..RailShape::default()
        }
    }
}

/// Byte counters of one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkBytes {
    /// Bytes received.
    pub rx: u64,
    /// Bytes sent.
    pub tx: u64,
}

/// Two namespaces ("hosts" A and B) joined by one veth pair per rail;
/// removed on drop.
pub(crate) struct RailRig {
    a: String,
    b: String,
    a_ifs: Vec<String>,
    b_ifs: Vec<String>,
    delays: Mutex<Delays>,
}

/// The delay lines' state.
struct Delays {
    /// Each rail's delay and jitter, shared with the line's thread.
    shapes: Arc<Mutex<Vec<LineShape>>>,
    /// Whether each rail's veths redirect to the delay line.
    attached: Vec<bool>,
    /// The thread, started with the first delay.
    line: Option<DelayLine>,
}

#[derive(Clone, Copy, Debug, Default)]
struct LineShape {
    delay: Duration,
    jitter: Duration,
}

impl RailRig {
    /// Why no rig can be built here, if that can be told cheaply: not
    /// root, or no `ip` command.
    pub(crate) fn skip_reason() -> Option<String> {
        match effective_uid() {
            Some(0) => {}
            Some(uid) => {
                return Some(format!(
                    "not root (euid {uid}): network namespaces need root"
                ))
            }
            None => return Some("cannot read the effective uid from /proc/self/status".into()),
        }
        match Command::new("ip").arg("-V").output() {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!("`ip -V` failed: {}", out.status)),
            Err(e) => Some(format!("no `ip` command (iproute2): {e}")),
        }
    }

    /// A rig of `rails` unshaped rails.
    pub(crate) fn new(rails: usize) -> Result<RailRig, String> {
        RailRig::with_shapes(&vec![RailShape::default(); rails])
    }

    /// A rig with one rail per shape.
    pub(crate) fn with_shapes(shapes: &[RailShape]) -> Result<RailRig, String> {
        if let Some(reason) = RailRig::skip_reason() {
            return Err(reason);
        }
        if shapes.is_empty() || shapes.len() > MAX_RAILS {
            return Err(format!(
                "a rig has 1 to {MAX_RAILS} rails, not {}",
                shapes.len()
            ));
        }
        remove_stale_namespaces();
        let n = RIGS.fetch_add(1, Ordering::Relaxed);
        let base = format!("{PREFIX}{}-{n}", std::process::id());
        let rails = shapes.len();
        let rig = RailRig {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
            a_ifs: (0..rails).map(|i| format!("rail{i}a")).collect(),
            b_ifs: (0..rails).map(|i| format!("rail{i}b")).collect(),
            delays: Mutex::new(Delays {
                shapes: Arc::new(Mutex::new(vec![LineShape::default(); rails])),
                attached: vec![false; rails],
                line: None,
            }),
        };
        {
            let _one_at_a_time = NETNS_ADD.lock().unwrap_or_else(|e| e.into_inner());
            // From here on, dropping `rig` deletes whatever was created.
            run(Command::new("ip").args(["netns", "add", &rig.a]))?;
            run(Command::new("ip").args(["netns", "add", &rig.b]))?;
        }
        for ns in [&rig.a, &rig.b] {
            // Before the veths exist, so that `default` applies to them.
            in_netns(ns, || {
                write_sysctl("ipv6/conf/all/disable_ipv6", "1")?;
                write_sysctl("ipv6/conf/default/disable_ipv6", "1")
            })?
            .or_else(|e| {
                // A kernel without IPv6 has nothing to disable.
                if std::path::Path::new("/proc/sys/net/ipv6").exists() {
                    Err(e)
                } else {
                    Ok(())
                }
            })?;
        }
        let mut a_cmds = vec!["link set lo up".to_owned()];
        let mut b_cmds = vec!["link set lo up".to_owned()];
        for rail in 0..rails {
            let (a_if, b_if) = (rig.a_if(rail), rig.b_if(rail));
            a_cmds.push(format!(
                "link add {a_if} type veth peer name {b_if} netns {}",
                rig.b
            ));
            a_cmds.push(format!("addr add {}/24 dev {a_if}", rig.a_ip(rail)));
            a_cmds.push(format!("link set {a_if} up"));
            b_cmds.push(format!("addr add {}/24 dev {b_if}", rig.b_ip(rail)));
            b_cmds.push(format!("link set {b_if} up"));
        }
        batch("ip", &rig.a, &a_cmds)?;
        batch("ip", &rig.b, &b_cmds)?;

        let mut a_tc = Vec::new();
        let mut b_tc = Vec::new();
        for (rail, shape) in shapes.iter().enumerate() {
            if let Some(mbit) = shape.rate_mbit {
                let tbf = tbf_args(mbit);
                a_tc.push(format!("qdisc replace dev {} root {tbf}", rig.a_if(rail)));
                b_tc.push(format!("qdisc replace dev {} root {tbf}", rig.b_if(rail)));
            }
        }
        if !a_tc.is_empty() {
            batch("tc", &rig.a, &a_tc)?;
            batch("tc", &rig.b, &b_tc)?;
        }
        for (rail, shape) in shapes.iter().enumerate() {
            if let Some(delay) = shape.delay {
                rig.try_set_delay(rail, Some(delay), shape.jitter.unwrap_or_default())?;
            }
        }
        Ok(rig)
    }

    /// The number of rails.
    pub(crate) fn rails(&self) -> usize {
        self.a_ifs.len()
    }

    /// Host A's namespace.
    pub(crate) fn a(&self) -> &str {
        &self.a
    }

    /// Host B's namespace.
    pub(crate) fn b(&self) -> &str {
        &self.b
    }

    /// Rail `rail`'s address in A: 198.18.rail.1.
    pub(crate) fn a_ip(&self, rail: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.rail_octet(rail), 1)
    }

    /// Rail `rail`'s address in B: 198.18.rail.2.
    pub(crate) fn b_ip(&self, rail: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.rail_octet(rail), 2)
    }

    /// Rail `rail`'s interface in A.
    pub(crate) fn a_if(&self, rail: usize) -> &str {
        &self.a_ifs[rail]
    }

    /// Rail `rail`'s interface in B.
    pub(crate) fn b_if(&self, rail: usize) -> &str {
        &self.b_ifs[rail]
    }

    /// `FI_OFI_MRAIL_ADDR` for host A: its rail addresses, in rail order.
    pub(crate) fn mrail_addr_a(&self) -> String {
        self.join_ips(|r| self.a_ip(r))
    }

    /// `FI_OFI_MRAIL_ADDR` for host B: its rail addresses, in rail order.
    pub(crate) fn mrail_addr_b(&self) -> String {
        self.join_ips(|r| self.b_ip(r))
    }

    /// `program` run inside namespace `ns` (`ip netns exec <ns> program`).
    pub(crate) fn command_in(&self, ns: &str, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(program);
        cmd
    }

    /// The byte counters of interface `ifname` in namespace `ns`.
    pub(crate) fn link_bytes(&self, ns: &str, ifname: &str) -> LinkBytes {
        let stat = |name: &str| format!("/sys/class/net/{ifname}/statistics/{name}");
        let out = self
            .command_in(ns, "cat")
            .args([stat("rx_bytes"), stat("tx_bytes")])
            .output()
            .expect("run cat in the namespace");
        assert!(
            out.status.success(),
            "reading the counters of {ifname} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut n = text
            .lines()
            .map(|l| l.trim().parse::<u64>().expect("counter"));
        LinkBytes {
            rx: n.next().expect("rx_bytes"),
            tx: n.next().expect("tx_bytes"),
        }
    }

    /// Sets (or, with `None`, removes) rail `rail`'s one-way delay, each
    /// direction, keeping its jitter; packets already held keep theirs.
    pub(crate) fn set_delay(&self, rail: usize, delay: Option<Duration>) {
        let jitter = self.lock_delays().shapes.lock().unwrap()[rail].jitter;
        if let Err(e) = self.try_set_delay(rail, delay, jitter) {
            panic!("setting rail {rail}'s delay: {e}");
        }
    }

    /// Takes rail `rail` down (A's end, so B's loses its carrier too).
    pub(crate) fn link_down(&self, rail: usize) {
        self.set_link(rail, "down");
    }

    /// Brings rail `rail` back up.
    pub(crate) fn link_up(&self, rail: usize) {
        self.set_link(rail, "up");
    }

    fn set_link(&self, rail: usize, state: &str) {
        let a_if = self.a_if(rail);
        if let Err(e) = run(Command::new("ip").args(["-n", &self.a, "link", "set", a_if, state])) {
            panic!("setting rail {rail} {state}: {e}");
        }
    }

    fn rail_octet(&self, rail: usize) -> u8 {
        assert!(rail < self.rails(), "rail {rail} of {}", self.rails());
        rail as u8
    }

    fn join_ips(&self, ip: impl Fn(usize) -> Ipv4Addr) -> String {
        let ips: Vec<String> = (0..self.rails()).map(|r| ip(r).to_string()).collect();
        ips.join(",")
    }

    fn lock_delays(&self) -> std::sync::MutexGuard<'_, Delays> {
        self.delays.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_set_delay(
        &self,
        rail: usize,
        delay: Option<Duration>,
        jitter: Duration,
    ) -> Result<(), String> {
        assert!(rail < self.rails(), "rail {rail} of {}", self.rails());
        let mut delays = self.lock_delays();
        delays.shapes.lock().unwrap()[rail] = LineShape {
            delay: delay.unwrap_or_default(),
            jitter,
        };
        let (a_if, b_if) = (self.a_if(rail), self.b_if(rail));
        match (delay.is_some(), delays.attached[rail]) {
            (true, false) => {
                if delays.line.is_none() {
                    delays.line = Some(DelayLine::start(self, Arc::clone(&delays.shapes))?);
                }
                for (ns, ifname) in [(&self.a, a_if), (&self.b, b_if)] {
                    batch(
                        "tc",
                        ns,
                        &[
                            format!("qdisc add dev {ifname} clsact"),
                            format!(
                                "filter add dev {ifname} ingress protocol ip pref 1 u32 \
                                 match u32 0 0 action mirred egress redirect dev {}",
                                line_if(rail)
                            ),
                        ],
                    )?;
                }
                delays.attached[rail] = true;
            }
            (false, true) => {
                for (ns, ifname) in [(&self.a, a_if), (&self.b, b_if)] {
                    batch("tc", ns, &[format!("qdisc del dev {ifname} clsact")])?;
                }
                delays.attached[rail] = false;
            }
            _ => {}
        }
        Ok(())
    }
}

impl Drop for RailRig {
    fn drop(&mut self) {
        if let Some(line) = self.lock_delays().line.take() {
            line.stop();
        }
        delete_namespaces(&[&self.a, &self.b]);
    }
}

/// The `tbf` arguments for `mbit` Mbit/s.
fn tbf_args(mbit: u32) -> String {
    let bytes_per_sec = u64::from(mbit) * 1_000_000 / 8;
    let burst = (bytes_per_sec * TBF_BURST.as_micros() as u64 / 1_000_000).max(TBF_MIN_BURST);
    format!("tbf rate {mbit}mbit burst {burst} latency {TBF_LATENCY}")
}

/// The delay line's TUN device for `rail` (in each namespace).
fn line_if(rail: usize) -> String {
    format!("dl{rail}")
}

/// A thread holding each rail's arriving packets for its delay, then
/// handing them to the namespace's stack through TUN devices.
struct DelayLine {
    /// Dropped to stop the thread (its peer end then polls readable).
    stop: UnixStream,
    thread: JoinHandle<()>,
}

/// One TUN device of the delay line and the packets it holds.
struct Tun {
    rail: usize,
    file: File,
    held: VecDeque<(Instant, Vec<u8>)>,
    /// The last packet's release time (releases never go backwards).
    last: Option<Instant>,
}

impl DelayLine {
    /// Creates a TUN device per rail in both namespaces and starts the
    /// thread; the devices are up when this returns.
    fn start(rig: &RailRig, shapes: Arc<Mutex<Vec<LineShape>>>) -> Result<DelayLine, String> {
        let rails = rig.rails();
        let paths = [netns_path(&rig.a), netns_path(&rig.b)];
        let (stop, stopped) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name("rig-delay-line".into())
            .spawn(move || {
                let mut tuns = Vec::new();
                for path in &paths {
                    if let Err(e) = enter_netns(path).and_then(|()| {
                        // Packets come back in from the TUN device, not the
                        // veth they arrived on.
                        write_sysctl("ipv4/conf/all/rp_filter", "0")?;
                        write_sysctl("ipv4/conf/default/rp_filter", "0")?;
                        for rail in 0..rails {
                            tuns.push(Tun {
                                rail,
                                file: open_tun(&line_if(rail))?,
                                held: VecDeque::new(),
                                last: None,
                            });
                        }
                        Ok(())
                    }) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let _ = ready_tx.send(Ok(()));
                drop(ready_tx);
                run_line(tuns, &shapes, &stopped);
            })
            .map_err(|e| format!("spawning the delay line: {e}"))?;
        let line = DelayLine { stop, thread };
        match ready.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                line.stop();
                return Err(format!("delay line: {e}"));
            }
            Err(_) => {
                line.stop();
                return Err("the delay line's thread died".into());
            }
        }
        let up: Vec<String> = (0..rails)
            .map(|r| format!("link set {} up", line_if(r)))
            .collect();
        batch("ip", &rig.a, &up)?;
        batch("ip", &rig.b, &up)?;
        Ok(line)
    }

    /// Stops the thread and waits for it (closing the TUN devices).
    fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// The delay line's loop: reads arriving packets, writes each back when its
/// time comes; returns when `stopped` polls readable (its peer is gone).
fn run_line(mut tuns: Vec<Tun>, shapes: &Mutex<Vec<LineShape>>, stopped: &UnixStream) {
    let mut rng = Rng::seeded();
    let mut buf = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        let next = tuns
            .iter()
            .filter_map(|t| t.held.front().map(|(at, _)| *at))
            .min();
        let timeout = match next {
            // Rounded up: waking early would only poll again.
            Some(at) => {
                let ms = at.saturating_duration_since(now).as_micros().div_ceil(1000);
                PollTimeout::try_from(ms.min(60_000) as i32).expect("timeout in range")
            }
            None => PollTimeout::NONE,
        };
        let mut fds = vec![PollFd::new(stopped.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            tuns.iter()
                .map(|t| PollFd::new(t.file.as_fd(), PollFlags::POLLIN)),
        );
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => panic!("delay line: poll: {e}"),
        }
        if fds[0].any().unwrap_or(true) {
            return;
        }
        let events: Vec<PollFlags> = fds[1..]
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::empty()))
            .collect();
        drop(fds);
        let now = Instant::now();
        let current = shapes.lock().unwrap().clone();
        let mut gone = Vec::new();
        for (i, (tun, ev)) in tuns.iter_mut().zip(&events).enumerate() {
            if ev.intersects(PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL) {
                gone.push(i);
                continue;
            }
            if !ev.contains(PollFlags::POLLIN) {
                continue;
            }
            loop {
                let n = match tun.file.read(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let shape = current[tun.rail];
                let mut at = now + shape.delay;
                if !shape.jitter.is_zero() {
                    let span = shape.jitter.as_nanos() as u64;
                    let offset = rng.below(2 * span + 1);
                    at = (at + Duration::from_nanos(offset))
                        .checked_sub(shape.jitter)
                        .unwrap_or(now)
                        .max(now);
                }
                if let Some(last) = tun.last {
                    at = at.max(last);
                }
                tun.last = Some(at);
                tun.held.push_back((at, buf[..n].to_vec()));
            }
        }
        for i in gone.into_iter().rev() {
            tuns.swap_remove(i);
        }
        let now = Instant::now();
        for tun in &mut tuns {
            while tun.held.front().is_some_and(|(at, _)| *at <= now) {
                let (_, packet) = tun.held.pop_front().expect("front");
                // A full device or a device going down drops the packet,
                // as a link would.
                let _ = tun.file.write(&packet);
            }
        }
    }
}

/// A small xorshift generator for the jitter (no need for quality).
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(nanos | 1)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `struct ifreq` as `TUNSETIFF` reads it: the name, then the flags, then
/// the rest of the union.
#[repr(C)]
struct TunRequest {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    rest: [u8; 22],
}

const _: () = assert!(std::mem::size_of::<TunRequest>() == std::mem::size_of::<libc::ifreq>());

/// Creates TUN device `name` (IPv4 packets without a header) in the calling
/// thread's namespace; it goes away when the file is closed.
fn open_tun(name: &str) -> Result<File, String> {
    let file = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| format!("opening /dev/net/tun: {e}"))?;
    let mut req = TunRequest {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        rest: [0; 22],
    };
    assert!(
        name.len() < libc::IFNAMSIZ,
        "interface name {name:?} too long"
    );
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `req` is a fully initialized value with the size and layout
    // of `struct ifreq` (checked above), valid for the whole call; the
    // kernel reads and writes only within it, and the descriptor is open.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    if rc < 0 {
        return Err(format!(
            "creating TUN device {name}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(file)
}

/// The file `ip netns` keeps for namespace `ns`.
fn netns_path(ns: &str) -> String {
    format!("{NETNS_DIR}/{ns}")
}

/// Moves the calling thread into the namespace at `path`.
fn enter_netns(path: &str) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("opening {path}: {e}"))?;
    setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns {path}: {e}"))
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    let path = netns_path(ns);
    std::thread::scope(|s| {
        s.spawn(move || enter_netns(&path).map(|()| f()))
            .join()
            .map_err(|_| format!("a thread in {ns} panicked"))?
    })
}

/// Writes `/proc/sys/net/<key>` for the calling thread's namespace.
fn write_sysctl(key: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/net/{key}");
    std::fs::write(&path, value).map_err(|e| format!("writing {path}: {e}"))
}

/// Runs `cmd`; its stderr is the error.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `lines` as one `ip` or `tc` batch in namespace `ns`.
fn batch(tool: &str, ns: &str, lines: &[String]) -> Result<(), String> {
    let mut child = Command::new(tool)
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {tool}: {e}"))?;
    let mut input = lines.join("\n");
    input.push('\n');
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .map_err(|e| format!("writing to {tool}: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for {tool}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{tool} -n {ns} failed ({}) on:\n{input}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes namespaces, ignoring errors.
fn delete_namespaces(names: &[&str]) {
    if names.is_empty() {
        return;
    }
    let lines: Vec<String> = names.iter().map(|n| format!("netns del {n}")).collect();
    let child = Command::new("ip")
        .args(["-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Ok(mut child) = child {
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all((lines.join("\n") + "\n").as_bytes());
        }
        let _ = child.wait();
    }
}

/// Deletes `psmrail-<pid>-...` namespaces whose process is gone (best
/// effort: a test killed before its rig dropped leaves them behind).
fn remove_stale_namespaces() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    let stale: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            let pid = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok());
            pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    let names: Vec<&str> = stale.iter().map(String::as_str).collect();
    delete_namespaces(&names);
}

/// This process's effective uid (from `/proc/self/status`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
