//! The idle-causing Java waits (`--view java`): what the JVMs' flight
//! recorders say their threads waited on when a CPU went idle after them.
//! The heading names each JVM's thresholds; then how much of the Java
//! threads' idle lies in a recorded wait, the join check between the two
//! clocks, and per path its reason, holders or notifiers and Java stack.
//!
//! Invariant: every line fits in 120 columns; method names are shortened
//! from the left ([`fit_method`]), never cut at their class and method
//! while those fit.

use std::fmt::{self, Write};

use super::layout::{count, fit, fit_method, ms, ms_short, write_wrapped, WIDTH};
use super::paths::{more_paths, render_notes};
use crate::sections::java_waits::{JavaPathRow, JavaWaitsSection, JvmWaitsRow};

/// Frames shown per idle-causing Java path (JSON has all).
const PATH_FRAMES: usize = 8;
/// Where a Java path's threads and frames start, under its figures.
const INDENT: usize = 29;

/// The section: its heading, the coverage and join-check lines, the notes,
/// then the first `max_paths` paths.
pub(super) fn render_java_waits(
    o: &mut String,
    jw: &JavaWaitsSection,
    max_paths: usize,
) -> fmt::Result {
    writeln!(o)?;
    if jw.jvms.is_empty() {
        writeln!(
            o,
            "## Idle-causing Java waits: no JVM's flight recording was read"
        )?;
        render_notes(o, &jw.notes)?;
        return Ok(());
    }
    let thresholds: Vec<String> = jw.jvms.iter().map(jvm_thresholds).collect();
    let from = if jw.jvms.iter().all(|j| j.source == "vm") {
        "the JVMs' own structures at the sampled switch-outs"
    } else if jw.jvms.iter().any(|j| j.source == "vm") {
        "the JVMs' flight recorders and own structures"
    } else {
        "the JVMs' flight recorders"
    };
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "## Idle-causing Java waits ({from}; {})",
                thresholds.join(", ")
            ),
            WIDTH
        )
    )?;
    render_coverage(o, jw)?;
    render_join_check(o, jw)?;
    render_notes(o, &jw.notes)?;
    if jw.paths.is_empty() {
        return Ok(());
    }
    writeln!(
        o,
        "{:>10} {:>6} {:>9}  reason, then the Java stack (top first)",
        "idle ms", "share", "to-idle"
    )?;
    for p in jw.paths.iter().take(max_paths) {
        render_java_path(o, p)?;
    }
    more_paths(o, jw.paths.len(), max_paths)
}

/// A JVM's thresholds in words: `JVM 12: 1,234 waits ≥ 10 ms, monitor
/// enters all`.
fn jvm_thresholds(j: &JvmWaitsRow) -> String {
    if j.source == "vm" {
        // Every wait of a sampled switch-out, whatever its length.
        return format!("JVM {}: {} waits", j.pid, count(j.waits));
    }
    let enters = if j.monitor_enter_threshold_ns == j.threshold_ns {
        String::new()
    } else if j.monitor_enter_threshold_ns == 0 {
        ", monitor enters all".to_string()
    } else {
        format!(
            ", monitor enters ≥ {} ms",
            ms_short(j.monitor_enter_threshold_ns)
        )
    };
    let span = j.recorded_to_ns.saturating_sub(j.recorded_from_ns);
    let all = if j.all_waits_ns == 0 {
        String::new()
    } else {
        format!(
            ", all while rare: {:.1} of {:.1} s",
            j.all_waits_ns as f64 / 1e9,
            span as f64 / 1e9
        )
    };
    format!(
        "JVM {}: {} waits ≥ {} ms{enters}{all}",
        j.pid,
        count(j.waits),
        ms_short(j.threshold_ns)
    )
}

/// How much of the Java threads' idle lies in a JVM wait, how much in
/// none, and how much came while no flight recording ran.
fn render_coverage(o: &mut String, jw: &JavaWaitsSection) -> fmt::Result {
    let share = |part: u64, whole: u64| {
        if whole == 0 {
            "-".to_string()
        } else {
            format!("{:.1} %", part as f64 * 100.0 / whole as f64)
        }
    };
    let joined = jw.java_idle_ns.saturating_sub(jw.unjoined_idle_ns);
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# Java threads' leaving made a CPU idle {} times, followed by {} ms idle; {} of that lies in a JVM wait",
                count(jw.java_idle_dispatches_to),
                ms(jw.java_idle_ns),
                share(joined, jw.java_idle_ns),
            ),
            WIDTH
        )
    )?;
    if jw.unjoined_idle_dispatches_to > 0 {
        let threshold = jw.jvms.iter().map(|j| j.threshold_ns).max().unwrap_or(0);
        let shorter = if threshold > 0 {
            format!(
                ", or waits under {} ms: `record --wait-threshold` lower records more",
                ms(threshold)
            )
        } else {
            String::new()
        };
        let line = format!(
            "no JVM wait event: {} dispatches to idle, {} ms (running, native or JVM-internal \
             waits such as a selector's epoll_wait{shorter})",
            count(jw.unjoined_idle_dispatches_to),
            ms(jw.unjoined_idle_ns)
        );
        write_wrapped(o, &line, "#", "#  ")?;
    }
    if jw.unrecorded_idle_dispatches_to > 0 {
        let when = if jw.jvms.iter().all(|j| j.source == "vm") {
            "before a JVM's first wait was read (its start-up)"
        } else {
            "while no flight recording ran (a JVM's start-up, before idleflow could start it)"
        };
        writeln!(
            o,
            "{}",
            fit(
                &format!(
                    "# {when}: {} dispatches to idle, {} ms",
                    count(jw.unrecorded_idle_dispatches_to),
                    ms(jw.unrecorded_idle_ns)
                ),
                WIDTH
            )
        )?;
    }
    Ok(())
}

/// The join check: the waits that contain a switch-out of their thread,
/// and the blocking switch-outs that lie in a recorded wait.
fn render_join_check(o: &mut String, jw: &JavaWaitsSection) -> fmt::Result {
    // The clocks agree when the waits that blocked contain their
    // thread's switch-out; the other direction depends on the threshold.
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# join check: {} of {} waits contain a switch-out of their thread (a wait that did not block has none)",
                count(jw.waits_with_switch_out),
                count(jw.waits_in_window),
            ),
            WIDTH
        )
    )?;
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "#   and {} of {} blocking switch-outs of Java threads lie in a recorded wait{}",
                count(jw.blocking_inside_wait),
                count(jw.blocking_switch_outs),
                if jw.jvms.iter().any(|j| j.threshold_ns > 0) {
                    " (shorter waits are not recorded)"
                } else {
                    ""
                }
            ),
            WIDTH
        )
    )?;
    Ok(())
}

/// A Java path: its figures and reason, who held the lock or notified,
/// then its Java stack (top first).
fn render_java_path(o: &mut String, p: &JavaPathRow) -> fmt::Result {
    let mut reason = p.reason.to_string();
    if !p.object.is_empty() {
        reason.push_str(if p.reason.is_jvm_lock_wait() {
            " on "
        } else {
            " "
        });
        reason.push_str(&p.object);
    }
    writeln!(
        o,
        "{:>10} {:>5.1}% {:>9}  {}",
        ms(p.idle_ns),
        p.share_pct,
        count(p.idle_dispatches_to),
        fit(&reason, WIDTH - INDENT)
    )?;
    if !p.others.is_empty() {
        let who: Vec<String> = p
            .others
            .iter()
            .take(4)
            .map(|t| format!("{} ×{}", t.name, count(t.dispatches)))
            .collect();
        let more = if p.others.len() > 4 {
            format!(", {} more", p.others.len() - 4)
        } else {
            String::new()
        };
        let role = if p.reason.is_monitor_wait() {
            "notified by"
        } else {
            "held by"
        };
        writeln!(
            o,
            "{:INDENT$}{}",
            "",
            fit(&format!("{role} {}{more}", who.join(", ")), WIDTH - INDENT)
        )?;
    }
    for f in p.frames.iter().take(PATH_FRAMES) {
        let at = if f.frame.line > 0 {
            format!(":{}", f.frame.line)
        } else {
            String::new()
        };
        let tail = format!("{at} [{}]", f.kinds.join("|"));
        let room = (WIDTH - INDENT - 3).saturating_sub(tail.chars().count());
        writeln!(
            o,
            "{:INDENT$}at {}{tail}",
            "",
            fit_method(&f.frame.name, room)
        )?;
    }
    let hidden = p.frames.len().saturating_sub(PATH_FRAMES);
    if hidden > 0 || p.truncated {
        writeln!(
            o,
            "{:INDENT$}… {} more frames{}",
            "",
            hidden,
            if p.truncated {
                " (the JVM cut the stack)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}
