//! Owned libfabric objects (info, fabric, domain, cq, av, endpoint, memory region) closed in `Drop`.
//! Each child holds an `Arc` to its parent (sideway style), so the close order endpoint → av/cq → domain → fabric
//! holds by construction. Every call on objects of one domain is serialized by the domain's lock (we open
//! domains with `FI_THREAD_DOMAIN`), which makes the wrappers `Send + Sync`.

use std::ffi::{c_void, CStr, CString};
use std::mem::MaybeUninit;
use std::ptr::{self, addr_of_mut};
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::{check, OfiError};
use super::sys;

/// The `mr_mode` bits fabcoll knows how to satisfy; providers answer with the subset they require.
pub(crate) const MR_MODE_SUPPORTED: u64 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY | sys::FI_MR_ENDPOINT;

/// Capabilities fabcoll asks for: tagged control messages and one-sided writes (with remote CQ data).
pub(crate) const CAPS: u64 = sys::FI_MSG
    | sys::FI_TAGGED
    | sys::FI_RMA
    | sys::FI_SEND
    | sys::FI_RECV
    | sys::FI_WRITE
    | sys::FI_READ
    | sys::FI_REMOTE_WRITE
    | sys::FI_REMOTE_READ;

/// A `fi_getinfo` result list; `head` is the entry fabcoll uses.
pub(crate) struct Info {
    head: *mut sys::fi_info,
}

// SAFETY: the list is never mutated after fi_getinfo returns it; libfabric only reads it.
unsafe impl Send for Info {}
// SAFETY: as above, shared access is read-only.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: head came from fi_getinfo and is freed exactly once.
        unsafe { sys::fi_freeinfo(self.head) }
    }
}

/// What fabcoll learned from the chosen `fi_info`.
#[derive(Debug, Clone)]
pub struct ProviderAttrs {
    /// e.g. `"tcp;ofi_rxm"`, `"shm"`.
    pub prov_name: String,
    /// The fabric name (network or `"shm"`).
    pub fabric_name: String,
    /// The domain name (interface).
    pub domain_name: String,
    /// The `FI_MR_*` bits the provider requires.
    pub mr_mode: u64,
    /// Bytes of MR key the provider supports.
    pub mr_key_size: usize,
    /// Bytes of remote CQ data (immediate) a write may carry.
    pub cq_data_size: usize,
    /// Largest message or RMA transfer.
    pub max_msg_size: usize,
    /// Largest inject (buffered, no completion) transfer.
    pub inject_size: usize,
    /// Mode bits (`FI_CONTEXT`, `FI_CONTEXT2`, …) the provider imposes.
    pub mode: u64,
    /// True when data progress is manual (only our polling moves data).
    pub manual_progress: bool,
}

fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric strings in fi_info are NUL-terminated and live as long as the info.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Info {
    /// Asks libfabric for an `FI_EP_RDM` endpoint of `provider` (any when `None`) with fabcoll's caps.
    /// `node` is the local address to bind (e.g. `"127.0.0.1"`), passed with `FI_SOURCE`.
    /// With `delivery_complete`, operations complete only once the target processed them (`FI_DELIVERY_COMPLETE`
    /// as the endpoint's default op flag), so e.g. a write to a stale key fails at the initiator.
    pub(crate) fn get(provider: Option<&str>, node: Option<&str>, delivery_complete: bool) -> Result<Info, OfiError> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with all attr structs allocated (or NULL).
        let hints = unsafe { sys::fabcoll_fi_allocinfo() };
        if hints.is_null() {
            return Err(OfiError::Unsupported("fi_allocinfo returned NULL (out of memory)".into()));
        }
        let guard = Info { head: hints };
        let prov = provider.map(CString::new).transpose().map_err(|_| bad_str("provider"))?;
        let node = node.map(CString::new).transpose().map_err(|_| bad_str("node"))?;
        // SAFETY: hints and its attr structs were allocated by fi_allocinfo; strings we store are strdup'ed
        // (malloc) because fi_freeinfo frees them.
        unsafe {
            (*hints).caps = CAPS;
            (*hints).mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode = MR_MODE_SUPPORTED as i32;
            (*(*hints).domain_attr).threading = sys::fi_threading_FI_THREAD_DOMAIN;
            (*(*hints).domain_attr).data_progress = sys::fi_progress_FI_PROGRESS_MANUAL;
            (*(*hints).domain_attr).control_progress = sys::fi_progress_FI_PROGRESS_MANUAL;
            if let Some(p) = &prov {
                (*(*hints).fabric_attr).prov_name = libc::strdup(p.as_ptr());
            }
        }
        let mut list: *mut sys::fi_info = ptr::null_mut();
        let (node_ptr, flags) = match &node {
            Some(n) => (n.as_ptr(), sys::FI_SOURCE),
            None => (ptr::null(), 0),
        };
        // SAFETY: valid hints, out pointer; node is NUL-terminated or NULL.
        let ret = unsafe { sys::fi_getinfo(super::FI_VERSION_1_17, node_ptr, ptr::null(), flags, hints, &mut list) };
        drop(guard);
        check(ret, "fi_getinfo").map_err(|e| match e {
            OfiError::Call { op, code, text } if code as u64 == sys::FI_ENODATA => OfiError::Call {
                op,
                code,
                text: format!(
                    "{text}: no FI_EP_RDM provider{} offers tagged messages + RMA with mr_mode within {:#x}",
                    provider.map(|p| format!(" named {p:?}")).unwrap_or_default(),
                    MR_MODE_SUPPORTED
                )
                .into(),
            },
            other => other,
        })?;
        let info = Info { head: list };
        if list.is_null() {
            return Err(OfiError::Unsupported("fi_getinfo returned an empty list".into()));
        }
        if delivery_complete {
            // SAFETY: list is a valid fi_info whose tx_attr fi_getinfo allocated; fi_endpoint reads op_flags.
            unsafe { (*(*list).tx_attr).op_flags |= sys::FI_DELIVERY_COMPLETE };
        }

        Ok(info)
    }

    pub(crate) fn ptr(&self) -> *mut sys::fi_info {
        self.head
    }

    /// The attributes of the chosen entry.
    pub(crate) fn attrs(&self) -> ProviderAttrs {
        let i = self.head;
        // SAFETY: head is a valid fi_info with non-NULL attr structs (fi_getinfo fills all of them).
        unsafe {
            let d = &*(*i).domain_attr;
            let f = &*(*i).fabric_attr;
            let ep = &*(*i).ep_attr;
            let tx = &*(*i).tx_attr;
            ProviderAttrs {
                prov_name: cstr(f.prov_name),
                fabric_name: cstr(f.name),
                domain_name: cstr(d.name),
                mr_mode: d.mr_mode as u32 as u64,
                mr_key_size: d.mr_key_size,
                cq_data_size: d.cq_data_size,
                max_msg_size: ep.max_msg_size,
                inject_size: tx.inject_size,
                mode: (*i).mode,
                manual_progress: d.data_progress == sys::fi_progress_FI_PROGRESS_MANUAL,
            }
        }
    }
}

fn bad_str(what: &str) -> OfiError {
    OfiError::Unsupported(format!("{what} contains a NUL byte"))
}

/// An open fabric (`fi_fabric`); keeps the info it was opened from.
pub(crate) struct Fabric {
    ptr: *mut sys::fid_fabric,
    info: Info,
}

// SAFETY: fabric objects are thread-safe for open/close per fi_fabric(3); we only open domains from it.
unsafe impl Send for Fabric {}
// SAFETY: as above.
unsafe impl Sync for Fabric {}

impl Fabric {
    pub(crate) fn open(info: Info) -> Result<Arc<Fabric>, OfiError> {
        let mut ptr = ptr::null_mut();
        // SAFETY: fabric_attr comes from fi_getinfo; out pointer is valid.
        check(unsafe { sys::fi_fabric((*info.ptr()).fabric_attr, &mut ptr, ptr::null_mut()) }, "fi_fabric")?;
        Ok(Arc::new(Fabric { ptr, info }))
    }

    pub(crate) fn info(&self) -> &Info {
        &self.info
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: opened by fi_fabric, all children hold an Arc to us so they are closed already.
        let ret = unsafe { sys::fabcoll_fi_close(addr_of_mut!((*self.ptr).fid)) };
        if let Err(e) = check(ret, "fi_close(fabric)") {
            tracing::warn!("{e}");
        }
    }
}

/// An open domain (`fi_domain`) with the lock that serializes all calls on its objects.
pub(crate) struct Domain {
    ptr: *mut sys::fid_domain,
    lock: Mutex<()>,
    fabric: Arc<Fabric>,
}

// SAFETY: every use of the domain's objects goes through `lock()` (FI_THREAD_DOMAIN contract).
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    pub(crate) fn open(fabric: &Arc<Fabric>) -> Result<Arc<Domain>, OfiError> {
        let mut ptr = ptr::null_mut();
        // SAFETY: fabric is open; info is the one the fabric was opened from.
        let ret = unsafe { sys::fabcoll_fi_domain(fabric.ptr, fabric.info.ptr(), &mut ptr, ptr::null_mut()) };
        check(ret, "fi_domain")?;
        Ok(Arc::new(Domain { ptr, lock: Mutex::new(()), fabric: fabric.clone() }))
    }

    /// Serializes a call on this domain's objects.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn info(&self) -> &Info {
        self.fabric.info()
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: opened by fi_domain; children (ep, cq, av, mr) hold an Arc to us so are closed already.
        let ret = unsafe { sys::fabcoll_fi_close(addr_of_mut!((*self.ptr).fid)) };
        if let Err(e) = check(ret, "fi_close(domain)") {
            tracing::warn!("{e}");
        }
    }
}

/// A completion queue in `FI_CQ_FORMAT_TAGGED` (carries op context, flags, len, remote data and tag).
pub(crate) struct Cq {
    ptr: *mut sys::fid_cq,
    domain: Arc<Domain>,
}

// SAFETY: all calls take the domain lock.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

/// One entry read from a CQ, successful or not.
pub(crate) enum CqEvent {
    Ok(sys::fi_cq_tagged_entry),
    Err { op_context: *mut c_void, flags: u64, err: OfiError },
}

impl Cq {
    pub(crate) fn open(domain: &Arc<Domain>, size: usize) -> Result<Arc<Cq>, OfiError> {
        let mut attr = sys::fi_cq_attr {
            size,
            format: sys::fi_cq_format_FI_CQ_FORMAT_TAGGED,
            wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
            ..Default::default()
        };
        let mut ptr = ptr::null_mut();
        let _g = domain.lock();
        // SAFETY: domain open, attr valid for the call.
        check(unsafe { sys::fabcoll_fi_cq_open(domain.ptr, &mut attr, &mut ptr, ptr::null_mut()) }, "fi_cq_open")?;
        Ok(Arc::new(Cq { ptr, domain: domain.clone() }))
    }

    /// Reads up to `out.capacity()` events (appending); returns how many. Drives manual progress.
    pub(crate) fn read(&self, out: &mut Vec<CqEvent>, max: usize) -> Result<usize, OfiError> {
        // Not zeroed: the provider fills the entries it returns, and only those are read (zeroing
        // the 768 bytes would cost every read).
        let mut buf = [const { MaybeUninit::<sys::fi_cq_tagged_entry>::uninit() }; 16];
        let n = max.min(buf.len());
        let _g = self.domain.lock();
        // SAFETY: buf has room for n tagged entries, the CQ format.
        let ret = unsafe { sys::fabcoll_fi_cq_read(self.ptr, buf.as_mut_ptr().cast(), n) };
        if ret >= 0 {
            // SAFETY: fi_cq_read wrote `ret` (<= n) entries at the start of buf.
            out.extend(buf[..ret as usize].iter().map(|e| CqEvent::Ok(unsafe { e.assume_init() })));
            return Ok(ret as usize);
        }
        if -ret == sys::FI_EAGAIN as isize {
            return Ok(0);
        }
        if -ret != sys::FI_EAVAIL as isize {
            check(ret as i64, "fi_cq_read")?;
        }
        let mut err = sys::fi_cq_err_entry::default();
        // SAFETY: err is a valid fi_cq_err_entry; err_data stays valid until the next CQ read, which the lock
        // prevents until we copied the text below.
        let r = unsafe { sys::fabcoll_fi_cq_readerr(self.ptr, &mut err, 0) };
        if r == -(sys::FI_EAGAIN as isize) {
            return Ok(0);
        }
        check(r as i64, "fi_cq_readerr")?;
        let mut text = [0 as std::os::raw::c_char; 256];
        // SAFETY: err came from readerr on this CQ; text is a writable buffer of the given length.
        let p = unsafe {
            sys::fabcoll_fi_cq_strerror(self.ptr, err.prov_errno, err.err_data, text.as_mut_ptr(), text.len())
        };
        let prov_text = cstr(p);
        let op = if err.flags & sys::FI_RECV != 0 {
            "recv"
        } else if err.flags & sys::FI_WRITE != 0 || err.flags & sys::FI_RMA != 0 {
            "write"
        } else if err.flags & sys::FI_SEND != 0 {
            "send"
        } else {
            "operation"
        };
        out.push(CqEvent::Err {
            op_context: err.op_context,
            flags: err.flags,
            err: OfiError::completion(op, err.err, err.prov_errno, &prov_text),
        });
        Ok(1)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        let _g = self.domain.lock();
        // SAFETY: opened by fi_cq_open; the endpoint bound to it holds an Arc to us so is closed already.
        let ret = unsafe { sys::fabcoll_fi_close(addr_of_mut!((*self.ptr).fid)) };
        if let Err(e) = check(ret, "fi_close(cq)") {
            tracing::warn!("{e}");
        }
    }
}

/// An address vector (`FI_AV_TABLE`: peers get indices 0, 1, … in insertion order).
pub(crate) struct Av {
    ptr: *mut sys::fid_av,
    domain: Arc<Domain>,
}

// SAFETY: all calls take the domain lock.
unsafe impl Send for Av {}
// SAFETY: as above.
unsafe impl Sync for Av {}

impl Av {
    pub(crate) fn open(domain: &Arc<Domain>, count: usize) -> Result<Arc<Av>, OfiError> {
        let mut attr = sys::fi_av_attr { type_: sys::fi_av_type_FI_AV_TABLE, count, ..Default::default() };
        let mut ptr = ptr::null_mut();
        let _g = domain.lock();
        // SAFETY: domain open, attr valid for the call.
        check(unsafe { sys::fabcoll_fi_av_open(domain.ptr, &mut attr, &mut ptr, ptr::null_mut()) }, "fi_av_open")?;
        Ok(Arc::new(Av { ptr, domain: domain.clone() }))
    }

    /// Inserts one address blob (from `fi_getname`), returns its `fi_addr_t`.
    pub(crate) fn insert(&self, addr: &[u8]) -> Result<u64, OfiError> {
        let mut fi_addr: u64 = u64::MAX;
        let _g = self.domain.lock();
        // SAFETY: addr points to one provider address (the provider reads addrlen bytes of its format).
        let ret =
            unsafe { sys::fabcoll_fi_av_insert(self.ptr, addr.as_ptr().cast(), 1, &mut fi_addr, 0, ptr::null_mut()) };
        let n = check(ret, "fi_av_insert")?;
        if n != 1 || fi_addr == u64::MAX {
            return Err(OfiError::Unsupported(format!("fi_av_insert inserted {n} of 1 addresses (bad address blob?)")));
        }
        Ok(fi_addr)
    }
}

impl Drop for Av {
    fn drop(&mut self) {
        let _g = self.domain.lock();
        // SAFETY: opened by fi_av_open; the bound endpoint holds an Arc to us so is closed already.
        let ret = unsafe { sys::fabcoll_fi_close(addr_of_mut!((*self.ptr).fid)) };
        if let Err(e) = check(ret, "fi_close(av)") {
            tracing::warn!("{e}");
        }
    }
}

/// An enabled `FI_EP_RDM` endpoint bound to one CQ (transmit + receive) and one AV.
pub(crate) struct Ep {
    ptr: *mut sys::fid_ep,
    cq: Arc<Cq>,
    av: Arc<Av>,
    domain: Arc<Domain>,
    /// Buffers and contexts that posted operations may still point into: freed only after `fi_close`.
    keep: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

// SAFETY: all calls take the domain lock.
unsafe impl Send for Ep {}
// SAFETY: as above.
unsafe impl Sync for Ep {}

impl Ep {
    pub(crate) fn open(domain: &Arc<Domain>, cq: &Arc<Cq>, av: &Arc<Av>) -> Result<Arc<Ep>, OfiError> {
        let mut ptr = ptr::null_mut();
        {
            let _g = domain.lock();
            // SAFETY: domain open; info is the one the domain was opened from.
            let ret = unsafe { sys::fabcoll_fi_endpoint(domain.ptr, domain.info().ptr(), &mut ptr, ptr::null_mut()) };
            check(ret, "fi_endpoint")?;
        }
        // Wrap first so that an error below still closes the endpoint: its drop takes the domain lock, so the
        // lock is released before an error returns (a failed fi_enable, e.g. shm's "file in use", hung the rank).
        let ep = Ep { ptr, cq: cq.clone(), av: av.clone(), domain: domain.clone(), keep: Mutex::new(Vec::new()) };
        let enabled = {
            let _g = domain.lock();
            // SAFETY: ep, cq, av are open objects of this domain.
            unsafe {
                check(
                    sys::fabcoll_fi_ep_bind(ptr, addr_of_mut!((*cq.ptr).fid), sys::FI_TRANSMIT | sys::FI_RECV),
                    "fi_ep_bind(cq)",
                )
                .and_then(|_| check(sys::fabcoll_fi_ep_bind(ptr, addr_of_mut!((*av.ptr).fid), 0), "fi_ep_bind(av)"))
                .and_then(|_| check(sys::fabcoll_fi_enable(ptr), "fi_enable"))
            }
        };
        enabled?;
        Ok(Arc::new(ep))
    }

    /// Keeps `b` alive until the endpoint is closed (its `Drop` closes the fid before dropping fields), for
    /// memory that posted receives or in-flight operations may still reference.
    pub(crate) fn keep_until_closed(&self, b: Box<dyn std::any::Any + Send>) {
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).push(b);
    }

    pub(crate) fn cq(&self) -> &Arc<Cq> {
        &self.cq
    }

    pub(crate) fn av(&self) -> &Arc<Av> {
        &self.av
    }

    /// The endpoint's address blob (`fi_getname`), to be inserted into peers' AVs.
    pub(crate) fn name(&self) -> Result<Vec<u8>, OfiError> {
        let mut buf = vec![0u8; 128];
        loop {
            let mut len = buf.len();
            let _g = self.domain.lock();
            // SAFETY: buf has len writable bytes; len is updated to the needed size.
            let ret =
                unsafe { sys::fabcoll_fi_getname(addr_of_mut!((*self.ptr).fid), buf.as_mut_ptr().cast(), &mut len) };
            if ret == -(sys::FI_ETOOSMALL as i32) && len > buf.len() {
                buf.resize(len, 0);
                continue;
            }
            check(ret, "fi_getname")?;
            buf.truncate(len);
            return Ok(buf);
        }
    }

    /// `fi_writedata` (with `data = Some`) or `fi_write`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unmodified until the completion carrying `ctx` is read;
    /// `ctx` must point to a live `fi_context2` until then; `desc` must belong to a MR covering the buffer
    /// (or be NULL when the provider does not need `FI_MR_LOCAL`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        data: Option<u64>,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> Result<(), OfiError> {
        let _g = self.domain.lock();
        // SAFETY: the caller guarantees buffer, desc and context validity (see above).
        let ret = unsafe {
            match data {
                Some(d) => sys::fabcoll_fi_writedata(self.ptr, buf.cast(), len, desc, d, dest, addr, key, ctx),
                None => sys::fabcoll_fi_write(self.ptr, buf.cast(), len, desc, dest, addr, key, ctx),
            }
        };
        check(ret as i64, if data.is_some() { "fi_writedata" } else { "fi_write" }).map(|_| ())
    }

    /// `fi_inject_writedata` (with `data = Some`) or `fi_inject_write`: the provider copies the `len <= inject_size`
    /// bytes before returning and reports no completion.
    ///
    /// # Safety
    /// `buf..buf+len` must be readable for the duration of the call.
    pub(crate) unsafe fn inject_write(
        &self,
        buf: *const u8,
        len: usize,
        data: Option<u64>,
        dest: u64,
        addr: u64,
        key: u64,
    ) -> Result<(), OfiError> {
        let _g = self.domain.lock();
        // SAFETY: the caller guarantees the buffer for the call; inject copies it before returning.
        let ret = unsafe {
            match data {
                Some(d) => sys::fabcoll_fi_inject_writedata(self.ptr, buf.cast(), len, d, dest, addr, key),
                None => sys::fabcoll_fi_inject_write(self.ptr, buf.cast(), len, dest, addr, key),
            }
        };
        check(ret as i64, if data.is_some() { "fi_inject_writedata" } else { "fi_inject_write" }).map(|_| ())
    }

    /// `fi_tsend`.
    ///
    /// # Safety
    /// As for [`Ep::write`]: buffer, desc and context valid until the send's completion.
    pub(crate) unsafe fn tsend(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        tag: u64,
        ctx: *mut c_void,
    ) -> Result<(), OfiError> {
        let _g = self.domain.lock();
        // SAFETY: the caller guarantees validity until completion.
        let ret = unsafe { sys::fabcoll_fi_tsend(self.ptr, buf.cast(), len, desc, dest, tag, ctx) };
        check(ret as i64, "fi_tsend").map(|_| ())
    }

    /// `fi_trecv` from any source matching any tag.
    ///
    /// # Safety
    /// `buf..buf+len` writable and `ctx` live until the receive completes or the endpoint is closed.
    pub(crate) unsafe fn trecv_any(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: *mut c_void,
    ) -> Result<(), OfiError> {
        let _g = self.domain.lock();
        // SAFETY: the caller guarantees validity until completion.
        let ret = unsafe { sys::fabcoll_fi_trecv(self.ptr, buf.cast(), len, desc, u64::MAX, 0, u64::MAX, ctx) };
        check(ret as i64, "fi_trecv").map(|_| ())
    }
}

impl Drop for Ep {
    fn drop(&mut self) {
        let _g = self.domain.lock();
        // SAFETY: opened by fi_endpoint; MRs bound to it hold an Arc to us so are closed already. Posted
        // receives are cancelled by the close; their buffers are dropped after this (field order of owners).
        let ret = unsafe { sys::fabcoll_fi_close(addr_of_mut!((*self.ptr).fid)) };
        if let Err(e) = check(ret, "fi_close(ep)") {
            tracing::warn!("{e}");
        }
    }
}

/// A registered memory region; deregistered (`fi_close`) on drop.
pub(crate) struct Mr {
    ptr: *mut sys::fid_mr,
    key: u64,
    desc: *mut c_void,
    ep: Arc<Ep>,
}

// SAFETY: all calls take the domain lock; desc is an opaque provider handle.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `buf..buf+len` with `access` (`FI_SEND | FI_REMOTE_WRITE | …`) and `requested_key` (ignored
    /// under `FI_MR_PROV_KEY`),
    /// binding it to `ep` when the provider requires `FI_MR_ENDPOINT`.
    ///
    /// # Safety
    /// The memory must stay allocated until the returned `Mr` is dropped.
    pub(crate) unsafe fn register(
        ep: &Arc<Ep>,
        buf: *const u8,
        len: usize,
        access: u64,
        requested_key: u64,
        mr_mode: u64,
    ) -> Result<Mr, OfiError> {
        let mut ptr = ptr::null_mut();
        let d = &ep.domain;
        let g = d.lock();
        // SAFETY: the caller keeps the memory alive for the MR's lifetime; domain is open.
        let ret = unsafe {
            sys::fabcoll_fi_mr_reg(d.ptr, buf.cast(), len, access, 0, requested_key, 0, &mut ptr, ptr::null_mut())
        };
        check(ret, "fi_mr_reg")?;
        // SAFETY: ptr is the MR just registered.
        let (key, desc) = unsafe { (sys::fabcoll_fi_mr_key(ptr), sys::fabcoll_fi_mr_desc(ptr)) };
        let mr = Mr { ptr, key, desc, ep: ep.clone() };
        let bound = if mr_mode & sys::FI_MR_ENDPOINT != 0 {
            // SAFETY: mr and ep are open objects of the same domain.
            unsafe {
                check(sys::fabcoll_fi_mr_bind(ptr, addr_of_mut!((*ep.ptr).fid), 0), "fi_mr_bind")
                    .and_then(|_| check(sys::fabcoll_fi_mr_enable(ptr), "fi_mr_enable"))
            }
        } else {
            Ok(0)
        };
        // Released before an error drops `mr`, whose drop takes the lock (as in `Ep::open`).
        drop(g);
        bound?;
        if key == super::FI_KEY_NOTAVAIL {
            return Err(OfiError::Unsupported("provider returned FI_KEY_NOTAVAIL (raw keys are not supported)".into()));
        }
        Ok(mr)
    }

    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.desc
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let _g = self.ep.domain.lock();
        // SAFETY: registered by fi_mr_reg, closed once.
        let ret = unsafe { sys::fabcoll_fi_close(addr_of_mut!((*self.ptr).fid)) };
        if let Err(e) = check(ret, "fi_close(mr)") {
            tracing::warn!("{e}");
        }
    }
}
