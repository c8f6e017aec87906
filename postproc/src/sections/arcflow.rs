//! The arcflow call-tree view: the JVM agents' trees joined with what the
//! dispatch stream says about each node (idle caused, trace-record deltas),
//! as indented rows for the report and as folded stacks for flame graphs.
//!
//! Two views: per thread (each thread's own tree, as the agent built it) or
//! merged (the threads of one JVM folded together by call path). Rows come
//! in depth-first order, children sorted by the chosen measure of their
//! whole subtree, and subtrees below a share of the total are cut (a
//! subtree whose measure is zero is never shown). The rows themselves are
//! built while the recording streams by ([`crate::pass::call_tree`]).
//!
//! Invariant: every number is a sum of node values from the recording;
//! merging adds them along identical method paths and never creates calls.

use idleflow_format::RunSummary;
use serde::Serialize;

pub use crate::pass::call_tree::rows::{
    ArcRow, ArcflowOptions, JvmSummary, Measures, RowNative, RowWait, SortBy,
};
use crate::pass::call_tree::BuiltViews;
use crate::pass::nodes::{NodeAttribution, TagCounts};

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
