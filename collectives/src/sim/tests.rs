//! Simulator tests on hand-built schedules with exact expected times.

use super::*;
use crate::args::Collective;
use crate::blocks::block;
use crate::cost::ceil_log2;
use crate::schedule::{Buf, Order, Region, ScheduleBuilder, StepId};

/// α = 2, β = 1/2, γ = 1/4 (exact in binary), f_α = 3/2, f_β = 2.
const SKEW: Machine = Machine { alpha: 2.0, beta: 0.5, gamma: 0.25, f_alpha: 1.5, f_beta: 2.0 };

fn job(coll: Collective, p: u32, count: u64) -> CollArgs {
    CollArgs::new(coll, 0, p, count)
}

fn all(p: u32, f: impl Fn(u32) -> Schedule) -> Vec<Schedule> {
    (0..p).map(f).collect()
}

/// Ring allgather of `c` elements per rank (thakur §4.1).
fn ring_allgather(p: u32, c: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, p);
    let blk = |i: u32| Region::new(Buf::Recv, u64::from(i) * c, c);
    let mut prev = b.copy(Region::new(Buf::Send, 0, c), blk(r), &[]);
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for i in 0..p - 1 {
        b.send(right, blk((r + p - i) % p), &[prev]);
        prev = b.recv(left, blk((r + 2 * p - i - 1) % p), &[]);
    }
    b.finish()
}

/// Ring allreduce of `count` elements: reduce-scatter then allgather around the ring.
fn ring_allreduce(p: u32, count: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, p);
    let (pp, rr) = (u64::from(p), u64::from(r));
    let blk = |i: u64| {
        let (off, len) = block(count, pp, i % pp);
        Region::new(Buf::Recv, off, len)
    };
    let tmp = b.scratch(count.div_ceil(pp));
    let mut prev = b.copy(Region::new(Buf::Send, 0, count), Region::new(Buf::Recv, 0, count), &[]);
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for i in 0..pp - 1 {
        b.send(right, blk(rr + pp - i), &[prev]);
        let dst = blk(rr + 2 * pp - i - 1);
        let v = b.recv(left, Region::new(tmp, 0, dst.len), &[prev]);
        prev = b.reduce(Region::new(tmp, 0, dst.len), dst, Order::SrcFirst, &[v, prev]);
    }
    for i in 0..pp - 1 {
        b.send(right, blk(rr + 1 + pp - i), &[prev]);
        prev = b.recv(left, blk(rr + pp - i), &[prev]);
    }
    b.finish()
}

/// Recursive-doubling allgather, p a power of two (thakur §4.1.1).
fn rd_allgather(p: u32, c: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, p);
    let mut prev = b.copy(Region::new(Buf::Send, 0, c), Region::new(Buf::Recv, u64::from(r) * c, c), &[]);
    let mut mask = 1u32;
    while mask < p {
        let partner = r ^ mask;
        let (mine, theirs) = (r / mask * mask, partner / mask * mask);
        let len = u64::from(mask) * c;
        b.send(partner, Region::new(Buf::Recv, u64::from(mine) * c, len), &[prev]);
        prev = b.recv(partner, Region::new(Buf::Recv, u64::from(theirs) * c, len), &[prev]);
        mask <<= 1;
    }
    b.finish()
}

/// Binomial bcast from root 0 (thakur §4.2).
fn binomial_bcast(p: u32, count: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, p);
    let all = Region::new(Buf::Recv, 0, count);
    let mut deps: Vec<StepId> = Vec::new();
    let mut mask = 1u32;
    while mask < p {
        if r & mask != 0 {
            deps.push(b.recv(r - mask, all, &[]));
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if r + mask < p {
            b.send(r + mask, all, &deps);
        }
        mask >>= 1;
    }
    b.finish()
}

/// Every rank sends `c` elements to rank 0 (linear gather).
fn linear_gather(p: u32, c: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, p);
    if r == 0 {
        for q in 1..p {
            b.recv(q, Region::new(Buf::Recv, u64::from(q) * c, c), &[]);
        }
    } else {
        b.send(0, Region::new(Buf::Send, 0, c), &[]);
    }
    b.finish()
}

#[test]
fn ring_allgather_matches_thakur() {
    for p in [2u32, 3, 5, 8, 13] {
        let c = 6u64;
        let args = job(Collective::Allgather, p, c);
        let s = all(p, |r| ring_allgather(p, c, r));
        let res = simulate(&args, &s, &Machine::UNIT).unwrap();
        let pm1 = f64::from(p - 1);
        let n = (u64::from(p) * c * 4) as f64;
        assert_eq!(res.critical_path, Cost::new(pm1, pm1 / f64::from(p) * n, 0.0), "p={p}");
        assert_eq!(res.time, pm1 + pm1 / f64::from(p) * n);
        assert_eq!(res.max_bytes_sent, (p as u64 - 1) * c * 4);
        assert_eq!(res.messages, u64::from(p) * u64::from(p - 1));
        assert_eq!(res.critical_messages, u64::from(p - 1));
        // every transfer overlaps a receive at its sender: the bidirectional factors apply
        let skew = simulate(&args, &s, &SKEW).unwrap();
        let b = c as f64 * 4.0;
        assert_eq!(skew.time, pm1 * (1.5 * 2.0 + 2.0 * b * 0.5), "p={p}");
        assert_eq!(skew.critical_path, Cost::new(1.5 * pm1, 2.0 * b * pm1, 0.0));
    }
}

#[test]
fn ring_allreduce_matches_thakur() {
    for p in [2u32, 3, 4, 7, 16] {
        let count = u64::from(p) * 5;
        let args = job(Collective::Allreduce, p, count);
        let s = all(p, |r| ring_allreduce(p, count, r));
        let res = simulate(&args, &s, &Machine::UNIT).unwrap();
        let (pm1, n) = (f64::from(p - 1), (count * 4) as f64);
        let want = Cost::new(2.0 * pm1, 2.0 * pm1 / f64::from(p) * n, pm1 / f64::from(p) * n);
        assert_eq!(res.critical_path, want, "p={p}");
        assert_eq!(res.time, want.time(&Machine::UNIT));
    }
}

#[test]
fn binomial_bcast_is_unidirectional() {
    for p in [1u32, 2, 3, 6, 8, 11] {
        let count = 10u64;
        let args = job(Collective::Bcast, p, count);
        let s = all(p, |r| binomial_bcast(p, count, r));
        let lg = f64::from(ceil_log2(u64::from(p)));
        let res = simulate(&args, &s, &Machine::UNIT).unwrap();
        assert_eq!(res.critical_path, Cost::new(lg, lg * 40.0, 0.0), "p={p}");
        // no node sends and receives at once: f factors never apply
        let skew = simulate(&args, &s, &SKEW).unwrap();
        assert_eq!(skew.time, lg * (2.0 + 40.0 * 0.5), "p={p}");
        assert_eq!(skew.max_bytes_sent, u64::from(ceil_log2(u64::from(p))) * 40);
    }
}

#[test]
fn receive_port_serializes_incoming_messages() {
    let (p, c) = (6u32, 3u64);
    let args = job(Collective::Gather, p, c);
    let s = all(p, |r| linear_gather(p, c, r));
    let res = simulate(&args, &s, &Machine::UNIT).unwrap();
    assert_eq!(res.time, 5.0 * (1.0 + 12.0));
    assert_eq!(res.critical_path, Cost::new(5.0, 60.0, 0.0));
    assert_eq!(res.max_bytes_received, 60);
    assert_eq!(res.max_bytes_sent, 12);
    // all ask for the root's port at t = 0: the lower sender rank goes first, and a sender
    // finishes when its own message is through
    assert_eq!(res.finish, vec![65.0, 13.0, 26.0, 39.0, 52.0, 65.0]);
}

#[test]
fn send_port_is_held_while_the_receiver_is_busy() {
    // Rank 3 → 1 (10 elements) occupies rank 1's port over [0, 41). Rank 0 gets a 0-byte message
    // from 2 at t = 1, then sends to 1 (waits for rank 1's port until 41, done at 46) and to 2:
    // that one waits behind the first on rank 0's send port, over [46, 51).
    let p = 4u32;
    let r = |len| Region::new(Buf::Send, 0, len);
    let mut b0 = ScheduleBuilder::new(0, p);
    let v = b0.recv(2, r(0), &[]);
    b0.send(1, r(1), &[v]);
    b0.send(2, r(1), &[v]);
    let mut b1 = ScheduleBuilder::new(1, p);
    b1.recv(0, r(1), &[]);
    b1.recv(3, r(10), &[]);
    let mut b2 = ScheduleBuilder::new(2, p);
    b2.send(0, r(0), &[]);
    b2.recv(0, r(1), &[]);
    let mut b3 = ScheduleBuilder::new(3, p);
    b3.send(1, r(10), &[]);
    let s = vec![b0.finish(), b1.finish(), b2.finish(), b3.finish()];
    let res = simulate(&job(Collective::Alltoallv, p, 1), &s, &Machine::UNIT).unwrap();
    assert_eq!(res.finish, vec![51.0, 46.0, 51.0, 41.0]);
    assert_eq!(res.critical_path, Cost::new(3.0, 48.0, 0.0));
    assert_eq!(res.critical_messages, 3);
    assert_eq!(res.max_messages_sent, 2);
}

#[test]
fn exchange_and_reduce_terms_are_separated() {
    let (p, count) = (2u32, 8u64);
    let s = all(p, |r| {
        let mut b = ScheduleBuilder::new(r, p);
        let t = b.scratch(count);
        b.send(1 - r, Region::new(Buf::Send, 0, count), &[]);
        let v = b.recv(1 - r, Region::new(t, 0, count), &[]);
        let c = b.copy(Region::new(Buf::Send, 0, count), Region::new(Buf::Recv, 0, count), &[]);
        b.reduce(Region::new(t, 0, count), Region::new(Buf::Recv, 0, count), Order::SrcFirst, &[v, c]);
        b.finish()
    });
    let args = job(Collective::Allreduce, p, count);
    let res = simulate(&args, &s, &SKEW).unwrap();
    assert_eq!(res.critical_path, Cost::new(1.5, 64.0, 32.0));
    assert_eq!(res.time, 1.5 * 2.0 + 64.0 * 0.5 + 32.0 * 0.25);
    // copies are free by default and cost copy_beta per byte otherwise (overlapping the transfer)
    let cfg = ModelParams { copy_beta: 10.0, ..ModelParams::new(Machine::UNIT) };
    let res = simulate_with(&args, &s, &cfg).unwrap();
    assert_eq!(res.time, 320.0 + 32.0);
    assert_eq!(res.critical_copy_bytes, 32.0);
}

#[test]
fn long_messages_pay_the_rendezvous() {
    // Two ranks, one message of n = count·4 bytes: α + α_r + nβ above the eager limit, α + nβ at it.
    let (p, count) = (2u32, 100u64);
    let s = all(p, |r| {
        let mut b = ScheduleBuilder::new(r, p);
        if r == 0 {
            b.send(1, Region::new(Buf::Send, 0, count), &[]);
        } else {
            b.recv(0, Region::new(Buf::Recv, 0, count), &[]);
        }
        b.finish()
    });
    let args = job(Collective::Bcast, p, count);
    let n = (count * u64::from(args.elem_size)) as f64;
    let m = Machine { alpha: 3.0, beta: 0.5, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 };
    let long = ModelParams { rendezvous: Rendezvous { eager_limit: 399, alpha: 7.0 }, ..ModelParams::new(m) };
    let res = simulate_with(&args, &s, &long).unwrap();
    assert_eq!(res.time, 3.0 + 7.0 + n * 0.5);
    assert_eq!(res.critical_rendezvous, 1);
    assert_eq!(res.time, res.critical_path.time(&m) + 7.0 * res.critical_rendezvous as f64);
    let at_limit = ModelParams { rendezvous: Rendezvous { eager_limit: n as u64, ..long.rendezvous }, ..long };
    let res = simulate_with(&args, &s, &at_limit).unwrap();
    assert_eq!((res.time, res.critical_rendezvous), (3.0 + n * 0.5, 0));
    // off by default
    assert_eq!(simulate(&args, &s, &m).unwrap().time, 3.0 + n * 0.5);
    let bad = ModelParams { rendezvous: Rendezvous { alpha: -1.0, ..long.rendezvous }, ..long };
    assert!(simulate_with(&args, &s, &bad).is_err());
}

#[test]
fn messages_into_forwarded_destinations_pay_the_hot_cost() {
    // A chain 0 → 1 → 2: rank 1 forwards what it received (a hot destination), rank 2 keeps it.
    let (p, count) = (3u32, 100u64);
    let s = all(p, |r| {
        let mut b = ScheduleBuilder::new(r, p);
        let buf = Region::new(Buf::Recv, 0, count);
        match r {
            0 => {
                b.send(1, Region::new(Buf::Send, 0, count), &[]);
            }
            1 => {
                let got = b.recv(0, buf, &[]);
                b.send(2, buf, &[got]);
            }
            _ => {
                b.recv(1, buf, &[]);
            }
        }
        b.finish()
    });
    let args = job(Collective::Bcast, p, count);
    let n = (count * u64::from(args.elem_size)) as f64;
    let m = Machine { alpha: 3.0, beta: 0.5, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 };
    let off = simulate(&args, &s, &m).unwrap();
    assert_eq!(off.time, 2.0 * (3.0 + n * 0.5));
    assert_eq!(
        (off.critical_hot_messages, off.critical_hot_bytes),
        (1, n),
        "the first hop is into a forwarded buffer, the second is not"
    );
    let hot = ModelParams { hot_alpha: 2.0, hot_beta: 0.25, ..ModelParams::new(m) };
    let res = simulate_with(&args, &s, &hot).unwrap();
    assert_eq!(res.time, off.time + 2.0 + n * 0.25);
    assert_eq!(
        res.time,
        res.critical_path.time(&m) + 2.0 * res.critical_hot_messages as f64 + res.critical_hot_bytes * 0.25
    );
    assert!(simulate_with(&args, &s, &ModelParams { hot_beta: -1.0, ..hot }).is_err());
    assert!(simulate_with(&args, &s, &ModelParams { hot_alpha: -1.0, ..hot }).is_err());
}

#[test]
fn local_steps_pay_the_step_cost() {
    // The exchange of `exchange_and_reduce_terms_are_separated`: per rank one Copy and one
    // Reduce; the Reduce waits for the message and the Copy, so both are on the critical path.
    let (p, count) = (2u32, 8u64);
    let s = all(p, |r| {
        let mut b = ScheduleBuilder::new(r, p);
        let t = b.scratch(count);
        b.send(1 - r, Region::new(Buf::Send, 0, count), &[]);
        let v = b.recv(1 - r, Region::new(t, 0, count), &[]);
        let c = b.copy(Region::new(Buf::Send, 0, count), Region::new(Buf::Recv, 0, count), &[]);
        b.reduce(Region::new(t, 0, count), Region::new(Buf::Recv, 0, count), Order::SrcFirst, &[v, c]);
        b.finish()
    });
    let args = job(Collective::Allreduce, p, count);
    let plain = simulate(&args, &s, &SKEW).unwrap();
    assert_eq!((plain.critical_local_steps, plain.max_local_steps), (1, 2));
    // Copy at [0, 100) overlaps the transfer [0, 35); the Reduce starts at 100 and pays 100 more.
    let cfg = ModelParams { step_cost: 100.0, ..ModelParams::new(SKEW) };
    let res = simulate_with(&args, &s, &cfg).unwrap();
    assert_eq!(res.time, 100.0 + 100.0 + 32.0 * 0.25);
    assert_eq!((res.critical_local_steps, res.max_local_steps), (2, 2));
    // A step cost below the transfer's leaves the Copy off the critical path: one step paid.
    let cfg = ModelParams { step_cost: 1.0, ..ModelParams::new(SKEW) };
    let res = simulate_with(&args, &s, &cfg).unwrap();
    assert_eq!(res.time, plain.time + 1.0);
    assert_eq!(res.critical_local_steps, 1);
    // Schedules without local steps do not change; a negative cost is refused.
    let bc = all(4, |r| binomial_bcast(4, 10, r));
    let bargs = job(Collective::Bcast, 4, 10);
    let cfg = ModelParams { step_cost: 5.0, ..ModelParams::new(SKEW) };
    assert_eq!(simulate_with(&bargs, &bc, &cfg).unwrap().time, simulate(&bargs, &bc, &SKEW).unwrap().time);
    assert!(simulate_with(&args, &s, &ModelParams { step_cost: -1.0, ..cfg }).is_err());
}

#[test]
fn oversubscribed_ranks_share_the_cores() {
    // Ring allgather: every step all p ranks transfer at once. On c cores each transfer takes
    // p/c times as long; binomial bcast at p = 4 has one, then two transfers at a time.
    let (p, c) = (4u32, 6u64);
    let args = job(Collective::Allgather, p, c);
    let ring = all(p, |r| ring_allgather(p, c, r));
    let base = simulate(&args, &ring, &SKEW).unwrap();
    for (cores, factor) in [(0u32, 1.0), (2, 2.0), (1, 4.0), (4, 1.0), (8, 1.0)] {
        let cfg = ModelParams { cores, ..ModelParams::new(SKEW) };
        let res = simulate_with(&args, &ring, &cfg).unwrap();
        assert_eq!(res.time, factor * base.time, "cores={cores}");
        // the symmetric replay counts p × rank 0's activities
        let sym = simulate_symmetric_with(&args, &ring[0], Symmetry::Rotation, &cfg).unwrap();
        assert_eq!(sym.time, res.time, "cores={cores}");
    }
    let bargs = job(Collective::Bcast, p, 10);
    let bc = all(p, |r| binomial_bcast(p, 10, r));
    let one = 2.0 + 40.0 * 0.5;
    let t = |cores| simulate_with(&bargs, &bc, &ModelParams { cores, ..ModelParams::new(SKEW) }).unwrap().time;
    assert_eq!((t(0), t(2), t(1)), (2.0 * one, 2.0 * one, 3.0 * one));
    // Computations count too: two ranks reducing at once on one core take twice as long.
    let (p2, n) = (2u32, 8u64);
    let red = all(p2, |r| {
        let mut b = ScheduleBuilder::new(r, p2);
        b.reduce(Region::new(Buf::Send, 0, n), Region::new(Buf::Recv, 0, n), Order::SrcFirst, &[]);
        b.finish()
    });
    let rargs = job(Collective::Allreduce, p2, n);
    let cfg = ModelParams { cores: 1, step_cost: 1.0, ..ModelParams::new(SKEW) };
    // both start at t = 0 and count each other (k = 2), whatever the engine's event order
    let res = simulate_with(&rargs, &red, &cfg).unwrap();
    assert_eq!(res.finish, vec![2.0 * (1.0 + 32.0 * 0.25); 2]);
    assert_eq!(res.time, 2.0 * (1.0 + 32.0 * 0.25));
}

#[test]
fn deadlock_is_an_error() {
    let p = 2u32;
    let s = all(p, |r| {
        let mut b = ScheduleBuilder::new(r, p);
        let v = b.recv(1 - r, Region::new(Buf::Recv, 0, 1), &[]);
        b.send(1 - r, Region::new(Buf::Send, 0, 1), &[v]);
        b.finish()
    });
    let e = simulate(&job(Collective::Allreduce, p, 1), &s, &Machine::UNIT).unwrap_err();
    assert!(matches!(&e, Error::Simulate(m) if m.contains("deadlock")), "{e}");
}

#[test]
fn unmatched_and_mismatched_messages_are_errors() {
    let p = 2u32;
    let args = job(Collective::Allreduce, p, 4);
    let mut b0 = ScheduleBuilder::new(0, p);
    b0.send(1, Region::new(Buf::Send, 0, 4), &[]);
    let lone = vec![b0.clone().finish(), ScheduleBuilder::new(1, p).finish()];
    let e = simulate(&args, &lone, &Machine::UNIT).unwrap_err();
    assert!(e.to_string().contains("rank 0 sends 1 to rank 1, which receives 0"), "{e}");
    let orphan = vec![ScheduleBuilder::new(0, p).finish(), {
        let mut b = ScheduleBuilder::new(1, p);
        b.recv(0, Region::new(Buf::Recv, 0, 4), &[]);
        b.finish()
    }];
    let e = simulate(&args, &orphan, &Machine::UNIT).unwrap_err();
    assert!(e.to_string().contains("sends 0 to rank 1, which receives 1"), "{e}");
    let mut b1 = ScheduleBuilder::new(1, p);
    b1.recv(0, Region::new(Buf::Recv, 0, 3), &[]);
    let short = vec![b0.finish(), b1.finish()];
    let e = simulate(&args, &short, &Machine::UNIT).unwrap_err();
    assert!(e.to_string().contains("receives 3"), "{e}");
    // wrong number of schedules, wrong ranks, bad machine
    assert!(simulate(&args, &short[..1], &Machine::UNIT).is_err());
    let swapped = vec![short[1].clone(), short[0].clone()];
    assert!(simulate(&args, &swapped, &Machine::UNIT).is_err());
    let bad = Machine { beta: f64::NAN, ..Machine::UNIT };
    assert!(simulate(&args, &short, &bad).is_err());
}

/// Full and symmetric replays of `f` agree exactly (time, terms, busiest rank).
fn same_as_full(args: &CollArgs, sym: Symmetry, m: &Machine, f: impl Fn(u32) -> Schedule) {
    let p = args.size;
    let s = all(p, &f);
    for r in 1..p {
        check_symmetry(&s[0], &s[r as usize], sym).unwrap();
    }
    let full = simulate(args, &s, m).unwrap();
    let sym_res = simulate_symmetric(args, &s[0], sym, m).unwrap();
    assert_eq!(full.time, sym_res.time, "p={p} {sym:?}");
    assert_eq!(full.critical_path, sym_res.critical_path, "p={p} {sym:?}");
    assert_eq!(full.critical_messages, sym_res.critical_messages);
    assert_eq!(full.max_bytes_sent, sym_res.max_bytes_sent);
    assert_eq!(full.max_bytes_received, sym_res.max_bytes_received);
    assert_eq!(full.messages, sym_res.messages);
    assert_eq!(full.bytes, sym_res.bytes);
    assert_eq!(full.steps, sym_res.steps);
    assert!(full.finish.iter().all(|&t| t == sym_res.time));
}

#[test]
fn symmetric_replay_equals_full_replay() {
    for m in [Machine::UNIT, SKEW] {
        for p in [2u32, 8, 16, 64, 100] {
            let c = 3u64;
            same_as_full(&job(Collective::Allgather, p, c), Symmetry::Rotation, &m, |r| ring_allgather(p, c, r));
            let count = u64::from(p) * 2;
            let args = job(Collective::Allreduce, p, count);
            same_as_full(&args, Symmetry::Rotation, &m, |r| ring_allreduce(p, count, r));
            if p.is_power_of_two() {
                same_as_full(&job(Collective::Allgather, p, c), Symmetry::Xor, &m, |r| rd_allgather(p, c, r));
            }
        }
    }
}

#[test]
fn broken_symmetry_is_detected() {
    let p = 8u32;
    // the bcast tree is not rotation-symmetric
    let e = check_symmetry(&binomial_bcast(p, 4, 0), &binomial_bcast(p, 4, 3), Symmetry::Rotation).unwrap_err();
    assert!(e.to_string().contains("not rank 0 relabeled"), "{e}");
    // ring is not XOR-symmetric, recursive doubling is not rotation-symmetric
    assert!(check_symmetry(&ring_allgather(p, 2, 0), &ring_allgather(p, 2, 3), Symmetry::Xor).is_err());
    assert!(check_symmetry(&rd_allgather(p, 2, 0), &rd_allgather(p, 2, 3), Symmetry::Rotation).is_err());
    // uneven blocks (count not divisible by p) give ranks different lengths
    let count = 2 * u64::from(p) + 3;
    assert!(check_symmetry(&ring_allreduce(p, count, 0), &ring_allreduce(p, count, 5), Symmetry::Rotation).is_err());
    // XOR needs a power of two; the mirror must send what rank 0 receives
    let args = job(Collective::Allgather, 6, 1);
    assert!(simulate_symmetric(&args, &ring_allgather(6, 1, 0), Symmetry::Xor, &Machine::UNIT).is_err());
    let args = job(Collective::Bcast, p, 4);
    let e = simulate_symmetric(&args, &binomial_bcast(p, 4, 0), Symmetry::Rotation, &Machine::UNIT).unwrap_err();
    assert!(e.to_string().contains("mirror"), "{e}");
}

#[test]
fn sample_ranks_are_in_range() {
    for p in [1u32, 2, 3, 7, 65536] {
        let s = sample_ranks(p);
        assert!(s.iter().all(|&r| r > 0 && r < p), "{p}: {s:?}");
        assert!(p == 1 || !s.is_empty());
    }
}

/// Scale check (run with `--release -- --ignored`): symmetric ring allreduce at p = 65,536 and
/// a full replay of a 16.7M-step job (ring allreduce at p = 2048).
#[test]
#[ignore]
fn large_replays_are_fast() {
    let p = 65536u32;
    let count = u64::from(p) * 4;
    let args = job(Collective::Allreduce, p, count);
    let t0 = std::time::Instant::now();
    let s0 = ring_allreduce(p, count, 0);
    let res = simulate_symmetric(&args, &s0, Symmetry::Rotation, &Machine::UNIT).unwrap();
    eprintln!("symmetric ring allreduce p={p}: {:?} in {:?}", res.critical_path, t0.elapsed());
    assert_eq!(res.critical_path.alpha, 2.0 * f64::from(p - 1));
    let p = 2048u32;
    let count = u64::from(p) * 4;
    let args = job(Collective::Allreduce, p, count);
    let t0 = std::time::Instant::now();
    let s = all(p, |r| ring_allreduce(p, count, r));
    let built = t0.elapsed();
    let res = simulate(&args, &s, &Machine::UNIT).unwrap();
    eprintln!("full ring allreduce p={p}: {} steps, built in {built:?}, total {:?}", res.steps, t0.elapsed());
    assert_eq!(res.critical_path.alpha, 2.0 * f64::from(p - 1));
}

/// Linear bcast: the root sends the whole buffer to every other rank, one message each.
fn linear_bcast(p: u32, count: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, p);
    let all = Region::new(Buf::Recv, 0, count);
    if r == 0 {
        for q in 1..p {
            b.send(q, all, &[]);
        }
    } else {
        b.recv(0, all, &[]);
    }
    b.finish()
}

/// Three messages of n bytes that queue at one port (α = 4, β = 1/2): Hockney serializes them
/// whole; with gap 1/4 each holds the port for α/4 + nβ and arrives 3α/4 after freeing it.
/// Returns the gap-1/4 replay.
fn three_at_one_port(args: &CollArgs, s: &[Schedule]) -> SimResult {
    let n = (args.count * u64::from(args.elem_size)) as f64;
    let m = Machine { alpha: 4.0, beta: 0.5, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 };
    let hockney = simulate(args, s, &m).unwrap();
    assert_eq!(hockney.time, 3.0 * (4.0 + n * 0.5));
    assert_eq!(simulate_with(args, s, &ModelParams { gap: 1.0, ..ModelParams::new(m) }).unwrap(), hockney);
    let res = simulate_with(args, s, &ModelParams { gap: 0.25, ..ModelParams::new(m) }).unwrap();
    assert_eq!(res.time, 3.0 * (1.0 + n * 0.5) + 3.0);
    assert_eq!(res.critical_path.alpha, 2.0 * 0.25 + 1.0, "two gaps, then one whole α");
    assert_eq!(res.critical_path.beta, 3.0 * n);
    assert_eq!(res.time, res.critical_path.time(&m));
    res
}

#[test]
fn a_gap_lets_a_port_start_its_next_message_before_the_last_arrives() {
    // Linear bcast to 3 ranks: the root's send port.
    let (p, count) = (4u32, 8u64);
    let s = all(p, |r| linear_bcast(p, count, r));
    let args = job(Collective::Bcast, p, count);
    let n = (count * u64::from(args.elem_size)) as f64;
    let res = three_at_one_port(&args, &s);
    // The root's sends complete when its port is free; rank 3's message arrives last.
    assert_eq!(res.finish[0], 3.0 * (1.0 + n * 0.5));
    assert_eq!(res.finish[3], res.time);
    // A single message costs α + nβ whatever the gap: binomial at p = 2.
    let m = Machine { alpha: 4.0, beta: 0.5, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 };
    let cfg = ModelParams { gap: 0.25, ..ModelParams::new(m) };
    let one = all(2, |r| binomial_bcast(2, count, r));
    let args2 = job(Collective::Bcast, 2, count);
    assert_eq!(simulate_with(&args2, &one, &cfg).unwrap().time, simulate(&args2, &one, &m).unwrap().time);
    // The gap is a share: outside [0, 1] it is refused.
    for bad in [-0.1, 1.5, f64::NAN] {
        assert!(simulate_with(&args, &s, &ModelParams { gap: bad, ..cfg }).is_err(), "gap {bad}");
    }
}

#[test]
fn a_gap_frees_the_receive_port_too() {
    // Linear gather into rank 0: the three messages queue at its receive port.
    let (p, c) = (4u32, 6u64);
    let s = all(p, |r| linear_gather(p, c, r));
    let res = three_at_one_port(&job(Collective::Gather, p, c), &s);
    assert_eq!(res.finish[0], res.time);
}

/// Each of two ranks sends its vector to the other in `segs` messages and reduces each segment
/// it receives as it arrives (`seg` elements each).
fn pipelined_exchange(segs: u64, seg: u64, r: u32) -> Schedule {
    let mut b = ScheduleBuilder::new(r, 2);
    let t = b.scratch(segs * seg);
    let at = |buf: Buf, i: u64| Region::new(buf, i * seg, seg);
    for i in 0..segs {
        b.send(1 - r, at(Buf::Send, i), &[]);
    }
    for i in 0..segs {
        let v = b.recv(1 - r, at(t, i), &[]);
        b.reduce(at(t, i), at(Buf::Recv, i), Order::SrcFirst, &[v]);
    }
    b.finish()
}

#[test]
fn sends_on_the_cpu_keep_a_pipeline_from_hiding_its_reductions() {
    // α = β = γ = 1, two segments of n bytes against one message of 2n.
    let seg = 8u64;
    let args = job(Collective::Allreduce, 2, 2 * seg);
    let n = (seg * u64::from(args.elem_size)) as f64;
    let m = Machine { alpha: 1.0, beta: 1.0, gamma: 1.0, f_alpha: 1.0, f_beta: 1.0 };
    let (two, one) = (all(2, |r| pipelined_exchange(2, seg, r)), all(2, |r| pipelined_exchange(1, 2 * seg, r)));
    let own = ModelParams::new(m);
    let cpu = ModelParams { cpu_sends: true, ..own };
    // A NIC of its own: the first segment's reduction runs while the second one travels.
    assert_eq!(simulate_with(&args, &two, &own).unwrap().time, 2.0 + 3.0 * n);
    assert_eq!(simulate_with(&args, &one, &own).unwrap().time, 1.0 + 4.0 * n);
    // The rank moves its bytes itself: the second send (ready first) goes before the first
    // reduction, and the segments only add a message.
    let res = simulate_with(&args, &two, &cpu).unwrap();
    assert_eq!(res.time, 2.0 + 4.0 * n);
    assert_eq!(res.critical_path, Cost::new(2.0, 2.0 * n, 2.0 * n));
    assert_eq!(res.time, res.critical_path.time(&m));
    assert_eq!(simulate_with(&args, &one, &cpu).unwrap().time, 1.0 + 4.0 * n);
    // The earliest ready step goes first. Rank 1's long send X holds its CPU until 1 + 3n; by
    // then the reduction of rank 0's message A (ready at 1 + n) and the send Y (ready at 2 + 2n,
    // when rank 0's second message B is in) both wait: the reduction runs first, so Y reaches
    // rank 0 at 2 + 5n (with Y first it would be 2 + 4n).
    let waits = all(2, |r| {
        let mut b = ScheduleBuilder::new(r, 2);
        let one = Region::new(Buf::Recv, 0, seg);
        let three = Region::new(Buf::Send, 0, 3 * seg);
        if r == 0 {
            b.send(1, one, &[]);
            b.send(1, one, &[]);
            b.recv(1, Region::new(Buf::Recv, seg, 3 * seg), &[]);
            b.recv(1, one, &[]);
        } else {
            let t = b.scratch(2 * seg);
            b.send(0, three, &[]);
            let a = b.recv(0, Region::new(t, 0, seg), &[]);
            let bb = b.recv(0, Region::new(t, seg, seg), &[]);
            b.reduce(Region::new(t, 0, seg), one, Order::SrcFirst, &[a]);
            b.send(0, Region::new(Buf::Send, 0, seg), &[bb]);
        }
        b.finish()
    });
    let res = simulate_with(&args, &waits, &cpu).unwrap();
    assert_eq!(res.finish, vec![2.0 + 5.0 * n; 2]);
}

#[test]
fn the_overhead_is_added_once_to_the_job() {
    let (p, c) = (8u32, 3u64);
    let args = job(Collective::Allgather, p, c);
    let s = all(p, |r| ring_allgather(p, c, r));
    let plain = simulate(&args, &s, &SKEW).unwrap();
    let cfg = ModelParams { overhead: 5.0, ..ModelParams::new(SKEW) };
    let full = simulate_with(&args, &s, &cfg).unwrap();
    assert_eq!(full.time, plain.time + 5.0);
    assert_eq!((&full.finish, full.critical_path), (&plain.finish, plain.critical_path), "steps are not moved");
    let sym = simulate_symmetric_with(&args, &s[0], Symmetry::Rotation, &cfg).unwrap();
    assert_eq!(sym.time, full.time);
    assert!(sym.finish.iter().all(|&t| t == plain.time));
    assert!(simulate_with(&args, &s, &ModelParams { overhead: -1.0, ..cfg }).is_err());
}

#[test]
fn sampled_replay_is_the_full_replay() {
    use crate::registry;
    let cfg = ModelParams { copy_beta: 0.5, overhead: 2.0, ..ModelParams::new(SKEW) };
    for (coll, p) in [(Collective::Allreduce, 16u32), (Collective::Allreduce, 12), (Collective::Bcast, 16)] {
        let args = job(coll, p, 64).with_commutative(true);
        for alg in registry::eligible(&args) {
            let (sampled, full) =
                (simulate_alg_sampled(alg, &args, &cfg).unwrap(), simulate_alg_with(alg, &args, &cfg).unwrap());
            assert!((sampled.time - full.time).abs() <= 1e-12 * full.time, "{coll}:{} p={p}", alg.name);
            assert_eq!(sampled.steps, full.steps, "{coll}:{} p={p}", alg.name);
        }
    }
}

#[test]
fn calls_back_to_back_are_paced_by_the_busiest_sender() {
    // One call: the binomial tree's 3 dependent sends at p = 8 against the binary tree's 4. In a
    // loop: the binomial root's 3 sends a call against at most 2 per rank in the binary tree.
    let m = Machine { alpha: 1.0, beta: 0.0, gamma: 0.0, f_alpha: 1.0, f_beta: 1.0 };
    let args = job(Collective::Bcast, 8, 4);
    let time = |name: &str, calls: usize| {
        let alg = crate::registry::find(Collective::Bcast, name).unwrap();
        let s: Vec<Schedule> = build_all(alg, &args).unwrap().iter().map(|s| s.back_to_back(calls)).collect();
        simulate(&args, &s, &m).unwrap().time
    };
    assert_eq!((time("binomial", 1), time("binary_tree", 1)), (3.0, 4.0));
    // 16 calls: the binomial root's 3 sends a call, 48 in a row; the binary tree's 2 a call, 32,
    // and 2 more for the last call to reach the deepest rank.
    assert_eq!((time("binomial", 16), time("binary_tree", 16)), (48.0, 34.0));
}
