//! A stranger who knows the job UUID cannot take a peer's identity on the
//! soft engine: a Hello claiming a victim's epid is refused unless the
//! dialer proves it (Unix sockets: it is the process listening for that
//! epid; TCP: it comes from that epid's address and answers a challenge
//! sent to that epid's listener), and nothing of the victim's is touched.
//!
//! Each test runs a target endpoint and a victim endpoint connected to
//! it, then attacks as a raw client.

mod support;
use support::soft_raw;

use psmrail::engine::soft::wire::{Frame, RefuseCode};
use psmrail::engine::soft::{SoftConfig, SoftEndpoint, SoftEngine, SoftEpid};
use psmrail::engine::{
    EndpointOptions, Engine, EngineEndpoint, EngineKind, Epid, OpBuffer, PeerAddr, SendMode,
    TagMatch,
};
use psmrail::reactor::ProgressSource;
use soft_raw::{frames, hello_session, while_progressed};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOB: [u8; 16] = *b"identity-tests!!";

fn options() -> EndpointOptions {
    EndpointOptions {
        uuid: JOB,
        unit: None,
        port: None,
        close_timeout: Duration::from_secs(1),
    }
}

fn engine(unix: bool) -> SoftEngine {
    SoftEngine::new(SoftConfig {
        unix_sockets: unix,
        handshake_timeout: Duration::from_secs(2),
        ..SoftConfig::default()
    })
    .unwrap()
}

/// Hello + Session claiming `epid`.
fn claim(epid: Epid) -> Vec<u8> {
    hello_session(JOB, epid, 42)
}

/// Everything the endpoint sends on `s` until it closes it (or 5 s).
fn read_all(s: &mut impl Read) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => break,
        }
    }
    got
}

/// A target endpoint and a victim connected to it, both progressed by a
/// thread while `body` attacks; then the victim and the target must still
/// exchange a message both ways.
fn with_pair(unix: bool, body: impl FnOnce(&SoftEndpoint, &SoftEndpoint)) {
    let engine = engine(unix);
    let target = engine.open(&options()).unwrap();
    let victim = engine.open(&options()).unwrap();
    assert_eq!(target.kind(), EngineKind::Soft);
    let (t, v): (Arc<dyn ProgressSource>, Arc<dyn ProgressSource>) =
        (target.clone(), victim.clone());
    while_progressed(&[t, v], || {
        let to_target = victim
            .connect(&[target.epid()], Duration::from_secs(5))
            .remove(0)
            .expect("the victim connects");
        exchange(&victim, &target, to_target);
        body(&target, &victim);
        // The victim is untouched: still connected, messages flow.
        exchange(&victim, &target, to_target);
    });
}

/// One message from `a` to `b` over `peer`, and checks it arrived.
fn exchange(a: &SoftEndpoint, b: &SoftEndpoint, peer: PeerAddr) {
    let (rk, sk) = (b.completions().insert(), a.completions().insert());
    b.irecv(TagMatch::exact(9), OpBuffer::from(vec![0u8; 5]), rk)
        .map_err(|e| e.error)
        .unwrap();
    a.isend(
        peer,
        9,
        SendMode::Standard,
        OpBuffer::from(b"hello".to_vec()),
        sk,
    )
    .map_err(|e| e.error)
    .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let got = loop {
        if let Some(c) = b.completions().try_take(rk) {
            break c;
        }
        assert!(Instant::now() < end, "the victim's message did not arrive");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(got.status.error, None);
    assert_eq!(got.buffer.as_slice(), b"hello");
    while a.completions().try_take(sk).is_none() {
        assert!(Instant::now() < end, "the victim's send did not complete");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_unix_socket_dialer_claiming_another_process_s_epid_is_refused() {
    with_pair(true, |target, victim| {
        // From another process (this test binary, re-run as the
        // impostor): refused. (Two endpoints of one process cannot be told
        // apart by the kernel: a process may claim its own epids.)
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "impostor_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PSMRAIL_IMPOSTOR_TARGET", format!("{:x}", target.epid().0))
            .env("PSMRAIL_IMPOSTOR_CLAIM", format!("{:x}", victim.epid().0))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("@@ refused identity"), "{text}");
    });
}

/// The impostor's side of the test above (run by it in a child process).
#[test]
#[ignore]
fn impostor_child() {
    let Ok(target) = std::env::var("PSMRAIL_IMPOSTOR_TARGET") else {
        return;
    };
    let claim_epid =
        Epid(u64::from_str_radix(&std::env::var("PSMRAIL_IMPOSTOR_CLAIM").unwrap(), 16).unwrap());
    let target = u64::from_str_radix(&target, 16).unwrap();
    let name = UnixAddr::from_abstract_name(format!("psmrail-soft/{target:016x}")).unwrap();
    let mut s = UnixStream::connect_addr(&name).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s.write_all(&claim(claim_epid)).unwrap();
    let got = frames(&read_all(&mut s));
    assert!(
        !got.iter().any(|f| matches!(f, Frame::HelloAck(_))),
        "the impostor was answered: {got:?}"
    );
    assert!(
        matches!(got.last(), Some(Frame::Refuse(r)) if r.code == RefuseCode::Identity),
        "{got:?}"
    );
    println!("@@ refused identity");
}

#[test]
fn a_tcp_dialer_from_another_address_is_refused_at_once() {
    with_pair(false, |target, victim| {
        let addr = SoftEpid::try_from(target.epid()).unwrap().socket_addr();
        // 127.0.0.2 is this host too, but not the victim's address.
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 0).into())
            .unwrap();
        sock.connect(&addr.into()).unwrap();
        let mut s: TcpStream = sock.into();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let start = Instant::now();
        s.write_all(&claim(victim.epid())).unwrap();
        let got = frames(&read_all(&mut s));
        assert!(
            matches!(got.last(), Some(Frame::Refuse(r)) if r.code == RefuseCode::Identity),
            "{got:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    });
}

#[test]
fn a_tcp_dialer_that_cannot_answer_the_challenge_is_refused() {
    with_pair(false, |target, victim| {
        let addr = SoftEpid::try_from(target.epid()).unwrap().socket_addr();
        // From the victim's own address (both live on 127.0.0.1), so only
        // the challenge can tell: it goes to the victim, which is not
        // dialing the target now and sends no proof.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s.write_all(&claim(victim.epid())).unwrap();
        let got = frames(&read_all(&mut s));
        assert!(
            !got.iter().any(|f| matches!(f, Frame::HelloAck(_))),
            "the impostor was answered: {got:?}"
        );
    });
}
