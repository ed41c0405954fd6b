//! Fitting the model's parameters to measured times (pure: no I/O, no clock).
//!
//! A measured configuration (algorithm, arguments) is decomposed by the simulator into the terms
//! of its critical path: messages and bytes sent one-way (`a_uni`, `b_uni`) and while the sender
//! also receives (`a_bi`, `b_bi`), bytes reduced (`c`) and copied (`k`), local steps (`l`),
//! messages and bytes sent into destinations that the receiver reads in the same call (hot: `hn`,
//! `h`). The replay is done twice, with f = 1 and f = 2 on a unit machine, and the difference separates the
//! two kinds of message. Then the measured time is linear in the unknowns
//! x = (o, α, f_α·α, β, f_β·β, α_r, α_h, β_h):
//!
//! `T ≈ o + a_uni·α + a_bi·(f_α α) + b_uni·β + b_bi·(f_β β) + c·γ + k·κ + r·α_r + hn·α_h + h·β_h (+ l·s)`
//!
//! with γ and κ measured directly. α_h and β_h (hot destinations) are determined only where the
//! probe has both kinds of destination apart from exchanges: at p ≥ 4, `bcast:linear` (receivers
//! keep what they get) beside binomial (the first hop goes to a rank that forwards it). At p = 2
//! nothing is forwarded and at p = 3 only ring forwards, in proportion to its exchanged bytes:
//! there they stay 0.
//!
//! The fixed cost s of a local step is not fitted (it stays 0 unless given): fitted from
//! `allgather:bruck`'s rotations against `allgather:ring`, it absorbed the scheduling of ranks
//! that outnumber cores rather than a step cost, moved α and f_β, and made the model's picks
//! worse (`docs/measurements/2026-11-27-cost-model.md`).
//!
//! [`fit`] solves it by least squares on relative errors (weights 1/T, so a 10 µs point counts as
//! much as a 10 ms one), dropping any unknown that comes out negative and refitting (a small
//! active-set loop), so every parameter is ≥ 0.

use fabcoll_collectives::registry::Algorithm;
use fabcoll_collectives::sim::simulate_alg_with;
use fabcoll_collectives::{CollArgs, Machine};

use super::{model_err, ModelParams, NodeShape, Rendezvous};
use crate::error::Result;

/// Critical-path terms of one configuration (see the module doc).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Terms {
    pub a_uni: f64,
    pub a_bi: f64,
    pub b_uni: f64,
    pub b_bi: f64,
    /// Bytes reduced.
    pub c: f64,
    /// Bytes copied.
    pub k: f64,
    /// Rendezvous messages (longer than the eager limit given to [`terms_with`]).
    pub r: f64,
    /// Local steps (copies, reductions) on the critical path.
    pub l: f64,
    /// Messages into hot destinations and their bytes (`SimResult::critical_hot_messages`,
    /// `critical_hot_bytes`).
    pub hn: f64,
    pub h: f64,
}

impl Terms {
    /// The configuration's time on `m` (the linear form of the module doc).
    pub fn time(&self, m: &ModelParams) -> f64 {
        m.overhead
            + self.a_uni * m.alpha
            + self.a_bi * m.f_alpha * m.alpha
            + self.b_uni * m.beta
            + self.b_bi * m.f_beta * m.beta
            + self.c * m.gamma
            + self.k * m.copy_beta
            + self.l * m.step_cost
            + self.hn * m.hot_alpha
            + self.h * m.hot_beta
            + self.r * m.rendezvous.alpha
    }
}

/// Replays `alg` on `args` twice (f = 1 and f = 2 on a unit machine) and separates the terms.
pub fn terms(alg: &Algorithm, args: &CollArgs) -> Result<Terms> {
    terms_with(alg, args, u64::MAX)
}

/// [`terms`], counting the messages longer than `eager_limit` bytes (`r`).
pub fn terms_with(alg: &Algorithm, args: &CollArgs, eager_limit: u64) -> Result<Terms> {
    terms_on(alg, args, eager_limit, NodeShape::HOCKNEY)
}

/// [`terms_with`] on the node `shape`: on `cores` shared cores ([`ModelParams::cores`]; 0 = off),
/// with messages holding the ports for the share `gap` of their α ([`ModelParams::gap`]; 1 =
/// Hockney), with sends on the sender's CPU or not ([`ModelParams::cpu_sends`]). The terms include
/// the oversubscription factor, so the fitted α, β are those of a rank that has a core to itself,
/// and the α terms count the gap's share for messages that queued behind another at a port.
pub fn terms_on(alg: &Algorithm, args: &CollArgs, eager_limit: u64, shape: NodeShape) -> Result<Terms> {
    let unit = |f: f64| {
        let m = ModelParams::new(Machine { alpha: 1.0, beta: 1.0, gamma: 1.0, f_alpha: f, f_beta: f });
        ModelParams { copy_beta: 1.0, rendezvous: Rendezvous { eager_limit, alpha: 0.0 }, ..m.with_shape(shape) }
    };
    let r1 = simulate_alg_with(alg, args, &unit(1.0))?;
    let r2 = simulate_alg_with(alg, args, &unit(2.0))?;
    let (a1, a2) = (r1.critical_path.alpha, r2.critical_path.alpha);
    let (b1, b2) = (r1.critical_path.beta, r2.critical_path.beta);
    // Along the f = 2 path each bidirectional message counts twice.
    let a_bi = (a2 - a1).max(0.0);
    let b_bi = (b2 - b1).max(0.0);
    Ok(Terms {
        a_uni: (a1 - a_bi).max(0.0),
        a_bi,
        b_uni: (b1 - b_bi).max(0.0),
        b_bi,
        c: r1.critical_path.gamma,
        k: r1.critical_copy_bytes,
        r: r1.critical_rendezvous as f64,
        l: r1.critical_local_steps as f64,
        hn: r1.critical_hot_messages as f64,
        h: r1.critical_hot_bytes,
    })
}

/// One measured configuration: its terms and the measured seconds.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Sample {
    pub terms: Terms,
    pub seconds: f64,
}

/// The unknowns, in column order.
const NAMES: [&str; 8] =
    ["overhead", "alpha", "f_alpha*alpha", "beta", "f_beta*beta", "alpha_rendezvous", "hot_alpha", "hot_beta"];

/// Columns of α_h and β_h in [`NAMES`].
const HOT: [usize; 2] = [6, 7];

fn row(t: &Terms) -> [f64; 8] {
    [1.0, t.a_uni, t.a_bi, t.b_uni, t.b_bi, t.r, t.hn, t.h]
}

/// Fits (o, α, f_α, β, f_β, α_r, α_h, β_h) to `samples` given the measured γ and κ (see the
/// module doc), on the papers' node ([`NodeShape::HOCKNEY`]: the caller sets the shape its terms
/// were taken on). `eager_limit` is the one the samples' rendezvous messages (`r`) were counted
/// with: the result's switch is that limit and the fitted α_r (0 when no sample has one).
///
/// Unknowns no sample exercises are left out: without bidirectional messages f_α = f_β = 1.
/// Factors are clamped to [1/4, 8] (outside that the measurement is noise, not a machine).
pub fn fit(samples: &[Sample], gamma: f64, copy_beta: f64, eager_limit: u64) -> Result<ModelParams> {
    if samples.iter().any(|s| !s.seconds.is_finite() || s.seconds <= 0.0) {
        return Err(model_err("a probe time is not a positive number"));
    }
    let mut active: Vec<usize> =
        (0..NAMES.len()).filter(|&j| samples.iter().any(|s| row(&s.terms)[j] != 0.0)).collect();
    let x = loop {
        if samples.len() < active.len() {
            return Err(model_err(format!("{} probe points for {} unknowns", samples.len(), active.len())));
        }
        let sol = match solve_weighted(samples, &active, gamma, copy_beta) {
            Ok(sol) => sol,
            // Where every point that forwards also exchanges (p = 3: binomial does not forward,
            // ring does, in proportion to its exchanged bytes), β_h is not separable from f_β:
            // it is left out.
            Err(_) if HOT.iter().any(|h| active.contains(h)) => {
                tracing::debug!(
                    "model fit: hot_alpha, hot_beta are not separable from the other terms; refitting without them"
                );
                active.retain(|j| !HOT.contains(j));
                continue;
            }
            Err(e) => return Err(e),
        };
        match sol.iter().enumerate().filter(|(_, v)| **v < 0.0).min_by(|a, b| a.1.total_cmp(b.1)) {
            Some((i, _)) => {
                tracing::debug!("model fit: {} came out negative; refitting without it", NAMES[active[i]]);
                active.remove(i);
            }
            None => {
                let mut x = [0.0; NAMES.len()];
                for (i, &j) in active.iter().enumerate() {
                    x[j] = sol[i];
                }
                break x;
            }
        }
    };
    let [overhead, a_uni, a_bi, b_uni, b_bi, alpha_rendezvous, hot_alpha, hot_beta] = x;
    // Only bidirectional samples of a kind: that is the cost, with f = 1.
    let (alpha, f_alpha) = factor(a_uni, a_bi);
    let (beta, f_beta) = factor(b_uni, b_bi);
    if beta <= 0.0 && alpha <= 0.0 {
        return Err(model_err("the probe times do not grow with messages or bytes (fit found α = β = 0)"));
    }
    let p = ModelParams {
        copy_beta,
        overhead,
        hot_alpha,
        hot_beta,
        rendezvous: Rendezvous { eager_limit, alpha: alpha_rendezvous },
        ..ModelParams::new(Machine { alpha, beta, gamma, f_alpha, f_beta })
    };
    p.validate()?;
    Ok(p)
}

/// (one-way cost, factor) from the fitted one-way and bidirectional costs.
fn factor(uni: f64, bi: f64) -> (f64, f64) {
    match (uni > 0.0, bi > 0.0) {
        (true, true) => (uni, (bi / uni).clamp(0.25, 8.0)),
        (false, true) => (bi, 1.0),
        _ => (uni, 1.0),
    }
}

/// Weighted least squares over the `active` columns: minimizes Σ ((y − row·x) / T)².
fn solve_weighted(samples: &[Sample], active: &[usize], gamma: f64, copy_beta: f64) -> Result<Vec<f64>> {
    let n = active.len();
    // Columns are scaled to max |entry| = 1 so that message counts and byte counts are comparable.
    let mut scale = vec![0.0f64; n];
    for s in samples {
        let r = row(&s.terms);
        for (i, &j) in active.iter().enumerate() {
            scale[i] = scale[i].max((r[j] / s.seconds).abs());
        }
    }
    let mut ata = vec![vec![0.0; n]; n];
    let mut atb = vec![0.0; n];
    for s in samples {
        let r = row(&s.terms);
        let y = (s.seconds - s.terms.c * gamma - s.terms.k * copy_beta) / s.seconds;
        let a: Vec<f64> = active.iter().enumerate().map(|(i, &j)| r[j] / s.seconds / scale[i]).collect();
        for i in 0..n {
            atb[i] += a[i] * y;
            for k in 0..n {
                ata[i][k] += a[i] * a[k];
            }
        }
    }
    let x = solve(ata, atb).ok_or_else(|| {
        let names: Vec<&str> = active.iter().map(|&j| NAMES[j]).collect();
        model_err(format!("the probe points do not determine {} (singular system)", names.join(", ")))
    })?;
    Ok(x.iter().zip(&scale).map(|(v, s)| v / s).collect())
}

/// Gaussian elimination with partial pivoting; `None` if singular.
#[allow(clippy::needless_range_loop)] // row operations read one row while writing another
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    let norm = a.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() <= norm * 1e-12 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        for r in col + 1..n {
            let f = a[r][col] / a[col][col];
            for c in col..n {
                a[r][c] -= f * a[col][c];
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|j| a[i][j] * x[j]).sum();
        x[i] = (b[i] - s) / a[i][i];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::model::probe::plan;

    fn truth() -> ModelParams {
        ModelParams {
            alpha: 3e-6,
            beta: 2e-10,
            gamma: 5e-11,
            f_alpha: 1.3,
            f_beta: 1.8,
            copy_beta: 1e-10,
            overhead: 4e-6,
            step_cost: 0.0,
            cores: 0,
            hot_alpha: 5e-7,
            hot_beta: 4e-11,
            gap: 1.0,
            cpu_sends: false,
            rendezvous: Rendezvous::OFF,
            network: None,
        }
    }

    /// Synthetic timings: the simulator's time on the true machine (not the linear form, so the
    /// decomposition is checked too; it includes the overhead), with a deterministic ±`noise`
    /// wobble.
    fn samples(p: u32, m: &ModelParams, noise: f64) -> Vec<Sample> {
        plan(p)
            .iter()
            .enumerate()
            .map(|(i, case)| {
                let (alg, args) = case.resolve(p).unwrap();
                let t = simulate_alg_with(alg, &args, m).unwrap().time;
                let wobble = if i % 2 == 0 { 1.0 + noise } else { 1.0 - noise };
                Sample { terms: terms_on(alg, &args, u64::MAX, m.shape()).unwrap(), seconds: t * wobble }
            })
            .collect()
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs()
    }

    #[test]
    fn recovers_known_parameters() {
        for p in [2, 3, 4, 8] {
            // At p ≤ 3 the probe cannot separate β_h (p = 2: nothing forwards; p = 3: only ring
            // does, in proportion to its exchanged bytes): a machine without it is recovered.
            let m = if p <= 3 { ModelParams { hot_alpha: 0.0, hot_beta: 0.0, ..truth() } } else { truth() };
            let f = fit(&samples(p, &m, 0.0), m.gamma, m.copy_beta, u64::MAX).unwrap();
            assert!(close(f.alpha, m.alpha, 1e-6), "p={p}: {f}");
            assert!(close(f.beta, m.beta, 1e-6), "p={p}: {f}");
            assert!(close(f.f_alpha, m.f_alpha, 1e-6), "p={p}: {f}");
            assert!(close(f.f_beta, m.f_beta, 1e-6), "p={p}: {f}");
            assert!(close(f.overhead, m.overhead, 1e-5), "p={p}: {f}");
            assert!(close(f.hot_alpha, m.hot_alpha, 1e-5) && close(f.hot_beta, m.hot_beta, 1e-5), "p={p}: {f}");
        }
    }

    #[test]
    fn recovers_known_parameters_with_a_gap() {
        // Messages that hold the ports for 0.3 α: the terms count that share for a message that
        // queued behind another (linear's root, a pipeline's segments), and the fit given the same
        // gap recovers the machine.
        recovers_at_2_and_4(ModelParams { gap: 0.3, ..truth() });
        let linear = plan(4).into_iter().find(|c| c.algorithm == "linear").unwrap();
        let (alg, args) = linear.resolve(4).unwrap();
        let shape = NodeShape { gap: 0.3, ..NodeShape::HOCKNEY };
        let t = terms_on(alg, &args, u64::MAX, shape).unwrap();
        assert!(close(t.a_uni, 1.6, 1e-12), "two gaps and one whole α: {t:?}");
    }

    #[test]
    fn recovers_known_parameters_when_sends_take_the_cpu() {
        // A node whose ranks move their messages' bytes themselves (and a gap, as the probe
        // sets both on node fabrics): the fit given that shape recovers the machine.
        recovers_at_2_and_4(ModelParams { gap: 0.3, cpu_sends: true, ..truth() });
    }

    /// The fit of `m`'s own timings (terms taken on `m`'s shape) at p = 2 and 4 gives `m` back; at
    /// p = 2 without the hot-destination costs, which nothing there forwards to separate.
    fn recovers_at_2_and_4(m: ModelParams) {
        for p in [2, 4] {
            let m = if p == 2 { ModelParams { hot_alpha: 0.0, hot_beta: 0.0, ..m } } else { m };
            let f = fit(&samples(p, &m, 0.0), m.gamma, m.copy_beta, u64::MAX).unwrap();
            assert!(close(f.alpha, m.alpha, 1e-6) && close(f.beta, m.beta, 1e-6), "p={p}: {f}");
            assert!(close(f.f_alpha, m.f_alpha, 1e-6) && close(f.f_beta, m.f_beta, 1e-6), "p={p}: {f}");
            assert!(close(f.overhead, m.overhead, 1e-5), "p={p}: {f}");
            assert!(close(f.hot_alpha, m.hot_alpha, 1e-5) && close(f.hot_beta, m.hot_beta, 1e-5), "p={p}: {f}");
        }
    }

    #[test]
    fn recovers_the_rendezvous_surcharge() {
        let m = truth();
        let (limit, a_r) = (16u64 << 10, 4e-6);
        for p in [2, 4] {
            let samples: Vec<Sample> = plan(p)
                .iter()
                .map(|case| {
                    let (alg, args) = case.resolve(p).unwrap();
                    let cfg = ModelParams { rendezvous: Rendezvous { eager_limit: limit, alpha: a_r }, ..m };
                    let t = simulate_alg_with(alg, &args, &cfg).unwrap().time;
                    Sample { terms: terms_with(alg, &args, limit).unwrap(), seconds: t }
                })
                .collect();
            assert!(samples.iter().any(|s| s.terms.r > 0.0) && samples.iter().any(|s| s.terms.r == 0.0));
            let f = fit(&samples, m.gamma, m.copy_beta, limit).unwrap();
            assert_eq!(f.rendezvous.eager_limit, limit);
            assert!(close(f.rendezvous.alpha, a_r, 1e-5), "p={p}: α_r = {}", f.rendezvous.alpha);
            assert!(close(f.alpha, m.alpha, 1e-5) && close(f.beta, m.beta, 1e-5), "p={p}: {f}");
            for s in &samples {
                assert!(close(s.terms.time(&f), s.seconds, 1e-6));
            }
        }
    }

    #[test]
    fn noisy_timings_stay_close() {
        let m = truth();
        let f = fit(&samples(4, &m, 0.03), m.gamma, m.copy_beta, u64::MAX).unwrap();
        assert!(close(f.alpha, m.alpha, 0.3), "{f}");
        assert!(close(f.beta, m.beta, 0.1), "{f}");
        assert!(close(f.f_beta, m.f_beta, 0.15), "{f}");
    }

    #[test]
    fn terms_separate_one_way_and_exchange() {
        let p = 4;
        for case in plan(p) {
            let (alg, args) = case.resolve(p).unwrap();
            let t = terms(alg, &args).unwrap();
            if alg.name == "ring" {
                // allgather ring: every message is sent while receiving.
                assert_eq!((t.a_uni, t.a_bi), (0.0, 3.0), "{case:?}");
            } else if alg.name == "linear" {
                // linear bcast: three one-way messages from the root, none forwarded.
                assert_eq!((t.a_uni, t.a_bi, t.hn, t.h), (3.0, 0.0, 0.0, 0.0), "{case:?}");
            } else if case.segment == 0 {
                // binomial bcast over 4 ranks: two one-way hops, the first into a rank that
                // forwards it.
                assert_eq!((t.a_uni, t.a_bi, t.hn, t.h), (2.0, 0.0, 1.0, case.bytes as f64), "{case:?}");
            }
        }
    }

    #[test]
    fn bad_samples_are_errors() {
        let t = Terms { a_uni: 1.0, ..Terms::default() };
        assert!(fit(&[Sample { terms: t, seconds: f64::NAN }], 0.0, 0.0, u64::MAX).is_err());
        assert!(fit(&[Sample { terms: t, seconds: 1e-6 }], 0.0, 0.0, u64::MAX).is_err(), "2 unknowns, 1 point");
        let flat =
            [Sample { terms: Terms::default(), seconds: 1e-6 }, Sample { terms: Terms::default(), seconds: 2e-6 }];
        assert!(fit(&flat, 0.0, 0.0, u64::MAX).is_err(), "nothing grows with messages or bytes");
    }
}
