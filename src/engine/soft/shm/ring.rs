//! One direction of a segment as a byte pipe: [`RingProducer`] on one
//! side, [`RingConsumer`] on the other (one of each; the two live in
//! different processes).
//!
//! # Indices
//!
//! `tail` counts the bytes ever written, `head` the bytes ever consumed;
//! both are free running `u64`s (wrapping arithmetic throughout), and
//! index `i` lives at byte `i & (capacity - 1)` of the data area. The ring
//! holds `tail - head` bytes, at most its capacity. Each side keeps its own
//! index privately and only ever stores it; the peer's index is loaded
//! from shared memory and checked before it is believed:
//!
//! * the producer accepts a `head` in `last head ..= tail`: the consumer
//!   can only have consumed what was written, and never un-consumes;
//! * the consumer accepts a `tail` in `last tail ..= head + capacity`: the
//!   producer never un-writes, nor writes more than there is room for.
//!
//! Anything else is [`RingError::Corrupt`], which names the value and the
//! range it should have been in, and sticks: every later call on that
//! side returns the same error. A peer that lies within the ranges (says
//! it consumed bytes it did not, or scribbles over the data area) can
//! garble the byte stream, which the frame decoder above rejects as it
//! would garbage from a socket, but it can never make this side access
//! memory outside the ring, panic, loop, or read more than a capacity's
//! worth per call.
//!
//! # Ordering
//!
//! The producer copies bytes in, then stores `tail` with `Release`; the
//! consumer loads `tail` with `Acquire`, then copies them out. Likewise
//! the consumer copies out, then stores `head` with `Release`, and the
//! producer loads `head` with `Acquire` before reusing that room. Each
//! side also caches the peer's index it last validated and loads it again
//! only when the cached value does not satisfy the call, so a write or a
//! read of what is already known to fit touches one shared line (its own
//! index) besides the data.
//!
//! # Sleeping
//!
//! A side that finds nothing to do may sleep (on an eventfd, in the
//! edge) once the peer knows to wake it. The protocol is Dekker's: the
//! sleeper raises its flag, issues a `SeqCst` fence, and looks again
//! ([`RingConsumer::prepare_sleep`], [`RingProducer::prepare_sleep`]);
//! the waker publishes its index, issues a `SeqCst` fence, and looks at the
//! flag ([`RingProducer::consumer_wants_wake`],
//! [`RingConsumer::producer_wants_wake`]). With the two fences, at least
//! one of them sees the other's store, so either the sleeper sees the new
//! bytes (or room) and stays awake, or the waker sees the flag and
//! signals: no wake-up is lost. The waker clears the flag when it sees it,
//! so a stream of writes to a sleeping consumer signals once. The fence
//! costs some tens of nanoseconds, so the edge asks once per batch of
//! writes (or reads), not per frame. The flags are hints: a peer that sets
//! or clears them at will only causes spurious or missed wake-ups of
//! itself, or spurious ones of this side.

use super::segment::{RingArea, SharedRegion};
use std::fmt;
use std::io::IoSlice;
use std::sync::atomic::{fence, Ordering};

/// Which of the peer's indices was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingIndex {
    /// The consumer's `head`, as the producer loaded it.
    Head,
    /// The producer's `tail`, as the consumer loaded it.
    Tail,
}

impl fmt::Display for RingIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RingIndex::Head => "head",
            RingIndex::Tail => "tail",
        })
    }
}

/// The peer broke the ring's rules. Ends the ring: the link over it is
/// closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RingError {
    /// An index in shared memory outside what the peer may have stored.
    #[error(
        "shared ring corrupt: the peer's {index} index is {found}, outside \
         {low}..={high} (wrapping)"
    )]
    Corrupt {
        /// Which index.
        index: RingIndex,
        /// The value loaded.
        found: u64,
        /// The least value allowed.
        low: u64,
        /// The greatest value allowed.
        high: u64,
    },
}

/// The writing end of one ring.
#[derive(Debug)]
pub(crate) struct RingProducer<R> {
    region: R,
    area: RingArea,
    mask: u64,
    /// Bytes written (this side's own index).
    tail: u64,
    /// The consumer's index as last loaded and validated.
    head: u64,
    broken: Option<RingError>,
}

/// The reading end of one ring.
#[derive(Debug)]
pub(crate) struct RingConsumer<R> {
    region: R,
    area: RingArea,
    mask: u64,
    /// Bytes consumed (this side's own index).
    head: u64,
    /// The producer's index as last loaded and validated.
    tail: u64,
    broken: Option<RingError>,
}

/// Checks that `area` lies in `region` (it came from a layout validated
/// against another region otherwise: a bug on this side).
fn check_area(region: &impl SharedRegion, area: &RingArea) {
    assert!(
        area.end() <= region.len() && area.capacity().is_power_of_two(),
        "ring area {area:?} is not in a region of {} bytes",
        region.len()
    );
}

impl<R: SharedRegion> RingProducer<R> {
    /// The producer of the ring at `area` (from a [`Layout`] validated
    /// for this `region`), whose control block is fresh: both indices
    /// zero, as [`Layout::init`] leaves them.
    ///
    /// # Panics
    ///
    /// When `area` does not lie in `region`.
    ///
    /// [`Layout`]: super::segment::Layout
    /// [`Layout::init`]: super::segment::Layout::init
    pub(crate) fn new(region: R, area: RingArea) -> Self {
        check_area(&region, &area);
        RingProducer {
            region,
            area,
            mask: area.capacity() as u64 - 1,
            tail: 0,
            head: 0,
            broken: None,
        }
    }

    /// A producer whose indices start at `position` (stored into the
    /// control block), so that tests reach the `u64` wrap.
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn starting_at(region: R, area: RingArea, position: u64) -> Self {
        let mut p = RingProducer::new(region, area);
        p.tail = position;
        p.head = position;
        p.region
            .atomic_u64(area.tail_offset())
            .store(position, Ordering::Release);
        p
    }

    /// Bytes written so far (the free-running `tail`).
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn position(&self) -> u64 {
        self.tail
    }

    /// The first error this side met, if any.
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn error(&self) -> Option<RingError> {
        self.broken
    }

    /// Bytes that can be written now (loads the consumer's index).
    pub(crate) fn free(&mut self) -> Result<usize, RingError> {
        self.check()?;
        self.load_head()?;
        Ok(self.cached_free())
    }

    /// Writes as much of `src` as fits (wrapping around the end of the
    /// area), then publishes it. `Ok(0)` when the ring is full or `src` is
    /// empty.
    #[inline]
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn write(&mut self, src: &[u8]) -> Result<usize, RingError> {
        self.check()?;
        if src.is_empty() {
            return Ok(0);
        }
        let n = self.reserve(src.len())?;
        let at = self.tail;
        self.copy_in(at, &src[..n]);
        self.publish(n);
        Ok(n)
    }

    /// Writes as much of `bufs`, in order, as fits (a frame's header and
    /// its payload, gathered), then publishes it all at once. `Ok(0)` when
    /// the ring is full or `bufs` hold no bytes.
    pub(crate) fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Result<usize, RingError> {
        self.check()?;
        let want = bufs.iter().fold(0usize, |a, b| a.saturating_add(b.len()));
        if want == 0 {
            return Ok(0);
        }
        let n = self.reserve(want)?;
        let mut at = self.tail;
        let mut left = n;
        for b in bufs {
            if left == 0 {
                break;
            }
            let k = b.len().min(left);
            self.copy_in(at, &b[..k]);
            at = at.wrapping_add(k as u64);
            left -= k;
        }
        self.publish(n);
        Ok(n)
    }

    /// The first half of going to sleep until the consumer makes room:
    /// raises the producer-sleeping flag, fences, and looks again. `true`:
    /// the ring is still full, sleep (the consumer will see the flag after
    /// its next read); `false`: there is room now, the flag is lowered
    /// again, do not sleep. See the module docs.
    pub(crate) fn prepare_sleep(&mut self) -> Result<bool, RingError> {
        self.check()?;
        self.announce_sleep();
        fence(Ordering::SeqCst);
        self.recheck_before_sleep()
    }

    /// Lowers the producer-sleeping flag (after waking, or on deciding not
    /// to wait after all).
    pub(crate) fn end_sleep(&self) {
        self.sleeping_flag().store(0, Ordering::Relaxed);
    }

    /// After writing: whether the consumer sleeps and must be woken (its
    /// flag is then cleared, so that the next write does not signal
    /// again). Fences first; call once per batch of writes. See the module
    /// docs.
    pub(crate) fn consumer_wants_wake(&self) -> bool {
        fence(Ordering::SeqCst);
        let flag = self.region.atomic_u32(self.area.consumer_sleeping_offset());
        flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0
    }

    fn sleeping_flag(&self) -> &std::sync::atomic::AtomicU32 {
        self.region.atomic_u32(self.area.producer_sleeping_offset())
    }

    fn announce_sleep(&self) {
        self.sleeping_flag().store(1, Ordering::Relaxed);
    }

    fn recheck_before_sleep(&mut self) -> Result<bool, RingError> {
        if self.free()? > 0 {
            self.end_sleep();
            return Ok(false);
        }
        Ok(true)
    }

    #[inline]
    fn check(&self) -> Result<(), RingError> {
        match self.broken {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    #[inline]
    fn cached_free(&self) -> usize {
        // `tail - head <= capacity` always holds for the validated `head`.
        self.area.capacity() - self.tail.wrapping_sub(self.head) as usize
    }

    /// How many of `want` bytes fit, loading `head` only when the cached
    /// one says fewer than `want`.
    #[inline]
    fn reserve(&mut self, want: usize) -> Result<usize, RingError> {
        let mut free = self.cached_free();
        if free < want {
            self.load_head()?;
            free = self.cached_free();
        }
        Ok(free.min(want))
    }

    fn load_head(&mut self) -> Result<(), RingError> {
        let head = self
            .region
            .atomic_u64(self.area.head_offset())
            .load(Ordering::Acquire);
        // In `self.head ..= self.tail`, modulo 2^64.
        if head.wrapping_sub(self.head) > self.tail.wrapping_sub(self.head) {
            let e = RingError::Corrupt {
                index: RingIndex::Head,
                found: head,
                low: self.head,
                high: self.tail,
            };
            self.broken = Some(e);
            return Err(e);
        }
        self.head = head;
        Ok(())
    }

    /// Copies `src` (at most the free room) to index `at`.
    #[inline]
    fn copy_in(&self, at: u64, src: &[u8]) {
        let off = (at & self.mask) as usize;
        let first = src.len().min(self.area.capacity() - off);
        let data = self.area.data_offset();
        self.region.write_from(data + off, &src[..first]);
        if first < src.len() {
            self.region.write_from(data, &src[first..]);
        }
    }

    #[inline]
    fn publish(&mut self, n: usize) {
        self.tail = self.tail.wrapping_add(n as u64);
        self.region
            .atomic_u64(self.area.tail_offset())
            .store(self.tail, Ordering::Release);
    }
}

impl<R: SharedRegion> RingConsumer<R> {
    /// The consumer of the ring at `area` (from a [`Layout`] validated
    /// for this `region`), whose control block is fresh.
    ///
    /// # Panics
    ///
    /// When `area` does not lie in `region`.
    ///
    /// [`Layout`]: super::segment::Layout
    pub(crate) fn new(region: R, area: RingArea) -> Self {
        check_area(&region, &area);
        RingConsumer {
            region,
            area,
            mask: area.capacity() as u64 - 1,
            head: 0,
            tail: 0,
            broken: None,
        }
    }

    /// A consumer whose indices start at `position` (stored into the
    /// control block); see [`RingProducer::starting_at`].
    #[cfg(any(test, feature = "hooks"))]
    pub(crate) fn starting_at(region: R, area: RingArea, position: u64) -> Self {
        let mut c = RingConsumer::new(region, area);
        c.head = position;
        c.tail = position;
        c.region
            .atomic_u64(area.head_offset())
            .store(position, Ordering::Release);
        c
    }

    /// Bytes consumed so far (the free-running `head`).
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn position(&self) -> u64 {
        self.head
    }

    /// The first error this side met, if any.
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn error(&self) -> Option<RingError> {
        self.broken
    }

    /// Bytes that can be read now (loads the producer's index).
    pub(crate) fn readable(&mut self) -> Result<usize, RingError> {
        self.check()?;
        self.load_tail()?;
        Ok(self.cached_readable())
    }

    /// Copies out as many bytes as are readable and fit in `dst`, then
    /// releases their room to the producer. `Ok(0)` when the ring is
    /// empty or `dst` is.
    #[inline]
    pub(crate) fn read(&mut self, dst: &mut [u8]) -> Result<usize, RingError> {
        let n = self.peek(dst)?;
        self.advance(n);
        Ok(n)
    }

    /// Copies out what [`read`](Self::read) would, without consuming it.
    #[inline]
    pub(crate) fn peek(&mut self, dst: &mut [u8]) -> Result<usize, RingError> {
        self.check()?;
        let n = self.available(dst.len())?;
        self.copy_out(self.head, &mut dst[..n]);
        Ok(n)
    }

    /// Consumes up to `n` readable bytes without copying them (after a
    /// [`peek`](Self::peek)); returns how many.
    #[cfg_attr(not(any(test, feature = "hooks")), allow(dead_code))]
    pub(crate) fn consume(&mut self, n: usize) -> Result<usize, RingError> {
        self.check()?;
        let n = self.available(n)?;
        self.advance(n);
        Ok(n)
    }

    /// The first half of going to sleep until the producer writes: raises
    /// the consumer-sleeping flag, fences, and looks again. `true`: still
    /// empty, sleep (the producer will see the flag after its next write);
    /// `false`: bytes came, the flag is lowered again, do not sleep. See
    /// the module docs.
    pub(crate) fn prepare_sleep(&mut self) -> Result<bool, RingError> {
        self.check()?;
        self.announce_sleep();
        fence(Ordering::SeqCst);
        self.recheck_before_sleep()
    }

    /// Lowers the consumer-sleeping flag (after waking, or on deciding not
    /// to wait after all).
    pub(crate) fn end_sleep(&self) {
        self.sleeping_flag().store(0, Ordering::Relaxed);
    }

    /// After reading: whether the producer sleeps for room and must be
    /// woken (its flag is then cleared). Fences first; call once per batch
    /// of reads. See the module docs.
    pub(crate) fn producer_wants_wake(&self) -> bool {
        fence(Ordering::SeqCst);
        let flag = self.region.atomic_u32(self.area.producer_sleeping_offset());
        flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0
    }

    fn sleeping_flag(&self) -> &std::sync::atomic::AtomicU32 {
        self.region.atomic_u32(self.area.consumer_sleeping_offset())
    }

    fn announce_sleep(&self) {
        self.sleeping_flag().store(1, Ordering::Relaxed);
    }

    fn recheck_before_sleep(&mut self) -> Result<bool, RingError> {
        if self.readable()? > 0 {
            self.end_sleep();
            return Ok(false);
        }
        Ok(true)
    }

    #[inline]
    fn check(&self) -> Result<(), RingError> {
        match self.broken {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    #[inline]
    fn cached_readable(&self) -> usize {
        // At most the capacity for the validated `tail`.
        self.tail.wrapping_sub(self.head) as usize
    }

    /// How many of `want` bytes are readable, loading `tail` only when the
    /// cached one says fewer than `want`.
    #[inline]
    fn available(&mut self, want: usize) -> Result<usize, RingError> {
        let mut n = self.cached_readable();
        if n < want {
            self.load_tail()?;
            n = self.cached_readable();
        }
        Ok(n.min(want))
    }

    fn load_tail(&mut self) -> Result<(), RingError> {
        let tail = self
            .region
            .atomic_u64(self.area.tail_offset())
            .load(Ordering::Acquire);
        let limit = self.head.wrapping_add(self.area.capacity() as u64);
        // In `self.tail ..= self.head + capacity`, modulo 2^64.
        if tail.wrapping_sub(self.tail) > limit.wrapping_sub(self.tail) {
            let e = RingError::Corrupt {
                index: RingIndex::Tail,
                found: tail,
                low: self.tail,
                high: limit,
            };
            self.broken = Some(e);
            return Err(e);
        }
        self.tail = tail;
        Ok(())
    }

    /// Copies `dst.len()` bytes (at most the readable ones) from index
    /// `at`.
    #[inline]
    fn copy_out(&self, at: u64, dst: &mut [u8]) {
        let off = (at & self.mask) as usize;
        let first = dst.len().min(self.area.capacity() - off);
        let data = self.area.data_offset();
        let (a, b) = dst.split_at_mut(first);
        self.region.read_into(data + off, a);
        if !b.is_empty() {
            self.region.read_into(data, b);
        }
    }

    #[inline]
    fn advance(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.head = self.head.wrapping_add(n as u64);
        self.region
            .atomic_u64(self.area.head_offset())
            .store(self.head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fuzzing::{Harness, Op, Tamper};
    use super::super::segment::{Direction, HeapRegion, Layout};
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    fn region(cap: usize) -> (HeapRegion, RingArea) {
        let l = Layout::new(cap).unwrap();
        (HeapRegion::with_layout(&l), l.ring(Direction::FromCreator))
    }

    /// Byte `i` of a test stream.
    fn byte(i: u64) -> u8 {
        (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
    }

    fn stream(from: u64, n: usize) -> Vec<u8> {
        (from..from + n as u64).map(byte).collect()
    }

    fn head_of(r: &HeapRegion, a: RingArea) -> &AtomicU64 {
        r.atomic_u64(a.head_offset())
    }

    fn tail_of(r: &HeapRegion, a: RingArea) -> &AtomicU64 {
        r.atomic_u64(a.tail_offset())
    }

    #[test]
    fn bytes_wrap_around_the_end() {
        let (r, a) = region(64);
        let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
        let mut buf = [0u8; 64];
        assert_eq!(p.write(&stream(0, 40)), Ok(40));
        assert_eq!(c.read(&mut buf[..40]), Ok(40));
        assert_eq!(&buf[..40], &stream(0, 40)[..]);
        // 24 bytes to the end, 26 from the start.
        assert_eq!(p.write(&stream(40, 50)), Ok(50));
        assert_eq!(c.readable(), Ok(50));
        assert_eq!(c.read(&mut buf), Ok(50));
        assert_eq!(&buf[..50], &stream(40, 50)[..]);
        assert_eq!((p.position(), c.position()), (90, 90));
    }

    #[test]
    fn a_full_ring_takes_nothing_until_read() {
        let (r, a) = region(64);
        let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
        assert_eq!(p.write(&stream(0, 100)), Ok(64));
        assert_eq!(p.free(), Ok(0));
        assert_eq!(p.write(&stream(64, 1)), Ok(0));
        let mut buf = [0u8; 10];
        assert_eq!(c.read(&mut buf), Ok(10));
        assert_eq!(p.free(), Ok(10));
        assert_eq!(p.write(&stream(64, 20)), Ok(10));
        let mut all = [0u8; 100];
        assert_eq!(c.read(&mut all), Ok(64));
        assert_eq!(&all[..64], &stream(10, 64)[..]);
        assert_eq!(c.read(&mut all), Ok(0));
        assert_eq!(c.readable(), Ok(0));
    }

    #[test]
    fn zero_lengths_do_nothing() {
        let (r, a) = region(64);
        let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
        assert_eq!(p.write(&[]), Ok(0));
        assert_eq!(p.write_vectored(&[]), Ok(0));
        assert_eq!(
            p.write_vectored(&[IoSlice::new(&[]), IoSlice::new(&[])]),
            Ok(0)
        );
        assert_eq!(c.read(&mut []), Ok(0));
        assert_eq!(c.peek(&mut []), Ok(0));
        assert_eq!(c.consume(0), Ok(0));
        assert_eq!(tail_of(&r, a).load(Ordering::Relaxed), 0);
        p.write(&[1, 2, 3]).unwrap();
        assert_eq!(c.read(&mut []), Ok(0));
        assert_eq!(c.consume(0), Ok(0));
        assert_eq!(head_of(&r, a).load(Ordering::Relaxed), 0);
        assert_eq!(c.readable(), Ok(3));
    }

    #[test]
    fn exactly_a_capacity_at_every_offset() {
        for start in [0u64, 1, 7, 8, 13, 63] {
            let (r, a) = region(64);
            let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
            let mut buf = [0u8; 64];
            p.write(&stream(0, start as usize)).unwrap();
            c.read(&mut buf[..start as usize]).unwrap();
            assert_eq!(p.write(&stream(start, 64)), Ok(64), "start {start}");
            assert_eq!(p.free(), Ok(0));
            assert_eq!(c.read(&mut buf), Ok(64));
            assert_eq!(&buf[..], &stream(start, 64)[..], "start {start}");
            assert_eq!(p.free(), Ok(64));
        }
    }

    #[test]
    fn vectored_writes_gather_in_order_and_stop_when_full() {
        let (r, a) = region(64);
        let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
        let s = stream(0, 100);
        let bufs = [
            IoSlice::new(&s[..16]),
            IoSlice::new(&[]),
            IoSlice::new(&s[16..40]),
            IoSlice::new(&s[40..100]),
        ];
        assert_eq!(p.write_vectored(&bufs), Ok(64));
        // One publication for the whole gather.
        assert_eq!(tail_of(&r, a).load(Ordering::Relaxed), 64);
        let mut buf = [0u8; 64];
        assert_eq!(c.read(&mut buf), Ok(64));
        assert_eq!(&buf[..], &s[..64]);
        assert_eq!(p.write_vectored(&bufs[3..]), Ok(60));
        assert_eq!(c.read(&mut buf), Ok(60));
        assert_eq!(&buf[..60], &s[40..]);
    }

    #[test]
    fn peek_then_consume() {
        let (r, a) = region(64);
        let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
        p.write(&stream(0, 30)).unwrap();
        let mut hdr = [0u8; 8];
        assert_eq!(c.peek(&mut hdr), Ok(8));
        assert_eq!(c.peek(&mut hdr), Ok(8));
        assert_eq!(&hdr[..], &stream(0, 8)[..]);
        assert_eq!(c.position(), 0);
        assert_eq!(c.consume(8), Ok(8));
        assert_eq!(head_of(&r, a).load(Ordering::Relaxed), 8);
        assert_eq!(c.consume(100), Ok(22));
        assert_eq!(c.consume(1), Ok(0));
        assert_eq!(p.free(), Ok(64));
    }

    #[test]
    fn indices_run_across_the_u64_wrap() {
        let (r, a) = region(64);
        let start = u64::MAX - 100;
        let mut p = RingProducer::starting_at(&r, a, start);
        let mut c = RingConsumer::starting_at(&r, a, start);
        let mut got = Vec::new();
        let mut buf = [0u8; 37];
        let mut sent = 0u64;
        while got.len() < 1000 {
            sent += p.write(&stream(sent, 45)).unwrap() as u64;
            let n = c.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(&got[..1000], &stream(0, 1000)[..]);
        assert!(c.position() < start, "the index wrapped");
    }

    #[test]
    fn a_head_beyond_tail_or_going_back_is_corrupt_and_sticks() {
        let (r, a) = region(64);
        let mut p = RingProducer::new(&r, a);
        p.write(&stream(0, 64)).unwrap();
        // Consumed 20: fine.
        head_of(&r, a).store(20, Ordering::Relaxed);
        assert_eq!(p.free(), Ok(20));
        // Back to 10.
        head_of(&r, a).store(10, Ordering::Relaxed);
        let back = RingError::Corrupt {
            index: RingIndex::Head,
            found: 10,
            low: 20,
            high: 64,
        };
        assert_eq!(p.free(), Err(back));
        // It sticks, whatever the peer does next.
        head_of(&r, a).store(64, Ordering::Relaxed);
        assert_eq!(p.free(), Err(back));
        assert_eq!(p.write(&[1]), Err(back));
        assert_eq!(p.write(&[]), Err(back));
        assert_eq!(p.write_vectored(&[]), Err(back));
        assert_eq!(p.prepare_sleep(), Err(back));
        assert_eq!(p.error(), Some(back));
        assert_eq!(
            back.to_string(),
            "shared ring corrupt: the peer's head index is 10, outside 20..=64 (wrapping)"
        );

        let (r, a) = region(64);
        let mut p = RingProducer::new(&r, a);
        p.write(&stream(0, 64)).unwrap();
        for bad in [65, u64::MAX, 1 << 63] {
            head_of(&r, a).store(bad, Ordering::Relaxed);
            let mut q = RingProducer::starting_at(&r, a, 0);
            q.tail = 64;
            assert!(
                matches!(q.write(&[1]), Err(RingError::Corrupt { index: RingIndex::Head, found, .. }) if found == bad),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_tail_beyond_the_room_or_going_back_is_corrupt_and_sticks() {
        let (r, a) = region(64);
        let mut c = RingConsumer::new(&r, a);
        let mut buf = [0u8; 64];
        // The producer may fill the ring, no more.
        tail_of(&r, a).store(64, Ordering::Relaxed);
        assert_eq!(c.readable(), Ok(64));
        assert_eq!(c.read(&mut buf[..10]), Ok(10));
        tail_of(&r, a).store(75, Ordering::Relaxed);
        let far = RingError::Corrupt {
            index: RingIndex::Tail,
            found: 75,
            low: 64,
            high: 74,
        };
        assert_eq!(c.readable(), Err(far));
        assert_eq!(c.read(&mut buf), Err(far));
        assert_eq!(c.read(&mut []), Err(far));
        assert_eq!(c.peek(&mut buf), Err(far));
        assert_eq!(c.consume(1), Err(far));
        assert_eq!(c.prepare_sleep(), Err(far));

        for bad in [63, 0, u64::MAX, 1 << 40] {
            let (r, a) = region(64);
            let mut c = RingConsumer::new(&r, a);
            tail_of(&r, a).store(64, Ordering::Relaxed);
            c.read(&mut buf[..1]).unwrap();
            tail_of(&r, a).store(bad, Ordering::Relaxed);
            // Only a call that needs a fresh tail looks; this one does.
            assert!(
                matches!(c.read(&mut buf), Err(RingError::Corrupt { index: RingIndex::Tail, found, .. }) if found == bad),
                "{bad}"
            );
            // Never more than a capacity, even before the error.
            assert!(c.position() <= 64);
        }
    }

    #[test]
    fn sleep_flags_and_wakes() {
        let (r, a) = region(64);
        let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
        // Nothing to wake.
        assert!(!p.consumer_wants_wake());
        assert!(!c.producer_wants_wake());
        // An empty ring: the consumer may sleep; a write must wake it, once.
        assert_eq!(c.prepare_sleep(), Ok(true));
        p.write(&[1]).unwrap();
        assert!(p.consumer_wants_wake());
        assert!(!p.consumer_wants_wake());
        c.end_sleep();
        // Bytes there: no sleep, flag lowered.
        assert_eq!(c.prepare_sleep(), Ok(false));
        assert!(!p.consumer_wants_wake());
        // A full ring: the producer may sleep; a read must wake it.
        p.write(&stream(0, 63)).unwrap();
        assert_eq!(p.prepare_sleep(), Ok(true));
        c.read(&mut [0u8; 1]).unwrap();
        assert!(c.producer_wants_wake());
        assert!(!c.producer_wants_wake());
        p.end_sleep();
        assert_eq!(p.prepare_sleep(), Ok(false));
        assert!(!c.producer_wants_wake());
    }

    /// Every interleaving of the sleeper's two steps (raise the flag;
    /// fence and look again) with the waker's two (publish; fence and look
    /// at the flag): either the sleeper sees the bytes or the waker sees
    /// the flag. Single-threaded, this checks the logic of the protocol;
    /// the fences make the hardware keep to one of these orders.
    #[test]
    fn no_interleaving_loses_a_wake_up() {
        // Steps: 0 = raise flag, 1 = look again (consumer); 2 = write,
        // 3 = look at flag (producer).
        let orders: [[u8; 4]; 6] = [
            [0, 1, 2, 3],
            [0, 2, 1, 3],
            [0, 2, 3, 1],
            [2, 0, 1, 3],
            [2, 0, 3, 1],
            [2, 3, 0, 1],
        ];
        for order in orders {
            let (r, a) = region(64);
            let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
            let (mut sleeps, mut wakes) = (None, None);
            for step in order {
                match step {
                    0 => c.announce_sleep(),
                    1 => sleeps = Some(c.recheck_before_sleep().unwrap()),
                    2 => assert_eq!(p.write(&[7]), Ok(1)),
                    _ => wakes = Some(p.consumer_wants_wake()),
                }
            }
            let (sleeps, wakes) = (sleeps.unwrap(), wakes.unwrap());
            assert!(!sleeps || wakes, "{order:?}: the consumer sleeps unwoken");
            // No flag is left raised by a consumer that stayed awake, unless
            // the waker already took it.
            if !sleeps {
                assert!(!p.consumer_wants_wake(), "{order:?}");
            }
        }
        // The same for a producer waiting for room.
        for order in orders {
            let (r, a) = region(64);
            let (mut p, mut c) = (RingProducer::new(&r, a), RingConsumer::new(&r, a));
            p.write(&stream(0, 64)).unwrap();
            let (mut sleeps, mut wakes) = (None, None);
            for step in order {
                match step {
                    0 => p.announce_sleep(),
                    1 => sleeps = Some(p.recheck_before_sleep().unwrap()),
                    2 => assert_eq!(c.read(&mut [0u8; 5]), Ok(5)),
                    _ => wakes = Some(c.producer_wants_wake()),
                }
            }
            let (sleeps, wakes) = (sleeps.unwrap(), wakes.unwrap());
            assert!(!sleeps || wakes, "{order:?}: the producer sleeps unwoken");
        }
    }

    #[derive(Debug, Clone)]
    enum StreamOp {
        Write(usize),
        WriteV(Vec<usize>),
        Read(usize),
        Peek(usize),
        Consume(usize),
    }

    fn stream_op() -> impl Strategy<Value = StreamOp> {
        prop_oneof![
            (0usize..3000).prop_map(StreamOp::Write),
            proptest::collection::vec(0usize..700, 0..5).prop_map(StreamOp::WriteV),
            (0usize..3000).prop_map(StreamOp::Read),
            (0usize..200).prop_map(StreamOp::Peek),
            (0usize..3000).prop_map(StreamOp::Consume),
        ]
    }

    fn start() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            any::<u64>(),
            (0u64..5000).prop_map(|d| u64::MAX - d)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any interleaving of writes and reads of any sizes delivers
        /// exactly the bytes written, in order, and the room and
        /// readability always add up to the capacity.
        #[test]
        fn any_interleaving_delivers_the_stream_in_order(
            cap in 6u32..12,
            start in start(),
            ops in proptest::collection::vec(stream_op(), 0..60),
        ) {
            let (r, a) = region(1 << cap);
            let mut p = RingProducer::starting_at(&r, a, start);
            let mut c = RingConsumer::starting_at(&r, a, start);
            let cap = 1usize << cap;
            let (mut written, mut read) = (0u64, 0u64);
            let mut pending: VecDeque<u8> = VecDeque::new();
            let mut buf = vec![0u8; 3000];
            for op in ops {
                match op {
                    StreamOp::Write(n) => {
                        let room = cap - pending.len();
                        let k = p.write(&stream(written, n)).unwrap();
                        prop_assert_eq!(k, n.min(room));
                        pending.extend(stream(written, k));
                        written += k as u64;
                    }
                    StreamOp::WriteV(ns) => {
                        let parts: Vec<Vec<u8>> = ns
                            .iter()
                            .scan(written, |at, &n| {
                                let v = stream(*at, n);
                                *at += n as u64;
                                Some(v)
                            })
                            .collect();
                        let bufs: Vec<IoSlice<'_>> = parts.iter().map(|v| IoSlice::new(v)).collect();
                        let want: usize = ns.iter().sum();
                        let k = p.write_vectored(&bufs).unwrap();
                        prop_assert_eq!(k, want.min(cap - pending.len()));
                        pending.extend(stream(written, k));
                        written += k as u64;
                    }
                    StreamOp::Read(n) | StreamOp::Peek(n) => {
                        let peek = matches!(op, StreamOp::Peek(_));
                        let k = if peek { c.peek(&mut buf[..n]) } else { c.read(&mut buf[..n]) }.unwrap();
                        prop_assert_eq!(k, n.min(pending.len()));
                        prop_assert_eq!(&buf[..k], &stream(read, k)[..]);
                        if !peek {
                            pending.drain(..k);
                            read += k as u64;
                        }
                    }
                    StreamOp::Consume(n) => {
                        let k = c.consume(n).unwrap();
                        prop_assert_eq!(k, n.min(pending.len()));
                        pending.drain(..k);
                        read += k as u64;
                    }
                }
                prop_assert_eq!(p.free().unwrap() + c.readable().unwrap(), cap);
                prop_assert_eq!(p.position(), start.wrapping_add(written));
                prop_assert_eq!(c.position(), start.wrapping_add(read));
            }
            // Drain: everything written arrives.
            loop {
                let k = c.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                prop_assert_eq!(&buf[..k], &stream(read, k)[..]);
                read += k as u64;
            }
            prop_assert_eq!(read, written);
        }

        /// Whatever a peer writes into the header, the control blocks, the
        /// flags and the data area, between any of the honest sides' calls:
        /// each call gives a result within bounds or `Corrupt` (and then
        /// sticks), never a panic; until the peer touches an index or the
        /// data, the bytes are exactly the stream written. The checks are
        /// the fuzz harness's.
        #[test]
        fn a_hostile_peer_gets_corrupt_or_garbage_never_more(
            cap in 6u32..10,
            to_creator in any::<bool>(),
            start in start(),
            ops in proptest::collection::vec(hostile_op(), 0..80),
        ) {
            let l = Layout::new(1 << cap).unwrap();
            let d = if to_creator { Direction::ToCreator } else { Direction::FromCreator };
            let mut h = Harness::new(l, d, start);
            for op in ops {
                h.apply(op);
            }
        }
    }

    fn hostile_op() -> impl Strategy<Value = Op> {
        let near = || (-70i64..70).prop_map(|d| d as u64);
        prop_oneof![
            3 => (0usize..2000).prop_map(Op::Write),
            1 => proptest::collection::vec(0usize..300, 0..4).prop_map(Op::WriteV),
            3 => (0usize..2000).prop_map(Op::Read),
            1 => (0usize..300).prop_map(Op::Peek),
            1 => (0usize..300).prop_map(Op::Consume),
            1 => Just(Op::Query),
            1 => any::<u64>().prop_map(|v| Op::Tamper(Tamper::Head(v))),
            2 => near().prop_map(|d| Op::Tamper(Tamper::HeadNear(d))),
            1 => any::<u64>().prop_map(|v| Op::Tamper(Tamper::Tail(v))),
            2 => near().prop_map(|d| Op::Tamper(Tamper::TailNear(d))),
            1 => (any::<u16>(), 0u8..64, any::<u8>()).prop_map(|(o, n, b)| Op::Tamper(Tamper::Data(o, n, b))),
            1 => (any::<u16>(), any::<u8>()).prop_map(|(o, b)| Op::Tamper(Tamper::Elsewhere(o, b))),
            1 => (any::<bool>(), any::<u32>()).prop_map(|(w, v)| Op::Tamper(Tamper::Flag(w, v))),
            1 => (0u8..6).prop_map(Op::Sleep),
        ]
    }

    /// A stand-in for an eventfd: a counter, a wait with a deadline.
    struct Doorbell {
        count: Mutex<u64>,
        cv: Condvar,
    }

    impl Doorbell {
        fn new() -> Arc<Doorbell> {
            Arc::new(Doorbell {
                count: Mutex::new(0),
                cv: Condvar::new(),
            })
        }

        fn ring(&self) {
            *self.count.lock().unwrap() += 1;
            self.cv.notify_one();
        }

        /// Waits for a ring; a wait of many seconds is a lost wake-up.
        fn wait(&self, who: &str) {
            let (mut n, timeout) = self
                .cv
                .wait_timeout_while(self.count.lock().unwrap(), Duration::from_secs(20), |n| {
                    *n == 0
                })
                .unwrap();
            assert!(!timeout.timed_out(), "{who}: lost wake-up");
            *n = 0;
        }
    }

    /// Streams `total` bytes from one thread to another through a ring of
    /// `cap` bytes, in odd-sized pieces, checking every byte. With
    /// `sleep`, a side that cannot go on sleeps on a doorbell by the
    /// protocol of the module docs (a lost wake-up hangs it into a
    /// failure); without, it spins.
    fn two_threads(cap: usize, total: u64, sleep: bool) {
        let l = Layout::new(cap).unwrap();
        let r = Arc::new(HeapRegion::with_layout(&l));
        let a = l.ring(Direction::ToCreator);
        let (to_consumer, to_producer) = (Doorbell::new(), Doorbell::new());
        let producer = {
            let (r, to_consumer, to_producer) =
                (r.clone(), to_consumer.clone(), to_producer.clone());
            std::thread::spawn(move || {
                let mut p = RingProducer::new(r, a);
                let mut sent = 0u64;
                let mut piece = 1usize;
                let mut chunk = Vec::new();
                while sent < total {
                    piece = (piece * 7 + 3) % 1500 + 1;
                    let n = piece.min((total - sent) as usize);
                    chunk.clear();
                    chunk.extend((sent..sent + n as u64).map(byte));
                    let mut off = 0;
                    while off < n {
                        let k = p.write(&chunk[off..]).unwrap();
                        off += k;
                        if k > 0 {
                            if sleep && p.consumer_wants_wake() {
                                to_consumer.ring();
                            }
                        } else if sleep {
                            if p.prepare_sleep().unwrap() {
                                to_producer.wait("producer");
                            }
                            p.end_sleep();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    sent += n as u64;
                }
            })
        };
        let mut c = RingConsumer::new(r.clone(), a);
        let mut buf = vec![0u8; 2000];
        let mut got = 0u64;
        let mut piece = 5usize;
        while got < total {
            piece = (piece * 13 + 1) % 1999 + 1;
            let k = c.read(&mut buf[..piece]).unwrap();
            if k == 0 {
                if sleep {
                    if c.prepare_sleep().unwrap() {
                        to_consumer.wait("consumer");
                    }
                    c.end_sleep();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            for (i, &b) in buf[..k].iter().enumerate() {
                assert_eq!(b, byte(got + i as u64), "byte {}", got + i as u64);
            }
            got += k as u64;
            if sleep && c.producer_wants_wake() {
                to_producer.ring();
            }
        }
        producer.join().unwrap();
        assert_eq!(c.readable(), Ok(0));
        assert_eq!(c.position(), total);
    }

    /// Miri (whose race detector checks these) runs a shorter stream.
    const MB: u64 = if cfg!(miri) { 1 << 13 } else { 1 << 20 };

    #[test]
    fn ten_megabytes_between_two_threads_spinning() {
        two_threads(256, 10 * MB, false);
    }

    #[test]
    fn four_megabytes_between_two_threads_sleeping() {
        two_threads(1024, 4 * MB, true);
    }
}
