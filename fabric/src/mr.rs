//! Memory registrations: the local handle [`Mr`] (deregistered when its last clone drops), the
//! serializable remote descriptor [`RemoteMr`] peers write into, and the range types of a write.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Access rights of a registration. Local read/write by the owner is always allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Only local use (source of writes).
    pub const LOCAL: Access = Access(0);
    /// Peers may write into it.
    pub const REMOTE_WRITE: Access = Access(1);
    /// Peers may read from it (reserved for a later read operation; also allows `map_remote`).
    pub const REMOTE_READ: Access = Access(2);
    /// Both remote rights.
    pub const REMOTE_RW: Access = Access(3);

    /// Raw bits (bit 0 remote write, bit 1 remote read).
    pub fn bits(self) -> u8 {
        self.0
    }

    /// From raw bits; unknown bits are an error.
    pub fn from_bits(bits: u8) -> Result<Access> {
        if bits & !3 != 0 {
            return Err(Error::invalid(format!("unknown access bits {bits:#x}")));
        }
        Ok(Access(bits))
    }

    /// True if every right of `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// What a peer needs to write into a registration: travels in control messages as bytes
/// ([`RemoteMr::to_bytes`], [`RemoteMr::from_bytes`], fixed [`RemoteMr::WIRE_LEN`] bytes).
///
/// `addr` is the target's virtual address or an offset, as the backend defines (libfabric without
/// `FI_MR_VIRT_ADDR` uses offsets); callers never interpret it, they only add offsets through
/// [`RemoteRange`]. `key` is the backend key (libfabric key, verbs rkey, shm slot+generation).
///
/// A registration of a routed endpoint (`crate::routes`) is one registration in each of two
/// backends: `addr` and `key` are the network backend's, `node` the node-local backend's (a peer
/// on the target's node writes through it); single backends leave `node` empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteMr {
    /// Base address or offset at the target (backend-defined).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Backend key.
    pub key: u64,
    /// Rights granted to peers.
    pub access: Access,
    /// The same memory's registration in the node-local backend of a routed endpoint.
    pub node: Option<NodeKey>,
}

/// The node-local backend's `(addr, key)` of a routed registration (see [`RemoteMr::node`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeKey {
    /// Base address or offset at the target in the node-local backend.
    pub addr: u64,
    /// The node-local backend's key.
    pub key: u64,
}

impl RemoteMr {
    /// Serialized size in bytes.
    pub const WIRE_LEN: usize = 41;

    /// Bit of the access byte that says the node-local `(addr, key)` is present.
    const NODE_BIT: u8 = 0x80;

    /// The descriptor a single backend sees: this one without its node-local part.
    pub fn network_part(&self) -> RemoteMr {
        RemoteMr { node: None, ..*self }
    }

    /// The node-local backend's descriptor of the same memory; `None` if there is none.
    pub fn node_part(&self) -> Option<RemoteMr> {
        self.node.map(|n| RemoteMr { addr: n.addr, key: n.key, node: None, ..*self })
    }

    /// Little-endian encoding: addr, len, key (8 bytes each), the access byte (bit 7: a node-local
    /// part follows), the node-local addr and key (8 bytes each, zero when absent). Fixed length,
    /// so that a protocol message has one layout whatever the backend.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24] = self.access.bits();
        if let Some(n) = self.node {
            b[24] |= Self::NODE_BIT;
            b[25..33].copy_from_slice(&n.addr.to_le_bytes());
            b[33..41].copy_from_slice(&n.key.to_le_bytes());
        }
        b
    }

    /// Inverse of [`RemoteMr::to_bytes`]; wrong length, unknown access bits or a node-local part
    /// that is not announced are an error.
    pub fn from_bytes(b: &[u8]) -> Result<RemoteMr> {
        if b.len() != Self::WIRE_LEN {
            return Err(Error::invalid(format!("remote descriptor must be {} bytes, got {}", Self::WIRE_LEN, b.len())));
        }
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8-byte slice"));
        let node = if b[24] & Self::NODE_BIT != 0 {
            Some(NodeKey { addr: u(25), key: u(33) })
        } else if b[25..].iter().any(|&x| x != 0) {
            return Err(Error::invalid("remote descriptor has node-local bytes without its node-local flag"));
        } else {
            None
        };
        let access = Access::from_bits(b[24] & !Self::NODE_BIT)?;
        Ok(RemoteMr { addr: u(0), len: u(8), key: u(16), access, node })
    }

    /// The whole registration as a write destination.
    pub fn range(&self) -> RemoteRange {
        RemoteRange { mr: *self, off: 0, len: self.len as usize }
    }

    /// A sub-range `[off, off+len)`; out of bounds is an error.
    pub fn slice(&self, off: usize, len: usize) -> Result<RemoteRange> {
        check_bounds("remote destination", off, len, self.len as usize)?;
        Ok(RemoteRange { mr: *self, off, len })
    }
}

/// The argument checks of a write to `peer` that a backend can make before it touches anything:
/// equal lengths, both ranges inside their registrations, a remote-writable destination.
pub(crate) fn check_write(peer: usize, src: &LocalRange<'_>, dst: &RemoteRange) -> Result<()> {
    if src.len != dst.len {
        return Err(Error::invalid(format!("write of {} source bytes into {} destination bytes", src.len, dst.len)));
    }
    check_bounds("local source", src.off, src.len, src.mr.len())?;
    check_bounds("remote destination", dst.off, dst.len, dst.mr.len as usize)?;
    if !dst.mr.access.contains(Access::REMOTE_WRITE) {
        return Err(Error::Access(format!(
            "rank {peer}'s registration (key {:#x}) grants no remote write",
            dst.mr.key
        )));
    }
    Ok(())
}

pub(crate) fn check_bounds(what: &'static str, off: usize, len: usize, reg_len: usize) -> Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= reg_len => Ok(()),
        _ => Err(Error::OutOfBounds { what, off, len, reg_len }),
    }
}

/// Backend part of a registration; dropping it deregisters (libfabric `fi_close`, shm key-table
/// slot release, …). Implemented by each backend.
pub trait MrBackend: Send + Sync + 'static {
    /// Backend-specific downcast hook (e.g. shm finds its memfd; ofi its `fid_mr`).
    fn as_any(&self) -> &dyn Any;
}

struct MrInner {
    addr: *mut u8,
    len: usize,
    access: Access,
    local_desc: u64,
    remote: RemoteMr,
    // Declaration order = drop order: deregister first, then free owned memory.
    backend: Box<dyn MrBackend>,
    owned: Option<Box<dyn Any + Send + Sync>>,
}

// SAFETY: `addr` is only a location; the registration contract (see `Endpoint::register`) makes
// the caller responsible for the memory's validity, and all access through it is via raw-pointer
// copies whose races are governed by the completion rules of the endpoint contract.
unsafe impl Send for MrInner {}
// SAFETY: as above; `MrInner` has no interior mutability besides what `backend`/`owned` (both
// `Send + Sync`) provide.
unsafe impl Sync for MrInner {}

/// A local memory registration. Cheap to clone (shared handle); the registration is released
/// when the last clone drops — backends keep a clone while a write that uses it is in flight.
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.inner.addr)
            .field("len", &self.inner.len)
            .field("remote", &self.inner.remote)
            .finish()
    }
}

impl Mr {
    /// Built by backends. `owned` (if any) is the allocation backing `[addr, addr+len)`; it is
    /// dropped after `backend` (deregistration).
    ///
    /// # Safety
    /// `[addr, addr+len)` must stay valid for reads and writes until the returned `Mr` and all
    /// its clones are dropped (guaranteed by `owned` when it is the allocation).
    pub unsafe fn from_parts(
        addr: *mut u8,
        len: usize,
        access: Access,
        local_desc: u64,
        remote: RemoteMr,
        backend: Box<dyn MrBackend>,
        owned: Option<Box<dyn Any + Send + Sync>>,
    ) -> Mr {
        Mr { inner: Arc::new(MrInner { addr, len, access, local_desc, remote, backend, owned }) }
    }

    /// Start of the registered memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// True if the registration is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Rights granted to peers.
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// Backend local descriptor (libfabric `fi_mr_desc` as integer, verbs lkey); 0 if unused.
    pub fn local_desc(&self) -> u64 {
        self.inner.local_desc
    }

    /// The descriptor to send to peers.
    pub fn remote(&self) -> RemoteMr {
        self.inner.remote
    }

    /// True if this handle owns its memory (came from `Endpoint::alloc`).
    pub fn owns_memory(&self) -> bool {
        self.inner.owned.is_some()
    }

    /// The backend part (for downcasting inside a backend).
    pub fn backend(&self) -> &dyn MrBackend {
        &*self.inner.backend
    }

    /// `[off, off+len)` as a write source; out of bounds is an error.
    pub fn slice(&self, off: usize, len: usize) -> Result<LocalRange<'_>> {
        check_bounds("local source", off, len, self.inner.len)?;
        Ok(LocalRange { mr: self, off, len })
    }

    /// The whole registration as a write source.
    pub fn range(&self) -> LocalRange<'_> {
        LocalRange { mr: self, off: 0, len: self.inner.len }
    }

    /// Copy `src` into the registered memory at `off` (bounds-checked). Racy by nature if a
    /// remote write into the same bytes is in progress: read/write a range only when the
    /// protocol says it is quiet (after the matching completion).
    pub fn write_at(&self, off: usize, src: &[u8]) -> Result<()> {
        check_bounds("local buffer", off, src.len(), self.inner.len)?;
        // SAFETY: in bounds of a registration whose memory is valid while `self` lives (Mr
        // contract); `src` cannot overlap registered memory mutably borrowed elsewhere because
        // registered memory is only ever touched through raw pointers.
        unsafe { std::ptr::copy(src.as_ptr(), self.inner.addr.add(off), src.len()) };
        Ok(())
    }

    /// Copy registered memory at `off` into `dst` (bounds-checked); same race caveat as
    /// [`Mr::write_at`].
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        check_bounds("local buffer", off, dst.len(), self.inner.len)?;
        // SAFETY: as in `write_at`, with the copy direction reversed.
        unsafe { std::ptr::copy(self.inner.addr.add(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The registered bytes as a slice.
    ///
    /// # Safety
    /// No peer (or local code) may write these bytes while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes (Mr contract); no concurrent writes (caller).
        unsafe { std::slice::from_raw_parts(self.inner.addr, self.inner.len) }
    }

    /// The registered bytes as a mutable slice.
    ///
    /// # Safety
    /// No peer may access these bytes, and no other slice of them may exist, while it lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: valid for `len` bytes (Mr contract); exclusive (caller).
        unsafe { std::slice::from_raw_parts_mut(self.inner.addr, self.inner.len) }
    }
}

/// A source range of a write: `[off, off+len)` of a local registration.
#[derive(Clone, Copy, Debug)]
pub struct LocalRange<'a> {
    /// The registration.
    pub mr: &'a Mr,
    /// Offset in bytes.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A destination range of a write: `[off, off+len)` of a peer's registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRange {
    /// The peer's descriptor.
    pub mr: RemoteMr,
    /// Offset in bytes from the registration start.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A zeroed, page-aligned heap allocation (backing of `Endpoint::alloc` on heap backends).
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: owns its allocation; accessed only through raw pointers under the Mr contract.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; no interior state besides the raw allocation.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub(crate) const ALIGN: usize = 4096;

    pub(crate) fn zeroed(len: usize) -> Result<AlignedBuf> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), Self::ALIGN)
            .map_err(|e| Error::invalid(format!("allocation of {len} bytes: {e}")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::invalid(format!("out of memory allocating {len} bytes")));
        }
        Ok(AlignedBuf { ptr, layout })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_mr_roundtrip_and_errors() {
        let r =
            RemoteMr { addr: 0xdead_beef_0000, len: 1 << 40, key: u64::MAX - 3, access: Access::REMOTE_RW, node: None };
        assert_eq!(RemoteMr::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!(RemoteMr::from_bytes(&r.to_bytes()[..24]).is_err());
        let mut bad = r.to_bytes();
        bad[24] = 0x40;
        assert!(RemoteMr::from_bytes(&bad).is_err());
        let mut bad = r.to_bytes();
        bad[40] = 1;
        assert!(RemoteMr::from_bytes(&bad).unwrap_err().to_string().contains("without its node-local flag"));
        assert!(r.slice(usize::MAX, 2).is_err());
        assert_eq!(r.slice(8, 8).unwrap().off, 8);
    }

    #[test]
    fn a_routed_descriptor_carries_both_routes() {
        let node = NodeKey { addr: 0x7f00_0000_1000, key: (7 << 32) | 3 };
        let r = RemoteMr { addr: 0x5000, len: 4096, key: 42, access: Access::REMOTE_WRITE, node: Some(node) };
        let b = r.to_bytes();
        assert_eq!(b[24], 0x81, "access bits and the node-local flag");
        assert_eq!(RemoteMr::from_bytes(&b).unwrap(), r);
        assert_eq!(r.network_part(), RemoteMr { node: None, ..r });
        let n = r.node_part().unwrap();
        assert_eq!((n.addr, n.key, n.len, n.access, n.node), (node.addr, node.key, 4096, Access::REMOTE_WRITE, None));
        assert_eq!(r.network_part().node_part(), None);
        // A node-local part of zeros is still a node-local part.
        let zero = RemoteMr { node: Some(NodeKey { addr: 0, key: 0 }), ..r };
        assert_eq!(RemoteMr::from_bytes(&zero.to_bytes()).unwrap(), zero);
    }
}
