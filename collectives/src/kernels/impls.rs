//! [`Element`] for every Rust element type: byte views (bytemuck for the padding-free types),
//! byte encoding, and the built-in kernel of each type class.

use half::{bf16, f16};

use super::lanes::{self, array, zip};
use super::TILE;
use crate::datatype::{sealed::Sealed, Complex, Datatype, Element, ValueIndex};
use crate::error::Result;
use crate::op::ReduceOp;

fn unsupported<T: Element>(op: &ReduceOp) -> crate::error::Error {
    op.error(T::DATATYPE, "no built-in kernel for this combination".to_owned())
}

/// Byte access for padding-free types, through bytemuck (zero-copy when aligned).
macro_rules! pod_io {
    () => {
        fn view(bytes: &[u8]) -> Option<&[Self]> {
            bytemuck::try_cast_slice(bytes).ok()
        }

        fn view_mut(bytes: &mut [u8]) -> Option<&mut [Self]> {
            bytemuck::try_cast_slice_mut(bytes).ok()
        }

        fn as_bytes(vals: &[Self]) -> Option<&[u8]> {
            Some(bytemuck::cast_slice(vals))
        }

        fn as_bytes_mut(vals: &mut [Self]) -> Option<&mut [u8]> {
            Some(bytemuck::cast_slice_mut(vals))
        }

        fn load(bytes: &[u8], out: &mut [Self]) {
            bytemuck::cast_slice_mut::<Self, u8>(out).copy_from_slice(bytes);
        }

        fn store(vals: &[Self], out: &mut [u8]) {
            out.copy_from_slice(bytemuck::cast_slice(vals));
        }
    };
}

/// The integer ops as `$zip(src, dst, f)` calls (`$zip` = over slices or over source bytes).
macro_rules! int_ops {
    ($op:expr, $zip:path, $src:expr, $dst:expr) => {{
        match $op {
            ReduceOp::Sum => $zip($src, $dst, |a: Self, b: Self| a.wrapping_add(b)),
            ReduceOp::Prod => $zip($src, $dst, |a: Self, b: Self| a.wrapping_mul(b)),
            ReduceOp::Min => $zip($src, $dst, |a: Self, b: Self| a.min(b)),
            ReduceOp::Max => $zip($src, $dst, |a: Self, b: Self| a.max(b)),
            ReduceOp::Band => $zip($src, $dst, |a: Self, b: Self| a & b),
            ReduceOp::Bor => $zip($src, $dst, |a: Self, b: Self| a | b),
            ReduceOp::Bxor => $zip($src, $dst, |a: Self, b: Self| a ^ b),
            ReduceOp::Land => $zip($src, $dst, |a: Self, b: Self| Self::from((a != 0) & (b != 0))),
            ReduceOp::Lor => $zip($src, $dst, |a: Self, b: Self| Self::from((a != 0) | (b != 0))),
            ReduceOp::Lxor => $zip($src, $dst, |a: Self, b: Self| Self::from((a != 0) ^ (b != 0))),
            _ => return Err(unsupported::<Self>($op)),
        }
        Ok(())
    }};
}

macro_rules! int_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Element for $t {
            const DATATYPE: Datatype = Datatype::$d;
        }

        impl Sealed for $t {
            const ZERO: Self = 0;

            pod_io!();

            fn apply(op: &ReduceOp, src: &[Self], dst: &mut [Self]) -> Result<()> {
                int_ops!(op, zip, src, dst)
            }

            fn apply_src_bytes(op: &ReduceOp, src: &[u8], dst: &mut [Self]) -> Result<()> {
                int_ops!(op, lanes::zip_bytes, src, dst)
            }
        }
    )*};
}

int_element!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

/// The float ops as `$zip(src, dst, f)` calls, computing in `$w` (the type or f32 for halves).
macro_rules! float_ops {
    ($op:expr, $zip:path, $src:expr, $dst:expr, $w:ty, $min:path, $max:path) => {{
        match $op {
            ReduceOp::Sum => $zip($src, $dst, |a: $w, b: $w| a + b),
            ReduceOp::Prod => $zip($src, $dst, |a: $w, b: $w| a * b),
            ReduceOp::Min => $zip($src, $dst, $min),
            ReduceOp::Max => $zip($src, $dst, $max),
            _ => return Err(unsupported::<Self>($op)),
        }
        Ok(())
    }};
}

macro_rules! float_element {
    ($($t:ty => $d:ident, $min:path, $max:path);* $(;)?) => {$(
        impl Element for $t {
            const DATATYPE: Datatype = Datatype::$d;
        }

        impl Sealed for $t {
            const ZERO: Self = 0.0;

            pod_io!();

            fn apply(op: &ReduceOp, src: &[Self], dst: &mut [Self]) -> Result<()> {
                float_ops!(op, zip, src, dst, $t, $min, $max)
            }

            fn apply_src_bytes(op: &ReduceOp, src: &[u8], dst: &mut [Self]) -> Result<()> {
                float_ops!(op, lanes::zip_bytes, src, dst, $t, $min, $max)
            }
        }
    )*};
}

float_element!(
    f32 => F32, lanes::minimum_f32, lanes::maximum_f32;
    f64 => F64, lanes::minimum_f64, lanes::maximum_f64;
);

macro_rules! half_element {
    ($($t:ty => $d:ident, $zip:path, $zipb:path);* $(;)?) => {$(
        impl Element for $t {
            const DATATYPE: Datatype = Datatype::$d;
        }

        impl Sealed for $t {
            const ZERO: Self = <$t>::ZERO;

            pod_io!();

            fn apply(op: &ReduceOp, src: &[Self], dst: &mut [Self]) -> Result<()> {
                float_ops!(op, $zip, src, dst, f32, lanes::minimum_f32, lanes::maximum_f32)
            }

            fn apply_src_bytes(op: &ReduceOp, src: &[u8], dst: &mut [Self]) -> Result<()> {
                float_ops!(op, $zipb, src, dst, f32, lanes::minimum_f32, lanes::maximum_f32)
            }
        }
    )*};
}

half_element!(
    f16 => F16, lanes::zip_f16, lanes::zip_f16_bytes;
    bf16 => BF16, lanes::zip_bf16, lanes::zip_bf16_bytes;
);

/// No byte views, for types encoded field by field (padded pairs; complex numbers, which bytemuck
/// cannot vouch for as a generic struct): a source in bytes is decoded into an aligned stack tile
/// first.
macro_rules! encoded_io {
    () => {
        fn view(_: &[u8]) -> Option<&[Self]> {
            None
        }

        fn view_mut(_: &mut [u8]) -> Option<&mut [Self]> {
            None
        }

        fn as_bytes(_: &[Self]) -> Option<&[u8]> {
            None
        }

        fn as_bytes_mut(_: &mut [Self]) -> Option<&mut [u8]> {
            None
        }

        fn apply_src_bytes(op: &ReduceOp, src: &[u8], dst: &mut [Self]) -> Result<()> {
            let mut ts = [Self::ZERO; TILE];
            for (sb, d) in src.chunks(TILE * std::mem::size_of::<Self>()).zip(dst.chunks_mut(TILE)) {
                let s = &mut ts[..d.len()];
                Self::load(sb, s);
                Self::apply(op, s, d)?;
            }
            Ok(())
        }
    };
}

macro_rules! pair_element {
    ($($v:ty, $i:ty => $d:ident);* $(;)?) => {$(
        impl Element for ValueIndex<$v, $i> {
            const DATATYPE: Datatype = Datatype::$d;
        }

        /// Pairs are always encoded field by field (`F64I32` has padding, so no byte views).
        impl Sealed for ValueIndex<$v, $i> {
            const ZERO: Self = ValueIndex { value: 0 as $v, index: 0 };

            encoded_io!();

            fn load(bytes: &[u8], out: &mut [Self]) {
                const V: usize = std::mem::size_of::<$v>();
                const I: usize = std::mem::size_of::<$i>();
                for (c, o) in bytes.chunks_exact(std::mem::size_of::<Self>()).zip(out) {
                    o.value = <$v>::from_ne_bytes(array::<V>(c));
                    o.index = <$i>::from_ne_bytes(array::<I>(&c[V..]));
                }
            }

            fn store(vals: &[Self], out: &mut [u8]) {
                const V: usize = std::mem::size_of::<$v>();
                const I: usize = std::mem::size_of::<$i>();
                for (v, c) in vals.iter().zip(out.chunks_exact_mut(std::mem::size_of::<Self>())) {
                    c[..V].copy_from_slice(&v.value.to_ne_bytes());
                    c[V..V + I].copy_from_slice(&v.index.to_ne_bytes());
                }
            }

            fn apply(op: &ReduceOp, src: &[Self], dst: &mut [Self]) -> Result<()> {
                match op {
                    ReduceOp::Minloc => zip(src, dst, lanes::minloc),
                    ReduceOp::Maxloc => zip(src, dst, lanes::maxloc),
                    _ => return Err(unsupported::<Self>(op)),
                }
                Ok(())
            }
        }
    )*};
}

pair_element!(
    f32, i32 => F32I32;
    f64, i32 => F64I32;
    i32, i32 => I32I32;
    i64, i64 => I64I64;
);

macro_rules! complex_element {
    ($($p:ty => $d:ident);* $(;)?) => {$(
        impl Element for Complex<$p> {
            const DATATYPE: Datatype = Datatype::$d;
        }

        /// Encoded part by part (a sum's byte kernel works on the parts instead, `kernels::complex`).
        impl Sealed for Complex<$p> {
            const ZERO: Self = Complex { re: 0.0, im: 0.0 };

            encoded_io!();

            fn load(bytes: &[u8], out: &mut [Self]) {
                const P: usize = std::mem::size_of::<$p>();
                for (c, o) in bytes.chunks_exact(2 * P).zip(out) {
                    o.re = <$p>::from_ne_bytes(array::<P>(c));
                    o.im = <$p>::from_ne_bytes(array::<P>(&c[P..]));
                }
            }

            fn store(vals: &[Self], out: &mut [u8]) {
                const P: usize = std::mem::size_of::<$p>();
                for (v, c) in vals.iter().zip(out.chunks_exact_mut(2 * P)) {
                    c[..P].copy_from_slice(&v.re.to_ne_bytes());
                    c[P..].copy_from_slice(&v.im.to_ne_bytes());
                }
            }

            fn apply(op: &ReduceOp, src: &[Self], dst: &mut [Self]) -> Result<()> {
                match op {
                    ReduceOp::Sum => zip(src, dst, |a: Self, b: Self| Complex { re: a.re + b.re, im: a.im + b.im }),
                    ReduceOp::Prod => zip(src, dst, lanes::complex_product),
                    _ => return Err(unsupported::<Self>(op)),
                }
                Ok(())
            }
        }
    )*};
}

complex_element!(
    f32 => C64;
    f64 => C128;
);
