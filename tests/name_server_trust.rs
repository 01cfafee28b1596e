//! What the name server trusts: a hostile process on the server's own host
//! (a raw socket speaking the name-server wire, from 127.0.0.1) tries to
//! delete a live entry, to register over it, and to replay a captured
//! request, with and without a job secret; every attempt is refused and a
//! QUERY still names the real owner's epid. The legitimate owner deletes
//! and registers again, and an owner that was killed leaves its service
//! free for the next one.

mod support;
use support::ns_raw::{raw, read_to_close, T};

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use psmrail::engine::soft::JobSecret;
use psmrail::engine::Epid;
use psmrail::fabric::name_server::wire::{
    Reply, Request, SESSION_ENTRY_LEN, STATUS_BAD_PROOF, STATUS_NEEDS_SESSION, STATUS_NOT_OWNER,
    STATUS_NO_PROOF, STATUS_TAKEN,
};
use psmrail::fabric::name_server::{query, NameServer, Service};
use psmrail::ErrorKind;
use support::peer::{self, Peer};

/// The attacker's epid.
const BAD: u64 = 0xbad0_bad0_bad0_bad0;

/// The job's secret in the tests that have one.
const SECRET: &str = "the name-server trust tests' job secret";

fn secret(s: &str) -> Option<JobSecret> {
    Some(JobSecret::new(s.as_bytes().to_vec()).unwrap())
}

fn server() -> (NameServer, u16) {
    server_with(None)
}

fn server_with(secret: Option<JobSecret>) -> (NameServer, u16) {
    let ns = NameServer::start_on_with("127.0.0.1:0".parse().unwrap(), secret).unwrap();
    assert!(ns.is_serving());
    let port = ns.local_addr().port();
    (ns, port)
}

/// A handle that registers with the server on `port` (as every process
/// but the serving one does).
fn joined(port: u16, secret: Option<JobSecret>) -> NameServer {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let ns = NameServer::start_on_with(addr, secret).unwrap();
    assert!(!ns.is_serving());
    ns
}

/// The bytes of a version-0 (C) ADD (op 0) or DEL (op 1), built by hand as
/// an attacker would.
fn c_frame(op: u8, service: u32, epid: u64) -> Vec<u8> {
    let mut f = vec![0, op, 0, 0, 0, 0, 0, 0];
    f.extend_from_slice(&service.to_le_bytes());
    f.extend_from_slice(&epid.to_le_bytes());
    f
}

/// A C-style command: connect, send, read until the server closes.
fn c_command(port: u16, frame: &[u8]) -> Vec<u8> {
    let mut s = raw(port);
    s.write_all(frame).unwrap();
    read_to_close(&mut s)
}

/// The bytes of an owning-session ADD (op 0) or DEL (op 1), version 1,
/// with `proof` (32 bytes, flag bit set) or without.
fn session_frame(op: u8, service: u32, epid: u64, proof: Option<[u8; 32]>) -> Vec<u8> {
    let mut f = vec![1, op, u8::from(proof.is_some()), 0, 0, 0, 0, 0];
    f.extend_from_slice(&service.to_le_bytes());
    f.extend_from_slice(&epid.to_le_bytes());
    f.extend_from_slice(&proof.unwrap_or([0; 32]));
    f
}

/// Opens an owning session by hand (HELLO, version 1, op 4) and sends
/// `frame` on it; returns what the server answered: a challenge and an ACK
/// (32 bytes), or whatever came before it closed the connection.
fn session_command(port: u16, frame: &[u8]) -> Vec<u8> {
    let mut s = raw(port);
    s.write_all(&[1, 4, 0, 0, 0, 0, 0, 0]).unwrap();
    // A server that knows owning sessions answers with a challenge; one
    // that does not closes the connection.
    let _ = s.write_all(frame);
    let mut got = Vec::new();
    let mut buf = [0u8; 128];
    while got.len() < 32 {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the server's answer: {e}"),
        }
    }
    got
}

/// The answer a session attempt gets: the challenge (24 bytes), then the
/// ACK's status.
fn session_status(answer: &[u8]) -> i32 {
    assert_eq!(answer.len(), 24 + 8, "{answer:02x?}");
    assert!(
        matches!(Reply::decode(&answer[..24]), Ok(Reply::Challenge { .. })),
        "{answer:02x?}"
    );
    match Reply::decode(&answer[24..]) {
        Ok(Reply::Refused { status }) => status.get(),
        other => panic!("not refused: {other:?}"),
    }
}

/// Every way a local stranger can try to take `service` away from
/// `epid`; after each, a QUERY must still name `epid`. `with_secret`:
/// whether the server has a job secret (which the stranger lacks).
fn attack(port: u16, service: u32, epid: Epid, with_secret: bool) {
    type Attempt = Box<dyn Fn() -> Vec<u8>>;
    let c_refusal = Reply::NotFound {
        status: STATUS_NEEDS_SESSION,
    }
    .encode()
    .to_vec();
    // Without a secret the table refuses; with one, the proof does first.
    let (del_status, add_status) = if with_secret {
        (STATUS_NO_PROOF, STATUS_NO_PROOF)
    } else {
        (STATUS_NOT_OWNER, STATUS_TAKEN)
    };
    let proven = |table: i32| {
        if with_secret {
            STATUS_BAD_PROOF.get()
        } else {
            table
        }
    };
    let attempts: [(&str, Attempt, Option<i32>); 6] = [
        (
            "C DEL",
            Box::new(move || c_command(port, &c_frame(1, service, epid.0))),
            None,
        ),
        (
            "C ADD over it",
            Box::new(move || c_command(port, &c_frame(0, service, BAD))),
            None,
        ),
        (
            "session DEL",
            Box::new(move || session_command(port, &session_frame(1, service, epid.0, None))),
            Some(del_status.get()),
        ),
        (
            "session ADD over it",
            Box::new(move || session_command(port, &session_frame(0, service, BAD, None))),
            Some(add_status.get()),
        ),
        (
            "session DEL with a made-up proof",
            Box::new(move || {
                session_command(port, &session_frame(1, service, epid.0, Some([0x5a; 32])))
            }),
            Some(proven(STATUS_NOT_OWNER.get())),
        ),
        (
            "session ADD with a made-up proof",
            Box::new(move || {
                session_command(port, &session_frame(0, service, BAD, Some([0xa5; 32])))
            }),
            Some(proven(STATUS_TAKEN.get())),
        ),
    ];
    for (what, attempt, status) in attempts {
        let answer = attempt();
        match status {
            None => assert_eq!(answer, c_refusal, "{what}"),
            Some(status) => assert_eq!(session_status(&answer), status, "{what}"),
        }
        assert_eq!(
            query("127.0.0.1", port, service, T).unwrap(),
            (Service::new(service), epid),
            "after the stranger's {what} (answered {answer:02x?})"
        );
    }
    // Both at once, DEL then ADD, as the attack was first seen.
    c_command(port, &c_frame(1, service, epid.0));
    c_command(port, &c_frame(0, service, BAD));
    assert_eq!(
        query("127.0.0.1", port, service, T).unwrap(),
        (Service::new(service), epid)
    );
}

#[test]
fn a_local_stranger_cannot_delete_or_replace_the_serving_process_s_entry() {
    let (ns, port) = server();
    let _mine = ns.register(5, Epid(0x55)).unwrap();
    attack(port, 5, Epid(0x55), false);
}

#[test]
fn a_local_stranger_cannot_delete_or_replace_another_process_s_entry() {
    let (_ns, port) = server();
    let other = joined(port, None);
    let _theirs = other.register(6, Epid(0x66)).unwrap();
    attack(port, 6, Epid(0x66), false);
    // Nor can another process of the job that registers normally.
    let third = joined(port, None);
    let e = third.register(6, Epid(BAD)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    assert_eq!(
        query("127.0.0.1", port, 6, T).unwrap(),
        (Service::new(6), Epid(0x66))
    );
}

#[test]
fn with_a_secret_a_local_stranger_cannot_delete_replace_or_register() {
    let (ns, port) = server_with(secret(SECRET));
    let _mine = ns.register(5, Epid(0x55)).unwrap();
    let other = joined(port, secret(SECRET));
    let _theirs = other.register(6, Epid(0x66)).unwrap();
    attack(port, 5, Epid(0x55), true);
    attack(port, 6, Epid(0x66), true);
    // A free name: without the proof, nothing is registered.
    for (frame, status) in [
        (session_frame(0, 7, BAD, None), STATUS_NO_PROOF),
        (session_frame(0, 7, BAD, Some([1; 32])), STATUS_BAD_PROOF),
    ] {
        assert_eq!(session_status(&session_command(port, &frame)), status.get());
    }
    assert_eq!(
        query("127.0.0.1", port, 7, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    // A psmrail process without the secret, or with another one, is told.
    let none = joined(port, None).register(7, Epid(BAD)).unwrap_err();
    assert_eq!(none.kind(), ErrorKind::Access, "{none}");
    assert!(none.message().contains("requires the job secret"), "{none}");
    let wrong = joined(port, secret("not the job's secret at all"))
        .register(7, Epid(BAD))
        .unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::Access, "{wrong}");
    assert!(wrong.message().contains("different secrets"), "{wrong}");
    assert_eq!(
        query("127.0.0.1", port, 7, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    // The stranger still queries.
    assert_eq!(
        query("127.0.0.1", port, 6, T).unwrap(),
        (Service::new(6), Epid(0x66))
    );
}

#[test]
fn with_a_secret_a_session_that_proves_nothing_is_closed() {
    let (_ns, port) = server_with(secret(SECRET));
    let mut s = raw(port);
    s.write_all(&[1, 4, 0, 0, 0, 0, 0, 0]).unwrap();
    s.write_all(&session_frame(0, 7, BAD, Some([9; 32])))
        .unwrap();
    // The challenge, the refusal, then the close once CONNECTION_TIMEOUT
    // passes: it holds nothing, so it keeps no place in the server.
    let start = Instant::now();
    let got = read_to_close(&mut s);
    assert_eq!(session_status(&got), STATUS_BAD_PROOF.get());
    assert!(start.elapsed() < T);
}

/// A TCP relay to the server on `port` that records what its first client
/// sends: the bytes a process's session carries, as someone who could see
/// them would capture them.
struct Recorder {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
    thread: thread::JoinHandle<()>,
}

impl Recorder {
    fn new(port: u16) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&sent);
        let thread = thread::spawn(move || {
            let (client, _) = listener.accept().unwrap();
            let server = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let (mut from_client, mut to_server) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            let up = thread::spawn(move || {
                let mut buf = [0u8; 256];
                loop {
                    match from_client.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            record.lock().unwrap().extend_from_slice(&buf[..n]);
                            if to_server.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = to_server.shutdown(Shutdown::Write);
            });
            let (mut from_server, mut to_client) = (server, client);
            let _ = io::copy(&mut from_server, &mut to_client);
            let _ = to_client.shutdown(Shutdown::Write);
            up.join().unwrap();
        });
        Recorder { addr, sent, thread }
    }

    /// Everything the client sent, once both sides closed.
    fn finish(self) -> Vec<u8> {
        self.thread.join().unwrap();
        Arc::try_unwrap(self.sent).unwrap().into_inner().unwrap()
    }
}

/// A process registers `service` and removes it again through a recorder:
/// returns its session's bytes (HELLO, ADD, DEL).
fn capture(port: u16, secret: Option<JobSecret>, service: u32, epid: Epid) -> Vec<u8> {
    let recorder = Recorder::new(port);
    let ns = NameServer::start_on_with(recorder.addr, secret).unwrap();
    assert!(!ns.is_serving());
    ns.register(service, epid).unwrap().unregister().unwrap();
    let bytes = recorder.finish();
    assert_eq!(bytes.len(), 8 + 2 * SESSION_ENTRY_LEN, "{bytes:02x?}");
    assert_eq!(Request::decode(&bytes[..8]), Ok(Request::Hello));
    bytes
}

/// Replays `frames` (a HELLO and requests) on a new connection: the
/// statuses of the requests' ACKs.
fn replay(port: u16, frames: &[&[u8]]) -> Vec<i32> {
    let mut s = raw(port);
    let mut statuses = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        s.write_all(frame).unwrap();
        let mut header = [0u8; 8];
        s.read_exact(&mut header).unwrap();
        let mut reply = header.to_vec();
        reply.resize(Reply::frame_len(&header).unwrap(), 0);
        s.read_exact(&mut reply[8..]).unwrap();
        match Reply::decode(&reply).unwrap() {
            Reply::Challenge { .. } => assert_eq!(i, 0),
            Reply::Done => statuses.push(0),
            Reply::Refused { status } => statuses.push(status.get()),
            other => panic!("{other:?}"),
        }
    }
    statuses
}

#[test]
fn with_a_secret_a_replayed_request_is_refused() {
    let (_ns, port) = server_with(secret(SECRET));
    let bytes = capture(port, secret(SECRET), 8, Epid(0x88));
    let (hello, add, del) = (&bytes[..8], &bytes[8..60], &bytes[60..]);
    assert!(matches!(
        Request::decode(add),
        Ok(Request::Session { proof: Some(_), .. })
    ));
    // The whole session again, on a new connection (a new nonce): the ADD
    // registers nothing, the DEL removes nothing.
    let bad = STATUS_BAD_PROOF.get();
    assert_eq!(replay(port, &[hello, add, del]), [bad, bad]);
    assert_eq!(replay(port, &[hello, add]), [bad]);
    assert_eq!(
        query("127.0.0.1", port, 8, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    // The owner registers again; its old DEL, replayed, leaves the entry.
    let owner = joined(port, secret(SECRET));
    let _reg = owner.register(8, Epid(0x88)).unwrap();
    assert_eq!(replay(port, &[hello, del]), [bad]);
    assert_eq!(replay(port, &[hello, add, del]), [bad, bad]);
    assert_eq!(
        query("127.0.0.1", port, 8, T).unwrap(),
        (Service::new(8), Epid(0x88))
    );
}

#[test]
fn without_a_secret_a_replayed_del_is_not_the_owner_s() {
    let (_ns, port) = server();
    let bytes = capture(port, None, 8, Epid(0x88));
    let (hello, add, del) = (&bytes[..8], &bytes[8..60], &bytes[60..]);
    let owner = joined(port, None);
    let _reg = owner.register(8, Epid(0x88)).unwrap();
    assert_eq!(replay(port, &[hello, del]), [STATUS_NOT_OWNER.get()]);
    assert_eq!(
        replay(port, &[hello, add, del]),
        [STATUS_TAKEN.get(), STATUS_NOT_OWNER.get()]
    );
    assert_eq!(
        query("127.0.0.1", port, 8, T).unwrap(),
        (Service::new(8), Epid(0x88))
    );
}

#[test]
fn the_owner_still_deletes_and_registers_again() {
    for secret in [None, secret(SECRET)] {
        let (ns, port) = server_with(secret.clone());
        let other = joined(port, secret);
        owner_deletes_and_registers_again(port, &ns, &other);
    }
}

fn owner_deletes_and_registers_again(port: u16, serving: &NameServer, other: &NameServer) {
    for (handle, service) in [(serving, 7u32), (other, 8u32)] {
        let reg = handle.register(service, Epid(0x70)).unwrap();
        reg.unregister().unwrap();
        assert_eq!(
            query("127.0.0.1", port, service, T).unwrap_err().kind(),
            ErrorKind::NoData
        );
        let again = handle.register(service, Epid(0x71)).unwrap();
        // Several entries over one session, removed in any order.
        let more = handle.register(service + 100, Epid(0x72)).unwrap();
        assert_eq!(
            query("127.0.0.1", port, service, T).unwrap(),
            (Service::new(service), Epid(0x71))
        );
        drop(again);
        assert_eq!(
            query("127.0.0.1", port, service, T).unwrap_err().kind(),
            ErrorKind::NoData
        );
        assert_eq!(
            query("127.0.0.1", port, service + 100, T).unwrap(),
            (Service::new(service + 100), Epid(0x72))
        );
        drop(more);
        assert_eq!(
            query("127.0.0.1", port, service + 100, T)
                .unwrap_err()
                .kind(),
            ErrorKind::NoData
        );
    }
}

/// The child of the killed-owner tests: registers `NS_SERVICE` with the
/// server at `NS_ADDR` (with the secret `NS_SECRET` if set), says so, then
/// waits to be killed.
fn killed_owner_child() {
    let addr = std::env::var("NS_ADDR").unwrap().parse().unwrap();
    let service: u32 = std::env::var("NS_SERVICE").unwrap().parse().unwrap();
    let secret = std::env::var("NS_SECRET").ok().and_then(|s| secret(&s));
    let ns = NameServer::start_on_with(addr, secret).unwrap();
    assert!(!ns.is_serving());
    let reg = ns.register(service, Epid(0xdead)).unwrap();
    peer::say("registered");
    // Blocked, not spinning, until the parent kills it.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    drop(reg);
}

/// A child registers service 9 and is killed: its entry goes with it.
fn killed_owner(test: &str, secret_text: Option<&str>) {
    let secret = secret_text.and_then(secret);
    let (_ns, port) = server_with(secret.clone());
    let addr = format!("127.0.0.1:{port}");
    let mut env = vec![("NS_ADDR", addr.as_str()), ("NS_SERVICE", "9")];
    if let Some(s) = secret_text {
        env.push(("NS_SECRET", s));
    }
    let mut child = Peer::spawn(test, "owner", &env);
    assert_eq!(child.recv_line(T), "registered");
    assert_eq!(
        query("127.0.0.1", port, 9, T).unwrap(),
        (Service::new(9), Epid(0xdead))
    );
    // While the owner lives, nobody else takes the service, nor deletes it.
    let next = joined(port, secret);
    assert_eq!(
        next.register(9, Epid(0xbeef)).unwrap_err().kind(),
        ErrorKind::Busy
    );
    attack(port, 9, Epid(0xdead), secret_text.is_some());
    child.kill();
    // Once it is dead, the service is free (the server learns of the death
    // when the owner's connection closes, which the kernel does at once).
    let deadline = Instant::now() + Duration::from_secs(5);
    let reg = loop {
        match next.register(9, Epid(0xbeef)) {
            Ok(reg) => break reg,
            Err(e) if e.kind() == ErrorKind::Busy && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("the dead owner's service is still taken: {e}"),
        }
    };
    assert_eq!(
        query("127.0.0.1", port, 9, T).unwrap(),
        (Service::new(9), Epid(0xbeef))
    );
    drop(reg);
}

#[test]
fn a_killed_owner_leaves_its_service_free() {
    if peer::role().is_some() {
        return killed_owner_child();
    }
    killed_owner("a_killed_owner_leaves_its_service_free", None);
}

#[test]
fn with_a_secret_a_killed_owner_leaves_its_service_free() {
    if peer::role().is_some() {
        return killed_owner_child();
    }
    killed_owner(
        "with_a_secret_a_killed_owner_leaves_its_service_free",
        Some(SECRET),
    );
}
