//! The two-phase empirical search of faraj-yuan 2005 §3.4 (Figure 2), over any `measure`
//! function, so it is tested with synthetic costs and run on a fabric by `fabcoll tune`.
//!
//! Measurements come in **batches**: `measure(candidates, bytes)` measures several candidates
//! of one size together, and a fabric measurer interleaves their repetitions (A B C A B C …, not
//! AAA BBB CCC), so a slow drift of the machine (another job, a frequency change) hits every
//! candidate of the batch alike and the comparisons the search makes inside a batch compare
//! algorithms, not moments. Every comparison the search makes is inside one batch where it can
//! be: the whole phase-1 sweep of a grid size, a confirmation round, a binary-search midpoint.
//!
//! Phase 1 (their step 3), per algorithm: at every grid size, every value of every parameter
//! (the others at their defaults; §3.3: parameters are assumed independent), all algorithms in
//! one batch; then a linear search over those figures per parameter, starting from the default
//! value: a value replaces the current best only if it beats it beyond noise
//! ([`Sample::beats`]). Where a later parameter is searched with an earlier one's non-default
//! best, its combinations are measured in a batch of their own. Between adjacent grid sizes
//! whose best values differ, a binary search (in log size) finds the change point to the
//! resolution (a size ratio).
//!
//! (The change points of an algorithm's parameters are searched only if it wins at some grid
//! size in phase 2: nothing else uses them.)
//!
//! Phase 2 (their step 4): at every grid size, every algorithm with its phase-1 parameters at
//! that size, and the embedded default (the incumbent). Another algorithm replaces the default
//! only if it beats it beyond noise, so ties keep the default's choice. Change points between
//! grid sizes with different winners are found by the same binary search.
//!
//! A phase-2 win over the default must be robust (not in the paper; on a shared machine one
//! measurement's wins are unreliable: some won and then ran slower than the default in
//! `fabcoll bench`; `docs/measurements/2026-11-27-tuner.md`):
//! - **neighbours**: at one neighbouring grid size at least, the same algorithm with its phase-1
//!   parameters there must also be another choice than the default's and not be beaten by the
//!   default beyond noise — a region of one grid size is a disturbance or a load-dependent
//!   effect, a real crossover region is wider than a factor of two in size (from the phase-1
//!   measurements: costs nothing). Seen: bcast at 32 KiB in eager segments against one
//!   zero-copy write won under background load and lost on a quiet machine: the zero-copy
//!   grant's round trip waits for a descheduled peer only under load;
//! - **confirmation** (`confirm_rounds`): the challenger and the default are measured again,
//!   in one batch per round, that many rounds, and the challenger must win beyond noise in
//!   every round.
//!
//! Optional pruning (not in the paper; for a time budget): above `prune_above` bytes, an
//! algorithm slower than `prune` × the best at one grid size is not measured at larger sizes.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::stats::Sample;

/// Parameters by name, in decision-file units (`segment` in bytes). Default values are absent.
pub type ParamMap = BTreeMap<String, u64>;

/// One thing to measure: an algorithm with parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    pub algorithm: String,
    pub params: ParamMap,
}

impl Candidate {
    /// `algorithm` with its default parameters.
    pub fn new(algorithm: &str) -> Candidate {
        Candidate { algorithm: algorithm.to_owned(), params: ParamMap::new() }
    }

    pub fn with(mut self, name: &str, value: u64) -> Candidate {
        self.params.insert(name.to_owned(), value);
        self
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.algorithm)?;
        for (k, v) in &self.params {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// A tunable parameter of an algorithm.
#[derive(Clone, Debug, PartialEq)]
pub enum Axis {
    /// The generic pipelining parameter, in bytes: 0 (no segmentation, the default), then powers
    /// of two from half the message size down to `min` (and to no less than 1/64 of the message).
    Segment { min: u64 },
    /// A parameter with a list of values (`barriers` of the alltoall N-barrier algorithms).
    Values { name: String, default: u64, values: Vec<u64> },
}

impl Axis {
    pub fn name(&self) -> &str {
        match self {
            Axis::Segment { .. } => "segment",
            Axis::Values { name, .. } => name,
        }
    }

    pub fn default(&self) -> u64 {
        match self {
            Axis::Segment { .. } => 0,
            Axis::Values { default, .. } => *default,
        }
    }

    /// The values tried at `bytes`, the default first.
    pub fn values(&self, bytes: u64) -> Vec<u64> {
        let mut v = vec![self.default()];
        match self {
            Axis::Segment { min } => {
                // At most 64 segments per message: finer pipelines only add per-piece overhead
                // (and a 64 MiB message in 4 KiB pieces takes minutes to run on a busy machine).
                let min = (*min).max(bytes / 64).max(1);
                let half = bytes / 2;
                let mut s = if half == 0 { 0 } else { 1u64 << (63 - half.leading_zeros()) };
                while s >= min {
                    v.push(s);
                    s /= 2;
                }
            }
            Axis::Values { values, default, .. } => v.extend(values.iter().copied().filter(|x| x != default)),
        }
        v
    }
}

/// An algorithm and its tunable parameters.
#[derive(Clone, Debug)]
pub struct AlgSpace {
    pub name: String,
    pub axes: Vec<Axis>,
}

/// What a measurement gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Ok(Sample),
    /// The call failed or its result was wrong: never a winner.
    Failed(String),
    /// Not measured (time budget exhausted): the search stops refining.
    Unmeasured,
}

/// Search settings.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Relative margin a challenger must win by (besides the noise).
    pub rel: f64,
    /// Binary searches stop when the size interval's ratio is at most this.
    pub resolution: f64,
    /// Pruning factor (`f64::INFINITY` = off) and the size from which it applies.
    pub prune: f64,
    pub prune_above: u64,
    /// Phase 2: a grid size's winner replaces the default only if it wins again in this many
    /// fresh, alternating measurements of both (0 = no confirmation; guards against a default
    /// measured during a disturbance).
    pub confirm_rounds: usize,
    /// Phase 2: a win also needs a neighbouring grid size where the same algorithm is another
    /// choice than the default's and the default does not beat it beyond noise (module doc).
    pub neighbours: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            rel: 0.03,
            resolution: std::f64::consts::SQRT_2,
            prune: f64::INFINITY,
            prune_above: 0,
            confirm_rounds: 3,
            neighbours: true,
        }
    }
}

/// The search input for one operation at one communicator size.
pub struct Problem<'a> {
    /// Grid sizes, ascending, each a valid message size (> 0, a multiple of `align`).
    pub grid: Vec<u64>,
    /// Midpoints of binary searches are rounded to multiples of this (the element size).
    pub align: u64,
    /// The eligible algorithms.
    pub algorithms: Vec<AlgSpace>,
    /// The embedded default's choice at a size (the incumbent of phase 2).
    pub default: &'a dyn Fn(u64) -> Candidate,
    pub policy: Policy,
}

/// A contiguous range of sizes `lo..=hi` (`hi == u64::MAX`: and above) and its choice.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub lo: u64,
    pub hi: u64,
    pub candidate: Candidate,
}

/// The outcome at one grid size.
#[derive(Clone, Debug, PartialEq)]
pub struct GridPoint {
    pub bytes: u64,
    pub winner: Candidate,
    pub winner_us: Option<f64>,
    pub default: Candidate,
    pub default_us: Option<f64>,
}

/// The result of [`tune`].
#[derive(Clone, Debug)]
pub struct Tuned {
    /// The choice for every size from 0 up, adjacent pieces with the same choice merged.
    pub pieces: Vec<Piece>,
    pub grid: Vec<GridPoint>,
    /// Failed measurements: candidate, size, reason.
    pub failures: Vec<(Candidate, u64, String)>,
    /// Calls of `measure` (cache misses).
    pub measured: usize,
}

impl Tuned {
    /// The choice at `bytes`.
    pub fn choice(&self, bytes: u64) -> Option<&Candidate> {
        self.pieces.iter().find(|p| p.lo <= bytes && bytes <= p.hi).map(|p| &p.candidate)
    }
}

/// A phase-2 strategy: an algorithm with its phase-1 parameters (`tuned`) or with its defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Strategy {
    alg: String,
    tuned: bool,
}

/// Measures a batch of candidates at one size (their repetitions interleaved), one outcome per
/// candidate in order.
pub type Measure<'m> = dyn FnMut(&[Candidate], u64) -> Vec<Outcome> + 'm;

struct Ctx<'m, 'p> {
    measure: &'m mut Measure<'m>,
    problem: &'p Problem<'p>,
    cache: HashMap<(Candidate, u64), Outcome>,
    failures: Vec<(Candidate, u64, String)>,
    measured: usize,
    /// Phase-1 parameter pieces per algorithm: (first size, parameters), ascending.
    params: HashMap<String, Vec<(u64, ParamMap)>>,
}

impl Ctx<'_, '_> {
    /// One batch of fresh measurements (`cs` without duplicates), failures recorded.
    fn batch(&mut self, cs: &[Candidate], bytes: u64) -> Vec<Outcome> {
        if cs.is_empty() {
            return Vec::new();
        }
        let mut out = (self.measure)(cs, bytes);
        // A measurer that answers short is out of budget for the rest.
        out.resize(cs.len(), Outcome::Unmeasured);
        self.measured += cs.len();
        for (c, o) in cs.iter().zip(&out) {
            if let Outcome::Failed(why) = o {
                self.failures.push((c.clone(), bytes, why.clone()));
            }
        }
        out
    }

    /// The outcomes of `cs` at `bytes`: cached ones as they are, the others measured in one
    /// batch (and cached unless unmeasured).
    fn outcomes(&mut self, cs: &[Candidate], bytes: u64) -> Vec<Outcome> {
        let mut todo: Vec<Candidate> = Vec::new();
        for c in cs {
            if !self.cache.contains_key(&(c.clone(), bytes)) && !todo.contains(c) {
                todo.push(c.clone());
            }
        }
        let fresh = self.batch(&todo, bytes);
        let mut unmeasured = Vec::new();
        for (c, o) in todo.into_iter().zip(fresh) {
            if o == Outcome::Unmeasured {
                unmeasured.push(c);
            } else {
                self.cache.insert((c, bytes), o);
            }
        }
        cs.iter()
            .map(|c| {
                if unmeasured.contains(c) {
                    Outcome::Unmeasured
                } else {
                    self.cache.get(&(c.clone(), bytes)).cloned().unwrap_or(Outcome::Unmeasured)
                }
            })
            .collect()
    }

    fn outcome(&mut self, c: &Candidate, bytes: u64) -> Outcome {
        self.outcomes(std::slice::from_ref(c), bytes).pop().unwrap_or(Outcome::Unmeasured)
    }

    fn get(&mut self, c: &Candidate, bytes: u64) -> Option<Sample> {
        match self.outcome(c, bytes) {
            Outcome::Ok(s) => Some(s),
            _ => None,
        }
    }

    fn rel(&self) -> f64 {
        self.problem.policy.rel
    }

    /// Phase 1's batch at one size: every algorithm with its defaults and with each value of each
    /// parameter alone.
    fn sweep(&mut self, algs: &[&AlgSpace], bytes: u64) {
        let mut all = Vec::new();
        for alg in algs {
            all.push(Candidate::new(&alg.name));
            for axis in &alg.axes {
                for v in axis.values(bytes).into_iter().skip(1) {
                    all.push(Candidate::new(&alg.name).with(axis.name(), v));
                }
            }
        }
        self.outcomes(&all, bytes);
    }

    /// Phase 1 at one size, on the sweep's figures: the best parameters of `alg` and their
    /// figure (`None`: the default parameters could not be measured).
    fn best_params(&mut self, alg: &AlgSpace, bytes: u64) -> Option<(ParamMap, Sample)> {
        let mut params = ParamMap::new();
        let mut best = self.get(&Candidate::new(&alg.name), bytes)?;
        for axis in &alg.axes {
            let values: Vec<Candidate> = axis
                .values(bytes)
                .into_iter()
                .skip(1)
                .map(|v| {
                    let mut p = params.clone();
                    p.insert(axis.name().to_owned(), v);
                    Candidate { algorithm: alg.name.clone(), params: p }
                })
                .collect();
            // With an earlier parameter's best set, these are new combinations: one batch.
            for (c, o) in values.iter().zip(self.outcomes(&values, bytes)) {
                match o {
                    Outcome::Ok(x) if x.beats(&best, self.rel()) => {
                        best = x;
                        params = c.params.clone();
                    }
                    Outcome::Unmeasured => break,
                    _ => {}
                }
            }
        }
        Some((params, best))
    }

    /// Whether `inc` (the incumbent) keeps `bytes` against `other`; `None` if neither could be
    /// measured or the budget ran out.
    fn incumbent_keeps(&mut self, inc: &Candidate, other: &Candidate, bytes: u64) -> Option<bool> {
        let mut o = self.outcomes(&[inc.clone(), other.clone()], bytes).into_iter();
        match (o.next().unwrap_or(Outcome::Unmeasured), o.next().unwrap_or(Outcome::Unmeasured)) {
            (Outcome::Unmeasured, _) | (_, Outcome::Unmeasured) => None,
            (Outcome::Ok(a), Outcome::Ok(b)) => Some(!b.beats(&a, self.rel())),
            (Outcome::Ok(_), _) => Some(true),
            (_, Outcome::Ok(_)) => Some(false),
            _ => None,
        }
    }

    /// Binary search (in log size) between `lo` (won by the lower side) and `hi` (won by the
    /// upper side): `lower_wins(ctx, m)` decides a midpoint. Returns the last size of the lower
    /// side's range.
    fn change_point(&mut self, lo: u64, hi: u64, lower_wins: &mut dyn FnMut(&mut Self, u64) -> Option<bool>) -> u64 {
        let (mut lo, mut hi) = (lo.max(1), hi);
        let align = self.problem.align.max(1);
        while hi > lo && hi as f64 / lo as f64 > self.problem.policy.resolution {
            let g = ((lo as f64) * (hi as f64)).sqrt();
            let m = ((g / align as f64).round() as u64) * align;
            if m <= lo || m >= hi {
                break;
            }
            match lower_wins(self, m) {
                Some(true) => lo = m,
                Some(false) => hi = m,
                None => break,
            }
        }
        let cut = ((lo as f64) * (hi as f64)).sqrt().floor() as u64;
        cut.clamp(lo, hi.saturating_sub(1).max(lo))
    }

    fn params_at(&self, alg: &str, bytes: u64) -> ParamMap {
        self.params
            .get(alg)
            .and_then(|v| v.iter().rev().find(|(lo, _)| *lo <= bytes))
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    }

    fn candidate(&self, s: &Strategy, bytes: u64) -> Candidate {
        let params = if s.tuned { self.params_at(&s.alg, bytes) } else { ParamMap::new() };
        Candidate { algorithm: s.alg.clone(), params }
    }
}

/// [`tune`] over a measurer of one candidate at a time (synthetic costs, replaying a log): a
/// batch is its candidates measured in order.
pub fn tune_each(problem: &Problem<'_>, measure: &mut dyn FnMut(&Candidate, u64) -> Outcome) -> Tuned {
    tune(problem, &mut |cs: &[Candidate], bytes: u64| cs.iter().map(|c| measure(c, bytes)).collect())
}

/// Runs both phases for one operation at one communicator size.
pub fn tune(problem: &Problem<'_>, measure: &mut Measure<'_>) -> Tuned {
    let mut ctx =
        Ctx { measure, problem, cache: HashMap::new(), failures: Vec::new(), measured: 0, params: HashMap::new() };
    let grid = &problem.grid;
    let algs = &problem.algorithms;
    let pol = &problem.policy;

    // Phase 1, step 3.1: best parameters per algorithm per grid size.
    let mut best: Vec<Vec<Option<(ParamMap, Sample)>>> = vec![vec![None; grid.len()]; algs.len()];
    let mut pruned = vec![false; algs.len()];
    for (i, &s) in grid.iter().enumerate() {
        let live: Vec<&AlgSpace> = algs.iter().zip(&pruned).filter(|(_, &p)| !p).map(|(a, _)| a).collect();
        ctx.sweep(&live, s);
        for (a, alg) in algs.iter().enumerate() {
            if !pruned[a] {
                best[a][i] = ctx.best_params(alg, s);
            }
        }
        if s >= pol.prune_above && pol.prune.is_finite() {
            let fastest = best.iter().filter_map(|b| b[i].as_ref().map(|x| x.1.median)).fold(f64::INFINITY, f64::min);
            for a in 0..algs.len() {
                if best[a][i].as_ref().is_some_and(|x| x.1.median > pol.prune * fastest) {
                    pruned[a] = true;
                }
            }
        }
    }

    // Phase 2, step 4.1: the best algorithm per grid size against the default.
    let mut points = Vec::with_capacity(grid.len());
    let mut winners: Vec<Strategy> = Vec::with_capacity(grid.len());
    for (i, &s) in grid.iter().enumerate() {
        let d = (problem.default)(s);
        let d_strat = Strategy { alg: d.algorithm.clone(), tuned: false };
        let d_sample = ctx.get(&d, s);
        let mut top: Option<(Strategy, Candidate, Sample)> = None;
        for (a, alg) in algs.iter().enumerate() {
            if best[a][i].is_none() {
                continue;
            }
            let st = Strategy { alg: alg.name.clone(), tuned: true };
            let params = best[a][i].as_ref().map(|b| b.0.clone()).unwrap_or_default();
            let c = Candidate { algorithm: alg.name.clone(), params };
            if let Some(x) = ctx.get(&c, s) {
                if top.as_ref().is_none_or(|t| x.median < t.2.median) {
                    top = Some((st, c, x));
                }
            }
        }
        // A win over the default must not be a region of one grid size (phase-1 figures).
        let neighbour_agrees = |ctx: &mut Ctx, alg: &str| {
            if !pol.neighbours {
                return true;
            }
            let a = algs.iter().position(|x| x.name == alg);
            for j in [i.checked_sub(1), Some(i + 1)].into_iter().flatten().filter(|&j| j < grid.len()) {
                let Some((params, x)) = a.and_then(|a| best[a][j].clone()) else { continue };
                let dj = (problem.default)(grid[j]);
                if dj.algorithm == alg && dj.params == params {
                    continue;
                }
                if ctx.get(&dj, grid[j]).is_some_and(|y| !y.beats(&x, pol.rel)) {
                    return true;
                }
            }
            // A one-size grid has no neighbours to ask.
            grid.len() == 1
        };
        // … and must hold in `confirm_rounds` fresh, alternating measurements of both; without
        // budget left for them, the verdict so far stands.
        let confirmed = |ctx: &mut Ctx, c: &Candidate| {
            for _ in 0..pol.confirm_rounds {
                let mut o = ctx.batch(&[c.clone(), d.clone()], s).into_iter();
                match (o.next().unwrap_or(Outcome::Unmeasured), o.next().unwrap_or(Outcome::Unmeasured)) {
                    (Outcome::Ok(x), Outcome::Ok(y)) if x.beats(&y, pol.rel) => {}
                    (Outcome::Unmeasured, _) | (_, Outcome::Unmeasured) => return true,
                    _ => return false,
                }
            }
            true
        };
        let (w, wc, ws) = match (top, d_sample) {
            (Some((st, c, x)), Some(ds))
                if c != d
                    && x.beats(&ds, pol.rel)
                    && neighbour_agrees(&mut ctx, &c.algorithm)
                    && confirmed(&mut ctx, &c) =>
            {
                (st, c, Some(x))
            }
            (_, Some(ds)) => (d_strat, d.clone(), Some(ds)),
            (Some((st, c, x)), None) => (st, c, Some(x)),
            (None, None) => (d_strat, d.clone(), None),
        };
        points.push(GridPoint {
            bytes: s,
            winner: wc,
            winner_us: ws.map(|x| x.median),
            default: d,
            default_us: d_sample.map(|x| x.median),
        });
        winners.push(w);
    }

    // Phase 1, step 3.2: change points of each algorithm's parameters — only for the algorithms
    // that win somewhere (the others' parameters between grid sizes are never used).
    for (a, alg) in algs.iter().enumerate() {
        if !winners.iter().any(|w| w.tuned && w.alg == alg.name) {
            continue;
        }
        let avail: Vec<(u64, ParamMap)> =
            grid.iter().zip(&best[a]).filter_map(|(&s, b)| b.as_ref().map(|(p, _)| (s, p.clone()))).collect();
        let mut pieces: Vec<(u64, ParamMap)> = Vec::new();
        for (k, (s, p)) in avail.iter().enumerate() {
            if k == 0 {
                pieces.push((0, p.clone()));
                continue;
            }
            let (prev_s, prev_p) = &avail[k - 1];
            if prev_p == p {
                continue;
            }
            let x = Candidate { algorithm: alg.name.clone(), params: prev_p.clone() };
            let y = Candidate { algorithm: alg.name.clone(), params: p.clone() };
            let x_inc = x.params.is_empty() || !y.params.is_empty();
            let cut = ctx.change_point(*prev_s, *s, &mut |ctx, m| {
                if x_inc {
                    ctx.incumbent_keeps(&x, &y, m)
                } else {
                    ctx.incumbent_keeps(&y, &x, m).map(|keeps| !keeps)
                }
            });
            pieces.push((cut + 1, p.clone()));
        }
        ctx.params.insert(alg.name.clone(), pieces);
    }

    // Phase 2, step 4.2: change points between grid sizes with different winners.
    let mut strat_pieces: Vec<(u64, Strategy)> = Vec::new();
    for (i, w) in winners.iter().enumerate() {
        if i == 0 {
            strat_pieces.push((0, w.clone()));
            continue;
        }
        let prev = &winners[i - 1];
        if prev == w {
            continue;
        }
        let (xs, ys) = (prev.clone(), w.clone());
        let cut = ctx.change_point(grid[i - 1], grid[i], &mut |ctx, m| {
            let (x, y) = (ctx.candidate(&xs, m), ctx.candidate(&ys, m));
            let d = (problem.default)(m);
            if y == d && x != d {
                ctx.incumbent_keeps(&y, &x, m).map(|keeps| !keeps)
            } else {
                ctx.incumbent_keeps(&x, &y, m)
            }
        });
        strat_pieces.push((cut + 1, w.clone()));
    }

    // Step 4.3: expand tuned strategies by their parameter pieces, merge equal neighbours.
    let mut pieces: Vec<Piece> = Vec::new();
    for (k, (lo, st)) in strat_pieces.iter().enumerate() {
        let hi = strat_pieces.get(k + 1).map_or(u64::MAX, |(next, _)| next - 1);
        let mut cuts = vec![*lo];
        if st.tuned {
            if let Some(pp) = ctx.params.get(&st.alg) {
                cuts.extend(pp.iter().map(|(l, _)| *l).filter(|l| l > lo && *l <= hi));
            }
        }
        for (j, &from) in cuts.iter().enumerate() {
            let to = cuts.get(j + 1).map_or(hi, |n| n - 1);
            let candidate = ctx.candidate(st, from);
            match pieces.last_mut() {
                Some(last) if last.candidate == candidate => last.hi = to,
                _ => pieces.push(Piece { lo: from, hi: to, candidate }),
            }
        }
    }
    Tuned { pieces, grid: points, failures: ctx.failures, measured: ctx.measured }
}
