//! A call's buffers as the executor sees them, and the one implementation of a local step (a
//! schedule's `Copy` or `Reduce`), shared by the straight-line runner and the engine's ops.

use fabcoll_collectives::datatype::Datatype;
use fabcoll_collectives::kernels;
use fabcoll_collectives::op::ReduceOp;
use fabcoll_collectives::schedule::{Buf, Region, StepKind};
use fabcoll_fabric::Mr;

use super::Stats;
use crate::error::{Error, Result};

/// A user or scratch buffer bound to the call.
#[derive(Clone)]
pub(crate) struct Bound {
    pub ptr: *mut u8,
    pub bytes: usize,
    /// Its registration (`None` where the call's lane moves bytes without one: mailboxes).
    pub mr: Option<Mr>,
    /// Offset of `ptr` in `mr` (a cached registration may start before the buffer).
    pub mr_off: usize,
}

impl Bound {
    pub fn empty() -> Bound {
        Bound { ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(), bytes: 0, mr: None, mr_off: 0 }
    }

    /// An unregistered buffer.
    pub fn raw(ptr: *mut u8, bytes: usize) -> Bound {
        Bound { ptr, bytes, mr: None, mr_off: 0 }
    }
}

/// A call's buffers, `elem` bytes per element.
pub(crate) struct Bufs<'a> {
    pub send: &'a Bound,
    pub recv: &'a Bound,
    pub scratch: &'a [Bound],
    pub elem: usize,
}

impl<'a> Bufs<'a> {
    pub fn bound(&self, b: Buf) -> &'a Bound {
        match b {
            Buf::Send => self.send,
            Buf::Recv => self.recv,
            Buf::Scratch(i) => &self.scratch[i as usize],
        }
    }

    /// Start pointer and byte length of a region (bounds were checked when the schedule was built
    /// against the same buffer lengths).
    #[inline]
    pub fn raw(&self, r: Region) -> (*mut u8, usize) {
        let b = self.bound(r.buf);
        let (off, len) = (r.off as usize * self.elem, r.len as usize * self.elem);
        debug_assert!(off + len <= b.bytes);
        // SAFETY: `off + len <= b.bytes` (schedule bounds checked against the bound lengths).
        (unsafe { b.ptr.add(off) }, len)
    }

    /// The registration of a region's buffer and the region's byte offset in it.
    #[inline]
    pub fn mr(&self, r: Region) -> Result<(&'a Mr, usize)> {
        let b = self.bound(r.buf);
        let mr = b.mr.as_ref().ok_or_else(|| Error::Protocol(format!("{:?} buffer is not registered", r.buf)))?;
        Ok((mr, b.mr_off + r.off as usize * self.elem))
    }
}

/// Runs local step `kind` (a Reduce or a Copy) on `bufs`. A Reduce whose source message its
/// fused Recv left where it arrived (an eager slot, a mailbox record) reads it at `fused`.
pub(crate) fn local_step(
    kind: StepKind,
    bufs: &Bufs<'_>,
    fused: Option<*const u8>,
    dtype: Datatype,
    rop: Option<&ReduceOp>,
    stats: &mut Stats,
) -> Result<()> {
    match kind {
        StepKind::Reduce { src, dst, order } => {
            let (sp, n) = bufs.raw(src);
            let sp = fused.unwrap_or(sp);
            let (dp, _) = bufs.raw(dst);
            let rop = rop.ok_or_else(|| Error::Protocol("reduce step without an op".into()))?;
            if n > 0 {
                // SAFETY: both regions lie in the call's buffers or in a slot or record holding a
                // complete message of `n` bytes (bounds checked); they do not overlap (the
                // schedule's checks refuse overlapping Reduce regions); no peer writes them now:
                // peers only write granted Recv regions of pending Recv steps and slots or records
                // not consumed, and the schedule orders every such Recv before any step touching
                // its region.
                let (a, b) = unsafe { (std::slice::from_raw_parts(sp, n), std::slice::from_raw_parts_mut(dp, n)) };
                kernels::reduce(rop, dtype, a, b, order)?;
            }
            stats.reduce_bytes += n as u64;
        }
        StepKind::Copy { src, dst } => {
            let (sp, n) = bufs.raw(src);
            let (dp, _) = bufs.raw(dst);
            // SAFETY: as for Reduce: in the call's buffers, in bounds, non-overlapping, quiet.
            unsafe { fabcoll_fabric::copy::copy_bulk(dp, sp, n) };
            stats.local_copy_bytes += n as u64;
        }
        StepKind::Send { .. } | StepKind::Recv { .. } => {
            return Err(Error::Protocol("a Send or Recv run as a local step".into()));
        }
    }
    Ok(())
}
