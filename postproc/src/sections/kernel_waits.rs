//! The report's section of idle-causing kernel waits (`--view kernel`):
//! the kernel stacks the pass collected ([`crate::pass::kernel_waits`]),
//! summed by stack, named by their wait, most idle first.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::pass::kernel_waits::{Caused, KernelWaits};
use crate::path::{self, Fold, Folded, Frame, FrameKind};
use crate::reasons::is_scheduler_frame;

/// One idle-causing kernel path of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelPath {
    /// The wait: the innermost frame outside the scheduler.
    pub wait: String,
    /// Its frames, innermost first, all of kind `kernel`.
    pub frames: Vec<Frame>,
    /// Dispatches to idle through it.
    pub idle_dispatches_to: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// Its share of the idle after the threads with a stack left, %.
    pub share_pct: f64,
    /// The threads that waited there, most first: (name, or a pool's name
    /// pattern such as `http-nio-8080-exec-*`; dispatches to idle).
    pub threads: Vec<(String, u64)>,
}

/// The report's section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelWaitsSection {
    /// Dispatches to idle caused by threads (idleflow's own left out).
    pub idle_dispatches_to: u64,
    /// Idle time after them, ns.
    pub idle_ns: u64,
    /// Of those, dispatches to idle whose thread's kernel stack was taken.
    pub idle_dispatches_with_stack: u64,
    /// Idle time after them, ns.
    pub idle_ns_with_stack: u64,
    /// Paths, most idle first.
    pub paths: Vec<KernelPath>,
    /// Why names are missing.
    pub notes: Vec<String>,
}

impl KernelWaitsSection {
    /// The section for `kw`, leaving out `tool_tids` (idleflow's own),
    /// thread names from `name`; `all` is (dispatches to idle, idle ns)
    /// caused by all threads but idleflow's, with a stack or not.
    pub fn new(
        kw: &KernelWaits,
        tool_tids: &FxHashSet<u32>,
        all: (u64, u64),
        name: impl Fn(u32) -> String,
    ) -> Option<Self> {
        if kw.switch_stacks == 0 {
            return None;
        }
        let mut by_stack: FxHashMap<u64, (Caused, FxHashMap<String, u64>)> = FxHashMap::default();
        for (&(stack, _, tid), c) in &kw.caused {
            if stack == 0 || tool_tids.contains(&tid) {
                continue;
            }
            let e = by_stack.entry(stack).or_default();
            e.0.dispatches += c.dispatches;
            e.0.idle_ns = e.0.idle_ns.saturating_add(c.idle_ns);
            // Pool threads by name pattern (`http-nio-8080-exec-*`).
            *e.1.entry(crate::path::thread_pattern(&name(tid)))
                .or_default() += c.dispatches;
        }
        let total_idle = crate::share::saturating_sum(by_stack.values().map(|(c, _)| c.idle_ns));
        let total_dispatches =
            crate::share::saturating_sum(by_stack.values().map(|(c, _)| c.dispatches));
        let mut paths: Vec<KernelPath> = by_stack
            .into_iter()
            .map(|(stack, (c, threads))| {
                let frames = kw.frames(stack);
                let wait = frames
                    .iter()
                    .find(|f| !is_scheduler_frame(f))
                    .or(frames.first())
                    .cloned()
                    .unwrap_or_default();
                let mut threads: Vec<(String, u64)> = threads.into_iter().collect();
                threads.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                KernelPath {
                    wait,
                    frames: frames
                        .into_iter()
                        .map(|f| Frame::new(FrameKind::Kernel, f))
                        .collect(),
                    idle_dispatches_to: c.dispatches,
                    idle_ns: c.idle_ns,
                    share_pct: crate::share::share_pct(c.idle_ns, total_idle),
                    threads,
                }
            })
            .collect();
        paths.sort_by(|a, b| {
            b.idle_ns
                .cmp(&a.idle_ns)
                .then_with(|| b.idle_dispatches_to.cmp(&a.idle_dispatches_to))
                .then_with(|| a.frames.cmp(&b.frames))
        });
        Some(KernelWaitsSection {
            idle_dispatches_to: all.0,
            idle_ns: all.1,
            idle_dispatches_with_stack: total_dispatches,
            idle_ns_with_stack: total_idle,
            paths,
            notes: kw.notes.clone(),
        })
    }
}

/// Folded stacks of the kernel waits for `inferno`: `PROCESS;THREAD;kernel
/// frames outermost first, the wait on top WEIGHT`, frames suffixed `_[k]`
/// (inferno's `java` palette draws them as kernel frames). Pool threads are
/// merged by name pattern unless `fold` says otherwise; only the threads
/// `shown` accepts (the recorded command's, or all), never idleflow's own.
/// `names`: tid → (pid, name).
#[derive(Debug, Clone, Copy)]
pub struct KernelStacks<'a, F> {
    /// The stacks and what they caused.
    pub kernel: &'a KernelWaits,
    /// tid → (pid, name).
    pub names: &'a FxHashMap<u32, (u32, String)>,
    /// Which threads to show.
    pub shown: F,
}

impl<F: Fn(u32) -> bool> Fold for KernelStacks<'_, F> {
    fn fold(&self, fold: path::FoldOptions, out: &mut Folded) {
        let (kw, names, shown) = (self.kernel, self.names, &self.shown);
        for (&(stack, _, tid), c) in &kw.caused {
            if stack == 0 || !shown(tid) {
                continue;
            }
            let all = kw.frames(stack);
            let inner = all.iter().position(|f| !is_scheduler_frame(f)).unwrap_or(0);
            let frames = all[inner..]
                .iter()
                .rev()
                .map(|f| (FrameKind::Kernel, f.clone()));
            let weight = if fold.dispatches {
                c.dispatches
            } else {
                c.idle_ns
            };
            out.add(
                path::roots(names, tid, fold.merge_threads)
                    .into_iter()
                    .chain(frames),
                weight,
            );
        }
    }
}
