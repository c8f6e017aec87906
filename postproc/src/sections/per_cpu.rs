//! The per-CPU idle breakdown (the report's per-CPU table and its total):
//! each CPU's dispatches, idle, idle intervals, stream breaks and losses,
//! the kernel's own idle clock beside it, and the threads whose leaving
//! made it idle.
//!
//! Invariant: the total row is the saturating sum of the CPUs' rows; a
//! CPU's idle differs from the kernel's only beyond what interrupts and
//! ticks can explain (`kernel_differs`).

use idleflow_format::PrevState;
use serde::Serialize;

use crate::pass::{Analysis, IdleCause};
use crate::share::pct;

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

/// Every CPU's row (in the accounting's CPU slots) and the total, with at
/// most `max_causes` idle causes each; `name` names a thread.
pub(crate) fn rows(
    a: &Analysis,
    max_causes: usize,
    name: &impl Fn(u32) -> (u32, String),
) -> (Vec<CpuRow>, CpuRow) {
    let duration = a.duration_ns();
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
    let mut total_hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2)
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
    (per_cpu, total)
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
}
