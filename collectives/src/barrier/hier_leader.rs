//! Leader-based hierarchical barrier: each node's ranks signal their leader (its lowest rank) up a
//! binomial tree (a gather of one-element signals), the N leaders run a dissemination barrier, and
//! each leader signals its node down a binomial tree (a broadcast of one element). After the first
//! phase a leader has heard from its node, after the second from every node; the third tells the
//! node. The trees keep a node's ranks off the leader's port while the leaders exchange signals.
//!
//! Cost (k = most ranks on a node, N nodes, e-byte signals; e = inter-node, i = intra-node
//! parameters): ⌈lg k⌉ α_i + (k − 1) eβ_i (fan-in) + ⌈lg N⌉ (α_e + eβ_e) + ⌈lg k⌉ (α_i + eβ_i)
//! (fan-out). Bytes across nodes: each leader sends ⌈lg N⌉ signals of one element, other ranks
//! none. Restrictions: a two-level topology. Paper: mamidala §4 (leader-based designs), thakur
//! §4.1.2 (the dissemination barrier), §4.2 (binomial trees).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};
use crate::two_level::{flat, sub_args, topology, GroupCall, Place};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Barrier,
    name: "hier_leader",
    summary: "binomial fan-in to each node's leader, dissemination among leaders, binomial fan-out",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let (nodes, k) = crate::two_level::shape(a);
    let rounds = f64::from(2 * ceil_log2(k) + ceil_log2(nodes));
    let signals = (k - 1 + u64::from(ceil_log2(nodes) + ceil_log2(k))) as f64;
    Cost::new(rounds, signals * f64::from(a.elem_size), 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node) = (a.rank, t.node_of(a.rank));
    let leaders = t.leaders();
    let local = t.ranks_on(node);
    let (pos, k) = (t.local_rank(me), local.len() as u32);
    let is_leader = leaders[node as usize] == me;
    let signal = Place::new(b.scratch(1), 0);
    let heard = Place::new(if is_leader { b.scratch(u64::from(k)) } else { Buf::Recv }, 0);
    let fan_in = GroupCall {
        alg: flat(Collective::Gather, "binomial")?,
        sub: sub_args(a, Collective::Gather, pos, k, 0, 1),
        ranks: local,
    };
    let mut entry = fan_in.embed(&mut b, signal, heard, &[])?.sinks;
    if is_leader {
        let sub = sub_args(a, Collective::Barrier, node, leaders.len() as u32, 0, 0);
        let none = Place::new(Buf::Recv, 0);
        let inter = GroupCall { alg: flat(Collective::Barrier, "dissemination")?, sub, ranks: &leaders };
        entry = inter.embed(&mut b, none, none, &entry)?.sinks;
    }
    let fan_out = GroupCall {
        alg: flat(Collective::Bcast, "binomial")?,
        sub: sub_args(a, Collective::Bcast, pos, k, 0, 1),
        ranks: local,
    };
    fan_out.embed(&mut b, signal, signal, &entry)?;
    Ok(b.finish())
}
