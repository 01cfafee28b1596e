//! A live peer's link survives its transport being cut: the soft engine
//! reconnects and sends again what the other side had not consumed, so a
//! ping-pong and a 64 MiB transfer complete with every byte right.
//!
//! Two processes: this test and an echo child (the test binary re-executed
//! in role `echo`). The transport is cut from outside the engine while
//! messages are in flight:
//!
//! * **TCP**: `ss -K` destroys both ends of the connection (an abort, as a
//!   middlebox reset or a dead NAT entry would cause; needs root and a
//!   kernel with `CONFIG_INET_DIAG_DESTROY`);
//! * **Unix sockets**: `shutdown(2)` of this process's connected sockets
//!   (both ends read EOF).
//!
//! The same holds with a job secret: each resumption proves it again.
//!
//! A peer whose process is gone is still declared dead at once: the
//! reconnection finds nothing listening (last test).

mod support;
use support::{payload, peer, spin_lock};

use payload::pattern;
use peer::{role, ChildIo, Peer};
use psmrail::config::PsmConfig;
use psmrail::engine::soft::{JobSecret, SoftConfig, SoftEpid};
use psmrail::engine::Epid;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
};
use psmrail::ErrorKind;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The echo child's tag that ends it.
const QUIT: u64 = 0xdead;
/// The largest message.
const BIG: usize = 64 << 20;

struct Side {
    _fabric: Fabric,
    domain: Domain,
    av: AddressVector,
    ep: Endpoint,
}

/// The job secret of the scenarios that use one.
const SECRET: &[u8] = b"link-reset job secret, 32 bytes!";

fn open(tcp: bool, secret: bool) -> Side {
    let config = PsmConfig::builder()
        .delay(Duration::ZERO)
        // The reconnection window (FI_PSM_TIMEOUT).
        .timeout(Duration::from_secs(10))
        .name_server(false)
        .build()
        .expect("config");
    let hints = Hints::new()
        .config(config)
        .engine(EngineChoice::Soft)
        .soft_config(SoftConfig {
            unix_sockets: !tcp,
            job_secret: secret.then(|| JobSecret::new(SECRET.to_vec()).expect("a secret")),
            ..SoftConfig::default()
        });
    let info = getinfo(Some(&hints)).expect("getinfo").remove(0);
    let fabric = Fabric::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let av = domain.av(AvAttr::new()).expect("av");
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .expect("endpoint");
    Side {
        _fabric: fabric,
        domain,
        av,
        ep,
    }
}

/// The child: echoes every tagged message back with its tag until QUIT.
fn echo(tcp: bool, secret: bool) {
    let s = open(tcp, secret);
    let mut io = ChildIo::new();
    io.send_line(&s.ep.getname().0.to_string());
    let parent: u64 = io.recv_line().parse().expect("parent epid");
    let parent = s.av.insert(&[Epid(parent)]).remove(0).expect("insert");
    let reactor = s.domain.reactor().clone();
    let mut buf = vec![0u8; BIG];
    loop {
        let (got, b) = reactor.block_on(s.ep.trecv(buf, 0, u64::MAX));
        let got = got.expect("echo receive");
        buf = b.into_vec().expect("a vector");
        if got.tag == QUIT {
            break;
        }
        if got.len < BIG {
            let (sent, _) = reactor.block_on(s.ep.tsend(parent, got.tag, buf[..got.len].to_vec()));
            sent.expect("echo send");
        } else {
            let (sent, b) = reactor.block_on(s.ep.tsend(parent, got.tag, buf));
            sent.expect("echo send");
            buf = b.into_vec().expect("a vector");
        }
    }
    io.send_line("done");
}

/// Connected stream sockets of this process: (fd, is Unix).
fn connected_sockets() -> Vec<(RawFd, bool)> {
    let mut v = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Ok(entry) = entry else { continue };
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        let opt = |name| {
            let mut v: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt writes at most `len` bytes into `v`; a
            // descriptor that is not a socket only makes it fail.
            let r = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    name,
                    (&mut v as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            (r == 0).then_some(v)
        };
        if opt(libc::SO_TYPE) != Some(libc::SOCK_STREAM) || opt(libc::SO_ACCEPTCONN) != Some(0) {
            continue;
        }
        v.push((fd, opt(libc::SO_DOMAIN) == Some(libc::AF_UNIX)));
    }
    v
}

/// Cuts the transport between this process and the child listening on
/// `port`: `ss -K` for TCP, `shutdown(2)` for Unix sockets. How many
/// sockets were cut.
fn cut(tcp: bool, port: u16) -> usize {
    if tcp {
        let filter = format!("( dport = :{port} or sport = :{port} )");
        let out = std::process::Command::new("ss")
            .args(["-K", "-t", "-n", "state", "established", &filter])
            .output()
            .expect("ss");
        assert!(out.status.success(), "ss -K: {out:?}");
        // `ss -K` lists what it destroyed, after a header line.
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count()
    } else {
        let mut n = 0;
        for (fd, unix) in connected_sockets() {
            if unix {
                // SAFETY: shutdown takes a descriptor and a flag; on one
                // that is not a socket it fails.
                if unsafe { libc::shutdown(fd, libc::SHUT_RDWR) } == 0 {
                    n += 1;
                }
            }
        }
        n
    }
}

fn can_cut_tcp() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ss = std::process::Command::new("ss")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    root && ss
}

/// Opens this side's endpoint and the echo child; they exchange epids.
fn start(test: &str, tcp: bool, secret: bool) -> (Side, Peer, Epid) {
    let s = open(tcp, secret);
    let mut child = Peer::spawn(test, "echo", &[]);
    let child_epid = Epid(
        child
            .recv_line(Duration::from_secs(30))
            .parse()
            .expect("child epid"),
    );
    child.send_line(&s.ep.getname().0.to_string());
    (s, child, child_epid)
}

fn scenario(test: &str, tcp: bool, secret: bool) {
    if let Some(r) = role() {
        assert_eq!(r, "echo");
        return echo(tcp, secret);
    }
    if tcp && !can_cut_tcp() {
        eprintln!("{test}: skipped: cutting TCP connections needs root and ss");
        return;
    }
    let _lock = spin_lock::spin_lock();
    let (s, mut child, child_epid) = start(test, tcp, secret);
    let port = SoftEpid::try_from(child_epid)
        .expect("a soft epid")
        .socket_addr()
        .port();
    let peer: FiAddr = s.av.insert(&[child_epid]).remove(0).expect("insert");
    let reactor = s.domain.reactor().clone();

    // A ping-pong, cut twice under way.
    let mut cuts = 0;
    for i in 0..200u64 {
        if i == 50 || i == 120 {
            let n = cut(tcp, port);
            assert!(n > 0, "round {i}: no socket to cut");
            cuts += n;
        }
        let msg = pattern(1 + (i as usize * 37) % 3000, i);
        let reply = s.ep.trecv(vec![0u8; 4096], i + 1, 0);
        let (sent, _) = reactor.block_on(s.ep.tsend(peer, i + 1, msg.clone()));
        sent.unwrap_or_else(|e| panic!("round {i}: send: {e}"));
        let (got, buf) = reactor.block_on(reply);
        let got = got.unwrap_or_else(|e| panic!("round {i}: receive: {e}"));
        assert_eq!(got.len, msg.len(), "round {i}");
        assert!(
            buf.as_slice()[..got.len] == msg[..],
            "round {i}: bytes differ"
        );
    }

    // 64 MiB there and back, cut while it streams.
    let big = pattern(BIG, 7);
    let stop = Arc::new(AtomicBool::new(false));
    let cut_count = Arc::new(AtomicUsize::new(0));
    let cutter = {
        let (stop, cut_count) = (stop.clone(), cut_count.clone());
        std::thread::spawn(move || {
            for delay in [40u64, 150, 300] {
                std::thread::sleep(Duration::from_millis(delay));
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                cut_count.fetch_add(cut(tcp, port), Ordering::Relaxed);
            }
        })
    };
    let start = Instant::now();
    let back = s.ep.trecv(vec![0u8; BIG], 64, 0);
    let (sent, _) = reactor.block_on(s.ep.tsend(peer, 64, big.clone()));
    sent.expect("64 MiB send");
    let (got, buf) = reactor.block_on(back);
    stop.store(true, Ordering::Relaxed);
    cutter.join().expect("cutter");
    let got = got.expect("64 MiB echo");
    assert_eq!(got.len, BIG);
    assert!(buf.as_slice() == &big[..], "64 MiB: bytes differ");
    assert!(
        cut_count.load(Ordering::Relaxed) > 0,
        "the transfer ended before any cut ({:?})",
        start.elapsed()
    );
    println!(
        "{test}: {cuts} sockets cut under the ping-pong, {} under 64 MiB each way ({:.0?})",
        cut_count.load(Ordering::Relaxed),
        start.elapsed()
    );

    // The QUIT may wait on a link cut at the very end: with manual
    // progress, this side resumes it only while it progresses, so it does
    // while the child finishes.
    let (sent, _) = reactor.block_on(s.ep.tsend(peer, QUIT, vec![0u8; 1]));
    sent.expect("quit");
    let idle = || {
        if !reactor.progress().made() {
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    assert_eq!(child.recv_line_with(Duration::from_secs(30), idle), "done");
    let start = Instant::now();
    assert!(child.wait_with(Duration::from_secs(30), idle).success());
    // Its close does not wait for a link to resume past FI_PSM_TIMEOUT.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the echo child took {:?} to exit",
        start.elapsed()
    );
}

#[test]
fn unix_link_survives_cuts_under_ping_pong_and_64_mib() {
    scenario(
        "unix_link_survives_cuts_under_ping_pong_and_64_mib",
        false,
        false,
    );
}

#[test]
fn tcp_link_survives_resets_under_ping_pong_and_64_mib() {
    scenario(
        "tcp_link_survives_resets_under_ping_pong_and_64_mib",
        true,
        false,
    );
}

/// With a job secret, every resumption proves it again, and links resume
/// exactly as without one.
#[test]
fn unix_link_with_a_job_secret_survives_cuts() {
    scenario("unix_link_with_a_job_secret_survives_cuts", false, true);
}

#[test]
fn tcp_link_with_a_job_secret_survives_resets() {
    scenario("tcp_link_with_a_job_secret_survives_resets", true, true);
}

/// A peer whose process died is not waited for: reconnecting finds
/// nothing listening, and what was pending fails at once, well within
/// the reconnection window.
#[test]
fn a_dead_peer_still_fails_pending_operations_at_once() {
    let test = "a_dead_peer_still_fails_pending_operations_at_once";
    if role().is_some() {
        return echo(false, false);
    }
    let _lock = spin_lock::spin_lock();
    let (s, child, child_epid) = start(test, false, false);
    let peer = s.av.insert(&[child_epid]).remove(0).expect("insert");
    let reactor = s.domain.reactor().clone();
    // One round trip: connected both ways.
    let reply = s.ep.trecv(vec![0u8; 8], 1, 0);
    let (sent, _) = reactor.block_on(s.ep.tsend(peer, 1, vec![1u8; 8]));
    sent.expect("send");
    reactor.block_on(reply).0.expect("echo");
    // The child dies; a large send to it (rendezvous: it needs the
    // peer's answer) must fail, not wait for a reconnection.
    child.kill();
    let start = Instant::now();
    let (got, _) = reactor.block_on(s.ep.tsend(peer, 2, vec![2u8; 1 << 20]));
    let took = start.elapsed();
    let e = got.expect_err("a send to a dead peer fails");
    assert!(
        matches!(e.kind(), ErrorKind::Io | ErrorKind::ConnRefused),
        "{e}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the dead peer was waited for: {took:?} ({e})"
    );
}
