//! Leader-based hierarchical scatter: the root scatters the nodes' block groups to one leader per
//! node (itself for its own node, the lowest rank elsewhere) with a binomial tree among the N
//! leaders (a scatterv: nodes may hold different numbers of ranks), and each leader scatters its
//! node's blocks with a binomial tree. The leaders' tree carries the blocks in node order (node
//! 0's ranks, then node 1's, …); unless every node's ranks are contiguous and in node order, the
//! root first reorders them.
//!
//! Cost (n bytes per block, p ranks, N nodes, k = most ranks on a node, k_root = ranks on the
//! root's node; e = inter-node, i = intra-node parameters): ⌈lg N⌉ α_e + (p − k_root) nβ_e +
//! ⌈lg k⌉ α_i + (k − 1) nβ_i. Bytes across nodes: only leaders send across, each its subtree's
//! blocks but its own node's: for relative node position v, the ranks on positions
//! v .. v + 2^j (2^j v's lowest set bit; every position for the root) less its own, times n.
//! Restrictions: a two-level topology. Paper: mamidala §4 (leader-based designs), thakur §4.2
//! (binomial scatter).

use crate::args::{CollArgs, Collective};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, position, reorder, rooted_blocks_cost, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Scatter,
    name: "hier_leader",
    summary: "binomial scatter among node leaders (the root leads its node), then in each node",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost: rooted_blocks_cost,
    build,
};

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, n) = (a.rank, t.node_of(a.rank), a.count);
    let leaders = t.leaders_with(a.root);
    let leader = leaders[node as usize];
    let local = t.ranks_on(node);
    let mut entry = Vec::new();
    // This node's blocks at its leader.
    let mine = Place::new(if me == leader { b.scratch(u64::from(t.local_size(me)) * n) } else { Buf::Send }, 0);
    if me == leader {
        let send = Place::new(Buf::Send, 0);
        let ordered = match me == a.root && !t.is_blocked() {
            true => Place::new(b.scratch(a.p() * n), 0),
            false => send,
        };
        let ready = if ordered != send { reorder(&mut b, t, n, ordered, send, false, &[]) } else { Vec::new() };
        let counts: Vec<u64> = (0..t.nodes()).map(|m| t.ranks_on(m).len() as u64 * n).collect();
        let sub = sub_args(a, Collective::Scatterv, node, t.nodes(), t.node_of(a.root), 0).with_counts(counts);
        let tree = GroupCall { alg: flat(Collective::Scatterv, "binomial")?, sub, ranks: &leaders };
        entry = tree.embed(&mut b, ordered, mine, &ready)?.writers;
    }
    let sub = sub_args(a, Collective::Scatter, t.local_rank(me), local.len() as u32, position(local, leader)?, n);
    let scatter = GroupCall { alg: flat(Collective::Scatter, "binomial")?, sub, ranks: local };
    scatter.embed(&mut b, mine, Place::new(Buf::Recv, 0), &entry)?;
    Ok(b.finish())
}
