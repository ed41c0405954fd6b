//! Registration cache for user buffers, keyed by virtual address range.
//!
//! Correctness under free-and-reuse: an entry covers `[addr, addr+len)` of this process's address
//! space. On backends whose registration is a name for a virtual range and pins nothing — `local`,
//! `shm` (the peer copies with `process_vm_writev` / through the same mapping), `tcp` (the receiver
//! copies from its socket into the address), and the libfabric
//! providers that move data through the CPU (`tcp`, `net`, `sockets`, `udp`, `shm`) — a buffer freed and
//! reallocated at the same address is still correctly described by the old entry, so the cache is
//! enabled there. Providers that pin pages (`verbs`, `efa`, `cxi`, …) would keep the OLD physical
//! pages after a free/realloc, so the cache is disabled for them: user buffers are registered per
//! call and deregistered when the call ends (`comm.alloc` / `comm.register` buffers bypass this).
//!
//! Peers only ever write into ranges the executor granted for a live collective whose buffer the
//! caller has lent, so a cached entry for freed memory is never written. When a collective fails,
//! the entries overlapping its buffers are evicted (deregistered) so that no late write can land
//! in memory returned to the caller.
//!
//! An entry is offered to the endpoint as reused ([`Endpoint::hint_reused`]: on shm its huge
//! pages) at every `reused_after`-th call that uses it: a one-time cost that a buffer used once
//! or twice should not pay, and again later, since the program may have freed the memory and
//! mapped new memory at the same address (a range already backed costs the kernel microseconds).

use fabcoll_fabric::{Access, Caps, Endpoint, Mr};

use crate::error::Result;

struct Entry {
    addr: usize,
    len: usize,
    mr: Mr,
    used: u64,
    /// Calls that used it.
    uses: u32,
}

impl Entry {
    /// Counts a call that uses this entry, and hints it as reused at every `reused_after`-th.
    fn count_use(&mut self, ep: &mut dyn Endpoint, reused_after: u32) {
        self.uses = self.uses.saturating_add(1);
        if reused_after > 0 && self.uses.is_multiple_of(reused_after) {
            ep.hint_reused(&self.mr);
        }
    }
}

pub(crate) struct MrCache {
    enabled: bool,
    cap: usize,
    /// Every this many uses an entry is hinted as reused (0: never).
    reused_after: u32,
    tick: u64,
    entries: Vec<Entry>,
    pub hits: u64,
    pub registrations: u64,
}

/// Whether registration on this backend is address-based and pins nothing (see module doc).
pub(crate) fn cache_safe(caps: &Caps) -> bool {
    match caps.backend {
        "local" | "shm" | "tcp" => true,
        // The core provider is the first of a layered name like "tcp;ofi_rxm".
        "ofi" => matches!(caps.provider.split(';').next().unwrap_or(""), "tcp" | "net" | "sockets" | "udp" | "shm"),
        _ => false,
    }
}

impl MrCache {
    pub fn new(enabled: bool, cap: usize, reused_after: u32) -> MrCache {
        MrCache { enabled, cap, reused_after, tick: 0, entries: Vec::new(), hits: 0, registrations: 0 }
    }

    /// A registration covering `[ptr, ptr+len)` with at least `access` (remote write covers local).
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must be valid for reads (and writes if `access` is remote-write) until the
    /// collective that asked for it has finished or has been aborted (which evicts it).
    pub unsafe fn get(&mut self, ep: &mut dyn Endpoint, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        let addr = ptr as usize;
        self.tick += 1;
        if self.enabled {
            if let Some(e) = self
                .entries
                .iter_mut()
                .find(|e| e.addr <= addr && addr + len <= e.addr + e.len && e.mr.access().contains(access))
            {
                e.used = self.tick;
                e.count_use(ep, self.reused_after);
                self.hits += 1;
                return Ok(e.mr.clone());
            }
        }
        // SAFETY: validity for the collective's duration is the caller's promise (above).
        let mr = unsafe { ep.register(ptr, len, access)? };
        self.registrations += 1;
        if self.enabled {
            if self.entries.len() >= self.cap {
                if let Some(i) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used).map(|(i, _)| i) {
                    self.entries.swap_remove(i);
                }
            }
            let mut e = Entry { addr, len, mr: mr.clone(), used: self.tick, uses: 0 };
            e.count_use(ep, self.reused_after);
            self.entries.push(e);
        }
        Ok(mr)
    }

    /// Drops every entry overlapping `[ptr, ptr+len)` (deregistration happens when the last clone
    /// of each goes).
    pub fn evict(&mut self, ptr: *const u8, len: usize) {
        let (a, b) = (ptr as usize, ptr as usize + len);
        self.entries.retain(|e| !(e.addr < b && a < e.addr + e.len));
    }
}
