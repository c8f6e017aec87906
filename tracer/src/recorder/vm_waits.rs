//! Java waits read from the JVMs' own structures (`record --java vm`):
//! what the flight recorder's wait events say — the reason, the object
//! waited on, the thread that held it, the Java stack — for each walked
//! switch-out of a JVM's thread, without the flight recorder.
//!
//! A walked switch-out opens a wait of its thread: its reason from the
//! thread's monitors as the eBPF programs read them at the switch-out (the
//! monitor it blocked entering, the one it waits in) or else from the
//! innermost Java frames (`Thread.sleep`, `Unsafe.park`, a socket's or a
//! file's read, …); its object from the monitor's class; the other thread
//! from the monitor's owner. The wait ends when its thread next comes onto
//! a CPU (or exits, or the window ends). The waits go into the recording
//! as the flight recorder's do (`JAVA_SYMBOL`, `JAVA_STACK`, `JAVA_WAIT`,
//! then a `JVM_WAITS` head per JVM with source `vm`), after the stream: one
//! model, the report joins them to the dispatches as it joins JFR's.
//!
//! A flight recorder's dump takes the waits of its window
//! ([`VmWaits::window`]); the recorder forgets those its ring no longer
//! reaches ([`VmWaits::forget_before`]).
//!
//! Invariant: ids never collide with a flight recorder's of the same JVM
//! (they start at [`FIRST_ID`]); memory holds the interned texts and
//! stacks and at most [`MAX_WAITS`] waits (the rest counted, never dropped
//! silently).

use idleflow_format::{
    JavaFrame, JavaStack, JavaSymbol, JavaWait, JvmWaits, Record, WaitReason, WalkedFrame,
};
use rustc_hash::FxHashMap;

/// The first id of a symbol or stack of these waits (a flight recorder's
/// of the same JVM count from 1).
pub const FIRST_ID: u64 = 1 << 40;
/// Waits kept (≈ 56 bytes each); later ones are counted, not kept.
pub const MAX_WAITS: usize = 1 << 21;
/// Walked stacks remembered (then forgotten all at once).
const MAX_WALKED: usize = 1 << 16;

/// What the walk of one switch-out found, besides its frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The thread's pending monitor, waiting monitor and the pending one's
    /// owner word, as read at the switch-out (`None`: not read).
    pub monitors: Option<[u64; 3]>,
    /// The class of the object of the monitor it waits on.
    pub object: Option<String>,
    /// The monitor's owner: tid and name.
    pub owner: Option<(u32, String)>,
}

/// Why a thread waits, from its monitors at the switch-out, else from its
/// innermost Java frames (`frames`, innermost first, as perf maps name
/// them): `None` when neither says (a selector's poll, a JVM-internal
/// wait, code that just ran out of its time slice).
pub fn reason(frames: &[WalkedFrame], monitors: Option<[u64; 3]>) -> Option<WaitReason> {
    match monitors {
        Some([pending, _, _]) if pending != 0 => return Some(WaitReason::MonitorEnter),
        Some([_, waiting, _]) if waiting != 0 => return Some(WaitReason::MonitorWait),
        _ => {}
    }
    // The innermost few frames: a wait's method calls down through a
    // frame or two of the library (park → parkNanos, read → implRead →
    // timedRead → park).
    frames
        .iter()
        .take(6)
        .find_map(|f| frame_reason(method(&f.method)))
}

/// The reason a frame of method `m` (`pkg.Class.method`) waits for.
fn frame_reason(m: &str) -> Option<WaitReason> {
    let (class, name) = m.rsplit_once('.')?;
    Some(match (class, name) {
        ("java.lang.Thread", "sleep" | "sleep0" | "sleepNanos" | "sleepNanos0") => {
            WaitReason::Sleep
        }
        ("jdk.internal.misc.Unsafe" | "sun.misc.Unsafe", "park") => WaitReason::Park,
        ("java.lang.Object", "wait" | "wait0") => WaitReason::MonitorWait,
        ("sun.nio.ch.NioSocketImpl", "read" | "implRead" | "timedRead")
        | ("java.net.SocketInputStream", "socketRead0" | "read")
        | ("sun.nio.ch.SocketChannelImpl", "read") => WaitReason::SocketRead,
        ("sun.nio.ch.NioSocketImpl", "write" | "implWrite")
        | ("sun.nio.ch.SocketChannelImpl", "write") => WaitReason::SocketWrite,
        ("java.io.FileInputStream" | "java.io.RandomAccessFile", "readBytes" | "read0")
        | ("sun.nio.ch.FileChannelImpl", "read") => WaitReason::FileRead,
        ("java.io.FileOutputStream" | "java.io.RandomAccessFile", "writeBytes" | "write0")
        | ("sun.nio.ch.FileChannelImpl", "write") => WaitReason::FileWrite,
        ("sun.nio.ch.FileChannelImpl", "force") => WaitReason::FileForce,
        _ => return None,
    })
}

/// `pkg.Class.method` of a perf-map name `pkg.Class.method(params)`: the
/// flight recorder's spelling.
fn method(perf_map_name: &str) -> &str {
    perf_map_name
        .split_once('(')
        .map_or(perf_map_name, |(m, _)| m)
}

/// What is known of one JVM's waits.
#[derive(Debug, Default)]
struct Jvm {
    /// When its first thread was walked, ns.
    from: u64,
    /// Its threads walked, with their names.
    threads: FxHashMap<u32, String>,
}

/// The waits of one recording's JVMs, as their structures showed them.
#[derive(Debug, Default)]
pub struct VmWaits {
    symbols: FxHashMap<(u32, String), u64>,
    stacks: FxHashMap<(u32, Vec<JavaFrame>), u64>,
    next_id: u64,
    /// Per thread, its wait still open.
    open: FxHashMap<u32, JavaWait>,
    done: Vec<JavaWait>,
    jvms: FxHashMap<u32, Jvm>,
    /// Per (JVM, walked stack id): its stack here and the reason its
    /// frames give.
    walked: FxHashMap<(u32, u64), (u64, Option<WaitReason>)>,
    /// Waits not kept (more than [`MAX_WAITS`]).
    pub dropped: u64,
}

impl VmWaits {
    /// Thread `tid` (named `name`) of JVM `pid` left a CPU at `time` with
    /// the Java frames of walked stack `walked` (its id, and its frames,
    /// innermost first, the first time it is met: the recorder's walked
    /// stacks are interned before) and what its walk `seen`: opens its
    /// wait, if the frames and monitors say why it waits; the object of a
    /// wait not on a monitor (a park's blocker, a socket's peer, a file's
    /// path) is what `object_of` reads for its reason.
    pub fn switch_out(
        &mut self,
        (pid, tid, name): (u32, u32, &str),
        time: u64,
        walked: (u64, Option<&[WalkedFrame]>),
        seen: &Seen,
        object_of: impl FnOnce(WaitReason) -> Option<String>,
    ) {
        self.switched_in(tid, time);
        // Every walked thread is one of the JVM's Java threads, named.
        let jvm = self.jvms.entry(pid).or_insert_with(|| Jvm {
            from: time,
            ..Jvm::default()
        });
        jvm.threads.entry(tid).or_insert_with(|| name.to_string());
        let (stack, reason) = match (walked.1, self.walked.get(&(pid, walked.0))) {
            (None, Some(&(stack, reason))) => (stack, reason),
            (Some(frames), _) => {
                let reason = reason(frames, None);
                let frames = frames
                    .iter()
                    .map(|f| JavaFrame {
                        method: self.symbol(pid, method(&f.method)),
                        line: f.line,
                        kind: f.kind,
                    })
                    .collect();
                let stack = self.stack(pid, frames);
                if self.walked.len() >= MAX_WALKED {
                    self.walked.clear();
                }
                self.walked.insert((pid, walked.0), (stack, reason));
                (stack, reason)
            }
            // Its frames are not at hand (the recorder gives them when
            // [`VmWaits::knows`] says they are not known).
            (None, None) => return,
        };
        let by_monitor = match seen.monitors {
            Some([pending, _, _]) if pending != 0 => Some(WaitReason::MonitorEnter),
            Some([_, waiting, _]) if waiting != 0 => Some(WaitReason::MonitorWait),
            _ => None,
        };
        let Some(reason) = by_monitor.or(reason) else {
            return;
        };
        let object = match reason {
            WaitReason::MonitorEnter | WaitReason::MonitorWait => seen.object.clone(),
            other => object_of(other),
        }
        .map_or(0, |o| self.symbol(pid, &o));
        let (other_tid, other) = match &seen.owner {
            Some((t, n)) if reason == WaitReason::MonitorEnter && *t != tid && !n.is_empty() => {
                (*t, self.symbol(pid, n))
            }
            _ => (0, 0),
        };
        self.open.insert(
            tid,
            JavaWait {
                pid,
                tid,
                start: time,
                duration: 0,
                reason,
                stack,
                object,
                other_tid,
                other,
            },
        );
    }

    /// Whether the frames of walked stack `walked` of JVM `pid` are known
    /// here (given once to [`VmWaits::switch_out`], and not forgotten).
    #[inline]
    pub fn knows(&self, pid: u32, walked: u64) -> bool {
        self.walked.contains_key(&(pid, walked))
    }

    /// Whether thread `tid` is in a monitor wait of JVM `pid` whose
    /// notifier is not known yet.
    #[inline]
    pub fn wants_notifier(&self, tid: u32, pid: u32) -> bool {
        !self.open.is_empty()
            && self.open.get(&tid).is_some_and(|w| {
                w.pid == pid && w.reason == WaitReason::MonitorWait && w.other_tid == 0
            })
    }

    /// Thread `tid`'s wait was ended by thread `by` (named `name`), the
    /// first to wake it.
    pub fn notified(&mut self, tid: u32, by: u32, name: &str) {
        if name.is_empty() {
            return;
        }
        let Some(pid) = self
            .open
            .get(&tid)
            .filter(|w| w.other_tid == 0)
            .map(|w| w.pid)
        else {
            return;
        };
        let other = self.symbol(pid, name);
        if let Some(w) = self.open.get_mut(&tid) {
            w.other_tid = by;
            w.other = other;
        }
    }

    /// Thread `tid` came onto a CPU (or exited) at `time`: its wait ended.
    #[inline]
    pub fn switched_in(&mut self, tid: u32, time: u64) {
        if self.open.is_empty() {
            return;
        }
        if let Some(mut w) = self.open.remove(&tid) {
            w.duration = time.saturating_sub(w.start);
            self.keep(w);
        }
    }

    fn keep(&mut self, w: JavaWait) {
        if self.done.len() < MAX_WAITS {
            self.done.push(w);
        } else {
            self.dropped += 1;
        }
    }

    fn symbol(&mut self, pid: u32, text: &str) -> u64 {
        if let Some(&id) = self.symbols.get(&(pid, text.to_string())) {
            return id;
        }
        let id = FIRST_ID + self.next_id;
        self.next_id += 1;
        self.symbols.insert((pid, text.to_string()), id);
        id
    }

    fn stack(&mut self, pid: u32, frames: Vec<JavaFrame>) -> u64 {
        let next = FIRST_ID + self.next_id;
        let id = *self.stacks.entry((pid, frames)).or_insert(next);
        if id == next {
            self.next_id += 1;
        }
        id
    }

    /// The records of every wait, the waits still open ending at `end`:
    /// texts, stacks, waits, then each JVM's head (`notes`: what is said of
    /// it).
    pub fn records(self, end: u64) -> Vec<Record> {
        self.window(0, end)
    }

    /// Forgets the waits that ended before `ns` (a flight recorder's ring
    /// no longer reaches them): a flight recorder keeps its window's waits
    /// only, for as long as it runs.
    pub fn forget_before(&mut self, ns: u64) {
        self.done.retain(|w| w.end() >= ns);
    }

    /// The records of the waits in the window from `from` to `end` (those
    /// that end in it or after, and begin before its end; the waits still
    /// open end at `end`), with the texts and stacks they name, then each
    /// JVM's head: [`VmWaits::records`] of a flight recorder's dump.
    pub fn window(&self, from: u64, end: u64) -> Vec<Record> {
        let in_window = |w: &JavaWait| w.end() >= from && w.start <= end;
        let mut waits: Vec<JavaWait> = self.done.iter().copied().filter(in_window).collect();
        waits.extend(self.open.values().map(|w| JavaWait {
            duration: end.saturating_sub(w.start),
            ..*w
        }));
        waits.retain(in_window);
        waits.sort_unstable_by_key(|w| (w.pid, w.tid, w.start));
        // The texts and stacks they name, each once.
        let stacks: FxHashMap<u64, (u32, &[JavaFrame])> = self
            .stacks
            .iter()
            .map(|((pid, frames), &id)| (id, (*pid, frames.as_slice())))
            .collect();
        let mut named: Vec<u64> = waits.iter().flat_map(|w| [w.object, w.other]).collect();
        let mut used: Vec<u64> = waits.iter().map(|w| w.stack).filter(|&s| s != 0).collect();
        used.sort_unstable();
        used.dedup();
        for id in &used {
            if let Some((_, frames)) = stacks.get(id) {
                named.extend(frames.iter().map(|f| f.method));
            }
        }
        named.sort_unstable();
        named.dedup();
        let mut out = Vec::with_capacity(named.len() + used.len() + waits.len());
        let mut symbols: Vec<(u64, u32, &str)> = self
            .symbols
            .iter()
            .filter(|(_, id)| named.binary_search(id).is_ok())
            .map(|((pid, text), &id)| (id, *pid, text.as_str()))
            .collect();
        symbols.sort_unstable();
        out.extend(symbols.into_iter().map(|(id, pid, text)| {
            Record::JavaSymbol(Box::new(JavaSymbol {
                pid,
                id,
                text: text.to_string(),
            }))
        }));
        out.extend(used.iter().filter_map(|id| {
            let (pid, frames) = stacks.get(id)?;
            Some(Record::JavaStack(Box::new(JavaStack {
                pid: *pid,
                id: *id,
                truncated: false,
                frames: frames.to_vec(),
            })))
        }));
        let mut counts: FxHashMap<u32, (u64, u64)> = FxHashMap::default();
        for w in &waits {
            let e = counts.entry(w.pid).or_default();
            e.0 += 1;
            e.1 += u64::from(w.stack == 0);
        }
        out.extend(waits.into_iter().map(Record::JavaWait));
        let mut jvms: Vec<_> = self.jvms.iter().collect();
        jvms.sort_unstable_by_key(|j| j.0);
        for (&pid, jvm) in jvms {
            let (n, without_stack) = counts.get(&pid).copied().unwrap_or_default();
            let mut threads: Vec<(u32, String)> =
                jvm.threads.iter().map(|(t, n)| (*t, n.clone())).collect();
            threads.sort_unstable();
            let mut notes = Vec::new();
            if self.dropped > 0 {
                notes.push(format!(
                    "{} waits not kept: more than {MAX_WAITS} in the window",
                    self.dropped
                ));
            }
            let from = jvm.from.max(from);
            out.push(Record::JvmWaits(Box::new(JvmWaits {
                pid,
                source: "vm".into(),
                waits: n,
                waits_without_stack: without_stack,
                recorded_from_ns: from,
                recorded_to_ns: end.max(from),
                threads,
                notes,
                ..JvmWaits::default()
            })));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::FrameKind;

    fn frame(method: &str) -> WalkedFrame {
        WalkedFrame {
            kind: FrameKind::Jit,
            method: method.into(),
            line: 7,
        }
    }

    #[test]
    fn the_monitors_say_first_then_the_innermost_frames() {
        let sleep = [frame("java.lang.Thread.sleep(long)"), frame("a.B.run()")];
        assert_eq!(reason(&sleep, None), Some(WaitReason::Sleep));
        assert_eq!(
            reason(&sleep, Some([0x10, 0, 0x20])),
            Some(WaitReason::MonitorEnter)
        );
        assert_eq!(
            reason(&sleep, Some([0, 0x10, 0])),
            Some(WaitReason::MonitorWait)
        );
        assert_eq!(reason(&sleep, Some([0, 0, 0])), Some(WaitReason::Sleep));
        let park = [
            frame("jdk.internal.misc.Unsafe.park(boolean, long)"),
            frame("java.util.concurrent.locks.LockSupport.park(java.lang.Object)"),
        ];
        assert_eq!(reason(&park, None), Some(WaitReason::Park));
        let read = [
            frame("sun.nio.ch.Net.poll(java.io.FileDescriptor, int, long)"),
            frame("sun.nio.ch.NioSocketImpl.park(java.io.FileDescriptor, int, long)"),
            frame("sun.nio.ch.NioSocketImpl.timedRead(java.io.FileDescriptor, byte[], int, int, long)"),
        ];
        assert_eq!(reason(&read, None), Some(WaitReason::SocketRead));
        let poll = [frame("sun.nio.ch.EPoll.wait(int, long, int, int)")];
        assert_eq!(reason(&poll, None), None);
        assert_eq!(reason(&[], None), None);
    }

    #[test]
    fn a_wait_runs_from_its_switch_out_to_its_next_switch_in() {
        let mut w = VmWaits::default();
        let frames = [frame("a.Ledger.post(long)"), frame("a.Main.run()")];
        let seen = Seen {
            monitors: Some([0x10, 0, 0x30]),
            object: Some("a.Ledger".into()),
            owner: Some((12, "worker-2".into())),
        };
        w.switch_out(
            (100, 11, "worker-1"),
            1_000,
            (1, Some(&frames)),
            &seen,
            |_| None,
        );
        w.switched_in(99, 1_500);
        w.switched_in(11, 2_000);
        // A switch-out no reason explains opens nothing (its stack met
        // before: its id alone).
        w.switch_out(
            (100, 11, "worker-1"),
            3_000,
            (1, None),
            &Seen::default(),
            |_| None,
        );
        let sleep = [frame("java.lang.Thread.sleep(long)")];
        w.switch_out(
            (100, 12, "worker-2"),
            4_000,
            (2, Some(&sleep)),
            &seen,
            |_| None,
        );
        // A stack whose frames were never at hand opens nothing.
        w.switch_out((100, 13, "worker-3"), 4_500, (3, None), &seen, |_| None);
        let recs = w.records(9_000);
        let text = |id: u64| {
            recs.iter()
                .find_map(|r| match r {
                    Record::JavaSymbol(s) if s.id == id => Some(s.text.clone()),
                    _ => None,
                })
                .unwrap()
        };
        let waits: Vec<JavaWait> = recs
            .iter()
            .filter_map(|r| match r {
                Record::JavaWait(w) => Some(*w),
                _ => None,
            })
            .collect();
        assert_eq!(waits.len(), 2, "{recs:?}");
        let (a, b) = (waits[0], waits[1]);
        assert_eq!(
            (a.tid, a.start, a.duration, a.reason),
            (11, 1_000, 1_000, WaitReason::MonitorEnter)
        );
        assert_eq!(text(a.object), "a.Ledger");
        assert_eq!((a.other_tid, text(a.other)), (12, "worker-2".into()));
        assert!(a.stack >= FIRST_ID);
        // Its own monitor's owner is no other thread; open at the end: the
        // window's end closes it.
        assert_eq!(
            (b.tid, b.start, b.duration, b.reason),
            (12, 4_000, 5_000, WaitReason::MonitorEnter)
        );
        assert_eq!((b.other_tid, b.other), (0, 0));
        let stack = recs
            .iter()
            .find_map(|r| match r {
                Record::JavaStack(s) if s.id == a.stack => Some(s.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(text(stack.frames[0].method), "a.Ledger.post");
        assert_eq!(
            (stack.frames[0].line, stack.frames[0].kind),
            (7, FrameKind::Jit)
        );
        let Some(Record::JvmWaits(h)) = recs.last() else {
            panic!("the head last: {recs:?}")
        };
        assert_eq!((h.pid, h.source.as_str(), h.waits), (100, "vm", 2));
        assert_eq!((h.recorded_from_ns, h.recorded_to_ns), (1_000, 9_000));
        // Every walked thread is named, a wait of its own or not.
        assert_eq!(
            h.threads,
            [
                (11, "worker-1".to_string()),
                (12, "worker-2".to_string()),
                (13, "worker-3".to_string())
            ]
        );
    }

    #[test]
    fn a_park_names_its_blocker_and_only_a_park_asks_for_it() {
        let mut w = VmWaits::default();
        let park = [frame("jdk.internal.misc.Unsafe.park(boolean, long)")];
        let sleep = [frame("java.lang.Thread.sleep(long)")];
        let seen = Seen::default();
        let blocker = || Some("java.util.concurrent.locks.ReentrantLock$NonfairSync".to_string());
        w.switch_out((7, 1, "a"), 10, (1, Some(&park)), &seen, |r| {
            assert_eq!(r, WaitReason::Park);
            blocker()
        });
        w.switch_out((7, 2, "b"), 10, (2, Some(&sleep)), &seen, |_| None);
        let recs = w.records(20);
        let object = recs
            .iter()
            .find_map(|r| match r {
                Record::JavaWait(w) if w.tid == 1 => Some(w.object),
                _ => None,
            })
            .unwrap();
        assert!(
            recs.iter().any(|r| matches!(r, Record::JavaSymbol(s)
            if s.id == object && s.text == "java.util.concurrent.locks.ReentrantLock$NonfairSync"))
        );
    }

    #[test]
    fn a_monitor_wait_names_the_thread_that_woke_it() {
        let mut w = VmWaits::default();
        let wait = [
            frame("java.lang.Object.wait(long)"),
            frame("a.Mailbox.take()"),
        ];
        let seen = Seen {
            monitors: Some([0, 0x10, 0]),
            object: Some("a.Mailbox".into()),
            owner: None,
        };
        w.switch_out((7, 1, "consumer"), 10, (1, Some(&wait)), &seen, |_| None);
        // Another JVM's thread, then the producer: the first of this JVM's.
        assert!(!w.wants_notifier(1, 8));
        assert!(w.wants_notifier(1, 7));
        w.notified(1, 2, "producer");
        assert!(!w.wants_notifier(1, 7));
        w.notified(1, 3, "later");
        w.switched_in(1, 20);
        let recs = w.records(30);
        let (other_tid, other) = recs
            .iter()
            .find_map(|r| match r {
                Record::JavaWait(w) => Some((w.other_tid, w.other)),
                _ => None,
            })
            .unwrap();
        assert_eq!(other_tid, 2);
        assert!(recs
            .iter()
            .any(|r| matches!(r, Record::JavaSymbol(s) if s.id == other && s.text == "producer")));
    }
}
