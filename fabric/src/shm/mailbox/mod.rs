//! Mailboxes of fabcoll's mailbox lane (small blocking collectives on `shm` and `local`): per
//! communicator, every rank owns one shared-memory region with an inbox per sender, and its peers
//! map that region and store their messages straight into it — no notification queue, no slot
//! credits, no completion. This is Open MPI's "fast box" (vader BTL) and MPICH's ch4 shm "eager
//! cells": one cache line carries a small message and its header, and the receiver polls that line.
//!
//! An inbox is a control line (the owner's published consumed position, `head`) and a byte ring of
//! [`RING`] bytes. A record starts on a 64-byte line: an 8-byte tag, stored last with Release (so
//! the payload is visible once the tag is), the payload length, then the payload. Tags are odd
//! ([`tag`]); the even values are the owner's and the sender's markers (`CONSUMED`, `WRAP`) and 0
//! means "nothing here yet".
//!
//! The owner consumes records in any order, marks them `CONSUMED`, moves its head past the consumed
//! prefix and clears the first word of every line it passes (a record start in a later lap, which
//! must read 0 until the sender writes it); it publishes the head (Release) every `RING / 8` bytes.
//! The sender keeps its own tail and writes only while `tail - head` leaves room, rereading the
//! head (Acquire) only when its last reading leaves too little. A record that does not fit before
//! the ring's end is preceded by a `WRAP` marker and starts at the ring's beginning. The sender
//! writes a record's later lines first and its first line (length, payload head, tag) last, back to
//! back, so that the polling owner loses that line once.
//!
//! The protocol is written once (`inbox.rs`) over the inbox's memory and ring size; loom models
//! run it on a ring of a few lines (`models.rs`, `--cfg loom`).

mod inbox;
#[cfg(all(test, loom))]
mod models;

use self::inbox::{Inbox, OwnerState, RawInbox, SenderState, CONTROL, HEADER, LINE};
use crate::error::{Error, Result};
use crate::{Access, Endpoint, Mapping, Mr, RemoteMr};

/// Bytes of one inbox's ring. Enough for every schedule's messages of one direct call (at most
/// [`MAX_MESSAGE`] bytes each) between any two ranks with room to spare: a sender that runs a few
/// calls ahead (a bcast root) does not wait for space.
pub const RING: usize = 64 * 1024;
const INBOX: usize = CONTROL + RING;
/// Largest message: a record of this size still leaves the ring room for several.
pub const MAX_MESSAGE: usize = 16 * 1024;
/// The owner publishes its head after consuming this many bytes: a sender waiting for space sees
/// all but less than this much of the ring free, more than a record of [`MAX_MESSAGE`] bytes and
/// its wrap filler need, so waiting on an unpublished head never blocks a sender.
const PUBLISH: u64 = (RING / 8) as u64;

/// The inbox protocol on mapped memory with the production ring.
type SharedInbox = Inbox<RawInbox, RING, PUBLISH>;

/// The tag of message `k` (below 2^23) of a communicator's direct call `seq`: `seq mod 2^32 (32) |
/// sig (8) | k (23) | 1`. The signature bits ([`with_sig`]) are not part of a record's identity:
/// [`Mailbox::find`] ignores them and reports them in [`Found::sig`].
pub fn tag(seq: u64, k: u32) -> u64 {
    1 | u64::from(k & 0x7f_ffff) << 1 | (seq & 0xffff_ffff) << 32
}

/// Bits of a tag that carry the sender's call signature.
const SIG_SHIFT: u32 = 24;
const SIG_MASK: u64 = 0xff << SIG_SHIFT;

/// `tag` carrying the sender's call signature `sig` (8 bits of a hash of the call, so that a
/// receiver can tell that its peer made another call).
pub fn with_sig(tag: u64, sig: u8) -> u64 {
    (tag & !SIG_MASK) | u64::from(sig) << SIG_SHIFT
}

/// Bytes a message of `payload` bytes takes in an inbox (header and padding included).
pub fn record_len(payload: usize) -> usize {
    (HEADER + payload).div_ceil(LINE) * LINE
}

/// A record found in an inbox: where its payload is, and its position (to consume it).
#[derive(Copy, Clone, Debug)]
pub struct Found {
    /// The payload, readable until the record is consumed.
    pub payload: *const u8,
    /// Payload bytes.
    pub len: usize,
    /// The call signature the sender stored with it ([`with_sig`]).
    pub sig: u8,
    /// Whether it is the oldest record of its inbox not consumed yet (else
    /// [`Mailbox::oldest`] tells what is older).
    pub first: bool,
    /// The record's position, for [`Mailbox::consume`].
    pub pos: u64,
}

/// This rank's inboxes and its peers' mapped regions on one communicator.
pub struct Mailbox {
    rank: usize,
    own: Mr,
    /// Peers' regions by communicator rank (`None` for this rank: its own region).
    peers: Vec<Option<Mapping>>,
    /// Endpoint ranks by communicator rank (to name a peer in an error).
    eps: Vec<u32>,
    /// This rank's side of each peer's inbox for it.
    sending: Vec<SenderState>,
    /// The owner's side of each of this rank's inboxes.
    owning: Vec<OwnerState>,
}

// SAFETY: the raw pointers are views of shared mappings kept alive by `own` and `peers`; the
// mailbox is used by one thread at a time (`&mut self` for every change).
unsafe impl Send for Mailbox {}

impl Mailbox {
    /// Allocates this rank's region (`p` inboxes); its descriptor goes to every peer, which then
    /// calls [`Mailbox::connect`].
    pub fn new(ep: &mut dyn Endpoint, rank: usize, p: usize) -> Result<Mailbox> {
        let own = ep.alloc(p * INBOX, Access::REMOTE_WRITE)?;
        Ok(Mailbox {
            rank,
            own,
            peers: Vec::new(),
            eps: Vec::new(),
            sending: vec![SenderState::default(); p],
            owning: vec![OwnerState::default(); p],
        })
    }

    /// This rank's communicator rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The communicator's size.
    pub fn size(&self) -> usize {
        self.sending.len()
    }

    /// This rank's region, for its peers' [`Mailbox::connect`].
    pub fn descriptor(&self) -> [u8; RemoteMr::WIRE_LEN] {
        self.own.remote().to_bytes()
    }

    /// Maps every peer's region from its descriptor (`descs[r]` = rank `r`'s, by communicator
    /// rank; `eps[r]` its endpoint rank).
    pub fn connect(&mut self, ep: &mut dyn Endpoint, descs: &[RemoteMr], eps: &[u32]) -> Result<()> {
        let p = self.sending.len();
        if descs.len() != p || eps.len() != p {
            return Err(Error::invalid(format!(
                "{} mailbox descriptors and {} endpoint ranks for {p} ranks",
                descs.len(),
                eps.len()
            )));
        }
        let mut peers = Vec::with_capacity(p);
        for (r, d) in descs.iter().enumerate() {
            if r == self.rank {
                peers.push(None);
                continue;
            }
            if (d.len as usize) < p * INBOX {
                return Err(Error::Peer {
                    peer: eps[r] as usize,
                    msg: format!("its mailbox region has {} bytes, not {}", d.len, p * INBOX),
                });
            }
            let m = ep.map_remote(eps[r] as usize, d)?;
            // SAFETY: our inbox in the peer's region lies inside the mapping (length checked).
            unsafe { crate::copy::populate_write(m.as_ptr().add(self.rank * INBOX), INBOX) };
            peers.push(Some(m));
        }
        // SAFETY: our own region, p inboxes long.
        unsafe { crate::copy::populate_write(self.own.as_ptr(), p * INBOX) };
        self.peers = peers;
        self.eps = eps.to_vec();
        Ok(())
    }

    /// Rank `owner`'s inbox for messages from rank `sender` (one of them is this rank).
    fn inbox(&self, owner: usize, sender: usize) -> SharedInbox {
        let base = match self.peers.get(owner) {
            Some(Some(m)) => m.as_ptr(),
            _ => self.own.as_ptr(),
        };
        // SAFETY: the region holds p inboxes (checked in `connect`; ours by construction), mapped
        // while `self` lives; the inbox is used only while `self` is borrowed.
        Inbox::new(unsafe { RawInbox::new(base.add(sender * INBOX)) })
    }

    /// Stores a message for `peer` (`len` bytes at `src`) under `tag`. `Ok(false)`: its inbox is
    /// full for now (the peer has not consumed enough yet); nothing was written.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes, `len` at most [`MAX_MESSAGE`].
    pub unsafe fn send(&mut self, peer: usize, tag: u64, src: *const u8, len: usize) -> Result<bool> {
        debug_assert!(len <= MAX_MESSAGE);
        let inbox = self.inbox(peer, self.rank);
        // SAFETY: the caller's promise on `src` and `len`.
        Ok(unsafe { inbox.send(&mut self.sending[peer], tag, src, len) })
    }

    /// The record with `tag` from `sender`, whatever signature it carries, if it has arrived
    /// (records of later calls and other messages are skipped, not consumed). A record whose
    /// length does not fit the ring is an error, never read.
    pub fn find(&self, sender: usize, tag: u64) -> Result<Option<Found>> {
        let inbox = self.inbox(self.rank, sender);
        match inbox.find(&self.owning[sender], tag & !SIG_MASK, !SIG_MASK) {
            Ok(found) => Ok(found.map(|r| Found {
                payload: inbox.memory().payload(r.off),
                len: r.len,
                sig: ((r.tag & SIG_MASK) >> SIG_SHIFT) as u8,
                first: r.pos == self.owning[sender].head,
                pos: r.pos,
            })),
            Err(off) => Err(Error::Peer {
                peer: self.eps.get(sender).map_or(sender, |&e| e as usize),
                msg: format!("left a malformed record at offset {off} in our mailbox"),
            }),
        }
    }

    /// The tag (signature bits cleared) of the oldest record from `sender` not consumed yet, if
    /// one has arrived.
    pub fn oldest(&self, sender: usize) -> Option<u64> {
        let t = self.inbox(self.rank, sender).oldest(&self.owning[sender]);
        (t & 1 == 1).then_some(t & !SIG_MASK)
    }

    /// The call number (mod 2^32) and message index of a tag.
    pub fn parts(tag: u64) -> (u64, u32) {
        (tag >> 32, ((tag >> 1) & 0x7f_ffff) as u32)
    }

    /// Gives back a record [`Mailbox::find`] returned (its payload must not be used after this).
    pub fn consume(&mut self, sender: usize, pos: u64) {
        let inbox = self.inbox(self.rank, sender);
        inbox.consume(&mut self.owning[sender], pos);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{LocalFabric, WaitPolicy};

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
            // SAFETY: readable sources within MAX_MESSAGE.
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
        // SAFETY: readable source within MAX_MESSAGE.
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
        for bad in [u64::MAX, MAX_MESSAGE as u64 + 1] {
            // SAFETY: the length word of the first record in b's inbox from rank 0.
            unsafe { b.inbox(1, 0).memory().base().add(CONTROL + 8).cast::<u64>().write(bad) };
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

    #[test]
    fn connect_checks_the_descriptors() {
        let (mut eps, mut mbs) = pair();
        let own = RemoteMr::from_bytes(&mbs[0].descriptor()).unwrap();
        let e = mbs[0].connect(&mut *eps[0], &[own], &[0, 1]).unwrap_err();
        assert!(e.to_string().contains("1 mailbox descriptors"), "{e}");
        // A peer region of one inbox where two are needed.
        let small = Mailbox::new(&mut *eps[1], 1, 1).unwrap();
        let small = RemoteMr::from_bytes(&small.descriptor()).unwrap();
        let e = mbs[0].connect(&mut *eps[0], &[own, small], &[0, 1]).unwrap_err();
        assert!(matches!(e, Error::Peer { peer: 1, .. }) && e.to_string().contains("mailbox region has"), "{e}");
    }
}
