//! Reduction kernels vs memcpy: `sum` of f32, f64 and bf16 through `kernels::reduce` (the byte
//! API the executor calls, aligned buffers) at 4 KiB, 1 MiB and 64 MiB, next to
//! `copy_from_slice` of the same size, plus f32 on unaligned bytes (the stack-tile paths) at 1 MiB.
//! Throughput = bytes of the destination per second; a reduction reads two buffers and writes
//! one, a copy reads one and writes one.
//!
//! `cargo bench -p fabcoll-collectives --bench kernels` (short: 10 samples, ~1 s per case).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::kernels::reduce;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::Order;

const SIZES: [(usize, &str); 3] = [(4 << 10, "4KiB"), (1 << 20, "1MiB"), (64 << 20, "64MiB")];

/// An 8-byte aligned buffer of `bytes` bytes holding small finite values of `dt`.
fn buffer(bytes: usize, dt: Datatype, seed: u64) -> Vec<u64> {
    let words = (0..bytes / 8).map(|i| {
        let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
        match dt {
            // 1.0 ..< 2.0 patterns: no NaN or infinity slows anything down.
            Datatype::F32 => 0x3F80_0000_3F80_0000 | (x & 0x007F_FFFF_007F_FFFF),
            Datatype::F64 => 0x3FF0_0000_0000_0000 | (x & 0x000F_FFFF_FFFF_FFFF),
            _ => 0x3F80_3F80_3F80_3F80 | (x & 0x007F_007F_007F_007F),
        }
    });
    words.collect()
}

fn sum(c: &mut Criterion, group: &str, dt: Datatype) {
    let mut g = c.benchmark_group(group);
    for (bytes, label) in SIZES {
        let src = buffer(bytes, dt, 1);
        let mut dst = buffer(bytes, dt, 2);
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter(|| {
                let (s, d) = (bytemuck::cast_slice(&src), bytemuck::cast_slice_mut(&mut dst));
                reduce(&ReduceOp::Sum, dt, s, d, Order::SrcFirst).expect("sum is defined on this type");
                std::hint::black_box(d);
            })
        });
    }
    g.finish();
}

fn kernels(c: &mut Criterion) {
    sum(c, "sum_f32", Datatype::F32);
    sum(c, "sum_f64", Datatype::F64);
    sum(c, "sum_bf16", Datatype::BF16);
    // The executor's eager slots may hand over unaligned bytes: the stack-tile paths, with only
    // src unaligned (dst in an aligned user buffer) and with both unaligned.
    let mut g = c.benchmark_group("sum_f32_unaligned");
    let (bytes, label) = SIZES[1];
    let src = buffer(bytes + 8, Datatype::F32, 1);
    let mut dst = buffer(bytes + 8, Datatype::F32, 2);
    g.throughput(Throughput::Bytes(bytes as u64));
    for (case, doff) in [("src", 0), ("both", 3)] {
        g.bench_function(BenchmarkId::new(case, label), |b| {
            b.iter(|| {
                let s = &bytemuck::cast_slice::<u64, u8>(&src)[1..bytes + 1];
                let d = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut dst)[doff..bytes + doff];
                reduce(&ReduceOp::Sum, Datatype::F32, s, d, Order::SrcFirst).expect("sum is defined on f32");
                std::hint::black_box(d);
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("memcpy");
    for (bytes, label) in SIZES {
        let src = vec![1u8; bytes];
        let mut dst = vec![2u8; bytes];
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter(|| {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = kernels
}
criterion_main!(benches);
