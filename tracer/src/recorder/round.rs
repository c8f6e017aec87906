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
//!
//! With the eBPF source (`recorder/bpf.rs`) the round's perf records bring
//! no dispatch or wake-up: the joiner is not fed, stack samples wait for
//! their eBPF event, and after the perf chunks every eBPF event recorded so
//! far is read, each CPU's into its own merge source. A waking without
//! stacks whose CPU's next event is a switch of the thread that ran when it
//! was raised goes into the merge with that switch as one record, at the
//! waking's time (`Merged::WokenDispatch`, the format's `WOKEN_DISPATCH`):
//! one record fewer to merge and write (docs/PERFORMANCE.md 5k).

use idleflow_format::{
    Dispatch, KernelStack, Lost, RunSummary, StackCopy, SwitchArg, SwitchStack, ThreadExit, Wakeup,
};
use rustc_hash::FxHashMap;

use idleflow_bpf::SchedEvent;

use super::bpf::BpfSide;
use super::pending::{Fronts, Pending};
use super::{
    BlockingCount, CpuRing, Discard, Emit, Merged, Put, Recorder, RecorderError, SampledStacks,
    Woken,
};
use crate::names::TaskEvent;
use crate::parse::{parse, Layout, PerfRecord, UserStackCopy};
use crate::ring::read_records;
use crate::sys;
use crate::workarea::LiveWorkArea;

/// A `round::RoundSink` over recorder `$rec`'s fields (borrowed one by
/// one, so that the output can be borrowed beside it), sending what it
/// reads to `$put`.
macro_rules! round_sink {
    ($rec:expr, $put:expr, $work_area:expr, $fold:expr) => {
        RoundSink {
            layout: &$rec.layout,
            work_area: $work_area,
            put: $put,
            summary: &mut $rec.summary,
            renamed: &mut $rec.renamed,
            blocking: &mut $rec.blocking,
            kernel_stacks: &mut $rec.kernel_stacks,
            own_pid: std::process::id(),
            bpf: $rec.bpf.as_mut().map(|b| &mut b.side),
            pending: &mut $rec.pending,
            fold: $fold,
            java: $rec.java.as_mut(),
        }
    };
}

/// What a round's records are read into: the recorder's state apart from
/// its rings, borrowed for one round.
pub(super) struct RoundSink<'a> {
    pub(super) layout: &'a Layout,
    pub(super) work_area: Option<&'a LiveWorkArea>,
    /// Where the records go: the merge when read, the output when the
    /// eBPF records are released.
    pub(super) put: &'a mut dyn Put,
    pub(super) summary: &'a mut RunSummary,
    pub(super) renamed: &'a mut Vec<u32>,
    pub(super) blocking: &'a mut Vec<BlockingCount>,
    pub(super) kernel_stacks: &'a mut FxHashMap<Box<[u64]>, u64>,
    /// idleflow's own process: its threads are never a cause, their stack
    /// copies are not kept.
    pub(super) own_pid: u32,
    /// With the eBPF source: the perf rings carry only stacks, task and
    /// mapping records, paired here with the eBPF events.
    pub(super) bpf: Option<&'a mut BpfSide>,
    /// With the eBPF source: each ring's records not yet taken.
    pub(super) pending: &'a mut Vec<Pending>,
    /// Fold a waking and the next switch of its CPU into one merge record
    /// where they make one ([`Merged::WokenDispatch`]): a recording to a
    /// file, no flight recorder, no work area (those look at each record
    /// as it is released, in time order).
    pub(super) fold: bool,
    /// Java frames walked at the switch-outs (`recorder/java.rs`).
    pub(super) java: Option<&'a mut super::java::JavaWalks>,
}

/// The longest a waking waits for its CPU's next switch to be folded into
/// it: the reader holds the dispatch back that long at most.
const FOLD_NS: u64 = 1_000_000;

impl Recorder {
    /// Reads the records of one drained round: perf's into the merge, the
    /// eBPF source's into their rings' pending records (read into the
    /// merge at once while a work area tags the dispatches as they are
    /// read).
    pub(super) fn read_round(&mut self, chunks: &[(usize, &[u8])]) -> Result<(), RecorderError> {
        if let Some(wa) = self.work_area.as_mut() {
            wa.refresh(sys::monotonic_ns());
        }
        let tagged = self.work_area.is_some();
        let mut sink = round_sink!(self, &mut self.merge, self.work_area.as_ref(), false);
        let mut scratch = Vec::new();
        let perf_rings = self.rings.len();
        // The perf rings' chunks come first in a round, the eBPF rings'
        // after them: a sample met before its event waits in the pairer.
        for &(slot, bytes) in chunks {
            if let Some(r) = self.rings.get_mut(slot) {
                read_records(bytes, 0, bytes.len() as u64, &mut scratch, |bytes| {
                    sink.record(slot, r, bytes)
                });
            } else {
                sink.bpf_chunk(slot - perf_rings, bytes, tagged);
            }
        }
        Ok(())
    }

    /// Releases the eBPF records pending and the merge's records `held`
    /// (in time order) up to `watermark`, in one time order, to the output
    /// (dropped while there is none).
    pub(super) fn release_streamed(
        &mut self,
        watermark: u64,
        held: Vec<(u64, usize, Merged)>,
    ) -> Result<(), RecorderError> {
        let fold = self.fold && self.output.as_ref().is_some_and(|o| o.flight.is_none());
        let mut emit = self.output.as_mut().map(|out| Emit {
            out,
            names: &mut self.names,
            work_area: None,
            stopped: self.stop_ns.is_some(),
            written: &mut self.written,
            result: Ok(()),
        });
        let mut discard = Discard;
        let put: &mut dyn Put = match emit.as_mut() {
            Some(e) => e,
            None => &mut discard,
        };
        let mut sink = round_sink!(self, put, None, fold);
        sink.release_pending(watermark, held);
        let result = emit.map_or(Ok(()), |e| e.result);
        self.after_release(watermark, result)
    }

    /// Forgets the samples before `watermark` that found no eBPF event
    /// (nothing without the eBPF source): both sides were read and
    /// released past it.
    pub(super) fn read_bpf(&mut self, watermark: u64) -> Result<(), RecorderError> {
        if let Some(b) = self.bpf.as_mut() {
            self.summary.unpaired_stacks = b.side.expire(watermark);
        }
        Ok(())
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
        if self.bpf.is_none() {
            joiner.feed(&rec, &mut |d| self.dispatch(slot, stack, d));
        }
        match rec {
            PerfRecord::SchedSwitch {
                id,
                prev_tid,
                next_tid,
                kernel_stack,
                user_stack,
                ..
            } if kernel_stack.is_some() || user_stack.is_some() => {
                let st = SampledStacks {
                    prev: prev_tid,
                    next: next_tid,
                    pid: id.pid,
                    kernel: kernel_stack,
                    user: user_stack,
                };
                match self.bpf.as_deref_mut() {
                    None => *stack = Some(st),
                    Some(side) => {
                        let source = side.source(slot);
                        if let Some((time, st)) = side.switch_sample(slot, id.time, st) {
                            self.switch_stacks(source, time, cpu, st);
                        }
                    }
                }
            }
            // Written in the leaving task's context: its process.
            PerfRecord::Switch {
                id,
                out: true,
                preempt: false,
                ..
            } if !self.blocking.is_empty() => BlockingCount::count(self.blocking, id.pid, id.tid),
            PerfRecord::Mmap(m) => self.put.put(self.summary, slot, m.time, Merged::Module(m)),
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
                // With the eBPF source no wake-up event is opened: its
                // programs write the wake-ups and their stacks.
                if self.bpf.is_none() {
                    self.wakeup(slot, last_wake, w, id.pid, kernel_stack, user_stack);
                }
            }
            PerfRecord::Comm { id, pid, tid, comm } => {
                // Bounded for a caller that never asks.
                if pid == tid && self.renamed.len() < 1 << 16 {
                    self.renamed.push(pid);
                }
                self.put.put(
                    self.summary,
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
            } => self.put.put(
                self.summary,
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
            PerfRecord::Exit { id, pid, tid } => {
                if let Some(java) = self.java.as_mut() {
                    java.exited(tid, id.time);
                }
                self.put.put(
                    self.summary,
                    slot,
                    id.time,
                    Merged::Exit(ThreadExit {
                        time: id.time,
                        tid,
                        pid,
                    }),
                )
            }
            PerfRecord::Lost { id, count } => {
                *lost += count;
                self.put.put(
                    self.summary,
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
        if let Some(java) = self.java.as_mut() {
            java.switched_in(d.next_tid, d.time);
        }
        self.put
            .put(self.summary, slot, d.time, Merged::Dispatch(d));
        if let Some(st) = stack.take_if(|st| st.prev == d.prev_tid && st.next == d.next_tid) {
            self.switch_stacks(slot, d.time, d.cpu, st);
        }
    }

    /// The stacks `st` of the switch at `time` on `cpu`, which follow its
    /// dispatch at its time.
    pub(super) fn switch_stacks(&mut self, slot: usize, time: u64, cpu: u32, st: SampledStacks) {
        let tid = st.prev;
        if let Some(ips) = st.kernel {
            let id =
                intern_kernel_stack(self.kernel_stacks, self.put, self.summary, slot, time, ips);
            self.put.put(
                self.summary,
                slot,
                time,
                Merged::SwitchStack(SwitchStack {
                    time,
                    cpu,
                    tid,
                    stack: id,
                }),
            );
        }
        // idleflow's own threads are never a cause: their copies are not
        // kept.
        if let Some(u) = st.user.filter(|_| st.pid != self.own_pid) {
            if let Some(java) = self.java.as_mut() {
                if let Some(w) = java.switch_out(st.pid, tid, time, &u) {
                    if let Some(new) = w.new_stack {
                        self.put
                            .put(self.summary, slot, time, Merged::WalkedStack(new));
                    }
                    let st = SwitchStack {
                        time,
                        cpu,
                        tid,
                        stack: w.stack,
                    };
                    self.put
                        .put(self.summary, slot, time, Merged::SwitchJavaStack(st));
                }
            }
            self.put.put(
                self.summary,
                slot,
                time,
                Merged::SwitchArg(SwitchArg {
                    time,
                    cpu,
                    tid,
                    arg: u.di,
                }),
            );
            self.put.put(
                self.summary,
                slot,
                time,
                Merged::StackCopy(Box::new(stack_copy(time, cpu, tid, st.pid, *u, false))),
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
        if let Some(java) = self.java.as_mut() {
            java.woken(w.wakee_tid, w.waker_tid, pid);
        }
        let key = (w.time, w.waker_tid, w.wakee_tid);
        if *last_wake != Some(key) {
            *last_wake = Some(key);
            self.put.put(self.summary, slot, w.time, Merged::Wakeup(w));
        }
        self.wake_stacks(slot, &w, pid, kernel_stack, user_stack);
    }

    /// The waker's stacks at wake-up `w`, raised by a thread of process
    /// `pid`, at the wake-up's time.
    pub(super) fn wake_stacks(
        &mut self,
        slot: usize,
        w: &Wakeup,
        pid: u32,
        kernel_stack: Option<Box<[u64]>>,
        user_stack: Option<Box<UserStackCopy>>,
    ) {
        if let Some(ips) = kernel_stack {
            let stack = intern_kernel_stack(
                self.kernel_stacks,
                self.put,
                self.summary,
                slot,
                w.time,
                ips,
            );
            self.put.put(
                self.summary,
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
            if let Some(java) = self.java.as_mut() {
                if let Some(walked) = java.wake(pid, w.waker_tid, &u) {
                    if let Some(new) = walked.new_stack {
                        self.put
                            .put(self.summary, slot, w.time, Merged::WalkedStack(new));
                    }
                    let st = SwitchStack {
                        time: w.time,
                        cpu: w.cpu,
                        tid: w.waker_tid,
                        stack: walked.stack,
                    };
                    self.put
                        .put(self.summary, slot, w.time, Merged::WakeJavaStack(st));
                }
            }
            self.put.put(
                self.summary,
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

    /// Ring `ring`'s eBPF records of a round (the eBPF recorder's ring
    /// order): kept undecoded until released, or taken into the merge at
    /// once when `now` (a work area tags dispatches as they are read).
    fn bpf_chunk(&mut self, ring: usize, bytes: &[u8], now: bool) {
        let Some(p) = self.pending.get_mut(ring) else {
            self.summary.undecodable += idleflow_bpf::records(bytes).count() as u64;
            return;
        };
        p.append(bytes);
        if now {
            let Some(side) = self.bpf.take() else {
                return;
            };
            let mut pending = std::mem::take(self.pending);
            while !pending[ring].is_empty() {
                self.step(side, &mut pending[ring], ring);
            }
            *self.pending = pending;
            self.bpf = Some(side);
        }
    }

    /// Releases every ring's pending records stamped before `watermark`
    /// and the merge's records `held` (in time order, with their sources)
    /// in one time order: `recorder/pending.rs`.
    pub(super) fn release_pending(&mut self, watermark: u64, held: Vec<(u64, usize, Merged)>) {
        let mut held = held.into_iter().peekable();
        let Some(side) = self.bpf.take() else {
            for (t, source, m) in held {
                self.put.put(self.summary, source, t, m);
            }
            return;
        };
        let mut pending = std::mem::take(self.pending);
        let source_of = |ring: usize| {
            side.cpu(ring)
                .and_then(|c| side.ring(c))
                .map_or(usize::MAX, |r| side.source(r))
        };
        let sources: Vec<usize> = (0..pending.len()).map(source_of).collect();
        let mut fronts = Fronts::new(pending.len());
        for (ring, p) in pending.iter().enumerate() {
            fronts.offer(p, ring, sources[ring], watermark);
        }
        loop {
            let held_first = match (held.peek(), fronts.peek()) {
                // Equal: a CPU's eBPF records before the merge's of their
                // source (stacks paired late follow their switch).
                (Some(&(t, source, _)), Some((rt, rs, _))) => (t, source) < (rt, rs),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if held_first {
                if let Some((t, source, m)) = held.next() {
                    self.put.put(self.summary, source, t, m);
                }
            } else if let Some(ring) = fronts.pop() {
                self.step(side, &mut pending[ring], ring);
                fronts.offer(&pending[ring], ring, sources[ring], watermark);
            }
        }
        *self.pending = pending;
        self.bpf = Some(side);
    }

    /// Takes ring `ring`'s next pending record (CPU order), with the switch
    /// after it when a waking folds into it.
    fn step(&mut self, side: &mut BpfSide, pending: &mut Pending, ring: usize) {
        let Some(record) = pending.front() else {
            return;
        };
        let Some(cpu) = side.cpu(ring) else {
            self.summary.undecodable += 1;
            pending.advance();
            return;
        };
        match (idleflow_bpf::decode(record), idleflow_bpf::stacks(record)) {
            (Ok(SchedEvent::Waking(wk)), Ok(None)) if self.fold && !side.paired => {
                pending.advance();
                let next = pending
                    .front()
                    .map(|r| (idleflow_bpf::decode(r), idleflow_bpf::stacks(r)));
                match next {
                    Some((Ok(SchedEvent::Switch(sw)), Ok(None))) if folds(side, &wk, &sw) => {
                        self.woken_switch(side, cpu, wk, sw);
                        pending.advance();
                    }
                    _ => self.bpf_event(side, cpu, SchedEvent::Waking(wk), None),
                }
            }
            (Ok(ev), Ok(st)) => {
                self.bpf_event(side, cpu, ev, st);
                pending.advance();
            }
            _ => {
                self.summary.undecodable += 1;
                pending.advance();
            }
        }
    }

    /// Counts switch `sw` if it is a blocking switch-out of a watched
    /// process ([`Recorder::count_blocking_switch_outs`]).
    fn count_blocking(&mut self, sw: &idleflow_bpf::Switch) {
        if !sw.preempt && sw.prev_tid != 0 && !self.blocking.is_empty() {
            BlockingCount::count(self.blocking, sw.prev_tgid, sw.prev_tid);
        }
    }

    /// Waking `wk` and switch `sw`, the next event of CPU `cpu`, which
    /// [`folds`]: one record at the waking's time.
    fn woken_switch(
        &mut self,
        side: &mut BpfSide,
        cpu: u32,
        wk: idleflow_bpf::Wake,
        sw: idleflow_bpf::Switch,
    ) {
        let Some(ring) = side.ring(cpu) else {
            return;
        };
        let slot = side.source(ring);
        let w = wk.to_wakeup(cpu, false);
        let d = sw.to_dispatch(cpu);
        self.count_blocking(&sw);
        let woken = Woken {
            wake: w,
            time: d.time,
            next_tid: d.next_tid,
            prev_state: d.prev_state,
        };
        self.put
            .put(self.summary, slot, w.time, Merged::WokenDispatch(woken));
        java_state(self.put, self.summary, slot, &sw, &d);
    }

    /// One eBPF event of CPU `cpu`, into the merge with its stacks: those
    /// its record carries (`st`), or those of its perf sample if that came
    /// already (`--stacks waits`).
    fn bpf_event(
        &mut self,
        side: &mut BpfSide,
        cpu: u32,
        ev: SchedEvent,
        st: Option<idleflow_bpf::RecordStacks<'_>>,
    ) {
        if ev.time() < side.start_ns {
            return;
        }
        let Some(ring) = side.ring(cpu) else {
            return;
        };
        let slot = side.source(ring);
        match ev {
            SchedEvent::Switch(sw) => {
                self.count_blocking(&sw);
                let mut d = sw.to_dispatch(cpu);
                if let Some(wa) = self.work_area {
                    wa.tag(&mut d, self.summary);
                }
                if let Some(java) = self.java.as_mut() {
                    java.switched_in(d.next_tid, d.time);
                }
                self.put
                    .put(self.summary, slot, d.time, Merged::Dispatch(d));
                java_state(self.put, self.summary, slot, &sw, &d);
                if let Some(st) = st {
                    let (kernel, user) = side.stacks(&st);
                    let st = SampledStacks {
                        prev: sw.prev_tid,
                        next: sw.next_tid,
                        pid: sw.prev_tgid,
                        kernel,
                        user,
                    };
                    self.switch_stacks(slot, d.time, cpu, st);
                } else if let Some(st) = side.switch_event(ring, d.time, (d.prev_tid, d.next_tid)) {
                    self.switch_stacks(slot, d.time, cpu, st);
                }
            }
            SchedEvent::Waking(wk) | SchedEvent::WakeupNew(wk) => {
                let new = matches!(ev, SchedEvent::WakeupNew(_));
                let w = wk.to_wakeup(cpu, new);
                if let Some(java) = self.java.as_mut() {
                    java.woken(w.wakee_tid, w.waker_tid, wk.waker_tgid);
                }
                self.put.put(self.summary, slot, w.time, Merged::Wakeup(w));
                if let Some(st) = st.filter(|_| !new) {
                    let (kernel, user) = side.stacks(&st);
                    self.wake_stacks(slot, &w, wk.waker_tgid, kernel, user);
                }
            }
        }
    }
}

/// What Java thread `sw.prev_tid` was blocked in when it left `d`'s CPU
/// idle, after `d` (the programs read it at switches to idle of the Java
/// threads they know).
fn java_state(
    put: &mut dyn Put,
    summary: &mut RunSummary,
    slot: usize,
    sw: &idleflow_bpf::Switch,
    d: &Dispatch,
) {
    if let Some(state) = sw.java {
        let j = idleflow_format::SwitchJavaState {
            time: d.time,
            cpu: d.cpu,
            tid: d.prev_tid,
            state,
        };
        put.put(summary, slot, d.time, Merged::SwitchJavaState(j));
    }
}

/// Whether waking `wk` and switch `sw`, the next event of its CPU, make
/// one record: the switch's leaving thread ran when the waking was
/// raised, within [`FOLD_NS`], both in the window (no stacks of their own;
/// perf samples no switch's stacks: the caller checks).
fn folds(side: &BpfSide, wk: &idleflow_bpf::Wake, sw: &idleflow_bpf::Switch) -> bool {
    wk.waker_tid == sw.prev_tid
        && wk.time >= side.start_ns
        && sw.time >= wk.time
        && sw.time - wk.time <= FOLD_NS
}

/// The id of kernel stack `ips`, interned: a new stack's `KERNEL_STACK`
/// goes out first, at `time`.
fn intern_kernel_stack(
    stacks: &mut FxHashMap<Box<[u64]>, u64>,
    put: &mut dyn Put,
    summary: &mut RunSummary,
    slot: usize,
    time: u64,
    ips: Box<[u64]>,
) -> u64 {
    let next_id = stacks.len() as u64 + 1;
    *stacks.entry(ips).or_insert_with_key(|ips| {
        put.put(
            summary,
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
