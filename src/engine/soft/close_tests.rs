//! Graceful close over real sockets: what a closing endpoint reported sent
//! reaches its peer, even when the peer reads it only after the close
//! returned (one thread driving both, as manual progress does), over
//! Unix-domain sockets and over TCP.

use super::protocol::{ConnId, OpId};
use super::wire::{Frame, FrameDecoder, FrameLimits, JobUuid};
use super::{ProtocolConfig, Role, SoftConfig, SoftCore, SoftEndpoint, SoftEngine, SoftEpid};
use crate::engine::{
    EndpointOptions, Engine, EngineEndpoint, MqCompletion, OpBuffer, PeerAddr, SendMode, TagMatch,
};
use crate::reactor::{OpKey, ProgressSource};
use bytes::BytesMut;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) const UUID: [u8; 16] = [0x4c; 16];
/// Generous bound for anything that should take milliseconds.
pub(super) const LIMIT: Duration = Duration::from_secs(20);

fn engine(unix: bool) -> SoftEngine {
    SoftEngine::new(SoftConfig {
        unix_sockets: unix,
        ..SoftConfig::default()
    })
    .unwrap()
}

/// Small socket buffers (so bytes stay unacknowledged, or unwritten,
/// while the peer does not read), a short linger, and a small eager
/// window (so a receiver catching up returns credit, writing to the
/// sender, long before it read everything).
fn engine_small(unix: bool) -> SoftEngine {
    engine_small_on(unix, true)
}

/// As [`engine_small`], with or without shared memory between the two
/// (whose rings are small too).
fn engine_small_on(unix: bool, shared_memory: bool) -> SoftEngine {
    SoftEngine::new(SoftConfig {
        unix_sockets: unix,
        shared_memory,
        shm_ring: 4 << 10,
        socket_buffer: Some(16 << 10),
        linger: Duration::from_millis(300),
        protocol: ProtocolConfig {
            peer_eager_window: 256 << 10,
            ..ProtocolConfig::DEFAULT
        },
        ..SoftConfig::default()
    })
    .unwrap()
}

pub(super) fn open(engine: &SoftEngine) -> Arc<SoftEndpoint> {
    engine
        .open(&EndpointOptions {
            uuid: UUID,
            unit: None,
            port: None,
            close_timeout: Duration::from_secs(5),
        })
        .unwrap()
}

/// Two endpoints that dialed each other at the same time (as the fabric's
/// AV inserts do): each peer has up to two connections.
fn pair(unix: bool) -> (Arc<SoftEndpoint>, Arc<SoftEndpoint>, PeerAddr, PeerAddr) {
    pair_on(&engine(unix))
}

pub(super) fn pair_on(
    e: &SoftEngine,
) -> (Arc<SoftEndpoint>, Arc<SoftEndpoint>, PeerAddr, PeerAddr) {
    let (a, b) = (open(e), open(e));
    let (ab, ba) = std::thread::scope(|s| {
        let t = s.spawn(|| b.connect(&[a.epid()], LIMIT).remove(0));
        let ab = a.connect(&[b.epid()], LIMIT).remove(0).unwrap();
        (ab, t.join().unwrap().unwrap())
    });
    // One message each way, so both hold eager credit: a small send then
    // completes with only its sender progressing.
    for (from, to, peer) in [(&a, &b, ab), (&b, &a, ba)] {
        let r = post_recv(to, 1, 8);
        let s = post_send(from, peer, 1, pattern(8, 1));
        drive(&[&a, &b], from, s, "warm-up send");
        drive(&[&a, &b], to, r, "warm-up receive");
    }
    (a, b, ab, ba)
}

pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

pub(super) fn post_send(ep: &SoftEndpoint, peer: PeerAddr, tag: u64, data: Vec<u8>) -> OpKey {
    let key = ep.completions().insert();
    ep.isend(peer, tag, SendMode::Standard, OpBuffer::from(data), key)
        .map_err(|e| e.error)
        .unwrap();
    key
}

pub(super) fn post_recv(ep: &SoftEndpoint, tag: u64, cap: usize) -> OpKey {
    let key = ep.completions().insert();
    ep.irecv(TagMatch::exact(tag), OpBuffer::from(vec![0u8; cap]), key)
        .map_err(|e| e.error)
        .unwrap();
    key
}

/// Progresses `eps` in turn until `key` of `owner` completes (looking
/// after every call, so the others do not run after it completed).
pub(super) fn drive(
    eps: &[&SoftEndpoint],
    owner: &SoftEndpoint,
    key: OpKey,
    what: &str,
) -> MqCompletion {
    let end = Instant::now() + LIMIT;
    loop {
        for ep in eps {
            if let Some(c) = owner.completions().try_take(key) {
                return c;
            }
            ep.progress();
        }
        assert!(Instant::now() < end, "{what}: no completion");
    }
}

/// The sender closes (a graceful close, bounded by a timeout) right after
/// its send completed, while the receiver has not progressed; the
/// receiver then gets the whole message. Without `recv_first` the message
/// waits unexpected (eager sizes only: a rendezvous send completes only
/// once a receive took it).
fn close_after_send(unix: bool, len: usize, recv_first: bool) {
    let what = format!("unix {unix}, {len} B, receive first {recv_first}");
    let (a, b, ab, _) = pair(unix);
    let data = pattern(len, len as u8);
    let early = recv_first.then(|| post_recv(&b, 7, len));
    let s = post_send(&a, ab, 7, data.clone());
    // Only the sender progresses, unless the transfer needs the receiver
    // (rendezvous).
    let eps: &[&SoftEndpoint] = if len <= 64 { &[&a] } else { &[&a, &b] };
    let c = drive(eps, &a, s, &what);
    assert_eq!(c.status.error, None, "{what}: send {:?}", c.status);
    a.close(Duration::from_secs(5)).unwrap();
    drop(a);
    let r = early.unwrap_or_else(|| post_recv(&b, 7, len));
    let c = drive(&[&b], &b, r, &what);
    assert_eq!(c.status.error, None, "{what}: receive {:?}", c.status);
    assert_eq!(c.status.nbytes, len, "{what}");
    assert!(c.buffer.as_slice() == &data[..], "{what}: bytes differ");
}

#[test]
fn close_right_after_send_delivers_unix() {
    for _ in 0..5 {
        close_after_send(true, 64, true);
        close_after_send(true, 64, false);
        close_after_send(true, 1 << 20, true);
    }
}

#[test]
fn close_right_after_send_delivers_tcp() {
    for _ in 0..5 {
        close_after_send(false, 64, true);
        close_after_send(false, 64, false);
        close_after_send(false, 1 << 20, true);
    }
}

/// The peer of a closed endpoint writes to it before it reads what the
/// endpoint sent (a Unix socket fails the write at once with EPIPE; TCP
/// answers with a reset): what arrived is delivered all the same, and
/// only then is the peer gone.
fn write_before_reading(unix: bool) {
    let what = format!("unix {unix}");
    let (a, b, ab, ba) = pair(unix);
    let r = post_recv(&b, 3, 64);
    let s = post_send(&a, ab, 3, pattern(64, 3));
    let c = drive(&[&a], &a, s, &what);
    assert_eq!(c.status.error, None, "{what}: send {:?}", c.status);
    a.close(Duration::from_secs(5)).unwrap();
    drop(a);
    // Before it reads anything, b sends (and so writes) to a.
    let key = b.completions().insert();
    let posted = b.isend(
        ba,
        4,
        SendMode::Standard,
        OpBuffer::from(vec![1u8; 64]),
        key,
    );
    let c = drive(&[&b], &b, r, &format!("{what}: receive"));
    assert_eq!(c.status.error, None, "{what}: receive {:?}", c.status);
    assert!(c.buffer.as_slice() == &pattern(64, 3)[..], "{what}");
    if posted.is_ok() {
        // Its own send reports whatever happened to it, and nothing hangs.
        drive(&[&b], &b, key, &format!("{what}: send"));
    }
}

#[test]
fn peer_writing_before_it_reads_still_gets_everything_unix() {
    for _ in 0..5 {
        write_before_reading(true);
    }
}

#[test]
fn peer_writing_before_it_reads_still_gets_everything_tcp() {
    for _ in 0..5 {
        write_before_reading(false);
    }
}

/// TCP: the sender's close finds bytes of completed sends still
/// unacknowledged (the receiver, driven by the same thread, cannot read
/// during the close), and the receiver writes to the sender before it has
/// read them all. A closed socket would answer that write with a reset
/// and drop the bytes it had not sent; the lingerer keeps it open, so the
/// receiver gets every message.
#[test]
fn unacknowledged_bytes_survive_the_close_tcp() {
    let (a, b, ab, ba) = pair_on(&engine_small(false));
    let len = 2000;
    let n = 20;
    let keys: Vec<OpKey> = (0..n)
        .map(|i| post_send(&a, ab, 200 + i, pattern(len, i as u8)))
        .collect();
    for k in keys {
        let c = drive(&[&a], &a, k, "send");
        assert_eq!(c.status.error, None, "{:?}", c.status);
    }
    assert_eq!(a.unwritten(), 0, "everything is in the kernel");
    assert!(a.unacked() > 0, "the precondition: bytes in flight");
    a.close(Duration::from_secs(5)).unwrap();
    drop(a);
    let key = b.completions().insert();
    let posted = b.isend(
        ba,
        1,
        SendMode::Standard,
        OpBuffer::from(vec![2u8; 64]),
        key,
    );
    for i in 0..n {
        let r = post_recv(&b, 200 + i, len);
        let c = drive(&[&b], &b, r, &format!("message {i}"));
        assert_eq!(c.status.error, None, "message {i}: {:?}", c.status);
        assert!(c.buffer.as_slice() == &pattern(len, i as u8)[..]);
    }
    if posted.is_ok() {
        drive(&[&b], &b, key, "send");
    }
}

/// The close times out while frames of completed sends still wait in the
/// sender's output buffer (the receiver, driven by the same thread, reads
/// nothing meanwhile): they go to the lingerer with the socket, and every
/// send reported complete arrives.
fn timed_out_close(unix: bool, shared_memory: bool) {
    let what = format!("unix {unix}, shared memory {shared_memory}");
    let (a, b, ab, ba) = pair_on(&engine_small_on(unix, shared_memory));
    if unix && shared_memory {
        // The pair's links moved onto shared memory (the precondition of
        // what follows: output waits for room in a ring).
        for _ in 0..50 {
            a.progress();
            b.progress();
        }
        assert!(a.stats().shm_links >= 1, "{what}: {:?}", a.stats());
    }
    // Below 4 KiB eager payloads are copied: such a send completes once
    // composed, before its bytes are written.
    let len = 2000;
    let keys: Vec<OpKey> = (0..200)
        .map(|i| post_send(&a, ab, 100 + i, pattern(len, i as u8)))
        .collect();
    for _ in 0..20 {
        a.progress();
    }
    let done: Vec<u64> = keys
        .iter()
        .enumerate()
        .filter(|(_, k)| {
            a.completions()
                .try_take(**k)
                .is_some_and(|c| c.status.error.is_none())
        })
        .map(|(i, _)| i as u64)
        .collect();
    assert!(!done.is_empty(), "{what}: some sends completed");
    assert!(
        a.unwritten() > 0 && done.len() < keys.len(),
        "{what}: the precondition (the socket is full, output waits)"
    );
    a.close(Duration::from_millis(100)).unwrap();
    drop(a);
    // The receiver writes to the closed sender before it reads (a closed
    // TCP socket would answer with a reset and drop what it holds).
    let key = b.completions().insert();
    let posted = b.isend(
        ba,
        1,
        SendMode::Standard,
        OpBuffer::from(vec![3u8; 64]),
        key,
    );
    for i in done {
        let r = post_recv(&b, 100 + i, len);
        let c = drive(&[&b], &b, r, &format!("{what}: message {i}"));
        assert_eq!(c.status.error, None, "{what}: message {i}: {:?}", c.status);
        assert!(
            c.buffer.as_slice() == &pattern(len, i as u8)[..],
            "{what}: message {i}: bytes differ"
        );
    }
    if posted.is_ok() {
        drive(&[&b], &b, key, &format!("{what}: send"));
    }
}

#[test]
fn output_of_a_timed_out_close_still_arrives_unix() {
    timed_out_close(true, false);
}

#[test]
fn output_of_a_timed_out_close_still_arrives_shared_memory() {
    timed_out_close(true, true);
}

#[test]
fn output_of_a_timed_out_close_still_arrives_tcp() {
    timed_out_close(false, false);
}

/// An endpoint of `cfg` a [`RawPeer`] can reach: the raw peer claims a
/// made-up epid, so there is no identity check.
fn open_for_raw_peer(cfg: SoftConfig) -> Arc<SoftEndpoint> {
    open(
        &SoftEngine::new(SoftConfig {
            verify_peers: false,
            ..cfg
        })
        .unwrap(),
    )
}

/// A connected socket of the raw peer: TCP or Unix.
trait Wire: Read + Write {}
impl<T: Read + Write> Wire for T {}

/// A peer played by a bare core over plain sockets, so the test decides
/// what reaches the endpoint, on which connection, and when.
struct RawPeer {
    core: SoftCore,
    links: Vec<(Box<dyn Wire>, ConnId, BytesMut)>,
    sends: HashMap<OpId, Vec<u8>>,
}

impl RawPeer {
    fn new() -> RawPeer {
        let epid = SoftEpid::new(Ipv4Addr::LOCALHOST, 1, 5).unwrap().to_epid();
        RawPeer {
            core: SoftCore::new(ProtocolConfig::DEFAULT, epid, JobUuid(UUID)).unwrap(),
            links: Vec::new(),
            sends: HashMap::new(),
        }
    }

    /// Opens a TCP connection to `ep` and sends the Hello; its index.
    fn dial(&mut self, ep: &SoftEndpoint) -> usize {
        let addr = SoftEpid::try_from(ep.epid()).unwrap().socket_addr();
        let s = TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        self.add(ep, Box::new(s))
    }

    /// As [`RawPeer::dial`], over `ep`'s Unix-domain socket.
    fn dial_unix(&mut self, ep: &SoftEndpoint) -> usize {
        let name = super::transport::unix_name(ep.epid()).unwrap();
        let s = UnixStream::connect_addr(&name).unwrap();
        s.set_nonblocking(true).unwrap();
        self.add(ep, Box::new(s))
    }

    fn add(&mut self, ep: &SoftEndpoint, s: Box<dyn Wire>) -> usize {
        let c = self
            .core
            .open_connection(Role::Dialer { expect: ep.epid() });
        self.links.push((s, c, BytesMut::new()));
        self.flush(self.links.len() - 1);
        self.links.len() - 1
    }

    /// Writes what the core has for link `k` (small: the socket takes it).
    fn flush(&mut self, k: usize) {
        let (s, c, _) = &mut self.links[k];
        let mut out = BytesMut::new();
        self.core.poll_transmit(*c, &mut out, 1 << 20, &self.sends);
        s.write_all(&out).unwrap();
        while self.core.poll_event().is_some() {}
    }

    /// Feeds what link `k` has received to the core.
    fn read(&mut self, k: usize) {
        let (s, c, input) = &mut self.links[k];
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("raw peer: {e}"),
            }
        }
        self.core.handle_input(*c, input).unwrap();
        while self.core.poll_event().is_some() {}
    }
}

/// The peer's connection without a Bye ends (the peer crashed, or forced
/// its close) before the endpoint read a message the peer completed on
/// its other connection: the message is delivered before the peer goes
/// down. The endpoint reads the ended connection first (it accepted it
/// first), so without taking in the others' input first the message
/// would be failed with the peer, unread.
#[test]
fn messages_on_other_connections_arrive_before_the_peer_goes_down() {
    let b = open_for_raw_peer(SoftConfig {
        unix_sockets: false,
        ..SoftConfig::default()
    });
    let mut p = RawPeer::new();
    // Accepted first, established second at the peer: not its send
    // connection.
    let first = p.dial(&b);
    let second = p.dial(&b);
    for _ in 0..20 {
        b.progress();
    }
    p.read(second);
    p.read(first);
    let peer = p.core.peer_of(b.epid()).expect("connected");
    // One message on the send connection (eager credit came with the
    // handshake answers).
    let r = post_recv(&b, 8, 64);
    p.sends.insert(OpId(1), pattern(64, 8));
    p.core
        .send(peer, 8, 64, SendMode::Standard, OpId(1))
        .unwrap();
    let mut sent = BytesMut::new();
    let (_, c, _) = &p.links[second];
    p.core.poll_transmit(*c, &mut sent, 1 << 20, &p.sends);
    let dec = FrameDecoder::new(FrameLimits::DEFAULT);
    let mut frames = sent.clone();
    let mut eager = false;
    while let Some(f) = dec.decode(&mut frames).unwrap() {
        eager |= matches!(f, Frame::Eager { .. });
    }
    assert!(eager, "the message went on the second connection");
    p.links[second].0.write_all(&sent).unwrap();
    // The peer vanishes: EOF on both, no Bye.
    drop(p);
    let c = drive(&[&b], &b, r, "the message");
    assert_eq!(c.status.error, None, "{:?}", c.status);
    assert!(c.buffer.as_slice() == &pattern(64, 8)[..]);
}

/// One step of the endpoint: a Unix connection of the peer's, read up to
/// the read budget, answers the peer and finds its write broken (the peer
/// closed it, more bytes still unread); then a dial to the same peer that
/// the peer never accepted ends (reset): it names no peer yet. The broken
/// connection is read to its end before it is lost, so a message the peer
/// completed on it arrives.
#[test]
fn a_broken_link_is_read_before_an_unnamed_one_ends_it() {
    let b = open_for_raw_peer(SoftConfig {
        unix_sockets: true,
        shared_memory: false,
        max_read: 4 << 10,
        read_budget: 4 << 10,
        ..SoftConfig::default()
    });
    let mut p = RawPeer::new();
    let peer_epid = p.core.epid();
    // The endpoint dials the peer, which listens but never accepts.
    let backlog =
        UnixListener::bind_addr(&super::transport::unix_name(peer_epid).unwrap()).unwrap();
    let unnamed = b.start_dial(peer_epid);
    // The peer's own connection: handshake.
    let k = p.dial_unix(&b);
    for _ in 0..20 {
        b.progress();
        p.read(k);
    }
    let peer = p.core.peer_of(b.epid()).expect("connected");
    let named = b.open_links();
    assert_eq!(named.len(), 1, "one connection completed its handshake");
    // A rendezvous request (the endpoint answers it with a clear to send
    // as soon as it read it), bulk the budget stops in, then the message.
    let rts = post_recv(&b, 9, 128 << 10);
    let r = post_recv(&b, 8, 64);
    let sends = [(9, 128 << 10), (10, 12 << 10), (8, 64)];
    for (n, &(tag, len)) in sends.iter().enumerate() {
        let op = OpId(n as u64 + 1);
        p.sends.insert(op, pattern(len, tag as u8));
        p.core
            .send(peer, tag, len as u64, SendMode::Standard, op)
            .unwrap();
    }
    let mut out = BytesMut::new();
    p.core
        .poll_transmit(p.links[k].1, &mut out, 1 << 20, &p.sends);
    assert!(out.len() > 8 << 10, "more than one read budget");
    p.links[k].0.write_all(&out).unwrap();
    // The peer goes: its connection closes, the unaccepted one resets.
    drop(p);
    drop(backlog);
    let (broken, ended) = b.service_readable(named[0]);
    assert!(
        broken && !ended,
        "the precondition: a broken write, bytes unread"
    );
    b.service_readable(unnamed);
    let c = drive(&[&b], &b, r, "the message");
    assert_eq!(c.status.error, None, "{:?}", c.status);
    assert!(c.buffer.as_slice() == &pattern(64, 8)[..]);
    // The rendezvous never got its data: it fails, nothing hangs.
    let c = drive(&[&b], &b, rts, "the rendezvous receive");
    assert!(c.status.error.is_some(), "{:?}", c.status);
}
