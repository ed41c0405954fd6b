//! Leader-based hierarchical reduce: each node reduces to its leader (the root on the root's node,
//! the lowest rank elsewhere) with a binomial tree among its ranks, then the leaders reduce to the
//! root with a binomial tree among the N leaders.
//!
//! Cost (n bytes, N nodes, k = most ranks on a node; e = inter-node, i = intra-node parameters):
//! ⌈lg k⌉ (α_i + nβ_i + nγ) + ⌈lg N⌉ (α_e + nβ_e + nγ). Bytes across nodes: every leader but the
//! root sends its node's partial once, n each and (N − 1)·n in all; other ranks send nothing
//! across. Restrictions: commutative op (a node's ranks need not be contiguous), a two-level
//! topology. Paper: mamidala §4.2 (intra-node reduction at a leader), thakur §4.5 (binomial
//! reduce in both phases).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, position, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Reduce,
    name: "hier_leader",
    summary: "binomial reduce in each node to its leader (the root leads its node), then among the leaders",
    restrictions: Restrictions { commutative: true, ..Restrictions::TWO_LEVEL },
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let steps = f64::from(ceil_log2(nodes) + ceil_log2(k));
    Cost::new(steps, steps * n, steps * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, n) = (a.rank, t.node_of(a.rank), a.count);
    let leaders = t.leaders_with(a.root);
    let leader = leaders[node as usize];
    let binomial = flat(Collective::Reduce, "binomial")?;
    let local = t.ranks_on(node);
    // The node's partial lands in scratch at its leader (nothing lands elsewhere).
    let partial = Place::new(if me == leader { b.scratch(n) } else { Buf::Recv }, 0);
    let sub = sub_args(a, Collective::Reduce, t.local_rank(me), local.len() as u32, position(local, leader)?, n);
    let intra = GroupCall { alg: binomial, sub, ranks: local }.embed(&mut b, Place::new(Buf::Send, 0), partial, &[])?;
    if me == leader {
        let sub = sub_args(a, Collective::Reduce, node, leaders.len() as u32, t.node_of(a.root), n);
        GroupCall { alg: binomial, sub, ranks: &leaders }.embed(
            &mut b,
            partial,
            Place::new(Buf::Recv, 0),
            &intra.sinks,
        )?;
    }
    Ok(b.finish())
}
