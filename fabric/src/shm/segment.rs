//! Layout of one rank's shared segment (a memfd every rank of the node maps): header with the
//! futex doorbell, the key table of live registrations, and one inbound SPSC queue per source rank.
//!
//! Key slots: `state = generation << 32 | writers_in_flight`; odd generation = live. A writer enters
//! with a CAS that requires its key's generation (so it fails once deregistration bumped it), reads
//! address/length, copies, and leaves; deregistration bumps the generation to even and then waits
//! until no writer is in flight. So after `Mr` drop returns, no write lands in the old memory, and a
//! stale key never matches a reused slot (generation differs; it would take 2^31 reuses of the same
//! slot while a descriptor is held to alias).

use std::mem::size_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::queue::Spsc;
use super::sys::Mmap;
use crate::error::{Error, Result};

pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"fabshm01");
/// Slots per inbound queue.
pub(crate) const SLOTS: usize = 32;
/// Control-message payload per slot (slot = 4 KiB).
pub(crate) const PAYLOAD: usize = 4096 - 24;
/// Registrations per rank.
pub(crate) const NKEYS: usize = 4096;

pub(crate) const KIND_CTRL: u32 = 1;
pub(crate) const KIND_WRITE: u32 = 2;

/// One queue slot: a control message or a write notification.
#[repr(C)]
pub(crate) struct Msg {
    pub(crate) kind: u32,
    pub(crate) len: u32,
    pub(crate) tag: u64,
    pub(crate) imm: u64,
    pub(crate) data: [u8; PAYLOAD],
}

pub(crate) type Queue = Spsc<Msg, SLOTS>;

/// Segment header.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) job: AtomicU64,
    pub(crate) pid: AtomicU32,
    pub(crate) rank: AtomicU32,
    pub(crate) size: AtomicU32,
    /// Futex word: bumped after every push into one of this rank's queues.
    pub(crate) doorbell: CachePadded<AtomicU32>,
    /// Number of this rank's threads blocked (or about to block) on `doorbell`.
    pub(crate) sleepers: CachePadded<AtomicU32>,
}

/// One registration as peers see it.
#[repr(C)]
pub(crate) struct KeySlot {
    pub(crate) state: AtomicU64,
    pub(crate) addr: AtomicU64,
    pub(crate) len: AtomicU64,
    /// access bits | has_fd << 8 | fd << 32 (fd of an `alloc`ated memfd, for `map_remote`).
    pub(crate) aux: AtomicU64,
}

const HEADER_SPACE: usize = 4096;
const KEYS_OFF: usize = HEADER_SPACE;
const QUEUES_OFF: usize = KEYS_OFF + NKEYS * size_of::<KeySlot>();

const _: () = assert!(size_of::<Header>() <= HEADER_SPACE);
const _: () = assert!(size_of::<Msg>() == 4096);
const _: () = assert!(QUEUES_OFF.is_multiple_of(std::mem::align_of::<Queue>()));

/// Bytes of a segment for a group of `size` ranks.
pub(crate) fn segment_len(size: usize) -> usize {
    QUEUES_OFF + size * size_of::<Queue>()
}

/// A mapped segment.
#[derive(Debug)]
pub(crate) struct Segment {
    map: Mmap,
    size: usize,
}

impl Segment {
    /// Wraps a mapping; checks it is large enough for `size` ranks.
    pub(crate) fn new(map: Mmap, size: usize) -> Result<Segment> {
        if map.len() < segment_len(size) {
            return Err(Error::Address(format!(
                "shared segment has {} bytes, a group of {size} needs {}",
                map.len(),
                segment_len(size)
            )));
        }
        Ok(Segment { map, size })
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned and at least `segment_len` long; zeroed or
        // initialised memory is a valid `Header` (atomics only); it lives as long as `self`.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    /// Slot `idx` (< NKEYS) of the key table.
    pub(crate) fn key(&self, idx: usize) -> Option<&KeySlot> {
        if idx >= NKEYS {
            return None;
        }
        // SAFETY: in bounds (idx < NKEYS, length checked in `new`), aligned (KEYS_OFF and the slot
        // size are multiples of 8), atomics only.
        Some(unsafe { &*(self.map.as_ptr().add(KEYS_OFF + idx * size_of::<KeySlot>()) as *const KeySlot) })
    }

    /// The queue carrying messages from rank `from` to this segment's owner.
    pub(crate) fn queue(&self, from: usize) -> Option<&Queue> {
        if from >= self.size {
            return None;
        }
        // SAFETY: in bounds (from < size, length checked in `new`), aligned (QUEUES_OFF and the
        // queue size are multiples of its alignment, mapping is page-aligned); zeroed memory is an
        // empty queue (module doc of `queue`).
        Some(unsafe { &*(self.map.as_ptr().add(QUEUES_OFF + from * size_of::<Queue>()) as *const Queue) })
    }

    /// Wake the owner if it sleeps: call after every push into one of its queues.
    pub(crate) fn ring(&self) {
        let h = self.header();
        h.doorbell.fetch_add(1, Ordering::SeqCst);
        if h.sleepers.load(Ordering::SeqCst) > 0 {
            super::sys::futex_wake(&h.doorbell);
        }
    }
}

impl KeySlot {
    /// Writer: enter the registration named by `key` (its generation must be live).
    pub(crate) fn enter(&self, key: u64) -> bool {
        let gen = key >> 32;
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if s >> 32 != gen || gen & 1 == 0 || s & 0xffff_ffff == 0xffff_ffff {
                return false;
            }
            match self.state.compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Writer: leave after the copy.
    pub(crate) fn leave(&self) {
        self.state.fetch_sub(1, Ordering::Release);
    }

    /// Owner: publish a registration in a retired slot (even generation, no writer in flight —
    /// slots whose `retire` timed out are never reused); returns the key.
    pub(crate) fn publish(&self, idx: usize, addr: u64, len: u64, aux: u64) -> u64 {
        let gen = (self.state.load(Ordering::Acquire) >> 32) + 1; // even + 1: live, at most 2^32 - 1
        self.addr.store(addr, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.aux.store(aux, Ordering::Relaxed);
        self.state.store(gen << 32, Ordering::Release);
        gen << 32 | idx as u64
    }

    /// Owner: retire the slot (new writers fail) and wait until writers in flight have left.
    /// Returns false if they did not within `timeout` (a writer died or stalls mid-copy).
    pub(crate) fn retire(&self, timeout: Duration) -> bool {
        let s = self.state.fetch_add(1 << 32, Ordering::AcqRel); // odd -> even generation
        if s & 0xffff_ffff == 0 {
            return true;
        }
        let start = Instant::now();
        let mut n = 0u32;
        while self.state.load(Ordering::Acquire) & 0xffff_ffff != 0 {
            if start.elapsed() > timeout {
                return false;
            }
            n += 1;
            if n < 100 {
                std::hint::spin_loop();
            } else if n < 200 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        true
    }
}

/// FNV-1a of the job name (segments of another job are rejected).
pub(crate) fn job_hash(job: &str) -> u64 {
    job.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x1000_0000_01b3))
}
