//! The rows of the arcflow call-tree view as the pass builds them
//! ([`super`]): a node's [`Measures`] (the agent's CALLS, BASE, … and what
//! the dispatch stream adds), one [`ArcRow`] per shown node, and the
//! options that sort and cut them. The report's section
//! ([`crate::sections::arcflow`]) carries them as they are.
//!
//! Invariant: every number is a sum of node values from the recording;
//! merging adds them along identical method paths and never creates calls.

use idleflow_format::TreeNode;
use serde::Serialize;

use crate::pass::nodes::{NodeIdle, NodeWait};
use crate::reasons::Reason;

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
    pub native: Vec<crate::pass::nodes::NodeStacks>,
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
                crate::pass::nodes::add_stacks(&mut self.native, s);
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
    pub reason: Reason,
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
