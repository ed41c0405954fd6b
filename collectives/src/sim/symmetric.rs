//! Rank relabelings under which a job is symmetric, and the check that one rank's schedule is
//! the relabeled schedule of rank 0 (same steps, lengths and deps; peers mapped).

use crate::error::{Error, Result};
use crate::schedule::{Schedule, StepKind};

/// How rank d's schedule derives from rank 0's: every peer x of rank 0 becomes σ_d(x).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Symmetry {
    /// σ_d(x) = (x + d) mod p: ring, Bruck, dissemination, pairwise-ring exchanges.
    Rotation,
    /// σ_d(x) = x XOR d (p a power of two): recursive doubling and halving, pairwise XOR.
    Xor,
}

impl Symmetry {
    /// σ_d(x) for a job of p ranks.
    pub fn map(self, d: u32, x: u32, p: u32) -> u32 {
        match self {
            Symmetry::Rotation => ((u64::from(x) + u64::from(d)) % u64::from(p)) as u32,
            Symmetry::Xor => x ^ d,
        }
    }

    /// The rank y whose messages to rank 0 mirror rank 0's messages to x: σ_y(x) = 0.
    pub fn mirror(self, x: u32, p: u32) -> u32 {
        match self {
            Symmetry::Rotation => ((u64::from(p) - u64::from(x)) % u64::from(p)) as u32,
            Symmetry::Xor => x,
        }
    }

    pub(crate) fn check_size(self, p: u32) -> Result<()> {
        if p == 0 {
            return Err(Error::Simulate("a job needs at least one rank".into()));
        }
        if self == Symmetry::Xor && !p.is_power_of_two() {
            return Err(Error::Simulate(format!("XOR symmetry needs a power-of-two number of ranks, got {p}")));
        }
        Ok(())
    }
}

/// Whether rank `sr.rank`'s schedule is rank 0's schedule `s0` relabeled by `sym`, as far as
/// timing goes: the same number of steps, the same kind, length and deps at every step, and
/// every peer x of `s0` mapped to σ_r(x). Regions' offsets and buffers may differ (rank r sends
/// its own block); the error names the first step that differs.
pub fn check_symmetry(s0: &Schedule, sr: &Schedule, sym: Symmetry) -> Result<()> {
    if s0.rank != 0 {
        return Err(Error::Simulate(format!("symmetry is checked against rank 0's schedule, got rank {}'s", s0.rank)));
    }
    check_block_symmetry(s0, sr, sym, 1)
}

/// Whether rank `sr.rank` = j·k + i runs block rank i's schedule `si` relabeled by the shift j·k
/// (what [`check_symmetry`] checks for k = 1): the symmetry of a replay of one node of k ranks
/// standing for every node.
pub(crate) fn check_block_symmetry(si: &Schedule, sr: &Schedule, sym: Symmetry, k: u32) -> Result<()> {
    let (p, r) = (si.size, sr.rank);
    sym.check_size(p)?;
    let fail =
        |msg: String| Err(Error::Simulate(format!("rank {r} is not rank {} relabeled by {sym:?}: {msg}", si.rank)));
    if k == 0 || si.rank != r % k || sr.size != p || r >= p {
        return fail(format!("schedules of rank {} of {} and rank {r} of {} (blocks of {k})", si.rank, p, sr.size));
    }
    let shift = r - si.rank;
    if si.len() != sr.len() {
        return fail(format!("{} steps, rank {} has {}", sr.len(), si.rank, si.len()));
    }
    for (id, k0, d0) in si.iter() {
        let kr = sr.step(id);
        let same_kind = match (*k0, *kr) {
            (StepKind::Send { peer: a, .. }, StepKind::Send { peer: b, .. })
            | (StepKind::Recv { peer: a, .. }, StepKind::Recv { peer: b, .. }) => sym.map(shift, a, p) == b,
            (StepKind::Reduce { .. }, StepKind::Reduce { .. }) | (StepKind::Copy { .. }, StepKind::Copy { .. }) => true,
            _ => false,
        };
        if !same_kind || k0.len() != kr.len() || d0 != sr.deps(id) {
            return fail(format!(
                "step {id} is `{kr}` after {:?}, rank {} has `{k0}` after {d0:?}",
                sr.deps(id),
                si.rank
            ));
        }
    }
    Ok(())
}
