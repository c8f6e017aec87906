//! The paths of the root causes: each key the blame walk names (a root's
//! wait or run, a chain's link, a release site's or an interrupt's stacks)
//! resolved once into process, pool, reason, object and frames, and the
//! code that tells two paths apart (the program's first frame).
//!
//! Invariant: a key resolves to the same path however often it is asked
//! (the cache only saves the work of resolving it again).

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::pass::blame::WakeStacks;
use crate::pass::Analysis;
use crate::path::{FrameKind, PathFrame};
use crate::reasons::{Device, Reason};
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

/// Resolves the keys of one analysis' blame walk into paths, each once
/// (shared: a chain's links are asked for once per root whose chain holds
/// them, and their frames are not copied each time).
pub(super) struct PathResolver<'a> {
    a: &'a Analysis,
    cache: FxHashMap<RowKey, Rc<Resolved>>,
    devices: FxHashMap<RowKey, Device>,
    release_devices: FxHashMap<(RowKey, WakeStacks), Device>,
}

impl<'a> PathResolver<'a> {
    pub(super) fn new(a: &'a Analysis) -> Self {
        PathResolver {
            a,
            cache: FxHashMap::default(),
            devices: FxHashMap::default(),
            release_devices: FxHashMap::default(),
        }
    }

    /// The path of key `k`, its thread's name made a pool pattern.
    pub(super) fn resolve(&mut self, k: &RowKey) -> Rc<Resolved> {
        let a = self.a;
        self.cache
            .entry(*k)
            .or_insert_with(|| {
                let row = resolve_key(a, k);
                let name = a
                    .names
                    .get(&k.tid())
                    .map_or_else(|| format!("tid {}", k.tid()), |n| n.1.clone());
                Rc::new(Resolved {
                    process: row.process,
                    pool: crate::path::thread_pattern(&name),
                    reason: row.reason,
                    object: row.object,
                    frames: row.frames,
                })
            })
            .clone()
    }

    /// The device key `k`'s own path waited on, from its frames
    /// ([`Device::of_wait`]), once per key.
    pub(super) fn device_of_wait(&mut self, k: &RowKey) -> Device {
        if let Some(&d) = self.devices.get(k) {
            return d;
        }
        let r = self.resolve(k);
        let d = Device::of_wait(&r.frames, &r.reason, &r.pool);
        self.devices.insert(*k, d);
        d
    }

    /// The device key `k`'s path waited on when its frames are those of its
    /// thread's release site `w` (`r`: that path), once per key and site.
    pub(super) fn device_of_release(&mut self, k: &RowKey, w: WakeStacks, r: &Resolved) -> Device {
        *self
            .release_devices
            .entry((*k, w))
            .or_insert_with(|| Device::of_wait(&r.frames, &r.reason, &r.pool))
    }

    /// The frames of thread `tid`'s stacks at a wake-up it made (a release
    /// site, `record --waker-sample`).
    pub(super) fn release_frames(&mut self, tid: u32, w: WakeStacks) -> Vec<PathFrame> {
        self.resolve(&RowKey::new(tid, (w.kernel.into(), w.user.into()), 0, None))
            .frames
            .clone()
    }

    /// The frames of the kernel stack `irq` an interrupt took on thread
    /// `tid` as it ended that thread's wait.
    pub(super) fn interrupt_frames(&mut self, tid: u32, irq: u64) -> Vec<PathFrame> {
        self.resolve(&RowKey::new(tid, (irq, 0), 0, None))
            .frames
            .clone()
    }
}
