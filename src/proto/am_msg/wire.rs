//! The four packets of the AM message protocol and how they sit in an
//! active message's arguments.
//!
//! Every packet is at most [`NARGS`] 64-bit arguments; only `First` and
//! `Data` carry a payload (the message bytes). Argument 0 is a header: the
//! protocol magic in the high 56 bits and the opcode in the low 8, so an AM
//! that is not ours, or of another protocol version, is recognised and
//! dropped rather than misread.
//!
//! | packet | sent as | args after the header | payload |
//! |---|---|---|---|
//! | `First` | request | sender id, total length | bytes `[0, n)`, `n = min(total, chunk)` |
//! | `Go` | reply to `First`, or request | sender id, receiver id, accepted length | — |
//! | `Data` | request | receiver id, sender id, offset | bytes `[offset, offset + n)` |
//! | `Done` | reply to `First`/`Data`, or request | sender id | — |
//!
//! Unlike the C provider (`prov/psm/src/psmx_msg2.c`), `First` carries the
//! message's total length, so the receiver knows at once how much it will
//! accept (`min(total, buffer)`) and tells the sender in `Go`: a truncated
//! message never streams the bytes nobody will keep, and every copy is
//! bounded by the accepted length, which is at most the receive buffer.

/// Most arguments a packet uses (the engine must carry at least this many).
pub(crate) const NARGS: usize = 4;

/// High 56 bits of argument 0: `"AM_MSG"` and protocol version 1.
const MAGIC: u64 = 0x414d_5f4d_5347_0100;
const MAGIC_MASK: u64 = !0xff;

const OP_FIRST: u8 = 1;
const OP_GO: u8 = 2;
const OP_DATA: u8 = 3;
const OP_DONE: u8 = 4;

/// One protocol packet (ids are the peers' request ids, never 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Packet {
    /// The first chunk of a message; the payload is its first bytes.
    First {
        /// The sender's request id.
        send: u64,
        /// The message length.
        total: u64,
    },
    /// The receiver matched the message and wants bytes up to `accept`.
    Go {
        /// The sender's request id.
        send: u64,
        /// The receiver's request id (to put in `Data`).
        recv: u64,
        /// Bytes the receiver takes: `min(total, its buffer)`.
        accept: u64,
    },
    /// A later chunk; the payload is the bytes at `offset`.
    Data {
        /// The receiver's request id.
        recv: u64,
        /// The sender's request id (checked against the receiver's record).
        send: u64,
        /// Where the payload goes in the message.
        offset: u64,
    },
    /// The receiver has every byte it accepted: the send is complete.
    Done {
        /// The sender's request id.
        send: u64,
    },
}

/// Why arguments are not a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Argument 0 is missing or lacks the magic: not ours, or another version.
    NotOurs,
    /// Our magic with an opcode we do not know.
    Opcode(u8),
    /// The argument count does not fit the opcode.
    Arity { opcode: u8, got: usize },
    /// A request id of 0 (never issued).
    ZeroId,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotOurs => f.write_str("not an AM-message packet (bad magic)"),
            DecodeError::Opcode(op) => write!(f, "unknown opcode {op}"),
            DecodeError::Arity { opcode, got } => {
                write!(f, "opcode {opcode} with {got} arguments")
            }
            DecodeError::ZeroId => f.write_str("request id 0"),
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

impl Packet {
    /// The packet as AM arguments.
    pub(crate) fn encode(&self) -> Args {
        let h = |op: u8| MAGIC | u64::from(op);
        let (words, len) = match *self {
            Packet::First { send, total } => ([h(OP_FIRST), send, total, 0], 3),
            Packet::Go { send, recv, accept } => ([h(OP_GO), send, recv, accept], 4),
            Packet::Data { recv, send, offset } => ([h(OP_DATA), recv, send, offset], 4),
            Packet::Done { send } => ([h(OP_DONE), send, 0, 0], 2),
        };
        Args { words, len }
    }

    /// The packet in `args`, checked for shape (magic, opcode, argument
    /// count, non-zero ids); what the ids name is checked by the core.
    pub(crate) fn decode(args: &[u64]) -> Result<Packet, DecodeError> {
        let head = *args.first().ok_or(DecodeError::NotOurs)?;
        if head & MAGIC_MASK != MAGIC {
            return Err(DecodeError::NotOurs);
        }
        let opcode = head as u8;
        let want = match opcode {
            OP_FIRST => 3,
            OP_GO | OP_DATA => 4,
            OP_DONE => 2,
            other => return Err(DecodeError::Opcode(other)),
        };
        if args.len() != want {
            return Err(DecodeError::Arity {
                opcode,
                got: args.len(),
            });
        }
        let packet = match opcode {
            OP_FIRST => Packet::First {
                send: args[1],
                total: args[2],
            },
            OP_GO => Packet::Go {
                send: args[1],
                recv: args[2],
                accept: args[3],
            },
            OP_DATA => Packet::Data {
                recv: args[1],
                send: args[2],
                offset: args[3],
            },
            _ => Packet::Done { send: args[1] },
        };
        let ids_ok = match packet {
            Packet::First { send, .. } | Packet::Done { send } => send != 0,
            Packet::Go { send, recv, .. } | Packet::Data { send, recv, .. } => {
                send != 0 && recv != 0
            }
        };
        if !ids_ok {
            return Err(DecodeError::ZeroId);
        }
        Ok(packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_packet_round_trips() {
        for p in [
            Packet::First { send: 1, total: 0 },
            Packet::First {
                send: u64::MAX,
                total: u64::MAX,
            },
            Packet::Go {
                send: 2,
                recv: 3,
                accept: 4,
            },
            Packet::Data {
                recv: 5,
                send: 6,
                offset: 7,
            },
            Packet::Done { send: 8 },
        ] {
            let a = p.encode();
            assert!(a.as_slice().len() <= NARGS);
            assert_eq!(Packet::decode(a.as_slice()), Ok(p));
        }
    }

    #[test]
    fn malformed_arguments_are_refused() {
        let first = Packet::First { send: 1, total: 2 }.encode();
        let head = first.as_slice()[0];
        assert_eq!(Packet::decode(&[]), Err(DecodeError::NotOurs));
        assert_eq!(Packet::decode(&[0, 1, 2]), Err(DecodeError::NotOurs));
        // Another protocol version.
        assert_eq!(
            Packet::decode(&[head ^ 0x100, 1, 2]),
            Err(DecodeError::NotOurs)
        );
        assert_eq!(
            Packet::decode(&[(head & !0xff) | 9, 1, 2]),
            Err(DecodeError::Opcode(9))
        );
        assert_eq!(
            Packet::decode(&[head, 1]),
            Err(DecodeError::Arity { opcode: 1, got: 2 })
        );
        assert_eq!(
            Packet::decode(&[head, 1, 2, 3]),
            Err(DecodeError::Arity { opcode: 1, got: 4 })
        );
        assert_eq!(Packet::decode(&[head, 0, 2]), Err(DecodeError::ZeroId));
        let go = Packet::Go {
            send: 1,
            recv: 1,
            accept: 1,
        }
        .encode();
        let mut zero = go.as_slice().to_vec();
        zero[2] = 0;
        assert_eq!(Packet::decode(&zero), Err(DecodeError::ZeroId));
    }

    proptest! {
        #[test]
        fn decode_never_panics(args in proptest::collection::vec(any::<u64>(), 0..8)) {
            let _ = Packet::decode(&args);
        }

        #[test]
        fn decoded_packets_re_encode_identically(op in 0u8..6, rest in proptest::collection::vec(any::<u64>(), 0..5)) {
            let mut args = vec![MAGIC | u64::from(op)];
            args.extend(rest);
            if let Ok(p) = Packet::decode(&args) {
                let encoded = p.encode();
                prop_assert_eq!(encoded.as_slice(), &args[..]);
            }
        }
    }
}
