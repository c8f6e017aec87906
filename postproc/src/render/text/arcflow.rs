//! The arcflow call tree (`--view tree`): per JVM what the tree covers,
//! how the traced threads' dispatches were tagged, then one row per
//! method, indented by its level, with the JVM's reasons for its idle
//! (`↳ JVM`) and the native stack beneath it (`↳ native`).
//!
//! Invariant: a row's figures take 46 columns and the method the rest of
//! 120, indented one column a level (at most 24); nothing is wider.

use std::fmt::{self, Write};

use super::layout::{count, fit, fit_method, ms, wrap, write_lines, WIDTH};
use crate::sections::arcflow::{ArcRow, Arcflow, RowNative};

/// User frames shown beneath a tree row (JSON has them all).
const NATIVE_FRAMES: usize = 3;

/// The section: its heading and legend, then every row.
pub(super) fn render_arcflow(o: &mut String, af: &Arcflow) -> fmt::Result {
    render_arcflow_head(o, af)?;
    writeln!(
        o,
        "{:>3} {:>10} {:>10} {:>10} {:>6}  method",
        "LV", "CALLS", "BASE ms", "idle ms", "%"
    )?;
    // LV, CALLS, BASE ms, idle ms and % take 46 columns; the method gets
    // the rest of 120, indented one column a level (at most 24).
    for r in &af.rows {
        render_row(o, r)?;
    }
    Ok(())
}

/// The heading: per JVM its threads, nodes and coverage, how dispatches
/// were tagged, and the legend of the rows.
fn render_arcflow_head(o: &mut String, af: &Arcflow) -> fmt::Result {
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
            count(j.nodes as u64),
            count(j.methods as u64),
            if j.final_dump {
                ""
            } else {
                "; LAST PERIODIC SNAPSHOT (it did not reach VM death)"
            },
            if j.unmatched_exits > 0 {
                format!("; {} unmatched exits", j.unmatched_exits)
            } else {
                String::new()
            }
        )?;
        writeln!(
            o,
            "#   the call tree covers {:.1} % of the idle after this JVM's threads left a CPU ({} of {} ms)",
            if j.process_idle_ns == 0 {
                0.0
            } else {
                j.tree_idle_ns as f64 * 100.0 / j.process_idle_ns as f64
            },
            ms(j.tree_idle_ns),
            ms(j.process_idle_ns)
        )?;
    }
    if let Some(t) = af.tags.last() {
        writeln!(
            o,
            "# dispatches of traced threads tagged: {} current, {} from history, {} unknown ({:.2} % exact)",
            count(t.current),
            count(t.ring),
            count(t.unknown),
            t.exact_pct
        )?;
        let u = &af.untagged;
        if (t.unknown | u.before_claim | u.after_release) > 0 {
            writeln!(
                o,
                "#   unknown: {} in nodes shorter than Δ, {} overwritten in history",
                count(u.unknown_short),
                count(u.unknown_overwritten),
            )?;
            writeln!(
                o,
                "#   untagged: {} before the agent saw the thread, {} after it left Java",
                count(u.before_claim),
                count(u.after_release)
            )?;
        }
    }
    writeln!(
        o,
        "# idle ms: idle after a thread left a CPU in this method; %: its subtree's share"
    )?;
    writeln!(
        o,
        "#   (CEE, MMAX, AO, AB, DIP, IDLE and to-idle: --format json)"
    )?;
    if af.rows.iter().any(|r| !r.waits.is_empty()) {
        writeln!(
            o,
            "#   ↳ JVM: the flight recorder's reasons for that idle, % of the row's idle ms"
        )?;
    }
    if af.rows.iter().any(|r| !r.native.is_empty()) {
        writeln!(
            o,
            "#   ↳ native: where the threads waited beneath the method (kernel wait ← JVM, libc), % of its idle ms"
        )?;
    }
    Ok(())
}

/// A tree row: its figures and method, then the JVM's reasons and the
/// native stack beneath it.
fn render_row(o: &mut String, r: &ArcRow) -> fmt::Result {
    let m = &r.own;
    let indent = (r.level as usize).min(24);
    writeln!(
        o,
        "{:>3} {:>10} {:>10} {:>10} {:>6.2}  {}{}",
        r.level,
        count(m.calls),
        ms(m.base_ns),
        ms(m.idle_ns),
        r.subtree_pct,
        " ".repeat(indent),
        fit_method(&r.method, WIDTH - 46 - indent)
    )?;
    // The JVM's reasons (`--java tree,waits`), under the method.
    if !r.waits.is_empty() {
        let each: Vec<String> = r
            .waits
            .iter()
            .take(2)
            .map(|w| {
                let on = if w.object.is_empty() {
                    String::new()
                } else {
                    format!(" on {}", w.object)
                };
                format!("{}{on} {:.0} %", w.reason, w.share_pct)
            })
            .collect();
        let line = format!(
            "{:46}{}↳ JVM: {}{}",
            "",
            " ".repeat(indent),
            each.join("; "),
            if r.waits.len() > 2 { "; …" } else { "" }
        );
        writeln!(o, "{}", fit(&line, WIDTH))?;
    }
    // The native stack beneath the method: the heaviest, its kernel
    // wait first, then the innermost user frames.
    if let Some(n) = r.native.first() {
        render_native(o, n, indent)?;
    }
    Ok(())
}

/// A row's heaviest native stack, under the method at `indent`.
fn render_native(o: &mut String, n: &RowNative, indent: usize) -> fmt::Result {
    let mut path: Vec<&str> = Vec::new();
    if !n.wait.is_empty() {
        path.push(&n.wait);
    }
    // The frames just inside the Java code (the JVM's entry:
    // `ObjectMonitor::enter`, `Unsafe_Park`; Java frames are
    // `[unknown]` without a perf map) say where it waited; libc's
    // and the futex's are under the kernel wait already.
    let java = n.frames.iter().position(|f| {
        matches!(
            f.kind,
            crate::path::FrameKind::Interpreted
                | crate::path::FrameKind::Jit
                | crate::path::FrameKind::Unknown
        )
    });
    let (from, to) = match java {
        Some(j) if j > 0 => (j.saturating_sub(NATIVE_FRAMES), j),
        _ => (0, n.frames.len().min(NATIVE_FRAMES)),
    };
    if from > 0 {
        path.push("…");
    }
    // C++ names without their parameter lists.
    path.extend(n.frames[from..to].iter().map(|f| {
        f.name
            .split_once('(')
            .map_or(f.name.as_str(), |(head, _)| head)
    }));
    if to < n.frames.len() && java.is_none() {
        path.push("…");
    }
    let first = format!("↳ native: {:.0} %", n.share_pct);
    write_lines(
        o,
        46 + indent,
        wrap(&path.join(" ← "), &first, "   ", WIDTH - 46 - indent),
    )
}
