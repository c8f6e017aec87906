//! `idleflow diff` for people: the changes beyond noise, most changed
//! first, each with its share of the idle in both runs, its interval and
//! its frames; then how many moved within noise. The history check's text
//! ([`super::history_text`]) prints its changes with the same blocks.

use std::fmt::Write;

use super::diff::{Diff, PathChange, Side, REPLICATES};
use crate::render::text::{frame_words, shown_frames_of, wrap, WIDTH};

/// `idleflow diff` for people: the changes beyond noise, most changed
/// first (at most `max`), each with its share in both runs, its interval
/// and its frames; then how many moved within noise.
pub fn render_diff(d: &Diff, max: usize) -> String {
    let mut o = String::new();
    let _ = render_diff_into(&mut o, d, max);
    o
}

/// A changed path in words: process, reason, threads, program frame.
fn change_words(c: &PathChange) -> String {
    let mut s = format!("{}: {} — {}", c.process, c.reason, c.threads.join(", "));
    if let Some(f) = c.program_frame.and_then(|i| c.frames.get(i)) {
        s.push_str(&format!(" in {}", frame_words(&f.frame)));
    }
    s
}

/// A changed path's figures: the change, both shares, idle per second,
/// the interval.
fn change_figures(c: &PathChange) -> String {
    format!(
        "{:+.1} pts: {:.1} % → {:.1} % of the idle ({:.0} → {:.0} ms idle per s) [{:+.1}, {:+.1}]",
        c.change_pts,
        c.base.share_pct,
        c.new.share_pct,
        c.base.idle_per_s_ns as f64 / 1e6,
        c.new.idle_per_s_ns as f64 / 1e6,
        c.interval_pts.0,
        c.interval_pts.1
    )
}

/// Where the two runs were recorded in different modes, a note saying so
/// before any change: paths that differ only in how their frames were
/// named are not changes of the program.
pub(crate) fn modes_note(o: &mut String, d: &Diff) -> std::fmt::Result {
    if let Some(m) = &d.modes_differ {
        let line = format!(
            "NOTE: the runs were recorded in different modes ({} → {}): a path whose frames only one mode names \
             shows as new in one run and gone in the other, a change of the recording, not of the program; \
             compare runs recorded alike",
            m.base, m.new
        );
        for l in wrap(&line, "#", "#  ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    Ok(())
}

/// A changed path as `diff` and `history check` show it: its figures, its
/// words, its frames (at most three lines).
pub(crate) fn change_block(o: &mut String, c: &PathChange) -> std::fmt::Result {
    for l in wrap(&change_figures(c), "", "   ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    for l in wrap(&change_words(c), "  ", "    ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    let names = shown_frames_of(&c.frames, c.program_frame);
    for l in wrap(&names.join(" ← "), "  at", "     ", WIDTH)
        .into_iter()
        .take(3)
    {
        writeln!(o, "{l}")?;
    }
    Ok(())
}

fn render_diff_into(o: &mut String, d: &Diff, max: usize) -> std::fmt::Result {
    let side = |s: &Side| {
        format!(
            "{} ({:.1} s on {} CPUs, {:.1} % idle)",
            s.file,
            s.duration_ns as f64 / 1e9,
            s.cpus,
            s.idle_pct
        )
    };
    let line = format!("idleflow diff: {} → {}", side(&d.base), side(&d.new));
    for l in wrap(&line, "#", "#  ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    modes_note(o, d)?;
    let noun = |n: usize| if n == 1 { "path" } else { "paths" };
    let how = format!(
        "beyond the runs' noise: outside the central {:.0} % of {} resamplings of {} and {} windows of {} and {} ms, \
         and at least {:.1} points of the idle",
        d.interval_pct,
        REPLICATES,
        d.base.windows,
        d.new.windows,
        d.base.window_ns / 1_000_000,
        d.new.window_ns / 1_000_000,
        d.min_change_pts
    );
    let head = format!(
        "{} {} changed {how}",
        d.changes.len(),
        noun(d.changes.len())
    );
    for l in wrap(&head, "#", "#  ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    for c in d.changes.iter().take(max) {
        writeln!(o)?;
        change_block(o, c)?;
    }
    if d.changes.len() > max {
        writeln!(
            o,
            "\n# {} more changed paths: --paths N",
            d.changes.len() - max
        )?;
    }
    if let Some(c) = d.within_noise.first() {
        writeln!(o)?;
        let most = if c.change_pts.abs() >= 0.05 {
            format!("; the most: {} {}", change_words(c), change_figures(c))
        } else {
            String::new()
        };
        let line = format!(
            "{} {} moved within noise or less than {:.1} points{most}",
            d.within_noise.len(),
            noun(d.within_noise.len()),
            d.min_change_pts,
        );
        for l in wrap(&line, "#", "#  ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    Ok(())
}
