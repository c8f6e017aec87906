//! The executable mappings of every process, as the recording tells them
//! in time order (`MODULE_MAP` records), so that an address of a stack
//! copy is placed in the module its process had mapped at that instant.
//!
//! A process that forked without an `exec` has no mappings of its own in
//! the recording: it runs its parent's (PostgreSQL's backends, forked
//! workers), so its parent's apply until it maps anything itself.
//!
//! Invariant: a process's mappings never overlap; a new mapping replaces
//! whatever it overlaps, as `mmap` does. Each change bumps the process's
//! generation, which tells the unwinder to rebuild its module list.

use std::sync::Arc;

use idleflow_format::ModuleMap;
use rustc_hash::FxHashMap;

/// One executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file, or a pseudo path (`[vdso]`).
    pub path: Arc<str>,
    /// The file's inode when it was mapped (0: not known).
    pub ino: u64,
}

impl Mapping {
    /// Whether it maps a file (not `[vdso]` or `//anon`; a memfd counts,
    /// readable while its process lives).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/') && !self.path.starts_with("//anon")
    }
}

/// One process's mappings.
#[derive(Debug, Default)]
pub struct Space {
    /// Sorted by start, not overlapping.
    pub maps: Vec<Mapping>,
    /// Bumped on every change.
    pub generation: u64,
}

impl Space {
    /// The mapping that holds `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        self.maps[..i].last().filter(|m| addr < m.end)
    }
}

/// Every process's mappings.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    spaces: FxHashMap<u32, Space>,
    parent: FxHashMap<u32, u32>,
    generation: u64,
}

impl AddressSpaces {
    /// Records a mapping.
    pub fn map(&mut self, m: &ModuleMap) {
        let end = m.start.saturating_add(m.len);
        if end <= m.start {
            return;
        }
        self.generation += 1;
        let space = self.spaces.entry(m.pid).or_default();
        space.generation = self.generation;
        space.maps.retain(|x| x.end <= m.start || x.start >= end);
        let at = space.maps.partition_point(|x| x.start < m.start);
        space.maps.insert(
            at,
            Mapping {
                start: m.start,
                end,
                pgoff: m.pgoff,
                path: Arc::from(m.path.as_str()),
                ino: m.ino,
            },
        );
    }

    /// Records that process `pid` was forked from `ppid`.
    pub fn forked(&mut self, pid: u32, ppid: u32) {
        if pid != ppid && ppid != 0 {
            self.parent.insert(pid, ppid);
        }
    }

    /// The process whose mappings `pid` runs on (itself, or the nearest
    /// ancestor with mappings when it has none), and those mappings.
    pub fn space(&self, pid: u32) -> Option<(u32, &Space)> {
        let mut p = pid;
        for _ in 0..16 {
            if let Some(s) = self.spaces.get(&p).filter(|s| !s.maps.is_empty()) {
                return Some((p, s));
            }
            p = *self.parent.get(&p)?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pid: u32, start: u64, len: u64, path: &str) -> ModuleMap {
        ModuleMap {
            time: 0,
            pid,
            start,
            len,
            pgoff: 0,
            ino: 0,
            path: path.into(),
        }
    }

    #[test]
    fn a_new_mapping_replaces_what_it_overlaps_and_children_use_their_parents() {
        let mut a = AddressSpaces::default();
        a.map(&m(10, 0x1000, 0x1000, "/a"));
        a.map(&m(10, 0x3000, 0x1000, "/b"));
        let g = a.space(10).unwrap().1.generation;
        a.map(&m(10, 0x1800, 0x1000, "/c"));
        let (owner, s) = a.space(10).unwrap();
        assert_eq!(owner, 10);
        assert!(s.generation > g);
        assert_eq!(s.find(0x1000), None, "/a was replaced");
        assert_eq!(&*s.find(0x2000).unwrap().path, "/c");
        assert_eq!(&*s.find(0x3fff).unwrap().path, "/b");
        assert_eq!(s.find(0x4000), None);
        // A forked child without mappings of its own runs its parent's.
        a.forked(11, 10);
        assert_eq!(a.space(11).unwrap().0, 10);
        a.map(&m(11, 0x9000, 0x1000, "/exec"));
        assert_eq!(a.space(11).unwrap().0, 11);
        assert!(a.space(12).is_none());
    }
}
