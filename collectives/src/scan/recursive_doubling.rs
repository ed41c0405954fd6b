//! Recursive-doubling scan and exscan: in round k rank r exchanges the reduction of its aligned
//! group of 2^k ranks with r XOR 2^k; data from a lower group is folded in FIRST, into both the
//! running group reduction and (only from lower groups) this rank's prefix in `Recv`.
//!
//! Cost (n = count·elem_size bytes): ⌈lg p⌉ (α + nβ) + (2⌈lg p⌉ − 1) nγ (exscan: − 2) for a
//! power of two; for other p the same terms, plus port waits of ranks whose partner is missing
//! in a round (the simulator finds ≈ one more α). Two scratch buffers of count elements.
//! Restrictions: none (operand order is kept, so non-commutative ops are fine).
//! Paper: MPICH's MPIR_Scan_intra_recursive_doubling, the recursive-doubling pattern of
//! thakur §4.1.1 applied to prefix reductions.

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const SCAN: Algorithm = Algorithm {
    coll: Collective::Scan,
    name: "recursive_doubling",
    summary: "⌈lg p⌉ pairwise exchanges of group partial reductions; lower ranks' data first",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const EXSCAN: Algorithm = Algorithm { coll: Collective::Exscan, ..SCAN };

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let k = f64::from(ceil_log2(a.p()));
    // two reductions per round on the top rank, but the last round updates no partial, and
    // exscan's first contribution is a copy
    let reductions = if a.coll == Collective::Exscan { 2.0 * k - 2.0 } else { 2.0 * k - 1.0 };
    Cost::new(k, k * n, reductions.max(0.0) * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let (p, r, count) = (a.size, a.rank, a.count);
    let mut b = ScheduleBuilder::for_args(a);
    if count == 0 {
        return Ok(b.finish());
    }
    let exclusive = a.coll == Collective::Exscan;
    let input = Region::new(Buf::Send, 0, count);
    let out = Region::new(Buf::Recv, 0, count);
    let partial = Region::new(b.scratch(count), 0, count);
    let tmp = Region::new(b.scratch(count), 0, count);
    let cp = b.copy(input, partial, &[]);
    // the steps that write `out` next must wait for these (all readers and writers of `out`)
    let mut out_last: Vec<StepId> = vec![cp];
    if !exclusive {
        out_last.push(b.copy(input, out, &[]));
    }
    let mut out_written = !exclusive;
    let mut partial_last = vec![cp];
    let mut tmp_readers: Vec<StepId> = Vec::new();
    let mut mask = 1u32;
    while mask < p {
        let dst = r ^ mask;
        if dst < p {
            let s = b.send(dst, partial, &partial_last);
            let rv = b.recv(dst, tmp, &tmp_readers);
            tmp_readers.clear();
            let lower = dst < r;
            if mask << 1 < p {
                let order = if lower { Order::SrcFirst } else { Order::DstFirst };
                let red = b.reduce(tmp, partial, order, &[rv, s]);
                partial_last = vec![red];
                tmp_readers.push(red);
            }
            if lower {
                let mut deps = out_last.clone();
                deps.push(rv);
                let w = if out_written { b.reduce(tmp, out, Order::SrcFirst, &deps) } else { b.copy(tmp, out, &deps) };
                out_written = true;
                out_last = vec![w];
                tmp_readers.push(w);
            }
        }
        mask <<= 1;
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_scan() {
        crate::verify::sweep::sweep(&SCAN, 20);
    }

    #[test]
    fn verifies_exscan() {
        crate::verify::sweep::sweep(&EXSCAN, 20);
    }
}
