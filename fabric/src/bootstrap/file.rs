//! A store in a directory (shared by all ranks: local disk for one machine, a shared file
//! system for several). One file per key, written to a temporary name and renamed, so readers
//! never see half a value; `add` takes an exclusive lock on a lock file.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{poll_wait, BootstrapError, Result, Store, MAX_KEY_LEN, MAX_VALUE_LEN};

/// A [`Store`] backed by files in one directory.
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// Uses (and creates if needed) `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Result<FileStore> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(BootstrapError::io(format!("creating {}", dir.display())))?;
        Ok(FileStore { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keys may contain any character; the file name hex-encodes anything but [A-Za-z0-9_-].
    fn path(&self, key: &str) -> Result<PathBuf> {
        if key.len() > MAX_KEY_LEN {
            return Err(BootstrapError::Config(format!("key longer than {MAX_KEY_LEN} bytes")));
        }
        let mut name = String::with_capacity(key.len() + 4);
        name.push_str("k.");
        for b in key.bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                name.push(b as char);
            } else {
                name.push_str(&format!("%{b:02x}"));
            }
        }
        Ok(self.dir.join(name))
    }

    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        match File::open(path) {
            Ok(mut f) => {
                let len = f.metadata().map_err(BootstrapError::io("store file"))?.len();
                if len > MAX_VALUE_LEN as u64 {
                    return Err(BootstrapError::Protocol(format!("{} is larger than the limit", path.display())));
                }
                let mut v = Vec::with_capacity(len as usize);
                f.read_to_end(&mut v).map_err(BootstrapError::io(format!("reading {}", path.display())))?;
                Ok(Some(v))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BootstrapError::io(format!("opening {}", path.display()))(e)),
        }
    }

    fn write(&self, path: &Path, value: &[u8]) -> Result<()> {
        // A name of its own per write: `with_extension` once gave every key of a process the same
        // temporary file ("k.tmp<pid>", the key's encoding starts at the dot), so threads writing
        // two keys at once renamed each other's file.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp{}-{n}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let ctx = || format!("writing {}", tmp.display());
        let mut f = File::create(&tmp).map_err(BootstrapError::io(ctx()))?;
        f.write_all(value).map_err(BootstrapError::io(ctx()))?;
        f.sync_data().map_err(BootstrapError::io(ctx()))?;
        fs::rename(&tmp, path).map_err(BootstrapError::io(format!("renaming to {}", path.display())))
    }
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE_LEN {
            return Err(BootstrapError::Config(format!("value longer than {MAX_VALUE_LEN} bytes")));
        }
        let path = self.path(key)?;
        self.write(&path, value)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(key)?;
        self.read(&path)
    }

    fn wait(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let path = self.path(key)?;
        poll_wait(key, timeout, || self.read(&path))
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let path = self.path(key)?;
        let lock_path = path.with_extension("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(BootstrapError::io(format!("opening {}", lock_path.display())))?;
        lock.lock().map_err(BootstrapError::io(format!("locking {}", lock_path.display())))?;
        let cur = match self.read(&path)? {
            None => 0,
            Some(v) => std::str::from_utf8(&v)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| BootstrapError::Protocol(format!("value of {key:?} is not an integer")))?,
        };
        let n = cur.wrapping_add(delta);
        self.write(&path, n.to_string().as_bytes())?;
        drop(lock);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fabcoll-filestore-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn set_get_wait_add_across_threads() {
        let dir = tmpdir("basic");
        let s = FileStore::new(&dir).unwrap();
        assert_eq!(s.get("a/b c").unwrap(), None);
        s.set("a/b c", b"hello").unwrap();
        assert_eq!(s.get("a/b c").unwrap().unwrap(), b"hello");
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let s = FileStore::new(dir).unwrap();
                    for _ in 0..25 {
                        s.add("counter", 1).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(s.add("counter", 0).unwrap(), 100);
        let e = s.wait("never", Duration::from_millis(50)).unwrap_err();
        assert!(e.to_string().contains("never"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
