//! Schedule generation and replay benches: one rank's schedule of allreduce (ring, rabenseifner)
//! and alltoall (bruck) at p = 64, 1024, 65536, and the simulator on whole jobs. Kept short
//! (10 samples, 1 s per bench).

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use fabcoll_collectives::sim::{self, Symmetry};
use fabcoll_collectives::{registry, CollArgs, Collective, Machine};

const PS: [u32; 3] = [64, 1024, 65536];

fn generation(c: &mut Criterion) {
    let cases = [
        (Collective::Allreduce, "ring", 1u64 << 18),
        (Collective::Allreduce, "rabenseifner", 1 << 18),
        (Collective::Alltoall, "bruck", 1),
    ];
    for (coll, name, count) in cases {
        let Ok(alg) = registry::find(coll, name) else {
            eprintln!("{coll}:{name} is not registered; skipped");
            continue;
        };
        let mut g = c.benchmark_group(format!("schedule/{coll}/{name}"));
        for p in PS {
            let args = CollArgs::new(coll, p / 3, p, count);
            if alg.restrictions.violated(&args).is_some() {
                continue;
            }
            g.bench_with_input(BenchmarkId::from_parameter(p), &args, |b, args| {
                b.iter(|| black_box(alg.schedule(black_box(args)).unwrap().len()))
            });
        }
        g.finish();
    }
}

fn replay(c: &mut Criterion) {
    let mut g = c.benchmark_group("simulate");
    if let Ok(alg) = registry::find(Collective::Allreduce, "rabenseifner") {
        for p in [64u32, 1024] {
            let args = CollArgs::new(Collective::Allreduce, 0, p, 1 << 18);
            g.bench_with_input(BenchmarkId::new("allreduce/rabenseifner/full", p), &args, |b, args| {
                b.iter(|| black_box(sim::simulate_alg(alg, args, &Machine::UNIT).unwrap().time))
            });
        }
    }
    if let Ok(alg) = registry::find(Collective::Allreduce, "ring") {
        for p in [64u32, 1024] {
            let args = CollArgs::new(Collective::Allreduce, 0, p, 1 << 18);
            let s0 = alg.schedule(&args).unwrap();
            g.bench_with_input(BenchmarkId::new("allreduce/ring/symmetric", p), &args, |b, args| {
                b.iter(|| black_box(sim::simulate_symmetric(args, &s0, Symmetry::Rotation, &Machine::UNIT).unwrap()))
            });
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! { name = benches; config = config(); targets = generation, replay }
criterion_main!(benches);
