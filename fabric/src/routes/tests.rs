//! A routed job of 4 in-process ranks on 2 nodes ({0, 1} and {2, 3}): the network is one local
//! fabric of 4 ranks, each node one of 2, so every route can be watched from one thread.

use std::time::{Duration, Instant};

use super::RoutedEndpoint;
use crate::endpoint::{Completion, Endpoint, RouteCount, RouteCounters};
use crate::error::Error;
use crate::mr::{Access, NodeKey, RemoteMr};
use crate::{LocalFabric, WaitPolicy};

const WAIT: WaitPolicy = WaitPolicy { spin: 4, yields: 1, max_sleep: Duration::from_millis(2) };

/// Connected endpoints of `fabric`, one per rank.
fn connected(fabric: &LocalFabric) -> Vec<Box<dyn Endpoint>> {
    let mut eps: Vec<Box<dyn Endpoint>> =
        (0..fabric.size()).map(|r| Box::new(fabric.endpoint(r, WAIT).unwrap()) as Box<dyn Endpoint>).collect();
    let blobs: Vec<_> = eps.iter().map(|e| e.address().unwrap()).collect();
    eps.iter_mut().for_each(|e| e.insert_peers(&blobs).unwrap());
    eps
}

/// The four routed ranks, by global rank.
fn job() -> Vec<RoutedEndpoint> {
    let mut network = connected(&LocalFabric::new(4).unwrap()).into_iter();
    let mut out = Vec::new();
    for members in [vec![0, 1], vec![2, 3]] {
        for node in connected(&LocalFabric::new(2).unwrap()) {
            let net = network.next().unwrap();
            out.push(RoutedEndpoint::new(node, net, members.clone(), WAIT).unwrap());
        }
    }
    out
}

fn drain(ep: &mut RoutedEndpoint) -> Vec<Completion> {
    let mut out = Vec::new();
    while ep.poll(&mut out).unwrap() > 0 {}
    out
}

fn count(msgs: u64, bytes: u64) -> RouteCount {
    RouteCount { msgs, bytes }
}

#[test]
fn writes_go_by_route_and_arrive_under_global_ranks() {
    let mut eps = job();
    let dst: Vec<_> = eps.iter_mut().map(|e| e.alloc(64, Access::REMOTE_WRITE).unwrap()).collect();
    let src = eps[1].alloc(64, Access::LOCAL).unwrap();
    src.write_at(0, &[7; 64]).unwrap();
    // Rank 1 writes to its node peer 0, to the remote ranks 2 and 3, and to itself.
    for (peer, imm) in [(0, 10), (2, 12), (3, 13), (1, 11)] {
        let d = dst[peer].remote().slice(8, 16).unwrap();
        eps[1].write(peer, src.slice(0, 16).unwrap(), d, Some(imm), peer as u64).unwrap();
    }
    let counted = eps[1].route_counters().unwrap();
    assert_eq!(counted, RouteCounters { node: count(2, 32), network: count(2, 32) });
    let got: Vec<Vec<Completion>> = eps.iter_mut().map(drain).collect();
    for (peer, imm) in [(0, 10), (2, 12), (3, 13), (1, 11)] {
        let got = &got[peer];
        assert!(got.contains(&Completion::WriteArrived { peer: 1, imm }), "rank {peer}: {got:?}");
        let mut b = [0u8; 24];
        dst[peer].read_at(0, &mut b).unwrap();
        assert_eq!((&b[..8], &b[8..]), (&[0u8; 8][..], &[7u8; 16][..]), "rank {peer}");
    }
    for ctx in 0..4 {
        assert!(got[1].contains(&Completion::WriteDone { ctx }), "{:?}", got[1]);
    }
    assert_eq!(eps[0].route_counters(), Some(RouteCounters::default()), "a rank that sent nothing counts nothing");
}

#[test]
fn control_messages_go_by_route_and_wait_sees_both() {
    let mut eps = job();
    eps[2].send_ctrl(3, 5, b"node").unwrap();
    eps[0].send_ctrl(3, 6, b"network!").unwrap();
    let c = eps[2].route_counters().unwrap();
    assert_eq!((c.node, c.network), (count(1, 4), count(0, 0)));
    assert_eq!(eps[0].route_counters().unwrap().network, count(1, 8));
    let mut got = Vec::new();
    while got.len() < 2 {
        eps[3].wait(&mut got, Some(Duration::from_secs(5))).unwrap();
    }
    assert!(got.contains(&Completion::Ctrl { peer: 2, tag: 5, data: b"node".to_vec() }), "{got:?}");
    assert!(got.contains(&Completion::Ctrl { peer: 0, tag: 6, data: b"network!".to_vec() }), "{got:?}");
}

#[test]
fn wait_times_out_when_nothing_comes() {
    let mut eps = job();
    let t = Instant::now();
    let e = eps[0].wait(&mut Vec::new(), Some(Duration::from_millis(30))).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("rank 0"), "{e}");
    assert!(t.elapsed() >= Duration::from_millis(30) && t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn descriptors_carry_both_keys_and_only_node_peers_map() {
    let mut eps = job();
    let mine = eps[0].alloc(4096, Access::REMOTE_RW).unwrap();
    let d = mine.remote();
    let node = d.node.expect("a routed registration has a node-local key");
    assert_eq!((d.len, d.access), (4096, Access::REMOTE_RW));
    assert_eq!(RemoteMr::from_bytes(&d.to_bytes()).unwrap(), d);
    mine.write_at(0, b"shared").unwrap();
    let m = eps[1].map_remote(0, &d).unwrap();
    let mut b = [0u8; 6];
    // SAFETY: the mapping is 4096 bytes long and nobody writes these bytes now.
    unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), b.as_mut_ptr(), 6) };
    assert_eq!(&b, b"shared");
    let e = eps[2].map_remote(0, &d).unwrap_err();
    assert!(e.to_string().contains("rank 0's memory: it is on another node"), "{e}");
    // A network-only descriptor cannot reach a node peer; a foreign key names the global rank.
    let src = eps[1].alloc(8, Access::LOCAL).unwrap();
    let e = eps[1].write(0, src.range(), d.network_part().slice(0, 8).unwrap(), None, 0).unwrap_err();
    assert!(e.to_string().contains("rank 0's registration") && e.to_string().contains("no node-local key"), "{e}");
    let forged = RemoteMr { node: Some(NodeKey { key: node.key ^ 0xff, ..node }), ..d };
    match eps[1].write(0, src.range(), forged.slice(0, 8).unwrap(), None, 0).unwrap_err() {
        Error::InvalidKey { peer, .. } => assert_eq!(peer, 0),
        e => panic!("expected InvalidKey naming rank 0, got {e}"),
    }
    // Nothing failed was counted.
    assert_eq!(eps[1].route_counters(), Some(RouteCounters::default()));
}

#[test]
fn a_registration_of_another_endpoint_is_refused() {
    let mut eps = job();
    let fabric = LocalFabric::new(1).unwrap();
    let mut other = fabric.endpoint(0, WAIT).unwrap();
    let foreign = other.alloc(8, Access::LOCAL).unwrap();
    let dst = eps[2].alloc(8, Access::REMOTE_WRITE).unwrap();
    let e = eps[0].write(2, foreign.range(), dst.remote().range(), None, 0).unwrap_err();
    assert!(e.to_string().contains("another endpoint"), "{e}");
    assert!(eps[0].insert_peers(&[]).is_err(), "a routed endpoint is built connected");
    let e = RoutedEndpoint::new(
        connected(&LocalFabric::new(2).unwrap()).remove(1),
        connected(&LocalFabric::new(4).unwrap()).remove(0),
        vec![0, 1],
        WAIT,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("node-local endpoint is rank 1 of 2, but rank 0 is local rank 0"), "{e}");
}
