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

use std::collections::BTreeMap;

use idleflow_format::{ThreadTree, TreeHead, TreeNode};
use rustc_hash::FxHashMap;

use crate::arcflow::{thread_pattern, ArcRow, ArcflowOptions, JvmSummary, Measures, SortBy};
use crate::nodes::{NodeAttribution, NodeIdle};

/// What the flame graph's folded stacks are weighted by and how threads group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldOptions {
    /// Dispatches to idle (`true`) or the idle time that followed (`false`).
    pub dispatches: bool,
    /// Pool threads merged under their [`thread_pattern`].
    pub merge_threads: bool,
}

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
    folded: BTreeMap<String, u64>,
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
    /// Folded stacks (`frame;frame weight`), sorted, identical ones summed.
    pub folded: Vec<String>,
}

/// A thread's nodes by index: each node's parent index (`None` for the root
/// and for a node whose chain to the root is broken) and whether it hangs
/// from the root.
struct Linked {
    parent: Vec<Option<u32>>,
    attached: Vec<bool>,
}

fn link(nodes: &[TreeNode]) -> Linked {
    let index: FxHashMap<u64, u32> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id, i as u32))
        .collect();
    let mut parent = Vec::with_capacity(nodes.len());
    let mut attached = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        // Parents come before children: a later index is no parent (no cycles).
        let p = match index.get(&n.parent_id) {
            Some(&p) if n.level > 0 && (p as usize) < i => Some(p),
            _ => None,
        };
        let a = match p {
            Some(p) => attached[p as usize],
            None => i == 0 && n.level == 0,
        };
        parent.push(p);
        attached.push(a);
    }
    Linked { parent, attached }
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
            folded: BTreeMap::new(),
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
    pub fn thread(&mut self, t: &ThreadTree, idle: &NodeAttribution) {
        let Some(&jvm) = self.current.get(&t.pid) else {
            return; // a thread record without its head
        };
        let l = link(&t.nodes);
        if self.second_pass {
            self.add_measures(jvm, t, &l, idle);
        } else {
            self.first_pass_thread(jvm, t, &l, idle);
        }
    }

    fn first_pass_thread(
        &mut self,
        jvm: usize,
        t: &ThreadTree,
        l: &Linked,
        idle: &NodeAttribution,
    ) {
        let by = self.opts.arcflow.sort;
        let node_idle: Vec<Option<&NodeIdle>> =
            t.nodes.iter().map(|n| idle.nodes.get(&n.id)).collect();
        let s = &mut self.jvms[jvm].summary;
        s.threads += 1;
        s.nodes += t.nodes.len();
        s.tree_idle_ns = node_idle
            .iter()
            .flatten()
            .fold(s.tree_idle_ns, |a, i| a.saturating_add(i.idle_ns));
        // Subtree keys: children come after their parent, sum backwards.
        let mut keys: Vec<u64> = t
            .nodes
            .iter()
            .zip(&node_idle)
            .zip(&l.attached)
            .map(|((n, i), &a)| if a { own_key(n, *i, by) } else { 0 })
            .collect();
        for i in (0..keys.len()).rev() {
            if let Some(p) = l.parent[i] {
                keys[p as usize] = keys[p as usize].saturating_add(keys[i]);
            }
        }
        let thread_total = keys.first().copied().unwrap_or(0);
        self.total_key = self.total_key.saturating_add(thread_total);
        if let Some(fold) = self.opts.fold {
            self.fold(jvm, t, l, &node_idle, fold);
        }
        if t.nodes.is_empty() || !l.attached[0] {
            return;
        }
        match self.jvms[jvm].merged {
            Some(m) => {
                // Only paths with a non-zero key can reach the cut.
                let sk = &mut self.skeletons[m];
                let mut at: Vec<u32> = vec![NOT_SHOWN; t.nodes.len()];
                for (i, n) in t.nodes.iter().enumerate() {
                    if keys[i] == 0 {
                        continue;
                    }
                    let s = match l.parent[i] {
                        None if i == 0 => 0,
                        Some(p) if at[p as usize] != NOT_SHOWN => {
                            let p = at[p as usize];
                            let len = sk.nodes.len() as u32;
                            let s = *sk.child.entry((p, n.method)).or_insert(len);
                            if s == len {
                                sk.nodes.push(SkelNode {
                                    parent: p,
                                    method: n.method,
                                    level: n.level,
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
                sk.root_id = t.nodes[0].id;
                let mut at: Vec<u32> = vec![NOT_SHOWN; t.nodes.len()];
                for (i, n) in t.nodes.iter().enumerate() {
                    if keys[i] < cut || !l.attached[i] {
                        continue;
                    }
                    let parent = match l.parent[i] {
                        Some(p) => at[p as usize],
                        None => 0,
                    };
                    at[i] = sk.nodes.len() as u32;
                    sk.ids.insert(n.id, at[i]);
                    sk.nodes.push(SkelNode {
                        parent,
                        method: n.method,
                        level: n.level,
                        key: keys[i],
                        shown: NOT_SHOWN,
                    });
                }
                self.skeletons.push(sk);
            }
        }
    }

    /// Folded stacks of the thread's weighted nodes: a path is spelled out
    /// only for a node that carries weight, by walking up its parents.
    fn fold(
        &mut self,
        jvm: usize,
        t: &ThreadTree,
        l: &Linked,
        node_idle: &[Option<&NodeIdle>],
        fold: FoldOptions,
    ) {
        let methods = &self.jvms[jvm].methods;
        let thread = if fold.merge_threads {
            thread_pattern(&t.name)
        } else {
            t.name.clone()
        };
        let head = format!(
            "java {};{}",
            self.jvms[jvm].summary.pid,
            thread.replace(';', ":")
        );
        let mut frames: Vec<&str> = Vec::new();
        for (i, ni) in node_idle.iter().enumerate() {
            let Some(ni) = ni else { continue };
            let w = if fold.dispatches {
                ni.idle_dispatches
            } else {
                ni.idle_ns
            };
            if w == 0 || !l.attached[i] {
                continue;
            }
            frames.clear();
            let mut cur = i;
            while let Some(p) = l.parent[cur] {
                let m = t.nodes[cur].method;
                frames.push(methods.get(m as usize).map_or("<unknown method>", |s| s));
                cur = p as usize;
            }
            let mut line = head.clone();
            for f in frames.iter().rev() {
                line.push(';');
                line.push_str(&f.replace(';', ":"));
            }
            let e = self.folded.entry(line).or_default();
            *e = e.saturating_add(w);
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

    fn add_measures(&mut self, jvm: usize, t: &ThreadTree, l: &Linked, idle: &NodeAttribution) {
        match self.jvms[jvm].merged {
            Some(m) => {
                let sk = &self.skeletons[m];
                let mut at: Vec<u32> = vec![NOT_SHOWN; t.nodes.len()];
                for (i, n) in t.nodes.iter().enumerate() {
                    let s = match l.parent[i] {
                        None if i == 0 && l.attached[0] => 0,
                        Some(p) if at[p as usize] != NOT_SHOWN => {
                            match sk.child.get(&(at[p as usize], n.method)) {
                                Some(&s) => s,
                                None => continue,
                            }
                        }
                        _ => continue,
                    };
                    let shown = sk.nodes[s as usize].shown;
                    if shown == NOT_SHOWN {
                        continue; // nor is anything below it
                    }
                    at[i] = s;
                    self.measures[shown as usize].add_node(n, idle.nodes.get(&n.id));
                }
            }
            None => {
                let Some(first) = t.nodes.first() else { return };
                let Some(sk) = self
                    .skeletons
                    .iter()
                    .find(|s| s.jvm == jvm && s.root_id == first.id && !s.ids.is_empty())
                else {
                    return;
                };
                for n in &t.nodes {
                    if let Some(&s) = sk.ids.get(&n.id) {
                        let shown = sk.nodes[s as usize].shown;
                        if shown != NOT_SHOWN {
                            self.measures[shown as usize].add_node(n, idle.nodes.get(&n.id));
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
            if !sk.nodes.first().is_some_and(|r| r.shown != NOT_SHOWN) {
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
            folded: self
                .folded
                .into_iter()
                .map(|(stack, w)| format!("{stack} {w}"))
                .collect(),
        }
    }
}
