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
//! streaming copies off). Streaming stores are weakly ordered: the copy ends with a store fence,
//! so a notification published after it (a Release store) is never seen before the data.

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

/// Copies `n` bytes from `src` to `dst`, with streaming stores from [`stream_threshold`] on.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes, and the ranges must not
/// overlap (as for `std::ptr::copy_nonoverlapping`).
pub unsafe fn copy_bulk(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if n >= stream_threshold() {
        // SAFETY: forwarded from the caller.
        unsafe { stream_copy(dst, src, n) };
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
}

/// [`copy_bulk`] for a copy between processes' memory: shm's writes through a peer's mapping (into
/// its eager slots, scratch and `alloc`ated buffers) and eager messages out of their slot (every
/// fabric), one side of which another core has just written or is about to read. Between addresses that
/// alias modulo 4 KiB (a page-aligned user buffer and a slot), glibc's `memcpy` of a few KiB ran
/// much slower there than at other offsets (`docs/measurements/2026-11-29-p2p.md`); such copies
/// of 2–64 KiB (`ALIASED_MIN`, `ALIASED_MAX`) take a plain vector loop instead.
///
/// # Safety
/// As for [`copy_bulk`].
pub unsafe fn copy_shared(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if (ALIASED_MIN..=ALIASED_MAX).contains(&n) && aliased(dst, src) {
        // SAFETY: forwarded from the caller.
        unsafe { vector_copy(dst, src, n) };
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { copy_bulk(dst, src, n) };
}

/// The sizes [`copy_shared`] copies with [`vector_copy`] when aliased: below, `memcpy` uses its
/// own vector loop; above, the two were level in the measurement and `memcpy` ahead at MiBs.
const ALIASED_MIN: usize = 2048;
const ALIASED_MAX: usize = 64 << 10;

/// Whether `dst` lies within a cache line of `src` modulo 4 KiB.
#[inline]
fn aliased(dst: *mut u8, src: *const u8) -> bool {
    let d = (dst as usize).wrapping_sub(src as usize) & 4095;
    !(64..=4096 - 64).contains(&d)
}

/// A copy in 64-byte rounds of SSE2 loads and stores.
///
/// # Safety
/// As for [`copy_bulk`].
#[cfg(target_arch = "x86_64")]
unsafe fn vector_copy(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: forwarded from the caller; any destination alignment does for unaligned stores.
    let off = unsafe { rounds::<false>(dst, src, 0, n) };
    // SAFETY: the tail, inside both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), n - off) };
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
    let off = unsafe { rounds::<true>(dst, src, head, n) };
    // SAFETY: the remaining `n - off < 64` bytes are inside both ranges; the fence orders the
    // streaming stores before any later store (the caller's notification).
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), n - off);
        _mm_sfence();
    }
}

/// Copies the 64-byte rounds of `[off, n)` with SSE2 (x86-64 baseline) unaligned loads and
/// unaligned stores, or `movntdq` streaming stores when `STREAM`; returns where the rounds end
/// (less than 64 bytes before `n`).
///
/// # Safety
/// As for [`copy_bulk`], for `n` bytes; when `STREAM`, `dst + off` is 16-byte aligned.
#[cfg(target_arch = "x86_64")]
unsafe fn rounds<const STREAM: bool>(dst: *mut u8, src: *const u8, mut off: usize, n: usize) -> usize {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_stream_si128};
    while n.saturating_sub(off) >= 64 {
        // SAFETY: `off + 64 <= n`: the 64 bytes at `off` are inside both ranges; a streaming
        // store's address is 16-byte aligned (the caller's, and rounds of 64 keep it).
        unsafe {
            let s = src.add(off) as *const __m128i;
            let d = dst.add(off) as *mut __m128i;
            let v =
                [_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3))];
            for (i, v) in v.into_iter().enumerate() {
                if STREAM {
                    _mm_stream_si128(d.add(i), v);
                } else {
                    _mm_storeu_si128(d.add(i), v);
                }
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

    /// The vector loop takes aliased copies of 2–64 KiB: exact at aliased and other distances,
    /// at every length around its rounds and limits.
    #[test]
    fn shared_copy_is_exact_aliased_or_not() {
        let src: Vec<u8> = (0..(70 << 10) as u32).map(|i| (i * 13 + 1) as u8).collect();
        let base = src.as_ptr() as usize;
        for n in [2047usize, 2048, 2049, 4096, 5003, 8191, 8192, 65535, 65536, 65537] {
            // Destination offsets that make dst − src ≡ 0, 63, 64, 100, 4095 (mod 4 KiB).
            for dist in [0usize, 63, 64, 100, 4095] {
                let mut dst = vec![0x55u8; n + 2 * 4096];
                let at = (base + dist).wrapping_sub(dst.as_ptr() as usize) & 4095;
                assert_eq!(aliased(dst[at..].as_mut_ptr(), src.as_ptr()), !(64..=4032).contains(&dist));
                // SAFETY: both ranges are inside their vectors and do not overlap.
                unsafe { copy_shared(dst.as_mut_ptr().add(at), src.as_ptr(), n) };
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
