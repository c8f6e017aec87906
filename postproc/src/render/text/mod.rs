//! The report as text for people: aligned tables, times in ms, counts with
//! thousands separators. Pure formatting of a [`Report`]: no numbers are
//! computed here that the JSON does not carry.
//!
//! One module per part of the report, in the order they print: the
//! answer (`headline`, `root_causes`), the `header`, the merged
//! `paths`, the `cpus`, each source's own section (`arcflow`,
//! `java_waits`, and the call, blocking and kernel paths in `paths`),
//! then the `threads`. `layout` holds the width and the fitting and
//! wrapping every one of them uses, `frames` the frames in words.
//!
//! Invariant: every line fits in [`WIDTH`] columns, and the same report
//! gives the same bytes (the golden tests hold every format to that).

use std::fmt::{self, Write};

use crate::sections::Report;

mod arcflow;
mod cpus;
mod frames;
mod header;
mod headline;
mod java_waits;
mod layout;
mod paths;
mod root_causes;
mod threads;

pub(crate) use frames::{frame_words, shown_frames_of};
pub(crate) use headline::{cause_words, GROUPED_SHOWN, HEADLINE_MIN_SHARE, HEADLINE_PATHS};
pub(crate) use layout::wrap;
pub use layout::WIDTH;
pub(crate) use root_causes::{link_words, part_of, root_words};

/// Options of the text layout. The default is one screen: the answer,
/// the header and the top merged paths; the tables come on request.
#[derive(Debug, Clone)]
pub struct TextOptions {
    /// Threads shown in the blocked-thread table, with the threads whose
    /// leaving made a CPU idle before it (0: neither; JSON has all).
    pub max_threads: usize,
    /// The per-CPU table and the idle causes of each CPU it shows.
    pub per_cpu: bool,
    /// Idle-causing paths shown, merged and per source (JSON has all).
    pub max_paths: usize,
    /// Root causes shown, at most (those of 1 % of the idle or more).
    pub max_roots: usize,
    /// Fit the report into this many lines by showing fewer merged paths,
    /// then fewer root causes (never fewer than one of each); `None`:
    /// `max_paths` and `max_roots` whatever the length.
    pub fit_lines: Option<usize>,
}

/// Merged paths the default report shows, at most.
pub const DEFAULT_PATHS: usize = 3;

/// Root causes the default report shows, at most.
pub const DEFAULT_ROOTS: usize = 4;

/// One screen: the default report's lines, at most (issue 41), where one
/// merged path is enough to keep it there.
pub const SCREEN_LINES: usize = 60;

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            max_threads: 0,
            per_cpu: false,
            max_paths: DEFAULT_PATHS,
            max_roots: DEFAULT_ROOTS,
            fit_lines: Some(SCREEN_LINES),
        }
    }
}

/// Renders `r` as text: with `fit_lines`, as many of the top paths as keep
/// it within that many lines (each of them whole), one at least; then, if
/// one path is still too many lines, as many of the top root causes, one
/// at least (a line says how many more there are).
pub fn render(r: &Report, source: &str, opts: &TextOptions) -> String {
    let mut shown = opts.clone();
    loop {
        let mut o = String::new();
        let _ = render_into(&mut o, r, source, &shown, opts.max_roots);
        match opts.fit_lines {
            Some(n) if o.lines().count() > n => {
                if shown.max_paths > 1 {
                    shown.max_paths -= 1;
                } else if shown.max_roots > 1 {
                    shown.max_roots -= 1;
                } else {
                    return o;
                }
            }
            _ => return o,
        }
    }
}

/// The answer: the report's first lines, its headline (the merged paths)
/// and its root causes. [`render`] begins with it; the HTML page shows it.
pub fn render_answer(r: &Report) -> String {
    render_answer_with(r, DEFAULT_ROOTS, DEFAULT_ROOTS)
}

/// [`render_answer`] with `roots` root causes at most, of the `asked`
/// (a line says how many of those were left out to fit).
fn render_answer_with(r: &Report, roots: usize, asked: usize) -> String {
    let mut o = String::new();
    if let Some(f) = &r.flight {
        // A dump leads with the moment that fired.
        let at = |ns: u64| ns.saturating_sub(r.recording_start_ns) as f64 / 1e9;
        let _ = layout::write_wrapped(
            &mut o,
            &format!(
                "flight recorder dump {}: '{}' fired at {:.3} s of {:.3} s: {}",
                f.number,
                f.trigger,
                at(f.fired_ns),
                at(r.stop_ns),
                f.state
            ),
            "#",
            "#  ",
        );
    }
    let _ = headline::render_headline(&mut o, r)
        .and_then(|()| root_causes::render_root_causes(&mut o, &r.root_causes, roots, asked));
    o
}

/// The whole report: the answer (with `opts.max_roots` root causes of the
/// `asked_roots`), the header, then each section in turn.
fn render_into(
    o: &mut String,
    r: &Report,
    source: &str,
    opts: &TextOptions,
    asked_roots: usize,
) -> fmt::Result {
    o.push_str(&render_answer_with(r, opts.max_roots, asked_roots));
    writeln!(o)?;
    header::render_header(o, r, source)?;
    paths::render_idle_paths(o, &r.idle_paths, opts.max_paths)?;
    if opts.per_cpu {
        cpus::render_cpus(o, r)?;
    } else {
        cpus::render_kernel_notes(o, r)?;
    }
    if opts.per_cpu || opts.max_threads > 0 {
        cpus::render_idle_causes(o, r, opts.per_cpu)?;
    }
    render_sources(o, r, opts.max_paths)?;
    if opts.max_threads > 0 {
        threads::render_threads(o, r, opts.max_threads)?;
    }
    render_more(o, r, opts)
}

/// Each source's own section, where the report has it, then why there is
/// no call tree.
fn render_sources(o: &mut String, r: &Report, max_paths: usize) -> fmt::Result {
    if let Some(af) = &r.arcflow {
        arcflow::render_arcflow(o, af)?;
    }
    if let Some(jw) = &r.java_waits {
        java_waits::render_java_waits(o, jw, max_paths)?;
    }
    if let Some(cp) = &r.call_paths {
        paths::render_call_paths(o, cp, max_paths)?;
    }
    if let Some(bp) = &r.blocking_paths {
        paths::render_blocking_paths(o, bp, max_paths)?;
    }
    if let Some(kw) = &r.kernel_waits {
        paths::render_kernel_waits(o, kw, max_paths)?;
    }
    if !r.no_tree.is_empty() {
        writeln!(o)?;
        writeln!(o, "## No call tree")?;
        for why in &r.no_tree {
            writeln!(o, "{}", layout::fit(&format!("# {why}"), WIDTH))?;
        }
    }
    Ok(())
}

/// The last lines: what else the report can show.
fn render_more(o: &mut String, r: &Report, opts: &TextOptions) -> fmt::Result {
    writeln!(o)?;
    let mut views = Vec::new();
    if r.arcflow.is_none() {
        views.push("tree");
    }
    if r.java_waits.is_none() {
        views.push("java");
    }
    if r.call_paths.is_none() {
        views.push("user");
    }
    if r.kernel_waits.is_none() {
        views.push("kernel");
    }
    if r.blocking_paths.is_none() {
        views.push("blocking");
    }
    let mut more = vec!["--paths N"];
    if opts.max_threads == 0 {
        more.push("--threads");
    }
    if !opts.per_cpu {
        more.push("--per-cpu");
    }
    writeln!(
        o,
        "{}",
        layout::fit(
            &format!(
                "# more: {}; each source's own section: --view {}",
                more.join(", "),
                views.join("|")
            ),
            WIDTH
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass::file::RecordingFile;
    use crate::AnalysisOptions;

    /// The report of a committed recording (`tests/golden/recordings`).
    fn golden_report(name: &str) -> Report {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/golden/recordings")
            .join(name);
        let analysis = RecordingFile::open(&path)
            .expect("the golden recording opens")
            .analyse(&AnalysisOptions::default(), |_| {}, None)
            .expect("the golden recording reads");
        Report::new(&analysis, 5)
    }

    /// How many merged paths a text report shows (their count line says
    /// how many more there are).
    fn paths_shown(text: &str) -> usize {
        let section = text
            .split("## Idle-causing paths")
            .nth(1)
            .expect("the paths section");
        section
            .lines()
            .skip(2)
            .take_while(|l| !l.is_empty() && !l.starts_with('('))
            .filter(|l| {
                l.trim_start()
                    .as_bytes()
                    .first()
                    .is_some_and(u8::is_ascii_digit)
            })
            .count()
    }

    #[test]
    fn a_report_fits_its_lines_by_showing_fewer_paths_one_at_least() {
        let r = golden_report("holders-waits.idleflow");
        let free = TextOptions {
            fit_lines: None,
            ..TextOptions::default()
        };
        let all = render(&r, "t", &free);
        assert_eq!(paths_shown(&all), DEFAULT_PATHS, "{all}");
        let fitted = render(
            &r,
            "t",
            &TextOptions {
                fit_lines: Some(all.lines().count() - 1),
                ..free.clone()
            },
        );
        assert!(fitted.lines().count() < all.lines().count(), "{fitted}");
        assert_eq!(paths_shown(&fitted), DEFAULT_PATHS - 1, "{fitted}");
        // The rest of the report is the same; the count of paths not shown
        // grows with the paths dropped.
        assert!(all.starts_with(fitted.split("## Idle-causing paths").next().unwrap()));
        let one = render(
            &r,
            "t",
            &TextOptions {
                fit_lines: Some(1),
                ..free
            },
        );
        assert_eq!(paths_shown(&one), 1, "{one}");
        assert!(one.contains("more paths: --paths N shows more"), "{one}");
    }

    /// Root causes shown: their lines (`# {share:>5.1} % …`) under the
    /// root causes' head, chains and notes (the continued idle's share is
    /// written the same way) left out.
    fn roots_shown(report: &str) -> usize {
        report
            .lines()
            .skip_while(|l| !l.starts_with("# Root causes"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter(|l| {
                l.starts_with("# ")
                    && l.get(2..7).is_some_and(|n| n.trim().parse::<f64>().is_ok())
                    && l.get(7..9) == Some(" %")
                    && !l.contains(" % of idle followed")
            })
            .count()
    }

    #[test]
    fn one_path_still_too_long_shows_fewer_root_causes_and_says_how_many_more() {
        let r = golden_report("holders.idleflow");
        let free = TextOptions {
            fit_lines: None,
            ..TextOptions::default()
        };
        let all = render(&r, "t", &free);
        let roots = roots_shown(&all);
        assert!((2..=DEFAULT_ROOTS).contains(&roots), "{all}");
        assert!(!all.contains("more root cause"), "{all}");
        // One line fewer than one path and every root take: one root less.
        let one_path = render(
            &r,
            "t",
            &TextOptions {
                max_paths: 1,
                fit_lines: None,
                ..TextOptions::default()
            },
        );
        let fitted = render(
            &r,
            "t",
            &TextOptions {
                fit_lines: Some(one_path.lines().count() - 1),
                ..free.clone()
            },
        );
        assert_eq!(paths_shown(&fitted), 1, "{fitted}");
        assert_eq!(roots_shown(&fitted), roots - 1, "{fitted}");
        assert!(
            fitted.contains("+1 more root cause of 1 % or more"),
            "{fitted}"
        );
        assert!(
            fitted.lines().count() < one_path.lines().count(),
            "{fitted}"
        );
        // Never fewer than one.
        let least = render(
            &r,
            "t",
            &TextOptions {
                fit_lines: Some(1),
                ..free
            },
        );
        assert_eq!(roots_shown(&least), 1, "{least}");
        assert!(
            least.contains(&format!("+{} more root causes", roots - 1)) || roots == 2,
            "{least}"
        );
    }
}
