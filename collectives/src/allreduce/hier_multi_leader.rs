//! Multi-leader hierarchical allreduce: with k ranks on every node, local rank j leads slice j of
//! the vector (k near-equal slices). The ranks of each node reduce-scatter the vector (pairwise
//! exchange), the N ranks of local rank j (one per node) allreduce slice j by recursive doubling,
//! and each node allgathers the slices (ring). All k ranks of a node work on the network at once
//! instead of one leader.
//!
//! Cost (n bytes, N nodes of k ranks, e = inter-node, i = intra-node parameters):
//! (k − 1) α_i + (k−1)/k n (β_i + γ) (reduce-scatter) + recursive doubling on n/k among N:
//! lg N (α_e + n/k (β_e + γ)) for N = 2^m, else (⌊lg N⌋ + 2)(α_e + n/k β_e) plus
//! (⌊lg N⌋ + 1) n/k γ; then (k − 1) α_i + (k−1)/k nβ_i (allgather).
//! Bytes across nodes: every rank sends what recursive doubling sends among N ranks on its
//! slice of n_j bytes: with r = N − 2^⌊lg N⌋, the rank on node v < 2r sends n_j if v is even and
//! (⌊lg N⌋ + 1)·n_j if odd; a rank on any other node ⌊lg N⌋·n_j.
//! Restrictions: commutative op, a two-level topology with the same number of ranks on every
//! node (a Restriction error otherwise). Paper: mamidala §4.2 (every core of a node reduces a
//! part of the vector; here each also carries its part across the network), thakur §4.4–4.5.

use super::recursive_doubling::rounds;
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::even_segs;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "hier_multi_leader",
    summary: "reduce-scatter in each node, every local rank allreduces its slice across nodes, allgather in each node",
    restrictions: Restrictions { commutative: true, equal_nodes: true, ..Restrictions::TWO_LEVEL },
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let (kf, slice) = ((k - 1) as f64, n / k as f64);
    let (msgs, reduces) = rounds(nodes);
    let intra = kf / k as f64 * n;
    Cost::new(2.0 * kf + msgs, 2.0 * intra + msgs * slice, intra + reduces * slice)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, n) = (a.rank, t.node_of(a.rank), a.count);
    let local = t.ranks_on(node);
    let (j, k) = (t.local_rank(me), local.len() as u32);
    let segs = even_segs(n, k);
    let lens: Vec<u64> = segs.iter().map(|s| s.1).collect();
    let (off, len) = segs[j as usize];
    // The reduce-scatter lands in scratch, so that in place it does not overwrite its own input.
    let slice = Place::new(b.scratch(len), 0);
    let sub = sub_args(a, Collective::ReduceScatter, j, k, 0, 0).with_counts(lens.clone());
    let rs = GroupCall { alg: flat(Collective::ReduceScatter, "pairwise")?, sub, ranks: local };
    let intra = rs.embed(&mut b, Place::new(Buf::Send, 0), slice, &[])?;
    let peers: Vec<u32> = (0..t.nodes()).map(|m| t.ranks_on(m)[j as usize]).collect();
    let sub = sub_args(a, Collective::Allreduce, node, t.nodes(), 0, len);
    let across = GroupCall { alg: flat(Collective::Allreduce, "recursive_doubling")?, sub, ranks: &peers };
    let inter = across.embed(&mut b, slice, Place::new(Buf::Recv, off), &intra.sinks)?;
    let mut sub = sub_args(a, Collective::Allgatherv, j, k, 0, 0).with_counts(lens);
    sub.in_place = true;
    let ag = GroupCall { alg: flat(Collective::Allgatherv, "ring")?, sub, ranks: local };
    ag.embed(&mut b, Place::new(Buf::Recv, 0), Place::new(Buf::Recv, 0), &inter.sinks)?;
    Ok(b.finish())
}
