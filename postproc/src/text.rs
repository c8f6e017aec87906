//! The report as text for people: aligned tables, times in ms, counts with
//! thousands separators. Pure formatting of a [`Report`]: no numbers are
//! computed here that the JSON does not carry.

use std::fmt::Write;

use crate::report::{CpuRow, Report};

/// Options of the text layout.
#[derive(Debug, Clone)]
pub struct TextOptions {
    /// Threads shown in the blocked-thread table (JSON has all).
    pub max_threads: usize,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions { max_threads: 25 }
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A thread name cut to the column's 16 characters (the kernel's own limit,
/// which kworker descriptions exceed).
fn comm16(comm: &str) -> String {
    comm.chars().take(16).collect()
}

fn cpu_name(c: &CpuRow) -> String {
    c.cpu.map_or("all".into(), |n| n.to_string())
}

/// Renders `r` as text.
pub fn render(r: &Report, source: &str, opts: &TextOptions) -> String {
    let mut o = String::new();
    let _ = render_into(&mut o, r, source, opts);
    o
}

fn render_into(o: &mut String, r: &Report, source: &str, opts: &TextOptions) -> std::fmt::Result {
    writeln!(o, "# idleflow report of {source}")?;
    let what = if r.command.is_empty() {
        if r.target_pids.is_empty() {
            "system-wide".to_string()
        } else {
            format!("pid {:?}", r.target_pids)
        }
    } else {
        format!("`{}`", r.command.join(" "))
    };
    let exit = r
        .exit_code
        .map(|c| format!(", exit code {c}"))
        .unwrap_or_default();
    writeln!(
        o,
        "# {what}: {:.3} s on {} CPUs ({}), kernel {}; stopped: {}{exit}",
        r.duration_ns as f64 / 1e9,
        r.cpus,
        r.hostname,
        r.kernel_release,
        r.stop_reason
    )?;
    writeln!(
        o,
        "# {} dispatches, {} wakeups ({} unseen), {} lost events, {} stream breaks{}",
        count(r.dispatches),
        count(r.wakeups),
        count(r.total.unseen_wakeups),
        count(r.lost_events),
        count(r.stream_breaks),
        if (r.late_events | r.unknown_records | r.undecodable_records) > 0 {
            format!(
                ", {} late, {} unknown, {} undecodable records",
                r.late_events, r.unknown_records, r.undecodable_records
            )
        } else {
            String::new()
        }
    )?;
    if let Some(cut) = &r.cut_short {
        writeln!(
            o,
            "# WARNING: this recording was cut short (the recorder was killed, the disk filled up or the machine stopped): read up to its last complete record at byte {} ({}), {:.3} s into the run; whatever came after is lost.",
            count(cut.offset),
            cut.reason,
            r.duration_ns as f64 / 1e9
        )?;
    }
    if !r.tool.tids.is_empty() {
        let t = &r.tool;
        writeln!(
            o,
            "# idleflow itself ({} thread{}): {} ms on CPU ({:.2} % of one CPU), {} wake-ups ({:.2} % of all); left out of every table below{}",
            t.tids.len(),
            if t.tids.len() == 1 { "" } else { "s" },
            ms(t.runtime_ns),
            t.cpu_pct_of_one,
            count(t.wakeups),
            t.wakeups_pct,
            if t.idle_dispatches_caused > 0 {
                format!(" (its leaving preceded {} dispatches to idle)", count(t.idle_dispatches_caused))
            } else {
                String::new()
            }
        )?;
    }
    if r.lost_events > 0 || r.stream_breaks > 0 {
        writeln!(
            o,
            "# WARNING: the dispatch stream has gaps; idle time lies between `idle ms` and `idle ms + unknown ms` (see per-CPU columns)."
        )?;
    }
    writeln!(o)?;
    writeln!(o, "## Per-CPU idle")?;
    writeln!(
        o,
        "{:>4} {:>10} {:>10} {:>11} {:>7} {:>8} {:>10} {:>6} {:>6} | {:>8} {:>9} {:>9} {:>9} {:>9}",
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
        "mean ms",
        "p50 ms",
        "p99 ms",
        "max ms"
    )?;
    for c in r.per_cpu.iter().chain(std::iter::once(&r.total)) {
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
            "{:>4} {:>10} {:>10} {:>11} {:>7.2} {:>8} {:>10} {:>6} {:>6} | {:>8} {:>9} {:>9} {:>9} {:>9}",
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
            ms(iv.mean_ns),
            ms(iv.p50_ns),
            ms(iv.p99_ns),
            ms(iv.max_ns)
        )?;
    }
    writeln!(
        o,
        "(kernel%: /proc/stat idle+iowait; its clock stops while the idle task serves interrupts and wake-ups)"
    )?;
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
    writeln!(o)?;
    writeln!(o, "## Threads whose leaving made a CPU idle")?;
    writeln!(
        o,
        "(state when it left: S sleeping, D disk/uninterruptible, R preempted, I idle kthread, B blocked, ? unknown)"
    )?;
    for c in r.per_cpu.iter().chain(std::iter::once(&r.total)) {
        if c.idle_causes.is_empty() {
            continue;
        }
        writeln!(o, "CPU {}:", cpu_name(c))?;
        writeln!(
            o,
            "  {:>8} {:>8} {:<16} {:>10} {:>12}  states",
            "pid", "tid", "comm", "to-idle", "idle ms after"
        )?;
        for t in &c.idle_causes {
            let states: Vec<String> = t.states.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            writeln!(
                o,
                "  {:>8} {:>8} {:<16} {:>10} {:>12}  {}",
                t.pid,
                t.tid,
                comm16(&t.comm),
                count(t.idle_dispatches_to),
                ms(t.idle_ns),
                states.join(" ")
            )?;
        }
    }
    if let Some(af) = &r.arcflow {
        render_arcflow(o, af)?;
    }
    writeln!(o)?;
    let scope = if r.target_pids.is_empty() {
        "all threads".to_string()
    } else {
        format!("threads of process {:?} and its children", r.target_pids)
    };
    writeln!(
        o,
        "## Blocked-thread statistics ({scope}; {} of {} shown, most runtime first)",
        r.threads.len().min(opts.max_threads),
        r.threads.len()
    )?;
    writeln!(
        o,
        "{:>8} {:>8} {:<16} {:>11} {:>8} {:>10} {:>9} {:>9} {:>6} {:>9} {:>8} {:>8} {:>12}",
        "pid",
        "tid",
        "comm",
        "runtime ms",
        "slices",
        "max ms",
        "non-run",
        "preempt",
        "run%",
        "runnable%",
        "blocked%",
        "to-idle",
        "idle ms after"
    )?;
    for t in r.threads.iter().take(opts.max_threads) {
        writeln!(
            o,
            "{:>8} {:>8} {:<16} {:>11} {:>8} {:>10} {:>9} {:>9} {:>6.1} {:>9.1} {:>8.1} {:>8} {:>12}",
            t.pid,
            t.tid,
            comm16(&t.comm),
            ms(t.runtime_ns),
            count(t.timeslices),
            ms(t.max_timeslice_ns),
            count(t.non_runnable),
            count(t.preempted),
            t.running_pct,
            t.runnable_pct,
            t.blocked_pct,
            count(t.idle_dispatches_caused),
            ms(t.idle_ns_caused)
        )?;
    }
    Ok(())
}

fn render_arcflow(o: &mut String, af: &crate::arcflow::Arcflow) -> std::fmt::Result {
    writeln!(o)?;
    writeln!(
        o,
        "## Arcflow call tree (sorted by {}; subtrees under the cut-off hidden)",
        af.sort
    )?;
    for j in &af.jvms {
        writeln!(
            o,
            "# JVM {}: {} threads, {} nodes, {} methods{}{}",
            j.pid,
            j.threads,
            j.nodes,
            j.methods,
            if j.final_dump {
                ""
            } else {
                "; LAST PERIODIC SNAPSHOT (the JVM did not reach VM death)"
            },
            if j.unmatched_exits > 0 {
                format!("; {} unmatched exits", j.unmatched_exits)
            } else {
                String::new()
            }
        )?;
    }
    if let Some(t) = af.tags.last() {
        writeln!(
            o,
            "# dispatches of traced threads tagged with their node: {} current, {} from history, {} unknown ({:.2}% exact)",
            count(t.current),
            count(t.ring),
            count(t.unknown),
            t.exact_pct
        )?;
        let u = &af.untagged;
        if (t.unknown | u.before_claim | u.after_release) > 0 {
            writeln!(
                o,
                "#   unknown: {} in nodes shorter than Δ, {} overwritten in history; untagged: {} before the agent saw the thread, {} after it left Java",
                count(u.unknown_short),
                count(u.unknown_overwritten),
                count(u.before_claim),
                count(u.after_release)
            )?;
        }
    }
    writeln!(
        o,
        "{:>3} {:>9} {:>9} {:>10} {:>9} {:>7} {:>9} {:>7} {:>7} {:>8} {:>10} {:>6}  method",
        "LV",
        "CALLS",
        "CEE",
        "BASE ms",
        "MMAX ms",
        "AO",
        "AB",
        "DIP",
        "IDLE",
        "to-idle",
        "idle ms",
        "%"
    )?;
    for r in &af.rows {
        let m = &r.own;
        writeln!(
            o,
            "{:>3} {:>9} {:>9} {:>10} {:>9} {:>7} {:>9} {:>7} {:>7} {:>8} {:>10} {:>6.2}  {}{}",
            r.level,
            count(m.calls),
            count(m.callees),
            ms(m.base_ns),
            ms(m.mmax_ns),
            count(m.ao),
            count(m.ab),
            count(m.dip),
            count(m.idle),
            count(m.idle_dispatches),
            ms(m.idle_ns),
            r.subtree_pct,
            "  ".repeat(r.level as usize),
            r.method
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
