//! Interleaved repetitions of a batch of candidates: round k runs one repetition of every
//! candidate still in the race, starting at a rotating position (A B C, B C A, C A B, …), so a
//! slow drift of the machine and the cost of coming first after a switch hit all candidates
//! alike, where measuring one candidate's repetitions back to back (AAA BBB CCC) charged a drift
//! to whichever candidate ran during it.
//!
//! Racing (optional, `race` > 1): from the second round on, a candidate whose fastest
//! repetition so far is slower than `race` × the leader's median (the candidate with the lowest
//! median so far) leaves the race. Interference only ever slows a repetition down, so a
//! candidate whose fastest run is that far behind is not the best, nor within any tolerance of
//! it a selection cares about; its figure (from fewer repetitions) stays valid for that. The
//! leader is never dropped (its fastest repetition is at most its median), so every batch keeps
//! at least one candidate measured to the full count. Only the candidates marked as racing
//! ([`Rounds::racing`]) can leave: the tuner races those whose repetition is a single call (the
//! long messages, which cost the time), not short ones, whose repetitions a burst of another
//! job's work (milliseconds) can slow several-fold twice in a row (`docs/measurements/2026-11-27-tuner.md`).
//!
//! Pure bookkeeping: the caller runs the repetitions in [`Rounds::next_order`]'s order and hands
//! back the figures, which must be the same on every rank (the tuner agrees on them with one
//! allreduce per round) so that every rank drops the same candidates.

use super::stats::Sample;

/// The state of one batch's rounds.
#[derive(Clone, Debug)]
pub struct Rounds {
    reps: Vec<Vec<f64>>,
    active: Vec<bool>,
    rounds: usize,
    round: usize,
    race: f64,
    racing: Vec<bool>,
}

impl Rounds {
    /// `n` candidates, `rounds` repetitions each, racing factor `race` (≤ 1, NaN or infinite: no
    /// racing).
    pub fn new(n: usize, rounds: usize, race: f64) -> Rounds {
        Rounds {
            reps: vec![Vec::with_capacity(rounds); n],
            active: vec![true; n],
            rounds,
            round: 0,
            race,
            racing: vec![true; n],
        }
    }

    /// Only the candidates `i` with `racing[i]` can leave the race (default: all).
    pub fn racing(mut self, racing: Vec<bool>) -> Rounds {
        self.racing = (0..self.reps.len()).map(|i| racing.get(i).copied().unwrap_or(false)).collect();
        self
    }

    /// The candidates (indices) of the next round in the order to run them, or `None` when the
    /// batch is done.
    pub fn next_order(&self) -> Option<Vec<usize>> {
        let live: Vec<usize> = (0..self.reps.len()).filter(|&i| self.active[i]).collect();
        if self.round >= self.rounds || live.is_empty() {
            return None;
        }
        let k = self.round % live.len();
        Some(live[k..].iter().chain(&live[..k]).copied().collect())
    }

    /// Records a round's figures (`values[j]` is the repetition of `order[j]`), then drops the
    /// candidates that lost the race.
    pub fn record(&mut self, order: &[usize], values: &[f64]) {
        for (&i, &v) in order.iter().zip(values) {
            if let Some(r) = self.reps.get_mut(i) {
                r.push(v);
            }
        }
        self.round += 1;
        if self.round < 2 || !(self.race > 1.0 && self.race.is_finite()) {
            return;
        }
        let median = |r: &[f64]| Sample::from_reps(r).map_or(f64::INFINITY, |s| s.median);
        let fastest = |r: &[f64]| r.iter().copied().filter(|x| x.is_finite()).fold(f64::INFINITY, f64::min);
        let lead = (0..self.reps.len())
            .filter(|&i| self.active[i])
            .map(|i| median(&self.reps[i]))
            .fold(f64::INFINITY, f64::min);
        if !lead.is_finite() {
            return;
        }
        for i in 0..self.reps.len() {
            if self.active[i] && self.racing[i] && fastest(&self.reps[i]) > self.race * lead {
                self.active[i] = false;
            }
        }
    }

    /// Whether candidate `i` is still in the race.
    pub fn active(&self, i: usize) -> bool {
        self.active.get(i).copied().unwrap_or(false)
    }

    /// Every candidate's repetitions, in the order they ran.
    pub fn into_reps(self) -> Vec<Vec<f64>> {
        self.reps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a batch with fixed per-candidate figures; returns the orders and the repetitions.
    fn run(costs: &[f64], rounds: usize, race: f64) -> (Vec<Vec<usize>>, Vec<Vec<f64>>) {
        let mut r = Rounds::new(costs.len(), rounds, race);
        let mut orders = Vec::new();
        while let Some(o) = r.next_order() {
            let v: Vec<f64> = o.iter().map(|&i| costs[i]).collect();
            r.record(&o, &v);
            orders.push(o);
        }
        (orders, r.into_reps())
    }

    #[test]
    fn repetitions_interleave_with_a_rotating_start() {
        let (orders, reps) = run(&[1.0, 1.0, 1.0], 4, f64::INFINITY);
        assert_eq!(orders, [vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2]]);
        assert!(reps.iter().all(|r| r.len() == 4));
    }

    #[test]
    fn a_clear_loser_leaves_after_two_rounds_and_the_rest_run_to_the_end() {
        // 3.0 is 3× the leader: out after round 2; 1.4 is within 1.5×: stays.
        let (orders, reps) = run(&[1.0, 3.0, 1.4], 5, 1.5);
        assert_eq!(reps.iter().map(Vec::len).collect::<Vec<_>>(), [5, 2, 5]);
        assert!(orders[2..].iter().all(|o| !o.contains(&1)), "{orders:?}");
        // Without racing everybody runs every round.
        let (_, reps) = run(&[1.0, 3.0, 1.4], 5, 0.0);
        assert!(reps.iter().all(|r| r.len() == 5));
        // A candidate not marked as racing runs every round however slow.
        let mut r = Rounds::new(3, 4, 1.5).racing(vec![true, false, true]);
        while let Some(o) = r.next_order() {
            let v: Vec<f64> = o.iter().map(|&i| [1.0, 3.0, 3.0][i]).collect();
            r.record(&o, &v);
        }
        assert_eq!(r.into_reps().iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
    }

    #[test]
    fn one_fast_repetition_keeps_a_candidate_in_the_race() {
        // Candidate 1's first repetition was disturbed (9.0) but its second is 1.1: its fastest
        // is within the factor, it stays; the leader alone is never dropped.
        let mut r = Rounds::new(2, 4, 1.5);
        r.record(&[0, 1], &[1.0, 9.0]);
        r.record(&[1, 0], &[1.1, 1.0]);
        assert!(r.active(0) && r.active(1));
        let mut r = Rounds::new(1, 3, 1.5);
        while let Some(o) = r.next_order() {
            r.record(&o, &[7.0]);
        }
        assert_eq!(r.into_reps()[0].len(), 3);
        assert!(Rounds::new(0, 3, 1.5).next_order().is_none());
    }
}
