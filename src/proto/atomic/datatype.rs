//! The element types of an atomic (`fi_datatype`), and the classes the
//! operation table is written in (integer, floating point, complex).

use std::fmt;

use crate::{Error, ErrorKind, Result};

/// An atomic element type, numbered as libfabric's `enum fi_datatype`
/// (`FI_INT8` = 0 ... `FI_DOUBLE_COMPLEX` = 11), so the value travels on
/// the wire unchanged.
///
/// `FI_LONG_DOUBLE` (12) and `FI_LONG_DOUBLE_COMPLEX` (13) are not
/// supported: Rust has no portable `long double` (its size and format
/// differ between targets and C ABIs), so converting either value gives
/// `FI_EOPNOTSUPP` rather than a type that would compute wrongly.
///
/// ```
/// use psmrail::ops::atomic::AtomicDatatype;
/// use psmrail::ErrorKind;
/// assert_eq!(AtomicDatatype::try_from(9).unwrap(), AtomicDatatype::Double);
/// assert_eq!(AtomicDatatype::DoubleComplex.size(), 16);
/// assert_eq!(AtomicDatatype::try_from(12).unwrap_err().kind(), ErrorKind::OpNotSupp);
/// assert_eq!(AtomicDatatype::try_from(14).unwrap_err().kind(), ErrorKind::Inval);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AtomicDatatype {
    /// `FI_INT8`: `i8`.
    Int8 = 0,
    /// `FI_UINT8`: `u8`.
    Uint8 = 1,
    /// `FI_INT16`: `i16`.
    Int16 = 2,
    /// `FI_UINT16`: `u16`.
    Uint16 = 3,
    /// `FI_INT32`: `i32`.
    Int32 = 4,
    /// `FI_UINT32`: `u32`.
    Uint32 = 5,
    /// `FI_INT64`: `i64`.
    Int64 = 6,
    /// `FI_UINT64`: `u64`.
    Uint64 = 7,
    /// `FI_FLOAT`: `f32`.
    Float = 8,
    /// `FI_DOUBLE`: `f64`.
    Double = 9,
    /// `FI_FLOAT_COMPLEX`: C `float complex`, two `f32` (real, imaginary).
    FloatComplex = 10,
    /// `FI_DOUBLE_COMPLEX`: C `double complex`, two `f64` (real, imaginary).
    DoubleComplex = 11,
}

/// The class of a datatype, in which the op x datatype table
/// (`op_supports_datatype`) is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatatypeClass {
    /// `i8` ... `u64`.
    Integer,
    /// `f32`, `f64`.
    Float,
    /// Float and double complex.
    Complex,
}

impl AtomicDatatype {
    /// Every supported datatype, in `fi_datatype` order (index = wire value).
    pub const ALL: [AtomicDatatype; 12] = [
        AtomicDatatype::Int8,
        AtomicDatatype::Uint8,
        AtomicDatatype::Int16,
        AtomicDatatype::Uint16,
        AtomicDatatype::Int32,
        AtomicDatatype::Uint32,
        AtomicDatatype::Int64,
        AtomicDatatype::Uint64,
        AtomicDatatype::Float,
        AtomicDatatype::Double,
        AtomicDatatype::FloatComplex,
        AtomicDatatype::DoubleComplex,
    ];

    /// Bytes in one element (`fi_atomic_attr.size`).
    pub const fn size(self) -> usize {
        match self {
            AtomicDatatype::Int8 | AtomicDatatype::Uint8 => 1,
            AtomicDatatype::Int16 | AtomicDatatype::Uint16 => 2,
            AtomicDatatype::Int32 | AtomicDatatype::Uint32 | AtomicDatatype::Float => 4,
            AtomicDatatype::Int64
            | AtomicDatatype::Uint64
            | AtomicDatatype::Double
            | AtomicDatatype::FloatComplex => 8,
            AtomicDatatype::DoubleComplex => 16,
        }
    }

    /// The class the operation table uses for this datatype.
    pub const fn class(self) -> DatatypeClass {
        match self {
            AtomicDatatype::Float | AtomicDatatype::Double => DatatypeClass::Float,
            AtomicDatatype::FloatComplex | AtomicDatatype::DoubleComplex => DatatypeClass::Complex,
            _ => DatatypeClass::Integer,
        }
    }

    /// The libfabric constant name (`"FI_INT8"`, ...).
    pub const fn fi_name(self) -> &'static str {
        match self {
            AtomicDatatype::Int8 => "FI_INT8",
            AtomicDatatype::Uint8 => "FI_UINT8",
            AtomicDatatype::Int16 => "FI_INT16",
            AtomicDatatype::Uint16 => "FI_UINT16",
            AtomicDatatype::Int32 => "FI_INT32",
            AtomicDatatype::Uint32 => "FI_UINT32",
            AtomicDatatype::Int64 => "FI_INT64",
            AtomicDatatype::Uint64 => "FI_UINT64",
            AtomicDatatype::Float => "FI_FLOAT",
            AtomicDatatype::Double => "FI_DOUBLE",
            AtomicDatatype::FloatComplex => "FI_FLOAT_COMPLEX",
            AtomicDatatype::DoubleComplex => "FI_DOUBLE_COMPLEX",
        }
    }
}

impl fmt::Display for AtomicDatatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.fi_name())
    }
}

/// `FI_LONG_DOUBLE`, the first `fi_datatype` value psmrail does not carry.
const FI_LONG_DOUBLE: u32 = 12;
/// `FI_LONG_DOUBLE_COMPLEX`.
const FI_LONG_DOUBLE_COMPLEX: u32 = 13;

impl TryFrom<u32> for AtomicDatatype {
    type Error = Error;

    /// The datatype with `fi_datatype` value `v`. The two long-double
    /// types are `FI_EOPNOTSUPP` (valid libfabric values psmrail cannot
    /// compute with); values at or above `FI_DATATYPE_LAST` (14) are
    /// `FI_EINVAL`, as the C provider's initiator check.
    fn try_from(v: u32) -> Result<Self> {
        match v {
            FI_LONG_DOUBLE | FI_LONG_DOUBLE_COMPLEX => Err(Error::new(
                ErrorKind::OpNotSupp,
                format!(
                    "atomic datatype {} is not supported: Rust has no portable long double",
                    if v == FI_LONG_DOUBLE {
                        "FI_LONG_DOUBLE"
                    } else {
                        "FI_LONG_DOUBLE_COMPLEX"
                    }
                ),
            )),
            _ => usize::try_from(v)
                .ok()
                .and_then(|i| AtomicDatatype::ALL.get(i).copied())
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Inval,
                        format!("atomic datatype {v} is not an fi_datatype value (0..=13)"),
                    )
                }),
        }
    }
}
