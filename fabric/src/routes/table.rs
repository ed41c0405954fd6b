//! The route of every peer: node-local (with the peer's rank among the node's ranks) or network
//! (the network endpoint spans every rank, so its rank is the global one).

use crate::error::{Error, Result};

/// Which endpoint reaches a peer, and the peer's rank there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Over the node-local endpoint; the peer's local rank.
    Node(usize),
    /// Over the network endpoint; the peer's (global) rank.
    Network(usize),
}

/// The routes of one rank to every rank of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTable {
    /// The global rank of each local rank (ascending).
    node_members: Vec<usize>,
    /// The local rank of each global rank on this node, `None` elsewhere.
    local_of: Vec<Option<usize>>,
    rank: usize,
    local_rank: usize,
}

impl RouteTable {
    /// The routes of global rank `rank` in a job of `size` ranks, whose node holds the global
    /// ranks `node_members` (ascending, `rank` among them; local rank i is `node_members[i]`).
    pub fn new(rank: usize, size: usize, node_members: Vec<usize>) -> Result<RouteTable> {
        if rank >= size {
            return Err(Error::invalid(format!("rank {rank} not in a job of {size} ranks")));
        }
        if !node_members.windows(2).all(|w| w[0] < w[1]) {
            return Err(Error::invalid(format!("node members {node_members:?} are not ascending and distinct")));
        }
        if let Some(&bad) = node_members.iter().find(|&&m| m >= size) {
            return Err(Error::invalid(format!("node member {bad} not in a job of {size} ranks")));
        }
        let mut local_of = vec![None; size];
        for (i, &g) in node_members.iter().enumerate() {
            local_of[g] = Some(i);
        }
        let Some(local_rank) = local_of[rank] else {
            return Err(Error::invalid(format!("rank {rank} is not among its node's ranks {node_members:?}")));
        };
        Ok(RouteTable { node_members, local_of, rank, local_rank })
    }

    /// This rank (global).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.local_of.len()
    }

    /// This rank among its node's ranks.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Ranks on this node (this one included).
    pub fn local_size(&self) -> usize {
        self.node_members.len()
    }

    /// The route to global rank `peer`; a rank outside the job is an error naming it.
    pub fn route(&self, peer: usize) -> Result<Route> {
        match self.local_of.get(peer) {
            Some(Some(local)) => Ok(Route::Node(*local)),
            Some(None) => Ok(Route::Network(peer)),
            None => Err(Error::invalid(format!("peer rank {peer} not in a job of {} ranks", self.size()))),
        }
    }

    /// The global rank of local rank `local` (what the node-local endpoint reports); an unknown
    /// one is an error.
    pub fn global_of_local(&self, local: usize) -> Result<usize> {
        self.node_members.get(local).copied().ok_or_else(|| {
            Error::invalid(format!("node-local rank {local} not among this node's {} ranks", self.local_size()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_peers_go_node_local_with_local_ranks_and_the_others_over_the_network() {
        // Rank 4 of 6 on a node holding the non-contiguous ranks 1, 4, 5.
        let t = RouteTable::new(4, 6, vec![1, 4, 5]).unwrap();
        assert_eq!((t.rank(), t.size(), t.local_rank(), t.local_size()), (4, 6, 1, 3));
        let routes: Vec<Route> = (0..6).map(|p| t.route(p).unwrap()).collect();
        use Route::{Network as W, Node as N};
        assert_eq!(routes, [W(0), N(0), W(2), W(3), N(1), N(2)]);
        assert_eq!((0..3).map(|l| t.global_of_local(l).unwrap()).collect::<Vec<_>>(), [1, 4, 5]);
        assert!(t.route(6).unwrap_err().to_string().contains("peer rank 6 not in a job of 6"));
        assert!(t.global_of_local(3).is_err());
    }

    #[test]
    fn a_bad_placement_is_an_error() {
        for (rank, members, why) in [
            (0, vec![1, 2], "not among its node's ranks"),
            (1, vec![2, 1], "not ascending"),
            (1, vec![1, 1], "not ascending"),
            (1, vec![1, 9], "node member 9"),
            (7, vec![1], "rank 7 not in a job"),
        ] {
            let e = RouteTable::new(rank, 4, members).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        // A node of one rank: every peer but itself is a network peer.
        let t = RouteTable::new(2, 3, vec![2]).unwrap();
        assert_eq!(t.route(2).unwrap(), Route::Node(0));
        assert_eq!(t.route(0).unwrap(), Route::Network(0));
    }
}
