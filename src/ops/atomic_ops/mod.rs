//! Atomics on endpoints (`fi_atomic`, `fi_fetch_atomic`,
//! `fi_compare_atomic` and the `*_atomicvalid` queries) as futures
//! ([`RmaOp`]), over the RMA transport's active messages.
//!
//! One call is one active message each way, never chunked: at most the
//! count the valid-queries report (the engine's short payload divided by
//! the element size, or twice the size for compare calls). The target
//! checks the request, then runs it under the domain's atomic lock, so
//! atomics from any number of peers on the same bytes are exact (psmrail
//! does not offer `FI_ATOMIC` ordering with the application's own stores to
//! the region). Unsupported op x datatype pairs are refused with
//! `FI_EOPNOTSUPP` before anything is sent.
//!
//! Buffers: the three calls take `operand` (and `compare`) the same way,
//! as `&[u8]` copied into the request at call time, so the caller's bytes
//! are free again as soon as the call returns (no buffer is lent for the
//! life of the operation; one atomic is one short message, never
//! chunked, so the copy is small). The `result` buffer (fetch and compare
//! calls) receives the old values and comes back with the result; a plain
//! atomic's future hands back a copy of its operand bytes, so all three
//! resolve to [`RmaOp`]'s `(Result<()>, OpBuffer)`.
//!
//! The typed helpers over these calls ([`AtomicValue`],
//! [`AtomicTarget`], [`TypedAtomicOp`], `Endpoint::atomic_on`) are in
//! `value.rs` and `typed.rs`.

mod typed;
mod value;

pub use typed::{AtomicTarget, TypedAtomicOp};
pub use value::AtomicValue;

use super::atomic::{atomic_valid, check_request, AtomicDatatype, AtomicKind, AtomicOp};
use super::op_span::OpDesc;
use super::rma_ops::{prepare, RmaOp};
use crate::engine::OpBuffer;
use crate::fabric::{Caps, CounterKind, Endpoint, FiAddr};
use crate::proto::atomic::wire::{payload_len, AtomicRequest};
use crate::{Error, ErrorKind, Result};

/// One atomic call's arguments after the API shape.
struct Call<'a> {
    kind: AtomicKind,
    op: AtomicOp,
    dt: AtomicDatatype,
    dest: FiAddr,
    operand: &'a [u8],
    compare: &'a [u8],
    offset: u64,
    key: u64,
}

impl Endpoint {
    /// `fi_atomic`: applies `op` with the `operand` elements of `dt` to
    /// the target bytes at `offset` of the region with `key` at `dest`;
    /// nothing comes back. `operand` is copied at call time; the future
    /// hands back a copy of it (an [`OpBuffer`] of the same bytes).
    ///
    /// For a Rust type instead of bytes: [`atomic_on`](Self::atomic_on).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::{AtomicDatatype, AtomicOp};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_WRITE, Some(1))?;
    /// let op = ep.atomic(me, AtomicOp::Sum, AtomicDatatype::Uint64, &5u64.to_ne_bytes(), 0, 1);
    /// let (done, operand) = domain.reactor().block_on(op);
    /// done?;
    /// assert_eq!(operand.as_slice(), 5u64.to_ne_bytes());
    /// let mut now = [0u8; 8];
    /// mr.read_at(0, &mut now)?;
    /// assert_eq!(u64::from_ne_bytes(now), 5);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Errors (in the future)
    /// `OpNotSupp` for an op x datatype pair psmrail does not execute (or
    /// an endpoint without `FI_ATOMIC`), `MsgSize` beyond
    /// [`atomic_valid`](Self::atomic_valid), `Inval` for an operand that
    /// is not a whole number of elements, `Access` from the target.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    pub fn atomic(
        &self,
        dest: FiAddr,
        op: AtomicOp,
        dt: AtomicDatatype,
        operand: &[u8],
        offset: u64,
        key: u64,
    ) -> RmaOp {
        let call = Call {
            kind: AtomicKind::Write,
            op,
            dt,
            dest,
            operand,
            compare: &[],
            offset,
            key,
        };
        self.atomic_call(call, OpBuffer::from(operand.to_vec()))
    }

    /// `fi_fetch_atomic`: as [`atomic`](Self::atomic), and the old target
    /// values come back in `result` (its length gives the element count;
    /// `operand` has the same length, or is empty for `FI_ATOMIC_READ`).
    /// `operand` is copied at call time; the future hands back `result`.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    #[allow(clippy::too_many_arguments)] // mirrors fi_fetch_atomic
    pub fn fetch_atomic(
        &self,
        dest: FiAddr,
        op: AtomicOp,
        dt: AtomicDatatype,
        operand: &[u8],
        result: impl Into<OpBuffer>,
        offset: u64,
        key: u64,
    ) -> RmaOp {
        let call = Call {
            kind: AtomicKind::Fetch,
            op,
            dt,
            dest,
            operand,
            compare: &[],
            offset,
            key,
        };
        self.atomic_call(call, result.into())
    }

    /// `fi_compare_atomic`: `op` (`FI_CSWAP`, `FI_MSWAP`, ...) with
    /// `operand` and `compare` values on the target; the old values come
    /// back in `result` (all three have the same length). `operand` and
    /// `compare` are copied at call time; the future hands back `result`.
    ///
    /// # Cancel safety
    /// Dropping the future does not cancel the operation: it runs to
    /// completion at the target (the remote region may still change), and
    /// the buffer stays inside the reactor until the transfer is done, then
    /// it is freed. `mem::forget` is safe too.
    #[allow(clippy::too_many_arguments)] // mirrors fi_compare_atomic
    pub fn compare_atomic(
        &self,
        dest: FiAddr,
        op: AtomicOp,
        dt: AtomicDatatype,
        operand: &[u8],
        compare: &[u8],
        result: impl Into<OpBuffer>,
        offset: u64,
        key: u64,
    ) -> RmaOp {
        let call = Call {
            kind: AtomicKind::Compare,
            op,
            dt,
            dest,
            operand,
            compare,
            offset,
            key,
        };
        self.atomic_call(call, result.into())
    }

    /// `fi_atomicvalid`: the largest element count one
    /// [`atomic`](Self::atomic) call with `op` on `dt` may carry.
    ///
    /// # Errors
    /// `OpNotSupp` for an unsupported pair; `NoSys` when the domain has no
    /// RMA transport.
    pub fn atomic_valid(&self, op: AtomicOp, dt: AtomicDatatype) -> Result<usize> {
        self.valid(AtomicKind::Write, op, dt)
    }

    /// `fi_fetch_atomicvalid`, as [`atomic_valid`](Self::atomic_valid).
    pub fn fetch_atomic_valid(&self, op: AtomicOp, dt: AtomicDatatype) -> Result<usize> {
        self.valid(AtomicKind::Fetch, op, dt)
    }

    /// `fi_compare_atomicvalid`, as [`atomic_valid`](Self::atomic_valid).
    pub fn compare_atomic_valid(&self, op: AtomicOp, dt: AtomicDatatype) -> Result<usize> {
        self.valid(AtomicKind::Compare, op, dt)
    }

    fn valid(&self, kind: AtomicKind, op: AtomicOp, dt: AtomicDatatype) -> Result<usize> {
        self.core.ensure_open()?;
        let max = self.core.domain().rma()?.max_atomic();
        atomic_valid(kind, op, dt, max)
    }

    fn atomic_call(&self, c: Call<'_>, mut buffer: OpBuffer) -> RmaOp {
        let (dir, counter) = match c.kind {
            AtomicKind::Write => (Caps::WRITE, CounterKind::Write),
            _ => (Caps::READ, CounterKind::Read),
        };
        let what = c.kind.call_name();
        let (rma, peer) = match prepare(&self.core, Caps::ATOMIC, dir, what, c.dest) {
            Ok(p) => p,
            Err(e) => return RmaOp::failed(e, buffer),
        };
        // The element count comes from the operand (write calls) or the
        // result buffer (fetch and compare calls).
        let sized = match c.kind {
            AtomicKind::Write => c.operand.len(),
            _ => buffer.len(),
        };
        let shape = || -> Result<(u32, usize)> {
            let size = c.dt.size();
            if sized % size != 0 || sized == 0 {
                return Err(Error::new(
                    ErrorKind::Inval,
                    format!(
                        "{what} {} on {}: {sized} bytes are not a positive number of {size}-byte elements",
                        c.op, c.dt
                    ),
                ));
            }
            let count = sized / size;
            let len = check_request(c.kind, c.op, c.dt, count, rma.max_atomic())?;
            let want = payload_len(AtomicKind::Fetch, c.op, len);
            let operand_ok = c.operand.len() == len || (want == 0 && c.operand.is_empty());
            if !operand_ok || (c.kind == AtomicKind::Compare && c.compare.len() != len) {
                return Err(Error::new(
                    ErrorKind::Inval,
                    format!(
                        "{what} {} on {}: operand of {} and compare of {} bytes for {len} target bytes",
                        c.op,
                        c.dt,
                        c.operand.len(),
                        c.compare.len()
                    ),
                ));
            }
            Ok((count as u32, len))
        };
        let (count, len) = match shape() {
            Ok(s) => s,
            Err(e) => return RmaOp::failed(e, buffer),
        };
        if c.kind.fetches() && buffer.as_mut_slice().is_none() {
            let e = Error::new(
                ErrorKind::Inval,
                format!("{what}: the result buffer is read-only (Bytes)"),
            );
            return RmaOp::failed(e, buffer);
        }
        let mut payload = Vec::with_capacity(payload_len(c.kind, c.op, len));
        if payload_len(c.kind, c.op, len) > 0 {
            payload.extend_from_slice(c.operand);
        }
        payload.extend_from_slice(c.compare);
        let req = AtomicRequest {
            id: 0,
            kind: c.kind,
            op: c.op,
            dt: c.dt,
            count,
            offset: c.offset,
            key: c.key,
        };
        let fetch_len = if c.kind.fetches() { len } else { 0 };
        let key = rma.start_atomic(peer, req, payload, buffer, fetch_len);
        RmaOp::posted(self.core.clone(), rma, key, counter).traced(|| OpDesc {
            kind: match c.kind {
                AtomicKind::Write => "atomic",
                AtomicKind::Fetch => "fetch_atomic",
                AtomicKind::Compare => "compare_atomic",
            },
            peer: Some(c.dest),
            tag: None,
            len,
        })
    }
}
