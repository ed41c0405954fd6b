//! Leader-based hierarchical broadcast: the root broadcasts to one leader per node (itself for its
//! own node, the lowest rank elsewhere) with a binomial tree among the N leaders, and each leader
//! then broadcasts on its node with a binomial tree among the node's ranks. The root's node starts
//! its intra-node tree at once; another node's starts when its leader has the data.
//!
//! Cost (n bytes, N nodes, k = most ranks on a node; e = inter-node, i = intra-node parameters):
//! ⌈lg N⌉ (α_e + nβ_e) + ⌈lg k⌉ (α_i + nβ_i). Bytes across nodes: the inter-node binomial tree's,
//! (N − 1)·n in all; a leader at relative position v sends n to each of its children (v + 2^j for
//! 2^j below v's lowest set bit, every 2^j < N for the root); other ranks send nothing across.
//! Restrictions: a two-level topology. Paper: mamidala §4.1 (leader-based bcast; the leaders'
//! phase is thakur §4.2's binomial tree instead of the paper's large-message scatter + ring).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, position, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Bcast,
    name: "hier_leader",
    summary: "binomial among one leader per node (the root leads its node), then binomial in each node",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let steps = f64::from(ceil_log2(nodes) + ceil_log2(k));
    Cost::new(steps, steps * n, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node) = (a.rank, t.node_of(a.rank));
    let leaders = t.leaders_with(a.root);
    let leader = leaders[node as usize];
    let data = Place::new(Buf::Recv, 0);
    let binomial = flat(Collective::Bcast, "binomial")?;
    let mut entry = Vec::new();
    if me == leader {
        let n = leaders.len() as u32;
        let sub = sub_args(a, Collective::Bcast, node, n, t.node_of(a.root), a.count);
        entry = GroupCall { alg: binomial, sub, ranks: &leaders }.embed(&mut b, data, data, &[])?.writers;
    }
    let local = t.ranks_on(node);
    let sub = sub_args(a, Collective::Bcast, t.local_rank(me), local.len() as u32, position(local, leader)?, a.count);
    GroupCall { alg: binomial, sub, ranks: local }.embed(&mut b, data, data, &entry)?;
    Ok(b.finish())
}
