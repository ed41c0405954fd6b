//! Tests of every alltoall(v) row: a small symbolic run of all ranks' schedules (each element is
//! tagged with its (source, destination, index), messages matched by per-pair sequence number)
//! that checks the results, deadlock freedom and races between unordered steps of one rank.

use super::ALGORITHMS;
use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;
use crate::schedule::{Buf, Region, Schedule, StepKind};
use std::collections::HashMap;

type Tok = Option<(u32, u32, u64)>;

struct Rank {
    s: Schedule,
    send: Vec<Tok>,
    recv: Vec<Tok>,
    scratch: Vec<Vec<Tok>>,
    done: Vec<bool>,
    seq: Vec<u64>,
}

impl Rank {
    fn buf(&mut self, b: Buf) -> &mut Vec<Tok> {
        match b {
            Buf::Send => &mut self.send,
            Buf::Recv => &mut self.recv,
            Buf::Scratch(i) => &mut self.scratch[i as usize],
        }
    }

    fn read(&mut self, r: Region) -> Vec<Tok> {
        self.buf(r.buf)[r.off as usize..r.end() as usize].to_vec()
    }

    fn write(&mut self, r: Region, data: &[Tok]) {
        self.buf(r.buf)[r.off as usize..r.end() as usize].copy_from_slice(data);
    }
}

/// Steps of `s` that are not ordered by its deps and touch overlapping data with a write.
fn races(s: &Schedule) -> Option<String> {
    let n = s.len();
    let words = n.div_ceil(64);
    let mut before = vec![vec![0u64; words]; n];
    for (id, _, deps) in s.iter() {
        let id = id as usize;
        for &d in deps {
            let d = d as usize;
            let (lo, hi) = before.split_at_mut(id);
            for (w, x) in hi[0].iter_mut().zip(&lo[d]) {
                *w |= x;
            }
            hi[0][d / 64] |= 1 << (d % 64);
        }
    }
    for (i, bi) in before.iter().enumerate() {
        for j in 0..i {
            if bi[j / 64] >> (j % 64) & 1 == 1 {
                continue;
            }
            let (a, b) = (s.step(i as u32), s.step(j as u32));
            let clash = |w: Option<Region>, x: &StepKind| {
                w.is_some_and(|w| [x.reads(), x.writes()].into_iter().flatten().any(|r| r.overlaps(&w)))
            };
            if clash(a.writes(), b) || clash(b.writes(), a) {
                return Some(format!("rank {}: steps {j} ({b}) and {i} ({a}) race", s.rank));
            }
        }
    }
    None
}

/// Runs `alg` on every rank of `args` and checks the alltoall(v) result.
fn run(alg: &Algorithm, args: &CollArgs) -> Result<(), String> {
    let p = args.size;
    let mut ranks = Vec::new();
    for r in 0..p {
        let a = args.for_rank(r);
        let s = alg.schedule(&a).map_err(|e| e.to_string())?;
        if let Some(e) = races(&s) {
            return Err(e);
        }
        let mut send = vec![None; a.send_len().unwrap() as usize];
        for j in 0..p {
            let off = a.send_displ(j).unwrap();
            for e in 0..a.pair_count(r, j) {
                send[(off + e) as usize] = Some((r, j, e));
            }
        }
        let mut recv = vec![None; a.recv_len().unwrap() as usize];
        if a.in_place {
            recv.copy_from_slice(&send);
            send.clear();
        }
        let scratch = s.scratch.iter().map(|&l| vec![None; l as usize]).collect();
        // Per-pair sequence number of each Send/Recv in step order.
        let mut count: HashMap<(bool, u32), u64> = HashMap::new();
        let seq = s
            .iter()
            .map(|(_, k, _)| match *k {
                StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => {
                    let c = count.entry((matches!(k, StepKind::Send { .. }), peer)).or_default();
                    *c += 1;
                    *c - 1
                }
                _ => 0,
            })
            .collect();
        let done = vec![false; s.len()];
        ranks.push(Rank { s, send, recv, scratch, done, seq });
    }
    let mut wire: HashMap<(u32, u32, u64), Vec<Tok>> = HashMap::new();
    loop {
        let mut progress = false;
        for (r, rk) in ranks.iter_mut().enumerate() {
            for id in 0..rk.s.len() {
                if rk.done[id] || rk.s.deps(id as u32).iter().any(|&d| !rk.done[d as usize]) {
                    continue;
                }
                let seq = rk.seq[id];
                match *rk.s.step(id as u32) {
                    StepKind::Send { peer, src } => {
                        let data = rk.read(src);
                        wire.insert((r as u32, peer, seq), data);
                    }
                    StepKind::Recv { peer, dst } => match wire.remove(&(peer, r as u32, seq)) {
                        None => continue,
                        Some(data) if data.len() as u64 != dst.len => {
                            return Err(format!("rank {r} step {id}: {} elements from {peer}", data.len()))
                        }
                        Some(data) => rk.write(dst, &data),
                    },
                    StepKind::Copy { src, dst } => {
                        let data = rk.read(src);
                        rk.write(dst, &data);
                    }
                    StepKind::Reduce { .. } => return Err("alltoall reduces".into()),
                }
                rk.done[id] = true;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    for (r, rk) in ranks.iter().enumerate() {
        if let Some(id) = rk.done.iter().position(|d| !d) {
            return Err(format!("deadlock: rank {r} step {id} ({}) never runs", rk.s.step(id as u32)));
        }
    }
    if !wire.is_empty() {
        return Err(format!("{} messages never received", wire.len()));
    }
    for (r, rk) in ranks.iter().enumerate() {
        let a = args.for_rank(r as u32);
        for i in 0..p {
            let off = a.recv_displ(i).unwrap();
            for e in 0..a.pair_count(i, r as u32) {
                let got = rk.recv[(off + e) as usize];
                if got != Some((i, r as u32, e)) {
                    return Err(format!("rank {r}: recv[{}] = {got:?}, expected ({i}, {r}, {e})", off + e));
                }
            }
        }
    }
    Ok(())
}

/// A deterministic irregular p×p matrix with zeros.
fn matrix(p: u32, seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..p * p)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = (x >> 33) % 7;
            if v < 2 {
                0
            } else {
                v - 1
            }
        })
        .collect()
}

fn applicable(alg: &Algorithm, p: u32) -> bool {
    !alg.restrictions.pow2 || p.is_power_of_two()
}

#[test]
fn every_row_is_correct_for_alltoall() {
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        for p in (1..=13u32).chain([16, 18, 20]) {
            for count in [0u64, 1, 2, u64::from(p) + 1] {
                for in_place in [false, true] {
                    let mut args = CollArgs::new(Collective::Alltoall, 0, p, count);
                    args.in_place = in_place;
                    let res = run(alg, &args);
                    if applicable(alg, p) {
                        if let Err(e) = res {
                            panic!("alltoall:{} p={p} count={count} in_place={in_place}: {e}", alg.name);
                        }
                    } else {
                        assert!(res.is_err_and(|e| e.contains("power-of-two")), "{} p={p}", alg.name);
                    }
                }
            }
        }
    }
}

#[test]
fn every_row_is_correct_for_alltoallv() {
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoallv) {
        for p in (1..=11u32).chain([12, 16, 18]).filter(|&p| applicable(alg, p)) {
            for seed in 0..3 {
                let args = CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(matrix(p, seed));
                if let Err(e) = run(alg, &args) {
                    panic!("alltoallv:{} p={p} seed={seed}: {e}", alg.name);
                }
            }
            let zeros = CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(vec![0; (p * p) as usize]);
            run(alg, &zeros).unwrap_or_else(|e| panic!("alltoallv:{} p={p} zeros: {e}", alg.name));
        }
    }
}

#[test]
fn n_barriers_parameter_is_checked() {
    for alg in ALGORITHMS.iter().filter(|a| a.name.ends_with("n_barriers")) {
        for n in [1u64, 2, 3, 100] {
            let args = CollArgs::new(alg.coll, 0, 8, 3).with_param("barriers", n);
            let args = if alg.coll == Collective::Alltoallv { args.with_counts(matrix(8, n)) } else { args };
            run(alg, &args).unwrap_or_else(|e| panic!("{}:{} n={n}: {e}", alg.coll, alg.name));
        }
        let bad = CollArgs::new(alg.coll, 0, 8, 3).with_param("barriers", 0);
        assert!(alg.schedule(&bad).is_err());
    }
}

#[test]
fn message_counts_match_the_cost_alpha_for_uniform_counts() {
    // For alltoall, each rank's messages (data + synchronization) equal the cost's α for the
    // algorithms whose every message is on the critical path.
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        for p in (2..=9u32).filter(|&p| applicable(alg, p)) {
            let args = CollArgs::new(Collective::Alltoall, 0, p, 3);
            let s = alg.schedule(&args).unwrap();
            let sends = s.iter().filter(|(_, k, _)| matches!(k, StepKind::Send { .. })).count();
            let cost = alg.cost_of(&args).unwrap();
            match alg.name {
                "simple" | "spreading_simple" | "pairwise_xor" | "pairwise_ring" => {
                    assert_eq!(sends as f64, cost.alpha, "{} p={p}", alg.name)
                }
                _ => assert!(sends as f64 >= cost.alpha * 0.5, "{} p={p}", alg.name),
            }
        }
    }
}

/// The crate verifier over p = 1..=20, counts {0, 1, p − 1, p, p + 1, 997}, in place or not, and
/// alltoallv with irregular matrices (with zeros, an all-zero one and one with a single sender).
#[test]
fn verifier_sweep() {
    use crate::verify::check;
    for alg in ALGORITHMS {
        for p in (1..=20u32).filter(|&p| applicable(alg, p)) {
            let p64 = u64::from(p);
            if alg.coll == Collective::Alltoall {
                for count in [0, 1, p64 - 1, p64, p64 + 1, 997] {
                    for in_place in [false, true] {
                        let mut args = CollArgs::new(Collective::Alltoall, 0, p, count);
                        args.in_place = in_place;
                        check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
                let mut seg = CollArgs::new(Collective::Alltoall, 0, p, 5).with_param("segment", 2);
                check(alg, &seg).unwrap_or_else(|e| panic!("{e}"));
                seg.in_place = true;
                check(alg, &seg).unwrap_or_else(|e| panic!("{e}"));
            } else {
                let mut single = vec![0u64; (p * p) as usize];
                single[(p as usize - 1) * p as usize] = 3;
                let mats =
                    [matrix(p, 7), matrix(p, 8).iter().map(|c| c * 50).collect(), vec![0; (p * p) as usize], single];
                for m in mats {
                    let args = CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(m);
                    check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
                }
                // Displacements with gaps, send blocks in reverse order (valid for every rank).
                let m = matrix(p, 9);
                let w = m.iter().copied().max().unwrap_or(0) + 1;
                let mut args = CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(m);
                args.displs = Some((0..p64).map(|j| (p64 - 1 - j) * w).collect());
                args.rdispls = Some((0..p64).map(|i| i * (w + 1) + 1).collect());
                check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
            }
            if alg.name.ends_with("n_barriers") {
                for n in [1u64, 2, p64 / 2 + 1, 1000] {
                    let args = CollArgs::new(alg.coll, 0, p, 2).with_param("barriers", n);
                    let args = if alg.coll == Collective::Alltoallv { args.with_counts(matrix(p, n)) } else { args };
                    check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
}

/// For alltoall the registry's cost terms are exactly the simulated critical path on the unit
/// machine, except simple's: its rank order makes every rank send to rank 0 first, and the
/// simulator's single-ported receivers serialize that contention (faraj-yuan's γ term).
#[test]
fn alltoall_cost_is_the_simulated_critical_path() {
    use crate::cost::Machine;
    use crate::sim::simulate_alg;
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        for p in [1u32, 2, 3, 5, 6, 8, 9, 12, 16] {
            if !applicable(alg, p) {
                continue;
            }
            for count in [0u64, 3] {
                let args = CollArgs::new(alg.coll, 0, p, count);
                let c = alg.cost_of(&args).unwrap();
                let s = simulate_alg(alg, &args, &Machine::UNIT).unwrap().critical_path;
                if alg.name == "simple" && p > 2 && count > 0 {
                    assert!(s.alpha > c.alpha && s.beta > c.beta, "simple p={p}: {c:?} vs {s:?}");
                } else {
                    assert_eq!((c.alpha, c.beta), (s.alpha, s.beta), "{} p={p} count={count}", alg.name);
                }
            }
        }
    }
}

/// Schedule generation stays near-linear in p: one rank's schedule at p = 16,384 for every row.
#[test]
fn large_p_builds_quickly() {
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        let t = std::time::Instant::now();
        let s = alg.schedule(&CollArgs::new(Collective::Alltoall, 77, 16_384, 2)).unwrap();
        let dt = t.elapsed();
        assert!(s.len() >= 2, "{}", alg.name);
        assert!(dt.as_secs_f64() < 5.0, "{}: {dt:?}", alg.name);
    }
}

/// In place, the pair family replaces block by block (one block of scratch); the others stage
/// the whole input once.
#[test]
fn in_place_scratch() {
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        let mut args = CollArgs::new(Collective::Alltoall, 3, 8, 5);
        args.in_place = true;
        let s = alg.schedule(&args).unwrap();
        if alg.restrictions.pow2 {
            assert_eq!(s.scratch, vec![5], "{}", alg.name);
        } else {
            assert_eq!(s.scratch.first(), Some(&40), "{}", alg.name);
        }
    }
}

/// The verifier at larger p (up to 64: cubes, squares, primes, powers of two).
#[test]
fn verifier_sweep_large_p() {
    use crate::verify::check;
    for alg in ALGORITHMS {
        for p in [21u32, 24, 27, 30, 31, 32, 33, 36, 48, 60, 64].into_iter().filter(|&p| applicable(alg, p)) {
            let args = if alg.coll == Collective::Alltoall {
                CollArgs::new(Collective::Alltoall, 0, p, 3)
            } else {
                CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(matrix(p, u64::from(p)))
            };
            check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
            if alg.coll == Collective::Alltoall {
                let mut args = args.clone();
                args.in_place = true;
                check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

/// The ring-like rows are every rank's rank-0 schedule rotated, the pair rows XOR-relabeled, so
/// the simulator can replay them symmetrically at large p.
#[test]
fn schedules_are_symmetric() {
    use crate::sim::{check_symmetry, Symmetry};
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        let sym = match alg.name {
            "simple" | "mesh_2d" | "mesh_3d" => continue,
            _ if alg.restrictions.pow2 => Symmetry::Xor,
            _ => Symmetry::Rotation,
        };
        for p in [2u32, 4, 5, 6, 8, 12, 16].into_iter().filter(|&p| applicable(alg, p)) {
            let args = CollArgs::new(Collective::Alltoall, 0, p, 3);
            let s0 = alg.schedule(&args).unwrap();
            for r in 1..p {
                let sr = alg.schedule(&args.for_rank(r)).unwrap();
                check_symmetry(&s0, &sr, sym).unwrap_or_else(|e| panic!("{} p={p}: {e}", alg.name));
            }
        }
    }
}

/// Costs and schedules of huge counts neither overflow nor panic.
#[test]
fn huge_counts() {
    for alg in ALGORITHMS.iter().filter(|a| a.coll == Collective::Alltoall) {
        let args = CollArgs::new(Collective::Alltoall, 1, 8, u64::MAX / 16);
        let c = alg.cost_of(&args).unwrap();
        assert!(c.beta.is_finite() && c.beta > 0.0, "{}", alg.name);
        alg.schedule(&args).unwrap();
        let too_big = CollArgs::new(Collective::Alltoall, 1, 8, u64::MAX / 4);
        assert!(alg.schedule(&too_big).is_err(), "{}", alg.name);
    }
}
