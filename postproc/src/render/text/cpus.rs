//! The per-CPU sections (`--per-cpu`): each CPU's idle (dispatches to and
//! from idle, idle and unknown time, the kernel's own idle, breaks, losses,
//! the idle intervals' quantiles) and the threads whose leaving made a CPU
//! idle, all CPUs together (`--threads`) or each shown CPU's own
//! (`--per-cpu`). Without the table, the notes where a CPU's idle differs
//! from the kernel's beyond what explains it still print.
//!
//! Invariant: above [`MANY_CPUS`] CPUs the table shows the most and the
//! least idle ones, a line saying how many lie between, and a histogram;
//! the total row always comes last.

use std::fmt::{self, Write};

use super::layout::{count, fit, ms, COMM, WIDTH};
use crate::sections::{CpuRow, Report};

/// Above this many CPUs the per-CPU table shows the extremes only.
const MANY_CPUS: usize = 16;
/// The most and the least idle CPUs shown then.
const EXTREME_CPUS: usize = 5;

/// A CPU's number, `all` for the total.
fn cpu_name(c: &CpuRow) -> String {
    c.cpu.map_or("all".into(), |n| n.to_string())
}

/// The per-CPU table, then the notes on the kernel's idle.
pub(super) fn render_cpus(o: &mut String, r: &Report) -> fmt::Result {
    writeln!(o)?;
    writeln!(o, "## Per-CPU idle")?;
    writeln!(
        o,
        "{:>4} {:>9} {:>9} {:>11} {:>7} {:>7} {:>10} {:>6} {:>6} | {:>9} {:>9} {:>9} {:>9}",
        "CPU",
        "to-idle",
        "from-idle",
        "idle ms",
        "idle%",
        "kernel%",
        "unknown ms",
        "breaks",
        "lost",
        "intervals",
        "p50 ms",
        "p99 ms",
        "max ms"
    )?;
    // Many CPUs: the most and the least idle ones, then the total.
    let rows = shown_cpus(r);
    for (i, c) in rows
        .iter()
        .copied()
        .chain(std::iter::once(&r.total))
        .enumerate()
    {
        if i == EXTREME_CPUS && rows.len() < r.per_cpu.len() {
            writeln!(
                o,
                "   … {} CPUs between (--per-cpu for every row; --format json has them all)",
                r.per_cpu.len() - rows.len()
            )?;
        }
        let window = if c.cpu.is_some() {
            r.duration_ns
        } else {
            r.duration_ns.saturating_mul(r.cpus as u64)
        };
        let kernel = c
            .kernel_idle_ns
            .map(|k| format!("{:.1}", k as f64 * 100.0 / window.max(1) as f64))
            .unwrap_or_else(|| "-".into());
        let iv = &c.idle_intervals;
        writeln!(
            o,
            "{:>4} {:>9} {:>9} {:>11} {:>7.2} {:>7} {:>10} {:>6} {:>6} | {:>9} {:>9} {:>9} {:>9}",
            cpu_name(c),
            count(c.idle_dispatches_to),
            count(c.idle_dispatches_from),
            ms(c.idle_ns),
            c.idle_pct,
            kernel,
            ms(c.unknown_ns),
            c.breaks,
            c.lost,
            count(iv.count),
            ms(iv.p50_ns),
            ms(iv.p99_ns),
            ms(iv.max_ns)
        )?;
    }
    if r.per_cpu.len() > MANY_CPUS {
        writeln!(o, "{}", idle_histogram(&r.per_cpu))?;
    }
    writeln!(
        o,
        "(kernel%: /proc/stat idle+iowait; its clock stops while the idle task serves interrupts and wake-ups)"
    )?;
    render_kernel_notes(o, r)
}

/// A note for each CPU whose idle differs from the kernel's beyond what
/// interrupt and wake-up work explains.
pub(super) fn render_kernel_notes(o: &mut String, r: &Report) -> fmt::Result {
    for c in r.per_cpu.iter().filter(|c| c.kernel_differs) {
        let k = c.kernel_idle_ns.unwrap_or(0);
        writeln!(
            o,
            "# NOTE: CPU {}: idle {} ms vs kernel {} ms: beyond interrupt/wake-up work (<= {} ms); records missing?",
            cpu_name(c),
            ms(c.idle_ns),
            ms(k),
            ms(c.kernel_gap_explained_ns)
        )?;
    }
    Ok(())
}

/// The CPUs the table shows: all, or with many CPUs the most and the
/// least idle ones.
fn shown_cpus(r: &Report) -> Vec<&CpuRow> {
    if r.per_cpu.len() <= MANY_CPUS {
        r.per_cpu.iter().collect()
    } else {
        let mut by_idle: Vec<&CpuRow> = r.per_cpu.iter().collect();
        by_idle.sort_by(|a, b| b.idle_pct.total_cmp(&a.idle_pct));
        let n = by_idle.len();
        by_idle
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| i < EXTREME_CPUS || i >= n - EXTREME_CPUS)
            .map(|(_, c)| c)
            .collect()
    }
}

/// One line: how many CPUs were how idle, by tenths (`0:3 10:5 …`: 3 CPUs
/// under 10 % idle, 5 from 10 to 20 %, …).
fn idle_histogram(cpus: &[CpuRow]) -> String {
    let mut buckets = [0usize; 10];
    for c in cpus {
        let b = ((c.idle_pct / 10.0).floor().max(0.0) as usize).min(9);
        buckets[b] += 1;
    }
    let parts: Vec<String> = buckets
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(i, n)| format!("{}:{n}", i * 10))
        .collect();
    fit(
        &format!("CPUs by idle% (from: how many): {}", parts.join(" ")),
        WIDTH,
    )
}

/// The threads whose leaving made a CPU idle, with their states then: all
/// CPUs together, or with `--per-cpu` each CPU's own (of the CPUs the
/// table shows) and then all together.
pub(super) fn render_idle_causes(o: &mut String, r: &Report, per_cpu: bool) -> fmt::Result {
    writeln!(o)?;
    writeln!(o, "## Threads whose leaving made a CPU idle")?;
    writeln!(
        o,
        "(state when it left: S sleeping, D disk/uninterruptible, R preempted, I idle kthread, B blocked, ? unknown)"
    )?;
    // All CPUs together; each CPU's own with --per-cpu.
    let blocks: Vec<&CpuRow> = if per_cpu {
        let mut shown = shown_cpus(r);
        shown.sort_by_key(|c| c.cpu);
        shown.into_iter().chain(std::iter::once(&r.total)).collect()
    } else {
        vec![&r.total]
    };
    for c in blocks {
        if c.idle_causes.is_empty() {
            continue;
        }
        if per_cpu {
            writeln!(o, "CPU {}:", cpu_name(c))?;
        } else {
            writeln!(o, "All CPUs (--per-cpu for each CPU):")?;
        }
        writeln!(
            o,
            "  {:>8} {:>8} {:<20} {:>10} {:>12}  states",
            "pid", "tid", "comm", "to-idle", "idle ms after"
        )?;
        for t in &c.idle_causes {
            let states: Vec<String> = t.states.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            writeln!(
                o,
                "  {:>8} {:>8} {:<20} {:>10} {:>12}  {}",
                t.pid,
                t.tid,
                fit(&t.comm, COMM),
                count(t.idle_dispatches_to),
                ms(t.idle_ns),
                states.join(" ")
            )?;
        }
    }
    Ok(())
}
