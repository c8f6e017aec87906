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

use idleflow_format::{
    Dispatch, FormatError, FrameKind, JavaStack, JavaWait, JvmWaits, PrevState, Reader, Record,
    WaitReason,
};
use rustc_hash::FxHashMap;
use std::io::{Read, Seek};

use crate::path::{self, Folded};

/// One wait, and whether a switch-out of its thread was seen inside it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    wait: JavaWait,
    switched: bool,
}

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

/// Stacks of one JVM with the same methods in the same order, whatever
/// their lines and frame kinds (a method runs interpreted, then compiled:
/// one path to its user).
#[derive(Debug, Clone)]
pub struct StackGroup {
    /// Methods (symbol ids), top first, with the line first seen.
    pub frames: Vec<(u64, u32)>,
    /// Per frame, the [`FrameKind`] codes seen, as bits.
    pub kinds: Vec<u8>,
    /// Some stack of the group was cut by the JVM.
    pub truncated: bool,
}

/// Every JVM's waits, indexed per thread, and what the dispatch stream
/// adds to them.
#[derive(Debug, Default)]
pub struct JavaWaits {
    /// What was read of each JVM.
    pub jvms: Vec<JvmWaits>,
    symbols: FxHashMap<(u32, u64), String>,
    stacks: FxHashMap<(u32, u64), JavaStack>,
    /// Stack → its group's id (index in `groups` + 1).
    group_of: FxHashMap<(u32, u64), u64>,
    groups: Vec<StackGroup>,
    /// Per thread, its waits by start time.
    per_thread: FxHashMap<u32, Vec<Slot>>,
    /// Threads of the JVMs (all their threads, waits or not), with their JVM.
    java_tids: FxHashMap<u32, u32>,
    /// Per JVM, when its flight recording ran: its waits are known then only.
    recorded: FxHashMap<u32, (u64, u64)>,
    /// The JVMs whose waits were read.
    jvm_pids: rustc_hash::FxHashSet<u32>,
    /// Threads the JVMs named, with their Java names.
    named: FxHashMap<u32, String>,
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
}

impl JavaWaits {
    /// Reads every JVM's waits of the recording behind `reader`, which is
    /// left where it was.
    /// Reads only from where the trailer says the waits begin (nothing
    /// when it says there are none): the report's one pass over the
    /// dispatches stays its only pass over them.
    pub fn load<R: Read + Seek>(reader: &mut Reader<R>) -> Result<Self, FormatError> {
        let at = reader.position();
        let mut w = JavaWaits::default();
        match reader.waits_at()? {
            idleflow_format::WaitsAt::Nowhere => {
                reader.seek(at)?;
                return Ok(w);
            }
            idleflow_format::WaitsAt::From(from) => reader.seek(from)?,
            idleflow_format::WaitsAt::Unknown => reader.seek(at)?,
        }
        reader.only_java_waits(true);
        let result = (|| -> Result<(), FormatError> {
            while let Some(rec) = reader.next_complete_record()? {
                match rec {
                    Record::JavaSymbol(s) => {
                        w.symbols.insert((s.pid, s.id), s.text);
                    }
                    Record::JavaStack(s) => {
                        w.stacks.insert((s.pid, s.id), *s);
                    }
                    Record::JavaWait(wait) => {
                        w.java_tids.insert(wait.tid, wait.pid);
                        w.per_thread.entry(wait.tid).or_default().push(Slot {
                            wait,
                            switched: false,
                        });
                    }
                    Record::JvmWaits(h) => {
                        w.java_tids.extend(h.threads.iter().map(|t| (t.0, h.pid)));
                        w.jvm_pids.insert(h.pid);
                        if h.recorded_to_ns > h.recorded_from_ns {
                            w.recorded
                                .insert(h.pid, (h.recorded_from_ns, h.recorded_to_ns));
                        }
                        w.named.extend(h.threads.iter().cloned());
                        w.jvms.push(*h);
                    }
                    _ => {}
                }
            }
            Ok(())
        })();
        reader.only_java_waits(false);
        reader.seek(at)?;
        result?;
        for v in w.per_thread.values_mut() {
            v.sort_by_key(|s| (s.wait.start, s.wait.duration));
        }
        w.group_stacks();
        Ok(w)
    }

    /// Puts the stacks with the same methods into one group.
    fn group_stacks(&mut self) {
        let mut ids: Vec<(u32, u64)> = self.stacks.keys().copied().collect();
        ids.sort_unstable();
        let mut by_methods: FxHashMap<(u32, Vec<u64>), u64> = FxHashMap::default();
        for key in ids {
            let st = &self.stacks[&key];
            let methods: Vec<u64> = st.frames.iter().map(|f| f.method).collect();
            let next = self.groups.len() as u64 + 1;
            let g = *by_methods.entry((key.0, methods)).or_insert(next);
            if g == next {
                self.groups.push(StackGroup {
                    frames: st.frames.iter().map(|f| (f.method, f.line)).collect(),
                    kinds: vec![0; st.frames.len()],
                    truncated: false,
                });
            }
            let group = &mut self.groups[g as usize - 1];
            for (k, f) in group.kinds.iter_mut().zip(&st.frames) {
                *k |= 1 << f.kind.code();
            }
            group.truncated |= st.truncated;
            self.group_of.insert(key, g);
        }
    }

    /// A stack group by its id (see [`PathKey`]).
    pub fn group(&self, id: u64) -> Option<&StackGroup> {
        self.groups.get(usize::try_from(id).ok()?.checked_sub(1)?)
    }

    /// The frames of stack group `group` of JVM `pid`, top (the waiting
    /// method) first, each with its line and the kind it ran as
    /// (JIT-compiled winning where its waits saw it run several ways), and
    /// every kind seen as bits of [`FrameKind::code`].
    pub fn group_frames(&self, pid: u32, group: u64) -> Vec<(path::Frame, u8)> {
        self.group(group)
            .map(|s| {
                s.frames
                    .iter()
                    .zip(&s.kinds)
                    .map(|(&(method, line), &bits)| {
                        let frame = path::Frame {
                            line,
                            ..path::Frame::new(path_kind(bits), self.symbol(pid, method))
                        };
                        (frame, bits)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The stack group (see [`PathKey`]) of wait `w`'s stack, 0 if none.
    pub fn wait_group(&self, w: &JavaWait) -> u64 {
        self.group_of.get(&(w.pid, w.stack)).copied().unwrap_or(0)
    }

    /// A Java thread's name as its JVM's flight recorder gave it.
    pub fn java_name(&self, tid: u32) -> Option<&str> {
        self.named.get(&tid).map(String::as_str)
    }

    /// The JVM (pid) of a thread its flight recording named, or of a
    /// thread that waited.
    pub fn jvm_of(&self, tid: u32) -> Option<u32> {
        self.java_tids.get(&tid).copied()
    }

    /// Whether any JVM's waits were read.
    pub fn is_empty(&self) -> bool {
        self.jvms.is_empty() && self.per_thread.is_empty()
    }

    /// Whether a JVM's recorder named thread `tid` (its names win over
    /// the call trees' and the kernel's).
    pub fn has_name(&self, tid: u32) -> bool {
        self.named.contains_key(&tid)
    }

    /// A JVM's text by its symbol id (empty for 0 or an unknown id).
    pub fn symbol(&self, pid: u32, id: u64) -> &str {
        self.symbols.get(&(pid, id)).map_or("", String::as_str)
    }

    /// The index in `tid`'s waits of the one that contains `time`.
    fn find(&self, tid: u32, time: u64) -> Option<usize> {
        let v = self.per_thread.get(&tid)?;
        // The last wait begun at or before `time`; waits of one thread do
        // not nest, but look one further back in case two touch.
        let after = v.partition_point(|s| s.wait.start <= time);
        (after.saturating_sub(2)..after)
            .rev()
            .find(|&i| v[i].wait.end() >= time)
    }

    /// The wait of `tid` that contains `time`, if any.
    pub fn wait_at(&self, tid: u32, time: u64) -> Option<&JavaWait> {
        let i = self.find(tid, time)?;
        Some(&self.per_thread[&tid][i].wait)
    }

    /// Whether `tid` (of process `pid`, where known) is a Java thread whose
    /// JVM's flight recording ran at `time` (`None`: not a Java thread of a
    /// JVM whose waits were read). Java threads are those the recording
    /// names; outside the span it ran, every thread of the JVM counts (which
    /// of them run Java is not known then), so that a JVM's start-up shows.
    fn recorded_at(&self, tid: u32, pid: Option<u32>, time: u64) -> Option<bool> {
        let inside = |pid: u32| {
            self.recorded
                .get(&pid)
                .is_none_or(|&(from, to)| (from..=to).contains(&time))
        };
        match self.java_tids.get(&tid) {
            Some(&p) => Some(inside(p)),
            None => {
                let p = pid.filter(|p| self.jvm_pids.contains(p))?;
                // A thread the recording does not name while it ran: JVM-internal.
                (!inside(p)).then_some(false)
            }
        }
    }

    /// Counts a dispatch (`pid`: the leaving thread's process, where
    /// known): a blocking switch-out of a Java thread is checked against its
    /// waits.
    pub fn dispatch(&mut self, d: &Dispatch, pid: Option<u32>) {
        if !matches!(
            d.prev_state,
            PrevState::Sleeping | PrevState::DiskSleep | PrevState::Blocked
        ) || self.recorded_at(d.prev_tid, pid, d.time) != Some(true)
        {
            return;
        }
        self.blocking_switch_outs += 1;
        if let Some(i) = self.find(d.prev_tid, d.time) {
            self.inside_wait += 1;
            if let Some(v) = self.per_thread.get_mut(&d.prev_tid) {
                v[i].switched = true;
            }
        }
    }

    /// Counts a dispatch to idle caused by `tid` (of process `pid`) leaving
    /// at `time`, followed by `idle_ns` of idle time.
    pub fn idle_cause(&mut self, tid: u32, pid: Option<u32>, time: u64, idle_ns: u64) {
        self.credit_idle(tid, pid, time, idle_ns, 1);
    }

    /// Credits `idle_ns` to the dispatch to idle `tid` (of process `pid`)
    /// left with at `time`, counting `dispatches` (1 the first time, 0 for
    /// idle that continued it after one of idleflow's own threads ran).
    pub fn credit_idle(
        &mut self,
        tid: u32,
        pid: Option<u32>,
        time: u64,
        idle_ns: u64,
        dispatches: u64,
    ) {
        match self.recorded_at(tid, pid, time) {
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
        let Some(w) = self.wait_at(tid, time).copied() else {
            self.unjoined_idle.0 += dispatches;
            self.unjoined_idle.1 = self.unjoined_idle.1.saturating_add(idle_ns);
            return;
        };
        let group = self.wait_group(&w);
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
    pub fn waits_switched(&self, from: u64, to: u64) -> FxHashMap<WaitReason, (u64, u64)> {
        let mut m: FxHashMap<WaitReason, (u64, u64)> = FxHashMap::default();
        for s in self.per_thread.values().flatten() {
            if s.wait.start >= from && s.wait.end() < to {
                let e = m.entry(s.wait.reason).or_default();
                e.0 += 1;
                e.1 += u64::from(s.switched);
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
pub fn folded(w: &JavaWaits, fold: crate::path::FoldOptions, by_reason: bool) -> Vec<String> {
    let mut out = Folded::default();
    for (&(pid, group, reason, object), p) in &w.paths {
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
    out.into_lines()
}

/// The path kind of a Java frame from the [`FrameKind`] codes seen at it
/// (bits): JIT-compiled where it ever was, then inlined, native,
/// interpreted; a Java method of no known kind otherwise.
pub(crate) fn path_kind(bits: u8) -> path::FrameKind {
    let has = |k: FrameKind| bits & (1 << k.code()) != 0;
    [
        FrameKind::Jit,
        FrameKind::Inlined,
        FrameKind::Native,
        FrameKind::Interpreted,
    ]
    .into_iter()
    .find(|&k| has(k))
    .map_or(path::FrameKind::Java, path::FrameKind::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{NodeTag, IDLE_TID};

    fn wait(tid: u32, start: u64, duration: u64) -> Slot {
        Slot {
            wait: JavaWait {
                pid: 7,
                tid,
                start,
                duration,
                reason: WaitReason::MonitorEnter,
                stack: 1,
                object: 2,
                other_tid: 0,
                other: 3,
            },
            switched: false,
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
        let mut w = waits();
        w.dispatch(&switch_out(10, 120), None);
        w.idle_cause(10, None, 120, 5_000);
        assert_eq!((w.blocking_switch_outs, w.inside_wait), (1, 1));
        let g = w.group_of[&(7, 1)];
        assert_eq!(g, w.group_of[&(7, 4)], "same methods: one path");
        let p = &w.paths[&(7, g, WaitReason::MonitorEnter, 2)];
        assert_eq!((p.dispatches, p.idle_ns, p.others[&3]), (1, 5_000, 1));
        let kinds = w.group(g).unwrap().kinds[0];
        assert_eq!(
            kinds,
            1 << FrameKind::Interpreted.code() | 1 << FrameKind::Jit.code()
        );
        assert_eq!(w.unjoined_idle, (0, 0));
        assert_eq!(
            w.waits_switched(0, u64::MAX)[&WaitReason::MonitorEnter],
            (3, 1)
        );
    }

    #[test]
    fn a_switch_out_outside_every_wait_or_of_another_thread_is_not_joined() {
        let mut w = waits();
        // Between thread 10's waits; inside thread 11's wait but by 10;
        // by 12, which has no waits.
        for (tid, t) in [(10, 200), (10, 1_200), (12, 1_200)] {
            w.dispatch(&switch_out(tid, t), None);
            w.idle_cause(tid, None, t, 1_000);
        }
        assert_eq!((w.blocking_switch_outs, w.inside_wait), (3, 0));
        assert!(w.paths.is_empty());
        assert_eq!(w.java_idle, (3, 3_000));
        assert_eq!(w.unjoined_idle, (3, 3_000));
        assert_eq!(
            w.waits_switched(0, u64::MAX)[&WaitReason::MonitorEnter],
            (3, 0)
        );
    }

    #[test]
    fn preemptions_and_other_processes_threads_are_not_counted() {
        let mut w = waits();
        let mut d = switch_out(10, 120);
        d.prev_state = PrevState::Preempted;
        w.dispatch(&d, None);
        w.dispatch(&switch_out(99, 120), Some(99));
        w.idle_cause(99, Some(99), 120, 1_000);
        assert_eq!((w.blocking_switch_outs, w.java_idle.0), (0, 0));
    }

    #[test]
    fn outside_its_recording_a_jvms_idle_is_counted_apart() {
        let mut w = waits();
        w.jvm_pids.insert(7);
        w.recorded.insert(7, (1_000, 2_000));
        // A named Java thread before the recording, and an unnamed thread
        // of the JVM before it: unrecorded. The unnamed one while it ran
        // (JVM-internal): not a Java thread's idle.
        w.idle_cause(10, Some(7), 500, 100);
        w.idle_cause(50, Some(7), 600, 200);
        w.idle_cause(50, Some(7), 1_500, 400);
        assert_eq!(w.unrecorded_idle, (2, 300));
        assert_eq!(w.java_idle, (0, 0));
        // A named thread inside the recording, in a wait: joined.
        w.per_thread.insert(10, vec![wait(10, 1_100, 100)]);
        w.idle_cause(10, Some(7), 1_150, 800);
        assert_eq!((w.java_idle, w.unjoined_idle), ((1, 800), (0, 0)));
    }
}
