//! Idle-causing call paths of any program: the user stack of each thread
//! whose leaving made a CPU idle (unwound when the recording ended, native,
//! JIT and interpreted frames), with the kernel's wait under it, summed by
//! path with the idle time that followed.
//!
//! A path is one [`Frame`] list from the kernel's wait outward (the
//! innermost user frame next, the thread's entry last), each frame with
//! what ran there, and the process it ran in: the same code in two
//! processes of one name (PostgreSQL's backends) is one path, and a pool's
//! threads are one pattern (`worker-*`). Every output (text, JSON, folded
//! stacks) reads these rows.
//!
//! Invariant: memory grows with distinct (kernel stack, user stack,
//! thread) triples ([`crate::pass::kernel_waits::KernelWaits::caused`]), never with
//! the number of dispatches; idleflow's own threads are never a row.

use idleflow_format::{UnwindEnd, UserStackCounts};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::pass::kernel_waits::{KernelWaits, StacksKey};
use crate::path::{self, Fold, Folded, Frame, FrameKind};
use crate::reasons::is_scheduler_frame;
use crate::share::saturating_sum;

/// One idle-causing call path of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallPath {
    /// The process's name.
    pub process: String,
    /// The kernel's wait (innermost kernel frame outside the scheduler),
    /// empty where no kernel stack was taken.
    pub wait: String,
    /// The user frames, innermost first.
    pub frames: Vec<Frame>,
    /// Some of its stacks were cut at the copy's end or stopped early:
    /// outer frames are missing.
    pub partial: bool,
    /// Dispatches to idle through it.
    pub idle_dispatches_to: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// Its share of the idle after the threads with a user stack left, %.
    pub share_pct: f64,
    /// The threads (or pools by name pattern) that left there, most first.
    pub threads: Vec<(String, u64)>,
}

/// The report's section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallPathsSection {
    /// Dispatches to idle caused by threads (idleflow's own left out).
    pub idle_dispatches_to: u64,
    /// Idle time after them, ns.
    pub idle_ns: u64,
    /// Of those, dispatches to idle whose thread's user stack was unwound.
    pub idle_dispatches_with_stack: u64,
    /// Idle time after them, ns.
    pub idle_ns_with_stack: u64,
    /// What the resolver counted when the recording ended.
    pub counts: UserStackCounts,
    /// Paths, most idle first.
    pub paths: Vec<CallPath>,
    /// Modules that could not be read or matched, and the like.
    pub notes: Vec<String>,
}

/// A path's key while summing: (process, wait, frames).
type Key = (String, String, Vec<Frame>);

/// One path summed from (stacks, count, ns) rows.
struct Grouped {
    process: String,
    wait: String,
    frames: Vec<Frame>,
    partial: bool,
    count: u64,
    ns: u64,
    threads: Vec<(String, u64)>,
}

/// Sums `rows` ((kernel stack, user stack, tid), count, ns) by path: the
/// rows with a user stack of the threads `shown` accepts, idleflow's own
/// (`tool_tids`) left out; most ns first.
fn group(
    kw: &KernelWaits,
    rows: impl Iterator<Item = (StacksKey, u64, u64)>,
    tool_tids: &FxHashSet<u32>,
    shown: &impl Fn(u32) -> bool,
    name: &impl Fn(u32) -> (String, String),
) -> Vec<Grouped> {
    let mut by_path: FxHashMap<Key, (u64, u64, bool, FxHashMap<String, u64>)> =
        FxHashMap::default();
    for ((kstack, ustack, tid), count, ns) in rows {
        if ustack == 0 || tool_tids.contains(&tid) || !shown(tid) {
            continue;
        }
        let (process, thread) = name(tid);
        let partial = kw
            .user(ustack)
            .is_some_and(|s| s.end != UnwindEnd::Complete);
        let key = (process, wait_of(kw, kstack), user_path(kw, ustack));
        let e = by_path.entry(key).or_default();
        e.0 += count;
        e.1 = e.1.saturating_add(ns);
        e.2 |= partial;
        *e.3.entry(crate::path::thread_pattern(&thread)).or_default() += count;
    }
    let mut paths: Vec<Grouped> = by_path
        .into_iter()
        .map(|((process, wait, frames), (count, ns, partial, threads))| {
            let mut threads: Vec<(String, u64)> = threads.into_iter().collect();
            threads.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            Grouped {
                process,
                wait,
                frames,
                partial,
                count,
                ns,
                threads,
            }
        })
        .collect();
    paths.sort_by(|a, b| {
        b.ns.cmp(&a.ns)
            .then_with(|| b.count.cmp(&a.count))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    paths
}

/// One blocking call path of the report (`record --stacks waits`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockedPath {
    /// The process's name.
    pub process: String,
    /// The kernel's wait, empty where no kernel stack was taken.
    pub wait: String,
    /// The user frames, innermost first.
    pub frames: Vec<Frame>,
    /// Some of its stacks were cut at the copy's end or stopped early.
    pub partial: bool,
    /// Blocking switch-outs through it.
    pub waits: u64,
    /// Time until the threads ran again, ns.
    pub blocked_ns: u64,
    /// Its share of the blocked time of all paths, %.
    pub share_pct: f64,
    /// The threads (or pools by name pattern) that waited there, most first.
    pub threads: Vec<(String, u64)>,
}

/// The report's section of blocking call paths: where the recorded
/// threads waited, by the time until they ran again (an off-CPU profile).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockedPathsSection {
    /// The stacks of one interruptible sleep in this many were taken
    /// (`record --wait-sample`); each such wait counts this many times in
    /// `waits` and `blocked_ns` here and in the paths. 1: every wait.
    pub sample_period: u64,
    /// Waits with a user stack.
    pub waits: u64,
    /// Their blocked time, ns.
    pub blocked_ns: u64,
    /// Paths, most blocked time first.
    pub paths: Vec<BlockedPath>,
}

impl BlockedPathsSection {
    /// The section for a recording with stacks at every wait (`None` for
    /// others), of the threads `shown` accepts, idleflow's own left out.
    pub fn new(
        kw: &KernelWaits,
        tool_tids: &FxHashSet<u32>,
        shown: impl Fn(u32) -> bool,
        name: impl Fn(u32) -> (String, String),
    ) -> Option<Self> {
        if !kw.tracks_blocked() {
            return None;
        }
        let grouped = group(
            kw,
            kw.blocked
                .iter()
                .map(|(&key, b)| (key, b.waits, b.blocked_ns)),
            tool_tids,
            &shown,
            &name,
        );
        let blocked_ns = saturating_sum(grouped.iter().map(|g| g.ns));
        let waits = saturating_sum(grouped.iter().map(|g| g.count));
        let paths = grouped
            .into_iter()
            .map(|g| BlockedPath {
                share_pct: crate::share::share_pct(g.ns, blocked_ns),
                process: g.process,
                wait: g.wait,
                frames: g.frames,
                partial: g.partial,
                waits: g.count,
                blocked_ns: g.ns,
                threads: g.threads,
            })
            .collect();
        Some(BlockedPathsSection {
            sample_period: kw.wait_sample_period.max(1),
            waits,
            blocked_ns,
            paths,
        })
    }
}

/// The kernel wait of kernel stack `id` (empty for 0).
pub(crate) fn wait_of(kw: &KernelWaits, id: u64) -> String {
    if id == 0 {
        return String::new();
    }
    let frames = kw.frames(id);
    frames
        .iter()
        .find(|f| !is_scheduler_frame(f))
        .or(frames.first())
        .cloned()
        .unwrap_or_default()
}

/// The user frames of user stack `id` as path frames.
pub(crate) fn user_path(kw: &KernelWaits, id: u64) -> Vec<Frame> {
    kw.user_frames(id)
        .into_iter()
        .map(|(k, name)| Frame::new(k.into(), name))
        .collect()
}

impl CallPathsSection {
    /// The section for `kw`, of the threads `shown` accepts (the recorded
    /// command's, or all), leaving out `tool_tids` (idleflow's own);
    /// `name(tid)` gives (process name, thread name); `all` is (dispatches
    /// to idle, idle ns) caused by all threads but idleflow's.
    pub fn new(
        kw: &KernelWaits,
        tool_tids: &FxHashSet<u32>,
        shown: impl Fn(u32) -> bool,
        all: (u64, u64),
        name: impl Fn(u32) -> (String, String),
    ) -> Option<Self> {
        if kw.switch_user_stacks == 0 && kw.user_symbols.is_none() && kw.unresolved_copies == 0 {
            return None;
        }
        let grouped = group(
            kw,
            kw.caused
                .iter()
                .map(|(&key, c)| (key, c.dispatches, c.idle_ns)),
            tool_tids,
            &shown,
            &name,
        );
        let total_idle = saturating_sum(grouped.iter().map(|g| g.ns));
        let total_dispatches = saturating_sum(grouped.iter().map(|g| g.count));
        let paths: Vec<CallPath> = grouped
            .into_iter()
            .map(|g| CallPath {
                share_pct: crate::share::share_pct(g.ns, total_idle),
                process: g.process,
                wait: g.wait,
                frames: g.frames,
                partial: g.partial,
                idle_dispatches_to: g.count,
                idle_ns: g.ns,
                threads: g.threads,
            })
            .collect();
        let (counts, mut notes) = kw
            .user_symbols
            .as_ref()
            .map(|s| (s.counts, s.notes.clone()))
            .unwrap_or_default();
        if kw.unresolved_copies > 0 {
            notes.push(format!(
                "{} user stack copies were never unwound (the recorder stopped before it \
                 could resolve them): only kernel stacks are shown",
                kw.unresolved_copies
            ));
        }
        Some(CallPathsSection {
            idle_dispatches_to: all.0,
            idle_ns: all.1,
            idle_dispatches_with_stack: total_dispatches,
            idle_ns_with_stack: total_idle,
            counts,
            paths,
            notes,
        })
    }
}

/// Folded stacks of the call paths for `inferno`: `PROCESS;THREAD;user
/// frames outermost first;kernel frames, the wait on top WEIGHT` (the
/// kernel frames left out with `user_only`), from `rows` ((kernel stack,
/// user stack, tid), count, ns): the idle-causing ones
/// ([`KernelWaits::caused`]) or the blocking ones ([`KernelWaits::blocked`]),
/// weighed by count with `fold.dispatches`, else by ns. Only the threads
/// `shown` accepts, never idleflow's own. Threads without a user stack
/// (kernel threads) show their kernel frames alone.
#[derive(Debug, Clone, Copy)]
pub struct CallPaths<'a, F> {
    /// The stacks.
    pub kernel: &'a KernelWaits,
    /// Which rows: the idle-causing ones or the blocking ones.
    pub rows: CallPathRows,
    /// tid → (pid, name).
    pub names: &'a FxHashMap<u32, (u32, String)>,
    /// Which threads to show.
    pub shown: F,
    /// The kernel's frames left out.
    pub user_only: bool,
}

/// Which (stacks, thread) rows a [`CallPaths`] view folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPathRows {
    /// The idle-causing switch-outs ([`KernelWaits::caused`]): dispatches, idle ns.
    Caused,
    /// The blocking ones ([`KernelWaits::blocked`]): waits, blocked ns.
    Blocked,
}

impl<F: Fn(u32) -> bool> Fold for CallPaths<'_, F> {
    fn fold(&self, fold: path::FoldOptions, out: &mut Folded) {
        let (kw, names, shown, user_only) = (self.kernel, self.names, &self.shown, self.user_only);
        let rows: Vec<(StacksKey, u64, u64)> = match self.rows {
            CallPathRows::Caused => kw
                .caused
                .iter()
                .map(|(&key, c)| (key, c.dispatches, c.idle_ns))
                .collect(),
            CallPathRows::Blocked => kw
                .blocked
                .iter()
                .map(|(&key, b)| (key, b.waits, b.blocked_ns))
                .collect(),
        };
        for ((kstack, ustack, tid), count, ns) in rows {
            if !shown(tid) || (ustack == 0 && (kstack == 0 || user_only)) {
                continue;
            }
            let mut frames: Vec<(FrameKind, String)> =
                path::roots(names, tid, fold.merge_threads).into();
            frames.extend(
                user_path(kw, ustack)
                    .into_iter()
                    .rev()
                    .map(|f| (f.kind, f.name)),
            );
            if !user_only && kstack != 0 {
                let all = kw.frames(kstack);
                let inner = all.iter().position(|f| !is_scheduler_frame(f)).unwrap_or(0);
                frames.extend(
                    all[inner..]
                        .iter()
                        .rev()
                        .map(|f| (FrameKind::Kernel, f.clone())),
                );
            }
            out.add(frames, if fold.dispatches { count } else { ns });
        }
    }
}
