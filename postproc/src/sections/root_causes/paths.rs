//! The paths of the root causes: each key the blame walk names (a root's
//! wait or run, a chain's link, a release site's or an interrupt's stacks)
//! resolved once into process, pool, reason, object and frames, and the
//! code that tells two paths apart (the program's first frame).
//!
//! Invariant: a key resolves to the same path however often it is asked
//! (the cache only saves the work of resolving it again).

use rustc_hash::FxHashMap;

use crate::pass::blame::WakeStacks;
use crate::pass::Analysis;
use crate::path::{FrameKind, PathFrame};
use crate::reasons::Reason;
use crate::sections::idle_paths::{resolve_key, RowKey};

/// The program's first frame, else the first outside the kernel.
pub(super) fn frame_of(frames: &[PathFrame], program: Option<usize>) -> Option<&PathFrame> {
    program.and_then(|i| frames.get(i)).or_else(|| {
        frames
            .iter()
            .find(|f| f.frame.kind != FrameKind::Kernel && !f.frame.name.starts_with('_'))
    })
}

/// A path's resolution, cached per key.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    pub(super) process: String,
    pub(super) pool: String,
    pub(super) reason: Reason,
    pub(super) object: String,
    pub(super) frames: Vec<PathFrame>,
}

/// Resolves the keys of one analysis' blame walk into paths, each once.
pub(super) struct PathResolver<'a> {
    a: &'a Analysis,
    cache: FxHashMap<RowKey, Resolved>,
}

impl<'a> PathResolver<'a> {
    pub(super) fn new(a: &'a Analysis) -> Self {
        PathResolver {
            a,
            cache: FxHashMap::default(),
        }
    }

    /// The path of key `k`, its thread's name made a pool pattern.
    pub(super) fn resolve(&mut self, k: &RowKey) -> Resolved {
        let a = self.a;
        self.cache
            .entry(*k)
            .or_insert_with(|| {
                let row = resolve_key(a, k);
                let name = a
                    .names
                    .get(&k.tid())
                    .map_or_else(|| format!("tid {}", k.tid()), |n| n.1.clone());
                Resolved {
                    process: row.process,
                    pool: crate::path::thread_pattern(&name),
                    reason: row.reason,
                    object: row.object,
                    frames: row.frames,
                }
            })
            .clone()
    }

    /// The frames of thread `tid`'s stacks at a wake-up it made (a release
    /// site, `record --waker-sample`).
    pub(super) fn release_frames(&mut self, tid: u32, w: WakeStacks) -> Vec<PathFrame> {
        self.resolve(&RowKey::new(tid, (w.kernel.into(), w.user.into()), 0, None))
            .frames
    }

    /// The frames of the kernel stack `irq` an interrupt took on thread
    /// `tid` as it ended that thread's wait.
    pub(super) fn interrupt_frames(&mut self, tid: u32, irq: u64) -> Vec<PathFrame> {
        self.resolve(&RowKey::new(tid, (irq, 0), 0, None)).frames
    }
}
