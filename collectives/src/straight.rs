//! The straight-line order of a schedule's steps (what the executor's runner follows instead of
//! tracking dependencies), and the check that every rank running its steps in that order cannot
//! deadlock.
//!
//! Why: tracking dependencies per call (a copy of the deps counts, work stacks, lists of pending
//! Sends and Recvs, a dependents walk per completed step) costs a small call a large share of its
//! time. A schedule's steps can instead run in one fixed order, waiting on each Send and Recv in
//! turn. That is safe without a fallback only when no rank can then wait for a message that its
//! sender only sends after something that waits for the first rank: [`deadlock_free`] checks it,
//! and every rank computes every rank's order alike (schedules are a function of the call's
//! arguments), so it answers the same everywhere (the mailbox lane asks it). A lane that can hand
//! a call over to the engine (the eager rings') needs no such proof.
//!
//! The order is list scheduling by kind: of the steps whose deps are done, Sends first (a message
//! leaves as early as possible), then local steps (they overlap the wait for the next message),
//! then Recvs (here they wait), each kind by step id. The engine (`exec::op`) posts ready Recvs
//! with its Sends, before local steps, since posting one does not wait there.
//!
//! Cost: O(steps · log steps) per rank for the order; the check replays all p ranks' orders,
//! O(p · steps) once per plan.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crate::schedule::{Schedule, StepId, StepKind};

/// Message index of each Send and Recv step: the k-th Send to (Recv from) its peer, by step id.
/// The k-th Send of a rank to a peer is that peer's k-th Recv from the rank.
pub fn message_indices(sched: &Schedule) -> Vec<u32> {
    let mut sent: HashMap<u32, u32> = HashMap::new();
    let mut recvd: HashMap<u32, u32> = HashMap::new();
    sched
        .iter()
        .map(|(_, k, _)| {
            let count = match *k {
                StepKind::Send { peer, .. } => sent.entry(peer).or_default(),
                StepKind::Recv { peer, .. } => recvd.entry(peer).or_default(),
                _ => return 0,
            };
            *count += 1;
            *count - 1
        })
        .collect()
}

/// The straight-line order of `sched`'s steps (see the module doc).
pub fn order(sched: &Schedule) -> Vec<StepId> {
    let n = sched.len();
    let mut deps_left = vec![0u32; n];
    let mut dependents = vec![Vec::new(); n];
    for (id, _, ds) in sched.iter() {
        deps_left[id as usize] = ds.len() as u32;
        for &d in ds {
            dependents[d as usize].push(id);
        }
    }
    // Ready steps by priority class: Sends, local steps, Recvs.
    let class = |id: StepId| match sched.step(id) {
        StepKind::Send { .. } => 0,
        StepKind::Copy { .. } | StepKind::Reduce { .. } => 1,
        StepKind::Recv { .. } => 2,
    };
    let mut ready: [BinaryHeap<Reverse<StepId>>; 3] = Default::default();
    for id in (0..n as StepId).filter(|&i| deps_left[i as usize] == 0) {
        ready[class(id)].push(Reverse(id));
    }
    let mut out = Vec::with_capacity(n);
    while let Some(Reverse(id)) = ready.iter_mut().find_map(BinaryHeap::pop) {
        out.push(id);
        for &d in &dependents[id as usize] {
            deps_left[d as usize] -= 1;
            if deps_left[d as usize] == 0 {
                ready[class(d)].push(Reverse(d));
            }
        }
    }
    out
}

/// Whether every rank `r` running `scheds[r]`'s steps in `orders[r]` (a Send never waits, a Recv
/// waits until its message was sent) ends: a replay that advances every rank as far as it can
/// until none can. Also `false` when an order is not a permutation of its schedule's steps.
pub fn deadlock_free(scheds: &[Schedule], orders: &[Vec<StepId>]) -> bool {
    if scheds.len() != orders.len() {
        return false;
    }
    let idx: Vec<Vec<u32>> = scheds.iter().map(message_indices).collect();
    for (s, o) in scheds.iter().zip(orders) {
        let mut seen = vec![false; s.len()];
        if o.len() != s.len()
            || !o.iter().all(|&i| (i as usize) < s.len() && !std::mem::replace(&mut seen[i as usize], true))
        {
            return false;
        }
    }
    // (sender, receiver, message index) of every message sent so far.
    let mut sent: HashSet<(u32, u32, u32)> = HashSet::new();
    let mut pos = vec![0usize; scheds.len()];
    loop {
        let mut moved = false;
        for (r, (s, o)) in scheds.iter().zip(orders).enumerate() {
            let r = r as u32;
            while let Some(&id) = o.get(pos[r as usize]) {
                let k = idx[r as usize][id as usize];
                match *s.step(id) {
                    StepKind::Send { peer, src } if src.len > 0 => {
                        sent.insert((r, peer, k));
                    }
                    StepKind::Recv { peer, dst } if dst.len > 0 && !sent.contains(&(peer, r, k)) => break,
                    _ => {}
                }
                pos[r as usize] += 1;
                moved = true;
            }
        }
        if !moved {
            return pos.iter().zip(orders).all(|(&at, o)| at == o.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry;
    use crate::schedule::{Buf, Region, ScheduleBuilder};
    use crate::topology::Topology;
    use crate::{CollArgs, Collective};

    fn region(len: u64) -> Region {
        Region { buf: Buf::Recv, off: 0, len }
    }

    /// Each of two ranks: a Recv from the other (step 0), then an independent Send (step 1).
    fn recv_then_send(rank: u32) -> Schedule {
        let mut b = ScheduleBuilder::new(rank, 2);
        b.recv(1 - rank, region(1), &[]);
        b.send(1 - rank, region(1), &[]);
        b.finish()
    }

    fn class(s: &Schedule, id: StepId) -> u8 {
        match s.step(id) {
            StepKind::Send { .. } => 0,
            StepKind::Recv { .. } => 2,
            _ => 1,
        }
    }

    /// Every step once, after its deps, and at each point of the order of the first ready class
    /// (Sends, local steps, Recvs) and the lowest id in it.
    fn assert_priority_order(s: &Schedule, o: &[StepId]) {
        assert_eq!(o.len(), s.len());
        let mut done = vec![false; s.len()];
        for &id in o {
            assert!(!done[id as usize], "step {id} twice");
            let ready = s.iter().filter(|(i, _, ds)| !done[*i as usize] && ds.iter().all(|&d| done[d as usize]));
            let best = ready.map(|(i, _, _)| (class(s, i), i)).min().unwrap();
            assert_eq!((class(s, id), id), best, "order {o:?}");
            done[id as usize] = true;
        }
    }

    #[test]
    fn sends_go_first_then_local_steps_then_recvs() {
        assert_eq!(order(&recv_then_send(0)), vec![1, 0]);
        for a in registry::all() {
            let mut checked = 0;
            // Flat, and two levels: 2 nodes × 2, 3 × 2 (equal nodes) and 1 + 3 (unequal).
            for (p, nodes) in [
                (2, None),
                (3, None),
                (4, None),
                (7, None),
                (4, Some(&[2, 2][..])),
                (6, Some(&[2, 2, 2][..])),
                (4, Some(&[1, 3][..])),
            ] {
                for rank in 0..p {
                    let mut args = CollArgs::new(a.coll, rank, p, 3);
                    args.elem_size = 4;
                    if a.coll.is_vector() {
                        // Uneven counts (alltoallv: a p × p matrix).
                        let n = if a.coll == Collective::Alltoallv { p * p } else { p };
                        args.counts = Some((0..u64::from(n)).map(|i| i % 3 + 1).collect());
                    }
                    if let Some(sizes) = nodes {
                        args = args.with_topology(Topology::from_sizes(sizes).unwrap());
                    }
                    if a.restrictions.violated(&args).is_some() {
                        continue;
                    }
                    let s = a.prepare(&args).and_then(|args| a.schedule(&args)).unwrap();
                    assert_priority_order(&s, &order(&s));
                    checked += 1;
                }
            }
            assert!(checked > 0, "{}:{} was never checked", a.coll, a.name);
        }
    }

    #[test]
    fn a_cycle_of_waits_is_refused() {
        let scheds = [recv_then_send(0), recv_then_send(1)];
        // The chosen order sends first: fine.
        let good: Vec<Vec<StepId>> = scheds.iter().map(order).collect();
        assert!(deadlock_free(&scheds, &good));
        // Waiting first on both sides: each waits for the other's Send.
        assert!(!deadlock_free(&scheds, &[vec![0, 1], vec![0, 1]]));
        // One side waiting first is fine: the other's Send frees it.
        assert!(deadlock_free(&scheds, &[vec![0, 1], vec![1, 0]]));
        // Not permutations.
        assert!(!deadlock_free(&scheds, &[vec![1], vec![1, 0]]));
        assert!(!deadlock_free(&scheds, &[vec![1, 1], vec![1, 0]]));
        assert!(!deadlock_free(&scheds[..1], &good));
    }

    #[test]
    fn message_indices_count_per_peer_and_direction() {
        let mut b = ScheduleBuilder::new(0, 3);
        b.send(1, region(1), &[]);
        b.send(2, region(1), &[]);
        b.recv(1, region(1), &[]);
        b.send(1, region(1), &[]);
        b.recv(1, region(1), &[]);
        assert_eq!(message_indices(&b.finish()), vec![0, 0, 0, 1, 1]);
    }
}
