//! One link's shared-memory path, as the endpoint's I/O sees it: the
//! mapped segment, this side's producer and consumer, which direction
//! has moved off the socket, and the byte-pipe calls the link's reads
//! and writes make (the same shapes as the socket's: `WouldBlock` when
//! there is nothing to read or no room, an error when the peer broke the
//! ring).

use super::mapping::MappedSegment;
use super::ring::{RingConsumer, RingError, RingProducer};
use super::segment::{Direction, Layout};
use bytes::BytesMut;
use std::io::{self, IoSlice};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A link's segment and this side's ends of its two rings.
#[derive(Debug)]
pub(crate) struct ShmPath {
    producer: RingProducer<Arc<MappedSegment>>,
    consumer: RingConsumer<Arc<MappedSegment>>,
    /// Creator: the memfd, until it went to the peer with a write.
    pub memfd: Option<OwnedFd>,
    /// This side's frames go to the ring.
    pub writes: bool,
    /// This side's input comes from the ring.
    pub reads: bool,
    /// Sleep flags raised ([`prepare_sleep`](Self::prepare_sleep)).
    armed: bool,
    /// Bytes this side wrote to the ring.
    pub written: u64,
    /// Bytes this side read from the ring.
    pub read: u64,
    /// The segment's length.
    segment_len: u64,
    /// The peer's process (`SO_PEERCRED`), once both directions moved
    /// and single copies are on: large messages are read from its memory.
    pub peer_pid: Option<i32>,
    /// The segment and its layout (for tests that play a hostile peer).
    #[cfg(test)]
    segment: (Arc<MappedSegment>, Layout),
}

impl ShmPath {
    /// The creator's path: a new segment with rings of `capacity` bytes
    /// each way (a power of two), its memfd kept for the offer.
    pub(crate) fn create(capacity: usize) -> io::Result<ShmPath> {
        let layout = Layout::new(capacity)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let (segment, fd) = MappedSegment::create(&layout)?;
        let segment = Arc::new(segment);
        Ok(ShmPath::over(
            segment,
            &layout,
            Direction::FromCreator,
            Direction::ToCreator,
            Some(fd),
        ))
    }

    /// The opener's path over the segment a peer offered (`fd`, of
    /// `segment_len` bytes as its offer said). `Err` says why not.
    pub(crate) fn open(fd: &OwnedFd, segment_len: u64) -> Result<ShmPath, String> {
        let (segment, layout) = MappedSegment::open(fd, segment_len)?;
        Ok(ShmPath::over(
            Arc::new(segment),
            &layout,
            Direction::ToCreator,
            Direction::FromCreator,
            None,
        ))
    }

    fn over(
        segment: Arc<MappedSegment>,
        layout: &Layout,
        out: Direction,
        inn: Direction,
        memfd: Option<OwnedFd>,
    ) -> ShmPath {
        ShmPath {
            #[cfg(test)]
            segment: (segment.clone(), *layout),
            producer: RingProducer::new(segment.clone(), layout.ring(out)),
            consumer: RingConsumer::new(segment, layout.ring(inn)),
            memfd,
            writes: false,
            reads: false,
            armed: false,
            written: 0,
            read: 0,
            segment_len: layout.total_len() as u64,
            peer_pid: None,
        }
    }

    /// The segment's length in bytes (what the offer names).
    pub(crate) fn segment_len(&self) -> u64 {
        self.segment_len
    }

    /// The mapped segment and its layout, as a peer could write them.
    #[cfg(test)]
    pub(crate) fn segment(&self) -> (&MappedSegment, &Layout) {
        (&self.segment.0, &self.segment.1)
    }

    /// Reads into `dst`; `WouldBlock` when the ring is empty.
    pub(crate) fn read_slice(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        self.disarm();
        let n = self.consumer.read(dst).map_err(broken)?;
        if n == 0 && !dst.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.read += n as u64;
        Ok(n)
    }

    /// Reads at most `want` bytes onto the end of `buf`; `WouldBlock`
    /// when the ring is empty.
    pub(crate) fn read_buf(&mut self, buf: &mut BytesMut, want: usize) -> io::Result<usize> {
        self.disarm();
        let have = self.consumer.readable().map_err(broken)?;
        let n = have.min(want);
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let at = buf.len();
        buf.resize(at + n, 0);
        let got = self.consumer.read(&mut buf[at..]).map_err(broken)?;
        buf.truncate(at + got);
        self.read += got as u64;
        Ok(got)
    }

    /// Writes what fits of `bufs`; `WouldBlock` when the ring is full.
    pub(crate) fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.disarm();
        let n = self.producer.write_vectored(bufs).map_err(broken)?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.written += n as u64;
        Ok(n)
    }

    /// After a batch of writes: whether the peer sleeps waiting for bytes
    /// and must be woken (clears its flag).
    pub(crate) fn peer_waits_for_bytes(&self) -> bool {
        self.producer.consumer_wants_wake()
    }

    /// After a batch of reads: whether the peer sleeps waiting for room
    /// and must be woken (clears its flag).
    pub(crate) fn peer_waits_for_room(&self) -> bool {
        self.consumer.producer_wants_wake()
    }

    /// Before this side sleeps: raises its flags (bytes to read, and with
    /// `blocked_writing` room to write) so the peer wakes it; `false` when
    /// there is work already (bytes came, room freed) and it must not
    /// sleep. A broken ring says `false`: the next read reports it.
    pub(crate) fn prepare_sleep(&mut self, blocked_writing: bool) -> bool {
        self.armed = true;
        if self.reads && !self.consumer.prepare_sleep().unwrap_or(false) {
            return false;
        }
        if blocked_writing && self.writes && !self.producer.prepare_sleep().unwrap_or(false) {
            return false;
        }
        true
    }

    /// Lowers the sleep flags once this side is awake again.
    fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            self.consumer.end_sleep();
            self.producer.end_sleep();
        }
    }
}

fn broken(e: RingError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_paths_over_one_segment_are_a_byte_pipe_each_way() {
        let mut creator = ShmPath::create(1 << 12).unwrap();
        let fd = creator.memfd.take().unwrap();
        let mut opener = ShmPath::open(&fd, creator.segment_len()).unwrap();
        let mut buf = BytesMut::new();
        assert_eq!(
            opener.read_buf(&mut buf, 64).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        let n = creator
            .write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b"cd")])
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(opener.read_buf(&mut buf, 64).unwrap(), 4);
        assert_eq!(&buf[..], b"abcd");
        // Fill the other way, and find it full.
        let big = vec![7u8; 1 << 12];
        assert_eq!(
            opener.write_vectored(&[IoSlice::new(&big)]).unwrap(),
            1 << 12
        );
        assert_eq!(
            opener
                .write_vectored(&[IoSlice::new(b"x")])
                .unwrap_err()
                .kind(),
            io::ErrorKind::WouldBlock
        );
        let mut out = vec![0u8; 1 << 12];
        assert_eq!(creator.read_slice(&mut out).unwrap(), 1 << 12);
        assert_eq!(out, big);
    }

    #[test]
    fn a_sleeper_is_woken_by_the_next_write_and_not_otherwise() {
        let mut creator = ShmPath::create(1 << 12).unwrap();
        let fd = creator.memfd.take().unwrap();
        let mut opener = ShmPath::open(&fd, creator.segment_len()).unwrap();
        creator.writes = true;
        opener.reads = true;
        // Nobody sleeps: a write wakes nobody.
        creator.write_vectored(&[IoSlice::new(b"1")]).unwrap();
        assert!(!creator.peer_waits_for_bytes());
        // Bytes are there: the reader may not sleep.
        assert!(!opener.prepare_sleep(false));
        let mut b = [0u8; 8];
        assert_eq!(opener.read_slice(&mut b).unwrap(), 1);
        assert!(opener.prepare_sleep(false));
        creator.write_vectored(&[IoSlice::new(b"2")]).unwrap();
        assert!(creator.peer_waits_for_bytes(), "the sleeper must be woken");
        assert!(!creator.peer_waits_for_bytes(), "once");
    }

    #[test]
    fn a_scribbled_index_breaks_the_ring_with_an_error() {
        let mut creator = ShmPath::create(1 << 12).unwrap();
        let fd = creator.memfd.take().unwrap();
        let (evil, layout) = MappedSegment::open(&fd, creator.segment_len()).unwrap();
        // The peer claims to have written more than the ring holds.
        let tail = layout.ring(Direction::ToCreator).tail_offset();
        use super::super::segment::SharedRegion;
        evil.atomic_u64(tail)
            .store(1 << 20, std::sync::atomic::Ordering::Release);
        let mut b = [0u8; 8];
        let e = creator.read_slice(&mut b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("corrupt"), "{e}");
    }
}
