//! The report's own lines, after the answer: what was recorded (the
//! source, the command or processes, the machine, stacks sampled at the
//! switch-outs to idle and what that leaves estimated), the window, the event
//! counts, a recording cut short, idleflow's own cost, and the warning
//! when records were lost or much of the CPUs' time is unknown.
//!
//! Invariant: every line fits in 120 columns (long ones are fitted or
//! wrapped into it); idleflow's threads are told apart, never a cause.

use std::fmt::{self, Write};

use super::layout::{count, fit, ms, write_wrapped, WIDTH};
use crate::sections::{IdleStackSampling, Report, ToolUse, WakerStackSampling};
use crate::share::pct;

/// The header: the recording, the window, the counts, a cut, idleflow's
/// cost, then the warning about gaps.
pub(super) fn render_header(o: &mut String, r: &Report, source: &str) -> fmt::Result {
    render_recording(o, r, source)?;
    render_counts(o, r)?;
    render_cut_short(o, r)?;
    if !r.tool.tids.is_empty() {
        render_tool(o, &r.tool)?;
    }
    if let Some(f) = r.flight.as_ref().filter(|f| f.recorder_rss_bytes > 0) {
        writeln!(
            o,
            "#   the flight recorder's memory when it took the window: {:.1} MiB resident, its ring {:.1} MiB",
            f.recorder_rss_bytes as f64 / (1u64 << 20) as f64,
            f.ring_bytes as f64 / (1u64 << 20) as f64
        )?;
    }
    render_gaps_warning(o, r)
}

/// What was recorded, where and for how long, and the window reported.
fn render_recording(o: &mut String, r: &Report, source: &str) -> fmt::Result {
    let what = if r.command.is_empty() {
        if r.target_pids.is_empty() {
            "system-wide".to_string()
        } else {
            format!("pid {:?}", r.target_pids)
        }
    } else {
        format!("`{}`", r.command.join(" "))
    };
    writeln!(
        o,
        "{}",
        fit(&format!("# idleflow report of {source}: {what}"), WIDTH)
    )?;
    let exit = r
        .exit_code
        .map(|c| format!(", exit code {c}"))
        .unwrap_or_default();
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# {:.3} s on {} CPUs ({}), kernel {}; stopped: {}{exit}",
                r.duration_ns as f64 / 1e9,
                r.cpus,
                r.hostname,
                r.kernel_release,
                r.stop_reason
            ),
            WIDTH
        )
    )?;
    if let Some(line) = source_line(&r.event_source, &r.event_source_why) {
        writeln!(o, "{}", fit(&line, WIDTH))?;
    }
    if let Some(line) = java_line(&r.java_frames, &r.java_frames_why) {
        writeln!(o, "{}", fit(&line, WIDTH))?;
    }
    if let Some(s) = &r.idle_stack_sampling {
        let line = match &r.waker_stack_sampling {
            Some(w) => sampling_line_with_wakers(s, w, r.wakeups),
            None => sampling_line(s),
        };
        writeln!(o, "{}", fit(&line, WIDTH))?;
    }
    if r.windowed {
        let s = |ns: u64| ns.saturating_sub(r.recording_start_ns) as f64 / 1e9;
        let line = format!(
            "reported: {:.3} s to {:.3} s of the recording ({}){}",
            s(r.start_ns),
            s(r.stop_ns),
            if r.after_startup {
                "--skip-startup: from where the program's longest stretch without a new thread begins"
            } else {
                "--from/--to"
            },
            if r.arcflow.is_some() {
                "; call-tree counts are the whole run's"
            } else {
                ""
            }
        );
        write_wrapped(o, &line, "#", "#  ")?;
    }
    Ok(())
}

/// Which kernel events recorded, and why, in one line; none for
/// recordings that do not say (older recorders).
fn source_line(source: &str, why: &str) -> Option<String> {
    let name = match source {
        "" => return None,
        "bpf" => "eBPF",
        other => other,
    };
    // Where the eBPF source's idle intervals end: at the tracepoint, inside
    // the switch (PERFORMANCE.md §5c: 0.3-1.5 % less idle than perf's
    // switch records on `perf bench sched pipe`).
    let stamp = if source == "bpf" {
        "; idle ends at sched_switch, ≈ 0.5 µs before perf's switch-in"
    } else {
        ""
    };
    if why.is_empty() {
        return Some(format!("# events: {name}{stamp}"));
    }
    let line = format!("# events: {name} ({why}){stamp}");
    if line.chars().count() <= WIDTH {
        return Some(line);
    }
    // A long reason (the probe's whole error, kept in the JSON) is told by
    // its first clauses: `eBPF not usable: missing CAP_BPF`.
    let short = why.splitn(3, ": ").take(2).collect::<Vec<_>>().join(": ");
    Some(fit(
        &format!("# events: {name} ({short}; see the JSON report)"),
        WIDTH,
    ))
}

/// What named the JVMs' frames and waits, and why, in one line; none
/// where nothing did (or an older recorder does not say).
fn java_line(modes: &str, why: &str) -> Option<String> {
    if modes.is_empty() {
        return None;
    }
    let by: Vec<&str> = modes
        .split(',')
        .map(|m| match m {
            "vm" => "the JVMs' own structures (vm: nothing asked of them)",
            "waits" => "their flight recorders (waits)",
            "stacks" => "frame pointers and perf maps (stacks)",
            "tree" => "the entry/exit agent (tree)",
            other => other,
        })
        .collect();
    let why = if why.is_empty() {
        String::new()
    } else {
        format!("; {why}")
    };
    Some(format!("# Java frames: {}{why}", by.join(", ")))
}

/// Stacks sampled at the switch-outs to idle, in one line: the budget, the
/// share of dispatches to idle with stacks of their own, and the shares of
/// the idle whose path is estimated (its thread's previous stacks, carried
/// to it) or has no stack.
fn sampling_line(s: &IdleStackSampling) -> String {
    let (dispatches, idle_ns) = s.total();
    let budget = format!("# stacks sampled (≤ {}/s/CPU)", s.budget_per_s_per_cpu);
    if dispatches == 0 {
        return format!("{budget}: no dispatch to idle");
    }
    // ≤ 120 columns up to a budget of 99999 (the shares add up to 100 %).
    format!(
        "{budget} at {:.1} % of dispatches to idle; {:.1} % of idle estimated (thread's last), {:.1} % none",
        pct(s.own.dispatches, dispatches),
        pct(s.carried.idle_ns, idle_ns),
        pct(s.none.idle_ns, idle_ns),
    )
}

/// [`sampling_line`] of a recording that also says how the wakers' stacks
/// were sampled (its budgets are in the JSON report): the share of the
/// `wakeups` with them follows.
fn sampling_line_with_wakers(
    s: &IdleStackSampling,
    w: &WakerStackSampling,
    wakeups: u64,
) -> String {
    let (dispatches, idle_ns) = s.total();
    let wakers = format!(
        "{} % of wake-ups",
        if wakeups == 0 {
            "0".to_string()
        } else {
            format!("{:.1}", pct(w.wakeups_with_stacks, wakeups))
        }
    );
    if dispatches == 0 {
        return format!(
            "# stacks sampled: no dispatch to idle (≤ {}/s/CPU), {wakers}",
            s.budget_per_s_per_cpu
        );
    }
    // ≤ 120 columns up to a budget of 999 (a wider line is cut by `fit`).
    format!(
        "# stacks sampled: {:.1} % of dispatches to idle (≤ {}/s/CPU; {:.1} % of idle estimated, {:.1} % none), {wakers}",
        pct(s.own.dispatches, dispatches),
        s.budget_per_s_per_cpu,
        pct(s.carried.idle_ns, idle_ns),
        pct(s.none.idle_ns, idle_ns),
    )
}

/// The event counts: dispatches, wake-ups, lost events, stream breaks.
fn render_counts(o: &mut String, r: &Report) -> fmt::Result {
    let line = format!(
        "{} dispatches, {} wakeups ({} from interrupts, {} unseen), {} lost events, {} stream breaks{}",
        count(r.dispatches),
        count(r.wakeups),
        count(r.interrupt_wakeups),
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
    );
    write_wrapped(o, &line, "#", "#  ")
}

/// A recording cut short: where, and why it may have been.
fn render_cut_short(o: &mut String, r: &Report) -> fmt::Result {
    if let Some(cut) = &r.cut_short {
        writeln!(
            o,
            "# WARNING: recording cut short: read up to its last complete record, {:.3} s into the run",
            r.duration_ns as f64 / 1e9
        )?;
        writeln!(
            o,
            "{}",
            fit(
                &format!(
                    "#   (byte {}: {}; the recorder was killed, the disk filled up or the machine stopped)",
                    count(cut.offset),
                    cut.reason
                ),
                WIDTH
            )
        )?;
    }
    Ok(())
}

/// idleflow's own cost: its threads, CPU time and wake-ups, and what
/// became of the idle it cut into.
fn render_tool(o: &mut String, t: &ToolUse) -> fmt::Result {
    writeln!(
        o,
        "# idleflow itself: {} thread{}, {} ms on CPU ({:.2} % of one CPU), {} wake-ups ({:.2} % of all)",
        t.tids.len(),
        if t.tids.len() == 1 { "" } else { "s" },
        ms(t.runtime_ns),
        t.cpu_pct_of_one,
        count(t.wakeups),
        t.wakeups_pct,
    )?;
    if let Some(k) = &t.kernel_programs {
        let line = format!(
            "recording cost: ≈ {:.1} % of one CPU: idleflow's threads {:.2} %, its eBPF programs {:.2} % \
             ({:.0} ns a run, timed {:.1} s)",
            t.cpu_pct_of_one + k.cpu_pct_of_one,
            t.cpu_pct_of_one,
            k.cpu_pct_of_one,
            k.ns_per_run,
            k.timed_ns as f64 / 1e9
        );
        write_wrapped(o, &line, "#", "#  ")?;
    }
    if let Some(d) = &t.deferred_merge {
        writeln!(
            o,
            "#   merge deferred past the window: {} ms of the recorder's CPU after it, {:.1} MB spooled",
            ms(d.cpu_ns),
            d.bytes as f64 / 1e6
        )?;
    }
    if t.threads.len() > 1 {
        // As many threads, most CPU first, as fit the line.
        let mut line = String::from("#   by thread (ms on CPU, wake-ups):");
        let mut shown = 0;
        for th in &t.threads {
            let item = format!(
                " {} {:.1}, {}",
                th.comm,
                th.runtime_ns as f64 / 1e6,
                count(th.wakeups)
            );
            if line.chars().count() + item.chars().count() + 10 > WIDTH {
                break;
            }
            if shown > 0 {
                line.push(';');
            }
            line.push_str(&item);
            shown += 1;
        }
        if shown < t.threads.len() {
            line.push_str(&format!("; {} more", t.threads.len() - shown));
        }
        writeln!(o, "{line}")?;
    }
    // idleflow is never a cause: what followed its leaving either
    // continues the idle it cut into or is left out (one line where
    // it fits).
    let continued = (t.idle_continued > 0).then(|| {
        format!(
            "after its {} wake-ups on idle CPUs the idle ({:.1} ms) keeps the cause it had",
            count(t.idle_continued),
            t.idle_ns_continued as f64 / 1e6
        )
    });
    let left_out = (t.idle_dispatches_caused > 0)
        .then(|| format!("{} others left out", count(t.idle_dispatches_caused)));
    let parts: Vec<String> = continued.into_iter().chain(left_out).collect();
    let one = format!("#   never a cause: {}", parts.join("; "));
    if parts.len() == 1 || one.chars().count() <= WIDTH {
        writeln!(o, "{}", fit(&one, WIDTH))?;
    } else {
        for part in &parts {
            writeln!(o, "{}", fit(&format!("#   never a cause: {part}"), WIDTH))?;
        }
    }
    if t.drain_priority.starts_with("ordinary") {
        writeln!(
            o,
            "{}",
            fit(
                &format!(
                    "#   its rings were drained at {}: a saturated machine can starve it{}",
                    t.drain_priority,
                    if t.drain_priority.contains("--drain-priority 0") {
                        ""
                    } else {
                        " (real-time priority needs root or CAP_SYS_NICE)"
                    }
                ),
                WIDTH
            )
        )?;
    }
    Ok(())
}

/// The warning about gaps: records lost, or unknown time over 0.5 % of
/// the CPUs' time.
fn render_gaps_warning(o: &mut String, r: &Report) -> fmt::Result {
    // Gaps are always counted in the table; the warning is for gaps that
    // matter: records lost, or unknown time over 0.5 % of the CPUs' time.
    let cpu_time = r.duration_ns.saturating_mul(r.cpus as u64).max(1);
    let unknown_pct = r.total.unknown_ns as f64 * 100.0 / cpu_time as f64;
    if r.lost_events > 0 || unknown_pct > 0.5 {
        let line = format!(
            "WARNING: {} records lost, {:.2} % of the CPUs' time unknown: idle lies between `idle ms` and `idle ms + \
             unknown ms`{}",
            count(r.lost_events),
            unknown_pct,
            if r.lost_events > 0 {
                "; record again with a larger --ring-size"
            } else {
                ""
            }
        );
        write_wrapped(o, &line, "#", "#  ")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{sampling_line, sampling_line_with_wakers, source_line, WIDTH};
    use crate::sections::{IdleStackSampling, StackSourceRow, WakerStackSampling};

    /// Dispatches to idle and their idle, ns.
    fn row(dispatches: u64, idle_ns: u64) -> StackSourceRow {
        StackSourceRow {
            dispatches,
            idle_ns,
        }
    }

    #[test]
    fn the_sampling_line_with_wakers_adds_their_share_and_fits() {
        let s = IdleStackSampling {
            budget_per_s_per_cpu: 250,
            own: row(519, 96_300),
            carried: row(478, 3_600),
            none: row(3, 100),
        };
        let w = WakerStackSampling {
            one_in: 16,
            budget_per_s_per_cpu: 200,
            wakeups_with_stacks: 3_790,
        };
        assert_eq!(
            sampling_line_with_wakers(&s, &w, 1_262_283),
            "# stacks sampled: 51.9 % of dispatches to idle (≤ 250/s/CPU; 3.6 % of idle estimated, \
             0.1 % none), 0.3 % of wake-ups"
        );
        // The widest shares, with a three-digit budget.
        let wide = IdleStackSampling {
            budget_per_s_per_cpu: 999,
            own: row(1, 0),
            carried: row(1, 1),
            none: row(0, 0),
        };
        let all = WakerStackSampling {
            wakeups_with_stacks: 10,
            ..w
        };
        let line = sampling_line_with_wakers(&wide, &all, 10);
        assert!(line.contains("50.0 % of dispatches") && line.ends_with("100.0 % of wake-ups"));
        assert!(line.chars().count() <= WIDTH, "{line}");
        let none = IdleStackSampling {
            own: row(0, 0),
            carried: row(0, 0),
            none: row(0, 0),
            ..s
        };
        assert_eq!(
            sampling_line_with_wakers(&none, &w, 0),
            "# stacks sampled: no dispatch to idle (≤ 250/s/CPU), 0 % of wake-ups"
        );
    }

    #[test]
    fn the_sampling_line_says_what_is_estimated_in_one_line() {
        let s = IdleStackSampling {
            budget_per_s_per_cpu: 1000,
            own: row(98, 100),
            carried: row(880, 8_800),
            none: row(22, 1_100),
        };
        assert_eq!(
            sampling_line(&s),
            "# stacks sampled (≤ 1000/s/CPU) at 9.8 % of dispatches to idle; \
             88.0 % of idle estimated (thread's last), 11.0 % none"
        );
        // The widest shares that add up, with a five-digit budget.
        let wide = IdleStackSampling {
            budget_per_s_per_cpu: 99_999,
            own: row(999, 1),
            carried: row(1, 999),
            none: row(0, 0),
        };
        let line = sampling_line(&wide);
        assert!(line.contains("99.9 % of dispatches") && line.contains("99.9 % of idle"));
        assert!(line.chars().count() <= WIDTH, "{line}");
        let wider = IdleStackSampling {
            own: row(1, 0),
            carried: row(1, 1),
            ..wide
        };
        let line = sampling_line(&wider);
        assert!(line.contains("50.0 % of dispatches") && line.contains("100.0 % of idle"));
        assert!(line.chars().count() <= WIDTH, "{line}");
        let none = IdleStackSampling {
            own: row(0, 0),
            carried: row(0, 0),
            none: row(0, 0),
            ..s
        };
        assert_eq!(
            sampling_line(&none),
            "# stacks sampled (≤ 1000/s/CPU): no dispatch to idle"
        );
    }

    #[test]
    fn the_source_line_names_the_source_and_why_and_is_absent_for_older_recordings() {
        assert_eq!(source_line("", ""), None);
        assert_eq!(
            source_line("bpf", "probe passed").as_deref(),
            Some("# events: eBPF (probe passed); idle ends at sched_switch, ≈ 0.5 µs before perf's switch-in")
        );
        assert_eq!(source_line("perf", "").as_deref(), Some("# events: perf"));
    }
}
