//! The initiator and target cores talking through in-memory queues: an AM
//! channel each way and a tiny tag-matching MQ on each side, driven in
//! random orders.

use super::*;
use crate::engine::{OpBuffer, PeerAddr};
use crate::proto::mr::{MemoryRegion, MrAccess, MrTable};
use crate::proto::tag_layout::RMA_BIT;
use crate::{Error, ErrorKind, Result};
use bytes::Bytes;
use proptest::prelude::*;

const INIT: PeerAddr = PeerAddr(1);
const TARGET: PeerAddr = PeerAddr(2);

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

type Msg = (Vec<u64>, Vec<u8>);

/// Copies `data` into a receive buffer: `Ok(len)` or `Trunc`.
fn land(buf: &mut OpBuffer, data: &[u8]) -> Result<usize> {
    let dst = buf.as_mut_slice().expect("receive buffers are writable");
    if data.len() > dst.len() {
        return Err(Error::new(ErrorKind::Trunc, "model MQ: truncated"));
    }
    dst[..data.len()].copy_from_slice(data);
    Ok(data.len())
}

struct World {
    init: Initiator,
    target: RmaTarget,
    table: Option<MrTable>,
    to_target: std::collections::VecDeque<Msg>,
    to_init: Vec<Msg>,
    t_recvs: Vec<(u64, u64, OpBuffer)>,
    t_unexp: Vec<(u64, Vec<u8>)>,
    i_recvs: Vec<(u64, u64, OpBuffer)>,
    i_unexp: Vec<(u64, Vec<u8>)>,
    i_done: Vec<(u64, Result<usize>, OpBuffer)>,
    events: Vec<RemoteEvent>,
    scratch: Vec<u8>,
    dropped: usize,
}

impl World {
    fn new(params: RmaParams, table: Option<MrTable>) -> Self {
        World {
            init: Initiator::new(params, 17),
            target: RmaTarget::new(params.read_chunk, 99),
            table,
            to_target: Default::default(),
            to_init: Vec::new(),
            t_recvs: Vec::new(),
            t_unexp: Vec::new(),
            i_recvs: Vec::new(),
            i_unexp: Vec::new(),
            i_done: Vec::new(),
            events: Vec::new(),
            scratch: Vec::new(),
            dropped: 0,
        }
    }

    /// Does everything operation `id` asks for now.
    fn drive(&mut self, id: u64) {
        while let Some(step) = self.init.peek(id) {
            match step {
                Step::Request { args, payload } => {
                    self.to_target
                        .push_back((args.as_slice().to_vec(), payload.to_vec()));
                    assert!(self.init.commit(id).is_none());
                }
                Step::PostSend { tag } => {
                    let buf = self.init.commit(id).expect("a buffer to send");
                    let data = buf.as_slice().to_vec();
                    if let Some(i) = self.t_recvs.iter().position(|r| r.0 == tag) {
                        let (_, tid, mut rbuf) = self.t_recvs.remove(i);
                        let r = land(&mut rbuf, &data);
                        drop(rbuf);
                        self.long_done(tid, r);
                    } else {
                        self.t_unexp.push((tag, data));
                    }
                    let n = buf.len();
                    self.i_done.push((id, Ok(n), buf));
                }
                Step::PostRecv { tag } => {
                    let mut buf = self.init.commit(id).expect("a buffer to receive into");
                    if let Some(i) = self.i_unexp.iter().position(|u| u.0 == tag) {
                        let (_, data) = self.i_unexp.remove(i);
                        let r = land(&mut buf, &data);
                        self.i_done.push((id, r, buf));
                    } else {
                        self.i_recvs.push((tag, id, buf));
                    }
                }
                Step::CancelRecv => {
                    assert!(self.init.commit(id).is_none());
                    if let Some(i) = self.i_recvs.iter().position(|r| r.1 == id) {
                        let (_, _, buf) = self.i_recvs.remove(i);
                        self.i_done.push((
                            id,
                            Err(Error::new(ErrorKind::Canceled, "cancelled")),
                            buf,
                        ));
                    }
                }
            }
            assert!(self.init.in_flight(id) <= self.init.params().window);
        }
    }

    fn long_done(&mut self, tid: u64, r: Result<usize>) {
        let done = self
            .target
            .on_long_recv_done(tid, Some(INIT), r)
            .expect("a pending long write");
        assert_eq!(done.dest, INIT);
        self.to_init
            .push((done.args.as_slice().to_vec(), Vec::new()));
        self.events.extend(done.event);
    }

    /// Delivers the oldest AM request to the target (AM is in order).
    fn deliver_request(&mut self) -> bool {
        let Some((args, payload)) = self.to_target.pop_front() else {
            return false;
        };
        let Ok(Packet::Request(req)) = Packet::decode(&args, payload.len()) else {
            panic!("the initiator sent a bad request: {args:x?}");
        };
        let h = self
            .target
            .handle(self.table.as_ref(), INIT, &req, &payload, &mut self.scratch);
        if let Some((args, n)) = h.reply {
            self.to_init
                .push((args.as_slice().to_vec(), self.scratch[..n].to_vec()));
        }
        self.events.extend(h.event);
        match h.post {
            Some(TargetPost::Recv {
                tid,
                tag,
                mut buffer,
            }) => {
                if let Some(i) = self.t_unexp.iter().position(|u| u.0 == tag) {
                    let (_, data) = self.t_unexp.remove(i);
                    let r = land(&mut buffer, &data);
                    drop(buffer);
                    self.long_done(tid, r);
                } else {
                    self.t_recvs.push((tag, tid, buffer));
                }
            }
            Some(TargetPost::Send {
                dest,
                tag,
                buffer,
                event,
            }) => {
                assert_eq!(dest, INIT);
                let data = buffer.as_slice().to_vec();
                drop(buffer);
                if let Some(i) = self.i_recvs.iter().position(|r| r.0 == tag) {
                    let (_, id, mut rbuf) = self.i_recvs.remove(i);
                    let r = land(&mut rbuf, &data);
                    self.i_done.push((id, r, rbuf));
                } else {
                    self.i_unexp.push((tag, data));
                }
                self.events.push(event);
            }
            None => {}
        }
        true
    }

    /// Delivers reply `i` to the initiator (replies may overtake each other).
    fn deliver_reply(&mut self, i: usize) -> bool {
        if self.to_init.is_empty() {
            return false;
        }
        let (args, payload) = self.to_init.remove(i % self.to_init.len());
        let Ok(Packet::Reply(reply)) = Packet::decode(&args, payload.len()) else {
            panic!("the target sent a bad reply: {args:x?}");
        };
        match self.init.on_reply(TARGET, &reply, &payload) {
            Delivery::Accepted(id) => self.drive(id),
            Delivery::Dropped(_) => self.dropped += 1,
        }
        true
    }

    fn mq_one(&mut self) -> bool {
        let Some((id, r, buf)) = self.i_done.pop() else {
            return false;
        };
        match self.init.on_mq_done(id, r, buf) {
            Ok(Delivery::Accepted(id)) => self.drive(id),
            other => panic!("stray MQ completion: {other:?}"),
        }
        true
    }

    /// Runs until nothing moves, in an order `rng` picks.
    fn run(&mut self, rng: &mut Rng) {
        for _ in 0..1_000_000 {
            let moved = match rng.below(3) {
                0 => self.deliver_request(),
                1 => {
                    let i = rng.below(self.to_init.len().max(1));
                    self.deliver_reply(i)
                }
                _ => self.mq_one(),
            };
            if !moved
                && self.to_target.is_empty()
                && self.to_init.is_empty()
                && self.i_done.is_empty()
            {
                return;
            }
        }
        panic!("the model did not settle");
    }
}

fn params(chunk: usize, window: usize, tagged: bool, threshold: usize) -> RmaParams {
    RmaParams {
        write_chunk: chunk,
        read_chunk: chunk,
        window,
        long_threshold: threshold,
        tagged_rma: tagged,
        max_message: u64::from(u32::MAX),
    }
}

fn region(table: &MrTable, len: usize, access: MrAccess) -> MemoryRegion {
    table
        .register((0..len).map(|i| (i * 7 + 3) as u8).collect(), access, None)
        .unwrap()
}

fn snapshot(r: &MemoryRegion) -> Vec<u8> {
    let mut v = vec![0; r.len()];
    r.read_at(0, &mut v).unwrap();
    v
}

fn iov(key: u64, offset: u64, len: u64) -> RemoteIov {
    RemoteIov { key, offset, len }
}

fn finish(w: &mut World, id: u64) -> (Result<()>, Vec<OpBuffer>) {
    w.init.take_finished(id).expect("the operation finished")
}

#[test]
fn window_bounds_chunks_and_the_last_one_waits() {
    let table = MrTable::new();
    let r = region(&table, 100, MrAccess::all());
    let mut w = World::new(params(4, 3, false, 0), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![OpBuffer::from(vec![1u8; 40])],
            &[iov(r.key(), 10, 40)],
            None,
        )
        .unwrap();
    w.drive(id);
    assert_eq!(w.to_target.len(), 3, "window of 3");
    assert_eq!(w.init.in_flight(id), 3);
    // Acknowledge everything but keep going chunk by chunk.
    let mut rng = Rng(5);
    while !w.init.is_finished(id) {
        assert!(w.deliver_request() || w.deliver_reply(rng.below(8)));
        // The EOM chunk never shares the wire with another.
        let eoms = w
            .to_target
            .iter()
            .filter(|(a, _)| (a[0] as u32) & super::wire::EOM != 0)
            .count();
        assert!(eoms == 0 || w.to_target.len() + w.init.in_flight(id) <= 2);
    }
    let (res, bufs) = finish(&mut w, id);
    res.unwrap();
    assert_eq!(bufs.len(), 1);
    assert_eq!(&snapshot(&r)[10..50], &[1u8; 40][..]);
    assert_eq!(w.events.len(), 1, "one remote event, on EOM");
}

#[test]
fn zero_byte_operations_still_travel_and_complete() {
    let table = MrTable::new();
    let r = region(&table, 8, MrAccess::all());
    let before = snapshot(&r);
    let mut w = World::new(params(4, 2, true, 0), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![],
            &[iov(r.key(), 8, 0)],
            Some(42),
        )
        .unwrap();
    w.drive(id);
    assert_eq!(w.to_target.len(), 1);
    w.run(&mut Rng(1));
    finish(&mut w, id).0.unwrap();
    assert_eq!(w.events[0].data, Some(42));
    assert_eq!(snapshot(&r), before);
    let id = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::empty()],
            &[iov(r.key(), 0, 0)],
            None,
        )
        .unwrap();
    w.drive(id);
    w.run(&mut Rng(2));
    finish(&mut w, id).0.unwrap();
}

#[test]
fn duplicate_stale_forged_and_foreign_replies_are_dropped() {
    let table = MrTable::new();
    let r = region(&table, 64, MrAccess::all());
    let mut w = World::new(params(8, 4, false, 0), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 24])],
            &[iov(r.key(), 0, 24)],
            None,
        )
        .unwrap();
    w.drive(id);
    assert!(w.deliver_request() && w.deliver_request());
    let (args, payload) = w.to_init[0].clone();
    let Ok(Packet::Reply(reply)) = Packet::decode(&args, payload.len()) else {
        panic!()
    };
    // From another peer.
    assert!(matches!(
        w.init.on_reply(PeerAddr(9), &reply, &payload),
        Delivery::Dropped(_)
    ));
    // Out of order: the second reply first.
    assert!(w.deliver_reply(1));
    assert_eq!(
        w.init.on_reply(TARGET, &reply, &payload),
        Delivery::Accepted(id)
    );
    w.drive(id); // now the last chunk leaves
                 // A duplicate.
    assert!(matches!(
        w.init.on_reply(TARGET, &reply, &payload),
        Delivery::Dropped(_)
    ));
    // A chunk never sent.
    let Reply::Read { status, eom, .. } = reply else {
        panic!()
    };
    let forged = Reply::Read {
        id,
        status,
        op_off: 3,
        eom,
    };
    assert!(matches!(
        w.init.on_reply(TARGET, &forged, &payload),
        Delivery::Dropped(_)
    ));
    let wrong_kind = Reply::Write {
        id,
        status: 0,
        op_off: 0,
        eom: false,
    };
    assert!(matches!(
        w.init.on_reply(TARGET, &wrong_kind, &[]),
        Delivery::Dropped(_)
    ));
    w.to_init.clear();
    w.run(&mut Rng(3));
    let (res, bufs) = finish(&mut w, id);
    res.unwrap();
    assert_eq!(bufs[0].as_slice(), &snapshot(&r)[..24]);
    // Stale: the id is dead now.
    assert!(matches!(
        w.init.on_reply(TARGET, &reply, &payload),
        Delivery::Dropped(_)
    ));
}

#[test]
fn a_short_read_reply_of_the_wrong_length_fails_the_operation() {
    let table = MrTable::new();
    let r = region(&table, 16, MrAccess::all());
    let mut w = World::new(params(8, 1, false, 0), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 8])],
            &[iov(r.key(), 0, 8)],
            None,
        )
        .unwrap();
    w.drive(id);
    let Ok(Packet::Request(Request::Read { op_off, .. })) = Packet::decode(&w.to_target[0].0, 0)
    else {
        panic!()
    };
    let bad = Reply::Read {
        id,
        status: 0,
        op_off: u64::from(op_off.0),
        eom: true,
    };
    assert_eq!(
        w.init.on_reply(TARGET, &bad, &[1, 2, 3]),
        Delivery::Accepted(id)
    );
    assert_eq!(finish(&mut w, id).0.unwrap_err().kind(), ErrorKind::Io);
}

/// Every refusal: the initiator gets the error, nothing more is sent, and
/// the region is unchanged byte for byte.
#[test]
fn target_refusals_leave_memory_unchanged() {
    for tagged in [false, true] {
        let table = MrTable::new();
        let ro = region(&table, 64, MrAccess::REMOTE_READ);
        let rw = region(&table, 64, MrAccess::REMOTE_WRITE);
        let (ro_before, rw_before) = (snapshot(&ro), snapshot(&rw));
        let cases = [
            (
                RmaKind::Write,
                iov(999, 0, 40),
                ErrorKind::Access,
                "bad key",
            ),
            (
                RmaKind::Write,
                iov(rw.key(), 30, 40),
                ErrorKind::Access,
                "range",
            ),
            (
                RmaKind::Write,
                iov(ro.key(), 0, 40),
                ErrorKind::Access,
                "no FI_REMOTE_WRITE",
            ),
            (
                RmaKind::Read,
                iov(rw.key(), 0, 40),
                ErrorKind::Access,
                "no FI_REMOTE_READ",
            ),
            (
                RmaKind::Read,
                iov(ro.key(), 60, 40),
                ErrorKind::Access,
                "range",
            ),
        ];
        let mut w = World::new(params(8, 2, tagged, 16), Some(table));
        for (kind, remote, want, what) in cases {
            let id = w
                .init
                .start(
                    kind,
                    TARGET,
                    vec![OpBuffer::from(vec![0xEEu8; 40])],
                    &[remote],
                    None,
                )
                .unwrap();
            w.drive(id);
            w.run(&mut Rng(4));
            let (res, bufs) = finish(&mut w, id);
            let e = res.unwrap_err();
            assert_eq!(e.kind(), want, "{what}: {e}");
            assert!(e.message().contains("refused"), "{e}");
            // The initiator learns which check the target's region failed.
            let reason = match what {
                "bad key" => "no memory region there has the key",
                "range" => "outside the memory region",
                _ => "lacks the access right",
            };
            assert!(e.message().contains(reason), "{what}: {e}");
            assert_eq!(bufs.len(), 1, "{what}: the buffer comes back");
            if kind == RmaKind::Read {
                assert_eq!(
                    bufs[0].as_slice(),
                    &[0xEEu8; 40][..],
                    "{what}: nothing read"
                );
            }
            assert_eq!(snapshot(&ro), ro_before, "{what}");
            assert_eq!(snapshot(&rw), rw_before, "{what}");
            assert!(
                w.to_target.is_empty()
                    && w.t_recvs.is_empty()
                    && w.t_unexp.is_empty()
                    && w.i_recvs.is_empty(),
                "{what}: nothing left over"
            );
        }
        assert!(w.events.is_empty());
        assert_eq!(w.init.len(), 0);
        assert_eq!(w.target.pending_long_writes(), 0);
    }
}

#[test]
fn hostile_requests_are_refused_at_the_target() {
    let table = MrTable::new();
    let r = region(&table, 64, MrAccess::all());
    let before = snapshot(&r);
    let mut t = RmaTarget::new(8, 1);
    let mut scratch = Vec::new();
    let id = Initiator::new(params(8, 1, false, 0), 1)
        .start(RmaKind::Write, TARGET, vec![], &[iov(1, 0, 0)], None)
        .unwrap();
    let reqs = [
        Request::Write {
            id,
            key: r.key(),
            offset: u64::MAX - 1,
            len: 2,
            op_off: Some((0, 2)),
            data: None,
        },
        Request::Write {
            id,
            key: r.key(),
            offset: 60,
            len: 2,
            op_off: Some((0, 5)),
            data: None,
        },
        Request::WriteLong {
            id,
            key: r.key(),
            offset: 1,
            len: u32::MAX,
            data: None,
        },
        Request::Read {
            id,
            key: r.key(),
            offset: 0,
            len: 9,
            op_off: (0, 9),
            eom: true,
        },
        Request::Read {
            id,
            key: r.key(),
            offset: u64::MAX,
            len: 1,
            op_off: (0, 1),
            eom: true,
        },
        Request::ReadLong {
            id,
            key: r.key() + 1,
            offset: 0,
            len: 1,
        },
    ];
    for req in reqs {
        let h = t.handle(Some(&table), INIT, &req, &[7, 7], &mut scratch);
        let (args, n) = h.reply.expect("an error reply");
        assert_eq!(n, 0, "{req:?}");
        let Ok(Packet::Reply(Reply::Write { status, .. } | Reply::Read { status, .. })) =
            Packet::decode(args.as_slice(), 0)
        else {
            panic!("{req:?}")
        };
        assert_ne!(status, 0, "{req:?}");
        assert!(h.post.is_none() && h.event.is_none());
        assert_eq!(snapshot(&r), before, "{req:?}");
    }
    assert_eq!(t.pending_long_writes(), 0);
    assert!(
        t.on_long_recv_done(id, Some(INIT), Ok(0)).is_none(),
        "an initiator id names no long write"
    );
}

#[test]
fn an_error_stops_further_chunks() {
    let table = MrTable::new();
    let _r = region(&table, 64, MrAccess::all());
    let mut w = World::new(params(4, 2, false, 0), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 40])],
            &[iov(777, 0, 40)],
            None,
        )
        .unwrap();
    w.drive(id);
    assert!(w.deliver_request());
    assert!(w.deliver_reply(0));
    assert!(w.init.is_finished(id), "finished on the first error");
    assert!(w.init.peek(id).is_none());
    assert_eq!(w.to_target.len(), 1, "only the chunk already sent");
    assert_eq!(finish(&mut w, id).0.unwrap_err().kind(), ErrorKind::Access);
    w.run(&mut Rng(0));
    assert_eq!(w.dropped, 1, "the late reply names a dead id");
}

#[test]
fn without_a_target_endpoint_requests_get_an_error_reply() {
    for tagged in [false, true] {
        let mut w = World::new(params(8, 2, tagged, 4), None);
        for kind in [RmaKind::Write, RmaKind::Read] {
            let id = w
                .init
                .start(
                    kind,
                    TARGET,
                    vec![OpBuffer::from(vec![0u8; 20])],
                    &[iov(1, 0, 20)],
                    None,
                )
                .unwrap();
            w.drive(id);
            w.run(&mut Rng(8));
            assert_eq!(
                finish(&mut w, id).0.unwrap_err().kind(),
                ErrorKind::OpNotSupp
            );
        }
    }
}

#[test]
fn long_write_refused_before_go_sends_no_bytes() {
    let table = MrTable::new();
    let mut w = World::new(params(8, 2, true, 8), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 100])],
            &[iov(5, 0, 100)],
            None,
        )
        .unwrap();
    w.drive(id);
    assert_eq!(w.to_target.len(), 1, "only REQ_WRITE_LONG");
    assert!(w.deliver_request());
    assert!(w.deliver_reply(0));
    assert!(w.init.peek(id).is_none(), "no MQ send after a refusal");
    assert!(w.t_unexp.is_empty());
    assert_eq!(finish(&mut w, id).0.unwrap_err().kind(), ErrorKind::Access);
}

#[test]
fn long_read_refused_cancels_its_receive() {
    let table = MrTable::new();
    let mut w = World::new(params(8, 2, true, 8), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 100])],
            &[iov(5, 0, 100)],
            None,
        )
        .unwrap();
    w.drive(id);
    assert_eq!(w.i_recvs.len(), 1, "receive posted before the request");
    assert!(w.deliver_request());
    assert!(w.deliver_reply(0));
    assert!(w.i_recvs.is_empty(), "cancelled");
    assert!(
        !w.init.is_finished(id),
        "until the engine gives the buffer back"
    );
    assert!(w.mq_one());
    let (res, bufs) = finish(&mut w, id);
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Access);
    assert_eq!(bufs[0].len(), 100);
}

#[test]
fn long_transfers_tag_with_the_receivers_ids_and_pin_the_range() {
    let table = MrTable::new();
    let r = region(&table, 300, MrAccess::all());
    let mut w = World::new(params(8, 2, true, 8), Some(table.clone()));
    let a = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![OpBuffer::from(vec![9u8; 100])],
            &[iov(r.key(), 0, 100)],
            Some(7),
        )
        .unwrap();
    let b = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 100])],
            &[iov(r.key(), 200, 100)],
            None,
        )
        .unwrap();
    w.drive(a);
    w.drive(b);
    assert!(w.deliver_request()); // REQ_WRITE_LONG: the target pins and posts its receive
    assert_eq!(w.t_recvs.len(), 1);
    let tag = w.t_recvs[0].0;
    assert_eq!(tag & RMA_BIT, RMA_BIT);
    assert_ne!(tag, long_rma_tag(a), "a target id, not the initiator's");
    assert_eq!(w.i_recvs[0].0, long_rma_tag(b));
    // The pinned range refuses the application until the bytes are in.
    assert_eq!(r.write_at(0, &[1]).unwrap_err().kind(), ErrorKind::Busy);
    w.run(&mut Rng(6));
    finish(&mut w, a).0.unwrap();
    let (res, bufs) = finish(&mut w, b);
    res.unwrap();
    let snap = snapshot(&r);
    assert_eq!(&snap[..100], &[9u8; 100][..]);
    assert_eq!(bufs[0].as_slice(), &snap[200..]);
    r.write_at(0, &[1]).unwrap();
    let write_event = w.events.iter().find(|e| e.kind == RmaKind::Write).unwrap();
    assert_eq!(
        (write_event.offset, write_event.len, write_event.data),
        (0, 100, Some(7))
    );
}

#[test]
fn a_long_read_of_the_wrong_length_fails() {
    let table = MrTable::new();
    let mut w = World::new(params(8, 2, true, 8), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 100])],
            &[iov(1, 0, 100)],
            None,
        )
        .unwrap();
    w.drive(id);
    let (_, _, buf) = w.i_recvs.remove(0);
    assert_eq!(
        w.init.on_mq_done(id, Ok(99), buf).unwrap(),
        Delivery::Accepted(id)
    );
    let (res, bufs) = finish(&mut w, id);
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(bufs[0].len(), 100);
    // A completion for an operation with nothing posted hands the buffer back.
    assert!(w.init.on_mq_done(id, Ok(1), OpBuffer::empty()).is_err());
}

#[test]
fn reads_into_bytes_and_data_on_reads_are_refused() {
    let mut w = World::new(params(8, 2, true, 8), None);
    let (e, bufs) = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(Bytes::from_static(b"abc"))],
            &[iov(1, 0, 3)],
            None,
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert_eq!(bufs.len(), 1);
    let (e, _) = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 3])],
            &[iov(1, 0, 3)],
            Some(1),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let (e, bufs) = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 3])],
            &[iov(1, 0, 4)],
            None,
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert_eq!(bufs[0].len(), 3);
}

#[test]
fn a_dead_peer_fails_operations_once_buffers_are_home() {
    let table = MrTable::new();
    let _r = region(&table, 300, MrAccess::all());
    let mut w = World::new(params(8, 2, true, 8), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Read,
            TARGET,
            vec![OpBuffer::from(vec![0u8; 100])],
            &[iov(1, 0, 100)],
            None,
        )
        .unwrap();
    w.drive(id);
    w.init.fail(id, Error::new(ErrorKind::Io, "peer died"));
    assert!(!w.init.is_finished(id));
    w.drive(id); // cancels the receive
    assert!(w.mq_one());
    assert_eq!(finish(&mut w, id).0.unwrap_err().kind(), ErrorKind::Io);
}

#[derive(Debug, Clone)]
struct OpPlan {
    read: bool,
    len_frac: u16,
    local_cuts: Vec<u16>,
    remote_cuts: Vec<u16>,
    bad_key: bool,
}

fn op_plan() -> impl Strategy<Value = OpPlan> {
    (
        any::<bool>(),
        any::<u16>(),
        proptest::collection::vec(any::<u16>(), 0..3),
        proptest::collection::vec(any::<u16>(), 0..3),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(read, len_frac, local_cuts, remote_cuts, bad_key)| OpPlan {
                read,
                len_frac,
                local_cuts,
                remote_cuts,
                bad_key,
            },
        )
}

/// `len` cut at the points `cuts` pick (pieces may be empty).
fn cut(len: usize, cuts: &[u16]) -> Vec<usize> {
    let mut p: Vec<usize> = cuts
        .iter()
        .map(|&c| c as usize * (len + 1) / 65536)
        .collect();
    p.push(0);
    p.push(len);
    p.sort_unstable();
    p.windows(2).map(|w| w[1] - w[0]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Concurrent reads and writes on disjoint ranges, delivered in random
    /// orders: writes land exactly, reads return exactly the region's
    /// bytes, refused operations change nothing, nothing is left over.
    #[test]
    fn two_party_model(
        size in 1usize..3000,
        ops in proptest::collection::vec(op_plan(), 1..6),
        chunk in 1usize..64,
        window in 1usize..5,
        tagged in any::<bool>(),
        threshold in 0usize..200,
        seed in any::<u64>(),
    ) {
        let table = MrTable::new();
        let r = region(&table, size, MrAccess::all());
        let initial = snapshot(&r);
        let mut expected = initial.clone();
        let mut w = World::new(params(chunk, window, tagged, threshold), Some(table));
        let slot = size / ops.len();
        let mut started = Vec::new();
        for (i, p) in ops.iter().enumerate() {
            let start = i * slot;
            let len = p.len_frac as usize * (slot + 1) / 65536;
            let key = if p.bad_key { r.key() + 1000 } else { r.key() };
            let mut remote = Vec::new();
            let mut at = start as u64;
            for n in cut(len, &p.remote_cuts) {
                remote.push(iov(key, at, n as u64));
                at += n as u64;
            }
            let mut fill = (i as u8).wrapping_mul(31).wrapping_add(1);
            let locals: Vec<OpBuffer> = cut(len, &p.local_cuts).into_iter().map(|n| {
                OpBuffer::from((0..n).map(|_| { fill = fill.wrapping_add(13); fill }).collect::<Vec<u8>>())
            }).collect();
            let written: Vec<u8> = locals.iter().flat_map(|b| b.as_slice().to_vec()).collect();
            let kind = if p.read { RmaKind::Read } else { RmaKind::Write };
            if !p.read && !p.bad_key {
                expected[start..start + len].copy_from_slice(&written);
            }
            let id = w.init.start(kind, TARGET, locals, &remote, None).unwrap();
            w.drive(id);
            started.push((id, p.clone(), start, len, written));
        }
        let mut rng = Rng(seed);
        w.run(&mut rng);
        for (id, p, start, len, written) in started {
            let (res, bufs) = w.init.take_finished(id).expect("finished");
            let got: Vec<u8> = bufs.iter().flat_map(|b| b.as_slice().to_vec()).collect();
            if p.bad_key {
                prop_assert_eq!(res.unwrap_err().kind(), ErrorKind::Access);
                prop_assert_eq!(got, written, "buffers unchanged");
            } else {
                prop_assert!(res.is_ok(), "{:?}", res);
                if p.read {
                    prop_assert_eq!(&got[..], &initial[start..start + len]);
                }
            }
        }
        prop_assert_eq!(snapshot(&r), expected);
        prop_assert_eq!(w.init.len(), 0);
        prop_assert_eq!(w.target.pending_long_writes(), 0);
        prop_assert!(w.t_recvs.is_empty() && w.t_unexp.is_empty() && w.i_recvs.is_empty() && w.i_unexp.is_empty());
        // No pinned window is left: the whole region is writable.
        r.write_at(0, &vec![0; size]).unwrap();
    }
}

/// What the transport does for a long write whose MQ send a dead peer
/// will never finish: the operation is failed, the engine keeps the
/// buffer, and an empty one stands in so the operation ends now.
#[test]
fn a_long_write_whose_send_never_ends_fails_with_an_empty_buffer() {
    let table = MrTable::new();
    let _r = region(&table, 300, MrAccess::all());
    let mut w = World::new(params(8, 2, true, 8), Some(table));
    let id = w
        .init
        .start(
            RmaKind::Write,
            TARGET,
            vec![OpBuffer::from(vec![1u8; 100])],
            &[iov(1, 0, 100)],
            None,
        )
        .unwrap();
    w.drive(id);
    assert!(w.deliver_request(), "the long write request");
    assert!(w.deliver_reply(0), "GO: the initiator posts its send");
    let (sid, _, stuck) = w.i_done.pop().expect("the posted send");
    assert_eq!((sid, stuck.len()), (id, 100));
    w.init.fail(id, Error::new(ErrorKind::Io, "peer died"));
    assert!(!w.init.is_finished(id), "the engine still holds the buffer");
    let gave_up = Err(Error::new(ErrorKind::Io, "peer died"));
    assert!(w.init.on_mq_done(id, gave_up, OpBuffer::empty()).is_ok());
    let (r, bufs) = finish(&mut w, id);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(bufs.iter().map(OpBuffer::len).collect::<Vec<_>>(), [0]);
    // A stray completion of the real send later is refused (the id is dead).
    assert!(w
        .init
        .on_mq_done(id, Ok(100), stuck)
        .is_err_and(|b| b.len() == 100));
}
