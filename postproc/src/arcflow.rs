//! The arcflow call-tree view: the JVM agents' trees joined with what the
//! dispatch stream says about each node (idle caused, trace-record deltas),
//! as indented rows for the report and as folded stacks for flame graphs.
//!
//! Two views: per thread (each thread's own tree, as the agent built it) or
//! merged (the threads of one JVM folded together by call path). Rows come
//! in depth-first order, children sorted by the chosen measure of their
//! whole subtree, and subtrees below a share of the total are cut.
//!
//! Invariant: every number is a sum of node values from the recording;
//! merging adds them along identical method paths and never creates calls.

use idleflow_format::{RunSummary, TreeDump, TreeNode};
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::nodes::{NodeAttribution, NodeIdle, TagCounts};

/// The measure rows are sorted and cut by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// Idle time that followed a thread leaving in the subtree.
    IdleNs,
    /// Dispatches to idle caused in the subtree.
    IdleDispatches,
    /// Exclusive time summed over the subtree.
    Base,
    /// Calls.
    Calls,
}

/// How to build the view.
#[derive(Debug, Clone)]
pub struct ArcflowOptions {
    /// One tree per thread instead of merged per JVM.
    pub per_thread: bool,
    /// Sort and cut-off measure.
    pub sort: SortBy,
    /// Hide subtrees under this % of the total of `sort`.
    pub min_share_pct: f64,
}

impl Default for ArcflowOptions {
    fn default() -> Self {
        ArcflowOptions {
            per_thread: false,
            sort: SortBy::IdleNs,
            min_share_pct: 1.0,
        }
    }
}

/// The measures of a node (or of nodes merged along one path).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Measures {
    /// CALLS.
    pub calls: u64,
    /// CEE: calls made.
    pub callees: u64,
    /// BASE: exclusive time, ns.
    pub base_ns: u64,
    /// MMAX: longest single call, ns.
    pub mmax_ns: u64,
    /// AO: allocated objects (sampled).
    pub ao: u64,
    /// AB: allocated bytes (sampled).
    pub ab: u64,
    /// DIP, as the agent credited it from the work area.
    pub dip: u64,
    /// IDLE, as the agent credited it from the work area.
    pub idle: u64,
    /// Dispatches to idle caused by a thread leaving in this node.
    pub idle_dispatches: u64,
    /// Idle time that followed them, ns.
    pub idle_ns: u64,
    /// Trace records (a thread came back after waiting in this node while CPUs left idle).
    pub trace_records: u64,
    /// Sum of their `cpu_delta`.
    pub cpu_delta: u64,
    /// Sum of their `total_delta`.
    pub total_delta: u64,
}

impl Measures {
    fn add_node(&mut self, n: &TreeNode, idle: Option<&NodeIdle>) {
        self.calls = self.calls.saturating_add(n.calls);
        self.callees = self.callees.saturating_add(n.callees);
        self.base_ns = self.base_ns.saturating_add(n.base_ns);
        self.mmax_ns = self.mmax_ns.max(n.mmax_ns);
        self.ao = self.ao.saturating_add(n.ao);
        self.ab = self.ab.saturating_add(n.ab);
        self.dip = self.dip.saturating_add(n.dip);
        self.idle = self.idle.saturating_add(n.idle);
        if let Some(i) = idle {
            self.idle_dispatches = self.idle_dispatches.saturating_add(i.idle_dispatches);
            self.idle_ns = self.idle_ns.saturating_add(i.idle_ns);
            self.trace_records = self.trace_records.saturating_add(i.trace_records);
            self.cpu_delta = self.cpu_delta.saturating_add(i.cpu_delta);
            self.total_delta = self.total_delta.saturating_add(i.total_delta);
        }
    }

    fn key(&self, by: SortBy) -> u64 {
        match by {
            SortBy::IdleNs => self.idle_ns,
            SortBy::IdleDispatches => self.idle_dispatches,
            SortBy::Base => self.base_ns,
            SortBy::Calls => self.calls,
        }
    }
}

/// One line of the arcflow tree.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ArcRow {
    /// The JVM.
    pub pid: u32,
    /// Thread name (per-thread view) or `all threads` (merged view).
    pub thread: String,
    /// LV: depth, the thread's first method is 1.
    pub level: u32,
    /// Java method (`com.example.Pool.take`).
    pub method: String,
    /// The node's own measures.
    #[serde(flatten)]
    pub own: Measures,
    /// The sort measure over the node's whole subtree.
    pub subtree_key: u64,
    /// `subtree_key` as % of the total.
    pub subtree_pct: f64,
}

/// One JVM's trees, as found in the recording.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JvmSummary {
    /// Process id.
    pub pid: u32,
    /// `true`: dumped at VM death; `false`: the last periodic snapshot (the
    /// JVM did not reach VM death).
    pub final_dump: bool,
    /// Threads.
    pub threads: usize,
    /// Nodes.
    pub nodes: usize,
    /// Distinct methods.
    pub methods: usize,
    /// Method exits that matched no open call.
    pub unmatched_exits: u64,
    /// Idle time that followed this JVM's threads leaving a CPU in a node
    /// of its call trees, ns.
    pub tree_idle_ns: u64,
    /// Idle time that followed any thread of this JVM's process leaving a
    /// CPU, ns (set by the report; the tree covers `tree_idle_ns` of it).
    pub process_idle_ns: u64,
}

/// How the traced dispatches were tagged, in total and per CPU.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TagShares {
    /// CPU (`None` for all).
    pub cpu: Option<u32>,
    /// From the current node.
    pub current: u64,
    /// From the history ring.
    pub ring: u64,
    /// Unknown.
    pub unknown: u64,
    /// (current + ring) / all, %.
    pub exact_pct: f64,
}

/// Why dispatches of traced threads have no node, as the recorder counted
/// them (whole recording).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Untagged {
    /// Unknown: the node then lasted less than Δ, so it was not kept.
    pub unknown_short: u64,
    /// Unknown: the history entry was overwritten before it was read.
    pub unknown_overwritten: u64,
    /// Before the agent claimed the thread's slot (not counted as tagged
    /// or unknown: the thread was not traced yet).
    pub before_claim: u64,
    /// After the thread left Java (JVMTI `ThreadEnd`; not counted either).
    pub after_release: u64,
}

/// The arcflow section of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Arcflow {
    /// The JVMs.
    pub jvms: Vec<JvmSummary>,
    /// Tag shares per CPU, then the total (`cpu` null).
    pub tags: Vec<TagShares>,
    /// Why tags were missing, counted by the recorder.
    pub untagged: Untagged,
    /// The view's rows.
    pub rows: Vec<ArcRow>,
    /// Total of the sort measure over all trees.
    pub total_key: u64,
    /// The measure: `idle-ns`, `idle-dispatches`, `base`, `calls`.
    pub sort: String,
}

/// A tree of one view: nodes with children, measures, subtree keys.
struct ViewTree {
    pid: u32,
    thread: String,
    /// (method index, level, children, own measures)
    nodes: Vec<(u32, u32, Vec<usize>, Measures)>,
}

fn tag_share(cpu: Option<u32>, t: &TagCounts) -> TagShares {
    let all = t.total();
    TagShares {
        cpu,
        current: t.current,
        ring: t.ring,
        unknown: t.unknown,
        exact_pct: if all == 0 {
            0.0
        } else {
            ((t.current as f64 + t.ring as f64) * 10000.0 / all as f64).round() / 100.0
        },
    }
}

/// Builds the view trees of `dump`: one per thread, or one merged.
fn view_trees(dump: &TreeDump, idle: &NodeAttribution, per_thread: bool) -> Vec<ViewTree> {
    let mut out: Vec<ViewTree> = Vec::new();
    let mut merged = ViewTree {
        pid: dump.pid,
        thread: "all threads".into(),
        nodes: vec![(u32::MAX, 0, Vec::new(), Measures::default())],
    };
    let mut merged_child: FxHashMap<(usize, u32), usize> = FxHashMap::default();
    for th in &dump.threads {
        let mut tree = ViewTree {
            pid: dump.pid,
            thread: th.name.clone(),
            nodes: Vec::with_capacity(th.nodes.len()),
        };
        // Node id → index in this view tree (per thread) or the merged tree.
        let mut at: FxHashMap<u64, usize> = FxHashMap::default();
        for n in &th.nodes {
            let node_idle = idle.nodes.get(&n.id);
            if per_thread {
                let i = tree.nodes.len();
                let mut m = Measures::default();
                m.add_node(n, node_idle);
                tree.nodes.push((n.method, n.level, Vec::new(), m));
                if let Some(&p) = at.get(&n.parent_id) {
                    tree.nodes[p].2.push(i);
                }
                at.insert(n.id, i);
            } else {
                let i = if n.level == 0 {
                    0
                } else {
                    let Some(&p) = at.get(&n.parent_id) else {
                        continue;
                    };
                    *merged_child.entry((p, n.method)).or_insert_with(|| {
                        let i = merged.nodes.len();
                        merged
                            .nodes
                            .push((n.method, n.level, Vec::new(), Measures::default()));
                        merged.nodes[p].2.push(i);
                        i
                    })
                };
                merged.nodes[i].3.add_node(n, node_idle);
                at.insert(n.id, i);
            }
        }
        if per_thread && !tree.nodes.is_empty() {
            out.push(tree);
        }
    }
    if !per_thread {
        out.push(merged);
    }
    out
}

/// Subtree sums of the sort key, indexed like `tree.nodes`.
fn subtree_keys(tree: &ViewTree, by: SortBy) -> Vec<u64> {
    let mut keys: Vec<u64> = tree.nodes.iter().map(|n| n.3.key(by)).collect();
    // Children always come after their parent: sum backwards.
    for i in (0..tree.nodes.len()).rev() {
        let s: u64 = tree.nodes[i].2.iter().map(|&c| keys[c]).sum();
        keys[i] = keys[i].saturating_add(s);
    }
    keys
}

impl Arcflow {
    /// Builds the section; `None` when the recording has no call trees.
    pub fn new(
        trees: &[TreeDump],
        summary: &RunSummary,
        idle: &NodeAttribution,
        cpu_ids: &[u32],
        opts: &ArcflowOptions,
    ) -> Option<Self> {
        if trees.is_empty() {
            return None;
        }
        let mut tags: Vec<TagShares> = idle
            .tags
            .iter()
            .enumerate()
            .map(|(i, t)| tag_share(cpu_ids.get(i).copied(), t))
            .collect();
        let total = idle.tags.iter().fold(TagCounts::default(), |mut a, t| {
            a.current = a.current.saturating_add(t.current);
            a.ring = a.ring.saturating_add(t.ring);
            a.unknown = a.unknown.saturating_add(t.unknown);
            a
        });
        tags.push(tag_share(None, &total));
        let jvms = trees
            .iter()
            .map(|d| JvmSummary {
                pid: d.pid,
                final_dump: d.final_dump,
                threads: d.threads.len(),
                nodes: d.threads.iter().map(|t| t.nodes.len()).sum(),
                methods: d.methods.len(),
                unmatched_exits: d.unmatched_exits,
                tree_idle_ns: d
                    .threads
                    .iter()
                    .flat_map(|t| &t.nodes)
                    .filter_map(|n| idle.nodes.get(&n.id))
                    .fold(0, |s, i| s.saturating_add(i.idle_ns)),
                process_idle_ns: 0,
            })
            .collect();
        let views: Vec<(ViewTree, Vec<u64>, &TreeDump)> = trees
            .iter()
            .flat_map(|d| {
                view_trees(d, idle, opts.per_thread)
                    .into_iter()
                    .map(move |v| (v, d))
            })
            .map(|(v, d)| {
                let k = subtree_keys(&v, opts.sort);
                (v, k, d)
            })
            .collect();
        let total_key: u64 = views
            .iter()
            .map(|(_, k, _)| k.first().copied().unwrap_or(0))
            .sum();
        let cut = (opts.min_share_pct / 100.0 * total_key as f64).ceil() as u64;
        let mut rows = Vec::new();
        for (tree, keys, dump) in &views {
            // Depth-first, children by descending subtree key.
            let mut stack = vec![0usize];
            while let Some(i) = stack.pop() {
                let (method, level, children, own) = &tree.nodes[i];
                if total_key > 0 && keys[i] < cut.max(1) {
                    continue;
                }
                let name = if i != 0 || *method != u32::MAX {
                    dump.methods
                        .get(*method as usize)
                        .cloned()
                        .unwrap_or_else(|| "<unknown method>".into())
                } else {
                    format!("[{}]", tree.thread) // the thread (or JVM) itself
                };
                rows.push(ArcRow {
                    pid: tree.pid,
                    thread: tree.thread.clone(),
                    level: *level,
                    method: name,
                    own: own.clone(),
                    subtree_key: keys[i],
                    subtree_pct: if total_key == 0 {
                        0.0
                    } else {
                        (keys[i] as f64 * 10000.0 / total_key as f64).round() / 100.0
                    },
                });
                let mut ch = children.clone();
                ch.sort_by_key(|&c| std::cmp::Reverse(keys[c]));
                stack.extend(ch.into_iter().rev());
            }
        }
        Some(Arcflow {
            jvms,
            tags,
            untagged: Untagged {
                unknown_short: summary.unknown_short,
                unknown_overwritten: summary.unknown_overwritten,
                before_claim: summary.before_claim,
                after_release: summary.after_release,
            },
            rows,
            total_key,
            sort: match opts.sort {
                SortBy::IdleNs => "idle-ns",
                SortBy::IdleDispatches => "idle-dispatches",
                SortBy::Base => "base",
                SortBy::Calls => "calls",
            }
            .into(),
        })
    }
}

/// The name under which pool threads are merged: a number that ends the
/// name becomes `*` (`http-nio-8080-exec-12` → `http-nio-8080-exec-*`,
/// `pool-1-thread-3` → `pool-1-thread-*`); other names stay as they are.
pub fn thread_pattern(name: &str) -> String {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() == name.len() {
        name.to_string()
    } else {
        format!("{stem}*")
    }
}

/// Folded stacks (`frame;frame;frame weight`) of the idle-causing paths:
/// root → `java <pid>` → thread name (or, with `merge_threads`, its
/// [`thread_pattern`]) → Java frames, weighted by the idle time (or the
/// dispatches to idle) that followed a thread leaving in that exact node.
/// Lines with zero weight are left out; identical stacks are summed.
///
/// Memory is bounded by the nodes of one thread (an index of parents) and
/// the weighted paths: a path is spelled out only for a node that carries
/// weight, by walking up its parents.
pub fn folded_stacks(
    trees: &[TreeDump],
    idle: &NodeAttribution,
    dispatches: bool,
    merge_threads: bool,
) -> Vec<String> {
    let mut weights: std::collections::BTreeMap<String, u64> = Default::default();
    let mut frames: Vec<&str> = Vec::new();
    for d in trees {
        let root = format!("java {}", d.pid);
        for th in &d.threads {
            let thread = if merge_threads {
                thread_pattern(&th.name)
            } else {
                th.name.clone()
            };
            let index: FxHashMap<u64, usize> = th
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.id, i))
                .collect();
            for n in &th.nodes {
                let Some(i) = idle.nodes.get(&n.id) else {
                    continue;
                };
                let w = if dispatches {
                    i.idle_dispatches
                } else {
                    i.idle_ns
                };
                if w == 0 {
                    continue;
                }
                // Walk up to the thread's root; a node whose chain breaks
                // (a parent missing from the dump) is left out.
                frames.clear();
                let mut cur = n;
                let whole = loop {
                    if cur.level == 0 {
                        break true;
                    }
                    frames.push(
                        d.methods
                            .get(cur.method as usize)
                            .map_or("<unknown method>", |s| s),
                    );
                    match index.get(&cur.parent_id) {
                        // Parents come before children: a cycle cannot form.
                        Some(&p) if p < th.nodes.len() && frames.len() <= th.nodes.len() => {
                            cur = &th.nodes[p]
                        }
                        _ => break false,
                    }
                };
                if !whole {
                    continue;
                }
                let mut line = format!("{root};{}", thread.replace(';', ":"));
                for f in frames.iter().rev() {
                    line.push(';');
                    line.push_str(&f.replace(';', ":"));
                }
                let e = weights.entry(line).or_default();
                *e = e.saturating_add(w);
            }
        }
    }
    weights
        .into_iter()
        .map(|(stack, w)| format!("{stack} {w}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_threads_share_a_pattern() {
        assert_eq!(
            thread_pattern("http-nio-8080-exec-12"),
            "http-nio-8080-exec-*"
        );
        assert_eq!(thread_pattern("pool-1-thread-3"), "pool-1-thread-*");
        assert_eq!(thread_pattern("C2 CompilerThread0"), "C2 CompilerThread*");
        assert_eq!(
            thread_pattern("http-nio-8080-Poller"),
            "http-nio-8080-Poller"
        );
        assert_eq!(thread_pattern("main"), "main");
        assert_eq!(thread_pattern("7"), "*");
    }
}
