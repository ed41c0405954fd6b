//! Building blocks shared by the alltoall(v) algorithms: the buffer layout (with in-place
//! staging), direct block exchanges, the full barriers (dissemination, butterfly) and the phase engine of the
//! ring and pair families (faraj-yuan §3.1) with their light, full and N-barrier variants.
//!
//! In-place alltoall reads and writes the same buffer, so [`Io::new`] first copies the input to
//! scratch (one copy of n, scratch n) and every step that reads the input or writes `Recv` waits
//! for that copy; the algorithms themselves then never see the aliasing.

use crate::args::{CollArgs, Collective};
use crate::blocks;
use crate::cost::{ceil_log2, Cost};
use crate::error::{Error, Result};
use crate::registry::ParamSpec;
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

/// The parameter name of the N-barrier variants.
pub(super) const BARRIERS: &str = "barriers";

/// The parameter of the N-barrier variants (faraj-yuan tunes it over 1..=p − 2).
pub(super) const BARRIERS_SPEC: ParamSpec = ParamSpec {
    name: BARRIERS,
    default: 1,
    min: 1,
    max: u32::MAX as u64,
    doc: "number of full barriers spread evenly over the p-1 phases (clamped to p-2)",
};

/// The `barriers` parameter of prepared arguments.
pub(super) fn n_barriers(args: &CollArgs) -> u64 {
    args.params.get(BARRIERS).unwrap_or(BARRIERS_SPEC.default)
}

/// This rank's block layout: where the block for each peer is read and where the block from each
/// peer is written.
pub(super) struct Io<'a> {
    pub args: &'a CollArgs,
    input: Buf,
    sdispl: Vec<u64>,
    rdispl: Vec<u64>,
    /// Steps every input read and every `Recv` write waits for (the in-place staging copy).
    guard: Vec<StepId>,
}

/// Displacements of all p blocks: `given` if set, else packed prefix sums of `count(j)`.
fn displacements(
    args: &CollArgs,
    given: &Option<std::sync::Arc<[u64]>>,
    count: impl Fn(u32) -> u64,
) -> Result<Vec<u64>> {
    if let Some(d) = given {
        return Ok(d.to_vec());
    }
    let mut out = Vec::with_capacity(args.size as usize);
    let mut at = 0u64;
    for j in 0..args.size {
        out.push(at);
        at = at
            .checked_add(count(j))
            .ok_or_else(|| Error::Overflow { coll: args.coll, what: "alltoall displacement".into() })?;
    }
    Ok(out)
}

impl<'a> Io<'a> {
    /// The layout of `args`; under in-place, also emits the staging copy into `b`.
    pub fn new(b: &mut ScheduleBuilder, args: &'a CollArgs) -> Result<Io<'a>> {
        Io::with_staging(b, args, true)
    }

    /// The layout of `args`, staging the input under in-place only if `stage` (an algorithm that
    /// does not stage must order every `Recv` write after the reads of the same block itself).
    pub fn with_staging(b: &mut ScheduleBuilder, args: &'a CollArgs, stage: bool) -> Result<Io<'a>> {
        let r = args.rank;
        let sdispl = displacements(args, &args.displs, |j| args.pair_count(r, j))?;
        let rdispl = displacements(args, &args.rdispls, |i| args.pair_count(i, r))?;
        let mut io = Io { args, input: Buf::Send, sdispl, rdispl, guard: Vec::new() };
        let len = args.send_len()?;
        if stage && args.in_place && len > 0 {
            let t = b.scratch(len);
            io.guard.push(b.copy(Region::new(Buf::Send, 0, len), Region::new(t, 0, len), &[]));
            io.input = t;
        }
        Ok(io)
    }

    pub fn rank(&self) -> u32 {
        self.args.rank
    }

    pub fn size(&self) -> u32 {
        self.args.size
    }

    /// Elements rank `from` sends to rank `to`.
    pub fn count(&self, from: u32, to: u32) -> u64 {
        self.args.pair_count(from, to)
    }

    /// Where this rank's block for `to` is read from.
    pub fn send_block(&self, to: u32) -> Region {
        Region::new(self.input, self.sdispl[to as usize], self.count(self.rank(), to))
    }

    /// Where the block from `from` goes.
    pub fn recv_block(&self, from: u32) -> Region {
        Region::new(Buf::Recv, self.rdispl[from as usize], self.count(from, self.rank()))
    }

    pub fn guard(&self) -> &[StepId] {
        &self.guard
    }

    /// `deps` plus the guard.
    pub fn guarded(&self, deps: &[StepId]) -> Vec<StepId> {
        let mut d = deps.to_vec();
        d.extend_from_slice(&self.guard);
        d
    }

    /// Copies the own block into place (nothing to do in place or when empty).
    pub fn own_copy(&self, b: &mut ScheduleBuilder) -> Option<StepId> {
        let r = self.rank();
        if self.args.in_place || self.count(r, r) == 0 {
            return None;
        }
        Some(b.copy(self.send_block(r), self.recv_block(r), &self.guard))
    }

    /// Sends the block for `to` directly from the input (None when empty).
    pub fn send_to(&self, b: &mut ScheduleBuilder, to: u32, deps: &[StepId]) -> Option<StepId> {
        let src = self.send_block(to);
        (src.len > 0).then(|| b.send(to, src, &self.guarded(deps)))
    }

    /// Receives the block from `from` directly into `Recv` (None when empty).
    pub fn recv_from(&self, b: &mut ScheduleBuilder, from: u32, deps: &[StepId]) -> Option<StepId> {
        let dst = self.recv_block(from);
        (dst.len > 0).then(|| b.recv(from, dst, &self.guarded(deps)))
    }

    /// Whether any rank sends anything to another rank.
    pub fn any_data(&self) -> bool {
        match self.args.coll {
            Collective::Alltoallv => {
                let p = self.size();
                (0..p).any(|i| (0..p).any(|j| i != j && self.count(i, j) > 0))
            }
            _ => self.args.count > 0 && self.size() > 1,
        }
    }
}

/// A rank's synchronization messages ("ready" handshakes, barrier rounds). Each carries one
/// element, as a barrier's signals do (`crate::barrier::signal_regions`): an executor completes an
/// empty Send or Recv at once, as a count-0 collective needs no message, so a zero-length signal
/// would synchronise nothing. Signals are sent from one scratch element that is never written,
/// and each lands in an element of its own (signals may arrive while others are outstanding).
pub(super) struct Signals {
    out: Region,
    landing: Buf,
    next: u64,
}

impl Signals {
    /// Room for `receives` incoming signals.
    pub fn new(b: &mut ScheduleBuilder, receives: u64) -> Signals {
        let out = Region::new(b.scratch(1), 0, 1);
        Signals { out, landing: b.scratch(receives.max(1)), next: 0 }
    }

    /// Sends a signal to `to` after `deps`.
    pub fn send(&self, b: &mut ScheduleBuilder, to: u32, deps: &[StepId]) -> StepId {
        b.send(to, self.out, deps)
    }

    /// Receives a signal from `from` after `deps`, into an element of its own.
    pub fn recv(&mut self, b: &mut ScheduleBuilder, from: u32, deps: &[StepId]) -> StepId {
        let at = Region::new(self.landing, self.next, 1);
        self.next += 1;
        b.recv(from, at, deps)
    }
}

/// Rounds of a full barrier among p ranks (each receives one signal per round).
pub(super) fn barrier_rounds(p: u32) -> u64 {
    u64::from(ceil_log2(u64::from(p)))
}

/// Full barrier of ⌈lg p⌉ rounds of one-element signals, round k after round k − 1's receive:
/// dissemination (round k sends to r + 2^k, receives from r − 2^k; any p) or, with `xor` (p a
/// power of two), butterfly (round k exchanges with r XOR 2^k), which keeps the pair family's
/// schedules XOR-symmetric. Returns the steps that mark its completion on this rank.
pub(super) fn full_barrier(b: &mut ScheduleBuilder, sig: &mut Signals, xor: bool, deps: &[StepId]) -> Vec<StepId> {
    let (r, p) = (u64::from(b.rank()), u64::from(b.size()));
    debug_assert!(!xor || p.is_power_of_two(), "butterfly barrier needs a power of two");
    let mut prev = deps.to_vec();
    let mut dist = 1u64;
    while dist < p {
        let (to, from) = if xor {
            ((r ^ dist) as u32, (r ^ dist) as u32)
        } else {
            (((r + dist) % p) as u32, ((r + p - dist) % p) as u32)
        };
        let s = sig.send(b, to, &prev);
        let v = sig.recv(b, from, &prev);
        prev = vec![s, v];
        dist *= 2;
    }
    prev
}

/// The partner pattern of a phased algorithm: in phase k (1 ≤ k < p) rank r sends to
/// `send(r, k, p)` and receives from `recv(r, k, p)`.
#[derive(Copy, Clone)]
pub(super) struct Pattern {
    pub send: fn(u32, u32, u32) -> u32,
    pub recv: fn(u32, u32, u32) -> u32,
    /// Whether `send == recv` (each phase is an exchange with one partner).
    pub symmetric: bool,
}

/// Ring: phase k sends to r + k and receives from r − k (mod p).
pub(super) const RING: Pattern = Pattern {
    send: |r, k, p| ((u64::from(r) + u64::from(k)) % u64::from(p)) as u32,
    recv: |r, k, p| ((u64::from(r) + u64::from(p) - u64::from(k)) % u64::from(p)) as u32,
    symmetric: false,
};

/// Pair: phase k exchanges with r XOR k (p a power of two).
pub(super) const XOR: Pattern = Pattern { send: |r, k, _| r ^ k, recv: |r, k, _| r ^ k, symmetric: true };

/// How consecutive phases are synchronized.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Sync {
    /// Phase k starts when this rank's phase k − 1 send and receive are done.
    Chain,
    /// Chain, plus a light barrier: before sending in phase k the sender waits for a one-element
    /// "ready" message from its phase-k receiver, sent when that receiver's phase k − 1 receive
    /// completed (no node ever receives two phases at once).
    Light,
    /// Chain, plus a full barrier after some phases: N barriers split the p − 1 phases into
    /// N + 1 nearly equal groups (N is clamped to p − 2; `u64::MAX` = after every phase).
    Barriers(u64),
}

/// Number of full barriers `Sync::Barriers(n)` places for p ranks.
pub(super) fn barrier_count(n: u64, p: u32) -> u64 {
    n.min(u64::from(p.saturating_sub(2)))
}

/// Whether phase k (1-based) ends a group of `Sync::Barriers(n)` (a barrier follows it).
fn barrier_after(k: u32, n: u64, p: u32) -> bool {
    let nb = barrier_count(n, p);
    if nb == 0 {
        return false;
    }
    let (phases, groups) = (u64::from(p) - 1, nb + 1);
    // Group g covers phases off+1..=off+len; a barrier follows the last phase of groups 0..nb.
    // Group of phase k: the g with off_g < k ≤ off_g + len_g; blocks are monotone, so search.
    let k = u64::from(k);
    let (mut lo, mut hi) = (0u64, groups - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let (off, len) = blocks::block(phases, groups, mid);
        if k > off + len {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let (off, len) = blocks::block(phases, groups, lo);
    lo < nb && k == off + len
}

/// Builds a phased exchange (ring or pair family): p − 1 phases, phase k sends this rank's block
/// to `pat.send(r, k)` and receives the block from `pat.recv(r, k)`, synchronized by `sync` (full
/// barriers: dissemination for the ring, butterfly for the symmetric pair pattern).
/// Empty blocks are not sent (both sides know every count).
///
/// In place, a symmetric pattern replaces blocks as MPICH's sendrecv_replace does: phase k
/// receives into a one-block scratch and copies it over the block it just sent; other patterns
/// stage the whole input ([`Io::new`]).
pub(super) fn phased(args: &CollArgs, pat: Pattern, sync: Sync) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(args);
    let (r, p) = (args.rank, args.size);
    let replace = args.in_place && pat.symmetric;
    let io = Io::with_staging(&mut b, args, !replace)?;
    let block = (0..p).filter(|&j| j != r).map(|j| io.count(j, r)).max().unwrap_or(0);
    let tmp = (replace && block > 0).then(|| b.scratch(block));
    io.own_copy(&mut b);
    let barriers = io.any_data();
    let mut sig = match sync {
        Sync::Chain => None,
        Sync::Light => {
            let readies = (2..p).filter(|&k| io.count(r, (pat.send)(r, k, p)) > 0).count() as u64;
            Some(Signals::new(&mut b, readies))
        }
        Sync::Barriers(n) if barriers => Some(Signals::new(&mut b, barrier_count(n, p) * barrier_rounds(p))),
        Sync::Barriers(_) => None,
    };
    // `prev`: the steps phase k waits for (phase k − 1's, or the barrier after it).
    let mut prev: Vec<StepId> = Vec::new();
    for k in 1..p {
        let (to, from) = ((pat.send)(r, k, p), (pat.recv)(r, k, p));
        let mut send_deps = prev.clone();
        if let (Sync::Light, Some(sig)) = (sync, sig.as_mut()) {
            if k > 1 && io.count(r, to) > 0 {
                // The phase-k receiver tells us it finished its phase k − 1 receive.
                send_deps.push(sig.recv(&mut b, to, &[]));
            }
        }
        let s = io.send_to(&mut b, to, &send_deps);
        let (v, landed) = match tmp {
            Some(t) if io.count(from, r) > 0 => {
                let len = io.count(from, r);
                let v = b.recv(from, Region::new(t, 0, len), &prev);
                // Over the block just sent to the same partner: after the send and the receive.
                let deps: Vec<StepId> = s.into_iter().chain([v]).collect();
                (Some(v), Some(b.copy(Region::new(t, 0, len), io.recv_block(from), &deps)))
            }
            _ => {
                let v = io.recv_from(&mut b, from, &prev);
                (v, v)
            }
        };
        if let (Sync::Light, Some(sig)) = (sync, sig.as_ref()) {
            // Tell our phase-(k + 1) sender that our phase-k receive is done.
            let next_from = (pat.recv)(r, k + 1, p);
            if k + 1 < p && io.count(next_from, r) > 0 {
                let deps: Vec<StepId> = v.into_iter().chain(prev.iter().copied()).collect();
                sig.send(&mut b, next_from, &deps);
            }
        }
        if s.is_some() || landed.is_some() {
            prev = s.into_iter().chain(landed).collect();
        }
        if let (Sync::Barriers(n), Some(sig)) = (sync, sig.as_mut()) {
            if k + 1 < p && barrier_after(k, n, p) {
                prev = full_barrier(&mut b, sig, pat.symmetric, &prev);
            }
        }
    }
    Ok(b.finish())
}

/// Bytes of one element.
pub(super) fn elem(args: &CollArgs) -> f64 {
    f64::from(args.elem_size)
}

/// Cost of a phased algorithm: the phases run in lock step, so α counts the phases that carry
/// data plus the synchronization messages on the path, β the largest message of each phase plus
/// one element per synchronization message on the path.
pub(super) fn phased_cost(args: &CollArgs, pat: Pattern, sync: Sync) -> Cost {
    let p = args.size;
    let (data_phases, bytes) = match args.coll {
        Collective::Alltoallv => {
            let mut phases = 0u64;
            let mut bytes = 0u64;
            for k in 1..p {
                let max = (0..p).map(|r| args.pair_count(r, (pat.send)(r, k, p))).max().unwrap_or(0);
                phases += u64::from(max > 0);
                bytes += max;
            }
            (phases, bytes as f64 * elem(args))
        }
        _ if args.count == 0 => (0, 0.0),
        _ => (u64::from(p) - 1, (f64::from(p) - 1.0) * args.count as f64 * elem(args)),
    };
    let sync_alpha = if data_phases == 0 {
        0
    } else {
        match sync {
            Sync::Chain => 0,
            Sync::Light => data_phases - 1,
            Sync::Barriers(n) => barrier_count(n, p) * barrier_rounds(p),
        }
    };
    Cost::new((data_phases + sync_alpha) as f64, bytes + sync_alpha as f64 * elem(args), 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_barriers_split_phases_evenly() {
        for p in 2..=20u32 {
            for n in [1u64, 2, 3, 7, u64::MAX] {
                let after: Vec<u32> = (1..p).filter(|&k| k + 1 < p && barrier_after(k, n, p)).collect();
                assert_eq!(after.len() as u64, barrier_count(n, p), "p={p} n={n} {after:?}");
                if n == u64::MAX {
                    assert_eq!(after, (1..p.saturating_sub(1)).collect::<Vec<_>>());
                }
            }
        }
    }
}
