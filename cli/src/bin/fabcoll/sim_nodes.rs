//! `fabcoll sim --nodes … --per-node …`: the grid nodes × ranks per node on a two-level machine
//! (the node's α, β, γ from `--machine`, the network's from `--network`, one interface per node;
//! the simulator's Two levels), one map per size: the fastest algorithm per (nodes, ranks per
//! node), printed (`--table`), drawn (`--out`, one size) or, without `--map`, every time as CSV.
//!
//! Ranks are placed in blocks ([`Topology::regular`]), so the simulator replays one node's ranks
//! for all where the schedules are symmetric under shifts by whole nodes, and the whole job
//! otherwise, up to `--max-full-replay` ranks (building and replaying every rank's schedule
//! grows with p² for many algorithms). A job above it that no symmetry shortens is skipped: it
//! is named on stderr and cannot win its cell.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fabcoll::collectives::registry::Algorithm;
use fabcoll::collectives::sim::{self, ModelParams};
use fabcoll::collectives::{CollArgs, Topology};

use super::{call, candidates, machine_note, table, SimArgs};
use crate::map::{self, MapGrid};

/// Runs the two-level grid `nodes` × `per_node` for every size of `a`.
pub(super) fn run(a: &SimArgs, nodes: &[u32], per_node: &[u32], out: &mut dyn std::io::Write) -> Result<(), String> {
    let net = a.network.ok_or("--nodes needs the network between nodes: --network alpha=..,beta=..")?;
    let cfg = ModelParams::new(a.machine).with_network(net);
    cfg.validate().map_err(|e| e.to_string())?;
    if !a.out.is_empty() && a.sizes.0.len() != 1 {
        return Err("--out draws the map of one size: give --sizes a single value".into());
    }
    let algs = candidates(a)?;
    let io = |e: std::io::Error| format!("writing the output: {e}");
    if !a.map {
        writeln!(out, "op,nodes,per_node,p,bytes,algorithm,time_us").map_err(io)?;
    }
    let t0 = Instant::now();
    // Every (size, nodes, ranks per node, algorithm) is one independent simulation: they run on
    // every core, the largest jobs first, and are read back in grid order.
    let mut jobs = Vec::new();
    for (si, &size) in a.sizes.0.iter().enumerate() {
        for (ni, &n) in nodes.iter().enumerate() {
            for (ki, &k) in per_node.iter().enumerate() {
                let p = n.checked_mul(k).filter(|&p| p <= 1 << 20);
                let p = p.ok_or(format!("{n} nodes × {k} ranks: more than 1048576 ranks"))?;
                let topo = Arc::new(Topology::regular(n, k).map_err(|e| e.to_string())?);
                let args = call(a, p, size).with_topology(topo);
                for alg in algs.iter().filter(|alg| alg.restrictions.violated(&args).is_none()) {
                    jobs.push(Job { at: (si, ni, ki), n, k, p, size, alg, args: args.clone() });
                }
            }
        }
    }
    let times = simulate_all(&jobs, &cfg, a.max_full_replay);
    let (mut runs, mut skipped) = (0u64, Vec::new());
    let mut best: HashMap<(usize, usize, usize), (&str, f64)> = HashMap::new();
    for (job, time) in jobs.iter().zip(times) {
        let (n, k, size, name) = (job.n, job.k, job.size, job.alg.name);
        let t = match time {
            Ok(t) => t,
            Err(e) if e.contains(sim::TOO_LARGE_TO_REPLAY) => {
                skipped.push(format!("{name} {n}×{k} {size} B"));
                continue;
            }
            Err(e) => return Err(format!("{}:{name} {n} nodes × {k} {size} B: {e}", a.op)),
        };
        runs += 1;
        if !a.map {
            writeln!(out, "{},{n},{k},{},{size},{name},{:.4}", a.op, job.p, t * 1e6).map_err(io)?;
        }
        let cell = best.entry(job.at).or_insert((name, t));
        if t < cell.1 * (1.0 - 1e-9) {
            *cell = (name, t);
        }
    }
    let mut grids = Vec::with_capacity(a.sizes.0.len());
    for (si, &size) in a.sizes.0.iter().enumerate() {
        let cell = |ni, ki| best.get(&(si, ni, ki)).map(|(name, _)| name.to_string());
        let cells = (0..nodes.len()).map(|ni| (0..per_node.len()).map(|ki| cell(ni, ki)).collect()).collect();
        grids.push(MapGrid {
            title: a.title.clone().unwrap_or_else(|| format!("fastest {} of {} B (simulated)", a.op, size)),
            x_label: "ranks per node".into(),
            y_label: "nodes".into(),
            ps: nodes.to_vec(),
            sizes: per_node.iter().map(|&k| u64::from(k)).collect(),
            cells,
            note: machine_note(&a.machine, Some(net), a.dtype_size, a.commutative),
        });
    }
    eprintln!("fabcoll sim: {runs} simulations in {:.2} s", t0.elapsed().as_secs_f64());
    if !skipped.is_empty() {
        eprintln!(
            "fabcoll sim: {} not simulated (not symmetric, too large to replay): {}",
            skipped.len(),
            skipped.join(", ")
        );
    }
    if !a.map {
        return Ok(());
    }
    if a.table {
        for g in &grids {
            out.write_all(format!("# columns: ranks per node\n{}", table(g, "nodes")).as_bytes()).map_err(io)?;
        }
    }
    for path in &a.out {
        map::render(&grids[0], path)?;
    }
    Ok(())
}

/// One cell's simulation of one algorithm: its place in the grids (size, nodes, ranks per node
/// indices) and the call.
struct Job<'a> {
    at: (usize, usize, usize),
    n: u32,
    k: u32,
    p: u32,
    size: u64,
    alg: &'a Algorithm,
    args: CollArgs,
}

/// Jobs of more ranks than this are large: one replay can take gigabytes.
const LARGE_JOB_RANKS: u32 = 8192;
/// Large jobs replayed at once, whatever the number of cores.
const LARGE_AT_ONCE: usize = 2;

/// Each job's simulated time (or its error's text), in `jobs`' order, computed on every core,
/// the jobs of the most ranks first (they take the longest); at most [`LARGE_AT_ONCE`] of the
/// large ones at a time, so that memory does not grow with the cores.
fn simulate_all(jobs: &[Job<'_>], cfg: &ModelParams, max_full: u32) -> Vec<Result<f64, String>> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].p));
    let (large, small) = order.split_at(order.partition_point(|&i| jobs[i].p > LARGE_JOB_RANKS));
    let results: Mutex<Vec<Option<Result<f64, String>>>> = Mutex::new(vec![None; jobs.len()]);
    let (next_large, next_small) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
    let run = |i: usize| {
        let job = &jobs[i];
        let r = sim::simulate_alg_sampled_within(job.alg, &job.args, cfg, max_full);
        let r = r.map(|r| r.time).map_err(|e| e.to_string());
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
    };
    std::thread::scope(|s| {
        for w in 0..workers {
            let (run, next_large, next_small) = (&run, &next_large, &next_small);
            s.spawn(move || {
                if w < LARGE_AT_ONCE {
                    while let Some(&i) = large.get(next_large.fetch_add(1, Ordering::Relaxed)) {
                        run(i);
                    }
                }
                while let Some(&i) = small.get(next_small.fetch_add(1, Ordering::Relaxed)) {
                    run(i);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.into_iter().map(|r| r.unwrap_or_else(|| Err("not simulated".into()))).collect()
}
