//! A built schedule compiled once into what both ways of running it need: its straight-line
//! order (`fabcoll_collectives::straight`, for the runner) and the dependency tables of the
//! engine's ops (dependents, message indices, send/receive lookup, fusable Recv→Reduce pairs,
//! lendable Sends: `fabcoll_collectives::lending`). Immutable and shared (`Arc`): a communicator
//! prepares it once per distinct call (see `comm::memo`).

use fabcoll_collectives::lending::{self, Lend};
use fabcoll_collectives::schedule::{Schedule, StepId, StepKind};

use super::fasthash::FastMap;

pub(crate) use fabcoll_collectives::lending::NOT_FUSED;

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
    /// reads straight out of the eager slot, or the sender's buffer; the Recv region is never
    /// written; `fabcoll_collectives::lending::fusable`).
    pub fuse: Vec<bool>,
    /// Per step: a Send whose source the receiver may read while this rank waits
    /// (`fabcoll_collectives::lending`): one nothing waits for, and after [`Plan::lend_waited`]
    /// one that only Recvs wait for.
    pub lend: Vec<Lend>,
    /// [`Lend::Waited`] Sends are lent too.
    pub lends_waited: bool,
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
        let (fuse, fused_from) = lending::fusable(&sched, &dependents);
        let lend = lending::lendable(&sched, &dependents);
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
            lend,
            lends_waited: false,
            roots,
            local_roots,
            local,
        }
    }

    /// The plan of a point-to-point transfer (a single Send or Recv): its message index is the
    /// transfer's `tag`, so that an eager message carries its tag whole where the immediate has
    /// room for it, and an RTS always (a receive from any source matches on it, `exec::p2p`).
    pub fn transfer(sched: Schedule, tag: u32) -> Plan {
        let mut plan = Plan::new(sched);
        debug_assert_eq!(plan.sched.len(), 1, "a transfer is one step");
        plan.idx[0] = tag;
        let retag = |m: &mut FastMap<(u32, u32), StepId>| {
            *m = m.drain().map(|((peer, _), s)| ((peer, tag), s)).collect();
        };
        retag(&mut plan.send_of);
        retag(&mut plan.recv_of);
        plan
    }

    /// Whether some Send could be lent if [`Lend::Waited`] ones were.
    pub fn has_waited_sends(&self) -> bool {
        self.lend.contains(&Lend::Waited)
    }

    /// Lends [`Lend::Waited`] Sends too: the caller checked that the whole job completes with
    /// them lent (`fabcoll_collectives::lending::lending_job_completes`).
    pub fn lend_waited(&mut self) {
        self.lends_waited = true;
    }

    /// Whether Send `s`'s source may be lent to a receiver that reads it.
    #[inline]
    pub fn lends(&self, s: StepId) -> bool {
        match self.lend[s as usize] {
            Lend::No => false,
            Lend::Free => true,
            Lend::Waited => self.lends_waited,
        }
    }
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
