//! Where ranks sit: a [`Topology`] groups a communicator's ranks in levels, innermost first. The
//! first level is the node (ranks that share memory); the levels above it (switches, clusters)
//! group the groups of the level below. Hierarchical algorithms read it to split a collective
//! into a phase inside each group and a phase among the groups (Mamidala et al. 2008,
//! `../shared/papers/mamidala-2008-multicore-collectives.txt`).
//!
//! Placements may be irregular: groups of unequal size, and groups whose ranks are not
//! contiguous (rank `r`'s group is whatever its identity says). Groups are numbered in the order
//! of their lowest rank, and ranks inside a group in increasing order, so that every rank that
//! builds a topology from the same identities builds the same one.
//!
//! A topology comes from the bootstrap (every rank publishes its node identity), from the program,
//! or is synthetic ([`Topology::regular`], [`Topology::from_sizes`]) for tests and the simulator.

use std::collections::HashMap;
use std::fmt;

use crate::error::{Error, Result};

/// One level of a topology: which group each member of the level below belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Level {
    /// What the level is called ("node", "switch", …), for messages and reports.
    pub name: String,
    /// Group of each member of the level below (each rank, for the first level).
    group_of: Vec<u32>,
    /// The members of each group, in increasing order.
    members: Vec<Vec<u32>>,
}

impl Level {
    fn new(name: &str, group_of: Vec<u32>) -> Level {
        let groups = group_of.iter().map(|&g| g as usize + 1).max().unwrap_or(0);
        let mut members = vec![Vec::new(); groups];
        for (m, &g) in group_of.iter().enumerate() {
            members[g as usize].push(m as u32);
        }
        Level { name: name.to_owned(), group_of, members }
    }

    /// Number of groups.
    pub fn groups(&self) -> u32 {
        self.members.len() as u32
    }

    /// The group member `m` of the level below belongs to.
    pub fn group_of(&self, m: u32) -> u32 {
        self.group_of[m as usize]
    }

    /// The members of group `g`, in increasing order.
    pub fn members(&self, g: u32) -> &[u32] {
        &self.members[g as usize]
    }
}

/// A communicator's ranks grouped in levels, innermost (node) first. See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Topology {
    size: u32,
    levels: Vec<Level>,
}

/// Numbers identities in the order of their first appearance: `ids[i]`'s group.
fn number<T: std::hash::Hash + Eq>(ids: &[T]) -> Vec<u32> {
    let mut seen: HashMap<&T, u32> = HashMap::new();
    ids.iter()
        .map(|id| {
            let next = seen.len() as u32;
            *seen.entry(id).or_insert(next)
        })
        .collect()
}

fn invalid(msg: String) -> Error {
    Error::Topology(msg)
}

impl Topology {
    /// Every rank on a node of its own (what a communicator knows when nothing says otherwise).
    pub fn flat(size: u32) -> Topology {
        Topology { size, levels: vec![Level::new("node", (0..size).collect())] }
    }

    /// The node of each rank given by an identity (a host name, `FABCOLL_NODE`, …): ranks with
    /// equal identities share a node. Nodes are numbered in the order of their lowest rank.
    pub fn from_node_ids<T: std::hash::Hash + Eq>(ids: &[T]) -> Result<Topology> {
        if ids.is_empty() {
            return Err(invalid("a topology needs at least one rank".into()));
        }
        let size = u32::try_from(ids.len()).map_err(|_| invalid(format!("{} ranks are too many", ids.len())))?;
        Ok(Topology { size, levels: vec![Level::new("node", number(ids))] })
    }

    /// The node of each rank, by number: `node_of[r]` is rank r's node. The numbers may be any
    /// `u32`s; they are renumbered in the order of each node's lowest rank.
    pub fn from_nodes(node_of: &[u32]) -> Result<Topology> {
        Topology::from_node_ids(node_of)
    }

    /// A synthetic placement: nodes of the given sizes, ranks numbered node by node (the first
    /// `sizes[0]` ranks on node 0, …). Sizes must be at least 1.
    pub fn from_sizes(sizes: &[u32]) -> Result<Topology> {
        if let Some(i) = sizes.iter().position(|&s| s == 0) {
            return Err(invalid(format!("node {i} has no ranks")));
        }
        let node_of: Vec<u32> =
            sizes.iter().enumerate().flat_map(|(n, &s)| std::iter::repeat_n(n as u32, s as usize)).collect();
        Topology::from_nodes(&node_of)
    }

    /// A synthetic regular placement: `nodes` nodes of `per_node` ranks, numbered node by node.
    pub fn regular(nodes: u32, per_node: u32) -> Result<Topology> {
        if nodes == 0 || per_node == 0 {
            return Err(invalid(format!("{nodes} nodes of {per_node} ranks: both must be at least 1")));
        }
        Topology::from_sizes(&vec![per_node; nodes as usize])
    }

    /// Adds a level above the current top one: `group_of[g]` is the group of the top level's
    /// group `g` (e.g. the switch of each node).
    pub fn with_level(mut self, name: &str, group_of: &[u32]) -> Result<Topology> {
        let below = self.levels.last().map_or(self.size, Level::groups);
        if group_of.len() != below as usize {
            return Err(invalid(format!(
                "level {name:?} names the group of {} members, the level below has {below}",
                group_of.len()
            )));
        }
        self.levels.push(Level::new(name, number(group_of)));
        Ok(self)
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The levels, innermost (node) first.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// Number of nodes.
    pub fn nodes(&self) -> u32 {
        self.levels[0].groups()
    }

    /// The node rank `r` runs on.
    pub fn node_of(&self, r: u32) -> u32 {
        self.levels[0].group_of(r)
    }

    /// The ranks on node `n`, in increasing order.
    pub fn ranks_on(&self, n: u32) -> &[u32] {
        self.levels[0].members(n)
    }

    /// Rank `r`'s index among the ranks of its node.
    pub fn local_rank(&self, r: u32) -> u32 {
        let on = self.ranks_on(self.node_of(r));
        on.binary_search(&r).expect("a rank is among its node's ranks") as u32
    }

    /// The number of ranks on rank `r`'s node.
    pub fn local_size(&self, r: u32) -> u32 {
        self.ranks_on(self.node_of(r)).len() as u32
    }

    /// The most ranks on one node (what the decision files' `per_node` condition tests).
    pub fn max_per_node(&self) -> u32 {
        (0..self.nodes()).map(|n| self.ranks_on(n).len() as u32).max().unwrap_or(1)
    }

    /// Each node's leader (its lowest rank), by node.
    pub fn leaders(&self) -> Vec<u32> {
        (0..self.nodes()).map(|n| self.ranks_on(n)[0]).collect()
    }

    /// Each node's leader, by node, where rank `r` leads its own node and the lowest rank leads
    /// every other (rooted hierarchical algorithms lead the root's node from the root).
    pub fn leaders_with(&self, r: u32) -> Vec<u32> {
        let mut l = self.leaders();
        l[self.node_of(r) as usize] = r;
        l
    }

    /// The ranks of all nodes, node by node (node 0's ranks in increasing order, then node 1's,
    /// …): position i of this order is where a node-ordered buffer keeps rank `order[i]`'s block.
    pub fn node_order(&self) -> Vec<u32> {
        (0..self.nodes()).flat_map(|n| self.ranks_on(n).iter().copied()).collect()
    }

    /// The number of ranks on the nodes before node `n` (node `n`'s first position in
    /// [`Topology::node_order`]).
    pub fn ranks_before(&self, n: u32) -> u32 {
        (0..n).map(|m| self.ranks_on(m).len() as u32).sum()
    }

    /// Whether `a` and `b` share a node.
    pub fn same_node(&self, a: u32, b: u32) -> bool {
        self.node_of(a) == self.node_of(b)
    }

    /// Ranks per node when every node has the same number, `None` otherwise.
    pub fn per_node(&self) -> Option<u32> {
        let k = self.ranks_on(0).len();
        (0..self.nodes()).all(|n| self.ranks_on(n).len() == k).then_some(k as u32)
    }

    /// Whether every node's ranks are contiguous and nodes come in rank order.
    pub fn is_blocked(&self) -> bool {
        (1..self.size).all(|r| self.node_of(r) == self.node_of(r - 1) || self.node_of(r) == self.node_of(r - 1) + 1)
    }
}

/// Why a hierarchical (two-level) algorithm cannot run on `size` ranks placed by `topology`, or
/// `None` if it can: it needs a topology of `size` ranks with at least two nodes and at least one
/// node of two or more ranks (otherwise there is only one level and a flat algorithm is the same).
pub fn two_level_violation(topology: Option<&Topology>, size: u32) -> Option<String> {
    let Some(t) = topology else {
        return Some("needs a topology (none given: every rank counts as a node of its own)".into());
    };
    if t.size() != size {
        return Some(format!("the topology places {} ranks, the communicator has {size}", t.size()));
    }
    if t.nodes() == 1 {
        return Some(format!("needs ranks on two or more nodes (all {size} share one node)"));
    }
    if t.nodes() == size {
        return Some(format!("needs a node with two or more ranks (each of the {size} ranks has a node of its own)"));
    }
    None
}

impl fmt::Display for Topology {
    /// "2 nodes × 4 ranks" when regular and blocked, else the ranks of each node ("0,2|1,3").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.per_node() {
            Some(k) if self.is_blocked() => {
                write!(f, "{} node{} × {k} rank{}", self.nodes(), plural(self.nodes()), plural(k))
            }
            _ => {
                let nodes: Vec<String> = (0..self.nodes())
                    .map(|n| self.ranks_on(n).iter().map(u32::to_string).collect::<Vec<_>>().join(","))
                    .collect();
                write!(f, "{}", nodes.join("|"))
            }
        }
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_group_ranks_in_order_of_their_lowest_rank() {
        let t = Topology::from_node_ids(&["b", "a", "b", "c", "a"]).unwrap();
        assert_eq!(t.nodes(), 3);
        assert_eq!(t.ranks_on(0), &[0, 2]);
        assert_eq!(t.ranks_on(1), &[1, 4]);
        assert_eq!(t.ranks_on(2), &[3]);
        assert_eq!(t.leaders(), vec![0, 1, 3]);
        assert_eq!((t.local_rank(4), t.local_size(4)), (1, 2));
        assert!(t.same_node(1, 4) && !t.same_node(0, 1));
        assert_eq!(t.per_node(), None);
        assert_eq!(t.max_per_node(), 2);
        assert!(!t.is_blocked());
        assert_eq!(t.to_string(), "0,2|1,4|3");
        assert_eq!(t.leaders_with(4), vec![0, 4, 3]);
        assert_eq!(t.node_order(), vec![0, 2, 1, 4, 3]);
        assert_eq!(t.ranks_before(2), 4);
    }

    #[test]
    fn two_levels_need_two_nodes_and_a_shared_node() {
        let why = |t: Option<&Topology>, p| two_level_violation(t, p).unwrap_or_default();
        assert!(why(None, 4).contains("needs a topology"));
        assert!(why(Some(&Topology::regular(1, 4).unwrap()), 4).contains("share one node"));
        assert!(why(Some(&Topology::flat(4)), 4).contains("node of its own"));
        assert!(why(Some(&Topology::regular(2, 2).unwrap()), 6).contains("places 4 ranks"));
        assert_eq!(two_level_violation(Some(&Topology::from_sizes(&[1, 3]).unwrap()), 4), None);
    }

    #[test]
    fn synthetic_placements() {
        let t = Topology::regular(2, 3).unwrap();
        assert_eq!((t.size(), t.nodes(), t.per_node()), (6, 2, Some(3)));
        assert!(t.is_blocked());
        assert_eq!(t.to_string(), "2 nodes × 3 ranks");
        assert_eq!(t, Topology::from_nodes(&[7, 7, 7, 9, 9, 9]).unwrap());
        let irregular = Topology::from_sizes(&[1, 3]).unwrap();
        assert_eq!(irregular.ranks_on(1), &[1, 2, 3]);
        assert_eq!(irregular.to_string(), "0|1,2,3");
        assert_eq!(Topology::flat(3).nodes(), 3);
        assert!(Topology::from_sizes(&[2, 0]).unwrap_err().to_string().contains("node 1 has no ranks"));
        assert!(Topology::regular(0, 4).is_err());
        assert!(Topology::from_node_ids::<&str>(&[]).is_err());
    }

    #[test]
    fn levels_above_nodes_group_nodes() {
        let t = Topology::regular(4, 2).unwrap().with_level("switch", &[0, 0, 1, 1]).unwrap();
        assert_eq!(t.levels().len(), 2);
        assert_eq!(t.levels()[1].members(1), &[2, 3]);
        assert_eq!(t.levels()[1].group_of(3), 1);
        let e = Topology::regular(4, 2).unwrap().with_level("switch", &[0, 1]).unwrap_err();
        assert!(e.to_string().contains("level \"switch\" names the group of 2 members, the level below has 4"), "{e}");
    }
}
