//! Wire formats of the executor: the immediate value of a write, the tag of a control message and
//! the payloads of control messages (eager-ring setup, credits, grants, rendezvous requests,
//! offers).
//!
//! # Immediate (`Caps::imm_bits` = B: 64 on local/shm, 64 − ⌈log2 p⌉ on ofi, 32 on verbs)
//! - top bit 1 — **zero-copy**: the low B−1 bits are a grant id the receiver chose when it granted
//!   the destination; the receiver maps (sender, grant id) back to (communicator, collective,
//!   step), so the immediate needs no collective identity at all.
//! - top bit 0 — **eager**: `slot | ctx | seq | sig | idx` (B = 64: 6 | 16 | 16 | 8 | 17 bits;
//!   48 ≤ B < 64: 6 | 12 | 12 | 8 | rest; 32 ≤ B < 48: 6 | 5 | 6 | 0 | rest): the slot of the
//!   sender's ring at the receiver, the communicator's context id, the collective's sequence number
//!   modulo 2^seq, the call's signature ([`CallSig`]) and the message index (k-th message of that
//!   sender to this receiver in that collective). A message whose context or index does not fit
//!   goes by rendezvous (RTS, then grant) instead, which needs no field in the immediate.
//!   The receiver resolves `seq` to the one outstanding collective of that communicator with those
//!   low bits (at most 2^(seq−1) may be outstanding; an eager message can only be ahead of the
//!   receiver by as many collectives as the sender's credits allow, ≤ 64 here).
//!
//! # Control tag (64 bits): `kind (8) | ctx (24) | sig (8) | seq mod 2^24 (24)`.
//!
//! # Call signature
//! Ranks that call different collectives, or the same one with a different root, count, type,
//! operation or algorithm, would otherwise exchange messages that fit nobody's schedule: some
//! ranks time out, others return. So every eager immediate (B ≥ 48), grant and RTS carries 8 bits
//! of a hash of the call ([`CallSig`]), and the receiver compares them with its own call's: a
//! difference is a mismatch, reported at once (a 1-in-256 chance per message of missing it; a
//! mismatched call sends many). Checked mode (`FABCOLL_CHECK=1`) still compares the full calls.

use fabcoll_fabric::RemoteMr;

use crate::error::{Error, Result};

/// Slot-number bits of an eager immediate (rings have at most 64 slots).
pub(crate) const SLOT_BITS: u32 = 6;
/// Most slots per ring (the credit message is a 64-bit mask).
pub(crate) const MAX_SLOTS: usize = 1 << SLOT_BITS;

/// How an immediate value is split, from the backend's `imm_bits`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct ImmLayout {
    pub bits: u32,
    pub ctx_bits: u32,
    pub seq_bits: u32,
    pub sig_bits: u32,
    pub idx_bits: u32,
}

/// The 8-bit signature of a call (see the module doc): equal on every rank that makes the same
/// call, and different, with odds 255 to 1, between ranks that do not.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct CallSig(pub u8);

impl CallSig {
    /// Folds a 64-bit hash of the call into its signature.
    pub fn of(hash: u64) -> CallSig {
        let h = hash ^ (hash >> 32);
        let h = h ^ (h >> 16);
        CallSig((h ^ (h >> 8)) as u8)
    }
}

/// A decoded immediate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Imm {
    Eager { slot: u32, ctx: u32, seq_low: u64, sig: Option<CallSig>, idx: u32 },
    Zcopy { gid: u64 },
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl ImmLayout {
    /// The layout for a backend carrying `bits` bits (ofi carries 64 minus the bits it uses for
    /// the sender's rank, e.g. 61): 64 → 16/16/8/17 bits of ctx/seq/sig/idx; 48..63 →
    /// 12/12/8/rest; 32..47 → 5/6/0/rest (no signature); below 32 no eager identity (every small
    /// message goes by rendezvous).
    pub fn new(bits: u32) -> ImmLayout {
        let bits = bits.min(64);
        let avail = bits.saturating_sub(1 + SLOT_BITS);
        let (ctx_bits, seq_bits, sig_bits, idx_bits) = if bits == 64 {
            (16, 16, 8, 17)
        } else if bits >= 48 {
            (12, 12, 8, avail - 32)
        } else if bits >= 32 {
            (5, 6, 0, avail - 11)
        } else {
            (0, 0, 0, 0)
        };
        ImmLayout { bits: bits.max(2), ctx_bits, seq_bits, sig_bits, idx_bits }
    }

    /// Whether eager messages can be identified at all.
    pub fn eager_possible(&self) -> bool {
        self.idx_bits > 0
    }

    /// Collectives a communicator may have outstanding: half the sequence numbers an immediate
    /// tells apart, so that the low bits of every outstanding call's number differ.
    pub fn seq_window(&self) -> u64 {
        1u64 << self.seq_bits.saturating_sub(1).max(1)
    }

    /// Mask of the sequence-number bits carried by an eager immediate.
    pub fn seq_mask(&self) -> u64 {
        mask(self.seq_bits)
    }

    pub fn encode_eager(&self, slot: u32, ctx: u32, seq: u64, sig: CallSig, idx: u32) -> Option<u64> {
        if !self.eager_possible()
            || u64::from(slot) > mask(SLOT_BITS)
            || u64::from(ctx) > mask(self.ctx_bits)
            || u64::from(idx) > mask(self.idx_bits)
        {
            return None;
        }
        let mut v = u64::from(slot);
        v = (v << self.ctx_bits) | u64::from(ctx);
        v = (v << self.seq_bits) | (seq & mask(self.seq_bits));
        v = (v << self.sig_bits) | (u64::from(sig.0) & mask(self.sig_bits));
        v = (v << self.idx_bits) | u64::from(idx);
        Some(v)
    }

    pub fn encode_zcopy(&self, gid: u64) -> u64 {
        (1u64 << (self.bits - 1)) | (gid & mask(self.bits - 1))
    }

    /// Grant ids wrap at this value.
    pub fn gid_mask(&self) -> u64 {
        mask(self.bits - 1)
    }

    pub fn decode(&self, imm: u64) -> Imm {
        if imm >> (self.bits - 1) & 1 == 1 {
            return Imm::Zcopy { gid: imm & mask(self.bits - 1) };
        }
        let idx = (imm & mask(self.idx_bits)) as u32;
        let v = imm >> self.idx_bits;
        let sig = (self.sig_bits > 0).then(|| CallSig((v & mask(self.sig_bits)) as u8));
        let v = v >> self.sig_bits;
        let seq_low = v & mask(self.seq_bits);
        let v = v >> self.seq_bits;
        let ctx = (v & mask(self.ctx_bits)) as u32;
        let slot = ((v >> self.ctx_bits) & mask(SLOT_BITS)) as u32;
        Imm::Eager { slot, ctx, seq_low, sig, idx }
    }
}

/// Kinds of control messages.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// The sender's eager ring for us: where to write, how many slots of what size.
    Setup = 1,
    /// Slots of our ring at the sender that are free again (64-bit mask).
    Credit = 2,
    /// Destinations for zero-copy writes: (message index, grant id, remote range) entries.
    Grant = 3,
    /// Rendezvous request: the sender has these messages for us but no eager slot.
    Rts = 4,
    /// Checked mode: the sender's call signature.
    Check = 5,
    /// The sender's wait in this call passed its timeout (its grace period began; the call may
    /// still finish there); payload: the ranks it was waiting for (u32s).
    Abort = 6,
    /// A rank found a call signature that is not its own: the text says which call.
    Mismatch = 7,
    /// The sender of zero-copy messages offers their tails for the receiver to read itself:
    /// [`Offer`] entries.
    Offer = 8,
    /// The receiver has read the offered tails of these messages (u32 message indices): the
    /// sender's sources are free again.
    Pulled = 9,
    /// The sender failed this call and left it: payload as for `Abort`.
    GaveUp = 10,
    /// A receive from any source waits at the sender of this message, on the point-to-point
    /// context of the tag: announce every transfer to it (an RTS) from now on (`exec::p2p`).
    /// No payload.
    AnySource = 11,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Setup,
            2 => Kind::Credit,
            3 => Kind::Grant,
            4 => Kind::Rts,
            5 => Kind::Check,
            6 => Kind::Abort,
            7 => Kind::Mismatch,
            8 => Kind::Offer,
            9 => Kind::Pulled,
            10 => Kind::GaveUp,
            11 => Kind::AnySource,
            _ => return None,
        })
    }
}

/// Sequence bits carried by a control tag.
pub(crate) const TAG_SEQ_BITS: u32 = 24;

/// A control message's tag: its kind, the call's context, signature and sequence number (the
/// signature is 0 on messages that do not belong to a call's data: setup, credits, checks, aborts).
pub(crate) fn tag(kind: Kind, ctx: u32, seq: u64, sig: CallSig) -> u64 {
    (u64::from(kind as u8) << 56)
        | ((u64::from(ctx) & mask(24)) << 32)
        | (u64::from(sig.0) << TAG_SEQ_BITS)
        | (seq & mask(TAG_SEQ_BITS))
}

/// A decoded control tag.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tag {
    pub kind: Kind,
    pub ctx: u32,
    pub sig: CallSig,
    pub seq_low: u64,
}

pub(crate) fn untag(tag: u64) -> Result<Tag> {
    let kind = Kind::from_u8((tag >> 56) as u8)
        .ok_or_else(|| Error::Protocol(format!("control message with unknown kind in tag {tag:#018x}")))?;
    Ok(Tag {
        kind,
        ctx: ((tag >> 32) & mask(24)) as u32,
        sig: CallSig((tag >> TAG_SEQ_BITS) as u8),
        seq_low: tag & mask(TAG_SEQ_BITS),
    })
}

/// The slot mask a [`Kind::Credit`] message from `peer` carries.
pub(crate) fn credit_mask(peer: usize, data: &[u8]) -> Result<u64> {
    let bytes = data
        .try_into()
        .map_err(|_| Error::Protocol(format!("credit message of {} bytes from rank {peer}", data.len())))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Contexts must fit the control tag.
pub(crate) const MAX_CTX: u32 = (1 << 24) - 1;

/// Eager-ring setup: our ring for the receiving peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Setup {
    pub mr: RemoteMr,
    pub off: u64,
    pub slots: u32,
    pub slot_size: u32,
}

impl Setup {
    pub const LEN: usize = RemoteMr::WIRE_LEN + 16;

    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = self.mr.to_bytes().to_vec();
        b.extend_from_slice(&self.off.to_le_bytes());
        b.extend_from_slice(&self.slots.to_le_bytes());
        b.extend_from_slice(&self.slot_size.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Result<Setup> {
        if b.len() != Self::LEN {
            return Err(Error::Protocol(format!("setup message of {} bytes, expected {}", b.len(), Self::LEN)));
        }
        let mr = RemoteMr::from_bytes(&b[..RemoteMr::WIRE_LEN])?;
        let r = &b[RemoteMr::WIRE_LEN..];
        Ok(Setup {
            mr,
            off: u64::from_le_bytes(r[0..8].try_into().expect("8 bytes")),
            slots: u32::from_le_bytes(r[8..12].try_into().expect("4 bytes")),
            slot_size: u32::from_le_bytes(r[12..16].try_into().expect("4 bytes")),
        })
    }
}

/// One granted destination.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct GrantEntry {
    pub idx: u32,
    pub gid: u64,
    pub mr: RemoteMr,
    pub off: u64,
    pub len: u64,
    /// The pieces the initiator writes `len` in, one write each: the grantor counts them (its
    /// `Endpoint::write_segment` for the connection from the initiator).
    pub seg: u64,
    /// The receiver would rather read the message itself, whole, for a Reduce (`Op::grant`): the
    /// sender offers it from byte 0 where nothing after its Send waits for the source, and
    /// writes it as granted otherwise.
    pub whole: bool,
}

impl GrantEntry {
    pub const LEN: usize = 4 + 8 + RemoteMr::WIRE_LEN + 25;

    pub fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.idx.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        out.extend_from_slice(&self.mr.to_bytes());
        out.extend_from_slice(&self.off.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.seg.to_le_bytes());
        out.push(u8::from(self.whole));
    }

    pub fn parse_all(b: &[u8]) -> Result<Vec<GrantEntry>> {
        if !b.len().is_multiple_of(Self::LEN) {
            return Err(Error::Protocol(format!("grant message of {} bytes is not whole entries", b.len())));
        }
        b.chunks(Self::LEN)
            .map(|c| {
                let u = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().expect("8 bytes"));
                let m = 12 + RemoteMr::WIRE_LEN;
                Ok(GrantEntry {
                    idx: u32::from_le_bytes(c[0..4].try_into().expect("4 bytes")),
                    gid: u(4),
                    mr: RemoteMr::from_bytes(&c[12..m])?,
                    off: u(m),
                    len: u(m + 8),
                    seg: u(m + 16),
                    whole: match c[m + 24] {
                        0 => false,
                        1 => true,
                        v => return Err(Error::Protocol(format!("grant entry with whole = {v}"))),
                    },
                })
            })
            .collect()
    }
}

/// The tail of a zero-copy message that its sender leaves to the receiver: bytes `from..len` of
/// message `idx`, which starts at `off` in the sender's registration `mr` (a whole number of the
/// grant's segments: the receiver counts them as arrived once it has read them).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    pub idx: u32,
    pub from: u64,
    pub mr: RemoteMr,
    pub off: u64,
    pub len: u64,
}

impl Offer {
    pub const LEN: usize = 4 + 8 + RemoteMr::WIRE_LEN + 16;

    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = self.idx.to_le_bytes().to_vec();
        b.extend_from_slice(&self.from.to_le_bytes());
        b.extend_from_slice(&self.mr.to_bytes());
        b.extend_from_slice(&self.off.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Result<Offer> {
        if b.len() != Self::LEN {
            return Err(Error::Protocol(format!("offer message of {} bytes, expected {}", b.len(), Self::LEN)));
        }
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let m = 12 + RemoteMr::WIRE_LEN;
        Ok(Offer {
            idx: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            from: u(4),
            mr: RemoteMr::from_bytes(&b[12..m])?,
            off: u(m),
            len: u(m + 8),
        })
    }
}

/// Message indices of a rendezvous request.
pub(crate) fn parse_u32s(b: &[u8]) -> Result<Vec<u32>> {
    if !b.len().is_multiple_of(4) {
        return Err(Error::Protocol(format!("index list of {} bytes", b.len())));
    }
    Ok(b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_fabric::Access;

    #[test]
    fn imm_round_trips_in_both_widths() {
        for bits in [64, 61, 48, 32] {
            let l = ImmLayout::new(bits);
            assert_eq!(1 + SLOT_BITS + l.ctx_bits + l.seq_bits + l.sig_bits + l.idx_bits, bits);
            assert_eq!(l.sig_bits, if bits >= 48 { 8 } else { 0 });
            let max_ctx = (1u32 << l.ctx_bits) - 1;
            let max_idx = (1u32 << l.idx_bits) - 1;
            for (slot, ctx, seq, sig, idx) in [(0, 0, 0, 0, 0), (63, max_ctx, 12345, 255, max_idx), (5, 1, 7, 0x5a, 3)]
            {
                let v = l.encode_eager(slot, ctx, seq, CallSig(sig), idx).unwrap();
                assert!(bits == 64 || v < 1 << bits);
                let sig = (l.sig_bits > 0).then_some(CallSig(sig));
                let want = Imm::Eager { slot, ctx, seq_low: seq & l.seq_mask(), sig, idx };
                assert_eq!(l.decode(v), want);
            }
            assert!(l.encode_eager(0, max_ctx + 1, 0, CallSig(0), 0).is_none());
            assert!(l.encode_eager(0, 0, 0, CallSig(0), max_idx + 1).is_none());
            let z = l.encode_zcopy(l.gid_mask() + 5);
            assert!(bits == 64 || z < 1 << bits);
            assert_eq!(l.decode(z), Imm::Zcopy { gid: 4 });
        }
    }

    #[test]
    fn tags_and_payloads_round_trip() {
        let t = tag(Kind::Grant, 77, (1 << 40) + 9, CallSig(0xc3));
        assert_eq!(untag(t).unwrap(), Tag { kind: Kind::Grant, ctx: 77, sig: CallSig(0xc3), seq_low: 9 });
        assert_eq!(untag(tag(Kind::Rts, MAX_CTX, u64::MAX, CallSig(1))).unwrap().ctx, MAX_CTX);
        assert!(untag(0).is_err());
        let mr = RemoteMr { addr: 1 << 33, len: 4096, key: 42, access: Access::REMOTE_WRITE, node: None };
        let s = Setup { mr, off: 128, slots: 16, slot_size: 8192 };
        assert_eq!(Setup::from_bytes(&s.to_bytes()).unwrap(), s);
        let g = GrantEntry { idx: 3, gid: 1 << 35, mr, off: 8, len: 800, seg: 512, whole: true };
        let mut b = Vec::new();
        g.put(&mut b);
        g.put(&mut b);
        assert_eq!(GrantEntry::parse_all(&b).unwrap(), vec![g, g]);
        assert!(GrantEntry::parse_all(&b[1..]).is_err());
        let o = Offer { idx: 2, from: 1 << 21, mr, off: 64, len: (1 << 22) + 5 };
        assert_eq!(Offer::from_bytes(&o.to_bytes()).unwrap(), o);
        assert!(Offer::from_bytes(&o.to_bytes()[1..]).is_err());
        assert_eq!(untag(tag(Kind::Pulled, 3, 4, CallSig(5))).unwrap().kind, Kind::Pulled);
        assert_eq!(untag(tag(Kind::AnySource, 3, 0, CallSig(0))).unwrap().kind, Kind::AnySource);
        assert!(untag(12 << 56).is_err(), "kinds end at AnySource");
    }

    #[test]
    fn signatures_fold_every_byte_of_the_hash() {
        for shift in (0..64).step_by(8) {
            assert_ne!(CallSig::of(0), CallSig::of(0x5a << shift), "byte at bit {shift}");
        }
    }
}
