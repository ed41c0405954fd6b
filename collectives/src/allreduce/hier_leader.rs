//! Leader-based hierarchical allreduce: each node reduces to its leader (its lowest rank) with a
//! binomial tree, the N leaders allreduce by recursive doubling, and each leader broadcasts the
//! result on its node with a binomial tree.
//!
//! Cost (n bytes, N nodes, k = most ranks on a node, e = inter-node, i = intra-node parameters):
//! 2⌈lg k⌉ (α_i + nβ_i) + ⌈lg k⌉ nγ + the recursive-doubling allreduce among N:
//! lg N (α_e + nβ_e + nγ) for N = 2^m, else (⌊lg N⌋ + 2)(α_e + nβ_e) + (⌊lg N⌋ + 1) nγ.
//! Bytes across nodes: only leaders send across, what recursive doubling sends among N ranks:
//! with r = N − 2^⌊lg N⌋, the leader at position v < 2r sends n if v is even (it folds into v + 1)
//! and (⌊lg N⌋ + 1)·n if odd; every other leader ⌊lg N⌋·n.
//! Restrictions: commutative op (a node's ranks need not be contiguous), a two-level topology.
//! Paper: mamidala §4.2 (reduction at the leader, inter-node allreduce, intra-node copy-out),
//! thakur §4.5 (recursive doubling, binomial trees).

use super::recursive_doubling::rounds;
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "hier_leader",
    summary: "binomial reduce in each node, recursive doubling among node leaders, binomial bcast in each node",
    restrictions: Restrictions { commutative: true, ..Restrictions::TWO_LEVEL },
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let lk = f64::from(ceil_log2(k));
    let (msgs, reduces) = rounds(nodes);
    Cost::new(2.0 * lk + msgs, (2.0 * lk + msgs) * n, (lk + reduces) * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, n) = (a.rank, t.node_of(a.rank), a.count);
    let leaders = t.leaders();
    let is_leader = leaders[node as usize] == me;
    let local = t.ranks_on(node);
    let (pos, k) = (t.local_rank(me), local.len() as u32);
    let result = Place::new(Buf::Recv, 0);
    // The node's partial lands in scratch at its leader (nothing lands elsewhere).
    let partial = Place::new(if is_leader { b.scratch(n) } else { Buf::Recv }, 0);
    let reduce = GroupCall {
        alg: flat(Collective::Reduce, "binomial")?,
        sub: sub_args(a, Collective::Reduce, pos, k, 0, n),
        ranks: local,
    };
    let intra = reduce.embed(&mut b, Place::new(Buf::Send, 0), partial, &[])?;
    let mut entry = intra.sinks;
    if is_leader {
        let sub = sub_args(a, Collective::Allreduce, node, leaders.len() as u32, 0, n);
        let inter = GroupCall { alg: flat(Collective::Allreduce, "recursive_doubling")?, sub, ranks: &leaders };
        // The leader's broadcast only reads the result: it waits for the writes into it.
        entry = inter.embed(&mut b, partial, result, &entry)?.writers;
    }
    let bcast = GroupCall {
        alg: flat(Collective::Bcast, "binomial")?,
        sub: sub_args(a, Collective::Bcast, pos, k, 0, n),
        ranks: local,
    };
    bcast.embed(&mut b, result, result, &entry)?;
    Ok(b.finish())
}
