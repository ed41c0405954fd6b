//! Van de Geijn broadcast with recursive doubling: the root's buffer is cut into p blocks,
//! scattered down a binomial tree (relative rank v gets block v), then allgathered by recursive doubling.
//!
//! Cost (n = count·elem_size bytes): power of two 2 lg p α + 2(p−1)/p n β; other p at most
//! 3⌈lg p⌉ α and ≈ 3(p−1)/p n β (the allgather's non-power-of-two fix-up, thakur §4.1.1).
//! Restrictions: none (count < p leaves blocks empty).
//! Paper: thakur §4.2 (Van de Geijn et al. [2, 24]).

use crate::allgather::layout::{Group, Layout};
use crate::args::{CollArgs, Collective};
use crate::blocks::block;
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Bcast,
    name: "scatter_recursive_doubling_allgather",
    summary: "binomial scatter of p blocks, then recursive-doubling allgather (Van de Geijn)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let p = a.p();
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let share = (p - 1) as f64 / p as f64 * n;
    if p.is_power_of_two() {
        Cost::new(f64::from(2 * ceil_log2(p)), 2.0 * share, 0.0)
    } else {
        // the allgather's non-power-of-two fix-up: at most 2⌈lg p⌉ steps, ≈ twice the bytes
        Cost::new(f64::from(3 * ceil_log2(p)), 3.0 * share, 0.0)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let p = a.size;
    let mut b = ScheduleBuilder::for_args(a);
    let g = Group::rotated(p, a.root, a.rank);
    let lay = Layout::new(Buf::Recv, (0..p).map(|v| block(a.count, a.p(), u64::from(v))).collect());
    // as in MPICH the allgather starts when this rank's part of the scatter is done, so its
    // sends queue behind the scatter's on the port
    let (_, scattered) = crate::scatter::binomial::phase(&mut b, &lay, &g, &[]);
    crate::allgather::recursive_doubling::phase(&mut b, &lay, &g, &scattered, &scattered, None);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }
}
