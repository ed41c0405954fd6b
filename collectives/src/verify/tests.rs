//! Hand-built schedules that the verifier must accept, and broken ones it must reject with a
//! telling message (proof that it can fail).

use super::*;
use crate::cost::Cost;
use crate::registry::Restrictions;
use crate::schedule::ScheduleBuilder;

fn rg(buf: Buf, off: u64, len: u64) -> Region {
    Region::new(buf, off, len)
}

/// Every rank's args and the schedules `build` makes for them.
fn job(base: &CollArgs, build: impl Fn(&CollArgs) -> Schedule) -> (Vec<CollArgs>, Vec<Schedule>) {
    let args: Vec<CollArgs> = (0..base.size).map(|r| base.for_rank(r)).collect();
    let scheds = args.iter().map(&build).collect();
    (args, scheds)
}

fn verify(base: &CollArgs, build: impl Fn(&CollArgs) -> Schedule) -> Result<()> {
    let (a, s) = job(base, build);
    check_job(&a, &s)
}

fn err_of(r: Result<()>) -> String {
    match r {
        Err(Error::Verify(m)) => m,
        other => panic!("expected a verification error, got {other:?}"),
    }
}

/// Knobs to break the linear allreduce in specific ways.
#[derive(Clone, Copy, Default)]
struct Faults {
    wrong_order: bool,
    skip_last_reduce: bool,
    reduce_twice: bool,
}

/// Linear allreduce: everyone sends to rank 0, which reduces in rank order and sends the result
/// back. Correct for non-commutative ops.
fn linear_allreduce(a: &CollArgs, f: Faults) -> Schedule {
    let (r, p, n) = (a.rank, a.size, a.count);
    let mut b = ScheduleBuilder::for_args(a);
    if r == 0 {
        let tmp = b.scratch(n * u64::from(p.max(2) - 1));
        let mut last = b.copy(rg(Buf::Send, 0, n), rg(Buf::Recv, 0, n), &[]);
        let order = if f.wrong_order { Order::SrcFirst } else { Order::DstFirst };
        for i in 1..p {
            let t = rg(tmp, u64::from(i - 1) * n, n);
            let rv = b.recv(i, t, &[]);
            if f.skip_last_reduce && i == p - 1 {
                continue;
            }
            last = b.reduce(t, rg(Buf::Recv, 0, n), order, &[rv, last]);
            if f.reduce_twice && i == 1 {
                last = b.reduce(t, rg(Buf::Recv, 0, n), order, &[last]);
            }
        }
        for i in 1..p {
            b.send(i, rg(Buf::Recv, 0, n), &[last]);
        }
    } else {
        // In place, the input is in Recv: receive only after it was sent.
        let sd = b.send(0, rg(Buf::Send, 0, n), &[]);
        b.recv(0, rg(Buf::Recv, 0, n), &[sd]);
    }
    b.finish()
}

/// Ring allgather: in round k, rank r forwards block (r − k) mod p to r + 1.
fn ring_allgather(a: &CollArgs) -> Schedule {
    let (r, p, n) = (a.rank, a.size, a.count);
    let mut b = ScheduleBuilder::for_args(a);
    let blk = |i: u32| rg(Buf::Recv, u64::from(i) * n, n);
    let mut prev = b.copy(rg(Buf::Send, 0, n), blk(r), &[]);
    for k in 0..p - 1 {
        b.send((r + 1) % p, blk((r + p - k) % p), &[prev]);
        prev = b.recv((r + p - 1) % p, blk((r + 2 * p - k - 1) % p), &[]);
    }
    b.finish()
}

fn allreduce(p: u32, n: u64, commutative: bool) -> CollArgs {
    CollArgs::new(Collective::Allreduce, 0, p, n).with_commutative(commutative)
}

#[test]
fn accepts_linear_allreduce_noncommutative() {
    for p in 1..=9 {
        for n in [0, 1, 5] {
            for comm in [false, true] {
                verify(&allreduce(p, n, comm), |a| linear_allreduce(a, Faults::default())).unwrap();
            }
        }
    }
}

#[test]
fn accepts_ring_allgather() {
    for p in 1..=9 {
        for n in [0, 1, 3] {
            verify(&CollArgs::new(Collective::Allgather, 0, p, n), ring_allgather).unwrap();
        }
    }
}

fn build_linear(a: &CollArgs) -> Result<Schedule> {
    Ok(linear_allreduce(a, Faults::default()))
}

fn no_cost(_: &CollArgs) -> Cost {
    Cost::default()
}

const LINEAR: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "test_linear",
    summary: "test only",
    restrictions: Restrictions::NONE,
    params: &[],
    cost: no_cost,
    build: build_linear,
};

#[test]
fn check_runs_registry_transforms_in_place_and_pipeline() {
    for p in [1, 2, 5] {
        for n in [0, 1, 7] {
            let a = allreduce(p, n, false);
            check(&LINEAR, &a).unwrap();
            let mut ip = a.clone();
            ip.in_place = true;
            check(&LINEAR, &ip).unwrap();
            check(&LINEAR, &a.clone().with_param("segment", 2)).unwrap();
        }
    }
}

#[test]
fn rejects_wrong_order_of_noncommutative_reduce() {
    let m = err_of(verify(&allreduce(3, 4, false), |a| {
        linear_allreduce(a, Faults { wrong_order: true, ..Faults::default() })
    }));
    assert!(m.contains("non-adjacent combination ranks {1} ⊕ ranks {0}"), "{m}");
    assert!(m.contains("rank 0 step"), "{m}");
    // The same order is fine for a commutative op.
    verify(&allreduce(3, 4, true), |a| linear_allreduce(a, Faults { wrong_order: true, ..Faults::default() })).unwrap();
}

#[test]
fn rejects_missing_contribution() {
    let m = err_of(verify(&allreduce(4, 3, true), |a| {
        linear_allreduce(a, Faults { skip_last_reduce: true, ..Faults::default() })
    }));
    assert!(m.contains("holds index 0 from ranks {0..3}, expected index 0 from ranks {0..4}"), "{m}");
}

#[test]
fn rejects_double_contribution() {
    let m = err_of(verify(&allreduce(3, 2, true), |a| {
        linear_allreduce(a, Faults { reduce_twice: true, ..Faults::default() })
    }));
    assert!(m.contains("double contribution of ranks {1}"), "{m}");
}

#[test]
fn rejects_unmatched_send() {
    let m = err_of(verify(&allreduce(3, 2, true), |a| {
        let mut s = linear_allreduce(a, Faults::default());
        if a.rank == 2 {
            let mut b = ScheduleBuilder::for_args(a);
            for (_, k, d) in s.iter() {
                b.push(*k, d);
            }
            b.send(0, rg(Buf::Send, 0, 2), &[]);
            s = b.finish();
        }
        s
    }));
    assert!(m.contains("unmatched message: rank 2 sends 2 message(s) to rank 0, which posts 1 recv(s)"), "{m}");
}

#[test]
fn rejects_length_mismatch() {
    let m = err_of(verify(&allreduce(2, 3, true), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        if a.rank == 0 {
            b.recv(1, rg(Buf::Recv, 0, 3), &[]);
        } else {
            b.send(0, rg(Buf::Send, 0, 2), &[]);
        }
        b.finish()
    }));
    assert!(m.contains("length mismatch") && m.contains("sends 2 element(s)") && m.contains("receives 3"), "{m}");
}

#[test]
fn rejects_cycle() {
    // Both ranks receive before they send: each waits for the other.
    let m = err_of(verify(&allreduce(2, 2, true), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        let t = b.scratch(2);
        let rv = b.recv(1 - a.rank, rg(t, 0, 2), &[]);
        b.send(1 - a.rank, rg(Buf::Send, 0, 2), &[rv]);
        b.finish()
    }));
    assert!(
        m.contains("deadlock") && m.contains("rank 0 step 0 (recv tmp0[0..2] <- 1) waits for rank 1 step 1"),
        "{m}"
    );
}

#[test]
fn rejects_race() {
    // Two recvs into the same region with no order between them.
    let m = err_of(verify(&CollArgs::new(Collective::Bcast, 0, 3, 4), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        if a.rank == 0 {
            b.send(1, rg(Buf::Recv, 0, 4), &[]);
            b.send(2, rg(Buf::Recv, 0, 4), &[]);
        } else if a.rank == 1 {
            let rv = b.recv(0, rg(Buf::Recv, 0, 4), &[]);
            b.send(2, rg(Buf::Recv, 0, 4), &[rv]);
        } else {
            b.recv(0, rg(Buf::Recv, 0, 4), &[]);
            b.recv(1, rg(Buf::Recv, 0, 4), &[]);
        }
        b.finish()
    }));
    assert!(m.contains("rank 2: race: step 0 (recv recv[0..4] <- 0) and step 1 (recv recv[0..4] <- 1)"), "{m}");
    assert!(m.contains("both write recv[0..4]"), "{m}");
}

#[test]
fn rejects_read_write_race() {
    // Rank 1 forwards its Recv while it is still being received.
    let m = err_of(verify(&CollArgs::new(Collective::Bcast, 0, 3, 4), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        match a.rank {
            0 => {
                b.send(1, rg(Buf::Recv, 0, 4), &[]);
            }
            1 => {
                b.recv(0, rg(Buf::Recv, 0, 4), &[]);
                b.send(2, rg(Buf::Recv, 2, 2), &[]);
            }
            _ => {
                b.recv(1, rg(Buf::Recv, 2, 2), &[]);
            }
        }
        b.finish()
    }));
    assert!(m.contains("rank 1: race") && m.contains("step 0 writes and step 1 reads recv[2..4]"), "{m}");
}

#[test]
fn rejects_scratch_overflow() {
    let m = err_of(verify(&allreduce(1, 4, true), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        let t = b.scratch(3);
        let c = b.copy(rg(Buf::Send, 0, 4), rg(t, 0, 4), &[]);
        b.copy(rg(t, 0, 4), rg(Buf::Recv, 0, 4), &[c]);
        b.finish()
    }));
    assert!(
        m.contains("rank 0 step 0 (copy send[0..4] -> tmp0[0..4])") && m.contains("outside its buffer of 3"),
        "{m}"
    );
}

#[test]
fn rejects_undefined_data_in_result() {
    // Rank 1 reduces from scratch it never wrote.
    let m = err_of(verify(&allreduce(2, 2, true), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        let t = b.scratch(2);
        let peer = 1 - a.rank;
        let c = b.copy(rg(Buf::Send, 0, 2), rg(Buf::Recv, 0, 2), &[]);
        b.send(peer, rg(Buf::Send, 0, 2), &[]);
        let rv = b.recv(peer, rg(if a.rank == 0 { t } else { Buf::Recv }, 0, 2), &[c]);
        let order = if a.rank == 0 { Order::DstFirst } else { Order::SrcFirst };
        b.reduce(rg(t, 0, 2), rg(Buf::Recv, 0, 2), order, &[rv]);
        b.finish()
    }));
    assert!(m.contains("rank 1 recv[0..2] wrong") && m.contains("combines undefined (never written)"), "{m}");
}

#[test]
fn rejects_wrong_block_and_names_writer() {
    // Allgather with p = 2 where rank 1 swaps the two blocks of its result.
    let m = err_of(verify(&CollArgs::new(Collective::Allgather, 0, 2, 2), |a| {
        let (r, peer) = (a.rank, 1 - a.rank);
        let (own, other) = if r == 1 { (0, 2) } else { (2 * r as u64, 2 * peer as u64) };
        let mut b = ScheduleBuilder::for_args(a);
        b.copy(rg(Buf::Send, 0, 2), rg(Buf::Recv, own, 2), &[]);
        b.send(peer, rg(Buf::Send, 0, 2), &[]);
        b.recv(peer, rg(Buf::Recv, other, 2), &[]);
        b.finish()
    }));
    assert!(
        m.contains(
            "rank 1 recv[0..4] wrong: recv[0] holds index 0 from ranks {1}, expected index 0 from ranks {0} \
             (last writers: step 0 (copy send[0..2] -> recv[0..2])); 4 of 4 element(s) wrong"
        ),
        "{m}"
    );
}

#[test]
fn rejects_barrier_that_does_not_synchronize() {
    // Everyone tells rank 0 it arrived, but rank 0 never answers.
    let m = err_of(verify(&CollArgs::new(Collective::Barrier, 0, 3, 0), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        if a.rank == 0 {
            b.recv(1, rg(Buf::Recv, 0, 0), &[]);
            b.recv(2, rg(Buf::Recv, 0, 0), &[]);
        } else {
            b.send(0, rg(Buf::Send, 0, 0), &[]);
        }
        b.finish()
    }));
    assert!(m.contains("barrier: rank 1 can finish before ranks {0, 2}"), "{m}");
}

#[test]
fn accepts_barrier_gather_release() {
    verify(&CollArgs::new(Collective::Barrier, 0, 4, 0), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        let z = rg(Buf::Recv, 0, 0);
        if a.rank == 0 {
            let rs: Vec<StepId> = (1..a.size).map(|i| b.recv(i, z, &[])).collect();
            for i in 1..a.size {
                b.send(i, z, &rs);
            }
        } else {
            let s = b.send(0, z, &[]);
            b.recv(0, z, &[s]);
        }
        b.finish()
    })
    .unwrap();
}

#[test]
fn rejects_inconsistent_job() {
    let (mut a, s) = job(&allreduce(3, 2, true), |a| linear_allreduce(a, Faults::default()));
    a[1].count = 3;
    assert!(check_job(&a, &s).is_err());
    assert!(check_job(&a[..2], &s).is_err());
    let big = CollArgs::new(Collective::Allreduce, 0, 300, 1);
    assert!(matches!(check(&LINEAR, &big), Err(Error::Verify(m)) if m.contains("limit of 256")));
}

/// Linear allreduce whose non-root ranks post the result's Recv without waiting for their Send:
/// fine out of place, a race in place (the input is in Recv).
fn build_linear_eager_recv(a: &CollArgs) -> Result<Schedule> {
    if a.rank == 0 {
        return Ok(linear_allreduce(a, Faults::default()));
    }
    let mut b = ScheduleBuilder::for_args(a);
    b.send(0, rg(Buf::Send, 0, a.count), &[]);
    b.recv(0, rg(Buf::Recv, 0, a.count), &[]);
    Ok(b.finish())
}

#[test]
fn rejects_schedule_that_breaks_in_place() {
    let alg = Algorithm { name: "test_eager_recv", build: build_linear_eager_recv, ..LINEAR };
    let a = allreduce(3, 2, false);
    check(&alg, &a).unwrap();
    let mut ip = a;
    ip.in_place = true;
    let m = err_of(check(&alg, &ip));
    assert!(
        m.contains(
            "allreduce:test_eager_recv (p=3 count=2 noncommutative in_place): rank 1: race: step 0 \
             (send recv[0..2] -> 0) and step 1 (recv recv[0..2] <- 0) are not ordered by deps and step 0 reads and \
             step 1 writes recv[0..2]"
        ),
        "{m}"
    );
}

#[test]
fn rejects_huge_scratch_without_allocating() {
    let m = err_of(verify(&allreduce(2, 1, true), |a| {
        let mut b = ScheduleBuilder::for_args(a);
        b.scratch(1 << 40);
        b.finish()
    }));
    assert!(m.contains("more than the verifier's"), "{m}");
}
