//! Faults in the middle of work, per fabric (shm, tcp, ofi:tcp where libfabric is built): a rank
//! that dies inside a stream of collectives (small ones on the eager path, large ones on the
//! zero-copy path), and a rank stopped (SIGSTOP) for longer than the timeout. Every survivor must
//! get an error naming that rank within the timeout plus a stated slack. A rank killed between
//! collectives is covered by `shm_procs.rs`, `net_procs.rs` and `routes_procs.rs`.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::procs::connect;
use fabcoll::{Collectives, Error, ReduceOp};

const LIMIT: Duration = Duration::from_secs(120);
/// `FABCOLL_TIMEOUT` of these jobs.
const TIMEOUT_S: u64 = 4;
/// The timeout, the grace period for abort notices (min(timeout/2, 2 s)) and slack for a loaded machine.
const NAMED_WITHIN: Duration = Duration::from_secs(TIMEOUT_S + 2 + 4);

/// Whether `e` is a timeout or a lost peer that names `rank`.
fn names(e: &Error, rank: u32) -> bool {
    match e {
        Error::Timeout { waiting_for, .. } => waiting_for.contains(&rank),
        Error::PeerLost { peers, .. } => peers.contains(&rank),
        _ => false,
    }
}

fn env(fabric: &str) -> [(&str, &str); 2] {
    [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", "4")]
}

/// Rank 2 of 3 exits `after` into a stream of allreduces of `count` u64s; ranks 0 and 1 keep
/// calling until one fails, which must name rank 2 within [`NAMED_WITHIN`].
fn dies_mid_stream(name: &str, fabric: &str, count: usize) {
    support::ranks(name, 3, LIMIT, &env(fabric), |job| {
        let Some(c) = connect() else { return };
        let (r, p) = (c.rank(), c.size());
        let mut x = vec![1u64; count];
        c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        job.barrier("first-done");
        if r == 2 {
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                std::process::exit(0); // inside some collective of the stream
            });
        }
        let start = Instant::now();
        let mut calls = 0u64;
        let e = loop {
            let t0 = Instant::now();
            x.fill(1);
            match c.allreduce_in_place(&mut x, &ReduceOp::Sum) {
                Ok(()) => {
                    assert!(x.iter().all(|&v| v == u64::from(p)), "rank {r}: call {calls} wrong");
                    calls += 1;
                }
                Err(e) => break (e, t0.elapsed()),
            }
            assert!(start.elapsed() < Duration::from_secs(60), "rank {r}: no error after {calls} calls");
        };
        let (e, took) = e;
        eprintln!("rank {r} after {calls} calls, {took:.1?} into the failing one: {e}");
        assert!(names(&e, 2), "rank {r}: the error does not name rank 2: {e}");
        assert!(took < NAMED_WITHIN, "rank {r}: the error took {took:?}: {e}");
    });
}

/// Rank 2 of 3 stops itself (SIGSTOP) between collectives; ranks 0 and 1 must name it within
/// [`NAMED_WITHIN`], then rank 0 resumes it (SIGCONT) and it leaves.
fn stopped_rank(name: &str, fabric: &str) {
    support::ranks(name, 3, LIMIT, &env(fabric), |job| {
        let Some(c) = connect() else { return };
        let r = c.rank();
        let pids = job.exchange("pids", std::process::id().to_string().as_bytes());
        let stopped = String::from_utf8(pids[2].clone()).unwrap();
        let mut x = vec![1u64; 1000];
        c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        job.barrier("first-done");
        if r == 2 {
            // Stops here until rank 0 sends SIGCONT; what this rank's next call returns is moot.
            Command::new("kill").args(["-STOP", &stopped]).status().unwrap();
            // The signal lands at the latest during this sleep, before the next call could send.
            std::thread::sleep(Duration::from_millis(200));
            let _ = c.allreduce_in_place(&mut x, &ReduceOp::Sum);
            return;
        }
        let t0 = Instant::now();
        let e = c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap_err();
        let took = t0.elapsed();
        eprintln!("rank {r} after {took:.1?}: {e}");
        // Both survivors have their error: rank 0 resumes rank 2 before any assertion can fail,
        // so that no process stays stopped.
        fabcoll::fabric::bootstrap::barrier(&*job.store, "named", 2, Duration::from_secs(30)).unwrap();
        if r == 0 {
            Command::new("kill").args(["-CONT", &stopped]).status().unwrap();
        }
        assert!(names(&e, 2), "rank {r}: the error does not name rank 2: {e}");
        assert!(took < NAMED_WITHIN, "rank {r}: the error took {took:?}: {e}");
    });
}

macro_rules! matrix {
    ($($fabric:literal => $eager:ident, $zcopy:ident, $stop:ident;)*) => {$(
        #[test]
        fn $eager() {
            dies_mid_stream(stringify!($eager), $fabric, 1000);
        }
        #[test]
        fn $zcopy() {
            dies_mid_stream(stringify!($zcopy), $fabric, 1 << 20);
        }
        #[test]
        fn $stop() {
            stopped_rank(stringify!($stop), $fabric);
        }
    )*};
}

matrix! {
    "shm" => shm_dies_in_eager_calls, shm_dies_in_zero_copy_calls, shm_stopped_rank_is_named;
    "tcp" => tcp_dies_in_eager_calls, tcp_dies_in_zero_copy_calls, tcp_stopped_rank_is_named;
    "ofi:tcp" => ofi_tcp_dies_in_eager_calls, ofi_tcp_dies_in_zero_copy_calls, ofi_tcp_stopped_rank_is_named;
}
