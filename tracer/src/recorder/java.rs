//! Java frames from the JVMs' own structures (`record --java vm`): for each
//! switch-out stack copy of a JVM's thread, its Java frames
//! (`idleflow_hotspot::BlockedThreads`), written just before the copy as a
//! `SWITCH_JAVA_STACK` naming an interned `WALKED_STACK`
//! (`idleflow_format::walked`).
//!
//! Each Java thread's anchor (where its JVM keeps its last Java frame) is
//! handed to the eBPF programs (`JavaAnchors`), which read it at the
//! switch-out with the stack copy: the walk then reads the stack as the
//! copy has it, however late. A copy without the anchor (a thread not yet
//! known to the programs) is walked only if the thread has not run since
//! its switch-out (its count of runs then and now).
//!
//! A process is looked at once: a JVM is one that maps a HotSpot libjvm.so
//! whose tables idleflow can read; a JVM still starting (tables not yet
//! filled) is tried again a little later, a few times.
//!
//! Invariant: nothing is written for a copy whose frames are not the
//! switch-out's; every copy of a JVM's thread is counted once in
//! [`JavaWalkCounts`] (walked, ran first, no Java frames, failed).

use std::time::{Duration, Instant};

use idleflow_bpf::JavaAnchors;
use idleflow_format::{FrameKind, JavaWalkCounts, WaitReason, WalkedFrame, WalkedStack};
use idleflow_hotspot::{Anchor, BlockedThreads, Found, HotspotError, VmStructsError, WalkEnd};

use crate::parse::UserStackCopy;
use crate::recorder::java_io::JavaIo;
use crate::recorder::vm_waits::{Seen, VmWaits};
use rustc_hash::FxHashMap;

/// A process whose tables could not be read yet is tried again after this.
const RETRY: Duration = Duration::from_millis(100);
/// …at most this many times.
const TRIES: u32 = 50;
/// A JVM's thread list is read again for threads the programs do not know
/// at most this often.
const REGISTER_AGAIN: Duration = Duration::from_millis(100);
/// Distinct walked stacks remembered (then forgotten all at once: a stack
/// met again is written again).
const MAX_STACKS: usize = 1 << 16;

/// What is known of one process.
#[derive(Debug)]
enum Process {
    Jvm(Box<BlockedThreads>),
    NotJvm,
    /// Its tables could not be read: when last tried, and how often.
    Unreadable {
        at: Instant,
        tries: u32,
    },
}

/// The walks of one recording.
#[derive(Debug, Default)]
pub struct JavaWalks {
    /// Where the eBPF programs learn the Java threads' anchors.
    anchors: Option<JavaAnchors>,
    /// The threads they know (tid → process).
    known: FxHashMap<u32, u32>,
    processes: FxHashMap<u32, Process>,
    /// Walked stacks by JVM (its waits name its own: `recorder/vm_waits.rs`).
    stacks: FxHashMap<(u32, bool, Vec<WalkedFrame>), u64>,
    next_id: u64,
    /// What the walks found.
    pub counts: JavaWalkCounts,
    /// The waits they show.
    pub waits: VmWaits,
    /// Threads' names (`comm`), as first read.
    names: FxHashMap<u32, String>,
    /// What sockets and files the JVMs' threads wait on.
    io: JavaIo,
    /// When each JVM's unknown threads were last handed to the programs.
    registered: FxHashMap<u32, Instant>,
}

/// What goes before a switch-out's stack copy: a stack met for the first
/// time, and the id of the copy's stack.
pub struct Walked {
    pub new_stack: Option<Box<WalkedStack>>,
    pub stack: u64,
}

impl JavaWalks {
    /// Walks whose threads' anchors the eBPF programs read through
    /// `anchors` (`None`: the perf source, which cannot).
    pub fn new(anchors: Option<JavaAnchors>) -> Self {
        Self {
            anchors,
            ..Self::default()
        }
    }

    /// The Java frames of thread `tid` of `pid` at the switch-out at
    /// `time` whose stack copy is `u`; its wait goes into [`Self::waits`].
    pub fn switch_out(
        &mut self,
        pid: u32,
        tid: u32,
        time: u64,
        u: &UserStackCopy,
    ) -> Option<Walked> {
        let started = Instant::now();
        let (complete, frames) = self.frames(pid, tid, u, true)?;
        let (stack, interned) = self.intern(pid, complete, frames);
        let Some(Process::Jvm(threads)) = self.processes.get_mut(&pid) else {
            return None;
        };
        let seen = seen(threads, &mut self.names, pid, u.java_monitors);
        // The waits see a stack's frames once: when it is new, or new to
        // them (first met at a wake-up).
        let frames = match &interned {
            Ok(s) => Some(s.frames.as_slice()),
            Err(frames) if !self.waits.knows(pid, stack) => Some(frames.as_slice()),
            Err(_) => None,
        };
        let name = thread_name(threads, &mut self.names, pid, tid);
        let io = &mut self.io;
        self.waits
            .switch_out((pid, tid, &name), time, (stack, frames), &seen, |reason| {
                match (reason, u.java_blocker) {
                    // As the programs read it at the switch-out, else now.
                    (WaitReason::Park, Some(0)) => None,
                    (WaitReason::Park, Some(klass)) => threads.narrow_class(klass),
                    (WaitReason::Park, None) => threads.park_blocker_class(tid),
                    _ => io.object(pid, reason, u),
                }
            });
        let counts = &mut self.counts;
        counts.walked += 1;
        counts.walk_ns += started.elapsed().as_nanos() as u64;
        Some(Walked {
            new_stack: interned.ok(),
            stack,
        })
    }

    /// The Java frames of waker `tid` of `pid` at a wake-up whose stack
    /// copy is `u`: walked only from the anchor the programs read then (a
    /// waker runs on: its live stack is no longer the wake-up's).
    pub fn wake(&mut self, pid: u32, tid: u32, u: &UserStackCopy) -> Option<Walked> {
        u.java_anchor?;
        let started = Instant::now();
        let (complete, frames) = self.frames(pid, tid, u, false)?;
        let (stack, interned) = self.intern(pid, complete, frames);
        self.counts.wakers += 1;
        self.counts.walk_ns += started.elapsed().as_nanos() as u64;
        Some(Walked {
            new_stack: interned.ok(),
            stack,
        })
    }

    /// The named Java frames of thread `tid` of `pid` whose stack copy is
    /// `u`, and whether the walk reached its first Java frame; a switch-out
    /// (`switch_out`) is counted, and walked live where the programs did not
    /// read its anchor yet.
    fn frames(
        &mut self,
        pid: u32,
        tid: u32,
        u: &UserStackCopy,
        switch_out: bool,
    ) -> Option<(bool, Vec<WalkedFrame>)> {
        let (threads, new) = jvm(&mut self.processes, &mut self.counts.jvms, pid)?;
        if new {
            // The programs read the anchors of its threads from now on.
            if let Some(anchors) = &self.anchors {
                for t in threads.thread_ids() {
                    if let Some(at) = threads.anchor_at(t) {
                        if anchors.insert(t, at).is_ok() {
                            self.known.insert(t, pid);
                        }
                    }
                }
            }
        }
        let found = match (u.java_anchor, u.runs) {
            (Some([sp, fp, pc]), runs) => {
                let anchor = Anchor { sp, fp, pc };
                match threads.walk_copy(tid, anchor, (u.sp, &u.bytes), false) {
                    // Cut where the copy ends: its stack above is good as
                    // it is now if it has not run since.
                    Found::Walked(w)
                        if matches!(w.end, WalkEnd::Lost(_))
                            && runs.is_some()
                            && idleflow_hotspot::blocked::run_count(pid, tid).ok() == runs =>
                    {
                        threads.walk_copy(tid, anchor, (u.sp, &u.bytes), true)
                    }
                    found => found,
                }
            }
            (None, Some(runs)) if switch_out => {
                let found = threads.walk(tid, u.sp, runs);
                // From now on the programs read its anchor, and those of
                // the threads started with it (a pool starts together).
                if let Some(anchors) = &self.anchors {
                    if let Some(at) = threads.anchor_at(tid) {
                        if anchors.insert(tid, at).is_ok() {
                            self.known.insert(tid, pid);
                        }
                    }
                    if self
                        .registered
                        .get(&pid)
                        .is_none_or(|at| at.elapsed() >= REGISTER_AGAIN)
                    {
                        self.registered.insert(pid, Instant::now());
                        for t in threads.thread_ids() {
                            if self.known.contains_key(&t) {
                                continue;
                            }
                            if let Some(at) = threads.anchor_at(t) {
                                if anchors.insert(t, at).is_ok() {
                                    self.known.insert(t, pid);
                                }
                            }
                        }
                    }
                }
                found
            }
            _ => return None,
        };
        let counts = &mut self.counts;
        if switch_out {
            counts.copies += 1;
        }
        let walk = match found {
            Found::Walked(w) if !w.frames.is_empty() => {
                counts.deoptimized += u64::from(w.deoptimized);
                w
            }
            Found::Walked(_) | Found::NoJavaFrames => {
                counts.no_java_frames += u64::from(switch_out);
                return None;
            }
            Found::RanFirst => {
                counts.ran_first += u64::from(switch_out);
                return None;
            }
            Found::Failed(_) => {
                counts.failed += u64::from(switch_out);
                return None;
            }
        };
        let frames: Vec<WalkedFrame> = walk
            .frames
            .iter()
            .map(|f| {
                let (method, line) = threads
                    .name(f)
                    .unwrap_or_else(|| ("<unreadable method>".into(), 0));
                // A native method's frame (its wrapper, or its interpreted
                // entry); a frame without a bytecode index of another is
                // at its entry (a synchronized method's monitor enter).
                let kind = match f.kind {
                    idleflow_hotspot::FrameKind::Inlined => FrameKind::Inlined,
                    _ if f.bci.is_none() && threads.is_native(f.method) => FrameKind::Native,
                    idleflow_hotspot::FrameKind::Interpreted => FrameKind::Interpreted,
                    idleflow_hotspot::FrameKind::Compiled => FrameKind::Jit,
                };
                WalkedFrame { kind, method, line }
            })
            .collect();
        let complete = matches!(walk.end, WalkEnd::Stub(_) | WalkEnd::Native(_));
        Some((complete, frames))
    }

    /// The id of walked stack `frames` of `pid`, and the stack if it is
    /// met for the first time (to be written before its first use), else
    /// its frames handed back.
    fn intern(
        &mut self,
        pid: u32,
        complete: bool,
        frames: Vec<WalkedFrame>,
    ) -> (u64, Result<Box<WalkedStack>, Vec<WalkedFrame>>) {
        let key = (pid, complete, frames);
        if let Some(&stack) = self.stacks.get(&key) {
            return (stack, Err(key.2));
        }
        if self.stacks.len() >= MAX_STACKS {
            self.stacks.clear();
        }
        self.next_id += 1;
        let stack = self.next_id;
        self.counts.stacks += 1;
        let new_stack = Box::new(WalkedStack {
            id: stack,
            complete: key.1,
            frames: key.2.clone(),
        });
        self.stacks.insert(key, stack);
        (stack, Ok(new_stack))
    }
}

impl JavaWalks {
    /// Thread `tid` came onto a CPU at `time`: its wait ended.
    #[inline]
    pub fn switched_in(&mut self, tid: u32, time: u64) {
        self.waits.switched_in(tid, time);
    }

    /// Thread `waker` of process `pid` woke thread `tid`: the notifier of
    /// its monitor wait, if it is in one (the notifier's exit from the
    /// monitor wakes it) and the waker is a thread of the same JVM.
    #[inline]
    pub fn woken(&mut self, tid: u32, waker: u32, pid: u32) {
        if !self.waits.wants_notifier(tid, pid) || waker == tid {
            return;
        }
        let Some(Process::Jvm(threads)) = self.processes.get_mut(&pid) else {
            return;
        };
        let name = thread_name(threads, &mut self.names, pid, waker);
        self.waits.notified(tid, waker, &name);
    }

    /// Thread `tid` exited at `time`: its wait ended, the programs forget it.
    pub fn exited(&mut self, tid: u32, time: u64) {
        self.waits.switched_in(tid, time);
        self.names.remove(&tid);
        if self.known.remove(&tid).is_some() {
            if let Some(a) = &self.anchors {
                a.remove(tid);
            }
        }
    }
}

/// What thread of `threads`' JVM with monitor words `monitors` (read at
/// its switch-out) waited on, and who owned it.
fn seen(
    threads: &mut BlockedThreads,
    names: &mut FxHashMap<u32, String>,
    pid: u32,
    monitors: Option<[u64; 3]>,
) -> Seen {
    let Some([pending, waiting, owner]) = monitors else {
        return Seen::default();
    };
    let monitor = if pending != 0 { pending } else { waiting };
    let object = (monitor != 0)
        .then(|| threads.object_class(monitor))
        .flatten();
    let owner = (pending != 0)
        .then(|| threads.owner_tid(owner))
        .flatten()
        .map(|t| (t, thread_name(threads, names, pid, t)));
    Seen {
        monitors,
        object,
        owner,
    }
}

/// Thread `tid`'s Java name, read once from its `java.lang.Thread`; else
/// its name as the kernel has it (the JVM gives each thread its Java name,
/// cut to 15 bytes).
fn thread_name(
    threads: &mut BlockedThreads,
    names: &mut FxHashMap<u32, String>,
    pid: u32,
    tid: u32,
) -> String {
    if let Some(n) = names.get(&tid) {
        return n.clone();
    }
    if names.len() >= MAX_STACKS {
        names.clear();
    }
    let n = threads.java_name(tid).unwrap_or_else(|| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default()
    });
    names.insert(tid, n.clone());
    n
}

/// The walker of process `pid`, if it is a JVM whose tables could be read,
/// and whether it was opened just now (`notes`: what is said of each JVM).
fn jvm<'a>(
    processes: &'a mut FxHashMap<u32, Process>,
    notes: &mut Vec<String>,
    pid: u32,
) -> Option<(&'a mut BlockedThreads, bool)> {
    let tries = match processes.get(&pid) {
        None => Some(1),
        Some(Process::Unreadable { at, tries }) => {
            (*tries < TRIES && at.elapsed() >= RETRY).then_some(*tries + 1)
        }
        Some(_) => None,
    };
    let mut new = false;
    if let Some(tries) = tries {
        let unreadable = |notes: &mut Vec<String>, why: String| {
            if tries == TRIES {
                notes.push(format!("{pid}: its structures could not be read ({why})"));
            }
            Process::Unreadable {
                at: Instant::now(),
                tries,
            }
        };
        let process = match BlockedThreads::open(pid) {
            Ok(t) => {
                notes.push(format!("{pid}: HotSpot {}", t.jvm().release));
                new = true;
                Process::Jvm(Box::new(t))
            }
            Err(HotspotError::Tables(VmStructsError::NoLibjvm(_)) | HotspotError::Maps { .. }) => {
                Process::NotJvm
            }
            // Told to: said at once, never tried again.
            Err(e @ HotspotError::Refused) => {
                notes.push(format!("{pid}: its structures could not be read ({e})"));
                Process::Unreadable {
                    at: Instant::now(),
                    tries: TRIES,
                }
            }
            Err(e) => unreadable(notes, e.to_string()),
        };
        processes.insert(pid, process);
    }
    match processes.get_mut(&pid) {
        Some(Process::Jvm(t)) => Some((t, new)),
        _ => None,
    }
}
