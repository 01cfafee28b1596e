//! Every op x datatype x kind against a reference computed here on typed
//! values, plus the limits, bad lengths and enum conversions.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::ErrorKind;
use AtomicOp::*;

/// The op x datatype table the C provider executes
/// (`prov/psm/src/psmx_atomic.c`), written out again as lists so the test does
/// not lean on `op_supports_datatype`.
fn expected_supported(op: AtomicOp, dt: AtomicDatatype) -> bool {
    const EVERY_TYPE: [AtomicOp; 6] = [Sum, Prod, AtomicRead, AtomicWrite, Cswap, CswapNe];
    const INT_AND_FLOAT: [AtomicOp; 6] = [Min, Max, CswapLe, CswapLt, CswapGe, CswapGt];
    const INT_ONLY: [AtomicOp; 7] = [Lor, Land, Bor, Band, Lxor, Bxor, Mswap];
    let is_int = (dt as u32) <= AtomicDatatype::Uint64 as u32;
    let is_float = matches!(dt, AtomicDatatype::Float | AtomicDatatype::Double);
    EVERY_TYPE.contains(&op)
        || (INT_AND_FLOAT.contains(&op) && (is_int || is_float))
        || (INT_ONLY.contains(&op) && is_int)
}

/// The ops of each call kind (`fi_atomic(3)`), written out.
fn expected_kind_accepts(kind: AtomicKind, op: AtomicOp) -> bool {
    let v = op as u32;
    match kind {
        AtomicKind::Write => v <= Bxor as u32 || op == AtomicWrite,
        AtomicKind::Fetch => v <= AtomicWrite as u32,
        AtomicKind::Compare => (Cswap as u32..=Mswap as u32).contains(&v),
    }
}

/// Native-endian encoding of test values.
trait Enc: Copy {
    fn enc(self, out: &mut Vec<u8>);
}
macro_rules! enc_prim {
    ($($t:ty),*) => {$(
        impl Enc for $t {
            fn enc(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
enc_prim!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);
impl<F: Enc> Enc for (F, F) {
    fn enc(self, out: &mut Vec<u8>) {
        self.0.enc(out);
        self.1.enc(out);
    }
}
/// `bytes` with every NaN of `dt`'s float type written as one canonical
/// NaN: arithmetic leaves a NaN's sign and payload unspecified (LLVM may
/// swap the operands of a commutative operation, and x86 propagates the
/// first operand's NaN), so results are compared up to NaN bits.
fn canon_nans(dt: AtomicDatatype, bytes: &[u8]) -> Vec<u8> {
    match dt {
        AtomicDatatype::Float | AtomicDatatype::FloatComplex => bytes
            .chunks_exact(4)
            .flat_map(|c| {
                let v = f32::from_ne_bytes(c.try_into().expect("4 bytes"));
                if v.is_nan() { f32::NAN } else { v }.to_ne_bytes()
            })
            .collect(),
        AtomicDatatype::Double | AtomicDatatype::DoubleComplex => bytes
            .chunks_exact(8)
            .flat_map(|c| {
                let v = f64::from_ne_bytes(c.try_into().expect("8 bytes"));
                if v.is_nan() { f64::NAN } else { v }.to_ne_bytes()
            })
            .collect(),
        _ => bytes.to_vec(),
    }
}

fn enc<T: Enc>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for x in v {
        x.enc(&mut out);
    }
    out
}

macro_rules! int_reference {
    ($name:ident, $t:ty) => {
        fn $name(op: AtomicOp, d: $t, s: $t, c: $t) -> $t {
            let t = |b: bool| -> $t {
                if b {
                    1
                } else {
                    0
                }
            };
            match op {
                Min => d.min(s),
                Max => d.max(s),
                Sum => d.wrapping_add(s),
                Prod => d.wrapping_mul(s),
                Lor => t(d != 0 || s != 0),
                Land => t(d != 0 && s != 0),
                Bor => d | s,
                Band => d & s,
                Lxor => t((d != 0) ^ (s != 0)),
                Bxor => d ^ s,
                AtomicRead => d,
                AtomicWrite => s,
                Cswap => {
                    if c == d {
                        s
                    } else {
                        d
                    }
                }
                CswapNe => {
                    if c != d {
                        s
                    } else {
                        d
                    }
                }
                CswapLe => {
                    if c <= d {
                        s
                    } else {
                        d
                    }
                }
                CswapLt => {
                    if c < d {
                        s
                    } else {
                        d
                    }
                }
                CswapGe => {
                    if c >= d {
                        s
                    } else {
                        d
                    }
                }
                CswapGt => {
                    if c > d {
                        s
                    } else {
                        d
                    }
                }
                Mswap => (s & c) | (d & !c),
            }
        }
    };
}

macro_rules! float_reference {
    ($name:ident, $t:ty) => {
        /// `None` for the integer-only ops.
        fn $name(op: AtomicOp, d: $t, s: $t, c: $t) -> Option<$t> {
            Some(match op {
                // Not f32::min: a NaN target must stay (the comparison is false).
                Min => {
                    if d > s {
                        s
                    } else {
                        d
                    }
                }
                Max => {
                    if d < s {
                        s
                    } else {
                        d
                    }
                }
                Sum => d + s,
                Prod => d * s,
                AtomicRead => d,
                AtomicWrite => s,
                Cswap => {
                    if c == d {
                        s
                    } else {
                        d
                    }
                }
                CswapNe => {
                    if c != d {
                        s
                    } else {
                        d
                    }
                }
                CswapLe => {
                    if c <= d {
                        s
                    } else {
                        d
                    }
                }
                CswapLt => {
                    if c < d {
                        s
                    } else {
                        d
                    }
                }
                CswapGe => {
                    if c >= d {
                        s
                    } else {
                        d
                    }
                }
                CswapGt => {
                    if c > d {
                        s
                    } else {
                        d
                    }
                }
                _ => return None,
            })
        }
    };
}

macro_rules! complex_reference {
    ($name:ident, $t:ty) => {
        /// `None` for ops complex does not take.
        fn $name(op: AtomicOp, d: ($t, $t), s: ($t, $t), c: ($t, $t)) -> Option<($t, $t)> {
            let same = c.0 == d.0 && c.1 == d.1;
            Some(match op {
                Sum => (d.0 + s.0, d.1 + s.1),
                Prod => (d.0 * s.0 - d.1 * s.1, d.0 * s.1 + d.1 * s.0),
                AtomicRead => d,
                AtomicWrite => s,
                Cswap => {
                    if same {
                        s
                    } else {
                        d
                    }
                }
                CswapNe => {
                    if same {
                        d
                    } else {
                        s
                    }
                }
                _ => return None,
            })
        }
    };
}

int_reference!(ref_i8, i8);
int_reference!(ref_u8, u8);
int_reference!(ref_i16, i16);
int_reference!(ref_u16, u16);
int_reference!(ref_i32, i32);
int_reference!(ref_u32, u32);
int_reference!(ref_i64, i64);
int_reference!(ref_u64, u64);
float_reference!(ref_f32, f32);
float_reference!(ref_f64, f64);
complex_reference!(ref_c32, f32);
complex_reference!(ref_c64, f64);

/// Runs every op under every kind on the rows `(d, s, c)` and checks the
/// target and the fetched values against `reference`, or the refusal.
fn check_all<T: Enc + std::fmt::Debug>(
    dt: AtomicDatatype,
    rows: &[(T, T, T)],
    reference: impl Fn(AtomicOp, T, T, T) -> Option<T>,
) -> std::result::Result<(), TestCaseError> {
    let d: Vec<T> = rows.iter().map(|r| r.0).collect();
    let s: Vec<T> = rows.iter().map(|r| r.1).collect();
    let c: Vec<T> = rows.iter().map(|r| r.2).collect();
    let (d_bytes, s_bytes, c_bytes) = (enc(&d), enc(&s), enc(&c));
    for op in AtomicOp::ALL {
        for kind in AtomicKind::ALL {
            let mut target = d_bytes.clone();
            let compare = if kind == AtomicKind::Compare {
                c_bytes.clone()
            } else {
                vec![]
            };
            let mut fetched = if kind == AtomicKind::Write {
                vec![]
            } else {
                vec![0xAA; d_bytes.len()]
            };
            let r = apply(kind, op, dt, &mut target, &s_bytes, &compare, &mut fetched);
            let supported = expected_kind_accepts(kind, op) && expected_supported(op, dt);
            if !supported {
                let e = r.expect_err("unsupported combination must be refused");
                prop_assert_eq!(e.kind(), ErrorKind::OpNotSupp, "{} {} {}", kind, op, dt);
                prop_assert_eq!(
                    &target,
                    &d_bytes,
                    "refused {} {} {} touched the target",
                    kind,
                    op,
                    dt
                );
                continue;
            }
            prop_assert!(r.is_ok(), "{} {} {}: {:?}", kind, op, dt, r);
            let want: Vec<T> = rows
                .iter()
                .map(|&(d, s, c)| reference(op, d, s, c).expect("reference covers supported ops"))
                .collect();
            prop_assert_eq!(
                canon_nans(dt, &target),
                canon_nans(dt, &enc(&want)),
                "{} {} {} rows {:?}",
                kind,
                op,
                dt,
                rows
            );
            if kind.fetches() {
                prop_assert_eq!(&fetched, &d_bytes, "{} {} {}: fetched", kind, op, dt);
            }
        }
    }
    Ok(())
}

/// Integers biased towards small values, so compare values often equal
/// the target and logical ops see zeros.
macro_rules! int_strategy {
    ($t:ty) => {
        prop_oneof![(-2i8..3).prop_map(|v| v as $t), any::<$t>()]
    };
}

/// Floats from raw bits (NaNs, infinities, subnormals, -0) or small
/// integers (equal values, exact sums).
macro_rules! float_strategy {
    ($t:ty, $bits:ty) => {
        prop_oneof![
            (-2i8..3).prop_map(|v| v as $t),
            any::<$bits>().prop_map(<$t>::from_bits),
            Just(-0.0 as $t),
            Just(<$t>::NAN),
            Just(<$t>::INFINITY),
        ]
    };
}

macro_rules! int_case {
    ($test:ident, $t:ty, $dt:expr, $reference:ident) => {
        proptest! {
            #[test]
            fn $test(rows in vec((int_strategy!($t), int_strategy!($t), int_strategy!($t)), 1..6)) {
                check_all($dt, &rows, |op, d, s, c| Some($reference(op, d, s, c)))?;
            }
        }
    };
}

int_case!(every_op_int8, i8, AtomicDatatype::Int8, ref_i8);
int_case!(every_op_uint8, u8, AtomicDatatype::Uint8, ref_u8);
int_case!(every_op_int16, i16, AtomicDatatype::Int16, ref_i16);
int_case!(every_op_uint16, u16, AtomicDatatype::Uint16, ref_u16);
int_case!(every_op_int32, i32, AtomicDatatype::Int32, ref_i32);
int_case!(every_op_uint32, u32, AtomicDatatype::Uint32, ref_u32);
int_case!(every_op_int64, i64, AtomicDatatype::Int64, ref_i64);
int_case!(every_op_uint64, u64, AtomicDatatype::Uint64, ref_u64);

proptest! {
    #[test]
    fn every_op_float(rows in vec((float_strategy!(f32, u32), float_strategy!(f32, u32), float_strategy!(f32, u32)), 1..6)) {
        check_all(AtomicDatatype::Float, &rows, ref_f32)?;
    }

    #[test]
    fn every_op_double(rows in vec((float_strategy!(f64, u64), float_strategy!(f64, u64), float_strategy!(f64, u64)), 1..6)) {
        check_all(AtomicDatatype::Double, &rows, ref_f64)?;
    }

    #[test]
    fn every_op_float_complex(rows in vec(
        ((float_strategy!(f32, u32), float_strategy!(f32, u32)),
         (float_strategy!(f32, u32), float_strategy!(f32, u32)),
         (float_strategy!(f32, u32), float_strategy!(f32, u32))), 1..6)) {
        check_all(AtomicDatatype::FloatComplex, &rows, ref_c32)?;
    }

    #[test]
    fn every_op_double_complex(rows in vec(
        ((float_strategy!(f64, u64), float_strategy!(f64, u64)),
         (float_strategy!(f64, u64), float_strategy!(f64, u64)),
         (float_strategy!(f64, u64), float_strategy!(f64, u64))), 1..6)) {
        check_all(AtomicDatatype::DoubleComplex, &rows, ref_c64)?;
    }

    /// Whatever the buffer lengths, apply returns (never panics), and a
    /// failed call leaves the target as it was.
    #[test]
    fn any_lengths_never_panic(
        op in 0u32..19, dt in 0u32..12, kind in 0usize..3,
        t in 0usize..40, s in 0usize..40, c in 0usize..40, f in 0usize..40,
    ) {
        let (op, dt, kind) = (AtomicOp::try_from(op).unwrap(), AtomicDatatype::try_from(dt).unwrap(), AtomicKind::ALL[kind]);
        let mut target = vec![3u8; t];
        let mut fetched = vec![0u8; f];
        if apply(kind, op, dt, &mut target, &vec![1u8; s], &vec![2u8; c], &mut fetched).is_err() {
            prop_assert_eq!(target, vec![3u8; t]);
        }
    }
}

#[test]
fn table_matches_the_c_provider() {
    let mut supported = 0;
    for op in AtomicOp::ALL {
        for dt in AtomicDatatype::ALL {
            assert_eq!(
                op_supports_datatype(op, dt),
                expected_supported(op, dt),
                "{op} {dt}"
            );
            supported += usize::from(expected_supported(op, dt));
        }
        for kind in AtomicKind::ALL {
            assert_eq!(
                kind.accepts(op),
                expected_kind_accepts(kind, op),
                "{kind} {op}"
            );
        }
    }
    // 6 ops x 12 types + 6 x 10 + 7 x 8.
    assert_eq!(supported, 72 + 60 + 56);
}

#[test]
fn valid_reports_the_largest_count() {
    for payload in [0usize, 1, 7, 8, 15, 16, 31, 32, 4096, 65535] {
        for kind in AtomicKind::ALL {
            for op in AtomicOp::ALL {
                for dt in AtomicDatatype::ALL {
                    let r = atomic_valid(kind, op, dt, payload);
                    if !(expected_kind_accepts(kind, op) && expected_supported(op, dt)) {
                        assert_eq!(
                            r.unwrap_err().kind(),
                            ErrorKind::OpNotSupp,
                            "{kind} {op} {dt}"
                        );
                        continue;
                    }
                    let per = if kind == AtomicKind::Compare {
                        2 * dt.size()
                    } else {
                        dt.size()
                    };
                    match payload / per {
                        0 => assert_eq!(r.unwrap_err().kind(), ErrorKind::MsgSize),
                        n => {
                            assert_eq!(r.unwrap(), n, "{kind} {op} {dt} {payload}");
                            // The reported count fits; one more does not.
                            assert_eq!(
                                check_request(kind, op, dt, n, payload).unwrap(),
                                n * dt.size()
                            );
                            let e = check_request(kind, op, dt, n + 1, payload).unwrap_err();
                            assert_eq!(e.kind(), ErrorKind::MsgSize);
                            let e = check_request(kind, op, dt, 0, payload).unwrap_err();
                            assert_eq!(e.kind(), ErrorKind::Inval);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn try_from_values() {
    for (i, op) in AtomicOp::ALL.iter().enumerate() {
        assert_eq!(*op as u32, i as u32);
        assert_eq!(AtomicOp::try_from(i as u32).unwrap(), *op);
    }
    for v in [19, 20, 256, u32::MAX] {
        let e = AtomicOp::try_from(v).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(e.message().contains(&v.to_string()));
    }
    for (i, dt) in AtomicDatatype::ALL.iter().enumerate() {
        assert_eq!(*dt as u32, i as u32);
        assert_eq!(AtomicDatatype::try_from(i as u32).unwrap(), *dt);
    }
    for (v, name) in [(12, "FI_LONG_DOUBLE"), (13, "FI_LONG_DOUBLE_COMPLEX")] {
        let e = AtomicDatatype::try_from(v).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OpNotSupp);
        assert!(e.message().contains(name), "{}", e.message());
    }
    for v in [14, 256, u32::MAX] {
        assert_eq!(
            AtomicDatatype::try_from(v).unwrap_err().kind(),
            ErrorKind::Inval
        );
    }
    let sizes: Vec<usize> = AtomicDatatype::ALL.iter().map(|d| d.size()).collect();
    assert_eq!(sizes, [1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16]);
}

fn inval(r: crate::Result<()>) -> bool {
    matches!(r, Err(e) if e.kind() == ErrorKind::Inval)
}

#[test]
fn bad_lengths_are_inval() {
    let dt = AtomicDatatype::Uint32;
    let (w, f, c) = (AtomicKind::Write, AtomicKind::Fetch, AtomicKind::Compare);
    let four = [0u8; 4];
    // Empty target, and a target that is not whole elements.
    assert!(inval(apply(w, Sum, dt, &mut [], &[], &[], &mut [])));
    assert!(inval(apply(
        w,
        Sum,
        dt,
        &mut [0u8; 7],
        &[0u8; 7],
        &[],
        &mut []
    )));
    // Operand short, long, or missing.
    assert!(inval(apply(w, Sum, dt, &mut [0u8; 8], &four, &[], &mut [])));
    assert!(inval(apply(
        w,
        Sum,
        dt,
        &mut [0u8; 8],
        &[0u8; 12],
        &[],
        &mut []
    )));
    assert!(inval(apply(w, Sum, dt, &mut [0u8; 4], &[], &[], &mut [])));
    // Compare where none belongs, missing or short where it does.
    assert!(inval(apply(
        w,
        Sum,
        dt,
        &mut [0u8; 4],
        &four,
        &four,
        &mut []
    )));
    assert!(inval(apply(
        c,
        Cswap,
        dt,
        &mut [0u8; 4],
        &four,
        &[],
        &mut [0u8; 4]
    )));
    assert!(inval(apply(
        c,
        Cswap,
        dt,
        &mut [0u8; 8],
        &[0u8; 8],
        &four,
        &mut [0u8; 8]
    )));
    // Result buffer for a write, missing or short for fetch and compare.
    assert!(inval(apply(
        w,
        Sum,
        dt,
        &mut [0u8; 4],
        &four,
        &[],
        &mut [0u8; 4]
    )));
    assert!(inval(apply(f, Sum, dt, &mut [0u8; 4], &four, &[], &mut [])));
    assert!(inval(apply(
        f,
        Sum,
        dt,
        &mut [0u8; 8],
        &[0u8; 8],
        &[],
        &mut [0u8; 4]
    )));
    assert!(inval(apply(
        c,
        Mswap,
        dt,
        &mut [0u8; 4],
        &four,
        &four,
        &mut []
    )));
    // A complex element is whole only with both parts.
    let dc = AtomicDatatype::DoubleComplex;
    assert!(inval(apply(
        w,
        Sum,
        dc,
        &mut [0u8; 8],
        &[0u8; 8],
        &[],
        &mut []
    )));
    // ATOMIC_READ takes no operand, or ignores one of the right length.
    let mut t = 9u32.to_ne_bytes();
    let mut old = [0u8; 4];
    apply(f, AtomicRead, dt, &mut t, &[], &[], &mut old).unwrap();
    assert_eq!(u32::from_ne_bytes(old), 9);
    apply(
        f,
        AtomicRead,
        dt,
        &mut t,
        &5u32.to_ne_bytes(),
        &[],
        &mut old,
    )
    .unwrap();
    assert_eq!((u32::from_ne_bytes(t), u32::from_ne_bytes(old)), (9, 9));
    assert!(inval(apply(
        f,
        AtomicRead,
        dt,
        &mut t,
        &[0u8; 2],
        &[],
        &mut old
    )));
}

#[test]
fn misaligned_buffers_give_the_aligned_result() {
    let vals: Vec<u64> = vec![1, u64::MAX, 1 << 40];
    let ops: Vec<u64> = vec![2, 3, 1 << 41];
    let aligned_target = enc(&vals);
    let operand = enc(&ops);
    for shift in 1..8 {
        let mut t = vec![0xEEu8; shift + 24];
        t[shift..].copy_from_slice(&aligned_target);
        let mut s = vec![0u8; shift + 24];
        s[shift..].copy_from_slice(&operand);
        let mut old = vec![0u8; 24 + shift];
        let (dt, k) = (AtomicDatatype::Uint64, AtomicKind::Fetch);
        apply(
            k,
            Sum,
            dt,
            &mut t[shift..],
            &s[shift..],
            &[],
            &mut old[shift..],
        )
        .unwrap();
        assert!(
            t[..shift].iter().all(|&b| b == 0xEE),
            "bytes before the region untouched"
        );
        assert_eq!(&t[shift..], &enc(&[3u64, 2, 3 << 40])[..]);
        assert_eq!(&old[shift..], &aligned_target[..]);
    }
}

#[test]
fn semantics_spot_checks() {
    let (w, c) = (AtomicKind::Write, AtomicKind::Compare);
    let run = |kind, op, dt, d: Vec<u8>, s: Vec<u8>, cmp: Vec<u8>| {
        let mut t = d;
        let mut old = if kind == w { vec![] } else { vec![0; t.len()] };
        apply(kind, op, dt, &mut t, &s, &cmp, &mut old).unwrap();
        t
    };
    let i32b = |v: i32| v.to_ne_bytes().to_vec();
    let dt = AtomicDatatype::Int32;
    // Compare value on the left: CSWAP_LT swaps when c < d.
    assert_eq!(run(c, CswapLt, dt, i32b(2), i32b(7), i32b(1)), i32b(7));
    assert_eq!(run(c, CswapLt, dt, i32b(1), i32b(7), i32b(2)), i32b(1));
    assert_eq!(run(c, CswapGt, dt, i32b(1), i32b(7), i32b(2)), i32b(7));
    // Wrapping arithmetic, logical ops store 1/0.
    assert_eq!(
        run(w, Sum, dt, i32b(i32::MAX), i32b(1), vec![]),
        i32b(i32::MIN)
    );
    assert_eq!(run(w, Lxor, dt, i32b(5), i32b(0), vec![]), i32b(1));
    assert_eq!(run(w, Land, dt, i32b(5), i32b(-3), vec![]), i32b(1));
    assert_eq!(run(w, Lor, dt, i32b(0), i32b(0), vec![]), i32b(0));
    // MSWAP takes the operand's bits where the mask is set.
    assert_eq!(
        run(c, Mswap, dt, i32b(0x0F0F), i32b(0x3333), i32b(0x00FF)),
        i32b(0x0F33)
    );
    // MIN keeps a NaN target (d > s is false); MAX replaces nothing with NaN.
    let f = AtomicDatatype::Double;
    let nan = f64::NAN.to_ne_bytes().to_vec();
    assert!(f64::from_ne_bytes(
        run(w, Min, f, nan.clone(), 1f64.to_ne_bytes().to_vec(), vec![])
            .try_into()
            .unwrap()
    )
    .is_nan());
    assert_eq!(
        run(w, Max, f, 1f64.to_ne_bytes().to_vec(), nan, vec![]),
        1f64.to_ne_bytes().to_vec()
    );
    // Complex product (1+2i)(3+4i) = -5+10i; CSWAP compares both parts.
    let cf = AtomicDatatype::FloatComplex;
    assert_eq!(
        run(w, Prod, cf, enc(&[1f32, 2.]), enc(&[3f32, 4.]), vec![]),
        enc(&[-5f32, 10.])
    );
    assert_eq!(
        run(
            c,
            Cswap,
            cf,
            enc(&[1f32, 2.]),
            enc(&[9f32, 9.]),
            enc(&[1f32, 3.])
        ),
        enc(&[1f32, 2.])
    );
    assert_eq!(
        run(
            c,
            CswapNe,
            cf,
            enc(&[1f32, 2.]),
            enc(&[9f32, 9.]),
            enc(&[1f32, 3.])
        ),
        enc(&[9f32, 9.])
    );
}

/// The contract the transport keeps: `apply` under one lock per region
/// makes concurrent fetch-adds exact — every old value is seen once.
#[test]
fn serialised_by_a_region_lock_fetch_add_is_exact() {
    use std::sync::{Arc, Mutex};
    const THREADS: u64 = 4;
    const EACH: u64 = 500;
    let region = Arc::new(Mutex::new(vec![0u8; 8]));
    let seen: Vec<Vec<u64>> = (0..THREADS)
        .map(|_| {
            let region = Arc::clone(&region);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for _ in 0..EACH {
                    let mut old = [0u8; 8];
                    let mut mem = region.lock().unwrap();
                    apply(
                        AtomicKind::Fetch,
                        Sum,
                        AtomicDatatype::Uint64,
                        &mut mem,
                        &1u64.to_ne_bytes(),
                        &[],
                        &mut old,
                    )
                    .unwrap();
                    drop(mem);
                    seen.push(u64::from_ne_bytes(old));
                }
                seen
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let mut all: Vec<u64> = seen.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (0..THREADS * EACH).collect::<Vec<_>>());
    let fin = region.lock().unwrap();
    assert_eq!(
        u64::from_ne_bytes(fin[..].try_into().unwrap()),
        THREADS * EACH
    );
}
