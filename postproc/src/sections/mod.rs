//! The report's content as data: built once from an [`Analysis`], then
//! printed as text ([`crate::render::text`]) or serialized as JSON with the stable
//! field names documented in `docs/format.md`. Text and JSON carry the same
//! numbers because both come from this one structure.

pub mod arcflow;
pub mod call_paths;
pub mod folded;
pub mod idle_paths;
pub mod java_waits;
pub mod kernel_waits;
pub mod per_cpu;
pub mod root_causes;
pub mod threads;

pub use per_cpu::{CpuRow, IdleCauseRow, IntervalStats, KERNEL_IDLE_GAP_PER_WAKEUP_NS};
pub use threads::{ThreadRow, ToolThread, ToolUse};

use rustc_hash::FxHashSet;
use serde::Serialize;

use crate::pass::Analysis;
use crate::sections::arcflow::Arcflow;
use crate::sections::idle_paths::IdlePathsSection;
use crate::sections::java_waits::JavaWaitsSection;
use crate::sections::kernel_waits::KernelWaitsSection;
use crate::share::saturating_sum;

/// Where a recording cut short ends (see [`idleflow_format::CutShort`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CutShortRow {
    /// Byte offset of the first record that could not be read whole.
    pub offset: u64,
    /// Why reading stopped there.
    pub reason: String,
}

/// Dispatches to idle and the idle after them, of one origin of their
/// stacks ([`IdleStackSampling`]).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct StackSourceRow {
    /// Dispatches to idle.
    pub dispatches: u64,
    /// The idle charged to them, ns.
    pub idle_ns: u64,
}

impl From<crate::pass::kernel_waits::Caused> for StackSourceRow {
    fn from(c: crate::pass::kernel_waits::Caused) -> Self {
        StackSourceRow {
            dispatches: c.dispatches,
            idle_ns: c.idle_ns,
        }
    }
}

/// How the stacks at the switch-outs to idle were sampled, and what the
/// paths of their idle therefore rest on (recordings with
/// `RunInfo::idle_stack_budget` > 0; idleflow's own threads left out).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct IdleStackSampling {
    /// At most about this many switch-outs to idle a second on each CPU
    /// had their stacks taken, each with the same chance.
    pub budget_per_s_per_cpu: u32,
    /// Dispatches to idle with stacks of their own.
    pub own: StackSourceRow,
    /// Dispatches to idle without, carried their thread's previous stacks
    /// (its latest switch-out to idle with its own): their paths are an
    /// estimate.
    pub carried: StackSourceRow,
    /// Dispatches to idle without, whose thread had no earlier stacks.
    pub none: StackSourceRow,
}

impl IdleStackSampling {
    /// All dispatches to idle and their idle, ns.
    pub fn total(&self) -> (u64, u64) {
        let rows = [self.own, self.carried, self.none];
        (
            rows.iter().map(|r| r.dispatches).sum(),
            saturating_sum(rows.iter().map(|r| r.idle_ns)),
        )
    }
}

/// How the wakers' stacks (the release sites of the root causes) were
/// sampled (recordings with `RunInfo::waker_sample_period` > 0).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct WakerStackSampling {
    /// One wake-up in this many had its waker's stacks taken, at random.
    pub one_in: u32,
    /// And at most about this many a second on each CPU (0: no budget).
    pub budget_per_s_per_cpu: u32,
    /// Wake-ups in the window with their waker's stacks.
    pub wakeups_with_stacks: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Recording format version.
    pub format_version: u32,
    /// Window length, ns.
    pub duration_ns: u64,
    /// Window start, ns on the recording's clock (`CLOCK_MONOTONIC`).
    pub start_ns: u64,
    /// The recording's own start (= `start_ns` unless `--from` / `--to`
    /// chose a part of it).
    pub recording_start_ns: u64,
    /// Whether the report covers only a part of the recording.
    pub windowed: bool,
    /// The part starts where the program's start-up ended (`--skip-startup`).
    pub after_startup: bool,
    /// Window end, ns on the recording's clock.
    pub stop_ns: u64,
    /// Window start, wall clock, ns since the epoch.
    pub start_unix_ns: u64,
    /// Number of CPUs recorded.
    pub cpus: usize,
    /// Their numbers.
    pub cpu_ids: Vec<u32>,
    /// Recording machine's kernel.
    pub kernel_release: String,
    /// Recording machine's name.
    pub hostname: String,
    /// Which kernel events recorded the dispatches and wake-ups (`perf`,
    /// `bpf`); empty for older recordings, and then left out of the JSON.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub event_source: String,
    /// Why that source (asked for, or why eBPF could not be used).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub event_source_why: String,
    /// What named the JVMs' frames and waits (`record --java`'s modes:
    /// `vm`, `waits`, `stacks`, `tree`); empty: nothing, or an older
    /// recorder, and then left out of the JSON.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub java_frames: String,
    /// Why those (asked for, or the default and what chose it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub java_frames_why: String,
    /// How the stacks at the switch-outs to idle were sampled; absent
    /// (left out of the JSON) where every one had its stacks taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_stack_sampling: Option<IdleStackSampling>,
    /// How the wakers' stacks were sampled; absent (left out of the JSON)
    /// where the recording does not say (taken at none, or an older
    /// recorder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waker_stack_sampling: Option<WakerStackSampling>,
    /// Launched command (empty: system-wide or `--pid`).
    pub command: Vec<String>,
    /// Processes shown in the thread table (empty: all).
    pub target_pids: Vec<u32>,
    /// Why recording stopped.
    pub stop_reason: String,
    /// Exit code of the launched command.
    pub exit_code: Option<i32>,
    /// Dispatches.
    pub dispatches: u64,
    /// Wakeups.
    pub wakeups: u64,
    /// Of those, raised in an interrupt (a device's: a timer, the network, a
    /// disk; never the thread the interrupt hit).
    pub interrupt_wakeups: u64,
    /// Records the kernel dropped, all CPUs.
    pub lost_events: u64,
    /// Stream breaks, all CPUs.
    pub stream_breaks: u64,
    /// Records that reached the merge late (time-order violations).
    pub late_events: u64,
    /// Records of kinds this idleflow does not know, skipped.
    pub unknown_records: u64,
    /// Ring records the recorder could not decode.
    pub undecodable_records: u64,
    /// Per-CPU idle breakdown.
    pub per_cpu: Vec<CpuRow>,
    /// All CPUs together.
    pub total: CpuRow,
    /// A flight recorder's dump (`record --flight`): the trigger that fired,
    /// when, on what state; absent (left out of the JSON) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight: Option<idleflow_format::FlightDump>,
    /// Blocked-thread statistics, most runtime first (idleflow's own threads left out).
    pub threads: Vec<ThreadRow>,
    /// idleflow's own threads.
    pub tool: ToolUse,
    /// Set when the recording ends without its end record: it was read up
    /// to its last complete record, which ends the window.
    pub cut_short: Option<CutShortRow>,
    /// Why a JVM of the recording has no call tree, one line each: what
    /// its agent said, or that it was attached with `--pid`.
    pub no_tree: Vec<String>,
    /// The merged idle-causing paths: one per idle-causing dispatch, from
    /// the best source that covers it, summed (the report's answer).
    pub idle_paths: IdlePathsSection,
    /// Each idle interval followed down its wait chain to what held the
    /// threads up: code paths, devices, CPU contention (most idle first).
    pub root_causes: crate::sections::root_causes::RootCausesSection,
    /// Each CPU's idle over time, where the analysis split it into windows
    /// (`report --format html`, `diff`, `history`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_over_time: Option<IdleOverTime>,
    /// The arcflow call-tree section (recordings of JVMs run with the
    /// agent; `--view tree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arcflow: Option<Arcflow>,
    /// Idle-causing Java waits, from the JVMs' flight recorders (`--view java`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub java_waits: Option<JavaWaitsSection>,
    /// Idle-causing kernel waits, from the kernel stacks at the switch-outs
    /// (`--view kernel`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_waits: Option<KernelWaitsSection>,
    /// Idle-causing call paths, from the user stacks at the switch-outs
    /// (`--view user`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_paths: Option<crate::sections::call_paths::CallPathsSection>,
    /// Where the recorded threads blocked, by blocked time (recordings with
    /// stacks at every wait, `record --stacks waits`; `--view blocking`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocking_paths: Option<crate::sections::call_paths::BlockedPathsSection>,
}

/// Each CPU's idle over time: the window is split into windows of equal
/// width (the last one may reach past the window's end).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IdleOverTime {
    /// Width of each window, ns.
    pub window_ns: u64,
    /// Per CPU (in `per_cpu`'s order), its idle in each window, ns.
    pub per_cpu: Vec<Vec<u64>>,
}

impl IdleOverTime {
    /// All CPUs' idle in each window, ns.
    pub fn all_cpus(&self) -> Vec<u64> {
        let n = self.per_cpu.iter().map(Vec::len).max().unwrap_or(0);
        (0..n)
            .map(|i| saturating_sum(self.per_cpu.iter().map(|c| c.get(i).copied().unwrap_or(0))))
            .collect()
    }
}

/// The per-source views a report keeps (`report --view`): each is one
/// source's own section, beside the merged paths every report has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Views {
    /// The arcflow call tree (`--java tree`).
    pub tree: bool,
    /// The flight recorders' Java waits.
    pub java: bool,
    /// The user stacks' call paths.
    pub user: bool,
    /// The kernel stacks' waits.
    pub kernel: bool,
    /// The blocking paths (`record --stacks waits`).
    pub blocking: bool,
}

impl Views {
    /// Every view.
    pub fn all() -> Self {
        Views {
            tree: true,
            java: true,
            user: true,
            kernel: true,
            blocking: true,
        }
    }
}

impl Report {
    /// Builds the report; `max_causes` limits idle causes per CPU.
    pub fn new(a: &Analysis, max_causes: usize) -> Self {
        let duration = a.duration_ns();
        let name = |tid: u32| -> (u32, String) {
            match tid {
                0 => (0, "swapper".into()),
                u32::MAX => (0, "[exited thread]".into()),
                _ => a
                    .names
                    .get(&tid)
                    .cloned()
                    .unwrap_or_else(|| (0, "[unknown thread]".into())),
            }
        };
        let (per_cpu, total) = per_cpu::rows(a, max_causes, &name);
        let mut caused: rustc_hash::FxHashMap<u32, (u64, u64)> = Default::default();
        for ((_, tid), c) in &a.causes {
            let e = caused.entry(*tid).or_default();
            e.0 = e.0.saturating_add(c.dispatches);
            e.1 = e.1.saturating_add(c.idle_ns);
        }
        let arcflow = arcflow::section(a, &caused);
        let tool = threads::tool_use(a, &caused, duration);
        let threads = threads::rows(a, &caused, &name);
        let java_waits =
            JavaWaitsSection::new(&a.java, &a.java_idle, a.window, &no_waits_reasons(a));
        let call_paths = call_paths(a);
        let mut idle_paths = IdlePathsSection::new(a, total.idle_ns);
        let root_causes = crate::sections::root_causes::RootCausesSection::new(a, total.idle_ns);
        // What the sources said about what they miss, for every report.
        idle_paths.notes.extend(
            java_waits
                .iter()
                .flat_map(|j| j.notes.iter())
                .chain(call_paths.iter().flat_map(|c| c.notes.iter()))
                .cloned(),
        );
        Report {
            format_version: idleflow_format::VERSION,
            duration_ns: duration,
            start_ns: a.window.0,
            recording_start_ns: a.info.start_ns,
            windowed: a.windowed,
            after_startup: a.after_startup,
            stop_ns: a.window.1,
            start_unix_ns: a.info.start_unix_ns,
            cpus: per_cpu.len(),
            cpu_ids: per_cpu.iter().filter_map(|c| c.cpu).collect(),
            kernel_release: a.info.kernel_release.clone(),
            hostname: a.info.hostname.clone(),
            event_source: a.info.event_source.clone(),
            event_source_why: a.info.event_source_why.clone(),
            java_frames: a.info.java_frames.clone(),
            java_frames_why: a.info.java_frames_why.clone(),
            idle_stack_sampling: idle_stack_sampling(a),
            waker_stack_sampling: (a.info.waker_sample_period > 0).then_some(WakerStackSampling {
                one_in: a.info.waker_sample_period,
                budget_per_s_per_cpu: a.info.waker_stack_budget,
                wakeups_with_stacks: a.wakeups_with_stacks,
            }),
            command: a.info.command.clone(),
            target_pids: a.info.target_pids.clone(),
            stop_reason: a.summary.stop_reason.clone(),
            flight: a.summary.flight.clone(),
            exit_code: a.summary.exit_code,
            dispatches: a.dispatches,
            wakeups: a.wakeups,
            interrupt_wakeups: a.interrupt_wakeups,
            lost_events: total.lost.max(
                a.summary
                    .lost_per_cpu
                    .iter()
                    .fold(0, |s, &l| s.saturating_add(l)),
            ),
            stream_breaks: total.breaks,
            late_events: a.summary.late_events,
            unknown_records: a.unknown_records,
            undecodable_records: a.summary.undecodable,
            idle_paths,
            root_causes,
            idle_over_time: a.windows.as_ref().map(|w| IdleOverTime {
                window_ns: w.width(),
                per_cpu: a.cpu_windows.iter().map(|s| s.ns().to_vec()).collect(),
            }),
            arcflow,
            java_waits,
            kernel_waits: KernelWaitsSection::new(&a.kernel, &a.tool_tids, idle_caused(a), |tid| {
                a.names
                    .get(&tid)
                    .map_or_else(|| format!("tid {tid}"), |(_, comm)| comm.clone())
            }),
            call_paths,
            blocking_paths: crate::sections::call_paths::BlockedPathsSection::new(
                &a.kernel,
                &a.tool_tids,
                |tid| a.shows(tid),
                |tid| process_and_thread(a, tid),
            ),
            per_cpu,
            total,
            threads,
            tool,
            no_tree: no_tree_reasons(a),
            cut_short: a.cut_short.as_ref().map(|c| CutShortRow {
                offset: c.offset,
                reason: c.reason.clone(),
            }),
        }
    }
}

impl Report {
    /// Keeps the per-source sections `views` asks for and drops the others
    /// (the merged paths, the per-CPU and thread tables stay).
    pub fn keep_views(&mut self, views: Views) {
        if !views.tree {
            self.arcflow = None;
        }
        if !views.java {
            self.java_waits = None;
        }
        if !views.user {
            self.call_paths = None;
        }
        if !views.kernel {
            self.kernel_waits = None;
        }
        if !views.blocking {
            self.blocking_paths = None;
        }
    }
}

/// With sampled stacks, where the stacks of the dispatches to idle came
/// from (idleflow's own threads left out).
fn idle_stack_sampling(a: &Analysis) -> Option<IdleStackSampling> {
    if a.info.idle_stack_budget == 0 {
        return None;
    }
    let s = a.kernel.stack_sources(&a.tool_tids)?;
    Some(IdleStackSampling {
        budget_per_s_per_cpu: a.info.idle_stack_budget,
        own: s.own.into(),
        carried: s.carried.into(),
        none: s.none.into(),
    })
}

/// Dispatches to idle and the idle after them, caused by all threads but
/// idleflow's own.
fn idle_caused(a: &Analysis) -> (u64, u64) {
    a.causes
        .iter()
        .filter(|((_, tid), _)| !a.tool_tids.contains(tid))
        .fold((0, 0), |(n, ns), (_, c)| {
            (n + c.dispatches, ns.saturating_add(c.idle_ns))
        })
}

/// (process name, thread name) of `tid`.
fn process_and_thread(a: &Analysis, tid: u32) -> (String, String) {
    let (pid, thread) = a
        .names
        .get(&tid)
        .map_or_else(|| (0, format!("tid {tid}")), |(p, c)| (*p, c.clone()));
    let process = a
        .names
        .get(&pid)
        .map_or_else(|| format!("pid {pid}"), |(_, c)| c.clone());
    (process, thread)
}

/// The call paths of the user stacks, with a note where JVMs ran without
/// their perf map (their JIT frames are then `[unknown]`).
fn call_paths(a: &Analysis) -> Option<crate::sections::call_paths::CallPathsSection> {
    let mut section = crate::sections::call_paths::CallPathsSection::new(
        &a.kernel,
        &a.tool_tids,
        |tid| a.shows(tid),
        a.causes
            .iter()
            .filter(|((_, tid), _)| !a.tool_tids.contains(tid) && a.shows(*tid))
            .fold((0, 0), |(n, ns), (_, c)| {
                (n + c.dispatches, ns.saturating_add(c.idle_ns))
            }),
        |tid| process_and_thread(a, tid),
    );
    if let Some(cp) = section.as_mut() {
        let perf_maps = a
            .kernel
            .user_symbols
            .as_ref()
            .is_some_and(|s| s.modules.iter().any(|m| m.path.starts_with("/tmp/perf-")));
        let unknown = cp.paths.iter().any(|p| {
            p.frames
                .iter()
                .any(|f| f.kind == crate::path::FrameKind::Unknown)
        });
        let jvms = a.jvm_pids();
        let walked = a.summary.java_walks.as_ref();
        if let Some(w) = walked {
            cp.notes.push(java_walks_note(w));
        }
        if unknown && !perf_maps && !jvms.is_empty() && walked.is_none_or(|w| w.walked == 0) {
            cp.notes.push(format!(
                "JVM {}: its JIT-compiled frames show as [unknown]; `record --java waits,stacks` \
                 names them (HotSpot's frame pointers and perf map, no agent)",
                jvms.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    section
}

/// What the walks of blocked Java threads found (`record --java vm`).
fn java_walks_note(w: &idleflow_format::JavaWalkCounts) -> String {
    let jvms = if w.jvms.is_empty() {
        "no HotSpot JVM seen".to_string()
    } else {
        w.jvms.join("; ")
    };
    let wakers = if w.wakers > 0 {
        format!("; {} wakers' stacks walked", w.wakers)
    } else {
        String::new()
    };
    let deoptimized = if w.deoptimized > 0 {
        format!("; {} deoptimized frames", w.deoptimized)
    } else {
        String::new()
    };
    format!(
        "Java frames from the JVMs' own structures ({jvms}): {} of {} switch-outs of their threads          walked, {} ran again first, {} without Java frames, {} failed{wakers}{deoptimized}; {:.1} µs a walk",
        w.walked,
        w.copies,
        w.ran_first,
        w.no_java_frames,
        w.failed,
        w.walk_ns as f64 / 1e3 / (w.walked + w.wakers).max(1) as f64
    )
}

/// What went wrong with the JVMs' flight recordings: the recorder's notes,
/// and each JVM that ran while its waits were recorded but left none.
fn no_waits_reasons(a: &Analysis) -> Vec<String> {
    let mut v = a.summary.java_notes.clone();
    if a.info.java_waits {
        let with: FxHashSet<u32> = a.java.jvms.iter().map(|j| j.pid).collect();
        for pid in a.jvm_pids() {
            if !with.contains(&pid) && !v.iter().any(|n| n.starts_with(&format!("JVM {pid}:"))) {
                v.push(format!(
                    "JVM {pid}: no Java waits: it left no flight recording (a runtime without \
                     the jdk.jfr module, JFR disabled, or the JVM was killed before it could write it)"
                ));
            }
        }
    }
    v
}

/// Why JVMs of the recording have no call tree: their agents' notes, and a
/// JVM watched with `--pid` (HotSpot names a thread `VM Thread`), which no
/// agent was loaded into.
fn no_tree_reasons(a: &Analysis) -> Vec<String> {
    let mut v = a.summary.agent_notes.clone();
    let attached = a.info.command.is_empty() && !a.info.target_pids.is_empty();
    if attached {
        // JVMs with Java waits have their paths from those.
        let with_paths: FxHashSet<u32> = a
            .views
            .jvms
            .iter()
            .map(|j| j.pid)
            .chain(a.java.jvms.iter().map(|j| j.pid))
            .collect();
        let jvms: Vec<u32> = a
            .jvm_pids()
            .into_iter()
            .filter(|p| !with_paths.contains(p))
            .collect();
        for pid in jvms {
            v.push(format!(
                "JVM {pid}: attached with --pid: no agent (it loads at a JVM's start); \
                 record `-- java …` for a call tree"
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{
        Dispatch, NodeTag, PrevState, Record, RunInfo, RunSummary, ThreadTree, TreeDump, TreeNode,
        Writer, IDLE_TID,
    };

    /// A recording announced with CPUs 0 and 1 whose traced thread also runs
    /// on CPU 5 (hot-plugged during the window): the arcflow tag rows name
    /// CPU 5, not `null`.
    #[test]
    fn tag_rows_name_a_hot_plugged_cpu() {
        let info = RunInfo {
            command: vec!["java".into()],
            target_pids: vec![77],
            ..RunInfo::minimal(vec![0, 1], 1_000)
        };
        let node = (77u64 << 32) | 2;
        let tree = TreeDump {
            pid: 77,
            final_dump: true,
            time_ns: 10_000,
            methods: vec!["Main.run".into()],
            threads: vec![ThreadTree {
                pid: 77,
                tid: 78,
                name: "main".into(),
                nodes: vec![TreeNode {
                    id: node,
                    parent_id: 0,
                    method: 0,
                    level: 1,
                    calls: 1,
                    callees: 0,
                    base_ns: 5,
                    mmax_ns: 5,
                    ao: 0,
                    ab: 0,
                    dip: 0,
                    idle: 0,
                }],
            }],
            unmatched_exits: 0,
            agent_tids: vec![],
        };
        let mut w = Writer::new(Vec::new(), &info).unwrap();
        let mut t = 2_000;
        for cpu in [0, 5, 5] {
            for (prev, next, tag) in [
                (IDLE_TID, 78, NodeTag::Untraced),
                (78, IDLE_TID, NodeTag::Current(node)),
            ] {
                t += 100;
                w.write(&Record::Dispatch(Dispatch {
                    time: t,
                    cpu,
                    prev_tid: prev,
                    prev_state: if prev == IDLE_TID {
                        PrevState::Unknown
                    } else {
                        PrevState::Sleeping
                    },
                    next_tid: next,
                    prev_node: tag,
                }))
                .unwrap();
            }
        }
        w.write_tree_dump(&tree).unwrap();
        let bytes = w
            .finish(&RunSummary {
                stop_ns: 10_000,
                ..Default::default()
            })
            .unwrap();
        let a = Analysis::run(std::io::Cursor::new(&bytes[..])).unwrap();
        let r = Report::new(&a, 10);
        let tags = &r.arcflow.as_ref().expect("an arcflow section").tags;
        let rows: Vec<(Option<u32>, u64)> = tags.iter().map(|t| (t.cpu, t.current)).collect();
        assert!(rows.contains(&(Some(5), 2)), "{rows:?}");
        assert!(rows.contains(&(Some(0), 1)), "{rows:?}");
        assert_eq!(rows.last(), Some(&(None, 3)));
    }

    #[test]
    fn agents_notes_say_why_a_jvm_has_no_call_tree() {
        let w = Writer::new(Vec::new(), &RunInfo::minimal(vec![0], 1_000)).unwrap();
        let note = "JVM 42: agent disabled: thread work area /x: Permission denied".to_string();
        let bytes = w
            .finish(&RunSummary {
                stop_ns: 2_000,
                agent_notes: vec![note.clone()],
                ..Default::default()
            })
            .unwrap();
        let a = Analysis::run(std::io::Cursor::new(&bytes[..])).unwrap();
        let r = Report::new(&a, 10);
        assert_eq!(r.no_tree, vec![note]);
        let text = crate::render::text::render(&r, "x", &Default::default());
        assert!(
            text.contains("## No call tree\n# JVM 42: agent disabled"),
            "{text}"
        );
    }
}
