//! Binomial-tree broadcast: relative rank v = (r − root) mod p receives the whole message from
//! v − 2^k (2^k its lowest set bit), then forwards it to v + 2^j for every 2^j < 2^k, largest first.
//!
//! Cost (n = count·elem_size bytes): ⌈lg p⌉ (α + nβ) for any p (lg p (α + nβ) for a power of two).
//! Restrictions: none. Paper: thakur §4.2 (the binomial tree of MPICH's old broadcast).

use crate::allgather::layout::{Group, Layout};
use std::ops::Range;

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder, StepId};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Bcast,
    name: "binomial",
    summary: "binomial tree rooted at root; ⌈lg p⌉ rounds of the whole message",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let k = f64::from(ceil_log2(a.p()));
    Cost::new(k, k * n, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let lay = Layout::new(Buf::Recv, vec![(0, a.count)]);
    phase(&mut b, &lay, 0..1, &Group::rotated(a.size, a.root, a.rank), &[]);
    Ok(b.finish())
}

/// Appends a binomial-tree broadcast of `lay`'s blocks `range` from position 0 of group `g` to
/// all its positions. Every write into `lay` waits for `deps`; the root's sends wait for `deps`
/// too. Returns the steps created.
pub(crate) fn phase(
    b: &mut ScheduleBuilder,
    lay: &Layout,
    range: Range<u32>,
    g: &Group,
    deps: &[StepId],
) -> Vec<StepId> {
    let (lo, hi, m, me) = (range.start, range.end, g.m(), g.me);
    let mut all = Vec::new();
    let mut have = deps.to_vec();
    let mut mask = 1u32;
    while mask < m {
        if me & mask != 0 {
            let ids = lay.recv(b, g.rank(me - mask), lo, hi, deps);
            have.extend(&ids);
            all.extend(ids);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if me + mask < m {
            all.extend(lay.send(b, g.rank(me + mask), lo, hi, &have));
        }
        mask >>= 1;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }
}
