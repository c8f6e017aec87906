//! One merged path per idle-causing dispatch (`ARCHITECTURE.md`, "One
//! attribution model"): every source that says what a thread was doing
//! when its leaving made a CPU idle meets here, per dispatch, never per
//! recording.
//!
//! While the recording is read ([`crate::pass::idle_paths::IdlePathsAcc`]), each dispatch to idle
//! is keyed by what covers *it*: its thread, the kernel and user stacks
//! taken at its switch-out, the tree agent's node it left in, and the
//! flight-recorder wait that contains it (its stack group, reason and
//! object). When the report is built ([`resolve`]), each key becomes one
//! path, innermost frame first: the kernel's frames from its wait outward,
//! then the user stack's native frames down to where the JVM's frames meet
//! the Java code, then the Java frames of the best source that covers the
//! dispatch (the tree node, else the wait's exact stack, else the JIT and
//! interpreter frames the perf map named), then the native frames outside
//! the Java code (the thread's entry). Each frame keeps its kind and the
//! source that named it; reason, object, holder and notifier are the
//! dispatch's attributes. Paths are then summed by (process, reason,
//! object, frames), most idle first ([`IdlePathsSection`]), and the same
//! resolved rows give the folded stacks of the flame graph ([`MergedPaths`]).
//!
//! Invariants: memory is one entry per distinct key (thread × stacks ×
//! node × wait path), never per dispatch; the paths' idle plus what
//! [`NotInPaths`] lists adds up to the CPUs' idle time in the window;
//! idleflow's own threads are never a path.

use idleflow_format::WaitReason;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::pass::windows::Series;
use crate::pass::Analysis;
use crate::path::{Fold, Folded, FrameKind, PathFrame};
use crate::reasons::Reason;
use crate::share::pct;

pub(crate) use crate::pass::idle_paths::RowKey;

mod causes;
mod resolve;

use causes::causes;
pub use causes::Cause;

use idleflow_format::names::hotspot_internal;
use resolve::names_java;
pub(crate) use resolve::resolve_key;
pub use resolve::{resolve, resolve_path, splice, ResolvedRow};

/// Threads of one name (or one pool's name pattern) on a path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathThreads {
    /// The thread's name, or the pool's pattern (`worker-*`).
    pub name: String,
    /// How many distinct threads.
    pub count: u64,
    /// Dispatches to idle they caused on the path.
    pub dispatches: u64,
}

/// Another thread the JVM named on a path (the previous owner of a monitor,
/// the notifier of a wait), with the dispatches that named it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtherThread {
    /// Its name, or its pool's pattern.
    pub name: String,
    /// Dispatches to idle of this path that named it.
    pub dispatches: u64,
}

/// One merged idle-causing path (JSON `idle_paths.paths`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdlePath {
    /// The process's name.
    pub process: String,
    /// Why the threads waited: the JVM's reason (`monitor enter`, `park`,
    /// `sleep`, …) where a flight-recorder wait covers the dispatches, else
    /// the kernel's wait in words (`futex wait`, `pipe read`, …), else the
    /// thread's state.
    pub reason: Reason,
    /// What they waited on (monitor or parked-on class, address, path).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// The monitor's previous owners (monitor enter), most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<OtherThread>,
    /// The threads that notified the wait (monitor wait), most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notified_by: Vec<OtherThread>,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// Its share of all CPUs' idle time in the window, %.
    pub share_pct: f64,
    /// Dispatches to idle through it.
    pub dispatches: u64,
    /// The threads (or pools) that left there, most dispatches first.
    pub threads: Vec<PathThreads>,
    /// The frames, innermost (the kernel's wait) first.
    pub frames: Vec<PathFrame>,
    /// The index in `frames` of the first frame of the program's own code
    /// (not the kernel's, a system library's, the JVM's or the JDK's).
    pub program_frame: Option<usize>,
    /// All its threads are the JVM's own (GC, JIT compilers, the VM
    /// thread): HotSpot at work, not the program's code.
    pub jvm_internal: bool,
    /// Some of its dispatches were in a JVM thread that runs Java code and
    /// none of its frames names Java code.
    #[serde(skip)]
    pub java_unnamed: bool,
    /// Of those, some had a user stack that ended before any Java frame
    /// (compiled Java code without frame pointers stops the unwinder).
    #[serde(skip)]
    pub java_stack_stops: bool,
    /// Its idle per time window, where the analysis split it
    /// ([`crate::AnalysisOptions::windows`]).
    #[serde(skip)]
    pub windows: Series,
}

impl IdlePath {
    /// The first frame of the program's own code, if any.
    pub fn program(&self) -> Option<&PathFrame> {
        self.program_frame.and_then(|i| self.frames.get(i))
    }

    /// `worker-* ×8`: a thread row's name with the number of distinct
    /// threads where there are several.
    pub fn process_threads(&self, t: &PathThreads) -> String {
        if t.count > 1 {
            format!("{} ×{}", t.name, t.count)
        } else {
            t.name.clone()
        }
    }

    /// The path's kernel wait (its innermost kernel frame), if any.
    pub fn kernel_wait(&self) -> Option<&str> {
        self.frames
            .first()
            .filter(|f| f.frame.kind == FrameKind::Kernel)
            .map(|f| f.frame.name.as_str())
    }
}

/// The idle of the window that no path shows, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NotInPaths {
    /// Idle no thread's leaving opened: a CPU already idle when the window
    /// began, or after a break in its record stream, ns.
    pub no_cause_ns: u64,
    /// Idle after idleflow's own threads left (the recorder, the flight
    /// recorders it started, the agents), ns.
    pub idleflow_ns: u64,
    /// Idle after threads of processes the report does not show (other
    /// programs on the machine), ns.
    pub other_processes_ns: u64,
}

/// Another process whose threads' leaving made CPUs idle, one of those
/// the report does not show (JSON `idle_paths.other_processes`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtherProcess {
    /// The process's name; kernel threads and numbered names by their
    /// pattern (`kworker`, `worker-*`).
    pub process: String,
    /// Idle after its threads left, ns, and its share of all CPUs' idle, %.
    pub idle_ns: u64,
    pub share_pct: f64,
    /// The reason with the most of that idle.
    pub reason: Reason,
}

/// Other processes shown by name, at most.
const OTHER_PROCESSES: usize = 3;

/// The name other processes are summed under: a kernel thread's name up to
/// its `/` (`kworker/1:0-events` → `kworker`), a number that ends a name
/// as `*`.
fn process_pattern(name: &str) -> String {
    crate::path::thread_pattern(name.split('/').next().unwrap_or(name))
}

/// The Java threads' share of the paths (recordings with JVMs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JavaCoverage {
    /// Idle after Java threads of the JVMs (HotSpot's own threads aside)
    /// left a CPU, while their JVM's flight recorder ran or with no
    /// flight recorder at all, ns.
    pub java_idle_ns: u64,
    /// Of that, on paths with named Java frames, ns.
    pub named_ns: u64,
    /// `named_ns` as % of `java_idle_ns`.
    pub named_pct: f64,
    /// Idle after Java threads left while their JVM's flight recorder did
    /// not run yet (or any more), ns: not in `java_idle_ns`.
    pub before_recorder_ns: u64,
    /// Idle after HotSpot's own threads (GC, compiler, VM thread) left, ns.
    pub jvm_internal_ns: u64,
}

/// The merged idle-causing paths of a report (JSON `idle_paths`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IdlePathsSection {
    /// All CPUs' idle time in the window, ns.
    pub idle_ns: u64,
    /// Of that, after a thread of a path left, ns.
    pub explained_ns: u64,
    /// `explained_ns` as % of `idle_ns`.
    pub explained_pct: f64,
    /// Dispatches to idle on the paths.
    pub dispatches: u64,
    /// The rest of `idle_ns`.
    pub not_in_paths: NotInPaths,
    /// The processes with the most of `not_in_paths.other_processes_ns`,
    /// most first (at most three).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_processes: Vec<OtherProcess>,
    /// How much of the Java threads' idle has Java frames (with JVMs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub java: Option<JavaCoverage>,
    /// Why a source is missing for some paths (a JVM without a flight
    /// recorder, JIT frames without names, …), one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The causes: the paths summed by process, reason, pool and program
    /// frame, most idle first (the headline's lines).
    pub causes: Vec<Cause>,
    /// Paths, most idle first.
    pub paths: Vec<IdlePath>,
}

/// (others grouped by name pattern) most first.
fn others_rows(m: FxHashMap<String, u64>) -> Vec<OtherThread> {
    let mut v: Vec<OtherThread> = m
        .into_iter()
        .map(|(name, dispatches)| OtherThread { name, dispatches })
        .collect();
    v.sort_by(|x, y| y.dispatches.cmp(&x.dispatches).then(x.name.cmp(&y.name)));
    v
}

type GroupKey = (String, Reason, String, Vec<PathFrame>);

#[derive(Default)]
struct Group {
    /// The frames as they ran (JIT-compiled, inlined, interpreted) with
    /// the idle of each: the path shows the one with the most.
    variants: FxHashMap<Vec<PathFrame>, u64>,
    dispatches: u64,
    idle_ns: u64,
    windows: Series,
    threads: FxHashMap<String, (FxHashSet<u32>, u64)>,
    others: FxHashMap<String, u64>,
    monitor_wait: bool,
    java_unnamed: bool,
    java_stack_stops: bool,
    /// Rows of threads other than HotSpot's own.
    not_internal: bool,
}

impl IdlePathsSection {
    /// The idle after other processes' threads, % of all idle, and those
    /// processes of at least 0.05 % (what the headline names).
    pub fn after_other_processes(&self) -> (f64, impl Iterator<Item = &OtherProcess>) {
        let share =
            self.not_in_paths.other_processes_ns as f64 * 100.0 / self.idle_ns.max(1) as f64;
        (
            share,
            self.other_processes.iter().filter(|p| p.share_pct >= 0.05),
        )
    }

    /// The merged paths of `a`, with `total_idle_ns` the CPUs' idle in the
    /// window.
    pub fn new(a: &Analysis, total_idle_ns: u64) -> Self {
        let rows = resolve(a, false);
        let jvms: FxHashSet<u32> = a.jvm_pids().into_iter().collect();
        let mut groups: FxHashMap<GroupKey, Group> = FxHashMap::default();
        let mut java = JavaCoverage::default();
        for row in rows {
            let (pid, thread) = a
                .names
                .get(&row.tid)
                .cloned()
                .unwrap_or_else(|| (0, format!("tid {}", row.tid)));
            let java_thread = jvms.contains(&pid) && !hotspot_internal(&thread);
            let named = names_java(&row.frames);
            // A user stack was taken (and named no Java frame, if `!named`).
            let user_stack = row.frames.iter().any(|f| {
                matches!(
                    f.frame.kind,
                    FrameKind::Native | FrameKind::Jit | FrameKind::Interpreted
                )
            });
            if jvms.contains(&pid) {
                if !java_thread {
                    java.jvm_internal_ns = java.jvm_internal_ns.saturating_add(row.idle_ns);
                } else {
                    java.java_idle_ns = java.java_idle_ns.saturating_add(row.idle_ns);
                    if named {
                        java.named_ns = java.named_ns.saturating_add(row.idle_ns);
                    }
                }
            }
            // The same code is one path however the JIT ran it.
            let key = row.frames.iter().map(same_code).collect();
            let g = groups
                .entry((row.process, row.reason, row.object, key))
                .or_default();
            let v = g.variants.entry(row.frames).or_default();
            *v = v.saturating_add(row.idle_ns);
            g.dispatches += row.dispatches;
            g.idle_ns = g.idle_ns.saturating_add(row.idle_ns);
            g.windows.merge(&row.windows);
            let t = g
                .threads
                .entry(crate::path::thread_pattern(&thread))
                .or_default();
            t.0.insert(row.tid);
            t.1 += row.dispatches;
            for (name, n) in row.others {
                *g.others
                    .entry(crate::path::thread_pattern(&name))
                    .or_default() += n;
            }
            g.monitor_wait |= row.jvm_reason == Some(WaitReason::MonitorWait);
            g.java_unnamed |= java_thread && !named;
            g.java_stack_stops |= java_thread && !named && user_stack;
            g.not_internal |= !(jvms.contains(&pid) && hotspot_internal(&thread));
        }
        // The flight recorders' own count of what came before they ran,
        // for the same threads as `java_idle_ns` (not HotSpot's own).
        java.before_recorder_ns = a
            .java_idle
            .unrecorded_by_thread
            .iter()
            .filter(|(tid, _)| {
                a.names
                    .get(tid)
                    .is_some_and(|(pid, name)| jvms.contains(pid) && !hotspot_internal(name))
            })
            .fold(0u64, |sum, (_, ns)| sum.saturating_add(*ns));
        java.java_idle_ns = java.java_idle_ns.saturating_sub(java.before_recorder_ns);
        java.named_ns = java.named_ns.min(java.java_idle_ns);
        java.named_pct = pct(java.named_ns, java.java_idle_ns);
        let mut paths: Vec<(IdlePath, FxHashMap<String, FxHashSet<u32>>)> = groups
            .into_iter()
            .map(|((process, reason, object, _), g)| {
                let frames = g
                    .variants
                    .into_iter()
                    .max_by(|x, y| x.1.cmp(&y.1).then_with(|| y.0.cmp(&x.0)))
                    .map(|(frames, _)| frames)
                    .unwrap_or_default();
                let mut tids = FxHashMap::default();
                let mut threads: Vec<PathThreads> = g
                    .threads
                    .into_iter()
                    .map(|(name, (set, dispatches))| {
                        let count = set.len() as u64;
                        tids.insert(name.clone(), set);
                        PathThreads {
                            name,
                            count,
                            dispatches,
                        }
                    })
                    .collect();
                threads.sort_by(|x, y| y.dispatches.cmp(&x.dispatches).then(x.name.cmp(&y.name)));
                let others = others_rows(g.others);
                let (held_by, notified_by) = if g.monitor_wait {
                    (Vec::new(), others)
                } else {
                    (others, Vec::new())
                };
                let program_frame = frames.iter().position(|f| !f.runtime);
                let path = IdlePath {
                    process,
                    reason,
                    object,
                    held_by,
                    notified_by,
                    idle_ns: g.idle_ns,
                    share_pct: pct(g.idle_ns, total_idle_ns),
                    dispatches: g.dispatches,
                    threads,
                    frames,
                    program_frame,
                    jvm_internal: !g.not_internal,
                    java_unnamed: g.java_unnamed,
                    java_stack_stops: g.java_stack_stops,
                    windows: g.windows,
                };
                (path, tids)
            })
            .collect();
        paths.sort_by(|(x, _), (y, _)| {
            y.idle_ns
                .cmp(&x.idle_ns)
                .then_with(|| y.dispatches.cmp(&x.dispatches))
                .then_with(|| x.frames.cmp(&y.frames))
        });
        let (paths, tids): (Vec<IdlePath>, Vec<_>) = paths.into_iter().unzip();
        let causes = causes(&paths, &tids);
        let explained_ns = paths.iter().fold(0u64, |s, p| s.saturating_add(p.idle_ns));
        let dispatches = crate::share::saturating_sum(paths.iter().map(|p| p.dispatches));
        // What no path shows: every cause's idle is in a.causes.
        let (mut tool, mut other, mut caused) = (0u64, 0u64, 0u64);
        for ((_, tid), c) in &a.causes {
            caused = caused.saturating_add(c.idle_ns);
            if a.tool_tids.contains(tid) {
                tool = tool.saturating_add(c.idle_ns);
            } else if !a.shows(*tid) {
                other = other.saturating_add(c.idle_ns);
            }
        }
        let other_processes = other_processes(a, total_idle_ns);
        IdlePathsSection {
            idle_ns: total_idle_ns,
            explained_ns,
            explained_pct: pct(explained_ns, total_idle_ns),
            dispatches,
            not_in_paths: NotInPaths {
                no_cause_ns: total_idle_ns.saturating_sub(caused),
                idleflow_ns: tool,
                other_processes_ns: other,
            },
            other_processes,
            java: (!jvms.is_empty()).then_some(java),
            notes: Vec::new(),
            causes,
            paths,
        }
    }
}

/// A frame as the key of the code it is: a Java frame's kind (JIT-compiled,
/// inlined, interpreted) left out.
fn same_code(f: &PathFrame) -> PathFrame {
    let mut f = f.clone();
    if matches!(
        f.frame.kind,
        FrameKind::Jit | FrameKind::Inlined | FrameKind::Interpreted
    ) {
        f.frame.kind = FrameKind::Java;
    }
    f
}

/// The processes the report does not show whose threads' leaving made the
/// most idle, with the reason of most of it.
fn other_processes(a: &Analysis, total_idle_ns: u64) -> Vec<OtherProcess> {
    let mut by: FxHashMap<String, (u64, FxHashMap<Reason, u64>)> = FxHashMap::default();
    for (k, r) in &a.idle_paths.rows {
        if a.tool_tids.contains(&k.tid) || a.shows(k.tid) {
            continue;
        }
        let row = resolve::resolve_row(a, k, r);
        let (idle, reasons) = by.entry(process_pattern(&row.process)).or_default();
        *idle = idle.saturating_add(row.idle_ns);
        let r = reasons.entry(row.reason).or_default();
        *r = r.saturating_add(row.idle_ns);
    }
    let mut out: Vec<OtherProcess> = by
        .into_iter()
        .map(|(process, (idle_ns, reasons))| {
            let reason = reasons
                .into_iter()
                .max_by(|x, y| x.1.cmp(&y.1).then_with(|| y.0.words().cmp(x.0.words())))
                .map(|(r, _)| r)
                .unwrap_or(Reason::NoStack);
            OtherProcess {
                process,
                idle_ns,
                share_pct: pct(idle_ns, total_idle_ns),
                reason,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        y.idle_ns
            .cmp(&x.idle_ns)
            .then_with(|| x.process.cmp(&y.process))
    });
    out.truncate(OTHER_PROCESSES);
    out
}

/// The merged paths as folded stacks for `inferno`: `PROCESS;THREAD;frames
/// outermost first;[reason] object WEIGHT` (the JVM's reason on top where
/// one covers the dispatch; with `by_reason` the reason first, at the
/// root; with `user_only` the kernel's frames left out). Only the threads
/// the report shows, never idleflow's own.
#[derive(Debug, Clone, Copy)]
pub struct MergedPaths<'a> {
    /// The pass's results.
    pub analysis: &'a Analysis,
    /// The reason first, at the root.
    pub by_reason: bool,
    /// The kernel's frames left out.
    pub user_only: bool,
}

impl<'a> MergedPaths<'a> {
    /// Every merged path of `analysis`, as the report draws them: reasons on
    /// top, kernel frames kept.
    pub fn all(analysis: &'a Analysis) -> Self {
        MergedPaths {
            analysis,
            by_reason: false,
            user_only: false,
        }
    }
}

impl Fold for MergedPaths<'_> {
    fn fold(&self, fold: crate::path::FoldOptions, out: &mut Folded) {
        let MergedPaths {
            analysis: a,
            by_reason,
            user_only,
        } = *self;
        for row in resolve(a, false) {
            let weight = if fold.dispatches {
                row.dispatches
            } else {
                row.idle_ns
            };
            let [_, thread] = crate::path::roots(&a.names, row.tid, fold.merge_threads);
            let roots = [(FrameKind::Process, row.process), thread];
            let why = row.jvm_reason.map(|r| {
                let frame = if row.object.is_empty() {
                    format!("[{}]", r.words())
                } else {
                    format!("[{}] {}", r.words(), row.object)
                };
                (FrameKind::Reason, frame)
            });
            let frames = row
                .frames
                .into_iter()
                .rev()
                .filter(|f| !(user_only && f.frame.kind == FrameKind::Kernel))
                .map(|f| (f.frame.kind, f.frame.name));
            if by_reason {
                let why = why.unwrap_or((FrameKind::Reason, format!("[{}]", row.reason)));
                out.add(std::iter::once(why).chain(roots).chain(frames), weight);
            } else {
                out.add(roots.into_iter().chain(frames).chain(why), weight);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{Frame, FrameSource};
    use resolve::{java_runtime, native_runtime};

    fn f(kind: FrameKind, name: &str, source: FrameSource) -> PathFrame {
        PathFrame {
            frame: Frame::new(kind, name),
            source,
            runtime: false,
            module: String::new(),
        }
    }

    fn names(v: &[PathFrame]) -> Vec<&str> {
        v.iter().map(|f| f.frame.name.as_str()).collect()
    }

    #[test]
    fn java_frames_replace_the_stacks_java_code_between_its_native_frames() {
        use FrameKind::*;
        use FrameSource::*;
        let user = vec![
            f(Native, "__futex_abstimed_wait_common", Stack),
            f(Native, "Parker::park", Stack),
            f(Native, "Unsafe_Park", Stack),
            f(Unknown, "[unknown]", Stack),
            f(Interpreted, "Interpreter", PerfMap),
            f(Unknown, "[unknown]", Stack),
            f(Native, "JavaCalls::call_helper", Stack),
            f(Native, "start_thread", Stack),
        ];
        let java = vec![
            f(Native, "jdk.internal.misc.Unsafe.park", Jfr),
            f(Java, "java.util.concurrent.locks.LockSupport.park", Jfr),
            f(Jit, "Pool.take", Jfr),
        ];
        assert_eq!(
            names(&splice(user.clone(), java.clone())),
            [
                "__futex_abstimed_wait_common",
                "Parker::park",
                "Unsafe_Park",
                "jdk.internal.misc.Unsafe.park",
                "java.util.concurrent.locks.LockSupport.park",
                "Pool.take",
                "JavaCalls::call_helper",
                "start_thread"
            ]
        );
        // No Java source covers the dispatch: the stack as it is.
        assert_eq!(splice(user.clone(), Vec::new()), user);
        // A stack without Java code (cut short): the Java frames outside.
        let native = user[..3].to_vec();
        assert_eq!(names(&splice(native, java.clone()))[3..], names(&java)[..]);
        // No user stack at all: the Java frames alone.
        assert_eq!(splice(Vec::new(), java.clone()), java);
    }

    #[test]
    fn runtimes_and_system_libraries_are_not_the_programs_code() {
        assert!(java_runtime("java.lang.Thread.sleep"));
        assert!(java_runtime("jdk.internal.misc.Unsafe.park"));
        assert!(java_runtime("Interpreter"));
        assert!(!java_runtime("Inventory.reserve"));
        assert!(!java_runtime(
            "org.apache.tomcat.util.threads.TaskQueue.take"
        ));
        assert!(native_runtime(
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "read"
        ));
        assert!(native_runtime(
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
            "Parker::park"
        ));
        assert!(native_runtime(
            "/work/target/condvar",
            "std::sync::Condvar::wait"
        ));
        assert!(!native_runtime("/work/target/chain", "fill_buffer"));
        // A program installed under /usr/lib is the program, its libraries
        // there are not.
        assert!(!native_runtime(
            "/usr/lib/postgresql/15/bin/postgres",
            "WaitEventSetWait"
        ));
        assert!(native_runtime(
            "/usr/lib/x86_64-linux-gnu/libpq.so.5",
            "pqSocketCheck"
        ));
        assert!(native_runtime(
            "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
            "JavaMain"
        ));
    }

    #[test]
    fn a_wait_no_event_covers_gets_the_jvms_reason_from_its_native_frames() {
        use FrameKind::*;
        use FrameSource::*;
        let path = |names: &[&str]| -> Vec<PathFrame> {
            let mut v = vec![f(FrameKind::Kernel, "futex_do_wait", FrameSource::Kernel)];
            v.extend(names.iter().map(|n| f(Native, n, Stack)));
            v.push(f(Jit, "Ledger.post", PerfMap));
            v
        };
        let enter = path(&[
            "os::PlatformEvent::park()",
            "ObjectMonitor::EnterI(JavaThread*)",
            "ObjectMonitor::enter(JavaThread*)",
        ]);
        assert_eq!(
            crate::reasons::jvm_reason_of_native_frames(&enter),
            Some(WaitReason::MonitorEnter)
        );
        // Re-entering the monitor after a notify is part of the wait.
        let wait = path(&[
            "os::PlatformEvent::park()",
            "ObjectMonitor::ReenterI(JavaThread*, ObjectWaiter*)",
            "ObjectMonitor::wait(long, bool, JavaThread*)",
            "JVM_MonitorWait",
        ]);
        assert_eq!(
            crate::reasons::jvm_reason_of_native_frames(&wait),
            Some(WaitReason::MonitorWait)
        );
        let park = path(&["Parker::park(bool, long)", "Unsafe_Park"]);
        assert_eq!(
            crate::reasons::jvm_reason_of_native_frames(&park),
            Some(WaitReason::Park)
        );
        assert_eq!(
            crate::reasons::jvm_reason_of_native_frames(&path(&["JVM_Sleep"])),
            Some(WaitReason::Sleep)
        );
        // The JVM's own waits are not the program's.
        let gc = path(&["os::PlatformMonitor::wait(long)", "Monitor::wait(long)"]);
        assert_eq!(crate::reasons::jvm_reason_of_native_frames(&gc), None);
    }

    #[test]
    fn only_java_methods_count_as_named_java_frames() {
        use FrameKind::*;
        use FrameSource::*;
        let stub = f(Jit, "_complete_monitor_locking_Java", PerfMap);
        let runtime1 = f(Jit, "monitorenter_nofpu Runtime1 stub", PerfMap);
        let interpreter = f(Interpreted, "Interpreter", PerfMap);
        assert!(!names_java(&[stub.clone(), runtime1, interpreter]));
        assert!(names_java(&[
            stub.clone(),
            f(Jit, "Waits$Ledger.post", PerfMap)
        ]));
        assert!(names_java(&[
            f(Native, "Unsafe_Park", Stack),
            f(Java, "Pool.take", Jfr)
        ]));
        assert!(names_java(&[f(Java, "Ledger.post", Tree)]));
    }
}
