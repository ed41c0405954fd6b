//! The communicator API over the local backend: nonblocking requests (several outstanding, as
//! futures), split and dup, copy counters of both protocols, the MR cache under free-and-reuse,
//! bad arguments, checked mode and a silent rank turning into an error that names it.

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use fabcoll::{Collectives, Communicator, Error, ExecConfig, Options, ReduceOp, Stats};

fn job<R: Send>(p: usize, cfg: ExecConfig, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    common::on_ranks(Communicator::local_with(p, cfg).unwrap(), f)
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn several_outstanding_nonblocking_and_futures() {
    job(5, common::cfg(), |c| {
        let p = c.size() as i64;
        let r = c.rank() as i64;
        let a: Vec<i64> = (0..100_003).map(|i| i + r).collect();
        let mut ra = vec![0i64; a.len()];
        let mut b = vec![r; 17];
        let small = [r * 2];
        let mut g = vec![0i64; 5];
        let mut bc: Vec<i64> = if r == 2 { (0..5000).collect() } else { vec![0; 5000] };
        c.scope(|s| {
            let q1 = s.allreduce(&a, &mut ra, &ReduceOp::Sum)?;
            let q2 = s.allreduce_in_place(&mut b, &ReduceOp::Max)?;
            let q3 = s.allgather(&small, &mut g)?;
            let q4 = s.bcast(&mut bc, 2)?;
            // Complete out of order, one as a future, one by polling test().
            q3.wait()?;
            block_on(q1)?;
            let mut q4 = q4;
            let r4 = loop {
                if let Some(r) = q4.test() {
                    break r;
                }
            };
            r4?;
            let _unfinished = q2; // the scope finishes it
            Ok(())
        })
        .unwrap();
        let sum_r = p * (p - 1) / 2;
        assert!(ra.iter().enumerate().all(|(i, &v)| v == p * i as i64 + sum_r));
        assert!(b.iter().all(|&v| v == p - 1));
        assert_eq!(g, (0..p).map(|q| q * 2).collect::<Vec<_>>());
        assert_eq!(bc, (0..5000).collect::<Vec<i64>>());
    });
}

#[test]
fn split_and_dup() {
    job(7, common::cfg(), |c| {
        let r = c.rank();
        // Even and odd ranks, reversed order inside each group; rank 6 opts out.
        let color = if r == 6 { None } else { Some(r % 2) };
        let sub = c.split(color, -(r as i32)).unwrap();
        let d = c.dup().unwrap();
        match sub {
            None => assert_eq!(r, 6),
            Some(sub) => {
                let members: Vec<u32> = (0..6).filter(|q| q % 2 == r % 2).rev().collect();
                assert_eq!(sub.size(), 3);
                assert_eq!(members[sub.rank() as usize], r);
                let mut all = vec![0u32; 3];
                sub.allgather(&[r], &mut all).unwrap();
                assert_eq!(all, members);
                // Collectives on the sub-communicator and the dup interleave.
                let mut x = vec![r as u64; 10_000];
                sub.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
                assert!(x.iter().all(|&v| v == members.iter().map(|&m| m as u64).sum::<u64>()));
            }
        }
        let mut y = [r as u64];
        d.allreduce_in_place(&mut y, &ReduceOp::Sum).unwrap();
        assert_eq!(y[0], 21);
        let mut z = [r as u64];
        c.allreduce_in_place(&mut z, &ReduceOp::Max).unwrap();
        assert_eq!(z[0], 6);
    });
}

fn total(stats: &[Stats]) -> Stats {
    let mut t = Stats::default();
    for s in stats {
        t.eager_msgs += s.eager_msgs;
        t.eager_bytes += s.eager_bytes;
        t.eager_copy_bytes += s.eager_copy_bytes;
        t.eager_fused_bytes += s.eager_fused_bytes;
        t.zcopy_msgs += s.zcopy_msgs;
        t.zcopy_bytes += s.zcopy_bytes;
        t.zcopy_copy_bytes += s.zcopy_copy_bytes;
        t.zcopy_read_bytes += s.zcopy_read_bytes;
        t.pulled_msgs += s.pulled_msgs;
        t.pulled_bytes += s.pulled_bytes;
        t.local_copy_bytes += s.local_copy_bytes;
        t.rts_msgs += s.rts_msgs;
        t.grants += s.grants;
        t.straight_calls += s.straight_calls;
        t.handovers += s.handovers;
        t.mailbox_msgs += s.mailbox_msgs;
        t.mailbox_bytes += s.mailbox_bytes;
        t.mailbox_copy_bytes += s.mailbox_copy_bytes;
        t.mailbox_fused_bytes += s.mailbox_fused_bytes;
    }
    t
}

/// Executor settings without the mailboxes: small calls take the eager rings.
fn engine_only() -> ExecConfig {
    ExecConfig { mailbox_limit: 0, ..common::cfg() }
}

#[test]
fn copy_counters_prove_zero_copy_and_single_copy_eager() {
    let opts = Options::algorithm("recursive_doubling");
    // Large: 4 ranks × 1 MiB of f64, zero-copy only.
    let big = job(4, common::cfg(), |c| {
        let x = vec![1.0f64; 131_072];
        let mut y = vec![0.0f64; x.len()];
        c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
        assert!(y.iter().all(|&v| v == 4.0));
        c.stats()
    });
    let t = total(&big);
    assert_eq!(t.eager_msgs, 0, "{t:?}");
    assert_eq!(t.transport_copy_bytes(), 0, "zero-copy path copied: {t:?}");
    assert_eq!(t.zcopy_bytes, 4 * 2 * 1_048_576, "{t:?}"); // log2(4) exchanges of the whole vector per rank
                                                           // Small: eager only, each byte copied exactly once (out of its slot).
    let small = job(4, engine_only(), |c| {
        let x = vec![1.0f64; 64];
        let mut y = vec![0.0f64; 64];
        c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
        assert!(y.iter().all(|&v| v == 4.0));
        c.stats()
    });
    let t = total(&small);
    assert_eq!(t.zcopy_msgs, 0, "{t:?}");
    assert_eq!(t.eager_bytes, 4 * 2 * 512, "{t:?}");
    // Recursive doubling reduces every received block into recv: fused, reduced straight out of
    // the slot, so not even the one eager copy happens.
    assert_eq!(t.eager_fused_bytes, t.eager_bytes, "{t:?}");
    assert_eq!(t.eager_copy_bytes, 0, "{t:?}");
    // Bcast has no reduction: every eager byte is copied out of its slot exactly once.
    let bc = job(4, engine_only(), |c| {
        let mut b = if c.rank() == 0 { vec![7u8; 1000] } else { vec![0u8; 1000] };
        c.with(&Options::algorithm("binomial")).bcast(&mut b, 0).unwrap();
        assert!(b.iter().all(|&v| v == 7));
        c.stats()
    });
    let t = total(&bc);
    assert_eq!(t.eager_bytes, 3 * 1000, "{t:?}");
    assert_eq!(t.eager_copy_bytes, t.eager_bytes, "eager bytes must be copied exactly once: {t:?}");
    assert_eq!(t.transport_copy_bytes(), t.eager_bytes);
    assert_eq!((t.rts_msgs, t.grants), (0, 0), "{t:?}");
}

/// A large message to a rank with nothing else to do is copied by both (`shared_copy_min`): the
/// sender writes the first half and the receiver reads the rest out of the sender's buffer. Every
/// byte moves once, by one of the two; with the setting at 0 the sender writes it all.
#[test]
fn idle_receivers_read_half_of_a_large_message() {
    let bytes: usize = (1 << 20) + 8;
    let half = bytes.div_ceil(2).next_multiple_of(4096);
    for (min, read) in [(256 << 10, 2 * (bytes - half)), (0, 0)] {
        let cfg = ExecConfig { shared_copy_min: min, ..common::cfg() };
        let stats = job(3, cfg, |c| {
            let mut b = if c.rank() == 1 { (0..bytes).map(|i| i as u8).collect() } else { vec![0u8; bytes] };
            c.with(&Options::algorithm("binomial")).bcast(&mut b, 1).unwrap();
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as u8), "rank {}", c.rank());
            c.stats()
        });
        let t = total(&stats);
        assert_eq!(stats[1].zcopy_read_bytes, 0, "the root read: {t:?}");
        assert_eq!(t.zcopy_read_bytes, read as u64, "{t:?}");
        assert_eq!(t.zcopy_bytes + t.zcopy_read_bytes, 2 * bytes as u64, "{t:?}");
        assert_eq!(t.transport_copy_bytes(), 0, "{t:?}");
    }
}

/// A large message whose Recv only feeds a Reduce is reduced straight out of the sender's buffer
/// (`pull_reduce_min`), never copied, when nothing after the sender's Send waits for that
/// buffer. shmem_cyclic out of place at p = 4: of each rank's three contributions, those
/// reduced into a partial are pulled (ranks 0, 2 and 3: two, rank 1: one; the rest start a
/// partial, received where it is kept), the rest written. In place (sum: commutative) every
/// contribution folds straight into the rank's own block, so all 12 are pulled; the reduced block
/// that comes back into a sent block waits for the reader's word (`fabcoll_collectives::lending`).
/// With the setting at 0 nothing is pulled.
#[test]
fn reductions_read_large_contributions_out_of_the_senders_buffers() {
    let (n, block) = (4 * 65_536, 65_536 * 8);
    for (min, in_place, pulled) in [(64 << 10, false, 7), (64 << 10, true, 12), (0, false, 0)] {
        let cfg = ExecConfig { pull_reduce_min: min, ..engine_only() };
        let stats = job(4, cfg, |c| {
            let x: Vec<f64> = (0..n).map(|i| (i % 1000) as f64 * f64::from(c.rank() + 1)).collect();
            let mut y = vec![0.0f64; n];
            let opts = Options::algorithm("shmem_cyclic");
            for _ in 0..2 {
                if in_place {
                    y.copy_from_slice(&x);
                    c.with(&opts).allreduce_in_place(&mut y, &ReduceOp::Sum).unwrap();
                } else {
                    c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
                }
                assert!(y.iter().enumerate().all(|(i, &v)| v == (i % 1000) as f64 * 10.0), "rank {}", c.rank());
            }
            c.stats()
        });
        let t = total(&stats);
        assert_eq!((t.pulled_msgs, t.pulled_bytes), (2 * pulled, 2 * pulled * block), "{min} {in_place}: {t:?}");
        assert_eq!(t.zcopy_bytes + t.pulled_bytes, 2 * 4 * 6 * block, "every block moves once: {t:?}");
        assert_eq!(t.transport_copy_bytes(), 0, "{t:?}");
    }
}

/// The engine forgets a transfer once it is done: after zero-copy and eager calls, nothing is
/// left in its tables of writes and grants in flight (a grant used to stay for good, one entry
/// per zero-copy receive; `fabcoll soak` found it, docs/fuzzing.md).
#[test]
fn finished_calls_leave_no_transfer_behind() {
    let left = job(3, engine_only(), |c| {
        let x = vec![1.0f32; 65_536];
        let mut y = vec![0.0f32; x.len()];
        let mut small = vec![0u8; 100];
        for _ in 0..20 {
            c.allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            c.bcast(&mut small, 0).unwrap();
        }
        c.barrier().unwrap();
        (c.stats().grants, c.transfers_tracked())
    });
    for (r, &(grants, tracked)) in left.iter().enumerate() {
        assert!(grants >= 20, "rank {r}: the 256 KiB allreduces went zero-copy ({grants} grants)");
        assert_eq!(tracked, 0, "rank {r}: transfers left in the engine's tables");
    }
}

/// Repeated small calls on the engine's eager path, with straight calls on or off: every rank's
/// counters.
fn small_calls(straight: bool, slots: usize, credit_fraction: usize, calls: usize) -> Vec<Stats> {
    let cfg = ExecConfig { straight, slots, credit_fraction, ..engine_only() };
    job(4, cfg, |c| {
        let r = c.rank() as usize;
        let rd = Options::algorithm("recursive_doubling");
        let bino = Options::algorithm("binomial");
        for i in 0..calls {
            let x = vec![(r + i) as f64; 64];
            let mut y = vec![0.0f64; 64];
            c.with(&rd).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            assert!(y.iter().all(|&v| v == (6 + 4 * i) as f64), "allreduce {i}: {:?}", &y[..4]);
            let mut b = if r == 2 { vec![i as u8; 1000] } else { vec![0u8; 1000] };
            c.with(&bino).bcast(&mut b, 2).unwrap();
            assert!(b.iter().all(|&v| v == i as u8), "bcast {i}");
            let mut g = vec![0u32; 4 * 5];
            c.allgather(&[(r * 100 + i) as u32; 5], &mut g).unwrap();
            for (k, v) in g.iter().enumerate() {
                assert_eq!(*v as usize, (k / 5) * 100 + i, "allgather {i} element {k}");
            }
        }
        c.stats()
    })
}

#[test]
fn straight_calls_move_the_same_bytes_as_the_engine_and_copy_as_little() {
    let (on, off) = (small_calls(true, 16, 4, 30), small_calls(false, 16, 4, 30));
    let (a, b) = (total(&on), total(&off));
    // 4 ranks x 3 blocking calls x 30 rounds. A call that finds an RTS for it already there
    // starts an op instead (timing).
    assert!(on.iter().all(|s| s.straight_calls > 0), "{on:?}");
    assert!(a.straight_calls >= 360 / 2, "{a:?}");
    assert_eq!((b.straight_calls, b.handovers), (0, 0), "{b:?}");
    assert_eq!(a.eager_bytes + a.zcopy_bytes, b.eager_bytes + b.zcopy_bytes, "{a:?}\n{b:?}");
    // Each eager byte is copied out of its slot at most once (allreduce's are reduced straight
    // out of it), inline or not.
    assert_eq!(a.eager_copy_bytes + a.eager_fused_bytes, a.eager_bytes, "{a:?}");
    assert_eq!(b.eager_copy_bytes + b.eager_fused_bytes, b.eager_bytes, "{b:?}");
    assert_eq!(a.transport_copy_bytes(), a.eager_copy_bytes, "{a:?}");
}

#[test]
fn straight_calls_meet_rendezvous_from_senders_out_of_slots() {
    // One slot per pair: a sender that runs ahead finds its slot still taken and sends an RTS,
    // which may reach its receiver while that runs the call inline (then an op takes it over)
    // or before (then the call starts an op). Either way every result must be right.
    let stats = small_calls(true, 1, 1, 200);
    let t = total(&stats);
    assert!(t.straight_calls > 0, "{t:?}");
    assert_eq!(t.eager_copy_bytes + t.eager_fused_bytes, t.eager_bytes, "{t:?}");
    eprintln!(
        "one slot per pair, 4 ranks x 600 calls: {} inline, {} handed over, {} RTS",
        t.straight_calls, t.handovers, t.rts_msgs
    );
}

#[test]
fn an_inline_call_that_waits_long_is_handed_over_to_an_op() {
    let stats = job(2, engine_only(), |c| {
        let mut b = vec![c.rank() as u16; 300];
        if c.rank() == 1 {
            // The root comes late: rank 0's call waits far longer than its spin budget.
            std::thread::sleep(Duration::from_millis(100));
            b.fill(77);
        }
        c.with(&Options::algorithm("binomial")).bcast(&mut b, 1).unwrap();
        assert!(b.iter().all(|&v| v == 77));
        // The communicator goes on working, inline again.
        let mut y = [0u64; 3];
        c.allreduce(&[c.rank() as u64 + 1; 3], &mut y, &ReduceOp::Sum).unwrap();
        assert_eq!(y, [3; 3]);
        c.stats()
    });
    assert!(stats[0].handovers >= 1, "{:?}", stats[0]);
    assert!(stats[0].straight_calls >= 2, "{:?}", stats[0]);
}

#[test]
fn an_inline_call_hands_over_when_another_thread_waits_for_the_engine() {
    // Each rank's engine is wanted by two threads at once: one waits inline (in a bcast whose
    // root comes late, or in an allreduce whose peer thread is blocked), the other needs the
    // engine to make progress. An inline call only lets go of the engine at a hand-over; with
    // a spin budget of 20 s only another thread's wait for the engine can cause one sooner.
    // Without it the two ranks block each other until the spin budget is spent.
    let spin = Duration::from_secs(20);
    let cfg = ExecConfig { spin, timeout: Duration::from_secs(60), ..engine_only() };
    let t0 = Instant::now();
    let stats = job(2, cfg, |c| {
        let d = c.dup().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut b = [0u32; 4];
                if c.rank() == 1 {
                    std::thread::sleep(Duration::from_millis(300));
                    b = [5; 4];
                }
                c.with(&Options::algorithm("binomial")).bcast(&mut b, 1).unwrap();
                assert_eq!(b, [5; 4]);
            });
            s.spawn(|| {
                // Rank 0 asks for the engine while its bcast waits inline.
                std::thread::sleep(Duration::from_millis(50));
                let mut x = [c.rank() + 1; 2];
                d.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
                assert_eq!(x, [3; 2]);
            });
        });
        c.stats()
    });
    assert!(t0.elapsed() < spin / 2, "the ranks waited for the spin budget: {:?}", t0.elapsed());
    assert!(stats[0].handovers >= 1, "{:?}", stats[0]);
}

#[test]
fn mailbox_calls_copy_once_and_reduces_out_of_the_mailbox() {
    // The first mailbox call sets up the mailboxes with an allgather on the engine: counters are
    // taken after one warm-up call.
    let delta = |c: &Communicator, f: &dyn Fn()| {
        let before = c.stats();
        f();
        let after = c.stats();
        Stats {
            mailbox_msgs: after.mailbox_msgs - before.mailbox_msgs,
            mailbox_bytes: after.mailbox_bytes - before.mailbox_bytes,
            mailbox_copy_bytes: after.mailbox_copy_bytes - before.mailbox_copy_bytes,
            mailbox_fused_bytes: after.mailbox_fused_bytes - before.mailbox_fused_bytes,
            eager_msgs: after.eager_msgs - before.eager_msgs,
            zcopy_msgs: after.zcopy_msgs - before.zcopy_msgs,
            ..Stats::default()
        }
    };
    let rd = Options::algorithm("recursive_doubling");
    let ar = job(4, common::cfg(), |c| {
        let x = vec![1.0f64; 64];
        let mut y = vec![0.0f64; 64];
        c.with(&rd).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
        delta(c, &|| {
            let mut y = vec![0.0f64; 64];
            c.with(&rd).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            assert!(y.iter().all(|&v| v == 4.0));
        })
    });
    let t = total(&ar);
    assert_eq!((t.eager_msgs, t.zcopy_msgs), (0, 0), "the engine moved data: {t:?}");
    assert_eq!((t.mailbox_msgs, t.mailbox_bytes), (4 * 2, 4 * 2 * 512), "{t:?}");
    // Recursive doubling reduces every received block straight out of the record: no copy.
    assert_eq!((t.mailbox_fused_bytes, t.mailbox_copy_bytes), (t.mailbox_bytes, 0), "{t:?}");
    let bc = job(4, common::cfg(), |c| {
        let mut b = vec![0u8; 1000];
        c.with(&Options::algorithm("binomial")).bcast(&mut b, 0).unwrap();
        delta(c, &|| {
            let mut b = if c.rank() == 0 { vec![7u8; 1000] } else { vec![0u8; 1000] };
            c.with(&Options::algorithm("binomial")).bcast(&mut b, 0).unwrap();
            assert!(b.iter().all(|&v| v == 7));
        })
    });
    let t = total(&bc);
    assert_eq!((t.eager_msgs, t.zcopy_msgs), (0, 0), "{t:?}");
    assert_eq!(t.mailbox_bytes, 3 * 1000, "{t:?}");
    assert_eq!(t.mailbox_copy_bytes, t.mailbox_bytes, "mailbox bytes must be copied exactly once: {t:?}");
    assert_eq!(t.transport_copy_bytes(), t.mailbox_bytes);
}

#[test]
fn mr_cache_survives_free_and_reuse() {
    // Without the cache (what pinning providers get): registered per call, same results.
    let uncached = ExecConfig { mr_cache: 0, ..common::cfg() };
    let stats = job(3, uncached, |c| {
        let mut x = vec![c.rank() as u64; 20_000];
        for _ in 0..3 {
            c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        }
        assert!(x.iter().all(|&v| v == 27));
        c.stats()
    });
    assert!(stats.iter().all(|s| s.cache_hits == 0 && s.registrations >= 3), "{stats:?}");
    let stats = job(3, common::cfg(), |c| {
        let r = c.rank() as u64;
        for round in 0..40u64 {
            // Same size every round: the allocator hands the same addresses back.
            let n = if round % 2 == 0 { 50_000 } else { 3_000 };
            let x: Vec<u64> = (0..n).map(|i| i * (round + 1) + r).collect();
            let mut y = vec![0u64; n as usize];
            c.allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            for (i, &v) in y.iter().enumerate() {
                assert_eq!(v, 3 * i as u64 * (round + 1) + 3, "round {round} element {i}");
            }
            drop(x);
            drop(y);
        }
        c.stats()
    });
    assert!(stats.iter().all(|s| s.cache_hits > 0), "the cache was never used: {stats:?}");
}

#[test]
fn bad_arguments_are_clear_errors() {
    job(3, common::cfg(), |c| {
        let x = [1i32; 4];
        let mut y = [0i32; 5];
        let e = c.allreduce(&x, &mut y, &ReduceOp::Sum).unwrap_err().to_string();
        assert!(e.contains("allreduce") && e.contains("receive buffer has 5 elements, expected 4"), "{e}");
        let mut b = [0u8; 3];
        let e = c.bcast(&mut b, 3).unwrap_err().to_string();
        assert!(e.contains("root 3 out of range 0..3"), "{e}");
        let e = c.alltoall(&[1u8; 4], &mut [0u8; 4]).unwrap_err().to_string();
        assert!(e.contains("not 3 equal blocks"), "{e}");
        let e = c.gatherv(&[1u8], &mut [0u8; 3], &[1, 1], None, 0).unwrap_err().to_string();
        assert!(e.contains("counts has 2 entries for 3 ranks"), "{e}");
        let e = c.allreduce(&[1.0f64], &mut [0.0], &ReduceOp::Band).unwrap_err().to_string();
        assert!(e.contains("band") && e.contains("f64"), "{e}");
        let e = c.with(&Options::algorithm("nosuch")).barrier().unwrap_err().to_string();
        assert!(e.contains("nosuch") && e.contains("dissemination"), "{e}");
        let e = c.with(&Options::algorithm("ring").param("bogus", 1)).allreduce(&x, &mut [0; 4], &ReduceOp::Sum);
        assert!(e.unwrap_err().to_string().contains("bogus"));
        let e = c.with(&Options::algorithm("pairwise_xor")).alltoall(&[1u8; 3], &mut [0u8; 3]);
        assert!(e.unwrap_err().to_string().contains("power-of-two"));
        let noncomm = common::affine_op();
        let pair = [common::pval(0, 0)];
        let e = c.with(&Options::algorithm("ring")).allreduce(&pair, &mut [common::pval(0, 0)], &noncomm);
        assert!(e.unwrap_err().to_string().contains("commutative"));
        // Still usable after all that (nothing was started).
        let mut z = [c.rank()];
        c.allreduce_in_place(&mut z, &ReduceOp::Sum).unwrap();
        assert_eq!(z[0], 3);
    });
}

#[test]
fn checked_mode_names_the_mismatching_rank() {
    let comms = Communicator::local_with(4, common::cfg()).unwrap();
    let errs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                s.spawn(move || {
                    c.set_checked(true);
                    let n = if c.rank() == 2 { 5 } else { 4 };
                    let x = vec![1u32; n];
                    let mut y = vec![0u32; n];
                    let e = c.allreduce(&x, &mut y, &ReduceOp::Sum).unwrap_err();
                    assert!(matches!(e, Error::Mismatch(_)), "{e}");
                    // No data moved: the communicator is still usable.
                    let mut z = [1u32];
                    c.allreduce_in_place(&mut z, &ReduceOp::Sum).unwrap();
                    assert_eq!(z[0], 4);
                    e.to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, e) in errs.iter().enumerate() {
        let culprit = if r == 2 { "rank 0" } else { "rank 2" };
        assert!(e.contains(culprit) && e.contains("count 5") && e.contains("count 4"), "rank {r}: {e}");
    }
}

#[test]
fn silent_rank_becomes_an_error_naming_it() {
    let cfg = ExecConfig { timeout: Duration::from_millis(800), ..Default::default() };
    let t0 = Instant::now();
    let errs = job(4, cfg, |c| {
        if c.rank() == 3 {
            // Alive (its memory stays registered) but never calls the collective.
            std::thread::sleep(Duration::from_secs(3));
            return None;
        }
        let mut x = vec![1u64; 100];
        Some(c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap_err())
    });
    assert!(t0.elapsed() < Duration::from_secs(10));
    // Every survivor names rank 3, also those that only waited for it indirectly.
    for e in errs.into_iter().flatten() {
        match &e {
            Error::Timeout { waiting_for, .. } => assert_eq!(waiting_for, &[3], "{e}"),
            other => panic!("expected a timeout, got {other}"),
        }
    }
}

#[test]
fn pinned_buffers_bypass_the_cache() {
    job(3, common::cfg(), |c| {
        let r = c.rank() as f32;
        let mut x = c.alloc::<f32>(70_000).unwrap();
        let mut y = c.alloc::<f32>(70_000).unwrap();
        let mut own = vec![0f32; 5000];
        let before = c.stats();
        for round in 0..5 {
            x.iter_mut().enumerate().for_each(|(i, v)| *v = (i % 100) as f32 + r + round as f32);
            c.allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
            assert!(y.iter().enumerate().all(|(i, &v)| v == 3.0 * ((i % 100) as f32 + round as f32) + 3.0));
            let mut g = c.register(&mut own).unwrap();
            g.fill(r);
            c.allreduce_in_place(&mut g, &ReduceOp::Max).unwrap();
            assert!(g.iter().all(|&v| v == 2.0));
        }
        let after = c.stats();
        assert_eq!(after.registrations, before.registrations, "pinned buffers went through the cache");
        assert_eq!(after.cache_hits, before.cache_hits);
    });
}

#[test]
fn segmented_pipelines_through_the_executor() {
    job(5, common::cfg(), |c| {
        for (alg, coll) in [
            ("ring", fabcoll::collectives::Collective::Allreduce),
            ("binomial", fabcoll::collectives::Collective::Bcast),
            ("scatter_ring_allgather", fabcoll::collectives::Collective::Bcast),
            ("binomial", fabcoll::collectives::Collective::Reduce),
        ] {
            let opts = Options::algorithm(alg).param("segment", 1000);
            let count = 100_003usize;
            let root = 2;
            let r = c.rank();
            let want: Vec<i64> = (0..count).map(|i| common::val(root, i)).collect();
            match coll {
                fabcoll::collectives::Collective::Bcast => {
                    let mut b = if r == root { want.clone() } else { vec![0; count] };
                    c.with(&opts).bcast(&mut b, root).unwrap();
                    assert_eq!(b, want, "{alg}");
                }
                _ => {
                    let x: Vec<i64> = (0..count).map(|i| common::val(r, i)).collect();
                    let mut y = vec![0i64; count];
                    let sum: Vec<i64> = (0..count).map(|i| (0..5).map(|q| common::val(q, i)).sum()).collect();
                    if coll == fabcoll::collectives::Collective::Reduce {
                        c.with(&opts).reduce(&x, &mut y, &ReduceOp::Sum, root).unwrap();
                        if r == root {
                            assert_eq!(y, sum, "{alg}");
                        }
                    } else {
                        c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
                        assert_eq!(y, sum, "{alg}");
                    }
                }
            }
        }
    });
}

#[test]
fn communicator_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Communicator>();
}

#[test]
fn early_messages_and_full_rings_fall_back_to_rendezvous() {
    let stats = job(3, engine_only(), |c| {
        if c.rank() != 0 {
            // The root runs far ahead: its eager messages for future bcasts wait in our slots
            // until the rings are full, then it must use rendezvous.
            std::thread::sleep(Duration::from_millis(300));
        }
        for round in 0..100u32 {
            let mut b: Vec<u32> = if c.rank() == 0 { (0..25).map(|i| i * round).collect() } else { vec![0; 25] };
            c.with(&Options::algorithm("binomial")).bcast(&mut b, 0).unwrap();
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as u32 * round), "round {round}");
        }
        c.stats()
    });
    assert!(stats[0].rts_msgs > 0, "the root never ran out of slots: {:?}", stats[0]);
    assert!(stats[0].eager_msgs > 0);
}

#[test]
fn a_sends_only_root_sends_at_once_and_falls_back_when_the_rings_are_full() {
    let stats = job(4, engine_only(), |c| {
        if c.rank() == 3 {
            // A slow receiver: the root's ring for it fills, and its calls take the engine.
            std::thread::sleep(Duration::from_millis(300));
        }
        for round in 0..200u32 {
            let mut b: Vec<u32> = if c.rank() == 1 { (0..9).map(|i| i ^ round).collect() } else { vec![0; 9] };
            c.with(&Options::algorithm("binomial")).bcast(&mut b, 1).unwrap();
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as u32 ^ round), "rank {} round {round}", c.rank());
        }
        // Nonblocking sends-only calls too, several outstanding.
        let mut bufs: Vec<Vec<u64>> = (0..5).map(|k| if c.rank() == 1 { vec![k; 3] } else { vec![0; 3] }).collect();
        c.scope(|s| {
            let reqs: Vec<_> = bufs.iter_mut().map(|b| s.bcast(b, 1)).collect::<Result<_, _>>()?;
            reqs.into_iter().try_for_each(|r| r.wait())
        })
        .unwrap();
        assert!(bufs.iter().enumerate().all(|(k, b)| b == &[k as u64; 3]), "rank {}: {bufs:?}", c.rank());
        c.stats()
    });
    let root = &stats[1];
    assert!(root.straight_calls > 0, "the root never sent at once: {root:?}");
    assert!(root.rts_msgs > 0, "the root never ran out of slots: {root:?}");
}

#[test]
fn repeated_and_changed_sends_only_calls_run_straight_on_their_own_buffers() {
    let stats = job(3, engine_only(), |c| {
        let root = c.rank() == 0;
        let fill = |b: &mut [u32], round: u32| {
            if root {
                b.iter_mut().enumerate().for_each(|(i, v)| *v = i as u32 * 7 + round);
            } else {
                b.fill(0);
            }
        };
        let check = |b: &[u32], round: u32, what: &str| {
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as u32 * 7 + round), "rank {} {what}: {b:?}", c.rank());
        };
        // The same call: new contents each time, one buffer.
        let mut a = vec![0u32; 40];
        for round in 0..60 {
            fill(&mut a, round);
            c.bcast(&mut a, 0).unwrap();
            check(&a, round, "repeat");
        }
        let before = c.stats();
        // Changed calls in between: another length, another buffer, another root.
        for round in 0..30 {
            let mut b = vec![0u32; 40 + (round as usize % 3)];
            fill(&mut b, 1000 + round);
            c.bcast(&mut b, 0).unwrap();
            check(&b, 1000 + round, "another buffer");
            fill(&mut a, 2000 + round);
            c.bcast(&mut a, 0).unwrap();
            check(&a, 2000 + round, "the first buffer again");
            let mut from2 = if c.rank() == 2 { vec![round + 1; 5] } else { vec![0; 5] };
            c.bcast(&mut from2, 2).unwrap();
            assert_eq!(from2, vec![round + 1; 5], "rank {}", c.rank());
        }
        // Buffers freed and allocated again (often at the same address) with other contents.
        for round in 0..30 {
            let mut b = vec![0u32; 40];
            fill(&mut b, 3000 + round);
            c.bcast(&mut b, 0).unwrap();
            check(&b, 3000 + round, "a reallocated buffer");
        }
        // A gather leaf's Sends read its send buffer.
        let mut mine = [0u64; 3];
        let mut all = vec![0u64; if root { 9 } else { 0 }];
        for round in 0..20u64 {
            mine.iter_mut().enumerate().for_each(|(i, v)| *v = u64::from(c.rank()) * 100 + i as u64 + round);
            c.gather(&mine, &mut all, 0).unwrap();
            if root {
                let want: Vec<u64> = (0..3u64).flat_map(|r| (0..3).map(move |i| r * 100 + i + round)).collect();
                assert_eq!(all, want, "round {round}");
            }
        }
        (before, c.stats())
    });
    let (before, after) = &stats[0];
    assert!(before.straight_calls >= 50, "the root sends its calls at once: {before:?}");
    let leaf = stats[1].1.since(&stats[1].0);
    assert!(leaf.straight_calls > 0, "a gather leaf's calls run straight: {leaf:?}");
    assert!(after.handovers <= after.straight_calls, "{after:?}");
}

#[test]
fn a_mailbox_call_progresses_the_nonblocking_ops_a_peer_waits_for() {
    // Rank 0 makes a small blocking call while its large nonblocking allreduce is in flight;
    // rank 1 first waits for that allreduce (which needs rank 0's grants and reductions), then
    // makes the small call. Legal in MPI; the mailbox call must progress the engine meanwhile.
    let cfg = ExecConfig { timeout: Duration::from_secs(10), ..common::cfg() };
    job(2, cfg, |c| {
        let r = c.rank() as u64;
        let big: Vec<u64> = (0..200_000).map(|i| i + r).collect();
        let mut out = vec![0u64; big.len()];
        let mut small = [r + 1];
        // Set the mailboxes up first (the set-up itself runs on the engine).
        c.allreduce_in_place(&mut [r], &ReduceOp::Sum).unwrap();
        c.scope(|s| {
            let q = s.allreduce(&big, &mut out, &ReduceOp::Sum)?;
            if c.rank() == 0 {
                c.allreduce_in_place(&mut small, &ReduceOp::Sum)?;
                q.wait()
            } else {
                q.wait()?;
                c.allreduce_in_place(&mut small, &ReduceOp::Sum)
            }
        })
        .unwrap();
        assert_eq!(small[0], 3);
        assert!(out.iter().enumerate().all(|(i, &v)| v == 2 * i as u64 + 1));
    });
}

#[test]
fn mailbox_setup_survives_a_root_that_leaves_at_once() {
    // The root's only call is a bcast it finishes without waiting for anyone; it then drops its
    // communicator (and mailbox region). Peers still mapping that region must not fail.
    for round in 0..30u8 {
        job(4, common::cfg(), |c| {
            let mut b = if c.rank() == 0 { vec![round; 100] } else { vec![0u8; 100] };
            c.with(&Options::algorithm("linear")).bcast(&mut b, 0).unwrap();
            assert!(b.iter().all(|&v| v == round));
        });
    }
}

#[test]
fn mailbox_root_running_far_ahead_waits_for_mailbox_space() {
    // 3000 bcasts of 100 B are several laps of a 64 KiB inbox: the root fills it and must wait
    // until the others, asleep at first, consume.
    job(3, common::cfg(), |c| {
        if c.rank() != 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        for round in 0..3000u32 {
            let mut b: Vec<u32> = if c.rank() == 0 { (0..25).map(|i| i ^ round).collect() } else { vec![0; 25] };
            c.with(&Options::algorithm("linear")).bcast(&mut b, 0).unwrap();
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as u32 ^ round), "round {round}");
        }
        let s = c.stats();
        if c.rank() == 0 {
            assert!(s.mailbox_msgs >= 2 * 3000, "{s:?}");
        } else {
            assert!(s.mailbox_copy_bytes >= 3000 * 100, "{s:?}");
        }
    });
}

#[test]
fn two_threads_on_dup_communicators_share_the_endpoint() {
    job(3, common::cfg(), |c| {
        let d = c.dup().unwrap();
        std::thread::scope(|s| {
            for (k, comm) in [(1u64, c), (2u64, &d)] {
                s.spawn(move || {
                    for round in 0..30u64 {
                        let mut x = vec![k * round; 3000];
                        comm.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
                        assert!(x.iter().all(|&v| v == 3 * k * round));
                    }
                });
            }
        });
    });
}

#[test]
fn in_place_variants() {
    job(5, common::cfg(), |c| {
        let r = c.rank() as i64;
        let op = ReduceOp::Sum;
        let mut a = vec![r + 1; 1000];
        c.allreduce_in_place(&mut a, &op).unwrap();
        assert!(a.iter().all(|&v| v == 15));
        let mut s = vec![r + 1; 1000];
        c.scan_in_place(&mut s, &op).unwrap();
        assert!(s.iter().all(|&v| v == (r + 1) * (r + 2) / 2));
        let mut e = vec![r + 1; 1000];
        c.exscan_in_place(&mut e, &op).unwrap();
        let want = if r == 0 { 1 } else { r * (r + 1) / 2 };
        assert!(e.iter().all(|&v| v == want), "exscan rank {r}: {}", e[0]);
        let mut red = vec![r + 1; 1000];
        c.reduce_in_place(&mut red, &op, 3).unwrap();
        if r == 3 {
            assert!(red.iter().all(|&v| v == 15));
        }
        let mut ag = vec![-1i64; 5 * 7];
        ag[r as usize * 7..(r as usize + 1) * 7].fill(r);
        c.allgather_in_place(&mut ag).unwrap();
        assert!(ag.iter().enumerate().all(|(i, &v)| v == (i / 7) as i64));
        let mut g = if r == 1 { vec![-1i64; 5 * 7] } else { vec![r; 7] };
        if r == 1 {
            g[7..14].fill(1);
        }
        c.gather_in_place(&mut g, 7, 1).unwrap();
        if r == 1 {
            assert!(g.iter().enumerate().all(|(i, &v)| v == (i / 7) as i64));
        }
    });
}

/// A barrier returns on no rank before the last rank has entered it, for every barrier
/// algorithm and p (the late rank sleeps 150 ms first; the others must wait for it).
#[test]
fn barrier_waits_for_the_last_rank() {
    for alg in ["dissemination", "recursive_doubling"] {
        for p in [2usize, 3, 4, 5] {
            let late = p - 1;
            let waited = job(p, common::cfg(), |c| {
                c.with(&Options::algorithm(alg)).barrier().unwrap();
                if c.rank() as usize == late {
                    std::thread::sleep(Duration::from_millis(150));
                }
                let t = Instant::now();
                c.with(&Options::algorithm(alg)).barrier().unwrap();
                t.elapsed()
            });
            for (r, w) in waited.iter().enumerate() {
                if r != late {
                    assert!(*w >= Duration::from_millis(100), "{alg} p={p}: rank {r} left the barrier after {w:?}");
                }
            }
        }
    }
}

/// A request that a test saw finish keeps its outcome: testing it again and then waiting for it
/// return `Ok` (they used to report "request already completed"), for a call that finished at
/// its start (small, on the mailboxes) and one that went through the engine (large).
#[test]
fn wait_after_a_successful_test_is_ok() {
    for n in [4usize, 100_000] {
        let sums = job(3, common::cfg(), |c| {
            let a = vec![i64::from(c.rank()) + 1; n];
            let mut out = vec![0i64; n];
            c.scope(|s| {
                let mut q = s.allreduce(&a, &mut out, &ReduceOp::Sum)?;
                let first = loop {
                    if let Some(r) = q.test() {
                        break r;
                    }
                };
                first?;
                assert!(matches!(q.test(), Some(Ok(()))), "n={n}: a second test after success");
                q.wait()
            })
            .unwrap();
            out
        });
        for (r, out) in sums.iter().enumerate() {
            assert!(out.iter().all(|&x| x == 6), "n={n}: rank {r}");
        }
    }
}
