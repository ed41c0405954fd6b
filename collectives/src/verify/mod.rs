//! The symbolic verifier: executes a whole job's schedules on symbolic values (each element records
//! which (rank, index) contributions it holds) and checks them against the operation's definition.
//!
//! [`check_job`] checks, in this order:
//! 1. the arguments are one consistent job (p ≤ 256) and every schedule is structurally sound
//!    ([`check_bounds`]: regions inside their buffers and the declared scratch sizes, no writes to
//!    `Send`, equal lengths, peers in range);
//! 2. message matching: the k-th Send a→b has a k-th Recv on b from a, of equal length;
//! 3. no races: two steps of a rank not ordered by its DAG never touch a common element when one
//!    of them writes it (`races`);
//! 4. the job runs to completion (a step runs when its deps are done; a Recv also needs its Send to
//!    have run and gets the Send's data as it was when the Send ran): if steps remain and none
//!    can run, the job-wide graph has a cycle and the error names the blocked Recvs;
//! 5. every `Recv` ends equal to the definition: reductions element-wise over exactly the right
//!    ranks, each once (commutative) or as adjacent ranges combined lower-first (non-commutative,
//!    which makes the result order-exact); data movement element by element; untouched parts
//!    (v-gaps, exscan's rank 0) unchanged. Combining an undefined element, two different indices,
//!    a rank twice or non-adjacent ranges yields a bad value, an error only if it reaches a result;
//! 6. barrier: every rank has (causally) heard from every other rank before it finishes.
//!
//! Rank sets print as half-open runs, like regions: `{0..3, 5}` = ranks 0, 1, 2 and 5.

mod layout;
mod races;
mod sets;
#[cfg(test)]
pub(crate) mod sweep;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use crate::args::{CollArgs, Collective};
use crate::error::{Error, Result};
use crate::registry::Algorithm;
use crate::schedule::{check_bounds, Buf, Order, Region, Schedule, StepId, StepKind};

use sets::{Bits, PoisonInfo, Sets, Val, MAX_RANKS};

/// Builds every rank's schedule of `alg` for the job of which `args` is one rank's view and
/// verifies the job with [`check_job`]. In place for reduce and gather(v) applies to the root only
/// (as with MPI_IN_PLACE); elsewhere to every rank. Errors of building (restrictions, bad arguments) are
/// returned as they are; defects found are `Error::Verify` naming the algorithm and arguments.
pub fn check(alg: &Algorithm, args: &CollArgs) -> Result<()> {
    if args.size as usize > MAX_RANKS {
        return Err(Error::Verify(format!("p = {} exceeds the verifier's limit of {MAX_RANKS} ranks", args.size)));
    }
    let mut all: Vec<CollArgs> = (0..args.size).map(|r| args.for_rank(r)).collect();
    if args.in_place && matches!(args.coll, Collective::Reduce | Collective::Gather | Collective::Gatherv) {
        // MPI_IN_PLACE of the rooted reductions/gathers is given at the root only.
        for a in &mut all {
            a.in_place = a.rank == a.root;
        }
    }
    let schedules = all.iter().map(|a| alg.schedule(a)).collect::<Result<Vec<_>>>()?;
    check_job(&all, &schedules).map_err(|e| match e {
        Error::Verify(msg) => Error::Verify(format!("{}:{} ({}): {msg}", alg.coll, alg.name, describe_args(args))),
        e => e,
    })
}

/// `p=5 root=0 count=7 noncommutative in_place segment=3`, for error messages.
pub fn describe_args(a: &CollArgs) -> String {
    let mut s = format!("p={}", a.size);
    if a.coll.is_rooted() {
        s += &format!(" root={}", a.root);
    }
    match &a.counts {
        Some(c) if a.coll.is_vector() => s += &format!(" counts={c:?}"),
        _ => s += &format!(" count={}", a.count),
    }
    if a.coll.is_reduction() && !a.commutative {
        s += " noncommutative";
    }
    if a.in_place {
        s += " in_place";
    }
    for (n, v) in a.params.iter() {
        s += &format!(" {n}={v}");
    }
    s
}

fn verr(msg: String) -> Error {
    Error::Verify(msg)
}

/// Verifies a whole job: `args[r]` and `schedules[r]` are rank r's arguments and schedule.
pub fn check_job(args: &[CollArgs], schedules: &[Schedule]) -> Result<()> {
    consistency(args, schedules)?;
    for (a, s) in args.iter().zip(schedules) {
        let send_len = if a.in_place { 0 } else { a.send_len()? };
        check_bounds(s, send_len, a.recv_len()?)?;
    }
    let matches = match_messages(schedules)?;
    for s in schedules {
        races::check(s)?;
    }
    let mut sets = Sets::new();
    let mut job = Job::new(args, schedules, &matches, &mut sets)?;
    job.run()?;
    job.check_results(args)?;
    if args[0].coll == Collective::Barrier {
        job.check_barrier()?;
    }
    Ok(())
}

/// The arguments must describe one job of p ≤ 256 ranks with rank r's schedule at index r.
fn consistency(args: &[CollArgs], schedules: &[Schedule]) -> Result<()> {
    let p = args.len();
    if p == 0 || p != schedules.len() {
        return Err(verr(format!("{} argument sets for {} schedules (need one per rank, p ≥ 1)", p, schedules.len())));
    }
    if p > MAX_RANKS {
        return Err(verr(format!("p = {p} exceeds the verifier's limit of {MAX_RANKS} ranks")));
    }
    let a0 = &args[0];
    for (r, (a, s)) in args.iter().zip(schedules).enumerate() {
        a.validate()?;
        if a.rank as usize != r || a.size as usize != p {
            return Err(verr(format!("args[{r}] is rank {} of {}, expected rank {r} of {p}", a.rank, a.size)));
        }
        if s.rank as usize != r || s.size as usize != p {
            return Err(verr(format!("schedules[{r}] is for rank {} of {}, expected rank {r} of {p}", s.rank, s.size)));
        }
        let same = a.coll == a0.coll
            && a.root == a0.root
            && a.count == a0.count
            && a.counts == a0.counts
            && a.commutative == a0.commutative;
        if !same {
            return Err(verr(format!("args[{r}] describe a different call than args[0]: {a:?} vs {a0:?}")));
        }
    }
    layout::check_size(args, schedules)
}

/// For every step of every rank, the matching step on the peer (`u32::MAX` for Reduce/Copy).
fn match_messages(schedules: &[Schedule]) -> Result<Vec<Vec<StepId>>> {
    // (from, to, rank-local step) of every Send and every Recv; stable sort keeps step order.
    let mut sends: Vec<(u32, u32, StepId)> = Vec::new();
    let mut recvs: Vec<(u32, u32, StepId)> = Vec::new();
    for s in schedules {
        for (id, k, _) in s.iter() {
            match *k {
                StepKind::Send { peer, .. } => sends.push((s.rank, peer, id)),
                StepKind::Recv { peer, .. } => recvs.push((peer, s.rank, id)),
                _ => {}
            }
        }
    }
    sends.sort_by_key(|&(a, b, _)| (a, b));
    recvs.sort_by_key(|&(a, b, _)| (a, b));
    let mut m: Vec<Vec<StepId>> = schedules.iter().map(|s| vec![u32::MAX; s.len()]).collect();
    let (mut i, mut j) = (0, 0);
    let unmatched = |(a, b, id): (u32, u32, StepId), send: bool| {
        let n_s = sends.iter().filter(|x| (x.0, x.1) == (a, b)).count();
        let n_r = recvs.iter().filter(|x| (x.0, x.1) == (a, b)).count();
        let (me, step) = if send { (a, id) } else { (b, id) };
        verr(format!(
            "unmatched message: rank {a} sends {n_s} message(s) to rank {b}, which posts {n_r} recv(s) from rank {a}; \
             rank {me} step {step} ({}) has no partner",
            schedules[me as usize].step(step)
        ))
    };
    while i < sends.len() || j < recvs.len() {
        let ks = sends.get(i).map(|x| (x.0, x.1));
        let kr = recvs.get(j).map(|x| (x.0, x.1));
        match (ks, kr) {
            (Some(a), Some(b)) if a == b => {
                let (from, to, s_id) = sends[i];
                let r_id = recvs[j].2;
                let sk = schedules[from as usize].step(s_id);
                let rk = schedules[to as usize].step(r_id);
                if sk.len() != rk.len() {
                    let k = sends[..i].iter().rev().take_while(|x| (x.0, x.1) == (from, to)).count();
                    return Err(verr(format!(
                        "length mismatch: message #{k} from rank {from} to rank {to}: rank {from} step {s_id} ({sk}) \
                         sends {} element(s), rank {to} step {r_id} ({rk}) receives {}",
                        sk.len(),
                        rk.len()
                    )));
                }
                m[from as usize][s_id as usize] = r_id;
                m[to as usize][r_id as usize] = s_id;
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => return Err(unmatched(sends[i], true)),
            (Some(_), None) => return Err(unmatched(sends[i], true)),
            _ => return Err(unmatched(recvs[j], false)),
        }
    }
    Ok(m)
}

/// A message in flight: what its sender had heard of, and the Send's data as it was when the Send
/// ran — unless the Recv was already enabled then and the data went straight into its region.
struct Msg {
    data: Option<Vec<Val>>,
    heard: Bits,
}

thread_local! {
    /// Element buffers of finished runs, reused to spare the allocator and page faults (the
    /// matrix verifies tens of thousands of jobs of up to a few MB each).
    static POOL: std::cell::RefCell<Vec<Vec<Val>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn alloc(len: usize) -> Vec<Val> {
    let mut v = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    v.clear();
    v.resize(len, Val::UNDEF);
    v
}

fn release(v: Vec<Val>) {
    if v.capacity() > 0 {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < 4096 {
                p.push(v);
            }
        });
    }
}

fn with_pooled(src: &[Val]) -> Vec<Val> {
    let mut v = alloc(0);
    v.extend_from_slice(src);
    v
}

/// Two distinct elements of a slice, mutably.
fn two_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    debug_assert_ne!(a, b);
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

struct RankState {
    send: Vec<Val>,
    recv: Vec<Val>,
    scratch: Vec<Vec<Val>>,
    /// Unfinished deps per step.
    pending: Vec<u32>,
    /// dependents of step i: `dep_list[dep_start[i]..dep_start[i + 1]]`.
    dep_start: Vec<u32>,
    dep_list: Vec<StepId>,
    inbox: Vec<Option<Msg>>,
    done: Vec<bool>,
    /// Ranks each step has causally heard from.
    heard: Vec<Bits>,
}

impl RankState {
    fn buf(&self, b: Buf) -> &[Val] {
        match b {
            Buf::Send => &self.send,
            Buf::Recv => &self.recv,
            Buf::Scratch(i) => &self.scratch[i as usize],
        }
    }

    fn buf_mut(&mut self, b: Buf) -> &mut [Val] {
        match b {
            Buf::Send => &mut self.send,
            Buf::Recv => &mut self.recv,
            Buf::Scratch(i) => &mut self.scratch[i as usize],
        }
    }

    fn get(&self, r: Region) -> &[Val] {
        &self.buf(r.buf)[r.off as usize..r.end() as usize]
    }

    fn put(&mut self, r: Region, data: &[Val]) {
        self.buf_mut(r.buf)[r.off as usize..r.end() as usize].copy_from_slice(data);
    }
}

struct Job<'a> {
    schedules: &'a [Schedule],
    matches: &'a [Vec<StepId>],
    sets: &'a mut Sets,
    ranks: Vec<RankState>,
    ready: VecDeque<(u32, StepId)>,
    commutative: bool,
    tmp: Vec<Val>,
}

impl<'a> Job<'a> {
    fn new(
        args: &[CollArgs],
        schedules: &'a [Schedule],
        matches: &'a [Vec<StepId>],
        sets: &'a mut Sets,
    ) -> Result<Job<'a>> {
        let mut ranks = Vec::with_capacity(args.len());
        let mut ready = VecDeque::new();
        for (a, s) in args.iter().zip(schedules) {
            let (send, recv) = layout::initial(a, sets)?;
            let n = s.len();
            let mut count = vec![0u32; n + 1];
            let mut pending = vec![0u32; n];
            for (id, _, deps) in s.iter() {
                pending[id as usize] = deps.len() as u32;
                for &d in deps {
                    count[d as usize + 1] += 1;
                }
            }
            for i in 0..n {
                count[i + 1] += count[i];
            }
            let mut fill = count.clone();
            let mut dep_list = vec![0; count[n] as usize];
            for (id, _, deps) in s.iter() {
                for &d in deps {
                    dep_list[fill[d as usize] as usize] = id;
                    fill[d as usize] += 1;
                }
            }
            for (id, k, deps) in s.iter() {
                if deps.is_empty() && !matches!(k, StepKind::Recv { .. }) {
                    ready.push_back((s.rank, id));
                }
            }
            ranks.push(RankState {
                send,
                recv,
                scratch: s.scratch.iter().map(|&l| alloc(l as usize)).collect(),
                pending,
                dep_start: count,
                dep_list,
                inbox: (0..n).map(|_| None).collect(),
                done: vec![false; n],
                heard: vec![[0; MAX_RANKS / 64]; n],
            });
        }
        Ok(Job { schedules, matches, sets, ranks, ready, commutative: args[0].commutative, tmp: Vec::new() })
    }

    fn run(&mut self) -> Result<()> {
        let total: usize = self.schedules.iter().map(|s| s.len()).sum();
        let mut executed = 0;
        while let Some((r, id)) = self.ready.pop_front() {
            self.execute(r, id);
            executed += 1;
            let st = &mut self.ranks[r as usize];
            st.done[id as usize] = true;
            let s = &self.schedules[r as usize];
            for &d in &st.dep_list[st.dep_start[id as usize] as usize..st.dep_start[id as usize + 1] as usize] {
                st.pending[d as usize] -= 1;
                if st.pending[d as usize] == 0
                    && (!matches!(s.step(d), StepKind::Recv { .. }) || st.inbox[d as usize].is_some())
                {
                    self.ready.push_back((r, d));
                }
            }
        }
        if executed < total {
            return Err(self.deadlock(total - executed));
        }
        Ok(())
    }

    /// The error for a job that cannot progress: names the Recvs that wait for a Send that never
    /// runs (each is either blocked itself or part of a cycle).
    fn deadlock(&self, stuck: usize) -> Error {
        let mut blocked = Vec::new();
        let mut ranks = Vec::new();
        for (r, st) in self.ranks.iter().enumerate() {
            let s = &self.schedules[r];
            let mut any = false;
            for (id, k, _) in s.iter() {
                if st.done[id as usize] {
                    continue;
                }
                any = true;
                if st.pending[id as usize] == 0 {
                    if let StepKind::Recv { peer, .. } = *k {
                        let sid = self.matches[r][id as usize];
                        let sk = self.schedules[peer as usize].step(sid);
                        blocked.push(format!("rank {r} step {id} ({k}) waits for rank {peer} step {sid} ({sk})"));
                    }
                }
            }
            if any {
                ranks.push(r);
            }
        }
        let n = blocked.len();
        blocked.truncate(4);
        Error::Verify(format!(
            "deadlock: {stuck} step(s) can never run (the job's dependency graph with send→recv edges has a \
             cycle); ranks blocked: {ranks:?}; {n} recv(s) wait for a send that never runs: {}{}",
            blocked.join("; "),
            if n > 4 { "; …" } else { "" }
        ))
    }

    fn execute(&mut self, r: u32, id: StepId) {
        let s = &self.schedules[r as usize];
        let kind = *s.step(id);
        let mut heard = [0u64; MAX_RANKS / 64];
        sets::bit(&mut heard, r as usize);
        {
            let st = &self.ranks[r as usize];
            for &d in s.deps(id) {
                sets::or(&mut heard, &st.heard[d as usize]);
            }
        }
        match kind {
            StepKind::Send { peer, src } => {
                let rid = self.matches[r as usize][id as usize];
                let (me, them) = two_mut(&mut self.ranks, r as usize, peer as usize);
                let enabled = them.pending[rid as usize] == 0;
                let data = if enabled {
                    // The Recv may run now: deliver straight into its region (no other step can
                    // touch it before the Recv completes, as the race check has shown).
                    if let StepKind::Recv { dst, .. } = *self.schedules[peer as usize].step(rid) {
                        them.put(dst, me.get(src));
                    }
                    None
                } else {
                    Some(with_pooled(me.get(src)))
                };
                them.inbox[rid as usize] = Some(Msg { data, heard });
                if enabled {
                    self.ready.push_back((peer, rid));
                }
            }
            StepKind::Recv { dst, .. } => {
                let st = &mut self.ranks[r as usize];
                let msg = st.inbox[id as usize].take().expect("a recv runs only once its message arrived");
                sets::or(&mut heard, &msg.heard);
                if let Some(data) = msg.data {
                    st.put(dst, &data);
                    release(data);
                }
            }
            StepKind::Copy { src, dst } => {
                let st = &mut self.ranks[r as usize];
                self.tmp.clear();
                self.tmp.extend_from_slice(st.get(src));
                st.put(dst, &self.tmp);
            }
            StepKind::Reduce { src, dst, order } => {
                let st = &mut self.ranks[r as usize];
                self.tmp.clear();
                self.tmp.extend_from_slice(st.get(dst));
                let srcv = st.get(src);
                let mut poison: Option<u32> = None;
                let mut last: Option<((Val, Val), Val)> = None;
                for (k, (d, &sv)) in self.tmp.iter_mut().zip(srcv).enumerate() {
                    let (first, second) = match order {
                        Order::SrcFirst => (sv, *d),
                        Order::DstFirst => (*d, sv),
                    };
                    if let Some(((f, g), v)) = last {
                        if f.set == first.set && g.set == second.set && f.idx == g.idx && first.idx == second.idx {
                            *d = Val { idx: first.idx, set: v.set };
                            continue;
                        }
                    }
                    match self.sets.combine(first, second, self.commutative) {
                        Ok(v) => {
                            *d = v;
                            last = Some(((first, second), v));
                        }
                        Err(fault) => {
                            let p = *poison.get_or_insert_with(|| {
                                self.sets.poison(PoisonInfo {
                                    origin: format!("made by rank {r} step {id} ({kind}) at {}", dst.sub(k as u64, 1)),
                                    fault,
                                    first,
                                    second,
                                })
                            });
                            *d = Val { idx: first.idx, set: p };
                            last = None;
                        }
                    }
                }
                st.put(dst, &self.tmp);
            }
        }
        self.ranks[r as usize].heard[id as usize] = heard;
    }

    fn check_results(&mut self, args: &[CollArgs]) -> Result<()> {
        let send_displs = layout::send_displs(args)?;
        for r in 0..args.len() {
            let (send, init) = layout::initial(&args[r], self.sets)?;
            release(send);
            let want = layout::expected(args, r, &init, &send_displs, self.sets)?;
            release(init);
            let st = &self.ranks[r];
            let got = &st.recv;
            let bad = |i: usize| got[i] != want[i];
            let Some(first) = (0..got.len()).find(|&i| bad(i)) else {
                release(want);
                continue;
            };
            let end = (first..got.len()).find(|&i| !bad(i)).unwrap_or(got.len());
            let total = (0..got.len()).filter(|&i| bad(i)).count();
            let at = Region::new(Buf::Recv, first as u64, 1);
            let writers: Vec<String> = self.schedules[r]
                .iter()
                .filter(|(_, k, _)| k.writes().is_some_and(|w| w.overlaps(&at)))
                .map(|(id, k, _)| format!("step {id} ({k})"))
                .collect();
            let writers = if writers.len() > 4 { writers[writers.len() - 4..].to_vec() } else { writers };
            let writer = if writers.is_empty() {
                " (no step writes it)".to_string()
            } else {
                format!(" (last writers: {})", writers.join(", "))
            };
            return Err(verr(format!(
                "rank {r} recv[{first}..{end}] wrong: recv[{first}] holds {}, expected {}{writer}; {total} of {} \
                 element(s) wrong on this rank",
                self.sets.describe(got[first]),
                self.sets.describe(want[first]),
                got.len()
            )));
        }
        Ok(())
    }
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        for st in self.ranks.drain(..) {
            release(st.send);
            release(st.recv);
            st.scratch.into_iter().for_each(release);
            st.inbox.into_iter().flatten().filter_map(|m| m.data).for_each(release);
        }
    }
}

impl Job<'_> {
    /// Every rank must finish only after hearing (causally) from every rank.
    fn check_barrier(&self) -> Result<()> {
        let p = self.ranks.len();
        let all = sets::full(p);
        for (r, st) in self.ranks.iter().enumerate() {
            let mut heard = [0u64; MAX_RANKS / 64];
            sets::bit(&mut heard, r);
            for h in &st.heard {
                sets::or(&mut heard, h);
            }
            if heard != all {
                let mut missing = all;
                for (m, h) in missing.iter_mut().zip(&heard) {
                    *m &= !h;
                }
                return Err(verr(format!(
                    "barrier: rank {r} can finish before ranks {} entered the barrier (it never hears from them)",
                    sets::fmt_bits(&missing)
                )));
            }
        }
        Ok(())
    }
}
