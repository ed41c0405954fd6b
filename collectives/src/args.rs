//! What a collective call is: the operation, this rank's place in the job, the element counts and
//! layout of the user's buffers, the reduction's properties and the algorithm's parameters.
//!
//! All counts, offsets and lengths are in **elements** of the call's datatype; `elem_size` turns
//! them into bytes for the cost model. The buffer conventions per operation (what lives in
//! [`Buf::Send`](crate::schedule::Buf::Send) and [`Buf::Recv`](crate::schedule::Buf::Recv) before
//! and after the call) are in [`Collective`]'s variant docs and in [`CollArgs::send_len`] /
//! [`CollArgs::recv_len`].

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::topology::Topology;

/// The collective operations. Buffer conventions (p ranks, this rank r, `count` = [`CollArgs::count`]):
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    /// No buffers.
    Barrier,
    /// One buffer, `Recv[count]` on every rank; the root's `Recv` holds the data on entry.
    Bcast,
    /// `Send[count]` everywhere; `Recv[count]` on the root only (length 0 elsewhere).
    Reduce,
    /// `Send[count]`, `Recv[count]`.
    Allreduce,
    /// `Send[count]`; root `Recv[p·count]`, block i from rank i.
    Gather,
    /// `Send[counts[r]]`; root `Recv`, block i of `counts[i]` at `displs[i]`.
    Gatherv,
    /// Root `Send[p·count]`, block i to rank i; `Recv[count]`.
    Scatter,
    /// Root `Send`, block i of `counts[i]` at `displs[i]`; `Recv[counts[r]]`.
    Scatterv,
    /// `Send[count]`, `Recv[p·count]`.
    Allgather,
    /// `Send[counts[r]]`, `Recv` with block i of `counts[i]` at `displs[i]`.
    Allgatherv,
    /// `Send[p·count]` (block j goes to rank j), `Recv[p·count]` (block j came from rank j).
    Alltoall,
    /// `counts` is the p×p matrix, `counts[i·p + j]` = elements rank i sends to rank j.
    /// This rank's send block j is at `displs[j]`, its receive block i at `rdispls[i]`.
    Alltoallv,
    /// `Send[Σ counts]`, `Recv[counts[r]]`: block r of the element-wise reduction.
    ReduceScatter,
    /// `Send[p·count]`, `Recv[count]`.
    ReduceScatterBlock,
    /// `Send[count]`, `Recv[count]` = reduction over ranks 0..=r.
    Scan,
    /// `Send[count]`, `Recv[count]` = reduction over ranks 0..r (rank 0's `Recv` is untouched).
    Exscan,
}

impl Collective {
    pub const ALL: [Collective; 16] = [
        Collective::Barrier,
        Collective::Bcast,
        Collective::Reduce,
        Collective::Allreduce,
        Collective::Gather,
        Collective::Gatherv,
        Collective::Scatter,
        Collective::Scatterv,
        Collective::Allgather,
        Collective::Allgatherv,
        Collective::Alltoall,
        Collective::Alltoallv,
        Collective::ReduceScatter,
        Collective::ReduceScatterBlock,
        Collective::Scan,
        Collective::Exscan,
    ];

    /// The lower-case name used by the registry, `FABCOLL_ALGO` and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Barrier => "barrier",
            Collective::Bcast => "bcast",
            Collective::Reduce => "reduce",
            Collective::Allreduce => "allreduce",
            Collective::Gather => "gather",
            Collective::Gatherv => "gatherv",
            Collective::Scatter => "scatter",
            Collective::Scatterv => "scatterv",
            Collective::Allgather => "allgather",
            Collective::Allgatherv => "allgatherv",
            Collective::Alltoall => "alltoall",
            Collective::Alltoallv => "alltoallv",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::ReduceScatterBlock => "reduce_scatter_block",
            Collective::Scan => "scan",
            Collective::Exscan => "exscan",
        }
    }

    pub fn from_name(name: &str) -> Option<Collective> {
        Collective::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether the operation combines data with a reduction op.
    pub fn is_reduction(self) -> bool {
        matches!(
            self,
            Collective::Reduce
                | Collective::Allreduce
                | Collective::ReduceScatter
                | Collective::ReduceScatterBlock
                | Collective::Scan
                | Collective::Exscan
        )
    }

    /// Whether the operation has a root.
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Collective::Bcast
                | Collective::Reduce
                | Collective::Gather
                | Collective::Gatherv
                | Collective::Scatter
                | Collective::Scatterv
        )
    }

    /// Whether the operation takes per-rank `counts` instead of one `count`.
    pub fn is_vector(self) -> bool {
        matches!(
            self,
            Collective::Gatherv
                | Collective::Scatterv
                | Collective::Allgatherv
                | Collective::Alltoallv
                | Collective::ReduceScatter
        )
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Algorithm parameters by name (segment size, radix, number of barriers, …). The registry
/// declares which names an algorithm takes, their ranges and defaults.
#[derive(Clone, Debug, Default, Eq)]
pub struct Params {
    entries: Vec<(String, u64)>,
}

/// Equal when they hold the same entries in the same order. Calls compare their parameters on
/// every repeat (the plan memos): the usual empty sets answer without the slice comparison.
impl PartialEq for Params {
    #[inline]
    fn eq(&self, other: &Params) -> bool {
        (self.entries.is_empty() && other.entries.is_empty()) || self.entries == other.entries
    }
}

impl Params {
    pub fn new() -> Params {
        Params::default()
    }

    /// Sets `name` to `value`, replacing an earlier value.
    pub fn set(&mut self, name: &str, value: u64) -> &mut Params {
        match self.entries.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 = value,
            None => self.entries.push((name.to_owned(), value)),
        }
        self
    }

    pub fn with(mut self, name: &str, value: u64) -> Params {
        self.set(name, value);
        self
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        self.entries.iter().find(|(n, _)| n == name).map(|e| e.1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), *v))
    }
}

/// The name of the generic pipelining parameter that every algorithm accepts: the segment size
/// in elements; 0 or absent means no segmentation. Applied by the registry after the algorithm
/// built its schedule (see [`Schedule::pipeline`](crate::schedule::Schedule::pipeline)).
pub const SEGMENT: &str = "segment";

/// One rank's view of one collective call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollArgs {
    pub coll: Collective,
    /// This rank, `0..size`.
    pub rank: u32,
    /// Number of ranks p ≥ 1.
    pub size: u32,
    /// Root of rooted operations; ignored (0) otherwise.
    pub root: u32,
    /// Elements per rank (per block for alltoall, gather, scatter, allgather,
    /// reduce_scatter_block); unused by the v-variants.
    pub count: u64,
    /// Per-rank counts of the v-variants: length p for gatherv, scatterv, allgatherv and
    /// reduce_scatter; the p×p matrix (row = sender) for alltoallv.
    pub counts: Option<Arc<[u64]>>,
    /// Displacements: of block i in the root's (gatherv, scatterv) or every rank's (allgatherv)
    /// receive/send buffer; this rank's send displacements for alltoallv. `None` = packed.
    pub displs: Option<Arc<[u64]>>,
    /// This rank's receive displacements for alltoallv. `None` = packed.
    pub rdispls: Option<Arc<[u64]>>,
    /// Whether the reduction op is commutative (all built-in ops are).
    pub commutative: bool,
    /// MPI_IN_PLACE: the input is already in `Recv` (see [`CollArgs::in_place_offset`]).
    pub in_place: bool,
    /// Bytes per element, for the cost model only.
    pub elem_size: u32,
    pub params: Params,
    /// Where the ranks sit (`None`: unknown, as if every rank had a node of its own). Flat
    /// algorithms ignore it; hierarchical ones need it.
    pub topology: Option<Arc<Topology>>,
}

impl CollArgs {
    /// A regular (non-v) call with commutative op, not in place, 4-byte elements, no parameters.
    pub fn new(coll: Collective, rank: u32, size: u32, count: u64) -> CollArgs {
        CollArgs {
            coll,
            rank,
            size,
            root: 0,
            count,
            counts: None,
            displs: None,
            rdispls: None,
            commutative: true,
            in_place: false,
            elem_size: 4,
            params: Params::default(),
            topology: None,
        }
    }

    pub fn with_topology(mut self, topology: impl Into<Arc<Topology>>) -> CollArgs {
        self.topology = Some(topology.into());
        self
    }

    pub fn with_root(mut self, root: u32) -> CollArgs {
        self.root = root;
        self
    }

    pub fn with_counts(mut self, counts: impl Into<Arc<[u64]>>) -> CollArgs {
        self.counts = Some(counts.into());
        self
    }

    pub fn with_commutative(mut self, commutative: bool) -> CollArgs {
        self.commutative = commutative;
        self
    }

    pub fn with_param(mut self, name: &str, value: u64) -> CollArgs {
        self.params.set(name, value);
        self
    }

    /// The same call as seen by another rank (the verifier and simulator build every rank's
    /// schedule from one rank's arguments). Per-rank displacements of alltoallv are kept, so use
    /// this only with packed (`None`) alltoallv displacements or set them afterwards.
    pub fn for_rank(&self, rank: u32) -> CollArgs {
        CollArgs { rank, ..self.clone() }
    }

    fn invalid(&self, msg: impl Into<String>) -> Error {
        Error::InvalidArgument { coll: self.coll, msg: msg.into() }
    }

    fn overflow(&self, what: &str) -> Error {
        Error::Overflow { coll: self.coll, what: what.to_owned() }
    }

    pub fn p(&self) -> u64 {
        u64::from(self.size)
    }

    /// Checks ranks, root, counts and displacement lengths and that every size fits in u64.
    pub fn validate(&self) -> Result<()> {
        self.checked_lens().map(|_| ())
    }

    /// [`CollArgs::validate`], returning this rank's ([`send_len`](Self::send_len),
    /// [`recv_len`](Self::recv_len)) that it computes on the way.
    pub fn checked_lens(&self) -> Result<(u64, u64)> {
        // Every call checks its arguments: a well-formed regular call answers without the
        // general path (and its error values) below.
        match self.regular_lens() {
            Some(lens) => Ok(lens),
            None => self.general_lens(),
        }
    }

    /// [`CollArgs::checked_lens`] of any call.
    fn general_lens(&self) -> Result<(u64, u64)> {
        if self.size == 0 {
            return Err(self.invalid("communicator size must be at least 1"));
        }
        if self.rank >= self.size {
            return Err(self.invalid(format!("rank {} out of range 0..{}", self.rank, self.size)));
        }
        if self.coll.is_rooted() && self.root >= self.size {
            return Err(self.invalid(format!("root {} out of range 0..{}", self.root, self.size)));
        }
        if self.elem_size == 0 {
            return Err(self.invalid("element size must be at least 1 byte"));
        }
        let p = self.size as usize;
        if self.coll.is_vector() {
            let want = if self.coll == Collective::Alltoallv { p * p } else { p };
            match &self.counts {
                None => return Err(self.invalid("counts are required")),
                Some(c) if c.len() != want => {
                    return Err(self.invalid(format!("counts has {} entries, expected {want}", c.len())))
                }
                Some(_) => {}
            }
            if let Some(d) = &self.displs {
                if d.len() != p {
                    return Err(self.invalid(format!("displs has {} entries, expected {p}", d.len())));
                }
            }
            if let Some(d) = &self.rdispls {
                if d.len() != p {
                    return Err(self.invalid(format!("rdispls has {} entries, expected {p}", d.len())));
                }
            }
        }
        let lens = (self.send_len()?, self.recv_len()?);
        self.total_count()?;
        Ok(lens)
    }

    /// ([`send_len`](Self::send_len), [`recv_len`](Self::recv_len)) of a valid regular (not v)
    /// call; `None` for the v-variants and for any call [`CollArgs::validate`] would refuse.
    #[inline]
    fn regular_lens(&self) -> Option<(u64, u64)> {
        let valid = self.size > 0
            && self.rank < self.size
            && (self.root < self.size || !self.coll.is_rooted())
            && self.elem_size > 0
            && !self.coll.is_vector();
        let total = self.count.checked_mul(u64::from(self.size)).filter(|_| valid)?;
        let (root, n) = (self.rank == self.root, self.count);
        let on_root = |x: u64| if root { x } else { 0 };
        Some(match self.coll {
            Collective::Barrier => (0, 0),
            Collective::Bcast => (0, n),
            Collective::Allreduce | Collective::Scan | Collective::Exscan => (n, n),
            Collective::Reduce => (n, on_root(n)),
            Collective::Gather => (n, on_root(total)),
            Collective::Allgather => (n, total),
            Collective::Scatter => (on_root(total), n),
            Collective::Alltoall => (total, total),
            Collective::ReduceScatterBlock => (total, n),
            Collective::Gatherv
            | Collective::Scatterv
            | Collective::Allgatherv
            | Collective::Alltoallv
            | Collective::ReduceScatter => return None,
        })
    }

    /// Σ counts of a v-variant (the full matrix sum for alltoallv), or p·count.
    pub fn total_count(&self) -> Result<u64> {
        match &self.counts {
            Some(c) if self.coll.is_vector() => {
                c.iter().try_fold(0u64, |a, &x| a.checked_add(x)).ok_or_else(|| self.overflow("sum of counts"))
            }
            _ => self.count.checked_mul(self.p()).ok_or_else(|| self.overflow("count × p")),
        }
    }

    /// Count of rank i's block in a length-p v-variant (or `count` for regular calls).
    pub fn block_count(&self, i: u32) -> u64 {
        match &self.counts {
            Some(c) if self.coll.is_vector() && self.coll != Collective::Alltoallv => c[i as usize],
            _ => self.count,
        }
    }

    /// Offset of block i in the buffer that `displs` describes (packed when `displs` is None).
    pub fn block_displ(&self, i: u32) -> Result<u64> {
        if let Some(d) = &self.displs {
            return Ok(d[i as usize]);
        }
        match &self.counts {
            Some(c) if self.coll.is_vector() && self.coll != Collective::Alltoallv => c[..i as usize]
                .iter()
                .try_fold(0u64, |a, &x| a.checked_add(x))
                .ok_or_else(|| self.overflow("displacement")),
            _ => self.count.checked_mul(u64::from(i)).ok_or_else(|| self.overflow("displacement")),
        }
    }

    /// alltoallv: elements rank `from` sends to rank `to` (count for alltoall).
    pub fn pair_count(&self, from: u32, to: u32) -> u64 {
        match &self.counts {
            Some(c) if self.coll == Collective::Alltoallv => c[from as usize * self.size as usize + to as usize],
            _ => self.count,
        }
    }

    /// alltoallv: this rank's send displacement of the block for rank `to`.
    pub fn send_displ(&self, to: u32) -> Result<u64> {
        displ_in(&self.displs, to, |j| self.pair_count(self.rank, j)).ok_or_else(|| self.overflow("send displacement"))
    }

    /// alltoallv: this rank's receive displacement of the block from rank `from`.
    pub fn recv_displ(&self, from: u32) -> Result<u64> {
        displ_in(&self.rdispls, from, |i| self.pair_count(i, self.rank))
            .ok_or_else(|| self.overflow("receive displacement"))
    }

    /// Elements in this rank's `Send` buffer.
    pub fn send_len(&self) -> Result<u64> {
        let r = self.rank;
        let is_root = r == self.root;
        Ok(match self.coll {
            Collective::Barrier | Collective::Bcast => 0,
            Collective::Reduce | Collective::Allreduce | Collective::Gather | Collective::Allgather => self.count,
            Collective::Scan | Collective::Exscan => self.count,
            Collective::Gatherv | Collective::Allgatherv => self.block_count(r),
            Collective::Scatter | Collective::Alltoall | Collective::ReduceScatterBlock => {
                if self.coll == Collective::Scatter && !is_root {
                    0
                } else {
                    self.total_count()?
                }
            }
            Collective::Scatterv => {
                if is_root {
                    self.extent_v()?
                } else {
                    0
                }
            }
            Collective::ReduceScatter => self.total_count()?,
            Collective::Alltoallv => self.extent_pairs(true)?,
        })
    }

    /// Elements in this rank's `Recv` buffer.
    pub fn recv_len(&self) -> Result<u64> {
        let r = self.rank;
        let is_root = r == self.root;
        Ok(match self.coll {
            Collective::Barrier => 0,
            Collective::Bcast | Collective::Allreduce | Collective::Scan | Collective::Exscan => self.count,
            Collective::Reduce => {
                if is_root {
                    self.count
                } else {
                    0
                }
            }
            Collective::Gather => {
                if is_root {
                    self.total_count()?
                } else {
                    0
                }
            }
            Collective::Gatherv => {
                if is_root {
                    self.extent_v()?
                } else {
                    0
                }
            }
            Collective::Scatter | Collective::ReduceScatterBlock => self.count,
            Collective::Scatterv | Collective::ReduceScatter => self.block_count(r),
            Collective::Allgather | Collective::Alltoall => self.total_count()?,
            Collective::Allgatherv => self.extent_v()?,
            Collective::Alltoallv => self.extent_pairs(false)?,
        })
    }

    /// Where, under MPI_IN_PLACE, this rank's input lives in `Recv`: `Some(offset)` for the
    /// operations whose input becomes a region of `Recv`, `None` where in-place has no meaning.
    pub fn in_place_offset(&self) -> Result<Option<u64>> {
        Ok(match self.coll {
            Collective::Allreduce | Collective::Scan | Collective::Exscan => Some(0),
            Collective::Reduce if self.rank == self.root => Some(0),
            Collective::Gather | Collective::Gatherv if self.rank == self.root => Some(self.block_displ(self.rank)?),
            Collective::Allgather | Collective::Allgatherv => Some(self.block_displ(self.rank)?),
            Collective::Alltoall => Some(0),
            // In-place reduce_scatter reads the whole vector from a receive buffer that only has
            // room for this rank's block in our buffer convention: not supported (the caller copies).
            _ => None,
        })
    }

    /// `max(displs[i] + counts[i])` of a length-p v-variant.
    fn extent_v(&self) -> Result<u64> {
        if self.displs.is_none() {
            // packed: the blocks end at Σ counts (O(p), where block_displ per block is O(p²))
            return self.total_count();
        }
        let mut end = 0u64;
        for i in 0..self.size {
            let e = self
                .block_displ(i)?
                .checked_add(self.block_count(i))
                .ok_or_else(|| self.overflow("displs + counts"))?;
            end = end.max(e);
        }
        Ok(end)
    }

    /// alltoallv extent of the send (true) or receive (false) buffer.
    fn extent_pairs(&self, send: bool) -> Result<u64> {
        let mut end = 0u64;
        for j in 0..self.size {
            let (d, c) = if send {
                (self.send_displ(j)?, self.pair_count(self.rank, j))
            } else {
                (self.recv_displ(j)?, self.pair_count(j, self.rank))
            };
            end = end.max(d.checked_add(c).ok_or_else(|| self.overflow("displs + counts"))?);
        }
        Ok(end)
    }
}

fn displ_in(displs: &Option<Arc<[u64]>>, i: u32, count: impl Fn(u32) -> u64) -> Option<u64> {
    match displs {
        Some(d) => Some(d[i as usize]),
        None => (0..i).try_fold(0u64, |a, j| a.checked_add(count(j))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut of regular calls agrees with the general checks, errors included.
    #[test]
    fn regular_lens_agree_with_the_general_checks() {
        let mut n = 0;
        for coll in Collective::ALL {
            for size in 0..5u32 {
                for rank in 0..size + 1 {
                    for root in 0..size + 1 {
                        for count in [0u64, 1, 7, u64::MAX / 3] {
                            for elem_size in [0u32, 4] {
                                let mut a = CollArgs::new(coll, rank, size, count);
                                (a.root, a.elem_size) = (root, elem_size);
                                let general = a.general_lens();
                                match a.regular_lens() {
                                    Some(lens) => {
                                        n += 1;
                                        assert_eq!(general.ok(), Some(lens), "{a:?}");
                                    }
                                    None => assert!(coll.is_vector() || general.is_err(), "{a:?}: {general:?}"),
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(n > 1000, "{n} regular cases");
    }
}
