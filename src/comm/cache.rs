//! The communicator's cache of built schedules: building one (validate, build, in-place pass,
//! pipelining, bounds check, executor index tables) costs more than a small collective itself, and
//! applications repeat the same calls. Keyed by (algorithm, arguments incl. parameters); the
//! least recently used entry goes when the cache is full.
//!
//! In front of it, [`PlanCache::choice`] remembers the outcome of the whole per-call planning —
//! forced or selected algorithm, its parameters and the plan — keyed by the call as the user made
//! it (arguments and options), so a repeated call costs one comparison of its arguments instead of
//! the selection (rule scan, restriction checks) plus the plan lookup. Selection is a function of
//! those arguments and of the communicator's decisions, so the memo is cleared when the decisions
//! change; under cost-model selection (whose state can change) it is not used.

use std::sync::Arc;

use fabcoll_collectives::registry::Algorithm;
use fabcoll_collectives::{CollArgs, Params};

use crate::error::Result;
use crate::exec::plan::Plan;

/// Entries kept per communicator.
pub(crate) const CAPACITY: usize = 32;

/// Calls whose choice is remembered per communicator.
const CHOICES: usize = 8;

/// A call as made: its arguments before selection and its options (forced algorithm,
/// parameters) — what the memos of planning are keyed by (this one and the direct path's,
/// `comm::direct`).
#[derive(Debug)]
pub(crate) struct CallKey {
    call: CollArgs,
    algorithm: Option<String>,
    params: Params,
}

impl CallKey {
    pub fn new(call: &CollArgs, algorithm: Option<&str>, params: &Params) -> CallKey {
        CallKey { call: call.clone(), algorithm: algorithm.map(str::to_owned), params: params.clone() }
    }

    /// Whether this is the call `call` with these options. A repeated call compares every field,
    /// the ones that tell calls apart first; the pattern names them all, so that a field added
    /// to `CollArgs` is not forgotten here.
    #[inline]
    pub fn is(&self, call: &CollArgs, algorithm: Option<&str>, params: &Params) -> bool {
        let CollArgs {
            coll,
            rank,
            size,
            root,
            count,
            counts,
            displs,
            rdispls,
            commutative,
            in_place,
            elem_size,
            params: call_params,
        } = &self.call;
        *count == call.count
            && *coll == call.coll
            && *root == call.root
            && *elem_size == call.elem_size
            && *in_place == call.in_place
            && *commutative == call.commutative
            && *rank == call.rank
            && *size == call.size
            && *counts == call.counts
            && *displs == call.displs
            && *rdispls == call.rdispls
            && *call_params == call.params
            && self.params == *params
            && self.algorithm.as_deref() == algorithm
    }
}

/// A call as made and what planning made of it.
#[derive(Debug)]
pub(crate) struct Choice {
    key: CallKey,
    /// The algorithm's name and the arguments it runs with (parameters resolved).
    pub alg: &'static str,
    pub args: Arc<CollArgs>,
    pub plan: Arc<Plan>,
}

/// Most recently used first.
#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    entries: Vec<(&'static str, CollArgs, Arc<Plan>)>,
    choices: Vec<Choice>,
}

impl PlanCache {
    /// The remembered planning of a call with these arguments and options, if any.
    pub fn choice(&mut self, call: &CollArgs, algorithm: Option<&str>, params: &Params) -> Option<&Choice> {
        let i = self.choices.iter().position(|c| c.key.is(call, algorithm, params))?;
        if i > 0 {
            self.choices[..=i].rotate_right(1);
        }
        self.choices.first()
    }

    /// Remembers the planning of a call (see [`PlanCache::choice`]).
    pub fn remember(
        &mut self,
        call: &CollArgs,
        algorithm: Option<&str>,
        params: &Params,
        made: (&'static str, Arc<CollArgs>, Arc<Plan>),
    ) {
        if self.choices.len() >= CHOICES {
            self.choices.pop();
        }
        let (alg, args, plan) = made;
        let c = Choice { key: CallKey::new(call, algorithm, params), alg, args, plan };
        self.choices.insert(0, c);
    }

    /// Forgets every remembered choice (the decisions changed).
    pub fn forget_choices(&mut self) {
        self.choices.clear();
    }

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
    fn choices_match_the_call_and_options_and_are_forgotten() {
        let alg = registry::find(Collective::Allreduce, "recursive_doubling").unwrap();
        let mut c = PlanCache::default();
        let call = CollArgs::new(Collective::Allreduce, 0, 4, 8);
        let plan = c.get(alg, &call).unwrap();
        let none = Params::default();
        assert!(c.choice(&call, None, &none).is_none());
        c.remember(&call, None, &none, (alg.name, Arc::new(call.clone()), plan.clone()));
        let hit = c.choice(&call, None, &none).expect("remembered");
        assert!(Arc::ptr_eq(&hit.plan, &plan) && hit.alg == "recursive_doubling");
        assert!(c.choice(&call, Some("ring"), &none).is_none(), "other forced algorithm");
        assert!(c.choice(&call, None, &Params::default().with("segment", 2)).is_none(), "other parameters");
        let mut other = call.clone();
        other.count = 9;
        assert!(c.choice(&other, None, &none).is_none(), "other count");
        for n in 0..2 * CHOICES as u64 {
            let mut a = call.clone();
            a.count = 100 + n;
            c.remember(&a, None, &none, (alg.name, Arc::new(a.clone()), plan.clone()));
        }
        assert!(c.choice(&call, None, &none).is_none(), "least recently used choice evicted");
        assert_eq!(c.choices.len(), CHOICES);
        c.forget_choices();
        assert!(c.choices.is_empty());
    }

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
