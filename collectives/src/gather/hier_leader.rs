//! Leader-based hierarchical gather: each node gathers its ranks' blocks at its leader (the root on
//! the root's node, the lowest rank elsewhere) with a binomial tree, then the N leaders gather the
//! nodes' block groups at the root with a binomial tree (a gatherv: nodes may hold different
//! numbers of ranks). The root receives the blocks in node order (node 0's ranks, then node 1's,
//! …); unless every node's ranks are contiguous and in node order, it then reorders them.
//!
//! Cost (n bytes per block, p ranks, N nodes, k = most ranks on a node, k_root = ranks on the
//! root's node; e = inter-node, i = intra-node parameters): ⌈lg k⌉ α_i + (k − 1) nβ_i +
//! ⌈lg N⌉ α_e + (p − k_root) nβ_e. Bytes across nodes: only leaders send across, each once, the
//! blocks of its subtree of the leaders' tree: for relative node position v ≠ 0 the ranks on
//! positions v .. v + 2^j (2^j v's lowest set bit) times n; the root sends nothing.
//! Restrictions: a two-level topology. Paper: mamidala §4 (leader-based designs), thakur §4.2
//! (binomial gather).

use crate::args::{CollArgs, Collective};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, position, reorder, rooted_blocks_cost, sub_args, topology, union, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Gather,
    name: "hier_leader",
    summary: "binomial gather in each node to its leader (the root leads its node), then among the leaders",
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
    let recv = Place::new(Buf::Recv, 0);
    // At the root, the node-ordered blocks (`Recv` itself when node order is rank order); at
    // another leader, its node's blocks.
    let ordered = match (me == a.root, t.is_blocked()) {
        (true, true) => recv,
        (true, false) => Place::new(b.scratch(a.p() * n), 0),
        (false, _) if me == leader => Place::new(b.scratch(u64::from(t.local_size(me)) * n), 0),
        (false, _) => recv,
    };
    let own = match me == a.root {
        true => Place::new(ordered.buf, ordered.off + u64::from(t.ranks_before(node)) * n),
        false => ordered,
    };
    let sub = sub_args(a, Collective::Gather, t.local_rank(me), local.len() as u32, position(local, leader)?, n);
    let gather = GroupCall { alg: flat(Collective::Gather, "binomial")?, sub, ranks: local };
    let intra = gather.embed(&mut b, Place::new(Buf::Send, 0), own, &[])?;
    if me == leader {
        let counts: Vec<u64> = (0..t.nodes()).map(|m| t.ranks_on(m).len() as u64 * n).collect();
        let mut sub = sub_args(a, Collective::Gatherv, node, t.nodes(), t.node_of(a.root), 0).with_counts(counts);
        sub.in_place = me == a.root;
        let tree = GroupCall { alg: flat(Collective::Gatherv, "binomial")?, sub, ranks: &leaders };
        let inter = tree.embed(&mut b, ordered, ordered, &intra.sinks)?;
        if me == a.root && ordered != recv {
            reorder(&mut b, t, n, ordered, recv, true, &union(&[&intra.sinks, &inter.writers]));
        }
    }
    Ok(b.finish())
}
