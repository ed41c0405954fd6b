//! Element types of reductions: the [`Datatype`] tag the executor carries with raw bytes, and the
//! sealed [`Element`] trait mapping Rust types (`i8`…`u64`, `f16`, `bf16`, `f32`, `f64`,
//! [`ValueIndex`] pairs, [`Complex`] numbers) to their tag, so typed APIs can take `&[T]`.
//!
//! Wire layout is the native one (native endianness, C layout): a pair type is the `#[repr(C)]`
//! struct `{ value, index }`, padding included in its size (`F64I32` is 16 bytes, like MPI's
//! `MPI_DOUBLE_INT` on 64-bit targets). Kernels never read or write padding bytes. A complex
//! number is `{ re, im }`, C99's `float _Complex` / `double _Complex` layout (numpy's and torch's
//! complex64 / complex128).

use std::fmt;

use crate::error::{Error, Result};

/// The element type of a buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Datatype {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    /// IEEE 754 binary16 (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`): f32's exponent, 8-bit significand.
    BF16,
    F32,
    F64,
    /// `ValueIndex<f32, i32>` (MPI_FLOAT_INT), for minloc/maxloc.
    F32I32,
    /// `ValueIndex<f64, i32>` (MPI_DOUBLE_INT), 16 bytes with 4 bytes of padding.
    F64I32,
    /// `ValueIndex<i32, i32>` (MPI_2INT).
    I32I32,
    /// `ValueIndex<i64, i64>` (MPI_LONG_INT on LP64 with a long index).
    I64I64,
    /// `Complex<f32>` (MPI_C_FLOAT_COMPLEX, numpy's complex64), 8 bytes.
    C64,
    /// `Complex<f64>` (MPI_C_DOUBLE_COMPLEX, numpy's complex128), 16 bytes.
    C128,
}

/// What kind of values a datatype holds (decides which ops apply).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Signed or unsigned two's-complement integers.
    Integer,
    /// IEEE-style floating point (f16, bf16, f32, f64).
    Float,
    /// (value, index) pairs for minloc/maxloc.
    Pair,
    /// Complex numbers (sum and prod, as MPI defines on them).
    Complex,
}

impl Datatype {
    /// Every datatype, in declaration order.
    pub const ALL: [Datatype; 18] = [
        Datatype::I8,
        Datatype::I16,
        Datatype::I32,
        Datatype::I64,
        Datatype::U8,
        Datatype::U16,
        Datatype::U32,
        Datatype::U64,
        Datatype::F16,
        Datatype::BF16,
        Datatype::F32,
        Datatype::F64,
        Datatype::F32I32,
        Datatype::F64I32,
        Datatype::I32I32,
        Datatype::I64I64,
        Datatype::C64,
        Datatype::C128,
    ];

    /// Bytes per element (pair types include their padding).
    pub const fn size(self) -> usize {
        match self {
            Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 | Datatype::F16 | Datatype::BF16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 => 8,
            Datatype::F32I32 | Datatype::I32I32 | Datatype::C64 => 8,
            Datatype::F64I32 | Datatype::I64I64 | Datatype::C128 => 16,
        }
    }

    /// The alignment of an element: its size for the primitives, its widest field's for pairs
    /// and its parts' for complex numbers (the C layout's).
    pub const fn align(self) -> usize {
        match self {
            Datatype::F32I32 | Datatype::I32I32 => 4,
            Datatype::F64I32 | Datatype::I64I64 => 8,
            Datatype::C64 => 4,
            Datatype::C128 => 8,
            d => d.size(),
        }
    }

    /// The canonical lower-case name (`"i32"`, `"bf16"`, `"f64_i32"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Datatype::I8 => "i8",
            Datatype::I16 => "i16",
            Datatype::I32 => "i32",
            Datatype::I64 => "i64",
            Datatype::U8 => "u8",
            Datatype::U16 => "u16",
            Datatype::U32 => "u32",
            Datatype::U64 => "u64",
            Datatype::F16 => "f16",
            Datatype::BF16 => "bf16",
            Datatype::F32 => "f32",
            Datatype::F64 => "f64",
            Datatype::F32I32 => "f32_i32",
            Datatype::F64I32 => "f64_i32",
            Datatype::I32I32 => "i32_i32",
            Datatype::I64I64 => "i64_i64",
            Datatype::C64 => "c64",
            Datatype::C128 => "c128",
        }
    }

    /// Parses a canonical name (case-insensitive); also accepts the MPI names `float_int`,
    /// `double_int`, `2int`, `long_int`, `c_float_complex` and `c_double_complex`, and numpy's
    /// `complex64` and `complex128`.
    pub fn from_name(name: &str) -> Result<Datatype> {
        let lower = name.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "float_int" => Some(Datatype::F32I32),
            "double_int" => Some(Datatype::F64I32),
            "2int" => Some(Datatype::I32I32),
            "long_int" => Some(Datatype::I64I64),
            "c_float_complex" | "complex64" => Some(Datatype::C64),
            "c_double_complex" | "complex128" => Some(Datatype::C128),
            _ => None,
        };
        alias.or_else(|| Datatype::ALL.into_iter().find(|d| d.name() == lower)).ok_or_else(|| Error::UnknownName {
            kind: "datatype",
            name: name.to_owned(),
            known: Datatype::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
        })
    }

    pub const fn class(self) -> Class {
        match self {
            Datatype::I8
            | Datatype::I16
            | Datatype::I32
            | Datatype::I64
            | Datatype::U8
            | Datatype::U16
            | Datatype::U32
            | Datatype::U64 => Class::Integer,
            Datatype::F16 | Datatype::BF16 | Datatype::F32 | Datatype::F64 => Class::Float,
            Datatype::F32I32 | Datatype::F64I32 | Datatype::I32I32 | Datatype::I64I64 => Class::Pair,
            Datatype::C64 | Datatype::C128 => Class::Complex,
        }
    }

    pub const fn is_integer(self) -> bool {
        matches!(self.class(), Class::Integer)
    }

    pub const fn is_float(self) -> bool {
        matches!(self.class(), Class::Float)
    }

    pub const fn is_pair(self) -> bool {
        matches!(self.class(), Class::Pair)
    }

    pub const fn is_complex(self) -> bool {
        matches!(self.class(), Class::Complex)
    }
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Datatype {
    type Err = Error;

    fn from_str(s: &str) -> Result<Datatype> {
        Datatype::from_name(s)
    }
}

/// A (value, index) pair for minloc/maxloc, laid out as the C struct `{ value; index; }`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct ValueIndex<V, I> {
    pub value: V,
    pub index: I,
}

impl<V, I> ValueIndex<V, I> {
    pub const fn new(value: V, index: I) -> Self {
        ValueIndex { value, index }
    }
}

/// A complex number `re + im·i`, laid out as C99's `_Complex` types (`{ re, im }`). Reductions
/// define sum and prod on it (MPI's rule); prod is `(a·c − b·d) + (a·d + b·c)i`, rounded part by
/// part, with no special cases for infinities (C's Annex G is not followed).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

impl<T> Complex<T> {
    pub const fn new(re: T, im: T) -> Self {
        Complex { re, im }
    }
}

/// A Rust type that is one of the [`Datatype`]s. Sealed: implemented for `i8`, `i16`, `i32`,
/// `i64`, `u8`, `u16`, `u32`, `u64`, `half::f16`, `half::bf16`, `f32`, `f64` and the pairs
/// `ValueIndex<f32, i32>`, `ValueIndex<f64, i32>`, `ValueIndex<i32, i32>`, `ValueIndex<i64, i64>`
/// and the complex numbers `Complex<f32>`, `Complex<f64>`.
/// `size_of::<T>() == T::DATATYPE.size()`.
pub trait Element: Copy + Send + Sync + fmt::Debug + PartialEq + 'static + sealed::Sealed {
    const DATATYPE: Datatype;
}

pub(crate) mod sealed {
    use crate::error::Result;
    use crate::op::ReduceOp;

    /// The byte-level and kernel hooks of an [`Element`](super::Element); implemented in
    /// `kernels`.
    pub trait Sealed: Sized + Copy {
        /// A value to initialise stack tiles with.
        const ZERO: Self;
        /// `bytes` as elements without copying, if aligned (always `None` for padded pairs).
        fn view(bytes: &[u8]) -> Option<&[Self]>;
        /// Mutable variant of [`Sealed::view`].
        fn view_mut(bytes: &mut [u8]) -> Option<&mut [Self]>;
        /// Elements as bytes without copying, if they have no padding.
        fn as_bytes(vals: &[Self]) -> Option<&[u8]>;
        /// Mutable variant of [`Sealed::as_bytes`].
        fn as_bytes_mut(vals: &mut [Self]) -> Option<&mut [u8]>;
        /// Decodes `out.len()` elements from `bytes` (exactly `out.len() * size` bytes, any
        /// alignment).
        fn load(bytes: &[u8], out: &mut [Self]);
        /// Encodes `vals` into `out` (exactly `vals.len() * size` bytes); padding is left as is.
        fn store(vals: &[Self], out: &mut [u8]);
        /// The built-in kernel: `dst[i] ← src[i] ⊕ dst[i]` (built-ins are commutative). Errs on
        /// an op that is not defined on this type (callers check first) or a user op.
        fn apply(op: &ReduceOp, src: &[Self], dst: &mut [Self]) -> Result<()>;
        /// [`Sealed::apply`] with `src` as the raw bytes (any alignment) of `dst.len()` elements.
        fn apply_src_bytes(op: &ReduceOp, src: &[u8], dst: &mut [Self]) -> Result<()>;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases() {
        for d in Datatype::ALL {
            assert_eq!(Datatype::from_name(d.name()).unwrap(), d);
            assert_eq!(Datatype::from_name(&d.name().to_uppercase()).unwrap(), d);
            assert_eq!(d.to_string(), d.name());
        }
        assert_eq!(Datatype::from_name("double_int").unwrap(), Datatype::F64I32);
        assert_eq!("2int".parse::<Datatype>().unwrap(), Datatype::I32I32);
        assert_eq!("C_DOUBLE_COMPLEX".parse::<Datatype>().unwrap(), Datatype::C128);
        assert_eq!("complex64".parse::<Datatype>().unwrap(), Datatype::C64);
        let e = Datatype::from_name("f128").unwrap_err().to_string();
        assert!(e.contains("f128") && e.contains("bf16"), "{e}");
    }

    #[test]
    fn classes_partition_all() {
        let (mut i, mut f, mut p, mut c) = (0, 0, 0, 0);
        for d in Datatype::ALL {
            match d.class() {
                Class::Integer => i += 1,
                Class::Float => f += 1,
                Class::Pair => p += 1,
                Class::Complex => c += 1,
            }
            assert_eq!(d.is_integer() as u8 + d.is_float() as u8 + d.is_pair() as u8 + d.is_complex() as u8, 1);
        }
        assert_eq!((i, f, p, c), (8, 4, 4, 2));
    }
}
