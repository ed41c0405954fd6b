//! Race check of one rank's schedule: two steps that the DAG does not order must not touch a common
//! element when at least one of them writes it.
//!
//! Candidate pairs come from a sweep over the accesses sorted by (buffer, offset), comparing only
//! overlapping accesses of which one writes; each pair is then looked up in ancestor bitsets.

use crate::error::{Error, Result};
use crate::schedule::{Buf, Region, Schedule, StepId};

#[derive(Copy, Clone)]
struct Access {
    region: Region,
    step: StepId,
    write: bool,
}

/// Per step, the bitset of its ancestors (transitive deps).
struct Ancestors {
    words: usize,
    bits: Vec<u64>,
}

impl Ancestors {
    fn new(s: &Schedule) -> Ancestors {
        let n = s.len();
        let words = n.div_ceil(64).max(1);
        let mut bits = vec![0u64; n * words];
        let mut sorted: Vec<StepId> = Vec::new();
        for (id, _, deps) in s.iter() {
            let i = id as usize;
            let (before, rest) = bits.split_at_mut(i * words);
            let mine = &mut rest[..words];
            // Latest deps first: a dep that is already an ancestor adds nothing. Ancestors of d
            // are all below d, so only words up to d's own word can be set.
            sorted.clear();
            sorted.extend_from_slice(deps);
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            for &d in &sorted {
                let d = d as usize;
                if mine[d / 64] >> (d % 64) & 1 == 1 {
                    continue;
                }
                let top = d / 64 + 1;
                for (m, x) in mine[..top].iter_mut().zip(&before[d * words..d * words + top]) {
                    *m |= x;
                }
                mine[d / 64] |= 1 << (d % 64);
            }
        }
        Ancestors { words, bits }
    }

    /// Whether step `a` is a (transitive) dep of step `b`.
    fn reaches(&self, a: StepId, b: StepId) -> bool {
        let a = a as usize;
        self.bits[b as usize * self.words + a / 64] >> (a % 64) & 1 == 1
    }
}

fn buf_key(b: Buf) -> u32 {
    match b {
        Buf::Send => 0,
        Buf::Recv => 1,
        Buf::Scratch(i) => 2 + u32::from(i),
    }
}

/// Checks schedule `s` (of rank `s.rank`) for unordered conflicting accesses.
pub(super) fn check(s: &Schedule) -> Result<()> {
    let mut acc: Vec<Access> = Vec::with_capacity(2 * s.len());
    for (id, k, _) in s.iter() {
        let w = k.writes();
        if let Some(r) = k.reads() {
            // Reduce reads and writes dst; its dst access (a write) covers the read.
            if r.len > 0 && w != Some(r) {
                acc.push(Access { region: r, step: id, write: false });
            }
        }
        if let Some(r) = w.filter(|r| r.len > 0) {
            acc.push(Access { region: r, step: id, write: true });
        }
    }
    acc.sort_unstable_by_key(|a| (buf_key(a.region.buf), a.region.off));
    let mut anc: Option<Ancestors> = None;
    let mut writes: Vec<Access> = Vec::new();
    let mut reads: Vec<Access> = Vec::new();
    for a in &acc {
        let live = |x: &Access| x.region.buf == a.region.buf && x.region.end() > a.region.off;
        writes.retain(live);
        reads.retain(live);
        let others = if a.write { writes.iter().chain(reads.iter()) } else { writes.iter().chain([].iter()) };
        for b in others {
            if b.step == a.step {
                continue;
            }
            let (x, y) = if a.step < b.step { (a, b) } else { (b, a) };
            let anc = anc.get_or_insert_with(|| Ancestors::new(s));
            if !anc.reaches(x.step, y.step) {
                return Err(race(s, x, y));
            }
        }
        if a.write {
            writes.push(*a);
        } else {
            reads.push(*a);
        }
    }
    Ok(())
}

fn race(s: &Schedule, x: &Access, y: &Access) -> Error {
    let lo = x.region.off.max(y.region.off);
    let hi = x.region.end().min(y.region.end());
    let common = Region::new(x.region.buf, lo, hi - lo);
    let what = match (x.write, y.write) {
        (true, true) => "both write".to_string(),
        (true, false) => format!("step {} writes and step {} reads", x.step, y.step),
        _ => format!("step {} reads and step {} writes", x.step, y.step),
    };
    Error::Verify(format!(
        "rank {}: race: step {} ({}) and step {} ({}) are not ordered by deps and {what} {common}",
        s.rank,
        x.step,
        s.step(x.step),
        y.step,
        s.step(y.step)
    ))
}
