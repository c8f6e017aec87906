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
//! Invariants: the spare is created new and private (0600), under an
//! unguessable name (`.spare-PID.RANDOM`) in the dumps' directory opened
//! once (`idleflow_format::files::Dir`), so a dump made of it is as private
//! as a new one and no link planted at a name it uses is ever written
//! through; a file is handed to one dump at most (taken under the lock,
//! which growing takes for each chunk); a spare of idleflow's own user left
//! by a recorder that died is removed by the next one that uses the
//! directory (another user's file of that name is left alone).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use idleflow_format::files::{Dir, Staged};

/// The start of a spare file's name in the dumps' directory:
/// `.spare-PID.RANDOM`.
const PREFIX: &str = ".spare-";

/// How much a growing spare writes at a time (the lock is taken per chunk).
const CHUNK: usize = 1 << 20;

/// A recorder's spare file.
#[derive(Debug)]
pub struct Spare {
    dir: Arc<Dir>,
    /// The file, its length and its name in `dir`.
    file: Mutex<Option<(File, u64, OsString)>>,
}

/// The pid in a spare's name (`.spare-PID.RANDOM`, or the older
/// `.spare-PID`).
fn spare_pid(name: &OsStr) -> Option<u32> {
    let rest = name.as_bytes().strip_prefix(PREFIX.as_bytes())?;
    let pid = rest.split(|&b| b == b'.').next()?;
    std::str::from_utf8(pid).ok()?.parse().ok()
}

impl Spare {
    /// The spare of this process in `dir` (none yet); the spares of
    /// recorders no longer running, made by idleflow's user, are removed.
    pub fn new(dir: &Arc<Dir>) -> Spare {
        let me = idleflow_tracer::procfs::euid();
        if let Ok(entries) = std::fs::read_dir(dir.path()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(pid) = spare_pid(&name) else {
                    continue;
                };
                let ours = dir.stat(&name).is_some_and(|st| st.st_uid == me);
                let dead = !std::path::Path::new(&format!("/proc/{pid}")).exists();
                if ours && (dead || pid == std::process::id()) {
                    let _ = dir.remove(&name);
                }
            }
        }
        Spare {
            dir: Arc::clone(dir),
            file: Mutex::new(None),
        }
    }

    /// The spare, open for writing over and staged to become `name` in the
    /// directory; None when there is none.
    pub fn take(&self, name: &OsStr) -> Option<(File, Staged)> {
        let mut held = self.file.lock().ok()?;
        let (file, _, temp) = held.take()?;
        Some((file, Staged::adopt(&self.dir, temp, name.to_owned())))
    }

    /// Bytes the spare holds now.
    pub fn len(&self) -> u64 {
        self.file
            .lock()
            .ok()
            .and_then(|f| f.as_ref().map(|(_, len, _)| *len))
            .unwrap_or(0)
    }

    /// A new name for this process's spare.
    fn create(&self) -> std::io::Result<(File, u64, OsString)> {
        let prefix = format!("{PREFIX}{}", std::process::id());
        let (file, name) = self.dir.create_temp(OsStr::new(&prefix), "")?;
        Ok((file, 0, name))
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
                *held = Some(self.create()?);
            }
            first = false;
            let Some((file, len, _)) = held.as_mut() else {
                return Ok(());
            };
            if *len >= target {
                return Ok(());
            }
            file.write_all_at(&zeros, *len)?;
            *len += CHUNK as u64;
        }
    }

    /// Makes the dump `name` in the directory (a dump the caps remove, its
    /// pages in memory) the spare when it is longer than the spare and a
    /// private file of idleflow's own; true when it was. Otherwise the
    /// caller removes it.
    pub fn recycle(&self, name: &OsStr) -> bool {
        let Ok(mut held) = self.file.lock() else {
            return false;
        };
        let Ok(file) = self.dir.open_own(name) else {
            return false;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return false;
        };
        if held.as_ref().is_some_and(|(_, have, _)| *have >= len) {
            return false;
        }
        let Ok((_, _, temp)) = self.create() else {
            return false;
        };
        // Over the new empty name: the dump's pages become the spare's.
        if self.dir.rename(name, &temp).is_err() {
            let _ = self.dir.remove(&temp);
            return false;
        }
        if let Some((_, _, old)) = held.take() {
            let _ = self.dir.remove(&old);
        }
        *held = Some((file, len, temp));
        true
    }

    /// Removes the spare (the recorder stops).
    pub fn remove(&self) {
        if let Ok(mut held) = self.file.lock() {
            if let Some((_, _, name)) = held.take() {
                let _ = self.dir.remove(&name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn spares(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| spare_pid(p.file_name().unwrap()).is_some())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_spare_grows_is_taken_once_and_a_removed_dump_becomes_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let opened = Arc::new(Dir::open(dir.path()).unwrap());
        // A spare left by a recorder that is not running goes.
        let stale = dir.path().join(".spare-999999999.abcdefgh");
        std::fs::write(&stale, b"old").unwrap();
        let spare = Spare::new(&opened);
        assert!(!stale.exists());
        assert!(spare.take(OsStr::new("x")).is_none());

        spare.grow(3 * CHUNK as u64 + 1).unwrap();
        assert_eq!(spare.len(), 4 * CHUNK as u64);
        let own = spares(dir.path());
        assert_eq!(own.len(), 1, "{own:?}");
        let own = &own[0];
        let prefix = format!(".spare-{}.", std::process::id());
        assert!(own
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&prefix));
        let meta = std::fs::metadata(own).unwrap();
        assert_eq!(meta.len(), 4 * CHUNK as u64);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);

        let (_, staged) = spare.take(OsStr::new("dump.idleflow")).unwrap();
        staged.commit().unwrap();
        assert!(dir.path().join("dump.idleflow").exists() && !own.exists());
        assert!(spare.take(OsStr::new("y")).is_none());
        assert_eq!(spare.len(), 0);

        // A removed dump longer than the spare becomes it; a shorter not.
        let old = dir.path().join("old.idleflow");
        std::fs::write(&old, vec![1u8; 5000]).unwrap();
        assert!(spare.recycle(OsStr::new("old.idleflow")));
        assert!(!old.exists());
        assert_eq!(spares(dir.path()).len(), 1);
        assert_eq!(spare.len(), 5000);
        let small = dir.path().join("small.idleflow");
        std::fs::write(&small, vec![1u8; 10]).unwrap();
        assert!(!spare.recycle(OsStr::new("small.idleflow")));
        assert!(small.exists());
        // A dump with a second name (a hard link) is not made the spare.
        let linked = dir.path().join("linked.idleflow");
        std::fs::write(&linked, vec![1u8; 9000]).unwrap();
        std::fs::hard_link(&linked, dir.path().join("other-name")).unwrap();
        assert!(!spare.recycle(OsStr::new("linked.idleflow")));
        spare.remove();
        assert!(spares(dir.path()).is_empty());
    }
}
