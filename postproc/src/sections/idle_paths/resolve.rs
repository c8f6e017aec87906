//! Each idle-causing key of the pass ([`RowKey`]) resolved into one merged
//! path: the kernel's frames from its wait outward, the user stack's native
//! frames spliced with the Java frames of the best source covering the
//! dispatch (tree node, flight-recorder wait, perf map), its reason and
//! object, each frame marked runtime or program code.
//!
//! Invariant: a key resolves the same whatever asks (the report's paths,
//! the root causes, the flame graphs, Perfetto's samples).

use idleflow_format::WaitReason;

use crate::pass::idle_paths::{RowAcc, RowKey};
use crate::pass::windows::Series;
use crate::pass::{Analysis, PathKey};
use crate::path::{Frame, FrameKind, FrameSource, PathFrame};
use crate::reasons::{jvm_reason_of_native_frames, Reason};

/// The merged path of `key` (a thread's frames, reason and object), once
/// the pass is over.
pub fn resolve_path(a: &Analysis, key: &PathKey) -> ResolvedRow {
    resolve_key(a, &key.0)
}

/// One resolved key: a thread's path with its figures.
#[derive(Debug, Clone)]
pub struct ResolvedRow {
    /// The thread.
    pub tid: u32,
    /// Its process's name.
    pub process: String,
    /// See [`super::IdlePath::reason`].
    pub reason: Reason,
    /// The JVM's reason, where a wait covers it or the JVM's native frames
    /// say it ([`crate::reasons::jvm_reason_of_native_frames`]).
    pub jvm_reason: Option<WaitReason>,
    /// See [`super::IdlePath::object`].
    pub object: String,
    /// Other threads named, with counts.
    pub others: Vec<(String, u64)>,
    /// Innermost first.
    pub frames: Vec<PathFrame>,
    /// Dispatches to idle.
    pub dispatches: u64,
    /// Idle that followed, ns.
    pub idle_ns: u64,
    /// That idle per time window, where the analysis split it.
    pub windows: Series,
}

/// Whether a Java-named frame is the JDK's or the JVM's (not the
/// program's own code).
pub(crate) fn java_runtime(name: &str) -> bool {
    const PACKAGES: [&str; 7] = [
        "java.", "javax.", "jdk.", "sun.", "com.sun.", "kotlin.", "scala.",
    ];
    PACKAGES.iter().any(|p| name.starts_with(p)) || !name.contains('.')
}

/// Whether a native frame is a system library's or a runtime's: by its
/// module (a shared library under the system's paths, the JVM's files, the
/// vDSO), else by a Rust std name. A program's own executable is never a
/// system library, wherever it is installed (`/usr/lib/postgresql/15/bin/
/// postgres`): only shared objects (`.so`) under `/lib` and `/usr/lib` are.
pub(crate) fn native_runtime(module: &str, name: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    let shared_object = base.contains(".so");
    module.is_empty()
        || (shared_object && (module.starts_with("/lib") || module.starts_with("/usr/lib")))
        || module.contains("/jvm/")
        || module.starts_with('[')
        || base.starts_with("libc.so")
        || base.starts_with("ld-linux")
        || base.starts_with("libjvm")
        || {
            let n = name.trim_start_matches('<');
            n.starts_with("std::")
                || n.starts_with("core::")
                || n.starts_with("alloc::")
                || n.starts_with("__rust")
        }
}

/// The user stack's frames as path frames.
pub(crate) fn user_frames(a: &Analysis, id: u64) -> Vec<PathFrame> {
    if id == 0 {
        return Vec::new();
    }
    a.kernel
        .user_frames_full(id)
        .into_iter()
        .map(|f| {
            let kind = match FrameKind::from(f.kind) {
                FrameKind::Jit if f.inlined => FrameKind::Inlined,
                k => k,
            };
            let perf_map =
                f.module.starts_with("/tmp/perf-") || f.kind == idleflow_format::CodeKind::Jit;
            let runtime = match kind {
                FrameKind::Jit | FrameKind::Inlined | FrameKind::Interpreted => {
                    java_runtime(&f.name)
                }
                FrameKind::Unknown => true,
                _ => native_runtime(f.module, &f.name),
            };
            PathFrame {
                frame: Frame {
                    line: f.line,
                    file: f.file,
                    ..Frame::new(kind, f.name)
                },
                source: if f.walked {
                    FrameSource::Vm
                } else if perf_map {
                    FrameSource::PerfMap
                } else {
                    FrameSource::Stack
                },
                runtime,
                module: f.module.to_string(),
            }
        })
        .collect()
}

/// Whether a user frame is where the JVM runs Java code (a JIT's or the
/// interpreter's frame, or code outside any module).
pub(crate) fn java_code(f: &PathFrame) -> bool {
    matches!(
        f.frame.kind,
        FrameKind::Jit | FrameKind::Interpreted | FrameKind::Inlined | FrameKind::Unknown
    )
}

/// Splices the Java frames `java` (innermost first) into the user frames
/// `user` (innermost first): the native frames inside the Java code stay
/// innermost, the Java frames replace the stack's own Java code (JIT,
/// interpreter, unnamed frames), the native frames outside it (the
/// thread's entry) stay outermost. A stack without Java code keeps its
/// frames innermost and gets the Java frames outside them.
pub fn splice(user: Vec<PathFrame>, java: Vec<PathFrame>) -> Vec<PathFrame> {
    if java.is_empty() {
        return user;
    }
    let Some(first) = user.iter().position(java_code) else {
        let mut out = user;
        out.extend(java);
        return out;
    };
    let last = user.iter().rposition(java_code).unwrap_or(first);
    let mut out = Vec::with_capacity(user.len() + java.len());
    let mut user = user.into_iter();
    out.extend(user.by_ref().take(first));
    out.extend(java);
    out.extend(user.skip(last + 1 - first));
    out
}

/// Resolves every idle-causing key of `a` into a row, idleflow's own
/// threads and (unless `all`) threads of processes the report does not
/// show left out.
pub fn resolve(a: &Analysis, all: bool) -> Vec<ResolvedRow> {
    let mut out = Vec::with_capacity(a.idle_paths.rows.len());
    for (k, r) in &a.idle_paths.rows {
        if a.tool_tids.contains(&k.tid) || !(all || a.shows(k.tid)) {
            continue;
        }
        out.push(resolve_row(a, k, r));
    }
    out
}

/// The merged path of one key: a thread's frames, reason and object.
pub(crate) fn resolve_key(a: &Analysis, k: &RowKey) -> ResolvedRow {
    resolve_row(a, k, &RowAcc::default())
}

pub(crate) fn resolve_row(a: &Analysis, k: &RowKey, r: &RowAcc) -> ResolvedRow {
    let (pid, _) = a.names.get(&k.tid).cloned().unwrap_or((0, String::new()));
    let process = a.process_name(pid);
    let user = user_frames(a, k.user);
    // Stacks that name another JVM wait than the flight recorder's wait
    // covering the dispatch are not this wait's: its thread's previous
    // stacks, carried to a dispatch without its own (the stack budget), from
    // the other wait of a thread that alternates between two (a lock's
    // holder sleeping, then entering it again). The path keeps the wait's
    // Java frames alone.
    let contradicted = k
        .reason
        .is_some_and(|r| jvm_reason_of_native_frames(&user).is_some_and(|n| n != r));
    let (kernel_stack, user) = if contradicted {
        (0, Vec::new())
    } else {
        (k.kernel, user)
    };
    let kernel: Vec<PathFrame> = if kernel_stack == 0 {
        Vec::new()
    } else {
        a.kernel
            .wait_frames(kernel_stack)
            .into_iter()
            .map(|name| PathFrame {
                frame: Frame::new(FrameKind::Kernel, name),
                source: FrameSource::Kernel,
                runtime: true,
                module: String::new(),
            })
            .collect()
    };
    // The best Java source covering the dispatch: the tree node, else the
    // flight-recorder wait's stack.
    let java: Vec<PathFrame> = match a.views.node_paths.get(&k.node) {
        Some(methods) if k.node != 0 => methods
            .iter()
            .map(|m| PathFrame {
                frame: Frame::new(FrameKind::Java, m.clone()),
                source: FrameSource::Tree,
                runtime: java_runtime(m),
                module: String::new(),
            })
            .collect(),
        _ if k.group != 0 => a
            .java
            .group_frames(k.jvm, k.group)
            .into_iter()
            .map(|(frame, _)| PathFrame {
                runtime: java_runtime(&frame.name),
                frame,
                source: a.java.frames_source(k.jvm),
                module: String::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut frames = kernel;
    frames.extend(splice(user, java));
    let jvm_reason = k.reason.or_else(|| jvm_reason_of_native_frames(&frames));
    let reason = match jvm_reason {
        Some(reason) => Reason::Jvm(reason),
        None => frames
            .first()
            .filter(|f| f.frame.kind == FrameKind::Kernel)
            .map_or(Reason::NoStack, |f| Reason::of_kernel_wait(&f.frame.name)),
    };
    let object = if k.object != 0 {
        a.java.symbol(k.jvm, k.object).to_string()
    } else if k.addr != 0
        && jvm_reason.is_none()
        && frames
            .iter()
            .take_while(|f| f.frame.kind == FrameKind::Kernel)
            .any(|f| f.frame.name.contains("futex_wait"))
    {
        // A native lock or condition: its futex's address (not a JVM's
        // park or monitor: their futex is the waiting thread's own).
        format!("futex {:#x}", k.addr)
    } else {
        String::new()
    };
    let mut others: Vec<(String, u64)> = r
        .others
        .iter()
        .map(|(&sym, &n)| (a.java.symbol(k.jvm, sym).to_string(), n))
        .filter(|(name, _)| !name.is_empty())
        .collect();
    others.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    ResolvedRow {
        tid: k.tid,
        process,
        reason,
        jvm_reason,
        object,
        others,
        frames,
        dispatches: r.dispatches,
        idle_ns: r.idle_ns,
        windows: r.windows.clone(),
    }
}

/// Whether a path names Java code: a Java method (`Class.method`) from the
/// tree, the flight recorder, or a perf map. The JVM's stubs and the
/// interpreter's blob (`_complete_monitor_locking_Java`, `Interpreter`)
/// that a perf map names are not Java code.
pub(crate) fn names_java(frames: &[PathFrame]) -> bool {
    frames.iter().any(|f| {
        (matches!(
            f.frame.kind,
            FrameKind::Java | FrameKind::Jit | FrameKind::Inlined | FrameKind::Interpreted
        ) || matches!(
            f.source,
            FrameSource::Jfr | FrameSource::Vm | FrameSource::Tree
        )) && f.frame.name.contains('.')
            && !f.frame.name.contains(' ')
    })
}
