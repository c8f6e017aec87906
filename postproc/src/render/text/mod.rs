//! The report as text for people: aligned tables, times in ms, counts with
//! thousands separators. Pure formatting of a [`Report`]: no numbers are
//! computed here that the JSON does not carry.

use std::fmt::Write;

use crate::reasons::{KernelReason, Reason};
use crate::sections::{CpuRow, Report};

/// Options of the text layout.
#[derive(Debug, Clone)]
pub struct TextOptions {
    /// Threads shown in the blocked-thread table (JSON has all).
    pub max_threads: usize,
    /// Every CPU's row and its own idle causes, however many CPUs.
    pub per_cpu: bool,
    /// Idle-causing Java paths shown (JSON has all).
    pub max_paths: usize,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            max_threads: 25,
            per_cpu: false,
            max_paths: 10,
        }
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// A threshold in ms, without trailing zeros: `10`, `0.5`.
fn ms_short(ns: u64) -> String {
    let s = ms(ns);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Width of the thread-name column.
const COMM: usize = 20;

/// `s` fitted into `width` characters: a longer one keeps its start and
/// its end around `…` (a pool thread's number, a command's last argument).
/// Above this many CPUs the per-CPU table shows the extremes only.
const MANY_CPUS: usize = 16;
/// The most and the least idle CPUs shown then.
const EXTREME_CPUS: usize = 5;

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

/// `text` as lines of at most `width` characters, broken at spaces, the
/// first starting with `first`, the others with `rest` (a word longer than
/// a line is cut by [`fit`]).
pub(crate) fn wrap(text: &str, first: &str, rest: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut words = 0;
    for word in text.split_whitespace() {
        if words > 0 && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            words = 0;
        }
        line.push(' ');
        line.push_str(word);
        words += 1;
    }
    lines.push(line);
    lines.into_iter().map(|l| fit(&l, width)).collect()
}

fn fit(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    let head = (width.saturating_sub(1) * 2) / 3;
    let tail = width.saturating_sub(1 + head);
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// The width every line of the text report fits in.
pub const WIDTH: usize = 120;

/// A Java method name fitted into `width` characters: package names
/// abbreviated from the left (`org.apache.catalina.X.m` → `o.a.catalina.X.m`),
/// then, if still too long, cut from the left behind `…`. The class and
/// method stay whole where they fit. JSON carries every name in full.
fn fit_method(name: &str, width: usize) -> String {
    let len = |s: &str| s.chars().count();
    if len(name) <= width {
        return name.to_string();
    }
    let mut parts: Vec<String> = name.split('.').map(str::to_string).collect();
    // Keep `Class.method` (the last two parts) whole.
    for i in 0..parts.len().saturating_sub(2) {
        if let Some(c) = parts[i].chars().next() {
            parts[i] = c.to_string();
        }
        let joined = parts.join(".");
        if len(&joined) <= width {
            return joined;
        }
    }
    let joined = parts.join(".");
    let keep = width.saturating_sub(1);
    let tail: String = joined
        .chars()
        .skip(len(&joined).saturating_sub(keep))
        .collect();
    format!("…{tail}")
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

/// The answer: the report's first lines, its headline (the merged paths)
/// and its root causes. [`render`] begins with it; the HTML page shows it.
pub fn render_answer(r: &Report) -> String {
    let mut o = String::new();
    let _ = render_headline(&mut o, r).and_then(|()| render_root_causes(&mut o, &r.root_causes));
    o
}

fn render_into(o: &mut String, r: &Report, source: &str, opts: &TextOptions) -> std::fmt::Result {
    o.push_str(&render_answer(r));
    writeln!(o)?;
    writeln!(
        o,
        "{}",
        fit(&format!("# idleflow report of {source}"), WIDTH)
    )?;
    let what = if r.command.is_empty() {
        if r.target_pids.is_empty() {
            "system-wide".to_string()
        } else {
            format!("pid {:?}", r.target_pids)
        }
    } else {
        format!("`{}`", r.command.join(" "))
    };
    writeln!(o, "{}", fit(&format!("# {what}"), WIDTH))?;
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
        for l in wrap(&line, "#", "#  ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
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
    for l in wrap(&line, "#", "#  ", WIDTH) {
        writeln!(o, "{l}")?;
    }
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
    if !r.tool.tids.is_empty() {
        let t = &r.tool;
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
    }
    // Gaps are always counted in the table; the warning is for gaps that
    // matter: records lost, or unknown time over 0.5 % of the CPUs' time.
    let cpu_time = r.duration_ns.saturating_mul(r.cpus as u64).max(1);
    let unknown_pct = r.total.unknown_ns as f64 * 100.0 / cpu_time as f64;
    if r.lost_events > 0 || unknown_pct > 0.5 {
        writeln!(
            o,
            "# WARNING: {} records lost, {:.2} % of the CPUs' time unknown: idle lies between `idle ms` and",
            count(r.lost_events),
            unknown_pct
        )?;
        writeln!(
            o,
            "#   `idle ms + unknown ms`{}",
            if r.lost_events > 0 {
                "; record again with a larger --ring-size"
            } else {
                ""
            }
        )?;
    }
    render_idle_paths(o, &r.idle_paths, opts.max_paths)?;
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
    let rows: Vec<&CpuRow> = if opts.per_cpu || r.per_cpu.len() <= MANY_CPUS {
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
    };
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
    // All CPUs together; each CPU's own with --per-cpu.
    let blocks: Vec<&CpuRow> = if opts.per_cpu {
        r.per_cpu.iter().chain(std::iter::once(&r.total)).collect()
    } else {
        vec![&r.total]
    };
    for c in blocks {
        if c.idle_causes.is_empty() {
            continue;
        }
        if opts.per_cpu {
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
    if let Some(af) = &r.arcflow {
        render_arcflow(o, af)?;
    }
    if let Some(jw) = &r.java_waits {
        render_java_waits(o, jw, opts.max_paths)?;
    }
    if let Some(cp) = &r.call_paths {
        render_call_paths(o, cp, opts.max_paths)?;
    }
    if let Some(bp) = &r.blocking_paths {
        render_blocking_paths(o, bp, opts.max_paths)?;
    }
    if let Some(kw) = &r.kernel_waits {
        render_kernel_waits(o, kw, opts.max_paths)?;
    }
    if !r.no_tree.is_empty() {
        writeln!(o)?;
        writeln!(o, "## No call tree")?;
        for why in &r.no_tree {
            writeln!(o, "{}", fit(&format!("# {why}"), WIDTH))?;
        }
    }
    writeln!(o)?;
    let scope = if r.target_pids.is_empty() {
        "all threads".to_string()
    } else {
        format!("threads of process {:?} and its children", r.target_pids)
    };
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "## Blocked-thread statistics ({scope}; {} of {} shown, most runtime first)",
                r.threads.len().min(opts.max_threads),
                r.threads.len()
            ),
            WIDTH
        )
    )?;
    writeln!(
        o,
        "(run%, wait%, blk%: running, runnable but waiting for a CPU, blocked; idle ms: idle after its leaving)"
    )?;
    writeln!(
        o,
        "{:>7} {:>7} {:<20} {:>10} {:>8} {:>8} {:>8} {:>7} {:>5} {:>5} {:>5} {:>7} {:>9}",
        "pid",
        "tid",
        "comm",
        "runtime ms",
        "slices",
        "max ms",
        "non-run",
        "preempt",
        "run%",
        "wait%",
        "blk%",
        "to-idle",
        "idle ms"
    )?;
    for t in r.threads.iter().take(opts.max_threads) {
        writeln!(
            o,
            "{:>7} {:>7} {:<20} {:>10} {:>8} {:>8} {:>8} {:>7} {:>5.1} {:>5.1} {:>5.1} {:>7} {:>9}",
            t.pid,
            t.tid,
            fit(&t.comm, COMM),
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
    render_more(o, r)?;
    Ok(())
}

/// The report's first lines, its answer: the window, the CPUs, how idle
/// they were, how much of it the paths explain, then the top paths one
/// line each.
fn render_headline(o: &mut String, r: &Report) -> std::fmt::Result {
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
    for c in ip.causes.iter().take(HEADLINE_PATHS) {
        if c.share_pct < HEADLINE_MIN_SHARE {
            break;
        }
        for l in cause_lines(&format!("# {:>5.1} %  ", c.share_pct), c, WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    let rest = &ip.not_in_paths;
    let part = |ns: u64| ns as f64 * 100.0 / ip.idle_ns.max(1) as f64;
    let mut not_in = Vec::new();
    for (ns, what) in [
        (
            rest.no_cause_ns,
            "idle since the window's start or a stream break",
        ),
        (rest.other_processes_ns, "after other processes"),
        (rest.idleflow_ns, "after idleflow's own threads"),
    ] {
        if part(ns) >= 0.05 {
            not_in.push(format!("{:.1} % {what}", part(ns)));
        }
    }
    if !not_in.is_empty() {
        let line = format!("not in the paths: {}", not_in.join("; "));
        for l in wrap(&line, "#  ", "#    ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    if let Some(j) = &ip.java {
        if j.java_idle_ns > 0 || j.before_recorder_ns > 0 {
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
                    "; {} ms came before their JVM's flight recorder ran",
                    ms(j.before_recorder_ns)
                ));
            }
            for l in wrap(&line, "#  ", "#    ", WIDTH) {
                writeln!(o, "{l}")?;
            }
        }
    }
    Ok(())
}

/// Roots shown, at most, and the smallest share shown, %.
const ROOTS_SHOWN: usize = 5;
const ROOT_MIN_SHARE: f64 = 0.5;

/// The root causes of idle: per root its share, what the root thread did
/// and where, then the chain that led to it, from the victims' wait out
/// (`←`, at most three links: the victims', the last, and how many between).
fn render_root_causes(
    o: &mut String,
    rc: &crate::sections::root_causes::RootCausesSection,
) -> std::fmt::Result {
    use crate::sections::root_causes::RootKind as K;
    if rc.roots.is_empty() {
        return Ok(());
    }
    writeln!(o, "#")?;
    let part = |ns: u64| ns as f64 * 100.0 / rc.idle_ns.max(1) as f64;
    let kinds: Vec<String> = [
        ("code paths", rc.by_kind[0]),
        ("devices", rc.by_kind[1]),
        ("CPU contention", rc.by_kind[2]),
        ("unknown", rc.by_kind[3]),
    ]
    .iter()
    .filter(|(_, ns)| part(*ns) >= 0.05)
    .map(|(what, ns)| format!("{what} {:.1} %", part(*ns)))
    .collect();
    let head = format!(
        "Root causes of idle (each idle interval followed down its wait chain): {}",
        kinds.join(", ")
    );
    for l in wrap(&head, "#", "#   ", WIDTH) {
        writeln!(o, "{l}")?;
    }
    let who = |t: &crate::sections::idle_paths::PathThreads| {
        if t.count > 1 {
            format!("{} ×{}", fit(&t.name, 40), t.count)
        } else {
            fit(&t.name, 40)
        }
    };
    let at = |f: Option<&crate::path::PathFrame>| {
        f.map(|f| format!(" in {}", frame_words(&f.frame)))
            .unwrap_or_default()
    };
    for root in rc.roots.iter().take(ROOTS_SHOWN) {
        if root.share_pct < ROOT_MIN_SHARE {
            break;
        }
        // Frames that are the release site's are told as such.
        let frame = if root.frames_from_release {
            String::new()
        } else {
            at(root.frame())
        };
        let released = root
            .release
            .as_ref()
            // Only where the release is in the program's code.
            .filter(|r| r.program_frame.is_some())
            .and_then(|r| r.frame())
            .filter(|f| {
                root.frames_from_release || root.frame().map(|g| &g.frame) != Some(&f.frame)
            })
            .map(|f| format!("; released the waiters in {}", frame_words(&f.frame)))
            .unwrap_or_default();
        let object = if root.object.is_empty() {
            String::new()
        } else {
            format!(" on {}", fit_method(&root.object, 40))
        };
        let words = match root.kind {
            K::Path => format!(
                "{} running{frame} (its next wait: {})",
                who(&root.threads),
                root.reason.replace("running, then ", "")
            ),
            K::Device => format!(
                "{} {}{object}{frame}, ended by the {}",
                who(&root.threads),
                root.reason,
                root.device.as_deref().unwrap_or("interrupt")
            ),
            K::Contention => format!(
                "{} runnable, not yet on a CPU (waking up, or CPU contention)",
                who(&root.threads)
            ),
            K::Unknown => format!(
                "{} {}{object}{frame}, no waker seen",
                who(&root.threads),
                root.reason
            ),
        };
        let words = words + &released;
        let first = format!("# {:>5.1} %", root.share_pct);
        for l in wrap(&words, &first, "#          ", WIDTH) {
            writeln!(o, "{l}")?;
        }
        let n = root.chain.len();
        for (i, link) in root.chain.iter().enumerate().rev() {
            if n > 3 && i > 0 && i < n - 1 {
                if i == n - 2 {
                    writeln!(o, "#         ← … {} more links", n - 2)?;
                }
                continue;
            }
            let object = if link.object.is_empty() {
                String::new()
            } else {
                format!(" on {}", fit_method(&link.object, 40))
            };
            let convoy = if link.hops > 1 {
                format!(", a convoy of up to {} hand-offs", link.hops)
            } else {
                String::new()
            };
            // A futex's address says the wait was a futex wait.
            let futex_wait = link.reason == Reason::Kernel(KernelReason::FutexWait);
            let reason = if link.object.starts_with("futex ") && futex_wait {
                String::new()
            } else {
                format!(" ({})", link.reason)
            };
            let line = format!(
                "← {} waiting{reason}{object}{}{convoy} [{:.1} %]",
                who(&link.threads),
                at(link.frame()),
                part(link.idle_ns)
            );
            for l in wrap(&line, "#        ", "#            ", WIDTH) {
                writeln!(o, "{l}")?;
            }
        }
    }
    if part(rc.continued_ns) >= 0.05 {
        let line = format!(
            "{:.1} % of the idle came after threads that woke on an idle CPU by an interrupt and raised no wake-up ({} \
             times): followed down the chain of the idle they interrupted",
            part(rc.continued_ns),
            count(rc.continued_intervals)
        );
        for l in wrap(&line, "#  ", "#    ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    for k in rc.wait_graph.knots.iter().take(3) {
        let waits = if k.waits_on.is_empty() {
            String::new()
        } else {
            format!(", waiting on {}", k.waits_on.join(", "))
        };
        let line = format!(
            "knot (threads that wait only on each other or on devices): {} — {:.1} % of the idle ends in it{waits}",
            k.pools.join(" + "),
            k.share_pct
        );
        for l in wrap(&line, "#  ", "#    ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    if part(rc.no_stack_ns) >= 1.0 && !rc.stacks_at_waits {
        let line = format!(
            "{:.1} % of the idle ends in a root with no stack: stacks were taken only where a CPU went idle; \
             record with --stacks waits for every root's frames",
            part(rc.no_stack_ns)
        );
        for l in wrap(&line, "#  ", "#    ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    Ok(())
}

/// Top paths in the headline.
const HEADLINE_PATHS: usize = 5;
/// The smallest share of idle a headline path has, %.
const HEADLINE_MIN_SHARE: f64 = 0.5;

/// A cause in words, after `prefix`, in lines of at most `width`
/// characters: `monitor enter on Ledger — worker-* ×8 in Ledger.post:74,
/// held by one of them`. One line where the whole names fit, or the
/// holder's and the threads' names shortened; else two or more, the names
/// shortened and the program's frame whole (JSON carries every name in
/// full).
fn cause_lines(prefix: &str, c: &crate::sections::idle_paths::Cause, width: usize) -> Vec<String> {
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
fn cause_words(c: &crate::sections::idle_paths::Cause, holder: usize, names: usize) -> String {
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
    if !c.program {
        s.push_str(if c.jvm_internal {
            " (HotSpot, not the program's code)"
        } else {
            " (no program frame)"
        });
    }
    let who = |h: &crate::sections::idle_paths::OtherThread| {
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

/// A frame in words: its name, `:line` where known, `[jit]`,
/// `[interpreted]`, `[inlined]` for how Java code ran.
pub(crate) fn frame_words(f: &crate::path::Frame) -> String {
    use crate::path::FrameKind as K;
    let mut s = f.name.clone();
    if f.line > 0 {
        s.push_str(&format!(":{}", f.line));
    }
    match f.kind {
        K::Jit => s.push_str(" [jit]"),
        K::Interpreted => s.push_str(" [interpreted]"),
        K::Inlined => s.push_str(" [inlined]"),
        _ => {}
    }
    s
}

/// Frames shown per merged path (JSON has all).
const MERGED_FRAMES: usize = 9;

/// The merged idle-causing paths: per path its figures, the process, the
/// reason and object, the threads (and the holders or notifiers), then the
/// frames from the kernel's wait out, around the program's own code.
fn render_idle_paths(
    o: &mut String,
    ip: &crate::sections::idle_paths::IdlePathsSection,
    max_paths: usize,
) -> std::fmt::Result {
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
        let names = shown_frames(p);
        if names.is_empty() {
            continue;
        }
        for l in wrap(&names.join(" ← "), "at", "  ", WIDTH - PATH_INDENT)
            .into_iter()
            .take(3)
        {
            writeln!(o, "{:PATH_INDENT$}{l}", "")?;
        }
    }
    more_paths(o, ip.paths.len(), max_paths)?;
    render_notes(o, &ip.notes)
}

/// The frames of a path the text shows: the kernel's wait, then up to
/// [`MERGED_FRAMES`] from two before the program's first frame, `…` where
/// frames are left out.
fn shown_frames(p: &crate::sections::idle_paths::IdlePath) -> Vec<String> {
    shown_frames_of(&p.frames, p.program_frame)
}

/// [`shown_frames`] of `f` with the program's first frame at `program_frame`.
pub(crate) fn shown_frames_of(
    f: &[crate::path::PathFrame],
    program_frame: Option<usize>,
) -> Vec<String> {
    use crate::path::FrameKind as K;
    let mut out = Vec::new();
    let user = f
        .iter()
        .position(|x| x.frame.kind != K::Kernel)
        .unwrap_or(f.len());
    if user > 0 {
        out.push(frame_words(&f[0].frame));
    }
    let start = program_frame.map_or(user, |i| i.saturating_sub(2).max(user));
    if start > user || (user > 1 && start == user && start < f.len()) {
        out.push("…".into());
    }
    let end = (start + MERGED_FRAMES).min(f.len());
    out.extend(f[start..end].iter().map(|x| frame_words(&x.frame)));
    if end < f.len() {
        out.push(format!("… {} more", f.len() - end));
    }
    out
}

/// The last lines: what else the report can show.
fn render_more(o: &mut String, r: &Report) -> std::fmt::Result {
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
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "# more: --paths N, --threads N, --per-cpu; each source's own section: --view {}",
                views.join("|")
            ),
            WIDTH
        )
    )
}

/// Frames shown per idle-causing Java path (JSON has all).
const PATH_FRAMES: usize = 8;

/// The line after a section's first `shown` of `total` paths.
fn more_paths(o: &mut String, total: usize, shown: usize) -> std::fmt::Result {
    if total > shown {
        writeln!(
            o,
            "({} more paths: --paths N shows more, --format json all)",
            total - shown
        )?;
    }
    Ok(())
}

/// Where a stack path's frames start, under its figures.
const PATH_INDENT: usize = 29;

/// A stack path's first two lines: its figures and `head` (its wait),
/// then the threads (or pools) that left there, most first.
fn render_path_head(
    o: &mut String,
    idle_ns: u64,
    share_pct: f64,
    dispatches: u64,
    head: &str,
    threads: &[(String, u64)],
) -> std::fmt::Result {
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
fn render_notes(o: &mut String, notes: &[String]) -> std::fmt::Result {
    for n in notes {
        for l in wrap(n, "# NOTE:", "#  ", WIDTH) {
            writeln!(o, "{l}")?;
        }
    }
    Ok(())
}

/// User frames shown beneath a tree row (JSON has them all).
const NATIVE_FRAMES: usize = 3;

/// Idle-causing call paths: per path, the process and the kernel's wait,
/// the threads, and the user frames (innermost first).
fn render_call_paths(
    o: &mut String,
    cp: &crate::sections::call_paths::CallPathsSection,
    max_paths: usize,
) -> std::fmt::Result {
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
        for l in wrap(&line, "#", "# ", WIDTH) {
            writeln!(o, "{l}")?;
        }
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
fn render_user_frames(
    o: &mut String,
    frames: &[crate::path::Frame],
    partial: bool,
) -> std::fmt::Result {
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
    for l in wrap(&names.join(" ← "), "at", "  ", WIDTH - PATH_INDENT) {
        writeln!(o, "{:PATH_INDENT$}{l}", "")?;
    }
    Ok(())
}

/// Blocking call paths (`record --stacks waits`): per path, the time the
/// recorded threads waited there until they ran again.
fn render_blocking_paths(
    o: &mut String,
    bp: &crate::sections::call_paths::BlockedPathsSection,
    max_paths: usize,
) -> std::fmt::Result {
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
fn render_kernel_waits(
    o: &mut String,
    kw: &crate::sections::kernel_waits::KernelWaitsSection,
    max_paths: usize,
) -> std::fmt::Result {
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
        for l in wrap(&frames.join(" ← "), "at", "  ", WIDTH - PATH_INDENT) {
            writeln!(o, "{:PATH_INDENT$}{l}", "")?;
        }
    }
    more_paths(o, kw.paths.len(), max_paths)
}

fn render_java_waits(
    o: &mut String,
    jw: &crate::sections::java_waits::JavaWaitsSection,
    max_paths: usize,
) -> std::fmt::Result {
    let share = |part: u64, whole: u64| {
        if whole == 0 {
            "-".to_string()
        } else {
            format!("{:.1} %", part as f64 * 100.0 / whole as f64)
        }
    };
    writeln!(o)?;
    if jw.jvms.is_empty() {
        writeln!(
            o,
            "## Idle-causing Java waits: no JVM's flight recording was read"
        )?;
        render_notes(o, &jw.notes)?;
        return Ok(());
    }
    let thresholds: Vec<String> = jw
        .jvms
        .iter()
        .map(|j| {
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
        })
        .collect();
    writeln!(
        o,
        "{}",
        fit(
            &format!(
                "## Idle-causing Java waits (the JVMs' flight recorders; {})",
                thresholds.join(", ")
            ),
            WIDTH
        )
    )?;
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
        for l in wrap(
            &format!(
                "no JVM wait event: {} dispatches to idle, {} ms (running, native or JVM-internal \
                 waits such as a selector's epoll_wait{shorter})",
                count(jw.unjoined_idle_dispatches_to),
                ms(jw.unjoined_idle_ns)
            ),
            "#",
            "#  ",
            WIDTH,
        ) {
            writeln!(o, "{l}")?;
        }
    }
    if jw.unrecorded_idle_dispatches_to > 0 {
        writeln!(
            o,
            "{}",
            fit(
                &format!(
                    "# while no flight recording ran (a JVM's start-up, before idleflow could start it): {} dispatches to idle, {} ms",
                    count(jw.unrecorded_idle_dispatches_to),
                    ms(jw.unrecorded_idle_ns)
                ),
                WIDTH
            )
        )?;
    }
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
    render_notes(o, &jw.notes)?;
    if jw.paths.is_empty() {
        return Ok(());
    }
    writeln!(
        o,
        "{:>10} {:>6} {:>9}  reason, then the Java stack (top first)",
        "idle ms", "share", "to-idle"
    )?;
    const INDENT: usize = 29;
    for p in jw.paths.iter().take(max_paths) {
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
    }
    more_paths(o, jw.paths.len(), max_paths)
}

fn render_arcflow(o: &mut String, af: &crate::sections::arcflow::Arcflow) -> std::fmt::Result {
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
    writeln!(
        o,
        "{:>3} {:>10} {:>10} {:>10} {:>6}  method",
        "LV", "CALLS", "BASE ms", "idle ms", "%"
    )?;
    // LV, CALLS, BASE ms, idle ms and % take 46 columns; the method gets
    // the rest of 120, indented one column a level (at most 24).
    for r in &af.rows {
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
            for l in wrap(&path.join(" ← "), &first, "   ", WIDTH - 46 - indent) {
                writeln!(
                    o,
                    "{:46}{}{}",
                    "",
                    " ".repeat(indent),
                    fit(&l, WIDTH - 46 - indent)
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{cause_lines, count, threads_line, wrap};

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

    #[test]
    fn long_java_names_are_shortened_from_the_left() {
        use super::fit_method;
        let n = "org.apache.tomcat.util.buf.StringCache.toString";
        assert_eq!(fit_method(n, 80), n);
        assert_eq!(
            fit_method(n, 40),
            "o.a.tomcat.util.buf.StringCache.toString"
        );
        assert_eq!(fit_method(n, 33), "o.a.t.u.buf.StringCache.toString");
        assert_eq!(fit_method(n, 30), "o.a.t.u.b.StringCache.toString");
        let cut = fit_method(n, 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(
            cut.starts_with('…') && cut.ends_with("Cache.toString"),
            "{cut}"
        );
    }

    #[test]
    fn notes_wrap_at_spaces() {
        let lines = wrap("aaa bbb ccc ddd", "#", "#  ", 9);
        assert_eq!(lines, ["# aaa bbb", "#   ccc", "#   ddd"]);
        assert_eq!(wrap("x", "# NOTE:", "#", 120), ["# NOTE: x"]);
    }

    #[test]
    fn thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
