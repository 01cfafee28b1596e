//! Executing one atomic at the target: element by element over byte
//! slices, in native byte order, with no alignment assumptions and no
//! `unsafe`.
//!
//! # Atomicity
//! [`apply`] itself takes no lock. The transport runs it under one lock
//! per target memory region, shared by every atomic on that region, so
//! concurrent atomics from several initiators serialise and each sees
//! the result of the one before it (the C provider uses one process-wide
//! spinlock for the same purpose). As in C, that makes atomics atomic
//! with respect to each other, not with respect to RMA writes or CPU
//! stores to the same memory.

use std::ops::{BitAnd, BitOr, BitXor, Not};

use super::datatype::AtomicDatatype;
use super::op::{AtomicKind, AtomicOp};
use super::valid::check_op;
use crate::{Error, ErrorKind, Result};

/// One element as it sits in memory: `SIZE` bytes, native byte order.
trait Element: Copy {
    const SIZE: usize;
    /// `b` is exactly `SIZE` bytes (it comes from `chunks_exact(SIZE)`).
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
}

/// The operations every datatype has: `SUM`, `PROD`, `ATOMIC_WRITE`,
/// `CSWAP`, `CSWAP_NE`.
trait Arith: Element {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn equals(self, o: Self) -> bool;
}

/// Datatypes with an order: `MIN`, `MAX` and the ordered compare-swaps.
trait Ordered: Arith + PartialOrd {}

/// Integers: logical and bitwise ops and `MSWAP`.
trait Int:
    Ordered + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self> + Not<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
}

/// Copies exactly `N` bytes; callers pass `chunks_exact(N)` items, so the
/// lengths always agree.
fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

macro_rules! int_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(b))
            }
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes());
            }
        }
        impl Arith for $t {
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn equals(self, o: Self) -> bool {
                self == o
            }
        }
        impl Ordered for $t {}
        impl Int for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
        }
    )*};
}
int_element!(i8, u8, i16, u16, i32, u32, i64, u64);

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(b))
            }
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes());
            }
        }
        impl Arith for $t {
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            // IEEE equality, as C's `==`: NaN equals nothing, -0 equals +0.
            fn equals(self, o: Self) -> bool {
                self == o
            }
        }
        impl Ordered for $t {}
    )*};
}
float_element!(f32, f64);

/// C `float complex` / `double complex`: real part, then imaginary part.
#[derive(Clone, Copy)]
struct Complex<F> {
    re: F,
    im: F,
}

impl<F: Element + Arith + std::ops::Sub<Output = F>> Element for Complex<F> {
    const SIZE: usize = 2 * F::SIZE;
    fn load(b: &[u8]) -> Self {
        let (re, im) = b.split_at(F::SIZE);
        Complex {
            re: F::load(re),
            im: F::load(im),
        }
    }
    fn store(self, b: &mut [u8]) {
        let (re, im) = b.split_at_mut(F::SIZE);
        self.re.store(re);
        self.im.store(im);
    }
}

impl<F: Element + Arith + std::ops::Sub<Output = F>> Arith for Complex<F> {
    fn add(self, o: Self) -> Self {
        Complex {
            re: self.re.add(o.re),
            im: self.im.add(o.im),
        }
    }
    // The textbook product. C's `_Complex` multiply (Annex G) additionally
    // recovers infinities from NaN results; the finite results agree.
    fn mul(self, o: Self) -> Self {
        Complex {
            re: self.re.mul(o.re) - self.im.mul(o.im),
            im: self.re.mul(o.im).add(self.im.mul(o.re)),
        }
    }
    fn equals(self, o: Self) -> bool {
        self.re.equals(o.re) && self.im.equals(o.im)
    }
}

/// `d = f(d, s)` for every element; `None` leaves `d` untouched.
fn each<T: Element>(target: &mut [u8], operand: &[u8], f: impl Fn(T, T) -> Option<T>) {
    for (d, s) in target
        .chunks_exact_mut(T::SIZE)
        .zip(operand.chunks_exact(T::SIZE))
    {
        if let Some(new) = f(T::load(d), T::load(s)) {
            new.store(d);
        }
    }
}

/// `d = f(d, s, c)` for every element; `None` leaves `d` untouched.
fn each_cmp<T: Element>(
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    f: impl Fn(T, T, T) -> Option<T>,
) {
    let (ops, cmps) = (operand.chunks_exact(T::SIZE), compare.chunks_exact(T::SIZE));
    for ((d, s), c) in target.chunks_exact_mut(T::SIZE).zip(ops).zip(cmps) {
        if let Some(new) = f(T::load(d), T::load(s), T::load(c)) {
            new.store(d);
        }
    }
}

/// The checked buffers of one call.
struct Bufs<'a> {
    target: &'a mut [u8],
    operand: &'a [u8],
    compare: &'a [u8],
}

fn run_int<T: Int>(op: AtomicOp, b: Bufs<'_>) -> Result<()> {
    let truth = |x: T| x != T::ZERO;
    let from_truth = |t: bool| if t { T::ONE } else { T::ZERO };
    match op {
        AtomicOp::Lor => each(b.target, b.operand, |d: T, s| {
            Some(from_truth(truth(d) || truth(s)))
        }),
        AtomicOp::Land => each(b.target, b.operand, |d: T, s| {
            Some(from_truth(truth(d) && truth(s)))
        }),
        AtomicOp::Lxor => each(b.target, b.operand, |d: T, s| {
            Some(from_truth(truth(d) != truth(s)))
        }),
        AtomicOp::Bor => each(b.target, b.operand, |d: T, s| Some(d | s)),
        AtomicOp::Band => each(b.target, b.operand, |d: T, s| Some(d & s)),
        AtomicOp::Bxor => each(b.target, b.operand, |d: T, s| Some(d ^ s)),
        AtomicOp::Mswap => each_cmp(b.target, b.operand, b.compare, |d: T, s, c| {
            Some((s & c) | (d & !c))
        }),
        _ => return run_ordered::<T>(op, b),
    }
    Ok(())
}

fn run_ordered<T: Ordered>(op: AtomicOp, b: Bufs<'_>) -> Result<()> {
    // The compare value is on the left (fi_atomic(3)).
    let cswap = |b: Bufs<'_>, cond: fn(T, T) -> bool| {
        each_cmp(b.target, b.operand, b.compare, |d: T, s, c| {
            cond(c, d).then_some(s)
        })
    };
    match op {
        AtomicOp::Min => each(b.target, b.operand, |d: T, s| (d > s).then_some(s)),
        AtomicOp::Max => each(b.target, b.operand, |d: T, s| (d < s).then_some(s)),
        AtomicOp::CswapLe => cswap(b, |c, d| c <= d),
        AtomicOp::CswapLt => cswap(b, |c, d| c < d),
        AtomicOp::CswapGe => cswap(b, |c, d| c >= d),
        AtomicOp::CswapGt => cswap(b, |c, d| c > d),
        _ => return run_arith::<T>(op, b),
    }
    Ok(())
}

fn run_arith<T: Arith>(op: AtomicOp, b: Bufs<'_>) -> Result<()> {
    match op {
        AtomicOp::Sum => each(b.target, b.operand, |d: T, s| Some(d.add(s))),
        AtomicOp::Prod => each(b.target, b.operand, |d: T, s| Some(d.mul(s))),
        AtomicOp::AtomicWrite => each(b.target, b.operand, |_: T, s| Some(s)),
        // Nothing to change; the old values were already fetched.
        AtomicOp::AtomicRead => {}
        AtomicOp::Cswap => each_cmp(b.target, b.operand, b.compare, |d: T, s, c| {
            c.equals(d).then_some(s)
        }),
        AtomicOp::CswapNe => each_cmp(b.target, b.operand, b.compare, |d: T, s, c| {
            (!c.equals(d)).then_some(s)
        }),
        // check_op has refused every other combination before we get here;
        // still an error, never a silent success.
        _ => {
            return Err(Error::new(
                ErrorKind::OpNotSupp,
                format!("atomic {op} is not defined on this datatype"),
            ))
        }
    }
    Ok(())
}

/// Checks one buffer's length: `want` bytes, or empty when `may_be_empty`.
fn check_len(
    what: &str,
    len: usize,
    want: usize,
    may_be_empty: bool,
    ctx: &dyn Fn() -> String,
) -> Result<()> {
    if len == want || (may_be_empty && len == 0) {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Inval,
        format!(
            "{}: {what} is {len} bytes, expected {want}{}",
            ctx(),
            if may_be_empty { " or none" } else { "" }
        ),
    ))
}

/// Executes one atomic at the target: `op` of `kind` on the elements of
/// `dt` in `target`, in place.
///
/// * `target`: the memory the atomic updates; `count = target.len() /
///   dt.size()` elements, at least one, with no bytes left over.
/// * `operand`: `target.len()` bytes (the `s` values). For
///   `ATOMIC_READ` it is ignored and may be empty.
/// * `compare`: `target.len()` bytes for compare calls (the `c` values);
///   empty otherwise.
/// * `fetched`: `target.len()` bytes for fetch and compare calls, filled
///   with the old target values; empty for write calls.
///
/// Elements are in native byte order and may sit at any alignment.
/// Combinations [`check_op`] rejects are refused with `FI_EOPNOTSUPP` and
/// any length mismatch is `FI_EINVAL`; on error the target is untouched.
/// See the module docs for how the caller makes this atomic.
///
/// ```
/// use psmrail::ops::atomic::{apply, AtomicDatatype, AtomicKind, AtomicOp};
/// let mut target = [5u32.to_ne_bytes(), 9u32.to_ne_bytes()].concat();
/// let operand = [7u32.to_ne_bytes(), 7u32.to_ne_bytes()].concat();
/// let mut old = vec![0u8; 8];
/// apply(AtomicKind::Fetch, AtomicOp::Max, AtomicDatatype::Uint32,
///       &mut target, &operand, &[], &mut old).unwrap();
/// assert_eq!(target, [7u32.to_ne_bytes(), 9u32.to_ne_bytes()].concat());
/// assert_eq!(old, [5u32.to_ne_bytes(), 9u32.to_ne_bytes()].concat());
///
/// // Compare-and-swap: the compare value is on the left, `if c == d { d = s }`.
/// let mut target = 1i64.to_ne_bytes();
/// let mut old = [0u8; 8];
/// apply(AtomicKind::Compare, AtomicOp::Cswap, AtomicDatatype::Int64,
///       &mut target, &2i64.to_ne_bytes(), &1i64.to_ne_bytes(), &mut old).unwrap();
/// assert_eq!(i64::from_ne_bytes(target), 2);
/// assert_eq!(i64::from_ne_bytes(old), 1);
/// ```
pub fn apply(
    kind: AtomicKind,
    op: AtomicOp,
    dt: AtomicDatatype,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    fetched: &mut [u8],
) -> Result<()> {
    check_op(kind, op, dt)?;
    let ctx = || format!("{kind} {op} on {dt}");
    let len = target.len();
    if len == 0 || len % dt.size() != 0 {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "{}: target is {len} bytes, not a positive multiple of the {}-byte element",
                ctx(),
                dt.size()
            ),
        ));
    }
    let is_read = op == AtomicOp::AtomicRead;
    check_len("operand", operand.len(), len, is_read, &ctx)?;
    let want_compare = if kind == AtomicKind::Compare { len } else { 0 };
    check_len("compare", compare.len(), want_compare, false, &ctx)?;
    let want_fetched = if kind.fetches() { len } else { 0 };
    check_len("result buffer", fetched.len(), want_fetched, false, &ctx)?;

    if kind.fetches() {
        fetched.copy_from_slice(target);
    }
    let b = Bufs {
        target,
        operand,
        compare,
    };
    match dt {
        AtomicDatatype::Int8 => run_int::<i8>(op, b),
        AtomicDatatype::Uint8 => run_int::<u8>(op, b),
        AtomicDatatype::Int16 => run_int::<i16>(op, b),
        AtomicDatatype::Uint16 => run_int::<u16>(op, b),
        AtomicDatatype::Int32 => run_int::<i32>(op, b),
        AtomicDatatype::Uint32 => run_int::<u32>(op, b),
        AtomicDatatype::Int64 => run_int::<i64>(op, b),
        AtomicDatatype::Uint64 => run_int::<u64>(op, b),
        AtomicDatatype::Float => run_ordered::<f32>(op, b),
        AtomicDatatype::Double => run_ordered::<f64>(op, b),
        AtomicDatatype::FloatComplex => run_arith::<Complex<f32>>(op, b),
        AtomicDatatype::DoubleComplex => run_arith::<Complex<f64>>(op, b),
    }
}
