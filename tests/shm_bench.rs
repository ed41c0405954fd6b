//! Measures the eager/zero-copy crossover over shm (2 processes): allreduce (recursive doubling)
//! latency per size with everything eager vs everything zero-copy. Skipped unless FABCOLL_BENCH=1:
//! `FABCOLL_BENCH=1 cargo test --release --test shm_bench -- --test-threads=1` (results in
//! /tmp/fabcoll-bench-*.txt).

#[path = "../fabric/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use fabcoll::{Collectives, Communicator, Options, ReduceOp};

fn run(name: &str, eager: &str) {
    if std::env::var("FABCOLL_BENCH").is_err() {
        return;
    }
    support::ranks(name, 2, Duration::from_secs(120), &[("FABCOLL_FABRIC", "shm"), ("FABCOLL_EAGER", eager)], |_job| {
        let c = Communicator::from_env().unwrap();
        let opts = Options::algorithm("recursive_doubling");
        let mut line = format!("eager={eager:>6}:");
        for kib in [0.25f64, 1.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
            let n = (kib * 1024.0 / 8.0) as usize;
            let x = vec![1.0f64; n];
            let mut y = vec![0.0f64; n];
            let iters = 300;
            for _ in 0..20 {
                c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            }
            let t0 = Instant::now();
            for _ in 0..iters {
                c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            }
            line += &format!(" {kib}K {:.1}us", t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
        }
        if c.rank() == 0 {
            println!("{line}");
            // Make the numbers visible through the harness (it prints output only on failure).
            std::fs::write(format!("/tmp/fabcoll-bench-{eager}.txt"), line).unwrap();
        }
        c.barrier().unwrap();
    });
}

#[test]
fn eager_crossover_all_eager() {
    run("eager_crossover_all_eager", "65536");
}

#[test]
fn eager_crossover_all_zcopy() {
    run("eager_crossover_all_zcopy", "0");
}
