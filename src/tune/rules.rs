//! Tuned pieces → decision-file rules ([`RuleSpec`]), and merging the rules of one tuning run
//! (one operation set at one communicator size p) into a decision file.
//!
//! Layout of a tuned file, per operation: the rules of single communicator sizes (`p: [n, n]`,
//! one block per tuned n, ascending, each block's last rule without a `bytes` condition), then
//! any other p-ranged rules the file had, then the rules without a p condition (the fallback for
//! sizes that were not tuned; the embedded defaults' rules when the file is new). Merging a run
//! at p = n replaces the `p: [n, n]` block of each tuned operation and keeps everything else, so
//! `fabrun -n 2 … tune --out f.json` then `fabrun -n 4 … tune --merge f.json --out f.json`
//! gives one file for both sizes.

use crate::select::file::{DecisionFile, Provenance, RuleSpec, FORMAT_NAME, FORMAT_VERSION};

use super::search::Piece;

/// The rules of one operation at one communicator size: one per piece, with contiguous
/// inclusive `bytes` ranges; the last one without a `bytes` condition.
pub fn rules_for(op: &str, p: u32, commutative: Option<bool>, pieces: &[Piece]) -> Vec<RuleSpec> {
    let n = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(i, pc)| RuleSpec {
            op: op.to_owned(),
            fabric: None,
            p: Some([u64::from(p), u64::from(p)]),
            nodes: None,
            per_node: None,
            bytes: if i + 1 == n { None } else { Some([pc.lo, pc.hi]) },
            total: None,
            commutative,
            pow2: None,
            algorithm: pc.candidate.algorithm.clone(),
            params: pc.candidate.params.clone(),
            fallbacks: Vec::new(),
        })
        .collect()
}

fn single_p(r: &RuleSpec) -> Option<u64> {
    r.p.filter(|[a, b]| a == b).map(|[a, _]| a)
}

/// Merges `tuned` (rules of operation `op` at communicator size `p`, from [`rules_for`]) into
/// `file`: the old `p: [p, p]` rules of `op` are replaced, the other single-p blocks kept, both
/// ordered by p; then the operation's other rules in their order — or, when it has none, `tail`'s
/// rules for `op` (the fallback for sizes not tuned, ending with an unconditional rule).
pub fn merge(file: &mut DecisionFile, op: &str, p: u32, tuned: Vec<RuleSpec>, tail: &[RuleSpec]) {
    let p = u64::from(p);
    let mut order: Vec<String> = Vec::new();
    for r in &file.rules {
        if !order.contains(&r.op) {
            order.push(r.op.clone());
        }
    }
    if !order.iter().any(|o| o == op) {
        order.push(op.to_owned());
    }
    let mut rules = std::mem::take(&mut file.rules);
    rules.retain(|r| !(r.op == op && single_p(r) == Some(p)));
    if !rules.iter().any(|r| r.op == op && single_p(r).is_none()) {
        rules.extend(tail.iter().filter(|r| r.op == op).cloned());
    }
    rules.extend(tuned);
    let mut out = Vec::with_capacity(rules.len());
    for o in &order {
        let mine: Vec<&RuleSpec> = rules.iter().filter(|r| &r.op == o).collect();
        let mut singles: Vec<u64> = mine.iter().filter_map(|r| single_p(r)).collect();
        singles.sort_unstable();
        singles.dedup();
        for n in singles {
            out.extend(mine.iter().filter(|r| single_p(r) == Some(n)).map(|r| (*r).clone()));
        }
        out.extend(mine.iter().filter(|r| single_p(r).is_none()).map(|r| (*r).clone()));
    }
    file.rules = out;
}

/// A new, empty tuned file.
pub fn new_file(provenance: Provenance) -> DecisionFile {
    DecisionFile {
        format: FORMAT_NAME.to_owned(),
        version: FORMAT_VERSION,
        provenance: Some(provenance),
        rules: Vec::new(),
    }
}

/// Records a run in the provenance: tool, machine, fabric, time, notes; `p` joins the ranks.
pub fn stamp(file: &mut DecisionFile, machine: &str, fabric: &str, p: u32, created: &str, notes: &str) {
    let pv = file.provenance.get_or_insert_with(Provenance::default);
    pv.tool = "fabcoll tune".into();
    if pv.machine.is_empty() || pv.machine == machine {
        pv.machine = machine.to_owned();
    } else if !pv.machine.contains(machine) {
        pv.machine = format!("{}; {machine}", pv.machine);
    }
    if pv.fabric.is_empty() || pv.fabric == fabric {
        pv.fabric = fabric.to_owned();
    } else if !pv.fabric.split(", ").any(|f| f == fabric) {
        pv.fabric = format!("{}, {fabric}", pv.fabric);
    }
    if !pv.ranks.contains(&p) {
        pv.ranks.push(p);
        pv.ranks.sort_unstable();
    }
    pv.created = created.to_owned();
    let line = format!("p={p}: {notes}");
    let kept: Vec<&str> =
        pv.notes.split('\n').filter(|l| !l.is_empty() && !l.starts_with(&format!("p={p}: "))).collect();
    pv.notes = kept.into_iter().chain([line.as_str()]).collect::<Vec<_>>().join("\n");
}

/// `t` (seconds since the Unix epoch) as RFC 3339 UTC (one implementation, the model cache's).
pub use crate::select::model::cache::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::search::Candidate;

    fn piece(lo: u64, hi: u64, alg: &str) -> Piece {
        Piece { lo, hi, candidate: Candidate::new(alg) }
    }

    #[test]
    fn pieces_become_contiguous_rules_with_an_open_last_one() {
        let pieces = [piece(0, 999, "a"), piece(1000, 4095, "b"), piece(4096, u64::MAX, "c")];
        let r = rules_for("allreduce", 4, Some(true), &pieces);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].bytes, Some([0, 999]));
        assert_eq!(r[1].bytes, Some([1000, 4095]));
        assert_eq!(r[2].bytes, None);
        assert!(r.iter().all(|x| x.p == Some([4, 4]) && x.commutative == Some(true)));
    }

    #[test]
    fn merge_replaces_one_p_and_keeps_the_rest() {
        let open = |alg: &str, p: Option<[u64; 2]>| RuleSpec {
            p,
            bytes: None,
            ..rules_for("bcast", 1, None, &[piece(0, u64::MAX, alg)])[0].clone()
        };
        // The tail keeps its own order, p-ranged rules included.
        let tail = vec![open("t1", Some([1, 7])), open("t2", None)];
        let mut f = new_file(Provenance::default());
        merge(&mut f, "bcast", 4, rules_for("bcast", 4, None, &[piece(0, 9, "x"), piece(10, u64::MAX, "y")]), &tail);
        merge(&mut f, "bcast", 2, rules_for("bcast", 2, None, &[piece(0, u64::MAX, "z")]), &tail);
        let algs: Vec<&str> = f.rules.iter().map(|r| r.algorithm.as_str()).collect();
        assert_eq!(algs, ["z", "x", "y", "t1", "t2"]);
        // Re-tuning p = 4 replaces its block only; the tail is not duplicated.
        merge(&mut f, "bcast", 4, rules_for("bcast", 4, None, &[piece(0, u64::MAX, "w")]), &tail);
        let algs: Vec<&str> = f.rules.iter().map(|r| r.algorithm.as_str()).collect();
        assert_eq!(algs, ["z", "w", "t1", "t2"]);
        // Another operation goes after, with its own tail.
        merge(&mut f, "allreduce", 2, rules_for("allreduce", 2, None, &[piece(0, u64::MAX, "v")]), &[]);
        assert_eq!(f.rules.last().unwrap().algorithm, "v");
    }

    #[test]
    fn provenance_accumulates_sizes_and_notes() {
        let mut f = new_file(Provenance::default());
        stamp(&mut f, "m", "shm", 4, "t1", "four");
        stamp(&mut f, "m", "shm", 2, "t2", "two");
        stamp(&mut f, "m", "shm", 4, "t3", "four again");
        let pv = f.provenance.unwrap();
        assert_eq!(pv.ranks, vec![2, 4]);
        assert_eq!(pv.notes, "p=2: two\np=4: four again");
        assert_eq!((pv.fabric.as_str(), pv.created.as_str()), ("shm", "t3"));
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
