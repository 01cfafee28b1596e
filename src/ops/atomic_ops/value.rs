//! [`AtomicValue`]: the Rust types an atomic element can be, each with its
//! `fi_datatype` and its native-endian bytes, for the typed helpers
//! (`typed.rs`).
//!
//! The ten types are the datatypes of the op x datatype table that have
//! an exact Rust counterpart: `i8` ... `u64`, `f32` and `f64`. The complex
//! datatypes stay on the byte-level calls (Rust has no standard complex
//! type, and a pair such as `[f32; 2]` would read as two elements); the
//! long-double ones are not carried at all.

use crate::ops::atomic::AtomicDatatype;

mod sealed {
    /// Keeps [`AtomicValue`](super::AtomicValue) to the types of this file:
    /// the wire carries only the datatypes the table knows.
    pub trait Sealed {}
}

/// A Rust type that is one atomic element: its [`AtomicDatatype`] and its
/// conversion to and from the native-endian bytes the target computes on.
/// Implemented for `i8`, `u8`, `i16`, `u16`, `i32`, `u32`, `i64`, `u64`,
/// `f32` and `f64`; sealed (the wire carries only `fi_datatype` values).
///
/// ```
/// use psmrail::ops::atomic::{AtomicDatatype, AtomicValue};
/// assert_eq!(<u64 as AtomicValue>::DATATYPE, AtomicDatatype::Uint64);
/// assert_eq!(<f32 as AtomicValue>::DATATYPE, AtomicDatatype::Float);
/// let bytes = f64::slice_to_ne_bytes(&[1.5, -2.0]);
/// assert_eq!(bytes.len(), 2 * AtomicDatatype::Double.size());
/// assert_eq!(f64::vec_from_ne_bytes(&bytes), Some(vec![1.5, -2.0]));
/// ```
pub trait AtomicValue:
    sealed::Sealed + Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// The `fi_datatype` of this type (its size is `size_of::<Self>()`).
    ///
    /// ```
    /// use psmrail::ops::atomic::{AtomicDatatype, AtomicValue};
    /// assert_eq!(<i16 as AtomicValue>::DATATYPE, AtomicDatatype::Int16);
    /// assert_eq!(<i16 as AtomicValue>::DATATYPE.size(), 2);
    /// ```
    const DATATYPE: AtomicDatatype;

    /// Appends the value's native-endian bytes to `out`.
    ///
    /// ```
    /// use psmrail::ops::atomic::AtomicValue;
    /// let mut out = vec![0xaa];
    /// 0x0102u16.append_ne_bytes(&mut out);
    /// assert_eq!(out, [&[0xaa][..], &0x0102u16.to_ne_bytes()].concat());
    /// ```
    fn append_ne_bytes(self, out: &mut Vec<u8>);

    /// The value whose native-endian bytes are `bytes`; `None` unless
    /// `bytes` is exactly one element long.
    ///
    /// ```
    /// use psmrail::ops::atomic::AtomicValue;
    /// assert_eq!(i32::from_ne_slice(&(-7i32).to_ne_bytes()), Some(-7));
    /// assert_eq!(i32::from_ne_slice(&[0u8; 3]), None);
    /// ```
    fn from_ne_slice(bytes: &[u8]) -> Option<Self>;

    /// The native-endian bytes of `values`, one element after another (the
    /// operand or compare bytes of a byte-level call).
    ///
    /// ```
    /// use psmrail::ops::atomic::AtomicValue;
    /// assert_eq!(u8::slice_to_ne_bytes(&[1, 2, 3]), [1, 2, 3]);
    /// assert!(u64::slice_to_ne_bytes(&[]).is_empty());
    /// ```
    fn slice_to_ne_bytes(values: &[Self]) -> Vec<u8> {
        let mut out = Vec::with_capacity(std::mem::size_of_val(values));
        for &v in values {
            v.append_ne_bytes(&mut out);
        }
        out
    }

    /// The elements whose native-endian bytes are `bytes` (the result of a
    /// byte-level fetch or compare call); `None` unless `bytes` is a whole
    /// number of elements.
    ///
    /// ```
    /// use psmrail::ops::atomic::AtomicValue;
    /// let bytes = [3u32.to_ne_bytes(), 4u32.to_ne_bytes()].concat();
    /// assert_eq!(u32::vec_from_ne_bytes(&bytes), Some(vec![3, 4]));
    /// assert_eq!(u32::vec_from_ne_bytes(&bytes[..7]), None);
    /// ```
    fn vec_from_ne_bytes(bytes: &[u8]) -> Option<Vec<Self>> {
        let size = Self::DATATYPE.size();
        if bytes.len() % size != 0 {
            return None;
        }
        bytes.chunks_exact(size).map(Self::from_ne_slice).collect()
    }
}

macro_rules! atomic_value {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}

        impl AtomicValue for $t {
            const DATATYPE: AtomicDatatype = AtomicDatatype::$dt;

            fn append_ne_bytes(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }

            fn from_ne_slice(bytes: &[u8]) -> Option<Self> {
                bytes.try_into().ok().map(<$t>::from_ne_bytes)
            }
        }
    )*};
}

atomic_value! {
    i8 => Int8,
    u8 => Uint8,
    i16 => Int16,
    u16 => Uint16,
    i32 => Int32,
    u32 => Uint32,
    i64 => Int64,
    u64 => Uint64,
    f32 => Float,
    f64 => Double,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `DATATYPE` matches the type's size, and a value survives the round
    /// trip through its bytes, which are the type's own `to_ne_bytes`.
    fn round_trip<T: AtomicValue>(values: &[T], ne: impl Fn(T) -> Vec<u8>) {
        assert_eq!(
            T::DATATYPE.size(),
            std::mem::size_of::<T>(),
            "{:?}",
            T::DATATYPE
        );
        for &v in values {
            let mut bytes = Vec::new();
            v.append_ne_bytes(&mut bytes);
            assert_eq!(bytes, ne(v), "{v:?}");
            let back = T::from_ne_slice(&bytes).expect("one element");
            // Bitwise, so that NaN and -0.0 count too.
            assert_eq!(ne(back), ne(v), "{v:?}");
        }
        let all = T::slice_to_ne_bytes(values);
        assert_eq!(all, values.iter().flat_map(|&v| ne(v)).collect::<Vec<u8>>());
        let back = T::vec_from_ne_bytes(&all).expect("whole elements");
        assert_eq!(back.len(), values.len());
        for (b, v) in back.iter().zip(values) {
            assert_eq!(ne(*b), ne(*v));
        }
    }

    #[test]
    fn every_type_round_trips_through_its_native_bytes() {
        round_trip(&[0, 1, -1, i8::MIN, i8::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, 1, u8::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, -2, i16::MIN, i16::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, 0x1234, u16::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, -3, i32::MIN, i32::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, 0xdead_beef, u32::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, -4, i64::MIN, i64::MAX], |v| v.to_ne_bytes().to_vec());
        round_trip(&[0, 0x0102_0304_0506_0708, u64::MAX], |v| {
            v.to_ne_bytes().to_vec()
        });
        let f32s = [0.0, -0.0, 1.5, f32::MIN_POSITIVE, f32::INFINITY, f32::NAN];
        round_trip(&f32s, |v| v.to_ne_bytes().to_vec());
        let f64s = [0.0, -0.0, -2.25, f64::MAX, f64::NEG_INFINITY, f64::NAN];
        round_trip(&f64s, |v| v.to_ne_bytes().to_vec());
    }

    #[test]
    fn datatypes_are_the_tables_own() {
        assert_eq!(i8::DATATYPE, AtomicDatatype::Int8);
        assert_eq!(u8::DATATYPE, AtomicDatatype::Uint8);
        assert_eq!(i16::DATATYPE, AtomicDatatype::Int16);
        assert_eq!(u16::DATATYPE, AtomicDatatype::Uint16);
        assert_eq!(i32::DATATYPE, AtomicDatatype::Int32);
        assert_eq!(u32::DATATYPE, AtomicDatatype::Uint32);
        assert_eq!(i64::DATATYPE, AtomicDatatype::Int64);
        assert_eq!(u64::DATATYPE, AtomicDatatype::Uint64);
        assert_eq!(f32::DATATYPE, AtomicDatatype::Float);
        assert_eq!(f64::DATATYPE, AtomicDatatype::Double);
    }

    #[test]
    fn wrong_lengths_are_none() {
        assert_eq!(u64::from_ne_slice(&[0u8; 7]), None);
        assert_eq!(u64::from_ne_slice(&[0u8; 9]), None);
        assert_eq!(u64::from_ne_slice(&[]), None);
        assert_eq!(i16::vec_from_ne_bytes(&[1, 2, 3]), None);
        assert_eq!(f32::vec_from_ne_bytes(&[]), Some(vec![]));
        assert_eq!(u8::vec_from_ne_bytes(&[9]), Some(vec![9]));
    }

    /// The bytes are what the target's `apply` computes on: a sum through
    /// the typed conversions equals the sum of the values.
    #[test]
    fn the_bytes_are_what_apply_computes_on() {
        use crate::ops::atomic::{apply, AtomicKind, AtomicOp};
        let mut target = i32::slice_to_ne_bytes(&[10, -10]);
        let operand = i32::slice_to_ne_bytes(&[5, 3]);
        let mut old = vec![0u8; 8];
        apply(
            AtomicKind::Fetch,
            AtomicOp::Sum,
            i32::DATATYPE,
            &mut target,
            &operand,
            &[],
            &mut old,
        )
        .unwrap();
        assert_eq!(i32::vec_from_ne_bytes(&target), Some(vec![15, -7]));
        assert_eq!(i32::vec_from_ne_bytes(&old), Some(vec![10, -10]));
    }
}
