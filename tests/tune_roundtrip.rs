//! Decision files round-trip: a tuning result (synthetic measurements with crossovers and tuned
//! parameters) → rules → merged file → JSON → the decisions loader → the same choice, with the
//! same parameters, at every grid point and every change point's neighbours.

use fabcoll::collectives::{CollArgs, Collective};
use fabcoll::select::{Decisions, FabricClass, Features};
use fabcoll::tune::{self, rules, AlgSpace, Axis, Candidate, Outcome, Policy, Problem, Sample, Tuned};

/// Synthetic costs for allreduce at p: recursive_doubling short, ring (segmented when long)
/// medium-to-long, rabenseifner never best.
fn cost(c: &Candidate, s: u64, p: u32) -> f64 {
    let s = s as f64;
    let pf = f64::from(p);
    match c.algorithm.as_str() {
        "recursive_doubling" => 5.0 * pf.log2() + 0.002 * s,
        "ring" => {
            let base = 4.0 * pf + 0.0008 * s;
            match c.params.get("segment") {
                Some(&seg) => base * 0.8 + 0.5 * (s / seg as f64) + 30.0,
                None => base,
            }
        }
        _ => 100.0 + 0.001 * s,
    }
}

fn tuned(p: u32) -> Tuned {
    let def = |_: u64| Candidate::new("rabenseifner");
    let algorithms = ["recursive_doubling", "ring", "rabenseifner"]
        .iter()
        .map(|n| AlgSpace { name: (*n).into(), axes: vec![Axis::Segment { min: 4096 }] })
        .collect();
    let problem =
        Problem { grid: tune::grid(1, 16 << 20, 4), align: 4, algorithms, default: &def, policy: Policy::default() };
    tune::tune_each(&problem, &mut |c, s| Outcome::Ok(Sample::exact(cost(c, s, p))))
}

#[test]
fn tune_file_load_gives_the_same_choices() {
    let tail = Decisions::embedded().unwrap().file().rules.clone();
    let mut file = rules::new_file(Default::default());
    let runs: Vec<(u32, Tuned)> = [4u32, 2].into_iter().map(|p| (p, tuned(p))).collect();
    for (p, t) in &runs {
        // The calls below carry no topology, which selection reads as p nodes of one rank each.
        let at = rules::TunedAt { p: *p, nodes: *p, per_node: 1 };
        rules::merge(&mut file, "allreduce", at, rules::rules_for("allreduce", at, Some(true), &t.pieces), &tail);
        rules::stamp(&mut file, "test machine", "synthetic", at, "2026-11-22T14:00:00Z", "round trip");
    }
    let json = Decisions::new(file.clone()).unwrap().to_json().unwrap();
    let loaded = Decisions::from_json(&json).unwrap();
    assert_eq!(loaded.file(), &file);
    for (p, t) in &runs {
        assert!(t.pieces.len() >= 3, "a test worth its name has change points: {:?}", t.pieces);
        assert!(t.pieces.iter().any(|pc| pc.candidate.params.contains_key("segment")), "{:?}", t.pieces);
        let mut sizes: Vec<u64> = t.grid.iter().map(|g| g.bytes).collect();
        for pc in &t.pieces {
            sizes.extend([pc.lo, pc.lo.saturating_sub(1), pc.hi.min(1 << 30)]);
        }
        for bytes in sizes.into_iter().filter(|b| b % 4 == 0 && *b > 0) {
            let want = t.choice(bytes).unwrap();
            let args = CollArgs::new(Collective::Allreduce, 0, *p, bytes / 4).with_commutative(true);
            let f = Features {
                msg: bytes,
                total: bytes * u64::from(*p),
                p: *p,
                commutative: true,
                fabric: FabricClass::Node,
                own_cpu: true,
            };
            let (alg, params) = loaded.choose(&args, &f).unwrap();
            assert_eq!(alg.name, want.algorithm, "p={p} at {bytes} B");
            // `segment` is in bytes in files and in elements (f32: 4 B) in a call's parameters.
            let seg = params.get("segment").filter(|&v| v > 0);
            assert_eq!(seg, want.params.get("segment").map(|b| b / 4), "p={p} at {bytes} B");
        }
    }
    // Sizes that were not tuned fall back to the embedded defaults.
    let args = CollArgs::new(Collective::Allreduce, 0, 8, 1 << 20).with_commutative(true);
    let f =
        Features { msg: 4 << 20, total: 32 << 20, p: 8, commutative: true, fabric: FabricClass::Node, own_cpu: true };
    let (ours, _) = loaded.choose(&args, &f).unwrap();
    let (embedded, _) = Decisions::embedded().unwrap().choose(&args, &f).unwrap();
    assert_eq!(ours.name, embedded.name);
}
