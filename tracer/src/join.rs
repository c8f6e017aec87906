//! Turning one CPU's ring records into dispatches.
//!
//! A context switch `prev -> next` on a CPU leaves up to three records in
//! that CPU's ring, in this order: the `sched_switch` sample (from `prev`'s
//! context, carries `prev_state`), the switch-out record (from `prev`'s
//! context, flags preemption) and the switch-in record (from `next`'s
//! context). Any of them can be missing: the kernel drops what is raised in
//! the idle task's context on some machines (CPU 1 here: no sample and no
//! switch-out when leaving idle, no switch-in when entering it), and a full
//! ring drops anything. The joiner emits exactly one dispatch per switch from
//! whatever part of the triple it saw, with `prev_state` from the sample when
//! it is there, else from the switch-out record's preempt flag.
//!
//! Samples are usually filtered in the kernel ([`SWITCH_SAMPLE_FILTER`]):
//! the states a switch-out record already tells (preempted) or implies
//! (interruptible sleep, when it is not a preemption) are left out, which
//! takes one record of three out of every common switch.
//!
//! Invariant: output dispatches are in the ring's (time) order and each
//! switch is emitted once: a switch-in record that confirms the dispatch just
//! emitted from its sample or switch-out record is not emitted again.

use idleflow_format::{Dispatch, PrevState, IDLE_TID};

use crate::parse::PerfRecord;

/// The ftrace filter set on the `sched_switch` event: a sample is written
/// only when `prev_state` is neither running (0), preempted
/// (`TASK_REPORT_MAX`, 0x100) nor interruptible sleep (1). A switch-out
/// record without its sample is then a sleep unless it flags preemption.
pub const SWITCH_SAMPLE_FILTER: &str = "prev_state & 254";

/// The filter of the second `sched_switch` event of `record --stacks
/// waits`: the interruptible sleeps of threads that leave their CPU to
/// another thread, which [`SWITCH_SAMPLE_FILTER`] and the main event's
/// `next_pid == 0` leave out; the two filters are disjoint, so a switch
/// has at most one sample.
pub const WAIT_SAMPLE_FILTER: &str = "prev_state == 1 && next_pid != 0";

/// Which `sched_switch` samples the kernel writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchSamples {
    /// One for every switch.
    All,
    /// Only those that pass [`SWITCH_SAMPLE_FILTER`].
    Filtered,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    time: u64,
    prev: u32,
    next: u32,
    state: PrevState,
}

/// The tid the kernel writes for a task that is no longer alive (an exiting
/// thread's last switch-out, or the switch-in that follows it).
const DEAD_TID: u32 = u32::MAX;

/// The per-CPU joiner. See the module documentation.
#[derive(Debug)]
pub struct Joiner {
    cpu: u32,
    samples: SwitchSamples,
    /// A `sched_switch` sample waiting for its switch-out record.
    pending: Option<Pending>,
    /// A dispatch out of idle seen from the idle side (sample or switch-out,
    /// CPU 0 here), waiting for its switch-in record, whose time it takes.
    from_idle: Option<Pending>,
    /// The last dispatch emitted from a sample or switch-out, waiting for
    /// its switch-in record: `(prev, next)`.
    awaiting_in: Option<(u32, u32)>,
    /// The thread that got the CPU at the last dispatch emitted.
    current: Option<u32>,
}

impl Joiner {
    /// A joiner for `cpu`, whose ring has `samples`.
    pub fn new(cpu: u32, samples: SwitchSamples) -> Self {
        Joiner {
            cpu,
            samples,
            pending: None,
            from_idle: None,
            awaiting_in: None,
            current: None,
        }
    }

    fn emit(&mut self, p: Pending, out: &mut impl FnMut(Dispatch)) {
        self.current = Some(p.next);
        out(Dispatch {
            time: p.time,
            cpu: self.cpu,
            prev_tid: p.prev,
            prev_state: p.state,
            next_tid: p.next,
            prev_node: Default::default(),
        });
    }

    /// Flushes a sample whose switch-out record never came, and a dispatch
    /// out of idle whose switch-in record never came (at the time of the
    /// record it was seen in).
    fn flush(&mut self, out: &mut impl FnMut(Dispatch)) {
        if let Some(p) = self.from_idle.take() {
            self.emit(p, out);
        }
        if let Some(p) = self.pending.take() {
            self.emit(p, out);
            self.awaiting_in = Some((p.prev, p.next));
        }
    }

    /// Emits `p` now, or, for a dispatch out of idle, holds it for its
    /// switch-in record.
    fn dispatch_seen(&mut self, p: Pending, out: &mut impl FnMut(Dispatch)) {
        if p.prev == IDLE_TID && p.next != IDLE_TID {
            self.from_idle = Some(p);
        } else {
            self.emit(p, out);
            self.awaiting_in = Some((p.prev, p.next));
        }
    }

    /// The thread leaving the CPU when the kernel names it [`DEAD_TID`]: the
    /// one a sample or switch-out of this same switch named, else the one
    /// that got the CPU last. `switch_in`: asked by the switch-in record.
    fn dead_prev(&self, next: u32, switch_in: bool) -> u32 {
        match (self.pending, self.awaiting_in) {
            (Some(p), _) if p.next == next => p.prev,
            (_, Some((prev, n))) if switch_in && n == next => prev,
            _ => self.current.unwrap_or(DEAD_TID),
        }
    }

    /// Feeds one record of this CPU's ring; calls `out` for each dispatch.
    ///
    /// A dispatch's time is that of the record written in the non-idle
    /// thread's context, which exists on every CPU: the switch-out record
    /// (or the sample) of a thread leaving, and the switch-in record of a
    /// thread taking the CPU from idle.
    pub fn feed(&mut self, rec: &PerfRecord, out: &mut impl FnMut(Dispatch)) {
        match *rec {
            PerfRecord::SchedSwitch {
                id,
                prev_tid,
                prev_state,
                next_tid,
                ..
            } => {
                self.flush(out);
                self.pending = Some(Pending {
                    time: id.time,
                    prev: prev_tid,
                    next: next_tid,
                    state: PrevState::from_kernel(prev_state),
                });
            }
            PerfRecord::Switch {
                id,
                out: true,
                preempt,
                other_tid,
            } => {
                let next = other_tid;
                let prev = if id.tid == DEAD_TID {
                    self.dead_prev(next, false)
                } else {
                    id.tid
                };
                let state = match self.pending.take() {
                    Some(p) if p.prev == prev && p.next == next => p.state,
                    other => {
                        self.pending = other;
                        self.flush(out);
                        if preempt {
                            PrevState::Preempted
                        } else if prev == IDLE_TID {
                            PrevState::Unknown
                        } else if self.samples == SwitchSamples::Filtered {
                            PrevState::Sleeping
                        } else {
                            PrevState::Blocked
                        }
                    }
                };
                if let Some(p) = self.from_idle.take() {
                    self.emit(p, out);
                }
                self.dispatch_seen(
                    Pending {
                        time: id.time,
                        prev,
                        next,
                        state,
                    },
                    out,
                );
            }
            PerfRecord::Switch {
                id,
                out: false,
                other_tid,
                ..
            } => {
                let next = id.tid;
                let prev = if other_tid == DEAD_TID {
                    match self.from_idle {
                        Some(p) if p.next == next => p.prev,
                        _ => self.dead_prev(next, true),
                    }
                } else {
                    other_tid
                };
                if let Some(mut p) = self.from_idle.take() {
                    if p.prev == prev && p.next == next {
                        // Seen from the idle side: the switch-in gives its time.
                        p.time = id.time;
                        self.emit(p, out);
                        self.awaiting_in = None;
                        return;
                    }
                    self.emit(p, out);
                }
                if let Some(mut p) = self.pending.take() {
                    if p.prev == prev && p.next == next {
                        // Sample seen, switch-out record lost: the switch-in completes it.
                        if prev == IDLE_TID {
                            p.time = id.time;
                        }
                        self.emit(p, out);
                        self.awaiting_in = None;
                        return;
                    }
                    self.pending = Some(p);
                    self.flush(out);
                }
                if self.awaiting_in.take() == Some((prev, next)) {
                    return; // confirms the dispatch already emitted
                }
                self.emit(
                    Pending {
                        time: id.time,
                        prev,
                        next,
                        state: PrevState::Unknown,
                    },
                    out,
                );
            }
            PerfRecord::Lost { .. } => {
                self.flush(out);
                self.awaiting_in = None;
                self.current = None;
            }
            PerfRecord::Other => {}
            // Wakeups and task records may come between the records of a
            // switch; only a sample can still be waiting for its switch-out.
            _ => {
                if let Some(p) = self.pending.take() {
                    self.emit(p, out);
                    self.awaiting_in = Some((p.prev, p.next));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::SampleId;

    fn id(tid: u32, time: u64) -> SampleId {
        SampleId {
            pid: tid,
            tid,
            time,
            cpu: 1,
        }
    }
    fn sample(t: u64, prev: u32, state: u64, next: u32) -> PerfRecord {
        PerfRecord::SchedSwitch {
            id: id(prev, t),
            prev_tid: prev,
            prev_state: state,
            next_tid: next,
            kernel_stack: None,
            user_stack: None,
        }
    }
    fn sw_out(t: u64, prev: u32, next: u32, preempt: bool) -> PerfRecord {
        PerfRecord::Switch {
            id: id(prev, t),
            out: true,
            preempt,
            other_tid: next,
        }
    }
    fn sw_in(t: u64, prev: u32, next: u32) -> PerfRecord {
        PerfRecord::Switch {
            id: id(next, t),
            out: false,
            preempt: false,
            other_tid: prev,
        }
    }
    fn join(recs: &[PerfRecord]) -> Vec<(u64, u32, PrevState, u32)> {
        join_with(SwitchSamples::All, recs)
    }
    fn join_with(samples: SwitchSamples, recs: &[PerfRecord]) -> Vec<(u64, u32, PrevState, u32)> {
        let mut j = Joiner::new(1, samples);
        let mut v = Vec::new();
        for r in recs {
            j.feed(r, &mut |d| {
                assert_eq!(d.cpu, 1);
                v.push((d.time, d.prev_tid, d.prev_state, d.next_tid))
            });
        }
        v
    }

    #[test]
    fn a_complete_triple_is_one_dispatch_with_the_samples_state() {
        let v = join(&[
            sample(10, 5, 1, 7),
            sw_out(11, 5, 7, false),
            sw_in(12, 5, 7),
        ]);
        assert_eq!(v, vec![(11, 5, PrevState::Sleeping, 7)]);
    }

    #[test]
    fn cpu1_idle_context_gaps_still_give_every_dispatch() {
        // Thread 5 goes idle (no switch-in of idle), later leaves idle (only
        // the switch-in of 5 is seen), twice.
        let v = join(&[
            sample(10, 5, 1, 0),
            sw_out(11, 5, 0, false),
            sw_in(30, 0, 5),
            sample(40, 5, 2, 0),
            sw_out(41, 5, 0, false),
            sw_in(60, 0, 5),
        ]);
        assert_eq!(
            v,
            vec![
                (11, 5, PrevState::Sleeping, 0),
                (30, 0, PrevState::Unknown, 5),
                (41, 5, PrevState::DiskSleep, 0),
                (60, 0, PrevState::Unknown, 5),
            ]
        );
    }

    #[test]
    fn the_preempt_flag_stands_in_for_a_missing_sample() {
        let v = join(&[
            sw_out(11, 5, 7, true),
            sw_in(12, 5, 7),
            sw_out(20, 7, 5, false),
        ]);
        assert_eq!(
            v,
            vec![
                (11, 5, PrevState::Preempted, 7),
                (20, 7, PrevState::Blocked, 5)
            ]
        );
    }

    #[test]
    fn a_sample_without_switch_out_is_completed_by_the_switch_in() {
        let v = join(&[sample(10, 5, 0x100, 7), sw_in(12, 5, 7)]);
        assert_eq!(v, vec![(10, 5, PrevState::Preempted, 7)]);
    }

    #[test]
    fn a_lone_sample_is_flushed_by_the_next_record() {
        let v = join(&[
            sample(10, 5, 1, 7),
            sample(20, 7, 1, 0),
            sw_out(21, 7, 0, false),
        ]);
        assert_eq!(
            v,
            vec![
                (10, 5, PrevState::Sleeping, 7),
                (21, 7, PrevState::Sleeping, 0)
            ]
        );
    }

    #[test]
    fn a_dispatch_out_of_idle_takes_the_switch_in_time_on_every_cpu() {
        // CPU 0 here: all three records of leaving idle are seen.
        let cpu0 = join(&[
            sample(10, 0, 0, 5),
            sw_out(11, 0, 5, false),
            sw_in(14, 0, 5),
        ]);
        // CPU 1 here: only the switch-in.
        let cpu1 = join(&[sw_in(14, 0, 5)]);
        assert_eq!(cpu0.len(), 1);
        assert_eq!(cpu1.len(), 1);
        assert_eq!(cpu0[0].0, 14);
        assert_eq!(cpu1[0].0, 14);
        // A switch-in that never comes: the idle side's time stands.
        let lost_in = join(&[
            sample(10, 0, 0, 5),
            sw_out(11, 0, 5, false),
            sample(20, 5, 1, 0),
            sw_out(21, 5, 0, false),
        ]);
        assert_eq!(lost_in[0], (11, 0, PrevState::Preempted, 5));
        assert_eq!(lost_in[1], (21, 5, PrevState::Sleeping, 0));
    }

    #[test]
    fn an_exiting_thread_keeps_its_tid() {
        // The kernel writes -1 for a task that is no longer alive.
        let v = join(&[
            sw_in(5, 0, 9),
            sample(10, 9, 0x10, 0),
            sw_out(11, DEAD_TID, 0, false),
            sw_in(30, 0, 7),
            sw_out(40, 7, 0, false),
        ]);
        assert_eq!(
            v,
            vec![
                (5, 0, PrevState::Unknown, 9),
                (11, 9, PrevState::Dead, 0),
                (30, 0, PrevState::Unknown, 7),
                (40, 7, PrevState::Blocked, 0),
            ]
        );
        // The switch-in after an exit names the dead thread -1 too.
        let v = join(&[sw_in(5, 0, 9), sw_in(8, DEAD_TID, 4)]);
        assert_eq!(v[1], (8, 9, PrevState::Unknown, 4));
        let v = join(&[
            sw_in(5, 0, 9),
            sw_out(8, DEAD_TID, 4, false),
            sw_in(9, DEAD_TID, 4),
        ]);
        assert_eq!(
            v,
            vec![(5, 0, PrevState::Unknown, 9), (8, 9, PrevState::Blocked, 4)]
        );
    }

    #[test]
    fn with_filtered_samples_a_switch_out_alone_is_a_sleep() {
        // What the kernel writes under SWITCH_SAMPLE_FILTER: no sample for
        // S, R or preemption; a sample for D.
        let v = join_with(
            SwitchSamples::Filtered,
            &[
                sw_out(11, 5, 7, false),
                sw_in(12, 5, 7),
                sw_out(20, 7, 5, true),
                sw_in(21, 7, 5),
                sample(30, 5, 2, 0),
                sw_out(31, 5, 0, false),
                sw_in(40, 0, 7),
            ],
        );
        assert_eq!(
            v,
            vec![
                (11, 5, PrevState::Sleeping, 7),
                (20, 7, PrevState::Preempted, 5),
                (31, 5, PrevState::DiskSleep, 0),
                (40, 0, PrevState::Unknown, 7),
            ]
        );
    }
}
