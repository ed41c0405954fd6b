//! Bulk copies between buffers of the load/store fabrics (shm mappings, in-process ranks) and the
//! executor's local copies.
//!
//! Above a size threshold a copy uses non-temporal (streaming) stores: the destination bypasses
//! the writer's caches, so a copy does not first read every destination line (no read-for-
//! ownership) and does not evict the working set of the collective. glibc's `memcpy` derives its
//! own non-temporal threshold from the shared cache size and may never switch for
//! collective-sized buffers (`docs/measurements/2026-11-27-copy-shm.md`).
//!
//! The threshold is [`DEFAULT_STREAM_THRESHOLD`], or `FABCOLL_STREAM_COPY` (bytes; `0` turns
//! streaming copies off). It applies to the message a copy is part of ([`as_part_of`]): the two
//! halves of a shared copy, each below it, fill the caches as the whole message would. Streaming
//! stores are weakly ordered: the copy ends with a store fence, so a notification published after
//! it (a Release store) is never seen before the data.
//!
//! Below it, a copy whose destination lies 1–63 bytes past its source modulo 4 KiB
//! ([`slow_string_distance`]) goes around `rep movsb`, which is many times slower there; such
//! distances are common, as glibc puts large heap blocks 16 bytes into a page and registered
//! memory, slots and scratch start on one. Copies by the kernel (`process_vm_writev`) meet the
//! same case; shm stages them (`shm::sys::vm_write`).

use std::sync::OnceLock;

use crate::settings;

/// Copies of at least this many bytes use streaming stores: a single copy gains from them at
/// smaller sizes, but in a collective a destination of a few MiB still fits the L3 and its reader
/// (the peer) finds it there (`docs/measurements/2026-11-27-copy-shm.md`).
pub const DEFAULT_STREAM_THRESHOLD: usize = 8 << 20;

/// The streaming threshold in force (`usize::MAX` when streaming copies are off).
pub fn stream_threshold() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| match settings::FABCOLL_STREAM_COPY.get() {
        Ok(Some(0)) => usize::MAX,
        Ok(Some(n)) => n,
        Ok(None) => DEFAULT_STREAM_THRESHOLD,
        Err(e) => {
            tracing::warn!("{e}; using {DEFAULT_STREAM_THRESHOLD}");
            DEFAULT_STREAM_THRESHOLD
        }
    })
}

/// Pieces smaller than this never stream, whatever message they are part of.
const MIN_STREAMED_PART: usize = 64 << 10;

thread_local! {
    /// The size of the message this thread's copies are part of ([`as_part_of`]); 0 outside one.
    static MESSAGE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f` with this thread's copies counted as parts of a message of `bytes` bytes: from
/// 64 KiB (`MIN_STREAMED_PART`) on they stream when the message reaches [`stream_threshold`], whatever
/// their own size (an 8 MiB message shared as two 4 MiB halves, one copied by its writer and one
/// by its reader, streamed neither: `docs/measurements/2026-12-01-issue34-pass7.md`).
pub fn as_part_of<R>(bytes: usize, f: impl FnOnce() -> R) -> R {
    /// Puts the outer message back, also when `f` unwinds.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            MESSAGE.set(self.0);
        }
    }
    let _outer = Restore(MESSAGE.replace(bytes));
    f()
}

/// Whether a copy of `n` bytes streams: it reaches [`stream_threshold`], or is a large enough part
/// of a message that does ([`as_part_of`]).
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn streams(n: usize) -> bool {
    let t = stream_threshold();
    n >= t || n >= MIN_STREAMED_PART && MESSAGE.get() >= t
}

/// Copies `n` bytes from `src` to `dst`: with streaming stores from [`stream_threshold`] on (for
/// the copy or the message it is part of, [`as_part_of`]), and around `rep movsb` at a
/// [`slow_string_distance`].
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes, and the ranges must not
/// overlap (as for `std::ptr::copy_nonoverlapping`).
pub unsafe fn copy_bulk(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if streams(n) {
        // SAFETY: forwarded from the caller.
        unsafe { stream_copy(dst, src, n) };
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { copy_cached(dst, src, n) };
}

/// [`copy_bulk`] without streaming stores, for a destination that is read again at once (a
/// staging buffer): around `rep movsb` at a [`slow_string_distance`].
///
/// # Safety
/// As for [`copy_bulk`].
pub unsafe fn copy_cached(dst: *mut u8, src: *const u8, n: usize) {
    if n > PIECE && slow_string_distance(dst as usize, src as usize) {
        // SAFETY: forwarded from the caller.
        unsafe { copy_in_pieces(dst, src, n) };
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
}

/// Whether a copy from `src` to `dst` may be a string instruction's slow case: `dst` lies 1–63
/// bytes past `src` modulo 4 KiB. On this project's AMD EPYC (Zen 3, FSRM) `rep movsb` runs an
/// order of magnitude slower there; glibc's `memcpy` uses it from about 2 KiB to half the L2, and
/// the kernel's copies for `process_vm_writev` at every size. Other distances, and copies
/// without `rep movsb`, run at full speed (`docs/measurements/2026-11-29-copy-distance.md`).
/// Pages are 4 KiB, so the distance is the same for any two mappings of the same memory.
#[inline]
pub fn slow_string_distance(dst: usize, src: usize) -> bool {
    cfg!(target_arch = "x86_64") && (1..64).contains(&(dst.wrapping_sub(src) & 4095))
}

/// The piece [`copy_bulk`] hands to `memcpy` at a slow distance: at or below glibc's lowest
/// `rep movsb` threshold (2 KiB), so each piece takes its vector loop.
const PIECE: usize = 2048;

/// `memcpy` in pieces of [`PIECE`] bytes.
///
/// # Safety
/// As for [`copy_bulk`].
unsafe fn copy_in_pieces(dst: *mut u8, src: *const u8, n: usize) {
    let mut off = 0;
    while off < n {
        let k = PIECE.min(n - off);
        // SAFETY: `off + k <= n`: inside both ranges (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), k) };
        off += k;
    }
}

/// Streaming copy: an unaligned head up to 16-byte alignment of `dst`, 64-byte rounds of SSE2
/// (x86-64 baseline) loads and `movntdq` stores, a tail, then `sfence`.
///
/// # Safety
/// As for [`copy_bulk`].
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::_mm_sfence;
    let head = dst.align_offset(16).min(n);
    // SAFETY: `head <= n`, inside both ranges (caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    // SAFETY: forwarded from the caller; `dst + head` is 16-byte aligned.
    let off = unsafe { stream_rounds(dst, src, head, n) };
    // SAFETY: the remaining `n - off < 64` bytes are inside both ranges; the fence orders the
    // streaming stores before any later store (the caller's notification).
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), n - off);
        _mm_sfence();
    }
}

/// Copies the 64-byte rounds of `[off, n)` with SSE2 (x86-64 baseline) unaligned loads and
/// `movntdq` streaming stores; returns where the rounds end (less than 64 bytes before `n`).
///
/// # Safety
/// As for [`copy_bulk`], for `n` bytes; `dst + off` is 16-byte aligned.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_rounds(dst: *mut u8, src: *const u8, mut off: usize, n: usize) -> usize {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    while n.saturating_sub(off) >= 64 {
        // SAFETY: `off + 64 <= n`: the 64 bytes at `off` are inside both ranges; a streaming
        // store's address is 16-byte aligned (the caller's, and rounds of 64 keep it).
        unsafe {
            let s = src.add(off) as *const __m128i;
            let d = dst.add(off) as *mut __m128i;
            let v =
                [_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3))];
            for (i, v) in v.into_iter().enumerate() {
                _mm_stream_si128(d.add(i), v);
            }
        }
        off += 64;
    }
    off
}

/// Maps every page of `[ptr, ptr+len)` for writing now (Linux `MADV_POPULATE_WRITE`), so the
/// first stores into fresh (shared) memory do not take a page fault each inside a latency-bound
/// loop (a minor fault costs microseconds on a VM). Contents are unchanged, so memory that peers
/// use concurrently may be populated. Best effort: where the kernel lacks it, nothing happens.
///
/// # Safety
/// `[ptr, ptr+len)` must lie in read/write mappings of this process.
pub unsafe fn populate_write(ptr: *mut u8, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let start = ptr as usize / page * page;
    let end = (ptr as usize + len).div_ceil(page) * page;
    // SAFETY: the range covers only pages of the caller's mappings (rounded to whole pages, which
    // are mapped as a whole); MADV_POPULATE_WRITE faults them in without changing their contents.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        tracing::debug!("madvise(MADV_POPULATE_WRITE) failed: {}", std::io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part of a message at the threshold streams from `MIN_STREAMED_PART` on, inside the scope
    /// only; scopes nest.
    #[test]
    fn parts_of_a_large_message_stream() {
        let t = stream_threshold();
        if t == usize::MAX || t <= MIN_STREAMED_PART {
            return; // streaming turned off, or every part streams anyway (FABCOLL_STREAM_COPY)
        }
        let half = t / 2;
        assert!(!streams(half) && streams(t));
        assert!(as_part_of(t, || streams(half) && !streams(MIN_STREAMED_PART - 1)));
        assert!(as_part_of(t, || as_part_of(half, || !streams(half)) && streams(half)));
        assert!(!as_part_of(t - 1, || streams(half)));
        assert!(!streams(half), "the scope ended");
    }

    #[test]
    fn streaming_copy_is_exact_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for s_off in [0usize, 1, 5, 16] {
            for d_off in [0usize, 3, 8, 15] {
                for n in [0usize, 1, 15, 16, 63, 64, 65, 200, 1000, 4000] {
                    let mut dst = vec![0xAAu8; 4096 + 32];
                    let n = n.min(4096 - s_off);
                    // SAFETY: both ranges are inside their vectors and do not overlap.
                    unsafe { stream_copy(dst.as_mut_ptr().add(d_off), src.as_ptr().add(s_off), n) };
                    assert_eq!(&dst[d_off..d_off + n], &src[s_off..s_off + n], "s_off {s_off} d_off {d_off} n {n}");
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "wrote before the range");
                    assert!(dst[d_off + n..].iter().all(|&b| b == 0xAA), "wrote past the range");
                }
            }
        }
    }

    /// Copies at slow distances go in pieces: exact at those and other distances, at every
    /// length around the piece.
    #[test]
    fn bulk_copy_is_exact_at_slow_distances_or_not() {
        let src: Vec<u8> = (0..(70 << 10) as u32).map(|i| (i * 13 + 1) as u8).collect();
        let base = src.as_ptr() as usize;
        for n in [2047usize, 2048, 2049, 4096, 5003, 8191, 8192, 65535, 65536, 65537] {
            // Destination offsets that make dst − src ≡ 0, 1, 16, 63, 64, 100, 4095 (mod 4 KiB).
            for dist in [0usize, 1, 16, 63, 64, 100, 4095] {
                let mut dst = vec![0x55u8; n + 2 * 4096];
                let at = (base + dist).wrapping_sub(dst.as_ptr() as usize) & 4095;
                let slow = slow_string_distance(dst[at..].as_ptr() as usize, base);
                assert_eq!(slow, cfg!(target_arch = "x86_64") && (1..=63).contains(&dist), "distance {dist}");
                // SAFETY: both ranges are inside their vectors and do not overlap.
                unsafe { copy_bulk(dst.as_mut_ptr().add(at), src.as_ptr(), n) };
                assert_eq!(&dst[at..at + n], &src[..n], "n {n} distance {dist}");
                assert!(dst[..at].iter().all(|&b| b == 0x55), "wrote before the range");
                assert!(dst[at + n..].iter().all(|&b| b == 0x55), "wrote past the range");
            }
        }
    }

    #[test]
    fn bulk_copy_above_the_threshold_is_exact() {
        let n = DEFAULT_STREAM_THRESHOLD + 77;
        let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; n + 1];
        // SAFETY: both ranges are inside their vectors and do not overlap.
        unsafe { copy_bulk(dst.as_mut_ptr().add(1), src.as_ptr(), n) };
        assert_eq!(&dst[1..], &src[..]);
    }
}
