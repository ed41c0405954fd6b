//! The runner's lane over node-local mailboxes: a small blocking collective on a load/store
//! fabric (shm, local) moves its messages as records stored straight into its peers'
//! per-communicator inboxes (`fabcoll_fabric::shm::mailbox`), outside the engine: no op, no slot credits, no
//! notification queue, no completion. Open MPI's vader BTL ("fast boxes") and MPICH's ch4 shm
//! take the same shortcut for small messages.
//!
//! The k-th Send to a peer matches the peer's k-th Recv from us: the record's tag carries k and
//! the call's sequence number among the communicator's mailbox calls. A plan takes this lane only
//! when every rank's steps can run in their straight-line order without deadlock and no rank
//! sends more than half an inbox to one peer ([`fits`]): then the lane never hands over.
//!
//! Cost per call: a record store into the peer's inbox per message, polls of our own inboxes,
//! the local steps.

use std::time::{Duration, Instant};

use fabcoll_collectives::registry;
use fabcoll_collectives::schedule::{Region, StepId, StepKind};
use fabcoll_collectives::{CollArgs, Collective};

use super::bufs::{Bound, Bufs};
use super::fasthash::FastMap;
use super::mismatch::HINT;
use super::proto::CallSig;
use super::runner::{self, Fused, Lane, Stop};
use super::wait::{Backoff, Patience, Pause};
use super::Stats;
use crate::error::{Error, Result};
use fabcoll_collectives::straight;
use fabcoll_fabric::shm::mailbox::{self, record_len, Mailbox, MAX_MESSAGE, RING};

/// Fruitless polls between two looks at the rest of the world (`check` of [`run`]).
pub(crate) const CHECK_EVERY: u32 = 64;

/// A waiting call that has spun its budget naps this long at each look ([`CHECK_EVERY`]).
const NAP: Duration = Duration::from_micros(50);

/// Whether the plan of `alg` for `args` (the arguments it runs with) may run on the mailboxes:
/// every message fits a record ([`MAX_MESSAGE`]: a step may send several blocks of scratch at
/// once, more than the user's buffer holds), no rank's schedule sends more than half an inbox to
/// one peer (then no sender waits for inbox space while its receiver waits for it; the other half
/// holds what earlier calls left), and every rank's steps can run in their straight-line order
/// without deadlock (`fabcoll_collectives::straight`).
/// Schedules are a function of the arguments, so every rank decides alike.
pub(crate) fn fits(args: &CollArgs, alg: &str) -> bool {
    let Ok(a) = registry::find(args.coll, alg) else { return false };
    let mut scheds = Vec::with_capacity(args.size as usize);
    for r in 0..args.size {
        let Ok(s) = a.schedule(&CollArgs { rank: r, ..args.clone() }) else { return false };
        let mut to = vec![0usize; args.size as usize];
        for (_, k, _) in s.iter() {
            if let StepKind::Send { peer, src } = *k {
                let bytes = src.len as usize * args.elem_size as usize;
                if bytes > MAX_MESSAGE {
                    return false;
                }
                if bytes > 0 {
                    to[peer as usize] += record_len(bytes);
                }
            }
        }
        if to.iter().any(|&b| b > RING / 2) {
            return false;
        }
        scheds.push(s);
    }
    let orders: Vec<Vec<StepId>> = scheds.iter().map(straight::order).collect();
    straight::deadlock_free(&scheds, &orders)
}

/// A mailbox call: the communicator's mailboxes, the call's number among its mailbox calls, how
/// it waits, and the fused records waiting for their Reduce.
struct MailboxLane<'a> {
    mb: &'a mut Mailbox,
    seq: u64,
    /// The call's signature, stored with every record (`proto::CallSig`), and what the call is
    /// (for a mismatch's message).
    sig: CallSig,
    what: (Collective, &'static str),
    stats: &'a mut Stats,
    fused: &'a mut Vec<Fused>,
    patience: Patience,
    w: Backoff,
    /// Asked every [`CHECK_EVERY`] fruitless polls with the rank waited for and when the wait
    /// began: progresses the engine's other collectives; an `Err` (deadline, dead peer) ends the
    /// call with it.
    check: &'a mut dyn FnMut(u32, Instant) -> Result<()>,
}

/// Runs `c` (collective and algorithm `what`, signature `sig`) on the mailboxes as the
/// communicator's mailbox call number `seq`; its counters go to `stats`. On `Err`, records of this
/// call may still arrive: the communicator must not run mailbox calls again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    c: &runner::Call<'_>,
    what: (Collective, &'static str),
    sig: CallSig,
    mb: &mut Mailbox,
    seq: u64,
    fused: &mut Vec<Fused>,
    patience: Patience,
    stats: &mut Stats,
    check: &mut dyn FnMut(u32, Instant) -> Result<()>,
) -> Result<()> {
    fused.clear();
    let mut lane = MailboxLane { mb, seq, sig, what, stats, fused, patience, w: Backoff::default(), check };
    match runner::run(&mut lane, c, &mut 0) {
        Ok(()) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
        Err(Stop::HandOver) => Err(Error::Protocol("a mailbox call cannot be handed over".into())),
    }
}

impl Lane for MailboxLane<'_> {
    fn send(&mut self, bufs: &Bufs<'_>, _s: StepId, peer: u32, idx: u32, src: Region) -> Result<bool, Stop> {
        let (sp, n) = bufs.raw(src);
        if n == 0 {
            return Ok(true);
        }
        if n > MAX_MESSAGE {
            return Err(Error::Protocol(format!("mailbox message of {n} bytes exceeds {}", MAX_MESSAGE)).into());
        }
        // SAFETY: `sp` is a region of this call's buffers, `n` bytes, at most MAX_MESSAGE.
        let tag = mailbox::with_sig(mailbox::tag(self.seq, idx), self.sig.0);
        let sent = unsafe { self.mb.send(peer as usize, tag, sp, n)? };
        if sent {
            self.stats.mailbox_msgs += 1;
            self.stats.mailbox_bytes += n as u64;
            self.w.news();
        }
        Ok(sent)
    }

    fn recv(&mut self, bufs: &Bufs<'_>, s: StepId, peer: u32, idx: u32, dst: Region, fuse: bool) -> Result<bool, Stop> {
        let (dp, n) = bufs.raw(dst);
        if n == 0 {
            return Ok(true);
        }
        let Some(f) = self.mb.find(peer as usize, mailbox::tag(self.seq, idx))? else { return Ok(false) };
        if f.sig != self.sig.0 {
            return Err(self.mismatch(peer, format!("a record of another call (signature {:#04x})", f.sig)).into());
        }
        if !f.first {
            self.orphans(peer)?;
        }
        if f.len != n {
            return Err(Error::Protocol(format!(
                "rank {peer} sent a {}-byte message for a {n}-byte receive (message {idx} of mailbox call {})",
                f.len, self.seq
            ))
            .into());
        }
        self.w.news();
        if fuse {
            self.fused.push(Fused { step: s, ptr: f.payload, peer: peer as usize, at: f.pos });
            self.stats.mailbox_fused_bytes += n as u64;
        } else {
            // SAFETY: a published record of `n` bytes (nobody writes it until we consume it) and
            // a region of this call's buffers; different memory.
            unsafe { fabcoll_fabric::copy::copy_bulk(dp, f.payload, n) };
            self.stats.mailbox_copy_bytes += n as u64;
            self.mb.consume(peer as usize, f.pos);
        }
        Ok(true)
    }

    fn idle(&mut self, peer: u32) -> Result<(), Stop> {
        let pause = self.w.fruitless(&self.patience, || false);
        if self.w.idle.is_multiple_of(CHECK_EVERY) {
            (self.check)(peer, self.w.since.unwrap_or_else(Instant::now))?;
            self.mismatch_notices()?;
            self.orphans(peer)?;
        }
        match pause {
            Pause::Poll => std::hint::spin_loop(),
            // The spin spent, a nap at each look at the world, and between them yields where
            // ranks share cores (a yield lets a rank that shares our core run, and comes back as
            // soon as it waits in turn), else polls.
            Pause::Stop if self.w.idle.is_multiple_of(CHECK_EVERY) => std::thread::sleep(NAP),
            Pause::Stop if !self.patience.oversubscribed => std::hint::spin_loop(),
            Pause::Yield | Pause::Stop => std::thread::yield_now(),
        }
        Ok(())
    }

    fn take_fused(&mut self, from: StepId) -> Option<Fused> {
        let i = self.fused.iter().position(|f| f.step == from)?;
        Some(self.fused.swap_remove(i))
    }

    fn release(&mut self, f: Fused) -> Result<(), Stop> {
        self.mb.consume(f.peer, f.at);
        Ok(())
    }

    fn stats(&mut self) -> &mut Stats {
        self.stats
    }
}

/// Message index of abort notices (no schedule has that many messages to one peer).
const NOTICE: u32 = 0x7f_ffff;
/// Message index of mismatch notices: a peer found a record of another call than its own.
const MISMATCH: u32 = NOTICE - 1;

impl MailboxLane<'_> {
    /// Rank `peer` sent `what` (a record of another call): tells every peer (so that each
    /// reports the mismatch rather than a timeout) and returns the error.
    fn mismatch(&mut self, peer: u32, what: String) -> Error {
        let (coll, alg) = self.what;
        let msg = format!(
            "mailbox call #{}: rank {peer} made a different call than rank {}'s {coll} ({alg}, signature {:#04x}): it \
             sent {what}; {HINT}",
            self.seq,
            self.mb.rank(),
            self.sig.0
        );
        let text = &msg.as_bytes()[..msg.len().min(MAX_MESSAGE)];
        let tag = mailbox::tag(self.seq, MISMATCH);
        let me = self.mb.rank();
        for q in (0..self.mb.size()).filter(|&q| q != me) {
            // SAFETY: `text` is readable for its length, at most MAX_MESSAGE bytes. A full inbox
            // drops the notice: that peer reports a timeout instead.
            let _ = unsafe { self.mb.send(q, tag, text.as_ptr(), text.len()) };
        }
        Error::Mismatch(msg)
    }

    /// A record of an earlier call that this rank finished without it, left by `peer`: the peer
    /// made another call then.
    fn orphans(&mut self, peer: u32) -> Result<()> {
        let Some(t) = self.mb.oldest(peer as usize) else { return Ok(()) };
        let (seq, k) = Mailbox::parts(t);
        let behind = (self.seq as u32).wrapping_sub(seq as u32);
        if k == NOTICE || k == MISMATCH || behind == 0 || behind > u32::MAX / 2 {
            return Ok(());
        }
        Err(self.mismatch(peer, format!("a message for mailbox call #{seq}, which this rank finished without it")))
    }

    /// A peer's mismatch notice for this call or the one before (which this rank may have
    /// finished before the peer found it), as this rank's error.
    fn mismatch_notices(&mut self) -> Result<()> {
        let me = self.mb.rank();
        let seqs = [Some(self.seq), self.seq.checked_sub(1)];
        for (q, tag) in (0..self.mb.size())
            .filter(|&q| q != me)
            .flat_map(|q| seqs.into_iter().flatten().map(move |seq| (q, mailbox::tag(seq, MISMATCH))))
        {
            if let Ok(Some(f)) = self.mb.find(q, tag) {
                // SAFETY: a published record's payload, readable until consumed.
                let text =
                    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(f.payload, f.len) }).into_owned();
                self.mb.consume(q, f.pos);
                return Err(Error::Mismatch(format!("rank {q} reports: {text}")));
            }
        }
        Ok(())
    }
}

/// After a timeout of mailbox call `seq`: tells every peer whom this rank waits for (`waiting`)
/// and listens for their notices for `grace` or until every peer spoke, as the engine does
/// (`Engine::check_deadline`); returns the ranks to blame (`op::suspects`: the silent ones that
/// someone waits for). Notices to a full inbox are dropped.
pub(crate) fn blame(mb: &mut Mailbox, seq: u64, rank: u32, p: u32, waiting: Vec<u32>, grace: Duration) -> Vec<u32> {
    let words = waiting.len().min(MAX_MESSAGE / 4);
    let payload: Vec<u8> = waiting[..words].iter().flat_map(|r| r.to_le_bytes()).collect();
    let tag = mailbox::tag(seq, NOTICE);
    for peer in (0..p).filter(|&q| q != rank) {
        // SAFETY: `payload` is readable for its length, at most MAX_MESSAGE bytes.
        let _ = unsafe { mb.send(peer as usize, tag, payload.as_ptr(), payload.len()) };
    }
    let mut notices: FastMap<u32, Vec<u32>> = FastMap::default();
    let until = Instant::now() + grace;
    while notices.len() + 1 < p as usize && Instant::now() < until {
        for peer in (0..p).filter(|&q| q != rank) {
            if notices.contains_key(&peer) {
                continue;
            }
            // A malformed inbox: that peer's notice is lost, like one to a full inbox.
            if let Ok(Some(f)) = mb.find(peer as usize, tag) {
                // SAFETY: a published record's payload, readable until consumed.
                let bytes = unsafe { std::slice::from_raw_parts(f.payload, f.len) };
                let waits = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                mb.consume(peer as usize, f.pos);
                notices.insert(peer, waits);
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    super::op::suspects(rank, waiting, &notices)
}

/// Binds a mailbox call's scratch buffers of `lens` elements in `words` (16-byte aligned, grown
/// as needed), each on a 64-byte boundary; the bounds go to `out`.
pub(crate) fn bind_scratch(lens: &[u64], elem: usize, words: &mut Vec<u128>, out: &mut Vec<Bound>) {
    out.clear();
    let padded = |len: u64| (len as usize * elem).div_ceil(64) * 64;
    let total: usize = lens.iter().map(|&l| padded(l)).sum();
    if words.len() < total.div_ceil(16) {
        words.resize(total.div_ceil(16), 0);
    }
    let mut at = words.as_mut_ptr().cast::<u8>();
    for &len in lens {
        out.push(Bound::raw(at, len as usize * elem));
        // SAFETY: the regions before this one and it take at most `total` bytes of `words`.
        at = unsafe { at.add(padded(len)) };
    }
}
