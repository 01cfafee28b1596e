//! The every-op x datatype atomic cases (`atomic.rs`, `rma_remote.rs`):
//! small operands exact in every datatype, how to post each case, and the
//! result the local reference (`apply`) expects.

use psmrail::fabric::{Endpoint, FiAddr};
use psmrail::ops::atomic::{
    apply, op_supports_datatype, AtomicDatatype as Dt, AtomicKind, AtomicOp as Op,
};
use psmrail::ops::RmaOp;

/// Two elements of `dt` holding `vals` (integers, or floats with those
/// values; complex values get imaginary part 1).
pub(crate) fn encode(dt: Dt, vals: [u8; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vals {
        match dt {
            Dt::Float => out.extend(f32::from(v).to_ne_bytes()),
            Dt::Double => out.extend(f64::from(v).to_ne_bytes()),
            Dt::FloatComplex => {
                out.extend(f32::from(v).to_ne_bytes());
                out.extend(1f32.to_ne_bytes());
            }
            Dt::DoubleComplex => {
                out.extend(f64::from(v).to_ne_bytes());
                out.extend(1f64.to_ne_bytes());
            }
            _ => {
                let mut b = vec![0u8; dt.size()];
                b[0] = v;
                out.extend(b);
            }
        }
    }
    out
}

/// One atomic kind x op x datatype, on two elements.
pub(crate) struct Case {
    pub kind: AtomicKind,
    pub op: Op,
    pub dt: Dt,
    /// What the target holds before the operation.
    pub init: Vec<u8>,
    pub operand: Vec<u8>,
    /// Element 0 equals the target's, element 1 does not: the compare ops
    /// take both branches.
    pub compare: Vec<u8>,
}

impl Case {
    /// Every case: 30 kind x op combinations x 12 datatypes.
    pub(crate) fn all() -> Vec<Case> {
        let mut out = Vec::new();
        for kind in AtomicKind::ALL {
            for op in Op::ALL.into_iter().filter(|&op| kind.accepts(op)) {
                for dt in Dt::ALL {
                    let operand = if op == Op::AtomicRead {
                        Vec::new()
                    } else {
                        encode(dt, [2, 9])
                    };
                    let compare = if kind == AtomicKind::Compare {
                        encode(dt, [6, 1])
                    } else {
                        Vec::new()
                    };
                    out.push(Case {
                        kind,
                        op,
                        dt,
                        init: encode(dt, [6, 3]),
                        operand,
                        compare,
                    });
                }
            }
        }
        out
    }

    pub(crate) fn name(&self) -> String {
        format!("{} {} {}", self.kind, self.op, self.dt)
    }

    /// Whether the op x datatype table supports it (else it must be refused).
    pub(crate) fn supported(&self) -> bool {
        op_supports_datatype(self.op, self.dt)
    }

    fn len(&self) -> usize {
        2 * self.dt.size()
    }

    /// Posts it from `ep` to `dest`'s region `key` at `at`.
    pub(crate) fn post(&self, ep: &Endpoint, dest: FiAddr, at: u64, key: u64) -> RmaOp {
        let (op, dt) = (self.op, self.dt);
        match self.kind {
            AtomicKind::Write => ep.atomic(dest, op, dt, &self.operand, at, key),
            AtomicKind::Fetch => {
                ep.fetch_atomic(dest, op, dt, &self.operand, vec![0u8; self.len()], at, key)
            }
            AtomicKind::Compare => ep.compare_atomic(
                dest,
                op,
                dt,
                &self.operand,
                &self.compare,
                vec![0u8; self.len()],
                at,
                key,
            ),
        }
    }

    /// What the reference expects from `before` (the whole region, the
    /// case at `at`): the region after, and the fetched old values (empty
    /// for a non-fetching kind).
    pub(crate) fn expected(&self, before: &[u8], at: usize) -> (Vec<u8>, Vec<u8>) {
        let mut want = before.to_vec();
        let mut old = vec![0u8; if self.kind.fetches() { self.len() } else { 0 }];
        apply(
            self.kind,
            self.op,
            self.dt,
            &mut want[at..at + self.len()],
            &self.operand,
            &self.compare,
            &mut old,
        )
        .unwrap_or_else(|e| panic!("{}: the local reference: {e}", self.name()));
        (want, old)
    }
}
