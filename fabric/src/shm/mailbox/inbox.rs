//! One inbox's protocol (the parent module's doc describes it), written once over the inbox's
//! memory ([`InboxMemory`]) and its ring size: the mailbox runs it on mapped shared memory
//! ([`RawInbox`]) with the production ring, the loom models on loom cells with a ring of a few lines.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{record_len, MAX_MESSAGE};

/// The control line before each ring (its first word is the owner's published head).
pub(super) const CONTROL: usize = 64;
/// Record alignment.
pub(super) const LINE: usize = 64;
/// A record's header: tag, length.
pub(super) const HEADER: usize = 16;
/// Tag of a consumed record (owner).
pub(super) const CONSUMED: u64 = 2;
/// Tag of the filler before a wrap (sender).
pub(super) const WRAP: u64 = 4;

/// Access to one inbox's words. Offsets are bytes from the ring's start. The control word and the
/// first word of every line (a tag, a marker, 0, or payload in a record's later lines) are
/// accessed atomically; record lengths and payloads are plain memory, ordered by the tags and the head.
pub(super) trait InboxMemory {
    /// Loads the owner's published head.
    fn load_head(&self, order: Ordering) -> u64;
    /// Publishes the owner's head.
    fn store_head(&self, head: u64, order: Ordering);
    /// Loads the first word of the line at `off`.
    fn load_line(&self, off: usize, order: Ordering) -> u64;
    /// Stores the first word of the line at `off`.
    fn store_line(&self, off: usize, word: u64, order: Ordering);
    /// Writes the length word of the record at `off`.
    ///
    /// # Safety
    /// The record is the sender's (in free space, not yet tagged).
    unsafe fn write_len(&self, off: usize, len: u64);
    /// Reads the length word of the record at `off`.
    ///
    /// # Safety
    /// The record's tag was loaded with Acquire (or the record is consumed by the caller).
    unsafe fn read_len(&self, off: usize) -> u64;
    /// Copies `n` bytes from `src` to the ring at `off` (8-byte aligned).
    ///
    /// # Safety
    /// `src` is readable for `n` bytes; `[off, off + n)` lies in a record the sender owns.
    unsafe fn write_bytes(&self, off: usize, src: *const u8, n: usize);
}

/// An inbox in mapped shared memory: the control line at `base`, the ring after it.
#[derive(Clone, Copy)]
pub(super) struct RawInbox {
    base: *mut u8,
}

impl RawInbox {
    /// # Safety
    /// `base` is 8-byte aligned and starts `CONTROL` + ring bytes of memory that stay mapped
    /// while the returned value (or anything made from it) is used.
    #[inline]
    pub(super) unsafe fn new(base: *mut u8) -> RawInbox {
        RawInbox { base }
    }

    /// Start of the control line.
    #[cfg(all(test, not(loom)))]
    pub(super) fn base(&self) -> *mut u8 {
        self.base
    }

    /// The payload of the record at `off`.
    #[inline]
    pub(super) fn payload(&self, off: usize) -> *const u8 {
        // SAFETY: a record's header lies inside the ring (`Inbox::find` checked its length).
        unsafe { self.base.add(CONTROL + off + HEADER) }
    }

    #[inline]
    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is 8-byte aligned and inside the inbox (the control word or a line
        // start); the memory outlives `self` (`RawInbox::new`).
        unsafe { AtomicU64::from_ptr(self.base.add(at).cast()) }
    }
}

impl InboxMemory for RawInbox {
    #[inline]
    fn load_head(&self, order: Ordering) -> u64 {
        self.word(0).load(order)
    }

    #[inline]
    fn store_head(&self, head: u64, order: Ordering) {
        self.word(0).store(head, order)
    }

    #[inline]
    fn load_line(&self, off: usize, order: Ordering) -> u64 {
        self.word(CONTROL + off).load(order)
    }

    #[inline]
    fn store_line(&self, off: usize, word: u64, order: Ordering) {
        self.word(CONTROL + off).store(word, order)
    }

    #[inline]
    unsafe fn write_len(&self, off: usize, len: u64) {
        // SAFETY: the record's second word, in the ring, the sender's (caller).
        unsafe { self.base.add(CONTROL + off + 8).cast::<u64>().write(len) }
    }

    #[inline]
    unsafe fn read_len(&self, off: usize) -> u64 {
        // SAFETY: the record's second word, written before the tag the caller acquired.
        unsafe { self.base.add(CONTROL + off + 8).cast::<u64>().read() }
    }

    #[inline]
    unsafe fn write_bytes(&self, off: usize, src: *const u8, n: usize) {
        // SAFETY: the caller's promise: readable source, destination inside the sender's record.
        unsafe { crate::copy::copy_bulk(self.base.add(CONTROL + off), src, n) }
    }
}

/// The orderings the protocol rests on. The mailbox uses [`Orderings::PROTOCOL`]; in loom builds
/// a model may run the protocol with a weaker one (a planted bug) to check that loom catches it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Orderings {
    /// The sender's store of a tag or wrap marker: its record's bytes are visible with it.
    pub tag_store: Ordering,
    /// The owner's load of a tag in `find`.
    pub tag_load: Ordering,
    /// The owner's store of its head: its reads and clearing of the lines come before their reuse.
    pub head_store: Ordering,
    /// The sender's load of the owner's head.
    pub head_load: Ordering,
    /// The owner clears the lines it passed before it publishes its head (not after).
    pub clear_before_publish: bool,
}

impl Orderings {
    /// The protocol's orderings.
    pub const PROTOCOL: Orderings = Orderings {
        tag_store: Ordering::Release,
        tag_load: Ordering::Acquire,
        head_store: Ordering::Release,
        head_load: Ordering::Acquire,
        clear_before_publish: true,
    };
}

/// The sender's private state for one inbox.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SenderState {
    /// Next write position (absolute, in bytes).
    pub tail: u64,
    /// The owner's head as last read (reread only when the space it leaves is short).
    pub head_seen: u64,
}

/// The owner's private state for one inbox.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OwnerState {
    /// First unconsumed position.
    pub head: u64,
    /// The head last stored in the control word.
    pub published: u64,
}

/// A record [`Inbox::find`] found: its ring offset, payload length and position.
#[derive(Clone, Copy, Debug)]
pub(super) struct Record {
    pub off: usize,
    pub len: usize,
    pub pos: u64,
    /// The record's whole tag.
    pub tag: u64,
}

/// One inbox: the protocol over memory `M` with a ring of `RING` bytes whose owner publishes its
/// head every `PUBLISH` bytes.
pub(super) struct Inbox<M, const RING: usize, const PUBLISH: u64> {
    mem: M,
    #[cfg(loom)]
    orderings: Orderings,
}

impl<M: InboxMemory, const RING: usize, const PUBLISH: u64> Inbox<M, RING, PUBLISH> {
    #[inline]
    pub(super) fn new(mem: M) -> Self {
        Inbox {
            mem,
            #[cfg(loom)]
            orderings: Orderings::PROTOCOL,
        }
    }

    /// The protocol with other orderings (loom models of planted bugs).
    #[cfg(loom)]
    pub(super) fn with_orderings(mem: M, orderings: Orderings) -> Self {
        Inbox { mem, orderings }
    }

    #[cfg(not(loom))]
    #[inline(always)]
    fn orderings(&self) -> Orderings {
        Orderings::PROTOCOL
    }

    #[cfg(loom)]
    fn orderings(&self) -> Orderings {
        self.orderings
    }

    #[inline]
    pub(super) fn memory(&self) -> &M {
        &self.mem
    }

    #[inline(always)]
    fn ring_offset(pos: u64) -> usize {
        (pos % RING as u64) as usize
    }

    /// Sender: stores a message (`len` bytes at `src`) under `tag`; false if the ring is full for
    /// now (nothing was written).
    ///
    /// # Safety
    /// `src` is readable for `len` bytes; the record of `len` bytes and a wrap filler fit the ring.
    #[inline]
    pub(super) unsafe fn send(&self, st: &mut SenderState, tag: u64, src: *const u8, len: usize) -> bool {
        let ord = self.orderings();
        let mut pos = st.tail;
        let size = record_len(len);
        let off = Self::ring_offset(pos);
        let filler = if off + size > RING { RING - off } else { 0 };
        let end = pos + (filler + size) as u64;
        if end - st.head_seen > RING as u64 {
            // Acquire: the owner cleared the lines before it published this head.
            st.head_seen = self.mem.load_head(ord.head_load);
            if end - st.head_seen > RING as u64 {
                return false;
            }
        }
        if filler > 0 {
            self.mem.store_line(off, WRAP, ord.tag_store);
            pos += filler as u64;
        }
        let off = Self::ring_offset(pos);
        // The lines after the first are written first, then the first line's length, payload head
        // and tag back to back, so that the line is taken from the polling owner once.
        let head = len.min(LINE - HEADER);
        // SAFETY: the record [off, off + size) lies in the ring (a record never crosses its end)
        // and in free space (`tail - head` checked): the owner reads it only after the tag below.
        unsafe {
            if len > head {
                self.mem.write_bytes(off + LINE, src.add(head), len - head);
            }
            self.mem.write_len(off, len as u64);
            self.mem.write_bytes(off + HEADER, src, head);
        }
        self.mem.store_line(off, tag, ord.tag_store);
        st.tail = pos + size as u64;
        true
    }

    /// The payload length and ring size of the published (or consumed) record at ring offset
    /// `off`; `None` for a length that would take the record past the ring's end (a sender never
    /// writes one: it would be corrupt memory, not a message).
    #[inline]
    fn record_at(&self, off: usize) -> Option<(usize, usize)> {
        // SAFETY: a line start in the ring whose tag the caller loaded with Acquire (or consumed).
        let len = unsafe { self.mem.read_len(off) };
        let len = usize::try_from(len).ok().filter(|&l| l <= MAX_MESSAGE)?;
        let size = record_len(len);
        (off + size <= RING).then_some((len, size))
    }

    /// Owner: the record whose tag equals `tag` in the bits of `mask`, if it has arrived (other
    /// records are skipped, not consumed). `Err(off)`: the record at ring offset `off` has a
    /// length that does not fit the ring.
    #[inline]
    pub(super) fn find(&self, st: &OwnerState, tag: u64, mask: u64) -> Result<Option<Record>, usize> {
        let ord = self.orderings();
        let head = st.head;
        let mut pos = head;
        while pos - head < RING as u64 {
            let off = Self::ring_offset(pos);
            let t = self.mem.load_line(off, ord.tag_load);
            if t == 0 {
                return Ok(None);
            }
            if t == WRAP {
                pos += (RING - off) as u64;
                continue;
            }
            let (len, size) = self.record_at(off).ok_or(off)?;
            if (t ^ tag) & mask == 0 {
                return Ok(Some(Record { off, len, pos, tag: t }));
            }
            pos += size as u64;
        }
        Ok(None)
    }

    /// Owner: the tag of the oldest record not consumed yet (0 if none has arrived).
    pub(super) fn oldest(&self, st: &OwnerState) -> u64 {
        let ord = self.orderings();
        let off = Self::ring_offset(st.head);
        match self.mem.load_line(off, ord.tag_load) {
            WRAP => self.mem.load_line(0, ord.tag_load),
            t => t,
        }
    }

    /// Owner: gives back the record at `pos` (from [`Inbox::find`]), moves the head past the
    /// consumed prefix (and any wrap filler in it) clearing its lines, and publishes the head
    /// every `PUBLISH` bytes.
    #[inline]
    pub(super) fn consume(&self, st: &mut OwnerState, pos: u64) {
        let ord = self.orderings();
        self.mem.store_line(Self::ring_offset(pos), CONSUMED, Ordering::Relaxed);
        let start = st.head;
        let mut head = start;
        loop {
            let off = Self::ring_offset(head);
            let size = match self.mem.load_line(off, Ordering::Relaxed) {
                WRAP => RING - off,
                CONSUMED => match self.record_at(off) {
                    Some((_, size)) => size,
                    None => break,
                },
                _ => break,
            };
            if ord.clear_before_publish {
                for line in (off..off + size).step_by(LINE) {
                    self.mem.store_line(line, 0, Ordering::Relaxed);
                }
            }
            head += size as u64;
        }
        if head == start {
            return;
        }
        st.head = head;
        if head - st.published >= PUBLISH {
            st.published = head;
            // Release: the cleared lines are visible before the sender may reuse them.
            self.mem.store_head(head, ord.head_store);
        }
        if !ord.clear_before_publish {
            for line in (start..head).step_by(LINE) {
                self.mem.store_line(Self::ring_offset(line), 0, Ordering::Relaxed);
            }
        }
    }
}
