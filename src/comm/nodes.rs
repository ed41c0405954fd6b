//! Where a communicator's ranks sit: its [`Topology`], learned at bootstrap (every rank's node
//! identity travels with its address, see `fabric::bootstrap::NodeId`), given by the program
//! ([`Communicator::set_topology`]) or derived from the parent's by `dup` and `split` (no store
//! access). [`Communicator::split_by_node`] and [`Communicator::node_leaders`] are the two
//! communicators of a two-level collective: the ranks of my node, and one rank per node.
//!
//! The topology is attached to the arguments of a call when it is prepared (selection and the
//! schedule see it), never to the arguments a call is looked up by, so repeated calls pay nothing.

use std::sync::Arc;

use fabcoll_collectives::Topology;
use fabcoll_fabric::bootstrap::NodeId;

use super::call::fnv;
use super::{Collectives, Communicator};
use crate::error::{Error, Result};
use crate::select::FabricClass;

fn invalid(msg: String) -> Error {
    Error::InvalidArgument { coll: "topology", msg }
}

/// The topology a communicator of `size` ranks over a `fabric` of this class knows before anyone
/// says more: one node on node fabrics (shm, local: every rank necessarily shares it), else
/// unknown (every rank a node of its own).
pub(super) fn default_topology(size: u32, fabric: FabricClass) -> Arc<Topology> {
    Arc::new(match fabric {
        FabricClass::Node => Topology::from_sizes(&[size]).expect("a communicator has at least one rank"),
        FabricClass::Network => Topology::flat(size),
    })
}

/// The topology of the world communicator from every rank's identity: on node fabrics one node
/// unless some rank set `FABCOLL_NODE` (emulated nodes), else the nodes the identities say.
/// Every rank computes it from the same identities, so every rank builds the same one.
pub(super) fn world_topology(ids: &[NodeId], fabric: FabricClass) -> Result<Arc<Topology>> {
    let size = u32::try_from(ids.len()).map_err(|_| invalid(format!("{} ranks are too many", ids.len())))?;
    if fabric == FabricClass::Node && !ids.iter().any(|id| id.explicit) {
        return Ok(default_topology(size, fabric));
    }
    let names: Vec<&str> = ids.iter().map(|id| id.name.as_str()).collect();
    Ok(Arc::new(Topology::from_node_ids(&names)?))
}

/// The topology of the ranks `ranks` of `t` (rank `i` of the result is rank `ranks[i]` of `t`):
/// nodes and the levels above them restricted to those ranks, renumbered in rank order.
pub(super) fn restrict(t: &Topology, ranks: &[u32]) -> Result<Topology> {
    let nodes: Vec<u32> = ranks.iter().map(|&r| t.node_of(r)).collect();
    let mut sub = Topology::from_nodes(&nodes)?;
    // `outer[g]`: the group of `t` that group g of `sub`'s top level is, level by level.
    let mut outer = vec![0u32; sub.nodes() as usize];
    for (i, &n) in nodes.iter().enumerate() {
        outer[sub.node_of(i as u32) as usize] = n;
    }
    for (l, level) in t.levels().iter().enumerate().skip(1) {
        let group_of: Vec<u32> = outer.iter().map(|&g| level.group_of(g)).collect();
        sub = sub.with_level(&level.name, &group_of)?;
        let top = &sub.levels()[l];
        let mut next = vec![0u32; top.groups() as usize];
        for (g, &parent) in group_of.iter().enumerate() {
            next[top.group_of(g as u32) as usize] = parent;
        }
        outer = next;
    }
    Ok(sub)
}

/// A digest of a topology: its size and, level by level, its name and every member's group.
fn fingerprint(t: &Topology) -> u64 {
    let mut words = vec![u64::from(t.size())];
    let mut below = t.size();
    for level in t.levels() {
        words.push(fnv(level.name.bytes().map(u64::from)));
        words.extend((0..below).map(|m| u64::from(level.group_of(m))));
        below = level.groups();
    }
    fnv(words)
}

impl Communicator {
    /// Where this communicator's ranks sit (see the module doc). Without bootstrap knowledge
    /// (`from_endpoint` over a network fabric) every rank is a node of its own.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    /// Gives this communicator a topology of the program's own (collective: every rank must call
    /// it with an equal one of this communicator's size, which is checked with one allgather; a
    /// difference is an error on every rank, naming the first rank that differs, and leaves the
    /// topology as it was).
    /// Communicators derived from this one later inherit it; calls prepared before are prepared
    /// again. A setter, as [`Communicator::set_decisions`], so that it works on any communicator,
    /// whichever constructor made it.
    pub fn set_topology(&mut self, topology: Topology) -> Result<()> {
        // A rank whose topology has the wrong size still takes part, so that its peers fail too
        // instead of waiting for it.
        let fits = topology.size() == self.size;
        let mine = if fits { fingerprint(&topology) } else { 0 };
        let mut all = vec![0u64; self.size as usize];
        self.allgather(&[mine], &mut all)?;
        if !fits {
            return Err(invalid(format!(
                "a topology of {} ranks for a communicator of {}",
                topology.size(),
                self.size
            )));
        }
        // Every rank sees the same fingerprints, so every rank reports the same rank.
        if let Some(r) = all.iter().position(|&f| f != all[0]) {
            return Err(invalid(format!("rank {r} set a different topology than rank 0")));
        }
        self.topology = Arc::new(topology);
        self.calls().memo.clear();
        Ok(())
    }

    /// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the ranks of my node, ordered by their rank
    /// here (collective).
    pub fn split_by_node(&self) -> Result<Communicator> {
        let node = self.topology.node_of(self.rank);
        self.split(Some(node), 0)?.ok_or_else(|| invalid("split_by_node: no communicator for my node".into()))
    }

    /// The communicator of each node's leader (its lowest rank), ordered by rank; `None` on the
    /// other ranks (collective). The leaders are the ranks that speak for their node in the
    /// phase among nodes of a two-level collective; a communicator per local-rank index (the
    /// "rails" of a multi-NIC node) is `split(Some(local_rank), 0)`.
    pub fn node_leaders(&self) -> Result<Option<Communicator>> {
        let leader = self.topology.local_rank(self.rank) == 0;
        self.split(leader.then_some(0), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{Call, Options};
    use fabcoll_collectives::Collective;

    #[test]
    fn prepared_calls_carry_the_topology_and_are_found_without_it() {
        let comms = Communicator::local(2).unwrap();
        let c = &comms[0];
        let call = Call::new::<f32>(c, Collective::Allgather, 4);
        assert!(call.args.topology.is_none());
        let p = c.prepared(&call, &Options::default()).unwrap();
        let on = p.args.topology.as_ref().expect("the prepared arguments carry the topology");
        assert!(Arc::ptr_eq(on, c.topology()));
        assert_eq!(c.topology().nodes(), 1);
        // The same call again is the remembered one.
        assert!(Arc::ptr_eq(&p, &c.prepared(&call, &Options::default()).unwrap()));
    }

    #[test]
    fn a_restricted_topology_keeps_nodes_and_levels() {
        // Nodes {0,2} {1,3} {4,5}; switches: nodes 0,1 on one, node 2 on another.
        let t = Topology::from_nodes(&[0, 1, 0, 1, 2, 2]).unwrap().with_level("switch", &[0, 0, 1]).unwrap();
        let sub = restrict(&t, &[5, 3, 1]).unwrap();
        assert_eq!(sub.nodes(), 2);
        assert_eq!(sub.ranks_on(0), &[0]);
        assert_eq!(sub.ranks_on(1), &[1, 2]);
        assert_eq!(sub.levels()[1].groups(), 2);
        assert_eq!(sub.levels()[1].group_of(0), 0);
        assert_eq!(sub.levels()[1].group_of(1), 1);
        assert_eq!(restrict(&t, &[0, 1, 2, 3, 4, 5]).unwrap(), t);
    }

    #[test]
    fn fingerprints_tell_topologies_apart() {
        let a = Topology::regular(2, 2).unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&Topology::from_nodes(&[5, 5, 9, 9]).unwrap()));
        assert_ne!(fingerprint(&a), fingerprint(&Topology::from_nodes(&[0, 1, 0, 1]).unwrap()));
        assert_ne!(fingerprint(&a), fingerprint(&Topology::flat(4)));
        let switched = a.clone().with_level("switch", &[0, 1]).unwrap();
        assert_ne!(fingerprint(&a), fingerprint(&switched));
    }

    #[test]
    fn node_fabrics_are_one_node_unless_a_rank_names_its_node() {
        let host = |n: &str| NodeId { name: n.into(), explicit: false };
        let named = |n: &str| NodeId { name: n.into(), explicit: true };
        let ids = [host("h"), host("h"), host("h")];
        assert_eq!(world_topology(&ids, FabricClass::Node).unwrap().nodes(), 1);
        let ids = [named("a"), named("b"), named("a")];
        assert_eq!(world_topology(&ids, FabricClass::Node).unwrap().to_string(), "0,2|1");
        let ids = [host("x"), host("y")];
        assert_eq!(world_topology(&ids, FabricClass::Network).unwrap().nodes(), 2);
        assert_eq!(default_topology(3, FabricClass::Network).nodes(), 3);
        assert_eq!(default_topology(3, FabricClass::Node).nodes(), 1);
    }
}
