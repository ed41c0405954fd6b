//! Messages lent instead of copied (the executor's pulled reductions, `exec::op`): a receiver
//! whose Recv feeds exactly one Reduce ([`fusable`]) may read the message out of the sender's
//! buffer inside that Reduce, if the sender leaves the buffer alone until the receiver says it has
//! read it. Which Sends may wait that long ([`lendable`]):
//!
//! - a Send that no step of its rank waits for ([`Lend::Free`]) always may;
//! - a Send that only Recvs wait for ([`Lend::Waited`]; in place, the result comes back into the
//!   buffer it sent from) makes those Recvs wait for a step of another rank, so it may only when
//!   the whole job still completes: [`job_completes`] replays every rank's schedule with each lent
//!   Send done only once the Reduce that reads it has run, and every other Send only once its
//!   Recv was posted (rendezvous).
//!
//! Cost: [`fusable`] is quadratic in the steps (so only schedules of up to 512 steps fuse);
//! [`job_completes`] builds and fuses every rank's schedule and replays them in passes of
//! O(p · steps) until nothing moves (at most the job's longest chain of waits), once per prepared
//! call ([`lending_job_completes`]).

use std::collections::HashMap;

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;
use crate::schedule::{Region, Schedule, StepId, StepKind};
use crate::straight::message_indices;

/// `fused_from` of a step that is not a fused Reduce.
pub const NOT_FUSED: StepId = StepId::MAX;

/// Whether a Send may be lent to a receiver that reads it (see the module doc).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Lend {
    /// Not a Send, or a Send that a local step (Copy, Reduce) or another Send waits for.
    No,
    /// A Send that nothing waits for.
    Free,
    /// A Send that only Recvs wait for: lent only where [`job_completes`] says so.
    Waited,
}

/// The direct dependents of every step.
pub fn dependents(s: &Schedule) -> Vec<Vec<StepId>> {
    let mut out = vec![Vec::new(); s.len()];
    for (id, _, ds) in s.iter() {
        for &d in ds {
            out[d as usize].push(id);
        }
    }
    out
}

/// Recv steps whose region is consumed by exactly one Reduce (as its source, its only direct
/// dependent): their messages can be reduced straight out of an eager slot, or out of the
/// sender's buffer, and the region is never written. Safe when every other step touching the
/// region is itself such a (Recv, Reduce) pair on exactly that region (e.g. recursive doubling
/// reusing one scratch block per round): by race freedom each pair's Recv → Reduce window
/// excludes the other pairs' steps. Only for schedules of up to 512 steps (the check is
/// quadratic); longer (pipelined) ones copy as usual. Returns per step whether it is a fused
/// Recv, and for a Reduce its fused Recv ([`NOT_FUSED`] if none).
pub fn fusable(s: &Schedule, dependents: &[Vec<StepId>]) -> (Vec<bool>, Vec<StepId>) {
    let (mut fuse, mut from) = (vec![false; s.len()], vec![NOT_FUSED; s.len()]);
    if s.len() > 512 {
        return (fuse, from);
    }
    // Candidate pairs and the region each of their steps stands for.
    let mut pair_region: HashMap<StepId, Region> = HashMap::new();
    let mut pairs = Vec::new();
    for (r, k, _) in s.iter() {
        let StepKind::Recv { dst, .. } = *k else { continue };
        let [d] = dependents[r as usize][..] else { continue };
        let StepKind::Reduce { src, .. } = *s.step(d) else { continue };
        if src == dst && dst.len > 0 {
            pairs.push((r, d, dst));
            pair_region.insert(r, dst);
            pair_region.insert(d, dst);
        }
    }
    for (r, d, g) in pairs {
        let ok = s.iter().all(|(i, k, _)| {
            if i == r || i == d {
                return true;
            }
            let touches = [k.reads(), k.writes()].into_iter().flatten().any(|x| x.overlaps(&g));
            !touches || pair_region.get(&i) == Some(&g)
        });
        if ok {
            fuse[r as usize] = true;
            from[d as usize] = r;
        }
    }
    (fuse, from)
}

/// Which Sends may be lent (see [`Lend`]).
pub fn lendable(s: &Schedule, dependents: &[Vec<StepId>]) -> Vec<Lend> {
    s.iter()
        .map(|(id, k, _)| match k {
            StepKind::Send { .. } if dependents[id as usize].is_empty() => Lend::Free,
            StepKind::Send { .. }
                if dependents[id as usize].iter().all(|&d| matches!(s.step(d), StepKind::Recv { .. })) =>
            {
                Lend::Waited
            }
            _ => Lend::No,
        })
        .collect()
}

/// Whether a job whose rank r runs `scheds[r]` completes when every lent Send (to a fused Recv
/// ([`fusable`]): a [`Lend::Free`] one, and with `lend_waited` a [`Lend::Waited`] one) is done
/// only once the receiver's Reduce of it has run, every other non-empty Send only once its Recv
/// was posted (its deps done: the receiver's grant), and a Recv once its Send was issued. `false`
/// also for schedules that do not form one job (a Send without its Recv).
pub fn job_completes(scheds: &[Schedule], lend_waited: bool) -> bool {
    let p = scheds.len();
    let deps: Vec<Vec<Vec<StepId>>> = scheds.iter().map(dependents).collect();
    let idx: Vec<Vec<u32>> = scheds.iter().map(message_indices).collect();
    let fused: Vec<(Vec<bool>, Vec<StepId>)> = scheds.iter().zip(&deps).map(|(s, d)| fusable(s, d)).collect();
    let lend: Vec<Vec<Lend>> = scheds.iter().zip(&deps).map(|(s, d)| lendable(s, d)).collect();
    // Both ends of every message: (sender, receiver, index) → Recv step, and → Send step.
    let (mut recv_of, mut send_of) = (HashMap::new(), HashMap::new());
    for (r, s) in scheds.iter().enumerate() {
        for (id, k, _) in s.iter() {
            match *k {
                StepKind::Recv { peer, .. } => recv_of.insert((peer as usize, r, idx[r][id as usize]), id),
                StepKind::Send { peer, .. } => send_of.insert((r, peer as usize, idx[r][id as usize]), id),
                _ => None,
            };
        }
    }
    // A Send's peer step whose state it waits for: the Reduce of a lent one, else the Recv.
    let mut waits_on = Vec::with_capacity(p);
    for (r, s) in scheds.iter().enumerate() {
        let mut w = vec![None; s.len()];
        for (id, k, _) in s.iter() {
            let StepKind::Send { peer, src } = *k else { continue };
            let q = peer as usize;
            let Some(&rv) = recv_of.get(&(r, q, idx[r][id as usize])) else { return false };
            if src.len == 0 {
                continue;
            }
            let lends = match lend[r][id as usize] {
                Lend::No => false,
                Lend::Free => true,
                Lend::Waited => lend_waited,
            };
            let lent = lends && fused[q].0[rv as usize];
            w[id as usize] = Some((q, if lent { deps[q][rv as usize][0] } else { rv }, lent));
        }
        waits_on.push(w);
    }
    let mut left: Vec<Vec<usize>> = scheds.iter().map(|s| s.iter().map(|(_, _, d)| d.len()).collect()).collect();
    // posted: deps done (a Recv's grant is out, a Send is issued); done: complete.
    let mut posted: Vec<Vec<bool>> = scheds.iter().map(|s| vec![false; s.len()]).collect();
    let mut done = posted.clone();
    let mut remaining: usize = scheds.iter().map(Schedule::len).sum();
    loop {
        let mut moved = false;
        for r in 0..p {
            for id in 0..scheds[r].len() {
                if done[r][id] || left[r][id] > 0 {
                    continue;
                }
                if !posted[r][id] {
                    posted[r][id] = true;
                    moved = true;
                }
                let ready = match *scheds[r].step(id as StepId) {
                    StepKind::Send { .. } => match waits_on[r][id] {
                        None => true,
                        Some((q, step, true)) => done[q][step as usize],
                        Some((q, step, false)) => posted[q][step as usize],
                    },
                    StepKind::Recv { peer, dst } => {
                        let q = peer as usize;
                        match send_of.get(&(q, r, idx[r][id])) {
                            Some(&s) => dst.len == 0 || posted[q][s as usize],
                            None => return false,
                        }
                    }
                    StepKind::Reduce { .. } | StepKind::Copy { .. } => true,
                };
                if ready {
                    done[r][id] = true;
                    remaining -= 1;
                    moved = true;
                    for &d in &deps[r][id] {
                        left[r][d as usize] -= 1;
                    }
                }
            }
        }
        if remaining == 0 {
            return true;
        }
        if !moved {
            return false;
        }
    }
}

/// [`job_completes`] for the job of which `args` is one rank's view, running `alg`, for every way
/// the other ranks may have chosen in place (the call's agreed arguments do not include it): for
/// reduce and gather(v) the root may give it and the others never do (MPI's rule); elsewhere the
/// others all as this rank, or all the opposite. Lending fewer Sends than a check assumed only
/// lets Sends finish sooner, so ranks that decide differently stay safe. `false` when a schedule
/// cannot be built or p exceeds `max_p` (the check would cost more than it can save).
pub fn lending_job_completes(alg: &Algorithm, args: &CollArgs, max_p: u32) -> bool {
    if args.size > max_p {
        return false;
    }
    let rooted = matches!(args.coll, Collective::Reduce | Collective::Gather | Collective::Gatherv);
    // In place of the others: at the root (rooted operations), or at every other rank.
    let others: &[bool] = match (rooted, args.rank == args.root) {
        (true, true) => &[false],
        (true, false) | (false, _) if !alg.restrictions.no_in_place => &[false, true],
        _ => &[false],
    };
    others.iter().all(|&theirs| {
        let job: Option<Vec<Schedule>> = (0..args.size)
            .map(|r| {
                let mut a = args.for_rank(r);
                a.in_place = match (r == args.rank, rooted) {
                    (true, _) => args.in_place,
                    (false, true) => theirs && r == args.root,
                    (false, false) => theirs,
                };
                alg.schedule(&a).ok()
            })
            .collect();
        job.is_some_and(|scheds| job_completes(&scheds, true))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry;
    use crate::schedule::{Buf, ScheduleBuilder};

    fn region(buf: Buf, off: u64, len: u64) -> Region {
        Region::new(buf, off, len)
    }

    /// Rank 0 sends X to 1 and gets it back into X after (in place); rank 1 reads X in a Reduce
    /// that also needs a second message, which rank 0 sends only after X came back: lending X
    /// deadlocks, copying it does not.
    fn crossed_job() -> Vec<Schedule> {
        let a0 = CollArgs::new(Collective::Allreduce, 0, 2, 4);
        let mut b = ScheduleBuilder::for_args(&a0);
        let x = region(Buf::Recv, 0, 2);
        let s0 = b.send(1, x, &[]);
        let r0 = b.recv(1, x, &[s0]);
        b.send(1, region(Buf::Recv, 2, 2), &[r0]);
        let a1 = CollArgs::new(Collective::Allreduce, 1, 2, 4);
        let mut c = ScheduleBuilder::for_args(&a1);
        let t = c.scratch(4);
        let r1 = c.recv(0, region(t, 0, 2), &[]);
        let r2 = c.recv(0, region(t, 2, 2), &[]);
        c.reduce(region(t, 0, 2), region(Buf::Recv, 0, 2), crate::schedule::Order::SrcFirst, &[r1, r2]);
        c.reduce(region(t, 2, 2), region(Buf::Recv, 2, 2), crate::schedule::Order::SrcFirst, &[]);
        c.send(0, region(Buf::Recv, 0, 2), &[]);
        vec![b.finish(), c.finish()]
    }

    #[test]
    fn a_lent_send_that_a_recv_waits_for_can_deadlock_the_job() {
        let job = crossed_job();
        let d = dependents(&job[0]);
        assert_eq!(lendable(&job[0], &d)[0], Lend::Waited);
        assert!(fusable(&job[1], &dependents(&job[1])).0[0], "rank 1 reads the first message in its Reduce");
        assert!(!job_completes(&job, true), "lent, X's return waits for a Reduce that waits for X's return");
        assert!(job_completes(&job, false), "copied, X's return waits for nothing of rank 1");
        // Without the fused Reduce (the Recv feeds two steps) nothing is lent, and the job ends.
        let mut copied = job.clone();
        let a1 = CollArgs::new(Collective::Allreduce, 1, 2, 4);
        let mut c = ScheduleBuilder::for_args(&a1);
        let t = c.scratch(4);
        let r1 = c.recv(0, region(t, 0, 2), &[]);
        let r2 = c.recv(0, region(t, 2, 2), &[]);
        c.copy(region(t, 0, 2), region(Buf::Recv, 0, 2), &[r1, r2]);
        c.send(0, region(Buf::Recv, 0, 2), &[]);
        copied[1] = c.finish();
        assert!(job_completes(&copied, true));
    }

    #[test]
    fn a_message_without_its_recv_is_no_job() {
        let mut job = crossed_job();
        job.pop();
        assert!(!job_completes(&job, false));
    }

    /// The pairwise reductions lend in place: each contribution's Send is waited for only by the
    /// Recv of its reduced block, and every Reduce that reads one needs nothing but Recvs.
    #[test]
    fn in_place_pairwise_allreduces_lend_their_contributions() {
        for name in ["shmem_cyclic", "shmem_parallel", "rsag_pairwise_ring"] {
            let alg = registry::find(Collective::Allreduce, name).unwrap();
            for p in 2..=9 {
                let mut a = CollArgs::new(Collective::Allreduce, 1, p, 1000 * u64::from(p) + 3);
                a.in_place = true;
                let s = alg.schedule(&a).unwrap();
                let lend = lendable(&s, &dependents(&s));
                assert!(lend.contains(&Lend::Waited) || p == 2, "{name} p = {p}: nothing lent while waited for");
                assert!(lending_job_completes(alg, &a, 256), "{name} p = {p}");
            }
        }
    }

    /// A rooted reduction is checked from every rank's view: the root's own choice of in place,
    /// and at the other ranks both choices the root may have made.
    #[test]
    fn rooted_jobs_are_checked_from_every_view() {
        let alg = registry::find(Collective::Reduce, "ring").unwrap();
        for p in 2..=6 {
            for rank in 0..p {
                let mut a = CollArgs::new(Collective::Reduce, rank, p, 100 * u64::from(p) + 1).with_root(p / 2);
                a.in_place = rank == p / 2;
                assert!(lending_job_completes(alg, &a, 64), "p = {p}, rank {rank}");
                assert!(!lending_job_completes(alg, &a, p - 1), "p = {p}: above the limit nothing is checked");
            }
        }
    }

    /// The replay's model holds for what the executor runs without lending waited Sends: every
    /// registry algorithm, in place or not, at p = 1..=9, completes with its free Sends lent and
    /// every other Send a rendezvous (so the schedules need no eager buffering to finish either).
    #[test]
    fn every_algorithm_completes_with_its_free_sends_lent() {
        let mut jobs = 0;
        for alg in registry::all() {
            for p in 1..=9u32 {
                for in_place in [false, true] {
                    let pc = u64::from(p);
                    let mut a = CollArgs::new(alg.coll, 0, p, 3 * pc + 1);
                    a.in_place = in_place;
                    if alg.coll.is_vector() || alg.coll == Collective::ReduceScatter {
                        let n = if alg.coll == Collective::Alltoallv { pc * pc } else { pc };
                        a.counts = Some((0..n).map(|i| i % 3 + 1).collect());
                    }
                    let job: Option<Vec<Schedule>> = (0..p).map(|r| alg.schedule(&a.for_rank(r)).ok()).collect();
                    let Some(job) = job else { continue };
                    jobs += 1;
                    assert!(job_completes(&job, false), "{}:{} p = {p} in place {in_place}", alg.coll, alg.name);
                }
            }
        }
        assert!(jobs > 1000, "only {jobs} jobs built");
    }
}
