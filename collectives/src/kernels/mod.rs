//! Reduction kernels: `dst ← src ⊕ dst` (or `dst ⊕ src`) element-wise on raw bytes, as the
//! executor's `Reduce` steps need, and on typed slices. Vectorized by LLVM (see `lanes`).
//!
//! Cost: one pass reading `src` and `dst` and writing `dst` (γ per byte of `dst`); see the
//! `kernels` bench for GB/s next to memcpy. Bytes may be unaligned: aligned buffers are viewed
//! in place (bytemuck), an unaligned source is read with unaligned loads, an unaligned
//! destination is staged through an aligned stack tile of [`TILE`] elements.
//! Built-in ops are commutative, so their kernels ignore [`Order`]; user ops honour it.

mod impls;
mod lanes;
#[cfg(test)]
mod tests;

use crate::datatype::{Datatype, Element};
use crate::error::Result;
use crate::op::ReduceOp;
use crate::schedule::Order;

/// Elements per aligned stack tile when the destination bytes are unaligned.
pub const TILE: usize = 512;

/// Combines `src` into `dst` element-wise: `dst ← src ⊕ dst` for [`Order::SrcFirst`] (src holds
/// the lower ranks' contribution), `dst ← dst ⊕ src` for [`Order::DstFirst`].
///
/// Errors (nothing is written): `op` not defined on `dtype` ([`ReduceOp::check`]), `src` and
/// `dst` of different lengths, or a length that is not a multiple of `dtype.size()`.
pub fn reduce(op: &ReduceOp, dtype: Datatype, src: &[u8], dst: &mut [u8], order: Order) -> Result<()> {
    op.check(dtype)?;
    check_lengths(op, dtype, src.len(), dst.len())?;
    if let ReduceOp::User(u) = op {
        return u.call(src, dst, dtype, order);
    }
    use crate::datatype::ValueIndex as P;
    use half::{bf16, f16};
    match dtype {
        Datatype::I8 => builtin::<i8>(op, src, dst),
        Datatype::I16 => builtin::<i16>(op, src, dst),
        Datatype::I32 => builtin::<i32>(op, src, dst),
        Datatype::I64 => builtin::<i64>(op, src, dst),
        Datatype::U8 => builtin::<u8>(op, src, dst),
        Datatype::U16 => builtin::<u16>(op, src, dst),
        Datatype::U32 => builtin::<u32>(op, src, dst),
        Datatype::U64 => builtin::<u64>(op, src, dst),
        Datatype::F16 => builtin::<f16>(op, src, dst),
        Datatype::BF16 => builtin::<bf16>(op, src, dst),
        Datatype::F32 => builtin::<f32>(op, src, dst),
        Datatype::F64 => builtin::<f64>(op, src, dst),
        Datatype::F32I32 => builtin::<P<f32, i32>>(op, src, dst),
        Datatype::F64I32 => builtin::<P<f64, i32>>(op, src, dst),
        Datatype::I32I32 => builtin::<P<i32, i32>>(op, src, dst),
        Datatype::I64I64 => builtin::<P<i64, i64>>(op, src, dst),
        Datatype::C64 => complex::<f32>(op, src, dst),
        Datatype::C128 => complex::<f64>(op, src, dst),
    }
}

/// Complex numbers on bytes: a sum is the float sum of their parts (the vectorized float kernel,
/// on aligned views where it can); a product goes through `Complex<P>`'s own kernel.
fn complex<P: Element>(op: &ReduceOp, src: &[u8], dst: &mut [u8]) -> Result<()>
where
    crate::datatype::Complex<P>: Element,
{
    match op {
        ReduceOp::Sum => builtin::<P>(op, src, dst),
        _ => builtin::<crate::datatype::Complex<P>>(op, src, dst),
    }
}

/// [`reduce`] on typed slices (same semantics and errors; lengths must be equal).
pub fn reduce_typed<T: Element>(op: &ReduceOp, src: &[T], dst: &mut [T], order: Order) -> Result<()> {
    let dtype = T::DATATYPE;
    op.check(dtype)?;
    let size = dtype.size();
    check_lengths(op, dtype, src.len() * size, dst.len() * size)?;
    let ReduceOp::User(u) = op else {
        return T::apply(op, src, dst);
    };
    if let (Some(s), Some(d)) = (T::as_bytes(src), T::as_bytes_mut(dst)) {
        return u.call(s, d, dtype, order);
    }
    // Padded pair types: encode, run, decode.
    let (mut s, mut d) = (vec![0u8; src.len() * size], vec![0u8; dst.len() * size]);
    T::store(src, &mut s);
    T::store(dst, &mut d);
    u.call(&s, &mut d, dtype, order)?;
    T::load(&d, dst);
    Ok(())
}

#[inline]
fn check_lengths(op: &ReduceOp, dtype: Datatype, src: usize, dst: usize) -> Result<()> {
    if src == dst && dst.is_multiple_of(dtype.size()) {
        return Ok(());
    }
    lengths_error(op, dtype, src, dst)
}

#[cold]
fn lengths_error(op: &ReduceOp, dtype: Datatype, src: usize, dst: usize) -> Result<()> {
    let size = dtype.size();
    if src != dst {
        return Err(op.error(dtype, format!("source is {src} bytes but destination is {dst} bytes")));
    }
    if dst.checked_rem(size) != Some(0) {
        return Err(op.error(dtype, format!("{dst} bytes is not a whole number of {size}-byte elements")));
    }
    Ok(())
}

/// A built-in op on bytes: typed views when aligned; an unaligned `src` is read in place with
/// unaligned loads; an unaligned `dst` is staged through an aligned stack tile.
fn builtin<T: Element>(op: &ReduceOp, src: &[u8], dst: &mut [u8]) -> Result<()> {
    if let Some(d) = T::view_mut(dst) {
        return match T::view(src) {
            Some(s) => T::apply(op, s, d),
            None => T::apply_src_bytes(op, src, d),
        };
    }
    let size = T::DATATYPE.size();
    let mut td = [T::ZERO; TILE];
    for (sb, db) in src.chunks(TILE * size).zip(dst.chunks_mut(TILE * size)) {
        let d = &mut td[..db.len() / size];
        T::load(db, d);
        T::apply_src_bytes(op, sb, d)?;
        T::store(d, db);
    }
    Ok(())
}

/// Runs a typed kernel `f(src, dst)` over byte slices holding whole elements of `T`: in place when
/// both are aligned (and `T` has no padding); with only `src` staged through an aligned stack tile
/// when just `dst` is aligned (the executor's usual case: a network slot into a user buffer); else
/// tile by tile for both.
pub(crate) fn on_bytes<T: Element>(
    src: &[u8],
    dst: &mut [u8],
    mut f: impl FnMut(&[T], &mut [T]) -> Result<()>,
) -> Result<()> {
    let size = T::DATATYPE.size();
    let mut ts = [T::ZERO; TILE];
    if let Some(d) = T::view_mut(dst) {
        if let Some(s) = T::view(src) {
            return f(s, d);
        }
        for (sb, d) in src.chunks(TILE * size).zip(d.chunks_mut(TILE)) {
            let s = &mut ts[..d.len()];
            T::load(sb, s);
            f(s, d)?;
        }
        return Ok(());
    }
    let mut td = [T::ZERO; TILE];
    for (sb, db) in src.chunks(TILE * size).zip(dst.chunks_mut(TILE * size)) {
        let n = sb.len() / size;
        let (s, d) = (&mut ts[..n], &mut td[..n]);
        T::load(sb, s);
        T::load(db, d);
        f(s, d)?;
        T::store(d, db);
    }
    Ok(())
}
