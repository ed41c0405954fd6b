//! Store-and-forward engine of the indirect alltoall(v) algorithms (Bruck, meshes): data moves as
//! items (src, dst) = the block rank src sends to rank dst, of `pair_count(src, dst)` elements,
//! so every rank can compute every message's size and layout, which is what lets alltoallv run
//! through the same algorithms.
//!
//! A message is a list of items that sender and receiver compute alike. The sender sends straight
//! from where the items are when they are contiguous and in order, else packs them into a fresh
//! scratch region (one Copy per item). The receiver receives straight into `Recv` when every item
//! is its own and their `Recv` blocks are contiguous and in order, else into fresh scratch, and
//! copies its own items out at once. Scratch is never reused, so no step overwrites data another
//! step still reads; each item only remembers the step that produced it.

use std::collections::HashMap;

use super::phases::Io;
use crate::schedule::{Region, ScheduleBuilder, StepId};

/// The block rank `.0` sends to rank `.1`.
pub(super) type Item = (u32, u32);

/// Where this rank's held items are.
pub(super) struct Forwarder<'a> {
    pub io: Io<'a>,
    held: HashMap<Item, (Region, StepId)>,
}

/// The union of `regs` if they are back to back in one buffer, in order.
fn contiguous(regs: &[Region]) -> Option<Region> {
    let first = *regs.first()?;
    let mut end = first.off;
    for r in regs {
        if r.buf != first.buf || r.off != end {
            return None;
        }
        end = r.end();
    }
    Some(Region::new(first.buf, first.off, end - first.off))
}

impl<'a> Forwarder<'a> {
    pub fn new(io: Io<'a>) -> Forwarder<'a> {
        Forwarder { io, held: HashMap::new() }
    }

    fn size(&self, item: Item) -> u64 {
        self.io.count(item.0, item.1)
    }

    /// Where `item` is and the step that put it there (the guard for this rank's own input).
    fn locate(&self, item: Item) -> (Region, Vec<StepId>) {
        match self.held.get(&item) {
            Some(&(reg, step)) => (reg, vec![step]),
            None => {
                debug_assert_eq!(item.0, self.io.rank(), "item {item:?} is not held by rank {}", self.io.rank());
                (self.io.send_block(item.1), self.io.guard().to_vec())
            }
        }
    }

    /// Sends `items` (which this rank holds) to `peer` after `deps`; `None` if they are all empty.
    pub fn send(&mut self, b: &mut ScheduleBuilder, peer: u32, items: &[Item], deps: &[StepId]) -> Option<StepId> {
        let mut regs = Vec::with_capacity(items.len());
        let mut producers: Vec<StepId> = deps.to_vec();
        for &it in items {
            if self.size(it) > 0 {
                let (reg, d) = self.locate(it);
                regs.push((reg, d));
            }
            self.held.remove(&it);
        }
        if regs.is_empty() {
            return None;
        }
        let plain: Vec<Region> = regs.iter().map(|r| r.0).collect();
        if let Some(all) = contiguous(&plain) {
            for (_, d) in &regs {
                producers.extend_from_slice(d);
            }
            producers.sort_unstable();
            producers.dedup();
            return Some(b.send(peer, all, &producers));
        }
        let total: u64 = plain.iter().map(|r| r.len).sum();
        let t = b.scratch(total);
        let mut off = 0;
        for (reg, d) in &regs {
            producers.push(b.copy(*reg, Region::new(t, off, reg.len), d));
            off += reg.len;
        }
        Some(b.send(peer, Region::new(t, 0, total), &producers))
    }

    /// Receives `items` from `peer` after `deps`: this rank's own items land in `Recv`, the others
    /// are held for forwarding. `None` if they are all empty.
    pub fn recv(&mut self, b: &mut ScheduleBuilder, peer: u32, items: &[Item], deps: &[StepId]) -> Option<StepId> {
        let me = self.io.rank();
        let nonempty: Vec<Item> = items.iter().copied().filter(|&it| self.size(it) > 0).collect();
        if nonempty.is_empty() {
            return None;
        }
        if nonempty.iter().all(|it| it.1 == me) {
            let regs: Vec<Region> = nonempty.iter().map(|it| self.io.recv_block(it.0)).collect();
            if let Some(all) = contiguous(&regs) {
                return Some(b.recv(peer, all, &self.io.guarded(deps)));
            }
        }
        let total: u64 = nonempty.iter().map(|&it| self.size(it)).sum();
        let t = b.scratch(total);
        let v = b.recv(peer, Region::new(t, 0, total), deps);
        let mut off = 0;
        for it in nonempty {
            let reg = Region::new(t, off, self.size(it));
            off += reg.len;
            if it.1 == me {
                b.copy(reg, self.io.recv_block(it.0), &self.io.guarded(&[v]));
            } else {
                self.held.insert(it, (reg, v));
            }
        }
        Some(v)
    }

    /// Items still held (should be none when the algorithm is done).
    pub fn held(&self) -> usize {
        self.held.len()
    }
}
