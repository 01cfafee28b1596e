//! A model of two or three endpoints passing messages through in-memory
//! queues, driven by a random schedule: random sizes, chunk sizes, receive
//! buffers, posting orders, interleavings of deliveries and engine calls
//! (answers arriving while a buffer is lent), and `Again` refusals. Every
//! byte must arrive exactly once, in each peer's send order, and every
//! operation must complete, with nothing left behind.
//!
//! Also: random garbage thrown at a core in the middle of transfers never
//! panics and never disturbs them.

use super::protocol::{Core, CoreConfig, Incoming, Transmit};
use crate::engine::{MqCompletion, OpBuffer, PeerAddr};
use crate::reactor::OpKey;
use crate::{Error, ErrorKind};
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

/// The bytes of message `seq` from `src` to `dst`.
fn content(src: usize, dst: usize, seq: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8) ^ ((src * 7 + dst * 13 + seq * 29) as u8).wrapping_mul(3))
        .collect()
}

#[derive(Clone, Debug)]
struct Scenario {
    nodes: usize,
    chunk: usize,
    /// (source, destination, size) in each source's posting order.
    sends: Vec<(usize, usize, usize)>,
    /// Per node: receives are directed (else wildcard).
    directed: Vec<bool>,
    /// Per message: the receive buffer size of the receive posted for it.
    caps: Vec<usize>,
    /// Per message: sort key of its receive in the receiver's posting order.
    recv_order: Vec<u32>,
    schedule: Vec<u16>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (2usize..=3, 1usize..=9, 1usize..=12).prop_flat_map(|(nodes, chunk, count)| {
        (
            proptest::collection::vec((0..nodes, 0..nodes, 0usize..=40), count),
            proptest::collection::vec(any::<bool>(), nodes),
            proptest::collection::vec(0usize..=45, count),
            proptest::collection::vec(any::<u32>(), count),
            proptest::collection::vec(any::<u16>(), 0..400),
        )
            .prop_map(
                move |(sends, directed, caps, recv_order, schedule)| Scenario {
                    nodes,
                    chunk,
                    sends,
                    directed,
                    caps,
                    recv_order,
                    schedule,
                },
            )
    })
}

struct Recv {
    from: Option<usize>,
    cap: usize,
    key: OpKey,
}

/// In-flight requests per (source, destination): arguments and payload.
type Wire = HashMap<(usize, usize), VecDeque<(Vec<u64>, Vec<u8>)>>;

struct Model {
    cores: Vec<Core>,
    /// Per node, sends to post in order: (message index, destination).
    sends: Vec<VecDeque<(usize, usize)>>,
    /// Per node, receives to post in order.
    recvs: Vec<VecDeque<Recv>>,
    /// Per node, the receives it posted, in order.
    posted: Vec<Vec<Recv>>,
    /// The transmit each node has out (buffer lent), already on the wire.
    out: Vec<Option<Transmit>>,
    requests: Wire,
    replies: HashMap<(usize, usize), VecDeque<Vec<u64>>>,
    messages: Vec<(usize, usize, usize, usize)>,
}

fn send_key(i: usize) -> OpKey {
    OpKey::from_u64(1_000 + i as u64)
}

fn recv_key(i: usize) -> OpKey {
    OpKey::from_u64(100_000 + i as u64)
}

impl Model {
    fn new(s: &Scenario) -> Model {
        let n = s.nodes;
        let mut seq = HashMap::new();
        let mut messages = Vec::new();
        let mut sends = vec![VecDeque::new(); n];
        for (i, &(src, dst, size)) in s.sends.iter().enumerate() {
            let k = seq.entry((src, dst)).or_insert(0usize);
            messages.push((src, dst, *k, size));
            *k += 1;
            sends[src].push_back((i, dst));
        }
        let mut recvs: Vec<Vec<(u32, Recv)>> = (0..n).map(|_| Vec::new()).collect();
        for (i, &(src, dst, _)) in s.sends.iter().enumerate() {
            recvs[dst].push((
                s.recv_order[i],
                Recv {
                    from: s.directed[dst].then_some(src),
                    cap: s.caps[i],
                    key: recv_key(i),
                },
            ));
        }
        let recvs = recvs
            .into_iter()
            .map(|mut v| {
                v.sort_by_key(|r| r.0);
                v.into_iter().map(|r| r.1).collect()
            })
            .collect();
        Model {
            cores: (0..n)
                .map(|i| {
                    Core::new(CoreConfig {
                        chunk: s.chunk,
                        max_message: 1 << 20,
                        salt: 17 + i as u32,
                    })
                })
                .collect(),
            sends,
            recvs,
            posted: (0..n).map(|_| Vec::new()).collect(),
            out: (0..n).map(|_| None).collect(),
            requests: HashMap::new(),
            replies: HashMap::new(),
            messages,
        }
    }

    fn post_send(&mut self, node: usize) -> bool {
        let Some((i, dst)) = self.sends[node].pop_front() else {
            return false;
        };
        let (src, dst2, seq, size) = self.messages[i];
        assert_eq!((src, dst2), (node, dst));
        let buf = OpBuffer::from(content(src, dst, seq, size));
        self.cores[node]
            .post_send(PeerAddr(dst as u64), buf, send_key(i))
            .unwrap();
        true
    }

    fn post_recv(&mut self, node: usize) -> bool {
        let Some(r) = self.recvs[node].pop_front() else {
            return false;
        };
        let from = r.from.map(|f| PeerAddr(f as u64));
        self.cores[node]
            .post_recv(from, OpBuffer::from(vec![0xee; r.cap]), r.key)
            .unwrap();
        self.posted[node].push(r);
        true
    }

    /// Node's next request: refused with `Again`, or put on the wire with
    /// its buffer still lent (finished by `finish`).
    fn pump(&mut self, node: usize, data: bool, again: bool) -> bool {
        if self.out[node].is_some() {
            return false;
        }
        let Some(t) = self.cores[node].poll_transmit(data) else {
            return false;
        };
        if again {
            let e = Error::new(ErrorKind::Again, "model: no credit");
            self.cores[node].transmitted(t, Err(e));
            return true;
        }
        let dst = t.peer().0 as usize;
        self.requests
            .entry((node, dst))
            .or_default()
            .push_back((t.args().to_vec(), t.payload().to_vec()));
        self.out[node] = Some(t);
        true
    }

    fn finish(&mut self, node: usize) -> bool {
        let Some(t) = self.out[node].take() else {
            return false;
        };
        self.cores[node].transmitted(t, Ok(()));
        true
    }

    fn deliver_request(&mut self, pick: usize) -> bool {
        let mut keys: Vec<(usize, usize)> = self
            .requests
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            return false;
        }
        keys.sort();
        let (src, dst) = keys[pick % keys.len()];
        let (args, payload) = self
            .requests
            .get_mut(&(src, dst))
            .unwrap()
            .pop_front()
            .unwrap();
        let reply =
            self.cores[dst].handle(Incoming::Request, PeerAddr(src as u64), &args, &payload);
        if let Some(r) = reply {
            self.replies
                .entry((dst, src))
                .or_default()
                .push_back(r.as_slice().to_vec());
        }
        true
    }

    fn deliver_reply(&mut self, pick: usize) -> bool {
        let mut keys: Vec<(usize, usize)> = self
            .replies
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            return false;
        }
        keys.sort();
        let (src, dst) = keys[pick % keys.len()];
        let args = self
            .replies
            .get_mut(&(src, dst))
            .unwrap()
            .pop_front()
            .unwrap();
        let none = self.cores[dst].handle(Incoming::Reply, PeerAddr(src as u64), &args, &[]);
        assert!(none.is_none());
        true
    }

    fn act(&mut self, choice: u16) {
        let n = self.cores.len();
        let node = usize::from(choice >> 4) % n;
        let pick = usize::from(choice >> 4);
        match choice % 8 {
            0 => {
                self.post_send(node);
            }
            1 => {
                self.post_recv(node);
            }
            2 | 3 => {
                self.pump(
                    node,
                    choice & 8 == 0,
                    choice % 8 == 3 && choice & 0x100 != 0,
                );
            }
            4 => {
                self.finish(node);
            }
            5 | 6 => {
                self.deliver_request(pick);
            }
            _ => {
                self.deliver_reply(pick);
            }
        }
    }

    /// Runs everything left to the end, without refusals.
    fn drain(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = false;
            for node in 0..self.cores.len() {
                moved |= self.post_send(node);
                moved |= self.post_recv(node);
                moved |= self.finish(node);
                moved |= self.pump(node, true, false);
            }
            while self.deliver_request(0) {
                moved = true;
            }
            while self.deliver_reply(0) {
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("the model did not settle");
    }

    fn check(mut self, garbage: bool) -> Result<(), TestCaseError> {
        let mut done: Vec<HashMap<u64, MqCompletion>> = Vec::new();
        for core in &mut self.cores {
            let mut m = HashMap::new();
            while let Some((k, c)) = core.pop_completion() {
                prop_assert!(m.insert(k.to_u64(), c).is_none(), "completed twice");
            }
            done.push(m);
        }
        for (i, &(src, dst, _, size)) in self.messages.iter().enumerate() {
            let c = done[src].remove(&send_key(i).to_u64());
            let c = c.ok_or_else(|| TestCaseError::fail(format!("send {i} never completed")))?;
            prop_assert_eq!(c.status.error, None);
            prop_assert_eq!((c.status.msg_len, c.status.nbytes), (size as u64, size));
            prop_assert_eq!(c.status.source, Some(PeerAddr(dst as u64)));
        }
        for (node, posted) in self.posted.iter().enumerate() {
            // Per source, the messages in its send order.
            let mut expect: HashMap<usize, VecDeque<(usize, usize)>> = HashMap::new();
            for &(src, dst, seq, size) in &self.messages {
                if dst == node {
                    expect.entry(src).or_default().push_back((seq, size));
                }
            }
            for r in posted {
                let c = done[node].remove(&r.key.to_u64()).ok_or_else(|| {
                    TestCaseError::fail(format!("a receive of node {node} never completed"))
                })?;
                let src = c.status.source.map(|p| p.0 as usize);
                let src = src.ok_or_else(|| TestCaseError::fail("no source"))?;
                if let Some(f) = r.from {
                    prop_assert_eq!(f, src, "a directed receive matched another peer");
                }
                let next = expect.get_mut(&src).and_then(|q| q.pop_front());
                let (seq, size) =
                    next.ok_or_else(|| TestCaseError::fail("more messages than sent"))?;
                let n = size.min(r.cap);
                prop_assert_eq!(c.status.msg_len, size as u64, "out of order from {}", src);
                prop_assert_eq!(c.status.nbytes, n);
                let trunc = (size > r.cap).then_some(ErrorKind::Trunc);
                prop_assert_eq!(c.status.error, trunc);
                let got = &c.buffer.as_slice()[..n];
                prop_assert_eq!(got, &content(src, node, seq, size)[..n]);
                // Nothing written past what was accepted.
                prop_assert!(c.buffer.as_slice()[n..].iter().all(|b| *b == 0xee));
            }
            prop_assert!(expect.values().all(|q| q.is_empty()));
        }
        prop_assert!(
            done.iter().all(|m| m.is_empty()),
            "completions nobody posted"
        );
        for core in &self.cores {
            let s = core.stats();
            if !garbage {
                prop_assert_eq!(s.dropped, 0);
            }
            prop_assert_eq!((s.unexpected, s.posted, s.sends, s.receiving), (0, 0, 0, 0));
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_byte_arrives_once_and_in_order(s in scenario()) {
        let mut m = Model::new(&s);
        for &c in &s.schedule {
            m.act(c);
        }
        m.drain();
        m.check(false)?;
    }

    #[test]
    fn garbage_never_disturbs_transfers(
        s in scenario(),
        junk in proptest::collection::vec(
            (0usize..4, any::<bool>(), 0u8..6, proptest::collection::vec(any::<u64>(), 0..6), proptest::collection::vec(any::<u8>(), 0..12)),
            0..40,
        ),
    ) {
        let mut m = Model::new(&s);
        let mut junk = junk.into_iter();
        let mut thrown = 0;
        for (i, &c) in s.schedule.iter().enumerate() {
            m.act(c);
            let Some((from, reply, op, mut args, payload)) = junk.next().filter(|_| i % 4 == 0) else {
                continue;
            };
            // Our header with a random opcode (a First only as a reply: as
            // a request it would be a real message), or random words.
            if (2..5).contains(&op) || (op == 1 && reply) {
                if args.is_empty() {
                    args.push(0);
                }
                args[0] = 0x414d_5f4d_5347_0100 | u64::from(op);
            }
            let node = from % m.cores.len();
            // From a real peer or a stranger: random ids name nothing.
            let source = if from == 3 { PeerAddr(99) } else { PeerAddr(((from + 1) % m.cores.len()) as u64) };
            let kind = if reply { Incoming::Reply } else { Incoming::Request };
            let answer = m.cores[node].handle(kind, source, &args, &payload);
            prop_assert!(answer.is_none());
            thrown += 1;
        }
        m.drain();
        let dropped: u64 = m.cores.iter().map(|c| c.stats().dropped).sum();
        prop_assert_eq!(dropped, thrown, "every junk packet is dropped");
        m.check(true)?;
    }
}
