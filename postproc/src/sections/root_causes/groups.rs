//! The roots of the blame walk grouped: each root the pass's blame
//! accumulator kept is counted as another process's idle, idleflow's own,
//! or followed; a followed root's path is resolved (its frames lent by a
//! sibling root or taken from its release site when its own wait or run
//! took no stacks), its device named, its chain folded into links (a
//! convoy's hand-offs are one link) and added to the group of roots with
//! the same kind, pool, reason, object and code. The pool-level wait-for
//! graph's chains are collected on the way.
//!
//! Invariant: every root's idle counts exactly once (other processes,
//! idleflow, or followed), and the followed idle is the groups' sum, as
//! it is `by_kind`'s.

use std::cell::RefCell;
use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::pass::blame::{RootKey, RootKind, WakeStacks};
use crate::pass::Analysis;
use crate::path::{Frame, PathFrame};
use crate::reasons::{Device, Reason};
use crate::sections::idle_paths::RowKey;

use super::paths::{frame_of, PathResolver, Resolved};

/// One link's (process, pool, reason, object, program frame).
pub(super) type LinkKey = (String, String, Reason, String, Option<Frame>);
/// One link's threads and most hops.
pub(super) type LinkThreads = (FxHashSet<u32>, u64);
/// A root group's (kind, process, pool, reason, object, program frame).
pub(super) type RootGroupKey = (RootKind, String, String, String, String, Option<Frame>);

/// Whether a chain goes through (or ends in) one of idleflow's own threads.
pub(super) fn through_tool(a: &Analysis, k: &RootKey) -> bool {
    std::iter::once(&k.path)
        .chain(a.blame.chains.get(k.links))
        .any(|l| a.tool_tids.contains(&l.tid()))
}

/// The roots that are told apart by their code, with their idle, frames,
/// release sites, devices, threads and chains.
#[derive(Default)]
pub(super) struct RootGroup {
    pub(super) idle_ns: u64,
    /// The frames of the path with the most idle, and that idle.
    pub(super) frames: (Vec<PathFrame>, u64),
    /// Whether those frames are a release site's (the roots had no
    /// stacks of their own).
    pub(super) from_release: bool,
    /// Release sites (by the first thread seen with them) and their
    /// idle; idle with any release site.
    pub(super) releases: FxHashMap<WakeStacks, (u32, u64)>,
    pub(super) released_ns: u64,
    /// Devices (named by the interrupts' stacks where taken, else
    /// by the waits' frames), and their idle; the idle whose device
    /// an interrupt's stack named.
    pub(super) devices: FxHashMap<Device, u64>,
    pub(super) irq_named_ns: u64,
    pub(super) tids: FxHashSet<u32>,
    /// Per chain shape: idle, and per link its threads and most hops.
    pub(super) chains: FxHashMap<Vec<LinkKey>, (u64, Vec<LinkThreads>)>,
}

impl RootGroup {
    /// Keeps `frames` (of a root with `ns` of idle) as the group's when
    /// they are better than those it has: a root's own frames win over a
    /// release site's, then the most idle.
    fn offer_frames(&mut self, frames: &[PathFrame], from_release: bool, ns: u64) {
        let better = (self.from_release && !from_release) || ns > self.frames.1;
        if (better && (from_release <= self.from_release || self.frames.0.is_empty()))
            || self.frames.0.is_empty()
        {
            self.frames = (frames.to_vec(), ns.max(self.frames.1));
            self.from_release = from_release;
        }
    }

    /// Adds a device root's idle to its device, and to the idle an
    /// interrupt's stack named when one did.
    fn add_device(&mut self, device: Device, irq_named: bool, ns: u64) {
        let d = self.devices.entry(device).or_default();
        *d = d.saturating_add(ns);
        if irq_named {
            self.irq_named_ns = self.irq_named_ns.saturating_add(ns);
        }
    }

    /// Adds the release sites sampled at root `k`'s wake-ups.
    fn add_releases(&mut self, a: &Analysis, k: &RootKey) {
        if let Some(e) = a.blame.extras.get(k) {
            for &(w, wns) in &e.release {
                let x = self.releases.entry(w).or_insert((k.path.tid(), 0));
                x.1 = x.1.saturating_add(wns);
                self.released_ns = self.released_ns.saturating_add(wns);
            }
        }
    }

    /// Adds one chain of `ns` idle, its links with their threads.
    fn add_chain(&mut self, links: &[(LinkKey, Vec<u32>)], ns: u64) {
        let c = self
            .chains
            .entry(links.iter().map(|s| s.0.clone()).collect())
            .or_insert_with(|| (0, vec![(FxHashSet::default(), 0); links.len()]));
        c.0 = c.0.saturating_add(ns);
        for (acc, (_, tids)) in c.1.iter_mut().zip(links) {
            acc.0.extend(tids.iter().copied());
            acc.1 = acc.1.max(tids.len() as u64);
        }
    }
}

/// Root `k`'s most frequent release site: the one sampled with the most
/// idle (release sites are sampled, `record --waker-sample`).
fn top_release(a: &Analysis, k: &RootKey) -> Option<WakeStacks> {
    a.blame
        .extras
        .get(k)
        .and_then(|e| e.release.iter().max_by_key(|(w, ns)| (*ns, *w)))
        .map(|&(w, _)| w)
}

/// Frames for roots whose own wait or run took no stacks (`--stacks
/// idle`, a switch-out that did not leave a CPU idle): those of the same
/// pool's roots of the same kind that had them and released the waiters
/// at the same site (the same code, sampled elsewhere), else the release
/// site's. A root's release site is its own where one was sampled, else
/// its pool's most frequent for that kind.
struct FrameLenders {
    /// Per (kind, pool, release site), the root with frames and the most
    /// idle, and that idle.
    with_frames: FxHashMap<(RootKind, String, WakeStacks), (RowKey, u64)>,
    /// Per (kind, pool), its roots' release sites and their idle.
    pool_releases: FxHashMap<(RootKind, String), FxHashMap<WakeStacks, u64>>,
    /// The paths lent so far, per (kind, path, release site): roots that
    /// differ only in their chains borrow the same.
    lent: RefCell<FxHashMap<(RootKind, RowKey, WakeStacks), RootPath>>,
}

/// A root's path, whether its frames are its release site's, and where
/// they came from ([`FrameLenders::root_path`]).
type RootPath = (Rc<Resolved>, bool, Lent);

impl FrameLenders {
    fn collect(a: &Analysis, paths: &mut PathResolver) -> Self {
        let mut with_frames: FxHashMap<(RootKind, String, WakeStacks), (RowKey, u64)> =
            FxHashMap::default();
        let mut pool_releases: FxHashMap<(RootKind, String), FxHashMap<WakeStacks, u64>> =
            FxHashMap::default();
        for (k, &ns) in &a.blame.roots {
            let Some(w) = top_release(a, k) else { continue };
            let r = paths.resolve(&k.path);
            let p = pool_releases.entry((k.kind, r.pool.clone())).or_default();
            for &(w, ns) in a.blame.extras.get(k).map_or(&[][..], |e| &e.release) {
                let x = p.entry(w).or_default();
                *x = x.saturating_add(ns);
            }
            if r.frames.is_empty() {
                continue;
            }
            let e = with_frames
                .entry((k.kind, r.pool.clone(), w))
                .or_insert((k.path, 0));
            if ns > e.1 {
                *e = (k.path, ns);
            }
        }
        FrameLenders {
            with_frames,
            pool_releases,
            lent: RefCell::default(),
        }
    }

    /// Root `k`'s path, its frames lent (by a sibling root, else by the
    /// root thread's release site) when its own wait or run had none;
    /// whether they are the release site's; and where they came from.
    fn root_path(&self, a: &Analysis, paths: &mut PathResolver, k: &RootKey) -> RootPath {
        let own = paths.resolve(&k.path);
        if !own.frames.is_empty() {
            return (own, false, Lent::Own);
        }
        let release = top_release(a, k).or_else(|| {
            self.pool_releases
                .get(&(k.kind, own.pool.clone()))?
                .iter()
                .max_by_key(|(w, ns)| (**ns, **w))
                .map(|(w, _)| *w)
        });
        let Some(w) = release else {
            return (own, false, Lent::Nothing);
        };
        if let Some(done) = self.lent.borrow().get(&(k.kind, k.path, w)) {
            return done.clone();
        }
        let mut r = Resolved::clone(&own);
        let mut from_release = false;
        let lent = if let Some((sibling, _)) = self.with_frames.get(&(k.kind, r.pool.clone(), w)) {
            let s = paths.resolve(sibling);
            r.frames = s.frames.clone();
            r.reason = s.reason.clone();
            Lent::Sibling(*sibling)
        } else {
            r.frames = paths.release_frames(k.path.tid(), w);
            from_release = !r.frames.is_empty();
            Lent::Release(w)
        };
        let done = (Rc::new(r), from_release, lent);
        self.lent
            .borrow_mut()
            .insert((k.kind, k.path, w), done.clone());
        done
    }
}

/// Where a root's frames came from ([`FrameLenders::root_path`]).
#[derive(Clone, Copy)]
enum Lent {
    /// Its own wait's or run's.
    Own,
    /// A sibling root's (same kind and pool, same release site): its path
    /// waits on what the sibling's does.
    Sibling(RowKey),
    /// Its release site's (sampled at this wake-up).
    Release(WakeStacks),
    /// None: its path has no frames.
    Nothing,
}

/// The interrupts' kernel stacks sampled at the wake-ups of each root
/// wait (same kind, same thread, same wait), whichever victim's chain led
/// to it, and their idle: the device that ends a root's wait is the
/// wait's, and they name it together.
fn interrupts_by_root_wait(a: &Analysis) -> FxHashMap<(RootKind, RowKey), FxHashMap<u64, u64>> {
    let mut irq_by_wait: FxHashMap<(RootKind, RowKey), FxHashMap<u64, u64>> = FxHashMap::default();
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
    irq_by_wait
}

/// The roots grouped, the links' frames, the wait-for graph's chains and
/// where the roots' idle went.
#[derive(Default)]
pub(super) struct GroupedRoots {
    pub(super) groups: FxHashMap<RootGroupKey, RootGroup>,
    /// Each link key's whole frames (the first seen).
    pub(super) link_frames: FxHashMap<LinkKey, Vec<PathFrame>>,
    /// Per chain its pools from the victims' to the root's, and its idle.
    pub(super) graph_chains: Vec<(Vec<String>, u64)>,
    /// Idle in roots of each kind, ns, and their sum.
    pub(super) by_kind: [u64; 4],
    pub(super) followed_ns: u64,
    /// Idle other processes' threads opened, ns.
    pub(super) other_processes_ns: u64,
    /// Idle of chains through idleflow's own threads, ns.
    pub(super) idleflow_ns: u64,
}

impl GroupedRoots {
    /// The roots of `a`'s blame walk, grouped.
    pub(super) fn new(a: &Analysis, paths: &mut PathResolver) -> Self {
        let lenders = FrameLenders::collect(a, paths);
        let irq_by_wait = interrupts_by_root_wait(a);
        let mut out = GroupedRoots::default();
        for (k, &ns) in &a.blame.roots {
            if out.count_followed(a, k, ns) {
                out.add_root(a, paths, &lenders, &irq_by_wait, k, ns);
            }
        }
        out
    }

    /// Counts root `k`'s idle where it goes; whether it is followed.
    fn count_followed(&mut self, a: &Analysis, k: &RootKey, ns: u64) -> bool {
        // Idle that another process's thread opened is not this
        // report's (its chain may lead into the program all the same).
        let victim = a.blame.chains.get(k.links).first().unwrap_or(&k.path).tid();
        if !a.shows(victim) {
            self.other_processes_ns = self.other_processes_ns.saturating_add(ns);
            return false;
        }
        // A chain through one of idleflow's own threads (a thread that
        // waited for its attach to a JVM) is idleflow's doing.
        if through_tool(a, k) {
            self.idleflow_ns = self.idleflow_ns.saturating_add(ns);
            return false;
        }
        self.followed_ns = self.followed_ns.saturating_add(ns);
        self.by_kind[k.kind as usize] = self.by_kind[k.kind as usize].saturating_add(ns);
        true
    }

    /// Adds followed root `k`, of `ns` idle, to its group and its chain
    /// to the wait-for graph.
    fn add_root(
        &mut self,
        a: &Analysis,
        paths: &mut PathResolver,
        lenders: &FrameLenders,
        irq_by_wait: &FxHashMap<(RootKind, RowKey), FxHashMap<u64, u64>>,
        k: &RootKey,
        ns: u64,
    ) {
        let (r, from_release, lent) = lenders.root_path(a, paths, k);
        let irq_device = interrupt_device(paths, irq_by_wait, k);
        let reason = root_reason(k.kind, &r.reason);
        let device = irq_device.unwrap_or_else(|| match lent {
            Lent::Own => paths.device_of_wait(&k.path),
            Lent::Sibling(s) => paths.device_of_wait(&s),
            Lent::Release(w) => paths.device_of_release(&k.path, w, &r),
            Lent::Nothing => Device::of_wait(&r.frames, &r.reason, &r.pool),
        });
        let nodes = wait_graph_nodes(a, paths, k, &r, device);
        self.graph_chains.push((nodes, ns));
        // Roots are told apart by the code (the program's first frame),
        // as the headline's causes are, not by the frames around it.
        let program = r.frames.iter().position(|f| !f.runtime);
        let code = frame_of(&r.frames, program).map(|f| f.frame.clone());
        let g = self
            .groups
            .entry((
                k.kind,
                r.process.clone(),
                r.pool.clone(),
                reason,
                r.object.clone(),
                code,
            ))
            .or_default();
        g.idle_ns = g.idle_ns.saturating_add(ns);
        g.offer_frames(&r.frames, from_release, ns);
        if k.kind == RootKind::Device {
            g.add_device(device, irq_device.is_some(), ns);
        }
        g.add_releases(a, k);
        g.tids.insert(k.path.tid());
        let links = chain_links(a, paths, &mut self.link_frames, k);
        g.add_chain(&links, ns);
    }
}

/// The device an interrupt's kernel stack named as ending root `k`'s wait
/// (the stack with the most idle), if one was sampled and named one.
fn interrupt_device(
    paths: &mut PathResolver,
    irq_by_wait: &FxHashMap<(RootKind, RowKey), FxHashMap<u64, u64>>,
    k: &RootKey,
) -> Option<Device> {
    irq_by_wait
        .get(&(k.kind, k.path))
        .and_then(|m| m.iter().max_by_key(|(irq, ns)| (**ns, **irq)))
        .and_then(|(&irq, _)| Device::of_interrupt(&paths.interrupt_frames(k.path.tid(), irq)))
}

/// A root's reason: for a `path` root what the thread did next, for a
/// `contention` root its wait for a CPU, else its wait's reason.
fn root_reason(kind: RootKind, reason: &Reason) -> String {
    match kind {
        RootKind::Contention => "runnable, waiting for a CPU".to_string(),
        RootKind::Path => format!("running, then {reason}"),
        _ => reason.to_string(),
    }
}

/// Root `k`'s chain in the wait-for graph: its links' pools from the
/// victims' to the root's `r` (`process: pool`), then what the root
/// waited for (its `device`, `CPU` or `unknown`), repeats merged.
fn wait_graph_nodes(
    a: &Analysis,
    paths: &mut PathResolver,
    k: &RootKey,
    r: &Resolved,
    device: Device,
) -> Vec<String> {
    let node = |process: &str, pool: &str| format!("{process}: {pool}");
    let mut nodes: Vec<String> = a
        .blame
        .chains
        .get(k.links)
        .iter()
        .map(|l| {
            let r = paths.resolve(l);
            node(&r.process, &r.pool)
        })
        .collect();
    nodes.push(node(&r.process, &r.pool));
    match k.kind {
        RootKind::Device => nodes.push(device.words().to_string()),
        RootKind::Contention => nodes.push("CPU".to_string()),
        RootKind::Unknown => nodes.push("unknown".to_string()),
        RootKind::Path => {}
    }
    nodes.dedup();
    nodes
}

/// Root `k`'s chain as links, victims first, each with the threads of its
/// waits in a row; each link key's whole frames kept in `link_frames`
/// (the first seen). A convoy's hand-offs (one pool thread waking the
/// next) are one link, however many hops it took.
fn chain_links(
    a: &Analysis,
    paths: &mut PathResolver,
    link_frames: &mut FxHashMap<LinkKey, Vec<PathFrame>>,
    k: &RootKey,
) -> Vec<(LinkKey, Vec<u32>)> {
    let mut links: Vec<(LinkKey, Vec<u32>)> = Vec::new();
    for l in a.blame.chains.get(k.links) {
        let r = paths.resolve(l);
        // Links are told apart by the code that waited (the program's
        // first frame), not by the frames around it or the source that
        // named them.
        let program = r.frames.iter().position(|f| !f.runtime);
        let key = (
            r.process.clone(),
            r.pool.clone(),
            r.reason.clone(),
            r.object.clone(),
            frame_of(&r.frames, program).map(|f| f.frame.clone()),
        );
        let frameless = r.frames.is_empty();
        link_frames
            .entry(key.clone())
            .or_insert_with(|| r.frames.clone());
        // A wait that took no stacks (`--stacks idle`) between waits of
        // the same pool is one more hand-off of that convoy, not a link
        // of its own.
        let same_pool = |last: &LinkKey| (&last.0, &last.1) == (&key.0, &key.1);
        match links.last_mut() {
            Some((last, tids)) if *last == key || (frameless && same_pool(last)) => {
                tids.push(l.tid())
            }
            Some((last, tids))
                if same_pool(last) && last.4.is_none() && link_frames[last].is_empty() =>
            {
                *last = key;
                tids.push(l.tid());
            }
            _ => links.push((key, vec![l.tid()])),
        }
    }
    links
}

/// The heaviest branch of a root's chains (shape, victims first → idle
/// and per link its threads): from the root out, at each step the link
/// the most idle came through among the chains that share the steps so
/// far, while at least a quarter of the idle through the last link goes
/// on (the rest had its victims there); each link with the idle through
/// it. Victims first.
pub(super) fn heaviest_branch(
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
