//! `idleflow report` and `idleflow script`: read a recording, print it.

use std::fs::File;
use std::io::Write;

use anyhow::Context;
use idleflow_postproc::compare::summary::RunSummary;
use idleflow_postproc::pass::call_tree::ViewOptions;
use idleflow_postproc::pass::startup::{startup_end, StartupEnd};
use idleflow_postproc::path::FoldOptions;
use idleflow_postproc::render::text;
use idleflow_postproc::{Analysis, AnalysisOptions, Report, Window};

use crate::cli::{
    DiffArgs, ExportArgs, ExportFormat, FlamegraphArgs, Format, ReportArgs, ScriptArgs, SortArg,
    ViewArg, WeightArg, WindowArgs,
};
use idleflow_postproc::path::Fold;
use idleflow_postproc::render::flame::{self, Weight};
use idleflow_postproc::sections::arcflow::{ArcflowOptions, SortBy};
use idleflow_postproc::sections::idle_paths::MergedPaths;

/// Opens a recording; a missing one whose `.partial` exists (a recorder
/// that was killed) says so.
fn open(path: &std::path::Path) -> anyhow::Result<File> {
    File::open(path).with_context(|| {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        if partial.exists() {
            format!(
                "cannot open {}; {} exists: the recorder did not finish (killed, or an error); \
                 `idleflow report {}` reads it up to its last complete record",
                path.display(),
                partial.display(),
                partial.display()
            )
        } else {
            format!("cannot open {}", path.display())
        }
    })
}

/// The window `--from` / `--to` ask for, checked.
fn window(w: &WindowArgs) -> anyhow::Result<Window> {
    for (name, v) in [("--from", w.from), ("--to", w.to)] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                anyhow::bail!(
                    "{name} must be a number of seconds from the recording's start, not {v}"
                );
            }
        }
    }
    if let (Some(f), Some(t)) = (w.from, w.to) {
        if f >= t {
            anyhow::bail!("--from {f} must come before --to {t}");
        }
    }
    Ok(Window {
        from_s: w.from,
        to_s: w.to,
        after_startup: false,
    })
}

/// How long the program must go without a new thread for its start-up to
/// be over (`--skip-startup`).
const STARTUP_QUIET_NS: u64 = 1_000_000_000;

/// The window of `--skip-startup`: from the end of the program's start-up.
fn after_startup(path: &std::path::Path, w: &WindowArgs) -> anyhow::Result<Window> {
    let mut window = window(w)?;
    let file = std::io::BufReader::new(open(path)?);
    let start = idleflow_format::Reader::new(open(path)?)
        .with_context(|| format!("cannot read {}", path.display()))?
        .info()
        .start_ns;
    let end = startup_end(file, STARTUP_QUIET_NS)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let from = match end {
        StartupEnd::At(ns) => ns.saturating_sub(start) as f64 / 1e9,
        StartupEnd::NoProgram => anyhow::bail!(
            "--skip-startup needs a recorded program ({} was recorded system-wide, without a \
             command or --pid); give --from SECONDS instead",
            path.display()
        ),
        StartupEnd::NeverQuiet { last_new_ns } => anyhow::bail!(
            "--skip-startup: the program never went a second without starting a thread or \
             process (the last started {:.3} s into the recording); give --from SECONDS instead",
            last_new_ns.saturating_sub(start) as f64 / 1e9
        ),
    };
    if let Some(to) = window.to_s {
        if from >= to {
            anyhow::bail!("--skip-startup: the start-up ends at {from:.3} s, after --to {to}");
        }
    }
    window.from_s = Some(from);
    window.after_startup = true;
    Ok(window)
}

/// Reads and analyses the recording at `path`, building the call-tree
/// `views`, with a progress bar on a terminal.
fn analyse(path: &std::path::Path, w: &WindowArgs, views: ViewOptions) -> anyhow::Result<Analysis> {
    analyse_with(path, w, views, false)
}

/// [`analyse`], also splitting the idle into time windows when `windows`.
fn analyse_with(
    path: &std::path::Path,
    w: &WindowArgs,
    views: ViewOptions,
    windows: bool,
) -> anyhow::Result<Analysis> {
    analyse_observed(path, w, views, windows, None)
}

/// [`analyse_with`], telling `observer` (one more pass handler) every event.
fn analyse_observed(
    path: &std::path::Path,
    w: &WindowArgs,
    views: ViewOptions,
    windows: bool,
    observer: Option<&mut dyn idleflow_postproc::pass::handler::Handler>,
) -> anyhow::Result<Analysis> {
    let opts = AnalysisOptions {
        window: if w.skip_startup {
            after_startup(path, w)?
        } else {
            window(w)?
        },
        views,
        windows,
    };
    let file = open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = crate::progress::bytes_bar(size, "reading");
    // Buffered: the call trees are read in passes of small records.
    let input = std::io::BufReader::with_capacity(1 << 16, file);
    let analysis = Analysis::run_observed(input, &opts, |bytes| bar.set_position(bytes), observer)
        .with_context(|| format!("cannot read {}", path.display()))?;
    bar.finish_and_clear();
    Ok(analysis)
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let path = &args.input;
    if !(0.0..=100.0).contains(&args.min_share) {
        anyhow::bail!("--min-share must be a percentage between 0 and 100");
    }
    let arcflow = ArcflowOptions {
        per_thread: args.per_thread,
        sort: match args.sort {
            SortArg::IdleNs => SortBy::IdleNs,
            SortArg::IdleDispatches => SortBy::IdleDispatches,
            SortArg::Base => SortBy::Base,
            SortArg::Calls => SortBy::Calls,
        },
        min_share_pct: args.min_share,
    };
    let html = matches!(args.format, Format::Html);
    let analysis = analyse_with(
        path,
        &args.window,
        ViewOptions {
            arcflow,
            fold: None,
        },
        html,
    )?;
    let mut report = Report::new(&analysis, args.causes);
    report.keep_views(report_views(&args.view));
    let text_opts = text::TextOptions {
        max_threads: args.threads,
        per_cpu: args.per_cpu,
        max_paths: args.paths,
    };
    let source = path.display().to_string();
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Text => text::render(&report, &source, &text_opts),
        Format::Html => {
            use idleflow_postproc::render::html;
            let lines = MergedPaths::all(&analysis).folded_lines(html::FOLD);
            html::render(&report, &source, &lines).context("cannot draw the flame graph")?
        }
    };
    match &args.output {
        Some(file) => std::fs::write(file, out.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(out.as_bytes())?;
            stdout.flush()?;
        }
    }
    Ok(())
}

/// The per-source sections `--view` asks for.
fn report_views(asked: &[ViewArg]) -> idleflow_postproc::sections::Views {
    let mut v = idleflow_postproc::sections::Views::default();
    for a in asked {
        match a {
            ViewArg::All => v = idleflow_postproc::sections::Views::all(),
            ViewArg::Paths => {}
            ViewArg::Tree => v.tree = true,
            ViewArg::Java => v.java = true,
            ViewArg::User => v.user = true,
            ViewArg::Kernel => v.kernel = true,
            ViewArg::Blocking => v.blocking = true,
        }
    }
    v
}

pub fn script(args: ScriptArgs) -> anyhow::Result<()> {
    let path = &args.input;
    let file = open(path)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let cut = match idleflow_postproc::render::script::print(file, &mut out) {
        Err(idleflow_postproc::render::script::ScriptError::Output(e)) => Err(e.into()),
        other => other.with_context(|| format!("cannot read {}", path.display())),
    }?;
    out.flush()?;
    if let Some(c) = cut {
        eprintln!(
            "idleflow: warning: {} was cut short: printed up to its last complete record (byte {}: {})",
            path.display(),
            c.offset,
            c.reason
        );
    }
    Ok(())
}

pub fn flamegraph(args: FlamegraphArgs) -> anyhow::Result<()> {
    let weight = match args.weight {
        WeightArg::IdleNs => Weight::IdleNs,
        WeightArg::Dispatches => Weight::Dispatches,
    };
    let views = ViewOptions {
        fold: Some(FoldOptions {
            dispatches: weight == Weight::Dispatches,
            merge_threads: !args.per_thread,
        }),
        ..Default::default()
    };
    let analysis = analyse(&args.input, &args.window, views)?;
    if args.blame && weight == Weight::Dispatches {
        anyhow::bail!("--blame weighs by idle time only (--weight idle-ns)");
    }
    let view = match args.view {
        _ if args.blame => flame::View::Blame,
        _ if args.blocked => flame::View::Blocking,
        _ if args.stacks => flame::View::User,
        ViewArg::Paths => flame::View::Paths,
        ViewArg::Tree => flame::View::Tree,
        ViewArg::Java => flame::View::Java,
        ViewArg::User => flame::View::User,
        ViewArg::Kernel => flame::View::Kernel,
        ViewArg::Blocking => flame::View::Blocking,
        ViewArg::All => {
            anyhow::bail!("flamegraph draws one view: --view paths|tree|java|user|kernel|blocking")
        }
    };
    let source = flame::Source {
        view,
        by_reason: args.by_reason,
        user_only: args.user_only,
    };
    let lines = idleflow_postproc::sections::folded::folded(&analysis, source)
        .with_context(|| format!("{}", args.input.display()))?;
    let out_path = &args.output;
    let file = std::fs::File::create(out_path)
        .with_context(|| format!("cannot create {}", out_path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    if args.folded {
        for line in lines {
            writeln!(out, "{line}")?;
        }
    } else {
        flame::svg(&lines, weight, view, &mut out)
            .with_context(|| format!("cannot write {}", out_path.display()))?;
    }
    out.flush()?;
    Ok(())
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let out_path = args
        .output
        .clone()
        .unwrap_or_else(|| args.format.default_output().into());
    let file = std::fs::File::create(&out_path)
        .with_context(|| format!("cannot create {}", out_path.display()))?;
    if args.format == ExportFormat::Perfetto {
        let mut writer = idleflow_postproc::render::perfetto::PerfettoWriter::new(file)
            .context("cannot create a temporary file for the samples")?;
        let analysis = analyse_observed(
            &args.input,
            &args.window,
            ViewOptions::default(),
            false,
            Some(&mut writer),
        )?;
        writer
            .finish(&analysis)
            .with_context(|| format!("cannot write {}", out_path.display()))?;
        return Ok(());
    }
    let analysis = analyse(&args.input, &args.window, ViewOptions::default())?;
    let report = Report::new(&analysis, 0);
    let mut out = std::io::BufWriter::new(file);
    match args.format {
        ExportFormat::Perfetto => unreachable!("written above"),
        ExportFormat::Pprof => {
            let profile = idleflow_postproc::render::pprof::profile(&report);
            idleflow_postproc::render::pprof::write_gz(&profile, &mut out)
        }
        ExportFormat::Csv => {
            idleflow_postproc::render::csv::write_root_causes(&report.root_causes, &mut out)
                .map_err(std::io::Error::other)
        }
    }
    .and_then(|()| out.flush())
    .with_context(|| format!("cannot write {}", out_path.display()))?;
    Ok(())
}

/// The summary of a whole recording (its paths' idle per time window), as
/// `diff` and `history` compare it.
pub fn summarize(path: &std::path::Path) -> anyhow::Result<RunSummary> {
    let whole = WindowArgs {
        from: None,
        to: None,
        skip_startup: false,
    };
    let a = analyse_with(path, &whole, ViewOptions::default(), true)?;
    let r = Report::new(&a, 0);
    RunSummary::new(path.display().to_string(), &r)
        .context("internal: the analysis kept no time windows")
}

pub fn diff(args: DiffArgs) -> anyhow::Result<()> {
    if !(args.min_change.is_finite() && (0.0..=100.0).contains(&args.min_change)) {
        anyhow::bail!("--min-change must be points of share between 0 and 100");
    }
    let whole = WindowArgs {
        from: None,
        to: None,
        skip_startup: false,
    };
    let read = |path: &std::path::Path| -> anyhow::Result<(Analysis, Report)> {
        let a = analyse_with(path, &whole, ViewOptions::default(), true)?;
        let r = Report::new(&a, 0);
        Ok((a, r))
    };
    let (base_a, base) = read(&args.base)?;
    let (new_a, new) = read(&args.new)?;
    if args.svg {
        let fold = FoldOptions {
            dispatches: false,
            merge_threads: true,
        };
        let folded = |a: &Analysis| MergedPaths::all(a).folded_lines(fold);
        let lines = idleflow_postproc::compare::diff::differential_folded(
            &folded(&base_a),
            &folded(&new_a),
        )?;
        if lines.is_empty() {
            anyhow::bail!("neither recording has idle-causing paths to draw");
        }
        let file = std::fs::File::create(&args.output)
            .with_context(|| format!("cannot create {}", args.output.display()))?;
        let mut out = std::io::BufWriter::new(file);
        flame::differential_svg(&lines, &mut out)
            .with_context(|| format!("cannot write {}", args.output.display()))?;
        out.flush()?;
        return Ok(());
    }
    let base_run = RunSummary::new(args.base.display().to_string(), &base);
    let new_run = RunSummary::new(args.new.display().to_string(), &new);
    let (Some(base_run), Some(new_run)) = (base_run, new_run) else {
        anyhow::bail!("internal: the analyses kept no time windows");
    };
    let d = idleflow_postproc::compare::diff::diff(&base_run, &new_run, args.min_change);
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&d)? + "\n",
        Format::Text => idleflow_postproc::compare::diff_text::render_diff(&d, args.paths),
        Format::Html => anyhow::bail!("diff writes text or JSON (--svg for a flame graph)"),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
