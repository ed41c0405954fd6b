//! `fabcoll tune --compare FILE`: is a tuned decision file faster than the embedded defaults on
//! this job? Per operation and grid size, the defaults' choice and the file's choice (with its
//! parameters) are measured as the tuner measures a batch (`tune::measure_batch`: repetitions of
//! barrier-separated calls, max over ranks, the two candidates' repetitions interleaved, no
//! racing), once per round over `--rounds` rounds (default first in even rounds, tuned first in
//! odd ones). A size's figure is the median over rounds of tuned/default.
//!
//! Noise band: where both pick the same algorithm and parameters, the two measure the same thing
//! and their ratio is pure noise; the band is the 5th–95th percentile of those sizes' medians
//! (all of them below 20 sizes). A size where the choices differ is *faster* below the band,
//! *slower* above it, else *within noise*.

use fabcoll::collectives::{CollArgs, Collective};
use fabcoll::select::Decisions;
use fabcoll::tune::{Candidate, Sample};
use fabcoll::Communicator;

use crate::ops::{self, BenchElem};
use crate::tune::{default_choice, elem_size, err, grid_of, measure_batch, TuneArgs, Venue};

/// One grid size's verdict.
#[derive(Clone, Debug)]
pub struct Point {
    pub op: Collective,
    pub bytes: u64,
    pub default: Candidate,
    pub tuned: Candidate,
    /// tuned / default, per round.
    pub ratios: Vec<f64>,
    /// Median µs over rounds of the default and of the tuned choice.
    pub default_us: f64,
    pub tuned_us: f64,
}

impl Point {
    pub fn same(&self) -> bool {
        self.default == self.tuned
    }

    pub fn median(&self) -> f64 {
        median(&self.ratios)
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The `q`-quantile (0..=1) of `v` by nearest rank (NaN if empty).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
}

/// (low, high) of the noise band from the same-choice points (see the module doc).
pub fn noise_band(points: &[Point]) -> (f64, f64) {
    let same: Vec<f64> = points.iter().filter(|p| p.same()).map(Point::median).collect();
    if same.len() < 20 {
        (quantile(&same, 0.0), quantile(&same, 1.0))
    } else {
        (quantile(&same, 0.05), quantile(&same, 0.95))
    }
}

/// The file's choice as a tuner candidate (`segment` back in bytes).
fn tuned_choice(d: &Decisions, op: Collective, p: u32, bytes: u64, venue: &Venue) -> Result<Candidate, String> {
    let es = elem_size(op);
    let mut args = CollArgs::new(op, 0, p, bytes / es).with_commutative(true);
    args.elem_size = es as u32;
    let (alg, params) = venue.choose(d, args).map_err(err)?;
    let mut c = Candidate::new(alg.name);
    for (k, v) in params.iter() {
        let v = if k == fabcoll::collectives::args::SEGMENT { v * es } else { v };
        if v != 0 {
            c = c.with(k, v);
        }
    }
    Ok(c)
}

/// Measures one operation (every rank).
fn compare_op<T: BenchElem>(
    c: &Communicator,
    a: &TuneArgs,
    d: &Decisions,
    op: Collective,
    rounds: usize,
) -> Result<Vec<Point>, String> {
    let (p, r) = (c.size(), c.rank());
    let es = std::mem::size_of::<T>();
    let grid = grid_of(op, p, a);
    let max = *grid.last().ok_or_else(|| format!("{op}: no grid size in the size range"))?;
    let big = ops::shape(op, p, r, max, es).ok_or_else(|| format!("{op}: bad size {max}"))?;
    let mut sendbuf = c.alloc::<T>(big.send_len).map_err(err)?;
    let mut recvbuf = c.alloc::<T>(big.recv_len).map_err(err)?;
    let venue = Venue::of(c);
    let mut out = Vec::with_capacity(grid.len());
    for &bytes in &grid {
        let s = ops::shape(op, p, r, bytes, es).ok_or_else(|| format!("{op}: bad size {bytes}"))?;
        let (send, recv) = (&mut sendbuf[..s.send_len], &mut recvbuf[..s.recv_len]);
        let def = default_choice(op, p, bytes, &venue);
        let tuned = tuned_choice(d, op, p, bytes, &venue)?;
        let median_of = |res: &Result<Vec<f64>, String>, cand: &Candidate| match res {
            Ok(reps) => Ok(Sample::from_reps(reps).map_or(f64::NAN, |x| x.median)),
            Err(why) => Err(format!("{op} {cand} at {bytes} B: {why}")),
        };
        let mut ratios = Vec::with_capacity(rounds);
        let (mut tds, mut tts) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        for round in 0..rounds {
            let batch = if round % 2 == 0 { [def.clone(), tuned.clone()] } else { [tuned.clone(), def.clone()] };
            let res = measure_batch(c, &s, &batch, es as u64, send, recv, &[false, false], None, a, 0.0)?;
            let (d, t) = if round % 2 == 0 { (&res[0], &res[1]) } else { (&res[1], &res[0]) };
            let (td, tt) = (median_of(d, &def)?, median_of(t, &tuned)?);
            ratios.push(tt / td);
            tds.push(td);
            tts.push(tt);
        }
        out.push(Point { op, bytes, default: def, tuned, ratios, default_us: median(&tds), tuned_us: median(&tts) });
    }
    Ok(out)
}

/// Rank 0's report.
pub fn report(points: &[Point], p: u32, file: &str) -> String {
    let (lo, hi) = noise_band(points);
    let mut s = format!("# tuned ({file}) vs embedded defaults, p={p}: tuned/default per size, median over rounds\n");
    s += &format!(
        "# {:<10} {:>10} {:>34} {:>10} {:>44} {:>10} {:>7}  {:<28} {}\n",
        "op", "bytes", "default", "µs", "tuned", "µs", "ratio", "rounds", "verdict"
    );
    let (mut faster, mut slower, mut within, mut diff_logs) = (0, 0, 0, Vec::new());
    for pt in points {
        let m = pt.median();
        let verdict = if pt.same() {
            "same choice"
        } else if m < lo {
            faster += 1;
            "FASTER"
        } else if m > hi {
            slower += 1;
            "SLOWER"
        } else {
            within += 1;
            "within noise"
        };
        if !pt.same() && m.is_finite() && m > 0.0 {
            diff_logs.push(m.ln());
        }
        let rounds: Vec<String> = pt.ratios.iter().map(|r| format!("{r:.2}")).collect();
        s += &format!(
            "  {:<10} {:>10} {:>34} {:>10.2} {:>44} {:>10.2} {:>7.3}  {:<28} {}\n",
            pt.op.name(),
            pt.bytes,
            pt.default.to_string(),
            pt.default_us,
            pt.tuned.to_string(),
            pt.tuned_us,
            m,
            rounds.join(" "),
            verdict
        );
    }
    let same = points.iter().filter(|p| p.same()).count();
    let geo =
        if diff_logs.is_empty() { f64::NAN } else { (diff_logs.iter().sum::<f64>() / diff_logs.len() as f64).exp() };
    s += &format!(
        "# p={p}: {} sizes, {same} with the same choice (noise band {lo:.3}–{hi:.3}), {} different: {faster} faster, \
         {within} within noise, {slower} slower; geomean ratio where different {geo:.3}\n",
        points.len(),
        points.len() - same
    );
    s
}

/// `fabcoll tune --compare FILE` on every rank.
pub fn rank_main(c: &Communicator, a: &TuneArgs, file: &std::path::Path, rounds: usize) -> Result<(), String> {
    let d = Decisions::from_file(file).map_err(err)?;
    let mut points = Vec::new();
    for &op in &a.ops {
        let mut v = if op.is_reduction() {
            compare_op::<f32>(c, a, &d, op, rounds)?
        } else {
            compare_op::<u8>(c, a, &d, op, rounds)?
        };
        points.append(&mut v);
    }
    if c.rank() == 0 {
        print!("{}", report(&points, c.size(), &file.display().to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll::select::FabricClass;
    use fabcoll::Topology;
    use std::sync::Arc;

    fn pt(bytes: u64, alg: &str, ratios: &[f64]) -> Point {
        Point {
            op: Collective::Bcast,
            bytes,
            default: Candidate::new("binomial"),
            tuned: Candidate::new(alg),
            ratios: ratios.to_vec(),
            default_us: 1.0,
            tuned_us: median(ratios),
        }
    }

    #[test]
    fn verdicts_against_the_noise_band() {
        let points = vec![
            pt(1, "binomial", &[0.9, 1.0, 1.1]),
            pt(2, "binomial", &[1.05, 1.2, 0.95]),
            pt(4, "binomial", &[0.92, 0.9, 1.3]),
            pt(8, "scatter_ring_allgather", &[0.5, 0.6, 0.55]),
            pt(16, "scatter_ring_allgather", &[1.0, 1.02, 0.98]),
            pt(32, "scatter_ring_allgather", &[2.0, 2.5, 1.9]),
        ];
        // fewer than 20 same-choice sizes: the band is their whole range of medians
        assert_eq!(noise_band(&points), (0.92, 1.05));
        let r = report(&points, 4, "d.json");
        assert!(r.contains("3 with the same choice"), "{r}");
        assert!(r.contains("1 faster, 1 within noise, 1 slower"), "{r}");
        assert_eq!(r.matches("FASTER").count(), 1);
        assert_eq!(r.matches("SLOWER").count(), 1);
        // geomean of 0.55, 1.0, 2.0
        assert!(r.contains(&format!("{:.3}", (0.55f64 * 2.0).powf(1.0 / 3.0))), "{r}");
    }

    #[test]
    fn the_files_segment_comes_back_in_bytes() {
        let text = r#"{"format": "fabcoll-decisions", "version": 1, "rules": [
            {"op": "bcast", "p": [2, 2], "bytes": [0, 100], "algorithm": "binomial"},
            {"op": "bcast", "p": [2, 2], "bytes": [101, 40000], "algorithm": "binomial", "params": {"segment": 8192}},
            {"op": "bcast", "algorithm": "binomial"},
            {"op": "allreduce", "p": [2, 2], "algorithm": "ring", "params": {"segment": 4096}},
            {"op": "allreduce", "algorithm": "recursive_doubling"}]}"#;
        let d = Decisions::from_json(text).unwrap();
        let node = Venue { class: FabricClass::Node, sharing: false, topology: None };
        assert_eq!(
            tuned_choice(&d, Collective::Bcast, 2, 32768, &node).unwrap(),
            Candidate::new("binomial").with("segment", 8192)
        );
        assert_eq!(tuned_choice(&d, Collective::Bcast, 2, 64, &node).unwrap(), Candidate::new("binomial"));
        // f32 elements: 4096 bytes = 1024 elements in the call, 4096 bytes again here
        assert_eq!(
            tuned_choice(&d, Collective::Allreduce, 2, 1 << 20, &node).unwrap(),
            Candidate::new("ring").with("segment", 4096)
        );
    }

    /// A tuned file's rules name their placement (`nodes`, `per_node`), which holds only with the
    /// communicator's topology: without it every rank counts as a node of its own, and the
    /// comparison measured the defaults against themselves.
    #[test]
    fn tuned_placement_rules_hold_on_the_communicators_topology() {
        let text = r#"{"format": "fabcoll-decisions", "version": 1, "rules": [
            {"op": "allreduce", "p": [4, 4], "nodes": [1, 1], "per_node": [4, 4], "bytes": [0, 9741], "commutative": true, "algorithm": "shmem_cyclic"},
            {"op": "allreduce", "p": [4, 4], "nodes": [1, 1], "per_node": [4, 4], "commutative": true, "algorithm": "rabenseifner"},
            {"op": "allreduce", "algorithm": "binary_blocks"}]}"#;
        let d = Decisions::from_json(text).unwrap();
        let one_node = Venue {
            class: FabricClass::Node,
            sharing: true,
            topology: Some(Arc::new(Topology::from_sizes(&[4]).unwrap())),
        };
        let pick = |v: &Venue| tuned_choice(&d, Collective::Allreduce, 4, 8192, v).unwrap().algorithm;
        assert_eq!(pick(&one_node), "shmem_cyclic");
        assert_eq!(pick(&Venue { topology: None, ..one_node.clone() }), "binary_blocks");
        // The defaults read it too: a two-node placement meets their hierarchical rules.
        let two_nodes = Venue { topology: Some(Arc::new(Topology::regular(2, 2).unwrap())), ..one_node.clone() };
        assert_eq!(default_choice(Collective::Allreduce, 4, 8192, &two_nodes).algorithm, "hier_multi_leader");
        assert_ne!(default_choice(Collective::Allreduce, 4, 8192, &one_node).algorithm, "hier_multi_leader");
    }

    #[test]
    fn medians_and_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!((quantile(&v, 0.05), quantile(&v, 0.95)), (5.0, 95.0));
    }
}
