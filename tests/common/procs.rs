//! Bodies of the multi-process tests, shared by every fabric (`shm_procs`, `ofi_procs`): each runs
//! on one rank of a job started by the harness (`fabric/tests/support`) and returns what went
//! wrong on this rank. The test files only choose the fabric, the job size and the time limit.

use std::time::{Duration, Instant};

use fabcoll::collectives::Collective;
use fabcoll::{Collectives, Communicator, Error, Options, ReduceOp};

use super::{algorithms, args_for, in_place_args, run_in_place, run_one, val, IN_PLACE, UNTOUCHED};

/// This rank's communicator from the environment, or `None` (a line says why) when this build lacks
/// the fabric asked for (no libfabric for ofi).
pub fn connect() -> Option<Communicator> {
    match Communicator::from_env() {
        Ok(c) => Some(c),
        Err(Error::Fabric(fabcoll::fabric::Error::Unavailable { reason, .. })) => {
            eprintln!("skipped: {reason}");
            None
        }
        Err(e) => panic!("communicator: {e}"),
    }
}

/// The CPUs this process may run on.
pub fn own_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit array that `sched_getaffinity` fills for this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Binds this process to `cpu`, as a launcher binds a rank before it starts.
pub fn bind_to(cpu: usize) {
    // SAFETY: as in `own_cpus`; the set names one CPU this process may already run on.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

/// The counts of the matrix: empty, one element, p+1 (uneven blocks), and an odd count above
/// 100,000 (several eager slots, the rendezvous path, odd remainders).
pub fn counts(p: u32) -> [usize; 4] {
    [0, 1, p as usize + 1, 100_003]
}

/// Every collective × every eligible algorithm (and the default choice) × [`counts`], with the
/// non-commutative op as well for reductions, then the in-place forms the same way, checked
/// against the reference. One job runs the whole matrix: no per-case respawn or barrier. Returns
/// how many collectives were verified.
pub fn matrix(c: &Communicator) -> Result<usize, String> {
    let p = c.size();
    let mut ran = 0;
    for coll in Collective::ALL {
        for count in counts(p) {
            for noncomm in [false, true] {
                if noncomm && !coll.is_reduction() {
                    continue;
                }
                let args = args_for(coll, p, count, !noncomm);
                for alg in algorithms(&args).into_iter().map(Some).chain([None]) {
                    run_one(c, coll, alg, count, noncomm)?;
                    ran += 1;
                }
            }
        }
    }
    for coll in IN_PLACE {
        for count in counts(p) {
            for alg in algorithms(&in_place_args(coll, p, count)).into_iter().map(Some).chain([None]) {
                let opts = Options { algorithm: alg.map(str::to_owned), ..Default::default() };
                run_in_place(c, coll, &opts, count)?;
                ran += 1;
            }
        }
    }
    Ok(ran)
}

/// The number of collectives [`matrix`] runs at size `p` (the parent's check that the children
/// really ran all of them).
pub fn matrix_len(p: u32) -> usize {
    let mut n = 0;
    for coll in Collective::ALL {
        for count in counts(p) {
            for noncomm in [false, true] {
                if noncomm && !coll.is_reduction() {
                    continue;
                }
                n += algorithms(&args_for(coll, p, count, !noncomm)).len() + 1;
            }
        }
    }
    for coll in IN_PLACE {
        for count in counts(p) {
            n += algorithms(&in_place_args(coll, p, count)).len() + 1;
        }
    }
    n
}

fn ctx(c: &Communicator, what: &str) -> impl Fn(Error) -> String {
    let prefix = format!("{what} p={} rank={}", c.size(), c.rank());
    move |e| format!("{prefix}: {e}")
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: length {} != {}", got.len(), want.len()));
    }
    match (0..got.len()).find(|&i| got[i] != want[i]) {
        Some(i) => Err(format!("{what}: element {i}: got {:?}, want {:?}", got[i], want[i])),
        None => Ok(()),
    }
}

/// Nonblocking overlap: five collectives in flight at once on one communicator (two allreduces
/// with different algorithms, a bcast, an alltoall, an in-place scan), started in the same order
/// everywhere, overlapped with local work (the references are computed while they run) and with a
/// blocking collective on a dup of the communicator, then finished in a rank-dependent order by
/// `wait`, by polling `test` and as a future.
pub fn overlap(c: &Communicator) -> Result<(), String> {
    let (r, p) = (c.rank(), c.size());
    let (pu, ru) = (p as usize, r as usize);
    let root = p - 1;
    let n = 100_003;
    let m = 1_001;
    let e = ctx(c, "overlap");
    let dup = c.dup().map_err(&e)?;
    let x: Vec<i64> = (0..n).map(|i| val(r, i)).collect();
    let mut sum_a = vec![UNTOUCHED; n];
    let mut sum_b = vec![UNTOUCHED; n];
    let mut bc: Vec<i64> = if r == root { (0..n).map(|i| val(root, i)).collect() } else { vec![UNTOUCHED; n] };
    let a2a_send: Vec<i64> = (0..pu * m).map(|i| val(r, i)).collect();
    let mut a2a = vec![UNTOUCHED; pu * m];
    let mut sc: Vec<i64> = (0..7).map(|i| val(r, i)).collect();
    let mut on_dup = vec![r as i64; 3];
    let mut refs = Vec::new();
    c.scope(|s| {
        s.set_options(Options::algorithm("ring"));
        let q0 = s.allreduce(&x, &mut sum_a, &ReduceOp::Sum)?;
        s.set_options(Options::default());
        let q1 = s.bcast(&mut bc, root)?;
        let q2 = s.alltoall(&a2a_send, &mut a2a)?;
        s.set_options(Options::algorithm("recursive_doubling"));
        let q3 = s.allreduce(&x, &mut sum_b, &ReduceOp::Sum)?;
        s.set_options(Options::default());
        let q4 = s.scan_in_place(&mut sc, &ReduceOp::Sum)?;
        // Local work while they are in flight: the references, with a test() poll now and then.
        let mut poll = vec![q0, q1, q2, q3, q4];
        let sum: Vec<i64> = (0..n).map(|i| (0..p).map(|q| val(q, i)).sum()).collect();
        let mut done = [false; 5];
        if let Some(res) = poll[ru % 5].test() {
            res?;
            done[ru % 5] = true;
        }
        let a2a_want: Vec<i64> = (0..p).flat_map(|q| (0..m).map(move |i| val(q, ru * m + i))).collect();
        // A blocking collective on the dup while the five are outstanding (same engine).
        dup.allreduce_in_place(&mut on_dup, &ReduceOp::Sum)?;
        refs.push(sum);
        refs.push(a2a_want);
        // Finish in a rank-dependent order, each by a different means.
        let mut order: Vec<_> = poll.into_iter().zip(done).collect();
        order.rotate_left(ru % 5);
        for (k, (mut q, done)) in order.into_iter().enumerate() {
            if done {
                continue;
            }
            match k % 3 {
                0 => q.wait()?,
                1 => loop {
                    if let Some(res) = q.test() {
                        break res?;
                    }
                    std::hint::spin_loop();
                },
                _ => block_on(q)?,
            }
        }
        Ok(())
    })
    .map_err(&e)?;
    let sum_p: i64 = (0..p as i64).sum();
    expect(&format!("overlap allreduce on the dup rank={r}"), &on_dup, &[sum_p; 3])?;
    expect(&format!("overlap allreduce:ring rank={r}"), &sum_a, &refs[0])?;
    expect(&format!("overlap allreduce:recursive_doubling rank={r}"), &sum_b, &refs[0])?;
    expect(&format!("overlap bcast rank={r}"), &bc, &(0..n).map(|i| val(root, i)).collect::<Vec<_>>())?;
    expect(&format!("overlap alltoall rank={r}"), &a2a, &refs[1])?;
    let scan: Vec<i64> = (0..7).map(|i| (0..=r).map(|q| val(q, i)).sum()).collect();
    expect(&format!("overlap scan rank={r}"), &sc, &scan)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// Split and dup: even and odd ranks form two communicators (reversed order inside each by the
/// key), the last rank opts out; both groups run every collective (default algorithm, counts 1,
/// q+1 and 100,003 for a group of q) at the same time on the shared endpoint, interleaved with
/// collectives on a dup and on the parent; then a second split reverses the whole group.
pub fn split(c: &Communicator) -> Result<(), String> {
    let (r, p) = (c.rank(), c.size());
    let e = ctx(c, "split");
    let color = if r == p - 1 { None } else { Some(r % 2) };
    let sub = c.split(color, -(r as i32)).map_err(&e)?;
    let dup = c.dup().map_err(&e)?;
    let group = match &sub {
        None if r == p - 1 => None,
        None => return Err(format!("split rank={r}: got no communicator for color {color:?}")),
        Some(sub) => {
            let members: Vec<u32> = (0..p - 1).filter(|q| q % 2 == r % 2).rev().collect();
            if sub.size() != members.len() as u32 || members.get(sub.rank() as usize) != Some(&r) {
                return Err(format!("split rank={r}: got rank {} of {}, want {members:?}", sub.rank(), sub.size()));
            }
            let mut all = vec![u32::MAX; members.len()];
            sub.allgather(&[r], &mut all).map_err(&e)?;
            expect(&format!("split allgather of parent ranks rank={r}"), &all, &members)?;
            Some(sub)
        }
    };
    for coll in Collective::ALL {
        if let Some(sub) = group {
            for count in [1, sub.size() as usize + 1, 100_003] {
                run_one(sub, coll, None, count, false).map_err(|m| format!("on the split (parent rank {r}): {m}"))?;
            }
        }
        // The parent's dup in between, on every rank (also the one that opted out): contexts must
        // not mix.
        let mut y = [r as u64];
        dup.allreduce_in_place(&mut y, &ReduceOp::Max).map_err(&e)?;
        expect(&format!("split: dup allreduce rank={r}"), &y, &[p as u64 - 1])?;
    }
    // Every rank again, also the one that opted out.
    let mut z = [r as u64];
    c.allreduce_in_place(&mut z, &ReduceOp::Sum).map_err(&e)?;
    expect(&format!("split: parent allreduce rank={r}"), &z, &[(p as u64) * (p as u64 - 1) / 2])?;
    let rev = c.split(Some(7), -(r as i32)).map_err(&e)?.ok_or_else(|| format!("split rank={r}: no reversed comm"))?;
    if rev.rank() != p - 1 - r {
        return Err(format!("split rank={r}: reversed rank {} != {}", rev.rank(), p - 1 - r));
    }
    let mut all = vec![u32::MAX; p as usize];
    rev.allgather(&[r], &mut all).map_err(&e)?;
    expect(&format!("split: reversed allgather rank={r}"), &all, &(0..p).rev().collect::<Vec<_>>())?;
    run_one(&rev, Collective::Alltoallv, None, p as usize + 1, false)?;
    run_one(&rev, Collective::Scan, None, 100_003, true)
}

/// Joining the job again on the same store (the harness's, which outlives every communicator, as
/// a launcher's does): a second communicator beside the first, then a third once the second is
/// gone; each sums its ranks (a large vector too: zero-copy), and the first still works beside the
/// second. Returns the number of checks.
pub fn join_again(c: &Communicator) -> Result<usize, String> {
    let (r, p) = (c.rank(), c.size());
    let sums = |c: &Communicator, what: &str| -> Result<(), String> {
        let e = ctx(c, what);
        let mut small = [u64::from(r) + 1];
        c.allreduce_in_place(&mut small, &ReduceOp::Sum).map_err(&e)?;
        expect(what, &small, &[u64::from(p) * u64::from(p + 1) / 2])?;
        let mut large = vec![f64::from(r); 1 << 18];
        c.allreduce_in_place(&mut large, &ReduceOp::Max).map_err(&e)?;
        expect(what, &large, &vec![f64::from(p - 1); 1 << 18])
    };
    let second = Communicator::from_env().map_err(|e| format!("second join rank={r}: {e}"))?;
    sums(&second, "second join")?;
    sums(c, "first join beside the second")?;
    second.barrier().map_err(ctx(&second, "second join"))?; // nobody leaves while a peer may still write
    drop(second);
    let third = Communicator::from_env().map_err(|e| format!("third join rank={r}: {e}"))?;
    sums(&third, "third join")?;
    third.barrier().map_err(ctx(&third, "third join"))?;
    Ok(3)
}

/// Bad arguments over a process fabric: each is refused on the calling rank before anything is
/// sent (same call on every rank, as MPI requires), with a message naming the problem, and the
/// communicator stays usable. Returns the number of refusals checked.
pub fn bad_arguments(c: &Communicator) -> Result<usize, String> {
    let (r, p) = (c.rank(), c.size());
    let mut n = 0;
    let mut refused = |what: &str, res: fabcoll::Result<()>, needles: &[&str]| -> Result<(), String> {
        match res {
            Ok(()) => Err(format!("bad arguments rank={r}: {what} was accepted")),
            Err(e) => {
                let m = e.to_string();
                match needles.iter().find(|k| !m.contains(*k)) {
                    Some(k) => Err(format!("bad arguments rank={r}: {what}: message lacks {k:?}: {m}")),
                    None => {
                        n += 1;
                        Ok(())
                    }
                }
            }
        }
    };
    let x = [1i32; 4];
    refused("short receive buffer", c.allreduce(&x, &mut [0i32; 5], &ReduceOp::Sum), &["allreduce", "5", "4"])?;
    refused("root out of range", c.bcast(&mut [0u8; 3], p), &["root", &p.to_string()])?;
    let (len, pu) = (p as usize + 1, p as usize);
    if len % pu != 0 {
        refused("alltoall not in p blocks", c.alltoall(&vec![1u8; len], &mut vec![0u8; len]), &["alltoall"])?;
    }
    refused("counts of the wrong length", c.gatherv(&[1u8], &mut [0u8; 8], &vec![1; pu + 1], None, 0), &["counts"])?;
    refused("op not defined on the type", c.allreduce(&[1.0f64], &mut [0.0], &ReduceOp::Band), &["band", "f64"])?;
    let unknown = Options::algorithm("nosuch");
    refused("unknown algorithm", c.with(&unknown).barrier(), &["nosuch", "dissemination"])?;
    let bogus = Options::algorithm("ring").param("bogus", 1);
    refused("unknown parameter", c.with(&bogus).allreduce(&x, &mut [0; 4], &ReduceOp::Sum), &["bogus"])?;
    let zero = Options::algorithm("ring_n_barriers").param("barriers", 0);
    refused("parameter out of range", c.with(&zero).alltoall(&vec![1u8; pu], &mut vec![0u8; pu]), &["barriers"])?;
    let noncomm = super::affine_op();
    let pair = [super::pval(0, 0)];
    let ring = Options::algorithm("ring");
    refused(
        "non-commutative op on a commutative-only algorithm",
        c.with(&ring).allreduce(&pair, &mut [super::pval(0, 0)], &noncomm),
        &["commutative"],
    )?;
    // Nothing was started: the communicator still works.
    let mut z = [r];
    c.allreduce_in_place(&mut z, &ReduceOp::Sum).map_err(ctx(c, "after bad arguments"))?;
    expect(&format!("allreduce after bad arguments rank={r}"), &z, &[p * (p - 1) / 2])?;
    Ok(n)
}

/// Killed rank: after one good allreduce of `count` u64, rank `p-1` exits; each survivor's next
/// allreduce must fail within `limit` with an error that names exactly that rank, and the
/// communicator must then say it is broken. `store_barrier(name, n)` is a barrier of `n` ranks
/// outside the communicator: all ranks pass one after the first allreduce, so that the rank dies
/// between collectives (it may finish its part of a collective before a survivor finished its
/// own, and then the survivor's first allreduce could see it gone: seen once in CI on tcp), and
/// the survivors pass one before they leave (a survivor that exits early would look dead to the
/// others).
pub fn killed_rank(c: &Communicator, count: usize, limit: Duration, store_barrier: impl Fn(&str, u32)) {
    let (r, p) = (c.rank(), c.size());
    let dead = p - 1;
    let mut x = vec![1u64; count];
    c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
    assert!(x.iter().all(|&v| v == p as u64), "rank {r}: first allreduce wrong");
    store_barrier("first-done", p);
    if r == dead {
        std::process::exit(0); // dies between collectives
    }
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let e = c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap_err();
    assert!(t0.elapsed() < limit, "rank {r}: the error took {:?}: {e}", t0.elapsed());
    let named = match &e {
        Error::Timeout { waiting_for, .. } => waiting_for == &[dead],
        Error::PeerLost { peers, .. } => peers == &[dead],
        _ => false,
    };
    assert!(named, "rank {r}: error does not name exactly rank {dead}: {e}");
    assert!(e.to_string().contains(&dead.to_string()), "rank {r}: message does not name rank {dead}: {e}");
    eprintln!("rank {r}: {e}");
    assert!(matches!(c.barrier(), Err(Error::Broken(_))), "rank {r}: communicator not broken after {e}");
    store_barrier("survivors", p - 1);
}

/// A bcast root whose only receiver died: its calls send at once without an op (straight, see
/// `exec::ring`) until a write to the dead rank fails, or the first call already finds the
/// connection gone; that call ends with an error naming the rank, and the communicator is broken.
/// The straight path is checked while both ranks live: after the death, whether the first write
/// still leaves depends on when the root's transport sees the connection close (under load the
/// first call found it closed in 7 of 25 runs on tcp).
pub fn root_of_a_dead_receiver(c: &Communicator, limit: Duration) {
    let r = c.rank();
    let mut x = vec![1u64; 4];
    c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
    let mut b = [7u8; 8];
    let binomial = Options::algorithm("binomial");
    c.with(&binomial).bcast(&mut b, 0).unwrap();
    if r == 1 {
        std::process::exit(0); // after it received the bcast
    }
    assert!(c.stats().straight_calls > 0, "the root did not send at once while its receiver lived: {:?}", c.stats());
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let mut calls = 0u64;
    let e = loop {
        match c.with(&binomial).bcast(&mut b, 0) {
            Ok(()) => calls += 1,
            Err(e) => break e,
        }
        assert!(t0.elapsed() < limit, "no error after {calls} calls in {:?}", t0.elapsed());
    };
    let named = match &e {
        Error::Timeout { waiting_for, .. } => waiting_for == &[1],
        Error::PeerLost { peers, .. } => peers == &[1],
        _ => false,
    };
    assert!(named, "after {calls} calls: error does not name exactly rank 1: {e}");
    eprintln!("rank 0 after {calls} calls: {e}");
    assert!(matches!(c.barrier(), Err(Error::Broken(_))), "communicator not broken after {e}");
}

/// Where rank 0 of job `name` leaves its mark (the number of checks it ran), so the parent knows
/// the children really ran the body: the path the parent passes down in `FABCOLL_TEST_MARK`.
pub fn mark_path(name: &str) -> String {
    std::env::var("FABCOLL_TEST_MARK")
        .unwrap_or_else(|_| format!("{}/fabcoll-{name}-{}", std::env::temp_dir().display(), std::process::id()))
}

/// In the parent, after the job: the number rank 0 left, or `None` when it left none (the
/// children skipped the body and said why).
pub fn take_mark(path: &str) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let _ = std::fs::remove_file(path);
    Some(text.trim().parse().expect("a number in the mark"))
}

/// Whether this process is the parent of the harness (not one of the ranks).
pub fn is_parent() -> bool {
    std::env::var("FABCOLL_TEST_CHILD").is_err()
}

/// Tagged point-to-point transfers (`Collectives::send`/`recv`, blocking and in a scope): a halo
/// exchange on the ring of all ranks (both neighbours at once, nonblocking) at sizes across the
/// eager limit and zero-copy, then rank 0 sends each rank a series it receives blocking, in
/// order, on a dup; then rank 0 receives from any source a message of each size from every
/// other rank. Returns the checks run (7 per rank).
pub fn transfers(c: &Communicator) -> Result<usize, String> {
    let (r, p) = (c.rank(), c.size());
    let e = ctx(c, "transfers");
    let value = |src: u32, n: usize, i: usize| ((src as i64) << 40) ^ ((n as i64) << 24) ^ i as i64;
    let msg = |src: u32, n: usize, len: usize| (0..len).map(|i| value(src, n, i)).collect::<Vec<i64>>();
    let verify = |got: &[i64], src: u32, n: usize| match got.iter().enumerate().find(|&(i, &v)| v != value(src, n, i)) {
        None => Ok(()),
        Some((i, v)) => Err(format!("rank {r}: message {n} from {src}: element {i} is {v:#x}")),
    };
    let mut checks = 0;
    if p > 1 {
        let (left, right) = ((r + p - 1) % p, (r + 1) % p);
        for (n, len) in [0usize, 1, 1000, 100_003].into_iter().enumerate() {
            let (to_right, to_left) = (msg(r, 2 * n, len), msg(r, 2 * n + 1, len));
            let (mut from_left, mut from_right) = (vec![UNTOUCHED; len], vec![UNTOUCHED; len]);
            if left == right {
                // Two ranks: both directions are one peer, told apart by the tag.
                c.scope(|s| {
                    s.recv(&mut from_left, left, 1)?;
                    s.recv(&mut from_right, right, 2)?;
                    s.send(&to_right, right, 1)?;
                    s.send(&to_left, left, 2)?;
                    Ok(())
                })
                .map_err(&e)?;
            } else {
                c.scope(|s| {
                    s.send(&to_right, right, 1)?;
                    s.recv(&mut from_left, left, 1)?;
                    s.recv(&mut from_right, right, 2)?;
                    s.send(&to_left, left, 2)?;
                    Ok(())
                })
                .map_err(&e)?;
            }
            verify(&from_left, left, 2 * n)?;
            verify(&from_right, right, 2 * n + 1)?;
        }
        checks += 4;
        let dup = c.dup().map_err(&e)?;
        let sizes = [3usize, 70_000];
        if r == 0 {
            for dst in 1..p {
                for (n, &len) in sizes.iter().enumerate() {
                    dup.send(&msg(0, n, len), dst, 9).map_err(&e)?;
                }
            }
        } else {
            for (n, &len) in sizes.iter().enumerate() {
                let mut got = vec![UNTOUCHED; len];
                dup.recv(&mut got, 0, 9).map_err(&e)?;
                verify(&got, 0, n)?;
            }
        }
        checks += 2;
        // Every other rank sends rank 0 a message of each size (a tag per size: a message with the
        // receive's tag and another size would be a mismatch); rank 0 receives from any source.
        for (n, len) in [1000usize, 100_003].into_iter().enumerate() {
            let tag = 11 + n as u32;
            if r == 0 {
                let mut seen = Vec::new();
                for _ in 1..p {
                    let mut got = vec![UNTOUCHED; len];
                    let src = c.recv_any(&mut got, tag).map_err(&e)?;
                    verify(&got, src, n)?;
                    seen.push(src);
                }
                seen.sort_unstable();
                if seen != (1..p).collect::<Vec<u32>>() {
                    return Err(format!("rank 0: any source gave senders {seen:?}"));
                }
            } else {
                c.send(&msg(r, n, len), 0, tag).map_err(&e)?;
            }
        }
        checks += 1;
    }
    Ok(checks)
}
