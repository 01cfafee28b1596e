//! Tests of the multi-rail test rig itself (`support::rig`): that each rail
//! is a real, separate link between the two namespaces, that shaping and
//! link state act on the rail they name, that children started in a
//! namespace die with their parent, and that the namespaces go away.
//!
//! The rig needs root; without it every test prints `skipped: <reason>`
//! and passes. TCP runs between two children, an echo server in host B and
//! a client in host A, driven over the peer line protocol:
//! `echo <rail> <bytes> <timeout ms>` makes the client connect from A's
//! address of that rail to B's, send the bytes, read them back, and answer
//! `ok <microseconds>` or `err <reason>`.

mod support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use support::peer::{role, ChildIo, Peer};
use support::rig::{RailRig, RailShape};

const LINE_TIMEOUT: Duration = Duration::from_secs(20);

/// The rig, or `None` after printing why the test is skipped.
fn rig_or_skip(shapes: &[RailShape]) -> Option<RailRig> {
    if let Some(reason) = RailRig::skip_reason() {
        println!("skipped: {reason}");
        return None;
    }
    match RailRig::with_shapes(shapes) {
        Ok(rig) => Some(rig),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

/// The two children of a TCP test: an echo server in B listening on every
/// rail, a client in A.
struct Hosts {
    server: Peer,
    client: Peer,
    /// The server's port on each rail.
    ports: Vec<u16>,
}

impl Hosts {
    fn start(rig: &RailRig, test: &str) -> Hosts {
        let listen = rig.mrail_addr_b();
        let mut server = Peer::spawn_in(rig.b(), test, "echo", &[("RIG_LISTEN", &listen)]);
        let line = server.recv_line(LINE_TIMEOUT);
        let ports = line
            .strip_prefix("ports ")
            .unwrap_or_else(|| panic!("server said {line:?}"))
            .split(',')
            .map(|p| p.parse().expect("port"))
            .collect();
        let client = Peer::spawn_in(rig.a(), test, "client", &[]);
        Hosts {
            server,
            client,
            ports,
        }
    }

    /// Connects over `rail`, echoes `bytes`; the time it took, or why not.
    fn echo(
        &mut self,
        rig: &RailRig,
        rail: usize,
        bytes: usize,
        timeout: Duration,
    ) -> Result<Duration, String> {
        self.client.send_line(&format!(
            "echo {} {} {} {bytes} {}",
            rig.a_ip(rail),
            rig.b_ip(rail),
            self.ports[rail],
            timeout.as_millis()
        ));
        let line = self.client.recv_line(LINE_TIMEOUT);
        if let Some(us) = line.strip_prefix("ok ") {
            Ok(Duration::from_micros(us.parse().expect("micros")))
        } else if let Some(why) = line.strip_prefix("err ") {
            Err(why.to_owned())
        } else {
            panic!("client said {line:?}");
        }
    }

    fn finish(mut self) {
        self.client.send_line("quit");
        self.server.send_line("quit");
        assert!(self.client.wait(LINE_TIMEOUT).success(), "client failed");
        assert!(self.server.wait(LINE_TIMEOUT).success(), "server failed");
    }
}

/// The child's part, by role.
fn child(role: &str) {
    let mut io = ChildIo::new();
    match role {
        "echo" => echo_server(&mut io),
        "client" => client(&mut io),
        "middle" => middle(&mut io),
        "leaf" => leaf(&mut io),
        other => panic!("unknown role {other}"),
    }
}

/// Listens on each address of `RIG_LISTEN`, echoes every connection until
/// the parent says `quit`.
fn echo_server(io: &mut ChildIo) {
    let addrs = std::env::var("RIG_LISTEN").expect("RIG_LISTEN");
    let mut ports = Vec::new();
    for ip in addrs.split(',') {
        let listener = TcpListener::bind((ip, 0)).expect("bind");
        ports.push(
            listener
                .local_addr()
                .expect("local_addr")
                .port()
                .to_string(),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if conn.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
    }
    io.send_line(&format!("ports {}", ports.join(",")));
    while !matches!(io.recv_line().as_str(), "quit" | "") {}
}

/// Runs the parent's `echo` commands until `quit`.
fn client(io: &mut ChildIo) {
    loop {
        let line = io.recv_line();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["echo", src, dst, port, bytes, ms] => {
                let src: Ipv4Addr = src.parse().expect("src");
                let dst = SocketAddrV4::new(dst.parse().expect("dst"), port.parse().expect("port"));
                let timeout = Duration::from_millis(ms.parse().expect("ms"));
                match echo_once(src, dst, bytes.parse().expect("bytes"), timeout) {
                    Ok(took) => io.send_line(&format!("ok {}", took.as_micros())),
                    Err(e) => io.send_line(&format!("err {e}")),
                }
            }
            [] | ["quit"] => return,
            _ => panic!("unknown command {line:?}"),
        }
    }
}

/// Connects from `src` to `dst`, sends `bytes` bytes and reads them back.
fn echo_once(
    src: Ipv4Addr,
    dst: SocketAddrV4,
    bytes: usize,
    timeout: Duration,
) -> std::io::Result<Duration> {
    let start = Instant::now();
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&SocketAddrV4::new(src, 0).into())?;
    socket.connect_timeout(&dst.into(), timeout)?;
    let stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let sent: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let mut back = vec![0u8; bytes];
    let mut writer = stream.try_clone()?;
    let mut reader = stream;
    std::thread::scope(|s| {
        let w = s.spawn(|| writer.write_all(&sent));
        let r = reader.read_exact(&mut back);
        w.join().expect("writer")?;
        r
    })?;
    let took = start.elapsed();
    assert_eq!(back, sent, "echo differs");
    Ok(took)
}

/// Starts a `leaf` in the namespace `RIG_NS`, passes on its report, then
/// waits to be killed.
fn middle(io: &mut ChildIo) {
    let ns = std::env::var("RIG_NS").expect("RIG_NS");
    let test = std::env::var("RIG_TEST").expect("RIG_TEST");
    let mut leaf = Peer::spawn_in(&ns, &test, "leaf", &[]);
    let report = leaf.recv_line(LINE_TIMEOUT);
    io.send_line(&format!("{report} {}", leaf.id()));
    io.recv_line();
}

/// Reports its network namespace, then sleeps: only its parent's death
/// (or the timeout) ends it, not its stdin closing.
fn leaf(io: &mut ChildIo) {
    let ns = std::fs::read_link("/proc/self/ns/net").expect("read /proc/self/ns/net");
    io.send_line(&ns.to_string_lossy());
    std::thread::sleep(Duration::from_secs(30));
}

/// `ip -n <ns> -4 addr` output.
fn ipv4_addrs(ns: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-4", "addr"])
        .output()
        .expect("ip addr");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names of all network namespaces.
fn netns_list() -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn two_rails_each_carry_their_own_traffic() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some(rig) = rig_or_skip(&[RailShape::default(); 2]) else {
        return;
    };
    assert_eq!(rig.rails(), 2);
    let (a_addrs, b_addrs) = (ipv4_addrs(rig.a()), ipv4_addrs(rig.b()));
    for rail in 0..2 {
        let a = format!("inet {}/24", rig.a_ip(rail));
        let b = format!("inet {}/24", rig.b_ip(rail));
        assert!(
            a_addrs.contains(&a) && a_addrs.contains(rig.a_if(rail)),
            "{a_addrs}"
        );
        assert!(
            b_addrs.contains(&b) && b_addrs.contains(rig.b_if(rail)),
            "{b_addrs}"
        );
        assert!(!a_addrs.contains(&b) && !b_addrs.contains(&a));
    }
    for ns in [rig.a(), rig.b()] {
        let out = std::process::Command::new("ip")
            .args(["-n", ns, "-6", "addr"])
            .output()
            .expect("ip -6 addr");
        let v6 = String::from_utf8_lossy(&out.stdout);
        assert!(v6.trim().is_empty(), "IPv6 is disabled in {ns}: {v6}");
    }
    assert_eq!(rig.mrail_addr_a(), "198.18.0.1,198.18.1.1");
    assert_eq!(rig.mrail_addr_b(), "198.18.0.2,198.18.1.2");

    let mut hosts = Hosts::start(&rig, "two_rails_each_carry_their_own_traffic");
    const BYTES: u64 = 64 * 1024;
    for rail in 0..2 {
        let other = 1 - rail;
        let before = [rail, other].map(|r| rig.link_bytes(rig.a(), rig.a_if(r)));
        let before_b = rig.link_bytes(rig.b(), rig.b_if(rail));
        hosts
            .echo(&rig, rail, BYTES as usize, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("echo over rail {rail}: {e}"));
        let after = [rail, other].map(|r| rig.link_bytes(rig.a(), rig.a_if(r)));
        let after_b = rig.link_bytes(rig.b(), rig.b_if(rail));
        assert!(
            after[0].tx - before[0].tx >= BYTES,
            "rail {rail} A sent {after:?} {before:?}"
        );
        assert!(
            after[0].rx - before[0].rx >= BYTES,
            "rail {rail} A got {after:?} {before:?}"
        );
        assert!(
            after_b.rx - before_b.rx >= BYTES,
            "rail {rail} B got {after_b:?}"
        );
        assert!(
            after[1].tx - before[1].tx < 1024 && after[1].rx - before[1].rx < 1024,
            "rail {other} carried rail {rail}'s traffic: {before:?} -> {after:?}"
        );
    }
    hosts.finish();
}

#[test]
fn a_four_rail_rig_is_quick_and_addressed_per_rail() {
    let start = Instant::now();
    let Some(rig) = rig_or_skip(&[RailShape::default(); 4]) else {
        return;
    };
    let built = start.elapsed();
    assert!(RailRig::new(0).is_err());
    assert!(RailRig::new(17).is_err());
    assert!(
        built < Duration::from_secs(1),
        "a 4-rail rig took {built:?}"
    );
    let a_addrs = ipv4_addrs(rig.a());
    for rail in 0..4 {
        assert_eq!(rig.a_ip(rail), Ipv4Addr::new(198, 18, rail as u8, 1));
        assert_eq!(rig.b_ip(rail), Ipv4Addr::new(198, 18, rail as u8, 2));
        assert!(
            a_addrs.contains(&format!("inet 198.18.{rail}.1/24")),
            "{a_addrs}"
        );
    }
    assert_eq!(
        rig.mrail_addr_a(),
        "198.18.0.1,198.18.1.1,198.18.2.1,198.18.3.1"
    );
    let out = rig
        .command_in(rig.b(), "cat")
        .arg("/proc/net/dev")
        .output()
        .expect("cat in B");
    let dev = String::from_utf8_lossy(&out.stdout);
    assert!(dev.contains("rail3b:") && !dev.contains("rail3a:"), "{dev}");
    let start = Instant::now();
    drop(rig);
    println!(
        "4-rail rig: built in {built:?}, removed in {:?}",
        start.elapsed()
    );
}

#[test]
fn dropping_the_rig_removes_its_namespaces() {
    let Some(rig) = rig_or_skip(&[RailShape::default()]) else {
        return;
    };
    let names = [rig.a().to_owned(), rig.b().to_owned()];
    let list = netns_list();
    assert!(names.iter().all(|n| list.contains(n.as_str())), "{list}");
    drop(rig);
    let list = netns_list();
    assert!(!names.iter().any(|n| list.contains(n.as_str())), "{list}");

    // A panicking test drops its rig while unwinding.
    let names = std::sync::Mutex::new(Vec::new());
    let unwound = std::panic::catch_unwind(|| {
        let rig = RailRig::new(1).expect("rig");
        names
            .lock()
            .unwrap()
            .extend([rig.a().to_owned(), rig.b().to_owned()]);
        panic!("deliberate panic, to drop the rig while unwinding");
    });
    assert!(unwound.is_err());
    let list = netns_list();
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 2);
    assert!(!names.iter().any(|n| list.contains(n.as_str())), "{list}");

    // A namespace left by a process that is gone is removed by the next rig
    // (no pid is above the kernel's limit of 2^22).
    let stale = "psmrail-4194305-0-a";
    let out = std::process::Command::new("ip")
        .args(["netns", "add", stale])
        .output()
        .expect("ip netns add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(RailRig::new(1).expect("rig"));
    assert!(!netns_list().contains(stale), "{}", netns_list());
}

#[test]
fn shaped_rails_are_slower() {
    if let Some(r) = role() {
        return child(&r);
    }
    let delay = Duration::from_millis(20);
    let shapes = [
        RailShape::default(),
        RailShape::delay(delay),
        // Rate and delay together.
        RailShape {
            delay: Some(Duration::from_millis(5)),
            ..RailShape::rate(20)
        },
        RailShape {
            delay: Some(Duration::from_millis(10)),
            jitter: Some(Duration::from_millis(5)),
            ..RailShape::default()
        },
    ];
    let Some(rig) = rig_or_skip(&shapes) else {
        return;
    };
    let mut hosts = Hosts::start(&rig, "shaped_rails_are_slower");
    let timeout = Duration::from_secs(5);
    // Warm up ARP on every rail, so the timings below are TCP's alone.
    for rail in 0..4 {
        hosts.echo(&rig, rail, 16, timeout).expect("warm-up echo");
    }
    let plain = hosts.echo(&rig, 0, 16, timeout).expect("echo over rail 0");
    let delayed = hosts.echo(&rig, 1, 16, timeout).expect("echo over rail 1");
    // Connect and echo are two round trips, each delayed twice.
    assert!(plain < delay, "unshaped rail: {plain:?}");
    assert!(delayed >= delay, "delayed rail: {delayed:?}");
    assert!(
        delayed < Duration::from_secs(1),
        "delayed rail: {delayed:?}"
    );
    // Four one-way trips of 5 to 15 ms each.
    let jittery = hosts.echo(&rig, 3, 16, timeout).expect("echo over rail 3");
    assert!(jittery >= delay, "jittery rail: {jittery:?}");
    assert!(
        jittery < Duration::from_secs(1),
        "jittery rail: {jittery:?}"
    );

    // 1 MB each way at 20 Mbit/s takes at least 0.4 s (the delay adds
    // little: a 20 ms round trip holds 50 kB at that rate).
    const MB: usize = 1_000_000;
    let rated = hosts.echo(&rig, 2, MB, timeout).expect("echo over rail 2");
    let unrated = hosts.echo(&rig, 0, MB, timeout).expect("echo over rail 0");
    assert!(rated >= Duration::from_millis(300), "rated rail: {rated:?}");
    assert!(rated < Duration::from_secs(3), "rated rail: {rated:?}");
    assert!(unrated < rated, "unshaped {unrated:?}, rated {rated:?}");
    println!(
        "echo: plain {plain:?}, delayed {delayed:?}, 1 MB rated {rated:?}, unrated {unrated:?}"
    );

    // The delay can be changed while the rig runs.
    rig.set_delay(0, Some(Duration::from_millis(30)));
    let slowed = hosts
        .echo(&rig, 0, 16, timeout)
        .expect("echo over slowed rail 0");
    assert!(
        slowed >= Duration::from_millis(30),
        "slowed rail 0: {slowed:?}"
    );
    rig.set_delay(0, None);
    rig.set_delay(1, None);
    for rail in [0, 1] {
        let t = hosts
            .echo(&rig, rail, 16, timeout)
            .expect("echo after removing the delay");
        assert!(t < delay, "rail {rail} without delay: {t:?}");
    }
    hosts.finish();
}

#[test]
fn a_rail_that_is_down_carries_nothing() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some(rig) = rig_or_skip(&[RailShape::default(); 2]) else {
        return;
    };
    let mut hosts = Hosts::start(&rig, "a_rail_that_is_down_carries_nothing");
    let timeout = Duration::from_secs(2);
    hosts.echo(&rig, 0, 16, timeout).expect("echo before");
    rig.link_down(0);
    let start = Instant::now();
    let down = hosts.echo(&rig, 0, 16, timeout);
    assert!(down.is_err(), "echo over a rail that is down: {down:?}");
    assert!(start.elapsed() < Duration::from_secs(4));
    hosts
        .echo(&rig, 1, 16, timeout)
        .expect("the other rail still works");
    rig.link_up(0);
    hosts
        .echo(&rig, 0, 16, timeout)
        .expect("echo after link_up");
    hosts.finish();
}

#[test]
fn a_child_in_a_namespace_dies_with_its_parent() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some(rig) = rig_or_skip(&[RailShape::default()]) else {
        return;
    };
    let test = "a_child_in_a_namespace_dies_with_its_parent";
    let mut middle = Peer::spawn(test, "middle", &[("RIG_NS", rig.b()), ("RIG_TEST", test)]);
    let line = middle.recv_line(LINE_TIMEOUT);
    let (ns, pid) = line.rsplit_once(' ').expect("report");
    let pid: u32 = pid.parse().expect("pid");
    // The leaf runs in B.
    let b_ino = std::fs::metadata(format!("/run/netns/{}", rig.b()))
        .expect("B's namespace file")
        .ino();
    assert_eq!(ns, format!("net:[{b_ino}]"));
    assert!(alive(pid), "leaf {pid} not running");
    middle.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(Instant::now() < deadline, "leaf {pid} outlived its parent");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
