//! Regions that libfabric's shm provider left in `/dev/shm` when a process died without closing its
//! endpoint (SIGKILL, a killed-rank test, `fabrun` ending a failed job): removed before this process opens its
//! first shm endpoint.
//!
//! libfabric 1.17 names an endpoint's region `<pid>:<uid>:<endpoint index>` (16 MiB each here). A new endpoint
//! whose name exists takes over the file only if the pid recorded in it is dead (`smr_create` /
//! `smr_retry_map`); when the pid has been reused, the recorded pid is the new process's own, alive, and the
//! endpoint fails with `-FI_EBUSY` ("shm file in use"). With `pid_max` at 32768 and every killed rank leaving its
//! file, a test run met that now and then: a rank of a 4-process ofi:shm test never opened its endpoint.
//!
//! Before its first shm endpoint a process has no region of its own, so every file named with its pid is such a
//! leftover; files of this user whose pid no longer runs are leftovers too (libfabric would take them over as
//! well), and removing them returns their memory. Files of other users, other names and live pids stay.

use std::sync::Once;

/// Removes the leftovers (see the module doc), once per process; later calls do nothing. Call it before the
/// process's first shm endpoint is opened.
pub(crate) fn clear_once() {
    static CLEARED: Once = Once::new();
    CLEARED.call_once(|| {
        clear_in(std::path::Path::new("/dev/shm"), std::process::id(), pid_runs);
    });
}

/// Whether a process `pid` exists (`/proc/<pid>`).
fn pid_runs(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// `(pid, uid)` of a libfabric shm region name `<pid>:<uid>:<index>`, else `None`.
pub(super) fn parse(name: &str) -> Option<(u32, u32)> {
    let mut it = name.split(':');
    let (pid, uid, idx) = (it.next()?, it.next()?, it.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if it.next().is_some() || !digits(pid) || !digits(uid) || !digits(idx) {
        return None;
    }
    Some((pid.parse().ok()?, uid.parse().ok()?))
}

/// Removes from `dir` the regions named for this user whose pid is `me` or does not run (`runs`), owned by this
/// user. Returns how many it removed.
fn clear_in(dir: &std::path::Path, me: u32, runs: impl Fn(u32) -> bool) -> usize {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, owner)) = name.to_str().and_then(parse) else { continue };
        let ours = owner == uid && entry.metadata().is_ok_and(|m| m.uid() == uid && m.is_file());
        if !ours || (pid != me && runs(pid)) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => {
                removed += 1;
                tracing::debug!("ofi shm: removed {} left by dead process {pid}", entry.path().display());
            }
            Err(e) => tracing::debug!("ofi shm: could not remove {}: {e}", entry.path().display()),
        }
    }
    if removed > 0 {
        tracing::info!("ofi shm: removed {removed} region(s) left in {} by dead processes", dir.display());
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_pid_uid_index() {
        assert_eq!(parse("10004:0:0"), Some((10004, 0)));
        assert_eq!(parse("7:1000:12"), Some((7, 1000)));
        for bad in ["", "10004", "10004:0", "10004:0:0:1", "a:0:0", "1:0:", ":0:0", "fi_shm://1:0:0", "1:-1:0"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn removes_own_pid_and_dead_pids_of_this_user_only() {
        let dir = std::env::temp_dir().join(format!("fabcoll-shm-leftovers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: as above.
        let uid = unsafe { libc::getuid() };
        let me = 500;
        let names = [
            format!("{me}:{uid}:0"),      // our pid, reused: a leftover
            format!("{me}:{uid}:3"),      // ditto, a later endpoint of the dead process
            format!("600:{uid}:0"),       // a dead pid: a leftover
            format!("700:{uid}:0"),       // a live pid: its endpoint, kept
            format!("600:{}:0", uid + 1), // another user's name: kept
            "600-notes".to_string(),      // not a region name: kept
            format!("600:{uid}:0:extra"), // not a region name: kept
        ];
        for n in &names {
            std::fs::write(dir.join(n), b"x").unwrap();
        }
        std::fs::create_dir(dir.join(format!("601:{uid}:0"))).unwrap(); // a directory: kept
        let removed = clear_in(&dir, me, |pid| pid == 700);
        assert_eq!(removed, 3);
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        let mut want: Vec<String> = names[3..].to_vec();
        want.push(format!("601:{uid}:0"));
        want.sort();
        assert_eq!(left, want);
        // A missing directory is no error.
        assert_eq!(clear_in(&dir.join("missing"), me, |_| false), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
