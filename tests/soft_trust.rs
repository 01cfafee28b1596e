//! The soft engine's handshake under attack from outside, over real
//! sockets: a stranger flooding a dialer with forged Challenge frames
//! (knowing only addresses: no UUID, no secret) denies no connection, over
//! TCP and Unix sockets, with and without a job secret; and a process that
//! restarts at the address of one that died (a fixed port) connects at
//! once, its predecessor's links ended instead of waited for.

mod support;
use support::soft_raw::while_progressed;
use support::{peer, spin_lock};

use bytes::BytesMut;
use peer::{role, ChildIo, Peer};
use psmrail::engine::soft::wire::{encode, Frame};
use psmrail::engine::soft::{JobSecret, SoftConfig, SoftEndpoint, SoftEngine, SoftEpid};
use psmrail::engine::{
    EndpointOptions, Engine, EngineEndpoint, Epid, OpBuffer, SendMode, TagMatch,
};
use psmrail::reactor::ProgressSource;
use std::io::Write;
use std::net::TcpStream;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOB: [u8; 16] = *b"trust-tests!!!!!";

fn engine(unix: bool, secret: bool, port: u16) -> SoftEngine {
    SoftEngine::new(SoftConfig {
        unix_sockets: unix,
        port,
        handshake_timeout: Duration::from_secs(3),
        job_secret: secret
            .then(|| JobSecret::new(b"a job secret of some length".to_vec()).unwrap()),
        ..SoftConfig::default()
    })
    .unwrap()
}

fn options(close_timeout: Duration) -> EndpointOptions {
    EndpointOptions {
        uuid: JOB,
        unit: None,
        port: None,
        close_timeout,
    }
}

/// Sends forged Challenges naming `from` to `target`'s listener until
/// `stop`: each on a connection of its own, with random nonces and link
/// ids. How many went out.
fn spam(target: Epid, from: Epid, unix: bool, stop: &AtomicBool, sent: &AtomicUsize) {
    let addr = SoftEpid::try_from(target).unwrap().socket_addr();
    let name = UnixAddr::from_abstract_name(format!("psmrail-soft/{:016x}", target.0)).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ target.0;
    while !stop.load(Ordering::Relaxed) {
        let mut b = BytesMut::new();
        for _ in 0..4 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            encode(
                &Frame::Challenge {
                    nonce: x,
                    from,
                    link: x.rotate_left(17),
                },
                &mut b,
            );
        }
        let ok = if unix {
            UnixStream::connect_addr(&name).and_then(|mut s| s.write_all(&b))
        } else {
            TcpStream::connect(addr).and_then(|mut s| s.write_all(&b))
        };
        if ok.is_ok() {
            sent.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One message from `a` to `b` over a fresh connect; whether it arrived.
fn connect_and_send(a: &SoftEndpoint, b: &SoftEndpoint) -> Result<(), String> {
    let peer = a
        .connect(&[b.epid()], Duration::from_secs(5))
        .remove(0)
        .map_err(|e| format!("connect: {e}"))?;
    let (rk, sk) = (b.completions().insert(), a.completions().insert());
    b.irecv(TagMatch::exact(3), OpBuffer::from(vec![0u8; 5]), rk)
        .map_err(|e| e.error.to_string())?;
    a.isend(
        peer,
        3,
        SendMode::Standard,
        OpBuffer::from(b"trust".to_vec()),
        sk,
    )
    .map_err(|e| e.error.to_string())?;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(c) = b.completions().try_take(rk) {
            if c.buffer.as_slice() != b"trust" {
                return Err("the message arrived wrong".into());
            }
            return Ok(());
        }
        if Instant::now() > end {
            return Err("the message did not arrive".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn challenge_flood(unix: bool, secret: bool) {
    let _lock = spin_lock::spin_lock();
    let server = engine(unix, secret, 0)
        .open(&options(Duration::from_secs(1)))
        .unwrap();
    let mut failed = Vec::new();
    let mut flood = 0;
    for i in 0..12 {
        let client = engine(unix, secret, 0)
            .open(&options(Duration::from_secs(1)))
            .unwrap();
        let (stop, sent) = (AtomicBool::new(false), AtomicUsize::new(0));
        let (s, c): (Arc<dyn ProgressSource>, Arc<dyn ProgressSource>) =
            (server.clone(), client.clone());
        // The endpoints are progressed until the flood has stopped (a
        // blocked Unix connect of the spammer needs the client to accept).
        let r = while_progressed(&[s, c], || {
            std::thread::scope(|scope| {
                scope.spawn(|| spam(client.epid(), server.epid(), unix, &stop, &sent));
                // The flood is under way before the client dials.
                while sent.load(Ordering::Relaxed) < 50 {
                    std::thread::yield_now();
                }
                let r = connect_and_send(&client, &server);
                stop.store(true, Ordering::Relaxed);
                r
            })
        });
        if let Err(e) = r {
            failed.push(format!("client {i}: {e}"));
        }
        flood += sent.load(Ordering::Relaxed);
    }
    assert!(
        failed.is_empty(),
        "{} of 12 clients failed under {flood} forged Challenge connections: {failed:?}",
        failed.len()
    );
    println!("12 of 12 clients connected under {flood} forged Challenge connections");
}

#[test]
fn forged_challenges_deny_no_connection_over_tcp() {
    challenge_flood(false, false);
}

#[test]
fn forged_challenges_deny_no_connection_over_unix_sockets() {
    challenge_flood(true, false);
}

#[test]
fn forged_challenges_deny_no_connection_with_a_job_secret() {
    challenge_flood(false, true);
    challenge_flood(true, true);
}

// ----- a peer that restarts at its address ------------------------------------

/// The restarting client: at fixed `port`, it sends one request to the
/// server and waits for the answer (the server's epid comes on stdin),
/// then exits; `hang` leaves before the answer, with a receive posted and
/// without closing (as a process that is killed).
fn client(unix: bool, port: u16, hang: bool) {
    let ep = engine(unix, false, port)
        .open(&options(Duration::from_secs(5)))
        .unwrap();
    let mut io = ChildIo::new();
    io.send_line(&ep.epid().0.to_string());
    let server = Epid(io.recv_line().parse().unwrap());
    let s: Arc<dyn ProgressSource> = ep.clone();
    let r = while_progressed(&[s], || {
        let peer = ep
            .connect(&[server], Duration::from_secs(5))
            .remove(0)
            .map_err(|e| format!("connect: {e}"))?;
        let rk = ep.completions().insert();
        ep.irecv(TagMatch::exact(2), OpBuffer::from(vec![0u8; 8]), rk)
            .map_err(|e| e.error.to_string())?;
        let sk = ep.completions().insert();
        ep.isend(
            peer,
            1,
            SendMode::Standard,
            OpBuffer::from(b"request!".to_vec()),
            sk,
        )
        .map_err(|e| e.error.to_string())?;
        if hang {
            // Seen sent, then gone without a word.
            let end = Instant::now() + Duration::from_secs(5);
            while ep.completions().try_take(sk).is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
            return Ok(());
        }
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(c) = ep.completions().try_take(rk) {
                return match c.status.error {
                    None if c.buffer.as_slice() == b"answer!!" => Ok(()),
                    None => Err("a wrong answer".to_owned()),
                    Some(e) => Err(format!("the answer failed: {e:?}")),
                };
            }
            if Instant::now() > end {
                return Err("no answer in 20 s".to_owned());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    match r {
        Ok(()) => io.send_line("ok"),
        Err(e) => io.send_line(&format!("error {e}")),
    }
    if hang {
        // Killed: no close, no Bye.
        std::process::exit(0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn restart(test: &str, unix: bool) {
    if let Some(r) = role() {
        let port: u16 = std::env::var("TRUST_PORT").unwrap().parse().unwrap();
        return client(unix, port, r == "hang");
    }
    let _lock = spin_lock::spin_lock();
    // The server waits up to 5 s (FI_PSM_TIMEOUT) for a lost link to come
    // back.
    let server = engine(unix, false, 0)
        .open(&options(Duration::from_secs(5)))
        .unwrap();
    let port = free_port().to_string();
    let env = [("TRUST_PORT", port.as_str())];
    let s: Arc<dyn ProgressSource> = server.clone();
    while_progressed(&[s], || {
        // Serves requests: every request gets an answer to its sender.
        let serve_one = |answer: bool| -> Option<psmrail::engine::PeerAddr> {
            let rk = server.completions().insert();
            server
                .irecv(TagMatch::exact(1), OpBuffer::from(vec![0u8; 8]), rk)
                .map_err(|e| e.error)
                .unwrap();
            let end = Instant::now() + Duration::from_secs(20);
            let c = loop {
                if let Some(c) = server.completions().try_take(rk) {
                    break c;
                }
                assert!(Instant::now() < end, "no request came");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(c.status.error, None);
            let from = c.status.source.expect("a request names its sender");
            if answer {
                let sk = server.completions().insert();
                server
                    .isend(
                        from,
                        2,
                        SendMode::Standard,
                        OpBuffer::from(b"answer!!".to_vec()),
                        sk,
                    )
                    .map_err(|e| e.error)
                    .unwrap();
            }
            Some(from)
        };
        // The first process sends its request and dies.
        let mut first = Peer::spawn(test, "hang", &env);
        let first_epid: u64 = first.recv_line(Duration::from_secs(30)).parse().unwrap();
        first.send_line(&server.epid().0.to_string());
        serve_one(false);
        assert_eq!(first.recv_line(Duration::from_secs(30)), "ok");
        assert!(first.wait(Duration::from_secs(30)).success());
        // A new process at the same address asks again: it gets its
        // answer long before the server would give up the old one's link.
        let start = Instant::now();
        let mut second = Peer::spawn(test, "ask", &env);
        let second_epid: u64 = second.recv_line(Duration::from_secs(30)).parse().unwrap();
        assert_eq!(second_epid, first_epid, "the same address and epid");
        second.send_line(&server.epid().0.to_string());
        serve_one(true);
        assert_eq!(second.recv_line(Duration::from_secs(30)), "ok");
        let took = start.elapsed();
        assert!(second.wait(Duration::from_secs(30)).success());
        assert!(
            took < Duration::from_secs(4),
            "the new process waited {took:?} for the old one's link to be given up"
        );
        println!("{test}: the restarted process was answered in {took:.0?}");
    });
}

#[test]
fn a_process_restarting_at_its_address_connects_over_tcp() {
    restart(
        "a_process_restarting_at_its_address_connects_over_tcp",
        false,
    );
}

#[test]
fn a_process_restarting_at_its_address_connects_over_unix_sockets() {
    restart(
        "a_process_restarting_at_its_address_connects_over_unix_sockets",
        true,
    );
}
