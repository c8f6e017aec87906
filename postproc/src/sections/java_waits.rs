//! The report's section of idle-causing Java waits (`--view java`): the
//! flight recorders' waits the pass joined to dispatches
//! ([`crate::pass::java_waits`]), by stack and reason, most idle first.

use serde::Serialize;

use idleflow_format::FrameKind;

use crate::pass::java_waits::{JavaIdle, JavaWaits, PathIdle, PathKey};
use crate::path;
use crate::reasons::Reason;

/// One frame of a [`JavaPathRow`]: a path frame (`pkg.Class.method`, its
/// line, and its kind: how it ran, JIT-compiled winning where the waits of
/// the path saw it run several ways), with every way it ran.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FrameRow {
    /// The frame as every path has it.
    #[serde(flatten)]
    pub frame: path::Frame,
    /// How it ran when the waits of this path began: `interpreted`, `jit`,
    /// `inlined`, `native` or `java` (not said); several where it differed.
    pub kinds: Vec<&'static str>,
}

/// Another thread a wait names (previous owner, notifier).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OtherThreadRow {
    /// Its Java name.
    pub name: String,
    /// Dispatches to idle of this path that named it.
    pub dispatches: u64,
}

/// An idle-causing Java path: a wait stack with its JVM reason.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JavaPathRow {
    /// The JVM.
    pub pid: u32,
    /// `monitor enter`, `monitor wait`, `park`, `sleep`, `socket read`, …
    pub reason: Reason,
    /// What it waited on: the monitor's or parked-on class, the socket's
    /// address, the file's path (empty if none).
    pub object: String,
    /// The previous owners (monitor enter) or notifiers (monitor wait),
    /// most frequent first.
    pub others: Vec<OtherThreadRow>,
    /// The stack, top (the waiting method) first.
    pub frames: Vec<FrameRow>,
    /// The JVM cut the stack at its depth limit.
    pub truncated: bool,
    /// Dispatches to idle that followed a thread leaving in this wait.
    pub idle_dispatches_to: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// `idle_ns` as % of the idle after all Java threads' leaving.
    pub share_pct: f64,
}

/// One JVM's flight recording, as read.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JvmWaitsRow {
    /// The JVM.
    pub pid: u32,
    /// `jfr`.
    pub source: String,
    /// Wait events stored.
    pub waits: u64,
    /// Of those, without a stack.
    pub waits_without_stack: u64,
    /// Size of the JVM's recording file, bytes.
    pub file_bytes: u64,
    /// `file_bytes` per wait event.
    pub bytes_per_wait: f64,
    /// Waits shorter than this were not recorded, ns.
    pub threshold_ns: u64,
    /// Contended monitor enters shorter than this were not recorded, ns
    /// (`threshold_ns` in recordings that did not set it apart).
    pub monitor_enter_threshold_ns: u64,
    /// How long of its flight recording every wait was recorded whatever
    /// its length (idleflow's policy, while its threads blocked rarely), ns.
    pub all_waits_ns: u64,
    /// When its flight recording ran, ns on the recording's clock.
    pub recorded_from_ns: u64,
    /// See `recorded_from_ns`.
    pub recorded_to_ns: u64,
}

/// The Java waits section of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JavaWaitsSection {
    /// Each JVM's recording.
    pub jvms: Vec<JvmWaitsRow>,
    /// Dispatches to idle caused by Java threads leaving a CPU.
    pub java_idle_dispatches_to: u64,
    /// Idle time that followed them, ns.
    pub java_idle_ns: u64,
    /// Of those, inside no wait event (running, native or JVM-internal
    /// waits, or waits under the threshold): dispatches.
    pub unjoined_idle_dispatches_to: u64,
    /// Their idle time, ns.
    pub unjoined_idle_ns: u64,
    /// Dispatches to idle caused by Java threads while their JVM's flight
    /// recording did not run (before idleflow started it): not in the above.
    pub unrecorded_idle_dispatches_to: u64,
    /// Their idle time, ns.
    pub unrecorded_idle_ns: u64,
    /// Blocking switch-outs of Java threads (the join check).
    pub blocking_switch_outs: u64,
    /// Of those, inside a wait event of the same thread.
    pub blocking_inside_wait: u64,
    /// Wait events inside the window.
    pub waits_in_window: u64,
    /// Of those, containing a switch-out of their thread.
    pub waits_with_switch_out: u64,
    /// Idle-causing paths, most idle first.
    pub paths: Vec<JavaPathRow>,
    /// What went wrong reading the flight recordings, one line each.
    pub notes: Vec<String>,
}

impl JavaWaitsSection {
    /// The section for waits `w` and what the pass joined to them (`idle`)
    /// over `window`, or `None` without JVM waits.
    pub fn new(
        w: &JavaWaits,
        idle: &JavaIdle,
        window: (u64, u64),
        notes: &[String],
    ) -> Option<Self> {
        if w.is_empty() && notes.is_empty() {
            return None;
        }
        let mut paths: Vec<(&PathKey, &PathIdle)> = idle.paths.iter().collect();
        paths.sort_by(|x, y| {
            (y.1.idle_ns, y.1.dispatches, x.0).cmp(&(x.1.idle_ns, x.1.dispatches, y.0))
        });
        let paths = paths
            .into_iter()
            .map(|(&(pid, group, reason, object), p)| {
                let st = w.group(group);
                let mut others: Vec<OtherThreadRow> = p
                    .others
                    .iter()
                    .map(|(&sym, &n)| OtherThreadRow {
                        name: w.symbol(pid, sym).to_string(),
                        dispatches: n,
                    })
                    .collect();
                others.sort_by(|a, b| (b.dispatches, &a.name).cmp(&(a.dispatches, &b.name)));
                JavaPathRow {
                    pid,
                    reason: Reason::Jvm(reason),
                    object: w.symbol(pid, object).to_string(),
                    others,
                    frames: w
                        .group_frames(pid, group)
                        .into_iter()
                        .map(|(frame, bits)| FrameRow {
                            frame,
                            kinds: FrameKind::ALL
                                .iter()
                                .filter(|k| bits & (1 << k.code()) != 0)
                                .map(|k| k.name())
                                .collect(),
                        })
                        .collect(),
                    truncated: st.is_some_and(|s| s.truncated),
                    idle_dispatches_to: p.dispatches,
                    idle_ns: p.idle_ns,
                    share_pct: if idle.java_idle.1 == 0 {
                        0.0
                    } else {
                        (p.idle_ns as f64 * 10_000.0 / idle.java_idle.1 as f64).round() / 100.0
                    },
                }
            })
            .collect();
        let (waits_in_window, waits_with_switch_out) = idle
            .waits_switched(w, window.0, window.1)
            .values()
            .fold((0, 0), |s, v| (s.0 + v.0, s.1 + v.1));
        Some(JavaWaitsSection {
            jvms: w
                .jvms
                .iter()
                .map(|j| JvmWaitsRow {
                    pid: j.pid,
                    source: j.source.clone(),
                    waits: j.waits,
                    waits_without_stack: j.waits_without_stack,
                    file_bytes: j.file_bytes,
                    bytes_per_wait: j.file_bytes as f64 / j.waits.max(1) as f64,
                    threshold_ns: j.threshold_ns,
                    monitor_enter_threshold_ns: j
                        .monitor_enter_threshold_ns
                        .unwrap_or(j.threshold_ns),
                    all_waits_ns: crate::share::saturating_sum(j.all_waits.iter().map(
                        |&(a, b)| {
                            b.min(j.recorded_to_ns)
                                .saturating_sub(a.max(j.recorded_from_ns))
                        },
                    )),
                    recorded_from_ns: j.recorded_from_ns,
                    recorded_to_ns: j.recorded_to_ns,
                })
                .collect(),
            java_idle_dispatches_to: idle.java_idle.0,
            java_idle_ns: idle.java_idle.1,
            unjoined_idle_dispatches_to: idle.unjoined_idle.0,
            unjoined_idle_ns: idle.unjoined_idle.1,
            unrecorded_idle_dispatches_to: idle.unrecorded_idle.0,
            unrecorded_idle_ns: idle.unrecorded_idle.1,
            blocking_switch_outs: idle.blocking_switch_outs,
            blocking_inside_wait: idle.inside_wait,
            waits_in_window,
            waits_with_switch_out,
            paths,
            notes: notes
                .iter()
                .cloned()
                .chain(
                    w.jvms
                        .iter()
                        .flat_map(|j| j.notes.iter().map(move |n| format!("JVM {}: {n}", j.pid))),
                )
                .collect(),
        })
    }
}
