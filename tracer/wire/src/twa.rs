//! The thread work area (TWA): a shared-memory file through which the JVM
//! agent tells the tracer which call-tree node each thread is in, and the
//! tracer tells the agent each thread's running idle counts.
//!
//! ```text
//! header (64 bytes): magic "IFLOWTWA" | version u32 | slots u32 | ring_len u32 | pad u32 | delta_ns u64
//! slot[slots], each SLOT_HEADER + ring_len × 24 bytes, 64-byte aligned:
//!   tid u32 (0 = free) | pid u32 | seq u64 | node u64 | since u64 | dip u64 | idle u64 | ring_head u64
//!   | claimed_at u64 | released_at u64 | pad to 128 bytes
//!   ring[ring_len]: { start u64, end u64, node u64 }
//! ```
//!
//! Protocol (each slot has one writer for each field group):
//! - The agent claims a free slot at thread start (`tid` 0 → tid, compare
//!   and swap), stamps `claimed_at` and publishes the thread's root node as
//!   current since then. At thread end it stamps `released_at`; the tracer
//!   frees the slot (`tid` → 0) once it has read every dispatch up to that
//!   time, so that a thread's last dispatches are still tagged.
//! - The agent publishes the current node with a seqlock (`seq` odd while
//!   writing): [`SlotRef::publish`]. When the node it replaces had been current
//!   for at least `delta_ns`, it first appends `(start, end, node)` to the
//!   slot's history ring and then advances `ring_head` (release).
//! - The tracer reads with [`SlotRef::node_at`]: *before the claim* if `t`
//!   precedes `claimed_at` (the agent did not trace the thread yet), *after
//!   the release* if it follows `released_at`, else the
//!   current node if it became current at or before `t`, else the ring
//!   entry whose `[start, end)` holds `t`, else unknown, with the reason.
//!   A ring entry is trusted only if it cannot have
//!   been overwritten while it was read (checked against `ring_head` again
//!   afterwards, with one entry of slack for a write in progress).
//! - The tracer writes `dip` and `idle` (the work-area counts of the
//!   dispatch accounting); the agent only reads them.
//!
//! All fields are atomics, valid for any bit pattern, so a damaged or
//! foreign file can give wrong answers but never undefined behaviour; the
//! header is checked before any slot is used.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use memmap2::MmapRaw;

/// First bytes of a work-area file.
pub const TWA_MAGIC: &[u8; 8] = b"IFLOWTWA";
/// Layout version.
pub const TWA_VERSION: u32 = 2;
/// Header size.
const HEADER: usize = 64;
/// Fixed part of a slot.
const SLOT_HEADER: usize = 128;
/// Node id meaning "no node" (the thread is in no traced method).
pub const NO_NODE: u64 = 0;
/// `tid` of a slot being claimed (never a real tid: Linux tids are below
/// 2^22).
const SETTING_UP: u32 = u32::MAX;

/// How a dispatch was tagged with a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// The node current at the dispatch's time.
    Current(u64),
    /// A node from the history ring.
    Ring(u64),
    /// Not known, for the reason given.
    Unknown(Miss),
    /// The time precedes the slot's claim: the agent was not tracing the
    /// thread yet (or the slot now belongs to a later thread with the same
    /// tid). Nothing to tag, as for a thread without a slot.
    BeforeClaim,
    /// The time follows the slot's release: the thread has left Java
    /// (JVMTI `ThreadEnd`) and is exiting. Nothing to tag.
    AfterRelease,
}

/// Why a tag is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// The time falls between the kept history entries: the node current
    /// then was replaced within Δ.
    Short,
    /// The entry that held the time was overwritten before it was read
    /// (the ring is too short for the thread's rate of node changes).
    Overwritten,
    /// The slot's current node could not be read whole: its writer left
    /// it mid-write (an agent killed while publishing, or a damaged or
    /// hostile work area) or kept rewriting it while it was read.
    Torn,
}

/// How often [`SlotRef::current`] spins, then yields, for a writer to
/// finish before it gives up (a writer preempted mid-write resumes within
/// a scheduler tick or two; one that died never does).
const SPINS: u32 = 64;
const YIELDS: u32 = 200;

/// One history entry.
#[repr(C)]
#[derive(Debug)]
struct Entry {
    start: AtomicU64,
    end: AtomicU64,
    node: AtomicU64,
}

/// The fixed part of a slot.
#[repr(C)]
#[derive(Debug)]
pub struct Slot {
    tid: AtomicU32,
    pid: AtomicU32,
    seq: AtomicU64,
    node: AtomicU64,
    since: AtomicU64,
    dip: AtomicU64,
    idle: AtomicU64,
    ring_head: AtomicU64,
    claimed_at: AtomicU64,
    released_at: AtomicU64,
    _pad: [u64; 7],
}

const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_HEADER);
const _: () = assert!(std::mem::size_of::<Entry>() == 24);

/// Errors of opening a work area.
#[derive(Debug, thiserror::Error)]
pub enum TwaError {
    /// The file could not be created, opened or mapped.
    #[error("thread work area {path}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The file is not a work area of this version.
    #[error("thread work area {path}: {what}")]
    Layout {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
}

/// A mapped work area (either side).
#[derive(Debug)]
pub struct WorkArea {
    map: MmapRaw,
    slots: usize,
    ring_len: usize,
    slot_bytes: usize,
    delta_ns: u64,
}

// SAFETY: every access to the mapping goes through atomics.
unsafe impl Send for WorkArea {}
// SAFETY: as above; shared references only hand out atomics.
unsafe impl Sync for WorkArea {}

fn slot_bytes(ring_len: usize) -> usize {
    (SLOT_HEADER + ring_len * 24).div_ceil(64) * 64
}

impl WorkArea {
    /// Creates the file (owner-only permissions) for `slots` threads with
    /// `ring_len` history entries each, and maps it.
    pub fn create(path: &Path, slots: u32, ring_len: u32, delta_ns: u64) -> Result<Self, TwaError> {
        let err = |source| TwaError::Io {
            path: path.display().to_string(),
            source,
        };
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        let len = HEADER + slots as usize * slot_bytes(ring_len as usize);
        file.set_len(len as u64).map_err(err)?;
        let map = MmapRaw::map_raw(&file).map_err(err)?;
        let mut header = [0u8; 32];
        header[..8].copy_from_slice(TWA_MAGIC);
        header[8..12].copy_from_slice(&TWA_VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&slots.to_le_bytes());
        header[16..20].copy_from_slice(&ring_len.to_le_bytes());
        header[24..32].copy_from_slice(&delta_ns.to_le_bytes());
        // SAFETY: the mapping is at least HEADER bytes long and nobody else
        // has the file yet (created exclusively above).
        unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), map.as_mut_ptr(), header.len()) };
        Self::from_map(map, path)
    }

    /// Opens and maps an existing work area, checking its header.
    pub fn open(path: &Path) -> Result<Self, TwaError> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| TwaError::Io {
                path: path.display().to_string(),
                source,
            })?;
        Self::from_file(&file, path)
    }

    /// Maps a work area already open for reading and writing (e.g. a
    /// descriptor handed over by [`crate::handoff`]); `path` names it in errors.
    pub fn from_file(file: &File, path: &Path) -> Result<Self, TwaError> {
        let map = MmapRaw::map_raw(file).map_err(|source| TwaError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_map(map, path)
    }

    fn from_map(map: MmapRaw, path: &Path) -> Result<Self, TwaError> {
        let bad = |what: String| TwaError::Layout {
            path: path.display().to_string(),
            what,
        };
        if map.len() < HEADER {
            return Err(bad("shorter than its header".into()));
        }
        let mut h = [0u8; 32];
        // SAFETY: the mapping has at least HEADER (64) bytes.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr(), h.as_mut_ptr(), 32) };
        if &h[..8] != TWA_MAGIC {
            return Err(bad("not a thread work area".into()));
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if word(8) != TWA_VERSION {
            return Err(bad(format!(
                "layout version {} (expected {TWA_VERSION})",
                word(8)
            )));
        }
        let slots = word(12) as usize;
        let ring_len = word(16) as usize;
        let delta_ns = u64::from_le_bytes(h[24..32].try_into().expect("8 bytes"));
        let sb = slot_bytes(ring_len);
        // Checked: a damaged or hostile header may ask for more than any
        // address space holds.
        let needed = slots.checked_mul(sb).and_then(|n| n.checked_add(HEADER));
        if ring_len < 2 || needed.is_none_or(|n| map.len() < n) {
            return Err(bad("slot table does not fit the file".into()));
        }
        Ok(WorkArea {
            map,
            slots,
            ring_len,
            slot_bytes: sb,
            delta_ns,
        })
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Δ: how long a node must have been current to enter the history ring.
    pub fn delta_ns(&self) -> u64 {
        self.delta_ns
    }

    /// Slot `i`, if it exists.
    pub fn slot(&self, i: usize) -> Option<SlotRef<'_>> {
        if i >= self.slots {
            return None;
        }
        let base = HEADER + i * self.slot_bytes;
        // SAFETY: `base..base + slot_bytes` lies inside the mapping (checked
        // in `from_map`), is 64-byte aligned (header and slot sizes are
        // multiples of 64, the mapping is page aligned), and holds only
        // atomics, valid for any bit pattern.
        let (slot, ring) = unsafe {
            let p = self.map.as_mut_ptr().add(base);
            (
                &*(p as *const Slot),
                std::slice::from_raw_parts(p.add(SLOT_HEADER) as *const Entry, self.ring_len),
            )
        };
        Some(SlotRef {
            slot,
            ring,
            delta_ns: self.delta_ns,
        })
    }

    /// Claims a free slot for `tid` of process `pid` at time `now` (agent
    /// side); the thread is in its `root` node from then on.
    pub fn claim(&self, tid: u32, pid: u32, root: u64, now: u64) -> Option<SlotRef<'_>> {
        (0..self.slots).find_map(|i| {
            let s = self.slot(i)?;
            // Taken but not set up yet: `SETTING_UP`, which readers skip.
            // The real tid is stored last (release), so a reader that sees
            // it sees the whole slot.
            s.slot
                .tid
                .compare_exchange(0, SETTING_UP, Ordering::AcqRel, Ordering::Relaxed)
                .ok()?;
            s.slot.pid.store(pid, Ordering::Relaxed);
            s.slot.ring_head.store(0, Ordering::Relaxed);
            s.slot.seq.store(0, Ordering::Relaxed);
            s.slot.node.store(root, Ordering::Relaxed);
            s.slot.since.store(now, Ordering::Relaxed);
            s.slot.claimed_at.store(now, Ordering::Relaxed);
            s.slot.released_at.store(0, Ordering::Relaxed);
            s.slot.tid.store(tid, Ordering::Release);
            Some(s)
        })
    }

    /// The claimed slots as `(index, tid, pid)` (tracer side), released
    /// ones included until [`SlotRef::reclaim`] frees them.
    pub fn claimed(&self) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        (0..self.slots).filter_map(|i| {
            let s = self.slot(i)?;
            let tid = s.slot.tid.load(Ordering::Acquire);
            (tid != 0 && tid != SETTING_UP).then(|| (i, tid, s.slot.pid.load(Ordering::Relaxed)))
        })
    }
}

/// A reference to one slot and its history ring.
#[derive(Debug, Clone, Copy)]
pub struct SlotRef<'a> {
    slot: &'a Slot,
    ring: &'a [Entry],
    delta_ns: u64,
}

impl SlotRef<'_> {
    /// The thread that owns the slot (0: free).
    pub fn tid(&self) -> u32 {
        self.slot.tid.load(Ordering::Acquire)
    }

    /// Agent side, at thread end: the thread leaves Java at `now`. The
    /// tracer frees the slot once it has tagged the dispatches before `now`
    /// ([`SlotRef::reclaim`]).
    pub fn release(&self, now: u64) {
        self.slot.released_at.store(now.max(1), Ordering::Release);
    }

    /// Whether the owning thread has left Java (its slot awaits reclaim).
    pub fn released(&self) -> bool {
        self.slot.released_at.load(Ordering::Acquire) != 0
    }

    /// Tracer side: frees the slot if its thread left Java before
    /// `read_up_to` (the caller has read every dispatch stamped before that
    /// time, so nothing is left to tag from it). Returns whether it did.
    pub fn reclaim(&self, read_up_to: u64) -> bool {
        let tid = self.slot.tid.load(Ordering::Acquire);
        let released = self.slot.released_at.load(Ordering::Acquire);
        tid != 0
            && tid != SETTING_UP
            && released != 0
            && released < read_up_to
            && self
                .slot
                .tid
                .compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// Agent side: `node` became current at `now`; `old` (current since
    /// `old_since`) is pushed to the history ring if it lasted at least Δ.
    /// Only the owning thread may call this.
    pub fn publish(&self, old: u64, old_since: u64, node: u64, now: u64) {
        if now.saturating_sub(old_since) >= self.delta_ns && old_since != 0 {
            let head = self.slot.ring_head.load(Ordering::Relaxed);
            let e = &self.ring[(head % self.ring.len() as u64) as usize];
            e.start.store(old_since, Ordering::Relaxed);
            e.end.store(now, Ordering::Relaxed);
            e.node.store(old, Ordering::Relaxed);
            self.slot
                .ring_head
                .store(head.wrapping_add(1), Ordering::Release);
        }
        let seq = self.slot.seq.load(Ordering::Relaxed);
        self.slot.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.slot.node.store(node, Ordering::Relaxed);
        self.slot.since.store(now, Ordering::Relaxed);
        self.slot.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// The current node and since when, read consistently (tracer side);
    /// `None` when the writer does not finish within [`SPINS`] spins and
    /// [`YIELDS`] yields (it died mid-write, or the area is damaged: the
    /// agents are other processes, which the recorder never waits on).
    pub fn current(&self) -> Option<(u64, u64)> {
        for attempt in 0..SPINS + YIELDS {
            let s1 = self.slot.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let node = self.slot.node.load(Ordering::Relaxed);
                let since = self.slot.since.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.slot.seq.load(Ordering::Relaxed) == s1 {
                    return Some((node, since));
                }
            }
            if attempt < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        None
    }

    /// The node the thread was in at time `t` (tracer side). See the module
    /// documentation for the rule.
    pub fn node_at(&self, t: u64) -> Tag {
        if t < self.slot.claimed_at.load(Ordering::Acquire) {
            return Tag::BeforeClaim;
        }
        let released = self.slot.released_at.load(Ordering::Acquire);
        if released != 0 && t >= released {
            return Tag::AfterRelease;
        }
        let Some((node, since)) = self.current() else {
            return Tag::Unknown(Miss::Torn);
        };
        if since <= t {
            return Tag::Current(node);
        }
        let len = self.ring.len() as u64;
        let head = self.slot.ring_head.load(Ordering::Acquire);
        let first = head.saturating_sub(len);
        // Newest first: a dispatch is usually recent.
        let mut found = None;
        let mut passed = false;
        for i in (first..head).rev() {
            let e = &self.ring[(i % len) as usize];
            let (start, end) = (
                e.start.load(Ordering::Relaxed),
                e.end.load(Ordering::Relaxed),
            );
            if start <= t && t < end {
                found = Some((i, e.node.load(Ordering::Relaxed)));
                break;
            }
            if end <= t {
                passed = true;
                break; // entries are in time order: older ones end earlier
            }
        }
        fence(Ordering::Acquire);
        let head2 = self.slot.ring_head.load(Ordering::Relaxed);
        match found {
            // Entry `i` is intact if no write can have reached it: the writer
            // may be filling entry `head2` (which overwrites `head2 - len`).
            // Widened: a hostile writer can put any head in the mapping.
            Some((i, node))
                if u128::from(i) + u128::from(len) > u128::from(head2) + 1 || head2 < len =>
            {
                Tag::Ring(node)
            }
            Some(_) => Tag::Unknown(Miss::Overwritten),
            // `t` lies after a kept entry and before the next one (or before
            // `since`): the node then lasted less than Δ.
            None if passed => Tag::Unknown(Miss::Short),
            // Every entry since the claim is still there (history is
            // contiguous from `claimed_at`, short nodes aside).
            None if head2 <= len => Tag::Unknown(Miss::Short),
            None => Tag::Unknown(Miss::Overwritten),
        }
    }

    /// Tracer side: the thread's running DIP and IDLE counts.
    pub fn set_counts(&self, dip: u64, idle: u64) {
        self.slot.dip.store(dip, Ordering::Relaxed);
        self.slot.idle.store(idle, Ordering::Relaxed);
    }

    /// Agent side: the running DIP and IDLE counts the tracer wrote.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.slot.dip.load(Ordering::Relaxed),
            self.slot.idle.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(ring: u32, delta: u64) -> (tempfile::TempDir, WorkArea) {
        let dir = tempfile::tempdir().unwrap();
        let w = WorkArea::create(&dir.path().join("twa"), 4, ring, delta).unwrap();
        (dir, w)
    }

    #[test]
    fn tags_come_from_the_current_node_then_the_ring_then_unknown() {
        let (_d, w) = area(8, 2_000);
        let s = w.claim(77, 7, 10, 1_000).unwrap(); // root 10 from t=1000
        s.publish(10, 1_000, 11, 1_500); // 10 lasted 500 < Δ: not kept
        s.publish(11, 1_500, 12, 9_000); // 11 lasted 7500: kept
        s.publish(12, 9_000, 13, 9_100); // 12 lasted 100: not kept
        assert_eq!(s.node_at(9_100), Tag::Current(13));
        assert_eq!(s.node_at(50_000), Tag::Current(13));
        assert_eq!(s.node_at(5_000), Tag::Ring(11));
        assert_eq!(s.node_at(1_500), Tag::Ring(11));
        assert_eq!(s.node_at(9_050), Tag::Unknown(Miss::Short)); // in 12, too short to keep
        assert_eq!(s.node_at(1_200), Tag::Unknown(Miss::Short)); // in 10, too short to keep
        assert_eq!(s.node_at(999), Tag::BeforeClaim);
    }

    #[test]
    fn overwritten_history_is_unknown_not_wrong() {
        let (_d, w) = area(4, 10);
        let mut t = 100;
        let mut node = 1;
        let s = w.claim(5, 5, node, t).unwrap();
        for _ in 0..20 {
            s.publish(node, t, node + 1, t + 100);
            node += 1;
            t += 100;
        }
        // Node 2 was current at t=250 long ago; the ring has moved on.
        assert_eq!(s.node_at(250), Tag::Unknown(Miss::Overwritten));
        assert_eq!(s.node_at(99), Tag::BeforeClaim);
        // The newest complete entry is still there.
        assert_eq!(s.node_at(t - 50), Tag::Ring(node - 1));
    }

    #[test]
    fn a_hostile_ring_head_reads_as_unknown_or_ring_never_a_panic() {
        // A target can write any value into the mapping it shares with us;
        // the fuzz target found `ring_head = u64::MAX - 1` overflowing.
        let (_d, w) = area(4, 10);
        let s = w.claim(5, 5, 1, 100).unwrap();
        s.publish(1, 100, 2, 300);
        s.publish(2, 300, 3, 500);
        for head in [u64::MAX, u64::MAX - 1, u64::MAX - 4, 1 << 63] {
            s.slot.ring_head.store(head, Ordering::Relaxed);
            for t in [0, 100, 150, 350, 499, 500, u64::MAX] {
                let tag = s.node_at(t);
                if t >= 500 {
                    assert_eq!(tag, Tag::Current(3), "head {head} t {t}");
                } else if t < 100 {
                    assert_eq!(tag, Tag::BeforeClaim, "head {head} t {t}");
                }
            }
        }
    }

    #[test]
    fn slots_are_claimed_once_and_the_other_side_sees_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("twa");
        let agent = WorkArea::create(&p, 2, 4, 2_000).unwrap();
        let tracer = WorkArea::open(&p).unwrap();
        let a = agent.claim(100, 1, 41, 5).unwrap();
        agent.claim(101, 1, 51, 5).unwrap();
        assert!(agent.claim(102, 1, 61, 5).is_none(), "only two slots");
        let seen: Vec<_> = tracer.claimed().collect();
        assert_eq!(seen, vec![(0, 100, 1), (1, 101, 1)]);
        assert_eq!(tracer.slot(0).unwrap().node_at(6), Tag::Current(41));
        a.publish(41, 5, 42, 5_000); // 41 lasted Δ or more: kept
        assert_eq!(tracer.slot(0).unwrap().node_at(5_001), Tag::Current(42));
        assert_eq!(tracer.slot(0).unwrap().node_at(7), Tag::Ring(41));
        assert_eq!(tracer.slot(0).unwrap().node_at(4), Tag::BeforeClaim);
        tracer.slot(0).unwrap().set_counts(3, 9);
        assert_eq!(a.counts(), (3, 9));
        a.release(6_000);
        assert_eq!(
            tracer.slot(0).unwrap().node_at(5_999),
            Tag::Current(42),
            "dispatches before the release are still tagged"
        );
        assert_eq!(tracer.slot(0).unwrap().node_at(6_000), Tag::AfterRelease);
        assert_eq!(tracer.claimed().count(), 2, "kept until the tracer is done");
        assert!(agent.claim(103, 1, 71, 6_500).is_none(), "not free yet");
        assert!(
            !tracer.slot(0).unwrap().reclaim(6_000),
            "dispatches at 6000 not read yet"
        );
        assert!(!tracer.slot(1).unwrap().reclaim(6_001), "not released");
        assert!(tracer.slot(0).unwrap().reclaim(6_001));
        assert_eq!(tracer.claimed().count(), 1);
        assert!(agent.claim(103, 1, 71, 6_500).is_some(), "free again");
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, vec![7u8; 4096]).unwrap();
        assert!(WorkArea::open(&p)
            .unwrap_err()
            .to_string()
            .contains("not a thread work area"));
        std::fs::write(&p, b"IFLOW").unwrap();
        assert!(WorkArea::open(&p).is_err());
        let p2 = dir.path().join("twa");
        WorkArea::create(&p2, 1, 4, 1).unwrap();
        assert!(
            WorkArea::create(&p2, 1, 4, 1).is_err(),
            "never reuses a file"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p2).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    /// A writer publishing as fast as it can and a reader tagging
    /// concurrently: every tag the reader gets is a node that really was
    /// current at that time (nodes encode their start time).
    /// A writer that died mid-write (its seqlock left odd) is never
    /// waited for: the read gives up, the tag is unknown.
    /// A header whose slot table overflows the address space is refused.
    #[test]
    fn a_header_asking_for_more_than_memory_holds_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("twa");
        let mut bytes = vec![0u8; 4096];
        bytes[..8].copy_from_slice(TWA_MAGIC);
        bytes[8..12].copy_from_slice(&TWA_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        bytes[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let e = WorkArea::open(&p).unwrap_err().to_string();
        assert!(e.contains("slot table does not fit the file"), "{e}");
    }

    #[test]
    fn a_slot_left_mid_write_is_read_as_torn_not_waited_for() {
        let (_d, w) = area(8, 50);
        let s = w.claim(9, 9, 1_000, 1_000).unwrap();
        s.slot.seq.fetch_add(1, Ordering::Release);
        let t = std::time::Instant::now();
        assert_eq!(s.node_at(5_000), Tag::Unknown(Miss::Torn));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        s.slot.seq.fetch_add(1, Ordering::Release);
        assert_eq!(s.node_at(5_000), Tag::Current(1_000));
    }

    #[test]
    fn concurrent_reads_never_see_a_wrong_node() {
        let (_d, w) = area(64, 50);
        let w = std::sync::Arc::new(w);
        let s = w.claim(9, 9, 1_000, 1_000).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (w, done) = (w.clone(), done.clone());
            std::thread::spawn(move || {
                let s = w.slot(0).unwrap();
                let mut checked = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let Some((_, since)) = s.current() else {
                        continue;
                    };
                    for back in [0u64, 30, 120, 1_000] {
                        let t = since.saturating_sub(back);
                        match s.node_at(t) {
                            // Node n was current over [n, n + its length); lengths < 1000.
                            Tag::Current(n) | Tag::Ring(n) => {
                                assert!(n <= t && t < n + 1_000, "node {n} at {t}");
                                checked += 1;
                            }
                            Tag::Unknown(_) | Tag::BeforeClaim | Tag::AfterRelease => {}
                        }
                    }
                }
                checked
            })
        };
        let (mut node, mut t) = (1_000u64, 1_000u64);
        for i in 0..2_000_000u64 {
            let next = t + 10 + (i * 7919) % 200; // 10..210 ns per node, some above Δ
            s.publish(node, t, next, next);
            node = next;
            t = next;
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    }
}
