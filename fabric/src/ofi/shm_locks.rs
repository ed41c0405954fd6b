//! Spinlocks of libfabric shm regions that a dead process left held: released, so that the survivors spinning on
//! them inside libfabric get back to their errors.
//!
//! libfabric 1.17's shm provider guards each endpoint's region (`/dev/shm/<pid>:<uid>:<index>`) with a
//! process-shared `pthread_spinlock_t` in the region's header (`struct smr_region`, `include/ofi_shm.h`), taken by
//! the region's own progress (`smr_progress_resp`) and by every sender to it (`smr_generic_sendmsg`). A process
//! that dies inside such a section leaves the lock held for good: the region's owner then spins in `fi_cq_read`,
//! every sender to it in `fi_tsend`, and no deadline of ours runs on those threads. CI met it: a rank exiting in
//! the middle of a stream of rendezvous allreduces, while writing into a survivor's region, left that survivor
//! spinning until the test's limit.
//!
//! Once a watched peer's process has ended unannounced, the exit watch (`exits.rs`) samples, every [`SAMPLE`], the
//! lock of our own region and of each dead peer's region (our own shared mapping of the header), and releases one
//! seen held at every sample for [`HELD_FOR`] (`pthread_spin_unlock`). Live holders keep it for microseconds; the
//! one risk, a live holder descheduled for that whole time, exists only in a job that has already lost a rank
//! and is ending its calls with errors. A header whose version is not 1.17's (4) or whose recorded pid is not the
//! expected one is left alone.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// How often the watch samples the locks once a peer died unannounced.
pub(super) const SAMPLE: Duration = Duration::from_millis(2);
/// How long a lock must be seen held, at every sample, before it is released.
pub(super) const HELD_FOR: Duration = Duration::from_millis(500);
/// `SMR_VERSION` of libfabric 1.17, whose header layout [`RegionHead`] copies.
const SMR_VERSION: u8 = 4;

/// The start of libfabric 1.17's `struct smr_region`, up to its lock.
#[repr(C)]
struct RegionHead {
    version: u8,
    resv: u8,
    flags: u16,
    pid: i32,
    cma_cap_peer: u8,
    cma_cap_self: u8,
    max_sar_buf_per_peer: u32,
    base_addr: *mut c_void,
    lock: libc::pthread_spinlock_t,
}

/// The region file name in a shm address blob (`fi_shm://<pid>:<uid>:<index>`, NUL-padded, the scheme
/// optional), if it has that form.
pub(super) fn region_name(blob: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(blob).ok()?.trim_end_matches('\0');
    let name = text.split_once("://").map_or(text, |(_, rest)| rest);
    super::shm_leftovers::parse(name).map(|_| name.to_string())
}

/// The value of an unlocked spinlock, as this libc writes it.
fn unlocked() -> libc::pthread_spinlock_t {
    let mut lock: libc::pthread_spinlock_t = 0;
    // SAFETY: initialises a local spinlock; it is never locked, so never needs destroying.
    unsafe { libc::pthread_spin_init(&mut lock, libc::PTHREAD_PROCESS_SHARED) };
    lock
}

/// The lock of one region, mapped, and since when it has been seen held.
pub(super) struct RegionLock {
    head: NonNull<RegionHead>,
    name: String,
    unlocked: libc::pthread_spinlock_t,
    held_since: Option<Instant>,
}

// SAFETY: the mapping is shared memory owned by this value; the lock word is only touched atomically.
unsafe impl Send for RegionLock {}

impl RegionLock {
    /// Maps the header of region `name` in `/dev/shm`, if it is a libfabric 1.17 region recorded for process
    /// `pid`; else `None` (the file is gone, too short, or of another layout).
    pub(super) fn open(name: &str, pid: u32) -> Option<RegionLock> {
        Self::open_in(std::path::Path::new("/dev/shm"), name, pid)
    }

    fn open_in(dir: &std::path::Path, name: &str, pid: u32) -> Option<RegionLock> {
        let len = size_of::<RegionHead>();
        let fd = rustix::fs::open(dir.join(name), OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).ok()?;
        if rustix::fs::fstat(&fd).ok()?.st_size < len as i64 {
            return None;
        }
        // SAFETY: a new shared mapping of the first `len` bytes of a file at least that long; nothing else in
        // this process refers to it, and `Drop` unmaps it.
        let base = unsafe {
            rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &fd, 0)
        }
        .ok()?;
        let lock = RegionLock {
            head: NonNull::new(base.cast::<RegionHead>())?,
            name: name.to_string(),
            unlocked: unlocked(),
            held_since: None,
        };
        let head = lock.head.as_ptr();
        // SAFETY: `head` points to the mapped header; volatile reads, since other processes write it.
        let (version, owner) =
            unsafe { ((&raw const (*head).version).read_volatile(), (&raw const (*head).pid).read_volatile()) };
        (version == SMR_VERSION && owner as u32 == pid).then_some(lock)
    }

    fn word(&self) -> &AtomicI32 {
        // SAFETY: the lock word is a 4-byte aligned `int` inside the mapping, which lives as long as `self`, and
        // every process touches it only atomically.
        unsafe { AtomicI32::from_ptr((&raw mut (*self.head.as_ptr()).lock).cast()) }
    }

    /// One sample at `now`: releases the lock if it has been seen held at every sample for [`HELD_FOR`]. Returns
    /// whether it released it.
    pub(super) fn sample(&mut self, now: Instant) -> bool {
        if self.word().load(Ordering::Acquire) == self.unlocked {
            self.held_since = None;
            return false;
        }
        let since = *self.held_since.get_or_insert(now);
        if now.duration_since(since) < HELD_FOR {
            return false;
        }
        // SAFETY: the lock word inside our mapping; unlocking is a release store of the unlocked value.
        unsafe { libc::pthread_spin_unlock((&raw mut (*self.head.as_ptr()).lock).cast()) };
        self.held_since = None;
        tracing::warn!(region = %self.name, "ofi shm: released a region lock held for {HELD_FOR:?} after a peer died");
        true
    }
}

impl Drop for RegionLock {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `open_in`, which nothing refers to any more.
        let _ = unsafe { rustix::mm::munmap(self.head.as_ptr().cast(), size_of::<RegionHead>()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file shaped like a region header: `version`, `pid`, and its lock taken when `held`.
    fn fake_region(dir: &std::path::Path, name: &str, version: u8, pid: u32, held: bool) {
        let mut bytes = vec![0u8; 4096];
        bytes[0] = version;
        bytes[4..8].copy_from_slice(&(pid as i32).to_ne_bytes());
        let lock = std::mem::offset_of!(RegionHead, lock);
        let value = if held { !unlocked() & 1 } else { unlocked() };
        bytes[lock..lock + 4].copy_from_slice(&value.to_ne_bytes());
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    /// A held region `1:0:0` of process 77 in a new directory, mapped.
    fn held_region(tag: &str) -> (std::path::PathBuf, RegionLock, Instant) {
        let dir = temp_dir(tag);
        fake_region(&dir, "1:0:0", SMR_VERSION, 77, true);
        let lock = RegionLock::open_in(&dir, "1:0:0", 77).unwrap();
        (dir, lock, Instant::now())
    }

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("fabcoll-shm-locks-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_lock_sits_where_libfabric_1_17_puts_it() {
        assert_eq!(std::mem::offset_of!(RegionHead, pid), 4);
        assert_eq!(std::mem::offset_of!(RegionHead, lock), 24);
    }

    #[test]
    fn names_come_from_address_blobs() {
        assert_eq!(region_name(b"fi_shm://4242:1000:3\0\0\0").as_deref(), Some("4242:1000:3"));
        assert_eq!(region_name(b"4242:0:0").as_deref(), Some("4242:0:0"));
        assert_eq!(region_name(b"fi_shm://4242\0"), None);
        assert_eq!(region_name(&[0xff, 0x00]), None);
    }

    #[test]
    fn only_a_1_17_header_of_the_expected_process_is_mapped() {
        let dir = temp_dir("open");
        fake_region(&dir, "1:0:0", SMR_VERSION, 77, false);
        fake_region(&dir, "2:0:0", SMR_VERSION + 1, 77, false);
        std::fs::write(dir.join("3:0:0"), [SMR_VERSION; 8]).unwrap();
        assert!(RegionLock::open_in(&dir, "1:0:0", 77).is_some());
        assert!(RegionLock::open_in(&dir, "1:0:0", 78).is_none(), "another pid");
        assert!(RegionLock::open_in(&dir, "2:0:0", 77).is_none(), "another version");
        assert!(RegionLock::open_in(&dir, "3:0:0", 77).is_none(), "too short");
        assert!(RegionLock::open_in(&dir, "4:0:0", 77).is_none(), "no file");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_lock_held_at_every_sample_is_released_after_held_for_and_not_before() {
        let (dir, mut lock, t0) = held_region("held");
        assert!(!lock.sample(t0));
        assert!(!lock.sample(t0 + HELD_FOR / 2));
        assert_ne!(lock.word().load(Ordering::Acquire), unlocked(), "still held");
        assert!(lock.sample(t0 + HELD_FOR));
        assert_eq!(lock.word().load(Ordering::Acquire), unlocked(), "released");
        // The release reached the file, as other processes see it.
        let bytes = std::fs::read(dir.join("1:0:0")).unwrap();
        let at = std::mem::offset_of!(RegionHead, lock);
        assert_eq!(i32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap()), unlocked());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_lock_seen_free_in_between_starts_its_count_again() {
        let (dir, mut lock, t0) = held_region("free");
        assert!(!lock.sample(t0));
        lock.word().store(unlocked(), Ordering::Release);
        assert!(!lock.sample(t0 + HELD_FOR / 2));
        lock.word().store(!unlocked() & 1, Ordering::Release);
        assert!(!lock.sample(t0 + HELD_FOR), "held again, seen from here");
        assert!(!lock.sample(t0 + HELD_FOR * 3 / 2), "held for half the time since");
        assert!(lock.sample(t0 + HELD_FOR * 2));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
