//! The causes of idle (JSON `idle_paths.causes`, the headline's lines):
//! the merged paths summed by process, reason, pool and program frame.
//!
//! Invariant: a cause's idle is the sum of its paths' idle; HotSpot's own
//! threads are one cause per reason, never named by a frame.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::{IdlePath, OtherThread, PathThreads};
use crate::path::{FrameKind, PathFrame};
use crate::reasons::Reason;

/// One cause of idle (JSON `idle_paths.causes`, the headline's lines): the
/// paths with the same process, reason, pool and program frame, whatever
/// source named their frames. A wait the flight recorder recorded (with its
/// line and object) and a shorter one of the same code that only the stack
/// at the switch-out named are one cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cause {
    /// The process's name.
    pub process: String,
    /// As [`IdlePath::reason`].
    pub reason: Reason,
    /// What the threads waited on, where every path that says agrees.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub object: String,
    /// The thread or pool (its name pattern) with the most dispatches.
    pub threads: PathThreads,
    /// Other threads or pools on the cause.
    pub more_threads: u64,
    /// The first frame of the program's own code (from the path with the
    /// most idle that has a line, else the one with the most idle); else
    /// the first frame outside the kernel and the C library's internals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame: Option<PathFrame>,
    /// The program's frame that called `frame`, where `frame` is native
    /// code with no line (a stripped binary's function alone says little:
    /// `WaitEventSetWait` ← `secure_read`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<PathFrame>,
    /// Whether `frame` is the program's own code.
    pub program: bool,
    /// As [`IdlePath::held_by`], [`IdlePath::notified_by`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<OtherThread>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notified_by: Vec<OtherThread>,
    /// Idle that followed, ns, and its share of all CPUs' idle, %.
    pub idle_ns: u64,
    pub share_pct: f64,
    /// Dispatches to idle.
    pub dispatches: u64,
    /// Paths (of `paths`) it sums.
    pub paths: u64,
    /// All its threads are HotSpot's own.
    pub jvm_internal: bool,
    /// Some of its dispatches were in a JVM thread that runs Java code and
    /// none of its frames names Java code (as [`IdlePath::java_unnamed`]).
    #[serde(skip)]
    pub java_unnamed: bool,
    /// Of those, some had a user stack that stopped before any Java frame
    /// (as [`IdlePath::java_stack_stops`]).
    #[serde(skip)]
    pub java_stack_stops: bool,
}

/// The frame a cause is named by: the program's first, else the first
/// outside the kernel and the C library's internals (`__futex_…`).
fn cause_frame(p: &IdlePath) -> Option<&PathFrame> {
    p.program().or_else(|| {
        p.frames
            .iter()
            .find(|f| f.frame.kind != FrameKind::Kernel && !f.frame.name.starts_with('_'))
    })
}

/// The program's named frame that called `p`'s program frame, where that
/// frame is native code with no line ([`Cause::caller`]).
fn cause_caller(p: &IdlePath) -> Option<&PathFrame> {
    let i = p.program_frame?;
    let f = p.frames.get(i)?;
    if f.frame.kind != FrameKind::Native || f.frame.line > 0 {
        return None;
    }
    p.frames[i + 1..]
        .iter()
        .find(|g| !g.runtime && !g.frame.name.contains("+0x"))
}

/// How a cause names HotSpot's own threads.
const JVM_THREADS: &str = "JVM threads";

/// The causes of `paths` (most idle first), with the distinct threads of
/// each (pattern → tids).
pub(super) fn causes(paths: &[IdlePath], tids: &[FxHashMap<String, FxHashSet<u32>>]) -> Vec<Cause> {
    /// (process, reason, pool, program frame, its caller).
    type Key<'a> = (
        &'a str,
        &'a Reason,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
    );
    /// A cause being summed, its pools' tids, its pools' dispatches.
    type Acc = (
        Cause,
        FxHashMap<String, FxHashSet<u32>>,
        FxHashMap<String, u64>,
    );
    let mut order: Vec<Key> = Vec::new();
    let mut by: FxHashMap<Key, Acc> = FxHashMap::default();
    for (p, tids) in paths.iter().zip(tids) {
        let Some(top) = p.threads.first() else {
            continue;
        };
        // HotSpot's own threads (GC, compilers, the VM thread) are one
        // cause per reason: the JVM at work, not the program's code.
        let frame = cause_frame(p).filter(|_| !p.jvm_internal);
        let caller = cause_caller(p).filter(|_| !p.jvm_internal);
        let key: Key = (
            &p.process,
            &p.reason,
            if p.jvm_internal {
                JVM_THREADS
            } else {
                &top.name
            },
            frame.map(|f| f.frame.name.as_str()),
            caller.map(|f| f.frame.name.as_str()),
        );
        let (c, threads, pools) = by.entry(key).or_insert_with(|| {
            order.push(key);
            (
                Cause {
                    process: p.process.clone(),
                    reason: p.reason.clone(),
                    object: p.object.clone(),
                    threads: top.clone(),
                    more_threads: 0,
                    frame: frame.cloned(),
                    caller: caller.cloned(),
                    program: p.program_frame.is_some(),
                    held_by: Vec::new(),
                    notified_by: Vec::new(),
                    idle_ns: 0,
                    share_pct: 0.0,
                    dispatches: 0,
                    paths: 0,
                    jvm_internal: true,
                    java_unnamed: false,
                    java_stack_stops: false,
                },
                FxHashMap::default(),
                FxHashMap::default(),
            )
        });
        c.idle_ns = c.idle_ns.saturating_add(p.idle_ns);
        c.share_pct += p.share_pct;
        c.dispatches += p.dispatches;
        c.paths += 1;
        c.jvm_internal &= p.jvm_internal;
        c.java_unnamed |= p.java_unnamed;
        c.java_stack_stops |= p.java_stack_stops;
        if c.object.is_empty() {
            c.object = p.object.clone();
        } else if !p.object.is_empty() && p.object != c.object {
            c.object = "…".into();
        }
        if frame.is_some_and(|f| f.frame.line > 0)
            && c.frame.as_ref().is_some_and(|f| f.frame.line == 0)
        {
            c.frame = frame.cloned();
        }
        for (name, set) in tids {
            let name = if p.jvm_internal { JVM_THREADS } else { name };
            threads.entry(name.to_string()).or_default().extend(set);
        }
        for t in &p.threads {
            let name = if p.jvm_internal { JVM_THREADS } else { &t.name };
            *pools.entry(name.to_string()).or_default() += t.dispatches;
        }
        for (list, into) in [
            (&p.held_by, &mut c.held_by),
            (&p.notified_by, &mut c.notified_by),
        ] {
            for o in list {
                match into.iter_mut().find(|x| x.name == o.name) {
                    Some(x) => x.dispatches += o.dispatches,
                    None => into.push(o.clone()),
                }
            }
        }
    }
    let mut out: Vec<Cause> = order
        .into_iter()
        .filter_map(|k| by.remove(&k))
        .map(|(mut c, threads, pools)| {
            if c.object == "…" {
                c.object.clear();
            }
            let (name, dispatches) = pools
                .iter()
                .max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0)))
                .map(|(n, d)| (n.clone(), *d))
                .unwrap_or_default();
            c.threads = PathThreads {
                count: threads.get(&name).map_or(0, |s| s.len() as u64),
                name,
                dispatches,
            };
            c.more_threads = pools.len().saturating_sub(1) as u64;
            for list in [&mut c.held_by, &mut c.notified_by] {
                list.sort_by(|x, y| y.dispatches.cmp(&x.dispatches).then(x.name.cmp(&y.name)));
            }
            c
        })
        .collect();
    out.sort_by(|x, y| {
        y.idle_ns
            .cmp(&x.idle_ns)
            .then_with(|| y.dispatches.cmp(&x.dispatches))
    });
    out
}
