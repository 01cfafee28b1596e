//! The name server over real loopback sockets: registration and queries,
//! the fallback to an existing server, C's bytes on the wire, hostile and
//! stalled clients, timeouts, prompt shutdown, and where it listens (never
//! the wildcard) and who may register (the host itself, over owning
//! sessions; the refusal of other hosts is tested without I/O in
//! `session.rs` and on loopback in `server.rs`, where a test can make
//! 127.0.0.2 count as foreign; who may change whose entry, with and
//! without a job secret, in `name_server_trust.rs`).
//!
//! Every server listens on an ephemeral loopback port (`start_on` with
//! port 0) so tests run in parallel; only `default_uuid_port` touches the
//! UUID-derived port, and it tolerates finding it in use.

mod support;
use support::ns_raw::{raw, read_to_close, T};

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use psmrail::config::JobUuid;
use psmrail::engine::Epid;
use psmrail::fabric::name_server::wire::{Reply, Request, STATUS_NEEDS_SESSION, STATUS_NOT_LOCAL};
use psmrail::fabric::name_server::{port_for, query, NameServer, Service, MAX_CONNECTIONS};
use psmrail::ErrorKind;

fn server() -> (NameServer, u16) {
    let ns = NameServer::start_on("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(ns.is_serving());
    let port = ns.local_addr().port();
    assert_ne!(port, 0);
    (ns, port)
}

fn assert_serves(port: u16) {
    let ns_probe = query("127.0.0.1", port, 0x5eed, T);
    // Either answer is fine; what matters is that the server answered.
    match ns_probe {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::NoData, "{e}"),
    }
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<NameServer>();
    send_sync::<psmrail::fabric::name_server::Registration>();
}

#[test]
fn register_then_query() {
    let (ns, port) = server();
    let reg = ns.register(7, Epid(0xabc)).unwrap();
    assert_eq!((reg.service(), reg.epid()), (Service::new(7), Epid(0xabc)));
    assert_eq!(
        query("127.0.0.1", port, 7, T).unwrap(),
        (Service::new(7), Epid(0xabc))
    );
    assert_eq!(
        query("localhost", port, 7, T).unwrap(),
        (Service::new(7), Epid(0xabc))
    );
    let e = query("127.0.0.1", port, 8, T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(e.message().contains("service 8"), "{e}");
}

#[test]
fn wildcard_returns_a_registered_entry_with_its_service() {
    let (ns, port) = server();
    assert_eq!(
        query("127.0.0.1", port, 0, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    let entries = [(30, Epid(3)), (10, Epid(1)), (20, Epid(2))];
    let _regs: Vec<_> = entries
        .iter()
        .map(|&(s, e)| ns.register(s, e).unwrap())
        .collect();
    let got = query("127.0.0.1", port, 0, T).unwrap();
    assert!(entries.contains(&(got.0.get(), got.1)), "{got:?}");
}

#[test]
fn dropping_a_registration_removes_it() {
    let (ns, port) = server();
    let reg = ns.register(5, Epid(50)).unwrap();
    let keep = ns.register(6, Epid(60)).unwrap();
    drop(reg);
    assert_eq!(
        query("127.0.0.1", port, 5, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    assert_eq!(
        query("127.0.0.1", port, 6, T).unwrap(),
        (Service::new(6), Epid(60))
    );
    keep.unregister().unwrap();
    assert_eq!(
        query("127.0.0.1", port, 6, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    // The service is free again.
    let _again = ns.register(5, Epid(51)).unwrap();
    assert_eq!(
        query("127.0.0.1", port, 5, T).unwrap(),
        (Service::new(5), Epid(51))
    );
}

#[test]
fn duplicate_registration_is_busy_and_the_first_stays() {
    let (ns, port) = server();
    let _first = ns.register(5, Epid(1)).unwrap();
    let e = ns.register(5, Epid(2)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy);
    assert!(e.message().contains("service 5"), "{e}");
    assert_eq!(
        query("127.0.0.1", port, 5, T).unwrap(),
        (Service::new(5), Epid(1))
    );
}

#[test]
fn service_zero_cannot_be_registered() {
    let (ns, _) = server();
    assert_eq!(
        ns.register(0, Epid(1)).unwrap_err().kind(),
        ErrorKind::Inval
    );
}

#[test]
fn second_handle_registers_with_the_existing_server() {
    let (a, port) = server();
    let b = NameServer::start_on(a.local_addr()).unwrap();
    assert!(!b.is_serving());
    assert_eq!(b.local_addr(), a.local_addr());

    let reg = b.register(5, Epid(0x55)).unwrap();
    assert_eq!(
        query("127.0.0.1", port, 5, T).unwrap(),
        (Service::new(5), Epid(0x55))
    );
    // The serving process sees the remote entry.
    assert_eq!(
        a.register(5, Epid(0x56)).unwrap_err().kind(),
        ErrorKind::Busy
    );
    // And the remote handle sees the server's (ADD is silent on the wire;
    // the check after it is not).
    let _a6 = a.register(6, Epid(0x66)).unwrap();
    let e = b.register(6, Epid(0x67)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy);
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");

    drop(reg); // DEL over the wire
    assert_eq!(
        query("127.0.0.1", port, 5, T).unwrap_err().kind(),
        ErrorKind::NoData
    );

    // With the serving process gone, registering fails cleanly.
    let late = b.register(7, Epid(0x77)).unwrap();
    drop(a);
    assert_eq!(
        b.register(8, Epid(0x88)).unwrap_err().kind(),
        ErrorKind::NoData
    );
    assert_eq!(late.unregister().unwrap_err().kind(), ErrorKind::NoData);
}

#[test]
fn unspecified_address_serves_loopback() {
    let ns = NameServer::start_on("0.0.0.0:0".parse().unwrap()).unwrap();
    assert!(ns.is_serving());
    let port = ns.local_addr().port();
    let _r = ns.register(3, Epid(33)).unwrap();
    assert_eq!(
        query("127.0.0.1", port, 3, T).unwrap(),
        (Service::new(3), Epid(33))
    );
    assert_eq!(
        query("localhost", port, 3, T).unwrap(),
        (Service::new(3), Epid(33))
    );
}

/// Checks that `ns` serves named addresses on one port, loopback first,
/// and holds no wildcard: another socket can still take the port on a
/// loopback address it does not serve.
fn assert_no_wildcard(ns: &NameServer) {
    let addrs = ns.listen_addrs();
    let port = ns.local_addr().port();
    assert_eq!(addrs.first(), Some(&ns.local_addr()));
    assert_eq!(
        ns.local_addr().ip(),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "{addrs:?}"
    );
    for a in addrs {
        assert!(!a.ip().is_unspecified(), "{addrs:?}");
        assert_eq!(a.port(), port, "{addrs:?}");
    }
    // A listener on 0.0.0.0:port would make this bind fail (in use).
    let unserved = SocketAddr::from(([127, 0, 0, 2], port));
    assert!(!addrs.contains(&unserved), "{addrs:?}");
    TcpListener::bind(unserved).expect("the name server holds the wildcard address");
}

#[test]
fn unspecified_address_binds_named_addresses_only() {
    let ns = NameServer::start_on("0.0.0.0:0".parse().unwrap()).unwrap();
    assert!(ns.is_serving());
    assert_no_wildcard(&ns);
    let _r = ns.register(3, Epid(33)).unwrap();
    assert_eq!(
        query("127.0.0.1", ns.local_addr().port(), 3, T).unwrap(),
        (Service::new(3), Epid(33))
    );
}

#[test]
fn a_client_handle_serves_nothing() {
    let (a, _) = server();
    let b = NameServer::start_on(a.local_addr()).unwrap();
    assert!(!b.is_serving());
    assert!(b.listen_addrs().is_empty());
    assert_eq!(a.listen_addrs(), [a.local_addr()]);
}

/// A connection from `source` (any loopback address) to the server on
/// `port`, with `frame` written.
fn sent_from(source: [u8; 4], port: u16, frame: &[u8]) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket
        .connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)).into(), T)
        .unwrap();
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(frame).unwrap();
    s
}

/// A raw C-style command sent from `source` (any loopback address).
fn from_source(source: [u8; 4], port: u16, frame: &[u8]) -> Vec<u8> {
    read_to_close(&mut sent_from(source, port, frame))
}

#[test]
fn every_loopback_source_opens_sessions_but_c_registrations_are_refused() {
    let (_ns, port) = server();
    let needs_session = Reply::NotFound {
        status: STATUS_NEEDS_SESSION,
    }
    .encode();
    // The whole 127/8 range is this host: its C-style ADD is answered (and
    // refused) as the host's, not as a stranger's.
    for (source, service) in [
        ([127, 0, 0, 1], 41),
        ([127, 0, 0, 2], 42),
        ([127, 9, 8, 7], 43),
    ] {
        let add = Request::Add {
            service,
            epid: Epid(u64::from(service)),
        };
        assert_eq!(
            from_source(source, port, &add.encode()),
            needs_session.as_bytes(),
            "{source:?}"
        );
        assert_eq!(
            query("127.0.0.1", port, service, T).unwrap_err().kind(),
            ErrorKind::NoData
        );
        // HELLO from there gets a challenge.
        let answer = from_source_then_close(source, port, &Request::Hello.encode());
        assert!(
            matches!(Reply::decode(&answer), Ok(Reply::Challenge { .. })),
            "{source:?}: {answer:?}"
        );
    }
}

/// Sends `frame` from `source` and reads one reply, then closes.
fn from_source_then_close(source: [u8; 4], port: u16, frame: &[u8]) -> Vec<u8> {
    let mut s = sent_from(source, port, frame);
    let mut header = [0u8; 8];
    s.read_exact(&mut header).unwrap();
    let len = Reply::frame_len(&header).unwrap();
    let mut reply = header.to_vec();
    reply.resize(len, 0);
    s.read_exact(&mut reply[8..]).unwrap();
    reply
}

/// What a server that refuses registrations from the client's address
/// answers, seen through a handle that registers with it.
#[test]
fn a_refused_registration_is_an_access_error() {
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = fake.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut hello = [0u8; 8];
        s.read_exact(&mut hello).unwrap();
        assert_eq!(Request::decode(&hello), Ok(Request::Hello));
        let refusal = Reply::Refused {
            status: STATUS_NOT_LOCAL,
        };
        s.write_all(&refusal.encode()).unwrap();
    });
    let handle = NameServer::start_on(addr).unwrap();
    assert!(!handle.is_serving());
    let e = handle.register(9, Epid(99)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Access, "{e}");
    assert!(e.message().contains("only from its own host"), "{e}");
    assert!(e.message().contains(&addr.to_string()), "{e}");
    server.join().unwrap();
}

/// C's server reads the 8-byte header of HELLO, knows no such op and
/// closes: registering there fails, and says why.
#[test]
fn registering_with_a_server_without_sessions_is_op_not_supp() {
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = fake.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut header = [0u8; 8];
        s.read_exact(&mut header).unwrap();
    });
    let handle = NameServer::start_on(addr).unwrap();
    let e = handle.register(9, Epid(99)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{e}");
    assert!(e.message().contains("no owning sessions"), "{e}");
    server.join().unwrap();
}

#[test]
fn ipv6_loopback() {
    let ns = match NameServer::start_on("[::1]:0".parse().unwrap()) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("skipping: no IPv6 loopback here: {e}");
            return;
        }
    };
    let port = ns.local_addr().port();
    let _r = ns.register(4, Epid(44)).unwrap();
    assert_eq!(
        query("::1", port, 4, T).unwrap(),
        (Service::new(4), Epid(44))
    );
    assert_eq!(
        query("[::1]", port, 4, T).unwrap(),
        (Service::new(4), Epid(44))
    );
    let e = query("::1", port, 5, T).unwrap_err();
    assert!(e.message().contains(&format!("[::1]:{port}")), "{e}");
}

/// The bytes a C client (libfabric `util_ns`, x86) sends and expects.
#[test]
fn c_client_bytes() {
    let (ns, port) = server();
    // ADD service 0x01020304 -> epid 0x1122334455667788: it names no
    // owner, so it is refused with an ACK of -FI_EOPNOTSUPP (which a C
    // client, closing at once, never reads), then the server closes.
    let c_add = [
        0, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
    ];
    let mut s = raw(port);
    s.write_all(&c_add).unwrap();
    assert_eq!(read_to_close(&mut s), [0, 3, 0, 0, 0xff, 0xff, 0xff, 0xa1]);
    let _reg = ns
        .register(0x0102_0304, Epid(0x1122_3344_5566_7788))
        .unwrap();

    // QUERY it: ACK, status 0, service, name.
    let mut s = raw(port);
    s.write_all(&[0, 2, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1]).unwrap();
    assert_eq!(
        read_to_close(&mut s),
        [0, 3, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
    );

    // A miss: ACK with htonl(-FI_ENOENT) and no body.
    let mut s = raw(port);
    s.write_all(&[0, 2, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0]).unwrap();
    assert_eq!(read_to_close(&mut s), [0, 3, 0, 0, 0xff, 0xff, 0xff, 0xfe]);

    // C's DEL, even with the right name, is refused the same way.
    let mut s = raw(port);
    s.write_all(&[
        0, 1, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
    ])
    .unwrap();
    assert_eq!(read_to_close(&mut s), [0, 3, 0, 0, 0xff, 0xff, 0xff, 0xa1]);
    assert_eq!(
        query("127.0.0.1", port, 0x0102_0304, T).unwrap(),
        (Service::new(0x0102_0304), Epid(0x1122_3344_5566_7788))
    );
}

#[test]
fn garbage_is_dropped_and_the_server_goes_on() {
    let (ns, port) = server();
    let _r = ns.register(1, Epid(11)).unwrap();
    let hostile: [&[u8]; 5] = [
        &[9; 8],                               // version 9
        &[0, 7, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], // unknown op
        &[0, 3, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], // ACK as a request
        &[1, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], // version 1 QUERY
        &[0xff; 40],                           // noise
    ];
    for bytes in hostile {
        let mut s = raw(port);
        s.write_all(bytes).unwrap();
        assert_eq!(read_to_close(&mut s), b"", "{bytes:?}");
        assert_eq!(
            query("127.0.0.1", port, 1, T).unwrap(),
            (Service::new(1), Epid(11))
        );
    }
}

#[test]
fn a_stalled_partial_frame_blocks_no_one_and_is_closed() {
    let (ns, port) = server();
    let mut stalled = raw(port);
    stalled.write_all(&[0, 2, 0, 0, 0]).unwrap();
    // While it stalls, others are served.
    let _r = ns.register(2, Epid(22)).unwrap();
    assert_eq!(
        query("127.0.0.1", port, 2, T).unwrap(),
        (Service::new(2), Epid(22))
    );
    // And the server gives up on it (after CONNECTION_TIMEOUT).
    assert_eq!(read_to_close(&mut stalled), b"");
}

#[test]
fn early_close_is_harmless() {
    let (ns, port) = server();
    let _r = ns.register(3, Epid(33)).unwrap();
    for n in [0usize, 3, 8, 11] {
        let mut s = raw(port);
        s.write_all(&Request::Query { service: 3 }.encode()[..n])
            .unwrap();
        drop(s);
        assert_eq!(
            query("127.0.0.1", port, 3, T).unwrap(),
            (Service::new(3), Epid(33))
        );
    }
}

#[test]
fn more_stalled_clients_than_slots_only_delay_others() {
    let (ns, port) = server();
    let _r = ns.register(9, Epid(99)).unwrap();
    let stalled: Vec<TcpStream> = (0..MAX_CONNECTIONS + 8)
        .map(|_| {
            let mut s = raw(port);
            s.write_all(&[0]).unwrap();
            s
        })
        .collect();
    // Queued behind full slots until stalled ones time out.
    assert_eq!(
        query("127.0.0.1", port, 9, T).unwrap(),
        (Service::new(9), Epid(99))
    );
    drop(stalled);
    assert_serves(port);
}

#[test]
fn concurrent_queries() {
    let (ns, port) = server();
    let regs: Vec<_> = (1..=8u32)
        .map(|s| ns.register(s, Epid(u64::from(s) * 100)).unwrap())
        .collect();
    let threads: Vec<_> = (1..=8u32)
        .map(|s| {
            thread::spawn(move || {
                for _ in 0..25 {
                    assert_eq!(
                        query("127.0.0.1", port, s, T).unwrap(),
                        (Service::new(s), Epid(u64::from(s) * 100))
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(regs);
}

#[test]
fn query_without_a_server_is_nodata() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = query("127.0.0.1", port, 1, T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn query_times_out_on_a_silent_server() {
    // The kernel completes the handshake into the backlog; nobody answers.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let e = query("127.0.0.1", port, 1, Duration::from_millis(200)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
}

/// A one-connection fake server that reads the QUERY and sends `reply`.
fn fake_server(reply: &'static [u8]) -> (u16, thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut q = [0u8; 12];
        s.read_exact(&mut q).unwrap();
        assert_eq!(Request::decode(&q), Ok(Request::Query { service: 1 }));
        s.write_all(reply).unwrap();
    });
    (port, t)
}

#[test]
fn malformed_replies_are_io_errors() {
    let cases: [&'static [u8]; 4] = [
        &[0, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], // a QUERY, not an ACK
        &[5, 3, 0, 0, 0, 0, 0, 0],             // version 5
        &[0, 3, 0, 0, 0, 0, 0, 0, 1, 0, 0],    // closes inside the body
        &[0, 3, 0],                            // closes inside the header
    ];
    for reply in cases {
        let (port, t) = fake_server(reply);
        let e = query("127.0.0.1", port, 1, T).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{reply:?}: {e}");
        assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
        t.join().unwrap();
    }
    // A well-formed reply from the same fake works, so the cases above
    // failed for their bytes.
    let good = Reply::Found {
        service: 1,
        epid: Epid(7),
    }
    .encode();
    let good: &'static [u8] = Box::leak(good.to_vec().into_boxed_slice());
    let (port, t) = fake_server(good);
    assert_eq!(
        query("127.0.0.1", port, 1, T).unwrap(),
        (Service::new(1), Epid(7))
    );
    t.join().unwrap();
}

#[test]
fn drop_stops_the_server_promptly() {
    let (ns, port) = server();
    let addr: SocketAddr = ns.local_addr();
    let reg = ns.register(1, Epid(1)).unwrap();
    let mut stalled = raw(port);
    stalled.write_all(&[0, 2]).unwrap();
    assert_serves(port);
    // Drop returns although a client is mid-frame (bounded wait, so a
    // regression fails instead of hanging the suite).
    let (done_tx, done_rx) = mpsc::channel();
    thread::spawn(move || {
        drop(ns);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(T)
        .expect("dropping the NameServer hung");
    assert_eq!(read_to_close(&mut stalled), b"");
    // The listener is gone: the address can be served again at once.
    let again = NameServer::start_on(addr).unwrap();
    assert!(again.is_serving());
    assert_eq!(
        query("127.0.0.1", port, 1, T).unwrap_err().kind(),
        ErrorKind::NoData
    );
    // A registration that outlives its server drops quietly.
    drop(reg);
}

#[test]
fn default_uuid_port() {
    assert_eq!(port_for(&JobUuid::DEFAULT), 64331);
    let ns = NameServer::start(&JobUuid::DEFAULT).unwrap();
    assert_eq!(ns.local_addr().port(), 64331);
    if !ns.is_serving() {
        // Another process on this node serves the default job (C's rule).
        eprintln!("port 64331 is in use; not serving");
        return;
    }
    assert_no_wildcard(&ns);
    let _r = ns.register(0x7e57, Epid(0x7e57)).unwrap();
    assert_eq!(
        query("localhost", 64331, 0x7e57, T).unwrap(),
        (Service::new(0x7e57), Epid(0x7e57))
    );
}
