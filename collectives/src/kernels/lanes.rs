//! Element-wise loops written so LLVM vectorizes them (fixed-width lane blocks, no bounds checks
//! in the inner loop), plus the scalar functions they apply: IEEE `minimum`/`maximum`, bf16
//! rounding, and minloc/maxloc selection.

use half::bf16;
use half::slice::HalfFloatSliceExt;

use crate::datatype::{Complex, ValueIndex};

/// Elements per block of the element-wise loops (a whole number of 512-bit vectors for all types).
pub(crate) const LANES: usize = 64;

/// `dst[i] ← f(src[i], dst[i])`; `src` and `dst` have the same length.
#[inline(always)]
pub(crate) fn zip<T: Copy>(src: &[T], dst: &mut [T], f: impl Fn(T, T) -> T) {
    let mut s = src.chunks_exact(LANES);
    let mut d = dst.chunks_exact_mut(LANES);
    for (sc, dc) in (&mut s).zip(&mut d) {
        // Always Ok (chunks_exact): converting to arrays gives LLVM the constant trip count.
        if let (Ok(sa), Ok(da)) = (<&[T; LANES]>::try_from(sc), <&mut [T; LANES]>::try_from(dc)) {
            for (x, y) in sa.iter().zip(da.iter_mut()) {
                *y = f(*x, *y);
            }
        }
    }
    for (x, y) in s.remainder().iter().zip(d.into_remainder()) {
        *y = f(*x, *y);
    }
}

/// A padding-free element read from native-endian bytes at any alignment.
pub(crate) trait FromNe: Copy {
    const SIZE: usize;
    /// Reads the element from the first `SIZE` bytes of `b`.
    fn read(b: &[u8]) -> Self;
}

/// The first `N` bytes of `b` as an array.
#[inline(always)]
pub(crate) fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

macro_rules! from_ne {
    ($($t:ty),*) => {$(
        impl FromNe for $t {
            const SIZE: usize = std::mem::size_of::<$t>();

            #[inline(always)]
            fn read(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(b))
            }
        }
    )*};
}

from_ne!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

impl FromNe for bf16 {
    const SIZE: usize = 2;

    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        bf16::from_bits(u16::from_ne_bytes(array(b)))
    }
}

impl FromNe for half::f16 {
    const SIZE: usize = 2;

    #[inline(always)]
    fn read(b: &[u8]) -> Self {
        half::f16::from_bits(u16::from_ne_bytes(array(b)))
    }
}

/// `dst[i] ← f(src[i], dst[i])` with `src` the raw bytes of as many elements as `dst` has, at
/// any alignment: the element reads become unaligned vector loads, no staging copy.
#[inline(always)]
pub(crate) fn zip_bytes<T: FromNe>(src: &[u8], dst: &mut [T], f: impl Fn(T, T) -> T) {
    let mut s = src.chunks_exact(LANES * T::SIZE);
    let mut d = dst.chunks_exact_mut(LANES);
    for (sc, dc) in (&mut s).zip(&mut d) {
        if let Ok(da) = <&mut [T; LANES]>::try_from(dc) {
            for (c, y) in sc.chunks_exact(T::SIZE).zip(da.iter_mut()) {
                *y = f(T::read(c), *y);
            }
        }
    }
    for (c, y) in s.remainder().chunks_exact(T::SIZE).zip(d.into_remainder()) {
        *y = f(T::read(c), *y);
    }
}

/// bf16 → f32 (exact: bf16 is the upper half of an f32).
#[inline(always)]
pub(crate) fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits(u32::from(x.to_bits()) << 16)
}

/// f32 → bf16, round to nearest even, for results of `+ * min max` on widened bf16 values only:
/// their NaNs have zero low 16 bits (a NaN result is an input NaN or the preferred NaN, Rust's
/// float semantics, RFC 3514), so rounding cannot carry a NaN into infinity and the NaN select of
/// a general conversion is not needed. The arithmetic right shift lets SSE2 pack with `packssdw`.
/// Same results as `half::bf16::from_f32` on every such input (tested).
#[inline(always)]
pub(crate) fn round_widened_to_bf16(x: f32) -> bf16 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1));
    bf16::from_bits(((rounded as i32) >> 16) as u16)
}

/// `dst[i] ← round(f(widen(src[i]), widen(dst[i])))` for bf16, computing in f32. `f` must be
/// one of `+ * min max` (see [`round_widened_to_bf16`]).
#[inline(always)]
pub(crate) fn zip_bf16(src: &[bf16], dst: &mut [bf16], f: impl Fn(f32, f32) -> f32) {
    zip(src, dst, |a, b| round_widened_to_bf16(f(bf16_to_f32(a), bf16_to_f32(b))));
}

/// [`zip_bf16`] with `src` as raw bytes at any alignment.
#[inline(always)]
pub(crate) fn zip_bf16_bytes(src: &[u8], dst: &mut [bf16], f: impl Fn(f32, f32) -> f32) {
    zip_bytes(src, dst, |a, b| round_widened_to_bf16(f(bf16_to_f32(a), bf16_to_f32(b))));
}

/// The same for f16, through `half`'s slice conversions (F16C when the CPU has it).
#[inline(always)]
pub(crate) fn zip_f16(src: &[half::f16], dst: &mut [half::f16], f: impl Fn(f32, f32) -> f32) {
    let mut a = [0f32; LANES];
    let mut b = [0f32; LANES];
    for (sc, dc) in src.chunks(LANES).zip(dst.chunks_mut(LANES)) {
        let n = sc.len().min(dc.len());
        let (a, b) = (&mut a[..n], &mut b[..n]);
        sc.convert_to_f32_slice(a);
        dc.convert_to_f32_slice(b);
        for (x, y) in a.iter().zip(b.iter_mut()) {
            *y = f(*x, *y);
        }
        dc.convert_from_f32_slice(b);
    }
}

/// [`zip_f16`] with `src` as raw bytes at any alignment (decoded a block of lanes at a time).
#[inline(always)]
pub(crate) fn zip_f16_bytes(src: &[u8], dst: &mut [half::f16], f: impl Fn(f32, f32) -> f32) {
    let mut h = [half::f16::ZERO; LANES];
    for (sc, dc) in src.chunks(LANES * 2).zip(dst.chunks_mut(LANES)) {
        let h = &mut h[..dc.len()];
        for (c, x) in sc.chunks_exact(2).zip(h.iter_mut()) {
            *x = <half::f16 as FromNe>::read(c);
        }
        zip_f16(h, dc, &f);
    }
}

macro_rules! ieee_min_max {
    ($t:ty, $min:ident, $max:ident) => {
        /// IEEE 754-2019 `minimum`: NaN if either is NaN, −0 < +0. Commutative and associative.
        #[inline(always)]
        pub(crate) fn $min(a: $t, b: $t) -> $t {
            let m = if a < b { a } else { b };
            // Equal values differ at most in the sign of zero: OR of the bits picks −0.
            let m = if a == b { <$t>::from_bits(a.to_bits() | b.to_bits()) } else { m };
            // b NaN already gives m = b.
            if a.is_nan() {
                a
            } else {
                m
            }
        }

        /// IEEE 754-2019 `maximum`: NaN if either is NaN, +0 > −0. Commutative and associative.
        #[inline(always)]
        pub(crate) fn $max(a: $t, b: $t) -> $t {
            let m = if a > b { a } else { b };
            let m = if a == b { <$t>::from_bits(a.to_bits() & b.to_bits()) } else { m };
            if a.is_nan() {
                a
            } else {
                m
            }
        }
    };
}

ieee_min_max!(f32, minimum_f32, maximum_f32);
ieee_min_max!(f64, minimum_f64, maximum_f64);

/// The value half of a minloc/maxloc pair.
pub(crate) trait PairValue: Copy + PartialOrd {
    fn is_nan(self) -> bool;
    /// The bit pattern, to break exact ties (−0 vs +0, NaN payloads) deterministically.
    fn bits(self) -> u64;
}

impl PairValue for f32 {
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }

    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl PairValue for f64 {
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }

    fn bits(self) -> u64 {
        self.to_bits()
    }
}

impl PairValue for i32 {
    fn is_nan(self) -> bool {
        false
    }

    fn bits(self) -> u64 {
        u64::from(self as u32)
    }
}

impl PairValue for i64 {
    fn is_nan(self) -> bool {
        false
    }

    fn bits(self) -> u64 {
        self as u64
    }
}

/// Picks `a` or `b`: a NaN value wins, then the better value, then the lower index, then (same
/// value and index: ±0 or NaN payloads) the smaller bit pattern, so the choice is a total order
/// and the op exactly commutative and associative.
#[inline(always)]
fn pick<V: PairValue, I: Ord + Copy>(
    a: ValueIndex<V, I>,
    b: ValueIndex<V, I>,
    a_better: bool,
    b_better: bool,
) -> ValueIndex<V, I> {
    let (an, bn) = (a.value.is_nan(), b.value.is_nan());
    let tie = a.index < b.index || (a.index == b.index && a.value.bits() < b.value.bits());
    let a_wins = if an || bn {
        an && (!bn || tie)
    } else if a_better {
        true
    } else if b_better {
        false
    } else {
        tie
    };
    if a_wins {
        a
    } else {
        b
    }
}

/// MPI_MINLOC: the smaller value; on equal values the lower index.
#[inline(always)]
pub(crate) fn minloc<V: PairValue, I: Ord + Copy>(a: ValueIndex<V, I>, b: ValueIndex<V, I>) -> ValueIndex<V, I> {
    pick(a, b, a.value < b.value, b.value < a.value)
}

/// MPI_MAXLOC: the larger value; on equal values the lower index.
#[inline(always)]
pub(crate) fn maxloc<V: PairValue, I: Ord + Copy>(a: ValueIndex<V, I>, b: ValueIndex<V, I>) -> ValueIndex<V, I> {
    pick(a, b, a.value > b.value, b.value > a.value)
}

/// `a · b` for complex numbers: `(a.re·b.re − a.im·b.im) + (a.re·b.im + a.im·b.re)i`, each part
/// rounded once per product and once per sum (no fused multiply-add, no Annex G special cases).
#[inline(always)]
pub(crate) fn complex_product<P>(a: Complex<P>, b: Complex<P>) -> Complex<P>
where
    P: Copy + std::ops::Mul<Output = P> + std::ops::Add<Output = P> + std::ops::Sub<Output = P>,
{
    Complex { re: a.re * b.re - a.im * b.im, im: a.re * b.im + a.im * b.re }
}
