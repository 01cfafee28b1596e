//! Protocol tests: cores wired back to back in memory, frames delivered
//! step by step (quinn-proto's `Pair`, for several nodes).

use super::wire::{
    encode, Frame, FrameKind, FrameLimits, HandshakeError, Hello, JobUuid, Refusal, Refuse,
    PROTOCOL_VERSION,
};
use super::*;
use crate::engine::{Epid, MqStatus, PeerAddr, SendMode, TagMatch};
use crate::ErrorKind;
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use std::collections::HashMap;
use std::net::Ipv4Addr;

mod trust;

const UUID: JobUuid = JobUuid([0x5a; 16]);

/// Small sizes so every path (eager, rendezvous, chunking, credit) is hit
/// with small messages.
fn small() -> ProtocolConfig {
    ProtocolConfig {
        eager_threshold: 64,
        chunk_size: 48,
        unexpected_budget: 4096,
        peer_eager_window: 1024,
        peer_rts_window: 4,
        peer_am_window: 2,
        ..ProtocolConfig::DEFAULT
    }
}

fn epid(i: usize) -> Epid {
    SoftEpid::new(Ipv4Addr::LOCALHOST, 9000 + i as u16, 0)
        .unwrap()
        .to_epid()
}

#[derive(Debug)]
struct Done {
    status: MqStatus,
    data: Vec<u8>,
}

type AmSeen = (PeerAddr, u16, Vec<u64>, Vec<u8>);

/// One endpoint: a core plus what its edge would own.
struct Node {
    core: SoftCore,
    sends: HashMap<OpId, Vec<u8>>,
    recvs: HashMap<OpId, Vec<u8>>,
    done: HashMap<OpId, Done>,
    connected: Vec<(ConnId, PeerAddr, Epid)>,
    resumed: Vec<(ConnId, Option<ConnId>)>,
    closed: Vec<(ConnId, Option<ConnError>)>,
    down: Vec<(PeerAddr, ConnError)>,
    am_requests: Vec<AmSeen>,
    am_replies: Vec<AmSeen>,
    hooked: Vec<(PeerAddr, Vec<u8>)>,
    /// Shared-memory exchange events: which, on what, the offer's length.
    shm: Vec<(&'static str, ConnId, u64)>,
    /// Pulls asked for: connection, token, receive, address, length.
    pulls: Vec<(ConnId, u64, OpId, u64, usize)>,
    max_unexpected: u64,
    next_op: u64,
}

impl Node {
    fn new(config: ProtocolConfig, epid: Epid, uuid: JobUuid) -> Node {
        Node {
            core: SoftCore::new(config, epid, uuid).unwrap(),
            sends: HashMap::new(),
            recvs: HashMap::new(),
            done: HashMap::new(),
            connected: Vec::new(),
            resumed: Vec::new(),
            closed: Vec::new(),
            down: Vec::new(),
            am_requests: Vec::new(),
            am_replies: Vec::new(),
            hooked: Vec::new(),
            shm: Vec::new(),
            pulls: Vec::new(),
            max_unexpected: 0,
            next_op: 1,
        }
    }

    fn op(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }

    fn send(&mut self, peer: PeerAddr, tag: u64, data: Vec<u8>, mode: SendMode) -> OpId {
        let op = self.op();
        self.core
            .send(peer, tag, data.len() as u64, mode, op)
            .unwrap();
        self.sends.insert(op, data);
        op
    }

    fn recv(&mut self, tags: TagMatch, cap: usize) -> OpId {
        let op = self.op();
        self.recvs.insert(op, vec![0; cap]);
        self.core.recv(tags, cap, op).unwrap();
        self.pump();
        op
    }

    /// What the edge does with events.
    fn pump(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::Connected { conn, peer, epid } => self.connected.push((conn, peer, epid)),
                Event::Resumed { conn, replaced } => self.resumed.push((conn, replaced)),
                Event::Verify { conn, .. } => self.core.verified(conn, Ok(())),
                Event::ShmOffered { conn, segment_len } => {
                    self.shm.push(("offered", conn, segment_len))
                }
                Event::ShmPeerMoved { conn } => self.shm.push(("moved", conn, 0)),
                Event::ShmDeclined { conn } => self.shm.push(("declined", conn, 0)),
                Event::Pull {
                    conn,
                    token,
                    op,
                    addr,
                    len,
                } => self.pulls.push((conn, token, op, addr, len)),
                Event::ConnectionClosed { conn, error } => self.closed.push((conn, error)),
                Event::PeerDown { peer, error, .. } => self.down.push((peer, error)),
                Event::Place { op, offset, bytes } => {
                    let buf = self.recvs.get_mut(&op).expect("Place into a live receive");
                    buf[offset..offset + bytes.len()].copy_from_slice(&bytes);
                }
                Event::Complete { op, status } => {
                    let data = match self.recvs.remove(&op) {
                        Some(b) => b[..status.nbytes].to_vec(),
                        None => {
                            self.sends.remove(&op).expect("Complete of a live op");
                            Vec::new()
                        }
                    };
                    let prev = self.done.insert(op, Done { status, data });
                    assert!(prev.is_none(), "{op:?} completed twice");
                }
                Event::AmRequest {
                    token,
                    source,
                    handler,
                    args,
                    payload,
                } => {
                    self.am_requests.push((
                        source,
                        handler,
                        args.as_slice().to_vec(),
                        payload.to_vec(),
                    ));
                    if handler == 1 {
                        // Reply to handler 2 with the sum and the payload reversed.
                        let sum = args.as_slice().iter().sum::<u64>();
                        let mut p = payload.to_vec();
                        p.reverse();
                        self.core
                            .am_reply(token, 2, &[sum, args.len() as u64], &p)
                            .map_err(|(_, e)| e)
                            .unwrap();
                    } else {
                        self.core.am_done(token);
                    }
                }
                Event::Hooked { source, payload } => self.hooked.push((source, payload.to_vec())),
                Event::AmReply {
                    source,
                    handler,
                    args,
                    payload,
                } => self.am_replies.push((
                    source,
                    handler,
                    args.as_slice().to_vec(),
                    payload.to_vec(),
                )),
            }
        }
        let s = self.core.stats();
        let budget = self.core.config().unexpected_budget;
        assert!(
            s.unexpected_bytes - s.departed_bytes + s.granted_eager <= budget,
            "budget exceeded: {s:?}"
        );
        assert!(
            s.departed_bytes <= budget,
            "departed peers hold too much: {s:?}"
        );
        self.max_unexpected = self.max_unexpected.max(s.unexpected_bytes);
    }

    fn status(&self, op: OpId) -> MqStatus {
        self.done
            .get(&op)
            .unwrap_or_else(|| panic!("{op:?} not done"))
            .status
    }
}

struct Dir {
    /// Bytes transmitted, not yet delivered.
    flight: BytesMut,
    /// The receiving connection's input buffer.
    input: BytesMut,
}

struct Link {
    ends: [(usize, ConnId); 2],
    dirs: [Dir; 2],
}

/// Nodes and the links between them.
struct Net {
    nodes: Vec<Node>,
    links: Vec<Link>,
}

impl Net {
    fn new(configs: &[ProtocolConfig]) -> Net {
        Net {
            nodes: configs
                .iter()
                .enumerate()
                .map(|(i, c)| Node::new(c.clone(), epid(i), UUID))
                .collect(),
            links: Vec::new(),
        }
    }

    /// Node `i` dials node `j`; returns the link.
    fn dial(&mut self, i: usize, j: usize) -> usize {
        let expect = self.nodes[j].core.epid();
        let ci = self.nodes[i].core.open_connection(Role::Dialer { expect });
        let cj = self.nodes[j].core.open_connection(Role::Acceptor);
        let dir = || Dir {
            flight: BytesMut::new(),
            input: BytesMut::new(),
        };
        self.links.push(Link {
            ends: [(i, ci), (j, cj)],
            dirs: [dir(), dir()],
        });
        self.links.len() - 1
    }

    fn peer(&self, i: usize, j: usize) -> PeerAddr {
        let e = self.nodes[j].core.epid();
        self.nodes[i].core.peer_of(e).expect("connected")
    }

    /// Lets end `d` of link `l` transmit up to about `limit` bytes.
    fn transmit(&mut self, l: usize, d: usize, limit: usize) -> usize {
        let (n, c) = self.links[l].ends[d];
        let flight = &mut self.links[l].dirs[d].flight;
        let node = &mut self.nodes[n];
        let lim = flight.len() + limit;
        let wrote = node.core.poll_transmit(c, flight, lim, &node.sends);
        node.pump();
        wrote
    }

    /// Delivers up to `max` in-flight bytes from end `d` to the other end.
    fn deliver(&mut self, l: usize, d: usize, max: usize) -> usize {
        let (n, c) = self.links[l].ends[1 - d];
        let dir = &mut self.links[l].dirs[d];
        let k = max.min(dir.flight.len());
        if k == 0 {
            return 0;
        }
        let chunk = dir.flight.split_to(k);
        dir.input.extend_from_slice(&chunk);
        let node = &mut self.nodes[n];
        let _ = node.core.handle_input(c, &mut dir.input);
        node.pump();
        k
    }

    fn step(&mut self) -> bool {
        let mut moved = 0;
        for l in 0..self.links.len() {
            for d in 0..2 {
                moved += self.transmit(l, d, 1 << 16);
                moved += self.deliver(l, d, usize::MAX);
            }
        }
        moved > 0
    }

    fn run(&mut self) {
        for _ in 0..100_000 {
            if !self.step() {
                return;
            }
        }
        panic!("the network did not settle");
    }

    /// Two nodes, connected.
    fn pair(a: ProtocolConfig, b: ProtocolConfig) -> Net {
        let mut net = Net::new(&[a, b]);
        net.dial(0, 1);
        net.run();
        assert_eq!(net.nodes[0].connected.len(), 1);
        assert_eq!(net.nodes[1].connected.len(), 1);
        net
    }
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ----- handshake ------------------------------------------------------------

#[test]
fn handshake_connects_both_sides() {
    let net = Net::pair(small(), small());
    let (c0, p0, e0) = net.nodes[0].connected[0];
    let (_, p1, e1) = net.nodes[1].connected[0];
    assert_eq!((e0, e1), (epid(1), epid(0)));
    assert_eq!(net.nodes[0].core.peer_epid(p0), Some(epid(1)));
    assert_eq!(net.nodes[1].core.peer_epid(p1), Some(epid(0)));
    assert!(net.nodes[0].core.is_peer_up(p0));
    assert_eq!(
        net.nodes[0].core.connection_phase(c0),
        Some(ConnPhase::Established)
    );
    assert_eq!(net.nodes[0].core.connection_peer(c0), Some(p0));
}

fn handshake_error(n: &Node) -> HandshakeError {
    match &n.closed[..] {
        [(_, Some(ConnError::Handshake(h)))] => h.clone(),
        other => panic!("expected one handshake failure, got {other:?}"),
    }
}

#[test]
fn other_job_is_refused_on_both_sides() {
    let mut net = Net::new(&[small(), small()]);
    net.nodes[1] = Node::new(small(), epid(1), JobUuid([0x77; 16]));
    net.dial(0, 1);
    net.run();
    let at_acceptor = handshake_error(&net.nodes[1]);
    let at_dialer = handshake_error(&net.nodes[0]);
    assert_eq!(
        at_acceptor,
        HandshakeError::Refused(Refusal::UuidMismatch {
            ours: JobUuid([0x77; 16]),
            theirs: UUID
        })
    );
    // The refusal does not carry the acceptor's UUID: the dialer knows
    // only that its own was refused.
    assert_eq!(
        at_dialer,
        HandshakeError::RefusedByPeer(Refusal::OtherJob { ours: UUID })
    );
    let e = ConnError::Handshake(at_dialer);
    assert_eq!(e.kind(), ErrorKind::ConnRefused);
    assert!(e.to_string().contains("another job"), "{e}");
    assert!(net.nodes.iter().all(|n| n.connected.is_empty()));
}

/// Feeds raw frames to a fresh core's connection; returns what it answered.
fn raw_exchange(role: Role, frames: &[Frame]) -> (Node, ConnId, Vec<Frame>) {
    let mut node = Node::new(small(), epid(0), UUID);
    let conn = node.core.open_connection(role);
    let mut out = BytesMut::new();
    node.core
        .poll_transmit(conn, &mut out, 1 << 16, &node.sends);
    let mut input = BytesMut::new();
    for f in frames {
        encode(f, &mut input);
    }
    let _ = node.core.handle_input(conn, &mut input);
    node.pump();
    node.core
        .poll_transmit(conn, &mut out, 1 << 16, &node.sends);
    let dec = super::wire::FrameDecoder::new(FrameLimits::DEFAULT);
    let mut answered = Vec::new();
    while let Some(f) = dec.decode(&mut out).unwrap() {
        answered.push(f);
    }
    (node, conn, answered)
}

fn their_hello(version: u16, magic: [u8; 8]) -> Hello {
    Hello {
        magic,
        version,
        ..Hello::ours(UUID, epid(1), FrameLimits::DEFAULT)
    }
}

#[test]
fn other_version_is_refused_on_both_sides() {
    let v2 = PROTOCOL_VERSION + 1;
    // An acceptor judging a newer dialer's Hello.
    let (node, _, answered) = raw_exchange(
        Role::Acceptor,
        &[Frame::Hello(their_hello(v2, super::wire::MAGIC))],
    );
    let want = Refusal::VersionMismatch {
        ours: PROTOCOL_VERSION,
        theirs: v2,
    };
    assert_eq!(
        handshake_error(&node),
        HandshakeError::Refused(want.clone())
    );
    let [Frame::Refuse(r)] = &answered[..] else {
        panic!("{answered:?}")
    };
    // The newer dialer reads the Refuse and sees the mirror image.
    let dialer_view = their_hello(v2, super::wire::MAGIC);
    assert_eq!(
        Refusal::from_frame(r, &dialer_view),
        Refusal::VersionMismatch {
            ours: v2,
            theirs: PROTOCOL_VERSION
        }
    );
    // A dialer refused by a newer acceptor...
    let refuse = Refuse {
        code: super::wire::RefuseCode::VersionMismatch,
        version: v2,
        uuid: UUID,
    };
    let (node, _, answered) =
        raw_exchange(Role::Dialer { expect: epid(1) }, &[Frame::Refuse(refuse)]);
    assert_eq!(
        handshake_error(&node),
        HandshakeError::RefusedByPeer(want.clone())
    );
    assert!(answered
        .iter()
        .all(|f| matches!(f, Frame::Hello(_) | Frame::Session { .. })));
    // ... and a dialer judging a newer acceptor's HelloAck refuses it.
    let (node, _, answered) = raw_exchange(
        Role::Dialer { expect: epid(1) },
        &[Frame::HelloAck(their_hello(v2, super::wire::MAGIC))],
    );
    assert_eq!(handshake_error(&node), HandshakeError::Refused(want));
    assert!(
        matches!(answered.last(), Some(Frame::Refuse(r)) if r.code == super::wire::RefuseCode::VersionMismatch)
    );
}

#[test]
fn bad_magic_and_wrong_first_frames_are_refused() {
    let (node, _, answered) = raw_exchange(
        Role::Acceptor,
        &[Frame::Hello(their_hello(PROTOCOL_VERSION, *b"NOTOURS!"))],
    );
    assert_eq!(
        handshake_error(&node),
        HandshakeError::Refused(Refusal::BadMagic)
    );
    assert!(
        matches!(&answered[..], [Frame::Refuse(r)] if r.code == super::wire::RefuseCode::BadMagic)
    );
    // Data before the handshake.
    let (node, _, answered) = raw_exchange(
        Role::Acceptor,
        &[Frame::Eager {
            tag: 1,
            payload: Bytes::from_static(b"early"),
        }],
    );
    assert_eq!(
        handshake_error(&node),
        HandshakeError::UnexpectedFrame {
            got: super::wire::FrameKind::Eager
        }
    );
    assert!(
        matches!(&answered[..], [Frame::Refuse(r)] if r.code == super::wire::RefuseCode::Protocol)
    );
    // A dialer reaching another endpoint than the one it dialed.
    let (node, _, _) = raw_exchange(
        Role::Dialer { expect: epid(5) },
        &[Frame::HelloAck(their_hello(
            PROTOCOL_VERSION,
            super::wire::MAGIC,
        ))],
    );
    assert_eq!(
        handshake_error(&node),
        HandshakeError::WrongEpid {
            expected: epid(5),
            got: epid(1)
        }
    );
}

// ----- eager and rendezvous ---------------------------------------------------

/// Sends `len` bytes from node 0 to node 1, with the receive posted before
/// or after the message arrived; returns the receive's result.
fn one_message(len: usize, cap: usize, recv_first: bool, mode: SendMode) -> (Net, OpId, OpId) {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let payload = data(len, 7);
    let r = if recv_first {
        Some(net.nodes[1].recv(TagMatch::exact(42), cap))
    } else {
        None
    };
    let s = net.nodes[0].send(p, 42, payload, mode);
    net.run();
    let r = match r {
        Some(r) => r,
        None => {
            assert_eq!(net.nodes[1].core.stats().unexpected_msgs, 1);
            let r = net.nodes[1].recv(TagMatch::exact(42), cap);
            net.run();
            r
        }
    };
    (net, s, r)
}

fn check_delivery(len: usize, cap: usize, recv_first: bool, mode: SendMode) {
    let (net, s, r) = one_message(len, cap, recv_first, mode);
    let got = &net.nodes[1].done[&r];
    let n = len.min(cap);
    assert_eq!(got.data, data(len, 7)[..n], "len {len} cap {cap}");
    assert_eq!(got.status.msg_len, len as u64);
    assert_eq!(got.status.nbytes, n);
    assert_eq!(got.status.tag, 42);
    assert_eq!(got.status.source, Some(net.peer(1, 0)));
    let trunc = (len > cap).then_some(ErrorKind::Trunc);
    assert_eq!(got.status.error, trunc);
    let sent = net.nodes[0].status(s);
    assert_eq!(
        (sent.error, sent.msg_len, sent.nbytes),
        (None, len as u64, len)
    );
    assert_eq!(net.nodes[1].core.stats().unexpected_msgs, 0);
    assert_eq!(net.nodes[1].core.stats().posted_recvs, 0);
}

#[test]
fn peer_activity_grows_with_what_arrives_from_the_peer() {
    let mut net = Net::pair(small(), small());
    let (to_b, to_a) = (net.peer(0, 1), net.peer(1, 0));
    let before = net.nodes[1].core.peer_activity(to_a);
    net.nodes[1].recv(TagMatch::exact(5), 64);
    net.nodes[0].send(to_b, 5, data(40, 1), SendMode::Standard);
    net.run();
    let after = net.nodes[1].core.peer_activity(to_a);
    assert!(after > before, "activity {before} -> {after}");
    // Unknown peers have none.
    assert_eq!(net.nodes[1].core.peer_activity(PeerAddr(0xdead)), 0);
}

#[test]
fn eager_before_and_after_the_receive() {
    check_delivery(40, 100, true, SendMode::Standard);
    check_delivery(40, 100, false, SendMode::Standard);
    check_delivery(64, 64, false, SendMode::Standard);
}

#[test]
fn hooked_tag_takes_eager_messages_and_leaves_the_rest_to_matching() {
    let mut net = Net::pair(small(), small());
    let (to_b, to_a) = (net.peer(0, 1), net.peer(1, 0));
    net.nodes[1].core.set_hook_tag(Some(9));
    // A receive for the hooked tag never sees its eager messages.
    let posted = net.nodes[1].recv(TagMatch::exact(9), 64);
    let window = net.nodes[1].core.stats().granted_eager;
    for i in 0..50u8 {
        net.nodes[0].send(to_b, 9, data(40, i), SendMode::Standard);
        net.run();
    }
    let hooked = &net.nodes[1].hooked;
    assert_eq!(hooked.len(), 50);
    for (i, (source, bytes)) in hooked.iter().enumerate() {
        assert_eq!((*source, bytes.clone()), (to_a, data(40, i as u8)));
    }
    // Nothing waits unexpected, and the credit came back: 50 messages of
    // 40 bytes are more than the peer's 1024-byte window.
    let s = net.nodes[1].core.stats();
    assert_eq!((s.unexpected_msgs, s.unexpected_bytes), (0, 0));
    assert!(s.granted_eager <= window);
    assert!(!net.nodes[1].done.contains_key(&posted));
    // Other tags match as before; a hooked tag by rendezvous too.
    let other = net.nodes[1].recv(TagMatch::exact(3), 64);
    net.nodes[0].send(to_b, 3, data(20, 1), SendMode::Standard);
    net.nodes[0].send(to_b, 9, data(500, 2), SendMode::Standard);
    net.run();
    assert_eq!(net.nodes[1].done[&other].data, data(20, 1));
    assert_eq!(net.nodes[1].done[&posted].status.msg_len, 500);
    assert_eq!(net.nodes[1].hooked.len(), 50);
    // Unhooked, the tag's eager messages match again.
    net.nodes[1].core.set_hook_tag(None);
    net.nodes[0].send(to_b, 9, data(30, 3), SendMode::Standard);
    net.run();
    assert_eq!(net.nodes[1].core.stats().unexpected_msgs, 1);
    assert_eq!(net.nodes[1].hooked.len(), 50);
}

#[test]
fn rendezvous_before_and_after_the_receive() {
    // 500 bytes over 48-byte chunks.
    check_delivery(500, 600, true, SendMode::Standard);
    check_delivery(500, 500, false, SendMode::Standard);
}

#[test]
fn large_message_waiting_unexpected_holds_only_its_header() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    net.nodes[0].send(p, 1, data(3000, 1), SendMode::Standard);
    net.run();
    let s = net.nodes[1].core.stats();
    assert_eq!((s.unexpected_msgs, s.unexpected_bytes), (1, 0));
    let probe = net.nodes[1].core.probe(TagMatch::ANY).unwrap();
    assert_eq!((probe.msg_len, probe.tag), (3000, 1));
}

#[test]
fn zero_byte_messages() {
    check_delivery(0, 0, true, SendMode::Standard);
    check_delivery(0, 0, false, SendMode::Standard);
    check_delivery(0, 10, false, SendMode::Synchronous);
    check_delivery(0, 0, true, SendMode::Synchronous);
}

#[test]
fn truncation_reports_both_lengths() {
    check_delivery(60, 10, true, SendMode::Standard); // eager
    check_delivery(60, 10, false, SendMode::Standard);
    check_delivery(1000, 100, true, SendMode::Standard); // rendezvous
    check_delivery(1000, 100, false, SendMode::Standard);
    check_delivery(1000, 0, false, SendMode::Standard);
    let (net, _, r) = one_message(1000, 100, false, SendMode::Standard);
    let st = net.nodes[1].status(r);
    assert_eq!(
        (st.msg_len, st.nbytes, st.error),
        (1000, 100, Some(ErrorKind::Trunc))
    );
}

#[test]
fn synchronous_send_completes_only_after_the_match() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let s = net.nodes[0].send(p, 9, data(10, 0), SendMode::Synchronous);
    net.run();
    assert!(
        !net.nodes[0].done.contains_key(&s),
        "completed before any receive"
    );
    let r = net.nodes[1].recv(TagMatch::exact(9), 10);
    net.run();
    assert_eq!(net.nodes[0].status(s).error, None);
    assert_eq!(net.nodes[1].done[&r].data, data(10, 0));
}

#[test]
fn matching_respects_posting_order_and_per_peer_order() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    // Receives: exact 5, any, exact 5.
    let r1 = net.nodes[1].recv(TagMatch::exact(5), 600);
    let r2 = net.nodes[1].recv(TagMatch::ANY, 600);
    let r3 = net.nodes[1].recv(TagMatch::exact(5), 600);
    // Mixed protocols from one peer: rendezvous first, eager after.
    net.nodes[0].send(p, 5, data(500, 1), SendMode::Standard);
    net.nodes[0].send(p, 5, data(10, 2), SendMode::Standard);
    net.nodes[0].send(p, 6, data(20, 3), SendMode::Standard);
    net.run();
    let n = &net.nodes[1];
    assert_eq!(n.done[&r1].data, data(500, 1));
    assert_eq!(n.done[&r2].data, data(10, 2));
    assert_eq!(n.core.stats().unexpected_msgs, 1, "tag 6 waits");
    assert!(!n.done.contains_key(&r3));
}

#[test]
fn probe_does_not_consume() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    net.nodes[0].send(p, 3, data(30, 4), SendMode::Standard);
    net.run();
    for _ in 0..2 {
        let st = net.nodes[1].core.probe(TagMatch::exact(3)).unwrap();
        assert_eq!(
            (st.tag, st.msg_len, st.source),
            (3, 30, Some(net.peer(1, 0)))
        );
    }
    assert!(net.nodes[1].core.probe(TagMatch::exact(4)).is_none());
    let r = net.nodes[1].recv(TagMatch::ANY, 30);
    assert_eq!(net.nodes[1].done[&r].data, data(30, 4));
    assert!(net.nodes[1].core.probe(TagMatch::ANY).is_none());
}

#[test]
fn cancel_before_match() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let r = net.nodes[1].recv(TagMatch::exact(1), 10);
    assert!(net.nodes[1].core.cancel(r));
    net.nodes[1].pump();
    assert_eq!(net.nodes[1].status(r).error, Some(ErrorKind::Canceled));
    assert!(!net.nodes[1].core.cancel(r), "only once");
    net.nodes[0].send(p, 1, data(5, 0), SendMode::Standard);
    net.run();
    assert_eq!(
        net.nodes[1].core.stats().unexpected_msgs,
        1,
        "the cancelled receive took nothing"
    );
    // Too late once matched; sends are not cancellable.
    let r2 = net.nodes[1].recv(TagMatch::exact(1), 10);
    assert!(!net.nodes[1].core.cancel(r2));
    assert_eq!(net.nodes[1].status(r2).error, None);
    let s = net.nodes[0].send(p, 2, data(5, 0), SendMode::Synchronous);
    assert!(!net.nodes[0].core.cancel(s));
}

#[test]
fn operation_ids_must_be_unique() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    net.nodes[1].core.recv(TagMatch::ANY, 1, OpId(500)).unwrap();
    let e = net.nodes[1]
        .core
        .recv(TagMatch::ANY, 1, OpId(500))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    net.nodes[0]
        .core
        .send(p, 0, 0, SendMode::Synchronous, OpId(500))
        .unwrap();
    let e = net.nodes[0]
        .core
        .send(p, 0, 0, SendMode::Standard, OpId(500))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let e = net.nodes[0]
        .core
        .send(PeerAddr(999), 0, 0, SendMode::Standard, OpId(501))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let e = net.nodes[0]
        .core
        .send(p, 0, u64::from(u32::MAX) + 1, SendMode::Standard, OpId(502))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize);
}

// ----- AM ----------------------------------------------------------------------

#[test]
fn am_request_gets_a_computed_reply() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    net.nodes[0]
        .core
        .am_request(p, 1, &[2, 3, 37], b"abc")
        .unwrap();
    net.run();
    assert_eq!(
        net.nodes[1].am_requests,
        vec![(net.peer(1, 0), 1, vec![2, 3, 37], b"abc".to_vec())]
    );
    assert_eq!(
        net.nodes[0].am_replies,
        vec![(p, 2, vec![42, 3], b"cba".to_vec())]
    );
}

#[test]
fn am_limits_and_credit() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let core = &mut net.nodes[0].core;
    let e = core.am_request(p, 1, &[0; 11], b"").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let e = core.am_request(p, 1, &[], &[0; 8129]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize);
    let e = core.am_request(p, 256, &[], b"").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    core.am_request(p, 1, &[0; 10], &[1; 8128]).unwrap();
    // The window is 2 requests: the third waits for credit.
    core.am_request(p, 3, &[], b"").unwrap();
    assert_eq!(
        core.am_request(p, 3, &[], b"").unwrap_err().kind(),
        ErrorKind::Again
    );
    net.run();
    assert_eq!(net.nodes[1].am_requests.len(), 2);
    // Credit came back (after the reply went out, and for the unanswered one).
    net.nodes[0].core.am_request(p, 3, &[], b"").unwrap();
    net.nodes[0].core.am_request(p, 3, &[], b"").unwrap();
    net.run();
    assert_eq!(net.nodes[1].am_requests.len(), 4);
    assert_eq!(net.nodes[0].am_replies.len(), 1);
}

#[test]
fn am_reply_beyond_limits_returns_the_token() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    net.nodes[0].core.am_request(p, 7, &[], b"").unwrap();
    let l = 0;
    net.transmit(l, 0, 1 << 16);
    let (n, c) = net.links[l].ends[1];
    let dir = &mut net.links[l].dirs[0];
    let mut input = dir.flight.split();
    net.nodes[n].core.handle_input(c, &mut input).unwrap();
    let token = loop {
        match net.nodes[n].core.poll_event() {
            Some(Event::AmRequest { token, .. }) => break token,
            Some(_) => continue,
            None => panic!("no request"),
        }
    };
    let (token, e) = net.nodes[n]
        .core
        .am_reply(token, 2, &[0; 11], b"")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert_eq!(token.source(), net.peer(1, 0));
    net.nodes[n].core.am_reply(token, 2, &[1], b"ok").unwrap();
    net.run();
    assert_eq!(
        net.nodes[0].am_replies,
        vec![(p, 2, vec![1], b"ok".to_vec())]
    );
}

// ----- back-pressure -------------------------------------------------------------

#[test]
fn unexpected_budget_holds_the_sender_and_releases_it() {
    let cfg = ProtocolConfig {
        unexpected_budget: 600,
        peer_eager_window: 400,
        peer_rts_window: 2,
        ..small()
    };
    let mut net = Net::pair(small(), cfg);
    let p = net.peer(0, 1);
    let sends: Vec<OpId> = (0..20)
        .map(|i| net.nodes[0].send(p, 8, data(50, i), SendMode::Standard))
        .collect();
    net.run();
    // The receiver holds at most its budget; the rest waits at the sender.
    let rx = net.nodes[1].core.stats();
    assert!(rx.unexpected_bytes <= 600, "{rx:?}");
    let held = net.nodes[0].core.stats().queued_sends;
    assert!(held > 0, "the sender is held");
    let waiting = rx.unexpected_msgs;
    assert_eq!(
        held + waiting,
        20,
        "nothing dropped: every message is queued somewhere"
    );
    // Two went as rendezvous (header only, the rendezvous window) once
    // eager credit ran out; the others hold their bytes.
    assert_eq!(rx.unexpected_bytes % (50 + 64), 0, "{rx:?}");
    let eager = (rx.unexpected_bytes / (50 + 64)) as usize;
    assert_eq!(rx.unexpected_msgs - eager, 2, "{rx:?}");
    // Draining the receiver releases the sender, in order.
    let recvs: Vec<OpId> = (0..20)
        .map(|_| net.nodes[1].recv(TagMatch::exact(8), 64))
        .collect();
    net.run();
    for (i, r) in recvs.iter().enumerate() {
        assert_eq!(net.nodes[1].done[r].data, data(50, i as u8), "message {i}");
    }
    assert!(sends
        .iter()
        .all(|s| net.nodes[0].status(*s).error.is_none()));
    assert_eq!(net.nodes[0].core.stats().queued_sends, 0);
    assert!(net.nodes[1].max_unexpected <= 600);
}

#[test]
fn queued_sends_answer_again_beyond_the_limit() {
    let cfg = ProtocolConfig {
        max_queued_sends: 3,
        ..small()
    };
    let mut net = Net::pair(cfg, small());
    let p = net.peer(0, 1);
    for i in 0..3 {
        net.nodes[0].send(p, 0, data(1, i), SendMode::Standard);
    }
    let e = net.nodes[0]
        .core
        .send(p, 0, 1, SendMode::Standard, OpId(9999))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Again);
}

// ----- failures ------------------------------------------------------------------

#[test]
fn peer_failure_mid_rendezvous_fails_pending_ops_on_both_sides() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let r = net.nodes[1].recv(TagMatch::exact(1), 1000);
    let s = net.nodes[0].send(p, 1, data(1000, 9), SendMode::Standard);
    let waiting = net.nodes[0].send(p, 2, data(10, 0), SendMode::Synchronous);
    let never = net.nodes[1].recv(TagMatch::exact(99), 10);
    // Handshake done; let Rts, Cts and a few chunks through.
    for _ in 0..3 {
        net.transmit(0, 0, 100);
        net.deliver(0, 0, usize::MAX);
        net.transmit(0, 1, 100);
        net.deliver(0, 1, usize::MAX);
    }
    net.transmit(0, 0, 100);
    net.deliver(0, 0, usize::MAX);
    assert!(!net.nodes[1].done.contains_key(&r), "still streaming");
    // Both edges see the TCP connection die.
    let (c0, c1) = (net.links[0].ends[0].1, net.links[0].ends[1].1);
    net.nodes[0].core.connection_lost(c0, "reset by peer");
    net.nodes[1].core.connection_lost(c1, "reset by peer");
    net.nodes[0].pump();
    net.nodes[1].pump();
    for (node, op) in [(0, s), (0, waiting), (1, r)] {
        let st = net.nodes[node].status(op);
        assert_eq!(st.error, Some(ErrorKind::Io), "node {node} {op:?}");
    }
    let got = net.nodes[1].status(r);
    assert!(got.nbytes > 0 && got.nbytes < 1000, "partial: {got:?}");
    assert_eq!(net.nodes[1].done[&r].data, data(1000, 9)[..got.nbytes]);
    assert!(
        !net.nodes[1].done.contains_key(&never),
        "receives are not tied to a peer"
    );
    for n in &net.nodes {
        assert!(
            matches!(&n.down[..], [(_, ConnError::Lost(_))]),
            "{:?}",
            n.down
        );
    }
    assert!(!net.nodes[0].core.is_peer_up(p));
    let e = net.nodes[0]
        .core
        .send(p, 0, 0, SendMode::Standard, OpId(7777))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert_eq!(net.nodes[0].core.stats().connections, 0);
}

#[test]
fn dead_peer_rendezvous_requests_leave_the_unexpected_queue() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    net.nodes[0].send(p, 1, data(10, 1), SendMode::Standard);
    net.nodes[0].send(p, 1, data(1000, 2), SendMode::Standard);
    net.run();
    assert_eq!(net.nodes[1].core.stats().unexpected_msgs, 2);
    let c1 = net.links[0].ends[1].1;
    net.nodes[1].core.connection_lost(c1, "eof");
    // The complete eager message stays receivable, the Rts does not.
    assert_eq!(net.nodes[1].core.stats().unexpected_msgs, 1);
    let r = net.nodes[1].recv(TagMatch::ANY, 10);
    assert_eq!(net.nodes[1].done[&r].data, data(10, 1));
    assert_eq!(net.nodes[1].core.stats().unexpected_bytes, 0);
}

#[test]
fn malformed_frame_closes_only_that_connection() {
    let mut net = Net::new(&[small(), small(), small()]);
    net.dial(0, 1);
    net.dial(2, 1);
    net.run();
    // Node 2's link to node 1 turns to garbage.
    net.links[1].dirs[0]
        .flight
        .extend_from_slice(&[0x10, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    net.deliver(1, 0, usize::MAX);
    let n1 = &net.nodes[1];
    assert!(matches!(
        &n1.closed[..],
        [(
            _,
            Some(ConnError::Wire(super::wire::WireError::TooLong { .. }))
        )]
    ));
    assert_eq!(n1.down.len(), 1);
    // Node 0 to node 1 still works.
    let p = net.peer(0, 1);
    net.nodes[0].send(p, 1, data(300, 3), SendMode::Standard);
    let r = net.nodes[1].recv(TagMatch::ANY, 300);
    net.run();
    assert_eq!(net.nodes[1].done[&r].data, data(300, 3));
}

#[test]
fn frames_beyond_credit_are_violations() {
    let mut net = Net::pair(small(), small());
    let (_, c) = net.links[0].ends[1];
    // 20 Eager frames of 60 bytes: more than the 1024-byte window.
    let mut input = BytesMut::new();
    for _ in 0..20 {
        encode(
            &Frame::Eager {
                tag: 0,
                payload: Bytes::from(vec![0; 60]),
            },
            &mut input,
        );
    }
    let e = net.nodes[1].core.handle_input(c, &mut input).unwrap_err();
    assert!(
        matches!(e, ConnError::Protocol(Violation::EagerCredit { .. })),
        "{e}"
    );
    net.nodes[1].pump();
    // The 8 messages within credit (8 × 124 bytes of 1024) arrived whole
    // and stay receivable; the connection closed at the 9th.
    let st = net.nodes[1].core.stats();
    assert_eq!(
        (st.unexpected_msgs, st.unexpected_bytes, st.granted_eager),
        (8, 8 * 124, 0)
    );
    assert!(matches!(
        &net.nodes[1].down[..],
        [(_, ConnError::Protocol(_))]
    ));
}

#[test]
fn unknown_tokens_and_msg_ids_are_violations() {
    for (frame, want) in [
        (
            Frame::Data {
                token: 77,
                offset: 0,
                payload: Bytes::from_static(b"x"),
            },
            Violation::UnknownToken(77),
        ),
        (
            Frame::Cts {
                msg_id: 5,
                token: 0,
                len: 0,
            },
            Violation::UnknownMsgId(5),
        ),
        (
            Frame::Hello(their_hello(1, super::wire::MAGIC)),
            Violation::UnexpectedFrame(super::wire::FrameKind::Hello),
        ),
    ] {
        let mut net = Net::pair(small(), small());
        let (_, c) = net.links[0].ends[1];
        let mut input = BytesMut::new();
        encode(&frame, &mut input);
        let e = net.nodes[1].core.handle_input(c, &mut input).unwrap_err();
        assert_eq!(e, ConnError::Protocol(want));
    }
}

// ----- closing and loopback ----------------------------------------------------------

#[test]
fn graceful_close_waits_for_transfers_then_says_bye() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let s = net.nodes[0].send(p, 1, data(400, 5), SendMode::Standard);
    net.nodes[0].core.close_peer(p);
    assert_eq!(
        net.nodes[0]
            .core
            .send(p, 1, 1, SendMode::Standard, OpId(4242))
            .unwrap_err()
            .kind(),
        ErrorKind::Io
    );
    net.run();
    assert!(
        net.nodes[0].closed.is_empty(),
        "the Rts waits for a receive"
    );
    let r = net.nodes[1].recv(TagMatch::ANY, 400);
    net.run();
    assert_eq!(net.nodes[1].done[&r].data, data(400, 5));
    assert_eq!(net.nodes[0].status(s).error, None);
    assert!(matches!(&net.nodes[0].closed[..], [(_, None)]));
    assert!(matches!(
        &net.nodes[1].closed[..],
        [(_, Some(ConnError::PeerClosed))]
    ));
    assert!(matches!(
        &net.nodes[1].down[..],
        [(_, ConnError::PeerClosed)]
    ));
}

/// Two nodes that dialed each other: the peer has two connections, and
/// node 0 sends on one of them only.
fn crossed_pair() -> Net {
    let mut net = Net::new(&[small(), small()]);
    net.dial(0, 1);
    net.dial(1, 0);
    net.run();
    assert_eq!(net.nodes[0].connected.len(), 2);
    assert_eq!(net.nodes[1].connected.len(), 2);
    net
}

/// Moves everything node `n` has to send on every link into flight.
fn transmit_all(net: &mut Net, n: usize) {
    for l in 0..net.links.len() {
        let d = usize::from(net.links[l].ends[1].0 == n);
        while net.transmit(l, d, 1 << 16) > 0 {}
    }
}

/// Delivers everything in flight from node `n` on link `l`.
fn deliver_from(net: &mut Net, l: usize, n: usize) {
    let d = usize::from(net.links[l].ends[1].0 == n);
    net.deliver(l, d, usize::MAX);
}

#[test]
fn bye_on_one_connection_leaves_the_others_delivering() {
    // Frames on different connections are not ordered: the Bye of the
    // connection that carried nothing may be read before the messages
    // on the other one. They must still arrive (the regression: the Bye
    // took the whole peer down and the messages were lost unread).
    for first in [0, 1] {
        let mut net = crossed_pair();
        let p = net.peer(0, 1);
        let r_eager = net.nodes[1].recv(TagMatch::exact(1), 64);
        let s_eager = net.nodes[0].send(p, 1, data(30, 1), SendMode::Standard);
        transmit_all(&mut net, 0);
        assert_eq!(
            net.nodes[0].status(s_eager).error,
            None,
            "eager: complete once in the transmit buffer"
        );
        net.nodes[0].core.shutdown();
        transmit_all(&mut net, 0);
        assert_eq!(net.nodes[0].closed.len(), 2, "Bye on both connections");
        deliver_from(&mut net, first, 0);
        if !net.nodes[1].done.contains_key(&r_eager) {
            // The message is on the other connection: the peer stays up
            // with it, though its first connection said Bye.
            assert!(net.nodes[1].down.is_empty(), "first {first}");
            assert!(matches!(
                &net.nodes[1].closed[..],
                [(_, Some(ConnError::PeerClosed))]
            ));
        }
        deliver_from(&mut net, 1 - first, 0);
        let got = &net.nodes[1].done[&r_eager];
        assert_eq!((got.status.error, &got.data), (None, &data(30, 1)));
        assert!(
            matches!(&net.nodes[1].down[..], [(_, ConnError::PeerClosed)]),
            "one PeerDown, after the last Bye: {:?}",
            net.nodes[1].down
        );
        assert_eq!(net.nodes[1].closed.len(), 2);
        assert!(!net.nodes[1].core.is_peer_up(net.peer(1, 0)));
    }
}

#[test]
fn bye_fails_what_is_left_on_its_connection_only() {
    let mut net = crossed_pair();
    let p = net.peer(1, 0);
    // Node 1 sends a rendezvous message node 0 never receives; node 0
    // closes (its connections are drained: the Rts waits in its queue).
    let s = net.nodes[1].send(p, 5, data(500, 3), SendMode::Standard);
    net.run();
    assert_eq!(net.nodes[0].core.stats().unexpected_msgs, 1);
    assert!(!net.nodes[1].done.contains_key(&s));
    net.nodes[0].core.shutdown();
    transmit_all(&mut net, 0);
    for l in 0..2 {
        deliver_from(&mut net, l, 0);
    }
    let st = net.nodes[1].status(s);
    assert_eq!(st.error, Some(ErrorKind::Io), "{st:?}");
    assert!(matches!(
        &net.nodes[1].down[..],
        [(_, ConnError::PeerClosed)]
    ));
}

#[test]
fn shutdown_closes_handshaking_connections_at_once() {
    let mut net = Net::new(&[small(), small()]);
    net.dial(0, 1);
    net.nodes[0].core.shutdown();
    net.nodes[0].pump();
    assert!(matches!(
        &net.nodes[0].closed[..],
        [(_, Some(ConnError::Closed))]
    ));
}

#[test]
fn the_process_reaches_itself() {
    let mut net = Net::new(&[small()]);
    net.dial(0, 0);
    net.run();
    assert_eq!(net.nodes[0].connected.len(), 2, "both ends of the loopback");
    let me = net.peer(0, 0);
    let r1 = net.nodes[0].recv(TagMatch::ANY, 100);
    net.nodes[0].send(me, 1, data(20, 1), SendMode::Standard);
    net.nodes[0].send(me, 2, data(700, 2), SendMode::Standard);
    net.nodes[0].core.am_request(me, 1, &[40, 2], b"!").unwrap();
    net.run();
    let r2 = net.nodes[0].recv(TagMatch::exact(2), 700);
    net.run();
    assert_eq!(net.nodes[0].done[&r1].data, data(20, 1));
    assert_eq!(net.nodes[0].done[&r2].data, data(700, 2));
    assert_eq!(
        net.nodes[0].am_replies,
        vec![(me, 2, vec![42, 2], b"!".to_vec())]
    );
}

#[test]
fn smaller_peer_limits_are_respected() {
    // Node 1 accepts 16-byte eager payloads and 8-byte chunks only.
    let tiny = ProtocolConfig {
        eager_threshold: 16,
        chunk_size: 8,
        ..small()
    };
    let mut net = Net::pair(small(), tiny);
    let p = net.peer(0, 1);
    net.nodes[0].send(p, 1, data(40, 1), SendMode::Standard); // rendezvous for node 1
    let r = net.nodes[1].recv(TagMatch::ANY, 40);
    net.run();
    assert_eq!(net.nodes[1].done[&r].data, data(40, 1));
    assert!(net.nodes[1].closed.is_empty());
}

// ----- random interleavings -------------------------------------------------------------

#[derive(Clone, Debug)]
enum Act {
    Send {
        from: usize,
        to: usize,
        class: u64,
        len: usize,
    },
    Recv {
        at: usize,
        filter: u8,
        class: u64,
        src: usize,
        cap: usize,
    },
    Cancel {
        at: usize,
        pick: usize,
    },
    Transmit {
        link: usize,
        dir: usize,
        limit: usize,
    },
    Deliver {
        link: usize,
        dir: usize,
        max: usize,
    },
    Step,
}

const NODES: usize = 3;
/// A triangle plus one loopback per node.
const LINKS: usize = 6;

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        5 => (0..NODES, 0..NODES, 0u64..3, prop_oneof![2 => 8usize..=64, 1 => 65usize..200])
            .prop_map(|(from, to, class, len)| Act::Send { from, to, class, len }),
        4 => (0..NODES, 0u8..4, 0u64..3, 0..NODES, 8usize..220)
            .prop_map(|(at, filter, class, src, cap)| Act::Recv { at, filter, class, src, cap }),
        1 => (0..NODES, any::<usize>()).prop_map(|(at, pick)| Act::Cancel { at, pick }),
        4 => (0usize..LINKS, 0usize..2, 1usize..300).prop_map(|(link, dir, limit)| Act::Transmit { link, dir, limit }),
        4 => (0usize..LINKS, 0usize..2, 1usize..300).prop_map(|(link, dir, max)| Act::Deliver { link, dir, max }),
        1 => Just(Act::Step),
    ]
}

/// Tags carry the sender (bits 4..8) and a class (bits 0..4); the first 8
/// bytes of a payload carry the message's id.
fn tag_of(from: usize, class: u64) -> u64 {
    ((from as u64) << 4) | class
}

fn filter(f: u8, class: u64, src: usize) -> TagMatch {
    match f {
        0 => TagMatch::exact(tag_of(src, class)),
        1 => TagMatch::ANY,
        2 => TagMatch::new(class, 0xf),
        _ => TagMatch::new(tag_of(src, 0), 0xf0),
    }
}

struct Sent {
    from: usize,
    to: usize,
    tag: u64,
    payload: Vec<u8>,
    op: OpId,
}

fn run_interleaving(acts: Vec<Act>, cfg: ProtocolConfig) -> std::result::Result<(), TestCaseError> {
    let mut net = Net::new(&[cfg.clone(), cfg.clone(), cfg]);
    net.dial(0, 1);
    net.dial(1, 2);
    net.dial(2, 0);
    for i in 0..NODES {
        net.dial(i, i); // each process reaches itself too
    }
    net.run();
    let mut sent: Vec<Sent> = Vec::new();
    // Per node: receives in posting order, with their filter.
    let mut posted: Vec<Vec<(OpId, TagMatch)>> = vec![Vec::new(); NODES];
    let mut cancelled: Vec<OpId> = Vec::new();
    for a in acts {
        match a {
            Act::Send {
                from,
                to,
                class,
                len,
            } => {
                let id = sent.len() as u64;
                let mut payload = data(len, id as u8);
                payload[..8].copy_from_slice(&id.to_le_bytes());
                let p = net.peer(from, to);
                let tag = tag_of(from, class);
                let op = net.nodes[from].send(p, tag, payload.clone(), SendMode::Standard);
                sent.push(Sent {
                    from,
                    to,
                    tag,
                    payload,
                    op,
                });
            }
            Act::Recv {
                at,
                filter: f,
                class,
                src,
                cap,
            } => {
                let t = filter(f, class, src);
                let op = net.nodes[at].recv(t, cap);
                posted[at].push((op, t));
            }
            Act::Cancel { at, pick } => {
                if !posted[at].is_empty() {
                    let (op, _) = posted[at][pick % posted[at].len()];
                    let was_done = net.nodes[at].done.contains_key(&op);
                    let ok = net.nodes[at].core.cancel(op);
                    net.nodes[at].pump();
                    prop_assert!(!(ok && was_done), "cancelled a finished receive");
                    if ok {
                        cancelled.push(op);
                    }
                }
            }
            Act::Transmit { link, dir, limit } => {
                net.transmit(link, dir, limit);
            }
            Act::Deliver { link, dir, max } => {
                net.deliver(link, dir, max);
            }
            Act::Step => {
                net.step();
            }
        }
    }
    net.run();
    // Drain: enough catch-all receives for whatever is still unexpected.
    for (at, node_posted) in posted.iter_mut().enumerate() {
        while net.nodes[at].core.stats().unexpected_msgs > 0 {
            let op = net.nodes[at].recv(TagMatch::ANY, 256);
            node_posted.push((op, TagMatch::ANY));
            net.run();
        }
    }
    net.run();
    // Every send finished successfully.
    for s in &sent {
        let st = net.nodes[s.from].status(s.op);
        prop_assert_eq!(st.error, None);
    }
    // Every message was received exactly once, intact, by a matching
    // receive; no receive overtook an earlier matching message of its peer.
    let mut got_by: HashMap<u64, (usize, usize)> = HashMap::new(); // id -> (node, post index)
    for (at, node_posted) in posted.iter().enumerate() {
        for (idx, (op, t)) in node_posted.iter().enumerate() {
            let Some(d) = net.nodes[at].done.get(op) else {
                continue; // still posted: nothing left for it
            };
            if d.status.error == Some(ErrorKind::Canceled) {
                prop_assert!(cancelled.contains(op));
                continue;
            }
            let id = u64::from_le_bytes(d.data[..8].try_into().unwrap());
            let s = &sent[id as usize];
            prop_assert_eq!(s.to, at);
            prop_assert!(t.matches(s.tag));
            prop_assert_eq!(d.status.tag, s.tag);
            prop_assert_eq!(d.status.source, Some(net.peer(at, s.from)));
            prop_assert_eq!(d.status.msg_len, s.payload.len() as u64);
            prop_assert_eq!(&d.data[..], &s.payload[..d.status.nbytes]);
            let trunc = d.status.nbytes < s.payload.len();
            prop_assert_eq!(d.status.error, trunc.then_some(ErrorKind::Trunc));
            prop_assert!(
                got_by.insert(id, (at, idx)).is_none(),
                "message {} twice",
                id
            );
        }
    }
    prop_assert_eq!(got_by.len(), sent.len(), "every message received");
    for (i, m1) in sent.iter().enumerate() {
        for m2 in sent.iter().skip(i + 1) {
            if (m1.from, m1.to) != (m2.from, m2.to) {
                continue;
            }
            let id2 = u64::from_le_bytes(m2.payload[..8].try_into().unwrap());
            let (at, idx2) = got_by[&id2];
            let (_, t2) = posted[at][idx2];
            if t2.matches(m1.tag) {
                let id1 = u64::from_le_bytes(m1.payload[..8].try_into().unwrap());
                let (_, idx1) = got_by[&id1];
                prop_assert!(idx1 < idx2, "message {} overtook {}", id2, id1);
            }
        }
    }
    for n in &net.nodes {
        prop_assert!(n.closed.is_empty(), "{:?}", n.closed);
        prop_assert!(n.max_unexpected <= n.core.config().unexpected_budget);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn random_interleavings_deliver_every_message_once_in_order(
        acts in proptest::collection::vec(act(), 1..160),
        tight in any::<bool>(),
    ) {
        let cfg = if tight {
            // Credit runs out constantly: downgrades to rendezvous and held sends.
            ProtocolConfig { unexpected_budget: 700, peer_eager_window: 300, peer_rts_window: 2, ..small() }
        } else {
            small()
        };
        run_interleaving(acts, cfg)?;
    }
}

// ----- resources: credit, departed peers ------------------------------------------

/// The eager credit node 0 granted on its connection `conn` and that was
/// not spent yet.
fn granted_to(net: &Net, conn: ConnId) -> u64 {
    net.nodes[0].core.connection_credit(conn)
}

#[test]
fn idle_connections_cannot_take_the_credit_active_ones_need() {
    // Budget 4096 in windows of 1024; a reserve of one window stays for
    // connections that send. Node 1 connects first and sends; nodes 2..6
    // connect and stay idle.
    let mut net = Net::new(&vec![small(); 7]);
    let mut conns = Vec::new();
    for n in 1..7 {
        let l = net.dial(n, 0);
        net.run();
        conns.push(net.links[l].ends[1].1);
    }
    let windows: Vec<u64> = conns.iter().map(|c| granted_to(&net, *c)).collect();
    assert_eq!(
        windows,
        vec![1024, 1024, 1024, 0, 0, 0],
        "idle newcomers stop at the reserve"
    );
    // Node 1 sends 8 messages (8 x 114 bytes of credit) and node 0
    // receives them: the credit comes back to node 1, the active one,
    // not to the idle ones waiting.
    let p = net.peer(1, 0);
    for round in 0..3u8 {
        let sends: Vec<OpId> = (0..8)
            .map(|i| net.nodes[1].send(p, 9, data(50, round * 8 + i), SendMode::Standard))
            .collect();
        net.run();
        // All eager: unexpected and charged (a rendezvous costs nothing).
        let st = net.nodes[0].core.stats();
        assert_eq!(
            (st.unexpected_msgs, st.unexpected_bytes),
            (8, 8 * 114),
            "round {round}: node 1 kept its eager credit"
        );
        for _ in 0..8 {
            net.nodes[0].recv(TagMatch::exact(9), 64);
        }
        net.run();
        assert!(sends
            .iter()
            .all(|s| net.nodes[1].status(*s).error.is_none()));
    }
    let idle: Vec<u64> = conns[3..].iter().map(|c| granted_to(&net, *c)).collect();
    assert_eq!(idle, vec![0, 0, 0], "the idle ones got nothing meanwhile");
    // A newcomer that sends (a rendezvous, with no eager credit) is
    // active: it gets credit from the reserve.
    let p6 = net.peer(6, 0);
    net.nodes[6].send(p6, 7, data(500, 1), SendMode::Standard);
    net.run();
    assert_eq!(granted_to(&net, conns[5]), 1024);
}

#[test]
fn departed_peers_messages_can_be_dropped_and_the_peer_forgotten() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    let theirs = net.peer(1, 0);
    for i in 0..3 {
        net.nodes[1].send(theirs, 5, data(40, i), SendMode::Standard);
    }
    net.run();
    assert_eq!(net.nodes[0].core.stats().unexpected_msgs, 3);
    let (conn, other) = (net.links[0].ends[0].1, net.links[0].ends[1].1);
    // A connected peer, or one with messages waiting, stays.
    assert!(!net.nodes[0].core.forget_peer(p));
    net.nodes[0].core.connection_lost(conn, "gone");
    net.nodes[0].pump();
    net.nodes[1].core.connection_lost(other, "gone");
    net.nodes[1].pump();
    assert!(!net.nodes[0].core.is_peer_up(p));
    // Its messages are still receivable.
    let r = net.nodes[0].recv(TagMatch::exact(5), 64);
    assert_eq!(net.nodes[0].done[&r].data, data(40, 0));
    assert_eq!(net.nodes[0].done[&r].status.source, Some(p));
    assert!(!net.nodes[0].core.forget_peer(p));
    // Dropped, they free their budget.
    assert_eq!(net.nodes[0].core.drop_unexpected_from(p), 2);
    assert_eq!(net.nodes[0].core.stats().unexpected_bytes, 0);
    assert_eq!(net.nodes[0].core.drop_unexpected_from(p), 0);
    // Forgotten: the handle names nothing any more.
    assert_eq!(net.nodes[0].core.stats().peers, 1);
    assert!(net.nodes[0].core.forget_peer(p));
    assert_eq!(net.nodes[0].core.stats().peers, 0);
    assert_eq!(net.nodes[0].core.peer_epid(p), None);
    assert_eq!(net.nodes[0].core.peer_of(epid(1)), None);
    let e = net.nodes[0]
        .core
        .send(p, 1, 4, SendMode::Standard, OpId(1 << 40))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
    assert!(e.message().contains("forgotten"), "{e}");
    // The same epid connecting again is a new peer.
    net.dial(1, 0);
    net.run();
    let again = net.peer(0, 1);
    assert_ne!(again, p);
    assert_eq!(net.nodes[0].core.peer_epid(again), Some(epid(1)));
    let r = net.nodes[0].recv(TagMatch::exact(6), 8);
    let theirs = net.nodes[1]
        .core
        .peer_of(epid(0))
        .expect("node 1 knows node 0");
    net.nodes[1].send(theirs, 6, data(8, 9), SendMode::Standard);
    net.run();
    assert_eq!(net.nodes[0].done[&r].status.source, Some(again));
}

#[test]
fn closing_one_connection_leaves_the_peer_up_on_the_others() {
    let mut net = crossed_pair();
    let p = net.peer(0, 1);
    let (c0, c1) = (net.links[0].ends[0].1, net.links[1].ends[1].1);
    assert_eq!(net.nodes[0].core.peer_connections(p), 2);
    assert!(net.nodes[0].core.connection_idle(c0));
    net.nodes[0].core.close_connection(c0);
    net.run();
    assert_eq!(net.nodes[0].core.peer_connections(p), 1);
    assert!(net.nodes[0].core.is_peer_up(p));
    assert!(net.nodes[0].down.is_empty() && net.nodes[1].down.is_empty());
    // Messages go on the other connection, both ways.
    let r = net.nodes[1].recv(TagMatch::exact(3), 600);
    net.nodes[0].send(p, 3, data(600, 3), SendMode::Standard);
    let back = net.peer(1, 0);
    let r0 = net.nodes[0].recv(TagMatch::exact(4), 30);
    net.nodes[1].send(back, 4, data(30, 4), SendMode::Standard);
    net.run();
    assert_eq!(net.nodes[1].done[&r].data, data(600, 3));
    assert_eq!(net.nodes[0].done[&r0].data, data(30, 4));
    // Closing the last one takes the peer down gracefully.
    net.nodes[0].core.close_connection(c1);
    net.run();
    assert!(!net.nodes[0].core.is_peer_up(p));
    assert!(matches!(&net.nodes[0].down[..], [(_, ConnError::Closed)]));
}

#[test]
fn transmit_hints_name_the_connections_with_frames() {
    let mut net = crossed_pair();
    let p = net.peer(0, 1);
    let mut hints = Vec::new();
    assert!(net.nodes[0].core.take_transmit_hints(&mut hints));
    hints.clear();
    net.nodes[0].send(p, 1, data(10, 1), SendMode::Standard);
    assert!(net.nodes[0].core.take_transmit_hints(&mut hints));
    assert!(!hints.is_empty());
    assert!(hints.iter().all(|c| net.nodes[0].core.wants_transmit(*c)));
    hints.clear();
    assert!(net.nodes[0].core.take_transmit_hints(&mut hints));
    assert!(hints.is_empty(), "taken once");
    // Every connection that wants to transmit was named.
    net.nodes[0].core.am_request(p, 0, &[], b"x").unwrap();
    net.nodes[0].core.close_peer(p);
    assert!(net.nodes[0].core.take_transmit_hints(&mut hints));
    let wanting: Vec<ConnId> = net.nodes[0].core.transmit_pending().collect();
    assert!(!wanting.is_empty());
    assert!(
        wanting.iter().all(|c| hints.contains(c)),
        "{wanting:?} {hints:?}"
    );
}

// ----- links: acknowledgements and resumption ---------------------------------

/// The transport of link `l` breaks: what was in flight is lost, both
/// ends detach, and the dialer (end 0) comes back on a new connection
/// that node `ends[1]` accepts. Returns the new link.
fn break_and_redial(net: &mut Net, l: usize) -> usize {
    let [(i, ci), (j, cj)] = net.links[l].ends;
    for d in &mut net.links[l].dirs {
        d.flight.clear();
        d.input.clear();
    }
    assert!(net.nodes[i].core.detach(ci), "the dialer's link detaches");
    assert!(net.nodes[j].core.detach(cj), "the acceptor's link detaches");
    net.nodes[i].core.resume(ci).unwrap();
    let accepted = net.nodes[j].core.open_connection(Role::Acceptor);
    let dir = || Dir {
        flight: BytesMut::new(),
        input: BytesMut::new(),
    };
    // The old link carries nothing any more.
    net.links[l].ends = [(i, ConnId(u64::MAX)), (j, ConnId(u64::MAX))];
    net.links.push(Link {
        ends: [(i, ci), (j, accepted)],
        dirs: [dir(), dir()],
    });
    let nl = net.links.len() - 1;
    // The handshake: once the acceptor resumed, its end is the old id.
    for _ in 0..10 {
        net.step();
        if let Some(&(conn, Some(replaced))) = net.nodes[j].resumed.last() {
            assert_eq!((conn, replaced), (cj, accepted));
            net.links[nl].ends[1] = (j, cj);
            return nl;
        }
    }
    panic!("the acceptor did not resume the link");
}

#[test]
fn a_broken_link_resumes_and_every_message_arrives_once_in_order() {
    let mut net = Net::pair(small(), small());
    let p = net.peer(0, 1);
    // Eager and rendezvous messages (small() sets a low eager threshold),
    // one tag: only the send order decides which receive gets which.
    let sizes: Vec<usize> = (0..40).map(|k| [3, 700, 9000, 1, 40_000][k % 5]).collect();
    let recvs: Vec<OpId> = sizes
        .iter()
        .map(|&n| net.nodes[1].recv(TagMatch::exact(5), n))
        .collect();
    let sends: Vec<OpId> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| net.nodes[0].send(p, 5, data(n, k as u8), SendMode::Standard))
        .collect();
    // Part of the traffic crosses, part is in flight when the link breaks.
    for _ in 0..6 {
        net.transmit(0, 0, 5000);
        net.deliver(0, 0, 3000);
        net.transmit(0, 1, 5000);
        net.deliver(0, 1, 3000);
    }
    let before = net.nodes[1].done.len();
    break_and_redial(&mut net, 0);
    net.run();
    assert!(before < recvs.len(), "the break came mid-traffic");
    for (k, (&r, &n)) in recvs.iter().zip(&sizes).enumerate() {
        let got = &net.nodes[1].done[&r];
        assert_eq!(got.status.error, None, "message {k}");
        assert_eq!(got.data, data(n, k as u8), "message {k}");
    }
    for s in sends {
        assert_eq!(net.nodes[0].status(s).error, None);
    }
    assert_eq!(net.nodes[0].resumed.len(), 1, "the dialer resumed once");
    assert!(net.nodes[0].down.is_empty() && net.nodes[1].down.is_empty());
}

#[test]
fn a_resumption_naming_an_unknown_link_is_refused() {
    let mut net = Net::pair(small(), small());
    let [(_, c0), _] = net.links[0].ends;
    for d in &mut net.links[0].dirs {
        d.flight.clear();
    }
    // Only the dialer detaches and comes back; the acceptor forgot the
    // link (as after a restart at the same address).
    assert!(net.nodes[0].core.detach(c0));
    let [_, (_, c1)] = net.links[0].ends;
    net.nodes[1].core.connection_lost(c1, "restart");
    net.nodes[1].pump();
    net.nodes[0].core.resume(c0).unwrap();
    let accepted = net.nodes[1].core.open_connection(Role::Acceptor);
    net.links[0].ends[1] = (1, accepted);
    net.run();
    assert!(matches!(
        net.nodes[0].closed.last(),
        Some((c, Some(ConnError::Handshake(HandshakeError::RefusedByPeer(Refusal::UnknownLink)))))
            if *c == c0
    ));
}

#[test]
fn an_idle_link_acknowledges_so_its_peer_keeps_nothing() {
    // A window wide enough that the receiver sends nothing back (no
    // credit frame carries an acknowledgement).
    let roomy = ProtocolConfig {
        peer_eager_window: 64 << 10,
        unexpected_budget: 1 << 20,
        ..small()
    };
    let mut net = Net::pair(roomy.clone(), roomy);
    let p = net.peer(0, 1);
    let [(_, c0), (_, c1)] = net.links[0].ends;
    // Eager messages (no acknowledgement is due for them), some KiB,
    // waiting unexpected.
    for k in 0..100 {
        net.nodes[0].send(p, 1, data(60, k), SendMode::Standard);
    }
    net.run();
    assert_eq!(net.nodes[1].core.stats().unexpected_msgs, 100);
    assert!(net.nodes[0].core.connection_unacked(c0) > 4096);
    // The receiver's upkeep finds the link idle.
    net.nodes[1].core.release_connection_memory(c1);
    net.run();
    assert_eq!(net.nodes[0].core.connection_unacked(c0), 0);
    // And acknowledgements are not acknowledged in turn: after a few
    // upkeeps of both sides, nothing moves any more.
    for _ in 0..3 {
        net.nodes[0].core.release_connection_memory(c0);
        net.nodes[1].core.release_connection_memory(c1);
        net.run();
    }
    net.nodes[0].core.release_connection_memory(c0);
    net.nodes[1].core.release_connection_memory(c1);
    assert!(!net.step(), "two idle links answer each other forever");
}

// ----- moving onto shared memory --------------------------------------------

/// The exchange in the core: each side's output stops right after its
/// ShmSwitch and its peer's input right after decoding it, until the edge
/// says the direction moved; messages posted meanwhile all arrive, in
/// order, and the exchange frames are not part of the numbered stream.
#[test]
fn moving_to_shared_memory_pauses_each_direction_at_its_switch() {
    let mut net = Net::pair(small(), small());
    let (p01, p10) = (net.peer(0, 1), net.peer(1, 0));
    let (_, c0) = net.links[0].ends[0];
    let (_, c1) = net.links[0].ends[1];
    // An acceptor cannot offer; the dialer can, once.
    assert!(net.nodes[1].core.offer_shm(c1, 1 << 20).is_err());
    net.nodes[0].core.offer_shm(c0, 1 << 20).unwrap();
    assert!(net.nodes[0].core.offer_shm(c0, 1 << 20).is_err());
    net.run();
    assert_eq!(net.nodes[1].shm, [("offered", c1, 1 << 20)]);
    // Messages queued both ways across the moves.
    let mut sent = Vec::new();
    for k in 0..4u8 {
        sent.push(net.nodes[0].send(p01, 7, data(100, k), SendMode::Standard));
        sent.push(net.nodes[1].send(p10, 9, data(100, k + 10), SendMode::Standard));
    }
    net.nodes[1].core.answer_shm(c1, true).unwrap();
    // The acceptor's transmit ends with its switch and then stops.
    net.transmit(0, 1, 1 << 20);
    let flight = &net.links[0].dirs[1].flight;
    assert_eq!(flight[flight.len() - 8], FrameKind::ShmSwitch as u8);
    assert!(net.nodes[1].core.shm_output_paused(c1));
    assert!(!net.nodes[1].core.wants_transmit(c1));
    assert_eq!(net.transmit(0, 1, 1 << 20), 0);
    // The dialer decodes up to the switch and no further.
    net.deliver(0, 1, usize::MAX);
    assert_eq!(net.nodes[0].shm, [("moved", c0, 0)]);
    net.links[0].dirs[1].flight.extend_from_slice(&[0xff; 3]);
    net.deliver(0, 1, usize::MAX);
    assert_eq!(&net.links[0].dirs[1].input[..], &[0xff; 3], "undecoded");
    net.links[0].dirs[1].input.clear();
    // The edges move: the acceptor writes, the dialer reads and follows.
    net.nodes[1].core.shm_writes_moved(c1);
    net.nodes[0].core.shm_reads_moved(c0);
    net.nodes[0].core.follow_shm(c0).unwrap();
    net.transmit(0, 0, 1 << 20);
    assert!(net.nodes[0].core.shm_output_paused(c0));
    net.deliver(0, 0, usize::MAX);
    assert_eq!(net.nodes[1].shm.last(), Some(&("moved", c1, 0)));
    net.nodes[0].core.shm_writes_moved(c0);
    net.nodes[1].core.shm_reads_moved(c1);
    let r0: Vec<_> = (0..4)
        .map(|_| net.nodes[0].recv(TagMatch::exact(9), 100))
        .collect();
    let r1: Vec<_> = (0..4)
        .map(|_| net.nodes[1].recv(TagMatch::exact(7), 100))
        .collect();
    net.run();
    for (k, (a, b)) in r0.iter().zip(&r1).enumerate() {
        assert_eq!(net.nodes[0].done[a].data, data(100, k as u8 + 10));
        assert_eq!(net.nodes[1].done[b].data, data(100, k as u8));
    }
    for op in sent {
        assert!(net.nodes[0].done.contains_key(&op) || net.nodes[1].done.contains_key(&op));
    }
    assert!(net.nodes[0].closed.is_empty() && net.nodes[1].closed.is_empty());
}

/// A switch nobody offered, or an offer to a dialer, closes the
/// connection as a protocol violation.
#[test]
fn an_exchange_frame_out_of_turn_closes_the_connection() {
    for (to, frame) in [
        (1, Frame::ShmSwitch),
        (0, Frame::ShmOffer { segment_len: 4096 }),
        (0, Frame::ShmDecline),
    ] {
        let mut net = Net::pair(small(), small());
        let mut wire = BytesMut::new();
        encode(&frame, &mut wire);
        net.links[0].dirs[1 - to].flight.extend_from_slice(&wire);
        net.deliver(0, 1 - to, usize::MAX);
        match &net.nodes[to].closed[..] {
            [(_, Some(ConnError::Protocol(Violation::UnexpectedFrame(k))))] => {
                assert_eq!(*k, frame.kind())
            }
            other => panic!("{frame:?} to node {to}: {other:?}"),
        }
    }
}

// ----- single copies ----------------------------------------------------------

/// Where `addr` (a PullRts's) points among `node`'s send buffers: the
/// bytes from there (the harness's stand-in for `process_vm_readv`).
fn read_sender(node: &Node, addr: u64, len: usize) -> Vec<u8> {
    for data in node.sends.values() {
        let base = data.as_ptr() as u64;
        if addr >= base && addr + len as u64 <= base + data.len() as u64 {
            let at = (addr - base) as usize;
            return data[at..at + len].to_vec();
        }
    }
    panic!("the address {addr:#x} is in no send buffer of the sender");
}

/// A pair whose one link single-copies both ways, node 0 sending node 1
/// `n` bytes of `data(n, seed)` under `tag`, run until node 1's edge is
/// asked to pull: the net, the receive, the send and the pull.
fn pulling_pair(
    n: usize,
    tag: u64,
    seed: u8,
) -> (Net, OpId, OpId, (ConnId, u64, OpId, u64, usize)) {
    let mut net = Net::pair(small(), small());
    let p01 = net.peer(0, 1);
    let (_, c0) = net.links[0].ends[0];
    let (_, c1) = net.links[0].ends[1];
    net.nodes[0].core.set_pull(c0, true);
    net.nodes[1].core.set_pull(c1, true);
    let r = net.nodes[1].recv(TagMatch::exact(tag), n);
    let s = net.nodes[0].send(p01, tag, data(n, seed), SendMode::Standard);
    net.run();
    let pull = net.nodes[1].pulls.pop().expect("a pull");
    assert_eq!(pull.0, c1);
    (net, r, s, pull)
}

/// Both sides single-copy: a large send goes as PullRts, the receiver's
/// edge reads it, Pulled completes the send, and no Data crosses.
#[test]
fn a_pulled_message_completes_both_sides_without_data() {
    let n = 200_000;
    let (mut net, r, s, (conn, token, op, addr, len)) = pulling_pair(n, 3, 5);
    assert_eq!((op, len), (r, n));
    let bytes = read_sender(&net.nodes[0], addr, len);
    net.nodes[1].recvs.get_mut(&op).unwrap()[..len].copy_from_slice(&bytes);
    net.nodes[1].core.pull_done(conn, token, true);
    net.nodes[1].pump();
    net.run();
    assert_eq!(net.nodes[1].done[&r].data, data(n, 5));
    assert_eq!(net.nodes[1].done[&r].status.error, None);
    assert_eq!(net.nodes[0].done[&s].status.error, None);
    assert_eq!(net.nodes[0].done[&s].status.msg_len, n as u64);
}

/// A pull that fails falls back to Cts and Data through the link, and
/// the transport pulls no more; a receiver that does not pull answers a
/// PullRts with Cts at once.
#[test]
fn a_failed_pull_falls_back_to_the_ring() {
    let n = 100_000;
    let (mut net, r, s, (conn, token, ..)) = pulling_pair(n, 4, 9);
    let p01 = net.peer(0, 1);
    net.nodes[1].core.pull_done(conn, token, false);
    net.nodes[1].pump();
    net.run();
    assert_eq!(net.nodes[1].done[&r].data, data(n, 9));
    assert_eq!(net.nodes[0].done[&s].status.error, None);
    // No more pulls on this transport.
    let r = net.nodes[1].recv(TagMatch::exact(5), n);
    net.nodes[0].send(p01, 5, data(n, 1), SendMode::Standard);
    net.run();
    assert!(net.nodes[1].pulls.is_empty());
    assert_eq!(net.nodes[1].done[&r].data, data(n, 1));
    // A receiver that never pulls (only the sender offers).
    let mut net = Net::pair(small(), small());
    let p01 = net.peer(0, 1);
    let (_, c0) = net.links[0].ends[0];
    net.nodes[0].core.set_pull(c0, true);
    let r = net.nodes[1].recv(TagMatch::exact(6), n);
    net.nodes[0].send(p01, 6, data(n, 2), SendMode::Standard);
    net.run();
    assert!(net.nodes[1].pulls.is_empty());
    assert_eq!(net.nodes[1].done[&r].data, data(n, 2));
}

/// A Pulled for a message nobody sent, or longer than the message, is a
/// protocol violation.
#[test]
fn a_pulled_out_of_turn_closes_the_connection() {
    let mut net = Net::pair(small(), small());
    let mut wire = BytesMut::new();
    encode(&Frame::Pulled { msg_id: 77, len: 1 }, &mut wire);
    net.links[0].dirs[1].flight.extend_from_slice(&wire);
    net.deliver(0, 1, usize::MAX);
    match &net.nodes[0].closed[..] {
        [(_, Some(ConnError::Protocol(Violation::UnknownMsgId(77))))] => {}
        other => panic!("{other:?}"),
    }
}
