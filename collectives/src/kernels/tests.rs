//! Kernels against a scalar reference written independently (per element, from bytes), on
//! random data, both alignments, both orders; user ops; errors.

use half::{bf16, f16};
use proptest::prelude::*;

use super::lanes;
use super::{reduce, reduce_typed, TILE};
use crate::datatype::{sealed::Sealed, Complex, Datatype, Element, ValueIndex};
use crate::op::{ReduceOp, UserOp, BUILTINS};
use crate::schedule::Order;

// ---------------------------------------------------------------- scalar reference

fn rd<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().unwrap()
}

fn ref_fmin(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a == b {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else if a < b {
        a
    } else {
        b
    }
}

fn ref_fmax(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a == b {
        if a.is_sign_positive() {
            a
        } else {
            b
        }
    } else if a > b {
        a
    } else {
        b
    }
}

/// f32/f64/f16/bf16 ops computed in f64 where exact (min/max) or in the type itself.
fn ref_float_op(op: &ReduceOp, a: f64, b: f64) -> Option<f64> {
    match op {
        ReduceOp::Min => Some(ref_fmin(a, b)),
        ReduceOp::Max => Some(ref_fmax(a, b)),
        _ => None,
    }
}

macro_rules! ref_int {
    ($t:ty, $op:expr, $s:expr, $d:expr, $out:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for i in 0..$s.len() / N {
            let a = <$t>::from_ne_bytes(rd::<N>($s, i * N));
            let b = <$t>::from_ne_bytes(rd::<N>($d, i * N));
            let (ta, tb) = (a != 0, b != 0);
            let r: $t = match $op {
                ReduceOp::Sum => a.wrapping_add(b),
                ReduceOp::Prod => a.wrapping_mul(b),
                ReduceOp::Min => {
                    if a < b {
                        a
                    } else {
                        b
                    }
                }
                ReduceOp::Max => {
                    if a > b {
                        a
                    } else {
                        b
                    }
                }
                ReduceOp::Band => a & b,
                ReduceOp::Bor => a | b,
                ReduceOp::Bxor => a ^ b,
                ReduceOp::Land => (ta && tb) as $t,
                ReduceOp::Lor => (ta || tb) as $t,
                ReduceOp::Lxor => (ta != tb) as $t,
                _ => unreachable!(),
            };
            $out[i * N..(i + 1) * N].copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

macro_rules! ref_float {
    ($t:ty, $op:expr, $s:expr, $d:expr, $out:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for i in 0..$s.len() / N {
            let a = <$t>::from_ne_bytes(rd::<N>($s, i * N));
            let b = <$t>::from_ne_bytes(rd::<N>($d, i * N));
            let r: $t = match $op {
                ReduceOp::Sum => a + b,
                ReduceOp::Prod => a * b,
                op => ref_float_op(op, a as f64, b as f64).unwrap() as $t,
            };
            $out[i * N..(i + 1) * N].copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

macro_rules! ref_half {
    ($t:ty, $op:expr, $s:expr, $d:expr, $out:expr) => {{
        for i in 0..$s.len() / 2 {
            let a = <$t>::from_bits(u16::from_ne_bytes(rd::<2>($s, i * 2))).to_f32();
            let b = <$t>::from_bits(u16::from_ne_bytes(rd::<2>($d, i * 2))).to_f32();
            let r = match $op {
                ReduceOp::Sum => a + b,
                ReduceOp::Prod => a * b,
                op => ref_float_op(op, a as f64, b as f64).unwrap() as f32,
            };
            $out[i * 2..(i + 1) * 2].copy_from_slice(&<$t>::from_f32(r).to_bits().to_ne_bytes());
        }
    }};
}

macro_rules! ref_pair {
    ($v:ty, $i:ty, $bits:ty, $size:expr, $op:expr, $s:expr, $d:expr, $out:expr) => {{
        const V: usize = std::mem::size_of::<$v>();
        const I: usize = std::mem::size_of::<$i>();
        for k in 0..$s.len() / $size {
            let at = k * $size;
            let (av, ai) = (<$v>::from_ne_bytes(rd::<V>($s, at)), <$i>::from_ne_bytes(rd::<I>($s, at + V)));
            let (bv, bi) = (<$v>::from_ne_bytes(rd::<V>($d, at)), <$i>::from_ne_bytes(rd::<I>($d, at + V)));
            let min = matches!($op, ReduceOp::Minloc);
            #[allow(clippy::eq_op, clippy::float_cmp)]
            let (a_nan, b_nan) = (av != av, bv != bv);
            let (ak, bk) = (<$bits>::from_ne_bytes(rd::<V>($s, at)), <$bits>::from_ne_bytes(rd::<V>($d, at)));
            let tie = if ai == bi { ak < bk } else { ai < bi };
            let take_a = if a_nan && b_nan {
                tie
            } else if a_nan {
                true
            } else if b_nan {
                false
            } else if av == bv {
                tie
            } else {
                (av < bv) == min
            };
            if take_a {
                $out[at..at + V].copy_from_slice(&av.to_ne_bytes());
                $out[at + V..at + V + I].copy_from_slice(&ai.to_ne_bytes());
            }
        }
    }};
}

macro_rules! ref_complex {
    ($p:ty, $op:expr, $s:expr, $d:expr, $out:expr) => {{
        const N: usize = std::mem::size_of::<$p>();
        for i in 0..$s.len() / (2 * N) {
            let part = |b: &[u8], k: usize| <$p>::from_ne_bytes(rd::<N>(b, (2 * i + k) * N));
            let (a, b, c, d) = (part($s, 0), part($s, 1), part($d, 0), part($d, 1));
            let (re, im) = match $op {
                ReduceOp::Sum => (a + c, b + d),
                ReduceOp::Prod => (a * c - b * d, a * d + b * c),
                _ => unreachable!(),
            };
            $out[2 * i * N..(2 * i + 1) * N].copy_from_slice(&re.to_ne_bytes());
            $out[(2 * i + 1) * N..(2 * i + 2) * N].copy_from_slice(&im.to_ne_bytes());
        }
    }};
}

/// `src ⊕ dst` element by element, written from the spec, padding bytes of `dst` kept.
fn reference(op: &ReduceOp, dt: Datatype, s: &[u8], d: &[u8]) -> Vec<u8> {
    let mut out = d.to_vec();
    match dt {
        Datatype::I8 => ref_int!(i8, op, s, d, out),
        Datatype::I16 => ref_int!(i16, op, s, d, out),
        Datatype::I32 => ref_int!(i32, op, s, d, out),
        Datatype::I64 => ref_int!(i64, op, s, d, out),
        Datatype::U8 => ref_int!(u8, op, s, d, out),
        Datatype::U16 => ref_int!(u16, op, s, d, out),
        Datatype::U32 => ref_int!(u32, op, s, d, out),
        Datatype::U64 => ref_int!(u64, op, s, d, out),
        Datatype::F32 => ref_float!(f32, op, s, d, out),
        Datatype::F64 => ref_float!(f64, op, s, d, out),
        Datatype::F16 => ref_half!(f16, op, s, d, out),
        Datatype::BF16 => ref_half!(bf16, op, s, d, out),
        Datatype::F32I32 => ref_pair!(f32, i32, u32, 8, op, s, d, out),
        Datatype::F64I32 => ref_pair!(f64, i32, u64, 16, op, s, d, out),
        Datatype::I32I32 => ref_pair!(i32, i32, u32, 8, op, s, d, out),
        Datatype::I64I64 => ref_pair!(i64, i64, u64, 16, op, s, d, out),
        Datatype::C64 => ref_complex!(f32, op, s, d, out),
        Datatype::C128 => ref_complex!(f64, op, s, d, out),
    }
    out
}

/// Byte equality, except that two NaNs of a float (or float-valued pair) type are equal.
fn same(dt: Datatype, got: &[u8], want: &[u8]) -> bool {
    fn nan_eq(got: &[u8], want: &[u8], size: usize, vsize: usize, is_nan: fn(&[u8]) -> bool) -> bool {
        got.chunks(size)
            .zip(want.chunks(size))
            .all(|(g, w)| g == w || (is_nan(&g[..vsize]) && is_nan(&w[..vsize]) && g[vsize..] == w[vsize..]))
    }
    let f16nan = |b: &[u8]| f16::from_bits(u16::from_ne_bytes(rd::<2>(b, 0))).is_nan();
    let bf16nan = |b: &[u8]| bf16::from_bits(u16::from_ne_bytes(rd::<2>(b, 0))).is_nan();
    let f32nan = |b: &[u8]| f32::from_ne_bytes(rd::<4>(b, 0)).is_nan();
    let f64nan = |b: &[u8]| f64::from_ne_bytes(rd::<8>(b, 0)).is_nan();
    got.len() == want.len()
        && match dt {
            Datatype::F16 => nan_eq(got, want, 2, 2, f16nan),
            Datatype::BF16 => nan_eq(got, want, 2, 2, bf16nan),
            Datatype::F32 | Datatype::C64 => nan_eq(got, want, 4, 4, f32nan),
            Datatype::F64 | Datatype::C128 => nan_eq(got, want, 8, 8, f64nan),
            Datatype::F32I32 => nan_eq(got, want, 8, 4, f32nan),
            Datatype::F64I32 => nan_eq(got, want, 16, 8, f64nan),
            _ => got == want,
        }
}

// ---------------------------------------------------------------- buffers with chosen alignment

/// `len` bytes at byte offset `off` of an 8-byte aligned allocation.
struct Buf {
    words: Vec<u64>,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(bytes: &[u8], off: usize) -> Buf {
        let mut words = vec![0u64; (bytes.len() + off).div_ceil(8) + 1];
        let b: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        b[off..off + bytes.len()].copy_from_slice(bytes);
        Buf { words, off, len: bytes.len() }
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[self.off..self.off + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[self.off..self.off + self.len]
    }
}

fn data(pool: &[u8], mask: u8, len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| pool[(i + salt) % pool.len()] & mask).collect()
}

// ---------------------------------------------------------------- every op × every datatype

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_op_every_type_matches_reference(
        pool in prop::collection::vec(any::<u8>(), 64..1024),
        n in 0usize..(3 * TILE),
        mask in prop::sample::select(vec![0xFFu8, 0x81, 0x03]),
        soff in 0usize..8,
        doff in 0usize..8,
        order in prop::sample::select(vec![Order::SrcFirst, Order::DstFirst]),
    ) {
        for dt in Datatype::ALL {
            let len = n * dt.size();
            let (s, d) = (data(&pool, mask, len, 0), data(&pool, mask, len, 7 + n));
            for op in BUILTINS {
                let src = Buf::new(&s, soff);
                let mut dst = Buf::new(&d, doff);
                let r = reduce(&op, dt, src.bytes(), dst.bytes_mut(), order);
                if op.check(dt).is_err() {
                    prop_assert!(r.is_err());
                    prop_assert_eq!(dst.bytes(), &d[..], "rejected {} on {} wrote to dst", op, dt);
                    continue;
                }
                prop_assert!(r.is_ok(), "{op} on {dt}: {r:?}");
                let want = reference(&op, dt, &s, &d);
                prop_assert!(same(dt, dst.bytes(), &want), "{} on {} n={} soff={} doff={}", op, dt, n, soff, doff);
            }
        }
    }

    /// Built-ins are declared commutative and associative (algorithms reorder them): check it
    /// bit for bit (NaNs aside) on the ops where that is not obvious.
    #[test]
    fn min_max_loc_are_commutative_and_associative(
        pool in prop::collection::vec(any::<u8>(), 64..512),
        n in 0usize..100,
        mask in prop::sample::select(vec![0xFFu8, 0x81, 0x03]),
    ) {
        for dt in Datatype::ALL {
            let len = n * dt.size();
            let (mut a, mut b, mut c) =
                (data(&pool, mask, len, 0), data(&pool, mask, len, 3), data(&pool, mask, len, 11));
            if dt == Datatype::F64I32 {
                // Padding comes from dst, so it is not symmetric: zero it.
                for v in [&mut a, &mut b, &mut c] {
                    v.chunks_mut(16).for_each(|e| e[12..].fill(0));
                }
            }
            for op in [ReduceOp::Min, ReduceOp::Max, ReduceOp::Minloc, ReduceOp::Maxloc, ReduceOp::Sum] {
                if op.check(dt).is_err() || (op == ReduceOp::Sum && (dt.is_float() || dt.is_complex())) {
                    continue;
                }
                let comb = |x: &[u8], y: &[u8]| {
                    let mut y = y.to_vec();
                    reduce(&op, dt, x, &mut y, Order::SrcFirst).unwrap();
                    y
                };
                prop_assert!(same(dt, &comb(&a, &b), &comb(&b, &a)), "{} on {} not commutative", op, dt);
                let left = comb(&comb(&a, &b), &c);
                let right = comb(&a, &comb(&b, &c));
                prop_assert!(same(dt, &left, &right), "{} on {} not associative", op, dt);
            }
        }
    }

    #[test]
    fn bf16_rounding_matches_half(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        let (mine, theirs) = (lanes::round_widened_to_bf16(x), bf16::from_f32(x));
        prop_assert!(x.is_nan() || mine.to_bits() == theirs.to_bits(), "{:#x}", bits);
        // NaNs the kernels can produce: an input's (low half zero) or the preferred NaN.
        let nan = f32::from_bits((bits & 0xFFFF_0000) | 0x7F80_0000 | 0x0040_0000);
        prop_assert!(lanes::round_widened_to_bf16(nan).is_nan());
        let (wide, half_wide) = (lanes::bf16_to_f32(theirs), theirs.to_f32());
        prop_assert!(wide.to_bits() == half_wide.to_bits() || (wide.is_nan() && half_wide.is_nan()));
    }

    #[test]
    fn typed_equals_bytes(v in prop::collection::vec(any::<i32>(), 0..300), w in prop::collection::vec(any::<i32>(), 0..300)) {
        let n = v.len().min(w.len());
        let (s, mut d) = (v[..n].to_vec(), w[..n].to_vec());
        let mut db: Vec<u8> = bytemuck::cast_slice(&d).to_vec();
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Bxor, ReduceOp::Lor] {
            reduce_typed(&op, &s, &mut d, Order::SrcFirst).unwrap();
            reduce(&op, Datatype::I32, bytemuck::cast_slice(&s), &mut db, Order::SrcFirst).unwrap();
            prop_assert_eq!(bytemuck::cast_slice::<i32, u8>(&d), &db[..]);
        }
    }
}

// ---------------------------------------------------------------- paths, sizes, errors

#[test]
fn element_sizes_match_datatypes() {
    fn check<T: Element>() {
        assert_eq!(std::mem::size_of::<T>(), T::DATATYPE.size(), "{}", T::DATATYPE);
        assert_eq!(std::mem::align_of::<T>(), T::DATATYPE.align(), "{}", T::DATATYPE);
    }
    check::<i8>();
    check::<i16>();
    check::<i32>();
    check::<i64>();
    check::<u8>();
    check::<u16>();
    check::<u32>();
    check::<u64>();
    check::<f16>();
    check::<bf16>();
    check::<f32>();
    check::<f64>();
    check::<ValueIndex<f32, i32>>();
    check::<ValueIndex<f64, i32>>();
    check::<ValueIndex<i32, i32>>();
    check::<ValueIndex<i64, i64>>();
    check::<Complex<f32>>();
    check::<Complex<f64>>();
}

/// Complex products on the typed and the byte path, against values worked by hand, and the
/// ops complex numbers do not have refused by name.
#[test]
fn complex_products_and_refusals() {
    let (a, b) = (Complex::new(1.5f64, -2.0), Complex::new(-0.5f64, 4.0));
    let mut dst = [b, Complex::new(2.0, 0.0)];
    reduce_typed(&ReduceOp::Prod, &[a, Complex::new(0.0, 1.0)], &mut dst, Order::SrcFirst).unwrap();
    // (1.5 − 2i)(−0.5 + 4i) = −0.75 + 8 + (6 + 1)i; i · 2 = 2i.
    assert_eq!(dst, [Complex::new(7.25, 7.0), Complex::new(0.0, 2.0)]);
    let bytes = |c: Complex<f32>| [c.re.to_ne_bytes(), c.im.to_ne_bytes()].concat();
    let mut d = Buf::new(&bytes(Complex::new(2.0, -1.0)), 1);
    reduce(&ReduceOp::Prod, Datatype::C64, &bytes(Complex::new(3.0, 1.0)), d.bytes_mut(), Order::DstFirst).unwrap();
    assert_eq!(d.bytes(), bytes(Complex::new(7.0, -1.0)));
    for op in [ReduceOp::Min, ReduceOp::Max, ReduceOp::Band, ReduceOp::Minloc] {
        let e = reduce(&op, Datatype::C128, &[0; 16], &mut [0; 16], Order::SrcFirst).unwrap_err().to_string();
        assert!(e.contains(op.name()) && e.contains("c128"), "{e}");
    }
    let e = ReduceOp::Max.check(Datatype::C64).unwrap_err().to_string();
    assert!(e.contains("not ordered"), "{e}");
}

#[test]
fn both_paths_are_taken_and_agree() {
    let n = 3 * TILE + 5;
    let s: Vec<u8> = (0..n * 4).map(|i| (i * 7 % 251) as u8).collect();
    let d: Vec<u8> = (0..n * 4).map(|i| (i * 13 % 241) as u8).collect();
    let aligned = (Buf::new(&s, 0), Buf::new(&d, 0));
    let unaligned = (Buf::new(&s, 1), Buf::new(&d, 3));
    assert!(f32::view(aligned.0.bytes()).is_some() && f32::view(aligned.1.bytes()).is_some());
    assert!(f32::view(unaligned.0.bytes()).is_none() && f32::view(unaligned.1.bytes()).is_none());
    for op in [ReduceOp::Sum, ReduceOp::Max] {
        let mut outs = Vec::new();
        // Both aligned (in place), src only unaligned (src staged), dst unaligned (both staged).
        for (so, doff) in [(0, 0), (1, 0), (0, 3), (1, 3)] {
            let (src, mut dst) = (Buf::new(&s, so), Buf::new(&d, doff));
            reduce(&op, Datatype::F32, src.bytes(), dst.bytes_mut(), Order::SrcFirst).unwrap();
            outs.push(dst.bytes().to_vec());
        }
        assert!(outs.iter().all(|o| *o == outs[0]));
        assert!(same(Datatype::F32, &outs[0], &reference(&op, Datatype::F32, &s, &d)));
    }
}

#[test]
fn bad_lengths_are_errors_and_write_nothing() {
    let mut dst = [9u8; 6];
    let e = reduce(&ReduceOp::Sum, Datatype::I32, &[1; 6], &mut dst, Order::SrcFirst).unwrap_err().to_string();
    assert!(e.contains("6 bytes") && e.contains("4-byte"), "{e}");
    let e = reduce(&ReduceOp::Sum, Datatype::I16, &[1; 4], &mut dst, Order::SrcFirst).unwrap_err().to_string();
    assert!(e.contains("source is 4 bytes but destination is 6"), "{e}");
    assert_eq!(dst, [9; 6]);
    let e = reduce(&ReduceOp::Minloc, Datatype::F64I32, &[0; 24], &mut [0; 24], Order::SrcFirst).unwrap_err();
    assert!(e.to_string().contains("16-byte"), "{e}");
    let mut d = [1i64; 3];
    assert!(reduce_typed(&ReduceOp::Sum, &[1i64; 2], &mut d, Order::SrcFirst).is_err());
    assert!(reduce_typed(&ReduceOp::Band, &[1f32; 3], &mut [0f32; 3], Order::SrcFirst).is_err());
    assert_eq!(d, [1; 3]);
}

#[test]
fn user_op_error_is_an_error_for_other_types() {
    let op = ReduceOp::User(UserOp::elementwise::<f64, _>("hyp", true, f64::hypot));
    assert!(reduce(&op, Datatype::F32, &[0; 8], &mut [0; 8], Order::SrcFirst).is_err());
    let mut d = [4.0f64];
    reduce(&op, Datatype::F64, bytemuck::cast_slice(&[3.0f64]), bytemuck::cast_slice_mut(&mut d), Order::SrcFirst)
        .unwrap();
    assert_eq!(d, [5.0]);
}

// ---------------------------------------------------------------- semantics spot checks

#[test]
fn integer_semantics() {
    let mut d = [1i8, -128, 3, 0];
    reduce_typed(&ReduceOp::Sum, &[127i8, -1, 4, 0], &mut d, Order::SrcFirst).unwrap();
    assert_eq!(d, [-128, 127, 7, 0]);
    let mut d = [16u8, 3];
    reduce_typed(&ReduceOp::Prod, &[16u8, 100], &mut d, Order::SrcFirst).unwrap();
    assert_eq!(d, [0, 44]);
    for (op, want) in [(ReduceOp::Land, [1i32, 0, 0, 0]), (ReduceOp::Lor, [1, 1, 1, 0]), (ReduceOp::Lxor, [0, 1, 1, 0])]
    {
        let mut d = [-3i32, 0, 7, 0];
        reduce_typed(&op, &[2i32, 5, 0, 0], &mut d, Order::SrcFirst).unwrap();
        assert_eq!(d, want, "{op}");
    }
}

#[test]
fn float_min_max_nan_and_signed_zero() {
    let nan = f32::NAN;
    let s = [nan, 1.0, -0.0, 0.0, 2.0, f32::NEG_INFINITY];
    let mut lo = [1.0, nan, 0.0, -0.0, 3.0, 1.0];
    let mut hi = lo;
    reduce_typed(&ReduceOp::Min, &s, &mut lo, Order::SrcFirst).unwrap();
    reduce_typed(&ReduceOp::Max, &s, &mut hi, Order::SrcFirst).unwrap();
    assert!(lo[0].is_nan() && lo[1].is_nan() && hi[0].is_nan() && hi[1].is_nan());
    assert_eq!([lo[2].to_bits(), lo[3].to_bits()], [(-0.0f32).to_bits(); 2]);
    assert_eq!([hi[2].to_bits(), hi[3].to_bits()], [0.0f32.to_bits(); 2]);
    assert_eq!((lo[4], lo[5], hi[4], hi[5]), (2.0, f32::NEG_INFINITY, 3.0, 1.0));
    let mut h = [bf16::from_f32(-0.0), bf16::NAN];
    reduce_typed(&ReduceOp::Max, &[bf16::from_f32(0.0), bf16::ONE], &mut h, Order::SrcFirst).unwrap();
    assert!(h[0].to_bits() == 0 && h[1].is_nan());
}

#[test]
fn half_sums_round_once_to_nearest_even() {
    let one = bf16::ONE;
    let mut d = [bf16::from_f32(2f32.powi(-8)), bf16::from_f32(3.0 * 2f32.powi(-9))];
    reduce_typed(&ReduceOp::Sum, &[one, one], &mut d, Order::SrcFirst).unwrap();
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1); 1 + 1.5·2^-8 rounds up.
    assert_eq!(d, [one, bf16::from_f32(1.0 + 2f32.powi(-7))]);
    let mut d = [f16::from_f32(2f32.powi(-11)), f16::from_f32(65504.0)];
    reduce_typed(&ReduceOp::Sum, &[f16::ONE, f16::from_f32(16.0)], &mut d, Order::SrcFirst).unwrap();
    assert_eq!(d[0], f16::ONE);
    assert_eq!(d[1], f16::INFINITY, "65504 + 16 rounds to +inf in f16");
}

#[test]
fn minloc_maxloc_ties_keep_lower_index() {
    let p = ValueIndex::new;
    let s = [p(1.0f64, 5), p(2.0, 1), p(f64::NAN, 9), p(3.0, 4)];
    let mut lo = [p(1.0f64, 3), p(1.0, 7), p(0.0, 0), p(f64::NAN, 2)];
    let mut hi = lo;
    reduce_typed(&ReduceOp::Minloc, &s, &mut lo, Order::SrcFirst).unwrap();
    reduce_typed(&ReduceOp::Maxloc, &s, &mut hi, Order::DstFirst).unwrap();
    assert_eq!([lo[0], lo[1]], [p(1.0, 3), p(1.0, 7)]);
    assert_eq!([hi[0], hi[1]], [p(1.0, 3), p(2.0, 1)]);
    assert!(lo[2].value.is_nan() && lo[2].index == 9 && lo[3].value.is_nan() && lo[3].index == 2);
    let q = ValueIndex::<i64, i64>::new;
    let mut d = [q(7, 8), q(7, 2)];
    reduce_typed(&ReduceOp::Maxloc, &[q(7, 3), q(7, 3)], &mut d, Order::SrcFirst).unwrap();
    assert_eq!(d, [q(7, 3), q(7, 2)]);
}

#[test]
fn pair_padding_is_left_alone() {
    // f64_i32: value at 0..8, index at 8..12, padding 12..16.
    let mut src = [0u8; 16];
    src[..8].copy_from_slice(&1.5f64.to_ne_bytes());
    src[8..12].copy_from_slice(&4i32.to_ne_bytes());
    src[12..].copy_from_slice(&[0xAA; 4]);
    let mut dst = [0u8; 16];
    dst[..8].copy_from_slice(&2.5f64.to_ne_bytes());
    dst[8..12].copy_from_slice(&1i32.to_ne_bytes());
    dst[12..].copy_from_slice(&[0x55; 4]);
    reduce(&ReduceOp::Minloc, Datatype::F64I32, &src, &mut dst, Order::SrcFirst).unwrap();
    assert_eq!(&dst[..12], &src[..12]);
    assert_eq!(&dst[12..], &[0x55; 4]);
}

// ---------------------------------------------------------------- non-commutative user ops

fn mat(b: &[u8]) -> [f64; 4] {
    std::array::from_fn(|k| f64::from_ne_bytes(rd::<8>(b, 8 * k)))
}

fn mul(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]]
}

/// MPI-style byte op: every 4 f64 form a row-major 2×2 matrix; inout ← in · inout.
fn matmul_op() -> ReduceOp {
    let f = |inv: &[u8], inout: &mut [u8], _dt: Datatype| {
        for (a, b) in inv.chunks_exact(32).zip(inout.chunks_exact_mut(32)) {
            let r = mul(mat(a), mat(b));
            for (k, x) in r.iter().enumerate() {
                b[8 * k..8 * k + 8].copy_from_slice(&x.to_ne_bytes());
            }
        }
    };
    ReduceOp::User(UserOp::new("matmul2x2", false, f).with_datatypes(&[Datatype::F64]))
}

fn mats(seed: f64, n: usize) -> Vec<u8> {
    (0..4 * n).flat_map(|k| (seed + k as f64 * 0.5 - (k % 3) as f64).to_ne_bytes()).collect()
}

#[test]
fn user_byte_op_respects_order() {
    let op = matmul_op();
    assert!(!op.is_commutative());
    let (a, b) = (mats(1.0, 3), mats(-2.0, 3));
    for (order, first, second) in [(Order::SrcFirst, &a, &b), (Order::DstFirst, &b, &a)] {
        for (so, doff) in [(0, 0), (1, 5)] {
            let src = Buf::new(&a, so);
            let mut dst = Buf::new(&b, doff);
            reduce(&op, Datatype::F64, src.bytes(), dst.bytes_mut(), order).unwrap();
            for k in 0..3 {
                let want = mul(mat(&first[32 * k..]), mat(&second[32 * k..]));
                assert_eq!(mat(&dst.bytes()[32 * k..]), want, "{order:?} matrix {k}");
            }
        }
    }
    assert_ne!(mul(mat(&a), mat(&b)), mul(mat(&b), mat(&a)), "test matrices must not commute");
    assert!(reduce(&op, Datatype::F32, &[0; 32], &mut [0; 32], Order::SrcFirst).is_err());
}

#[test]
fn user_elementwise_op_respects_rank_order() {
    // (a, b) is the affine map t ↦ a·t + b and x ⊕ y = "x, then y": associative, not commutative.
    // With x_r = (10, r + 1), x_0 ⊕ x_1 ⊕ x_2 ⊕ x_3 = (10^4, 1234): the digits show the order.
    type Affine = ValueIndex<i64, i64>;
    let then = |x: Affine, y: Affine| Affine::new(x.value * y.value, y.value * x.index + y.index);
    let op = ReduceOp::User(UserOp::elementwise("affine", false, then));
    let n = TILE + 3;
    let x = |r: i64| Affine::new(10, r + 1);
    let bytes = |r: i64| -> Vec<u8> {
        (0..n).flat_map(|_| [x(r).value.to_ne_bytes(), x(r).index.to_ne_bytes()].concat()).collect()
    };
    // From the top rank down with SrcFirst (src = lower rank), on unaligned bytes.
    let mut acc = Buf::new(&bytes(3), 3);
    for r in (0..3).rev() {
        let src = Buf::new(&bytes(r), 1);
        reduce(&op, Datatype::I64I64, src.bytes(), acc.bytes_mut(), Order::SrcFirst).unwrap();
    }
    for c in acc.bytes().chunks(16) {
        assert_eq!((i64::from_ne_bytes(rd::<8>(c, 0)), i64::from_ne_bytes(rd::<8>(c, 8))), (10_000, 1234));
    }
    // From rank 0 up with DstFirst (dst = lower ranks), typed.
    let mut acc = vec![x(0); n];
    for r in 1..4 {
        reduce_typed(&op, &vec![x(r); n], &mut acc, Order::DstFirst).unwrap();
    }
    assert_eq!(acc, vec![Affine::new(10_000, 1234); n]);
    // The wrong order gives a different answer.
    let mut acc = vec![x(0); n];
    reduce_typed(&op, &vec![x(1); n], &mut acc, Order::SrcFirst).unwrap();
    assert_eq!(acc[0], Affine::new(100, 21));
}

#[test]
fn user_op_on_padded_pairs_through_typed_api() {
    let p = ValueIndex::new;
    let f =
        |x: ValueIndex<f64, i32>, y: ValueIndex<f64, i32>| ValueIndex::new(x.value - y.value, x.index * 10 + y.index);
    let op = ReduceOp::User(UserOp::elementwise("sub", false, f));
    let mut d = [p(1.0f64, 2), p(5.0, 1)];
    reduce_typed(&op, &[p(4.0f64, 1), p(2.0, 3)], &mut d, Order::SrcFirst).unwrap();
    assert_eq!(d, [p(3.0, 12), p(-3.0, 31)]);
    reduce_typed(&op, &[p(1.0f64, 4), p(1.0, 5)], &mut d, Order::DstFirst).unwrap();
    assert_eq!(d, [p(2.0, 124), p(-4.0, 315)]);
}

#[test]
fn bf16_rounding_edge_cases() {
    for bits in [
        0x7F7F_FFFFu32, // rounds to +inf
        0x7F7F_7FFF,    // max finite
        0x3F80_8000,    // tie, even below: stays
        0x3F81_8000,    // tie, odd below: rounds up
        0x3F80_8001,    // above the tie
        0x0000_8000,    // subnormal tie
        0x8000_8001,    // negative subnormal
        0xFF80_0000,    // -inf
        0x8000_0000,    // -0
    ] {
        let x = f32::from_bits(bits);
        assert_eq!(lanes::round_widened_to_bf16(x).to_bits(), bf16::from_f32(x).to_bits(), "{bits:#x}");
    }
    assert!(lanes::round_widened_to_bf16(f32::NAN).is_nan());
    assert!(lanes::round_widened_to_bf16(-f32::NAN).is_nan());
}
