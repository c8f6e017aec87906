//! The spare: a file in the dumps' directory, as long as the ring, whose
//! pages are already in the page cache, so that a dump writes over memory
//! the kernel holds instead of asking it for new pages.
//!
//! Why: writing a 180-MiB window into a new file took 0.5–0.7 s on this
//! project's VMs whenever the kernel had to find fresh pages (a guest's
//! free pages are backed by the host again on first touch), 40–60 ms when
//! it reused pages just freed, and 20–30 ms over a file's cached pages
//! (measured with `dd`, 2 CPUs saturated; docs/PERFORMANCE.md §6d). The
//! dump is renamed out of the spare ([`Spare::take`]), written over and
//! cut to its length; the spare is then grown again off the dump's path
//! ([`Spare::grow`], on a thread of its own) or made of a dump that the
//! caps remove ([`Spare::recycle`]).
//!
//! Invariants: the spare is created private (0600) in the private dumps'
//! directory, so a dump made of it is as private as a new one; a file is
//! handed to one dump at most (taken under the lock, which growing takes
//! for each chunk); a spare left by a recorder that died is removed by the
//! next one that uses the directory.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The spare file's name in the dumps' directory: `.spare-PID`.
const PREFIX: &str = ".spare-";

/// How much a growing spare writes at a time (the lock is taken per chunk).
const CHUNK: usize = 1 << 20;

/// A recorder's spare file.
#[derive(Debug)]
pub struct Spare {
    path: PathBuf,
    file: Mutex<Option<(File, u64)>>,
}

impl Spare {
    /// The spare of this process in `dir` (none yet); the spares of
    /// recorders no longer running are removed.
    pub fn new(dir: &Path) -> Spare {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(pid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix(PREFIX))
                    .and_then(|p| p.parse::<u32>().ok())
                else {
                    continue;
                };
                if !Path::new(&format!("/proc/{pid}")).exists() || pid == std::process::id() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Spare {
            path: dir.join(format!("{PREFIX}{}", std::process::id())),
            file: Mutex::new(None),
        }
    }

    /// The spare, renamed to `to` and open for writing over; None when
    /// there is none (or it could not be renamed).
    pub fn take(&self, to: &Path) -> Option<File> {
        let mut held = self.file.lock().ok()?;
        let (file, _) = held.take()?;
        match std::fs::rename(&self.path, to) {
            Ok(()) => Some(file),
            Err(_) => {
                let _ = std::fs::remove_file(&self.path);
                None
            }
        }
    }

    /// Bytes the spare holds now.
    pub fn len(&self) -> u64 {
        self.file
            .lock()
            .ok()
            .and_then(|f| f.as_ref().map(|(_, len)| *len))
            .unwrap_or(0)
    }

    /// Grows the spare to at least `target` bytes, a chunk at a time
    /// (creating it when there is none). Stops early when a dump takes it.
    pub fn grow(&self, target: u64) -> std::io::Result<()> {
        let zeros = vec![0u8; CHUNK];
        let mut first = true;
        loop {
            let mut held = self
                .file
                .lock()
                .map_err(|_| std::io::Error::other("the spare's lock is poisoned"))?;
            if held.is_none() {
                if !first {
                    // Taken by a dump while growing: the next call grows.
                    return Ok(());
                }
                *held = Some((idleflow_format::create_private(&self.path)?, 0));
            }
            first = false;
            let Some((file, len)) = held.as_mut() else {
                return Ok(());
            };
            if *len >= target {
                return Ok(());
            }
            file.write_all_at(&zeros, *len)?;
            *len += CHUNK as u64;
        }
    }

    /// Makes `dump` (a dump the caps remove, its pages in memory) the
    /// spare when it is longer than the spare; true when it was. Otherwise
    /// the caller removes it.
    pub fn recycle(&self, dump: &Path) -> bool {
        let Ok(mut held) = self.file.lock() else {
            return false;
        };
        let Ok(len) = std::fs::metadata(dump).map(|m| m.len()) else {
            return false;
        };
        if held.as_ref().is_some_and(|(_, have)| *have >= len) {
            return false;
        }
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(dump) else {
            return false;
        };
        if std::fs::rename(dump, &self.path).is_err() {
            return false;
        }
        *held = Some((file, len));
        true
    }

    /// Removes the spare (the recorder stops).
    pub fn remove(&self) {
        if let Ok(mut held) = self.file.lock() {
            if held.take().is_some() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_grows_is_taken_once_and_a_removed_dump_becomes_the_next() {
        let dir = tempfile::tempdir().unwrap();
        // A spare left by a recorder that is not running goes.
        let stale = dir.path().join(".spare-999999999");
        std::fs::write(&stale, b"old").unwrap();
        let spare = Spare::new(dir.path());
        assert!(!stale.exists());
        assert!(spare.take(&dir.path().join("x")).is_none());

        spare.grow(3 * CHUNK as u64 + 1).unwrap();
        assert_eq!(spare.len(), 4 * CHUNK as u64);
        let own = dir.path().join(format!(".spare-{}", std::process::id()));
        let meta = std::fs::metadata(&own).unwrap();
        assert_eq!(meta.len(), 4 * CHUNK as u64);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);

        let to = dir.path().join("dump.partial");
        assert!(spare.take(&to).is_some());
        assert!(to.exists() && !own.exists());
        assert!(spare.take(&dir.path().join("y")).is_none());
        assert_eq!(spare.len(), 0);

        // A removed dump longer than the spare becomes it; a shorter not.
        let old = dir.path().join("old.idleflow");
        std::fs::write(&old, vec![1u8; 5000]).unwrap();
        assert!(spare.recycle(&old));
        assert!(!old.exists() && own.exists());
        assert_eq!(spare.len(), 5000);
        let small = dir.path().join("small.idleflow");
        std::fs::write(&small, vec![1u8; 10]).unwrap();
        assert!(!spare.recycle(&small));
        assert!(small.exists());
        spare.remove();
        assert!(!own.exists());
    }
}
