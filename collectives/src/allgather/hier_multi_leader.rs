//! Multi-leader hierarchical allgather(v): every local rank carries blocks across the network, and
//! what arrives goes straight on to the node. Lane L (0 ≤ L < K, K = most ranks on a node) is
//! the ring, in node order, of each node's local rank L mod k_v (a node of fewer ranks lets one
//! rank serve several lanes); node v contributes the block of its local rank L when it has one.
//! Each rank runs the rings of its lanes and sends its own block and every block a ring brings
//! it to each rank of its node, as soon as that block has arrived, straight into the peer's
//! `Recv`. So all k ranks of a node use the network at once (k connections instead of the
//! leader's one), each block crosses a node's interface once per hop, and the node phase
//! overlaps the network phase instead of following it (no gather to a leader, no bcast after).
//! Blocks above two [`PIECE_BYTES`](crate::two_level::PIECE_BYTES) go in pieces of that size unless
//! the call sets a `segment`, so a block's first piece is on its way to the node while the rest is
//! still on the network.
//!
//! Cost (b bytes per block, N nodes of k ranks, e = inter-node, i = intra-node parameters):
//! (N − 1)(α_e + b β_e) (the lane ring) + (k − 1) N (α_i + b β_i) (every block from each local
//! peer); the k lanes share the node's interface: k(N − 1) b through it each way.
//! Bytes across nodes: rank r on node a sends, in each lane L it serves, the blocks of that lane
//! except the one of node a + 1 (the ring's next): Σ_L Σ_{v ≠ a+1, L < k_v} b_v.
//! Restrictions: a two-level topology. Paper: mamidala §4.1 (allgather with concurrent
//! intra-node and network traffic; every core of a node carries part of the network phase),
//! thakur §4.1 (ring).

use crate::allgather::layout::Layout;
use crate::allgather::recv_layout;
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};
use crate::topology::Topology;
use crate::two_level::{in_pieces, topology};

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "hier_multi_leader",
    summary: "every local rank rings its blocks across nodes, forwarding each arrival to its node at once",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

fn cost(a: &CollArgs) -> Cost {
    let (nodes, k) = crate::two_level::shape(a);
    let b = crate::allgather::gathered_bytes(a).0 / a.p() as f64;
    let (ring, local) = ((nodes - 1) as f64, ((k - 1) * nodes) as f64);
    Cost::new(ring + local, (ring + local) * b, 0.0)
}

/// The ranks of lane `lane` in node order, each node's local rank `lane` mod its size.
fn lane_ranks(t: &Topology, lane: u32) -> Vec<u32> {
    (0..t.nodes())
        .map(|v| {
            let on = t.ranks_on(v);
            on[lane as usize % on.len()]
        })
        .collect()
}

/// Lane `lane`'s blocks by node: node v's block is its local rank `lane`'s, empty when node v
/// has fewer ranks.
fn lane_layout(t: &Topology, all: &Layout, lane: u32) -> Layout {
    let blocks = (0..t.nodes())
        .map(|v| match t.ranks_on(v).get(lane as usize) {
            Some(&r) => {
                let reg = all.region(r);
                (reg.off, reg.len)
            }
            None => (0, 0),
        })
        .collect();
    Layout::new(Buf::Recv, blocks)
}

/// The lanes local rank `j` of a node of `k` ranks serves, when the largest node has `most`.
fn lanes_of(j: u32, k: u32, most: u32) -> impl Iterator<Item = u32> {
    (j..most).step_by(k as usize)
}

/// The node positions whose blocks the lane ring brings to node `m`, in arrival order.
fn arrivals(m: u32, nodes: u32) -> impl Iterator<Item = u32> {
    (1..nodes).map(move |s| (m + nodes - s) % nodes)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let all = recv_layout(a)?;
    let me = a.rank;
    let (m, nodes, most) = (t.node_of(me), t.nodes(), t.max_per_node());
    let local = t.ranks_on(m);
    let (j, k) = (t.local_rank(me), local.len() as u32);
    let own = all.region(me);
    let from_send = Region::new(Buf::Send, 0, own.len);
    if own.len > 0 {
        b.copy(from_send, own, &[]);
    }
    // Every lane ring this rank runs: each arriving block with the steps that wrote it.
    let mut arrived: Vec<(Region, Vec<StepId>)> = Vec::new();
    for lane in lanes_of(j, k, most) {
        let ranks = lane_ranks(t, lane);
        let lay = lane_layout(t, &all, lane);
        let (right, left) = (ranks[((m + 1) % nodes) as usize], ranks[((m + nodes - 1) % nodes) as usize]);
        let mut prev: Vec<StepId> = Vec::new();
        for (s, from) in arrivals(m, nodes).enumerate() {
            if s == 0 {
                // This node's block of the lane is this rank's own (or none): sent from `Send`.
                if lane == j && own.len > 0 {
                    b.send(right, from_send, &[]);
                }
            } else {
                let out = (from + 1) % nodes;
                lay.send(&mut b, right, out, out + 1, &prev);
            }
            prev = lay.recv(&mut b, left, from, from + 1, &[]);
            arrived.push((lay.region(from), prev.clone()));
        }
    }
    for d in 1..k {
        let peer = local[((j + d) % k) as usize];
        if own.len > 0 {
            b.send(peer, from_send, &[]);
        }
        for (reg, deps) in arrived.iter().filter(|(r, _)| r.len > 0) {
            b.send(peer, *reg, deps);
        }
    }
    // From each local peer, in the order it sends: its block, then what its lanes bring.
    for d in 1..k {
        let q = (j + k - d) % k;
        let peer = local[q as usize];
        let mut recv = |r: Region| {
            if r.len > 0 {
                b.recv(peer, r, &[]);
            }
        };
        recv(all.region(peer));
        for lane in lanes_of(q, k, most) {
            let ranks_of = |v: u32| t.ranks_on(v).get(lane as usize).copied();
            for from in arrivals(m, nodes) {
                if let Some(r) = ranks_of(from) {
                    recv(all.region(r));
                }
            }
        }
    }
    let largest = (0..a.size).map(|i| a.block_count(i)).max().unwrap_or(0);
    Ok(in_pieces(a, b, largest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::SEGMENT;
    use crate::two_level::PIECE_BYTES;

    #[test]
    fn a_small_node_serves_the_lanes_it_lacks() {
        assert_eq!(lanes_of(0, 1, 3).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(lanes_of(1, 2, 5).collect::<Vec<_>>(), [1, 3]);
        let t = Topology::from_sizes(&[1, 3]).unwrap();
        assert_eq!(lane_ranks(&t, 2), [0, 3]);
        assert_eq!(arrivals(0, 3).collect::<Vec<_>>(), [2, 1]);
    }

    #[test]
    fn large_blocks_go_in_pieces_unless_the_call_sets_a_segment() {
        let t = std::sync::Arc::new(Topology::regular(2, 2).unwrap());
        let piece = PIECE_BYTES / 4;
        let a = |count: u64| CollArgs::new(Collective::Allgather, 1, 4, count).with_topology(t.clone());
        let longest = |a: &CollArgs| ALLGATHER.schedule(a).unwrap().steps().iter().map(|s| s.kind.len()).max();
        assert_eq!(longest(&a(2 * piece)), Some(2 * piece));
        assert_eq!(longest(&a(2 * piece + 1)), Some(piece));
        assert_eq!(longest(&a(3 * piece).with_param(SEGMENT, 0)), Some(3 * piece));
        for count in [2 * piece + 1, 3 * piece - 5] {
            crate::verify::check(&ALLGATHER, &a(count)).unwrap();
        }
    }
}
