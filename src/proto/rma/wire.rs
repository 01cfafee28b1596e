//! The RMA packets and how they sit in an active message's arguments.
//!
//! Argument 0 is the command word: the low 32 bits are
//! `opcode | MAGIC | flags` (opcode in bits 0–7, the protocol byte `'R'` in
//! bits 16–23, [`EOM`] bit 30, [`DATA`] bit 29, every other bit zero), the
//! high 32 bits a length (requests) or a status (replies: 0, or the
//! positive libfabric errno). The opcode values are the C provider's
//! (`prov/psm/src/psmx.h`) plus `REP_WRITE_GO`; at most [`NARGS`] = 5
//! arguments, the count C found safe on every PSM path.
//!
//! | packet | args after the command word | payload |
//! |---|---|---|
//! | `REQ_WRITE` | id, remote offset, key, op offset \| rest << 32 (or CQ data on the `EOM` chunk) | the chunk |
//! | `REQ_WRITE_LONG` | id, remote offset, key, CQ data | — |
//! | `REQ_READ` | id, remote offset, key, op offset \| rest << 32 | — |
//! | `REQ_READ_LONG` | id, remote offset, key | — |
//! | `REP_WRITE` | id, op offset | — |
//! | `REP_READ` | id, op offset | the bytes read |
//! | `REP_WRITE_GO` | id, target id | — |
//!
//! "id" is the initiator's request id, "op offset" where the chunk starts
//! in the operation's bytes (so a reply names the chunk it acknowledges;
//! operations are at most `u32::MAX` bytes, so it fits 32 bits), "rest" the
//! bytes from the chunk's start to the end of its segment (the target
//! checks that whole range, so a bad range refuses every chunk of the
//! segment and none lands),
//! "target id" the target's id for a long write, which the initiator's MQ
//! send uses as its tag ([`long_rma_tag`]). Decoding checks everything a
//! hostile or confused peer could get wrong: magic, opcode, argument count,
//! reserved bits, flags where they do not belong, ids that were never
//! issued, a payload of the wrong length.

use super::ids::Space;
use crate::proto::mr::MrRefusal;
use crate::proto::tag_layout::RMA_BIT;
use crate::ErrorKind;

/// Most arguments a packet uses.
pub(crate) const NARGS: usize = 5;

/// Last chunk of an operation.
pub(crate) const EOM: u32 = 0x4000_0000;
/// Remote CQ data present (`FI_REMOTE_CQ_DATA`).
pub(crate) const DATA: u32 = 0x2000_0000;
const MAGIC: u32 = (b'R' as u32) << 16;
const OPCODE_MASK: u32 = 0xff;

const REQ_WRITE: u32 = 1;
const REQ_WRITE_LONG: u32 = 2;
const REP_WRITE: u32 = 3;
const REQ_READ: u32 = 4;
const REQ_READ_LONG: u32 = 5;
const REP_READ: u32 = 6;
const REP_WRITE_GO: u32 = 7;

/// The MQ tag of a long transfer received under `id` (an id of the
/// receiving side: the initiator's for reads, the target's for writes, so
/// it is unique where it is matched): `RMA_BIT | id`.
pub(crate) fn long_rma_tag(id: u64) -> u64 {
    RMA_BIT | (id & (RMA_BIT - 1))
}

/// A request, sent by an initiator to a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// One chunk of a short write; the payload is its `len` bytes.
    Write {
        id: u64,
        key: u64,
        offset: u64,
        len: u32,
        /// Where the chunk starts in the operation, and the bytes from its
        /// start to the end of its segment (the target checks all of them,
        /// so a segment lands whole or not at all); `None` on the last
        /// chunk, which travels alone and carries the CQ data instead.
        op_off: Option<(u32, u32)>,
        data: Option<u64>,
    },
    /// One chunk of a short read.
    Read {
        id: u64,
        key: u64,
        offset: u64,
        len: u32,
        /// As for writes: `(op offset, bytes to the segment's end)`.
        op_off: (u32, u32),
        eom: bool,
    },
    /// A long write: the target answers `WriteGo` (or an error), then
    /// receives the bytes over the MQ.
    WriteLong {
        id: u64,
        key: u64,
        offset: u64,
        len: u32,
        data: Option<u64>,
    },
    /// A long read: the target sends the bytes over the MQ with tag
    /// `long_rma_tag(id)` (errors come back as a `Read` reply with `EOM`).
    ReadLong {
        id: u64,
        key: u64,
        offset: u64,
        len: u32,
    },
}

/// A reply, sent by a target to an initiator (as an AM reply, or as a
/// request for the end of a long write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// A write chunk (or a whole long write, `eom`) landed, or failed.
    Write {
        id: u64,
        status: u32,
        op_off: u64,
        eom: bool,
    },
    /// A read chunk's bytes (the payload), or the read's failure.
    Read {
        id: u64,
        status: u32,
        op_off: u64,
        eom: bool,
    },
    /// A long write was accepted: send the bytes with `long_rma_tag(target)`.
    WriteGo { id: u64, target: u64 },
}

/// Any packet of the RMA handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Packet {
    Request(Request),
    Reply(Reply),
}

/// Why arguments are not a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// No command word, or not our magic / reserved bits set.
    NotOurs,
    /// An unknown opcode.
    Opcode(u32),
    /// The argument count does not fit the opcode.
    Arity { opcode: u32, got: usize },
    /// A flag where the opcode does not allow it.
    Flags { opcode: u32, flags: u32 },
    /// An id that was never issued (or of the wrong space).
    BadId(u64),
    /// A chunk longer than the rest of its segment.
    Rest { len: u32, rest: u32 },
    /// A payload whose length does not fit the packet.
    Payload { expected: usize, got: usize },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotOurs => f.write_str("not an RMA packet (bad command word)"),
            DecodeError::Opcode(op) => write!(f, "unknown RMA opcode {op}"),
            DecodeError::Arity { opcode, got } => {
                write!(f, "RMA opcode {opcode} with {got} arguments")
            }
            DecodeError::Flags { opcode, flags } => {
                write!(f, "RMA opcode {opcode} with flags {flags:#x}")
            }
            DecodeError::BadId(id) => write!(f, "RMA request id {id:#x} was never issued"),
            DecodeError::Rest { len, rest } => {
                write!(
                    f,
                    "RMA chunk of {len} bytes with only {rest} left in its segment"
                )
            }
            DecodeError::Payload { expected, got } => {
                write!(f, "RMA payload of {got} bytes where {expected} were due")
            }
        }
    }
}

/// A packet's arguments, ready for `am_request` / `AmReply::reply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Args {
    words: [u64; NARGS],
    len: usize,
}

impl Args {
    /// The arguments.
    pub(crate) fn as_slice(&self) -> &[u64] {
        &self.words[..self.len]
    }
}

fn command(opcode: u32, flags: u32, high: u32) -> u64 {
    (u64::from(high) << 32) | u64::from(opcode | MAGIC | flags)
}

fn pack(op_off: u32, rest: u32) -> u64 {
    u64::from(op_off) | (u64::from(rest) << 32)
}

/// `(op offset, rest)` from a packed word; `rest` covers the chunk.
fn unpack(word: u64, len: u32) -> Result<(u32, u32), DecodeError> {
    let (at, rest) = (word as u32, (word >> 32) as u32);
    if rest < len {
        return Err(DecodeError::Rest { len, rest });
    }
    Ok((at, rest))
}

fn eom(b: bool) -> u32 {
    if b {
        EOM
    } else {
        0
    }
}

impl Packet {
    /// The packet as AM arguments.
    pub(crate) fn encode(&self) -> Args {
        let data_flag = |d: &Option<u64>| if d.is_some() { DATA } else { 0 };
        let (words, len) = match *self {
            Packet::Request(Request::Write {
                id,
                key,
                offset,
                len,
                op_off,
                data,
            }) => {
                let (flags, last) = match op_off {
                    Some((at, rest)) => (0, pack(at, rest)),
                    None => (EOM | data_flag(&data), data.unwrap_or(0)),
                };
                ([command(REQ_WRITE, flags, len), id, offset, key, last], 5)
            }
            Packet::Request(Request::Read {
                id,
                key,
                offset,
                len,
                op_off,
                eom: e,
            }) => (
                [
                    command(REQ_READ, eom(e), len),
                    id,
                    offset,
                    key,
                    pack(op_off.0, op_off.1),
                ],
                5,
            ),
            Packet::Request(Request::WriteLong {
                id,
                key,
                offset,
                len,
                data,
            }) => (
                [
                    command(REQ_WRITE_LONG, data_flag(&data), len),
                    id,
                    offset,
                    key,
                    data.unwrap_or(0),
                ],
                5,
            ),
            Packet::Request(Request::ReadLong {
                id,
                key,
                offset,
                len,
            }) => ([command(REQ_READ_LONG, 0, len), id, offset, key, 0], 4),
            Packet::Reply(Reply::Write {
                id,
                status,
                op_off,
                eom: e,
            }) => ([command(REP_WRITE, eom(e), status), id, op_off, 0, 0], 3),
            Packet::Reply(Reply::Read {
                id,
                status,
                op_off,
                eom: e,
            }) => ([command(REP_READ, eom(e), status), id, op_off, 0, 0], 3),
            Packet::Reply(Reply::WriteGo { id, target }) => {
                ([command(REP_WRITE_GO, 0, 0), id, target, 0, 0], 3)
            }
        };
        Args { words, len }
    }

    /// The packet in `args` with a payload of `payload_len` bytes, checked
    /// for shape; what the ids name is checked by the initiator and target.
    pub(crate) fn decode(args: &[u64], payload_len: usize) -> Result<Packet, DecodeError> {
        let head = *args.first().ok_or(DecodeError::NotOurs)?;
        let low = head as u32;
        let high = (head >> 32) as u32;
        let opcode = low & OPCODE_MASK;
        let flags = low & (EOM | DATA);
        if low & !(OPCODE_MASK | EOM | DATA) != MAGIC {
            return Err(DecodeError::NotOurs);
        }
        let (want, allowed) = match opcode {
            REQ_WRITE => (5, EOM | DATA),
            REQ_WRITE_LONG => (5, DATA),
            REQ_READ => (5, EOM),
            REQ_READ_LONG => (4, 0),
            REP_WRITE | REP_READ => (3, EOM),
            REP_WRITE_GO => (3, 0),
            other => return Err(DecodeError::Opcode(other)),
        };
        if args.len() != want {
            return Err(DecodeError::Arity {
                opcode,
                got: args.len(),
            });
        }
        // DATA only rides on the last chunk of a short write.
        if flags & !allowed != 0 || (opcode == REQ_WRITE && flags == DATA) {
            return Err(DecodeError::Flags { opcode, flags });
        }
        let id = args[1];
        if Space::of(id) != Some(Space::Initiator) {
            return Err(DecodeError::BadId(id));
        }
        let payload = |expected: usize| {
            if payload_len == expected {
                Ok(())
            } else {
                Err(DecodeError::Payload {
                    expected,
                    got: payload_len,
                })
            }
        };
        let last = flags & EOM != 0;
        let data = (flags & DATA != 0).then(|| args[4]);
        let packet = match opcode {
            REQ_WRITE => {
                payload(high as usize)?;
                Packet::Request(Request::Write {
                    id,
                    offset: args[2],
                    key: args[3],
                    len: high,
                    op_off: if last {
                        None
                    } else {
                        Some(unpack(args[4], high)?)
                    },
                    data,
                })
            }
            REQ_WRITE_LONG => {
                payload(0)?;
                Packet::Request(Request::WriteLong {
                    id,
                    offset: args[2],
                    key: args[3],
                    len: high,
                    data,
                })
            }
            REQ_READ => {
                payload(0)?;
                Packet::Request(Request::Read {
                    id,
                    offset: args[2],
                    key: args[3],
                    len: high,
                    op_off: unpack(args[4], high)?,
                    eom: last,
                })
            }
            REQ_READ_LONG => {
                payload(0)?;
                Packet::Request(Request::ReadLong {
                    id,
                    offset: args[2],
                    key: args[3],
                    len: high,
                })
            }
            REP_WRITE => {
                payload(0)?;
                Packet::Reply(Reply::Write {
                    id,
                    status: high,
                    op_off: args[2],
                    eom: last,
                })
            }
            // The length of read data is checked against the chunk by the
            // initiator, which alone knows it.
            REP_READ => Packet::Reply(Reply::Read {
                id,
                status: high,
                op_off: args[2],
                eom: last,
            }),
            _ => {
                payload(0)?;
                if high != 0 {
                    return Err(DecodeError::Flags {
                        opcode,
                        flags: high,
                    });
                }
                if Space::of(args[2]) != Some(Space::Target) {
                    return Err(DecodeError::BadId(args[2]));
                }
                Packet::Reply(Reply::WriteGo {
                    id,
                    target: args[2],
                })
            }
        };
        Ok(packet)
    }
}

const KINDS: [ErrorKind; 19] = [
    ErrorKind::Again,
    ErrorKind::NoSys,
    ErrorKind::Inval,
    ErrorKind::Trunc,
    ErrorKind::Canceled,
    ErrorKind::Access,
    ErrorKind::TimedOut,
    ErrorKind::Busy,
    ErrorKind::NoData,
    ErrorKind::Io,
    ErrorKind::MsgSize,
    ErrorKind::NoMem,
    ErrorKind::ConnRefused,
    ErrorKind::Avail,
    ErrorKind::NoMsg,
    ErrorKind::OpNotSupp,
    ErrorKind::OpBadState,
    ErrorKind::TooSmall,
    ErrorKind::Other,
];

/// The wire status of an error kind (its positive errno, in the low 16
/// bits).
pub(crate) fn status_of(kind: ErrorKind) -> u32 {
    kind.errno() as u32
}

/// The wire status of a target's error: its kind's errno, and in bits 16
/// and up which check of the memory region refused it, when one did.
pub(crate) fn status_of_error(e: &crate::Error) -> u32 {
    let refusal = MrRefusal::of(e).map_or(0, MrRefusal::code);
    status_of(e.kind()) | refusal << 16
}

/// The error kind of a non-zero wire status; `Other` for numbers we do not
/// know (a peer of another version).
pub(crate) fn kind_of(status: u32) -> ErrorKind {
    let errno = status & 0xffff;
    KINDS
        .into_iter()
        .find(|k| k.errno() as u32 == errno)
        .unwrap_or(ErrorKind::Other)
}

/// Which check of the target's memory region refused, if the status says.
pub(crate) fn refusal_of(status: u32) -> Option<MrRefusal> {
    MrRefusal::from_code(status >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::rma::ids::Ids;
    use proptest::prelude::*;

    fn ids() -> (u64, u64) {
        let mut i = Ids::new(Space::Initiator, 3);
        let mut t = Ids::new(Space::Target, 9);
        (i.insert(()).unwrap(), t.insert(()).unwrap())
    }

    fn samples() -> Vec<(Packet, usize)> {
        let (id, tid) = ids();
        vec![
            (
                Packet::Request(Request::Write {
                    id,
                    key: 1,
                    offset: 2,
                    len: 3,
                    op_off: Some((4, 3)),
                    data: None,
                }),
                3,
            ),
            (
                Packet::Request(Request::Write {
                    id,
                    key: u64::MAX,
                    offset: u64::MAX,
                    len: 0,
                    op_off: None,
                    data: None,
                }),
                0,
            ),
            (
                Packet::Request(Request::Write {
                    id,
                    key: 0,
                    offset: 0,
                    len: 7,
                    op_off: None,
                    data: Some(u64::MAX),
                }),
                7,
            ),
            (
                Packet::Request(Request::Read {
                    id,
                    key: 5,
                    offset: 6,
                    len: 2032,
                    op_off: (9, 5000),
                    eom: true,
                }),
                0,
            ),
            (
                Packet::Request(Request::Read {
                    id,
                    key: 5,
                    offset: 6,
                    len: 1,
                    op_off: (0, 1),
                    eom: false,
                }),
                0,
            ),
            (
                Packet::Request(Request::WriteLong {
                    id,
                    key: 5,
                    offset: 6,
                    len: u32::MAX,
                    data: Some(0),
                }),
                0,
            ),
            (
                Packet::Request(Request::WriteLong {
                    id,
                    key: 5,
                    offset: 6,
                    len: 1,
                    data: None,
                }),
                0,
            ),
            (
                Packet::Request(Request::ReadLong {
                    id,
                    key: 5,
                    offset: 6,
                    len: 4096,
                }),
                0,
            ),
            (
                Packet::Reply(Reply::Write {
                    id,
                    status: 13,
                    op_off: 4,
                    eom: false,
                }),
                0,
            ),
            (
                Packet::Reply(Reply::Write {
                    id,
                    status: 0,
                    op_off: 0,
                    eom: true,
                }),
                0,
            ),
            (
                Packet::Reply(Reply::Read {
                    id,
                    status: 0,
                    op_off: 8,
                    eom: true,
                }),
                100,
            ),
            (Packet::Reply(Reply::WriteGo { id, target: tid }), 0),
        ]
    }

    #[test]
    fn every_packet_round_trips() {
        for (p, n) in samples() {
            let a = p.encode();
            assert!(a.as_slice().len() <= NARGS);
            assert_eq!(Packet::decode(a.as_slice(), n), Ok(p), "{p:?}");
        }
    }

    #[test]
    fn hostile_shapes_are_refused() {
        let (id, tid) = ids();
        let w = Packet::Request(Request::Write {
            id,
            key: 1,
            offset: 2,
            len: 3,
            op_off: Some((4, 3)),
            data: None,
        })
        .encode();
        let s = w.as_slice();
        assert_eq!(Packet::decode(&[], 0), Err(DecodeError::NotOurs));
        assert_eq!(
            Packet::decode(s, 2),
            Err(DecodeError::Payload {
                expected: 3,
                got: 2
            })
        );
        assert_eq!(
            Packet::decode(&s[..4], 3),
            Err(DecodeError::Arity {
                opcode: REQ_WRITE,
                got: 4
            })
        );
        let mut bad = s.to_vec();
        bad[0] ^= 1 << 16; // magic
        assert_eq!(Packet::decode(&bad, 3), Err(DecodeError::NotOurs));
        let mut bad = s.to_vec();
        bad[0] |= 1 << 31; // reserved bit
        assert_eq!(Packet::decode(&bad, 3), Err(DecodeError::NotOurs));
        let mut bad = s.to_vec();
        bad[0] = (bad[0] & !0xff) | 99;
        assert_eq!(Packet::decode(&bad, 3), Err(DecodeError::Opcode(99)));
        let mut bad = s.to_vec();
        bad[0] |= u64::from(DATA); // DATA without EOM
        assert!(matches!(
            Packet::decode(&bad, 3),
            Err(DecodeError::Flags { .. })
        ));
        for forged in [0, tid, id | 1 << 62, 7] {
            let mut bad = s.to_vec();
            bad[1] = forged;
            assert_eq!(
                Packet::decode(&bad, 3),
                Err(DecodeError::BadId(forged)),
                "{forged:#x}"
            );
        }
        let mut bad = s.to_vec();
        bad[4] = 4 | 2 << 32; // 3 bytes with 2 left
        assert_eq!(
            Packet::decode(&bad, 3),
            Err(DecodeError::Rest { len: 3, rest: 2 })
        );
        let go = Packet::Reply(Reply::WriteGo { id, target: tid }).encode();
        let mut bad = go.as_slice().to_vec();
        bad[2] = id; // an initiator id is no target id
        assert_eq!(Packet::decode(&bad, 0), Err(DecodeError::BadId(id)));
        let mut bad = go.as_slice().to_vec();
        bad[0] |= 5 << 32;
        assert!(matches!(
            Packet::decode(&bad, 0),
            Err(DecodeError::Flags { .. })
        ));
        let ack = Packet::Reply(Reply::Write {
            id,
            status: 0,
            op_off: 0,
            eom: true,
        })
        .encode();
        assert!(
            Packet::decode(ack.as_slice(), 1).is_err(),
            "write acks carry no payload"
        );
    }

    #[test]
    fn statuses_map_both_ways() {
        for k in KINDS {
            assert_eq!(kind_of(status_of(k)), k);
        }
        assert_eq!(kind_of(12345), ErrorKind::Other);
    }

    #[test]
    fn long_tags_sit_under_the_rma_bit() {
        let (id, tid) = ids();
        assert_eq!(long_rma_tag(id), RMA_BIT | id);
        assert_eq!(long_rma_tag(tid), RMA_BIT | tid);
        assert_ne!(long_rma_tag(id), long_rma_tag(tid));
        assert_eq!(long_rma_tag(u64::MAX) >> 63, 0, "never the MSG bit");
    }

    proptest! {
        #[test]
        fn decode_never_panics(args in proptest::collection::vec(any::<u64>(), 0..8), n in 0usize..5000) {
            let _ = Packet::decode(&args, n);
        }

        #[test]
        fn decoded_packets_re_encode_to_the_same_words(
            head in any::<u32>(), op in 1u32..8, a1 in any::<u64>(), a2 in any::<u64>(),
            a3 in any::<u64>(), a4 in any::<u64>(), nargs in 3usize..6, n in 0usize..4,
        ) {
            let words = [command(op, head & (EOM | DATA), head % 4), a1 & ((1 << 61) - 1) | 1 << 32, a2, a3, a4];
            if let Ok(p) = Packet::decode(&words[..nargs], n) {
                let back = p.encode();
                // Unused trailing words encode as 0; the used ones agree.
                prop_assert_eq!(back.as_slice().len(), nargs);
                prop_assert_eq!(Packet::decode(back.as_slice(), n), Ok(p));
            }
        }
    }
}
