//! Multi-process runs over the fabrics other than `shm` — `tcp` (sockets), and libfabric's `ofi:tcp`
//! (the `net` provider on libfabric 1.17) and `ofi:shm`: every collective × every algorithm (also
//! in place) against the reference at p ∈ {1, 2, 3, 4, 5, 7, 8}, nonblocking overlap, split and
//! dup, bad arguments, and a killed rank named by the survivors (bodies in `tests/common/procs.rs`,
//! shared with `shm_procs`). The ofi runs are skipped (with a note) when the build has no libfabric.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::procs::{self, connect};
use fabcoll::{Collectives, Communicator, Options, ReduceOp};

const LIMIT: Duration = Duration::from_secs(300);

/// Runs `body` on `p` ranks over `fabric`; rank 0 reports how many checks it ran, which must be
/// `want` (no report: the build lacks the fabric, and the ranks said so).
fn on_fabric(name: &str, fabric: &str, p: u32, want: usize, body: fn(&Communicator) -> Result<usize, String>) {
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", "60"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, p, LIMIT, &env, |_job| {
        let Some(c) = connect() else { return };
        let ran = body(&c).unwrap_or_else(|e| panic!("{e}"));
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if procs::is_parent() {
        match procs::take_mark(&mark) {
            Some(ran) => {
                assert_eq!(ran, want, "{name}: rank 0 ran {ran} checks, want {want}");
                eprintln!("{name}: {ran} checks verified per rank over {fabric}");
            }
            None => eprintln!("{name}: skipped, {fabric} not built"),
        }
    }
}

macro_rules! all_algorithms {
    ($($name:ident: $fabric:literal, $p:expr),* $(,)?) => {$(
        #[test]
        fn $name() {
            on_fabric(stringify!($name), $fabric, $p, procs::matrix_len($p), procs::matrix);
        }
    )*};
}

all_algorithms! {
    tcp_all_algorithms_p1: "tcp", 1,
    tcp_all_algorithms_p2: "tcp", 2,
    tcp_all_algorithms_p3: "tcp", 3,
    tcp_all_algorithms_p4: "tcp", 4,
    tcp_all_algorithms_p5: "tcp", 5,
    tcp_all_algorithms_p7: "tcp", 7,
    tcp_all_algorithms_p8: "tcp", 8,
    ofi_tcp_all_algorithms_p1: "ofi:tcp", 1,
    ofi_tcp_all_algorithms_p2: "ofi:tcp", 2,
    ofi_tcp_all_algorithms_p3: "ofi:tcp", 3,
    ofi_tcp_all_algorithms_p4: "ofi:tcp", 4,
    ofi_tcp_all_algorithms_p5: "ofi:tcp", 5,
    ofi_tcp_all_algorithms_p7: "ofi:tcp", 7,
    ofi_tcp_all_algorithms_p8: "ofi:tcp", 8,
    ofi_shm_all_algorithms_p1: "ofi:shm", 1,
    ofi_shm_all_algorithms_p2: "ofi:shm", 2,
    ofi_shm_all_algorithms_p3: "ofi:shm", 3,
    ofi_shm_all_algorithms_p4: "ofi:shm", 4,
    ofi_shm_all_algorithms_p5: "ofi:shm", 5,
    ofi_shm_all_algorithms_p7: "ofi:shm", 7,
    ofi_shm_all_algorithms_p8: "ofi:shm", 8,
}

#[test]
fn tcp_nonblocking_overlap() {
    on_fabric("tcp_nonblocking_overlap", "tcp", 4, 1, |c| procs::overlap(c).map(|()| 1));
}

#[test]
fn tcp_transfers() {
    on_fabric("tcp_transfers", "tcp", 3, 7, procs::transfers);
}

#[test]
fn ofi_tcp_transfers() {
    on_fabric("ofi_tcp_transfers", "ofi:tcp", 4, 7, procs::transfers);
}

#[test]
fn tcp_split_and_dup() {
    on_fabric("tcp_split_and_dup", "tcp", 6, 1, |c| procs::split(c).map(|()| 1));
}

#[test]
fn tcp_joins_again_on_one_store() {
    on_fabric("tcp_joins_again_on_one_store", "tcp", 3, 3, procs::join_again);
}

#[test]
fn tcp_bad_arguments_are_clear_errors() {
    on_fabric("tcp_bad_arguments_are_clear_errors", "tcp", 3, 9, procs::bad_arguments);
}

#[test]
fn tcp_killed_rank_is_named() {
    killed_rank("tcp_killed_rank_is_named", "tcp", "5");
}

/// A bcast root whose receiver died names it within `within` (FABCOLL_TIMEOUT 5 s).
fn root_of_a_dead_receiver(name: &str, fabric: &str, within: Duration) {
    let env = [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", "5")];
    support::ranks(name, 2, LIMIT, &env, |_| {
        let Some(c) = connect() else { return };
        procs::root_of_a_dead_receiver(&c, within);
    });
}

#[test]
fn tcp_bcast_root_of_a_dead_receiver_names_it() {
    root_of_a_dead_receiver("tcp_bcast_root_of_a_dead_receiver_names_it", "tcp", Duration::from_secs(10));
}

/// On ofi:net the root's 8 B messages are injected (complete on return, so it fires them at once),
/// and net reports nothing for injects to a dead peer: the liveness probes name it.
#[test]
fn ofi_net_bcast_root_of_a_dead_receiver_names_it() {
    root_of_a_dead_receiver("ofi_net_bcast_root_of_a_dead_receiver_names_it", "ofi:net", Duration::from_secs(15));
}

#[test]
fn tcp_eager_limit_is_the_network_default() {
    on_fabric("tcp_eager_limit_is_the_network_default", "tcp", 2, 1, eager_limit_follows_the_fabric);
}

#[test]
fn ofi_tcp_nonblocking_overlap() {
    on_fabric("ofi_tcp_nonblocking_overlap", "ofi:tcp", 4, 1, |c| procs::overlap(c).map(|()| 1));
}

#[test]
fn ofi_shm_nonblocking_overlap() {
    on_fabric("ofi_shm_nonblocking_overlap", "ofi:shm", 4, 1, |c| procs::overlap(c).map(|()| 1));
}

#[test]
fn ofi_tcp_split_and_dup() {
    on_fabric("ofi_tcp_split_and_dup", "ofi:tcp", 6, 1, |c| procs::split(c).map(|()| 1));
}

#[test]
fn ofi_shm_split_and_dup() {
    on_fabric("ofi_shm_split_and_dup", "ofi:shm", 6, 1, |c| procs::split(c).map(|()| 1));
}

#[test]
fn ofi_tcp_bad_arguments_are_clear_errors() {
    on_fabric("ofi_tcp_bad_arguments_are_clear_errors", "ofi:tcp", 3, 9, procs::bad_arguments);
}

#[test]
fn ofi_shm_bad_arguments_are_clear_errors() {
    on_fabric("ofi_shm_bad_arguments_are_clear_errors", "ofi:shm", 3, 9, procs::bad_arguments);
}

/// `timeout` = FABCOLL_TIMEOUT. The ofi:shm provider does not report a dead peer, so there the
/// error comes from the timeout plus the grace period for abort notices (min(timeout/2, 2 s)):
/// 4 s keeps that at 6 s, well inside the test's 10 s.
fn killed_rank(name: &str, fabric: &str, timeout: &str) {
    let env = [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", timeout)];
    support::ranks(name, 4, LIMIT, &env, |job| {
        let Some(c) = connect() else { return };
        procs::killed_rank(&c, 1000, Duration::from_secs(10), |name, n| {
            fabcoll::fabric::bootstrap::barrier(&*job.store, name, n, Duration::from_secs(30)).unwrap()
        });
    });
}

#[test]
fn ofi_tcp_killed_rank_is_named() {
    killed_rank("ofi_tcp_killed_rank_is_named", "ofi:tcp", "5");
}

#[test]
fn ofi_shm_killed_rank_is_named() {
    killed_rank("ofi_shm_killed_rank_is_named", "ofi:shm", "4");
}

/// The executor's defaults follow the class of the fabric: a 32 KiB message goes eager on tcp and
/// ofi:tcp (network: 64 KiB eager limit) and zero-copy on ofi:shm (node: 16 KiB). One recursive-doubling
/// allreduce at p = 2 sends one message per rank.
fn eager_limit_follows_the_fabric(c: &Communicator) -> Result<usize, String> {
    let x = vec![1.0f32; 8192];
    let mut y = vec![0.0f32; x.len()];
    let before = c.stats();
    c.with(&Options::algorithm("recursive_doubling"))
        .allreduce(&x, &mut y, &ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    if y.iter().any(|&v| v != 2.0) {
        return Err("wrong allreduce result".into());
    }
    let after = c.stats();
    let got = (after.eager_msgs - before.eager_msgs, after.zcopy_msgs - before.zcopy_msgs);
    let fabric = std::env::var("FABCOLL_FABRIC").unwrap_or_default();
    let want = if fabric.ends_with("tcp") { (1, 0) } else { (0, 1) };
    if got != want {
        return Err(format!("{fabric}: (eager, zero-copy) messages of a 32 KiB exchange {got:?}, want {want:?}"));
    }
    Ok(1)
}

#[test]
fn ofi_tcp_eager_limit_is_the_network_default() {
    on_fabric("ofi_tcp_eager_limit_is_the_network_default", "ofi:tcp", 2, 1, eager_limit_follows_the_fabric);
}

#[test]
fn ofi_shm_eager_limit_is_the_node_default() {
    on_fabric("ofi_shm_eager_limit_is_the_node_default", "ofi:shm", 2, 1, eager_limit_follows_the_fabric);
}

/// Ranks whose write segments differ (`FABCOLL_OFI_SEGMENT`: rank 0 64 KiB pieces, rank 1 whole
/// transfers, rank 2 the provider's default for its connections) still agree on every zero-copy
/// transfer, because the receiver names the pieces in its grant: bcast from every root, allgather,
/// alltoall and allreduce of messages well above the eager limit, checked element by element.
fn mixed_write_segments(c: &Communicator) -> Result<usize, String> {
    let (p, r) = (c.size() as usize, c.rank() as usize);
    let n = (1 << 20) + 5;
    let before = c.stats();
    for root in 0..p {
        let mut b: Vec<u32> = (0..n).map(|i| if r == root { (i * 7 + root) as u32 } else { 0 }).collect();
        c.bcast(&mut b, root as u32).map_err(|e| format!("bcast from {root}: {e}"))?;
        if let Some(i) = (0..n).find(|&i| b[i] != (i * 7 + root) as u32) {
            return Err(format!("bcast from {root}: element {i} is {}", b[i]));
        }
    }
    let mine: Vec<u32> = (0..n).map(|i| (r * n + i) as u32).collect();
    let mut all = vec![0u32; n * p];
    c.allgather(&mine, &mut all).map_err(|e| format!("allgather: {e}"))?;
    if let Some(i) = (0..n * p).find(|&i| all[i] != i as u32) {
        return Err(format!("allgather: element {i} is {}", all[i]));
    }
    let send: Vec<u32> = (0..n * p).map(|i| (r * n * p + i) as u32).collect();
    let mut got = vec![0u32; n * p];
    c.alltoall(&send, &mut got).map_err(|e| format!("alltoall: {e}"))?;
    for (i, &v) in got.iter().enumerate() {
        let (from, k) = (i / n, i % n);
        if v != (from * n * p + r * n + k) as u32 {
            return Err(format!("alltoall: element {i} is {v}"));
        }
    }
    let x: Vec<f64> = (0..n).map(|i| (i % 1000) as f64 + r as f64).collect();
    let mut y = vec![0f64; n];
    c.with(&Options::algorithm("ring")).allreduce(&x, &mut y, &ReduceOp::Sum).map_err(|e| format!("allreduce: {e}"))?;
    let ranks = (p * (p - 1) / 2) as f64;
    if let Some(i) = (0..n).find(|&i| y[i] != p as f64 * (i % 1000) as f64 + ranks) {
        return Err(format!("allreduce: element {i} is {}", y[i]));
    }
    let zcopy = c.stats().zcopy_msgs - before.zcopy_msgs;
    if zcopy == 0 {
        return Err("no message went zero-copy".into());
    }
    Ok(1)
}

#[test]
fn ofi_tcp_ranks_with_different_write_segments_agree() {
    let name = "ofi_tcp_ranks_with_different_write_segments_agree";
    if !procs::is_parent() {
        // Each child sets its own segment before the endpoint opens (read once, at open).
        match std::env::var("FABCOLL_RANK").as_deref() {
            Ok("0") => std::env::set_var("FABCOLL_OFI_SEGMENT", "65536"),
            Ok("1") => std::env::set_var("FABCOLL_OFI_SEGMENT", "0"),
            _ => {}
        }
    }
    on_fabric(name, "ofi:tcp", 3, 1, mixed_write_segments);
}
