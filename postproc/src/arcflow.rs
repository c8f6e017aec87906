//! The arcflow call-tree view: the JVM agents' trees joined with what the
//! dispatch stream says about each node (idle caused, trace-record deltas),
//! as indented rows for the report and as folded stacks for flame graphs.
//!
//! Two views: per thread (each thread's own tree, as the agent built it) or
//! merged (the threads of one JVM folded together by call path). Rows come
//! in depth-first order, children sorted by the chosen measure of their
//! whole subtree, and subtrees below a share of the total are cut (a
//! subtree whose measure is zero is never shown). The rows themselves are
//! built while the recording streams by ([`crate::views`]).
//!
//! Invariant: every number is a sum of node values from the recording;
//! merging adds them along identical method paths and never creates calls.

use idleflow_format::{RunSummary, TreeNode};
use serde::Serialize;

use crate::nodes::{NodeAttribution, NodeIdle, NodeWait, TagCounts};
use crate::views::BuiltViews;

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
    /// The JVM's reasons for `idle_dispatches` (symbol ids: [`ArcRow::waits`] names them).
    #[serde(skip)]
    pub waits: Vec<NodeWait>,
    /// The native stacks of `idle_dispatches` (stack ids: [`ArcRow::native`] names them).
    #[serde(skip)]
    pub native: Vec<crate::nodes::NodeStacks>,
}

impl Measures {
    pub(crate) fn add_node(&mut self, n: &TreeNode, idle: Option<&NodeIdle>) {
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
            for w in &i.waits {
                match self
                    .waits
                    .iter_mut()
                    .find(|m| m.reason == w.reason && m.object == w.object)
                {
                    Some(m) => {
                        m.idle_dispatches = m.idle_dispatches.saturating_add(w.idle_dispatches);
                        m.idle_ns = m.idle_ns.saturating_add(w.idle_ns);
                    }
                    None => self.waits.push(w.clone()),
                }
            }
            for s in &i.native {
                crate::nodes::add_stacks(&mut self.native, s);
            }
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
    /// The JVM's reasons for the idle this node's threads caused, most idle
    /// first (`--java tree,waits`; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<RowWait>,
    /// Where the row's threads waited natively when their CPU went idle:
    /// the stacks taken at those switch-outs, most idle first (empty
    /// without stacks).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub native: Vec<RowNative>,
}

/// One native path beneath a tree row (see [`ArcRow::native`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RowNative {
    /// The kernel's wait (empty without a kernel stack).
    pub wait: String,
    /// The user frames, innermost first (the JVM's, libc's; the Java
    /// frames of the tree row above them).
    pub frames: Vec<crate::path::Frame>,
    /// Dispatches to idle the row's threads caused there.
    pub idle_dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// `idle_ns` as % of the row's own `idle_ns`.
    pub share_pct: f64,
}

/// One JVM reason for a tree row's idle (see [`ArcRow::waits`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RowWait {
    /// `monitor enter`, `park`, … ([`idleflow_format::WaitReason::words`]).
    pub reason: String,
    /// The monitor's or parked-on class, the peer's address, the path.
    pub object: String,
    /// Dispatches to idle the row's threads caused in such waits.
    pub idle_dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// `idle_ns` as % of the row's own `idle_ns`.
    pub share_pct: f64,
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

impl Arcflow {
    /// Builds the section from the views built while reading; `None` when
    /// the recording has no call trees.
    pub fn new(
        views: &BuiltViews,
        summary: &RunSummary,
        idle: &NodeAttribution,
        cpu_ids: &[u32],
        opts: &ArcflowOptions,
    ) -> Option<Self> {
        if views.jvms.is_empty() {
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
        let jvms = views.jvms.clone();
        let rows = views.rows.clone();
        let total_key = views.total_key;
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
