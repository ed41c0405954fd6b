//! Node-aggregated alltoall(v): every pair of nodes (a, m) exchanges one network message, carrying
//! all k_a·k_m blocks that a's ranks send to m's ranks. The ranks of a node first hand their
//! blocks for node m to the rank that carries them (one message per local peer, together with
//! the blocks for that peer itself), the carriers exchange across nodes, and each receiving
//! carrier hands the blocks on to their destinations in its node (one message per local peer).
//! Two choices of carrier, one row each:
//!
//! - `hier_leader`: each node's lowest rank sends and receives all N − 1 network messages;
//! - `hier_multi_leader`: the node pairs are spread over the local ranks (node a's local rank
//!   (d − 1) mod k_a sends to the node d = (m − a) mod N ahead, node m's local rank
//!   (N − d − 1) mod k_m receives), so every rank and network connection works, as in the
//!   multi-leader allreduce.
//!
//! Cost, multi-leader (N nodes of k ranks, c = count·elem bytes per block, n = p·c bytes per
//! rank; i = intra-node, e = inter-node parameters): (k − 1)α_i + (k − 1)N·c β_i (hand-off) +
//! ⌈(N − 1)/k⌉(α_e + k²c β_e) (carriers) + (k − 1)α_i + (k − 1)(N − 1)c β_i (hand-on); each
//! node's interface carries (N − 1)k²c = (N − 1)/N·k·n each way, as flat algorithms do, but in
//! N − 1 messages instead of k(p − k). Leader: the leader's 2(k − 1)α_i + (k − 1)(2N − 1)k·c β_i
//! inside the node and (N − 1)(α_e + k²c β_e) across. γ = 0. alltoallv: the same messages,
//! sized by the count matrix (empty ones skipped). In place (alltoall), the input is staged in
//! scratch first, as for every non-pair alltoall.
//! Restrictions: a two-level topology (any placement: unequal and non-contiguous nodes work).
//! Paper: mamidala §4 (leader-based two-level designs, node-local exchange through shared
//! memory), matsuda §2.2–2.4 (one-to-one inter-cluster copies between the nodes of each side,
//! several at once, to fill the long link), faraj-yuan §3.1 (the 2D mesh: phases along one
//! dimension, forwarding items for the next; here the dimensions are the node and its ranks).

use super::forward::{Forwarder, Item};
use super::phases::{elem, Io};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Schedule, ScheduleBuilder};
use crate::topology::Topology;
use crate::two_level::topology;

/// Who carries the blocks between two nodes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Carriers {
    /// Each node's lowest rank.
    Leader,
    /// Node pairs spread over the local ranks.
    MultiLeader,
}

impl Carriers {
    /// (sender on node `a`, receiver on node `m`) of the message from node a to node m (a ≠ m).
    fn of(self, t: &Topology, a: u32, m: u32) -> (u32, u32) {
        let (on_a, on_m) = (t.ranks_on(a), t.ranks_on(m));
        match self {
            Carriers::Leader => (on_a[0], on_m[0]),
            Carriers::MultiLeader => {
                let n = t.nodes();
                let d = (m + n - a) % n;
                (on_a[(d as usize - 1) % on_a.len()], on_m[(n - d - 1) as usize % on_m.len()])
            }
        }
    }
}

const SUMMARY_LEADER: &str = "one network message per node pair, sent and received by the node leaders";
const SUMMARY_MULTI: &str = "one network message per node pair, node pairs spread over the local ranks";

pub(super) const LEADER: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "hier_leader",
    summary: SUMMARY_LEADER,
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost: |a| cost(a, Carriers::Leader),
    build: |a| build(a, Carriers::Leader),
};

pub(super) const LEADER_V: Algorithm = Algorithm { coll: Collective::Alltoallv, ..LEADER };

pub(super) const MULTI_LEADER: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "hier_multi_leader",
    summary: SUMMARY_MULTI,
    restrictions: Restrictions::TWO_LEVEL,
    params: &[],
    cost: |a| cost(a, Carriers::MultiLeader),
    build: |a| build(a, Carriers::MultiLeader),
};

pub(super) const MULTI_LEADER_V: Algorithm = Algorithm { coll: Collective::Alltoallv, ..MULTI_LEADER };

/// The items every rank sends, phase by phase: computed alike by senders and receivers.
struct Plan<'t> {
    t: &'t Topology,
    carriers: Carriers,
}

impl Plan<'_> {
    /// Nodes other than `a`, nearest ahead first.
    fn others(&self, a: u32) -> impl Iterator<Item = u32> {
        let n = self.t.nodes();
        (1..n).map(move |d| (a + d) % n)
    }

    /// Hand-off: what `q` gives its node peer `to`: its block for `to`, and its blocks for every
    /// node whose message `to` sends.
    fn hand_off(&self, q: u32, to: u32) -> Vec<Item> {
        let a = self.t.node_of(q);
        let mut items = vec![(q, to)];
        for m in self.others(a).filter(|&m| self.carriers.of(self.t, a, m).0 == to) {
            items.extend(self.t.ranks_on(m).iter().map(|&d| (q, d)));
        }
        items
    }

    /// The network message from node `a` to node `m`: every block of a's ranks for m's ranks.
    fn across(&self, a: u32, m: u32) -> Vec<Item> {
        let on_m = self.t.ranks_on(m);
        self.t.ranks_on(a).iter().flat_map(|&q| on_m.iter().map(move |&d| (q, d))).collect()
    }

    /// Hand-on: what carrier `c` gives its node peer `d`: the blocks for d of every node whose
    /// message c received, in source rank order.
    fn hand_on(&self, c: u32, d: u32) -> Vec<Item> {
        let m = self.t.node_of(c);
        let mut items: Vec<Item> = self
            .others(m)
            .filter(|&a| self.carriers.of(self.t, a, m).1 == c)
            .flat_map(|a| self.t.ranks_on(a).iter().map(move |&q| (q, d)))
            .collect();
        items.sort_unstable();
        items
    }
}

/// Node peers of `me` in spreading order: (send to, receive from) = (j + s, j − s).
fn node_peers(t: &Topology, me: u32) -> Vec<(u32, u32)> {
    let on = t.ranks_on(t.node_of(me));
    let (j, k) = (t.local_rank(me) as usize, on.len());
    (1..k).map(|s| (on[(j + s) % k], on[(j + k - s) % k])).collect()
}

fn build(args: &CollArgs, carriers: Carriers) -> Result<Schedule> {
    let t = topology(args)?;
    let mut b = ScheduleBuilder::for_args(args);
    let io = Io::new(&mut b, args)?;
    io.own_copy(&mut b);
    let me = args.rank;
    let a = t.node_of(me);
    let plan = Plan { t, carriers };
    let peers = node_peers(t, me);
    let mut fw = Forwarder::new(io);
    for &(to, from) in &peers {
        fw.send(&mut b, to, &plan.hand_off(me, to), &[]);
        fw.recv(&mut b, from, &plan.hand_off(from, me), &[]);
    }
    // Across: send to the nodes ahead, receive from the nodes behind, nearest first.
    let n = t.nodes();
    for d in 1..n {
        let (m, from) = ((a + d) % n, (a + n - d) % n);
        let (s, r) = carriers.of(t, a, m);
        if s == me {
            fw.send(&mut b, r, &plan.across(a, m), &[]);
        }
        let (s, r) = carriers.of(t, from, a);
        if r == me {
            fw.recv(&mut b, s, &plan.across(from, a), &[]);
        }
    }
    for &(to, from) in &peers {
        fw.send(&mut b, to, &plan.hand_on(me, to), &[]);
        fw.recv(&mut b, from, &plan.hand_on(from, me), &[]);
    }
    debug_assert_eq!(fw.held(), 0, "node-aggregated alltoall left items undelivered");
    Ok(b.finish())
}

/// The module doc's formula, per phase the busiest rank's messages and bytes (alltoallv: from
/// the count matrix).
fn cost(args: &CollArgs, carriers: Carriers) -> Cost {
    let Some(t) = args.topology.as_deref() else {
        return Cost::default();
    };
    let plan = Plan { t, carriers };
    let p = args.size;
    let bytes = |items: &[Item]| items.iter().map(|&(s, d)| args.pair_count(s, d)).sum::<u64>();
    let (mut alpha, mut beta) = (0u64, 0f64);
    let phase = |msgs: &dyn Fn(u32) -> Vec<(u32, u64)>| {
        let (mut most_msgs, mut most_bytes) = (0u64, 0u64);
        let (mut got_msgs, mut got_bytes) = (vec![0u64; p as usize], vec![0u64; p as usize]);
        for q in 0..p {
            let out = msgs(q);
            most_msgs = most_msgs.max(out.iter().filter(|m| m.1 > 0).count() as u64);
            most_bytes = most_bytes.max(out.iter().map(|m| m.1).sum());
            for (to, len) in out {
                got_msgs[to as usize] += u64::from(len > 0);
                got_bytes[to as usize] += len;
            }
        }
        let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        (most_msgs.max(max(&got_msgs)), most_bytes.max(max(&got_bytes)))
    };
    let off = phase(&|q| node_peers(t, q).iter().map(|&(to, _)| (to, bytes(&plan.hand_off(q, to)))).collect());
    let across = phase(&|q| {
        let a = t.node_of(q);
        plan.others(a)
            .filter_map(|m| {
                let (s, r) = carriers.of(t, a, m);
                (s == q).then(|| (r, bytes(&plan.across(a, m))))
            })
            .collect()
    });
    let on = phase(&|q| node_peers(t, q).iter().map(|&(to, _)| (to, bytes(&plan.hand_on(q, to)))).collect());
    for (m, by) in [off, across, on] {
        alpha += m;
        beta += by as f64;
    }
    Cost::new(alpha as f64, beta * elem(args), 0.0)
}
