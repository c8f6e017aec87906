//! `idleflow history` for people: the list of kept runs, one run, and a
//! check's verdict, in the text report's layout ([`crate::render::text`]: lines of
//! at most [`WIDTH`] columns, `#` before what is not a table).
//!
//! Pure formatting of [`RunSummary`]s and a [`Check`]: nothing computed
//! here that the JSON does not carry.

use std::fmt::Write;

use super::diff_text::{change_block, modes_note, render_diff};
use crate::compare::history_check::Check;
use crate::compare::summary::RunSummary;
use crate::render::text::{frame_words, shown_frames_of, wrap, WIDTH};

/// A kept run as the store gives it: id, job, summary.
#[derive(Debug, Clone, Copy)]
pub struct Kept<'a> {
    /// Its id.
    pub id: i64,
    /// Its job.
    pub job: &'a str,
    /// Its summary.
    pub run: &'a RunSummary,
}

/// `2026-11-25 18:53 UTC` for ns since the epoch.
pub fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// The top path of a run in words, `—` for none.
fn top_path(r: &RunSummary) -> String {
    r.paths.first().map_or_else(
        || "—".to_string(),
        |p| {
            let mut s = format!(
                "{:.1} % {} — {}",
                p.share_pct,
                p.reason,
                p.threads.join(", ")
            );
            if let Some(f) = p.program_frame.and_then(|i| p.frames.get(i)) {
                s.push_str(&format!(" in {}", frame_words(&f.frame)));
            }
            s
        },
    )
}

/// `history list`: one line per run, oldest first.
pub fn render_list(runs: &[Kept], location: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {} runs in {location}", runs.len());
    if runs.is_empty() {
        let _ = writeln!(o, "# add one: idleflow history add run.idleflow --job NAME");
        return o;
    }
    let _ = writeln!(
        o,
        "{:>5}  {:<14}  {:<20}  {:>6}  {:>5}  {:>6}  top path",
        "id", "job", "started", "window", "CPUs", "idle"
    );
    for k in runs {
        let head = format!(
            "{:>5}  {:<14}  {:<20}  {:>5.1}s  {:>5}  {:>5.1}%",
            k.id,
            k.job,
            utc(k.run.start_unix_ns),
            k.run.duration_ns as f64 / 1e9,
            k.run.cpus,
            k.run.idle_pct()
        );
        hanging(&mut o, &head, &top_path(k.run));
    }
    o
}

/// `head`, then `text` wrapped beside it to [`WIDTH`] columns, its later
/// lines under its first.
fn hanging(o: &mut String, head: &str, text: &str) {
    let indent = head.chars().count() + 2;
    let pad = " ".repeat(indent);
    for (i, l) in wrap(text, "", "", WIDTH.saturating_sub(indent).max(20))
        .iter()
        .enumerate()
    {
        let l = l.trim_start();
        let _ = if i == 0 {
            writeln!(o, "{head}  {l}")
        } else {
            writeln!(o, "{pad}{l}")
        };
    }
}

/// `history show`: the run's facts, then its paths (at most `max`).
pub fn render_show(k: Kept, max: usize) -> String {
    let mut o = String::new();
    let _ = render_show_into(&mut o, k, max);
    o
}

fn render_show_into(o: &mut String, k: Kept, max: usize) -> std::fmt::Result {
    let r = k.run;
    writeln!(o, "# run {} of job {}: {}", k.id, k.job, r.file)?;
    let facts = format!(
        "started {}, {:.1} s on {} CPUs of {} (kernel {}), {:.1} % idle; {} windows of {} ms",
        utc(r.start_unix_ns),
        r.duration_ns as f64 / 1e9,
        r.cpus,
        r.host,
        r.kernel,
        r.idle_pct(),
        r.idle_windows.len(),
        r.window_ns / 1_000_000
    );
    for l in wrap(&facts, "#", "#  ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    if !r.command.is_empty() {
        for l in wrap(&r.command.join(" "), "# command:", "#  ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    writeln!(
        o,
        "{:>7}  {:>10}  {:>9}  path",
        "share", "idle ms", "to idle"
    )?;
    for p in r.paths.iter().take(max) {
        let mut words = format!("{}: {} — {}", p.process, p.reason, p.threads.join(", "));
        if let Some(f) = p.program_frame.and_then(|i| p.frames.get(i)) {
            words.push_str(&format!(" in {}", frame_words(&f.frame)));
        }
        let head = format!(
            "{:>6.1}%  {:>10.3}  {:>9}",
            p.share_pct,
            p.idle_ns as f64 / 1e6,
            p.dispatches
        );
        hanging(o, &head, &words);
        let pad = " ".repeat(head.chars().count() + 2);
        let names = shown_frames_of(&p.frames, p.program_frame);
        if !names.is_empty() {
            for l in wrap(
                &names.join(" ← "),
                &format!("{pad}at"),
                &format!("{pad}   "),
                WIDTH,
            )
            .into_iter()
            .take(2)
            {
                writeln!(o, "{l}")?;
            }
        }
    }
    if r.paths.len() > max {
        writeln!(o, "# {} more paths: --paths N", r.paths.len() - max)?;
    }
    Ok(())
}

/// `history check`: the verdict first, then the paths that rose, then the
/// whole comparison as `diff` shows it.
pub fn render_check(c: &Check, file: &str, max: usize) -> String {
    let mut o = String::new();
    let _ = render_check_into(&mut o, c, file, max);
    o
}

fn render_check_into(o: &mut String, c: &Check, file: &str, max: usize) -> std::fmt::Result {
    let b = &c.baseline;
    let which = if b.similar_only {
        format!(
            "its {} runs at a similar time of day and week (of {})",
            b.run_ids.len(),
            b.job_runs
        )
    } else if b.similar_runs > 0 {
        format!(
            "{} of its {} runs (only {} at a similar time of day and week)",
            b.run_ids.len(),
            b.job_runs,
            b.similar_runs
        )
    } else {
        format!("{} of its {} runs", b.run_ids.len(), b.job_runs)
    };
    let verdict = if c.rose.is_empty() {
        format!(
            "PASS: no path of {file} rose beyond the noise of job {}'s history ({which})",
            b.job
        )
    } else {
        format!(
            "FAIL: {} path{} of {file} rose beyond the noise of job {}'s history ({which})",
            c.rose.len(),
            if c.rose.len() == 1 { "" } else { "s" },
            b.job
        )
    };
    for l in wrap(&verdict, "#", "#  ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    modes_note(o, &c.diff)?;
    for r in c.rose.iter().take(max) {
        writeln!(o)?;
        change_block(o, &r.change)?;
        let spread = match r.runs_sd_pts {
            Some(sd) => format!(
                "  the history's runs: {:.1} % ± {:.1} (mean ± standard deviation)",
                r.runs_mean_pct, sd
            ),
            None => format!(
                "  the history's runs: {:.1} % (too few runs for their spread)",
                r.runs_mean_pct
            ),
        };
        writeln!(o, "{spread}")?;
    }
    writeln!(o)?;
    o.push_str(&render_diff(&c.diff, max));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_dates_are_civil_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        // 2026-11-25 18:53:35 UTC.
        assert_eq!(utc(1_795_632_815_000_000_000), "2026-11-25 18:53 UTC");
        // A leap day.
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29 00:00 UTC");
    }
}
