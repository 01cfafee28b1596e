//! The atomic packets on the RMA handler, and what a target does with a
//! request (sans I/O: the transport calls these from its AM handler).
//!
//! Atomics share the RMA handler (one AM handler id for both) and tell
//! their packets apart by the protocol byte of the command word: `'A'`
//! here, `'R'` for RMA. Layout (as C's, `prov/psm/src/psmx_atomic.c`:
//! count, datatype, op):
//!
//! | packet | arg 0 (command word) | args 1.. | payload |
//! |---|---|---|---|
//! | `REQ_ATOMIC` | `1 \| 'A' << 16 \| kind << 8`, count in the high 32 bits | id, offset, key, `datatype \| op << 8` | operand, then compare values |
//! | `REP_ATOMIC` | `2 \| 'A' << 16`, status in the high 32 bits | id | the fetched (old) values |
//!
//! An atomic is never chunked: the initiator checks the request with
//! [`check_request`] against the engine's short payload, and the target
//! checks it again (a peer may lie).

use super::{apply, check_request, AtomicDatatype, AtomicKind, AtomicOp};
use crate::proto::mr::{MrAccess, MrTable};
use crate::proto::rma::status_of_error;
use crate::{Error, ErrorKind, Result};

/// The protocol byte of atomic packets (bits 16..24 of the command word).
pub(crate) const ATOMIC_PROTO: u8 = b'A';
const MAGIC: u32 = (ATOMIC_PROTO as u32) << 16;
const REQ_ATOMIC: u32 = 1;
const REP_ATOMIC: u32 = 2;

/// The protocol byte of a command word (`'A'` atomics, `'R'` RMA).
pub(crate) fn proto_of(args: &[u64]) -> Option<u8> {
    args.first().map(|&w| (w >> 16) as u8)
}

fn kind_code(k: AtomicKind) -> u32 {
    match k {
        AtomicKind::Write => 0,
        AtomicKind::Fetch => 1,
        AtomicKind::Compare => 2,
    }
}

/// One atomic request as it travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomicRequest {
    pub(crate) id: u64,
    pub(crate) kind: AtomicKind,
    pub(crate) op: AtomicOp,
    pub(crate) dt: AtomicDatatype,
    pub(crate) count: u32,
    pub(crate) offset: u64,
    pub(crate) key: u64,
}

/// A decoded atomic packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicPacket {
    Request(AtomicRequest),
    /// `status` 0 or a positive errno; the payload holds the old values.
    Reply {
        id: u64,
        status: u32,
    },
}

impl AtomicRequest {
    /// The request's AM arguments.
    pub(crate) fn encode(&self) -> [u64; 5] {
        let low = REQ_ATOMIC | MAGIC | kind_code(self.kind) << 8;
        [
            u64::from(self.count) << 32 | u64::from(low),
            self.id,
            self.offset,
            self.key,
            self.dt as u64 | (self.op as u64) << 8,
        ]
    }
}

/// The AM arguments of a reply.
pub(crate) fn encode_reply(id: u64, status: u32) -> [u64; 2] {
    [u64::from(status) << 32 | u64::from(REP_ATOMIC | MAGIC), id]
}

fn bad(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Inval, what.into())
}

/// Decodes an atomic packet, checking its shape (not its contents against
/// a table: the target does that).
///
/// # Errors
/// `Inval` naming what is wrong; `OpNotSupp` for an op or datatype number
/// psmrail does not know.
pub(crate) fn decode(args: &[u64]) -> Result<AtomicPacket> {
    let head = *args
        .first()
        .ok_or_else(|| bad("atomic packet without arguments"))?;
    let low = head as u32;
    let high = (head >> 32) as u32;
    if low & 0x00ff_0000 != MAGIC || low & 0xff00_fc00 != 0 {
        return Err(bad(format!("atomic packet with command word {head:#x}")));
    }
    match low & 0xff {
        REQ_ATOMIC => {
            if args.len() != 5 {
                return Err(bad(format!("atomic request with {} arguments", args.len())));
            }
            let kind = match (low >> 8) & 0x3 {
                0 => AtomicKind::Write,
                1 => AtomicKind::Fetch,
                2 => AtomicKind::Compare,
                k => return Err(bad(format!("atomic request of kind {k}"))),
            };
            let w = args[4];
            if w >> 16 != 0 {
                return Err(bad(format!("atomic request with type word {w:#x}")));
            }
            Ok(AtomicPacket::Request(AtomicRequest {
                id: args[1],
                kind,
                op: AtomicOp::try_from((w >> 8) as u32 & 0xff)?,
                dt: AtomicDatatype::try_from(w as u32 & 0xff)?,
                count: high,
                offset: args[2],
                key: args[3],
            }))
        }
        REP_ATOMIC if args.len() == 2 && low & 0xff00 == 0 => Ok(AtomicPacket::Reply {
            id: args[1],
            status: high,
        }),
        op => Err(bad(format!(
            "atomic packet with opcode {op} and {} arguments",
            args.len()
        ))),
    }
}

/// Bytes of operand (and compare) a request of `req` carries.
pub(crate) fn payload_len(kind: AtomicKind, op: AtomicOp, len: usize) -> usize {
    match kind {
        AtomicKind::Compare => 2 * len,
        _ if op == AtomicOp::AtomicRead => 0,
        _ => len,
    }
}

/// Runs `req` at the target: check it ([`check_request`] against
/// `max_payload`, then key, range and rights in `table`: `FI_REMOTE_WRITE`
/// for write calls, `FI_REMOTE_READ | FI_REMOTE_WRITE` for fetch and
/// compare calls), then read, [`apply()`] and write back the addressed bytes
/// while `lock` is held. The caller holds one such lock for every atomic
/// of the domain, so atomics from any number of peers are exact.
/// `fetched` receives the old values of fetch and compare calls.
///
/// Returns the reply status (0 or the positive errno); on error the
/// region is unchanged.
pub(crate) fn execute(
    table: Option<&MrTable>,
    req: &AtomicRequest,
    payload: &[u8],
    max_payload: usize,
    scratch: &mut Vec<u8>,
    fetched: &mut Vec<u8>,
) -> u32 {
    fetched.clear();
    match run(table, req, payload, max_payload, scratch, fetched) {
        Ok(()) => 0,
        Err(e) => {
            fetched.clear();
            tracing::debug!("atomic refused: {e}");
            status_of_error(&e)
        }
    }
}

fn run(
    table: Option<&MrTable>,
    req: &AtomicRequest,
    payload: &[u8],
    max_payload: usize,
    scratch: &mut Vec<u8>,
    fetched: &mut Vec<u8>,
) -> Result<()> {
    let table = table.ok_or_else(|| {
        Error::new(
            ErrorKind::OpNotSupp,
            "atomics: this domain has no endpoint that is an atomic target",
        )
    })?;
    let len = check_request(req.kind, req.op, req.dt, req.count as usize, max_payload)?;
    let want = payload_len(req.kind, req.op, len);
    if payload.len() != want {
        return Err(bad(format!(
            "atomic request of {len} bytes with a {}-byte payload (expected {want})",
            payload.len()
        )));
    }
    let needed = match req.kind {
        AtomicKind::Write => MrAccess::REMOTE_WRITE,
        _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    };
    let target = table.check(req.key, req.offset, len as u64, needed)?;
    let (operand, compare) = match req.kind {
        AtomicKind::Compare => payload.split_at(len),
        _ => (payload, &[][..]),
    };
    scratch.clear();
    scratch.resize(len, 0);
    target.read(scratch)?;
    if req.kind.fetches() {
        fetched.resize(len, 0);
    }
    apply(req.kind, req.op, req.dt, scratch, operand, compare, fetched)?;
    if req.op != AtomicOp::AtomicRead {
        target.write(scratch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::rma::status_of;

    #[test]
    fn requests_and_replies_round_trip() {
        let r = AtomicRequest {
            id: 77,
            kind: AtomicKind::Compare,
            op: AtomicOp::Cswap,
            dt: AtomicDatatype::Uint64,
            count: 3,
            offset: 40,
            key: 9,
        };
        assert_eq!(decode(&r.encode()).unwrap(), AtomicPacket::Request(r));
        assert_eq!(proto_of(&r.encode()), Some(ATOMIC_PROTO));
        assert_eq!(
            decode(&encode_reply(5, 13)).unwrap(),
            AtomicPacket::Reply { id: 5, status: 13 }
        );
    }

    #[test]
    fn hostile_words_are_refused() {
        let r = AtomicRequest {
            id: 1,
            kind: AtomicKind::Write,
            op: AtomicOp::Sum,
            dt: AtomicDatatype::Int32,
            count: 1,
            offset: 0,
            key: 1,
        }
        .encode();
        assert!(decode(&[]).is_err());
        assert!(decode(&r[..4]).is_err());
        let mut b = r;
        b[0] |= 3 << 8; // kind 3
        assert!(decode(&b).is_err());
        let mut b = r;
        b[4] = 12 | 99 << 8; // unknown op
        assert!(decode(&b).is_err());
        let mut b = r;
        b[4] |= 1 << 40;
        assert!(decode(&b).is_err());
        let mut b = r;
        b[0] ^= 1 << 17; // not our protocol byte
        assert!(decode(&b).is_err());
    }

    #[test]
    fn the_target_refuses_without_a_table_and_bad_lengths() {
        let req = AtomicRequest {
            id: 1,
            kind: AtomicKind::Fetch,
            op: AtomicOp::Sum,
            dt: AtomicDatatype::Uint64,
            count: 1,
            offset: 0,
            key: 1,
        };
        let (mut s, mut f) = (Vec::new(), Vec::new());
        let op = 1u64.to_ne_bytes();
        assert_eq!(
            execute(None, &req, &op, 64, &mut s, &mut f),
            status_of(ErrorKind::OpNotSupp)
        );
        let table = MrTable::new();
        let mr = table
            .register(
                vec![0u8; 16].into_boxed_slice(),
                MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                Some(1),
            )
            .unwrap();
        assert_eq!(
            execute(Some(&table), &req, &op[..4], 64, &mut s, &mut f),
            status_of(ErrorKind::Inval)
        );
        assert_eq!(execute(Some(&table), &req, &op, 64, &mut s, &mut f), 0);
        assert_eq!(f, 0u64.to_ne_bytes());
        let mut now = [0u8; 8];
        mr.read_at(0, &mut now).unwrap();
        assert_eq!(u64::from_ne_bytes(now), 1);
        let far = AtomicRequest { offset: 12, ..req };
        let status = execute(Some(&table), &far, &op, 64, &mut s, &mut f);
        assert_eq!(crate::proto::rma::kind_of(status), ErrorKind::Access);
        assert_eq!(
            crate::proto::rma::refusal_of(status),
            Some(crate::proto::mr::MrRefusal::Range),
            "the status names the check that failed"
        );
        let many = AtomicRequest { count: 9, ..req };
        assert_eq!(
            execute(Some(&table), &many, &[0; 72], 64, &mut s, &mut f),
            status_of(ErrorKind::MsgSize)
        );
    }
}
