//! Phases shared by the reduction algorithms (reduce, allreduce, reduce_scatter): the
//! non-power-of-two fold of thakur §4.4/§5.1, recursive vector halving (reduce-scatter), recursive
//! vector doubling (allgather or binomial gather), ring and pairwise reduce-scatter, ring allgather,
//! binomial reduce and binomial bcast. Each appends steps to a [`ScheduleBuilder`] after `deps`
//! and returns the steps that later phases must wait for. Zero-length messages are never emitted
//! (both sides compute the same length, so both skip them).

use crate::args::CollArgs;
use crate::blocks;
use crate::schedule::{Buf, Order, Region, ScheduleBuilder, StepId};

/// Segments of a vector: `(offset, len)` in elements, ascending and contiguous.
pub(crate) type Segs = Vec<(u64, u64)>;

/// The `n` near-equal blocks of a `count`-element vector (crate::blocks).
pub(crate) fn even_segs(count: u64, n: u32) -> Segs {
    (0..u64::from(n)).map(|i| blocks::block(count, u64::from(n), i)).collect()
}

/// The p packed input blocks of a reduce_scatter(_block) call (`counts[i]`, or `count` each).
pub(crate) fn input_segs(a: &CollArgs) -> Segs {
    let mut off = 0;
    (0..a.size)
        .map(|i| {
            let c = a.block_count(i);
            off += c;
            (off - c, c)
        })
        .collect()
}

/// Offset and total length of segments `lo..hi`.
pub(crate) fn span(segs: &[(u64, u64)], lo: usize, hi: usize) -> (u64, u64) {
    if lo >= hi {
        return (segs.get(lo).map_or(0, |s| s.0), 0);
    }
    let off = segs[lo].0;
    (off, segs[hi - 1].0 + segs[hi - 1].1 - off)
}

/// `Region` of segments `lo..hi` of `buf`.
pub(crate) fn seg_region(buf: Buf, segs: &[(u64, u64)], lo: usize, hi: usize) -> Region {
    let (off, len) = span(segs, lo, hi);
    Region::new(buf, off, len)
}

/// Bit reversal of `x` within `bits` bits.
pub(crate) fn bitrev(x: u32, bits: u32) -> u32 {
    if bits == 0 {
        0
    } else {
        x.reverse_bits() >> (32 - bits)
    }
}

/// Sorted, deduplicated union of step lists.
pub(crate) fn union(lists: &[&[StepId]]) -> Vec<StepId> {
    let mut v: Vec<StepId> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Appends a send unless `src` is empty.
pub(crate) fn send(b: &mut ScheduleBuilder, peer: u32, src: Region, deps: &[StepId]) -> Option<StepId> {
    (src.len > 0).then(|| b.send(peer, src, deps))
}

/// Appends a receive unless `dst` is empty.
pub(crate) fn recv(b: &mut ScheduleBuilder, peer: u32, dst: Region, deps: &[StepId]) -> Option<StepId> {
    (dst.len > 0).then(|| b.recv(peer, dst, deps))
}

/// Appends a copy unless empty or the identity.
pub(crate) fn copy(b: &mut ScheduleBuilder, src: Region, dst: Region, deps: &[StepId]) -> Option<StepId> {
    (src.len > 0 && src != dst).then(|| b.copy(src, dst, deps))
}

/// `deps` if `out` is empty, else `out`.
fn or_deps(out: Vec<StepId>, deps: &[StepId]) -> Vec<StepId> {
    if out.is_empty() {
        deps.to_vec()
    } else {
        out
    }
}

/// One exchange-and-reduce: send `give` to `peer`, receive into `tmp`, combine `tmp` into `dst`.
pub(crate) fn exchange_reduce(
    b: &mut ScheduleBuilder,
    peer: u32,
    give: Region,
    tmp: Region,
    dst: Region,
    order: Order,
    deps: &[StepId],
) -> Vec<StepId> {
    let mut out: Vec<StepId> = send(b, peer, give, deps).into_iter().collect();
    if let Some(r) = recv(b, peer, tmp, deps) {
        let d = union(&[&[r], &out]);
        out.push(b.reduce(tmp, dst, order, &d));
    }
    or_deps(out, deps)
}

/// The partner masks 1, 2, …, p'/2 of the vector-halving reduce-scatter: distance doubling
/// (thakur §5.1) keeps every partial a contiguous range of ranks, so it is correct for
/// non-commutative ops (halving the distance, thakur §4.4, would not be); new rank i ends with
/// segment `bitrev(i)`.
pub(crate) fn masks(pof2: u32) -> Vec<u32> {
    (0..pof2.trailing_zeros()).map(|k| 1u32 << k).collect()
}

/// Reduction of p ranks to p' = 2^⌊lg p⌋ by pairing ranks 2i and 2i+1 for i < r = p − p'
/// (thakur §4.4, §5.1). One rank of each pair (the survivor) takes part in the power-of-two
/// algorithm as new rank i; ranks ≥ 2r become new rank rank − r. Every new rank stands for a
/// contiguous range of old ranks, so rank order is kept.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Fold {
    pub pof2: u32,
    pub rem: u32,
    odd_survives: bool,
    /// A pair whose survivor is the other member (a root among the removed ranks).
    flipped: Option<u32>,
}

impl Fold {
    pub(crate) fn new(p: u32, odd_survives: bool) -> Fold {
        let pof2 = 1u32 << (31 - p.max(1).leading_zeros());
        Fold { pof2, rem: p - pof2, odd_survives, flipped: None }
    }

    /// The same fold with `root` guaranteed to survive (thakur §5.1, roles interchanged).
    pub(crate) fn keeping(mut self, root: u32) -> Fold {
        if root < 2 * self.rem && self.survivor(root / 2) != root {
            self.flipped = Some(root / 2);
        }
        self
    }

    /// The survivor of pair i < rem.
    pub(crate) fn survivor(&self, pair: u32) -> u32 {
        let odd = self.odd_survives ^ (self.flipped == Some(pair));
        2 * pair + u32::from(odd)
    }

    /// The other member of `rank`'s pair, if `rank` is in a pair.
    pub(crate) fn partner(&self, rank: u32) -> Option<u32> {
        (rank < 2 * self.rem).then_some(rank ^ 1)
    }

    /// New rank of `rank`, `None` if it is removed.
    pub(crate) fn new_rank(&self, rank: u32) -> Option<u32> {
        if rank >= 2 * self.rem {
            Some(rank - self.rem)
        } else if self.survivor(rank / 2) == rank {
            Some(rank / 2)
        } else {
            None
        }
    }

    /// Old rank of new rank `nr`.
    pub(crate) fn real(&self, nr: u32) -> u32 {
        if nr < self.rem {
            self.survivor(nr)
        } else {
            nr + self.rem
        }
    }

    /// The old ranks new rank `nr` stands for: `first..=last`.
    pub(crate) fn group(&self, nr: u32) -> (u32, u32) {
        if nr < self.rem {
            (2 * nr, 2 * nr + 1)
        } else {
            (nr + self.rem, nr + self.rem)
        }
    }
}

/// A power-of-two set of ranks that runs a halving/doubling phase: new ranks 0..pof2 and the old
/// rank each stands for.
pub(crate) trait Team {
    fn pof2(&self) -> u32;
    fn real(&self, nr: u32) -> u32;
}

impl Team for Fold {
    fn pof2(&self) -> u32 {
        self.pof2
    }
    fn real(&self, nr: u32) -> u32 {
        Fold::real(self, nr)
    }
}

/// A contiguous block of 2^e ranks starting at `start` (binary blocks, thakur §5.2); `zero`
/// stands in for the block's rank 0 when set (a root outside the block taking its role).
#[derive(Copy, Clone, Debug)]
pub(crate) struct RankBlock {
    pub start: u32,
    pub exp: u32,
    pub zero: Option<u32>,
}

impl Team for RankBlock {
    fn pof2(&self) -> u32 {
        1 << self.exp
    }
    fn real(&self, nr: u32) -> u32 {
        match self.zero {
            Some(z) if nr == 0 => z,
            _ => self.start + nr,
        }
    }
}

/// The binary-block decomposition of p (thakur §5.2): blocks of 2^e ranks for the set bits of p,
/// the largest (lowest ranks) first.
pub(crate) fn binary_blocks(p: u32) -> Vec<RankBlock> {
    let mut out = Vec::new();
    let mut start = 0;
    for e in (0..32).rev() {
        if p >> e & 1 == 1 {
            out.push(RankBlock { start, exp: e, zero: None });
            start += 1 << e;
        }
    }
    out
}

/// The segments of a 2^e-rank block when the vector is cut into the 2^e0 `fine` segments of the
/// largest block (a block's segment is a run of fine segments, so segmentations nest).
pub(crate) fn block_segs(fine: &[(u64, u64)], e0: u32, e: u32) -> Segs {
    let w = 1usize << (e0 - e);
    (0..1usize << e).map(|j| span(fine, j * w, (j + 1) * w)).collect()
}

/// Where a rank stands after the first part of binary blocks.
pub(crate) struct BbState {
    /// Index of this rank's block in [`binary_blocks`] order, and its rank inside the block.
    pub k: usize,
    pub me: u32,
    /// This rank's segment (in its block's segmentation `segs`).
    pub pos: usize,
    pub segs: Segs,
    pub deps: Vec<StepId>,
}

/// Binary blocks, first part (thakur §5.2, Fig 13): each block reduce-scatters by vector halving
/// and distance doubling; then, from the smallest block up, every rank splits its reduced segment
/// into the segments of the next larger block and sends them to their owners there, who combine
/// them (the smaller block holds higher ranks, so it goes second). Afterwards block 0 (the largest)
/// holds the full reduction, segment `bitrev(i)` on its rank i. `acc` holds this rank's input.
pub(crate) fn bb_reduce_scatter(
    b: &mut ScheduleBuilder,
    blocks: &[RankBlock],
    rank: u32,
    fine: &[(u64, u64)],
    acc: Buf,
    deps: Vec<StepId>,
) -> BbState {
    let k = blocks.iter().rposition(|bl| bl.start <= rank).expect("block 0 starts at rank 0");
    let bl = blocks[k];
    let me = rank - bl.start;
    let e0 = blocks[0].exp;
    let segs = block_segs(fine, e0, bl.exp);
    let total = span(fine, 0, fine.len()).1;
    let tmp = b.scratch(total);
    let (mut deps, pos) = rs_halving(b, &bl, me, &segs, acc, tmp, deps);
    if let Some(sm) = blocks.get(k + 1) {
        let j = pos >> (bl.exp - sm.exp);
        let from = sm.start + bitrev(j as u32, sm.exp);
        let t = seg_region(tmp, &segs, pos, pos + 1);
        if let Some(r) = recv(b, from, t, &deps) {
            let d = union(&[&[r], &deps]);
            deps = vec![b.reduce(t, seg_region(acc, &segs, pos, pos + 1), Order::DstFirst, &d)];
        }
    }
    if k > 0 {
        let big = blocks[k - 1];
        let shift = big.exp - bl.exp;
        let big_segs = block_segs(fine, e0, big.exp);
        let mut out = Vec::new();
        for jp in pos << shift..(pos + 1) << shift {
            let to = big.start + bitrev(jp as u32, big.exp);
            out.extend(send(b, to, seg_region(acc, &big_segs, jp, jp + 1), &deps));
        }
        deps = or_deps(out, &deps);
    }
    BbState { k, me, pos, segs, deps }
}

/// Critical-path estimate of binary blocks for p ranks and n bytes: part 1 as the largest terms
/// over the block chains, then an allgather (`allreduce`) or a gather to a root, `root_outside`
/// block 0 adding one message of block 0's segment.
pub(crate) fn bb_cost(p: u64, n: f64, allreduce: bool, root_outside: bool) -> crate::cost::Cost {
    let exps: Vec<i32> = (0..64).rev().filter(|e| p >> e & 1 == 1).collect();
    let inv = |e: i32| 0.5f64.powi(e);
    // part 1 ends with block 0's last reduce; every chain (a block's own halving, then the
    // cascade up to block 0) leads there: take each term's maximum over the chains
    let m = exps.len() - 1;
    let mut best = (0.0f64, 0.0f64, 0.0f64);
    for k in 0..=m {
        let mut a = f64::from(exps[k]);
        let mut bt = n * (1.0 - inv(exps[k]));
        let mut g = bt;
        if k == 0 && m > 0 {
            g += n * inv(exps[0]);
        }
        for j in 1..=k {
            a += 2f64.powi(exps[j - 1] - exps[j]);
            bt += n * inv(exps[j]);
            g += n * inv(exps[j - 1]);
        }
        best = (best.0.max(a), best.1.max(bt), best.2.max(g));
    }
    let e0 = exps[0];
    let (a2, b2) = if allreduce {
        // to the last block: allgather steps in each block until its segment fits the next block,
        // one message to the next block, then the last block's own allgather
        let chain: f64 = (1..=m).map(|j| n * (2.0 * inv(exps[j]) - inv(exps[j - 1]))).sum();
        (f64::from(e0) + m as f64, chain + n * (1.0 - inv(exps[m])))
    } else {
        let extra = if root_outside { 1.0 } else { 0.0 };
        (f64::from(e0) + extra, n * (1.0 - inv(e0)) + extra * n * inv(e0))
    };
    crate::cost::Cost::new(best.0 + a2, best.1 + b2, best.2)
}

/// Reduce-scatter by recursive vector halving among a team's p' new ranks: `acc` (whole vector,
/// laid out as `segs`, p' segments) holds this rank's partial data; `tmp` is a scratch of the same
/// layout. Returns the terminal steps and the segment this rank owns (fully reduced in `acc`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rs_halving(
    b: &mut ScheduleBuilder,
    team: &impl Team,
    me: u32,
    segs: &[(u64, u64)],
    acc: Buf,
    tmp: Buf,
    deps: Vec<StepId>,
) -> (Vec<StepId>, usize) {
    rs_halving_from(b, team, me, segs, None, acc, tmp, deps)
}

/// [`rs_halving`] whose input is still in `input` (not yet copied into `acc`, and not the same
/// memory): the first round sends its half straight from `input`, receives the partner's half
/// straight into `acc` and combines `input`'s kept half into it — no copy of the input and no
/// pass through `tmp` (an allreduce of n bytes moves 2n bytes less memory). With `None` it is
/// [`rs_halving`]. Only the kept segments of `acc` are written, as by `rs_halving`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rs_halving_from(
    b: &mut ScheduleBuilder,
    team: &impl Team,
    me: u32,
    segs: &[(u64, u64)],
    input: Option<Buf>,
    acc: Buf,
    tmp: Buf,
    deps: Vec<StepId>,
) -> (Vec<StepId>, usize) {
    let (mut lo, mut hi) = (0usize, team.pof2() as usize);
    let mut deps = deps;
    let mut input = input;
    for m in masks(team.pof2()) {
        let peer_new = me ^ m;
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if me < peer_new { ((lo, mid), (mid, hi)) } else { ((mid, hi), (lo, mid)) };
        let order = if peer_new < me { Order::SrcFirst } else { Order::DstFirst };
        if let Some(src) = input.take() {
            // The partner's half lands in `acc` first, so ours is the reduction's source: flip.
            let flipped = if peer_new < me { Order::DstFirst } else { Order::SrcFirst };
            let peer = team.real(peer_new);
            let keep_acc = seg_region(acc, segs, keep.0, keep.1);
            let mut out: Vec<StepId> =
                send(b, peer, seg_region(src, segs, give.0, give.1), &deps).into_iter().collect();
            if let Some(r) = recv(b, peer, keep_acc, &deps) {
                out.push(b.reduce(seg_region(src, segs, keep.0, keep.1), keep_acc, flipped, &[r]));
            }
            deps = or_deps(out, &deps);
            (lo, hi) = keep;
            continue;
        }
        deps = exchange_reduce(
            b,
            team.real(peer_new),
            seg_region(acc, segs, give.0, give.1),
            seg_region(tmp, segs, keep.0, keep.1),
            seg_region(acc, segs, keep.0, keep.1),
            order,
            &deps,
        );
        (lo, hi) = keep;
    }
    (deps, lo)
}

/// The reverse of [`rs_halving`] by recursive vector doubling: an allgather among the team's new
/// ranks (`root == None`) or a binomial gather to new rank `root`. `owned` is the segment this
/// rank holds. Returns the terminal steps (for a gather, a non-root stops after its send).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ag_doubling(
    b: &mut ScheduleBuilder,
    team: &impl Team,
    me: u32,
    segs: &[(u64, u64)],
    acc: Buf,
    owned: usize,
    root: Option<u32>,
    deps: Vec<StepId>,
) -> Vec<StepId> {
    let mut ms = masks(team.pof2());
    ms.reverse();
    let mut range = (owned, owned + 1);
    ag_doubling_steps(b, team, me, segs, acc, &mut range, &ms, root, deps).0
}

/// Some steps of [`ag_doubling`]: `masks` in allgather order, `range` = the segments held (updated).
/// Returns the terminal steps and whether this rank stopped (sent its part in a gather).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ag_doubling_steps(
    b: &mut ScheduleBuilder,
    team: &impl Team,
    me: u32,
    segs: &[(u64, u64)],
    acc: Buf,
    range: &mut (usize, usize),
    masks: &[u32],
    root: Option<u32>,
    deps: Vec<StepId>,
) -> (Vec<StepId>, bool) {
    let (mut lo, mut hi) = *range;
    let mut deps = deps;
    for &m in masks {
        let peer = team.real(me ^ m);
        let len = hi - lo;
        let sib = if me & m == 0 { (hi, hi + len) } else { (lo - len, lo) };
        let mine = seg_region(acc, segs, lo, hi);
        let theirs = seg_region(acc, segs, sib.0, sib.1);
        let mut out = Vec::new();
        match root {
            Some(rt) if (me ^ rt) & m != 0 => {
                out.extend(send(b, peer, mine, &deps));
                return (or_deps(out, &deps), true);
            }
            Some(_) => out.extend(recv(b, peer, theirs, &deps)),
            None => {
                out.extend(send(b, peer, mine, &deps));
                out.extend(recv(b, peer, theirs, &deps));
            }
        }
        deps = or_deps(out, &deps);
        (lo, hi) = (lo.min(sib.0), hi.max(sib.1));
    }
    *range = (lo, hi);
    (deps, false)
}

/// The fold's first step with halves (thakur §5.1, Fig 12): in pair (2i, 2i+1) the even rank
/// reduces the first half, the odd rank the second half, and the non-survivor sends its reduced
/// half to the survivor. `acc` holds this rank's data (whole vector, `half` = element split
/// point). Returns the terminal steps; afterwards a survivor holds the pair's reduction in `acc`.
pub(crate) fn fold_halves(
    b: &mut ScheduleBuilder,
    fold: &Fold,
    rank: u32,
    acc: Region,
    tmp: Region,
    half: u64,
    deps: Vec<StepId>,
) -> Vec<StepId> {
    let Some(partner) = fold.partner(rank) else { return deps };
    let first = acc.sub(0, half);
    let second = acc.sub(half, acc.len - half);
    let (give, keep, order) =
        if rank.is_multiple_of(2) { (second, first, Order::DstFirst) } else { (first, second, Order::SrcFirst) };
    let tmp_keep = Region::new(tmp.buf, tmp.off + (keep.off - acc.off), keep.len);
    let ex = exchange_reduce(b, partner, give, tmp_keep, keep, order, &deps);
    if fold.new_rank(rank).is_some() {
        // receive the partner's half over our own (already sent) half
        or_deps(recv(b, partner, give, &ex).into_iter().collect(), &ex)
    } else {
        or_deps(send(b, partner, keep, &ex).into_iter().collect(), &ex)
    }
}

/// Tracks, per segment of one buffer, the last writers and the readers since, so that ring-style
/// phases get exact dependencies in O(1) per step.
pub(crate) struct SegDeps {
    w: Vec<Vec<StepId>>,
    r: Vec<Vec<StepId>>,
}

impl SegDeps {
    pub(crate) fn new(n: usize, init: &[StepId]) -> SegDeps {
        SegDeps { w: vec![init.to_vec(); n], r: vec![Vec::new(); n] }
    }
    /// Segment i starts as written by `init[i]` (exact per-segment deps, O(p) in total).
    pub(crate) fn from_lists(init: Vec<Vec<StepId>>) -> SegDeps {
        let n = init.len();
        SegDeps { w: init, r: vec![Vec::new(); n] }
    }
    pub(crate) fn for_read(&self, i: usize) -> Vec<StepId> {
        self.w[i].clone()
    }
    pub(crate) fn for_write(&self, i: usize) -> Vec<StepId> {
        union(&[&self.w[i], &self.r[i]])
    }
    pub(crate) fn read(&mut self, i: usize, id: StepId) {
        self.r[i].push(id);
    }
    pub(crate) fn write(&mut self, i: usize, id: StepId) {
        self.w[i] = vec![id];
        self.r[i].clear();
    }
    /// Every step a later writer of any segment must wait for.
    pub(crate) fn all(&self) -> Vec<StepId> {
        let lists: Vec<&[StepId]> = self.w.iter().chain(self.r.iter()).map(|v| v.as_slice()).collect();
        union(&lists)
    }
}

/// Ring reduce-scatter among all p ranks (neighbours only; commutative ops only): `acc` holds this
/// rank's data laid out as `segs` (p segments), `tmp` is a scratch of the same layout. At step s
/// rank r sends segment r−s−1 to r+1 and reduces segment r−s−2 from r−1; rank r ends with
/// segment r. Updates `sd` (over `acc`'s segments).
pub(crate) fn rs_ring(
    b: &mut ScheduleBuilder,
    rank: u32,
    p: u32,
    segs: &[(u64, u64)],
    acc: Buf,
    tmp: Buf,
    sd: &mut SegDeps,
) {
    let (next, prev) = ((rank + 1) % p, (rank + p - 1) % p);
    for s in 0..p.saturating_sub(1) {
        let sb = ((rank + 2 * p - s - 1) % p) as usize;
        let rb = ((rank + 2 * p - s - 2) % p) as usize;
        if let Some(id) = send(b, next, seg_region(acc, segs, sb, sb + 1), &sd.for_read(sb)) {
            sd.read(sb, id);
        }
        if let Some(r) = recv(b, prev, seg_region(tmp, segs, rb, rb + 1), &[]) {
            let d = union(&[&[r], &sd.for_write(rb)]);
            let id =
                b.reduce(seg_region(tmp, segs, rb, rb + 1), seg_region(acc, segs, rb, rb + 1), Order::DstFirst, &d);
            sd.write(rb, id);
        }
    }
}

/// Ring allgather among the ranks `ring` (old ranks in ring order, this rank at position `q`):
/// the rank at position j owns segment `owner(j)` of `acc`; at step s position q sends segment
/// owner(q−s) to q+1 and receives owner(q−s−1) from q−1 into `acc`. Updates `sd`.
pub(crate) fn ag_ring(
    b: &mut ScheduleBuilder,
    ring: &[u32],
    q: usize,
    owner: impl Fn(usize) -> usize,
    segs: &[(u64, u64)],
    acc: Buf,
    sd: &mut SegDeps,
) {
    let m = ring.len();
    let (next, prev) = (ring[(q + 1) % m], ring[(q + m - 1) % m]);
    for s in 0..m.saturating_sub(1) {
        let sb = owner((q + m - s) % m);
        let rb = owner((q + 2 * m - s - 1) % m);
        if let Some(id) = send(b, next, seg_region(acc, segs, sb, sb + 1), &sd.for_read(sb)) {
            sd.read(sb, id);
        }
        if let Some(id) = recv(b, prev, seg_region(acc, segs, rb, rb + 1), &sd.for_write(rb)) {
            sd.write(rb, id);
        }
    }
}

/// Mesh allgather of the p reduced segments of `acc` (this rank owns segment `rank`, written by
/// `per_block[rank]`): every rank sends its segment straight to every other in `order` and
/// receives each peer's segment into place, a receive of segment j waiting for `per_block[j]`
/// (the steps that still read it). One phase, p−1 concurrent messages per rank.
pub(crate) fn ag_mesh(
    b: &mut ScheduleBuilder,
    rank: u32,
    p: u32,
    segs: &[(u64, u64)],
    acc: Buf,
    order: MeshOrder,
    per_block: &[Vec<StepId>],
) {
    let r = rank as usize;
    for (to, from) in order.peers(rank, p) {
        send(b, to, seg_region(acc, segs, r, r + 1), &per_block[r]);
        let f = from as usize;
        recv(b, from, seg_region(acc, segs, f, f + 1), &per_block[f]);
    }
}

/// The order in which a rank issues the p−1 direct sends of a mesh phase (every rank sends to every
/// other at once; the order only says which peer each rank writes to first).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum MeshOrder {
    /// Rank r sends to r+1, r+2, … (mod p) and expects r−1, r−2, … first: at each position of
    /// the order every rank writes to a different peer (thakur §4.4's pairwise exchange, Mamidala
    /// §4.2's cyclic order).
    Rotated,
    /// Every rank sends to 0, 1, …, p−1 (skipping itself) and expects the same order: all ranks
    /// write to the same peer first (Mamidala §4.2's plain shmem-parallel order).
    Ascending,
}

impl MeshOrder {
    /// `(to, from)` pairs, p−1 of them, in this order.
    pub(crate) fn peers(self, rank: u32, p: u32) -> impl Iterator<Item = (u32, u32)> {
        let others = move |i: u32| if i < rank { i } else { i + 1 };
        (1..p).map(move |i| match self {
            MeshOrder::Rotated => ((rank + i) % p, (rank + p - i) % p),
            MeshOrder::Ascending => {
                let q = others(i - 1);
                (q, q)
            }
        })
    }
}

/// How [`rs_pairwise`] runs.
#[derive(Copy, Clone, Debug)]
pub(crate) struct PairwiseRs {
    pub order: MeshOrder,
    /// `out` may be written from the start (out of place, and nobody reads it during the phase):
    /// the contribution from distance 1 lands in `out` itself, which then holds the partials and
    /// the result, with one scratch slot less and no final copy.
    pub land_in_out: bool,
    /// `out` already holds this rank's own contribution (an allreduce in place: `src`'s block r
    /// is `out`) and the op is commutative: each contribution is folded straight into `out`, in
    /// the order it arrives, and nothing lands in `out` but the folds (every Recv feeds only its
    /// Reduce, so its message may be read out of the sender's buffer), with no final copy.
    pub accumulate: bool,
}

impl PairwiseRs {
    /// Rotated order, the result copied to `out` at the end.
    pub(crate) const ROTATED: PairwiseRs =
        PairwiseRs { order: MeshOrder::Rotated, land_in_out: false, accumulate: false };
}

/// Pairwise-exchange reduce-scatter (thakur §4.4): in step i = 1..p−1 rank r sends its input block
/// for rank r+i (block j of `src` is `segs[j]`) and receives block r's input from rank r−i (in
/// `order`; [`MeshOrder::Ascending`] sends to and expects ranks 0, 1, … instead). The
/// contributions of ranks r−1, r−2, …, 0 arrive in that order and are folded from the left; those
/// of ranks p−1, …, r+1 likewise into a second partial, so the result `out` = `x_0 ⊕ … ⊕ x_{p−1}`
/// is in rank order (non-commutative ops are fine). `out` is written by the last step only, after
/// every read of `src`, unless `how.land_in_out`; with `how.accumulate` every contribution is
/// folded into `out` as it arrives instead (commutative, in place). Returns, per block j, the steps
/// that read or wrote it (the send of block j, or for j = rank the final write of `out`), so later
/// phases can depend on exactly those.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rs_pairwise(
    b: &mut ScheduleBuilder,
    rank: u32,
    p: u32,
    src: Buf,
    segs: &[(u64, u64)],
    out: Region,
    how: PairwiseRs,
    deps: &[StepId],
) -> Vec<Vec<StepId>> {
    let r = rank as usize;
    let mut per_block: Vec<Vec<StepId>> = vec![deps.to_vec(); p as usize];
    let n = segs[r].1;
    let own = Region::new(src, segs[r].0, n);
    if p == 1 {
        per_block[0] = or_deps(copy(b, own, out, deps).into_iter().collect(), deps);
        return per_block;
    }
    let scratch_slots = if how.land_in_out { p - 2 } else { p - 1 };
    let tmp = if n > 0 && scratch_slots > 0 { Some(b.scratch(n * u64::from(scratch_slots))) } else { None };
    let first = if how.land_in_out { 2 } else { 1 };
    let slot = |i: u32| {
        if i < first {
            out
        } else {
            Region::new(tmp.unwrap_or(Buf::Recv), u64::from(i - first) * n, n)
        }
    };
    let mut sends = Vec::new();
    let mut recvs = vec![None; p as usize];
    for (to, from) in how.order.peers(rank, p) {
        let sent = seg_region(src, segs, to as usize, to as usize + 1);
        if let Some(s) = send(b, to, sent, deps) {
            sends.push((s, sent));
            per_block[to as usize] = vec![s];
        }
        // the slot of the contribution from `from` is its distance below this rank
        let i = (rank + p - from) % p;
        recvs[i as usize] = recv(b, from, slot(i), deps);
    }
    if n == 0 {
        return per_block;
    }
    let dep = |x: Option<StepId>| -> Vec<StepId> { x.into_iter().collect() };
    if how.accumulate {
        let mut last: Option<StepId> = None;
        for i in 1..p {
            let after = union(&[&dep(last), &dep(recvs[i as usize])]);
            last = Some(b.reduce(slot(i), out, Order::SrcFirst, &after));
        }
        per_block[r] = dep(last);
        return per_block;
    }
    // left partial in slot 1: x_{r-1}, then x_{r-2} ⊕ ·, …, x_0 ⊕ ·, then · ⊕ x_r
    let mut left: Option<StepId> = None;
    if rank >= 1 {
        let mut last = recvs[1];
        for i in 2..=rank {
            last = Some(b.reduce(slot(i), slot(1), Order::SrcFirst, &union(&[&dep(last), &dep(recvs[i as usize])])));
        }
        left = Some(b.reduce(own, slot(1), Order::DstFirst, &dep(last)));
    }
    // right partial in slot r+1: x_{p-1}, then x_{p-2} ⊕ ·, …, x_{r+1} ⊕ ·
    let mut right: Option<StepId> = None;
    if rank + 1 < p {
        let mut last = recvs[r + 1];
        for i in rank + 2..p {
            last = Some(b.reduce(
                slot(i),
                slot(rank + 1),
                Order::SrcFirst,
                &union(&[&dep(last), &dep(recvs[i as usize])]),
            ));
        }
        right = last;
    }
    let (res, last) = match (left, right) {
        (Some(l), Some(rt)) => (slot(1), b.reduce(slot(rank + 1), slot(1), Order::DstFirst, &[l, rt])),
        (Some(l), None) => (slot(1), l),
        (None, Some(rt)) => (slot(1), b.reduce(own, slot(1), Order::SrcFirst, &[rt])),
        (None, None) => return per_block,
    };
    // landed in `out`: the last reduction wrote it, and the sends read only `src`; else the copy
    // into `out` waits for the sends that read it (in place: none, so that nothing but the
    // result's Recvs waits for a contribution's Send; see `crate::lending`)
    let reading: Vec<StepId> = sends.iter().filter(|(_, sent)| sent.overlaps(&out)).map(|&(s, _)| s).collect();
    per_block[r] = if res == out { vec![last] } else { vec![b.copy(res, out, &union(&[&[last], &reading]))] };
    per_block
}

/// Binomial-tree reduce of `Send[0..count]` to `root` over virtual ranks v = (rank − root) mod p
/// (thakur §4.5). A node's partial covers virtual ranks v..v+2^k, combined with the lower ones
/// first, so with `root == 0` it is in rank order (non-commutative safe). The root's result goes
/// to `out` (or scratch if `None`); other ranks use scratch. Returns the terminal steps and the
/// region holding this rank's partial (the result on the root).
pub(crate) fn binomial_reduce(
    b: &mut ScheduleBuilder,
    rank: u32,
    p: u32,
    root: u32,
    count: u64,
    out: Option<Region>,
    deps: &[StepId],
) -> (Vec<StepId>, Region) {
    let v = (rank + p - root) % p;
    let real = |x: u32| (x + root) % p;
    let mut children = Vec::new();
    let mut parent = None;
    let mut m = 1u32;
    while m < p {
        if v & m != 0 {
            parent = Some(v - m);
            break;
        }
        if v + m < p {
            children.push(v + m);
        }
        m <<= 1;
    }
    let input = Region::new(Buf::Send, 0, count);
    let acc = if children.is_empty() && parent.is_some() {
        input
    } else {
        match out {
            Some(o) if parent.is_none() => o,
            _ => Region::new(b.scratch(count), 0, count),
        }
    };
    let mut last: Vec<StepId> = copy(b, input, acc, deps).into_iter().collect();
    let recvs: Vec<(Region, Option<StepId>)> = children
        .iter()
        .map(|&c| {
            let t = Region::new(b.scratch(count), 0, count);
            (t, recv(b, real(c), t, deps))
        })
        .collect();
    for (t, r) in recvs {
        if let Some(r) = r {
            last = vec![b.reduce(t, acc, Order::DstFirst, &union(&[&[r], &last, deps]))];
        }
    }
    let last = or_deps(last, deps);
    match parent {
        Some(pv) => (or_deps(send(b, real(pv), acc, &last).into_iter().collect(), &last), acc),
        None => (last, acc),
    }
}

/// Binomial-tree broadcast of `buf` from rank 0 (every rank's `buf` is the same region).
pub(crate) fn binomial_bcast(b: &mut ScheduleBuilder, rank: u32, p: u32, buf: Region, deps: &[StepId]) -> Vec<StepId> {
    let mut deps = deps.to_vec();
    let top = if rank == 0 { p.next_power_of_two() } else { rank & rank.wrapping_neg() };
    if rank != 0 {
        deps = or_deps(recv(b, rank - top, buf, &deps).into_iter().collect(), &deps);
    }
    let mut out = Vec::new();
    let mut m = top >> 1;
    while m > 0 {
        if rank + m < p {
            out.extend(send(b, rank + m, buf, &deps));
        }
        m >>= 1;
    }
    union(&[&out, &deps])
}
