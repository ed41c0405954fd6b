//! Test-only symbolic executor for this crate's data-movement and scan algorithms, used until the
//! shared verifier (`crate::verify`) checks them too: runs every rank's schedule with each element
//! a sequence of input atoms (rank, index), checks message matching and lengths, deadlock freedom,
//! races between steps the DAG leaves unordered, and the final buffers against the op's meaning.

use std::collections::HashMap;

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;
use crate::schedule::{Buf, Order, Region, Schedule, StepKind};

type Val = Vec<(u32, u64)>;

struct Mem {
    send: Vec<Val>,
    recv: Vec<Val>,
    scratch: Vec<Vec<Val>>,
}

impl Mem {
    fn get(&self, r: Region) -> Vec<Val> {
        let b = match r.buf {
            Buf::Send => &self.send,
            Buf::Recv => &self.recv,
            Buf::Scratch(i) => &self.scratch[i as usize],
        };
        b[r.off as usize..r.end() as usize].to_vec()
    }
    fn put(&mut self, r: Region, v: Vec<Val>) {
        let b = match r.buf {
            Buf::Send => &mut self.send,
            Buf::Recv => &mut self.recv,
            Buf::Scratch(i) => &mut self.scratch[i as usize],
        };
        b[r.off as usize..r.end() as usize].clone_from_slice(&v);
    }
}

fn atoms(rank: u32, n: u64) -> Vec<Val> {
    (0..n).map(|i| vec![(rank, i)]).collect()
}

/// Unordered steps of one rank that touch overlapping regions, one writing.
fn races(s: &Schedule) -> Result<(), String> {
    let n = s.len();
    let words = n.div_ceil(64);
    let mut anc = vec![0u64; n * words];
    for (i, _, deps) in s.iter() {
        let i = i as usize;
        for &d in deps {
            let d = d as usize;
            anc[i * words + d / 64] |= 1 << (d % 64);
            for w in 0..words {
                let x = anc[d * words + w];
                anc[i * words + w] |= x;
            }
        }
    }
    for j in 0..n {
        let kj = s.step(j as u32);
        for i in 0..j {
            if anc[j * words + i / 64] >> (i % 64) & 1 == 1 {
                continue;
            }
            let ki = s.step(i as u32);
            let conflict = |w: Option<Region>, o: &StepKind| {
                w.is_some_and(|w| [o.reads(), o.writes()].into_iter().flatten().any(|r| r.overlaps(&w)))
            };
            if conflict(ki.writes(), kj) || conflict(kj.writes(), ki) {
                return Err(format!("rank {}: race between step {i} ({ki}) and step {j} ({kj})", s.rank));
            }
        }
    }
    Ok(())
}

/// Runs `alg` for every rank of `args` and checks the result.
pub(crate) fn run(alg: &Algorithm, args: &CollArgs) -> Result<(), String> {
    let p = args.size;
    let scheds: Vec<Schedule> =
        (0..p).map(|r| alg.schedule(&rank_args(args, r)).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let mut mems = Vec::new();
    for (r, s) in scheds.iter().enumerate() {
        races(s)?;
        let a = rank_args(args, r as u32);
        let recv_len = a.recv_len().unwrap();
        let mut recv: Vec<Val> = vec![Vec::new(); recv_len as usize];
        let mut send = atoms(r as u32, a.send_len().unwrap());
        if args.coll == Collective::Bcast && r as u32 == args.root {
            recv = atoms(args.root, recv_len);
        }
        if a.in_place {
            let off = a.in_place_offset().unwrap().unwrap();
            for (i, v) in send.drain(..).enumerate() {
                recv[off as usize + i] = v;
            }
        }
        let scratch = s.scratch.iter().map(|&l| vec![Vec::new(); l as usize]).collect();
        mems.push(Mem { send, recv, scratch });
    }
    let init: Vec<Vec<Val>> = mems.iter().map(|m| m.recv.clone()).collect();
    // per step: its per-pair sequence number (sends and recvs separately)
    let seqs: Vec<Vec<u64>> = scheds
        .iter()
        .map(|s| {
            let mut c: HashMap<(bool, u32), u64> = HashMap::new();
            s.iter()
                .map(|(_, k, _)| match *k {
                    StepKind::Send { peer, .. } => bump(&mut c, (true, peer)),
                    StepKind::Recv { peer, .. } => bump(&mut c, (false, peer)),
                    _ => 0,
                })
                .collect()
        })
        .collect();
    let mut done: Vec<Vec<bool>> = scheds.iter().map(|s| vec![false; s.len()]).collect();
    let mut mail: HashMap<(u32, u32, u64), (Vec<Val>, u128)> = HashMap::new();
    // know[r][i]: the ranks whose start happened before step i of rank r finished (bit set)
    let mut know: Vec<Vec<u128>> = scheds.iter().map(|s| vec![0; s.len()]).collect();
    loop {
        let mut progress = false;
        for r in 0..p as usize {
            let s = &scheds[r];
            for (id, k, deps) in s.iter() {
                let i = id as usize;
                if done[r][i] || !deps.iter().all(|&d| done[r][d as usize]) {
                    continue;
                }
                let m = &mut mems[r];
                let mut kn = deps.iter().fold(1u128 << (r % 128), |acc, &d| acc | know[r][d as usize]);
                match *k {
                    StepKind::Send { peer, src } => {
                        mail.insert((r as u32, peer, seqs[r][i]), (m.get(src), kn));
                    }
                    StepKind::Recv { peer, dst } => match mail.remove(&(peer, r as u32, seqs[r][i])) {
                        None => continue,
                        Some((v, _)) if v.len() as u64 != dst.len => {
                            return Err(format!("rank {r} step {id} ({k}): message of {} elements", v.len()))
                        }
                        Some((v, k2)) => {
                            kn |= k2;
                            m.put(dst, v)
                        }
                    },
                    StepKind::Copy { src, dst } => {
                        let v = m.get(src);
                        m.put(dst, v)
                    }
                    StepKind::Reduce { src, dst, order } => {
                        let a = m.get(src);
                        let b = m.get(dst);
                        let v = a
                            .into_iter()
                            .zip(b)
                            .map(|(x, y)| match order {
                                Order::SrcFirst => [x, y].concat(),
                                Order::DstFirst => [y, x].concat(),
                            })
                            .collect();
                        m.put(dst, v)
                    }
                }
                know[r][i] = kn;
                done[r][i] = true;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    for (r, d) in done.iter().enumerate() {
        if let Some(i) = d.iter().position(|x| !x) {
            return Err(format!("deadlock: rank {r} step {i} ({}) never ran", scheds[r].step(i as u32)));
        }
    }
    if let Some(k) = mail.keys().next() {
        return Err(format!("message {k:?} never received"));
    }
    for r in 0..p {
        let a = args.for_rank(r);
        let mut want = init[r as usize].clone();
        let blk = |j: u32| (a.block_displ(j).unwrap(), a.block_count(j));
        let is_root = r == args.root;
        match args.coll {
            Collective::Barrier => {
                let all = know[r as usize].iter().fold(1u128 << r, |a, k| a | k);
                if p <= 128 && all != u128::MAX >> (128 - p) {
                    return Err(format!("rank {r} leaves the barrier before hearing from all: {all:b}"));
                }
            }
            Collective::Bcast => want = atoms(args.root, args.count),
            Collective::Gather | Collective::Gatherv if is_root => {
                for j in 0..p {
                    let (d, c) = blk(j);
                    for i in 0..c {
                        want[(d + i) as usize] = vec![(j, i)];
                    }
                }
            }
            Collective::Gather | Collective::Gatherv => {}
            Collective::Scatter | Collective::Scatterv => {
                let (d, c) = blk(r);
                want = (0..c).map(|i| vec![(args.root, d + i)]).collect();
            }
            Collective::Allgather | Collective::Allgatherv => {
                for j in 0..p {
                    let (d, c) = blk(j);
                    for i in 0..c {
                        want[(d + i) as usize] = vec![(j, i)];
                    }
                }
            }
            Collective::Scan => want = (0..args.count).map(|i| (0..=r).map(|q| (q, i)).collect()).collect(),
            Collective::Exscan if r > 0 => want = (0..args.count).map(|i| (0..r).map(|q| (q, i)).collect()).collect(),
            Collective::Exscan => {}
            c => return Err(format!("testkit does not know {c}")),
        }
        if mems[r as usize].recv != want {
            let got = &mems[r as usize].recv;
            let i = got.iter().zip(&want).position(|(x, y)| x != y).unwrap_or(0);
            return Err(format!("rank {r}: recv[{i}] = {:?}, want {:?}", got.get(i), want.get(i)));
        }
    }
    Ok(())
}

/// `args` as rank r sees it; in-place only where the op defines it on that rank (gather: root).
fn rank_args(args: &CollArgs, r: u32) -> CollArgs {
    let mut a = args.for_rank(r);
    a.in_place = a.in_place && a.in_place_offset().ok().flatten().is_some();
    a
}

fn bump(c: &mut HashMap<(bool, u32), u64>, k: (bool, u32)) -> u64 {
    let e = c.entry(k).or_insert(0);
    *e += 1;
    *e - 1
}

/// Runs `alg` over p = 1..=max_p, every root, counts {0, 1, p−1, p, p+1, 37}, in place or not
/// (where defined), commutative or not; for v-variants also uneven counts and gapped displs.
pub(crate) fn sweep(alg: &Algorithm, max_p: u32) {
    for p in 1..=max_p {
        let roots: Vec<u32> = if alg.coll.is_rooted() { (0..p).collect() } else { vec![0] };
        for root in roots {
            for count in [0u64, 1, u64::from(p) - 1, u64::from(p), u64::from(p) + 1, 37] {
                for in_place in [false, true] {
                    for commutative in [true, false] {
                        for variant in 0..if alg.coll.is_vector() { 3 } else { 1 } {
                            let mut a = CollArgs::new(alg.coll, 0, p, count).with_root(root);
                            a.commutative = commutative;
                            a.in_place = in_place;
                            if alg.coll.is_vector() {
                                let counts: Vec<u64> = (0..u64::from(p))
                                    .map(|i| match variant {
                                        0 => count,
                                        _ => (count + i * 7) % (count + 3),
                                    })
                                    .collect();
                                if variant == 2 {
                                    // gapped, reversed displacements
                                    let mut d = vec![0u64; p as usize];
                                    let mut at = 1;
                                    for i in (0..p as usize).rev() {
                                        d[i] = at;
                                        at += counts[i] + 2;
                                    }
                                    a.displs = Some(d.into());
                                }
                                a = a.with_counts(counts);
                            }
                            if in_place && (0..p).all(|r| a.for_rank(r).in_place_offset().ok().flatten().is_none()) {
                                continue;
                            }
                            if alg.restrictions.violated(&a).is_some() {
                                continue;
                            }
                            if let Err(e) = run(alg, &a) {
                                panic!(
                                    "{}:{} p={p} root={root} count={count} in_place={in_place} \
                                     commutative={commutative} variant={variant}: {e}",
                                    alg.coll, alg.name
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
