//! A built schedule compiled once into what both ways of running it need: its straight-line
//! order (`fabcoll_collectives::straight`, for the runner) and the dependency tables of the engine's ops
//! (dependents, message indices, send/receive lookup, fusable Recv→Reduce pairs). Immutable and
//! shared (`Arc`): a communicator prepares it once per distinct call (see `comm::memo`).

use fabcoll_collectives::schedule::{Region, Schedule, StepId, StepKind};

use super::fasthash::FastMap;

/// `Plan::fused_from` of a step that is not a fused Reduce.
pub(crate) const NOT_FUSED: StepId = StepId::MAX;

/// A schedule ready to run, shared by every call with the same algorithm and arguments.
#[derive(Debug)]
pub(crate) struct Plan {
    pub sched: Schedule,
    /// Deps of each step (the initial count of deps left).
    pub deps: Vec<u32>,
    pub dependents: Vec<Vec<StepId>>,
    /// Message index of Send/Recv steps: the k-th Send to (Recv from) a peer.
    pub idx: Vec<u32>,
    pub recv_of: FastMap<(u32, u32), StepId>,
    pub send_of: FastMap<(u32, u32), StepId>,
    /// Per step: a Recv whose region is read by exactly one step, a Reduce (fusable: that Reduce
    /// reads straight out of the eager slot, the Recv region is never written).
    pub fuse: Vec<bool>,
    /// Per step: for a Reduce, its fused Recv step, else [`NOT_FUSED`].
    pub fused_from: Vec<StepId>,
    /// Steps without deps, in reverse order (a work stack that issues them in order): the
    /// Sends and Recvs, and the local steps (Copy, Reduce) apart (see `Op::run`).
    pub roots: Vec<StepId>,
    /// The local steps without deps, likewise in reverse order.
    pub local_roots: Vec<StepId>,
    /// Per step: a local step (Copy or Reduce), issued after every ready Send and Recv.
    pub local: Vec<bool>,
    /// The straight-line order of the steps (`fabcoll_collectives::straight::order`).
    pub order: Box<[StepId]>,
    /// The longest Send or Recv, in elements.
    pub max_message: u64,
    /// The steps are all Sends, to distinct peers, without scratch ([`sends_only`]): a nonblocking
    /// call may run straight too, when its writes complete on return.
    pub sends_only: bool,
}

impl Plan {
    pub fn new(sched: Schedule) -> Plan {
        let n = sched.len();
        let mut deps = vec![0u32; n];
        let mut dependents = vec![Vec::new(); n];
        let idx = fabcoll_collectives::straight::message_indices(&sched);
        let mut recv_of = FastMap::default();
        let mut send_of = FastMap::default();
        for (id, k, ds) in sched.iter() {
            deps[id as usize] = ds.len() as u32;
            for &d in ds {
                dependents[d as usize].push(id);
            }
            match *k {
                StepKind::Send { peer, .. } => {
                    send_of.insert((peer, idx[id as usize]), id);
                }
                StepKind::Recv { peer, .. } => {
                    recv_of.insert((peer, idx[id as usize]), id);
                }
                _ => {}
            }
        }
        let (fuse, fused_from) = fusable(&sched, &dependents);
        let local: Vec<bool> = (0..n as StepId)
            .map(|i| matches!(sched.step(i), StepKind::Copy { .. } | StepKind::Reduce { .. }))
            .collect();
        let (local_roots, roots) =
            (0..n as StepId).rev().filter(|&i| deps[i as usize] == 0).partition(|&i| local[i as usize]);
        let sends_only = sends_only(&sched);
        let order = fabcoll_collectives::straight::order(&sched).into();
        let max_message = sched
            .iter()
            .map(|(_, k, _)| match *k {
                StepKind::Send { src: r, .. } | StepKind::Recv { dst: r, .. } => r.len,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        Plan {
            order,
            max_message,
            sends_only,
            sched,
            deps,
            dependents,
            idx,
            recv_of,
            send_of,
            fuse,
            fused_from,
            roots,
            local_roots,
            local,
        }
    }
}

/// Recv steps whose region is consumed by exactly one Reduce (as its source, its only direct
/// dependent): their eager messages can be reduced straight out of the slot and the region is
/// never written. Safe when every other step touching the region is itself such a (Recv, Reduce)
/// pair on exactly that region (e.g. recursive doubling reusing one scratch block per round): by
/// race freedom each pair's Recv → Reduce window excludes the other pairs' steps. Only for
/// schedules of up to 512 steps (the check is quadratic); longer (pipelined) ones copy as usual.
type Fusion = (Vec<bool>, Vec<StepId>);

fn fusable(s: &Schedule, dependents: &[Vec<StepId>]) -> Fusion {
    let (mut fuse, mut from) = (vec![false; s.len()], vec![NOT_FUSED; s.len()]);
    if s.len() > 512 {
        return (fuse, from);
    }
    // Candidate pairs and the region each of their steps stands for.
    let mut pair_region: FastMap<StepId, Region> = FastMap::default();
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

/// Whether a plan's steps are all Sends, each to a different peer, with no scratch: a call that
/// may run straight even when nonblocking (it never waits there).
pub(crate) fn sends_only(plan_sched: &Schedule) -> bool {
    let mut peers = Vec::new();
    for (_, k, _) in plan_sched.iter() {
        let StepKind::Send { peer, .. } = *k else { return false };
        if peers.contains(&peer) {
            return false;
        }
        peers.push(peer);
    }
    !peers.is_empty() && plan_sched.scratch.iter().all(|&n| n == 0)
}

#[cfg(test)]
mod tests {
    use fabcoll_collectives::{registry, CollArgs, Collective};

    use super::sends_only;

    fn shape(coll: Collective, alg: &str, rank: u32, p: u32, count: u64, segment: Option<u64>) -> bool {
        let mut a = CollArgs::new(coll, rank, p, count);
        a.elem_size = 4;
        if let Some(s) = segment {
            a.params.set("segment", s);
        }
        sends_only(&registry::find(coll, alg).unwrap().schedule(&a).unwrap())
    }

    #[test]
    fn only_ranks_that_send_once_to_each_peer_and_nothing_else_qualify() {
        for p in [2, 3, 8] {
            assert!(shape(Collective::Bcast, "binomial", 0, p, 10, None), "binomial root, p = {p}");
            assert!(shape(Collective::Bcast, "linear", 0, p, 10, None), "linear root, p = {p}");
            assert!(!shape(Collective::Bcast, "binomial", 1, p, 10, None), "a receiver, p = {p}");
        }
        // A root that sends a peer several segments, or also receives, takes the engine.
        assert!(!shape(Collective::Bcast, "binomial", 0, 2, 1000, Some(100)), "segmented");
        assert!(!shape(Collective::Bcast, "scatter_ring_allgather", 0, 4, 1000, None), "the root also receives");
        assert!(!shape(Collective::Allreduce, "recursive_doubling", 0, 2, 10, None));
        // Nothing to send (p = 1) is no sends-only call either.
        assert!(!shape(Collective::Bcast, "binomial", 0, 1, 10, None));
    }
}
