//! The frames of the `tcp` backend: a fixed 48-byte header, then the payload (a write's bytes or a
//! control message). Pure encoding and decoding; a header that does not decode is a malformed
//! stream and breaks the connection.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind: 1 write, 2 write with immediate, 3 control, 4 refusal, 5 goodbye |
//! | 1 | refusal reason (kind 4), else 0 |
//! | 2 | write: zero bytes between the header and the payload (0–63, [`pad_for`]); else 0 |
//! | 3..8 | zero |
//! | 8..16 | write: target key; control: tag; refusal: the refused key |
//! | 16..24 | write: target address; refusal: the initiator's `ctx` |
//! | 24..32 | payload length (writes and control messages; 0 otherwise) |
//! | 32..40 | write with immediate: the immediate; else 0 |
//! | 40..48 | write: the initiator's `ctx`, echoed in a refusal; else 0 |

use crate::error::{Error, Result};

/// Header length in bytes.
pub const HDR: usize = 48;

/// Most padding a write's header may announce.
pub const MAX_PAD: usize = 63;

/// Writes of at least this many bytes are padded ([`pad_for`]); the receiver reads them by `recv`
/// straight into their destination (`conn.rs`'s `DIRECT_MIN`).
const PAD_MIN: u64 = 16 * 1024;

/// The padding that puts a write's payload at the target address's offset modulo 64 within its
/// frame, for writes of at least [`PAD_MIN`] bytes (else 0).
///
/// Why: the kernel copies a received stream out of the sender's page fragments with `rep movsb`,
/// which on this CPU runs several times slower when the destination lies 1–63 bytes past the
/// source modulo 4 KiB (`docs/measurements/2026-11-29-copy-distance.md`). A frame sent at once
/// starts at a fragment's beginning, so an unpadded payload sits 48 bytes into a page, and every
/// destination 49–111 bytes into a page (a torch tensor: 64) was received at that slow distance.
pub fn pad_for(addr: u64, len: u64) -> u8 {
    if len < PAD_MIN {
        return 0;
    }
    (addr.wrapping_sub(HDR as u64) % 64) as u8
}

/// Largest control payload a receiver accepts (larger is a malformed frame).
pub const MAX_CTRL: usize = 64 * 1024;

/// Why a target refused a write (it read the payload and dropped it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The key is not registered (never was, or no longer).
    UnknownKey = 1,
    /// The range lies outside the registration.
    OutOfBounds = 2,
    /// The registration does not allow remote writes.
    NotWritable = 3,
}

impl Refusal {
    fn from_u8(b: u8) -> Option<Refusal> {
        match b {
            1 => Some(Refusal::UnknownKey),
            2 => Some(Refusal::OutOfBounds),
            3 => Some(Refusal::NotWritable),
            _ => None,
        }
    }
}

/// One decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// `len` bytes for `[addr, addr+len)` of registration `key` follow.
    Write {
        /// Target key.
        key: u64,
        /// Absolute target address.
        addr: u64,
        /// Payload length.
        len: u64,
        /// Immediate, reported at the target.
        imm: Option<u64>,
        /// Initiator's context, echoed in a refusal.
        ctx: u64,
        /// Zero bytes between the header and the payload (at most [`MAX_PAD`]).
        pad: u8,
    },
    /// A control message of `len` bytes follows.
    Ctrl {
        /// Sender's tag.
        tag: u64,
        /// Payload length.
        len: u64,
    },
    /// The target refused the initiator's write `ctx`.
    Refused {
        /// Why.
        why: Refusal,
        /// The key the write named.
        key: u64,
        /// The write's context.
        ctx: u64,
    },
    /// The sender closes its endpoint: nothing more follows, and the end of the stream is clean.
    Goodbye,
}

impl Frame {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HDR] {
        let mut h = [0u8; HDR];
        let mut put = |at: usize, v: u64| h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        let mut pad_byte = 0;
        let (kind, reason) = match *self {
            Frame::Write { key, addr, len, imm, ctx, pad } => {
                put(8, key);
                put(16, addr);
                put(24, len);
                put(32, imm.unwrap_or(0));
                put(40, ctx);
                pad_byte = pad;
                (if imm.is_some() { 2 } else { 1 }, 0)
            }
            Frame::Ctrl { tag, len } => {
                put(8, tag);
                put(24, len);
                (3, 0)
            }
            Frame::Refused { why, key, ctx } => {
                put(8, key);
                put(16, ctx);
                (4, why as u8)
            }
            Frame::Goodbye => (5, 0),
        };
        h[0] = kind;
        h[1] = reason;
        h[2] = pad_byte;
        h
    }

    /// Decodes a header; anything but a well-formed header is an error naming the byte at fault.
    pub fn decode(h: &[u8; HDR]) -> Result<Frame> {
        let get = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8-byte field"));
        if h[3..8].iter().any(|&b| b != 0) {
            return Err(Error::invalid(format!("malformed frame: reserved bytes {:?} are not zero", &h[3..8])));
        }
        let pad_ok = if matches!(h[0], 1 | 2) { h[2] as usize <= MAX_PAD } else { h[2] == 0 };
        if !pad_ok {
            return Err(Error::invalid(format!("malformed frame: padding of {} bytes on kind {}", h[2], h[0])));
        }
        let frame = match h[0] {
            1 | 2 => {
                let (addr, len) = (get(16), get(24));
                if addr.checked_add(len).is_none() {
                    return Err(Error::invalid(format!("malformed frame: write of {len} bytes at {addr:#x} wraps")));
                }
                let imm = (h[0] == 2).then(|| get(32));
                Frame::Write { key: get(8), addr, len, imm, ctx: get(40), pad: h[2] }
            }
            3 => {
                let len = get(24);
                if len > MAX_CTRL as u64 {
                    return Err(Error::invalid(format!(
                        "malformed frame: control message of {len} bytes (at most {MAX_CTRL})"
                    )));
                }
                Frame::Ctrl { tag: get(8), len }
            }
            4 => {
                let why = Refusal::from_u8(h[1])
                    .ok_or_else(|| Error::invalid(format!("malformed frame: refusal reason {}", h[1])))?;
                Frame::Refused { why, key: get(8), ctx: get(16) }
            }
            5 => Frame::Goodbye,
            k => return Err(Error::invalid(format!("malformed frame: unknown kind {k}"))),
        };
        if h[0] != 4 && h[1] != 0 {
            return Err(Error::invalid(format!("malformed frame: reason byte {} on kind {}", h[1], h[0])));
        }
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_round_trips() {
        let frames = [
            Frame::Write { key: 7, addr: 0x1000, len: 8, imm: Some(u64::MAX - 1), ctx: u64::MAX, pad: 0 },
            Frame::Write { key: u64::MAX, addr: 0, len: 0, imm: None, ctx: 42, pad: MAX_PAD as u8 },
            Frame::Ctrl { tag: 3, len: MAX_CTRL as u64 },
            Frame::Ctrl { tag: 0, len: 0 },
            Frame::Refused { why: Refusal::UnknownKey, key: 9, ctx: 5 },
            Frame::Refused { why: Refusal::OutOfBounds, key: 9, ctx: u64::MAX },
            Frame::Refused { why: Refusal::NotWritable, key: 1, ctx: 0 },
            Frame::Goodbye,
        ];
        for f in frames {
            assert_eq!(Frame::decode(&f.encode()).unwrap(), f);
        }
    }

    #[test]
    fn malformed_headers_are_errors() {
        let ok = Frame::Ctrl { tag: 1, len: 4 }.encode();
        let mut bad_kind = ok;
        bad_kind[0] = 9;
        let mut reserved = ok;
        reserved[5] = 1;
        let mut reason = ok;
        reason[1] = 2;
        let too_long = Frame::Ctrl { tag: 1, len: MAX_CTRL as u64 + 1 }.encode();
        let mut wraps = Frame::Write { key: 1, addr: u64::MAX - 3, len: 1, imm: None, ctx: 0, pad: 0 }.encode();
        let mut big_pad = Frame::Write { key: 1, addr: 0, len: 1, imm: None, ctx: 0, pad: 0 }.encode();
        big_pad[2] = MAX_PAD as u8 + 1;
        let mut ctrl_pad = ok;
        ctrl_pad[2] = 1;
        wraps[24..32].copy_from_slice(&8u64.to_le_bytes());
        let mut no_reason = Frame::Refused { why: Refusal::UnknownKey, key: 1, ctx: 1 }.encode();
        no_reason[1] = 0;
        for (h, what) in [
            (bad_kind, "unknown kind 9"),
            (reserved, "reserved"),
            (reason, "reason byte"),
            (too_long, "control message"),
            (wraps, "wraps"),
            (big_pad, "padding of 64 bytes on kind 1"),
            (ctrl_pad, "padding of 1 bytes on kind 3"),
            (no_reason, "refusal reason 0"),
        ] {
            let e = Frame::decode(&h).unwrap_err().to_string();
            assert!(e.contains(what), "{e} should mention {what}");
        }
    }

    #[test]
    fn a_large_payload_lands_at_its_targets_offset_modulo_64_within_the_frame() {
        for addr in [0u64, 1, 47, 48, 49, 64, 80, 111, 4096 + 64, u64::MAX] {
            let pad = pad_for(addr, PAD_MIN) as u64;
            assert!(pad as usize <= MAX_PAD);
            assert_eq!((HDR as u64 + pad) % 64, addr % 64, "addr {addr}");
            assert_eq!(pad_for(addr, PAD_MIN - 1), 0, "a small write is not padded");
        }
    }
}
