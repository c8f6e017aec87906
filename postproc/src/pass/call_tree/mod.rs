//! The call-tree views, built from the tree records one thread at a time:
//! the arcflow rows (merged per JVM or per thread) and the folded stacks of
//! the flame graph.
//!
//! The records are read in two passes over the recording's tree section,
//! after the dispatch stream has given every node its final idle counts
//! ([`NodeAttribution`]). The first pass computes each thread's subtree
//! keys (the sort measure of a node's whole subtree), keeps the *skeleton*
//! of the view (only paths whose subtree key is not zero; per thread, only
//! nodes at or above the cut the total so far already implies), the
//! folded stacks and the per-JVM totals. With the total known, the cut is
//! final; the second pass adds the agents' measures (CALLS, BASE, …) into
//! the rows that will be shown, and nothing else.
//!
//! Invariant: memory holds one thread's nodes at a time plus the skeleton,
//! never the whole dump; every number is a sum of node values from the
//! recording, the same sums the whole trees would give (merging adds nodes
//! along identical method paths, per-thread rows are the thread's own).

pub mod rows;

use idleflow_format::{EncodedThread, TreeHead, TreeNode};
use rustc_hash::FxHashMap;

use crate::pass::java_waits::JavaWaits;
use crate::pass::nodes::{NodeAttribution, NodeIdle};
use crate::path::{thread_pattern, Fold, FoldOptions, Folded, FrameKind};
use rows::{ArcRow, ArcflowOptions, JvmSummary, Measures, SortBy};

/// Which views to build.
#[derive(Debug, Clone, Default)]
pub struct ViewOptions {
    /// The arcflow tree of the report.
    pub arcflow: ArcflowOptions,
    /// The folded stacks (`None`: not needed).
    pub fold: Option<FoldOptions>,
}

/// One node of a view's skeleton.
#[derive(Debug, Clone)]
struct SkelNode {
    parent: u32,
    method: u32,
    level: u32,
    /// Sort measure of the subtree.
    key: u64,
    /// Index into `Views::measures` once shown (after the first pass).
    shown: u32,
}

const NOT_SHOWN: u32 = u32::MAX;

/// One view tree: a JVM's threads merged, or one thread.
#[derive(Debug)]
struct Skeleton {
    jvm: usize,
    thread: String,
    nodes: Vec<SkelNode>,
    /// Merged view: (parent, method) → node.
    child: FxHashMap<(u32, u32), u32>,
    /// Per-thread view: node id → node.
    ids: FxHashMap<u64, u32>,
    /// Per-thread view: the thread tree's root node id.
    root_id: u64,
}

impl Skeleton {
    fn new(jvm: usize, thread: String) -> Self {
        Skeleton {
            jvm,
            thread,
            nodes: Vec::new(),
            child: FxHashMap::default(),
            ids: FxHashMap::default(),
            root_id: 0,
        }
    }
}

#[derive(Debug)]
struct Jvm {
    summary: JvmSummary,
    methods: Vec<String>,
    /// The merged skeleton (merged view only).
    merged: Option<usize>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Views {
    opts: ViewOptions,
    jvms: Vec<Jvm>,
    skeletons: Vec<Skeleton>,
    measures: Vec<Measures>,
    total_key: u64,
    cut: u64,
    second_pass: bool,
    /// In the second pass: the JVM the records belong to, by pid.
    current: FxHashMap<u32, usize>,
    folded: Folded,
    node_paths: FxHashMap<u64, Vec<String>>,
}

/// The built views.
#[derive(Debug, Clone, Default)]
pub struct BuiltViews {
    /// The JVMs that left call trees.
    pub jvms: Vec<JvmSummary>,
    /// The arcflow rows, depth-first, children by descending subtree key.
    pub rows: Vec<ArcRow>,
    /// Total of the sort measure over all trees.
    pub total_key: u64,
    /// Folded stacks (`frame;frame weight`), identical ones summed, folded
    /// while the trees were read (with the views' [`ViewOptions::fold`]):
    /// drawn through [`TreeStacks`].
    pub folded: Folded,
    /// The method path of every node whose thread's leaving made a CPU
    /// idle: node id → method names, the node's own first, its thread's
    /// entry last (for the merged paths, [`crate::sections::idle_paths`]).
    pub node_paths: FxHashMap<u64, Vec<String>>,
}

const NONE: u32 = u32::MAX;

/// Node id → index in a thread's node list: a binary search while the ids
/// rise (the agent numbers nodes in creation order), a map otherwise.
#[derive(Default)]
struct IdIndex {
    ids: Vec<u64>,
    map: Option<FxHashMap<u64, u32>>,
}

impl IdIndex {
    fn get(&self, id: u64) -> Option<u32> {
        match &self.map {
            Some(m) => m.get(&id).copied(),
            None => self.ids.binary_search(&id).ok().map(|i| i as u32),
        }
    }

    fn push(&mut self, id: u64) {
        let i = self.ids.len() as u32;
        if self.map.is_none() && self.ids.last().is_some_and(|&last| last >= id) {
            self.map = Some(
                self.ids
                    .iter()
                    .enumerate()
                    .map(|(i, &id)| (id, i as u32))
                    .collect(),
            );
        }
        if let Some(m) = &mut self.map {
            m.entry(id).or_insert(i);
        }
        self.ids.push(id);
    }
}

/// A thread's nodes by index, in compact arrays (about 30 bytes a node
/// with the ids, against a decoded node's 96): each node's parent (`NONE`
/// for the root and for a node whose chain to the root is broken), whether
/// it hangs from the root, and its method. (A node's level is its depth:
/// the parent's plus one.)
#[derive(Default)]
struct Linked {
    parent: Vec<u32>,
    attached: Vec<bool>,
    method: Vec<u32>,
}

impl Linked {
    /// Links the nodes of `t`, calling `each` with every node and its index.
    /// A damaged record ends the thread at the last node that decoded.
    fn new(t: &EncodedThread, mut each: impl FnMut(usize, &TreeNode)) -> Self {
        let mut l = Linked::default();
        let mut index = IdIndex::default();
        for (i, n) in t.nodes().map_while(Result::ok).enumerate() {
            // Looked up before this node is added: a parent comes before
            // its children, so no cycle can form.
            let p = match index.get(n.parent_id) {
                Some(p) if n.level > 0 => p,
                _ => NONE,
            };
            let a = if p == NONE {
                i == 0 && n.level == 0
            } else {
                l.attached[p as usize]
            };
            index.push(n.id);
            l.parent.push(p);
            l.attached.push(a);
            l.method.push(n.method);
            each(i, &n);
        }
        l
    }

    fn len(&self) -> usize {
        self.parent.len()
    }
}

fn own_key(n: &TreeNode, idle: Option<&NodeIdle>, by: SortBy) -> u64 {
    match by {
        SortBy::IdleNs => idle.map_or(0, |i| i.idle_ns),
        SortBy::IdleDispatches => idle.map_or(0, |i| i.idle_dispatches),
        SortBy::Base => n.base_ns,
        SortBy::Calls => n.calls,
    }
}

fn share(v: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        (v as f64 * 10000.0 / total as f64).round() / 100.0
    }
}

impl Views {
    /// Empty views to be built with `opts`.
    pub fn new(opts: ViewOptions) -> Self {
        Views {
            opts,
            jvms: Vec::new(),
            skeletons: Vec::new(),
            measures: Vec::new(),
            total_key: 0,
            cut: 1,
            second_pass: false,
            current: FxHashMap::default(),
            folded: Folded::default(),
            node_paths: FxHashMap::default(),
        }
    }

    fn cut_at(&self, total: u64) -> u64 {
        ((self.opts.arcflow.min_share_pct / 100.0 * total as f64).ceil() as u64).max(1)
    }

    /// A JVM's dump starts (either pass).
    pub fn head(&mut self, h: &TreeHead) {
        if self.second_pass {
            // The heads come back in the same order.
            let next = self.current.len();
            if next < self.jvms.len() {
                self.current.insert(h.pid, next);
            }
            return;
        }
        let merged = (!self.opts.arcflow.per_thread).then(|| {
            let mut s = Skeleton::new(self.jvms.len(), "all threads".into());
            s.nodes.push(SkelNode {
                parent: 0,
                method: u32::MAX,
                level: 0,
                key: 0,
                shown: NOT_SHOWN,
            });
            self.skeletons.push(s);
            self.skeletons.len() - 1
        });
        self.current.insert(h.pid, self.jvms.len());
        self.jvms.push(Jvm {
            summary: JvmSummary {
                pid: h.pid,
                final_dump: h.final_dump,
                threads: 0,
                nodes: 0,
                methods: h.methods.len(),
                unmatched_exits: h.unmatched_exits,
                tree_idle_ns: 0,
                process_idle_ns: 0,
            },
            methods: h.methods.clone(),
            merged,
        });
    }

    /// One thread's tree (either pass); `idle` is the dispatch stream's
    /// final attribution.
    /// `waits`: the JVMs' flight recordings, whose reasons top the folded
    /// stacks of the nodes that have them.
    pub fn thread(&mut self, t: &EncodedThread, idle: &NodeAttribution, waits: &JavaWaits) {
        let Some(&jvm) = self.current.get(&t.pid) else {
            return; // a thread record without its head
        };
        if self.second_pass {
            self.add_measures(jvm, t, idle);
        } else {
            self.first_pass_thread(jvm, t, idle, waits);
        }
    }

    fn first_pass_thread(
        &mut self,
        jvm: usize,
        t: &EncodedThread,
        idle: &NodeAttribution,
        waits: &JavaWaits,
    ) {
        let by = self.opts.arcflow.sort;
        let fold = self.opts.fold;
        let mut keys: Vec<u64> = Vec::new();
        let mut weighted: Vec<(u32, u64, &NodeIdle)> = Vec::new();
        let mut tree_idle = 0u64;
        let mut root_id = 0;
        let mut with_idle: Vec<(u32, u64)> = Vec::new();
        let l = Linked::new(t, |i, n| {
            let ni = idle.nodes.get(&n.id);
            if i == 0 {
                root_id = n.id;
            }
            if ni.is_some_and(|ni| ni.idle_dispatches > 0) {
                with_idle.push((i as u32, n.id));
            }
            keys.push(own_key(n, ni, by));
            if let Some(ni) = ni {
                tree_idle = tree_idle.saturating_add(ni.idle_ns);
                if let Some(f) = fold {
                    let w = if f.dispatches {
                        ni.idle_dispatches
                    } else {
                        ni.idle_ns
                    };
                    if w > 0 {
                        weighted.push((i as u32, w, ni));
                    }
                }
            }
        });
        let s = &mut self.jvms[jvm].summary;
        s.threads += 1;
        s.nodes += l.len();
        s.tree_idle_ns = s.tree_idle_ns.saturating_add(tree_idle);
        // Subtree keys: children come after their parent, sum backwards.
        for i in (0..keys.len()).rev() {
            if !l.attached[i] {
                keys[i] = 0;
            } else if l.parent[i] != NONE {
                let p = l.parent[i] as usize;
                keys[p] = keys[p].saturating_add(keys[i]);
            }
        }
        let thread_total = keys.first().copied().unwrap_or(0);
        self.total_key = self.total_key.saturating_add(thread_total);
        let methods = &self.jvms[jvm].methods;
        for (i, id) in with_idle {
            let mut path = Vec::new();
            let mut cur = i as usize;
            while l.parent[cur] != NONE {
                let m = l.method[cur] as usize;
                path.push(methods.get(m).map_or("<unknown method>", |s| s).to_string());
                cur = l.parent[cur] as usize;
            }
            self.node_paths.insert(id, path);
        }
        if let Some(fold) = fold {
            self.fold(jvm, t, &l, &weighted, fold, waits);
        }
        if l.len() == 0 || !l.attached[0] {
            return;
        }
        match self.jvms[jvm].merged {
            Some(m) => {
                // Only paths with a non-zero key can reach the cut.
                let sk = &mut self.skeletons[m];
                let mut at: Vec<u32> = vec![NOT_SHOWN; l.len()];
                for i in 0..l.len() {
                    if keys[i] == 0 {
                        continue;
                    }
                    let s = match l.parent[i] {
                        NONE if i == 0 => 0,
                        NONE => continue,
                        p if at[p as usize] != NOT_SHOWN => {
                            let p = at[p as usize];
                            let len = sk.nodes.len() as u32;
                            let s = *sk.child.entry((p, l.method[i])).or_insert(len);
                            if s == len {
                                let level = sk.nodes[p as usize].level + 1;
                                sk.nodes.push(SkelNode {
                                    parent: p,
                                    method: l.method[i],
                                    level,
                                    key: 0,
                                    shown: NOT_SHOWN,
                                });
                            }
                            s
                        }
                        _ => continue,
                    };
                    at[i] = s;
                    let k = &mut sk.nodes[s as usize].key;
                    *k = k.saturating_add(keys[i]);
                }
            }
            None => {
                // Per thread: what is under the cut the total so far implies
                // is under the final cut too.
                let cut = self.cut_at(self.total_key);
                if thread_total < cut {
                    return;
                }
                let mut sk = Skeleton::new(jvm, t.name.clone());
                sk.root_id = root_id;
                let mut at: Vec<u32> = vec![NOT_SHOWN; l.len()];
                let mut ids = t.nodes().map_while(Result::ok).map(|n| n.id);
                for (i, &key) in keys.iter().enumerate() {
                    let id = ids.next().unwrap_or(0);
                    if key < cut || !l.attached[i] {
                        continue;
                    }
                    let parent = match l.parent[i] {
                        NONE => 0,
                        p => at[p as usize],
                    };
                    let level = match l.parent[i] {
                        NONE => 0,
                        _ => sk.nodes[parent as usize].level + 1,
                    };
                    at[i] = sk.nodes.len() as u32;
                    sk.ids.insert(id, at[i]);
                    sk.nodes.push(SkelNode {
                        parent,
                        method: l.method[i],
                        level,
                        key,
                        shown: NOT_SHOWN,
                    });
                }
                self.skeletons.push(sk);
            }
        }
    }

    /// Folded stacks of the thread's `weighted` nodes: a path is spelled
    /// out only for a node that carries weight, by walking up its parents.
    /// The part of a node's weight that lay in a JVM wait gets the wait's
    /// reason as its top frame (`[monitor enter] Waits$Ledger`, as the
    /// wait stacks' flame graph spells it).
    fn fold(
        &mut self,
        jvm: usize,
        t: &EncodedThread,
        l: &Linked,
        weighted: &[(u32, u64, &NodeIdle)],
        fold: FoldOptions,
        waits: &JavaWaits,
    ) {
        let methods = &self.jvms[jvm].methods;
        let thread = if fold.merge_threads {
            thread_pattern(&t.name)
        } else {
            t.name.clone()
        };
        let pid = self.jvms[jvm].summary.pid;
        let head = [
            (FrameKind::Process, format!("java {pid}")),
            (FrameKind::Thread, thread),
        ];
        let mut frames: Vec<&str> = Vec::new();
        for &(i, w, ni) in weighted {
            if !l.attached[i as usize] {
                continue;
            }
            frames.clear();
            let mut cur = i as usize;
            while l.parent[cur] != NONE {
                let m = l.method[cur];
                frames.push(methods.get(m as usize).map_or("<unknown method>", |s| s));
                cur = l.parent[cur] as usize;
            }
            let path = || {
                head.iter()
                    .map(|(k, n)| (*k, n.as_str()))
                    .chain(frames.iter().rev().map(|&f| (FrameKind::Java, f)))
            };
            let mut rest = w;
            for nw in &ni.waits {
                let part = if fold.dispatches {
                    nw.idle_dispatches
                } else {
                    nw.idle_ns
                }
                .min(rest);
                if part == 0 {
                    continue;
                }
                rest -= part;
                let why = crate::pass::java_waits::reason_frame(waits, pid, nw.reason, nw.object);
                let mut with_reason: Vec<(FrameKind, &str)> = path().collect();
                with_reason.push((FrameKind::Reason, &why));
                self.folded.add(with_reason, part);
            }
            if rest > 0 {
                self.folded.add(path(), rest);
            }
        }
    }

    /// Ends the first pass: the cut is final; the nodes at or above it get
    /// their measures in the second pass.
    pub fn end_first_pass(&mut self) {
        self.cut = self.cut_at(self.total_key);
        let mut n = 0u32;
        for sk in &mut self.skeletons {
            for node in &mut sk.nodes {
                if node.key >= self.cut {
                    node.shown = n;
                    n += 1;
                }
            }
        }
        self.measures = vec![Measures::default(); n as usize];
        self.second_pass = true;
        self.current.clear();
    }

    fn add_measures(&mut self, jvm: usize, t: &EncodedThread, idle: &NodeAttribution) {
        match self.jvms[jvm].merged {
            Some(m) => {
                let sk = &self.skeletons[m];
                let measures = &mut self.measures;
                let mut index = IdIndex::default();
                let mut at: Vec<u32> = Vec::new();
                for (i, n) in t.nodes().map_while(Result::ok).enumerate() {
                    let parent = index.get(n.parent_id).filter(|_| n.level > 0);
                    index.push(n.id);
                    let s = match parent {
                        None if i == 0 && n.level == 0 => Some(0),
                        Some(p) if at[p as usize] != NOT_SHOWN => {
                            sk.child.get(&(at[p as usize], n.method)).copied()
                        }
                        _ => None,
                    };
                    // Shown, or nothing below it is either.
                    let shown = s.map_or(NOT_SHOWN, |s| sk.nodes[s as usize].shown);
                    if shown == NOT_SHOWN {
                        at.push(NOT_SHOWN);
                        continue;
                    }
                    at.push(s.unwrap_or(NOT_SHOWN));
                    measures[shown as usize].add_node(&n, idle.nodes.get(&n.id));
                }
            }
            None => {
                let Some(first) = t.nodes().next().and_then(Result::ok) else {
                    return;
                };
                let Some(sk) = self
                    .skeletons
                    .iter()
                    .find(|s| s.jvm == jvm && s.root_id == first.id && !s.ids.is_empty())
                else {
                    return;
                };
                for n in t.nodes().map_while(Result::ok) {
                    if let Some(&s) = sk.ids.get(&n.id) {
                        let shown = sk.nodes[s as usize].shown;
                        if shown != NOT_SHOWN {
                            self.measures[shown as usize].add_node(&n, idle.nodes.get(&n.id));
                        }
                    }
                }
            }
        }
    }

    /// The rows, the JVM summaries and the folded stacks.
    pub fn build(self) -> BuiltViews {
        let total = self.total_key;
        let mut rows = Vec::new();
        for sk in &self.skeletons {
            let jvm = &self.jvms[sk.jvm];
            let mut children: Vec<Vec<u32>> = vec![Vec::new(); sk.nodes.len()];
            for (i, n) in sk.nodes.iter().enumerate().skip(1) {
                if n.shown != NOT_SHOWN {
                    children[n.parent as usize].push(i as u32);
                }
            }
            if sk.nodes.first().is_none_or(|r| r.shown == NOT_SHOWN) {
                continue;
            }
            // Depth-first, children by descending subtree key.
            let mut stack = vec![0u32];
            while let Some(i) = stack.pop() {
                let n = &sk.nodes[i as usize];
                let method = if i != 0 || n.method != u32::MAX {
                    jvm.methods
                        .get(n.method as usize)
                        .cloned()
                        .unwrap_or_else(|| "<unknown method>".into())
                } else {
                    format!("[{}]", sk.thread) // the thread (or JVM) itself
                };
                rows.push(ArcRow {
                    pid: jvm.summary.pid,
                    thread: sk.thread.clone(),
                    level: n.level,
                    method,
                    own: self.measures[n.shown as usize].clone(),
                    subtree_key: n.key,
                    subtree_pct: share(n.key, total),
                    waits: Vec::new(),
                    native: Vec::new(),
                });
                let mut ch = std::mem::take(&mut children[i as usize]);
                ch.sort_by_key(|&c| std::cmp::Reverse(sk.nodes[c as usize].key));
                stack.extend(ch.into_iter().rev());
            }
        }
        BuiltViews {
            jvms: self.jvms.into_iter().map(|j| j.summary).collect(),
            rows,
            total_key: total,
            folded: self.folded,
            node_paths: self.node_paths,
        }
    }
}

/// The call trees' folded stacks as a [`Fold`] view: folded once while the
/// trees were read, so the options given here are the views' own.
#[derive(Debug, Clone, Copy)]
pub struct TreeStacks<'a>(pub &'a BuiltViews);

impl Fold for TreeStacks<'_> {
    fn fold(&self, _: FoldOptions, out: &mut Folded) {
        out.merge(&self.0.folded);
    }
}
