//! Leader-based hierarchical barrier: a dissemination barrier among each node's ranks, one among
//! the N node leaders (each node's lowest rank), and again one in each node. After the first, a
//! leader has heard from its node; after the second, from every node; the third tells its node.
//!
//! Cost (k = most ranks on a node, N nodes, e-byte signals; e = inter-node, i = intra-node
//! parameters): 2⌈lg k⌉ (α_i + eβ_i) + ⌈lg N⌉ (α_e + eβ_e). Bytes across nodes: each leader sends
//! ⌈lg N⌉ signals of one element, other ranks none.
//! Restrictions: a two-level topology. Paper: mamidala §4 (leader-based designs), thakur §4.1.2
//! (the dissemination barrier).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, sub_args, topology, Group, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Barrier,
    name: "hier_leader",
    summary: "dissemination in each node, among node leaders, and in each node again",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let (nodes, k) = crate::two_level::shape(a);
    let rounds = f64::from(2 * ceil_log2(k) + ceil_log2(nodes));
    Cost::new(rounds, rounds * f64::from(a.elem_size), 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node) = (a.rank, t.node_of(a.rank));
    let leaders = t.leaders();
    let local = t.ranks_on(node);
    let dissemination = flat(Collective::Barrier, "dissemination")?;
    let none = Place::new(Buf::Recv, 0);
    let sub = sub_args(a, Collective::Barrier, t.local_rank(me), local.len() as u32, 0, 0);
    let intra = Group { alg: dissemination, sub, ranks: local };
    let mut entry = intra.embed(&mut b, none, none, &[])?.sinks;
    if leaders[node as usize] == me {
        let sub = sub_args(a, Collective::Barrier, node, leaders.len() as u32, 0, 0);
        entry = Group { alg: dissemination, sub, ranks: &leaders }.embed(&mut b, none, none, &entry)?.sinks;
    }
    intra.embed(&mut b, none, none, &entry)?;
    Ok(b.finish())
}
