//! Shared test kit: every collective run through the real executor on one communicator, checked
//! against a reference computed locally from the same deterministic inputs.
#![allow(dead_code)]

pub mod procs;

use fabcoll::collectives::registry;
use fabcoll::collectives::{CollArgs, Collective};
use fabcoll::{Collectives, Communicator, Options, ReduceOp, UserOp, ValueIndex};

pub type Pair = ValueIndex<i64, i64>;

/// x_r[i] for sums.
pub fn val(r: u32, i: usize) -> i64 {
    (r as i64) * 1_000_003 + (i as i64) * 7 + 1
}

/// x_r[i] for the non-commutative op: an affine map (a, b) = x ↦ a·x + b.
pub fn pval(r: u32, i: usize) -> Pair {
    Pair::new(((r as i64 + i as i64) % 5) + 2, r as i64 * 31 + (i as i64 % 11))
}

/// Composition of affine maps: associative, not commutative (lower rank on the left).
pub fn compose(x: Pair, y: Pair) -> Pair {
    Pair::new(x.value.wrapping_mul(y.value), x.value.wrapping_mul(y.index).wrapping_add(x.index))
}

pub fn affine_op() -> ReduceOp {
    ReduceOp::User(UserOp::elementwise::<Pair, _>("affine", false, compose))
}

/// Sentinel for untouched receive elements.
pub const UNTOUCHED: i64 = -777;

fn fold_sum(ranks: std::ops::Range<u32>, i: usize) -> i64 {
    ranks.map(|r| val(r, i)).fold(0i64, |a, b| a.wrapping_add(b))
}

fn fold_aff(ranks: std::ops::Range<u32>, i: usize) -> Pair {
    let mut it = ranks.map(|r| pval(r, i));
    let first = it.next().expect("non-empty");
    it.fold(first, compose)
}

/// Per-rank counts of v-variant tests: uneven, some zero.
pub fn vcounts(p: u32, base: usize) -> Vec<usize> {
    (0..p as usize).map(|i| if i % 4 == 3 { 0 } else { base + i % 3 }).collect()
}

/// Displacements with a gap of one element after each block.
pub fn gapped(counts: &[usize]) -> Vec<usize> {
    let mut d = Vec::with_capacity(counts.len());
    let mut at = 0;
    for &c in counts {
        d.push(at);
        at += c + 1;
    }
    d
}

/// The algorithms to run for `coll` with these arguments (restrictions respected).
pub fn algorithms(args: &CollArgs) -> Vec<&'static str> {
    registry::for_op(args.coll).filter(|a| a.restrictions.violated(args).is_none()).map(|a| a.name).collect()
}

fn err(what: String) -> Result<(), String> {
    Err(what)
}

fn check_eq<T: PartialEq + std::fmt::Debug>(ctx: &str, got: &[T], want: &[T]) -> Result<(), String> {
    if got.len() != want.len() {
        return err(format!("{ctx}: length {} != {}", got.len(), want.len()));
    }
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        return err(format!("{ctx}: element {i}: got {:?}, want {:?}", got[i], want[i]));
    }
    Ok(())
}

/// Runs `coll` with algorithm `alg` (None = default selection) and `count` on `c`, checks the
/// result. `noncomm` uses the non-commutative affine op on (i64, i64) pairs for reductions.
pub fn run_one(
    c: &Communicator,
    coll: Collective,
    alg: Option<&str>,
    count: usize,
    noncomm: bool,
) -> Result<(), String> {
    let opts = Options { algorithm: alg.map(str::to_owned), ..Default::default() };
    run_with(c, coll, &opts, count, noncomm)
}

/// [`run_one`] with full per-call options (a forced algorithm and its parameters, e.g. the
/// generic `segment` or alltoall's `barriers`).
pub fn run_with(c: &Communicator, coll: Collective, opts: &Options, count: usize, noncomm: bool) -> Result<(), String> {
    let (r, p) = (c.rank(), c.size());
    let pu = p as usize;
    let root = p / 2;
    let w = c.with(opts);
    let params: String = opts.params.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    let ctx = format!(
        "{coll}:{}{params} p={p} count={count} rank={r}{}",
        opts.algorithm.as_deref().unwrap_or("default"),
        if noncomm { " noncomm" } else { "" }
    );
    let e = |x: fabcoll::Error| format!("{ctx}: {x}");
    let mine: Vec<i64> = (0..count).map(|i| val(r, i)).collect();
    let sum = ReduceOp::Sum;
    match coll {
        Collective::Barrier => w.barrier().map_err(e)?,
        Collective::Bcast => {
            let mut buf: Vec<i64> =
                if r == root { (0..count).map(|i| val(root, i)).collect() } else { vec![UNTOUCHED; count] };
            w.bcast(&mut buf, root).map_err(e)?;
            check_eq(&ctx, &buf, &(0..count).map(|i| val(root, i)).collect::<Vec<_>>())?;
        }
        Collective::Reduce | Collective::Allreduce | Collective::Scan | Collective::Exscan if noncomm => {
            let op = affine_op();
            let mine: Vec<Pair> = (0..count).map(|i| pval(r, i)).collect();
            let mut out = vec![Pair::new(UNTOUCHED, UNTOUCHED); count];
            match coll {
                Collective::Reduce => w.reduce(&mine, &mut out, &op, root),
                Collective::Allreduce => w.allreduce(&mine, &mut out, &op),
                Collective::Scan => w.scan(&mine, &mut out, &op),
                _ => w.exscan(&mine, &mut out, &op),
            }
            .map_err(e)?;
            let want: Vec<Pair> = match coll {
                Collective::Reduce if r != root => vec![Pair::new(UNTOUCHED, UNTOUCHED); count],
                Collective::Reduce | Collective::Allreduce => (0..count).map(|i| fold_aff(0..p, i)).collect(),
                Collective::Scan => (0..count).map(|i| fold_aff(0..r + 1, i)).collect(),
                _ if r == 0 => vec![Pair::new(UNTOUCHED, UNTOUCHED); count],
                _ => (0..count).map(|i| fold_aff(0..r, i)).collect(),
            };
            check_eq(&ctx, &out, &want)?;
        }
        Collective::Reduce | Collective::Allreduce | Collective::Scan | Collective::Exscan => {
            let mut out = vec![UNTOUCHED; count];
            match coll {
                Collective::Reduce => w.reduce(&mine, &mut out, &sum, root),
                Collective::Allreduce => w.allreduce(&mine, &mut out, &sum),
                Collective::Scan => w.scan(&mine, &mut out, &sum),
                _ => w.exscan(&mine, &mut out, &sum),
            }
            .map_err(e)?;
            let want: Vec<i64> = match coll {
                Collective::Reduce if r != root => vec![UNTOUCHED; count],
                Collective::Reduce | Collective::Allreduce => (0..count).map(|i| fold_sum(0..p, i)).collect(),
                Collective::Scan => (0..count).map(|i| fold_sum(0..r + 1, i)).collect(),
                _ if r == 0 => vec![UNTOUCHED; count],
                _ => (0..count).map(|i| fold_sum(0..r, i)).collect(),
            };
            check_eq(&ctx, &out, &want)?;
        }
        Collective::Gather => {
            let mut out = vec![UNTOUCHED; if r == root { pu * count } else { 0 }];
            w.gather(&mine, &mut out, root).map_err(e)?;
            if r == root {
                let want: Vec<i64> = (0..p).flat_map(|q| (0..count).map(move |i| val(q, i))).collect();
                check_eq(&ctx, &out, &want)?;
            }
        }
        Collective::Scatter => {
            let send: Vec<i64> = if r == root { (0..pu * count).map(|i| val(root, i)).collect() } else { Vec::new() };
            let mut out = vec![UNTOUCHED; count];
            w.scatter(&send, &mut out, root).map_err(e)?;
            check_eq(&ctx, &out, &(0..count).map(|i| val(root, r as usize * count + i)).collect::<Vec<_>>())?;
        }
        Collective::Allgather => {
            let mut out = vec![UNTOUCHED; pu * count];
            w.allgather(&mine, &mut out).map_err(e)?;
            let want: Vec<i64> = (0..p).flat_map(|q| (0..count).map(move |i| val(q, i))).collect();
            check_eq(&ctx, &out, &want)?;
        }
        Collective::Alltoall => {
            let send: Vec<i64> = (0..pu * count).map(|i| val(r, i)).collect();
            let mut out = vec![UNTOUCHED; pu * count];
            w.alltoall(&send, &mut out).map_err(e)?;
            let want: Vec<i64> = (0..p).flat_map(|q| (0..count).map(move |i| val(q, r as usize * count + i))).collect();
            check_eq(&ctx, &out, &want)?;
        }
        Collective::ReduceScatterBlock => {
            let send: Vec<i64> = (0..pu * count).map(|i| val(r, i)).collect();
            let mut out = vec![UNTOUCHED; count];
            if noncomm {
                let op = affine_op();
                let send: Vec<Pair> = (0..pu * count).map(|i| pval(r, i)).collect();
                let mut out = vec![Pair::new(0, 0); count];
                w.reduce_scatter_block(&send, &mut out, &op).map_err(e)?;
                let want: Vec<Pair> = (0..count).map(|i| fold_aff(0..p, r as usize * count + i)).collect();
                return check_eq(&ctx, &out, &want);
            }
            w.reduce_scatter_block(&send, &mut out, &sum).map_err(e)?;
            check_eq(&ctx, &out, &(0..count).map(|i| fold_sum(0..p, r as usize * count + i)).collect::<Vec<_>>())?;
        }
        Collective::ReduceScatter => {
            let counts = vcounts(p, count);
            let total: usize = counts.iter().sum();
            let start: usize = counts[..r as usize].iter().sum();
            let mine_c = counts[r as usize];
            if noncomm {
                let op = affine_op();
                let send: Vec<Pair> = (0..total).map(|i| pval(r, i)).collect();
                let mut out = vec![Pair::new(0, 0); mine_c];
                w.reduce_scatter(&send, &mut out, &counts, &op).map_err(e)?;
                let want: Vec<Pair> = (0..mine_c).map(|i| fold_aff(0..p, start + i)).collect();
                return check_eq(&ctx, &out, &want);
            }
            let send: Vec<i64> = (0..total).map(|i| val(r, i)).collect();
            let mut out = vec![UNTOUCHED; mine_c];
            w.reduce_scatter(&send, &mut out, &counts, &sum).map_err(e)?;
            check_eq(&ctx, &out, &(0..mine_c).map(|i| fold_sum(0..p, start + i)).collect::<Vec<_>>())?;
        }
        Collective::Gatherv => {
            let counts = vcounts(p, count);
            let displs = gapped(&counts);
            let ext = displs[pu - 1] + counts[pu - 1];
            let send: Vec<i64> = (0..counts[r as usize]).map(|i| val(r, i)).collect();
            let mut out = vec![UNTOUCHED; if r == root { ext } else { 0 }];
            w.gatherv(&send, &mut out, &counts, Some(&displs), root).map_err(e)?;
            if r == root {
                let mut want = vec![UNTOUCHED; ext];
                for q in 0..pu {
                    for i in 0..counts[q] {
                        want[displs[q] + i] = val(q as u32, i);
                    }
                }
                check_eq(&ctx, &out, &want)?;
            }
        }
        Collective::Scatterv => {
            let counts = vcounts(p, count);
            let displs = gapped(&counts);
            let ext = displs[pu - 1] + counts[pu - 1];
            let send: Vec<i64> = if r == root { (0..ext).map(|i| val(root, i)).collect() } else { Vec::new() };
            let mut out = vec![UNTOUCHED; counts[r as usize]];
            w.scatterv(&send, &counts, Some(&displs), &mut out, root).map_err(e)?;
            let want: Vec<i64> = (0..counts[r as usize]).map(|i| val(root, displs[r as usize] + i)).collect();
            check_eq(&ctx, &out, &want)?;
        }
        Collective::Allgatherv => {
            let counts = vcounts(p, count);
            let displs = gapped(&counts);
            let ext = displs[pu - 1] + counts[pu - 1];
            let send: Vec<i64> = (0..counts[r as usize]).map(|i| val(r, i)).collect();
            let mut out = vec![UNTOUCHED; ext];
            w.allgatherv(&send, &mut out, &counts, Some(&displs)).map_err(e)?;
            let mut want = vec![UNTOUCHED; ext];
            for q in 0..pu {
                for i in 0..counts[q] {
                    want[displs[q] + i] = val(q as u32, i);
                }
            }
            check_eq(&ctx, &out, &want)?;
        }
        Collective::Alltoallv => {
            // Rank a sends (a + b) % 3 · count/2 + (b % 2) elements to rank b.
            let n = |a: usize, b: usize| ((a + b) % 3) * count / 2 + (b % 2);
            let ru = r as usize;
            let scounts: Vec<usize> = (0..pu).map(|b| n(ru, b)).collect();
            let rcounts: Vec<usize> = (0..pu).map(|a| n(a, ru)).collect();
            let sd = gapped(&scounts);
            let rd = gapped(&rcounts);
            let send: Vec<i64> = (0..sd[pu - 1] + scounts[pu - 1]).map(|i| val(r, i)).collect();
            let mut out = vec![UNTOUCHED; rd[pu - 1] + rcounts[pu - 1]];
            w.alltoallv(&send, &scounts, Some(&sd), &mut out, &rcounts, Some(&rd)).map_err(e)?;
            let mut want = vec![UNTOUCHED; out.len()];
            for a in 0..pu {
                let a_sd = gapped(&(0..pu).map(|b| n(a, b)).collect::<Vec<_>>());
                for i in 0..rcounts[a] {
                    want[rd[a] + i] = val(a as u32, a_sd[ru] + i);
                }
            }
            check_eq(&ctx, &out, &want)?;
        }
    }
    Ok(())
}

/// CollArgs for the restriction check of `coll` at this size/count (v-variants with the
/// test's counts).
pub fn args_for(coll: Collective, p: u32, count: usize, commutative: bool) -> CollArgs {
    let mut a = CollArgs::new(coll, 0, p, count as u64).with_commutative(commutative);
    if coll.is_vector() {
        if coll == Collective::Alltoallv {
            let n = |a: usize, b: usize| (((a + b) % 3) * count / 2 + (b % 2)) as u64;
            a.counts = Some((0..p as usize).flat_map(|x| (0..p as usize).map(move |y| n(x, y))).collect());
        } else {
            a.counts = Some(vcounts(p, count).into_iter().map(|c| c as u64).collect());
        }
    }
    a
}

/// Runs `f` on every communicator, each in a thread of its own; every rank's result in rank order.
pub fn on_ranks<R: Send>(comms: Vec<Communicator>, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(&c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    })
}

/// Runs `f` on every rank of a local job of `p` threads; collects every rank's error.
pub fn local_job<F>(comms: Vec<Communicator>, f: F) -> Result<(), String>
where
    F: Fn(&Communicator) -> Result<(), String> + Sync,
{
    let errs: Vec<String> = on_ranks(comms, |c| f(c).err()).into_iter().flatten().collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("\n"))
    }
}

/// Executor settings for tests: a short timeout so a failure never waits a minute.
pub fn cfg() -> fabcoll::ExecConfig {
    fabcoll::ExecConfig { timeout: std::time::Duration::from_secs(20), ..Default::default() }
}

/// The collectives with an in-place form in the API (`*_in_place`).
pub const IN_PLACE: [Collective; 9] = [
    Collective::Allreduce,
    Collective::Scan,
    Collective::Exscan,
    Collective::Reduce,
    Collective::Allgather,
    Collective::Gather,
    Collective::Allgatherv,
    Collective::Gatherv,
    Collective::Alltoall,
];

/// CollArgs of the in-place form of `coll` (root p/2, as [`run_in_place`] uses).
pub fn in_place_args(coll: Collective, p: u32, count: usize) -> CollArgs {
    let mut args = args_for(coll, p, count, true).with_root(p / 2);
    args.in_place = true;
    if matches!(coll, Collective::Gatherv | Collective::Allgatherv) {
        args.displs = Some(gapped(&vcounts(p, count)).into_iter().map(|d| d as u64).collect());
    }
    args
}

/// Runs the in-place form of `coll` (one of [`IN_PLACE`]; sum for reductions) with `opts` and
/// `count` on `c`, root p/2, and checks the result (for reduce and gather, non-roots pass their
/// input in the same buffer, as MPI's non-roots do).
pub fn run_in_place(c: &Communicator, coll: Collective, opts: &Options, count: usize) -> Result<(), String> {
    let (r, p) = (c.rank(), c.size());
    let root = p / 2;
    let params: String = opts.params.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    let ctx = format!(
        "{coll}:{}{params} in place p={p} count={count} rank={r}",
        opts.algorithm.as_deref().unwrap_or("default")
    );
    let w = c.with(opts);
    let e = |x: fabcoll::Error| format!("{ctx}: {x}");
    let mine: Vec<i64> = (0..count).map(|i| val(r, i)).collect();
    let (got, want): (Vec<i64>, Vec<i64>) = match coll {
        Collective::Allgather | Collective::Gather => {
            if coll == Collective::Gather && r != root {
                let mut b = mine.clone();
                w.gather_in_place(&mut b, count, root).map_err(e)?;
                return check_eq(&ctx, &b, &mine);
            }
            let mut buf = vec![UNTOUCHED; p as usize * count];
            buf[r as usize * count..(r as usize + 1) * count].copy_from_slice(&mine);
            if coll == Collective::Gather {
                w.gather_in_place(&mut buf, count, root)
            } else {
                w.allgather_in_place(&mut buf)
            }
            .map_err(e)?;
            (buf, (0..p).flat_map(|q| (0..count).map(move |i| val(q, i))).collect())
        }
        Collective::Allreduce | Collective::Scan | Collective::Exscan | Collective::Reduce => {
            let mut buf = mine.clone();
            let op = ReduceOp::Sum;
            match coll {
                Collective::Allreduce => w.allreduce_in_place(&mut buf, &op),
                Collective::Scan => w.scan_in_place(&mut buf, &op),
                Collective::Exscan => w.exscan_in_place(&mut buf, &op),
                _ => w.reduce_in_place(&mut buf, &op, root),
            }
            .map_err(e)?;
            let want: Vec<i64> = match coll {
                Collective::Allreduce => (0..count).map(|i| fold_sum(0..p, i)).collect(),
                Collective::Scan => (0..count).map(|i| fold_sum(0..r + 1, i)).collect(),
                // MPI leaves rank 0's exscan output undefined; ours leaves the buffer as it was.
                Collective::Exscan if r == 0 => mine.clone(),
                Collective::Exscan => (0..count).map(|i| fold_sum(0..r, i)).collect(),
                _ if r == root => (0..count).map(|i| fold_sum(0..p, i)).collect(),
                _ => mine.clone(),
            };
            (buf, want)
        }
        Collective::Gatherv | Collective::Allgatherv => {
            let counts = vcounts(p, count);
            let displs = gapped(&counts);
            let ext = displs[p as usize - 1] + counts[p as usize - 1];
            let ru = r as usize;
            let own: Vec<i64> = (0..counts[ru]).map(|i| val(r, i)).collect();
            if coll == Collective::Gatherv && r != root {
                let mut b = own.clone();
                w.gatherv_in_place(&mut b, &counts, Some(&displs), root).map_err(e)?;
                return check_eq(&ctx, &b, &own);
            }
            let mut buf = vec![UNTOUCHED; ext];
            buf[displs[ru]..displs[ru] + counts[ru]].copy_from_slice(&own);
            if coll == Collective::Gatherv {
                w.gatherv_in_place(&mut buf, &counts, Some(&displs), root)
            } else {
                w.allgatherv_in_place(&mut buf, &counts, Some(&displs))
            }
            .map_err(e)?;
            let mut want = vec![UNTOUCHED; ext];
            for q in 0..p as usize {
                for i in 0..counts[q] {
                    want[displs[q] + i] = val(q as u32, i);
                }
            }
            (buf, want)
        }
        Collective::Alltoall => {
            let pu = p as usize;
            let mut buf: Vec<i64> = (0..pu * count).map(|i| val(r, i)).collect();
            w.alltoall_in_place(&mut buf).map_err(e)?;
            let want = (0..p).flat_map(|q| (0..count).map(move |i| val(q, r as usize * count + i))).collect();
            (buf, want)
        }
        other => return Err(format!("{ctx}: {other} has no in-place form in the API")),
    };
    check_eq(&ctx, &got, &want)
}
