//! The Java frames of a thread that left a CPU, read while it is still
//! blocked: what `record --java vm` keeps for each switch-out stack copy
//! of a JVM's thread.
//!
//! A blocked thread's frames cannot change: the JVM keeps its last Java
//! frame in the thread's anchor, and its compiled frames' code cannot be
//! freed while they are on its stack. The recorder reads the thread's
//! count of runs (`sched_info.pcount`) at the switch-out, in the kernel;
//! [`BlockedThreads::walk`] reads the anchor and walks the frames, then
//! reads the count again (`/proc/PID/task/TID/schedstat`): the same count
//! means the thread did not come onto a CPU between the switch-out and the
//! walk's end, so the frames are exactly the switch-out's. A thread that
//! ran meanwhile is [`Found::RanFirst`], never a guess.
//!
//! Most walks need no such luck: where the kernel read the thread's anchor
//! at the switch-out with its stack copy, [`BlockedThreads::walk_copy`]
//! walks from it over the copy laid over the memory now
//! ([`crate::memory::Overlay`]), exact however late.
//!
//! Invariant: a [`Found::Walked`] walk began after the switch-out and
//! ended before the thread ran again; everything read is bounded (the
//! caches too: [`MAX_CACHED`] entries each).

use std::io::Read;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::fields::reference;
use crate::frames::{JavaFrame, Walk, Walker, MAX_CACHED};
use crate::memory::{Memory, MemoryError, Overlay};
use crate::monitors::MonitorLayout;
use crate::names::Names;
use crate::threads::{read_thread, Anchor, JavaThread};
use crate::{HotspotError, Jvm};

/// What [`BlockedThreads::walk`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The frames of the switch-out.
    Walked(Walk),
    /// The thread came onto a CPU again before the walk ended.
    RanFirst,
    /// Not a Java thread of this JVM, or one without a Java frame (the
    /// JVM's own threads, a thread blocked before its first Java call).
    NoJavaFrames,
    /// The thread's count of runs or memory could not be read (it exited).
    Failed(String),
}

/// One JVM's threads, walked at their switch-outs.
#[derive(Debug)]
pub struct BlockedThreads {
    jvm: Jvm,
    walker: Walker,
    names: Names,
    /// `JavaThread*` by tid, as last read from the JVM's thread list.
    threads: FxHashMap<u32, u64>,
    /// Tids the list did not hold (the JVM's own threads: GC, compiler
    /// and VM threads block too), and when: the list is read again for
    /// one of them only after [`NOT_JAVA_AGAIN`].
    not_java: FxHashMap<u32, Instant>,
    /// Each frame's text and line, by method and bytecode index.
    named: FxHashMap<(u64, Option<u32>), (String, u32)>,
    /// What names a monitor's owner, as the thread list was last read.
    owners: Owners,
    /// The compressed class pointers' base and shift, once read.
    narrow: Option<(u64, u32)>,
    /// Class names by `Klass*`.
    classes: FxHashMap<u64, String>,
    /// Whether each method is native, by `Method*`.
    natives: FxHashMap<u64, bool>,
    /// Fields' offsets by (the static holding their class, name), once
    /// looked for (`None`: not found).
    offsets: FxHashMap<(u64, &'static str), Option<u64>>,
    /// The compressed oops' base and shift, once read (`Some(None)`: not
    /// compressed, or unreadable).
    narrow_oop: Option<Option<(u64, u32)>>,
}

/// What names a monitor's owner: each Java thread's `JavaThread*`, owner
/// id (JDK 24 and later) and stack, as the thread list was last read.
#[derive(Debug, Default)]
struct Owners {
    by_word: FxHashMap<u64, u32>,
    /// (stack's low end, its base, tid).
    stacks: Vec<(u64, u64, u32)>,
    read_at: Option<Instant>,
}

impl Owners {
    fn read(mem: &impl Memory, m: &MonitorLayout, all: &[JavaThread]) -> Self {
        let mut o = Owners {
            read_at: Some(Instant::now()),
            ..Owners::default()
        };
        for t in all.iter().filter(|t| t.tid != 0) {
            match m.owner_id {
                Some(at) => {
                    if let Ok(id) = mem.u64(t.addr.wrapping_add(at)) {
                        o.by_word.insert(id, t.tid);
                    }
                }
                None => {
                    o.by_word.insert(t.addr, t.tid);
                }
            }
            if let Some((base_at, size_at)) = m.stack.filter(|_| m.owner_id.is_none()) {
                if let (Ok(base), Ok(size)) = (
                    mem.u64(t.addr.wrapping_add(base_at)),
                    mem.u64(t.addr.wrapping_add(size_at)),
                ) {
                    o.stacks.push((base.saturating_sub(size), base, t.tid));
                }
            }
        }
        o
    }

    fn find(&self, owner: u64) -> Option<u32> {
        self.by_word.get(&owner).copied().or_else(|| {
            self.stacks
                .iter()
                .find(|&&(low, base, _)| low <= owner && owner < base)
                .map(|s| s.2)
        })
    }
}

/// A native method's bit in its access flags (the class file format's).
const ACC_NATIVE: u16 = 0x0100;

/// The longest Java thread name read, bytes.
const MAX_NAME_BYTES: u32 = 1024;

/// How long a tid the JVM's thread list did not hold is believed not to
/// be a Java thread (a thread is in the list from before its first Java
/// frame, so only a native thread attached later comes in after it).
const NOT_JAVA_AGAIN: Duration = Duration::from_secs(1);

/// How often at most the thread list is read again for a monitor's owner
/// not found (a pool's threads start together, and block on each other at
/// once).
const OWNERS_AGAIN: Duration = Duration::from_millis(20);

/// The top of a stack copy compared with the stack now
/// ([`BlockedThreads::same_above`]).
const SAME_ABOVE_BYTES: usize = 256;

/// The most a thread's stack is taken to span where its JVM does not say
/// (HotSpot's largest default, the primordial thread's 8 MiB).
const MAX_THREAD_STACK: u64 = 8 << 20;

/// Set to `1` (tests, and a user who wants to see it), idleflow treats every
/// JVM's structures as unreadable, as it would an unknown layout: what
/// falls back to the flight recorder is then tried on a JVM at hand.
pub const REFUSE_ENV: &str = "IDLEFLOW_HOTSPOT_REFUSE";

impl BlockedThreads {
    /// Reads the tables of the JVM `pid` and walks its threads: `Ok` if
    /// and only if idleflow can name its frames from its structures
    /// (`Tables(NoLibjvm)`: not a HotSpot JVM).
    pub fn open(pid: u32) -> Result<Self, HotspotError> {
        let jvm = Jvm::open(pid)?;
        if std::env::var_os(REFUSE_ENV).is_some_and(|v| v == "1") {
            return Err(HotspotError::Refused);
        }
        Ok(Self::new(jvm)?)
    }

    /// Walks the threads of `jvm`.
    pub fn new(jvm: Jvm) -> Result<Self, MemoryError> {
        let walker = jvm.walker()?;
        Ok(Self {
            jvm,
            walker,
            names: Names::default(),
            threads: FxHashMap::default(),
            not_java: FxHashMap::default(),
            named: FxHashMap::default(),
            owners: Owners::default(),
            narrow: None,
            classes: FxHashMap::default(),
            natives: FxHashMap::default(),
            offsets: FxHashMap::default(),
            narrow_oop: None,
        })
    }

    /// The JVM.
    pub fn jvm(&self) -> &Jvm {
        &self.jvm
    }

    /// The Java frames of thread `tid`, which left a CPU with its user
    /// stack pointer at `sp` after coming onto one `runs` times.
    pub fn walk(&mut self, tid: u32, sp: u64, runs: u64) -> Found {
        let Some(thread) = self.thread(tid) else {
            return Found::NoJavaFrames;
        };
        let Some(anchor) = thread.anchor else {
            return Found::NoJavaFrames;
        };
        // The Java frames are the switch-out's native frames' callers: an
        // anchor below the stack pointer of then is a later one.
        if anchor.sp < sp {
            return self.checked(tid, runs, Found::RanFirst);
        }
        let walk = self.jvm.walk_with(&mut self.walker, anchor);
        self.checked(tid, runs, Found::Walked(walk))
    }

    /// The Java frames of thread `tid` from `anchor`, its last Java frame
    /// read in the kernel at its switch-out, with its user stack at `sp` as
    /// copied then (`bytes`) laid over its memory now: exact however long
    /// ago the switch-out was, for the frames inside the copy. Its stack
    /// above the copy is read as it is now only if `still_blocked` (the
    /// thread has not run since) or the copy's top is what the stack holds
    /// there now; else the walk ends where the copy does (`WalkEnd::Lost`),
    /// the frames inside it kept.
    pub fn walk_copy(
        &mut self,
        tid: u32,
        anchor: Anchor,
        (sp, bytes): (u64, &[u8]),
        still_blocked: bool,
    ) -> Found {
        if anchor.sp == 0 {
            return Found::NoJavaFrames;
        }
        if anchor.sp < sp {
            return Found::Failed(format!(
                "anchor sp {:#x} below the stack pointer {sp:#x}",
                anchor.sp
            ));
        }
        let stale_below = if still_blocked || self.same_above(sp, bytes) {
            None
        } else {
            // Its stack's base, or (a JVM whose tables do not say) where
            // no thread's stack reaches.
            Some(
                self.stack_base(tid)
                    .unwrap_or(sp.saturating_add(MAX_THREAD_STACK)),
            )
        };
        let mem = Overlay {
            base: self.jvm.memory(),
            start: sp,
            bytes,
            stale_below,
        };
        Found::Walked(self.walker.walk(&mem, &self.jvm.layout, anchor))
    }

    /// Where thread `tid`'s JVM keeps its frame anchor's sp, fp and pc,
    /// then its pending and waiting monitors (0, 0 where the JVM's tables
    /// do not say) and the offset of a monitor's owner word: what the eBPF
    /// programs read at its switch-outs (`None`: not one of its Java
    /// threads).
    pub fn anchor_at(&mut self, tid: u32) -> Option<[u64; 11]> {
        let addr = match self.threads.get(&tid) {
            Some(&a) => a,
            None => self.thread(tid)?.addr,
        };
        let l = self.jvm.layout.threads;
        let [pending, waiting, owner] = self
            .jvm
            .monitors
            .and_then(|m| m.words_at(addr))
            .unwrap_or_default();
        let blocker = self.blocker_words(addr).unwrap_or_default();
        Some([
            addr.checked_add(l.last_java_sp)?,
            addr.checked_add(l.last_java_fp)?,
            addr.checked_add(l.last_java_pc)?,
            pending,
            waiting,
            owner,
            blocker[0],
            blocker[1],
            blocker[2],
            blocker[3],
            blocker[4],
        ])
    }

    /// Where the programs find the class of the thread at `addr`'s park
    /// blocker: its `_threadObj` handle's address, `parkBlocker`'s offset,
    /// the compressed oops' base and shift, the class word's offset.
    fn blocker_words(&mut self, addr: u64) -> Option<[u64; 5]> {
        let m = self.jvm.monitors?;
        let offset = self.field_offset(m.thread_klass?, "parkBlocker")?;
        let (base, shift) = self.narrow_oop()?;
        Some([
            addr.checked_add(m.thread_obj?)?,
            offset,
            base,
            u64::from(shift),
            m.klass_word,
        ])
    }

    /// The class whose compressed class word is `narrow` (what the
    /// programs read of a park blocker), each class's name remembered.
    pub fn narrow_class(&mut self, narrow: u64) -> Option<String> {
        let l = self.jvm.monitors?;
        let (base, shift) = match self.narrow {
            Some(n) => n,
            None => {
                let n = crate::monitors::narrow_klass(self.jvm.memory(), &l)?;
                self.narrow = Some(n);
                n
            }
        };
        let n = narrow & 0xffff_ffff;
        (n != 0).then_some(())?;
        self.klass_class(base.wrapping_add(n << shift))
    }

    /// The name of the class at `klass`, remembered.
    fn klass_class(&mut self, klass: u64) -> Option<String> {
        if let Some(name) = self.classes.get(&klass) {
            return Some(name.clone());
        }
        let name = crate::monitors::klass_name(self.jvm.memory(), &self.jvm.layout.methods, klass)?;
        if self.classes.len() >= MAX_CACHED {
            self.classes.clear();
        }
        self.classes.insert(klass, name.clone());
        Some(name)
    }

    /// The class of the object whose monitor is at `monitor`
    /// ([`crate::monitors::object_class`]), each class's name remembered
    /// (a class's metadata stays where it is while it is loaded).
    pub fn object_class(&mut self, monitor: u64) -> Option<String> {
        let l = self.jvm.monitors?;
        let object = crate::monitors::monitor_object(self.jvm.memory(), &l, monitor)?;
        self.class_of(object)
    }

    /// The class of the object thread `tid` parks on now (its
    /// `Thread.parkBlocker`, which `LockSupport.park(blocker)` sets for the
    /// park's length: a lock's `ReentrantLock$NonfairSync`, a queue's
    /// `AbstractQueuedSynchronizer$ConditionObject`), read live: `None`
    /// where it has none (or no longer), or it cannot be read.
    pub fn park_blocker_class(&mut self, tid: u32) -> Option<String> {
        let m = self.jvm.monitors?;
        let offset = self.field_offset(m.thread_klass?, "parkBlocker")?;
        let thread = self.thread_object(&m, tid)?;
        let narrow_oop = self.narrow_oop();
        let mem = self.jvm.memory();
        let at = thread.checked_add(offset)?;
        // A compressed reference first; a whole one where the JVM does not
        // compress them (its heap over 32 GB).
        let tries = [
            narrow_oop.map(|n| reference(mem, at, Some(n))),
            Some(reference(mem, at, None)),
        ];
        tries
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|object| self.class_of(object))
    }

    /// Thread `tid`'s Java name (`Thread.getName()`), read from its
    /// `java.lang.Thread` and that String's bytes (`None`: it cannot be
    /// read; a JVM run without compressed oops or class pointers, whose
    /// layout of arrays this does not know).
    pub fn java_name(&mut self, tid: u32) -> Option<String> {
        let m = self.jvm.monitors?;
        let name_at = self.field_offset(m.thread_klass?, "name")?;
        let value_at = self.field_offset(m.string_klass?, "value")?;
        let coder_at = self.field_offset(m.string_klass?, "coder")?;
        let narrow = Some(self.narrow_oop()?);
        let thread = self.thread_object(&m, tid)?;
        let mem = self.jvm.memory();
        let string = reference(mem, thread.checked_add(name_at)?, narrow)?;
        let bytes = reference(mem, string.checked_add(value_at)?, narrow)?;
        let mut coder = [0u8];
        mem.read(string.checked_add(coder_at)?, &mut coder).ok()?;
        // A byte[] with a compressed class word: its length after it, its
        // elements from the next 8-byte boundary.
        let len_at = m.klass_word + 4;
        let len = mem
            .u32(bytes.checked_add(len_at)?)
            .ok()?
            .min(MAX_NAME_BYTES);
        let mut data = vec![0u8; len as usize];
        mem.read(bytes.checked_add((len_at + 4 + 7) & !7)?, &mut data)
            .ok()?;
        let name = match coder[0] {
            0 => data.iter().map(|&b| char::from(b)).collect(),
            1 => {
                let units: Vec<u16> = data
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect();
                String::from_utf16_lossy(&units)
            }
            _ => return None,
        };
        (!name.is_empty()).then_some(name)
    }

    /// Thread `tid`'s `java.lang.Thread`.
    fn thread_object(&mut self, m: &MonitorLayout, tid: u32) -> Option<u64> {
        let addr = match self.threads.get(&tid) {
            Some(&a) => a,
            None => self.thread(tid)?.addr,
        };
        let mem = self.jvm.memory();
        let slot = mem.u64(addr.checked_add(m.thread_obj?)?).ok()?;
        mem.u64(slot).ok().filter(|&t| t != 0)
    }

    /// The compressed oops' base and shift (`None`: unreadable).
    fn narrow_oop(&mut self) -> Option<(u64, u32)> {
        if let Some(n) = self.narrow_oop {
            return n;
        }
        let f = self.jvm.fields?;
        let mem = self.jvm.memory();
        let n = (|| {
            let base = mem.u64(f.narrow_oop.0).ok()?;
            let shift = mem.u32(f.narrow_oop.1).ok()?;
            (shift < 32).then_some((base, shift))
        })();
        self.narrow_oop = Some(n);
        n
    }

    /// Where the class whose Klass* the static at `klass_at` holds keeps
    /// its field `name` in its objects, remembered.
    fn field_offset(&mut self, klass_at: u64, name: &'static str) -> Option<u64> {
        if let Some(&o) = self.offsets.get(&(klass_at, name)) {
            return o;
        }
        let o = (|| {
            let f = self.jvm.fields?;
            let mem = self.jvm.memory();
            let klass = mem.u64(klass_at).ok().filter(|&k| k != 0)?;
            let methods = &self.jvm.layout.methods;
            crate::fields::field_offset(mem, &f, methods, klass, name, methods.unsigned5_excluded)
        })();
        self.offsets.insert((klass_at, name), o);
        o
    }

    /// The class of the object at `object`, each class's name remembered.
    fn class_of(&mut self, object: u64) -> Option<String> {
        let l = self.jvm.monitors?;
        let narrow = match self.narrow {
            Some(n) => n,
            None => {
                let n = crate::monitors::narrow_klass(self.jvm.memory(), &l)?;
                self.narrow = Some(n);
                n
            }
        };
        crate::monitors::klasses_at(self.jvm.memory(), &l, narrow, object)?
            .into_iter()
            .flatten()
            .find_map(|klass| self.klass_class(klass))
    }

    /// The thread (tid) a monitor's owner word `owner` names: a
    /// `JavaThread*`, a stack lock on its stack, or its owner id (`None`:
    /// no owner, an anonymous one, or a thread not found). The threads'
    /// owner ids and stacks are read when the list is, and again at most
    /// every [`OWNERS_AGAIN`] for an owner not found.
    pub fn owner_tid(&mut self, owner: u64) -> Option<u32> {
        // NO_OWNER, ANONYMOUS_OWNER, DEFLATER_MARKER.
        if owner <= 2 || self.jvm.monitors.is_none() {
            return None;
        }
        if let Some(tid) = self.owners.find(owner) {
            return Some(tid);
        }
        if self
            .owners
            .read_at
            .is_some_and(|at| at.elapsed() < OWNERS_AGAIN)
        {
            return None;
        }
        self.thread_ids();
        self.owners.find(owner)
    }

    /// The tids of its Java threads now, remembered for [`Self::anchor_at`].
    pub fn thread_ids(&mut self) -> Vec<u32> {
        let Ok(all) = self.jvm.threads() else {
            return Vec::new();
        };
        if self.threads.len() + all.len() >= MAX_CACHED {
            self.threads.clear();
        }
        if let Some(m) = self.jvm.monitors {
            self.owners = Owners::read(self.jvm.memory(), &m, &all);
        }
        all.iter()
            .filter(|t| t.tid != 0)
            .map(|t| {
                self.threads.insert(t.tid, t.addr);
                t.tid
            })
            .collect()
    }

    /// `found`, if thread `tid` has still come onto a CPU `runs` times.
    fn checked(&self, tid: u32, runs: u64, found: Found) -> Found {
        match run_count(self.jvm.pid(), tid) {
            Ok(now) if now == runs => found,
            Ok(_) => Found::RanFirst,
            Err(e) => Found::Failed(e),
        }
    }

    /// Java thread `tid` now, read anew (its `JavaThread*` remembered; the
    /// JVM's list read again for a thread not seen before, or one whose
    /// structure no longer names it).
    /// Whether the top of a stack copy (`bytes` at `sp`) is what the stack
    /// holds there now: a thread that ran since and is back where it was
    /// (a loop that waits again) left its outer frames as they were; one
    /// that returned past the copy's end and called elsewhere wrote new
    /// frames (return addresses, saved frame pointers) over that part.
    fn same_above(&self, sp: u64, bytes: &[u8]) -> bool {
        let n = bytes.len().min(SAME_ABOVE_BYTES);
        if n < SAME_ABOVE_BYTES {
            return false;
        }
        let tail = &bytes[bytes.len() - n..];
        let mut now = vec![0u8; n];
        let at = sp + (bytes.len() - n) as u64;
        self.jvm.memory().read(at, &mut now).is_ok() && now == tail
    }

    /// Where thread `tid`'s stack begins (its highest address), from its
    /// `JavaThread::_stack_base`.
    fn stack_base(&mut self, tid: u32) -> Option<u64> {
        let off = self.jvm.layout.threads.stack_base?;
        let addr = match self.threads.get(&tid) {
            Some(&a) => a,
            None => self.thread(tid)?.addr,
        };
        self.jvm.memory().u64(addr + off).ok().filter(|&b| b != 0)
    }

    fn thread(&mut self, tid: u32) -> Option<JavaThread> {
        let mem = self.jvm.memory();
        let l = &self.jvm.layout.threads;
        if let Some(&addr) = self.threads.get(&tid) {
            if let Some(t) = read_thread(mem, l, self.jvm.states(), addr).filter(|t| t.tid == tid) {
                return Some(t);
            }
        }
        if self
            .not_java
            .get(&tid)
            .is_some_and(|at| at.elapsed() < NOT_JAVA_AGAIN)
        {
            return None;
        }
        let all = self.jvm.threads().ok()?;
        if self.threads.len() + all.len() >= MAX_CACHED {
            self.threads.clear();
        }
        if self.not_java.len() >= MAX_CACHED {
            self.not_java.clear();
        }
        let mut found = None;
        for t in all {
            self.threads.insert(t.tid, t.addr);
            if t.tid == tid {
                found = Some(t);
            }
        }
        if found.is_none() {
            self.not_java.insert(tid, Instant::now());
        }
        found
    }

    /// Whether the method at `method` is a native one (`ACC_NATIVE` in its
    /// access flags, the class file's bit), remembered.
    pub fn is_native(&mut self, method: u64) -> bool {
        if let Some(&n) = self.natives.get(&method) {
            return n;
        }
        let at = method.wrapping_add(self.jvm.layout.methods.access_flags);
        let native = self
            .jvm
            .memory()
            .u16(at)
            .is_ok_and(|flags| flags & ACC_NATIVE != 0);
        if self.natives.len() >= MAX_CACHED {
            self.natives.clear();
        }
        self.natives.insert(method, native);
        native
    }

    /// Frame `f`'s method as HotSpot's perf map names it
    /// (`a.b.C.name(int)`) and the source line of its bytecode index (0:
    /// not known); `None` where its metadata could not be read.
    /// Remembered per method and bytecode index (metadata stays where it
    /// is while its class is loaded), as the method's names are.
    pub fn name(&mut self, f: &JavaFrame) -> Option<(String, u32)> {
        let key = (f.method, f.bci);
        if let Some((text, line)) = self.named.get(&key) {
            return Some((text.clone(), *line));
        }
        let name = self.jvm.method_name_with(&mut self.names, f.method)?;
        let text = name.perf_map_name();
        // A frame at its method's entry (no bytecode index: a synchronized
        // method entering its monitor) is at its first line, as the flight
        // recorder names it; a native method has no line.
        let line = self.jvm.line(f.method, f.bci.unwrap_or(0)).unwrap_or(0);
        if self.named.len() >= MAX_CACHED {
            self.named.clear();
        }
        self.named.insert(key, (text.clone(), line));
        Some((text, line))
    }
}

/// The times thread `tid` of `pid` came onto a CPU so far: the third field
/// of `/proc/PID/task/TID/schedstat` (`sched_info.pcount`, the count the
/// recorder reads in the kernel).
pub fn run_count(pid: u32, tid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(256).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    text.split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{path}: no run count in {text:?}"))
}
