//! The tracer's side of the thread work area: tags each dispatch with the
//! node its leaving thread was in, and keeps every traced thread's running
//! DIP / IDLE counts current for the agent.
//!
//! Invariant: a dispatch is tagged only from the slot of its own thread, by
//! the rule of [`idleflow_wire::twa`] (current node, else history ring,
//! else unknown); the counts come from the same dispatch accounting that
//! postproc runs, fed with the merged (time-ordered) stream.

use std::sync::Arc;

use idleflow_accounting::Accounting;
use idleflow_format::{Dispatch, NodeTag, Record, RunSummary};
use idleflow_wire::twa::{Miss, Tag, WorkArea};
use rustc_hash::FxHashMap;

/// See the module documentation.
#[derive(Debug)]
pub struct LiveWorkArea {
    area: Arc<WorkArea>,
    /// tid → slot index, as of the last [`LiveWorkArea::refresh`].
    slots: FxHashMap<u32, usize>,
    /// When the previous read of the rings began: every dispatch stamped
    /// before it has been tagged.
    read_up_to: u64,
    accounting: Accounting,
}

impl LiveWorkArea {
    /// Starts tagging from `area` for a window starting at `start_ns` on `cpus`.
    pub fn new(area: Arc<WorkArea>, cpus: &[u32], start_ns: u64) -> Self {
        LiveWorkArea {
            area,
            slots: FxHashMap::default(),
            read_up_to: 0,
            accounting: Accounting::new(cpus, start_ns),
        }
    }

    /// Frees the slots of threads that left Java before the previous read,
    /// then re-reads which threads own slots. Call before each read of the
    /// rings, with the time that read begins: a thread claims its slot
    /// before it can be dispatched out of Java code.
    pub fn refresh(&mut self, now: u64) {
        self.slots.clear();
        for (i, tid, _) in self.area.claimed() {
            if self
                .area
                .slot(i)
                .is_some_and(|s| s.reclaim(self.read_up_to))
            {
                continue;
            }
            // A tid reused while its old slot awaits reclaim: the live
            // thread's slot wins.
            let live = |i: usize| self.area.slot(i).is_some_and(|s| !s.released());
            match self.slots.get(&tid) {
                Some(&old) if live(old) => {}
                _ => {
                    self.slots.insert(tid, i);
                }
            }
        }
        self.read_up_to = now;
    }

    /// Whether any thread owned a slot at the last refresh (a JVM agent is
    /// at work), so that reads must come often enough for its histories.
    pub fn active(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Tags `d` with the node its leaving thread was in, and counts why a
    /// tag is missing into `summary`.
    pub fn tag(&self, d: &mut Dispatch, summary: &mut RunSummary) {
        let Some(slot) = self.slots.get(&d.prev_tid).and_then(|&i| self.area.slot(i)) else {
            return;
        };
        if slot.tid() != d.prev_tid {
            // Only `refresh` frees slots, so this holds unless the file
            // was changed behind our back.
            return;
        }
        d.prev_node = match slot.node_at(d.time) {
            Tag::Current(n) => NodeTag::Current(n),
            Tag::Ring(n) => NodeTag::Ring(n),
            Tag::Unknown(miss) => {
                match miss {
                    Miss::Short => summary.unknown_short += 1,
                    // Neither could be read intact.
                    Miss::Overwritten | Miss::Torn => summary.unknown_overwritten += 1,
                }
                NodeTag::Unknown
            }
            Tag::BeforeClaim => {
                summary.before_claim += 1;
                NodeTag::Untraced
            }
            Tag::AfterRelease => {
                summary.after_release += 1;
                NodeTag::Untraced
            }
        };
    }

    /// Feeds one merged record to the live accounting and publishes the
    /// dispatched thread's counts to its slot.
    pub fn account(&mut self, r: &Record) {
        match r {
            Record::Dispatch(d) => {
                let out = self.accounting.dispatch(d);
                if let Some(tr) = out.trace {
                    if let Some(slot) = self.slots.get(&tr.tid).and_then(|&i| self.area.slot(i)) {
                        if let Some(t) = self.accounting.thread(tr.tid) {
                            if slot.tid() == tr.tid {
                                slot.set_counts(t.dip, t.idle);
                            }
                        }
                    }
                }
            }
            Record::Lost(l) => self.accounting.lost(l.cpu, l.count),
            _ => {}
        }
    }
}
