//! The straight-line runner: runs a plan's steps in its straight-line order (`Plan::order`),
//! waiting on each Send and Recv in turn, with no dependency tracking per call. How a message
//! moves is the [`Lane`]'s business: one implementation per way (`super::ring`: the engine's
//! eager slots with credits; `super::mailboxes`: node-local mailbox records).
//!
//! When a lane cannot complete a step without the engine (a message too large for it, a
//! rendezvous, a control message for the call, a wait longer than a spin), it says
//! [`Stop::HandOver`] and the runner returns where it stopped: the engine's op takes the call over
//! from there (`Engine::hand_over`). That is the one hand-over rule. A lane that can always
//! finish (mailboxes: their plans are checked free of deadlock across ranks) never hands over.
//!
//! Zero-copy messages (grants, then one-sided writes) move only in the op: a receiver grants a
//! destination when its Recv is ready, and a sender waits for that grant, so in a fixed order two
//! ranks that each send first would each wait for the other's grant. The op posts every ready
//! Recv's grant as soon as it is ready, whatever the order, which is the dependency tracking this
//! runner leaves out; for such messages its cost is small beside the transfer.

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::schedule::{Region, StepId, StepKind};

use super::bufs::{local_step, Bufs};
use super::plan::{Plan, NOT_FUSED};
use super::Stats;
use crate::error::Error;

/// Why a straight-line call stopped before its end.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The engine takes the call over at the step it stopped at.
    HandOver,
    /// The call failed.
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Failed(e)
    }
}

impl From<fabcoll_fabric::Error> for Stop {
    fn from(e: fabcoll_fabric::Error) -> Stop {
        Stop::Failed(e.into())
    }
}

/// A received message left where it arrived for the Reduce that reads it (a fused Recv): its
/// bytes, and where it is, for the lane to free it after the Reduce.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Fused {
    pub step: StepId,
    pub ptr: *const u8,
    pub peer: usize,
    pub at: u64,
}

/// One way messages move for a straight-line call. Peers are communicator ranks; `idx` is the
/// message's index (the k-th Send to a peer matches the peer's k-th Recv from us).
pub(crate) trait Lane {
    /// Sends Send step `s`'s region `src`; `Ok(false)`: not now (the runner waits and retries).
    fn send(&mut self, bufs: &Bufs<'_>, s: StepId, peer: u32, idx: u32, src: Region) -> Result<bool, Stop>;

    /// Receives Recv step `s`'s message into `dst` if it has arrived, or, when `fuse`, leaves it
    /// where it is for the Reduce that reads it (see [`Lane::take_fused`]); `Ok(false)`: not yet.
    fn recv(&mut self, bufs: &Bufs<'_>, s: StepId, peer: u32, idx: u32, dst: Region, fuse: bool) -> Result<bool, Stop>;

    /// A try brought nothing: poll, pause, or stop waiting. `peer`: the rank waited for.
    fn idle(&mut self, peer: u32) -> Result<(), Stop>;

    /// The message fused Recv step `from` left for its Reduce.
    fn take_fused(&mut self, from: StepId) -> Option<Fused>;

    /// Frees a fused message once its Reduce has read it.
    fn release(&mut self, f: Fused) -> Result<(), Stop>;

    /// Step `s` is next: a lane whose Sends complete later waits here for those `s` depends on
    /// (it may overwrite their data).
    fn before(&mut self, _plan: &Plan, _s: StepId) -> Result<(), Stop> {
        Ok(())
    }

    /// Every step ran: wait until the call's Sends have completed (its buffers are the caller's
    /// again when it returns).
    fn settle(&mut self) -> Result<(), Stop> {
        Ok(())
    }

    /// Where local steps count their bytes.
    fn stats(&mut self) -> &mut Stats;
}

/// One call's plan, buffers and types.
pub(crate) struct Call<'a> {
    pub plan: &'a Plan,
    pub bufs: Bufs<'a>,
    pub dtype: Datatype,
    pub rop: Option<&'a ReduceOp>,
}

/// Runs `c`'s steps from the `*ran`-th of its order on, over `lane`. On `Err`, `*ran` steps ran
/// (the ones before it in the order; Sends among them may still be in flight in the lane).
pub(crate) fn run<L: Lane>(lane: &mut L, c: &Call<'_>, ran: &mut usize) -> Result<(), Stop> {
    let plan = c.plan;
    while let Some(&s) = plan.order.get(*ran) {
        lane.before(plan, s)?;
        let kind = *plan.sched.step(s);
        match kind {
            StepKind::Send { peer, src } => {
                while !lane.send(&c.bufs, s, peer, plan.idx[s as usize], src)? {
                    lane.idle(peer)?;
                }
            }
            StepKind::Recv { peer, dst } => {
                let fuse = plan.fuse[s as usize];
                while !lane.recv(&c.bufs, s, peer, plan.idx[s as usize], dst, fuse)? {
                    lane.idle(peer)?;
                }
            }
            StepKind::Reduce { .. } | StepKind::Copy { .. } => {
                let from = plan.fused_from[s as usize];
                let fused = if from == NOT_FUSED { None } else { lane.take_fused(from) };
                local_step(kind, &c.bufs, fused.map(|f| f.ptr), c.dtype, c.rop, lane.stats())?;
                if let Some(f) = fused {
                    lane.release(f)?;
                }
            }
        }
        *ran += 1;
    }
    lane.settle()
}
