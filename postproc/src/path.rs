//! The one path model (`ARCHITECTURE.md`, "One attribution model"):
//! whichever source named what a thread was doing when it left its CPU —
//! the tree agent's node ([`crate::pass::call_tree`]), a flight-recorder wait
//! ([`crate::pass::java_waits`]), the stacks copied at the switch-out
//! ([`crate::sections::call_paths`], [`crate::pass::kernel_waits`]) — the answer is a path: its
//! process and its thread (or pool), then frames from the outermost in,
//! each with the [`FrameKind`] of code that ran there and a name
//! normalized so that the same code reads the same in every run and from
//! every source ([`java_method`]), and last, where the JVM gave one, the
//! reason of the wait.
//!
//! The outputs that draw paths (folded stacks, hence the flame graphs)
//! take them through [`Folded`], so a source plugs in by producing
//! [`Frame`]s and an output by reading [`Folded`]'s lines.
//!
//! Invariants: a frame's kind alone decides its annotation in folded
//! output ([`FrameKind::folded_suffix`], inferno's `java` palette);
//! no name in a folded line carries `;`, the frame separator; memory is
//! one entry per distinct path, never per dispatch.

use std::collections::BTreeMap;

use idleflow_format::CodeKind;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// What ran at a frame of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// The root: the process.
    Process,
    /// The thread, or a pool's name pattern (`http-nio-8080-exec-*`).
    Thread,
    /// A Java method named by the JVM (the tree agent, the flight
    /// recorder), however it ran.
    Java,
    /// JIT-compiled code.
    Jit,
    /// Inlined into the JIT-compiled frame below it.
    Inlined,
    /// An interpreter.
    Interpreted,
    /// A module's machine code, or a Java native method.
    Native,
    /// The kernel (its wait).
    Kernel,
    /// The JVM's reason of the wait (`[monitor enter] Waits$Ledger`).
    Reason,
    /// Nothing known.
    Unknown,
}

impl FrameKind {
    /// The annotation inferno's `java` palette colours a frame by
    /// (async-profiler's convention, which inferno strips from the label):
    /// kernel orange, JIT green, inlined aqua. The others have none and are
    /// coloured by their names (Java green, C++ yellow, the rest red).
    pub fn folded_suffix(self) -> &'static str {
        match self {
            FrameKind::Kernel => "_[k]",
            FrameKind::Jit => "_[j]",
            FrameKind::Inlined => "_[i]",
            _ => "",
        }
    }
}

impl From<CodeKind> for FrameKind {
    fn from(k: CodeKind) -> Self {
        match k {
            CodeKind::Native => FrameKind::Native,
            CodeKind::Jit => FrameKind::Jit,
            CodeKind::Interpreted => FrameKind::Interpreted,
            CodeKind::Unknown => FrameKind::Unknown,
        }
    }
}

impl From<idleflow_format::FrameKind> for FrameKind {
    /// A flight-recorder frame: how its Java method ran.
    fn from(k: idleflow_format::FrameKind) -> Self {
        use idleflow_format::FrameKind as Jfr;
        match k {
            Jfr::Unknown => FrameKind::Java,
            Jfr::Interpreted => FrameKind::Interpreted,
            Jfr::Jit => FrameKind::Jit,
            Jfr::Inlined => FrameKind::Inlined,
            Jfr::Native => FrameKind::Native,
        }
    }
}

/// One frame of a path: the same JSON object in every section that has
/// paths (`{"kind": "jit", "name": "Pool.take", "line": 42}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Frame {
    /// What ran there.
    pub kind: FrameKind,
    /// Its name (`fill_buffer`, `std::sync::Condvar::wait`,
    /// `java.util.concurrent.LinkedBlockingQueue.take`, `libc.so.6+0x1234`).
    pub name: String,
    /// Its source line where the source said (the flight recorder's Java
    /// frames), else 0 (left out of JSON).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub line: u32,
    /// Its source file where the source said (DWARF of a native frame),
    /// else empty (left out of JSON).
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub file: String,
}

impl Frame {
    /// A frame without a line.
    pub fn new(kind: FrameKind, name: impl Into<String>) -> Self {
        Frame {
            kind,
            name: name.into(),
            line: 0,
            file: String::new(),
        }
    }
}

fn is_zero(line: &u32) -> bool {
    *line == 0
}

/// A JIT frame's Java method as the flight recorder names it
/// (`java.util.concurrent.LinkedBlockingQueue.take`, `Waits$Ledger.post`)
/// from a perf map's name: HotSpot's (`java.lang.Object
/// java.util.concurrent.LinkedBlockingQueue.take()`) or the agent's
/// (`JitWait.pause(long)`), without the return type and the parameters, so
/// a path reads the same from either source and from run to run. Other
/// JIT names (`StubRoutines (1)`, `call_stub`) stay whole.
pub fn java_method(name: &str) -> &str {
    let head = name.split_once('(').map_or(name, |(h, _)| h).trim_end();
    let method = head.rsplit(' ').next().unwrap_or(head);
    if method.contains('.') && !method.is_empty() {
        method
    } else {
        name
    }
}

/// Whether the JIT frame `caller` (a [`java_method`] name, `pkg.Class.method`)
/// can be the caller of the JNI function `symbol` (`Java_pkg_Class_method`,
/// perhaps with `__signature`): a JNI function is called only from its
/// method's native wrapper (or the interpreter), so a JIT frame of any
/// other name above it was named by a perf map that no longer describes
/// the code of the moment the stack was copied (the code was thrown away
/// and its space reused, as after a class redefinition). The same holds
/// for HotSpot's `Unsafe_*` natives. Other names are not judged (`true`).
pub fn jni_caller_matches(symbol: &str, caller: &str) -> bool {
    // HotSpot's own natives of `Unsafe` (`Unsafe_Park` for
    // `jdk.internal.misc.Unsafe.park`, `sun.misc.Unsafe` before JDK 9).
    if let Some(name) = symbol.strip_prefix("Unsafe_") {
        let Some((class, method)) = caller.rsplit_once('.') else {
            return false;
        };
        let mut first = name.chars();
        return (class == "jdk.internal.misc.Unsafe" || class == "sun.misc.Unsafe")
            && first.next().is_some_and(|c| {
                method.strip_prefix(c.to_ascii_lowercase()) == Some(first.as_str())
            });
    }
    let Some(mangled) = symbol.strip_prefix("Java_") else {
        return true;
    };
    let Some((class, method)) = caller.rsplit_once('.') else {
        return false;
    };
    let mut expected = String::with_capacity(caller.len() + 8);
    jni_mangle(class, &mut expected);
    expected.push('_');
    jni_mangle(method, &mut expected);
    mangled == expected
        || mangled
            .strip_prefix(expected.as_str())
            .is_some_and(|rest| rest.starts_with("__"))
}

/// Appends `name` mangled as the JNI specification names native methods:
/// `.` (a package separator) as `_`, `_` as `_1`, `;` as `_2`, `[` as
/// `_3`, other characters than ASCII letters and digits as `_0xxxx`.
fn jni_mangle(name: &str, out: &mut String) {
    for u in name.encode_utf16() {
        match char::from_u32(u.into()) {
            Some(c) if c.is_ascii_alphanumeric() => out.push(c),
            Some('.') | Some('/') => out.push('_'),
            Some('_') => out.push_str("_1"),
            Some(';') => out.push_str("_2"),
            Some('[') => out.push_str("_3"),
            _ => out.push_str(&format!("_0{u:04x}")),
        }
    }
}

/// The two root frames of thread `tid`'s paths: its process's name and
/// its own (a pool's name pattern when `merge_threads`). `names`: tid →
/// (pid, name).
pub fn roots(
    names: &FxHashMap<u32, (u32, String)>,
    tid: u32,
    merge_threads: bool,
) -> [(FrameKind, String); 2] {
    let (pid, name) = names
        .get(&tid)
        .map_or((0, format!("tid {tid}")), |(pid, n)| (*pid, n.clone()));
    let process = names
        .get(&pid)
        .map_or_else(|| format!("pid {pid}"), |n| n.1.clone());
    let thread = if merge_threads {
        thread_pattern(&name)
    } else {
        name
    };
    [(FrameKind::Process, process), (FrameKind::Thread, thread)]
}

/// Paths summed by weight, as folded stacks for `inferno` (`root;…;leaf
/// WEIGHT`, one line per distinct path, sorted).
#[derive(Debug, Clone, Default)]
pub struct Folded {
    lines: BTreeMap<String, u64>,
}

impl Folded {
    /// Adds `weight` to the path `frames` (root first).
    pub fn add<S: AsRef<str>>(
        &mut self,
        frames: impl IntoIterator<Item = (FrameKind, S)>,
        weight: u64,
    ) {
        let mut line = String::new();
        for (kind, name) in frames {
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(&name.as_ref().replace(';', ":"));
            line.push_str(kind.folded_suffix());
        }
        let e = self.lines.entry(line).or_default();
        *e = e.saturating_add(weight);
    }

    /// Adds every path of `other`, with its weight.
    pub fn merge(&mut self, other: &Folded) {
        for (line, w) in &other.lines {
            let e = self.lines.entry(line.clone()).or_default();
            *e = e.saturating_add(*w);
        }
    }

    /// The folded lines, paths of no weight left out.
    pub fn into_lines(self) -> Vec<String> {
        self.lines
            .into_iter()
            .filter(|(_, w)| *w > 0)
            .map(|(l, w)| format!("{l} {w}"))
            .collect()
    }
}

/// One view of the idle-causing paths as folded stacks — as inferno's
/// `Collapse` turns any input into folded lines, every flame graph and
/// every `--folded` output is drawn from one of these
/// ([`crate::sections::folded::view`] picks it).
pub trait Fold {
    /// Adds the view's stacks to `out`, weighted and with pool threads
    /// merged as `opts` say.
    fn fold(&self, opts: FoldOptions, out: &mut Folded);

    /// The view's folded lines (sorted, paths of no weight left out).
    fn folded_lines(&self, opts: FoldOptions) -> Vec<String> {
        let mut out = Folded::default();
        self.fold(opts, &mut out);
        out.into_lines()
    }
}

/// What the flame graph's folded stacks are weighted by and how threads group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldOptions {
    /// Dispatches to idle (`true`) or the idle time that followed (`false`).
    pub dispatches: bool,
    /// Pool threads merged under their [`thread_pattern`].
    pub merge_threads: bool,
}

/// Which source named a frame of a merged path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameSource {
    /// The entry/exit agent's call-tree node (`--java tree`).
    Tree,
    /// The JVM's flight recorder: the exact stack of the wait.
    Jfr,
    /// The JVM's own structures, walked at the wait's switch-out
    /// (`record --java vm`, the default on eBPF).
    Vm,
    /// A JIT's perf map (the agent's light mode, HotSpot's map).
    PerfMap,
    /// The user stack copied at the switch-out, unwound and named from the
    /// modules' symbols and DWARF.
    Stack,
    /// The kernel's stack at the switch-out.
    Kernel,
}

/// One frame of a merged path: `{kind, name, line, source}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PathFrame {
    /// What ran there, its name and line.
    #[serde(flatten)]
    pub frame: Frame,
    /// Which source named it.
    pub source: FrameSource,
    /// A runtime's or a system library's frame (the kernel, libc, the JVM,
    /// the JDK, Rust's std), not the program's own code.
    #[serde(skip)]
    pub runtime: bool,
    /// The module (executable or library file) a native frame is in, else
    /// empty.
    #[serde(skip)]
    pub module: String,
}

pub use idleflow_format::names::thread_pattern;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jni_function_is_called_from_its_methods_native_wrapper_only() {
        assert!(jni_caller_matches(
            "Java_sun_nio_ch_EPoll_wait",
            "sun.nio.ch.EPoll.wait"
        ));
        assert!(!jni_caller_matches(
            "Java_sun_nio_ch_EPoll_wait",
            "org.apache.tomcat.util.buf.StringCache.toString"
        ));
        assert!(!jni_caller_matches(
            "Java_sun_nio_ch_EPoll_wait",
            "sun.nio.ch.EPoll.waitx"
        ));
        // Overloaded (with the signature), `_`, `$` and non-ASCII escaped.
        assert!(jni_caller_matches(
            "Java_a_b_C_1d_00024E_f_1g__IJ",
            "a.b.C_d$E.f_g"
        ));
        assert!(jni_caller_matches(
            "Java_p_Caf_000e9_run",
            "p.Caf\u{e9}.run"
        ));
        assert!(!jni_caller_matches("Java_a_b_C_f", "a.b.C_f"));
        // Not a JNI function, or a caller that is no method: not judged /
        // not the wrapper.
        assert!(jni_caller_matches(
            "Unsafe_Park",
            "jdk.internal.misc.Unsafe.park"
        ));
        assert!(jni_caller_matches(
            "Unsafe_Unpark",
            "sun.misc.Unsafe.unpark"
        ));
        assert!(!jni_caller_matches(
            "Unsafe_Park",
            "org.apache.catalina.webresources.CachedResource.exists"
        ));
        assert!(!jni_caller_matches(
            "Unsafe_Park",
            "jdk.internal.misc.Unsafe.unpark"
        ));
        assert!(jni_caller_matches("JVM_Sleep", "anything.at.all"));
        assert!(!jni_caller_matches("Java_a_B_f", "StubRoutines (1)"));
    }

    #[test]
    fn jit_names_read_as_the_flight_recorders() {
        for (perf_map, jfr) in [
            (
                "java.lang.Object java.util.concurrent.LinkedBlockingQueue.take()",
                "java.util.concurrent.LinkedBlockingQueue.take",
            ),
            ("long JitWait.pause(long)", "JitWait.pause"),
            ("JitWait.pause(long)", "JitWait.pause"),
            ("void Waits$Ledger.post(int, int)", "Waits$Ledger.post"),
            ("StubRoutines (1)", "StubRoutines (1)"),
            ("Interpreter", "Interpreter"),
        ] {
            assert_eq!(java_method(perf_map), jfr);
        }
    }

    #[test]
    fn folded_lines_sum_paths_and_annotate_frames_by_kind() {
        let mut f = Folded::default();
        let path = [
            (FrameKind::Process, "java"),
            (FrameKind::Thread, "exec-*"),
            (FrameKind::Interpreted, "Interpreter"),
            (FrameKind::Jit, "Pool.take"),
            (FrameKind::Inlined, "Queue.poll"),
            (FrameKind::Native, "Unsafe_Park"),
            (FrameKind::Kernel, "futex_wait"),
            (FrameKind::Reason, "[park] a;b"),
        ];
        f.add(path, 3);
        f.add(path, 4);
        f.add([(FrameKind::Process, "idle"), (FrameKind::Thread, "t")], 0);
        assert_eq!(
            f.into_lines(),
            ["java;exec-*;Interpreter;Pool.take_[j];Queue.poll_[i];Unsafe_Park;futex_wait_[k];[park] a:b 7"]
        );
    }
}
