//! The JVMs' waits as their flight recorders reported them (each wait of
//! a thread with its start, duration, stack and reason;
//! [`idleflow_format::waits`]), read before the pass and indexed per
//! thread: which wait, if any, contains an instant of a thread's life.
//!
//! Invariant: read once ([`JavaWaits::load`]) and never changed by the
//! pass; memory holds the waits (≈ 50 bytes each) and the interned stacks
//! and texts.

use idleflow_format::{FormatError, FrameKind, JavaStack, JavaWait, JvmWaits, Reader, Record};
use rustc_hash::{FxHashMap, FxHashSet};
use std::io::{Read, Seek};

use crate::path;

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

/// Every JVM's waits, indexed per thread: read before the pass and never
/// changed by it (what the dispatch stream adds is [`super::JavaIdle`]'s).
#[derive(Debug, Default)]
pub struct JavaWaits {
    /// What was read of each JVM.
    pub jvms: Vec<JvmWaits>,
    pub(super) symbols: FxHashMap<(u32, u64), String>,
    pub(super) stacks: FxHashMap<(u32, u64), JavaStack>,
    /// Stack → its group's id (index in `groups` + 1).
    pub(super) group_of: FxHashMap<(u32, u64), u64>,
    pub(super) groups: Vec<StackGroup>,
    /// Per thread, its waits by start time.
    pub(super) per_thread: FxHashMap<u32, Vec<JavaWait>>,
    /// Threads of the JVMs (all their threads, waits or not), with their JVM.
    pub(super) java_tids: FxHashMap<u32, u32>,
    /// Per JVM, when its flight recording ran: its waits are known then only.
    pub(super) recorded: FxHashMap<u32, (u64, u64)>,
    /// The JVMs whose waits were read.
    pub(super) jvm_pids: FxHashSet<u32>,
    /// Those whose waits were read from their structures at the sampled
    /// switch-outs (source `vm`), not by their flight recorders.
    pub(super) sampled: FxHashSet<u32>,
    /// Threads the JVMs named, with their Java names.
    pub(super) named: FxHashMap<u32, String>,
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
                        w.per_thread.entry(wait.tid).or_default().push(wait);
                    }
                    Record::JvmWaits(h) => {
                        w.java_tids.extend(h.threads.iter().map(|t| (t.0, h.pid)));
                        w.jvm_pids.insert(h.pid);
                        if h.source == "vm" {
                            w.sampled.insert(h.pid);
                        }
                        if h.recorded_to_ns > h.recorded_from_ns {
                            w.recorded
                                .insert(h.pid, (h.recorded_from_ns, h.recorded_to_ns));
                        }
                        w.named.extend(h.threads.iter().cloned());
                        // The thread dump's names: for threads with no
                        // name of the recording's own, and without making
                        // them Java threads.
                        for (tid, name) in &h.dumped_names {
                            w.named.entry(*tid).or_insert_with(|| name.clone());
                        }
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
            v.sort_by_key(|w| (w.start, w.duration));
        }
        w.group_stacks();
        Ok(w)
    }

    /// Puts the stacks with the same methods into one group.
    pub(super) fn group_stacks(&mut self) {
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

    /// A stack group by its id (see [`super::PathKey`]).
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

    /// Which source names the frames of JVM `pid`'s waits: its flight
    /// recorder, or its structures (source `vm`).
    pub fn frames_source(&self, pid: u32) -> path::FrameSource {
        if self.sampled.contains(&pid) {
            path::FrameSource::Vm
        } else {
            path::FrameSource::Jfr
        }
    }

    /// The stack group (see [`super::PathKey`]) of wait `w`'s stack, 0 if none.
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
    pub(super) fn find(&self, tid: u32, time: u64) -> Option<usize> {
        let v = self.per_thread.get(&tid)?;
        // The last wait begun at or before `time`; waits of one thread do
        // not nest, but look one further back in case two touch.
        let after = v.partition_point(|w| w.start <= time);
        (after.saturating_sub(2)..after)
            .rev()
            .find(|&i| v[i].end() >= time)
    }

    /// The wait of `tid` that contains `time`, if any.
    pub fn wait_at(&self, tid: u32, time: u64) -> Option<&JavaWait> {
        let i = self.find(tid, time)?;
        Some(&self.per_thread[&tid][i])
    }

    /// The wait of `tid` that contains `from`, the switch-out whose stacks
    /// were carried to a later one that had none, if its JVM's waits were
    /// read at the sampled switch-outs (`vm`): such a wait goes with its
    /// stacks, as a flight recorder's, which sees every wait, never does.
    pub fn carried_wait(&self, tid: u32, from: u64) -> Option<&JavaWait> {
        self.wait_at(tid, from)
            .filter(|w| self.sampled.contains(&w.pid))
    }

    /// Whether `tid` (of process `pid`, where known) is a Java thread whose
    /// JVM's flight recording ran at `time` (`None`: not a Java thread of a
    /// JVM whose waits were read). Java threads are those the recording
    /// names; outside the span it ran, every thread of the JVM counts (which
    /// of them run Java is not known then), so that a JVM's start-up shows.
    pub(super) fn recorded_at(&self, tid: u32, pid: Option<u32>, time: u64) -> Option<bool> {
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
