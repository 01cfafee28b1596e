//! The soft engine's shared-memory path for peers on one host: a byte
//! pipe in memory both processes map, carrying the same wire frames the
//! Unix-socket transport carries, without a system call per message
//! (on by default: `SoftConfig::shared_memory`, `PSMRAIL_SOFT_SHM`).
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
//! | `switch` | the exchange that moves a link onto a segment (ShmOffer, ShmSwitch, ShmDecline): which side may send which frame when, and where each direction's input and output pause |
//!
//! The edge's pieces:
//!
//! | module | what |
//! |---|---|
//! | `mapping` | `MappedSegment`: the creator's sealed memfd (shrink, grow and seal sealed), mapped and initialised; the opener's checks of a descriptor a peer passed (seals, length, header) before it maps it |
//! | `path` | `ShmPath`: one link's segment and this side's ring ends as a byte pipe (the socket's shapes: `WouldBlock` when empty or full), the wake-up questions and the flags raised before a sleep |
//!
//! The endpoint (`endpoint/shm_link.rs`) drives them: the dialer of a
//! Unix-socket link offers a segment once the handshake (epid check and
//! job secret) is done, its memfd riding on the socket (`SCM_RIGHTS`);
//! the acceptor maps and checks it or declines; each side moves its
//! output after its ShmSwitch and its input after the peer's. From then
//! on the socket carries only wake-up bytes (sent with `MSG_DONTWAIT` to
//! a peer whose sleep flag is up, which the reactor's poll sees as
//! readiness) and its end, which is the peer's: the survivor reads the
//! ring empty, then ends the link as at a socket's EOF.
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

pub(crate) mod mapping;
pub(crate) mod path;
pub(crate) mod peer_read;
pub(crate) mod ring;
pub(crate) mod segment;
pub(crate) mod switch;

#[cfg(any(test, feature = "hooks"))]
pub(crate) mod fuzzing;
