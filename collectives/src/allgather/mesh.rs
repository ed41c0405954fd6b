//! The multi-dimensional mesh allgather shared by `mesh_2d` and `mesh_3d` (faraj-yuan §3.1): ranks
//! sit on a grid d_0 × d_1 × … (rank = x_0 + d_0·(x_1 + d_1·(x_2 + …))), and phase i is an
//! allgather among the d_i ranks that differ only in x_i, each sending every other one the
//! super-block it holds so far (its own block first, then its row, then its plane) directly.
//!
//! Cost (n = total bytes gathered): Σ_i (d_i − 1) α + (p−1)/p n β (n − min_i n_i for uneven
//! allgatherv); the phases are sequential (faraj-yuan's θ per phase boundary).

use crate::allgather::{copy_own, recv_layout};
use crate::args::CollArgs;
use crate::error::Result;
use crate::schedule::{Schedule, ScheduleBuilder, StepId};

/// Largest divisor of `p` whose `k`-th power is at most `p` (k = 2: ≤ √p, k = 3: ≤ ∛p).
pub(crate) fn root_divisor(p: u32, k: u32) -> u32 {
    let p = u64::from(p);
    (1..=p).take_while(|d| d.pow(k) <= p).filter(|d| p % d == 0).last().unwrap_or(1) as u32
}

/// Builds the mesh allgather on the grid `dims` (product = p; dimensions of size 1 are skipped).
pub(crate) fn build(a: &CollArgs, dims: &[u32]) -> Result<Schedule> {
    debug_assert_eq!(dims.iter().map(|&d| u64::from(d)).product::<u64>(), a.p());
    let r = a.rank;
    let mut b = ScheduleBuilder::for_args(a);
    let lay = recv_layout(a)?;
    let mut have: Vec<StepId> = copy_own(&mut b, a, &lay);
    let mut stride = 1u32;
    for &m in dims {
        let c = (r / stride) % m;
        let base = r - r % (stride * m);
        let member = |x: u32| r - c * stride + x * stride;
        let range = |x: u32| (base + x * stride, base + (x + 1) * stride);
        let mut got = Vec::new();
        for k in 1..m {
            let (to, from) = ((c + k) % m, (c + m - k) % m);
            let (lo, hi) = range(c);
            lay.send(&mut b, member(to), lo, hi, &have);
            let (lo, hi) = range(from);
            got.extend(lay.recv(&mut b, member(from), lo, hi, &[]));
        }
        have.extend(got);
        stride *= m;
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_rule() {
        assert_eq!(root_divisor(12, 2), 3);
        assert_eq!(root_divisor(16, 2), 4);
        assert_eq!(root_divisor(7, 2), 1);
        assert_eq!(root_divisor(64, 3), 4);
        assert_eq!(root_divisor(24, 3), 2);
        assert_eq!(root_divisor(1, 3), 1);
    }
}
