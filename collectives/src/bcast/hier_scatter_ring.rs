//! Mamidala's large-message broadcast: the vector is cut into one block per node, scattered among
//! the node leaders down a binomial tree and completed by a ring allgather among the nodes, while
//! every block is handed on inside each node as soon as the node holds it. The root leads its
//! node; every other node is led by its lowest rank. Inside a node the blocks run down a chain
//! (leader, then the other ranks in order), each rank passing a block to the next as it arrives,
//! so every core copies the vector once and the node's copies overlap the network phase. That is
//! the paper's "network buffer shared by the node's processes, copied out while the ring runs",
//! with the one-sided writes of our fabrics in place of loads from a shared buffer. Blocks above
//! two [`PIECE_BYTES`] go in pieces of that size unless the call sets a `segment`, so the chain
//! starts before a whole block is in.
//!
//! On the root's node the ring is run by the chain's second rank, which sends each block on to
//! the next node as it comes down the chain (in the ring's order), so the root's port carries the
//! scatter and the chain, not the ring's feed too; on the other nodes the leader runs it. A node
//! does not send a block on the ring to a neighbour that got it from the scatter, so the ring
//! never rewrites what a leader is still scattering or handing to its node.
//!
//! Cost (n bytes, N nodes, k = most ranks on a node; e = inter-node, i = intra-node): the
//! leaders' scatter and ring, (⌈lg N⌉ + N − 1) α_e + 2(N − 1)/N n β_e, then a node's chain of m
//! messages of s = n/m bytes (m = N, or n / piece for pieces) and its last k − 2 hops:
//! (m + k − 2) α_i + (n + (k − 2) s) β_i (exact on two nodes; on more the chains overlap the ring).
//! Bytes across nodes: the leader at position v (nodes numbered from the root's) sends the blocks
//! of its children's scatter subtrees, and the rank that runs the ring there every block except
//! those its right neighbour's subtree holds; other ranks send nothing across.
//! Where the two-level model (`fabcoll sim --nodes`) puts it ahead of the other bcasts is drawn in
//! docs/measurements/2026-11-28-two-level-sim.md: an irregular region of node counts, node sizes
//! and vector sizes, which is why no embedded rule picks it.
//! Restrictions: a two-level topology. Paper: mamidala §4.1 (optimized MPI_Bcast: leader scatter,
//! ring among leaders, intra-node copies overlapped with it), thakur §4.2 (Van de Geijn).

use crate::allgather::layout::{Group, Layout};
use crate::args::{CollArgs, Collective};
use crate::blocks::block;
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::gather::binomial::subtree_end;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder, StepId};
use crate::topology::Topology;
use crate::two_level::{in_pieces, topology, PIECE_BYTES};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Bcast,
    name: "hier_scatter_ring",
    summary: "scatter + ring among node leaders, each block passed down a chain in its node as it arrives",
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = crate::two_level::shape(a);
    let (nf, kf) = (nodes as f64, k as f64);
    let leaders = Cost::new(f64::from(ceil_log2(nodes)) + nf - 1.0, 2.0 * (nf - 1.0) / nf * n, 0.0);
    if k < 2 {
        return leaders;
    }
    let block = n / nf;
    let piece = if block > 2.0 * PIECE_BYTES as f64 { PIECE_BYTES as f64 } else { block };
    let messages = if piece > 0.0 { (n / piece).ceil() } else { nf };
    Cost::new(leaders.alpha + messages + kf - 2.0, leaders.beta + n + (kf - 2.0) * piece, 0.0)
}

/// The blocks the leader at position `v` of `nodes` holds after the scatter: its subtree.
fn scattered(v: u32, nodes: u32) -> std::ops::Range<u32> {
    v..subtree_end(v, nodes)
}

/// The order in which node position `v` comes to hold the blocks, which its chain forwards them
/// in: the root's node in the order its ring feed sends them (block 0, then N − 1, N − 2, …, and
/// block 1, which the next node gets from the scatter, last); another node its scatter subtree,
/// then the ring's arrivals v − 1, v − 2, … that the subtree lacks.
fn arrival_order(v: u32, nodes: u32) -> Vec<u32> {
    if v == 0 {
        return std::iter::once(0).chain((1..nodes).rev()).collect();
    }
    let mine = scattered(v, nodes);
    let ring = (1..nodes).map(|s| (v + nodes - s) % nodes).filter(|b| !mine.contains(b));
    mine.clone().chain(ring).collect()
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let t = topology(a)?;
    let mut b = ScheduleBuilder::for_args(a);
    let (me, node, nodes) = (a.rank, t.node_of(a.rank), t.nodes());
    let root_node = t.node_of(a.root);
    let leaders = t.leaders_with(a.root);
    let pos = (node + nodes - root_node) % nodes;
    let node_at = |v: u32| (v + root_node) % nodes;
    let lay = Layout::new(Buf::Recv, (0..nodes).map(|v| block(a.count, u64::from(nodes), u64::from(v))).collect());
    let leader = leaders[node as usize];
    let local = t.ranks_on(node);
    let chain: Vec<u32> = std::iter::once(leader).chain(local.iter().copied().filter(|&r| r != leader)).collect();
    let c = chain.iter().position(|&r| r == me).unwrap_or(0);
    let (prev, next) = (c.checked_sub(1).map(|i| chain[i]), chain.get(c + 1).copied());
    let order = arrival_order(pos, nodes);
    // The steps after which this rank holds each block (none: it holds it from the start).
    let mut ready: Vec<Vec<StepId>> = vec![Vec::new(); nodes as usize];
    if me == leader && nodes > 1 {
        let g = Group { ranks: (0..nodes).map(|v| leaders[node_at(v) as usize]).collect(), me: pos };
        let (have, _) = crate::scatter::binomial::phase(&mut b, &lay, &g, &[]);
        for blk in scattered(pos, nodes) {
            ready[blk as usize] = have.clone();
        }
    }
    if let Some(from) = prev {
        for &blk in &order {
            ready[blk as usize] = lay.recv(&mut b, from, blk, blk + 1, &[]);
        }
    }
    if nodes > 1 && me == ring_rank(t, &leaders, a.root, node) {
        let right = ring_rank(t, &leaders, a.root, node_at(pos + 1));
        let left = ring_rank(t, &leaders, a.root, node_at(pos + nodes - 1));
        let (theirs, mine) = (scattered((pos + 1) % nodes, nodes), scattered(pos, nodes));
        for s in 0..nodes - 1 {
            let out = (pos + nodes - s) % nodes;
            if !theirs.contains(&out) {
                lay.send(&mut b, right, out, out + 1, &ready[out as usize]);
            }
            let arriving = (pos + nodes - s - 1) % nodes;
            if !mine.contains(&arriving) {
                ready[arriving as usize] = lay.recv(&mut b, left, arriving, arriving + 1, &[]);
            }
        }
    }
    if let Some(to) = next {
        for &blk in &order {
            lay.send(&mut b, to, blk, blk + 1, &ready[blk as usize]);
        }
    }
    Ok(in_pieces(a, b, block(a.count, u64::from(nodes), 0).1))
}

/// The rank that runs the leaders' ring for node `n` (`leaders` by node, the root leading its
/// own): its leader, except on the root's node of two or more ranks, where the chain's second rank
/// feeds the ring as the blocks come down the chain, so that the root's port carries the scatter
/// and the chain and not the ring's feed too.
fn ring_rank(t: &Topology, leaders: &[u32], root: u32, n: u32) -> u32 {
    if n == t.node_of(root) {
        t.ranks_on(n).iter().copied().find(|&r| r != root).unwrap_or(root)
    } else {
        leaders[n as usize]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::args::SEGMENT;
    use crate::schedule::StepKind;

    #[test]
    fn each_node_forwards_the_blocks_in_the_order_it_comes_to_hold_them() {
        assert_eq!(arrival_order(0, 4), [0, 3, 2, 1]);
        assert_eq!(arrival_order(1, 4), [1, 0, 3, 2]);
        assert_eq!(arrival_order(2, 4), [2, 3, 1, 0]);
        assert_eq!(arrival_order(2, 5), [2, 3, 1, 0, 4]);
        assert_eq!(arrival_order(0, 1), [0]);
    }

    /// Every rank but the root receives the vector exactly once, and across nodes only the
    /// leaders and the rank that runs the ring on the root's node do.
    #[test]
    fn each_rank_receives_the_vector_once() {
        for t in [Topology::regular(3, 3), Topology::from_nodes(&[1, 0, 1, 0, 0]), Topology::from_sizes(&[1, 2])] {
            let t = Arc::new(t.unwrap());
            for root in 0..t.size() {
                let ring_rank = t.ranks_on(t.node_of(root)).iter().copied().find(|&x| x != root);
                for r in 0..t.size() {
                    let a = CollArgs::new(Collective::Bcast, r, t.size(), 100).with_root(root).with_topology(t.clone());
                    let s = ALGORITHM.schedule(&a).unwrap();
                    let recvs: Vec<(u32, u64)> = s
                        .iter()
                        .filter_map(|(_, k, _)| match *k {
                            StepKind::Recv { peer, dst } => Some((peer, dst.len)),
                            _ => None,
                        })
                        .collect();
                    let total: u64 = recvs.iter().map(|x| x.1).sum();
                    assert_eq!(total, if r == root { 0 } else { 100 }, "rank {r} root {root} on {t}");
                    let crosses = recvs.iter().any(|(p, _)| !t.same_node(*p, r));
                    let leader = t.leaders_with(root)[t.node_of(r) as usize];
                    assert!(!crosses || r == leader || Some(r) == ring_rank, "rank {r} root {root} on {t}");
                }
            }
        }
    }

    #[test]
    fn large_blocks_go_in_pieces_unless_the_call_sets_a_segment() {
        let t = Arc::new(Topology::regular(2, 2).unwrap());
        let piece = PIECE_BYTES / 4;
        let a = |count: u64| CollArgs::new(Collective::Bcast, 3, 4, count).with_topology(t.clone());
        let longest = |a: &CollArgs| ALGORITHM.schedule(a).unwrap().steps().iter().map(|s| s.kind.len()).max();
        assert_eq!(longest(&a(4 * piece)), Some(2 * piece));
        assert_eq!(longest(&a(4 * piece + 2)), Some(piece));
        assert_eq!(longest(&a(6 * piece).with_param(SEGMENT, 0)), Some(3 * piece));
        for count in [4 * piece + 2, 6 * piece - 5] {
            crate::verify::check(&ALGORITHM, &a(count)).unwrap();
        }
    }
}
