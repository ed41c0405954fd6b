//! Seeded random stress: a long sequence of collectives drawn from one seed (operation, datatype,
//! count including 0 and odd sizes, per-rank counts of the v-variants, root, reduction op, forced
//! algorithm or default, blocking calls and batches of overlapping nonblocking calls finished in a
//! rank-dependent order), every result checked against a reference. Every rank draws the same
//! sequence from the seed. `FABCOLL_STRESS_SEED` replays a run (a failure prints its seed),
//! `FABCOLL_STRESS_CALLS` sets the length (a soak run).
#![allow(dead_code)]

use std::fmt::Debug;

use fabcoll::collectives::{registry, CollArgs, Collective};
use fabcoll::{Collectives, Communicator, Element, Options, ReduceOp};

#[path = "../../fabric/tests/rng/mod.rs"]
mod rng;
pub use rng::Rng;

/// The seed: `FABCOLL_STRESS_SEED`, else one from the clock (printed by the caller).
pub fn seed() -> u64 {
    std::env::var("FABCOLL_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id())
    })
}

/// The number of calls: `FABCOLL_STRESS_CALLS`, else `default`.
pub fn calls(default: usize) -> usize {
    std::env::var("FABCOLL_STRESS_CALLS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// A value below 50 for (call, rank, element): sums of up to 5 ranks fit every datatype exactly.
fn x(call: usize, r: u32, i: usize) -> i64 {
    let h = (call as u64).wrapping_mul(0x9e37_79b9).wrapping_add(u64::from(r) << 40).wrapping_add(i as u64);
    (Rng::new(h).next() % 50) as i64
}

const SENTINEL: i64 = 253;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Sum,
    Max,
    Min,
    Bor,
    Bxor,
}

impl Op {
    fn api(self) -> ReduceOp {
        match self {
            Op::Sum => ReduceOp::Sum,
            Op::Max => ReduceOp::Max,
            Op::Min => ReduceOp::Min,
            Op::Bor => ReduceOp::Bor,
            Op::Bxor => ReduceOp::Bxor,
        }
    }
    fn fold(self, vals: impl Iterator<Item = i64>) -> i64 {
        vals.reduce(|a, b| match self {
            Op::Sum => a + b,
            Op::Max => a.max(b),
            Op::Min => a.min(b),
            Op::Bor => a | b,
            Op::Bxor => a ^ b,
        })
        .expect("non-empty")
    }
}

/// One drawn call.
#[derive(Clone, Debug)]
pub struct Spec {
    index: usize,
    coll: Collective,
    dtype: &'static str,
    count: usize,
    root: u32,
    op: Op,
    /// Per-rank counts (v-variants, reduce_scatter), or the p×p matrix of alltoallv (row = sender).
    counts: Vec<usize>,
    /// Gap after each block of the v-variants' displacements.
    gap: usize,
    algorithm: Option<&'static str>,
}

fn draw_count(r: &mut Rng) -> usize {
    match r.below(20) {
        0..=1 => 0,
        2..=7 => 1 + r.below(8),
        8..=13 => 1 + 2 * r.below(500),
        14..=18 => 1 + 2 * r.below(35_000),
        _ => 150_001 + 2 * r.below(50_000),
    }
}

fn gapped(counts: &[usize], gap: usize) -> Vec<usize> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let d = at;
            at += c + gap;
            d
        })
        .collect()
}

impl Spec {
    fn draw(r: &mut Rng, index: usize, p: u32) -> Spec {
        let coll = Collective::ALL[r.below(Collective::ALL.len())];
        let dtype = ["i32", "i64", "u8", "f64"][r.below(4)];
        let ops: &[Op] =
            if dtype == "f64" { &[Op::Sum, Op::Max, Op::Min] } else { &[Op::Sum, Op::Max, Op::Min, Op::Bor, Op::Bxor] };
        let op = ops[r.below(ops.len())];
        let mut count = draw_count(r);
        let pu = p as usize;
        // Calls whose buffers are p times the count stay small enough for a short run.
        if matches!(coll, Collective::Alltoall | Collective::Alltoallv) {
            count = count.min(20_001);
        }
        let counts = match coll {
            Collective::Alltoallv => {
                (0..pu * pu).map(|_| if r.below(4) == 0 { 0 } else { r.below(count + 1) }).collect()
            }
            c if c.is_vector() || c == Collective::ReduceScatter => {
                (0..pu).map(|_| if r.below(4) == 0 { 0 } else { r.below(count + 1) }).collect()
            }
            _ => Vec::new(),
        };
        let root = r.below(pu) as u32;
        let gap = r.below(3);
        let mut spec = Spec { index, coll, dtype, count, root, op, counts, gap, algorithm: None };
        if r.below(2) == 0 {
            let args = spec.args(p);
            let algs: Vec<&'static str> =
                registry::for_op(coll).filter(|a| a.restrictions.violated(&args).is_none()).map(|a| a.name).collect();
            if !algs.is_empty() {
                spec.algorithm = Some(algs[r.below(algs.len())]);
            }
        }
        spec
    }

    fn args(&self, p: u32) -> CollArgs {
        let mut a = CollArgs::new(self.coll, 0, p, self.count as u64).with_root(self.root);
        if !self.counts.is_empty() {
            a.counts = Some(self.counts.iter().map(|&c| c as u64).collect());
        }
        a
    }

    fn options(&self) -> Options {
        Options { algorithm: self.algorithm.map(str::to_owned), ..Default::default() }
    }
}

/// A number type of the run: every value is a small non-negative integer.
pub trait Num: Element + Copy + PartialEq + Debug + Send + Sync + 'static {
    fn of(v: i64) -> Self;
}

macro_rules! num {
    ($($t:ty),*) => {$(impl Num for $t { fn of(v: i64) -> Self { v as $t } })*};
}
num!(i32, i64, u8, f64);

/// The buffers of one call and what it must leave in `recv`.
struct Bufs<T> {
    send: Vec<T>,
    recv: Vec<T>,
    want: Vec<T>,
}

fn bufs<T: Num>(s: &Spec, r: u32, p: u32) -> Bufs<T> {
    let (ru, pu, n, k) = (r as usize, p as usize, s.count, s.index);
    let v = |q: u32, i: usize| T::of(x(k, q, i));
    let sentinel = |len: usize| vec![T::of(SENTINEL); len];
    let fold = |ranks: std::ops::Range<u32>, i: usize| T::of(s.op.fold(ranks.map(|q| x(k, q, i))));
    let mine = |len: usize| (0..len).map(|i| v(r, i)).collect::<Vec<T>>();
    let root = s.root;
    match s.coll {
        Collective::Barrier => Bufs { send: vec![], recv: vec![], want: vec![] },
        Collective::Bcast => Bufs {
            send: vec![],
            recv: if r == root { (0..n).map(|i| v(root, i)).collect() } else { sentinel(n) },
            want: (0..n).map(|i| v(root, i)).collect(),
        },
        Collective::Reduce => Bufs {
            send: mine(n),
            recv: sentinel(n),
            want: if r == root { (0..n).map(|i| fold(0..p, i)).collect() } else { sentinel(n) },
        },
        Collective::Allreduce => {
            Bufs { send: mine(n), recv: sentinel(n), want: (0..n).map(|i| fold(0..p, i)).collect() }
        }
        Collective::Scan => {
            Bufs { send: mine(n), recv: sentinel(n), want: (0..n).map(|i| fold(0..r + 1, i)).collect() }
        }
        Collective::Exscan => Bufs {
            send: mine(n),
            recv: sentinel(n),
            want: if r == 0 { sentinel(n) } else { (0..n).map(|i| fold(0..r, i)).collect() },
        },
        Collective::Gather => Bufs {
            send: mine(n),
            recv: sentinel(if r == root { pu * n } else { 0 }),
            want: if r == root { (0..p).flat_map(|q| (0..n).map(move |i| v(q, i))).collect() } else { vec![] },
        },
        Collective::Scatter => Bufs {
            send: if r == root { (0..pu * n).map(|i| v(root, i)).collect() } else { vec![] },
            recv: sentinel(n),
            want: (0..n).map(|i| v(root, ru * n + i)).collect(),
        },
        Collective::Allgather => Bufs {
            send: mine(n),
            recv: sentinel(pu * n),
            want: (0..p).flat_map(|q| (0..n).map(move |i| v(q, i))).collect(),
        },
        Collective::Alltoall => Bufs {
            send: mine(pu * n),
            recv: sentinel(pu * n),
            want: (0..p).flat_map(|q| (0..n).map(move |i| v(q, ru * n + i))).collect(),
        },
        Collective::ReduceScatterBlock => {
            Bufs { send: mine(pu * n), recv: sentinel(n), want: (0..n).map(|i| fold(0..p, ru * n + i)).collect() }
        }
        Collective::ReduceScatter => {
            let start: usize = s.counts[..ru].iter().sum();
            let total: usize = s.counts.iter().sum();
            Bufs {
                send: mine(total),
                recv: sentinel(s.counts[ru]),
                want: (0..s.counts[ru]).map(|i| fold(0..p, start + i)).collect(),
            }
        }
        Collective::Gatherv | Collective::Allgatherv => {
            let d = gapped(&s.counts, s.gap);
            let ext = d[pu - 1] + s.counts[pu - 1];
            let gets = s.coll == Collective::Allgatherv || r == root;
            let mut want = sentinel(if gets { ext } else { 0 });
            if gets {
                for q in 0..pu {
                    for i in 0..s.counts[q] {
                        want[d[q] + i] = v(q as u32, i);
                    }
                }
            }
            Bufs { send: mine(s.counts[ru]), recv: sentinel(want.len()), want }
        }
        Collective::Scatterv => {
            let d = gapped(&s.counts, s.gap);
            let ext = d[pu - 1] + s.counts[pu - 1];
            Bufs {
                send: if r == root { (0..ext).map(|i| v(root, i)).collect() } else { vec![] },
                recv: sentinel(s.counts[ru]),
                want: (0..s.counts[ru]).map(|i| v(root, d[ru] + i)).collect(),
            }
        }
        Collective::Alltoallv => {
            let m = |a: usize, b: usize| s.counts[a * pu + b];
            let sc: Vec<usize> = (0..pu).map(|b| m(ru, b)).collect();
            let rc: Vec<usize> = (0..pu).map(|a| m(a, ru)).collect();
            let (sd, rd) = (gapped(&sc, s.gap), gapped(&rc, s.gap));
            let mut want = sentinel(rd[pu - 1] + rc[pu - 1]);
            for a in 0..pu {
                let a_sd = gapped(&(0..pu).map(|b| m(a, b)).collect::<Vec<_>>(), s.gap);
                for i in 0..rc[a] {
                    want[rd[a] + i] = v(a as u32, a_sd[ru] + i);
                }
            }
            Bufs { send: mine(sd[pu - 1] + sc[pu - 1]), recv: sentinel(want.len()), want }
        }
    }
}

/// Starts (or, blocking, runs) the call on `c`.
fn start<'b, C: Collectives<'b> + ?Sized, T: Num>(
    c: &C,
    s: &Spec,
    r: u32,
    p: u32,
    b: &'b mut Bufs<T>,
) -> fabcoll::Result<C::Out> {
    let (ru, pu) = (r as usize, p as usize);
    let op = s.op.api();
    let (send, recv) = (&b.send, &mut b.recv);
    match s.coll {
        Collective::Barrier => c.barrier(),
        Collective::Bcast => c.bcast(recv, s.root),
        Collective::Reduce => c.reduce(send, recv, &op, s.root),
        Collective::Allreduce => c.allreduce(send, recv, &op),
        Collective::Scan => c.scan(send, recv, &op),
        Collective::Exscan => c.exscan(send, recv, &op),
        Collective::Gather => c.gather(send, recv, s.root),
        Collective::Scatter => c.scatter(send, recv, s.root),
        Collective::Allgather => c.allgather(send, recv),
        Collective::Alltoall => c.alltoall(send, recv),
        Collective::ReduceScatterBlock => c.reduce_scatter_block(send, recv, &op),
        Collective::ReduceScatter => c.reduce_scatter(send, recv, &s.counts, &op),
        Collective::Gatherv => c.gatherv(send, recv, &s.counts, Some(&gapped(&s.counts, s.gap)), s.root),
        Collective::Allgatherv => c.allgatherv(send, recv, &s.counts, Some(&gapped(&s.counts, s.gap))),
        Collective::Scatterv => c.scatterv(send, &s.counts, Some(&gapped(&s.counts, s.gap)), recv, s.root),
        Collective::Alltoallv => {
            let sc: Vec<usize> = (0..pu).map(|b| s.counts[ru * pu + b]).collect();
            let rc: Vec<usize> = (0..pu).map(|a| s.counts[a * pu + ru]).collect();
            c.alltoallv(send, &sc, Some(&gapped(&sc, s.gap)), recv, &rc, Some(&gapped(&rc, s.gap)))
        }
    }
}

fn check<T: Num>(s: &Spec, b: &Bufs<T>) -> Result<(), String> {
    if b.recv.len() != b.want.len() {
        return Err(format!("length {} != {}", b.recv.len(), b.want.len()));
    }
    match (0..b.recv.len()).find(|&i| b.recv[i] != b.want[i]) {
        Some(i) => Err(format!("element {i}: got {:?}, want {:?} ({})", b.recv[i], b.want[i], s.dtype)),
        None => Ok(()),
    }
}

/// The buffers of a call in its datatype.
enum Any {
    I32(Bufs<i32>),
    I64(Bufs<i64>),
    U8(Bufs<u8>),
    F64(Bufs<f64>),
}

macro_rules! each {
    ($any:expr, $b:ident => $e:expr) => {
        match $any {
            Any::I32($b) => $e,
            Any::I64($b) => $e,
            Any::U8($b) => $e,
            Any::F64($b) => $e,
        }
    };
}

fn any(s: &Spec, r: u32, p: u32) -> Any {
    match s.dtype {
        "i32" => Any::I32(bufs(s, r, p)),
        "i64" => Any::I64(bufs(s, r, p)),
        "u8" => Any::U8(bufs(s, r, p)),
        _ => Any::F64(bufs(s, r, p)),
    }
}

/// Runs `calls` drawn calls from `seed` on `c`; the error names the seed, the call and the rank.
/// Returns the number of calls verified.
pub fn run(c: &Communicator, seed: u64, calls: usize) -> Result<usize, String> {
    let (r, p) = (c.rank(), c.size());
    let mut rng = Rng::new(seed ^ u64::from(p) << 56);
    let mut done = 0;
    let fail = |s: &Spec, what: String| {
        format!("stress FABCOLL_STRESS_SEED={seed} p={p} rank={r}, call {}: {s:?}: {what}", s.index)
    };
    while done < calls {
        // A batch of 2..=4 overlapping nonblocking calls one time in four, else one blocking call.
        let batch = if rng.below(4) == 0 { 2 + rng.below(3) } else { 1 };
        let specs: Vec<Spec> = (0..batch.min(calls - done)).map(|k| Spec::draw(&mut rng, done + k, p)).collect();
        let mut bs: Vec<Any> = specs.iter().map(|s| any(s, r, p)).collect();
        if specs.len() == 1 {
            let s = &specs[0];
            let opts = s.options();
            each!(&mut bs[0], b => start(&c.with(&opts), s, r, p, b)).map_err(|e| fail(s, e.to_string()))?;
        } else {
            c.scope(|sc| {
                let mut reqs = Vec::new();
                for (s, b) in specs.iter().zip(bs.iter_mut()) {
                    sc.set_options(s.options());
                    reqs.push(
                        each!(b, b => start(sc, s, r, p, b))
                            .map_err(|e| fabcoll::Error::Protocol(fail(s, e.to_string())))?,
                    );
                }
                // Finish in a rank-dependent order, some by polling.
                let mut order: Vec<_> = reqs.into_iter().enumerate().collect();
                let turn = r as usize % order.len();
                order.rotate_left(turn);
                for (k, mut q) in order {
                    if (k + r as usize).is_multiple_of(2) {
                        q.wait()?;
                    } else {
                        loop {
                            if let Some(res) = q.test() {
                                break res?;
                            }
                            std::hint::spin_loop();
                        }
                    }
                }
                Ok(())
            })
            .map_err(|e| format!("stress FABCOLL_STRESS_SEED={seed} p={p} rank={r}, batch from call {done}: {e}"))?;
        }
        for (s, b) in specs.iter().zip(&bs) {
            each!(b, b => check(s, b)).map_err(|e| fail(s, e))?;
        }
        done += specs.len();
    }
    Ok(done)
}
