//! The root causes of idle (the report's section): the roots and chains
//! the pass's blame accumulator ([`crate::pass::blame`]) collected, named
//! as paths, grouped, with the pool-level wait-for graph and its knots.
//!
//! Invariant: the roots' idle adds up to the idle charged to the threads
//! that left CPUs idle (conservation), as the accumulator kept it.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::pass::Analysis;
use crate::path::PathFrame;
use crate::path::{Fold, FoldOptions, Folded, FrameKind};
use crate::reasons::{Device, Reason};
use crate::sections::idle_paths::{resolve_key, PathThreads, RowKey};
use crate::share::pct;

pub use crate::pass::blame::RootKind;

mod groups;
mod paths;
mod wait_graph;

use crate::pass::blame::WakeStacks;
use groups::{
    heaviest_branch, through_tool, GroupedRoots, LinkKey, LinkThreads, RootGroup, RootGroupKey,
};
use paths::{frame_of, PathResolver};
pub use wait_graph::{Knot, WaitEdge, WaitGraph};

/// One link of a chain (JSON `root_causes[].chain[]`): threads that waited
/// at one path, from the victims' wait to the one before the root.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainLink {
    /// The process's name.
    pub process: String,
    /// The thread or pool (its name pattern) and how many distinct threads.
    pub threads: PathThreads,
    /// Why they waited (as [`crate::sections::idle_paths::IdlePath::reason`]).
    pub reason: Reason,
    /// What they waited on (the flight recorder's monitor or parked class).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// Their wait's frames, innermost first.
    pub frames: Vec<PathFrame>,
    /// The index in `frames` of the program's first frame.
    pub program_frame: Option<usize>,
    /// The most waits in a row of these threads at this path on one chain
    /// (a convoy: each thread woken by the one before it), at least 1.
    pub hops: u64,
    /// Idle that went through this link to the root, ns.
    pub idle_ns: u64,
}

/// One root cause of idle (JSON `root_causes.roots[]`, most idle first).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RootCause {
    /// Idle that ended here, ns, and its share of all CPUs' idle, %.
    pub idle_ns: u64,
    pub share_pct: f64,
    /// What the chain ends in.
    pub kind: RootKind,
    /// For `device` roots: `timer`, `network`, `disk` or `interrupt`, from
    /// the wait the device ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Of a `device` root's idle, how much came after wake-ups of root
    /// waits whose device an interrupt's own kernel stack named (sampled at
    /// any chain into the same wait; the rest: named from the wait's
    /// frames), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_named_ns: Option<u64>,
    /// The root thread's process.
    pub process: String,
    /// The root thread or pool.
    pub threads: PathThreads,
    /// For a `path` root, what the thread did next (`running`, then where
    /// it left); else its wait's reason.
    pub reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// The root's frames, innermost first: a running thread's at the
    /// switch-out that ended its run, a device-ended wait's at its start.
    pub frames: Vec<PathFrame>,
    /// The index in `frames` of the program's first frame.
    pub program_frame: Option<usize>,
    /// `frames` are the root thread's release site (below), not its own:
    /// its wait or run had no stacks taken.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub frames_from_release: bool,
    /// Where the root thread released the chain: its stacks at the wake-up
    /// that ended the last link's wait (the unlock, unpark, notify or
    /// write), the most frequent of those sampled (`record --waker-sample`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseSite>,
    /// The heaviest branch of the chains into this root, victims first:
    /// from the root out, at each step the link the most idle came
    /// through (empty: the root's own threads were the victims).
    pub chain: Vec<ChainLink>,
    /// Distinct chains into this root.
    pub chains: u64,
}

/// A root thread's release site (JSON `root_causes.roots[].release`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReleaseSite {
    /// The waker's stack at the wake-up, innermost first.
    pub frames: Vec<PathFrame>,
    /// The index in `frames` of the program's first frame.
    pub program_frame: Option<usize>,
    /// The root's idle whose release was sampled at this site, ns, and at
    /// any site (the rest of the root's idle went through wake-ups that
    /// took no stacks).
    pub idle_ns: u64,
    pub sampled_ns: u64,
}

impl ReleaseSite {
    /// The program's first frame, else the first outside the kernel.
    pub fn frame(&self) -> Option<&PathFrame> {
        frame_of(&self.frames, self.program_frame)
    }
}

impl RootCause {
    /// The program's first frame, else the first outside the kernel.
    pub fn frame(&self) -> Option<&PathFrame> {
        frame_of(&self.frames, self.program_frame)
    }
}

impl ChainLink {
    /// The program's first frame, else the first outside the kernel.
    pub fn frame(&self) -> Option<&PathFrame> {
        frame_of(&self.frames, self.program_frame)
    }
}

/// The idle the roots do not cover, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NotFollowed {
    /// Idle no thread's leaving opened (a CPU idle since the window's start
    /// or a stream break), ns.
    pub no_cause_ns: u64,
    /// Idle after idleflow's own threads left, or whose chain went through
    /// one of them (a JVM thread that waited for idleflow's attach), ns.
    pub idleflow_ns: u64,
    /// Idle after threads of processes the report does not show left, ns.
    pub other_processes_ns: u64,
}

/// The root causes of a report (JSON `root_causes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RootCausesSection {
    /// All CPUs' idle time in the window, ns.
    pub idle_ns: u64,
    /// Of that, followed to a root: the roots' sum, ns.
    pub followed_ns: u64,
    /// `followed_ns` as % of `idle_ns`.
    pub followed_pct: f64,
    /// The rest of `idle_ns`.
    pub not_followed: NotFollowed,
    /// Idle in roots of each kind, ns: path, device, contention, unknown.
    pub by_kind: [u64; 4],
    /// Idle in `unknown` roots because a walk's depth or budget cut its
    /// chain, ns.
    pub cut_ns: u64,
    /// Idle in roots without frames (a wait or a run whose switch-out had
    /// no stacks taken), ns.
    pub no_stack_ns: u64,
    /// Idle intervals after an incidental run (a thread that woke on an
    /// idle CPU by its own timer and woke no one) followed down the chain
    /// of the idle it interrupted instead, and their idle, ns.
    pub continued_intervals: u64,
    pub continued_ns: u64,
    /// Whether the recording took stacks at every wait (`record --stacks
    /// waits`), not only where a CPU went idle.
    pub stacks_at_waits: bool,
    /// Roots, most idle first.
    pub roots: Vec<RootCause>,
    /// The pool-level wait-for graph weighted by idle, and its knots.
    pub wait_graph: WaitGraph,
}

impl RootCausesSection {
    /// The root causes of `a`, with `total_idle_ns` the CPUs' idle in the
    /// window.
    pub fn new(a: &Analysis, total_idle_ns: u64) -> Self {
        let mut paths = PathResolver::new(a);
        let GroupedRoots {
            groups,
            link_frames,
            graph_chains,
            by_kind,
            followed_ns,
            other_processes_ns,
            idleflow_ns,
        } = GroupedRoots::new(a, &mut paths);
        let mut roots: Vec<RootCause> = groups
            .into_iter()
            .map(|(key, g)| root_cause(key, g, &link_frames, &mut paths, total_idle_ns))
            .collect();
        roots.sort_by(|x, y| {
            y.idle_ns
                .cmp(&x.idle_ns)
                .then_with(|| x.frames.cmp(&y.frames))
        });
        let (caused, idleflow_caused) = idle_caused(a);
        RootCausesSection {
            idle_ns: total_idle_ns,
            followed_ns,
            followed_pct: pct(followed_ns, total_idle_ns),
            not_followed: NotFollowed {
                no_cause_ns: total_idle_ns.saturating_sub(caused),
                idleflow_ns: idleflow_ns.saturating_add(idleflow_caused),
                other_processes_ns,
            },
            by_kind,
            cut_ns: a.blame.cut_ns,
            no_stack_ns: roots
                .iter()
                .filter(|r| r.frames.is_empty() && r.kind != RootKind::Contention)
                .fold(0u64, |s, r| s.saturating_add(r.idle_ns)),
            stacks_at_waits: a.info.stacks == "waits",
            continued_intervals: a.blame.continued.0,
            continued_ns: a.blame.continued.1,
            roots,
            wait_graph: WaitGraph::new(&graph_chains, total_idle_ns),
        }
    }
}

/// The idle the threads' leaving opened (the idle intervals with a cause),
/// ns, and of that the idle idleflow's own threads opened.
fn idle_caused(a: &Analysis) -> (u64, u64) {
    let mut caused = 0u64;
    let mut idleflow = 0u64;
    for ((_, tid), c) in &a.causes {
        caused = caused.saturating_add(c.idle_ns);
        if a.tool_tids.contains(tid) {
            idleflow = idleflow.saturating_add(c.idle_ns);
        }
    }
    (caused, idleflow)
}

/// The root cause of a group of roots (`key`, `g`): its device, release
/// site and the heaviest branch of its chains.
fn root_cause(
    key: RootGroupKey,
    g: RootGroup,
    link_frames: &FxHashMap<LinkKey, Vec<PathFrame>>,
    paths: &mut PathResolver,
    total_idle_ns: u64,
) -> RootCause {
    let (kind, process, pool, reason, object, _) = key;
    let frames = g.frames.0;
    let chains = g.chains.len() as u64;
    let chain = heaviest_chain(g.chains, link_frames);
    let device =
        (kind == RootKind::Device).then(|| root_device(&g.devices, &frames, &reason, &pool));
    let program_frame = frames.iter().position(|f| !f.runtime);
    let release = release_site(&g.releases, g.released_ns, paths);
    RootCause {
        idle_ns: g.idle_ns,
        share_pct: pct(g.idle_ns, total_idle_ns),
        kind,
        device,
        device_named_ns: (kind == RootKind::Device).then_some(g.irq_named_ns),
        process,
        threads: PathThreads {
            name: pool,
            count: g.tids.len() as u64,
            dispatches: 0,
        },
        reason,
        object,
        frames,
        program_frame,
        frames_from_release: g.from_release,
        release,
        chain,
        chains,
    }
}

/// The heaviest branch of a root's `chains` as chain links, victims
/// first, each with its whole frames from `link_frames`.
fn heaviest_chain(
    chains: FxHashMap<Vec<LinkKey>, (u64, Vec<LinkThreads>)>,
    link_frames: &FxHashMap<LinkKey, Vec<PathFrame>>,
) -> Vec<ChainLink> {
    heaviest_branch(chains)
        .into_iter()
        .map(|(key, (tids, hops), ns)| {
            let frames = link_frames.get(&key).cloned().unwrap_or_default();
            let (process, pool, reason, object, _) = key;
            let program_frame = frames.iter().position(|f| !f.runtime);
            ChainLink {
                process,
                threads: PathThreads {
                    name: pool,
                    count: tids.len() as u64,
                    dispatches: 0,
                },
                reason,
                object,
                program_frame,
                frames,
                hops,
                idle_ns: ns,
            }
        })
        .collect()
}

/// A device root's device words: the one with the most idle among
/// `devices`, else (none named) the one its wait's `frames`, `reason` and
/// `pool` name (a device root's reason is its wait's).
fn root_device(
    devices: &FxHashMap<Device, u64>,
    frames: &[PathFrame],
    reason: &str,
    pool: &str,
) -> String {
    devices
        .iter()
        .max_by_key(|(d, ns)| (**ns, **d))
        .map_or_else(
            || Device::of_wait(frames, &Reason::parse(reason), pool),
            |(d, _)| *d,
        )
        .words()
        .to_string()
}

/// A root's release site: of its `releases` (by the first thread seen
/// with them), the one with the most idle, with `sampled_ns` the idle
/// with any release site; none when its stacks name no frame.
fn release_site(
    releases: &FxHashMap<WakeStacks, (u32, u64)>,
    sampled_ns: u64,
    paths: &mut PathResolver,
) -> Option<ReleaseSite> {
    releases
        .iter()
        .max_by_key(|(w, (_, ns))| (*ns, **w))
        .map(|(w, &(tid, ns))| {
            let frames = paths.release_frames(tid, *w);
            ReleaseSite {
                program_frame: frames.iter().position(|f| !f.runtime),
                frames,
                idle_ns: ns,
                sampled_ns,
            }
        })
        .filter(|r| !r.frames.is_empty())
}

/// Folded stacks of the blame chains for `inferno` (`flamegraph
/// --blame`), weighted by idle ns: the victims at the bottom (process,
/// thread or pool, their wait), each link above the one it waited for
/// (`← indexer [park] ReentrantLock$NonfairSync in Catalog.indexOne`), and
/// on top the root (`[root: timer] writer`) with its frames, outermost
/// first. Only idle the report's threads opened; never idleflow's own.
#[derive(Debug, Clone, Copy)]
pub struct BlameChains<'a>(pub &'a Analysis);

impl Fold for BlameChains<'_> {
    fn fold(&self, fold: FoldOptions, out: &mut Folded) {
        let (a, merge_threads) = (self.0, fold.merge_threads);
        let mut cache: FxHashMap<RowKey, crate::sections::idle_paths::ResolvedRow> =
            FxHashMap::default();
        let pool = |tid: u32| {
            let [_, (_, thread)] = crate::path::roots(&a.names, tid, merge_threads);
            thread
        };
        for (k, &ns) in &a.blame.roots {
            let victim = a.blame.chains.get(k.links).first().unwrap_or(&k.path).tid();
            if !a.shows(victim) || ns == 0 || through_tool(a, k) {
                continue;
            }
            let [process, thread] = crate::path::roots(&a.names, victim, merge_threads);
            let mut frames: Vec<(FrameKind, String)> = vec![process, thread];
            // A convoy's hand-offs (the same pool waiting at the same code,
            // each woken by the one before) are one frame.
            let mut last = String::new();
            for (i, l) in a.blame.chains.get(k.links).iter().enumerate() {
                let r = cache.entry(*l).or_insert_with(|| resolve_key(a, l));
                let program = r.frames.iter().position(|f| !f.runtime);
                let mut words = format!("[{}]", r.reason);
                if !r.object.is_empty() {
                    words.push_str(&format!(" {}", r.object));
                }
                if let Some(f) = frame_of(&r.frames, program) {
                    words.push_str(&format!(" in {}", f.frame.name));
                }
                let who = pool(l.tid());
                let key = format!("{who} {words}");
                if key == last {
                    continue;
                }
                last = key;
                if i > 0 {
                    words = format!("← {who} {words}");
                }
                frames.push((FrameKind::Reason, words));
            }
            let r = cache
                .entry(k.path)
                .or_insert_with(|| resolve_key(a, &k.path));
            let what = match k.kind {
                RootKind::Path => "running".to_string(),
                RootKind::Device => Device::of_wait(&r.frames, &r.reason, &pool(k.path.tid()))
                    .words()
                    .to_string(),
                RootKind::Contention => "runnable".to_string(),
                RootKind::Unknown => "unknown".to_string(),
            };
            frames.push((
                FrameKind::Reason,
                format!("[root: {what}] {}", pool(k.path.tid())),
            ));
            frames.extend(
                r.frames
                    .iter()
                    .rev()
                    .map(|f| (f.frame.kind, f.frame.name.clone())),
            );
            out.add(frames, ns);
        }
    }
}
