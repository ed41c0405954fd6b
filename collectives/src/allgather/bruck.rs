//! Bruck allgather(v): in step k rank r sends all 2^k blocks it holds to r − 2^k and appends the
//! 2^k blocks of r + 2^k (a last partial step for p not a power of two) in a scratch buffer where
//! position j holds block r + j; a final local rotation puts the blocks in place in `Recv`.
//!
//! Cost (n = total bytes gathered, see the module convention): ⌈lg p⌉ α + (p−1)/p n β for any p,
//! plus copying n bytes through scratch (n extra elements of scratch). Restrictions: none.
//! Paper: thakur §4.1.2 (Bruck et al.'s concatenation, a variant of the dissemination barrier).

use crate::allgather::layout::Layout;
use crate::allgather::{copy_own, gathered_bytes, recv_layout};
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "bruck",
    summary: "⌈lg p⌉ steps for any p: send everything held to r−2^k, then rotate locally",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

fn cost(a: &CollArgs) -> Cost {
    Cost::new(f64::from(ceil_log2(a.p())), gathered_bytes(a).1, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let (p, r) = (a.size, a.rank);
    let mut b = ScheduleBuilder::for_args(a);
    let out = recv_layout(a)?;
    let total = a.total_count()?;
    let work_buf = b.scratch(total);
    // position j of the work buffer holds block (r + j) mod p
    let work = Layout::packed(work_buf, (0..p).map(|j| a.block_count((r + j) % p)));
    let mut have: Vec<StepId> = Vec::new();
    let own = work.region(0);
    if own.len > 0 {
        have.push(b.copy(Region::new(Buf::Send, 0, own.len), own, &[]));
    }
    let mut held = 1u32;
    while held < p {
        let n = held.min(p - held);
        let to = (r + p - held) % p;
        let from = (r + held) % p;
        work.send(&mut b, to, 0, n, &have);
        let got = work.recv(&mut b, from, held, held + n, &[]);
        have.extend(got);
        held += n;
    }
    // rotate: runs of positions that are contiguous in Recv move with one copy
    let mut j = 1;
    while j < p {
        let start = j;
        let first = out.region((r + j) % p);
        let mut len = first.len;
        j += 1;
        while j < p {
            let next = out.region((r + j) % p);
            if next.len > 0 && next.off != first.off + len {
                break;
            }
            len += next.len;
            j += 1;
        }
        if len > 0 {
            let src = Region::new(work_buf, work.region(start).off, len);
            b.copy(src, Region::new(Buf::Recv, first.off, len), &have);
        }
    }
    copy_own(&mut b, a, &out);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_allgather() {
        crate::verify::sweep::sweep(&ALLGATHER, 20);
    }

    #[test]
    fn verifies_allgatherv() {
        crate::verify::sweep::sweep(&ALLGATHERV, 12);
    }
}
