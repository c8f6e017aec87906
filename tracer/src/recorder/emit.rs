//! Where the recorder's records go once read: into the merge (released in
//! time order later) or written at once ([`Emit`]), behind one [`Put`].
//!
//! Invariant: [`Emit`] sees every record written in the order written, so
//! it counts the dispatches, wake-ups and late records, and ends a stopped
//! window at the newest record.

use idleflow_format::{Record, RunSummary};

use super::output::Output;
use super::Merged;
use super::RecorderError;
use crate::merge::Merge;
use crate::names::ThreadNames;
use crate::workarea::LiveWorkArea;

/// Where records go as they are read: the merge (released in time order
/// later), or the output at once (the eBPF records, read in time order at
/// release: `recorder/pending.rs`).
pub(super) trait Put {
    /// Hands over record `m` of merge source `source`, stamped `time`.
    fn put(&mut self, summary: &mut RunSummary, source: usize, time: u64, m: Merged);
}

impl Put for Merge<Merged> {
    fn put(&mut self, _: &mut RunSummary, source: usize, time: u64, m: Merged) {
        self.push(source, time, m);
    }
}

/// Drops what it is given: records released before the output exists.
pub(super) struct Discard;

impl Put for Discard {
    fn put(&mut self, _: &mut RunSummary, _: usize, _: u64, _: Merged) {}
}

/// Writes released records, in time order, to the output, counting them
/// in the summary.
pub(super) struct Emit<'a> {
    pub(super) out: &'a mut Output,
    pub(super) names: &'a mut ThreadNames,
    pub(super) work_area: Option<&'a mut LiveWorkArea>,
    /// The window was closed: it ends at the newest record written.
    pub(super) stopped: bool,
    /// The newest time written, and how many records were older than the
    /// newest before them (late: written at once, never dropped).
    pub(super) written: &'a mut (u64, u64),
    pub(super) result: Result<(), RecorderError>,
}

impl Emit<'_> {
    pub(super) fn emit(&mut self, summary: &mut RunSummary, t: u64, m: Merged) {
        if self.result.is_err() {
            return;
        }
        if t < self.written.0 {
            self.written.1 += 1;
        } else {
            self.written.0 = t;
        }
        if self.stopped {
            // A program that ran while the events were being detached
            // wrote records after the stop was read: the window ends
            // at the last of them, so that no interval crosses its end.
            summary.stop_ns = summary.stop_ns.max(t);
        }
        let out = &mut *self.out;
        let r = match m {
            Merged::WokenDispatch(wd) => {
                let (w, d) = (wd.wake, wd.dispatch());
                if self.stopped {
                    summary.stop_ns = summary.stop_ns.max(d.time);
                }
                summary.dispatches += 1;
                summary.wakeups += 1;
                if let Err(e) = out.write_woken_dispatch(&w, &d) {
                    self.result = Err(e);
                }
                return;
            }
            Merged::Dispatch(d) => Record::Dispatch(d),
            Merged::KernelStack(k) => Record::KernelStack(k),
            Merged::SwitchStack(st) => Record::SwitchStack(st),
            Merged::WakeStack(st) => Record::WakeStack(st),
            Merged::SwitchArg(a) => Record::SwitchArg(a),
            Merged::SwitchJavaState(j) => Record::SwitchJavaState(j),
            Merged::StackCopy(c) => {
                // Its bytes become the thread's reference for the
                // next copy's delta, without being copied again.
                if let Err(e) = out.writer.write_stack_copy(c) {
                    self.result = Err(e.into());
                }
                return;
            }
            Merged::WalkedStack(st) => Record::WalkedStack(st),
            Merged::SwitchJavaStack(st) => Record::SwitchJavaStack(st),
            Merged::WakeJavaStack(st) => Record::WakeJavaStack(st),
            Merged::Module(m) => Record::ModuleMap(m),
            Merged::Wakeup(w) => Record::Wakeup(w),
            Merged::Exit(e) => Record::Exit(e),
            Merged::Lost(l) => Record::Lost(l),
            Merged::Task(e) => Record::Thread(self.names.apply(*e)),
        };
        match &r {
            Record::Dispatch(_) => summary.dispatches += 1,
            Record::Wakeup(_) => summary.wakeups += 1,
            Record::Exit(e) => self.names.exited(e.tid),
            _ => {}
        }
        if let Some(wa) = self.work_area.as_mut() {
            wa.account(&r);
        }
        if let Err(e) = out.write(&r) {
            self.result = Err(e);
        }
    }
}

impl Put for Emit<'_> {
    fn put(&mut self, summary: &mut RunSummary, _: usize, time: u64, m: Merged) {
        self.emit(summary, time, m);
    }
}
