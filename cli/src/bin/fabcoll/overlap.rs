//! `fabcoll overlap`: does a nonblocking allreduce move while the program computes? Per round,
//! on every rank: the allreduce alone (started, then waited for at once), the computation alone
//! (a loop over a private buffer that never calls fabcoll), and both: start, compute, wait. Rank 0
//! prints each round and the medians; the overlap ratio is total / max(compute, allreduce), 1.0
//! being perfect overlap and 1 + allreduce/compute none (issue 36's target: at most 1.15).

use std::time::{Duration, Instant};

use fabcoll::{Collectives, Communicator, ReduceOp};

/// Options of `fabcoll overlap`.
#[derive(clap::Args, Debug)]
pub struct OverlapArgs {
    /// Bytes of the allreduce (f32 sum); K, M, G suffixes.
    #[arg(long, default_value = "16M", value_parser = crate::parse_size)]
    size: u64,
    /// Milliseconds of computation between the start and the wait.
    #[arg(long, default_value_t = 50.0)]
    compute_ms: f64,
    /// Rounds (each measures the three cases, in rotating order).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

/// Spins on arithmetic over `buf` (in cache: no memory traffic to compete with) for `d`.
fn compute(buf: &mut [f32], d: Duration) -> f32 {
    let t0 = Instant::now();
    let mut acc = 0.0f32;
    while t0.elapsed() < d {
        for x in buf.iter_mut() {
            *x = *x * 0.999 + 0.001;
            acc += *x;
        }
    }
    acc
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the measurement on this rank; rank 0 prints. Every rank's three times are maxima over
/// ranks (the slowest rank decides a collective step).
pub fn run(c: &Communicator, a: &OverlapArgs) -> Result<(), String> {
    let err = |e: fabcoll::Error| e.to_string();
    let n = (a.size / 4).max(1) as usize;
    let send = vec![1.0f32; n];
    let mut recv = vec![0.0f32; n];
    let mut work = vec![0.5f32; 4096];
    let d = Duration::from_secs_f64(a.compute_ms / 1e3);
    let mut sink = 0.0f32;
    let (mut comm, mut comp, mut both) = (Vec::new(), Vec::new(), Vec::new());
    // Warm-up: registration, the plan, the progress thread.
    c.allreduce(&send, &mut recv, &ReduceOp::Sum).map_err(err)?;
    for round in 0..a.rounds {
        let mut t = [0.0f64; 3];
        for k in 0..3 {
            let case = (k + round) % 3;
            c.barrier().map_err(err)?;
            let t0 = Instant::now();
            match case {
                0 => c.scope(|s| s.allreduce(&send, &mut recv, &ReduceOp::Sum)?.wait()).map_err(err)?,
                1 => sink += compute(&mut work, d),
                _ => c
                    .scope(|s| {
                        let q = s.allreduce(&send, &mut recv, &ReduceOp::Sum)?;
                        sink += compute(&mut work, d);
                        q.wait()
                    })
                    .map_err(err)?,
            }
            t[case] = t0.elapsed().as_secs_f64() * 1e3;
        }
        let mut slowest = [0.0f64; 3];
        c.allreduce(&t, &mut slowest, &ReduceOp::Max).map_err(err)?;
        if recv.first().is_some_and(|&x| x != c.size() as f32) {
            return Err(format!("wrong allreduce result {} (expected {})", recv[0], c.size()));
        }
        if c.rank() == 0 {
            let [m, p, b] = slowest;
            println!(
                "round {round}: allreduce {m:.2} ms, compute {p:.2} ms, both {b:.2} ms, ratio {:.3}",
                b / m.max(p)
            );
        }
        comm.push(slowest[0]);
        comp.push(slowest[1]);
        both.push(slowest[2]);
    }
    if c.rank() == 0 {
        let ratios: Vec<f64> = (0..both.len()).map(|i| both[i] / comm[i].max(comp[i])).collect();
        let (m, p, b) = (median(&mut comm), median(&mut comp), median(&mut both));
        let r = median(&mut ratios.clone());
        println!(
            "median over {} rounds: allreduce {m:.2} ms, compute {p:.2} ms, both {b:.2} ms; ratio both/max {r:.3} \
             (no overlap would be {:.3}; {} ranks, {} bytes)",
            a.rounds,
            (m + p) / m.max(p),
            c.size(),
            a.size
        );
    }
    // Keeps the computation from being optimised away.
    if sink.is_nan() {
        eprintln!("overlap: the computation diverged");
    }
    Ok(())
}
