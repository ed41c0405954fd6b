//! Test-only symbolic execution of a whole job for the reduction algorithms, until the shared
//! verifier lands: every element is the list of (rank, element) contributions reduced into it, so
//! results are checked exactly in rank order (or as a multiset for commutative ops). Also checks
//! message matching and lengths, deadlock freedom (eager sends) and races inside each rank's DAG.

use std::collections::HashMap;

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;
use crate::schedule::{Buf, Order, Region, Schedule, StepKind};

type Val = Option<Vec<(u32, u64)>>;

struct Mem {
    send: Vec<Val>,
    recv: Vec<Val>,
    scratch: Vec<Vec<Val>>,
}

impl Mem {
    fn buf(&mut self, b: Buf) -> &mut Vec<Val> {
        match b {
            Buf::Send => &mut self.send,
            Buf::Recv => &mut self.recv,
            Buf::Scratch(i) => &mut self.scratch[i as usize],
        }
    }
    fn read(&mut self, r: Region) -> Vec<Val> {
        self.buf(r.buf)[r.off as usize..r.end() as usize].to_vec()
    }
    fn write(&mut self, r: Region, v: Vec<Val>) {
        self.buf(r.buf)[r.off as usize..r.end() as usize].clone_from_slice(&v);
    }
}

fn check_races(s: &Schedule) -> Result<(), String> {
    let n = s.len();
    let words = n.div_ceil(64).max(1);
    let mut anc = vec![vec![0u64; words]; n];
    for (i, _, deps) in s.iter() {
        let i = i as usize;
        for &d in deps {
            let d = d as usize;
            let (a, bb) = anc.split_at_mut(i);
            for (x, y) in bb[0].iter_mut().zip(&a[d]) {
                *x |= *y;
            }
            bb[0][d / 64] |= 1 << (d % 64);
        }
    }
    let conflict = |a: &StepKind, b: &StepKind| {
        let ov = |x: Option<Region>, y: Option<Region>| matches!((x, y), (Some(x), Some(y)) if x.overlaps(&y));
        ov(a.writes(), b.writes()) || ov(a.writes(), b.reads()) || ov(a.reads(), b.writes())
    };
    for j in 0..n {
        for i in 0..j {
            if anc[j][i / 64] >> (i % 64) & 1 == 0 && conflict(s.step(i as u32), s.step(j as u32)) {
                return Err(format!(
                    "rank {}: race between step {i} ({}) and {j} ({})",
                    s.rank,
                    s.step(i as u32),
                    s.step(j as u32)
                ));
            }
        }
    }
    Ok(())
}

/// Runs `alg` on every rank of `args` and checks the reduction results.
pub(crate) fn run(alg: &Algorithm, args: &CollArgs) -> Result<(), String> {
    let p = args.size;
    let mut scheds = Vec::new();
    for r in 0..p {
        scheds.push(alg.schedule(&args.for_rank(r)).map_err(|e| e.to_string())?);
    }
    for s in &scheds {
        check_races(s)?;
    }
    let mut mems: Vec<Mem> = Vec::new();
    for (r, s) in scheds.iter().enumerate() {
        let a = args.for_rank(r as u32);
        let input: Vec<Val> = (0..a.send_len().unwrap()).map(|i| Some(vec![(r as u32, i)])).collect();
        let recv_len = a.recv_len().unwrap() as usize;
        let mut m = Mem { send: Vec::new(), recv: vec![None; recv_len], scratch: Vec::new() };
        if args.in_place {
            let off = a.in_place_offset().unwrap().unwrap() as usize;
            for (i, v) in input.into_iter().enumerate() {
                m.recv[off + i] = v;
            }
        } else {
            m.send = input;
        }
        m.scratch = s.scratch.iter().map(|&l| vec![None; l as usize]).collect();
        mems.push(m);
    }
    // per-pair sequence numbers
    let mut seq: Vec<Vec<usize>> = Vec::new();
    for s in &scheds {
        let mut cnt: HashMap<(bool, u32), usize> = HashMap::new();
        seq.push(
            s.iter()
                .map(|(_, k, _)| match *k {
                    StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => {
                        let c = cnt.entry((matches!(k, StepKind::Send { .. }), peer)).or_default();
                        *c += 1;
                        *c - 1
                    }
                    _ => 0,
                })
                .collect(),
        );
    }
    let mut msgs: HashMap<(u32, u32), Vec<Option<Vec<Val>>>> = HashMap::new();
    let mut done: Vec<Vec<bool>> = scheds.iter().map(|s| vec![false; s.len()]).collect();
    let mut progress = true;
    while progress {
        progress = false;
        for r in 0..p as usize {
            for (id, k, deps) in scheds[r].iter() {
                let i = id as usize;
                if done[r][i] || !deps.iter().all(|&d| done[r][d as usize]) {
                    continue;
                }
                match *k {
                    StepKind::Send { peer, src } => {
                        let v = mems[r].read(src);
                        let q = msgs.entry((r as u32, peer)).or_default();
                        let sq = seq[r][i];
                        if q.len() <= sq {
                            q.resize(sq + 1, None);
                        }
                        q[sq] = Some(v);
                    }
                    StepKind::Recv { peer, dst } => {
                        let Some(Some(v)) = msgs.get(&(peer, r as u32)).and_then(|q| q.get(seq[r][i])).cloned() else {
                            continue;
                        };
                        if v.len() as u64 != dst.len {
                            return Err(format!("rank {r} step {i}: message of {} into {dst}", v.len()));
                        }
                        mems[r].write(dst, v);
                    }
                    StepKind::Copy { src, dst } => {
                        let v = mems[r].read(src);
                        mems[r].write(dst, v);
                    }
                    StepKind::Reduce { src, dst, order } => {
                        let s = mems[r].read(src);
                        let d = mems[r].read(dst);
                        let mut o = Vec::new();
                        for (x, y) in s.into_iter().zip(d) {
                            let (Some(x), Some(y)) = (x, y) else {
                                return Err(format!("rank {r} step {i} ({k}): reduces an undefined element"));
                            };
                            o.push(Some(if order == Order::SrcFirst { [x, y].concat() } else { [y, x].concat() }));
                        }
                        mems[r].write(dst, o);
                    }
                }
                done[r][i] = true;
                progress = true;
            }
        }
    }
    for r in 0..p as usize {
        if let Some(i) = done[r].iter().position(|d| !d) {
            return Err(format!("rank {r}: step {i} ({}) never runs (deadlock)", scheds[r].step(i as u32)));
        }
    }
    // every message was received
    let sent: usize =
        scheds.iter().map(|s| s.iter().filter(|(_, k, _)| matches!(k, StepKind::Send { .. })).count()).sum();
    let rcvd: usize =
        scheds.iter().map(|s| s.iter().filter(|(_, k, _)| matches!(k, StepKind::Recv { .. })).count()).sum();
    if sent != rcvd {
        return Err(format!("{sent} sends but {rcvd} receives"));
    }
    // results
    let expect = |e: u64, got: &Val| -> Result<(), String> {
        let Some(g) = got else { return Err(format!("element {e} undefined")) };
        let mut g = g.clone();
        if args.commutative {
            g.sort_unstable();
        }
        let want: Vec<(u32, u64)> = (0..p).map(|r| (r, e)).collect();
        if g != want {
            return Err(format!("element {e}: got {g:?}"));
        }
        Ok(())
    };
    let total: Vec<u64> = (0..p).map(|i| args.block_count(i)).collect();
    for r in 0..p {
        let m = &mems[r as usize];
        let (base, len) = match args.coll {
            Collective::Allreduce => (0, args.count),
            Collective::Reduce if r == args.root => (0, args.count),
            Collective::Reduce => continue,
            Collective::ReduceScatter | Collective::ReduceScatterBlock => {
                (total[..r as usize].iter().sum(), total[r as usize])
            }
            c => return Err(format!("testkit does not handle {c}")),
        };
        for j in 0..len {
            expect(base + j, &m.recv[j as usize]).map_err(|e| format!("rank {r}: {e}"))?;
        }
    }
    Ok(())
}

/// Runs `alg` over p = 1..=pmax, every root (rooted ops), counts {0, 1, p−1, p, p+1, 97} (or
/// irregular counts for reduce_scatter), commutative and (unless restricted) non-commutative,
/// and in place where `in_place` is set.
pub(crate) fn sweep(alg: &Algorithm, pmax: u32, in_place: bool) {
    for p in 1..=pmax {
        let roots = if alg.coll == Collective::Reduce { p } else { 1 };
        for root in 0..roots {
            for count in [0, 1, u64::from(p) - 1, u64::from(p), u64::from(p) + 1, 97] {
                for comm in [true, false] {
                    if !comm && alg.restrictions.commutative {
                        continue;
                    }
                    for ip in [false, true] {
                        if ip && !in_place {
                            continue;
                        }
                        let mut a = CollArgs::new(alg.coll, 0, p, count).with_root(root).with_commutative(comm);
                        if alg.coll == Collective::ReduceScatter {
                            let c: Vec<u64> = (0..u64::from(p)).map(|i| (i * 7 + count) % 5 * (count % 3)).collect();
                            a = a.with_counts(c);
                        }
                        a.in_place = ip;
                        if alg.restrictions.violated(&a).is_some() {
                            continue;
                        }
                        if let Err(e) = run(alg, &a) {
                            panic!(
                                "{}:{} p={p} root={root} count={count} comm={comm} in_place={ip}: {e}",
                                alg.coll, alg.name
                            );
                        }
                    }
                }
            }
        }
    }
}
