//! Layout of one rank's shared segment (a memfd every rank of the node maps): header with the
//! futex doorbell, the key table of live registrations, and one inbound SPSC queue per source rank.
//! Key-slot protocol: see [`super::keys`].

use std::mem::size_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

pub(crate) use super::keys::KeySlot;
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
    /// Set to 1 when the endpoint is dropped: its process left in an orderly way (a process that
    /// is gone with this still 0 died or exited without closing its endpoint).
    pub(crate) closed: AtomicU32,
    /// Where the owner runs, for peers deciding between spinning and yielding: the CPU it last
    /// ran on (low 32 bits, [`NO_CPU`] before it is known) and [`IDLE`] while it yields or
    /// sleeps. One word, written by the owner only, around its yields and sleeps.
    pub(crate) presence: CachePadded<AtomicU64>,
}

/// `Header::presence` bit: the owner yields or sleeps.
pub(crate) const IDLE: u64 = 1 << 32;
/// `Header::presence` CPU before the owner published one.
pub(crate) const NO_CPU: u64 = 0xffff_ffff;

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
