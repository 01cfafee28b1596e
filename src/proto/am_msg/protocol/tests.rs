//! Unit tests of [`Core`]: the protocol steps, matching, truncation,
//! cancel, failures, and every kind of hostile packet.

use super::*;

const A: PeerAddr = PeerAddr(1);
const B: PeerAddr = PeerAddr(2);
const C: PeerAddr = PeerAddr(3);

fn core(chunk: usize) -> Core {
    Core::new(CoreConfig {
        chunk,
        max_message: 1 << 20,
        salt: 99,
    })
}

fn key(n: u64) -> OpKey {
    OpKey::from_u64(n)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Endpoints by address, wired to each other in memory.
struct Net {
    nodes: Vec<(PeerAddr, Core)>,
    /// Payload bytes each node sent, in requests.
    sent_bytes: Vec<usize>,
    /// Requests each node sent.
    sent: Vec<usize>,
}

impl Net {
    fn new(nodes: Vec<(PeerAddr, Core)>) -> Net {
        let n = nodes.len();
        Net {
            nodes,
            sent_bytes: vec![0; n],
            sent: vec![0; n],
        }
    }

    fn index(&self, addr: PeerAddr) -> usize {
        self.nodes
            .iter()
            .position(|(a, _)| *a == addr)
            .expect("a node of the net")
    }

    fn core(&mut self, addr: PeerAddr) -> &mut Core {
        let i = self.index(addr);
        &mut self.nodes[i].1
    }

    /// Sends node `i`'s next request, delivers it and its reply. Whether
    /// there was one.
    fn step(&mut self, i: usize) -> bool {
        let Some(t) = self.nodes[i].1.poll_transmit(true) else {
            return false;
        };
        let src = self.nodes[i].0;
        let j = self.index(t.peer());
        self.sent[i] += 1;
        self.sent_bytes[i] += t.payload().len();
        let reply = self.nodes[j]
            .1
            .handle(Incoming::Request, src, t.args(), t.payload());
        self.nodes[i].1.transmitted(t, Ok(()));
        if let Some(r) = reply {
            let dst = self.nodes[j].0;
            let none = self.nodes[i]
                .1
                .handle(Incoming::Reply, dst, r.as_slice(), &[]);
            assert!(none.is_none(), "a reply is never answered");
        }
        true
    }

    /// Steps every node until none has anything to send.
    fn run(&mut self) {
        for _ in 0..100_000 {
            let mut any = false;
            for i in 0..self.nodes.len() {
                any |= self.step(i);
            }
            if !any {
                return;
            }
        }
        panic!("the net did not settle");
    }

    fn completions(&mut self, addr: PeerAddr) -> Vec<(OpKey, MqCompletion)> {
        let core = self.core(addr);
        std::iter::from_fn(|| core.pop_completion()).collect()
    }

    fn dropped(&mut self, addr: PeerAddr) -> u64 {
        self.core(addr).stats().dropped
    }
}

fn pair(chunk: usize) -> Net {
    Net::new(vec![(A, core(chunk)), (B, core(chunk))])
}

fn one(mut v: Vec<(OpKey, MqCompletion)>) -> (OpKey, MqCompletion) {
    assert_eq!(
        v.len(),
        1,
        "{:?}",
        v.iter().map(|c| c.1.status).collect::<Vec<_>>()
    );
    v.remove(0)
}

fn received(c: MqCompletion) -> Vec<u8> {
    let n = c.status.nbytes;
    c.buffer.as_slice()[..n].to_vec()
}

fn idle(s: CoreStats) -> bool {
    s.unexpected == 0 && s.posted == 0 && s.sends == 0 && s.receiving == 0 && s.completions == 0
}

#[test]
fn small_message_receive_before_send() {
    let mut net = pair(8);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 16]), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(b"hello".to_vec()), key(2))
        .unwrap();
    net.run();
    let (k, c) = one(net.completions(B));
    assert_eq!(k, key(1));
    assert_eq!(
        c.status,
        MqStatus {
            tag: 0,
            msg_len: 5,
            nbytes: 5,
            source: Some(A),
            error: None
        }
    );
    assert_eq!(received(c), b"hello");
    let (k, c) = one(net.completions(A));
    assert_eq!(k, key(2));
    assert_eq!(
        c.status,
        MqStatus {
            tag: 0,
            msg_len: 5,
            nbytes: 5,
            source: Some(B),
            error: None
        }
    );
    assert_eq!(c.buffer.as_slice(), b"hello");
    // One request (First) and its reply (Done): nothing else.
    assert_eq!(net.sent, vec![1, 0]);
}

#[test]
fn every_size_in_both_orders() {
    let chunk = 4;
    for recv_first in [true, false] {
        for size in [0, 1, 3, 4, 5, 7, 8, 9, 23, 64] {
            let mut net = pair(chunk);
            let data = pattern(size, size as u8);
            if recv_first {
                net.core(B)
                    .post_recv(Some(A), OpBuffer::from(vec![0; 64]), key(1))
                    .unwrap();
            }
            net.core(A)
                .post_send(B, OpBuffer::from(data.clone()), key(2))
                .unwrap();
            net.run();
            if !recv_first {
                net.core(B)
                    .post_recv(None, OpBuffer::from(vec![0; 64]), key(1))
                    .unwrap();
                net.run();
            }
            let (_, c) = one(net.completions(B));
            assert_eq!(c.status.error, None, "{size} B");
            assert_eq!(c.status.msg_len, size as u64);
            assert_eq!(received(c), data, "{size} B, receive first: {recv_first}");
            let (_, c) = one(net.completions(A));
            assert_eq!(c.status.error, None);
            assert_eq!(c.status.nbytes, size);
            // Every byte crossed exactly once.
            assert_eq!(net.sent_bytes[0], size);
            for addr in [A, B] {
                assert!(idle(net.core(addr).stats()), "{:?}", net.core(addr).stats());
            }
        }
    }
}

#[test]
fn a_whole_unexpected_message_frees_the_sender_at_once() {
    let mut net = pair(4);
    net.core(A)
        .post_send(B, OpBuffer::from(b"abc".to_vec()), key(1))
        .unwrap();
    net.run();
    let (_, c) = one(net.completions(A));
    assert_eq!(c.status.error, None);
    assert_eq!(net.core(B).stats().unexpected, 1);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 4]), key(2))
        .unwrap();
    // Nothing to send: the data was all here.
    assert!(net.core(B).poll_transmit(true).is_none());
    let (_, c) = one(net.completions(B));
    assert_eq!(received(c), b"abc");
}

#[test]
fn a_long_unexpected_message_waits_at_the_sender() {
    let mut net = pair(4);
    let data = pattern(10, 1);
    net.core(A)
        .post_send(B, OpBuffer::from(data.clone()), key(1))
        .unwrap();
    net.run();
    assert!(net.completions(A).is_empty());
    // Only the first chunk crossed.
    assert_eq!(net.sent_bytes[0], 4);
    let s = net.core(B).stats();
    assert_eq!((s.unexpected, s.receiving), (1, 0));
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 10]), key(2))
        .unwrap();
    net.run();
    assert_eq!(received(one(net.completions(B)).1), data);
    assert_eq!(one(net.completions(A)).1.status.error, None);
    assert_eq!(net.sent_bytes[0], 10);
}

#[test]
fn truncation_sends_only_what_fits() {
    for recv_first in [true, false] {
        let mut net = pair(4);
        let data = pattern(10, 2);
        if recv_first {
            net.core(B)
                .post_recv(None, OpBuffer::from(vec![0; 6]), key(1))
                .unwrap();
        }
        net.core(A)
            .post_send(B, OpBuffer::from(data.clone()), key(2))
            .unwrap();
        net.run();
        if !recv_first {
            net.core(B)
                .post_recv(None, OpBuffer::from(vec![0; 6]), key(1))
                .unwrap();
            net.run();
        }
        let (_, c) = one(net.completions(B));
        assert_eq!(c.status.error, Some(ErrorKind::Trunc));
        assert_eq!((c.status.msg_len, c.status.nbytes), (10, 6));
        assert_eq!(c.buffer.as_slice(), &data[..6]);
        let (_, c) = one(net.completions(A));
        assert_eq!(c.status.error, None, "the sender succeeds");
        assert_eq!(c.status.nbytes, 10);
        assert_eq!(net.sent_bytes[0], 6, "bytes past the buffer are never sent");
    }
}

#[test]
fn truncation_within_the_first_chunk() {
    for recv_first in [true, false] {
        let mut net = pair(4);
        let data = pattern(10, 3);
        if recv_first {
            net.core(B)
                .post_recv(None, OpBuffer::from(vec![0; 2]), key(1))
                .unwrap();
        }
        net.core(A)
            .post_send(B, OpBuffer::from(data.clone()), key(2))
            .unwrap();
        net.run();
        if !recv_first {
            net.core(B)
                .post_recv(None, OpBuffer::from(vec![0; 2]), key(1))
                .unwrap();
            net.run();
        }
        let (_, c) = one(net.completions(B));
        assert_eq!(c.status.error, Some(ErrorKind::Trunc));
        assert_eq!((c.status.msg_len, c.status.nbytes), (10, 2));
        assert_eq!(c.buffer.as_slice(), &data[..2]);
        assert_eq!(one(net.completions(A)).1.status.error, None);
        assert_eq!(net.sent_bytes[0], 4);
        assert!(idle(net.core(A).stats()) && idle(net.core(B).stats()));
    }
    // A zero-byte buffer takes nothing of a message.
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::empty(), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(vec![1; 9]), key(2))
        .unwrap();
    net.run();
    let (_, c) = one(net.completions(B));
    assert_eq!((c.status.msg_len, c.status.nbytes), (9, 0));
    assert_eq!(c.status.error, Some(ErrorKind::Trunc));
}

#[test]
fn directed_receives_match_only_their_peer() {
    let mut net = Net::new(vec![(A, core(4)), (B, core(4)), (C, core(4))]);
    // Posted: a receive for C, then one for anyone; A's message skips the first.
    net.core(B)
        .post_recv(Some(C), OpBuffer::from(vec![0; 8]), key(1))
        .unwrap();
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 8]), key(2))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(b"from a".to_vec()), key(3))
        .unwrap();
    net.run();
    let (k, c) = one(net.completions(B));
    assert_eq!((k, c.status.source), (key(2), Some(A)));
    net.core(C)
        .post_send(B, OpBuffer::from(b"from c".to_vec()), key(4))
        .unwrap();
    net.run();
    let (k, c) = one(net.completions(B));
    assert_eq!((k, c.status.source), (key(1), Some(C)));
    assert_eq!(received(c), b"from c");

    // Unexpected: A's arrives first, a receive for C takes C's.
    net.core(A)
        .post_send(B, OpBuffer::from(b"a2".to_vec()), key(5))
        .unwrap();
    net.run();
    net.core(C)
        .post_send(B, OpBuffer::from(b"c2".to_vec()), key(6))
        .unwrap();
    net.run();
    net.core(B)
        .post_recv(Some(C), OpBuffer::from(vec![0; 8]), key(7))
        .unwrap();
    let (k, c) = one(net.completions(B));
    assert_eq!((k, received(c)), (key(7), b"c2".to_vec()));
    assert_eq!(net.core(B).stats().unexpected, 1);
}

#[test]
fn posted_and_unexpected_queues_are_fifo() {
    let mut net = pair(4);
    for (i, m) in [&b"one"[..], b"two", b"six"].iter().enumerate() {
        net.core(A)
            .post_send(B, OpBuffer::from(m.to_vec()), key(10 + i as u64))
            .unwrap();
    }
    net.run();
    for i in 0..3 {
        net.core(B)
            .post_recv(None, OpBuffer::from(vec![0; 3]), key(20 + i))
            .unwrap();
    }
    let got: Vec<(OpKey, Vec<u8>)> = net
        .completions(B)
        .into_iter()
        .map(|(k, c)| (k, received(c)))
        .collect();
    assert_eq!(
        got,
        vec![
            (key(20), b"one".to_vec()),
            (key(21), b"two".to_vec()),
            (key(22), b"six".to_vec())
        ]
    );
    // Posted receives: the oldest matches first.
    for i in 0..2 {
        net.core(B)
            .post_recv(None, OpBuffer::from(vec![0; 3]), key(30 + i))
            .unwrap();
    }
    net.core(A)
        .post_send(B, OpBuffer::from(b"xyz".to_vec()), key(40))
        .unwrap();
    net.run();
    assert_eq!(one(net.completions(B)).0, key(30));
}

#[test]
fn cancel_takes_only_unmatched_receives() {
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![7; 5]), key(1))
        .unwrap();
    assert!(net.core(B).cancel(key(1)));
    let (k, c) = one(net.completions(B));
    assert_eq!(k, key(1));
    assert_eq!(c.status.error, Some(ErrorKind::Canceled));
    assert_eq!((c.status.msg_len, c.status.nbytes), (0, 0));
    assert_eq!(c.buffer.into_vec().unwrap(), vec![7; 5]);
    assert!(!net.core(B).cancel(key(1)), "already cancelled");

    // A matched receive still getting data cannot be cancelled.
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 10]), key(2))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(vec![1; 10]), key(3))
        .unwrap();
    assert!(net.step(0), "First");
    assert_eq!(net.core(B).stats().receiving, 1);
    assert!(!net.core(B).cancel(key(2)));
    assert!(!net.core(A).cancel(key(3)), "sends cannot be cancelled");
    net.run();
    assert_eq!(one(net.completions(B)).1.status.error, None);
}

#[test]
fn bad_posts_hand_the_buffer_back() {
    let mut c = core(4);
    let e = c
        .post_recv(
            None,
            OpBuffer::from(bytes::Bytes::from_static(b"ro")),
            key(1),
        )
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Inval);
    assert_eq!(e.buffer.as_slice(), b"ro");
    let mut small = Core::new(CoreConfig {
        chunk: 4,
        max_message: 8,
        salt: 1,
    });
    let e = small
        .post_send(A, OpBuffer::from(vec![0; 9]), key(2))
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::MsgSize);
    assert_eq!(e.buffer.len(), 9);
    assert!(idle(small.stats()) && idle(c.stats()));
}

/// A sends 12 bytes (chunk 4) to B's 12-byte receive and B answered Go:
/// (net, sender id, receiver id). Nothing streamed yet.
fn mid_transfer() -> (Net, u64, u64) {
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 12]), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(pattern(12, 9)), key(2))
        .unwrap();
    let t = net.core(A).poll_transmit(true).unwrap();
    let Ok(Packet::First { send, .. }) = Packet::decode(t.args()) else {
        panic!("a First: {t:?}");
    };
    let reply = net
        .core(B)
        .handle(Incoming::Request, A, t.args(), t.payload())
        .unwrap();
    net.core(A).transmitted(t, Ok(()));
    let Ok(Packet::Go { recv, accept, .. }) = Packet::decode(reply.as_slice()) else {
        panic!("a Go");
    };
    assert_eq!(accept, 12);
    net.core(A)
        .handle(Incoming::Reply, B, reply.as_slice(), &[]);
    (net, send, recv)
}

/// A hostile packet: what it is, its source, how it came, args, payload.
type Case = (&'static str, PeerAddr, Incoming, Vec<u64>, Vec<u8>);

fn data(recv: u64, send: u64, offset: u64) -> Args {
    Packet::Data { recv, send, offset }.encode()
}

#[test]
fn hostile_packets_at_the_receiver_are_dropped() {
    let (mut net, send, recv) = mid_transfer();
    let before = net.core(B).stats();
    let head = data(recv, send, 4).as_slice()[0];
    let cases: Vec<Case> = vec![
        ("not ours", A, Incoming::Request, vec![1, 2, 3], vec![0; 4]),
        ("no arguments", A, Incoming::Request, vec![], vec![]),
        (
            "unknown opcode",
            A,
            Incoming::Request,
            vec![(head & !0xff) | 77, recv, send, 4],
            vec![0; 4],
        ),
        (
            "wrong arity",
            A,
            Incoming::Request,
            vec![head, recv, send],
            vec![0; 4],
        ),
        (
            "stale receive id",
            A,
            Incoming::Request,
            data(recv ^ (1 << 32), send, 4).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "receive id beyond the slab",
            A,
            Incoming::Request,
            data(recv + 1000, send, 4).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "from another peer",
            C,
            Incoming::Request,
            data(recv, send, 4).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "for another message",
            A,
            Incoming::Request,
            data(recv, send ^ 1, 4).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "offset beyond the buffer",
            A,
            Incoming::Request,
            data(recv, send, 1 << 40).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "offset not next",
            A,
            Incoming::Request,
            data(recv, send, 8).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "offset behind",
            A,
            Incoming::Request,
            data(recv, send, 0).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "length past the end",
            A,
            Incoming::Request,
            data(recv, send, 4).as_slice().to_vec(),
            vec![0; 9],
        ),
        (
            "empty data",
            A,
            Incoming::Request,
            data(recv, send, 4).as_slice().to_vec(),
            vec![],
        ),
        (
            "data as a reply",
            A,
            Incoming::Reply,
            data(recv, send, 4).as_slice().to_vec(),
            vec![0; 4],
        ),
        (
            "first as a reply",
            A,
            Incoming::Reply,
            Packet::First { send: 5, total: 1 }
                .encode()
                .as_slice()
                .to_vec(),
            vec![1],
        ),
        (
            "first longer than its total",
            A,
            Incoming::Request,
            Packet::First { send: 5, total: 1 }
                .encode()
                .as_slice()
                .to_vec(),
            vec![1, 2],
        ),
        (
            "first beyond the largest message",
            A,
            Incoming::Request,
            Packet::First {
                send: 5,
                total: u64::MAX,
            }
            .encode()
            .as_slice()
            .to_vec(),
            vec![1],
        ),
    ];
    let n = cases.len() as u64;
    for (what, source, kind, args, payload) in cases {
        let dropped = net.dropped(B);
        let reply = net.core(B).handle(kind, source, &args, &payload);
        assert!(reply.is_none(), "{what}: answered");
        assert_eq!(net.dropped(B), dropped + 1, "{what}: not dropped");
    }
    let after = net.core(B).stats();
    assert_eq!(after.dropped, before.dropped + n);
    assert_eq!(
        (after.receiving, after.unexpected, after.completions),
        (before.receiving, before.unexpected, 0)
    );
    // The real transfer is untouched.
    net.run();
    let (_, c) = one(net.completions(B));
    assert_eq!(c.status.error, None);
    assert_eq!(received(c), pattern(12, 9));
    assert_eq!(one(net.completions(A)).1.status.error, None);
    // Data and Done for the finished transfer: dropped.
    let late = data(recv, send, 4);
    assert!(net
        .core(B)
        .handle(Incoming::Request, A, late.as_slice(), &[0; 4])
        .is_none());
    assert_eq!(net.dropped(B), before.dropped + n + 1);
}

#[test]
fn hostile_packets_at_the_sender_are_dropped() {
    let (mut net, send, recv) = mid_transfer();
    let go = |send, accept| {
        Packet::Go { send, recv, accept }
            .encode()
            .as_slice()
            .to_vec()
    };
    let done = |send| Packet::Done { send }.encode().as_slice().to_vec();
    let cases: Vec<(&str, PeerAddr, Vec<u64>, Vec<u8>)> = vec![
        (
            "go for an unknown send",
            B,
            go(send ^ (1 << 32), 12),
            vec![],
        ),
        ("go from another peer", C, go(send, 12), vec![]),
        ("go in the wrong phase", B, go(send, 12), vec![]),
        ("go with a payload", B, go(send, 12), vec![1]),
        ("done for an unknown send", B, done(send + 7), vec![]),
        ("done from another peer", C, done(send), vec![]),
        ("done while streaming", B, done(send), vec![]),
    ];
    for kind in [Incoming::Request, Incoming::Reply] {
        for (what, source, args, payload) in &cases {
            let dropped = net.dropped(A);
            assert!(net.core(A).handle(kind, *source, args, payload).is_none());
            assert_eq!(net.dropped(A), dropped + 1, "{what}");
        }
    }
    assert!(net.completions(A).is_empty());
    net.run();
    assert_eq!(one(net.completions(A)).1.status.error, None);
    assert_eq!(received(one(net.completions(B)).1), pattern(12, 9));
    // A reply for the finished send.
    let dropped = net.dropped(A);
    net.core(A).handle(Incoming::Reply, B, &done(send), &[]);
    assert_eq!(net.dropped(A), dropped + 1);
    assert!(net.completions(A).is_empty());
}

#[test]
fn go_must_accept_more_than_the_first_chunk_and_at_most_the_message() {
    let mut net = pair(4);
    net.core(A)
        .post_send(B, OpBuffer::from(vec![5; 10]), key(1))
        .unwrap();
    net.run(); // unexpected at B: A waits for Go
    let t = net.core(A).poll_transmit(true);
    assert!(t.is_none());
    // A's send id, as B holds it.
    let send = net.core(B).unexpected.front().unwrap().send;
    for accept in [0, 3, 4, 11, u64::MAX] {
        let go = Packet::Go {
            send,
            recv: 1,
            accept,
        }
        .encode();
        let dropped = net.dropped(A);
        net.core(A).handle(Incoming::Request, B, go.as_slice(), &[]);
        assert_eq!(net.dropped(A), dropped + 1, "accept {accept}");
    }
    assert!(net.core(A).poll_transmit(true).is_none(), "nothing streams");
}

#[test]
fn again_puts_the_request_back_first() {
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 12]), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(pattern(12, 4)), key(2))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(b"next".to_vec()), key(3))
        .unwrap();
    let again = || Err(Error::new(ErrorKind::Again, "no credit"));
    let t = net.core(A).poll_transmit(true).unwrap();
    let first = t.args().to_vec();
    assert!(net.core(A).poll_transmit(true).is_none(), "one at a time");
    net.core(A).transmitted(t, again());
    let t = net.core(A).poll_transmit(true).unwrap();
    assert_eq!(
        t.args(),
        &first[..],
        "the same First again, before the next send's"
    );
    net.core(A).transmitted(t, again());
    // Deliver it for real, then refuse the first Data once.
    assert!(net.step(0));
    let t = net.core(A).poll_transmit(true).unwrap();
    let d = t.args().to_vec();
    assert!(
        matches!(Packet::decode(&d), Ok(Packet::First { .. })),
        "the next First goes before data"
    );
    let reply = net
        .core(B)
        .handle(Incoming::Request, A, t.args(), t.payload())
        .expect("a whole unexpected message is answered at once");
    net.core(A).transmitted(t, Ok(()));
    net.core(A)
        .handle(Incoming::Reply, B, reply.as_slice(), &[]);
    assert_eq!(one(net.completions(A)).0, key(3));
    let t = net.core(A).poll_transmit(true).unwrap();
    let d = t.args().to_vec();
    assert!(matches!(
        Packet::decode(&d),
        Ok(Packet::Data { offset: 4, .. })
    ));
    net.core(A).transmitted(t, again());
    let t = net.core(A).poll_transmit(true).unwrap();
    assert_eq!(t.args(), &d[..]);
    assert_eq!(t.payload(), &pattern(12, 4)[4..8]);
    net.core(A).transmitted(t, again());
    net.run();
    assert_eq!(received(one(net.completions(B)).1), pattern(12, 4));
}

#[test]
fn answers_arriving_while_the_buffer_is_lent() {
    // Go during the First's engine call.
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 10]), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(pattern(10, 5)), key(2))
        .unwrap();
    let t = net.core(A).poll_transmit(true).unwrap();
    let go = net
        .core(B)
        .handle(Incoming::Request, A, t.args(), t.payload())
        .unwrap();
    net.core(A).handle(Incoming::Reply, B, go.as_slice(), &[]);
    assert_eq!(net.dropped(A), 0);
    net.core(A).transmitted(t, Ok(()));
    net.run();
    assert_eq!(received(one(net.completions(B)).1), pattern(10, 5));
    assert_eq!(one(net.completions(A)).1.status.error, None);

    // Done during the last packet's call: the completion waits for the buffer.
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 3]), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(b"abc".to_vec()), key(2))
        .unwrap();
    let t = net.core(A).poll_transmit(true).unwrap();
    let done = net
        .core(B)
        .handle(Incoming::Request, A, t.args(), t.payload())
        .unwrap();
    net.core(A).handle(Incoming::Reply, B, done.as_slice(), &[]);
    assert!(net.completions(A).is_empty());
    net.core(A).transmitted(t, Ok(()));
    let (_, c) = one(net.completions(A));
    assert_eq!(c.status.error, None);
    assert_eq!(c.buffer.as_slice(), b"abc", "the buffer came back");
}

#[test]
fn a_peer_that_is_gone_fails_its_transfers() {
    let mut net = Net::new(vec![(A, core(4)), (B, core(4)), (C, core(4))]);
    // A: a long send waiting at B (unexpected there), a receive getting data
    // from B, an unexpected message from B, and a send to C.
    net.core(A)
        .post_send(B, OpBuffer::from(vec![1; 10]), key(1))
        .unwrap();
    net.core(A)
        .post_send(C, OpBuffer::from(vec![3; 2]), key(2))
        .unwrap();
    net.core(A)
        .post_recv(Some(B), OpBuffer::from(vec![0; 10]), key(3))
        .unwrap();
    net.core(B)
        .post_send(A, OpBuffer::from(vec![2; 10]), key(4))
        .unwrap();
    net.core(B)
        .post_send(A, OpBuffer::from(vec![2; 10]), key(5))
        .unwrap();
    assert!(net.step(0) && net.step(0) && net.step(1) && net.step(1));
    assert!(net.completions(C).is_empty());
    let s = net.core(A).stats();
    assert_eq!((s.sends, s.receiving, s.unexpected), (1, 1, 1), "{s:?}");
    assert_eq!(one(net.completions(A)).0, key(2), "the send to C is done");
    // A's next request to B fails: B is gone.
    net.core(A)
        .post_send(B, OpBuffer::from(vec![9; 1]), key(6))
        .unwrap();
    let t = net.core(A).poll_transmit(true).unwrap();
    net.core(A)
        .transmitted(t, Err(Error::new(ErrorKind::Io, "peer B is down")));
    let mut got: Vec<(u64, Option<ErrorKind>)> = net
        .completions(A)
        .into_iter()
        .map(|(k, c)| (k.to_u64(), c.status.error))
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        vec![
            (1, Some(ErrorKind::Io)),
            (3, Some(ErrorKind::Io)),
            (6, Some(ErrorKind::Io))
        ]
    );
    assert!(idle(net.core(A).stats()), "{:?}", net.core(A).stats());

    // Another error fails only the one send.
    let mut c = core(4);
    c.post_send(B, OpBuffer::from(vec![0; 1]), key(7)).unwrap();
    c.post_send(B, OpBuffer::from(vec![0; 1]), key(8)).unwrap();
    let t = c.poll_transmit(true).unwrap();
    c.transmitted(t, Err(Error::new(ErrorKind::MsgSize, "too big")));
    let (k, done) = c.pop_completion().unwrap();
    assert_eq!((k, done.status.error), (key(7), Some(ErrorKind::MsgSize)));
    assert!(c.pop_completion().is_none());
    assert_eq!(c.stats().sends, 1);
}

#[test]
fn fail_peer_ends_directed_receives_but_not_any_source_ones() {
    let mut c = core(4);
    c.post_recv(Some(B), OpBuffer::from(vec![0; 3]), key(1))
        .unwrap();
    c.post_recv(None, OpBuffer::from(vec![0; 1]), key(2))
        .unwrap();
    c.post_recv(Some(A), OpBuffer::from(vec![0; 1]), key(3))
        .unwrap();
    c.post_send(B, OpBuffer::from(vec![0; 1]), key(4)).unwrap();
    let mut waiting = Vec::new();
    c.outstanding_peers(&mut waiting);
    waiting.sort_unstable_by_key(|p| p.0);
    let mut want = vec![A, B, B];
    want.sort_unstable_by_key(|p| p.0);
    assert_eq!(waiting, want);
    c.fail_peer(B, ErrorKind::Io);
    let mut got = Vec::new();
    while let Some((k, done)) = c.pop_completion() {
        got.push((k, done.status.error, done.status.source, done.buffer.len()));
    }
    got.sort_by_key(|g| g.0.to_u64());
    assert_eq!(
        got,
        vec![
            (key(1), Some(ErrorKind::Io), Some(B), 3),
            (key(4), Some(ErrorKind::Io), Some(B), 1)
        ]
    );
    assert!(c.cancel(key(2)), "any-source receives stay posted");
    assert!(c.cancel(key(3)), "receives for another peer stay posted");
}

#[test]
fn a_reply_that_could_not_be_sent_goes_as_a_request() {
    let mut net = pair(4);
    net.core(B)
        .post_recv(None, OpBuffer::from(vec![0; 10]), key(1))
        .unwrap();
    net.core(A)
        .post_send(B, OpBuffer::from(pattern(10, 6)), key(2))
        .unwrap();
    let t = net.core(A).poll_transmit(true).unwrap();
    let go = net
        .core(B)
        .handle(Incoming::Request, A, t.args(), t.payload())
        .unwrap();
    net.core(A).transmitted(t, Ok(()));
    net.core(B).defer_reply(A, go);
    net.run();
    assert_eq!(received(one(net.completions(B)).1), pattern(10, 6));
    assert_eq!(one(net.completions(A)).1.status.error, None);
    assert_eq!(net.dropped(A) + net.dropped(B), 0);
}

#[test]
fn sending_to_oneself() {
    let mut net = Net::new(vec![(A, core(4))]);
    net.core(A)
        .post_send(A, OpBuffer::from(pattern(9, 7)), key(1))
        .unwrap();
    net.core(A)
        .post_recv(Some(A), OpBuffer::from(vec![0; 9]), key(2))
        .unwrap();
    net.run();
    let mut got = net.completions(A);
    got.sort_by_key(|g| g.0.to_u64());
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1.status.error, None);
    assert_eq!(got[1].1.buffer.as_slice(), &pattern(9, 7)[..]);
}
