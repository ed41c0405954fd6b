//! The communicator's cache of built schedules: building one (validate, build, in-place pass,
//! pipelining, bounds check, executor index tables) costs more than a small collective itself, and
//! applications repeat the same calls. Keyed by (algorithm, arguments incl. parameters); the
//! least recently used entry goes when the cache is full.

use std::sync::Arc;

use fabcoll_collectives::registry::Algorithm;
use fabcoll_collectives::CollArgs;

use crate::error::Result;
use crate::exec::plan::Plan;

/// Entries kept per communicator.
pub(crate) const CAPACITY: usize = 32;

/// Most recently used first.
#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    entries: Vec<(&'static str, CollArgs, Arc<Plan>)>,
}

impl PlanCache {
    /// The plan of `alg` for `args`, built on a miss.
    pub fn get(&mut self, alg: &'static Algorithm, args: &CollArgs) -> Result<Arc<Plan>> {
        if let Some(i) = self.entries.iter().position(|(n, a, _)| std::ptr::eq(*n, alg.name) && a == args) {
            self.entries[..=i].rotate_right(1);
            return Ok(self.entries[0].2.clone());
        }
        let plan = Arc::new(Plan::new(alg.schedule(args)?));
        if self.entries.len() >= CAPACITY {
            self.entries.pop();
        }
        self.entries.insert(0, (alg.name, args.clone(), plan.clone()));
        Ok(plan)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_collectives::{registry, Collective};

    #[test]
    fn hits_reuse_and_capacity_bounds() {
        let alg = registry::find(Collective::Allreduce, "recursive_doubling").unwrap();
        let mut c = PlanCache::default();
        let a = CollArgs::new(Collective::Allreduce, 0, 4, 8);
        let p1 = c.get(alg, &a).unwrap();
        let p2 = c.get(alg, &a).unwrap();
        assert!(Arc::ptr_eq(&p1, &p2), "second call must reuse the plan");
        let mut b = a.clone();
        b.params.set("segment", 2);
        let p3 = c.get(alg, &b).unwrap();
        assert!(!Arc::ptr_eq(&p1, &p3), "different parameters, different plan");
        for n in 0..2 * CAPACITY as u64 {
            c.get(alg, &CollArgs::new(Collective::Allreduce, 0, 4, 100 + n)).unwrap();
        }
        assert_eq!(c.len(), CAPACITY);
        let p4 = c.get(alg, &a).unwrap();
        assert!(!Arc::ptr_eq(&p1, &p4), "evicted entries are rebuilt");
        assert_eq!(p4.sched, p1.sched);
    }
}
