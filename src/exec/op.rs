//! One collective call in flight: the schedule, the bound buffers and the state of every step.
//! Steps whose deps are done are issued at once; completions from the fabric finish them.
//!
//! Per message (the k-th Send a→b matches the k-th Recv of b from a; k is the message index):
//! - bytes ≤ eager threshold: the sender writes straight from its buffer into a free slot of its
//!   ring at the receiver (immediate = slot, ctx, seq, k); the receiver copies the slot into the
//!   Recv region when the Recv step is ready (the one copy) and frees the slot. Without a free
//!   slot the sender sends an RTS and proceeds as below.
//! - otherwise (zero-copy): the receiver grants the Recv region when the Recv step is ready (at
//!   the collective's start for Recvs without deps: one Grant message per peer), the sender writes
//!   its Send region into it with immediate = grant id, split into the pieces the grant names
//!   (the receiver's `Endpoint::write_segment` for the connection, so both count them alike).
//!   A Recv region the sender would write with a system call (`Endpoint::writes_by_syscall`)
//!   and of at most `ExecConfig::staged_receive_max` bytes is granted in pooled scratch instead,
//!   copied out when it arrives (a staged receive; a receiver with a CPU of its own that sends
//!   nothing in the call grants it in pieces of [`STAGED_PIECE`] and copies each out as it arrives); an op
//!   that fails drops that scratch rather than pooling it, as a peer may still write it.
//! - shared copies (`ExecConfig::shared_copy_min`, where the two ranks can read each other's
//!   memory: shm): a receiver that sends nothing in the call grants a large message in two
//!   pieces; its sender writes the first and offers the second (`Kind::Offer`, unless the
//!   receiver would read with a system call what the sender writes through a mapping), which the
//!   receiver reads out of the sender's buffer (`Endpoint::read`) and confirms (`Kind::Pulled`),
//!   so two cores copy at once; the sender's Send ends with the confirmation.
//! - pulled reductions (`ExecConfig::pull_reduce_min`, same fabrics): a Recv whose region only a
//!   Reduce reads (`Plan::fuse`) is granted whole (`GrantEntry::whole`); a sender with nothing
//!   after its Send, or only Recvs where the whole job completes with them waiting (in place:
//!   `Plan::lends`), offers the whole message instead of writing it (`Kind::Offer` from byte 0;
//!   not a message of at most the staging limit from memory the receiver would read with a
//!   system call: that one fills the grant, staged scratch, with a memcpy),
//!   the Recv is done at once, and its Reduce, when its turn comes, reads the sender's buffer
//!   (`Endpoint::read_with`: a load through a mapping, or `process_vm_readv` into pieces that
//!   stay in cache) and confirms (`Kind::Pulled`). The message is never copied: each reducer
//!   reads its peers' inputs once (mamidala-2008 §4's shmem designs over the program's buffers).

use std::sync::Arc;
use std::time::Instant;

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::kernels;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::schedule::{Order, Region, StepId, StepKind};
use fabcoll_fabric::{Access, Mr, SILENT_WRITE};

use super::bufs::{local_step, Bound, Bufs};
use super::core::EagerSent;
use super::fasthash::{FastMap, FastSet};
use super::plan::{Plan, NOT_FUSED};
use super::proto::{self, CallSig, GrantEntry, Kind, Offer};
use super::runner::Fused;
use super::wait::Backoff;
use super::{Core, OpKey};
use crate::error::{Error, Result};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum St {
    /// Deps not done.
    Blocked,
    /// Issued; waiting for the fabric (arrival, grant, write completion).
    Waiting,
    Done,
}

/// The checked-mode exchange of call signatures.
pub(crate) struct Check {
    pub mine: Vec<u8>,
    pub got: Vec<Option<Vec<u8>>>,
    pub missing: usize,
    pub describe: fn(&[u8]) -> String,
}

/// The pieces a staged receive is granted in: each is copied out of the scratch as soon as it
/// has arrived, while the sender writes the next, so the copy-out trails the sender's copy by a
/// piece instead of following all of it.
const STAGED_PIECE: usize = 128 << 10;

/// The pieces a pulled message is read in where the sender's memory is not mapped here (a
/// system call each): small enough that each stays in cache for its reduction.
const PULL_PIECE: usize = 64 << 10;

/// A staged receive in flight (`Op::grant`): the Recv step and its region, the scratch it was
/// granted in, the piece size, and the bytes of written pieces copied out so far.
struct Staged {
    step: StepId,
    dst: Region,
    scratch: Mr,
    seg: usize,
    copied: usize,
}

pub(crate) struct Op {
    pub key: OpKey,
    /// The operation's name (a collective's, or `send` / `recv`), for messages.
    pub coll: &'static str,
    pub alg: &'static str,
    pub sig: CallSig,
    pub rank: u32,
    plan: Arc<Plan>,
    elem: usize,
    dtype: Datatype,
    rop: Option<ReduceOp>,
    pub send: Bound,
    pub recv: Bound,
    pub scratch: Vec<Bound>,
    pub members: Arc<[u32]>,
    deps_left: Vec<u32>,
    st: Vec<St>,
    pending: Vec<u32>,
    grants: FastMap<(u32, u32), GrantEntry>,
    eager_in: FastMap<(u32, u32), u32>,
    rts_in: FastSet<(u32, u32)>,
    /// Fused Recv steps done whose message still sits in its eager slot (a few at a time).
    fused_slot: Vec<Fused>,
    /// Staged receives in flight.
    staged: Vec<Staged>,
    /// Receives granted whose sender may share their copy (`Core::shares_copy`): the Recv step,
    /// the piece size granted (an offer starts at a whole piece) and the grant id.
    shareable: Vec<(StepId, usize, u64)>,
    /// Receives granted whole for their Reduce to read out of the sender's buffer
    /// (`Core::pulls_reduce`): the Recv step and the grant id (the sender may write it instead).
    pulls: Vec<(StepId, u64)>,
    /// Messages offered whole, done as Recvs, that their Reduce reads out of the sender's buffer:
    /// the Recv step, the sender (communicator rank) and the offer.
    pulled: Vec<(StepId, u32, Offer)>,
    /// Ready Sends and Recvs (a stack), and ready local steps: `run` issues communication first.
    work: Vec<StepId>,
    work_local: Vec<StepId>,
    done: usize,
    /// Grants and RTS to flush, per peer (communicator rank).
    pub grant_out: Vec<Vec<GrantEntry>>,
    pub rts_out: Vec<Vec<u32>>,
    pub check: Option<Check>,
    pub started: bool,
    pub error: Option<Error>,
    /// When the first wait for this op began (the deadline counts from there); `None` until then,
    /// so an op that finishes inside its start never reads the clock.
    pub t0: Option<Instant>,
    /// The waiting a straight call did before this op took it over (`super::ring`): its first
    /// wait goes on from there instead of polling anew.
    pub polled: Backoff,
    /// Set when the deadline passed: abort notices were sent, waiting for peers' notices until then.
    pub grace_until: Option<Instant>,
    /// The peers it waits to send to were asked, with the call's signature, whether they make
    /// the same call (`Engine::check_deadline`).
    pub probed: bool,
    /// Peers' abort notices: who timed out here, and whom they were waiting for.
    pub notices: FastMap<u32, Vec<u32>>,
    /// A peer a write to failed (communicator rank) and the fabric's text: the op is in its grace
    /// period and ends with `Error::PeerLost`.
    pub lost: Option<(u32, String)>,
}

// SAFETY: the raw pointers in `Bound` point into buffers lent to the call for its whole duration
// (the Request/Scope lifetime or the blocking call); they are only dereferenced by the engine under
// its mutex, by one thread at a time.
unsafe impl Send for Op {}

/// A call's plan and buffers: what an op is made of.
pub(crate) struct Parts {
    pub spec: OpSpec,
    pub send: Bound,
    pub recv: Bound,
    pub scratch: Vec<Bound>,
}

/// What an op runs: its own copy of a [`CallSpec`].
#[derive(Clone)]
pub(crate) struct OpSpec {
    /// The operation's name (a collective's, or `send` / `recv`), for messages.
    pub coll: &'static str,
    pub alg: &'static str,
    /// The call's signature, carried by its eager messages, grants and RTS (`proto::CallSig`).
    pub sig: CallSig,
    pub plan: Arc<Plan>,
    pub dtype: Datatype,
    pub rop: Option<ReduceOp>,
}

/// What a call runs, borrowed from the prepared call: a straight call runs from it as it is, and
/// only an op (made at the start or at a hand-over) takes a copy.
#[derive(Copy, Clone)]
pub(crate) struct CallSpec<'a> {
    /// The operation's name (a collective's, or `send` / `recv`), for messages.
    pub coll: &'static str,
    pub alg: &'static str,
    pub sig: CallSig,
    pub plan: &'a Arc<Plan>,
    pub dtype: Datatype,
    pub rop: Option<&'a ReduceOp>,
}

impl CallSpec<'_> {
    /// The op's copy.
    pub fn to_op(self) -> OpSpec {
        OpSpec {
            coll: self.coll,
            alg: self.alg,
            sig: self.sig,
            plan: self.plan.clone(),
            dtype: self.dtype,
            rop: self.rop.cloned(),
        }
    }
}

impl Op {
    pub fn new(key: OpKey, spec: OpSpec, members: Arc<[u32]>, send: Bound, recv: Bound, scratch: Vec<Bound>) -> Op {
        let n = spec.plan.sched.len();
        let p = members.len();
        Op {
            key,
            coll: spec.coll,
            alg: spec.alg,
            sig: spec.sig,
            rank: spec.plan.sched.rank,
            elem: spec.dtype.size(),
            dtype: spec.dtype,
            rop: spec.rop,
            deps_left: spec.plan.deps.clone(),
            plan: spec.plan,
            send,
            recv,
            scratch,
            members,
            st: vec![St::Blocked; n],
            pending: vec![0; n],
            grants: FastMap::default(),
            eager_in: FastMap::default(),
            rts_in: FastSet::default(),
            fused_slot: Vec::new(),
            staged: Vec::new(),
            shareable: Vec::new(),
            pulls: Vec::new(),
            pulled: Vec::new(),
            work: Vec::new(),
            work_local: Vec::new(),
            done: 0,
            grant_out: vec![Vec::new(); p],
            rts_out: vec![Vec::new(); p],
            check: None,
            started: false,
            error: None,
            t0: None,
            polled: Backoff::default(),
            grace_until: None,
            probed: false,
            notices: FastMap::default(),
            lost: None,
        }
    }

    /// Turns a finished, successful op into a new one like [`Op::new`] does, reusing its
    /// allocations (step tables, maps, per-peer queues): a repeated small collective allocates
    /// nothing. `scratch` replaces the old (already returned) scratch list.
    pub fn reuse(
        &mut self,
        key: OpKey,
        spec: OpSpec,
        members: &Arc<[u32]>,
        send: Bound,
        recv: Bound,
        scratch: Vec<Bound>,
    ) {
        let n = spec.plan.sched.len();
        let p = members.len();
        self.key = key;
        self.coll = spec.coll;
        self.alg = spec.alg;
        self.sig = spec.sig;
        self.rank = spec.plan.sched.rank;
        self.elem = spec.dtype.size();
        self.dtype = spec.dtype;
        self.rop = spec.rop;
        self.deps_left.clone_from(&spec.plan.deps);
        self.plan = spec.plan;
        self.send = send;
        self.recv = recv;
        self.scratch = scratch;
        if !Arc::ptr_eq(&self.members, members) {
            self.members = members.clone();
        }
        self.st.clear();
        self.st.resize(n, St::Blocked);
        self.pending.clear();
        self.pending.resize(n, 0);
        self.grants.clear();
        self.eager_in.clear();
        self.rts_in.clear();
        self.fused_slot.clear();
        self.staged.clear();
        self.shareable.clear();
        self.pulls.clear();
        self.pulled.clear();
        self.work.clear();
        self.work_local.clear();
        self.done = 0;
        self.grant_out.iter_mut().for_each(Vec::clear);
        self.grant_out.resize_with(p, Vec::new);
        self.rts_out.iter_mut().for_each(Vec::clear);
        self.rts_out.resize_with(p, Vec::new);
        self.check = None;
        self.started = false;
        self.error = None;
        self.t0 = None;
        self.polled = Backoff::default();
        self.grace_until = None;
        self.probed = false;
        self.notices.clear();
        self.lost = None;
    }

    /// Lets go of the call's buffers (a recycled op must not keep user registrations alive) and
    /// hands back the scratch list's allocation.
    pub fn release_buffers(&mut self) -> Vec<Bound> {
        self.send = Bound::empty();
        self.recv = Bound::empty();
        std::mem::take(&mut self.scratch)
    }

    /// Time since the first wait began (zero before).
    pub fn waited(&self) -> std::time::Duration {
        self.t0.map_or(std::time::Duration::ZERO, |t| t.elapsed())
    }

    /// When the first wait (or `test`) for this op began, starting the clock now if none did.
    pub fn wait_began(&mut self) -> Instant {
        *self.t0.get_or_insert_with(Instant::now)
    }

    pub fn finished(&self) -> bool {
        self.error.is_some() || (self.started && self.done == self.st.len())
    }

    /// The element type of the call.
    pub fn dtype(&self) -> Datatype {
        self.dtype
    }

    /// The call's reduction operation, if it has one.
    pub fn rop(&self) -> Option<&ReduceOp> {
        self.rop.as_ref()
    }

    pub fn ep(&self, peer: u32) -> usize {
        self.members[peer as usize] as usize
    }

    /// Takes over a straight call (`super::ring`) up to here: the steps of `ran` (a prefix of a
    /// topological order) were issued, and are done but for `sending`, Sends whose write has not
    /// completed yet (one write each, tracked in `Core::writes`); `fused` are fused Recvs among
    /// them whose message still waits in its slot for the Reduce. Every step not issued whose
    /// deps are done is ready.
    pub fn adopt_done(&mut self, ran: &[StepId], sending: &[StepId], fused: &[Fused]) {
        self.started = true;
        self.work.clone_from(&self.plan.roots);
        self.work_local.clone_from(&self.plan.local_roots);
        for &s in ran {
            if sending.contains(&s) {
                self.st[s as usize] = St::Waiting;
                self.pending[s as usize] = 1;
            } else {
                self.complete(s);
            }
        }
        let st = &self.st;
        self.work.retain(|&s| st[s as usize] == St::Blocked);
        self.work_local.retain(|&s| st[s as usize] == St::Blocked);
        self.fused_slot.extend_from_slice(fused);
    }

    /// Issues every step without deps.
    pub fn start(&mut self, core: &mut Core) -> Result<()> {
        self.started = true;
        self.work.clone_from(&self.plan.roots);
        self.work_local.clone_from(&self.plan.local_roots);
        self.run(core)
    }

    /// Runs the work list until nothing more can be issued.
    pub fn run(&mut self, core: &mut Core) -> Result<()> {
        // Every ready Send and Recv goes out before ready local copies and reductions (any order
        // of ready steps is valid): the peer's side starts while we copy, e.g. a Send of the input
        // is not held up behind the input's copy into the result.
        while let Some(s) = self.work.pop().or_else(|| self.work_local.pop()) {
            self.exec(core, s)?;
        }
        Ok(())
    }

    fn complete(&mut self, s: StepId) {
        debug_assert_ne!(self.st[s as usize], St::Done);
        self.st[s as usize] = St::Done;
        self.done += 1;
        for &d in &self.plan.dependents[s as usize] {
            let left = &mut self.deps_left[d as usize];
            *left -= 1;
            if *left == 0 {
                if self.plan.local[d as usize] {
                    self.work_local.push(d);
                } else {
                    self.work.push(d);
                }
            }
        }
    }

    fn bufs(&self) -> Bufs<'_> {
        Bufs { send: &self.send, recv: &self.recv, scratch: &self.scratch, elem: self.elem }
    }

    /// Start pointer and byte length of a region (see [`Bufs::raw`]).
    fn raw(&self, r: Region) -> (*mut u8, usize) {
        self.bufs().raw(r)
    }

    fn exec(&mut self, core: &mut Core, s: StepId) -> Result<()> {
        self.st[s as usize] = St::Waiting;
        let kind = *self.plan.sched.step(s);
        let bytes = kind.len() as usize * self.elem;
        match kind {
            StepKind::Send { peer, src } => {
                if bytes == 0 {
                    self.complete(s);
                } else if let Some(e) =
                    (!self.grants.is_empty()).then(|| self.grants.remove(&(peer, self.plan.idx[s as usize]))).flatten()
                {
                    self.zcopy(core, s, peer, src, e)?;
                } else if bytes <= core.cfg.eager_threshold {
                    self.eager_send(core, s, peer, src, bytes)?;
                } else if self.key.is_p2p() && core.announce_to.contains(&(self.key.ctx, self.ep(peer))) {
                    // Wait for the receiver's grant, announced to a receiver that receives from
                    // any source (`exec::p2p`).
                    self.announce(core);
                }
                // else: wait for the receiver's grant.
            }
            StepKind::Recv { peer, dst } => {
                let key = (peer, self.plan.idx[s as usize]);
                if bytes == 0 {
                    self.complete(s);
                } else if let Some(slot) = (!self.eager_in.is_empty()).then(|| self.eager_in.remove(&key)).flatten() {
                    self.eager_copy(core, s, peer, slot, dst)?;
                } else if bytes > core.cfg.eager_threshold || (!self.rts_in.is_empty() && self.rts_in.remove(&key)) {
                    self.grant(core, s, peer, dst);
                }
                // else: wait for the eager message or an RTS.
            }
            StepKind::Reduce { dst, order, .. } => {
                let from = self.plan.fused_from[s as usize];
                if let Some(i) = self.pulled.iter().position(|x| from != NOT_FUSED && x.0 == from) {
                    let (_, peer, o) = self.pulled.swap_remove(i);
                    self.reduce_pulled(core, peer, o, dst, order)?;
                    self.complete(s);
                    return Ok(());
                }
                self.local(core, s, kind)?;
            }
            StepKind::Copy { .. } => self.local(core, s, kind)?,
        }
        Ok(())
    }

    /// Runs local step `s` (a Copy, or a Reduce whose source is in this rank's memory or in the
    /// eager slot its fused Recv left the message in).
    fn local(&mut self, core: &mut Core, s: StepId, kind: StepKind) -> Result<()> {
        let from = self.plan.fused_from[s as usize];
        let fused = if from == NOT_FUSED {
            None
        } else {
            self.fused_slot.iter().position(|f| f.step == from).map(|i| self.fused_slot.swap_remove(i))
        };
        local_step(kind, &self.bufs(), fused.map(|f| f.ptr), self.dtype, self.rop.as_ref(), &mut core.stats)?;
        if let Some(f) = fused {
            core.release_slot(f.peer, f.at as u32)?;
        }
        self.complete(s);
        Ok(())
    }

    /// Reduces message `o`, offered whole by `peer`, into `dst` straight out of the sender's
    /// buffer (`Endpoint::read_with`: through a mapping, or in pieces that stay in cache), then
    /// tells the sender its source is free (`Kind::Pulled`).
    fn reduce_pulled(&mut self, core: &mut Core, peer: u32, o: Offer, dst: Region, order: Order) -> Result<()> {
        let rop = self.rop.as_ref().ok_or_else(|| Error::Protocol("reduce step without an op".into()))?;
        let (dp, n) = self.bufs().raw(dst);
        let (ep, dtype) = (self.ep(peer), self.dtype);
        let src = o.mr.slice(o.off as usize, n)?;
        let piece = (PULL_PIECE / self.elem).max(1) * self.elem;
        let mut failed = None;
        core.ep.read_with(ep, src, piece, &mut |off, bytes| {
            if failed.is_some() || off + bytes.len() > n {
                return;
            }
            // SAFETY: `dst` is this Reduce's region of `n` bytes in the call's buffers (bounds
            // checked), quiet (no peer writes a Reduce's destination) and apart from the sender's
            // buffer; `off + bytes.len() <= n` (above).
            let d = unsafe { std::slice::from_raw_parts_mut(dp.add(off), bytes.len()) };
            failed = kernels::reduce(rop, dtype, bytes, d, order).err();
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        core.stats.reduce_bytes += n as u64;
        core.stats.pulled_bytes += n as u64;
        core.ctrl(ep, proto::tag(Kind::Pulled, self.key.ctx, self.key.seq, self.sig), o.idx.to_le_bytes().to_vec());
        Ok(())
    }

    fn eager_send(&mut self, core: &mut Core, s: StepId, peer: u32, src: Region, bytes: usize) -> Result<()> {
        let ep = self.ep(peer);
        let idx = self.plan.idx[s as usize];
        let (mr, off) = self.bufs().mr(src)?;
        match core.send_eager(self.key, self.sig, s, ep, idx, mr, off, bytes, false)? {
            EagerSent::Done => self.complete(s),
            EagerSent::InFlight => self.pending[s as usize] = 1,
            EagerSent::NoSlot => {
                core.stats.rts_msgs += 1;
                self.rts_out[peer as usize].push(idx);
                core.ctrl_queued = true;
            }
        }
        Ok(())
    }

    fn zcopy(&mut self, core: &mut Core, s: StepId, peer: u32, src: Region, g: GrantEntry) -> Result<()> {
        let bytes = src.len as usize * self.elem;
        if g.len as usize != bytes {
            return Err(Error::Protocol(format!(
                "{} #{}: rank {peer} granted {} bytes for message {} but this rank sends {bytes}",
                self.coll, self.key.seq, g.len, g.idx
            )));
        }
        let ep = self.ep(peer);
        let (mr, base) = self.bufs().mr(src)?;
        let mr = mr.clone();
        let seg = usize::try_from(g.seg).unwrap_or(usize::MAX);
        if seg == 0 || seg > core.caps.max_write {
            return Err(Error::Protocol(format!(
                "{} #{}: rank {peer} granted message {} in pieces of {} bytes, outside 1..={}",
                self.coll, self.key.seq, g.idx, g.seg, core.caps.max_write
            )));
        }
        // Nothing after this Send waits for its source (or only Recvs do, and the job completes
        // with them waiting: `Plan::lends`): the receiver may read it at leisure — unless it
        // would read it with a system call (the program's own memory on shm) and the message is
        // small enough that its grant is staged scratch, which we fill with a memcpy.
        let lend = g.whole
            && self.plan.lends(s)
            && mr.access().contains(Access::REMOTE_READ)
            && !(bytes <= core.cfg.staged_receive_max && core.ep.writes_by_syscall(ep, &mr));
        if lend {
            let o = Offer { idx: g.idx, from: 0, mr: mr.remote(), off: base as u64, len: g.len };
            core.ctrl(ep, proto::tag(Kind::Offer, self.key.ctx, self.key.seq, self.sig), o.to_bytes());
            core.stats.pulled_msgs += 1;
            self.pending[s as usize] = 1;
            return Ok(());
        }
        let imm = core.layout.encode_zcopy(g.gid);
        let inline = core.caps.completes_inline(seg.min(bytes));
        // Bytes from `end` on are the receiver's to read (an offer); we write the ones before.
        let end = self.offer(core, ep, &mr, base, &g, seg);
        let mut off = 0;
        let mut n = 0;
        // The pieces stream as the whole message would (an offered tail is read at the same time).
        fabcoll_fabric::copy::as_part_of(bytes, || -> Result<()> {
            while off < end {
                let len = seg.min(end - off);
                let dst = g.mr.slice(g.off as usize + off, len)?;
                let wid = if inline { SILENT_WRITE } else { core.new_write(self.key, s) };
                core.write(ep, &mr, base + off, len, dst, Some(imm), wid, false)?;
                off += len;
                n += 1;
            }
            Ok(())
        })?;
        core.stats.zcopy_msgs += 1;
        core.stats.zcopy_bytes += end as u64;
        // An offered tail is done when the receiver says it has read it (`on_pulled`).
        let pulled = u32::from(end < bytes);
        match (inline, pulled) {
            // Every segment completed inside `write`.
            (true, 0) => self.complete(s),
            (true, _) => self.pending[s as usize] = pulled,
            (false, _) => self.pending[s as usize] = n + pulled,
        }
        Ok(())
    }

    /// Offers the receiver of message `g` (in pieces of `seg`, from `mr` at `base`) the second
    /// half of its pieces to read itself while we write the first, when the two share its copy
    /// (`Core::shares_copy`) and it is at least two pieces from a source peers may read; returns
    /// where the offered tail starts (the message's length when nothing is offered). A failure
    /// to send the offer leaves the whole message to us.
    fn offer(&self, core: &mut Core, ep: usize, mr: &Mr, base: usize, g: &GrantEntry, seg: usize) -> usize {
        let bytes = g.len as usize;
        let pieces = bytes.div_ceil(seg);
        if pieces < 2 || !core.shares_copy(ep, bytes) || !mr.access().contains(Access::REMOTE_READ) {
            return bytes;
        }
        // Not when the receiver would read with a system call what we write with a memcpy.
        if core.ep.writes_by_syscall(ep, mr) && !core.ep.writes_into_by_syscall(ep, &g.mr) {
            return bytes;
        }
        let from = pieces / 2 * seg;
        let o = Offer { idx: g.idx, from: from as u64, mr: mr.remote(), off: base as u64, len: g.len };
        let tag = proto::tag(Kind::Offer, self.key.ctx, self.key.seq, self.sig);
        // Sent at once, so that the receiver reads while we write.
        match core.ep.send_ctrl(ep, tag, &o.to_bytes()) {
            Ok(()) => from,
            Err(e) => {
                tracing::debug!(%e, "no offer sent; writing the whole message");
                bytes
            }
        }
    }

    fn grant(&mut self, core: &mut Core, s: StepId, peer: u32, dst: Region) {
        let bytes = dst.len as usize * self.elem;
        let ep = self.ep(peer);
        let Ok((dst_mr, off)) = self.bufs().mr(dst) else {
            self.error = Some(Error::Protocol(format!("{:?} buffer is not registered for writing", dst.buf)));
            return;
        };
        let (mut mr, mut off) = (dst_mr.remote(), off);
        let mut seg = core.ep.write_segment(ep).clamp(1, core.caps.max_write.max(1));
        // A message only its Reduce reads is asked for whole, for that Reduce to read it out of
        // the sender's buffer (`reduce_pulled`); granted as well, for a sender that does not
        // offer it (`zcopy`).
        let whole = self.plan.fuse[s as usize] && core.pulls_reduce(ep, bytes);
        if bytes <= core.cfg.staged_receive_max && core.ep.writes_by_syscall(ep, dst_mr) {
            match core.scratch(bytes) {
                Ok(scratch) => {
                    (mr, off) = (scratch.remote(), 0);
                    // In pieces where this rank has a CPU of its own and nothing else to copy:
                    // it copies each out while the sender writes the next.
                    if !core.patience.oversubscribed && !self.sending() {
                        seg = seg.min(STAGED_PIECE);
                    }
                    self.staged.push(Staged { step: s, dst, scratch, seg, copied: 0 });
                }
                Err(e) => tracing::debug!(%e, "no scratch for a staged receive; granting the destination"),
            }
        }
        let shares = !whole && core.shares_copy(ep, bytes);
        // Two pieces invite the sender to leave us the second (an offer) while it writes the
        // first, unless this rank sends in the call too (the offer would only add a round trip) or
        // the message is staged (the sender writes the scratch through a mapping, faster than
        // this rank reads the sender's memory with a system call).
        let staged = self.staged.last().is_some_and(|x| x.step == s);
        if shares && !staged && !self.sending() {
            seg = seg.min(bytes.div_ceil(2).next_multiple_of(4096));
        }
        let segs = bytes.div_ceil(seg) as u32;
        let gid = core.new_grant(ep, self.key, s, segs);
        if shares {
            self.shareable.push((s, seg, gid));
        }
        if whole {
            self.pulls.push((s, gid));
        }
        self.pending[s as usize] = segs;
        core.stats.grants += 1;
        core.ctrl_queued = true;
        self.grant_out[peer as usize].push(GrantEntry {
            idx: self.plan.idx[s as usize],
            gid,
            mr,
            off: off as u64,
            len: bytes as u64,
            seg: seg as u64,
            whole,
        });
    }

    /// Whether this rank sends in this call: its core has copies of its own to make. Read off the
    /// schedule, not off which Sends happen to be under way when a receive is granted (that
    /// depends on how early the peers' grants came, so a ring's receives were shared in some runs
    /// and not in others).
    fn sending(&self) -> bool {
        (0..self.st.len() as StepId).any(|s| matches!(self.plan.sched.step(s), StepKind::Send { .. }))
    }

    fn eager_copy(&mut self, core: &mut Core, s: StepId, peer: u32, slot: u32, dst: Region) -> Result<()> {
        let ep = self.ep(peer);
        let (dp, n) = self.raw(dst);
        let fuse = self.plan.fuse[s as usize];
        let ptr = core.receive_eager(ep, slot, dp, n, fuse)?;
        if fuse {
            self.fused_slot.push(Fused { step: s, ptr, peer: ep, at: u64::from(slot) });
        }
        self.complete(s);
        Ok(())
    }

    // ---- events -------------------------------------------------------------------------------

    /// One of our writes for step `s` finished locally.
    pub fn on_write_done(&mut self, core: &mut Core, s: StepId) -> Result<()> {
        self.segment_done(core, s, false)
    }

    /// One zero-copy segment for Recv step `s` arrived.
    pub fn on_arrived(&mut self, core: &mut Core, s: StepId) -> Result<()> {
        self.segment_done(core, s, true)
    }

    /// A segment of step `s` is done: `written` (a peer's write arrived) or otherwise (our write
    /// finished, or we read an offered piece).
    fn segment_done(&mut self, core: &mut Core, s: StepId, written: bool) -> Result<()> {
        let p = &mut self.pending[s as usize];
        if *p == 0 || self.st[s as usize] != St::Waiting {
            return Err(Error::Protocol(format!(
                "{} #{}: unexpected completion for step {s}",
                self.coll, self.key.seq
            )));
        }
        *p -= 1;
        let last = *p == 0;
        if let Some(i) = self.staged.iter().position(|x| x.step == s) {
            if written {
                self.copy_out_piece(core, i);
            }
            if last {
                core.give_back(self.staged.swap_remove(i).scratch);
            }
        }
        if last {
            self.complete(s);
            self.run(core)?;
        }
        Ok(())
    }

    /// Copies the next written piece of staged receive `i` out of its scratch while the sender
    /// writes the following ones. A peer's writes into one grant arrive in the order it makes
    /// them, which is the order of their offsets (`zcopy`): the only fabric that stages, shm,
    /// has one FIFO queue per pair, and its data is visible before its notice. Offered pieces
    /// are read into the destination itself (`on_offer`) and never copied out.
    fn copy_out_piece(&mut self, core: &mut Core, i: usize) {
        let x = &self.staged[i];
        let (dp, n) = self.raw(x.dst);
        let (from, len) = (x.copied, x.seg.min(n.saturating_sub(x.copied)));
        // SAFETY: the piece at `from` arrived (writes arrive in order, see above), so its `len`
        // bytes in the scratch are the message's and no peer writes them any more; the
        // destination is this Recv's bound, quiet region of `n` bytes, in another allocation.
        unsafe { fabcoll_fabric::copy::copy_bulk(dp.add(from), x.scratch.as_ptr().add(from), len) };
        self.staged[i].copied += len;
        core.stats.zcopy_copy_bytes += len as u64;
    }

    /// An eager message from `peer` (communicator rank) sits in `slot`.
    pub fn on_eager(&mut self, core: &mut Core, peer: u32, idx: u32, slot: u32) -> Result<()> {
        let Some(&s) = self.plan.recv_of.get(&(peer, idx)) else {
            return Err(Error::Protocol(format!(
                "{} #{}: eager message {idx} from rank {peer} matches no receive",
                self.coll, self.key.seq
            )));
        };
        if self.st[s as usize] == St::Waiting && self.pending[s as usize] == 0 {
            let StepKind::Recv { dst, .. } = *self.plan.sched.step(s) else { unreachable!("recv_of holds Recv steps") };
            self.eager_copy(core, s, peer, slot, dst)?;
            self.run(core)
        } else {
            self.eager_in.insert((peer, idx), slot);
            Ok(())
        }
    }

    /// A point-to-point send waiting for its receiver's grant tells the receiver it is there (an
    /// RTS): the receiver receives from any source (`exec::p2p`).
    pub fn announce(&mut self, core: &mut Core) {
        if self.st.len() != 1 {
            return;
        }
        let StepKind::Send { peer, src } = *self.plan.sched.step(0) else { return };
        let waits_for_grant = src.len as usize * self.elem > core.cfg.eager_threshold;
        if waits_for_grant && self.st[0] == St::Waiting && self.pending[0] == 0 {
            self.rts_out[peer as usize].push(self.plan.idx[0]);
            core.ctrl_queued = true;
        }
    }

    /// `peer` has messages `idxs` for us but no eager slot.
    pub fn on_rts(&mut self, core: &mut Core, peer: u32, idxs: &[u32]) -> Result<()> {
        for &idx in idxs {
            let Some(&s) = self.plan.recv_of.get(&(peer, idx)) else {
                return Err(Error::Protocol(format!(
                    "{} #{}: RTS {idx} from rank {peer} matches no receive",
                    self.coll, self.key.seq
                )));
            };
            if self.st[s as usize] == St::Waiting && self.pending[s as usize] == 0 {
                let StepKind::Recv { dst, .. } = *self.plan.sched.step(s) else {
                    unreachable!("recv_of holds Recv steps")
                };
                self.grant(core, s, peer, dst);
            } else {
                self.rts_in.insert((peer, idx));
            }
        }
        Ok(())
    }

    /// `peer` granted destinations for our messages.
    pub fn on_grant(&mut self, core: &mut Core, peer: u32, entries: Vec<GrantEntry>) -> Result<()> {
        for g in entries {
            let Some(&s) = self.plan.send_of.get(&(peer, g.idx)) else {
                return Err(Error::Protocol(format!(
                    "{} #{}: grant {} from rank {peer} matches no send",
                    self.coll, self.key.seq, g.idx
                )));
            };
            if self.st[s as usize] == St::Waiting && self.pending[s as usize] == 0 {
                let StepKind::Send { src, .. } = *self.plan.sched.step(s) else {
                    unreachable!("send_of holds Send steps")
                };
                self.zcopy(core, s, peer, src, g)?;
            } else {
                self.grants.insert((peer, g.idx), g);
            }
        }
        self.run(core)
    }

    /// `peer` offers the tail of message `o.idx` for us to read (see `offer`): we read it into
    /// the destination we granted, count its pieces as arrived and tell `peer` its source is free.
    pub fn on_offer(&mut self, core: &mut Core, peer: u32, o: Offer) -> Result<()> {
        let bad = |why: String| {
            Error::Protocol(format!("{} #{}: offer {} from rank {peer}: {why}", self.coll, self.key.seq, o.idx))
        };
        let Some(&s) = self.plan.recv_of.get(&(peer, o.idx)) else { return Err(bad("matches no receive".into())) };
        let StepKind::Recv { dst, .. } = *self.plan.sched.step(s) else { unreachable!("recv_of holds Recv steps") };
        let (ep, bytes) = (self.ep(peer), dst.len as usize * self.elem);
        if let Some(i) = self.pulls.iter().position(|&(t, _)| t == s) {
            // Offered whole: the Recv is done, and its Reduce reads the message where it is.
            let (_, gid) = self.pulls.swap_remove(i);
            if o.from != 0 || o.len as usize != bytes || self.st[s as usize] != St::Waiting {
                return Err(bad(format!("bytes {}..{} offered whole for a receive of {bytes}", o.from, o.len)));
            }
            core.forget_grant(ep, gid);
            if let Some(i) = self.staged.iter().position(|x| x.step == s) {
                // Nobody writes the scratch the receive was staged in.
                core.give_back(self.staged.swap_remove(i).scratch);
            }
            self.pulled.push((s, peer, o));
            self.pending[s as usize] = 0;
            self.complete(s);
            return self.run(core);
        }
        let Some(i) = self.shareable.iter().position(|&(t, ..)| t == s) else {
            return Err(bad("the receive was not granted to share its copy".into()));
        };
        let (_, seg, gid) = self.shareable.swap_remove(i);
        let (from, len) = (o.from as usize, bytes.saturating_sub(o.from as usize));
        let pieces = len.div_ceil(seg) as u32;
        if o.len as usize != bytes || !from.is_multiple_of(seg) || len == 0 || from == 0 {
            return Err(bad(format!("bytes {from}..{} of a message of {bytes} in pieces of {seg}", o.len)));
        }
        if self.st[s as usize] != St::Waiting || self.pending[s as usize] < pieces {
            return Err(bad(format!("{pieces} pieces offered, {} awaited", self.pending[s as usize])));
        }
        // Into the destination itself, also when it was staged: only written pieces are copied out.
        let (mr, off) = self.bufs().mr(dst).map(|(m, off)| (m.clone(), off))?;
        let src = o.mr.slice(o.off as usize + from, len)?;
        let dst_range = mr.slice(off + from, len)?;
        fabcoll_fabric::copy::as_part_of(bytes, || core.ep.read(ep, src, dst_range))?;
        core.stats.zcopy_read_bytes += len as u64;
        core.ctrl(ep, proto::tag(Kind::Pulled, self.key.ctx, self.key.seq, self.sig), o.idx.to_le_bytes().to_vec());
        for _ in 0..pieces {
            // Read here rather than written: the grant is forgotten with its last piece all the same.
            core.grant_arrived(ep, gid);
            self.segment_done(core, s, false)?;
        }
        Ok(())
    }

    /// `peer` has read the tails we offered of messages `idxs`: those Sends' sources are free.
    pub fn on_pulled(&mut self, core: &mut Core, peer: u32, idxs: &[u32]) -> Result<()> {
        for &idx in idxs {
            let Some(&s) = self.plan.send_of.get(&(peer, idx)) else {
                return Err(Error::Protocol(format!(
                    "{} #{}: rank {peer} read message {idx}, which matches no send",
                    self.coll, self.key.seq
                )));
            };
            self.segment_done(core, s, false)?;
        }
        Ok(())
    }

    /// Communicator ranks this op is waiting for (for timeout errors).
    /// The peers a Send of this op still waits for (for a grant or a slot): a peer that makes
    /// the same call cannot have finished it.
    pub fn send_waits(&self) -> Vec<u32> {
        let mut v: Vec<u32> = (0..self.st.len())
            .filter(|&i| self.st[i] == St::Waiting)
            .filter_map(|i| match *self.plan.sched.step(i as StepId) {
                StepKind::Send { peer, .. } => Some(peer),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn waiting_for(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.lost.iter().map(|l| l.0).collect();
        if let Some(c) = &self.check {
            v.extend((0..c.got.len() as u32).filter(|&r| r != self.rank && c.got[r as usize].is_none()));
        }
        for (i, st) in self.st.iter().enumerate() {
            if *st == St::Waiting {
                match *self.plan.sched.step(i as StepId) {
                    StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => v.push(peer),
                    _ => {}
                }
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The ranks to blame on timeout: those someone waited for (this rank directly, or a peer's
    /// abort notice) that did not report a timeout themselves — the silent ones. Falls back to
    /// this rank's direct waits.
    pub fn suspects(&self) -> Vec<u32> {
        suspects(self.rank, self.waiting_for(), &self.notices)
    }

    /// The ranks to blame after a write to `lost` failed. A failed write is positive evidence,
    /// so `lost` alone is named, unless `lost` sent an abort notice itself: then it is alive
    /// (it only gave up and dropped its memory) and the silent ranks are named as on timeout.
    /// Ranks that are merely slow to send their notice are never blamed beside a dead one.
    pub fn lost_peers(&self, lost: u32) -> Vec<u32> {
        if self.notices.contains_key(&lost) {
            self.suspects()
        } else {
            vec![lost]
        }
    }

    /// The communicator rank of endpoint rank `ep`.
    pub fn comm_rank(&self, ep: usize) -> Option<u32> {
        self.members.iter().position(|&m| m as usize == ep).map(|r| r as u32)
    }

    /// The peer (communicator rank) of a Send/Recv step.
    pub fn step_peer(&self, s: StepId) -> Option<u32> {
        match *self.plan.sched.step(s) {
            StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => Some(peer),
            _ => None,
        }
    }

    /// Eager slots held for receives that never ran (returned on abort).
    pub fn held_slots(&self) -> Vec<(usize, u32)> {
        let waiting = self.eager_in.iter().map(|(&(peer, _), &slot)| (self.ep(peer), slot));
        waiting.chain(self.fused_slot.iter().map(|f| (f.peer, f.at as u32))).collect()
    }
}

/// The ranks to blame on timeout (see [`Op::suspects`]): of the ranks `rank` waits for
/// (`direct`) and those its peers' abort notices name, the ones that sent no notice themselves;
/// `direct` if that leaves none.
pub(crate) fn suspects(rank: u32, direct: Vec<u32>, notices: &FastMap<u32, Vec<u32>>) -> Vec<u32> {
    let mut all: Vec<u32> = direct.iter().chain(notices.values().flatten()).copied().collect();
    all.sort_unstable();
    all.dedup();
    all.retain(|r| *r != rank && !notices.contains_key(r));
    if all.is_empty() {
        direct
    } else {
        all
    }
}
