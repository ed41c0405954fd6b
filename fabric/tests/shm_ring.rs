//! Backend `shm`: the common scenarios among 4 PROCESSES (re-executed test binary, see
//! `support`), plus node-shared memory by direct load/store and bad-argument errors.

mod local_common;
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fabcoll_fabric::{open, Access, Backend, Completion, Config, Endpoint, Error, RemoteMr};

const LIMIT: Duration = Duration::from_secs(60);

fn connect(job: &support::Job, name: &str) -> Box<dyn Endpoint> {
    let (r, p) = (job.rank() as usize, job.size() as usize);
    let mut ep = open(&Config::new(Backend::Shm, r, p, name)).expect("open shm");
    let blobs = job.exchange(&format!("{name}-addr"), &ep.address().expect("address"));
    ep.insert_peers(&blobs).expect("insert_peers");
    ep
}

#[test]
fn shm_scenarios_4_procs() {
    support::ranks("shm_scenarios_4_procs", 4, LIMIT, &[], |job| {
        let mut ep = connect(&job, "shm_scenarios_4_procs");
        local_common::all(&mut *ep).unwrap();
        job.barrier("done"); // nobody unmaps while a peer may still write
    });
}

#[test]
fn shm_scenarios_3_procs() {
    support::ranks("shm_scenarios_3_procs", 3, LIMIT, &[], |job| {
        let mut ep = connect(&job, "shm_scenarios_3_procs");
        let mut inbox = local_common::Inbox::new();
        local_common::ring(&mut *ep, &mut inbox, 100_003).unwrap();
        // 200 messages to each neighbour through 32-slot queues: exercises Busy + retry.
        local_common::ctrl_both_ways(&mut *ep, &mut inbox, 200).unwrap();
        job.barrier("done");
    });
}

/// mamidala-2008 style: rank 0 allocates one node-shared buffer, everyone maps it, each rank
/// adds into its own word with atomics, a counter in the buffer says when all are done.
#[test]
fn shm_node_shared_buffer() {
    support::ranks("shm_node_shared_buffer", 4, LIMIT, &[], |job| {
        let mut ep = connect(&job, "shm_node_shared_buffer");
        let (r, p) = (ep.rank(), ep.size());
        let mut pending = Vec::new();
        let (owner_mr, desc) = if r == 0 {
            let mr = ep.alloc(4096, Access::REMOTE_RW).unwrap();
            for peer in 1..p {
                ep.send_ctrl(peer, 7, &mr.remote().to_bytes()).unwrap();
            }
            let d = mr.remote();
            (Some(mr), d)
        } else {
            let mut inbox = local_common::Inbox::new();
            (None, RemoteMr::from_bytes(&inbox.ctrl(&mut *ep, 0, 7).unwrap()).unwrap())
        };
        let map = ep.map_remote(0, &desc).unwrap();
        assert_eq!(map.len(), 4096);
        // SAFETY: the mapping is 4096 bytes, page-aligned; words 0..=p are only accessed atomically.
        let word = |i: usize| unsafe { AtomicU64::from_ptr(map.as_ptr().cast::<u64>().add(i)) };
        for _ in 0..1000 {
            word(1 + r).fetch_add(r as u64 + 1, Ordering::Relaxed);
        }
        word(0).fetch_add(1, Ordering::AcqRel);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while word(0).load(Ordering::Acquire) < p as u64 {
            assert!(std::time::Instant::now() < deadline, "rank {r}: peers never arrived");
            std::thread::yield_now();
        }
        for i in 0..p {
            assert_eq!(word(1 + i).load(Ordering::Relaxed), 1000 * (i as u64 + 1), "rank {r} word {i}");
        }
        if let Some(mr) = owner_mr {
            let mut b = [0u8; 8];
            mr.read_at(8, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), 1000);
        }
        // A registration made with `register` is not shareable: a clear error, not garbage.
        let mut v = vec![0u8; 64];
        // SAFETY: `v` outlives `mr2` (dropped at the end of this scope, before `v`).
        let mr2 = unsafe { ep.register(v.as_mut_ptr(), v.len(), Access::REMOTE_RW) }.unwrap();
        assert!(matches!(ep.map_remote(r, &mr2.remote()), Err(Error::Unsupported { .. })));
        drop(mr2);
        let _ = ep.poll(&mut pending);
        job.barrier("done");
    });
}

#[test]
fn shm_bad_arguments_are_errors() {
    support::ranks("shm_bad_arguments_are_errors", 2, LIMIT, &[], |job| {
        let (r, p) = (job.rank() as usize, job.size() as usize);
        let mut ep = open(&Config::new(Backend::Shm, r, p, "bad")).unwrap();
        let src = ep.alloc(64, Access::LOCAL).unwrap();
        let dst = ep.alloc(64, Access::REMOTE_WRITE).unwrap();
        assert!(ep.write(0, src.range(), dst.remote().range(), None, 0).is_err(), "write before insert_peers");
        let mine = ep.address().unwrap();
        assert!(matches!(ep.insert_peers(std::slice::from_ref(&mine)), Err(Error::Address(_))));
        let other_job = open(&Config::new(Backend::Shm, r, p, "another-job")).unwrap().address().unwrap();
        let blobs = job.exchange("bad-addr", &mine);
        let mut wrong = blobs.clone();
        wrong[r] = other_job;
        assert!(matches!(ep.insert_peers(&wrong), Err(Error::Address(_))));
        ep.insert_peers(&blobs).unwrap();
        let peer = 1 - r;
        assert!(ep.write(2, src.range(), dst.remote().range(), None, 0).is_err());
        let ro = ep.alloc(64, Access::LOCAL).unwrap();
        let descs = job.exchange("bad-descs", &[dst.remote().to_bytes(), ro.remote().to_bytes()].concat());
        let theirs = &descs[peer];
        let (pdst, pro) = (
            RemoteMr::from_bytes(&theirs[..RemoteMr::WIRE_LEN]).unwrap(),
            RemoteMr::from_bytes(&theirs[RemoteMr::WIRE_LEN..]).unwrap(),
        );
        assert!(matches!(ep.write(peer, src.range(), pro.range(), Some(1), 0), Err(Error::Access(_))));
        let lying = RemoteMr { len: 1 << 20, ..pdst };
        assert!(matches!(
            ep.write(peer, src.range(), lying.slice(4096, 64).unwrap(), None, 0),
            Err(Error::OutOfBounds { .. })
        ));
        let forged = RemoteMr { key: pdst.key ^ (2 << 32), ..pdst };
        assert!(matches!(ep.write(peer, src.range(), forged.range(), None, 0), Err(Error::InvalidKey { .. })));
        assert!(ep.send_ctrl(peer, 0, &vec![0; ep.caps().max_ctrl + 1]).is_err());
        let mut out = Vec::new();
        assert!(matches!(ep.wait(&mut out, Some(Duration::from_millis(30))), Err(Error::Timeout { .. })));
        assert!(!out.iter().any(|c| matches!(c, Completion::WriteArrived { .. })), "failed writes notified");
        job.barrier("done");
    });
}

/// 8 processes on (typically) 2 cores: 300 rounds of a ring of notified 8-byte writes with a
/// wait policy that blocks early (futex path). Must finish well within the harness timeout.
#[test]
fn shm_oversubscribed_8_procs() {
    support::ranks("shm_oversubscribed_8_procs", 8, LIMIT, &[], |job| {
        let (r, p) = (job.rank() as usize, job.size() as usize);
        let mut cfg = Config::new(Backend::Shm, r, p, "shm_oversubscribed_8_procs");
        cfg.wait = fabcoll_fabric::WaitPolicy::oversubscribed();
        let mut ep = open(&cfg).unwrap();
        let blobs = job.exchange("addr", &ep.address().unwrap());
        ep.insert_peers(&blobs).unwrap();
        let (right, left) = ((r + 1) % p, (r + p - 1) % p);
        let dst = ep.alloc(8, Access::REMOTE_WRITE).unwrap();
        let src = ep.alloc(8, Access::LOCAL).unwrap();
        ep.send_ctrl(left, 1, &dst.remote().to_bytes()).unwrap();
        let mut inbox = local_common::Inbox::new();
        let desc = RemoteMr::from_bytes(&inbox.ctrl(&mut *ep, right, 1).unwrap()).unwrap();
        let t = std::time::Instant::now();
        for round in 0..300u64 {
            src.write_at(0, &(round * 1000 + r as u64).to_le_bytes()).unwrap();
            ep.write(right, src.range(), desc.range(), Some(round), round).unwrap();
            inbox.expect(&mut *ep, "arrival", |c| *c == Completion::WriteArrived { peer: left, imm: round }).unwrap();
            let mut b = [0u8; 8];
            dst.read_at(0, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), round * 1000 + left as u64);
            // Before the next round overwrites our buffer, the left neighbour must know we read it.
            ep.send_ctrl(left, 2, &[]).unwrap();
            inbox.ctrl(&mut *ep, right, 2).unwrap();
        }
        let dt = t.elapsed();
        eprintln!("rank {r}: 300 rounds in {dt:?}");
        assert!(dt < Duration::from_secs(30), "rank {r}: 300 ring rounds took {dt:?}");
        job.barrier("done");
    });
}

/// A peer that dies: writes to it fail naming it, and `wait` reports it instead of a bare timeout.
#[test]
fn shm_orderly_departure_is_not_blamed_on_timeout() {
    // A peer that closes its endpoint and exits has not failed: a wait that times out afterwards
    // is a plain timeout, not a `Peer` error naming it (a crash is, see the test below).
    support::ranks("shm_orderly_departure_is_not_blamed_on_timeout", 2, LIMIT, &[], |job| {
        let mut ep = connect(&job, "shm_orderly_departure_is_not_blamed_on_timeout");
        job.barrier("connected");
        if job.rank() == 1 {
            drop(ep);
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(300)); // let rank 1 be gone
        let mut out = Vec::new();
        match ep.wait(&mut out, Some(Duration::from_millis(200))) {
            Err(Error::Timeout { .. }) => {}
            other => panic!("wait after an orderly departure gave {other:?}"),
        }
    });
}

#[test]
fn shm_dead_peer_is_an_error() {
    support::ranks("shm_dead_peer_is_an_error", 2, LIMIT, &[], |job| {
        let mut ep = connect(&job, "shm_dead_peer_is_an_error");
        let dst = ep.alloc(64, Access::REMOTE_WRITE).unwrap();
        let descs = job.exchange("desc", &dst.remote().to_bytes());
        job.barrier("connected");
        if job.rank() == 1 {
            std::process::exit(0); // die without deregistering anything
        }
        let desc = RemoteMr::from_bytes(&descs[1]).unwrap();
        let src = ep.alloc(64, Access::LOCAL).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match ep.write(1, src.range(), desc.range(), Some(1), 0) {
                Err(Error::Peer { peer: 1, .. }) => break,
                Ok(()) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                other => panic!("write to a dead peer gave {other:?}"),
            }
        }
        let mut out = Vec::new();
        loop {
            match ep.wait(&mut out, Some(Duration::from_millis(50))) {
                Err(Error::Peer { peer: 1, .. }) => break,
                Ok(_) => out.clear(), // WriteDone of the writes that still landed
                Err(e) => panic!("wait with a dead peer gave {e}"),
            }
        }
    });
}

/// Pins the calling thread to the `k`-th CPU it may run on; false if it may run on fewer.
fn pin_to_nth_cpu(k: usize) -> bool {
    // SAFETY: zeroed cpu_set_t is a valid empty set; the calls get valid pointers and sizes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return false;
        }
        let Some(cpu) = (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).nth(k) else {
            return false;
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0
    }
}

/// `peer_busy_elsewhere` is true exactly for a peer that runs (no `set_idle(true)`) on another
/// CPU: ranks pinned to different CPUs see each other busy, not while the other announced
/// idleness, never themselves (same CPU), never an unknown rank. With one CPU, never.
#[test]
fn shm_presence_tells_where_peers_run() {
    support::ranks("shm_presence_tells_where_peers_run", 2, LIMIT, &[], |job| {
        let ep = connect(&job, "shm_presence_tells_where_peers_run");
        let (r, other) = (ep.rank(), 1 - ep.rank());
        let pinned = pin_to_nth_cpu(r);
        let apart = job.exchange("pinned", &[u8::from(pinned)]).iter().all(|b| b == &[1]);
        ep.set_idle(false); // publishes the CPU we now run on
        job.barrier("published");
        assert_eq!(ep.peer_busy_elsewhere(other), apart, "rank {r}: peer busy elsewhere");
        assert!(!ep.peer_busy_elsewhere(r), "rank {r}: itself busy elsewhere");
        assert!(!ep.peer_busy_elsewhere(7), "rank {r}: unknown rank busy elsewhere");
        job.barrier("checked");
        if r == 1 {
            ep.set_idle(true);
        }
        job.barrier("one idle");
        if r == 0 {
            assert!(!ep.peer_busy_elsewhere(1), "an idle peer counts as busy");
        }
        job.barrier("seen idle");
        if r == 1 {
            ep.set_idle(false);
        }
        job.barrier("running again");
        if r == 0 {
            assert_eq!(ep.peer_busy_elsewhere(1), apart, "a peer running again");
        }
        job.barrier("done");
    });
}

/// What another user (uid 65534) gets when it tries to read a file: `true` when `cat` succeeded.
/// `None` when this test cannot run as another user (not root).
fn readable_by_another_user(path: &str) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    if std::fs::metadata("/proc/self").map_or(1, |m| m.uid()) != 0 {
        eprintln!("skipped: switching to another user needs root");
        return None;
    }
    let cat = |path: &str| {
        let out = std::process::Command::new("cat").arg(path).uid(65534).gid(65534).output().expect("running cat");
        out.status.success()
    };
    // The control: the other user reads a world-readable file (so a refusal below means something).
    assert!(cat("/proc/version"), "uid 65534 cannot read a world-readable file: the check would prove nothing");
    Some(cat(path))
}

/// Shared-memory segments are not readable by other users (issue 37's threat model,
/// `docs/security.md`): the shm fabric's registrations are memfds reachable only through
/// `/proc/<pid>/fd`, which the kernel opens only for the same user with ptrace rights; libfabric
/// shm's regions in `/dev/shm` (where built) carry no group or other permission bits.
#[test]
fn shm_segments_are_not_readable_by_other_users() {
    support::ranks("shm_segments_are_not_readable_by_other_users", 2, LIMIT, &[], |job| {
        let mut ep = connect(&job, "shm_segments_are_not_readable_by_other_users");
        let mr = ep.alloc(1 << 16, Access::REMOTE_WRITE).expect("alloc");
        let pid = std::process::id();
        let memfds: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .expect("fd list")
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:")))
            .map(|e| format!("/proc/{pid}/fd/{}", e.file_name().to_string_lossy()))
            .collect();
        assert!(!memfds.is_empty(), "no memfd among the endpoint's descriptors");
        for path in &memfds {
            // The same user (the peers' way in) can open it.
            assert!(std::fs::File::open(path).is_ok(), "{path}: not readable by its own user");
            if let Some(readable) = readable_by_another_user(path) {
                assert!(!readable, "{path}: readable by another user");
            }
        }
        drop(mr);
        job.barrier("done");
    });
}

/// libfabric shm's regions (`/dev/shm/<pid>:<uid>:<index>`) are private to their user.
#[cfg(feature = "ofi")]
#[test]
fn ofi_shm_regions_are_private_to_their_user() {
    use std::os::unix::fs::PermissionsExt;
    support::ranks("ofi_shm_regions_are_private_to_their_user", 2, LIMIT, &[], |job| {
        let (r, p) = (job.rank() as usize, job.size() as usize);
        let cfg = Config::new(Backend::Ofi { provider: "shm".into() }, r, p, "ofi_shm_regions_are_private");
        let mut ep = match open(&cfg) {
            Ok(ep) => ep,
            Err(Error::Unavailable { reason, .. }) => return eprintln!("skipped: {reason}"),
            Err(e) => panic!("open ofi:shm: {e}"),
        };
        let blobs = job.exchange("ofi-shm-addr", &ep.address().expect("address"));
        ep.insert_peers(&blobs).expect("insert_peers");
        let prefix = format!("{}:", std::process::id());
        let regions: Vec<std::path::PathBuf> = std::fs::read_dir("/dev/shm")
            .expect("/dev/shm")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        assert!(!regions.is_empty(), "no region of this process in /dev/shm");
        for path in &regions {
            let mode = std::fs::metadata(path).expect("region metadata").permissions().mode();
            assert_eq!(mode & 0o077, 0, "{}: mode {mode:o} lets others in", path.display());
            if let Some(readable) = readable_by_another_user(&path.to_string_lossy()) {
                assert!(!readable, "{}: readable by another user", path.display());
            }
        }
        job.barrier("done");
    });
}
