//! The threads: the blocked-thread statistics table (runtime, timeslices,
//! waits, the idle each thread's leaving caused) and idleflow's own
//! threads, shown apart and never among the causes of idle.
//!
//! Invariant: idleflow's own threads are in [`ToolUse`] and in no
//! [`ThreadRow`].

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::pass::Analysis;
use crate::share::pct;

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
    /// With the eBPF source: what its programs cost in the kernel, as the
    /// kernel timed them over part of the window (absent: not timed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_programs: Option<KernelPrograms>,
    /// The merge deferred past the window (`IDLEFLOW_DEFER=1`): the
    /// recorder's CPU after the window, and the bytes it spooled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deferred_merge: Option<idleflow_format::DeferredMerge>,
}

/// The eBPF programs' cost in the kernel (`RunSummary::kernel_cost`):
/// the recorder times them a tenth of every second.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct KernelPrograms {
    /// Their CPU time as % of one CPU, on average over the timed seconds.
    pub cpu_pct_of_one: f64,
    /// ns a run, on average.
    pub ns_per_run: f64,
    /// ns of the recording they were timed over.
    pub timed_ns: u64,
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

/// idleflow's own threads: their CPU, wake-ups and the idle after them;
/// `caused`: tid → (dispatches to idle, idle ns) its leaving caused.
pub(crate) fn tool_use(
    a: &Analysis,
    caused: &FxHashMap<u32, (u64, u64)>,
    duration: u64,
) -> ToolUse {
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
    tool.deferred_merge = a.summary.deferred_merge.clone();
    tool.kernel_programs = a.summary.kernel_cost.as_ref().and_then(|k| {
        Some(KernelPrograms {
            cpu_pct_of_one: pct(k.run_ns, k.timed_ns),
            ns_per_run: k.ns_per_run()?,
            timed_ns: k.timed_ns,
        })
    });
    tool
}

/// The shown threads but idleflow's own, most runtime first.
pub(crate) fn rows(
    a: &Analysis,
    caused: &FxHashMap<u32, (u64, u64)>,
    name: &impl Fn(u32) -> (u32, String),
) -> Vec<ThreadRow> {
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
    threads
}
