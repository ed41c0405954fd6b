//! Simulates a 65,536-rank allreduce of 1 MiB and 64 MiB: ring by symmetric replay (one rank's
//! schedule stands for all), Rabenseifner by full replay of every rank's schedule (and, p being a
//! power of two, by XOR-symmetric replay too), and recursive doubling both ways. Prints virtual time, critical-path terms, wall
//! clock and peak memory. `cargo run --release --example sim_large [-- p [filter]]`, where only
//! the lines whose label contains `filter` run.

use std::time::Instant;

use fabcoll_collectives::sim::{self, SimResult, Symmetry};
use fabcoll_collectives::{registry, CollArgs, Collective, Machine, Result};

/// A 100 Gb/s-class network: 2 µs latency, 12.5 GB/s, reductions at 5 GB/s, f = 1.
const NET: Machine = Machine { alpha: 2e-6, beta: 8e-11, gamma: 2e-10, f_alpha: 1.0, f_beta: 1.0 };

fn peak_rss_mib() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1));
    kb.and_then(|k| k.parse::<u64>().ok()).map_or("?".into(), |k| format!("{} MiB", k / 1024))
}

fn report(what: &str, args: &CollArgs, run: impl FnOnce() -> Result<SimResult>) {
    if !std::env::args().nth(2).is_none_or(|f| what.contains(&f)) {
        return;
    }
    let t0 = Instant::now();
    match run() {
        Ok(r) => {
            let cp = r.critical_path;
            println!(
                "{what:<34} p={} n={:>3} MiB: time {:>10.3} ms | critical path {} msgs, {:.4e} B·β, {:.4e} B·γ | \
                 busiest rank sent {} B | {} steps ({} replayed) | wall {:.2} s | peak RSS {}",
                args.size,
                (args.count * u64::from(args.elem_size)) >> 20,
                r.time * 1e3,
                cp.alpha,
                cp.beta,
                cp.gamma,
                r.max_bytes_sent,
                r.steps,
                r.replayed_steps,
                t0.elapsed().as_secs_f64(),
                peak_rss_mib()
            );
        }
        Err(e) => println!("{what:<34} p={}: {e}", args.size),
    }
}

fn main() {
    let p: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(65536);
    for mib in [1u64, 64] {
        let args = CollArgs::new(Collective::Allreduce, 0, p, (mib << 20) / 4);
        match registry::find(Collective::Allreduce, "ring") {
            Ok(alg) => report("allreduce:ring (symmetric)", &args, || {
                sim::simulate_alg_symmetric(alg, &args, Symmetry::Rotation, &NET)
            }),
            Err(e) => println!("{e}"),
        }
        // a second full replay at this scale (lg p exchanges of the whole vector), checked
        // against its XOR-symmetric replay
        if let Ok(alg) = registry::find(Collective::Allreduce, "recursive_doubling") {
            if p.is_power_of_two() {
                report("allreduce:recursive_doubling (sym)", &args, || {
                    sim::simulate_alg_symmetric(alg, &args, Symmetry::Xor, &NET)
                });
            }
            report("allreduce:recursive_doubling (full)", &args, || sim::simulate_alg(alg, &args, &NET));
        }
        match registry::find(Collective::Allreduce, "rabenseifner") {
            Ok(alg) => {
                if p.is_power_of_two() {
                    report("allreduce:rabenseifner (symmetric)", &args, || {
                        sim::simulate_alg_symmetric(alg, &args, Symmetry::Xor, &NET)
                    });
                }
                report("allreduce:rabenseifner (full)", &args, || sim::simulate_alg(alg, &args, &NET));
            }
            Err(e) => println!("{e}"),
        }
    }
}
