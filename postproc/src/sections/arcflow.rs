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
use rustc_hash::FxHashMap;
use serde::Serialize;

pub use crate::pass::call_tree::rows::{
    ArcRow, ArcflowOptions, JvmSummary, Measures, RowNative, RowWait, SortBy,
};
use crate::pass::call_tree::BuiltViews;
use crate::pass::nodes::{NodeAttribution, TagCounts};
use crate::pass::Analysis;
use crate::reasons::Reason;
use crate::share::pct;

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

/// The arcflow section of `a` (`None` without call trees), its rows'
/// JVM reasons and native paths named; `caused`: tid → (dispatches to
/// idle, idle ns) its leaving caused.
pub(crate) fn section(a: &Analysis, caused: &FxHashMap<u32, (u64, u64)>) -> Option<Arcflow> {
    let mut arcflow = Arcflow::new(
        &a.views,
        &a.summary,
        &a.node_idle,
        // Every CPU the accounting saw, hot-plugged ones included,
        // in the order of its CPU slots.
        &a.accounting
            .cpus()
            .iter()
            .map(|c| c.cpu)
            .collect::<Vec<_>>(),
        &a.view_options.arcflow,
    );
    if let Some(af) = arcflow.as_mut() {
        // The JVMs' reasons, named from their flight recordings.
        for row in &mut af.rows {
            let mut waits: Vec<RowWait> = row
                .own
                .waits
                .iter()
                .map(|w| RowWait {
                    reason: Reason::Jvm(w.reason),
                    object: if w.object == 0 {
                        String::new()
                    } else {
                        a.java.symbol(row.pid, w.object).to_string()
                    },
                    idle_dispatches: w.idle_dispatches,
                    idle_ns: w.idle_ns,
                    share_pct: pct(w.idle_ns, row.own.idle_ns),
                })
                .collect();
            waits.sort_by(|x, y| y.idle_ns.cmp(&x.idle_ns).then(x.reason.cmp(&y.reason)));
            row.waits = waits;
            row.native = row_native(a, &row.own.native, row.own.idle_ns);
        }
        for j in &mut af.jvms {
            j.process_idle_ns = caused
                .iter()
                .filter(|(tid, _)| {
                    !a.tool_tids.contains(tid)
                        && a.names.get(tid).is_some_and(|(pid, _)| *pid == j.pid)
                })
                .fold(0, |s, (_, (_, ns))| s.saturating_add(*ns));
        }
    }
    arcflow
}

/// The native paths beneath a tree row: its stacks named and merged by
/// (kernel wait, user frames), most idle first.
fn row_native(
    a: &Analysis,
    stacks: &[crate::pass::nodes::NodeStacks],
    row_idle_ns: u64,
) -> Vec<crate::sections::arcflow::RowNative> {
    let mut rows: Vec<crate::sections::arcflow::RowNative> = Vec::new();
    for s in stacks {
        let wait = crate::sections::call_paths::wait_of(&a.kernel, s.kernel);
        let frames = if s.user == 0 {
            Vec::new()
        } else {
            crate::sections::call_paths::user_path(&a.kernel, s.user)
        };
        match rows
            .iter_mut()
            .find(|r| r.wait == wait && r.frames == frames)
        {
            Some(r) => {
                r.idle_dispatches = r.idle_dispatches.saturating_add(s.idle_dispatches);
                r.idle_ns = r.idle_ns.saturating_add(s.idle_ns);
            }
            None => rows.push(crate::sections::arcflow::RowNative {
                wait,
                frames,
                idle_dispatches: s.idle_dispatches,
                idle_ns: s.idle_ns,
                share_pct: 0.0,
            }),
        }
    }
    for r in &mut rows {
        r.share_pct = pct(r.idle_ns, row_idle_ns);
    }
    rows.sort_by(|x, y| {
        y.idle_ns
            .cmp(&x.idle_ns)
            .then_with(|| x.frames.cmp(&y.frames))
    });
    rows
}
