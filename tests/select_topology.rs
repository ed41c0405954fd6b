//! Selection on a topology: the embedded decisions' `nodes` / `per_node` rules choose the
//! hierarchical algorithms on ranks spread over several nodes with several ranks each, where the
//! two-level simulator (the reference machine of docs/measurements/2026-11-28-hier-exchanges-sim.md)
//! says they win, and never on a flat placement (no topology, one node, a node per rank), where
//! every choice is the one the rules without topology conditions make. The new hierarchical
//! exchanges also run through the executor (local ranks as threads, 20 s timeout per call).

mod common;

use std::sync::Arc;

use fabcoll::collectives::registry;
use fabcoll::collectives::sim::{simulate_alg_sampled, ModelParams, Network};
use fabcoll::collectives::{CollArgs, Collective, Machine, Topology};
use fabcoll::select::file::DecisionFile;
use fabcoll::select::{Decisions, FabricClass, Features};

/// The embedded decisions without the rules that look at the placement: today's flat rules.
fn flat_rules() -> Decisions {
    let full = Decisions::embedded().unwrap().file().clone();
    let rules = full.rules.into_iter().filter(|r| r.nodes.is_none() && r.per_node.is_none()).collect();
    Decisions::new(DecisionFile { rules, ..Decisions::embedded().unwrap().file().clone() }).unwrap()
}

/// A call of `coll` on `p` ranks, `bytes` per block (4-byte elements), commutative.
fn call(coll: Collective, p: u32, bytes: u64) -> CollArgs {
    let count = bytes / 4;
    let a = CollArgs::new(coll, 0, p, count);
    match coll {
        Collective::Alltoallv => a.with_counts(vec![count; (p * p) as usize]),
        c if c.is_vector() => a.with_counts(vec![count; p as usize]),
        _ => a,
    }
}

fn choose(d: &Decisions, a: &CollArgs, fabric: FabricClass) -> &'static str {
    d.choose(a, &Features::of(a).unwrap().on(fabric)).unwrap().0.name
}

const SIZES: [u64; 9] = [0, 8, 64, 512, 4096, 32 << 10, 256 << 10, 1 << 20, 4 << 20];

#[test]
fn flat_placements_keep_the_flat_choices() {
    let (full, flat) = (Decisions::embedded().unwrap(), flat_rules());
    assert!(full.file().rules.len() > flat.file().rules.len(), "the defaults have placement rules");
    for coll in Collective::ALL {
        for p in [1u32, 2, 3, 4, 6, 8, 16, 64] {
            for bytes in SIZES {
                let a = call(coll, p, bytes);
                let placements = [None, Some(Topology::flat(p)), Some(Topology::regular(1, p).unwrap())];
                for t in placements {
                    let mut a = a.clone();
                    a.topology = t.map(Arc::new);
                    for fabric in [FabricClass::Node, FabricClass::Network] {
                        let (got, want) = (choose(full, &a, fabric), choose(&flat, &a, fabric));
                        assert_eq!(got, want, "{coll} p={p} {bytes} B on {fabric} {:?}", a.topology);
                        assert!(!got.starts_with("hier"), "{coll}: {got}");
                    }
                }
            }
        }
    }
}

/// The reference two-level machine of the placement rules: node α = 0.5 µs, 3 GB/s, γ = 1 ns/B;
/// network α = 3 µs at `gbit` Gbit/s, one interface per node.
fn two_level(gbit: f64) -> ModelParams {
    let node = Machine { alpha: 0.5e-6, beta: 0.33e-9, gamma: 1e-9, f_alpha: 1.0, f_beta: 1.0 };
    ModelParams::new(node).with_network(Network { alpha: 3e-6, beta: 8.0 / (gbit * 1e9) })
}

fn seconds(coll: Collective, name: &str, a: &CollArgs, m: &ModelParams) -> f64 {
    simulate_alg_sampled(registry::find(coll, name).unwrap(), a, m).unwrap().time
}

/// The hierarchical algorithm of each operation the placement rules choose (allgather: the
/// leader's below 4 KiB per rank, every rank a leader from there; barrier: the leader's).
fn hierarchical_of(coll: Collective, bytes: u64) -> &'static str {
    match coll {
        Collective::Allgather if bytes < 4096 => "hier_leader",
        Collective::Barrier => "hier_leader",
        _ => "hier_multi_leader",
    }
}

/// (operation, nodes, ranks per node, bytes per block, whether the rules choose the hierarchical
/// algorithm): inside each rule's region and just outside it.
const POINTS: [(Collective, u32, u32, u64, bool); 19] = [
    (Collective::Allreduce, 4, 4, 4096, true),
    (Collective::Allreduce, 8, 8, 16 << 10, true),
    (Collective::Allreduce, 2, 8, 256, false),
    (Collective::Allreduce, 4, 4, 256 << 10, false),
    (Collective::Allgather, 4, 8, 512, true),
    (Collective::Allgather, 4, 8, 32 << 10, false),
    (Collective::Allgather, 4, 8, 4096, true),
    (Collective::Allgather, 2, 4, 16 << 10, true),
    (Collective::Allgather, 3, 4, 4096, true),
    (Collective::Allgather, 3, 4, 32 << 10, false),
    (Collective::Allgather, 3, 5, 32 << 10, false),
    (Collective::Barrier, 2, 2, 0, true),
    (Collective::Barrier, 64, 16, 0, true),
    (Collective::Allgather, 8, 4, 8, false),
    (Collective::Alltoall, 4, 4, 8, true),
    (Collective::Alltoall, 2, 4, 4096, false),
    (Collective::ReduceScatterBlock, 4, 4, 64 << 10, true),
    (Collective::ReduceScatterBlock, 8, 4, 16, false),
    (Collective::ReduceScatter, 4, 4, 64 << 10, true),
];

#[test]
fn placements_choose_hierarchical_algorithms_where_the_two_level_model_says_they_win() {
    let d = Decisions::embedded().unwrap();
    let flat = flat_rules();
    for (coll, nodes, k, bytes, hier) in POINTS {
        let a = call(coll, nodes * k, bytes).with_topology(Topology::regular(nodes, k).unwrap());
        let got = choose(d, &a, FabricClass::Network);
        let what = format!("{coll} {nodes}×{k} {bytes} B");
        let (h, f) = (hierarchical_of(coll, bytes), choose(&flat, &a, FabricClass::Network));
        assert_eq!(got, if hier { h } else { f }, "{what}");
        for gbit in [12.5, 25.0] {
            let m = two_level(gbit);
            let (th, tf) = (seconds(coll, h, &a, &m), seconds(coll, f, &a, &m));
            if hier {
                assert!(th < tf, "{what} at {gbit} Gbit/s: {h} {th:e} s, {f} {tf:e} s");
            } else {
                assert!(tf <= th, "{what} at {gbit} Gbit/s: {f} {tf:e} s, {h} {th:e} s");
            }
        }
    }
}

#[test]
fn rules_fall_through_where_the_hierarchical_algorithm_cannot_run() {
    let d = Decisions::embedded().unwrap();
    let flat = flat_rules();
    // Unequal nodes (the multi-leader allreduce needs equal ones), a non-commutative op.
    let uneven = call(Collective::Allreduce, 8, 4096).with_topology(Topology::from_sizes(&[1, 3, 2, 2]).unwrap());
    let noncomm =
        call(Collective::Allreduce, 16, 4096).with_topology(Topology::regular(4, 4).unwrap()).with_commutative(false);
    for a in [uneven, noncomm] {
        let got = choose(d, &a, FabricClass::Network);
        assert_eq!(got, choose(&flat, &a, FabricClass::Network), "{a:?}");
        assert!(!got.starts_with("hier"));
    }
}

/// `FABCOLL_SELECT=model`: the cost model predicts every eligible algorithm, so with a network
/// level and a two-level topology it weighs the hierarchical ones too, and on a flat placement
/// it never sees them.
#[test]
fn the_cost_model_weighs_hierarchical_algorithms_on_two_levels_only() {
    use fabcoll::select::model::predict;
    let m = two_level(12.5);
    let a = call(Collective::Allreduce, 16, 4096).with_topology(Topology::regular(4, 4).unwrap());
    let est = predict(&a, &m).unwrap();
    assert_eq!(est[0].algorithm, "hier_multi_leader", "{est:?}");
    let flat = CollArgs { topology: Some(Arc::new(Topology::flat(16))), ..a.clone() };
    let est = predict(&flat, &m).unwrap();
    assert!(est.iter().all(|e| !e.algorithm.starts_with("hier")), "{est:?}");
}

/// Runs `f` on `p` local ranks (threads) placed by `t`; every call has the executor's timeout.
fn on_local_ranks(t: &Topology, f: impl Fn(&fabcoll::Communicator) + Sync) {
    let comms = fabcoll::Communicator::local_with(t.size() as usize, common::cfg()).unwrap();
    std::thread::scope(|s| {
        for mut c in comms {
            let (f, t) = (&f, t.clone());
            s.spawn(move || {
                c.set_topology(t).unwrap();
                f(&c)
            });
        }
    });
}

/// The new hierarchical exchanges forced by name run through the executor on an irregular,
/// non-contiguous placement and give the reference results (alltoall also in place; alltoallv
/// and reduce_scatter with uneven counts).
#[test]
fn hierarchical_exchanges_run_on_the_executor() {
    use fabcoll::{Collectives, Options, ReduceOp};
    let t = Topology::from_nodes(&[0, 1, 1, 0, 2, 2, 0]).unwrap();
    let p = t.size() as usize;
    on_local_ranks(&t, |c| {
        let r = c.rank() as usize;
        for name in ["hier_leader", "hier_multi_leader"] {
            let o = Options::algorithm(name);
            let send: Vec<i64> = (0..p * 3).map(|i| (r * 100 + i) as i64).collect();
            let want: Vec<i64> = (0..p * 3).map(|i| ((i / 3) * 100 + r * 3 + i % 3) as i64).collect();
            let mut recv = vec![0i64; p * 3];
            c.with(&o).alltoall(&send, &mut recv).unwrap();
            assert_eq!(recv, want, "alltoall:{name} rank {r}");
            let mut buf = send.clone();
            c.with(&o).alltoall_in_place(&mut buf).unwrap();
            assert_eq!(buf, want, "alltoall:{name} in place rank {r}");
            // Rank i sends (i + j) % 3 elements to rank j.
            let sc: Vec<usize> = (0..p).map(|j| (r + j) % 3).collect();
            let rc: Vec<usize> = (0..p).map(|i| (i + r) % 3).collect();
            let send: Vec<i64> = (0..sc.iter().sum::<usize>()).map(|i| (r * 1000 + i) as i64).collect();
            let mut recv = vec![0i64; rc.iter().sum()];
            c.with(&o).alltoallv(&send, &sc, None, &mut recv, &rc, None).unwrap();
            let want: Vec<i64> = (0..p)
                .flat_map(|i| {
                    let off: usize = (0..r).map(|j| (i + j) % 3).sum();
                    (0..rc[i]).map(move |e| (i * 1000 + off + e) as i64)
                })
                .collect();
            assert_eq!(recv, want, "alltoallv:{name} rank {r}");
        }
        let o = Options::algorithm("hier_multi_leader");
        let counts: Vec<usize> = (0..p).map(|i| (i * 5) % 4).collect();
        let total: usize = counts.iter().sum();
        let send: Vec<i64> = (0..total).map(|i| (r * 7 + i) as i64).collect();
        let mut recv = vec![0i64; counts[r]];
        c.with(&o).reduce_scatter(&send, &mut recv, &counts, &ReduceOp::Sum).unwrap();
        let off: usize = counts[..r].iter().sum();
        let want: Vec<i64> = (0..counts[r]).map(|e| (0..p).map(|q| (q * 7 + off + e) as i64).sum()).collect();
        assert_eq!(recv, want, "reduce_scatter rank {r}");
        let send: Vec<i64> = (0..p * 4).map(|i| (r + i) as i64).collect();
        let mut recv = vec![0i64; 4];
        c.with(&o).reduce_scatter_block(&send, &mut recv, &ReduceOp::Sum).unwrap();
        let want: Vec<i64> = (0..4).map(|e| (0..p).map(|q| (q + r * 4 + e) as i64).sum()).collect();
        assert_eq!(recv, want, "reduce_scatter_block rank {r}");
    });
}

/// Inside the allgather rules for several nodes (≥ 2 nodes of ≥ 4 ranks, ≥ 4 KiB per rank, total
/// up to 512 KiB at power-of-two p, 80 KiB otherwise), the multi-leader allgather beats what the
/// flat rules would choose at every sampled shape, on both reference networks.
#[test]
fn the_multi_leader_allgather_wins_at_every_sampled_shape_of_its_rules() {
    let (d, flat) = (Decisions::embedded().unwrap(), flat_rules());
    let mut worst = (f64::MAX, String::new());
    let mut n = 0;
    for nodes in [2u32, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128] {
        for k in [4u32, 5, 6, 7, 8, 12, 16, 32, 64] {
            for bytes in [4096u64, 5000, 6144, 8192, 12288, 16 << 10, 24 << 10, 32 << 10, 64 << 10, 128 << 10] {
                let (total, pow2) = (bytes * u64::from(nodes * k), (nodes * k).is_power_of_two());
                if !(pow2 && total <= 524287 || total <= 81919) || nodes * k > 2048 {
                    continue;
                }
                let a =
                    call(Collective::Allgather, nodes * k, bytes).with_topology(Topology::regular(nodes, k).unwrap());
                assert_eq!(choose(d, &a, FabricClass::Network), "hier_multi_leader", "{nodes}×{k} {bytes} B");
                let cur = choose(&flat, &a, FabricClass::Network);
                n += 1;
                for gbit in [12.5, 25.0] {
                    let m = two_level(gbit);
                    let r = seconds(Collective::Allgather, cur, &a, &m)
                        / seconds(Collective::Allgather, "hier_multi_leader", &a, &m);
                    if r < worst.0 {
                        worst = (r, format!("{nodes}x{k} {bytes} {gbit} {cur}"));
                    }
                }
            }
        }
    }
    assert!(n >= 60 && worst.0 > 1.0, "{n} shapes; the closest: {worst:?}");
}
