//! Reading one drained round on the recorder's thread: every CPU's chunk
//! of perf records, parsed, joined into dispatches, and pushed into the
//! merge with the stacks, wake-ups, mappings, task events and losses they
//! carry.
//!
//! Invariant: this only reads the round's staging memory, which the drain
//! thread filled and gets back once [`Recorder::poll`] or
//! [`Recorder::stop`] are done with the round; it never touches the rings.
//! Every record goes into the merge under its ring's slot at its own time;
//! a dispatch's stacks follow the dispatch at its time, and a new kernel
//! stack's `KERNEL_STACK` goes in before the first record that names it.

use idleflow_format::{
    Dispatch, KernelStack, Lost, RunSummary, StackCopy, SwitchArg, SwitchStack, ThreadExit, Wakeup,
};
use rustc_hash::FxHashMap;

use super::{CpuRing, Merged, Recorder, SampledStacks};
use crate::drain::Round;
use crate::merge::Merge;
use crate::names::TaskEvent;
use crate::parse::{parse, Layout, PerfRecord, UserStackCopy};
use crate::ring::read_records;
use crate::sys;
use crate::workarea::LiveWorkArea;

/// What a round's records are read into: the recorder's state apart from
/// its rings, borrowed for one round.
struct RoundSink<'a> {
    layout: &'a Layout,
    work_area: Option<&'a LiveWorkArea>,
    merge: &'a mut Merge<Merged>,
    summary: &'a mut RunSummary,
    renamed: &'a mut Vec<u32>,
    blocking: &'a mut Vec<(u32, u64)>,
    kernel_stacks: &'a mut FxHashMap<Box<[u64]>, u64>,
    /// idleflow's own process: its threads are never a cause, their stack
    /// copies are not kept.
    own_pid: u32,
}

impl Recorder {
    /// Reads the records of one drained round.
    pub(super) fn read_round(&mut self, round: &Round) {
        if let Some(wa) = self.work_area.as_mut() {
            wa.refresh(sys::monotonic_ns());
        }
        let mut sink = RoundSink {
            layout: &self.layout,
            work_area: self.work_area.as_ref(),
            merge: &mut self.merge,
            summary: &mut self.summary,
            renamed: &mut self.renamed,
            blocking: &mut self.blocking,
            kernel_stacks: &mut self.kernel_stacks,
            own_pid: std::process::id(),
        };
        let mut scratch = Vec::new();
        for (slot, bytes) in round.chunks() {
            let Some(r) = self.rings.get_mut(slot) else {
                continue;
            };
            read_records(bytes, 0, bytes.len() as u64, &mut scratch, |bytes| {
                sink.record(slot, r, bytes)
            });
        }
    }
}

impl RoundSink<'_> {
    /// Reads one perf record of ring `slot`.
    #[inline]
    fn record(&mut self, slot: usize, ring: &mut CpuRing, bytes: &[u8]) {
        let Some(rec) = parse(bytes, self.layout) else {
            self.summary.undecodable += 1;
            return;
        };
        let CpuRing {
            cpu,
            joiner,
            lost,
            stack,
            last_wake,
        } = ring;
        let cpu = *cpu;
        joiner.feed(&rec, &mut |d| self.dispatch(slot, stack, d));
        match rec {
            PerfRecord::SchedSwitch {
                id,
                prev_tid,
                next_tid,
                kernel_stack,
                user_stack,
                ..
            } if kernel_stack.is_some() || user_stack.is_some() => {
                *stack = Some(SampledStacks {
                    prev: prev_tid,
                    next: next_tid,
                    pid: id.pid,
                    kernel: kernel_stack,
                    user: user_stack,
                })
            }
            // Written in the leaving task's context: its process.
            PerfRecord::Switch {
                id,
                out: true,
                preempt: false,
                ..
            } if !self.blocking.is_empty() => {
                if let Some(c) = self.blocking.iter_mut().find(|c| c.0 == id.pid) {
                    c.1 += 1;
                }
            }
            PerfRecord::Mmap(m) => self.merge.push(slot, m.time, Merged::Module(m)),
            PerfRecord::Wakeup {
                id,
                wakee_tid,
                target_cpu,
                new_thread,
                context,
                kernel_stack,
                user_stack,
            } => {
                let w = Wakeup {
                    time: id.time,
                    cpu,
                    waker_tid: id.tid,
                    wakee_tid,
                    target_cpu,
                    new_thread,
                    context,
                };
                self.wakeup(slot, last_wake, w, id.pid, kernel_stack, user_stack);
            }
            PerfRecord::Comm { id, pid, tid, comm } => {
                // Bounded for a caller that never asks.
                if pid == tid && self.renamed.len() < 1 << 16 {
                    self.renamed.push(pid);
                }
                self.merge.push(
                    slot,
                    id.time,
                    Merged::Task(Box::new(TaskEvent::Comm {
                        time: id.time,
                        pid,
                        tid,
                        comm,
                    })),
                )
            }
            PerfRecord::Fork {
                id,
                pid,
                ppid,
                tid,
                ptid,
            } => self.merge.push(
                slot,
                id.time,
                Merged::Task(Box::new(TaskEvent::Fork {
                    time: id.time,
                    pid,
                    ppid,
                    tid,
                    ptid,
                })),
            ),
            PerfRecord::Exit { id, pid, tid } => self.merge.push(
                slot,
                id.time,
                Merged::Exit(ThreadExit {
                    time: id.time,
                    tid,
                    pid,
                }),
            ),
            PerfRecord::Lost { id, count } => {
                *lost += count;
                self.merge.push(
                    slot,
                    id.time,
                    Merged::Lost(Lost {
                        time: id.time,
                        cpu,
                        count,
                    }),
                );
            }
            _ => {}
        }
    }

    /// A dispatch the joiner emitted, tagged from the work area, and the
    /// stacks its `sched_switch` sample carried (`stack`, if it is this
    /// switch's).
    #[inline]
    fn dispatch(&mut self, slot: usize, stack: &mut Option<SampledStacks>, mut d: Dispatch) {
        if let Some(wa) = self.work_area {
            wa.tag(&mut d, self.summary);
        }
        self.merge.push(slot, d.time, Merged::Dispatch(d));
        let Some(st) = stack.take_if(|st| st.prev == d.prev_tid && st.next == d.next_tid) else {
            return;
        };
        if let Some(ips) = st.kernel {
            let id = intern_kernel_stack(self.kernel_stacks, self.merge, slot, d.time, ips);
            self.merge.push(
                slot,
                d.time,
                Merged::SwitchStack(SwitchStack {
                    time: d.time,
                    cpu: d.cpu,
                    tid: d.prev_tid,
                    stack: id,
                }),
            );
        }
        // idleflow's own threads are never a cause: their copies are not
        // kept.
        if let Some(u) = st.user.filter(|_| st.pid != self.own_pid) {
            self.merge.push(
                slot,
                d.time,
                Merged::SwitchArg(SwitchArg {
                    time: d.time,
                    cpu: d.cpu,
                    tid: d.prev_tid,
                    arg: u.di,
                }),
            );
            self.merge.push(
                slot,
                d.time,
                Merged::StackCopy(Box::new(stack_copy(
                    d.time, d.cpu, d.prev_tid, st.pid, *u, false,
                ))),
            );
        }
    }

    /// Wake-up `w` raised by a thread of process `pid`, with the stacks its
    /// sample carried. The waker-stack event's sample of a wake-up and the
    /// plain event's sample of the same one come one after the other
    /// (`last_wake`): the wake-up is written once.
    #[inline]
    fn wakeup(
        &mut self,
        slot: usize,
        last_wake: &mut Option<(u64, u32, u32)>,
        w: Wakeup,
        pid: u32,
        kernel_stack: Option<Box<[u64]>>,
        user_stack: Option<Box<UserStackCopy>>,
    ) {
        let key = (w.time, w.waker_tid, w.wakee_tid);
        if *last_wake != Some(key) {
            *last_wake = Some(key);
            self.merge.push(slot, w.time, Merged::Wakeup(w));
        }
        if let Some(ips) = kernel_stack {
            let stack = intern_kernel_stack(self.kernel_stacks, self.merge, slot, w.time, ips);
            self.merge.push(
                slot,
                w.time,
                Merged::WakeStack(SwitchStack {
                    time: w.time,
                    cpu: w.cpu,
                    tid: w.waker_tid,
                    stack,
                }),
            );
        }
        // idleflow's own threads are never a cause.
        if let Some(u) = user_stack.filter(|_| pid != self.own_pid) {
            self.merge.push(
                slot,
                w.time,
                Merged::StackCopy(Box::new(stack_copy(
                    w.time,
                    w.cpu,
                    w.waker_tid,
                    pid,
                    *u,
                    true,
                ))),
            );
        }
    }
}

/// The id of kernel stack `ips`, interned: a new stack's `KERNEL_STACK`
/// goes into the merge first, at `time`.
fn intern_kernel_stack(
    stacks: &mut FxHashMap<Box<[u64]>, u64>,
    merge: &mut Merge<Merged>,
    slot: usize,
    time: u64,
    ips: Box<[u64]>,
) -> u64 {
    let next_id = stacks.len() as u64 + 1;
    *stacks.entry(ips).or_insert_with_key(|ips| {
        merge.push(
            slot,
            time,
            Merged::KernelStack(Box::new(KernelStack {
                id: next_id,
                ips: ips.to_vec(),
            })),
        );
        next_id
    })
}

/// A user stack copy of thread `tid` as the recording stores it: at its
/// switch-out, or at a wake-up it raised (`at_wakeup`).
fn stack_copy(
    time: u64,
    cpu: u32,
    tid: u32,
    pid: u32,
    u: UserStackCopy,
    at_wakeup: bool,
) -> StackCopy {
    let UserStackCopy {
        ip,
        sp,
        bp,
        requested,
        bytes,
        ..
    } = u;
    StackCopy {
        time,
        cpu,
        tid,
        pid,
        ip,
        sp,
        bp,
        requested,
        bytes,
        at_wakeup,
    }
}
