//! The tuning log: one [`Measurement`] per JSON line, appended and flushed as each point is
//! measured, which makes a run resumable (a point already in the log for the same operation, p,
//! fabric, algorithm, parameters and size is not measured again), plus a side file of failed
//! points (`<log>.failed`, [`Failure`] lines) so a broken candidate is not retried either. A
//! point measured twice (a confirmation) has two lines; a rerun replays them in order.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::select::file::Measurement;

use super::search::{Candidate, Outcome, ParamMap};
use super::stats::Sample;

/// A point that failed (error or wrong result).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub op: String,
    pub p: u32,
    pub fabric: String,
    pub algorithm: String,
    #[serde(default, skip_serializing_if = "ParamMap::is_empty")]
    pub params: ParamMap,
    pub bytes: u64,
    pub error: String,
}

/// What identifies a point across runs.
pub type Key = (String, u32, String, Candidate, u64);

/// Points already measured, from earlier runs' log lines.
#[derive(Debug, Default)]
pub struct Resume {
    points: HashMap<Key, Vec<Outcome>>,
    /// Lines that were not valid records (a line cut by an interruption).
    pub skipped_lines: usize,
    /// Measurements taken in the other mode (with or without `touch`), not reused.
    pub other_mode: usize,
}

impl Resume {
    /// Reads the log text and the failures text (either may be empty), keeping the measurements
    /// taken in this run's mode (`touch`: receive buffers read after each call). Failures (wrong
    /// results, errors) hold in either mode.
    pub fn parse(log: &str, failed: &str, touch: bool) -> Resume {
        let mut r = Resume::default();
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Measurement>(line) {
                Ok(m) if m.touch != touch => r.other_mode += 1,
                Ok(m) => {
                    let s = Sample::from_reps(&m.samples_us).unwrap_or(Sample::exact(m.median_us));
                    let c = Candidate { algorithm: m.algorithm, params: m.params };
                    r.points.entry((m.op, m.p, m.fabric, c, m.bytes)).or_default().push(Outcome::Ok(s));
                }
                Err(_) => r.skipped_lines += 1,
            }
        }
        for line in failed.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Failure>(line) {
                Ok(f) => {
                    let c = Candidate { algorithm: f.algorithm, params: f.params };
                    r.points.entry((f.op, f.p, f.fabric, c, f.bytes)).or_default().push(Outcome::Failed(f.error));
                }
                Err(_) => r.skipped_lines += 1,
            }
        }
        r
    }

    /// The `nth` (from 0) logged outcome of `key`.
    pub fn get(&self, key: &Key, nth: usize) -> Option<&Outcome> {
        self.points.get(key).and_then(|v| v.get(nth))
    }

    /// Logged outcomes.
    pub fn len(&self) -> usize {
        self.points.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// The log line of a measured point (`touch`: measured with receive buffers read after each call).
pub fn measurement(key: &Key, sample: &Sample, reps: &[f64], touch: bool) -> Measurement {
    let (op, p, fabric, c, bytes) = key;
    Measurement {
        op: op.clone(),
        p: *p,
        fabric: fabric.clone(),
        algorithm: c.algorithm.clone(),
        params: c.params.clone(),
        bytes: *bytes,
        median_us: sample.median,
        samples_us: reps.to_vec(),
        touch,
    }
}

/// The side-file line of a failed point.
pub fn failure(key: &Key, error: &str) -> Failure {
    let (op, p, fabric, c, bytes) = key;
    Failure {
        op: op.clone(),
        p: *p,
        fabric: fabric.clone(),
        algorithm: c.algorithm.clone(),
        params: c.params.clone(),
        bytes: *bytes,
        error: error.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_times_read_back_bit_for_bit() {
        // A resumed run must take the same decisions as the run that wrote the log: a figure read
        // back 1 ULP off can flip a `beats` comparison (serde_json's default float parser is not
        // exactly round-trip; the crate enables `float_roundtrip`).
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let reps: Vec<f64> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((x % 9) as i32 - 2)
            })
            .collect();
        let key: Key = ("bcast".into(), 2, "shm".into(), Candidate::new("binomial"), 64);
        let line = serde_json::to_string(&measurement(&key, &Sample::exact(1.0), &reps, false)).unwrap();
        let back: Measurement = serde_json::from_str(&line).unwrap();
        let off = reps.iter().zip(&back.samples_us).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(off, 0, "{off} of {} times changed through the log", reps.len());
    }

    #[test]
    fn log_lines_round_trip_and_torn_lines_are_skipped() {
        let key: Key = ("allreduce".into(), 4, "shm".into(), Candidate::new("ring").with("segment", 8192), 65536);
        let m = measurement(&key, &Sample::from_reps(&[10.0, 11.0, 12.0]).unwrap(), &[10.0, 11.0, 12.0], false);
        let f = failure(&(key.0.clone(), 4, "shm".into(), Candidate::new("bad"), 64), "wrong result");
        let m2 = measurement(&key, &Sample::exact(20.0), &[20.0], false);
        let line = |m: &Measurement| serde_json::to_string(m).unwrap();
        let log = format!("{}\n{}\n{{\"op\": \"allred", line(&m), line(&m2));
        let r = Resume::parse(&log, &serde_json::to_string(&f).unwrap(), false);
        assert_eq!((r.len(), r.skipped_lines, r.other_mode), (3, 1, 0));
        assert!(matches!(r.get(&key, 0), Some(Outcome::Ok(s)) if s.median == 11.0));
        assert!(matches!(r.get(&key, 1), Some(Outcome::Ok(s)) if s.median == 20.0), "a confirmation replays second");
        assert!(r.get(&key, 2).is_none());
        let fk: Key = ("allreduce".into(), 4, "shm".into(), Candidate::new("bad"), 64);
        assert_eq!(r.get(&fk, 0), Some(&Outcome::Failed("wrong result".into())));
        let other: Key = ("allreduce".into(), 2, "shm".into(), Candidate::new("ring").with("segment", 8192), 65536);
        assert!(r.get(&other, 0).is_none(), "another p is another point");
    }

    #[test]
    fn a_run_reuses_only_measurements_of_its_own_mode() {
        // Untouched lines (as every log before `--touch` existed) and touched ones in one log: a
        // run reuses its own mode's figures and keeps the failures of both.
        let key: Key = ("bcast".into(), 4, "shm".into(), Candidate::new("linear"), 1 << 20);
        let plain = measurement(&key, &Sample::exact(70.0), &[70.0], false);
        let touched = measurement(&key, &Sample::exact(130.0), &[130.0], true);
        let line = |m: &Measurement| serde_json::to_string(m).unwrap();
        assert!(!line(&plain).contains("touch"), "untouched lines are written as before");
        let log = format!("{}\n{}\n", line(&plain), line(&touched));
        let f = failure(&("bcast".into(), 4, "shm".into(), Candidate::new("bad"), 64), "wrong result");
        let failed = serde_json::to_string(&f).unwrap();
        for (touch, want) in [(false, 70.0), (true, 130.0)] {
            let r = Resume::parse(&log, &failed, touch);
            assert_eq!((r.len(), r.other_mode), (2, 1), "touch={touch}");
            assert!(matches!(r.get(&key, 0), Some(Outcome::Ok(s)) if s.median == want), "touch={touch}");
            assert!(r.get(&key, 1).is_none(), "touch={touch}: the other mode's figure is not a confirmation");
        }
    }
}
