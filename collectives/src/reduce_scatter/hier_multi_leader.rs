//! Multi-leader hierarchical reduce_scatter(_block): local rank i of a node of k ranks leads the
//! blocks of every rank whose local index is i mod k. The ranks of each node reduce-scatter the
//! vector by these groups (recursive halving for k = 2^m, pairwise exchange otherwise), so each
//! holds its node's partial of the blocks it leads; then each rank sends every led block to its
//! owner on the other nodes and reduces the N − 1 partials of its own block it receives. With k
//! ranks on every node the second phase is a pairwise reduce-scatter among the ranks of one local
//! index, one per node.
//!
//! Why this and not leaders: every node sends each other node's blocks once, (N − 1)/N·n bytes
//! through its interface either way, but here all k ranks reduce (k − 1)/k·n inside the node and
//! share the network work, where a leader would receive and reduce ⌈lg k⌉·n and send it all
//! alone.
//!
//! Cost (n bytes of the whole vector, N nodes of k ranks, p = N·k; i = intra-node, e = inter-node
//! parameters): lg k α_i + (k − 1)/k·n(β_i + γ) for k = 2^m, else (k − 1)α_i + (k − 1)/k·n(β_i + γ)
//! (thakur §4.4), then (N − 1)(α_e + n/p·β_e) + (N − 1)·n/p·γ. Each node's interface carries
//! (N − 1)/N·n each way. Input blocks are first copied into lead order (n bytes, local).
//! Bytes across nodes: rank r sends the blocks it leads that belong to other nodes' ranks:
//! Σ count(d) over d on other nodes with local(d) mod k_node(r) = local(r).
//! Restrictions: commutative op, a two-level topology (any placement; unequal nodes lead
//! unequal numbers of blocks). reduce_scatter (irregular counts) and reduce_scatter_block.
//! Paper: matsuda §2.3 (split_reduce inside each cluster, then counter_reduce between the
//! opposite nodes of the clusters, all at once), mamidala §4.2 (every core of a node reduces a part
//! of the vector), thakur §4.4 (recursive halving, pairwise exchange).

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::input_segs;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder, StepId};
use crate::topology::Topology;
use crate::two_level::{flat, sub_args, topology, union, GroupCall, Place};

const SUMMARY: &str = "reduce-scatter in each node by lead groups, then each rank sends its led blocks to their owners";

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::ReduceScatter,
    name: "hier_multi_leader",
    summary: SUMMARY,
    restrictions: Restrictions { commutative: true, ..Restrictions::TWO_LEVEL },
    params: &[],
    cost,
    build,
};

pub(crate) const ALGORITHM_BLOCK: Algorithm = Algorithm { coll: Collective::ReduceScatterBlock, ..ALGORITHM };

/// How rank `me`'s node splits the vector: the ranks each local rank leads (increasing), and
/// where each led block sits in the lead-ordered vector.
struct Leads {
    /// `groups[i]`: the ranks local rank i leads.
    groups: Vec<Vec<u32>>,
    /// Elements each local rank leads.
    counts: Vec<u64>,
}

impl Leads {
    fn of(a: &CollArgs, t: &Topology, node: u32) -> Leads {
        let k = t.ranks_on(node).len();
        let mut groups = vec![Vec::new(); k];
        for d in 0..a.size {
            groups[t.local_rank(d) as usize % k].push(d);
        }
        let counts = groups.iter().map(|g| g.iter().map(|&d| a.block_count(d)).sum()).collect();
        Leads { groups, counts }
    }
}

/// The flat reduce-scatter of the node phase: recursive halving on 2^m ranks, else pairwise.
fn node_phase(k: usize) -> &'static str {
    if k.is_power_of_two() {
        "recursive_halving"
    } else {
        "pairwise"
    }
}

/// The node phase's call at local position `j` of `k` ranks leading `counts`.
fn node_call(a: &CollArgs, j: u32, k: u32, counts: &[u64]) -> CollArgs {
    sub_args(a, Collective::ReduceScatter, j, k, 0, 0).with_counts(counts.to_vec())
}

fn cost(a: &CollArgs) -> Cost {
    let Some(t) = a.topology.as_deref() else {
        return Cost::default();
    };
    let es = f64::from(a.elem_size);
    let (me, node) = (a.rank, t.node_of(a.rank));
    let leads = Leads::of(a, t, node);
    let k = leads.groups.len();
    let j = t.local_rank(me) as usize;
    let intra = flat(Collective::ReduceScatter, node_phase(k))
        .map(|alg| (alg.cost)(&node_call(a, j as u32, k as u32, &leads.counts)))
        .unwrap_or_default();
    let led = &leads.groups[j];
    let sent: Vec<u64> = led.iter().filter(|&&d| !t.same_node(d, me)).map(|&d| a.block_count(d)).collect();
    let got = u64::from(t.nodes() - 1) * a.block_count(me);
    let msgs = sent.iter().filter(|&&c| c > 0).count().max(if got > 0 { t.nodes() as usize - 1 } else { 0 });
    let bytes = sent.iter().sum::<u64>().max(got) as f64 * es;
    intra + Cost::new(msgs as f64, bytes, got as f64 * es)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node) = (a.rank, t.node_of(a.rank));
    let local = t.ranks_on(node);
    let (j, k) = (t.local_rank(me), local.len() as u32);
    let leads = Leads::of(a, t, node);
    let segs = input_segs(a);
    // The input in lead order: local rank 0's blocks, then local rank 1's, … (on a node of one
    // rank that is the input's own order).
    let total: u64 = leads.counts.iter().sum();
    let (grouped, copies) = if k == 1 {
        (Place::new(Buf::Send, 0), Vec::new())
    } else {
        let buf = b.scratch(total);
        let mut copies = Vec::new();
        let mut at = 0;
        for &d in leads.groups.iter().flatten() {
            let (off, len) = segs[d as usize];
            if len > 0 {
                copies.push(b.copy(Region::new(Buf::Send, off, len), Region::new(buf, at, len), &[]));
            }
            at += len;
        }
        (Place::new(buf, 0), copies)
    };
    let mine = leads.counts[j as usize];
    let partial = b.scratch(mine);
    let sub = node_call(a, j, k, &leads.counts);
    let phase = GroupCall { alg: flat(Collective::ReduceScatter, node_phase(k as usize))?, sub, ranks: local };
    let ready = phase.embed(&mut b, grouped, Place::new(partial, 0), &copies)?.sinks;
    // Where each led block sits in `partial`.
    let led = &leads.groups[j as usize];
    let mut at = 0;
    let mut place = Vec::with_capacity(led.len());
    for &d in led {
        place.push((d, at));
        at += a.block_count(d);
    }
    let n = t.nodes();
    let count = a.block_count(me);
    let own = place.iter().find(|e| e.0 == me).map_or(0, |e| e.1);
    let result = Region::new(Buf::Recv, 0, count);
    let mut last: Vec<StepId> =
        if count > 0 { vec![b.copy(Region::new(partial, own, count), result, &ready)] } else { Vec::new() };
    // Each node's holder of this rank's block: its local rank j mod k_a.
    let tmp = (count > 0).then(|| b.scratch(count * u64::from(n - 1)));
    for dist in 1..n {
        let ahead = (node + dist) % n;
        for &(d, off) in place.iter().filter(|e| t.node_of(e.0) == ahead) {
            let len = a.block_count(d);
            if len > 0 {
                b.send(d, Region::new(partial, off, len), &ready);
            }
        }
        if let Some(tmp) = tmp {
            let behind = (node + n - dist) % n;
            let on = t.ranks_on(behind);
            let holder = on[j as usize % on.len()];
            let slot = Region::new(tmp, u64::from(dist - 1) * count, count);
            let r = b.recv(holder, slot, &[]);
            last = vec![b.reduce(slot, result, Order::DstFirst, &union(&[&last, &[r]]))];
        }
    }
    Ok(b.finish())
}
