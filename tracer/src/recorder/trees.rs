//! The JVM agents' call trees (`--java tree`): each agent's last dump
//! (`tree-<pid>.bin` in the recorder's tree directory, or in a JVM's own
//! subdirectory) embedded as TREE records when the window closes.
//!
//! Invariant: a dump is checked whole before its first record is copied,
//! so a dump the JVM died writing is counted as unreadable, never half
//! embedded. A dump is the JVM's (perhaps a hostile one's): read under
//! `idleflow_format::files::read_untrusted` (no link, no FIFO, owned by
//! root, idleflow's user or its directory's owner, the JVM's user, at most
//! [`TREE_LIMIT`] bytes); one refused is counted as unreadable.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use idleflow_format::{files, kind, tree};

/// The longest call-tree dump read.
pub const TREE_LIMIT: u64 = 1 << 30;

use super::{Recorder, RecorderError};

impl Recorder {
    /// Writes every agent's last call-tree dump as a TREE record.
    pub(super) fn embed_trees(&mut self) -> Result<(), RecorderError> {
        let (Some(dir), Some(out)) = (self.tree_dir.as_ref(), self.output.as_mut()) else {
            return Ok(());
        };
        // `tree-PID.json` in the directory, or in a JVM's own subdirectory
        // (one made for a JVM of another user).
        let is_dump = |p: &PathBuf| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("tree-") && n.ends_with(".bin"))
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        let mut files: Vec<PathBuf> = Vec::new();
        for p in entries.flatten().map(|e| e.path()) {
            if p.is_dir() {
                if let Ok(sub) = std::fs::read_dir(&p) {
                    files.extend(sub.flatten().map(|e| e.path()).filter(is_dump));
                }
            } else if is_dump(&p) {
                files.push(p);
            }
        }
        files.sort();
        for f in files {
            // Checked whole before the first record is copied: a dump the
            // JVM died writing is counted, not half embedded.
            let owners: Vec<u32> = f
                .parent()
                .and_then(|d| std::fs::symlink_metadata(d).ok())
                .map(|m| m.uid())
                .into_iter()
                .collect();
            let bytes = files::read_untrusted(&f, &owners, TREE_LIMIT).unwrap_or_default();
            match tree::dump_frames(&bytes) {
                Ok(frames) if frames.first().is_some_and(|f| f.kind == kind::TREE_HEAD) => {
                    self.summary.tree_dumps += 1;
                    for frame in frames {
                        out.writer.write_tree_frame(frame)?;
                    }
                }
                _ => self.summary.tree_dumps_unreadable += 1,
            }
        }
        Ok(())
    }
}
