//! Two-level recursive doubling, for short vectors: the k ranks of each node allreduce the whole
//! vector by recursive doubling, then the N ranks of local rank j (one per node) allreduce it
//! again by recursive doubling, every local rank at once. No leader: the network phase ends the
//! call, where the leader-based designs add an intra-node broadcast (a round more) after it. Every
//! round stays inside a node or crosses nodes whatever the placement; on 2^a nodes of 2^b
//! contiguous ranks it sends what flat recursive doubling sends.
//!
//! Cost (n bytes, N nodes of k ranks, e = inter-node, i = intra-node parameters), with
//! recursive doubling among m ranks taking R(m) = lg m rounds and lg m reductions for m = 2^a,
//! else ⌊lg m⌋ + 2 rounds and ⌊lg m⌋ + 1 reductions:
//! R(k) (α_i + nβ_i) + R(N) (α_e + nβ_e) + (its reductions) nγ.
//! Bytes across nodes: every rank sends what recursive doubling sends among N ranks on n bytes:
//! with r = N − 2^⌊lg N⌋, the rank on node v < 2r sends n if v is even and (⌊lg N⌋ + 1)·n if
//! odd; a rank on any other node ⌊lg N⌋·n (k times the leader-based allreduce's bytes: for short
//! vectors, where rounds cost more than bytes).
//! Restrictions: commutative op, a two-level topology with the same number of ranks on every
//! node. Paper: thakur §4.5 (recursive doubling) in mamidala §4.2's two phases, every core of a
//! node on the network at once as in the multi-leader designs, without splitting the vector.

use super::recursive_doubling::rounds;
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "hier_recursive_doubling",
    summary: "recursive doubling in each node, then every local rank recursive-doubles the whole vector across nodes",
    restrictions: Restrictions { commutative: true, equal_nodes: true, ..Restrictions::TWO_LEVEL },
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let ((ri, gi), (re, ge)) = (rounds(k), rounds(nodes));
    Cost::new(ri + re, (ri + re) * n, (gi + ge) * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, n) = (a.rank, t.node_of(a.rank), a.count);
    let local = t.ranks_on(node);
    let (j, k) = (t.local_rank(me), local.len() as u32);
    let rd = flat(Collective::Allreduce, "recursive_doubling")?;
    // The node's sum lands in scratch, the input of the network phase (which writes `Recv`), so
    // that neither phase reads what it writes, in place or not.
    let partial = Place::new(b.scratch(n), 0);
    let sub = sub_args(a, Collective::Allreduce, j, k, 0, n);
    let intra = GroupCall { alg: rd, sub, ranks: local }.embed(&mut b, Place::new(Buf::Send, 0), partial, &[])?;
    let peers: Vec<u32> = (0..t.nodes()).map(|m| t.ranks_on(m)[j as usize]).collect();
    let sub = sub_args(a, Collective::Allreduce, node, t.nodes(), 0, n);
    let across = GroupCall { alg: rd, sub, ranks: &peers };
    across.embed(&mut b, partial, Place::new(Buf::Recv, 0), &intra.sinks)?;
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::StepKind;
    use crate::topology::Topology;

    /// On 2 nodes of 2 contiguous ranks: one exchange with the node's other rank, then one with
    /// the same local rank of the other node, and no third round (the leader designs' broadcast).
    #[test]
    fn two_by_two_is_one_exchange_inside_the_node_then_one_across() {
        let t = std::sync::Arc::new(Topology::regular(2, 2).unwrap());
        for r in 0..4 {
            let a = CollArgs::new(Collective::Allreduce, r, 4, 3).with_topology(t.clone());
            let s = ALGORITHM.schedule(&a).unwrap();
            let peers: Vec<u32> = s
                .iter()
                .filter_map(|(_, k, _)| match *k {
                    StepKind::Send { peer, .. } => Some(peer),
                    _ => None,
                })
                .collect();
            assert_eq!(peers, [r ^ 1, r ^ 2], "rank {r}");
        }
    }

    /// Where a node's ranks are not contiguous, flat recursive doubling crosses nodes in every
    /// round; this crosses once per rank.
    #[test]
    fn on_a_scattered_placement_each_rank_crosses_nodes_once() {
        let t = std::sync::Arc::new(Topology::from_nodes(&[0, 1, 1, 0]).unwrap());
        let flat = crate::registry::find(Collective::Allreduce, "recursive_doubling").unwrap();
        let crossings = |alg: &Algorithm, r: u32| {
            let a = CollArgs::new(Collective::Allreduce, r, 4, 3).with_topology(t.clone());
            let s = alg.schedule(&a).unwrap();
            s.iter().filter(|(_, k, _)| matches!(**k, StepKind::Send { peer, .. } if !t.same_node(r, peer))).count()
        };
        for r in 0..4 {
            assert_eq!((crossings(&ALGORITHM, r), crossings(flat, r)), (1, 2), "rank {r}");
        }
    }
}
