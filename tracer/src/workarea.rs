//! The tracer's side of the thread work area: tags each dispatch with the
//! node its leaving thread was in, and keeps every traced thread's running
//! DIP / IDLE counts current for the agent.
//!
//! Invariant: a dispatch is tagged only from the slot of its own thread, by
//! the rule of [`idleflow_format::twa`] (current node, else history ring,
//! else unknown); the counts come from the same dispatch accounting that
//! postproc runs, fed with the merged (time-ordered) stream.

use std::sync::Arc;

use idleflow_accounting::Accounting;
use idleflow_format::twa::{Tag, WorkArea};
use idleflow_format::{Dispatch, NodeTag, Record};
use rustc_hash::FxHashMap;

/// See the module documentation.
#[derive(Debug)]
pub struct LiveWorkArea {
    area: Arc<WorkArea>,
    /// tid → slot index, as of the last [`LiveWorkArea::refresh`].
    slots: FxHashMap<u32, usize>,
    accounting: Accounting,
}

impl LiveWorkArea {
    /// Starts tagging from `area` for a window starting at `start_ns` on `cpus`.
    pub fn new(area: Arc<WorkArea>, cpus: &[u32], start_ns: u64) -> Self {
        LiveWorkArea {
            area,
            slots: FxHashMap::default(),
            accounting: Accounting::new(cpus, start_ns),
        }
    }

    /// Re-reads which threads own slots. Call before tagging a batch: a
    /// thread claims its slot before it can be dispatched out of Java code.
    pub fn refresh(&mut self) {
        self.slots.clear();
        self.slots
            .extend(self.area.claimed().map(|(i, tid, _)| (tid, i)));
    }

    /// Tags `d` with the node its leaving thread was in.
    pub fn tag(&self, d: &mut Dispatch) {
        let Some(slot) = self.slots.get(&d.prev_tid).and_then(|&i| self.area.slot(i)) else {
            return;
        };
        if slot.tid() != d.prev_tid {
            return; // released and reused since the refresh
        }
        d.prev_node = match slot.node_at(d.time) {
            Tag::Current(n) => NodeTag::Current(n),
            Tag::Ring(n) => NodeTag::Ring(n),
            Tag::Unknown => NodeTag::Unknown,
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
