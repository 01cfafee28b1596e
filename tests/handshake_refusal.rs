//! A soft-engine refusal tells the refused side why, never the job UUID:
//! a raw TCP client that sends a Hello with a made-up UUID must not learn
//! the real one from the Refuse (and so cannot then connect with it), while
//! each side still reports what it knows: the refuser both UUIDs, the
//! refused side its own and that the peer's job differs.
//!
//! Everything runs on loopback.

mod support;
use support::{soft_raw, trace_capture};

use bytes::BytesMut;
use psmrail::engine::soft::wire::{
    encode, Frame, FrameLimits, HandshakeError, Hello, JobUuid, Refusal, RefuseCode,
};
use psmrail::engine::soft::{
    ConnError, Event, OpId, ProtocolConfig, Role, SoftConfig, SoftCore, SoftEngine, SoftEpid,
};
use psmrail::engine::{EndpointOptions, Engine, EngineEndpoint, Epid};
use psmrail::reactor::ProgressSource;
use soft_raw::{frames, hello_session, while_progressed};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use trace_capture::Recorder;

/// The job the endpoints under test belong to.
const JOB: [u8; 16] = *b"the-real-job-key";
/// A job UUID an outsider makes up.
const GUESS: [u8; 16] = *b"just-a-guess-key";
/// Bound on every socket wait (never a speed claim).
const T: Duration = Duration::from_secs(20);

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// No form of `uuid` appears in `bytes`: neither its 16 bytes nor its
/// text (hyphenated or bare hex).
fn assert_not_in(bytes: &[u8], uuid: [u8; 16], what: &str) {
    let text = JobUuid(uuid).to_string();
    let bare: String = text.chars().filter(|c| *c != '-').collect();
    assert!(
        !contains(bytes, &uuid),
        "{what} carries the UUID: {bytes:02x?}"
    );
    assert!(
        !contains(bytes, text.as_bytes()) && !contains(bytes, bare.as_bytes()),
        "{what} carries the UUID as text: {bytes:02x?}"
    );
}

fn hello_bytes(uuid: [u8; 16], epid: Epid) -> Vec<u8> {
    hello_session(uuid, epid, 1)
}

fn options(uuid: [u8; 16]) -> EndpointOptions {
    EndpointOptions {
        uuid,
        unit: None,
        port: None,
        close_timeout: Duration::from_secs(2),
    }
}

/// Runs `body` against a listening soft endpoint of [`JOB`] (TCP only)
/// that a background thread keeps progressing; `body` gets the endpoint's
/// TCP address.
fn with_endpoint(body: impl FnOnce(SocketAddrV4)) {
    let engine = SoftEngine::new(SoftConfig {
        unix_sockets: false,
        // The raw client's Hello claims a made-up epid (identity checks
        // are tested in tests/peer_identity.rs).
        verify_peers: false,
        ..SoftConfig::default()
    })
    .unwrap();
    let ep = engine.open(&options(JOB)).unwrap();
    let source: Arc<dyn ProgressSource> = ep.clone();
    let addr = SoftEpid::try_from(ep.epid()).unwrap().socket_addr();
    while_progressed(&[source], || body(addr));
    ep.close(Duration::from_secs(1)).unwrap();
}

/// Sends a Hello of job `uuid` over plain TCP; returns every byte the
/// endpoint sends until it closes, or until its first HelloAck.
fn knock(addr: SocketAddrV4, uuid: [u8; 16]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(&hello_bytes(uuid, Epid(0x1234))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the endpoint neither answered nor closed: {e}"),
        }
        if frames(&got).iter().any(|f| matches!(f, Frame::HelloAck(_))) {
            return got;
        }
    }
}

#[test]
fn a_raw_client_with_a_wrong_uuid_learns_nothing_from_the_refusal() {
    with_endpoint(|addr| {
        let got = knock(addr, GUESS);
        let [Frame::Refuse(refuse)] = &frames(&got)[..] else {
            panic!("expected one Refuse, got {:?}", frames(&got));
        };
        assert_eq!(refuse.code, RefuseCode::UuidMismatch);
        assert_not_in(&got, JOB, "the Refuse");
        // Whatever the refusal held is no key: a Hello with it is refused
        // too.
        let again = knock(addr, refuse.uuid.0);
        assert!(
            matches!(&frames(&again)[..], [Frame::Refuse(r)] if r.code == RefuseCode::UuidMismatch),
            "a Hello with what the refusal held: {:?}",
            frames(&again)
        );
        // The real key is still accepted, so the refusals above are the
        // endpoint judging the UUID.
        let welcome = knock(addr, JOB);
        assert!(
            frames(&welcome)
                .iter()
                .any(|f| matches!(f, Frame::HelloAck(h) if h.uuid == JobUuid(JOB))),
            "{:?}",
            frames(&welcome)
        );
    });
}

#[test]
fn no_refusal_reason_carries_the_uuid() {
    with_endpoint(|addr| {
        let mut other_version = hello_bytes(JOB, Epid(0x1234));
        other_version[8 + 8] = 9; // the version u16 after the header and magic
        let mut bad_magic = hello_bytes(GUESS, Epid(0x1234));
        bad_magic[8..16].copy_from_slice(b"NOTOURS!");
        for (what, hello, code) in [
            ("other version", other_version, RefuseCode::VersionMismatch),
            ("bad magic", bad_magic, RefuseCode::BadMagic),
        ] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            s.write_all(&hello).unwrap();
            let mut got = Vec::new();
            match s.read_to_end(&mut got) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                Err(e) => panic!("{what}: the endpoint did not close: {e}"),
            }
            assert!(
                matches!(&frames(&got)[..], [Frame::Refuse(r)] if r.code == code),
                "{what}: {:?}",
                frames(&got)
            );
            assert_not_in(&got, JOB, what);
        }
    });
}

/// One core of job `uuid`, sans I/O.
fn core(uuid: [u8; 16], epid: u64) -> SoftCore {
    SoftCore::new(ProtocolConfig::DEFAULT, Epid(epid), JobUuid(uuid)).unwrap()
}

/// All the core has to send on `conn`.
fn output(core: &mut SoftCore, conn: psmrail::engine::soft::ConnId) -> BytesMut {
    let mut out = BytesMut::new();
    let none: HashMap<OpId, Vec<u8>> = HashMap::new();
    core.poll_transmit(conn, &mut out, 1 << 20, &none);
    out
}

/// The handshake error the core closed its one connection with.
fn handshake_error(core: &mut SoftCore) -> HandshakeError {
    while let Some(ev) = core.poll_event() {
        if let Event::ConnectionClosed {
            error: Some(ConnError::Handshake(h)),
            ..
        } = ev
        {
            return h;
        }
    }
    panic!("the core did not close the connection with a handshake error");
}

#[test]
fn each_side_reports_what_it_knows_and_the_wire_carries_neither_uuid() {
    let mut acceptor = core(JOB, 0x10);
    let mut dialer = core(GUESS, 0x20);
    let a = acceptor.open_connection(Role::Acceptor);
    let d = dialer.open_connection(Role::Dialer { expect: Epid(0x10) });

    let mut hello = output(&mut dialer, d);
    let _ = acceptor.handle_input(a, &mut hello);
    let refusal = output(&mut acceptor, a);
    assert_not_in(&refusal, JOB, "the acceptor's Refuse");
    assert_not_in(&refusal, GUESS, "the acceptor's Refuse");

    // The refusing side knows both UUIDs and says which it saw.
    let at_acceptor = handshake_error(&mut acceptor);
    assert_eq!(
        at_acceptor,
        HandshakeError::Refused(Refusal::UuidMismatch {
            ours: JobUuid(JOB),
            theirs: JobUuid(GUESS),
        })
    );
    let text = at_acceptor.to_string();
    assert!(text.contains(&JobUuid(JOB).to_string()), "{text}");
    assert!(text.contains(&JobUuid(GUESS).to_string()), "{text}");

    // The refused side names its own UUID and that the peer's job differs,
    // and has no way to name the peer's.
    let mut input = refusal;
    let _ = dialer.handle_input(d, &mut input);
    let at_dialer = handshake_error(&mut dialer);
    assert_eq!(
        at_dialer,
        HandshakeError::RefusedByPeer(Refusal::OtherJob {
            ours: JobUuid(GUESS)
        })
    );
    let text = ConnError::Handshake(at_dialer).to_string();
    assert!(text.contains("another job"), "{text}");
    assert!(text.contains(&JobUuid(GUESS).to_string()), "{text}");
    assert!(!text.contains(&JobUuid(JOB).to_string()), "{text}");
}

#[test]
fn both_sides_of_a_refusal_log_one_info_event_that_names_no_job() {
    let rec = Recorder::new();
    rec.capture(|| {
        let mut acceptor = core(JOB, 0x10);
        let mut dialer = core(GUESS, 0x20);
        let a = acceptor.open_connection(Role::Acceptor);
        let d = dialer.open_connection(Role::Dialer { expect: Epid(0x10) });
        let mut hello = output(&mut dialer, d);
        let _ = acceptor.handle_input(a, &mut hello);
        let mut refusal = output(&mut acceptor, a);
        let _ = dialer.handle_input(d, &mut refusal);
    });
    for (what, epid) in [
        ("refused a handshake", Epid(0x10)),
        ("the peer refused our handshake", Epid(0x20)),
    ] {
        let events = rec.events_saying(what);
        assert_eq!(events.len(), 1, "{what}: {:?}", rec.events());
        let e = &events[0];
        assert_eq!(e.level, tracing::Level::INFO);
        assert_eq!(e.field("epid"), Some(epid.to_string().as_str()));
        assert_eq!(e.field("code"), Some("UuidMismatch"));
        for uuid in [JOB, GUESS] {
            let text = JobUuid(uuid).to_string();
            assert!(
                e.fields.values().all(|v| !v.contains(&text)),
                "{what} names a job: {e:?}"
            );
        }
    }
}

#[test]
fn a_dialer_refusing_an_acceptor_of_another_job_sends_no_uuid() {
    // The reverse direction: the dialer judges the HelloAck.
    let mut dialer = core(JOB, 0x20);
    let d = dialer.open_connection(Role::Dialer { expect: Epid(0x10) });
    let _hello = output(&mut dialer, d);
    let mut ack = BytesMut::new();
    encode(
        &Frame::HelloAck(Hello::ours(
            JobUuid(GUESS),
            Epid(0x10),
            FrameLimits::DEFAULT,
        )),
        &mut ack,
    );
    let _ = dialer.handle_input(d, &mut ack);
    let refusal = output(&mut dialer, d);
    assert!(
        matches!(&frames(&refusal)[..], [Frame::Refuse(r)] if r.code == RefuseCode::UuidMismatch),
        "{:?}",
        frames(&refusal)
    );
    assert_not_in(&refusal, JOB, "the dialer's Refuse");
    assert_not_in(&refusal, GUESS, "the dialer's Refuse");
    assert_eq!(
        handshake_error(&mut dialer),
        HandshakeError::Refused(Refusal::UuidMismatch {
            ours: JobUuid(JOB),
            theirs: JobUuid(GUESS),
        })
    );
}

#[test]
fn an_endpoint_refused_for_its_job_names_its_own_uuid_only() {
    let engine = SoftEngine::new(SoftConfig {
        unix_sockets: false,
        ..SoftConfig::default()
    })
    .unwrap();
    let a = engine.open(&options(JOB)).unwrap();
    let b = engine.open(&options(GUESS)).unwrap();
    let (sa, sb): (Arc<dyn ProgressSource>, Arc<dyn ProgressSource>) = (a.clone(), b.clone());
    let result = while_progressed(&[sa, sb], || b.connect(&[a.epid()], T).remove(0));
    let e = result.expect_err("another job must be refused");
    let text = e.to_string();
    assert!(text.contains("another job"), "{text}");
    assert!(text.contains(&JobUuid(GUESS).to_string()), "{text}");
    assert!(!text.contains(&JobUuid(JOB).to_string()), "{text}");
    a.close(Duration::from_secs(1)).unwrap();
    b.close(Duration::from_secs(1)).unwrap();
}
