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
//! relative margin (3 % by default) AND the middle halves of their kept repetitions do not overlap
//! (`a`'s upper quartile is below `b`'s lower quartile; with fewer than four repetitions, their
//! whole ranges) — so a tie keeps the incumbent. Whole ranges of 18 repetitions were asked to be
//! apart before: at p = 16 on 16 cores one slow repetition in 18 joined them, and `shmem_cyclic`
//! at 1 MiB, well ahead of Rabenseifner by the medians of every confirmation round, was never
//! chosen (`docs/measurements/2026-11-29-sixteen-cores.md`).

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

/// One measured point: median of the kept repetitions, their robust standard deviation, their
/// range and their quartiles (µs).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Sample {
    pub median: f64,
    pub noise: f64,
    pub lo: f64,
    pub hi: f64,
    /// Lower and upper quartile (the medians of the lower and upper half; below four
    /// repetitions, `lo` and `hi`).
    pub q1: f64,
    pub q3: f64,
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
        let (lo, hi) = (k[0], k[k.len() - 1]);
        let n = k.len();
        let (q1, q3) = if n < 4 { (lo, hi) } else { (median(&k[..n / 2]), median(&k[n.div_ceil(2)..])) };
        Some(Sample { median: m, noise: MAD_TO_SD * mad(&k, m), lo, hi, q1, q3 })
    }

    /// A noise-free figure (synthetic measurements, tests).
    pub fn exact(us: f64) -> Sample {
        Sample { median: us, noise: 0.0, lo: us, hi: us, q1: us, q3: us }
    }

    /// Whether `self` is faster than `other` beyond noise: by more than `rel` of `other`'s median,
    /// with no overlap of the middle halves of the kept repetitions (the module doc).
    pub fn beats(&self, other: &Sample, rel: f64) -> bool {
        other.median - self.median > rel * other.median && self.q3 < other.q1
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

    /// A confirmation round of `fabcoll tune` at p = 16 on 16 cores, 1 MiB allreduce:
    /// shmem_cyclic against the default, Rabenseifner (the last of three). Their kept ranges overlap,
    /// their middle halves are far apart.
    #[test]
    fn one_slow_repetition_does_not_hide_a_clear_win() {
        let cyclic = [
            465.0, 507.0, 518.0, 534.0, 541.0, 542.0, 547.0, 559.0, 567.0, 573.0, 597.0, 598.0, 615.0, 618.0, 779.0,
            908.0, 1018.0, 1043.0,
        ];
        let rab = [
            612.0, 650.0, 673.0, 683.0, 701.0, 701.0, 711.0, 712.0, 722.0, 725.0, 730.0, 745.0, 760.0, 772.0, 841.0,
            854.0, 952.0, 1010.0,
        ];
        let (a, b) = (Sample::from_reps(&cyclic).unwrap(), Sample::from_reps(&rab).unwrap());
        assert!(a.hi > b.lo, "the ranges overlap: {a:?} {b:?}");
        assert!(a.beats(&b, 0.03), "{a:?} {b:?}");
        assert!(!b.beats(&a, 0.03));
        // Middle halves that overlap are a tie, whatever the medians say.
        let c = Sample::from_reps(&[20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0]).unwrap();
        let d = Sample::from_reps(&[23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0]).unwrap();
        assert_eq!((c.q1, c.q3), (21.5, 25.5), "{c:?}");
        assert!(c.median < 0.9 * d.median && c.q3 > d.q1 && !c.beats(&d, 0.03), "{c:?} {d:?}");
    }
}
