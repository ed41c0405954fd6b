//! One connection of the `tcp` backend: the queue of frames still to send (writes point at the
//! caller's memory until their last byte is in the kernel) and the receiver's state machine, which
//! reads headers through a staging buffer and payloads of writes straight into registered memory.
//!
//! Receive path: one `recv` fills the 64 KiB staging buffer with as many frames as have arrived
//! (small messages: one system call for several frames, then one copy each into its registration);
//! a write with at least [`DIRECT_MIN`] bytes still to come is read by `recv` into its destination
//! directly (no copy in user space: the kernel's copy is the only one). Send path: a frame is one
//! `sendmsg` of header, a large write's padding (`wire::pad_for`, which keeps that kernel copy off
//! its slow distances) and payload (`MSG_NOSIGNAL`: a closed peer is an error, not a signal).

use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::PoisonError;

use super::wire::{Frame, Refusal, HDR, MAX_PAD};
use super::Regions;
use crate::endpoint::{Completion, SILENT_WRITE};
use crate::error::{Error, Result};
use crate::mr::{Access, Mr};

/// Staging buffer of one connection's receiver.
const RBUF: usize = 64 * 1024;
/// A write with at least this many bytes left (and none staged) is received into its destination.
pub(super) const DIRECT_MIN: u64 = 16 * 1024;

/// Bytes one `flush` sends at most. A `poll` flushes, reads and flushes again, so a large write
/// leaves in bursts with the endpoint's reads in between, instead of in one `sendmsg` that copies
/// all of it into the socket (a peer on the same host, or one that reads promptly, takes any
/// amount) while the rank reads nothing. 512 KiB beat no limit, 256 KiB and 1 MiB, and reading
/// before the first flush of a poll did worse (`docs/measurements/2026-11-27-tcp.md`).
const SEND_BURST: usize = 512 * 1024;

/// What a connection knows of its peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Peer {
    /// Connected.
    Open,
    /// The peer said goodbye: it closed its endpoint; the end of its stream is clean.
    Closed,
    /// The connection broke (the peer died, or sent bytes that are not frames).
    Lost(String),
}

/// The bytes to send after a header.
enum Payload {
    None,
    /// The caller's memory (a write): valid until its `WriteDone` (the endpoint contract).
    Borrowed(*const u8, usize),
    /// Our copy (a control message or a small write that did not leave at once).
    Owned(Vec<u8>),
}

// SAFETY: a borrowed payload is only read, by the thread that owns the connection, while the
// `Mr` clone kept beside it (`Out::_src`) holds the registration; the endpoint contract makes the
// caller keep the bytes valid and unmodified until the write's `WriteDone`.
unsafe impl Send for Payload {}

impl Payload {
    fn as_raw(&self) -> (*const u8, usize) {
        match self {
            Payload::None => (std::ptr::null(), 0),
            Payload::Borrowed(p, n) => (*p, *n),
            Payload::Owned(v) => (v.as_ptr(), v.len()),
        }
    }
}

/// A frame's header and the padding after it (a write's, [`super::wire::pad_for`]).
#[derive(Clone, Copy)]
struct Lead {
    bytes: [u8; HDR + MAX_PAD],
    len: usize,
}

impl Lead {
    fn new(frame: &Frame) -> Lead {
        let pad = if let Frame::Write { pad, .. } = frame { *pad as usize } else { 0 };
        let mut bytes = [0u8; HDR + MAX_PAD];
        bytes[..HDR].copy_from_slice(&frame.encode());
        Lead { bytes, len: HDR + pad }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A frame partly or not yet sent.
struct Out {
    lead: Lead,
    payload: Payload,
    /// Bytes of lead + payload already sent.
    sent: usize,
    /// `Some(ctx)`: report `WriteDone { ctx }` when the last byte is sent.
    done: Option<u64>,
    /// The source registration of a write, kept alive until its last byte is sent.
    _src: Option<Mr>,
}

/// Where the receiver is in the stream.
enum Rx {
    Header,
    Write {
        key: u64,
        addr: u64,
        left: u64,
        imm: Option<u64>,
        ctx: u64,
        refused: Option<Refusal>,
        /// Padding still to skip before the payload.
        skip: usize,
    },
    Ctrl {
        tag: u64,
        left: usize,
        data: Vec<u8>,
    },
    /// After a goodbye or a broken stream: nothing more is read.
    Done,
}

/// One peer's connection.
pub(super) struct Conn {
    peer: usize,
    stream: TcpStream,
    fd: RawFd,
    queue: VecDeque<Out>,
    rbuf: Box<[u8]>,
    rpos: usize,
    rend: usize,
    rx: Rx,
    pub(super) state: Peer,
    /// Whether `poll` has already returned this connection's loss as an error.
    pub(super) loss_reported: bool,
}

impl Conn {
    pub(super) fn new(peer: usize, stream: TcpStream) -> Result<Conn> {
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::Os { op: format!("set_nonblocking (rank {peer})"), source: e })?;
        stream.set_nodelay(true).map_err(|e| Error::Os { op: format!("TCP_NODELAY (rank {peer})"), source: e })?;
        crate::congestion::apply(&stream, peer)?;
        let fd = stream.as_raw_fd();
        Ok(Conn {
            peer,
            stream,
            fd,
            queue: VecDeque::new(),
            rbuf: vec![0u8; RBUF].into_boxed_slice(),
            rpos: 0,
            rend: 0,
            rx: Rx::Header,
            state: Peer::Open,
            loss_reported: false,
        })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.fd
    }

    /// Frames wait to be sent (the socket was full).
    pub(super) fn sending(&self) -> bool {
        !self.queue.is_empty()
    }

    fn check_open(&self) -> Result<()> {
        match &self.state {
            Peer::Open => Ok(()),
            Peer::Closed => Err(Error::Peer { peer: self.peer, msg: "tcp: the peer closed its endpoint".into() }),
            Peer::Lost(why) => Err(Error::Peer { peer: self.peer, msg: format!("tcp: {why}") }),
        }
    }

    /// Sends a write of the `len` bytes at `ptr` of registration `mr`. When nothing is queued it
    /// goes out at once; only a part the socket did not take is queued. An `inline` write is
    /// complete on return: that part is copied, and a `ctx` of [`SILENT_WRITE`] reports nothing.
    /// Otherwise the queued part points at the caller's memory (with a clone of `mr`, which keeps
    /// the source registered until the last byte leaves) until `WriteDone { ctx }`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_write(
        &mut self,
        frame: Frame,
        mr: &Mr,
        ptr: *const u8,
        len: usize,
        ctx: u64,
        inline: bool,
        done: &mut Vec<Completion>,
    ) -> Result<()> {
        self.check_open()?;
        let lead = Lead::new(&frame);
        let sent = self.send_now(lead.as_slice(), ptr, len)?;
        let report = (!inline || ctx != SILENT_WRITE).then_some(ctx);
        if sent == lead.len + len {
            if let Some(ctx) = report {
                done.push(Completion::WriteDone { ctx });
            }
            return Ok(());
        }
        let out = if inline {
            // SAFETY: `ptr` is `len` readable bytes of `mr` (checked by the endpoint's `write`).
            let copy = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
            Out { lead, payload: Payload::Owned(copy), sent, done: report, _src: None }
        } else {
            Out { lead, payload: Payload::Borrowed(ptr, len), sent, done: report, _src: Some(mr.clone()) }
        };
        self.enqueue(out, done)
    }

    /// Sends a control message (copied if it does not leave at once).
    pub(super) fn send_ctrl(&mut self, tag: u64, data: &[u8], done: &mut Vec<Completion>) -> Result<()> {
        self.check_open()?;
        let lead = Lead::new(&Frame::Ctrl { tag, len: data.len() as u64 });
        let sent = self.send_now(lead.as_slice(), data.as_ptr(), data.len())?;
        if sent == HDR + data.len() {
            return Ok(());
        }
        self.enqueue(Out { lead, payload: Payload::Owned(data.to_vec()), sent, done: None, _src: None }, done)
    }

    /// One `sendmsg` of a new frame (header and padding, then at most [`SEND_BURST`] payload bytes)
    /// if no frame is queued before it, else none: how many bytes left (0: the frame must be queued
    /// whole).
    fn send_now(&mut self, lead: &[u8], p: *const u8, n: usize) -> Result<usize> {
        if !self.queue.is_empty() {
            return Ok(0);
        }
        match Self::sendmsg_fd(self.fd, lead, p, n.min(SEND_BURST)) {
            Ok(k) => Ok(k),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(self.lose(format!("send failed: {e}"))),
        }
    }

    /// Queues what `send_now` did not send of a frame. One that did not start (frames were queued
    /// before it, or the socket was full) goes behind them and they are flushed; the rest of a
    /// started one waits for the next poll's flush.
    fn enqueue(&mut self, out: Out, done: &mut Vec<Completion>) -> Result<()> {
        let started = out.sent > 0;
        self.queue.push_back(out);
        if started {
            return Ok(());
        }
        self.flush(done)
    }

    /// Sends queued frames until the socket is full or [`SEND_BURST`] bytes left; reports
    /// `WriteDone` for writes fully sent.
    pub(super) fn flush(&mut self, done: &mut Vec<Completion>) -> Result<()> {
        let mut burst = 0usize;
        while let Some(out) = self.queue.front_mut() {
            if burst >= SEND_BURST {
                return Ok(());
            }
            let (p, n) = out.payload.as_raw();
            let lead = out.lead.len;
            let total = lead + n;
            let sent = out.sent;
            let k = if sent < lead {
                Self::sendmsg_fd(self.fd, &out.lead.as_slice()[sent..], p, n.min(SEND_BURST))
            } else {
                // SAFETY: `p` is valid for `n` bytes (caller's memory under the endpoint contract, or
                // our own vector) and `sent - lead < n`.
                Self::sendmsg_fd(self.fd, &[], unsafe { p.add(sent - lead) }, (n - (sent - lead)).min(SEND_BURST))
            };
            let k = match k {
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(self.lose(format!("send failed: {e}"))),
            };
            out.sent += k;
            burst += k;
            if out.sent < total {
                return Ok(());
            }
            if let Some(ctx) = out.done {
                done.push(Completion::WriteDone { ctx });
            }
            self.queue.pop_front();
        }
        Ok(())
    }

    fn sendmsg_fd(fd: RawFd, hdr: &[u8], p: *const u8, n: usize) -> io::Result<usize> {
        let mut iov = [
            libc::iovec { iov_base: hdr.as_ptr() as *mut libc::c_void, iov_len: hdr.len() },
            libc::iovec { iov_base: p as *mut libc::c_void, iov_len: n },
        ];
        let (iov_ptr, cnt) = if hdr.is_empty() { (iov[1..].as_mut_ptr(), 1) } else { (iov.as_mut_ptr(), 2) };
        // SAFETY: an all-zero msghdr is valid; we set the iovec array, which lives across the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov_ptr;
        msg.msg_iovlen = cnt;
        loop {
            // SAFETY: `fd` is our open socket; the iovecs point at `hdr` and at `n` readable bytes
            // at `p` (the callers' contracts).
            let k = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
            if k >= 0 {
                return Ok(k as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// One nonblocking `recv` of at most `n` bytes to `p`: how many arrived (0: none yet).
    fn recv_into(&mut self, p: *mut u8, n: usize) -> Result<usize> {
        loop {
            // SAFETY: `p` is valid for `n` writable bytes (our buffer, or a registration checked
            // under the region table's read lock by the caller).
            let k = unsafe { libc::recv(self.fd, p as *mut libc::c_void, n, libc::MSG_DONTWAIT) };
            if k > 0 {
                return Ok(k as usize);
            }
            if k == 0 {
                return Err(
                    self.lose("the connection closed without goodbye: the peer's process died or was killed".into())
                );
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(self.lose(format!("receive failed: {e}"))),
            }
        }
    }

    /// Marks the connection lost (unless it already ended) and returns the error naming the peer.
    fn lose(&mut self, why: String) -> Error {
        if self.state == Peer::Open {
            self.state = Peer::Lost(why);
        }
        self.rx = Rx::Done;
        self.loss().unwrap_or_else(|| Error::Peer { peer: self.peer, msg: "tcp: the peer closed its endpoint".into() })
    }

    /// The error naming the peer of a lost connection (`None` while open or after a goodbye).
    pub(super) fn loss(&self) -> Option<Error> {
        match &self.state {
            Peer::Lost(why) => Some(Error::Peer { peer: self.peer, msg: format!("tcp: {why}") }),
            _ => None,
        }
    }

    /// Reads everything that has arrived: writes land in their registrations (`WriteArrived` for
    /// those with immediate), control messages and refusals become completions in `out`; a
    /// refused write queues its refusal for the initiator (sent by the next `flush`).
    pub(super) fn receive(&mut self, regions: &Regions, out: &mut Vec<Completion>) -> Result<()> {
        loop {
            // On an error `self.rx` stays `Done` (the connection is lost).
            let (next, more) = match std::mem::replace(&mut self.rx, Rx::Done) {
                Rx::Done => return Ok(()),
                Rx::Header if self.rend - self.rpos >= HDR => {
                    let h: &[u8; HDR] = self.rbuf[self.rpos..self.rpos + HDR].try_into().expect("HDR bytes");
                    let frame = Frame::decode(h).map_err(|e| self.lose(e.to_string()))?;
                    self.rpos += HDR;
                    (self.begin(frame, regions, out), true)
                }
                Rx::Header => (Rx::Header, self.fill()?),
                Rx::Ctrl { tag, mut left, mut data } => {
                    let take = left.min(self.rend - self.rpos);
                    data.extend_from_slice(&self.rbuf[self.rpos..self.rpos + take]);
                    self.rpos += take;
                    left -= take;
                    if left == 0 {
                        out.push(Completion::Ctrl { peer: self.peer, tag, data });
                        (Rx::Header, true)
                    } else {
                        let more = self.fill()?;
                        (Rx::Ctrl { tag, left, data }, more)
                    }
                }
                Rx::Write { key, addr, left, imm, ctx, refused, skip } if skip > 0 => {
                    let s = skip.min(self.rend - self.rpos);
                    self.rpos += s;
                    let more = if s == skip { true } else { self.fill()? };
                    (Rx::Write { key, addr, left, imm, ctx, refused, skip: skip - s }, more)
                }
                Rx::Write { key, mut addr, mut left, imm, ctx, mut refused, .. } => {
                    let take = left.min((self.rend - self.rpos) as u64) as usize;
                    if take > 0 {
                        if refused.is_none() {
                            let regs = regions.read().unwrap_or_else(PoisonError::into_inner);
                            if regs.contains_key(&key) {
                                // SAFETY: the registration, checked at the header to contain
                                // `[addr, addr + left)`, stays alive while we hold the read lock;
                                // `take` bytes are staged.
                                unsafe { self.copy_staged(addr, take) };
                            } else {
                                refused = Some(Refusal::UnknownKey);
                            }
                        }
                        self.rpos += take;
                        addr += take as u64;
                        left -= take as u64;
                    }
                    if left == 0 {
                        self.end_write(key, imm, ctx, refused, out);
                        (Rx::Header, true)
                    } else if left >= DIRECT_MIN && refused.is_none() && self.rpos == self.rend {
                        // Straight into the registration (alive under the read lock); the next
                        // round ends the write when this `recv` brought its last byte.
                        let regs = regions.read().unwrap_or_else(PoisonError::into_inner);
                        let got = if regs.contains_key(&key) {
                            self.recv_into(addr as *mut u8, left.min(1 << 30) as usize)?
                        } else {
                            refused = Some(Refusal::UnknownKey);
                            0
                        };
                        drop(regs);
                        let more = got > 0 || refused.is_some();
                        let (addr, left) = (addr + got as u64, left - got as u64);
                        (Rx::Write { key, addr, left, imm, ctx, refused, skip: 0 }, more)
                    } else {
                        let more = self.fill()?;
                        (Rx::Write { key, addr, left, imm, ctx, refused, skip: 0 }, more)
                    }
                }
            };
            self.rx = next;
            if !more {
                return Ok(());
            }
        }
    }

    /// Copies the next `n` staged bytes to `addr` (the caller advances `rpos`).
    ///
    /// # Safety
    /// `[addr, addr + n)` lies in a registration that stays alive meanwhile (the caller holds the
    /// region table's read lock), and at least `n` bytes are staged after `rpos`.
    unsafe fn copy_staged(&self, addr: u64, n: usize) {
        // SAFETY: the caller's contract; the staging buffer is ours, the registration is not.
        unsafe { crate::copy::copy_bulk(addr as *mut u8, self.rbuf.as_ptr().add(self.rpos), n) };
    }

    /// Reads more into the staging buffer; `false` when nothing more has arrived.
    fn fill(&mut self) -> Result<bool> {
        if self.rpos == self.rend {
            (self.rpos, self.rend) = (0, 0);
        } else if self.rbuf.len() - self.rend < HDR {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            (self.rpos, self.rend) = (0, self.rend - self.rpos);
        }
        let (p, n) = (self.rbuf[self.rend..].as_mut_ptr(), self.rbuf.len() - self.rend);
        let k = self.recv_into(p, n)?;
        self.rend += k;
        Ok(k > 0)
    }

    /// A header arrived: checks a write against the region table; what to read next.
    fn begin(&mut self, frame: Frame, regions: &Regions, out: &mut Vec<Completion>) -> Rx {
        match frame {
            Frame::Write { key, addr, len, imm, ctx, pad } => {
                let regs = regions.read().unwrap_or_else(PoisonError::into_inner);
                let refused = match regs.get(&key) {
                    None => Some(Refusal::UnknownKey),
                    Some(r) if !r.access.contains(Access::REMOTE_WRITE) => Some(Refusal::NotWritable),
                    Some(r) if addr < r.addr as u64 || addr + len > (r.addr + r.len) as u64 => {
                        Some(Refusal::OutOfBounds)
                    }
                    Some(_) => None,
                };
                let (staged, skip) = ((self.rend - self.rpos) as u64, pad as usize);
                if refused.is_none() && len > 0 && skip as u64 + len <= staged {
                    // The whole payload is staged (a small write): copy it under this lookup's
                    // lock instead of looking the key up again; the Write state then only ends it.
                    self.rpos += skip;
                    // SAFETY: the registration, just checked to contain `[addr, addr + len)`, stays
                    // alive while we hold the read lock; `len` bytes are staged.
                    unsafe { self.copy_staged(addr, len as usize) };
                    self.rpos += len as usize;
                    return Rx::Write { key, addr: addr + len, left: 0, imm, ctx, refused, skip: 0 };
                }
                Rx::Write { key, addr, left: len, imm, ctx, refused, skip }
            }
            Frame::Ctrl { tag, len } => Rx::Ctrl { tag, left: len as usize, data: Vec::with_capacity(len as usize) },
            Frame::Refused { why, key, ctx } => {
                let peer = self.peer;
                let error = match why {
                    Refusal::UnknownKey => Error::InvalidKey { peer, key }.to_string(),
                    Refusal::OutOfBounds => format!("rank {peer} refused the write: outside registration {key:#x}"),
                    Refusal::NotWritable => {
                        format!("rank {peer} refused the write: registration {key:#x} is not remote-writable")
                    }
                };
                out.push(Completion::WriteError { ctx, error });
                Rx::Header
            }
            Frame::Goodbye => {
                self.state = Peer::Closed;
                Rx::Done
            }
        }
    }

    /// A write's last byte was read: notify, or tell the initiator it was refused.
    fn end_write(&mut self, key: u64, imm: Option<u64>, ctx: u64, refused: Option<Refusal>, out: &mut Vec<Completion>) {
        match (refused, imm) {
            (Some(why), _) => {
                tracing::warn!(peer = self.peer, key, ?why, "tcp: refused a write");
                let lead = Lead::new(&Frame::Refused { why, key, ctx });
                self.queue.push_back(Out { lead, payload: Payload::None, sent: 0, done: None, _src: None });
            }
            (None, Some(imm)) => out.push(Completion::WriteArrived { peer: self.peer, imm }),
            (None, None) => {}
        }
    }

    /// Closing: sends what is queued if none of it is the caller's memory (which may be gone),
    /// then a goodbye, and shuts the sending side (bounded by `limit`).
    pub(super) fn close(&mut self, limit: std::time::Duration) {
        if self.state != Peer::Open || self.queue.iter().any(|o| matches!(o.payload, Payload::Borrowed(..))) {
            return;
        }
        self.queue.push_back(Out {
            lead: Lead::new(&Frame::Goodbye),
            payload: Payload::None,
            sent: 0,
            done: None,
            _src: None,
        });
        let until = std::time::Instant::now() + limit;
        let mut ignored = Vec::new();
        while self.sending() && std::time::Instant::now() < until {
            if self.flush(&mut ignored).is_err() {
                return;
            }
            if self.sending() {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::{Arc, RwLock};

    use super::*;
    use crate::keymap::KeyMap;
    use crate::tcp::Region;

    /// A write whose `addr + len` wraps around 2^64 (which the bounds check at the header, and
    /// the copy of a staged payload under it, rely on never seeing) breaks the connection as
    /// malformed; nothing lands.
    #[test]
    fn a_write_past_the_end_of_the_address_space_breaks_the_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut fake = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut conn = Conn::new(1, s).unwrap();
        let mut target = vec![0u8; 64];
        let region = Region { addr: target.as_mut_ptr() as usize, len: target.len(), access: Access::REMOTE_WRITE };
        let regions: Regions = Arc::new(RwLock::new(KeyMap::default()));
        regions.write().unwrap().insert(7, region);
        let frame = Frame::Write { key: 7, addr: u64::MAX - 3, len: 8, imm: Some(1), ctx: 42, pad: 0 };
        fake.write_all(&frame.encode()).unwrap();
        fake.write_all(&[0xab; 8]).unwrap();
        let mut out = Vec::new();
        let t0 = std::time::Instant::now();
        let e = loop {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10), "no error for a wrapping write");
            if let Err(e) = conn.receive(&regions, &mut out) {
                break e;
            }
        };
        assert!(e.to_string().contains("malformed frame") && e.to_string().contains("wraps"), "{e}");
        assert!(out.is_empty(), "{out:?}");
        assert!(target.iter().all(|&b| b == 0));
    }

    /// Padded writes (a large write's payload placed at its target's offset modulo 64) land whole
    /// at every target offset, whether the stream arrives at once or a few bytes at a time, and
    /// the frame after them is read from the right byte.
    #[test]
    fn padded_writes_land_and_the_next_frame_follows() {
        use crate::tcp::wire::pad_for;
        let len = 40 * 1024;
        for (offset, dribble) in [(0usize, false), (64, false), (17, true), (64, true), (112, false)] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut fake = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().unwrap();
            let mut conn = Conn::new(1, s).unwrap();
            let mut target = vec![0u8; len + 256];
            let base = target.as_mut_ptr() as usize;
            let region = Region { addr: base, len: target.len(), access: Access::REMOTE_WRITE };
            let regions: Regions = Arc::new(RwLock::new(KeyMap::default()));
            regions.write().unwrap().insert(7, region);
            let addr = (base + offset) as u64;
            let pad = pad_for(addr, len as u64);
            assert_eq!((HDR + pad as usize) % 64, addr as usize % 64);
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            let mut stream =
                Frame::Write { key: 7, addr, len: len as u64, imm: Some(5), ctx: 1, pad }.encode().to_vec();
            stream.extend(std::iter::repeat_n(0u8, pad as usize));
            stream.extend_from_slice(&payload);
            stream.extend_from_slice(&Frame::Ctrl { tag: 9, len: 3 }.encode());
            stream.extend_from_slice(b"end");
            let sender = std::thread::spawn(move || {
                let chunk = if dribble { 7 } else { stream.len() };
                for part in stream.chunks(chunk) {
                    fake.write_all(part).unwrap();
                }
                fake
            });
            let mut out = Vec::new();
            let t0 = std::time::Instant::now();
            while out.len() < 2 {
                assert!(t0.elapsed() < std::time::Duration::from_secs(10), "offset {offset}: got {out:?}");
                conn.receive(&regions, &mut out).unwrap();
            }
            let _fake = sender.join().unwrap();
            assert!(matches!(out[0], Completion::WriteArrived { imm: 5, .. }), "{:?}", out[0]);
            assert!(matches!(&out[1], Completion::Ctrl { tag: 9, data, .. } if data == b"end"), "{:?}", out[1]);
            assert_eq!(&target[offset..offset + len], &payload[..], "offset {offset}");
            assert!(target[..offset].iter().chain(&target[offset + len..]).all(|&b| b == 0), "offset {offset}");
        }
    }
}
