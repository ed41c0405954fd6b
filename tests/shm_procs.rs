//! Multi-process runs over the `shm` backend (each rank a process re-executed from this test
//! binary, see `fabric/tests/support`): every collective × every algorithm against the reference
//! (also in place) at p ∈ {1, 2, 3, 4, 5, 7, 8}, nonblocking overlap, split and dup, bad arguments,
//! a killed rank turning into an error that names it on every survivor, and the environment
//! overrides. The bodies are in
//! `tests/common/procs.rs`, shared with `ofi_procs`.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::procs;
use fabcoll::{Collectives, Communicator, Error, ReduceOp};

const LIMIT: Duration = Duration::from_secs(240);

/// Runs `body` on `p` shm ranks; rank 0 reports how many checks it ran, which must be `want`.
fn on_shm(name: &str, p: u32, want: usize, body: fn(&Communicator) -> Result<usize, String>) {
    on_shm_with(name, p, want, None, body);
}

/// [`on_shm`] with `FABCOLL_MAILBOX` = `mailbox` if given (the mailbox limit; "0" = engine
/// only).
fn on_shm_with(
    name: &str,
    p: u32,
    want: usize,
    mailbox: Option<&str>,
    body: fn(&Communicator) -> Result<usize, String>,
) {
    let mark = procs::mark_path(name);
    let mut env = vec![("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_TEST_MARK", mark.as_str())];
    env.extend(mailbox.map(|d| ("FABCOLL_MAILBOX", d)));
    support::ranks(name, p, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let ran = body(&c).unwrap_or_else(|e| panic!("{e}"));
        c.barrier().unwrap(); // nobody leaves while a peer may still write
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if procs::is_parent() {
        let ran = procs::take_mark(&mark).expect("the ranks left no mark");
        assert_eq!(ran, want, "{name}: rank 0 ran {ran} checks, want {want}");
        eprintln!("{name}: {ran} checks verified per rank");
    }
}

macro_rules! all_algorithms {
    ($($name:ident: $p:expr),* $(,)?) => {$(
        #[test]
        fn $name() {
            on_shm(stringify!($name), $p, procs::matrix_len($p), procs::matrix);
        }
    )*};
}

all_algorithms! {
    shm_all_algorithms_p1: 1,
    shm_all_algorithms_p2: 2,
    shm_all_algorithms_p3: 3,
    shm_all_algorithms_p4: 4,
    shm_all_algorithms_p5: 5,
    shm_all_algorithms_p7: 7,
    shm_all_algorithms_p8: 8,
}

/// The engine's eager path on shm at the small counts, which otherwise take the mailboxes.
#[test]
fn shm_all_algorithms_p4_on_the_engine_alone() {
    on_shm_with("shm_all_algorithms_p4_on_the_engine_alone", 4, procs::matrix_len(4), Some("0"), procs::matrix);
}

#[test]
fn shm_nonblocking_overlap() {
    on_shm("shm_nonblocking_overlap", 4, 1, |c| procs::overlap(c).map(|()| 1));
}

#[test]
fn shm_transfers() {
    on_shm("shm_transfers", 3, 7, procs::transfers);
}

#[test]
fn shm_transfers_p2() {
    on_shm("shm_transfers_p2", 2, 7, procs::transfers);
}

#[test]
fn shm_split_and_dup() {
    on_shm("shm_split_and_dup", 6, 1, |c| procs::split(c).map(|()| 1));
}

#[test]
fn shm_joins_again_on_one_store() {
    on_shm("shm_joins_again_on_one_store", 3, 3, procs::join_again);
}

#[test]
fn shm_bad_arguments_are_clear_errors() {
    on_shm("shm_bad_arguments_are_clear_errors", 3, 9, procs::bad_arguments);
}

/// A killed rank is named, by a call on the engine (8000 B) and by one on the mailboxes (8 B).
fn shm_killed_rank(name: &str, count: usize) {
    support::ranks(name, 4, LIMIT, &[("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "5")], |job| {
        let c = Communicator::from_env().expect("communicator");
        procs::killed_rank(&c, count, Duration::from_secs(10), |name, n| {
            fabcoll::fabric::bootstrap::barrier(&*job.store, name, n, Duration::from_secs(30)).unwrap()
        });
    });
}

#[test]
fn shm_killed_rank_is_named() {
    shm_killed_rank("shm_killed_rank_is_named", 1000);
}

#[test]
fn shm_killed_rank_is_named_on_the_direct_path() {
    shm_killed_rank("shm_killed_rank_is_named_on_the_direct_path", 1);
}

#[test]
fn shm_env_algorithm_override_and_checked_mode() {
    let env =
        [("FABCOLL_FABRIC", "shm"), ("FABCOLL_ALGO", "allreduce:ring,alltoall:pairwise_xor"), ("FABCOLL_CHECK", "1")];
    support::ranks("shm_env_algorithm_override_and_checked_mode", 3, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let x = [c.rank() as i32; 10];
        let mut y = [0i32; 10];
        let send = [c.rank() as i32; 3];
        let mut recv = [0i32; 3];
        c.scope(|s| {
            let a = s.allreduce(&x, &mut y, &ReduceOp::Sum)?;
            assert_eq!(s.algorithm_of(&a), Some("ring"));
            // pairwise_xor needs a power of two: the override does not apply at p = 3.
            let b = s.alltoall(&send, &mut recv)?;
            assert_ne!(s.algorithm_of(&b), Some("pairwise_xor"));
            a.wait()?;
            b.wait()
        })
        .unwrap();
        assert_eq!(y, [3; 10]);
        assert_eq!(recv, [0, 1, 2]);
        // Checked mode is on from the environment: a mismatch is reported, not run.
        let n = if c.rank() == 1 { 2 } else { 1 };
        let e = c.bcast(&mut vec![0u8; n], 0).unwrap_err();
        assert!(matches!(e, Error::Mismatch(_)), "{e}");
        c.barrier().unwrap();
    });
}

/// Two ranks, each bound to one CPU before it joins: `apart` on CPUs of their own (what
/// `srun --cpu-bind=cores` or `mpirun --bind-to core` leave), else both on the same one. Each
/// sees a CPU set of one; the ranks of the machine count against the union of their sets, alike
/// on both: apart they have a core each (8 KiB eager, no yielding), together they share one
/// (64 KiB eager). A 32 KiB broadcast, eager only when they share, checks that they agree.
fn bound_ranks(name: &str, apart: bool) {
    let cpus = procs::own_cpus();
    if apart && cpus.len() < 2 {
        eprintln!("{name}: skipped, this process may run on {cpus:?} only");
        return;
    }
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, 2, LIMIT, &env, |job| {
        procs::bind_to(if apart { cpus[job.env.rank as usize] } else { cpus[0] });
        let c = Communicator::from_env().expect("communicator");
        assert_eq!(c.shares_cpus(), !apart, "rank {}: shares its CPUs", c.rank());
        assert_eq!(c.eager_limit(), if apart { 8192 } else { 65536 }, "rank {}", c.rank());
        let mut buf: Vec<u8> = (0..32 << 10).map(|i| if c.rank() == 0 { (i % 251) as u8 } else { 0 }).collect();
        c.bcast(&mut buf, 0).unwrap();
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "rank {}: wrong broadcast", c.rank());
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, "1").unwrap();
        }
    });
    if procs::is_parent() {
        assert_eq!(procs::take_mark(&mark), Some(1), "{name}: rank 0 left no mark");
    }
}

#[test]
fn ranks_bound_to_cpus_of_their_own_do_not_share_them() {
    bound_ranks("ranks_bound_to_cpus_of_their_own_do_not_share_them", true);
}

#[test]
fn ranks_bound_to_one_cpu_share_it() {
    bound_ranks("ranks_bound_to_one_cpu_share_it", false);
}

/// A rank whose eager limit differs from rank 0's (here `FABCOLL_EAGER` set on rank 1 alone)
/// stops as it joins, with an error that names both limits; without the check its first call
/// waited for messages that went another way until the timeout.
#[test]
fn a_rank_with_another_eager_limit_stops_as_it_joins() {
    let name = "a_rank_with_another_eager_limit_stops_as_it_joins";
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, 2, LIMIT, &env, |job| {
        if job.env.rank == 1 {
            std::env::set_var("FABCOLL_EAGER", "4096");
        }
        match (job.env.rank, Communicator::from_env()) {
            (0, Ok(_)) => {}
            (1, Err(Error::Mismatch(m))) => {
                assert!(m.contains("rank 1") && m.contains("eager<=4096") && m.contains("FABCOLL_EAGER"), "{m}");
                std::fs::write(&mark, "1").unwrap();
            }
            (r, other) => panic!("rank {r}: {:?}", other.map(|c| c.eager_limit())),
        }
    });
    if procs::is_parent() {
        assert_eq!(procs::take_mark(&mark), Some(1), "{name}: rank 1 left no mark");
    }
}

/// Bytes of transparent huge pages in the mapping that holds `addr` (`/proc/self/smaps`).
fn huge_page_bytes_at(addr: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
        if let Some((a, b)) =
            range.and_then(|(a, b)| Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?)))
        {
            inside = a <= addr && addr < b;
        } else if let (true, Some(kb)) = (inside, line.strip_prefix("AnonHugePages:")) {
            return kb.trim().trim_end_matches("kB").trim().parse::<usize>().expect("AnonHugePages") << 10;
        }
    }
    0
}

/// `len` bytes of fresh anonymous memory at `at` (replacing what was mapped there), or anywhere.
fn map_anonymous(at: Option<*mut i64>, len: usize) -> *mut i64 {
    let fixed = if at.is_some() { libc::MAP_FIXED } else { 0 };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed;
    // SAFETY: a new private mapping; with MAP_FIXED it replaces only the caller's own earlier
    // mapping of the same range, which no slice borrows any more.
    let p = unsafe {
        libc::mmap(at.unwrap_or(std::ptr::null_mut()).cast(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0)
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    p.cast()
}

/// A zero-copy message into heap memory of at most `FABCOLL_STAGED_RECEIVE` bytes lands in
/// scratch and is copied out (counted in `zcopy_copy_bytes`); a larger one, or one into
/// `alloc`ated memory, goes straight in. Results are checked at both sides of the limit, for
/// allgather (several messages per call, each in one piece: its ranks send while they receive)
/// and bcast (whose receivers, each with a CPU of its own by `FABCOLL_LOCAL_CPUS`, get the
/// limit's 3 pieces and 8 bytes, each copied out as it arrives), called twice (the scratch comes
/// back from the pool the second time); and a bcast from `alloc`ated memory, whose sender offers
/// half of the pieces for the receivers to read.
#[test]
fn heap_destinations_are_staged_up_to_the_limit() {
    const LIMIT_BYTES: usize = 3 * (128 << 10) + 8;
    let env = [
        ("FABCOLL_FABRIC", "shm"),
        ("FABCOLL_TIMEOUT", "30"),
        ("FABCOLL_STAGED_RECEIVE", "393224"),
        ("FABCOLL_HUGE_PAGES", "0"),
        ("FABCOLL_LOCAL_CPUS", "3"),
    ];
    support::ranks("heap_destinations_are_staged_up_to_the_limit", 3, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let (r, p) = (u64::from(c.rank()), u64::from(c.size()));
        let opts = fabcoll::Options::algorithm("ring");
        for bytes in [16392usize, LIMIT_BYTES, LIMIT_BYTES + 8] {
            let n = bytes / 8;
            for round in 0..2u64 {
                let before = c.stats().zcopy_copy_bytes;
                let send: Vec<u64> = (0..n as u64).map(|i| i * 7 + r * 1000 + round).collect();
                let mut recv = vec![0u64; n * p as usize];
                c.with(&opts).allgather(&send, &mut recv).unwrap();
                for (j, v) in recv.iter().enumerate() {
                    let (from, i) = (j as u64 / n as u64, j as u64 % n as u64);
                    assert_eq!(*v, i * 7 + from * 1000 + round, "allgather of {bytes} B, element {j}");
                }
                let mut b: Vec<u64> = if r == 1 { (0..n as u64).map(|i| i ^ round).collect() } else { vec![0; n] };
                c.bcast(&mut b, 1).unwrap();
                assert!(b.iter().enumerate().all(|(i, &v)| v == i as u64 ^ round), "bcast of {bytes} B");
                let copied = c.stats().zcopy_copy_bytes - before;
                // The ring allgather receives p - 1 blocks; bcast's non-roots one buffer.
                let want = if bytes <= LIMIT_BYTES { bytes as u64 * (p - 1 + u64::from(r != 1)) } else { 0 };
                assert_eq!(copied, want, "{bytes} B, round {round}: staged bytes copied out");
            }
        }
        // Into `alloc`ated memory peers write through a mapping: nothing staged.
        let before = c.stats().zcopy_copy_bytes;
        let mut b = c.alloc::<u64>(LIMIT_BYTES / 8).unwrap();
        b.iter_mut().enumerate().for_each(|(i, v)| *v = if r == 0 { i as u64 } else { 0 });
        c.bcast(&mut b, 0).unwrap();
        assert!(b.iter().enumerate().all(|(i, &v)| v == i as u64), "bcast into alloc'd memory");
        assert_eq!(c.stats().zcopy_copy_bytes, before, "a write into alloc'd memory was staged");
        // From `alloc`ated memory into the heap: staged in its 4 pieces, of which the sender writes
        // the first two (copied out) and offers the others (read straight into the destination).
        let before = c.stats();
        let n = LIMIT_BYTES / 8;
        let binomial = fabcoll::Options::algorithm("binomial");
        if r == 0 {
            let mut b = c.alloc::<u64>(n).unwrap();
            b.iter_mut().enumerate().for_each(|(i, v)| *v = i as u64 * 3);
            c.with(&binomial).bcast(&mut b, 0).unwrap();
        } else {
            let mut b = vec![0u64; n];
            c.with(&binomial).bcast(&mut b, 0).unwrap();
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as u64 * 3), "bcast from alloc'd memory");
        }
        let moved = c.stats().since(&before);
        let written = 2 * (128 << 10);
        let want = if r == 0 { (0, 0) } else { ((LIMIT_BYTES - written) as u64, written as u64) };
        assert_eq!((moved.zcopy_read_bytes, moved.zcopy_copy_bytes), want, "bytes read, bytes copied out");
        c.barrier().unwrap();
    });
}

/// A heap buffer used in `FABCOLL_HUGE_PAGES` calls gets huge pages (which the peer's
/// `process_vm_writev` fills faster) and keeps its contents through the collapse: in-place 6 MiB
/// allreduces, checked after every call. Then fresh memory mapped at the same address, as an
/// allocator does after a free (the registration cache's entry lives on): it gets huge pages
/// within as many calls too.
#[test]
fn reused_heap_buffers_get_huge_pages() {
    const HUGE: usize = 2 << 20;
    const LEN: usize = 6 << 20;
    let env = [("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_HUGE_PAGES", "3")];
    support::ranks("reused_heap_buffers_get_huge_pages", 2, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        let ptr = map_anonymous(None, LEN);
        let page = (ptr as usize).next_multiple_of(HUGE);
        for generation in 1..=2 {
            if generation == 2 {
                map_anonymous(Some(ptr), LEN);
                assert_eq!(huge_page_bytes_at(page), 0, "fresh memory has 4 KiB pages");
            }
            // SAFETY: `LEN` bytes mapped read-write above, used through this slice only.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr, LEN / 8) };
            for call in 1..=5i64 {
                buf.iter_mut().enumerate().for_each(|(i, v)| *v = i as i64 * call + i64::from(c.rank()));
                c.allreduce_in_place(buf, &ReduceOp::Sum).unwrap();
                let bad = buf.iter().enumerate().find(|&(i, &v)| v != 2 * i as i64 * call + 1);
                assert!(bad.is_none(), "buffer {generation}, call {call}: element {bad:?} wrong");
                let huge = huge_page_bytes_at(page);
                if generation == 1 && call < 3 && thp.contains("[madvise]") {
                    assert_eq!(huge, 0, "call {call}: huge pages before the third use");
                }
                if call >= 3 && !thp.contains("[never]") {
                    assert!(huge >= HUGE, "buffer {generation}, call {call}: {huge} bytes of huge pages at {page:#x}");
                }
            }
        }
        c.barrier().unwrap();
        // SAFETY: the mapping made above; nothing borrows it any more (the calls are done).
        unsafe { libc::munmap(ptr.cast(), LEN) };
    });
}

/// A zero-copy message of at least `FABCOLL_SHARED_COPY` bytes is copied by both ranks: the
/// sender writes the first of its two pieces and the receiver reads the second from the sender's
/// memory (counted in `zcopy_read_bytes`). Checked for heap buffers (`process_vm_readv`),
/// `alloc`ated ones (through a mapping) and a tagged transfer, with an odd length; below the
/// limit nothing is read, nor by a rank that is sending as it receives (a ring allgather).
/// (Staged receives, off here, are not shared: see `heap_destinations_are_staged_up_to_the_limit`.)
#[test]
fn large_messages_share_their_copy() {
    const MIN: usize = 1 << 20;
    let env = [
        ("FABCOLL_FABRIC", "shm"),
        ("FABCOLL_TIMEOUT", "30"),
        ("FABCOLL_SHARED_COPY", "1048576"),
        ("FABCOLL_HUGE_PAGES", "0"),
        ("FABCOLL_STAGED_RECEIVE", "0"),
    ];
    support::ranks("large_messages_share_their_copy", 3, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let r = u64::from(c.rank());
        // The receiver reads what follows the sender's first piece (half the message, rounded up
        // to 4 KiB).
        let read_of = |bytes: usize| if bytes >= MIN { bytes - bytes.div_ceil(2).next_multiple_of(4096) } else { 0 };
        let binomial = fabcoll::Options::algorithm("binomial");
        for bytes in [MIN / 2, MIN, (3 << 20) + 8] {
            let n = bytes / 8;
            for round in 0..2u64 {
                let before = c.stats().zcopy_read_bytes;
                let mut b: Vec<u64> =
                    if r == 1 { (0..n as u64).map(|i| (i * 3) ^ round).collect() } else { vec![0; n] };
                c.with(&binomial).bcast(&mut b, 1).unwrap();
                let bad = b.iter().enumerate().find(|&(i, &v)| v != (i as u64 * 3) ^ round);
                assert!(bad.is_none(), "bcast of {bytes} B, round {round}: element {bad:?}");
                let want = if r == 1 { 0 } else { read_of(bytes) as u64 };
                assert_eq!(c.stats().zcopy_read_bytes - before, want, "bcast of {bytes} B: bytes read");
            }
        }
        // A ring allgather sends while it receives: its receives do not invite reads.
        let before = c.stats().zcopy_read_bytes;
        let n = (3 << 20) / 8;
        let send: Vec<u64> = (0..n as u64).map(|i| i + r).collect();
        let mut recv = vec![0u64; 3 * n];
        c.with(&fabcoll::Options::algorithm("ring")).allgather(&send, &mut recv).unwrap();
        assert!(recv.iter().enumerate().all(|(j, &v)| v == (j % n) as u64 + (j / n) as u64), "allgather");
        assert_eq!(c.stats().zcopy_read_bytes, before, "a rank that sends invited a read");
        // `alloc`ated memory: read through a mapping of the sender's buffer.
        let before = c.stats().zcopy_read_bytes;
        let n = (MIN + 4096) / 8;
        let mut b = c.alloc::<u64>(n).unwrap();
        b.iter_mut().enumerate().for_each(|(i, v)| *v = if r == 0 { i as u64 + 5 } else { 0 });
        c.with(&binomial).bcast(&mut b, 0).unwrap();
        assert!(b.iter().enumerate().all(|(i, &v)| v == i as u64 + 5), "bcast into alloc'd memory");
        let want = if r == 0 { 0 } else { read_of(n * 8) as u64 };
        assert_eq!(c.stats().zcopy_read_bytes - before, want, "alloc'd memory: bytes read");
        // A tagged transfer from rank 2 to rank 0.
        let before = c.stats().zcopy_read_bytes;
        let n = (2 << 20) / 8 + 1;
        match r {
            2 => c.send(&(0..n as u64).map(|i| !i).collect::<Vec<u64>>(), 0, 7).unwrap(),
            0 => {
                let mut got = vec![0u64; n];
                c.recv(&mut got, 2, 7).unwrap();
                assert!(got.iter().enumerate().all(|(i, &v)| v == !(i as u64)), "transfer");
            }
            _ => {}
        }
        let want = if r == 0 { read_of(n * 8) as u64 } else { 0 };
        assert_eq!(c.stats().zcopy_read_bytes - before, want, "transfer: bytes read");
        // From the heap into `alloc`ated memory the sender's copy is a memcpy through a mapping,
        // the receiver's read would be a system call: the sender writes it all.
        let before = c.stats().zcopy_read_bytes;
        match r {
            2 => c.send(&(0..n as u64).collect::<Vec<u64>>(), 0, 8).unwrap(),
            0 => {
                let mut got = c.alloc::<u64>(n).unwrap();
                c.recv(&mut got, 2, 8).unwrap();
                assert!(got.iter().enumerate().all(|(i, &v)| v == i as u64), "transfer into alloc'd memory");
            }
            _ => {}
        }
        assert_eq!(c.stats().zcopy_read_bytes, before, "a read from the heap into alloc'd memory");
        c.barrier().unwrap();
    });
}

/// An in-place allreduce on heap buffers reads its peers' contributions out of their buffers
/// (`process_vm_readv`): shmem_cyclic at p = 4 folds every contribution (a sum) straight into the
/// rank's own block and pulls all 12 blocks of a call (see `tests/local_api.rs`), each sender's
/// reduced block coming back only once its reader is done with it. Blocks above the
/// staging limit (heap sources up to it are written instead). Exact sums, two rounds; with the
/// setting at 0 nothing is pulled.
fn in_place_pulls(name: &str, min: &'static str) {
    let env = [
        ("FABCOLL_FABRIC", "shm"),
        ("FABCOLL_TIMEOUT", "30"),
        ("FABCOLL_PULL_REDUCE", min),
        ("FABCOLL_HUGE_PAGES", "0"),
    ];
    support::ranks(name, 4, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let r = f64::from(c.rank() + 1);
        let n = 4 * (3 << 20) / 2 / 8;
        let opts = fabcoll::Options::algorithm("shmem_cyclic");
        let before = c.stats();
        for round in 0..2 {
            let mut y: Vec<f64> = (0..n).map(|i| ((i + round) % 1000) as f64 * r).collect();
            c.with(&opts).allreduce_in_place(&mut y, &ReduceOp::Sum).unwrap();
            let bad = y.iter().enumerate().find(|&(i, &v)| v != ((i + round) % 1000) as f64 * 10.0);
            assert!(bad.is_none(), "round {round}: element {bad:?}");
        }
        let moved = c.stats().since(&before);
        let mut pulled = [moved.pulled_msgs];
        c.allreduce_in_place(&mut pulled, &ReduceOp::Sum).unwrap();
        let want = if min == "0" { 0 } else { 2 * 12 };
        assert_eq!(pulled[0], want, "blocks pulled in two calls");
        c.barrier().unwrap();
    });
}

#[test]
fn in_place_reductions_read_their_peers_heap_buffers() {
    in_place_pulls("in_place_reductions_read_their_peers_heap_buffers", "65536");
}

#[test]
fn in_place_reductions_without_pulls_write_every_block() {
    in_place_pulls("in_place_reductions_without_pulls_write_every_block", "0");
}
