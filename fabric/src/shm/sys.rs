//! The few Linux calls the shm backend needs (memfd, mmap, /proc fd open, process_vm_writev,
//! futex), each turning its return code into a typed [`Error`] — the mio `syscall!` habit.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::copy;
use crate::error::{Error, Result};

/// A shared read/write mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Mmap is an owned (ptr, len) of a MAP_SHARED mapping; concurrent access goes through
// atomics or raw-pointer copies governed by the fabric contract.
unsafe impl Send for Mmap {}
// SAFETY: as above.
unsafe impl Sync for Mmap {}

impl Mmap {
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: `ptr/len` came from a successful mmap and are unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// A memfd of `len` bytes (zero-filled by the kernel).
pub(crate) fn memfd(name: &str, len: usize) -> Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| Error::invalid("memfd name contains NUL"))?;
    // SAFETY: valid C string; flags are constants.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::last_os(format!("memfd_create({name})")));
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let off = libc::off_t::try_from(len).map_err(|_| Error::invalid(format!("memfd size {len} too large")))?;
    // SAFETY: valid fd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), off) } != 0 {
        return Err(Error::last_os(format!("ftruncate(memfd {name}, {len})")));
    }
    Ok(fd)
}

/// Maps `len` bytes of `fd` shared, read/write.
pub(crate) fn map_shared(fd: RawFd, len: usize) -> Result<Mmap> {
    if len == 0 {
        return Ok(Mmap { ptr: std::ptr::NonNull::dangling().as_ptr(), len: 0 });
    }
    // SAFETY: fresh mapping chosen by the kernel; fd validity is checked by the kernel.
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os(format!("mmap({len} bytes, MAP_SHARED)")));
    }
    Ok(Mmap { ptr: p.cast(), len })
}

/// Opens another process's descriptor through `/proc/<pid>/fd/<fd>` (same user, ptrace-able).
/// The error says so when the process has exited (a peer that failed while the job started).
pub(crate) fn open_proc_fd(pid: u32, fd: u32) -> Result<OwnedFd> {
    let path = format!("/proc/{pid}/fd/{fd}");
    std::fs::OpenOptions::new().read(true).write(true).open(&path).map(OwnedFd::from).map_err(|source| {
        // A process closes its descriptors a moment before it becomes a zombie: give it 100 ms.
        let exited = source.kind() == std::io::ErrorKind::NotFound
            && (0..20).any(|_| {
                let gone = !pid_alive(pid);
                if !gone {
                    std::thread::sleep(Duration::from_millis(5));
                }
                gone
            });
        let why = if exited { format!("the peer's process {pid} has exited") } else { "peer's shared segment".into() };
        Error::Os { op: format!("open {path} ({why})"), source }
    })
}

/// Size of the file behind `fd`.
pub(crate) fn fd_len(fd: RawFd) -> Result<usize> {
    // SAFETY: zeroed stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Error::last_os("fstat(shared segment)"));
    }
    usize::try_from(st.st_size).map_err(|_| Error::invalid("negative segment size"))
}

/// Where [`vm_write`] stages a copy at a slow distance: a buffer allocated on first use.
#[derive(Default)]
pub(crate) struct Stage(Vec<u8>);

/// The bytes [`vm_write`] stages at a time (a multiple of the page, so every piece keeps the
/// destination's page offset).
const STAGE: usize = 256 << 10;

/// Copies `len` bytes from our `src` into `pid`'s address `dst`.
///
/// The kernel copies with a string instruction, which is several times slower when `dst` lies
/// 1–63 bytes past `src` modulo 4 KiB ([`copy::slow_string_distance`]). There the bytes go in
/// pieces of [`STAGE`] through `stage`, at a page offset 2 KiB before the destination's: one more
/// copy in our caches, at a fast distance to both ends.
///
/// # Safety
/// `[src, src+len)` must be readable in this process.
pub(crate) unsafe fn vm_write(
    pid: u32,
    src: *const u8,
    dst: u64,
    len: usize,
    peer: usize,
    stage: &mut Stage,
) -> Result<()> {
    if !copy::slow_string_distance(dst as usize, src as usize) {
        // SAFETY: forwarded from the caller.
        return unsafe { vm_write_direct(pid, src, dst, len, peer) };
    }
    if stage.0.is_empty() {
        stage.0 = vec![0; STAGE + 4096];
    }
    let base = stage.0.as_mut_ptr();
    let mut done = 0;
    while done < len {
        let n = STAGE.min(len - done);
        let at = (dst as usize + done).wrapping_sub(2048).wrapping_sub(base as usize) & 4095;
        // SAFETY: `at + n <= 4095 + STAGE`, inside the stage; the source piece lies in the caller's
        // range; the stage is ours, apart from it, and readable once written.
        unsafe {
            let piece = base.add(at);
            // Cached: the kernel reads the stage at once (a streaming copy would send it to memory).
            copy::copy_cached(piece, src.add(done), n);
            vm_write_direct(pid, piece, dst + done as u64, n, peer)?;
        }
        done += n;
    }
    Ok(())
}

/// [`vm_write`] straight from `src`, looping over partial transfers.
///
/// # Safety
/// As for [`vm_write`].
unsafe fn vm_write_direct(pid: u32, src: *const u8, dst: u64, len: usize, peer: usize) -> Result<()> {
    // SAFETY: forwarded; a write only reads the local range.
    unsafe { vm_copy(Way::Write, pid, src as *mut u8, dst, len, peer) }
}

/// Copies `len` bytes at `src` in process `pid` to `dst` here with `process_vm_readv`, looping
/// over partial transfers; errors name `peer` (a gone process, no ptrace permission).
///
/// # Safety
/// `[dst, dst+len)` must be writable memory of this process that nothing else uses meanwhile.
pub(crate) unsafe fn vm_read(pid: u32, src: u64, dst: *mut u8, len: usize, peer: usize) -> Result<()> {
    // SAFETY: forwarded.
    unsafe { vm_copy(Way::Read, pid, dst, src, len, peer) }
}

/// Which way [`vm_copy`] copies.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Way {
    /// From this process into the other one.
    Write,
    /// From the other process into this one.
    Read,
}

/// `len` bytes between `local` here and `remote` in process `pid`, either way, looping over
/// partial transfers; errors name `peer`.
///
/// # Safety
/// `[local, local+len)` must be readable (a write) or writable and otherwise unused (a read).
unsafe fn vm_copy(way: Way, pid: u32, local: *mut u8, remote: u64, len: usize, peer: usize) -> Result<()> {
    let (call, dir, verb) = match way {
        Way::Write => ("process_vm_writev", "into", "write into"),
        Way::Read => ("process_vm_readv", "from", "read from"),
    };
    let mut done = 0usize;
    while done < len {
        // SAFETY: caller guarantees the local range; `done < len` keeps it in bounds.
        let l = libc::iovec { iov_base: unsafe { local.add(done) } as *mut libc::c_void, iov_len: len - done };
        let r = libc::iovec { iov_base: (remote as usize + done) as *mut libc::c_void, iov_len: len - done };
        // SAFETY: one valid local iovec (caller); the remote side is checked by the kernel.
        let n = unsafe {
            match way {
                Way::Write => libc::process_vm_writev(pid as libc::pid_t, &l, 1, &r, 1, 0),
                Way::Read => libc::process_vm_readv(pid as libc::pid_t, &l, 1, &r, 1, 0),
            }
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            let msg = match err.raw_os_error() {
                Some(libc::ESRCH) => format!("process {pid} is gone ({call}: {err})"),
                Some(libc::EPERM) => format!("not allowed to {verb} process {pid} (ptrace permission): {err}"),
                _ => format!("{call} {dir} pid {pid} at {remote:#x}+{done}: {err}"),
            };
            return Err(Error::Peer { peer, msg });
        }
        if n == 0 {
            return Err(Error::Peer { peer, msg: format!("{call} {dir} pid {pid} made no progress") });
        }
        done += n as usize;
    }
    Ok(())
}

/// Size of a transparent huge page on x86-64 and arm64 (4 KiB base pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Backs the whole 2 MiB pages inside `[ptr, ptr+len)` with transparent huge pages: advises
/// them (`MADV_HUGEPAGE`, for pages faulted in later) and collapses the ones already there
/// (`MADV_COLLAPSE`, Linux 6.1; it copies them, at a few times a `memcpy`'s cost).
/// Returns the bytes advised (0 when no whole huge page lies inside). Contents are unchanged; an
/// error (an older kernel, THP off, a mapping that is not private anonymous memory, no huge page
/// free) changes nothing that matters and is only worth a log line.
pub(crate) fn back_with_huge_pages(ptr: *mut u8, len: usize) -> std::io::Result<usize> {
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    if end <= start {
        return Ok(0);
    }
    for advice in [libc::MADV_HUGEPAGE, libc::MADV_COLLAPSE] {
        // SAFETY: both advices keep the range's contents (the kernel copies pages into a huge
        // page under the mapping's lock, and skips pages others hold pinned); the range lies
        // inside memory the caller registered.
        if unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(end - start)
}

/// True if `pid` still exists and is not a zombie (slow path only: reads `/proc/<pid>/stat`).
pub(crate) fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence/permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // "pid (comm) S ..." — the state follows the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) != Some('Z'),
        Err(_) => false,
    }
}

/// FUTEX_WAIT on a word in shared memory while it equals `expected`, at most `timeout`.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid aligned u32 for the call's duration; the non-private op works across
    // processes mapping the same page. Spurious returns (EAGAIN, EINTR, ETIMEDOUT) are fine: the
    // caller re-polls.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const _, 0, 0) };
}

/// FUTEX_WAKE all waiters on a shared word.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: valid aligned u32; waking has no memory effects.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
}

/// The CPU this thread runs on (`sched_getcpu`, served by the vDSO or rseq: no system call), or
/// `0xffff_ffff` if the kernel cannot tell.
pub(crate) fn current_cpu() -> u64 {
    // SAFETY: no arguments, no memory effects.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).map_or(0xffff_ffff, u64::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_an_exited_process_s_descriptor_says_it_exited() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // A zombie (exited, not yet reaped), then gone.
        while pid_alive(pid) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let e = open_proc_fd(pid, 0).map(drop).unwrap_err().to_string();
        assert!(e.contains(&format!("the peer's process {pid} has exited")), "{e}");
        child.wait().unwrap();
        let e = open_proc_fd(pid, 0).map(drop).unwrap_err().to_string();
        assert!(e.contains(&format!("the peer's process {pid} has exited")), "{e}");
        let e = open_proc_fd(std::process::id(), 999_999).map(drop).unwrap_err().to_string();
        assert!(e.contains("peer's shared segment") && !e.contains("exited"), "{e}");
    }

    /// Only the whole huge pages inside the range are advised, and the contents stay. (Whether
    /// the kernel backs them is `tests/shm_procs.rs`' `reused_heap_buffers_get_huge_pages`.)
    #[test]
    fn huge_pages_cover_the_whole_pages_inside_and_keep_the_contents() {
        let buf: Vec<u64> = (0..(7 * HUGE_PAGE / 8) as u64).collect();
        let (ptr, len) = (buf.as_ptr() as *mut u8, buf.len() * 8);
        let inside = ((ptr as usize + len) / HUGE_PAGE - (ptr as usize).div_ceil(HUGE_PAGE)) * HUGE_PAGE;
        assert!(inside >= 5 * HUGE_PAGE);
        match back_with_huge_pages(ptr, len) {
            Ok(n) => assert_eq!(n, inside),
            // A kernel before 6.1 (no MADV_COLLAPSE) or without THP: refused, nothing changed.
            Err(e) => assert!(matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EAGAIN | libc::ENOMEM)), "{e}"),
        }
        assert!(buf.iter().enumerate().all(|(i, &v)| v == i as u64), "contents changed");
        let within = (ptr as usize).next_multiple_of(HUGE_PAGE) as *mut u8;
        assert_eq!(back_with_huge_pages(within, HUGE_PAGE - 1).unwrap(), 0, "no whole page: nothing advised");
    }

    /// A write into this process's own memory (as a peer's would be) is exact at slow distances
    /// (staged, in several pieces) and fast ones, and writes nothing around the range.
    #[test]
    fn writes_into_a_process_are_exact_staged_or_not() {
        let src: Vec<u8> = (0..(600 << 10) as u32).map(|i| (i * 31 + 7) as u8).collect();
        let base = src.as_ptr() as usize;
        let mut stage = Stage::default();
        for n in [0usize, 8, 4096, 70_001, STAGE, STAGE + 1, 2 * STAGE + 4097] {
            for dist in [0usize, 16, 63, 64, 4080] {
                let mut dst = vec![0x5Au8; n + 2 * 4096];
                let at = (base + dist).wrapping_sub(dst.as_ptr() as usize) & 4095;
                let to = dst[at..].as_mut_ptr() as u64;
                // SAFETY: the source range lies in `src`.
                unsafe { vm_write(std::process::id(), src.as_ptr(), to, n, 0, &mut stage) }.unwrap();
                assert_eq!(&dst[at..at + n], &src[..n], "n {n} distance {dist}");
                assert!(
                    dst[..at].iter().chain(&dst[at + n..]).all(|&b| b == 0x5A),
                    "wrote outside, n {n} distance {dist}"
                );
            }
        }
        assert_eq!(stage.0.is_empty(), !cfg!(target_arch = "x86_64"), "slow distances were staged");
    }

    #[test]
    fn reads_from_a_process_are_exact_and_name_a_gone_one() {
        let src: Vec<u8> = (0..70_001u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut dst = vec![0x5Au8; src.len() + 2];
        // SAFETY: `dst[1..]` holds `src.len()` bytes, used by nothing else meanwhile.
        unsafe { vm_read(std::process::id(), src.as_ptr() as u64, dst[1..].as_mut_ptr(), src.len(), 3) }.unwrap();
        assert_eq!(&dst[1..=src.len()], &src[..]);
        assert_eq!((dst[0], dst[src.len() + 1]), (0x5A, 0x5A), "read outside the range");
        // No process has pid 2^22 + 1 (above Linux's pid_max limit).
        // SAFETY: as above.
        let e = unsafe { vm_read(4_194_305, src.as_ptr() as u64, dst.as_mut_ptr(), 8, 3) }.unwrap_err();
        assert!(matches!(&e, Error::Peer { peer: 3, msg } if msg.contains("is gone")), "{e}");
    }
}
