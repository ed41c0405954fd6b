//! Mailboxes of the direct path (see [`super::direct`]): per communicator, every rank owns one
//! shared-memory region with an inbox per sender, and its peers map that region and store their
//! messages straight into it — no notification queue, no slot credits, no completion. This is
//! Open MPI's "fast box" (vader BTL) and MPICH's ch4 shm "eager cells", applied to whole small
//! collectives: one cache line carries a small message and its header, and the receiver finds it
//! by polling that line.
//!
//! An inbox is a control line (the owner's consumed position, `head`, which the sender reads for
//! flow control) and a byte ring of [`RING`] bytes. A record starts on a 64-byte line: an 8-byte
//! tag, stored last with release order (so the payload is visible once the tag is), the payload
//! length, then the payload. Tags are odd (`1 | k << 1 | seq << 32`: the call's sequence number on
//! the communicator and the message index `k` of the schedule); the even values are the owner's
//! and the sender's markers ([`CONSUMED`], [`WRAP`]) and 0 means "nothing here yet".
//!
//! The owner consumes records in any order (a schedule's Recv steps may become ready in any
//! order), marks them [`CONSUMED`], and moves `head` past the consumed prefix, clearing the first
//! word of every line it passes: a line's first word is a record start in some later lap, which
//! must read 0 until the sender writes it. It publishes `head` every [`PUBLISH`] bytes, not per
//! record. The sender keeps its own `tail` and writes only while `tail - head` leaves room; it
//! rereads `head` (a cache-line transfer) only when its last reading leaves too little. A record
//! that does not fit before the ring's end is preceded by a [`WRAP`] marker and starts at the
//! ring's beginning. The sender writes a record's later lines first and its first line (length,
//! payload head, tag) last, back to back: the owner polls that line, and each store to it
//! between polls would take it back. So a message costs the line transfers of its record (the
//! sender's stores, the owner's loads), plus one head transfer per 8 KiB.

use std::sync::atomic::{AtomicU64, Ordering};

use fabcoll_fabric::{Access, Endpoint, Mapping, Mr, RemoteMr};

use crate::error::{Error, Result};

/// Bytes of one inbox's ring. Enough for every schedule's messages of one call at the direct
/// limit (`ExecConfig::direct_limit`, at most [`MAX_DIRECT`]) between any two ranks with room to
/// spare: a sender that runs a few calls ahead (a bcast root) does not wait for space.
pub(crate) const RING: usize = 64 * 1024;
/// The control line before each ring.
const CONTROL: usize = 64;
const INBOX: usize = CONTROL + RING;
/// Record alignment and the header's length (tag, length).
const LINE: usize = 64;
const HEADER: usize = 16;
/// Largest direct limit: a record of this size still leaves the ring room for several.
pub(crate) const MAX_DIRECT: usize = 16 * 1024;

/// Tag of a consumed record (owner) and of the filler before a wrap (sender).
const CONSUMED: u64 = 2;
const WRAP: u64 = 4;

/// The tag of message `k` of the communicator's direct call `seq`.
pub(crate) fn tag(seq: u64, k: u32) -> u64 {
    1 | u64::from(k & 0x7fff_ffff) << 1 | (seq & 0xffff_ffff) << 32
}

/// Bytes a message of `payload` bytes takes in an inbox (header and padding included).
pub(crate) fn record_len(payload: usize) -> usize {
    (HEADER + payload).div_ceil(LINE) * LINE
}

/// A record found in an inbox: where its payload is, and its position (to consume it).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Found {
    pub payload: *const u8,
    pub len: usize,
    pub pos: u64,
}

/// This rank's inboxes and its peers' mapped regions on one communicator.
pub(crate) struct Mailbox {
    rank: usize,
    own: Mr,
    /// Peers' regions by communicator rank (`None` for this rank: its own region).
    peers: Vec<Option<Mapping>>,
    /// Next write position in each peer's inbox for this rank (absolute, in bytes).
    tail: Vec<u64>,
    /// First unconsumed position of each of this rank's inboxes.
    head: Vec<u64>,
    /// The head last stored in each inbox's control line (published every [`PUBLISH`] bytes).
    published: Vec<u64>,
    /// Each peer's head as this rank last read it (reread only when the space it leaves is short).
    head_seen: Vec<u64>,
}

/// The owner publishes its head after consuming this many bytes: a sender waiting for space
/// sees all but less than this much of the ring free, more than a record at the direct limit and
/// its wrap filler need, so waiting on an unpublished head never blocks a sender.
const PUBLISH: u64 = (RING / 8) as u64;

// SAFETY: the raw pointers are views of shared mappings kept alive by `own` and `peers`; the
// mailbox is used by one thread at a time (the communicator's direct state is behind a mutex).
unsafe impl Send for Mailbox {}

impl Mailbox {
    /// Allocates this rank's region (`p` inboxes); its descriptor goes to every peer, which then
    /// calls [`Mailbox::connect`].
    pub fn new(ep: &mut dyn Endpoint, rank: usize, p: usize) -> Result<Mailbox> {
        let own = ep.alloc(p * INBOX, Access::REMOTE_WRITE)?;
        let zeros = vec![0; p];
        Ok(Mailbox {
            rank,
            own,
            peers: Vec::new(),
            tail: zeros.clone(),
            head: zeros.clone(),
            published: zeros.clone(),
            head_seen: zeros,
        })
    }

    pub fn descriptor(&self) -> [u8; RemoteMr::WIRE_LEN] {
        self.own.remote().to_bytes()
    }

    /// Maps every peer's region from its descriptor (`descs[r]` = rank `r`'s, by communicator
    /// rank; `eps[r]` its endpoint rank).
    pub fn connect(&mut self, ep: &mut dyn Endpoint, descs: &[RemoteMr], eps: &[u32]) -> Result<()> {
        let p = self.tail.len();
        if descs.len() != p || eps.len() != p {
            return Err(Error::Protocol(format!("{} mailbox descriptors for {p} ranks", descs.len())));
        }
        let mut peers = Vec::with_capacity(p);
        for (r, d) in descs.iter().enumerate() {
            if r == self.rank {
                peers.push(None);
                continue;
            }
            if (d.len as usize) < p * INBOX {
                return Err(Error::Protocol(format!("rank {r}'s mailbox has {} bytes, not {}", d.len, p * INBOX)));
            }
            let m = ep.map_remote(eps[r] as usize, d)?;
            // SAFETY: our inbox in the peer's region lies inside the mapping (length checked).
            unsafe { fabcoll_fabric::copy::populate_write(m.as_ptr().add(self.rank * INBOX), INBOX) };
            peers.push(Some(m));
        }
        // SAFETY: our own region, p inboxes long.
        unsafe { fabcoll_fabric::copy::populate_write(self.own.as_ptr(), p * INBOX) };
        self.peers = peers;
        Ok(())
    }

    /// Rank `owner`'s inbox for messages from rank `sender` (one of them is this rank).
    fn inbox(&self, owner: usize, sender: usize) -> *mut u8 {
        let base = match self.peers.get(owner) {
            Some(Some(m)) => m.as_ptr(),
            _ => self.own.as_ptr(),
        };
        // SAFETY: the region holds p inboxes (checked in `connect`; ours by construction).
        unsafe { base.add(sender * INBOX) }
    }

    fn word(inbox: *mut u8, off: usize) -> &'static AtomicU64 {
        // SAFETY: `off` is 8-byte aligned and inside the inbox (a control word or a line start
        // in the ring); the region is page-aligned shared memory that outlives every use (it is
        // only touched while the mailbox, which keeps the mapping, is borrowed).
        unsafe { AtomicU64::from_ptr(inbox.add(off).cast()) }
    }

    /// Stores a message for `peer` (`len` bytes at `src`) under `tag`. `Ok(false)`: its inbox is
    /// full for now (the peer has not consumed enough yet); nothing was written.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes, `len` at most [`MAX_DIRECT`].
    pub unsafe fn send(&mut self, peer: usize, tag: u64, src: *const u8, len: usize) -> Result<bool> {
        debug_assert!(len <= MAX_DIRECT);
        let inbox = self.inbox(peer, self.rank);
        let mut pos = self.tail[peer];
        let size = record_len(len);
        let off = (pos % RING as u64) as usize;
        let filler = if off + size > RING { RING - off } else { 0 };
        let end = pos + (filler + size) as u64;
        if end - self.head_seen[peer] > RING as u64 {
            // Acquire: the owner cleared the lines before it published this head.
            self.head_seen[peer] = Self::word(inbox, 0).load(Ordering::Acquire);
            if end - self.head_seen[peer] > RING as u64 {
                return Ok(false);
            }
        }
        let ring = |o: usize| CONTROL + o;
        if filler > 0 {
            Self::word(inbox, ring(off)).store(WRAP, Ordering::Release);
            pos += filler as u64;
        }
        let off = (pos % RING as u64) as usize;
        // The owner polls the record's first line: the lines after it are written first, then the
        // first line's length, payload head and tag back to back, so that the line is taken from
        // the polling owner once, not once per store.
        let head = len.min(LINE - HEADER);
        // SAFETY: the record [off, off + size) lies in the ring (a record never crosses its end)
        // and in free space (`tail - head` checked): the owner reads it only after the tag below.
        unsafe {
            let rec = inbox.add(ring(off));
            if len > head {
                std::ptr::copy_nonoverlapping(src.add(head), rec.add(LINE), len - head);
            }
            rec.add(8).cast::<u64>().write(len as u64);
            std::ptr::copy_nonoverlapping(src, rec.add(HEADER), head);
        }
        Self::word(inbox, ring(off)).store(tag, Ordering::Release);
        self.tail[peer] = pos + size as u64;
        Ok(true)
    }

    /// The payload length and ring size of the published (or consumed) record at ring offset
    /// `off`; `None` for a length that would take the record past the ring's end (a sender
    /// never writes one: it would be corrupt memory, not a message).
    fn record_at(inbox: *mut u8, off: usize) -> Option<(usize, usize)> {
        // SAFETY: a line start inside the ring; the length word was written before the tag that
        // made the caller look here.
        let len = unsafe { inbox.add(CONTROL + off + 8).cast::<u64>().read() };
        let len = usize::try_from(len).ok().filter(|&l| l <= MAX_DIRECT)?;
        let size = record_len(len);
        (off + size <= RING).then_some((len, size))
    }

    /// The record with `tag` from `sender`, if it has arrived (records of later calls and other
    /// messages are skipped, not consumed). A record whose length does not fit the ring is an
    /// error, never read.
    pub fn find(&self, sender: usize, tag: u64) -> Result<Option<Found>> {
        let inbox = self.inbox(self.rank, sender);
        let head = self.head[sender];
        let mut pos = head;
        while pos - head < RING as u64 {
            let off = (pos % RING as u64) as usize;
            let t = Self::word(inbox, CONTROL + off).load(Ordering::Acquire);
            if t == 0 {
                return Ok(None);
            }
            if t == WRAP {
                pos += (RING - off) as u64;
                continue;
            }
            let (len, size) = Self::record_at(inbox, off).ok_or_else(|| {
                Error::Protocol(format!("rank {sender}'s mailbox holds a malformed record at offset {off}"))
            })?;
            if t == tag {
                // SAFETY: the payload follows the header inside the ring (`record_at`).
                return Ok(Some(Found { payload: unsafe { inbox.add(CONTROL + off + HEADER) }, len, pos }));
            }
            pos += size as u64;
        }
        Ok(None)
    }

    /// Gives back a record [`Mailbox::find`] returned (its payload must not be used after this).
    pub fn consume(&mut self, sender: usize, pos: u64) {
        let inbox = self.inbox(self.rank, sender);
        Self::word(inbox, CONTROL + (pos % RING as u64) as usize).store(CONSUMED, Ordering::Relaxed);
        // Move the head past the consumed prefix (and any wrap filler before it).
        let mut head = self.head[sender];
        let start = head;
        loop {
            let off = (head % RING as u64) as usize;
            let t = Self::word(inbox, CONTROL + off).load(Ordering::Relaxed);
            let size = match t {
                WRAP => RING - off,
                CONSUMED => match Self::record_at(inbox, off) {
                    Some((_, size)) => size,
                    None => break,
                },
                _ => break,
            };
            for line in (off..off + size).step_by(LINE) {
                Self::word(inbox, CONTROL + line).store(0, Ordering::Relaxed);
            }
            head += size as u64;
        }
        if head == start {
            return;
        }
        self.head[sender] = head;
        if head - self.published[sender] >= PUBLISH {
            self.published[sender] = head;
            // Release: the cleared lines are visible before the sender may reuse them.
            Self::word(inbox, 0).store(head, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_fabric::{LocalFabric, WaitPolicy};

    fn pair() -> (Vec<Box<dyn Endpoint>>, Vec<Mailbox>) {
        let fabric = LocalFabric::new(2).unwrap();
        let mut eps: Vec<Box<dyn Endpoint>> =
            (0..2).map(|r| Box::new(fabric.endpoint(r, WaitPolicy::oversubscribed()).unwrap()) as _).collect();
        let blobs: Vec<_> = eps.iter().map(|e| e.address().unwrap()).collect();
        eps.iter_mut().for_each(|e| e.insert_peers(&blobs).unwrap());
        let mut mbs: Vec<Mailbox> = (0..2).map(|r| Mailbox::new(&mut *eps[r], r, 2).unwrap()).collect();
        let descs: Vec<RemoteMr> = mbs.iter().map(|m| RemoteMr::from_bytes(&m.descriptor()).unwrap()).collect();
        for (r, m) in mbs.iter_mut().enumerate() {
            m.connect(&mut *eps[r], &descs, &[0, 1]).unwrap();
        }
        (eps, mbs)
    }

    fn get(m: &mut Mailbox, from: usize, tag: u64) -> Option<Vec<u8>> {
        let f = m.find(from, tag).unwrap()?;
        // SAFETY: a found record's payload is readable until it is consumed.
        let v = unsafe { std::slice::from_raw_parts(f.payload, f.len) }.to_vec();
        m.consume(from, f.pos);
        Some(v)
    }

    #[test]
    fn messages_arrive_in_any_order_and_wrap_around_the_ring() {
        let (_eps, mut mbs) = pair();
        let (a, b) = mbs.split_at_mut(1);
        let (a, b) = (&mut a[0], &mut b[0]);
        // Many laps of the ring with sizes that do not divide it; two messages per call, taken
        // in reverse order.
        for seq in 0..2000u64 {
            let len = (seq as usize * 37) % 3000;
            let x: Vec<u8> = (0..len).map(|i| (i as u64 + seq) as u8).collect();
            let y = vec![seq as u8; 5];
            // SAFETY: readable sources within MAX_DIRECT.
            unsafe {
                assert!(a.send(1, tag(seq, 0), x.as_ptr(), x.len()).unwrap());
                assert!(a.send(1, tag(seq, 1), y.as_ptr(), y.len()).unwrap());
            }
            assert_eq!(b.find(0, tag(seq + 1, 0)).unwrap().map(|f| f.len), None, "a later call's message");
            assert_eq!(get(b, 0, tag(seq, 1)).unwrap(), y);
            assert_eq!(get(b, 0, tag(seq, 0)).unwrap(), x);
            assert!(b.find(0, tag(seq, 0)).unwrap().is_none(), "consumed twice");
        }
        // One message per call, taken as it comes: the head must pass every wrap filler.
        for seq in 2000..6000u64 {
            let len = 40 + (seq as usize * 13) % 200;
            let x = vec![seq as u8; len];
            // SAFETY: as above.
            assert!(unsafe { a.send(1, tag(seq, 0), x.as_ptr(), len) }.unwrap(), "inbox full at call {seq}");
            assert_eq!(get(b, 0, tag(seq, 0)).unwrap(), x);
        }
    }

    #[test]
    fn a_full_inbox_refuses_until_the_owner_consumes() {
        let (_eps, mut mbs) = pair();
        let (a, b) = mbs.split_at_mut(1);
        let (a, b) = (&mut a[0], &mut b[0]);
        let x = vec![9u8; 4000];
        let mut sent = 0u64;
        // SAFETY: readable source within MAX_DIRECT.
        while unsafe { a.send(1, tag(sent, 0), x.as_ptr(), x.len()) }.unwrap() {
            sent += 1;
        }
        assert_eq!(sent, (RING / record_len(4000)) as u64);
        // Consuming a later record frees nothing (the head waits for the first).
        assert!(get(b, 0, tag(1, 0)).is_some());
        // SAFETY: as above.
        assert!(!unsafe { a.send(1, tag(sent, 0), x.as_ptr(), x.len()) }.unwrap());
        // Two consumed records (8064 B) are not yet published; a third is.
        assert!(get(b, 0, tag(0, 0)).is_some());
        // SAFETY: as above.
        assert!(!unsafe { a.send(1, tag(sent, 0), x.as_ptr(), x.len()) }.unwrap());
        assert!(get(b, 0, tag(2, 0)).is_some());
        // SAFETY: as above.
        assert!(unsafe { a.send(1, tag(sent, 0), x.as_ptr(), x.len()) }.unwrap());
        for s in 3..=sent {
            assert_eq!(get(b, 0, tag(s, 0)).unwrap(), x, "message {s}");
        }
    }

    #[test]
    fn a_record_with_a_corrupt_length_is_an_error_not_a_read() {
        let (_eps, mut mbs) = pair();
        let (a, b) = mbs.split_at_mut(1);
        let (a, b) = (&mut a[0], &mut b[0]);
        let x = [5u8; 10];
        // SAFETY: readable source.
        assert!(unsafe { a.send(1, tag(0, 0), x.as_ptr(), 10) }.unwrap());
        // SAFETY: as above.
        assert!(unsafe { a.send(1, tag(0, 1), x.as_ptr(), 10) }.unwrap());
        for bad in [u64::MAX, MAX_DIRECT as u64 + 1] {
            // SAFETY: the length word of the first record in b's inbox from rank 0.
            unsafe { b.inbox(1, 0).add(CONTROL + 8).cast::<u64>().write(bad) };
            // Looking past the corrupt record (for the second message) must fail.
            let e = b.find(0, tag(0, 1)).unwrap_err();
            assert!(e.to_string().contains("malformed record"), "{e}");
        }
    }

    #[test]
    fn loopback_messages_use_the_own_region() {
        let (_eps, mut mbs) = pair();
        let x = [1u8, 2, 3];
        // SAFETY: readable source.
        assert!(unsafe { mbs[0].send(0, tag(7, 3), x.as_ptr(), 3) }.unwrap());
        assert_eq!(get(&mut mbs[0], 0, tag(7, 3)).unwrap(), x);
    }
}
