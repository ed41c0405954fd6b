//! `fabcoll tune`: the faraj-yuan 2005 §3 empirical autotuner on a real fabric. The search itself
//! is [`fabcoll::tune`]; this file measures its batches and writes the results.
//!
//! A batch = several candidates (algorithm with parameters) at one size ([`measure_batch`]):
//! each is checked once per algorithm and size (so a broken algorithm never wins) and timed once
//! to set its iteration count (`--rep-us` per repetition, at most `--max-iters`); then `--reps`
//! rounds, each one repetition of every candidate, interleaved ([`fabcoll::tune::Rounds`]). A
//! repetition is the bench's timing loop ([`crate::bench::timed_calls`]: barrier-separated
//! calls) and its figure the max over ranks of the per-rank average (one allreduce per round),
//! so every rank sees the same numbers and takes the same decisions. Rank 0 appends each point
//! to the log (flushed at once) and draws the progress bar; a rerun skips the logged points.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabcoll::collectives::registry::{self, Algorithm};
use fabcoll::collectives::{CollArgs, Collective, Params, Topology};
use fabcoll::select::file::DecisionFile;
use fabcoll::select::{Decisions, FabricClass, Features};
use fabcoll::tune::log::{self as tlog, Key, Resume};
use fabcoll::tune::{self, rules, AlgSpace, Axis, Candidate, Outcome, Policy, Problem, Sample, Tuned};
use fabcoll::{Collectives, Communicator, Options, ReduceOp};
use indicatif::{ProgressBar, ProgressStyle};

use crate::bench::{timed_calls, Pace};
use crate::ops::{self, BenchElem};

pub const TUNE_HELP: &str = "\
Method (faraj-yuan 2005 §3): phase 1 tunes each algorithm's parameters (segment: 0, then powers of
two from half the message down to 4 KiB; alltoall barriers: 1, 2, 4, … ≤ p-1) at every grid size
(1 B, 64 B, 512 B, 1 KiB, 2 KiB, … doubling to --max-size) and binary-searches the size where the
best value changes (to a factor √2); phase 2 does the same across algorithms, with the embedded
default as the incumbent: another choice wins only if it is faster by more than --margin AND the
middle half of its repetitions lies below the incumbent's (after dropping repetitions slower than median +
3·1.4826·MAD or than 1.5 × the second-fastest), AND the default does not beat it so at both
neighbouring grid sizes, AND it wins so again in 3 fresh rounds measuring it and the default
together. Each point is verified once per algorithm and size; failures are skipped.

Measuring: all candidates of a grid size (every algorithm, every parameter value) are one batch
whose repetitions interleave (A B C, B C A, … for --reps rounds), so a drift of the machine hits
them alike; from the second round, a candidate whose repetition is a single call and whose fastest
repetition is --race × the leader's median leaves the batch.

Checking a tuned file: `fabcoll tune --compare FILE [--rounds 4]` measures, per grid size, the
defaults' choice and the file's alternately and prints tuned/default (median over rounds) with a
noise band from the sizes where both choose alike (see scripts/tune-vs-defaults.sh).

Decision file: one run tunes one placement (the job's size p, its nodes m, the most ranks on one
node k) and writes rules `p: [p, p]`, `nodes: [m, m]`, `per_node: [k, k]` per operation (the last one
without a size condition), followed by the embedded default rules for other placements. `--merge
FILE` starts from FILE and replaces only the tuned operations' rules of this placement, so runs on
several sizes and placements make one file:
  fabrun -n 2 --fabric shm fabcoll tune --out decisions.json
  fabrun -n 4 --fabric shm fabcoll tune --merge decisions.json --out decisions.json
  fabrun -n 4 --nodes 2 fabcoll tune --merge decisions.json --out decisions.json
  FABCOLL_TUNING_FILE=decisions.json my-program

Resuming: every measured point is appended (and flushed) to --log as a JSON line (failed points to
<log>.failed); a rerun with the same log does not measure them again.";

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// Operations to tune (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "allreduce,bcast,allgather,alltoall", value_parser = crate::parse_coll)]
    pub(crate) ops: Vec<Collective>,
    /// Smallest grid size (bytes; suffixes K, M, G).
    #[arg(long, default_value = "1", value_parser = crate::parse_size)]
    min_size: u64,
    /// Largest grid size.
    #[arg(long, default_value = "64M", value_parser = crate::parse_size)]
    max_size: u64,
    /// Repetitions per point. 18 rather than 9: a log of 18 agrees with itself (best of the even
    /// repetitions within 10 % of the odd ones') at more of its points (docs/measurements/2026-11-27-tuner.md).
    #[arg(long, default_value_t = 18, value_parser = clap::value_parser!(u32).range(1..=1000))]
    reps: u32,
    /// Target time of one repetition in µs (iterations = this / one call's time). Short
    /// repetitions, many of them: another job's burst on a shared core disturbs whole
    /// repetitions, and the figure drops the disturbed ones (fabcoll::tune::stats).
    #[arg(long, default_value_t = 500.0)]
    rep_us: f64,
    /// Most iterations per repetition.
    #[arg(long, default_value_t = 200)]
    max_iters: usize,
    /// Racing: from the second round of a batch, a candidate whose repetition is one call and
    /// whose fastest repetition is slower than this factor × the leader's median stops being
    /// measured (0 = off).
    #[arg(long, default_value_t = 1.5)]
    race: f64,
    /// Relative margin a choice must beat the incumbent by.
    #[arg(long, default_value_t = 0.03)]
    margin: f64,
    /// Above --prune-above, stop measuring algorithms slower than this factor × the fastest at a
    /// grid size (0 = never).
    #[arg(long, default_value_t = 3.0)]
    prune: f64,
    #[arg(long, default_value = "1M", value_parser = crate::parse_size)]
    prune_above: u64,
    /// The decision file to write (rank 0).
    #[arg(long, default_value = "decisions.json")]
    out: PathBuf,
    /// Start from this decision file, replacing its rules for this p (see below).
    #[arg(long, value_name = "FILE")]
    merge: Option<PathBuf>,
    /// The log of measured points (JSON lines; makes the run resumable).
    #[arg(long, default_value = "tune-log.jsonl")]
    log: PathBuf,
    /// Stop measuring after this many minutes; unmeasured sizes keep the default.
    #[arg(long)]
    budget_minutes: Option<f64>,
    /// Draw the measured decision map (every p in the log × grid sizes → winner) to this SVG or
    /// PNG; with several operations, one file per operation (`map-allreduce.svg`, …).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Every rank reads its receive buffer after each timed call (untimed, as `fabcoll bench
    /// --touch`): tunes for applications that use their results, where OSU-style loops flatter
    /// algorithms whose receivers never read the data. The log keeps the two kinds of
    /// measurement apart (a run reuses only its own kind).
    #[arg(long)]
    pub touch: bool,
    /// Instead of tuning: benchmark this decision file's choices against the embedded defaults
    /// over the grid (--ops, --min-size, --max-size, --reps, --rep-us, --max-iters), alternating
    /// over --rounds rounds, and report per size the median ratio and a noise band.
    #[arg(long, value_name = "FILE")]
    compare: Option<PathBuf>,
    /// --compare: alternating rounds per size.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
}

pub(crate) fn err(e: fabcoll::Error) -> String {
    e.to_string()
}

/// Bytes per element: f32 for reductions, u8 for data movers (as `fabcoll bench`).
pub(crate) fn elem_size(op: Collective) -> u64 {
    if op.is_reduction() {
        4
    } else {
        1
    }
}

/// The eligible algorithms of `op` at `p` and their tunable parameters.
fn space(op: Collective, p: u32) -> Vec<AlgSpace> {
    let args = CollArgs::new(op, 0, p, 1).with_commutative(true);
    registry::eligible(&args)
        .map(|a| {
            let mut axes = vec![Axis::Segment { min: 4096 }];
            for spec in a.params {
                let top = if spec.name == "barriers" { u64::from(p.saturating_sub(1)).max(1) } else { 64 };
                let mut values: Vec<u64> = std::iter::successors(Some(spec.min.max(1)), |v| v.checked_mul(2))
                    .take_while(|v| *v <= top.min(spec.max))
                    .collect();
                values.push(top.min(spec.max));
                values.sort_unstable();
                values.dedup();
                axes.push(Axis::Values { name: spec.name.into(), default: spec.default, values });
            }
            AlgSpace { name: a.name.into(), axes }
        })
        .collect()
}

/// What a rule sees of the job besides the call: the fabric's class, whether the ranks share
/// CPUs, and where they sit (the communicator's topology; the placement rules of a tuned file
/// hold only with it).
#[derive(Clone, Debug)]
pub(crate) struct Venue {
    pub class: FabricClass,
    pub sharing: bool,
    pub topology: Option<Arc<Topology>>,
}

impl Venue {
    pub fn of(c: &Communicator) -> Venue {
        Venue {
            class: FabricClass::of_name(&c.fabric_name()),
            sharing: c.shares_cpus(),
            topology: Some(c.topology().clone()),
        }
    }

    /// `d`'s choice for `args` with this venue's features, and its topology where that has
    /// `args.size` ranks (the decision map's other p go without).
    pub fn choose(&self, d: &Decisions, args: CollArgs) -> fabcoll::Result<(&'static Algorithm, Params)> {
        let args = match &self.topology {
            Some(t) if t.size() == args.size => args.with_topology(t.clone()),
            _ => args,
        };
        let f = Features::of(&args)?.on(self.class).sharing_cpus(self.sharing);
        d.choose(&args, &f)
    }
}

/// The embedded default's algorithm for `op` at `p` and `bytes` (commutative reductions) at `venue`.
pub(crate) fn default_choice(op: Collective, p: u32, bytes: u64, venue: &Venue) -> Candidate {
    let es = elem_size(op);
    let mut args = CollArgs::new(op, 0, p, bytes / es).with_commutative(true);
    args.elem_size = es as u32;
    match Decisions::embedded().and_then(|d| venue.choose(d, args.clone())) {
        Ok((a, _)) => Candidate::new(a.name),
        Err(_) => Candidate::new(registry::eligible(&args).next().map_or("?", |a| a.name)),
    }
}

/// The grid of `op` at `p`: faraj-yuan sizes that hold a whole element.
pub(crate) fn grid_of(op: Collective, p: u32, a: &TuneArgs) -> Vec<u64> {
    let es = elem_size(op);
    tune::grid(a.min_size, a.max_size, es)
        .into_iter()
        .filter(|&b| ops::shape(op, p, 0, b, es as usize).is_some())
        .collect()
}

fn policy(a: &TuneArgs) -> Policy {
    Policy {
        rel: a.margin,
        prune: if a.prune > 0.0 { a.prune } else { f64::INFINITY },
        prune_above: a.prune_above,
        ..Policy::default()
    }
}

/// Rank 0's side of a run: log files and the progress bar.
struct Out {
    log: std::fs::File,
    failed: std::fs::File,
    bar: ProgressBar,
    last_line: Instant,
    /// Where the bar stands when the current operation is done.
    op_end: u64,
}

impl Out {
    fn append(file: &mut std::fs::File, line: &str) -> Result<(), String> {
        file.write_all(format!("{line}\n").as_bytes()).and_then(|()| file.flush()).map_err(|e| format!("log: {e}"))
    }

    /// Without a terminal (under fabrun) the bar is hidden: a plain line every 10 s instead.
    fn tick(&mut self) {
        if self.bar.is_hidden() && self.last_line.elapsed() > Duration::from_secs(10) {
            self.last_line = Instant::now();
            let (pos, len) = (self.bar.position() as f64, self.bar.length().unwrap_or(1).max(1) as f64);
            let t = self.bar.elapsed().as_secs_f64();
            // Linear in the weighted progress (indicatif's own estimate follows the last steps).
            let eta = if pos > 0.0 { t * (len - pos) / pos } else { f64::NAN };
            eprintln!("tune: {:.0}% elapsed {t:.0} s ETA {eta:.0} s — {}", 100.0 * pos / len, self.bar.message());
        }
    }
}

/// Everything a run shares across operations.
struct Run<'a> {
    c: &'a Communicator,
    a: &'a TuneArgs,
    fabric: String,
    resume: Resume,
    out: Option<Out>,
    start: Instant,
    /// How often each point was asked for in this run (a confirmation asks twice).
    asked: HashMap<Key, usize>,
    /// Points measured by this run (not taken from the log).
    fresh: usize,
}

/// Progress weight of one point (roughly proportional to its cost).
fn weight(bytes: u64) -> u64 {
    1 + bytes / (512 << 10)
}

/// The bar's share of one operation: its phase-1 grid points × 3 (parameter values, binary
/// searches and confirmations), by weight.
fn op_share(op: Collective, p: u32, a: &TuneArgs) -> u64 {
    3 * grid_of(op, p, a).iter().map(|&b| weight(b) * space(op, p).len() as u64).sum::<u64>()
}

impl Run<'_> {
    /// Whether the budget is spent (decided on rank 0, agreed by all).
    fn over_budget(&self) -> Result<bool, String> {
        let Some(m) = self.a.budget_minutes else { return Ok(false) };
        let mut f = [u32::from(self.c.rank() == 0 && self.start.elapsed().as_secs_f64() > m * 60.0)];
        self.c.allreduce_in_place(&mut f[..], &ReduceOp::Max).map_err(err)?;
        Ok(f[0] > 0)
    }

    fn tune_op<T: BenchElem>(&mut self, op: Collective) -> Result<Tuned, String> {
        let (c, p, r) = (self.c, self.c.size(), self.c.rank());
        let es = std::mem::size_of::<T>();
        let grid = grid_of(op, p, self.a);
        let max = *grid.last().ok_or_else(|| format!("{op}: no grid size in the size range"))?;
        let big = ops::shape(op, p, r, max, es).ok_or_else(|| format!("{op}: bad size {max}"))?;
        let mut sendbuf = c.alloc::<T>(big.send_len).map_err(err)?;
        let mut recvbuf = c.alloc::<T>(big.recv_len).map_err(err)?;
        let venue = Venue::of(c);
        let def = move |b: u64| default_choice(op, p, b, &venue);
        let problem = Problem {
            grid: grid.clone(),
            align: es as u64,
            algorithms: space(op, p),
            default: &def,
            policy: policy(self.a),
        };
        let mut verified: HashSet<(String, u64)> = HashSet::new();
        let mut expected: Option<(u64, Vec<T>)> = None;
        let mut fatal: Option<String> = None;
        let race = self.a.race;
        let t = tune::tune(&problem, &mut |cands: &[Candidate], bytes: u64| {
            let mut outcomes = vec![Outcome::Unmeasured; cands.len()];
            if fatal.is_some() {
                return outcomes;
            }
            // Logged points (a resumed run) are replayed; the others are measured in one batch.
            let mut todo: Vec<(usize, Key)> = Vec::new();
            for (i, cand) in cands.iter().enumerate() {
                let key: Key = (op.name().into(), p, self.fabric.clone(), cand.clone(), bytes);
                if let Some(o) = self.out.as_mut() {
                    // Within the operation's share of the bar (the search's length is not known ahead).
                    let room = o.op_end.saturating_sub(o.bar.position() + 1);
                    o.bar.inc(weight(bytes).min(room));
                    o.bar.set_message(format!("{op} {bytes} B {cand}"));
                    o.tick();
                }
                let nth = self.asked.entry(key.clone()).or_insert(0);
                *nth += 1;
                match self.resume.get(&key, *nth - 1) {
                    Some(o) => outcomes[i] = o.clone(),
                    None => todo.push((i, key)),
                }
            }
            if todo.is_empty() {
                return outcomes;
            }
            match self.over_budget() {
                Ok(false) => {}
                Ok(true) => return outcomes,
                Err(e) => {
                    fatal = Some(e);
                    return outcomes;
                }
            }
            let Some(s) = ops::shape(op, p, r, bytes, es) else {
                for (i, _) in &todo {
                    outcomes[*i] = Outcome::Failed(format!("{bytes} bytes hold no whole element"));
                }
                return outcomes;
            };
            let batch: Vec<Candidate> = todo.iter().map(|(i, _)| cands[*i].clone()).collect();
            let check: Vec<bool> = batch.iter().map(|c| verified.insert((c.algorithm.clone(), bytes))).collect();
            let want = if check.iter().any(|&x| x) {
                if expected.as_ref().is_none_or(|(b, _)| *b != bytes) {
                    expected = Some((bytes, ops::expected::<T>(&s, r)));
                }
                expected.as_ref().map(|(_, w)| w.as_slice())
            } else {
                None
            };
            self.fresh += batch.len();
            let (send, recv) = (&mut sendbuf[..s.send_len], &mut recvbuf[..s.recv_len]);
            let results = match measure_batch(c, &s, &batch, es as u64, send, recv, &check, want, self.a, race) {
                Ok(x) => x,
                Err(e) => {
                    fatal = Some(e);
                    return outcomes;
                }
            };
            for ((i, key), res) in todo.iter().zip(results) {
                let cand = &cands[*i];
                outcomes[*i] = match res {
                    Ok(reps) => match Sample::from_reps(&reps) {
                        Some(x) => {
                            if let Some(o) = self.out.as_mut() {
                                let line = serde_json::to_string(&tlog::measurement(key, &x, &reps, self.a.touch))
                                    .unwrap_or_default();
                                if let Err(e) = Out::append(&mut o.log, &line) {
                                    fatal = Some(e);
                                }
                            }
                            Outcome::Ok(x)
                        }
                        None => Outcome::Failed("no finite repetition".into()),
                    },
                    Err(why) => {
                        if let Some(o) = self.out.as_mut() {
                            o.bar.suspend(|| eprintln!("tune: {op} {cand} at {bytes} B failed: {why}"));
                            let line = serde_json::to_string(&tlog::failure(key, &why)).unwrap_or_default();
                            if let Err(e) = Out::append(&mut o.failed, &line) {
                                fatal = Some(e);
                            }
                        }
                        Outcome::Failed(why)
                    }
                };
            }
            outcomes
        });
        c.barrier().map_err(err)?;
        match fatal {
            Some(e) => Err(e),
            None => Ok(t),
        }
    }
}

/// The options that force `cand` (`segment` from bytes to elements of `es` bytes).
fn options_of(cand: &Candidate, es: u64) -> Options {
    let mut opts = Options::algorithm(&cand.algorithm);
    for (k, &v) in &cand.params {
        opts = opts.param(k, if k == "segment" { (v / es).max(1) } else { v });
    }
    opts
}

/// Measures a batch of candidates at one size. Outer error: the communicator failed (fatal);
/// inner, per candidate: it failed or gave a wrong result (recorded and skipped). `check[i]`:
/// check candidate i's result against `want`.
///
/// Each candidate: one call (checked), one timed call that sets its iteration count (`--rep-us`
/// per repetition, at most `--max-iters`); then `--reps` rounds, each one repetition of every
/// candidate in the race, interleaved with a rotating start ([`tune::Rounds`], racing factor
/// `race` for the candidates whose repetition is a single call). A repetition is the bench's timing loop (barrier-separated calls, after one untimed
/// call that brings the candidate's plan and buffers back when it runs more than one call);
/// its figure is the max over ranks of the per-rank average (one allreduce per round, so every
/// rank sees the same numbers and drops the same candidates).
#[allow(clippy::too_many_arguments)]
pub(crate) fn measure_batch<T: BenchElem>(
    c: &Communicator,
    s: &ops::Shape,
    cands: &[Candidate],
    es: u64,
    send: &mut [T],
    recv: &mut [T],
    check: &[bool],
    want: Option<&[T]>,
    a: &TuneArgs,
    race: f64,
) -> Result<Vec<Result<Vec<f64>, String>>, String> {
    let r = c.rank();
    let opts: Vec<Options> = cands.iter().map(|cand| options_of(cand, es)).collect();
    let ws: Vec<_> = opts.iter().map(|o| c.with(o)).collect();
    let mut out: Vec<Result<Vec<f64>, String>> = vec![Ok(Vec::new()); cands.len()];
    let mut iters = vec![1usize; cands.len()];
    // The tuner's timing: OSU's barrier between calls, receive buffers read if --touch.
    let pace = Pace { barrier: true, touch: a.touch, block: false };
    for (i, w) in ws.iter().enumerate() {
        let want = if check.get(i).copied().unwrap_or(false) { want } else { None };
        if want.is_some() {
            ops::fill(s, r, send, recv);
        }
        let res = ops::issue(w, s, send, recv);
        let bad = want.is_some_and(|want| res.is_ok() && recv != want);
        let mut flags = [u32::from(res.is_err()), u32::from(bad)];
        c.allreduce_in_place(&mut flags[..], &ReduceOp::Sum).map_err(err)?;
        if flags[0] > 0 {
            let why = res.err().map_or("(on another rank)".to_owned(), |e| e.to_string());
            out[i] = Err(format!("error on {} rank(s): {why}", flags[0]));
            continue;
        }
        if flags[1] > 0 {
            out[i] = Err(format!("wrong result on {} rank(s)", flags[1]));
            continue;
        }
        let mut once = timed_calls(c, w, s, send, recv, 1, 0, pace)?;
        c.allreduce_in_place(&mut once[..], &ReduceOp::Max).map_err(err)?;
        iters[i] = ((a.rep_us / once[0].max(0.01)).ceil() as usize).clamp(1, a.max_iters.max(1));
    }
    let ok: Vec<usize> = (0..cands.len()).filter(|&i| out[i].is_ok()).collect();
    // Racing only where a repetition is one call (long messages: module doc of tune::rounds).
    let racing = ok.iter().map(|&i| iters[i] == 1).collect();
    let mut rounds = tune::Rounds::new(ok.len(), a.reps as usize, race).racing(racing);
    while let Some(order) = rounds.next_order() {
        let mut v = Vec::with_capacity(order.len());
        for &k in &order {
            let i = ok[k];
            let t = timed_calls(c, &ws[i], s, send, recv, iters[i], usize::from(iters[i] > 1), pace)?;
            v.push(t.iter().sum::<f64>() / t.len().max(1) as f64);
        }
        c.allreduce_in_place(&mut v[..], &ReduceOp::Max).map_err(err)?;
        rounds.record(&order, &v);
    }
    for (k, reps) in rounds.into_reps().into_iter().enumerate() {
        out[ok[k]] = Ok(reps);
    }
    Ok(out)
}

/// A file's text, or empty if it does not exist.
fn read_or_empty(path: &Path) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn failed_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".failed");
    PathBuf::from(s)
}

/// Rank 0 reads the log; every rank gets its text (so all resume from the same points).
fn shared_log(c: &Communicator, a: &TuneArgs) -> Result<Resume, String> {
    let mut texts = Vec::new();
    for path in [a.log.clone(), failed_path(&a.log)] {
        let mut bytes = if c.rank() == 0 { read_or_empty(&path)?.into_bytes() } else { Vec::new() };
        let mut len = [bytes.len() as u64];
        c.bcast(&mut len[..], 0).map_err(err)?;
        bytes.resize(len[0] as usize, 0);
        if len[0] > 0 {
            c.bcast(&mut bytes[..], 0).map_err(err)?;
        }
        texts.push(String::from_utf8(bytes).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    Ok(Resume::parse(&texts[0], &texts[1], a.touch))
}

/// "hostname (cpu model, n cpus)".
fn machine() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_owned();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{host} ({cpu}, {n} cpus)")
}

/// The decision map of `op` from the log: every p logged for this fabric, its grid winners
/// (recomputed by the same search over the logged points).
/// `venue`: this run's, taken for the other p of the log too.
fn plot(
    op: Collective,
    a: &TuneArgs,
    fabric: &str,
    venue: &Venue,
    this_p: u32,
    this: &Tuned,
    path: &Path,
) -> Result<(), String> {
    let log = read_or_empty(&a.log)?;
    let resume = Resume::parse(&log, &read_or_empty(&failed_path(&a.log))?, a.touch);
    let mut ps: BTreeSet<u32> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<fabcoll::select::file::Measurement>(l).ok())
        .filter(|m| m.op == op.name() && m.fabric == fabric && m.touch == a.touch)
        .map(|m| m.p)
        .collect();
    ps.insert(this_p);
    let mut winners: BTreeMap<u32, BTreeMap<u64, String>> = BTreeMap::new();
    for &p in &ps {
        let points = if p == this_p {
            this.grid.clone()
        } else {
            let def = |b: u64| default_choice(op, p, b, venue);
            let problem = Problem {
                grid: grid_of(op, p, a),
                align: elem_size(op),
                algorithms: space(op, p),
                default: &def,
                policy: policy(a),
            };
            let mut asked: HashMap<Key, usize> = HashMap::new();
            tune::tune_each(&problem, &mut |cand, bytes| {
                let key: Key = (op.name().into(), p, fabric.to_owned(), cand.clone(), bytes);
                let nth = asked.entry(key.clone()).or_insert(0);
                *nth += 1;
                resume.get(&key, *nth - 1).cloned().unwrap_or(Outcome::Unmeasured)
            })
            .grid
        };
        let w = winners.entry(p).or_default();
        for g in points.into_iter().filter(|g| g.winner_us.is_some()) {
            w.insert(g.bytes, g.winner.algorithm);
        }
    }
    let sizes: BTreeSet<u64> = winners.values().flat_map(|w| w.keys().copied()).collect();
    let ps: Vec<u32> = ps.into_iter().collect();
    let sizes: Vec<u64> = sizes.into_iter().collect();
    let cells =
        ps.iter().map(|p| sizes.iter().map(|s| winners.get(p).and_then(|w| w.get(s)).cloned()).collect()).collect();
    let grid = crate::map::MapGrid {
        title: format!("{op}: measured fastest algorithm ({fabric})"),
        x_label: "message size (bytes)".into(),
        y_label: "processes".into(),
        ps,
        sizes,
        cells,
        note: format!("fabcoll tune on {} — phase-2 winners at the grid sizes", machine()),
    };
    crate::map::render(&grid, path)
}

fn plot_path(base: &Path, op: Collective, several: bool) -> PathBuf {
    if !several {
        return base.to_owned();
    }
    let stem = base.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "map".into());
    let ext = base.extension().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "svg".into());
    base.with_file_name(format!("{stem}-{}.{ext}", op.name()))
}

/// Rank 0's summary of one operation: grid sizes, default and chosen with their times.
fn summary(op: Collective, p: u32, t: &Tuned) -> String {
    let mut s = format!("# {op} p={p}: {} points, {} failed\n", t.measured, t.failures.len());
    s += &format!("# {:>10} {:>36} {:>10} {:>44} {:>10} {:>6}\n", "bytes", "default", "us", "tuned", "us", "ratio");
    for g in &t.grid {
        let (du, wu) = (g.default_us.unwrap_or(f64::NAN), g.winner_us.unwrap_or(f64::NAN));
        s += &format!(
            "  {:>10} {:>36} {:>10.2} {:>44} {:>10.2} {:>6.2}\n",
            g.bytes,
            g.default.to_string(),
            du,
            g.winner.to_string(),
            wu,
            wu / du
        );
    }
    s
}

/// One rank's whole run.
fn rank_main(c: &Communicator, a: &TuneArgs) -> Result<(), String> {
    let p = c.size();
    let at = rules::TunedAt::of(c.topology());
    let fabric = crate::env_fabric();
    let resume = shared_log(c, a)?;
    let mut file: DecisionFile = match &a.merge {
        Some(path) => Decisions::from_file(path).map_err(err)?.file().clone(),
        None => rules::new_file(Default::default()),
    };
    let out = if c.rank() == 0 {
        let open = |path: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let total: u64 = a.ops.iter().map(|&op| op_share(op, p, a)).sum();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {percent:>3}% ETA {eta} {wide_msg}")
                .map_err(|e| e.to_string())?,
        );
        if resume.other_mode > 0 {
            let (theirs, ours) = if a.touch { ("without", "with") } else { ("with", "without") };
            bar.suspend(|| {
                eprintln!(
                    "tune: {} logged points were measured {theirs} --touch; this run ({ours}) measures them again",
                    resume.other_mode
                )
            });
        }
        if !resume.is_empty() {
            bar.suspend(|| eprintln!("tune: resuming with {} logged points", resume.len()));
        }
        Some(Out { log: open(&a.log)?, failed: open(&failed_path(&a.log))?, bar, last_line: Instant::now(), op_end: 0 })
    } else {
        None
    };
    let mut run =
        Run { c, a, fabric: fabric.clone(), resume, out, start: Instant::now(), asked: HashMap::new(), fresh: 0 };
    let tail = Decisions::embedded().map_err(err)?.file().rules.clone();
    let mut report = String::new();
    let mut tuned = Vec::new();
    for &op in &a.ops {
        if let Some(o) = run.out.as_mut() {
            o.op_end = o.bar.position() + op_share(op, p, a);
        }
        let t = if op.is_reduction() { run.tune_op::<f32>(op)? } else { run.tune_op::<u8>(op)? };
        let comm = op.is_reduction().then_some(true);
        rules::merge(&mut file, op.name(), at, rules::rules_for(op.name(), at, comm, &t.pieces), &tail);
        report += &summary(op, p, &t);
        if let Some(o) = run.out.as_mut() {
            o.bar.set_position(o.op_end);
        }
        tuned.push((op, t));
    }
    let secs = run.start.elapsed().as_secs_f64();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let ops: Vec<&str> = a.ops.iter().map(|o| o.name()).collect();
    let notes = format!(
        "{} in {secs:.0} s; grid {}..={} B; {} reps of ≥ {} µs; margin {}; prune {} above {} B",
        ops.join(","),
        a.min_size,
        a.max_size,
        a.reps,
        a.rep_us,
        a.margin,
        a.prune,
        a.prune_above
    ) + if a.touch { "; receive buffers read after each call (--touch)" } else { "" };
    rules::stamp(&mut file, &machine(), &fabric, at, &rules::rfc3339(now), &notes);
    // Validated by the loader (on every rank: all agree on failing) before rank 0 writes it.
    let text = Decisions::new(file).and_then(|d| d.to_json()).map_err(|e| format!("the tuned file is invalid: {e}"))?;
    if let Some(o) = run.out.take() {
        o.bar.finish_and_clear();
        std::fs::write(&a.out, text).map_err(|e| format!("{}: {e}", a.out.display()))?;
        print!("{report}");
        println!(
            "# tuned p={p} on {fabric} in {secs:.1} s: {} points measured now, {} from the log; wrote {}",
            run.fresh,
            run.asked.values().sum::<usize>() - run.fresh,
            a.out.display()
        );
        if let Some(base) = &a.plot {
            for (op, t) in &tuned {
                let path = plot_path(base, *op, a.ops.len() > 1);
                match plot(*op, a, &fabric, &Venue::of(c), p, t, &path) {
                    Ok(()) => println!("# map: {}", path.display()),
                    Err(e) => eprintln!("tune: --plot {}: {e}", path.display()),
                }
            }
        }
    }
    Ok(())
}

/// `fabcoll tune` (run under fabrun).
pub fn main(a: TuneArgs) -> Result<(), String> {
    if a.min_size > a.max_size {
        return Err(format!("--min-size {} is larger than --max-size {}", a.min_size, a.max_size));
    }
    if a.ops.is_empty() {
        return Err("--ops is empty".into());
    }
    let c = Communicator::from_env().map_err(err)?;
    let run = match &a.compare {
        Some(file) => crate::tune_compare::rank_main(&c, &a, file, a.rounds as usize),
        None => rank_main(&c, &a),
    };
    run.map_err(|e| format!("rank {}: {e}", c.rank()))?;
    // Leave together, so that no rank's exit is taken for a failure by a slower one.
    c.barrier().map_err(|e| format!("rank {}: {e}", c.rank()))
}
