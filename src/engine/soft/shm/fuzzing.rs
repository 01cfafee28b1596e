//! The fuzz entry point of the shared-memory ring ([`fuzz_shm_ring`]),
//! the harness behind it (also driven by the ring's property tests), and
//! its seed corpus ([`seeds`]).
//!
//! The harness plays both honest sides of one ring in one segment (on the
//! heap) and a hostile peer that writes whatever it likes into the
//! header, the control block, the flags, the data area and the other
//! ring, between the honest sides' calls. Its assertions:
//!
//! * nothing panics, whatever the input;
//! * a header that validates describes a layout that keeps every rule
//!   ([`assert_layout_sound`]);
//! * every call returns a count within what was asked and within the
//!   capacity, and moves its side's index by exactly that count, or
//!   returns `Corrupt`, which then sticks;
//! * `Corrupt` comes only after the peer changed an index;
//! * until the peer changes an index, counts are exactly what an honest
//!   ring gives; until it changes an index or unread data, the bytes are
//!   exactly the stream written (whatever it does to the header, the
//!   flags or the other ring);
//! * the sleeping flags behave as modelled: a raised flag is seen, and
//!   taken, by the waker's check.

use super::ring::{RingConsumer, RingError, RingProducer};
use super::segment::{
    Direction, HeapRegion, Layout, RingArea, SharedRegion, CONTROL_END, CONTROL_LEN, DATA_ALIGN,
    HEADER_LEN, MAX_CAPACITY, MIN_CAPACITY,
};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The largest segment a fuzz input may ask for.
const MAX_FUZZ_SEGMENT: usize = 1 << 20;

/// Checks every property a layout from [`Layout::validate`] promises for
/// a segment of `segment_len` bytes.
pub(crate) fn assert_layout_sound(l: &Layout, segment_len: usize) {
    assert_eq!(l.total_len(), segment_len);
    for d in Direction::BOTH {
        let r = l.ring(d);
        assert!(r.capacity().is_power_of_two(), "{l:?}");
        assert!(
            (MIN_CAPACITY..=MAX_CAPACITY).contains(&r.capacity()),
            "{l:?}"
        );
        assert_eq!(r.data_offset() % DATA_ALIGN, 0, "{l:?}");
        assert!(r.data_offset() >= CONTROL_END, "{l:?}");
        assert!(r.end() <= segment_len, "{l:?}");
        assert!(r.control_offset() + CONTROL_LEN <= CONTROL_END, "{l:?}");
        assert!(r.control_offset() >= HEADER_LEN, "{l:?}");
    }
    let (a, b) = (l.ring(Direction::FromCreator), l.ring(Direction::ToCreator));
    assert!(
        a.end() <= b.data_offset() || b.end() <= a.data_offset(),
        "{l:?}"
    );
    assert_ne!(a.control_offset(), b.control_offset());
}

/// What the hostile peer writes.
#[derive(Clone, Debug)]
pub(crate) enum Tamper {
    /// This value into `head`.
    Head(u64),
    /// The consumer's true index plus this (wrapping) into `head`.
    HeadNear(u64),
    /// This value into `tail`.
    Tail(u64),
    /// The producer's true index plus this (wrapping) into `tail`.
    TailNear(u64),
    /// At this offset (modulo the capacity) of the data area, this many
    /// bytes (up to the area's end) of this value.
    Data(u16, u8, u8),
    /// This byte somewhere outside the ring: the header, the other ring's
    /// control block or data area (by this offset, modulo their size).
    Elsewhere(u16, u8),
    /// This value into the consumer-sleeping (`false`) or the
    /// producer-sleeping (`true`) flag.
    Flag(bool, u32),
}

/// One step of a harness script.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// The producer writes this many bytes of the stream.
    Write(usize),
    /// The producer writes pieces of these sizes, gathered.
    WriteV(Vec<usize>),
    /// The consumer reads up to this many bytes.
    Read(usize),
    /// The consumer peeks at up to this many bytes.
    Peek(usize),
    /// The consumer discards up to this many bytes.
    Consume(usize),
    /// Both sides ask how much they can do.
    Query,
    /// The peer writes.
    Tamper(Tamper),
    /// A step of the sleep protocol: 0 consumer prepares to sleep, 1 it
    /// ends its sleep, 2 producer checks for a sleeping consumer, 3
    /// producer prepares to sleep, 4 it ends its sleep, 5 consumer checks
    /// for a sleeping producer.
    Sleep(u8),
}

/// Byte `i` of the stream the harness writes.
fn stream_byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// Both honest sides of one ring, a model of what they should see, and a
/// hostile peer (see the module docs).
#[derive(Debug)]
pub(crate) struct Harness {
    region: Arc<HeapRegion>,
    layout: Layout,
    direction: Direction,
    area: RingArea,
    tx: RingProducer<Arc<HeapRegion>>,
    rx: RingConsumer<Arc<HeapRegion>>,
    /// Bytes written and not consumed, while `!indices_tampered`.
    pending: VecDeque<u8>,
    /// Bytes of the stream produced so far.
    produced: u64,
    indices_tampered: bool,
    data_tampered: bool,
    consumer_flag: bool,
    producer_flag: bool,
    scratch: Vec<u8>,
}

impl Harness {
    /// A fresh segment laid out as `layout`, both sides of ring
    /// `direction` starting at index `start`.
    pub(crate) fn new(layout: Layout, direction: Direction, start: u64) -> Harness {
        let region = Arc::new(HeapRegion::with_layout(&layout));
        assert_eq!(Layout::read(&*region), Ok(layout));
        let area = layout.ring(direction);
        Harness {
            tx: RingProducer::starting_at(region.clone(), area, start),
            rx: RingConsumer::starting_at(region.clone(), area, start),
            region,
            layout,
            direction,
            area,
            pending: VecDeque::new(),
            produced: 0,
            indices_tampered: false,
            data_tampered: false,
            consumer_flag: false,
            producer_flag: false,
            scratch: Vec::new(),
        }
    }

    /// The ring's capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.area.capacity()
    }

    /// Checks a call's result against the side's error state before it:
    /// `Some(value)` when it succeeded.
    fn settle<T>(
        &self,
        before: Option<RingError>,
        after: Option<RingError>,
        r: Result<T, RingError>,
    ) -> Option<T> {
        match (before, r) {
            (Some(was), Err(e)) => {
                assert_eq!(e, was, "a ring error changed");
                None
            }
            (Some(was), Ok(_)) => panic!("a ring went on after {was}"),
            (None, Err(e)) => {
                assert!(
                    self.indices_tampered,
                    "corrupt while the peer was honest: {e}"
                );
                assert_eq!(after, Some(e), "the error does not stick");
                assert!(!e.to_string().is_empty());
                None
            }
            (None, Ok(v)) => {
                assert_eq!(after, None);
                Some(v)
            }
        }
    }

    fn fill_scratch(&mut self, n: usize) {
        self.scratch.clear();
        let from = self.produced;
        self.scratch
            .extend((from..from + n as u64).map(stream_byte));
    }

    /// Records `k` bytes of the scratch as written.
    fn wrote(&mut self, k: usize, want: usize, room_before: usize, pos_before: u64) {
        let cap = self.capacity();
        assert!(k <= want && k <= cap, "wrote {k} of {want}, capacity {cap}");
        assert_eq!(self.tx.position(), pos_before.wrapping_add(k as u64));
        if !self.indices_tampered {
            assert_eq!(k, want.min(room_before), "an honest ring's room");
            self.pending.extend(&self.scratch[..k]);
        }
        self.produced += k as u64;
    }

    fn room(&self) -> usize {
        self.capacity() - self.pending.len()
    }

    /// Checks a consumer's count, and its bytes unless the scratch is
    /// empty (after a consume).
    fn got(&mut self, k: usize, want: usize, pos_before: u64, consumed: bool) {
        let cap = self.capacity();
        assert!(k <= want && k <= cap, "read {k} of {want}, capacity {cap}");
        let moved = if consumed { k as u64 } else { 0 };
        assert_eq!(self.rx.position(), pos_before.wrapping_add(moved));
        if self.indices_tampered {
            return;
        }
        assert_eq!(k, want.min(self.pending.len()), "an honest ring's bytes");
        if !self.data_tampered && !self.scratch.is_empty() {
            let (a, b) = self.pending.as_slices();
            let ok = if k <= a.len() {
                self.scratch[..k] == a[..k]
            } else {
                self.scratch[..a.len()] == *a && self.scratch[a.len()..k] == b[..k - a.len()]
            };
            assert!(ok, "the bytes read are not the bytes written");
        }
        if consumed {
            self.pending.drain(..k);
        }
    }

    /// Runs one step and checks its outcome.
    pub(crate) fn apply(&mut self, op: Op) {
        let cap = self.capacity();
        match op {
            Op::Write(n) => {
                let (before, pos, room) = (self.tx.error(), self.tx.position(), self.room());
                self.fill_scratch(n);
                let r = self.tx.write(&self.scratch);
                if let Some(k) = self.settle(before, self.tx.error(), r) {
                    self.wrote(k, n, room, pos);
                }
            }
            Op::WriteV(sizes) => {
                let (before, pos, room) = (self.tx.error(), self.tx.position(), self.room());
                let want: usize = sizes.iter().sum();
                self.fill_scratch(want);
                let mut bufs = Vec::with_capacity(sizes.len());
                let mut at = 0;
                for &s in &sizes {
                    bufs.push(IoSlice::new(&self.scratch[at..at + s]));
                    at += s;
                }
                let r = self.tx.write_vectored(&bufs);
                drop(bufs);
                if let Some(k) = self.settle(before, self.tx.error(), r) {
                    self.wrote(k, want, room, pos);
                }
            }
            Op::Read(n) | Op::Peek(n) | Op::Consume(n) => {
                let (before, pos) = (self.rx.error(), self.rx.position());
                self.scratch.clear();
                self.scratch.resize(n, 0xee);
                let r = match op {
                    Op::Read(_) => self.rx.read(&mut self.scratch),
                    Op::Peek(_) => self.rx.peek(&mut self.scratch),
                    _ => {
                        self.scratch.clear();
                        self.rx.consume(n)
                    }
                };
                if let Some(k) = self.settle(before, self.rx.error(), r) {
                    self.got(k, n, pos, !matches!(op, Op::Peek(_)));
                }
            }
            Op::Query => {
                let before = self.tx.error();
                let r = self.tx.free();
                if let Some(f) = self.settle(before, self.tx.error(), r) {
                    assert!(f <= cap);
                    if !self.indices_tampered {
                        assert_eq!(f, self.room());
                    }
                }
                let before = self.rx.error();
                let r = self.rx.readable();
                if let Some(n) = self.settle(before, self.rx.error(), r) {
                    assert!(n <= cap);
                    if !self.indices_tampered {
                        assert_eq!(n, self.pending.len());
                    }
                }
            }
            Op::Tamper(t) => self.tamper(t),
            Op::Sleep(step) => self.sleep_step(step),
        }
    }

    fn tamper(&mut self, t: Tamper) {
        let a = self.area;
        let index = match t {
            Tamper::Head(v) => Some((a.head_offset(), v)),
            Tamper::HeadNear(d) => Some((a.head_offset(), self.rx.position().wrapping_add(d))),
            Tamper::Tail(v) => Some((a.tail_offset(), v)),
            Tamper::TailNear(d) => Some((a.tail_offset(), self.tx.position().wrapping_add(d))),
            _ => None,
        };
        if let Some((offset, v)) = index {
            if self.region.atomic_u64(offset).swap(v, Ordering::Relaxed) != v {
                self.indices_tampered = true;
            }
            return;
        }
        let r = &*self.region;
        match t {
            Tamper::Head(_) | Tamper::HeadNear(_) | Tamper::Tail(_) | Tamper::TailNear(_) => {}
            Tamper::Data(off, n, b) => {
                let off = usize::from(off) % a.capacity();
                let n = usize::from(n).min(a.capacity() - off);
                let mut old = vec![0u8; n];
                r.read_into(a.data_offset() + off, &mut old);
                if old.iter().any(|&x| x != b) {
                    self.data_tampered = true;
                }
                r.write_from(a.data_offset() + off, &vec![b; n]);
            }
            Tamper::Elsewhere(off, b) => {
                let other = self.layout.ring(match self.direction {
                    Direction::FromCreator => Direction::ToCreator,
                    Direction::ToCreator => Direction::FromCreator,
                });
                let mut off = usize::from(off) % (HEADER_LEN + CONTROL_LEN + other.capacity());
                let at = if off < HEADER_LEN {
                    off
                } else {
                    off -= HEADER_LEN;
                    if off < CONTROL_LEN {
                        other.control_offset() + off
                    } else {
                        other.data_offset() + off - CONTROL_LEN
                    }
                };
                r.write_from(at, &[b]);
                // The header is read once, at open: what it says now
                // changes nothing, but reading it must not panic either.
                if let Ok(l) = Layout::read(r) {
                    assert_layout_sound(&l, r.len());
                }
            }
            Tamper::Flag(producer, v) => {
                let offset = if producer {
                    a.producer_sleeping_offset()
                } else {
                    a.consumer_sleeping_offset()
                };
                r.atomic_u32(offset).store(v, Ordering::Relaxed);
                if producer {
                    self.producer_flag = v != 0;
                } else {
                    self.consumer_flag = v != 0;
                }
            }
        }
    }

    fn sleep_step(&mut self, step: u8) {
        let cap = self.capacity();
        match step % 6 {
            0 => {
                let before = self.rx.error();
                let r = self.rx.prepare_sleep();
                if before.is_none() {
                    // Raised before the look that may fail.
                    self.consumer_flag = true;
                }
                if let Some(sleeps) = self.settle(before, self.rx.error(), r) {
                    if !self.indices_tampered {
                        assert_eq!(sleeps, self.pending.is_empty());
                    }
                    self.consumer_flag = sleeps;
                }
            }
            1 => {
                self.rx.end_sleep();
                self.consumer_flag = false;
            }
            2 => {
                let wake = self.tx.consumer_wants_wake();
                assert_eq!(wake, self.consumer_flag, "the consumer's flag");
                self.consumer_flag = false;
            }
            3 => {
                let before = self.tx.error();
                let r = self.tx.prepare_sleep();
                if before.is_none() {
                    self.producer_flag = true;
                }
                if let Some(sleeps) = self.settle(before, self.tx.error(), r) {
                    if !self.indices_tampered {
                        assert_eq!(sleeps, self.pending.len() == cap);
                    }
                    self.producer_flag = sleeps;
                }
            }
            4 => {
                self.tx.end_sleep();
                self.producer_flag = false;
            }
            _ => {
                let wake = self.rx.producer_wants_wake();
                assert_eq!(wake, self.producer_flag, "the producer's flag");
                self.producer_flag = false;
            }
        }
    }
}

/// Reads a fuzz input front to back; past its end, every value is zero.
struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn at_end(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A length in `0..=2 * cap`.
    fn len(&mut self, cap: usize) -> usize {
        usize::from(self.u16()) % (2 * cap + 1)
    }

    fn op(&mut self, cap: usize) -> Op {
        match self.byte() % 16 {
            0 | 1 => Op::Write(self.len(cap)),
            2 => {
                let k = self.byte() % 5;
                Op::WriteV((0..k).map(|_| self.len(cap) / 2).collect())
            }
            3 | 4 => Op::Read(self.len(cap)),
            5 => Op::Peek(self.len(cap)),
            6 => Op::Consume(self.len(cap)),
            7 => Op::Query,
            8 => Op::Tamper(Tamper::Head(self.u64())),
            9 => Op::Tamper(Tamper::HeadNear(self.byte() as i8 as u64)),
            10 => Op::Tamper(Tamper::Tail(self.u64())),
            11 => Op::Tamper(Tamper::TailNear(self.byte() as i8 as u64)),
            12 => Op::Tamper(Tamper::Data(self.u16(), self.byte(), self.byte())),
            13 => Op::Tamper(Tamper::Elsewhere(self.u16(), self.byte())),
            14 => Op::Tamper(Tamper::Flag(self.byte() & 1 != 0, self.u32())),
            _ => Op::Sleep(self.byte()),
        }
    }
}

// Bits of a fuzz input's first byte.
const SETUP_CAPACITY: u8 = 0x07;
const SETUP_NEAR_WRAP: u8 = 0x08;
const SETUP_LENGTH_FROM_HEADER: u8 = 0x20;
const SETUP_TO_CREATOR: u8 = 0x40;
const SETUP_HOSTILE_HEADER: u8 = 0x80;

/// Header fields a fuzz input can overwrite, by number.
const HEADER_FIELDS: [(usize, usize); 9] = [
    (0, 8),
    (8, 4),
    (12, 4),
    (16, 8),
    (24, 8),
    (32, 8),
    (40, 8),
    (48, 8),
    (56, 8),
];

/// Reads a hostile header and segment length (see [`fuzz_shm_ring`]):
/// `None` for a length beyond [`MAX_FUZZ_SEGMENT`].
fn hostile_header(
    input: &mut Input<'_>,
    base: &Layout,
    setup: u8,
) -> Option<([u8; HEADER_LEN], usize)> {
    let mut header = base.encode_header();
    for _ in 0..input.byte() & 7 {
        let (at, n) = HEADER_FIELDS[usize::from(input.byte()) % HEADER_FIELDS.len()];
        let v = input.u64().to_ne_bytes();
        header[at..at + n].copy_from_slice(&v[..n]);
    }
    let delta = i64::from(input.u16() as i16) * 64;
    let len = if setup & SETUP_LENGTH_FROM_HEADER != 0 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[16..24]);
        u64::from_ne_bytes(b)
    } else {
        (base.total_len() as i64 + delta).max(0) as u64
    };
    let len = usize::try_from(len).ok()?;
    (len <= MAX_FUZZ_SEGMENT).then_some((header, len))
}

/// Runs a fuzz input: a segment (possibly with a hostile header), then a
/// script of honest and hostile steps over one of its rings. Never
/// panics; checks the invariants of the module docs with assertions.
///
/// Input: byte 0 picks the capacity (`64 << (b & 7)`), bit 3 starts the
/// indices just below the `u64` wrap (by the next two bytes), bit 6 the
/// ring (`ToCreator` when set), bit 7 a hostile header: a count (`& 7`)
/// of field edits (a field number `% 9` and eight bytes each) over the
/// valid header, then a segment length (the header's own when bit 5 is
/// set, else the valid length plus 64 times a signed 16-bit delta). The
/// rest is steps, each an opcode byte (`% 16`) and its arguments.
pub fn fuzz_shm_ring(data: &[u8]) {
    run(data);
}

/// [`fuzz_shm_ring`], giving back the harness at the end of the script
/// (`None` when the header was refused).
fn run(data: &[u8]) -> Option<Harness> {
    let mut input = Input { data };
    let setup = input.byte();
    let base = Layout::new(MIN_CAPACITY << (setup & SETUP_CAPACITY))
        .expect("capacities up to 8 KiB are valid");
    let layout = if setup & SETUP_HOSTILE_HEADER != 0 {
        let (header, len) = hostile_header(&mut input, &base, setup)?;
        match Layout::validate(&header, len) {
            Ok(l) => {
                assert_layout_sound(&l, len);
                l
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return None;
            }
        }
    } else {
        base
    };
    let direction = if setup & SETUP_TO_CREATOR != 0 {
        Direction::ToCreator
    } else {
        Direction::FromCreator
    };
    let start = if setup & SETUP_NEAR_WRAP != 0 {
        u64::MAX - u64::from(input.u16())
    } else {
        0
    };
    let mut h = Harness::new(layout, direction, start);
    let cap = h.capacity();
    while !input.at_end() {
        let op = input.op(cap);
        h.apply(op);
    }
    Some(h)
}

/// Builds fuzz inputs for [`seeds`]: the encoding [`fuzz_shm_ring`] reads.
struct Script(Vec<u8>);

impl Script {
    fn new(setup: u8) -> Script {
        Script(vec![setup])
    }

    /// A hostile header: `edits` of (field number, value), then the
    /// length delta (in 64-byte units).
    fn hostile(setup: u8, edits: &[(u8, u64)], delta: i16) -> Script {
        let mut s = Script::new(setup | SETUP_HOSTILE_HEADER);
        s.0.push(edits.len() as u8);
        for &(field, v) in edits {
            s.0.push(field);
            s.0.extend(v.to_le_bytes());
        }
        s.0.extend(delta.to_le_bytes());
        s
    }

    /// The distance below the `u64` wrap where indices start (with
    /// [`SETUP_NEAR_WRAP`], right after the setup).
    fn start_below_wrap(mut self, d: u16) -> Script {
        self.0.extend(d.to_le_bytes());
        self
    }

    fn op(mut self, code: u8, args: &[u8]) -> Script {
        self.0.push(code);
        self.0.extend_from_slice(args);
        self
    }

    fn len_op(self, code: u8, n: u16) -> Script {
        self.op(code, &n.to_le_bytes())
    }

    fn write(self, n: u16) -> Script {
        self.len_op(0, n)
    }

    fn writev(mut self, ns: &[u16]) -> Script {
        self.0.push(2);
        self.0.push(ns.len() as u8);
        for n in ns {
            // The decoder halves each piece.
            self.0.extend((n * 2).to_le_bytes());
        }
        self
    }

    fn read(self, n: u16) -> Script {
        self.len_op(3, n)
    }

    fn peek(self, n: u16) -> Script {
        self.len_op(5, n)
    }

    fn consume(self, n: u16) -> Script {
        self.len_op(6, n)
    }

    fn query(self) -> Script {
        self.op(7, &[])
    }

    fn head(self, v: u64) -> Script {
        self.op(8, &v.to_le_bytes())
    }

    fn head_near(self, d: i8) -> Script {
        self.op(9, &[d as u8])
    }

    fn tail(self, v: u64) -> Script {
        self.op(10, &v.to_le_bytes())
    }

    fn tail_near(self, d: i8) -> Script {
        self.op(11, &[d as u8])
    }

    fn data(self, off: u16, n: u8, b: u8) -> Script {
        let [o0, o1] = off.to_le_bytes();
        self.op(12, &[o0, o1, n, b])
    }

    fn elsewhere(self, off: u16, b: u8) -> Script {
        let [o0, o1] = off.to_le_bytes();
        self.op(13, &[o0, o1, b])
    }

    fn flag(self, producer: bool, v: u32) -> Script {
        let mut args = vec![u8::from(producer)];
        args.extend(v.to_le_bytes());
        self.op(14, &args)
    }

    fn sleep(self, step: u8) -> Script {
        self.op(15, &[step])
    }

    fn done(self) -> Vec<u8> {
        self.0
    }
}

/// Named seed inputs.
pub type Seeds = Vec<(&'static str, Vec<u8>)>;

/// The seed corpus of [`fuzz_shm_ring`]: honest streams (small and large
/// rings, wrapping, full, gathered, near the `u64` wrap), every kind of
/// hostile write, and hostile headers, valid and not.
pub fn seeds() -> Seeds {
    let cap64 = 0;
    let cap4k = 6;
    vec![
        (
            "stream-small-ring",
            Script::new(cap64)
                .write(40)
                .read(40)
                .write(50)
                .read(13)
                .read(37)
                .query()
                .done(),
        ),
        (
            "full-ring",
            Script::new(cap64)
                .write(100)
                .write(1)
                .query()
                .read(10)
                .write(20)
                .read(128)
                .done(),
        ),
        (
            "zero-lengths",
            Script::new(cap64)
                .write(0)
                .read(0)
                .writev(&[0, 0])
                .consume(0)
                .write(3)
                .read(0)
                .read(3)
                .done(),
        ),
        (
            "exact-capacity-at-offset",
            Script::new(cap64)
                .write(13)
                .read(13)
                .write(64)
                .query()
                .read(64)
                .done(),
        ),
        (
            "gathered-and-peeked",
            Script::new(1)
                .writev(&[16, 0, 24, 60])
                .peek(8)
                .consume(8)
                .read(92)
                .writev(&[60, 60])
                .read(128)
                .done(),
        ),
        (
            "near-u64-wrap",
            Script::new(cap64 | SETUP_NEAR_WRAP)
                .start_below_wrap(100)
                .write(45)
                .read(37)
                .write(45)
                .read(37)
                .write(45)
                .read(64)
                .write(64)
                .read(64)
                .done(),
        ),
        (
            "large-ring-to-creator",
            Script::new(cap4k | SETUP_TO_CREATOR)
                .write(3000)
                .read(1000)
                .write(3000)
                .read(5000)
                .write(4096)
                .query()
                .read(4096)
                .done(),
        ),
        (
            "head-beyond-tail",
            Script::new(cap64)
                .write(30)
                .head_near(40)
                .write(64)
                .query()
                .read(10)
                .done(),
        ),
        (
            "head-backwards",
            Script::new(cap64)
                .write(64)
                .read(20)
                .query()
                .head_near(-5)
                .write(10)
                .write(30)
                .done(),
        ),
        (
            "head-within-range-lies",
            Script::new(cap64)
                .write(64)
                .head_near(32)
                .write(32)
                .read(64)
                .read(64)
                .done(),
        ),
        (
            "tail-too-far",
            Script::new(cap64)
                .write(10)
                .tail_near(60)
                .read(100)
                .read(1)
                .done(),
        ),
        (
            "tail-backwards",
            Script::new(cap64)
                .write(30)
                .read(30)
                .tail_near(-1)
                .read(5)
                .query()
                .done(),
        ),
        (
            "absolute-garbage-indices",
            Script::new(cap64)
                .write(20)
                .head(u64::MAX)
                .tail(1 << 63)
                .query()
                .write(10)
                .read(10)
                .sleep(0)
                .sleep(3)
                .done(),
        ),
        (
            "data-scribbled",
            Script::new(cap64)
                .write(50)
                .data(10, 20, 0xaa)
                .read(50)
                .write(64)
                .read(64)
                .done(),
        ),
        (
            "header-and-other-ring-scribbled",
            Script::new(cap64)
                .write(50)
                .elsewhere(0, 0)
                .elsewhere(20, 0xff)
                .elsewhere(70, 1)
                .elsewhere(300, 9)
                .read(50)
                .write(64)
                .read(64)
                .done(),
        ),
        (
            "consumer-sleeps-and-wakes",
            Script::new(cap64)
                .sleep(2)
                .sleep(0)
                .write(1)
                .sleep(2)
                .sleep(2)
                .sleep(1)
                .sleep(0)
                .sleep(2)
                .read(1)
                .done(),
        ),
        (
            "producer-sleeps-and-wakes",
            Script::new(cap64)
                .write(64)
                .sleep(3)
                .read(5)
                .sleep(5)
                .sleep(5)
                .sleep(4)
                .sleep(3)
                .sleep(5)
                .done(),
        ),
        (
            "flags-forged",
            Script::new(cap64)
                .flag(false, 7)
                .flag(true, u32::MAX)
                .sleep(2)
                .sleep(5)
                .flag(false, 0)
                .sleep(0)
                .sleep(2)
                .done(),
        ),
        (
            "hostile-header-valid-other-placement",
            Script::hostile(
                SETUP_LENGTH_FROM_HEADER,
                &[(3, 8192 + 4096), (4, 8192), (5, 4096), (6, 512), (7, 64)],
                0,
            )
            .write(100)
            .read(100)
            .elsewhere(100, 3)
            .write(64)
            .read(64)
            .done(),
        ),
        (
            "hostile-header-bad-magic",
            Script::hostile(0, &[(0, 0x1122_3344_5566_7788)], 0)
                .write(1)
                .done(),
        ),
        (
            "hostile-header-version",
            Script::hostile(0, &[(1, 2)], 0).done(),
        ),
        (
            "hostile-header-length-mismatch",
            Script::hostile(0, &[], 1).done(),
        ),
        (
            "hostile-header-capacity-not-power-of-two",
            Script::hostile(0, &[(5, 96)], 0).done(),
        ),
        (
            "hostile-header-misaligned",
            Script::hostile(0, &[(4, 4096 + 8)], 0).done(),
        ),
        (
            "hostile-header-overlap",
            Script::hostile(0, &[(6, 4096)], 0).done(),
        ),
        (
            "hostile-header-over-control",
            Script::hostile(0, &[(4, 128)], 0).done(),
        ),
        (
            "hostile-header-out-of-bounds",
            Script::hostile(0, &[(6, u64::MAX - 63)], 0).done(),
        ),
        ("empty", Vec::new()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    fn seed_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/shm_ring")
    }

    #[test]
    fn seeds_run_clean_and_every_prefix_too() {
        let s = seeds();
        assert!(s.len() >= 20);
        for (_, bytes) in &s {
            fuzz_shm_ring(bytes);
            for n in 0..bytes.len() {
                fuzz_shm_ring(&bytes[..n]);
            }
        }
    }

    #[test]
    fn hostile_seeds_reach_the_ring_or_the_error_they_name() {
        // The seeds test what their names say: the valid other placement
        // is accepted, each broken header is refused for its own reason.
        let header_of = |bytes: &[u8]| {
            let mut input = Input { data: bytes };
            let setup = input.byte();
            let base = Layout::new(MIN_CAPACITY << (setup & SETUP_CAPACITY)).unwrap();
            let (header, len) = hostile_header(&mut input, &base, setup).unwrap();
            Layout::validate(&header, len)
        };
        use super::super::segment::LayoutError as E;
        for (name, bytes) in seeds() {
            if !name.starts_with("hostile-header") {
                continue;
            }
            let r = header_of(&bytes);
            let ok = match name {
                "hostile-header-valid-other-placement" => r.is_ok(),
                "hostile-header-bad-magic" => matches!(r, Err(E::BadMagic { .. })),
                "hostile-header-version" => matches!(r, Err(E::Version { .. })),
                "hostile-header-length-mismatch" => matches!(r, Err(E::Length { .. })),
                "hostile-header-capacity-not-power-of-two" => {
                    matches!(r, Err(E::Capacity { .. }))
                }
                "hostile-header-misaligned" => matches!(r, Err(E::Misaligned { .. })),
                "hostile-header-overlap" => matches!(r, Err(E::Overlap { .. })),
                "hostile-header-over-control" => matches!(r, Err(E::OverlapsControl { .. })),
                "hostile-header-out-of-bounds" => matches!(r, Err(E::OutOfBounds { .. })),
                _ => panic!("unknown seed {name}"),
            };
            assert!(ok, "{name}: {r:?}");
        }
    }

    #[test]
    fn hostile_index_seeds_do_break_the_ring_and_honest_ones_do_not() {
        for (name, bytes) in seeds() {
            let Some(h) = run(&bytes) else {
                assert!(
                    name.starts_with("hostile-header") || name == "empty",
                    "{name}"
                );
                continue;
            };
            let (tx, rx) = (h.tx.error().is_some(), h.rx.error().is_some());
            let want = match name {
                "head-beyond-tail" | "head-backwards" => (true, false),
                // The producer believes the lie and overwrites unread
                // bytes; the consumer then sees a tail beyond its room.
                "tail-too-far" | "tail-backwards" | "head-within-range-lies" => (false, true),
                "absolute-garbage-indices" => (true, true),
                _ => (false, false),
            };
            assert_eq!((tx, rx), want, "{name}");
            if want == (false, false) {
                assert!(!h.indices_tampered, "{name}");
            }
        }
    }

    #[test]
    fn the_harness_catches_a_wrong_byte() {
        // The byte check is live: a scribble the harness is not told about
        // fails it.
        let result = std::panic::catch_unwind(|| {
            let mut h = Harness::new(Layout::new(64).unwrap(), Direction::FromCreator, 0);
            h.apply(Op::Write(10));
            let a = h.area;
            h.region
                .write_from(a.data_offset() + 3, &[0x5a ^ stream_byte(3)]);
            h.apply(Op::Read(10));
        });
        assert!(result.is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random inputs and mutated seeds never fail the harness.
        #[test]
        fn random_and_mutated_inputs_run_clean(
            which in 0usize..64,
            flips in proptest::collection::vec((0usize..512, any::<u8>()), 0..6),
            random in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let s = seeds();
            let mut v = s[which % s.len()].1.clone();
            for (i, x) in flips {
                if !v.is_empty() {
                    let n = v.len();
                    v[i % n] ^= x;
                }
            }
            fuzz_shm_ring(&v);
            fuzz_shm_ring(&random);
        }
    }

    /// Writes the corpus to `fuzz/corpus/shm_ring/`:
    /// `cargo test -p psmrail --lib write_shm_fuzz_seeds -- --ignored`.
    #[test]
    #[ignore]
    fn write_shm_fuzz_seeds() {
        let d = seed_dir();
        std::fs::create_dir_all(&d).unwrap();
        for (i, (name, bytes)) in seeds().iter().enumerate() {
            std::fs::write(d.join(format!("{i:02}-{name}")), bytes).unwrap();
        }
    }

    #[test]
    fn checked_in_seeds_match_the_generator() {
        let d = seed_dir();
        assert!(d.is_dir(), "seed corpus {} is missing", d.display());
        for (i, (name, bytes)) in seeds().iter().enumerate() {
            let on_disk = std::fs::read(d.join(format!("{i:02}-{name}"))).unwrap();
            assert_eq!(&on_disk, bytes, "shm_ring/{name}");
        }
    }
}
