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

use std::sync::Arc;
use std::time::Instant;

use fabcoll::collectives::sim::{self, ModelParams};
use fabcoll::collectives::Topology;

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
    let (mut runs, mut skipped) = (0u64, Vec::new());
    let mut grids = Vec::with_capacity(a.sizes.0.len());
    for &size in &a.sizes.0 {
        let mut cells = Vec::with_capacity(nodes.len());
        for &n in nodes {
            let mut row = Vec::with_capacity(per_node.len());
            for &k in per_node {
                let p = n.checked_mul(k).filter(|&p| p <= 1 << 20);
                let p = p.ok_or(format!("{n} nodes × {k} ranks: more than 1048576 ranks"))?;
                let topo = Topology::regular(n, k).map_err(|e| e.to_string())?;
                let args = call(a, p, size).with_topology(Arc::new(topo));
                let mut best: Option<(&str, f64)> = None;
                for alg in &algs {
                    if alg.restrictions.violated(&args).is_some() {
                        continue;
                    }
                    let t = match sim::simulate_alg_sampled_within(alg, &args, &cfg, a.max_full_replay) {
                        Ok(r) => r.time,
                        Err(e) if e.to_string().contains(sim::TOO_LARGE_TO_REPLAY) => {
                            skipped.push(format!("{} {n}×{k} {size} B", alg.name));
                            continue;
                        }
                        Err(e) => return Err(format!("{}:{} {n} nodes × {k} {size} B: {e}", a.op, alg.name)),
                    };
                    runs += 1;
                    if !a.map {
                        writeln!(out, "{},{n},{k},{p},{size},{},{:.4}", a.op, alg.name, t * 1e6).map_err(io)?;
                    }
                    if best.is_none_or(|(_, b)| t < b * (1.0 - 1e-9)) {
                        best = Some((alg.name, t));
                    }
                }
                row.push(best.map(|(name, _)| name.to_string()));
            }
            cells.push(row);
        }
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
