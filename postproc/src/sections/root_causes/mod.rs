//! The root causes of idle (the report's section): the roots and chains
//! the pass's blame accumulator ([`crate::pass::blame`]) collected, named
//! as paths, grouped, with the pool-level wait-for graph and its knots.
//!
//! Invariant: the roots' idle adds up to the idle charged to the threads
//! that left CPUs idle (conservation), as the accumulator kept it.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::pass::Analysis;
use crate::path::PathFrame;
use crate::path::{Frame, FrameKind};
use crate::reasons::{Device, Reason};
use crate::sections::idle_paths::{resolve_key, PathThreads, RowKey};
use crate::share::pct;

pub use crate::pass::blame::RootKind;

mod wait_graph;

use crate::pass::blame::{RootKey, WakeStacks};
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

fn frame_of(frames: &[PathFrame], program: Option<usize>) -> Option<&PathFrame> {
    program.and_then(|i| frames.get(i)).or_else(|| {
        frames
            .iter()
            .find(|f| f.frame.kind != FrameKind::Kernel && !f.frame.name.starts_with('_'))
    })
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

/// Whether a chain goes through (or ends in) one of idleflow's own threads.
fn through_tool(a: &Analysis, k: &RootKey) -> bool {
    std::iter::once(&k.path)
        .chain(a.blame.chains.get(k.links))
        .any(|l| a.tool_tids.contains(&l.tid()))
}

/// One link's (process, pool, reason, object, program frame).
type LinkKey = (String, String, Reason, String, Option<Frame>);
/// One link's threads and most hops.
type LinkThreads = (FxHashSet<u32>, u64);

/// The heaviest branch of a root's chains (shape, victims first → idle
/// and per link its threads): from the root out, at each step the link
/// the most idle came through among the chains that share the steps so
/// far, while at least a quarter of the idle through the last link goes
/// on (the rest had its victims there); each link with the idle through
/// it. Victims first.
fn heaviest_branch(
    chains: FxHashMap<Vec<LinkKey>, (u64, Vec<LinkThreads>)>,
) -> Vec<(LinkKey, LinkThreads, u64)> {
    let mut live: Vec<(Vec<LinkKey>, u64, Vec<LinkThreads>)> = chains
        .into_iter()
        .map(|(shape, (ns, threads))| (shape, ns, threads))
        .collect();
    let mut branch = Vec::new();
    for depth in 1.. {
        // The link `depth` steps from the root, by idle through it.
        let mut through: FxHashMap<&LinkKey, u64> = FxHashMap::default();
        for (shape, ns, _) in &live {
            if let Some(k) = shape.len().checked_sub(depth).map(|i| &shape[i]) {
                let e = through.entry(k).or_default();
                *e = e.saturating_add(*ns);
            }
        }
        let continuing = crate::share::saturating_sum(through.values().copied());
        let Some((best, ns)) = through
            .into_iter()
            .max_by(|x, y| x.1.cmp(&y.1).then_with(|| y.0.cmp(x.0)))
            .map(|(k, ns)| (k.clone(), ns))
        else {
            break;
        };
        // Most of the idle through the last link had its victims there.
        if branch
            .last()
            .is_some_and(|(_, _, last): &(LinkKey, LinkThreads, u64)| continuing < last / 4)
        {
            break;
        }
        live.retain(|(shape, _, _)| shape.len() >= depth && shape[shape.len() - depth] == best);
        let mut threads: LinkThreads = (FxHashSet::default(), 0);
        for (shape, _, t) in &live {
            let t = &t[shape.len() - depth];
            threads.0.extend(t.0.iter().copied());
            threads.1 = threads.1.max(t.1);
        }
        branch.push((best, threads, ns));
    }
    branch.reverse();
    branch
}

/// A path's resolution, cached per key.
#[derive(Debug, Clone)]
struct Resolved {
    process: String,
    pool: String,
    reason: Reason,
    object: String,
    frames: Vec<PathFrame>,
}

impl RootCausesSection {
    /// The root causes of `a`, with `total_idle_ns` the CPUs' idle in the
    /// window.
    pub fn new(a: &Analysis, total_idle_ns: u64) -> Self {
        let mut cache: FxHashMap<RowKey, Resolved> = FxHashMap::default();
        let mut resolve = |k: &RowKey| -> Resolved {
            cache
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
        };
        /// (kind, process, pool, reason, object, frames).
        type Key = (RootKind, String, String, String, String, Option<Frame>);
        #[derive(Default)]
        struct Group {
            idle_ns: u64,
            /// The frames of the path with the most idle, and that idle.
            frames: (Vec<PathFrame>, u64),
            /// Whether those frames are a release site's (the roots had no
            /// stacks of their own).
            from_release: bool,
            /// Release sites (by the first thread seen with them) and their
            /// idle; idle with any release site.
            releases: FxHashMap<WakeStacks, (u32, u64)>,
            released_ns: u64,
            /// Devices (named by the interrupts' stacks where taken, else
            /// by the waits' frames), and their idle; the idle whose device
            /// an interrupt's stack named.
            devices: FxHashMap<Device, u64>,
            irq_named_ns: u64,
            tids: FxHashSet<u32>,
            /// Per chain shape: idle, and per link its threads and most hops.
            chains: FxHashMap<Vec<LinkKey>, (u64, Vec<LinkThreads>)>,
        }
        let mut groups: FxHashMap<Key, Group> = FxHashMap::default();
        let mut by_kind = [0u64; 4];
        let mut followed = 0u64;
        let mut other = 0u64;
        let mut tool = 0u64;
        // Per chain its pools from the victims' to the root's, and its idle.
        let mut graph_chains: Vec<(Vec<String>, u64)> = Vec::new();
        // Each link key's whole frames (the first seen).
        let mut link_frames: FxHashMap<LinkKey, Vec<PathFrame>> = FxHashMap::default();
        // A root whose own wait or run took no stacks (`--stacks idle`, a
        // switch-out that did not leave a CPU idle) takes the frames of the
        // same pool's roots of the same kind that had them and released the
        // waiters at the same site: the same code, sampled elsewhere. Its
        // release site is its own where one was sampled, else its pool's
        // most frequent for that kind (release sites are sampled,
        // `record --waker-sample`).
        let top_release = |k: &RootKey| {
            a.blame
                .extras
                .get(k)
                .and_then(|e| e.release.iter().max_by_key(|(w, ns)| (*ns, *w)))
                .map(|&(w, _)| w)
        };
        let mut with_frames: FxHashMap<(RootKind, String, WakeStacks), (RowKey, u64)> =
            FxHashMap::default();
        let mut pool_releases: FxHashMap<(RootKind, String), FxHashMap<WakeStacks, u64>> =
            FxHashMap::default();
        for (k, &ns) in &a.blame.roots {
            let Some(w) = top_release(k) else { continue };
            let r = resolve(&k.path);
            let p = pool_releases.entry((k.kind, r.pool.clone())).or_default();
            for &(w, ns) in a.blame.extras.get(k).map_or(&[][..], |e| &e.release) {
                let x = p.entry(w).or_default();
                *x = x.saturating_add(ns);
            }
            if r.frames.is_empty() {
                continue;
            }
            let e = with_frames
                .entry((k.kind, r.pool, w))
                .or_insert((k.path, 0));
            if ns > e.1 {
                *e = (k.path, ns);
            }
        }
        // The device that ends a root's wait is the wait's, whichever
        // victim's chain led to it: the interrupts' stacks sampled at every
        // chain into one root wait (same thread, same wait) name it together.
        let mut irq_by_wait: FxHashMap<(RootKind, RowKey), FxHashMap<u64, u64>> =
            FxHashMap::default();
        for (k, e) in &a.blame.extras {
            for &(irq, ns) in &e.irq {
                let x = irq_by_wait
                    .entry((k.kind, k.path))
                    .or_default()
                    .entry(irq)
                    .or_default();
                *x = x.saturating_add(ns);
            }
        }
        for (k, &ns) in &a.blame.roots {
            // Idle that another process's thread opened is not this
            // report's (its chain may lead into the program all the same).
            let victim = a.blame.chains.get(k.links).first().unwrap_or(&k.path).tid();
            if !a.shows(victim) {
                other = other.saturating_add(ns);
                continue;
            }
            // A chain through one of idleflow's own threads (a thread that
            // waited for its attach to a JVM) is idleflow's doing.
            if through_tool(a, k) {
                tool = tool.saturating_add(ns);
                continue;
            }
            followed = followed.saturating_add(ns);
            by_kind[k.kind as usize] = by_kind[k.kind as usize].saturating_add(ns);
            let mut r = resolve(&k.path);
            let extras = a.blame.extras.get(k);
            // The root thread's release site, where it took stacks: the
            // root's frames when its own wait or run had none (and no
            // sibling root lent its own).
            let mut from_release = false;
            let release = top_release(k).or_else(|| {
                pool_releases
                    .get(&(k.kind, r.pool.clone()))?
                    .iter()
                    .max_by_key(|(w, ns)| (**ns, **w))
                    .map(|(w, _)| *w)
            });
            if let Some(w) = release.filter(|_| r.frames.is_empty()) {
                if let Some((sibling, _)) = with_frames.get(&(k.kind, r.pool.clone(), w)) {
                    let s = resolve(sibling);
                    r.frames = s.frames;
                    r.reason = s.reason;
                } else {
                    r.frames = resolve(&RowKey::new(
                        k.path.tid(),
                        (w.kernel.into(), w.user.into()),
                        0,
                        None,
                    ))
                    .frames;
                    from_release = !r.frames.is_empty();
                }
            }
            let irq_device = irq_by_wait
                .get(&(k.kind, k.path))
                .and_then(|m| m.iter().max_by_key(|(k, ns)| (**ns, **k)))
                .map(|(&irq, _)| {
                    Device::of_interrupt(
                        &resolve(&RowKey::new(k.path.tid(), (irq, 0), 0, None)).frames,
                    )
                });
            let reason = match k.kind {
                RootKind::Contention => "runnable, waiting for a CPU".to_string(),
                RootKind::Path => format!("running, then {}", r.reason),
                _ => r.reason.to_string(),
            };
            let node = |process: &str, pool: &str| format!("{process}: {pool}");
            let mut nodes: Vec<String> = a
                .blame
                .chains
                .get(k.links)
                .iter()
                .map(|l| {
                    let r = resolve(l);
                    node(&r.process, &r.pool)
                })
                .collect();
            nodes.push(node(&r.process, &r.pool));
            let device = irq_device
                .flatten()
                .unwrap_or_else(|| Device::of_wait(&r.frames, &r.reason, &r.pool));
            match k.kind {
                RootKind::Device => nodes.push(device.words().to_string()),
                RootKind::Contention => nodes.push("CPU".to_string()),
                RootKind::Unknown => nodes.push("unknown".to_string()),
                RootKind::Path => {}
            }
            nodes.dedup();
            graph_chains.push((nodes, ns));
            // Roots are told apart by the code (the program's first frame),
            // as the headline's causes are, not by the frames around it.
            let program = r.frames.iter().position(|f| !f.runtime);
            let code = frame_of(&r.frames, program).map(|f| f.frame.clone());
            let g = groups
                .entry((k.kind, r.process, r.pool, reason, r.object, code))
                .or_default();
            g.idle_ns = g.idle_ns.saturating_add(ns);
            // A root's own frames win over a release site's.
            let better = (g.from_release && !from_release) || ns > g.frames.1;
            if (better && (from_release <= g.from_release || g.frames.0.is_empty()))
                || g.frames.0.is_empty()
            {
                g.frames = (r.frames, ns.max(g.frames.1));
                g.from_release = from_release;
            }
            if k.kind == RootKind::Device {
                let d = g.devices.entry(device).or_default();
                *d = d.saturating_add(ns);
                if irq_device.flatten().is_some() {
                    g.irq_named_ns = g.irq_named_ns.saturating_add(ns);
                }
            }
            if let Some(e) = extras {
                for &(w, wns) in &e.release {
                    let x = g.releases.entry(w).or_insert((k.path.tid(), 0));
                    x.1 = x.1.saturating_add(wns);
                    g.released_ns = g.released_ns.saturating_add(wns);
                }
            }
            g.tids.insert(k.path.tid());
            // A convoy's hand-offs (one pool thread waking the next) are
            // one link, however many hops it took.
            let mut shape: Vec<(LinkKey, Vec<u32>)> = Vec::new();
            for l in a.blame.chains.get(k.links) {
                let r = resolve(l);
                // Links are told apart by the code that waited (the
                // program's first frame), not by the frames around it or
                // the source that named them.
                let program = r.frames.iter().position(|f| !f.runtime);
                let key = (
                    r.process,
                    r.pool,
                    r.reason,
                    r.object,
                    frame_of(&r.frames, program).map(|f| f.frame.clone()),
                );
                let frameless = r.frames.is_empty();
                link_frames.entry(key.clone()).or_insert(r.frames);
                // A wait that took no stacks (`--stacks idle`) between
                // waits of the same pool is one more hand-off of that
                // convoy, not a link of its own.
                let same_pool = |last: &LinkKey| (&last.0, &last.1) == (&key.0, &key.1);
                match shape.last_mut() {
                    Some((last, tids)) if *last == key || (frameless && same_pool(last)) => {
                        tids.push(l.tid())
                    }
                    Some((last, tids))
                        if same_pool(last) && last.4.is_none() && link_frames[last].is_empty() =>
                    {
                        *last = key;
                        tids.push(l.tid());
                    }
                    _ => shape.push((key, vec![l.tid()])),
                }
            }
            let c = g
                .chains
                .entry(shape.iter().map(|s| s.0.clone()).collect())
                .or_insert_with(|| (0, vec![(FxHashSet::default(), 0); shape.len()]));
            c.0 = c.0.saturating_add(ns);
            for (acc, (_, tids)) in c.1.iter_mut().zip(&shape) {
                acc.0.extend(tids.iter().copied());
                acc.1 = acc.1.max(tids.len() as u64);
            }
        }
        let mut roots: Vec<RootCause> = groups
            .into_iter()
            .map(|((kind, process, pool, reason, object, _), g)| {
                let frames = g.frames.0;
                let chains = g.chains.len() as u64;
                let chain = heaviest_branch(g.chains)
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
                    .collect();
                let device = (kind == RootKind::Device).then(|| {
                    g.devices
                        .iter()
                        .max_by_key(|(d, ns)| (**ns, **d))
                        // A device root's reason is its wait's.
                        .map_or_else(
                            || Device::of_wait(&frames, &Reason::parse(&reason), &pool),
                            |(d, _)| *d,
                        )
                        .words()
                        .to_string()
                });
                let program_frame = frames.iter().position(|f| !f.runtime);
                let release = g
                    .releases
                    .iter()
                    .max_by_key(|(w, (_, ns))| (*ns, **w))
                    .map(|(w, &(tid, ns))| {
                        let frames =
                            resolve(&RowKey::new(tid, (w.kernel.into(), w.user.into()), 0, None))
                                .frames;
                        ReleaseSite {
                            program_frame: frames.iter().position(|f| !f.runtime),
                            frames,
                            idle_ns: ns,
                            sampled_ns: g.released_ns,
                        }
                    })
                    .filter(|r| !r.frames.is_empty());
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
            })
            .collect();
        roots.sort_by(|x, y| {
            y.idle_ns
                .cmp(&x.idle_ns)
                .then_with(|| x.frames.cmp(&y.frames))
        });
        let mut caused = 0u64;
        for ((_, tid), c) in &a.causes {
            caused = caused.saturating_add(c.idle_ns);
            if a.tool_tids.contains(tid) {
                tool = tool.saturating_add(c.idle_ns);
            }
        }
        RootCausesSection {
            idle_ns: total_idle_ns,
            followed_ns: followed,
            followed_pct: pct(followed, total_idle_ns),
            not_followed: NotFollowed {
                no_cause_ns: total_idle_ns.saturating_sub(caused),
                idleflow_ns: tool,
                other_processes_ns: other,
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

/// Folded stacks of the blame chains for `inferno` (`flamegraph
/// --blame`), weighted by idle ns: the victims at the bottom (process,
/// thread or pool, their wait), each link above the one it waited for
/// (`← indexer [park] ReentrantLock$NonfairSync in Catalog.indexOne`), and
/// on top the root (`[root: timer] writer`) with its frames, outermost
/// first. Only idle the report's threads opened; never idleflow's own.
pub fn folded(a: &Analysis, merge_threads: bool) -> Vec<String> {
    let mut cache: FxHashMap<RowKey, crate::sections::idle_paths::ResolvedRow> =
        FxHashMap::default();
    let mut out = crate::path::Folded::default();
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
    out.into_lines()
}
