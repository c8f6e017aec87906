//! What the pass collects for the merged paths (`ARCHITECTURE.md`, "One
//! attribution model"): each idle-causing dispatch keyed by what covers
//! *it* (`RowKey`: its thread, the kernel and user stacks taken at its
//! switch-out, the tree agent's node it left in, the flight-recorder wait
//! that contains it), with the idle that followed, summed per key. The
//! report's section ([`crate::sections::idle_paths`]) resolves each key into one path.
//!
//! Invariant: memory is one entry per distinct key, never per dispatch.

pub mod key;

use crate::pass::handler::{Context, DispatchEvent, Handler};
pub(crate) use crate::pass::idle_paths::key::RowKey;
use idleflow_format::JavaWait;
use rustc_hash::FxHashMap;

use crate::pass::windows::{Series, Windows};

#[derive(Debug, Clone, Default)]
pub(crate) struct RowAcc {
    pub(crate) dispatches: u64,
    pub(crate) idle_ns: u64,
    /// The idle per time window, where the analysis splits it.
    pub(crate) windows: Series,
    /// The other thread the waits named (previous owner, notifier):
    /// symbol id → dispatches.
    pub(crate) others: FxHashMap<u64, u64>,
}

/// What one pass over the recording collects for the merged paths.
#[derive(Debug, Default)]
pub struct IdlePathsAcc {
    pub(crate) rows: FxHashMap<RowKey, RowAcc>,
    /// Per CPU slot, the last dispatch to idle: (time, leaving tid, its node).
    pub(crate) to_idle_node: Vec<Option<(u64, u32, u64)>>,
}

impl IdlePathsAcc {
    /// A dispatch to idle on CPU slot `ci` at `time`: `tid` left, in call-tree
    /// node `node` (0: none).
    pub fn to_idle(&mut self, ci: usize, time: u64, tid: u32, node: u64) {
        if self.to_idle_node.len() <= ci {
            self.to_idle_node.resize(ci + 1, None);
        }
        self.to_idle_node[ci] = Some((time, tid, node));
    }

    /// The node `tid` left CPU slot `ci` in at `time` (0: none known).
    pub fn node_at(&self, ci: usize, tid: u32, time: u64) -> u64 {
        match self.to_idle_node.get(ci).copied().flatten() {
            Some((t, who, node)) if t == time && who == tid => node,
            _ => 0,
        }
    }

    /// One idle-causing dispatch: `tid` left with `stacks` (kernel, user
    /// ids), in `node`, inside `wait` (whose stack is in group `group`),
    /// followed by `idle_ns` of idle over `span`; `dispatches` is 1, or 0
    /// for idle that continued an earlier one after one of idleflow's own
    /// threads ran. With `windows`, the idle is split into them too.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        tid: u32,
        stacks: (u64, u64),
        node: u64,
        wait: Option<(&JavaWait, u64)>,
        (idle_ns, span): (u64, (u64, u64)),
        dispatches: u64,
        windows: Option<&mut Windows>,
    ) -> RowKey {
        let key = RowKey::new(tid, stacks, node, wait);
        let r = self.rows.entry(key).or_default();
        r.dispatches += dispatches;
        r.idle_ns = r.idle_ns.saturating_add(idle_ns);
        if let Some(w) = windows {
            w.add(&mut r.windows, span, idle_ns);
        }
        if let Some((w, _)) = wait {
            if w.other != 0 && dispatches > 0 {
                *r.others.entry(w.other).or_default() += dispatches;
            }
        }
        key
    }

    /// Folds every path's windows to `windows`' final width, `count` of them.
    pub fn settle(&mut self, windows: &Windows, count: usize) {
        for r in self.rows.values_mut() {
            windows.settle(&mut r.windows, count);
        }
    }
}

impl Handler for IdlePathsAcc {
    /// A dispatch to idle: the node its thread left in, for the charge
    /// when the idle ends ([`IdlePathsAcc::node_at`]).
    fn dispatch(&mut self, e: &DispatchEvent<'_>, _ctx: &Context<'_>) {
        let d = e.dispatch;
        if e.outcome.to_idle {
            self.to_idle(e.ci, d.time, d.prev_tid, d.prev_node.node().unwrap_or(0));
        }
    }
}
