//! The hierarchical algorithms over regular and irregular placements: verified symbolically,
//! replayed by the simulator, refused without two levels, and their inter-node traffic checked
//! against the formulas of their module docs.

use std::sync::Arc;

use crate::args::{CollArgs, Collective, SEGMENT};
use crate::cost::{ceil_log2, floor_log2, Machine};
use crate::error::Error;
use crate::registry::{self, Algorithm};
use crate::schedule::{Schedule, StepKind};
use crate::topology::Topology;

/// 2×2, 3×2, 2×3, 1+3, the non-contiguous 0,2|1,3 and 0,3,6|1,2|4,5, and 4×4.
fn placements() -> Vec<Arc<Topology>> {
    [
        Topology::regular(2, 2),
        Topology::regular(3, 2),
        Topology::regular(2, 3),
        Topology::from_sizes(&[1, 3]),
        Topology::from_nodes(&[0, 1, 0, 1]),
        Topology::from_nodes(&[0, 1, 1, 0, 2, 2, 0]),
        Topology::regular(4, 4),
    ]
    .into_iter()
    .map(|t| Arc::new(t.unwrap()))
    .collect()
}

fn hierarchical() -> Vec<&'static Algorithm> {
    let algs: Vec<_> = registry::all().filter(|a| a.restrictions.two_level).collect();
    assert!(!algs.is_empty());
    algs
}

fn roots(coll: Collective, p: u32) -> Vec<u32> {
    if coll.is_rooted() {
        (0..p).collect()
    } else {
        vec![0]
    }
}

/// `a` (p ranks, `count`) with the counts its operation needs: the v-variants get `count` per
/// block (alltoallv: per pair) for `uneven` false, else uneven counts with zeros (alltoallv: an
/// irregular matrix). Other operations unchanged.
fn with_counts(a: CollArgs, count: u64, uneven: bool) -> CollArgs {
    let p = u64::from(a.size);
    let c = |i: u64| if uneven { (count + i * 7) % (count + 3) } else { count };
    match a.coll {
        Collective::Alltoallv => {
            let m: Vec<u64> = (0..p * p).map(c).collect();
            a.with_counts(m)
        }
        coll if coll.is_vector() => {
            let v: Vec<u64> = (0..p).map(c).collect();
            a.with_counts(v)
        }
        _ => a,
    }
}

/// Whether MPI_IN_PLACE means something for `coll` (at the root only for reduce and gather).
fn has_in_place(coll: Collective) -> bool {
    matches!(
        coll,
        Collective::Allreduce | Collective::Allgather | Collective::Reduce | Collective::Gather | Collective::Alltoall
    )
}

#[test]
fn every_hierarchical_algorithm_verifies_and_replays_on_every_placement() {
    let mut checked = 0;
    for alg in hierarchical() {
        for t in placements() {
            let p = t.size();
            let pc = u64::from(p);
            let counts = [0, 1, pc + 1, 7, 37, 1000, 1001];
            for root in roots(alg.coll, p) {
                for count in counts {
                    for in_place in [false, true].into_iter().filter(|&i| !i || has_in_place(alg.coll)) {
                        let segs: &[u64] = if count == pc + 1 { &[0, 4] } else { &[0] };
                        for &seg in segs {
                            let a = CollArgs::new(alg.coll, 0, p, count).with_root(root).with_topology(t.clone());
                            let mut a = with_counts(a, count, false);
                            a.in_place = in_place;
                            if seg > 0 {
                                a = a.with_param(SEGMENT, seg);
                            }
                            let what =
                                format!("{}:{} on {t} ({})", alg.coll, alg.name, crate::verify::describe_args(&a));
                            if alg.restrictions.violated(&a).is_some() {
                                // Only the multi-leader designs refuse a placement, an irregular one.
                                assert!(t.per_node().is_none(), "{what}: refused");
                                match crate::verify::check(alg, &a) {
                                    Err(Error::Restriction { reason, .. }) => {
                                        assert!(reason.contains("same number of ranks"), "{what}: {reason}")
                                    }
                                    other => panic!("{what}: {other:?}"),
                                }
                                continue;
                            }
                            if let Err(e) = crate::verify::check(alg, &a) {
                                panic!("{what}: {e}");
                            }
                            if let Err(e) = crate::sim::simulate_alg(alg, &a, &Machine::UNIT) {
                                panic!("{what}: simulation: {e}");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    // 8 algorithms on 7 placements (47 ranks), the rooted ones at every root; the multi-leader
    // allreduce refuses the 3 irregular placements.
    assert!(checked >= 2700, "{checked} cases");
}

#[test]
fn non_commutative_reductions_are_refused_by_their_restriction() {
    for alg in hierarchical().into_iter().filter(|a| a.coll.is_reduction()) {
        let a =
            CollArgs::new(alg.coll, 0, 4, 3).with_topology(Topology::regular(2, 2).unwrap()).with_commutative(false);
        let a = with_counts(a, 3, false);
        match crate::verify::check(alg, &a) {
            Err(Error::Restriction { reason, .. }) => assert!(reason.contains("commutative"), "{reason}"),
            other => panic!("{}:{}: {other:?}", alg.coll, alg.name),
        }
    }
}

#[test]
fn without_two_levels_they_are_refused_and_not_eligible() {
    let cases: [(Option<Topology>, &str); 3] = [
        (None, "needs a topology"),
        (Some(Topology::regular(1, 4).unwrap()), "share one node"),
        (Some(Topology::flat(4)), "node of its own"),
    ];
    let irregular = CollArgs::new(Collective::Allreduce, 0, 4, 5).with_topology(Topology::from_sizes(&[1, 3]).unwrap());
    let multi = registry::find(Collective::Allreduce, "hier_multi_leader").unwrap();
    let e = multi.schedule(&irregular).unwrap_err().to_string();
    assert!(e.contains("needs the same number of ranks on every node (placement 0|1,2,3)"), "{e}");
    for alg in hierarchical() {
        for (t, why) in &cases {
            let mut a = with_counts(CollArgs::new(alg.coll, 1, 4, 5), 5, false);
            a.topology = t.clone().map(Arc::new);
            match alg.schedule(&a) {
                Err(Error::Restriction { reason, .. }) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{}:{} with {t:?}: {other:?}", alg.coll, alg.name),
            }
            assert!(registry::eligible(&a).all(|e| e.name != alg.name), "{}:{} eligible", alg.coll, alg.name);
        }
        let a = with_counts(CollArgs::new(alg.coll, 1, 4, 5), 5, false).with_topology(Topology::regular(2, 2).unwrap());
        assert!(registry::eligible(&a).any(|e| e.name == alg.name), "{}:{} not eligible", alg.coll, alg.name);
    }
}

/// Bytes rank `s.rank` sends to ranks on other nodes.
fn cross_node_bytes(s: &Schedule, t: &Topology, elem: u64) -> u64 {
    s.iter()
        .filter_map(|(_, k, _)| match *k {
            StepKind::Send { peer, src } if !t.same_node(s.rank, peer) => Some(src.len * elem),
            _ => None,
        })
        .sum()
}

/// The lowest set bit of v ≥ 1; for v = 0 (the root) a bit above every position.
fn low_bit(v: u32, n: u32) -> u32 {
    if v == 0 {
        n.next_power_of_two().max(1) * 2
    } else {
        v & v.wrapping_neg()
    }
}

/// Bytes the leader at node position `v` (relative to the root's node) sends across nodes, by
/// the formula in each module doc; `k(u)` is the number of ranks on the node at relative position
/// u, `n` the bytes of one rank's vector or block.
fn leader_formula(coll: Collective, v: u32, nodes: u32, k: &dyn Fn(u32) -> u64, n: u64, elem: u64) -> u64 {
    let subtree = |v: u32| (v..(v + low_bit(v, nodes)).min(nodes)).map(k).sum::<u64>();
    match coll {
        Collective::Bcast => {
            let children = (0..32).map(|j| 1u32 << j).filter(|&m| m < low_bit(v, nodes) && v + m < nodes).count();
            children as u64 * n
        }
        Collective::Reduce => u64::from(v != 0) * n,
        Collective::Allreduce => {
            let lg = u64::from(floor_log2(u64::from(nodes)));
            let r = nodes - (1 << lg);
            match v {
                v if v < 2 * r && v.is_multiple_of(2) => n,
                v if v < 2 * r => (lg + 1) * n,
                _ => lg * n,
            }
        }
        Collective::Barrier => u64::from(ceil_log2(u64::from(nodes))) * elem,
        Collective::Allgather => ((0..nodes).map(k).sum::<u64>() - k((v + 1) % nodes)) * n,
        Collective::Gather => u64::from(v != 0) * subtree(v) * n,
        Collective::Scatter => (subtree(v) - k(v)) * n,
        // The leader sends its node's blocks for every other node (hier_node_pairs).
        Collective::Alltoall | Collective::Alltoallv => k(v) * ((0..nodes).map(k).sum::<u64>() - k(v)) * n,
        c => panic!("no formula for {c}"),
    }
}

/// Bytes node position `v` sends across nodes in `bcast:hier_scatter_ring`, by its module doc,
/// with `blk(i)` the bytes of block i: (the leader's scatter to its children's subtrees, the ring
/// rank's feed of every block but those of its right neighbour's subtree).
fn scatter_ring_formula(v: u32, nodes: u32, blk: &dyn Fn(u32) -> u64) -> (u64, u64) {
    let subtree = |c: u32| c..(c + low_bit(c, nodes)).min(nodes);
    let children = (0..32).map(|j| 1u32 << j).filter(|&m| m < low_bit(v, nodes) && v + m < nodes).map(|m| v + m);
    let scatter: u64 = children.flat_map(subtree).map(blk).sum();
    let theirs = subtree((v + 1) % nodes);
    let ring = (0..nodes - 1).map(|s| (v + nodes - s) % nodes).filter(|b| !theirs.contains(b));
    (scatter, ring.map(blk).sum::<u64>())
}

/// Bytes rank `r` sends across nodes in the multi-leader exchanges, by their module docs (`n` bytes
/// per block); `None` for the other algorithms.
fn exchange_formula(alg: &Algorithm, t: &Topology, r: u32, n: u64) -> Option<u64> {
    let (a, nodes, k_a) = (t.node_of(r), t.nodes(), t.local_size(r));
    let j = t.local_rank(r);
    let k = |m: u32| t.ranks_on(m).len() as u64;
    match (alg.coll, alg.name) {
        // Node a's local rank (d − 1) mod k_a carries a's blocks for the node d ahead.
        (Collective::Alltoall | Collective::Alltoallv, "hier_multi_leader") => {
            Some((1..nodes).filter(|d| (d - 1) % k_a == j).map(|d| u64::from(k_a) * k((a + d) % nodes) * n).sum())
        }
        // In each lane L it serves (L ≡ j mod k_a), rank r sends every lane block but node a + 1's.
        (Collective::Allgather | Collective::Allgatherv, "hier_multi_leader") => {
            let next = (a + 1) % nodes;
            let lanes = (j..t.max_per_node()).step_by(k_a as usize);
            Some(lanes.map(|l| (0..nodes).filter(|&v| v != next && u64::from(l) < k(v)).count() as u64 * n).sum())
        }
        // Rank r sends the blocks it leads (local index ≡ j mod k_a) of the other nodes' ranks.
        (Collective::ReduceScatter | Collective::ReduceScatterBlock, "hier_multi_leader") => {
            Some((0..t.size()).filter(|&d| !t.same_node(d, r) && t.local_rank(d) % k_a == j).count() as u64 * n)
        }
        _ => None,
    }
}

#[test]
fn inter_node_bytes_follow_the_documented_formulas() {
    let elem = 4u64;
    for alg in hierarchical() {
        for t in placements() {
            let (p, nodes) = (t.size(), t.nodes());
            for root in roots(alg.coll, p) {
                for count in [0u64, 1, 5] {
                    let a = CollArgs::new(alg.coll, 0, p, count).with_root(root).with_topology(t.clone());
                    let a = with_counts(a, count, false);
                    let leaders = if alg.coll.is_rooted() { t.leaders_with(root) } else { t.leaders() };
                    let root_node = if alg.coll.is_rooted() { t.node_of(root) } else { 0 };
                    let node_at = |v: u32| (v + root_node) % nodes;
                    let k_at = |v: u32| t.ranks_on(node_at(v)).len() as u64;
                    let mut total = 0;
                    if alg.restrictions.violated(&a).is_some() {
                        continue;
                    }
                    for r in 0..p {
                        let s = alg.schedule(&a.for_rank(r)).unwrap();
                        let got = cross_node_bytes(&s, &t, elem);
                        let node = t.node_of(r);
                        let v = (node + nodes - root_node) % nodes;
                        let blk = |i: u32| crate::blocks::block(count, u64::from(nodes), u64::from(i)).1 * elem;
                        let want = if let Some(w) = exchange_formula(alg, &t, r, count * elem) {
                            w
                        } else if alg.name == "hier_scatter_ring" {
                            // The root's node feeds the ring from its second rank, if it has one.
                            let on = t.ranks_on(node);
                            let ring_rank = if v == 0 { on.iter().copied().find(|&x| x != root) } else { None };
                            let (scatter, ring) = scatter_ring_formula(v, nodes, &blk);
                            let leads = leaders[node as usize] == r;
                            u64::from(leads) * scatter + u64::from(ring_rank.map_or(leads, |x| x == r)) * ring
                        } else if alg.name == "hier_recursive_doubling" {
                            // Every rank runs the network phase on the whole vector.
                            leader_formula(alg.coll, v, nodes, &k_at, count * elem, elem)
                        } else if alg.name == "hier_multi_leader" {
                            // Every rank leads the slice of its local rank.
                            let (k, j) = (u64::from(t.local_size(r)), u64::from(t.local_rank(r)));
                            leader_formula(alg.coll, v, nodes, &k_at, crate::blocks::block(count, k, j).1 * elem, elem)
                        } else if leaders[node as usize] == r {
                            leader_formula(alg.coll, v, nodes, &k_at, count * elem, elem)
                        } else {
                            0
                        };
                        assert_eq!(got, want, "{}:{} on {t} root {root} count {count}: rank {r}", alg.coll, alg.name);
                        total += got;
                    }
                    // Totals that do not depend on the tree's shape.
                    let n = count * elem;
                    let want_total = match alg.coll {
                        Collective::Bcast if alg.name == "hier_scatter_ring" => None,
                        Collective::Bcast | Collective::Reduce => Some(u64::from(nodes - 1) * n),
                        _ => None,
                    };
                    if let Some(w) = want_total {
                        assert_eq!(total, w, "{}:{} on {t} root {root} count {count}", alg.coll, alg.name);
                    }
                }
            }
        }
    }
}

/// Regular placements of 2..=5 nodes × 2..=4 ranks, uneven ones (1+3, 3+1, 2+1+3, 4+1+1+2,
/// 1+1+2, 5+2) and non-contiguous ones.
fn many_placements() -> Vec<Arc<Topology>> {
    let mut v: Vec<Topology> = Vec::new();
    for nodes in 2..=5 {
        for k in 2..=4 {
            v.push(Topology::regular(nodes, k).unwrap());
        }
    }
    for sizes in [&[1, 3][..], &[3, 1], &[2, 1, 3], &[4, 1, 1, 2], &[1, 1, 2], &[5, 2]] {
        v.push(Topology::from_sizes(sizes).unwrap());
    }
    for nodes in [&[0, 1, 0, 1, 1, 2][..], &[2, 0, 1, 0, 2, 1, 0, 0], &[0, 1, 2, 0, 1, 2]] {
        v.push(Topology::from_nodes(nodes).unwrap());
    }
    v.into_iter().map(Arc::new).collect()
}

/// The hierarchical exchanges and allgathers (alltoall(v), reduce_scatter(_block), allgather(v)) over
/// many placements, every
/// count class (0, 1, p + 1, 37), uniform and uneven counts (alltoallv: an irregular matrix with
/// zeros), in place where defined, pipelined in segments: verified and replayed on the two-level
/// model (one interface per node).
#[test]
fn exchanges_verify_over_many_placements_and_counts() {
    let colls = [
        Collective::Alltoall,
        Collective::Alltoallv,
        Collective::ReduceScatter,
        Collective::ReduceScatterBlock,
        Collective::Allgather,
        Collective::Allgatherv,
    ];
    let algs: Vec<_> = hierarchical().into_iter().filter(|a| colls.contains(&a.coll)).collect();
    assert_eq!(algs.len(), 9);
    let net = crate::sim::ModelParams::new(Machine::UNIT).with_network(crate::sim::Network { alpha: 4.0, beta: 2.0 });
    let mut checked = 0;
    for alg in algs {
        for t in many_placements() {
            let p = t.size();
            for count in [0, 1, u64::from(p) + 1, 37] {
                for uneven in [false, true].into_iter().filter(|&u| !u || alg.coll.is_vector()) {
                    for in_place in [false, true].into_iter().filter(|&i| !i || has_in_place(alg.coll)) {
                        for seg in [0u64, 4].into_iter().filter(|&s| s == 0 || count == 37) {
                            let a = CollArgs::new(alg.coll, 0, p, count).with_topology(t.clone());
                            let mut a = with_counts(a, count, uneven);
                            a.in_place = in_place;
                            if seg > 0 {
                                a = a.with_param(SEGMENT, seg);
                            }
                            let what =
                                format!("{}:{} on {t} ({})", alg.coll, alg.name, crate::verify::describe_args(&a));
                            crate::verify::check(alg, &a).unwrap_or_else(|e| panic!("{what}: {e}"));
                            crate::sim::simulate_alg_with(alg, &a, &net).unwrap_or_else(|e| panic!("{what}: {e}"));
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked >= 900, "{checked} cases");
}

/// The node-aggregated alltoall sends one network message per ordered node pair (none empty),
/// every other rank-to-rank message stays inside a node.
#[test]
fn alltoall_sends_one_network_message_per_node_pair() {
    for name in ["hier_leader", "hier_multi_leader"] {
        let alg = registry::find(Collective::Alltoall, name).unwrap();
        for t in many_placements() {
            let p = t.size();
            let a = CollArgs::new(Collective::Alltoall, 0, p, 3).with_topology(t.clone());
            let mut pairs = Vec::new();
            for r in 0..p {
                let s = alg.schedule(&a.for_rank(r)).unwrap();
                for (_, k, _) in s.iter() {
                    if let StepKind::Send { peer, src } = *k {
                        if !t.same_node(r, peer) {
                            assert_eq!(src.len, 3 * t.local_size(r) as u64 * t.local_size(peer) as u64, "{name} {t}");
                            pairs.push((t.node_of(r), t.node_of(peer)));
                        }
                    }
                }
            }
            pairs.sort_unstable();
            let n = t.nodes();
            let want: Vec<(u32, u32)> =
                (0..n).flat_map(|a| (0..n).filter(move |&m| m != a).map(move |m| (a, m))).collect();
            assert_eq!(pairs, want, "{name} on {t}");
        }
    }
}
