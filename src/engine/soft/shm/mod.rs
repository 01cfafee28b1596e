//! The soft engine's shared-memory path for peers on one host: a byte
//! pipe in memory both processes map, carrying the same wire frames the
//! Unix-socket transport carries, without a system call per message.
//!
//! # How the pieces fit
//!
//! One *segment* per link: a header, then two rings, one per direction.
//! The side that creates the segment produces into ring
//! [`Direction::FromCreator`](segment::Direction) and consumes from
//! `ToCreator`; the side that opens it does the opposite. Each ring is a
//! single-producer single-consumer byte ring with free-running indices;
//! the frame boundaries are the wire codec's business, exactly as over a
//! socket, so a frame may be written and read in pieces.
//!
//! This folder is sans-IO, like the rest of the core:
//!
//! | module | what |
//! |---|---|
//! | `segment` | the layout (`Layout::new` for the creator, `Layout::validate` for what a peer wrote), the `SharedRegion` trait through which every access goes (atomics and copies, never a reference to bytes the peer can write), `HeapRegion` (an in-process region for tests and fuzzing, the model of the mapped one) |
//! | `ring` | `RingProducer`, `RingConsumer`: writes and reads that check every index the peer stores, and the sleeping flags' protocol for wake-ups without a lost one |
//! | `fuzzing` | the fuzz entry point (`hooks::shm`) and the hostile-peer harness the property tests share |
//!
//! The edge that makes a segment real comes separately: it creates a
//! sealed memfd of `Layout::total_len` bytes, maps it, initialises it
//! (`Layout::init`), passes the descriptor and an eventfd per direction
//! over the Unix socket that carried the handshake; the other side checks
//! the seals, maps the descriptor, and validates the header before it
//! builds its ends. Its region type implements `SharedRegion` over the
//! mapping, with the same accessors as `HeapRegion` (`RawRegion`). Sleeping
//! on and signalling the eventfds follow the protocol in `ring`'s docs.
//!
//! # What a hostile peer can do
//!
//! Anything it likes to the shared bytes, at any time. What it cannot do
//! is make this side access memory outside the segment, panic, hang, or
//! take more than a ring's capacity per call: the header is validated once
//! (on a private copy), each index the peer stores is checked on every
//! load (a bad one ends the ring with `RingError::Corrupt`), and the bytes
//! it puts in the data area are just bytes, checked by the frame decoder
//! as they would be from a socket.

pub(crate) mod ring;
pub(crate) mod segment;

#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
