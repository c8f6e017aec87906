//! The stack-path sections: the merged idle-causing paths (every source's
//! frames, one path per dispatch), and each source's own: the user stacks
//! at the switch-outs that left a CPU idle (`--view user`), the blocking
//! waits (`--view blocking`) and the kernel's stacks (`--view kernel`).
//! Also the pieces every path section shares: a path's first two lines,
//! the threads line, the frames under them, the notes and the `more paths`
//! line.
//!
//! Invariant: a path's figures take [`PATH_INDENT`] columns and its words
//! the rest of the 120; its frames wrap beneath, at the same indent.

use std::fmt::{self, Write};

use super::frames::shown_frames_of;
use super::layout::{count, fit, ms, wrap, write_lines, write_wrapped, WIDTH};
use crate::sections::call_paths::{BlockedPathsSection, CallPathsSection};
use crate::sections::idle_paths::{IdlePath, IdlePathsSection};
use crate::sections::kernel_waits::KernelWaitsSection;

/// Where a stack path's frames start, under its figures.
pub(super) const PATH_INDENT: usize = 29;

/// The merged idle-causing paths: per path its figures, the process, the
/// reason and object, the threads (and the holders or notifiers), then the
/// frames from the kernel's wait out, around the program's own code.
pub(super) fn render_idle_paths(
    o: &mut String,
    ip: &IdlePathsSection,
    max_paths: usize,
) -> fmt::Result {
    writeln!(o)?;
    writeln!(
        o,
        "## Idle-causing paths (each dispatch to idle: its kernel, native and Java frames, from the best source)"
    )?;
    if ip.paths.is_empty() {
        writeln!(o, "# no thread of the recorded program left a CPU idle")?;
        return Ok(());
    }
    writeln!(
        o,
        "{:>10} {:>6} {:>9}  process: reason, the threads, then the frames (innermost first; … frames left out)",
        "idle ms", "share", "to-idle"
    )?;
    for p in ip.paths.iter().take(max_paths) {
        render_idle_path(o, p)?;
    }
    more_paths(o, ip.paths.len(), max_paths)?;
    render_notes(o, &ip.notes)
}

/// One merged path: its figures and head, the threads with the holder or
/// notifier, then at most three lines of frames.
fn render_idle_path(o: &mut String, p: &IdlePath) -> fmt::Result {
    let mut head = format!("{}: {}", p.process, p.reason);
    if !p.object.is_empty() {
        head.push_str(&format!(" on {}", p.object));
    }
    writeln!(
        o,
        "{:>10} {:>5.1}% {:>9}  {}",
        ms(p.idle_ns),
        p.share_pct,
        count(p.dispatches),
        fit(&head, WIDTH - PATH_INDENT)
    )?;
    let threads: Vec<(String, u64)> = p
        .threads
        .iter()
        .map(|t| {
            let name = if t.count > 1 {
                format!("{} ({} threads)", t.name, t.count)
            } else {
                t.name.clone()
            };
            (name, t.dispatches)
        })
        .collect();
    let mut who = threads_line(&threads, WIDTH - PATH_INDENT);
    for (what, others) in [("held by", &p.held_by), ("notified by", &p.notified_by)] {
        if let Some(h) = others.first() {
            who.push_str(&format!(
                "; {what} {} ×{}{}",
                h.name,
                count(h.dispatches),
                if others.len() > 1 { ", …" } else { "" }
            ));
        }
    }
    writeln!(o, "{:PATH_INDENT$}{}", "", fit(&who, WIDTH - PATH_INDENT))?;
    let names = shown_frames_of(&p.frames, p.program_frame);
    if names.is_empty() {
        return Ok(());
    }
    write_lines(o, PATH_INDENT, frame_lines(&names.join(" ← ")).take(3))
}

/// `frames` (joined by ` ← `) as lines under a path's figures, the first
/// starting with `at`.
fn frame_lines(frames: &str) -> impl Iterator<Item = String> {
    wrap(frames, "at", "  ", WIDTH - PATH_INDENT).into_iter()
}

/// The line after a section's first `shown` of `total` paths.
pub(super) fn more_paths(o: &mut String, total: usize, shown: usize) -> fmt::Result {
    if total > shown {
        writeln!(
            o,
            "({} more paths: --paths N shows more, --format json all)",
            total - shown
        )?;
    }
    Ok(())
}

/// A stack path's first two lines: its figures and `head` (its wait),
/// then the threads (or pools) that left there, most first.
fn render_path_head(
    o: &mut String,
    idle_ns: u64,
    share_pct: f64,
    dispatches: u64,
    head: &str,
    threads: &[(String, u64)],
) -> fmt::Result {
    writeln!(
        o,
        "{:>10} {:>5.1}% {:>9}  {}",
        ms(idle_ns),
        share_pct,
        count(dispatches),
        fit(head, WIDTH - PATH_INDENT)
    )?;
    writeln!(
        o,
        "{:PATH_INDENT$}{}",
        "",
        threads_line(threads, WIDTH - PATH_INDENT)
    )
}

/// `by NAME ×N, NAME ×N, K more` in `width` characters: up to four
/// threads, as many whole ones as fit (the first cut to fit if alone it
/// does not), then how many more there are.
fn threads_line(threads: &[(String, u64)], width: usize) -> String {
    let more = |shown: usize| match threads.len() - shown {
        0 => String::new(),
        n => format!(", {n} more"),
    };
    let mut line = String::from("by ");
    let mut shown = 0;
    for (name, n) in threads.iter().take(4) {
        let item = format!("{}{name} ×{}", if shown > 0 { ", " } else { "" }, count(*n));
        let after = line.chars().count() + item.chars().count();
        if shown > 0 && after + more(shown + 1).chars().count() > width {
            break;
        }
        line.push_str(&item);
        shown += 1;
    }
    fit(&format!("{line}{}", more(shown)), width)
}

/// A section's notes, `# NOTE:` each, wrapped.
pub(super) fn render_notes(o: &mut String, notes: &[String]) -> fmt::Result {
    for n in notes {
        write_wrapped(o, n, "# NOTE:", "#  ")?;
    }
    Ok(())
}

/// Idle-causing call paths: per path, the process and the kernel's wait,
/// the threads, and the user frames (innermost first).
pub(super) fn render_call_paths(
    o: &mut String,
    cp: &CallPathsSection,
    max_paths: usize,
) -> fmt::Result {
    writeln!(o)?;
    writeln!(
        o,
        "## Idle-causing call paths (each thread's user stack at the switch-out that left a CPU idle)"
    )?;
    writeln!(
        o,
        "# threads of the recorded processes (of all processes when recorded system-wide)"
    )?;
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# {} of {} dispatches to idle have a user stack: {} of {} ms idle (idleflow's own threads left out)",
                count(cp.idle_dispatches_with_stack),
                count(cp.idle_dispatches_to),
                ms(cp.idle_ns_with_stack),
                ms(cp.idle_ns)
            ),
            WIDTH
        )
    )?;
    let c = &cp.counts;
    if c.copies > 0 {
        let line = format!(
            "{} stack copies unwound when the recording ended: {} to the stack's bottom, {} cut at the copy's end              (--stack-size), {} stopped early; {} distinct stacks; {} frames in no module",
            count(c.copies),
            count(c.resolved - c.truncated.min(c.resolved) - c.stopped.min(c.resolved)),
            count(c.truncated),
            count(c.stopped),
            count(c.stacks),
            count(c.unknown_frames)
        );
        write_wrapped(o, &line, "#", "# ")?;
    }
    render_notes(o, &cp.notes)?;
    writeln!(
        o,
        "{:>10} {:>6} {:>9}  process: kernel wait, the threads, then the user stack (innermost first)",
        "idle ms", "share", "to-idle"
    )?;
    for p in cp.paths.iter().take(max_paths) {
        let head = if p.wait.is_empty() {
            p.process.clone()
        } else {
            format!("{}: {}", p.process, p.wait)
        };
        render_path_head(
            o,
            p.idle_ns,
            p.share_pct,
            p.idle_dispatches_to,
            &head,
            &p.threads,
        )?;
        render_user_frames(o, &p.frames, p.partial)?;
    }
    more_paths(o, cp.paths.len(), max_paths)
}

/// A path's user frames, innermost first, `[jit]` and `[interpreted]`
/// marked, `… (cut)` after a stack cut at the copy's end.
fn render_user_frames(o: &mut String, frames: &[crate::path::Frame], partial: bool) -> fmt::Result {
    let mut names: Vec<String> = frames
        .iter()
        .map(|f| match f.kind {
            crate::path::FrameKind::Jit => format!("{} [jit]", f.name),
            crate::path::FrameKind::Interpreted => format!("{} [interpreted]", f.name),
            _ => f.name.clone(),
        })
        .collect();
    if partial {
        names.push("… (cut)".into());
    }
    write_lines(o, PATH_INDENT, frame_lines(&names.join(" ← ")))
}

/// Blocking call paths (`record --stacks waits`): per path, the time the
/// recorded threads waited there until they ran again.
pub(super) fn render_blocking_paths(
    o: &mut String,
    bp: &BlockedPathsSection,
    max_paths: usize,
) -> fmt::Result {
    writeln!(o)?;
    writeln!(
        o,
        "## Blocking call paths (the stacks at each blocking switch-out, by the time until the thread ran again)"
    )?;
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# {} waits with a user stack, {} ms blocked in all (the recorded processes' threads; not idleflow's)",
                count(bp.waits),
                ms(bp.blocked_ns)
            ),
            WIDTH
        )
    )?;
    if bp.sample_period > 1 {
        writeln!(
            o,
            "{}",
            fit(
                &format!(
                    "# sampled (--wait-sample {n}): one interruptible sleep in {n} per CPU has its stacks, \
                     counted {n} times: an estimate",
                    n = bp.sample_period
                ),
                WIDTH
            )
        )?;
    }
    writeln!(
        o,
        "{:>10} {:>6} {:>9}  process: kernel wait, the threads, then the user stack (innermost first)",
        "blocked ms", "share", "waits"
    )?;
    for p in bp.paths.iter().take(max_paths) {
        let head = if p.wait.is_empty() {
            p.process.clone()
        } else {
            format!("{}: {}", p.process, p.wait)
        };
        render_path_head(o, p.blocked_ns, p.share_pct, p.waits, &head, &p.threads)?;
        render_user_frames(o, &p.frames, p.partial)?;
    }
    more_paths(o, bp.paths.len(), max_paths)
}

/// Idle-causing kernel waits: per stack, its wait, the threads, and the
/// frames outside the scheduler (innermost first).
pub(super) fn render_kernel_waits(
    o: &mut String,
    kw: &KernelWaitsSection,
    max_paths: usize,
) -> fmt::Result {
    writeln!(o)?;
    writeln!(
        o,
        "## Idle-causing kernel waits (the kernel's stack at each switch-out that left a CPU idle)"
    )?;
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# {} of {} dispatches to idle have a stack: {} of {} ms idle (idleflow's own threads left out)",
                count(kw.idle_dispatches_with_stack),
                count(kw.idle_dispatches_to),
                ms(kw.idle_ns_with_stack),
                ms(kw.idle_ns)
            ),
            WIDTH
        )
    )?;
    render_notes(o, &kw.notes)?;
    writeln!(
        o,
        "{:>10} {:>6} {:>9}  wait, the threads, then the kernel stack (innermost first)",
        "idle ms", "share", "to-idle"
    )?;
    for p in kw.paths.iter().take(max_paths) {
        render_path_head(
            o,
            p.idle_ns,
            p.share_pct,
            p.idle_dispatches_to,
            &p.wait,
            &p.threads,
        )?;
        let frames: Vec<&str> = p
            .frames
            .iter()
            .map(|f| f.name.as_str())
            .skip_while(|f| crate::reasons::is_scheduler_frame(f))
            .collect();
        write_lines(o, PATH_INDENT, frame_lines(&frames.join(" ← ")))?;
    }
    more_paths(o, kw.paths.len(), max_paths)
}

#[cfg(test)]
mod tests {
    use super::threads_line;

    #[test]
    fn a_threads_line_keeps_whole_names_and_counts_the_rest() {
        let t = |n: &str, c| (n.to_string(), c);
        let threads = [
            t("http-nio-8080-exec-*", 1172),
            t("C1 CompilerThre", 146),
            t("VM Periodic Tas", 130),
            t("C2 CompilerThre", 126),
            t("ab", 3),
        ];
        assert_eq!(
            threads_line(&threads, 200),
            "by http-nio-8080-exec-* ×1,172, C1 CompilerThre ×146, VM Periodic Tas ×130, C2 CompilerThre ×126, 1 more"
        );
        assert_eq!(
            threads_line(&threads, 70),
            "by http-nio-8080-exec-* ×1,172, C1 CompilerThre ×146, 3 more"
        );
        assert_eq!(
            threads_line(&threads[..1], 70),
            "by http-nio-8080-exec-* ×1,172"
        );
        assert!(threads_line(&threads, 12).chars().count() <= 12);
    }
}
