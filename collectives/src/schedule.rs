//! The schedule IR: per rank, a DAG of steps over regions of named buffers.
//!
//! A step is a [`Send`](StepKind::Send), [`Recv`](StepKind::Recv), [`Reduce`](StepKind::Reduce) or
//! [`Copy`](StepKind::Copy) over [`Region`]s of the user's send buffer, the user's receive buffer
//! and scratch buffers whose sizes the schedule declares. Each step names the steps it waits for;
//! deps always point to earlier steps, so step order is a topological order and an executor can
//! issue every step whose deps are done without blocking.
//!
//! **Message matching.** The k-th `Send` (in step order) from rank a to rank b matches the k-th
//! `Recv` (in step order) on rank b from rank a, and both must have the same length. Executors tag
//! messages with that per-pair sequence number, so steps may complete in any order.
//!
//! **Units.** Offsets and lengths are in elements of the call's datatype.
//!
//! **Compactness.** A step is 48 bytes and deps live in one shared `Vec<u32>`, so one rank's ring
//! allreduce at p = 65,536 (≈ 4p steps) is ≈ 13 MB and generated in milliseconds.

use std::fmt;

use crate::args::CollArgs;
use crate::error::{Error, Result};

/// A named buffer of one rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The user's send (input) buffer. Steps only read it.
    Send,
    /// The user's receive (output) buffer.
    Recv,
    /// Scratch buffer i, of the length the schedule declares in [`Schedule::scratch`].
    Scratch(u16),
}

/// `len` elements of `buf` starting at element `off`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    pub buf: Buf,
    pub off: u64,
    pub len: u64,
}

impl Region {
    pub const fn new(buf: Buf, off: u64, len: u64) -> Region {
        Region { buf, off, len }
    }

    pub fn end(&self) -> u64 {
        self.off + self.len
    }

    /// Whether the two regions share at least one element.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.buf == other.buf && self.off < other.end() && other.off < self.end() && self.len > 0 && other.len > 0
    }

    /// The sub-region `[start, start + len)` relative to this region's start.
    pub fn sub(&self, start: u64, len: u64) -> Region {
        debug_assert!(start + len <= self.len);
        Region { buf: self.buf, off: self.off + start, len }
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = match self.buf {
            Buf::Send => "send".to_string(),
            Buf::Recv => "recv".to_string(),
            Buf::Scratch(i) => format!("tmp{i}"),
        };
        write!(f, "{b}[{}..{}]", self.off, self.end())
    }
}

/// Operand order of a reduction step, which matters for non-commutative ops.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// `dst ← src ⊕ dst`: the source holds contributions of lower ranks.
    SrcFirst,
    /// `dst ← dst ⊕ src`: the destination holds contributions of lower ranks.
    DstFirst,
}

/// What a step does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// Send `src` to `peer`.
    Send { peer: u32, src: Region },
    /// Receive from `peer` into `dst`.
    Recv { peer: u32, dst: Region },
    /// Combine `src` into `dst` element-wise (same lengths), in the given operand order.
    Reduce { src: Region, dst: Region, order: Order },
    /// Copy `src` to `dst` (same lengths, no overlap).
    Copy { src: Region, dst: Region },
}

impl StepKind {
    /// The region the step reads, if any (for Reduce: `src`; `dst` is read and written).
    pub fn reads(&self) -> Option<Region> {
        match *self {
            StepKind::Send { src, .. } | StepKind::Reduce { src, .. } | StepKind::Copy { src, .. } => Some(src),
            StepKind::Recv { .. } => None,
        }
    }

    /// The region the step writes, if any.
    pub fn writes(&self) -> Option<Region> {
        match *self {
            StepKind::Recv { dst, .. } | StepKind::Reduce { dst, .. } | StepKind::Copy { dst, .. } => Some(dst),
            StepKind::Send { .. } => None,
        }
    }

    /// Elements moved or combined by the step.
    pub fn len(&self) -> u64 {
        match *self {
            StepKind::Send { src, .. } => src.len,
            StepKind::Recv { dst, .. } => dst.len,
            StepKind::Reduce { dst, .. } | StepKind::Copy { dst, .. } => dst.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map_regions(&self, mut f: impl FnMut(Region) -> Region) -> StepKind {
        match *self {
            StepKind::Send { peer, src } => StepKind::Send { peer, src: f(src) },
            StepKind::Recv { peer, dst } => StepKind::Recv { peer, dst: f(dst) },
            StepKind::Reduce { src, dst, order } => StepKind::Reduce { src: f(src), dst: f(dst), order },
            StepKind::Copy { src, dst } => StepKind::Copy { src: f(src), dst: f(dst) },
        }
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepKind::Send { peer, src } => write!(f, "send {src} -> {peer}"),
            StepKind::Recv { peer, dst } => write!(f, "recv {dst} <- {peer}"),
            StepKind::Reduce { src, dst, order } => write!(f, "reduce {src} into {dst} ({order:?})"),
            StepKind::Copy { src, dst } => write!(f, "copy {src} -> {dst}"),
        }
    }
}

/// Index of a step in its schedule.
pub type StepId = u32;

/// One step and the range of its deps in [`Schedule`]'s shared dep list.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    deps_start: u32,
    deps_len: u32,
}

/// One rank's schedule of one collective call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub rank: u32,
    pub size: u32,
    /// Lengths (elements) of the scratch buffers `Buf::Scratch(0..)`.
    pub scratch: Vec<u64>,
    steps: Vec<Step>,
    deps: Vec<StepId>,
}

impl Schedule {
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    pub fn step(&self, id: StepId) -> &StepKind {
        &self.steps[id as usize].kind
    }

    /// The steps that step `id` waits for (all earlier than `id`).
    pub fn deps(&self, id: StepId) -> &[StepId] {
        let s = &self.steps[id as usize];
        &self.deps[s.deps_start as usize..(s.deps_start + s.deps_len) as usize]
    }

    /// `(id, kind, deps)` of every step in order.
    pub fn iter(&self) -> impl Iterator<Item = (StepId, &StepKind, &[StepId])> + '_ {
        (0..self.steps.len() as StepId).map(move |i| (i, self.step(i), self.deps(i)))
    }

    /// Total elements of scratch space.
    pub fn scratch_total(&self) -> u64 {
        self.scratch.iter().sum()
    }

    /// Splits every step longer than `seg` elements into pieces of at most `seg` elements so that
    /// long messages are pipelined: piece j of a step waits only for the pieces of its deps whose
    /// regions overlap piece j's regions (or for all pieces of a dep it shares no data with, an
    /// ordering-only dep). Send and Recv are split by message-relative offsets, so matching
    /// messages split identically and per-pair order is kept. `seg == 0` leaves it unchanged.
    pub fn pipeline(&self, seg: u64) -> Schedule {
        if seg == 0 || self.steps.iter().all(|s| s.kind.len() <= seg) {
            return self.clone();
        }
        // Piece-level deps keep only orders between overlapping data, so an order between two
        // conflicting steps that held only transitively (through a step on other data) would be
        // lost: make every such order a direct dep first.
        let src = self.with_conflict_deps();
        let mut b = ScheduleBuilder::new(self.rank, self.size);
        b.scratch = src.scratch.clone();
        // first[i] = id of step i's first piece; pieces of step i are first[i]..first[i] + n(i).
        let mut first: Vec<StepId> = Vec::with_capacity(src.steps.len());
        let pieces = |k: &StepKind| k.len().div_ceil(seg).max(1);
        let mut deps: Vec<StepId> = Vec::new();
        for (i, kind, ideps) in src.iter() {
            let n = pieces(kind);
            first.push(b.steps.len() as StepId);
            for j in 0..n {
                let start = j * seg;
                let len = seg.min(kind.len() - start.min(kind.len()));
                let piece = kind.map_regions(|r| r.sub(start, len));
                deps.clear();
                for &d in ideps {
                    let dk = src.step(d);
                    let dn = pieces(dk);
                    let d0 = first[d as usize];
                    let mut any = false;
                    for pr in [piece.reads(), piece.writes()].into_iter().flatten() {
                        for dr in [dk.reads(), dk.writes()].into_iter().flatten() {
                            if !pr.overlaps(&dr) {
                                continue;
                            }
                            any = true;
                            let lo = pr.off.max(dr.off) - dr.off;
                            let hi = pr.end().min(dr.end()) - dr.off;
                            for q in lo / seg..=(hi - 1) / seg {
                                deps.push(d0 + q as StepId);
                            }
                        }
                    }
                    if !any {
                        // An order between unrelated data (e.g. message order) needs all of `d`.
                        // Only the first piece waits for every piece of `d`; the others wait for
                        // that first piece, so the deps stay linear in the pieces (n + dn, not
                        // n × dn: a small segment must not make the schedule quadratic).
                        if j == 0 || dn == 1 {
                            deps.extend(d0..d0 + dn as StepId);
                        } else {
                            deps.push(first[i as usize]);
                        }
                    }
                }
                deps.sort_unstable();
                deps.dedup();
                b.push(piece, &deps);
            }
        }
        b.finish()
    }

    /// The same schedule where every step depends directly on each earlier step it conflicts with
    /// (one of the two writes what the other reads or writes). In a race-free schedule these
    /// orders already hold through the DAG, so this adds no constraint; it makes them survive
    /// [`Schedule::pipeline`]'s piece-level deps. Tracks per buffer the accesses not yet covered by
    /// a later write.
    pub fn with_conflict_deps(&self) -> Schedule {
        let mut b = ScheduleBuilder::new(self.rank, self.size);
        b.scratch = self.scratch.clone();
        // (region, step, whether the step writes it)
        let mut live: Vec<(Region, StepId, bool)> = Vec::new();
        let mut deps: Vec<StepId> = Vec::new();
        for (id, kind, ideps) in self.iter() {
            let (r, w) = (kind.reads(), kind.writes());
            deps.clear();
            deps.extend_from_slice(ideps);
            for &(reg, sid, wrote) in &live {
                let write_hits = w.is_some_and(|w| w.overlaps(&reg));
                let read_hits_write = wrote && r.is_some_and(|r| r.overlaps(&reg));
                if write_hits || read_hits_write {
                    deps.push(sid);
                }
            }
            deps.sort_unstable();
            deps.dedup();
            let nid = b.push(*kind, &deps);
            debug_assert_eq!(nid, id);
            if let Some(w) = w {
                live.retain(|(reg, _, _)| !(reg.buf == w.buf && reg.off >= w.off && reg.end() <= w.end()));
                live.push((w, id, true));
            }
            if let Some(r) = r {
                live.push((r, id, false));
            }
        }
        b.finish()
    }

    /// `calls` runs of this schedule one after another, as a program calling the collective in a
    /// loop runs them: a run's steps without deps wait for every step of the run before (its last
    /// steps, which nothing in it waits for), so a rank starts its next call once its own part of
    /// the last one is done, while other ranks may still be in it. Messages keep their per-peer
    /// order, so the runs' sends and receives match run by run. The simulator replays this to
    /// time calls back to back (what mpibench and `fabcoll bench --sync none` measure), where the
    /// busiest rank's sends set the pace rather than the longest path. `calls` ≤ 1: a copy.
    pub fn back_to_back(&self, calls: usize) -> Schedule {
        let n = self.steps.len() as StepId;
        let mut waited = vec![false; n as usize];
        for (_, _, ds) in self.iter() {
            ds.iter().for_each(|&d| waited[d as usize] = true);
        }
        let last: Vec<StepId> = (0..n).filter(|&i| !waited[i as usize]).collect();
        let mut b = ScheduleBuilder::new(self.rank, self.size);
        b.scratch = self.scratch.clone();
        let mut deps = Vec::new();
        for run in 0..calls.max(1) as StepId {
            let base = run * n;
            for (_, kind, ds) in self.iter() {
                deps.clear();
                if ds.is_empty() && run > 0 {
                    deps.extend(last.iter().map(|&l| base - n + l));
                }
                deps.extend(ds.iter().map(|&d| base + d));
                b.push(*kind, &deps);
            }
        }
        b.finish()
    }

    /// The MPI_IN_PLACE form of this schedule: every `Send` region becomes the `Recv` region at
    /// `offset` + its offset, and copies that became no-ops are dropped (their dependents inherit
    /// their deps). Whether the result is still correct is the algorithm's business; the verifier
    /// checks it.
    pub fn in_place(&self, offset: u64) -> Schedule {
        let map =
            |r: Region| if r.buf == Buf::Send { Region { buf: Buf::Recv, off: r.off + offset, len: r.len } } else { r };
        let mut b = ScheduleBuilder::new(self.rank, self.size);
        b.scratch = self.scratch.clone();
        // new_ids[i]: the steps that stand for old step i (itself, or a dropped copy's deps).
        let mut new_ids: Vec<Vec<StepId>> = Vec::with_capacity(self.steps.len());
        for (_, kind, ideps) in self.iter() {
            let k = kind.map_regions(map);
            let mut deps: Vec<StepId> = ideps.iter().flat_map(|&d| new_ids[d as usize].iter().copied()).collect();
            deps.sort_unstable();
            deps.dedup();
            match k {
                StepKind::Copy { src, dst } if src == dst => new_ids.push(deps),
                _ => new_ids.push(vec![b.push(k, &deps)]),
            }
        }
        b.finish()
    }
}

/// Builds a [`Schedule`] step by step.
#[derive(Clone, Debug)]
pub struct ScheduleBuilder {
    rank: u32,
    size: u32,
    scratch: Vec<u64>,
    steps: Vec<Step>,
    deps: Vec<StepId>,
}

impl ScheduleBuilder {
    pub fn new(rank: u32, size: u32) -> ScheduleBuilder {
        ScheduleBuilder { rank, size, scratch: Vec::new(), steps: Vec::new(), deps: Vec::new() }
    }

    /// A builder for `args`'s rank and size.
    pub fn for_args(args: &CollArgs) -> ScheduleBuilder {
        ScheduleBuilder::new(args.rank, args.size)
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Steps so far.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Declares a scratch buffer of `len` elements and returns its name.
    pub fn scratch(&mut self, len: u64) -> Buf {
        let i = self.scratch.len();
        assert!(i < u16::MAX as usize, "more than 65,535 scratch buffers");
        self.scratch.push(len);
        Buf::Scratch(i as u16)
    }

    /// Appends a step that waits for `deps` (earlier steps) and returns its id.
    pub fn push(&mut self, kind: StepKind, deps: &[StepId]) -> StepId {
        let id = self.steps.len() as StepId;
        debug_assert!(deps.iter().all(|&d| d < id), "deps must point to earlier steps");
        let deps_start = self.deps.len() as u32;
        self.deps.extend_from_slice(deps);
        self.steps.push(Step { kind, deps_start, deps_len: deps.len() as u32 });
        id
    }

    pub fn send(&mut self, peer: u32, src: Region, deps: &[StepId]) -> StepId {
        self.push(StepKind::Send { peer, src }, deps)
    }

    pub fn recv(&mut self, peer: u32, dst: Region, deps: &[StepId]) -> StepId {
        self.push(StepKind::Recv { peer, dst }, deps)
    }

    pub fn reduce(&mut self, src: Region, dst: Region, order: Order, deps: &[StepId]) -> StepId {
        self.push(StepKind::Reduce { src, dst, order }, deps)
    }

    pub fn copy(&mut self, src: Region, dst: Region, deps: &[StepId]) -> StepId {
        self.push(StepKind::Copy { src, dst }, deps)
    }

    pub fn finish(self) -> Schedule {
        Schedule { rank: self.rank, size: self.size, scratch: self.scratch, steps: self.steps, deps: self.deps }
    }
}

/// Checks the structural invariants a schedule must hold on its own (no other rank needed):
/// regions inside their buffers, equal lengths for Reduce/Copy, no overlapping Copy, peers in
/// range and not self, deps earlier than the step. `send_len`/`recv_len` are the user buffers'
/// lengths in elements.
pub fn check_bounds(s: &Schedule, send_len: u64, recv_len: u64) -> Result<()> {
    let buf_len = |b: Buf| match b {
        Buf::Send => Some(send_len),
        Buf::Recv => Some(recv_len),
        Buf::Scratch(i) => s.scratch.get(i as usize).copied(),
    };
    let bad = |id: StepId, k: &StepKind, msg: &str| Error::Verify(format!("rank {} step {id} ({k}): {msg}", s.rank));
    for (id, k, deps) in s.iter() {
        if deps.iter().any(|&d| d >= id) {
            return Err(bad(id, k, "depends on a later step"));
        }
        for r in [k.reads(), k.writes()].into_iter().flatten() {
            match buf_len(r.buf) {
                None => return Err(bad(id, k, "undeclared scratch buffer")),
                Some(l) if r.off.checked_add(r.len).is_none_or(|e| e > l) => {
                    return Err(bad(id, k, &format!("region outside its buffer of {l} elements")))
                }
                _ => {}
            }
        }
        if let Some(w) = k.writes() {
            if w.buf == Buf::Send {
                return Err(bad(id, k, "writes the send buffer"));
            }
        }
        match *k {
            StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => {
                if peer >= s.size || peer == s.rank {
                    return Err(bad(id, k, "peer out of range or self"));
                }
            }
            StepKind::Reduce { src, dst, .. } | StepKind::Copy { src, dst } => {
                if src.len != dst.len {
                    return Err(bad(id, k, "source and destination lengths differ"));
                }
                if src.overlaps(&dst) {
                    return Err(bad(id, k, "source and destination overlap"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_is_compact() {
        assert!(std::mem::size_of::<Step>() <= 64, "{}", std::mem::size_of::<Step>());
    }

    #[test]
    fn back_to_back_runs_wait_for_the_last_steps_of_the_run_before() {
        // recv 0 -> send 1, and an independent send 2: the last steps are 1 and 2.
        let mut b = ScheduleBuilder::new(0, 3);
        let r = b.recv(1, Region::new(Buf::Recv, 0, 4), &[]);
        b.send(2, Region::new(Buf::Recv, 0, 4), &[r]);
        b.send(1, Region::new(Buf::Send, 0, 4), &[]);
        let one = b.finish();
        let s = one.back_to_back(3);
        assert_eq!(s.len(), 9);
        assert_eq!(s.deps(3), &[1, 2]);
        assert_eq!(s.deps(4), &[3]);
        assert_eq!(s.deps(5), &[1, 2]);
        assert_eq!(s.deps(8), &[4, 5]);
        assert_eq!(
            (0..9).map(|i| *s.step(i)).collect::<Vec<_>>()[6..],
            one.steps().iter().map(|t| t.kind).collect::<Vec<_>>()[..]
        );
        assert_eq!(one.back_to_back(0), one);
    }

    #[test]
    fn pipeline_splits_matching_messages_and_chains_pieces() {
        let mut b = ScheduleBuilder::new(0, 2);
        let t = b.scratch(10);
        let r = b.recv(1, Region::new(t, 0, 10), &[]);
        let red = b.reduce(Region::new(t, 0, 10), Region::new(Buf::Recv, 0, 10), Order::SrcFirst, &[r]);
        b.send(1, Region::new(Buf::Recv, 0, 10), &[red]);
        let s = b.finish().pipeline(4);
        assert_eq!(s.len(), 9);
        // reduce piece 1 (elements 4..8) waits for recv piece 1 only
        assert_eq!(s.deps(4), &[1]);
        // send piece 2 waits for reduce piece 2 only
        assert_eq!(s.deps(8), &[5]);
        assert_eq!(s.step(2).len(), 2);
    }

    #[test]
    fn pipeline_keeps_transitive_conflict_orders() {
        // step 0 reads recv[0..8] (send), step 1 writes tmp (recv, after 0), step 2 overwrites
        // recv[0..8] after 1 only: its order after step 0 holds only through step 1, whose data
        // does not overlap. Every piece of step 2 must still wait for the overlapping piece of 0.
        let mut b = ScheduleBuilder::new(0, 2);
        let t = b.scratch(8);
        let s0 = b.send(1, Region::new(Buf::Recv, 0, 8), &[]);
        let s1 = b.recv(1, Region::new(t, 0, 4), &[s0]);
        b.copy(Region::new(t, 0, 8), Region::new(Buf::Recv, 0, 8), &[s1]);
        let s = b.finish().pipeline(4);
        // pieces: send 0,1; recv 2; copy 3,4
        assert!(s.deps(3).contains(&0), "{:?}", s.deps(3));
        assert!(s.deps(4).contains(&1), "{:?}", s.deps(4));
    }

    #[test]
    fn pipeline_orders_on_unrelated_data_stay_linear() {
        // A send of recv[100..200] ordered after a receive into recv[0..100] (message order, no
        // shared data): with segment 1, only the send's first piece may wait for all 100 pieces
        // of the receive; the others wait for that first piece. Quadratic deps here once made a
        // random verifier case (p = 40, count 300, segment 1) take 22 GB.
        let mut b = ScheduleBuilder::new(0, 2);
        let r = b.recv(1, Region::new(Buf::Recv, 0, 100), &[]);
        b.send(1, Region::new(Buf::Recv, 100, 100), &[r]);
        let s = b.finish().pipeline(1);
        assert_eq!(s.len(), 200);
        assert_eq!(s.deps(100), (0..100).collect::<Vec<StepId>>().as_slice());
        for j in 101..200 {
            assert_eq!(s.deps(j), &[100], "piece {j}");
        }
    }

    #[test]
    fn in_place_drops_identity_copy_and_keeps_order() {
        let mut b = ScheduleBuilder::new(0, 2);
        let c = b.copy(Region::new(Buf::Send, 0, 4), Region::new(Buf::Recv, 0, 4), &[]);
        b.send(1, Region::new(Buf::Recv, 0, 4), &[c]);
        let s = b.finish().in_place(0);
        assert_eq!(s.len(), 1);
        assert!(s.deps(0).is_empty());
    }

    #[test]
    fn bounds_are_checked() {
        let mut b = ScheduleBuilder::new(0, 2);
        b.send(1, Region::new(Buf::Send, 2, 4), &[]);
        let s = b.finish();
        assert!(check_bounds(&s, 6, 0).is_ok());
        assert!(check_bounds(&s, 5, 0).is_err());
    }
}
