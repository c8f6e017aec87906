//! The report's first lines, its answer: the window, the CPUs, how idle
//! they were and how much of it the merged paths explain, then the
//! program's own top causes one line each (two or more where the names do
//! not fit), the causes with no program frame (the runtime's own threads,
//! waits only libraries and the JVM show) together in one line, the other
//! processes' idle by name in one line, and what the paths leave out.
//!
//! Invariant: every line fits in 120 columns; a cause's names give way
//! (shortened at their middle or, for Java, from the left) before its
//! program frame does; the program's causes come first, whatever their
//! share against the others'.

use std::fmt::{self, Write};

use super::frames::frame_words;
use super::layout::{fit, fit_method, ms, wrap, write_lines, write_wrapped, GLUE, WIDTH};
use crate::reasons::{JvmReason, Reason};
use crate::sections::idle_paths::{Cause, IdlePathsSection, OtherThread};
use crate::sections::Report;

/// Top paths in the headline.
pub(crate) const HEADLINE_PATHS: usize = 5;
/// The smallest share of idle a headline path has, %.
pub(crate) const HEADLINE_MIN_SHARE: f64 = 1.0;
/// The share of the Java threads' idle with Java frames below which the
/// headline says it, %.
const JAVA_NAMED_OK: f64 = 90.0;
/// The share of all idle before the flight recorders ran from which the
/// headline says it, %.
const JAVA_BEFORE_OK: f64 = 5.0;
/// Causes named in the line of those with no program frame, at most.
pub(crate) const GROUPED_SHOWN: usize = 3;
/// The share from which a cause whose Java frames no source named says
/// which source would, %.
const HINT_MIN_SHARE: f64 = 10.0;

/// The report's first lines, its answer: the window, the CPUs, how idle
/// they were, how much of it the paths explain, then the top paths one
/// line each.
pub(super) fn render_headline(o: &mut String, r: &Report) -> fmt::Result {
    let ip = &r.idle_paths;
    let cpu_s = r.duration_ns as f64 * r.cpus as f64 / 1e9;
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# {:.1} s on {} CPUs, {:.0} % idle ({:.2} of {:.2} CPU-s); the paths below explain {:.0} % of it",
                r.duration_ns as f64 / 1e9,
                r.cpus,
                r.total.idle_pct,
                ip.idle_ns as f64 / 1e9,
                cpu_s,
                ip.explained_pct
            ),
            WIDTH
        )
    )?;
    let (program, other): (Vec<&Cause>, Vec<&Cause>) =
        ip.causes.iter().partition(|c| c.program && !c.jvm_internal);
    for c in program.iter().take(HEADLINE_PATHS) {
        if c.share_pct < HEADLINE_MIN_SHARE {
            break;
        }
        write_lines(
            o,
            0,
            cause_lines(&format!("# {:>5.1} %  ", c.share_pct), c, WIDTH),
        )?;
    }
    render_no_program(o, &other)?;
    render_other_processes(o, ip)?;
    render_not_in_paths(o, ip)?;
    render_java_share(o, ip)
}

/// The causes with no program frame in one line: the runtime's own
/// threads, and waits whose frames are all the kernel's, the libraries'
/// and the JVM's; then, for a large one whose Java frames no source named,
/// the source that would.
fn render_no_program(o: &mut String, causes: &[&Cause]) -> fmt::Result {
    let share: f64 = causes.iter().map(|c| c.share_pct).sum();
    let shown: Vec<&&Cause> = causes
        .iter()
        .filter(|c| c.share_pct >= HEADLINE_MIN_SHARE)
        .take(GROUPED_SHOWN)
        .collect();
    if shown.is_empty() {
        return Ok(());
    }
    let mut parts: Vec<String> = shown
        .iter()
        .map(|c| {
            let mut who = fit(&c.threads.name, 40);
            if c.threads.count > 1 {
                who.push_str(&format!(" ×{}", c.threads.count));
            }
            let whose = if c.jvm_internal { " (HotSpot)" } else { "" };
            format!("{} — {who}{whose} {:.1}{GLUE}%", c.reason, c.share_pct)
        })
        .collect();
    if causes.len() > shown.len() {
        parts.push(format!("+{} more", causes.len() - shown.len()));
    }
    let line = format!("no program frame: {}", parts.join("; "));
    write_wrapped(o, &line, &format!("# {share:>5.1} % "), "#          ")?;
    for c in shown
        .iter()
        .filter(|c| c.java_unnamed && c.share_pct >= HINT_MIN_SHARE)
    {
        let source = if c.reason == Reason::Jvm(JvmReason::MonitorEnter) {
            "--monitor-threshold 0 records every monitor enter"
        } else if c.java_stack_stops {
            // Stacks were taken: more of them would stop there too.
            "its stacks stop in compiled Java code: a JVM run with -XX:+PreserveFramePointer \
             (as `idleflow record -- java …` runs it) lets them through"
        } else {
            "--stacks waits takes the stacks at every wait"
        };
        let line = format!(
            "{}: no source named its Java frames ({:.1}{GLUE}%); {source}",
            fit(&c.threads.name, 40),
            c.share_pct
        );
        write_wrapped(o, &line, "#          ", "#            ")?;
    }
    Ok(())
}

/// The idle after other processes' threads, with the processes that left
/// the most and the reason of most of it, in one line.
fn render_other_processes(o: &mut String, ip: &IdlePathsSection) -> fmt::Result {
    let (share, shown) = ip.after_other_processes();
    if share < 0.05 {
        return Ok(());
    }
    let names: Vec<String> = shown
        .map(|p| {
            format!(
                "{} {:.1}{GLUE}% ({})",
                fit(&p.process, 24),
                p.share_pct,
                p.reason
            )
        })
        .collect();
    let line = if names.is_empty() {
        "after other processes".to_string()
    } else {
        format!("after other processes: {}", names.join(", "))
    };
    write_wrapped(o, &line, &format!("# {share:>5.1} % "), "#          ")
}

/// What idle the paths leave out: before any cause, after other processes,
/// after idleflow's own threads.
fn render_not_in_paths(o: &mut String, ip: &IdlePathsSection) -> fmt::Result {
    let rest = &ip.not_in_paths;
    let part = |ns: u64| ns as f64 * 100.0 / ip.idle_ns.max(1) as f64;
    let mut not_in = Vec::new();
    for (ns, what) in [
        (
            rest.no_cause_ns,
            "idle since the window's start or a stream break",
        ),
        (rest.idleflow_ns, "after idleflow's own threads"),
    ] {
        if part(ns) >= 0.05 {
            not_in.push(format!("{:.1} % {what}", part(ns)));
        }
    }
    if !not_in.is_empty() {
        let line = format!("not in the paths: {}", not_in.join("; "));
        write_wrapped(o, &line, "#  ", "#    ")?;
    }
    Ok(())
}

/// How much of the Java threads' idle has Java frames, and how much came
/// before their JVM's flight recorder ran: where that matters (less than
/// [`JAVA_NAMED_OK`] % named, or [`JAVA_BEFORE_OK`] % of the idle before the
/// flight recorder ran; the JSON always has it).
fn render_java_share(o: &mut String, ip: &IdlePathsSection) -> fmt::Result {
    if let Some(j) = &ip.java {
        let before_pct = j.before_recorder_ns as f64 * 100.0 / ip.idle_ns.max(1) as f64;
        let matters =
            (j.java_idle_ns > 0 && j.named_pct < JAVA_NAMED_OK) || before_pct >= JAVA_BEFORE_OK;
        if matters && (j.java_idle_ns > 0 || j.before_recorder_ns > 0) {
            let mut line = if j.java_idle_ns > 0 {
                format!(
                    "Java: {:.1} % of the Java threads' idle ({} ms) has Java frames",
                    j.named_pct,
                    ms(j.java_idle_ns)
                )
            } else {
                "Java: the Java threads' leaving made no CPU idle while their JVM's flight recorder ran"
                    .to_string()
            };
            if j.before_recorder_ns > 0 {
                line.push_str(&format!(
                    "; {} ms before their flight recorder ran",
                    ms(j.before_recorder_ns)
                ));
            }
            write_wrapped(o, &line, "#  ", "#    ")?;
        }
    }
    Ok(())
}

/// A cause in words, after `prefix`, in lines of at most `width`
/// characters: `monitor enter on Ledger — worker-* ×8 in Ledger.post:74,
/// held by one of them`. One line where the whole names fit, or the
/// holder's and the threads' names shortened; else two or more, the names
/// shortened and the program's frame whole (JSON carries every name in
/// full).
fn cause_lines(prefix: &str, c: &Cause, width: usize) -> Vec<String> {
    let whole = format!("{prefix}{}", cause_words(c, usize::MAX, usize::MAX));
    if whole.chars().count() <= width {
        return vec![whole];
    }
    let short = cause_words(c, 24, 40);
    let line = format!("{prefix}{short}");
    if line.chars().count() <= width {
        return vec![line];
    }
    // `wrap` puts a space before each line's first word: the lines after
    // the first start under the reason.
    let first = prefix.strip_suffix(' ').unwrap_or(prefix);
    let rest = format!("#{}", " ".repeat(prefix.chars().count().saturating_sub(2)));
    wrap(&short, first, &rest, width)
}

/// [`cause_lines`]'s words with the holder's or notifier's name fitted
/// into `holder` characters, the threads' and the object's into `names`
/// (`usize::MAX`: whole). A holder of the threads' own name is "one of
/// them".
pub(crate) fn cause_words(c: &Cause, holder: usize, names: usize) -> String {
    let short = |s: &str, w: usize| {
        if w == usize::MAX {
            s.to_string()
        } else {
            fit(s, w)
        }
    };
    let mut s = c.reason.to_string();
    if !c.object.is_empty() {
        let object = if names == usize::MAX {
            c.object.clone()
        } else {
            fit_method(&c.object, names)
        };
        s.push_str(&format!(" on {object}"));
    }
    let t = &c.threads;
    s.push_str(" — ");
    s.push_str(&short(&t.name, names));
    if t.count > 1 {
        s.push_str(&format!(" ×{}", t.count));
    }
    if c.more_threads > 0 {
        s.push_str(&format!(" +{} more", c.more_threads));
    }
    if let Some(f) = &c.frame {
        s.push_str(&format!(" in {}", frame_words(&f.frame)));
    }
    if let Some(f) = &c.caller {
        s.push_str(&format!(" ← {}", frame_words(&f.frame)));
    }
    if !c.program {
        s.push_str(if c.jvm_internal {
            " (HotSpot, not the program's code)"
        } else {
            " (no program frame)"
        });
    }
    let who = |h: &OtherThread| {
        if h.name == t.name && t.count > 1 {
            "one of them".to_string()
        } else {
            short(&h.name, holder)
        }
    };
    if let Some(h) = c.held_by.first() {
        s.push_str(&format!(", held by {}", who(h)));
    }
    if let Some(h) = c.notified_by.first() {
        s.push_str(&format!(", notified by {}", who(h)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::cause_lines;

    #[test]
    fn a_large_cause_without_java_frames_names_what_would_name_them() {
        use crate::sections::idle_paths::{Cause, PathThreads};
        let cause = |name: &str, reason: &str, share: f64, stops: bool| Cause {
            process: "java".into(),
            reason: reason.into(),
            object: String::new(),
            threads: PathThreads {
                name: name.into(),
                count: 1,
                dispatches: 10,
            },
            more_threads: 0,
            frame: None,
            caller: None,
            program: false,
            held_by: vec![],
            notified_by: vec![],
            idle_ns: 1,
            share_pct: share,
            dispatches: 10,
            paths: 1,
            jvm_internal: false,
            java_unnamed: true,
            java_stack_stops: stops,
        };
        let causes = [
            cause("poller", "epoll wait", 30.0, true),
            cause("clerk-*", "monitor enter", 20.0, true),
            cause("exec-*", "park", 12.0, false),
            cause("small", "park", 5.0, true),
        ];
        let refs: Vec<&Cause> = causes.iter().collect();
        let mut o = String::new();
        super::render_no_program(&mut o, &refs).unwrap();
        // Each hint on one line, its wrapped continuation joined.
        let joined = o.replace("\n#             ", " ");
        let hint = |who: &str| {
            joined
                .lines()
                .find(|l| l.starts_with(&format!("#           {who}: no source named")))
                .unwrap_or_else(|| panic!("no hint for {who}: {o}"))
                .to_string()
        };
        // Stacks were taken and stopped: more stacks would stop too.
        assert!(hint("poller").contains("-XX:+PreserveFramePointer"), "{o}");
        // A monitor enter is named by the flight recorder at any length.
        assert!(hint("clerk-*").contains("--monitor-threshold 0"), "{o}");
        // No stack at all: take one at every wait.
        assert!(hint("exec-*").contains("--stacks waits"), "{o}");
        // Below the hint's share, no hint.
        assert!(!o.contains("small: no source"), "{o}");
    }

    #[test]
    fn a_cause_line_fits_by_shortening_names_and_keeps_the_program_frame() {
        use crate::path::{Frame, FrameKind};
        use crate::path::{FrameSource, PathFrame};
        use crate::sections::idle_paths::{Cause, OtherThread, PathThreads};
        let pool = "H2 TCP Server (tcp://localhost:9092) thread-*";
        let c = Cause {
            process: "java".into(),
            reason: "monitor wait".into(),
            object: "org.h2.mvstore.tx.Transaction".into(),
            threads: PathThreads {
                name: pool.into(),
                count: 4,
                dispatches: 4457,
            },
            more_threads: 0,
            frame: Some(PathFrame {
                frame: Frame {
                    kind: FrameKind::Jit,
                    name: "org.h2.mvstore.tx.Transaction.waitForThisToEnd".into(),
                    line: 745,
                    file: String::new(),
                },
                source: FrameSource::Jfr,
                runtime: false,
                module: String::new(),
            }),
            caller: None,
            program: true,
            held_by: vec![],
            notified_by: vec![OtherThread {
                name: pool.into(),
                dispatches: 17,
            }],
            idle_ns: 1,
            share_pct: 0.9,
            dispatches: 4457,
            paths: 2,
            jvm_internal: false,
            java_unnamed: false,
            java_stack_stops: false,
        };
        let lines = cause_lines("#   0.9 %  ", &c, 120);
        let text = lines.join("\n");
        assert!(lines.iter().all(|l| l.chars().count() <= 120), "{text}");
        assert!(lines.len() <= 2, "{text}");
        // The frame stays whole; the pool's name gives way, its ends kept;
        // the notifier of the pool's own name is one of them.
        assert!(
            text.contains(
                "org.h2.mvstore.tx.Transaction.waitForThisToEnd:745 [jit], notified by one of them"
            ),
            "{text}"
        );
        assert!(
            text.contains("H2 TCP Server (tcp://loc") && text.contains("thread-* ×4"),
            "{text}"
        );
        assert!(
            lines[0].starts_with("#   0.9 %  monitor wait on "),
            "{text}"
        );
        assert!(lines[1].starts_with("#          org.h2"), "{text}");
        // A wide line keeps every name whole, on one line.
        let wide = cause_lines("# ", &c, 400);
        assert_eq!(wide.len(), 1);
        assert_eq!(wide[0].matches(pool).count(), 1, "{wide:?}");
        // A notifier of another name keeps it.
        let mut other = c.clone();
        other.notified_by[0].name = "janitor".into();
        assert!(cause_lines("# ", &other, 400)[0].ends_with(", notified by janitor"));
    }
}
