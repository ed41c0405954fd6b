//! Faults in the middle of work, per fabric (shm, tcp, and ofi:tcp and ofi:shm where libfabric is
//! built): a rank that dies inside a stream of collectives (small ones on the eager path, small
//! ones starved of eager slots so that most go by rendezvous, large ones on the zero-copy path),
//! a rank stopped (SIGSTOP) for longer than the timeout, and on ofi:shm a rank that exits holding
//! the spinlock of a survivor's libfabric region. Every survivor must get an error
//! naming that rank within the timeout plus a stated slack, and once it has dropped its
//! communicator hold no more file descriptors than before it opened it (shared-memory segments
//! are memfds, so this counts them too) and no libfabric shm region of its own in `/dev/shm`.
//! And the store stopped after bootstrap, which the job must not notice. A rank killed between
//! collectives is covered by `shm_procs.rs`, `net_procs.rs` and `routes_procs.rs`.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::procs::connect;
use fabcoll::{Collectives, Communicator, Error, Options, ReduceOp};

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

/// This process's open file descriptors.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The regions of libfabric's shm provider named after this process (`<pid>:<uid>:<index>`).
fn own_shm_regions() -> Vec<String> {
    let prefix = format!("{}:", std::process::id());
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(&prefix)).collect()
}

/// A survivor's leak check: after `c` is dropped, as many descriptors as `before` (taken before
/// the communicator was opened) and no shm region of this process left.
fn leaves_nothing(c: Communicator, before: usize, r: u32) {
    drop(c);
    let after = open_fds();
    assert_eq!(after, before, "rank {r}: file descriptors before the communicator and after dropping it");
    let regions = own_shm_regions();
    assert!(regions.is_empty(), "rank {r}: shm regions left in /dev/shm: {regions:?}");
}

/// How the stream's calls move their data.
#[derive(Clone, Copy)]
enum Path {
    /// 1,000 u64s: eager messages.
    Eager,
    /// The same with one eager slot per peer (`FABCOLL_SLOTS=1`, no mailboxes) and the ring algorithm (four
    /// messages per call to the same neighbour): most messages find no free slot and go by
    /// rendezvous (request, grant, write).
    Rendezvous,
    /// 1 Mi u64s: zero-copy writes into granted buffers.
    ZeroCopy,
}

/// Rank 2 of 3 exits 30 ms into a stream of allreduces moving their data by `path`; ranks 0 and
/// 1 keep calling until one fails, which must name rank 2 within [`NAMED_WITHIN`].
fn dies_mid_stream(name: &str, fabric: &str, path: Path) {
    let mut env = env(fabric).to_vec();
    if let Path::Rendezvous = path {
        // Off the node-local mailboxes too, which carry small calls on shm without slots.
        env.extend([("FABCOLL_SLOTS", "1"), ("FABCOLL_MAILBOX", "0")]);
    }
    let count = if let Path::ZeroCopy = path { 1 << 20 } else { 1000 };
    let opts = if let Path::Rendezvous = path { Options::algorithm("ring") } else { Options::default() };
    support::ranks(name, 3, LIMIT, &env, |job| {
        let fds = open_fds();
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
            match c.with(&opts).allreduce_in_place(&mut x, &ReduceOp::Sum) {
                Ok(()) => {
                    assert!(x.iter().all(|&v| v == u64::from(p)), "rank {r}: call {calls} wrong");
                    calls += 1;
                }
                Err(e) => break (e, t0.elapsed()),
            }
            assert!(start.elapsed() < Duration::from_secs(60), "rank {r}: no error after {calls} calls");
        };
        let (e, took) = e;
        let rts = c.stats().rts_msgs;
        eprintln!("rank {r} after {calls} calls ({rts} rendezvous requests), {took:.1?} into the failing one: {e}");
        assert!(names(&e, 2), "rank {r}: the error does not name rank 2: {e}");
        assert!(took < NAMED_WITHIN, "rank {r}: the error took {took:?}: {e}");
        if let Path::Rendezvous = path {
            assert!(rts > 0, "rank {r}: no message went by rendezvous");
        }
        leaves_nothing(c, fds, r);
    });
}

/// Rank 2 of 3 stops itself (SIGSTOP) between collectives; ranks 0 and 1 must name it within
/// [`NAMED_WITHIN`], then rank 0 resumes it (SIGCONT) and it leaves.
fn stopped_rank(name: &str, fabric: &str) {
    support::ranks(name, 3, LIMIT, &env(fabric), |job| {
        let fds = open_fds();
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
        leaves_nothing(c, fds, r);
    });
}

/// Rank 2 of 3 takes the spinlock of rank 1's libfabric shm region, as a rank dying inside the
/// provider while sending to rank 1 does, and exits. Rank 1's progress and rank 0's sends to rank 1
/// spin on that lock inside libfabric; both survivors must still name rank 2 within
/// [`NAMED_WITHIN`] (the exit watch releases a lock a dead process left held: `fabric/src/ofi/shm_locks.rs`).
#[test]
fn ofi_shm_dies_holding_a_survivors_lock() {
    let name = "ofi_shm_dies_holding_a_survivors_lock";
    support::ranks(name, 3, LIMIT, &env("ofi:shm"), |job| {
        let fds = open_fds();
        let Some(c) = connect() else { return };
        let r = c.rank();
        let pids = job.exchange("pids", std::process::id().to_string().as_bytes());
        let mut x = vec![1u64; 1000];
        c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        job.barrier("first-done");
        if r == 2 {
            let locked = lock_regions_of(std::str::from_utf8(&pids[1]).unwrap());
            assert!(locked > 0, "rank 2: no shm region of rank 1 found to lock");
            std::process::exit(0);
        }
        let t0 = Instant::now();
        let e = loop {
            if let Err(e) = c.allreduce_in_place(&mut x, &ReduceOp::Sum) {
                break e;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "rank {r}: no error");
        };
        let took = t0.elapsed();
        eprintln!("rank {r} after {took:.1?}: {e}");
        assert!(names(&e, 2), "rank {r}: the error does not name rank 2: {e}");
        assert!(took < NAMED_WITHIN, "rank {r}: the error took {took:?}: {e}");
        leaves_nothing(c, fds, r);
    });
}

/// Takes the spinlock in the header of every libfabric shm region of process `pid`
/// (`/dev/shm/<pid>:<uid>:<index>`; the lock follows 24 bytes of header in libfabric 1.17's
/// `struct smr_region`) and keeps it; returns how many it took.
fn lock_regions_of(pid: &str) -> usize {
    use std::os::fd::AsRawFd;
    let prefix = format!("{pid}:");
    let mut locked = 0;
    for entry in std::fs::read_dir("/dev/shm").unwrap().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let file = std::fs::OpenOptions::new().read(true).write(true).open(entry.path()).unwrap();
        // SAFETY: a new shared mapping of the file's first page, never unmapped (the process exits next).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mapping {}", entry.path().display());
        // SAFETY: offset 24 of the mapping is the region's process-shared spinlock, 4-byte aligned.
        unsafe { libc::pthread_spin_lock(base.cast::<u8>().add(24).cast()) };
        locked += 1;
    }
    locked
}

/// The store goes away after bootstrap (a launcher's store dying): collectives, split and dup
/// go on, since a communicator needs the store only to start.
fn store_stopped(name: &str, fabric: &str) {
    support::ranks_stoppable_store(name, 3, LIMIT, &env(fabric), |job| {
        let Some(c) = connect() else { return };
        let (r, p) = (c.rank(), c.size());
        c.barrier().unwrap();
        if r == 0 {
            job.stop_store();
        }
        // Rank 0 enters only once the store refuses clients; the others leave only after it.
        c.barrier().unwrap();
        assert!(job.env.open_store(Duration::from_millis(200)).is_err(), "rank {r}: the store still answers");
        let mut x = vec![1u64; 1 << 17];
        c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        assert!(x.iter().all(|&v| v == u64::from(p)), "rank {r}: allreduce after the store stopped");
        let half = c.split(Some(r % 2), 0).unwrap().expect("every rank has a color");
        let dup = c.dup().unwrap();
        let mut y = [1u32];
        half.allreduce_in_place(&mut y, &ReduceOp::Sum).unwrap();
        assert_eq!(y[0], half.size(), "rank {r}: allreduce on the split");
        dup.barrier().unwrap();
    });
}

macro_rules! matrix {
    ($($fabric:literal => $eager:ident, $rendezvous:ident, $zcopy:ident, $stop:ident, $store:ident;)*) => {$(
        #[test]
        fn $eager() {
            dies_mid_stream(stringify!($eager), $fabric, Path::Eager);
        }
        #[test]
        fn $rendezvous() {
            dies_mid_stream(stringify!($rendezvous), $fabric, Path::Rendezvous);
        }
        #[test]
        fn $zcopy() {
            dies_mid_stream(stringify!($zcopy), $fabric, Path::ZeroCopy);
        }
        #[test]
        fn $stop() {
            stopped_rank(stringify!($stop), $fabric);
        }
        #[test]
        fn $store() {
            store_stopped(stringify!($store), $fabric);
        }
    )*};
}

matrix! {
    "shm" => shm_dies_in_eager_calls, shm_dies_in_rendezvous_calls, shm_dies_in_zero_copy_calls,
        shm_stopped_rank_is_named, shm_store_stopped_after_bootstrap;
    "tcp" => tcp_dies_in_eager_calls, tcp_dies_in_rendezvous_calls, tcp_dies_in_zero_copy_calls,
        tcp_stopped_rank_is_named, tcp_store_stopped_after_bootstrap;
    "ofi:tcp" => ofi_tcp_dies_in_eager_calls, ofi_tcp_dies_in_rendezvous_calls, ofi_tcp_dies_in_zero_copy_calls,
        ofi_tcp_stopped_rank_is_named, ofi_tcp_store_stopped_after_bootstrap;
    // ofi:shm: libfabric 1.17's shm guards each region with a spinlock in shared memory, which a rank
    // dying inside the provider can leave held; each endpoint watches its peers' processes, posts
    // nothing more to one that exited unannounced (fabric/src/ofi/exits.rs) and releases a lock the
    // dead left held (fabric/src/ofi/shm_locks.rs; ofi_shm_dies_holding_a_survivors_lock above).
    "ofi:shm" => ofi_shm_dies_in_eager_calls, ofi_shm_dies_in_rendezvous_calls, ofi_shm_dies_in_zero_copy_calls,
        ofi_shm_stopped_rank_is_named, ofi_shm_store_stopped_after_bootstrap;
}
