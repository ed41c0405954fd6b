//! Backend-independent scenarios run by `local_*.rs` (threads) and `shm_*.rs` (processes): a ring
//! of notified writes, ordered control messages both ways, and a write to a deregistered key.
#![allow(dead_code)]

use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use fabcoll_fabric::{open, Access, Backend, Completion, Config, Endpoint, Error, RemoteMr};

pub const TIMEOUT: Duration = Duration::from_secs(30);
pub const SIZES: [usize; 3] = [8, 64 * 1024, 16 * 1024 * 1024];

const TAG_DESC: u64 = 1;
const TAG_ORDER: u64 = 2;
const TAG_DEAD: u64 = 3;

/// Runs `f` on `p` endpoints of `backend`, one per thread of this process, all connected.
pub fn run_threads(backend: Backend, p: usize, job: &str, f: fn(&mut dyn Endpoint) -> Result<(), String>) {
    let blobs = Arc::new(Mutex::new(vec![Vec::new(); p]));
    let barrier = Arc::new(Barrier::new(p));
    let handles: Vec<_> = (0..p)
        .map(|r| {
            let (blobs, barrier, job, backend) = (blobs.clone(), barrier.clone(), job.to_string(), backend.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut ep = open(&Config::new(backend, r, p, job)).map_err(|e| e.to_string())?;
                blobs.lock().unwrap()[r] = ep.address().map_err(|e| e.to_string())?;
                barrier.wait();
                let all = blobs.lock().unwrap().clone();
                ep.insert_peers(&all).map_err(|e| e.to_string())?;
                let res = f(&mut *ep);
                barrier.wait(); // nobody drops its endpoint while others may still write to it
                res
            })
        })
        .collect();
    let errs: Vec<String> = handles.into_iter().filter_map(|h| h.join().expect("rank thread panicked").err()).collect();
    assert!(errs.is_empty(), "{errs:#?}");
}

/// Collects completions and hands out the first one matching a predicate.
pub struct Inbox {
    pending: Vec<Completion>,
}

impl Default for Inbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Inbox {
    pub fn new() -> Self {
        Inbox { pending: Vec::new() }
    }

    pub fn expect(
        &mut self,
        ep: &mut dyn Endpoint,
        what: &str,
        pred: impl Fn(&Completion) -> bool,
    ) -> Result<Completion, String> {
        loop {
            if let Some(i) = self.pending.iter().position(&pred) {
                return Ok(self.pending.remove(i));
            }
            ep.wait(&mut self.pending, Some(TIMEOUT))
                .map_err(|e| format!("rank {} waiting for {what}: {e} (pending {:?})", ep.rank(), self.pending))?;
        }
    }

    /// Polls once more and tells whether a completion matching `pred` came (handing none out).
    pub fn seen(&mut self, ep: &mut dyn Endpoint, pred: impl Fn(&Completion) -> bool) -> Result<bool, String> {
        ep.poll(&mut self.pending).map_err(|e| format!("rank {}: {e}", ep.rank()))?;
        Ok(self.pending.iter().any(pred))
    }

    /// Polls once more and returns every completion not handed out yet.
    pub fn rest(&mut self, ep: &mut dyn Endpoint) -> Result<Vec<Completion>, String> {
        ep.poll(&mut self.pending).map_err(|e| format!("rank {}: {e}", ep.rank()))?;
        Ok(std::mem::take(&mut self.pending))
    }

    pub fn ctrl(&mut self, ep: &mut dyn Endpoint, from: usize, tag: u64) -> Result<Vec<u8>, String> {
        match self.expect(
            ep,
            "ctrl",
            |c| matches!(c, Completion::Ctrl { peer, tag: t, .. } if *peer == from && *t == tag),
        )? {
            Completion::Ctrl { data, .. } => Ok(data),
            _ => unreachable!("matched Ctrl"),
        }
    }
}

pub fn pattern(rank: usize, len: usize, i: usize) -> u8 {
    (rank.wrapping_mul(131) ^ i.wrapping_mul(7) ^ (i >> 8) ^ len) as u8
}

/// Ring: rank r writes `len` bytes into rank r+1's buffer with immediate `len ^ r`; checks data.
/// Buffers come from `alloc`.
pub fn ring(ep: &mut dyn Endpoint, inbox: &mut Inbox, len: usize) -> Result<(), String> {
    ring_with(ep, inbox, len, false)
}

/// `ring`, with source and destination in plain user memory (`Vec`) registered with `register`
/// when `user_mem` (exercises e.g. shm's `process_vm_writev` path instead of mapped memfds).
pub fn ring_with(ep: &mut dyn Endpoint, inbox: &mut Inbox, len: usize, user_mem: bool) -> Result<(), String> {
    ring_impl(ep, inbox, len, user_mem, false).map(|_| ())
}

fn ring_impl(
    ep: &mut dyn Endpoint,
    inbox: &mut Inbox,
    len: usize,
    user_mem: bool,
    settle: bool,
) -> Result<bool, String> {
    let (r, p) = (ep.rank(), ep.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    let e = |e: Error| format!("rank {r}, len {len}: {e}");
    let (mut dst_mem, mut src_mem) = (vec![0u8; len], vec![0u8; len]);
    let (dst, src) = if user_mem {
        // SAFETY: both Vecs outlive the registrations (dropped at the end of this function after
        // the Mrs, which are declared later), and are only accessed through the Mrs meanwhile.
        unsafe {
            (
                ep.register(dst_mem.as_mut_ptr(), len, Access::REMOTE_WRITE).map_err(e)?,
                ep.register(src_mem.as_mut_ptr(), len, Access::LOCAL).map_err(e)?,
            )
        }
    } else {
        (ep.alloc(len, Access::REMOTE_WRITE).map_err(e)?, ep.alloc(len, Access::LOCAL).map_err(e)?)
    };
    let data: Vec<u8> = (0..len).map(|i| pattern(r, len, i)).collect();
    src.write_at(0, &data).map_err(e)?;
    send_ctrl(ep, inbox, left, TAG_DESC, &dst.remote().to_bytes())?;
    let desc = RemoteMr::from_bytes(&inbox.ctrl(ep, right, TAG_DESC)?).map_err(e)?;
    let ctx = 0xc0ffee ^ len as u64;
    let (imm, dst_range) = (Some((len ^ r) as u64), desc.range());
    let settled = if settle {
        ep.write_settled(right, src.range(), dst_range, imm, ctx).map_err(e)?
    } else {
        ep.write(right, src.range(), dst_range, imm, ctx).map_err(e)?;
        false
    };
    if !settled {
        inbox.expect(ep, "WriteDone", |c| *c == Completion::WriteDone { ctx })?;
    }
    let imm = (len ^ left) as u64;
    inbox.expect(ep, "WriteArrived", |c| *c == Completion::WriteArrived { peer: left, imm })?;
    let mut got = vec![0u8; len];
    dst.read_at(0, &mut got).map_err(e)?;
    if let Some(i) = (0..len).find(|&i| got[i] != pattern(left, len, i)) {
        return Err(format!("rank {r}, len {len}: byte {i} is {} expected {}", got[i], pattern(left, len, i)));
    }
    // A settled write reports no WriteDone, now or after a few more polls.
    for _ in 0..if settled { 20 } else { 0 } {
        if inbox.seen(ep, |c| *c == Completion::WriteDone { ctx })? {
            return Err(format!("rank {r}, len {len}: a settled write reported a WriteDone too"));
        }
    }
    // Nobody may drop `dst` before the left neighbour's write is done: we received it, so fine.
    Ok(settled)
}

/// A ring of writes made with [`Endpoint::write_settled`]: each write's completion is reported
/// exactly once, by `write_settled` returning `true` or by one `WriteDone` through `poll`, never
/// both; the data arrives intact either way. Returns whether this rank's write settled.
pub fn settled_ring(ep: &mut dyn Endpoint, inbox: &mut Inbox, len: usize) -> Result<bool, String> {
    ring_impl(ep, inbox, len, false, true)
}

/// `send_ctrl`, polling (into `inbox`) and retrying while the peer's control queue is full: a peer
/// still draining an earlier burst (e.g. `ctrl_both_ways`'s) makes any later send busy for a while.
pub fn send_ctrl(ep: &mut dyn Endpoint, inbox: &mut Inbox, peer: usize, tag: u64, data: &[u8]) -> Result<(), String> {
    let r = ep.rank();
    loop {
        match ep.send_ctrl(peer, tag, data) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_busy() => {
                let mut tmp = Vec::new();
                ep.poll(&mut tmp).map_err(|e| e.to_string())?;
                inbox.pending.extend(tmp);
                std::thread::yield_now();
            }
            Err(e) => return Err(format!("rank {r}: send_ctrl to {peer}: {e}")),
        }
    }
}

/// Control messages both ways to both neighbours, `n` each, arriving in order.
pub fn ctrl_both_ways(ep: &mut dyn Endpoint, inbox: &mut Inbox, n: usize) -> Result<(), String> {
    let (r, p) = (ep.rank(), ep.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for k in 0..n {
        for peer in [left, right] {
            let msg: Vec<u8> = (0..(k * 37) % 3000).map(|i| (i + k + r) as u8).collect();
            let mut m = (k as u32).to_le_bytes().to_vec();
            m.extend(msg);
            send_ctrl(ep, inbox, peer, TAG_ORDER, &m)?;
        }
    }
    let sources = if p == 1 {
        vec![r]
    } else if p == 2 {
        vec![left]
    } else {
        vec![left, right]
    };
    let reps = if p <= 2 { 2 } else { 1 };
    for from in sources {
        for k in 0..n * reps {
            let m = inbox.ctrl(ep, from, TAG_ORDER)?;
            let seq = u32::from_le_bytes(m[..4].try_into().unwrap()) as usize;
            if seq != k / reps {
                return Err(format!("rank {r}: control message {seq} from {from} arrived as number {k}"));
            }
            let body_ok = m[4..].len() == (seq * 37) % 3000
                && m[4..].iter().enumerate().all(|(i, &b)| b == (i + seq + from) as u8);
            if !body_ok {
                return Err(format!("rank {r}: control message {seq} from {from} corrupted"));
            }
        }
    }
    Ok(())
}

/// Rank r+1 registers, sends its descriptor, deregisters, says so; rank r's write must fail
/// with `InvalidKey` and the memory must not be touched (checked on a still-live neighbour region).
pub fn write_to_deregistered(ep: &mut dyn Endpoint, inbox: &mut Inbox) -> Result<(), String> {
    let (r, p) = (ep.rank(), ep.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    let e = |e: Error| format!("rank {r}: {e}");
    let gone = ep.alloc(4096, Access::REMOTE_WRITE).map_err(e)?;
    let desc = gone.remote();
    drop(gone);
    // Registering again must not resurrect the old key.
    let fresh = ep.alloc(4096, Access::REMOTE_WRITE).map_err(e)?;
    send_ctrl(ep, inbox, left, TAG_DEAD, &desc.to_bytes())?;
    let stale = RemoteMr::from_bytes(&inbox.ctrl(ep, right, TAG_DEAD)?).map_err(e)?;
    let src = ep.alloc(64, Access::LOCAL).map_err(e)?;
    src.write_at(0, &[0xAB; 64]).map_err(e)?;
    match ep.write(right, src.range(), stale.slice(0, 64).map_err(e)?, Some(7), 99) {
        Err(Error::InvalidKey { peer, key }) if peer == right && key == stale.key => {}
        other => return Err(format!("rank {r}: write to deregistered key gave {other:?}")),
    }
    // The stale key must not have been aliased to the fresh registration.
    send_ctrl(ep, inbox, right, TAG_DEAD + 1, &[])?;
    inbox.ctrl(ep, left, TAG_DEAD + 1)?;
    let mut got = vec![0u8; 4096];
    fresh.read_at(0, &mut got).map_err(e)?;
    if got.iter().any(|&b| b != 0) {
        return Err(format!("rank {r}: a write to a stale key landed in a fresh registration"));
    }
    if inbox.pending.iter().any(|c| matches!(c, Completion::WriteArrived { .. })) {
        return Err(format!("rank {r}: failed write produced a notification"));
    }
    Ok(())
}

/// All scenarios in sequence on a connected endpoint.
pub fn all(ep: &mut dyn Endpoint) -> Result<(), String> {
    let mut inbox = Inbox::new();
    for len in SIZES {
        ring(ep, &mut inbox, len)?;
        ring_with(ep, &mut inbox, len, true)?;
    }
    for len in [8, 1024, 64 * 1024] {
        settled_ring(ep, &mut inbox, len)?;
    }
    ctrl_both_ways(ep, &mut inbox, 100)?;
    write_to_deregistered(ep, &mut inbox)?;
    Ok(())
}
