//! The OSU-style sweep of `fabcoll bench`: per size, warm-up, then timed iterations
//! `t0; collective; t1` each followed by an untimed barrier; per-rank average, then average, min and
//! max over ranks, and p50/p99 over every rank's single iterations (gathered to rank 0).

use std::time::Instant;

use fabcoll::collectives::Collective;
use fabcoll::{Collectives, Communicator, Options, ReduceOp, Stats, WithOptions};

use crate::ops::{self, BenchElem, Shape};

/// What to sweep.
#[derive(Clone, Debug)]
pub struct Config {
    pub coll: Collective,
    /// The rows measured at every size, in one launch: a forced algorithm, or `None` for the
    /// automatic choice. With several, each size runs them in turn, starting one further along
    /// the list at each size, so that rows compare within the same processes and placement.
    pub rows: Vec<Option<String>>,
    pub min_size: u64,
    pub max_size: u64,
    /// Timed iterations and warm-up at sizes up to `large`; scaled down above it.
    pub iters: usize,
    pub warmup: usize,
    pub large: u64,
    /// Scaled iteration counts stay at least this (never more than `iters`).
    pub min_iters: usize,
    pub check: bool,
    /// What happens between timed iterations.
    pub pace: Pace,
    /// Every rank prints its engine's counters for the timed calls of each size (stderr).
    pub stats: bool,
    /// The buffers come from the heap, as most programs' do, instead of `Communicator::alloc`
    /// (on shm: memory peers map and copy into directly; into heap memory they copy with
    /// `process_vm_writev`).
    pub heap: bool,
    /// With `heap`: the buffers start this many bytes past a 4 KiB boundary.
    pub heap_offset: Option<usize>,
    /// The calls are made in place (`ops::IN_PLACE`).
    pub in_place: bool,
}

/// What happens after each timed call, untimed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Pace {
    /// A barrier (OSU); off = back-to-back iterations (mpibench, nccl-tests).
    pub barrier: bool,
    /// Every rank reads its whole receive buffer, as an application that uses the result does.
    /// OSU, nccl-tests and the peer figures never touch it, which flatters algorithms whose
    /// receivers do not read what they get either: on shared memory the next call's writer then
    /// finds the lines in its own cache instead of taking them from the receiver's.
    pub touch: bool,
    /// Back-to-back calls timed as one block (mpibench's method; `barrier` and `touch` off):
    /// timing each call adds two clock reads per call, a sizeable share of an 8 B collective on
    /// shared memory, that the peers' loops do not pay (`docs/measurements/2026-11-27-cli.md`).
    pub block: bool,
}

impl Config {
    /// (timed, warm-up) iterations at `bytes`.
    pub fn iterations(&self, bytes: u64) -> (usize, usize) {
        if bytes <= self.large {
            return (self.iters, self.warmup);
        }
        let scale = |k: usize, floor: usize| ((k as u64 * self.large / bytes) as usize).max(floor).min(k);
        (scale(self.iters, self.min_iters), scale(self.warmup, 2))
    }

    /// The sizes of the sweep: min, 2·min, … ≤ max (barrier: one row).
    pub fn sizes(&self) -> Vec<u64> {
        if self.coll == Collective::Barrier {
            return vec![0];
        }
        let mut v = Vec::new();
        let mut s = self.min_size.max(1);
        while s <= self.max_size {
            v.push(s);
            s = match s.checked_mul(2) {
                Some(x) => x,
                None => break,
            };
        }
        v
    }
}

/// One result line (filled on rank 0).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub op: String,
    /// The algorithm that ran.
    pub algorithm: String,
    /// What the row asked for: `auto` or the forced algorithm's name.
    pub asked: String,
    pub ranks: u32,
    pub bytes: u64,
    pub count: usize,
    pub iters: usize,
    pub warmup: usize,
    pub avg_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// "ok", "FAIL" or "-" (not checked).
    pub check: String,
}

fn err(e: fabcoll::Error) -> String {
    e.to_string()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let k = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

/// The timing loop (shared with `fabcoll tune`): `warmup` untimed calls of `s` through `w`, a
/// barrier, then `iters` timed calls `t0; collective; t1`, each followed by what `pace` asks
/// (untimed). Returns this rank's per-call times in µs — or, with `pace.block`, one value: the
/// mean of `iters` back-to-back calls timed as a whole.
#[allow(clippy::too_many_arguments)]
pub fn timed_calls<T: BenchElem>(
    c: &Communicator,
    w: &WithOptions<'_>,
    s: &Shape,
    send: &[T],
    recv: &mut [T],
    iters: usize,
    warmup: usize,
    pace: Pace,
) -> Result<Vec<f64>, String> {
    for _ in 0..warmup {
        ops::issue(w, s, send, recv).map_err(err)?;
    }
    c.barrier().map_err(err)?;
    if pace.block {
        let t0 = Instant::now();
        for _ in 0..iters {
            ops::issue(w, s, send, recv).map_err(err)?;
        }
        return Ok(vec![if iters == 0 { 0.0 } else { t0.elapsed().as_secs_f64() * 1e6 / iters as f64 }]);
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        ops::issue(w, s, send, recv).map_err(err)?;
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
        if pace.touch {
            read_every_line(recv);
        }
        if pace.barrier {
            c.barrier().map_err(err)?;
        }
    }
    Ok(samples)
}

/// Loads one byte of every cache line of `buf` (the lines end up in this core's cache).
fn read_every_line<T: BenchElem>(buf: &[T]) {
    // SAFETY: `BenchElem` is implemented for f32 and u8 only, plain values without padding, so
    // every byte of the slice is initialized and may be read as a u8.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), std::mem::size_of_val(buf)) };
    let sum = bytes.iter().step_by(64).fold(0u8, |a, &b| a.wrapping_add(b));
    std::hint::black_box(sum);
}

/// One rank's `--stats` line: the counters that moved during a size's timed calls.
fn stats_line(rank: u32, bytes: u64, calls: usize, d: &Stats) -> String {
    let moved: Vec<String> =
        d.counters().into_iter().filter(|&(_, v)| v > 0).map(|(name, v)| format!("{name}={v}")).collect();
    let moved = if moved.is_empty() { "nothing counted".to_owned() } else { moved.join(" ") };
    format!("stats rank={rank} bytes={bytes} calls={calls} {moved}")
}

/// Runs the sweep on this rank; `emit` gets each row on rank 0. Returns whether every check
/// passed (always true without `--check`).
pub fn run(c: &Communicator, cfg: &Config, emit: &mut dyn FnMut(&Row)) -> Result<bool, String> {
    if cfg.coll.is_reduction() {
        sweep::<f32>(c, cfg, emit)
    } else {
        sweep::<u8>(c, cfg, emit)
    }
}

fn sweep<T: BenchElem>(c: &Communicator, cfg: &Config, emit: &mut dyn FnMut(&Row)) -> Result<bool, String> {
    let (r, p) = (c.rank(), c.size());
    let es = std::mem::size_of::<T>();
    let shapes: Vec<Shape> = cfg
        .sizes()
        .into_iter()
        .filter_map(|b| ops::shape(cfg.coll, p, r, b, es))
        .map(|s| Shape { in_place: cfg.in_place, ..s })
        .collect();
    if shapes.is_empty() {
        return Err(format!(
            "no size in {}..={} bytes holds a whole {} element for {}",
            cfg.min_size,
            cfg.max_size,
            T::NAME,
            cfg.coll
        ));
    }
    // Registered once for the largest size, so the registration cache is not measured.
    let max_send = shapes.iter().map(|s| s.send_len).max().unwrap_or(0);
    let max_recv = shapes.iter().map(|s| s.recv_len).max().unwrap_or(0);
    let (mut send_pinned, mut recv_pinned, mut send_heap, mut recv_heap);
    let (sendbuf, recvbuf): (&mut [T], &mut [T]) = if cfg.heap {
        let size = std::mem::size_of::<T>();
        if let Some(off) = cfg.heap_offset.filter(|&off| off % size != 0 || off >= 4096) {
            return Err(format!("--heap-offset {off}: not a multiple of the {size}-byte element below 4096"));
        }
        let slack = if cfg.heap_offset.is_some() { 4096 / size } else { 0 };
        send_heap = vec![T::from_u64(0); max_send + slack];
        recv_heap = vec![T::from_u64(0); max_recv + slack];
        let (s, r) = match cfg.heap_offset {
            // The element at which the buffer lies `off` bytes past a page boundary.
            Some(off) => {
                let at = |v: &Vec<T>| ((off + 4096 - v.as_ptr() as usize % 4096) % 4096) / size;
                (at(&send_heap), at(&recv_heap))
            }
            None => (0, 0),
        };
        (&mut send_heap[s..s + max_send], &mut recv_heap[r..r + max_recv])
    } else {
        send_pinned = c.alloc::<T>(max_send).map_err(err)?;
        recv_pinned = c.alloc::<T>(max_recv).map_err(err)?;
        (&mut send_pinned, &mut recv_pinned)
    };
    let mut all_ok = true;
    for (i, s) in shapes.iter().enumerate() {
        let (send, recv) = (&mut sendbuf[..s.send_len], &mut recvbuf[..s.recv_len]);
        for k in 0..cfg.rows.len() {
            let asked = &cfg.rows[(i + k) % cfg.rows.len()];
            all_ok &= measure(c, cfg, s, send, recv, asked, emit)?;
        }
    }
    // Nobody leaves (and frees its buffers) while a peer may still write into them.
    c.barrier().map_err(err)?;
    Ok(all_ok)
}

/// One row at one size: an untimed call (checked with `--check`; it learns the algorithm), then
/// the timed calls; rank 0 emits the row. Returns whether the check passed.
fn measure<T: BenchElem>(
    c: &Communicator,
    cfg: &Config,
    s: &Shape,
    send: &mut [T],
    recv: &mut [T],
    asked: &Option<String>,
    emit: &mut dyn FnMut(&Row),
) -> Result<bool, String> {
    let (r, p) = (c.rank(), c.size());
    let opts = Options { algorithm: asked.clone(), ..Options::default() };
    let w = c.with(&opts);
    let mut ok = true;
    // One untimed call: checks the result (with --check) and learns the algorithm.
    ops::fill(s, r, send, recv);
    let alg = c
        .scope(|sc| {
            sc.set_options(opts.clone());
            let req = ops::issue(sc, s, send, recv)?;
            let alg = sc.algorithm_of(&req);
            req.wait()?;
            Ok(alg)
        })
        .map_err(|e| format!("{} at {} bytes: {e}", cfg.coll, s.bytes))?;
    let mut check = "-".to_owned();
    if cfg.check {
        let bad = ops::verify(s, r, recv);
        if let Some(why) = &bad {
            eprintln!("check failed: {} {} bytes: {why}", cfg.coll, s.bytes);
        }
        // Every rank learns how many ranks failed, so all agree on the verdict.
        let mut mine = [u32::from(bad.is_some())];
        c.allreduce_in_place(&mut mine[..], &ReduceOp::Sum).map_err(err)?;
        ok = mine[0] == 0;
        check = if mine[0] == 0 { "ok".into() } else { format!("FAIL({} ranks)", mine[0]) };
    }
    let (iters, warmup) = cfg.iterations(s.bytes);
    let back_to_back = !cfg.pace.barrier && !cfg.pace.touch;
    let before = cfg.stats.then(|| c.stats());
    let block = if back_to_back {
        Some(timed_calls(c, &w, s, send, recv, iters, warmup, Pace { block: true, ..cfg.pace })?[0])
    } else {
        None
    };
    let warmup_left = if back_to_back { 0 } else { warmup };
    let samples = timed_calls(c, &w, s, send, recv, iters, warmup_left, cfg.pace)?;
    if let Some(before) = before {
        // Warm-ups, and with --sync barrier the barriers, are counted too.
        let calls = iters * if back_to_back { 2 } else { 1 } + warmup;
        eprintln!("{}", stats_line(r, s.bytes, calls, &c.stats().since(&before)));
    }
    let avg = block.unwrap_or(if iters == 0 { 0.0 } else { samples.iter().sum::<f64>() / iters as f64 });
    let mut avgs = vec![0f64; if r == 0 { p as usize } else { 0 }];
    c.gather(&[avg][..], &mut avgs[..], 0).map_err(err)?;
    let mut pooled = vec![0f64; if r == 0 { iters * p as usize } else { 0 }];
    c.gather(&samples[..], &mut pooled[..], 0).map_err(err)?;
    if r == 0 {
        let mean = avgs.iter().sum::<f64>() / f64::from(p);
        let lo = avgs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = avgs.iter().copied().fold(0.0, f64::max);
        pooled.sort_by(f64::total_cmp);
        let algbw = if mean > 0.0 { s.nccl_bytes as f64 / (mean * 1e3) } else { 0.0 };
        emit(&Row {
            op: cfg.coll.name().to_owned(),
            algorithm: alg.unwrap_or("?").to_owned(),
            asked: asked.as_deref().unwrap_or("auto").to_owned(),
            ranks: p,
            bytes: s.bytes,
            count: s.n,
            iters,
            warmup,
            avg_us: mean,
            min_us: lo,
            max_us: hi,
            p50_us: percentile(&pooled, 0.50),
            p99_us: percentile(&pooled, 0.99),
            algbw_gbps: algbw,
            busbw_gbps: algbw * ops::bus_factor(cfg.coll, p),
            check,
        });
    }
    Ok(ok)
}
