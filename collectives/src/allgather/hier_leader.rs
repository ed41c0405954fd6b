//! Leader-based hierarchical allgather: each node gathers its ranks' blocks at its leader (its
//! lowest rank) with a binomial tree, the N leaders allgather the nodes' block groups with a ring
//! (an allgatherv: nodes may hold different numbers of ranks), and each leader broadcasts the
//! whole result on its node with a binomial tree. The leaders exchange blocks in node order (node
//! 0's ranks, then node 1's, …); unless every node's ranks are contiguous and in node order, a
//! leader then reorders them into rank order.
//!
//! Cost (n bytes per block, p ranks, N nodes, k = most ranks on a node, k_min = fewest; e =
//! inter-node, i = intra-node parameters): ⌈lg k⌉ α_i + (k − 1) nβ_i (gather) +
//! (N − 1) α_e + (p − k_min) nβ_e (ring) + ⌈lg k⌉ (α_i + p·nβ_i) (bcast).
//! Bytes across nodes: only leaders send across, what the ring sends: every node's blocks but
//! those of the next node, (p − k_{v+1})·n for the leader at node position v.
//! Restrictions: a two-level topology. Paper: mamidala §4.1 (leader-based allgather: inter-node
//! ring among leaders, intra-node distribution), thakur §4.1–4.2 (ring, binomial trees).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, reorder, sub_args, topology, union, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "hier_leader",
    summary: "binomial gather in each node, ring among node leaders, binomial bcast in each node",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let k_min =
        a.topology.as_deref().map_or(1, |t| (0..t.nodes()).map(|m| t.ranks_on(m).len() as u64).min().unwrap_or(1));
    let lk = f64::from(ceil_log2(k));
    let ring = (nodes - 1) as f64;
    Cost::new(2.0 * lk + ring, (k - 1) as f64 * n + (a.p() - k_min) as f64 * n + lk * a.p() as f64 * n, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, n) = (a.rank, t.node_of(a.rank), a.count);
    let (leaders, local) = (t.leaders(), t.ranks_on(node));
    let is_leader = leaders[node as usize] == me;
    let (pos, k) = (t.local_rank(me), local.len() as u32);
    let recv = Place::new(Buf::Recv, 0);
    // Node-ordered blocks at the leader: `Recv` itself when node order is rank order.
    let total = a.p() * n;
    let ordered = match (is_leader, t.is_blocked()) {
        (true, false) => Place::new(b.scratch(total), 0),
        _ => recv,
    };
    let own = Place::new(ordered.buf, ordered.off + u64::from(t.ranks_before(node)) * n);
    let sub = sub_args(a, Collective::Gather, pos, k, 0, n);
    let gather = GroupCall { alg: flat(Collective::Gather, "binomial")?, sub, ranks: local };
    let intra = gather.embed(&mut b, Place::new(Buf::Send, 0), own, &[])?;
    let mut entry = intra.sinks.clone();
    if is_leader {
        let counts: Vec<u64> = (0..t.nodes()).map(|m| t.ranks_on(m).len() as u64 * n).collect();
        let mut sub = sub_args(a, Collective::Allgatherv, node, t.nodes(), 0, 0).with_counts(counts);
        sub.in_place = true;
        let ring = GroupCall { alg: flat(Collective::Allgatherv, "ring")?, sub, ranks: &leaders };
        let inter = ring.embed(&mut b, ordered, ordered, &entry)?;
        entry = union(&[&intra.sinks, &inter.writers]);
        if ordered != recv {
            entry = reorder(&mut b, t, n, ordered, recv, true, &entry);
        }
    }
    let sub = sub_args(a, Collective::Bcast, pos, k, 0, total);
    GroupCall { alg: flat(Collective::Bcast, "binomial")?, sub, ranks: local }.embed(&mut b, recv, recv, &entry)?;
    Ok(b.finish())
}
