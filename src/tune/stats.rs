//! Repetitions → one figure with its noise: drop the disturbed repetitions, then report the
//! median of the rest and their robust standard deviation (1.4826 · MAD) as the noise.
//! Interference on a shared machine only ever slows a repetition down, so only the upper tail
//! is rejected, by two tests: slower than median + 3 robust standard deviations, or slower than
//! [`DISTURBED`] × the second-fastest repetition (below three repetitions none is dropped). The second
//! test matters when most repetitions are disturbed, which the first cannot see: on a shared
//! machine a repetition during which another job holds one rank's core runs several times slower
//! as a whole, and such bursts last milliseconds, as long as a repetition (`docs/measurements/2026-11-27-tuner.md`). It applies
//! only when the
//! fast repetitions are at least a quarter of them (`MIN_FAST_SHARE`): a lucky few are not
//! the machine.
//!
//! "Beyond noise" ([`Sample::beats`]): `a` beats `b` when its median is lower by more than a
//! relative margin (3 % by default) AND their kept repetitions do not overlap (`a`'s slowest
//! kept one is faster than `b`'s fastest) — so a tie keeps the incumbent.

/// The repetitions within [`DISTURBED`] × the second-fastest must be at least 1 in this many
/// for the second test to apply. Interleaved rounds expose every candidate of a batch to the same
/// bursts, so a candidate whose other repetitions are all that much slower ran into luck, not 16
/// disturbances in 18 rounds that spared its peers (`docs/measurements/2026-11-27-tuner.md`).
const MIN_FAST_SHARE: usize = 4;

/// Scale from the median absolute deviation to a normal standard deviation.
const MAD_TO_SD: f64 = 1.4826;

/// A repetition slower than this factor × the second-fastest one is disturbed (module doc).
/// Undisturbed repetitions of one candidate in one batch spread by less (`docs/measurements/2026-11-27-tuner.md`).
pub const DISTURBED: f64 = 1.5;

/// One measured point: median of the kept repetitions, their robust standard deviation and
/// their range (µs).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Sample {
    pub median: f64,
    pub noise: f64,
    pub lo: f64,
    pub hi: f64,
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn mad(sorted: &[f64], m: f64) -> f64 {
    let mut dev: Vec<f64> = sorted.iter().map(|x| (x - m).abs()).collect();
    dev.sort_by(f64::total_cmp);
    median(&dev)
}

/// The repetitions kept after outlier rejection (sorted ascending).
pub fn kept(reps: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = reps.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    if v.len() < 3 {
        return v;
    }
    let m = median(&v);
    let spread = m + 3.0 * MAD_TO_SD * mad(&v, m);
    let fast = DISTURBED * v[1];
    // The fast group stands for the machine only if it is not a lucky few (module doc).
    let limit =
        if v.iter().filter(|&&x| x <= fast).count() * MIN_FAST_SHARE >= v.len() { spread.min(fast) } else { spread };
    v.retain(|&x| x <= limit);
    v
}

impl Sample {
    /// The figure of a set of repetitions, or `None` if there is no finite one.
    pub fn from_reps(reps: &[f64]) -> Option<Sample> {
        let k = kept(reps);
        if k.is_empty() {
            return None;
        }
        let m = median(&k);
        Some(Sample { median: m, noise: MAD_TO_SD * mad(&k, m), lo: k[0], hi: k[k.len() - 1] })
    }

    /// A noise-free figure (synthetic measurements, tests).
    pub fn exact(us: f64) -> Sample {
        Sample { median: us, noise: 0.0, lo: us, hi: us }
    }

    /// Whether `self` is faster than `other` beyond noise: by more than `rel` of `other`'s median,
    /// with no overlap of the kept repetitions.
    pub fn beats(&self, other: &Sample, rel: f64) -> bool {
        other.median - self.median > rel * other.median && self.hi < other.lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outliers_above_are_dropped_and_the_median_is_of_the_rest() {
        let s = Sample::from_reps(&[10.0, 10.2, 9.9, 10.1, 55.0]).unwrap();
        assert_eq!(kept(&[10.0, 10.2, 9.9, 10.1, 55.0]).len(), 4);
        assert!((s.median - 10.05).abs() < 1e-9, "{s:?}");
        assert!(s.noise > 0.0 && s.noise < 0.3, "{s:?}");
        // A fast repetition is not an outlier to reject (interference only slows).
        assert_eq!(kept(&[10.0, 10.1, 10.2, 10.0, 1.0]).len(), 5);
        // Most repetitions disturbed (a core taken by another job for milliseconds): the median
        // and MAD see nothing wrong, the factor over the second-fastest does.
        assert_eq!(kept(&[12.79, 1.57, 12.92, 11.56, 1.62]), [1.57, 1.62]);
        // Two lucky repetitions of 18 (at p = 4 on 2 cores) do not make the figure: the
        // median-and-MAD test alone applies.
        let lucky = [0.7, 0.8, 2.6, 5.4, 5.5, 5.8, 5.8, 5.8, 5.8, 5.9, 5.9, 5.9, 6.0, 6.1, 6.2, 6.7, 14.5, 19.2];
        let s = Sample::from_reps(&lucky).unwrap();
        assert!((s.median - 5.8).abs() < 1e-9, "{s:?}");
        assert_eq!(kept(&lucky).len(), 16, "the two slowest are dropped, the lucky ones kept");
        let s = Sample::from_reps(&[3.37, 4.60, 5.05, 46.87, 4.52]).unwrap();
        assert!((s.median - 4.56).abs() < 1e-9, "{s:?}");
        assert!(Sample::from_reps(&[]).is_none());
        assert!(Sample::from_reps(&[f64::NAN]).is_none());
    }

    #[test]
    fn beats_needs_margin_and_noise() {
        let a = Sample::from_reps(&[94.0, 95.0, 96.0]).unwrap();
        let b = Sample::from_reps(&[99.0, 100.0, 101.0]).unwrap();
        assert!(a.beats(&b, 0.03));
        assert!(!a.beats(&b, 0.06), "5 % is within a 6 % margin");
        let noisy = Sample::from_reps(&[90.0, 100.0, 110.0]).unwrap();
        assert!(!a.beats(&noisy, 0.03), "the repetitions overlap");
        assert!(!b.beats(&a, 0.0));
        assert!(Sample::exact(1.0).beats(&Sample::exact(2.0), 0.03));
    }
}
