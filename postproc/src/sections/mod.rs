//! The report's content as data: built once from an [`Analysis`], then
//! printed as text ([`crate::render::text`]) or serialized as JSON with the stable
//! field names documented in `docs/format.md`. Text and JSON carry the same
//! numbers because both come from this one structure.

pub mod arcflow;
pub mod call_paths;
pub mod idle_paths;
pub mod java_waits;
pub mod kernel_waits;
pub mod root_causes;

use rustc_hash::FxHashSet;
use serde::Serialize;

use crate::pass::{Analysis, IdleCause};
use crate::reasons::Reason;
use crate::sections::arcflow::{Arcflow, RowWait};
use crate::sections::idle_paths::IdlePathsSection;
use crate::sections::java_waits::JavaWaitsSection;
use crate::sections::kernel_waits::KernelWaitsSection;
use crate::share::{pct, saturating_sum};
use idleflow_format::PrevState;

/// Distribution of complete idle intervals (both ends seen), ns.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IntervalStats {
    /// Intervals.
    pub count: u64,
    /// Mean length.
    pub mean_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Longest.
    pub max_ns: u64,
}

/// A thread whose leaving made a CPU idle.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IdleCauseRow {
    /// Process id (0 if unknown).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: String,
    /// Dispatches to idle that followed its leaving.
    pub idle_dispatches_to: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
    /// The dispatches split by its state when it left (`S`, `D`, `R`, …).
    pub states: std::collections::BTreeMap<&'static str, u64>,
}

/// One CPU's idle breakdown (or the total over all CPUs, with `cpu` = null).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuRow {
    /// CPU number; `None` for the total.
    pub cpu: Option<u32>,
    /// Dispatches.
    pub dispatches: u64,
    /// Dispatches that left the CPU idle.
    pub idle_dispatches_to: u64,
    /// Dispatches out of idle.
    pub idle_dispatches_from: u64,
    /// Idle time, ns.
    pub idle_ns: u64,
    /// Idle time as % of the window.
    pub idle_pct: f64,
    /// Idle time per the kernel's `/proc/stat` (idle + iowait) over the
    /// same window, ns, at its tick resolution; `None` if not recorded.
    pub kernel_idle_ns: Option<u64>,
    /// How far `/proc/stat` may fall below `idle_ns` for reasons that are
    /// no error: the kernel stops its idle clock while the idle task handles
    /// interrupts and wake-ups ([`KERNEL_IDLE_GAP_PER_WAKEUP_NS`] per
    /// dispatch out of idle), plus one tick of resolution at each end, ns.
    pub kernel_gap_explained_ns: u64,
    /// Whether `/proc/stat`'s idle differs from `idle_ns` by more than
    /// `kernel_gap_explained_ns` below, or more than `unknown_ns` + two ticks
    /// above: a sign of records missing from the stream.
    pub kernel_differs: bool,
    /// Time no dispatch accounts for (after a stream break), ns: the idle
    /// time is within `[idle_ns, idle_ns + unknown_ns]`.
    pub unknown_ns: u64,
    /// Stream breaks.
    pub breaks: u64,
    /// Records the kernel dropped.
    pub lost: u64,
    /// Switch-ins of threads whose wakeup was never seen (see docs/format.md).
    pub unseen_wakeups: u64,
    /// Complete idle intervals.
    pub idle_intervals: IntervalStats,
    /// Threads whose leaving made this CPU idle, most idle time first.
    pub idle_causes: Vec<IdleCauseRow>,
}

/// One row of the blocked-thread statistics table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ThreadRow {
    /// Process id (0 if unknown).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: String,
    /// Time on a CPU, ns.
    pub runtime_ns: u64,
    /// Times dispatched.
    pub timeslices: u64,
    /// Longest time on a CPU in one go, ns.
    pub max_timeslice_ns: u64,
    /// Times it left a CPU not runnable.
    pub non_runnable: u64,
    /// Times preempted while runnable.
    pub preempted: u64,
    /// Time runnable but waiting for a CPU, ns.
    pub runnable_wait_ns: u64,
    /// Time blocked (not runnable), ns.
    pub blocked_ns: u64,
    /// Shares of the time it was observed: running, runnable-waiting, blocked (%).
    pub running_pct: f64,
    /// See `running_pct`.
    pub runnable_pct: f64,
    /// See `running_pct`.
    pub blocked_pct: f64,
    /// Dispatches to idle its leaving caused, all CPUs.
    pub idle_dispatches_caused: u64,
    /// Idle time that followed, ns.
    pub idle_ns_caused: u64,
    /// DIP: dispatches from idle on its CPU while it was away (work-area count).
    pub dip: u64,
    /// IDLE: dispatches from idle on all CPUs while it was away (work-area count).
    pub idle: u64,
}

/// idleflow's own threads in its recording: what they cost, shown once and
/// never counted among the causes of idle.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ToolUse {
    /// Their thread ids (the recorder's, the JVM agents' dump writers).
    pub tids: Vec<u32>,
    /// Their time on a CPU, ns.
    pub runtime_ns: u64,
    /// That time as % of one CPU over the window.
    pub cpu_pct_of_one: f64,
    /// Times they left a CPU not runnable (each a wake-up later).
    pub wakeups: u64,
    /// Share of all threads' such wake-ups in the window, %.
    pub wakeups_pct: f64,
    /// Dispatches to idle their leaving caused (left out of every cause table).
    pub idle_dispatches_caused: u64,
    /// Idle time that followed, ns.
    pub idle_ns_caused: u64,
    /// Idle intervals they began after waking on an idle CPU: the idle
    /// they interrupted went on, so it is charged to the dispatch that
    /// began that idle (counted in every table as its idle, not as a
    /// dispatch); and that idle, ns.
    pub idle_continued: u64,
    pub idle_ns_continued: u64,
    /// How the recorder's ring-draining thread ran (`SCHED_FIFO 10`, or
    /// ordinary and why; empty in older recordings).
    pub drain_priority: String,
    /// Each of them, most CPU first.
    pub threads: Vec<ToolThread>,
}

/// One of idleflow's own threads (see [`ToolUse`]).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ToolThread {
    /// Thread id.
    pub tid: u32,
    /// Its name (the recorder's threads, `JFR Recorder Thread`, `Attach Listener`, …).
    pub comm: String,
    /// Time on a CPU, ns.
    pub runtime_ns: u64,
    /// Times it left a CPU not runnable.
    pub wakeups: u64,
}

/// Where a recording cut short ends (see [`idleflow_format::CutShort`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CutShortRow {
    /// Byte offset of the first record that could not be read whole.
    pub offset: u64,
    /// Why reading stopped there.
    pub reason: String,
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

/// What one dispatch out of idle can take from the kernel's idle clock
/// while the idle task still holds the CPU (interrupt, softirq, wake-up
/// path): measured 12–21 µs on this project's VMs under `perf bench sched
/// pipe`, so 40 µs bounds it with room for a slower interrupt path.
pub const KERNEL_IDLE_GAP_PER_WAKEUP_NS: u64 = 40_000;

/// The part of `kernel_gap_explained_ns` and `kernel_differs` of a row.
fn kernel_check(
    idle_ns: u64,
    unknown_ns: u64,
    from_idle: u64,
    kernel: Option<u64>,
    tick_ns: u64,
) -> (u64, bool) {
    let explained = from_idle
        .saturating_mul(KERNEL_IDLE_GAP_PER_WAKEUP_NS)
        .saturating_add(tick_ns.saturating_mul(2));
    let differs = kernel.is_some_and(|k| {
        idle_ns.saturating_sub(k) > explained
            || k.saturating_sub(idle_ns.saturating_add(unknown_ns)) > tick_ns.saturating_mul(2)
    });
    (explained, differs)
}

fn states(c: &IdleCause) -> std::collections::BTreeMap<&'static str, u64> {
    PrevState::ALL
        .iter()
        .filter(|s| c.by_state[s.code() as usize] > 0)
        .map(|s| (s.letter(), c.by_state[s.code() as usize]))
        .collect()
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
        let hz = a.info.user_hz.max(1);
        let tick_ns = 1_000_000_000 / hz;
        let kernel_idle = |cpu: u32| -> Option<u64> {
            if a.windowed {
                return None; // read at the recording's edges, not the window's
            }
            let s = a.info.proc_stat_start.iter().find(|p| p.cpu == cpu)?;
            let e = a.summary.proc_stat_stop.iter().find(|p| p.cpu == cpu)?;
            let ticks =
                (e.idle.saturating_add(e.iowait)).checked_sub(s.idle.saturating_add(s.iowait))?;
            Some(ticks.saturating_mul(1_000_000_000) / hz)
        };
        let mut per_cpu = Vec::new();
        let mut total_hist =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2)
                .expect("constant bounds are valid");
        let mut all_causes: rustc_hash::FxHashMap<u32, IdleCause> = Default::default();
        let empty = total_hist.clone();
        for (i, c) in a.accounting.cpus().iter().enumerate() {
            let h = a.intervals.get(i);
            let mut causes: Vec<(u32, &IdleCause)> = a
                .causes
                .iter()
                .filter(|((ci, tid), _)| *ci == i && !a.tool_tids.contains(tid))
                .map(|((_, tid), c)| (*tid, c))
                .collect();
            for (tid, c) in &causes {
                let e = all_causes.entry(*tid).or_default();
                e.dispatches = e.dispatches.saturating_add(c.dispatches);
                e.idle_ns = e.idle_ns.saturating_add(c.idle_ns);
                for (k, v) in c.by_state.iter().enumerate() {
                    e.by_state[k] = e.by_state[k].saturating_add(*v);
                }
            }
            causes.sort_by(|x, y| {
                (y.1.idle_ns, y.1.dispatches, x.0).cmp(&(x.1.idle_ns, x.1.dispatches, y.0))
            });
            if let Some(h) = h {
                let _ = total_hist.add(h);
            }
            let kernel_idle_ns = kernel_idle(c.cpu);
            let (kernel_gap_explained_ns, kernel_differs) = kernel_check(
                c.idle_ns,
                c.unknown_ns,
                c.idle_dispatches_from,
                kernel_idle_ns,
                tick_ns,
            );
            per_cpu.push(CpuRow {
                cpu: Some(c.cpu),
                dispatches: c.dispatches,
                idle_dispatches_to: c.idle_dispatches_to,
                idle_dispatches_from: c.idle_dispatches_from,
                idle_ns: c.idle_ns,
                idle_pct: pct(c.idle_ns, duration),
                kernel_idle_ns,
                kernel_gap_explained_ns,
                kernel_differs,
                unknown_ns: c.unknown_ns,
                breaks: c.breaks,
                lost: c.lost,
                unseen_wakeups: c.unseen_wakeups,
                idle_intervals: interval_stats(h.unwrap_or(&empty)),
                idle_causes: causes
                    .iter()
                    .take(max_causes)
                    .map(|(tid, c)| cause_row(*tid, c, &name))
                    .collect(),
            });
        }
        // Saturating: counts come from the file, which may be damaged.
        let sum = |f: fn(&CpuRow) -> u64| per_cpu.iter().map(f).fold(0, u64::saturating_add);
        let ncpu = per_cpu.len() as u64;
        let mut total_causes: Vec<(u32, IdleCause)> = all_causes.into_iter().collect();
        total_causes.sort_by(|x, y| {
            (y.1.idle_ns, y.1.dispatches, x.0).cmp(&(x.1.idle_ns, x.1.dispatches, y.0))
        });
        let kernel_total: Option<u64> = per_cpu
            .iter()
            .map(|c| c.kernel_idle_ns)
            .try_fold(0u64, |s, k| k.map(|k| s.saturating_add(k)));
        let total = CpuRow {
            cpu: None,
            dispatches: sum(|c| c.dispatches),
            idle_dispatches_to: sum(|c| c.idle_dispatches_to),
            idle_dispatches_from: sum(|c| c.idle_dispatches_from),
            idle_ns: sum(|c| c.idle_ns),
            idle_pct: pct(sum(|c| c.idle_ns), duration.saturating_mul(ncpu)),
            kernel_idle_ns: kernel_total,
            kernel_gap_explained_ns: sum(|c| c.kernel_gap_explained_ns),
            kernel_differs: per_cpu.iter().any(|c| c.kernel_differs),
            unknown_ns: sum(|c| c.unknown_ns),
            breaks: sum(|c| c.breaks),
            lost: sum(|c| c.lost),
            unseen_wakeups: sum(|c| c.unseen_wakeups),
            idle_intervals: interval_stats(&total_hist),
            idle_causes: total_causes
                .iter()
                .take(max_causes)
                .map(|(tid, c)| cause_row(*tid, c, &name))
                .collect(),
        };
        let mut caused: rustc_hash::FxHashMap<u32, (u64, u64)> = Default::default();
        for ((_, tid), c) in &a.causes {
            let e = caused.entry(*tid).or_default();
            e.0 = e.0.saturating_add(c.dispatches);
            e.1 = e.1.saturating_add(c.idle_ns);
        }
        let mut arcflow = Arcflow::new(
            &a.views,
            &a.summary,
            &a.node_idle,
            // Every CPU the accounting saw, hot-plugged ones included,
            // in the order of its CPU slots.
            &a.accounting
                .cpus()
                .iter()
                .map(|c| c.cpu)
                .collect::<Vec<_>>(),
            &a.view_options.arcflow,
        );
        if let Some(af) = arcflow.as_mut() {
            // The JVMs' reasons, named from their flight recordings.
            for row in &mut af.rows {
                let mut waits: Vec<RowWait> = row
                    .own
                    .waits
                    .iter()
                    .map(|w| RowWait {
                        reason: Reason::Jvm(w.reason),
                        object: if w.object == 0 {
                            String::new()
                        } else {
                            a.java.symbol(row.pid, w.object).to_string()
                        },
                        idle_dispatches: w.idle_dispatches,
                        idle_ns: w.idle_ns,
                        share_pct: pct(w.idle_ns, row.own.idle_ns),
                    })
                    .collect();
                waits.sort_by(|x, y| y.idle_ns.cmp(&x.idle_ns).then(x.reason.cmp(&y.reason)));
                row.waits = waits;
                row.native = row_native(a, &row.own.native, row.own.idle_ns);
            }
            for j in &mut af.jvms {
                j.process_idle_ns = caused
                    .iter()
                    .filter(|(tid, _)| {
                        !a.tool_tids.contains(tid)
                            && a.names.get(tid).is_some_and(|(pid, _)| *pid == j.pid)
                    })
                    .fold(0, |s, (_, (_, ns))| s.saturating_add(*ns));
            }
        }
        let mut tool = ToolUse::default();
        let mut all_wakeups = 0u64;
        for t in a.accounting.threads() {
            all_wakeups = all_wakeups.saturating_add(t.non_runnable);
            if a.tool_tids.contains(&t.tid) {
                tool.tids.push(t.tid);
                tool.threads.push(ToolThread {
                    tid: t.tid,
                    comm: a
                        .names
                        .get(&t.tid)
                        .map(|(_, c)| c.clone())
                        .unwrap_or_default(),
                    runtime_ns: t.runtime_ns,
                    wakeups: t.non_runnable,
                });
                tool.runtime_ns = tool.runtime_ns.saturating_add(t.runtime_ns);
                tool.wakeups = tool.wakeups.saturating_add(t.non_runnable);
                let (ic, ins) = caused.get(&t.tid).copied().unwrap_or_default();
                tool.idle_dispatches_caused = tool.idle_dispatches_caused.saturating_add(ic);
                tool.idle_ns_caused = tool.idle_ns_caused.saturating_add(ins);
            }
        }
        tool.tids.sort_unstable();
        tool.threads
            .sort_by(|x, y| y.runtime_ns.cmp(&x.runtime_ns).then(x.tid.cmp(&y.tid)));
        tool.cpu_pct_of_one = pct(tool.runtime_ns, duration);
        tool.wakeups_pct = pct(tool.wakeups, all_wakeups);
        tool.drain_priority = a.summary.drain_priority.clone();
        (tool.idle_continued, tool.idle_ns_continued) = a.continued_idle;
        let mut threads: Vec<ThreadRow> = a
            .accounting
            .threads()
            .filter(|t| a.shows(t.tid) && !a.tool_tids.contains(&t.tid))
            .map(|t| {
                let (pid, comm) = name(t.tid);
                let observed = t
                    .runtime_ns
                    .saturating_add(t.runnable_wait_ns)
                    .saturating_add(t.blocked_ns);
                let (ic, ins) = caused.get(&t.tid).copied().unwrap_or_default();
                ThreadRow {
                    pid,
                    tid: t.tid,
                    comm,
                    runtime_ns: t.runtime_ns,
                    timeslices: t.timeslices,
                    max_timeslice_ns: t.max_timeslice_ns,
                    non_runnable: t.non_runnable,
                    preempted: t.preempted,
                    runnable_wait_ns: t.runnable_wait_ns,
                    blocked_ns: t.blocked_ns,
                    running_pct: pct(t.runtime_ns, observed),
                    runnable_pct: pct(t.runnable_wait_ns, observed),
                    blocked_pct: pct(t.blocked_ns, observed),
                    idle_dispatches_caused: ic,
                    idle_ns_caused: ins,
                    dip: t.dip,
                    idle: t.idle,
                }
            })
            .collect();
        threads.sort_by(|x, y| (y.runtime_ns, x.tid).cmp(&(x.runtime_ns, y.tid)));
        let java_waits = JavaWaitsSection::new(&a.java, a.window, &no_waits_reasons(a));
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
            command: a.info.command.clone(),
            target_pids: a.info.target_pids.clone(),
            stop_reason: a.summary.stop_reason.clone(),
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

/// The native paths beneath a tree row: its stacks named and merged by
/// (kernel wait, user frames), most idle first.
fn row_native(
    a: &Analysis,
    stacks: &[crate::pass::nodes::NodeStacks],
    row_idle_ns: u64,
) -> Vec<crate::sections::arcflow::RowNative> {
    let mut rows: Vec<crate::sections::arcflow::RowNative> = Vec::new();
    for s in stacks {
        let wait = crate::sections::call_paths::wait_of(&a.kernel, s.kernel);
        let frames = if s.user == 0 {
            Vec::new()
        } else {
            crate::sections::call_paths::user_path(&a.kernel, s.user)
        };
        match rows
            .iter_mut()
            .find(|r| r.wait == wait && r.frames == frames)
        {
            Some(r) => {
                r.idle_dispatches = r.idle_dispatches.saturating_add(s.idle_dispatches);
                r.idle_ns = r.idle_ns.saturating_add(s.idle_ns);
            }
            None => rows.push(crate::sections::arcflow::RowNative {
                wait,
                frames,
                idle_dispatches: s.idle_dispatches,
                idle_ns: s.idle_ns,
                share_pct: 0.0,
            }),
        }
    }
    for r in &mut rows {
        r.share_pct = pct(r.idle_ns, row_idle_ns);
    }
    rows.sort_by(|x, y| {
        y.idle_ns
            .cmp(&x.idle_ns)
            .then_with(|| x.frames.cmp(&y.frames))
    });
    rows
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
        if unknown && !perf_maps && !jvms.is_empty() {
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

fn interval_stats(h: &hdrhistogram::Histogram<u64>) -> IntervalStats {
    if h.is_empty() {
        return IntervalStats {
            count: 0,
            mean_ns: 0,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
        };
    }
    IntervalStats {
        count: h.len(),
        mean_ns: h.mean().round() as u64,
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        max_ns: h.max(),
    }
}

fn cause_row(tid: u32, c: &IdleCause, name: &impl Fn(u32) -> (u32, String)) -> IdleCauseRow {
    let (pid, comm) = name(tid);
    IdleCauseRow {
        pid,
        tid,
        comm,
        idle_dispatches_to: c.dispatches,
        idle_ns: c.idle_ns,
        states: states(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{
        Dispatch, NodeTag, Record, RunInfo, RunSummary, ThreadTree, TreeDump, TreeNode, Writer,
        IDLE_TID,
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
    fn the_kernel_column_is_flagged_only_beyond_interrupt_and_wake_up_work() {
        let tick = 10_000_000;
        // 1,000 wake-ups may hide 40 ms from the kernel's idle clock, + 2 ticks.
        let (explained, differs) = kernel_check(1_000_000_000, 0, 1_000, Some(945_000_000), tick);
        assert_eq!(explained, 60_000_000);
        assert!(!differs);
        assert!(kernel_check(1_000_000_000, 0, 1_000, Some(935_000_000), tick).1);
        // The kernel above ours: only by the ticks, or by unknown time.
        assert!(!kernel_check(1_000_000_000, 0, 10, Some(1_015_000_000), tick).1);
        assert!(kernel_check(1_000_000_000, 0, 10, Some(1_030_000_000), tick).1);
        assert!(!kernel_check(1_000_000_000, 50_000_000, 10, Some(1_030_000_000), tick).1);
        assert!(!kernel_check(1_000_000_000, 0, 10, None, tick).1);
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
