//! Tests of the core's zero-copy hooks the edge relies on:
//! [`SoftCore::poll_transmit_vectored`] (send payloads referred to, not
//! copied) and [`SoftCore::take_direct`] / [`SoftCore::direct_data`] (Data
//! payloads read straight into the receive buffer), with the stream cut
//! at every kind of boundary.

use super::wire::JobUuid;
use super::*;
use crate::engine::{Epid, MqStatus, SendMode, TagMatch};
use bytes::BytesMut;
use std::collections::HashMap;
use std::net::Ipv4Addr;

const UUID: JobUuid = JobUuid([0x33; 16]);

fn epid(port: u16) -> Epid {
    SoftEpid::new(Ipv4Addr::LOCALHOST, port, 0)
        .unwrap()
        .to_epid()
}

/// Small chunks so a message spans many Data frames.
fn config() -> ProtocolConfig {
    ProtocolConfig {
        eager_threshold: 16 << 10,
        chunk_size: 20 << 10,
        ..ProtocolConfig::DEFAULT
    }
}

struct Side {
    core: SoftCore,
    conn: ConnId,
    sends: HashMap<OpId, Vec<u8>>,
    recvs: HashMap<OpId, Vec<u8>>,
    done: HashMap<OpId, MqStatus>,
    placed: usize,
}

impl Side {
    fn new(port: u16, role: Role) -> Side {
        let mut core = SoftCore::new(config(), epid(port), UUID).unwrap();
        let conn = core.open_connection(role);
        Side {
            core,
            conn,
            sends: HashMap::new(),
            recvs: HashMap::new(),
            done: HashMap::new(),
            placed: 0,
        }
    }

    fn events(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::Place { op, offset, bytes } => {
                    self.placed += bytes.len();
                    self.recvs.get_mut(&op).unwrap()[offset..offset + bytes.len()]
                        .copy_from_slice(&bytes);
                }
                Event::Complete { op, status } => {
                    assert!(self.done.insert(op, status).is_none(), "{op:?} twice");
                }
                _ => {}
            }
        }
    }

    /// One vectored batch, flattened as `writev` would put it on the wire;
    /// and how many payload bytes were referred to.
    fn vectored(&mut self) -> (Vec<u8>, usize) {
        let mut out = BytesMut::new();
        let mut refs = Vec::new();
        let n =
            self.core
                .poll_transmit_vectored(self.conn, &mut out, &mut refs, 1 << 20, &self.sends);
        let mut wire = Vec::new();
        let mut pos = 0;
        let mut referred = 0;
        for r in &refs {
            wire.extend_from_slice(&out[pos..r.at]);
            wire.extend_from_slice(&self.sends[&r.op][r.range.clone()]);
            referred += r.range.len();
            pos = r.at;
        }
        wire.extend_from_slice(&out[pos..]);
        assert_eq!(wire.len(), n, "the result counts referred bytes");
        self.events();
        (wire, referred)
    }
}

/// Feeds `wire` to `to` in pieces of `cut` bytes the way the edge does:
/// `handle_input`, then `take_direct`, and direct payload bytes straight
/// into the receive buffer.
fn deliver(
    to: &mut Side,
    input: &mut BytesMut,
    direct: &mut Option<DirectData>,
    wire: &[u8],
    cut: usize,
) -> usize {
    let mut direct_bytes = 0;
    let mut pos = 0;
    while pos < wire.len() {
        let n = cut.min(wire.len() - pos);
        let mut piece = &wire[pos..pos + n];
        pos += n;
        while !piece.is_empty() {
            if let Some(d) = direct.as_mut() {
                let k = d.len.min(piece.len());
                to.recvs.get_mut(&d.op).unwrap()[d.offset..d.offset + k]
                    .copy_from_slice(&piece[..k]);
                to.core.direct_data(to.conn, k);
                direct_bytes += k;
                piece = &piece[k..];
                d.offset += k;
                d.len -= k;
                if d.len == 0 {
                    *direct = None;
                }
                to.events();
                continue;
            }
            input.extend_from_slice(piece);
            piece = &[];
            to.core.handle_input(to.conn, input).unwrap();
            if !input.is_empty() {
                *direct = to.core.take_direct(to.conn, input).unwrap();
            }
            to.events();
        }
    }
    direct_bytes
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn vectored_transmit_and_direct_receive_round_trip() {
    for cut in [1usize, 7, 24, 25, 4096, 20 << 10, 1 << 20] {
        let mut a = Side::new(9001, Role::Dialer { expect: epid(9002) });
        let mut b = Side::new(9002, Role::Acceptor);
        let (mut ia, mut ib) = (BytesMut::new(), BytesMut::new());
        let (mut da, mut db) = (None, None);
        // Handshake and credit, copied.
        for _ in 0..4 {
            let (w, _) = a.vectored();
            deliver(&mut b, &mut ib, &mut db, &w, cut);
            let (w, _) = b.vectored();
            deliver(&mut a, &mut ia, &mut da, &w, cut);
        }
        let peer = b.core.connection_peer(b.conn).unwrap();
        let peer_of_b = a.core.connection_peer(a.conn).unwrap();
        let sizes = [0usize, 100, 5000, 16 << 10, 100 << 10, 333_333];
        for (i, &n) in sizes.iter().enumerate() {
            let op = OpId(100 + i as u64);
            b.recvs.insert(op, vec![0; n]);
            b.core.recv(TagMatch::exact(i as u64), n, op).unwrap();
            let sop = OpId(200 + i as u64);
            a.sends.insert(sop, pattern(n, i as u8));
            a.core
                .send(peer_of_b, i as u64, n as u64, SendMode::Standard, sop)
                .unwrap();
        }
        let mut referred = 0;
        let mut direct = 0;
        for _ in 0..200 {
            let (w, r) = a.vectored();
            referred += r;
            direct += deliver(&mut b, &mut ib, &mut db, &w, cut);
            let (w, _) = b.vectored();
            deliver(&mut a, &mut ia, &mut da, &w, cut);
            if b.done.len() == sizes.len() {
                break;
            }
        }
        for (i, &n) in sizes.iter().enumerate() {
            let st = b.done[&OpId(100 + i as u64)];
            assert_eq!(
                (st.error, st.nbytes, st.source),
                (None, n, Some(peer)),
                "cut {cut}, {n} bytes"
            );
            assert_eq!(
                b.recvs[&OpId(100 + i as u64)],
                pattern(n, i as u8),
                "cut {cut}, {n} bytes"
            );
            assert_eq!(a.done[&OpId(200 + i as u64)].error, None);
        }
        assert!(
            referred > 400 << 10,
            "large payloads are referred to, not copied ({referred})"
        );
        if cut < 1 << 20 {
            // (Whole batches arrive as whole frames: nothing to take over.)
            assert!(direct > 0, "cut {cut}: some Data payload went direct");
        }
        assert_eq!(
            b.placed + direct,
            sizes.iter().sum::<usize>(),
            "cut {cut}: every byte once"
        );
        assert!(da.is_none() && db.is_none());
    }
}

#[test]
fn direct_transfers_fail_cleanly_when_the_connection_goes() {
    let mut a = Side::new(9011, Role::Dialer { expect: epid(9012) });
    let mut b = Side::new(9012, Role::Acceptor);
    let (mut ia, mut ib) = (BytesMut::new(), BytesMut::new());
    let (mut da, mut db) = (None, None);
    for _ in 0..4 {
        let (w, _) = a.vectored();
        deliver(&mut b, &mut ib, &mut db, &w, 1 << 20);
        let (w, _) = b.vectored();
        deliver(&mut a, &mut ia, &mut da, &w, 1 << 20);
    }
    let peer_of_b = a.core.connection_peer(a.conn).unwrap();
    let n = 200 << 10;
    b.recvs.insert(OpId(1), vec![0; n]);
    b.core.recv(TagMatch::ANY, n, OpId(1)).unwrap();
    a.sends.insert(OpId(2), pattern(n, 3));
    a.core
        .send(peer_of_b, 9, n as u64, SendMode::Standard, OpId(2))
        .unwrap();
    // Rts, Cts, then half of the first Data frame.
    let (w, _) = a.vectored();
    deliver(&mut b, &mut ib, &mut db, &w, 1 << 20);
    let (w, _) = b.vectored();
    deliver(&mut a, &mut ia, &mut da, &w, 1 << 20);
    let (w, _) = a.vectored();
    ib.extend_from_slice(&w[..100]);
    b.core.handle_input(b.conn, &mut ib).unwrap();
    let d = b
        .core
        .take_direct(b.conn, &mut ib)
        .unwrap()
        .expect("a direct payload");
    assert_eq!((d.op, d.offset), (OpId(1), 100 - 24));
    assert!(ib.is_empty());
    // Input is not decoded while the payload is owed.
    ib.extend_from_slice(&[0xff; 8]);
    b.core.handle_input(b.conn, &mut ib).unwrap();
    assert_eq!(ib.len(), 8);
    b.core.connection_lost(b.conn, "test");
    b.events();
    let st = b.done[&OpId(1)];
    assert_eq!(st.error, Some(crate::ErrorKind::Io));
    assert_eq!(st.nbytes, 100 - 24);
    // Late direct bytes after the loss are ignored.
    b.core.direct_data(b.conn, 10);
}
