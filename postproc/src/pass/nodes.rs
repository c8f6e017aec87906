//! Merging the dispatch stream into call-tree nodes: the patent's trace
//! records, derived from the tagged dispatches with the shared accounting,
//! summed per node id.
//!
//! Per node: dispatches to idle its thread's leaving caused (the thread left
//! while in this node and its CPU went idle), the idle time that followed,
//! and the sums of the trace records' `cpu_delta` / `total_delta` (idle
//! dispatches that happened while a thread waited in this node). Per CPU:
//! how each traced dispatch was tagged (current node, history ring,
//! unknown).
//!
//! With the JVMs' flight recordings in the recording too (`--java
//! tree,waits`), each node also gets the JVM's reasons for the idle its
//! thread's leaving caused ([`NodeWait`]): the node stays the key, the wait
//! that contained the switch-out adds why.
//!
//! With stacks taken at the switch-outs (the default), each node also gets
//! the native stacks (kernel and user) its threads left with when their
//! CPU went idle ([`NodeStacks`]): the Java node stays the key, the native
//! stack beneath it says where in the JVM, libc and the kernel it waited.
//!
//! Invariant: only tags the tracer read are used; an unknown tag attributes
//! nothing (it is counted in [`TagCounts::unknown`]).

use crate::pass::handler::{Context, DispatchEvent, Handler, OwnThreads, StackKind};
use idleflow_accounting::DispatchOutcome;
use idleflow_accounting::IdleInterval;
use idleflow_format::SwitchStack;
use idleflow_format::{Dispatch, NodeTag, WaitReason, IDLE_TID};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// What the dispatch stream adds to one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeIdle {
    /// Dispatches to idle caused by a thread leaving while in this node.
    pub idle_dispatches: u64,
    /// Idle time that followed them, ns.
    pub idle_ns: u64,
    /// Trace records whose thread waited in this node.
    pub trace_records: u64,
    /// Sum of their `cpu_delta`.
    pub cpu_delta: u64,
    /// Sum of their `total_delta`.
    pub total_delta: u64,
    /// The JVM's reasons for `idle_dispatches`, where its flight recording
    /// had the switch-out inside a wait (a few per node at most).
    pub waits: Vec<NodeWait>,
    /// The native stacks its threads left with when their CPU went idle.
    pub native: Vec<NodeStacks>,
}

/// The stacks taken at the switch-outs of a node's threads that left a
/// CPU idle, and what followed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStacks {
    /// Kernel stack id (0: none).
    pub kernel: u64,
    /// User stack id (0: none).
    pub user: u64,
    /// Dispatches to idle.
    pub idle_dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
}

/// Adds `s` into `all`, merging it with the entry of the same stacks.
pub(crate) fn add_stacks(all: &mut Vec<NodeStacks>, s: &NodeStacks) {
    match all
        .iter_mut()
        .find(|m| m.kernel == s.kernel && m.user == s.user)
    {
        Some(m) => {
            m.idle_dispatches = m.idle_dispatches.saturating_add(s.idle_dispatches);
            m.idle_ns = m.idle_ns.saturating_add(s.idle_ns);
        }
        None => all.push(s.clone()),
    }
}

/// A JVM wait's reason and object (a symbol id of its JVM's recording).
pub type WaitKey = (WaitReason, u64);

/// A JVM wait (reason and object, as a symbol of its JVM's recording) in
/// which a node's thread left a CPU idle, and what followed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeWait {
    /// The JVM's reason.
    pub reason: WaitReason,
    /// The object's symbol id in its JVM's flight recording (0: none).
    pub object: u64,
    /// Dispatches to idle.
    pub idle_dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
}

impl NodeIdle {
    fn wait(&mut self, reason: WaitReason, object: u64) -> &mut NodeWait {
        let i = match self
            .waits
            .iter()
            .position(|w| w.reason == reason && w.object == object)
        {
            Some(i) => i,
            None => {
                self.waits.push(NodeWait {
                    reason,
                    object,
                    idle_dispatches: 0,
                    idle_ns: 0,
                });
                self.waits.len() - 1
            }
        };
        &mut self.waits[i]
    }
}

/// How the dispatches of traced threads were tagged, on one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TagCounts {
    /// From the node current at the dispatch.
    pub current: u64,
    /// From the history ring.
    pub ring: u64,
    /// Not known.
    pub unknown: u64,
}

impl TagCounts {
    /// All traced dispatches.
    pub fn total(&self) -> u64 {
        self.current
            .saturating_add(self.ring)
            .saturating_add(self.unknown)
    }
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct NodeAttribution {
    /// Per node id.
    pub nodes: FxHashMap<u64, NodeIdle>,
    /// Per CPU slot.
    pub tags: Vec<TagCounts>,
    /// The node each traced thread was in when it last left a CPU.
    last_node: FxHashMap<u32, u64>,
    /// Per CPU slot: the node whose thread's leaving began the open idle
    /// interval, and the JVM wait it left in.
    open: Vec<Option<(u64, Option<WaitKey>)>>,
    /// Per CPU slot: the switch-out that began the open idle interval
    /// (time, tid) and the stacks taken there (kernel, user ids).
    open_stacks: Vec<Option<(u64, u32, u64, u64)>>,
    /// Per CPU slot: while only idleflow's own threads ran since an idle
    /// interval ended, its open entries (see [`crate::pass::Analysis`]'s
    /// `carried`): the idle after them continues that interval's.
    carried: Vec<Option<Open>>,
    /// Per CPU slot: the open idle interval continues an earlier one (its
    /// dispatch was counted then).
    continued: Vec<bool>,
    /// Whether any dispatch was tagged yet (until then there is nothing to do).
    traced: bool,
}

/// An open idle interval's node and wait, and its switch-out's stacks.
type Open = (Option<(u64, Option<WaitKey>)>, Option<(u64, u32, u64, u64)>);

impl NodeAttribution {
    fn grow(&mut self, ci: usize) {
        if self.tags.len() <= ci {
            self.tags.resize(ci + 1, TagCounts::default());
            self.open.resize(ci + 1, None);
            self.open_stacks.resize(ci + 1, None);
            self.carried.resize(ci + 1, None);
            self.continued.resize(ci + 1, false);
        }
    }

    /// One dispatch on CPU slot `ci` and what the accounting made of it.
    /// `wait`: the JVM wait (reason, object symbol) its leaving thread was
    /// in, where a flight recording says so.
    #[inline]
    pub fn dispatch(
        &mut self,
        ci: usize,
        d: &Dispatch,
        out: &DispatchOutcome,
        wait: Option<WaitKey>,
        own: OwnThreads,
    ) {
        if !self.traced {
            if d.prev_node == NodeTag::Untraced {
                return; // a recording without a JVM agent costs one branch
            }
            self.traced = true;
        }
        self.grow(ci);
        match d.prev_node {
            NodeTag::Untraced => {}
            NodeTag::Current(n) => {
                self.tags[ci].current += 1;
                self.last_node.insert(d.prev_tid, n);
            }
            NodeTag::Ring(n) => {
                self.tags[ci].ring += 1;
                self.last_node.insert(d.prev_tid, n);
            }
            NodeTag::Unknown => {
                self.tags[ci].unknown += 1;
                self.last_node.remove(&d.prev_tid);
            }
        }
        if let Some(iv) = out.closed_idle {
            let open = (self.open[ci], self.open_stacks[ci]);
            self.idle_ended(ci, iv.end.saturating_sub(iv.start));
            if own.next {
                self.carried[ci] = Some(open);
            }
        }
        if d.next_tid != IDLE_TID && !own.next {
            self.carried[ci] = None;
        }
        if out.abandoned_cause.is_some() {
            self.open[ci] = None;
        }
        if out.to_idle && own.prev {
            if let Some((open, stacks)) = self.carried[ci] {
                (self.open[ci], self.open_stacks[ci]) = (open, stacks);
                self.continued[ci] = true;
                return;
            }
        }
        if out.to_idle {
            self.continued[ci] = false;
            self.open[ci] = d.prev_node.node().map(|n| (n, wait));
            self.open_stacks[ci] = d.prev_node.node().map(|_| (d.time, d.prev_tid, 0, 0));
            if let Some(n) = d.prev_node.node() {
                let e = self.nodes.entry(n).or_default();
                e.idle_dispatches += 1;
                if let Some((reason, object)) = wait {
                    e.wait(reason, object).idle_dispatches += 1;
                }
            }
        }
        if let Some(tr) = out.trace {
            if (tr.cpu_delta | tr.total_delta) > 0 && !self.last_node.is_empty() {
                if let Some(&n) = self.last_node.get(&tr.tid) {
                    let e = self.nodes.entry(n).or_default();
                    e.trace_records += 1;
                    e.cpu_delta = e.cpu_delta.saturating_add(tr.cpu_delta);
                    e.total_delta = e.total_delta.saturating_add(tr.total_delta);
                }
            }
        }
    }

    /// A stack (kernel `kernel`, or user `user`) taken at the switch-out
    /// of `tid` at `time` on CPU slot `ci`: kept for the node whose idle
    /// interval that switch-out began, if it did.
    pub fn switch_stack(&mut self, ci: usize, time: u64, tid: u32, kernel: u64, user: u64) {
        if !self.traced {
            return;
        }
        if let Some(Some(s)) = self.open_stacks.get_mut(ci) {
            if s.0 == time && s.1 == tid {
                s.2 = s.2.max(kernel);
                s.3 = s.3.max(user);
            }
        }
    }

    /// The idle interval open on CPU slot `ci` ended after `len` ns (at a
    /// dispatch from idle or at the window's end).
    pub fn idle_ended(&mut self, ci: usize, len: u64) {
        self.grow(ci);
        let stacks = self.open_stacks[ci].take();
        let dispatches = u64::from(!std::mem::take(&mut self.continued[ci]));
        if let Some((n, wait)) = self.open[ci].take() {
            let e = self.nodes.entry(n).or_default();
            e.idle_ns = e.idle_ns.saturating_add(len);
            if let Some((_, _, kernel, user)) = stacks.filter(|s| s.2 | s.3 != 0) {
                add_stacks(
                    &mut e.native,
                    &NodeStacks {
                        kernel,
                        user,
                        idle_dispatches: dispatches,
                        idle_ns: len,
                    },
                );
            }
            if let Some((reason, object)) = wait {
                let w = e.wait(reason, object);
                w.idle_ns = w.idle_ns.saturating_add(len);
            }
        }
    }
}

impl Handler for NodeAttribution {
    /// The tree node stays the key; the JVM's wait adds why.
    fn dispatch(&mut self, e: &DispatchEvent<'_>, ctx: &Context<'_>) {
        let d = e.dispatch;
        let wait = if !ctx.java.is_empty() && e.outcome.to_idle && d.prev_node.node().is_some() {
            ctx.java
                .wait_at(d.prev_tid, d.time)
                .map(|w| (w.reason, w.object))
        } else {
            None
        };
        NodeAttribution::dispatch(self, e.ci, d, e.outcome, wait, e.own);
    }

    fn switch_stack(&mut self, ci: usize, s: &SwitchStack, kind: StackKind, _ctx: &Context<'_>) {
        match kind {
            StackKind::Kernel => NodeAttribution::switch_stack(self, ci, s.time, s.tid, s.stack, 0),
            StackKind::User => NodeAttribution::switch_stack(self, ci, s.time, s.tid, 0, s.stack),
        }
    }

    fn open_at_end(&mut self, ci: usize, iv: &IdleInterval, _ctx: &Context<'_>) {
        self.idle_ended(ci, iv.end.saturating_sub(iv.start));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_accounting::Accounting;
    use idleflow_format::PrevState;

    fn d(time: u64, prev: u32, state: PrevState, next: u32, tag: NodeTag) -> Dispatch {
        Dispatch {
            time,
            cpu: 0,
            prev_tid: prev,
            prev_state: state,
            next_tid: next,
            prev_node: tag,
        }
    }

    #[test]
    fn the_idle_after_idleflow_woke_on_an_idle_cpu_stays_the_nodes() {
        use PrevState::*;
        let mut acc = Accounting::new(&[0], 0);
        let mut na = NodeAttribution::default();
        let own = |x: &Dispatch| OwnThreads {
            prev: x.prev_tid == 9,
            next: x.next_tid == 9,
        };
        let stream = [
            d(10, IDLE_TID, Unknown, 7, NodeTag::Untraced),
            d(20, 7, Sleeping, IDLE_TID, NodeTag::Current(500)),
            // idleflow's thread 9 wakes on the idle CPU and leaves.
            d(50, IDLE_TID, Unknown, 9, NodeTag::Untraced),
            d(55, 9, Sleeping, IDLE_TID, NodeTag::Untraced),
            d(100, IDLE_TID, Unknown, 7, NodeTag::Untraced),
            // Thread 7 hands the CPU to thread 9: no idle to continue.
            d(110, 7, Sleeping, 9, NodeTag::Current(501)),
            d(120, 9, Sleeping, IDLE_TID, NodeTag::Untraced),
        ];
        for x in &stream {
            let out = acc.dispatch(x);
            na.dispatch(0, x, &out, None, own(x));
        }
        for iv in acc.finish(200) {
            na.idle_ended(0, iv.end - iv.start);
        }
        assert_eq!(na.nodes[&500].idle_dispatches, 1);
        assert_eq!(na.nodes[&500].idle_ns, 30 + 45);
        assert_eq!(na.nodes.get(&501).map_or(0, |n| n.idle_ns), 0);
    }

    #[test]
    fn idle_is_charged_to_the_node_the_thread_left_in() {
        use PrevState::*;
        let mut acc = Accounting::new(&[0], 0);
        let mut na = NodeAttribution::default();
        let stream = [
            d(10, IDLE_TID, Unknown, 7, NodeTag::Untraced),
            d(20, 7, Sleeping, IDLE_TID, NodeTag::Current(500)),
            d(50, IDLE_TID, Unknown, 7, NodeTag::Untraced),
            d(60, 7, Sleeping, IDLE_TID, NodeTag::Ring(501)),
            d(65, IDLE_TID, Unknown, 8, NodeTag::Untraced),
            d(66, 8, Sleeping, IDLE_TID, NodeTag::Unknown),
        ];
        for x in &stream {
            let out = acc.dispatch(x);
            // Thread 7's first leaving lay in a monitor enter on symbol 42.
            let wait = (x.time == 20).then_some((WaitReason::MonitorEnter, 42));
            na.dispatch(0, x, &out, wait, OwnThreads::default());
        }
        for iv in acc.finish(100) {
            na.idle_ended(0, iv.end - iv.start);
        }
        assert_eq!(na.nodes[&500].idle_dispatches, 1);
        assert_eq!(na.nodes[&500].idle_ns, 30);
        assert_eq!(na.nodes[&501].idle_dispatches, 1);
        assert_eq!(na.nodes[&501].idle_ns, 5);
        assert_eq!(
            na.nodes[&500].waits,
            vec![NodeWait {
                reason: WaitReason::MonitorEnter,
                object: 42,
                idle_dispatches: 1,
                idle_ns: 30
            }]
        );
        assert!(na.nodes[&501].waits.is_empty());
        // Thread 7 came back at 50 after one idle dispatch (its own): the
        // trace record goes to the node it waited in.
        assert_eq!(na.nodes[&500].trace_records, 1);
        assert_eq!(na.nodes[&500].total_delta, 1);
        assert_eq!(
            na.tags[0],
            TagCounts {
                current: 1,
                ring: 1,
                unknown: 1
            }
        );
        assert_eq!(na.nodes.len(), 2, "the unknown tag attributes nothing");
    }
}
