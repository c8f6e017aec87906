//! Java waits joined to dispatches: which Java stack, and which JVM reason
//! (monitor enter on a class held by a thread, park, socket read, …), each
//! idle-causing switch-out of a Java thread happened in.
//!
//! The JVM's flight recorder reports each wait of a thread with its start,
//! duration, stack and reason ([`idleflow_format::waits`]). A switch-out of
//! that thread whose time lies inside such a wait happened because of it:
//! the join is exact by construction, and the share of blocking switch-outs
//! that found their wait (and of waits that contain a switch-out) checks the
//! clock mapping against the data. A switch-out outside every wait is
//! counted apart (running, native or JVM-internal waits, or waits shorter
//! than the recorder's threshold), never guessed.
//!
//! Invariant: memory holds the waits (≈ 50 bytes each), the interned
//! stacks and texts, and one entry per distinct (stack, reason, object)
//! path, never anything per dispatch.

pub mod index;

use idleflow_format::{Dispatch, JavaWait, PrevState, WaitReason};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::pass::handler::{Context, Credit, DispatchEvent, Handler};
use crate::pass::java_waits::index::path_kind;
pub use crate::pass::java_waits::index::{JavaWaits, StackGroup};
use crate::path::{self, Fold, Folded};

/// What one idle-causing path (a stack, a reason and its object, in one
/// JVM) caused.
#[derive(Debug, Clone, Default)]
pub struct PathIdle {
    /// Dispatches to idle that followed a thread leaving in this wait.
    pub dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// The other threads named (previous owner, notifier): symbol → dispatches.
    pub others: FxHashMap<u64, u64>,
    /// Per waiting thread (tid): dispatches and idle time, ns.
    pub by_thread: FxHashMap<u32, (u64, u64)>,
}

/// The key of a [`PathIdle`]: (pid, stack group, reason, object symbol).
pub type PathKey = (u32, u64, WaitReason, u64);

/// What the dispatch stream adds to the JVMs' waits: the pass's handler
/// that joins each blocking switch-out and each idle-causing dispatch of a
/// Java thread to the wait it lies in ([`JavaWaits`]).
#[derive(Debug, Default)]
pub struct JavaIdle {
    /// Idle-causing paths.
    pub paths: FxHashMap<PathKey, PathIdle>,
    /// Idle-causing dispatches of Java threads, and their idle time, ns.
    pub java_idle: (u64, u64),
    /// Of those, inside no wait: dispatches and idle time, ns.
    pub unjoined_idle: (u64, u64),
    /// Idle-causing dispatches of Java threads while their JVM's flight
    /// recording did not run (before it was started, after it stopped),
    /// and their idle time, ns: not counted in `java_idle`.
    pub unrecorded_idle: (u64, u64),
    /// `unrecorded_idle`'s idle by thread, ns.
    pub unrecorded_by_thread: FxHashMap<u32, u64>,
    /// Blocking switch-outs of Java threads in the window.
    pub blocking_switch_outs: u64,
    /// Of those, inside a wait of the same thread.
    pub inside_wait: u64,
    /// The waits a switch-out of their thread was seen inside: (tid,
    /// index in its waits).
    switched: FxHashSet<(u32, usize)>,
}

impl JavaIdle {
    /// Counts a dispatch (`pid`: the leaving thread's process, where
    /// known): a blocking switch-out of a Java thread is checked against its
    /// waits.
    pub fn dispatch(&mut self, w: &JavaWaits, d: &Dispatch, pid: Option<u32>) {
        if !matches!(
            d.prev_state,
            PrevState::Sleeping | PrevState::DiskSleep | PrevState::Blocked
        ) || w.recorded_at(d.prev_tid, pid, d.time) != Some(true)
        {
            return;
        }
        self.blocking_switch_outs += 1;
        if let Some(i) = w.find(d.prev_tid, d.time) {
            self.inside_wait += 1;
            self.switched.insert((d.prev_tid, i));
        }
    }

    /// Counts a dispatch to idle caused by `tid` (of process `pid`) leaving
    /// at `time`, followed by `idle_ns` of idle time.
    pub fn idle_cause(
        &mut self,
        w: &JavaWaits,
        tid: u32,
        pid: Option<u32>,
        time: u64,
        idle_ns: u64,
    ) {
        self.credit_idle(w, tid, pid, time, idle_ns, 1);
    }

    /// Credits `idle_ns` to the dispatch to idle `tid` (of process `pid`)
    /// left with at `time`, counting `dispatches` (1 the first time, 0 for
    /// idle that continued it after one of idleflow's own threads ran).
    pub fn credit_idle(
        &mut self,
        waits: &JavaWaits,
        tid: u32,
        pid: Option<u32>,
        time: u64,
        idle_ns: u64,
        dispatches: u64,
    ) {
        let wait = waits.wait_at(tid, time).copied();
        self.credit_wait(waits, (tid, pid, time), wait, idle_ns, dispatches);
    }

    /// Credits as [`Self::credit_idle`] does, to the wait the pass found
    /// for the dispatch (`wait`: its own, or the one that goes with its
    /// carried stacks).
    pub fn credit_wait(
        &mut self,
        waits: &JavaWaits,
        (tid, pid, time): (u32, Option<u32>, u64),
        wait: Option<JavaWait>,
        idle_ns: u64,
        dispatches: u64,
    ) {
        match waits.recorded_at(tid, pid, time) {
            None => return,
            Some(false) => {
                self.unrecorded_idle.0 += dispatches;
                self.unrecorded_idle.1 = self.unrecorded_idle.1.saturating_add(idle_ns);
                let t = self.unrecorded_by_thread.entry(tid).or_default();
                *t = t.saturating_add(idle_ns);
                return;
            }
            Some(true) => {}
        }
        // Saturating: idle times come from the file, which may be damaged.
        self.java_idle.0 += dispatches;
        self.java_idle.1 = self.java_idle.1.saturating_add(idle_ns);
        let Some(w) = wait else {
            self.unjoined_idle.0 += dispatches;
            self.unjoined_idle.1 = self.unjoined_idle.1.saturating_add(idle_ns);
            return;
        };
        let group = waits.wait_group(&w);
        let p = self
            .paths
            .entry((w.pid, group, w.reason, w.object))
            .or_default();
        p.dispatches += dispatches;
        p.idle_ns = p.idle_ns.saturating_add(idle_ns);
        if w.other != 0 && dispatches > 0 {
            *p.others.entry(w.other).or_default() += dispatches;
        }
        let t = p.by_thread.entry(tid).or_default();
        t.0 += dispatches;
        t.1 = t.1.saturating_add(idle_ns);
    }

    /// Waits that lie in `[from, to)`, and of those, how many contain a
    /// switch-out of their thread, by reason.
    pub fn waits_switched(
        &self,
        waits: &JavaWaits,
        from: u64,
        to: u64,
    ) -> FxHashMap<WaitReason, (u64, u64)> {
        let mut m: FxHashMap<WaitReason, (u64, u64)> = FxHashMap::default();
        for (&tid, v) in &waits.per_thread {
            for (i, w) in v.iter().enumerate() {
                if w.start >= from && w.end() < to {
                    let e = m.entry(w.reason).or_default();
                    e.0 += 1;
                    e.1 += u64::from(self.switched.contains(&(tid, i)));
                }
            }
        }
        m
    }
}

/// The flame graph's frame for a JVM reason: `[monitor enter] Waits$Ledger`,
/// `[sleep]`.
pub fn reason_frame(w: &JavaWaits, pid: u32, reason: WaitReason, object: u64) -> String {
    let obj = w.symbol(pid, object);
    if obj.is_empty() {
        format!("[{}]", reason.words())
    } else {
        format!("[{}] {obj}", reason.words())
    }
}

/// Folded stacks of the idle-causing Java paths, for flame graphs: `java
/// PID;THREAD;frames, root first;[reason] object WEIGHT`, or with
/// `by_reason` the `[reason] object` frame first; each frame annotated by
/// its [`path::FrameKind`] (JIT, inlined).
#[derive(Debug, Clone, Copy)]
pub struct JavaWaitStacks<'a> {
    /// The waits.
    pub waits: &'a JavaWaits,
    /// What the pass joined to them.
    pub idle: &'a JavaIdle,
    /// The `[reason] object` frame first.
    pub by_reason: bool,
}

impl Fold for JavaWaitStacks<'_> {
    fn fold(&self, fold: path::FoldOptions, out: &mut Folded) {
        let (w, idle, by_reason) = (self.waits, self.idle, self.by_reason);
        for (&(pid, group, reason, object), p) in &idle.paths {
            let mut frames: Vec<(path::FrameKind, String)> = w
                .group(group)
                .map(|g| {
                    g.frames
                        .iter()
                        .zip(&g.kinds)
                        .rev()
                        .map(|(&(m, _), &bits)| (path_kind(bits), w.symbol(pid, m).to_string()))
                        .collect()
                })
                .unwrap_or_default();
            if frames.is_empty() {
                frames.push((path::FrameKind::Unknown, "[no stack]".into()));
            }
            let why = (
                path::FrameKind::Reason,
                reason_frame(w, pid, reason, object),
            );
            for (&tid, &(n, ns)) in &p.by_thread {
                let name = w
                    .named
                    .get(&tid)
                    .map_or_else(|| tid.to_string(), Clone::clone);
                let thread = if fold.merge_threads {
                    crate::path::thread_pattern(&name)
                } else {
                    name
                };
                let head = [
                    (path::FrameKind::Process, format!("java {pid}")),
                    (path::FrameKind::Thread, thread),
                ];
                let weight = if fold.dispatches { n } else { ns };
                if by_reason {
                    out.add(
                        std::iter::once(why.clone())
                            .chain(head)
                            .chain(frames.iter().cloned()),
                        weight,
                    );
                } else {
                    out.add(
                        head.into_iter()
                            .chain(frames.iter().cloned())
                            .chain(std::iter::once(why.clone())),
                        weight,
                    );
                }
            }
        }
    }
}

impl Handler for JavaIdle {
    fn dispatch(&mut self, e: &DispatchEvent<'_>, ctx: &Context<'_>) {
        if !ctx.java.is_empty() {
            let d = e.dispatch;
            JavaIdle::dispatch(self, ctx.java, d, ctx.pid_of(d.prev_tid));
        }
    }

    fn idle(&mut self, c: &Credit, ctx: &Context<'_>) {
        if !ctx.java.is_empty() {
            let tid = c.charge.tid;
            let (time, pid) = (c.charge.time, ctx.pid_of(tid));
            let at = (tid, pid, time);
            self.credit_wait(ctx.java, at, c.charge.wait, c.idle_ns, c.dispatches);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{FrameKind, JavaStack, JavaWait, NodeTag, IDLE_TID};

    fn wait(tid: u32, start: u64, duration: u64) -> JavaWait {
        JavaWait {
            pid: 7,
            tid,
            start,
            duration,
            reason: WaitReason::MonitorEnter,
            stack: 1,
            object: 2,
            other_tid: 0,
            other: 3,
        }
    }

    fn switch_out(tid: u32, time: u64) -> Dispatch {
        Dispatch {
            time,
            cpu: 0,
            prev_tid: tid,
            prev_state: PrevState::Sleeping,
            next_tid: IDLE_TID,
            prev_node: NodeTag::Untraced,
        }
    }

    fn waits() -> JavaWaits {
        let mut w = JavaWaits::default();
        w.per_thread
            .insert(10, vec![wait(10, 100, 50), wait(10, 300, 10)]);
        w.per_thread.insert(11, vec![wait(11, 1_000, 500)]);
        w.java_tids.extend([(10, 7), (11, 7), (12, 7)]);
        // Stacks 1 and 4 differ only in lines and kinds: one group.
        for (id, line, kind) in [(1, 10, FrameKind::Interpreted), (4, 11, FrameKind::Jit)] {
            w.stacks.insert(
                (7, id),
                JavaStack {
                    pid: 7,
                    id,
                    truncated: false,
                    frames: vec![idleflow_format::JavaFrame {
                        method: 5,
                        line,
                        kind,
                    }],
                },
            );
        }
        w.group_stacks();
        w
    }

    #[test]
    fn a_switch_out_inside_a_wait_of_its_own_thread_is_joined() {
        let w = waits();
        let mut j = JavaIdle::default();
        j.dispatch(&w, &switch_out(10, 120), None);
        j.idle_cause(&w, 10, None, 120, 5_000);
        assert_eq!((j.blocking_switch_outs, j.inside_wait), (1, 1));
        let g = w.group_of[&(7, 1)];
        assert_eq!(g, w.group_of[&(7, 4)], "same methods: one path");
        let p = &j.paths[&(7, g, WaitReason::MonitorEnter, 2)];
        assert_eq!((p.dispatches, p.idle_ns, p.others[&3]), (1, 5_000, 1));
        let kinds = w.group(g).unwrap().kinds[0];
        assert_eq!(
            kinds,
            1 << FrameKind::Interpreted.code() | 1 << FrameKind::Jit.code()
        );
        assert_eq!(j.unjoined_idle, (0, 0));
        assert_eq!(
            j.waits_switched(&w, 0, u64::MAX)[&WaitReason::MonitorEnter],
            (3, 1)
        );
    }

    #[test]
    fn a_switch_out_outside_every_wait_or_of_another_thread_is_not_joined() {
        let w = waits();
        let mut j = JavaIdle::default();
        // Between thread 10's waits; inside thread 11's wait but by 10;
        // by 12, which has no waits.
        for (tid, t) in [(10, 200), (10, 1_200), (12, 1_200)] {
            j.dispatch(&w, &switch_out(tid, t), None);
            j.idle_cause(&w, tid, None, t, 1_000);
        }
        assert_eq!((j.blocking_switch_outs, j.inside_wait), (3, 0));
        assert!(j.paths.is_empty());
        assert_eq!(j.java_idle, (3, 3_000));
        assert_eq!(j.unjoined_idle, (3, 3_000));
        assert_eq!(
            j.waits_switched(&w, 0, u64::MAX)[&WaitReason::MonitorEnter],
            (3, 0)
        );
    }

    #[test]
    fn preemptions_and_other_processes_threads_are_not_counted() {
        let w = waits();
        let mut j = JavaIdle::default();
        let mut d = switch_out(10, 120);
        d.prev_state = PrevState::Preempted;
        j.dispatch(&w, &d, None);
        j.dispatch(&w, &switch_out(99, 120), Some(99));
        j.idle_cause(&w, 99, Some(99), 120, 1_000);
        assert_eq!((j.blocking_switch_outs, j.java_idle.0), (0, 0));
    }

    #[test]
    fn outside_its_recording_a_jvms_idle_is_counted_apart() {
        let mut w = waits();
        let mut j = JavaIdle::default();
        w.jvm_pids.insert(7);
        w.recorded.insert(7, (1_000, 2_000));
        // A named Java thread before the recording, and an unnamed thread
        // of the JVM before it: unrecorded. The unnamed one while it ran
        // (JVM-internal): not a Java thread's idle.
        j.idle_cause(&w, 10, Some(7), 500, 100);
        j.idle_cause(&w, 50, Some(7), 600, 200);
        j.idle_cause(&w, 50, Some(7), 1_500, 400);
        assert_eq!(j.unrecorded_idle, (2, 300));
        assert_eq!(j.java_idle, (0, 0));
        // A named thread inside the recording, in a wait: joined.
        w.per_thread.insert(10, vec![wait(10, 1_100, 100)]);
        j.idle_cause(&w, 10, Some(7), 1_150, 800);
        assert_eq!((j.java_idle, j.unjoined_idle), ((1, 800), (0, 0)));
    }
}
