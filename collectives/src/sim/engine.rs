//! The discrete-event engine behind [`simulate`](super::simulate) and
//! [`simulate_symmetric`](super::simulate_symmetric): per-step state in flat arrays, a binary
//! heap of timed events, FIFO queues per port; no allocation per step once set up.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::symmetric::Symmetry;
use super::{ChainLink, ModelParams, Network, SimResult};
use crate::cost::Cost;
use crate::error::{Error, Result};
use crate::schedule::{Schedule, StepKind};
use crate::topology::Topology;

/// Whole job, or the block of ranks 0..k standing for all under a relabeling: rank j·k + i runs
/// rank i's schedule relabeled by the shift j·k (a rotation by j·k, or XOR with j·k). k = 1 is
/// rank 0 alone; k = ranks per node, one node standing for all (two levels).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Full,
    Symmetric(Symmetry, u32),
}

/// In a symmetric replay of the block 0..k: the message from rank `a` to rank `x` is, shifted
/// back by x's block, a message to the block's rank x mod k from the returned source. Returns
/// (x mod k, source). (With (r, src) for (a, x) it also gives the sender's block rank and its
/// destination of a message that r receives from src.)
fn fold(sym: Symmetry, k: u32, a: u32, x: u32, p: u32) -> (u32, u32) {
    let d = x - x % k;
    let src = match sym {
        Symmetry::Rotation => ((u64::from(a) + u64::from(p) - u64::from(d)) % u64::from(p)) as u32,
        Symmetry::Xor => a ^ d,
    };
    (x % k, src)
}

/// The two-level machine: the nodes of the call's topology, each with one network interface
/// that serializes the bytes of the messages leaving and entering it.
struct TwoLevel<'a> {
    topo: &'a Topology,
    net: Network,
    /// When each node's interface is free to send, and to receive, the next message's bytes.
    out_free: Vec<f64>,
    in_free: Vec<f64>,
}

const NONE: u32 = u32::MAX;

/// Terms accumulated along a chain of steps.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
struct Terms {
    alpha: f64,
    beta: f64,
    gamma: f64,
    copy: f64,
    msgs: u64,
    rdv: u64,
    /// Local steps (Copy, Reduce).
    local: u64,
    /// Messages into hot destinations (see `Engine::hot`) and their bytes.
    hot: u64,
    hot_bytes: f64,
    /// Two levels: α factors and bytes of messages between nodes (at the network's prices), and
    /// seconds waited for a node's network interface.
    net_alpha: f64,
    net_beta: f64,
    nic_wait: f64,
}

impl Terms {
    fn key(&self) -> [f64; 10] {
        [
            self.alpha,
            self.beta,
            self.gamma,
            self.copy,
            self.local as f64,
            self.hot as f64,
            self.hot_bytes,
            self.net_alpha,
            self.net_beta,
            self.nic_wait,
        ]
    }
}

/// Whether (t2, c2) comes after (t1, c1): later time, or the same time with more α, β, γ, copy,
/// local steps.
fn later(t1: f64, c1: &Terms, t2: f64, c2: &Terms) -> bool {
    match t2.total_cmp(&t1) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => {
            let (k1, k2) = (c1.key(), c2.key());
            for i in 0..k1.len() {
                match k2[i].total_cmp(&k1[i]) {
                    Ordering::Greater => return true,
                    Ordering::Less => return false,
                    Ordering::Equal => {}
                }
            }
            false
        }
    }
}

// Event kinds. At one instant, events run in classes: completions first, then the send ports and
// CPUs pick their next step, then the receive ports pick among every request of the instant, and
// last the transfers that started get their cost (so every transfer starting at that instant is
// known when the f factors are decided; computations get their cost in the same last class, for
// the oversubscription factor, when cores are shared). Arbitration therefore never depends on
// event order.
const CPU_DONE: u8 = 0;
const TRANSFER_END: u8 = 1;
const GRANT_SEND: u8 = 2;
const GRANT_CPU: u8 = 3;
const GRANT_RECV: u8 = 4;
const FINALIZE: u8 = 5;
const FINALIZE_CPU: u8 = 6;
const ARRIVE: u8 = 7;

fn class(kind: u8) -> u64 {
    match kind {
        CPU_DONE | TRANSFER_END | ARRIVE => 0,
        GRANT_SEND | GRANT_CPU => 1,
        GRANT_RECV => 2,
        _ => 3,
    }
}

/// A waiting request: earliest time first, then the lower key (rank), then the lower step id.
type Waiting = std::cmp::Reverse<(u64, u32, u32)>;

fn waiting(t: f64, key: u32, g: u32) -> Waiting {
    // times are ≥ 0, where the bit pattern orders like the value
    std::cmp::Reverse((t.to_bits(), key, g))
}

/// A timed event (`g` is a step, or a rank for the grants).
struct Event {
    t: f64,
    key: u64,
    kind: u8,
    g: u32,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.key.cmp(&self.key))
    }
}

/// Ports and CPU of one simulated rank. Each serves its waiting steps earliest first (ties: lower
/// step id; for the receive port, lower sender rank first) and remembers the last step it served,
/// whose completion a step that waited for it inherits.
#[derive(Default)]
struct RankState {
    /// Send at the head of the send port (waiting for the receiver or transferring), or NONE.
    send_head: u32,
    send_last: u32,
    send_q: BinaryHeap<Waiting>,
    send_grant: bool,
    /// Transfer occupying the receive port, or NONE.
    recv_cur: u32,
    recv_last: u32,
    recv_q: BinaryHeap<Waiting>,
    recv_grant: bool,
    /// Computation running on the CPU, or NONE.
    cpu_cur: u32,
    cpu_last: u32,
    cpu_q: BinaryHeap<Waiting>,
    cpu_grant: bool,
    /// Start of the latest transfer out of / into this rank, and when the latest ends.
    send_start: f64,
    recv_start: f64,
    send_until: f64,
    recv_until: f64,
    bytes_sent: u64,
    bytes_recv: u64,
    msgs: u64,
    /// Local steps run.
    local: u64,
}

struct Engine<'a> {
    scheds: &'a [&'a Schedule],
    mode: Mode,
    elem: u64,
    cfg: ModelParams,
    /// Global index of each rank's first step (len = ranks + 1).
    base: Vec<u32>,
    owner: Vec<u32>,
    /// Ready time, then completion time, of each step, and the terms of the chain behind it.
    t: Vec<f64>,
    cp: Vec<Terms>,
    /// The step whose completion (or port/CPU release) set `t` and `cp`, or NONE.
    pred: Vec<u32>,
    /// Deps not yet done (+1 for a Recv's message).
    remaining: Vec<u32>,
    /// For a Send: the matching Recv.
    target: Vec<u32>,
    /// For a Recv: whether a step that depends on it reads its destination (forwards it, reduces
    /// it or into it, copies it), so the receiver's cache holds those lines when the next call's
    /// message is written there (`ModelParams::hot_beta`).
    hot: Vec<bool>,
    /// For a Send, with a gap below 1 (else empty): the α factor its message still travels after
    /// its transfer frees the ports (`ModelParams::gap`).
    tail: Vec<f64>,
    /// Dependents of each step (CSR).
    dstart: Vec<u32>,
    dlist: Vec<u32>,
    ranks: Vec<RankState>,
    heap: BinaryHeap<Event>,
    seq: u64,
    /// Events at `now`, by class (completions, send/CPU grants, receive grants, finalizes).
    lists: [Vec<(u8, u32)>; 4],
    work: Vec<u32>,
    now: f64,
    done: u64,
    /// Transfers and computations under way (in this replay's ranks), for the oversubscription.
    busy: u32,
    /// The network level, when the parameters have one and the call a topology.
    levels: Option<TwoLevel<'a>>,
    /// Whether the finalize list got entries since it was last sorted (two levels: the network
    /// interfaces serve the transfers of an instant in (rank, step) order).
    finalize_unsorted: bool,
}

fn sim_err(msg: String) -> Error {
    Error::Simulate(msg)
}

/// Replays `scheds` (all ranks in `Mode::Full`, the block's ranks in `Mode::Symmetric`) placed by
/// `topo` (used with a network level in `cfg`).
pub(crate) fn run(
    scheds: &[&Schedule],
    mode: Mode,
    elem: u64,
    cfg: &ModelParams,
    topo: Option<&Topology>,
) -> Result<SimResult> {
    let mut e = Engine::new(scheds, mode, elem, cfg)?;
    if let (Some(net), Some(topo)) = (cfg.network, topo) {
        let n = topo.nodes() as usize;
        e.levels = Some(TwoLevel { topo, net, out_free: vec![0.0; n], in_free: vec![0.0; n] });
    }
    e.wire()?;
    e.match_messages()?;
    e.replay()?;
    Ok(e.result())
}

impl<'a> Engine<'a> {
    fn new(scheds: &'a [&'a Schedule], mode: Mode, elem: u64, cfg: &ModelParams) -> Result<Engine<'a>> {
        let mut base = Vec::with_capacity(scheds.len() + 1);
        let mut total: u64 = 0;
        for s in scheds {
            base.push(total as u32);
            total += s.len() as u64;
            if total >= u64::from(NONE) {
                return Err(sim_err(format!("job has more than {} steps; too large to replay", NONE - 1)));
            }
        }
        base.push(total as u32);
        let n = total as usize;
        let mut owner = Vec::with_capacity(n);
        for (r, s) in scheds.iter().enumerate() {
            owner.extend(std::iter::repeat_n(r as u32, s.len()));
        }
        let ranks = (0..scheds.len())
            .map(|_| RankState {
                send_head: NONE,
                send_last: NONE,
                recv_cur: NONE,
                recv_last: NONE,
                cpu_cur: NONE,
                cpu_last: NONE,
                send_start: -1.0,
                recv_start: -1.0,
                ..RankState::default()
            })
            .collect();
        Ok(Engine {
            scheds,
            mode,
            elem,
            cfg: *cfg,
            base,
            owner,
            t: vec![0.0; n],
            cp: vec![Terms::default(); n],
            pred: vec![NONE; n],
            remaining: vec![0; n],
            target: vec![NONE; n],
            hot: vec![false; n],
            tail: if cfg.gap < 1.0 { vec![0.0; n] } else { Vec::new() },
            dstart: Vec::new(),
            dlist: Vec::new(),
            ranks,
            heap: BinaryHeap::new(),
            seq: 0,
            lists: Default::default(),
            work: Vec::new(),
            now: 0.0,
            done: 0,
            busy: 0,
            levels: None,
            finalize_unsorted: false,
        })
    }

    fn n(&self) -> usize {
        self.owner.len()
    }

    fn kind(&self, g: u32) -> &'a StepKind {
        let r = self.owner[g as usize] as usize;
        let scheds: &'a [&'a Schedule] = self.scheds;
        scheds[r].step(g - self.base[r])
    }

    fn describe(&self, g: u32) -> String {
        let r = self.owner[g as usize] as usize;
        format!("rank {} step {} (`{}`)", self.scheds[r].rank, g - self.base[r], self.kind(g))
    }

    /// Dependents lists and dep counters.
    fn wire(&mut self) -> Result<()> {
        let n = self.n();
        let mut count = vec![0u32; n + 1];
        for (r, s) in self.scheds.iter().enumerate() {
            let b = self.base[r];
            for (id, k, deps) in s.iter() {
                let extra = u32::from(matches!(k, StepKind::Recv { .. }));
                self.remaining[(b + id) as usize] = deps.len() as u32 + extra;
                // What this step reads: a Recv it depends on whose destination it reads is hot.
                let reads = k.reads();
                let updates = match *k {
                    StepKind::Reduce { dst, .. } => Some(dst),
                    _ => None,
                };
                for &d in deps {
                    if d >= id {
                        return Err(sim_err(format!("rank {} step {id} depends on later step {d}", s.rank)));
                    }
                    count[(b + d) as usize] += 1;
                    if let StepKind::Recv { dst, .. } = *s.step(d) {
                        if reads.is_some_and(|r| r.overlaps(&dst)) || updates.is_some_and(|u| u.overlaps(&dst)) {
                            self.hot[(b + d) as usize] = true;
                        }
                    }
                }
            }
        }
        let mut acc = 0u32;
        for c in count.iter_mut() {
            let v = *c;
            *c = acc;
            acc += v;
        }
        let mut fill = count.clone();
        let mut dlist = vec![0u32; acc as usize];
        for (r, s) in self.scheds.iter().enumerate() {
            let b = self.base[r];
            for (id, _, deps) in s.iter() {
                for &d in deps {
                    let slot = &mut fill[(b + d) as usize];
                    dlist[*slot as usize] = b + id;
                    *slot += 1;
                }
            }
        }
        self.dstart = count;
        self.dlist = dlist;
        Ok(())
    }

    fn peer_of(&self, g: u32) -> u32 {
        match *self.kind(g) {
            StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => peer,
            _ => NONE,
        }
    }

    /// The simulated rank whose receive port a send uses.
    fn receiver(&self, s: u32) -> usize {
        match self.mode {
            Mode::Full => self.peer_of(s) as usize,
            Mode::Symmetric(_, k) => (self.peer_of(s) % k) as usize,
        }
    }

    fn p(&self) -> u32 {
        self.scheds.first().map_or(0, |s| s.size)
    }

    /// Replayed ranks per rank of the job (1 for a full replay).
    fn stands_for(&self) -> u64 {
        match self.mode {
            Mode::Full => 1,
            Mode::Symmetric(_, k) => u64::from(self.p() / k),
        }
    }

    /// Two levels, send s between nodes: (the sender's node, the receiving rank's node).
    fn crossing(&self, s: u32) -> Option<(usize, usize)> {
        let l = self.levels.as_ref()?;
        let a = self.scheds[self.owner[s as usize] as usize].rank;
        let (na, nx) = (l.topo.node_of(a), l.topo.node_of(self.peer_of(s)));
        (na != nx).then(|| (na as usize, l.topo.node_of(self.scheds[self.receiver(s)].rank) as usize))
    }

    /// α of send s's message: the network's between nodes, else the node's.
    fn alpha_of(&self, s: u32) -> f64 {
        match (&self.levels, self.crossing(s)) {
            (Some(l), Some(_)) => l.net.alpha,
            _ => self.cfg.alpha,
        }
    }

    /// Pairs the k-th send a→b with the k-th recv on b from a (in symmetric mode: block rank a's
    /// k-th send to x with the k-th recv of block rank x mod k from a's image, see [`fold`]).
    fn match_messages(&mut self) -> Result<()> {
        let nr = self.scheds.len();
        let p = self.scheds.first().map_or(0, |s| s.size);
        // Every rank's recvs, sorted by (source, step).
        let mut rbase = vec![0usize; nr + 1];
        let mut recvs: Vec<(u32, u32)> = Vec::new();
        for r in 0..nr {
            let b = self.base[r];
            for (id, k, _) in self.scheds[r].iter() {
                if let StepKind::Recv { peer, .. } = *k {
                    if peer >= p || peer == self.scheds[r].rank {
                        return Err(sim_err(format!("{}: peer out of range or self", self.describe(b + id))));
                    }
                    recvs.push((peer, b + id));
                }
            }
            recvs[rbase[r]..].sort_unstable();
            rbase[r + 1] = recvs.len();
        }
        let mut matched = 0usize;
        let mut sends: Vec<(u32, u32)> = Vec::new();
        for a in 0..nr {
            let b0 = self.base[a];
            let rank_a = self.scheds[a].rank;
            sends.clear();
            for (id, k, _) in self.scheds[a].iter() {
                if let StepKind::Send { peer, .. } = *k {
                    if peer >= p || peer == rank_a {
                        return Err(sim_err(format!("{}: peer out of range or self", self.describe(b0 + id))));
                    }
                    sends.push((peer, b0 + id));
                }
            }
            sends.sort_unstable();
            let mut i = 0;
            while i < sends.len() {
                let x = sends[i].0;
                let j = i + sends[i..].iter().take_while(|s| s.0 == x).count();
                let (rb, src) = match self.mode {
                    Mode::Full => (x as usize, rank_a),
                    Mode::Symmetric(sym, k) => {
                        let (rb, src) = fold(sym, k, rank_a, x, p);
                        (rb as usize, src)
                    }
                };
                let seg = &recvs[rbase[rb]..rbase[rb + 1]];
                let lo = seg.partition_point(|&(q, _)| q < src);
                let hi = seg.partition_point(|&(q, _)| q <= src);
                if hi - lo != j - i {
                    return Err(sim_err(self.count_mismatch(rank_a, x, j - i, src, hi - lo)));
                }
                for (q, &(_, s)) in sends[i..j].iter().enumerate() {
                    let rcv = seg[lo + q].1;
                    if self.kind(s).len() != self.kind(rcv).len() {
                        return Err(sim_err(format!(
                            "message {} of the pair: {} sends {} elements, {} receives {}",
                            q,
                            self.describe(s),
                            self.kind(s).len(),
                            self.describe(rcv),
                            self.kind(rcv).len()
                        )));
                    }
                    self.target[s as usize] = rcv;
                }
                matched += j - i;
                i = j;
            }
        }
        if matched != recvs.len() {
            // Some recv has no send: find a (receiver, source) pair with too many recvs.
            for r in 0..nr {
                let seg = &recvs[rbase[r]..rbase[r + 1]];
                for &(src, _) in seg {
                    let want = seg.iter().filter(|&&(q, _)| q == src).count();
                    let (sender, dst) = match self.mode {
                        Mode::Full => (src as usize, self.scheds[r].rank),
                        Mode::Symmetric(sym, k) => {
                            let (sender, dst) = fold(sym, k, self.scheds[r].rank, src, p);
                            (sender as usize, dst)
                        }
                    };
                    if sender < nr {
                        let have = self.scheds[sender]
                            .iter()
                            .filter(|(_, k, _)| matches!(k, StepKind::Send { peer, .. } if *peer == dst))
                            .count();
                        if have != want {
                            return Err(sim_err(self.count_mismatch(self.scheds[sender].rank, dst, have, src, want)));
                        }
                    }
                }
            }
            return Err(sim_err(format!("{} receives have no matching send", recvs.len() - matched)));
        }
        Ok(())
    }

    fn count_mismatch(&self, a: u32, x: u32, sent: usize, src: u32, received: usize) -> String {
        match self.mode {
            Mode::Full => {
                format!("unmatched messages: rank {a} sends {sent} to rank {x}, which receives {received} from it")
            }
            Mode::Symmetric(sym, k) => format!(
                "unmatched messages under {sym:?} symmetry (blocks of {k}): rank {a} sends {sent} to rank {x}, \
                 whose mirror in the block receives {received} from rank {src}"
            ),
        }
    }

    /// Schedules an event at `t` (at `now`, it joins the list of its class instead of the heap).
    fn push(&mut self, t: f64, kind: u8, g: u32) {
        if t == self.now {
            self.lists[class(kind) as usize].push((kind, g));
            return;
        }
        self.seq += 1;
        self.heap.push(Event { t, key: class(kind) << 62 | self.seq, kind, g });
    }

    /// Moves (t, c) into step g's state if it comes later than what g has.
    fn offer(&mut self, g: u32, t: f64, c: Terms, from: u32) {
        let i = g as usize;
        if later(self.t[i], &self.cp[i], t, &c) {
            self.t[i] = t;
            self.cp[i] = c;
            self.pred[i] = from;
        }
    }

    fn replay(&mut self) -> Result<()> {
        for g in 0..self.n() as u32 {
            if self.remaining[g as usize] == 0 {
                self.on_ready(g);
            }
        }
        self.drain();
        // Events at `now` wait in one list per class; the heap holds later ones. The lowest
        // non-empty class runs first, and every event may add to any class at `now`.
        loop {
            // heap events are completions (class 0): those at `now` go before the grants
            let heap_now = self.heap.peek().is_some_and(|e| e.t == self.now);
            let class = self.lists.iter().position(|l| !l.is_empty());
            if class == Some(3) && self.finalize_unsorted && self.levels.is_some() {
                // popped from the end: lowest (kind, step) first, whatever the order of grants
                self.lists[3].sort_unstable_by(|x, y| y.cmp(x));
                self.finalize_unsorted = false;
            }
            let ev = match class {
                Some(c) if c == 0 || !heap_now => self.lists[c].pop(),
                _ => None,
            };
            let (kind, g) = match ev {
                Some(e) => e,
                None => match self.heap.pop() {
                    Some(e) => {
                        self.now = e.t;
                        (e.kind, e.g)
                    }
                    None => break,
                },
            };
            match kind {
                CPU_DONE => self.cpu_done(g),
                TRANSFER_END => self.transfer_end(g),
                GRANT_SEND => self.grant_send(g as usize),
                GRANT_CPU => self.grant_cpu(g as usize),
                GRANT_RECV => self.grant_recv(g as usize),
                FINALIZE_CPU => self.finalize_cpu(g),
                ARRIVE => self.arrive(g),
                _ => self.finalize(g),
            }
            self.drain();
        }
        if self.done as usize != self.n() {
            return Err(self.deadlock());
        }
        Ok(())
    }

    /// Completes the steps on the work list at `now` and readies their dependents.
    fn drain(&mut self) {
        while let Some(g) = self.work.pop() {
            self.done += 1;
            let (t, c) = (self.t[g as usize], self.cp[g as usize]);
            let (lo, hi) = (self.dstart[g as usize], self.dstart[g as usize + 1]);
            for i in lo..hi {
                let d = self.dlist[i as usize];
                self.offer(d, t, c, g);
                self.remaining[d as usize] -= 1;
                if self.remaining[d as usize] == 0 {
                    self.on_ready(d);
                }
            }
        }
    }

    /// Step g's deps (and message) are done at `now`.
    fn on_ready(&mut self, g: u32) {
        let r = self.owner[g as usize] as usize;
        match *self.kind(g) {
            StepKind::Recv { .. } => self.work.push(g),
            StepKind::Send { .. } => {
                self.ranks[r].send_q.push(waiting(self.now, 0, g));
                self.wake(GRANT_SEND, r);
            }
            StepKind::Reduce { .. } | StepKind::Copy { .. } => {
                self.ranks[r].cpu_q.push(waiting(self.now, 0, g));
                self.wake(GRANT_CPU, r);
            }
        }
    }

    /// Schedules a grant of rank r's send port, CPU or receive port at `now` if it is idle and
    /// has waiting steps.
    fn wake(&mut self, kind: u8, r: usize) {
        let st = &mut self.ranks[r];
        let (idle, flag) = match kind {
            GRANT_SEND => (st.send_head == NONE && !st.send_q.is_empty(), &mut st.send_grant),
            GRANT_CPU => (st.cpu_cur == NONE && !st.cpu_q.is_empty(), &mut st.cpu_grant),
            _ => (st.recv_cur == NONE && !st.recv_q.is_empty(), &mut st.recv_grant),
        };
        if idle && !*flag {
            *flag = true;
            let class = if kind == GRANT_RECV { 2 } else { 1 };
            self.lists[class].push((kind, r as u32));
        }
    }

    /// Step g waited for the port or CPU whose last user was `last`: it starts no earlier.
    fn after(&mut self, g: u32, last: u32) {
        if last != NONE {
            let (t, c) = (self.t[last as usize], self.cp[last as usize]);
            self.offer(g, t, c, last);
        }
    }

    /// The time factor of an activity starting now with `busy` under way (its own included):
    /// max(1, k / cores), k counted over the whole job (see the module doc).
    fn oversubscription(&self) -> f64 {
        let c = self.cfg.cores;
        if c == 0 {
            return 1.0;
        }
        let k = u64::from(self.busy) * self.stands_for();
        (k as f64 / f64::from(c)).max(1.0)
    }

    /// Whether rank r's send port (`send`) or CPU (else) may take its next step now. Always, unless
    /// [`ModelParams::cpu_sends`] makes them one resource: then not while the other side is busy, nor
    /// when the other side's earliest waiting step is earlier (ties: lower step id), which is woken
    /// instead.
    fn takes_turn(&mut self, r: usize, send: bool) -> bool {
        if !self.cfg.cpu_sends {
            return true;
        }
        let st = &self.ranks[r];
        if (send && st.cpu_cur != NONE) || (!send && st.send_head != NONE) {
            return false;
        }
        let cpu_first = match (st.cpu_q.peek(), st.send_q.peek()) {
            (Some(c), Some(s)) => (c.0 .0, c.0 .2) < (s.0 .0, s.0 .2),
            (Some(_), None) => true,
            _ => false,
        };
        if cpu_first == send {
            self.wake(if send { GRANT_CPU } else { GRANT_SEND }, r);
            return false;
        }
        true
    }

    /// Rank r's send port or CPU (`kind`) is free: its next step may go, and with
    /// [`ModelParams::cpu_sends`] so may the other side's, which shares it.
    fn wake_freed(&mut self, kind: u8, r: usize) {
        self.wake(kind, r);
        if self.cfg.cpu_sends {
            self.wake(if kind == GRANT_SEND { GRANT_CPU } else { GRANT_SEND }, r);
        }
    }

    /// The send port is idle: the next send becomes its head and asks for the receiver's port.
    fn grant_send(&mut self, a: usize) {
        self.ranks[a].send_grant = false;
        if self.ranks[a].send_head != NONE || !self.takes_turn(a, true) {
            return;
        }
        let Some(std::cmp::Reverse((_, _, s))) = self.ranks[a].send_q.pop() else { return };
        self.ranks[a].send_head = s;
        self.after(s, self.ranks[a].send_last);
        if self.cfg.cpu_sends {
            self.after(s, self.ranks[a].cpu_last);
        }
        let b = self.receiver(s);
        let from = match self.mode {
            Mode::Full => self.scheds[a].rank,
            Mode::Symmetric(sym, k) => fold(sym, k, self.scheds[a].rank, self.peer_of(s), self.p()).1,
        };
        self.ranks[b].recv_q.push(waiting(self.t[s as usize], from, s));
        self.wake(GRANT_RECV, b);
    }

    /// The receive port is idle: the earliest request (lowest sender rank on a tie) starts; its
    /// cost is decided once every start at `now` is known.
    fn grant_recv(&mut self, b: usize) {
        self.ranks[b].recv_grant = false;
        if self.ranks[b].recv_cur != NONE {
            return;
        }
        let Some(std::cmp::Reverse((_, _, s))) = self.ranks[b].recv_q.pop() else { return };
        self.after(s, self.ranks[b].recv_last);
        let a = self.owner[s as usize] as usize;
        self.ranks[b].recv_cur = s;
        self.busy += 1;
        self.ranks[b].recv_start = self.now;
        self.ranks[a].send_start = self.now;
        self.lists[3].push((FINALIZE, s));
        self.finalize_unsorted = true;
    }

    /// The CPU is idle: the next computation runs.
    fn grant_cpu(&mut self, r: usize) {
        self.ranks[r].cpu_grant = false;
        if self.ranks[r].cpu_cur != NONE || !self.takes_turn(r, false) {
            return;
        }
        let Some(std::cmp::Reverse((_, _, g))) = self.ranks[r].cpu_q.pop() else { return };
        self.after(g, self.ranks[r].cpu_last);
        if self.cfg.cpu_sends {
            self.after(g, self.ranks[r].send_last);
        }
        self.busy += 1;
        self.ranks[r].cpu_cur = g;
        if self.cfg.cores == 0 {
            // No oversubscription: the cost is known now (a computation that costs nothing
            // completes before this instant's receive grants, as it always has).
            self.finalize_cpu(g);
        } else {
            self.lists[3].push((FINALIZE_CPU, g));
            self.finalize_unsorted = true;
        }
    }

    /// A computation that started at `now` gets its cost: at once without shared cores, else
    /// once every start of the instant is known (for the oversubscription factor).
    fn finalize_cpu(&mut self, g: u32) {
        let r = self.owner[g as usize] as usize;
        let i = g as usize;
        let bytes = (self.kind(g).len() * self.elem) as f64;
        let s = self.oversubscription();
        self.t[i] += s * self.cfg.step_cost;
        self.cp[i].local += 1;
        self.ranks[r].local += 1;
        if matches!(self.kind(g), StepKind::Reduce { .. }) {
            self.t[i] += s * bytes * self.cfg.gamma;
            self.cp[i].gamma += s * bytes;
        } else {
            self.t[i] += s * bytes * self.cfg.copy_beta;
            self.cp[i].copy += s * bytes;
        }
        self.push(self.t[i], CPU_DONE, g);
    }

    fn cpu_done(&mut self, g: u32) {
        let r = self.owner[g as usize] as usize;
        self.ranks[r].cpu_cur = NONE;
        self.busy -= 1;
        self.ranks[r].cpu_last = g;
        self.work.push(g);
        self.wake_freed(GRANT_CPU, r);
    }

    fn finalize(&mut self, s: u32) {
        let (a, b) = (self.owner[s as usize] as usize, self.receiver(s));
        let now = self.now;
        let (ra, rb) = (&self.ranks[a], &self.ranks[b]);
        let bi = ra.recv_start == now || ra.recv_until > now || rb.send_start == now || rb.send_until > now;
        let m = self.cfg;
        let (fa, fb) = if bi { (m.f_alpha, m.f_beta) } else { (1.0, 1.0) };
        let over = self.oversubscription();
        let (fa, fb) = (fa * over, fb * over);
        let bytes = (self.kind(s).len() * self.elem) as f64;
        // Between nodes: the network's α and β, the bytes through both nodes' interfaces once
        // both are free (the ports wait with them).
        let crossing = self.crossing(s);
        let (alpha, beta, start) = match (crossing, self.levels.as_mut()) {
            (Some((na, nb)), Some(l)) => {
                let start = now.max(l.out_free[na]).max(l.in_free[nb]);
                let free = start + fb * bytes * l.net.beta;
                (l.out_free[na], l.in_free[nb]) = (free, free);
                (l.net.alpha, l.net.beta, start)
            }
            _ => (m.alpha, m.beta, now),
        };
        let i = s as usize;
        let rdv = self.kind(s).len() * self.elem > self.cfg.rendezvous.eager_limit;
        let extra = if rdv { self.cfg.rendezvous.alpha } else { 0.0 };
        let hot = self.hot[self.target[i] as usize];
        let hot_bytes = if hot { bytes } else { 0.0 };
        let hot_cost = if hot { self.cfg.hot_alpha + bytes * self.cfg.hot_beta } else { 0.0 };
        // The ports are held for the gap's share of α; the rest of it the message travels alone.
        let held = match self.tail.get_mut(i) {
            Some(tail) => {
                *tail = fa * (1.0 - self.cfg.gap);
                fa - *tail
            }
            None => fa,
        };
        self.t[i] = start + held * alpha + fb * bytes * beta + extra + hot_cost;
        let c = &mut self.cp[i];
        if crossing.is_some() {
            c.net_alpha += held;
            c.net_beta += fb * bytes;
            c.nic_wait += start - now;
        } else {
            c.alpha += held;
            c.beta += fb * bytes;
        }
        c.msgs += 1;
        c.rdv += u64::from(rdv);
        c.hot += u64::from(hot);
        c.hot_bytes += hot_bytes;
        let end = self.t[i];
        self.ranks[a].send_until = self.ranks[a].send_until.max(end);
        self.ranks[b].recv_until = self.ranks[b].recv_until.max(end);
        self.push(end, TRANSFER_END, s);
    }

    fn transfer_end(&mut self, s: u32) {
        let (a, b) = (self.owner[s as usize] as usize, self.receiver(s));
        let bytes = self.kind(s).len() * self.elem;
        let (t, c) = (self.t[s as usize], self.cp[s as usize]);
        self.ranks[a].bytes_sent += bytes;
        self.ranks[a].msgs += 1;
        self.ranks[b].bytes_recv += bytes;
        self.ranks[b].recv_cur = NONE;
        self.busy -= 1;
        self.ranks[b].recv_last = s;
        self.wake(GRANT_RECV, b);
        self.ranks[a].send_head = NONE;
        self.ranks[a].send_last = s;
        self.wake_freed(GRANT_SEND, a);
        self.work.push(s);
        match self.tail.get(s as usize) {
            Some(&tail) if tail > 0.0 => self.push(t + tail * self.alpha_of(s), ARRIVE, s),
            _ => self.deliver(s, t, c),
        }
    }

    /// Send s's message arrives at `now` after the latency left when its ports were freed.
    fn arrive(&mut self, s: u32) {
        let mut c = self.cp[s as usize];
        if self.crossing(s).is_some() {
            c.net_alpha += self.tail[s as usize];
        } else {
            c.alpha += self.tail[s as usize];
        }
        self.deliver(s, self.now, c);
    }

    /// Send s's message is at its receiver at `t`, with the chain `c` behind it.
    fn deliver(&mut self, s: u32, t: f64, c: Terms) {
        let rcv = self.target[s as usize];
        self.offer(rcv, t, c, s);
        self.remaining[rcv as usize] -= 1;
        if self.remaining[rcv as usize] == 0 {
            self.on_ready(rcv);
        }
    }

    fn deadlock(&self) -> Error {
        let mut stuck = Vec::new();
        let mut ranks_stuck = 0;
        for r in 0..self.scheds.len() {
            let (lo, hi) = (self.base[r], self.base[r + 1]);
            if let Some(g) = (lo..hi).find(|&g| self.remaining[g as usize] > 0) {
                ranks_stuck += 1;
                if stuck.len() < 4 {
                    stuck.push(self.describe(g));
                }
            }
        }
        sim_err(format!(
            "deadlock: {} of {} steps never ran; {ranks_stuck} rank(s) stuck, first waiting steps: {}",
            self.n() as u64 - self.done,
            self.n(),
            stuck.join("; ")
        ))
    }

    fn result(&self) -> SimResult {
        let nr = self.scheds.len();
        let mut finish = vec![0.0f64; nr];
        let mut best: Option<u32> = None;
        for g in 0..self.n() as u32 {
            let i = g as usize;
            let r = self.owner[i] as usize;
            finish[r] = finish[r].max(self.t[i]);
            match best {
                Some(b) if !later(self.t[b as usize], &self.cp[b as usize], self.t[i], &self.cp[i]) => {}
                _ => best = Some(g),
            }
        }
        let cp = best.map(|b| self.cp[b as usize]).unwrap_or_default();
        let mut chain = Vec::new();
        let mut g = best.unwrap_or(NONE);
        while g != NONE {
            let r = self.owner[g as usize] as usize;
            chain.push(ChainLink { rank: self.scheds[r].rank, step: g - self.base[r], finish: self.t[g as usize] });
            g = self.pred[g as usize];
        }
        chain.reverse();
        let last = best.map_or(0.0, |b| self.t[b as usize]);
        let msgs: u64 = self.ranks.iter().map(|r| r.msgs).sum();
        let bytes: u64 = self.ranks.iter().map(|r| r.bytes_sent).sum();
        let max_sent = self.ranks.iter().map(|r| r.bytes_sent).max().unwrap_or(0);
        let max_recv = self.ranks.iter().map(|r| r.bytes_recv).max().unwrap_or(0);
        let max_msgs = self.ranks.iter().map(|r| r.msgs).max().unwrap_or(0);
        let max_local = self.ranks.iter().map(|r| r.local).max().unwrap_or(0);
        let steps = self.n() as u64;
        let (finish, messages, bytes, steps) = match self.mode {
            Mode::Full => (finish, msgs, bytes, steps),
            Mode::Symmetric(..) => {
                let m = self.stands_for();
                (vec![last; self.p() as usize], msgs * m, bytes * m, steps * m)
            }
        };
        SimResult {
            time: last + self.cfg.overhead,
            critical_path: Cost::new(cp.alpha, cp.beta, cp.gamma),
            critical_copy_bytes: cp.copy,
            critical_messages: cp.msgs,
            critical_rendezvous: cp.rdv,
            critical_local_steps: cp.local,
            critical_hot_messages: cp.hot,
            critical_hot_bytes: cp.hot_bytes,
            critical_network: Cost::new(cp.net_alpha, cp.net_beta, 0.0),
            critical_nic_wait: cp.nic_wait,
            max_local_steps: max_local,
            critical_chain: chain,
            max_bytes_sent: max_sent,
            max_bytes_received: max_recv,
            max_messages_sent: max_msgs,
            finish,
            messages,
            bytes,
            steps,
            replayed_steps: self.n() as u64,
        }
    }
}
