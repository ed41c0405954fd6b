//! Which peers' processes have exited, for providers whose peers share our host and process table
//! (`shm`): one thread per endpoint sleeps in `poll(2)` on a pidfd per peer and marks a peer the
//! moment its process ends.
//!
//! Why: libfabric's shm provider (1.17) guards each rank's region with a spinlock in shared memory,
//! taken by the rank's own progress and by every sender to it. A process that dies holding it
//! leaves every later send to it spinning in `fi_tsend` for good, and shm has no liveness probes
//! to name the dead rank. The endpoint asks this watch before it posts anything to a peer (one
//! atomic load) and names the peer instead. What that cannot prevent: a send already spinning when
//! the peer dies, a send posted in the moment between the death and the watch's wake-up, and a
//! rank that dies holding a *survivor's* lock (while sending to it), which leaves the survivor's
//! own progress spinning. For those, the watch releases a lock of our region or of a dead peer's
//! that stays held after a death (`shm_locks.rs`).
//!
//! Cost: one sleeping thread and `p - 1` descriptors per endpoint (closed on drop), nothing on the
//! data path but the load; after a death, a wake-up every 2 ms to sample the locks.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use super::super::shm_locks::{self, RegionLock};
use super::{OfiEndpoint, OfiError};

/// Names and pids of peers' address blobs: `(names, Some(pids))` where the blobs carry a pid.
type SplitBlobs<'a> = (Vec<&'a [u8]>, Option<Vec<Option<u32>>>);

impl OfiEndpoint {
    /// Whether this endpoint's address carries its pid and its peers' exits are watched (shm).
    pub(super) fn watches_exits(&self) -> bool {
        self.attrs.prov_name == "shm"
    }

    /// Peers' address blobs without the pid trailer, and the pids to watch (not our own process:
    /// in-process endpoints share it).
    pub(super) fn split_pids<'a>(&self, addrs: &'a [Vec<u8>]) -> Result<SplitBlobs<'a>, OfiError> {
        if !self.watches_exits() {
            return Ok((addrs.iter().map(Vec::as_slice).collect(), None));
        }
        let me = std::process::id();
        let mut names = Vec::with_capacity(addrs.len());
        let mut pids = Vec::with_capacity(addrs.len());
        for (peer, a) in addrs.iter().enumerate() {
            let Some(cut) = a.len().checked_sub(PID_TRAILER).filter(|&c| c > 0) else {
                return Err(OfiError::Invalid(format!("rank {peer}'s shm address of {} B lacks its pid", a.len())));
            };
            let pid = u32::from_le_bytes(a[cut..].try_into().expect("4 bytes"));
            names.push(&a[..cut]);
            pids.push((peer as u64 != self.rank && pid != me).then_some(pid));
        }
        Ok((names, Some(pids)))
    }

    /// The shm regions the exit watch may rescue locks of: our own, and each peer's whose process is
    /// watched (`shm_locks.rs`); region names from the address blobs `names` (index = rank).
    pub(super) fn lock_regions(&self, names: &[&[u8]], pids: &[Option<u32>]) -> Regions {
        let name = |peer: usize| names.get(peer).and_then(|b| shm_locks::region_name(b));
        Regions {
            own: name(self.rank as usize),
            peers: pids.iter().enumerate().map(|(peer, pid)| pid.and_then(|_| name(peer))).collect(),
        }
    }

    /// Whether `peer`'s process ended without saying goodbye.
    pub(super) fn exited_unannounced(&self, peer: usize) -> bool {
        self.exit_watch.as_ref().is_some_and(|w| w.gone(peer)) && !self.departed.get(peer).copied().unwrap_or(false)
    }

    /// Why `peer` is gone, if its process ended without closing its endpoint after we had spoken
    /// with it. A peer we never exchanged anything with may have left cleanly without reaching us
    /// (a goodbye to it needs its progress to set the connection up), so it is not blamed.
    pub fn exited(&self, peer: usize) -> Option<String> {
        let w = self.exit_watch.as_ref()?;
        (self.alive.get(peer).copied().unwrap_or(false) && self.exited_unannounced(peer))
            .then(|| format!("its process ({}) exited without closing its endpoint", w.pid(peer)))
    }

    /// Refuses anything towards a peer whose process ended unannounced: a post to it could spin for
    /// good on a lock it held (module doc).
    pub(super) fn refuse_exited(&self, peer: usize) -> Result<(), OfiError> {
        if !self.exited_unannounced(peer) {
            return Ok(());
        }
        let pid = self.exit_watch.as_ref().map_or(0, |w| w.pid(peer));
        let why = format!("its process ({pid}) exited without closing its endpoint; nothing more is posted to it");
        Err(OfiError::Peer { peer, source: Box::new(OfiError::Exited(why)) })
    }

    /// A peer whose process ended unannounced ([`OfiEndpoint::exited`]), for a wait that timed out;
    /// reads the CQ dry first, so that a goodbye sent just before the exit counts.
    pub fn crashed_peer(&mut self) -> Result<Option<(usize, String)>, OfiError> {
        if self.exit_watch.as_ref().is_none_or(|w| w.exits() == 0) {
            return Ok(None);
        }
        for _ in 0..64 {
            if self.progress()? == 0 {
                break;
            }
        }
        Ok((0..self.peers.len()).find_map(|p| self.exited(p).map(|why| (p, why))))
    }
}

/// Length of the pid trailer this crate appends to a shm address blob (little-endian `u32`).
pub(super) const PID_TRAILER: usize = 4;

/// Peers' exits, as seen by a watcher thread.
pub(super) struct ExitWatch {
    gone: Arc<[AtomicBool]>,
    /// Bumped by the watcher at every exit it marks: `crashed_peer`'s cheap "any exit yet?".
    exits: Arc<AtomicU32>,
    pids: Vec<u32>,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl ExitWatch {
    /// Watches `pids[i]` for peer `i` (`None`: not watched, e.g. ourselves). A pid that cannot be
    /// opened (another pid namespace, already reaped) is not watched: the deadline still names it.
    /// After the first exit the watch also releases region locks the dead left held (`regions`,
    /// `shm_locks.rs`). `None` when no peer can be watched.
    pub(super) fn start(pids: &[Option<u32>], regions: Regions) -> Option<ExitWatch> {
        let mut watched: Vec<(usize, OwnedFd)> = Vec::new();
        for (peer, pid) in pids.iter().enumerate() {
            let Some(pid) = pid.and_then(|p| Pid::from_raw(p as i32)) else { continue };
            match pidfd_open(pid, PidfdFlags::empty()) {
                Ok(fd) => watched.push((peer, fd)),
                Err(e) => {
                    tracing::debug!(peer, pid = pid.as_raw_nonzero().get(), %e, "ofi: peer's process not watched")
                }
            }
        }
        if watched.is_empty() {
            return None;
        }
        let stop = eventfd(0, EventfdFlags::CLOEXEC)
            .map_err(|e| tracing::debug!(%e, "ofi: no eventfd; peers' exits not watched"))
            .ok()?;
        let gone: Arc<[AtomicBool]> = pids.iter().map(|_| AtomicBool::new(false)).collect();
        let exits = Arc::new(AtomicU32::new(0));
        let wake = stop.try_clone().ok()?;
        let (g, x) = (gone.clone(), exits.clone());
        let pids: Vec<u32> = pids.iter().map(|p| p.unwrap_or(0)).collect();
        let watcher = Watcher { gone: g, exits: x, pids: pids.clone(), regions, locks: Vec::new() };
        let thread = std::thread::Builder::new()
            .name("fabcoll-ofi-exits".into())
            .spawn(move || watcher.run(watched, &wake))
            .map_err(|e| tracing::debug!(%e, "ofi: no thread; peers' exits not watched"))
            .ok()?;
        Some(ExitWatch { gone, exits, pids, stop, thread: Some(thread) })
    }

    /// Whether `peer`'s process has exited.
    pub(super) fn gone(&self, peer: usize) -> bool {
        self.gone.get(peer).is_some_and(|g| g.load(Ordering::Acquire))
    }

    /// How many exits were seen so far.
    pub(super) fn exits(&self) -> u32 {
        self.exits.load(Ordering::Acquire)
    }

    /// The pid watched for `peer`.
    pub(super) fn pid(&self, peer: usize) -> u32 {
        self.pids.get(peer).copied().unwrap_or(0)
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        // The watcher wakes on any write to the eventfd; if the write failed it would sleep on.
        if rustix::io::write(&self.stop, &1u64.to_ne_bytes()).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// The libfabric shm regions whose locks the watch may release after a death (`shm_locks.rs`): our
/// endpoint's, and each peer's by rank (`None`: not known, or not to be touched).
#[derive(Default)]
pub(super) struct Regions {
    pub(super) own: Option<String>,
    pub(super) peers: Vec<Option<String>>,
}

/// The watcher thread's state.
struct Watcher {
    gone: Arc<[AtomicBool]>,
    exits: Arc<AtomicU32>,
    pids: Vec<u32>,
    regions: Regions,
    /// The locks sampled since the first exit: ours, and the dead peers'.
    locks: Vec<RegionLock>,
}

impl Watcher {
    /// Sleeps until a peer's pidfd turns readable (its process ended) or `stop` does; once a peer has
    /// ended, wakes every [`shm_locks::SAMPLE`] as well to sample the region locks.
    fn run(mut self, mut watched: Vec<(usize, OwnedFd)>, stop: &OwnedFd) {
        let sample = Timespec { tv_sec: 0, tv_nsec: shm_locks::SAMPLE.as_nanos() as i64 };
        loop {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(watched.len() + 1);
            fds.push(PollFd::new(stop, PollFlags::IN));
            fds.extend(watched.iter().map(|(_, fd)| PollFd::new(fd, PollFlags::IN)));
            let timeout = (!self.locks.is_empty()).then_some(&sample);
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::debug!(%e, "ofi: poll on peers' pidfds failed; exits no longer watched");
                    return;
                }
            }
            if !fds[0].revents().is_empty() {
                return;
            }
            let ended: Vec<bool> = fds[1..].iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            let mut i = 0;
            watched.retain(|&(peer, _)| {
                let over = ended[i];
                i += 1;
                if over {
                    self.gone[peer].store(true, Ordering::Release);
                    self.exits.fetch_add(1, Ordering::AcqRel);
                    self.watch_locks_of(peer);
                }
                !over
            });
            let now = Instant::now();
            for lock in &mut self.locks {
                lock.sample(now);
            }
        }
    }

    /// Starts sampling the lock of `peer`'s region, and at the first exit our own.
    fn watch_locks_of(&mut self, peer: usize) {
        if self.exits.load(Ordering::Acquire) == 1 {
            let own = self.regions.own.take();
            self.locks.extend(own.and_then(|name| RegionLock::open(&name, std::process::id())));
        }
        let theirs = self.regions.peers.get_mut(peer).and_then(Option::take);
        self.locks.extend(theirs.and_then(|name| RegionLock::open(&name, self.pids[peer])));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_child_that_exits_is_marked_gone_and_a_live_one_is_not() {
        let mut quick = std::process::Command::new("sleep").arg("0.2").spawn().unwrap();
        let mut slow = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let w = ExitWatch::start(&[None, Some(quick.id()), Some(slow.id())], Regions::default()).expect("pidfds open");
        assert!(!w.gone(1) && !w.gone(2));
        let t0 = Instant::now();
        while !w.gone(1) {
            assert!(t0.elapsed() < Duration::from_secs(10), "the exited child was never marked");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w.exits(), 1);
        assert!(!w.gone(2) && !w.gone(0), "a live peer or an unwatched one marked gone");
        assert_eq!(w.pid(2), slow.id());
        slow.kill().unwrap();
        let _ = (quick.wait(), slow.wait());
    }

    #[test]
    fn dropping_the_watch_stops_its_thread_which_owns_the_pidfds() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let w = ExitWatch::start(&[Some(child.id())], Regions::default()).expect("pidfd opens");
        let gone = w.gone.clone();
        assert_eq!(Arc::strong_count(&gone), 3, "the watch, its thread and this test");
        drop(w);
        // Joined: the thread's share (and the pidfds it owned) went with it.
        assert_eq!(Arc::strong_count(&gone), 1);
        child.kill().unwrap();
        let _ = child.wait();
    }

    #[test]
    fn nothing_to_watch_starts_nothing() {
        assert!(ExitWatch::start(&[None, None], Regions::default()).is_none());
    }
}
