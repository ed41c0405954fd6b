//! TunedAt pieces → decision-file rules ([`RuleSpec`]), and merging the rules of one tuning run
//! (one operation set on one communicator: its size p and where its ranks sit, [`TunedAt`]) into a
//! decision file.
//!
//! Layout of a tuned file, per operation: the blocks of the tuned placements (`p: [n, n]`,
//! `nodes: [m, m]`, `per_node: [k, k]`; ordered by p, nodes, per_node; each block's last rule
//! without a `bytes` condition), then any other p-ranged rules the file had, then the rules
//! without a p condition (the fallback for sizes that were not tuned; the embedded defaults'
//! rules when the file is new). Merging a run replaces the block of its placement (and a block
//! of its p without placement conditions, which files from before them hold) and keeps
//! everything else, so runs at p = 2 and 4, on one node and on two, make one file.

use crate::select::file::{DecisionFile, Provenance, RuleSpec, FORMAT_NAME, FORMAT_VERSION};

use super::search::Piece;

/// Where a tuning run measured: the communicator's size, the nodes its ranks sit on and the most
/// ranks on one node. A tuned file holds one block of rules per placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TunedAt {
    pub p: u32,
    pub nodes: u32,
    pub per_node: u32,
}

impl TunedAt {
    /// The placement of `topology`'s ranks.
    pub fn of(topology: &fabcoll_collectives::topology::Topology) -> TunedAt {
        TunedAt { p: topology.size(), nodes: topology.nodes(), per_node: topology.max_per_node() }
    }

    /// A single node of `p` ranks.
    pub fn one_node(p: u32) -> TunedAt {
        TunedAt { p, nodes: 1, per_node: p }
    }

    /// `p=4` on one node, `p=4, 2×2` (nodes × most ranks per node) on several: the label of this
    /// placement's notes in the provenance.
    pub fn label(&self) -> String {
        if self.nodes == 1 {
            format!("p={}", self.p)
        } else {
            format!("p={}, {}×{}", self.p, self.nodes, self.per_node)
        }
    }
}

/// The rules of one operation at one placement: one per piece, with contiguous inclusive `bytes`
/// ranges; the last one without a `bytes` condition.
pub fn rules_for(op: &str, at: TunedAt, commutative: Option<bool>, pieces: &[Piece]) -> Vec<RuleSpec> {
    let n = pieces.len();
    let single = |v: u32| Some([u64::from(v), u64::from(v)]);
    pieces
        .iter()
        .enumerate()
        .map(|(i, pc)| RuleSpec {
            op: op.to_owned(),
            fabric: None,
            p: single(at.p),
            nodes: single(at.nodes),
            per_node: single(at.per_node),
            bytes: if i + 1 == n { None } else { Some([pc.lo, pc.hi]) },
            total: None,
            commutative,
            pow2: None,
            own_cpu: None,
            algorithm: pc.candidate.algorithm.clone(),
            params: pc.candidate.params.clone(),
            fallbacks: Vec::new(),
        })
        .collect()
}

fn single(range: Option<[u64; 2]>) -> Option<u64> {
    range.filter(|[a, b]| a == b).map(|[a, _]| a)
}

/// The block a tuned rule belongs to: its single p, then its placement — `None` (sorted after
/// the placements of the same p) for a block of a file from before placement conditions.
fn block(r: &RuleSpec) -> Option<(u64, Option<(u64, u64)>)> {
    let p = single(r.p)?;
    Some((p, single(r.nodes).zip(single(r.per_node))))
}

fn block_order(b: (u64, Option<(u64, u64)>)) -> (u64, bool, Option<(u64, u64)>) {
    (b.0, b.1.is_none(), b.1)
}

/// Merges `tuned` (rules of operation `op` at placement `at`, from [`rules_for`]) into `file`:
/// the old rules of `op` at `at` (or at its p without placement conditions) are replaced, the
/// other tuned blocks kept, all ordered by p and placement; then the operation's other rules in
/// their order — or, when it has none, `tail`'s rules for `op` (the fallback for sizes not tuned,
/// ending with an unconditional rule).
pub fn merge(file: &mut DecisionFile, op: &str, at: TunedAt, tuned: Vec<RuleSpec>, tail: &[RuleSpec]) {
    let p = u64::from(at.p);
    let mine = (p, Some((u64::from(at.nodes), u64::from(at.per_node))));
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
    rules.retain(|r| !(r.op == op && matches!(block(r), Some(b) if b == mine || b == (p, None))));
    if !rules.iter().any(|r| r.op == op && block(r).is_none()) {
        rules.extend(tail.iter().filter(|r| r.op == op).cloned());
    }
    rules.extend(tuned);
    let mut out = Vec::with_capacity(rules.len());
    for o in &order {
        let mine: Vec<&RuleSpec> = rules.iter().filter(|r| &r.op == o).collect();
        let mut blocks: Vec<_> = mine.iter().filter_map(|r| block(r)).collect();
        blocks.sort_unstable_by_key(|&b| block_order(b));
        blocks.dedup();
        for b in blocks {
            out.extend(mine.iter().filter(|r| block(r) == Some(b)).map(|r| (*r).clone()));
        }
        out.extend(mine.iter().filter(|r| block(r).is_none()).map(|r| (*r).clone()));
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

/// Records a run in the provenance: tool, machine, fabric, time, notes (one line per placement,
/// labelled [`TunedAt::label`]); `at.p` joins the ranks.
pub fn stamp(file: &mut DecisionFile, machine: &str, fabric: &str, at: TunedAt, created: &str, notes: &str) {
    let p = at.p;
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
    let label = format!("{}: ", at.label());
    let line = format!("{label}{notes}");
    let kept: Vec<&str> = pv.notes.split('\n').filter(|l| !l.is_empty() && !l.starts_with(&label)).collect();
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
        let r = rules_for("allreduce", TunedAt::one_node(4), Some(true), &pieces);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].bytes, Some([0, 999]));
        assert_eq!(r[1].bytes, Some([1000, 4095]));
        assert_eq!(r[2].bytes, None);
        assert!(r.iter().all(|x| x.p == Some([4, 4]) && x.commutative == Some(true)));
        assert!(r.iter().all(|x| x.nodes == Some([1, 1]) && x.per_node == Some([4, 4])));
    }

    #[test]
    fn merge_replaces_one_p_and_keeps_the_rest() {
        let open = |alg: &str, p: Option<[u64; 2]>| RuleSpec {
            p,
            bytes: None,
            nodes: None,
            per_node: None,
            ..rules_for("bcast", TunedAt::one_node(1), None, &[piece(0, u64::MAX, alg)])[0].clone()
        };
        // The tail keeps its own order, p-ranged rules included.
        let tail = vec![open("t1", Some([1, 7])), open("t2", None)];
        let mut f = new_file(Provenance::default());
        merge(
            &mut f,
            "bcast",
            TunedAt::one_node(4),
            rules_for("bcast", TunedAt::one_node(4), None, &[piece(0, 9, "x"), piece(10, u64::MAX, "y")]),
            &tail,
        );
        merge(
            &mut f,
            "bcast",
            TunedAt::one_node(2),
            rules_for("bcast", TunedAt::one_node(2), None, &[piece(0, u64::MAX, "z")]),
            &tail,
        );
        let algs: Vec<&str> = f.rules.iter().map(|r| r.algorithm.as_str()).collect();
        assert_eq!(algs, ["z", "x", "y", "t1", "t2"]);
        // Re-tuning p = 4 replaces its block only; the tail is not duplicated.
        merge(
            &mut f,
            "bcast",
            TunedAt::one_node(4),
            rules_for("bcast", TunedAt::one_node(4), None, &[piece(0, u64::MAX, "w")]),
            &tail,
        );
        let algs: Vec<&str> = f.rules.iter().map(|r| r.algorithm.as_str()).collect();
        assert_eq!(algs, ["z", "w", "t1", "t2"]);
        // Another operation goes after, with its own tail.
        merge(
            &mut f,
            "allreduce",
            TunedAt::one_node(2),
            rules_for("allreduce", TunedAt::one_node(2), None, &[piece(0, u64::MAX, "v")]),
            &[],
        );
        assert_eq!(f.rules.last().unwrap().algorithm, "v");
    }

    #[test]
    fn placements_of_one_p_keep_their_own_blocks_and_replace_a_block_without_placement() {
        let two_by_two = TunedAt { p: 4, nodes: 2, per_node: 2 };
        let mut f = new_file(Provenance::default());
        // A block from a file written before placement conditions: p only.
        let legacy = RuleSpec {
            nodes: None,
            per_node: None,
            ..rules_for("bcast", two_by_two, None, &[piece(0, u64::MAX, "old")])[0].clone()
        };
        f.rules.push(legacy);
        merge(&mut f, "bcast", two_by_two, rules_for("bcast", two_by_two, None, &[piece(0, u64::MAX, "multi")]), &[]);
        merge(
            &mut f,
            "bcast",
            TunedAt::one_node(4),
            rules_for("bcast", TunedAt::one_node(4), None, &[piece(0, u64::MAX, "one")]),
            &[],
        );
        let algs: Vec<&str> = f.rules.iter().map(|r| r.algorithm.as_str()).collect();
        assert_eq!(algs, ["one", "multi"], "ordered by nodes; the p-only block replaced");
        assert_eq!(f.rules[1].nodes, Some([2, 2]));
        assert_eq!(f.rules[1].per_node, Some([2, 2]));
        // Re-tuning one placement leaves the other alone.
        merge(&mut f, "bcast", two_by_two, rules_for("bcast", two_by_two, None, &[piece(0, u64::MAX, "again")]), &[]);
        let algs: Vec<&str> = f.rules.iter().map(|r| r.algorithm.as_str()).collect();
        assert_eq!(algs, ["one", "again"]);
        assert_eq!(two_by_two.label(), "p=4, 2×2");
        assert_eq!(TunedAt::one_node(4).label(), "p=4");
    }

    #[test]
    fn provenance_accumulates_sizes_and_notes() {
        let mut f = new_file(Provenance::default());
        stamp(&mut f, "m", "shm", TunedAt::one_node(4), "t1", "four");
        stamp(&mut f, "m", "shm", TunedAt::one_node(2), "t2", "two");
        stamp(&mut f, "m", "shm", TunedAt::one_node(4), "t3", "four again");
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
