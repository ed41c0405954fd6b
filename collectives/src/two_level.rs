//! Two-level schedules: a hierarchical algorithm is a chain of phases, each a flat algorithm run
//! among a subset of the ranks (the ranks of one node; one leader per node). A phase is built
//! as that flat algorithm's schedule for the rank's position in the group and then embedded in
//! the rank's schedule: peers map from group positions to communicator ranks, the phase's
//! `Send` and `Recv` to places in this rank's buffers, its scratch buffers to new scratch, and
//! its first steps wait for the steps the previous phase ended with (Mamidala et al. 2008 §4,
//! `../shared/papers/mamidala-2008-multicore-collectives.txt`: leader-based designs).
//!
//! Reusing the flat schedules keeps one implementation of each pattern, verified once, and makes
//! the inter-node traffic of a hierarchical algorithm exactly that of its inter-node phase.

use crate::args::{CollArgs, Collective, SEGMENT};
use crate::cost::{ceil_log2, Cost};
use crate::error::{Error, Result};
use crate::registry::{self, Algorithm};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId, StepKind};
use crate::topology::Topology;

/// Where a phase's `Send` or `Recv` buffer starts in this rank's buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub buf: Buf,
    pub off: u64,
}

impl Place {
    pub const fn new(buf: Buf, off: u64) -> Place {
        Place { buf, off }
    }

    /// `len` elements from `off` elements past this place.
    pub fn region(&self, off: u64, len: u64) -> Region {
        Region::new(self.buf, self.off + off, len)
    }
}

/// The steps one embedded phase added (a phase that added none hands on its entry steps).
#[derive(Clone, Debug, Default)]
pub(crate) struct Phase {
    /// Steps nothing else in the phase waits for: when all are done, the phase is.
    pub sinks: Vec<StepId>,
    /// Steps that write (receives, reductions, copies): a next phase that only reads what this one
    /// wrote, and writes nothing this one reads, may wait for these alone.
    pub writers: Vec<StepId>,
}

/// A flat call on a group of ranks, one phase of a hierarchical algorithm: the flat algorithm
/// `alg` for the call `sub`, whose `rank` and `size` are this rank's position in `ranks` and
/// their number.
pub(crate) struct GroupCall<'a> {
    pub alg: &'a Algorithm,
    pub sub: CollArgs,
    pub ranks: &'a [u32],
}

impl GroupCall<'_> {
    /// Appends the phase to `b`; its first steps wait for `entry`.
    pub fn embed(&self, b: &mut ScheduleBuilder, send: Place, recv: Place, entry: &[StepId]) -> Result<Phase> {
        let s = self.alg.schedule(&self.sub)?;
        if s.size as usize != self.ranks.len() || s.rank >= s.size {
            return Err(Error::Verify(format!(
                "{}:{} phase for position {} of {} on a group of {} ranks",
                self.alg.coll,
                self.alg.name,
                s.rank,
                s.size,
                self.ranks.len()
            )));
        }
        let scratch: Vec<Buf> = s.scratch.iter().map(|&len| b.scratch(len)).collect();
        let map = |r: Region| match r.buf {
            Buf::Send => send.region(r.off, r.len),
            Buf::Recv => recv.region(r.off, r.len),
            Buf::Scratch(i) => Region { buf: scratch[i as usize], ..r },
        };
        let first = b.len() as StepId;
        let mut waited = vec![false; s.len()];
        let mut writers = Vec::new();
        let mut deps = Vec::new();
        for (id, kind, sdeps) in s.iter() {
            let kind = match *kind {
                StepKind::Send { peer, src } => StepKind::Send { peer: self.ranks[peer as usize], src: map(src) },
                StepKind::Recv { peer, dst } => StepKind::Recv { peer: self.ranks[peer as usize], dst: map(dst) },
                StepKind::Reduce { src, dst, order } => StepKind::Reduce { src: map(src), dst: map(dst), order },
                StepKind::Copy { src, dst } => StepKind::Copy { src: map(src), dst: map(dst) },
            };
            deps.clear();
            if sdeps.is_empty() {
                deps.extend_from_slice(entry);
            }
            for &d in sdeps {
                waited[d as usize] = true;
                deps.push(first + d);
            }
            let nid = b.push(kind, &deps);
            debug_assert_eq!(nid, first + id);
            if kind.writes().is_some() {
                writers.push(nid);
            }
        }
        if s.is_empty() {
            // A phase with nothing to do (an empty slice) passes on what it would have waited for.
            return Ok(Phase { sinks: entry.to_vec(), writers: entry.to_vec() });
        }
        let sinks = (0..s.len() as StepId).filter(|&i| !waited[i as usize]).map(|i| first + i).collect();
        Ok(Phase { sinks, writers })
    }
}

/// The piece a large block of a hierarchical algorithm is forwarded in by default (Mamidala §4:
/// the intra-node copy pipelined with the network phase).
pub(crate) const PIECE_BYTES: u64 = 64 << 10;

/// The schedule of `b` with its steps cut into pieces of [`PIECE_BYTES`] when its largest block
/// (`largest` elements) is above two pieces, unless the call sets a `segment` of its own.
pub(crate) fn in_pieces(a: &CollArgs, b: ScheduleBuilder, largest: u64) -> Schedule {
    let piece = (PIECE_BYTES / u64::from(a.elem_size.max(1))).max(1);
    match a.params.get(SEGMENT) {
        None if largest > 2 * piece => b.finish().pipeline(piece),
        _ => b.finish(),
    }
}

/// The call's topology; the registry's two-level restriction has already checked it.
pub(crate) fn topology(a: &CollArgs) -> Result<&Topology> {
    a.topology.as_deref().ok_or_else(|| Error::InvalidArgument {
        coll: a.coll,
        msg: "a hierarchical algorithm needs the call's topology".into(),
    })
}

/// (nodes, most ranks on a node) of the call's topology, for cost formulas; (p, 1) without one.
pub(crate) fn shape(a: &CollArgs) -> (u64, u64) {
    match a.topology.as_deref() {
        Some(t) => (u64::from(t.nodes()), (0..t.nodes()).map(|n| t.ranks_on(n).len() as u64).max().unwrap_or(1)),
        None => (a.p(), 1),
    }
}

/// Cost of the leader-based gather and scatter (the same messages in opposite directions; their
/// module docs give the formula): ⌈lg k⌉ + ⌈lg N⌉ messages, (k − 1) blocks inside the node and
/// the p − k_root blocks of the other nodes through the root.
pub(crate) fn rooted_blocks_cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (nodes, k) = shape(a);
    let k_root = a.topology.as_deref().map_or(1, |t| u64::from(t.local_size(a.root)));
    let alpha = f64::from(ceil_log2(k) + ceil_log2(nodes));
    Cost::new(alpha, (k - 1) as f64 * n + (a.p() - k_root) as f64 * n, 0.0)
}

/// The registry row of a flat algorithm a phase runs.
pub(crate) fn flat(coll: Collective, name: &str) -> Result<&'static Algorithm> {
    registry::find(coll, name)
}

/// The call `coll` of `count` elements at position `pos` of a group of `m` ranks rooted at
/// position `root`, with `a`'s op properties and element size (no topology, no parameters).
pub(crate) fn sub_args(a: &CollArgs, coll: Collective, pos: u32, m: u32, root: u32, count: u64) -> CollArgs {
    let mut s = CollArgs::new(coll, pos, m, count).with_root(root).with_commutative(a.commutative);
    s.elem_size = a.elem_size;
    s
}

/// Position of `r` in `ranks` (a group this rank built, so `r` is in it).
pub(crate) fn position(ranks: &[u32], r: u32) -> Result<u32> {
    ranks.iter().position(|&x| x == r).map(|i| i as u32).ok_or_else(|| {
        Error::Verify(format!("rank {r} is not in the group {ranks:?} that a hierarchical phase runs on"))
    })
}

/// Copies between a node-ordered buffer (rank `t.node_order()[i]`'s block of `count` elements at
/// position i) and a rank-ordered one (rank r's block at r), in runs of consecutive ranks:
/// `to_ranks` copies node order → rank order, else the reverse. Returns the copies.
pub(crate) fn reorder(
    b: &mut ScheduleBuilder,
    t: &Topology,
    count: u64,
    node_ordered: Place,
    rank_ordered: Place,
    to_ranks: bool,
    deps: &[StepId],
) -> Vec<StepId> {
    let order = t.node_order();
    let mut ids = Vec::new();
    if count == 0 {
        return ids;
    }
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && order[j] == order[j - 1] + 1 {
            j += 1;
        }
        let len = (j - i) as u64 * count;
        let node = node_ordered.region(i as u64 * count, len);
        let rank = rank_ordered.region(u64::from(order[i]) * count, len);
        let (src, dst) = if to_ranks { (node, rank) } else { (rank, node) };
        ids.push(b.copy(src, dst, deps));
        i = j;
    }
    ids
}

/// Every step in `lists`, once.
pub(crate) fn union(lists: &[&[StepId]]) -> Vec<StepId> {
    let mut v: Vec<StepId> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `a` placed on two nodes of p/2 ranks when `alg` is hierarchical and p is even, so that the
/// tests over every registry row also run the hierarchical ones; `a` unchanged otherwise.
#[cfg(test)]
pub(crate) fn test_placement(alg: &Algorithm, a: CollArgs) -> CollArgs {
    match Topology::regular(2, a.size / 2) {
        Ok(t) if alg.restrictions.two_level && a.size.is_multiple_of(2) => a.with_topology(t),
        _ => a,
    }
}

#[cfg(test)]
mod tests;
