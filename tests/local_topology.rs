//! A topology the program gives (`Communicator::set_topology`) over the local backend: checked
//! for size and for being equal on every rank, honoured by `split_by_node` and `node_leaders`,
//! inherited by `dup`. Ranks as threads; every collective has the executor's timeout (20 s).

mod common;

use fabcoll::{Collectives, Communicator, ReduceOp, Topology};

fn job<R: Send>(p: usize, f: impl Fn(Communicator) -> R + Sync) -> Vec<R> {
    let comms = Communicator::local_with(p, common::cfg()).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    })
}

#[test]
fn local_ranks_are_one_node() {
    job(3, |c| {
        assert_eq!(c.topology().to_string(), "1 node × 3 ranks");
        assert_eq!(c.split_by_node().unwrap().size(), 3);
        assert_eq!(c.node_leaders().unwrap().map(|l| l.size()), (c.rank() == 0).then_some(1));
    });
}

#[test]
fn a_program_s_topology_shapes_the_node_communicators() {
    job(4, |mut c| {
        // Nodes {0, 3} and {1, 2}.
        c.set_topology(Topology::from_nodes(&[0, 1, 1, 0]).unwrap()).unwrap();
        assert_eq!(c.topology().to_string(), "0,3|1,2");
        let node = c.split_by_node().unwrap();
        let mut members = [0u32; 2];
        node.allgather(&[c.rank()], &mut members).unwrap();
        assert_eq!(members, if c.rank() % 3 == 0 { [0, 3] } else { [1, 2] });
        let mut x = [c.rank() as i64; 5];
        node.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        assert_eq!(x, [3; 5]);
        match c.node_leaders().unwrap() {
            Some(l) => {
                assert!(c.rank() <= 1, "rank {} is no leader", c.rank());
                let mut leaders = [0u32; 2];
                l.allgather(&[c.rank()], &mut leaders).unwrap();
                assert_eq!(leaders, [0, 1]);
            }
            None => assert!(c.rank() >= 2, "leader {} got no leaders", c.rank()),
        }
        assert_eq!(**c.dup().unwrap().topology(), **c.topology());
    });
}

#[test]
fn a_topology_must_fit_and_agree() {
    let errs = job(3, |mut c| {
        // A wrong size on one rank fails every rank (the others are not left waiting).
        let sizes: &[u32] = if c.rank() == 1 { &[2, 2] } else { &[3] };
        let e = c.set_topology(Topology::from_sizes(sizes).unwrap()).unwrap_err().to_string();
        if c.rank() == 1 {
            assert!(e.contains("a topology of 4 ranks for a communicator of 3"), "{e}");
        } else {
            assert!(e.contains("rank 1 set a different topology than rank 0"), "{e}");
        }
        let mine = if c.rank() == 2 { vec![1, 2] } else { vec![2, 1] };
        let e = c.set_topology(Topology::from_sizes(&mine).unwrap()).unwrap_err().to_string();
        // Left as it was, and still usable.
        assert_eq!(c.topology().nodes(), 1);
        c.barrier().unwrap();
        e
    });
    for e in errs {
        assert!(e.contains("rank 2 set a different topology than rank 0"), "{e}");
    }
}

/// On a job over several nodes the probe fits two levels (issue 35): the node's parameters and
/// the network's α and β (from the leaders, one per node), the same on every rank. A single node
/// has no network level.
#[test]
fn the_probe_fits_a_network_level_on_several_nodes() {
    let two = job(4, |mut c| {
        c.set_topology(Topology::regular(2, 2).unwrap()).unwrap();
        let report = c.probe_model().unwrap();
        (report.params, report.samples.len())
    });
    let (params, samples) = two[0];
    assert!(two.iter().all(|(p, _)| *p == params), "every rank ends with rank 0's fit");
    let net = params.network.expect("a network level on two nodes");
    // On either level α or β may come out 0 on a loaded machine (the fit drops a negative term
    // and the per-call overhead takes it; seen on both levels of this 2 × 2 job), not both: the
    // times grow with messages or bytes.
    let fitted = |alpha: f64, beta: f64| alpha >= 0.0 && beta >= 0.0 && alpha + beta > 0.0;
    assert!(fitted(net.alpha, net.beta), "{net:?}");
    assert!(fitted(params.alpha, params.beta), "the node level is fitted too: {params}");
    assert!(samples > 0, "rank 0 keeps both levels' samples");
    let one = job(2, |c| c.probe_model().unwrap().params);
    assert!(one[0].network.is_none(), "one node, one level: {}", one[0]);
}
